"""compiled as a torch.compile backend (compiled.dynamo): the backend string
and object, inference, training through AOTAutograd (gradients, batch norm's
running statistics, input mutations, outputs aliasing inputs), graph breaks,
Dynamo's recompiles, options, and a daemon that is away.

Every result is compared with eager PyTorch on the same inputs."""

import time

import pytest
import torch

import compiled
import compiled.frontend
import daemon_util
import native_util
from compiled import dynamo


# Each test sees only its own graphs.
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _graphs_since(mark):
    return [g for g in dynamo.loaded_graphs() if g.serial >= mark]


def _mark():
    graphs = dynamo.loaded_graphs()
    return graphs[-1].serial + 1 if graphs else 0


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.nn.functional.max_pool2d(y, 2)
        return self.fc(torch.flatten(y, 1)).softmax(-1)


def _copy(module):
    import copy
    return copy.deepcopy(module)


def test_the_backend_is_registered_by_name():
    assert "compiled" in torch._dynamo.list_backends()


@pytest.mark.parametrize("how", ["string", "object", "function"])
def test_inference_matches_eager_and_runs_native_code(server, how):
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(4, 3, 8, 8)
    backend = {"string": "compiled", "object": compiled.backend,
               "function": dynamo.compiled_backend}[how]
    mark = _mark()
    fast = torch.compile(model, backend=backend, options={"server": server})
    with torch.no_grad():
        out = fast(x)
        ref = model(x)
    torch.testing.assert_close(out, ref)
    graphs = _graphs_since(mark)
    assert len(graphs) == 1 and graphs[0].role == "inference"
    summary = graphs[0].program.summary
    assert summary["kernels"] >= 1 and summary["fallback"] == 0, summary


def test_a_program_whose_arena_is_paged_in_at_load_runs_on_real_memory(server):
    # The backend loads programs while AOTAutograd traces, under its
    # FakeTensorMode: an arena allocated at load time (compiled.arena pages
    # in arenas of PAGE_IN_BYTES and more) must still be a real tensor.
    # (Buffers of 1 MiB or more have their own memory: two products of
    # 0.95 MiB live together make the arena.)
    from compiled import arena

    class Products(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(496, 496))

        def forward(self, x):
            p = x @ self.w
            q = self.w.t() @ x
            return torch.relu(p * q).sum(0)

    torch.manual_seed(0)
    model = Products().eval()
    x = torch.randn(496, 496)
    mark = _mark()
    fast = torch.compile(model, backend="compiled", options={"server": server})
    with torch.no_grad():
        out = fast(x)
        ref = model(x)
    torch.testing.assert_close(out, ref)
    graphs = _graphs_since(mark)
    assert len(graphs) == 1 and graphs[0].program is not None
    assert graphs[0].program.summary["arena_bytes"] >= arena.PAGE_IN_BYTES, \
        graphs[0].program.summary


def test_training_gives_eager_gradients_and_running_statistics(server):
    torch.manual_seed(0)
    model = Net().train()
    ref_model = _copy(model)
    fast = torch.compile(model, backend="compiled", options={"server": server})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.1)
    mark = _mark()
    for step in range(3):
        x = torch.randn(4, 3, 8, 8)
        target = torch.randint(0, 5, (4,))
        for m, o, f in ((model, opt, fast), (ref_model, ref_opt, ref_model)):
            o.zero_grad()
            loss = torch.nn.functional.cross_entropy(f(x), target)
            loss.backward()
            o.step()
        for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=f"step {step}: gradient of {name}")
            torch.testing.assert_close(p, q, msg=f"step {step}: parameter {name}")
        torch.testing.assert_close(model.bn.running_mean, ref_model.bn.running_mean)
        torch.testing.assert_close(model.bn.running_var, ref_model.bn.running_var)
        assert model.bn.num_batches_tracked == ref_model.bn.num_batches_tracked
    roles = sorted(g.role for g in _graphs_since(mark))
    assert roles == ["backward", "forward"]
    assert all(g.program is not None for g in _graphs_since(mark))


