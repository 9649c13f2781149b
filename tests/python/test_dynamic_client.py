"""Dynamic shapes, the client's side (issue 38, docs/dynamic-shapes.md):
symbolic graphs from Dynamo (``dynamic=True``, ``mark_dynamic``, automatic
dynamic) and from ``compiled.compile(..., dynamic=...)`` go to the daemon
as they are and compile ONE program with size symbols that serves every
size; a call one of its guards refuses gets a program of its own.

Every result is compared with eager on the same inputs; compiles are
counted where the client counts them (``_GraphFunction.compiles``,
``CompiledFunction.compiles``) and by the programs' size symbols."""

import logging
import warnings

import pytest
import torch
import torch.nn.functional as F

import compiled
from compiled import dynamo


# Each test sees only its own graphs.
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _mark():
    graphs = dynamo.loaded_graphs()
    return graphs[-1].serial + 1 if graphs else 0


def _graphs_since(mark):
    return [g for g in dynamo.loaded_graphs() if g.serial >= mark]


def _symbols(program):
    return list(program.artifact.native_program.symbols)


class Block(torch.nn.Module):
    """Sizes flow through views, a product and SymInt arithmetic: a
    ``view(B*T, C)``, ``x.shape[0]`` as a scalar, a softmax over T."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        b, t, c = x.shape
        y = torch.relu(self.fc(x.reshape(b * t, c))).view(b, t, c)
        return F.softmax(y, dim=1) * 2 + y.sum(1, keepdim=True) / t


def _sizes():
    # batch and sequence lengths, primes, around the vector widths
    return [(5, 3), (7, 3), (2, 9), (17, 16), (3, 31), (64, 7)]


def _no_fallback_warning(caught):
    bad = [str(w.message) for w in caught
           if issubclass(w.category, (compiled.CompileFallbackWarning,
                                      compiled.DaemonUnavailableWarning))]
    assert not bad, bad


# ---- torch.compile ---------------------------------------------------------

def test_dynamo_dynamic_true_compiles_one_symbolic_program(server):
    """dynamic=True: Dynamo's graph has SymInt placeholders, SymInt sizes,
    SymInt arithmetic and a SymInt scalar; one program serves every size
    (it ran as ATen calls with a CompileFallbackWarning before)."""
    torch.manual_seed(0)
    model = Block().eval()
    fast = torch.compile(model, backend="compiled", dynamic=True,
                         options={"server": server})
    mark = _mark()
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for b, t in _sizes():
            x = torch.randn(b, t, 8)
            torch.testing.assert_close(fast(x), model(x), atol=1e-5, rtol=1e-5)
    _no_fallback_warning(caught)
    graph, = _graphs_since(mark)
    assert graph.program is not None and graph.compiles == 1
    assert len(_symbols(graph.program)) >= 2, _symbols(graph.program)
    # Dynamo's graph takes SymInts (passed at call time, as program inputs)
    assert any(isinstance(n.meta.get("val"), torch.SymInt)
               for n in graph.gm.graph.nodes if n.op == "placeholder")
    assert graph.program.summary["kernels"] > 0, graph.program.summary


def test_dynamo_mark_dynamic(server):
    def f(x, w):
        return torch.tanh(x @ w).amax(-1) + x.mean(-1)

    w = torch.randn(8, 8)
    fast = torch.compile(f, backend="compiled", options={"server": server})
    mark = _mark()
    with torch.no_grad():
        for b in (5, 9, 33, 2):
            x = torch.randn(b, 8)
            torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(fast(x, w), f(x, w), atol=1e-5, rtol=1e-5)
    graph, = _graphs_since(mark)
    assert graph.compiles == 1 and len(_symbols(graph.program)) == 1


def test_dynamo_eval_batch_norm_and_pooling_with_a_dynamic_batch(server):
    """A conv-bn-relu-pool block in eval mode with the batch marked
    dynamic: AOTAutograd records the batch norm as
    _native_batch_norm_legit_no_training, and it and max_pool2d_with_indices
    are kernels of the symbolic program, not ATen calls."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.AvgPool2d(2)).eval()
    with torch.no_grad():  # running statistics that are not 0 and 1
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    fast = torch.compile(model, backend="compiled", options={"server": server})
    mark = _mark()
    with torch.no_grad():
        for b in (5, 9, 2, 17, 8, 3):
            x = torch.randn(b, 3, 12, 12)
            torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(fast(x), model(x), atol=1e-5, rtol=1e-5)
    # (Dynamo may trace the module twice; each graph is symbolic)
    graphs = _graphs_since(mark)
    assert graphs and all(len(_symbols(g.program)) == 1 for g in graphs), graphs
    for g in graphs:
        summary = g.program.summary
        assert summary["fallback"] == 0 and summary["kernels"] > 0, summary


