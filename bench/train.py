#!/usr/bin/env python3
"""One training step, compiled vs eager PyTorch: `make bench-train`.

Not a test. Starts a daemon with an empty cache; for each case builds the
model twice from the same seed (train mode), compiles one copy with
compiled.compile (a compiled forward and a compiled backward,
docs/training.md), and times one training step on each, interleaved in
the same process (median), with 2 threads:

    opt.zero_grad(set_to_none=True); loss_fn(model(x)).backward(); opt.step()

(SGD, momentum 0.9; the loss is computed eagerly from the model's output).
It also profiles one eager step and prints the share of its time spent in
matrix products and convolutions ("eager in BLAS/conv"); 1 / share
("bound") is the most compiling the rest could gain with the library calls
at eager's speed. Compiled convolutions are the same oneDNN calls as
eager's; float32 matrix products are oneDNN's sgemm where the CPU has
AVX-512 (docs/codegen.md, "Matrix products through oneDNN"), about twice
the speed of eager's OpenBLAS on AMD's AVX-512 CPUs, so the models whose
steps are mostly products go past that bound (COMPILED_DNNL=0 measures
without it).
Before timing it checks the two copies agree: the first step's loss and
every parameter's gradient, compiled with ``eager_random=True`` so that
dropout draws eager's masks (the timed function draws its own, the
default) (per parameter, the largest difference relative
to the gradient's largest magnitude; the median and the largest over the
parameters are printed). Rounding differences can move a ReLU input that
is within rounding of 0 to the other side (resnet18: one element of a
200,000-element activation at 6e-6), which changes that element's gradient
and shows in the largest error of the parameters it reaches. The peak memory of five steps after two
warm-up steps is measured in a fresh process per side: "heap" is the peak rise of
the bytes allocated with malloc (bench/peakheap.c, preloaded), what the
steps need, with the compiled function's reusable memory (arenas, output
blocks) released before measuring so that it counts.

The same processes then time steps with the process to itself ("alone"),
as a training job runs one side: in the interleaved measurement eager and
compiled share glibc's allocator, whose thresholds for mapping memory
afresh and trimming the heap rise with the largest block freed so far
(compiling frees large ones), so eager's step finds its memory still
mapped; alone, with glibc's defaults, eager's step maps much of its
memory afresh (thousands of minor page faults a step, printed). Fresh
processes cannot be interleaved, so each side runs in two, in the order
eager, compiled, compiled, eager, which cancels a steady drift. The alone pair is measured
twice: with glibc's defaults, and with GLIBC_TUNABLES set so that glibc
keeps freed memory on both sides (KEEP_FREED), eager's best case.

Run from the repository root after `make`:

    /usr/bin/python3 bench/train.py [--only NAME,...] [--seconds S] [--no-memory]
"""

import copy
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

import torch  # noqa: E402

import compiled  # noqa: E402

F = torch.nn.functional


def resnet18():
    model = benchlib.vision_models().resnet18()
    x = torch.randn(8, 3, 224, 224)
    target = torch.randint(0, 1000, (8,))
    return model, x, lambda y: F.cross_entropy(y, target)


def transformer_encoder_layer():
    model = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
    x = torch.randn(16, 64, 256)
    proj = torch.randn(16, 64, 256)
    return model, x, lambda y: (y * proj).sum()


def mlp():
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(1024, 10))
    x = torch.randn(128, 784)
    target = torch.randint(0, 10, (128,))
    return model, x, lambda y: F.cross_entropy(y, target)


CASES = {"resnet18": resnet18, "transformer_encoder_layer": transformer_encoder_layer,
         "mlp": mlp}


def build(name):
    torch.manual_seed(0)
    model, x, loss_fn = CASES[name]()
    return model.train(), x, loss_fn


