/*
 * pbjson.c: a lossless JSON form for any protobuf-c message.
 *
 * compilectl shows graphs (and later artifacts and service messages) as JSON,
 * and the Python client writes the same files. This file converts between a
 * protobuf-c message and a jansson value using nothing but the message's
 * descriptor, so a new message type needs no code here.
 *
 * The mapping is proto3's canonical JSON mapping, with the field names as
 * written in the .proto file (Python's preserving_proto_field_name=True):
 *
 *   message           object, keys in field-number order
 *   repeated          array (an element may not be null)
 *   enum              the value's name; a number not in the enum is written
 *                     as a number (proto3 enums are open). Input: either.
 *   int32, uint32     number (and their sint/fixed variants)
 *   int64, uint64     number; a uint64 above INT64_MAX as a decimal string,
 *                     because jansson's integers are int64. Input: numbers
 *                     or decimal strings (Python writes strings) for every
 *                     integer type; an integral real such as 1e3 is accepted.
 *                     (jansson refuses integer literals beyond int64, so a
 *                     larger uint64 must come as a string.)
 *   float, double     number, or "NaN", "Infinity", "-Infinity". jansson
 *                     prints reals with %.17g, which round-trips every double
 *                     exactly, -0.0 included. A float is widened to double.
 *                     NaN payloads and signs are not kept: NaN reads back as
 *                     the canonical quiet NaN. Input: numeric strings too
 *                     (read with strtod: LC_NUMERIC must be "C", the default).
 *   bool              true / false
 *   string            string; must be valid UTF-8 without NUL characters
 *   bytes             base64, standard alphabet with padding. Input: the
 *                     url-safe alphabet and missing padding are accepted.
 *
 * Which fields are written follows what protobuf-c would put on the wire, so
 * that the JSON and the binary form always hold the same information:
 *  - a proto3 field without presence is left out when it holds its default
 *    (0, -0.0, false, "", empty bytes, enum 0, empty repeated); protobuf-c
 *    compares numbers by value, so -0.0 is not packed and not written either;
 *  - a oneof member is written whenever it is the selected case, even when it
 *    holds a default value ({"as_int": 0}, {"as_none": false}), because the
 *    case itself is information. protobuf-c does not pack a selected string
 *    member that still points at the field's default (protobuf_c_empty_string)
 *    or a NULL sub-message, so neither is written; the decoder therefore
 *    always mallocs a oneof string, even an empty one;
 *  - a sub-message that is set (non-NULL) is written, even when empty;
 *  - proto2 optional fields follow their has_ flag (strings and messages: a
 *    non-NULL pointer that is not the default). protoc-c 1.4.1 refuses proto3
 *    `optional`, so that case does not arise.
 * Unknown fields kept by protobuf_c_message_unpack() have no JSON form and
 * are dropped, as Python drops them.
 *
 * Input is checked strictly and every problem is reported with its JSON path:
 * unknown field names (a field may also be named by its lowerCamelCase JSON
 * name; protobuf-c does not record custom json_name options), a field named
 * twice, two members of one oneof, wrong JSON types, integers out of range,
 * bad enum names, bad base64. `null` means "absent". Messages nest at most
 * PBJSON_MAX_DEPTH deep in both directions (jansson's own parser stops at 2048
 * levels of JSON), so whatever pbjson_encode writes pbjson_decode reads.
 *
 * The decoder builds messages with malloc in exactly the layout
 * protobuf_c_message_free_unpacked(msg, NULL) frees: each message is
 * malloc'd and initialised by protobuf_c_message_init(); a repeated field is
 * a malloc'd array at the field's offset with its size_t count at the
 * quantifier offset; a oneof stores its case (the member's field number) at
 * the quantifier offset; strings and bytes are malloc'd copies. The message is
 * kept in that freeable state after every step (a count is raised only once
 * the element is stored), so on any error the decoder frees the whole message
 * with that one call.
 */
#include "client/lib/pbjson.h"

#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

/* State of one encode or decode call, passed down the recursion. */
typedef struct pbjson__ctx {
  char *err;       /* caller's buffer for the message; may be NULL */
  size_t errlen;   /* size of err; 0 when there is none */
  int failed;      /* an error has been written to err */
  int depth;       /* messages entered so far; 0 outside the top one */
  int flags;       /* PBJSON_* of pbjson_encode_flags */
  size_t path_len; /* strlen(path) */
  char path[1024]; /* JSON path of the current value, "" at the top */
} pbjson__ctx;

/* ---- errors and paths ---- */

/*
 * Writes "path: message" to the caller's buffer and returns -1. When both do
 * not fit, the start of the path gives way to "...", never the message.
 */
