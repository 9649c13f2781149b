"""Matrix products through oneDNN's sgemm (compiler/sched/schedule.c
sc_gemm_of, compiler/codegen/blas.c cg__gen_gemm; docs/codegen.md).

A float32 mm or addmm is a call of oneDNN's sgemm from generated code when
the client's process has oneDNN loaded (Debian's torch does) and the CPU
has AVX-512: the target features "dnnl" and "avx512f". Its sums are in
another order than eager's OpenBLAS, so results are compared with eager's
within float32 rounding of the products (relative to their magnitude);
every layout sgemm can read (either operand transposed, sliced with a
leading dimension), addmm's broadcasts of self, alpha and beta (beta 0
ignores a NaN self). What stays ATen's call (float64, a transposed B
oneDNN reads slowly, and everything with COMPILED_DNNL=0) is eager's bits.
"""

import re

import pytest
import torch

import compiled
import compiled.native
import compiled.target
from native_util import check, onednn_products

EXACT = dict(atol=0, rtol=0)


@pytest.fixture(scope="module")
def dnnl():
    """Whether this process offers oneDNN's sgemm to generated code."""
    if not onednn_products():
        pytest.skip("no oneDNN in this process or no AVX-512: products stay ATen calls")
    return True


def products_tol(*ts, k):
    """A tolerance for float32 products over k terms of these operands:
    the sums' rounding, in any order, is below k * eps * |a| |b| per
    element; half of that bound covers what both orders give."""
    big = 1.0
    for t in ts:
        big *= max(t.abs().max().item(), 1.0)
    return dict(atol=k * 1.2e-7 * big, rtol=1e-5)


def compile_source(fn, args, server):
    cf = compiled.compile(fn, args, server=server)
    with torch.no_grad():
        cf(*args)
    return cf.sources()


def operand(rows, cols, layout):
    """A rows x cols float32 matrix: contiguous, transposed (columns
    contiguous), or a slice of a wider matrix (leading dimension larger
    than its columns)."""
    if layout == "t":
        return torch.randn(cols, rows).t()
    if layout == "slice":
        return torch.randn(rows, cols + 7)[:, 3:3 + cols]
    return torch.randn(rows, cols)


@pytest.mark.parametrize("la", ["c", "t", "slice"])
@pytest.mark.parametrize("lb", ["c", "t", "slice"])
def test_mm_of_every_layout_is_onednns_product(server, dnnl, la, lb):
    a, b = operand(96, 200, la), operand(200, 72, lb)

    def f(a, b):
        return torch.relu(a @ b) * 2

    check(f, (a, b), server=server, fallback=0, **products_tol(a, b, k=200))
    src = compile_source(f, (a, b), server)
    assert "dnnl_sgemm(" in src
    # a failing call returns GC_SEG_ELIBRARY (2), which the runtime raises
    # as a RuntimeError, not as an index error
    assert re.search(r"if \(gc_mm\d+\(.*\)\)\n    return 2;", src), src
    assert isinstance(compiled.native._segment_error(2), RuntimeError)
    assert not isinstance(compiled.native._segment_error(2), IndexError)
    assert isinstance(compiled.native._segment_error(1), IndexError)


@pytest.mark.parametrize("bias", ["row", "1xN", "Mx1", "MxN", "scalar"])
def test_addmm_broadcasts_self_as_aten(server, dnnl, bias):
    m, n, k = 64, 48, 80
    shapes = {"row": (n,), "1xN": (1, n), "Mx1": (m, 1), "MxN": (m, n), "scalar": ()}
    x, w = torch.randn(m, k), torch.randn(n, k)
    c = torch.randn(shapes[bias])

    def f(c, x, w):
        return torch.addmm(c, x, w.t()).sigmoid()

    check(f, (c, x, w), server=server, fallback=0, **products_tol(x, w, k=k))
    assert "dnnl_sgemm(" in compile_source(f, (c, x, w), server)


