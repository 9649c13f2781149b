"""One training step, eager vs Inductor vs compiled: `make bench-train`.

Not a test. For each case (train mode, 2 threads) the model is built once
from a fixed seed and copied, one copy per side:

- eager: the model itself;
- Inductor: ``torch.compile(model)`` (torch's default backend, default
  options);
- compiled: ``torch.compile(model, backend="compiled", options={"server":
  ...})``: AOTAutograd's forward and backward graphs compiled by the daemon;

and one training step of each is timed, the three interleaved in rounds in
one process (benchlib.interleaved, median), on the same inputs:

    opt.zero_grad(set_to_none=True); loss_fn(fn(x)).backward(); opt.step()

(SGD, momentum 0.9; the loss and the optimizer step are eager on every
side, only the model is compiled). The cases: resnet18 at batch 8
(torchvision's, or its rewrite in tests/python/visionmodels.py where
torchvision is not installed: the same network and weights), a
TransformerEncoderLayer and an MLP with dropout.

Before timing, each compiled side's first step is checked against eager's
from identical states: the loss and every parameter's gradient (per
parameter, the largest difference relative to the eager gradient's largest
magnitude; the median and the largest over the parameters are printed).
Models with dropout are checked with copies compiled to draw eager's
random numbers (Inductor's fallback_random, the compiled backend's
eager_random); the timed copies draw their own, as each backend does by
default. Rounding differences can move a ReLU input within rounding of 0
to the other side, which changes that element's gradient and shows in the
largest error of the parameters it reaches; a loss or a median gradient
error above TOLERANCE is flagged WRONG.

Also printed: the share of an eager step spent in matrix products and
convolutions ("eager in BLAS/conv"), which every side calls as library
code, and the peak memory of five steps after two warm-up steps in a fresh
process per side ("heap": the peak rise of the bytes allocated with malloc,
bench/peakheap.c preloaded; the compiled backend's reusable memory is
released first so that it counts); the compiled backend's graphs
(kernels/extern/fallback, the fallback operators by name, what runs); and
the geometric mean of compiled vs Inductor (Inductor's step time /
compiled's; target >= 1.1x, printed, not asserted).

Run from the repository root after `make`:

    .venv/bin/python bench/train.py [--only NAME,...] [--seconds S] [--no-memory]
"""

import copy
import json
import os
import shutil
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

import torch  # noqa: E402

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


TOLERANCE = 1e-3   # loss and median gradient error, relative


def has_dropout(model):
    return any(isinstance(m, torch.nn.Dropout) or
               (isinstance(m, torch.nn.MultiheadAttention) and m.dropout > 0)
               for m in model.modules())


def compile_for_check(side, model, server):
    """``model`` compiled by ``side`` to draw eager's random numbers."""
    if side == "compiled":
        return torch.compile(model, backend="compiled",
                             options={"server": server, "eager_random": True})
    return torch.compile(model)   # run under config.patch(fallback_random=True)


def first_step(fn, x, loss_fn):
    """One forward and backward from seed 1 (eager's dropout masks where
    the side draws them); Inductor compiles its backward lazily, so both
    run under fallback_random."""
    with torch._inductor.config.patch(fallback_random=True):
        torch.manual_seed(1)
        loss = loss_fn(fn(x))
        loss.backward()
    return loss.item()


def memory_main(name, mode, server):
    torch.set_num_threads(2)
    benchlib.check_peakheap()
    state = {}

    def setup():
        model, x, loss_fn = build(name)
        fn = benchlib.compile_side(mode, model, server)
        state["step"] = make_step(fn, model, x, loss_fn)

    def run(_):
        state["step"]()

    def release(_):
        if mode == "compiled":
            benchlib.release_backend_memory()

    # two warm-up steps: the compile, and state an eager step leaves for
    # the next one to free (about 8 KiB for the MLP)
    mem = benchlib.measure_peak(setup, run, calls=5, release=release, warmup=2)
    print(json.dumps(mem))


