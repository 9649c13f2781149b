"""End-to-end tests of compilectl against the real compiled daemon.

Each test gets a fresh daemon (``compiled --listen 127.0.0.1:0``) with an
empty cache in a temporary directory, drives ``compilectl`` as a user would
and checks its output and exit codes; the daemon must then stop with exit
status 0 on SIGTERM. JSON output is parsed back into the protobuf messages
with Python's own json_format, so the C client's JSON and Python agree.

Environment (set by the Makefile): COMPILED_SRC (repo root), COMPILED_BUILD
(build dir with bin/compiled and bin/compilectl), PYTHONPATH=client/python.

Run: COMPILED_BUILD=$PWD/build COMPILED_SRC=$PWD PYTHONPATH=client/python \\
     /usr/bin/python3 -m pytest -q tests/python/test_compilectl.py
"""

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest
from google.protobuf import json_format

from compiled.v1 import artifact_pb2, compiled_pb2, health_pb2
from daemon_util import closed_address

SRC = os.environ.get(
    "COMPILED_SRC", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
)
BUILD = os.environ.get("COMPILED_BUILD", os.path.join(SRC, "build"))
DAEMON = os.path.join(BUILD, "bin", "compiled")
CTL = os.path.join(BUILD, "bin", "compilectl")
GRAPHS = os.path.join(SRC, "tests", "data", "graphs")
MLP = os.path.join(GRAPHS, "mlp.pb")
ATTENTION = os.path.join(GRAPHS, "attention.pb")
ADD_INPLACE_JSON = os.path.join(GRAPHS, "add_inplace.json")
# a torch.export archive (tests/fuzz/make_pt2_seeds.py)
PT2 = os.path.join(SRC, "tests", "data", "pt2", "mlp_dynamic.pt2")

# Exit codes (client/ctl/ctl.h).
OK, EGRAPH, EUSAGE, EUNREACHABLE, EIO, ESERVER, ENOTFOUND, EDENIED = range(8)

# Every command of compilectl; the graph commands are one.
COMMANDS = ("submit", "package", "explain", "lookup", "fetch", "ls", "evict", "stats",
            "health", "bench", "graph", "help", "version")
GRAPH_COMMANDS = ("validate", "hash", "fmt", "convert", "functionalize", "lower",
                  "schedule", "plan", "codegen", "program")

SUMMARY = re.compile(
    r"^(?P<key>[0-9a-f]{64})\s+(?P<served>hit|joined|compiled|hit-l2)\s+"
    r"(?P<size>.+?)\s+compile\s+(?P<compile>.+?)\s+total\s+(?P<total>.+?)\s+"
    r"(?P<file>\S+)$"
)

pytestmark = pytest.mark.skipif(
    not (os.access(DAEMON, os.X_OK) and os.access(CTL, os.X_OK)),
    reason="compiled or compilectl not built",
)


