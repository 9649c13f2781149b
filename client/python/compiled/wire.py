"""Protobuf wire format, written directly: how capture serializes a graph.

A captured graph is one GraphModule of thousands of small messages
(densenet121: 553 nodes, 1524 tensor values, ~8000 sub-messages, 690 KB).
Building it as protobuf Python objects and serializing them took 30 ms
there: every sub-message is created through the C++ extension and written
by reflection. Capture instead writes each message's bytes as it goes, with
the few helpers below; field numbers and wire types come from the
generated descriptors, never from constants typed here.

The result is an ordinary serialized message: the daemon parses it with
protobuf-c, ``Captured.graph_module`` with the Python protobuf library, and
tests check that protobuf re-serializes what capture wrote to the same
bytes (fields in number order, proto3 defaults left out, repeated scalars
packed: what protobuf itself writes).
"""

from __future__ import annotations

import struct
from typing import Iterable

from google.protobuf.descriptor import FieldDescriptor

_SMALL = [bytes((i,)) for i in range(128)]
_DOUBLE = struct.Struct("<d")

_LENGTH_DELIMITED_TYPES = (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING,
                           FieldDescriptor.TYPE_BYTES)
_VARINT_TYPES = (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64,
                 FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64,
                 FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_ENUM)


def varint(n: int) -> bytes:
    """``n`` as a base-128 varint; a negative n as its 64-bit two's
    complement (ten bytes), as protobuf writes int32 and int64."""
    if 0 <= n < 128:
        return _SMALL[n]
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _is_repeated(field) -> bool:
    """Whether a field is repeated (``is_repeated`` from protobuf 5.28 on;
    ``label`` before, gone in protobuf 7)."""
    flag = getattr(field, "is_repeated", None)
    if flag is not None:
        return bool(flag)
    return field.label == FieldDescriptor.LABEL_REPEATED


def tag(message_class, field_name: str) -> bytes:
    """The tag (field number and wire type) of a field of a generated
    message class: length-delimited for messages, strings and packed
    repeated numbers, 64-bit for doubles, varint for the rest."""
    field = message_class.DESCRIPTOR.fields_by_name[field_name]
    if field.type in _LENGTH_DELIMITED_TYPES or _is_repeated(field):
        wire_type = 2  # repeated numbers are packed (proto3)
    elif field.type == FieldDescriptor.TYPE_DOUBLE:
        wire_type = 1
    elif field.type in _VARINT_TYPES:
        wire_type = 0
    else:
        raise ValueError(f"{message_class.__name__}.{field_name}: no wire type for "
                         f"field type {field.type}")
    return varint(field.number << 3 | wire_type)


def length_delimited(field_tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: a sub-message, a string or a packed list."""
    n = len(payload)
    return field_tag + (_SMALL[n] if n < 128 else varint(n)) + payload


def double(field_tag: bytes, x: float) -> bytes:
    """A double field (wire type 1, little-endian IEEE 754)."""
    return field_tag + _DOUBLE.pack(x)


def packed_varints(field_tag: bytes, items: Iterable[int]) -> bytes:
    """A packed repeated int64/int32/bool/enum field; nothing when empty
    (protobuf leaves an empty repeated field out)."""
    payload = b"".join(varint(int(i)) for i in items)
    return length_delimited(field_tag, payload) if payload else b""


def packed_doubles(field_tag: bytes, items) -> bytes:
    """A packed repeated double field; nothing when empty."""
    return length_delimited(field_tag, struct.pack(f"<{len(items)}d", *items)) if items else b""
