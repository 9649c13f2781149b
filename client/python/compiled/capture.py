"""Capture a PyTorch program as an ATen-level ``compiled.v1.GraphModule``.

How a capture runs
------------------
1. **Flatten.** The program's inputs are laid out in one flat list, in this
   order (the order of ``Graph.inputs``):

   a. parameters of the module, in ``named_parameters()`` order, kind
      PARAMETER, ``target`` = the state_dict path (tied parameters appear
      once, under their first path);
   b. buffers of the module, in ``named_buffers()`` order, kind BUFFER,
      ``target`` = the state_dict path, ``persistent`` = whether the buffer is
      part of the state_dict;
   c. tensor constants the trace created (``torch.tensor(...)`` literals,
      tensors the program reaches that are neither inputs nor module state),
      in order of first use, kind CONSTANT, ``target`` = the attribute of the
      traced FX module holding them (``_tensor_constant0``, ...);
   d. the user's example inputs, kind USER_INPUT, flattened with
      ``torch.utils._pytree`` (so lists, tuples and dicts of tensors work).

   A plain function has no (a) and (b). Non-tensor user inputs (int, float,
   bool, str, None) are *specialized*: the trace is taken with their concrete
   value baked into the graph, and their InputSpec carries that value as a
   literal (``as_int``, ``as_float``, ...) instead of a tensor reference, so
   the graph keeps one input per argument but a different value means a
   different graph.

2-4 run in one of two ways. By default the program is traced once on
   shape-only tensors, without computing anything (:mod:`compiled.metatrace`,
   ``docs/capture.md``): same graph, metadata taken as values appear. Where
   that trace cannot vouch for the graph (data-dependent operators, meta
   functions that are not the CPU kernel's, grad...) it refuses, and the
   steps below run instead (``$COMPILED_CAPTURE`` or ``method=`` choose).

2. **Copy.** Tracing and replay run on copies of every tensor input and of
   the module state, never on the caller's tensors. The copies keep object
   identity (the same tensor passed twice stays one object), storage sharing
   (two views of one base become two views of one cloned storage, with the
   same sizes, strides and offsets), dtype, ``requires_grad`` and, where
   possible, leaf-ness. The module runs through
   with the copied state swapped in for the call (:func:`call_with_state`,
   what ``torch.nn.utils.stateless.functional_call`` does, faster).

3. **Trace.** ``make_fx`` in "real" mode, no decomposition table: in-place
   and view ops stay what they are (nothing is functionalized). While it
   traces, a dispatch mode layered above make_fx's own records for every new
   FX node the user-level stack trace (paths made relative to the longest
   ``sys.path`` entry, so they do not depend on the machine) and the path of
   the innermost module running (collected with forward hooks;
   :mod:`compiled.nodemeta`).

4. **Replay.** The FX graph runs node by node on a second set of copies; the
   metadata of every tensor value (dtype, sizes, strides, storage offset,
   device, requires_grad, layout) is recorded the moment it is produced, so an
   input mutated later in the graph (``x.t_()``) keeps its entry metadata.
   ``node.meta`` of torch 1.13 is not trusted.

5. **Encode.** One Node per operator call; ``operator.getitem`` nodes are
   folded into the outputs of the multi-output node they read from. FX node
   arguments are bound to the operator schema's argument names
   (:mod:`compiled.encode`; ``_Encoder.encode`` there maps Python values
   to ``Argument``).

Things the graph inherits from make_fx (torch 1.13) that a reader should know:

- after an in-place or ``out=`` op, later uses of the mutated tensor refer to
  the op's output value (``add_``), not to the input it aliases; the alias is
  stated by the schema's annotations (``Tensor(a!)``);
- a Python number passed where the schema says ``Tensor`` (``x.add_(1)`` is
  ``aten::add_.Tensor(x, 1)``) is encoded as a literal (``as_int``): the
  daemon must treat it as a wrapped-number scalar;
- ``torch.tensor(...)`` literals become a CONSTANT input followed by
  ``aten::lift_fresh_copy``;
- grad-mode switches inside the program are not recorded by make_fx; replay
  runs under the grad mode active when :func:`capture` was called.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import inspect
import logging
import os
import threading
import operator
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.fx
import torch.utils._pytree as pytree

from . import CaptureError, UnsupportedCapture
from . import nodemeta
from .encode import (GraphInput, ValueNames, encode_graph_module, storage_key, tensor_meta,
                     tensor_meta_cached, untyped_storage)
from .formats import scalar_type
from .v1 import graph_pb2

__all__ = ["Captured", "capture", "trace", "export_graph"]

_log = logging.getLogger("compiled")



# ---------------------------------------------------------------------------
# Tensor metadata and storage identity.
# ---------------------------------------------------------------------------


def _check_utf8(name: str, where: str) -> None:
    """graph.proto's strings are UTF-8: a name holding surrogates (bytes
    Python could not decode) cannot be one."""
    try:
        name.encode()
    except UnicodeEncodeError:
        raise CaptureError(f"{where}: the name cannot be written as UTF-8, which graph.proto's "
                           "strings are") from None


def _check_copyable(t: torch.Tensor, where: str) -> None:
    if t.is_quantized:
        raise UnsupportedCapture(f"{where} is a quantized tensor ({t.dtype}), which the wire "
                                 "format cannot carry: the program runs eagerly.")
    if t.layout != torch.strided:
        raise CaptureError(f"{where}: only strided tensors can be captured, got layout {t.layout}")
    if t.is_conj() or t.is_neg():
        raise CaptureError(
            f"{where}: tensors with a lazy conjugate/negative bit cannot be described "
            "by TensorMeta; call .resolve_conj()/.resolve_neg() first")
    scalar_type(t.dtype, where)


def _copy_tensors(values: Sequence[Any]) -> List[Any]:
    """Copy the tensors among ``values`` (other values are returned as is).

    Storage sharing is preserved: every distinct storage is cloned once, and
    each tensor becomes a tensor over the clone with its own sizes, strides,
    storage offset and dtype. Object identity is preserved too (a tensor that
    occurs twice is copied once). ``requires_grad`` is preserved; a non-leaf
    tensor becomes a non-leaf copy when that can be done without changing its
    values, so that in-place ops behave as they would in eager mode.
    """
    storages: Dict[Tuple[str, int], Any] = {}
    by_id: Dict[int, torch.Tensor] = {}
    out = []
    for value in values:
        if not isinstance(value, torch.Tensor):
            out.append(value)
            continue
        if id(value) in by_id:
            out.append(by_id[id(value)])
            continue
        key = storage_key(value)
        with torch.no_grad():
            if key not in storages:
                storages[key] = untyped_storage(value).clone()
            copy = torch.empty(0, dtype=value.dtype, device=value.device)
            copy.set_(storages[key], value.storage_offset(), value.size(), value.stride())
        if value.requires_grad:
            copy = _with_grad(copy, leaf=value.is_leaf)
        by_id[id(value)] = copy
        out.append(copy)
    return out


def _with_grad(copy: torch.Tensor, leaf: bool) -> torch.Tensor:
    """Make ``copy`` require grad; as a non-leaf if ``leaf`` is false.

    A non-leaf is made by copying the tensor's own values into itself from a
    leaf that requires grad: same storage, same values, a grad_fn. Tensors
    whose elements overlap cannot be written; they stay leaves.
    """
    if not leaf:
        source = copy.detach().clone().requires_grad_(True)
        try:
            with torch.enable_grad():
                copy.copy_(source)
            return copy
        except RuntimeError:
            pass
    return copy.requires_grad_(True)


# ---------------------------------------------------------------------------
# The traced program: inputs, the make_fx trace, the replay.
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Captured:
    """The result of :func:`trace`.

    Attributes:
        graph_bytes: the serialized ``graph_pb2.GraphModule``, what a
            compile request carries.
        graph_module: the same, parsed (on first access).
        constants: the value of every CONSTANT input, by its ``target``, in
            input order: tensors the trace created (``torch.tensor``
            literals) or, for tensors the program reached from outside
            (closure variables, plain tensor attributes), those very objects.
            A runtime passes them where the graph expects them.
        out_spec: the pytree structure of what the program returns.
        method: "meta" (traced on shape-only tensors) or "real" (make_fx on
            copies of the data, then a replay).
        fx_graph: the ``torch.fx.GraphModule`` of the trace, for debugging
            (built on first access for a "meta" trace).
    """
    graph_bytes: bytes
    constants: Dict[str, torch.Tensor]
    out_spec: Any
    method: str
    _graph: Any
    _gm: Optional[torch.fx.GraphModule] = None
    _message: Optional[graph_pb2.GraphModule] = None

    @property
    def graph_module(self) -> graph_pb2.GraphModule:
        if self._message is None:
            self._message = graph_pb2.GraphModule.FromString(self.graph_bytes)
        return self._message

    @property
    def fx_graph(self) -> torch.fx.GraphModule:
        if self._gm is None:
            self._gm = torch.fx.GraphModule(torch.nn.Module(), self._graph.to_fx())
            for target, value in self.constants.items():
                setattr(self._gm, target, value)
        return self._gm


def _module_state(module: torch.nn.Module, owners: Optional[list] = None):
    """Parameters and buffers of ``module``.

    Returns (params, buffers, aliases): params and buffers are lists of
    (path, tensor, persistent) with each tensor once, under its first path,
    in ``named_parameters()`` and ``named_buffers()`` order; aliases maps
    every path under which a tensor is reachable (tied weights included) to
    the index of its entry in params + buffers. ``owners``, if given, gets
    the (module, attribute) holding each entry, in the same order.
    """
    # One walk: every (path, module), repeats included (for the aliases);
    # the first occurrence of each module is what named_modules() and so
    # both named_* list, in the same order.
    every = list(module.named_modules(remove_duplicate=False))
    modules, seen_modules = [], set()
    for path, mod in every:
        if id(mod) not in seen_modules:
            seen_modules.add(id(mod))
            modules.append((path, mod))

    def members(table_of):
        """(path, tensor, owner, attribute) of each distinct tensor, as
        named_parameters()/named_buffers() list them."""
        seen = set()
        for mod_path, mod in modules:
            prefix = mod_path + "." if mod_path else ""
            for attr, t in table_of(mod).items():
                if t is not None and id(t) not in seen:
                    seen.add(id(t))
                    yield prefix + attr, t, mod, attr

    param_members = list(members(lambda m: m._parameters))
    buffer_members = list(members(lambda m: m._buffers))
    params = [(path, t, True) for path, t, _, _ in param_members]
    buffers = [(path, t, attr not in mod._non_persistent_buffers_set)
               for path, t, mod, attr in buffer_members]
    if owners is not None:
        owners.extend((mod, attr) for _, _, mod, attr in param_members + buffer_members)
    index_of = {id(t): i for i, (_, t, _) in enumerate(params + buffers)}
    aliases: Dict[str, int] = {}
    for mod_path, mod in every:
        prefix = mod_path + "." if mod_path else ""
        for table in (mod._parameters, mod._buffers):
            for attr, t in table.items():
                if t is not None and id(t) in index_of:
                    aliases.setdefault(prefix + attr, index_of[id(t)])
    return params, buffers, aliases


def _user_input_names(fn: Callable, example_inputs: Sequence[Any]) -> List[str]:
    """A readable name for every flattened user input: the parameter name of
    ``fn``'s signature when an argument is a single leaf, ``name_<i>`` for the
    leaves of a nested argument, ``arg<i>`` when the signature does not say."""
    try:
        target = fn.forward if isinstance(fn, torch.nn.Module) else fn
        params = [p.name for p in inspect.signature(target).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = []
    for i, arg in enumerate(example_inputs):
        base = params[i] if i < len(params) else f"arg{i}"
        leaves, spec = pytree.tree_flatten(arg)
        if len(leaves) == 1 and spec.num_children == 0:
            names.append(base)
        else:
            names.extend(f"{base}_{j}" for j in range(len(leaves)))
    return names



_TRACING_ERRORS: Dict[type, type] = {}


def _tracing_error(message: str, error: Exception) -> Exception:
    """A CaptureError that is also an instance of ``error``'s class, so code
    written for eager (``except RuntimeError:``, ``except ValueError:``)
    catches a failed capture exactly as it catches the eager call's failure
    (a float64 input into a float32 model raises RuntimeError either way).
    When the class cannot be combined with CaptureError (an unusual layout
    or constructor), eager's own exception is re-raised with a note."""
    base = type(error)
    cls = _TRACING_ERRORS.get(base)
    if cls is None:
        try:
            cls = type(f"Capture{base.__name__}", (CaptureError, base),
                       {"__module__": __name__, "__doc__": CaptureError.__doc__})
        except TypeError:
            cls = CaptureError
        _TRACING_ERRORS[base] = cls
    if cls is not CaptureError:
        try:
            return cls(message)
        except Exception:
            pass
    if hasattr(error, "add_note"):
        error.add_note(f"compiled: {message}")
        return error
    return CaptureError(message)


