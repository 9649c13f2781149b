"""The eager-vs-compiled harness used by test_semantics.py.

Eager PyTorch is the oracle. A *case* is a program plus a seeded factory of
its inputs; the factory is called once per run, so the eager run and the
compiled run get two independent but identical sets of inputs (same values,
same sizes/strides/offsets, same storage sharing between inputs, same
requires_grad and leaf-ness). Nothing here knows how `compiled` works: the
harness records what eager did and demands the same of the other runner.

What :func:`compare_runs` checks, for one call:

- the outputs' pytree structure, and per leaf: the same kind (tensor or not);
  non-tensors equal; tensors with equal dtype, shape and values
  (``torch.testing.assert_close``), equal strides and storage offset when
  eager's output is a view or shares storage with anything, equal
  ``requires_grad`` / ``is_leaf`` / presence of ``grad_fn``;
- every input (and every *observed* tensor, e.g. the base of view inputs)
  after the call: values, shape, stride, offset, ``requires_grad``,
  ``is_leaf``, presence of ``grad_fn``, and whether ``_version`` moved;
- object identity: output i ``is`` input j, and output i ``is`` output j,
  exactly when it is so in eager;
- storage sharing, for every pair (output, input), (output, output),
  (input, input): shared exactly when it is in eager.

and, when asked, the gradients of a seeded backward pass.
"""

import dataclasses
import math
import warnings
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.utils._pytree as pytree


class SemanticsNote(UserWarning):
    """An accepted outcome worth reading in the test report (a refusal)."""


# ---------------------------------------------------------------------------
# Inputs.
# ---------------------------------------------------------------------------


class Inputs:
    """What a case's factory returns.

    args: the positional arguments of the program.
    leaves: leaf tensors whose ``.grad`` is compared after backward, besides
        the arguments that are leaves requiring grad (for non-leaf inputs,
        their leaves).
    observe: further tensors whose state is compared after the call, e.g.
        the base two view inputs were cut from.
    """

    def __init__(self, *args, leaves=(), observe=()):
        self.args = tuple(args)
        self.leaves = list(leaves)
        self.observe = list(observe)


class Gen:
    """Seeded tensor factory (CPU)."""

    def __init__(self, seed: int):
        self.g = torch.Generator()
        self.g.manual_seed(1000003 * seed + 17)

    def randn(self, *shape, dtype=torch.float32, requires_grad=False):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        t = torch.randn(torch.Size(shape), generator=self.g, dtype=torch.float32).to(dtype)
        return t.requires_grad_(requires_grad) if requires_grad else t

    def randint(self, low, high, *shape, dtype=torch.int64):
        return torch.randint(low, high, shape, generator=self.g, dtype=dtype)

    def bools(self, *shape):
        return torch.rand(*shape, generator=self.g) > 0.5


def as_inputs(x) -> Inputs:
    if isinstance(x, Inputs):
        return x
    if isinstance(x, tuple):
        return Inputs(*x)
    return Inputs(x)


# ---------------------------------------------------------------------------
# Cases.
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    name: str
    fn: Callable
    make: Callable[[int], Any]      # seed -> Inputs | tuple | tensor
    grad: bool = False              # run a seeded backward, compare grads
    eager_raises: bool = False      # eager raises: compiled raises or refuses
    may_refuse: Tuple[str, ...] = ()  # a CompileError naming these inputs is OK
    example_make: Optional[Callable[[int], Any]] = None  # example inputs, if different
    no_grad: bool = False           # compile and run under torch.no_grad()
    rng: bool = False               # seed the global RNG before each call and
                                    # compare the draws after it
    rtol: Optional[float] = None
    atol: Optional[float] = None

    def __str__(self):
        return self.name


# ---------------------------------------------------------------------------
# Running.
# ---------------------------------------------------------------------------


def storage_ptr(t: torch.Tensor) -> int:
    return t.storage().data_ptr()


def shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    pa = storage_ptr(a)
    return pa != 0 and pa == storage_ptr(b)


def meta(t: torch.Tensor):
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset())


