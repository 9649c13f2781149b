#!/usr/bin/env python3
"""Dynamic shapes: one program for every size, `make bench-dynamic`.

Not a test. Two models served at many sizes, each size once, in order
(2 threads, eval mode, no_grad):

- transformer: a stack of 2 ``TransformerEncoderLayer``s (d_model 128, 4
  heads, feed-forward 256, batch 2) at 32 sequence lengths from 1 to 512,
  its fused inference kernel off (``torch.backends.mha``: else every side
  calls that one ATen operator);
- cnn: conv-bn-relu-pool twice and a linear layer on 32x32 images, at
  every batch size from 1 to 64.

Sides, each in a new process with empty caches (its own Inductor cache
directory; a daemon with an empty cache for each compiled side):

- eager;
- Inductor with ``dynamic=None`` (torch.compile's default: static, then
  "automatic dynamic" once a size changed) and ``dynamic=True``;
- compiled: ``torch.compile(backend="compiled")`` with ``dynamic=None``
  and ``dynamic=True``.

Printed per model and side: the total time to serve all sizes (compiles
included), the graphs Dynamo compiled (Dynamo's ``unique_graphs``: each
is one backend compile), for compiled also the programs the daemon
compiled, and the largest difference from eager over all sizes. Then
the steady state of one program with size symbols against the static
program of the same size (sequence length 128, batch 8), both from
``compiled.compile``: ``dynamic=False``, and the default ``dynamic=None``
after another size (its second program has the sequence length, the
batch, as a symbol), timed in alternating rounds (medians), and the
10th percentile of each over calls made in turns (steadier on a shared
machine), both native programs (no native/ATen choice, which flips with
the load).
Targets (issue 38): one compile per graph for all sizes (two with
automatic dynamic), the dynamic program at least 0.9x the static one's
speed, total serving time below Inductor's.

Run from the repository root after `make`:

    .venv/bin/python bench/dynamic.py [--only transformer,cnn] [--steady-only] [--threads N]
"""

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

CASES = ("transformer", "cnn")
SIDES = ("eager", "inductor", "inductor-dynamic", "compiled", "compiled-dynamic")


def seq_lengths():
    """32 sequence lengths from 1 to 512, irregular (primes, powers of two
    and others), in a fixed shuffled order."""
    import random
    lengths = sorted({1, 2, 3, 7, 8, 16, 17, 31, 32, 45, 64, 77, 100, 127, 128, 129, 150,
                      199, 200, 255, 256, 257, 300, 333, 384, 400, 420, 450, 480, 500,
                      511, 512})
    assert len(lengths) == 32
    random.Random(0).shuffle(lengths)
    return lengths


def build(case):
    import torch
    torch.manual_seed(0)
    if case == "transformer":
        # the layers' own operators (linear, attention, layer norm), not
        # eager's fused inference kernel, which every side would call as is
        torch.backends.mha.set_fastpath_enabled(False)
        layer = torch.nn.TransformerEncoderLayer(128, 4, 256, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
        inputs = [torch.randn(2, t, 128) for t in seq_lengths()]
        steady = torch.randn(2, 128, 128)
    else:
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(32 * 8 * 8, 10)).eval()
        import random
        batches = list(range(1, 65))
        random.Random(1).shuffle(batches)
        inputs = [torch.randn(b, 3, 32, 32) for b in batches]
        steady = torch.randn(8, 3, 32, 32)
    model.requires_grad_(False)
    return model, inputs, steady


