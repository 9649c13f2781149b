"""Shared pieces of the Python benchmarks (not a test, not a library users
import): a daemon on a free port, robust timing, peak-memory measurement in
a fresh process, ratio tables, torchvision's models (or their rewrite
in tests/python/visionmodels.py where torchvision is not installed), and
the three sides the model benchmarks compare: eager, Inductor
(``torch.compile`` with its default backend) and compiled
(``torch.compile(backend="compiled")``), with their caches (SIDES,
compile_side, inductor_env, release_backend_memory, backend_graphs).

Timing: calls are repeated until at least ``min_seconds`` have passed (and
at least ``min_calls`` calls), after warm-up calls; the median is reported.
Eager and compiled are measured in the same process, interleaved in rounds
(eager block, compiled block, compiled block, eager block, ...), so that
drift of a shared machine affects both alike.

Memory: ``peak_rss`` runs a case in a fresh Python process and reports how
far the resident set rose above what it was once the model and inputs
existed (VmHWM after resetting it through /proc/self/clear_refs, with
malloc_trim before the reset, so memory freed earlier does not count).
"""

import ctypes
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("COMPILED_BUILD", os.path.join(REPO, "build"))
sys.path.insert(0, os.path.join(REPO, "client", "python"))


def vision_models():
    """torchvision.models where torchvision is installed, else
    tests/python/visionmodels.py, which rewrites the few torchvision models
    the benchmarks build (the same networks and, from the same seed, the
    same weights) for where there is no torchvision: the project's torch
    2.13 has no build of it."""
    try:
        import torchvision
    except ImportError:
        tests = os.path.join(REPO, "tests", "python")
        if tests not in sys.path:
            sys.path.insert(0, tests)
        import visionmodels
        return visionmodels
    return torchvision.models


class Daemon:
    """The daemon on a free port, in a temporary directory (a fresh cache)."""

    def __init__(self, *args):
        self.args = list(args)

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="compiled-bench-")
        port_file = os.path.join(self.dir, "port")
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "bin", "compiled"), "--listen", "127.0.0.1:0",
             "--port-file", port_file, "--cache-dir", os.path.join(self.dir, "cache"),
             "--log-file", os.path.join(self.dir, "daemon.log")] + self.args,
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.time() + 15
        while time.time() < deadline:
            if os.path.exists(port_file):
                text = open(port_file).read().strip()
                if text:
                    self.address = "127.0.0.1:" + text
                    return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError("the daemon did not start; see " + self.dir)

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def time_calls(fn, min_seconds=1.0, min_calls=5, warmup=2):
    """Median seconds per call of fn() (after warm-up calls)."""
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) > 10000:
            break
    return statistics.median(times)


def interleaved(fns, rounds=4, seconds=1.0):
    """Median seconds per call for each fn, measured in alternating rounds.
    Returns a list, one median per fn (the median over rounds of each
    round's median)."""
    for fn in fns:
        for _ in range(2):
            fn()
    per = [[] for _ in fns]
    order = list(range(len(fns)))
    for r in range(rounds):
        seq = order if r % 2 == 0 else list(reversed(order))
        for i in seq:
            per[i].append(time_calls(fns[i], min_seconds=seconds / rounds, min_calls=3,
                                     warmup=0))
    return [statistics.median(p) for p in per]


def _status_kb(field):
    """A size line of /proc/self/status (VmRSS: resident now, VmHWM: its
    peak) in kB; 0 where the kernel does not give it."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def trim_and_reset_peak():
    """Returns freed heap memory to the system and resets the peak RSS."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


PEAKHEAP = os.path.join(os.environ.get("COMPILED_BUILD", os.path.join(REPO, "build")),
                        "bench", "peakheap.so")


def _peakheap():
    """bench/peakheap.c when this process was started with it preloaded
    (subprocess_json(..., heap=True)), else None."""
    if PEAKHEAP not in os.environ.get("LD_PRELOAD", ""):
        return None
    lib = ctypes.CDLL(PEAKHEAP)  # the preloaded copy: its counters
    for f in ("peakheap_current", "peakheap_peak"):
        getattr(lib, f).restype = ctypes.c_longlong
    return lib


def measure_peak(setup, run, calls=3, release=None, warmup=1):
    """Memory of running run() `calls` times, once setup() is done and run()
    has run `warmup` times; setup may return state passed to run. The first
    call compiles, loads and allocates what stays; a second one reaches the
    steady state of code that keeps state from its first call (an
    optimizer's momentum buffers). release(state),
    when given, drops what the first call kept for reuse (a compiled
    function's arenas and output blocks), so the memory a call needs is
    counted even when it is kept between calls. Returns a dict: rss_mib,
    the peak RSS increase over the RSS before the calls; heap_mib, the peak
    increase of malloc'd bytes (None without bench/peakheap.c preloaded);
    base_mib, that RSS."""
    state = setup()
    for _ in range(warmup):
        run(state)  # compiles, loads, allocates what stays
    if release is not None:
        release(state)
    trim_and_reset_peak()
    heap = _peakheap()
    if heap is not None:
        heap.peakheap_reset()
        heap0 = heap.peakheap_current()
    base = _status_kb("VmRSS")
    for _ in range(calls):
        run(state)
    rss = (_status_kb("VmHWM") - base) / 1024.0
    heap_mib = (heap.peakheap_peak() - heap0) / 2**20 if heap is not None else None
    return {"rss_mib": rss, "heap_mib": heap_mib, "base_mib": base / 1024.0}


