"""Capture without computing: trace a program on shape-only tensors.

:func:`compiled.capture.trace` runs a program twice on real data (make_fx in
real mode, then a replay for the metadata): a resnet50 at batch 2 costs
several eager calls before its first compiled result. This module traces it
once, on tensors that have sizes, strides, dtypes and a device but no data,
and records the same graph make_fx would record, with every value's
metadata taken when the value is produced. resnet50: about 40 ms instead of
0.5 s (docs/capture.md).

How it works
------------
The program runs under :class:`_Tracer`, a ``TorchDispatchMode``, on
:class:`ShapeTensor` inputs: wrapper tensors that report the caller's device
(``cpu``) and layout to Python code but hold a ``meta`` tensor inside.
Every ATen call reaches the mode, which, like make_fx's proxy mode,

- decomposes CompositeImplicitAutograd operators (``func.decompose``);
- turns ``lift_fresh`` into ``lift_fresh_copy``;
- runs the operator on the meta tensors (factories with their device
  replaced by ``meta``), which computes the output sizes and strides;
  only meta functions that are the CPU kernel's own (or checked against
  it, :data:`_CHECKED`, corrected by :data:`_FIXES`) are trusted;
- records an FX node with the operator's own arguments, ``getitem`` nodes
  for the tensors of a tuple or list result, ``get_attr`` nodes for real
  tensors the program reaches (``_tensor_constant<i>``, as make_fx names
  them), and the metadata of each result;
- returns the input wrapper itself for results that are inputs (in-place
  and ``out=`` operators), so later uses refer to the new node, as in
  make_fx.

When the trace cannot vouch for the graph
-----------------------------------------
:class:`Untrusted` is raised and the caller takes the real trace instead
(and logs why at debug level), so a program is never captured differently
from what make_fx on real data records. That happens when

- an operator's result depends on tensor values (tagged
  ``data_dependent_output`` or ``dynamic_output_shape``, a ``.item()``, a
  Python ``bool`` of a tensor, an operator returning a number): real data
  would decide the graph;
- an operator has no meta function (except a short list of operators whose
  output shapes never depend on values, run on zero-filled tensors of the
  same layout instead, see :data:`_RUN_ON_ZEROS`), or its meta function is
  a separate implementation not checked for these arguments, or known to
  disagree (:data:`_DIFFERS`);
- anything raises (an error in the program: the real trace raises the
  error users expect);
- Python code reads data (``data_ptr()``, ``storage()``, ``numpy()``);
- a value requires grad (this path serves inference captures; autograd
  metadata comes from the real trace);
- an input is not a strided CPU tensor.

The stack trace and module path of every node are recorded as in the real
trace.
"""

from __future__ import annotations

import builtins
import contextlib
import keyword
import operator
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.utils._mode_utils import no_dispatch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["ShapeTensor", "Untrusted", "eligible", "trace"]

_aten = torch.ops.aten
_META = torch.device("meta")
_CPU = torch.device("cpu")
_DATA_DEPENDENT = torch.Tag.data_dependent_output
_DYNAMIC_SHAPE = torch.Tag.dynamic_output_shape

# Operators without a meta function in torch 1.13 whose result layout is a
# function of the input layouts and the non-tensor arguments alone (never of
# tensor values): run on zero-filled tensors to learn the output metadata.
# These are the fused inference paths nn.MultiheadAttention and
# nn.TransformerEncoderLayer take under no_grad.
_RUN_ON_ZEROS = frozenset(op for op in (
    getattr(getattr(_aten, "_native_multi_head_attention", None), "default", None),
    getattr(getattr(_aten, "_transformer_encoder_layer_fwd", None), "default", None),
    getattr(getattr(_aten, "_masked_softmax", None), "default", None),
) if op is not None)


def _batch_norm_eval(out, args, kwargs):
    """native_batch_norm: in eval mode the CPU kernel returns empty saved
    statistics; the meta function returns them with C elements."""
    training = args[5] if len(args) > 5 else kwargs.get("training")
    if training:
        return out
    empty = torch.empty((0,), dtype=out[1].dtype, device=_META)
    return (out[0], empty, torch.empty((0,), dtype=out[2].dtype, device=_META))


def _layer_norm_contiguous(out, args, kwargs):
    """native_layer_norm: the CPU kernel writes a contiguous result
    whatever the input's layout; the meta function keeps the layout."""
    y = out[0]
    return (torch.empty(y.shape, dtype=y.dtype, device=_META),) + tuple(out[1:])


def _batch_norm_backward_mask(out, args, kwargs):
    """native_batch_norm_backward: the CPU kernel leaves the results its
    output_mask does not ask for undefined; the meta function computes
    grad_input whatever the mask says."""
    mask = args[9] if len(args) > 9 else kwargs.get("output_mask")
    return tuple(o if m else None for o, m in zip(out, mask))