def child(args):
    """One side of one case in this (new) process; prints JSON."""
    import torch
    torch.set_num_threads(2)
    model, inputs, _ = build(args.case)
    with torch.no_grad():
        want = [model(x) for x in inputs]
    out = {"case": args.case, "side": args.side}
    side = args.side
    dynamic = True if side.endswith("-dynamic") else None
    if side == "eager":
        fn = model
    elif side.startswith("inductor"):
        fn = torch.compile(model, dynamic=dynamic)
    else:
        fn = torch.compile(model, backend="compiled", dynamic=dynamic,
                           options={"server": args.server})
    from torch._dynamo.utils import counters
    diff = 0.0
    with torch.no_grad():
        t0 = time.perf_counter()
        for x, w in zip(inputs, want):
            y = fn(x)
            diff = max(diff, float((y - w).abs().max()))
        out["total"] = time.perf_counter() - t0
    out["graphs"] = int(counters["stats"]["unique_graphs"])
    out["max_diff"] = diff
    if side.startswith("compiled"):
        from compiled import dynamo
        graphs = dynamo.loaded_graphs()
        out["daemon_compiles"] = sum(g.compiles for g in graphs)
        out["symbolic_graphs"] = sum(
            1 for g in graphs if g.program is not None
            and len(g.program.artifact.native_program.symbols))
        out["runs"] = sorted({g.program.summary.get("runs", "?") for g in graphs
                              if g.program is not None})
    print(json.dumps(out))


