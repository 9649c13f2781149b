"""Code run through `compiled` gives exactly eager PyTorch's results.

Eager PyTorch is the only oracle. Every program below runs twice on two
independent but identical sets of inputs (built by a seeded factory, so that
values, layouts and storage sharing between inputs are the same): once
eagerly, once through ``compiled.compile(...)`` against a real daemon. The
harness (semantics_util.py) then demands of the compiled run everything the
eager run did: output values/dtypes/shapes (strides where the output is a
view), the inputs' values and metadata afterwards (data and metadata
mutations applied), object identity (an output that *is* an input), storage
sharing between outputs and inputs, ``_version`` bumps and autograd flags,
and gradients where a program is differentiated.

Each compiled callable is called twice on fresh inputs (different seeds), the
first call's results are checked again after the second (the runtime must not
hand out buffers it reuses), and a second ``compiled.compile`` of the same
program (a daemon cache hit) is called once more. Every program runs both
with the default ``keep_input_mutations=True`` (``test_program``) and with
``False`` (``test_program_mutations_applied_by_runtime``: the runtime applies
every input mutation itself, as it always does in training).

Where eager raises, compiled must raise the same kind of error (or refuse
with ``compiled.CompileError`` / ``compiled.CaptureError``), leaving the
inputs as eager left them. Where two inputs overlap in memory and one is
mutated, compiled must either match eager or raise ``compiled.CompileError``
naming both inputs; an accepted refusal is reported as a ``SemanticsNote``
warning so that a reader of the report sees which one happened.

``test_harness_*`` check the harness itself with eager-only runners: eager vs
eager must pass every check, and a naive runner that works on copies of its
inputs must be caught wherever eager mutates or aliases an input.

Run: cd /work/main && make && PYTHONPATH=client/python /usr/bin/python3 -m pytest -q -rw tests/python/test_semantics.py
(-rw lists the SemanticsNote warnings: which refusals were accepted.)
"""

import copy
import math
import sys
import warnings

import pytest
import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

import compiled
import visionmodels
from daemon_util import Daemon
from semantics_util import (Case, Errors, Gen, Inputs, backward_and_compare, call, compare_inputs,
                            compare_runs, mutated_or_aliased, note, prepare, run_eager)

pytestmark = [
    pytest.mark.filterwarnings("ignore:An output with one or more elements was resized"),
]


# ---------------------------------------------------------------------------
# The daemon and the API under test.
# ---------------------------------------------------------------------------


