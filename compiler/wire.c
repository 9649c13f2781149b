/*
 * wire.c: string checks on encoded protobuf messages. See wire.h.
 *
 * The protobuf wire format is a sequence of (tag, value) records: the tag is
 * a varint holding the field number and the wire type (0 varint, 1 fixed
 * 64-bit, 2 length-delimited, 5 fixed 32-bit; 3 and 4, groups, do not occur
 * in proto3). Strings, bytes, nested messages and packed repeated scalars
 * are length-delimited; the descriptor tells which is which.
 *
 * While walking, nothing is remembered about where a record was: only when
 * a bad string is found does each level, as the error unwinds, record its
 * field and (for a repeated field) count the earlier records of that field
 * by walking its own bytes again up to the bad one. So the common case
 * costs one pass and no allocation.
 */
#include "compiler/wire.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

long gc_utf8_invalid_at(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xbf; /* range of the first continuation byte */
    if (c >= 0xc2 && c <= 0xdf) {
      need = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      need = 2;
      if (c == 0xe0)
        lo = 0xa0; /* overlong */
      else if (c == 0xed)
        hi = 0x9f; /* UTF-16 surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
      need = 3;
      if (c == 0xf0)
        lo = 0x90; /* overlong */
      else if (c == 0xf4)
        hi = 0x8f; /* above U+10FFFF */
    } else {
      return (long)i; /* a continuation byte, 0xc0, 0xc1 or 0xf5..0xff */
    }
    if (n - i <= need)
      return (long)i; /* truncated sequence */
    if (s[i + 1] < lo || s[i + 1] > hi)
      return (long)i;
    for (size_t k = 2; k <= need; k++)
      if (s[i + k] < 0x80 || s[i + k] > 0xbf)
        return (long)i;
    i += need + 1;
  }
  return -1;
}

/* One level of the path to a bad string. */
typedef struct segment {
  const ProtobufCFieldDescriptor *field;
  long index; /* position among the records of a repeated field; -1 */
} segment;

typedef struct walker {
  segment path[GC_WIRE_MAX_DEPTH]; /* filled while an error unwinds */
  int depth;                       /* levels of path in use */
  char problem[160];               /* what is wrong with the string */
} walker;

/* Reads a varint at *off. False when truncated or longer than 10 bytes. */
static bool varint(const uint8_t *p, size_t len, size_t *off, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 70 && *off < len; shift += 7) {
    uint8_t b = p[(*off)++];
    *v |= (uint64_t)(b & 0x7f) << (shift < 64 ? shift : 63);
    if (!(b & 0x80))
      return true;
  }
  return false;
}

/* Moves *off past the value of a record of wire type `wt`; for a
 * length-delimited one, sets *start and *n to its contents. */
static bool skip_value(const uint8_t *p, size_t len, size_t *off, int wt,
                       size_t *start, size_t *n) {
  uint64_t v;
  switch (wt) {
  case 0:
    return varint(p, len, off, &v);
  case 1:
    if (len - *off < 8)
      return false;
    *off += 8;
    return true;
  case 5:
    if (len - *off < 4)
      return false;
    *off += 4;
    return true;
  case 2:
    if (!varint(p, len, off, &v) || v > len - *off)
      return false;
    *start = *off;
    *n = (size_t)v;
    *off += (size_t)v;
    return true;
  default:
    return false; /* groups and invalid wire types */
  }
}

/* How many records of field `number` come before offset `upto`. */
static long count_before(const uint8_t *p, size_t upto, uint32_t number) {
  long count = 0;
  size_t off = 0, start, n;
  uint64_t tag;
  while (off < upto && varint(p, upto, &off, &tag)) {
    if ((tag >> 3) == number)
      count++;
    if (!skip_value(p, upto, &off, (int)(tag & 7), &start, &n))
      break;
  }
  return count;
}

static int check_string(walker *w, const uint8_t *s, size_t n) {
  const uint8_t *nul = memchr(s, 0, n);
  if (nul) {
    snprintf(w->problem, sizeof w->problem,
             "contains a NUL byte (byte %zu of %zu)", (size_t)(nul - s), n);
    return GC_EINVAL;
  }
  long bad = gc_utf8_invalid_at(s, n);
  if (bad >= 0) {
    snprintf(w->problem, sizeof w->problem,
             "is not valid UTF-8 (byte %ld of %zu is 0x%02x)", bad, n, s[bad]);
    return GC_EINVAL;
  }
  return 0;
}

static int check_message(walker *w, const ProtobufCMessageDescriptor *desc,
                         const uint8_t *p, size_t len, int depth) {
  if (depth >= GC_WIRE_MAX_DEPTH) {
    snprintf(w->problem, sizeof w->problem,
             "nests messages deeper than %d levels", GC_WIRE_MAX_DEPTH);
    return GC_ELIMIT;
  }
  size_t off = 0;
  while (off < len) {
    size_t at = off, start = 0, n = 0;
    uint64_t tag;
    if (!varint(p, len, &off, &tag) || (tag >> 3) == 0 ||
        (tag >> 3) > UINT32_MAX ||
        !skip_value(p, len, &off, (int)(tag & 7), &start, &n)) {
      snprintf(w->problem, sizeof w->problem,
               "bytes are not protobuf wire format (at byte %zu)", at);
      return GC_EMALFORMED;
    }
    uint32_t number = (uint32_t)(tag >> 3);
    const ProtobufCFieldDescriptor *f =
        (tag & 7) == 2 ? protobuf_c_message_descriptor_get_field(desc, number)
                       : NULL;
    int rc = 0;
    if (f && f->type == PROTOBUF_C_TYPE_STRING)
      rc = check_string(w, p + start, n);
    else if (f && f->type == PROTOBUF_C_TYPE_MESSAGE)
      rc = check_message(w, f->descriptor, p + start, n, depth + 1);
    if (rc) {
      if (rc == GC_EINVAL && w->depth <= depth) /* the innermost level */
        w->depth = depth + 1;
      w->path[depth].field = f;
      w->path[depth].index = f->label == PROTOBUF_C_LABEL_REPEATED
                                 ? count_before(p, at, number)
                                 : -1;
      return rc;
    }
  }
  return 0;
}

int gc_wire_check_strings(const ProtobufCMessageDescriptor *desc,
                          const uint8_t *buf, size_t len, gc_error *err) {
  walker w = {.depth = 0};
  int rc = check_message(&w, desc, buf, len, 0);
  if (!rc)
    return 0;
  if (rc != GC_EINVAL)
    return gc_errorf(err, rc, "%s: %s", desc->name, w.problem);
  char path[512];
  size_t used = 0;
  path[0] = '\0';
  for (int i = 0; i < w.depth && used < sizeof path; i++) {
    const segment *s = &w.path[i];
    used += (size_t)snprintf(path + used, sizeof path - used, "%s%s",
                             i ? "." : "", s->field->name);
    if (s->index >= 0 && used < sizeof path)
      used +=
          (size_t)snprintf(path + used, sizeof path - used, "[%ld]", s->index);
  }
  return gc_errorf(err, GC_EINVAL,
                   "%s: string field %s; strings must be UTF-8 without NUL "
                   "bytes",
                   path, w.problem);
}