static int fail(pbjson__ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int fail(pbjson__ctx *c, const char *fmt, ...) {
  char msg[512];
  const char *path = c->path, *cut = "";
  size_t need;
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c->errlen > 0 && !c->failed) {
    need = c->path_len + 2 + strlen(msg) + 1;
    if (need > c->errlen) {
      size_t skip = need - c->errlen + 3;
      path += skip < c->path_len ? skip : c->path_len;
      while (*path != '\0' && *path != '.' && *path != '[')
        path++; /* cut between names */
      path += *path == '.';
      cut = "...";
    }
    if (c->path_len > 0)
      snprintf(c->err, c->errlen, "%s%s: %s", cut, path, msg);
    else
      snprintf(c->err, c->errlen, "%s", msg);
  }
  c->failed = 1;
  return -1;
}

/* Appends `s` to the path, truncating when it is full. */
static void path_append(pbjson__ctx *c, const char *s) {
  size_t n = strlen(s);
  size_t room = sizeof c->path - 1 - c->path_len;

  if (n > room)
    n = room;
  memcpy(c->path + c->path_len, s, n);
  c->path_len += n;
  c->path[c->path_len] = '\0';
}

/* Enters object member `name`; returns what path_pop() needs. */
static size_t path_push_name(pbjson__ctx *c, const char *name) {
  size_t old = c->path_len;

  if (old > 0)
    path_append(c, ".");
  path_append(c, name);
  return old;
}

/* Enters array element `i`; returns what path_pop() needs. */
static size_t path_push_index(pbjson__ctx *c, size_t i) {
  size_t old = c->path_len;
  char buf[32];

  snprintf(buf, sizeof buf, "[%zu]", i);
  path_append(c, buf);
  return old;
}

static void path_pop(pbjson__ctx *c, size_t old) {
  c->path_len = old;
  c->path[old] = '\0';
}

/*
 * Writes `s` (len bytes) to dst (at least 32 bytes) in double quotes for an
 * error message: at most about 60 bytes of it, with quotes, backslashes and
 * control bytes escaped.
 */
static void quote(char *dst, size_t dstlen, const char *s, size_t len) {
  size_t o = 0, i;

  dst[o++] = '"';
  for (i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)s[i];
    /* stop when full, or after 60 bytes on a character boundary */
    if (o + 16 >= dstlen || (i >= 60 && (ch & 0xC0) != 0x80)) {
      memcpy(dst + o, "...", 3);
      o += 3;
      break;
    }
    if (ch == '"' || ch == '\\') {
      dst[o++] = '\\';
      dst[o++] = (char)ch;
    } else if (ch < 0x20 || ch == 0x7F) {
      o += (size_t)snprintf(dst + o, dstlen - o, "\\x%02x", ch);
    } else {
      dst[o++] = (char)ch;
    }
  }
  dst[o++] = '"';
  dst[o] = '\0';
}

/* "a string", "an array", ... for "expected X, got Y" messages. */
static const char *json_kind(const json_t *j) {
  switch (json_typeof(j)) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "an array";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
  case JSON_REAL:
    return "a number";
  case JSON_TRUE:
  case JSON_FALSE:
    return "a boolean";
  case JSON_NULL:
    return "null";
  }
  return "an unknown JSON value";
}

/* The shortest %g form of d that reads back as d, for error messages. */
static const char *show_double(char *buf, size_t len, double d) {
  int prec;

  for (prec = 15; prec < 17; prec++) {
    snprintf(buf, len, "%.*g", prec, d);
    if (strtod(buf, NULL) == d)
      return buf;
  }
  snprintf(buf, len, "%.17g", d);
  return buf;
}