def _require_runtime():
    missing = [n for n in ("compile", "backend", "CompileError") if not hasattr(compiled, n)]
    if missing:
        pytest.fail("the compiled runtime is missing: compiled.%s" % ", compiled.".join(missing),
                    pytrace=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    _require_runtime()
    d = Daemon(tmp_path_factory.mktemp("semantics")).start()
    try:
        yield d.address
    finally:
        d.stop()


@pytest.fixture(autouse=True)
def _no_silent_eager_fallback():
    """compile() may fall back to eager execution when it cannot reach the
    daemon (with a DaemonUnavailableWarning): here that would make every
    comparison trivially pass, so it is an error."""
    cls = getattr(compiled, "DaemonUnavailableWarning", None) or getattr(
        sys.modules.get("compiled.errors"), "DaemonUnavailableWarning", None)
    with warnings.catch_warnings():
        if cls is not None:
            warnings.simplefilter("error", cls)
        yield


def _refusals():
    return tuple(getattr(compiled, n) for n in ("CompileError", "CaptureError") if hasattr(compiled, n))


class _NoCompileError(Exception):
    """Stands in for compiled.CompileError while the runtime is missing
    (the harness self-tests run without it)."""


def _compile_error():
    return getattr(compiled, "CompileError", _NoCompileError)


# ---------------------------------------------------------------------------
# Input factories.
# ---------------------------------------------------------------------------


def x34(seed):
    return Inputs(Gen(seed).randn(3, 4))


def x44(seed):
    return Inputs(Gen(seed).randn(4, 4))


def xy34(seed):
    g = Gen(seed)
    return Inputs(g.randn(3, 4), g.randn(3, 4))


def xy44(seed):
    g = Gen(seed)
    return Inputs(g.randn(4, 4), g.randn(4, 4))


def x64(seed):
    return Inputs(Gen(seed).randn(6, 4))


def x314(seed):
    return Inputs(Gen(seed).randn(3, 1, 4))


def row_col(seed):
    """Two inputs cut from one base, overlapping at base[0, 1]."""
    base = Gen(seed).randn(4, 4)
    return Inputs(base[0], base[:, 1], observe=[base])


def row_row(seed):
    """Two inputs cut from one base, disjoint (rows 0 and 1)."""
    base = Gen(seed).randn(4, 4)
    return Inputs(base[0], base[1], observe=[base])


def same_twice(seed):
    x = Gen(seed).randn(3, 4)
    return Inputs(x, x)


def two_distinct_rows(seed):
    g = Gen(seed)
    return Inputs(g.randn(4), g.randn(4))


def noncontig_view_input(seed):
    base = Gen(seed).randn(4, 5)
    return Inputs(base[1:3, 1:], observe=[base])


def leaf_rg(seed):
    return Inputs(Gen(seed).randn(3, 4, requires_grad=True))


def leaves_xy_rg(seed):
    g = Gen(seed)
    return Inputs(g.randn(3, 4, requires_grad=True), g.randn(3, 4, requires_grad=True))


def nonleaf(seed):
    w = Gen(seed).randn(3, 4, requires_grad=True)
    return Inputs(w * 2, leaves=[w])


def nonleaf_and_leaf(seed):
    g = Gen(seed)
    w = g.randn(3, 4, requires_grad=True)
    y = g.randn(4, requires_grad=True)
    return Inputs(w * 1, y, leaves=[w])


def rg_and_plain(seed):
    g = Gen(seed)
    return Inputs(g.randn(3, 4, requires_grad=True), g.randn(3, 4))


# ---------------------------------------------------------------------------
# Programs. Parameter names matter: they name the graph's inputs, which a
# refusal must mention.
# ---------------------------------------------------------------------------

CASES = []


def case(make, **kw):
    def deco(fn):
        CASES.append(Case(fn.__name__, fn, make, **kw))
        return fn
    return deco


# -- in-place on inputs -------------------------------------------------------------


@case(x34)
def inplace_add_scalar_returns_none(x):
    x.add_(1)


@case(xy34)
def inplace_mul_by_other_input(x, y):
    x.mul_(y)
    return y - 1


@case(xy34)
def inplace_several_on_one_input(x, y):
    x.add_(1)
    x.mul_(y)
    x.sub_(0.5)
    x.div_(2)
    return x.sum(0)


@case(xy34)
def inplace_input_read_later(x, y):
    x.add_(1)
    z = x * y
    x.mul_(2)
    return z, x + 1


@case(x34)
def inplace_input_returned(x):
    x.add_(1)
    return x


@case(x34)
def inplace_result_and_input_returned(x):
    z = x.mul_(2)
    return z, x


@case(xy34)
def inplace_returns_other_value(x, y):
    x.mul_(2)
    return y + 1


@case(xy34)
def inplace_two_inputs_each_other(x, y):
    x.add_(y)
    y.mul_(x)
    return x - y


@case(noncontig_view_input)
def inplace_noncontiguous_view_input(x):
    x.mul_(2)
    return x.sum(1)


# -- in-place through views ------------------------------------------------------------


@case(x44)
def view_slice_mul(x):
    x[1:3].mul_(2)
    return x.sum()


@case(x34)
def view_strided_slice_zero(x):
    x[:, ::2].zero_()
    return x * 1


@case(xy34)
def view_select_add(x, y):
    x[0].add_(y[0])
    return x.mean(0)


@case(x34)
def view_select_column_fill_returned(x):
    x[:, 1].fill_(3)
    return x


@case(x34)
def view_transpose_select_add(x):
    x.t()[0].add_(1)
    return x.sum(1)


@case(xy44)
def view_transpose_mul(x, y):
    x.transpose(0, 1).mul_(2)
    return y.mm(x)


@case(x44)
def view_diagonal_add(x):
    x.diagonal().add_(1)
    return x.diagonal().clone(), x.sum()


def _expand_inputs(seed):
    g = Gen(seed)
    return Inputs(g.randn(4), g.randn(3, 4))


@case(_expand_inputs)
def view_expand_read_only(x, y):
    e = x.expand(3, 4)
    return e * y, e


@case(_expand_inputs, eager_raises=True)
def view_expand_write_raises(x, y):
    x.expand(3, 4).add_(y)
    return x


@case(x34)
def view_chain_flat_slice_add(x):
    x.view(-1)[2:5].add_(1)
    return x


@case(x34)
def view_chain_select_view_t_mul(x):
    x[1].view(2, 2).t().mul_(3)
    return x.sum()


@case(x34)
def view_created_before_mutation_read_after(x):
    v = x[0]
    w = x.t()
    x.add_(1)
    return v * 1, w.sum(0)


@case(x34)
def view_of_mutated_base_returned(x):
    v = x.view(-1)
    x.mul_(2)
    return v


@case(x34)
def view_sees_write_through_sibling_view(x):
    a = x[0]
    b = x[:, 0]
    a.add_(10)
    return b.clone(), b


@case(x34)
def view_metadata_mutation_of_view_only(x):
    v = x.view(4, 3)
    v.t_()
    return v.sum(0), v


# -- metadata-only mutations --------------------------------------------------------------


@case(x34)
def meta_t_(x):
    x.t_()
    return x + 1


@case(x34)
def meta_transpose_returned(x):
    x.transpose_(0, 1)
    return x


@case(x34)
def meta_unsqueeze_(x):
    x.unsqueeze_(0)
    return x.sum(1)


@case(x314)
def meta_squeeze_(x):
    x.squeeze_()
    return x * 2


@case(x34)
def meta_t_twice_no_net_change(x):
    x.t_()
    x.t_()
    return x * 2


@case(x34)
def meta_as_strided_(x):
    x.as_strided_((2, 3), (1, 2), 1)
    return x + 1


@case(x34)
def meta_as_strided_then_view_returned(x):
    x.as_strided_((3, 3), (4, 1), 1)
    return x[1], x


@case(x34)
def meta_t_then_add(x):
    x.t_()
    x.add_(1)
    return x.sum(0)


@case(x34)
def meta_t_then_view_mutation_returned(x):
    x.t_()
    x[0].mul_(2)
    return x


# -- outputs -------------------------------------------------------------------------------


@case(x34)
def out_input_itself(x):
    return x


@case(x34)
def out_input_twice(x):
    return x, x


@case(x34)
def out_view_flat(x):
    return x.view(-1)


@case(x34)
def out_select(x):
    return x[0]


@case(x34)
def out_t(x):
    return x.t()


@case(x44)
def out_diagonal(x):
    return x.diagonal()


@case(x34)
def out_unsqueeze(x):
    return x.unsqueeze(0)


@case(x34)
def out_expand(x):
    return x.expand(2, *x.shape)


@case(xy34)
def out_views_of_two_inputs(x, y):
    return x[0], y.t(), x + y


@case(x34)
def out_view_of_intermediate(x):
    return (x + 1)[0]


@case(x34)
def out_views_of_each_other(x):
    y = x + 1
    return y, y[0], y.t()


@case(x64)
def out_split_whole(x):
    return x.split(2)


@case(x64)
def out_unbind_part(x):
    return x.unbind(0)[1], x.sum()


@case(x64)
def out_chunk_whole(x):
    return x.chunk(3)


@case(x64)
def out_chunk_of_intermediate(x):
    return (x * 2).chunk(3)


@case(x34)
def out_views_of_mutated_input(x):
    x.mul_(2)
    return x[1:], x[:, 0]


@case(x34)
def out_detach_of_input(x):
    return x.detach(), x * 2


@case(x34)
def out_with_non_tensor(x):
    return x * 2, 3


# -- inputs sharing storage ---------------------------------------------------------------------


@case(row_col)
def shared_overlapping_read_only(row, col):
    return row + col, (row * col).sum()


@case(row_col, may_refuse=("row", "col"))
def shared_overlapping_mutate_one(row, col):
    row.mul_(2)
    return col + 1


@case(row_col, may_refuse=("row", "col"))
def shared_overlapping_mutate_return_both(row, col):
    col.add_(1)
    return row, col


@case(row_row)
def shared_disjoint_mutate_one(first, second):
    first.add_(second)
    return second * 2


@case(same_twice)
def same_tensor_twice_read_only(lhs, rhs):
    return lhs * rhs, lhs + rhs


@case(same_twice, may_refuse=("lhs", "rhs"))
def same_tensor_twice_mutate(lhs, rhs):
    lhs.add_(1)
    return rhs * 2, lhs


@case(row_col, may_refuse=("row", "col"), example_make=two_distinct_rows)
def shared_at_call_but_not_in_example(row, col):
    row.mul_(2)
    return col + 1


# -- training: inputs that require grad ------------------------------------------------------


@case(leaves_xy_rg, grad=True)
def grad_function_of_leaves(x, y):
    return (x * y).sin().sum(0), x.exp()


@case(nonleaf, grad=True)
def grad_mutation_of_nonleaf(x):
    x.mul_(3)
    return x.sin()


@case(nonleaf_and_leaf, grad=True)
def grad_view_mutation_of_nonleaf(x, y):
    x[0].add_(y)
    return x * 2


@case(leaf_rg, grad=True)
def grad_detached_mutation_of_leaf(x):
    x.detach().mul_(2)
    return x + 1


@case(leaf_rg, eager_raises=True)
def grad_inplace_on_leaf_raises(x):
    x.add_(1)
    return x


@case(leaf_rg, grad=True)
def grad_view_of_leaf_returned(x):
    return x.t(), x * 2


@case(leaf_rg, grad=True)
def grad_two_views_of_intermediate(x):
    y = x * 2
    return y[0], y[1]


@case(leaf_rg, grad=True)
def grad_output_and_its_detach(x):
    y = x.sin()
    return y, y.detach()


@case(rg_and_plain, grad=True)
def grad_mutation_of_plain_input(x, buf):
    buf.add_(x.detach() * 0.5)
    return x * buf


# -- out= -------------------------------------------------------------------------------------


def _abc(seed):
    g = Gen(seed)
    return Inputs(g.randn(3, 4), g.randn(3, 4), g.randn(3, 4))


@case(_abc)
def out_variant_add(a, b, c):
    torch.add(a, b, out=c)
    return c


def _sum_wrong_shape(seed):
    g = Gen(seed)
    return Inputs(g.randn(3, 4), g.randn(7))


@case(_sum_wrong_shape)
def out_variant_sum_resized_smaller(x, o):
    torch.sum(x, 0, out=o)
    return o


def _sum_empty(seed):
    return Inputs(Gen(seed).randn(3, 4), torch.empty(0))


@case(_sum_empty)
def out_variant_sum_resized_from_empty(x, o):
    torch.sum(x, 0, out=o)
    return o


def _mm(seed):
    g = Gen(seed)
    return Inputs(g.randn(3, 5), g.randn(5, 4), g.randn(3, 4))


@case(_mm)
def out_variant_mm(a, b, c):
    r = torch.mm(a, b, out=c)
    return r.sum(), r


# -- dtypes ---------------------------------------------------------------------------------


def _half(seed):
    g = Gen(seed)
    return Inputs(g.randn(3, 4, dtype=torch.float16), g.randn(3, 4, dtype=torch.float16))


@case(_half)
def dtype_float16_with_mutation(x, y):
    x.mul_(2)
    return x + y, (x * y).to(torch.float32)


def _bf16(seed):
    g = Gen(seed)
    return Inputs(g.randn(3, 4, dtype=torch.bfloat16), g.randn(3, 4, dtype=torch.bfloat16))


@case(_bf16)
def dtype_bfloat16(x, y):
    return x * y + x.abs(), x.to(torch.float32).sum()


def _int64(seed):
    g = Gen(seed)
    return Inputs(g.randint(-50, 50, 3, 4), g.randint(1, 9, 3, 4))


@case(_int64)
def dtype_int64_with_mutation(x, y):
    x.add_(y)
    x.mul_(3)
    return x // y, x % 5, x.sum()


def _bool(seed):
    g = Gen(seed)
    return Inputs(g.bools(3, 4), g.bools(3, 4), g.randn(3, 4))


@case(_bool)
def dtype_bool(a, b, x):
    return a & b, ~a, torch.where(a, x, -x), (a | b).sum()


# -- copy_ ------------------------------------------------------------------------------------


@case(xy34)
def copy_into_input(x, y):
    x.copy_(y)
    return x


def _x34_y24(seed):
    g = Gen(seed)
    return Inputs(g.randn(3, 4), g.randn(2, 4))


@case(_x34_y24)
def copy_into_view_of_input(x, y):
    x[1:].copy_(y)
    return x.sum(0)


def _x44_s1(seed):
    g = Gen(seed)
    return Inputs(g.randn(4, 4), g.randn(1))


@case(_x44_s1)
def copy_broadcast_into_diagonal(x, s):
    x.diagonal().copy_(s)
    return x


def _x34_int(seed):
    g = Gen(seed)
    return Inputs(g.randn(3, 4), g.randint(-5, 5, 3, 4))


@case(_x34_int)
def copy_with_dtype_conversion(x, i):
    x.copy_(i)
    return x * 0.5


# -- more corners --------------------------------------------------------------------------


@case(noncontig_view_input)
def out_view_of_noncontiguous_input(x):
    return x[1], x.t()


@case(noncontig_view_input)
def inplace_noncontiguous_input_then_view_returned(x):
    x.add_(1)
    return x.t()


def _expanded_input(seed):
    return Inputs(Gen(seed).randn(4).expand(3, 4))


@case(_expanded_input)
def out_views_of_expanded_input(x):
    return x * 2, x[0], x.t()


def _zero_dim(seed):
    g = Gen(seed)
    return Inputs(g.randn(()), g.randn(3))


@case(_zero_dim)
def inplace_zero_dim_input(s, v):
    s.add_(v.sum())
    return v * s, s


def _channels_last(seed):
    return Inputs(Gen(seed).randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last))