def test_dynamo_automatic_dynamic_compiles_twice(server):
    """Dynamo's default: the first graph is static, the second (after a
    size changed) symbolic, and it serves every later size."""
    def f(x):
        return F.gelu(x).sum(0) * 3

    fast = torch.compile(f, backend="compiled", options={"server": server})
    mark = _mark()
    with torch.no_grad():
        for b in (5, 6, 9, 17, 40):
            x = torch.randn(b, 12)
            torch.testing.assert_close(fast(x), f(x), atol=1e-5, rtol=1e-5)
    first, second = _graphs_since(mark)
    assert first.compiles == 1 and _symbols(first.program) == []
    assert second.compiles == 1 and len(_symbols(second.program)) == 1


def test_dynamo_guard_failure_compiles_for_those_sizes(server, caplog):
    """A call the program's guards refuse (a softmax over no element: its
    RANGE guard; eager returns an empty tensor) is not an error: one
    program for those sizes is compiled, once, and the symbolic program
    still serves the others. Dynamo would specialize an empty size itself,
    so the graph function is called directly, as AOTAutograd calls it."""
    def f(x):
        return x.softmax(0) * 2 + 1

    fast = torch.compile(f, backend="compiled", dynamic=True, options={"server": server})
    mark = _mark()
    with torch.no_grad():
        for b in (5, 7):
            x = torch.randn(b, 6)
            torch.testing.assert_close(fast(x), f(x))
    graph, = _graphs_since(mark)
    guards = [g.expr for g in graph.program.artifact.native_program.guards]
    assert "1 <= s0" in guards, guards
    phs = [n for n in graph.gm.graph.nodes if n.op == "placeholder"]

    def args_for(x):
        return [x.shape[0] if isinstance(p.meta["val"], torch.SymInt) else x for p in phs]

    empty = torch.randn(0, 6)
    with caplog.at_level(logging.DEBUG, logger="compiled"), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, = graph(args_for(empty))
    _no_fallback_warning(caught)
    torch.testing.assert_close(out, f(empty))
    assert graph.compiles == 2 and len(graph.specialized) == 1
    assert any("1 <= s0" in r.getMessage() and "compiling it for these sizes" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    graph(args_for(torch.randn(0, 6)))
    assert graph.compiles == 2  # the specialized program is kept
    x = torch.randn(11, 6)
    torch.testing.assert_close(graph(args_for(x))[0], f(x))
    assert graph.compiles == 2


# ---- compiled.compile ------------------------------------------------------

def test_compile_dynamic_true_one_program_for_all_sizes(server):
    torch.manual_seed(0)
    model = Block().eval().requires_grad_(False)
    with torch.no_grad():
        fast = compiled.compile(model, (torch.randn(5, 3, 8),), server=server, dynamic=True)
        for b, t in _sizes():
            x = torch.randn(b, t, 8)
            torch.testing.assert_close(fast(x), model(x), atol=1e-5, rtol=1e-5)
    assert fast.compiles == 1, fast.compiles
    program, = fast.programs
    # B and T are symbols; C (8, the weight's size) is not
    assert [(s.input, s.dim) for s in _symbols(program)] == [(2, 0), (2, 1)], _symbols(program)


def test_compile_dynamic_true_keeps_sizes_one_static(server):
    """Dims of size 0 or 1 stay static, as Dynamo keeps them (a 1 changes
    what broadcasts): a [B, 1, C] input has one symbol; another size in
    that dim is another program."""
    def f(x, y):
        return x * y + 1

    x, y = torch.randn(4, 1, 6), torch.randn(4, 5, 6)
    fast = compiled.compile(f, (x, y), server=server, dynamic=True)
    for b in (4, 9):
        a, c = torch.randn(b, 1, 6), torch.randn(b, 5, 6)
        torch.testing.assert_close(fast(a, c), f(a, c))
    assert fast.compiles == 1
    names = {s.name for s in _symbols(fast.programs[0])}
    assert len(names) == 3, _symbols(fast.programs[0])   # B, 5 and 6 (the 1 is not)
    a, c = torch.randn(4, 5, 6), torch.randn(4, 5, 6)     # the 1 is now 5
    torch.testing.assert_close(fast(a, c), f(a, c))
    assert fast.compiles == 2


def test_compile_dynamic_none_turns_a_dim_dynamic_after_two_sizes(server):
    def f(x, w):
        return torch.relu(x @ w).sum(-1)

    w = torch.randn(8, 3)
    fast = compiled.compile(f, (torch.randn(5, 8), w), server=server)
    assert fast.compiles == 1 and _symbols(fast.programs[0]) == []
    for b in (7, 9, 2, 33, 5):
        x = torch.randn(b, 8)
        torch.testing.assert_close(fast(x, w), f(x, w))
    assert fast.compiles == 2, fast.compiles
    assert [(s.input, s.dim) for s in _symbols(fast.programs[1])] == [(0, 0)]


def test_compile_dynamic_false_compiles_per_size(server):
    def f(x):
        return torch.sigmoid(x) * 2

    fast = compiled.compile(f, (torch.randn(5, 8),), server=server, dynamic=False)
    for b in (7, 9, 2):
        x = torch.randn(b, 8)
        torch.testing.assert_close(fast(x), f(x))
    assert fast.compiles == 4
    assert all(_symbols(p) == [] for p in fast.programs)


def test_compile_python_branch_on_a_size_is_a_guard(server):
    """A Python branch on a size is a fact of the trace (ShapeGuards): a
    call on the other side of it gets another program, never this one."""
    def f(x):
        if x.shape[0] > 8:
            return x * 2
        return x - 1

    fast = compiled.compile(f, (torch.randn(10, 4),), server=server, dynamic=True)
    for b in (12, 30):
        x = torch.randn(b, 4)
        torch.testing.assert_close(fast(x), f(x))
    assert fast.compiles == 1
    for b in (3, 5):
        x = torch.randn(b, 4)
        torch.testing.assert_close(fast(x), f(x))
    assert fast.compiles == 2


def test_compile_guard_failure_compiles_again_rather_than_failing(server, monkeypatch):
    """The program's own guards (here: an input whose layout is not the
    compiled one, or a max over no row) refuse a call the trace's facts
    admit: compiled.compile compiles once more for those inputs and the
    call returns eager's result, with no error."""
    from compiled import symbolic

    def f(x):
        return x.amax(0) * 2

    fast = compiled.compile(f, (torch.randn(5, 6),), server=server, dynamic=True)
    assert fast.compiles == 1
    # the trace's facts say nothing about it: only the program's guard can
    monkeypatch.setattr(symbolic.ShapeGuards, "check", lambda self, inputs: True)
    xt = torch.randn(6, 9).t()          # [9, 6], strides (1, 9)
    torch.testing.assert_close(fast(xt), f(xt))
    assert fast.compiles == 2
    torch.testing.assert_close(fast(xt), f(xt))   # that signature now has its program
    assert fast.compiles == 2
    x = torch.randn(13, 6)
    torch.testing.assert_close(fast(x), f(x))
    assert fast.compiles == 2


def test_compile_symbolic_program_serves_only_its_dtypes_and_layouts(server):
    """A program with size symbols serves calls that differ in sizes only:
    another dtype, another rank, inputs sharing storage get programs of
    their own (the float32 program once ran float64 inputs)."""
    def f(x, y):
        return x @ y + 1

    x, y = torch.randn(4, 5), torch.randn(5, 3)
    fast = compiled.compile(f, (x, y), server=server, dynamic=True)
    a, b = torch.randn(9, 5), torch.randn(5, 7)
    torch.testing.assert_close(fast(a, b), f(a, b))
    assert fast.compiles == 1
    a, b = a.double(), b.double()
    out = fast(a, b)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, f(a, b))
    assert fast.compiles == 2
    sq = torch.randn(5, 5)
    torch.testing.assert_close(fast(sq, sq), f(sq, sq))   # one storage
    assert fast.compiles == 3


