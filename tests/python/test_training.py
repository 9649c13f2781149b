"""Training through compiled.compile: a compiled forward and a compiled
backward (compiled/training.py, docs/training.md), checked against eager
PyTorch from identical initial states.

Tolerances: losses and gradients are compared with
``assert_close(rtol=1e-4, atol=1e-5 * scale)``, where scale is the largest
magnitude of the eager tensor (resnet18: rtol=1e-3): generated reductions
accumulate float32 in double and fuse differently from ATen's kernels, so
results agree to rounding, not bit for bit. Rounding can also put a ReLU's
input on the other side of 0 when it is within rounding of 0 (seen once in
resnet18 at batch 8, 224x224: one element of 200,000 at 6e-6), which
changes which gradient that element passes; the seeds and sizes here were
checked not to hit that, and the cases are sized so that float32 itself is
well conditioned (eager's gradients within 1e-5 of float64's). Random numbers (dropout) are
drawn by the same ATen operators in the same order as eager when compiled
with ``eager_random=True``, so with the same seed the masks are identical;
test_native_random.py trains with the generated generator's masks. Running statistics and step counters
must match to the same tolerance.
"""

import copy
import re

import pytest
import torch

import compiled
import daemon_util
import visionmodels

F = torch.nn.functional


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = daemon_util.Daemon(tmp_path_factory.mktemp("daemon")).start()
    yield d
    d.stop()


def _close(actual, expected, rtol, what):
    scale = expected.detach().abs().max().item() if expected.numel() else 1.0
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=1e-5 * max(scale, 1.0),
                               msg=lambda m: f"{what}: {m}")


def _train_side_by_side(model, inputs, loss_fn, daemon, steps=3, rtol=1e-4, float64=False):
    """``steps`` SGD steps on ``model`` compiled and on an identical copy run
    eagerly, with the same seed per step; compares losses, every
    parameter's gradient, the parameters and the buffers after each step.
    Returns the compiled function.

    ``float64``: a float64 copy trains too, and each gradient is judged
    against it: the compiled one within ``rtol`` of the float64 gradient's
    largest magnitude or within 4 times eager float32's own error, whichever
    is larger. For models where eager float32 itself can land a rounding
    away from a max pool's or a ReLU's other side (resnet18: its stem's
    gradients 2e-3 off float64's at the second step with AVX2
    convolutions, where the compiled ones were 2e-5 off)."""
    twin = copy.deepcopy(model)
    ref = copy.deepcopy(model).double() if float64 else None
    cf = compiled.compile(model, inputs, server=daemon.address, eager_random=True)
    assert "backward" in cf.summary()  # compiled, not run yet: the training programs
    opt_c = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt_e = torch.optim.SGD(twin.parameters(), lr=0.05, momentum=0.9)
    sides = [(cf, opt_c, inputs), (twin, opt_e, inputs)]
    if ref is not None:
        sides.append((ref, torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9),
                      tuple(t.double() if t.is_floating_point() else t for t in inputs)))
    for step in range(steps):
        losses = []
        for fn, opt, args in sides:
            opt.zero_grad(set_to_none=True)
            torch.manual_seed(100 + step)
            loss = loss_fn(fn(*args))
            loss.backward()
            losses.append(loss.detach())
        _close(losses[0], losses[1], rtol, f"step {step}: loss")
        for (name, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
            assert (p.grad is None) == (q.grad is None), f"step {step}: {name}.grad"
            if q.grad is None:
                continue
            if ref is None:
                _close(p.grad, q.grad, rtol, f"step {step}: {name}.grad")
                continue
            r = ref.get_parameter(name).grad
            err = (p.grad.double() - r).abs().max().item()
            eager_err = (q.grad.double() - r).abs().max().item()
            assert err <= max(rtol * r.abs().max().item(), 4 * eager_err), \
                f"step {step}: {name}.grad {err:.2e} from float64's, eager float32's {eager_err:.2e}"
        for _, opt, _ in sides:
            opt.step()
        for (name, b), (_, c) in zip(model.named_buffers(), twin.named_buffers()):
            _close(b.double(), c.double(), rtol, f"step {step}: buffer {name}")
    for (name, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
        if ref is None:
            _close(p.detach(), q.detach(), rtol * 10, f"parameter {name} after {steps} steps")
            continue
        r = ref.get_parameter(name).detach()
        err = (p.detach().double() - r).abs().max().item()
        eager_err = (q.detach().double() - r).abs().max().item()
        assert err <= max(rtol * 10 * r.abs().max().item(), 4 * eager_err), \
            f"parameter {name} after {steps} steps: {err:.2e} from float64's, eager's {eager_err:.2e}"
    return cf


def _assert_native_both_ways(cf):
    s = cf.summary()
    assert s["runs"] == "native" and s["kernels"] > 0, s
    b = s["backward"]
    assert b["runs"] == "native" and b["kernels"] > 0, b
    assert cf.compiles == 2  # one forward and one backward program


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2)
        self.bn2 = torch.nn.BatchNorm2d(16)
        self.drop = torch.nn.Dropout(0.3)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.drop(x.mean((2, 3)))
        return self.fc(x)


def test_mlp_trains_like_eager(daemon):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(64, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 5)).train()
    x = torch.randn(32, 20)
    target = torch.randint(0, 5, (32,))
    cf = _train_side_by_side(model, (x,), lambda y: F.cross_entropy(y, target), daemon)
    _assert_native_both_ways(cf)