@case(_channels_last)
def inplace_channels_last_input(x):
    x.mul_(2)
    return x.sum((2, 3)), x[:, 1]


@case(x34)
def out_view_of_view_of_input(x):
    a = x[1]
    return a, a[1:], a.unsqueeze(1)


@case(x34)
def inplace_on_intermediate_then_views_returned(x):
    y = x + 1
    y.mul_(2)
    return y[0], y


def _row_and_base(seed):
    base = Gen(seed).randn(3, 4)
    return Inputs(base, base[1])


@case(_row_and_base, may_refuse=("whole", "part"))
def shared_input_and_its_view_mutate_view(whole, part):
    part.add_(1)
    return whole.sum(1), part


@case(_x34_y24)
def out_variant_into_view_of_input(x, y):
    torch.mul(y, 3, out=x[1:])
    return x


@case(leaf_rg, grad=True)
def grad_mutation_of_leaf_under_no_grad(x):
    with torch.no_grad():
        x.mul_(0.5)
    return x * 2


def _leaf_and_grad(seed):
    g = Gen(seed)
    return Inputs(g.randn(3, 4, requires_grad=True), g.randn(3, 4))


@case(_leaf_and_grad, grad=True)
def grad_optimizer_like_step(param, g):
    with torch.no_grad():
        param.sub_(0.1 * g)
    return (param * param).sum()


