/*
 * buf.h: a growable byte buffer for building text (graph listings, C code).
 *
 * Memory is malloc'd and owned by the buffer: gc_buf_free() releases it,
 * gc_buf_take() hands the bytes over to the caller. After an allocation
 * failure the buffer stays valid, stops growing and reports it in `failed`.
 */
#ifndef GC_BUF_H
#define GC_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct gc_buf {
  char *data;  /* NUL-terminated contents; NULL until the first append */
  size_t len;  /* bytes used, the NUL excluded */
  size_t cap;  /* bytes allocated */
  bool failed; /* an append ran out of memory */
} gc_buf;

#define GC_BUF_INIT                                                            \
  { NULL, 0, 0, false }

void gc_buf_append(gc_buf *b, const char *s, size_t n);
void gc_buf_puts(gc_buf *b, const char *s);
void gc_buf_printf(gc_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void gc_buf_vprintf(gc_buf *b, const char *fmt, va_list ap);

/* Returns the contents (caller frees; never NULL unless out of memory) and
 * resets the buffer. */
char *gc_buf_take(gc_buf *b);

void gc_buf_free(gc_buf *b);

#endif
