#!/usr/bin/env python3
"""Cold compiles: `make bench-compile`.

Not a test. For each model (eval mode, batch 8 at 224x224 for the vision
models) the graph is captured once on the client, then sent to a daemon with
an empty cache; the time from request to artifact is measured on the client
(the Compile call, fetch included), and the daemon's own per-stage timings
from the CompileResult are printed, so its share next to the C compiler is
visible:

    daemon share = (all stages but cc) / cc

Each model is compiled --repeat times, each time on a fresh daemon and empty
cache; the median is reported.

    /usr/bin/python3 bench/cold_compile.py [--only resnet18,...] [--repeat N]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

import torch  # noqa: E402

import compiled  # noqa: E402
from compiled import target  # noqa: E402
from compiled.capture import capture  # noqa: E402
from compiled.client import Client  # noqa: E402
from compiled.v1 import artifact_pb2  # noqa: E402


def vision(name):
    m = getattr(benchlib.vision_models(), name)().eval()
    return m, (torch.randn(8, 3, 224, 224),)


def transformer():
    m = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True).eval()
    return m, (torch.randn(8, 128, 512),)


CASES = {
    "resnet18": lambda: vision("resnet18"),
    "mobilenet_v2": lambda: vision("mobilenet_v2"),
    "transformer_layer": transformer,
    "densenet121": lambda: vision("densenet121"),
}
DEFAULT = "resnet18,mobilenet_v2,transformer_layer"


def compile_once(gm):
    with benchlib.Daemon() as d:
        client = Client(d.address, timeout=600)
        t0 = time.perf_counter()
        out = client.compile_outcome(gm, target=target.target_message())
        wall = time.perf_counter() - t0
    art = artifact_pb2.Artifact()
    art.ParseFromString(out.artifact)
    stages = {}
    for t in out.result.timings:
        stages[t.stage] = stages.get(t.stage, 0) + t.micros / 1e6
    return wall, stages, art


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=DEFAULT,
                    help="comma-separated cases (%s)" % ",".join(CASES))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(2)
    print(f"cc: {os.environ.get('CC', 'cc')}; {os.cpu_count()} CPUs; "
          f"target {target.target_message().arch} "
          f"{' '.join(f for f in target.cpu_features() if f.startswith('avx'))}")
    rows = []
    for name in [n for n in args.only.split(",") if n]:
        model, inputs = CASES[name]()
        t0 = time.perf_counter()
        with torch.no_grad():
            gm = capture(model, inputs)
        capture_s = time.perf_counter() - t0
        runs = [compile_once(gm) for _ in range(max(1, args.repeat))]
        runs.sort(key=lambda r: r[0])
        wall, stages, art = runs[len(runs) // 2]
        cc = stages.get("cc", 0.0)
        own = sum(v for k, v in stages.items() if k != "cc")
        native_ok = art.HasField("native_program")
        summary = art.native_program.summary if native_ok else None
        print(f"\n{name}: {len(gm.graph.nodes)} graph nodes; "
              + (f"{summary.kernels} kernels, {summary.extern} library calls, "
                 f"{summary.fallback} fallbacks, C source "
                 f"{len(art.native_program.source_zlib) / 1024:.0f} KiB zlib"
                 if native_ok else "NO native code: "
                 + "; ".join(d.message for d in art.diagnostics)))
        print("  " + "  ".join(f"{k} {v * 1000:.1f}ms" for k, v in stages.items()))
        rows.append([name, f"{capture_s:.2f}", f"{wall:.2f}",
                     f"{cc:.2f}", f"{own * 1000:.0f}",
                     f"{own / cc * 100:.1f}%" if cc else "-"])
    print()
    print(benchlib.table(rows, ["case", "capture s", "compile s",
                                "cc s", "daemon ms", "daemon/cc"]))


if __name__ == "__main__":
    main()
