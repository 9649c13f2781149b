"""Native scatters: scatter_add, scatter.src, index_add,
embedding_dense_backward and index_put with accumulate, the backwards of
gather, index_select, embedding and indexing (compiler/lower/scatter.c,
compiler/codegen/scatter.c).

Generated code adds the contributions to each output element in ATen's
order (ascending along the scattered dim, the tokens in row-major order)
and in the element type, so results are compared with eager's bit for bit
(atol=0, rtol=0) with many collisions per element, on several layouts and
dtypes, and the program must have no fallback call. An index out of range
raises, as eager does.
"""

import pytest
import torch

import compiled
from native_util import assert_raises_like_eager, check, layouts

EXACT = dict(atol=0, rtol=0)


def scatters(x, i0, i1, src):
    # many contributions land on each element (indices drawn from few
    # values), into the input and into zeros (a backward's form)
    return (x.scatter_add(0, i0, src), x.scatter_add(1, i1, src),
            torch.zeros_like(x).scatter_add(-1, i1[:, :3], src * 2),
            x.scatter(1, i1[:, :1], src), x.scatter(0, i0[:2], src[:2]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32],
                         ids=lambda d: str(d).split(".")[1])
def test_scatter_add_and_scatter_on_every_layout(server, dtype):
    g = torch.Generator().manual_seed(1)
    i0 = torch.randint(0, 2, (9, 7), generator=g)
    i1 = torch.randint(0, 3, (5, 11), generator=g)
    for name, x in layouts((5, 7), dtype=dtype):
        src = next(layouts((9, 11), dtype=dtype, seed=2))[1]
        check(scatters, (x, i0, i1, src), server=server, fallback=0, **EXACT)


def test_index_add(server):
    def f(x, i, s0, s1, j):
        return (x.index_add(0, i, s0), x.index_add(1, j, s1), x.index_add(-1, j.int(), s1 * 3),
                torch.zeros(5, 7).index_add(0, i, s0), x.index_add(0, i, s0, alpha=-2),
                x.index_add(1, j, s1, alpha=0.25), x.index_add(1, j, s1, alpha=0))
    g = torch.Generator().manual_seed(3)
    i = torch.randint(0, 5, (40,), generator=g)  # every row added to many times
    j = torch.randint(0, 7, (20,), generator=g)
    for name, x in layouts((5, 7)):
        check(f, (x, i, torch.randn(40, 7, generator=g), torch.randn(5, 20, generator=g), j),
              server=server, fallback=0, **EXACT)
    v = torch.randn(6)
    check(lambda v, i, s: (v.index_add(0, i, s), v.index_add(0, i[:0], s[:0])),
          (v, torch.tensor([5, 0, 5, 5]), torch.randn(4)), server=server, fallback=0, **EXACT)


def test_scatter_and_index_add_of_computed_and_strided_inputs(server):
    # computed with exact operations (a product by 0.5 rounds the same
    # contracted or not): exp was one, but torch 2's x86 wheels take it
    # from MKL's vector math (VML_HA), generated code from SLEEF, and about
    # 9% of float32 results differ in the last bit
    def f(x, i, s):
        return (x.t().scatter_add(0, i.t(), s.t() * 2).relu(),
                (x * 3).index_add(1, i[0, :4], s[:, :4].abs() * 0.5 - 1))
    g = torch.Generator().manual_seed(5)
    x = torch.randn(5, 7, generator=g)
    i = torch.randint(0, 7, (5, 9), generator=g)  # i.t(): a transposed index
    s = torch.randn(5, 9, generator=g)
    check(f, (x, i, s), server=server, fallback=0, **EXACT)


def test_what_the_rules_decline_is_still_eager(server):
    # an alpha whose products round (ATen's FMA or not decides the last
    # bit), bool sums (saturating), embedding's scale_grad_by_freq
    x = torch.randn(5, 7)
    i = torch.tensor([0, 4, 4, 1])
    s = check(lambda x, i, b: (x.index_add(0, i, x[:4], alpha=0.3),
                               b.scatter_add(0, i.view(-1, 1).expand(4, 7), b[:4])),
              (x, i, x > 0), server=server, fallback=2)
    assert sorted(s["fallback_ops"]) == ["aten::index_add", "aten::scatter_add"], s
    torch.manual_seed(0)
    e = torch.nn.Embedding(10, 4, scale_grad_by_freq=True)
    t = torch.tensor([[1, 1, 2], [3, 1, 0]])
    cf = compiled.compile(e, (t,), server=server)
    cf(t).sum().backward()
    got = e.weight.grad.clone()
    e.zero_grad()
    e(t).sum().backward()
    torch.testing.assert_close(got, e.weight.grad, **EXACT)
    assert cf.summary()["backward"]["fallback_ops"] == ["aten::embedding_dense_backward"]


