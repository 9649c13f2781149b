"""Symbolic graphs for tests, made from static captures (issue 38).

The daemon's part of dynamic shapes is tested with graphs whose sizes are
symbols. The client's capture of Dynamo's symbolic graphs is another piece
of work; these tests need graphs whose symbolic metadata is exactly what a
capture would say, for real programs, without it. :func:`symbolize` makes
them from static captures (``compiled.trace``): it traces the program at
two values of each symbol, at every combination (2^k traces for k symbols),
and fits every size, stride, offset and int argument that changes as a
multilinear polynomial in the symbols with integer coefficients (a stride
of a ``[B, T, C]`` tensor is ``C*T``), checked at a third value of each
symbol. What does not change stays an int; what changes otherwise (a
``floor``, a square) is an error of the test.

An int argument that changes (the sizes a ``flatten`` passes to ``view``)
becomes a symbolic argument naming a SymInt value, as in an AOTAutograd
graph of a dynamic program: a symbol is the value of an
``aten::sym_size.int`` node of the first input whose size it is, products
and sums are values of ``_operator::mul`` and ``_operator::add`` nodes
(pseudo-operators with schemas of their own: how the client will encode
Dynamo's ``operator.mul`` nodes is its business; the daemon reads a
SymInt value's expression, not its node). A ``-1`` in a view's sizes is
a literal and stays one.

    gm, constants, out_spec = symbolize(lambda x, w: x @ w,
                                        lambda B: (torch.randn(B, 8),
                                                   torch.randn(8, 4)),
                                        {"B": (5, 7, 11)})

Symbol names are the caller's; the daemon renames them (s0, s1, ... by
first appearance in the inputs) and ignores the hints, which are the first
sample values.
"""

import fractions
import itertools
from typing import Callable, Dict, List, Sequence, Tuple

import torch

import compiled
from compiled.v1 import graph_pb2

__all__ = ["symbolize", "fit", "expr_text"]


def _poly_mul(p, q):
    r = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            m = tuple(sorted(m1 + m2))
            r[m] = r.get(m, 0) + c1 * c2
    return {m: c for m, c in r.items() if c != 0}


def fit(names: Sequence[str], lo: Dict[str, int], hi: Dict[str, int],
        values: Dict[Tuple[int, ...], int]):
    """The multilinear polynomial with values[bits] at the corner that takes
    hi[name] where bits has a 1, lo[name] elsewhere: {monomial (sorted
    tuple of names): integer coefficient}; None when a coefficient is not
    an integer."""
    k = len(names)
    # Moebius transform over the corners: v = sum_T d_T prod_{i in T} t_i
    d = {}
    for bits in itertools.product((0, 1), repeat=k):
        total = 0
        for sub in itertools.product((0, 1), repeat=k):
            if all(s <= b for s, b in zip(sub, bits)):
                sign = (-1) ** (sum(bits) - sum(sub))
                total += sign * values[sub]
        d[bits] = total
    # t_i = (x_i - lo_i) / (hi_i - lo_i)
    poly = {}
    for bits, c in d.items():
        if c == 0:
            continue
        term = {(): fractions.Fraction(c)}
        for i, b in enumerate(bits):
            if b:
                span = hi[names[i]] - lo[names[i]]
                term = _poly_mul(term, {(names[i],): fractions.Fraction(1, span),
                                        (): fractions.Fraction(-lo[names[i]], span)})
        for m, v in term.items():
            poly[m] = poly.get(m, 0) + v
    poly = {m: c for m, c in poly.items() if c != 0}
    if any(c.denominator != 1 for c in poly.values()):
        return None
    return {m: int(c) for m, c in poly.items()}


def evaluate(poly, sizes: Dict[str, int]) -> int:
    total = 0
    for m, c in poly.items():
        v = c
        for n in m:
            v *= sizes[n]
        total += v
    return total


def expr_text(poly) -> str:
    """The polynomial in the graph grammar: "4*B*T + T + 1"."""
    terms = sorted(poly.items(), key=lambda mc: (-len(mc[0]), mc[0]))
    out = ""
    for m, c in terms:
        factors = list(m)
        if not factors:
            body = str(abs(c))
        elif abs(c) == 1:
            body = "*".join(factors)
        else:
            body = f"{abs(c)}*" + "*".join(factors)
        if not out:
            out = ("-" if c < 0 else "") + body
        else:
            out += (" - " if c < 0 else " + ") + body
    return out or "0"


def _is_symbol(poly):
    """The name when poly is a single symbol, else None."""
    if len(poly) == 1:
        (m, c), = poly.items()
        if c == 1 and len(m) == 1:
            return m[0]
    return None