def _convolution_channels_last(out, args, kwargs):
    """convolution: torch 2's CPU kernel returns a channels-last result
    (channels_last_3d in 3-D) when the input or the weight suggests that
    memory format, its meta function a contiguous one (torch 2.13: 192
    cases of dtypes, groups, strides, batch and channel counts of 1 and
    ambiguous layouts agree with this rule)."""
    a = _arguments(_aten.convolution.default, args, kwargs)
    if out.dim() not in (4, 5) or a.get("transposed"):
        return out
    from torch._prims_common import suggest_memory_format
    cl = torch.channels_last if out.dim() == 4 else torch.channels_last_3d
    if cl not in (suggest_memory_format(_meta_like(a["input"])),
                  suggest_memory_format(_meta_like(a["weight"]))):
        return out
    return torch.empty(out.shape, dtype=out.dtype, device=_META).contiguous(memory_format=cl)


# Corrections of meta functions whose result layout differs from the CPU
# kernel's (torch 1.13's, and torch 2's convolution): (out, args, kwargs) -> out.
_FIXES = {
    _aten.convolution.default: _convolution_channels_last,
    _aten.native_batch_norm.default: _batch_norm_eval,
    _aten.native_layer_norm.default: _layer_norm_contiguous,
    _aten.native_batch_norm_backward.default: _batch_norm_backward_mask,
}

def _arguments(func, args, kwargs) -> dict:
    """The operator's arguments by parameter name."""
    bound = dict(kwargs)
    for a, v in zip(func._schema.arguments, args):
        bound[a.name] = v
    return bound


def _convolution_backward_contiguous(args, kwargs) -> bool:
    a = _arguments(_aten.convolution_backward.default, args, kwargs)
    return (not a.get("transposed") and a["grad_output"].is_contiguous()
            and a["input"].is_contiguous() and a["weight"].is_contiguous())


def _convolution_backward_meta(args, kwargs):
    """convolution_backward has no meta function in torch 1.13. For a
    convolution that is not transposed, on contiguous arguments, the CPU
    kernel returns grad_input and grad_weight contiguous, with the input's
    and the weight's sizes, grad_bias with one element per output channel,
    and None for each result output_mask does not ask for (checked on 1-3
    spatial dimensions, groups, strides, padding and dilation by
    tests/python/test_metatrace.py)."""
    a = _arguments(_aten.convolution_backward.default, args, kwargs)
    g, x, w = a["grad_output"], a["input"], a["weight"]
    shapes = (x.shape, w.shape, (g.shape[1],))
    return tuple(torch.empty(s, dtype=g.dtype, device=_META) if m else None
                 for s, m in zip(shapes, a["output_mask"]))


# Operators without a meta function in torch 1.13 whose result layouts the
# rule computes, for the arguments its condition accepts:
# func -> (condition(args, kwargs), rule(args, kwargs) -> out).
_META_RULES = {
    _aten.convolution_backward.default: (_convolution_backward_contiguous,
                                         _convolution_backward_meta),
}

# Operators whose meta function and CPU kernel disagree in ways not
# corrected above (found by tests/python/metatrace_diff.py): never trusted.
_DIFFERS = frozenset(op for op in (
    _aten.var_mean.correction,             # strides of kept dimensions
    _aten._linalg_slogdet.default,         # strides of empty results
    _aten._embedding_bag_forward_only.default,  # offset2bag, max_indices sizes
    _aten._embedding_bag.default,
))


def _dispatch_source(table: str, key: str) -> str:
    """Where the kernel for dispatch ``key`` was registered ("" if none)."""
    for line in table.splitlines():
        if line.startswith(key + ": "):
            return line[len(key) + 2:].split(" [", 1)[0]
    return ""


_META_KINDS: Dict[Any, str] = {}


def _source_kind(name: str) -> str:
    """_meta_kind for the operator overload ``name`` ("aten::abs.out");
    "" when there is no such overload."""
    table = torch._C._dispatch_dump_table(name)
    if not table:
        return ""
    meta, cpu = _dispatch_source(table, "Meta"), _dispatch_source(table, "CPU")
    if meta.endswith("RegisterMeta.cpp") or "RegisterMeta.cpp:" in meta:
        return "same"
    if meta and meta == cpu:
        return "same"
    return "other"


def _out_overloads(schema) -> List[str]:
    """The out= overloads a composite kernel for ``schema`` may call: abs ->
    abs.out, logical_and_ -> logical_and.out, bernoulli.Tensor ->
    bernoulli.Tensor_out."""
    base = schema.name.rstrip("_")
    names = [base + ".out"]
    if schema.overload_name:
        names.append(f"{base}.{schema.overload_name}_out")
    return names