@case(nonleaf, grad=True)
def grad_view_of_mutated_nonleaf_returned(x):
    x.mul_(2)
    return x.view(-1), x[0]


@case(leaf_rg, grad=True)
def grad_output_and_view_of_it(x):
    y = x * 2
    return y, y[0]


@case(leaf_rg, no_grad=True)
def no_grad_mutation_of_leaf_requiring_grad(x):
    x.mul_(2)
    return x + 1


def _plain_34(seed):
    return Inputs(Gen(seed).randn(3, 4))


@case(leaf_rg, grad=True, example_make=_plain_34)
def grad_required_at_call_but_not_in_example(x):
    return x.sin() * 2


@case(x34, rng=True)
def rng_dropout_and_rand(x):
    return torch.nn.functional.dropout(x, 0.5, training=True), torch.rand(3) + x[0, 0]


@case(x34, rng=True)
def rng_dead_draws_still_move_the_generator(x):
    # poisson's and multinomial's results are unused, but their draws move
    # the generator before rand_like's: dropping them as dead code would
    # change every later draw.
    torch.poisson(x.abs())
    torch.multinomial(x.abs().flatten() + 0.1, 2)
    return x + torch.rand_like(x)


CASE_IDS = [c.name for c in CASES]
assert len(set(CASE_IDS)) == len(CASE_IDS)