def _describe(fn) -> str:
    if isinstance(fn, torch.nn.Module):
        return type(fn).__name__
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def call_with_state(module: torch.nn.Module, state: Dict[str, torch.Tensor], args: tuple):
    """``module(*args)`` with each parameter or buffer named in ``state``
    replaced by the given tensor for the call, then put back.

    torch 1.13's ``functional_call`` does the same through a subclass of the
    module's class whose ``__getattribute__`` looks every attribute up in a
    dict (15 ms per densenet121 call); here the entries of the owners'
    ``_parameters``/``_buffers`` tables are swapped. ``module.weight`` reads
    the replacement either way; code that walks ``named_parameters()``
    during the call sees it too.
    """
    modules = dict(module.named_modules(remove_duplicate=False))
    saved = []
    try:
        for path, value in state.items():
            owner_path, _, attr = path.rpartition(".")
            owner = modules[owner_path]
            table = owner._parameters if attr in owner._parameters else owner._buffers
            saved.append((table, attr, table[attr]))
            table[attr] = value
        return module(*args)
    finally:
        for table, attr, value in reversed(saved):
            table[attr] = value


def _trace_fx(fn, module, state_paths, n_state, user_spec, flat_copies):
    """Run make_fx over ``fn`` on ``flat_copies`` (state then user leaves)."""
    hooks = nodemeta.ModulePathHooks(module)

    def flat_fn(*flat):
        user_args = pytree.tree_unflatten(list(flat[n_state:]), user_spec)
        graph = nodemeta.tracing_graph()
        annotator = (nodemeta.NodeAnnotator(graph, flat_fn.__code__, hooks.stack)
                     if graph is not None else None)
        with hooks, (annotator if annotator is not None else contextlib.nullcontext()):
            if module is None:
                return fn(*user_args)
            state = {path: flat[i] for path, i in state_paths.items()}
            return call_with_state(module, state, tuple(user_args))

    # Imported here: proxy_tensor imports sympy (0.2 s), which the
    # shape-only trace never needs.
    from torch.fx.experimental.proxy_tensor import make_fx
    try:
        with _watch_grad_mode() as switches:
            gm = make_fx(flat_fn, decomposition_table=DECOMPOSITIONS)(*flat_copies)
    except CaptureError:
        raise
    except Exception as e:
        if _data_dependent(e):
            raise UnsupportedCapture(
                f"{_describe(fn)} decides what it computes from tensor values (a Python "
                "branch on a tensor, or .item()/int()/bool() of one), "
                "which one captured graph cannot represent. compiled.compile runs such a "
                "function eagerly; torch.compile(fn, backend=\"compiled\") compiles the "
                "parts around the data-dependent code (graph breaks).") from e
        err = _tracing_error(f"tracing {_describe(fn)} with make_fx failed: "
                             f"{type(e).__name__}: {e}", e)
        if err is e:
            raise
        raise err from e
    if switches:
        raise UnsupportedCapture(
            f"{_describe(fn)} switches grad mode inside ({switches[0]}); torch "
            f"1.13's make_fx does not record grad-mode changes, so a compiled "
            f"program could compute different values or gradients than eager. "
            f"Switch grad mode outside the compiled function instead.")
    return gm


