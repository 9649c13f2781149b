"""Helpers for testing native code generation against eager PyTorch.

Eager PyTorch is the oracle: :func:`check` compiles a function through a
real daemon, runs the compiled program and the original on identical copies
of the inputs, and compares outputs (values, dtype, shape, strides) and the
inputs afterwards (for in-place programs). It also asserts that the program
actually ran native code, and how much of it was lowered, so a rule that
silently falls back does not pass as "correct".

The shapes that catch lowering bugs (:func:`layouts`): empty tensors,
size-1 dimensions, broadcasting, non-contiguous (transposed, sliced,
expanded) and channels-last inputs, odd sizes that do not divide the vector
width.
"""

from typing import Any, Callable, Dict, Optional, Sequence

import torch
import torch.utils._pytree as pytree

import compiled
import compiled.target


def onednn_products() -> bool:
    """Whether this process's float32 matrix products are oneDNN's sgemm
    in generated code: the client offers oneDNN ("dnnl") and the target
    has AVX-512 (the daemon's condition, sched/schedule.c sc_gemm_of).
    False on AVX2-only CPUs, which Debian's torch also offers "dnnl" on,
    and under COMPILED_TARGET=x86-64-v3 or COMPILED_DNNL=0."""
    isa = compiled.target.target_message().isa
    return "dnnl" in isa and "avx512f" in isa


def clone_inputs(args):
    """Copies with the same sizes, strides and storage offsets (each tensor
    gets a copy of its whole storage)."""
    def one(a):
        if not isinstance(a, torch.Tensor):
            return a
        d = a.detach()
        n = d.storage().size()
        flat = torch.empty(n, dtype=a.dtype)
        if n:
            flat.copy_(torch.as_strided(d, (n,), (1,), 0))
        out = torch.as_strided(flat, a.size(), a.stride(), a.storage_offset())
        return out.requires_grad_(a.requires_grad) if a.requires_grad else out
    return pytree.tree_map(one, args)


def assert_same(got, want, what: str, *, atol=None, rtol=None, strides=True, values=True):
    """Values (unless values=False), dtype, shape (and strides) of got
    equal want's."""
    g, gs = pytree.tree_flatten(got)
    w, ws = pytree.tree_flatten(want)
    assert gs == ws, f"{what}: structure {gs} != {ws}"
    for i, (a, b) in enumerate(zip(g, w)):
        if not isinstance(b, torch.Tensor):
            assert a == b, f"{what} {i}: {a!r} != {b!r}"
            continue
        assert isinstance(a, torch.Tensor), f"{what} {i}: not a tensor"
        assert a.dtype == b.dtype, f"{what} {i}: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{what} {i}: shape {tuple(a.shape)} != {tuple(b.shape)}"
        if strides and b.numel() > 1:
            assert [s for s, n in zip(a.stride(), a.shape) if n > 1] == \
                [s for s, n in zip(b.stride(), b.shape) if n > 1], \
                f"{what} {i}: strides {a.stride()} != {b.stride()}"
        if values:
            torch.testing.assert_close(a, b, atol=atol, rtol=rtol, equal_nan=True,
                                       msg=lambda m: f"{what} {i}: {m}")


def without_code(summary: Dict[str, Any]) -> bool:
    """Whether a program's summary() is that of a native program in which
    nothing was lowered into generated code: no code was built, so its ATen
    program runs (summary()["runs"] == "aten"), which is not a failure to
    build or load native code."""
    return summary.get("runs") == "aten" and summary.get("kernels") == 0 and \
        summary.get("reason", "").startswith("nothing was lowered")