@dataclasses.dataclass
class Run:
    """One call of a program on one set of inputs."""
    inputs: Inputs
    flat_in: List[torch.Tensor]       # argument tensors, then observed ones
    n_args: int                       # how many of flat_in are arguments
    versions_before: List[int]
    metas_before: List[tuple]
    values_before: List[torch.Tensor]
    out: Any = None
    flat_out: Optional[List[Any]] = None
    out_spec: Any = None
    error: Optional[BaseException] = None


def _flat_tensors(args) -> List[torch.Tensor]:
    leaves, _ = pytree.tree_flatten(list(args))
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def prepare(inputs) -> Run:
    inputs = as_inputs(inputs)
    args = _flat_tensors(inputs.args)
    flat = args + list(inputs.observe)
    return Run(inputs=inputs, flat_in=flat, n_args=len(args),
               versions_before=[t._version for t in flat],
               metas_before=[meta(t) for t in flat],
               values_before=[t.detach().clone() for t in flat])


def call(runner: Callable, run: Run, no_grad: bool = False,
         catch: Tuple[type, ...] = ()) -> Run:
    ctx = torch.no_grad() if no_grad else _nullctx()
    try:
        with ctx:
            run.out = runner(*run.inputs.args)
    except catch as e:  # noqa: B030  (a tuple of types)
        run.error = e
        return run
    run.flat_out, run.out_spec = pytree.tree_flatten(run.out)
    return run


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def run_eager(case: Case, seed: int, catch=()) -> Run:
    return call(case.fn, prepare(case.make(seed)), case.no_grad, catch)


# ---------------------------------------------------------------------------
# Comparing.
# ---------------------------------------------------------------------------


class Errors:
    def __init__(self, where: str = ""):
        self.where = where
        self.items: List[str] = []

    def add(self, msg: str):
        self.items.append((self.where + ": " if self.where else "") + msg)

    def close(self, actual, expected, what, rtol=None, atol=None):
        try:
            kw = {} if rtol is None else {"rtol": rtol, "atol": atol}
            torch.testing.assert_close(actual.detach(), expected.detach(), equal_nan=True,
                                       check_stride=False, **kw)
        except AssertionError as e:
            self.add("%s: values differ from eager: %s" % (what, " ".join(str(e).split())[:600]))
            return False
        return True

    def check(self):
        assert not self.items, "\n".join(self.items)


def _is_tensor(x):
    return isinstance(x, torch.Tensor)


def _label_in(run: Run, j: int) -> str:
    return ("input %d" % j) if j < run.n_args else ("observed %d" % (j - run.n_args))


def compare_runs(e: Run, c: Run, errs: Errors, *, rtol=None, atol=None,
                 extra_in_labels: Sequence[str] = ()) -> None:
    """Records in `errs` every way `c` differs from eager run `e`."""
    if e.error is not None:
        raise AssertionError("eager raised: %r" % (e.error,))
    if c.error is not None:
        errs.add("compiled raised %s: %s" % (type(c.error).__name__, c.error))
        return

    label_in = (lambda j: extra_in_labels[j] if j < len(extra_in_labels) else _label_in(e, j))

    # -- structure ------------------------------------------------------------
    if e.out_spec != c.out_spec:
        errs.add("output structure: eager %s, compiled %s" % (e.out_spec, c.out_spec))
        return
    eo, co = e.flat_out, c.flat_out

    # -- outputs --------------------------------------------------------------
    for i, (a, b) in enumerate(zip(eo, co)):
        if _is_tensor(a) != _is_tensor(b):
            errs.add("output %d: eager %s, compiled %s" % (i, type(a).__name__, type(b).__name__))
            continue
        if not _is_tensor(a):
            if a != b and not (isinstance(a, float) and math.isnan(a) and math.isnan(b)):
                errs.add("output %d: eager %r, compiled %r" % (i, a, b))
            continue
        if a.dtype != b.dtype or a.shape != b.shape:
            errs.add("output %d: eager %s%s, compiled %s%s"
                     % (i, a.dtype, tuple(a.shape), b.dtype, tuple(b.shape)))
            continue
        errs.close(b, a, "output %d" % i, rtol, atol)
        aliased = a._is_view() or any(shares(a, t) for t in e.flat_in) or \
            any(shares(a, t) for k, t in enumerate(eo) if k != i and _is_tensor(t))
        if aliased and meta(a) != meta(b):
            errs.add("output %d (a view in eager): size/stride/offset eager %s, compiled %s"
                     % (i, meta(a), meta(b)))
        for attr in ("requires_grad", "is_leaf"):
            if getattr(a, attr) != getattr(b, attr):
                errs.add("output %d: %s eager %s, compiled %s"
                         % (i, attr, getattr(a, attr), getattr(b, attr)))
        if (a.grad_fn is None) != (b.grad_fn is None):
            errs.add("output %d: grad_fn eager %s, compiled %s" % (i, a.grad_fn, b.grad_fn))

    compare_inputs(e, c, errs, rtol=rtol, atol=atol, label_in=label_in)

    # -- identity ---------------------------------------------------------------------
    _compare_identity_and_sharing(e, c, errs, label_in)