def _dropout_as_eager(input, p, train):
    """``aten::dropout`` as eager runs it (ATen's C++ composite:
    ``bernoulli_`` on ``empty_like(input)``). torch 2's Python
    decomposition, which make_fx prefers, draws the mask through
    ``native_dropout`` in another order: the same distribution, other
    numbers, and ``eager_random`` programs must reproduce eager's."""
    if p == 0 or not train or input.numel() == 0:
        return input
    if p == 1:
        return input * torch.zeros((), dtype=input.dtype, device=input.device)
    noise = torch.empty_like(input)
    noise.bernoulli_(1 - p)
    noise.div_(1 - p)
    return input * noise


def _in_memory_order(op):
    """An in-place random operator on a permuted tensor (``empty_like`` of
    a transposed input) fills it in memory order; the functional operator
    the daemon replaces it with fills a contiguous result. Both draw the
    same numbers only if the tensor is contiguous: so a permuted target is
    filled through a contiguous tensor in its memory order, permuted back
    and copied in."""
    def rewrite(self, *args, **kwargs):
        order = _dense_order(self)
        if order is None or order == list(range(self.dim())):
            return NotImplemented
        base = torch.empty([self.shape[d] for d in order], dtype=self.dtype,
                           device=self.device)
        op(base, *args, **kwargs)
        return self.copy_(base.permute([order.index(d) for d in range(self.dim())]))
    rewrite.__name__ = f"{op.__name__}_in_memory_order"
    return rewrite


