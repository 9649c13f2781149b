/*
 * wire.h: checks on protobuf bytes that unpacking does not make.
 *
 * protobuf-c (1.4) unpacks a `string` field into a NUL-terminated C string
 * and checks neither its encoding nor embedded NUL bytes, so after
 * unpacking a torch_version "1.13.0a0\0anything" reads as "1.13.0a0" (and
 * gets that version's cache key), and an output named "addmm_1\0zzz"
 * resolves to the value "addmm_1". Proto3 says a string is UTF-8; what a
 * NUL truncates is invisible once unpacked. So the bytes themselves are
 * checked: gc_wire_check_strings walks the encoded message once, with its
 * descriptor, through every nested message, and requires every string field
 * to be valid UTF-8 without a NUL byte. The daemon runs it on every request
 * it unpacks; gc_graph_decode runs it on graph bytes.
 *
 * The walk is linear in the bytes and recurses once per nested message,
 * which the message schemas bound (none is recursive); it also refuses to
 * go deeper than GC_WIRE_MAX_DEPTH.
 */
#ifndef GC_WIRE_H
#define GC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "compiler/error.h"

/* Nested messages deeper than this are refused (GC_ELIMIT). */
#define GC_WIRE_MAX_DEPTH 32

/* Checks every string field of the message of type `desc` encoded in
 * `buf`. Returns 0; GC_EINVAL when a string has a NUL byte or is not UTF-8,
 * with a message naming the field by its path from the top message
 * ("graph.outputs[0].as_tensor.name: ..."); GC_EMALFORMED when the bytes are
 * not protobuf wire format; GC_ELIMIT past GC_WIRE_MAX_DEPTH. Fields the
 * descriptor does not know are skipped unchecked. */
int gc_wire_check_strings(const ProtobufCMessageDescriptor *desc,
                          const uint8_t *buf, size_t len, gc_error *err);

/* The offset of the first byte of `s[0..n)` that is not part of valid UTF-8
 * (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or
 * -1 when all of it is. NUL counts as valid here. */
long gc_utf8_invalid_at(const uint8_t *s, size_t n);

#endif