def _meta_kind(func) -> str:
    """How far ``func``'s meta function can be trusted to lay its results out
    as its CPU kernel does:

    - "same": the Meta kernel is a structured kernel's meta function
      (RegisterMeta.cpp; the CPU kernel runs the same code to allocate its
      outputs), or Meta and CPU run one and the same kernel (composite
      kernels, views), and a composite kernel's out= overload is "same" too;
    - "other": a separate implementation (a Python meta registration, or a
      composite kernel where CPU has its own), or a composite kernel that
      calls an out= overload whose meta function is one (torch 1.13's abs
      and logical_and/or/xor/not: the composite allocates an empty result
      and the out= meta function resizes it contiguous, where the CPU kernel
      follows the input's strides): trusted only for the operators and
      layouts in _CHECKED, verified by tests/python/test_metatrace.py.
    """
    kind = _META_KINDS.get(func)
    if kind is None:
        schema = func._schema
        name = schema.name + ("." + schema.overload_name if schema.overload_name else "")
        kind = _source_kind(name)
        if kind == "same" and "CompositeExplicitAutograd" in _dispatch_source(
                torch._C._dispatch_dump_table(name), "Meta"):
            if any(_source_kind(o) == "other" for o in _out_overloads(schema)):
                kind = "other"
        kind = kind or "other"
        _META_KINDS[func] = kind
    return kind


def _contiguous_inputs(args, kwargs) -> bool:
    for v in list(args) + list(kwargs.values()):
        if isinstance(v, torch.Tensor) and not v.is_contiguous():
            return False
    return True


def _any_layout(args, kwargs) -> bool:
    return True


def _dense_input(args, kwargs) -> bool:
    """The first argument is contiguous or channels-last contiguous."""
    x = args[0]
    return x.is_contiguous() or (x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last))


def _dense_grad_and_input(args, kwargs) -> bool:
    """The first two arguments (a gradient and the forward's input) both
    contiguous, or both channels-last contiguous."""
    g, x = args[0], args[1]
    if g.is_contiguous() and x.is_contiguous():
        return True
    cl = torch.channels_last
    return (g.dim() == 4 and x.dim() == 4 and g.is_contiguous(memory_format=cl)
            and x.is_contiguous(memory_format=cl))


def _adaptive_pool(args, kwargs) -> bool:
    """Contiguous input, or a 1x1 output (global pooling) on any layout."""
    size = args[1] if len(args) > 1 else kwargs.get("output_size")
    return args[0].is_contiguous() or list(size) == [1, 1]


def _convolution(args, kwargs) -> bool:
    """Any layout, except for a transposed convolution (contiguous only)."""
    transposed = args[6] if len(args) > 6 else kwargs.get("transposed", False)
    return not transposed or _contiguous_inputs(args, kwargs)


# Operators whose meta function is a separate implementation (see
# _meta_kind), checked against the CPU kernel on the layouts the condition
# admits: operator -> condition on the arguments.
_CHECKED = {
    _aten.convolution.default: _convolution,
    _aten.native_batch_norm.default: _dense_input,    # with _batch_norm_eval
    _aten.native_batch_norm_backward.default: _dense_grad_and_input,  # with its mask
    _aten.native_layer_norm.default: _any_layout,      # with _layer_norm_contiguous
    _aten.roll.default: _contiguous_inputs,
    _aten.relu.default: _any_layout,
    _aten._adaptive_avg_pool2d.default: _adaptive_pool,
    # composites whose out= meta function lays results out contiguous
    _aten.abs.default: _contiguous_inputs,
    _aten.logical_not.default: _contiguous_inputs,
    _aten.logical_and.default: _contiguous_inputs,
    _aten.logical_or.default: _contiguous_inputs,
    _aten.logical_xor.default: _contiguous_inputs,
    _aten.nan_to_num.default: _contiguous_inputs,
    # their in-place forms keep the input's layout on both sides
    _aten.abs_.default: _any_layout,
    _aten.logical_not_.default: _any_layout,
    _aten.logical_and_.default: _any_layout,
    _aten.logical_or_.default: _any_layout,
    _aten.logical_xor_.default: _any_layout,
    _aten.nan_to_num_.default: _any_layout,
}


class Untrusted(BaseException):
    """The shape-only trace cannot vouch for this program's graph. A
    BaseException, so that a program's own ``except Exception:`` around,
    say, a ``data_ptr()`` call cannot swallow it and go on tracing."""


class ShapeTensor(torch.Tensor):
    """A tensor with metadata and no data: what the traced program sees.

    Reports the device and layout the real tensor has; ``elem`` is a meta
    tensor with the same sizes, strides and storage offset. Outside the
    tracer, any operation on it raises :class:`Untrusted`.
    """

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, elem: torch.Tensor, requires_grad: bool = False):
        if elem.is_conj() or elem.is_neg():
            # Python code branches on these bits, which a wrapper lacks.
            raise Untrusted("a tensor with a lazy conjugate or negative bit")
        t = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=torch.strided, device=_CPU, requires_grad=requires_grad)
        t.elem = elem
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise Untrusted(f"{func} ran on a traced tensor outside the trace")

    def __repr__(self):
        return f"ShapeTensor({tuple(self.shape)}, {self.dtype})"

    # Python code that reaches the data would bake what it reads into the
    # graph: a real trace must see it.
    def _no_data(self, *args, **kwargs):
        raise Untrusted("the program reads tensor data from Python (data_ptr, storage, numpy)")

    data_ptr = storage = numpy = __array__ = __dlpack__ = _no_data


