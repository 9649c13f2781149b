"""Tests of compiled.capture against real PyTorch (torch 1.13, CPU).

The programs come from tests/data/graphs/regen.py (``CASES``), the same
programs whose captures are committed as test data. Each is captured here and
checked for: untouched caller inputs, well-formed graphs (operator table,
schema-bound arguments, a TensorValue for every name), metadata equal to an
eager run, input kinds and storage groups; and the committed data must be
exactly what regen.py produces today.

Run: cd /work/main && PYTHONPATH=client/python /usr/bin/python3 -m pytest -q tests/python
"""

import importlib.util
import math
import os
import subprocess
import sys

import compiled
import pytest
import torch
import torch.utils._pytree as pytree
from google.protobuf import json_format

from compiled import encode
from compiled.v1 import graph_pb2

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(REPO, "tests", "data", "graphs")
REGEN = os.path.join(DATA, "regen.py")
capture_module = sys.modules["compiled.capture"]


def _load_cases():
    spec = importlib.util.spec_from_file_location("graph_cases", REGEN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cases = _load_cases()
CASE_NAMES = sorted(cases.CASES)

DTYPES = {
    graph_pb2.SCALAR_TYPE_BYTE: torch.uint8,
    graph_pb2.SCALAR_TYPE_CHAR: torch.int8,
    graph_pb2.SCALAR_TYPE_SHORT: torch.int16,
    graph_pb2.SCALAR_TYPE_INT: torch.int32,
    graph_pb2.SCALAR_TYPE_LONG: torch.int64,
    graph_pb2.SCALAR_TYPE_HALF: torch.float16,
    graph_pb2.SCALAR_TYPE_FLOAT: torch.float32,
    graph_pb2.SCALAR_TYPE_DOUBLE: torch.float64,
    graph_pb2.SCALAR_TYPE_COMPLEXFLOAT: torch.complex64,
    graph_pb2.SCALAR_TYPE_COMPLEXDOUBLE: torch.complex128,
    graph_pb2.SCALAR_TYPE_BOOL: torch.bool,
    graph_pb2.SCALAR_TYPE_BFLOAT16: torch.bfloat16,
}


# ---------------------------------------------------------------------------
# Helpers.
# ---------------------------------------------------------------------------


def _caller_tensors(program, inputs):
    """Every tensor the caller owns: input leaves, parameters, buffers."""
    tensors = [t for t in pytree.tree_flatten(tuple(inputs))[0] if isinstance(t, torch.Tensor)]
    if isinstance(program, torch.nn.Module):
        tensors += list(program.parameters()) + list(program.buffers())
    return tensors


def _snapshot(t):
    return dict(value=t.detach().clone(), version=t._version, size=tuple(t.size()),
                stride=t.stride(), offset=t.storage_offset(), dtype=t.dtype,
                requires_grad=t.requires_grad, is_leaf=t.is_leaf, ptr=t.data_ptr(),
                grad=t.grad)


def _resolve(name):
    """The OpOverload of an operator name like 'aten::add_.Tensor'."""
    ns, rest = name.split("::")
    base, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, ns), base)
    return getattr(packet, overload or "default")


def _tensor_refs(arg):
    """Names of the tensor values an Argument refers to."""
    kind = arg.WhichOneof("kind")
    if kind == "as_tensor":
        return [arg.as_tensor.name]
    if kind == "as_tensors":
        return [item.name for item in arg.as_tensors.items]
    if kind == "as_optional_tensors":
        return [item.as_tensor.name for item in arg.as_optional_tensors.items
                if item.WhichOneof("kind") == "as_tensor"]
    return []


def _metas(msg):
    return {tv.name: tv.meta for tv in msg.graph.tensor_values}


def _ints(symints):
    return [s.as_int for s in symints]


def _capture_case(name):
    program, inputs = cases.build(name)
    torch.manual_seed(0)
    return program, inputs, compiled.capture(program, inputs)


def _node(msg, target):
    return next(n for n in msg.graph.nodes if n.target == target)


