"""Native code for elementwise math, activations and backward operators,
against eager PyTorch (tests/python/native_util.py).

Every check asserts fallback=0: the operators under test ran in generated
code, not through ATen. Programs batch many operators, so the C compiler
runs a few dozen times in all. Where generated code and ATen compute the
same formula with the same operations, the comparison is exact (atol=0,
rtol=0), and the sign of zero is checked too (each result's signbit is an
extra output, NaN excluded); where a transcendental function is involved
(exp, log, erf, tanh, pow with a general exponent), results may differ in
the last bits between SLEEF's and ATen's vector code, and the default
tolerance of assert_close applies.

Values on which ATen's own vectorized loop and scalar tail disagree (a NaN
at a branch of hardtanh_backward, exactly 3 for hardswish_backward, a huge
quotient in vectorized fmod) are left out: generated code follows the
vectorized loop.
"""

import pytest
import torch
import torch.nn.functional as F

from native_util import check, layouts

A = torch.ops.aten


def sign_bits(ys):
    """The signbit of every floating result (False for NaN): makes an exact
    comparison see -0.0 vs 0.0."""
    return tuple(torch.where(torch.isnan(y), False, torch.signbit(y))
                 for y in ys if y.dtype.is_floating_point)


def with_signs(*ys):
    return tuple(ys) + sign_bits(ys)


SPECIAL = [0.0, -0.0, 1.5, -2.5, 0.5, -0.5, 3.0, -3.0, 7.0, -7.0, 20.0, -20.0,
           float("inf"), float("-inf"), float("nan"), 1e-30, -1e-30, 1e-8, -1e-8,
           1e30, -1e30, 1e-45, 0.9999, 2.9999, -2.9999, 1.0, -1.0, 0.25, 0.75]


def special(dtype=torch.float32, extra=40, seed=0):
    """The special values, then random ones (so vector loops see them too)."""
    g = torch.Generator().manual_seed(seed)
    return torch.cat([torch.tensor(SPECIAL, dtype=dtype),
                      torch.randn(extra, generator=g, dtype=dtype) * 4])


def pairs(dtype=torch.float32):
    """Every pair of two special values, plus random pairs."""
    # (no quotient beyond float32's range: ATen's vectorized fmod gives NaN)
    s = torch.tensor(SPECIAL[:16] + [float("nan"), 1e-30, 1e6], dtype=dtype)
    g = torch.Generator().manual_seed(1)
    a = torch.cat([s.repeat_interleave(len(s)), torch.randn(40, generator=g, dtype=dtype) * 3])
    b = torch.cat([s.repeat(len(s)), torch.randn(40, generator=g, dtype=dtype) * 3])
    return a, b


# ---- unary ----

UNARY_EXACT = [torch.sign, torch.sgn, torch.frac, torch.square, torch.isinf, torch.isposinf,
               torch.isneginf, torch.signbit, A.isfinite, torch.nan_to_num,
               lambda x: torch.nan_to_num(x, 1.5, 2.0, -3.0), torch.deg2rad, torch.rad2deg,
               torch.abs, torch.neg, torch.reciprocal, torch.isnan, torch.trunc, torch.round]
UNARY_APPROX = [torch.exp2, torch.log2, torch.log10, torch.erfc, torch.lgamma, torch.logit,
                lambda x: torch.logit(x, 0.25), torch.sinc, torch.expm1, torch.log1p]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unary_special_values(server, dtype):
    x = special(dtype)
    check(lambda x: with_signs(*[op(x) for op in UNARY_EXACT]), (x,), server=server,
          fallback=0, atol=0, rtol=0)
    check(lambda x: tuple(op(x) for op in UNARY_APPROX), (x,), server=server, fallback=0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8,
                                   torch.uint8, torch.bool])
