#!/usr/bin/env python3
"""Compile memory and time against graph size: `make bench-memory`.

Not a test. Each graph is compiled once, cold, by a fresh daemon (empty
cache, default settings unless given after `--`), and measured on the
daemon's own process:

  budget     the most the request held of --memory-budget at once (sampled
             from Stats.memory_in_use every 10 ms): its bytes, then its
             arena (decoded graph, key, every pass up to the generated C).
             What decides whether a graph fits the budget.
  rss        how far the daemon's peak resident memory (VmHWM, reset before
             the request) rose above its resident memory before it: the
             budget's bytes plus what the budget does not see (gRPC's copy
             of the request, malloc's slack, the artifact).
  per node   both, divided by the graph's node count.
  passes     the daemon's own time, request to generated C (validate, key,
             functionalize, emit, lower, schedule, plan, codegen), from the
             CompileResult's timings; cc is the C compiler (another process,
             outside the budget); wall is request to artifact on the client.
  cpu        the CPU time the daemon's process spent during the request
             (user + system, the C compiler's not included, answering the
             sampler's Stats calls included: about 2%): on a loaded machine
             a steadier measure of the passes than their wall time.

The cases: chains of N relus (tests/python/biggraph.py chain_graph_bytes:
the deepest graph), a wide graph of N nodes (wide_graph_bytes: N/2
products of the input summed by a balanced tree), the captured resnet18 of
tests/data/graphs and resnet50 captured from torchvision (batch 8,
224x224; skipped without torchvision).

Run from the repository root after `make` (COMPILED_BUILD selects another
build tree, e.g. one of an older commit, to compare):

    /usr/bin/python3 bench/compile_memory.py [--chains 5000,20000,100000]
        [--wide 20000] [--only chain,wide,resnet18,resnet50] [--no-cc]
        [--stages]
        [-- DAEMON_ARGS...]

--no-cc starts the daemon with `--cc /bin/false`: everything up to the
generated C is measured as usual, then the C compiler fails at once and the
artifact keeps its ATen program (quicker for big graphs; the C compiler's
memory is its own process's, outside the budget, either way).
"""

import argparse
import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402

sys.path.insert(0, os.path.join(benchlib.REPO, "tests", "python"))
import biggraph  # noqa: E402

from compiled import target as target_module  # noqa: E402
from compiled.client import Client  # noqa: E402
from compiled.v1 import artifact_pb2, graph_pb2  # noqa: E402

GRAPHS = os.path.join(benchlib.REPO, "tests", "data", "graphs")
MiB = 1 << 20
# the daemon's stages from request to generated C (CompileResult.timings)
PASSES = ("validate", "key", "order", "functionalize", "emit", "lower", "schedule", "plan",
          "codegen")


