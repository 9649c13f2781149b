"""TLS and mutual TLS on the gRPC port (--tls-cert, --tls-key,
--tls-client-ca), with a throwaway CA made by the openssl command; the
Python client and compilectl connect with the matching options."""

import os
import shutil
import subprocess

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
    for host in ("127.0.0.1", "localhost"):  # the default names, IP and DNS
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
