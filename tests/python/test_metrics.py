"""/metrics and /healthz (--metrics-listen), scraped from a real daemon:
the counters must match the calls the test made."""

import re
import select
import socket
import threading
import time
import urllib.error
import urllib.request

import grpc
import pytest

from compiled.v1 import compiled_pb2
from daemon_util import compile_request, free_port, load_graph, run_compile, variant


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


# ---- slow peers (issue 35, item 2) ----
#
# libmicrohttpd's timeout is one of inactivity, restarted by every byte, and
# its 64 connections were first come, first served: 200 connections sending
# a byte a second kept /healthz unreachable as long as they kept sending.

class Tricklers(threading.Thread):
    """n connections to `port` each sending an HTTP request a byte every
    `every` seconds for up to `hold` seconds; `closed` counts those the
    daemon closed."""

    def __init__(self, port, n, every=0.3, hold=30):
        super().__init__(daemon=True)
        self.socks = []
        for _ in range(n):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            self.socks.append(s)
        self.every, self.hold = every, hold
        self.start_time = time.monotonic()
        self.closed = 0
        self.stop = threading.Event()
        self.request = b"GET /healthz HTTP/1.1\r\n" + b"X" * 1000

    def run(self):
        open_ = {s: 0 for s in self.socks}
        while open_ and time.monotonic() - self.start_time < self.hold \
                and not self.stop.wait(self.every):
            for s in [s for s in open_ if select.select([s], [], [], 0)[0]]:
                try:  # readable: closed (or answered, which cannot be yet)
                    s.recv(4096)
                except OSError:
                    pass
                self.closed += 1
                del open_[s]
            for s, at in list(open_.items()):
                try:
                    s.send(self.request[at:at + 1])
                    open_[s] = at + 1
                except OSError:  # not connected yet, or refused
                    pass
        for s in self.socks:
            s.close()

    def elapsed(self):
        return time.monotonic() - self.start_time


def test_healthz_answers_while_slow_peers_hold_the_connections(daemon):
    """200 connections trickling requests; /healthz answers at once: a
    newcomer at the cap makes room by closing the connection that has
    waited longest for its request."""
    port = free_port()
    d = daemon("--metrics-listen", f"127.0.0.1:{port}")
    ts = Tricklers(port, 200)
    ts.start()
    time.sleep(1)  # all connected, trickling
    try:
        while True:
            assert ts.elapsed() < ts.hold, "slow peers kept /healthz out for 30 s"
            try:
                status, _, body = scrape(port, "/healthz")
                break
            except OSError as e:  # refused, reset, timed out
                print("healthz:", e)
        assert status == 200 and body.startswith("ok")
        assert ts.is_alive(), "the slow peers stopped first"
    finally:
        ts.stop.set()
        ts.join()
    s = samples(scrape(port)[2])
    assert s["compiled_http_connections_dropped_total"] > 0


def test_a_slow_request_is_dropped_at_the_request_timeout(daemon):
    port = free_port()
    d = daemon("--metrics-listen", f"127.0.0.1:{port}", "--metrics-request-timeout", "1")
    ts = Tricklers(port, 3)
    ts.start()
    ts.join(40)
    assert ts.closed == 3, "a request trickled for 30 s was kept"
    assert ts.elapsed() < ts.hold
    s = samples(scrape(port)[2])
    assert s["compiled_http_connections_dropped_total"] == 3
    assert scrape(port, "/healthz")[0] == 200
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
