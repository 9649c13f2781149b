"""Tests of the artifact runtime, the gRPC client and compiled.compile().

Part 1 loads hand-built artifacts (``artifact_pb2`` messages made here) and
runs them with :mod:`compiled.runtime`, one test per path of
docs/artifact.md ("Mutation and aliasing (version 0.2)"): every mutation
type, every output type, view replay and as_strided, the order of the
epilogue, specialized inputs, versions and malformed programs. These need no
daemon, so they do not depend on the daemon's alias analysis.

Part 2 starts a real daemon and tests the client (errors, Fetch, channels)
and compiled.compile(): guards and recompiles, eager fallback when the
daemon is unreachable, module state read at call time, untouched example
inputs, backend(), pytree outputs.

Run: cd /work/main && COMPILED_SRC=$PWD COMPILED_BUILD=$PWD/build \\
     PYTHONPATH=client/python /usr/bin/python3 -m pytest -q -p no:cacheprovider \\
     tests/python/test_runtime.py
"""

import collections
import os
import sys
import warnings

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon_util  # noqa: E402

import compiled  # noqa: E402
from compiled import client as client_module  # noqa: E402
from compiled import frontend, runtime  # noqa: E402
from compiled.v1 import artifact_pb2, graph_pb2  # noqa: E402

A = artifact_pb2
USER = graph_pb2.INPUT_KIND_USER_INPUT
CONSTANT = graph_pb2.INPUT_KIND_CONSTANT


# ---------------------------------------------------------------------------
# A small builder of Programs.
# ---------------------------------------------------------------------------

class Builder:
    """Builds an Artifact by hand: values, instructions, inputs, outputs."""

    def __init__(self, major=0, minor=2):
        self.art = A.Artifact(key="hand-built")
        self.art.version.major, self.art.version.minor = major, minor
        self.p = self.art.program
        self.ops = {}

    def op(self, name):
        if name not in self.ops:
            overload = runtime.resolve_operator(name)
            self.p.operators.add(name=name, schema=str(overload._schema))
            self.ops[name] = len(self.p.operators) - 1
        return self.ops[name]

    def tensor(self):
        v = self.p.values.add()
        v.tensor.SetInParent()
        return len(self.p.values) - 1

    def const(self, **kw):
        """One constant value: const(int=3), const(ints=[1, 2]),
        const(device="cpu"), const(none=True), const(tensors=[4, 5])..."""
        (kind, value), = kw.items()
        v = self.p.values.add()
        if kind in ("ints", "floats", "bools", "strings", "tensors", "optional_tensors"):
            getattr(v, kind).SetInParent()
            getattr(v, kind).items.extend(value)
        elif kind == "device":
            v.device.type = value
        else:
            setattr(v, kind, value)
        return len(self.p.values) - 1

    def input(self, kind=USER, specialized=False, **const):
        index = self.const(**const) if const else self.tensor()
        self.p.inputs.add(value=index, kind=kind, specialized=specialized)
        return index

    def call(self, name, *args, outputs=None, **kwargs):
        """Positional args and keyword args are value indices. Returns the
        output value index (or the list of them for several returns)."""
        op = self.op(name)
        schema = runtime.resolve_operator(name)._schema
        k = self.p.instructions.add().kernel
        k.op = op
        for arg, value in zip(schema.arguments, args):
            k.args.add(name=arg.name, value=value)
        for arg_name, value in kwargs.items():
            k.args.add(name=arg_name, value=value, keyword=True)
        if outputs is None:
            outputs = [self.tensor() for _ in schema.returns]
        k.outputs.extend(outputs)
        return outputs[0] if len(outputs) == 1 else outputs

    def output(self, *values):
        for v in values:
            self.p.outputs.add(value=v)

    def step(self, info, name, *args, item=-1):
        """A ViewStep of ``info.view_chain``; -1 in args is the viewed tensor."""
        info.has_view_chain = True
        s = info.view_chain.add(op=self.op(name), item=item)
        schema = runtime.resolve_operator(name)._schema
        for arg, value in zip(schema.arguments, args):
            s.args.add(name=arg.name, value=value)
        return s

    def load(self, **kw):
        return runtime.load(self.art.SerializeToString(), **kw)


def user_output(b, output_type=A.OUTPUT_TYPE_NON_ALIAS, program_output=0, base_index=0,
                requires_grad=False):
    return b.p.output_info.add(output_type=output_type, program_output=program_output,
                               base_index=base_index, requires_grad=requires_grad)


def mutated(b, mutated_output, data=True, metadata=False, **flags):
    return b.p.input_info.add(mutation_type=A.MUTATION_TYPE_MUTATED_OUT_GRAPH,
                              mutated_output=mutated_output, mutates_data=data,
                              mutates_metadata=metadata, **flags)


def not_mutated(b):
    return b.p.input_info.add(mutation_type=A.MUTATION_TYPE_NOT_MUTATED, mutated_output=-1)


def shares_storage(a, b):
    return a.storage().data_ptr() == b.storage().data_ptr()


# ---------------------------------------------------------------------------
# Part 1: the runtime on hand-built programs.
# ---------------------------------------------------------------------------

def test_fallback_program_positional_and_keyword_arguments():
    b = Builder(minor=1)
    x, y = b.input(), b.input()
    s = b.call("aten::add.Tensor", x, y, alpha=b.const(int=2))
    m = b.call("aten::mul.Tensor", s, b.const(float=0.5))
    b.output(m, s)
    prog = b.load()
    assert "def program(a0, a1)" in prog.source
    assert "alpha=2" in prog.source  # literals are inlined
    xs, ys = torch.randn(3), torch.randn(3)
    out = prog(xs, ys)
    assert isinstance(out, tuple) and len(out) == 2
    torch.testing.assert_close(out[0], (xs + 2 * ys) * 0.5)
    torch.testing.assert_close(out[1], xs + 2 * ys)


