"""Native code for bfloat16 and float16 (compiler/ir/half.h,
docs/native-math.md "Half precision"), against eager PyTorch.

Generated code keeps half values as their bits and computes in float32:
each operator reads its operands as float32, computes, and rounds its
result once to the output's dtype (to nearest even), as ATen's CPU kernels
do; reductions accumulate in float32 (sums in double). Matrix products stay
ATen calls. So:

- **exact** (atol=0, rtol=0, NaN bits included where checked) for
  arithmetic, comparisons, selects, clamps, max/argmax, copies, views and
  conversions: ATen computes those in float32 with the same operations and
  rounds once, as generated code does (a number added to a half tensor is
  rounded to its dtype first, a number multiplied is not: both as ATen);
- **within one unit in the last place** of the half dtype (``within_ulps``)
  where a float32 result itself may differ in its last bits between the two:
  a transcendental function (exp, tanh, erf: vector math libraries differ
  in the last float32 bits) or a reduction's order of additions (generated
  code sums float32 in double, ATen in float32 in another order). Both
  results are the float32 value rounded to the half dtype, so they differ
  only where that value lies within a few float32 ulps of a half rounding
  boundary, and then by one half ulp;
- for a whole autocast network, the flips of single roundings above
  propagate through the matrix products that follow them: the compiled
  output is compared with eager's at a tolerance of a few half ulps of the
  output's scale, and it must be as accurate as eager's against a float64
  evaluation of the same network.

Sizes are multiples of 64 elements where exactness is asserted: ATen's
scalar tail (the last elements a vector loop leaves) rounds some formulas
differently from its vector loop (add with alpha), and generated code
follows the vector loop.
"""

import pytest
import torch
import torch.nn.functional as F

import compiled
import daemon_util
from native_util import assert_same, check, clone_inputs

