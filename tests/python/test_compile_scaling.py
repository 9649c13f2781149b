"""Compile memory and time grow linearly with the graph.

`compilectl graph program` runs the compiler's passes from decode to the
native program, all but the C compiler (with the IR verifier after each,
as the daemon does), in a process of its own, whose peak resident memory and CPU time the kernel
reports when it exits (wait4). Each test compiles a graph of N nodes and
one of 4N nodes of the same kind and compares what they cost beyond a
graph of a few nodes (the process's fixed cost), measured in the same run:
linear growth gives a ratio of about 4, quadratic growth about 16, and the
tests allow 6 (memory) and 8 (CPU time).

The graphs (biggraph.py): a chain of relus, the deepest graph; a wide
graph, N/2 products of the input by distinct factors summed by a balanced
tree of adds; a chain of matrix products, each result a buffer of its own.
Before the fixes, lowering a chain took memory quadratic in its length (a
substitution table the size of all loop variables made for every load), a
wide graph took time quadratic in its number of distinct constants (the
expression table's buckets ignored the high bits of a float's hash), and
the memory plan took time quadratic in the buffers (each placed against a
scan of all placed ones), and so did the native program's instructions
(each kernel's frees and allocs from a scan of all buffers), in memory
too.

Run: COMPILED_BUILD=$PWD/build PYTHONPATH=client/python /usr/bin/python3 -m
pytest -q tests/python/test_compile_scaling.py
"""

import os
import subprocess
import sys

import pytest

import biggraph

SRC = os.environ.get(
    "COMPILED_SRC", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
)
BUILD = os.environ.get("COMPILED_BUILD", os.path.join(SRC, "build"))
CTL = os.path.join(BUILD, "bin", "compilectl")

pytestmark = pytest.mark.skipif(not os.access(CTL, os.X_OK), reason="compilectl not built")


# Runs argv (its output to /dev/null) and prints its exit code, peak RSS
# (KiB) and CPU seconds. A process's peak RSS includes that of the process
# it was started from (exec keeps the larger of the two), so compilectl is
# started from this small Python rather than from pytest's, which holds
# hundreds of MB.
RUNNER = """
import os, sys
out = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ, file_actions=out)
_, status, ru = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), ru.ru_maxrss, ru.ru_utime + ru.ru_stime)
"""


def cost(path):
    """(peak RSS in bytes, CPU seconds) of `compilectl graph program path`."""
    r = subprocess.run([sys.executable, "-I", "-S", "-c", RUNNER, CTL, "graph", "program",
                        path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    code, kib, cpu = r.stdout.split()[-3:]
    assert code == "0", (path, code, r.stderr[-2000:])
    return int(kib) * 1024, float(cpu)


def growth(tmp_path, make, n):
    """Cost ratios (memory, CPU time) of graph make(4n) to graph make(n),
    each beyond make(8)'s."""
    costs = []
    for size in (8, n, 4 * n):
        path = str(tmp_path / ("g%d.pb" % size))
        with open(path, "wb") as f:
            f.write(make(size))
        costs.append(cost(path))
    (m0, t0), (m1, t1), (m4, t4) = costs
    mem = (m4 - m0) / max(m1 - m0, 1)
    cpu = (t4 - t0) / max(t1 - t0, 0.01)
    return mem, cpu, costs


@pytest.mark.parametrize("kind,n", [("chain", 3000), ("wide", 10000), ("mm", 16000)])
def test_compile_cost_grows_linearly(tmp_path, kind, n):
    make = {"chain": biggraph.chain_graph_bytes, "wide": biggraph.wide_graph_bytes,
            "mm": biggraph.mm_graph_bytes}[kind]
    mem, cpu, costs = growth(tmp_path, make, n)
    detail = "%s of %d and %d nodes: memory x%.1f, CPU time x%.1f (%s)" % (
        kind, n, 4 * n, mem, cpu,
        ", ".join("%.0f MB %.2f s" % (m / 1e6, t) for m, t in costs))
    assert mem < 6, detail
    assert cpu < 8, detail