def test_cnn_with_batch_norm_and_dropout_trains_like_eager(daemon):
    torch.manual_seed(0)
    model = SmallCNN().train()
    x = torch.randn(4, 3, 12, 12)
    target = torch.randint(0, 10, (4,))
    cf = _train_side_by_side(model, (x,), lambda y: F.cross_entropy(y, target), daemon)
    _assert_native_both_ways(cf)
    assert model.bn1.num_batches_tracked.item() == 3
    b = cf.summary()["backward"]
    assert "aten::native_batch_norm_backward" not in b["fallback_ops"]


def test_batch_norm_backward_reads_a_channels_values_before_its_inner_loop(daemon):
    """The backward of conv + batch norm + relu (threshold_backward fused
    into native_batch_norm_backward): the channel's mean, invstd, weight and
    sums are read into temporaries before the loop over its elements, not
    in it (docs/codegen.md, "Loads the inner loop does not vary": gcc left
    that loop scalar), and the gradients are eager's."""
    torch.manual_seed(0)
    # no convolution bias: batch norm cancels its gradient to rounding noise
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(8), torch.nn.ReLU()).train()
    x = torch.randn(4, 3, 16, 16)
    proj = torch.randn(4, 8, 16, 16)
    cf = _train_side_by_side(model, (x,), lambda y: (y * proj).sum(), daemon, steps=2)
    bw = cf.programs[-1].c_source
    kernel = re.search(r"(?s)static int (k\d+_threshold_backward_native_batch_norm_back\w*)\(.*?\n}\n",
                       bw)
    assert kernel, "no fused threshold_backward + batch norm backward kernel"
    body = kernel.group(0)
    # a pointwise stage: per-channel loads (indexed by the channel only),
    # then the vectorized loop over the channel's elements
    hoisted = re.findall(r"const float t\d+ = b\d+\[x\d+\];\n(?:\s*const float t\d+ = "
                         r"b\d+\[x\d+\];\n)*\s*#pragma omp simd\n", body)
    assert hoisted, body
    loop = body[body.index(hoisted[-1]) + len(hoisted[-1]):]
    loop = loop[:loop.index("\n      }\n")] if "\n      }\n" in loop else loop
    assert not re.search(r"= b\d+\[x\d+\];", loop.split("\n}")[0]), loop


def test_transformer_encoder_layer_trains_like_eager(daemon):
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True).train()
    x = torch.randn(3, 7, 32)
    proj = torch.randn(3, 7, 32)  # y.pow(2).mean() of a layer norm's output is nearly constant
    cf = _train_side_by_side(model, (x,), lambda y: (y * proj).sum(), daemon)
    _assert_native_both_ways(cf)
    b = cf.summary()["backward"]
    assert "aten::native_layer_norm_backward" not in b["fallback_ops"]


