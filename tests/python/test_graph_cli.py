"""Tests of the local graph tools, `compilectl graph validate|hash|fmt|convert`.

They run the built binary on the committed captured graphs and on copies
edited here with the Python protobuf classes, the way a user would:

- `hash` prints the same key for a graph and for a copy with every value
  renamed, independent nodes reordered, side tables shuffled and metadata
  changed, in .pb or .json; and a different key for a copy with one
  semantic edit;
- `validate` accepts every committed graph and refuses broken ones with the
  node and argument named and exit code 1;
- `convert` round-trips .pb -> .json -> .pb to the same message, and agrees
  with Python's own protobuf JSON reader;
- `fmt` prints each node's operator.

No daemon is needed. Run: COMPILED_BUILD=$PWD/build PYTHONPATH=client/python
/usr/bin/python3 -m pytest -q tests/python/test_graph_cli.py
"""

import glob
import json
import os
import random
import re
import subprocess

import pytest
from google.protobuf import json_format

from compiled.v1 import graph_pb2

SRC = os.environ.get(
    "COMPILED_SRC", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
)
BUILD = os.environ.get("COMPILED_BUILD", os.path.join(SRC, "build"))
CTL = os.path.join(BUILD, "bin", "compilectl")
GRAPHS = sorted(glob.glob(os.path.join(SRC, "tests", "data", "graphs", "*.pb")))
GRAPH_IDS = [os.path.basename(p)[:-3] for p in GRAPHS]
MLP = os.path.join(SRC, "tests", "data", "graphs", "mlp.pb")

OK, EGRAPH, EUSAGE, EUNREACHABLE, EIO = range(5)
KEY = re.compile(r"^[0-9a-f]{64}$")

pytestmark = pytest.mark.skipif(
    not os.access(CTL, os.X_OK), reason="compilectl not built"
)


def ctl(*args, check=None):
    r = subprocess.run([CTL, "graph", *args], capture_output=True, text=True,
                       timeout=60)
    if check is not None:
        assert r.returncode == check, (args, r.returncode, r.stdout, r.stderr)
    return r


def load(path):
    m = graph_pb2.GraphModule()
    with open(path, "rb") as f:
        m.ParseFromString(f.read())
    return m


def write(m, path):
    path = str(path)
    if path.endswith(".json"):
        with open(path, "w") as f:
            f.write(json_format.MessageToJson(m))
    else:
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
    return path


def key_of(path, *opts):
    out = ctl("hash", *opts, str(path), check=OK).stdout.strip()
    assert KEY.match(out), out
    return out


# ---- the edits -------------------------------------------------------------

def _tensor_args(arg):
    """Every TensorArgument inside an Argument."""
    kind = arg.WhichOneof("kind")
    if kind == "as_tensor":
        yield arg.as_tensor
    elif kind == "as_tensors":
        yield from arg.as_tensors.items
    elif kind == "as_optional_tensor":
        if arg.as_optional_tensor.WhichOneof("kind") == "as_tensor":
            yield arg.as_optional_tensor.as_tensor
    elif kind == "as_optional_tensors":
        for o in arg.as_optional_tensors.items:
            if o.WhichOneof("kind") == "as_tensor":
                yield o.as_tensor


def _all_args(g):
    for i in g.inputs:
        yield i.arg
    for n in g.nodes:
        for a in n.inputs:
            yield a.arg
        yield from n.outputs
    yield from g.outputs


def rename(m, rng):
    """Gives every tensor value a fresh random name, everywhere it appears."""
    g = m.graph
    names = [v.name for v in g.tensor_values]
    fresh = ["v%08x_%d" % (rng.getrandbits(32), i) for i in range(len(names))]
    rng.shuffle(fresh)
    new = dict(zip(names, fresh))
    for v in g.tensor_values:
        v.name = new[v.name]
    for arg in _all_args(g):
        for t in _tensor_args(arg):
            t.name = new[t.name]


def _is_barrier(schemas, node):
    """As tests/lib/graphmut.c: writers and random ops keep their place."""
    s = schemas.get(node.target)
    if s is None:
        return True
    return "!" in s or any(w in s for w in ("batch_norm", "rand", "dropout",
                                            "bernoulli", "normal", "uniform"))


