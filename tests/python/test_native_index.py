"""Native lowering of the operator families CNN and transformer inference
graphs need beyond pointwise math: batch norm, pooling, embedding,
index_select, gather, cat, constant_pad_nd, writes through views
(select/slice/diagonal_scatter), logsumexp and loss forwards
(compiler/lower/norm.c, pool.c, upsample.c, index.c, loss.c).

Everything is compared against eager PyTorch (native_util.check) and must
run without a fallback call. Cases are batched into one compiled function
per layout where possible: every compile runs the C compiler.
"""

import re

import itertools

import pytest
import torch
import torch.nn.functional as F

import compiled
import visionmodels
from native_util import assert_raises_like_eager, check, check_backward, clone_inputs, layouts


def compiled_fn(fn, args, server):
    with torch.no_grad():
        return compiled.compile(fn, clone_inputs(args), server=server)


# ---- batch norm ----

def test_batch_norm_eval_fuses_with_its_consumers(server):
    g = torch.Generator().manual_seed(0)
    C = 5
    w, b = torch.randn(C, generator=g), torch.randn(C, generator=g)
    rm, rv = torch.randn(C, generator=g), torch.rand(C, generator=g) + 0.1

    def f(x, r, w, b, rm, rv):
        y = F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)
        z = F.batch_norm(x, rm, rv, None, None, False, 0.1, 1e-3)
        return torch.relu(y + r), z

    for name, x in layouts((2, C, 6, 7)):
        r = torch.randn(2, C, 6, 7, generator=g)
        s = check(f, (x, r, w, b, rm, rv), server=server, fallback=0)
        if name == "contiguous":
            # alpha/beta per channel, then one kernel for norm + add + relu
            # and one for the second norm: far fewer kernels than nodes
            assert s["kernels"] <= 4, s
    for shape in [(3, C), (2, C, 9), (1, C, 1, 1), (0, C, 3, 3)]:
        x = torch.randn(shape, generator=g)
        check(lambda x, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5),
              (x, w, b, rm, rv), server=server, fallback=0)
    xd = torch.randn(2, C, 4, 3, dtype=torch.float64, generator=g)
    check(lambda x, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5),
          (xd, w.double(), b.double(), rm.double(), rv.double()), server=server, fallback=0)



def test_batch_norm_eval_is_atens_multiply_add(server):
    # x * alpha + beta with x = 3 * 2^-24 * (1 + 2^-16), alpha = 1 - 2^-16,
    # beta = 1: the exact value, 1 + 3 * 2^-24 - 3 * 2^-56, is just below
    # the midpoint between two floats. Rounded once (ATen's AVX2 and
    # AVX-512 kernels contract it into a multiply-add) it is 1 + 2^-23;
    # through double it rounds to the midpoint first, then to the even
    # 1 + 2^-22. Generated code must round once too (where the target has
    # FMA; a capped target below x86-64-v3 cannot know eager's kernel)
    s = torch.float32
    C = 16
    x = torch.full((2, C, 5, 8), 3 * 2 ** -24 * (1 + 2 ** -16), dtype=s)
    w = torch.full((C,), 1 - 2 ** -16, dtype=s)
    b, rm, rv = torch.ones(C), torch.zeros(C), torch.ones(C)
    want = F.batch_norm(x, rm, rv, w, b, False, 0.1, 0.0)
    if not torch.equal(want, torch.full_like(want, 1 + 2 ** -23)):
        pytest.skip("eager's batch norm does not round once here (no FMA kernels)")
    for fmt in (torch.contiguous_format, torch.channels_last):
        xl = x.contiguous(memory_format=fmt)
        r = check(lambda x, w, b, rm, rv: torch.relu(F.batch_norm(x, rm, rv, w, b, False,
                                                                  0.1, 0.0)),
                  (xl, w, b, rm, rv), server=server, fallback=0, atol=0, rtol=0)
        if r["target"] not in ("x86-64-v3", "x86-64-v4"):
            pytest.skip(f"the compile target {r['target']} has no FMA")

def test_batch_norm_training_updates_running_stats(server):
    g = torch.Generator().manual_seed(1)
    C = 4

    def f(x, w, b, rm, rv):
        return F.batch_norm(x, rm, rv, w, b, True, 0.3, 1e-5) * 2

    for name, x in layouts((3, C, 5, 2)):
        w, b = torch.randn(C, generator=g), torch.randn(C, generator=g)
        rm, rv = torch.randn(C, generator=g), torch.rand(C, generator=g) + 0.5
        # check() compares the inputs after the call: the running stats
        check(f, (x, w, b, rm, rv), server=server, fallback=0, atol=1e-5, rtol=1e-5)
    rm, rv = torch.randn(C, generator=g), torch.rand(C, generator=g) + 0.5
    check(lambda x, rm, rv: F.batch_norm(x, rm, rv, None, None, True, 0.1, 1e-5),
          (torch.randn(6, C, generator=g), rm, rv), server=server, fallback=0,
          atol=1e-5, rtol=1e-5)


def test_batch_norm_module_in_training_mode(server):
    import copy
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                            torch.nn.ReLU()).train()
    mc = copy.deepcopy(m)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        cf = compiled.compile(mc, (x,), server=server)
        for _ in range(3):  # the running statistics move at every call
            torch.testing.assert_close(cf(x), m(x))
    s = cf.summary()
    assert s["runs"] == "native" and s["fallback"] == 0, s
    for k, v in m.state_dict().items():
        torch.testing.assert_close(mc.state_dict()[k], v, msg=k)