def test_intermediates_are_freed_after_their_last_use():
    """The ATen program drops each intermediate when its last reader has
    run, as eager does; kept to the end, a chain of n steps held n
    temporaries at once. Counted through a dispatch mode: while each
    operator runs, how many earlier results are still alive."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    b = Builder()
    x = b.input()
    v = x
    for _ in range(8):
        v = b.call("aten::mul.Tensor", v, b.const(float=1.5))
    kept = b.call("aten::neg", x)            # an output computed early
    b.output(b.call("aten::add.Tensor", v, kept), kept)
    prog = b.load()

    alive_at_call = []

    class Count(TorchDispatchMode):
        refs = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            alive_at_call.append(sum(r() is not None for r in self.refs))
            out = func(*args, **(kwargs or {}))
            self.refs.append(weakref.ref(out))
            return out

    xs = torch.randn(16)
    with Count():
        got = prog(xs)
    want = xs.clone()
    for _ in range(8):
        want = want * 1.5
    torch.testing.assert_close(got[0], want + -xs)
    torch.testing.assert_close(got[1], -xs)
    # while a step runs: its input, and nothing older (the last call also
    # sees `kept`, an output, which stays)
    assert max(alive_at_call) <= 2, alive_at_call


def test_direct_bindings_only_where_they_mean_the_overload():
    """A call goes through torch's Python binding only when that binding
    cannot pick another overload or another default: an aten function whose
    overloads are default and out, called with the keyword-only arguments
    by keyword, the others by position, leaving out only None defaults."""
    vf = torch._C._VariableFunctions
    aten = torch.ops.aten
    assert runtime.direct_binding(aten.bmm.default, 2, []) is vf.bmm
    assert runtime.direct_binding(aten.bmm.out, 2, ["out"]) is vf.bmm
    assert runtime.direct_binding(aten.addmm.default, 3, ["beta", "alpha"]) is vf.addmm
    assert runtime.direct_binding(aten.bmm.out, 2, []) is None  # would run bmm.default
    assert runtime.direct_binding(aten.bmm.default, 2, ["out"]) is None
    assert runtime.direct_binding(aten.bmm.default, 1, ["mat2"]) is None  # by position there
    assert runtime.direct_binding(aten.addmm.default, 3, ["beta"]) is None  # alpha's default
    assert runtime.direct_binding(aten.add.Tensor, 2, ["alpha"]) is None  # add.Scalar, ...
    assert runtime.direct_binding(aten.gelu.default, 1, ["approximate"]) is None  # torch._C._nn
    # the binding's defaults differ from the schema's here (reduction: none)
    bce = aten.binary_cross_entropy_with_logits.default
    assert runtime.direct_binding(bce, 2, []) is None
    assert runtime.direct_binding(bce, 4, []) is None
    assert runtime.direct_binding(bce, 5, []) is vf.binary_cross_entropy_with_logits
    # omitted arguments whose default is None are fine
    tel = aten._transformer_encoder_layer_fwd.default
    assert runtime.direct_binding(tel, 18, []) is vf._transformer_encoder_layer_fwd
    assert runtime.direct_binding(tel, 17, []) is None


def test_direct_and_boxed_calls_agree():
    """The same program through bindings (mm, addmm with keywords, an out=
    call) and through boxed calls (add.Tensor) computes what eager does."""
    b = Builder()
    x, w, bias = b.input(), b.input(), b.input()
    y = b.call("aten::mm", x, w)
    z = b.call("aten::addmm", bias, x, w, beta=b.const(float=0.5), alpha=b.const(int=2))
    buf = b.call("aten::zeros_like", x)
    o = b.call("aten::mm.out", y, w, out=buf, outputs=[buf])
    s = b.call("aten::add.Tensor", z, o)
    b.output(s)
    prog = b.load()
    assert "_vf" in prog.source and "_op" in prog.source, prog.source
    xs, ws, bs = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4)
    out, = prog(xs, ws, bs)
    torch.testing.assert_close(out, torch.addmm(bs, xs, ws, beta=0.5, alpha=2) + xs @ ws @ ws)


def test_tensor_list_results_are_unpacked_into_their_slots():
    b = Builder()
    x = b.input()
    t0, t1 = b.tensor(), b.tensor()
    parts = b.const(tensors=[t0, t1])
    b.call("aten::split.Tensor", x, b.const(int=2), outputs=[parts])
    swapped = b.const(tensors=[t1, t0])
    cat = b.call("aten::cat", swapped)
    b.output(t1, cat)
    prog = b.load()
    assert "[v" in prog.source and "] = _op" in prog.source
    xs = torch.arange(4.0)
    second, cat_out = prog(xs)
    assert torch.equal(second, xs[2:])
    assert torch.equal(cat_out, torch.cat([xs[2:], xs[:2]]))


def test_constants_of_every_kind():
    b = Builder()
    x = b.input()
    full = b.call("aten::full", b.const(ints=[2, 3]), b.const(float=float("-inf")),
                  dtype=b.const(scalar_type=graph_pb2.SCALAR_TYPE_DOUBLE),
                  device=b.const(device="cpu"), layout=b.const(layout=graph_pb2.LAYOUT_STRIDED))
    cl = b.call("aten::clone", x,
                memory_format=b.const(memory_format=graph_pb2.MEMORY_FORMAT_CHANNELS_LAST))
    idx = b.input()
    picked = b.call("aten::index.Tensor", x, b.const(optional_tensors=[-1, idx]))
    div = b.call("aten::div.Tensor_mode", x, b.const(float=3.0),
                 rounding_mode=b.const(string="floor"))
    total = b.call("aten::sum.dim_IntList", x, b.const(none=True), b.const(bool=True))
    b.output(full, cl, picked, div, total)
    xs = torch.randn(2, 3, 4, 5)
    ids = torch.tensor([0, 2])
    out = b.load()(xs, ids)
    assert out[0].dtype == torch.float64 and out[0].shape == (2, 3)
    assert torch.isinf(out[0]).all()
    assert out[1].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out[2], xs[:, [0, 2]])
    assert torch.equal(out[3], torch.div(xs, 3.0, rounding_mode="floor"))
    torch.testing.assert_close(out[4], xs.sum(dim=None, keepdim=True))


def test_keyword_argument_named_like_a_python_keyword():
    b = Builder()
    x = b.input()
    r = b.call("aten::random_.from", x, **{"from": b.const(int=3), "to": b.const(int=5)})
    b.output(r)
    prog = b.load()
    out, = prog(torch.zeros(100, dtype=torch.int64))
    assert out.min() >= 3 and out.max() <= 4


def test_specialized_inputs_are_checked():
    b = Builder()
    x = b.input()
    n = b.input(specialized=True, int=3)
    f = b.input(specialized=True, float=0.5)
    flag = b.input(specialized=True, bool=True)
    nothing = b.input(specialized=True, none=True)
    word = b.input(specialized=True, string="floor")
    r = b.call("aten::add.Tensor", x, n, alpha=f)
    b.output(r)
    del flag, nothing, word
    prog = b.load()
    xs = torch.randn(3)
    torch.testing.assert_close(prog(xs, 3, 0.5, True, None, "floor")[0], xs + 1.5)
    for bad in [(4, 0.5, True, None, "floor"), (3.0, 0.5, True, None, "floor"),
                (True, 0.5, True, None, "floor"), (3, 1, True, None, "floor"),
                (3, 0.5, 1, None, "floor"), (3, 0.5, True, 0, "floor"),
                (3, 0.5, True, None, "ceil")]:
        with pytest.raises(compiled.SpecializationError) as err:
            prog(xs, *bad)
        assert "specialized" in str(err.value)


def test_unknown_major_version_is_refused_and_minor_is_not():
    b = Builder(major=1, minor=0)
    b.output(b.input())
    with pytest.raises(compiled.ArtifactError, match=r"version 1\.0.*major version 0"):
        b.load()
    b = Builder(major=0, minor=99)
    b.output(b.input())
    xs = torch.randn(2)
    assert b.load()(xs)[0] is xs


def test_malformed_programs_are_refused_at_load():
    b = Builder()
    x = b.input()
    b.output(b.call("aten::add.Tensor", x, b.tensor()))  # reads an unwritten slot
    with pytest.raises(compiled.ArtifactError, match="read before"):
        b.load()
    b = Builder()
    x = b.input()
    b.p.operators.add(name="aten::no_such_op", schema="")
    b.p.instructions.add().kernel.op = 0
    with pytest.raises(compiled.ArtifactError, match="does not exist"):
        b.load()
    b = Builder()
    x = b.input()
    b.p.instructions.add().native.segment = 0
    with pytest.raises(compiled.ArtifactError, match="native"):
        b.load()
    with pytest.raises(compiled.ArtifactError, match="cannot parse"):
        runtime.load(b"\xff\xff\xff")


def test_constant_inputs_bound_at_load():
    b = Builder()
    c = b.input(kind=CONSTANT)
    x = b.input()
    b.output(b.call("aten::mul.Tensor", x, c))
    constant = torch.tensor([1.0, 2.0, 3.0])
    prog = b.load(constants=[constant])
    assert prog.arg_inputs == [1]
    xs = torch.randn(3)
    torch.testing.assert_close(prog(xs)[0], xs * constant)
    with pytest.raises(compiled.ArtifactError, match="CONSTANT"):
        b.load(constants=[])


# -- mutations ---------------------------------------------------------------

def test_mutated_in_graph_leaves_the_write_to_the_program():
    b = Builder()
    x = b.input()
    new = b.call("aten::add.Tensor", x, b.const(int=1))
    b.call("aten::copy_", x, new)
    b.output(x)
    b.p.input_info.add(mutation_type=A.MUTATION_TYPE_MUTATED_IN_GRAPH, mutates_data=True,
                       mutated_output=-1)
    user_output(b, A.OUTPUT_TYPE_IS_INPUT, program_output=0, base_index=0)
    b.p.functional = True
    prog = b.load()
    assert ".copy_(" not in prog.source  # the runtime adds no write of its own
    xs = torch.zeros(3)
    out, = prog(xs)
    assert out is xs and torch.equal(xs, torch.ones(3))


def _data_mutation_program(flags=None):
    """x -> (new x = 2x mutated out of graph, user output new + 1)."""
    b = Builder()
    x = b.input()
    new = b.call("aten::mul.Tensor", x, b.const(int=2))
    out = b.call("aten::add.Tensor", new, b.const(int=1))
    b.output(new, out)
    b.p.num_mutated_outputs = 1
    mutated(b, 0, **(flags or {}))
    user_output(b, A.OUTPUT_TYPE_NON_ALIAS, program_output=1)
    return b


def test_mutated_out_of_graph_data_is_copied_into_the_input():
    prog = _data_mutation_program().load()
    xs = torch.arange(3.0)
    ptr = xs.data_ptr()
    out, = prog(xs)
    assert torch.equal(xs, torch.tensor([0.0, 2.0, 4.0])) and xs.data_ptr() == ptr
    assert torch.equal(out, xs + 1)


def test_mutated_leaf_requiring_grad_is_written_through_detach():
    prog = _data_mutation_program().load()
    xs = torch.arange(3.0, requires_grad=True)
    out, = prog(xs)  # a plain copy_ would raise: leaf requiring grad
    assert xs.is_leaf and xs.requires_grad and xs.grad_fn is None
    assert torch.equal(xs.detach(), torch.tensor([0.0, 2.0, 4.0]))
    out.sum().backward()
    torch.testing.assert_close(xs.grad, torch.full((3,), 2.0))


def test_mutation_of_a_non_leaf_is_seen_by_autograd_unless_hidden():
    leaf = torch.arange(3.0, requires_grad=True)
    y = leaf * 1
    _data_mutation_program().load()(y)
    assert type(y.grad_fn).__name__ == "CopyBackwards"
    y.sum().backward()
    torch.testing.assert_close(leaf.grad, torch.full((3,), 2.0))

    y = torch.arange(3.0, requires_grad=True) * 1
    before = y.grad_fn
    _data_mutation_program({"mutations_hidden_from_autograd": True}).load()(y)
    assert y.grad_fn is before
    assert torch.equal(y.detach(), torch.tensor([0.0, 2.0, 4.0]))


def test_mutated_metadata_only_uses_as_strided_():
    b = Builder()
    x = b.input()
    new = b.call("aten::t", x)
    b.output(new, x)
    b.p.num_mutated_outputs = 1
    mutated(b, 0, data=False, metadata=True)
    user_output(b, A.OUTPUT_TYPE_IS_INPUT, program_output=1, base_index=0)
    xs = torch.arange(6.0).view(2, 3)
    ref = xs.clone().t_()
    ptr = xs.data_ptr()
    out, = b.load()(xs)
    assert out is xs
    assert xs.shape == ref.shape and xs.stride() == ref.stride() and xs.data_ptr() == ptr
    assert torch.equal(xs, ref)


def test_mutated_data_and_metadata_as_strided_then_copy():
    # Eager: x.t_().mul_(2)
    b = Builder()
    x = b.input()
    new = b.call("aten::mul.Tensor", b.call("aten::t", x), b.const(int=2))
    b.output(new, x)
    b.p.num_mutated_outputs = 1
    mutated(b, 0, data=True, metadata=True)
    user_output(b, A.OUTPUT_TYPE_IS_INPUT, program_output=1, base_index=0)
    xs = torch.arange(6.0).view(2, 3)
    ref = xs.clone().t_().mul_(2)
    out, = b.load()(xs)
    assert out is xs and xs.stride() == ref.stride() and torch.equal(xs, ref)


def test_mutations_are_applied_in_input_order_before_outputs_are_rebuilt():
    # x, y both mutated out of graph; the output is a view of x, which must
    # show x's new values.
    b = Builder()
    x, y = b.input(), b.input()
    new_x = b.call("aten::add.Tensor", x, b.const(int=10))
    new_y = b.call("aten::add.Tensor", y, b.const(int=20))
    view = b.call("aten::view", new_x, b.const(ints=[-1]))
    b.output(new_x, new_y, view)
    b.p.num_mutated_outputs = 2
    mutated(b, 0)
    mutated(b, 1)
    info = user_output(b, A.OUTPUT_TYPE_ALIAS_OF_INPUT, program_output=2, base_index=0)
    b.step(info, "aten::view", -1, b.const(ints=[-1]))
    prog = b.load()
    src = prog.source
    assert src.index("a0.copy_") < src.index("a1.copy_") < src.index("u0 = a0")
    xs, ys = torch.zeros(2, 2), torch.zeros(3)
    out, = prog(xs, ys)
    assert torch.equal(out, torch.full((4,), 10.0)) and torch.equal(ys, torch.full((3,), 20.0))
    assert out._base is xs


def test_bad_mutation_metadata_is_refused():
    b = _data_mutation_program()
    b.p.input_info[0].mutated_output = 1  # not a leading output
    with pytest.raises(compiled.ArtifactError, match="mutated_output"):
        b.load()
    b = _data_mutation_program()
    b.p.num_mutated_outputs = 0  # layout does not add up
    with pytest.raises(compiled.ArtifactError, match="outputs"):
        b.load()
    b = _data_mutation_program()
    b.p.input_info[0].mutates_storage_metadata = True
    with pytest.raises(compiled.ArtifactError, match="storage"):
        b.load()


# -- outputs -----------------------------------------------------------------

def test_is_input_returns_the_callers_object():
    b = Builder()
    x = b.input()
    b.output(b.call("aten::clone", x))  # the program's own value is not returned
    not_mutated(b)
    user_output(b, A.OUTPUT_TYPE_IS_INPUT, base_index=0)
    xs = torch.randn(3)
    assert b.load()(xs)[0] is xs


def test_alias_of_input_replays_the_view_chain():
    b = Builder()
    x = b.input()
    v = b.call("aten::select.int", b.call("aten::view", x, b.const(ints=[2, 6])),
               b.const(int=0), b.const(int=1))
    b.output(v)
    info = user_output(b, A.OUTPUT_TYPE_ALIAS_OF_INPUT, base_index=0)
    b.step(info, "aten::view", -1, b.const(ints=[2, 6]))
    b.step(info, "aten::select.int", -1, b.const(int=0), b.const(int=1))
    xs = torch.randn(3, 4)
    out, = b.load()(xs)
    ref = xs.view(2, 6).select(0, 1)
    assert torch.equal(out, ref) and out.stride() == ref.stride()
    assert out._base is xs  # a real view of the caller's tensor
    assert "as_strided" not in b.load().source


def test_alias_of_input_view_chain_with_list_item():
    b = Builder()
    x = b.input()
    items = b.const(tensors=[b.tensor(), b.tensor()])
    b.call("aten::unbind.int", x, outputs=[items])
    b.output(b.p.values[items].tensors.items[1])
    info = user_output(b, A.OUTPUT_TYPE_ALIAS_OF_INPUT, base_index=0)
    b.step(info, "aten::unbind.int", -1, item=1)
    xs = torch.randn(2, 3)
    out, = b.load()(xs)
    assert torch.equal(out, xs[1]) and out._base is xs


def test_view_step_item_is_ignored_for_single_result_views():
    # proto3 leaves item at 0 when an emitter forgets -1: never index a tensor.
    b = Builder()
    x = b.input()
    b.output(b.call("aten::view", x, b.const(ints=[-1])))
    info = user_output(b, A.OUTPUT_TYPE_ALIAS_OF_INPUT, base_index=0)
    b.step(info, "aten::view", -1, b.const(ints=[-1]), item=0)
    xs = torch.randn(2, 3)
    out, = b.load()(xs)
    assert out.shape == (6,) and out._base is xs


def test_alias_of_input_as_strided():
    b = Builder()
    x = b.input()
    b.output(b.call("aten::t", x))
    info = user_output(b, A.OUTPUT_TYPE_ALIAS_OF_INPUT, base_index=0)
    info.as_strided.size.extend([3, 2])
    info.as_strided.stride.extend([1, 3])
    info.as_strided.storage_offset = 0
    prog = b.load()
    assert "_as_strided(a0, (3, 2), (1, 3), 0)" in prog.source
    xs = torch.randn(2, 3)
    out, = prog(xs)
    assert torch.equal(out, xs.t()) and out.stride() == (1, 3) and shares_storage(out, xs)


def test_alias_requires_grad_fixup():
    # Eager returned x.detach().view(-1): no grad, same storage.
    b = Builder()
    x = b.input()
    b.output(b.call("aten::view", x, b.const(ints=[-1])))
    info = user_output(b, A.OUTPUT_TYPE_ALIAS_OF_INPUT, base_index=0, requires_grad=False)
    b.step(info, "aten::view", -1, b.const(ints=[-1]))
    xs = torch.randn(2, 2, requires_grad=True)
    out, = b.load()(xs)
    assert not out.requires_grad and shares_storage(out, xs)
    b.p.output_info[0].requires_grad = True
    out, = b.load()(xs)
    assert out.requires_grad and out.grad_fn is not None


def test_aliases_of_an_intermediate_base():
    # y = 2x; return y.view(-1), y.t()   (training: two aliases escape)
    b = Builder()
    x = b.input()
    base = b.call("aten::mul.Tensor", x, b.const(int=2))
    o0 = b.call("aten::view", base, b.const(ints=[-1]))
    o1 = b.call("aten::t", base)
    b.output(o0, o1, base)
    b.p.num_intermediate_bases = 1
    b.p.training = True
    i0 = user_output(b, A.OUTPUT_TYPE_ALIAS_OF_INTERMEDIATE_SAVE_AS_OUTPUT, 0, 0, True)
    b.step(i0, "aten::view", -1, b.const(ints=[-1]))
    i1 = user_output(b, A.OUTPUT_TYPE_ALIAS_OF_INTERMEDIATE, 1, 0, True)
    i1.as_strided.size.extend([3, 2])
    i1.as_strided.stride.extend([1, 3])
    xs = torch.randn(2, 3, requires_grad=True)
    out = b.load()(xs)
    assert len(out) == 2  # the intermediate base is dropped
    torch.testing.assert_close(out[0], (2 * xs).view(-1))
    torch.testing.assert_close(out[1], (2 * xs).t())
    assert out[0]._base is out[1]._base and out[0]._base is not None
    assert out[0].requires_grad and out[1].requires_grad
    (out[0].sum() + out[1].sum()).backward()
    torch.testing.assert_close(xs.grad, torch.full((2, 3), 4.0))


def test_alias_whose_base_is_another_user_output():
    # y = 2x; return y, y.view(-1)  -- output 1 is listed first on purpose
    b = Builder()
    x = b.input()
    y = b.call("aten::mul.Tensor", x, b.const(int=2))
    v = b.call("aten::view", y, b.const(ints=[-1]))
    b.output(v, y)
    i0 = user_output(b, A.OUTPUT_TYPE_ALIAS_OF_INTERMEDIATE_BASE_IS_USER_OUTPUT, 0, 1)
    b.step(i0, "aten::view", -1, b.const(ints=[-1]))
    user_output(b, A.OUTPUT_TYPE_NON_ALIAS, program_output=1)
    xs = torch.randn(2, 3)
    flat_view, full = b.load()(xs)
    assert flat_view._base is full and torch.equal(flat_view, (2 * xs).view(-1))


def test_output_alias_cycle_is_refused():
    b = Builder()
    x = b.input()
    b.output(x, x)
    i0 = user_output(b, A.OUTPUT_TYPE_ALIAS_OF_INTERMEDIATE_BASE_IS_USER_OUTPUT, 0, 1)
    i1 = user_output(b, A.OUTPUT_TYPE_ALIAS_OF_INTERMEDIATE_BASE_IS_USER_OUTPUT, 1, 0)
    i0.as_strided.size.append(1)
    i1.as_strided.size.append(1)
    with pytest.raises(compiled.ArtifactError, match="cycle"):
        b.load()


@pytest.mark.parametrize("output_type", [A.OUTPUT_TYPE_NON_ALIAS, A.OUTPUT_TYPE_UNSAFE_VIEW_ALIAS,
                                         A.OUTPUT_TYPE_CUSTOM_FUNCTION_VIEW])
def test_outputs_returned_as_they_are(output_type):
    b = Builder()
    x = b.input()
    y = b.call("aten::_unsafe_view", b.call("aten::mul.Tensor", x, b.const(int=3)),
               b.const(ints=[-1]))
    b.output(y)
    user_output(b, output_type, program_output=0)
    xs = torch.randn(2, 2)
    out, = b.load()(xs)
    assert torch.equal(out, (xs * 3).view(-1)) and not shares_storage(out, xs)


def test_empty_metadata_means_not_mutated_and_non_alias():
    # A non-functional program: in-place ops run on the caller's tensors.
    b = Builder(minor=1)
    x = b.input()
    r = b.call("aten::add_.Tensor", x, b.const(int=1))
    b.output(r)
    xs = torch.zeros(2)
    out, = b.load()(xs)
    assert out is xs and torch.equal(xs, torch.ones(2))


Point = collections.namedtuple("Point", "x y")


def test_output_structures():
    def structure(value):
        return torch.utils._pytree.tree_flatten(value)[1]

    b = Builder()
    x = b.input()
    one = b.call("aten::add.Tensor", x, b.const(int=1))
    two = b.call("aten::add.Tensor", x, b.const(int=2))
    b.output(one, two, one)
    xs = torch.zeros(2)
    spec = structure({"a": [Point(0, 0)], 5: (0,)})
    out = b.load(out_spec=spec)(xs)
    assert list(out) == ["a", 5] and isinstance(out["a"], list)
    assert isinstance(out["a"][0], Point) and isinstance(out[5], tuple)
    assert torch.equal(out["a"][0].y, xs + 2) and torch.equal(out[5][0], xs + 1)
    od = b.load(out_spec=structure(collections.OrderedDict(p=0, q=0, r=0)))(xs)
    assert isinstance(od, collections.OrderedDict) and list(od) == ["p", "q", "r"]
    b2 = Builder()
    b2.output(b2.input())
    single = b2.load(out_spec=structure(0))(xs)
    assert single is xs
    with pytest.raises(compiled.ArtifactError, match="leaves"):
        b.load(out_spec=structure((0, 0)))


# ---------------------------------------------------------------------------
# Part 2: with a daemon.
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = daemon_util.Daemon(tmp_path_factory.mktemp("daemon")).start()
    yield d
    d.stop()


def _requests(daemon):
    return daemon.stats().requests


def test_client_compile_inline_and_channel_reuse(daemon):
    gm = compiled.capture(lambda x: x.relu(), (torch.randn(3),))
    client = compiled.Client(daemon.address)
    key, data = client.compile(gm)
    assert len(key) == 64
    art = runtime.parse_artifact(data)
    assert art.key == key
    assert client_module.get_client(daemon.address) is client_module.get_client(daemon.address)
    assert client_module._channel(daemon.address) is client_module._channel(daemon.address)


def test_client_address_from_environment(monkeypatch):
    monkeypatch.setenv("COMPILED_SERVER", "10.1.2.3:99")
    assert compiled.Client().address == "10.1.2.3:99"
    assert compiled.Client("h:1").address == "h:1"
    monkeypatch.delenv("COMPILED_SERVER")
    assert compiled.Client().address == "127.0.0.1:7421"


def test_client_fetches_large_artifacts_with_digest_check(tmp_path):
    d = daemon_util.Daemon(tmp_path, "--max-inline-bytes", "1").start()
    try:
        gm = compiled.capture(lambda x: (x * 2).sum(), (torch.randn(3),))
        outcome = compiled.Client(d.address).compile_outcome(gm)
        assert not outcome.result.artifact_inline
        assert runtime.parse_artifact(outcome.artifact).key == outcome.key
        with pytest.raises(compiled.DaemonError, match="SHA-256"):
            compiled.Client(d.address).fetch(outcome.key, digest="00" * 32)
    finally:
        d.stop()


def test_client_maps_errors(daemon):
    gm = compiled.capture(lambda x: x.relu(), (torch.randn(3),))
    with pytest.raises(compiled.DaemonUnavailable):
        compiled.Client(daemon_util.closed_address(), timeout=10).compile(gm)
    broken = graph_pb2.GraphModule()
    broken.CopyFrom(gm)
    broken.graph.nodes[0].target = "aten::nope"
    with pytest.raises(compiled.CompileError) as err:
        compiled.Client(daemon.address).compile(broken)
    e = err.value
    assert e.node == 0 and "aten::nope" in str(e) and e.error_code
    assert e.code.name == "INVALID_ARGUMENT"


def test_compile_matches_eager_with_pytree_outputs(daemon):
    def f(x, pair, n):
        a, b = pair
        y = x * n + a
        return {"sum": y.sum(), "parts": [y[0], (b, y.t())], "n": n}

    args = (torch.randn(2, 3), (torch.randn(3), torch.randn(4)), 3)
    cf = compiled.compile(f, args, server=daemon.address)
    out, ref = cf(*args), f(*args)
    assert isinstance(out, dict) and list(out) == ["sum", "parts", "n"]
    assert isinstance(out["parts"], list) and isinstance(out["parts"][1], tuple)
    flat_out = torch.utils._pytree.tree_flatten(out)[0]
    flat_ref = torch.utils._pytree.tree_flatten(ref)[0]
    for o, r in zip(flat_out, flat_ref):
        if isinstance(r, torch.Tensor):
            torch.testing.assert_close(o, r)
        else:
            assert o == r
    assert "def program" in cf.sources()


def test_same_signature_runs_without_the_daemon_and_new_ones_recompile(daemon):
    def f(x, y):
        return x @ y + 1

    x, y = torch.randn(4, 5), torch.randn(5, 3)
    # static programs: by default a dim seen with two sizes becomes a size
    # symbol, and that program serves the storage offset variant below
    # (test_dynamic_client)
    cf = compiled.compile(f, (x, y), server=daemon.address, dynamic=False)
    assert cf.compiles == 1
    before = _requests(daemon)
    for _ in range(3):
        torch.testing.assert_close(cf(x, y), f(x, y))
    x2, y2 = torch.randn(4, 5), torch.randn(5, 3)  # new tensors, same signature
    torch.testing.assert_close(cf(x2, y2), f(x2, y2))
    assert cf.compiles == 1 and _requests(daemon) == before  # no daemon call at all

    variants = [
        (torch.randn(6, 5), y),                            # shape
        (x.double(), y.double()),                          # dtype
        (torch.randn(5, 4).t(), y),                        # strides
        (x[1:], y),                                        # storage offset (and shape)
        (x.clone().requires_grad_(), y),                   # requires_grad
    ]
    expected = 1
    stats = daemon.stats()
    daemon_requests = stats.compiles + stats.hits
    for args in variants:
        # a signature that needs gradients compiles a forward and a backward
        expected += 2 if any(a.requires_grad for a in args) else 1
        out = cf(*args)
        assert cf.compiles == expected
        torch.testing.assert_close(out, f(*args))
        out = cf(*args)
        assert cf.compiles == expected  # the same signature again: no compile
    # one request per program (the forward of the requires_grad variant
    # is the first program's graph: a cache hit)
    stats = daemon.stats()
    assert stats.compiles + stats.hits == daemon_requests + expected - 1
    before = _requests(daemon)
    cf(x, y)
    assert cf.compiles == expected and _requests(daemon) == before  # still loaded


def test_recompile_on_storage_sharing_grad_mode_and_numbers(daemon):
    def f(a, b, scale):
        a.add_(b)
        return a * scale

    base = torch.zeros(8)
    args = (torch.ones(4), torch.ones(4), 2.0)
    cf = compiled.compile(f, args, server=daemon.address)
    n = cf.compiles
    # Same metadata, but now both inputs live in one storage (not overlapping).
    a, b = base[:4], base[4:]
    b.fill_(1)
    out = cf(a, b, 2.0)
    assert cf.compiles == n + 1 and torch.equal(base[:4], torch.ones(4))
    torch.testing.assert_close(out, torch.full((4,), 2.0))
    cf(torch.ones(4), torch.ones(4), 3.0)   # another number
    assert cf.compiles == n + 2
    with torch.no_grad():
        cf(torch.ones(4), torch.ones(4), 2.0)  # another grad mode
    assert cf.compiles == n + 3


def test_input_mutation_and_identity_through_compile(daemon):
    def f(x):
        x.mul_(2)
        return x, x + 1

    x = torch.arange(3.0)
    cf = compiled.compile(f, (x,), server=daemon.address)
    assert torch.equal(x, torch.arange(3.0))  # compile() did not touch it
    out, plus = cf(x)
    assert out is x and torch.equal(x, torch.arange(3.0) * 2)  # mutated exactly once
    assert torch.equal(plus, x + 1)


def test_example_inputs_never_modified_by_compile(daemon):
    def f(x, y):
        x.add_(1)
        y.t_()
        return x + y.sum()

    x, y = torch.randn(3), torch.randn(2, 3)
    snapshot = [(t.clone(), t._version, t.shape, t.stride(), t.data_ptr()) for t in (x, y)]
    bn = torch.nn.BatchNorm1d(3).train()
    bn_state = {k: (v.clone(), v._version) for k, v in bn.state_dict().items()}
    compiled.compile(f, (x, y), server=daemon.address)
    compiled.compile(bn, (torch.randn(4, 3),), server=daemon.address)
    for t, (value, version, shape, stride, ptr) in zip((x, y), snapshot):
        assert torch.equal(t, value) and t._version == version
        assert t.shape == shape and t.stride() == stride and t.data_ptr() == ptr
    for k, v in bn.state_dict().items():
        assert torch.equal(v, bn_state[k][0]) and v._version == bn_state[k][1]


def test_module_state_is_read_at_call_time(daemon):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 4)
    cf = compiled.compile(m, (x,), server=daemon.address)
    torch.testing.assert_close(cf(x), m(x))
    other = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    m.load_state_dict(other.state_dict())
    n = cf.compiles
    torch.testing.assert_close(cf(x), other(x))
    assert cf.compiles == n  # same metadata: same program, new values
    m.double()  # .to(): parameters change dtype in place (param.data = ...)
    out = cf(x.double())
    # parameters require grad: a forward and a backward program
    assert out.dtype == torch.float64 and cf.compiles == n + 2
    torch.testing.assert_close(out, other.double()(x.double()))
    m[2] = torch.nn.Linear(8, 5).double()  # a submodule replaced
    out = cf(x.double())
    assert out.shape == (3, 5)
    torch.testing.assert_close(out, m(x.double()))


def test_the_hot_path_holds_only_the_programs_arguments(daemon):
    """While a cached program runs, the calling frame holds its arguments
    and nothing else it built: the state tuple and the training flags (a
    ResNet's are over 512 bytes each, so malloc'd memory on top of eager's
    at the call's peak) are dropped before the call."""
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()).eval()
    x = torch.randn(3, 4)
    with torch.no_grad():
        cf = compiled.compile(m, (x,), server=daemon.address)
        cf(x)
        (key, entry), = cf._entries.items()
        seen = {}

        def spy(*args):
            caller = sys._getframe(1).f_locals
            seen.update(state=caller.get("state"), flags=caller.get("flags"), n=len(args))
            return entry(*args)
        cf._entries[key] = spy
        torch.testing.assert_close(cf(x), m(x))
    assert seen == {"state": None, "flags": None, "n": 3}, seen  # weight, bias, x


