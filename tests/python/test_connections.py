"""Connections: descriptor exhaustion, the connection cap, idle connections.

The daemon owns its listening socket and hands accepted connections to the
gRPC core, so it can cap them, refuse what it cannot serve, and keep
accepting after running out of descriptors (the core alone stops accepting
for good after one EMFILE). These tests run the daemon under a small
RLIMIT_NOFILE, or lower its limit while it runs (prlimit), and check that it
serves normally again once the pressure is gone.
"""

import os
import resource
import socket
import time

import grpc

import compiled  # noqa: F401  (makes compiled.v1 importable)
from compiled.v1 import compiled_pb2, health_pb2, health_pb2_grpc



PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def open_idle(port, n):
    """n TCP connections that never send a byte (some may not complete when
    the daemon refuses them; those are returned too, to be closed)."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    return socks


def health_ok(address, timeout=10):
    """A Health check on a fresh channel; True when it answered SERVING."""
    with grpc.insecure_channel(address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        try:
            r = stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout)
        except grpc.RpcError as e:
            print("health check failed:", e.code(), e.details())
            return False
        return r.status == health_pb2.HealthCheckResponse.SERVING


def stats(address):
    with grpc.insecure_channel(address) as ch:
        from compiled.v1 import compiled_pb2_grpc
        return compiled_pb2_grpc.CompilerStub(ch).Stats(compiled_pb2.StatsRequest(), timeout=10)


def wait_closed(sock, timeout):
    """True when the peer closed `sock` (EOF or reset) within `timeout`;
    data the daemon sends first (HTTP/2 SETTINGS, GOAWAY) is skipped."""
    sock.setblocking(True)
    sock.settimeout(0.5)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if sock.recv(4096) == b"":
                return True
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


def nfds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def test_more_idle_connections_than_descriptors_then_serves(daemon):
    d = daemon(nofile=(256, 256))
    before = health_pb2_grpc.HealthStub(d.channel())  # connected before the flood
    assert before.Check(health_pb2.HealthCheckRequest(), timeout=10).status == 1
    socks = open_idle(d.port, 300)
    try:
        time.sleep(1.0)  # let the daemon take (or refuse) all of them
        assert d.proc.poll() is None
        # Over the cap, newcomers are refused; a client already connected is
        # still served (descriptors were kept spare).
        assert before.Check(health_pb2.HealthCheckRequest(), timeout=10).status == 1
    finally:
        for s in socks:
            s.close()
    # the core closes its side of each connection when it reads the EOF,
    # a moment later: until then they still count against the cap
    deadline = time.time() + 10
    while not health_ok(d.address):
        assert time.time() < deadline, "the daemon never served again"
        time.sleep(0.2)
    st = stats(d.address)
    assert st.connections_refused > 0
    assert 0 < st.max_connections < 256
    assert "connection limit" in d.log()
    assert "Too many open files" not in d.output()


def test_accepting_resumes_after_descriptor_exhaustion(daemon):
    """Exhaust the daemon's descriptors for real (its limit lowered below
    the descriptors it holds), then give them back: it must accept again."""
    d = daemon()
    assert health_ok(d.address)
    pid = d.proc.pid
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    low = max(8, nfds(pid) - 4)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (low, old[1]))
    try:
        socks = open_idle(d.port, 20)
        time.sleep(1.0)
        assert d.proc.poll() is None
        for s in socks:
            s.close()
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
    assert health_ok(d.address)
    assert "descriptors" in d.log()


def test_idle_connections_are_closed(daemon):
    d = daemon("--idle-timeout", "1")
    silent = socket.create_connection(("127.0.0.1", d.port))
    http2 = socket.create_connection(("127.0.0.1", d.port))
    http2.sendall(PREFACE + EMPTY_SETTINGS)
    try:
        assert wait_closed(silent, 30), "a connection that never spoke stayed open"
        assert wait_closed(http2, 30), "an idle HTTP/2 connection stayed open"
    finally:
        silent.close()
        http2.close()
    assert health_ok(d.address)


def test_connections_over_the_cap_are_refused(daemon):
    d = daemon("--max-connections", "4")
    held = [socket.create_connection(("127.0.0.1", d.port)) for _ in range(4)]
    time.sleep(0.5)
    extra = socket.create_connection(("127.0.0.1", d.port))
    try:
        assert wait_closed(extra, 20), "a connection over the cap was kept"
    finally:
        extra.close()
        for s in held:
            s.close()
    time.sleep(0.5)
    assert health_ok(d.address)
    st = stats(d.address)
    assert st.connections_refused >= 1 and st.max_connections == 4
    assert "connection limit" in d.log()