def alternating_p10(static, dynamic, seconds):
    """Each side's 10th-percentile seconds per call over calls made in
    turns (static then dynamic, then the other way round): the least
    disturbed calls of each, made under the same conditions. On a shared
    machine two-thread OpenMP regions wait for a descheduled thread, and
    medians (even of alternating rounds) move by 2x between runs of the
    same programs; the fast tail moves little."""
    ts, td = [], []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(ts) < 20:
        for name, fn in ((("s", static), ("d", dynamic)) if len(ts) % 2 == 0
                         else (("d", dynamic), ("s", static))):
            t0 = time.perf_counter()
            fn()
            (ts if name == "s" else td).append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 10], sorted(td)[len(td) // 10]


def steady_child(args):
    """The program with size symbols against the static one at the steady
    size (compiled.compile, dynamic=True vs False); prints JSON."""
    import torch
    import compiled
    torch.set_num_threads(args.threads)
    model, _, x = build(args.case)
    with torch.no_grad():
        static = compiled.compile(model, (x,), server=args.server, dynamic=False)
        # dynamic=None, as in serving: a static program at another size
        # first, then, the size having changed, one with the sequence
        # length (the batch) as a symbol, which serves x
        other = x[:, :100].contiguous() if args.case == "transformer" else x[:5].contiguous()
        dynamic = compiled.compile(model, (other,), server=args.server)
        dynamic(x)
        assert dynamic.compiles == 2, dynamic.compiles
        symbols = len(dynamic.programs[1].artifact.native_program.symbols)
        want = model(x)
        diff = max(float((f(x) - want).abs().max()) for f in (static, dynamic))
        t_static, t_dynamic, t_eager = benchlib.interleaved(
            [lambda: static(x), lambda: dynamic(x), lambda: model(x)], rounds=6,
            seconds=args.seconds)
        p10 = alternating_p10(lambda: static(x), lambda: dynamic(x), args.seconds)
    print(json.dumps({"case": args.case, "static": t_static, "dynamic": t_dynamic,
                      "eager": t_eager, "p10": p10, "symbols": symbols,
                      "max_diff": diff,
                      "static_summary": static.programs[0].summary,
                      "dynamic_summary": dynamic.programs[1].summary}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--seconds", type=float, default=3.0, help="steady-state timing")
    ap.add_argument("--threads", type=int, default=2,
                    help="steady-state threads (the issue's: 2)")
    ap.add_argument("--steady-only", action="store_true",
                    help="only the steady state (static against dynamic program at one size)")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--steady", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--server", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.steady:
        return steady_child(args)
    if args.case:
        return child(args)
    cases = [c for c in CASES if not args.only or c in args.only.split(",")]
    import torch
    torch.set_num_threads(2)
    print(f"# bench-dynamic: {benchlib.machine_line()}")
    me = os.path.abspath(__file__)
    for case in cases:
        if not args.steady_only:
            rows = []
            results = {}
            for side in SIDES:
                with tempfile.TemporaryDirectory(prefix="inductor-") as cache:
                    env = benchlib.inductor_env(cache, caches=False)
                    try:
                        if side.startswith("compiled"):
                            with benchlib.Daemon() as d:
                                r = benchlib.subprocess_json(
                                    [me, "--case", case, "--side", side, "--server", d.address],
                                    env=env)
                        else:
                            r = benchlib.subprocess_json([me, "--case", case, "--side", side],
                                                         env=env)
                    except Exception as e:
                        r = {"error": benchlib.error_text(e)}
                results[side] = r
                if "error" in r:
                    rows.append([side, "error", "", "", "", r["error"][:120]])
                    continue
                rows.append([side, f"{r['total']:.2f}", r["graphs"],
                             r.get("daemon_compiles", ""), r.get("symbolic_graphs", ""),
                             f"{r['max_diff']:.1e}"])
            n = len(seq_lengths()) if case == "transformer" else 64
            what = "32 sequence lengths 1..512, batch 2" if case == "transformer" else \
                "64 batch sizes 1..64"
            print(f"\n## {case}: {what}, each once, compiles included")
            print(benchlib.table(rows, ["side", "total s", "Dynamo graphs", "daemon compiles",
                                        "symbolic programs", "max |diff| vs eager"]))
            best_inductor = min((results[s]["total"] for s in ("inductor", "inductor-dynamic")
                                 if "error" not in results[s]), default=None)
            for side in ("compiled", "compiled-dynamic"):
                r = results[side]
                if "error" in r or best_inductor is None:
                    continue
                print(f"{side}: {r['total']:.2f} s for {n} sizes vs Inductor's best "
                      f"{best_inductor:.2f} s ({r['total'] / best_inductor:.2f}x; target < 1: "
                      f"{benchlib.target_mark(r['total'] < best_inductor)}); "
                      f"{r['daemon_compiles']} daemon compiles")
        try:
            # the native programs, both (COMPILED_CHOOSE=0): the runtime's
            # native/ATen choice (compiled/choice.py, 3 timed calls of each)
            # flips with the load on a shared machine, and a choice recorded
            # by an earlier process would be reused
            with benchlib.Daemon() as d:
                s = benchlib.subprocess_json([me, "--case", case, "--steady", "--server",
                                              d.address, "--seconds", str(args.seconds),
                                              "--threads", str(args.threads)],
                                             env={"COMPILED_CHOOSE": "0"})
        except Exception as e:
            print(f"steady state: error: {benchlib.error_text(e)}")
            continue
        size = "sequence length 128" if case == "transformer" else "batch 8"
        ratio = s["static"] / s["dynamic"]
        p10 = s["p10"][0] / s["p10"][1]
        print(f"steady state at {size}, {args.threads} threads: static program "
              f"{s['static'] * 1e3:.3f} ms, program with {s['symbols']} size symbols "
              f"{s['dynamic'] * 1e3:.3f} ms, eager {s['eager'] * 1e3:.3f} ms (medians); "
              f"dynamic speed / static speed {ratio:.2f} (target >= 0.9: "
              f"{benchlib.target_mark(ratio >= 0.9)}); the 10th percentiles of calls in "
              f"turns {s['p10'][0] * 1e3:.3f} and {s['p10'][1] * 1e3:.3f} ms: {p10:.2f}; "
              f"max |diff| {s['max_diff']:.1e}")
        for k in ("static_summary", "dynamic_summary"):
            sm = s[k]
            print(f"  {k.split('_')[0]}: runs {sm.get('runs')}, kernels {sm.get('kernels')}, "
                  f"extern {sm.get('extern')}, fallback {sm.get('fallback')} "
                  f"{sm.get('fallback_ops', [])}")


if __name__ == "__main__":
    main()