def reorder(m, rng):
    """A random topological order of the nodes between barriers."""
    g = m.graph
    schemas = {op.name: op.schema for op in m.operators}
    producer = {}
    for i, n in enumerate(g.nodes):
        for a in n.outputs:
            for t in _tensor_args(a):
                producer[t.name] = i
    deps = []
    for i, n in enumerate(g.nodes):
        deps.append({producer[t.name] for a in n.inputs
                     for t in _tensor_args(a.arg) if t.name in producer})
    order, placed, seg, count = [], set(), 0, len(g.nodes)
    while seg < count:
        end = seg
        while end < count and not _is_barrier(schemas, g.nodes[end]):
            end += 1
        pending = set(range(seg, end))
        while pending:
            ready = sorted(i for i in pending if deps[i] <= placed)
            pick = rng.choice(ready)
            pending.discard(pick)
            placed.add(pick)
            order.append(pick)
        if end < count:
            placed.add(end)
            order.append(end)
        seg = end + 1
    nodes = [graph_pb2.Node() for _ in order]
    for dst, i in zip(nodes, order):
        dst.CopyFrom(g.nodes[i])
    del g.nodes[:]
    g.nodes.extend(nodes)
    return order


def remeta(m, rng):
    """Changes everything that is metadata: traces, producer, table order."""
    # (torch_version is not metadata: fallback ops run in the client's torch,
    # so it is part of the key's target component; see docs/graph-format.md)
    m.producer = "some other producer %d" % rng.getrandbits(16)
    for n in m.graph.nodes:
        n.metadata.stack_trace = "File \"elsewhere.py\", line %d" % rng.getrandbits(12)
    for field in (m.operators, m.graph.tensor_values):
        items = list(field)
        copies = [type(items[0])() for _ in items] if items else []
        for c, it in zip(copies, items):
            c.CopyFrom(it)
        rng.shuffle(copies)
        del field[:]
        field.extend(copies)


# ---- hash ------------------------------------------------------------------

MUST_MOVE = {"mlp", "attention", "resnet18", "transformer_encoder_layer",
             "conv_bn_relu"}


@pytest.mark.parametrize("path", GRAPHS, ids=GRAPH_IDS)
def test_hash_is_invariant_under_renaming_reordering_and_metadata(path, tmp_path):
    base = key_of(path)
    rng = random.Random(os.path.basename(path))
    moved = False
    for trial in range(3):
        m = load(path)
        rename(m, rng)
        order = reorder(m, rng)
        moved |= order != sorted(order)
        remeta(m, rng)
        ext = ".json" if trial % 2 else ".pb"
        copy = write(m, tmp_path / ("copy%d%s" % (trial, ext)))
        assert key_of(copy) == base, "copy %s of %s hashes differently" % (copy, path)
    if os.path.basename(path)[:-3] in MUST_MOVE:
        # these have independent nodes: the test really moved some
        assert moved


def _first_int_literal(m):
    for n in m.graph.nodes:
        for a in n.inputs:
            if a.arg.WhichOneof("kind") == "as_int":
                return n, a
    return None, None


@pytest.mark.parametrize("path", GRAPHS, ids=GRAPH_IDS)
def test_hash_changes_under_a_semantic_edit(path, tmp_path):
    base = key_of(path)
    # a size of the first input (same rank, still valid metadata)
    m = load(path)
    first = m.graph.inputs[0].arg.as_tensor.name
    for v in m.graph.tensor_values:
        if v.name == first and v.meta.sizes:
            v.meta.sizes[0].as_int += 1
    edited = [write(m, tmp_path / "size.pb")]
    # an int literal, if there is one
    m = load(path)
    node, arg = _first_int_literal(m)
    if arg is not None:
        arg.arg.as_int += 1
        edited.append(write(m, tmp_path / "literal.pb"))
    # a dtype of the first input
    m = load(path)
    for v in m.graph.tensor_values:
        if v.name == first:
            v.meta.dtype = (graph_pb2.SCALAR_TYPE_DOUBLE
                            if v.meta.dtype != graph_pb2.SCALAR_TYPE_DOUBLE
                            else graph_pb2.SCALAR_TYPE_FLOAT)
    edited.append(write(m, tmp_path / "dtype.pb"))
    # the client's torch version
    m = load(path)
    m.torch_version += ".post1"
    edited.append(write(m, tmp_path / "torch.pb"))
    # (the validator checks schemas and well-formedness, not shape
    # inference, so each edited copy is still a valid graph with a key)
    keys = [key_of(e) for e in edited]
    assert base not in keys
    assert len(set(keys)) == len(keys)


def test_hash_json_components_name_what_changed(tmp_path):
    path = os.path.join(SRC, "tests", "data", "graphs", "add_inplace.pb")
    base = json.loads(ctl("hash", "--json", path, check=OK).stdout)
    assert KEY.match(base["key"])
    assert set(base["components"]) == {
        "graph", "inputs", "options", "target", "compiler", "schema"}
    m = load(path)
    node, arg = _first_int_literal(m)
    arg.arg.as_int += 5
    lit = json.loads(ctl("hash", "--json", write(m, tmp_path / "lit.pb"),
                         check=OK).stdout)
    changed = {c for c in base["components"]
               if base["components"][c] != lit["components"][c]}
    assert changed == {"graph"}
    train = json.loads(ctl("hash", "--json", "--training", path, check=OK).stdout)
    changed = {c for c in base["components"]
               if base["components"][c] != train["components"][c]}
    assert changed == {"options"} and train["key"] != base["key"]
    isa = json.loads(ctl("hash", "--json", "--isa", "sse2", path, check=OK).stdout)
    assert isa["components"]["target"] != base["components"]["target"]


