"""Symbolic sizes on the client side (issue 38, docs/dynamic-shapes.md).

Graphs whose sizes are symbols reach the client two ways: Dynamo hands the
``torch.compile`` backend AOTAutograd graphs whose FakeTensors have SymInt
sizes and whose placeholders may be SymInts (``dynamic=True``,
``mark_dynamic``, automatic dynamic); :func:`compiled.compile` with
``dynamic=True`` (or ``None``, after a dimension changed) traces the program
itself on FakeTensors whose chosen dimensions are symbols
(:func:`trace_symbolic`). Either graph is encoded with its sizes as the wire
format's expressions (:func:`expr_text`: sympy -> the grammar of
docs/graph-format.md), the example values as hints, which the key ignores.

Nothing here runs in the hot path of a call but :class:`ShapeGuards`, the
check of the facts the trace assumed about the symbols (Python branches on
sizes), evaluated once per new call signature.
"""

from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional, Sequence

import torch

from . import CaptureError, formats

__all__ = ["expr_text", "sym_meta", "SYM_OPERATORS", "trace_symbolic", "ShapeGuards"]


class Unencodable(CaptureError):
    """A symbolic value the wire format cannot carry (a rational, a float
    function of a size...)."""


# SymInt arithmetic Dynamo and make_fx record as Python's operators: the
# graph names them _operator::<name> (docs/graph-format.md), the runtime runs
# Python's operator again (runtime._SYM_INT_OPERATORS).
SYM_OPERATORS = {
    operator.add: ("_operator::add", "_operator::add(SymInt a, SymInt b) -> SymInt"),
    operator.sub: ("_operator::sub", "_operator::sub(SymInt a, SymInt b) -> SymInt"),
    operator.mul: ("_operator::mul", "_operator::mul(SymInt a, SymInt b) -> SymInt"),
    operator.floordiv: ("_operator::floordiv",
                        "_operator::floordiv(SymInt a, SymInt b) -> SymInt"),
    operator.mod: ("_operator::mod", "_operator::mod(SymInt a, SymInt b) -> SymInt"),
    operator.neg: ("_operator::neg", "_operator::neg(SymInt a) -> SymInt"),
}


def _paren(text: str) -> str:
    return text if text.lstrip("-").isalnum() else f"({text})"


def expr_text(expr, where: str) -> str:
    """A sympy integer expression over size symbols in the daemon's grammar
    (docs/graph-format.md): sums, products, natural powers (up to 8, as products), floor division,
    modulo, max and min. Everything else raises Unencodable naming
    ``where``."""
    import sympy
    if isinstance(expr, (int, sympy.Integer)):
        return str(int(expr))
    if isinstance(expr, sympy.Symbol):
        return expr.name
    name = type(expr).__name__
    args = expr.args
    if isinstance(expr, sympy.Add):
        return " + ".join(_paren(expr_text(a, where)) for a in args)
    if isinstance(expr, sympy.Mul):
        return "*".join(_paren(expr_text(a, where)) for a in args)
    if (isinstance(expr, sympy.Pow) or name == "PowByNatural") and \
            isinstance(args[1], sympy.Integer) and 0 <= int(args[1]) <= 8:
        # a product, which the daemon's loop IR states (it has no power:
        # the strides of an [N, C, H, H] input are C*H*H, H*H, H, 1)
        if int(args[1]) == 0:
            return "1"
        return "*".join([_paren(expr_text(args[0], where))] * int(args[1]))
    if name in ("FloorDiv", "CleanDiv"):
        return f"{_paren(expr_text(args[0], where))}//{_paren(expr_text(args[1], where))}"
    if name == "CeilDiv":  # -(-a // b)
        return f"-((-{_paren(expr_text(args[0], where))})//{_paren(expr_text(args[1], where))})"
    if name in ("Mod", "PythonMod"):
        return f"{_paren(expr_text(args[0], where))}%{_paren(expr_text(args[1], where))}"
    if name == "ModularIndexing":
        base, div, mod = (_paren(expr_text(a, where)) for a in args)
        return f"({base}//{div})%{mod}"
    if name in ("Max", "Min"):
        return f"{name.lower()}({', '.join(expr_text(a, where) for a in args)})"
    raise Unencodable(f"{where}: the symbolic size {expr} ({name}) has no form in the "
                      "wire format's expressions")