def test_resnet18_trains_like_eager(daemon):
    torch.manual_seed(0)
    model = visionmodels.resnet18(num_classes=10).train()
    # Batch 4 at 64x64: the last batch norms see 16 values per channel. At
    # 2x32x32 (4 values), float32 gradients are ill-conditioned: eager's
    # own differ from float64's by 1%.
    x = torch.randn(4, 3, 64, 64)
    target = torch.randint(0, 10, (4,))
    cf = _train_side_by_side(model, (x,), lambda y: F.cross_entropy(y, target), daemon,
                             steps=2, rtol=1e-3, float64=True)
    _assert_native_both_ways(cf)
    (step,) = cf._entries.values()
    # intermediates of 4 KiB or more have their own memory (docs/codegen.md)
    assert "_empty_strided(" in step.bw_program.source


def test_inputs_requiring_grad_get_gradients(daemon):
    def f(x, w, scale):
        return torch.tanh(x @ w) * scale, (x * 2).sum()

    torch.manual_seed(0)
    x = torch.randn(5, 4, requires_grad=True)
    w = torch.randn(4, 3, requires_grad=True)
    cf = compiled.compile(f, (x, w, 0.5), server=daemon.address)
    y, s = cf(x, w, 0.5)
    (y.sum() + s).backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    y2, s2 = f(x2, w2, 0.5)
    (y2.sum() + s2).backward()
    torch.testing.assert_close(y, y2)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)
    assert cf.compiles == 2 and "backward" in cf.summary()


def test_layer_norm_backward_where_its_terms_cancel(daemon):
    # ATen's formula, dx = a dy + b x + c, has b x and c cancel when the
    # row's mean is large against its spread, and b = (db mean - ds) a^3 / N
    # cancel when every element equals the mean (a one-element row: eager
    # gives exactly 0 there). The generated backward takes the cancelling
    # terms together: one-element rows give 0, and rows far from 0 are no
    # farther from a float64 run than eager is (graphgen --grad, 270012).
    def f(x, y):
        return F.layer_norm(x, [1]), F.layer_norm(y, [64])

    torch.manual_seed(0)
    x = torch.randn(16, 1, requires_grad=True)
    y = (100 + torch.randn(32, 64)).requires_grad_()
    gx, gy = torch.randn(16, 1), torch.randn(32, 64)
    cf = compiled.compile(f, (x, y), server=daemon.address)
    ox, oy = cf(x, y)
    torch.autograd.backward((ox, oy), (gx, gy))
    assert "aten::native_layer_norm_backward" not in cf.summary()["backward"]["fallback_ops"]
    assert torch.equal(x.grad, torch.zeros_like(x))
    y64 = y.detach().double().requires_grad_()
    F.layer_norm(y64, [64]).backward(gy.double())
    y32 = y.detach().clone().requires_grad_()
    F.layer_norm(y32, [64]).backward(gy)
    ours = (y.grad.double() - y64.grad).abs().max()
    eager = (y32.grad.double() - y64.grad).abs().max()
    assert ours <= eager, (ours, eager)


def test_slice_and_select_backward_are_native(daemon):
    # ViT's class token (select), strided and negative slices, a chunk:
    # their gradients are zeros with the gradient where the view took its
    # elements, generated code rather than ATen calls
    def f(x):
        a = x[:, 0]
        b = x[:, -5:-1:3]
        c = x[..., 1::2]
        d = x.select(2, -1)
        e = x[:, 7:100]  # end past the dim: clamped
        return a.exp(), (b * 2).sum(), c.tanh(), d * d, e.sum(1)

    torch.manual_seed(0)
    x = torch.randn(2, 9, 6, requires_grad=True)
    cf = compiled.compile(f, (x,), server=daemon.address)
    outs = cf(x)
    grads = [torch.randn(o.shape) for o in outs]
    torch.autograd.backward(outs, grads)
    x2 = x.detach().clone().requires_grad_()
    torch.autograd.backward(f(x2), grads)
    torch.testing.assert_close(x.grad, x2.grad)
    fallback = cf.summary()["backward"]["fallback_ops"]
    assert "aten::slice_backward" not in fallback and "aten::select_backward" not in fallback


class GroupNormCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.gn1 = torch.nn.GroupNorm(4, 8)
        self.conv2 = torch.nn.Conv2d(8, 12, 3, stride=2)
        self.gn2 = torch.nn.GroupNorm(3, 12, affine=False)
        self.fc = torch.nn.Linear(12, 5)

    def forward(self, x):
        x = F.silu(self.gn1(self.conv1(x)))
        x = F.silu(self.gn2(self.conv2(x)))
        return self.fc(x.mean((2, 3)))


