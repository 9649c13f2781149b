#!/usr/bin/python3
"""Writes the committed seeds of fuzz_graph: graphs at and past the limits.

The captured graphs in tests/data/graphs are small and shallow, and random
mutation of them never grew a symbolic size into thousands of terms or a
chain of views into hundreds of links: the stack overflows of issue 9 sat
just out of the fuzzer's reach. These seeds start it there, each on one side
of a limit, so mutations explore both:

  sum_9999, sum_10001       a size that is a sum of ~10,000 symbols (the node
                            limit is 10,000 nodes)
  parens_64, parens_65      nested parentheses (the depth limit is 64)
  neg_63, neg_64            prefix minus signs
  floordiv_64, pow_64       left- and right-nested chains of binary operators
  max_3000, mixed           a wide call; every operator of the grammar
  symfloat_symbool          SymFloat/SymBool values with expressions
  view_chain_300            views of views of a written input: the
                            functionalization's replay recursion
  strings_utf8              names in UTF-8 (the string checks' good side)

Run from the repository root after `make`:
  PYTHONPATH=client/python /usr/bin/python3 tests/fuzz/make_graph_seeds.py
The seeds are committed; rerun only to change them.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import biggraph  # noqa: E402  (tests/python: view_chain, shared with its test)
from compiled.v1 import graph_pb2  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus", "graph")


def load(name):
    gm = graph_pb2.GraphModule()
    with open(os.path.join(ROOT, "tests", "data", "graphs", name + ".pb"), "rb") as f:
        gm.ParseFromString(f.read())
    return gm


def with_size(expr):
    """The MLP graph with size 0 of its first tensor value symbolic."""
    gm = load("mlp")
    s = gm.graph.tensor_values[0].meta.sizes[0]
    s.as_expr.expr = expr
    s.as_expr.hint = 16
    s.as_expr.has_hint = True
    return gm


def sym_values():
    gm = load("mlp")
    g = gm.graph
    f = g.sym_float_values.add(name="f0")
    f.value.as_expr.expr = "s0 / 2.5 + floor(s1 * 0.5)"
    b = g.sym_bool_values.add(name="b0")
    b.value.as_expr.expr = "not s0 > 2 and (s1 == 4 or s2 != 0)"
    g.inputs.add(kind=graph_pb2.INPUT_KIND_USER_INPUT).arg.as_sym_float.as_name = "f0"
    g.inputs.add(kind=graph_pb2.INPUT_KIND_USER_INPUT).arg.as_sym_bool.as_name = "b0"
    return gm


def utf8_names():
    gm = load("mlp")
    gm.graph.nodes[0].metadata.module_path = "\u00e9\u20ac\U0001F600"
    gm.producer = "caf\u00e9"
    return gm


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        "sum_9999": with_size("+".join(["s0"] * 9999)),
        "sum_10001": with_size("+".join(["s%d" % (i % 7) for i in range(10001)])),
        "parens_64": with_size("(" * 64 + "s0 + 1" + ")" * 64),
        "parens_65": with_size("(" * 65 + "s0" + ")" * 65),
        "neg_63": with_size("-" * 63 + "s0"),
        "neg_64": with_size("-" * 64 + "s0"),
        "floordiv_64": with_size("//".join(["s0"] * 64)),
        "pow_64": with_size("**".join(["2"] * 64)),
        "max_3000": with_size("max(%s)" % ", ".join(["s%d" % i for i in range(3000)])),
        "mixed": with_size("max(s0, 2) * -s1 // 3 % 5 + 2 ** abs(s2) - ceil(s0 / 2.0)"
                           " + min(floor(s3), 7)"),
        "symfloat_symbool": sym_values(),
        "view_chain_300": biggraph.view_chain(300),
        "strings_utf8": utf8_names(),
    }
    for name, gm in seeds.items():
        with open(os.path.join(OUT, name + ".pb"), "wb") as f:
            f.write(gm.SerializeToString())
    print("%d seeds in %s" % (len(seeds), OUT))


if __name__ == "__main__":
    main()