/* The .proto spelling of a field type. */
static const char *type_name(ProtobufCType t) {
  static const char *const names[] = {
      "int32",  "sint32",  "sfixed32", "int64",   "sint64", "sfixed64",
      "uint32", "fixed32", "uint64",   "fixed64", "float",  "double",
      "bool",   "enum",    "string",   "bytes",   "message"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

/* ---- helpers shared by both directions ---- */

/* Size of one element of a repeated field of type t in protobuf-c's layout. */
static size_t elt_size(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_ENUM:
    return 4;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_DOUBLE:
    return 8;
  case PROTOBUF_C_TYPE_BOOL:
    return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_MESSAGE:
    return sizeof(void *);
  case PROTOBUF_C_TYPE_BYTES:
    return sizeof(ProtobufCBinaryData);
  }
  return 8;
}

/* 1 when s[0..len) is UTF-8 without overlongs, surrogates or > U+10FFFF. */
static int utf8_valid(const unsigned char *s, size_t len) {
  size_t i = 0;

  while (i < len) {
    unsigned cp, min, ch = s[i];
    size_t n, k;

    if (ch < 0x80) {
      i++;
      continue;
    } else if ((ch & 0xE0) == 0xC0) {
      n = 1, cp = ch & 0x1F, min = 0x80;
    } else if ((ch & 0xF0) == 0xE0) {
      n = 2, cp = ch & 0x0F, min = 0x800;
    } else if ((ch & 0xF8) == 0xF0) {
      n = 3, cp = ch & 0x07, min = 0x10000;
    } else {
      return 0;
    }
    if (len - i - 1 < n)
      return 0;
    for (k = 1; k <= n; k++) {
      if ((s[i + k] & 0xC0) != 0x80)
        return 0;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return 0;
    i += n + 1;
  }
  return 1;
}

#define MEMBER(m, off) ((char *)(m) + (off))
#define CMEMBER(m, off) ((const char *)(m) + (off))

/* ======================= message -> JSON ======================= */

/*
 * 1 when field f of m is present, i.e. when protobuf_c_message_pack() would
 * write it (see the rules at the top of this file).
 */
static int field_present(const ProtobufCMessage *m,
                         const ProtobufCFieldDescriptor *f) {
  const void *member = CMEMBER(m, f->offset);
  const char *q = CMEMBER(m, f->quantifier_offset);
  int pointer =
      f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE;
  const void *ptr = pointer ? *(const void *const *)member : NULL;

  if (f->label == PROTOBUF_C_LABEL_REPEATED)
    return *(const size_t *)q > 0 && *(const void *const *)member != NULL;
  if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
    if (*(const uint32_t *)q != f->id)
      return 0;
    return !pointer || (ptr != NULL && ptr != f->default_value);
  }
  if (f->label == PROTOBUF_C_LABEL_REQUIRED)
    return 1;
  if (f->label == PROTOBUF_C_LABEL_OPTIONAL)
    return pointer ? ptr != NULL && ptr != f->default_value
                   : *(const protobuf_c_boolean *)q != 0;
  /* PROTOBUF_C_LABEL_NONE: proto3 without presence, left out when zero */
  switch (f->type) {
  case PROTOBUF_C_TYPE_BOOL:
    return *(const protobuf_c_boolean *)member != 0;
  case PROTOBUF_C_TYPE_FLOAT:
    return *(const float *)member != 0;
  case PROTOBUF_C_TYPE_DOUBLE:
    return *(const double *)member != 0;
  case PROTOBUF_C_TYPE_STRING:
    return ptr != NULL && *(const char *)ptr != '\0';
  case PROTOBUF_C_TYPE_BYTES:
    return ((const ProtobufCBinaryData *)member)->len > 0;
  case PROTOBUF_C_TYPE_MESSAGE:
    return ptr != NULL;
  default:
    return elt_size(f->type) == 4 ? *(const uint32_t *)member != 0
                                  : *(const uint64_t *)member != 0;
  }
}

/* Sets the out-of-memory error (unless a better one is set); returns NULL. */
static json_t *oom(pbjson__ctx *c) {
  fail(c, "out of memory");
  return NULL;
}

static json_t *encode_double(double d) {
  if (isnan(d))
    return json_string("NaN");
  if (isinf(d))
    return json_string(d > 0 ? "Infinity" : "-Infinity");
  return json_real(d);
}

/* Base64 (standard alphabet, padded) of a bytes value. */
static json_t *encode_bytes(pbjson__ctx *c, const ProtobufCBinaryData *b) {
  size_t len = b->data != NULL ? b->len : 0, done = 0, w = 0;
  char *buf;
  json_t *s;

  if (len > SIZE_MAX / 4 * 3 - 3)
    return oom(c);
  buf = malloc((len + 2) / 3 * 4 + 1);
  if (buf == NULL)
    return oom(c);
  while (done < len) { /* EVP_EncodeBlock takes an int: go by 3 MiB */
    size_t chunk = len - done < (3u << 20) ? len - done : (3u << 20);
    w += (size_t)EVP_EncodeBlock((unsigned char *)buf + w, b->data + done,
                                 (int)chunk);
    done += chunk;
  }
  buf[w] = '\0';
  s = json_stringn(buf, w);
  free(buf);
  return s != NULL ? s : oom(c);
}

static json_t *encode_message(pbjson__ctx *c, const ProtobufCMessage *m);

/* One value of field f stored at `member` (a field or an array element). */
static json_t *encode_value(pbjson__ctx *c, const ProtobufCFieldDescriptor *f,
                            const void *member) {
  json_t *v = NULL;
  char num[32];

  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    v = json_integer(*(const int32_t *)member);
    break;
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    v = json_integer(*(const uint32_t *)member);
    break;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    v = json_integer(*(const int64_t *)member);
    break;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64: {
    uint64_t u = *(const uint64_t *)member;
    if (u <= INT64_MAX) {
      v = json_integer((json_int_t)u);
    } else {
      snprintf(num, sizeof num, "%" PRIu64, u);
      v = json_string(num);
    }
    break;
  }
  case PROTOBUF_C_TYPE_FLOAT:
    v = encode_double(*(const float *)member);
    break;
  case PROTOBUF_C_TYPE_DOUBLE:
    v = encode_double(*(const double *)member);
    break;
  case PROTOBUF_C_TYPE_BOOL:
    v = json_boolean(*(const protobuf_c_boolean *)member);
    break;
  case PROTOBUF_C_TYPE_ENUM: {
    int e = *(const int *)member;
    const ProtobufCEnumValue *ev =
        protobuf_c_enum_descriptor_get_value(f->descriptor, e);
    v = ev != NULL ? json_string(ev->name) : json_integer(e);
    break;
  }
  case PROTOBUF_C_TYPE_STRING: {
    const char *s = *(const char *const *)member;
    size_t len = s != NULL ? strlen(s) : 0;
    if (!utf8_valid((const unsigned char *)s, len)) {
      fail(c, "string is not valid UTF-8");
      return NULL;
    }
    v = json_stringn(s != NULL ? s : "", len);
    break;
  }
  case PROTOBUF_C_TYPE_BYTES:
    return encode_bytes(c, member);
  case PROTOBUF_C_TYPE_MESSAGE: {
    const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)member;
    /* NULL only in required fields or arrays: packed as an empty message */
    if (sub != NULL)
      return encode_message(c, sub);
    v = json_object();
    break;
  }
  }
  return v != NULL ? v : oom(c);
}

