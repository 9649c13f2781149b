"""Signed artifacts (--signing-keys, --verify-cache) and the Python client's
COMPILED_TRUST_KEY, against real daemons. Signatures are recomputed here
with Python's hmac module from the format in daemon/sign.h."""

import hashlib
import hmac
import os
import sqlite3
import subprocess

import pytest

import compiled
from compiled.v1 import compiled_pb2
from daemon_util import BIN, compile_request, load_graph, run_compile, variant

K_OLD = ("k2025", "11" * 32)
K_NEW = ("k2026", "a7" * 16 + "3c" * 16)


def write_keys(path, *keys):
    with open(path, "w") as f:
        f.write("# id secret\n")
        for kid, secret in keys:
            f.write(f"{kid} {secret}\n")
    os.chmod(path, 0o600)
    return str(path)


def expected_sig(secret_hex, key_hex, data):
    msg = b"compiled-artifact-v1\n" + key_hex.encode() + b"\n" + \
        hashlib.sha256(data).hexdigest().encode()
    return hmac.new(bytes.fromhex(secret_hex), msg, hashlib.sha256).hexdigest()


def test_artifacts_are_signed_and_rotation_keeps_old_entries(daemon, tmp_path):
    keys = tmp_path / "keys"
    d = daemon("--signing-keys", write_keys(keys, K_OLD))
    gm_a = variant(load_graph("mlp_block"), "sig-a")
    _, r = run_compile(d.stub(), compile_request(gm_a))
    assert r.served == compiled_pb2.SERVED_COMPILED
    assert r.signature_key == K_OLD[0]
    assert r.signature == expected_sig(K_OLD[1], r.key, r.artifact)
    d.stop()
    # rotation: the new key first (it signs), the old one still verifies
    write_keys(keys, K_NEW, K_OLD)
    d.start(extra=["--verify-cache"])
    _, hit = run_compile(d.stub(), compile_request(gm_a))
    assert hit.served == compiled_pb2.SERVED_L1_HIT
    assert (hit.signature_key, hit.signature) == (r.signature_key, r.signature)
    _, b = run_compile(d.stub(), compile_request(variant(gm_a, "sig-b")))
    assert b.signature_key == K_NEW[0]
    assert b.signature == expected_sig(K_NEW[1], b.key, b.artifact)
    assert d.stats().signature_failures == 0


@pytest.mark.parametrize("tamper", ["wrong_mac", "no_signature", "unknown_key"])
def test_poisoned_entry_is_rejected_and_recompiled(daemon, tmp_path, tamper):
    d = daemon("--signing-keys", write_keys(tmp_path / "keys", K_NEW), "--verify-cache")
    gm = variant(load_graph("mlp_block"), "poison")
    _, first = run_compile(d.stub(), compile_request(gm))
    d.stop()
    db = sqlite3.connect(os.path.join(d.cache_dir, "cache.db"))
    if tamper == "wrong_mac":
        db.execute("UPDATE entries SET sig = ?", (bytes(32),))
    elif tamper == "no_signature":
        db.execute("UPDATE entries SET sig = NULL, sig_key = NULL")
    else:
        db.execute("UPDATE entries SET sig_key = 'someone-else'")
    db.commit()
    db.close()
    d.start()
    _, r = run_compile(d.stub(), compile_request(gm))
    # never served: dropped and compiled again, with a good signature
    assert r.served == compiled_pb2.SERVED_COMPILED
    assert r.signature == expected_sig(K_NEW[1], r.key, r.artifact) == first.signature
    s = d.stats()
    assert (s.signature_failures, s.compiles) == (1, 1), s
    want = {"wrong_mac": "signature does not match", "no_signature": "no signature",
            "unknown_key": "a key this daemon does not hold someone-else"}[tamper]
    assert want in d.log(), d.log()[-2000:]
    # the replacement is trusted: the next request is a hit
    _, again = run_compile(d.stub(), compile_request(gm))
    assert again.served == compiled_pb2.SERVED_L1_HIT


def test_client_verifies_signatures(daemon, tmp_path):
    keys = write_keys(tmp_path / "keys", K_NEW)
    d = daemon("--signing-keys", keys)
    gm = variant(load_graph("mlp_block"), "client")
    key, data = compiled.Client(d.address, trust_key=keys).compile(gm)
    assert key and data
    compiled.Client(d.address, trust_key=f"{K_NEW[0]}:{K_NEW[1]}").compile(gm)
    with pytest.raises(compiled.DaemonError, match="does not match"):
        compiled.Client(d.address, trust_key=f"{K_NEW[0]}:{'22' * 32}").compile(gm)
    with pytest.raises(compiled.DaemonError, match="which this client does not hold"):
        compiled.Client(d.address, trust_key=f"other:{K_NEW[1]}").compile(gm)
    plain = daemon()
    with pytest.raises(compiled.DaemonError, match="not signed"):
        compiled.Client(plain.address, trust_key=keys).compile(gm)
    with pytest.raises(ValueError, match="at least 32 bytes"):
        compiled.Client(d.address, trust_key="k:abcd")


@pytest.mark.parametrize("content,args,message", [
    (None, ["--verify-cache"], "--verify-cache needs --signing-keys"),
    ("k1 abcd\n", [], "a secret of 32-128 bytes"),
    ("bad/id " + "11" * 32 + "\n", [], "an id of 1-32 characters"),
    ("k1 " + "11" * 32 + "\nk1 " + "22" * 32 + "\n", [], "line 2: key id 'k1' repeated"),
    ("k1 " + "zz" * 32 + "\n", [], "the secret is not hex"),
    ("# empty\n", [], "no keys"),
])
def test_bad_signing_keys_are_refused(tmp_path, content, args, message):
    cmd = [BIN, "--listen", "127.0.0.1:0", "--cache-dir", str(tmp_path / "c")] + args
    if content is not None:
        (tmp_path / "keys").write_text(content)
        cmd += ["--signing-keys", str(tmp_path / "keys")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and message in p.stderr, (p.returncode, p.stderr)
