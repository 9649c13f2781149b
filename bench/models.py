#!/usr/bin/env python3
"""compiled vs eager PyTorch on models: `make bench-models`.

Not a test. Starts a daemon with an empty cache, and for each case (eval
mode, torch.no_grad(), torch.set_num_threads(2), as users run inference):

- compiles it with compiled.compile and times the first call (capture,
  compile on the daemon, load, run);
- checks the compiled result against eager (tolerance printed on failure);
- times eager and compiled calls interleaved in the same process (median);
- measures the peak memory of each in a fresh process, once the model
  and inputs exist and a first call has run (for compiled, what that call
  kept for reuse, its arena and output blocks, is released first, so the
  measured calls count it): "heap", the peak rise of the bytes allocated
  with malloc (bench/peakheap.c, preloaded), what the calls need; and
  "RSS", the peak rise of resident memory, which also counts what glibc's
  heap did with earlier frees. For eager RSS is measured twice: in a
  process that never captured anything, and in one that captured and
  compiled the model first, as the compiled case did ("after capture"):
  capture runs the model on real copies of its state, and glibc keeps the
  freed memory as holes in the heap that later allocations fault back in,
  so the same eager call's RSS peaks higher there;
  and the time per call there ("speedup alone"): interleaved in one
  process, eager and compiled share glibc's allocator, whose state (what
  it keeps, trims or maps afresh) each changes for the other; alone, each
  runs as a user's process would. Fresh processes cannot be interleaved,
  and this machine's speed drifts from minute to minute, so the alone
  times come from four processes in the order eager, compiled, compiled,
  eager, which cancels a steady drift: alone = (e1 + e2) / (c1 + c2);
- prints eager ms, compiled ms, speedup, first-call time, peak RSS of both,
  and what the program is made of (generated kernels, library calls,
  fallbacks), then the geometric mean speedup.

Run from the repository root after `make`:

    /usr/bin/python3 bench/models.py [--only NAME,...] [--seconds S]
"""

import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

import torch  # noqa: E402

import compiled  # noqa: E402


# ---- the cases: name -> builder() returning (callable, inputs) ----

class RMSNormSiLU(torch.nn.Module):
    """x * rsqrt(mean(x^2) + eps) * w, then SiLU (LLaMA-style blocks)."""

    def __init__(self, d):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(d))

    def forward(self, x):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w
        return torch.nn.functional.silu(y)


class ResnetGeneratorBlock(torch.nn.Module):
    """An image-to-image generator's residual block (CycleGAN, pix2pix):
    x + (reflection pad -> 3x3 conv -> instance norm -> ReLU) twice."""

    def __init__(self, c):
        super().__init__()
        layers = []
        for k in range(2):
            layers += [torch.nn.ReflectionPad2d(1), torch.nn.Conv2d(c, c, 3),
                       torch.nn.InstanceNorm2d(c)]
            if k == 0:
                layers.append(torch.nn.ReLU())
        self.body = torch.nn.Sequential(*layers)

    def forward(self, x):
        return x + self.body(x)


class LayerNormGELU(torch.nn.Module):
    """LayerNorm -> Linear -> GELU (a transformer MLP's first half)."""

    def __init__(self, d, h):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, h)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(self.ln(x)))


class Attention(torch.nn.Module):
    """Scaled dot-product attention over (B, heads, T, d) q, k, v."""

    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(s, -1) @ v


def softmax_ce(logits, target):
    return torch.nn.functional.cross_entropy(logits, target)


def tv(name, batch):
    m = getattr(benchlib.vision_models(), name)().eval()
    return m, (torch.randn(batch, 3, 224, 224),)


