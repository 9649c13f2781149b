"""Channels-last intermediates in convolutional programs (compiler/lower/
layout.c: L__chosen_layout; calls.c: L_extern_conv; compiler/codegen/split.c:
cg__split_inner). Numerics against eager; layouts read off the program the
runtime built."""

import re

import torch

import compiled
from native_util import check

torch.manual_seed(0)


def program(fn, args, server):
    with torch.no_grad():
        cf = compiled.compile(fn, args, server=server)
        cf(*args)
    return cf.programs[-1]


def conv_result_strides(prog):
    """The strides the program expects of each convolution's result (the
    restride guard after each ATen convolution call)."""
    return [tuple(int(x) for x in m.group(1).split(", ")) for m in re.finditer(
        r"# aten::convolution\n\s+if v\d+\.stride\(\) != \(([\d, ]+)\)", prog.source)]


def nhwc(n, c, h, w):
    return (h * w * c, 1, w * c, c)


class Block(torch.nn.Module):
    """A ResNet-style block: stem conv, batch norm, relu, max pool, a
    residual pair of convs, a depthwise conv, global pool, linear."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(16)
        self.a = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.b = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(self.bn(self.stem(x)).relu(), 3, 2, 1)
        y = (self.b(self.a(y).relu()) + y).relu()
        y = torch.nn.functional.silu(self.dw(y))
        return self.fc(y.mean((2, 3)))


def test_convolutions_run_channels_last_and_agree_with_eager(server):
    m = Block().eval()
    for p in m.bn.parameters():
        torch.nn.init.uniform_(p, 0.5, 1.5)
    x = torch.randn(2, 3, 33, 31)
    check(m, (x,), server=server, fallback=0, atol=1e-5, rtol=1e-4)
    strides = conv_result_strides(program(m, (x,), server))
    # every convolution: stem (16 x 17 x 16), a, b, dw (16 x 9 x 8)
    assert strides == [nhwc(2, 16, 17, 16)] + [nhwc(2, 16, 9, 8)] * 3, strides


def test_a_convolution_whose_weight_outweighs_its_activations_keeps_eager_layout(server):
    """Channels-last costs a copy of a 3x3 weight (ATen makes it on every
    call) and saves two reorders of the activations: the late layers of a
    wide network at batch 1 (weights of megabytes, activations of
    kilobytes) keep eager's layout, the early ones go channels-last and get
    their weight channels-last from the program, so ATen copies nothing."""
    small = torch.nn.Conv2d(8, 64, 3, padding=1).eval()  # 18 KB weight, 72 KB in + out
    big = torch.nn.Conv2d(64, 64, 3, padding=1).eval()   # 147 KB weight, 8 KB in + out

    def f(x):
        y = torch.nn.functional.max_pool2d(small(x).relu(), 4)
        return big(y).relu().sum((2, 3))
    x = torch.randn(1, 8, 16, 16)
    check(f, (x,), server=server, fallback=0, atol=1e-5, rtol=1e-4)
    prog = program(f, (x,), server)
    assert conv_result_strides(prog) == [nhwc(1, 64, 16, 16), (1024, 16, 4, 1)]
    with torch.no_grad():
        cf = compiled.compile(f, (x,), server=server)
        cf(x)
        with torch.profiler.profile() as p:
            cf(x)
    copies = [e.key for e in p.key_averages() if e.key in ("aten::contiguous", "aten::clone")]
    assert copies == [], copies


def test_outputs_keep_eager_layout_and_aliasing(server):
    """Program outputs, and what they view, keep eager's layout: a
    convolution returned and a slice of it share storage as in eager."""
    conv = torch.nn.Conv2d(8, 16, 3, padding=1).eval()
    conv2 = torch.nn.Conv2d(16, 16, 3, padding=1).eval()

    def f(x):
        y = conv(x).relu()
        z = conv2(y)
        return z, y, z[:, :4], z.sum((2, 3))
    x = torch.randn(2, 8, 10, 10)
    check(f, (x,), server=server, fallback=0, atol=1e-5, rtol=1e-4)  # strides too
    with torch.no_grad():
        cf = compiled.compile(f, (x,), server=server)
        z, y, part, _ = cf(x)
    assert part.data_ptr() == z.data_ptr() and part._base is not None
    assert z.is_contiguous() and y.is_contiguous()
    # the first convolution's result is an intermediate (relu's output is
    # the output): channels-last; the second is an output, and what a
    # third output views: eager's layout
    assert conv_result_strides(cf.programs[-1]) == [nhwc(2, 16, 10, 10), (1600, 100, 10, 1)]


def test_a_cat_along_channels_is_split_into_ranges(server):
    """densenet's cat along the channels of channels-last tensors is a cat
    along the kernel's innermost loop, split into one loop per input."""
    convs = [torch.nn.Conv2d(c, 8, 1).eval() for c in (8, 16, 24)]
    bns = [torch.nn.BatchNorm2d(c).eval() for c in (8, 16, 24, 32)]

    def dense(x):
        feats = [x]
        for conv, bn in zip(convs, bns):
            feats.append(conv(bn(torch.cat(feats, 1)).relu()))
        return bns[3](torch.cat(feats, 1)).relu().mean((2, 3))
    x = torch.randn(2, 8, 12, 12)
    check(dense, (x,), server=server, fallback=0, atol=1e-5, rtol=1e-4)
    c = program(dense, (x,), server).c_source
    # the last cat: channels [0, 8), [8, 16), [16, 24), [24, 32)
    for lo, hi in [(0, 8), (8, 16), (16, 24), (24, 32)]:
        assert re.search(rf"for \(int64_t (x\d+) = {lo}; \1 < {hi}; \1\+\+\)", c), (lo, hi)


