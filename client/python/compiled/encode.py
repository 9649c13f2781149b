"""The wire encoder: a traced FX graph becomes a serialized ``GraphModule``.

Capture (:mod:`compiled.capture`), the TorchDynamo backend
(:mod:`compiled.dynamo`) and the symbolic tracer (:mod:`compiled.symbolic`)
each produce an FX graph with the metadata of its values; this module turns
one into the bytes of a ``compiled.v1.GraphModule`` (``docs/graph-format.md``):
the inputs (:class:`GraphInput`), one Node per ATen call with its arguments
bound to the schema's names, the tensor values' TensorMeta, SymInt values
and storage groups. The bytes are written directly with the helpers of
:mod:`compiled.wire`, not built as protobuf objects (see there why);
graph.proto's enums for torch's dtypes and layouts come from
:mod:`compiled.formats`.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.utils._pytree as pytree

from . import CaptureError, UnsupportedCapture, __version__, wire
from .formats import layout_enum, memory_format_enum, scalar_type, set_device
from .symbolic import SYM_OPERATORS
from .v1 import graph_pb2

SCHEMA_VERSION = (1, 0)
PRODUCER = "compiled.capture " + __version__

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


# Tags of the fields the encoder writes (compiled.wire).
_delimited = wire.length_delimited  # a global: no attribute lookup per field
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


# ---------------------------------------------------------------------------
# Tensor metadata and storage identity.
# ---------------------------------------------------------------------------


def untyped_storage(t: torch.Tensor):
    """The untyped storage of ``t``: ``untyped_storage()`` when this torch has
    it (>= 2.0), else the untyped storage inside 1.13's TypedStorage."""
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    return t.storage()._storage


def storage_key(t: torch.Tensor) -> Tuple[str, int]:
    """An identity for the storage of ``t``, valid while ``t`` is alive.

    ``_cdata`` is the address of the StorageImpl, shared by every tensor
    viewing the storage (whatever their dtype), and, unlike ``data_ptr()``,
    distinct for two empty storages.
    """
    return (str(t.device), untyped_storage(t)._cdata)


def tensor_meta_cached(cache: Dict[tuple, Any]):
    """tensor_meta through ``cache``: values with the same metadata share
    one message, which nobody may change (a graph has far fewer distinct
    layouts than values; building a TensorMeta costs ~10 us)."""
    def meta_of(t: torch.Tensor, where: str) -> graph_pb2.TensorMeta:
        key = (t.dtype, t.shape, t.stride(), t.storage_offset(), t.requires_grad)
        meta = cache.get(key)
        if meta is None:
            meta = cache[key] = tensor_meta(t, where)
        return meta
    return meta_of


def tensor_meta(t: torch.Tensor, where: str) -> graph_pb2.TensorMeta:
    """TensorMeta of ``t`` as it is right now (static shapes)."""
    meta = graph_pb2.TensorMeta()
    meta.dtype = scalar_type(t.dtype, where)
    for size in t.shape:
        meta.sizes.add(as_int=int(size))
    if t.layout == torch.strided:
        for stride in t.stride():
            meta.strides.add(as_int=int(stride))
        meta.storage_offset.as_int = int(t.storage_offset())
    set_device(meta.device, t.device)
    meta.requires_grad = bool(t.requires_grad)
    meta.layout = layout_enum(t.layout, where)
    return meta


# Node metadata keys capture and dynamo fill in and the encoder writes out.
NODE_META_STACK = "compiled.stack_trace"
NODE_META_MODULE = "compiled.module_path"


@dataclasses.dataclass
class GraphInput:
    """One graph input before encoding."""
    kind: int                    # graph_pb2.INPUT_KIND_*
    value: Any                   # the caller's tensor, or a literal
    name: str                    # value name in the graph
    target: str = ""             # parameter/buffer path, constant attribute
    persistent: bool = False     # buffers only
    fx_node: Optional[torch.fx.Node] = None  # placeholder or first get_attr


