#!/usr/bin/env python3
"""Cache-hit latency while big requests are processed, and memory.

Not a test. Starts its own daemon on a free loopback port (cache in a
temporary directory), makes one small graph a cache hit, then measures the
latency of that hit:

  idle    with nothing else going on
  heavy   while two big requests (a chain of --nodes relu nodes each, about
          85 bytes per node: 720,000 nodes is a 61.6 MB request) are sent
          at the same time from two other processes

and prints both with their ratio, the outcome of each big request, the
daemon's peak resident memory while they ran and its resident memory once
idle again (sampled from /proc). Identical conditions for both phases: one
client thread issuing hits back to back over one channel.

Run from the repository root after `make` (COMPILED_BUILD selects another
build tree):

    /usr/bin/python3 bench/heavy_requests.py [--nodes N] [--hits N] [--keep] [-- DAEMON_ARGS...]

With the default 720,000 nodes the requests are decoded and then refused
for their node count (the default --max-nodes is 500,000); pass
`-- --max-nodes 1000000` to have them validated, keyed and compiled too.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "client", "python"))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))

import grpc  # noqa: E402

import biggraph  # noqa: E402
from compiled.v1 import compiled_pb2, compiled_pb2_grpc, graph_pb2  # noqa: E402

BUILD = os.environ.get("COMPILED_BUILD", os.path.join(REPO, "build"))


def rss_kb(pid, field="VmRSS"):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def start_daemon(tmp, extra):
    port_file = os.path.join(tmp, "port")
    log = open(os.path.join(tmp, "daemon.log"), "ab")
    cmd = [os.path.join(BUILD, "bin", "compiled"), "--listen", "127.0.0.1:0",
           "--port-file", port_file, "--cache-dir", os.path.join(tmp, "cache"),
           "--log-level", "warn"] + extra
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 20
    while time.time() < deadline:
        if os.path.exists(port_file) and open(port_file).read().strip():
            return proc, int(open(port_file).read())
        if proc.poll() is not None:
            sys.exit("daemon exited early; see %s/daemon.log" % tmp)
        time.sleep(0.02)
    sys.exit("daemon did not start")


def hit_request():
    gm = graph_pb2.GraphModule()
    with open(os.path.join(REPO, "tests", "data", "graphs", "mlp.pb"), "rb") as f:
        gm.ParseFromString(f.read())
    return compiled_pb2.CompileRequest(graph=gm)


def one_hit(stub, req):
    t = time.perf_counter()
    events = list(stub.Compile(req, timeout=60))
    dt = time.perf_counter() - t
    assert events[-1].result.served == compiled_pb2.SERVED_L1_HIT, events[-1]
    return dt


def summary(xs):
    xs = sorted(xs)
    return (statistics.median(xs), xs[int(len(xs) * 0.9)], xs[-1])


BIG_SENDER = r"""
import os, sys, time, grpc
os.nice(19)  # the bench's own load must not take the CPU from the hit loop
from compiled.v1 import compiled_pb2
data = sys.stdin.buffer.read()
ch = grpc.insecure_channel(sys.argv[1], options=[("grpc.max_send_message_length", -1)])
call = ch.unary_stream("/compiled.v1.Compiler/Compile", request_serializer=lambda b: b,
                       response_deserializer=compiled_pb2.CompileEvent.FromString)
t = time.perf_counter()
try:
    events = list(call(data, timeout=600))
    what = "OK (%s)" % events[-1].WhichOneof("event")
except grpc.RpcError as e:
    what = "%s: %s" % (e.code().name, (e.details() or "")[:110])