def eligible(flat_inputs) -> Optional[str]:
    """None if a shape-only trace may serve these inputs, else why not."""
    grad = torch.is_grad_enabled()
    for t in flat_inputs:
        if isinstance(t, torch.Tensor):
            if t.device.type != "cpu" or t.layout != torch.strided:
                return f"an input on {t.device} with layout {t.layout}"
            if grad and t.requires_grad:
                return "grad mode is on and an input requires grad"
    return None


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor with ``t``'s dtype, sizes, strides and storage offset."""
    return _empty_meta(t.dtype, t.size(), t.stride(), t.storage_offset())


class _Node(torch.fx.Node):
    """An FX node without FX's bookkeeping (argument maps, user lists, a
    linked list, name deduplication): the attributes capture's encoder
    reads. ``users`` holds the getitem nodes of a multi-output node."""

    def __init__(self, graph: "_Graph", name: str, op: str, target, args=(), kwargs=None):
        self.graph = graph
        self.name = name
        self.op = op
        self.target = target
        self._args = args
        self._kwargs = kwargs or {}
        self.users: Dict["_Node", None] = {}
        self.meta: Dict[str, Any] = {}

    def __repr__(self):
        return self.name


class _Graph:
    """The nodes of a shape-only trace, in order; ``to_fx()`` makes a
    torch.fx.Graph of them (for Captured.fx_graph)."""

    def __init__(self):
        self.nodes: List[_Node] = []

    def create_node(self, op, target, args=(), kwargs=None, name=None) -> _Node:
        node = _Node(self, name or str(target), op, target, args, kwargs)
        self.nodes.append(node)
        return node

    def output(self, result) -> _Node:
        return self.create_node("output", "output", (result,), name="output")

    def to_fx(self) -> torch.fx.Graph:
        g = torch.fx.Graph()
        env: Dict[_Node, torch.fx.Node] = {}

        def arg(v):
            if isinstance(v, _Node):
                return env[v]
            if isinstance(v, (list, tuple)):
                return type(v)(arg(x) for x in v)
            if isinstance(v, dict):
                return {k: arg(x) for k, x in v.items()}
            return v
        for n in self.nodes:
            if n.op == "output":
                g.output(arg(n.args[0]))
                continue
            env[n] = g.create_node(n.op, n.target, arg(n.args), arg(n.kwargs), name=n.name)
            env[n].meta.update(n.meta)
        return g


