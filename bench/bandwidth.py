#!/usr/bin/env python3
"""Memory-bound graphs against the copy-bandwidth bound: `make bench-bandwidth`.

Not a test. For memory-bound work the best any code can do is move the
bytes it must move (read every input once, write every output once) at the
machine's copy bandwidth. This benchmark measures that bandwidth in the
same rounds as the graph (a 2-thread torch.Tensor.copy_ between two reused
arrays of at least half the case's traffic and, following STREAM's rule, at
least 4 times the last-level cache, so the copy cannot run from cache; each
case's inputs are 64 MiB and cannot either), and, for each graph, the time
of the compiled program (2 threads) and of eager PyTorch, and prints

    bound ms  = (bytes read + bytes written) / copy bandwidth
    efficiency = bound ms / compiled ms        (1.0 = at the bound)

plus eager's efficiency for comparison, and the geometric mean efficiency
of the compiled programs (the issue's target: at least 0.70) over the
memory-bound cases, and over all of them: dropout's generated code is
bound by its random number generator, not by memory.

Results are checked against float64 before timing; dropout's (random)
by what they must be: zero or x / (1 - p), kept at the rate 1 - p.

Outputs are allocated per call as users receive them (the compiled
program allocates its outputs; eager its outputs and every temporary).

Run from the repository root after `make`:

    /usr/bin/python3 bench/bandwidth.py [--only NAME,...] [--seconds S]
"""

import argparse
import os
import sys
from typing import Callable, NamedTuple, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import compiled  # noqa: E402

R, C = 8192, 2048  # rows x columns of the row-wise cases: 64 MiB of float32


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def softmax(x):
    return torch.softmax(x, -1)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def bias_gelu_residual(x, b, r):
    return F.gelu(x + b) + r


def softmax_cross_entropy(logits, target):
    return F.cross_entropy(logits, target)


def column_sum(x):
    return x.sum(0)


def transpose_add(x, y):
    return x + y.t()


def dropout(x):
    return F.dropout(x, 0.1, training=True)


def f32(*s):
    return torch.randn(*s)


def check_dropout(inputs, out, p=0.1):
    """Each element is 0 or x / (1 - p), kept about 1 - p of the time."""
    x = inputs[0]
    kept = out != 0
    rate = kept.double().mean().item()
    scaled = torch.allclose(out[kept], x[kept] / (1 - p), rtol=1e-6, atol=0)
    if not scaled or abs(rate - (1 - p)) > 0.002:
        raise SystemExit(f"dropout: compiled result is wrong (kept {rate:.4f}, "
                         f"scaled {scaled})")


class Case(NamedTuple):
    fn: Callable
    inputs: tuple
    nbytes: int  # bytes that must move
    # checks the compiled result (inputs, out); None: against float64
    check: Optional[Callable] = None
    # in the geomean the 0.70 target applies to
    memory_bound: bool = True


def cases():
    n = R * C * 4
    return {
        "layer_norm": Case(layer_norm, (f32(R, C), f32(C), f32(C)), 2 * n),
        "softmax": Case(softmax, (f32(R, C),), 2 * n),
        "rms_norm": Case(rms_norm, (f32(R, C), f32(C)), 2 * n),
        "bias_gelu_residual": Case(bias_gelu_residual, (f32(R, C), f32(C), f32(R, C)), 3 * n),
        "softmax_cross_entropy": Case(softmax_cross_entropy,
                                      (f32(R, C), torch.randint(0, C, (R,))), n),
        "column_sum": Case(column_sum, (f32(R, C),), n),
        "transpose_add": Case(transpose_add, (f32(4096, 4096), f32(4096, 4096)),
                              3 * 4096 * 4096 * 4),
        # random: checked by what its result must be, not against eager's;
        # bound by its generator (Philox4x32-10, about four vector
        # operations per value), so left out of the memory-bound geomean
        "dropout": Case(dropout, (f32(R, C),), 2 * n, check=check_dropout,
                        memory_bound=False),
    }


