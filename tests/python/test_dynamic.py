"""Dynamic shapes (issue 38): one artifact for every size of a symbolic
dimension.

The graphs are symbolic (tests/python/symgraph.py makes them from static
captures of real programs). Each test compiles ONE artifact and runs it at
many sizes against eager: 0 where eager allows, 1, primes, sizes around
the vector width and the tile, a large one.
"""

import hashlib
import os

import pytest
import torch

import compiled
import compiled.native
import daemon_util
import symgraph
from compiled.v1 import artifact_pb2, compiled_pb2


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = daemon_util.Daemon(tmp_path_factory.mktemp("dynamic"), "--verify-ir").start()
    yield d
    d.stop(check=False)  # native code for symbolic graphs: later commits


def compile_graph(server, gm, **options):
    client = compiled.Client(server.address)
    outcome = client.compile_outcome(gm, compiled_pb2.CompileOptions(**options),
                                     target=compiled.native.target_message())
    art = artifact_pb2.Artifact.FromString(outcome.artifact)
    return outcome, art


def mlp(x, w1, b1, w2):
    return torch.relu(x @ w1 + b1) @ w2


def mlp_args(B, T):
    g = torch.Generator().manual_seed(B * 100 + T)
    return (torch.randn(B, T, 8, generator=g), torch.randn(8, 16, generator=g),
            torch.randn(16, generator=g), torch.randn(16, 4, generator=g))


# ---- the key and the artifact of a symbolic graph ----

def test_symbol_names_and_hints_change_neither_key_nor_artifact(server):
    gm, _, _ = symgraph.symbolize(mlp, mlp_args, {"B": (5, 7, 11), "T": (3, 4, 6)})
    # other names, swapped in the client's numbering, other hints
    other = symgraph.rename(gm, {"B": "s7", "T": "s2"}, hint_shift=13)
    assert other.SerializeToString() != gm.SerializeToString()
    o1, a1 = compile_graph(server, gm)
    o2, a2 = compile_graph(server, other)
    assert o1.key == o2.key
    # the artifact names symbols by the key's numbering, never the client's
    for meta in (v.tensor for v in a1.program.values if v.WhichOneof("kind") == "tensor"):
        for s in list(meta.sizes) + list(meta.strides):
            if s.WhichOneof("kind") == "as_expr":
                assert "B" not in s.as_expr.expr and "T" not in s.as_expr.expr, s.as_expr.expr
                assert not s.as_expr.has_hint
    # compiled afresh from the renamed graph: the same bytes
    server2 = daemon_util.Daemon(server.dir + "-2", "--verify-ir")
    os.makedirs(server2.dir, exist_ok=True)
    server2.start()
    try:
        o3, a3 = compile_graph(server2, other)
    finally:
        server2.stop(check=False)
    assert o3.key == o1.key
    assert hashlib.sha256(o3.artifact).hexdigest() == hashlib.sha256(o1.artifact).hexdigest()