def test_unary_on_integers(server, dtype):
    ops = [torch.sign, torch.sgn, torch.square, torch.isinf, torch.isposinf, torch.isneginf,
           torch.signbit, A.isfinite, torch.nan_to_num, torch.reciprocal, torch.deg2rad,
           torch.isnan, torch.exp2, torch.lgamma]
    if dtype != torch.bool:
        ops += [torch.abs, torch.neg, torch.bitwise_not]
    x = next(layouts((5, 7), dtype=dtype))[1]
    if dtype == torch.int64:  # the extremes wrap as in eager
        x[0, :4] = torch.tensor([torch.iinfo(dtype).min, torch.iinfo(dtype).max, 0, -1])
    check(lambda x: tuple(op(x) for op in ops), (x,), server=server, fallback=0)


# ---- binary and ternary ----

BINARY_EXACT = [torch.remainder, torch.fmod, torch.floor_divide, torch.true_divide,
                lambda a, b: torch.remainder(a, 2.5), lambda a, b: torch.remainder(3, b),
                lambda a, b: torch.fmod(a, -1.5), lambda a, b: torch.floor_divide(a, 0.3),
                lambda a, b: torch.div(a, b, rounding_mode="trunc"),
                lambda a, b: torch.div(a, b, rounding_mode="floor"),
                lambda a, b: torch.div(a, 3, rounding_mode="trunc"),
                lambda a, b: a ** 2, lambda a, b: a ** 3, lambda a, b: sign_bits([a ** 0.5])[0],
                lambda a, b: a ** -0.5, lambda a, b: a ** -1, lambda a, b: a ** -2,
                lambda a, b: a ** 0, lambda a, b: torch.pow(1, b), torch.xlogy,
                lambda a, b: torch.xlogy(a, 2.0), lambda a, b: torch.xlogy(2.0, b),
                torch.special.xlog1py, torch.copysign, lambda a, b: torch.copysign(a, -0.0),
                torch.hypot, torch.fmax, torch.fmin, torch.heaviside,
                lambda a, b: torch.addcdiv(b, a, b, value=-2),
                lambda a, b: torch.where(a > b, a, 1.5), lambda a, b: torch.where(a > b, -2, b),
                lambda a, b: torch.clamp(a, b), lambda a, b: torch.clamp(a, None, b),
                lambda a, b: torch.clamp(a, -0.0, 2.0), torch.maximum]
# lerp and addcmul are multiply-adds that ATen's build contracts into FMAs;
# gcc contracts generated code too, but not where it shares a product
# between two fused operators, so the last bit may differ. a ** 0.5 is
# sqrt, which torch 2's x86 builds compute with MKL's vector sqrt (VML_HA,
# aten/src/ATen/cpu/vml.h), not correctly rounded on every CPU: about 15%
# of float32 values (1% of float64) come out 1 ulp off on an AMD EPYC,
# where torch 1.13 without MKL and generated code round correctly; its
# sign is compared exactly above.
BINARY_APPROX = [lambda a, b: a ** 0.5, lambda a, b: a ** 1.7, torch.pow, lambda a, b: torch.pow(2, b), torch.logaddexp,
                 torch.logaddexp2, torch.atan2, lambda a, b: torch.lerp(a, b, 0.3),
                 lambda a, b: torch.lerp(a, b, 0.7), lambda a, b: torch.lerp(a, b, -0.7),
                 lambda a, b: torch.lerp(a, b, a.abs() / 8), lambda a, b: torch.addcmul(a, a, b),
                 lambda a, b: torch.addcmul(a, a, b, value=0.5)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_binary_special_values(server, dtype):
    a, b = pairs(dtype)
    check(lambda a, b: with_signs(*[op(a, b) for op in BINARY_EXACT]), (a, b), server=server,
          fallback=0, atol=0, rtol=0)
    check(lambda a, b: tuple(op(a, b) for op in BINARY_APPROX), (a, b), server=server,
          fallback=0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8,
                                   torch.uint8])