def test_hash_several_files_prints_key_and_name():
    out = ctl("hash", GRAPHS[0], GRAPHS[1], check=OK).stdout.splitlines()
    assert len(out) == 2
    for line, path in zip(out, GRAPHS[:2]):
        k, name = line.split(None, 1)
        assert KEY.match(k) and name == path
        assert k == key_of(path)


# ---- validate --------------------------------------------------------------

def test_validate_accepts_every_committed_graph():
    r = ctl("validate", *GRAPHS, check=OK)
    assert r.stdout.count(": ok (") == len(GRAPHS)


def test_validate_names_the_node_and_argument(tmp_path):
    path = os.path.join(SRC, "tests", "data", "graphs", "add_inplace.pb")
    m = load(path)
    m.graph.nodes[1].inputs[1].name = "othr"
    bad = write(m, tmp_path / "bad.pb")
    r = ctl("validate", path, bad, check=EGRAPH)
    assert path + ": ok" in r.stdout
    assert "node 1" in r.stderr and "aten::mul.Tensor" in r.stderr
    assert "othr" in r.stderr, r.stderr


def test_validate_refuses_dangling_value_and_unknown_op(tmp_path):
    path = os.path.join(SRC, "tests", "data", "graphs", "add_inplace.pb")
    m = load(path)
    m.graph.nodes[1].inputs[0].arg.as_tensor.name = "nowhere"
    r = ctl("validate", write(m, tmp_path / "dangling.pb"), check=EGRAPH)
    assert "nowhere" in r.stderr and "node 1" in r.stderr, r.stderr
    m = load(path)
    m.graph.nodes[0].target = "aten::frobnicate"
    r = ctl("validate", write(m, tmp_path / "unknown.pb"), check=EGRAPH)
    assert "aten::frobnicate" in r.stderr and "operator" in r.stderr, r.stderr


def test_validate_refuses_empty_and_dangling_symbolic_arguments(tmp_path):
    path = os.path.join(SRC, "tests", "data", "graphs", "add_inplace.pb")
    cases = []
    m = load(path)
    m.graph.nodes[1].inputs[1].arg.as_sym_int.SetInParent()
    cases.append((m, "SymInt has neither a name nor a value"))
    m = load(path)
    items = m.graph.nodes[1].inputs[1].arg.as_sym_ints.items
    items.add().as_int = 3
    items.add()
    cases.append((m, "list item 1 has neither a name nor a value"))
    m = load(path)
    m.graph.nodes[1].inputs[1].arg.as_sym_bool.as_name = "nope"
    cases.append((m, "refers to 'nope'"))
    for i, (m, text) in enumerate(cases):
        r = ctl("validate", write(m, tmp_path / ("sym%d.pb" % i)), check=EGRAPH)
        assert "node 1" in r.stderr and "argument 'other'" in r.stderr, r.stderr
        assert text in r.stderr, r.stderr