print("%.3f %s" % (time.perf_counter() - t, what))
"""


def big_call(address, data, out, i):
    """Sends pre-serialized CompileRequest bytes from another process (so
    the client side of 60 MB never competes with the hit loop for this
    process) and records its status and time."""
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "client", "python"))
    p = subprocess.run([sys.executable, "-c", BIG_SENDER, address], input=data,
                       capture_output=True, env=env)
    line = p.stdout.decode().strip() or ("sender failed: " + p.stderr.decode()[-300:])
    secs, _, what = line.partition(" ")
    try:
        out[i] = (float(secs), what)
    except ValueError:
        out[i] = (0.0, line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=720000)
    ap.add_argument("--hits", type=int, default=300, help="idle hits measured")
    ap.add_argument("--keep", action="store_true", help="keep the daemon's directory (log)")
    ap.add_argument("daemon_args", nargs="*", help="extra daemon flags (after --)")
    a = ap.parse_args()

    print("building two %d-node requests..." % a.nodes, flush=True)
    bigs = [biggraph.chain_request_bytes(a.nodes, tag) for tag in ("heavy-a", "heavy-b")]
    tmp = tempfile.mkdtemp(prefix="compiled-heavy-")
    proc, port = start_daemon(tmp, a.daemon_args)
    try:
        opts = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        hit_ch = grpc.insecure_channel("127.0.0.1:%d" % port, options=opts)
        stub = compiled_pb2_grpc.CompilerStub(hit_ch)
        req = hit_request()
        list(stub.Compile(req, timeout=60))  # compile: later ones are hits
        for _ in range(20):
            one_hit(stub, req)
        rss_start = rss_kb(proc.pid)
        idle = [one_hit(stub, req) for _ in range(a.hits)]

        results = [None, None]
        address = "127.0.0.1:%d" % port
        threads = [threading.Thread(target=big_call, args=(address, bigs[i], results, i))
                   for i in range(2)]
        peak = [0]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], rss_kb(proc.pid))
                time.sleep(0.02)
        sampler = threading.Thread(target=sample)
        sampler.start()
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        heavy, when = [], []
        while any(t.is_alive() for t in threads):
            when.append(time.perf_counter() - t0)
            heavy.append(one_hit(stub, req))
        for t in threads:
            t.join()
        heavy_s = time.perf_counter() - t0
        stop.set()
        sampler.join()
        time.sleep(3)
        rss_idle = rss_kb(proc.pid)
        hwm = rss_kb(proc.pid, "VmHWM")
    finally:
        proc.terminate()
        proc.wait()
        if a.keep:
            print("daemon directory (log, cache):", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    im, ip, ix = summary(idle)
    hm, hp, hx = summary(heavy)
    print()
    print("%-34s %10s %10s %10s %7s" % ("cache-hit latency (ms)", "median", "p90", "max", "n"))
    print("%-34s %10.3f %10.3f %10.3f %7d" % ("idle", im * 1e3, ip * 1e3, ix * 1e3, len(idle)))
    print("%-34s %10.3f %10.3f %10.3f %7d" % ("during two big requests", hm * 1e3, hp * 1e3,
                                              hx * 1e3, len(heavy)))
    print("%-34s %10.2f %10.2f %10.2f" % ("ratio heavy/idle", hm / im, hp / ip, hx / ix))
    print()
    for i, (secs, what) in enumerate(results):
        print("big request %d (%.1f MB): %.2f s, %s" % (i, len(bigs[i]) / 1e6, secs, what))
    print("both big requests done after %.2f s" % heavy_s)
    if os.environ.get("HEAVY_DUMP"):
        with open(os.environ["HEAVY_DUMP"], "w") as f:
            for h, w in zip(heavy, when):
                f.write("%.4f %.3f\n" % (w, h * 1e3))
    slow = sorted(zip(heavy, when), reverse=True)[:5]
    print("slowest hits: " + ", ".join("%.1f ms at %.2f s" % (h * 1e3, w) for h, w in slow))
    print()
    print("daemon RSS: %.0f MB before, peak %.0f MB (VmHWM %.0f MB), %.0f MB idle 3 s after"
          % (rss_start / 1024, peak[0] / 1024, hwm / 1024, rss_idle / 1024))


if __name__ == "__main__":
    main()