def _dense_order(t: torch.Tensor) -> Optional[List[int]]:
    """The dimensions of ``t`` from outermost to innermost in memory when
    ``t`` covers its memory densely without overlap (a permuted contiguous
    tensor), else None."""
    order = sorted(range(t.dim()), key=lambda d: -t.stride(d))  # stable for ties
    expected = 1
    for d in reversed(order):
        if t.shape[d] != 1 and t.stride(d) != expected:
            return None
        expected *= t.shape[d]
    return order


_aten = torch.ops.aten
# Decompositions both traces use instead of torch's own, where those would
# compute differently from the kernels eager runs.
DECOMPOSITIONS = {
    _aten.dropout.default: _dropout_as_eager,
    **{op: _in_memory_order(op) for op in (
        _aten.bernoulli_.float, _aten.bernoulli_.Tensor, _aten.uniform_.default,
        _aten.normal_.default, _aten.exponential_.default)},
}


def _data_dependent(e: BaseException) -> bool:
    """Whether make_fx failed because the program read a value out of a
    traced tensor (``Tensor.item``, ``bool``, ``int``: ATen's
    ``_local_scalar_dense``), i.e. on data-dependent Python, not an error
    of the program itself."""
    while e is not None:
        if isinstance(e, RuntimeError) and "_local_scalar_dense" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