def test_a_miss_names_the_input_dimension_and_sizes(server, caplog):
    """The client's log says which input and dimension changed, with the
    old and new sizes, and that a program with a size symbol follows."""
    def f(x):
        return x.sum(1)

    fast = compiled.compile(f, (torch.randn(4, 8, 3),), server=server)
    with caplog.at_level(logging.INFO, logger="compiled"):
        fast(torch.randn(4, 11, 3))
    lines = [r.getMessage() for r in caplog.records]
    assert any("argument 0: shape (4, 11, 3) (was (4, 8, 3)): dimension 1 is 11 (was 8)"
               in m for m in lines), lines
    assert any("one program for every size of argument 0 dimension 1" in m
               for m in lines), lines


def test_dynamo_training_forward_and_backward_are_symbolic(server):
    """Training through AOTAutograd with dynamic=True: the forward and the
    backward graph are each one program with a size symbol; the loss and
    the gradients are eager's at every batch size."""
    import copy
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    ref = copy.deepcopy(model)
    fast = torch.compile(model, backend="compiled", dynamic=True, options={"server": server})
    mark = _mark()
    for b in (5, 7, 13):
        x = torch.randn(b, 8)
        loss = fast(x).pow(2).sum()
        loss.backward()
        want = ref(x).pow(2).sum()
        want.backward()
        torch.testing.assert_close(loss, want)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5)
    graphs = _graphs_since(mark)
    assert sorted(g.role for g in graphs) == ["backward", "forward"], [g.where for g in graphs]
    for g in graphs:
        assert g.compiles == 1 and len(_symbols(g.program)) == 1, (g.where, _symbols(g.program))


