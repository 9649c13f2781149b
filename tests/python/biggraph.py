"""Large valid graphs for limit, memory and head-of-line tests and benches.

chain(n) is a GraphModule of n `aten::relu` nodes in a chain, each output a
new named value with full tensor metadata: about 83 bytes of request per
node, the shape the issue's 720,000-node / 59.5 MB request had. mm(n) is a
chain of n matrix products by a second input (library calls, each result
a buffer of its own). wide(n) is
as broad as chain(n) is deep: n/2 `aten::mul.Scalar` nodes reading the
input (each by its own factor, so that no two are the same expression) and
a balanced tree of `aten::add.Tensor` nodes summing them, n - 1 nodes in
all, log2(n) deep. view_chain(n) is n views of views of an input written
in place. Building them with the protobuf API takes seconds, so the
serialized bytes are built from one serialized node and tensor value per
position (repeated fields may be concatenated) and cached per size in a
temporary directory.
"""

import os
import tempfile

import compiled  # noqa: F401  (makes compiled.v1 importable)
from compiled.client import field_bytes as _field
from compiled.v1 import compiled_pb2, graph_pb2

_CACHE = os.path.join(tempfile.gettempdir(), "compiled-biggraph-%d" % os.getuid())


def _meta(sizes=(4,)):
    m = graph_pb2.TensorMeta(dtype=graph_pb2.SCALAR_TYPE_FLOAT, layout=graph_pb2.LAYOUT_STRIDED)
    stride = 1
    strides = []
    for size in reversed(sizes):
        strides.insert(0, stride)
        stride *= size
    for size, stride in zip(sizes, strides):
        m.sizes.add(as_int=size)
        m.strides.add(as_int=stride)
    m.storage_offset.as_int = 0
    m.device.type = "cpu"
    return m


def _head(tag, *operators):
    """The GraphModule's fields other than the graph: `tag` goes into
    torch_version; operators are (name, schema) pairs."""
    head = graph_pb2.GraphModule()
    head.schema_version.major = 1
    head.torch_version = "1.13.1" + ("+" + tag if tag else "")
    for name, schema in operators:
        head.operators.add(name=name, schema=schema)
    return head


def _cached(path):
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    return None


def _store(path, data):
    os.makedirs(_CACHE, exist_ok=True)
    tmp = path + ".%d.tmp" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return data


def _chain(parts, node, tv, prefix, n):
    """Appends to `parts` (a Graph's serialized fields) n copies of `node`,
    each taking the one before's output as its first input (the first
    copy takes x), and their values like `tv`: prefix0 .. prefix{n-1}."""
    a = node.inputs[0]
    out = node.outputs.add()
    for i in range(n):
        a.arg.as_tensor.name = "x" if i == 0 else "%s%d" % (prefix, i - 1)
        out.as_tensor.name = "%s%d" % (prefix, i)
        parts.append(_field(2, node.SerializeToString()))  # nodes
        tv.name = "%s%d" % (prefix, i)
        parts.append(_field(4, tv.SerializeToString()))  # tensor_values


def chain_graph_bytes(n, tag=""):
    """Serialized GraphModule: input x, n chained relus, output the last.
    `tag` goes into torch_version so that variants have distinct keys."""
    path = os.path.join(_CACHE, "chain-%d-%s.pb" % (n, tag or "0"))
    data = _cached(path)
    if data is not None:
        return data
    head = _head(tag, ("aten::relu", "aten::relu(Tensor self) -> Tensor"))
    meta = _meta()
    g = graph_pb2.Graph()
    inp = g.inputs.add()
    inp.kind = graph_pb2.INPUT_KIND_USER_INPUT
    inp.arg.as_tensor.name = "x"
    g.outputs.add().as_tensor.name = "r%d" % (n - 1)
    parts = [g.SerializeToString()]
    tv = graph_pb2.TensorValue(name="x", meta=meta)
    parts.append(_field(4, tv.SerializeToString()))  # tensor_values
    node = graph_pb2.Node(target="aten::relu")
    node.inputs.add(name="self", kind=graph_pb2.ARGUMENT_KIND_POSITIONAL)
    _chain(parts, node, tv, "r", n)
    return _store(path, head.SerializeToString() + _field(2, b"".join(parts)))


