#!/usr/bin/python3
"""Writes the committed seeds of fuzz_native: graphgen programs as graphs.

fuzz_native compiles every graph it decodes with native code generation on;
the captured graphs in tests/data/graphs reach few lowering rules. These
seeds are random programs of tests/python/graphgen.py (pooling,
upsampling, padding, stacking, indexing with several index lists), the
forward graphs of SEEDS and the forward and backward graphs of GRAD_SEEDS
(the backward operators and index_put), so mutations start inside the
lowering rules and change the metadata they read.

Run from the repository root after `make`:
  PYTHONPATH=client/python:tests/python /usr/bin/python3 tests/fuzz/make_native_seeds.py
The seeds are committed; rerun only to change them. The regress_*.pb
seeds are inputs fuzz_native failed on, kept so that every `make fuzz`
replays them first (a signed overflow in the storage extent check, in
hardtanh's int64 bound, in slice_scatter's length with a step near
INT64_MAX, in a padding's size check, in a pooling window; a loop reading an input without elements, and a buffer of 2^63 - 1
elements, which the loop IR verifier let through).
"""

import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "client", "python"), os.path.join(ROOT, "tests", "python")]

import torch  # noqa: E402

import graphgen  # noqa: E402
import importlib  # noqa: E402

capture = importlib.import_module("compiled.capture")  # (compiled.capture is also a function)
training = importlib.import_module("compiled.training")

OUT = os.path.join(ROOT, "tests", "fuzz", "corpus", "native")
SEEDS = range(3000000, 3000016)
GRAD_SEEDS = range(3100000, 3100008)


def write(name, captured):
    with open(os.path.join(OUT, name + ".pb"), "wb") as f:
        f.write(captured.graph_module.SerializeToString())


def main():
    os.makedirs(OUT, exist_ok=True)
    for s in SEEDS:
        f, ins = graphgen.generate(s, spatial=True, extra=True).build()
        with torch.no_grad():
            write(f"fw_{s}", capture.trace(f, ins))
    for s in GRAD_SEEDS:
        f, ins = graphgen.generate(s, spatial=True, extra=True).build()
        leaves = [x.detach().requires_grad_() if x.is_floating_point() else x for x in ins]
        _, spec = torch.utils._pytree.tree_flatten(tuple(leaves))
        try:
            split = training.split(f, None, {}, 0, spec, leaves)
        except training.NotSplittable as e:
            print(f"seed {s}: {e}")
            continue
        for part, gm in (("fw", split.fw), ("bw", split.bw)):
            outs = None
            examples = [x.detach() if isinstance(x, torch.Tensor) else x for x in leaves]
            if part == "bw":
                with torch.no_grad():
                    outs = split.fw(*examples)
                tangents = [torch.zeros(o.shape, dtype=o.dtype)
                            for o, need in zip(outs[:split.num_outs], split.needs_grad) if need]
                examples = (list(outs[split.num_outs:])
                            + [examples[i] for i in split.saved_primals] + tangents)

            def graph(*xs, gm=gm):
                return gm(*xs)
            with torch.no_grad():
                write(f"grad_{part}_{s}", capture.trace(graph, examples))
    print(f"{len(os.listdir(OUT))} seeds in {OUT}")


if __name__ == "__main__":
    main()
