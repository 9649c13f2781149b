#!/usr/bin/env python3
"""Start-up on a warm cache: `make bench-startup`.

Not a test. What a new training or serving process waits for before its
first compiled result when the cluster already has the graph. For each model
(eval mode, no_grad, batch 2, 2 threads):

- cold: one new process against a daemon with an empty cache: the time from
  ``compiled.compile(model, (x,))`` to the first result of the compiled
  function (capture, the daemon's compile, loading, the call);
- warm: --repeat new processes against the same daemon, which now holds the
  graph: the same time, median;
- eager: in each warm process, after the compiled result, an eager call
  (``model(x)``; the median of three), median over processes; and, in
  --repeat further new processes that run nothing else first, the very
  first eager call of a process (it pays torch's one-time set-up, as a
  compiled first call does).

    ratio = warm / eager      (target: at most 2 for every model)

with "eager" the warm call of the same process (the stricter of the two
baselines; the first-call baseline is printed too). Each warm process also
reports how it captured ("meta": shape-only trace, "real": on data) and
where its time went: capture, the daemon round trip, loading the artifact,
the first call.

    /usr/bin/python3 bench/startup.py [--only resnet50,...] [--repeat N]
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

MODELS = ["resnet50", "densenet121", "transformer_encoder", "vit_b_16"]


def build(name):
    import torch
    torch.manual_seed(0)
    if name == "transformer_encoder":
        layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
        return torch.nn.TransformerEncoder(layer, 6).eval(), torch.randn(2, 128, 512)
    return getattr(benchlib.vision_models(), name)().eval(), torch.randn(2, 3, 224, 224)


def child(args):
    """One measurement in this (new) process; prints JSON."""
    import torch
    torch.set_num_threads(2)
    import compiled
    model, x = build(args.model)
    out = {"model": args.model}
    with torch.no_grad():
        if args.mode == "eager-first":
            t = time.perf_counter()
            model(x)
            out["eager_first"] = time.perf_counter() - t
            print(json.dumps(out))
            return
        capture = sys.modules["compiled.capture"]
        from compiled import client as client_module
        from compiled import runtime
        spans = {}

        def timed(obj, attr, key):
            fn = getattr(obj, attr)

            def wrapper(*a, **k):
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    spans[key] = spans.get(key, 0.0) + time.perf_counter() - t0
            setattr(obj, attr, wrapper)
        timed(capture, "trace", "capture")
        timed(client_module.Client, "compile", "daemon")
        timed(runtime, "load", "load")
        t0 = time.perf_counter()
        f = compiled.compile(model, (x,), server=args.server)
        t1 = time.perf_counter()
        y = f(x)
        t2 = time.perf_counter()
        eager = []
        for _ in range(3):
            t3 = time.perf_counter()
            want = model(x)
            eager.append(time.perf_counter() - t3)
        torch.testing.assert_close(y, want, rtol=1e-3, atol=1e-3)
        out.update(first_result=t2 - t0, first_call=t2 - t1, eager=statistics.median(eager),
                   runs=f.summary().get("runs"), **spans)
        out["method"] = f.capture_method
    print(json.dumps(out))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="", help="comma-separated models")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--server", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    models = [m for m in args.only.split(",") if m] or MODELS
    me = os.path.abspath(__file__)
    rows, ratios = [], []
    with benchlib.Daemon() as daemon:
        for name in models:
            run = lambda mode: benchlib.subprocess_json(  # noqa: E731
                [me, "--child", "--model", name, "--mode", mode, "--server", daemon.address])
            cold = run("compiled")
            warm = [run("compiled") for _ in range(args.repeat)]
            first = [run("eager-first")["eager_first"] for _ in range(args.repeat)]
            med = lambda key: statistics.median(w[key] for w in warm)  # noqa: E731
            ratio = med("first_result") / med("eager")
            ratios.append(ratio)
            rows.append([name, f"{cold['first_result']:.3f}", f"{med('first_result'):.3f}",
                         f"{med('eager'):.3f}", f"{statistics.median(first):.3f}",
                         f"{ratio:.2f}", f"{med('first_result') / statistics.median(first):.2f}",
                         f"{med('capture'):.3f}", f"{med('daemon'):.3f}", f"{med('load'):.3f}",
                         f"{med('first_call'):.3f}", warm[0].get("method", "?"),
                         warm[0].get("runs", "?")])
            print(f"{name}: warm {med('first_result'):.3f} s, eager {med('eager'):.3f} s, "
                  f"ratio {ratio:.2f}", file=sys.stderr)
    print(f"start-up to first result, batch 2, 2 threads, {args.repeat} warm processes "
          "per model (medians, seconds)")
    print(benchlib.table(rows, ["model", "cold", "warm", "eager", "eager 1st", "warm/eager",
                                "warm/1st", "capture", "daemon", "load", "1st call",
                                "capture by", "runs"]))
    print(f"worst warm/eager: {max(ratios):.2f} (target: at most 2 for every model)")


if __name__ == "__main__":
    main()