def test_float64_and_training_programs_keep_eager_layout(server):
    conv = torch.nn.Conv2d(4, 8, 3).double().eval()
    x = torch.randn(2, 4, 9, 9, dtype=torch.float64)
    check(lambda x: conv(x).relu(), (x,), server=server, fallback=0)
    assert conv_result_strides(program(lambda x: conv(x).relu(), (x,), server)) == \
        [(392, 49, 7, 1)]
    # a training step's forward (not measured channels-last yet)
    m = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3), torch.nn.ReLU(),
                            torch.nn.Conv2d(8, 8, 3)).train()
    x = torch.randn(2, 4, 9, 9)
    cf = compiled.compile(m, (x,), server=server)
    cf(x).sum().backward()
    assert cf.summary()["backward"]["kernels"] > 0
    strides = [s for p in cf.programs for s in conv_result_strides(p)]
    assert strides == [(392, 49, 7, 1)], strides  # (the second is the output)


def test_channels_last_meets_every_kind_of_consumer(server):
    """Convolutions on a batch of one with stride and dilation, on a strided
    view of an input, on an input that is already channels-last; their
    results flattened, permuted, fed to fallback calls (pixel_shuffle,
    unfold) and to a matrix product, written in place: all as eager."""
    c1 = torch.nn.Conv2d(4, 8, 3, padding=1).eval()
    c2 = torch.nn.Conv2d(8, 16, 3, stride=3, dilation=2).eval()
    c3 = torch.nn.Conv2d(8, 8, 1).eval()
    x = torch.randn(2, 4, 9, 7)
    cases = [
        (lambda x: c2(c1(x).relu()).sigmoid(), torch.randn(1, 4, 17, 19)),
        (lambda x: c3(c1(x[:, :, ::2, 1:]).relu()), torch.randn(2, 4, 20, 21)),
        (lambda x: c3(c1(x).relu()), x.to(memory_format=torch.channels_last)),
        (lambda x: c3(c1(x).relu()).flatten(1) * 2, x),
        (lambda x: c1(x).permute(0, 2, 3, 1).relu(), x),
        (lambda x: torch.nn.functional.pixel_shuffle(c1(x).relu(), 2).sum(), x),
        (lambda x: torch.nn.functional.unfold(c1(x).relu(), 2) + 1, x),
        (lambda x: c3(c1(x).relu()).reshape(2, -1) @ torch.ones(8 * 63, 3), x),
        (lambda x: c3(c1(x).relu_()).add_(1), x),
    ]
    for fn, arg in cases:
        check(fn, (arg,), server=server, atol=1e-5, rtol=1e-4)
