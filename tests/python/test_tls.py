"""TLS and mutual TLS on the gRPC port (--tls-cert, --tls-key,
--tls-client-ca), with a throwaway CA made by the openssl command; the
Python client and compilectl connect with the matching options."""

import os
import select
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time

import grpc
import pytest

import compiled
from compiled.v1 import compiled_pb2, compiled_pb2_grpc
from daemon_util import BIN, BUILD, compile_request, load_graph, run_compile, variant

CTL = os.path.join(BUILD, "bin", "compilectl")
pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command")


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True,
                   timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1/localhost and a client
    certificate, both signed by it; and a second CA nobody trusts."""
    d = tmp_path_factory.mktemp("pki")
    for ca in ("ca", "rogue"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-subj", f"/CN=compiled test {ca}",
                cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, ca, ext in (("server", "ca", ["-extfile", "san.ext"]), ("client", "ca", []),
                          ("intruder", "rogue", [])):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey",
                f"{ca}.key", "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", *ext,
                cwd=d)
    return d


def tls_stub(address, pki, cert=None):
    creds = grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.pem").read_bytes(),
        private_key=(pki / f"{cert}.key").read_bytes() if cert else None,
        certificate_chain=(pki / f"{cert}.pem").read_bytes() if cert else None)
    return compiled_pb2_grpc.CompilerStub(grpc.secure_channel(address, creds))


def test_tls(daemon, pki):
    d = daemon("--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"))
    _, r = run_compile(tls_stub(d.address, pki), compile_request(variant(load_graph("mlp"), "tls")))
    assert r.served == compiled_pb2.SERVED_COMPILED and r.artifact
    # a plain client gets nowhere
    with pytest.raises(grpc.RpcError) as e:
        compiled_pb2_grpc.CompilerStub(grpc.insecure_channel(d.address)).Stats(
            compiled_pb2.StatsRequest(), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    # the Python client and compilectl with the CA
    assert compiled.Client(d.address, ca=str(pki / "ca.pem")).stats().compiles == 1
    p = subprocess.run([CTL, "--server", d.address, "--ca", str(pki / "ca.pem"), "stats"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([CTL, "--server", d.address, "stats", "--timeout", "3"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr  # plain: unreachable
    assert "TLS on the gRPC port" in d.log()
    # calls still know their peer's address (logs, per-client limits), not
    # the socketpair the bridge hands the core
    d.stop()
    peers = [ln for ln in d.log().splitlines() if "peer=" in ln]
    assert peers and all("peer=ipv4:127.0.0.1:" in ln for ln in peers), peers[:3]


def test_mutual_tls(daemon, pki):
    d = daemon("--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
               "--tls-client-ca", str(pki / "ca.pem"))
    ok = tls_stub(d.address, pki, "client").Stats(compiled_pb2.StatsRequest(), timeout=10)
    assert ok.workers > 0
    for cert in (None, "intruder"):  # no certificate, one the CA did not sign
        with pytest.raises(grpc.RpcError) as e:
            tls_stub(d.address, pki, cert).Stats(compiled_pb2.StatsRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    env = dict(os.environ, COMPILED_CA=str(pki / "ca.pem"), COMPILED_CERT=str(pki / "client.pem"),
               COMPILED_KEY=str(pki / "client.key"))
    p = subprocess.run([CTL, "--server", d.address, "stats"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    c = compiled.Client(d.address, ca=str(pki / "ca.pem"), cert=str(pki / "client.pem"),
                        key=str(pki / "client.key"))
    assert c.compile(variant(load_graph("mlp"), "mtls"))[1]


@pytest.mark.parametrize("args,message", [
    (["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"], "--tls-cert"),
    (["--tls-cert", "X"], "needs both --tls-cert and --tls-key"),
])
def test_bad_tls_settings_are_refused(tmp_path, args, message):
    p = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--cache-dir", str(tmp_path / "c")] + args,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and message in p.stderr, p.stderr


# ---- slow peers (issue 35, item 1) ----
#
# A peer that sends its handshake a byte at a time used to keep its
# connection, and a slot of the connection cap, for as long as it kept
# sending: the handshake's 10 s were a socket timeout, restarted by every
# byte, and --idle-timeout never reached a connection still in its
# handshake. Now the handshake has a deadline for all of it (at most the
# idle timeout), and a bridged peer that takes no bytes for --idle-timeout
# is dropped.

HELLO_HEADER = b"\x16\x03\x01\x40\x00"  # a handshake record of 16 KiB follows


class Trickler(threading.Thread):
    """A TCP connection sending a TLS record header, then a byte every
    `every` seconds for up to `hold` seconds; `closed_after` is when the
    daemon closed it (None: it never did)."""

    def __init__(self, port, every=0.3, hold=30):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.every, self.hold = every, hold
        self.start_time = time.monotonic()
        self.closed_after = None
        self.stop = threading.Event()

    def run(self):
        s = self.sock
        try:
            s.sendall(HELLO_HEADER)
            while time.monotonic() - self.start_time < self.hold and not self.stop.is_set():
                if select.select([s], [], [], self.every)[0] and not s.recv(4096):
                    raise ConnectionResetError
                s.sendall(b"\x00")
        except OSError:
            self.closed_after = time.monotonic() - self.start_time
        finally:
            s.close()


def tls_args(pki):
    return ["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key")]


def test_a_trickled_handshake_is_dropped_at_the_idle_timeout(daemon, pki):
    """--idle-timeout reaches a connection still in its handshake."""
    d = daemon(*tls_args(pki), "--idle-timeout", "2")
    t = Trickler(d.port)
    t.start()
    t.join(40)
    assert t.closed_after is not None, "a trickled handshake was kept 30 s"
    assert t.closed_after < t.hold


def test_a_trickled_handshake_is_dropped_at_the_handshake_timeout(daemon, pki):
    d = daemon(*tls_args(pki), "--tls-handshake-timeout", "1", "--log-level", "debug")
    t = Trickler(d.port)
    t.start()
    t.join(40)
    assert t.closed_after is not None, "a trickled handshake was kept 30 s"
    assert t.closed_after < t.hold
    assert "TLS handshake not done within 1000 ms; connection closed" in d.log()


def test_trickled_handshakes_cannot_hold_the_connection_cap(daemon, pki):
    """Four peers trickling handshakes for 30 s take the four connections
    allowed; a normal client gets in once the handshake deadline drops
    them, long before."""
    d = daemon(*tls_args(pki), "--max-connections", "4", "--idle-timeout", "2")
    ts = [Trickler(d.port) for _ in range(4)]
    for t in ts:
        t.start()
    stub = tls_stub(d.address, pki)
    try:
        while True:
            assert time.monotonic() - ts[0].start_time < ts[0].hold, \
                "slow handshakes kept a client out for 30 s"
            try:
                tls_stub(d.address, pki).Stats(compiled_pb2.StatsRequest(), timeout=2)
                break
            except grpc.RpcError as e:
                assert e.code() in (grpc.StatusCode.UNAVAILABLE,
                                    grpc.StatusCode.DEADLINE_EXCEEDED), e
            time.sleep(0.3)
        assert any(t.closed_after is not None for t in ts)
    finally:
        for t in ts:
            t.stop.set()
    assert stub.Stats(compiled_pb2.StatsRequest(), timeout=10).connections_refused > 0


def h2_frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    """A header field literal without indexing, new name, no Huffman
    (names and values under 127 bytes)."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk, "the daemon closed the connection"
        data += chunk
    return data


