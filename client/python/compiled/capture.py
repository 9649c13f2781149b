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
   the innermost module running (collected with forward hooks).

4. **Replay.** The FX graph runs node by node on a second set of copies; the
   metadata of every tensor value (dtype, sizes, strides, storage offset,
   device, requires_grad, layout) is recorded the moment it is produced, so an
   input mutated later in the graph (``x.t_()``) keeps its entry metadata.
   ``node.meta`` of torch 1.13 is not trusted.

5. **Encode.** One Node per operator call; ``operator.getitem`` nodes are
   folded into the outputs of the multi-output node they read from. FX node
   arguments are bound to the operator schema's argument names; see
   :func:`_encode_value` for the mapping from Python values to ``Argument``.

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
import linecache
import os
import sys
import threading
import operator
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from . import CaptureError, UnsupportedCapture, __version__, wire
from .v1 import graph_pb2

__all__ = ["Captured", "capture", "trace", "export_graph"]

_log = logging.getLogger("compiled")

SCHEMA_VERSION = (1, 0)
PRODUCER = "compiled.capture " + __version__

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

# ---------------------------------------------------------------------------
# Enum tables: torch objects -> graph.proto enums. Written out explicitly;
# never derived from torch's internal numbering.
# ---------------------------------------------------------------------------


def _build_table(pairs):
    """Keep the (torch attribute name, enum) pairs this torch build knows."""
    table = {}
    for attr, value in pairs:
        obj = getattr(torch, attr, None)
        if obj is not None:
            table[obj] = value
    return table


_SCALAR_TYPES = _build_table([
    ("uint8", graph_pb2.SCALAR_TYPE_BYTE),
    ("int8", graph_pb2.SCALAR_TYPE_CHAR),
    ("int16", graph_pb2.SCALAR_TYPE_SHORT),
    ("int32", graph_pb2.SCALAR_TYPE_INT),
    ("int64", graph_pb2.SCALAR_TYPE_LONG),
    ("float16", graph_pb2.SCALAR_TYPE_HALF),
    ("float32", graph_pb2.SCALAR_TYPE_FLOAT),
    ("float64", graph_pb2.SCALAR_TYPE_DOUBLE),
    ("complex32", graph_pb2.SCALAR_TYPE_COMPLEXHALF),
    ("complex64", graph_pb2.SCALAR_TYPE_COMPLEXFLOAT),
    ("complex128", graph_pb2.SCALAR_TYPE_COMPLEXDOUBLE),
    ("bool", graph_pb2.SCALAR_TYPE_BOOL),
    ("bfloat16", graph_pb2.SCALAR_TYPE_BFLOAT16),
    ("uint16", graph_pb2.SCALAR_TYPE_UINT16),  # torch >= 2.3 only
])

_LAYOUTS = _build_table([
    ("sparse_coo", graph_pb2.LAYOUT_SPARSE_COO),
    ("sparse_csr", graph_pb2.LAYOUT_SPARSE_CSR),
    ("sparse_csc", graph_pb2.LAYOUT_SPARSE_CSC),
    ("sparse_bsr", graph_pb2.LAYOUT_SPARSE_BSR),
    ("sparse_bsc", graph_pb2.LAYOUT_SPARSE_BSC),
    ("_mkldnn", graph_pb2.LAYOUT_MKLDNN),
    ("strided", graph_pb2.LAYOUT_STRIDED),
])

_MEMORY_FORMATS = _build_table([
    ("contiguous_format", graph_pb2.MEMORY_FORMAT_CONTIGUOUS),
    ("channels_last", graph_pb2.MEMORY_FORMAT_CHANNELS_LAST),
    ("channels_last_3d", graph_pb2.MEMORY_FORMAT_CHANNELS_LAST_3D),
    ("preserve_format", graph_pb2.MEMORY_FORMAT_PRESERVE),
])