static json_t *encode_repeated(pbjson__ctx *c, const ProtobufCMessage *m,
                               const ProtobufCFieldDescriptor *f) {
  size_t n = *(const size_t *)CMEMBER(m, f->quantifier_offset);
  const char *arr = *(const char *const *)CMEMBER(m, f->offset);
  size_t esz = elt_size(f->type), i;
  json_t *a = json_array();

  if (a == NULL)
    return oom(c);
  for (i = 0; i < n; i++) {
    size_t old = path_push_index(c, i);
    json_t *v = encode_value(c, f, arr + i * esz);
    path_pop(c, old);
    if (v == NULL || json_array_append_new(a, v) != 0) {
      json_decref(a);
      return oom(c);
    }
  }
  return a;
}

/* With PBJSON_WITH_DEFAULTS: 1 when an absent field f is written anyway
 * (proto3 scalars and strings without presence, and repeated fields). */
static int default_wanted(const pbjson__ctx *c,
                          const ProtobufCFieldDescriptor *f) {
  if (!(c->flags & PBJSON_WITH_DEFAULTS) ||
      (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
    return 0;
  if (f->label == PROTOBUF_C_LABEL_REPEATED)
    return 1;
  return f->label == PROTOBUF_C_LABEL_NONE &&
         f->type != PROTOBUF_C_TYPE_MESSAGE;
}

static json_t *encode_message(pbjson__ctx *c, const ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *desc = m->descriptor;
  json_t *obj;
  unsigned i;

  if (c->depth >= PBJSON_MAX_DEPTH) {
    fail(c, "messages nest deeper than %d levels", PBJSON_MAX_DEPTH);
    return NULL;
  }
  obj = json_object();
  if (obj == NULL)
    return oom(c);
  c->depth++;
  for (i = 0; i < desc->n_fields; i++) { /* fields are in number order */
    const ProtobufCFieldDescriptor *f = &desc->fields[i];
    size_t old;
    json_t *v;

    if (!field_present(m, f) && !default_wanted(c, f))
      continue;
    old = path_push_name(c, f->name);
    v = f->label == PROTOBUF_C_LABEL_REPEATED
            ? encode_repeated(c, m, f)
            : encode_value(c, f, CMEMBER(m, f->offset));
    path_pop(c, old);
    /* json_object_set_new releases v even when it fails */
    if (v == NULL || json_object_set_new(obj, f->name, v) != 0) {
      json_decref(obj);
      return oom(c);
    }
  }
  c->depth--;
  return obj;
}

json_t *pbjson_encode_flags(const ProtobufCMessage *m, int flags, char *err,
                            size_t errlen) {
  pbjson__ctx c = {
      .err = err, .errlen = err != NULL ? errlen : 0, .flags = flags};

  return encode_message(&c, m);
}

json_t *pbjson_encode(const ProtobufCMessage *m, char *err, size_t errlen) {
  return pbjson_encode_flags(m, 0, err, errlen);
}

char *pbjson_encode_text(const ProtobufCMessage *m, char *err, size_t errlen) {
  const size_t flags =
      JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17);
  json_t *j = pbjson_encode(m, err, errlen);
  size_t n;
  char *text = NULL;

  if (j == NULL)
    return NULL;
  /* Dump into our own buffer so that it is free()d whatever allocator
   * jansson was given. */
  n = json_dumpb(j, NULL, 0, flags);
  if (n > 0 && (text = malloc(n + 2)) != NULL &&
      json_dumpb(j, text, n, flags) == n) {
    text[n] = '\n';
    text[n + 1] = '\0';
  } else {
    free(text);
    text = NULL;
    if (err != NULL && errlen > 0)
      snprintf(err, errlen, "out of memory");
  }
  json_decref(j);
  return text;
}

/* ======================= JSON -> message ======================= */

/* 1 when `key` is the lowerCamelCase JSON name of field `name`. */
static int is_json_name(const char *name, const char *key) {
  int up = 0;

  for (; *name != '\0'; name++) {
    char want = *name;
    if (want == '_') {
      up = 1;
      continue;
    }
    if (up && want >= 'a' && want <= 'z')
      want = (char)(want - 'a' + 'A');
    up = 0;
    if (*key++ != want)
      return 0;
  }
  return *key == '\0';
}

/* The field that `key` names, by its .proto name or its JSON name. */
static const ProtobufCFieldDescriptor *
find_field(const ProtobufCMessageDescriptor *desc, const char *key) {
  unsigned i;

  for (i = 0; i < desc->n_fields; i++)
    if (strcmp(desc->fields[i].name, key) == 0)
      return &desc->fields[i];
  for (i = 0; i < desc->n_fields; i++)
    if (is_json_name(desc->fields[i].name, key))
      return &desc->fields[i];
  return NULL;
}

/*
 * Reads an integral JSON value (a number, or a decimal string as Python
 * writes 64-bit integers) as a sign and a magnitude, so that both int64 and
 * uint64 fit.
 */
static int read_integer(pbjson__ctx *c, const json_t *j, int *neg,
                        uint64_t *mag) {
  char q[96];

  if (json_is_integer(j)) {
    json_int_t v = json_integer_value(j);
    *neg = v < 0;
    *mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    return 0;
  }
  if (json_is_real(j)) {
    double d = json_real_value(j);
    if (d != floor(d))
      return fail(c, "%s is not an integer", show_double(q, sizeof q, d));
    if (fabs(d) >= 18446744073709551616.0) /* 2^64 */
      return fail(c, "%s is out of range for an integer",
                  show_double(q, sizeof q, d));
    *neg = d < 0;
    *mag = (uint64_t)fabs(d);
    return 0;
  }
  if (json_is_string(j)) {
    const char *s = json_string_value(j), *p = s;
    size_t len = json_string_length(j);
    uint64_t v = 0;

    *neg = *p == '-';
    p += *neg;
    if (*p == '\0' || (size_t)(p - s) + strlen(p) != len)
      goto bad;
    for (; *p != '\0'; p++) {
      if (*p < '0' || *p > '9')
        goto bad;
      if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) {
        quote(q, sizeof q, s, len);
        return fail(c, "integer %s is out of range", q);
      }
      v = v * 10 + (uint64_t)(*p - '0');
    }
    *mag = v;
    return 0;
  bad:
    quote(q, sizeof q, s, len);
    return fail(c, "invalid integer %s: expected decimal digits", q);
  }
  return fail(c, "expected an integer, got %s", json_kind(j));
}