def changed(run: Run, j: int) -> bool:
    """Whether tensor j of `run` differs from its state before the call."""
    t = run.flat_in[j]
    if meta(t) != run.metas_before[j]:
        return True
    before, now = run.values_before[j], t.detach()
    if before.is_floating_point() or before.is_complex():
        return not torch.equal(before.nan_to_num(), now.nan_to_num()) or \
            not torch.equal(before.isnan(), now.isnan())
    return not torch.equal(before, now)


def compare_inputs(e: Run, c: Run, errs: Errors, *, rtol=None, atol=None,
                   label_in=None) -> None:
    """The inputs (and observed tensors) after the call, compiled vs eager:
    values, size/stride/offset, dtype, autograd flags, _version moved."""
    if label_in is None:
        label_in = (lambda j: _label_in(e, j))
    for j, (a, b) in enumerate(zip(e.flat_in, c.flat_in)):
        what = label_in(j)
        if meta(a) != meta(b):
            errs.add("%s after the call: size/stride/offset eager %s, compiled %s"
                     % (what, meta(a), meta(b)))
        elif a.dtype != b.dtype:
            errs.add("%s: dtype eager %s, compiled %s" % (what, a.dtype, b.dtype))
        else:
            errs.close(b, a, what + " after the call", rtol, atol)
        for attr in ("requires_grad", "is_leaf"):
            if getattr(a, attr) != getattr(b, attr):
                errs.add("%s: %s eager %s, compiled %s" % (what, attr, getattr(a, attr), getattr(b, attr)))
        if (a.grad_fn is None) != (b.grad_fn is None):
            errs.add("%s: grad_fn eager %s, compiled %s" % (what, a.grad_fn, b.grad_fn))
        # _version: autograd's check that a saved tensor was not changed in
        # place. A bump is required where eager bumps *and* the tensor
        # changed (values or metadata); forbidden where eager neither bumps
        # nor changes it. Either is fine where eager bumps without a net
        # change (t_(); t_(), or t_() on a view sharing the input's counter)
        # or changes it without bumping (native_batch_norm writes its
        # running stats without an (a!) annotation, so no bump).
        bumped_e = a._version != e.versions_before[j]
        bumped_c = b._version != c.versions_before[j]
        changed_e = changed(e, j)
        if bumped_e and changed_e and not bumped_c:
            errs.add("%s: changed and _version bumped in eager (%d -> %d), _version unchanged in "
                     "compiled (%d)" % (what, e.versions_before[j], a._version, b._version))
        if not bumped_e and not changed_e and bumped_c:
            errs.add("%s: untouched in eager, _version bumped in compiled (%d -> %d)"
                     % (what, c.versions_before[j], b._version))


