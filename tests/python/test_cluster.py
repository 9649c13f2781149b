"""The shared Redis tier (--redis): two daemons on one real redis-server
(started here on a free loopback port), one compile per graph for the
cluster, leases that survive a dead owner, Redis going away, and what
someone who can write to Redis may put there: poisoned and oversized
entries, keys of the wrong type, leases that never expire."""

import concurrent.futures
import os
import shutil
import signal
import socket
import struct
import subprocess
import time

import grpc
import pytest

from compiled.v1 import compiled_pb2
from daemon_util import BIN, compile_request, free_port, load_graph, run_compile, variant

REDIS = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
pytestmark = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed "
                                "(deploy/bootstrap.sh installs it)")

KEYS = ("k1", "5e" * 32)


class Redis:
    def __init__(self, tmp_path):
        self.port = free_port()
        self.dir = tmp_path
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def stop(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def cli(self, *args, stdin=None):
        """redis-cli; with stdin (bytes), they are the last argument (-x)."""
        x = ["-x"] if stdin is not None else []
        return subprocess.run([REDIS_CLI, "-p", str(self.port)] + x + list(args),
                              input=stdin, capture_output=True, timeout=10)

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"


@pytest.fixture
def redis(tmp_path):
    r = Redis(tmp_path).start()
    yield r
    r.stop()


def keys_file(tmp_path):
    p = tmp_path / "signing.keys"
    p.write_text(f"{KEYS[0]} {KEYS[1]}\n")
    os.chmod(p, 0o600)
    return str(p)


def cluster(daemon, redis, tmp_path, *extra):
    keys = keys_file(tmp_path)
    return [daemon("--redis", redis.url, "--signing-keys", keys, *extra) for _ in range(2)]


def test_a_compile_on_one_daemon_is_a_hit_on_the_other(daemon, redis, tmp_path):
    mport = free_port()
    a, b = cluster(daemon, redis, tmp_path, "--metrics-listen", "127.0.0.1:0")
    b.stop()
    b.start(extra=["--metrics-listen", f"127.0.0.1:{mport}"])
    req = compile_request(variant(load_graph("mlp_block"), "l2"))
    _, ra = run_compile(a.stub(), req)
    assert ra.served == compiled_pb2.SERVED_COMPILED
    _, rb = run_compile(b.stub(), req)
    assert rb.served == compiled_pb2.SERVED_L2_HIT
    assert (rb.artifact, rb.signature) == (ra.artifact, ra.signature)
    _, rb2 = run_compile(b.stub(), req)
    assert rb2.served == compiled_pb2.SERVED_L1_HIT
    sa, sb = a.stats(), b.stats()
    assert (sa.compiles, sa.l2_puts, sb.compiles, sb.l2_hits) == (1, 1, 0, 1)
    assert sa.redis_configured and sa.redis_up and sb.redis_up
    import test_metrics
    m = test_metrics.samples(test_metrics.scrape(mport)[2])
    assert m['compiled_cache_hits_total{tier="l2"}'] == 1
    assert m['compiled_cache_hits_total{tier="l1"}'] + \
        m['compiled_cache_hits_total{tier="memory"}'] == 1
    assert (m["compiled_redis_up"], m["compiled_compiles_total"]) == (1, 0)


def test_one_compile_for_the_cluster(daemon, redis, tmp_path):
    """16 concurrent identical requests to each of two daemons: exactly one
    compile in the cluster, 32 identical answers."""
    a, b = cluster(daemon, redis, tmp_path, "--debug-compile-delay-ms", "1500")
    req = compile_request(variant(load_graph("mlp_block"), "flight"))
    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        futs = [ex.submit(run_compile, d.stub(), req) for d in (a, b) for _ in range(16)]
        results = [f.result()[1] for f in futs]
    assert len({r.artifact_digest for r in results}) == 1
    assert all(r.artifact_digest for r in results)
    compiles = a.stats().compiles + b.stats().compiles
    waits = a.stats().lease_waits + b.stats().lease_waits
    assert (compiles, waits) == (1, 1), (compiles, waits)
    served = sorted(r.served for r in results)
    assert served.count(compiled_pb2.SERVED_COMPILED) == 1
    assert served.count(compiled_pb2.SERVED_L2_HIT) == 16  # the waiting daemon's


def test_a_dead_owners_lease_is_taken_over(daemon, redis, tmp_path):
    a, b = cluster(daemon, redis, tmp_path, "--debug-compile-delay-ms", "3000",
                   "--redis-lease-ms", "600")
    req = compile_request(variant(load_graph("mlp_block"), "takeover"))
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        ex.submit(lambda: list(a.stub().Compile(req, timeout=30)))
        deadline = time.time() + 10  # until a holds the lease
        while not redis.cli("--scan", "--pattern", "compiled:v2:lease:*").stdout.strip():
            assert time.time() < deadline
            time.sleep(0.02)
        futs = [ex.submit(run_compile, b.stub(), req) for _ in range(4)]
        time.sleep(0.3)
        a.proc.send_signal(signal.SIGKILL)  # mid-compile
        a.proc.wait()
        results = [f.result()[1] for f in futs]
    a.proc = None
    assert {r.served for r in results} <= {compiled_pb2.SERVED_COMPILED,
                                          compiled_pb2.SERVED_JOINED}
    s = b.stats()
    assert (s.compiles, s.lease_waits, s.lease_takeovers) == (1, 1, 1), s


def test_redis_down_and_back(daemon, redis, tmp_path):
    a, b = cluster(daemon, redis, tmp_path, "--redis-timeout-ms", "100")
    gm = load_graph("mlp_block")
    _, r = run_compile(a.stub(), compile_request(variant(gm, "before")))
    redis.stop()
    # every request is answered: compiled here, or from the local cache
    for i in range(3):
        _, r = run_compile(a.stub(), compile_request(variant(gm, f"down{i}")))
        assert r.served == compiled_pb2.SERVED_COMPILED
    _, r = run_compile(a.stub(), compile_request(variant(gm, "before")))
    assert r.served in (compiled_pb2.SERVED_L1_HIT,)
    sa = a.stats()
    assert not sa.redis_up and sa.redis_errors >= 1
    redis.start()
    time.sleep(5.5)  # past the longest back-off
    _, r = run_compile(a.stub(), compile_request(variant(gm, "after")))
    assert r.served == compiled_pb2.SERVED_COMPILED
    _, r = run_compile(b.stub(), compile_request(variant(gm, "after")))
    assert r.served == compiled_pb2.SERVED_L2_HIT
    assert a.stats().redis_up
    assert "shared cache" in a.log() and "failed" in a.log()


@pytest.mark.parametrize("poison", ["signature", "swapped", "unsigned", "size"])
def test_poisoned_redis_entry_is_rejected_and_replaced(daemon, redis, tmp_path, poison):
    a, b = cluster(daemon, redis, tmp_path)
    req = compile_request(variant(load_graph("mlp_block"), "poison-" + poison))
    _, ra = run_compile(a.stub(), req)
    key = "compiled:v2:a:" + ra.key
    if poison == "signature":
        redis.cli("HSET", key, "s", "x" * 32)
    elif poison == "unsigned":
        redis.cli("HDEL", key, "s", "k")
    elif poison == "size":  # the header's signature covers the size
        redis.cli("HSET", key, "n", str(len(ra.artifact) + 1))
    else:  # another graph's entry, signed and intact, under this key
        other = compile_request(variant(load_graph("mlp_block"), "other"))
        _, ro = run_compile(a.stub(), other)
        assert redis.cli("COPY", "compiled:v2:a:" + ro.key, key, "REPLACE").returncode == 0
    _, rb = run_compile(b.stub(), req)
    assert rb.served == compiled_pb2.SERVED_COMPILED  # never served from Redis
    assert rb.artifact_digest == ra.artifact_digest
    assert b.stats().signature_failures == 1
    assert "not served, deleted from Redis" in b.log()
    # replaced: a third daemon gets it from Redis
    c = daemon("--redis", redis.url, "--signing-keys", keys_file(tmp_path))
    _, rc = run_compile(c.stub(), req)
    assert rc.served == compiled_pb2.SERVED_L2_HIT


def test_read_tokens_get_shared_hits_but_never_compile(daemon, redis, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("read read-token-0123456789ab r\ncompile compile-token-0123456789 c\n")
    os.chmod(tokens, 0o600)
    read = (("authorization", "Bearer read-token-0123456789ab"),)
    comp = (("authorization", "Bearer compile-token-0123456789"),)
    a, b = cluster(daemon, redis, tmp_path, "--tokens", str(tokens),
                   "--debug-compile-delay-ms", "800")

    def compile_on(d, req, md):
        return list(d.stub().Compile(req, timeout=60, metadata=md))[-1].result

    gm = load_graph("mlp_block")
    # nowhere cached: refused
    with pytest.raises(grpc.RpcError) as e:
        compile_on(b, compile_request(variant(gm, "nowhere")), read)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "neither here nor in the shared tier" in e.value.details()
    # being compiled on a: b's read-only request waits for it
    req = compile_request(variant(gm, "shared"))
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        fa = ex.submit(compile_on, a, req, comp)
        deadline = time.time() + 30  # until a holds the lease
        while not redis.cli("--scan", "--pattern", "compiled:v2:lease:*").stdout.strip():
            assert time.time() < deadline
            time.sleep(0.02)
        rb = compile_on(b, req, read)
        ra = fa.result()
    assert ra.served == compiled_pb2.SERVED_COMPILED
    assert rb.served == compiled_pb2.SERVED_L2_HIT and rb.artifact == ra.artifact
    assert b.stub().Stats(compiled_pb2.StatsRequest(), timeout=10, metadata=read).compiles == 0


def test_deploy_cluster_demo_works_as_written():
    src = os.environ.get("COMPILED_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
    build = os.environ.get("COMPILED_BUILD", os.path.join(src, "build"))
    p = subprocess.run(["bash", os.path.join(src, "deploy", "cluster", "demo.sh")], cwd=src,
                       env=dict(os.environ, BUILD=build), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert any(" compiled " in ln for ln in lines)
    assert any(" hit-l2 " in ln for ln in lines), p.stdout
    assert "'l2_hits': 1" in p.stdout and "'redis_up': True" in p.stdout


def test_redis_over_tls(daemon, tmp_path):
    """rediss://: two daemons reach a TLS-only Redis and share it; one that
    does not trust Redis's certificate never uses it, and still answers."""
    if subprocess.run(["openssl", "version"], capture_output=True).returncode != 0:
        pytest.skip("no openssl command")

    def openssl(*args):
        subprocess.run(["openssl"] + list(args), cwd=tmp_path, check=True,
                       capture_output=True, timeout=60)
    for ca in ("ca", "other"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout",
                f"{ca}.key", "-out", f"{ca}.pem", "-subj", f"/CN={ca}")
    (tmp_path / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "redis.key", "-out", "redis.csr",
            "-subj", "/CN=redis")
    openssl("x509", "-req", "-in", "redis.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", "redis.pem", "-extfile", "san.ext")
    port = free_port()
    proc = subprocess.Popen(
        [REDIS, "--port", "0", "--tls-port", str(port), "--tls-cert-file", "redis.pem",
         "--tls-key-file", "redis.key", "--tls-ca-cert-file", "ca.pem", "--tls-auth-clients",
         "no", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.time() < deadline
                time.sleep(0.02)
        url = f"rediss://127.0.0.1:{port}/0"
        keys = keys_file(tmp_path)
        a, b = [daemon("--redis", url, "--redis-ca", str(tmp_path / "ca.pem"),
                       "--signing-keys", keys) for _ in range(2)]
        req = compile_request(variant(load_graph("mlp_block"), "rediss"))
        assert run_compile(a.stub(), req)[1].served == compiled_pb2.SERVED_COMPILED
        assert run_compile(b.stub(), req)[1].served == compiled_pb2.SERVED_L2_HIT
        assert a.stats().redis_up and b.stats().l2_hits == 1
        c = daemon("--redis", url, "--redis-ca", str(tmp_path / "other.pem"),
                   "--signing-keys", keys)
        assert run_compile(c.stub(), req)[1].served == compiled_pb2.SERVED_COMPILED
        s = c.stats()
        assert not s.redis_up and s.redis_errors >= 1 and s.l2_hits == 0
        assert "TLS handshake failed" in c.log()
    finally:
        proc.kill()
        proc.wait()


def zstd_bomb(size):
    """A zstd frame (RFC 8878) of `size` zero bytes, stated in its header,
    made of 4-byte RLE blocks of 128 KiB: 512 MiB in 16 KB."""
    block = 128 << 10
    assert size % block == 0
    out = struct.pack("<IBQ", 0xFD2FB528, 0xE0, size)  # magic; one segment, 8-byte size
    n = size // block
    for i in range(n):  # block header: last flag, type 1 (RLE), size; then the byte
        out += struct.pack("<I", (i == n - 1) | 1 << 1 | block << 3)[:3] + b"\0"
    return out


def peak_rss_kb(d):
    with open(f"/proc/{d.proc.pid}/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))


@pytest.mark.parametrize("mode", ["signed", "replayed-signature", "unsigned"])
def test_an_oversized_entry_is_refused_before_it_is_read(daemon, redis, tmp_path, mode):
    """A 16 KB entry claiming 512 MiB (a valid zstd frame of zeros) is
    refused before a byte of it is decompressed: for its signature (none,
    or one copied from a real entry: it covers the size), or without
    signing keys because its size does not fit the memory budget. The
    daemon's peak RSS stays near its own baseline; the request compiles."""
    if mode == "unsigned":
        extra = ["--redis-unsigned", "--memory-budget", "256M"]
        a, b = [daemon("--redis", redis.url, *extra) for _ in range(2)]
    else:
        a, b = cluster(daemon, redis, tmp_path)
    gm = load_graph("mlp_block")
    req = compile_request(variant(gm, "bomb-" + mode))
    _, ra = run_compile(a.stub(), req)
    key = "compiled:v2:a:" + ra.key
    # b's baseline: it has compiled (and read from Redis) once already
    run_compile(a.stub(), compile_request(variant(gm, "warm")))
    assert run_compile(b.stub(), compile_request(variant(gm, "warm")))[1].served == \
        compiled_pb2.SERVED_L2_HIT
    before = peak_rss_kb(b)
    bomb = zstd_bomb(512 << 20)
    assert len(bomb) < 17000
    if mode != "replayed-signature":  # else d, s, k and h stay the real entry's
        redis.cli("DEL", key)
        redis.cli("HSET", key, "d", "x" * 32, "u", "1")
    assert redis.cli("HSET", key, "n", str(512 << 20)).returncode == 0
    assert redis.cli("HSET", key, "z", stdin=bomb).returncode == 0
    _, rb = run_compile(b.stub(), req)
    after = peak_rss_kb(b)
    assert rb.served == compiled_pb2.SERVED_COMPILED
    assert rb.artifact_digest == ra.artifact_digest
    # 512 MiB decompressed would be about 25 times the baseline
    assert after < 2 * before, (before, after)
    want = {"signed": "no signature", "replayed-signature": "signature does not match",
            "unsigned": "more than an artifact may hold of the memory budget"}[mode]
    assert want in b.log() and "not served, deleted from Redis" in b.log(), b.log()[-3000:]
    assert b.stats().signature_failures == 1
    # replaced by b's compile: a's own copy is read from Redis again
    assert redis.cli("HGET", key, "n").stdout.strip() == str(len(ra.artifact)).encode()


@pytest.mark.parametrize("entry,lease", [("list", "hash"), ("string", "list")])
def test_keys_of_the_wrong_type_are_misses_and_the_tier_stays_up(daemon, redis, tmp_path,
                                                                 entry, lease):
    """An entry's key and its lease's key holding something else (set by
    hand): the request compiles, both keys are repaired (the entry stored
    again, the lease taken and released), and the tier stays up for the
    requests after it."""
    mport = free_port()
    a, b = cluster(daemon, redis, tmp_path)
    b.stop()
    b.start(extra=["--metrics-listen", f"127.0.0.1:{mport}"])
    gm = load_graph("mlp_block")
    req = compile_request(variant(gm, "type-" + entry))
    _, ra = run_compile(a.stub(), req)
    key, lkey = "compiled:v2:a:" + ra.key, "compiled:v2:lease:" + ra.key
    redis.cli("DEL", key)
    put = {"list": ("RPUSH", "x"), "hash": ("HSET", "f", "x"), "string": ("SET", "x")}
    redis.cli(put[entry][0], key, *put[entry][1:])
    redis.cli(put[lease][0], lkey, *put[lease][1:])
    _, rb = run_compile(b.stub(), req, timeout=30)
    assert rb.served == compiled_pb2.SERVED_COMPILED
    assert rb.artifact_digest == ra.artifact_digest
    assert redis.cli("TYPE", key).stdout.strip() == b"hash"  # stored again by b
    assert redis.cli("EXISTS", lkey).stdout.strip() == b"0"  # taken, then released
    s = b.stats()
    assert s.redis_up and s.redis_errors == 0, s
    import test_metrics
    m = test_metrics.samples(test_metrics.scrape(mport)[2])
    assert (m["compiled_redis_up"], m["compiled_redis_errors_total"]) == (1, 0)
    assert f"is a Redis {entry}, not an entry" in b.log()
    assert f"the lease on {ra.key} had a Redis {lease}" in b.log()
    # the tier is used by the requests after it
    later = compile_request(variant(gm, "type-later-" + entry))
    run_compile(a.stub(), later)
    assert run_compile(b.stub(), later)[1].served == compiled_pb2.SERVED_L2_HIT


@pytest.mark.parametrize("ttl", ["none", "huge"])
def test_a_lease_that_never_expires_is_not_honoured(daemon, redis, tmp_path, ttl):
    """Lease keys set by hand without a TTL, or with one far beyond the
    lease time, on two graphs, with two workers: both requests compile at
    once (the leases replaced), and so does a third graph behind them."""
    a, b = cluster(daemon, redis, tmp_path, "--workers", "2")
    gm = load_graph("mlp_block")
    reqs = [compile_request(variant(gm, f"lease-{ttl}-{i}")) for i in range(3)]
    keys = [run_compile(a.stub(), q)[1].key for q in reqs]
    for k in keys:
        redis.cli("DEL", "compiled:v2:a:" + k)
    for k in keys[:2]:
        redis.cli("SET", "compiled:v2:lease:" + k, "intruder",
                  *(["EX", "100000000"] if ttl == "huge" else []))
    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        futs = [ex.submit(run_compile, b.stub(), q, 30) for q in reqs]
        results = [f.result()[1] for f in futs]
    assert [r.served for r in results] == [compiled_pb2.SERVED_COMPILED] * 3
    s = b.stats()
    assert (s.compiles, s.lease_waits, s.lease_takeovers) == (3, 0, 2), s
    assert b.log().count("not honoured, replaced by this daemon's") == 2
    for k in keys:  # released after the compile
        assert redis.cli("EXISTS", "compiled:v2:lease:" + k).stdout.strip() == b"0"


def test_a_lease_wait_has_a_limit(daemon, redis, tmp_path):
    """A lease held (with an honoured TTL) by someone who never stores the
    entry: the request waits --redis-lease-wait-ms, then compiles here,
    long before the lease would expire."""
    lease_ms = 60000
    a, b = cluster(daemon, redis, tmp_path, "--redis-lease-ms", str(lease_ms),
                   "--redis-lease-wait-ms", "1000")
    req = compile_request(variant(load_graph("mlp_block"), "lease-wait"))
    _, ra = run_compile(a.stub(), req)
    redis.cli("DEL", "compiled:v2:a:" + ra.key)
    redis.cli("SET", "compiled:v2:lease:" + ra.key, "a-silent-owner", "PX", str(lease_ms))
    t0 = time.monotonic()
    _, rb = run_compile(b.stub(), req, timeout=lease_ms / 1000 / 2)
    waited = time.monotonic() - t0
    assert rb.served == compiled_pb2.SERVED_COMPILED
    assert waited < lease_ms / 1000 / 4, waited
    s = b.stats()
    assert (s.compiles, s.lease_waits, s.lease_takeovers) == (1, 1, 1), s
    assert "waited 1000 ms (--redis-lease-wait-ms)" in b.log()
    # not ours: left alone
    assert redis.cli("GET", "compiled:v2:lease:" + ra.key).stdout.strip() == b"a-silent-owner"


@pytest.mark.parametrize("args,message", [
    (["--redis", "redis://127.0.0.1:1/0"], "--redis without --signing-keys"),
    (["--redis-unsigned"], "--redis-unsigned needs --redis"),
    (["--redis", "redis://127.0.0.1:1/0", "--redis-unsigned", "--signing-keys", "KEYS"],
     "--redis-unsigned and --signing-keys contradict"),
])
def test_an_unsigned_shared_tier_must_be_asked_for(tmp_path, args, message):
    args = [str(keys_file(tmp_path)) if a == "KEYS" else a for a in args]
    p = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--cache-dir", str(tmp_path / "c")] +
                       args, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and message in p.stderr, (p.returncode, p.stderr)
    if "without" in message:  # names the fix
        assert "--signing-keys FILE" in p.stderr and "--redis-unsigned" in p.stderr


def test_redis_unsigned_starts_and_shares(daemon, redis):
    a, b = [daemon("--redis", redis.url, "--redis-unsigned") for _ in range(2)]
    req = compile_request(variant(load_graph("mlp_block"), "unsigned"))
    assert run_compile(a.stub(), req)[1].served == compiled_pb2.SERVED_COMPILED
    rb = run_compile(b.stub(), req)[1]
    assert rb.served == compiled_pb2.SERVED_L2_HIT and not rb.signature
    assert "UNSIGNED (--redis-unsigned)" in a.log()
