"""Labels of cache entries (docs/protocol.md, "Labels"): what compiled.compile,
the torch.compile backend and compilectl send with a compile, what the
daemon stores, refuses and shows (compilectl ls, lookup, stats), that a
label never changes the key, and that a cache made before labels existed
still opens and serves its entries."""

import inspect
import json
import os
import re
import socket
import sqlite3
import subprocess

import grpc
import pytest
import torch

import compiled
import daemon_util
from compiled.labels import LABEL_FILE_MAX, LABEL_NAME_MAX, make_label
from compiled.v1 import compiled_pb2

CTL = os.path.join(daemon_util.BUILD, "bin", "compilectl")
MLP = os.path.join(daemon_util.GRAPHS, "mlp.pb")
HOST = socket.gethostname()
HERE = os.path.abspath(__file__)
EUSAGE = 2  # compilectl's exit code for a bad command line (client/ctl/ctl.h)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x)) * 2


def scale_and_shift(x):
    return torch.sin(x) * 3 + 1


NET_LINE = inspect.getsourcelines(Net.forward)[1]
FN_LINE = inspect.getsourcelines(scale_and_shift)[1]


def ctl(d, *args, token=None):
    env = dict(os.environ)
    env.pop("COMPILED_SERVER", None)
    env.pop("COMPILED_TOKEN", None)
    if token:
        env["COMPILED_TOKEN"] = token
    return subprocess.run([CTL, "--server", d.address, *args], capture_output=True,
                          text=True, timeout=60, env=env)


