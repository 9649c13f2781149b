#!/usr/bin/env python3
"""Every torchvision classification model through both traces: `make
capture-zoo`.

Not part of `make test` (it traces ~80 models on real data, a few
minutes). For each model (eval mode, no_grad, batch 1 at 224x224, 299 for
inception_v3) the shape-only trace and the trace on real data are compared
by canonical key (test_metatrace.keys: `compilectl graph hash`, detaches
aside). Prints one line per model: SAME, DIFFERENT (a bug: the shape-only
trace recorded another graph), or REFUSED with the reason (the capture
would trace on real data); exits 1 if any model is DIFFERENT.

    /usr/bin/python3 tests/python/metatrace_zoo.py [--only resnet50,...]
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time
import warnings

import torch

try:
    import torchvision
except ImportError:
    # also for train_zoo.py and vec_audit.py, which take torchvision from here
    sys.exit(f"{os.path.basename(sys.argv[0])} sweeps torchvision's models and needs torchvision, "
             "which has no build for the project's torch 2.13 (tests use "
             "tests/python/visionmodels.py instead). Run it from a separate venv: "
             "python3 -m venv ~/tvenv && ~/tvenv/bin/pip install torch==2.14.1 "
             "torchvision==0.29.1 -e 'client/python[test]' (a CUDA build, about 5.5 GB; it runs "
             "on the CPU), then make capture-zoo / train-zoo / vec-audit PYTHON=~/tvenv/bin/python")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compiled  # noqa: E402
import test_metatrace  # noqa: E402

capture = sys.modules["compiled.capture"]


def classification_models():
    skip = {"quantization", "detection", "segmentation", "video", "optical_flow"}
    names = []
    for name in sorted(dir(torchvision.models)):
        fn = getattr(torchvision.models, name)
        if (callable(fn) and name[0].islower() and not name.startswith(("get_", "list_"))
                and getattr(fn, "__module__", "").startswith("torchvision.models.")
                and not any(f".{s}" in fn.__module__ for s in skip)):
            names.append(name)
    return names


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    names = [n for n in args.only.split(",") if n] or classification_models()
    counts = {"SAME": 0, "DIFFERENT": 0, "REFUSED": 0, "SKIPPED": 0}
    for name in names:
        kwargs = {"aux_logits": False, "init_weights": False} if name in (
            "googlenet", "inception_v3") else {}
        try:
            model = getattr(torchvision.models, name)(**kwargs).eval()
        except (AttributeError, TypeError) as e:
            counts["SKIPPED"] += 1  # not a model builder
            print(f"{name}: SKIPPED ({e})", flush=True)
            continue
        size = 299 if name == "inception_v3" else 224
        x = torch.randn(1, 3, size, size)
        with torch.no_grad():
            t0 = time.perf_counter()
            try:
                meta = capture.trace(model, (x,), method="meta").graph_module
            except compiled.CaptureError as e:
                counts["REFUSED"] += 1
                print(f"{name}: REFUSED ({e})", flush=True)
                continue
            seconds = time.perf_counter() - t0
            real = capture.trace(model, (x,), method="real").graph_module
        with tempfile.TemporaryDirectory() as d:
            a, b = test_metatrace.keys([meta, real], pathlib.Path(d))
        verdict = "SAME" if a is not None and a == b else "DIFFERENT"
        counts[verdict] += 1
        print(f"{name}: {verdict} ({len(meta.graph.nodes)} nodes, shape-only trace "
              f"{seconds:.3f} s)", flush=True)
    print(" ".join(f"{k.lower()} {v}" for k, v in counts.items()))
    return 1 if counts["DIFFERENT"] else 0


if __name__ == "__main__":
    sys.exit(main())