def test_expr_text_states_sympy_sizes_in_the_wire_grammar():
    """compiled.symbolic.expr_text: every form a size takes in torch's
    ShapeEnv, written in the wire grammar (which Python reads alike), has
    sympy's value at many sizes; powers are products (the daemon's loop IR
    has none); a rational is refused by name."""
    import sympy
    from torch.utils._sympy.functions import CeilDiv, FloorDiv, Max, Min, ModularIndexing, \
        PythonMod
    from compiled import symbolic
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    exprs = [s0, 3 * s0 * s1 + 2, s1**2 * 3, FloorDiv(s0 + 15, 16) * 64, PythonMod(s0, 4),
             Max(1, FloorDiv(s1, 2)), Min(s0, s1) - 1, CeilDiv(s0, 8),
             ModularIndexing(s0 * s1, 2, 5), 2 * s0 - s1]
    for e in exprs:
        text = symbolic.expr_text(e, "test")
        assert "**" not in text, text
        for a, b in [(1, 1), (2, 7), (15, 16), (17, 3), (64, 33)]:
            want = int(e.subs({s0: a, s1: b}))
            assert eval(text, {"max": max, "min": min}, {"s0": a, "s1": b}) == want, \
                (e, text, a, b)
    with pytest.raises(compiled.CaptureError, match="no form"):
        symbolic.expr_text(s0 / 3, "here")


def test_dynamo_square_images_run_native_code(server):
    """dynamic=True over [B, C, H, H]: Dynamo's strides are C*H**2 and H**2,
    sent as products (as powers the daemon could not lower the input and
    the whole program ran as ATen calls)."""
    def f(x):
        return torch.sigmoid(x) * 2 + x.mean(1, keepdim=True)

    fast = torch.compile(f, backend="compiled", dynamic=True, options={"server": server})
    mark = _mark()
    with torch.no_grad():
        for b, h in ((2, 5), (3, 8), (1, 7)):
            x = torch.randn(b, 3, h, h)
            torch.testing.assert_close(fast(x), f(x), atol=1e-6, rtol=1e-5)
    graphs = _graphs_since(mark)
    assert graphs and all(g.program.summary["kernels"] > 0 for g in graphs), \
        [g.program.summary for g in graphs]


def test_compile_a_program_without_a_symbolic_trace_is_traced_once(server, monkeypatch):
    """A function whose symbolic trace fails (here: made to) compiles static
    programs per size, and the symbolic trace is not tried again at every
    new size."""
    from compiled import symbolic
    calls = []

    def failing(*a, **k):
        calls.append(1)
        raise RuntimeError("no symbolic trace for this one")

    monkeypatch.setattr(symbolic, "trace_symbolic", failing)

    def f(x):
        return x.cos() + 1

    fast = compiled.compile(f, (torch.randn(3, 4),), server=server, dynamic=True)
    for b in (5, 6, 7):
        x = torch.randn(b, 4)
        torch.testing.assert_close(fast(x), f(x))
    assert fast.compiles == 4 and len(calls) == 1, (fast.compiles, calls)
