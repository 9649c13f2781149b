"""The shape-only trace (compiled/metatrace.py) against the real one.

A capture traces on shape-only tensors by default and must record the graph
a trace on real data records: the same canonical key (`compilectl graph
hash`, which ignores value names and node metadata), or refuse (Untrusted)
and leave the capture to the real trace. Checked here on every program of
test_semantics.py, on every float32 OpInfo operator's samples and on small
versions of the models `make bench-startup` measures; and the refusals are
checked one by one.
"""

import logging
import os
import subprocess
import sys

import pytest
import torch

import compiled
import difftest
import test_semantics
import visionmodels
from semantics_util import as_inputs

capture = sys.modules["compiled.capture"]
CTL = os.path.join(os.environ.get("COMPILED_BUILD", "build"), "bin", "compilectl")

# Operators whose two traces differ in a way that does not change what the
# graph computes, with the reason. Nothing else may differ.
KNOWN = {
    # fill_(True): the real trace's annotating dispatch mode turns a bool
    # Scalar into 1; the shape-only trace keeps True (which is what the
    # program passed).
    "fill": "a bool Scalar the real trace turns into an int",
}


def without_detach(message):
    """A copy of a GraphModule with every aten::detach node removed (its
    readers read its input). The two traces may record a different number
    of detaches: torch's Python bindings detach a fresh result whose Python
    object something else still references, and make_fx keeps references
    the shape-only trace does not. A detach is an alias that stops
    gradients; where it stops one, requires_grad in the values' metadata
    (part of the key) still tells."""
    m = type(message)()
    m.CopyFrom(message)
    rename = {}
    keep = []
    for node in m.graph.nodes:
        for arg in node.inputs:
            if arg.arg.WhichOneof("kind") == "as_tensor":
                name = arg.arg.as_tensor.name
                arg.arg.as_tensor.name = rename.get(name, name)
        if node.target == "aten::detach":
            rename[node.outputs[0].as_tensor.name] = node.inputs[0].arg.as_tensor.name
        else:
            keep.append(node)
    if not rename:
        return message
    nodes = [copy_of(n) for n in keep]
    values = [copy_of(v) for v in m.graph.tensor_values if v.name not in rename]
    m.graph.ClearField("nodes")
    m.graph.ClearField("tensor_values")
    for n in nodes:
        m.graph.nodes.add().CopyFrom(n)
    for v in values:
        m.graph.tensor_values.add().CopyFrom(v)
    for out in m.graph.outputs:
        if out.WhichOneof("kind") == "as_tensor":
            out.as_tensor.name = rename.get(out.as_tensor.name, out.as_tensor.name)
    return m


def copy_of(msg):
    c = type(msg)()
    c.CopyFrom(msg)
    return c


def keys(messages, tmp_path):
    """The canonical key of each GraphModule message, detaches aside (None
    for a graph the validator refuses; it names the graph on stderr)."""
    paths = []
    for i, m in enumerate(map(without_detach, messages)):
        p = tmp_path / f"g{i}.pb"
        p.write_bytes(m.SerializeToString(deterministic=True))
        paths.append(str(p))
    by_path = {}
    todo = paths
    while todo:  # compilectl stops at the first graph it refuses
        r = subprocess.run([CTL, "graph", "hash"] + todo, capture_output=True, text=True)
        assert r.returncode in (0, 1), r.stderr[-2000:]
        for line in r.stdout.splitlines():
            key, path = line.split()
            by_path[path] = key
        if r.returncode == 0:
            break
        refused = r.stderr.split(":", 1)[0]
        assert refused in todo, r.stderr[-2000:]
        todo = todo[todo.index(refused) + 1:]
    return [by_path.get(p) for p in paths]


def both(fn, args, no_grad=True):
    """(meta message or the reason it was refused, real message)."""
    ctx = torch.no_grad() if no_grad else torch.enable_grad()
    with ctx:
        real = capture.trace(fn, args, method="real").graph_module
        try:
            meta = capture.trace(fn, args, method="meta")
        except compiled.CaptureError as e:
            return str(e), real
    assert meta.method == "meta"
    return meta.graph_module, real


