"""Hostile input against a real daemon (issue 9, items 1 and 5).

The daemon promises that nothing a client sends crashes it, and that a graph
it accepts means what it says. Each test sends what a hostile or broken
client could, checks the precise error, and then checks that the daemon
still serves a normal compile:

- a symbolic size of 200,000 terms (it overflowed a completion-queue
  thread's stack in the key's recursive hash) and a chain of 100,000 views
  whose functionalization recursed once per view (it crashed a worker);
- strings that hide a NUL byte (unpacked as the text before it) or are not
  UTF-8;
- operator schemas that lie about what torch's operators write and alias
  (they were trusted, and the artifact cached; checked for clients of the
  release whose table the daemon carries, 2.13);
- `s0//0`, a graph without outputs, an int where relu wants a Tensor, an
  extra node output, garbage sent to Stats;
- `compilectl graph hash` on a file with a huge expression (it segfaulted).
"""

import os
import subprocess

import grpc
import pytest

import compiled  # noqa: F401  (makes compiled.v1 importable)
from compiled.v1 import artifact_pb2, compiled_pb2

import biggraph
from daemon_util import (BUILD, compile_request, load_graph, run_compile,
                         variant)

SERVED = compiled_pb2.Served
CTL = os.path.join(BUILD, "bin", "compilectl")


def refused(call):
    """Runs `call`, which must fail with INVALID_ARGUMENT; returns (details,
    GraphError or None)."""
    with pytest.raises(grpc.RpcError) as e:
        call()
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    md = dict(e.value.trailing_metadata() or ())
    ge = None
    if "compiled-error-bin" in md:
        ge = compiled_pb2.GraphError()
        ge.ParseFromString(md["compiled-error-bin"])
    return e.value.details(), ge


def compile_refused(d, gm):
    return refused(lambda: run_compile(d.stub(), compile_request(gm), timeout=60))


def still_serving(d, tag):
    """A normal graph still compiles (a fresh key: a real compile)."""
    _, r = run_compile(d.stub(), compile_request(variant(load_graph("mlp"), tag)))
    assert r.served == SERVED.SERVED_COMPILED
    assert d.proc.poll() is None


def big_sum(terms):
    gm = load_graph("mlp")
    size = gm.graph.tensor_values[0].meta.sizes[0]
    size.as_expr.expr = "+".join(["s0"] * terms)
    return gm


# ---- item 1: recursion over client-controlled structure ----

def test_200k_term_size_is_refused_and_the_daemon_keeps_serving(daemon):
    d = daemon()
    gm = big_sum(200000)
    assert 500_000 < gm.ByteSize() < 1_000_000  # far under the message limit
    details, ge = compile_refused(d, gm)
    name = gm.graph.tensor_values[0].name
    assert "tensor_values[0] '%s': size 0" % name in details, details
    assert "has more than 10000 nodes, the limit" in details, details
    assert ge.code == "LIMIT" and ge.message == details
    # Explain decodes and hashes the same graph.
    details, _ = refused(lambda: d.stub().Explain(
        compiled_pb2.ExplainRequest(graph=gm), timeout=60))
    assert "has more than 10000 nodes, the limit" in details, details
    still_serving(d, "after-200k")


def test_nesting_limit_is_64_and_stated(daemon):
    d = daemon()
    gm = load_graph("mlp")
    size = gm.graph.tensor_values[0].meta.sizes[0]
    size.as_expr.expr = "(" * 64 + "s0" + ")" * 64
    size.as_expr.hint = 16
    size.as_expr.has_hint = True
    _, r = run_compile(d.stub(), compile_request(gm))
    assert r.served == SERVED.SERVED_COMPILED
    size.as_expr.expr = "(" * 65 + "s0" + ")" * 65
    details, _ = compile_refused(d, gm)
    assert "nests deeper than 64 levels, the limit" in details, details


def test_long_chain_of_views_of_views_does_not_crash_a_worker(daemon):
    d = daemon()
    req = compile_request(biggraph.view_chain(100000, "1.13.0a0+chain100000"),
                          max_inline_bytes=64 << 20)
    _, r = run_compile(d.stub(), req, timeout=300)
    assert r.served == SERVED.SERVED_COMPILED and r.artifact_inline
    # Too deep to replay: kept in eager form, with the reason.
    art = artifact_pb2.Artifact()
    art.ParseFromString(r.artifact)
    assert any("views of views more than 64 levels deep" in x.message
               for x in art.diagnostics), list(art.diagnostics)
    still_serving(d, "after-views")