# Library calls every side makes (matrix products and convolutions): their
# share of an eager step bounds what compiling the rest can gain.
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
    to the eager gradient's largest magnitude (b is eager's); returns
    (median, max)."""
    errs = []
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        if p.grad is None or q.grad is None:
            errs.append(0.0 if (p.grad is None) == (q.grad is None) else float("inf"))
            continue
        scale = q.grad.abs().max().item()
        errs.append((p.grad - q.grad).abs().max().item() / max(scale, 1e-12))
    errs.sort()
    return errs[len(errs) // 2], errs[-1]


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def run_case(name, server, args):
    r = {"name": name, "problems": [], "ms": {}, "check": {}, "heap": {}}
    base, x, loss_fn = build(name)
    copies = {side: copy.deepcopy(base) for side in benchlib.SIDES}
    # eager's first step, the reference (its gradients stay for the check)
    ref_model = copy.deepcopy(base)
    loss_e = first_step(ref_model, x, loss_fn)
    dropout = has_dropout(base)
    steps = {"eager": make_step(copies["eager"], copies["eager"], x, loss_fn)}
    mark = None
    for side in ("inductor", "compiled"):
        try:
            if side == "compiled":
                # from the check on: where the check's graphs pass the timed
                # copy's guards (no dropout: the same options), Dynamo runs
                # the copy with them and the backend makes no new graph
                mark = benchlib.backend_mark()
            check_model = copy.deepcopy(base)
            check = compile_for_check(side, check_model, server) if dropout else \
                benchlib.compile_side(side, check_model, server)
            loss_c = first_step(check, x, loss_fn)
            loss_err = abs(loss_c - loss_e) / max(abs(loss_e), 1e-12)
            g_med, g_max = grad_errors(check_model, ref_model)
            r["check"][side] = (loss_err, g_med, g_max)
            if not (loss_err <= TOLERANCE and g_med <= TOLERANCE):
                r["problems"].append(f"{name}: {side}'s first step is WRONG: loss rel err "
                                     f"{loss_err:.1e}, gradients' median rel err {g_med:.1e} "
                                     f"(tolerance {TOLERANCE:.0e})")
            del check, check_model
            model = copies[side]
            fn = benchlib.compile_side(side, model, server)
            steps[side] = make_step(fn, model, x, loss_fn)
        except Exception as e:
            r["problems"].append(f"{name}: {side} failed: {benchlib.error_text(e)}")
            traceback.print_exc()
    times = benchlib.interleaved(list(steps.values()), seconds=args.seconds)
    r["ms"] = {side: t * 1e3 for side, t in zip(steps, times)}
    r["backend"] = benchlib.backend_graphs(mark) if mark is not None else []
    ind, comp = r["ms"].get("inductor"), r["ms"].get("compiled")
    r["vs_inductor"] = ind / comp if ind and comp else None
    r["share"] = library_share(make_step(ref_model, ref_model, x, loss_fn))
    del steps, copies, ref_model, base
    torch._dynamo.reset()
    if not args.no_memory:
        for side in benchlib.SIDES:
            if side != "eager" and side not in r["ms"]:
                continue
            try:
                j = benchlib.subprocess_json([os.path.abspath(__file__), "--memory-case", name,
                                              "--mode", side, "--server", server], heap=True)
                r["heap"][side] = j["heap_mib"]
            except Exception as e:
                r["problems"].append(f"{name}: {side}'s memory process failed: "
                                     f"{benchlib.error_text(e)}")
    return r


def main():
    args = benchlib.case_arguments(__doc__.splitlines()[0], 6.0)
    if args.memory_case:
        memory_main(args.memory_case, args.mode, args.server)
        return
    torch.set_num_threads(2)
    names, run_dir = benchlib.case_run(args.only, CASES, "train")
    print(f"{benchlib.machine_line()}; "
          f"resnet18 from {benchlib.vision_models().__name__}")
    results = []
    try:
        with benchlib.Daemon() as d:
            for name in names:
                r = run_case(name, d.address, args)
                results.append(r)
                print(f"  {name}: compiled vs Inductor {fmt(r['vs_inductor'], '.2f')}x",
                      file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    rows = []
    for r in results:
        ms, ck, h = r["ms"], r["check"], r["heap"]
        e = ms.get("eager")

        def check(side):
            c = ck.get(side)
            return "-" if c is None else f"{c[0]:.0e}/{c[1]:.0e}/{c[2]:.0e}"
        rows.append([r["name"], fmt(e, ".1f"), fmt(ms.get("inductor"), ".1f"),
                     fmt(ms.get("compiled"), ".1f"),
                     fmt(r["vs_inductor"], ".2f") + ("x" if r["vs_inductor"] else ""),
                     fmt(e / ms["inductor"] if "inductor" in ms else None, ".2f"),
                     fmt(e / ms["compiled"] if "compiled" in ms else None, ".2f"),
                     f"{r['share'] * 100:.0f}%",
                     fmt(h.get("eager"), ".1f"), fmt(h.get("inductor"), ".1f"),
                     fmt(h.get("compiled"), ".1f"), check("inductor"), check("compiled")])
    print()
    print("one training step (forward, backward, SGD), ms, median, the sides interleaved in "
          "one process; speed ratios are time / time")
    print(benchlib.table(rows, ["case", "eager", "Inductor", "compiled", "compiled vs Inductor",
                                "Inductor vs eager", "compiled vs eager", "eager in BLAS/conv",
                                "heap MiB eager", "Inductor", "compiled",
                                "check Inductor loss/grad med/max", "check compiled"]))
    print()
    print("compiled backend graphs (kernels/extern/fallback; runs: native code or the ATen "
          "program):")
    for r in results:
        print(f"  {r['name']}: {benchlib.describe_graphs(r['backend'])}")
    print()
    speed = [r["vs_inductor"] for r in results if r["vs_inductor"]]
    if speed:
        g = benchlib.geomean(speed)
        print(f"compiled vs Inductor, one training step: geomean {g:.2f}x over {len(speed)} "
              f"cases, slowest {min(speed):.2f}x (target: geomean >= 1.1x: "
              f"{benchlib.target_mark(g >= 1.1)})")
    benchlib.print_problems([p for r in results for p in r["problems"]],
                            " (steps that differ from eager, sides that failed)")


if __name__ == "__main__":
    main()