# ---------------------------------------------------------------------------
# Running a case.
# ---------------------------------------------------------------------------


def _ctx(case):
    return torch.no_grad() if case.no_grad else _Null()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _check_untouched(run, errs, what):
    """`run` was prepared but never called: its tensors must be as built."""
    for j, t in enumerate(run.flat_in):
        if (tuple(t.shape), tuple(t.stride()), t.storage_offset()) != run.metas_before[j]:
            errs.add("%s %d: metadata changed" % (what, j))
        elif not torch.equal(t.detach(), run.values_before[j]) and not (
                t.is_floating_point() and torch.equal(t.detach().isnan(), run.values_before[j].isnan())
                and torch.equal(t.detach().nan_to_num(), run.values_before[j].nan_to_num())):
            errs.add("%s %d: values changed" % (what, j))
        if t._version != run.versions_before[j]:
            errs.add("%s %d: _version moved %d -> %d" % (what, j, run.versions_before[j], t._version))
        if t.is_leaf and t.grad is not None:
            errs.add("%s %d: .grad was set" % (what, j))


def _check_refusal(case, err, where):
    msg = str(err)
    missing = [n for n in case.may_refuse if n not in msg]
    assert not missing, ("compiled refused %s at %s with a CompileError that does not name input(s) %s: %s"
                         % (case.name, where, missing, msg))
    note("%s: refused at %s: %s" % (case.name, where, msg))


