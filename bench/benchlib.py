"""Shared pieces of the Python benchmarks (not a test, not a library users
import): a daemon on a free port, robust timing, peak-memory measurement in
a fresh process, ratio tables, and torchvision's models (or their rewrite
in tests/python/visionmodels.py where torchvision is not installed).

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


def _rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _hwm_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
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
    base = _rss_kb()
    for _ in range(calls):
        run(state)
    rss = (_hwm_kb() - base) / 1024.0
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
    memory in fresh processes of itself: --only NAME,..., --seconds,
    --no-memory; --memory-case, --mode and --server are for those
    processes."""
    import argparse
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--only", default="")
    ap.add_argument("--seconds", type=float, default=seconds)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--memory-case", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--server", help=argparse.SUPPRESS)
    return ap.parse_args()


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
