"""Native scans: cumsum, cumprod, logcumsumexp, cummax and cummin
(compiler/lower/scan.c, compiler/codegen/scan.c).

Generated code runs them in ATen's order with ATen's accumulator (double
for float32; glibc's exp and log1p for logcumsumexp, as ATen), so results
are compared with eager's bit for bit (atol=0, rtol=0), on every layout,
for float and integer dtypes, along every dimension, and the program must
have no fallback call. What the rule declines (a 0-d input, a float input
scanned as integers) stays an ATen call and is still eager's.
"""

import pytest
import torch

import compiled
from native_util import check, layouts

EXACT = dict(atol=0, rtol=0)


def scans(x):
    out = []
    for d in range(-x.dim(), x.dim()):
        out += [torch.cumsum(x, d), torch.cumprod(x, d), *torch.cummax(x, d),
                *torch.cummin(x, d)]
        if x.dtype.is_floating_point:
            out.append(torch.logcumsumexp(x, d))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32,
                                   torch.bool], ids=lambda d: str(d).split(".")[1])
def test_cumsum_cumprod_on_every_layout_and_dim(server, dtype):
    for name, x in layouts((5, 7), dtype=dtype):
        if dtype.is_floating_point:
            x = 1 + x / 8  # products that neither vanish nor overflow
        check(scans, (x,), server=server, fallback=0, **EXACT)


def test_odd_and_empty_sizes_and_special_values(server):
    x = torch.randn(3, 4, 5)
    x[0, 1, 2] = float("nan")
    x[1, 2, 0] = float("inf")
    x[2, 0, 3] = -float("inf")
    x[2, 3, :] = -0.0
    check(scans, (x,), server=server, fallback=0, **EXACT)
    for shape in [(1, 1), (3, 0), (0, 4), (1, 6, 1)]:
        check(scans, (torch.randn(shape),), server=server, fallback=0, **EXACT)


def test_cummax_cummin_ties_and_nans(server):
    # ties move the index to the later element; a NaN wins and stays, each
    # later NaN taking the index; integers and bools have no NaN
    x = torch.randint(0, 3, (6, 40)).float()
    x[0, 5] = x[0, 9] = float("nan")
    x[1, 0] = float("nan")
    x[2, 3] = -float("inf")
    x[3, :] = float("inf")
    check(lambda a: (*torch.cummax(a, 1), *torch.cummin(a, 1), *torch.cummax(a, 0)),
          (x,), server=server, fallback=0, **EXACT)
    for dt in (torch.int64, torch.int32, torch.bool):
        check(lambda a: (*torch.cummax(a, 1), *torch.cummin(a.t(), 1)),
              (x.nan_to_num(2).to(dt),), server=server, fallback=0, **EXACT)


def test_logcumsumexp_special_values(server):
    x = torch.randn(5, 30) * 30
    x[0, 4] = float("inf")
    x[1, 0] = -float("inf")
    x[1, 1:] = -float("inf")
    x[2, 7] = float("nan")
    x[3, 2] = float("inf")
    x[3, 5] = -float("inf")
    x[4, :] = 1e30
    for dt in (torch.float32, torch.float64):
        check(lambda a: (torch.logcumsumexp(a, 1), torch.logcumsumexp(a, 0)),
              (x.to(dt),), server=server, fallback=0, **EXACT)


def test_a_long_float32_row_is_accumulated_as_eager_does(server):
    # 100000 float32 additions: a float accumulator ends far from eager's
    # double one, so anything but ATen's order and type fails here
    x = torch.randn(2, 100000)
    check(lambda a: torch.cumsum(a, 1), (x,), server=server, fallback=0, **EXACT)
    y = 1 + torch.randn(2, 20000) / 1000
    check(lambda a: torch.cumprod(a, -1), (y,), server=server, fallback=0, **EXACT)


