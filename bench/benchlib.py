"""Shared pieces of the Python benchmarks (not a test, not a library users
import): a daemon on a free port, robust timing, peak-memory measurement in
a fresh process, and ratio tables.

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


def measure_peak(setup, run, calls=3):
    """Peak RSS increase (MiB) of running run() `calls` times, over the RSS
    once setup() is done; setup may return state passed to run."""
    state = setup()
    run(state)  # first call: compiles, loads, allocates what stays
    trim_and_reset_peak()
    base = _rss_kb()
    for _ in range(calls):
        run(state)
    return (_hwm_kb() - base) / 1024.0, base / 1024.0


def subprocess_json(args, timeout=900):
    """Runs `python args...` (this interpreter), returns the JSON it prints
    last."""
    out = subprocess.run([sys.executable] + args, capture_output=True, text=True,
                         timeout=timeout, env=dict(os.environ, PYTHONPATH=os.path.join(
                             REPO, "client", "python")))
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


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
