#!/usr/bin/env python3
"""Packages against eager, torch.export and AOTInductor: `make bench-package`.

Not a test. For each model (an MLP, a small CNN, a stack of 4
TransformerEncoderLayers, and resnet50 when torchvision is installed; eval
mode, no_grad, 2 threads), the parent exports it with torch.export to a
.pt2, has this run's daemon compile it into a package (`compilectl
package`), and AOTInductor compile the same .pt2
(`torch._inductor.aoti_compile_and_package`). Then, in fresh processes
(each side --repeat times, alternating, the median printed; one untimed
round first writes the byte-code caches):

- eager: the model's first call (the reference: a process that runs the
  model eagerly pays this at its start too);
- package: ``compiled.load_package(path)`` to its first result (the import
  of compiled, done before, is printed apart), then in the same process one
  eager call of the same model (its first) and eager's steady time;
- export: ``torch.export.load(path).module()`` to its first result;
- AOTInductor: ``torch._inductor.aoti_load_package(path)`` to its first
  result;

and in one process the steady-state time per call of eager, the package
and AOTInductor, interleaved. Printed targets (not asserted): package load
plus first result at most 1.5x one eager call, and below AOTInductor's.

Run from the repository root after `make`:

    .venv/bin/python bench/package.py [--only mlp,cnn] [--repeat N]

(/work/tvenv/bin/python, a torch with torchvision, adds resnet50.)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

MODELS = ["mlp", "cnn", "transformer4", "resnet50"]
THREADS = 2


def build(name):
    import torch
    torch.manual_seed(0)
    if name == "mlp":
        m = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10))
        return m.eval(), torch.randn(32, 512)
    if name == "cnn":
        def block(i, o):
            return [torch.nn.Conv2d(i, o, 3, padding=1), torch.nn.BatchNorm2d(o),
                    torch.nn.ReLU(), torch.nn.MaxPool2d(2)]
        m = torch.nn.Sequential(*block(3, 32), *block(32, 64), *block(64, 128),
                                torch.nn.Flatten(), torch.nn.Linear(128 * 4 * 4, 10))
        return m.eval(), torch.randn(8, 3, 32, 32)
    if name == "transformer4":
        layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
        return torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).eval(), \
            torch.randn(4, 64, 256)
    if name == "resnet50":
        import torchvision
        return torchvision.models.resnet50().eval(), torch.randn(2, 3, 224, 224)
    raise ValueError(name)


def child(args):
    t_start = time.perf_counter()
    import torch
    torch.set_num_threads(THREADS)
    t_torch = time.perf_counter() - t_start
    out = {"import_torch_s": t_torch}
    if args.child == "package":
        t0 = time.perf_counter()
        import compiled
        out["import_compiled_s"] = time.perf_counter() - t0
        _, x = build(args.model)
        with torch.no_grad():
            t0 = time.perf_counter()
            run = compiled.load_package(args.path)
            y = run(x)
            out["first_s"] = time.perf_counter() - t0
            out["runs"] = run.program.summary.get("runs")
            model, _ = build(args.model)
            t0 = time.perf_counter()
            ref = model(x)
            out["eager_first_s"] = time.perf_counter() - t0
            out["eager_steady_s"] = benchlib.time_calls(lambda: model(x), min_seconds=0.5)
            out["max_diff"] = float((y - ref).abs().max())
    elif args.child in ("eager", "export", "aoti"):
        model, x = build(args.model)
        # first_s: from loading the program (nothing to load for eager) to
        # its first result
        load = {"eager": lambda: model,
                "export": lambda: torch.export.load(args.path).module(),
                "aoti": lambda: torch._inductor.aoti_load_package(args.path)}[args.child]
        with torch.no_grad():
            t0 = time.perf_counter()
            load()(x)
            out["first_s"] = time.perf_counter() - t0
    elif args.child == "steady":
        import compiled
        model, x = build(args.model)
        paths = json.loads(args.path)
        with torch.no_grad():
            run = compiled.load_package(paths["package"])
            fns = [lambda: model(x), lambda: run(x)]
            if paths.get("aoti"):
                f = torch._inductor.aoti_load_package(paths["aoti"])
                fns.append(lambda: f(x))
            t = benchlib.interleaved(fns, rounds=4, seconds=args.seconds)
        out.update(eager_s=t[0], package_s=t[1], aoti_s=t[2] if len(t) > 2 else None,
                   runs=run.program.summary.get("runs"))
    print(json.dumps(out))


def prepare(name, d, server):
    """Exports, packages and AOTInductor-compiles `name` into d."""
    import torch
    model, x = build(name)
    pt2 = os.path.join(d, name + ".pt2")
    with torch.no_grad():
        ep = torch.export.export(model, (x,))
    torch.export.save(ep, pt2)
    cpkg = os.path.join(d, name + ".cpkg")
    t0 = time.perf_counter()
    r = subprocess.run([os.path.join(benchlib.BUILD, "bin", "compilectl"), "--server", server,
                        "package", pt2, "-o", cpkg], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"compilectl package {name}: {r.stderr}")
    package_s = time.perf_counter() - t0
    aoti = os.path.join(d, name + ".aoti.pt2")
    t0 = time.perf_counter()
    try:
        torch._inductor.aoti_compile_and_package(ep, package_path=aoti)
        aoti_s = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001
        print(f"  {name}: AOTInductor failed: {benchlib.error_text(e)}", flush=True)
        aoti, aoti_s = None, None
    return pt2, cpkg, aoti, package_s, aoti_s


def fmt_ms(s):
    return "-" if s is None else f"{s * 1000:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    import torch
    torch.set_num_threads(THREADS)
    try:
        import torchvision  # noqa: F401
        have_tv = True
    except ImportError:
        have_tv = False
    names = [n for n in (args.only.split(",") if args.only else MODELS)
             if n != "resnet50" or have_tv]
    print(benchlib.machine_line())
    # Fresh processes as a deployment runs them: byte-code caches written
    # (an installed package has them; PYTHONDONTWRITEBYTECODE would make
    # every process compile compiled's and torch's sources again) and no
    # background import of the gRPC client, which a package never uses.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    env = {"OMP_NUM_THREADS": str(THREADS), "COMPILED_PREFETCH": "0",
           "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="bench-package-inductor-")}
    os.environ.update(env)
    me = os.path.abspath(__file__)
    rows, steady_rows = [], []
    ratios_eager, ratios_aoti = [], []
    with tempfile.TemporaryDirectory(prefix="bench-package-") as d, benchlib.Daemon() as daemon:
        for name in names:
            print(f"{name}: export, package, AOTInductor compile ...", flush=True)
            try:
                pt2, cpkg, aoti, package_s, aoti_s = prepare(name, d, daemon.address)
            except Exception as e:  # noqa: BLE001
                print(f"  {name}: {benchlib.error_text(e)}", flush=True)
                rows.append([name] + ["-"] * 12)
                continue
            runs = {"eager": [], "package": [], "export": [], "aoti": []}
            for i in range(args.repeat + 1):
                order = ["eager", "package", "export", "aoti"] if i % 2 == 0 else \
                    ["aoti", "export", "package", "eager"]
                for side in order:
                    if side == "aoti" and not aoti:
                        continue
                    path = {"eager": "", "package": cpkg, "export": pt2, "aoti": aoti}[side]
                    j = benchlib.subprocess_json(
                        [me, "--child", side, "--model", name, "--path", path], env=env)
                    if i > 0:  # the first round is untimed: it fills the pyc caches
                        runs[side].append(j)
            pk = runs["package"]
            first = statistics.median(j["first_s"] for j in pk)
            eager_cold = statistics.median(j["first_s"] for j in runs["eager"])
            eager1 = statistics.median(j["eager_first_s"] for j in pk)
            eager_steady = statistics.median(j["eager_steady_s"] for j in pk)
            exp = statistics.median(j["first_s"] for j in runs["export"])
            ao = statistics.median(j["first_s"] for j in runs["aoti"]) if runs["aoti"] else None
            ratios_eager.append(first / eager_cold)
            if ao:
                ratios_aoti.append(first / ao)
            rows.append([name, fmt_ms(statistics.median(j["import_compiled_s"] for j in pk)),
                         fmt_ms(first), fmt_ms(eager_cold), fmt_ms(eager1),
                         fmt_ms(eager_steady), f"{first / eager_cold:.2f}x", fmt_ms(exp),
                         fmt_ms(ao),
                         "-" if not ao else f"{first / ao:.2f}",
                         f"{package_s:.1f}", "-" if aoti_s is None else f"{aoti_s:.1f}",
                         f"{max(j['max_diff'] for j in pk):.1e}", pk[0].get("runs")])
            st = benchlib.subprocess_json(
                [me, "--child", "steady", "--model", name, "--seconds", str(args.seconds),
                 "--path", json.dumps({"package": cpkg, "aoti": aoti})], env=env)
            steady_rows.append([name, fmt_ms(st["eager_s"]), fmt_ms(st["package_s"]),
                                fmt_ms(st["aoti_s"]), f"{st['eager_s'] / st['package_s']:.2f}x",
                                "-" if not st["aoti_s"] else
                                f"{st['aoti_s'] / st['package_s']:.2f}x"])
            print(f"  done: load+first {fmt_ms(first)} ms, eager call {fmt_ms(eager1)} ms",
                  flush=True)
    print()
    print(f"Fresh processes, median of {args.repeat}, {THREADS} threads, times in ms "
          "(import: `import compiled`, before load_package; first: load_package to the "
          "first result; eager cold: a fresh process's first eager call; eager after: the "
          "package process's first eager call, after the package's; x eager: first / eager "
          "cold; export: torch.export.load().module() to first result; AOTI: "
          "aoti_load_package to first result; build: compilectl package and AOTInductor "
          "compile, s)")
    print(benchlib.table(rows, ["model", "import", "first", "eager cold", "eager after",
                                "eager steady",
                                "x eager", "export", "AOTI", "/AOTI", "pkg build s",
                                "AOTI build s", "max diff", "runs"]))
    print()
    print("Steady state, one process, interleaved medians (ms per call; speed-up = "
          "other / package)")
    print(benchlib.table(steady_rows, ["model", "eager", "package", "AOTI", "vs eager",
                                       "vs AOTI"]))
    print()
    worst = max(ratios_eager)
    print(f"load + first result <= 1.5x one eager call: "
          f"{benchlib.target_mark(worst <= 1.5)} (worst {worst:.2f}x)")
    if ratios_aoti:
        w = max(ratios_aoti)
        print(f"load + first result < AOTInductor's: {benchlib.target_mark(w < 1.0)} "
              f"(worst {w:.2f} of AOTInductor's)")


if __name__ == "__main__":
    sys.exit(main())