def check_eager_raises(case, compile_fn):
    e = run_eager(case, 1, catch=(Exception,))
    assert e.error is not None, "eager did not raise for %s: the case is wrong" % case.name
    kinds = (type(e.error),) + _refusals()
    errs = Errors()
    example = prepare(case.make(0))
    try:
        with _ctx(case):
            cfn = compile_fn(case.fn, example.inputs.args)
    except Exception as err:  # noqa: BLE001
        assert isinstance(err, kinds), (
            "eager raised %s: %s; compile raised an unrelated %s: %s"
            % (type(e.error).__name__, e.error, type(err).__name__, err))
        _check_untouched(example, errs, "example input")
        errs.check()
        note("%s: eager raised %s; compile raised %s: %s"
             % (case.name, type(e.error).__name__, type(err).__name__, err))
        return
    _check_untouched(example, errs, "example input")
    c = call(cfn, prepare(case.make(1)), case.no_grad, catch=(Exception,))
    assert c.error is not None, ("eager raised %s: %s, but the compiled call returned %r"
                                 % (type(e.error).__name__, e.error, c.out))
    assert isinstance(c.error, kinds), ("eager raised %s: %s; compiled raised an unrelated %s: %s"
                                        % (type(e.error).__name__, e.error, type(c.error).__name__, c.error))
    compare_inputs(e, c, errs)  # the inputs are left as eager left them
    errs.check()


def _eager_then_compiled(case, cfn, seed, errs, catch=()):
    """One eager run and one compiled run on identical fresh inputs. With
    case.rng both start from the same global RNG state and must leave it in
    the same state (the next draws compared)."""
    def go(runner):
        if case.rng:
            torch.manual_seed(4242 + seed)
        run = call(runner, prepare(case.make(seed)), case.no_grad, catch=catch)
        return run, (torch.rand(8) if case.rng else None)
    e, draw_e = go(case.fn)
    c, draw_c = go(cfn)
    if case.rng and c.error is None and not torch.equal(draw_e, draw_c):
        errs.add("the global RNG is left in a different state than eager leaves it")
    return e, c


def check_program(case, compile_fn):
    """The whole protocol for one case; see the module docstring."""
    if case.eager_raises:
        return check_eager_raises(case, compile_fn)
    refusal = (_compile_error(),) if case.may_refuse else ()
    errs = Errors()
    example = prepare((case.example_make or case.make)(0))
    try:
        with _ctx(case):
            cfn = compile_fn(case.fn, example.inputs.args)
    except refusal as err:  # noqa: B030
        _check_refusal(case, err, "compile")
        _check_untouched(example, errs, "example input")
        errs.check()
        return
    errs.where = "compile"
    _check_untouched(example, errs, "example input")

    kw = dict(rtol=case.rtol, atol=case.atol)
    runs = []
    for k, seed in ((1, 1), (2, 2)):
        errs.where = "call %d" % k
        e, c = _eager_then_compiled(case, cfn, seed, errs, catch=refusal)
        if c.error is not None:  # an accepted refusal, at call time
            _check_refusal(case, c.error, "call %d" % k)
            _check_untouched(c, errs, "input")
            errs.check()
            return
        compare_runs(e, c, errs, **kw)
        if case.grad and not errs.items:
            backward_and_compare(e, c, errs, seed + 100, case.rtol, case.atol)
        runs.append((e, c))

    # The first call's outputs and inputs belong to the caller: the second
    # call must not have written them.
    errs.where = "call 1, checked again after call 2"
    e1, c1 = runs[0]
    if not case.grad:
        compare_runs(e1, c1, errs, **kw)
    else:
        for a, b in zip(e1.flat_out, c1.flat_out):
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape:
                errs.close(b, a, "output", case.rtol, case.atol)

    # A second compile of the same program: served from the daemon's cache.
    errs.where = "second compile (cache hit), call 3"
    example2 = prepare((case.example_make or case.make)(0))
    with _ctx(case):
        cfn2 = compile_fn(case.fn, example2.inputs.args)
    _check_untouched(example2, errs, "example input")
    e, c = _eager_then_compiled(case, cfn2, 3, errs)
    compare_runs(e, c, errs, **kw)
    if case.grad and not errs.items:
        backward_and_compare(e, c, errs, 103, case.rtol, case.atol)
    errs.check()