class _Tracer(TorchDispatchMode):
    """Records one FX node per ATen call on ShapeTensors; see the module
    docstring. ``meta_of(t, where)`` builds the TensorMeta of a value.

    The FX node of a value is an attribute of its ShapeTensor. Results are
    referenced weakly until the next call (a strong reference to a factory's
    result while its Python binding wraps it makes the binding add a
    ``detach``, which a real trace does not see).
    """

    def __init__(self, graph: _Graph, meta_of, annotate):
        super().__init__()
        self.graph = graph
        self.meta_of = meta_of
        self.annotate = annotate           # (nodes) -> None: stack, module
        self.metas: Dict[tuple, Any] = {}
        self.constants: Dict[str, torch.Tensor] = {}  # target -> real tensor
        self._const_node: Dict[int, Tuple[torch.fx.Node, torch.Tensor, torch.Tensor]] = {}
        self._counts = {"param": 0, "tensor": 0}
        self._names: Dict[str, int] = {}
        # (weakref to a result, value path, whether it is a view of a
        # tensor that requires grad): requires_grad is read after autograd
        # has set it, at the next call or at the end.
        self.pending: List[Tuple[Any, tuple, bool]] = []
        self.direct = False  # installed as the C++ dispatch mode itself

    # -- values ---------------------------------------------------------------

    def _name(self, base: str) -> str:
        """FX's names (add, add_1, ...), counted here: FX finds a free
        suffix by trying 1, 2, ... in turn, quadratic in a graph with a
        thousand getitems."""
        n = self._names.get(base, 0)
        if n == 0 and base in _RESERVED:  # FX never names a node `abs`
            n = 1
        self._names[base] = n + 1
        return f"{base}_{n}" if n else base

    def settle(self) -> None:
        """Record requires_grad of the results of earlier calls."""
        for ref, path, view_of_grad in self.pending:
            t = ref()
            if (t.requires_grad if t is not None else view_of_grad) and \
                    not self.metas[path].requires_grad:
                meta = type(self.metas[path])()  # meta_of may share messages
                meta.CopyFrom(self.metas[path])
                meta.requires_grad = True
                self.metas[path] = meta
        self.pending.clear()

    def _constant(self, t: torch.Tensor):
        """(get_attr node, meta tensor) of a real tensor the program reached."""
        hit = self._const_node.get(id(t))
        if hit is None:
            if t.device.type != "cpu" or t.layout != torch.strided:
                raise Untrusted(f"a constant on {t.device} with layout {t.layout}")
            # make_fx's names: parameters and other tensors counted apart.
            kind = "param" if isinstance(t, torch.nn.Parameter) else "tensor"
            target = f"_{kind}_constant{self._counts[kind]}"
            self._counts[kind] += 1
            self.constants[target] = t
            node = self.graph.create_node("get_attr", target)
            self.metas[(node,)] = self.meta_of(t, f"constant '{target}'")
            hit = (node, self._unhooked(_meta_like, t), t)
            self._const_node[id(t)] = hit
        return hit[0], hit[1]

    def _unhooked(self, fn, *args):
        """fn(*args) with this mode off (it is on, when installed directly,
        while the program's own code runs)."""
        if not self.direct:
            return fn(*args)
        _set_mode(None)
        try:
            return fn(*args)
        finally:
            _set_mode(self)

    def _unwrap(self, value, found: Dict[int, torch.Tensor]):
        """(FX argument, value to run on meta) for one argument; adds
        id(meta tensor) -> ShapeTensor to ``found`` for its ShapeTensors."""
        if type(value) is ShapeTensor:
            node = getattr(value, "node", None)
            if node is None or node.graph is not self.graph:
                raise Untrusted("a traced tensor from another trace")
            elem = value.elem
            found[id(elem)] = value
            return node, elem
        if isinstance(value, torch.Tensor):
            return self._constant(value)
        if isinstance(value, (list, tuple)):
            nodes, runs = [], []
            for v in value:
                n, r = self._unwrap(v, found)
                nodes.append(n)
                runs.append(r)
            cls = type(value)
            if cls is tuple:
                return tuple(nodes), tuple(runs)
            if cls is list:
                return nodes, runs
            return cls(nodes), cls(runs)
        if isinstance(value, torch.device):
            if value.type != "cpu":
                raise Untrusted(f"a device argument {value}")
            return value, _META
        return value, value

    # -- the dispatch ---------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.pending:
            self.settle()
        kwargs = kwargs or {}
        tags = func.tags
        if _DATA_DEPENDENT in tags:
            raise Untrusted(f"{func} reads tensor values")
        if _DYNAMIC_SHAPE in tags and not _static_index(func, args):
            raise Untrusted(f"{func} has a data-dependent output shape")
        if func in _DIFFERS:
            raise Untrusted(f"{func}: its meta function and its CPU kernel disagree")
        rule = _META_RULES.get(func)
        if rule is not None:
            if not rule[0](args, kwargs):
                raise Untrusted(f"{func}: no meta function; its rule covers checked "
                                "operators and layouts only")
        elif func not in _RUN_ON_ZEROS and _meta_kind(func) != "same":
            check = _CHECKED.get(func)
            if check is None or not check(args, kwargs):
                raise Untrusted(f"{func}: its meta function is not the CPU kernel's "
                                "(checked operators and layouts only)")
        if _decomposes(func):
            if self.direct:  # still the dispatch mode: inner calls come here
                decomposed = func.decompose(*args, **kwargs)
            else:
                with self:
                    decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        if func is _aten.lift_fresh.default:
            func = _aten.lift_fresh_copy.default

        inputs: Dict[int, torch.Tensor] = {}  # id(meta tensor) -> its ShapeTensor
        node_args, run_args = self._unwrap(args, inputs)
        node_kwargs, run_kwargs = {}, {}
        for k, v in kwargs.items():
            node_kwargs[k], run_kwargs[k] = self._unwrap(v, inputs)
        if _has_device_arg(func) and kwargs.get("device") is None and not _has_tensor(args):
            run_kwargs["device"] = _META
        if self.direct:
            _set_mode(None)
        try:
            if func in _NO_META:  # asking again costs the exception again
                out = _run_on_zeros(func, run_args, run_kwargs)
            else:
                out = (rule[1](run_args, run_kwargs) if rule is not None
                       else func(*run_args, **run_kwargs))
                fix = _FIXES.get(func)
                if fix is not None:
                    out = fix(out, args, kwargs)
        except NotImplementedError as e:
            if func not in _RUN_ON_ZEROS:
                raise Untrusted(f"{func} has no meta function ({str(e).splitlines()[0]})") from None
            _NO_META.add(func)
            out = _run_on_zeros(func, run_args, run_kwargs)
        except Untrusted:
            raise
        except Exception as e:
            raise Untrusted(f"{func} raised {type(e).__name__}: {e}") from None
        finally:
            if self.direct:
                _set_mode(self)

        node = self.graph.create_node("call_function", func, node_args, node_kwargs,
                                      name=self._name(func.overloadpacket.__name__))
        new_nodes = [node]
        view_of_grad = _is_view(func) and any(t.requires_grad for t in inputs.values())
        if isinstance(out, torch.Tensor):
            result = self._result(out, inputs, node, (node,), view_of_grad, func)
        elif isinstance(out, (tuple, list)):
            items = []
            for i, item in enumerate(out):
                if isinstance(item, torch.Tensor):
                    get = self.graph.create_node("call_function", operator.getitem, (node, i), {},
                                                 name=self._name("getitem"))
                    node.users[get] = None
                    new_nodes.append(get)
                    items.append(self._result(item, inputs, get, (node, i), view_of_grad, func))
                elif item is None:
                    items.append(None)
                else:
                    raise Untrusted(f"{func} returned a {type(item).__name__}")
            result = type(out)(items)
        elif out is None:
            result = None
        else:
            raise Untrusted(f"{func} returned a {type(out).__name__}, a value of the data")
        self.annotate(new_nodes)
        return result

    def _result(self, elem: torch.Tensor, inputs: Dict[int, torch.Tensor], node, path,
                view_of_grad: bool, func):
        """The ShapeTensor the program gets for ``elem``, bound to ``node``."""
        t = inputs.get(id(elem))
        if t is None:
            t = ShapeTensor(elem)
        elif (t.size() != elem.size() or t.stride() != elem.stride()
              or t.storage_offset() != elem.storage_offset()):
            # An in-place view or a resized out= argument: the wrapper
            # follows its meta tensor.
            try:
                with no_dispatch():
                    t.as_strided_(elem.size(), elem.stride(), elem.storage_offset())
            except RuntimeError:
                raise Untrusted(f"{func} grows a tensor beyond its storage") from None
        t.node = node
        self.metas[path] = self.meta_of(t, f"node '{node.name}'")
        self.pending.append((weakref.ref(t), path, view_of_grad))
        return t