def test_instance_norm_and_batch_norm_without_running_stats(server):
    # a batch norm given no running statistics writes nothing: instance norm
    # (a batch norm over a (1, N * C, ...) view) and F.batch_norm(x, None,
    # None, training=True) were kept in eager form as "writes an unbound
    # argument"
    g = torch.Generator().manual_seed(2)
    for name, x in layouts((3, 4, 5, 6)):
        w, b = torch.randn(4, generator=g), torch.randn(4, generator=g)
        check(lambda x, w, b: (F.instance_norm(x, weight=w, bias=b), F.instance_norm(x),
                               F.batch_norm(x, None, None, w, b, True)),
              (x, w, b), server=server, fallback=0, atol=1e-5, rtol=1e-5)
    # with running statistics (track_running_stats): they are updated
    rm, rv = torch.randn(4, generator=g), torch.rand(4, generator=g) + 0.5
    check(lambda x, rm, rv: F.instance_norm(x, rm, rv, use_input_stats=True, momentum=0.3),
          (torch.randn(2, 4, 7, generator=g), rm, rv), server=server, fallback=0,
          atol=1e-5, rtol=1e-5)
    # and in training, forward and backward native
    torch.manual_seed(4)
    m = torch.nn.Sequential(torch.nn.ReflectionPad2d(1), torch.nn.Conv2d(3, 4, 3),
                            torch.nn.InstanceNorm2d(4, affine=True), torch.nn.ReLU())
    x = torch.randn(2, 3, 8, 8)
    cf = compiled.compile(m, (x,), server=server)
    cf(x).sum().backward()
    got = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m(x).sum().backward()
    for a, b in zip(got, [p.grad for p in m.parameters()]):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    s = cf.summary()
    assert s["fallback"] == 0 and s["runs"] == "native", s
    # convolution_backward is an extern call (a library kernel), no fallback
    assert s["backward"]["fallback_ops"] == [] and s["backward"]["extern"] >= 1, s


# ---- pooling ----

def max_pools(x):
    out = []
    for kw in [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2),
               dict(kernel_size=3, stride=1, padding=1, dilation=2),
               dict(kernel_size=3, stride=2, ceil_mode=True),
               dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1), ceil_mode=True)]:
        out += list(F.max_pool2d(x, return_indices=True, **kw))
    return tuple(out)


def test_max_pool2d_values_and_indices(server):
    for name, x in layouts((2, 3, 9, 11)):
        check(max_pools, (x,), server=server, fallback=0)
    check(max_pools, (torch.randn(3, 7, 8),), server=server, fallback=0)


def test_max_pool2d_nan_inf_and_ties(server):
    x = torch.randn(1, 2, 7, 7)
    x[0, 0, 1, 1] = float("nan")
    x[0, 0, 4, 2] = float("nan")
    x[0, 0, 4, 3] = float("nan")      # two NaNs in a window: the last one's index
    x[0, 1, :3, :3] = float("-inf")   # an all -inf window: its first position
    x[0, 1, 5:, 5:] = 2.0              # ties: the first index
    check(max_pools, (x,), server=server, fallback=0)