# ---------------------------------------------------------------------------
# Properties checked on every case.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASE_NAMES)
def test_capture_leaves_caller_tensors_untouched(name):
    program, inputs = cases.build(name)
    tensors = _caller_tensors(program, inputs)
    before = [_snapshot(t) for t in tensors]
    modules = list(program.modules()) if isinstance(program, torch.nn.Module) else []
    state = [(type(m), m.training, dict(m._forward_hooks), dict(m._forward_pre_hooks)) for m in modules]
    compiled.capture(program, inputs)
    for t, snap in zip(tensors, before):
        after = _snapshot(t)
        # exactly equal; an uninitialized input (add_out's torch.empty out=)
        # may hold NaNs, which torch.equal calls unequal to themselves
        torch.testing.assert_close(after.pop("value"), snap.pop("value"), rtol=0, atol=0,
                                   equal_nan=True, msg=name)
        assert after == snap, name
    # functional_call swaps module classes and capture adds hooks: all undone
    assert [(type(m), m.training, dict(m._forward_hooks), dict(m._forward_pre_hooks))
            for m in modules] == state


@pytest.mark.parametrize("name", CASE_NAMES)
def test_graph_is_well_formed(name):
    _, _, msg = _capture_case(name)
    graph = msg.graph
    assert (msg.schema_version.major, msg.schema_version.minor) == (1, 0)
    assert msg.torch_version == torch.__version__
    assert msg.producer == "compiled.capture " + compiled.__version__

    operators = {op.name: op.schema for op in msg.operators}
    assert len(operators) == len(msg.operators), "one entry per operator"
    for op_name, schema in operators.items():
        assert schema == str(_resolve(op_name)._schema)
        assert schema.startswith(op_name + "(")

    metas = _metas(msg)
    assert len(metas) == len(graph.tensor_values), "TensorValue names are unique"
    defined = []
    for spec in graph.inputs:
        defined += _tensor_refs(spec.arg)
    for node in graph.nodes:
        assert node.target in operators
        assert "getitem" not in node.target
        schema = _resolve(node.target)._schema
        arg_names = [a.name for a in schema.arguments]
        seen = []
        for named in node.inputs:
            assert named.name in arg_names, (node.target, named.name)
            assert named.kind in (graph_pb2.ARGUMENT_KIND_POSITIONAL, graph_pb2.ARGUMENT_KIND_KEYWORD)
            assert named.arg.WhichOneof("kind") is not None
            seen.append(named.name)
            for ref in _tensor_refs(named.arg):
                assert ref in metas, (node.target, named.name, ref)
        assert len(set(seen)) == len(seen)
        positional = [n.name for n in node.inputs if n.kind == graph_pb2.ARGUMENT_KIND_POSITIONAL]
        assert positional == arg_names[:len(positional)], "positional arguments in schema order"
        assert len(node.outputs) == len(schema.returns)
        for out in node.outputs:
            defined += _tensor_refs(out)
    for out in graph.outputs:
        for ref in _tensor_refs(out):
            assert ref in metas
    assert len(defined) == len(set(defined)), "each value is defined once"
    assert set(defined) == set(metas), "every defined value has metadata and vice versa"
    for group in graph.storage_groups:
        assert len(group.inputs) >= 2
        assert all(0 <= i < len(graph.inputs) for i in group.inputs)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_output_metadata_matches_eager(name):
    _, _, msg = _capture_case(name)
    program, inputs = cases.build(name)
    torch.manual_seed(0)
    result = program(*inputs)
    leaves = pytree.tree_flatten(result)[0]
    assert len(leaves) == len(msg.graph.outputs)
    metas = _metas(msg)
    for value, out in zip(leaves, msg.graph.outputs):
        if isinstance(value, torch.Tensor):
            meta = metas[out.as_tensor.name]
            assert DTYPES[meta.dtype] == value.dtype
            assert _ints(meta.sizes) == list(value.shape)
            assert _ints(meta.strides) == list(value.stride())
            assert meta.storage_offset.as_int == value.storage_offset()
            assert meta.requires_grad == value.requires_grad
            assert meta.layout == graph_pb2.LAYOUT_STRIDED
            assert meta.device.type == "cpu" and not meta.device.has_index
        elif isinstance(value, bool):
            assert out.as_bool == value
        elif isinstance(value, int):
            assert out.as_int == value
        else:
            assert out.as_float == value


