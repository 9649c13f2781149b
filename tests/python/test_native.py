"""Native code generation against eager PyTorch (tests/python/native_util.py).

Each test compiles small programs through a real daemon (which builds C
with the system compiler and verifies the loop IR after every pass), runs
the native program and eager on identical inputs in several layouts, and
compares everything. Programs batch several cases where they can, so the C
compiler runs a few dozen times rather than hundreds.
"""

import copy
import ctypes
import os
import re
import subprocess
import sys

import pytest
import torch
from torch.utils import _pytree as pytree

import biggraph
import compiled
import compiled.native
import daemon_util
from native_util import SHAPES, check, layouts, onednn_products


# ---- pointwise ----

UNARY = [torch.abs, torch.neg, torch.exp, torch.expm1, torch.log1p, torch.sqrt,
         torch.rsqrt, torch.sin, torch.cos, torch.tanh, torch.atan, torch.erf,
         torch.sigmoid, torch.relu, torch.floor, torch.ceil, torch.round, torch.trunc,
         torch.reciprocal, torch.nn.functional.gelu, torch.nn.functional.silu,
         lambda x: torch.nn.functional.gelu(x, approximate="tanh"), torch.isnan,
         lambda x: torch.nn.functional.leaky_relu(x, 0.2),
         lambda x: torch.nn.functional.hardtanh(x, -0.5, 0.75),
         lambda x: torch.clamp(x, -0.3, 0.4), lambda x: torch.clamp_min(x, 0.1)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_unary_math_on_every_layout(server, shape):
    def f(x):
        return tuple(op(x) for op in UNARY)
    for name, x in layouts(shape):
        x = x.abs() + 0.1 if True else x  # keep log/sqrt domains
        check(f, (x,), server=server, native=len(UNARY), fallback=0)


def test_unary_special_values(server):
    x = torch.tensor([0.0, -0.0, 1.5, -2.5, 0.5, float("inf"), float("-inf"), float("nan"),
                      1e-30, -1e30])
    check(lambda x: tuple(op(x) for op in UNARY), (x,), server=server, fallback=0)


def test_negative_constants_under_a_minus(server):
    # Found by tests/python/difftest.py (OpInfo nn.functional.hardshrink):
    # lambd=-0.5 generated "(--0.5f)", which C parses as a decrement, so
    # the C compiler failed and the program ran through ATen.
    def f(x, i):
        return (torch.nn.functional.hardshrink(x, -0.5), torch.nn.functional.hardshrink(x, -1e30),
                torch.nn.functional.hardshrink(x, float("-inf")), torch.clamp(-x, -2.0),
                torch.nn.functional.hardshrink(x.double(), -0.25), i * -3, -(i - 7))
    x = torch.tensor([0.0, -0.0, 0.3, -0.3, 0.7, -0.7, float("inf"), float("nan"), -1e30])
    i = torch.arange(-4, 5)
    check(f, (x, i), server=server, fallback=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32,
                                   torch.uint8, torch.bool])
def test_binary_arithmetic_and_promotion(server, dtype):
    def f(x, y, z):
        out = [x + y, x * y, x - y if dtype != torch.bool else x * z, x + 2, x * 3,
               torch.add(x, y, alpha=2) if dtype != torch.bool else x, y > x, x == y,
               x != 3, torch.where(y > 0, x, y), x + z, (x * 2.5), torch.maximum(x, y),
               torch.minimum(x, z)]
        if dtype.is_floating_point:
            out += [x / y, x / 3, torch.pow(x, 2), torch.pow(x, 0.5), torch.rsub(y, 1.5)]
        if dtype in (torch.int64, torch.int32):
            # integer bounds: the dtype's range (int64's lowest found by
            # fuzz_native as a shift past the sign bit, under make asan)
            out += [torch.nn.functional.hardtanh(x, -2, 3)]
        return tuple(out)
    for name, x in layouts((6, 13), dtype=dtype, seed=1):
        y = next(layouts((13,), dtype=dtype, seed=2))[1]
        z = next(layouts((6, 1), dtype=torch.float32, seed=3))[1]
        if dtype.is_floating_point:
            y = y.abs() + 0.5
            x = x.abs()
        check(f, (x, y, z), server=server)


def test_comparisons_logic_and_wrapped_numbers(server):
    def f(a, b, i):
        return (a < b, a <= 0.5, b >= a, torch.logical_and(a > 0, b > 0),
                torch.logical_or(a > 0, i > 0), torch.logical_xor(a > 0, i), ~(a > b),
                i * 2, i + 1.5, (i > 3) & (i < 40), a * True, i.float() / 3)
    a, b = torch.randn(4, 9), torch.randn(9)
    i = torch.randint(-50, 50, (4, 9))
    check(f, (a, b, i), server=server, fallback=0)


def test_casts(server):
    def f(x, i):
        return (x.to(torch.float64), x.to(torch.int64), x.to(torch.int32), x.to(torch.bool),
                (x * 50).to(torch.uint8), i.to(torch.float32), i.to(torch.bool), i.double() + x)
    x = torch.randn(5, 7) * 3
    i = torch.randint(-100, 100, (5, 7))
    check(f, (x, i), server=server, fallback=0)


# ---- views ----

def test_views_compose_without_copies(server):
    def f(x):
        a = x.reshape(6, 20).t()[1:5].unsqueeze(0).expand(3, 4, 6)
        b = x.permute(2, 0, 1).reshape(-1)[::3]
        c = x[:, 1].transpose(0, 1).flatten()
        d = x.select(2, 3).diagonal()
        e = x.narrow(2, 1, 3).unfold(0, 2, 1)
        s = torch.split(x, [1, 2, 2], dim=2)
        return a * 2, b + 1, c.exp(), d - 1, e * e, s[1] * 3, torch.unbind(x, 1)[3] + 0
    for name, x in layouts((4, 6, 5)):
        check(f, (x,), server=server, fallback=0)


