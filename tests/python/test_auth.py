"""Bearer tokens and roles (--tokens), the loopback-only rule without them,
and the clients' --token / COMPILED_TOKEN, against real daemons."""

import os
import signal
import subprocess
import time
import warnings

import grpc
import pytest
import torch

import compiled
from compiled.v1 import compiled_pb2, health_pb2
from daemon_util import BIN, BUILD, compile_request, load_graph, run_compile, variant

CTL = os.path.join(BUILD, "bin", "compilectl")
TOKENS = {"read": "read-token-7f3a9c1e5b", "compile": "compile-token-2d8e6b4a90",
          "admin": "admin-token-c5e1f7a3d2"}


def write_tokens(path, tokens=TOKENS, extra=""):
    with open(path, "w") as f:
        f.write("# role token name\n")
        for role, tok in tokens.items():
            f.write(f"{role}  {tok}  {role}-users\n")
        f.write(extra)
    os.chmod(path, 0o600)
    return str(path)


def md(role):
    return (("authorization", "Bearer " + TOKENS[role]),)


def code_of(fn):
    with pytest.raises(grpc.RpcError) as e:
        fn()
    return e.value.code(), e.value.details()


def test_roles(daemon, tmp_path):
    d = daemon("--tokens", write_tokens(tmp_path / "tokens"))
    stub = d.stub()
    gm = variant(load_graph("mlp_block"), "auth")
    req = compile_request(gm)

    # no token, an unknown one: UNAUTHENTICATED, whatever the method
    assert code_of(lambda: d.stats())[0] == grpc.StatusCode.UNAUTHENTICATED
    bad = (("authorization", "Bearer not-a-configured-token"),)
    assert code_of(lambda: run_compile_md(stub, req, bad))[0] == \
        grpc.StatusCode.UNAUTHENTICATED
    # the health check needs none
    assert d.health().Check(health_pb2.HealthCheckRequest(), timeout=10).status == \
        health_pb2.HealthCheckResponse.SERVING

    # read: no compile on a miss; compile: yes; read then gets the hit
    code, details = code_of(lambda: run_compile_md(stub, req, md("read")))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "role 'compile'" in details and "read-users" in details, details
    r = run_compile_md(stub, req, md("compile"))
    assert r.served == compiled_pb2.SERVED_COMPILED
    r = run_compile_md(stub, req, md("read"))
    assert r.served == compiled_pb2.SERVED_L1_HIT
    assert stub.Lookup(compiled_pb2.LookupRequest(key=r.key), timeout=10,
                       metadata=md("read")).found

    # listing and evicting need admin
    for role in ("read", "compile"):
        for call in (lambda: stub.List(compiled_pb2.ListRequest(), timeout=10, metadata=md(role)),
                     lambda: stub.Evict(compiled_pb2.EvictRequest(key=r.key), timeout=10,
                                        metadata=md(role))):
            code, details = code_of(call)
            assert code == grpc.StatusCode.PERMISSION_DENIED and "'admin'" in details
    assert len(stub.List(compiled_pb2.ListRequest(), timeout=10, metadata=md("admin")).entries) == 1
    stub.Evict(compiled_pb2.EvictRequest(key=r.key), timeout=10, metadata=md("admin"))
    assert not stub.Lookup(compiled_pb2.LookupRequest(key=r.key), timeout=10,
                           metadata=md("admin")).found

    s = stub.Stats(compiled_pb2.StatsRequest(), timeout=10, metadata=md("read"))
    assert (s.unauthenticated, s.permission_denied, s.tokens) == (2, 5, 3), s
    # tokens never reach the log; their names do
    d.stop()
    text = d.log() + d.output()
    for tok in TOKENS.values():
        assert tok not in text
    assert "read-users" in text


def run_compile_md(stub, req, metadata):
    events = list(stub.Compile(req, timeout=60, metadata=metadata))
    return events[-1].result