def test_group_norm_trains_like_eager(daemon):
    torch.manual_seed(0)
    model = GroupNormCNN()
    x = torch.randn(4, 3, 12, 12)
    target = torch.randint(0, 5, (4,))
    cf = _train_side_by_side(model, (x,), lambda y: F.cross_entropy(y, target), daemon)
    _assert_native_both_ways(cf)
    s = cf.summary()
    assert not any("group_norm" in op for op in s["fallback_ops"] + s["backward"]["fallback_ops"]), s


def test_in_place_activations_whose_backward_reads_their_input(daemon):
    # hardswish_ saves a clone of its input for its backward; the
    # partitioner recomputed that clone in the backward, after hardswish_
    # had overwritten the input, and every gradient below it was wrong
    # (mobilenet_v3's classifier and blocks)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(12, 24), torch.nn.Hardswish(inplace=True),
        torch.nn.Linear(24, 16), torch.nn.SiLU(inplace=True),
        torch.nn.Linear(16, 4), torch.nn.Hardsigmoid(inplace=True))
    x = torch.randn(5, 12)
    cf = _train_side_by_side(model, (x,), lambda y: y.square().sum(), daemon, rtol=1e-5)
    _assert_native_both_ways(cf)


def test_tensors_the_function_closes_over_are_constants_of_both_programs(daemon):
    # a closure's tensor and one the function makes (torch.tensor) are
    # attributes of the joint graph's forward and backward: each program
    # binds them as constants (they were taken for module buffers, and
    # compiling raised ArtifactError)
    torch.manual_seed(0)
    gi = torch.randint(0, 6, (4, 5))

    def f(w):
        return ((torch.gather(w, 0, gi) ** 2).sum()
                + (w * torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])).exp().sum())

    w = torch.randn(6, 5, requires_grad=True)
    cf = compiled.compile(f, (w,), server=daemon.address)
    loss = cf(w)
    loss.backward()
    w2 = w.detach().clone().requires_grad_()
    f(w2).backward()
    _close(loss, f(w2.detach()), 1e-6, "loss")
    _close(w.grad, w2.grad, 1e-6, "w.grad")
    _assert_native_both_ways(cf)


def test_outputs_without_grad_and_unused_parameters(daemon):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.unused = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.a(x)
            return y, y.argmax(1), y.detach() * 2

    torch.manual_seed(0)
    m = M().train()
    x = torch.randn(3, 4)
    cf = compiled.compile(m, (x,), server=daemon.address)
    y, idx, frozen = cf(x)
    assert y.requires_grad and not idx.requires_grad and not frozen.requires_grad
    y.sum().backward()
    assert m.unused.weight.grad is None
    ref = copy.deepcopy(m)
    ref.a.weight.grad = None
    ry, ridx, _ = ref(x)
    ry.sum().backward()
    torch.testing.assert_close(idx, ridx)
    torch.testing.assert_close(m.a.weight.grad, ref.a.weight.grad)
    assert cf.compiles == 2


def test_backward_without_a_loss_on_every_output(daemon):
    """Outputs the loss does not use get zero gradients, as in eager."""
    def f(x, w):
        h = x @ w
        return h.relu(), h.sigmoid()

    torch.manual_seed(0)
    x = torch.randn(4, 3)
    w = torch.randn(3, 3, requires_grad=True)
    cf = compiled.compile(f, (x, w), server=daemon.address)
    a, _ = cf(x, w)
    a.sum().backward()
    w2 = w.detach().clone().requires_grad_()
    f(x, w2)[0].sum().backward()
    torch.testing.assert_close(w.grad, w2.grad)


def test_both_programs_are_cached(daemon):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Tanh()).train()
    x = torch.randn(2, 6)
    before = daemon.stats()
    compiled.compile(model, (x,), server=daemon.address)
    mid = daemon.stats()
    again = compiled.compile(copy.deepcopy(model), (x,), server=daemon.address)
    after = daemon.stats()
    assert again.compiles == 2
    assert mid.compiles - before.compiles == 2  # a forward and a backward
    assert after.compiles == mid.compiles       # both served from the cache


