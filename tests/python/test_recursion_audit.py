"""Every recursion in compiler/ is bounded, and stays on this list.

A client controls the shape of what the daemon parses and walks, so a
recursive function over client-controlled structure must be bounded by a
checked limit, or the stack is the limit (issue 9: a 150,000-term symbolic
sum overflowed it). This test builds the call graph of compiler/*.c with
GCC's -fcallgraph-info, finds every cycle (self- and mutual recursion), and
compares them with the list below, where each names its bound. A new
recursive function fails the test until it is added here with the limit that
bounds it (and a test that the limit holds).

Calls through function pointers are not in the graph: compiler/ uses them
only for gc_arg_each_value, gc_torch_overloads and qsort callbacks, none of
which recurses.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

SRC = os.environ.get(
    "COMPILED_SRC", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD = os.environ.get("COMPILED_BUILD", os.path.join(SRC, "build"))

# Each cycle of the call graph, as the set of its functions, and its bound.
BOUNDED = {
    frozenset({"symexpr.c:parse_or", "symexpr.c:parse_and", "symexpr.c:parse_not",
               "symexpr.c:parse_cmp", "symexpr.c:parse_sum", "symexpr.c:parse_prod",
               "symexpr.c:parse_unary", "symexpr.c:parse_atom", "symexpr.c:parse_call",
               "symexpr.c:parse_name"}):
        "recurses only at '(' and calls, counted against max_nesting "
        "(<= GC_SYMEXPR_MAX_DEPTH) before descending",
    frozenset({"gc_symexpr_print"}):
        "tree height <= GC_SYMEXPR_MAX_DEPTH, checked while parsing",
    frozenset({"symexpr.c:fmt_at", "symexpr.c:fmt_node"}):
        "gc_symexpr_format of a parsed tree: height <= GC_SYMEXPR_MAX_DEPTH, checked while parsing",
    frozenset({"key.c:hash_symexpr"}):
        "tree height <= max_nesting <= GC_SYMEXPR_MAX_DEPTH, checked while parsing",
    frozenset({"gc_arg_print"}):
        "one level: a list argument prints its items as single arguments",
    frozenset({"schema.c:parse_type", "schema.c:parse_base", "schema.c:parse_members",
               "schema.c:parse_composite"}):
        "type depth <= GC_SCHEMA_MAX_DEPTH, checked before descending",
    frozenset({"schema_print.c:put_type", "schema_print.c:put_members"}):
        "parsed type depth <= GC_SCHEMA_MAX_DEPTH",
    frozenset({"schema.c:collect_sets"}): "parsed type depth <= GC_SCHEMA_MAX_DEPTH",
    frozenset({"schema.c:type_writes"}): "parsed type depth <= GC_SCHEMA_MAX_DEPTH",
    frozenset({"validate.c:accepts"}): "parsed type depth <= GC_SCHEMA_MAX_DEPTH",
    frozenset({"validate.c:returns_ok"}): "parsed type depth <= GC_SCHEMA_MAX_DEPTH",
    frozenset({"fz_same_type"}): "parsed type depth <= GC_SCHEMA_MAX_DEPTH",
    frozenset({"fz_read_obj", "functionalize_views.c:read_obj_at",
               "functionalize_views.c:replay", "fz_map_arg"}):
        "read_obj nesting <= MAX_READ_NESTING (64); deeper keeps the eager form",
    frozenset({"wire.c:check_message"}):
        "message nesting <= GC_WIRE_MAX_DEPTH; the schemas are not recursive",
}


def short(title):
    """"/path/compiler/key.c:hash_arg" -> "key.c:hash_arg" (a static function);
    external functions are titled by their bare name."""
    path, sep, func = title.rpartition(":")
    return os.path.basename(path) + sep + func if sep else title


def call_graph(tmp_path):
    flags = subprocess.run(["pkg-config", "--cflags", "libprotobuf-c"],
                           capture_output=True, text=True).stdout.split()
    edges = {}
    for c in sorted(glob.glob(os.path.join(SRC, "compiler", "*.c"))):
        name = os.path.basename(c)[:-2]
        subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O0", "-fcallgraph-info",
                        "-I", SRC, "-I", os.path.join(BUILD, "gen"), *flags, "-c", c,
                        "-o", str(tmp_path / (name + ".o")), "-dumpdir",
                        str(tmp_path) + "/"], check=True, capture_output=True)
    for ci in glob.glob(str(tmp_path / "*.ci")):
        for line in open(ci):
            m = re.match(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"', line)
            if m:
                edges.setdefault(short(m.group(1)), set()).add(short(m.group(2)))
    return edges


def cycles(edges):
    """Strongly connected components with a cycle (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    nodes = set(edges) | {w for ws in edges.values() for w in ws}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1 or v in edges.get(v, ()):
                        out.append(frozenset(comp))
    return out


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_every_recursion_in_compiler_is_bounded(tmp_path):
    if not os.path.exists(os.path.join(BUILD, "gen", "compiled", "v1", "graph.pb-c.h")):
        pytest.skip("generated protobuf headers missing (run make)")
    found = set(cycles(call_graph(tmp_path)))
    assert found, "no recursion found at all: the call graph is broken"
    unlisted = [sorted(c) for c in found if c not in BOUNDED]
    assert not unlisted, ("recursive functions without a documented bound "
                          "(add them to BOUNDED with their limit): %s" % unlisted)
    gone = [sorted(c) for c in BOUNDED if c not in found]
    assert not gone, "listed recursions that no longer exist: %s" % gone


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