@pytest.mark.parametrize("name", CASE_NAMES)
def test_input_metadata_matches_caller(name):
    program, inputs, msg = _capture_case(name)
    metas = _metas(msg)
    user = [spec for spec in msg.graph.inputs if spec.kind == graph_pb2.INPUT_KIND_USER_INPUT]
    leaves = pytree.tree_flatten(tuple(inputs))[0]
    assert len(user) == len(leaves)
    for spec, value in zip(user, leaves):
        if isinstance(value, torch.Tensor):
            meta = metas[spec.arg.as_tensor.name]
            assert DTYPES[meta.dtype] == value.dtype
            assert _ints(meta.sizes) == list(value.shape)
            assert _ints(meta.strides) == list(value.stride())
            assert meta.storage_offset.as_int == value.storage_offset()
            assert meta.requires_grad == value.requires_grad


# ---------------------------------------------------------------------------
# Inputs: kinds, order, state, storage groups.
# ---------------------------------------------------------------------------


def _kinds(msg):
    return [(graph_pb2.InputKind.Name(s.kind), s.target, s.persistent) for s in msg.graph.inputs]


def test_module_state_becomes_parameter_and_buffer_inputs():
    program, _, msg = _capture_case("conv_bn_relu")
    expected = [("INPUT_KIND_PARAMETER", n, False) for n, _ in program.named_parameters()]
    expected += [("INPUT_KIND_BUFFER", n, True) for n, _ in program.named_buffers()]
    expected += [("INPUT_KIND_USER_INPUT", "", False)]
    assert _kinds(msg) == expected
    assert [t for _, t, _ in expected[:4]] == ["conv.weight", "bn.weight", "bn.bias", "bn.running_mean"]


def test_tied_weights_appear_once_and_non_persistent_buffers_are_marked():
    _, _, msg = _capture_case("tied_embedding")
    assert _kinds(msg) == [
        ("INPUT_KIND_PARAMETER", "embed.weight", False),
        ("INPUT_KIND_BUFFER", "scale", False),
        ("INPUT_KIND_USER_INPUT", "", False),
    ]
    weight = msg.graph.inputs[0].arg.as_tensor.name
    users = [n.target for n in msg.graph.nodes
             if any(weight in _tensor_refs(i.arg) for i in n.inputs)]
    assert users == ["aten::embedding", "aten::t"]


def test_training_mode_module_requires_grad_and_mutates_buffers():
    _, _, msg = _capture_case("training_block")
    metas = _metas(msg)
    for spec in msg.graph.inputs:
        meta = metas[spec.arg.as_tensor.name]
        assert meta.requires_grad == (spec.kind == graph_pb2.INPUT_KIND_PARAMETER)
    assert metas[msg.graph.outputs[0].as_tensor.name].requires_grad
    targets = [n.target for n in msg.graph.nodes]
    assert "aten::native_batch_norm" in targets  # updates running stats in place
    assert "aten::add_.Tensor" in targets        # num_batches_tracked += 1
    assert "aten::bernoulli_.float" in targets   # dropout
    bn = _node(msg, "aten::native_batch_norm")
    stats = [i.arg.as_tensor.name for i in bn.inputs if i.name in ("running_mean", "running_var")]
    assert stats == ["b_bn_running_mean", "b_bn_running_var"]
    # torch 1.13's schema does not annotate this mutation (no "Tensor(a!)?"):
    # the daemon cannot learn it from the operator table alone.
    schema = next(o.schema for o in msg.operators if o.name == "aten::native_batch_norm")
    assert "Tensor? running_mean" in schema


def test_constants_are_lifted_to_inputs():
    captured = compiled.trace(cases.index_put, cases.build("index_put")[1])
    specs = [s for s in captured.graph_module.graph.inputs if s.kind == graph_pb2.INPUT_KIND_CONSTANT]
    assert [s.target for s in specs] == ["_tensor_constant0", "_tensor_constant1"]
    assert [s.arg.as_tensor.name for s in specs] == ["_tensor_constant0", "_tensor_constant1"]
    assert list(captured.constants) == ["_tensor_constant0", "_tensor_constant1"]
    assert torch.equal(captured.constants["_tensor_constant0"], torch.tensor([1, 2]))
    users = [n.target for n in captured.graph_module.graph.nodes
             if any(i.arg.WhichOneof("kind") == "as_tensor" and i.arg.as_tensor.name == "_tensor_constant0"
                    for i in n.inputs)]
    assert users == ["aten::lift_fresh_copy"]