class Daemon:
    """A running daemon: its process, address and directory."""

    def __init__(self, tmp, *args):
        self.tmp = tmp
        port_file = tmp / "port"
        self.log = open(tmp / "daemon.log", "w")
        self.proc = subprocess.Popen(
            [DAEMON, "--listen", "127.0.0.1:0", "--port-file", str(port_file),
             "--cache-dir", str(tmp / "cache"), "--workers", "2", *args],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail("daemon did not start: " + self.log_text())
            time.sleep(0.02)
        self.addr = "127.0.0.1:" + port_file.read_text().strip()

    def log_text(self):
        self.log.flush()
        return (self.tmp / "daemon.log").read_text()

    def stop(self):
        """SIGTERM; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.log.close()

    def ctl(self, *args, timeout=60):
        return run_ctl("--server", self.addr, *args, timeout=timeout)


def run_ctl(*args, timeout=60):
    env = dict(os.environ)
    env.pop("COMPILED_SERVER", None)
    return subprocess.run([CTL, *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    status = d.stop()
    assert status == 0, "daemon exited %r on SIGTERM; log:\n%s" % (
        status, d.log_text())


def summary(out):
    """The summary lines of submit's output, parsed."""
    lines = [SUMMARY.match(line) for line in out.splitlines()]
    assert all(lines), out
    return lines


def submit_key(daemon, path=MLP):
    r = daemon.ctl("submit", path)
    assert r.returncode == OK, r.stderr
    return summary(r.stdout)[0]["key"]


def parse_json(text, message):
    return json_format.Parse(text, message)


# ---- submit ----


def test_submit_compiles_then_hits(daemon):
    first = daemon.ctl("submit", MLP)
    assert first.returncode == OK, first.stderr
    (line,) = summary(first.stdout)
    assert line["served"] == "compiled"
    assert line["file"] == MLP

    second = daemon.ctl("submit", MLP, ATTENTION)
    assert second.returncode == OK, second.stderr
    hit, attn = summary(second.stdout)
    assert hit["served"] == "hit" and hit["key"] == line["key"]
    assert attn["served"] == "compiled" and attn["key"] != line["key"]


def test_submit_json_events(daemon):
    r = daemon.ctl("submit", "--json", MLP)
    assert r.returncode == OK, r.stderr
    events = [parse_json(line, compiled_pb2.CompileEvent())
              for line in r.stdout.splitlines()]
    assert events[-1].WhichOneof("event") == "result"
    assert all(e.WhichOneof("event") != "result" for e in events[:-1])
    result = events[-1].result
    assert result.served == compiled_pb2.SERVED_COMPILED
    assert len(result.key) == 64 and result.artifact_size > 0
    assert any(e.WhichOneof("event") == "stage" for e in events)

    again = daemon.ctl("submit", "--json", MLP)
    last = json.loads(again.stdout.splitlines()[-1])
    assert last["result"]["served"] == "SERVED_L1_HIT"

    forced = daemon.ctl("submit", "--json", "--force", MLP)
    last = json.loads(forced.stdout.splitlines()[-1])
    assert last["result"]["served"] == "SERVED_COMPILED"


def test_submit_writes_artifact(daemon, tmp_path):
    inline = tmp_path / "inline.bin"
    r = daemon.ctl("submit", "-o", str(inline), MLP)
    assert r.returncode == OK, r.stderr
    key = summary(r.stdout)[0]["key"]
    art = artifact_pb2.Artifact()
    art.ParseFromString(inline.read_bytes())
    assert art.key == key
    assert len(art.program.instructions) > 0

    # Too big to come inline: submit fetches it.
    fetched = tmp_path / "fetched.bin"
    r = daemon.ctl("submit", "--max-inline", "1", "-o", str(fetched), MLP)
    assert r.returncode == OK, r.stderr
    assert fetched.read_bytes() == inline.read_bytes()

    # -o takes one file only.
    r = daemon.ctl("submit", "-o", str(fetched), MLP, ATTENTION)
    assert r.returncode == EUSAGE


# ---- lookup, fetch, ls, stats ----


def test_lookup_and_fetch(daemon, tmp_path):
    key = submit_key(daemon)
    r = daemon.ctl("lookup", key)
    assert r.returncode == OK, r.stderr
    assert key in r.stdout and "digest" in r.stdout

    r = daemon.ctl("lookup", "--json", key[:8])  # a unique prefix
    assert r.returncode == OK, r.stderr
    resp = parse_json(r.stdout, compiled_pb2.LookupResponse())
    assert resp.found and resp.entry.key == key and resp.entry.size > 0

    out = tmp_path / "a.bin"
    r = daemon.ctl("fetch", key, "-o", str(out))
    assert r.returncode == OK, r.stderr
    data = out.read_bytes()
    assert len(data) == resp.entry.size
    assert hashlib.sha256(data).hexdigest() == resp.entry.digest
    artifact_pb2.Artifact().ParseFromString(data)

    missing = "0" * 64
    assert daemon.ctl("lookup", missing).returncode == ENOTFOUND
    assert daemon.ctl("fetch", missing, "-o", str(out)).returncode == ENOTFOUND
    assert daemon.ctl("lookup", "not-a-key").returncode == EUSAGE
    assert daemon.ctl("fetch", key).returncode == EUSAGE  # no -o


def test_ls_and_stats(daemon):
    key = submit_key(daemon)
    submit_key(daemon)  # a hit
    r = daemon.ctl("ls")
    assert r.returncode == OK, r.stderr
    header, *rows = r.stdout.splitlines()
    assert header.split()[:4] == ["KEY", "SIZE", "STORED", "HITS"]
    assert len(rows) == 1 and rows[0].startswith(key[:16])

    r = daemon.ctl("ls", "--json", "--limit", "5")
    listed = parse_json(r.stdout, compiled_pb2.ListResponse())
    assert [e.key for e in listed.entries] == [key]

    r = daemon.ctl("stats", "--json")
    assert r.returncode == OK, r.stderr
    stats = parse_json(r.stdout, compiled_pb2.StatsResponse())
    assert stats.compiles == 1 and stats.hits >= 1 and stats.entries == 1
    assert stats.version

    r = daemon.ctl("stats")
    assert r.returncode == OK, r.stderr
    for label in ("requests", "hits", "misses", "compiles", "entries",
                  "uptime", "version"):
        assert re.search(r"^%s\s" % label, r.stdout, re.M), r.stdout
    assert daemon.ctl("ls", "--limit", "0").returncode == EUSAGE


def test_json_output_has_every_field(daemon):
    """Scripts read keys without guarding: counters that are zero are there
    too (proto3's JSON mapping would leave them out)."""
    stats = json.loads(daemon.ctl("stats", "--json").stdout)
    every = [f.name for f in compiled_pb2.StatsResponse.DESCRIPTOR.fields
             if f.message_type is None and f.containing_oneof is None]
    missing = [name for name in every if name not in stats]
    assert not missing, missing
    assert stats["hits"] == 0 and stats["requests"] == 0
    key = submit_key(daemon)
    entry = json.loads(daemon.ctl("ls", "--json").stdout)["entries"][0]
    assert entry["key"] == key and entry["hits"] == 0
    looked = json.loads(daemon.ctl("lookup", "--json", key).stdout)
    assert looked["entry"]["hits"] == 0


def test_memory_tier_hits_are_recorded_in_the_store(daemon):
    """Hits answered from the daemon's memory tier (every hit after a
    compile) count in the store: ls shows them, and they renew the entry's
    last use, so evict --older-than spares an entry hit a moment ago."""
    key = submit_key(daemon)  # compiled; the response goes to the memory tier
    time.sleep(2.5)
    r = daemon.ctl("submit", *[MLP] * 40)
    assert r.returncode == OK, r.stderr
    assert [m["served"] for m in summary(r.stdout)] == ["hit"] * 40
    stats = parse_json(daemon.ctl("stats", "--json").stdout, compiled_pb2.StatsResponse())
    assert stats.hot_hits >= 40, "the hits were not served from the memory tier"

    listed = parse_json(daemon.ctl("ls", "--json").stdout, compiled_pb2.ListResponse())
    [entry] = listed.entries
    assert entry.key == key and entry.hits == 40
    assert entry.last_used >= entry.created + 2

    r = daemon.ctl("evict", "--older-than", "2s")
    assert r.returncode == OK and r.stdout.startswith("evicted 0 entries"), r.stdout
    assert daemon.ctl("lookup", key).returncode == OK


# ---- explain, evict ----


def test_explain(daemon):
    r = daemon.ctl("explain", MLP)
    assert r.returncode == OK, r.stderr
    assert r.stdout.startswith("miss: no cached entry")

    key = submit_key(daemon)
    r = daemon.ctl("explain", MLP)
    assert r.returncode == OK and r.stdout.startswith("hit")
    assert "key      " + key in r.stdout

    r = daemon.ctl("explain", "--opt-level", "1", MLP)
    assert r.returncode == OK, r.stderr
    assert r.stdout.startswith("miss")
    assert re.search(r"^nearest\s+" + key, r.stdout, re.M)
    assert re.search(r"^differs\s+options$", r.stdout, re.M), r.stdout

    r = daemon.ctl("explain", "--json", "--training", MLP)
    resp = parse_json(r.stdout, compiled_pb2.ExplainResponse())
    assert not resp.cached and resp.nearest.key == key
    assert list(resp.differing) == ["options"]


def test_explain_itemizes_a_changed_input_size(daemon, tmp_path):
    import explorer_util as xu
    small, big = tmp_path / "batch2.pb", tmp_path / "batch4.pb"
    small.write_bytes(xu.captured(2).SerializeToString())
    big.write_bytes(xu.captured(4).SerializeToString())
    key = submit_key(daemon, str(small))
    r = daemon.ctl("explain", str(big))
    assert r.returncode == OK, r.stderr
    assert r.stdout.startswith("miss: same operators as cached " + key[:16]), r.stdout
    assert re.search(r"^nearest\s+" + key, r.stdout, re.M), r.stdout
    assert re.search(r"^\s+input 2 \(x\): dimension 0 is 4, the cached program's is 2$",
                     r.stdout, re.M), r.stdout


def test_evict(daemon):
    key = submit_key(daemon)
    submit_key(daemon, ATTENTION)
    r = daemon.ctl("evict", key[:10])
    assert r.returncode == OK, r.stderr
    assert r.stdout.startswith("evicted 1 entry,")
    assert daemon.ctl("lookup", key).returncode == ENOTFOUND
    assert daemon.ctl("evict", key).returncode == ENOTFOUND

    r = daemon.ctl("evict", "--older-than", "1h")
    assert r.returncode == OK and r.stdout.startswith("evicted 0 entries")
    r = daemon.ctl("evict", "--all")
    assert r.returncode == OK and r.stdout.startswith("evicted 1 entry,")
    assert daemon.ctl("ls").stdout.splitlines()[1:] == []

    assert daemon.ctl("evict").returncode == EUSAGE
    assert daemon.ctl("evict", "--all", key).returncode == EUSAGE
    assert daemon.ctl("evict", "--older-than", "3 weeks").returncode == EUSAGE


# ---- errors and exit codes ----


def test_invalid_graph(daemon, tmp_path):
    graph = json.load(open(ADD_INPLACE_JSON))
    graph["graph"]["nodes"][1]["target"] = "aten::frobnicate.Tensor"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(graph))
    r = daemon.ctl("submit", str(bad))
    assert r.returncode == EGRAPH
    assert r.stderr.startswith("compilectl: ")
    assert "node 1" in r.stderr and "aten::frobnicate.Tensor" in r.stderr

    graph = json.load(open(ADD_INPLACE_JSON))
    graph["graph"]["nodes"][1]["inputs"][1]["name"] = "othr"
    bad.write_text(json.dumps(graph))
    r = daemon.ctl("submit", "--json", str(bad))
    assert r.returncode == EGRAPH
    assert "node 1" in r.stderr and "'othr'" in r.stderr
    assert daemon.ctl("explain", str(bad)).returncode == EGRAPH

    # A good file after a bad one is still submitted; the exit code is the
    # first failure's.
    r = daemon.ctl("submit", str(bad), MLP)
    assert r.returncode == EGRAPH and summary(r.stdout)[0]["served"] == "compiled"