def test_integer_division_by_numbers_and_shifts(server, dtype):
    def f(x, y):
        c = y % 70 if dtype != torch.uint8 else y
        return (torch.remainder(x, 3), torch.remainder(x, -4), torch.fmod(x, 3), torch.fmod(x, -4),
                torch.floor_divide(x, 3), torch.floor_divide(x, -4),
                torch.div(x, 3, rounding_mode="trunc"), torch.div(x, -4, rounding_mode="floor"),
                torch.div(x, y), x / 2, torch.pow(x, 2), torch.pow(x, 3), torch.pow(x, 0),
                torch.pow(x, 1), torch.square(x), torch.fmax(x, y), torch.fmin(x, y),
                torch.remainder(x, 2.5), x << 2, x >> 1, x << c, x >> c,
                torch.bitwise_left_shift(x, 3), torch.bitwise_right_shift(x, c), x & y, x ^ y,
                torch.where(x > 0, x, 7), torch.where(x > 0, 3, x), torch.where(x > 0, 1.5, 2),
                torch.clamp(x, y, y + 5), torch.addcmul(x, y, x, value=3), x == -4, x > -4,
                x + (-4), F.threshold(x, 3, -1) if dtype != torch.uint8 else x,
                F.relu(x) if dtype != torch.uint8 else x, torch.heaviside(x, y))
    x = next(layouts((6, 9), dtype=dtype))[1]
    if dtype == torch.int64:
        x[0, :4] = torch.tensor([torch.iinfo(dtype).min, torch.iinfo(dtype).max, -7, 7])
    if dtype == torch.uint8:
        x[0, :2] = torch.tensor([252, 255])  # 252 is -4 as uint8
    y = next(layouts((9,), dtype=dtype, seed=3))[1]
    check(f, (x, y), server=server, fallback=0, atol=0, rtol=0)


def test_negative_numbers_with_unsigned_tensors_wrap(server):
    # -4 with a uint8 tensor is 252, as ATen converts the number (a defect
    # before this change: x == -4 was always false)
    x = torch.tensor([252, 4, 0, 255, 1] * 4, dtype=torch.uint8)
    check(lambda x: (x == -4, x > -4, x != -1, x + (-4), x * -3, torch.where(x > 3, x, -1)),
          (x,), server=server, fallback=0, atol=0, rtol=0)


def test_shift_counts_out_of_range_give_what_eager_gives(server):
    # torch 2 shifts by a count outside [0, width) to 0 (<<) or the sign
    # (>>): 1 << 70 == 0; torch 1.13 took the count modulo the width
    # (1 << 70 == 64), as x86 does
    x = torch.tensor([1, -8, 5, 3, -1] * 8, dtype=torch.int64)
    c = torch.tensor([70, 2, -1, 64, 63] * 8, dtype=torch.int64)
    x32, c32 = x.int(), c.int()
    x8, c8 = x.to(torch.int8), torch.tensor([9, 2, -1, 40, 7] * 8, dtype=torch.int8)
    check(lambda x, c, x32, c32, x8, c8: (x << c, x >> c, x32 << c32, x32 >> c32, x8 << c8,
                                          x8 >> c8, x << 70),
          (x, c, x32, c32, x8, c8), server=server, fallback=0, atol=0, rtol=0)


def test_bool_arithmetic_and_comparisons(server):
    b = torch.tensor([True, False, True, False] * 5)
    c = torch.tensor([True, True, False, False] * 5)
    check(lambda b, c: (b == c, b != c, b * c, b + c, b < c, b >= c, b & c, b | c, b ^ c,
                        torch.where(b, c, False), torch.pow(b, 2), torch.maximum(b, c),
                        torch.sign(b), torch.where(b, 1, 0.5), torch.logical_xor(b, c),
                        torch.square(b), torch.fmax(b, c)),
          (b, c), server=server, fallback=0, atol=0, rtol=0)