# Tags of the fields capture writes (compiled.wire).
_ld = wire.ld
_ARG = graph_pb2.Argument
_ARG_NONE = wire.tag(_ARG, "as_none") + b"\x01"
_ARG_TENSOR = wire.tag(_ARG, "as_tensor")
_ARG_TENSORS = wire.tag(_ARG, "as_tensors")
_ARG_OPTIONAL_TENSORS = wire.tag(_ARG, "as_optional_tensors")
_ARG_INT = wire.tag(_ARG, "as_int")
_ARG_INTS = wire.tag(_ARG, "as_ints")
_ARG_FLOAT = wire.tag(_ARG, "as_float")
_ARG_FLOATS = wire.tag(_ARG, "as_floats")
_ARG_BOOL = wire.tag(_ARG, "as_bool")
_ARG_BOOLS = wire.tag(_ARG, "as_bools")
_ARG_STRING = wire.tag(_ARG, "as_string")
_ARG_STRINGS = wire.tag(_ARG, "as_strings")
_ARG_SCALAR_TYPE = wire.tag(_ARG, "as_scalar_type")
_ARG_MEMORY_FORMAT = wire.tag(_ARG, "as_memory_format")
_ARG_LAYOUT = wire.tag(_ARG, "as_layout")
_ARG_DEVICE = wire.tag(_ARG, "as_device")
_ARG_SYM_INT = wire.tag(_ARG, "as_sym_int")
_ARG_SYM_INTS = wire.tag(_ARG, "as_sym_ints")
_SYM_ARG_NAME = wire.tag(graph_pb2.SymIntArgument, "as_name")
_SYM_ARG_INT = wire.tag(graph_pb2.SymIntArgument, "as_int")
_SYM_ITEMS = wire.tag(graph_pb2.SymIntList, "items")
_NAME = wire.tag(graph_pb2.TensorArgument, "name")
_TENSOR_ITEMS = wire.tag(graph_pb2.TensorList, "items")
_OPTIONAL_ITEMS = wire.tag(graph_pb2.OptionalTensorList, "items")
_OPTIONAL_TENSOR = wire.tag(graph_pb2.OptionalTensorArgument, "as_tensor")
_OPTIONAL_NONE = wire.tag(graph_pb2.OptionalTensorArgument, "as_none") + b"\x01"
_INT_ITEMS = wire.tag(graph_pb2.IntList, "items")
_FLOAT_ITEMS = wire.tag(graph_pb2.FloatList, "items")
_BOOL_ITEMS = wire.tag(graph_pb2.BoolList, "items")
_STRING_ITEMS = wire.tag(graph_pb2.StringList, "items")
_SPEC_KIND = wire.tag(graph_pb2.InputSpec, "kind")
_SPEC_ARG = wire.tag(graph_pb2.InputSpec, "arg")
_SPEC_TARGET = wire.tag(graph_pb2.InputSpec, "target")
_SPEC_PERSISTENT = wire.tag(graph_pb2.InputSpec, "persistent") + b"\x01"
_VALUE_NAME = wire.tag(graph_pb2.TensorValue, "name")
_VALUE_META = wire.tag(graph_pb2.TensorValue, "meta")
_NODE_TARGET = wire.tag(graph_pb2.Node, "target")
_NODE_INPUTS = wire.tag(graph_pb2.Node, "inputs")
_NODE_OUTPUTS = wire.tag(graph_pb2.Node, "outputs")
_NODE_METADATA = wire.tag(graph_pb2.Node, "metadata")
_INPUT_NAME = wire.tag(graph_pb2.NamedArgument, "name")
_INPUT_ARG = wire.tag(graph_pb2.NamedArgument, "arg")
_INPUT_KIND = wire.tag(graph_pb2.NamedArgument, "kind")
_POSITIONAL = _INPUT_KIND + wire.varint(graph_pb2.ARGUMENT_KIND_POSITIONAL)
_KEYWORD = _INPUT_KIND + wire.varint(graph_pb2.ARGUMENT_KIND_KEYWORD)
_STACK_TRACE = wire.tag(graph_pb2.NodeMetadata, "stack_trace")
_MODULE_PATH = wire.tag(graph_pb2.NodeMetadata, "module_path")
_GRAPH = {name: wire.tag(graph_pb2.Graph, name)
          for name in ("inputs", "nodes", "outputs", "tensor_values", "sym_int_values",
                       "storage_groups")}
_GRAPH_MODULE_GRAPH = wire.tag(graph_pb2.GraphModule, "graph")


def _scalar_type(dtype: torch.dtype, where: str) -> int:
    try:
        return _SCALAR_TYPES[dtype]
    except KeyError:
        raise CaptureError(f"{where}: dtype {dtype} has no graph.proto ScalarType") from None


def _layout(layout: torch.layout, where: str) -> int:
    try:
        return _LAYOUTS[layout]
    except KeyError:
        raise CaptureError(f"{where}: layout {layout} has no graph.proto Layout") from None


def _set_device(msg: graph_pb2.Device, device: torch.device) -> None:
    msg.type = device.type
    if device.index is not None:
        msg.has_index = True
        msg.index = device.index


# ---------------------------------------------------------------------------
# Tensor metadata and storage identity.
# ---------------------------------------------------------------------------


def _untyped_storage(t: torch.Tensor):
    """The untyped storage of ``t``: ``untyped_storage()`` when this torch has
    it (>= 2.0), else the untyped storage inside 1.13's TypedStorage."""
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    return t.storage()._storage


def _storage_key(t: torch.Tensor) -> Tuple[str, int]:
    """An identity for the storage of ``t``, valid while ``t`` is alive.

    ``_cdata`` is the address of the StorageImpl, shared by every tensor
    viewing the storage (whatever their dtype), and, unlike ``data_ptr()``,
    distinct for two empty storages.
    """
    return (str(t.device), _untyped_storage(t)._cdata)


def _tensor_meta_cached(cache: Dict[tuple, Any]):
    """_tensor_meta through ``cache``: values with the same metadata share
    one message, which nobody may change (a graph has far fewer distinct
    layouts than values; building a TensorMeta costs ~10 us)."""
    def meta_of(t: torch.Tensor, where: str) -> graph_pb2.TensorMeta:
        key = (t.dtype, t.shape, t.stride(), t.storage_offset(), t.requires_grad)
        meta = cache.get(key)
        if meta is None:
            meta = cache[key] = _tensor_meta(t, where)
        return meta
    return meta_of


def _tensor_meta(t: torch.Tensor, where: str) -> graph_pb2.TensorMeta:
    """TensorMeta of ``t`` as it is right now (static shapes)."""
    meta = graph_pb2.TensorMeta()
    meta.dtype = _scalar_type(t.dtype, where)
    for size in t.shape:
        meta.sizes.add(as_int=int(size))
    if t.layout == torch.strided:
        for stride in t.stride():
            meta.strides.add(as_int=int(stride))
        meta.storage_offset.as_int = int(t.storage_offset())
    _set_device(meta.device, t.device)
    meta.requires_grad = bool(t.requires_grad)
    meta.layout = _layout(t.layout, where)
    return meta


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
    _scalar_type(t.dtype, where)


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
        key = _storage_key(value)
        with torch.no_grad():
            if key not in storages:
                storages[key] = _untyped_storage(value).clone()
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
# Node metadata collected while tracing: stack traces and module paths.
# ---------------------------------------------------------------------------

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_THIS_FILE = os.path.abspath(__file__)
# Frames of the capture machinery itself are never shown.
_HIDDEN_FILES = frozenset([_THIS_FILE, os.path.join(os.path.dirname(_THIS_FILE), "metatrace.py")])
_META_STACK = "compiled.stack_trace"
_META_MODULE = "compiled.module_path"