def listed(d):
    """The entries of `compilectl ls --json`, as dicts."""
    r = ctl(d, "ls", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["entries"]


def labels(d):
    """{label name: label dict} of every listed entry."""
    return {e["label"]["name"]: e["label"] for e in listed(d) if "label" in e}


def ls_rows(d):
    r = ctl(d, "ls")
    assert r.returncode == 0, r.stderr
    header, *rows = r.stdout.splitlines()
    assert header.split()[-1] == "LABEL", header
    return rows


def request(gm, label=None, **kw):
    req = compiled_pb2.CompileRequest(graph=gm, **kw)
    if label is not None:
        req.label.CopyFrom(label)
    return req


# Each test sees only its own graphs.
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def test_compiled_compile_labels_its_entries(daemon):
    d = daemon()
    x = torch.randn(3, 8)
    with torch.no_grad():
        compiled.compile(Net().eval(), (x,), server=d.address)(x)
        compiled.compile(scale_and_shift, (x,), server=d.address)(x)
    # a training signature: a forward and a backward graph, named apart
    net = Net().train()
    compiled.compile(net, (x,), server=d.address)(x).sum().backward()
    got = labels(d)
    assert set(got) == {"Net", "scale_and_shift", "Net (forward)", "Net (backward)"}, got
    assert got["Net"] == {"name": "Net", "file": HERE, "line": NET_LINE, "host": HOST}
    assert got["scale_and_shift"]["line"] == FN_LINE
    assert got["Net (backward)"]["file"] == HERE
    rows = ls_rows(d)
    base = os.path.basename(HERE)
    assert any(row.endswith(f"  Net at {base}:{NET_LINE} on {HOST}") for row in rows), rows
    assert any(row.endswith(f"  scale_and_shift at {base}:{FN_LINE} on {HOST}")
               for row in rows), rows
    # lookup prints the whole path
    key = next(e["key"] for e in listed(d) if e["label"]["name"] == "Net")
    r = ctl(d, "lookup", key)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^label\s+Net$", r.stdout, re.M), r.stdout
    assert re.search(rf"^source\s+{re.escape(HERE)}:{NET_LINE}$", r.stdout, re.M), r.stdout
    assert re.search(rf"^host\s+{re.escape(HOST)}$", r.stdout, re.M), r.stdout


def test_the_backend_labels_its_entries(daemon):
    d = daemon()
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.compile(Net().eval(), backend="compiled", options={"server": d.address})(x)
    torch._dynamo.reset()
    step = torch.compile(Net().train(), backend="compiled", options={"server": d.address})
    step(x).sum().backward()
    got = labels(d)
    assert set(got) == {"Net", "Net (forward)", "Net (backward)"}, got
    for label in got.values():
        assert (label["file"], label["line"], label["host"]) == (HERE, NET_LINE, HOST), label
    rows = ls_rows(d)
    base = os.path.basename(HERE)
    assert any(row.endswith(f"  Net (backward) at {base}:{NET_LINE} on {HOST}")
               for row in rows), rows


def test_the_backend_names_a_sequential_by_its_class(daemon):
    d = daemon()
    x = torch.randn(3, 8)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    with torch.no_grad():
        torch.compile(model, backend="compiled", options={"server": d.address})(x)
    got = labels(d)
    assert set(got) == {"Sequential"}, got   # not Dynamo's wrapper, not Sequential.__iter__
    assert got["Sequential"]["file"] == inspect.getsourcefile(torch.nn.Sequential)


def test_one_graph_with_two_labels_is_one_entry(daemon):
    """The label is not in the key: the second request is a hit on the
    first one's entry, which keeps the first label; a forced compile
    stores its own."""
    d = daemon()
    stub = d.stub()
    gm = daemon_util.load_graph("mlp")
    first = make_label("FirstModel", "/a/first.py", 10, "host-a")
    _, r1 = daemon_util.run_compile(stub, request(gm, first))
    _, r2 = daemon_util.run_compile(stub, request(gm, make_label("Second", "/b.py", 3, "b")))
    _, r3 = daemon_util.run_compile(stub, request(gm))  # none at all
    assert r1.served == compiled_pb2.SERVED_COMPILED
    assert r2.served == r3.served == compiled_pb2.SERVED_L1_HIT
    assert r1.key == r2.key == r3.key
    assert d.stats().entries == 1
    (entry,) = d.stub().List(compiled_pb2.ListRequest(), timeout=10).entries
    assert entry.label == first
    looked = stub.Lookup(compiled_pb2.LookupRequest(key=r1.key), timeout=10)
    assert looked.entry.label == first
    # compilectl graph hash computes the key without any label
    r = subprocess.run([CTL, "graph", "hash", MLP], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.split()[0] == r1.key, r.stdout
    # force: compiled again for this request, whose label the entry takes
    forced = make_label("Forced", "/c.py", 5, "c")
    _, r4 = daemon_util.run_compile(
        stub, request(gm, forced, options=compiled_pb2.CompileOptions(force=True)))
    assert r4.served == compiled_pb2.SERVED_COMPILED and r4.key == r1.key
    (entry,) = d.stub().List(compiled_pb2.ListRequest(), timeout=10).entries
    assert entry.label == forced


def refused(stub, gm, label):
    with pytest.raises(grpc.RpcError) as info:
        daemon_util.run_compile(stub, request(gm, label))
    e = info.value
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
    details = dict(e.trailing_metadata())["compiled-error-bin"]
    return compiled_pb2.GraphError.FromString(details), e.details()


def test_labels_over_the_limits_are_refused_naming_the_field(daemon):
    d = daemon()
    stub = d.stub()
    gm = daemon_util.load_graph("mlp")
    raw = compiled_pb2.Label
    cases = [
        (raw(name="n" * 257), "LIMIT", "label.name is longer than 256 bytes"),
        (raw(name="é" * 128 + "x"), "LIMIT", "label.name is longer than 256 bytes"),
        (raw(file="/" + "f" * 1024), "LIMIT", "label.file is longer than 1024 bytes"),
        (raw(host="h" * 256), "LIMIT", "label.host is longer than 255 bytes"),
        (raw(name="a\nb"), "INVAL", "label.name has a control character (byte 1 of 3)"),
        (raw(file="\x1b[2J"), "INVAL", "label.file has a control character (byte 0"),
        (raw(host="x\u009by"), "INVAL", "label.host has a control character (byte 1"),
        (raw(name="f", line=-1), "INVAL", "label.line is -1"),
    ]
    for label, code, text in cases:
        err, details = refused(stub, gm, label)
        assert err.code == code and text in err.message, (label, err)
        assert text in details
    s = d.stats()
    assert (s.entries, s.compiles) == (0, 0), s
    # at the limits exactly: taken
    edge = raw(name="é" * 128, file="/" + "f" * 1023, line=2 ** 31 - 1, host="h" * 255)
    _, r = daemon_util.run_compile(stub, request(gm, edge))
    assert r.served == compiled_pb2.SERVED_COMPILED
    (entry,) = stub.List(compiled_pb2.ListRequest(), timeout=10).entries
    assert entry.label == edge


def test_the_python_client_fits_any_label(daemon):
    """make_label cuts a long name at its end and a long path at its start,
    on a character boundary, and replaces control characters and what is
    not UTF-8: what it makes is never refused."""
    long_path = "/very/" + "déep/" * 400 + "model.py"
    label = make_label("Ünïcode" * 100 + "\x1b", long_path, 7, "h\nost")
    assert len(label.name.encode()) <= LABEL_NAME_MAX and label.name.endswith("...")
    assert len(label.file.encode()) <= LABEL_FILE_MAX
    assert label.file.startswith("...") and label.file.endswith("/déep/model.py")
    assert label.host == "h?ost"
    assert make_label(file="/x/\udcff.py").file == "/x/?.py"  # a surrogate-escaped byte
    assert make_label(line=-5).line == 0 and make_label(line=2 ** 40).line == 0
    d = daemon()
    client = compiled.Client(d.address)
    key, _ = client.compile(daemon_util.load_graph("mlp"), entry_label=label)
    (entry,) = d.stub().List(compiled_pb2.ListRequest(), timeout=10).entries
    assert entry.key == key and entry.label == label


def test_compilectl_submit_sends_a_label_and_stats_shows_it(daemon, tmp_path):
    d = daemon()
    r = ctl(d, "submit", "--label", "the MLP", MLP)
    assert r.returncode == 0, r.stderr
    (entry,) = listed(d)
    assert entry["label"] == {"name": "the MLP", "file": os.path.realpath(MLP), "line": 0,
                              "host": HOST}
    assert ls_rows(d)[0].endswith(f"  the MLP at mlp.pb on {HOST}")
    r = ctl(d, "stats")
    assert r.returncode == 0, r.stderr
    recent = r.stdout.split("recent entries (most recently used first):\n", 1)
    assert len(recent) == 2, r.stdout
    assert entry["key"][:16] in recent[1] and f"the MLP at mlp.pb on {HOST}" in recent[1]
    # explain names the nearest entry by its label too
    r = ctl(d, "explain", "--opt-level", "0", MLP)
    assert r.returncode == 0, r.stderr
    assert re.search(rf"^label\s+the MLP at mlp.pb on {re.escape(HOST)}$", r.stdout, re.M), \
        r.stdout
    # what the daemon would refuse is refused here first, saying why
    r = ctl(d, "submit", "--label", "x" * 257, MLP)
    assert r.returncode == EUSAGE and "at most 256" in r.stderr, r.stderr
    r = ctl(d, "submit", "--label", "a\x1b[2Jb", MLP)
    assert r.returncode == EUSAGE and "control character" in r.stderr, r.stderr
    # stats needs a read token, listing an admin one: the section is left out
    tokens = tmp_path / "tokens"
    tokens.write_text("read read-token-5c2e7a9d01 ops\nadmin admin-token-8b1f4c6e27 ops\n")
    tokens.chmod(0o600)
    guarded = daemon("--tokens", str(tokens))
    r = ctl(guarded, "stats", token="read-token-5c2e7a9d01")
    assert r.returncode == 0, r.stderr
    assert "recent entries: not shown (listing them needs an admin token)" in r.stdout
    r = ctl(guarded, "stats", token="admin-token-8b1f4c6e27")
    assert r.returncode == 0 and "not shown" not in r.stdout, r.stdout


def test_a_cache_from_before_labels_opens_and_serves(daemon, tmp_path):
    """A cache directory written before labels existed (schema version 2:
    no label columns) is migrated in place when the daemon opens it; its
    entries are served as they were, listed without a label."""
    cache = str(tmp_path / "cache")
    d = daemon(cache_dir=cache)
    gm = daemon_util.load_graph("mlp")
    _, before = daemon_util.run_compile(d.stub(), request(gm))
    d.stop()
    db = sqlite3.connect(os.path.join(cache, "cache.db"))
    db.executescript("DROP TABLE sources;"
                     "ALTER TABLE entries DROP COLUMN label_name;"
                     "ALTER TABLE entries DROP COLUMN label_file;"
                     "ALTER TABLE entries DROP COLUMN label_line;"
                     "ALTER TABLE entries DROP COLUMN label_host;"
                     "PRAGMA user_version = 2;")
    db.close()

    d = daemon(cache_dir=cache)
    _, after = daemon_util.run_compile(d.stub(), request(gm, make_label("Later")))
    assert after.served == compiled_pb2.SERVED_L1_HIT
    assert (after.key, after.artifact_digest) == (before.key, before.artifact_digest)
    (entry,) = listed(d)
    assert "label" not in entry, entry  # served, and still without one
    assert ls_rows(d)[0].endswith("  -")
    r = ctl(d, "lookup", before.key)
    assert r.returncode == 0 and re.search(r"^label\s+-$", r.stdout, re.M), r.stdout
    # new entries get theirs
    _, other = daemon_util.run_compile(
        d.stub(), request(daemon_util.variant(gm, "other"), make_label("New")))
    assert other.served == compiled_pb2.SERVED_COMPILED
    assert set(labels(d)) == {"New"}
    d.stop()
    db = sqlite3.connect(os.path.join(cache, "cache.db"))
    assert db.execute("PRAGMA user_version").fetchone() == (4,)
    db.close()