def test_usage_and_local_errors(daemon, tmp_path):
    assert run_ctl().returncode == EUSAGE
    assert run_ctl("frobnicate").returncode == EUSAGE
    assert daemon.ctl("submit").returncode == EUSAGE
    assert daemon.ctl("submit", "--opt-level", "9", MLP).returncode == EUSAGE
    assert daemon.ctl("stats", "--timeout", "-1").returncode == EUSAGE
    assert daemon.ctl("stats", "--bogus").returncode == EUSAGE
    r = daemon.ctl("submit", str(tmp_path / "missing.pb"))
    assert r.returncode == EIO and "missing.pb" in r.stderr
    r = daemon.ctl("submit", "-o", str(tmp_path / "no" / "dir.bin"), MLP)
    assert r.returncode == EIO

    r = run_ctl("help")
    assert r.returncode == OK
    for cmd in ("submit", "lookup", "fetch", "stats", "ls", "evict", "health",
                "explain", "bench"):
        assert cmd in r.stdout
        h = run_ctl(cmd, "--help")
        assert h.returncode == OK and h.stdout.startswith("usage:"), cmd
        assert "--timeout" in h.stdout, cmd
    for cmd in ("validate", "hash", "fmt", "convert", "functionalize", "lower",
                "schedule", "plan", "codegen", "program"):
        assert cmd in r.stdout.split("help [COMMAND]")[0], cmd  # the local commands