def _torch_frame_is_user_level(relpath: str) -> bool:
    """Frames inside torch worth showing: the nn modules and functionals a
    user calls, not the dispatch, tracing and hook machinery."""
    relpath = relpath.replace(os.sep, "/")
    if relpath in ("functional.py", "nn/functional.py"):
        return True
    return relpath.startswith("nn/modules/") and relpath != "nn/modules/module.py"


class _FrameFormatter:
    """Formats Python frames as stack-trace text with machine-independent
    paths: each file is shown relative to the longest ``sys.path`` entry that
    contains it (``torch/nn/modules/linear.py``, ``regen.py``)."""

    def __init__(self):
        roots = {os.path.abspath(entry or os.curdir) for entry in sys.path}
        self._roots = sorted(roots, key=len, reverse=True)
        self._paths: Dict[str, Optional[str]] = {}
        self._entries: Dict[Any, str] = {}

    def display_path(self, filename: str) -> Optional[str]:
        """The path to show for ``filename``, or None to hide the frame."""
        if filename not in self._paths:
            self._paths[filename] = self._compute(filename)
        return self._paths[filename]

    def _compute(self, filename: str) -> Optional[str]:
        if filename.startswith("<"):
            return filename
        path = os.path.abspath(filename)
        if path in _HIDDEN_FILES:
            return None
        if path.startswith(_TORCH_DIR + os.sep):
            if not _torch_frame_is_user_level(os.path.relpath(path, _TORCH_DIR)):
                return None
        for root in self._roots:
            if path.startswith(root + os.sep):
                return os.path.relpath(path, root).replace(os.sep, "/")
        return path

    def format(self, frame, stop_code) -> str:
        """The stack from just inside the frame running ``stop_code`` down to
        ``frame``, outermost first, as ``traceback.format_list`` writes it.
        Each frame's text is made once per (code, line) and reused."""
        entries = []
        cache = self._entries
        while frame is not None and frame.f_code is not stop_code:
            key = (frame.f_code, frame.f_lineno)
            entry = cache.get(key)
            if entry is None:
                path = self.display_path(frame.f_code.co_filename)
                if path is None:
                    entry = ""
                else:
                    line = _source_line(frame)
                    entry = (f'  File "{path}", line {frame.f_lineno}, in {frame.f_code.co_name}\n'
                             + (f"    {line}\n" if line else ""))
                cache[key] = entry
            if entry:
                entries.append(entry)
            frame = frame.f_back
        entries.reverse()
        return "".join(_collapse_repeats(entries))


def _collapse_repeats(entries: List[str]) -> List[str]:
    """traceback's rule: after three identical frames in a row, the rest
    become one "[Previous line repeated N more times]" line."""
    out: List[str] = []
    last, count = None, 0
    for entry in entries + [None]:
        if entry is not None and entry == last:
            count += 1
            if count <= 3:
                out.append(entry)
            continue
        if count > 3:
            n = count - 3
            out.append(f"  [Previous line repeated {n} more time{'s' if n > 1 else ''}]\n")
        if entry is not None:
            out.append(entry)
        last, count = entry, 1
    return out


def _source_line(frame) -> str:
    return linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()


class _NodeAnnotator(TorchDispatchMode):
    """A dispatch mode pushed above make_fx's proxy mode while tracing.

    Every ATen call reaches this mode first; it lets the call go on to the
    proxy mode (which records one or more FX nodes) and then tags the FX
    nodes that appeared with the current stack trace and module path.
    """

    def __init__(self, graph: torch.fx.Graph, stop_code, module_stack: List[str]):
        super().__init__()
        self.graph = graph
        self.stop_code = stop_code
        self.module_stack = module_stack
        self.frames = _FrameFormatter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        last = next(iter(reversed(self.graph.nodes)), None)
        out = func(*args, **(kwargs or {}))
        new_nodes = []
        for node in reversed(self.graph.nodes):
            if node is last:
                break
            new_nodes.append(node)
        if new_nodes:
            stack = self.frames.format(sys._getframe(1), self.stop_code)
            module_path = self.module_stack[-1] if self.module_stack else ""
            for node in new_nodes:
                node.meta.setdefault(_META_STACK, stack)
                node.meta.setdefault(_META_MODULE, module_path)
        return out


def _meta_annotator(module: Optional[torch.nn.Module]):
    """For the shape-only trace: (forward hooks, annotate(nodes)) tagging
    new FX nodes with the stack trace and module path, as _NodeAnnotator
    does for make_fx."""
    def factory(graph, stop_code):
        hooks = _ModulePathHooks(module)
        frames = _FrameFormatter()

        def annotate(nodes):
            stack = frames.format(sys._getframe(1), stop_code)
            module_path = hooks.stack[-1] if hooks.stack else ""
            for node in nodes:
                node.meta[_META_STACK] = stack
                node.meta[_META_MODULE] = module_path
        return hooks, annotate
    return factory


def _tracing_graph() -> Optional[torch.fx.Graph]:
    """The FX graph make_fx is recording into, found on the dispatch mode
    stack (None if this torch lays it out differently: no metadata then)."""
    try:
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
        modes = _get_current_dispatch_mode_stack()
    except Exception:  # private API; metadata is optional
        return None
    for mode in reversed(modes):
        graph = getattr(getattr(mode, "tracer", None), "graph", None)
        if isinstance(graph, torch.fx.Graph):
            return graph
    return None


