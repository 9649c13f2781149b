/*
 * buf.c: growable byte buffer. See buf.h.
 */
#include "compiler/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(gc_buf *b, size_t extra) {
  if (b->failed)
    return false;
  if (b->len + extra + 1 <= b->cap)
    return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) {
    if (cap > ((size_t)-1) / 2) {
      b->failed = true;
      return false;
    }
    cap *= 2;
  }
  char *p = realloc(b->data, cap);
  if (!p) {
    b->failed = true;
    return false;
  }
  b->data = p;
  b->cap = cap;
  return true;
}

void gc_buf_append(gc_buf *b, const char *s, size_t n) {
  if (!reserve(b, n))
    return;
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void gc_buf_puts(gc_buf *b, const char *s) {
  gc_buf_append(b, s, strlen(s));
}

void gc_buf_vprintf(gc_buf *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0 || !reserve(b, (size_t)n))
    return;
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
}

void gc_buf_printf(gc_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gc_buf_vprintf(b, fmt, ap);
  va_end(ap);
}

char *gc_buf_take(gc_buf *b) {
  char *p = b->data ? b->data : calloc(1, 1);
  b->data = NULL;
  b->len = b->cap = 0;
  b->failed = false;
  return p;
}

void gc_buf_free(gc_buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}