def test_strided_window_loops_split_where_the_window_leaves_the_input(server):
    """A 3x3 stride-2 padded max pool (resnet's stem) in NCHW: the loops
    split where the window's first column and row fall outside the input
    (k*x + c compared with 0, k = 2), so the interior loop reads at affine
    indices, no clamp, which gcc vectorizes (codegen/split.c, "loops split into
    ranges"). Values and indices match eager over rows wide enough for
    vector lanes, with NaN, infinities and ties inside and at the edges."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 21, 70, generator=g)
    x[0, 0, 5, 33] = float("nan")
    x[0, 1, 0, 0] = float("nan")
    x[1, 2, 20, 69] = float("inf")
    x[1, 0, 10:14, 20:30] = float("-inf")
    x[0, 2, 4:8, 40:50] = 1.5
    x = torch.relu(x)  # many ties at 0, as after resnet's relu

    def f(x):
        return F.max_pool2d(x, 3, 2, 1, return_indices=True)

    check(f, (x,), server=server, fallback=0)
    cf = compiled_fn(f, (x,), server)
    with torch.no_grad():
        cf(x)
    src = cf.sources()
    kernel = src[src.index("max_pool2d_with_indices("):]
    kernel = kernel[:kernel.index("\n}\n")]
    assert "split at the bounds" in kernel, kernel[:3000]
    # the interior range (both variables from 1) clamps nothing
    loops = kernel.split("#pragma omp simd")
    interior = [b for b in loops if re.search(r"for \(int64_t x\d+ = 1;", b)]
    assert interior and all("gc_max(" not in b for b in interior), kernel[:4000]


BACKWARD_POOLS = [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2),
                  dict(kernel_size=3, stride=1, padding=1),
                  dict(kernel_size=3, stride=2, ceil_mode=True),
                  dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1), ceil_mode=True)]


def max_pool_backwards(x, *grads):
    out = []
    for kw, g in zip(BACKWARD_POOLS, grads):
        _, idx = F.max_pool2d(x, return_indices=True, **kw)
        k = kw["kernel_size"]
        out.append(torch.ops.aten.max_pool2d_with_indices_backward(
            g, x, k if isinstance(k, tuple) else (k, k), kw.get("stride", k),
            kw.get("padding", 0), 1, kw.get("ceil_mode", False), idx) * 2)
    return tuple(out)


def test_max_pool2d_backward_writes_planned_memory(server):
    """A max pool's input gradient (a scatter) is a library call through
    its .grad_input overload, writing a planned buffer (extern.c): no
    fallback, and the values are eager's exactly, for overlapping windows,
    padding, ceil mode, layouts (channels-last included), NaN and ties."""
    g = torch.Generator().manual_seed(7)
    for name, x in layouts((2, 3, 9, 11)):
        x = x.clone()
        x[0, 1, 2, 3] = float("nan")
        x[1, 2, 3:6, 4:8] = 1.0  # ties
        grads = tuple(torch.randn(F.max_pool2d(x, **kw).shape, generator=g)
                      for kw in BACKWARD_POOLS)
        summary = check(max_pool_backwards, (x,) + grads, server=server, fallback=0,
                        atol=0, rtol=0)
        assert summary["extern"] == len(BACKWARD_POOLS), summary
    cf = compiled_fn(max_pool_backwards, (x,) + grads, server)
    assert "grad_input=" in cf.programs[-1].source


def test_avg_and_adaptive_pool(server):
    def f(x):
        return (F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                F.avg_pool2d(x, 2), F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
                F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                F.avg_pool2d(x, (3, 2), (2, 1), (1, 0), divisor_override=5),
                F.adaptive_avg_pool2d(x, (3, 4)), F.adaptive_avg_pool2d(x, (4, 3)),
                F.adaptive_avg_pool2d(x, (9, 11)), F.adaptive_avg_pool2d(x, (2, 5)),
                F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x, (12, 13)))
    for name, x in layouts((2, 3, 9, 11)):
        check(f, (x,), server=server, fallback=0)
    check(f, (torch.randn(3, 9, 11, dtype=torch.float64),), server=server, fallback=0)


def test_group_norm(server):
    def f(x, w, b):
        return (F.group_norm(x, 3, w, b), F.group_norm(x, 6), F.group_norm(x, 1, w, None),
                F.group_norm(x * 2 + 1, 2, None, b, eps=1e-3))
    g = torch.Generator().manual_seed(7)
    w, b = torch.randn(6, generator=g), torch.randn(6, generator=g)
    for name, x in layouts((2, 6, 5, 7)):
        check(f, (x, w, b), server=server, fallback=0, atol=1e-5, rtol=1e-5)
    check(f, (torch.randn(3, 6, 10, dtype=torch.float64), w.double(), b.double()),
          server=server, fallback=0)


NEAREST = [dict(scale_factor=2), dict(size=(7, 9)), dict(scale_factor=3), dict(size=(2, 3)),
           dict(scale_factor=1.5), dict(size=(5, 13)), dict(scale_factor=(2, 3))]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_upsample_nearest2d_and_its_backward(server, layout):
    # ATen's float source index, where it is floor(o * in / out) for every
    # output position (up, down, integer and fractional factors): eager's
    # values, and a backward that sums each input's copies in ATen's order
    torch.manual_seed(0)
    for kw in NEAREST:
        x = torch.randn(2, 3, 3, 4)
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        check(lambda x: F.interpolate(x, mode="nearest", **kw), (x,), server=server,
              fallback=0, atol=0, rtol=0)
        check_backward(lambda x: F.interpolate(x, mode="nearest", **kw), x, server=server)


def test_upsample_nearest2d_where_the_float_index_is_not_the_rational_one(server):
    # 26 -> 22: ATen's floorf(o * 26/22f) is not o * 26 // 22 at o = 11, but
    # another fraction gives ATen's indices: native, eager's bits. 4 -> 164:
    # float rounding makes indices no fraction gives; the rule declines and
    # the ATen call gives eager's values (torch 2 records the default
    # overload, aten::upsample_nearest2d; torch 1.13 the .vec one)
    check(lambda x: F.interpolate(x, size=(22, 5), mode="nearest"),
          (torch.randn(1, 2, 26, 5),), server=server, fallback=0, atol=0, rtol=0)
    s = check(lambda x: F.interpolate(x, size=(164, 5), mode="nearest"),
              (torch.randn(1, 2, 4, 5),), server=server, fallback=1, atol=0, rtol=0)
    assert s["fallback_ops"] == ["aten::upsample_nearest2d"], s


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_upsample_nearest_with_fractional_scale_factors(server, dims):
    # ATen's index is floorf(o * (float)(1 / factor)); torch 2's 1-D and
    # 3-D kernels (channels-last 3-D too) have no shortcut where the output
    # size equals the input's (2 elements at 1.1: out 2, indices 0, 0) or
    # doubles it (4 at 2.1), its 2-D kernels and its backward have (indices
    # 0, 1). (Torch 1.13: the generic kernels had none, the channels-last
    # ones had it.) The rule used the shortcut everywhere: wrong values.
    # Sizes where floor(o * in /
    # out) is not ATen's index take another fraction inside the interval
    # ATen's indices allow (1.7 on 4, 0.6 on 19). Values and gradients are
    # eager's bits, natively.
    for n_in in (2, 4, 7, 19):
        sfs = [sf for sf in (1.1, 1.3, 1.7, 2.1, 0.6, 0.35, 3.3) if int(n_in * sf)]
        shape = (2, 3) + (n_in, 3, 4)[:dims]

        def f(x):
            return tuple(F.interpolate(x, scale_factor=(sf, 1.0, 2.0)[:dims], mode="nearest")
                         for sf in sfs)
        xs = [torch.randn(shape)]
        if dims > 1:
            xs.append(xs[0].contiguous(memory_format=torch.channels_last if dims == 2
                                       else torch.channels_last_3d))
        for x in xs:
            check(f, (x,), server=server, fallback=0, atol=0, rtol=0)
        check_backward(lambda x: torch.cat([y.flatten() for y in f(x)]), xs[0], server=server)


NEAREST_1D = [dict(scale_factor=2), dict(size=7), dict(scale_factor=3), dict(size=2),
              dict(scale_factor=1.5), dict(size=13)]
NEAREST_3D = [dict(scale_factor=2), dict(size=(5, 7, 9)), dict(size=(2, 3, 3)),
              dict(scale_factor=(2, 1.5, 3))]


@pytest.mark.parametrize("dims", [1, 3])
def test_upsample_nearest1d_and_3d_and_their_backward(server, dims):
    # the 2-D rule over one and three spatial axes: eager's values in every
    # layout, and a backward that adds each input's copies in ATen's order
    # (the first spatial axis outermost)
    kws = NEAREST_1D if dims == 1 else NEAREST_3D
    for kw in kws:
        for name, x in layouts((2, 3) + (3, 4, 5)[3 - dims:]):
            check(lambda x: F.interpolate(x, mode="nearest", **kw), (x,), server=server,
                  fallback=0, atol=0, rtol=0)
        if dims == 3:
            x = torch.randn(2, 3, 3, 4, 5).contiguous(memory_format=torch.channels_last_3d)
            check(lambda x: F.interpolate(x, mode="nearest", **kw), (x,), server=server,
                  fallback=0, atol=0, rtol=0)
        check_backward(lambda x: F.interpolate(x, mode="nearest", **kw),
                       torch.randn((2, 3) + (3, 4, 5)[3 - dims:]), server=server)
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    check_backward(lambda x: F.interpolate(x, scale_factor=2.5, mode="nearest"), x,
                   server=server)


def test_upsample_nearest_with_explicit_scales(server):
    # a scale given beside the output size sets ATen's index (1 / scale),
    # whatever the sizes say (5 -> 7 at 1.2 reads 0 0 1 2 3 4 4, not
    # floor(o * 5 / 7))
    aten = torch.ops.aten
    x = torch.randn(2, 3, 4)
    check(lambda x: aten.upsample_nearest1d(x, [7], 2.0), (x,), server=server,
          fallback=0, atol=0, rtol=0)
    check(lambda x: aten.upsample_nearest1d(x, [7], 1.2), (torch.randn(2, 3, 5),),
          server=server, fallback=0, atol=0, rtol=0)
    x = torch.randn(1, 2, 3, 4, 5)
    check(lambda x: aten.upsample_nearest3d(x, [6, 8, 10], 2.0, None, 2.0), (x,),
          server=server, fallback=0, atol=0, rtol=0)
    g = torch.randn(1, 2, 6, 8, 10)
    check(lambda g: aten.upsample_nearest3d_backward(g, [6, 8, 10], [1, 2, 3, 4, 5], 2.0),
          (g,), server=server, fallback=0, atol=0, rtol=0)


# (input size, output size or None, align_corners, scale factor or None) of
# one axis: up, down, equal, to and from one, integer and fractional
# factors, including factors whose reciprocal is not in/out (1.5 on 4)
BILINEAR_AXES = [(3, 7, False, None), (4, 9, True, None), (3, 2, False, None),
                 (4, 3, True, None), (22, 26, False, None), (26, 22, True, None),
                 (7, 64, False, None), (64, 7, False, None), (1, 5, False, None),
                 (5, 1, True, None), (6, 6, False, None), (4, None, False, 1.5),
                 (4, None, False, 2.7), (5, None, False, 0.5), (3, None, True, 2.0)]


@pytest.mark.parametrize("axis", ["w", "h"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_upsample_bilinear2d_indices_and_weights_are_atens(server, axis, layout):
    # one-hot inputs along one axis, the other axis copied (its weights are
    # exactly 1 and 0): every output is ATen's weight itself (1 * w + 0 *
    # w' rounds the same with or without a multiply-add), so equal bits
    # check the source indices and the float weights at every position.
    # Torch 2 computes them in the dtype (float32: a float multiply-add for
    # the half-pixel index; torch 1.13: in double), its index through
    # floorf((float)src) even for float64
    for (n_in, n_out, align, sf), dtype in itertools.product(
            BILINEAR_AXES, (torch.float32, torch.float64)):
        x = torch.zeros(n_in, 2, 1, n_in, dtype=dtype)
        for j in range(n_in):
            x[j, :, 0, j] = 1
        size = None if n_out is None else (1, n_out)
        scale = None if sf is None else (1.0, sf)
        if axis == "h":
            x = x.transpose(2, 3).contiguous()
            size = None if size is None else size[::-1]
            scale = None if scale is None else scale[::-1]
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        check(lambda x: F.interpolate(x, size=size, scale_factor=scale, mode="bilinear",
                                      align_corners=align),
              (x,), server=server, fallback=0, atol=0, rtol=0)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_upsample_bilinear2d_values(server, layout):
    # random values through both of ATen's combinations (contiguous: rows,
    # then columns; channels-last: four weights), float32 and float64;
    # within two roundings of eager (a multiply-add may be contracted on one
    # side only), and exactly the weights (the test above)
    torch.manual_seed(0)
    kws = [dict(size=(7, 9)), dict(scale_factor=2), dict(size=(2, 3)), dict(scale_factor=(1.5, 2.7)),
           dict(size=(64, 64)), dict(size=(3, 4))]
    for dtype, tol in [(torch.float32, 1e-6), (torch.float64, 1e-14)]:
        x = torch.randn(2, 3, 3, 4, dtype=dtype)
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        for align in (False, True):
            def f(x):
                return tuple(F.interpolate(x * 2, mode="bilinear", align_corners=align, **kw)
                             for kw in kws)
            check(f, (x,), server=server, fallback=0, atol=tol, rtol=tol)


@pytest.mark.parametrize("mode", ["linear", "trilinear"])
def test_upsample_linear1d_and_trilinear3d_values(server, mode):
    # the bilinear rule over one and three axes, ATen's generic combination
    # (the first spatial axis outermost): within a rounding or two of eager
    # (a product may be contracted into a multiply-add on one side only, as
    # for bilinear); a channels-last 5-D input takes ATen's own trilinear
    # kernel, whose order the rule does not know: within two roundings
    torch.manual_seed(0)
    d = 1 if mode == "linear" else 3
    shape = (2, 3) + (3, 4, 5)[3 - d:]
    kws = [dict(scale_factor=2), dict(scale_factor=0.5), dict(size=(7, 2, 9)[:d]),
           dict(scale_factor=(1.5, 2.7, 3.0)[:d])]
    for dtype, tol in [(torch.float32, 1e-6), (torch.float64, 1e-14)]:
        for name, x in layouts(shape, dtype=dtype):
            for align in (False, True):
                check(lambda x: tuple(F.interpolate(x * 2, mode=mode, align_corners=align, **kw)
                                      for kw in kws),
                      (x,), server=server, fallback=0, atol=tol, rtol=tol)
    if d == 3:
        x = torch.randn(2, 3, 3, 4, 5).contiguous(memory_format=torch.channels_last_3d)
        check(lambda x: tuple(F.interpolate(x, mode=mode, align_corners=align, **kw)
                              for kw in kws for align in (False, True)),
              (x,), server=server, fallback=0, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_upsample_bilinear2d_backward_is_native_and_eager_bit_for_bit(server, layout):
    # each input element takes its gradient contributions in ATen's (oh, ow)
    # order, each the incoming gradient times ATen's two weights: eager's
    # bits, for every axis case above, float32 and float64
    torch.manual_seed(0)
    for n_in, n_out, align, sf in BILINEAR_AXES:
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(2, 3, 5, n_in, dtype=dtype)
            if layout == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
            size = None if n_out is None else (10, n_out)
            scale = None if sf is None else (2.0, sf)
            check_backward(lambda x: F.interpolate(x, size=size, scale_factor=scale,
                                                   mode="bilinear", align_corners=align),
                           x, server=server)


@pytest.mark.parametrize("mode", ["linear", "trilinear"])
def test_upsample_linear1d_and_trilinear3d_backward_are_eager_bit_for_bit(server, mode):
    # the bilinear backward over one and three axes: each gradient element
    # times its 2^d weights (products left to right, first axis outermost)
    # added in output order, eager's bits, channels-last too
    torch.manual_seed(0)
    d = 1 if mode == "linear" else 3
    for n_in, n_out, align, sf in BILINEAR_AXES[::2] if d == 3 else BILINEAR_AXES:
        for dtype in (torch.float32, torch.float64):
            x = torch.randn((2, 3) + (4, 3)[:d - 1] + (n_in,), dtype=dtype)
            # the other axes double: exact scales, safe from contraction
            size = None if n_out is None else (8, 6, n_out)[3 - d:]
            scale = None if sf is None else (2.0, 2.0, sf)[3 - d:]
            check_backward(lambda x: F.interpolate(x, size=size, scale_factor=scale,
                                                   mode=mode, align_corners=align),
                           x, server=server)
    if d == 3:  # one order of operations for every layout, one channel too
        for c in (3, 1):
            g = torch.randn(2, c, 6, 8, 10).contiguous(memory_format=torch.channels_last_3d)
            check(lambda g: torch.ops.aten.upsample_trilinear3d_backward(
                g, [6, 8, 10], [2, c, 3, 4, 5], False), (g,), server=server, fallback=0,
                atol=0, rtol=0)
            x = torch.randn(2, c, 3, 4, 5).contiguous(memory_format=torch.channels_last_3d)
            check_backward(lambda x: F.interpolate(x, scale_factor=2, mode=mode), x,
                           server=server)


def test_upsample_bilinear2d_half_pixel_index_is_atens_multiply_add(server):
    # float64, half-pixel source index 3 * (o + 0.5) / 7 - 0.5: rounded once
    # or twice it differs at some o. Torch 2's kernel rounds it once (its
    # host code is contracted into a multiply-add; torch 1.13's was not,
    # in double for every dtype, and the rule declined such axes because
    # gcc might contract generated code either way); generated code
    # computes it with an explicit fma: native, eager's weights
    x = torch.zeros(3, 2, 1, 3, dtype=torch.float64)
    for j in range(3):
        x[j, :, 0, j] = 1  # one-hot: every output is one of ATen's weights
    check(lambda x: F.interpolate(x, size=(1, 7), mode="bilinear"), (x,), server=server,
          fallback=0, atol=0, rtol=0)
    check(lambda x: F.interpolate(x, size=(7, 9), mode="bilinear"),
          (torch.randn(1, 2, 3, 4, dtype=torch.float64),), server=server, fallback=0,
          atol=1e-14, rtol=1e-14)


def test_upsample_half_pixel_index_without_fma_only_where_roundings_agree(server, monkeypatch):
    # a target without FMA (here capped by COMPILED_TARGET) cannot tell
    # whether eager runs ATen's contracted kernels: an axis whose source
    # index rounds differently once and twice (3 -> 7 in float64) stays the
    # ATen call; one where they agree (4 -> 8) is native, eager's weights
    monkeypatch.setenv("COMPILED_TARGET", "x86-64-v2")
    for n_in, n_out, fallback in ((3, 7, 1), (4, 8, 0)):
        x = torch.zeros(n_in, 2, 1, n_in, dtype=torch.float64)
        for j in range(n_in):
            x[j, :, 0, j] = 1
        s = check(lambda x: F.interpolate(x, size=(1, n_out), mode="bilinear"), (x,),
                  server=server, fallback=fallback, atol=0, rtol=0)
        # the capped level, where code is built (a program of the ATen
        # call alone has none, and no target)
        assert s["target"] in (("x86-64", "x86-64-v2") if s["kernels"] else ("",)), s


AVG_POOLS = [(2, 2, 0, False, True, None), (3, 1, 1, False, True, None),
             (3, 2, 1, True, False, None), (3, 2, 1, False, True, None),
             ((3, 2), (2, 1), (1, 0), True, True, None), (2, 2, 1, True, False, 3),
             (5, 3, 2, True, False, None)]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "3d"])
def test_avg_pool2d_backward_is_native_and_eager_bit_for_bit(server, layout):
    # each input element sums the windows covering it in ATen's (oh, ow)
    # order: equal bits, whatever the kernel, stride, padding, ceil_mode,
    # count_include_pad and divisor
    torch.manual_seed(0)
    for k, s, p, ceil, incl, div in AVG_POOLS:
        x = torch.randn(3, 9, 11) if layout == "3d" else torch.randn(2, 3, 9, 11)
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        check_backward(lambda x: F.avg_pool2d(x, k, s, p, ceil, incl, div), x,
                       server=server)


ADAPTIVE = [((2, 3, 9, 11), (3, 4)), ((2, 3, 2, 2), (7, 7)), ((2, 3, 9, 11), (4, 3)),
            ((3, 9, 11), (9, 11)), ((2, 3, 5, 7), (2, 5)), ((2, 3, 13, 6), (12, 13))]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_adaptive_avg_pool2d_backward_is_native_and_eager_bit_for_bit(server, layout):
    # windows that overlap, windows larger than the input (2 -> 7), and
    # smaller: each input element sums its windows' g / kh / kw in ATen's
    # order
    torch.manual_seed(0)
    for shape, size in ADAPTIVE:
        x = torch.randn(*shape)
        if layout == "channels_last" and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        check_backward(lambda x: F.adaptive_avg_pool2d(x, size), x, server=server)


def test_as_strided_of_dense_values(server):
    def f(x):
        y = x * 2
        return (y.as_strided((3, 2), (1, 3)) + 1, y.as_strided((2, 2), (2, 1), 2) - 1,
                x.as_strided((3,), (2,), 1) * 3, y.t().contiguous().as_strided((6,), (1,)) + 0)
    check(f, (torch.randn(2, 3),), server=server, fallback=0)
    # reaching past the value's own elements: left to ATen
    s = check(lambda x: x[:1].as_strided((2, 3), (3, 1)) * 1, (torch.randn(2, 3),),
              server=server)
    assert s["fallback"] == 1, s


# ---- embedding, index_select, gather ----

def test_embedding_index_select_gather(server):
    g = torch.Generator().manual_seed(2)

    def f(w, x, i32, i64, gi):
        return (F.embedding(i64, w), F.embedding(i32, w) * 2,
                torch.index_select(x, 0, i32[0] % x.shape[0]),
                torch.index_select(x, 1, i64[1] % x.shape[1]),
                torch.index_select(x, -1, i64[0] % x.shape[-1]),
                torch.gather(x, 0, gi % x.shape[0]), torch.gather(x, 1, gi % x.shape[1]),
                torch.gather(x, -1, gi[:, :2] % x.shape[-1]))
    w = torch.randn(10, 6, generator=g)
    i64 = torch.randint(0, 10, (2, 3), generator=g)
    for name, x in layouts((5, 7)):
        gi = torch.randint(0, 35, (4, 3), generator=g)
        check(f, (w, x, i64.int(), i64, gi), server=server, fallback=0)
    wt = torch.randn(6, 10, generator=g).t()  # a transposed table
    check(f, (wt, torch.randn(5, 7, generator=g).exp(), i64.int(), i64,
              torch.randint(0, 35, (4, 3), generator=g)), server=server, fallback=0)
    for dtype in [torch.int64, torch.int32, torch.float64, torch.bool, torch.uint8]:
        x = next(layouts((4, 6), dtype=dtype))[1]
        check(lambda x, i: (torch.index_select(x, 1, i), torch.gather(x, 0, i.view(1, 3) % 4),
                            F.embedding(i % 4, x) if dtype.is_floating_point else x),
              (x, torch.tensor([5, 0, 3])), server=server, fallback=0)


def test_advanced_indexing_wraps_negative_indices(server):
    def f(x, i, j):
        return x[i], x[:, j], x[..., i], x[j.view(2, 2)] * 2, x.exp()[:, i.view(1, -1, 1)]
    i = torch.tensor([0, -1, 2, -3, 1])
    j = torch.tensor([-4, 3, 0, 1])
    for name, x in layouts((4, 5, 6)):
        check(f, (x, i, j), server=server, fallback=0)
    cf = compiled_fn(lambda x, i: x[i] + 1, (torch.randn(4, 3), i), server)
    with torch.no_grad(), pytest.raises(IndexError):
        cf(torch.randn(4, 3), torch.tensor([0, -5]))
    # a boolean mask (data-dependent shape): ATen
    s = check(lambda x, m: x[m], (torch.randn(3, 4), torch.tensor([True, False, True])),
              server=server)
    assert s["fallback_ops"] == ["aten::index.Tensor"], s


def test_advanced_indexing_with_several_index_tensors(server):
    # index tensors broadcast together; their result dims replace the
    # indexed dims when those are adjacent, else come first (x[:, i, :, j]);
    # each index is checked against its own dim and wraps when negative
    def f(x, b, i, j):
        return (x[b[:4], i], x[i, j, b[:4], j], x[:, i, :, j], x[:, i.view(4, 1), j[:3]],
                x[[-1, 0], :, [6, -7]], (x * 2)[i.view(2, 2), 1:3, j[:2]],
                x.transpose(0, 3)[j, i[:1]], x[b.view(5, 1, 1), i.view(1, 4, 1), j.view(1, 1, 4)])
    b = torch.arange(5)
    i, j = torch.tensor([0, 2, -1, 4]), torch.tensor([1, 5, 0, -6])
    for name, x in layouts((5, 6, 7, 8)):
        check(f, (x, b, i, j), server=server, fallback=0)
    # (example indices in range: torch 2's capture runs the function on
    # copies of them, and j[:2] holds 5, out of x's second dim; 1.13's
    # tracing never read index values)
    cf = compiled_fn(lambda x, i, j: x[i, j] + 1,
                     (torch.randn(4, 3), i[:2], torch.tensor([1, 0])), server)
    with torch.no_grad(), pytest.raises(IndexError):
        cf(torch.randn(4, 3), torch.tensor([0, 1]), torch.tensor([0, 3]))
    with torch.no_grad(), pytest.raises(IndexError):
        cf(torch.randn(4, 3), torch.tensor([-5, 1]), torch.tensor([0, 2]))


def test_gathers_of_computed_values_and_empty(server):
    def f(x, i, e):
        y = (x * 2).t()  # a view of a computed value
        return (torch.index_select(y, 0, i), torch.gather(y.exp(), 1, i.view(1, -1)),
                F.embedding(i, x + 1), torch.index_select(x, 0, e), F.embedding(e, x))
    x = torch.randn(4, 4)
    check(f, (x, torch.tensor([3, 0, 0, 1]), torch.zeros(0, dtype=torch.int64)),
          server=server, fallback=0)


def test_token_and_position_embedding_with_cross_entropy(server):
    torch.manual_seed(4)
    emb, pos = torch.nn.Embedding(50, 16), torch.nn.Embedding(12, 16)
    head = torch.nn.Linear(16, 50)

    def f(ids, tgt):
        h = emb(ids) + pos(torch.arange(ids.shape[1])) + pos(torch.arange(2, 12))
        logits = head(torch.layer_norm(h, (16,)))
        return F.cross_entropy(logits.view(-1, 50), tgt.view(-1)), logits.logsumexp(-1)
    ids, tgt = torch.randint(0, 50, (3, 10)), torch.randint(0, 50, (3, 10))
    s = check(f, (ids, tgt), server=server, fallback=0, atol=1e-5, rtol=1e-5)
    assert s["extern"] == 1, s  # the head's addmm


@pytest.mark.parametrize("bad", [4, -1, 100])
def test_index_out_of_range_raises_like_eager(server, bad):
    x = torch.randn(4, 3)
    fns = [lambda x, i: torch.index_select(x, 0, i) * 2,
           lambda x, i: F.embedding(i, x) + 1,
           lambda x, i: torch.gather(x, 0, i.view(-1, 1)) - 1]
    for fn in fns:
        good = torch.tensor([0, 3, 1])
        cf = compiled_fn(fn, (x, good), server)
        with torch.no_grad():
            torch.testing.assert_close(cf(x, good), fn(x, good))
            assert cf.summary()["fallback"] == 0, cf.summary()
            assert_raises_like_eager(cf, fn, (x, torch.tensor([0, bad, 1])))


# ---- cat, constant_pad_nd ----

def test_cat(server):
    def f(a, b, c, e, i):
        return (torch.cat([a, b, c], 1), torch.cat([a, e, b], 1), torch.cat([a, a], 0),
                torch.cat([a, torch.zeros(0)], 1), torch.cat([a[:, :2], i.float()], 1),
                torch.cat([i, i[:, :1]], 1), torch.cat([a.t(), b.t()], 0),
                torch.cat([a, b.double()], -1), torch.cat([e, e], 1))
    for name, a in layouts((3, 5)):
        b = next(layouts((3, 1), seed=4))[1]
        c = torch.randn(3, 4)
        e = torch.randn(3, 0)
        i = torch.randint(-5, 5, (3, 2))
        check(f, (a, b, c, e, i), server=server, fallback=0)
    # more inputs than one where() chain takes: grouped (17 = 16 + 1, 40)
    many = [torch.randn(2, k % 3 + 1, 3) for k in range(40)]
    check(lambda *xs: (torch.cat(xs[:17], 1), torch.cat(xs, 1), torch.cat(xs[:33], -2)),
          many, server=server, fallback=0)
    x = next(layouts((2, 3, 4, 5)))[1].contiguous(memory_format=torch.channels_last)
    check(lambda x: (torch.cat([x, x * 2], 1), torch.cat([x, x[:, :, :1]], 2)), (x,),
          server=server, fallback=0)


def test_stack(server):
    # at every dim (negative too), of every layout, of computed inputs, of
    # 0-d values, with type promotion, and of more inputs than one where()
    # chain takes (17 = 16 + 1, 40: stacked in groups, then concatenated)
    def f(a, b, i):
        return (torch.stack([a, b]), torch.stack([a, b * 2, a], 1), torch.stack([a, b], -1),
                torch.stack([a.t(), b.t()], 2), torch.stack([a[:, :2], i], 0),
                torch.stack([a.sum(), b.max()]), torch.stack([a]))
    for name, a in layouts((3, 5)):
        b = next(layouts((3, 5), seed=4))[1]
        i = torch.randint(-5, 5, (3, 2))
        check(f, (a, b, i), server=server, fallback=0)
    many = [torch.randn(2, 3) for _ in range(40)]
    check(lambda *xs: (torch.stack(xs[:17], 1), torch.stack(xs), torch.stack(xs[:33], -1)),
          many, server=server, fallback=0)
    x = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    check(lambda x: (torch.stack([x, x + 1], 1), torch.stack([x, x], 4)), (x,),
          server=server, fallback=0)
    check(lambda x: torch.stack([x, x], 1), (torch.randn(0, 3),), server=server, fallback=0)


EDGE_PADS = [((2, 3, 7), (2, 3)), ((2, 3, 7), (0, 6)), ((3, 7), (1, 1)), ((2, 3, 3), (2, 2)),
             ((2, 3, 5, 6), (1, 2, 3, 4)), ((1, 2, 4, 5, 6), (1, 2, 3, 1, 2, 3)),
             ((2, 3, 2), (1, 1)), ((2, 3, 4, 5), (0, 0, 0, 0))]


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_reflection_and_replication_pads_and_their_backward(server, mode):
    # 1-3 padded dims, batched or not, pads up to the input's size less one
    # (the edges reflected twice), in every layout; the backward adds each
    # input element's copies in ATen's order: eager's bits
    cases = EDGE_PADS + ([((2, 3, 1), (2, 3)), ((2, 3, 4, 1), (3, 0, 1, 4))]
                         if mode == "replicate" else [])
    for shape, pad in cases:
        def f(x):
            return F.pad(x, pad, mode=mode)
        for name, x in layouts(shape):
            check(f, (x,), server=server, fallback=0, atol=0, rtol=0)
        check_backward(f, torch.randn(shape), server=server)
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    check_backward(lambda x: F.pad(x, (3, 1, 2, 3), mode=mode), x, server=server)


def test_constant_pad_nd(server):
    def f(x):
        return (F.pad(x, (1, 2)), F.pad(x, (1, 1, 2, 0), value=1.5), F.pad(x, (-1, 2, 0, -1)),
                F.pad(x, (0, 0, 0, 0, 1, 1)), F.pad(x, (3, -2), value=-7.0))
    for shape in [(2, 4, 5), (2, 2, 2), (0, 2, 3), (3, 6, 7)]:
        for name, x in layouts(shape):
            check(f, (x,), server=server, fallback=0)
    for dtype in [torch.int64, torch.uint8, torch.bool]:
        x = next(layouts((2, 3, 4), dtype=dtype))[1]
        check(lambda x: (F.pad(x, (1, 1), value=1), F.pad(x, (2, -1, 1, 0))), (x,),
              server=server, fallback=0)


# ---- writes through views: select_scatter, slice_scatter, diagonal_scatter ----

def view_writes(x, v):
    # what functionalization makes of in-place writes through views of a
    # copy: select_scatter, slice_scatter and diagonal_scatter of the base
    y = x.clone()
    y[:, 0] = v[:, 3]
    y[1:4:2] = v[1:3]
    y[-1, 2:] *= 2
    y.diagonal().copy_(v[0, :5])
    y[..., -1] += 1
    return y


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32],
                         ids=lambda d: str(d).split(".")[1])
def test_writes_through_views_of_a_copy_on_every_layout(server, dtype):
    for name, x in layouts((5, 7), dtype=dtype):
        v = next(layouts((5, 7), dtype=dtype, seed=3))[1]
        check(view_writes, (x, v), server=server, fallback=0)


def test_writes_through_views_of_an_input(server):
    # the program writes its input back (copy_): the scatter is native, and
    # the input afterwards matches eager's
    def f(x, v):
        x[:, 1] = v
        x[2:, ::3] = 0.5
        x.diagonal(1, 0, 1).mul_(3)
        return x.sum(0)
    for name, x in layouts((4, 6)):
        if name == "expanded":
            continue  # eager refuses to write into overlapping memory
        check(f, (x, torch.randn(4)), server=server, fallback=0)


def test_scatter_operators_called_directly(server):
    def f(a, s1, s2, s3, d):
        return (torch.select_scatter(a, s1, 0, -1), torch.select_scatter(a, s2, 1, 3),
                torch.slice_scatter(a, a[:, 1:5:3] * 2, 1, 1, 5, 3),
                # (torch 1.13's Python binding needs the step: without it
                # every slice has one element)
                torch.slice_scatter(a, a * 3, 0, None, None, 1),  # all of dim 0
                torch.slice_scatter(a, a[:-2], 0, -9, -2, 1),  # negative, clamped
                torch.slice_scatter(a, a[:, 4:4], 1, 4, 4, 1),  # empty: a itself
                torch.slice_scatter(a, s3, 1, 2, 100, 1),  # end past the dim
                torch.diagonal_scatter(a, d, 0), torch.diagonal_scatter(a, d[:2], 4),
                torch.diagonal_scatter(a, d[:3], -3), torch.diagonal_scatter(a, d[:0], 9),
                torch.diagonal_scatter(a.t(), d[:5], -1, 1, 0))
    a = torch.randn(6, 6)
    d = torch.randn(6)
    check(f, (a, torch.randn(6), torch.randn(6), torch.randn(6, 4), d), server=server,
          fallback=0)
    # as_strided_scatter through dense views of the output's memory: the
    # whole of a flat buffer (autograd's as_strided backward), a block at
    # an offset, a transposed block, a view with a size-1 dim
    f = torch.randn(24)
    check(lambda f, s: (torch.as_strided_scatter(f, s, (2, 12), (12, 1), 0),
                        torch.as_strided_scatter(f, s[:, :5] * 2, (2, 5), (5, 1), 7),
                        torch.as_strided_scatter(f, s[:, :6], (2, 6), (1, 2), 3),
                        torch.as_strided_scatter(f.view(4, 6), s[:1, :6].t(), (6, 1), (1, 9), 2),
                        torch.as_strided_scatter(f.view(6, 4).t(), s, (2, 12), (12, 1), 0)),
          (f, torch.randn(2, 12)), server=server, fallback=0)
    b = torch.randn(2, 3, 4, 5)
    check(lambda b, s: (torch.diagonal_scatter(b, s, 1, 1, 3),
                        torch.diagonal_scatter(b, s[..., :3] * 0, -1, -1, 1)),
          (b, torch.randn(2, 4, 3)), server=server, fallback=0)


# ---- logsumexp, losses ----

def test_logsumexp(server):
    def f(x):
        return (torch.logsumexp(x, 1), torch.logsumexp(x, (0, 2), keepdim=True),
                torch.logsumexp(x, -1), torch.logsumexp(x * 100, 0))
    for name, x in layouts((3, 5, 4)):
        check(f, (x,), server=server, fallback=0)
    x = torch.randn(3, 5, 4)
    x[0, 0, :] = float("inf")
    x[1, :, :] = float("-inf")
    x[2, 1, 1] = float("nan")
    check(f, (x,), server=server, fallback=0)
    check(lambda i: torch.logsumexp(i.double(), 0), (torch.randint(0, 5, (6,)),),
          server=server, fallback=0)


def test_nll_and_mse_loss(server):
    g = torch.Generator().manual_seed(5)

    def f(x, t, w, y):
        lp = F.log_softmax(x, 1)
        return (F.nll_loss(lp, t), F.nll_loss(lp, t, reduction="sum"),
                F.nll_loss(lp, t, reduction="none"), F.nll_loss(lp, t, weight=w),
                F.nll_loss(lp, t, weight=w, ignore_index=2, reduction="none"),
                F.nll_loss(lp, t, ignore_index=1), F.nll_loss(lp[0], t[0]),
                F.mse_loss(x, y), F.mse_loss(x, y, reduction="sum"),
                F.mse_loss(x, y, reduction="none"))
    for name, x in layouts((6, 5)):
        t = torch.randint(0, 5, (6,), generator=g)
        t[3] = 1
        check(f, (x, t, torch.rand(5, generator=g), torch.randn(6, 5, generator=g)),
              server=server, fallback=0, atol=1e-5, rtol=1e-5)
    # every row ignored: the mean is NaN, as eager
    x = torch.randn(3, 4)
    check(lambda x, t: (F.nll_loss(x, t, ignore_index=2), F.nll_loss(x, t, reduction="sum")),
          (x, torch.tensor([2, 2, 2])), server=server, fallback=0)
    # a target out of range raises
    t = torch.tensor([0, 1, 2])
    cf = compiled_fn(lambda x, t: F.nll_loss(x, t), (x, t), server)
    with torch.no_grad():
        torch.testing.assert_close(cf(x, t), F.nll_loss(x, t))
        with pytest.raises(IndexError):
            cf(x, torch.tensor([0, 7, 1]))


# ---- whole networks ----

@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_torchvision_eval_runs_without_fallback(server, name):
    torch.manual_seed(0)
    m = getattr(visionmodels, name)().eval()
    x = torch.randn(1, 3, 64, 64)
    s = check(m, (x,), server=server, fallback=0, atol=1e-4, rtol=1e-4)
    # convolutions (and the classifier's addmm) stay extern calls
    assert s["extern"] >= 20, s


def test_empty_arena_views(server):
    # an ATen call reading a zero-size arena buffer of an empty arena
    x = torch.randn(0, 3, 3)
    check(lambda x: F.pad(x, (1, 2), "circular"), (x,), server=server)


def test_cross_entropy_computes_log_softmax_only_at_the_targets(server):
    """nll_loss of a log_softmax used nowhere else gathers from the
    log_softmax's loop: the row max and sum are realized (one number per
    row), the [N, C] log-probabilities never are."""
    g = torch.Generator().manual_seed(7)

    def f(x, t, w):
        return (F.cross_entropy(x, t), F.cross_entropy(x, t, reduction="sum"),
                F.cross_entropy(x, t, weight=w, ignore_index=2, reduction="none"))
    for name, x in layouts((64, 300)):
        t = torch.randint(0, 300, (64,), generator=g)
        t[5] = 2
        check(f, (x, t, torch.rand(300, generator=g)), server=server, fallback=0,
              atol=1e-5, rtol=1e-5)
    x = torch.randn(64, 300, generator=g)
    t = torch.randint(0, 300, (64,), generator=g)
    cf = compiled_fn(lambda x, t: F.cross_entropy(x, t), (x, t), server)
    with torch.no_grad():
        torch.testing.assert_close(cf(x, t), F.cross_entropy(x, t))
        assert cf.summary()["arena_bytes"] < x.numel() * 4, cf.summary()
        bad = t.clone()
        bad[9] = 300
        with pytest.raises(IndexError):
            cf(x, bad)
        bad[9] = -1
        with pytest.raises(IndexError):
            cf(x, bad)
    # a 1-D input and a scalar target
    check(lambda x, t: F.cross_entropy(x, t), (torch.randn(7), torch.tensor(3)),
          server=server, fallback=0)


def test_gathers_from_computed_tensors(server):
    """gather, index_select and embedding of a computed tensor compute only
    the picked elements when there are no more of them than the tensor has
    (otherwise the tensor is realized first); indices are checked either
    way."""
    g = torch.Generator().manual_seed(8)

    def f(x, i, j, k, m):
        return (torch.gather(torch.log_softmax(x, 1), 1, i),
                torch.index_select(torch.exp(x) * 2 + 1, 0, j),
                torch.index_select(x.t() - 1, 1, j),
                F.embedding(k, torch.tanh(x)),
                torch.gather(x * 3, 0, m))  # more picked than x has: realized
    x = torch.randn(8, 30, generator=g)
    i = torch.randint(0, 30, (8, 4), generator=g)
    j = torch.tensor([7, 0, 3])
    k = torch.randint(0, 8, (2, 3), generator=g)
    m = torch.randint(0, 8, (20, 30), generator=g)
    check(f, (x, i, j, k, m), server=server, fallback=0)
    cf = compiled_fn(f, (x, i, j, k, m), server)
    with torch.no_grad():
        for bad in ((x, i.clone().fill_(30), j, k, m), (x, i, torch.tensor([8]), k, m),
                    (x, i, j, k.clone().fill_(-1), m), (x, i, j, k, m.clone().fill_(8))):
            with pytest.raises(IndexError):
                cf(*bad)