def test_big_scatters_split_between_threads(server):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(64, 1024, generator=g)
    i = torch.randint(0, 64, (256, 1024), generator=g)
    s = torch.randn(256, 1024, generator=g)
    j = torch.randint(0, 64, (300,), generator=g)
    check(lambda x, i, s, j, t: (x.scatter_add(0, i, s), x.index_add(0, j, t)),
          (x, i, s, j, torch.randn(300, 1024, generator=g)), server=server, fallback=0, **EXACT)


@pytest.mark.parametrize("bad", [7, -1])
def test_an_index_out_of_range_raises(server, bad):
    x = torch.randn(7, 3)
    fns = [lambda x, i: x.scatter_add(0, i.view(-1, 1).expand(-1, 3).contiguous(), x[:3] * 2),
           lambda x, i: x.index_add(0, i, x[:3])]
    for fn in fns:
        good = torch.tensor([0, 6, 1])
        with torch.no_grad():
            cf = compiled.compile(fn, (x, good), server=server)
            torch.testing.assert_close(cf(x, good), fn(x, good), **EXACT)
            assert cf.summary()["fallback"] == 0, cf.summary()
            assert_raises_like_eager(cf, fn, (x, torch.tensor([0, bad, 1])))


class Embed(torch.nn.Module):
    def __init__(self, padding_idx=None):
        super().__init__()
        self.e = torch.nn.Embedding(40, 24, padding_idx=padding_idx)

    def forward(self, t, w):
        # the embedding's gradient is w itself: nothing computed before the
        # scatter can differ from eager's, so equality checks its order
        return (self.e(t) * w).sum()


@pytest.mark.parametrize("padding_idx", [None, 3, -1])
def test_embedding_backward_is_native_and_eager_bit_for_bit(server, padding_idx):
    torch.manual_seed(0)
    model = Embed(padding_idx)
    t = torch.randint(0, 6, (8, 50))  # 400 tokens on 6 rows: long sums per row
    t[0, :5] = 3
    for tokens in (t, t.int(), t.t()):  # int32 indices, transposed (strided) tokens
        w = torch.randn(*tokens.shape, 24)
        cf = compiled.compile(model, (tokens, w), server=server)
        model.zero_grad(set_to_none=True)
        cf(tokens, w).backward()
        got = model.e.weight.grad.clone()
        model.zero_grad(set_to_none=True)
        model(tokens, w).backward()
        torch.testing.assert_close(got, model.e.weight.grad, **EXACT)
        b = cf.summary()["backward"]
        assert b["runs"] == "native" and b["fallback"] == 0, b


def test_index_put_with_accumulate(server):
    # indexing with one tensor on dim 0 (negative indices count from the
    # end), its backward's form: zeros.index_put_((idx,), grad, True)
    g = torch.Generator().manual_seed(6)
    idx = torch.randint(-10, 10, (7, 9), generator=g)  # 63 tokens on 10 rows
    v = torch.randn(7, 9, 4, generator=g)

    def f(x, i, v):
        return (x.index_put((i,), v, accumulate=True),
                torch.zeros(10, 4).index_put((i,), v * 2, accumulate=True),
                x[:, 0].index_put((i[0],), v[0, :, 0], accumulate=True))
    for name, x in layouts((10, 4)):
        check(f, (x, idx, v), server=server, fallback=0, **EXACT)
    # without accumulate (duplicates race in ATen) it stays an ATen call
    s = check(lambda x, i: x.index_put((i,), x[:3] * 2), (torch.randn(10, 4),
              torch.tensor([1, 5, 2])), server=server, fallback=1)
    assert s["fallback_ops"] == ["aten::index_put"], s