@pytest.mark.parametrize("case", test_semantics.CASES, ids=test_semantics.CASE_IDS)
def test_semantics_programs_trace_alike(case, tmp_path):
    if case.eager_raises:
        pytest.skip("eager raises")
    args = as_inputs((case.example_make or case.make)(0)).args
    try:
        meta, real = both(case.fn, args, no_grad=case.no_grad or not case.grad)
    except compiled.UnsupportedCapture:
        pytest.skip("not capturable")
    if isinstance(meta, str):
        assert "not possible" in meta
        return
    a, b = keys([meta, real], tmp_path)
    assert a is not None and a == b, f"{case.name}: the shape-only trace records another graph"


def small_vit():
    return visionmodels.VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                          num_heads=2, hidden_dim=32, mlp_dim=64)


MODELS = {
    "resnet18": lambda: (visionmodels.resnet18(), torch.randn(1, 3, 64, 64)),
    "mobilenet_v2": lambda: (visionmodels.mobilenet_v2(), torch.randn(1, 3, 64, 64)),
    "densenet_small": lambda: (visionmodels.DenseNet(growth_rate=8, block_config=(2, 2),
                                                     num_init_features=16),
                               torch.randn(2, 3, 32, 32)),
    "transformer_encoder": lambda: (torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2),
        torch.randn(2, 10, 32)),
    "vit_small": lambda: (small_vit(), torch.randn(2, 3, 32, 32)),
    "lstm": lambda: (torch.nn.LSTM(8, 16, batch_first=True), torch.randn(2, 5, 8)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_trace_alike_without_data(name, tmp_path):
    torch.manual_seed(0)
    model, x = MODELS[name]()
    model.eval()
    meta, real = both(model, (x,))
    if name == "lstm":
        # FakeTensor makes the workspace the CPU kernel leaves undefined
        assert isinstance(meta, str) and "mkldnn_rnn_layer" in meta, meta
        return
    assert not isinstance(meta, str), meta
    a, b = keys([meta, real], tmp_path)
    assert a is not None and a == b
    # Node metadata is recorded too: stack traces and module paths.
    nodes = list(meta.graph.nodes)
    assert all(n.metadata.stack_trace for n in nodes)
    if list(model.children()):
        assert any(n.metadata.module_path for n in nodes)


def test_opinfo_operators_trace_alike(tmp_path):
    """Every float32 OpInfo operator, up to 3 samples each: the two traces
    agree, or the shape-only one refuses."""
    ops = difftest.float32_ops(difftest.load_op_db())
    pairs, names = [], []
    refused = 0
    for op in ops:
        samples, _ = difftest.usable_samples(op, 3)
        for s in samples:
            try:
                meta, real = both(s.call, s.tensors)
            except Exception:
                continue  # the real trace fails: nothing to compare
            if isinstance(meta, str):
                refused += 1
                continue
            pairs += [meta, real]
            names.append(difftest.op_name(op))
    k = keys(pairs, tmp_path)
    differ = sorted({n for n, a, b in zip(names, k[0::2], k[1::2]) if a != b})
    assert sum(a is not None for a in k) > len(k) * 0.9
    assert set(differ) <= set(KNOWN), f"the traces differ for {set(differ) - set(KNOWN)}"
    assert len(names) > 1000 and refused < (len(names) + refused) / 3, (len(names), refused)


F = torch.nn.functional
A = torch.ops.aten
CL = torch.channels_last


def layouts_4d():
    x = torch.randn(2, 4, 6, 6)
    return {"contiguous": x, "channels_last": x.to(memory_format=CL),
            "transposed": x.transpose(2, 3), "sliced": torch.randn(2, 4, 6, 12)[..., ::2],
            "last_dim_outermost": torch.randn(6, 2, 4, 6).permute(1, 2, 3, 0)}


CHECKED_PROGRAMS = {
    "conv": lambda x, w: F.conv2d(x, w, padding=1),
    "conv_cl_weight": lambda x, w: F.conv2d(x, w.to(memory_format=CL), stride=2),
    "conv_groups": lambda x, w: F.conv2d(x, w[:, :1].contiguous(), groups=4),
    "conv_transpose": lambda x, w: F.conv_transpose2d(x, w),
    "conv1d": lambda x, w: F.conv1d(x.flatten(2), w[:, :, 0]),
    "batch_norm_eval": lambda x, w: F.batch_norm(x, torch.zeros(4), torch.ones(4), w[0, :, 0, 0],
                                                 w[1, :, 0, 0], training=False),
    "batch_norm_train": lambda x, w: F.batch_norm(x, torch.zeros(4), torch.ones(4),
                                                  training=True),
    "layer_norm": lambda x, w: F.layer_norm(x, (6,), w.flatten()[:6], w.flatten()[6:12]),
    "layer_norm_2d": lambda x, w: F.layer_norm(x, (6, 6)),
    "roll": lambda x, w: torch.roll(x, (1, -2), (1, 3)),
    "relu": lambda x, w: F.relu(x),
    "adaptive_avg_pool": lambda x, w: F.adaptive_avg_pool2d(x, (3, 2)),
    "adaptive_avg_pool_1": lambda x, w: F.adaptive_avg_pool2d(x, 1),
    # composites whose out= meta function lays results out contiguous
    # (abs of a transposed input was recorded contiguous; graphgen seed
    # 820062), and their in-place forms
    "abs": lambda x, w: torch.abs(x),
    "logical_not": lambda x, w: torch.logical_not(x),
    "logical_and": lambda x, w: torch.logical_and(x, x > 0),
    "logical_or": lambda x, w: torch.logical_or(x, w[0, 0, 0, :1]),
    "logical_xor": lambda x, w: torch.logical_xor(x > 0, x),
    "nan_to_num": lambda x, w: torch.nan_to_num(x, 0.5),
    "in_place": lambda x, w: (x * 1).abs_().nan_to_num_().logical_and_(x).logical_not_()
    .logical_or_(x).logical_xor_(x),
    # TensorIterator binary operators whose FakeTensor results come from
    # Python references, against a broadcast and a same-shape operand
    "binary_refs": lambda x, w: (
        torch.floor_divide(x, x[0, 0, 0, :1] + 2), torch.div(x, x[:1, :, :1, :1], rounding_mode="floor"),
        torch.copysign(x, x[0, 0, :1]), torch.xlogy(x.abs(), x * 1),
        torch.special.xlog1py(x, x[0, 0, 0, :1].abs()),
        A.hardsigmoid_backward(x * 1, x), A.hardswish_backward(x.exp(), x),
        A.logit_backward(x * 1, x.sigmoid(), 0.1)),
    # kernels that allocate contiguous results whatever the input's layout
    "contiguous_results": lambda x, w: (
        A.log_sigmoid_forward(x), A.mse_loss_backward(x * 1, x, x.exp(), 0),
        F.rrelu(x, training=False), A._log_softmax_backward_data(x * 1, x.log_softmax(1), 1, x.dtype),
        A.native_layer_norm_backward(x * 1, x, [6], x.mean(-1, keepdim=True),
                                     x.std(-1, keepdim=True), w.flatten()[:6], None,
                                     [True, True, False]),
        A.native_layer_norm_backward(x * 1, x, [2, 4, 6, 6], x.mean().view(1, 1, 1, 1),
                                     x.std().view(1, 1, 1, 1), x * 2, None, [True, True, False]),
        A.glu_backward(x[:, :2] * 1, x, 1)),
    # backward operators (training's backward graphs): the gradient has the
    # input's layout, as autograd passes it
    "batch_norm_backward": lambda x, w: torch.ops.aten.native_batch_norm_backward(
        x * 1, x, w[0, :, 0, 0], None, None, torch.zeros(4), torch.ones(4), True, 1e-5,
        [True, True, True]),
    "batch_norm_backward_no_input": lambda x, w: torch.ops.aten.native_batch_norm_backward(
        x * 1, x, None, torch.zeros(4), torch.ones(4), torch.zeros(4), torch.ones(4), True,
        1e-5, [False, True, True]),
    "conv_backward": lambda x, w: torch.ops.aten.convolution_backward(
        x * 1, x, w, [4], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True]),
    "conv_backward_weight_only": lambda x, w: torch.ops.aten.convolution_backward(
        x * 1, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False]),
}