class _Switches(list):
    """The grad-mode switches a traced program made (see _watch_grad_mode)."""
    pause = 0

    @contextlib.contextmanager
    def paused(self):
        self.pause += 1
        try:
            yield
        finally:
            self.pause -= 1


@contextlib.contextmanager
def _watch_grad_mode():
    """Records, while tracing on this thread, every switch of grad mode or
    inference mode the traced function makes (make_fx records none). The
    list it yields has a ``paused()`` context manager for the tracer's own
    work (FakeTensor switches modes inside)."""
    switches = _Switches()
    thread = threading.get_ident()
    set_grad, inference = torch._C._set_grad_enabled, torch._C._InferenceMode

    def watched_set_grad(mode):
        if threading.get_ident() == thread and not switches.pause and \
                bool(mode) != torch.is_grad_enabled():
            switches.append("torch.no_grad, torch.enable_grad or torch.set_grad_enabled")
        return set_grad(mode)

    def watched_inference(*args, **kwargs):
        if threading.get_ident() == thread and not switches.pause:
            switches.append("torch.inference_mode")
        return inference(*args, **kwargs)

    torch._C._set_grad_enabled = watched_set_grad
    torch._C._InferenceMode = watched_inference
    try:
        yield switches
    finally:
        torch._C._set_grad_enabled = set_grad
        torch._C._InferenceMode = inference



