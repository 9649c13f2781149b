"""Large valid graphs for limit, memory and head-of-line tests and benches.

chain(n) is a GraphModule of n `aten::relu` nodes in a chain, each output a
new named value with full tensor metadata: about 83 bytes of request per
node, the shape the issue's 720,000-node / 59.5 MB request had. Building it
with the protobuf API takes seconds, so the serialized bytes are built from
one serialized node and tensor value per position (repeated fields may be
concatenated) and cached per size in a temporary directory.
"""

import os
import tempfile

import compiled  # noqa: F401  (makes compiled.v1 importable)
from compiled.client import field_bytes as _field
from compiled.v1 import compiled_pb2, graph_pb2

_CACHE = os.path.join(tempfile.gettempdir(), "compiled-biggraph-%d" % os.getuid())


def _meta():
    m = graph_pb2.TensorMeta(dtype=graph_pb2.SCALAR_TYPE_FLOAT, layout=graph_pb2.LAYOUT_STRIDED)
    m.sizes.add(as_int=4)
    m.strides.add(as_int=1)
    m.storage_offset.as_int = 0
    m.device.type = "cpu"
    return m


def chain_graph_bytes(n, tag=""):
    """Serialized GraphModule: input x, n chained relus, output the last.
    `tag` goes into torch_version so that variants have distinct keys."""
    path = os.path.join(_CACHE, "chain-%d-%s.pb" % (n, tag or "0"))
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    head = graph_pb2.GraphModule()
    head.schema_version.major = 1
    head.torch_version = "1.13.1" + ("+" + tag if tag else "")
    op = head.operators.add()
    op.name = "aten::relu"
    op.schema = "aten::relu(Tensor self) -> Tensor"
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
    a = node.inputs.add()
    a.name = "self"
    a.kind = graph_pb2.ARGUMENT_KIND_POSITIONAL
    out = node.outputs.add()
    for i in range(n):
        a.arg.as_tensor.name = "x" if i == 0 else "r%d" % (i - 1)
        out.as_tensor.name = "r%d" % i
        parts.append(_field(2, node.SerializeToString()))  # nodes
        tv.name = "r%d" % i
        parts.append(_field(4, tv.SerializeToString()))
    graph = b"".join(parts)
    data = head.SerializeToString() + _field(2, graph)
    os.makedirs(_CACHE, exist_ok=True)
    tmp = path + ".%d.tmp" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return data


def chain_request_bytes(n, tag=""):
    """A serialized CompileRequest carrying chain_graph_bytes(n, tag)."""
    return _field(1, chain_graph_bytes(n, tag))