def test_non_tensor_inputs_are_specialized_literals():
    _, _, msg = _capture_case("scalar_args")
    kinds = [s.arg.WhichOneof("kind") for s in msg.graph.inputs]
    assert kinds == ["as_tensor", "as_int", "as_float", "as_bool"]
    assert (msg.graph.inputs[1].arg.as_int, msg.graph.inputs[2].arg.as_float) == (3, 0.5)
    assert msg.graph.outputs[1].as_int == 6
    add = _node(msg, "aten::add.Tensor")
    alpha = next(i for i in add.inputs if i.name == "alpha")
    assert alpha.kind == graph_pb2.ARGUMENT_KIND_KEYWORD and alpha.arg.as_float == 0.5


def test_storage_groups_for_views_of_one_base():
    _, _, msg = _capture_case("shared_storage")
    assert [list(g.inputs) for g in msg.graph.storage_groups] == [[0, 1]]


@pytest.mark.parametrize("name", [n for n in CASE_NAMES if n != "shared_storage"])
def test_no_storage_groups_without_sharing(name):
    _, _, msg = _capture_case(name)
    assert len(msg.graph.storage_groups) == 0


def test_storage_groups_span_parameters_and_repeated_inputs():
    class Affine(torch.nn.Linear):
        def forward(self, w0, x, y, z):
            return super().forward(x) + w0 + y * z

    lin = Affine(3, 3)
    x = torch.randn(2, 3)
    msg = compiled.capture(lin, (lin.weight[0], x, x, x[1]))
    # inputs: weight, bias, w0, x, y (x again), z (a row of x)
    assert [list(g.inputs) for g in msg.graph.storage_groups] == [[0, 2], [3, 4, 5]]


def test_copies_preserve_sharing_geometry_and_grad():
    base = torch.arange(24.0).reshape(4, 6)
    a, b = base[1:, ::2], base.t()
    ints = base.view(torch.int32)[:, 3:]
    leaf = torch.randn(3, requires_grad=True)
    nonleaf = leaf * 2
    originals = [a, b, ints, a, leaf, nonleaf, 7]
    copies = capture_module._copy_tensors(originals)
    assert copies[3] is copies[0] and copies[6] == 7
    keys = {encode.storage_key(c) for c in copies[:3]}
    assert len(keys) == 1 and keys != {encode.storage_key(base)}
    for orig, copy in zip(originals[:6], copies[:6]):
        assert (copy.size(), copy.stride(), copy.storage_offset(), copy.dtype) == \
            (orig.size(), orig.stride(), orig.storage_offset(), orig.dtype)
        assert copy.data_ptr() != orig.data_ptr()
        assert torch.equal(copy.detach(), orig.detach())
        assert copy.requires_grad == orig.requires_grad and copy.is_leaf == orig.is_leaf
    copies[0].fill_(-1.0)  # a write through one copy shows in the others, not in base
    assert copies[1][0, 1].item() == -1.0 and base[1, 0].item() == 6.0


# ---------------------------------------------------------------------------
# Nodes: mutation, multiple outputs, Tensor?[] and friends.
# ---------------------------------------------------------------------------


def test_in_place_ops_stay_in_place_and_metadata_is_taken_when_produced():
    _, _, msg = _capture_case("transpose_inplace")
    metas = _metas(msg)
    (node,) = msg.graph.nodes
    assert node.target == "aten::t_"
    assert _ints(metas["x"].sizes) == [3, 4] and _ints(metas["x"].strides) == [4, 1]
    out = node.outputs[0].as_tensor.name
    assert _ints(metas[out].sizes) == [4, 3] and _ints(metas[out].strides) == [1, 4]
    assert msg.graph.outputs[0].as_tensor.name == out