def test_compilectl_graph_hash_refuses_a_huge_expression(tmp_path):
    path = tmp_path / "huge.pb"
    path.write_bytes(big_sum(200000).SerializeToString())
    r = subprocess.run([CTL, "graph", "hash", str(path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr[-500:])  # not a signal
    assert "has more than 10000 nodes, the limit" in r.stderr, r.stderr[-500:]


# ---- item 5: strings ----

def test_nul_in_torch_version_is_refused(daemon):
    d = daemon()
    gm = load_graph("mlp")
    gm.torch_version = "1.13.0a0\0anything"
    details, ge = compile_refused(d, gm)
    assert details.startswith("graph.torch_version: string field contains a NUL "
                              "byte (byte 8 of 17)"), details
    assert ge.code == "INVAL"
    details, _ = refused(lambda: d.stub().Explain(
        compiled_pb2.ExplainRequest(graph=gm), timeout=30))
    assert details.startswith("graph.torch_version:"), details
    still_serving(d, "after-nul-version")


def test_nul_in_output_name_is_refused(daemon):
    d = daemon()
    gm = load_graph("mlp")
    out = gm.graph.outputs[0].as_tensor
    out.name = out.name + "\0zzz"
    details, _ = compile_refused(d, gm)
    assert details.startswith("graph.graph.outputs[0].as_tensor.name: string "
                              "field contains a NUL byte"), details


def test_nul_in_an_admin_request_is_refused(daemon):
    d = daemon()
    details, _ = refused(lambda: d.stub().Lookup(
        compiled_pb2.LookupRequest(key="0" * 32 + "\0" + "0" * 31), timeout=10))
    assert details.startswith("key: string field contains a NUL byte"), details


def test_invalid_utf8_is_refused(daemon):
    d = daemon()
    gm = load_graph("mlp")
    gm.graph.nodes[0].metadata.module_path = "fc1@BAD@"
    raw = compile_request(gm).SerializeToString()
    assert raw.count(b"@BAD@") == 1
    raw = raw.replace(b"@BAD@", b"\xff@BAD")
    call = d.channel().unary_stream("/compiled.v1.Compiler/Compile")
    details, _ = refused(lambda: list(call(raw, timeout=30)))
    assert details.startswith("graph.graph.nodes[0].metadata.module_path: string "
                              "field is not valid UTF-8 (byte 3 of 8 is 0xff)"), details


# ---- item 5: operator schemas that lie ----

LIES = [
    # (graph, operator, the lie)
    ("mlp", "aten::relu", "aten::relu(Tensor(a!) self) -> Tensor(a!)"),
    ("mlp", "aten::t", "aten::t(Tensor(a) self) -> Tensor(b)"),
    ("add_inplace", "aten::add_.Tensor",
     "aten::add_.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"),
]


@pytest.mark.parametrize("graph,op,lie", LIES, ids=[l[1] for l in LIES])
def test_schema_lies_are_refused_and_not_cached(daemon, graph, op, lie):
    d = daemon()
    gm = load_graph(graph)
    # a client of the release whose schemas the daemon carries (these
    # graphs' operators have the same schemas in 1.13, where they come from)
    gm.torch_version = "2.13.0"
    ops = {o.name: o for o in gm.operators}
    honest = ops[op].schema
    ops[op].schema = lie
    details, ge = compile_refused(d, gm)
    assert "operator '%s'" % op in details, details
    assert "the schema sent, '%s', is not torch 2.13's, '%s'" % (lie, honest) in details
    assert ge.code == "INVAL"
    assert d.stats().entries == 0
    ops[op].schema = honest
    _, r = run_compile(d.stub(), compile_request(gm))
    assert r.served == SERVED.SERVED_COMPILED


# ---- item 5: graphs that were accepted ----

def test_graph_errors_that_were_accepted(daemon):
    d = daemon()
    gm = load_graph("mlp")
    gm.graph.tensor_values[0].meta.sizes[0].as_expr.expr = "s0//0"
    details, _ = compile_refused(d, gm)
    assert "size 0" in details and "'//' by zero" in details, details

    gm = load_graph("mlp")
    del gm.graph.outputs[:]
    details, _ = compile_refused(d, gm)
    assert details.startswith("graph: has no outputs"), details

    gm = load_graph("mlp")
    relu = next(n for n in gm.graph.nodes if n.target == "aten::relu")
    relu.inputs[0].arg.Clear()
    relu.inputs[0].arg.as_int = 1
    details, ge = compile_refused(d, gm)
    assert "argument 'self': expected Tensor, got int" in details, details
    assert ge.argument == "self"

    gm = load_graph("mlp")
    relu = next(n for n in gm.graph.nodes if n.target == "aten::relu")
    relu.outputs.add().as_tensor.name = "zzz"
    details, _ = compile_refused(d, gm)
    assert "has 2 outputs but aten::relu returns 1" in details, details
    still_serving(d, "after-errors")


def assert_ops_stay_aten_calls(d, gm, want):
    """Compiles gm for this machine's target: if it is served (a refusal
    is fine too), its native program has exactly the fallback calls `want`
    (sorted)."""
    from compiled import target
    _, r = run_compile(d.stub(), compile_request(gm, target=target.target_message()))
    if r.served == SERVED.SERVED_COMPILED:
        art = artifact_pb2.Artifact()
        art.ParseFromString(r.artifact)
        assert art.HasField("native_program"), art.diagnostics
        ops = sorted(art.native_program.summary.fallback_ops)
        assert ops == sorted(want), ops


def test_metadata_that_disagrees_with_a_scan_or_scatter_is_not_generated_code(daemon):
    """A scan or a scatter runs as generated code that trusts the sizes it
    was compiled for. An output size that disagrees with the operator (a
    client's capture bug, or a lie) must not become a loop reading past
    the input: the rule declines and the node stays an ATen call."""
    import torch
    d = daemon()
    x, i, s = torch.randn(4, 10), torch.randint(0, 4, (2, 10)), torch.randn(2, 10)
    gm = compiled.capture(lambda x, i, s: (torch.cumsum(x, 1), x.scatter_add(0, i, s)),
                          (x, i, s))
    for v in gm.graph.tensor_values:
        if v.name in ("cumsum", "scatter_add"):
            v.meta.sizes[1].as_int = 2000  # the inputs have 10
            v.meta.strides[0].as_int = 2000
    assert_ops_stay_aten_calls(d, gm, ["aten::cumsum", "aten::scatter_add"])
    still_serving(d, "after-lying-sizes")
    # index_put over several index tensors (element offsets): an output
    # twice as wide as self
    z, k = torch.randn(4, 3, 5), torch.tensor([0, 3, -1])
    gm = compiled.capture(
        lambda z, k: torch.ops.aten.index_put(z, [k, None, k], torch.ones(3, 3), True),
        (z, k))
    assert_ops_stay_aten_calls(d, gm, [])  # told the truth: generated code
    lied = 0
    for v in gm.graph.tensor_values:
        if v.name == "index_put":
            v.meta.sizes[1].as_int = 6
            v.meta.strides[0].as_int = 30
            lied += 1
    assert lied == 1
    assert_ops_stay_aten_calls(d, gm, ["aten::index_put"])
    still_serving(d, "after-lying-index-put")


def test_metadata_that_disagrees_with_an_upsampling_is_not_generated_code(daemon):
    """Upsampling (linear 1d/2d/3d, nearest 1d/2d/3d) and its backward compute the
    sizes their metadata states; sizes that disagree with the operator's
    own arguments (output_size, the scale factors, input_size) make the
    rules decline, and the nodes stay ATen calls."""
    import torch
    import torch.nn.functional as F
    d = daemon()
    aten = torch.ops.aten
    x, g = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 6, 8)
    x1, x3, g3 = torch.randn(1, 2, 4), torch.randn(1, 2, 2, 3, 4), torch.randn(1, 2, 4, 6, 8)

    def f(x, g, x1, x3, g3):
        return (F.interpolate(x, size=(6, 8), mode="bilinear"),
                F.interpolate(x, scale_factor=2.0, mode="bilinear"),
                aten.upsample_bilinear2d_backward(g, [6, 8], [1, 2, 3, 4], False),
                F.interpolate(x1, size=7), F.interpolate(x1, scale_factor=2.0),
                F.interpolate(x, size=(5, 7)), F.interpolate(x3, scale_factor=2.0),
                aten.upsample_nearest1d_backward(x1, [4], [1, 2, 2]),
                aten.upsample_nearest2d_backward(g, [6, 8], [1, 2, 3, 4]),
                aten.upsample_nearest3d_backward(g3, [4, 6, 8], [1, 2, 2, 3, 4]),
                F.interpolate(x1, size=7, mode="linear"),
                F.interpolate(x3, scale_factor=2.0, mode="trilinear"),
                aten.upsample_linear1d_backward(x1, [4], [1, 2, 2], False),
                aten.upsample_trilinear3d_backward(g3, [4, 6, 8], [1, 2, 2, 3, 4], False))
    gm = compiled.capture(f, (x, g, x1, x3, g3))
    ops = sorted(n.target for n in gm.graph.nodes if n.target.startswith("aten::upsample"))
    assert len(ops) == 14, ops
    for v in gm.graph.tensor_values:
        if v.name.startswith("upsample"):
            # the last dim twice what the arguments say, strides contiguous
            m = v.meta
            m.sizes[-1].as_int *= 2
            for i in reversed(range(len(m.sizes) - 1)):
                m.strides[i].as_int = m.strides[i + 1].as_int * m.sizes[i + 1].as_int
    assert_ops_stay_aten_calls(d, gm, ops)
    still_serving(d, "after-lying-upsampling-sizes")


def test_output_sizes_larger_than_the_inputs_allow_get_no_native_code(daemon):
    """relu(x) * 2 whose result claims 400 rows of a 4-row input: the
    kernel would read x past its end. The loop IR verifier (on by default)
    finds the load out of its buffer, and the graph is served as its ATen
    program, saying why."""
    import torch
    d = daemon()
    gm = compiled.capture(lambda x: torch.relu(x) * 2, (torch.randn(4, 10),))
    for v in gm.graph.tensor_values:
        if v.name == "mul":
            v.meta.sizes[0].as_int = 400
    from compiled import target
    _, r = run_compile(d.stub(), compile_request(gm, target=target.target_message()))
    art = artifact_pb2.Artifact()
    art.ParseFromString(r.artifact)
    assert not art.HasField("native_program")
    assert any("outside" in x.message and "verifier" in x.message for x in art.diagnostics), \
        [x.message for x in art.diagnostics]
    still_serving(d, "after-large-sizes")


def test_a_computation_claiming_elements_of_an_empty_input_gets_no_native_code(daemon):
    """pow of an input with no element whose result claims 3 (found by
    fuzz_native): the verifier left loads from empty buffers unchecked, so
    the kernel read 3 elements past an empty tensor's data. A load from a
    buffer without elements in a loop that runs now fails verification."""
    import torch
    d = daemon()
    gm = compiled.capture(lambda x: torch.pow(x, 2) + 1, (torch.randn(0),))
    for v in gm.graph.tensor_values:
        if v.name in ("pow_1", "add"):
            v.meta.sizes[0].as_int = 3
    from compiled import target
    _, r = run_compile(d.stub(), compile_request(gm, target=target.target_message()))
    art = artifact_pb2.Artifact()
    art.ParseFromString(r.artifact)
    assert not art.HasField("native_program")
    assert any("no element" in x.message and "verifier" in x.message
               for x in art.diagnostics), [x.message for x in art.diagnostics]
    still_serving(d, "after-empty-input")


def test_graphs_without_nodes_compile(daemon):
    """`lambda x: x` and `lambda: None` are programs: valid, documented."""
    d = daemon()
    ident = compiled.capture(lambda x: x, (__import__("torch").randn(3),))
    assert len(ident.graph.nodes) == 0 and len(ident.graph.outputs) == 1
    _, r = run_compile(d.stub(), compile_request(ident))
    assert r.served == SERVED.SERVED_COMPILED
    none = compiled.capture(lambda: None, ())
    assert none.graph.outputs[0].WhichOneof("kind") == "as_none"
    _, r = run_compile(d.stub(), compile_request(none))
    assert r.served == SERVED.SERVED_COMPILED


def test_stats_refuses_garbage_bytes(daemon):
    d = daemon()
    stats = d.channel().unary_unary("/compiled.v1.Compiler/Stats")
    for junk in (b"\xff\xff\xff\xff", b"\x0a\x05abc", b"\x0b"):
        details, _ = refused(lambda: stats(junk, timeout=10))
        assert "not a valid compiled.v1.StatsRequest message" in details, details
    assert stats(b"", timeout=10)  # an empty StatsRequest
    assert stats(b"\x08\x01", timeout=10)  # an unknown field: a newer client
