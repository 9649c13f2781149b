#!/usr/bin/env python3
"""Start-up on warm caches, Inductor vs compiled: `make bench-startup`.

Not a test. What a new training or serving process waits for before its
first compiled result when the compiled code already exists: for each model
(eval mode, no_grad, batch 2, 2 threads), new processes each time

    torch.compile(model, ...) ... the first result of the compiled model

from the call to torch.compile (imports the compile needs, Dynamo's trace,
the backend, loading, the first call) for two sides:

- Inductor: torch.compile's default backend, its on-disk caches warm: one
  process first fills this run's TORCHINDUCTOR_CACHE_DIR (the FX graph and
  AOTAutograd caches on, as by default; its time is printed as "fill"),
  then --repeat new processes are timed, each checked to have hit the FX
  graph cache;
- compiled: ``torch.compile(backend="compiled")``, the daemon's cache warm:
  one process first has the daemon (this run's, empty at the start)
  compile the graphs ("fill"), then --repeat new processes are timed
  (sharing the client's code cache, COMPILED_CODE_CACHE, as processes of
  one user do).

- with --precompile, two more sides with torch's caching precompile on
  (``torch._dynamo.config.caching_precompile``, not torch.compile's
  default): "inductor+pc" and "compiled+pc". The fill process also calls
  ``torch.compiler.save_cache_artifacts()`` (after its timed first result),
  which writes Dynamo's bytecode, guards and the backend's artifact; a warm
  process loads them instead of tracing (checked: a hit, no graph traced).
  Each of these sides has its own TORCHINDUCTOR_CACHE_DIR (the entry's path
  is the function's name and line only).

The timed processes alternate Inductor, compiled, compiled, Inductor... so
that a drift of the machine's speed affects both alike. Each also makes
three eager calls after its compiled result (the median is the "eager"
reference of a call in a warm process) and checks the compiled result
against them. Printed: the medians, warm/eager per side, and

    compiled / Inductor    (warm start-up; target <= 0.5, printed, not asserted)

Run from the repository root after `make`:

    .venv/bin/python bench/startup.py [--only resnet50,...] [--repeat N] [--precompile]
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

MODELS = ["resnet50", "densenet121", "transformer_encoder", "vit_b_16"]
SIDES = ("inductor", "compiled")
PC_SIDES = ("inductor+pc", "compiled+pc")


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
    model, x = build(args.model)
    out = {"model": args.model, "side": args.mode}
    side, precompile = args.mode.split("+")[0], args.mode.endswith("+pc")
    if precompile:
        torch._dynamo.config.caching_precompile = True
    with torch.no_grad():
        try:
            t0 = time.perf_counter()
            fn = benchlib.compile_side(side, model, args.server)
            y = fn(x)
            out["first_result"] = time.perf_counter() - t0
            if precompile:
                from torch._dynamo.utils import counters
                out["pc_hits"] = counters["dynamo_cache"]["dynamo_cache_hit"]
                out["pc_traced"] = counters["stats"]["unique_graphs"]
                if out["pc_hits"] == 0:
                    torch.compiler.save_cache_artifacts()
        except Exception as e:  # reported by the parent
            out["error"] = benchlib.error_text(e)
            print(json.dumps(out))
            return
        eager = []
        for _ in range(3):
            t = time.perf_counter()
            want = model(x)
            eager.append(time.perf_counter() - t)
    out["eager"] = statistics.median(eager)
    out["err"] = ((y - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()
    if args.mode == "inductor":  # with precompile, Inductor's FX cache is not asked
        from torch._dynamo.utils import counters
        out["fx_hits"] = counters["inductor"]["fxgraph_cache_hit"]
        out["fx_misses"] = counters["inductor"]["fxgraph_cache_miss"]
        out["caches"] = benchlib.inductor_cache_state()
    elif side == "compiled":
        graphs = benchlib.backend_graphs()
        out["graphs"] = benchlib.describe_graphs(graphs)
    print(json.dumps(out))


TOLERANCE = 1e-3


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="", help="comma-separated models")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--precompile", action="store_true",
                   help="also both sides with torch's caching precompile")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--server", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    models = [m for m in args.only.split(",") if m] or MODELS
    me = os.path.abspath(__file__)
    run_dir = tempfile.mkdtemp(prefix="compiled-bench-startup-")
    env = dict(benchlib.inductor_env(os.path.join(run_dir, "inductor")),
               COMPILED_CODE_CACHE=os.path.join(run_dir, "code"))
    print(benchlib.machine_line())
    sides = SIDES + (PC_SIDES if args.precompile else ())
    envs = {side: dict(env, TORCHINDUCTOR_CACHE_DIR=os.path.join(run_dir, side))
            if side.endswith("+pc") else env for side in sides}
    rows, ratios, problems, graphs = [], [], [], []
    pc_rows, pc_ratios = [], []
    try:
        with benchlib.Daemon() as daemon:
            for name in models:
                def run(side):
                    try:
                        j = benchlib.subprocess_json([me, "--child", "--model", name, "--mode",
                                                      side, "--server", daemon.address],
                                                     env=envs[side])
                    except Exception as e:
                        j = {"error": benchlib.error_text(e)}
                    if "error" in j:
                        problems.append(f"{name}: {side} failed: {j['error']}")
                    elif not j["err"] <= TOLERANCE:
                        problems.append(f"{name}: {side}'s result is WRONG: max rel err "
                                        f"{j['err']:.1e}")
                    return j
                fill = {side: run(side) for side in sides}
                warm = {side: [] for side in sides}
                for i in range(args.repeat):
                    for side in (sides if i % 2 == 0 else tuple(reversed(sides))):
                        j = run(side)
                        if "error" not in j:
                            warm[side].append(j)
                        if side.endswith("+pc") and "error" not in j and \
                                (j["pc_hits"] != 1 or j["pc_traced"] != 0):
                            problems.append(f"{name}: a warm {side} process did not load its "
                                            f"precompiled entry ({j['pc_hits']} hits, "
                                            f"{j['pc_traced']} graphs traced)")
                        if side == "inductor" and "error" not in j and \
                                (j["fx_hits"] == 0 or j["fx_misses"] > 0):
                            problems.append(f"{name}: a warm Inductor process did not hit its "
                                            f"FX graph cache only ({j['fx_hits']} hits, "
                                            f"{j['fx_misses']} misses)")

                def med(side, key):
                    vals = [w[key] for w in warm[side]]
                    return statistics.median(vals) if vals else None
                wi, wc = med("inductor", "first_result"), med("compiled", "first_result")
                ei, ec = med("inductor", "eager"), med("compiled", "eager")
                ratio = wc / wi if wi and wc else None
                if ratio is not None:
                    ratios.append(ratio)
                f = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
                rows.append([name, f(fill["inductor"].get("first_result")),
                             f(fill["compiled"].get("first_result")), f(wi), f(wc),
                             f(ei), f(ec), f(wi / ei if wi and ei else None),
                             f(wc / ec if wc and ec else None), f(ratio)])
                if args.precompile:
                    wpi, wpc = med("inductor+pc", "first_result"), med("compiled+pc", "first_result")
                    pr = wpc / wi if wpc and wi else None
                    if pr is not None:
                        pc_ratios.append(pr)
                    pc_rows.append([name, f(fill["inductor+pc"].get("first_result")),
                                    f(fill["compiled+pc"].get("first_result")), f(wi), f(wc),
                                    f(wpi), f(wpc), f(ratio), f(pr),
                                    f(wpc / wpi if wpc and wpi else None)])
                if warm["compiled"]:
                    graphs.append(f"{name}: {warm['compiled'][0]['graphs']}")
                print(f"{name}: warm Inductor {f(wi)} s, compiled {f(wc)} s, "
                      f"compiled/Inductor {f(ratio)}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    print(f"start-up to first result: torch.compile(...) to the first result in a new "
          f"process, batch 2, 2 threads; fill: the first process (empty caches), warm: "
          f"median of {args.repeat} processes with warm caches; seconds")
    print(benchlib.table(rows, ["model", "fill Inductor", "fill compiled", "warm Inductor",
                                "warm compiled", "eager (I proc)", "eager (c proc)",
                                "Inductor warm/eager", "compiled warm/eager",
                                "warm compiled/Inductor"]))
    print()
    print("compiled backend graphs (a warm process):")
    for g in graphs:
        print("  " + g)
    if ratios:
        g = benchlib.geomean(ratios)
        print(f"warm start-up compiled/Inductor: geomean {g:.2f}, largest {max(ratios):.2f} "
              f"(target <= 0.5: {benchlib.target_mark(max(ratios) <= 0.5)} for every model, "
              f"{benchlib.target_mark(g <= 0.5)} for the geomean)")
    if pc_rows:
        print()
        print("with torch's caching precompile (--precompile; +pc: a warm process loads "
              "Dynamo's saved bytecode and guards instead of tracing); warm: seconds")
        print(benchlib.table(pc_rows, ["model", "fill Inductor+pc", "fill compiled+pc",
                                       "warm Inductor", "warm compiled", "warm Inductor+pc",
                                       "warm compiled+pc", "compiled/Inductor",
                                       "compiled+pc/Inductor", "compiled+pc/Inductor+pc"]))
        if pc_ratios:
            g = benchlib.geomean(pc_ratios)
            print(f"warm start-up compiled+pc / Inductor (default): geomean {g:.2f}, largest "
                  f"{max(pc_ratios):.2f} (target <= 0.5: "
                  f"{benchlib.target_mark(max(pc_ratios) <= 0.5)} for every model, "
                  f"{benchlib.target_mark(g <= 0.5)} for the geomean)")
    benchlib.print_problems(problems)


if __name__ == "__main__":
    main()