class _ModulePathHooks:
    """Forward hooks that keep a stack of the qualified names of the modules
    currently running inside ``root`` ("" for the root itself).

    Two process-wide hooks (``register_module_forward_pre_hook``) that look
    the module up by identity, rather than a pair per module: registering
    and removing 866 hooks took 2 ms of densenet121's capture. They see
    the calls of the thread that entered only."""

    def __init__(self, root: Optional[torch.nn.Module]):
        self.stack: List[str] = []
        self._handles = []
        self._root = root
        self._names: Dict[int, str] = {}
        self._thread = None

    def __enter__(self):
        if self._root is not None:
            self._names = {id(module): name for name, module in self._root.named_modules()}
            self._thread = threading.get_ident()
            self._handles = [torch.nn.modules.module.register_module_forward_pre_hook(self._pre),
                             torch.nn.modules.module.register_module_forward_hook(self._post)]
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _pre(self, module, inputs):
        name = self._names.get(id(module))
        if name is not None and threading.get_ident() == self._thread:
            self.stack.append(name)

    def _post(self, module, inputs, output):
        if id(module) in self._names and threading.get_ident() == self._thread and self.stack:
            self.stack.pop()


# ---------------------------------------------------------------------------
# The traced program: inputs, the make_fx trace, the replay.
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class _Input:
    """One graph input before encoding."""
    kind: int                    # graph_pb2.INPUT_KIND_*
    value: Any                   # the caller's tensor, or a literal
    name: str                    # value name in the graph
    target: str = ""             # parameter/buffer path, constant attribute
    persistent: bool = False     # buffers only
    fx_node: Optional[torch.fx.Node] = None  # placeholder or first get_attr


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