def test_copies_are_fresh_tensors_not_views_of_what_they_copy(server):
    # Found by tests/python/graphgen.py (seed 200675): an output whose
    # lowered body is a plain load (clone, x * 1, where(c, x, x),
    # contiguous() of an expanded input) was returned as a view of the
    # input it loads: the caller's result shared the input's storage (and
    # kept its stride-0 layout).
    def f(x, e, y):
        h = y * 2
        return (x.clone(), x * 1, torch.where(x > 0, x, x), e.contiguous(), e * 1,
                torch.where(e > e.flatten(), e, e.flatten()).expand(8), h, h.clone(),
                y.t().clone(), y.clone().t(), (y * 1)[1:].unsqueeze(0), y.t(), y)
    x = torch.randn(8)
    e = torch.randn(1).expand(8)
    y = torch.randn(3, 4)
    check(f, (x, e, y), server=server, fallback=0)
    with torch.no_grad():
        cf = compiled.compile(f, (x, e, y), server=server)
        outs = cf(x, e, y)
    inputs = {x.data_ptr(), e.data_ptr(), y.data_ptr()}
    ptrs = [o.data_ptr() for o in outs[:-2]]
    assert not inputs & set(ptrs), "an output shares an input's storage"
    assert len(set(ptrs)) == len(ptrs), "two outputs share storage"
    assert outs[-1].data_ptr() == y.data_ptr()  # eager returns y itself
    assert outs[-2].data_ptr() == y.data_ptr()  # and a view of y


def test_reshape_of_non_contiguous_data(server):
    def f(x):
        return (x.transpose(0, 1).reshape(3, 16) * 2, x.t().contiguous().view(-1) + 1)
    x = torch.randn(8, 6)
    check(f, (x,), server=server, fallback=0)



def test_views_of_empty_tensors(server):
    # a reshape of a tensor with no element reads nothing: it is a view
    # (the unsqueeze and squeeze around a 1-D pool of a batch of 0 fell back)
    def f(x):
        return (x.unsqueeze(2) * 2, x.reshape(3, 0, 9) + 1, x.flatten(1) - 1,
                x.view(0, 27).unsqueeze(0) * 3, torch.nn.functional.avg_pool1d(x, 6, 3, 2))
    check(f, (torch.randn(0, 3, 9),), server=server, fallback=0)
    check(lambda x: x.squeeze(1) * 2, (torch.randn(0, 1, 4),), server=server, fallback=0)

# ---- reductions ----

@pytest.mark.parametrize("shape,dims", [((5, 37), (1,)), ((5, 37), (0,)), ((3, 4, 5), (0, 2)),
                                        ((6, 1, 8), (1,)), ((1000,), (0,)), ((2, 3), None),
                                        ((3, 0), (1,))], ids=str)
def test_reductions(server, shape, dims):
    def f(x):
        d = dims if dims is not None else tuple(range(x.dim()))
        out = [x.sum(d), x.sum(d, keepdim=True), x.mean(d), torch.amax(x, d) if x.numel() else x,
               torch.amin(x, d, keepdim=True) if x.numel() else x, x.var(d), x.std(d, unbiased=False),
               (x > 0).any(d[0]) if x.dim() else x, (x > -5).all(d[0]) if x.dim() else x]
        if len(d) == 1 and x.numel():
            out += [x.max(d[0]).values, x.max(d[0]).indices, x.argmin(d[0]), x.prod(d[0])]
        return tuple(out)
    for name, x in layouts(shape):
        check(f, (x,), server=server, atol=1e-5, rtol=1e-5)


def test_big_sums_accumulate_accurately(server):
    x = torch.rand(3_000_000, dtype=torch.float32)
    check(lambda x: (x.sum(), x.mean(), x.var()), (x,), server=server, fallback=0,
          rtol=1e-6, atol=1e-6)


def test_variance_of_one_computed_element_is_nan(server):
    # Found by tests/python/graphgen.py (seed 100093): var over one element
    # of gelu(x) gave +inf, not eager's NaN: Welford's deviation pass
    # recomputes gelu, and gcc contracted its last product into
    # "value - mean", leaving a rounding residue as m2 (m2 / 0 = inf).
    def f(x, y):
        g = torch.nn.functional.gelu(x)
        return (torch.var(g[16:17:2], 0), torch.std(g[:1], 0, keepdim=True),
                torch.var(g.reshape(17, 1), 1), (x * y).var(1), torch.var(x[:1] * 1.7, 0),
                g.var(0))
    x = torch.randn(17)
    y = torch.randn(17, 1)
    check(f, (x, y), server=server, fallback=0, atol=1e-5, rtol=1e-5)


def test_variance_of_a_constant_row_is_exactly_zero(server):
    # Found by tests/python/graphgen.py (seed 101761): var over a dimension
    # along which the values are equal was a tiny positive number (eager:
    # exactly 0), so `var > 0` disagreed; the Welford block mean was a
    # float32 sum divided by the count. Likewise layer_norm of such rows.
    def f(x, y):
        v = -(y + 0.5 * x)
        return (torch.var(v, 2) == 0, torch.std(x, 2), torch.var(v, 2, keepdim=True),
                torch.nn.functional.layer_norm(x, [1, 17]),
                torch.where(torch.var(v, 2, keepdim=True) > 0, v, 0.25))
    g = torch.Generator().manual_seed(1543)
    x = torch.randn(16, 1, 1, generator=g).expand(16, 1, 17)
    y = torch.randn(16, 1, 1, generator=g)
    check(f, (x, y), server=server, fallback=0, atol=1e-6, rtol=1e-6)


def test_max_propagates_nan_and_argmax_ties(server):
    x = torch.tensor([[1.0, float("nan"), 3.0, 3.0], [2.0, 2.0, 1.0, 0.0],
                      [float("-inf")] * 4])
    check(lambda x: (x.amax(1), x.max(1)[0], x.max(1)[1], x.argmax(1), x.argmin(1), x.min(1).values),
          (x,), server=server, fallback=0)


# ---- normalizations ----

@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_and_log_softmax(server, dim):
    def f(x):
        return torch.softmax(x, dim), torch.log_softmax(x, dim)
    for name, x in layouts((7, 33)):
        check(f, (x,), server=server, fallback=0, atol=1e-6, rtol=1e-5)


def test_layer_norm_with_and_without_affine(server):
    ln = torch.nn.LayerNorm(48).eval()
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    ln2 = torch.nn.LayerNorm([3, 16], elementwise_affine=False)

    def f(x):
        return ln(x), ln2(x.view(2, 5, 3, 16)), torch.nn.functional.gelu(ln(x))
    for name, x in layouts((10, 48)):
        check(f, (x.reshape(2, 5, 48),), server=server, fallback=0, atol=1e-5, rtol=1e-5)


# ---- externs, mutation, memory ----

def test_mlp_with_fused_epilogues(server):
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 32), torch.nn.ReLU()).eval()
    s = check(model, (torch.randn(16, 64),), server=server, fallback=0)
    assert s["extern"] == 2 and s["kernels"] >= 1


def test_input_mutation_in_place(server):
    def f(x, y):
        x.mul_(2).add_(y)
        return x.sum(1)
    check(f, (torch.randn(5, 8), torch.randn(8)), server=server)