def test_a_peer_that_stops_reading_is_dropped(daemon, pki):
    """An HTTP/2 client that opens the flow-control windows all the way,
    asks for 400 artifacts of 21 KB and reads nothing: once the daemon's
    socket buffers are full and no byte has been taken for --idle-timeout,
    its connection is closed. (The bridge used to wait for the peer for
    good, keeping the connection and its slot after the core had given
    up on it.)"""
    # the 400 calls and the checking client share 127.0.0.1: a per-client
    # call limit above them, so that Stats is never refused for them
    d = daemon(*tls_args(pki), "--idle-timeout", "2", "--max-client-calls", "1000")
    check = tls_stub(d.address, pki)
    gm = variant(load_graph("mlp"), "stall")
    _, r = run_compile(check, compile_request(gm))  # cached: hits carry it
    assert len(r.artifact) > 20000
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.set_alpn_protocols(["h2"])
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.connect(("127.0.0.1", d.port))
    s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    try:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
                  h2_frame(4, 0, 0, struct.pack(">HI", 4, 2**31 - 1)) +  # stream windows
                  h2_frame(8, 0, 0, struct.pack(">I", 2**31 - 1 - 65535)))  # connection
        settings = recv_exact(s, 9)  # the daemon's SETTINGS, acknowledged
        assert settings[3] == 4, settings
        recv_exact(s, int.from_bytes(settings[:3], "big"))
        s.sendall(h2_frame(4, 1, 0))
        headers = b"".join(hpack_literal(n, v) for n, v in [
            (b":method", b"POST"), (b":scheme", b"https"),
            (b":path", b"/compiled.v1.Compiler/Compile"),
            (b":authority", d.address.encode()), (b"content-type", b"application/grpc"),
            (b"te", b"trailers")])
        msg = compile_request(gm).SerializeToString()
        body = b"\x00" + struct.pack(">I", len(msg)) + msg
        s.sendall(b"".join(h2_frame(1, 4, sid, headers) + h2_frame(0, 1, sid, body)
                           for sid in range(1, 801, 2)))
        connections = check.Stats(compiled_pb2.StatsRequest(), timeout=10).connections
        assert connections == 2, connections
        deadline = time.monotonic() + 30
        while check.Stats(compiled_pb2.StatsRequest(), timeout=10).connections > 1:
            assert time.monotonic() < deadline, "a peer that reads nothing was kept 30 s"
            time.sleep(0.5)
    finally:
        raw.close()