def test_global_options_go_before_or_after_the_command(daemon, tmp_path):
    """--server, --timeout, --token, --ca, --cert, --key work on either side
    of the command, for every command, and an option's value is not taken
    for an option."""
    addr = daemon.addr
    r = run_ctl("--timeout", "5", "stats", "--server", addr)
    assert r.returncode == OK, r.stderr
    r = run_ctl("submit", MLP, "--server=" + addr, "--timeout", "30")
    assert r.returncode == OK, r.stderr
    key = summary(r.stdout)[0]["key"]
    out = tmp_path / "a.bin"
    for args in (["explain", MLP], ["lookup", key], ["fetch", key, "-o", str(out)],
                 ["ls"], ["health"], ["evict", "--older-than", "7d"],
                 ["bench", "--clients", "1", "--duration", "0.1", "--warmup", "0", MLP],
                 ["graph", "validate", MLP], ["graph", "hash", MLP, "--cc", "cc"],
                 ["graph", "fmt", MLP], ["help", "graph"], ["version"]):
        r = run_ctl(*args, "--server", addr, "--timeout", "30")
        assert r.returncode == OK, (args, r.stderr)
    # between "graph" and its command too
    r = run_ctl("graph", "--server", addr, "validate", MLP)
    assert r.returncode == OK, r.stderr
    # the last --timeout wins: 1 ms in front would fail
    r = run_ctl("--server", addr, "--timeout", "0.001", "submit", MLP, "--timeout", "30")
    assert r.returncode == OK, r.stderr
    # a value that looks like an option is a value (a client named "--server")
    r = run_ctl("submit", "--client", "--server", MLP, "--server", addr)
    assert r.returncode == OK, r.stderr
    # bad values are usage errors on either side
    for args in (["--timeout", "-1", "stats"], ["stats", "--timeout", "-1"],
                 ["stats", "--server", ""], ["--server", "", "stats"]):
        r = run_ctl(*args)
        assert r.returncode == EUSAGE, (args, r.stderr)
        assert "--timeout" in r.stderr or "--server" in r.stderr
    # the TLS options after the command are used: an unreadable CA
    r = run_ctl("stats", "--server", addr, "--ca", str(tmp_path / "none.pem"))
    assert r.returncode == EIO and "none.pem" in r.stderr, r.stderr