@pytest.mark.parametrize("program", sorted(CHECKED_PROGRAMS))
@pytest.mark.parametrize("layout", sorted(layouts_4d()))
def test_checked_meta_functions_lay_results_out_as_cpu(program, layout, tmp_path):
    """The operators whose meta function is not the CPU kernel's own
    (metatrace._CHECKED) record the CPU kernel's result layouts on every
    layout the shape-only trace admits them for."""
    x = layouts_4d()[layout]
    w = torch.randn(4, 4, 3, 3)
    meta, real = both(CHECKED_PROGRAMS[program], (x, w))
    if isinstance(meta, str):
        # Refused only for a layout the operator is not checked on.
        assert layout != "contiguous", meta
        assert "checked operators and layouts only" in meta, meta
        return
    a, b = keys([meta, real], tmp_path)
    assert a is not None and a == b


def test_training_backward_graph_traces_alike(tmp_path):
    """The backward graph of a training signature (compiled.training) is
    captured without data: convolution_backward (a rule, no meta function
    in torch 1.13) and native_batch_norm_backward (its meta function,
    corrected for output_mask) record what the real trace records."""
    from compiled import training
    import torch.utils._pytree as pytree
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, stride=2),
                                torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 3 * 3, 5)).train()
    x = torch.randn(2, 3, 8, 8)
    params, buffers, paths = capture._module_state(model)
    state = [t for _, t, _ in params + buffers]
    _, spec = pytree.tree_flatten((x,))
    with torch.enable_grad():
        split = training.split(model, model, paths, len(state), spec, state + [x])
    fw_examples = [t.detach() for t in state] + [x]
    with torch.no_grad():
        outs = split.fw(*[t.clone() for t in fw_examples])
    bw_examples = (list(outs[split.num_outs:]) + [fw_examples[i] for i in split.saved_primals]
                   + [torch.zeros_like(o) for o, need in zip(outs[:split.num_outs],
                                                             split.needs_grad) if need])
    meta, real = both(split.bw, bw_examples)
    assert not isinstance(meta, str), meta
    a, b = keys([meta, real], tmp_path)
    assert a is not None and a == b


