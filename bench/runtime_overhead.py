#!/usr/bin/env python3
"""Per-call time of a compiled callable vs the original, eagerly.

Not a test. Starts its own daemon on a free loopback port (cache in a
temporary directory), compiles each model with ``compiled.compile`` and
times calls of the compiled callable and of the original model, interleaved
(eager then compiled, then compiled then eager, ...), so that drift of the
machine affects both alike. Prints medians, 90th percentiles and the ratio
compiled/eager, plus the guard cost: what a compiled call spends before the
program runs (reading module state, flattening the arguments, computing the
signature, the lookup).

Cases: a tiny function (its time is almost all per-call overhead);
torchvision resnet18 (eval) at 1x3x32x32 and 1x3x224x224;
nn.TransformerEncoderLayer (eval, d_model 256, nhead 8, batch 8, seq 64,
batch_first) with and without parameters requiring grad; each under
``torch.no_grad()`` and with grad enabled (forward only).

Run from the repository root, after ``make``:

    PYTHONPATH=client/python /usr/bin/python3 bench/runtime_overhead.py [--seconds S] [--only NAME]
"""

import argparse
import os
import statistics
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "client", "python"))

import torch  # noqa: E402

import benchlib  # noqa: E402
import compiled  # noqa: E402
from compiled import frontend, signature  # noqa: E402

def tiny(x):
    return x * 2 + 1


def cases(only):
    vision = benchlib.vision_models()
    all_cases = []
    all_cases.append(("tiny fn x*2+1 [16]", lambda: (tiny, (torch.randn(16),))))
    for size in (32, 224):
        def make(size=size):
            torch.manual_seed(0)
            return vision.resnet18().eval(), (torch.randn(1, 3, size, size),)
        all_cases.append((f"resnet18 1x3x{size}x{size}", make))
    for rg in (True, False):
        def make(rg=rg):
            torch.manual_seed(0)
            layer = torch.nn.TransformerEncoderLayer(256, 8, batch_first=True).eval()
            layer.requires_grad_(rg)
            return layer, (torch.randn(8, 64, 256),)
        all_cases.append((f"transformer layer, params rg={rg}", make))
    return [(n, m) for n, m in all_cases if not only or only in n]


def timed(fn, args):
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def guard_cost(cf, args, reps):
    """Median time of everything a compiled call does before its program."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        if cf._layout is not None:
            state, flags = cf._layout.read()
        else:
            state = flags = ()
        flat, structure = signature.flatten_args(args)
        key = (torch.is_grad_enabled(), torch.is_inference_mode_enabled(),
               signature.global_state(), flags, structure, signature.call_signature(state, flat))
        entry = cf._entries.get(key)
        times.append(time.perf_counter() - t0)
    assert entry is not None and entry.__class__ is not frontend._Eager, "signature miss"
    return statistics.median(times)


def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.9 * len(xs)))]


def run_case(name, make, grad, address, seconds):
    model, args = make()
    with torch.set_grad_enabled(grad):
        cf = compiled.compile(model, args, server=address)
        with torch.no_grad() if not grad else torch.enable_grad():
            ref = model(*args)
            out = cf(*args)
        ok = torch.allclose(ref, out, rtol=1e-4, atol=1e-5)
        n_before = cf.compiles
        per_call = min(timed(model, args) for _ in range(3))
        iters = int(max(30, min(5000, seconds / max(per_call, 1e-7) / 2)))
        eager, comp = [], []
        for i in range(iters):
            if i % 2 == 0:
                eager.append(timed(model, args))
                comp.append(timed(cf, args))
            else:
                comp.append(timed(cf, args))
                eager.append(timed(model, args))
        guard = guard_cost(cf, args, min(iters, 1000))
        assert cf.compiles == n_before, "a timed call recompiled"
    return dict(name=name, grad=grad, iters=iters, ok=ok,
                eager_med=statistics.median(eager), eager_p90=p90(eager),
                comp_med=statistics.median(comp), comp_p90=p90(comp), guard=guard,
                n_state=len(cf._layout.paths) if cf._layout is not None else 0)


def fmt_time(s):
    if s >= 1e-3:
        return f"{s * 1e3:9.2f} ms"
    return f"{s * 1e6:9.1f} us"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=6.0,
                    help="time budget per case and grad mode (default 6)")
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    opts = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"python {sys.version.split()[0]}")
    rows = []
    with benchlib.Daemon() as daemon:
        for name, make in cases(opts.only):
            for grad in (False, True):
                rows.append(run_case(name, make, grad, daemon.address, opts.seconds))
                r = rows[-1]
                print(f"  done: {name}, grad={grad} ({r['iters']} iterations)", file=sys.stderr)
    header = (f"{'case':36s} {'grad':5s} {'iters':>5s} {'eager med':>12s} {'eager p90':>12s} "
              f"{'compiled med':>12s} {'compiled p90':>12s} {'ratio med':>9s} {'ratio p90':>9s} "
              f"{'guard':>12s} {'state':>5s}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['name']:36s} {str(r['grad']):5s} {r['iters']:5d} {fmt_time(r['eager_med'])} "
              f"{fmt_time(r['eager_p90'])} {fmt_time(r['comp_med'])} {fmt_time(r['comp_p90'])} "
              f"{r['comp_med'] / r['eager_med']:9.3f} {r['comp_p90'] / r['eager_p90']:9.3f} "
              f"{fmt_time(r['guard'])} {r['n_state']:5d}" + ("" if r["ok"] else "  MISMATCH"))
    print("ratio = compiled / eager (under 1: the compiled call is faster); guard = time a "
          "compiled call spends before its program runs; state = parameters + buffers read "
          "per call.")


if __name__ == "__main__":
    main()
