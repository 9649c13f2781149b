"""Capture without computing: trace a program on shape-only tensors.

:func:`compiled.capture.trace` runs a program twice on real data (make_fx in
real mode, then a replay for the metadata): a resnet50 at batch 2 costs
several eager calls before its first compiled result. This module traces it
once, on tensors that have sizes, strides, dtypes and a device but no data,
and records the same graph make_fx would record, with every value's
metadata taken when the value is produced (docs/capture.md).

How it works
------------
The program runs under :class:`_Tracer`, a ``TorchDispatchMode``, on
:class:`ShapeTensor` inputs: wrapper tensors that report the caller's device
(``cpu``) and layout to Python code but hold a FakeTensor inside (torch's
own tensors without data: what Dynamo and AOTAutograd trace with, whose
metadata PyTorch's tests hold to the CPU kernels', with corrections where
a meta function alone would be wrong, such as a channels-last
convolution's output). Every ATen call reaches the mode, which, like
make_fx's proxy mode,

- decomposes CompositeImplicitAutograd operators (``func.decompose``);
- turns ``lift_fresh`` into ``lift_fresh_copy``;
- runs the operator on the FakeTensors (in the trace's FakeTensorMode),
  which computes the output sizes and strides;
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
- FakeTensor cannot compute an operator (no meta function, no fallback),
  or its result is known to differ from the CPU kernel's
  (:data:`_DIFFERS`);
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
import keyword
import operator
import sys
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.utils._mode_utils import no_dispatch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

try:  # make_fx's own test, so that both traces decompose the same operators
    from torch.utils._python_dispatch import autograd_would_have_decomposed as _would_decompose
except ImportError:  # older torch 2 releases decompose whatever has a composite
    def _would_decompose(func, flat_args) -> bool:
        return True

__all__ = ["ShapeTensor", "Untrusted", "eligible", "trace"]

_aten = torch.ops.aten
_CPU = torch.device("cpu")
_DATA_DEPENDENT = torch.Tag.data_dependent_output
_DYNAMIC_SHAPE = torch.Tag.dynamic_output_shape

# Operators whose FakeTensor result is known to differ from the CPU
# kernel's (tests/python/test_metatrace.py, `make capture-zoo`): never
# trusted.
_DIFFERS = frozenset(op for op in (
    # the CPU kernel leaves its workspace undefined; FakeTensor makes one
    getattr(getattr(_aten, "mkldnn_rnn_layer", None), "default", None),
) if op is not None)


def _batch_norm_backward_mask(out, args, kwargs):
    """native_batch_norm_backward: the CPU kernel leaves the results its
    output_mask does not ask for undefined; FakeTensor computes all three."""
    mask = args[9] if len(args) > 9 else kwargs.get("output_mask")
    return tuple(o if m else None for o, m in zip(out, mask))


def _preserve_layout(out, args, kwargs):
    """roll: the CPU kernel lays its result out as ``empty_like(self)``
    (a channels-last input gives a channels-last result); FakeTensor's is
    contiguous."""
    return torch.empty_like(args[0])


def _binary_layout(out, args, kwargs):
    """Binary operators whose CPU kernel is a TensorIterator over two
    tensors (floor_divide, copysign, xlogy, activation backwards, ...):
    their FakeTensor results come from Python references that lay a
    result out contiguous where TensorIterator follows the operands (a
    transposed input with a broadcast one gives a transposed result).
    ``add``'s meta function is TensorIterator's own: its layout is the
    kernel's."""
    a, b = args[0], args[1]
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return out
    like = _aten.add.Tensor(a, b)
    return torch.empty_strided(out.shape, like.stride(), dtype=out.dtype, device=out.device)


def _contiguous(out, args, kwargs):
    """Operators whose CPU kernel allocates its results contiguous
    (``LEGACY_CONTIGUOUS_MEMORY_FORMAT``) whatever its inputs' layout;
    FakeTensor's follow the inputs."""
    if isinstance(out, tuple):
        return tuple(o.contiguous() if isinstance(o, torch.Tensor) else o for o in out)
    return out.contiguous()


# Corrections of FakeTensor results whose layout differs from the CPU
# kernel's: (out, args, kwargs) -> out, run in the trace's FakeTensorMode.
# Found by comparing FakeTensor's and the CPU's result strides over ATen's
# operators on transposed, permuted and channels-last inputs
# (tests/python/test_metatrace.py checks each).
_FIXES = {
    _aten.native_batch_norm_backward.default: _batch_norm_backward_mask,
    _aten.roll.default: _preserve_layout,
    **{op: _binary_layout for op in (
        _aten.copysign.Tensor, _aten.floor_divide.default, _aten.div.Tensor_mode,
        _aten.xlogy.Tensor, _aten.special_xlog1py.default, _aten.hardsigmoid_backward.default,
        _aten.hardswish_backward.default, _aten.logit_backward.default)},
    _aten.log_sigmoid_forward.default: _contiguous,
    _aten.mse_loss_backward.default: _contiguous,
    _aten.rrelu_with_noise.default: _contiguous,
    _aten._log_softmax_backward_data.default: _contiguous,
    _aten.native_layer_norm_backward.default: _contiguous,
    _aten.glu_backward.default: _contiguous,
}


