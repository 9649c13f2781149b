"""What compiled.compile cannot capture as one graph runs eagerly, with one
warning saying why, never with a cryptic error: data-dependent Python (a
branch on a tensor's value, .item() deciding a shape) and quantized models.
And what it can: every global setting that changes what eager computes
(autocast, the default dtype, deterministic algorithms, grad mode) selects
its own program, as Dynamo guards on them."""

import warnings

import pytest
import torch

import compiled


# The shared daemon (conftest.py's server) without --verify-ir.
SERVER_ARGS = ()


def _warnings_of(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    return out, [w for w in caught if issubclass(w.category, compiled.CompileFallbackWarning)]


def _branchy(x):
    if x.sum() > 0:      # a Python branch on a tensor's value
        return x * 2
    return x - 1


def _item_shape(x):
    n = int(x.abs().sum().item()) + 1   # .item() deciding a shape
    return torch.ones(n) * x.mean()


@pytest.mark.parametrize("fn", [_branchy, _item_shape])
def test_data_dependent_python_runs_eagerly_with_one_warning(server, fn):
    x = torch.randn(5)
    f, caught = _warnings_of(compiled.compile, fn, (x,), server=server)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "tensor values" in message and 'backend="compiled"' in message
    for sign in (1, -1, 1):
        y = sign * torch.rand(5)
        out, again = _warnings_of(f, y)
        torch.testing.assert_close(out, fn(y))
        assert not again, "warned once, at compile()"
    assert f.compiles == 0


def test_an_error_of_the_program_itself_still_raises(server):
    def broken(x):
        return x @ torch.ones(3, 3)   # a shape error, as in eager
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        compiled.compile(broken, (torch.randn(2, 4),), server=server)


def test_a_quantized_model_runs_eagerly_with_a_warning_naming_the_reason(server):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # torch.ao.quantization's deprecation notices
        q = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    x = torch.randn(2, 8)
    f, caught = _warnings_of(compiled.compile, q, (x,), server=server)
    assert len(caught) == 1 and "quantized" in str(caught[0].message)
    torch.testing.assert_close(f(x), q(x))


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                               torch.nn.Linear(16, 4)).eval()


def test_autocast_at_call_time_is_honoured_both_ways(server):
    m = _mlp()
    x = torch.randn(4, 8)
    with torch.no_grad():
        outside = compiled.compile(m, (x,), server=server)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = outside(x), m(x)
        assert got.dtype == want.dtype == torch.bfloat16
        torch.testing.assert_close(got, want)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            inside = compiled.compile(m, (x,), server=server)
        got, want = inside(x), m(x)
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got, want)
        with torch.autocast("cpu", dtype=torch.float16):
            got, want = inside(x), m(x)
        assert got.dtype == want.dtype == torch.float16


def test_the_default_dtype_is_part_of_the_signature(server):
    def make(x):
        return x.sum() + torch.ones(3)   # a factory without a dtype
    x = torch.randn(3, dtype=torch.float64)
    f = compiled.compile(make, (x,), server=server)
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        got, want = f(x), make(x)
    finally:
        torch.set_default_dtype(previous)
    assert got.dtype == want.dtype == torch.float64
    assert f.compiles == 2


def test_deterministic_algorithms_select_their_own_program(server):
    f = compiled.compile(torch.sin, (torch.randn(3),), server=server)
    try:
        torch.use_deterministic_algorithms(True)
        torch.testing.assert_close(f(torch.ones(3)), torch.sin(torch.ones(3)))
    finally:
        torch.use_deterministic_algorithms(False)
    assert f.compiles == 2
