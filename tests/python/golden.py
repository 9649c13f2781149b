"""Golden pass dumps: the state after every pass of a few committed graphs,
checked in under tests/data/golden/, so that a change in any pass shows in
review as a diff of its output.

Each file is `compilectl graph compile --verify --dump-after all` of one
graph of tests/data/graphs/ for a fixed target (an AVX2 x86-64 without BLAS
or oneDNN: the dumps must not depend on the machine), with the compiler's
build id (in the generated C's header comment, a digest of the compiler's
sources) replaced by "BUILD". tests/python/test_golden.py compares; after a
change that is meant to change them:

    make golden        (or: python tests/python/golden.py --update)

and review the diff of tests/data/golden/ with the change.
"""

import argparse
import os
import re
import subprocess
import sys

SRC = os.environ.get(
    "COMPILED_SRC", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
)
BUILD = os.environ.get("COMPILED_BUILD", os.path.join(SRC, "build"))
CTL = os.path.join(BUILD, "bin", "compilectl")
GOLDEN = os.path.join(SRC, "tests", "data", "golden")

# Small graphs that between them reach every pass and most lowering paths:
# products (addmm, bmm), pointwise chains, reductions, normalization,
# in-place updates of inputs, indexing, a convolution, and every node kind
# (scatters, scans, an interpolation's backward).
GRAPHS = ["mlp", "add_inplace", "layer_norm", "reduction_keepdim",
          "index_tensor", "attention", "conv_bn_relu", "scatter", "index_put",
          "scan_interp"]

TARGET = ["--arch", "x86_64", "--isa", "sse4.2,avx,avx2,fma,bmi2"]
BUILD_ID = re.compile(r"\(compiler build [0-9a-f]+\)")


def expected_path(name: str) -> str:
    return os.path.join(GOLDEN, name + ".txt")


def dump(name: str) -> str:
    """The dumps after every pass of graph `name`, normalized."""
    path = os.path.join(SRC, "tests", "data", "graphs", name + ".pb")
    r = subprocess.run([CTL, "graph", "compile", "--verify", "--dump-after", "all",
                        *TARGET, path], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"compilectl graph compile {name}: exit {r.returncode}: "
                           f"{r.stderr.strip()}")
    return BUILD_ID.sub("(compiler build BUILD)", r.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--update", action="store_true",
                    help="rewrite the expected files (default: compare)")
    args = ap.parse_args()
    os.makedirs(GOLDEN, exist_ok=True)
    differ = []
    for name in GRAPHS:
        text = dump(name)
        path = expected_path(name)
        old = open(path).read() if os.path.exists(path) else None
        if text != old:
            differ.append(name)
            if args.update:
                with open(path, "w") as f:
                    f.write(text)
    verb = "rewrote" if args.update else "differ"
    print(f"golden dumps: {len(GRAPHS)} graphs, {verb}: {' '.join(differ) or 'none'}")
    return 0 if args.update or not differ else 1


if __name__ == "__main__":
    sys.exit(main())