def test_input_mutation_and_outputs_aliasing_inputs(server):
    def f(x, y):
        x.add_(1)             # an input mutation, applied by AOTAutograd's wrappers
        y[0].mul_(2)          # through a view
        return x * y, x.t(), y[1]   # outputs that alias inputs

    torch.manual_seed(0)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    ex, ey = x.clone(), y.clone()
    fast = torch.compile(f, backend="compiled", options={"server": server})
    out = fast(x, y)
    ref = f(ex, ey)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r)
    torch.testing.assert_close(x, ex)
    torch.testing.assert_close(y, ey)
    assert out[1]._base is x or out[1].data_ptr() == x.data_ptr()   # a view of x, as in eager
    assert out[2].data_ptr() == y[1].data_ptr()


def test_a_graph_break_gives_two_compiled_graphs(server):
    def f(x):
        y = torch.sin(x) * 2
        print("graph break", end="")   # Dynamo cannot trace print: two graphs
        return torch.cos(y) + 1

    x = torch.randn(16)
    mark = _mark()
    fast = torch.compile(f, backend="compiled", options={"server": server})
    torch.testing.assert_close(fast(x), f(x))
    graphs = _graphs_since(mark)
    assert len(graphs) == 2 and all(g.program is not None for g in graphs)


def test_dynamo_guards_decide_recompiles(server):
    def f(x):
        return torch.nn.functional.gelu(x) * x.sum()

    mark = _mark()
    fast = torch.compile(f, backend="compiled", options={"server": server}, dynamic=False)
    for shape in ((4, 8), (4, 8), (2, 8), (4, 8)):
        x = torch.randn(shape)
        torch.testing.assert_close(fast(x), f(x))
    assert len(_graphs_since(mark)) == 2   # one per shape; the repeats hit Dynamo's cache


def test_unknown_option_is_refused():
    with pytest.raises(Exception, match="unknown option.*servr"):
        torch.compile(lambda x: x + 1, backend="compiled", options={"servr": "x"})(torch.ones(2))


def test_an_unreachable_daemon_runs_eagerly_with_one_warning_then_compiles(tmp_path,
                                                                          monkeypatch):
    port = daemon_util.free_port()
    address = f"127.0.0.1:{port}"
    monkeypatch.setattr(compiled.frontend, "RETRY_FIRST", 0.0)

    def f(x):
        return torch.tanh(x) * 3

    fast = torch.compile(f, backend="compiled", options={"server": address, "timeout": 5})
    x = torch.randn(8)
    mark = _mark()
    native_util.one_warning(compiled.DaemonUnavailableWarning, fast, f, (x, x, x))
    graph, = _graphs_since(mark)
    assert graph.program is None
    # A daemon appears on the address: the next call compiles.
    (tmp_path / "late").mkdir()
    d = daemon_util.Daemon(tmp_path / "late", "--listen", address).start()
    try:
        deadline = time.monotonic() + 30
        while graph.program is None and time.monotonic() < deadline:
            torch.testing.assert_close(fast(x), f(x))
            time.sleep(0.1)   # gRPC's reconnect backoff decides when the channel is back
        assert graph.program is not None
        torch.testing.assert_close(fast(x), f(x))
    finally:
        d.stop()



# -- the graph memo (compiled.graphmemo): a warm start without AOTAutograd --

@pytest.fixture
def aot_calls(monkeypatch, tmp_path):
    """A private code cache (the memo's home) and a count of AOTAutograd
    traces the backend starts."""
    import torch._dynamo.backends.common as common
    monkeypatch.setenv("COMPILED_CODE_CACHE", str(tmp_path / "code"))
    calls = []
    original = common.aot_module_simplified

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(common, "aot_module_simplified", counting)
    return calls