class ValueNames:
    """Hands out unique value names."""

    def __init__(self):
        self.used = set()

    def take(self, base: str) -> str:
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name


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
                    data = _delimited(_ARG_SYM_INT, _delimited(_SYM_ARG_NAME, sym.encode()))
                else:
                    data = _delimited(_ARG_TENSOR, self._tensor(value, where))
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
                out.append(_delimited(_SYM_ITEMS, _delimited(_SYM_ARG_NAME, sym.encode())))
            elif isinstance(item, int) and not isinstance(item, bool):
                out.append(_delimited(_SYM_ITEMS, _SYM_ARG_INT + wire.varint(_check_int64(item, where))))
            else:
                raise CaptureError(f"{where}: SymInt[] element {item!r} is not an integer")
        return _delimited(_ARG_SYM_INTS, b"".join(out))

    def _tensor(self, node: torch.fx.Node, where: str) -> bytes:
        """The serialized TensorArgument naming ``node``'s value."""
        data = self._tensors.get(node)
        if data is None:
            name = self.tensor_name(node)
            if name is None:
                raise CaptureError(f"{where}: refers to FX node '{node.name}', which holds no tensor")
            data = self._tensors[node] = _delimited(_NAME, name.encode())
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
            return _delimited(_ARG_STRING, value.encode())
        if isinstance(value, torch.dtype):
            return _ARG_SCALAR_TYPE + wire.varint(scalar_type(value, where))
        if isinstance(value, torch.layout):
            return _ARG_LAYOUT + wire.varint(layout_enum(value, where))
        if isinstance(value, torch.memory_format):
            return _ARG_MEMORY_FORMAT + wire.varint(memory_format_enum(value, where))
        if isinstance(value, torch.device):
            device = graph_pb2.Device()
            set_device(device, value)
            return _delimited(_ARG_DEVICE, device.SerializeToString())
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
                out.append(_delimited(_TENSOR_ITEMS, self._tensor(item, where)))
            return _delimited(_ARG_TENSORS, b"".join(out))
        if kind == "OptionalTensor":
            out = []
            for item in items:
                if item is None:
                    out.append(_delimited(_OPTIONAL_ITEMS, _OPTIONAL_NONE))
                elif isinstance(item, torch.fx.Node):
                    out.append(_delimited(_OPTIONAL_ITEMS,
                                          _delimited(_OPTIONAL_TENSOR, self._tensor(item, where))))
                else:
                    raise CaptureError(f"{where}: Tensor?[] element {item!r} is neither a tensor nor None")
            return _delimited(_ARG_OPTIONAL_TENSORS, b"".join(out))
        if kind == "int":
            if not all(isinstance(i, int) for i in items):
                raise CaptureError(f"{where}: int[] holds non-integers {items!r}")
            return _delimited(_ARG_INTS, wire.packed_varints(
                _INT_ITEMS, [_check_int64(int(i), where) for i in items]))
        if kind == "float":
            if not all(isinstance(i, (int, float)) and not isinstance(i, bool) for i in items):
                raise CaptureError(f"{where}: float[] holds non-numbers {items!r}")
            return _delimited(_ARG_FLOATS, wire.packed_doubles(_FLOAT_ITEMS, [float(i) for i in items]))
        if kind == "bool":
            if not all(isinstance(i, bool) for i in items):
                raise CaptureError(f"{where}: bool[] holds non-booleans {items!r}")
            return _delimited(_ARG_BOOLS, wire.packed_varints(_BOOL_ITEMS, items))
        if kind == "str":
            if not all(isinstance(i, str) for i in items):
                raise CaptureError(f"{where}: str[] holds non-strings {items!r}")
            return _delimited(_ARG_STRINGS, b"".join(_delimited(_STRING_ITEMS, i.encode()) for i in items))
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
# The GraphModule.
# ---------------------------------------------------------------------------


def _value_path(node: torch.fx.Node) -> tuple:
    """The value path of an FX node: getitem chains become index tuples."""
    path = []
    while node.op == "call_function" and node.target is operator.getitem:
        path.append(node.args[1])
        node = node.args[0]
    return (node,) + tuple(reversed(path))