/*
 * Stores an integer read by read_integer() at dst as a value of type t
 * (an integer type or an enum), refusing values outside t's range.
 */
static int store_integer(pbjson__ctx *c, ProtobufCType t, int neg, uint64_t mag,
                         void *dst) {
  int is_signed = 1, bits = 32;
  uint64_t lim;

  switch (t) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    bits = 64;
    break;
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    is_signed = 0;
    break;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    is_signed = 0, bits = 64;
    break;
  default: /* int32, sint32, sfixed32, enum */
    break;
  }
  if (is_signed)
    lim = (UINT64_C(1) << (bits - 1)) - (neg ? 0 : 1);
  else
    lim = neg ? 0 : bits == 64 ? UINT64_MAX : UINT32_MAX;
  if (mag > lim)
    return fail(c, "%s%" PRIu64 " is out of range for %s", neg ? "-" : "", mag,
                type_name(t));
  if (is_signed) {
    int64_t v = neg && mag > 0 ? -(int64_t)(mag - 1) - 1 : (int64_t)mag;
    if (bits == 32)
      *(int32_t *)dst = (int32_t)v;
    else
      *(int64_t *)dst = v;
  } else if (bits == 32) {
    *(uint32_t *)dst = (uint32_t)mag;
  } else {
    *(uint64_t *)dst = mag;
  }
  return 0;
}