def test_module_parameters_replaced_or_removed(daemon):
    m = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    cf = compiled.compile(m, (x,), server=daemon.address)
    m.weight = torch.nn.Parameter(torch.randn(2, 3))  # a new object, same metadata
    n = cf.compiles
    torch.testing.assert_close(cf(x), m(x))
    assert cf.compiles == n
    m.bias = None  # a parameter removed: the state layout changes
    torch.testing.assert_close(cf(x), m(x))
    assert cf.compiles == n + 2  # a forward and a backward program
    del m.weight
    m.register_buffer("weight", torch.randn(2, 3))  # now a buffer
    torch.testing.assert_close(cf(x), m(x))


def test_module_train_eval_and_requires_grad_are_guarded(daemon):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).eval()
    ref = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).eval()
    ref.load_state_dict(m.state_dict())
    x = torch.randn(16, 4)
    cf = compiled.compile(m, (x,), server=daemon.address)
    torch.testing.assert_close(cf(x), ref(x))
    m.train()
    ref.train()
    torch.testing.assert_close(cf(x), ref(x))  # batch statistics now
    # parameters require grad: each signature compiles a forward and a backward
    assert cf.compiles == 4
    torch.testing.assert_close(m[1].running_mean, ref[1].running_mean)
    m.eval()
    ref.eval()
    torch.testing.assert_close(cf(x), ref(x))
    assert cf.compiles == 4  # back to the first programs
    m.requires_grad_(False)
    out = cf(x)
    assert cf.compiles == 5 and not out.requires_grad


