"""Native lowering of masked_fill, roll, repeat, tril/triu, round with
decimals, softmax of 0-d tensors, dot/vdot/mv and the vector norms
(compiler/lower/pointwise.c, index.c, reduce.c).

Everything is compared against eager PyTorch (native_util.check) and must
run without a fallback call, on several layouts (contiguous, transposed,
sliced, expanded), odd and empty sizes, float and integer dtypes where the
operator takes them. Cases are batched into one compiled function per
layout: every compile runs the C compiler.
"""

import math

import pytest
import torch

from native_util import check, layouts


DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool]


def data_movement(x):
    return [
        torch.roll(x, 1, 0), torch.roll(x, -3, -1), torch.roll(x, (2, -1), (0, 1)),
        torch.roll(x, 5),  # the flattened tensor
        x.repeat(2, 1), x.repeat(1, 3, 2),
        torch.tril(x), torch.tril(x, -1), torch.triu(x, 2), torch.triu(x, -7),
        x.masked_fill(x.to(torch.bool), 0), x.masked_fill(torch.tensor(False), 1),
    ]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[1])
def test_roll_repeat_tril_masked_fill_on_every_layout(server, dtype):
    for name, x in layouts((5, 7), dtype=dtype):
        check(data_movement, (x,), server=server, fallback=0)


def test_data_movement_on_odd_and_empty_sizes(server):
    for shape in [(1, 1), (3, 0), (0, 4), (2, 1)]:
        check(data_movement, (torch.randn(shape),), server=server, fallback=0)


def test_masked_fill_with_a_tensor_value_and_a_broadcast_mask(server):
    def f(x, m, v):
        return x.masked_fill(m, v), x.masked_fill(m, float("nan"))
    x = torch.randn(4, 6)
    m = torch.rand(6) > 0.5
    check(f, (x, m, torch.tensor(2.5)), server=server, fallback=0)


def test_round_with_decimals(server):
    def f(x):
        return [torch.round(x, decimals=d) for d in (0, 1, 3, -1, -3)]
    x = torch.randn(64) * 1000
    x[:8] = torch.tensor([0.5, 1.5, 2.5, -0.5, 0.125, 1234.5, float("inf"), float("nan")])
    for dtype in (torch.float32, torch.float64):
        check(f, (x.to(dtype),), server=server, fallback=0)


def test_softmax_of_a_0d_tensor(server):
    def f(x):
        return (torch.softmax(x, 0), torch.log_softmax(x, -1),
                torch.softmax(x * 2, -1))
    for v in (1.5, -3.0, float("inf"), -float("inf"), float("nan")):
        for dtype in (torch.float32, torch.float64):
            check(f, (torch.tensor(v, dtype=dtype),), server=server, fallback=0)


def test_dot_vdot_mv(server):
    def f(a, b, m):
        return torch.dot(a, b), torch.vdot(a, b), torch.mv(m, b), m @ b, a @ b
    g = torch.Generator().manual_seed(0)
    for k in (1, 7, 33):
        a, b = torch.randn(k, generator=g), torch.randn(k, generator=g)
        m = torch.randn(k, 5, generator=g).t()  # transposed
        check(f, (a, b, m), server=server, fallback=0, rtol=1e-5, atol=1e-5)
    a = torch.randn(0)
    check(f, (a, a, torch.randn(3, 0)), server=server, fallback=0)


def test_vector_norms(server):
    def f(x):
        out = []
        for p in (2, 1, 0, 3, 0.5, math.inf, -math.inf):
            out.append(torch.linalg.vector_norm(x, p))
            out.append(torch.linalg.vector_norm(x, p, dim=-1, keepdim=True))
            out.append(torch.norm(x, p=p, dim=(0,)))
        out.append(torch.nn.functional.normalize(x, dim=1))
        return out
    for name, x in layouts((4, 9), dtype=torch.float64):
        check(f, (x,), server=server, fallback=0)
    x = torch.randn(4, 9)
    x[1, 2] = float("nan")
    x[2, 3] = float("inf")
    x[3] = 0
    check(f, (x,), server=server, fallback=0, rtol=1e-5, atol=1e-6)


def test_nansum_prod_dim_count_nonzero_zero(server):
    def f(x):
        return (torch.nansum(x), torch.nansum(x, 1, keepdim=True), torch.nanmean(x, 0),
                torch.prod(x, 1), torch.prod(x, -1, keepdim=True),
                torch.count_nonzero(x), torch.count_nonzero(x, 0),
                torch.count_nonzero(x, (0, 1)))
    x = torch.randn(5, 6)
    x[1, 2] = float("nan")
    x[3] = 0
    x[0, 0] = -0.0
    check(f, (x,), server=server, fallback=0, rtol=1e-5, atol=1e-6)
    for dtype in (torch.int64, torch.int32):
        xi = torch.randint(-3, 3, (4, 7), dtype=dtype)
        check(lambda x: (torch.prod(x, 1), torch.count_nonzero(x, 1), torch.nansum(x, 0)),
              (xi,), server=server, fallback=0)


def test_zero_in_place_writes_the_input(server):
    def f(x, y):
        x.zero_()
        return x + y
    check(f, (torch.randn(3, 4), torch.randn(3, 4)), server=server, fallback=0)


def test_empty_tensors_are_native(server):
    # empty, empty_strided, new_empty and new_empty_strided have no defined
    # contents: lowered as fills, they are written before they are read
    def f(x):
        a = torch.empty(3, 4).fill_(2.0)
        b = x.new_empty(3, 4).copy_(x)
        c = torch.empty_strided((3, 4), (1, 3)).copy_(x * 2)
        d = x.new_empty_strided((3, 4), (4, 1)).zero_()
        return a + b + c + d
    check(f, (torch.randn(3, 4),), server=server, fallback=0)