@pytest.mark.parametrize("mode", ["1", "0", "all"])
def test_arena_reuse_gives_the_same_answers(server, monkeypatch, mode):
    """Whether the arena is kept between calls (all), made per call (0) or
    kept only when large (1, the default: this one is small), every call
    gives the same answers, and release_memory() says what was kept."""
    monkeypatch.setenv("COMPILED_ARENA_REUSE", mode)

    def f(x):
        a = torch.softmax(x, -1)
        b = torch.relu(x @ x.t())
        return (a * 2).sum(0), b.mean()
    x = torch.randn(64, 64)
    cf = compiled.compile(f, (x,), server=server)
    # earlier tests' free output blocks (a process-wide pool) would count
    sys.modules["compiled.arena"].release_output_pool()
    with torch.no_grad():
        first = [t.clone() for t in cf(x)]
        for _ in range(3):
            again = cf(x)
            for a, b in zip(first, again):
                assert torch.equal(a, b)
    s = cf.summary()
    assert s["runs"] == "native" and 0 < s["arena_bytes"] < 1 << 20, s
    kept = cf.release_memory()
    assert (kept >= s["arena_bytes"]) if mode == "all" else kept == 0, kept
    assert cf.release_memory() == 0
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(first, cf(x)))


def test_a_large_output_block_is_not_kept_between_calls(server):
    """A large output (1 MiB or more: the output pool's numpy block) is
    freed with its last reference: the pool keeps no free block for the
    next call, which would hold it during the next call's layers before
    its output is written (peak heap above Inductor's in `make
    bench-models`). Calls still give eager's answers."""
    arena_mod = sys.modules["compiled.arena"]

    def f(x):
        return torch.relu(x) * 2
    x = torch.randn(512, 1024)  # 2 MiB
    cf = compiled.compile(f, (x,), server=server)
    arena_mod.release_output_pool()  # earlier tests' blocks
    with torch.no_grad():
        for _ in range(3):
            out = cf(x)
            torch.testing.assert_close(out, f(x))
            del out
    assert cf.summary()["runs"] == "native"
    assert arena_mod.release_output_pool() == 0, "a free block was kept"


def test_transcendentals_use_vector_math(server, tmp_path):
    """exp, tanh, erf in a vectorizable loop call vector functions, not the
    scalar C library: tanh and erf glibc's libmvec (the GNU vector ABI names
    _ZGV..., undefined in the object), exp SLEEF's own entry point (the
    object defines the vector ABI name and calls Sleef_expf*_u10)."""
    def f(x):
        return torch.exp(x) + torch.tanh(x) * torch.erf(x)
    x = torch.randn(64, 256)
    check(f, (x,), server=server, fallback=0)
    cf = compiled.compile(f, (x,), server=server)
    so = cf.programs[-1].artifact.native_program.code.shared_object
    (tmp_path / "k.so").write_bytes(so)
    syms = subprocess.run(["readelf", "--dyn-syms", "-W", str(tmp_path / "k.so")],
                          capture_output=True, text=True, check=True).stdout
    undefined = {t[t.index("UND") + 1].split("@")[0]
                 for t in (line.split() for line in syms.splitlines())
                 if "UND" in t[:-1]}
    for fn in ("tanhf", "erff"):
        assert any(u.startswith("_ZGV") and u.endswith("_" + fn) for u in undefined), \
            (fn, sorted(undefined))
    assert any(re.fullmatch(r"Sleef_expf(4|8|16)_u10", u) for u in undefined), sorted(undefined)
    assert not any(u.startswith("_ZGV") and u.endswith("_expf") for u in undefined), \
        sorted(undefined)
    libs = cf.programs[-1].artifact.native_program.code.runtime_libraries
    for lib in ("libmvec.so.1", "libsleefgnuabi.so.3", "libsleef.so.3"):
        assert lib in libs, libs


def test_transposing_pointwise_in_2d_tiles(server):
    """Reads across rows (x + y.t(), a channels-last copy) run in 2-D tiles;
    odd sizes leave partial tiles at both edges."""
    def f(x, y, z):
        return x + y.t(), z.contiguous(memory_format=torch.channels_last) * 2, (x * 3).t().contiguous()
    x, y = torch.randn(100, 130), torch.randn(130, 100)
    z = torch.randn(2, 70, 9, 67)
    check(f, (x, y, z), server=server, fallback=0)
    cf = compiled.compile(f, (x, y, z), server=server)
    assert "2-D tiles" in cf.programs[-1].c_source
    # more rows than one tile is long (256) and a partial last tile
    x, y = torch.randn(300, 70), torch.randn(70, 300)
    check(f, (x, y, z), server=server, fallback=0)

    # full 16 x 16 blocks transposed in registers: two transposed operands,
    # a computed body, NaN; float64 keeps the plain loop
    def g(x, y, w):
        return x + torch.relu(y.t() * w.t() - 1)
    for dt in (torch.float32, torch.float64):
        x, y, w = (torch.randn(512, 90, dtype=dt), torch.randn(90, 512, dtype=dt),
                   torch.randn(90, 512, dtype=dt))
        y[5, 17] = float("nan")
        check(g, (x, y, w), server=server, fallback=0)
        cg = compiled.compile(g, (x, y, w), server=server)
        assert ("transposed in registers" in cg.programs[-1].c_source) == (dt == torch.float32)


def test_identical_kernels_are_generated_once(server):
    """Repeated blocks give kernels that differ only in invented names: the
    C has one function for them, called with each block's buffers. (The
    last block writes the program's output where the others compute in
    place of their matrix product, so its code differs.)"""
    def block(x, w, b):
        return torch.nn.functional.gelu(x @ w + b) * 0.5

    def f(x, w1, b1, w2, b2, w3, b3, w4, b4):
        return block(block(block(block(x, w1, b1), w2, b2), w3, b3), w4, b4)

    args = [torch.randn(32, 48)]
    for _ in range(4):  # weights scaled to keep values near 1 through the chain
        args += [torch.randn(48, 48) / 7, torch.randn(48)]
    check(f, args, server=server, fallback=0)
    cf = compiled.compile(f, args, server=server)
    src = cf.sources()
    kernels = re.findall(r"^static int (k\d+_\w+)\(", src, re.M)
    same = re.findall(r"^/\* (k\d+_\w+): the same code as (k\d+_\w+) \*/", src, re.M)
    assert len(same) == 2 and {b for _, b in same} == set(kernels[:1]), (kernels, same)
    # a different block (other sizes) is not merged
    args2 = args[:3] + [torch.randn(48, 24), torch.randn(24)] + \
        [torch.randn(24, 24), torch.randn(24)] * 2
    check(f, args2, server=server, fallback=0)
    src2 = compiled.compile(f, args2, server=server).sources()
    assert len(re.findall(r"the same code as", src2)) == 1