def test_not_splittable_programs_train_through_aten(daemon):
    """Outputs aliasing an input that requires grad, and inputs requiring
    grad written in place, run as one ATen program autograd records: the
    gradients are still eager's."""
    def view_out(x, w):
        return x.view(-1), x * w

    def mutate(x, w):
        y = x * 1
        y.mul_(w)
        x.add_(1)
        return y

    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(3, requires_grad=True)
    cf = compiled.compile(view_out, (x, w), server=daemon.address)
    v, p = cf(x, w)
    (v.sum() + p.sum()).backward()
    assert cf.compiles == 1 and "backward" not in cf.summary()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    v2, p2 = view_out(x2, w2)
    (v2.sum() + p2.sum()).backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)

    base = torch.randn(3, requires_grad=True)
    xin = base * 1  # a non-leaf: may be written in place
    cf = compiled.compile(mutate, (xin, w), server=daemon.address)
    assert cf.compiles == 1 and "backward" not in cf.summary()


def test_double_backward_is_refused_clearly(daemon):
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(3)
    cf = compiled.compile(lambda x, w: (x * w).sin().sum(), (x, w), server=daemon.address)
    with pytest.raises(RuntimeError, match="cannot be differentiated again"):
        torch.autograd.grad(cf(x, w), w, create_graph=True)
    (g,) = torch.autograd.grad(cf(x, w), w)  # first order works
    torch.testing.assert_close(g, x * torch.cos(x * w.detach()))


def test_no_grad_calls_use_an_inference_program(daemon):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).train()
    x = torch.randn(2, 4)
    cf = compiled.compile(model, (x,), server=daemon.address)
    assert cf.compiles == 2
    with torch.no_grad():
        out = cf(x)
    assert cf.compiles == 3 and not out.requires_grad and "backward" not in cf.summary()


def test_grad_mode_programs_without_a_differentiable_output_are_native(daemon):
    """Graphgen --grad seed 1900573: a mask of an input that requires grad
    ran as one ATen training program. Nothing needs autograd: it is an
    inference program, native. Writing an input that requires grad still
    takes the ATen path (autograd records the write)."""
    torch.manual_seed(0)
    x = torch.randn(3, 17)[:, 1::2].requires_grad_()
    cf = compiled.compile(lambda x: (x > 0.3, x.argmax(1)), (x,), server=daemon.address)
    mask, idx = cf(x)
    assert torch.equal(mask, x > 0.3) and torch.equal(idx, x.argmax(1))
    assert cf.compiles == 1 and cf.summary()["runs"] == "native"

    def count_and_bump(y):
        y.add_(1)
        return (y > 0).sum()

    base = torch.randn(4, requires_grad=True)
    y = base * 1
    cf = compiled.compile(count_and_bump, (y,), server=daemon.address)
    assert cf.compiles == 1 and cf.summary()["runs"] == "aten"
    y2 = base * 1
    assert torch.equal(cf(y), count_and_bump(y2))
    y.sum().backward()
    torch.testing.assert_close(base.grad, torch.ones(4))


def test_saved_values_are_freed_during_the_backward(daemon):
    """The backward program takes its saved values over (a boxed call) and
    drops each after its last use, as eager's autograd frees saved tensors
    node by node: some are already gone when it allocates later outputs."""
    import weakref
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 5)).train()
    x = torch.randn(2, 3, 8, 8)
    cf = compiled.compile(model, (x,), server=daemon.address)
    (step,) = cf._entries.values()
    assert "_args.clear()" in step.bw_program.source and "    del a" in step.bw_program.source
    refs = []
    forward = step.fw

    def fw(*args):
        outs = forward(*args)
        refs[:] = [weakref.ref(t) for t in outs[step.num_outs:]]
        return outs
    step.fw = fw
    scope = step.bw.__globals__
    allocate = scope["_new_output"]
    freed_when_allocating = []

    def new_output(*args):
        freed_when_allocating.append(sum(r() is None for r in refs))
        return allocate(*args)
    scope["_new_output"] = new_output
    try:
        cf(x).sum().backward()
    finally:
        scope["_new_output"] = allocate
        step.fw = forward
    assert refs and max(freed_when_allocating) > 0, freed_when_allocating
    assert all(r() is None for r in refs)  # and all of them once it is done
    ref = copy.deepcopy(model)
    for p in ref.parameters():
        p.grad = None
    ref(x).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