def test_sighup_reloads_tokens(daemon, tmp_path):
    path = tmp_path / "tokens"
    d = daemon("--tokens", write_tokens(path))
    stub = d.stub()

    def stats_code(tok):
        try:
            stub.Stats(compiled_pb2.StatsRequest(), timeout=10,
                       metadata=(("authorization", "Bearer " + tok),))
            return grpc.StatusCode.OK
        except grpc.RpcError as e:
            return e.code()

    new = dict(TOKENS, read="rotated-read-token-99a1b2")
    write_tokens(path, new)
    d.send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while stats_code(new["read"]) != grpc.StatusCode.OK and time.time() < deadline:
        time.sleep(0.05)
    assert stats_code(new["read"]) == grpc.StatusCode.OK
    assert stats_code(TOKENS["read"]) == grpc.StatusCode.UNAUTHENTICATED
    # a broken file leaves the tokens as they were
    write_tokens(path, new, extra="superuser some-long-token-value-x\n")
    d.send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while "keeping the previous tokens" not in d.log() and time.time() < deadline:
        time.sleep(0.05)
    assert "unknown role 'superuser'" in d.log()
    assert stats_code(new["read"]) == grpc.StatusCode.OK


@pytest.mark.parametrize("content,message", [
    ("read short\n", "at least 16 characters"),
    ("owner abcdefghijklmnopqrstuvwxyz\n", "unknown role 'owner'"),
    ("read abcdefghijklmnopqrstuvwxyz a\ncompile abcdefghijklmnopqrstuvwxyz b\n",
     "line 2: the token is repeated"),
    ("# nothing\n", "no tokens"),
    (None, "No such file"),
])
def test_bad_tokens_file_is_refused(tmp_path, content, message):
    path = tmp_path / "tokens"
    if content is not None:
        path.write_text(content)
    p = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--cache-dir", str(tmp_path / "c"),
                        "--tokens", str(path)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and message in p.stderr, (p.returncode, p.stderr)


def test_non_loopback_needs_tokens_or_insecure(daemon, tmp_path):
    p = subprocess.run([BIN, "--listen", "0.0.0.0:0", "--cache-dir", str(tmp_path / "c")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "not a loopback address" in p.stderr, p.stderr
    d = daemon("--listen", "0.0.0.0:0", "--insecure")
    assert d.stats().workers > 0
    assert "NOT on loopback (--insecure)" in d.log()
    d2 = daemon("--listen", "0.0.0.0:0", "--tokens", write_tokens(tmp_path / "t"))
    assert d2.stub().Stats(compiled_pb2.StatsRequest(), timeout=10,
                           metadata=md("read")).tokens == 3


def test_compilectl_token(daemon, tmp_path):
    d = daemon("--tokens", write_tokens(tmp_path / "tokens"))
    env = dict(os.environ)
    env.pop("COMPILED_TOKEN", None)

    def ctl(*args, token_env=None):
        e = dict(env, COMPILED_TOKEN=token_env) if token_env else env
        return subprocess.run([CTL, "--server", d.address] + list(args), capture_output=True,
                              text=True, timeout=60, env=e)

    p = ctl("stats")
    assert p.returncode == 7 and "UNAUTHENTICATED" in p.stderr, p.stderr
    assert ctl("--token", TOKENS["read"], "stats").returncode == 0
    assert ctl("stats", token_env=TOKENS["read"]).returncode == 0
    p = ctl("--token=" + TOKENS["compile"], "evict", "--all")
    assert p.returncode == 7 and "PERMISSION_DENIED" in p.stderr, p.stderr
    assert ctl("evict", "--all", token_env=TOKENS["admin"]).returncode == 0
    assert ctl("--token").returncode == 2


def test_python_client_token(daemon, tmp_path, monkeypatch):
    d = daemon("--tokens", write_tokens(tmp_path / "tokens"))
    with pytest.raises(compiled.DaemonError, match="UNAUTHENTICATED"):
        compiled.Client(d.address, token="").stats()
    assert compiled.Client(d.address, token=TOKENS["read"]).stats().tokens == 3

    def f(x):
        return torch.relu(x) * 2

    x = torch.randn(8, 8)
    # a read token from the environment: the miss is refused, the function
    # runs eagerly (with a warning) and gives eager's answer
    monkeypatch.setenv("COMPILED_TOKEN", TOKENS["read"])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cf = compiled.compile(f, (x,), server=d.address)
        assert torch.equal(cf(x), f(x))
    assert any("PERMISSION_DENIED" in str(m.message) for m in w), [str(m.message) for m in w]
    assert cf.compiles == 0
    s = compiled.Client(d.address, token=TOKENS["admin"]).stats()
    assert s.permission_denied == 1 and s.compiles == 0