def test_every_help_exits_0():
    r = run_ctl("help", "--help")
    assert r.returncode == OK and r.stdout.startswith("usage: compilectl help"), r
    for args in (["help"], ["--help"], ["-h"]):
        r = run_ctl(*args)
        assert r.returncode == OK and "global options" in r.stdout, args
    for cmd in COMMANDS:
        for args in ([cmd, "--help"], [cmd, "-h"], ["help", cmd]):
            r = run_ctl(*args)
            assert r.returncode == OK, (args, r.stderr)
            assert r.stdout.startswith("usage: compilectl " + cmd), (args, r.stdout)
            assert "Exit codes:" in r.stdout, args
    for cmd in GRAPH_COMMANDS:
        r = run_ctl("graph", cmd, "--help")
        assert r.returncode == OK and r.stdout.startswith("usage: compilectl graph"), cmd


def documented_exit_codes(cmd):
    """The codes the "Exit codes:" lines of `compilectl CMD --help` list."""
    text = run_ctl(cmd, "--help").stdout
    m = re.search(r"^Exit codes:(.*?)\.$", text, re.M | re.S)
    assert m, text
    items = [item.strip() for item in m.group(1).split(",")]
    assert all(re.match(r"\d [a-z]", item) for item in items), items
    return {int(item[0]) for item in items}


class EmptyServer:
    """A gRPC server without any service: every call is UNIMPLEMENTED."""

    def __enter__(self):
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.addr = "127.0.0.1:%d" % self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        return self.addr

    def __exit__(self, *exc):
        self.server.stop(0)