def test_random_numbers_match_eager_on_a_recompiling_call(daemon):
    def f(x):
        return x + torch.rand_like(x)

    cf = compiled.compile(f, (torch.zeros(3),), server=daemon.address)
    x = torch.zeros(5)
    torch.manual_seed(1)
    ref = f(x)
    torch.manual_seed(1)
    out = cf(x)  # a new signature: captured now; the capture draws nothing
    assert cf.compiles == 2
    torch.testing.assert_close(out, ref)


def test_dropout_in_training_matches_eager(daemon):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train()
    x = torch.randn(64, 4)
    cf = compiled.compile(m, (x,), server=daemon.address, eager_random=True)
    torch.manual_seed(1)
    ref = m(x)
    torch.manual_seed(1)
    torch.testing.assert_close(cf(x), ref)


def test_batchnorm_training_updates_buffers_like_eager(daemon):
    torch.manual_seed(0)
    m = torch.nn.BatchNorm1d(3).train()
    ref = torch.nn.BatchNorm1d(3).train()
    x = torch.randn(8, 3)
    cf = compiled.compile(m, (x,), server=daemon.address)
    for _ in range(2):
        torch.testing.assert_close(cf(x), ref(x))
    torch.testing.assert_close(m.running_mean, ref.running_mean)
    torch.testing.assert_close(m.running_var, ref.running_var)
    assert m.num_batches_tracked.item() == 2