def _fetch_attr(gm: torch.fx.GraphModule, target: str):
    obj = gm
    for atom in target.split("."):
        obj = getattr(obj, atom)
    return obj


def _replay(gm: torch.fx.GraphModule, env_inputs: Dict[torch.fx.Node, Any]):
    """Run ``gm``'s graph node by node, recording metadata as values appear.

    ``env_inputs`` gives the value of every placeholder and get_attr node.
    Returns ``{value path: TensorMeta}`` where a value path is ``(node,)``
    for a node's result and ``(node, i, ...)`` for an element of a tuple or
    list result.
    """
    env: Dict[torch.fx.Node, Any] = {}
    metas: Dict[tuple, graph_pb2.TensorMeta] = {}

    def record(path, value):
        if isinstance(value, torch.Tensor):
            metas[path] = tensor_meta(value, f"node '{path[0].name}'")
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                record(path + (i,), item)

    # Each value is dropped after its last use, as eager drops it: keeping
    # every intermediate alive would grow the process heap to the sum of all
    # of them, and glibc cannot return that memory once later allocations
    # sit above it (the process would keep a larger working set for good).
    nodes = list(gm.graph.nodes)
    last_use: Dict[torch.fx.Node, int] = {}
    for i, node in enumerate(nodes):
        for used in node.all_input_nodes:
            last_use[used] = i
    dying: Dict[int, List[torch.fx.Node]] = {}
    for used, i in last_use.items():
        dying.setdefault(i, []).append(used)

    for i, node in enumerate(nodes):
        if node.op in ("placeholder", "get_attr"):
            env[node] = env_inputs[node]
            record((node,), env[node])
        elif node.op == "call_function":
            args = torch.fx.node.map_arg(node.args, env.__getitem__)
            kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
            env[node] = node.target(*args, **kwargs)
            del args, kwargs
            if node.target is not operator.getitem:
                record((node,), env[node])
        elif node.op != "output":
            raise CaptureError(f"node '{node.name}': unexpected FX op {node.op!r} in a make_fx graph")
        for used in dying.get(i, ()):
            del env[used]
        if node.op == "call_function" and node not in last_use:
            del env[node]  # a result nothing reads (an output reads it)
    return metas


# ---------------------------------------------------------------------------
# The capture itself.
# ---------------------------------------------------------------------------


def _as_input_tuple(example_inputs) -> tuple:
    if isinstance(example_inputs, (list, tuple)):
        return tuple(example_inputs)
    return (example_inputs,)


def trace(fn_or_module: Union[Callable, torch.nn.Module], example_inputs, *,
          method: Optional[str] = None) -> Captured:
    """Capture ``fn_or_module(*example_inputs)``; see :func:`capture`.

    ``method``: "auto" (the default, or ``$COMPILED_CAPTURE``) traces on
    shape-only tensors (:mod:`compiled.metatrace`) and falls back to the
    real trace when that one cannot vouch for the graph; "meta" raises
    CaptureError instead of falling back; "real" always traces on copies of
    the data. Both record the same graph.

    Returns a :class:`Captured` holding the message, the values of the
    CONSTANT inputs, the output structure and the FX graph.
    """
    with paused_gc():
        return _trace(fn_or_module, example_inputs, method)