def refusal(fn, *args, grad=False):
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx, pytest.raises(compiled.CaptureError) as e:
        capture.trace(fn, args, method="meta")
    return str(e.value)


def test_what_the_shape_only_trace_refuses():
    x = torch.randn(4)
    assert "data-dependent output shape" in refusal(lambda t: t.nonzero(), x)
    assert "data-dependent output shape" in refusal(lambda t: t[t > 0], x)
    assert "reads tensor values" in refusal(lambda t: t * t.sum().item(), x)
    assert "reads tensor values" in refusal(lambda t: t if t.sum() > 0 else -t, x)
    assert "reads tensor data" in refusal(lambda t: t + t.data_ptr() % 2, x)
    assert "reads tensor data" in refusal(lambda t: t + float(t.numpy().sum()), x)
    assert "requires grad" in refusal(lambda t: t * 2, x.clone().requires_grad_(), grad=True)
    lstm = torch.nn.LSTM(4, 4, batch_first=True).eval()
    assert "disagree" in refusal(lambda t: lstm(t)[0], torch.randn(1, 2, 4))
    assert "checked operators and layouts only" in refusal(
        lambda t: torch.roll(t, 1, 1), torch.randn(3, 4).t())
    assert "sparse" in refusal(lambda t: t.to_sparse(), x)
    # A program that fails: the real trace raises what eager raises.
    assert "RuntimeError" in refusal(lambda t: t.view(3), x)


def test_a_refusal_falls_back_to_the_real_trace_and_says_so(caplog):
    x = torch.randn(4)
    with caplog.at_level(logging.DEBUG, logger="compiled"), torch.no_grad():
        c = capture.trace(lambda t: t.nonzero(), (x,))
    assert c.method == "real"
    assert "tracing on real data" in caplog.text and "nonzero" in caplog.text
    with torch.no_grad():
        assert capture.trace(lambda t: t * 2, (x,)).method == "meta"


def test_the_method_can_be_chosen(monkeypatch):
    x = torch.randn(4)
    monkeypatch.setenv("COMPILED_CAPTURE", "real")
    assert capture.trace(lambda t: t * 2, (x,)).method == "real"
    monkeypatch.setenv("COMPILED_CAPTURE", "fast")
    with pytest.raises(ValueError, match="auto, meta, real"):
        capture.trace(lambda t: t * 2, (x,))


def test_the_shape_only_trace_computes_nothing_and_draws_no_numbers():
    calls = []

    class Spy(torch.nn.Module):
        def forward(self, t):
            calls.append(type(t).__name__)
            return torch.nn.functional.dropout(t, 0.5, training=True) + torch.randn(4)

    x = torch.randn(4)
    state = torch.get_rng_state()
    with torch.no_grad():
        c = capture.trace(Spy(), (x,))
    assert c.method == "meta" and calls == ["ShapeTensor"]
    assert torch.equal(state, torch.get_rng_state())
    targets = [n.target for n in c.graph_module.graph.nodes]
    assert "aten::randn" in targets and any("bernoulli" in t or "dropout" in t for t in targets)