def test_keyword_arguments_are_bound(daemon):
    def f(x, y=None, scale=1.0):
        return x * scale if y is None else (x + y) * scale

    x, y = torch.randn(3), torch.randn(3)
    cf = compiled.compile(f, (x, y, 2.0), server=daemon.address)
    torch.testing.assert_close(cf(x, y=y, scale=2.0), f(x, y, 2.0))
    torch.testing.assert_close(cf(x, scale=3.0), f(x, None, 3.0))


def test_daemon_unreachable_runs_eagerly_and_warns_once():
    def f(x):
        x.add_(1)
        return x * 2

    x = torch.zeros(3)
    address = daemon_util.closed_address()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cf = compiled.compile(f, (x,), server=address)
        assert torch.equal(x, torch.zeros(3))
        out = cf(x)
        out2 = cf(torch.zeros(5))  # a new signature: also eager, no second warning
    assert torch.equal(x, torch.ones(3)) and torch.equal(out, torch.full((3,), 2.0))
    assert torch.equal(out2, torch.full((5,), 2.0))
    ours = [w for w in caught if issubclass(w.category, compiled.DaemonUnavailableWarning)]
    assert len(ours) == 1 and address in str(ours[0].message)
    assert ours[0].filename == __file__  # it points at the user's line
    assert cf.compiles == 0


