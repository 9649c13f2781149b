/*
 * pbjson.h: a lossless JSON form for any protobuf-c message.
 *
 * The mapping is proto3's canonical JSON mapping with the original field
 * names, the form Python writes with
 * json_format.MessageToJson(msg, preserving_proto_field_name=True), so files
 * written by either client load in the other. It is driven by protobuf-c's
 * descriptors alone: there is no per-message code. pbjson.c explains the
 * mapping in full.
 *
 * Every function that can fail writes a one-line message to `err` (when
 * errlen > 0) naming the JSON path and the problem, e.g.
 *   graph.nodes[3].inputs[0].arg: unknown field "as_tenser" for
 *   compiled.v1.Argument
 */
#ifndef PBJSON_H
#define PBJSON_H

#include <stddef.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

/* Messages may nest at most this deep, in either direction. */
#define PBJSON_MAX_DEPTH 64

/*
 * Renders message `m` as a new JSON object; the caller owns it (json_decref).
 * Returns NULL, with a message in `err`, when out of memory, when a string
 * field is not valid UTF-8 or when messages nest deeper than PBJSON_MAX_DEPTH.
 */
json_t *pbjson_encode(const ProtobufCMessage *m, char *err, size_t errlen);

/* Flags of pbjson_encode_flags. */
enum {
  /* Also write proto3 fields without presence that hold their default
   * (0, false, "", empty lists), as Python's json_format does with
   * including_default_value_fields=True: a script reading the output can
   * rely on every key being there. Oneof members and unset messages are
   * still left out. */
  PBJSON_WITH_DEFAULTS = 1,
};

/* As pbjson_encode, with PBJSON_* flags. */
json_t *pbjson_encode_flags(const ProtobufCMessage *m, int flags, char *err,
                            size_t errlen);

/*
 * As pbjson_encode, as text: indented by 2, keys in field-number order,
 * ending with a newline. The caller frees the result with free().
 */
char *pbjson_encode_text(const ProtobufCMessage *m, char *err, size_t errlen);

/*
 * Builds a message of type `desc` from the JSON value `j`, which it does not
 * modify or keep. On success returns 0 and sets *out to a message the caller
 * frees with protobuf_c_message_free_unpacked(*out, NULL). On failure returns
 * -1, sets *out to NULL, frees everything it allocated and writes to `err`.
 */
int pbjson_decode(const ProtobufCMessageDescriptor *desc, const json_t *j,
                  ProtobufCMessage **out, char *err, size_t errlen);

/*
 * As pbjson_decode, from `len` bytes of JSON text. Duplicate keys are refused;
 * syntax errors are reported with their line and column.
 */
int pbjson_decode_text(const ProtobufCMessageDescriptor *desc, const char *text,
                       size_t len, ProtobufCMessage **out, char *err,
                       size_t errlen);

#endif