def test_validate_refuses_truncated_and_garbage_bytes(tmp_path):

    data = open(GRAPHS[0], "rb").read()
    (tmp_path / "cut.pb").write_bytes(data[: len(data) // 2])
    (tmp_path / "junk.pb").write_bytes(b"\xff" * 64)
    for name in ("cut.pb", "junk.pb"):
        r = ctl("validate", str(tmp_path / name))
        assert r.returncode == EGRAPH, (name, r.returncode, r.stderr)
        assert name in r.stderr and r.stderr.strip()


def test_validate_missing_file_is_an_io_error(tmp_path):
    r = ctl("validate", str(tmp_path / "absent.pb"))
    assert r.returncode == EIO and "absent.pb" in r.stderr


def test_usage_errors():
    assert ctl("validate").returncode == EUSAGE
    assert ctl("hash", "--opt-level", "9", GRAPHS[0]).returncode == EUSAGE
    assert ctl("frobnicate", GRAPHS[0]).returncode == EUSAGE


# ---- convert and fmt -------------------------------------------------------

@pytest.mark.parametrize("path", GRAPHS, ids=GRAPH_IDS)
def test_convert_round_trips_losslessly(path, tmp_path):
    js = tmp_path / "g.json"
    pb = tmp_path / "g.pb"
    ctl("convert", path, "-o", str(js), check=OK)
    ctl("convert", str(js), "-o", str(pb), check=OK)
    original = load(path)
    # the C client's JSON is what Python's protobuf reads
    from_json = json_format.Parse(js.read_text(), graph_pb2.GraphModule())
    assert from_json == original
    assert load(str(pb)) == original
    assert key_of(js) == key_of(path) == key_of(pb)


def test_convert_to_stdout_by_format():
    r = subprocess.run([CTL, "graph", "convert", "--to", "json", GRAPHS[0]],
                       capture_output=True, timeout=60)
    assert r.returncode == OK
    m = json_format.Parse(r.stdout.decode(), graph_pb2.GraphModule())
    assert m == load(GRAPHS[0])


def test_fmt_prints_every_node():
    path = os.path.join(SRC, "tests", "data", "graphs", "mlp.pb")
    out = ctl("fmt", path, check=OK).stdout
    m = load(path)
    for n in m.graph.nodes:
        assert n.target in out, n.target
    js = ctl("fmt", "--json", path, check=OK).stdout
    assert json_format.Parse(js, graph_pb2.GraphModule()) == m


def test_help_lists_every_graph_command_and_one_option_name():
    """`compilectl help` names every graph command; the option that returns
    mutated inputs has one name for submit and the local tools."""
    out = subprocess.run([CTL, "help"], capture_output=True, text=True).stdout
    for cmd in ("validate", "hash", "fmt", "functionalize", "convert"):
        assert cmd in out.split("local commands:")[1].split("commands that talk")[0], cmd
    graph_help = subprocess.run([CTL, "graph", "--help"], capture_output=True, text=True).stdout
    submit_help = subprocess.run([CTL, "submit", "--help"], capture_output=True, text=True).stdout
    assert "--return-input-mutations" in graph_help and "--return-input-mutations" in submit_help
    assert "keep-input-mutations" not in graph_help + submit_help
    plain = json.loads(subprocess.run([CTL, "graph", "hash", "--json", MLP], capture_output=True,
                                      text=True, check=True).stdout)
    ret = json.loads(subprocess.run([CTL, "graph", "hash", "--json", "--return-input-mutations", MLP],
                                    capture_output=True, text=True, check=True).stdout)
    assert ret["components"]["options"] != plain["components"]["options"]


def test_separate_temporaries_enters_the_key_and_the_plan(tmp_path):
    """--separate-temporaries (the option training programs are compiled
    with) changes only the options component of the key, and the native
    dumps plan large intermediates as temp buffers with it, in the arena
    without it, as the daemon would."""
    torch = pytest.importorskip("torch")
    import compiled
    path = str(tmp_path / "exp_mm.pb")
    compiled.export_graph(lambda x: torch.relu(x.exp() @ x.t()),
                         (torch.randn(128, 256),), path)  # exp(x): 128 KiB
    base = json.loads(ctl("hash", "--json", path, check=OK).stdout)
    sep = json.loads(ctl("hash", "--json", "--separate-temporaries", path, check=OK).stdout)
    changed = {c for c in base["components"] if base["components"][c] != sep["components"][c]}
    assert changed == {"options"} and sep["key"] != base["key"]
    plain = ctl("plan", path, check=OK).stdout
    temps = ctl("plan", "--separate-temporaries", path, check=OK).stdout
    assert "(temp)" not in plain and "(arena@0)" in plain, plain
    assert "(temp)" in temps and "(arena@" not in temps, temps


def test_eager_random_enters_the_key_and_keeps_the_aten_call(tmp_path):
    """--eager-random changes only the options component of the key; the
    generated C draws dropout's mask itself without it (Philox, seeded by an
    ATen randint call) and leaves bernoulli to ATen with it."""
    torch = pytest.importorskip("torch")
    import compiled
    path = str(tmp_path / "dropout.pb")
    compiled.export_graph(lambda x: torch.nn.functional.dropout(x, 0.2, training=True),
                          (torch.randn(16, 32),), path)
    base = json.loads(ctl("hash", "--json", path, check=OK).stdout)
    rng = json.loads(ctl("hash", "--json", "--eager-random", path, check=OK).stdout)
    changed = {c for c in base["components"] if base["components"][c] != rng["components"][c]}
    assert changed == {"options"} and rng["key"] != base["key"]
    native = ctl("codegen", path, check=OK).stdout
    assert "gc_rand_fill((uint64_t)" in native, native  # a block of draws at a time
    eager = ctl("program", "--eager-random", path, check=OK).stdout
    assert "aten::bernoulli.p" in eager and "randint" not in eager, eager
    assert "aten::randint.low_out" in ctl("program", path, check=OK).stdout