# ---------------------------------------------------------------------------
# The tests: programs.
# ---------------------------------------------------------------------------


# eager_random: the rng_ cases compare dropout's and rand's numbers with
# eager's under the same seed (test_native_random.py checks the generated
# generator's)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_program(case, server):
    check_program(case, lambda fn, args: compiled.compile(fn, args, server=server,
                                                          eager_random=True))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_program_mutations_applied_by_runtime(case, server):
    """keep_input_mutations=False: every input mutation leaves the program as
    an extra output that the runtime applies (the path training always
    takes); the caller must not see a difference."""
    check_program(case, lambda fn, args: compiled.compile(fn, args, server=server,
                                                          keep_input_mutations=False,
                                                          eager_random=True))


# ---------------------------------------------------------------------------
# The harness itself (eager only; runs without the runtime).
# ---------------------------------------------------------------------------


def _eager_compile(fn, args):
    return fn


def _copying_compile(fn, args):
    """A wrong runner: works on detached copies of its inputs."""
    def run(*a):
        return fn(*[x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor)
                    else x for x in a])
    return run


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_harness_eager_matches_itself(case):
    """Eager against eager passes every check: factories are deterministic,
    layouts reproducible, and the checks hold no false positives."""
    check_program(case, _eager_compile)


def test_harness_catches_a_copying_runner():
    """A runner that never touches the caller's tensors is caught exactly
    where eager mutates or aliases an input."""
    wrong = []
    for case in CASES:
        if case.eager_raises or case.grad:
            continue
        e = run_eager(case, 1)
        observable = mutated_or_aliased(e)
        try:
            check_program(case, _copying_compile)
            caught = False
        except AssertionError:
            caught = True
        if caught != observable:
            wrong.append("%s: eager mutates/aliases an input: %s; copying runner caught: %s"
                         % (case.name, observable, caught))
    assert not wrong, "\n".join(wrong)


def test_harness_has_enough_programs():
    assert len(CASES) >= 40


# ---------------------------------------------------------------------------
# Modules.
# ---------------------------------------------------------------------------


def _state(m):
    return list(m.named_parameters()) + list(m.named_buffers())


def check_module(build, make_input, compile_fn, *, grad=False, no_grad=False, between=None,
                 rtol=None, atol=None, calls=2):
    """Eager module vs its deep copy run through compiled.compile: outputs,
    every parameter and buffer after each call (values, metadata, identity,
    _version), gradients with `grad`. `between(m)` runs on both modules
    between calls (an optimizer step, a parameter swap): compiled must read
    the state at call time."""
    torch.manual_seed(0)
    m_e = build()
    m_c = copy.deepcopy(m_e)
    ctx = torch.no_grad() if no_grad else _Null()
    errs = Errors()
    example = prepare(Inputs(*make_input(0)))
    before_compile = [(n, t.detach().clone()) for n, t in _state(m_c)]
    with ctx:
        cfn = compile_fn(m_c, example.inputs.args)
    errs.where = "compile"
    _check_untouched(example, errs, "example input")
    for (n, t0), (_, t) in zip(before_compile, _state(m_c)):
        if not torch.equal(t0, t.detach()):
            errs.add("compile changed module state %s" % n)

    for k in range(1, calls + 1):
        errs.where = "call %d" % k
        objs_e = {n: t for n, t in _state(m_e)}
        objs_c = {n: t for n, t in _state(m_c)}
        names = [n for n, _ in _state(m_e)]
        params_e = [t for _, t in m_e.named_parameters()]
        params_c = [t for _, t in m_c.named_parameters()]
        args = make_input(k)
        args_c = make_input(k)
        e = prepare(Inputs(*args, leaves=params_e, observe=[t for _, t in _state(m_e)]))
        c = prepare(Inputs(*args_c, leaves=params_c, observe=[t for _, t in _state(m_c)]))
        labels = ["input %d" % j for j in range(e.n_args)] + ["module state %s" % n for n in names]
        call(m_e, e, no_grad)
        call(cfn, c, no_grad)
        compare_runs(e, c, errs, rtol=rtol, atol=atol, extra_in_labels=labels)
        for n in names:
            same_e = dict(_state(m_e))[n] is objs_e[n]
            same_c = dict(_state(m_c))[n] is objs_c[n]
            if same_e != same_c:
                errs.add("module state %s: still the same object after the call: eager %s, compiled %s"
                         % (n, same_e, same_c))
        if grad and not errs.items:
            backward_and_compare(e, c, errs, 100 + k, rtol, atol)
        if between is not None:
            between(m_e)
            between(m_c)
    errs.check()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.tanh(self.fc1(x)))))


