/*
 * label.c: a request's Label, checked on the way in and rebuilt on the way
 * out. See label.h.
 *
 * A label is text for people, printed by compilectl on a terminal and
 * written to the logs, so besides the UTF-8 check every string gets
 * (compiler/wire.h) it may hold no control character: no C0 byte (ESC, a
 * newline, a carriage return), no DEL, no C1 code point (U+0080-U+009F,
 * which some terminals take as CSI). A name cannot move the cursor, clear
 * the screen or forge a line of `compilectl ls`.
 *
 * Over-long strings are refused, not cut: the client knows which end of
 * its text matters (the Python client keeps the end of a long path), and a
 * label silently cut by the daemon would hide the client's bug. The limits
 * are the store's (cache.h) and are checked before anything is copied.
 */
#include "daemon/label.h"

#include <string.h>

/* Offset of the first control character in s (n bytes of valid UTF-8),
 * or -1. */
static long control_at(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n; i++) {
    if (u[i] < 0x20 || u[i] == 0x7f)
      return (long)i;
    /* U+0080-U+009F: 0xC2 then 0x80-0x9F */
    if (u[i] == 0xc2 && i + 1 < n && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f)
      return (long)i;
  }
  return -1;
}

/* Checks one string field and copies it into out (cap bytes). */
static int read_text(const char *field, const char *s, char *out, size_t cap,
                     gc_error *err) {
  if (!s)
    s = "";
  size_t n = strnlen(s, cap);
  if (n >= cap)
    return gc_errorf(err, GC_ELIMIT,
                     "label.%s is longer than %zu bytes, the limit", field,
                     cap - 1);
  long bad = control_at(s, n);
  if (bad >= 0)
    return gc_errorf(err, GC_EINVAL,
                     "label.%s has a control character (byte %ld of %zu); a "
                     "label is text for people",
                     field, bad, n);
  memcpy(out, s, n + 1);
  return 0;
}

int label_read(const Compiled__V1__Label *pl, cache_label *out, gc_error *err) {
  memset(out, 0, sizeof *out);
  if (!pl)
    return 0;
  int rc = read_text("name", pl->name, out->name, sizeof out->name, err);
  if (!rc)
    rc = read_text("file", pl->file, out->file, sizeof out->file, err);
  if (!rc)
    rc = read_text("host", pl->host, out->host, sizeof out->host, err);
  if (!rc && pl->line < 0)
    rc = gc_errorf(err, GC_EINVAL,
                   "label.line is %d; a line number is 1 or more (0: "
                   "unknown)",
                   (int)pl->line);
  if (rc)
    memset(out, 0, sizeof *out);
  else
    out->line = pl->line;
  return rc;
}

Compiled__V1__Label *label_message(gc_arena *a, const cache_label *l) {
  if (!cache_label_present(l))
    return NULL;
  Compiled__V1__Label *m = gc_arena_zalloc(a, sizeof *m);
  if (!m)
    return NULL;
  compiled__v1__label__init(m);
  m->name = gc_arena_strdup(a, l->name);
  m->file = gc_arena_strdup(a, l->file);
  m->host = gc_arena_strdup(a, l->host);
  m->line = l->line;
  if (!m->name || !m->file || !m->host)
    return NULL;
  return m;
}