# Names FX gives a suffix from the start: keywords, builtins, and the
# globals of the code FX generates.
_RESERVED = frozenset(keyword.kwlist) | frozenset(vars(builtins)) | frozenset(
    getattr(torch.fx.graph, "_custom_builtins", {"inf": 0, "nan": 0, "NoneType": 0,
                                                "torch": 0, "device": 0, "fx_pytree": 0,
                                                "pytree": 0}))

_DECOMPOSES: Dict[Any, bool] = {}
_IMPLICIT = torch._C.DispatchKey.CompositeImplicitAutograd


def _decomposes(func) -> bool:
    """Whether ``func.decompose`` may do something (make_fx calls it on
    every operator; most have nothing to decompose)."""
    d = _DECOMPOSES.get(func)
    if d is None:
        d = _DECOMPOSES[func] = (_IMPLICIT in func.py_kernels or
                                 torch._C._dispatch_has_kernel_for_dispatch_key(func.name(),
                                                                                _IMPLICIT))
    return d


_VIEWS: Dict[Any, bool] = {}


def _is_view(func) -> bool:
    """Whether ``func`` returns a view of an input (an alias it does not
    write): under no_grad such a view of a tensor requiring grad requires
    grad too."""
    v = _VIEWS.get(func)
    if v is None:
        v = _VIEWS[func] = any(r.alias_info is not None and not r.alias_info.is_write
                               for r in func._schema.returns)
    return v


def _has_tensor(args) -> bool:
    for a in args:
        if isinstance(a, torch.Tensor):
            return True
        if isinstance(a, (list, tuple)) and _has_tensor(a):
            return True
    return False


_DEVICE_ARG: Dict[Any, bool] = {}


def _has_device_arg(func) -> bool:
    has = _DEVICE_ARG.get(func)
    if has is None:
        has = _DEVICE_ARG[func] = any(a.name == "device" for a in func._schema.arguments)
    return has


def _static_index(func, args) -> bool:
    """aten.index with integer index tensors only: its shape is known."""
    if func is not _aten.index.Tensor or len(args) < 2:
        return False
    return all(i is None or (isinstance(i, torch.Tensor)
                             and not (i.dtype is torch.bool or i.dtype is torch.uint8))
               for i in args[1])


# Operators of _RUN_ON_ZEROS whose meta call raised NotImplementedError in
# this process: each such call cost 3 ms (a transformer's layers, one each).
_NO_META: set = set()
_ZEROS_MEMO: Dict[Any, Any] = {}
_ZEROS_MEMO_MAX = 256


def _layout_key(v):
    """A hashable description of an argument: the layout of a tensor, the
    value of anything else."""
    if isinstance(v, torch.Tensor):
        return ("T", v.dtype, tuple(v.size()), v.stride(), v.storage_offset())
    if isinstance(v, (list, tuple)):
        return (type(v).__name__,) + tuple(_layout_key(x) for x in v)
    return v