def cpu_seconds(pid):
    """User + system CPU seconds of process pid (its own, not its children's)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def resnet50_bytes():
    """resnet50 captured from torchvision (eval, batch 8 at 224x224),
    cached in a temporary directory; None without torchvision."""
    try:
        import torch
        import torchvision
    except ImportError:
        return None
    path = os.path.join(tempfile.gettempdir(), "compiled-bench-resnet50-%s-%d.pb" % (
        torch.__version__, os.getuid()))
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    from compiled.capture import capture
    model = torchvision.models.resnet50().eval()
    with torch.no_grad():
        gm = capture(model, (torch.randn(8, 3, 224, 224),))
    data = gm.SerializeToString()
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    return data


def measure(name, data, daemon_args):
    """Compiles graph bytes `data` on a fresh daemon; returns a result row
    (a dict)."""
    gm = graph_pb2.GraphModule()
    gm.ParseFromString(data)
    nodes = len(gm.graph.nodes)
    del gm
    with open(os.path.join(GRAPHS, "mlp.pb"), "rb") as f:
        warm = f.read()
    with benchlib.Daemon(*daemon_args) as d:
        client = Client(d.address, timeout=3600)
        target = target_module.target_message()
        client.compile_outcome(warm, target=target)  # loads what stays loaded
        pid = d.proc.pid
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")  # VmHWM := VmRSS
        rss0 = proc_kb(pid, "VmRSS")
        cpu0 = cpu_seconds(pid)
        stats = client.stats()
        budget = stats.memory_budget
        peak = [0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], client.stats().memory_in_use)
                done.wait(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        error = None
        try:
            out = client.compile_outcome(data, target=target)
        except Exception as e:  # the daemon's answer is the result
            out, error = None, e
        wall = time.perf_counter() - t0
        done.set()
        sampler.join()
        rss = (proc_kb(pid, "VmHWM") - rss0) * 1024
        cpu = cpu_seconds(pid) - cpu0
    row = {"case": name, "nodes": nodes, "request": len(data), "budget": budget,
           "peak": peak[0], "rss": rss, "wall": wall, "cpu": cpu, "passes": None,
           "cc": None,
           "outcome": None}
    if error is not None:
        row["outcome"] = "refused: %s" % str(error).splitlines()[0][:160]
        return row
    stages = {}
    for t in out.result.timings:
        stages[t.stage] = stages.get(t.stage, 0) + t.micros / 1e6
    row["cc"] = stages.get("cc")
    row["passes"] = sum(stages.get(k, 0) for k in PASSES)
    row["stages"] = stages
    art = artifact_pb2.Artifact()
    art.ParseFromString(out.artifact)
    if art.HasField("native_program"):
        s = art.native_program.summary
        row["outcome"] = "native: %d kernels" % s.kernels
    else:
        row["outcome"] = "ATen program: " + "; ".join(x.message for x in art.diagnostics)[:120]
    return row


def mib(n):
    return "%.1f" % (n / MiB)


def main():
    argv = sys.argv[1:]
    daemon_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, daemon_args = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", default="5000,20000,100000",
                    help="node counts of the relu chains")
    ap.add_argument("--wide", default="20000", help="node counts of the wide graphs")
    ap.add_argument("--only", default="chain,wide,resnet18,resnet50")
    ap.add_argument("--stages", action="store_true", help="print each case's pass timings")
    ap.add_argument("--no-cc", action="store_true", help="skip the C compiler (--cc /bin/false)")
    args = ap.parse_args(argv)
    if args.no_cc:
        daemon_args = ["--cc", "/bin/false"] + daemon_args
    only = set(args.only.split(","))
    cases = []
    if "chain" in only:
        cases += [("chain %d" % n, lambda n=n: biggraph.chain_graph_bytes(n))
                  for n in map(int, filter(None, args.chains.split(",")))]
    if "wide" in only:
        cases += [("wide %d" % n, lambda n=n: biggraph.wide_graph_bytes(n))
                  for n in map(int, filter(None, args.wide.split(",")))]
    if "resnet18" in only:
        cases.append(("resnet18", lambda: open(os.path.join(GRAPHS, "resnet18.pb"), "rb").read()))
    if "resnet50" in only:
        cases.append(("resnet50", resnet50_bytes))
    rows = []
    budget = 0
    for name, make in cases:
        data = make()
        if data is None:
            print("%s: skipped (no torchvision)" % name)
            continue
        row = measure(name, data, daemon_args)
        budget = row["budget"]
        rows.append(row)
        print("%s: %d nodes, %.1f MB request: %s" % (name, row["nodes"], row["request"] / 1e6,
                                                       row["outcome"]), flush=True)
        if args.stages and row.get("stages"):
            print("  " + "  ".join("%s %.2fs" % kv for kv in row["stages"].items()))
    table = []
    for r in rows:
        n = max(1, r["nodes"])
        table.append([r["case"], r["nodes"], mib(r["peak"]), "%.0f" % (r["peak"] / n),
                      mib(r["rss"]), "%.0f" % (r["rss"] / n),
                      "%.2f" % r["passes"] if r["passes"] is not None else "-",
                      "%.2f" % r["cc"] if r["cc"] is not None else "-",
                      "%.2f" % r["wall"], "%.2f" % r["cpu"]])
    print()
    print(benchlib.table(table, ["case", "nodes", "budget MiB", "B/node", "rss MiB",
                                 "B/node", "passes s", "cc s", "wall s", "cpu s"]))
    if budget:
        share = budget - max(budget // 8, 64 * MiB)
        print("\n--memory-budget %s MiB: a big request may hold %s MiB" % (
            mib(budget), mib(share)))


if __name__ == "__main__":
    main()