EXACT = dict(atol=0, rtol=0)
HALF = [torch.bfloat16, torch.float16]
IDS = ["bf16", "f16"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = daemon_util.Daemon(tmp_path_factory.mktemp("native_half"), "--verify-ir").start()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def server(daemon):
    return daemon.address


def within_ulps(got, want, what, n=1, atol=0.0):
    """got and want (tensors of a half dtype, or tuples of them) agree to
    n units in the last place of want's dtype (plus atol), NaN with NaN,
    infinities exactly."""
    gs = got if isinstance(got, (tuple, list)) else (got,)
    ws = want if isinstance(want, (tuple, list)) else (want,)
    assert len(gs) == len(ws)
    for i, (g, w) in enumerate(zip(gs, ws)):
        assert g.dtype == w.dtype and g.shape == w.shape, (what, i, g.dtype, w.dtype)
        if not w.dtype.is_floating_point:
            assert torch.equal(g, w), (what, i)
            continue
        fi = torch.finfo(w.dtype) if w.dtype in HALF else torch.finfo(torch.float32)
        gf, wf = g.double(), w.double()
        same = (gf == wf) | (torch.isnan(gf) & torch.isnan(wf))
        _, e = torch.frexp(wf.abs())
        ulp = torch.ldexp(torch.full_like(wf, fi.eps), e - 1).clamp_min(fi.smallest_normal * fi.eps)
        ok = same | ((gf - wf).abs() <= n * ulp + atol)
        bad = (~ok).nonzero()
        assert bad.numel() == 0, (
            f"{what} {i}: {bad.shape[0]} elements beyond {n} ulp, e.g. at "
            f"{bad[0].tolist()}: got {g[tuple(bad[0])].item()!r}, want {w[tuple(bad[0])].item()!r}")


def run(fn, args, server):
    """Compiles fn, runs it and eager on copies; returns (got, want, summary)."""
    with torch.no_grad():
        cf = compiled.compile(fn, clone_inputs(args), server=server)
        want = fn(*clone_inputs(args))
        got = cf(*clone_inputs(args))
    return got, want, cf.summary()


def data(dtype, *shape, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


# ---- elementwise ----

def arithmetic(x, y):
    return (x + y, x - y, x * y, x / y, x + 0.1, x - 0.3, 1 - x, x * 0.1, x / 3.3,
            torch.add(x, y, alpha=0.3), torch.sub(x, y, alpha=2.5), x * x, -x, x.abs(),
            torch.relu(x), x.clamp(-0.5, 0.5), torch.maximum(x, y), torch.minimum(x, y),
            torch.where(x > 0, x, y), x.masked_fill(y > 1, 0.3), x > 0.1, x <= y, x == y,
            torch.isnan(x / y), torch.nan_to_num(x / 0, posinf=1e30),
            torch.tril(x), torch.cat([x, y], 0), x.t() + 1, F.pad(x, (1, 2)))


@pytest.mark.parametrize("dtype", HALF, ids=IDS)
def test_arithmetic_is_exact(server, dtype):
    """Operators ATen computes in float32 and rounds once give eager's bits:
    numbers added in the tensor's dtype, multiplied in float32, alpha in
    the tensor's dtype, the largest finite value of the dtype for an
    infinity nan_to_num replaces (float32's would round to infinity)."""
    x, y = data(dtype, 32, 64), data(dtype, 32, 64, seed=1)
    s = check(arithmetic, (x, y), server=server, fallback=0, **EXACT)
    assert s["kernels"] > 0, s


def transcendental(x):
    return (torch.exp(x), torch.tanh(x), torch.sigmoid(x), F.silu(x), torch.rsqrt(x.abs()),
            torch.log1p(x.abs()), x ** 1.7, F.gelu(x), F.gelu(x, approximate="tanh"),
            F.softplus(x), torch.erf(x))


@pytest.mark.parametrize("dtype", HALF, ids=IDS)
def test_transcendental_within_one_ulp(server, dtype):
    """exp, tanh, erf...: the float32 results differ in their last bits
    (SLEEF or libmvec against ATen's own vector code), so the rounded
    results may differ by one half ulp. gelu's tail (x < -3) is the
    float32 formula's own absolute error, about 1e-7, as for float32."""
    x = data(dtype, 64, 96, seed=2)
    got, want, s = run(transcendental, (x,), server)
    assert s["runs"] == "native" and s["fallback"] == 0 and s["kernels"] > 0, s
    within_ulps(got, want, "transcendental", n=1, atol=1e-6)


# ---- reductions and normalizations ----

def reductions(x, w, b):
    xt = x.t()  # a strided input
    return (x.sum(-1), x.sum(0), xt.sum(-1), x.sum(), x.mean(-1), x.amax(-1), x.amin(0),
            x.argmax(-1), x.max(-1).values, x.var(-1), x.std(0), torch.softmax(x, -1),
            torch.softmax(xt, -1), torch.log_softmax(x, -1), torch.logsumexp(x, -1),
            F.layer_norm(x, (x.shape[-1],), w, b), F.layer_norm(x, (x.shape[-1],)),
            torch.linalg.vector_norm(x, dim=-1), x.sum(-1, dtype=torch.float32))


@pytest.mark.parametrize("dtype", HALF, ids=IDS)
def test_reductions_and_norms_within_one_ulp(server, dtype):
    """Sums, means, variances, softmax, log_softmax and layer_norm
    accumulate in float32 (double) and round once: one half ulp from
    eager's at most; max, min and argmax are exact."""
    x = data(dtype, 48, 200, seed=3)
    w, b = data(dtype, 200, seed=4, scale=1.0), data(dtype, 200, seed=5, scale=1.0)
    got, want, s = run(reductions, (x, w, b), server)
    assert s["runs"] == "native" and s["fallback"] == 0 and s["kernels"] > 0, s
    within_ulps(got[:-1], want[:-1], "reductions", n=1, atol=1e-6)
    for i in (5, 6, 7, 8):  # amax, amin, argmax, max: exact
        assert torch.equal(got[i], want[i]), i
    # a float32 sum of half values: float32's tolerance (summation order)
    torch.testing.assert_close(got[-1], want[-1])


# ---- conversions ----

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.1, 1 / 3, 65504.0, 65519.0, 65520.0, 1e5, -1e5, 3.0e38,
           3.4e38, float("inf"), float("-inf"), float("nan"), 1e-8, -1e-8, 6e-8, 2.9e-8,
           3.0e-8, 1e-40, -1e-40, 1e-45, 5.96e-8, 6.1e-5, 6.09e-5,
           1.00390625, 1.01171875, 1.0009765625, 1.0029296875,  # ties of bf16 and f16
           256.5, 257.5, 2049.0, 2051.0, -2051.0]


def conversions(x, h, i):
    b = x.to(torch.bfloat16)
    f = x.to(torch.float16)
    return (b, f, b.float(), f.float(), b.double(), f.to(torch.bfloat16), b.to(torch.float16),
            i.to(torch.bfloat16), i.to(torch.float16), h.to(torch.int32), h.to(torch.int64),
            h.to(torch.bool), h.to(torch.uint8), x.double().to(torch.bfloat16),
            x.double().to(torch.float16), h * 1)


def test_conversions_are_exact_to_the_bit(server):
    """float32, float64 and integers to bfloat16 and float16 round to
    nearest even (ties to even, float16 subnormals and overflow to
    infinity included), back exactly: the outputs' bits are eager's. A
    NaN is a NaN: its bits are those of eager's vectorized conversion from
    float32 (bfloat16 0xffff), but eager's own conversions disagree among
    themselves (float16 to bfloat16 makes 0x7fc0)."""
    g = torch.Generator().manual_seed(6)
    vals = torch.tensor(SPECIAL, dtype=torch.float32)
    x = torch.cat([vals, -vals, torch.randn(512 - 2 * len(vals), generator=g) * 1000])
    h = torch.cat([torch.tensor([0.0, -0.0, 1.5, -1.5, 2.5, -2.5, 255.9, 1e4]),
                   torch.randn(56, generator=g) * 100]).to(torch.bfloat16)
    i = torch.cat([torch.tensor([0, 1, -1, 257, 2049, 2 ** 24 + 1, 2 ** 40 + 3, -(2 ** 40 + 3)]),
                   torch.randint(-10 ** 9, 10 ** 9, (56,), generator=g)])
    got, want, s = run(conversions, (x, h, i), server)
    assert s["runs"] == "native" and s["fallback"] == 0, s
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == b.dtype, (k, a.dtype, b.dtype)
        if b.dtype in HALF:
            nan = torch.isnan(b)
            assert torch.equal(torch.isnan(a), nan), k
            ab, bb = a.view(torch.int16)[~nan], b.view(torch.int16)[~nan]
            assert torch.equal(ab, bb), (k, (ab != bb).nonzero()[:4].tolist())
        else:
            assert_same(a, b, f"conversion {k}", atol=0, rtol=0)


# ---- mixed dtypes ----

def mixed(x, b, f, i):
    return (x * b, b + f, b * 2.5 + x, torch.where(b > 0, b, x), torch.cat([b, b * 2], 1),
            (b + i).sum(-1), b.float().softmax(-1).to(torch.bfloat16), f.sum(-1) * 2,
            torch.maximum(b, f.to(torch.bfloat16)), b.to(torch.float16) - f)


def test_mixed_dtype_graph(server):
    """float32, bfloat16, float16 and int64 values in one program: type
    promotion is eager's (bfloat16 with float16 is float32), each operator
    rounds to its own result dtype."""
    x = data(torch.float32, 16, 64, seed=7)
    b = data(torch.bfloat16, 16, 64, seed=8)
    f = data(torch.float16, 16, 64, seed=9)
    i = torch.randint(-5, 5, (16, 64), generator=torch.Generator().manual_seed(10))
    got, want, s = run(mixed, (x, b, f, i), server)
    assert s["runs"] == "native" and s["fallback"] == 0, s
    exact = [0, 1, 2, 3, 4, 8, 9]
    for k in exact:
        assert_same(got[k], want[k], f"mixed {k}", atol=0, rtol=0)
    within_ulps([got[k] for k in (5, 6, 7)], [want[k] for k in (5, 6, 7)], "mixed sums",
                n=1, atol=1e-6)


# ---- autocast inference ----

class Block(torch.nn.Module):
    """A pre-norm transformer block: attention (softmax of scaled
    products) and a GELU MLP."""

    def __init__(self, d=128, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        a = torch.softmax((q @ k.transpose(-1, -2)) * (D // self.heads) ** -0.5, -1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def autocast_model():
    torch.manual_seed(0)
    return Block().eval()


def test_autocast_bf16_inference_runs_generated_code(server):
    """torch.autocast(bfloat16) around compiled.compile: the captured graph
    casts to bfloat16 around the products, which stay ATen calls; the casts,
    layer norms, softmax, GELU and residual adds run in generated kernels,
    with no fallback. Compared with eager under autocast: a rounding that
    flips by one bfloat16 ulp (layer norm's float32 output rounded for the
    product, see the module's docstring) moves the products after it, so
    the tolerance is a few bfloat16 ulps of the output's scale; and the
    compiled output is as close to a float64 evaluation as eager's is."""
    m = autocast_model()
    x = torch.randn(2, 32, 128, generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        cf = compiled.compile(m, (x,), server=server)
        got = cf(x)
        want = m(x)
    s = cf.summary()
    assert s["runs"] == "native" and s["kernels"] > 0 and s["fallback"] == 0, s
    assert s["extern"] >= 6, s  # qkv, two batched products, proj, fc1, fc2
    assert got.dtype == want.dtype == torch.float32
    scale = want.abs().max().item()
    torch.testing.assert_close(got, want, atol=4 * scale * 2 ** -8, rtol=0)
    m64 = autocast_model().double()
    with torch.no_grad():
        ref = m64(x.double())
    err_got = (got.double() - ref).abs().max().item()
    err_eager = (want.double() - ref).abs().max().item()
    assert err_got <= 1.5 * err_eager, (err_got, err_eager)


def test_autocast_bf16_mlp_matches_eager_exactly(server):
    """An autocast MLP without layer norm (linear, GELU, linear): every
    rounding is the same as eager's, so are the outputs."""
    torch.manual_seed(2)
    m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                            torch.nn.Linear(256, 64)).eval()
    x = torch.randn(16, 64)

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return m(x).softmax(-1), m(x) + 1
    got, want, s = run(f, (x,), server)
    assert s["runs"] == "native" and s["kernels"] > 0 and s["fallback"] == 0, s
    within_ulps(got, want, "autocast mlp", n=1, atol=1e-6)
