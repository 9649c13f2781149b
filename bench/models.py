#!/usr/bin/env python3
"""eager vs Inductor vs compiled on models: `make bench-models`.

Not a test. Three sides, measured in the same run on the same inputs, eval
mode, torch.no_grad(), torch.set_num_threads(2) (as users run inference):

- eager: the model itself;
- Inductor: ``torch.compile(model)``, torch's default backend with its
  default options (C++ with OpenMP on this CPU, built with g++);
- compiled: ``torch.compile(model, backend="compiled", options={"server":
  ...})``, the graphs AOTAutograd makes compiled by the daemon;
- and, as a fourth time column, ``compiled.compile(model, inputs)`` (no
  Dynamo, capture by the client).

For each case:

- correctness: every compiled side's first output against eager's on the
  same inputs (the largest difference relative to eager's largest
  magnitude); above TOLERANCE the case is flagged WRONG. A side that fails
  (an Inductor error, say) is reported with its error and left out;
- steady-state time per call: the sides interleaved in rounds in one
  process after warm-up calls (benchlib.interleaved), the median;
- peak memory: in a fresh process per side (warm caches), once the model
  and inputs exist and two calls have run: "heap", the peak rise of the
  bytes allocated with malloc and friends during three calls
  (bench/peakheap.c, preloaded; PyTorch's CPU allocator, eager's and the
  buffers Inductor's generated code allocates, all come from
  posix_memalign; each process checks that a 64 MiB tensor counts 64 MiB),
  and "RSS", the peak rise of the resident set. What the compiled
  backend's programs keep between calls for reuse (arenas, recycled output
  blocks) is released before the measured calls, so that it counts as
  memory a call needs, as Inductor's buffers, allocated per call, do;
- cold compile: from ``torch.compile(...)`` to the first result in a fresh
  process (after one eager call, which both sides then share: torch's own
  one-time set-up): Inductor with a new, empty TORCHINDUCTOR_CACHE_DIR and
  its FX graph and AOTAutograd caches off; compiled against a new daemon
  with an empty --cache-dir and an empty client code cache
  (COMPILED_CODE_CACHE). Imports the compile needs (torch._inductor,
  compiled) are part of it on both sides.

Then the ratios, with the targets printed next to them (not asserted):
compiled vs Inductor speed (Inductor's time / compiled's; geomean >= 1.2x,
no case below 0.9x), peak heap compiled/Inductor (<= 1), cold compile
compiled/Inductor (<= 0.5); and what the compiled backend's graphs are made
of: generated kernels, library calls (extern) and fallbacks (ATen
operators without a lowering, by name), and what runs (native code or the
ATen program, compiled.choice).

Run from the repository root after `make` (one run takes tens of minutes):

    .venv/bin/python bench/models.py [--only NAME,...] [--seconds S]
        [--no-memory] [--no-cold]
"""

import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

import torch  # noqa: E402


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


# ---- the sides in fresh processes: peak memory, cold compile ----

TOLERANCE = 1e-3   # largest difference relative to eager's largest magnitude


def memory_main(name, mode, server):
    torch.set_num_threads(2)
    benchlib.check_peakheap()
    state = {}

    def setup():
        state["model"], state["inputs"] = build(name)
        state["fn"] = benchlib.compile_side(mode, state["model"], server)

    def run(_):
        with torch.no_grad():
            out = state["fn"](*state["inputs"])
        del out

    def release(_):
        if mode == "compiled":
            benchlib.release_backend_memory()

    # two calls first: the compile, and the compiled backend's first calls
    # (its choice between native code and the ATen program is recorded by
    # the main process in the shared code cache: it runs the winner)
    mem = benchlib.measure_peak(setup, run, release=release, warmup=2)
    print(json.dumps(mem))


def cold_main(name, mode, server):
    """From torch.compile(...) to the first result, in this new process
    whose caches the parent emptied."""
    torch.set_num_threads(2)
    model, inputs = build(name)
    out = {}
    with torch.no_grad():
        ref = model(*inputs)   # torch's one-time set-up, for both sides
        try:
            t0 = time.perf_counter()
            fn = benchlib.compile_side(mode, model, server)
            result = fn(*inputs)
            out["cold_s"] = time.perf_counter() - t0
            out["err"] = compare(result, ref)
        except Exception as e:  # reported by the parent, not a crash
            out["error"] = benchlib.error_text(e)
    if mode == "inductor":
        out["caches"] = benchlib.inductor_cache_state()
    print(json.dumps(out))


# ---- the benchmark ----

