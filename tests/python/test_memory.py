"""Memory and head-of-line blocking: the memory budget refuses rather than
grows, big requests are decoded off the threads that answer hits, and an
idle daemon gives memory back after big requests.

Big requests are chains of relu nodes (biggraph.py): about 85 bytes per
node on the wire and, decoded, about 1.8 KB per node.
"""

import concurrent.futures as cf
import os
import re
import time

import grpc
import pytest

import compiled  # noqa: F401  (makes compiled.v1 importable)
from compiled.v1 import compiled_pb2

import biggraph
from daemon_util import compile_request, load_graph, run_compile

SERVED = compiled_pb2.Served


def status_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(field)


def assert_given_back(d):
    """The refused request's memory returns to the budget (just after its
    answer went out)."""
    deadline = time.time() + 10
    while d.stats().memory_in_use and time.time() < deadline:
        time.sleep(0.02)
    assert d.stats().memory_in_use == 0


def send_raw(d, data, timeout=120):
    """Sends serialized CompileRequest bytes; returns (code, details, events)."""
    call = d.channel().unary_stream(
        "/compiled.v1.Compiler/Compile", request_serializer=lambda b: b,
        response_deserializer=compiled_pb2.CompileEvent.FromString)
    try:
        return grpc.StatusCode.OK, "", list(call(data, timeout=timeout))
    except grpc.RpcError as e:
        return e.code(), e.details(), None


def test_memory_budget_refuses_rather_than_grows(daemon):
    d = daemon("--memory-budget", "128M")
    big = biggraph.chain_request_bytes(200000)  # 17 MB; ~370 MB to decode
    code, details, _ = send_raw(d, big)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
    assert "memory" in details and "--memory-budget" in details, details
    # It stopped at the budget instead of decoding the whole graph.
    assert status_kb(d.proc.pid, "VmHWM") < 260 * 1024
    st = d.stats()
    assert st.rejected_memory == 1 and st.memory_budget == 128 << 20
    assert_given_back(d)
    # Small requests still get through.
    _, r = run_compile(d.stub(), compile_request(load_graph("mlp")))
    assert r.served == SERVED.SERVED_COMPILED
    assert "Compile rejected" in d.log()


def test_graph_at_the_node_limit_fits_the_budget(daemon):
    # A small budget lowers --max-nodes to the graphs it can compile: a
    # relu chain (the cheapest nodes, with full metadata) of exactly that
    # many nodes is compiled, not refused for memory.
    d = daemon("--memory-budget", "256M")
    m = re.search(r"at most (\d+) nodes", d.log())
    assert m, d.log()
    n = int(m.group(1))
    assert 10000 < n < 500000, n  # set by the budget, not the default
    code, details, events = send_raw(d, biggraph.chain_request_bytes(n, tag="limit"))
    assert code == grpc.StatusCode.OK, (n, code, details)
    result = [e.result for e in events if e.WhichOneof("event") == "result"][-1]
    assert result.served == SERVED.SERVED_COMPILED
    assert d.stats().rejected_memory == 0


def test_request_bigger_than_its_share_is_refused_on_arrival(daemon):
    d = daemon("--memory-budget", "16M")
    code, details, _ = send_raw(d, biggraph.chain_request_bytes(200000))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
    assert "--memory-budget" in details
    assert_given_back(d)


def test_hits_are_answered_while_big_requests_decode(daemon):
    # Every request over 64 KiB is "big"; each big decode first waits 4 s,
    # on the one decode thread: two of them keep it busy for 8 s.
    d = daemon("--inline-decode-bytes", "64K", "--decode-threads", "1",
               "--debug-decode-delay-ms", "4000")
    stub = d.stub()
    small = compile_request(load_graph("mlp"))
    run_compile(stub, small)  # compiled; later ones are hits
    repeated = biggraph.chain_request_bytes(2000, "repeat")  # ~155 KB: big
    code, _, _ = send_raw(d, repeated)  # decoded once (waits 4 s)
    assert code == grpc.StatusCode.OK
    bigs = [biggraph.chain_request_bytes(2000, "hol%d" % i) for i in range(2)]
    with cf.ThreadPoolExecutor(2) as ex:
        futs = [ex.submit(send_raw, d, b) for b in bigs]
        deadline = time.time() + 20
        while d.stats().memory_in_use < sum(map(len, bigs)) and time.time() < deadline:
            time.sleep(0.02)  # both received and waiting to decode
        for _ in range(5):
            _, r = run_compile(stub, small)
            assert r.served == SERVED.SERVED_L1_HIT
        # A repeated big request is answered from memory, not behind them.
        code, _, events = send_raw(d, repeated)
        assert code == grpc.StatusCode.OK
        assert events[-1].result.served == SERVED.SERVED_L1_HIT
        assert not any(f.done() for f in futs), "hits waited for the big decodes"
        for f in futs:
            assert f.result()[0] == grpc.StatusCode.OK


def own_malloc(pid):
    """True when the daemon runs on glibc's malloc (not under ASan, whose
    allocator keeps freed memory in quarantine, nor valgrind)."""
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" not in f.read() and not os.environ.get("COMPILED_DAEMON_WRAPPER")


def test_idle_daemon_gives_memory_back(daemon):
    d = daemon("--max-nodes", "100000")
    if not own_malloc(d.proc.pid):
        pytest.skip("the sanitizer's or valgrind's allocator keeps freed memory")
    base = status_kb(d.proc.pid, "VmRSS")
    # 300,000 nodes: decoded (~550 MB), then refused for its node count.
    code, details, _ = send_raw(d, biggraph.chain_request_bytes(300000))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "300000" in details
    assert status_kb(d.proc.pid, "VmHWM") > base + 200 * 1024
    deadline = time.time() + 20
    while status_kb(d.proc.pid, "VmRSS") > base + 80 * 1024 and time.time() < deadline:
        time.sleep(0.2)
    assert status_kb(d.proc.pid, "VmRSS") <= base + 80 * 1024, \
        "RSS %d KB after a big request (%d KB at start)" % (
            status_kb(d.proc.pid, "VmRSS"), base)