def test_each_command_returns_the_exit_codes_its_help_lists(daemon, tmp_path):
    """For every command, each code its help lists comes out of a real
    situation below, and no situation gives a code the help does not list:
    a code documented but impossible has no situation and fails the test."""
    if grpc is None:
        pytest.skip("grpcio not installed")
    tokens = tmp_path / "tokens"
    tokens.write_text("admin admin-token-0123456789ab ops\n")
    tokens.chmod(0o600)
    (tmp_path / "t").mkdir()
    guarded = Daemon(tmp_path / "t", "--tokens", str(tokens))
    key = submit_key(daemon)
    bad = tmp_path / "bad.json"  # parses, but the daemon refuses it
    graph = json.load(open(ADD_INPLACE_JSON))
    graph["graph"]["nodes"][1]["target"] = "aten::frobnicate.Tensor"
    bad.write_text(json.dumps(graph))
    missing, out, none = str(tmp_path / "missing.pb"), str(tmp_path / "o.bin"), "0" * 64
    notpt2 = tmp_path / "bad.pt2"  # starts like a zip archive, is none
    notpt2.write_bytes(b"PK\3\4" + bytes(60))
    bench = ["bench", "--clients", "1", "--duration", "0.1", "--warmup", "0"]
    nossl = ["--ca", str(tmp_path / "none.pem")]
    # who answers: the daemon, the daemon with --tokens (no token given), a
    # gRPC server without services, nobody; None: no server option
    A, T, E, X = "daemon", "tokens", "empty", "closed"
    cases = {
        "submit": {OK: (A, ["submit", MLP]), EGRAPH: (A, ["submit", str(bad)]),
                   EUSAGE: (None, ["submit", "--bogus"]), EUNREACHABLE: (X, ["submit", MLP]),
                   EIO: (A, ["submit", missing]), ESERVER: (E, ["submit", MLP]),
                   EDENIED: (T, ["submit", MLP])},
        "package": {OK: (A, ["package", PT2, "-o", out]),
                    EGRAPH: (None, ["package", str(notpt2), "-o", out]),
                    EUSAGE: (None, ["package", PT2]),
                    EUNREACHABLE: (X, ["package", PT2, "-o", out]),
                    EIO: (None, ["package", missing, "-o", out]),
                    ESERVER: (E, ["package", PT2, "-o", out]),
                    EDENIED: (T, ["package", PT2, "-o", out])},
        "explain": {OK: (A, ["explain", MLP]), EGRAPH: (A, ["explain", str(bad)]),
                    EUSAGE: (None, ["explain"]), EUNREACHABLE: (X, ["explain", MLP]),
                    EIO: (A, ["explain", missing]), ESERVER: (E, ["explain", MLP]),
                    EDENIED: (T, ["explain", MLP])},
        "lookup": {OK: (A, ["lookup", key]), EUSAGE: (None, ["lookup", "zz"]),
                   EUNREACHABLE: (X, ["lookup", none]), EIO: (A, nossl + ["lookup", none]),
                   ESERVER: (E, ["lookup", none]), ENOTFOUND: (A, ["lookup", none]),
                   EDENIED: (T, ["lookup", none])},
        "fetch": {OK: (A, ["fetch", key, "-o", out]), EUSAGE: (None, ["fetch", none]),
                  EUNREACHABLE: (X, ["fetch", none, "-o", out]),
                  EIO: (A, ["fetch", key, "-o", str(tmp_path / "no" / "dir")]),
                  ESERVER: (E, ["fetch", none, "-o", out]),
                  ENOTFOUND: (A, ["fetch", none, "-o", out]),
                  EDENIED: (T, ["fetch", none, "-o", out])},
        "ls": {OK: (A, ["ls"]), EUSAGE: (None, ["ls", "--limit", "0"]),
               EUNREACHABLE: (X, ["ls"]), EIO: (A, nossl + ["ls"]), ESERVER: (E, ["ls"]),
               EDENIED: (T, ["ls"])},
        "evict": {OK: (A, ["evict", "--older-than", "7d"]), EUSAGE: (None, ["evict"]),
                  EUNREACHABLE: (X, ["evict", "--all"]), EIO: (A, nossl + ["evict", "--all"]),
                  ESERVER: (E, ["evict", "--all"]), ENOTFOUND: (A, ["evict", none]),
                  EDENIED: (T, ["evict", "--all"])},
        "stats": {OK: (A, ["stats"]), EUSAGE: (None, ["stats", "extra"]),
                  EUNREACHABLE: (X, ["stats"]), EIO: (A, nossl + ["stats"]),
                  ESERVER: (E, ["stats"]), EDENIED: (T, ["stats"])},
        "health": {OK: (A, ["health"]), EUSAGE: (None, ["health", "extra"]),
                   EUNREACHABLE: (X, ["health"]), EIO: (A, nossl + ["health"]),
                   ESERVER: (E, ["health"])},
        "bench": {OK: (A, bench + [MLP]), EGRAPH: (A, bench + [str(bad)]),
                  EUSAGE: (None, ["bench", "--miss-ratio", "2", MLP]),
                  EUNREACHABLE: (X, bench + [MLP]), EIO: (A, bench + [missing]),
                  ESERVER: (E, bench + [MLP]), EDENIED: (T, bench + [MLP])},
        "graph": {OK: (None, ["graph", "validate", MLP]),
                  EGRAPH: (None, ["graph", "validate", str(bad)]),
                  EUSAGE: (None, ["graph", "bogus"]), EIO: (None, ["graph", "fmt", missing])},
        "help": {OK: (None, ["help"]), EUSAGE: (None, ["help", "bogus"])},
        "version": {OK: (None, ["version"]), EUSAGE: (None, ["version", "extra"])},
    }
    assert set(cases) == set(COMMANDS)
    try:
        with EmptyServer() as empty:
            addrs = {A: daemon.addr, T: guarded.addr, E: empty, X: closed_address()}
            for cmd, by_code in cases.items():
                assert set(by_code) == documented_exit_codes(cmd), cmd
                for code, (who, args) in by_code.items():
                    server = ["--server", addrs[who]] if who else []
                    r = run_ctl(*server, *args, "--timeout", "20")
                    assert r.returncode == code, (cmd, code, args, r.stderr)
                    assert "internal error" not in r.stderr, r.stderr
    finally:
        guarded.stop()