class SegmentationOut(torch.nn.Module):
    """A torchvision segmentation model's "out" (its result is a dict)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


def seg(name, batch):
    m = getattr(benchlib.vision_models().segmentation, name)(weights=None, weights_backbone=None)
    return SegmentationOut(m).eval(), (torch.randn(batch, 3, 224, 224),)


CASES = {
    "mlp": lambda: (torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                        torch.nn.Linear(4096, 1024)).eval(),
                    (torch.randn(256, 1024),)),
    "layernorm_gelu": lambda: (LayerNormGELU(768, 3072).eval(), (torch.randn(16, 256, 768),)),
    "attention": lambda: (Attention(), tuple(torch.randn(8, 12, 256, 64) for _ in range(3))),
    "transformer_layer": lambda: (torch.nn.TransformerEncoderLayer(
        512, 8, 2048, batch_first=True).eval(), (torch.randn(16, 128, 512),)),
    "resnet18": lambda: tv("resnet18", 8),
    "mobilenet_v2": lambda: tv("mobilenet_v2", 8),
    "softmax_ce": lambda: (softmax_ce, (torch.randn(4096, 8192),
                                        torch.randint(0, 8192, (4096,)))),
    "rmsnorm_silu": lambda: (RMSNormSiLU(2048).eval(), (torch.randn(16, 512, 2048),)),
    "densenet121": lambda: tv("densenet121", 2),
    "efficientnet_b0": lambda: tv("efficientnet_b0", 8),
    # segmentation: bilinear upsampling of 21 class maps to the input's size
    "lraspp_mobilenet_v3": lambda: seg("lraspp_mobilenet_v3_large", 8),
    # reflection padding before each convolution
    "resnet_generator_block": lambda: (ResnetGeneratorBlock(256).eval(),
                                       (torch.randn(1, 256, 64, 64),)),
}


def build(name):
    torch.manual_seed(0)
    return CASES[name]()


# ---- one case in a fresh process: peak memory, and time alone ----

def memory_main(name, mode, server, seconds):
    torch.set_num_threads(2)
    state = {}

    def setup():
        state["model"], state["inputs"] = build(name)

    def run(_):
        with torch.no_grad():
            if mode == "eager-captured" and "captured" not in state:
                # the same process state as the compiled case: the model was
                # captured, compiled and run once (capture leaves glibc's heap
                # with free holes that later allocations fault back in)
                cf = compiled.compile(state["model"], state["inputs"], server=server)
                cf(*state["inputs"])
                del cf
                state["captured"] = True
            if mode == "compiled":
                if "cf" not in state:
                    state["cf"] = compiled.compile(state["model"], state["inputs"],
                                                   server=server)
                out = state["cf"](*state["inputs"])
            else:
                out = state["model"](*state["inputs"])
        del out

    def release(_):
        # the compiled function keeps its arena and output blocks between
        # calls: count them as memory a call needs, as eager's temporaries
        if mode == "compiled":
            state["cf"].release_memory()

    mem = benchlib.measure_peak(setup, run, release=release)
    # Time per call with this process to itself: in the interleaved
    # measurement eager and compiled share one allocator, whose state (what
    # glibc keeps, trims or maps afresh) each changes for the other.
    alone = benchlib.time_calls(lambda: run(None), min_seconds=seconds)
    print(json_line(dict(mem, alone_s=alone)))


def json_line(d):
    import json
    return json.dumps(d)


# ---- the benchmark ----

def compare(out, ref):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    worst = 0.0
    for o, r in zip(outs, refs):
        if isinstance(r, torch.Tensor):
            err = (o.double() - r.double()).abs().max().item() if r.numel() else 0.0
            scale = r.double().abs().max().item() if r.numel() else 1.0
            worst = max(worst, err / max(scale, 1e-12))
    return worst


def main():
    args = benchlib.case_arguments(__doc__.splitlines()[0], 4.0)
    if args.memory_case:
        memory_main(args.memory_case, args.mode, args.server, args.seconds / 2)
        return
    torch.set_num_threads(2)
    names = [n for n in CASES if not args.only or n in args.only.split(",")]
    rows, speedups, alone_speedups, heap_ratios = [], [], [], []
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"BLAS: {'OpenBLAS' if 'openblas' in open('/proc/self/maps').read() else 'other'}")
    with benchlib.Daemon() as d:
        for name in names:
            model, inputs = build(name)
            with torch.no_grad():
                ref = model(*inputs)
                t0 = time.perf_counter()
                cf = compiled.compile(model, inputs, server=d.address)
                out = cf(*inputs)
                first = time.perf_counter() - t0
                err = compare(out, ref)
                eager_s, comp_s = benchlib.interleaved(
                    [lambda: model(*inputs), lambda: cf(*inputs)], seconds=args.seconds)
            s = cf.summary()
            speed = eager_s / comp_s
            speedups.append(speed)
            heap_e = heap_c = rss_e = rss_k = rss_c = alone = float("nan")
            if not args.no_memory:
                def side(mode, seconds=args.seconds, heap=True):
                    """One fresh process measuring this case (memory_main)."""
                    return benchlib.subprocess_json(
                        [__file__, "--memory-case", name, "--mode", mode, "--server", d.address,
                         "--seconds", str(seconds)], heap=heap)
                je, jc = side("eager"), side("compiled")
                jk = side("eager-captured", seconds=0, heap=False)
                heap_e, heap_c = je["heap_mib"], jc["heap_mib"]
                rss_e, rss_k, rss_c = je["rss_mib"], jk["rss_mib"], jc["rss_mib"]
                heap_ratios.append(heap_c / heap_e if heap_e > 0 else 1.0)
                (e1, e2), (c1, c2) = benchlib.alone_runs(side, first=(je, jc))
                alone = (e1["alone_s"] + e2["alone_s"]) / (c1["alone_s"] + c2["alone_s"])
                alone_speedups.append(alone)
            rows.append([name, f"{eager_s * 1e3:.2f}", f"{comp_s * 1e3:.2f}", f"{speed:.2f}x",
                         f"{alone:.2f}x",
                         f"{first:.2f}", f"{heap_e:.1f}", f"{heap_c:.1f}",
                         f"{rss_e:.0f}", f"{rss_k:.0f}", f"{rss_c:.0f}",
                         f"{s.get('kernels', 0)}/{s.get('extern', 0)}/{s.get('fallback', 0)}",
                         f"{err:.1e}", s.get("runs", "?")])
            print(f"  {name}: {speed:.2f}x", file=sys.stderr, flush=True)
            del cf, model, inputs, out, ref
    print(benchlib.table(rows, ["case", "eager ms", "compiled ms", "speedup",
                                "speedup alone", "first call s",
                                "eager heap MiB", "compiled heap MiB",
                                "eager RSS MiB", "eager RSS after capture",
                                "compiled RSS MiB",
                                "kernels/extern/fallback", "max rel err", "runs"]))
    print(f"geomean speedup: {benchlib.geomean(speedups):.2f}x over {len(speedups)} cases; "
          f"slowest {min(speedups):.2f}x (eager and compiled interleaved in one process)")
    if heap_ratios:
        below = sum(r <= 1.0 for r in heap_ratios)
        near = sum(1.0 < r <= 1.001 for r in heap_ratios)
        print(f"peak heap memory: compiled at most eager's in {below} of {len(heap_ratios)} "
              f"cases, above by at most 0.1% in {near} (a call's own Python objects), "
              f"largest ratio {max(heap_ratios):.4f}")
    if alone_speedups:
        print(f"geomean speedup alone: {benchlib.geomean(alone_speedups):.2f}x; slowest "
              f"{min(alone_speedups):.2f}x (each in fresh processes of its own, eager, "
              f"compiled, compiled, eager)")


if __name__ == "__main__":
    main()