def _sgd_step(m):
    with torch.no_grad():
        for p in m.parameters():
            if p.grad is not None:
                p.sub_(0.1 * p.grad)
                p.grad = None


MODULES = {
    "mlp": lambda cf: check_module(MLP, lambda s: (Gen(s).randn(5, 8),), cf, grad=True,
                                   between=_sgd_step, calls=3),
}


def _via_daemon(server):
    return lambda m, args: compiled.compile(m, args, server=server)


def test_module_mlp_with_grads(server):
    MODULES["mlp"](_via_daemon(server))


class Attention(nn.Module):
    """Causal multi-head self-attention with a hand-written softmax."""

    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads

        def split(z):
            return z.view(b, t, h, d // h).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        s = q @ k.transpose(-2, -1) / math.sqrt(d // h)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
        s = (s - s.amax(-1, keepdim=True)).exp()
        p = s / s.sum(-1, keepdim=True)
        y = (p @ v).transpose(1, 2).reshape(b, t, d)
        return self.o(y), p


def _swap_q_weight(m):
    # A new Parameter object: the compiled module must read it at call time.
    m.q.weight = nn.Parameter(m.q.weight.detach() * 0.5 + 0.01)


MODULES["attention"] = lambda cf: check_module(
    Attention, lambda s: (Gen(s).randn(2, 5, 16),), cf, grad=True, between=_swap_q_weight)


def test_module_attention(server):
    MODULES["attention"](_via_daemon(server))


def _encoder_layer():
    m = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
    return m.eval()


MODULES["transformer_encoder_layer"] = lambda cf: check_module(
    _encoder_layer, lambda s: (Gen(s).randn(2, 6, 16),), cf, no_grad=True, rtol=1e-4, atol=1e-5)


def test_module_transformer_encoder_layer_eval(server):
    MODULES["transformer_encoder_layer"](_via_daemon(server))


class ConvBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


MODULES["conv_bn_relu_train"] = lambda cf: check_module(
    lambda: ConvBnRelu().train(), lambda s: (Gen(s).randn(2, 3, 8, 8),), cf,
    grad=True, between=_sgd_step, calls=3, rtol=1e-4, atol=1e-5)


def test_module_conv_bn_relu_train_updates_running_stats(server):
    MODULES["conv_bn_relu_train"](_via_daemon(server))


def _resnet18():
    return visionmodels.resnet18(num_classes=10).eval()


MODULES["resnet18_eval"] = lambda cf: check_module(
    _resnet18, lambda s: (Gen(s).randn(1, 3, 64, 64),), cf, no_grad=True,
    rtol=1e-4, atol=1e-4, calls=2)


def test_module_resnet18_eval(server):
    MODULES["resnet18_eval"](_via_daemon(server))


@pytest.mark.parametrize("name", sorted(MODULES))
def test_harness_module_eager_matches_itself(name):
    MODULES[name](lambda m, args: m)


# ---------------------------------------------------------------------------
# The Dynamo backend entry point.
# ---------------------------------------------------------------------------


def _backend_program(x, y, buf):
    x.add_(1)
    y[0].mul_(2)
    buf.t_()
    return x * y, x.t(), y[1], x


def _backend_inputs(seed):
    g = Gen(seed)
    return Inputs(g.randn(3, 4), g.randn(3, 4), g.randn(3, 4))


def test_backend_on_make_fx_graph_with_mutations(server, monkeypatch):
    monkeypatch.setenv("COMPILED_SERVER", server)
    check_backend(compiled.backend)


def test_harness_backend_eager_matches_itself():
    check_backend(lambda gm, args: gm)


def check_backend(backend):
    gm = make_fx(_backend_program)(*_backend_inputs(0).args)
    assert isinstance(gm, torch.fx.GraphModule)
    # The oracle is the FX graph itself, run eagerly: the same calling
    # convention as what the backend returns.
    case = Case("backend", gm, _backend_inputs)
    errs = Errors()
    example = prepare(_backend_inputs(0))
    cfn = backend(gm, list(example.inputs.args))
    _check_untouched(example, errs, "example input")
    for k in (1, 2):
        errs.where = "call %d" % k
        e = run_eager(case, k)
        c = call(cfn, prepare(_backend_inputs(k)))
        compare_runs(e, c, errs)
    errs.check()