def check(fn: Callable, args: Sequence[Any], *, server: str, native: Optional[int] = None,
          fallback: Optional[int] = None, atol=None, rtol=None, strides=True,
          no_grad=True) -> Dict[str, Any]:
    """Compiles fn for args through `server`, runs both, compares.

    native: at least this many graph nodes must have been lowered natively
        (None: at least one, unless fallback says otherwise);
    fallback: exactly this many fallback calls (None: any).
    Returns the program's summary().
    """
    args = tuple(args)
    eager_args = clone_inputs(args)
    comp_args = clone_inputs(args)
    ctx = torch.no_grad() if no_grad else torch.enable_grad()
    with ctx:
        cf = compiled.compile(fn, clone_inputs(args), server=server)
        want = fn(*eager_args)
        got = cf(*comp_args)
    summary = cf.summary()
    if summary.get("kernels") == 0 and summary.get("nodes"):
        # nothing was lowered into a kernel: no code was built, the ATen
        # program runs and says why (docs/codegen.md)
        assert without_code(summary), summary
    else:
        assert summary.get("runs") == "native", f"the program did not run native code: " \
            f"{summary}; {cf.programs[-1].native_reason if cf.programs else 'no program'}"
    if native is not None:
        assert summary["native"] >= native, f"only {summary['native']} nodes native: {summary}"
    if fallback is not None:
        assert summary["fallback"] == fallback, f"{summary['fallback']} fallbacks " \
            f"({summary['fallback_ops']}), want {fallback}"
    assert_same(got, want, "output", atol=atol, rtol=rtol, strides=strides)
    assert_same(comp_args, eager_args, "input after the call", atol=atol, rtol=rtol)
    return summary


def check_backward(fn, x, *, server: str, atol=0, rtol=0) -> Dict[str, Any]:
    """Compiles ``fn`` for ``x`` (a leaf that requires grad), runs it and
    its backward with a random incoming gradient, and compares ``x.grad``
    with eager's (bit for bit by default). Asserts the backward program has
    no fallback call; returns the program's summary."""
    x = x.detach().requires_grad_()
    cf = compiled.compile(fn, (x,), server=server)
    y = cf(x)
    grad = torch.randn(y.shape)
    y.backward(grad)
    got = x.grad.clone()
    x.grad = None
    fn(x).backward(grad)
    torch.testing.assert_close(got, x.grad, atol=atol, rtol=rtol)
    summary = cf.summary()
    assert summary["backward"]["fallback"] == 0, summary["backward"]
    return summary


def assert_raises_like_eager(cf, fn, args):
    """Eager raises on ``args``; so does the compiled ``cf``, with an
    exception of eager's type (the native program's index error is both
    IndexError and RuntimeError, eager raising one or the other by op)."""
    import pytest
    with pytest.raises(Exception) as want:
        fn(*args)
    with pytest.raises(type(want.value)):
        cf(*args)


def one_warning(category, fast, fn, inputs):
    """Runs ``fast`` on each of ``inputs`` against eager ``fn`` and checks
    that the calls together gave exactly one warning of ``category`` (a
    fallback says so once, not at every call); returns it."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in inputs:
            torch.testing.assert_close(fast(x), fn(x))
    relevant = [w for w in caught if issubclass(w.category, category)]
    assert len(relevant) == 1, [str(w.message) for w in caught]
    return relevant[0]


def layouts(shape, dtype=torch.float32, seed=0):
    """The same logical tensor in several layouts: contiguous, transposed
    (last two dims), sliced with a step, expanded from size 1, and (4-D)
    channels-last. Yields (name, tensor)."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*s):
        if dtype.is_floating_point:
            return torch.randn(s, generator=g, dtype=dtype)
        if dtype == torch.bool:
            return torch.randint(0, 2, s, generator=g).bool()
        if dtype == torch.uint8:
            return torch.randint(0, 100, s, generator=g, dtype=dtype)
        return torch.randint(-50, 50, s, generator=g, dtype=dtype)

    yield "contiguous", rnd(*shape)
    if len(shape) >= 2:
        yield "transposed", rnd(*shape[:-2], shape[-1], shape[-2]).transpose(-1, -2)
        yield "sliced", rnd(*shape[:-1], shape[-1] * 2)[..., ::2]
        yield "expanded", rnd(*shape[:-2], 1, shape[-1]).expand(shape)
    if len(shape) == 4:
        yield "channels_last", rnd(*shape).contiguous(memory_format=torch.channels_last)


SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 1, 9), (2, 3, 4, 5), (33, 17)]