class _Names:
    """Hands out unique value names."""

    def __init__(self):
        self.used = set()

    def take(self, base: str) -> str:
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name


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
    hooks = _ModulePathHooks(module)

    def flat_fn(*flat):
        user_args = pytree.tree_unflatten(list(flat[n_state:]), user_spec)
        graph = _tracing_graph()
        annotator = (_NodeAnnotator(graph, flat_fn.__code__, hooks.stack)
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
            metas[path] = _tensor_meta(value, f"node '{path[0].name}'")
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
# Encoding FX values as graph.proto Arguments.
# ---------------------------------------------------------------------------


def _strip_optional(jit_type):
    while jit_type is not None and jit_type.kind() == "OptionalType":
        jit_type = jit_type.getElementType()
    return jit_type


_KINDS: Dict[int, Tuple[Any, Optional[str], Optional[str]]] = {}


def _kinds(jit_type) -> Tuple[Optional[str], Optional[str]]:
    """(_list_element_kind, _scalar_kind) of a schema type, remembered per
    type object (those of _schema_arguments live as long as the process)."""
    hit = _KINDS.get(id(jit_type))
    if hit is None or hit[0] is not jit_type:
        hit = _KINDS[id(jit_type)] = (jit_type, _list_element_kind(jit_type),
                                      _scalar_kind(jit_type))
    return hit[1], hit[2]


def _list_element_kind(jit_type) -> Optional[str]:
    """For a (possibly optional) list schema type, the element kind:
    "Tensor", "OptionalTensor", "int", "float", "bool", "str", "Scalar", or
    None when the schema gives no usable element type."""
    jit_type = _strip_optional(jit_type)
    if jit_type is None or jit_type.kind() != "ListType":
        return None
    elem = jit_type.getElementType()
    kind = elem.kind()
    if kind == "OptionalType" and _strip_optional(elem).kind() == "TensorType":
        return "OptionalTensor"
    return {
        "TensorType": "Tensor",
        "IntType": "int",
        "SymIntType": "int",
        "FloatType": "float",
        "BoolType": "bool",
        "StringType": "str",
        "NumberType": "Scalar",
    }.get(kind)


def _scalar_kind(jit_type) -> Optional[str]:
    jit_type = _strip_optional(jit_type)
    if jit_type is None:
        return None
    return {"IntType": "int", "SymIntType": "int", "FloatType": "float"}.get(jit_type.kind())


class _Encoder:
    """Turns FX argument values into serialized ``graph_pb2.Argument``
    messages (:mod:`compiled.wire`).

    ``tensor_name(node)`` returns the value name of an FX node that holds a
    tensor (or None if it does not hold one).
    """

    def __init__(self, tensor_name: Callable[[torch.fx.Node], Optional[str]],
                 sym_name: Optional[Callable[[torch.fx.Node], Optional[str]]] = None):
        self.tensor_name = tensor_name
        # the value name of an FX node holding a SymInt (symbolic graphs)
        self.sym_name = sym_name or (lambda node: None)
        self._tensors: Dict[torch.fx.Node, bytes] = {}  # node -> TensorArgument
        self._arguments: Dict[torch.fx.Node, bytes] = {}  # node -> Argument

    def encode(self, value: Any, jit_type, where: str) -> bytes:
        """The Argument for ``value``, serialized; ``jit_type`` is the schema
        type of the argument (None if unknown). Python value -> Argument:

        - FX node of a tensor -> as_tensor; None -> as_none;
        - bool -> as_bool (as_int in an ``int`` slot); int -> as_int (as_float
          in a ``float`` slot, so ``eps=1`` and ``eps=1.0`` encode alike);
          float -> as_float (inf/nan kept); str -> as_string;
        - torch.dtype/layout/memory_format/device -> their enum kinds;
        - lists by the schema's element type: Tensor[] -> as_tensors,
          Tensor?[] -> as_optional_tensors (always, None or not), int[] ->
          as_ints, float[] -> as_floats, bool[] -> as_bools, str[] ->
          as_strings; without a usable schema type, by the values. An empty
          list is an empty list of its kind.

        A Python number in a ``Tensor`` slot (a wrapped number) is encoded as
        the number. Anything else raises CaptureError naming ``where``.
        """
        if isinstance(value, torch.fx.Node):
            data = self._arguments.get(value)
            if data is None:
                sym = self.sym_name(value)
                if sym is not None:  # a SymInt value: as_sym_int by name
                    data = _ld(_ARG_SYM_INT, _ld(_SYM_ARG_NAME, sym.encode()))
                else:
                    data = _ld(_ARG_TENSOR, self._tensor(value, where))
                self._arguments[value] = data
            return data
        if value is None:
            return _ARG_NONE
        if isinstance(value, (list, tuple)):
            if any(isinstance(i, torch.fx.Node) and self.sym_name(i) is not None
                   for i in value):
                return self._sym_int_list(value, where)
            return self._encode_list(list(value), _kinds(jit_type)[0], where)
        return self._encode_scalar(value, _kinds(jit_type)[1], where)

    def _sym_int_list(self, items, where) -> bytes:
        """An int[] some of whose items are SymInt values: as_sym_ints."""
        out = []
        for item in items:
            if isinstance(item, torch.fx.Node):
                sym = self.sym_name(item)
                if sym is None:
                    raise CaptureError(f"{where}: SymInt[] element '{item.name}' is no SymInt")
                out.append(_ld(_SYM_ITEMS, _ld(_SYM_ARG_NAME, sym.encode())))
            elif isinstance(item, int) and not isinstance(item, bool):
                out.append(_ld(_SYM_ITEMS, _SYM_ARG_INT + wire.varint(_check_int64(item, where))))
            else:
                raise CaptureError(f"{where}: SymInt[] element {item!r} is not an integer")
        return _ld(_ARG_SYM_INTS, b"".join(out))

    def _tensor(self, node: torch.fx.Node, where: str) -> bytes:
        """The serialized TensorArgument naming ``node``'s value."""
        data = self._tensors.get(node)
        if data is None:
            name = self.tensor_name(node)
            if name is None:
                raise CaptureError(f"{where}: refers to FX node '{node.name}', which holds no tensor")
            data = self._tensors[node] = _ld(_NAME, name.encode())
        return data

    def _encode_scalar(self, value, kind, where) -> bytes:
        if isinstance(value, bool):
            if kind == "int":
                return _ARG_INT + wire.varint(int(value))
            return _ARG_BOOL + (b"\x01" if value else b"\x00")
        if isinstance(value, int):
            if kind == "float":
                return wire.double(_ARG_FLOAT, float(value))
            return _ARG_INT + wire.varint(_check_int64(value, where))
        if isinstance(value, float):
            return wire.double(_ARG_FLOAT, value)
        if isinstance(value, str):
            return _ld(_ARG_STRING, value.encode())
        if isinstance(value, torch.dtype):
            return _ARG_SCALAR_TYPE + wire.varint(_scalar_type(value, where))
        if isinstance(value, torch.layout):
            return _ARG_LAYOUT + wire.varint(_layout(value, where))
        if isinstance(value, torch.memory_format):
            try:
                return _ARG_MEMORY_FORMAT + wire.varint(_MEMORY_FORMATS[value])
            except KeyError:
                raise CaptureError(f"{where}: memory format {value} has no graph.proto MemoryFormat") from None
        if isinstance(value, torch.device):
            device = graph_pb2.Device()
            _set_device(device, value)
            return _ld(_ARG_DEVICE, device.SerializeToString())
        if isinstance(value, complex):
            raise CaptureError(f"{where}: cannot encode a complex scalar {value!r} "
                               "(graph.proto has no complex literal)")
        if isinstance(value, torch.ScriptObject):
            raise UnsupportedCapture(
                f"{where} is a TorchScript object ({value._type().qualified_name()}), such as "
                "the packed weights of quantized modules (torch.ao.quantization); the wire "
                "format carries tensors only, so the program runs eagerly.")
        raise CaptureError(f"{where}: cannot encode a value of type {type(value).__name__}: {value!r}")

    def _encode_list(self, items, kind, where) -> bytes:
        if kind is None:
            kind = _infer_list_kind(items, where)
        if kind == "Tensor":
            out = []
            for item in items:
                if not isinstance(item, torch.fx.Node):
                    raise CaptureError(f"{where}: Tensor[] element {item!r} is not a tensor")
                out.append(_ld(_TENSOR_ITEMS, self._tensor(item, where)))
            return _ld(_ARG_TENSORS, b"".join(out))
        if kind == "OptionalTensor":
            out = []
            for item in items:
                if item is None:
                    out.append(_ld(_OPTIONAL_ITEMS, _OPTIONAL_NONE))
                elif isinstance(item, torch.fx.Node):
                    out.append(_ld(_OPTIONAL_ITEMS, _ld(_OPTIONAL_TENSOR, self._tensor(item, where))))
                else:
                    raise CaptureError(f"{where}: Tensor?[] element {item!r} is neither a tensor nor None")
            return _ld(_ARG_OPTIONAL_TENSORS, b"".join(out))
        if kind == "int":
            if not all(isinstance(i, int) for i in items):
                raise CaptureError(f"{where}: int[] holds non-integers {items!r}")
            return _ld(_ARG_INTS, wire.packed_varints(
                _INT_ITEMS, [_check_int64(int(i), where) for i in items]))
        if kind == "float":
            if not all(isinstance(i, (int, float)) and not isinstance(i, bool) for i in items):
                raise CaptureError(f"{where}: float[] holds non-numbers {items!r}")
            return _ld(_ARG_FLOATS, wire.packed_doubles(_FLOAT_ITEMS, [float(i) for i in items]))
        if kind == "bool":
            if not all(isinstance(i, bool) for i in items):
                raise CaptureError(f"{where}: bool[] holds non-booleans {items!r}")
            return _ld(_ARG_BOOLS, wire.packed_varints(_BOOL_ITEMS, items))
        if kind == "str":
            if not all(isinstance(i, str) for i in items):
                raise CaptureError(f"{where}: str[] holds non-strings {items!r}")
            return _ld(_ARG_STRINGS, b"".join(_ld(_STRING_ITEMS, i.encode()) for i in items))
        if kind == "Scalar":
            return self._encode_list(items, _infer_list_kind(items, where), where)
        raise CaptureError(f"{where}: cannot encode a list of kind {kind}")


def _infer_list_kind(items, where) -> str:
    """The list kind of ``items`` when the schema does not say."""
    if not items:
        raise CaptureError(f"{where}: cannot tell the type of an empty list")
    if all(isinstance(i, torch.fx.Node) for i in items):
        return "Tensor"
    if all(i is None or isinstance(i, torch.fx.Node) for i in items):
        return "OptionalTensor"
    if all(isinstance(i, bool) for i in items):
        return "bool"
    if all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        return "int"
    if all(isinstance(i, (int, float)) and not isinstance(i, bool) for i in items):
        return "float"
    if all(isinstance(i, str) for i in items):
        return "str"
    raise CaptureError(f"{where}: cannot encode the list {items!r}")


def _check_int64(value: int, where: str) -> int:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise CaptureError(f"{where}: integer {value} does not fit in int64")
    return value


def _encode_literal(value: Any, where: str) -> bytes:
    """A non-tensor input or output value as an Argument literal, serialized."""
    if isinstance(value, torch.fx.Node):
        raise CaptureError(f"{where}: unexpected FX node {value.name}")
    return _Encoder(lambda node: None).encode(value, None, where)


def operator_name(op: torch._ops.OpOverload) -> str:
    """``ns::name`` plus ``.overload`` unless the overload name is empty:
    exactly the qualified name ``str(op._schema)`` begins with."""
    schema = op._schema
    return schema.name + ("." + schema.overload_name if schema.overload_name else "")


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
                                       _tensor_meta_cached({}), _meta_annotator(module),
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
    names = _Names()
    inputs: List[_Input] = []
    for (path, t, _), ph in zip(params, placeholders):
        inputs.append(_Input(graph_pb2.INPUT_KIND_PARAMETER, t, "", path, False, ph))
    for (path, t, persistent), ph in zip(buffers, placeholders[len(params):]):
        inputs.append(_Input(graph_pb2.INPUT_KIND_BUFFER, t, "", path, persistent, ph))
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
            inputs.append(_Input(graph_pb2.INPUT_KIND_CONSTANT, value, "", node.target, False, node))
        attr_nodes[node] = node.target
    for leaf, name, ph in zip(user_leaves, user_names, placeholders[len(state):]):
        inputs.append(_Input(graph_pb2.INPUT_KIND_USER_INPUT, leaf, name, "", False, ph))

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
    data = _encode(graph, inputs, attr_nodes, metas, names)
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


def _value_path(node: torch.fx.Node) -> tuple:
    """The value path of an FX node: getitem chains become index tuples."""
    path = []
    while node.op == "call_function" and node.target is operator.getitem:
        path.append(node.args[1])
        node = node.args[0]
    return (node,) + tuple(reversed(path))


def _encode(fx_graph: torch.fx.Graph, inputs: List[_Input], attr_nodes, metas, names: _Names,
            find_storage_groups: bool = True, sym_values=None) -> bytes:
    """The serialized GraphModule (compiled.wire writes it). With
    ``find_storage_groups`` false, the inputs' storage sharing is not looked up
    (their values are FakeTensors, whose inputs never share storage).

    ``sym_values`` (symbolic graphs: compiled.symbolic): {FX node: its
    graph_pb2.SymInt} for every placeholder and node that holds a SymInt;
    they become SymInt inputs, ``aten::sym_size`` outputs and
    ``_operator::mul``-style nodes, named in ``sym_int_values``."""
    sym_values = sym_values or {}
    sym_names: Dict[torch.fx.Node, str] = {}
    # Value names by value path. Inputs first (already named).
    path_names: Dict[tuple, str] = {}
    for inp in inputs:
        if isinstance(inp.value, torch.Tensor):
            path_names[(inp.fx_node,)] = inp.name
    first_attr = {}
    for node, target in attr_nodes.items():
        first_attr.setdefault(target, node)
        path_names[(node,)] = path_names[(first_attr[target],)]

    call_nodes = [n for n in fx_graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
    for inp in inputs:
        if inp.fx_node in sym_values:
            sym_names[inp.fx_node] = inp.name
    for node in call_nodes:
        if node in sym_values:
            sym_names[node] = names.take(node.name)
            continue  # aten::sym_size or SymInt arithmetic (symbolic.SYM_OPERATORS)
        if not isinstance(node.target, torch._ops.OpOverload):
            raise CaptureError(f"node '{node.name}': target {node.target!r} is not an ATen operator overload")
        for user in node.users:
            if not (user.op == "call_function" and user.target is operator.getitem) and (node,) not in metas:
                raise CaptureError(f"node '{node.name}': its {type(user.target).__name__} user "
                                   f"'{user.name}' reads a multi-output result without getitem")
        if (node,) in metas:
            path_names[(node,)] = names.take(node.name)
    for node in fx_graph.nodes:
        if node.op == "call_function" and node.target is operator.getitem:
            path = _value_path(node)
            if path in metas:
                path_names[path] = names.take(node.name)

    def tensor_name(node: torch.fx.Node) -> Optional[str]:
        return path_names.get(_value_path(node))

    encoder = _Encoder(tensor_name, sym_names.get)
    values = _TensorValues(metas)

    # Inputs.
    input_specs = []
    inputs_tag = _GRAPH["inputs"]
    for inp in inputs:
        if isinstance(inp.value, torch.Tensor):
            arg = _ld(_ARG_TENSOR, _ld(_NAME, inp.name.encode()))
            values.add(inp.name, (inp.fx_node,))
        elif inp.fx_node in sym_names:  # a SymInt input
            arg = _ld(_ARG_SYM_INT, _ld(_SYM_ARG_NAME, inp.name.encode()))
        else:
            arg = _encode_literal(inp.value, f"input {inp.name}")
        spec = [_SPEC_KIND + wire.varint(inp.kind)] if inp.kind else []
        spec.append(_ld(_SPEC_ARG, arg))
        if inp.target:
            spec.append(_ld(_SPEC_TARGET, inp.target.encode()))
        if inp.persistent:
            spec.append(_SPEC_PERSISTENT)
        input_specs.append(_ld(inputs_tag, b"".join(spec)))

    # Storage groups, among the caller's real tensors, in the order of their
    # first members. Tensors of one storage start from one address; only
    # those sharing a start are told apart by storage (each storage() call
    # builds a Python wrapper: 2 ms for densenet121's 728 inputs).
    starts: Dict[int, List[int]] = {}
    for i, inp in enumerate(inputs if find_storage_groups else ()):
        t = inp.value
        if isinstance(t, torch.Tensor):
            starts.setdefault(t.data_ptr() - t.storage_offset() * t.element_size(), []).append(i)
    groups: Dict[Tuple[str, int], List[int]] = {}
    for candidates in starts.values():
        if len(candidates) > 1:
            for i in candidates:
                groups.setdefault(_storage_key(inputs[i].value), []).append(i)
    storage_groups = [_ld(_GRAPH["storage_groups"],
                          graph_pb2.StorageGroup(inputs=members).SerializeToString())
                      for members in sorted(groups.values()) if len(members) > 1]

    # Nodes.
    operators: Dict[str, str] = {}
    nodes = []
    nodes_tag = _GRAPH["nodes"]
    for node in call_nodes:
        op = node.target
        if not isinstance(op, torch._ops.OpOverload):  # SymInt arithmetic
            from .symbolic import SYM_OPERATORS
            target, schema_text = SYM_OPERATORS[op]
            operators[target] = schema_text
            parts = [_ld(_NODE_TARGET, target.encode())]
            if node.kwargs or len(node.args) != schema_text.split("->")[0].count("SymInt"):
                raise CaptureError(f"node '{node.name}' ({target}): unexpected arguments "
                                   f"{node.args} {node.kwargs}")
            for pname, value in zip("ab", node.args):
                where = f"node '{node.name}' ({target}), argument '{pname}'"
                if isinstance(value, torch.fx.Node):
                    data = encoder.encode(value, None, where)
                elif isinstance(value, int) and not isinstance(value, bool):
                    data = _ld(_ARG_SYM_INT, _SYM_ARG_INT + wire.varint(_check_int64(value, where)))
                else:
                    raise CaptureError(f"{where}: {value!r} is not an integer")
                parts.append(_ld(_NODE_INPUTS, _ld(_INPUT_NAME, pname.encode())
                                 + _ld(_INPUT_ARG, data) + _POSITIONAL))
            parts.append(_ld(_NODE_OUTPUTS, _ld(_ARG_SYM_INT,
                                                _ld(_SYM_ARG_NAME, sym_names[node].encode()))))
            nodes.append(_ld(nodes_tag, b"".join(parts)))
            continue
        schema = op._schema
        target, schema_text, target_field = _operator_info(op, schema)
        operators[target] = schema_text
        parts = [target_field]
        _encode_node_inputs(parts, node, schema, target, encoder)
        _encode_node_outputs(parts, values, node, schema, target, metas, path_names, names,
                             sym_names)
        stack = node.meta.get(_META_STACK)
        module_path = node.meta.get(_META_MODULE)
        if stack or module_path:
            parts.append(_ld(_NODE_METADATA,
                             # a file name Python could not decode holds surrogates
                             (_ld(_STACK_TRACE, stack.encode("utf-8", "replace"))
                              if stack else b"")
                             + (_ld(_MODULE_PATH, module_path.encode("utf-8", "replace"))
                                if module_path else b"")))
        nodes.append(_ld(nodes_tag, b"".join(parts)))

    # Outputs.
    output_node = next(n for n in fx_graph.nodes if n.op == "output")
    leaves, _ = pytree.tree_flatten(output_node.args[0])
    outputs = [_ld(_GRAPH["outputs"], encoder.encode(leaf, None, f"output {i}"))
               for i, leaf in enumerate(leaves)]

    sym_int_values = [_ld(_GRAPH["sym_int_values"],
                          graph_pb2.SymIntValue(name=sym_names[node],
                                                value=sym_values[node]).SerializeToString())
                      for node in sorted(sym_names, key=lambda n: sym_names[n])]
    graph = b"".join(input_specs + nodes + outputs + values.encoded + sym_int_values
                     + storage_groups)
    head = graph_pb2.GraphModule()
    head.schema_version.major, head.schema_version.minor = SCHEMA_VERSION
    tail = graph_pb2.GraphModule(torch_version=torch.__version__, producer=PRODUCER)
    for name in sorted(operators):
        tail.operators.add(name=name, schema=operators[name])
    # Fields in number order, as protobuf writes them: schema_version (1),
    # graph (2), then operators, torch_version and producer (3-5).
    return head.SerializeToString() + _ld(_GRAPH_MODULE_GRAPH, graph) + tail.SerializeToString()


class _TensorValues:
    """The graph's tensor_values entries, serialized in the order added; a
    TensorMeta shared by many values (metas are shared, see
    _tensor_meta_cached) is serialized once."""

    def __init__(self, metas):
        self.metas = metas
        self.encoded: List[bytes] = []
        self._meta_bytes: Dict[int, bytes] = {}

    def add(self, name: str, path: tuple) -> None:
        meta = self.metas[path]
        data = self._meta_bytes.get(id(meta))  # metas keeps every meta alive
        if data is None:
            data = self._meta_bytes[id(meta)] = meta.SerializeToString()
        self.encoded.append(_ld(_GRAPH["tensor_values"],
                                _ld(_VALUE_NAME, name.encode()) + _ld(_VALUE_META, data)))


_SCHEMA_ARGUMENTS: Dict[Any, Tuple[list, dict]] = {}
_OPERATOR_INFO: Dict[Any, Tuple[str, str, bytes]] = {}


def _operator_info(op, schema) -> Tuple[str, str, bytes]:
    """(name, schema text, the Node's serialized target field) of an
    operator, made once per operator."""
    info = _OPERATOR_INFO.get(op)
    if info is None:
        name = operator_name(op)
        info = _OPERATOR_INFO[op] = (name, str(schema), _ld(_NODE_TARGET, name.encode()))
    return info


def _schema_arguments(op, schema) -> Tuple[list, dict]:
    """The schema's arguments as a list and by name, made once per operator
    (each ``schema.arguments`` builds new Python objects)."""
    info = _SCHEMA_ARGUMENTS.get(op)
    if info is None:
        arguments = [_SchemaArg(a.name, a.type, _ld(_INPUT_NAME, a.name.encode()))
                     for a in schema.arguments]
        info = _SCHEMA_ARGUMENTS[op] = (arguments, {a.name: a for a in arguments})
    return info


@dataclasses.dataclass(frozen=True)
class _SchemaArg:
    name: str
    type: Any
    name_field: bytes  # the NamedArgument's serialized name field


def _encode_node_inputs(parts: List[bytes], node, schema, target: str, encoder: _Encoder) -> None:
    """Bind the FX node's args/kwargs to the schema's argument names; one
    serialized NamedArgument each, appended to ``parts``."""
    arguments, by_name = _schema_arguments(node.target, schema)
    if len(node.args) > len(arguments):
        raise CaptureError(f"node '{node.name}' ({target}): {len(node.args)} positional arguments "
                           f"for a schema with {len(arguments)}")
    for arg, value in zip(arguments, node.args):
        where = f"node '{node.name}' ({target}), argument '{arg.name}'"
        parts.append(_named_argument(arg, encoder.encode(value, arg.type, where), _POSITIONAL))
    for key in node.kwargs:
        if key not in by_name:
            raise CaptureError(f"node '{node.name}' ({target}): keyword argument '{key}' "
                               "is not in the schema")
    positional = {a.name for a in arguments[:len(node.args)]}
    for arg in arguments:  # keywords in schema order
        if arg.name in node.kwargs:
            if arg.name in positional:
                raise CaptureError(f"node '{node.name}' ({target}): argument '{arg.name}' "
                                   "given both positionally and by keyword")
            where = f"node '{node.name}' ({target}), argument '{arg.name}'"
            parts.append(_named_argument(
                arg, encoder.encode(node.kwargs[arg.name], arg.type, where), _KEYWORD))


def _named_argument(arg: _SchemaArg, value: bytes, kind: bytes) -> bytes:
    return _ld(_NODE_INPUTS, arg.name_field + _ld(_INPUT_ARG, value) + kind)


def _encode_node_outputs(parts: List[bytes], values: _TensorValues, node, schema, target, metas,
                         path_names, names: _Names, sym_names=None) -> None:
    """One output Argument per schema return, appended to ``parts``; fresh
    names for unused ones."""
    returns = list(schema.returns)
    where = f"node '{node.name}' ({target})"

    def name_for(path) -> bytes:
        if path not in path_names:
            suffix = "_".join(str(i) for i in path[1:])
            path_names[path] = names.take(f"{node.name}_{suffix}")
        values.add(path_names[path], path)
        return _ld(_NAME, path_names[path].encode())

    def encode_return(ret, path) -> bytes:
        kind = _strip_optional(ret.type).kind()
        if kind == "TensorType":
            if path in metas:
                return _ld(_ARG_TENSOR, name_for(path))
            return _ARG_NONE  # a Tensor? return that was None
        if _list_element_kind(ret.type) == "Tensor":
            items = []
            i = 0
            while path + (i,) in metas:
                items.append(_ld(_TENSOR_ITEMS, name_for(path + (i,))))
                i += 1
            return _ld(_ARG_TENSORS, b"".join(items))
        if kind in ("SymIntType", "IntType") and sym_names and path[0] in sym_names \
                and len(path) == 1:
            return _ld(_ARG_SYM_INT, _ld(_SYM_ARG_NAME, sym_names[path[0]].encode()))
        raise CaptureError(f"{where}: cannot encode a return of type {ret.type}")

    if len(returns) == 1:
        parts.append(_ld(_NODE_OUTPUTS, encode_return(returns[0], (node,))))
    else:
        for i, ret in enumerate(returns):
            parts.append(_ld(_NODE_OUTPUTS, encode_return(ret, (node, i))))


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