/* A number, "NaN", "Infinity", "-Infinity" or a numeric string. */
static int read_double(pbjson__ctx *c, const json_t *j, double *out) {
  const char *s, *p;
  char *end;
  char q[96];
  size_t len;

  if (json_is_integer(j)) {
    *out = (double)json_integer_value(j);
    return 0;
  }
  if (json_is_real(j)) {
    *out = json_real_value(j);
    return 0;
  }
  if (!json_is_string(j))
    return fail(c, "expected a number, got %s", json_kind(j));
  s = json_string_value(j);
  len = json_string_length(j);
  if (strcmp(s, "NaN") == 0) {
    *out = NAN;
    return 0;
  }
  if (strcmp(s, "Infinity") == 0 || strcmp(s, "-Infinity") == 0) {
    *out = s[0] == '-' ? -INFINITY : INFINITY;
    return 0;
  }
  /* strtod alone would take "inf", "nan", hex and leading spaces too */
  for (p = s; *p != '\0' && strchr("0123456789+-.eE", *p) != NULL; p++)
    ;
  quote(q, sizeof q, s, len);
  if (p == s || (size_t)(p - s) != len)
    return fail(c, "invalid number %s", q);
  *out = strtod(s, &end);
  if (end != p)
    return fail(c, "invalid number %s", q);
  if (isinf(*out))
    return fail(c, "number %s is out of range for double", q);
  return 0;
}

static int read_enum(pbjson__ctx *c, const ProtobufCEnumDescriptor *ed,
                     const json_t *j, int *out) {
  int neg;
  uint64_t mag;
  char q[96];

  if (json_is_string(j)) {
    const ProtobufCEnumValue *ev =
        protobuf_c_enum_descriptor_get_value_by_name(ed, json_string_value(j));
    if (ev == NULL) {
      quote(q, sizeof q, json_string_value(j), json_string_length(j));
      return fail(c, "unknown enum value %s for %s", q, ed->name);
    }
    *out = ev->value;
    return 0;
  }
  if (!json_is_number(j))
    return fail(c, "expected an enum name or number for %s, got %s", ed->name,
                json_kind(j));
  if (read_integer(c, j, &neg, &mag) != 0)
    return -1;
  return store_integer(c, PROTOBUF_C_TYPE_ENUM, neg, mag, out);
}

/* A malloc'd copy of a JSON string, checked for NUL and UTF-8. */
static int read_string(pbjson__ctx *c, const json_t *j, char **out) {
  const char *s;
  size_t len;

  if (!json_is_string(j))
    return fail(c, "expected a string, got %s", json_kind(j));
  s = json_string_value(j);
  len = json_string_length(j);
  if (memchr(s, '\0', len) != NULL)
    return fail(c, "string contains a NUL character (\\u0000)");
  /* jansson checks text it parses; a json_t built with *_nocheck may lie */
  if (!utf8_valid((const unsigned char *)s, len))
    return fail(c, "string is not valid UTF-8");
  *out = malloc(len + 1);
  if (*out == NULL)
    return fail(c, "out of memory");
  memcpy(*out, s, len);
  (*out)[len] = '\0';
  return 0;
}

static int is_b64(char ch) {
  return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
         (ch >= '0' && ch <= '9') || ch == '+' || ch == '/';
}

/*
 * Decodes base64 (standard or url-safe alphabet, padding optional) into a
 * malloc'd buffer. EVP_DecodeBlock() is lax (it skips blanks, accepts '=' in
 * the middle and counts padding as data), so the text is checked and
 * normalised to padded standard base64 first.
 */
static int read_bytes(pbjson__ctx *c, const json_t *j,
                      ProtobufCBinaryData *out) {
  const char *s;
  size_t len, n = 0, pad = 0, full, nbytes, i;
  unsigned char *norm, *data = NULL;

  if (!json_is_string(j))
    return fail(c, "expected a base64 string, got %s", json_kind(j));
  s = json_string_value(j);
  len = json_string_length(j);
  if (len > INT_MAX - 4)
    return fail(c, "bytes value too long");
  norm = malloc(len + 4);
  if (norm == NULL)
    return fail(c, "out of memory");
  for (i = 0; i < len; i++) {
    char ch = s[i] == '-' ? '+' : s[i] == '_' ? '/' : s[i];
    if (ch == '=') {
      pad++;
    } else if (!is_b64(ch) || pad > 0) {
      free(norm);
      return fail(c, "invalid base64: %s at offset %zu",
                  pad > 0 ? "data after '=' padding" : "unexpected character",
                  i);
    } else {
      norm[n++] = (unsigned char)ch;
    }
  }
  if (n % 4 == 1 || pad > 2 || (pad > 0 && (n + pad) % 4 != 0)) {
    free(norm);
    return fail(c, "invalid base64: bad length or padding");
  }
  for (full = n; full % 4 != 0; full++)
    norm[full] = '=';
  nbytes = n / 4 * 3 + (n % 4 != 0 ? n % 4 - 1 : 0);
  if (nbytes > 0) {
    data = malloc(full / 4 * 3);
    if (data == NULL || EVP_DecodeBlock(data, norm, (int)full) < 0) {
      fail(c, data == NULL ? "out of memory" : "invalid base64");
      free(norm);
      free(data);
      return -1;
    }
  }
  free(norm);
  out->len = nbytes;
  out->data = data;
  return 0;
}