def test_compile_is_retried_when_the_daemon_comes_back(daemon, monkeypatch):
    monkeypatch.setattr(frontend, "RETRY_FIRST", 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", compiled.DaemonUnavailableWarning)
        cf = compiled.compile(lambda x: x - 1, (torch.ones(2),), server=daemon_util.closed_address())
    assert cf.compiles == 0
    cf._client = compiled.Client(daemon.address)  # the daemon is back
    assert torch.equal(cf(torch.ones(2)), torch.zeros(2))
    assert cf.compiles == 1


def test_busy_daemon_falls_back_like_an_unreachable_one(monkeypatch):
    def busy(self, *a, **kw):
        raise compiled.DaemonBusy("Compile: daemon busy: queue full")
    monkeypatch.setattr(client_module.Client, "compile", busy)
    with pytest.warns(compiled.DaemonUnavailableWarning, match="busy"):
        cf = compiled.compile(lambda x: x + 1, (torch.ones(2),), server="127.0.0.1:1")
    assert torch.equal(cf(torch.ones(2)), torch.full((2,), 2.0))


@pytest.mark.parametrize("code", ["UNAVAILABLE", "CANCELLED", "DEADLINE_EXCEEDED",
                                  "RESOURCE_EXHAUSTED", "INTERNAL", "UNKNOWN"])
def test_daemon_failures_that_are_not_graph_errors_run_eagerly(monkeypatch, code):
    """Whatever goes wrong on the daemon's side (stopping, cut calls,
    deadlines, overload, its own bugs) is never raised into the user's
    program: the call runs eagerly and the compile is retried later."""
    import grpc

    status = getattr(grpc.StatusCode, code)
    calls = []

    def failing(self, *a, **kw):
        calls.append(1)
        raise client_module._map_rpc_error(_FakeRpcError(status, "boom"), "Compile")
    monkeypatch.setattr(client_module.Client, "compile", failing)
    monkeypatch.setattr(frontend, "RETRY_FIRST", 0.0)
    with pytest.warns(compiled.DaemonUnavailableWarning, match=code):
        cf = compiled.compile(lambda x: x * 3, (torch.ones(2),), server="127.0.0.1:1")
    assert torch.equal(cf(torch.ones(2)), torch.full((2,), 3.0))
    assert len(calls) == 2  # retried on the next call (RETRY_FIRST is 0)


class _FakeRpcError(Exception):
    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return ()


def test_graph_error_is_raised_with_node_information(daemon, monkeypatch):
    real_trace = frontend._capture.trace

    def broken_trace(fn, args):
        captured = real_trace(fn, args)
        msg = captured.graph_module
        msg.graph.nodes[1].target = "aten::nope"
        captured.graph_bytes = msg.SerializeToString()  # what the request carries
        return captured

    monkeypatch.setattr(frontend._capture, "trace", broken_trace)
    with pytest.raises(compiled.CompileError) as err:
        compiled.compile(lambda x: (x + 1).relu(), (torch.randn(3),), server=daemon.address)
    assert err.value.node == 1 and "aten::nope" in err.value.message


def test_backend_on_a_make_fx_graph_module(daemon, monkeypatch):
    monkeypatch.setenv("COMPILED_SERVER", daemon.address)  # backend() has no server argument

    def f(x, y):
        c = torch.tensor([1.0, 2.0, 3.0])  # a get_attr constant in the FX graph
        return (torch.sin(x) * c + y, y.sum())

    x, y = torch.randn(3), torch.randn(3)
    gm = make_fx(f)(x, y)
    assert any(n.op == "get_attr" for n in gm.graph.nodes)
    fn = compiled.backend(gm, [x, y])
    assert fn.compiles == 1
    out, ref = fn(x, y), gm(x, y)
    assert isinstance(out, tuple) and len(out) == 2
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r)
    x2 = torch.randn(3)
    torch.testing.assert_close(fn(x2, y)[0], gm(x2, y)[0])