def test_under_a_dispatch_mode_of_the_callers_own(tmp_path):
    """With a mode already active the tracer goes on torch's mode stack
    instead of installing itself; the graph is the same."""
    from torch.utils._python_dispatch import TorchDispatchMode
    seen = []

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    def f(t):
        return torch.nn.functional.gelu(t * 2 + torch.tensor(1.0))

    x = torch.randn(3, 4)
    with torch.no_grad():
        alone = capture.trace(f, (x,), method="meta").graph_module
        with Passthrough():
            under = capture.trace(f, (x,), method="meta").graph_module
    assert seen  # the caller's mode saw the operators run on meta tensors
    a, b = keys([alone, under], tmp_path)
    assert a is not None and a == b


def test_a_fork_right_after_import_can_import_the_client():
    """compiled prefetches its client modules on a thread at import; a fork
    in the middle of that must not leave the child with an import lock
    nobody will release."""
    code = ("import os, sys, compiled\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    import compiled.frontend\n"
            "    os._exit(7)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "sys.exit(os.waitstatus_to_exitcode(status))\n")
    r = subprocess.run([sys.executable, "-c", code], timeout=120, capture_output=True,
                       env=dict(os.environ, COMPILED_PREFETCH="1"))
    assert r.returncode == 7, r.stderr[-2000:]


def test_import_prefetches_what_the_first_compile_imports():
    """The modules compile() imports on first use (the frontend and client,
    this tracer, grpc's channel) load on the prefetch thread, so the first
    compile() does not wait for them (unless $COMPILED_PREFETCH=0)."""
    code = ("import sys, threading, compiled\n"
            "for t in threading.enumerate():\n"
            "    if t.name == 'compiled-prefetch':\n"
            "        t.join()\n"
            "want = ['compiled.frontend', 'compiled.client', 'compiled.metatrace', "
            "'grpc._channel']\n"
            "print(' '.join(m for m in want if m not in sys.modules))\n")
    for setting, missing in [("1", ""), ("0", "compiled.frontend compiled.client "
                                              "compiled.metatrace grpc._channel")]:
        r = subprocess.run([sys.executable, "-c", code], timeout=120, capture_output=True,
                           text=True, env=dict(os.environ, COMPILED_PREFETCH=setting))
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.strip() == missing, (setting, r.stdout)


def test_fused_transformer_paths_trace_alike():
    """Under make_fx a TransformerEncoderLayer leaves its fused inference
    kernel (torch.overrides.has_torch_function is true there); the
    shape-only trace records the same general path, with and without a
    padding mask, and nn.MultiheadAttention's with and without weights."""
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2,
        enable_nested_tensor=False).eval()
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x = torch.randn(3, 10, 32)
    mask = torch.zeros(3, 10, dtype=torch.bool)
    mask[:, 7:] = True
    programs = [model, lambda x: model(x, src_key_padding_mask=mask),
                lambda x: mha(x, x, x, need_weights=False)[0],
                lambda x: mha(x, x, x, need_weights=True)]
    for fn in programs:
        meta, real = both(fn, (x,))
        assert not isinstance(meta, str), meta
        assert meta == real
        targets = {n.target for n in meta.graph.nodes}
        assert "aten::_transformer_encoder_layer_fwd" not in targets


def test_fakes_results_are_corrected_where_they_differ_from_the_cpu_kernel(tmp_path):
    """native_batch_norm_backward leaves unrequested results undefined on
    the CPU; roll of a channels-last input is channels-last there. The
    corrections (metatrace._FIXES) record what the CPU kernel returns."""
    x = torch.randn(2, 4, 6, 6)
    for fn, args in [
            (lambda x: torch.ops.aten.native_batch_norm_backward(
                x * 1, x, None, torch.zeros(4), torch.ones(4), torch.zeros(4), torch.ones(4),
                True, 1e-5, [False, True, True]), (x,)),
            (lambda x: torch.roll(x, (1, -2), (1, 3)),
             (x.to(memory_format=torch.channels_last),))]:
        meta, real = both(fn, args)
        assert not isinstance(meta, str), meta
        a, b = keys([meta, real], tmp_path)
        assert a is not None and a == b
