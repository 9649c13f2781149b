"""graph.proto's enums for torch's dtypes, layouts, memory formats and devices.

One table per kind, of (torch attribute name, graph.proto enum) pairs,
written out explicitly and never derived from torch's internal numbering;
both directions are made from it: capture and the graph encoder
(:mod:`compiled.encode`, :mod:`compiled.symbolic`) turn torch objects into
enums, the runtime, the native loader and packages turn enums back into
torch objects. An entry whose torch attribute this torch build lacks is
left out (``uint16`` appeared in torch 2.3).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch

from . import CaptureError
from .v1 import graph_pb2

__all__ = ["SCALAR_TYPE_OF", "DTYPE_OF", "DTYPE_BY_ENUM_NAME", "LAYOUT_ENUM_OF", "LAYOUT_OF",
           "MEMORY_FORMAT_ENUM_OF", "MEMORY_FORMAT_OF", "scalar_type", "layout_enum",
           "memory_format_enum", "set_device"]

_SCALAR_TYPE_PAIRS = [
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
]

_LAYOUT_PAIRS = [
    ("sparse_coo", graph_pb2.LAYOUT_SPARSE_COO),
    ("sparse_csr", graph_pb2.LAYOUT_SPARSE_CSR),
    ("sparse_csc", graph_pb2.LAYOUT_SPARSE_CSC),
    ("sparse_bsr", graph_pb2.LAYOUT_SPARSE_BSR),
    ("sparse_bsc", graph_pb2.LAYOUT_SPARSE_BSC),
    ("_mkldnn", graph_pb2.LAYOUT_MKLDNN),
    ("strided", graph_pb2.LAYOUT_STRIDED),
]

_MEMORY_FORMAT_PAIRS = [
    ("contiguous_format", graph_pb2.MEMORY_FORMAT_CONTIGUOUS),
    ("channels_last", graph_pb2.MEMORY_FORMAT_CHANNELS_LAST),
    ("channels_last_3d", graph_pb2.MEMORY_FORMAT_CHANNELS_LAST_3D),
    ("preserve_format", graph_pb2.MEMORY_FORMAT_PRESERVE),
]


def _both_ways(pairs: List[Tuple[str, int]]) -> Tuple[Dict, Dict]:
    """({torch object: enum}, {enum: torch object}) of the pairs whose torch
    attribute this torch build has."""
    to_enum, from_enum = {}, {}
    for attr, value in pairs:
        obj = getattr(torch, attr, None)
        if obj is not None:
            to_enum[obj] = value
            from_enum[value] = obj
    return to_enum, from_enum


SCALAR_TYPE_OF, DTYPE_OF = _both_ways(_SCALAR_TYPE_PAIRS)
LAYOUT_ENUM_OF, LAYOUT_OF = _both_ways(_LAYOUT_PAIRS)
MEMORY_FORMAT_ENUM_OF, MEMORY_FORMAT_OF = _both_ways(_MEMORY_FORMAT_PAIRS)

# By the enum's name ("SCALAR_TYPE_FLOAT"), as JSON spells it (packages).
DTYPE_BY_ENUM_NAME = {graph_pb2.ScalarType.Name(value): dtype for value, dtype in DTYPE_OF.items()}


def _enum_of(table: dict, value, where: str, what: str, proto_enum: str) -> int:
    """table[value], a graph.proto enum; CaptureError naming ``where`` (and
    ``what`` the value is) when the enum has no such member."""
    try:
        return table[value]
    except KeyError:
        raise CaptureError(f"{where}: {what} {value} has no graph.proto {proto_enum}") from None


def scalar_type(dtype: torch.dtype, where: str) -> int:
    """graph.proto's ScalarType of ``dtype``; CaptureError naming ``where``
    when it has none."""
    return _enum_of(SCALAR_TYPE_OF, dtype, where, "dtype", "ScalarType")


def layout_enum(layout: torch.layout, where: str) -> int:
    """graph.proto's Layout of ``layout``; CaptureError naming ``where``
    when it has none."""
    return _enum_of(LAYOUT_ENUM_OF, layout, where, "layout", "Layout")


def memory_format_enum(memory_format: torch.memory_format, where: str) -> int:
    """graph.proto's MemoryFormat of ``memory_format``; CaptureError naming
    ``where`` when it has none."""
    return _enum_of(MEMORY_FORMAT_ENUM_OF, memory_format, where, "memory format", "MemoryFormat")


def set_device(msg: graph_pb2.Device, device: torch.device) -> None:
    """Fill a graph.proto Device from a torch.device."""
    msg.type = device.type
    if device.index is not None:
        msg.has_index = True
        msg.index = device.index