def _memo_entries(tmp_path):
    return sorted(p for p in (tmp_path / "code").iterdir() if p.name.startswith("memo-"))


def _compile_and_check(model, x, server, **options):
    """Compiles model, checks it against eager; returns the graphs it
    loaded."""
    mark = _mark()
    fast = torch.compile(model, backend="compiled", options={"server": server, **options})
    torch.testing.assert_close(fast(x), model(x))
    graphs = _graphs_since(mark)
    torch._dynamo.reset()   # the next compile is as a new process's
    return graphs


def test_the_graph_memo_skips_aotautograd_on_a_warm_start(server, aot_calls, tmp_path):
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        first = _compile_and_check(model, x, server)
        assert len(aot_calls) == 1 and len(_memo_entries(tmp_path)) == 1
        again = _compile_and_check(model, x, server)
    assert len(aot_calls) == 1   # the second compile took the memo
    assert len(first) == len(again) == 1 and again[0].key == first[0].key
    assert again[0].program.summary["kernels"] > 0


def test_the_graph_memo_key_follows_shapes_options_and_weights(server, aot_calls, tmp_path):
    torch.manual_seed(0)
    model = Net().eval()
    with torch.no_grad():
        _compile_and_check(model, torch.randn(4, 3, 8, 8), server)
        _compile_and_check(model, torch.randn(2, 3, 8, 8), server)            # a new shape
        _compile_and_check(model, torch.randn(4, 3, 8, 8), server, native=False)
        model.fc.weight.mul_(2)                   # weights are inputs: the same entry
        _compile_and_check(model, torch.randn(4, 3, 8, 8), server)
    assert len(aot_calls) == 3 and len(_memo_entries(tmp_path)) == 3


def test_graphs_that_need_aotautograds_wrappers_are_not_memoized(server, aot_calls, tmp_path):
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(4, 3, 8, 8)
    _compile_and_check(model.eval(), x, server)     # grad mode on, parameters need grad

    def mutates(x):
        x.add_(1)
        return x * 2

    def aliases(x):
        return x.t(), x + 1

    with torch.no_grad():
        for f in (mutates, aliases):
            for _ in range(2):
                a, b = torch.randn(3, 4), None
                b = a.clone()
                fast = torch.compile(f, backend="compiled", options={"server": server})
                for o, r in zip(torch.utils._pytree.tree_leaves(fast(a)),
                                torch.utils._pytree.tree_leaves(f(b))):
                    torch.testing.assert_close(o, r)
                torch.testing.assert_close(a, b)
                torch._dynamo.reset()
    assert len(aot_calls) == 5 and _memo_entries(tmp_path) == []


def test_a_memo_entry_the_daemon_cannot_serve_takes_the_full_path(server, aot_calls,
                                                                   tmp_path):
    import json
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        _compile_and_check(model, x, server)
        [entry] = _memo_entries(tmp_path)
        good = json.loads(entry.read_text())
        entry.write_text(json.dumps(dict(good, key="0" * 64)))   # a key the daemon never had
        _compile_and_check(model, x, server)
        assert len(aot_calls) == 2
        assert json.loads(entry.read_text())["key"] == good["key"]   # written again
        entry.write_text("{not json")                                # a damaged entry
        _compile_and_check(model, x, server)
        assert len(aot_calls) == 3
        _compile_and_check(model, x, server)
    assert len(aot_calls) == 3