@contextlib.contextmanager
def paused_gc():
    """Garbage collection off for a while. A capture allocates tens of
    thousands of short-lived objects; in a process holding a model, each
    collection of the oldest generation they trigger walks every object
    torch and the model own (85 ms of a 130 ms resnet50 capture)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _trace(fn_or_module, example_inputs, method: Optional[str]) -> Captured:
    fn = fn_or_module
    module = fn if isinstance(fn, torch.nn.Module) else None
    if module is None and not callable(fn):
        raise TypeError(f"capture expects a callable or an nn.Module, got {type(fn).__name__}")
    example_inputs = _as_input_tuple(example_inputs)

    # 1. Flatten: state (params then buffers) and user leaves.
    if module is not None:
        params, buffers, state_paths = _module_state(module)
    else:
        params, buffers, state_paths = [], [], {}
    state = params + buffers
    user_leaves, user_spec = pytree.tree_flatten(example_inputs)
    user_names = _user_input_names(fn, example_inputs)
    for i, leaf in enumerate(user_leaves):
        if isinstance(leaf, torch.Tensor):
            _check_copyable(leaf, f"input {user_names[i]}")
        elif not (leaf is None or isinstance(leaf, (bool, int, float, str))):
            raise CaptureError(f"input {user_names[i]}: cannot capture an input of type "
                               f"{type(leaf).__name__} (tensors, numbers, strings and None only)")
    for path, t, _ in state:
        _check_copyable(t, f"module state '{path}'")
        _check_utf8(path, f"module state {path!r}")
    flat_real = [t for _, t, _ in state] + list(user_leaves)

    # 2 + 3. Trace: on shape-only tensors when that can be trusted, else on
    # copies of the data (then 4. replay for the metadata).
    method = _capture_method(method)
    meta = None
    if method != "real":
        from . import metatrace
        reason = metatrace.eligible(flat_real)
        if reason is None:
            try:
                meta = metatrace.trace(fn, module, state_paths, len(state), user_spec, flat_real,
                                       tensor_meta_cached({}), nodemeta.meta_annotator(module),
                                       _watch_grad_mode, call_with_state)
            except metatrace.Untrusted as e:
                reason = str(e)
        if meta is None:
            if method == "meta":
                raise CaptureError(f"a shape-only trace of {_describe(fn)} is not possible: "
                                   f"{reason}")
            _log.debug("capture of %s: tracing on real data (%s)", _describe(fn), reason)
    if meta is not None:
        graph, constant_values, metas, out_spec, placeholders = meta
        gm = None
        fetch = constant_values.__getitem__
    else:
        gm = _trace_fx(fn, module, state_paths, len(state), user_spec, _copy_tensors(flat_real))
        graph = gm.graph
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        output = next(n for n in graph.nodes if n.op == "output")
        out_spec = pytree.tree_flatten(output.args[0])[1]
        fetch = functools.partial(_fetch_attr, gm)

    # Collect the graph's inputs in their final order.
    if len(placeholders) != len(flat_real):
        raise CaptureError(f"make_fx produced {len(placeholders)} placeholders for "
                           f"{len(flat_real)} flattened inputs")
    names = ValueNames()
    inputs: List[GraphInput] = []
    for (path, t, _), ph in zip(params, placeholders):
        inputs.append(GraphInput(graph_pb2.INPUT_KIND_PARAMETER, t, "", path, False, ph))
    for (path, t, persistent), ph in zip(buffers, placeholders[len(params):]):
        inputs.append(GraphInput(graph_pb2.INPUT_KIND_BUFFER, t, "", path, persistent, ph))
    constants: Dict[str, torch.Tensor] = {}
    attr_nodes: Dict[torch.fx.Node, str] = {}
    for node in graph.nodes:
        if node.op != "get_attr":
            continue
        if node.target not in constants:
            value = fetch(node.target)
            if not isinstance(value, torch.Tensor):
                if isinstance(value, torch.ScriptObject):
                    raise UnsupportedCapture(
                        f"{_describe(fn)} uses a TorchScript object ({node.target}: "
                        f"{value._type().qualified_name()}), such as the packed weights of "
                        "quantized modules (torch.ao.quantization); the wire format carries "
                        "tensors only, so it runs eagerly.")
                raise CaptureError(f"node '{node.name}': attribute {node.target} is not a tensor")
            if value.is_quantized:
                raise UnsupportedCapture(f"{_describe(fn)} uses a quantized tensor "
                                         f"({node.target}, {value.dtype}), which the wire "
                                         "format cannot carry: it runs eagerly.")
            _check_copyable(value, f"constant '{node.target}'")
            constants[node.target] = value
            inputs.append(GraphInput(graph_pb2.INPUT_KIND_CONSTANT, value, "", node.target, False, node))
        attr_nodes[node] = node.target
    for leaf, name, ph in zip(user_leaves, user_names, placeholders[len(state):]):
        inputs.append(GraphInput(graph_pb2.INPUT_KIND_USER_INPUT, leaf, name, "", False, ph))

    prefixes = {graph_pb2.INPUT_KIND_PARAMETER: "p_", graph_pb2.INPUT_KIND_BUFFER: "b_"}
    for inp in inputs:
        if inp.kind in prefixes:
            inp.name = names.take(prefixes[inp.kind] + inp.target.replace(".", "_"))
        elif inp.kind == graph_pb2.INPUT_KIND_CONSTANT:
            inp.name = names.take(inp.target.replace(".", "_"))
        else:
            inp.name = names.take(inp.name)

    # 4. Replay on fresh copies, recording metadata (the shape-only trace
    # recorded it as it went).
    if meta is None:
        copies = _copy_tensors([inp.value for inp in inputs])
        env_inputs: Dict[torch.fx.Node, Any] = {}
        by_target = {inp.target: c for inp, c in zip(inputs, copies)
                     if inp.kind == graph_pb2.INPUT_KIND_CONSTANT}
        for inp, c in zip(inputs, copies):
            if inp.kind != graph_pb2.INPUT_KIND_CONSTANT:
                env_inputs[inp.fx_node] = c
        for node, target in attr_nodes.items():
            env_inputs[node] = by_target[target]
        metas = _replay(gm, env_inputs)

    # 5. Encode.
    data = encode_graph_module(graph, inputs, attr_nodes, metas, names)
    return Captured(graph_bytes=data, constants=constants, out_spec=out_spec,
                    method="meta" if meta is not None else "real", _graph=graph, _gm=gm)


_CAPTURE_METHODS = ("auto", "meta", "real")


def _capture_method(method: Optional[str]) -> str:
    """The trace method: the argument, else $COMPILED_CAPTURE, else auto."""
    if method is None:
        method = os.environ.get("COMPILED_CAPTURE", "") or "auto"
    if method not in _CAPTURE_METHODS:
        raise ValueError(f"capture method must be one of {', '.join(_CAPTURE_METHODS)} "
                         f"(argument or $COMPILED_CAPTURE), got {method!r}")
    return method


def capture(fn_or_module: Union[Callable, torch.nn.Module], example_inputs) -> graph_pb2.GraphModule:
    """Capture ``fn_or_module(*example_inputs)`` as a ``graph_pb2.GraphModule``.

    ``fn_or_module`` is a callable or an ``nn.Module`` (whose parameters and
    buffers become graph inputs); ``example_inputs`` is a tuple or list of
    positional arguments (a lone tensor is accepted too). The caller's
    tensors are never modified: tracing runs on copies. The input order, the
    handling of non-tensor inputs and the encoding are described in the
    module docstring.

    Raises:
        CaptureError: the program cannot be traced, or the trace holds a
            value graph.proto cannot express.
    """
    return trace(fn_or_module, example_inputs).graph_module


def export_graph(fn_or_module: Union[Callable, torch.nn.Module], example_inputs,
                 path: Union[str, os.PathLike]) -> graph_pb2.GraphModule:
    """Capture and write the GraphModule to ``path``; return the message.

    ``.pb`` writes the binary protobuf (deterministic serialization);
    ``.json`` writes proto3 JSON with the original field names (int64 values
    appear as strings, as proto3 JSON requires; NaN and infinities as
    "NaN"/"Infinity"). Any other extension raises ValueError before tracing.
    """
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in (".pb", ".json"):
        raise ValueError(f"export_graph: unknown extension {ext!r} for {os.fspath(path)!r} "
                         "(use .pb or .json)")
    msg = capture(fn_or_module, example_inputs)
    if ext == ".pb":
        data = msg.SerializeToString(deterministic=True)
        with open(path, "wb") as f:
            f.write(data)
    else:
        from google.protobuf import json_format
        text = json_format.MessageToJson(msg, preserving_proto_field_name=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return msg