def _run_on_zeros(func, args, kwargs):
    """Run ``func`` on zero-filled CPU tensors laid out as the meta ones;
    return meta tensors laid out as its results. The result layouts of these
    operators depend on the argument layouts and values alone, so they are
    remembered per (operator, arguments): a 12-layer transformer pays once."""
    try:
        key = (func, _layout_key(args), _layout_key(tuple(sorted(kwargs.items()))))
        hash(key)
    except TypeError:
        key = None
    layouts = _ZEROS_MEMO.get(key) if key is not None else None
    if layouts is None:
        rule = _SMALL_RUNS.get(func)
        small = rule[0](args, kwargs) if rule is not None else None
        with torch.no_grad():
            out = _call_on_zeros(func, small or args, kwargs)
        layouts = pytree.tree_map(lambda v: _layout_key(v) if isinstance(v, torch.Tensor) else v,
                                  out)
        if small is not None:
            layouts = _scaled_up(func, rule[1], layouts, small[0], args[0])
        if key is not None:
            if len(_ZEROS_MEMO) >= _ZEROS_MEMO_MAX:
                _ZEROS_MEMO.clear()
            _ZEROS_MEMO[key] = layouts

    def meta(v):
        if isinstance(v, tuple) and v and v[0] == "T":
            _, dtype, size, stride, offset = v
            return _empty_meta(dtype, size, stride, offset)
        if isinstance(v, (list, tuple)):
            return type(v)(meta(x) for x in v)
        return v
    return meta(layouts)


def _call_on_zeros(func, args, kwargs):
    """func on zero-filled CPU tensors laid out as the meta tensors among
    args and kwargs. One zero-filled buffer per dtype backs them all (the
    operators of _RUN_ON_ZEROS only read their arguments), and a tensor
    passed twice is one tensor, as in the call being traced (an attention
    checks whether query, key and value are the same tensor)."""
    spans: Dict[torch.dtype, int] = {}
    for v in pytree.tree_flatten((args, kwargs))[0]:
        if isinstance(v, torch.Tensor):
            span = _span(v.size(), v.stride(), v.storage_offset())
            spans[v.dtype] = max(spans.get(v.dtype, 0), span)
    zeros = {dtype: torch.zeros(span, dtype=dtype) for dtype, span in spans.items()}
    made: Dict[int, torch.Tensor] = {}

    def real(v):
        if isinstance(v, torch.Tensor):
            z = made.get(id(v))
            if z is None:
                z = made[id(v)] = zeros[v.dtype].as_strided(v.size(), v.stride(),
                                                            v.storage_offset())
            return z
        if isinstance(v, (list, tuple)):
            return type(v)(real(x) for x in v)
        if isinstance(v, torch.device):
            return _CPU
        return v
    return func(*real(args), **{k: real(v) for k, v in kwargs.items()})


# Fused operators whose result layout is a rule of their first argument's:
# their zero-filled run takes 2 x 2 tokens of it (the weights whole, so
# their checks still run), and must give the rule's layout for those.
# Each entry: (the small arguments or None, the rule).


def _tokens(t) -> bool:
    """Whether t is a dense contiguous [batch, sequence, width] input worth
    cutting to 2 x 2 tokens."""
    return (isinstance(t, torch.Tensor) and t.dim() == 3 and t.is_contiguous()
            and t.storage_offset() == 0 and t.size(0) * t.size(1) > 4 and t.size(2) > 0)


def _two_by_two(t):
    return torch.empty((min(t.size(0), 2), min(t.size(1), 2), t.size(2)), dtype=t.dtype,
                       device=_META)


def _dense(t):
    """The layout of a contiguous tensor of t's dtype and sizes."""
    size, stride, n = tuple(t.size()), [0] * t.dim(), 1
    for i in reversed(range(t.dim())):
        stride[i] = n
        n *= max(size[i], 1)
    return ("T", t.dtype, size, tuple(stride), 0)


def _arg(args, kwargs, i, name, default=None):
    return args[i] if len(args) > i else kwargs.get(name, default)


def _small_encoder_layer(args, kwargs):
    """_transformer_encoder_layer_fwd without a mask (whose sizes follow the
    sequence): its result is src's shape, contiguous (the layer ends adding
    its input to a tensor of that shape)."""
    src = args[0] if args else None
    if not _tokens(src) or _arg(args, kwargs, 18, "mask") is not None:
        return None
    return (_two_by_two(src),) + tuple(args[1:])


def _small_self_attention(args, kwargs):
    """_native_multi_head_attention of query, key and value of one shape,
    without a mask and attention weights (whose sizes follow the
    sequence): its result is the query's shape, contiguous, and no
    weights. A tensor passed twice stays one (it picks the kernel)."""
    if (len(args) < 3 or not all(_tokens(t) and t.size() == args[0].size() for t in args[:3])
            or _arg(args, kwargs, 9, "mask") is not None
            or _arg(args, kwargs, 10, "need_weights", True)):
        return None
    small = {id(t): _two_by_two(t) for t in args[:3]}
    return tuple(small[id(t)] for t in args[:3]) + tuple(args[3:])


_SMALL_RUNS = {op: rule for op, rule in (
    (getattr(getattr(_aten, "_transformer_encoder_layer_fwd", None), "default", None),
     (_small_encoder_layer, _dense)),
    (getattr(getattr(_aten, "_native_multi_head_attention", None), "default", None),
     (_small_self_attention, lambda q: (_dense(q), None))),
) if op is not None}