def test_backend_is_an_aot_autograd_compiler_without_warnings(daemon, monkeypatch):
    """compiled.backend as functorch's fw_compiler and bw_compiler: the boxed
    calling convention, so AOTAutograd does not warn; values and gradients
    match eager."""
    from functorch.compile import aot_function
    monkeypatch.setenv("COMPILED_SERVER", daemon.address)

    def f(x, w, b):
        return torch.nn.functional.gelu(x @ w + b).sum(dim=1)

    torch.manual_seed(0)
    x = torch.randn(4, 8)
    w = torch.randn(8, 6, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # AOTAutograd's "boxed arguments" warning fails the test
        g = aot_function(f, fw_compiler=compiled.backend, bw_compiler=compiled.backend)
        out = g(x, w, b)
        out.sum().backward()
    ref = f(x, w.detach().requires_grad_(), b.detach().requires_grad_())
    torch.testing.assert_close(out, ref)
    w2, b2 = w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    f(x, w2, b2).sum().backward()
    torch.testing.assert_close(w.grad, w2.grad)
    torch.testing.assert_close(b.grad, b2.grad)
    fn = compiled.backend(make_fx(f)(x, w.detach(), b.detach()), [x, w.detach(), b.detach()])
    torch.testing.assert_close(fn([x, w.detach(), b.detach()])[0], fn(x, w.detach(), b.detach())[0])


def test_undefined_tensor_returns_multi_head_attention(daemon):
    """_native_multi_head_attention leaves its weights output undefined
    (None) without need_weights: capture, validation, functionalization and
    the runtime carry the None through, and the result is eager's."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x = torch.randn(2, 5, 16)

    def f(x):
        return mha(x, x, x, need_weights=False)

    with torch.no_grad():
        cf = compiled.compile(f, (x,), server=daemon.address)
        out, weights = cf(x)
        ref, ref_weights = f(x)
    assert cf.compiles == 1
    assert weights is None and ref_weights is None
    torch.testing.assert_close(out, ref)


def test_undefined_tensor_returns_convolution_backward(daemon, monkeypatch):
    """AOTAutograd's backward graph of a conv net calls convolution_backward
    with an output_mask that leaves gradients undefined (no bias, no input
    gradient for the first layer)."""
    from functorch.compile import aot_module
    monkeypatch.setenv("COMPILED_SERVER", daemon.address)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(),
                                torch.nn.Conv2d(4, 2, 3, bias=False))
    x = torch.randn(2, 3, 8, 8)
    compiled_model = aot_module(model, fw_compiler=compiled.backend,
                                bw_compiler=compiled.backend)
    out = compiled_model(x)
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    ref = model(x)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad)