def test_indexing_backward_is_native(server):
    torch.manual_seed(0)
    table = torch.randn(10, 4, requires_grad=True)
    idx = torch.randint(-10, 10, (7, 9))
    w = torch.randn(7, 9, 4)

    def f(t, i):
        return (t[i] * w).sum()
    cf = compiled.compile(f, (table, idx), server=server)
    cf(table, idx).backward()
    got = table.grad.clone()
    table.grad = None
    f(table, idx).backward()
    torch.testing.assert_close(got, table.grad, **EXACT)
    b = cf.summary()["backward"]
    assert b["runs"] == "native" and b["fallback"] == 0, b


def test_index_put_with_several_index_tensors(server):
    # index tensors on the leading dims (x[i, j] += v, the backward of
    # x[i, j]): one element offset per position, each index checked against
    # its own dim; duplicates add in ATen's order (values where the order
    # shows), on every layout of self; an index out of its own dim raises
    # even where the offset would be inside
    g = torch.Generator().manual_seed(7)
    i = torch.randint(-4, 4, (6, 5), generator=g)
    j = torch.randint(-5, 5, (6, 5), generator=g)
    i[0, :3], j[0, :3] = 1, 2
    v = torch.randn(6, 5, 3, generator=g)
    v[0, 0], v[0, 1], v[0, 2] = 1e8, 1.0, -1e8

    def f(x, i, j, v):
        return (x.index_put((i, j), v, accumulate=True),
                torch.zeros(4, 5, 3).index_put((i, j), v * 2, accumulate=True),
                x.index_put((i[0], j[0], i[1] % 3), v[0, :, 0], accumulate=True))
    for name, x in layouts((4, 5, 3)):
        # self's layout is the output's, indexed dims in any order in memory
        check(f, (x, i, j, v), server=server, fallback=0, **EXACT)
    fn = lambda x, i, j: torch.zeros(4, 5).index_put((i, j), x, accumulate=True)
    x, ok = torch.randn(3), torch.tensor([0, 3, 1])
    with torch.no_grad():
        cf = compiled.compile(fn, (x, ok, ok), server=server)
        torch.testing.assert_close(cf(x, ok, ok), fn(x, ok, ok), **EXACT)
        assert cf.summary()["fallback"] == 0, cf.summary()
        assert_raises_like_eager(cf, fn, (x, ok, torch.tensor([0, 5, 1])))  # row 0, col 5
    # index tensors after leading None (x[:, i] += v): the dims before them
    # are the values' first dims
    y = torch.randn(3, 4, 5)
    k = torch.tensor([0, 3, 3, -1, 2, 3])
    k2 = torch.tensor([4, 0, 0, 1, -5, 0])
    check(lambda y, k, k2, a, b: (torch.ops.aten.index_put(y, [None, k], a, True),
                                  torch.ops.aten.index_put(y, [None, k, k2], b, True)),
          (y, k, k2, torch.randn(3, 6, 5, generator=g), torch.randn(3, 6, generator=g)),
          server=server, fallback=0, **EXACT)
    # index tensors that are not adjacent (the values' dims are the index
    # shape first, then the other dims) or that broadcast against each other
    z = torch.randn(4, 3, 5, 2)
    i1, j1 = torch.tensor([3, 0, 0, -2]), torch.tensor([1, 4, 4, 0])
    check(lambda z, i1, j1, a, b, c: (
        torch.ops.aten.index_put(z, [i1, None, j1], a, True),
        torch.ops.aten.index_put(z, [None, i1 % 3, None, j1 % 2], b, True),
        torch.ops.aten.index_put(z, [i1[:, None], None, j1[None, :]], c, True)),
        (z, i1, j1, torch.randn(4, 3, 2, generator=g), torch.randn(4, 4, 5, generator=g),
         torch.randn(4, 4, 3, 2, generator=g)),
        server=server, fallback=0, **EXACT)
    # values that broadcast to the indexed shape (x[i] += 1, a histogram)
    check(lambda z, i1, j1, s, r, c: (
        torch.ops.aten.index_put(z, [i1], s, True),
        torch.ops.aten.index_put(z, [i1, None, j1], r, True),
        torch.ops.aten.index_put(z, [None, i1 % 3], c, True),
        torch.zeros(7).index_put_((i1 + 3,), torch.ones(()), accumulate=True)),
        (z, i1, j1, torch.tensor(1.5), torch.randn(2, generator=g),
         torch.randn(4, 1, 2, generator=g)),
        server=server, fallback=0, **EXACT)
    with torch.no_grad():  # each index against its own dim, after broadcasting
        fn = lambda z, i1, j1, a: torch.ops.aten.index_put(z, [i1[:, None], None, j1], a, True)
        a = torch.randn(4, 4, 3, 2)
        cf = compiled.compile(fn, (z, i1, j1, a), server=server)
        torch.testing.assert_close(cf(z, i1, j1, a), fn(z, i1, j1, a), **EXACT)
        assert cf.summary()["fallback"] == 0, cf.summary()
        assert_raises_like_eager(cf, fn, (z, i1, torch.tensor([1, 4, 5, 0]), a))
        assert_raises_like_eager(cf, fn, (z, torch.tensor([3, 0, -5, 0]), j1, a))
    # and the backwards of x[i, j], x[:, i], x[:, i, j], x[..., j],
    # x[i, :, j], x[i[:, None], j] are native, eager's bits
    t = torch.randn(4, 5, 3, requires_grad=True)
    for fn in (lambda t: t[i, j], lambda t: t[:, j], lambda t: t[:, j, i % 3],
               lambda t: t[..., i % 3], lambda t: t[i, :, j % 3],
               lambda t: t[i[0][:, None], j[1][None, :]], lambda t: t.transpose(0, 1)[j, i]):
        w = torch.randn(fn(t).shape)
        cf = compiled.compile(lambda t, i, j: (fn(t) * w).sum(), (t, i, j), server=server)
        cf(t, i, j).backward()
        got = t.grad.clone()
        t.grad = None
        (fn(t) * w).sum().backward()
        torch.testing.assert_close(got, t.grad, **EXACT)
        t.grad = None
        b = cf.summary()["backward"]
        assert b["runs"] == "native" and b["fallback"] == 0, b