def _dense(t) -> bool:
    return isinstance(t, torch.Tensor) and (
        t.is_contiguous() or (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)))


def _dense_input(args, kwargs) -> bool:
    """The first argument is contiguous or channels-last contiguous."""
    return _dense(args[0])


def _dense_grad_and_input(args, kwargs) -> bool:
    """The gradient and the forward's input both dense, in one layout."""
    g, x = args[0], args[1]
    return _dense(g) and _dense(x) and g.is_contiguous() == x.is_contiguous()


# Operators whose FakeTensor layouts are the CPU kernel's (with _FIXES) only
# for some argument layouts (tests/python/test_metatrace.py checks them):
# operator -> condition; other layouts go to the real trace.
_CONDITIONS = {
    _aten.native_batch_norm.default: _dense_input,
    _aten.native_batch_norm_backward.default: _dense_grad_and_input,
    _aten.roll.default: _dense_input,
}


class _AsUnderMakeFx(TorchFunctionMode):
    """A torch-function mode that changes nothing but
    ``torch.overrides.has_torch_function``: under make_fx (whose own modes
    make it true) modules take their general paths, e.g.
    TransformerEncoderLayer leaves its fused inference kernel; the
    shape-only trace must record the same graph as make_fx does."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


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


def _fake_mode():
    """A FakeTensorMode for one trace: static shapes, real tensors allowed as
    arguments (a constant the program reaches), no ShapeEnv."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    return FakeTensorMode(allow_non_fake_inputs=True)


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

    def __init__(self, graph: _Graph, meta_of, annotate, fake_mode):
        super().__init__()
        self.graph = graph
        self.fake_mode = fake_mode         # computes every result's metadata
        self.switches = None               # the grad-mode watcher's list (trace())
        self.decompositions = sys.modules["compiled.capture"].DECOMPOSITIONS
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
            with self.switches.paused():
                hit = (node, self.fake_mode.from_tensor(t.detach()), t)
            self._const_node[id(t)] = hit
        return hit[0], hit[1]

    def _unwrap(self, value, found: Dict[int, torch.Tensor]):
        """(FX argument, value to run on FakeTensors) for one argument; adds
        id(FakeTensor) -> ShapeTensor to ``found`` for its ShapeTensors."""
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
            raise Untrusted(f"{func}: its FakeTensor result and its CPU kernel's disagree")
        condition = _CONDITIONS.get(func)
        if condition is not None and not condition(args, kwargs):
            raise Untrusted(f"{func}: its FakeTensor result is the CPU kernel's for checked "
                            "operators and layouts only")
        decomposition = self.decompositions.get(func)
        if decomposition is not None:
            with self:
                decomposed = decomposition(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        if _decomposes(func) and _would_decompose(func, pytree.tree_leaves((args, kwargs))):
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        if func is _aten.lift_fresh.default:
            func = _aten.lift_fresh_copy.default

        inputs: Dict[int, torch.Tensor] = {}  # id(FakeTensor) -> its ShapeTensor
        node_args, run_args = self._unwrap(args, inputs)
        node_kwargs, run_kwargs = {}, {}
        for k, v in kwargs.items():
            node_kwargs[k], run_kwargs[k] = self._unwrap(v, inputs)
        try:
            with self.switches.paused(), self.fake_mode:
                out = func(*run_args, **run_kwargs)
                fix = _FIXES.get(func)
                if fix is not None:
                    out = fix(out, run_args, run_kwargs)
        except Untrusted:
            raise
        except Exception as e:  # data-dependent results, no meta: the real trace decides
            raise Untrusted(f"{func} raised {type(e).__name__}: {e}") from None

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
        if elem.layout != torch.strided:
            raise Untrusted(f"{func} returns a {elem.layout} tensor")
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
    fake_mode = _fake_mode()
    flat = []
    placeholders = []
    for i, t in enumerate(flat_real):
        node = graph.create_node("placeholder", f"arg{i}_1", name=f"arg{i}_1")
        placeholders.append(node)
        # detached: autograd stays out of the FakeTensor computations (the
        # ShapeTensor carries requires_grad); inputs sharing a storage get
        # FakeTensors sharing one
        flat.append(ShapeTensor(fake_mode.from_tensor(t.detach()), requires_grad=t.requires_grad)
                    if isinstance(t, torch.Tensor) else t)

    def flat_fn(*flat_args):
        user_args = pytree.tree_unflatten(list(flat_args[n_state:]), user_spec)
        if module is None:
            return fn(*user_args)
        state = {path: flat_args[i] for path, i in state_paths.items()}
        return call_with_state(module, state, tuple(user_args))

    hooks, annotate = annotator_factory(graph, flat_fn.__code__)
    tracer = _Tracer(graph, meta_of, annotate, fake_mode)
    seen: Dict[int, ShapeTensor] = {}
    for i, (node, real_t) in enumerate(zip(placeholders, flat_real)):
        if isinstance(real_t, torch.Tensor):
            # The same tensor twice is one object, bound (as in make_fx) to
            # its last placeholder.
            flat[i] = seen.setdefault(id(real_t), flat[i])
            flat[i].node = node
            tracer.metas[(node,)] = meta_of(real_t, f"input {node.name}")

    try:
        with watch_grad_mode() as switches, hooks, _AsUnderMakeFx(), tracer:
            tracer.switches = switches
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