@pytest.mark.parametrize("alpha,beta", [(0.5, 2.0), (3, 1), (-1.0, 0.25)])
def test_addmm_alpha_and_beta(server, dnnl, alpha, beta):
    c, x, y = torch.randn(40, 56), torch.randn(40, 30), torch.randn(30, 56)

    def f(c, x, y):
        return torch.addmm(c, x, y, beta=beta, alpha=alpha) + 1

    check(f, (c, x, y), server=server, fallback=0,
          **products_tol(x, y, torch.tensor(float(abs(alpha)) + abs(beta)), k=30))
    assert "dnnl_sgemm(" in compile_source(f, (c, x, y), server)


def test_addmm_with_beta_zero_reads_no_self(server, dnnl):
    """beta 0: ATen ignores self, NaN and infinity included, and so does
    the generated call (no copy of self; sgemm's beta 0 ignores C, which
    holds whatever the arena held before)."""
    c = torch.full((32, 24), float("nan"))
    c[0, 0] = float("inf")
    x, y = torch.randn(32, 16), torch.randn(16, 24)

    def f(c, x, y):
        return torch.addmm(c, x, y, beta=0) * 3

    check(f, (c, x, y), server=server, fallback=0, **products_tol(x, y, k=16))
    src = compile_source(f, (c, x, y), server)
    assert "dnnl_sgemm(" in src and "self[" not in src


def test_a_linear_layers_forward_and_gradients(server, dnnl):
    """nn.Linear in training: addmm forward, mm backward (both operands'
    gradients), all through oneDNN; gradients within rounding of eager's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(100, 300), torch.nn.Tanh(),
                                torch.nn.Linear(300, 20))
    ref = torch.nn.Sequential(torch.nn.Linear(100, 300), torch.nn.Tanh(),
                              torch.nn.Linear(300, 20))
    ref.load_state_dict(model.state_dict())
    x = torch.randn(50, 100)
    cf = compiled.compile(model, (x,), server=server)
    cf(x).square().sum().backward()
    ref(x).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        scale = q.grad.abs().max().item()
        assert (p.grad - q.grad).abs().max().item() <= 1e-5 * scale, name
    assert cf.summary()["runs"] == "native" and cf.summary()["backward"]["runs"] == "native"
    assert cf.sources().count("dnnl_sgemm(") >= 5  # 2 forward, 3 backward (no input grad)


def test_what_onednn_does_not_get_stays_atens_and_eagers_bits(server, dnnl):
    """float64 (oneDNN has no dgemm) and a transposed B whose leading
    dimension is a multiple of 512 floats with 16 to 127 rows of A (oneDNN
    2.6 reads it at a fraction of its speed) stay ATen's product: eager's
    bits."""
    x64, w64 = torch.randn(16, 30, dtype=torch.float64), torch.randn(30, 20, dtype=torch.float64)
    f = lambda a, b: (a @ b).exp()  # noqa: E731
    check(f, (x64, w64), server=server, **EXACT)
    assert "dnnl_sgemm(" not in compile_source(f, (x64, w64), server)
    x, w = torch.randn(64, 1024), torch.randn(256, 1024)
    g = lambda a, b: torch.nn.functional.linear(a, b).relu()  # noqa: E731
    check(g, (x, w), server=server, **EXACT)
    assert "dnnl_sgemm(" not in compile_source(g, (x, w), server)
    # the same product with 128 rows, or with 8, is oneDNN's
    for rows in (128, 8):
        x = torch.randn(rows, 1024)
        assert "dnnl_sgemm(" in compile_source(g, (x, w), server)


def test_compiled_dnnl_0_keeps_eagers_blas(server, dnnl, monkeypatch):
    """COMPILED_DNNL=0: the client does not offer oneDNN, the target (and
    the key) differ, and products are ATen's calls: eager's bits."""
    monkeypatch.setenv("COMPILED_DNNL", "0")
    assert "dnnl" not in compiled.target.target_message().isa
    x, w = torch.randn(64, 96), torch.randn(96, 80)
    f = lambda a, b: (a @ b) * 2 - 1  # noqa: E731
    check(f, (x, w), server=server, fallback=0, **EXACT)
    assert "dnnl_sgemm(" not in compile_source(f, (x, w), server)
