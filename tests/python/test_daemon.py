"""Integration tests of the compiled daemon: a real daemon on a free loopback
port, real gRPC (Python grpcio with stubs generated from our protos).

Compiles are made slow on purpose where a test needs them in flight
(--debug-compile-delay-ms), so joining, cancelling, deadlines and the queue
limit are exercised deterministically rather than by luck.
"""

import concurrent.futures as cf
import hashlib
import os
import random
import signal
import socket
import sqlite3
import subprocess
import threading
import time

import grpc
import pytest

import compiled  # noqa: F401  (makes compiled.v1 importable)
from compiled.v1 import artifact_pb2, compiled_pb2, health_pb2

from daemon_util import (BIN, BUILD, GRAPHS, compile_request, load_graph,
                         run_compile, variant)

SERVED = compiled_pb2.Served


def test_compile_then_hit(daemon):
    d = daemon()
    stub = d.stub()
    gm = load_graph("mlp")
    events, r1 = run_compile(stub, compile_request(gm))
    assert r1.served == SERVED.SERVED_COMPILED
    stages = [(e.stage.name, e.stage.done) for e in events if e.WhichOneof("event") == "stage"]
    assert ("emit", True) in stages and ("emit", False) in stages
    assert stages[0] == ("compile", False) and ("compile", True) in stages
    assert r1.artifact_inline and len(r1.artifact) == r1.artifact_size > 0
    assert hashlib.sha256(r1.artifact).hexdigest() == r1.artifact_digest
    art = artifact_pb2.Artifact()
    art.ParseFromString(r1.artifact)
    assert art.key == r1.key and art.version.major == 0
    assert art.program.functional
    assert 0 < len(art.program.instructions) <= len(gm.graph.nodes)

    _, r2 = run_compile(stub, compile_request(gm))
    assert r2.served == SERVED.SERVED_L1_HIT
    assert r2.key == r1.key and r2.artifact == r1.artifact
    s = d.stats()
    assert (s.compiles, s.hits, s.misses, s.entries) == (1, 1, 1, 1)
    assert s.compile_micros_saved == r1.compile_micros > 0
    _, r3 = run_compile(stub, compile_request(gm))  # a memory-tier hit
    s = d.stats()
    assert s.hot_hits >= 1 and s.compile_micros_saved == 2 * r1.compile_micros
    # One log line per request, with the key and the outcome.
    log = d.log()
    assert "Compile compiled key=%s" % r1.key[:16] in log
    assert "Compile hit key=%s" % r1.key[:16] in log