def compare(out, ref):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    if len(outs) != len(refs):
        return float("inf")
    worst = 0.0
    for o, r in zip(outs, refs):
        if isinstance(r, torch.Tensor):
            if not isinstance(o, torch.Tensor) or o.shape != r.shape:
                return float("inf")
            err = (o.double() - r.double()).abs().max().item() if r.numel() else 0.0
            scale = r.double().abs().max().item() if r.numel() else 1.0
            worst = max(worst, err / max(scale, 1e-12))
    return worst


def dynamo_graphs():
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


def fmt(x, spec):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def ratio(a, b):
    return a / b if a is not None and b is not None and b > 0 else None


def main():
    args = benchlib.case_arguments(__doc__.splitlines()[0], 4.0)
    if args.memory_case:
        memory_main(args.memory_case, args.mode, args.server)
        return
    if args.cold_case:
        cold_main(args.cold_case, args.mode, args.server)
        return
    torch.set_num_threads(2)
    names, run_dir = benchlib.case_run(args.only, CASES, "models")
    print(f"{benchlib.machine_line()}; "
          f"Inductor caches: {benchlib.inductor_cache_state()}")
    results, problems = [], []
    try:
        with benchlib.Daemon() as d:
            for name in names:
                r = run_case(name, d.address, args)
                results.append(r)
                problems += r["problems"]
                print(f"  {name}: compiled vs Inductor {fmt(r['vs_inductor'], '.2f')}x",
                      file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    report(results, problems, args)


def run_case(name, server, args):
    r = {"name": name, "problems": [], "ms": {}, "err": {}, "heap": {}, "rss": {},
         "cold": {}, "graphs": {}}
    model, inputs = build(name)
    with torch.no_grad():
        ref = model(*inputs)
    fns = {"eager": lambda: model(*inputs)}
    mark = benchlib.backend_mark()
    for side in ("inductor", "compiled", "compiled.compile"):
        g0 = dynamo_graphs()
        try:
            with torch.no_grad():
                if side == "compiled.compile":
                    import compiled
                    f = compiled.compile(model, inputs, server=server)
                else:
                    f = benchlib.compile_side(side, model, server)
                out = f(*inputs)
        except Exception as e:
            r["problems"].append(f"{name}: {side} failed: {benchlib.error_text(e)}")
            traceback.print_exc()
            continue
        r["graphs"][side] = dynamo_graphs() - g0
        err = r["err"][side] = compare(out, ref)
        if not err <= TOLERANCE:
            r["problems"].append(f"{name}: {side}'s output is WRONG: max rel err {err:.2e} "
                                 f"(tolerance {TOLERANCE:.0e})")
        fns[side] = (lambda f=f: f(*inputs))
        del out
    with torch.no_grad():
        times = benchlib.interleaved(list(fns.values()), seconds=args.seconds)
    r["ms"] = {side: t * 1e3 for side, t in zip(fns, times)}
    r["backend"] = benchlib.backend_graphs(mark)
    r["vs_inductor"] = ratio(r["ms"].get("inductor"), r["ms"].get("compiled"))
    del fns, model, inputs, ref
    torch._dynamo.reset()
    me = os.path.abspath(__file__)
    if not args.no_memory:
        for side in benchlib.SIDES:
            if side != "eager" and side not in r["graphs"]:
                continue
            try:
                j = benchlib.subprocess_json([me, "--memory-case", name, "--mode", side,
                                              "--server", server], heap=True, timeout=1800)
                r["heap"][side], r["rss"][side] = j["heap_mib"], j["rss_mib"]
            except Exception as e:
                r["problems"].append(f"{name}: {side}'s memory process failed: "
                                     f"{benchlib.error_text(e)}")
    if not args.no_cold:
        for side in ("inductor", "compiled"):
            tmp = tempfile.mkdtemp(prefix=f"compiled-bench-cold-{side}-")
            try:
                if side == "inductor":
                    env = benchlib.inductor_env(tmp, caches=False)
                    j = benchlib.subprocess_json([me, "--cold-case", name, "--mode", side],
                                                 env=env, timeout=1800)
                    caches = j.get("caches", {})
                    if caches.get("fx_graph_cache") or caches.get("autograd_cache") or \
                            caches.get("cache_dir") != os.path.abspath(tmp):
                        r["problems"].append(f"{name}: Inductor's cold process had caches on: "
                                             f"{caches}")
                else:
                    with benchlib.Daemon() as cold:   # an empty --cache-dir
                        j = benchlib.subprocess_json(
                            [me, "--cold-case", name, "--mode", side, "--server", cold.address],
                            env={"COMPILED_CODE_CACHE": tmp}, timeout=1800)
            except Exception as e:
                j = {"error": benchlib.error_text(e)}
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            if "error" in j:
                r["problems"].append(f"{name}: {side}'s cold compile failed: {j['error']}")
                continue
            r["cold"][side] = j["cold_s"]
            if not j["err"] <= TOLERANCE:
                r["problems"].append(f"{name}: {side}'s output in the cold process is WRONG: "
                                     f"max rel err {j['err']:.2e}")
    return r


def report(results, problems, args):
    rows = []
    for r in results:
        ms, err = r["ms"], r["err"]
        rows.append([r["name"], fmt(ms.get("eager"), ".2f"), fmt(ms.get("inductor"), ".2f"),
                     fmt(ms.get("compiled"), ".2f"), fmt(ms.get("compiled.compile"), ".2f"),
                     fmt(r["vs_inductor"], ".2f") + ("x" if r["vs_inductor"] else ""),
                     fmt(ratio(ms.get("eager"), ms.get("inductor")), ".2f"),
                     fmt(ratio(ms.get("eager"), ms.get("compiled")), ".2f"),
                     f"{r['graphs'].get('inductor', '-')}/{r['graphs'].get('compiled', '-')}",
                     fmt(err.get("inductor"), ".1e"), fmt(err.get("compiled"), ".1e"),
                     fmt(err.get("compiled.compile"), ".1e")])
    print()
    print("time per call (ms, median, interleaved in one process); speed ratios are "
          "time / time")
    print(benchlib.table(rows, ["case", "eager", "Inductor", "compiled", "compiled.compile",
                                "compiled vs Inductor", "Inductor vs eager",
                                "compiled vs eager", "Dynamo graphs I/c",
                                "max rel err Inductor", "compiled", "compiled.compile"]))
    if not args.no_memory or not args.no_cold:
        rows = []
        for r in results:
            h, s, c = r["heap"], r["rss"], r["cold"]
            rows.append([r["name"], fmt(h.get("eager"), ".1f"), fmt(h.get("inductor"), ".1f"),
                         fmt(h.get("compiled"), ".1f"),
                         fmt(ratio(h.get("compiled"), h.get("inductor")), ".3f"),
                         fmt(s.get("eager"), ".0f"), fmt(s.get("inductor"), ".0f"),
                         fmt(s.get("compiled"), ".0f"),
                         fmt(c.get("inductor"), ".1f"), fmt(c.get("compiled"), ".1f"),
                         fmt(ratio(c.get("compiled"), c.get("inductor")), ".2f")])
        print()
        print("peak memory of three calls (MiB above the state after two; fresh process per "
              "side) and cold compile (s, torch.compile to first result, fresh process, "
              "empty caches)")
        print(benchlib.table(rows, ["case", "heap eager", "heap Inductor", "heap compiled",
                                    "heap compiled/Inductor", "RSS eager", "RSS Inductor",
                                    "RSS compiled", "cold Inductor s", "cold compiled s",
                                    "cold compiled/Inductor"]))
    print()
    print("compiled backend graphs (kernels/extern/fallback; runs: native code or the ATen "
          "program, compiled.choice):")
    for r in results:
        if "backend" in r:
            print(f"  {r['name']}: {benchlib.describe_graphs(r['backend'])}")
    print()
    speed = [r["vs_inductor"] for r in results if r["vs_inductor"]]
    if speed:
        g = benchlib.geomean(speed)
        slowest = min(speed)
        worst = min((r for r in results if r["vs_inductor"]), key=lambda r: r["vs_inductor"])
        print(f"compiled vs Inductor speed: geomean {g:.2f}x over {len(speed)} cases "
              f"(target >= 1.2x: {benchlib.target_mark(g >= 1.2)}); slowest {slowest:.2f}x "
              f"({worst['name']}; target: none below 0.9x: {benchlib.target_mark(slowest >= 0.9)})")
    heap = [ratio(r["heap"].get("compiled"), r["heap"].get("inductor")) for r in results]
    heap = [x for x in heap if x is not None]
    if heap:
        below = sum(x <= 1.0 for x in heap)
        print(f"peak heap compiled/Inductor: at most 1 in {below} of {len(heap)} cases, "
              f"geomean {benchlib.geomean(heap):.3f}, largest {max(heap):.3f} "
              f"(target <= 1 in every case: {benchlib.target_mark(below == len(heap))})")
    cold = [ratio(r["cold"].get("compiled"), r["cold"].get("inductor")) for r in results]
    cold = [x for x in cold if x is not None]
    if cold:
        g = benchlib.geomean(cold)
        print(f"cold compile compiled/Inductor: geomean {g:.2f}, largest {max(cold):.2f} "
              f"(target <= 0.5: {benchlib.target_mark(g <= 0.5)} for the geomean, "
              f"{sum(x <= 0.5 for x in cold)} of {len(cold)} cases)")
    benchlib.print_problems(problems, " (outputs that differ from eager, sides that failed)")


if __name__ == "__main__":
    main()