def test_long_chains_of_shared_subexpressions(server, tmp_path):
    """relu reads its input twice (where(x < 0, 0, x)), so a chain of n
    relus is a DAG of n operations but a tree of 2^n: every pass, the
    verifier and the dumps must visit each shared subexpression once."""
    def f(x):
        for _ in range(300):
            x = torch.relu(x) - 0.001
        return x
    check(f, (torch.randn(8, 33),), server=server, fallback=0)
    ctl = os.path.join(daemon_util.BUILD, "bin", "compilectl")
    sizes = []
    for n in (100, 200):
        path = tmp_path / ("chain%d.pb" % n)
        path.write_bytes(biggraph.chain_graph_bytes(n))
        for cmd in ("lower", "plan"):
            r = subprocess.run([ctl, "graph", cmd, str(path)], capture_output=True,
                               text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            if cmd == "plan":
                sizes.append(len(r.stdout))
    assert "$1 = where(lt($0, 0), 0, $0)" in r.stdout  # shared parts are named
    assert sizes[1] < 3 * sizes[0], sizes  # linear in n, not exponential


def test_new_zeros_ones_full(server):
    """new_* take their dtype from self unless given; only the result's
    shape and dtype matter (self is not read)."""
    def f(x):
        return (x.new_zeros((3, 5)) + x.sum(), x.new_ones((2, 0, 4)),
                x.new_full((4, 3), -2.5), x.new_full((2, 3), 7, dtype=torch.int32),
                x.new_ones((5,), dtype=torch.float64) * 3, x.new_zeros(()))
    for dt in (torch.float32, torch.int64, torch.bool):
        check(f, (torch.ones(2, 3, dtype=dt),), server=server, fallback=0)


def test_eye(server):
    def f(x):
        return (torch.eye(4) + x, torch.eye(3, 5, dtype=torch.int64), torch.eye(0),
                torch.eye(2, 1, dtype=torch.bool), torch.eye(6, 3, dtype=torch.float64))
    check(f, (torch.randn(4, 4),), server=server, fallback=0)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_flip_on_every_layout(server, shape):
    def f(x):
        outs = [torch.flip(x, [0]) * 2, torch.flip(x, [-1]), torch.flip(x, list(range(x.dim())))]
        return tuple(outs)
    for name, x in layouts(shape):
        if x.dim() == 0:
            continue
        check(f, (x,), server=server, fallback=0)
    y = torch.arange(6).view(2, 3)
    check(lambda y: torch.flip(y, [0, 1]), (y,), server=server, fallback=0)


def bn_relu_max_pool(x, mean, var, w, b):
    y = torch.relu(torch.nn.functional.batch_norm(x, mean, var, w, b, False, 0.1, 1e-5))
    return torch.nn.functional.max_pool2d(y, 3, 2, 1)


def test_a_pooled_producer_is_computed_once(server):
    """A window reads each element of its input up to kh * kw times: the
    batch norm + relu in front of the max pool (the stem of resnet and
    densenet) is computed once into a buffer, not inlined nine times, and
    the values match eager on odd sizes, NaN and infinities."""
    c = 5
    x = torch.randn(2, c, 13, 11)
    x[0, 1, 3, 4] = float("nan")
    x[1, 2, 0, 0] = float("inf")
    x[1, 3, 12, 10] = -float("inf")
    stats = (torch.randn(c), torch.rand(c) + 0.5, torch.randn(c), torch.randn(c))
    summary = check(bn_relu_max_pool, (x,) + stats, server=server, fallback=0)
    cf = compiled.compile(bn_relu_max_pool, (x,) + stats, server=server)
    with torch.no_grad():
        cf(x, *stats)
    src = cf.sources()
    # the pooling kernel reads the realized producer: it names max_pool2d
    # but no batch_norm node
    pool_kernels = [k for k in re.findall(r"/\* (k\d+_[a-z0-9_]+)\n((?: \*.*\n)+)", src)
                    if "max_pool2d" in k[1]]
    assert pool_kernels, src[:2000]
    assert all("batch_norm" not in k[1] for k in pool_kernels), pool_kernels
    assert summary["kernels"] >= 2, summary


def test_softmax_reads_back_the_exponentials_it_summed(server):
    """The sum stage stores exp(x - max) into the output and the normalizing
    stage reads it back instead of computing exp again (reuse.c); where the
    output is also read by the kernel, or is a caller's tensor, it is not."""
    def f(x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return torch.softmax(x, -1), e / e.sum(-1, keepdim=True)
    for name, x in layouts((5, 7, 300)):
        check(f, (x,), server=server, fallback=0)
    x = torch.randn(6, 300)
    x[2, 5] = float("nan")
    x[3] = float("-inf")
    x[4, 7] = float("inf")
    check(f, (x,), server=server, fallback=0)
    cf = compiled.compile(f, (x,), server=server)
    src = cf.programs[-1].c_source
    assert "read back by stage" in src, src

    def g(x):  # the output feeds a later node of the same kernel
        s = torch.softmax(x, -1)
        return s, s * s.sum(-1, keepdim=True)
    check(g, (x,), server=server, fallback=0)

    def h(x):  # the result is written into the caller's tensor
        return x.copy_(torch.softmax(x, -1))
    x = torch.randn(4, 300)
    check(h, (x,), server=server, fallback=0)


def test_a_read_back_value_in_loops_split_into_ranges(server):
    """The stored exponentials are read back inside loops that split into
    ranges (codegen/split.c ranged_begin renames their variables): the inner loop
    (the backward of log_softmax whose gradient is a slice's at rows 13..14:
    graphgen seed 910132 named an undeclared variable, and the C compiler
    failed) and the outer one (softmax of rows from two tensors)."""
    def f(x):
        v = torch.log_softmax(x, 0)
        return torch.erf(v), v[13:15:3]
    x = torch.randn(16, requires_grad=True)
    cf = compiled.compile(f, (x,), server=server)
    grads = [torch.randn(16), torch.randn(1)]
    torch.autograd.backward(cf(x), grads)
    got, x.grad = x.grad, None
    torch.autograd.backward(f(x), grads)
    torch.testing.assert_close(got, x.grad)
    summary = cf.summary()
    assert summary["backward"]["runs"] == "native", cf.programs[-1].native_reason
    assert "read back by stage" in cf.programs[-1].c_source

    def g(a, b):
        return torch.softmax(torch.cat([a, b], 0) * 2, -1)
    a, b = torch.randn(3, 300), torch.randn(5, 300)
    check(g, (a, b), server=server, fallback=0)
    src = compiled.compile(g, (a, b), server=server).programs[-1].c_source
    assert "read back by stage" in src and "split at the bounds" in src, src


def test_cat_and_pad_split_their_outer_loop(server):
    """A pointwise kernel selecting by the index along an outer dim (cat's
    inputs, constant_pad_nd's padding) runs one loop nest per range of that
    dim, each reading only its own input; the results are eager's, at odd
    sizes, with an empty input and with negative (cropping) pads."""
    def f(a, b, c, e):
        y = torch.relu(torch.cat([a, b, e, c], 1) * 2 - 1)
        z = torch.nn.functional.pad(a, (0, 0, 0, 0, 2, 3), value=0.5) + 1
        w = torch.nn.functional.pad(b, (1, 1, 0, 0, -1, 2)) * 3
        return y, z, w
    a = torch.randn(2, 5, 7, 9)
    b = torch.randn(2, 3, 7, 9)
    c = torch.randn(2, 1, 7, 9)
    e = torch.randn(2, 0, 7, 9)
    check(f, (a, b, c, e), server=server, fallback=0)
    cf = compiled.compile(f, (a, b, c, e), server=server)
    assert cf.programs[-1].c_source.count("split at the bounds") >= 2, cf.programs[-1].c_source

    # a gather in a split kernel big enough to run in parallel: an index
    # out of range still raises
    def g(i, w, x):
        return torch.cat([torch.nn.functional.embedding(i, w), x], 1) * 2
    i = torch.randint(0, 50, (4, 64))
    w, x = torch.randn(50, 128), torch.randn(4, 64, 128)
    check(g, (i, w, x), server=server, fallback=0)
    cg = compiled.compile(g, (i, w, x), server=server)
    assert "split at the bounds" in cg.programs[-1].c_source
    with torch.no_grad(), pytest.raises(IndexError):
        cg(torch.full((4, 64), 50), w, x)

    # an index cast to a narrow dtype wraps before it is compared: neither
    # a split nor a folded comparison may assume the unwrapped range
    def h(x):
        i = torch.arange(300, dtype=torch.uint8).view(300, 1)
        return torch.where(i < 100, x, -x) + torch.where(i >= 200, x, 0 * x)
    check(h, (torch.randn(300, 128),), server=server, fallback=0)


def test_column_sums_split_rows_between_threads(server):
    """A float32 sum over the rows of a narrow operand splits the rows
    between threads (each adds whole rows into its own partial row), for
    odd row counts, with a computed operand and NaN; a transposed operand
    keeps the tiled kernel."""
    def f(x):
        return x.sum(0), (x * 2 + 1).sum(0, keepdim=True)
    for rows, cols in ((1025, 33), (4099, 2048), (3000, 16)):
        x = torch.randn(rows, cols)
        x[7, 3] = float("nan")
        check(f, (x,), server=server, fallback=0, atol=1e-4, rtol=1e-4)
    x = torch.randn(4099, 100)
    cf = compiled.compile(f, (x,), server=server)
    assert "column sum: rows split" in cf.programs[-1].c_source
    xt = torch.randn(100, 4099).t()
    check(f, (xt,), server=server, fallback=0, atol=1e-4, rtol=1e-4)
    cf = compiled.compile(f, (xt,), server=server)
    assert "column sum: rows split" not in cf.programs[-1].c_source


def test_short_rows_take_in_an_outer_dim(server):
    """A per-channel pointwise kernel over short image rows loops over
    whole planes (the row dim merged into the inner loop), where the
    layout allows; a sliced input whose rows are not adjacent keeps them
    apart. Both agree with eager."""
    bn = torch.nn.BatchNorm2d(16).eval()
    bn.running_mean.normal_()
    bn.running_var.uniform_(0.5, 2)
    m = torch.nn.Sequential(bn, torch.nn.SiLU()).eval()
    x = torch.randn(4, 16, 20, 30)
    check(m, (x,), server=server, fallback=0, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        cf = compiled.compile(m, (x,), server=server)
        cf(x)
    assert re.search(r"pointwise over \[x\d+ < 600\]", cf.programs[-1].c_source), \
        cf.programs[-1].c_source
    xs = torch.randn(4, 16, 20, 64)[..., 2:32]
    check(m, (xs,), server=server, fallback=0, atol=1e-5, rtol=1e-5)


def test_in_place_over_library_results(server):
    """Batch norm and relu after a convolution compute in the convolution's
    own tensor (it dies there): no arena bytes for them, the same values as
    eager, and the next convolution reads a view of that tensor. (The arena
    keeps batch norm's per-channel scale and shift, far below one
    activation.)"""
    conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
    bn1 = torch.nn.BatchNorm2d(8).eval()
    conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
    bn2 = torch.nn.BatchNorm2d(8).eval()
    for bn in (bn1, bn2):
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)

    def f(x):
        y = torch.relu(bn1(conv1(x)))
        return torch.relu(bn2(conv2(y)) + 1) * 2

    x = torch.randn(2, 3, 16, 16)
    s = check(f, (x,), server=server, fallback=0)
    assert s["arena_bytes"] < 2 * 8 * 16 * 16 * 4, s
    cf = compiled.compile(f, (x,), server=server)
    assert cf.sources().count("/* in place */") >= 1


@pytest.mark.parametrize("case", ["transposed", "later_node", "two_stages", "output",
                                  "flipped", "reused_and_read", "var_beside_softmax",
                                  "other_row", "shifted_stage"])
def test_in_place_only_when_invisible(server, case):
    """A kernel must not write over a dying input it still reads elsewhere:
    at another element (a transpose, a flip), after the write (a later node
    of the kernel), in another stage (softmax's passes), or when the input
    is a program output. Each kernel writes an intermediate (the next
    product's operand), checked against eager."""
    def f(x, w, w2):
        y = x @ w  # written into the arena by mm.out
        if case == "transposed":
            return ((y + y.t()) * 3) @ w2
        if case == "later_node":
            z = torch.sigmoid(y)
            return z @ w2, y * 2 + z
        if case == "two_stages":
            return torch.softmax(y, dim=1) @ w2
        if case == "output":
            return y, torch.relu(y) @ w2
        if case == "reused_and_read":
            # the last stage reads y besides the exp the sum stage stores
            return (torch.softmax(y, dim=1) * y) @ w2
        if case == "var_beside_softmax":
            # a variance (two passes over the row) in softmax's kernel
            v = (y - y.amax(1, keepdim=True)).var(1, keepdim=True)
            return (torch.softmax(y, dim=1) + v) @ w2
        if case == "other_row":
            # a reduction stage reading the previous row
            return (y - torch.roll(y, 1, 0).amax(1, keepdim=True)) @ w2
        if case == "shifted_stage":
            # an earlier stage reading the row at other elements
            return (y / torch.roll(y, 3, 1).abs().amax(1, keepdim=True)) @ w2
        return (torch.exp(y) + torch.flip(y, [1])) @ w2

    x, w, w2 = torch.randn(64, 40), torch.randn(40, 64), torch.randn(64, 8)
    # The products may be oneDNN's, summing in another order than eager's
    # OpenBLAS (docs/codegen.md), and exp and the second product magnify a
    # last-bit difference of y: differences up to 1e-5 of the output's
    # largest magnitude are rounding (a kernel reading overwritten memory
    # is off by the values themselves).
    scale = max(t.abs().max().item() for t in pytree.tree_flatten(f(x, w, w2))[0])
    tol = dict(atol=1e-5 * scale, rtol=1e-5)
    if case == "var_beside_softmax":
        # the variance of values near 40 sums in double here, in float in eager
        tol = dict(atol=max(1e-3, 1e-5 * scale), rtol=1e-5)
    check(f, (x, w, w2), server=server, fallback=0, **tol)


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_row_kernels_in_place_of_a_product(server, op):
    """A row kernel (a reduction stage, then a pointwise one) over a matrix
    product that dies in it writes into the product's memory: it reads each
    row whole before writing it. The arena then holds one 64 x 64 buffer,
    not two."""
    def f(x, w, w2):
        y = x @ w
        if op == "softmax":
            z = torch.softmax(y, dim=1)
        elif op == "log_softmax":
            z = torch.log_softmax(y, dim=1)
        elif op == "layer_norm":
            z = torch.nn.functional.layer_norm(y, (64,))
        else:
            z = y * torch.rsqrt(y.pow(2).mean(1, keepdim=True) + 1e-6)
        return z @ w2

    # log-probabilities near -40 cancel in the last product: keep y small
    x, w, w2 = torch.randn(64, 40) / 8, torch.randn(40, 64), torch.randn(64, 8)
    # oneDNN's products sum in another order than eager's (docs/codegen.md):
    # within 1e-5 of the terms' size (an in-place hazard is off by values)
    scale = max(f(x, w, w2).abs().max().item(), 40 * 8)
    s = check(f, (x, w, w2), server=server, fallback=0, atol=1e-6 * scale, rtol=1e-5)
    assert s["arena_bytes"] == 64 * 64 * 4, s


def test_matrix_product_writes_into_the_output(server):
    """A product whose only reader is the pointwise kernel writing the
    program's output is computed into the output tensor (read there through
    a view of another shape) and the kernel works in place: no arena."""
    def f(x, w, b):
        return torch.nn.functional.gelu((x @ w).view(4, 16, 64) + b)

    x, w, b = torch.randn(64, 32), torch.randn(32, 64), torch.randn(64)
    s = check(f, (x, w, b), server=server, fallback=0)
    assert s["arena_bytes"] == 0, s


def streamed_stores(fn, args, server):
    """The generated C of fn's program: its gc_stream calls."""
    with torch.no_grad():
        cf = compiled.compile(fn, args, server=server)
        cf(*args)
    return re.findall(r"gc_stream\(&b\d+", cf.programs[-1].c_source)


def prefetched_rows(fn, args, server):
    """The generated C of fn's program: the row addresses its kernels
    prefetch (prefetch.c)."""
    with torch.no_grad():
        cf = compiled.compile(fn, args, server=server)
        cf(*args)
    return re.findall(r"gc_prefetch\(\(const char \*\)&b\d+\[\(?([^\]]*?)\)?\]",
                      cf.programs[-1].c_source)


def test_row_kernels_prefetch_a_later_row(server):
    """A kernel that passes over a row more than once prefetches, during
    its last stage, the row its first stage reads at a later outer point:
    the next row, or as many rows ahead as make 4 KiB (short rows), and
    not rows its first stage does not read densely (a transposed input) or
    rows too long to keep two in cache. Results agree with eager whatever
    the rows' length (ragged last blocks)."""
    def ln(x):
        return torch.nn.functional.layer_norm(x, x.shape[-1:])

    def rms(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def group(x):  # a reduction over two dims, then the row again
        return x - x.mean((-1, -2), keepdim=True)

    x = torch.randn(96, 4100)
    for fn, args, want in [
        (ln, (x,), ["4100*x", "+ 4100"]),
        (rms, (x,), ["4100*x", "+ 4100"]),
        (lambda x: torch.softmax(x, -1), (x,), ["4100*x", "+ 4100"]),
        (ln, (torch.randn(512, 64),), ["64*x", "+ 1024"]),  # 16 rows ahead
        (group, (torch.randn(64, 24, 40),), ["960*x", "+ 1920"]),  # 2 ahead
        # vit's class token: the outer loop split at the cat's bound, each
        # range with its own variable
        (lambda c, x, p: ln(torch.cat([c, x], 1) + p),
         (torch.randn(2, 1, 768), torch.randn(2, 196, 768), torch.randn(1, 197, 768)),
         ["768*x"]),
    ]:
        check(fn, args, server=server, fallback=0, atol=1e-5, rtol=1e-5)
        rows = prefetched_rows(fn, args, server)
        assert rows and all(w in r for r in rows for w in want), (fn, rows)
    for fn, args in [
        (ln, (torch.randn(4100, 96).t(),)),  # rows strided in memory
        (ln, (torch.randn(8, 20000),)),      # 80 KB rows
        (lambda x: x.sum(-1), (x,)),         # one pass over each row
        (lambda x: x.exp() / x.exp().sum(0), (torch.randn(0, 96),)),  # no rows
        (lambda x: x.exp() / x.exp().sum(-1, True), (torch.randn(96, 0),)),
    ]:
        check(fn, args, server=server, fallback=0, atol=1e-4, rtol=1e-4)
        assert not prefetched_rows(fn, args, server), fn


def test_large_outputs_stream_their_stores(server):
    """Outputs of 32 MiB or more are written with streaming (non-temporal)
    stores, a block at a time: rows whose length is not a multiple of the
    block or of a cache line (ragged last blocks, unaligned rows), a 1-D
    loop, a row-wise reduction's epilogue, float64 and int64. Every one agrees with eager exactly; small outputs
    and an output an earlier stage of its kernel wrote (softmax's holds the
    exponentials its sum stage stored) store plainly."""
    x = torch.randn(2048, 4100)  # 32.03 MiB; rows of 16400 bytes
    y = torch.randn(4100)
    cases = [
        (lambda x, y: x * 2 + y, (x, y)),
        (lambda x: (x.reshape(-1) - 1).relu(), (x,)),
        (lambda x, y: torch.nn.functional.layer_norm(x, (4100,), y, y), (x, y)),
        (lambda x: x.double() * 3, (torch.randn(4_200_000),)),
        (lambda i: i * 7 - 1, (torch.randint(-1000, 1000, (4_200_000,)),)),
    ]
    for fn, args in cases:
        tol = 1e-5 if fn is cases[2][0] else 0
        check(fn, args, server=server, fallback=0, atol=tol, rtol=tol)
        assert streamed_stores(fn, args, server), f"no streamed store for {fn}"
    small = torch.randn(64, 4100)
    assert not streamed_stores(lambda x: x * 2, (small,), server)
    assert not streamed_stores(lambda x: torch.softmax(x, -1), (x,), server)
    # the transposing 2-D tiles write a line per row of a tile: slower
    # streamed (8.0-8.6 -> 9.7 ms in make bench-bandwidth's transpose_add)
    t = torch.randn(2944, 2944)
    assert not streamed_stores(lambda a, b: a + b.t(), (t, t.clone()), server)


def test_profile_ranges_name_segments_and_their_kernels(server, monkeypatch):
    """COMPILED_PROFILE=1 (read when a program loads) wraps each segment
    call in a torch.profiler range named after the segment and the kernels
    it runs, so a profile shows the generated code's time beside the ATen
    calls; without it no range is added."""
    x = torch.randn(64, 64)

    def ranges(fn):
        cf = compiled.compile(fn, (x,), server=server)
        with torch.no_grad():
            cf(x)  # loads the program
            with torch.profiler.profile() as prof:
                cf(x)
        return cf, [e.name for e in prof.events() if e.name.startswith("compiled seg")]

    monkeypatch.setenv("COMPILED_PROFILE", "1")
    # a float64 product is an ATen call (oneDNN has no dgemm), between two
    # segments; the float32 product is oneDNN's in generated code where the
    # target has it, its function named in the segment's range
    cf, names = ranges(lambda x: (torch.softmax(x * 2, -1).double() @ x.relu().double()
                                  + 1).float() @ x)
    assert len(names) >= 2, names  # the kernels before and after the mm
    if onednn_products():
        assert any(re.search(r"\bgc_mm\d+\b", n) for n in names), names
    src = cf.sources()
    for name in names:
        m = re.fullmatch(r"compiled seg(\d+): ((?:(?:k|gc_[a-z]+)\d+\w* ?)+)", name)
        assert m, name
        for kernel in m.group(2).split():
            assert f"static int {kernel}(" in src or f"/* {kernel}:" in src, (kernel, name)
    monkeypatch.delenv("COMPILED_PROFILE")
    _, names = ranges(lambda x: torch.softmax(x * 3, -1) @ x.relu() + 2)
    assert names == []


def test_a_value_a_library_call_reads_is_realized_for_its_other_users(server):
    """The backward of an attention layer's input projection: the q, k
    and v gradients put together (a cat, or with torch 2 select_backwards
    added) are read by a matrix product (the weight's
    gradient, through a transpose) and by a sum over rows (the bias's
    gradient), and autograd orders the sum first. That value is realized
    where it is made (the matrix product needs it anyway: lower.c,
    mark_call_reads), so the sum reads its rows instead of computing it a
    second time column by column in its own kernel. Gradients match
    eager."""
    torch.manual_seed(0)
    m = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
    ref = copy.deepcopy(m)
    ref64 = copy.deepcopy(m).double()
    x = torch.randn(4, 16, 64)
    cf = compiled.compile(m, (x,), server=server)
    cf(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    ref64(x.double()).pow(2).sum().backward()
    # The layer norms' gradients are small differences of terms as large as
    # the output's (1e2): eager float32's own error against float64 is up
    # to 7e-6 of norm1.weight's 1.7e-3, so each gradient is compared with
    # float64, within a few times eager float32's error there.
    for (name, p), q, r in zip(m.named_parameters(), ref.parameters(), ref64.parameters()):
        err = (p.grad.double() - r.grad).abs().max().item()
        eager_err = (q.grad.double() - r.grad).abs().max().item()
        assert err <= 4 * eager_err + 1e-6 * r.grad.abs().max().item(), (name, err, eager_err)
    src = cf.programs[-1].c_source
    kernels = re.findall(r"/\* (k\d+_[a-z0-9_]+)\n((?: \*.*\n)+)", src)
    # torch 2's attention projects q, k and v with one packed linear and
    # selects them, so their gradients meet in select_backwards and adds
    # (torch 1.13: a cat); either way one kernel makes the value
    with_cat = [name for name, body in kernels
                if "aten::cat" in body or "aten::select_backward" in body]
    assert len(with_cat) == 1, with_cat
    assert "sum" not in with_cat[0], with_cat


def test_an_epilogue_is_not_reordered_into_strided_stores(server):
    """A column sum of a transposed operand reads it contiguously in the
    natural order (not tiled), and its pointwise consumer writes a
    row-major output: reordered into the sum's kernel it would store 512
    floats apart per element (schedule.c, place_matching), so it runs as
    its own kernel, a transposing one in 2-D tiles. Values match eager."""
    x = torch.randn(512, 300).t()
    z = torch.randn(300, 512)

    def f(x, z):
        return z * x.sum(0) + x.exp()

    check(f, (x, z), server=server, fallback=0, atol=1e-4, rtol=1e-4)
    cf = compiled.compile(f, (x, z), server=server)
    src = cf.programs[-1].c_source
    kernels = dict(re.findall(r"/\* (k\d+_[a-z0-9_]+)\n((?: \*.*\n)+)", src))
    assert not [k for k, body in kernels.items() if "aten::sum" in body and "aten::mul" in body], \
        kernels
    assert "2-D tiles" in src, src


def test_the_first_arena_is_paged_in_while_the_program_loads(server):
    """An arena of 1-64 MiB is allocated when the program loads and a
    thread touches its pages meanwhile; the first call takes that buffer
    (after the thread is done) and gives eager's answers, as do the next.
    (Buffers of 1 MiB or more have their own memory: two of 0.95 MiB live
    together make the arena.)"""
    def f(x):
        p = x @ x.t()
        q = x.t() @ x
        return (p * q).sum(0), (torch.softmax(x, -1) * 2).sum(0)
    x = torch.randn(496, 496)
    with torch.no_grad():
        cf = compiled.compile(f, (x,), server=server)
        s = cf.summary()
        assert s["runs"] == "native" and s["arena_bytes"] >= 1 << 20, s
        pool = cf.programs[-1].fn.__globals__["_pool"]
        assert len(pool) == 1 and pool[0].paged_in is not None
        want = f(x)
        for _ in range(2):
            got = cf(x)
            assert len(cf.programs) == 1 and pool[0].paged_in is None  # the first call took it
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)
        # release_memory() before any call drops the paged-in arena too
        cf2 = compiled.compile(f, (x,), server=server)
        pool2 = cf2.programs[-1].fn.__globals__["_pool"]
        assert pool2[0].paged_in is not None
        assert cf2.release_memory() >= s["arena_bytes"] and pool2[0].paged_in is None
        torch.testing.assert_close(cf2(x), want, rtol=1e-4, atol=1e-3)


def test_a_program_of_aten_calls_only_takes_no_arena(server):
    """A program with no generated code and nothing in an arena (an
    inference TransformerEncoderLayer's one fused call, which eager makes
    and a trace does not) is not built: its native program has no shared
    object, and the ATen program runs, without an arena or a pointer
    table, so a call needs no more memory than eager's; the result is
    eager's, and summary() says ATen runs."""
    torch.manual_seed(0)
    m = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()
    a = m.self_attn

    def fused(x):
        return torch._transformer_encoder_layer_fwd(
            x, a.embed_dim, a.num_heads, a.in_proj_weight, a.in_proj_bias, a.out_proj.weight,
            a.out_proj.bias, False, m.norm_first, m.norm1.eps, m.norm1.weight, m.norm1.bias,
            m.norm2.weight, m.norm2.bias, m.linear1.weight, m.linear1.bias, m.linear2.weight,
            m.linear2.bias)
    x = torch.randn(2, 8, 64)
    with torch.no_grad():
        cf = compiled.compile(fused, (x,), server=server)
        got = cf(x)
        want = m(x)
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    s = cf.summary()
    assert s["runs"] == "aten" and s["kernels"] == 0 and s["fallback"] == 1, s
    assert not cf.programs[-1].artifact.native_program.code.shared_object
    src = cf.programs[-1].source
    assert "_pool" not in src and "_new_arena" not in src, src


def test_batched_products_call_blas_from_generated_code(server, monkeypatch):
    """A bmm whose operands BLAS can read runs in generated code when the
    client's process has the system BLAS loaded (target feature "blas"):
    one sgemm_/dgemm_ per batch item, the items split between OpenMP's
    threads (ATen's bmm loops over them on one thread). Operands
    transposed, sliced and computed, float32 and float64, agree with
    eager; a batch of one, and a client without BLAS, keep the ATen call."""
    from compiled import target
    if not target.has_blas():
        # PyPI's torch 2 links MKL and never loads the system BLAS (Debian's
        # torch 1.13 did): load it, as such a torch would have, so that
        # the client reports "blas"
        try:
            ctypes.CDLL("libblas.so.3", mode=os.RTLD_GLOBAL)
        except OSError:
            pytest.skip("no system BLAS (libblas.so.3) to load")
        monkeypatch.setattr(target, "has_blas", lambda: True)
    g = torch.Generator().manual_seed(11)

    def f(a, b, c):
        return (torch.bmm(a * 2, b) + 1, torch.bmm(a, c.transpose(1, 2)),
                torch.bmm(b.transpose(1, 2)[:, :7], a.transpose(1, 2)))

    for dtype, fn in ((torch.float32, "sgemm_"), (torch.float64, "dgemm_")):
        a = torch.randn(6, 20, 30, generator=g, dtype=dtype)
        b = torch.randn(6, 30, 25, generator=g, dtype=dtype)
        c = torch.randn(6, 25, 30, generator=g, dtype=dtype)[:, :, :30]
        summary = check(f, (a, b, c), server=server, fallback=0, atol=1e-5, rtol=1e-5)
        assert summary["extern"] == 3, summary
        cf = compiled.compile(f, (a, b, c), server=server)
        src = cf.programs[-1].c_source
        assert src.count("static int gc_bmm") == 3 and fn + "(" in src, src[-3000:]
        with torch.no_grad():
            got = cf(a, b, c)
        for x, y in zip(got, f(a, b, c)):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
        assert "_nvf" not in cf.programs[-1].source  # no ATen call left
    one = (torch.randn(1, 20, 30), torch.randn(1, 30, 25), torch.randn(1, 25, 30))
    check(f, one, server=server, fallback=0, atol=1e-5, rtol=1e-5)
    assert "gc_bmm" not in compiled.compile(f, one, server=server).programs[-1].c_source
    monkeypatch.setattr(target, "has_blas", lambda: False)
    x = (torch.randn(3, 20, 30), torch.randn(3, 30, 25), torch.randn(3, 25, 30))
    check(f, x, server=server, fallback=0, atol=1e-5, rtol=1e-5)
    assert "gc_bmm" not in compiled.compile(f, x, server=server).programs[-1].c_source


def _best_level(features):
    """The highest -march level whose features are all in `features`."""
    levels = compiled.target.MARCH_FEATURES
    return max((lv for lv, need in levels.items() if need <= set(features)),
               key=lambda lv: len(levels[lv]))


@pytest.mark.parametrize("level", ["x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"])
def test_compiled_target_caps_the_isa_the_code_is_built_for(server, monkeypatch, level):
    """COMPILED_TARGET: the client reports at most that level's features
    (only those this CPU has), the daemon builds for the best level they
    make up, and the program still computes eager's function."""
    cpu = compiled.target.cpu_flags()
    monkeypatch.setenv("COMPILED_TARGET", level)
    isa = set(compiled.target.target_message().isa) - {"blas", "dnnl"}
    assert isa == set(cpu) & compiled.target.MARCH_FEATURES[level], (isa, cpu)
    x = torch.randn(37, 300)
    f = lambda x: torch.softmax(x * 2, -1) + x.exp().sum(0, keepdim=True).log()  # noqa: E731
    s = check(f, (x,), server=server, atol=1e-5, rtol=1e-5)
    assert s["target"] == _best_level(isa), s
    monkeypatch.delenv("COMPILED_TARGET")
    s = check(f, (x,), server=server, atol=1e-5, rtol=1e-5)
    assert s["target"] == _best_level(cpu), s


def test_compiled_target_names_what_is_wrong(server, monkeypatch):
    monkeypatch.setenv("COMPILED_TARGET", "avx2")
    with pytest.raises(ValueError, match=r"COMPILED_TARGET='avx2' is not a target level.*x86-64-v3"):
        compiled.compile(lambda x: x.exp(), (torch.randn(4),), server=server)