class _Block(torch.nn.Module):
    """A residual block: conv, batch norm, ReLU of the sum with a shortcut
    (identity, or a strided 1x1 conv and batch norm when `down`)."""
    def __init__(self, c, down=False):
        super().__init__()
        out = 2 * c if down else c
        self.conv = torch.nn.Conv2d(c, out, 3, padding=1, stride=2 if down else 1, bias=False)
        self.bn = torch.nn.BatchNorm2d(out)
        self.short = torch.nn.Sequential(
            torch.nn.Conv2d(c, out, 1, stride=2, bias=False),
            torch.nn.BatchNorm2d(out)) if down else torch.nn.Identity()

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)) + self.short(x))


def test_a_shared_gradient_sum_is_computed_once(daemon):
    """The gradient reaching a downsampling block's input is the sum of two
    convolution_backward results; it flows through the previous block's
    ReLU backward, whose result two consumers read (that block's batch-norm
    backward and its shortcut). The backward computes it once, in a kernel
    of its own, so both addends can be freed there, instead of inlining it
    into both consumers, which kept both alive through the block's whole
    backward (resnet18: 1 MiB over eager's peak). Gradients as eager's."""
    import re
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                _Block(8), _Block(8, down=True)).train()
    x = torch.randn(2, 3, 16, 16)
    cf = _train_side_by_side(model, (x,), lambda y: y.square().mean(), daemon, steps=2)
    _assert_native_both_ways(cf)
    (step,) = cf._entries.values()
    kernels = re.findall(r"static int k\d+_(\w+)\(", step.bw_program.c_source)
    # (inlined, the sum and the ReLU backward were part of the batch-norm
    # backward's kernel: add_threshold_backward_native_batch_norm_back...)
    assert "add_threshold_backward" in kernels, kernels
    assert not [k for k in kernels if k.startswith("add_threshold_backward_native")], kernels


def test_retain_graph_and_two_graphs_alive(daemon):
    """backward(retain_graph=True) keeps the saved values for a second
    backward; two forward calls before one backward keep separate saved
    values; gradients accumulate as in eager."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 3)).train()
    ref = copy.deepcopy(model)
    x1, x2 = torch.randn(4, 6), torch.randn(4, 6)
    cf = compiled.compile(model, (x1,), server=daemon.address)
    for fn in (cf, ref):
        loss = fn(x1).pow(2).sum()
        loss.backward(retain_graph=True)
        loss.backward()
        a, b = fn(x1).sum(), fn(x2).pow(2).sum()
        (a + b).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def _linear_norm(seed=0):
    """A linear layer then a layer norm, 32x32: the layer norm's backward
    reads the incoming gradient first, in generated code; the weight's
    gradient (32x32, the incoming gradient's size) is made after it."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32, bias=False),
                                torch.nn.LayerNorm(32)).train()
    return model, torch.randn(32, 32), torch.randn(32, 32)


def _eager_grads(model, x, grad):
    twin = copy.deepcopy(model)
    twin(x).backward(grad)
    return [p.grad for p in twin.parameters()]


def test_a_gradient_only_autograd_holds_serves_the_backward(daemon):
    """The incoming gradient of the compiled output (made by the loss's
    backward, held by autograd alone) is memory eager frees after its first
    backward node; the backward program reuses it once it has read it: the
    weight's gradient is written into it (compiled/arena.py Donation)."""
    model, x, proj = _linear_norm()
    cf = compiled.compile(model, (x,), server=daemon.address)
    expected = _eager_grads(model, x, proj)
    for _ in range(2):
        for p in model.parameters():
            p.grad = None
        y = cf(x)
        seen = []
        y.register_hook(lambda g: seen.append(g.data_ptr()))  # keeps no reference
        (y * proj).sum().backward()
        weight = model[0].weight.grad
        assert weight.data_ptr() == seen[0], "the weight's gradient was not put in the " \
            "incoming gradient's memory"
        for p, e in zip(model.parameters(), expected):
            _close(p.grad, e, 1e-4, "gradient")