def _scaled_up(func, rule, layouts, small, full):
    """The result layouts of func on the full first argument, by its rule,
    once its results on the small one follow the rule (Untrusted if not)."""
    if layouts != rule(small):
        raise Untrusted(f"{func} on {tuple(small.size())} returned {layouts}, not "
                        f"{rule(small)}")
    return rule(full)


def _empty_meta(dtype, size, stride, offset):
    """A meta tensor with this dtype, sizes, strides and storage offset."""
    if offset == 0 and 0 not in size:  # one call: empty_strided's storage spans as below
        return torch.empty_strided(size, stride, dtype=dtype, device=_META)
    span = offset + 1 if 0 in size else _span(size, stride, offset)
    return torch.empty((span,), dtype=dtype, device=_META).as_strided(size, stride, offset)


def _span(size, stride, offset):
    """The elements a tensor's storage needs: one past its last element."""
    return offset + 1 + sum((s - 1) * st for s, st in zip(size, stride) if s > 0)


_set_mode = getattr(torch._C, "_set_torch_dispatch_mode", None)  # torch 1.13 only


@contextlib.contextmanager
def _installed(tracer: "_Tracer"):
    """Make ``tracer`` the dispatch mode. With no other mode active, it is
    installed as the C++ dispatch mode itself: torch 1.13's mode stack
    calls a mode through a Python wrapper that pops and pushes it with a
    generator context manager around every operator (a third of the
    trace's cost); the tracer turns itself off around the operators it
    runs instead. Under another mode, the stack is used as usual."""
    if _set_mode is None or torch._C._len_torch_dispatch_stack() > 0:
        with tracer:
            yield
        return
    tracer.direct = True
    _set_mode(tracer)
    try:
        yield
    finally:
        _set_mode(None)
        tracer.direct = False


def trace(fn, module, state_paths, n_state, user_spec, flat_real, meta_of, annotator_factory,
          watch_grad_mode, call_with_state):
    """Trace ``fn`` (or ``module``) on ShapeTensors standing for
    ``flat_real`` (state then user leaves).

    Returns (graph, constants, metas, out_spec, placeholders).
    ``meta_of(t, where)`` returns a TensorMeta (shared between values:
    never changed in place); ``annotator_factory(graph,
    stop_code)`` returns (hooks context manager, annotate(nodes) function);
    ``watch_grad_mode()`` is a context manager yielding the list of grad
    mode switches the program made; ``call_with_state(module, state, args)``
    calls the module with its parameters and buffers replaced. Raises
    Untrusted.
    """
    graph = _Graph()
    flat = []
    placeholders = []
    for i, t in enumerate(flat_real):
        node = graph.create_node("placeholder", f"arg{i}_1", name=f"arg{i}_1")
        placeholders.append(node)
        flat.append(ShapeTensor(_meta_like(t), requires_grad=t.requires_grad)
                    if isinstance(t, torch.Tensor) else t)

    def flat_fn(*flat_args):
        user_args = pytree.tree_unflatten(list(flat_args[n_state:]), user_spec)
        if module is None:
            return fn(*user_args)
        state = {path: flat_args[i] for path, i in state_paths.items()}
        return call_with_state(module, state, tuple(user_args))

    hooks, annotate = annotator_factory(graph, flat_fn.__code__)
    tracer = _Tracer(graph, meta_of, annotate)
    seen: Dict[int, ShapeTensor] = {}
    for i, (node, real_t) in enumerate(zip(placeholders, flat_real)):
        if isinstance(real_t, torch.Tensor):
            # The same tensor twice is one object, bound (as in make_fx) to
            # its last placeholder.
            flat[i] = seen.setdefault(id(real_t), flat[i])
            flat[i].node = node
            tracer.metas[(node,)] = meta_of(real_t, f"input {node.name}")

    try:
        with watch_grad_mode() as switches, hooks, _installed(tracer):
            result = flat_fn(*flat)
    except Untrusted:
        raise
    except Exception as e:  # the real trace reports the error users expect
        raise Untrusted(f"{type(e).__name__}: {e}") from None
    if switches:
        raise Untrusted(f"the program switches grad mode inside ({switches[0]})")
    tracer.settle()
    if torch.is_grad_enabled() and any(m.requires_grad for p, m in tracer.metas.items()
                                       if p[0].op == "call_function"):
        raise Untrusted("a value the program computes requires grad")
    leaves, out_spec = pytree.tree_flatten(result)
    out = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if type(leaf) is ShapeTensor:
                node = getattr(leaf, "node", None)
                if node is None or node.graph is not graph:
                    raise Untrusted("the program returns a tensor from another trace")
                out.append(node)
            else:
                out.append(tracer._constant(leaf)[0])
        else:
            out.append(leaf)
    graph.output(pytree.tree_unflatten(out, out_spec))
    return graph, tracer.constants, tracer.metas, out_spec, placeholders