static int decode_message(pbjson__ctx *c,
                          const ProtobufCMessageDescriptor *desc,
                          const json_t *j, ProtobufCMessage *m);

/* A new malloc'd message of type desc with its defaults, or NULL. */
static ProtobufCMessage *new_message(const ProtobufCMessageDescriptor *desc) {
  ProtobufCMessage *m = malloc(desc->sizeof_message);

  if (m != NULL)
    protobuf_c_message_init(desc, m);
  return m;
}

/*
 * Decodes one value of field f from j into dst (the field or an array
 * element). Writes dst only on success, except for a sub-message, which is
 * linked in first so that the caller's cleanup frees it.
 */
static int decode_value(pbjson__ctx *c, const ProtobufCFieldDescriptor *f,
                        const json_t *j, void *dst) {
  int neg;
  uint64_t mag;
  double d = 0;
  char num[32];

  switch (f->type) {
  case PROTOBUF_C_TYPE_BOOL:
    if (!json_is_boolean(j))
      return fail(c, "expected a boolean, got %s", json_kind(j));
    *(protobuf_c_boolean *)dst = json_is_true(j);
    return 0;
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_DOUBLE:
    if (read_double(c, j, &d) != 0)
      return -1;
    if (f->type == PROTOBUF_C_TYPE_DOUBLE)
      *(double *)dst = d;
    else if (isfinite(d) && fabs(d) > FLT_MAX)
      return fail(c, "%s is out of range for float",
                  show_double(num, sizeof num, d));
    else
      *(float *)dst = (float)d;
    return 0;
  case PROTOBUF_C_TYPE_ENUM:
    return read_enum(c, f->descriptor, j, dst);
  case PROTOBUF_C_TYPE_STRING:
    return read_string(c, j, dst);
  case PROTOBUF_C_TYPE_BYTES:
    return read_bytes(c, j, dst);
  case PROTOBUF_C_TYPE_MESSAGE: {
    ProtobufCMessage *sub;
    if (!json_is_object(j)) /* checked here so that nothing is allocated */
      return fail(c, "expected an object for %s, got %s",
                  ((const ProtobufCMessageDescriptor *)f->descriptor)->name,
                  json_kind(j));
    sub = new_message(f->descriptor);
    if (sub == NULL)
      return fail(c, "out of memory");
    *(ProtobufCMessage **)dst = sub;
    return decode_message(c, f->descriptor, j, sub);
  }
  default: /* the integer types */
    if (read_integer(c, j, &neg, &mag) != 0)
      return -1;
    return store_integer(c, f->type, neg, mag, dst);
  }
}

static int decode_repeated(pbjson__ctx *c, const ProtobufCFieldDescriptor *f,
                           const json_t *j, ProtobufCMessage *m) {
  size_t *count = (size_t *)MEMBER(m, f->quantifier_offset);
  size_t n, i, esz = elt_size(f->type);
  char *arr;

  if (!json_is_array(j))
    return fail(c, "expected an array, got %s", json_kind(j));
  n = json_array_size(j);
  if (n == 0)
    return 0;
  arr = calloc(n, esz); /* zeroed: unused string slots are NULL */
  if (arr == NULL)
    return fail(c, "out of memory");
  *(char **)MEMBER(m, f->offset) = arr;
  *count = 0;
  for (i = 0; i < n; i++) {
    const json_t *e = json_array_get(j, i);
    size_t old = path_push_index(c, i);
    int rc;

    if (json_is_null(e)) {
      rc = fail(c, "null is not allowed in a repeated field");
    } else {
      rc = decode_value(c, f, e, arr + i * esz);
      /* a sub-message linked in before it failed is counted, to be freed */
      if (rc == 0 || (f->type == PROTOBUF_C_TYPE_MESSAGE &&
                      ((ProtobufCMessage **)(void *)arr)[i] != NULL))
        *count = i + 1;
    }
    path_pop(c, old);
    if (rc != 0)
      return -1;
  }
  return 0;
}