def test_out_variant_keeps_its_out_argument():
    _, _, msg = _capture_case("add_out")
    node = _node(msg, "aten::add.out")
    out = next(i for i in node.inputs if i.name == "out")
    assert out.kind == graph_pb2.ARGUMENT_KIND_KEYWORD and out.arg.as_tensor.name == "c"


def test_multi_output_nodes_have_one_output_per_return():
    _, _, msg = _capture_case("split_unbind_chunk")
    unbind = _node(msg, "aten::unbind.int")
    assert len(unbind.outputs) == 1 and len(unbind.outputs[0].as_tensors.items) == 4
    _, _, msg = _capture_case("training_block")
    bn = _node(msg, "aten::native_batch_norm")
    assert [o.WhichOneof("kind") for o in bn.outputs] == ["as_tensor"] * 3
    metas = _metas(msg)
    assert all(o.as_tensor.name in metas for o in bn.outputs)  # unused ones too


def test_optional_tensor_lists_keep_none():
    _, _, msg = _capture_case("index_tensor")
    lists = [i.arg.as_optional_tensors for n in msg.graph.nodes for i in n.inputs if i.name == "indices"]
    assert len(lists) == 3
    kinds = [[item.WhichOneof("kind") for item in lst.items] for lst in lists]
    assert kinds == [["as_tensor"], ["as_none", "as_tensor"], ["as_tensor"]]


def test_tensor_lists_and_literal_kinds():
    _, _, msg = _capture_case("cat_stack")
    stack = _node(msg, "aten::stack")
    assert [t.name for t in stack.inputs[0].arg.as_tensors.items] == ["a", "b", "c"]
    _, _, msg = _capture_case("mixed_dtypes")
    to_copy = _node(msg, "aten::_to_copy")
    dtype = next(i for i in to_copy.inputs if i.name == "dtype")
    assert dtype.arg.as_scalar_type == graph_pb2.SCALAR_TYPE_FLOAT
    _, _, msg = _capture_case("reduction_keepdim")
    amax = _node(msg, "aten::amax")
    assert list(amax.inputs[1].arg.as_ints.items) == [0, 2] and amax.inputs[2].arg.as_bool


def test_special_floats_are_kept():
    msg = compiled.capture(lambda x: x.clamp(min=-math.inf, max=math.nan), (torch.randn(3),))
    clamp = _node(msg, "aten::clamp")
    lo, hi = clamp.inputs[1].arg.as_float, clamp.inputs[2].arg.as_float
    assert lo == -math.inf and math.isnan(hi)
    text = json_format.MessageToJson(msg, preserving_proto_field_name=True)
    again = json_format.Parse(text, graph_pb2.GraphModule())
    assert math.isnan(_node(again, "aten::clamp").inputs[2].arg.as_float)


def test_node_metadata():
    _, _, msg = _capture_case("mlp")
    paths = [n.metadata.module_path for n in msg.graph.nodes]
    assert paths[0] == "fc1" and paths[-1] == "fc2"
    assert all(n.metadata.stack_trace for n in msg.graph.nodes)
    assert "torch/nn/modules/linear.py" in msg.graph.nodes[0].metadata.stack_trace


def test_committed_stack_traces_are_machine_independent():
    for name in CASE_NAMES:
        with open(os.path.join(DATA, name + ".pb"), "rb") as f:
            msg = graph_pb2.GraphModule.FromString(f.read())
        for node in msg.graph.nodes:
            trace = node.metadata.stack_trace
            assert REPO not in trace and '"/' not in trace, (name, trace)
            assert "compiled/capture.py" not in trace and "_python_dispatch" not in trace


def test_committed_data_covers_dtypes():
    dtypes = set()
    for name in CASE_NAMES:
        with open(os.path.join(DATA, name + ".pb"), "rb") as f:
            msg = graph_pb2.GraphModule.FromString(f.read())
        dtypes |= {tv.meta.dtype for tv in msg.graph.tensor_values}
    for dtype in ("HALF", "BFLOAT16", "CHAR", "BYTE", "BOOL", "COMPLEXFLOAT", "INT", "LONG", "FLOAT"):
        assert getattr(graph_pb2, "SCALAR_TYPE_" + dtype) in dtypes, dtype


