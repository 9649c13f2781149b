"""A fixed subset of PyTorch's OpInfo samples, compiled against eager.

tests/python/difftest.py runs every float32 OpInfo operator (`make
test-opinfo`); this runs 25 common ones in the regular suite: each must
match eager on all its samples (up to 6) and run natively with no fallback
node.
"""

import pytest

import difftest

OPS = ["add", "mul", "sub", "div.no_rounding_mode", "abs", "neg", "exp", "log", "sqrt",
       "tanh", "sigmoid", "pow", "where", "clamp", "sum", "mean", "amax", "argmax", "var",
       "nn.functional.layer_norm", "nn.functional.gelu", "nn.functional.silu",
       "nn.functional.leaky_relu", "addmm", "permute"]


@pytest.fixture(scope="module")
def ops():
    return {difftest.op_name(o): o for o in difftest.float32_ops(difftest.load_op_db())}


def test_the_database_loads(ops):
    # The runner finds hundreds of float32 operators (602 in torch 1.13).
    assert len(ops) > 400
    assert set(OPS) <= set(ops)


@pytest.mark.parametrize("name", OPS)
def test_op_matches_eager_natively(server, ops, name):
    r = difftest.run_op(ops[name], server)
    assert r["samples"] > 0, r
    assert not r["wrong"], f"{name}: wrong results: {r['wrong']}"
    assert r["status"] == "native", f"{name}: {r['status']}: {r['detail']}"