def test_no_answer_is_unreachable():
    """A server that accepts connections but never speaks HTTP/2."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        addr = "127.0.0.1:%d" % s.getsockname()[1]
        r = run_ctl("--server", addr, "stats", "--timeout", "0.5")
        assert r.returncode == EUNREACHABLE, r.stderr
        assert "no answer" in r.stderr
        # --timeout in front of the command holds too
        r = run_ctl("--timeout", "0.5", "--server", addr, "stats", timeout=20)
        assert r.returncode == EUNREACHABLE and "no answer" in r.stderr, r.stderr


def test_unreachable_server():
    addr = closed_address()
    for args in (["stats"], ["health"], ["submit", MLP], ["ls"],
                 ["lookup", "0" * 64]):
        r = run_ctl("--server", addr, *args, "--timeout", "5")
        assert r.returncode == EUNREACHABLE, (args, r.stderr)
        assert "cannot reach the server" in r.stderr
        assert "TLS" not in r.stderr  # nothing listens: no hint about TLS
    env = dict(os.environ, COMPILED_SERVER=addr)
    r = subprocess.run([CTL, "stats"], capture_output=True, text=True, env=env,
                       timeout=30)
    assert r.returncode == EUNREACHABLE and addr in r.stderr


def test_health(daemon):
    r = daemon.ctl("health")
    assert (r.returncode, r.stdout) == (OK, "SERVING\n")
    r = daemon.ctl("health", "--json")
    resp = parse_json(r.stdout, health_pb2.HealthCheckResponse())
    assert resp.status == health_pb2.HealthCheckResponse.SERVING
    r = daemon.ctl("health", "--service", "compiled.v1.Compiler")
    assert r.returncode == OK
    r = daemon.ctl("health", "--service", "no.such.Service")
    assert (r.returncode, r.stdout) == (ESERVER, "SERVICE_UNKNOWN\n")


def test_concurrent_submits_compile_once(daemon):
    """Single flight: of simultaneous submits of one new graph, exactly one
    compiles; the others join it (or hit, if they come late)."""
    procs = [subprocess.Popen([CTL, "--server", daemon.addr, "submit", ATTENTION],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(4)]
    served = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == OK, err
        served += [m["served"] for m in summary(out)]
    assert sorted(served).count("compiled") == 1, served
    assert set(served) <= {"compiled", "joined", "hit"}
    stats = parse_json(daemon.ctl("stats", "--json").stdout,
                       compiled_pb2.StatsResponse())
    assert stats.compiles == 1


# ---- bench ----


def test_bench(daemon):
    r = daemon.ctl("bench", "--clients", "2", "--duration", "1", "--warmup",
                   "0.2", "--miss-ratio", "0.2", "--json", MLP)
    assert r.returncode == OK, r.stderr
    res = json.loads(r.stdout)
    out = res["outcomes"]
    assert out["all"]["count"] > 0
    assert out["all"]["count"] == sum(out[o]["count"] for o in
                                      ("hit", "compiled", "joined", "error"))
    assert out["hit"]["count"] > 0 and out["compiled"]["count"] > 0
    assert res["errors"] == {}
    assert out["all"]["p50_us"] <= out["all"]["p99_us"] <= out["all"]["max_us"]

    r = daemon.ctl("bench", "--clients", "1", "--duration", "0.3", "--warmup",
                   "0", MLP)
    assert r.returncode == OK, r.stderr
    assert re.search(r"^all\s+\d+", r.stdout, re.M), r.stdout
    assert daemon.ctl("bench", "--miss-ratio", "2", MLP).returncode == EUSAGE


# ---- a fake server: answers a real daemon does not give on demand ----

try:
    from concurrent import futures

    import grpc
    from compiled.v1 import compiled_pb2_grpc
except ImportError:  # pragma: no cover - grpcio is optional
    grpc = None


class FakeCompiler(compiled_pb2_grpc.CompilerServicer if grpc else object):
    """Misbehaves on purpose, one way per method."""

    def Fetch(self, request, context):
        # Bytes that do not match the digest announced.
        yield compiled_pb2.FetchChunk(offset=0, data=b"abc", total_size=6,
                                      digest="0" * 64)
        yield compiled_pb2.FetchChunk(offset=3, data=b"def", total_size=6)

    def Compile(self, request, context):
        yield compiled_pb2.CompileEvent(
            stage=compiled_pb2.Stage(name="emit"))
        if request.graph.producer == "slow":
            time.sleep(3)
            return
        error = compiled_pb2.GraphError(
            message="node 7 (%x = aten::foo): the C compiler failed",
            node=7, code="INTERNAL")
        context.set_trailing_metadata(
            (("compiled-error-bin", error.SerializeToString()),))
        context.abort(grpc.StatusCode.INTERNAL, "compile failed")

    def Stats(self, request, context):
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too busy")

    def List(self, request, context):
        return compiled_pb2.ListResponse(entries=[
            compiled_pb2.EntryInfo(key="abcd" + "0" * 60),
            compiled_pb2.EntryInfo(key="abcd" + "1" * 60)])


@pytest.fixture
def fake():
    if grpc is None:
        pytest.skip("grpcio not installed")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    compiled_pb2_grpc.add_CompilerServicer_to_server(FakeCompiler(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield "127.0.0.1:%d" % port
    server.stop(0)


def test_fake_digest_mismatch(fake, tmp_path):
    out = tmp_path / "a.bin"
    r = run_ctl("--server", fake, "fetch", "abcd" + "0" * 60, "-o", str(out))
    assert r.returncode == ESERVER and "digest mismatch" in r.stderr
    assert not out.exists()


def test_fake_compile_failure_and_errors(fake, tmp_path):
    r = run_ctl("--server", fake, "submit", MLP)
    assert r.returncode == EGRAPH
    assert "node 7 (%x = aten::foo): the C compiler failed" in r.stderr

    r = run_ctl("--server", fake, "stats")
    assert r.returncode == ESERVER
    assert "too busy (RESOURCE_EXHAUSTED)" in r.stderr

    # Ambiguous key prefix: a usage error naming the count.
    r = run_ctl("--server", fake, "lookup", "abcd")
    assert r.returncode == EUSAGE and "ambiguous" in r.stderr

    # A deadline after the server started answering is a server error.
    graph = json.load(open(ADD_INPLACE_JSON))
    graph["producer"] = "slow"
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(graph))
    r = run_ctl("--server", fake, "submit", "--timeout", "0.5", str(slow))
    assert r.returncode == ESERVER, r.stderr
    assert "no complete answer" in r.stderr


def test_lookup_shows_the_program_and_fetch_source_prints_c(daemon, tmp_path):
    key = submit_key(daemon, ATTENTION)
    r = daemon.ctl("lookup", key)
    assert r.returncode == OK, r.stderr
    m = re.search(r"^program\s+runs native \((.+?)\): (\d+) nodes: (\d+) native in (\d+) "
                  r"generated kernels, (\d+) extern, (\d+) fallback$", r.stdout, re.M)
    assert m, r.stdout
    nodes, native, kernels, ext, fb = map(int, m.groups()[1:])
    assert kernels >= 1 and native + ext + fb == nodes
    r = daemon.ctl("fetch", "--source", key)
    assert r.returncode == OK, r.stderr
    assert r.stdout.startswith("/* Generated by compiled") and "int gc_seg0(void **p)" in r.stdout
    out = tmp_path / "k.c"
    assert daemon.ctl("fetch", "--source", key, "-o", str(out)).returncode == OK
    assert out.read_text() == r.stdout


def test_graph_dumps_show_each_pass_of_the_back_half():
    g = os.path.join(GRAPHS, "mlp_block.pb")
    out = {p: run_ctl("graph", p, g) for p in ("lower", "schedule", "plan", "codegen", "program")}
    for p, r in out.items():
        assert r.returncode == 0, (p, r.stderr)
    lower = out["lower"].stdout
    assert "(welford)" in lower and "extern aten::addmm.out(" in lower
    assert lower.count("(pointwise)") == 3
    # layer norm's statistics and normalization become one kernel; the two
    # matrix products stay library calls between three generated kernels
    sched = out["schedule"].stdout
    assert re.findall(r"^(k\d+_\w+):", sched, re.M) == [
        "k0_native_layer_norm", "k1_addmm", "k2_gelu", "k3_addmm", "k4_add"]
    plan = out["plan"].stdout
    assert "memory plan" in plan and "memory plan" not in sched
    arena = int(re.search(r"arena (\d+) bytes", plan).group(1))
    # four float32 intermediates of 4x32 and 4x8: at most two are live at once
    assert 0 < arena < 4 * (4 * 32 + 4 * 8 + 4 * 32 + 4 * 8)
    c = out["codegen"].stdout
    assert c.count("int gc_seg") == 3 and "int gc_abi(void)" in c
    prog = out["program"].stdout
    assert re.findall(r"^\s*\d+: (segment \d+|call \S+?)[ (]", prog, re.M) == [
        "segment 0", "call aten::addmm.out", "segment 1", "call aten::addmm.out", "segment 2"]
    assert "output (allocated per call)" in prog