def test_scans_across_rows_and_of_computed_values(server):
    # scanned dims whose neighbours are contiguous (rows side by side), big
    # enough for threads, of computed and flipped inputs, feeding more work.
    # The scans are eager's bit for bit only on the same input bits, so what
    # they scan is computed with correctly rounded operations that generated
    # code and ATen round alike: one operation before each scan (gcc
    # contracts a * 3 - 1 into an FMA), a product by a power of two before
    # an add (exact, so an FMA changes nothing). A sigmoid there is not
    # eager's bit for bit (12 of 40 seeds differed in a last bit when it
    # was an output too), and the cumprod carried the difference along.
    def f(a, b):
        return (torch.cumsum(a, 0), torch.cumprod(b.abs() * 0.25 + 0.75, 1),
                torch.cumsum(b.flip(2), 2).flip(2) * 2, torch.cumsum(a * 3, 1).relu() - 1)
    g0 = torch.Generator().manual_seed(5)
    a = torch.randn(300, 130, generator=g0)
    b = torch.randn(3, 200, 70, generator=g0)
    check(f, (a, b), server=server, fallback=0, **EXACT)

    def g(a, b):
        return (*torch.cummax(a, 0), torch.logcumsumexp(b, 1), *torch.cummin(b * 2, 0))
    check(g, (a, b), server=server, fallback=0, **EXACT)


def test_dtype_argument_and_integer_promotion(server):
    def f(x, i, m):
        return (torch.cumsum(x, 1, dtype=torch.float64), torch.cumsum(i, 0, dtype=torch.float32),
                torch.cumsum(i, 1), torch.cumprod(i, 0), torch.cumsum(m, 1),
                torch.cumsum(i.to(torch.int64) * 1000003, 1))
    x = torch.randn(4, 9)
    i = torch.randint(-3, 4, (4, 9), dtype=torch.int32)
    m = torch.rand(4, 9) > 0.5
    check(f, (x, i, m), server=server, fallback=0, **EXACT)


def test_what_the_rule_declines_is_still_eager(server):
    x = torch.randn(4, 9) * 10
    # a 0-d input (ATen copies it, -0.0 included) and a float scanned as int64
    s = check(lambda a: (torch.cumsum(-(a[0, 0] * 0).abs(), 0),
                         torch.cumsum(a, 1, dtype=torch.int64)),
              (x,), server=server, fallback=2, **EXACT)
    assert s["fallback_ops"] == ["aten::cumsum", "aten::cumsum"], s


def test_prod_backward_is_native(server):
    # prod's gradient is an exclusive cumprod each way (two cumprods)
    def f(x):
        return x.prod(1).sum() + torch.cumsum(x, 0).pow(2).sum()

    torch.manual_seed(0)
    x = (1 + torch.randn(6, 9) / 4).requires_grad_()
    cf = compiled.compile(f, (x,), server=server)
    cf(x).backward()
    x2 = x.detach().clone().requires_grad_()
    f(x2).backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-6)
    b = cf.summary()["backward"]
    assert b["runs"] == "native" and b["fallback"] == 0, b


def random_layout(g, shape, dtype):
    """A tensor of `shape` in a random layout: permuted, sliced with a step,
    offset into a bigger storage, or expanded along a size-1 dim."""
    r = len(shape)
    perm = torch.randperm(r, generator=g).tolist() if r else []
    step = [int(torch.randint(1, 3, (1,), generator=g)) for _ in range(r)]
    big = [shape[perm[k]] * step[k] + 1 for k in range(r)]
    if dtype.is_floating_point:
        base = 1 + torch.randn(big, generator=g, dtype=dtype) / 8
    else:
        base = torch.randint(-3, 4, big, generator=g).to(dtype)
    t = base[tuple(slice(1, None, st) for st in step)]
    t = t[tuple(slice(0, shape[perm[k]]) for k in range(r))]
    t = t.permute([perm.index(i) for i in range(r)]) if r else t
    assert tuple(t.shape) == tuple(shape)
    return t


@pytest.mark.parametrize("seed", range(8))
def test_random_layouts_dims_and_sizes(server, seed):
    # every scan along every dim of a random-rank tensor in a random
    # layout (permuted, strided, offset), sizes from 0 to 9
    g = torch.Generator().manual_seed(seed)
    r = int(torch.randint(1, 5, (1,), generator=g))
    shape = [int(torch.randint(0 if seed % 4 == 3 else 1, 10, (1,), generator=g))
             for _ in range(r)]
    dtype = [torch.float32, torch.float64, torch.int64, torch.int32][seed % 4]
    x = random_layout(g, shape, dtype)
    check(scans, (x,), server=server, fallback=0, **EXACT)