def test_key_matches_compilectl_graph_hash(daemon):
    d = daemon()
    _, r = run_compile(d.stub(), compile_request(load_graph("attention")))
    out = subprocess.run([os.path.join(BUILD, "bin", "compilectl"), "graph", "hash",
                          os.path.join(GRAPHS, "attention.pb")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == r.key


def test_32_concurrent_identical_requests_compile_once(daemon):
    d = daemon("--debug-compile-delay-ms", "300")
    gm = load_graph("transformer_encoder_layer")
    stub = d.stub()
    with cf.ThreadPoolExecutor(32) as pool:
        results = list(pool.map(lambda _: run_compile(stub, compile_request(gm))[1], range(32)))
    assert len({r.key for r in results}) == 1
    assert len({r.artifact_digest for r in results}) == 1
    served = [r.served for r in results]
    assert served.count(SERVED.SERVED_COMPILED) == 1
    s = d.stats()
    assert s.compiles == 1, s
    assert s.joins + s.hits == 31, s


def test_cancelled_waiter_does_not_disturb_the_others(daemon):
    d = daemon("--debug-compile-delay-ms", "800")
    gm = load_graph("mlp")
    stub = d.stub()
    calls = [stub.Compile(compile_request(gm), timeout=30) for _ in range(3)]
    firsts = [next(c) for c in calls]  # all three wait on the running compile
    assert all(e.stage.name == "compile" and not e.stage.done for e in firsts)
    calls[1].cancel()


    with pytest.raises(grpc.RpcError) as e:
        list(calls[1])
    assert e.value.code() == grpc.StatusCode.CANCELLED
    results = [list(c)[-1].result for i, c in enumerate(calls) if i != 1]
    assert all(r.key == results[0].key and r.artifact for r in results)
    assert d.stats().compiles == 1


def test_compile_abandoned_when_every_waiter_left(daemon):
    d = daemon("--debug-compile-delay-ms", "3000")
    stub = d.stub()
    call = stub.Compile(compile_request(load_graph("mlp")), timeout=30)
    assert next(call).stage.name == "compile"  # running now
    call.cancel()
    deadline = time.time() + 5
    while time.time() < deadline and (d.stats().running or d.stats().queued):
        time.sleep(0.05)
    s = d.stats()
    assert s.running == 0 and s.queued == 0 and s.entries == 0, s
    assert "abandoned: no waiter left" in d.log() or "dropped" in d.log()


def test_deadline_exceeded_then_served(daemon):
    d = daemon("--debug-compile-delay-ms", "1500")
    stub = d.stub()
    gm = load_graph("layer_norm")
    with pytest.raises(grpc.RpcError) as e:
        run_compile(stub, compile_request(gm), timeout=0.3)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    _, r = run_compile(stub, compile_request(gm), timeout=30)
    assert r.artifact_size > 0


def test_full_queue_gets_resource_exhausted_and_hits_still_served(daemon):
    d = daemon("--workers", "1", "--max-queue", "1", "--debug-compile-delay-ms", "1500")
    stub = d.stub()
    base = load_graph("mlp")
    cached = variant(base, "cached")
    # Cache one graph first (it takes the delay once).
    run_compile(stub, compile_request(cached))
    running = stub.Compile(compile_request(variant(base, "a")), timeout=30)
    first = next(running)
    assert first.WhichOneof("event") == "stage" and first.stage.name == "compile"
    queued = stub.Compile(compile_request(variant(base, "b")), timeout=30)
    ev = next(queued)
    assert ev.WhichOneof("event") == "queued" and ev.queued.position == 0
    with pytest.raises(grpc.RpcError) as e:
        run_compile(stub, compile_request(variant(base, "c")), timeout=30)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "queue is full" in e.value.details()
    t0 = time.time()
    _, hit = run_compile(stub, compile_request(cached), timeout=30)
    assert hit.served == SERVED.SERVED_L1_HIT and time.time() - t0 < 1.0
    list(running)
    list(queued)
    assert d.stats().rejected_busy == 1


def test_malformed_request_bytes_get_invalid_argument(daemon):
    d = daemon()
    ch = d.channel()
    raw = ch.unary_stream("/compiled.v1.Compiler/Compile")
    for junk in (b"\xff\xff\xff\xff", b"\x0a\x05abc", os.urandom(300)):
        with pytest.raises(grpc.RpcError) as e:
            list(raw(junk, timeout=10))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, junk
    unary = ch.unary_unary("/compiled.v1.Compiler/Stats")
    assert unary(b"", timeout=10)  # still serving
    resp = d.health().Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert resp.status == health_pb2.HealthCheckResponse.SERVING


def test_invalid_graph_error_names_the_node(daemon):
    d = daemon()
    gm = load_graph("mlp")
    gm.graph.nodes[2].target = "aten::nope"
    with pytest.raises(grpc.RpcError) as e:
        run_compile(d.stub(), compile_request(gm))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "node 2" in e.value.details() and "aten::nope" in e.value.details()
    md = dict(e.value.trailing_metadata())
    err = compiled_pb2.GraphError()
    err.ParseFromString(md["compiled-error-bin"])
    assert err.node == 2 and err.code == "INVAL"


def test_unknown_method_is_unimplemented(daemon):
    d = daemon()
    with pytest.raises(grpc.RpcError) as e:
        d.channel().unary_unary("/compiled.v1.Compiler/Nope")(b"", timeout=10)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_health_check(daemon):
    d = daemon()
    h = d.health()
    assert h.Check(health_pb2.HealthCheckRequest(), timeout=10).status == \
        health_pb2.HealthCheckResponse.SERVING
    assert h.Check(health_pb2.HealthCheckRequest(service="compiled.v1.Compiler"),
                   timeout=10).status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as e:
        h.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_restart_keeps_the_cache(daemon):
    d = daemon()
    gm = load_graph("conv_bn_relu")
    _, r1 = run_compile(d.stub(), compile_request(gm))
    d.stop()
    d.start()
    _, r2 = run_compile(d.stub(), compile_request(gm))
    assert r2.served == SERVED.SERVED_L1_HIT and r2.artifact == r1.artifact


def _db(d):
    return os.path.join(d.cache_dir, "cache.db")


def test_corrupt_entry_is_dropped_and_recompiled(daemon):
    d = daemon()
    gm = load_graph("attention")
    _, r1 = run_compile(d.stub(), compile_request(gm))
    d.stop()
    con = sqlite3.connect(_db(d))
    (blob,) = con.execute("SELECT data FROM blobs").fetchone()
    bad = bytearray(blob)
    bad[len(bad) // 2] ^= 0x5A
    con.execute("UPDATE blobs SET data = ?", (bytes(bad),))
    con.commit()
    con.close()
    d.start()
    _, r2 = run_compile(d.stub(), compile_request(gm))
    assert r2.served == SERVED.SERVED_COMPILED  # recompiled, never served corrupt
    assert r2.artifact_digest == r1.artifact_digest
    s = d.stats()
    assert s.corrupt_dropped == 1 and s.compiles == 1
    assert "corrupt" in d.log()


def _check_cache(cache_dir):
    out = subprocess.run([BIN, "--check-cache", "--cache-dir", cache_dir],
                         capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout + out.stderr


def test_sigkill_while_storing_leaves_an_intact_cache(daemon, tmp_path):
    base = load_graph("resnet18")
    rng = random.Random(5)
    d = daemon("--workers", "2")
    run_compile(d.stub(), compile_request(variant(base, "first")), timeout=120)
    for round_ in range(5):

        stub = d.stub()
        stop = threading.Event()

        def hammer(k):
            i = 0
            while not stop.is_set():
                try:
                    list(stub.Compile(compile_request(variant(base, "r%d-%d-%d" % (round_, k, i))),
                                      timeout=5))
                except (grpc.RpcError, ValueError):  # killed; channel closed
                    return
                i += 1

        threads = [threading.Thread(target=hammer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.3 + rng.random() * 0.7)
        d.kill()
        stop.set()
        for t in threads:
            t.join()
        rc, out = _check_cache(d.cache_dir)
        assert rc == 0, out
        assert "ok" in out
        d.start()
    s = d.stats()
    assert s.entries > 0


def test_eviction_keeps_the_cache_under_its_cap(daemon):
    cap = 64 * 1024
    d = daemon("--cache-max-bytes", str(cap))
    stub = d.stub()
    gm = load_graph("transformer_encoder_layer")
    for i in range(40):
        run_compile(stub, compile_request(variant(gm, "e%d" % i)))
        assert d.stats().bytes <= cap
    s = d.stats()
    assert s.evictions > 0 and 0 < s.entries < 40, s


def test_explain_names_the_differing_component(daemon):
    d = daemon()
    stub = d.stub()
    gm = load_graph("mlp")
    run_compile(stub, compile_request(gm))
    opts = compiled_pb2.CompileOptions(opt_level=compiled_pb2.OPT_LEVEL_O0)
    resp = stub.Explain(compiled_pb2.ExplainRequest(graph=gm, options=opts), timeout=10)
    assert not resp.cached and resp.has_nearest
    assert list(resp.differing) == ["options"]
    assert "options" in resp.summary
    resp = stub.Explain(compiled_pb2.ExplainRequest(graph=gm), timeout=10)
    assert resp.cached
    other = load_graph("attention")
    resp = stub.Explain(compiled_pb2.ExplainRequest(graph=other), timeout=10)
    assert not resp.cached and not resp.has_nearest
    assert "no cached entry has this graph" in resp.summary
    bad = load_graph("mlp")
    bad.graph.nodes[0].target = "aten::nope"
    with pytest.raises(grpc.RpcError) as e:
        stub.Explain(compiled_pb2.ExplainRequest(graph=bad), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    err = compiled_pb2.GraphError()
    err.ParseFromString(dict(e.value.trailing_metadata())["compiled-error-bin"])
    assert err.node == 0 and "aten::nope" in err.message



def test_explain_names_the_input_dimension_that_changed(daemon):
    # A size change alters the graph component too (it covers every node's
    # output shape): Explain finds the cached program with the same
    # operators and itemizes the input, the dimension and both sizes.
    import explorer_util as xu
    d = daemon()
    stub = d.stub()
    _, r = run_compile(stub, compile_request(xu.captured(2)))
    resp = stub.Explain(compiled_pb2.ExplainRequest(graph=xu.captured(4)), timeout=30)
    assert not resp.cached and resp.has_nearest and resp.nearest.key == r.key
    assert "inputs" in resp.differing
    want = "input 2 (x): dimension 0 is 4, the cached program's is 2"
    assert want in resp.summary, resp.summary
    assert want in list(resp.differences), resp.differences
    # the exact request is a hit, with nothing to itemize
    resp = stub.Explain(compiled_pb2.ExplainRequest(graph=xu.captured(2)), timeout=30)
    assert resp.cached and not resp.differences


def test_fetch_counts_as_a_hit(daemon):
    # The client's graph memo fetches artifacts by key without a Compile:
    # such a Fetch is a hit like any other, in Stats (and so /metrics) and
    # in the entry's hit count and last use (LRU eviction keeps it).
    d = daemon()
    stub = d.stub()
    _, r = run_compile(stub, compile_request(load_graph("mlp")))
    before = d.stats()
    entry = stub.Lookup(compiled_pb2.LookupRequest(key=r.key), timeout=10).entry
    data = b"".join(c.data for c in stub.Fetch(compiled_pb2.FetchRequest(key=r.key), timeout=10))
    assert hashlib.sha256(data).hexdigest() == r.artifact_digest
    after = d.stats()
    assert after.hits == before.hits + 1, (before, after)
    assert after.compile_micros_saved == before.compile_micros_saved + r.compile_micros
    now = stub.Lookup(compiled_pb2.LookupRequest(key=r.key), timeout=10).entry
    assert now.hits == entry.hits + 1 and now.last_used >= entry.last_used
    # a Fetch of a key that is not there is no hit
    with pytest.raises(grpc.RpcError) as e:
        list(stub.Fetch(compiled_pb2.FetchRequest(key="0" * 64), timeout=10))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert d.stats().hits == after.hits


def test_lookup_fetch_list_evict(daemon):
    d = daemon("--max-inline-bytes", "100")
    stub = d.stub()
    _, r = run_compile(stub, compile_request(load_graph("resnet18")))
    assert not r.artifact_inline and r.artifact_size > 100  # left for Fetch
    chunks = list(stub.Fetch(compiled_pb2.FetchRequest(key=r.key, chunk_bytes=4096), timeout=10))
    data = b"".join(c.data for c in chunks)
    assert len(chunks) > 1 and hashlib.sha256(data).hexdigest() == r.artifact_digest
    assert chunks[0].digest == r.artifact_digest
    lk = stub.Lookup(compiled_pb2.LookupRequest(key=r.key), timeout=10)
    assert lk.found and lk.entry.size == r.artifact_size and lk.entry.components.graph
    ls = stub.List(compiled_pb2.ListRequest(), timeout=10)
    assert [e.key for e in ls.entries] == [r.key]
    ev = stub.Evict(compiled_pb2.EvictRequest(key=r.key), timeout=10)
    assert ev.evicted == 1
    s = d.stats()
    assert s.evictions == 1 and s.hits == 1  # the Fetch is a hit; Lookup is not
    assert not stub.Lookup(compiled_pb2.LookupRequest(key=r.key), timeout=10).found
    with pytest.raises(grpc.RpcError) as e:
        list(stub.Fetch(compiled_pb2.FetchRequest(key=r.key), timeout=10))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as e:
        stub.Lookup(compiled_pb2.LookupRequest(key="xyz"), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_sigterm_drains_in_flight_compiles(daemon):
    d = daemon("--debug-compile-delay-ms", "1000")
    stub = d.stub()
    call = stub.Compile(compile_request(load_graph("mlp")), timeout=30)
    assert next(call).stage.name == "compile"  # in flight now
    d.send_signal(signal.SIGTERM)
    events = list(call)
    assert events[-1].result.artifact_size > 0
    assert d.proc.wait(30) == 0
    d.proc = None
    d.out.close()
    assert "draining" in d.log() and "stopped" in d.log()


def test_a_connection_that_never_answers_does_not_keep_the_daemon_running(daemon):
    """A stop waits for each connection's client to acknowledge the
    server's GOAWAY. A client that never reads its socket held the drain
    for 20 s (the gRPC core's limit; one that is not polling its channel,
    as Python's between calls, answers every 5 s); once no call is left
    the daemon closes such connections itself. Its calls were answered first: a call in flight
    when the signal came still gets its result."""
    d = daemon("--grace-seconds", "300", "--lame-duck-ms", "100",
               "--debug-compile-delay-ms", "800")
    host, port = d.address.rsplit(":", 1)
    silent = socket.create_connection((host, int(port)), timeout=10)
    # the HTTP/2 preface and an empty SETTINGS frame; then nothing is read
    silent.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
    call = d.stub().Compile(compile_request(load_graph("mlp")), timeout=60)
    assert next(call).stage.name == "compile"  # in flight now
    d.send_signal(signal.SIGTERM)
    assert list(call)[-1].result.artifact_size > 0
    try:
        rc = d.proc.wait(60)  # the grace period is 300 s
    except subprocess.TimeoutExpired:
        raise AssertionError("the daemon waited for the silent connection:\n" + d.log())
    finally:
        silent.close()
    assert rc == 0
    d.proc = None
    d.out.close()
    log = d.log()
    assert "closing the connections" in log and "grace period over" not in log


def test_a_compile_that_never_ends_does_not_keep_the_daemon_running(daemon):
    """Compile threads cannot be interrupted; a compiler bug that loops
    would keep a drain waiting for ever. Ten seconds after the grace period
    the daemon exits anyway (status 3), and its cache is intact."""
    d = daemon("--grace-seconds", "1", "--lame-duck-ms", "100")
    stub = d.stub()
    run_compile(stub, compile_request(load_graph("attention")))
    d.stop()
    d = daemon("--grace-seconds", "1", "--lame-duck-ms", "100",
               "--debug-compile-stuck-ms", "600000", cache_dir=d.cache_dir)
    stub = d.stub()
    call = stub.Compile(compile_request(load_graph("mlp")), timeout=60)
    assert next(call).stage.name == "compile"  # stuck now
    started = time.time()
    d.send_signal(signal.SIGTERM)
    with pytest.raises(grpc.RpcError):
        list(call)
    assert d.proc.wait(40) == 3
    assert time.time() - started < 40
    d.proc = None
    d.out.close()
    assert "still running" in d.log() and "a compile that does not end is a bug" in d.log()
    d2 = daemon(cache_dir=d.cache_dir)
    _, hit = run_compile(d2.stub(), compile_request(load_graph("attention")))
    assert hit.served == SERVED.SERVED_L1_HIT


def test_drain_refuses_new_compiles_with_unavailable(daemon):
    """During a drain a request that would start a compile gets UNAVAILABLE
    with a message saying the daemon is stopping (not CANCELLED, which
    clients must read as a client-side cancel); hits and joins of the running
    compile are still served until the port closes."""
    d = daemon("--debug-compile-delay-ms", "1500", "--lame-duck-ms", "100")
    stub = d.stub()
    cached = load_graph("attention")
    run_compile(stub, compile_request(cached))
    call = stub.Compile(compile_request(load_graph("mlp")), timeout=30)
    assert next(call).stage.name == "compile"  # in flight now
    d.send_signal(signal.SIGTERM)
    deadline = time.time() + 10
    while d.health().Check(health_pb2.HealthCheckRequest(), timeout=5).status != \
            health_pb2.HealthCheckResponse.NOT_SERVING:
        assert time.time() < deadline
        time.sleep(0.01)

    with pytest.raises(grpc.RpcError) as e:
        run_compile(stub, compile_request(load_graph("conv_bn_relu")))
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "stopping" in e.value.details()
    _, hit = run_compile(stub, compile_request(cached))
    assert hit.served == SERVED.SERVED_L1_HIT
    _, joined = run_compile(stub, compile_request(load_graph("mlp")))
    assert joined.served == SERVED.SERVED_JOINED and joined.artifact_size > 0

    assert list(call)[-1].result.artifact_size > 0
    assert d.proc.wait(30) == 0
    d.proc = None
    d.out.close()
    assert "refused-draining" in d.log()


def test_sighup_reopens_the_log(daemon):
    d = daemon()
    rotated = d.log_path + ".1"
    os.rename(d.log_path, rotated)
    d.send_signal(signal.SIGHUP)
    deadline = time.time() + 5
    while not os.path.exists(d.log_path) and time.time() < deadline:
        time.sleep(0.05)
    run_compile(d.stub(), compile_request(load_graph("mlp")))
    assert "Compile compiled" in d.log()


def test_json_log_format(daemon):
    import json
    d = daemon("--log-format", "json")
    run_compile(d.stub(), compile_request(load_graph("mlp")))
    lines = [json.loads(line) for line in d.log().splitlines()]
    req = [x for x in lines if x.get("method") == "Compile"]
    assert req and req[0]["outcome"] == "compiled" and len(req[0]["key"]) == 64


def test_help_documents_every_flag():
    out = subprocess.run([BIN, "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for flag in ("--listen", "--cache-dir", "--cache-max-bytes", "--workers", "--max-queue",
                 "--max-message-bytes", "--log-level", "--log-format", "--config"):
        assert flag in out.stdout, flag
    bad = subprocess.run([BIN, "--workers", "x"], capture_output=True, text=True)
    assert bad.returncode == 2 and "workers" in bad.stderr


def test_config_file(daemon, tmp_path):
    conf = tmp_path / "compiled.conf"
    conf.write_text("# test\nmax-queue = 7\nlog-format = json\n")
    d = daemon("--config", str(conf))
    run_compile(d.stub(), compile_request(load_graph("mlp")))
    assert d.log().lstrip().startswith("{")


@pytest.mark.parametrize("log_file", [False, True])
def test_a_port_in_use_is_said_once_with_what_to_do(tmp_path, log_file):
    """The daemon cannot bind: one line on stderr (not one more from the log
    on stderr) naming the address and what to do; with --log-file, the log
    has it too."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        addr = "127.0.0.1:%d" % s.getsockname()[1]
        args = [BIN, "--listen", addr, "--cache-dir", str(tmp_path / "c")]
        if log_file:
            args += ["--log-file", str(tmp_path / "log")]
        p = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert p.returncode == 1, p.stderr
    assert p.stderr.count("Address already in use") == 1, p.stderr
    line = next(ln for ln in p.stderr.splitlines() if "Address already in use" in ln)
    assert addr in line and "--listen" in line, line
    if log_file:
        assert (tmp_path / "log").read_text().count("Address already in use") == 1