def make_step(fn, model, x, loss_fn):
    """One step of ``fn`` (the model or its compiled function) training
    ``model``'s parameters."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(fn(x))
        loss.backward()
        opt.step()
        return loss
    return step


# glibc settings under which freed memory stays with the process (no
# allocation below 32 MiB is mapped afresh, the heap is not trimmed below
# 1 GiB): eager's steps then fault no memory back in, as in the
# interleaved measurement.
KEEP_FREED = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"


def memory_main(name, mode, server, seconds):
    torch.set_num_threads(2)
    state = {}

    def setup():
        model, x, loss_fn = build(name)
        fn = model
        if mode == "compiled":
            fn = state["cf"] = compiled.compile(model, (x,), server=server)
        state["step"] = make_step(fn, model, x, loss_fn)

    def run(_):
        state["step"]()

    def release(_):
        if mode == "compiled":
            state["cf"].release_memory()

    # two warm-up steps: eager's first step leaves state (about 8 KiB for
    # the MLP) that its second frees, which would count against compiled
    mem = benchlib.measure_peak(setup, run, calls=5, release=release, warmup=2)
    # Time per step with this process to itself (the module docstring);
    # minor page faults per step show memory mapped afresh. Two steps
    # first: the memory measurement trimmed the heap (malloc_trim), so
    # both sides fault their memory back in once.
    for _ in range(2):
        state["step"]()
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    steps = []

    def timed():
        state["step"]()
        steps.append(1)
    alone = benchlib.time_calls(timed, min_seconds=seconds, min_calls=3, warmup=0)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / len(steps)
    print(json_line(dict(mem, alone_s=alone, faults=faults)))


def json_line(d):
    import json
    return json.dumps(d)


# Library calls both sides make (compiled code calls the same ATen kernels
# for matrix products and convolutions): their share of an eager step
# bounds what compiling the rest can gain.
LIBRARY_OPS = {"aten::mkldnn_convolution", "aten::convolution_backward", "aten::addmm",
               "aten::mm", "aten::bmm", "aten::baddbmm", "aten::_convolution",
               "aten::thnn_conv2d", "aten::_slow_conv2d_forward",
               "aten::_slow_conv2d_backward"}


def library_share(step):
    """The fraction of one eager step's CPU time spent in LIBRARY_OPS
    (torch.profiler, self time)."""
    step()
    with torch.profiler.profile() as prof:
        step()
    total = lib = 0.0
    for e in prof.key_averages():
        total += e.self_cpu_time_total
        if e.key in LIBRARY_OPS:
            lib += e.self_cpu_time_total
    return lib / total if total else float("nan")


def grad_errors(a, b):
    """Per parameter, the largest difference of the two gradients relative
    to the eager gradient's largest magnitude; returns (median, max)."""
    errs = []
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        if p.grad is None or q.grad is None:
            errs.append(0.0 if (p.grad is None) == (q.grad is None) else float("inf"))
            continue
        scale = q.grad.abs().max().item()
        errs.append((p.grad - q.grad).abs().max().item() / max(scale, 1e-12))
    errs.sort()
    return errs[len(errs) // 2], errs[-1]


def main():
    args = benchlib.case_arguments(__doc__.splitlines()[0], 6.0)
    if args.memory_case:
        memory_main(args.memory_case, args.mode, args.server, args.seconds / 2)
        return
    torch.set_num_threads(2)
    names = [n for n in CASES if not args.only or n in args.only.split(",")]
    rows, speedups, heap_ratios = [], [], []
    alone_rows, alone_speedups, tuned_speedups = [], [], []
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"BLAS: {'OpenBLAS' if 'openblas' in open('/proc/self/maps').read() else 'other'}")
    with benchlib.Daemon() as d:
        for name in names:
            model, x, loss_fn = build(name)
            twin = copy.deepcopy(model)
            t0 = time.perf_counter()
            cf = compiled.compile(model, (x,), server=d.address)
            compile_s = time.perf_counter() - t0
            # The first step from identical states: same loss, same gradients,
            # with eager's dropout masks (eager_random; the timed function
            # draws its own: docs/training.md).
            check = compiled.compile(model, (x,), server=d.address, eager_random=True)
            torch.manual_seed(1)
            loss_c = loss_fn(check(x))
            loss_c.backward()
            torch.manual_seed(1)
            loss_e = loss_fn(twin(x))
            loss_e.backward()
            loss_err = abs(loss_c.item() - loss_e.item()) / max(abs(loss_e.item()), 1e-12)
            g_med, g_max = grad_errors(model, twin)
            del check
            s = cf.summary()
            b = s.get("backward", {})
            eager_s, comp_s = benchlib.interleaved(
                [make_step(twin, twin, x, loss_fn), make_step(cf, model, x, loss_fn)],
                seconds=args.seconds)
            speed = eager_s / comp_s
            speedups.append(speed)
            share = library_share(make_step(twin, twin, x, loss_fn))
            heap_e = heap_c = float("nan")
            if not args.no_memory:
                def side(mode, env=None):
                    """One fresh process measuring this case (memory_main)."""
                    return benchlib.subprocess_json(
                        [__file__, "--memory-case", name, "--mode", mode, "--server", d.address,
                         "--seconds", str(args.seconds)], heap=True, env=env)

                def alone(env=None, first=None):
                    """Per side, (seconds, page faults) per step in
                    processes of its own (benchlib.alone_runs)."""
                    runs = benchlib.alone_runs(lambda mode: side(mode, env), first)
                    return [((a["alone_s"] + b["alone_s"]) / 2, (a["faults"] + b["faults"]) / 2)
                            for a, b in runs]
                je, jc = side("eager"), side("compiled")
                heap_e, heap_c = je["heap_mib"], jc["heap_mib"]
                heap_ratios.append(heap_c / heap_e if heap_e > 0 else 1.0)
                (e_s, e_f), (c_s, c_f) = alone(first=(je, jc))
                (et_s, et_f), (ct_s, ct_f) = alone(env={"GLIBC_TUNABLES": KEEP_FREED})
                alone_speedups.append(e_s / c_s)
                tuned_speedups.append(et_s / ct_s)
                alone_rows.append([name, f"{e_s * 1e3:.1f}", f"{c_s * 1e3:.1f}",
                                   f"{e_s / c_s:.2f}x", f"{e_f:.0f}", f"{c_f:.0f}",
                                   f"{et_s * 1e3:.1f}", f"{ct_s * 1e3:.1f}",
                                   f"{et_s / ct_s:.2f}x", f"{et_f:.0f}", f"{ct_f:.0f}"])
            rows.append([name, f"{eager_s * 1e3:.1f}", f"{comp_s * 1e3:.1f}", f"{speed:.2f}x",
                         f"{share * 100:.0f}%", f"{1 / share:.2f}x",
                         f"{compile_s:.1f}", f"{heap_e:.4f}", f"{heap_c:.4f}",
                         f"{s.get('kernels', 0)}/{s.get('extern', 0)}/{s.get('fallback', 0)}",
                         f"{b.get('kernels', 0)}/{b.get('extern', 0)}/{b.get('fallback', 0)}",
                         f"{loss_err:.1e}", f"{g_med:.1e}", f"{g_max:.1e}"])
            print(f"  {name}: {speed:.2f}x", file=sys.stderr, flush=True)
            del cf, model, twin
    print(benchlib.table(rows, ["case", "eager ms", "compiled ms", "speedup",
                                "eager in BLAS/conv", "bound", "compile s",
                                "eager heap MiB", "compiled heap MiB",
                                "fw kernels/extern/fallback", "bw kernels/extern/fallback",
                                "loss rel err", "grad rel err median", "max"]))
    print(f"geomean speedup: {benchlib.geomean(speedups):.2f}x over {len(speedups)} cases; "
          f"slowest {min(speedups):.2f}x (one step: forward, backward, SGD; eager and "
          f"compiled interleaved in one process)")
    if heap_ratios:
        below = sum(r <= 1.0 for r in heap_ratios)
        near = sum(1.0 < r <= 1.001 for r in heap_ratios)
        print(f"peak heap memory: compiled at most eager's in {below} of {len(heap_ratios)} "
              f"cases, above by at most 0.1% in {near} (a step's own Python objects vary "
              f"by a few hundred bytes from run to run), largest ratio {max(heap_ratios):.4f}")
    if alone_rows:
        print()
        print(benchlib.table(alone_rows, [
            "alone: case", "eager ms", "compiled ms", "speedup", "eager faults/step",
            "compiled faults/step", "tuned: eager ms", "compiled ms", "speedup",
            "eager faults/step", "compiled faults/step"]))
        print(f"geomean speedup alone: {benchlib.geomean(alone_speedups):.2f}x, slowest "
              f"{min(alone_speedups):.2f}x; with glibc keeping freed memory on both sides "
              f"(GLIBC_TUNABLES={KEEP_FREED}): "
              f"{benchlib.geomean(tuned_speedups):.2f}x, slowest {min(tuned_speedups):.2f}x "
              f"(each side in fresh processes of its own, eager, compiled, compiled, eager, "
              f"as a training job runs one; faults: minor page faults, memory mapped afresh)")

if __name__ == "__main__":
    main()