class _Fitter:
    def __init__(self, names, lo, hi, check, traces, check_trace):
        self.names, self.lo, self.hi, self.check = names, lo, hi, check
        self.traces = traces            # corner bits -> GraphModule
        self.check_trace = check_trace  # the third point
        self.symbol_args = {}           # symbol name -> SymIntValue name

    def poly(self, getter, where):
        values = {bits: getter(gm) for bits, gm in self.traces.items()}
        if len(set(values.values())) == 1:
            return None  # constant
        p = fit(self.names, self.lo, self.hi, values)
        want = getter(self.check_trace)
        if p is None or evaluate(p, self.check) != want:
            raise ValueError(f"{where}: {sorted(values.items())} (and {want} at "
                             f"{self.check}) is not a multilinear polynomial in "
                             f"{self.names} with integer coefficients")
        return p


def _all(msgs, path):
    """The sub-message at `path` (a list of (field, index)) in each."""
    out = []
    for m in msgs:
        for field, index in path:
            m = getattr(m, field)
            if index is not None:
                m = m[index]
        out.append(m)
    return out


def symbolize(fn: Callable, make_args: Callable[..., tuple],
              symbols: Dict[str, Sequence[int]]):
    """A symbolic GraphModule of ``fn`` (see the module docstring):
    ``make_args(**sizes)`` builds example inputs for one value of each
    symbol; ``symbols`` gives each symbol's sample values (at least 3
    distinct: the first is the hint, the first two are fitted, the third
    checks). Returns ``(graph_module, constants, out_spec)`` of the first
    sample's trace (constants and out_spec as ``compiled.trace`` gives
    them)."""
    names = list(symbols)
    for n, v in symbols.items():
        if len(set(v[:3])) < 3:
            raise ValueError(f"symbol {n}: give 3 distinct sample values")
    lo = {n: symbols[n][0] for n in names}
    hi = {n: symbols[n][1] for n in names}
    check = {n: symbols[n][2] for n in names}
    traces, base = {}, None
    for bits in itertools.product((0, 1), repeat=len(names)):
        sizes = {n: (hi if b else lo)[n] for n, b in zip(names, bits)}
        captured = compiled.trace(fn, make_args(**sizes))
        traces[bits] = captured.graph_module
        if not any(bits):
            base = captured
    check_trace = compiled.trace(fn, make_args(**check)).graph_module
    ref = graph_pb2.GraphModule()
    ref.CopyFrom(base.graph_module)
    for gm in list(traces.values()) + [check_trace]:
        if len(gm.graph.nodes) != len(ref.graph.nodes) or \
                len(gm.graph.tensor_values) != len(ref.graph.tensor_values):
            raise ValueError("the program's graph changes with the sizes")
    msgs = [traces[b] for b in sorted(traces)]
    order = sorted(traces)
    f = _Fitter(names, lo, hi, check, dict(zip(order, msgs)), check_trace)

    def symbolize(sub):
        """Where the SymInt at `sub` follows a polynomial of the sizes, it
        becomes that expression, its value the hint."""
        p = f.poly(lambda gm: _all([gm], sub)[0].as_int, str(sub))
        if p is not None:
            s = _all([ref], sub)[0]
            hint = s.as_int
            s.ClearField("as_int")
            s.as_expr.expr = expr_text(p)
            s.as_expr.has_hint = True
            s.as_expr.hint = hint

    def symint_fields(path, meta_msgs, meta_ref):
        for fname in ("sizes", "strides"):
            for i in range(len(getattr(meta_ref, fname))):
                symbolize(path + [(fname, i)])
        symbolize(path + [("storage_offset", None)])

    for vi, tv in enumerate(ref.graph.tensor_values):
        symint_fields([("graph", None), ("tensor_values", vi), ("meta", None)], None, tv.meta)

    # where each symbol can be read: the first input dim whose size it is
    source = {}
    inputs_by_name = {}
    for ii, spec in enumerate(ref.graph.inputs):
        if spec.arg.WhichOneof("kind") == "as_tensor":
            inputs_by_name[spec.arg.as_tensor.name] = ii
    for tv in ref.graph.tensor_values:
        if tv.name not in inputs_by_name:
            continue
        for d, s in enumerate(tv.meta.sizes):
            if s.WhichOneof("kind") == "as_expr" and s.as_expr.expr in names:
                source.setdefault(s.as_expr.expr, (inputs_by_name[tv.name], tv.name, d))

    sym_nodes = []

    def sym_value(name):
        if name not in f.symbol_args:
            if name not in source:
                raise ValueError(f"symbol {name} is no input's size: a symbolic argument "
                                 "cannot be defined")
            _, tensor, dim = source[name]
            value = f"sym_size_{name}"
            f.symbol_args[name] = value
            node = graph_pb2.Node(target="aten::sym_size.int")
            a = node.inputs.add(name="self", kind=graph_pb2.ARGUMENT_KIND_POSITIONAL)
            a.arg.as_tensor.name = tensor
            a = node.inputs.add(name="dim", kind=graph_pb2.ARGUMENT_KIND_POSITIONAL)
            a.arg.as_int = dim
            node.outputs.add().as_sym_int.as_name = value
            sym_nodes.append(node)
            v = ref.graph.sym_int_values.add(name=value)
            v.value.as_expr.expr = name
            v.value.as_expr.has_hint = True
            v.value.as_expr.hint = lo[name]
        return f.symbol_args[name]

    arith_ops = set()

    def arith(op, a, b, text):
        """A SymInt node `op` (_operator::mul or add) of a and b (value
        names or ints), its value `text`; the value's name."""
        value = f"sym_{len(ref.graph.sym_int_values)}"
        arith_ops.add(op)
        node = graph_pb2.Node(target=f"_operator::{op}")
        for pname, x in (("a", a), ("b", b)):
            na = node.inputs.add(name=pname, kind=graph_pb2.ARGUMENT_KIND_POSITIONAL)
            if isinstance(x, int):
                na.arg.as_sym_int.as_int = x
            else:
                na.arg.as_sym_int.as_name = x
        node.outputs.add().as_sym_int.as_name = value
        sym_nodes.append(node)
        v = ref.graph.sym_int_values.add(name=value)
        v.value.as_expr.expr = text
        v.value.as_expr.has_hint = True
        v.value.as_expr.hint = evaluate_text(text)
        return value

    def evaluate_text(text):
        return eval(text, {}, dict(lo))  # our own expr_text output

    def poly_value(p):
        """A SymIntValue holding polynomial p (sym_size nodes for its
        symbols, _operator::mul/add nodes for its products and sums, as
        Dynamo's graphs compute them)."""
        sym = _is_symbol(p)
        if sym is not None:
            return sym_value(sym)
        acc = None
        for m, c in sorted(p.items(), key=lambda mc: (-len(mc[0]), mc[0])):
            term = None
            for n in m:
                term = sym_value(n) if term is None else \
                    arith("mul", term, sym_value(n), expr_text({m[:m.index(n) + 1]: 1}))
            if term is None:
                term = c
            elif c != 1:
                term = arith("mul", term, c, expr_text({m: c}))
            acc = term if acc is None else arith("add", acc, term, expr_text(
                {mm: cc for mm, cc in p.items()
                 if (-len(mm), mm) <= (-len(m), m)}))
        return acc

    for ni, node in enumerate(ref.graph.nodes):
        for ai, na in enumerate(node.inputs):
            kind = na.arg.WhichOneof("kind")
            base_path = [("graph", None), ("nodes", ni), ("inputs", ai), ("arg", None)]
            if kind == "as_int":
                p = f.poly(lambda gm: _all([gm], base_path)[0].as_int, f"node {ni} {na.name}")
                if p is not None:
                    na.arg.ClearField("as_int")
                    na.arg.as_sym_int.as_name = poly_value(p)
            elif kind == "as_ints":
                polys = []
                for j in range(len(na.arg.as_ints.items)):
                    polys.append(f.poly(lambda gm, j=j: _all([gm], base_path)[0].as_ints.items[j],
                                        f"node {ni} {na.name}[{j}]"))
                if any(p is not None for p in polys):
                    items = list(na.arg.as_ints.items)
                    na.arg.ClearField("as_ints")
                    lst = na.arg.as_sym_ints
                    for j, p in enumerate(polys):
                        item = lst.items.add()
                        if p is None:
                            item.as_int = items[j]
                            continue
                        item.as_name = poly_value(p)
    if sym_nodes:
        nodes = list(ref.graph.nodes)
        del ref.graph.nodes[:]
        ref.graph.nodes.extend(sym_nodes + nodes)
        if not any(op.name == "aten::sym_size.int" for op in ref.operators):
            ref.operators.add(name="aten::sym_size.int",
                              schema=str(torch.ops.aten.sym_size.int._schema))
        for op in sorted(arith_ops):
            ref.operators.add(name=f"_operator::{op}",
                              schema=f"_operator::{op}(SymInt a, SymInt b) -> SymInt")
    return ref, base.constants, base.out_spec


def rename(gm, mapping: Dict[str, str], hint_shift: int = 0):
    """A copy of a symbolic GraphModule with its symbols renamed (whole
    identifiers) and every hint moved by `hint_shift`: the same graph to
    the key."""
    import re
    out = graph_pb2.GraphModule()
    out.CopyFrom(gm)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, mapping)) + r")\b")

    def fix(expr_msg):
        expr_msg.expr = pattern.sub(lambda m: mapping[m.group(1)], expr_msg.expr)
        if expr_msg.has_hint:
            expr_msg.hint += hint_shift

    for tv in out.graph.tensor_values:
        for s in list(tv.meta.sizes) + list(tv.meta.strides) + [tv.meta.storage_offset]:
            if s.WhichOneof("kind") == "as_expr":
                fix(s.as_expr)
    for v in out.graph.sym_int_values:
        if v.value.WhichOneof("kind") == "as_expr":
            fix(v.value.as_expr)
    return out