def encode_graph_module(fx_graph: torch.fx.Graph, inputs: List[GraphInput], attr_nodes, metas,
                        names: ValueNames, find_storage_groups: bool = True,
                        sym_values=None) -> bytes:
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
            arg = _delimited(_ARG_TENSOR, _delimited(_NAME, inp.name.encode()))
            values.add(inp.name, (inp.fx_node,))
        elif inp.fx_node in sym_names:  # a SymInt input
            arg = _delimited(_ARG_SYM_INT, _delimited(_SYM_ARG_NAME, inp.name.encode()))
        else:
            arg = _encode_literal(inp.value, f"input {inp.name}")
        spec = [_SPEC_KIND + wire.varint(inp.kind)] if inp.kind else []
        spec.append(_delimited(_SPEC_ARG, arg))
        if inp.target:
            spec.append(_delimited(_SPEC_TARGET, inp.target.encode()))
        if inp.persistent:
            spec.append(_SPEC_PERSISTENT)
        input_specs.append(_delimited(inputs_tag, b"".join(spec)))

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
                groups.setdefault(storage_key(inputs[i].value), []).append(i)
    storage_groups = [_delimited(_GRAPH["storage_groups"],
                                 graph_pb2.StorageGroup(inputs=members).SerializeToString())
                      for members in sorted(groups.values()) if len(members) > 1]

    # Nodes.
    operators: Dict[str, str] = {}
    nodes = []
    nodes_tag = _GRAPH["nodes"]
    for node in call_nodes:
        op = node.target
        if not isinstance(op, torch._ops.OpOverload):  # SymInt arithmetic
            target, schema_text = SYM_OPERATORS[op]
            operators[target] = schema_text
            parts = [_delimited(_NODE_TARGET, target.encode())]
            if node.kwargs or len(node.args) != schema_text.split("->")[0].count("SymInt"):
                raise CaptureError(f"node '{node.name}' ({target}): unexpected arguments "
                                   f"{node.args} {node.kwargs}")
            for pname, value in zip("ab", node.args):
                where = f"node '{node.name}' ({target}), argument '{pname}'"
                if isinstance(value, torch.fx.Node):
                    data = encoder.encode(value, None, where)
                elif isinstance(value, int) and not isinstance(value, bool):
                    data = _delimited(_ARG_SYM_INT,
                                      _SYM_ARG_INT + wire.varint(_check_int64(value, where)))
                else:
                    raise CaptureError(f"{where}: {value!r} is not an integer")
                parts.append(_delimited(_NODE_INPUTS, _delimited(_INPUT_NAME, pname.encode())
                                        + _delimited(_INPUT_ARG, data) + _POSITIONAL))
            parts.append(_delimited(_NODE_OUTPUTS, _delimited(
                _ARG_SYM_INT, _delimited(_SYM_ARG_NAME, sym_names[node].encode()))))
            nodes.append(_delimited(nodes_tag, b"".join(parts)))
            continue
        schema = op._schema
        target, schema_text, target_field = _operator_info(op, schema)
        operators[target] = schema_text
        parts = [target_field]
        _encode_node_inputs(parts, node, schema, target, encoder)
        _encode_node_outputs(parts, values, node, schema, target, metas, path_names, names,
                             sym_names)
        stack = node.meta.get(NODE_META_STACK)
        module_path = node.meta.get(NODE_META_MODULE)
        if stack or module_path:
            parts.append(_delimited(_NODE_METADATA,
                                    # a file name Python could not decode holds surrogates
                                    (_delimited(_STACK_TRACE, stack.encode("utf-8", "replace"))
                                     if stack else b"")
                                    + (_delimited(_MODULE_PATH,
                                                  module_path.encode("utf-8", "replace"))
                                       if module_path else b"")))
        nodes.append(_delimited(nodes_tag, b"".join(parts)))

    # Outputs.
    output_node = next(n for n in fx_graph.nodes if n.op == "output")
    leaves, _ = pytree.tree_flatten(output_node.args[0])
    outputs = [_delimited(_GRAPH["outputs"], encoder.encode(leaf, None, f"output {i}"))
               for i, leaf in enumerate(leaves)]

    sym_int_values = [_delimited(_GRAPH["sym_int_values"],
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
    return head.SerializeToString() + _delimited(_GRAPH_MODULE_GRAPH, graph) + tail.SerializeToString()


class _TensorValues:
    """The graph's tensor_values entries, serialized in the order added; a
    TensorMeta shared by many values (metas are shared, see
    tensor_meta_cached) is serialized once."""

    def __init__(self, metas):
        self.metas = metas
        self.encoded: List[bytes] = []
        self._meta_bytes: Dict[int, bytes] = {}

    def add(self, name: str, path: tuple) -> None:
        meta = self.metas[path]
        data = self._meta_bytes.get(id(meta))  # metas keeps every meta alive
        if data is None:
            data = self._meta_bytes[id(meta)] = meta.SerializeToString()
        self.encoded.append(_delimited(_GRAPH["tensor_values"],
                                       _delimited(_VALUE_NAME, name.encode())
                                       + _delimited(_VALUE_META, data)))


_SCHEMA_ARGUMENTS: Dict[Any, Tuple[list, dict]] = {}
_OPERATOR_INFO: Dict[Any, Tuple[str, str, bytes]] = {}


def _operator_info(op, schema) -> Tuple[str, str, bytes]:
    """(name, schema text, the Node's serialized target field) of an
    operator, made once per operator."""
    info = _OPERATOR_INFO.get(op)
    if info is None:
        name = operator_name(op)
        info = _OPERATOR_INFO[op] = (name, str(schema), _delimited(_NODE_TARGET, name.encode()))
    return info


def _schema_arguments(op, schema) -> Tuple[list, dict]:
    """The schema's arguments as a list and by name, made once per operator
    (each ``schema.arguments`` builds new Python objects)."""
    info = _SCHEMA_ARGUMENTS.get(op)
    if info is None:
        arguments = [_SchemaArg(a.name, a.type, _delimited(_INPUT_NAME, a.name.encode()))
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
    return _delimited(_NODE_INPUTS, arg.name_field + _delimited(_INPUT_ARG, value) + kind)


def _encode_node_outputs(parts: List[bytes], values: _TensorValues, node, schema, target, metas,
                         path_names, names: ValueNames, sym_names=None) -> None:
    """One output Argument per schema return, appended to ``parts``; fresh
    names for unused ones."""
    returns = list(schema.returns)
    where = f"node '{node.name}' ({target})"

    def name_for(path) -> bytes:
        if path not in path_names:
            suffix = "_".join(str(i) for i in path[1:])
            path_names[path] = names.take(f"{node.name}_{suffix}")
        values.add(path_names[path], path)
        return _delimited(_NAME, path_names[path].encode())

    def encode_return(ret, path) -> bytes:
        kind = _strip_optional(ret.type).kind()
        if kind == "TensorType":
            if path in metas:
                return _delimited(_ARG_TENSOR, name_for(path))
            return _ARG_NONE  # a Tensor? return that was None
        if _list_element_kind(ret.type) == "Tensor":
            items = []
            i = 0
            while path + (i,) in metas:
                items.append(_delimited(_TENSOR_ITEMS, name_for(path + (i,))))
                i += 1
            return _delimited(_ARG_TENSORS, b"".join(items))
        if kind in ("SymIntType", "IntType") and sym_names and path[0] in sym_names \
                and len(path) == 1:
            return _delimited(_ARG_SYM_INT, _delimited(_SYM_ARG_NAME, sym_names[path[0]].encode()))
        raise CaptureError(f"{where}: cannot encode a return of type {ret.type}")

    if len(returns) == 1:
        parts.append(_delimited(_NODE_OUTPUTS, encode_return(returns[0], (node,))))
    else:
        for i, ret in enumerate(returns):
            parts.append(_delimited(_NODE_OUTPUTS, encode_return(ret, (node, i))))