/* Records that a singular field was given: oneof case or has_ flag. */
static void set_presence(const ProtobufCFieldDescriptor *f,
                         ProtobufCMessage *m) {
  char *q = MEMBER(m, f->quantifier_offset);

  if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
    *(uint32_t *)q = f->id;
  else if (f->label == PROTOBUF_C_LABEL_OPTIONAL &&
           f->type != PROTOBUF_C_TYPE_STRING &&
           f->type != PROTOBUF_C_TYPE_MESSAGE)
    *(protobuf_c_boolean *)q = 1;
}

/* Decodes member `key` (naming field f) of a JSON object into m. */
static int decode_field(pbjson__ctx *c, const ProtobufCMessageDescriptor *desc,
                        const json_t *obj, const char *key,
                        const ProtobufCFieldDescriptor *f, const json_t *v,
                        ProtobufCMessage *m) {
  void *member = MEMBER(m, f->offset);
  char q[96];
  int rc;

  if (strcmp(key, f->name) != 0 && json_object_get(obj, f->name) != NULL) {
    quote(q, sizeof q, key, strlen(key));
    return fail(c, "field \"%s\" is given twice, also as %s", f->name, q);
  }
  if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
    uint32_t set = *(const uint32_t *)MEMBER(m, f->quantifier_offset);
    const ProtobufCFieldDescriptor *other =
        set != 0 ? protobuf_c_message_descriptor_get_field(desc, set) : NULL;
    if (set != 0)
      return fail(c,
                  "fields \"%s\" and \"%s\" are both set, but they are "
                  "members of one oneof",
                  other != NULL ? other->name : "?", f->name);
  }
  if (f->label == PROTOBUF_C_LABEL_REPEATED)
    return decode_repeated(c, f, v, m);
  if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
    if (json_is_object(v))
      set_presence(f, m); /* decode_value links the sub-message in */
    return decode_value(c, f, v, member);
  }
  rc = decode_value(c, f, v, member);
  if (rc == 0)
    set_presence(f, m);
  return rc;
}

static int decode_message(pbjson__ctx *c,
                          const ProtobufCMessageDescriptor *desc,
                          const json_t *j, ProtobufCMessage *m) {
  const char *key;
  json_t *v;
  char q[96];

  if (!json_is_object(j))
    return fail(c, "expected an object for %s, got %s", desc->name,
                json_kind(j));
  if (c->depth >= PBJSON_MAX_DEPTH)
    return fail(c, "messages nest deeper than %d levels", PBJSON_MAX_DEPTH);
  c->depth++;
  /* jansson keeps object members in the order of the text */
  json_object_foreach((json_t *)j, key, v) {
    const ProtobufCFieldDescriptor *f = find_field(desc, key);
    size_t old;
    int rc;

    if (f == NULL) {
      quote(q, sizeof q, key, strlen(key));
      return fail(c, "unknown field %s for %s", q, desc->name);
    }
    if (json_is_null(v))
      continue;
    old = path_push_name(c, key);
    rc = decode_field(c, desc, j, key, f, v, m);
    path_pop(c, old);
    if (rc != 0)
      return -1;
  }
  c->depth--;
  return 0;
}

int pbjson_decode(const ProtobufCMessageDescriptor *desc, const json_t *j,
                  ProtobufCMessage **out, char *err, size_t errlen) {
  pbjson__ctx c = {.err = err, .errlen = err != NULL ? errlen : 0};
  ProtobufCMessage *m;

  *out = NULL;
  if (j == NULL)
    return fail(&c, "no JSON value");
  m = new_message(desc);
  if (m == NULL)
    return fail(&c, "out of memory");
  if (decode_message(&c, desc, j, m) != 0) {
    protobuf_c_message_free_unpacked(m, NULL);
    return -1;
  }
  *out = m;
  return 0;
}

int pbjson_decode_text(const ProtobufCMessageDescriptor *desc, const char *text,
                       size_t len, ProtobufCMessage **out, char *err,
                       size_t errlen) {
  json_error_t je;
  json_t *j;
  int rc;

  *out = NULL;
  j = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
  if (j == NULL) {
    if (err != NULL && errlen > 0)
      snprintf(err, errlen, "line %d, column %d: %s%s", je.line, je.column,
               je.text,
               json_error_code(&je) == json_error_invalid_utf8
                   ? " (JSON text must be valid UTF-8)"
                   : "");
    return -1;
  }
  rc = pbjson_decode(desc, j, out, err, errlen);
  json_decref(j);
  return rc;
}