def test_the_graph_memo_is_off_with_the_code_cache(server, aot_calls, monkeypatch, tmp_path):
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(4, 3, 8, 8)
    for variable, value in (("COMPILED_GRAPH_MEMO", "0"), ("COMPILED_CODE_CACHE", "off")):
        with monkeypatch.context() as m, torch.no_grad():
            m.setenv(variable, value)
            _compile_and_check(model, x, server)
            _compile_and_check(model, x, server)
    assert len(aot_calls) == 4
    assert not (tmp_path / "code").exists() or _memo_entries(tmp_path) == []


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_upsampling_reaches_the_daemon_as_the_operator(server, mode):
    # torch decomposes upsampling while AOTAutograd traces (Python kernels
    # at the Autograd key); the backend keeps the operator, which the daemon
    # lowers with ATen's own indices and weights, and which writes the
    # output directly (decomposed: gathers and lerps, and a realized copy)
    from torch._C import DispatchKey
    op = getattr(torch.ops.aten, f"upsample_{mode}2d").default
    had = set(op.py_kernels)

    def f(x):
        return torch.nn.functional.interpolate(x, scale_factor=2.0, mode=mode) * 2

    x = torch.randn(2, 3, 5, 6)
    mark = _mark()
    fast = torch.compile(f, backend="compiled", options={"server": server})
    with torch.no_grad():
        out = fast(x)
    torch.testing.assert_close(out, f(x))
    graphs = _graphs_since(mark)
    assert len(graphs) == 1 and graphs[0].program is not None
    text = (graphs[0].program.c_source or "") + graphs[0].program.source
    assert f"upsample_{mode}2d" in text and "_unsafe_index" not in text, text[:2000]
    # the backward too, and torch's own kernels are back afterwards
    torch._dynamo.reset()
    xg, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    mark = _mark()
    fast = torch.compile(f, backend="compiled", options={"server": server})
    fast(xg).sum().backward()
    f(xe).sum().backward()
    torch.testing.assert_close(xg.grad, xe.grad)
    texts = [(g.program.c_source or "") + g.program.source for g in _graphs_since(mark)
             if g.program is not None]
    assert any(f"upsample_{mode}2d_backward" in t for t in texts), [g.role for g in
                                                                   _graphs_since(mark)]
    assert all("_unsafe_index" not in t for t in texts)
    assert set(op.py_kernels) == had and DispatchKey.Autograd in had


class _Attention(torch.nn.Module):
    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
        return torch.softmax(s, -1) @ v


def test_written_out_attention_runs_as_flash_attention(server):
    # softmax(q k^T / c) @ v in an inference graph: ATen's CPU flash
    # attention (no [B, H, L, S] scores in memory), eager's values within
    # roundings; the probabilities also returned, or a training graph,
    # keep the written-out form
    torch.manual_seed(0)
    m = _Attention()
    q, k, v = torch.randn(2, 3, 40, 24), torch.randn(2, 3, 56, 24), torch.randn(2, 3, 56, 24)
    mark = _mark()
    fast = torch.compile(m, backend="compiled", options={"server": server})
    with torch.no_grad():
        out = fast(q, k, v)
    torch.testing.assert_close(out, m(q, k, v))
    (g,) = _graphs_since(mark)
    text = g.program.source
    assert "_scaled_dot_product_flash_attention_for_cpu" in text and "bmm" not in text, text
    assert g.program.summary["arena_bytes"] == 0, g.program.summary

    def with_probs(q, k, v):
        p = torch.softmax(q @ k.transpose(-2, -1) / 3.0, -1)
        return p @ v, p

    torch._dynamo.reset()
    mark = _mark()
    fast = torch.compile(with_probs, backend="compiled", options={"server": server})
    with torch.no_grad():
        got = fast(q, k, v)
    torch.testing.assert_close(got, with_probs(q, k, v))
    assert all("flash" not in g.program.source for g in _graphs_since(mark))

    torch._dynamo.reset()
    mark = _mark()
    qg, qe = q.clone().requires_grad_(), q.clone().requires_grad_()
    fast = torch.compile(m, backend="compiled", options={"server": server})
    fast(qg, k, v).sum().backward()
    m(qe, k, v).sum().backward()
    torch.testing.assert_close(qg.grad, qe.grad)
    assert all("flash" not in g.program.source for g in _graphs_since(mark)
               if g.program is not None)