def subprocess_json(args, timeout=900, heap=False, env=None):
    """Runs `python args...` (this interpreter), returns the JSON it prints
    last. heap: with bench/peakheap.c preloaded (measure_peak's heap_mib);
    env: variables to add to its environment."""
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "client", "python"), **(env or {}))
    if heap:
        if not os.path.exists(PEAKHEAP):
            raise RuntimeError(f"{PEAKHEAP} is missing: run `make bench-models`")
        env["LD_PRELOAD"] = PEAKHEAP
    out = subprocess.run([sys.executable] + args, capture_output=True, text=True,
                         timeout=timeout, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def alone_runs(side, first=None):
    """Fresh processes of each side in the order eager, compiled, compiled,
    eager, which cancels a steady drift of the machine's speed (fresh
    processes cannot be interleaved). side(mode) runs one and returns its
    result; first: the (eager, compiled) pair already run. Returns
    ((eager, eager), (compiled, compiled))."""
    je, jc = first if first is not None else (side("eager"), side("compiled"))
    jc2, je2 = side("compiled"), side("eager")
    return (je, je2), (jc, jc2)


def case_arguments(description, seconds):
    """Command-line arguments of a benchmark over named cases that measures
    memory (and cold compiles) in fresh processes of itself: --only
    NAME,..., --seconds, --no-memory, --no-cold; --memory-case,
    --cold-case, --mode and --server are for those processes."""
    import argparse
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--only", default="")
    ap.add_argument("--seconds", type=float, default=seconds)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold compiles")
    ap.add_argument("--memory-case", help=argparse.SUPPRESS)
    ap.add_argument("--cold-case", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--server", help=argparse.SUPPRESS)
    return ap.parse_args()


def case_run(only, cases, name):
    """The set-up of a case benchmark's main process: the names of `cases`
    that --only (NAME,... or "" for all) picks, in their order (an unknown
    name exits, listing the known ones), and a new temporary folder for
    this run's caches, returned for the caller to remove. The caches'
    variables (Inductor's and compiled's code cache) are set in this
    process's environment, so that the memory and cold processes inherit
    them; call before Inductor is imported, which reads them. Dynamo's
    recompile limit is raised: every compile of a run's models is a new
    torch.compile, and the cases must not run into the limit and silently
    run eagerly."""
    import torch
    names = [n for n in cases if not only or n in only.split(",")]
    unknown = set(only.split(",")) - set(cases) - {""}
    if unknown:
        raise SystemExit(f"unknown case(s) {', '.join(sorted(unknown))}; known: {', '.join(cases)}")
    run_dir = tempfile.mkdtemp(prefix=f"compiled-bench-{name}-")
    os.environ.update(inductor_env(os.path.join(run_dir, "inductor")))
    os.environ["COMPILED_CODE_CACHE"] = os.path.join(run_dir, "code")
    torch._dynamo.config.recompile_limit = 64
    return names, run_dir


def print_problems(problems, what=""):
    """The end of a benchmark's report: its problems (each line marked
    "!!!" to stand out in a log), under a heading that says what they are;
    nothing when there are none."""
    if problems:
        print()
        print(f"!!! PROBLEMS{what}:")
        for p in problems:
            print("!!!   " + p)


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def table(rows, headers):
    """A plain text table."""
    cells = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for j, r in enumerate(cells):
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                               enumerate(zip(r, widths))))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---- eager, Inductor and the compiled backend side by side ----

SIDES = ("eager", "inductor", "compiled")

# Inductor's and AOTAutograd's on-disk caches, off (cold compiles) or on
# (their defaults: warm start-up). Remote caches are off by default and
# stay off.
_INDUCTOR_CACHES = ("TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE")