# ---------------------------------------------------------------------------
# Errors.
# ---------------------------------------------------------------------------


def test_unencodable_argument_raises_capture_error():
    with pytest.raises(compiled.CaptureError, match=r"node 'mul' \(aten::mul.Tensor\), argument 'other'.*complex"):
        compiled.capture(lambda x: x * (1 + 2j), (torch.randn(3, dtype=torch.complex64),))


def test_untraceable_program_raises_capture_error():
    def data_dependent(x):
        return x * 2 if x.sum() > 0 else x

    with pytest.raises(compiled.UnsupportedCapture, match="tensor values"):
        compiled.capture(data_dependent, (torch.ones(3),))


def test_unsupported_inputs_raise_capture_error():
    with pytest.raises(compiled.CaptureError, match="strided"):
        compiled.capture(lambda x: x * 2, (torch.eye(3).to_sparse(),))
    with pytest.raises(compiled.CaptureError, match="type object"):
        compiled.capture(lambda x, o: x, (torch.ones(1), object()))


# ---------------------------------------------------------------------------
# Files: export_graph and the committed test data.
# ---------------------------------------------------------------------------


def test_export_graph_round_trips(tmp_path):
    program, inputs = cases.build("attention")
    expected = compiled.capture(program, inputs)
    for ext in ("pb", "json"):
        path = tmp_path / f"attention.{ext}"
        written = compiled.export_graph(program, inputs, path)
        assert written == expected
        if ext == "pb":
            parsed = graph_pb2.GraphModule.FromString(path.read_bytes())
        else:
            parsed = json_format.Parse(path.read_text(), graph_pb2.GraphModule())
        assert parsed == expected


def test_export_graph_rejects_unknown_extensions(tmp_path):
    def never_called(x):
        raise AssertionError("traced before the extension was checked")

    for name in ("g.txt", "g", "g.pbtxt"):
        with pytest.raises(ValueError):
            compiled.export_graph(never_called, (torch.ones(1),), tmp_path / name)


def test_committed_graphs_are_up_to_date(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "client", "python"))
    subprocess.run([sys.executable, REGEN, "--out", str(tmp_path)], check=True, env=env, cwd=str(tmp_path))
    fresh = sorted(os.listdir(tmp_path))
    committed = sorted(f for f in os.listdir(DATA) if f.endswith((".pb", ".json")))
    assert fresh == committed
    assert len([f for f in fresh if f.endswith(".pb")]) >= 24
    for name in fresh:
        with open(os.path.join(DATA, name), "rb") as f, open(tmp_path / name, "rb") as g:
            assert f.read() == g.read(), f"{name} is stale: run tests/data/graphs/regen.py"


def test_a_failing_trace_raises_what_eager_raises():
    """A program that fails eagerly fails capture with an exception of the
    same class (also a CaptureError), so `except RuntimeError:` written for
    eager keeps working under compiled."""
    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4, dtype=torch.float64)  # a float64 input into a float32 model
    with pytest.raises(RuntimeError) as eager:
        model(x)
    with pytest.raises(RuntimeError) as captured:
        compiled.capture(model, (x,))
    assert isinstance(captured.value, compiled.CaptureError)
    assert str(eager.value) in str(captured.value)

    # An error that depends on tensor values (an index out of range) shows
    # in a trace on real data only; the shape-only trace records the graph,
    # and running it raises (tests/python/test_metatrace.py).
    def bad_index(t):
        return t[[5]]
    with pytest.raises(IndexError) as captured:
        sys.modules["compiled.capture"].trace(bad_index, (torch.randn(3),), method="real")
    assert isinstance(captured.value, compiled.CaptureError)