def test_a_gradient_someone_else_can_see_is_left_alone(daemon):
    """A gradient the caller passed in, one a hook kept, or one a hook on
    the backward node will read after it is not written: it keeps its
    values, and the gradients are right."""
    model, x, proj = _linear_norm(1)
    cf = compiled.compile(model, (x,), server=daemon.address)
    expected = _eager_grads(model, x, proj)

    def check(what):
        for p, e in zip(model.parameters(), expected):
            _close(p.grad, e, 1e-4, f"{what}: gradient")
            p.grad = None

    # the caller's own gradient tensor
    grad = proj.clone()
    cf(x).backward(grad)
    assert torch.equal(grad, proj), "the caller's gradient was overwritten"
    assert model[0].weight.grad.data_ptr() != grad.data_ptr()
    check("backward(grad)")
    # a tensor hook that keeps the gradient
    kept = []
    y = cf(x)
    y.register_hook(kept.append)
    (y * proj).sum().backward()
    assert torch.equal(kept[0], proj), "a gradient a hook kept was overwritten"
    check("kept by a hook")
    # a hook on the backward node, which sees the incoming gradient after it
    after = []
    y = cf(x)
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: after.append(
        grad_outputs[0].clone()))
    (y * proj).sum().backward()
    assert torch.equal(after[0], proj), "a node hook saw an overwritten gradient"
    check("node hook")


def test_donated_memory_is_carved_only_after_its_last_read():
    """compiled.arena.Donation on its own: only inputs named by the caller,
    only once dead; temporaries take 64-byte aligned pieces of any spare
    storage; outputs take pieces of a small storage, or the start of a
    large one at most a third larger than themselves."""
    from compiled.arena import Donation
    big = torch.zeros(300 << 10, dtype=torch.uint8)  # 300 KiB
    small = torch.zeros(1000)  # 4000 bytes
    d = Donation([0, 2])
    alloc = []

    def fresh(size, stride, dtype, nbytes):
        alloc.append(size)
        return torch.empty_strided(size, stride, dtype=dtype)

    d.dead((1, torch.zeros(1000)))  # not donated
    assert not d.spare
    d.dead((0, big), (2, small))
    t = d.temp((10,), (1,), torch.float32, 40)
    assert t.data_ptr() == big.data_ptr()
    t2 = d.temp((3, 4), (4, 1), torch.float64, 96)
    assert t2.data_ptr() == big.data_ptr() + 64 and t2.dtype == torch.float64
    # a 1 KiB output does not pin the 300 KiB storage, a 4000-byte one may
    o = d.output((256,), (1,), torch.float32, 1024, fresh)
    assert o.data_ptr() == small.data_ptr() and not alloc
    o2 = d.output((2048,), (1,), torch.float32, 8192, fresh)
    assert alloc == [(2048,)] and o2.data_ptr() not in (big.data_ptr(), small.data_ptr())
    d2 = Donation([0])
    d2.dead((0, torch.zeros(100 << 10, dtype=torch.uint8)))
    whole = d2.output((25 << 10,), (1,), torch.float32, 100 << 10, fresh)
    assert whole.data_ptr() == d2.spare[0][0].data_ptr()
    # what is left cannot hold it
    assert d2.output((1,), (1,), torch.float32, 4, fresh) is not None and len(alloc) == 2


def test_dropout_masks_are_saved_as_bools(daemon):
    """ATen's CPU dropout draws bernoulli_ into a float tensor and divides
    it by the keep probability; the backward reads that mask, 0 or 1 / p.
    The forward saves ``mask != 0`` (a byte an element, as eager's
    native_dropout) and the backward computes the mask again from it: the
    same bits, so the weights' gradients are eager's exactly (float64: the
    products are ATen's; a bias's gradient is a column sum, in another
    order than eager's)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                torch.nn.Linear(64, 5)).double().train()
    ref = copy.deepcopy(model)
    x = torch.randn(16, 20, dtype=torch.float64)
    cf = compiled.compile(model, (x,), server=daemon.address, eager_random=True)
    (step,) = cf._entries.values()
    saved = []
    forward = step.fw

    def fw(*args):
        outs = forward(*args)
        saved[:] = [(t.dtype, tuple(t.shape)) for t in outs[step.num_outs:]]
        return outs
    step.fw = fw
    try:
        torch.manual_seed(7)
        cf(x).square().sum().backward()
    finally:
        step.fw = forward
    assert (torch.bool, (16, 64)) in saved, saved
    assert (torch.float64, (16, 64)) in saved  # the relu's result, read by its backward
    assert sum(s == (torch.float64, (16, 64)) for s in saved) == 2, saved  # and linear2's input
    torch.manual_seed(7)
    ref(x).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if name.endswith("weight"):
            assert torch.equal(p.grad, q.grad), name
        else:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-13, atol=0)