def _hint(s) -> Optional[int]:
    """The example value of a SymInt (its hint), or None."""
    try:
        node = s.node
        hint = node.hint
        if hint is None:
            hint = node.shape_env.size_hint(node.expr, allow_none=True)
        return None if hint is None else int(hint)
    except Exception:  # a hint is a courtesy: never worth a failure
        return None


def set_symint(msg, value, where: str) -> None:
    """Fill a graph_pb2.SymInt with an int or a SymInt (expression and hint)."""
    if isinstance(value, torch.SymInt):
        expr = value.node.expr
        import sympy
        if isinstance(expr, sympy.Integer):
            msg.as_int = int(expr)
            return
        msg.as_expr.expr = expr_text(expr, where)
        hint = _hint(value)
        if hint is not None:
            msg.as_expr.has_hint = True
            msg.as_expr.hint = hint
    else:
        msg.as_int = int(value)


def sym_meta(t: torch.Tensor, where: str):
    """graph_pb2.TensorMeta of a FakeTensor whose sizes, strides or offset
    may be SymInts."""
    from .v1 import graph_pb2
    meta = graph_pb2.TensorMeta()
    meta.dtype = formats.scalar_type(t.dtype, where)
    for d, size in enumerate(t.shape):
        set_symint(meta.sizes.add(), size, f"{where} size {d}")
    if t.layout == torch.strided:
        for d, stride in enumerate(t.stride()):
            set_symint(meta.strides.add(), stride, f"{where} stride {d}")
        set_symint(meta.storage_offset, t.storage_offset(), f"{where} storage offset")
    formats.set_device(meta.device, t.device)
    meta.requires_grad = False
    meta.layout = formats.layout_enum(t.layout, where)
    return meta


def is_symbolic(value) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in value.shape) or \
            any(isinstance(s, torch.SymInt) for s in value.stride()) or \
            isinstance(value.storage_offset(), torch.SymInt)
    return False


# ---- compiled.compile(..., dynamic=...) -------------------------------------

class ShapeGuards:
    """The facts a symbolic trace assumed about its symbols (``s0 >= 2``
    where the program branched on a size, equalities where two sizes met),
    as the ShapeEnv states them over the trace's inputs: ``check(inputs)``
    is True when a call's inputs satisfy all of them."""

    def __init__(self, shape_env, fakes: Sequence[Any]):
        self.shape_env = shape_env
        self.code = shape_env.produce_guards_expression(list(fakes), ignore_static=False)

    def check(self, inputs: Sequence[Any]) -> bool:
        if not self.code:
            return True
        return bool(self.shape_env.evaluate_guards_expression(self.code, list(inputs)))


def trace_symbolic(fn, module, state_paths, n_state: int, user_spec, flat: List[Any],
                   dynamic_dims: Dict[int, Sequence[int]]):
    """make_fx over ``fn`` on FakeTensors of ``flat`` (module state, then
    the user's leaves; every leaf a tensor) whose dims ``dynamic_dims[i]``
    are size symbols (module state stays static, as Dynamo keeps it).
    Returns (fx GraphModule, ShapeGuards)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import (DimDynamic, ShapeEnv,
                                                       StatelessSymbolicContext)
    import sys
    capture = sys.modules["compiled.capture"]  # the package's name is the function
    # no duck sizing: dims of equal sizes at the trace (a sequence length
    # of 128 and a model width of 128) stay independent symbols; where the
    # program needs two equal, the trace (or the daemon's BROADCAST guard)
    # says so
    shape_env = ShapeEnv(specialize_zero_one=True, duck_shape=False)
    mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=False)
    fakes = []
    with mode:
        for i, t in enumerate(flat):
            dims = set(dynamic_dims.get(i, ()))
            ctx = StatelessSymbolicContext(
                dynamic_sizes=[DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC
                               for d in range(t.dim())])
            fakes.append(mode.from_tensor(t, symbolic_context=ctx))
    with mode:
        gm = capture._trace_fx(fn, module, state_paths, n_state, user_spec, fakes)
    return gm, ShapeGuards(shape_env, fakes)