def inductor_env(cache_dir, caches=True):
    """Environment for a process whose Inductor keeps everything under
    cache_dir (TORCHINDUCTOR_CACHE_DIR: the FX graph and AOTAutograd
    caches, the generated C++ and its built libraries, the precompiled
    header); caches=False turns the FX graph and AOTAutograd caches off
    too, so that nothing of an earlier compile is reused even within the
    process."""
    env = {"TORCHINDUCTOR_CACHE_DIR": cache_dir,
           "TRITON_CACHE_DIR": os.path.join(cache_dir, "triton"),
           "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "0",
           "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "0"}
    for name in _INDUCTOR_CACHES:
        env[name] = "1" if caches else "0"
    return env


def inductor_cache_state():
    """What this process's Inductor caches are (checked by cold and warm
    measurements, printed with them)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    return {"cache_dir": cache_dir(), "fx_graph_cache": bool(inductor_config.fx_graph_cache),
            "autograd_cache": bool(functorch_config.enable_autograd_cache)}


def compile_side(side, model, server):
    """``model`` compiled by ``side``: "inductor" (torch.compile's default
    backend, default options), "compiled" (the compiled backend against
    the daemon at server), "compiled.compile" is not a side here (it needs
    inputs: frontend_compile). "eager" returns the model."""
    import torch
    if side == "eager":
        return model
    if side == "inductor":
        return torch.compile(model)
    if side == "compiled":
        return torch.compile(model, backend="compiled", options={"server": server})
    raise ValueError(f"unknown side {side!r}")


def error_text(e):
    """A line naming an exception (Inductor's can be pages long): its first
    line, and its last when there are more (a failed subprocess_json: the
    child's last line of stderr)."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    text = lines[0][:300] if lines else ""
    if len(lines) > 1:
        text += " ... " + lines[-1][:300]
    return f"{type(e).__name__}: {text}"


def backend_graphs(since=0):
    """The compiled backend's graphs in this process with serial >= since:
    dicts with where, role, runs ("native", "aten", "measuring", or
    "eager" when no program was loaded) and fallback_ops (ATen operators
    the native program calls because it has no lowering for them)."""
    from compiled import dynamo
    out = []
    for g in dynamo.loaded_graphs():
        if g.serial < since:
            continue
        s = g.program.summary if g.program is not None else {}
        out.append({"where": g.where, "role": g.role, "runs": s.get("runs", "eager"),
                    "kernels": s.get("kernels", 0), "extern": s.get("extern", 0),
                    "fallback": s.get("fallback", 0),
                    "fallback_ops": list(s.get("fallback_ops", []))})
    return out


def backend_mark():
    """The serial the next compiled backend graph gets (backend_graphs)."""
    from compiled import dynamo
    graphs = dynamo.loaded_graphs()
    return graphs[-1].serial + 1 if graphs else 0


def describe_graphs(graphs):
    """kernels/extern/fallback summed over graphs, what runs, and the
    fallback operators with counts: "40/21/20 native; fallback:
    aten::x x20"."""
    import collections
    k = sum(g["kernels"] for g in graphs)
    e = sum(g["extern"] for g in graphs)
    f = sum(g["fallback"] for g in graphs)
    runs = ",".join(sorted({g["runs"] for g in graphs})) or "none"
    ops = collections.Counter(op for g in graphs for op in g["fallback_ops"])
    text = f"{len(graphs)} graph(s), {k}/{e}/{f} kernels/extern/fallback, runs {runs}"
    if ops:
        text += "; fallback ops: " + ", ".join(f"{op} x{n}" for op, n in sorted(ops.items()))
    return text


def release_backend_memory():
    """Drops what the compiled backend's programs keep between calls for
    reuse (their arenas, the free recycled output blocks), so that a
    measured call counts it as memory it needs, as Inductor's and eager's
    calls count their temporaries. Returns the bytes released."""
    from compiled import arena, dynamo
    released = 0
    for g in dynamo.loaded_graphs():
        p = g.program
        if p is None:
            continue
        fn = getattr(p, "native_fn", p.fn)
        pool = getattr(fn, "__globals__", {}).get("_pool")
        if isinstance(pool, list):
            released += sum(a.release() for a in pool)
    return released + arena.release_output_pool()


def check_peakheap():
    """Raises unless bench/peakheap.c, preloaded, counts PyTorch's tensor
    memory in this process (a 64 MiB tensor must add 64 MiB): the pip
    wheel allocates through posix_memalign, which it interposes; an
    allocator that went around it would show here, not as a wrong table."""
    import torch
    heap = _peakheap()
    if heap is None:
        return
    before = heap.peakheap_current()
    t = torch.empty(16 << 20)
    t.fill_(1.0)
    grown = heap.peakheap_current() - before
    del t
    if not 63 << 20 <= grown <= 65 << 20:
        raise RuntimeError(f"peakheap.so counted {grown} bytes for a 64 MiB tensor: "
                           "this torch allocates around malloc, heap numbers would be wrong")


def target_mark(ok):
    return "met" if ok else "MISSED"


def machine_line():
    """torch's version, threads, BLAS library and the machine's load (the
    numbers of a loaded machine are slower and noisier, ratios less so:
    the sides are interleaved)."""
    import torch
    import re
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    blas = m.group(1) if m else "?"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"torch {torch.__version__}, {torch.get_num_threads()} threads, BLAS {blas}, "
            f"{os.cpu_count()} CPUs, load average {load}")