def test_float_to_integer_and_back_has_no_negative_zero(server):
    # Found by graphgen (seed 313879): gcc turned (float)(int64_t)x into
    # trunc(x), which keeps the sign of -0.4, so atan2(that, -1) was -pi
    # where eager, whose integer 0 becomes +0.0, gives pi
    def f(x, y):
        i = (x * 4).to(torch.int64)
        j = x.to(torch.int32)
        return with_signs(i.to(torch.float32), torch.atan2(i, y), j.to(torch.float64),
                          (x * 3).to(torch.int16).to(torch.float32))
    x = torch.tensor([-0.1, 0.1, -0.3, -0.9, 2.0, -0.0, 0.0, -7.7] * 4)
    y = -torch.ones(32)
    check(f, (x, y), server=server, fallback=0, atol=0, rtol=0)


def test_clamps_keep_negative_zero_as_eager(server):
    # relu, hardtanh and clamp with number bounds keep x when it equals the
    # bound: relu(-0.0) is -0.0 in eager (a defect before this change).
    # A NaN number bound makes torch 2 fill the result with NaN (torch 1.13
    # ignored it), hardtanh's too.
    nan = float("nan")
    x = torch.tensor([-0.0, 0.0, -1.0, 2.0, nan] * 8)
    check(lambda x: with_signs(F.relu(x), F.relu6(x), F.hardtanh(x, -0.0, 0.0),
                               torch.clamp(x, 0.0, 6.0), torch.clamp_min(x, 0.0),
                               torch.clamp_max(x, -0.0), torch.clamp(x, nan),
                               torch.clamp(x, -1.0, nan), torch.clamp_max(x, nan),
                               F.hardtanh(x, nan, 1.0)),
          (x,), server=server, fallback=0, atol=0, rtol=0)


# ---- activations ----

ACT_EXACT = [F.relu6, F.hardsigmoid, F.hardswish, F.hardshrink, lambda x: F.softshrink(x, 0.4),
             lambda x: F.threshold(x, 0.1, 2.0),
             lambda x: F.prelu(x, torch.tensor([0.25], dtype=x.dtype)),
             lambda x: F.rrelu(x, training=False), lambda x: F.leaky_relu(x, 0.2),
             lambda x: F.hardtanh(x, -0.5, 0.75), F.relu]
ACT_APPROX = [F.elu, lambda x: F.elu(x, 0.7), F.selu, lambda x: F.celu(x, 0.6),
              F.softplus, lambda x: F.softplus(x, 2.0, 5.0), F.mish, F.logsigmoid,
              lambda x: A.log_sigmoid_forward(x), lambda x: F.gelu(x, approximate="tanh"),
              F.silu, torch.sigmoid, torch.tanh]