def wide_graph_bytes(n, tag=""):
    """Serialized GraphModule: input x, m = max(2, n // 2) nodes
    m{i} = x * (i + 1), then a balanced tree of m - 1 adds summing them
    (pairs of the previous level, an odd one out carried up), output the
    sum."""
    path = os.path.join(_CACHE, "wide-%d-%s.pb" % (n, tag or "0"))
    data = _cached(path)
    if data is not None:
        return data
    m = max(2, n // 2)
    head = _head(tag,
                 ("aten::mul.Scalar", "aten::mul.Scalar(Tensor self, Scalar other) -> Tensor"),
                 ("aten::add.Tensor",
                  "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"))
    tv = graph_pb2.TensorValue(name="x", meta=_meta())
    parts = [None, _field(4, tv.SerializeToString())]  # parts[0]: the head
    mul = graph_pb2.Node(target="aten::mul.Scalar")
    a = mul.inputs.add(name="self", kind=graph_pb2.ARGUMENT_KIND_POSITIONAL)
    a.arg.as_tensor.name = "x"
    k = mul.inputs.add(name="other", kind=graph_pb2.ARGUMENT_KIND_POSITIONAL)
    mul_out = mul.outputs.add()
    add = graph_pb2.Node(target="aten::add.Tensor")
    lhs = add.inputs.add(name="self", kind=graph_pb2.ARGUMENT_KIND_POSITIONAL)
    rhs = add.inputs.add(name="other", kind=graph_pb2.ARGUMENT_KIND_POSITIONAL)
    add_out = add.outputs.add()

    def value(name):
        tv.name = name
        parts.append(_field(4, tv.SerializeToString()))  # tensor_values

    level = []
    for i in range(m):
        k.arg.as_float = float(i + 1)
        mul_out.as_tensor.name = "m%d" % i
        parts.append(_field(2, mul.SerializeToString()))  # nodes
        value("m%d" % i)
        level.append("m%d" % i)
    count = 0
    while len(level) > 1:
        up = []
        for j in range(0, len(level) - 1, 2):
            lhs.arg.as_tensor.name, rhs.arg.as_tensor.name = level[j], level[j + 1]
            add_out.as_tensor.name = "s%d" % count
            parts.append(_field(2, add.SerializeToString()))
            value("s%d" % count)
            up.append("s%d" % count)
            count += 1
        if len(level) % 2:
            up.append(level[-1])
        level = up
    g = graph_pb2.Graph()
    inp = g.inputs.add()
    inp.kind = graph_pb2.INPUT_KIND_USER_INPUT
    inp.arg.as_tensor.name = "x"
    g.outputs.add().as_tensor.name = level[0]
    parts[0] = g.SerializeToString()
    return _store(path, head.SerializeToString() + _field(2, b"".join(parts)))


def view_chain(n, torch_version="1.13.0a0"):
    """GraphModule: x viewed n times, each view_as(x, previous view), then
    x.add_(1) and a read of the last view, which replays the chain of stale
    `other` arguments (functionalization's recursion). Built with the
    protobuf API, not cached: the hostile-input test and the fuzz seeds
    (tests/fuzz/make_graph_seeds.py) change it further."""
    gm = graph_pb2.GraphModule(torch_version=torch_version)
    gm.schema_version.major = 1
    for name, schema in [
            ("aten::view_as", "aten::view_as(Tensor(a) self, Tensor other) -> Tensor(a)"),
            ("aten::add_.Tensor", "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, "
                                  "Scalar alpha=1) -> Tensor(a!)"),
            ("aten::mul.Tensor", "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor")]:
        gm.operators.add(name=name, schema=schema)
    g = gm.graph

    def value(name):
        m = g.tensor_values.add(name=name).meta
        m.dtype = graph_pb2.SCALAR_TYPE_FLOAT
        m.sizes.add().as_int = 4
        m.strides.add().as_int = 1
        m.device.type = "cpu"

    def node(target, out, *args):
        nd = g.nodes.add(target=target)
        for pname, a in args:
            arg = nd.inputs.add(name=pname, kind=graph_pb2.ARGUMENT_KIND_POSITIONAL).arg
            if isinstance(a, str):
                arg.as_tensor.name = a
            else:
                arg.as_int = a
        value(out)
        nd.outputs.add().as_tensor.name = out

    value("x")
    g.inputs.add(kind=graph_pb2.INPUT_KIND_USER_INPUT).arg.as_tensor.name = "x"
    prev = "x"
    for i in range(n):
        node("aten::view_as", "v%d" % i, ("self", "x"), ("other", prev))
        prev = "v%d" % i
    node("aten::add_.Tensor", "w", ("self", "x"), ("other", 1))
    node("aten::mul.Tensor", "y", ("self", prev), ("other", 2))
    g.outputs.add().as_tensor.name = "y"
    return gm


def chain_request_bytes(n, tag=""):
    """A serialized CompileRequest carrying chain_graph_bytes(n, tag)."""
    return _field(1, chain_graph_bytes(n, tag))


def mm_graph_bytes(n, tag=""):
    """Serialized GraphModule: inputs x and w (4 x 4), n chained
    `aten::mm(prev, w)`, output the last."""
    path = os.path.join(_CACHE, "mm-%d-%s.pb" % (n, tag or "0"))
    data = _cached(path)
    if data is not None:
        return data
    head = _head(tag, ("aten::mm", "aten::mm(Tensor self, Tensor mat2) -> Tensor"))
    g = graph_pb2.Graph()
    for name in ("x", "w"):
        inp = g.inputs.add()
        inp.kind = graph_pb2.INPUT_KIND_USER_INPUT
        inp.arg.as_tensor.name = name
    g.outputs.add().as_tensor.name = "p%d" % (n - 1)
    parts = [g.SerializeToString()]
    tv = graph_pb2.TensorValue(name="x", meta=_meta((4, 4)))
    for name in ("x", "w"):
        tv.name = name
        parts.append(_field(4, tv.SerializeToString()))  # tensor_values
    node = graph_pb2.Node(target="aten::mm")
    node.inputs.add(name="self", kind=graph_pb2.ARGUMENT_KIND_POSITIONAL)
    node.inputs.add(name="mat2", kind=graph_pb2.ARGUMENT_KIND_POSITIONAL).arg.as_tensor.name = "w"
    _chain(parts, node, tv, "p", n)
    return _store(path, head.SerializeToString() + _field(2, b"".join(parts)))
