"""/metrics and /healthz (--metrics-listen), scraped from a real daemon:
the counters must match the calls the test made."""

import re
import socket
import time
import urllib.error
import urllib.request

import grpc
import pytest

from compiled.v1 import compiled_pb2
from daemon_util import compile_request, load_graph, run_compile, variant


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port, path="/metrics"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def samples(text):
    """{'name{labels}': value} of the exposition text; checks its shape."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            assert re.match(r"# (HELP|TYPE) compiled_\w+ ", line), line
            continue
        m = re.fullmatch(r'(compiled_\w+(?:\{[^}]*\})?) (\S+)', line)
        assert m, line
        out[m.group(1)] = float(m.group(2))
    return out


def test_metrics_match_the_calls(daemon, tmp_path):
    port = free_port()
    tokens = tmp_path / "tokens"
    tokens.write_text("admin admin-token-0123456789ab ops\n")
    tokens.chmod(0o600)
    d = daemon("--metrics-listen", f"127.0.0.1:{port}", "--tokens", str(tokens))
    md = (("authorization", "Bearer admin-token-0123456789ab"),)
    stub = d.stub()
    gm = load_graph("mlp_block")
    for tag in ("a", "b"):
        list(stub.Compile(compile_request(variant(gm, tag)), timeout=60, metadata=md))
    for _ in range(3):  # hits
        list(stub.Compile(compile_request(variant(gm, "a")), timeout=60, metadata=md))
    with pytest.raises(grpc.RpcError):
        stub.Stats(compiled_pb2.StatsRequest(), timeout=10)  # no token
    status, ctype, text = scrape(port)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    s = samples(text)
    assert s['compiled_requests_total{method="Compile",code="OK"}'] == 5
    assert s['compiled_requests_total{method="Stats",code="UNAUTHENTICATED"}'] == 1
    assert s["compiled_unauthenticated_total"] == 1
    assert s['compiled_cache_hits_total{tier="memory"}'] + \
        s['compiled_cache_hits_total{tier="l1"}'] == 3
    assert s['compiled_cache_hits_total{tier="l2"}'] == 0
    assert s["compiled_compiles_total"] == 2 and s["compiled_cache_misses_total"] == 2
    assert s["compiled_compile_duration_seconds_count"] == 2
    buckets = [v for k, v in s.items() if k.startswith("compiled_compile_duration_seconds_bucket")]
    assert buckets == sorted(buckets) and buckets[-1] == 2
    assert s["compiled_compile_duration_seconds_sum"] > 0
    assert s["compiled_cache_entries"] == 2 and s["compiled_cache_bytes"] > 0
    assert s["compiled_queue_depth"] == 0 and s["compiled_redis_up"] == 0
    st = stub.Stats(compiled_pb2.StatsRequest(), timeout=10, metadata=md)
    assert st.compiles == s["compiled_compiles_total"]

    status, _, body = scrape(port, "/healthz")
    assert status == 200 and body.startswith("ok")
    with pytest.raises(urllib.error.HTTPError) as e:
        scrape(port, "/nothing")
    assert e.value.code == 404
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 405
    text = d.log()
    assert f"metrics on http://127.0.0.1:{port}/metrics" in text


def test_bad_metrics_address_is_refused(daemon, tmp_path):
    import subprocess
    from daemon_util import BIN
    p = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--cache-dir", str(tmp_path / "c"),
                        "--metrics-listen", "nowhere"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 1 and "--metrics-listen nowhere: want HOST:PORT" in p.stderr


def test_compile_count_and_duration_count_agree(daemon):
    """compiles_total and compile_duration_seconds_count count the same
    compiles: N graphs compiled give N in both, whatever hits and joins
    came with them, and a compile stopped because its only caller gave up
    (then compiled for the next caller) counts once, not twice."""
    import threading
    port = free_port()
    d = daemon("--metrics-listen", f"127.0.0.1:{port}", "--debug-compile-delay-ms", "1000",
               "--workers", "2")
    stub = d.stub()
    gm = load_graph("mlp_block")

    # a caller that gives up while its compile runs; the next one compiles it
    with pytest.raises(grpc.RpcError) as e:
        run_compile(stub, compile_request(variant(gm, "given-up")), timeout=0.3)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    deadline = time.monotonic() + 10  # until its worker has stopped
    while time.monotonic() < deadline and (d.stats().running or d.stats().queued):
        time.sleep(0.02)
    assert "abandoned: no waiter left" in d.log()
    run_compile(stub, compile_request(variant(gm, "given-up")))

    # a compile that a second caller joins: sent once the first is running
    first = stub.Compile(compile_request(variant(gm, "joined")), timeout=60)
    assert next(first).WhichOneof("event") in ("queued", "stage")
    joined = []
    t = threading.Thread(target=lambda: joined.append(
        run_compile(stub, compile_request(variant(gm, "joined")))[1]))
    t.start()
    events = list(first)
    t.join(60)
    assert events[-1].result.served == compiled_pb2.SERVED_COMPILED
    assert joined and joined[0].served in (compiled_pb2.SERVED_JOINED,
                                           compiled_pb2.SERVED_L1_HIT)

    run_compile(stub, compile_request(variant(gm, "plain")))
    for tag in ("given-up", "joined", "plain"):  # hits
        run_compile(stub, compile_request(variant(gm, tag)))

    s = samples(scrape(port)[2])
    assert s["compiled_compiles_total"] == 3, s["compiled_compiles_total"]
    assert s["compiled_compile_duration_seconds_count"] == 3
    assert s['compiled_compile_duration_seconds_bucket{le="+Inf"}'] == 3
    assert s['compiled_cache_hits_total{tier="memory"}'] + \
        s['compiled_cache_hits_total{tier="l1"}'] >= 3
    assert d.stats().compiles == 3