def _every_argument_kind(x, y, views, n: int, s: float, mode: str, flag: bool, nothing):
    """A program whose graph holds every Argument kind capture writes."""
    a = torch.div(x, y, rounding_mode=mode)                       # str
    b = a.to(torch.float64).sum([-1, 0], keepdim=flag)            # dtype, negative ints, bool
    c = torch.zeros(2, 3, layout=torch.strided, device="cpu")     # layout, device
    d = x.view(1, 2, 3, 1).contiguous(memory_format=torch.channels_last)  # memory format
    e = torch.ops.aten._test_optional_floatlist(x[0], [1.0, 2.0, 3.0]) + d.sum()  # float[]
    # (torch 2 records interpolate's scale factors as floats, not a float[])
    k = torch.clamp(x, None, 2.0)                                 # None
    f = x[None, :, torch.tensor([0, 2])]                          # Tensor?[] with None
    g = torch.cat([x, y, views[0]], 0).clamp(min=-math.inf, max=2**40)  # Tensor[], special floats
    h = torch.ops.aten.add.Tensor(x, y, alpha=n)                  # a keyword argument
    i = torch.ops.aten.convolution_backward(                      # bool[], empty int[]
        torch.ones(1, 1, 2, 2), torch.ones(1, 1, 3, 3), torch.ones(1, 1, 2, 2), [1],
        [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, False, True])
    j = torch.unbind(y * s + views[1].sum())                       # a Tensor[] return
    return a, b, c, e, f, g, h, i[0], i[2], j, k


@pytest.mark.parametrize("method", ["meta", "real"])
def test_the_written_graph_is_what_protobuf_writes(method):
    """capture writes the GraphModule's bytes itself (compiled.wire); they
    must be protobuf's own serialization of the message they parse to:
    fields in number order, defaults left out, repeated numbers packed."""
    base = torch.randn(4, 3)
    inputs = (torch.randn(2, 3), torch.randn(2, 3) + 3, (base[:2], base[1:]), 2, 0.5, "floor",
              True, None)
    captured = capture_module.trace(_every_argument_kind, inputs, method=method)
    data = captured.graph_bytes
    msg = graph_pb2.GraphModule.FromString(data)
    assert msg.SerializeToString() == data
    kinds = {i.arg.WhichOneof("kind") for n in msg.graph.nodes for i in n.inputs}
    missing = {"as_tensor", "as_tensors", "as_optional_tensors", "as_int", "as_ints", "as_float",
               "as_floats", "as_bool", "as_bools", "as_string", "as_none", "as_scalar_type",
               "as_layout", "as_device", "as_memory_format"} - kinds
    assert not missing
    assert any(i.kind == graph_pb2.ARGUMENT_KIND_KEYWORD for n in msg.graph.nodes for i in n.inputs)
    first = [spec.kind for spec in msg.graph.inputs].index(graph_pb2.INPUT_KIND_USER_INPUT)
    assert [list(g.inputs) for g in msg.graph.storage_groups] == [[first + 2, first + 3]]
    literals = [spec.arg.WhichOneof("kind") for spec in msg.graph.inputs][first + 4:]
    assert literals == ["as_int", "as_float", "as_string", "as_bool", "as_none"]
    for name in CASE_NAMES:
        program, case_inputs = cases.build(name)
        data = capture_module.trace(program, case_inputs, method="real" if method == "real"
                                    else None).graph_bytes
        assert graph_pb2.GraphModule.FromString(data).SerializeToString() == data, name


def test_a_source_file_name_that_is_not_utf8_is_captured(tmp_path):
    """A file name Python could not decode (surrogates in the str) shows in
    the stack trace with "?" in their place; it does not stop capture."""
    path = os.path.join(os.fsdecode(bytes(tmp_path)), os.fsdecode(b"prog\xff.py"))
    with open(path, "w") as f:
        f.write("def program(x):\n    return x.sin() + 1\n")
    spec = importlib.util.spec_from_file_location("prog_not_utf8", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for method in ("meta", "real"):
        msg = capture_module.trace(module.program, (torch.randn(3),), method=method).graph_module
        stacks = [n.metadata.stack_trace for n in msg.graph.nodes]
        assert stacks and all("prog?.py" in s for s in stacks), stacks


def test_a_state_name_that_is_not_utf8_is_named_in_the_error():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_parameter("w\udcff", torch.nn.Parameter(torch.randn(3)))

        def forward(self, x):
            return x * getattr(self, "w\udcff")

    with pytest.raises(compiled.CaptureError, match=r"module state 'w\\udcff'.*UTF-8"):
        compiled.capture(M(), (torch.randn(3),))