def test_gather_and_index_select_backward_are_native(server):
    def f(w, g, j):
        return (torch.gather(w, 1, g) ** 2).sum() + w.index_select(0, j).exp().sum()

    torch.manual_seed(0)
    w = torch.randn(6, 5, requires_grad=True)
    g = torch.randint(0, 5, (6, 9))
    j = torch.tensor([1, 1, 4, 1, 0])
    cf = compiled.compile(f, (w, g, j), server=server)
    cf(w, g, j).backward()
    w2 = w.detach().clone().requires_grad_()
    f(w2, g, j).backward()
    torch.testing.assert_close(w.grad, w2.grad, **EXACT)
    b = cf.summary()["backward"]
    assert b["runs"] == "native" and b["fallback"] == 0, b


@pytest.mark.parametrize("seed", range(8))
def test_random_layouts_dims_and_sizes(server, seed):
    # scatter_add, scatter, index_add and index_put along a random dim of a
    # random-rank output, every operand in a random layout (permuted,
    # strided, offset), many collisions per element
    from test_native_scan import random_layout
    g = torch.Generator().manual_seed(seed)
    r = int(torch.randint(1, 4, (1,), generator=g))
    shape = [int(torch.randint(1, 7, (1,), generator=g)) for _ in range(r)]
    dim = int(torch.randint(0, r, (1,), generator=g))
    dtype = [torch.float32, torch.float64, torch.int64, torch.int32][seed % 4]
    x = random_layout(g, shape, dtype)
    ishape = [int(torch.randint(1, s + 1, (1,), generator=g)) for s in shape]
    ishape[dim] = int(torch.randint(1, 12, (1,), generator=g))
    idx = random_layout(g, ishape, torch.int64).abs() % shape[dim]
    src = random_layout(g, [s + 1 for s in ishape], dtype)
    n = int(torch.randint(1, 12, (1,), generator=g))
    j = random_layout(g, [n], torch.int64).abs() % shape[dim]
    srcj = random_layout(g, [n if d == dim else shape[d] for d in range(r)], dtype)
    vals = random_layout(g, [n] + shape[1:], dtype)

    def f(x, idx, src, j, srcj, vals):
        return (x.scatter_add(dim, idx, src), x.scatter(dim, idx[..., :1], src),
                x.index_add(dim, j, srcj), torch.zeros_like(x).index_add(dim, j, srcj),
                x.index_put((j % shape[0],), vals, accumulate=True))
    check(f, (x, idx, src, j, srcj, vals), server=server, fallback=0, **EXACT)