def check_against_float64(name, case, ref, out):
    """Compiled and eager results both against float64: a sum accumulated
    more accurately than eager's must not count as wrong."""
    exact = case.fn(*[i.double() if i.is_floating_point() else i
                      for i in case.inputs]).float()
    err = ((out - exact).abs().max() / exact.abs().max().clamp_min(1e-12)).item()
    err_eager = ((ref - exact).abs().max() / exact.abs().max().clamp_min(1e-12)).item()
    if err > max(1e-5, 10 * err_eager):
        raise SystemExit(f"{name}: compiled result is off by {err:.2e} "
                         f"(eager: {err_eager:.2e})")


def last_level_cache_bytes():
    """The largest CPU cache's size (sysfs), 32 MiB when unknown."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in os.listdir(base):
            try:
                with open(os.path.join(base, d, "size")) as f:
                    text = f.read().strip()
            except OSError:
                continue
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            digits = text.rstrip("KMG")
            if digits.isdigit():
                best = max(best, int(digits) * mult)
    except OSError:
        pass
    return best or 32 << 20


_copy_buffers = {}


def copy_call(nbytes):
    """(fn, bytes it moves): a 2-thread copy (read + write) between two
    arrays of at least half the case's traffic and, as STREAM requires, at
    least 4 times the last-level cache: a smaller copy partly runs from
    cache, which the cases' 64 MiB inputs cannot (buffers reused)."""
    each = max(nbytes // 2, 4 * last_level_cache_bytes())
    if each not in _copy_buffers:
        src = torch.empty(each // 4, dtype=torch.float32).normal_()
        _copy_buffers[each] = (src, torch.empty_like(src))
    src, dst = _copy_buffers[each]
    return (lambda: dst.copy_(src)), 2 * each


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    all_cases = cases()
    names = [n for n in all_cases if not args.only or n in args.only.split(",")]
    rows, effs = [], []
    with benchlib.Daemon() as d, torch.no_grad():
        for name in names:
            case = all_cases[name]
            fn, inputs, nbytes = case.fn, case.inputs, case.nbytes
            cf = compiled.compile(fn, inputs, server=d.address)
            ref = fn(*inputs)
            out = cf(*inputs)
            if case.check is not None:
                case.check(inputs, out)
            else:
                check_against_float64(name, case, ref, out)
            # the copy in the same rounds: this VM's memory bandwidth drifts
            # (33 to 55 GB/s between minutes), so the bound is measured
            # alongside what it bounds
            copy, copy_bytes = copy_call(nbytes)
            copy_s, eager_s, comp_s = benchlib.interleaved(
                [copy, lambda: fn(*inputs), lambda: cf(*inputs)], seconds=args.seconds * 1.5)
            bw = copy_bytes / copy_s
            bound = nbytes / bw
            eff = bound / comp_s
            effs.append((name, eff, case.memory_bound))
            s = cf.summary()
            rows.append([name, f"{nbytes / 2**20:.0f}", f"{bw / 1e9:.1f}", f"{bound * 1e3:.2f}",
                         f"{eager_s * 1e3:.2f}", f"{comp_s * 1e3:.2f}", f"{bound / eager_s:.2f}",
                         f"{eff:.2f}", f"{eager_s / comp_s:.2f}x",
                         f"{s.get('kernels', 0)}/{s.get('extern', 0)}/{s.get('fallback', 0)}"])
            print(f"  {name}: {eff:.2f} of the bound", file=sys.stderr, flush=True)
    print(benchlib.table(rows, ["case", "MiB moved", "copy GB/s", "bound ms", "eager ms",
                                "compiled ms", "eager eff", "compiled eff", "speedup",
                                "kernels/extern/fallback"]))
    bound_by_memory = [e for _, e, mb in effs if mb]
    others = [n for n, _, mb in effs if not mb]
    print(f"geomean efficiency of compiled programs: {benchlib.geomean(bound_by_memory):.2f} "
          f"of the copy-bandwidth bound (target 0.70) over the {len(bound_by_memory)} "
          f"memory-bound cases" + (f"; {benchlib.geomean([e for _, e, _ in effs]):.2f} with "
                                   f"{', '.join(others)}" if others else ""))


if __name__ == "__main__":
    main()