def _compare_identity_and_sharing(e: Run, c: Run, errs: Errors, label_in) -> None:
    eo, co = e.flat_out, c.flat_out
    for i, (a, b) in enumerate(zip(eo, co)):
        if not _is_tensor(a) or not _is_tensor(b):
            continue
        for j, (x, y) in enumerate(zip(e.flat_in, c.flat_in)):
            if (a is x) != (b is y):
                errs.add("output %d: eager %s %s, compiled %s"
                         % (i, "IS" if a is x else "is not", label_in(j),
                            "returns the caller's object" if b is y else "does not"))
        for k in range(i + 1, len(eo)):
            if not _is_tensor(eo[k]) or not _is_tensor(co[k]):
                continue
            if (a is eo[k]) != (b is co[k]):
                errs.add("outputs %d and %d: same object in eager: %s, in compiled: %s"
                         % (i, k, a is eo[k], b is co[k]))

    # -- storage sharing -----------------------------------------------------------------
    for i, (a, b) in enumerate(zip(eo, co)):
        if not _is_tensor(a) or not _is_tensor(b):
            continue
        for j, (x, y) in enumerate(zip(e.flat_in, c.flat_in)):
            if shares(a, x) != shares(b, y):
                errs.add("output %d and %s: share storage in eager: %s, in compiled: %s"
                         % (i, label_in(j), shares(a, x), shares(b, y)))
        for k in range(i + 1, len(eo)):
            if not _is_tensor(eo[k]) or not _is_tensor(co[k]):
                continue
            if shares(a, eo[k]) != shares(b, co[k]):
                errs.add("outputs %d and %d: share storage in eager: %s, in compiled: %s"
                         % (i, k, shares(a, eo[k]), shares(b, co[k])))
    n = len(e.flat_in)
    for j in range(n):
        for k in range(j + 1, n):
            se, sc = shares(e.flat_in[j], e.flat_in[k]), shares(c.flat_in[j], c.flat_in[k])
            if se != sc:
                errs.add("%s and %s after the call: share storage in eager: %s, in compiled: %s"
                         % (label_in(j), label_in(k), se, sc))


def mutated_or_aliased(e: Run) -> bool:
    """Whether eager's call is observable beyond fresh output values: an input
    changed (values or metadata), or an output is/aliases an input."""
    for j in range(len(e.flat_in)):
        if changed(e, j):
            return True
    for o in e.flat_out:
        if _is_tensor(o) and any(o is t or shares(o, t) for t in e.flat_in):
            return True
    return False


# ---------------------------------------------------------------------------
# Gradients.
# ---------------------------------------------------------------------------


def grad_targets(run: Run) -> List[torch.Tensor]:
    outs = [o for o in run.flat_out if _is_tensor(o) and o.requires_grad]
    ins = [t for t in run.flat_in[:run.n_args] if t.requires_grad and not t.is_leaf]
    return outs + ins


def grad_leaves(run: Run) -> List[torch.Tensor]:
    seen, leaves = set(), []
    for t in list(run.inputs.leaves) + run.flat_in[:run.n_args]:
        if t.is_leaf and t.requires_grad and id(t) not in seen:
            seen.add(id(t))
            leaves.append(t)
    return leaves


def backward_and_compare(e: Run, c: Run, errs: Errors, seed: int, rtol=None, atol=None) -> bool:
    """Seeded backward over every tensor requiring grad (outputs and mutated
    non-leaf inputs) in both runs; compares the leaves' gradients. Returns
    whether a backward happened."""
    te, tc = grad_targets(e), grad_targets(c)
    if len(te) != len(tc):
        errs.add("backward: %d tensors require grad in eager, %d in compiled" % (len(te), len(tc)))
        return False
    if not te:
        return False
    g = Gen(seed)
    cot = [g.randn(*t.shape, dtype=t.dtype) for t in te]
    torch.autograd.backward(te, [x.clone() for x in cot])
    try:
        torch.autograd.backward(tc, [x.clone() for x in cot])
    except RuntimeError as ex:
        errs.add("backward through compiled outputs raised: %s" % ex)
        return True
    le, lc = grad_leaves(e), grad_leaves(c)
    if len(le) != len(lc):
        errs.add("backward: %d grad leaves in eager, %d in compiled" % (len(le), len(lc)))
        return True
    for k, (a, b) in enumerate(zip(le, lc)):
        if (a.grad is None) != (b.grad is None):
            errs.add("leaf %d: .grad is %s in eager, %s in compiled"
                     % (k, "None" if a.grad is None else "set", "None" if b.grad is None else "set"))
        elif a.grad is not None:
            errs.close(b.grad, a.grad, "leaf %d .grad" % k, rtol, atol)
    return True


def note(msg: str):
    warnings.warn(msg, SemanticsNote, stacklevel=2)