def test_a_plain_client_is_told_the_daemon_expects_tls(daemon, pki):
    """A client without TLS at a TLS port gets its connection reset; it is
    told that the daemon expects TLS (compilectl, the Python client), and
    the daemon's log says a plain client came."""
    d = daemon("--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"))
    p = subprocess.run([CTL, "--server", d.address, "stats", "--timeout", "5"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr
    assert "expects TLS" in p.stderr and "--ca" in p.stderr and "COMPILED_CA" in p.stderr, \
        p.stderr
    with pytest.raises(compiled.DaemonUnavailable) as e:
        compiled.Client(d.address).stats(timeout=5)
    assert "expects TLS" in str(e.value) and "COMPILED_CA" in str(e.value), e.value
    assert "plain gRPC client" in d.log() and "--tls-cert" in d.log()
    # with mutual TLS too: the daemon answers the handshake, then refuses
    d2 = daemon("--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
                "--tls-client-ca", str(pki / "ca.pem"))
    p = subprocess.run([CTL, "--server", d2.address, "stats", "--timeout", "5"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "expects TLS" in p.stderr, p.stderr


def test_dev_ca_script_makes_certificates_a_daemon_and_its_clients_accept(daemon, tmp_path):
    """deploy/dev-ca.sh (docs/operations.md): its CA, server certificate
    and client certificate work as they are with a mutual-TLS daemon, for
    compilectl and the Python client, at the names it wrote in."""
    script = os.path.join(os.environ.get("COMPILED_SRC", "."), "deploy", "dev-ca.sh")
    out = tmp_path / "ca"
    p = subprocess.run([script, "-o", str(out), "--client", "ci-runner"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    for name in ("ca", "server", "ci-runner"):
        assert (out / f"{name}.pem").exists()
        assert (out / f"{name}.key").stat().st_mode & 0o077 == 0, name  # owner only
    d = daemon("--tls-cert", str(out / "server.pem"), "--tls-key", str(out / "server.key"),
               "--tls-client-ca", str(out / "ca.pem"))
    tls = ["--ca", str(out / "ca.pem"), "--cert", str(out / "ci-runner.pem"),
           "--key", str(out / "ci-runner.key")]
    text = subprocess.run(["openssl", "x509", "-in", str(out / "server.pem"), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout
    assert "DNS:localhost" in text and "IP Address:127.0.0.1" in text, text
    hosts = ["127.0.0.1"]  # the default names, IP and DNS: by name where it resolves
    try:
        socket.getaddrinfo("localhost", d.port)
        hosts.append("localhost")
    except OSError:
        pass  # a minimal root without /etc/hosts
    for host in hosts:
        p = subprocess.run([CTL, "--server", f"{host}:{d.port}", "stats", *tls],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (host, p.stderr)
    c = compiled.Client(d.address, ca=str(out / "ca.pem"), cert=str(out / "ci-runner.pem"),
                        key=str(out / "ci-runner.key"))
    assert c.compile(variant(load_graph("mlp"), "dev-ca"))[1]

    # again with other names: the CA is kept, so the client certificate
    # made before still works, and the new server certificate names them
    p = subprocess.run([script, "-o", str(out), "compiled.internal", "10.9.8.7"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "keeping the CA" in p.stdout, p.stderr
    text = subprocess.run(["openssl", "x509", "-in", str(out / "server.pem"), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout
    assert "DNS:compiled.internal" in text and "IP Address:10.9.8.7" in text, text
    p = subprocess.run(["openssl", "verify", "-CAfile", str(out / "ca.pem"),
                        str(out / "server.pem"), str(out / "ci-runner.pem")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run([script, "-o", str(out), "not a name"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "neither a DNS name nor an IP address" in p.stderr
