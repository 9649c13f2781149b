#!/usr/bin/env python3
"""Which inner loops of generated code gcc left scalar: `make vec-audit`.

Not a test (what gcc vectorizes depends on its version and on the target),
a diagnostic for the code generator. For each model (torchvision
classification models and a few others; train mode at batch 2, 64x64, a
forward and a backward, and the same model in eval mode under no_grad)
it compiles through a daemon of its own, builds the generated C again with
the daemon's flags and the program's own -march level plus gcc's
``-fopt-info-vec-optimized``, and lists every loop the generator marked
``#pragma omp simd`` that gcc did not vectorize, with its kernel and
first statement. Left out: loops of fewer than 16 iterations (written as
constants), loops that only fill with a constant or copy (gcc makes them
memset or memcpy calls), and the random-number block filler.

A loop listed is not necessarily slow (a transpose reads with a stride
whatever gcc does), but a pointwise or reduction loop over contiguous
elements should not be there: that is how the batch-norm backward
loops that the hoisting of invariant loads fixed were found
(docs/codegen.md, "loads the inner loop does not vary").

    /usr/bin/python3 tests/python/vec_audit.py [--only resnet18,...] [--strict]

``--strict`` exits 1 when a loop is listed.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compiled  # noqa: E402
import daemon_util  # noqa: E402
import train_zoo  # noqa: E402

MODELS = ["resnet18", "resnet50", "mobilenet_v3_large", "efficientnet_b0", "densenet121",
          "convnext_tiny", "regnet_y_400mf", "squeezenet1_1", "vit_b_16", "swin_t",
          "transformer_encoder_layer", "mlp"]

_SRC = os.environ.get("COMPILED_SRC") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))


def cflags():
    """GC_DEFAULT_CFLAGS of compiler/target.h, the flags the daemon builds with."""
    with open(os.path.join(_SRC, "compiler", "target.h")) as f:
        text = f.read()
    m = re.search(r"#define GC_DEFAULT_CFLAGS((?:.*\\\n)*.*)", text)
    return " ".join(re.findall(r'"([^"]*)"', m.group(1))).split()


def build(name):
    """(model, input) of `name`."""
    torch.manual_seed(0)
    if name == "transformer_encoder_layer":
        return torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True), \
            torch.randn(4, 64, 256)
    if name == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                                   torch.nn.Dropout(0.1), torch.nn.Linear(1024, 10)), \
            torch.randn(128, 784)
    size = train_zoo.input_size(name)
    return train_zoo.build(name), torch.randn(2, 3, size, size)


def simd_loops(c):
    """{line of the for: (kernel, header, first statement)} of the loops
    marked simd that are worth vectorizing."""
    lines = c.split("\n")
    loops, kernel = {}, "?"
    for i, line in enumerate(lines):
        m = re.match(r"static int (\w+)\(", line)
        if m:
            kernel = m.group(1)
        if "#pragma omp" not in line or "simd" not in line:
            continue
        j = i + 1
        while j < len(lines) and "for (" not in lines[j]:
            j += 1
        if j >= len(lines):
            continue
        header = lines[j].strip()
        body = []
        depth = 1
        for line2 in lines[j + 1:]:
            depth += line2.count("{") - line2.count("}")
            if depth <= 0:
                break
            body.extend(st.strip() + ";" for st in line2.split(";") if st.strip(" {}"))
        if not body or "GC_PHILOX" in " ".join(body):
            continue
        if _trip_count(lines, j, header) < 16:
            continue
        copied = set()
        plain = True
        for stmt in body:
            m = re.fullmatch(r"const \w+ (t\d+) = b\d+\[[^\[\]]*\];", stmt)
            if m:
                copied.add(m.group(1))
            elif not re.fullmatch(r"\w+\[[^\[\]]*\] = (t\d+|[-0-9.ef]+);", stmt) or (
                    stmt.split("= ")[1][:-1].startswith("t")
                    and stmt.split("= ")[1][:-1] not in copied):
                plain = False
        if plain:
            continue  # fills and copies: gcc makes them memset and memcpy calls
        first = body[0]
        loops[j + 1] = (kernel, header, first)
    return loops


def _trip_count(lines, j, header) -> int:
    """The iterations of the loop whose for is lines[j] (a large number
    when they are not constants)."""
    m = re.search(r"= (\d+); \w+ < (\d+);", header)
    if m:
        return int(m.group(2)) - int(m.group(1))
    m = re.search(r"= (\w+)_s; \w+ < \w+_t;", header)
    if m:  # a block of a streamed loop: at most the block, at most the loop
        for line in reversed(lines[:j]):
            b = re.search(rf"{m.group(1)}_t = gc_min\({m.group(1)}_s \+ (\d+), (\d+)\)", line)
            if b:
                return min(int(b.group(1)), int(b.group(2)))
    return 1 << 30


def audit_c(c, march, flags, tmp):
    """(simd loops of the unit c, those gcc left scalar)."""
    path = os.path.join(tmp, "unit.c")
    with open(path, "w") as f:
        f.write(c)
    # -fno-ipa-icf: gcc reports the loops of two identical functions once,
    # at the first one's lines
    r = subprocess.run(["gcc"] + flags + [f"-march={march}", "-mtune=generic", "-fno-ipa-icf",
                                          "-fopt-info-vec-optimized", "-o", os.devnull, path],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"gcc failed: {r.stderr[:500]}")
    done = [int(m.group(1)) for m in
            re.finditer(r":(\d+):\d+: optimized: loop vectorized", r.stderr)]
    # gcc names a loop by a statement of its body: the lines after the for
    loops = simd_loops(c)
    return len(loops), [loop for line, loop in sorted(loops.items())
                         if not any(line <= d <= line + 6 for d in done)]


def programs(name, server):
    """(label, CompiledFunction) of the training and the inference program."""
    model, x = build(name)
    cf = compiled.compile(model.train(), (x,), server=server)
    train_zoo.out(cf(x)).float().sum().backward()
    yield "train", cf
    model.eval()
    with torch.no_grad():
        cf = compiled.compile(model, (x,), server=server)
        cf(x)
    yield "eval", cf


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="")
    p.add_argument("--strict", action="store_true")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(2)
    flags = cflags()
    names = [n for n in args.only.split(",") if n] or MODELS
    total = scalar = 0
    with tempfile.TemporaryDirectory(prefix="vec-audit-") as d:
        daemon = daemon_util.Daemon(d).start()
        try:
            for name in names:
                for label, cf in programs(name, daemon.address):
                    for prog in cf.programs:
                        c = prog.c_source
                        if not c:
                            continue
                        march = prog.summary.get("target") or "x86-64"
                        count, bad = audit_c(c, march, flags, d)
                        total += count
                        scalar += len(bad)
                        print(f"{name} ({label}, {march}): {count} simd loops, "
                              f"{len(bad)} not vectorized", flush=True)
                        for kernel, header, first in bad:
                            print(f"    {kernel}: {header}  {first[:90]}")
        finally:
            daemon.stop()
    print(f"{scalar} of {total} simd loops not vectorized")
    return 1 if args.strict and scalar else 0


if __name__ == "__main__":
    sys.exit(main())