def flat(ys):
    out = []
    for y in ys:
        out.extend(y if isinstance(y, tuple) else (y,))
    return tuple(out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_activations_special_values(server, dtype):
    x = special(dtype, extra=51)
    check(lambda x: with_signs(*flat(op(x) for op in ACT_EXACT)), (x,), server=server,
          fallback=0, atol=0, rtol=0)
    # approximate values, exact signs (elu(-0.0) is -0.0 in torch 2, whose
    # elu computes expm1; +0.0 in torch 1.13's exp - 1);
    # eager's float32 gelu is oneDNN's, whose zeros are all +0.0
    check(lambda x: with_signs(*flat(op(x) for op in ACT_APPROX)) + (
        F.gelu(x), F.glu(x.view(8, 10), 0), F.glu(x.view(8, 10), -1)), (x,), server=server,
        fallback=0)


def test_prelu_per_channel_and_glu_halves(server):
    w = torch.tensor([0.1, -0.2, 0.3])

    def f(x, w):
        return (F.prelu(x, w), F.glu(x, 2), F.glu(x, -1), F.glu(x.transpose(1, 3), 1))
    for name, x in layouts((2, 3, 4, 6)):
        check(f, (x, w), server=server, fallback=0)


# ---- everything elementwise, on every layout ----

def all_pointwise(x, y):
    out = [op(x) for op in UNARY_EXACT + UNARY_APPROX[:4]]
    out += [op(x, y) for op in BINARY_EXACT + BINARY_APPROX]
    out += flat(op(x) for op in ACT_EXACT + ACT_APPROX + [F.gelu])
    return tuple(out)


@pytest.mark.parametrize("shape", [(0,), (7,), (2, 3, 4, 5), (33, 17)], ids=str)
def test_pointwise_on_every_layout(server, shape):
    y = next(layouts(shape[-1:], seed=5))[1].abs() + 0.5
    for name, x in layouts(shape):
        check(all_pointwise, (x, y), server=server, fallback=0)


# ---- backward operators ----

def act_backwards(g, x):
    y = torch.sigmoid(x)
    return (A.threshold_backward(g, x, 0.5), A.threshold_backward(g, x, 0),
            A.gelu_backward(g, x), A.gelu_backward(g, x, approximate="tanh"),
            A.silu_backward(g, x), A.mish_backward(g, x), A.sigmoid_backward(g, y), A.tanh_backward(g, torch.tanh(x)),
            A.leaky_relu_backward(g, x, 0.2, False), A.leaky_relu_backward(g, x, 0.0, True),
            A.elu_backward(g, 1.0, 1.0, 1.0, False, x),
            A.elu_backward(g, 0.5, 1.2, 1.0, True, F.elu(x, 0.5)),
            A.softplus_backward(g, x, 1.0, 20.0), A.softplus_backward(g, x, 2.0, 3.0),
            A.hardsigmoid_backward(g, x), A.hardshrink_backward(g, x, 0.5),
            A.softshrink_backward(g, x, 0.5),
            A.log_sigmoid_backward(g, x, A.log_sigmoid_forward(x)[1]),
            A.logit_backward(g, y), A.logit_backward(g, y * 1.2 - 0.1, 0.05),
            A.mse_loss_backward(g, x, x * 0.5 + 1, 0))


def test_activation_backwards_special_values(server):
    x = special(extra=71)
    x = x[~(torch.isnan(x) | (x.abs() == 3))]  # where ATen's own loops disagree
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))

    def f(g, x):
        return act_backwards(g, x) + (A.hardtanh_backward(g, x, -1.0, 1.0),
                                      A.hardswish_backward(g, x))
    check(f, (g, x), server=server, fallback=0)
    check(lambda g, x: with_signs(A.threshold_backward(g, x, 0.5), A.hardsigmoid_backward(g, x),
                                  A.hardtanh_backward(g, x, -1.0, 1.0),
                                  A.hardshrink_backward(g, x, 0.5),
                                  A.leaky_relu_backward(g, x, 0.2, False),
                                  A.mse_loss_backward(g, x, x * 0.5 + 1, 0)),
          (g, x), server=server, fallback=0, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_activation_backwards_on_layouts(server, dtype):
    cases = list(zip(layouts((2, 3, 4, 6), dtype), layouts((2, 3, 4, 6), dtype, 7)))
    if dtype == torch.float64:
        cases = cases[:2]  # contiguous and transposed
    for (name, x), (_, g) in cases:
        check(lambda g, x: act_backwards(g, x) + (A.glu_backward(g[:, :, :2], x, 2),
                                                  A.mse_loss_backward(g.sum(), x, x.exp(), 1),
                                                  A.mse_loss_backward(g.sum(), x, x.exp(), 2)),
              (g, x), server=server, fallback=0, atol=1e-5, rtol=1e-5)


def test_softmax_backwards(server):
    def f(g, x):
        return tuple(o for d in (0, 1, -1) for o in (
            A._softmax_backward_data(g, torch.softmax(x, d), d, x.dtype),
            A._log_softmax_backward_data(g, torch.log_softmax(x, d), d, x.dtype)))
    for (name, x), (_, g) in zip(layouts((7, 33)), layouts((7, 33), seed=3)):
        check(f, (g, x), server=server, fallback=0, atol=1e-6, rtol=1e-5)


def test_layer_norm_backward_with_masks(server):
    def f(g, x, w, b, w2):
        out, mean, rstd = A.native_layer_norm(x, [4, 5], w, b, 1e-5)
        full = A.native_layer_norm_backward(g, x, [4, 5], mean, rstd, w, b, [True, True, True])
        plain = A.native_layer_norm_backward(g, x, [4, 5], mean, rstd, None, None,
                                             [True, False, False])
        wonly = A.native_layer_norm_backward(g, x, [4, 5], mean, rstd, w, b,
                                             [False, True, False])
        # normalized over every dimension: the weight's gradient sums nothing
        _, m2, r2 = A.native_layer_norm(x, [2, 3, 4, 5], w2, None, 1e-5)
        whole = A.native_layer_norm_backward(g, x, [2, 3, 4, 5], m2, r2, w2, None,
                                             [True, True, False])
        return full, plain[0], wonly[1], whole[:2]
    w, b, w2 = torch.randn(4, 5), torch.randn(4, 5), torch.randn(2, 3, 4, 5)
    for (name, x), (_, g) in zip(layouts((2, 3, 4, 5)), layouts((2, 3, 4, 5), seed=4)):
        check(f, (g, x, w, b, w2), server=server, fallback=0, atol=1e-5, rtol=1e-5)
    x0, g0 = torch.randn(0, 3, 4, 5), torch.randn(0, 3, 4, 5)  # no rows
    check(lambda g, x, w, b: A.native_layer_norm_backward(
        g, x, [4, 5], *A.native_layer_norm(x, [4, 5], w, b, 1e-5)[1:], w, b, [True, True, True]),
        (g0, x0, w, b), server=server, fallback=0)


def test_batch_norm_backward_train_and_eval(server):
    w, rm, rv = torch.randn(3), torch.randn(3), torch.rand(3) + 0.5

    def f(g, x, w, rm, rv, sm, si):
        return (A.native_batch_norm_backward(g, x, w, None, None, sm, si, True, 1e-5,
                                             [True, True, True]),
                A.native_batch_norm_backward(g, x, w, rm, rv, None, None, False, 1e-5,
                                             [True, True, True]),
                A.native_batch_norm_backward(g, x, None, rm, rv, None, None, False, 1e-3,
                                             [True, False, False])[0])
    for (name, x), (_, g) in zip(layouts((4, 3, 5, 2)), layouts((4, 3, 5, 2), seed=6)):
        _, sm, si = A.native_batch_norm(x, w, None, None, None, True, 0.1, 1e-5)
        check(f, (g, x, w, rm, rv, sm, si), server=server, fallback=0, atol=1e-5, rtol=1e-5)


def test_nll_loss_backward(server):
    inp = torch.log_softmax(torch.randn(5, 7), 1)
    tgt = torch.tensor([1, 0, 6, -100, 3])
    wt = torch.rand(7)

    def f(inp, tgt, wt, tw):
        return (A.nll_loss_backward(torch.tensor(0.7), inp, tgt, wt, 1, -100, tw),
                A.nll_loss_backward(torch.tensor(0.7), inp, tgt, None, 2, -100, tw),
                A.nll_loss_backward(torch.arange(0, 5, 1.0), inp, tgt.clamp(min=0), wt, 0, 3, tw),
                A.nll_loss_backward(torch.tensor(1.3), inp[0], tgt[0], wt, 1, -100, tw))
    # arange (not this file's) is the only fallback allowed
    s = check(f, (inp, tgt, wt, torch.tensor(2.5)), server=server)
    assert set(s["fallback_ops"]) <= {"aten::arange.start_step"}, s


# ---- AOTAutograd backward graphs against eager autograd ----

def backward_graph(f, *args):
    """AOTAutograd's backward graph of f and the inputs it was called with.
    (The inputs are recorded when the backward runs: torch 2 hands the
    compiler FakeTensors as its example inputs, torch 1.13 real ones.)"""
    from functorch.compile import aot_function, make_boxed_func
    got = {}

    def fw(gm, ex):
        return make_boxed_func(gm)

    def bw(gm, ex):
        got["gm"] = gm

        def run(*xs):
            got["ex"] = [e.detach().clone() if isinstance(e, torch.Tensor) else e for e in xs]
            return gm(*xs)
        return make_boxed_func(run)
    aot_function(f, fw_compiler=fw, bw_compiler=bw)(*args).sum().backward()
    return got["gm"], got["ex"]


MODELS = {
    "layer_norm": lambda x, w, b: F.layer_norm(x, (8,), w, b),
    "activations": lambda x, w, b: (F.gelu(x * w, approximate="tanh") + F.silu(x) + torch.sigmoid(x)
                                    + torch.tanh(x) + F.relu(x + b) + F.gelu(x)),
    "activations2": lambda x, w, b: (F.hardtanh(x) + F.leaky_relu(x, 0.2) + F.elu(x)
                                     + F.softplus(x) + F.hardsigmoid(x) + F.hardswish(x)
                                     + F.mish(x) + F.selu(x) + F.logsigmoid(x)
                                     + F.glu(torch.cat([x, w.expand(4, 8)], 1))),
    "losses": lambda x, w, b: (F.mse_loss(x, w.expand(4, 8)) + torch.softmax(x, -1).sum()
                               + torch.log_softmax(x, 0).sum()
                               + F.cross_entropy(x * w, torch.tensor([1, 2, 3, 0]))),
    "arith": lambda x, w, b: (x / w + x ** 2 + x.abs().pow(w) + torch.lerp(x, b, 0.3)
                              + torch.addcmul(x, w, b) + torch.clamp(x, -0.5, 0.5)
                              + torch.where(x > 0, x, w) + x.mean() + x.var()
                              + x.amax(-1, keepdim=True) + torch.atan2(x, w)),
    "batch_norm": lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
    # gradients of broadcast operands are sums back to their sizes
    "broadcast": lambda x, w, b: (x * w + b.view(1, 8) - x.sum(0, keepdim=True)
                                  + w.view(8, 1, 1).expand(8, 4, 8).permute(1, 0, 2).sum(1)),
}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_aot_backward_graphs(server, model):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, generator=g, requires_grad=True)
    w = torch.randn(8, generator=g, requires_grad=True)
    b = torch.randn(8, generator=g, requires_grad=True)
    gm, inputs = backward_graph(MODELS[model], x, w, b)
    check(gm, inputs, server=server, fallback=0, atol=1e-5, rtol=1e-5)


# ---- what stays an ATen call ----

def test_declined_cases_fall_back_and_stay_correct(server):
    # integer division by a tensor (eager raises on a zero divisor), by a
    # number that is 0 as uint8 (256), integer pow, erfinv/digamma/i0 (no
    # well-kept vector implementation), rrelu in training mode
    i = torch.tensor([7, -7, 9, 100] * 4)
    j = torch.tensor([2, 3, -4, 5] * 4)
    x = torch.rand(16) * 0.9

    def f(i, j, x):
        return (torch.remainder(i, j), torch.floor_divide(i, j), torch.pow(i, j.abs()),
                torch.erfinv(x), torch.digamma(x + 1), torch.i0(x), i // -1)
    s = check(f, (i, j, x), server=server)
    assert sorted(s["fallback_ops"]) == sorted([
        "aten::remainder.Tensor", "aten::floor_divide", "aten::pow.Tensor_Tensor",
        "aten::erfinv", "aten::digamma", "aten::i0", "aten::floor_divide"]), s
