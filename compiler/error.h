/*
 * error.h: how the compiler library reports failure.
 *
 * compiler/ never prints, logs or exits (docs/design.md). A function that
 * can fail returns 0 or a negative GC_E* code and, when the caller passed a
 * gc_error, fills it with a message that names what is wrong and where: the
 * node (index, name, target) and the argument. gc_strerror() names a code.
 */
#ifndef GC_ERROR_H
#define GC_ERROR_H

#define GC_ERRORS(X)                                                           \
  X(OK, 0, "success")                                                          \
  X(MALFORMED, -1, "malformed bytes")                                          \
  X(VERSION, -2, "unsupported schema version")                                 \
  X(INVAL, -3, "invalid graph")                                                \
  X(LIMIT, -4, "graph exceeds a limit")                                        \
  X(NOMEM, -5, "out of memory")                                                \
  X(SCHEMA, -6, "malformed operator schema")                                   \
  X(IO, -7, "input/output error")                                              \
  X(JSON, -8, "malformed JSON")                                                \
  X(UNSUPPORTED, -9, "unsupported")                                            \
  X(INTERNAL, -10, "internal error")                                           \
  X(CANCELED, -11, "canceled")                                                 \
  X(TOOLCHAIN, -12, "the C compiler failed")

enum {
#define X(name, code, text) GC_E##name = code,
  GC_ERRORS(X)
#undef X
};

/* Filled by a failing function. Zero-initialise before use. */
typedef struct gc_error {
  int code;       /* a GC_E* code; 0 while nothing failed */
  int node;       /* index of the node at fault; -1 when none */
  char arg[64];   /* name of the argument at fault; "" when none */
  char msg[1024]; /* the whole message, location included */
} gc_error;

/* Resets `err` to "no error". */
void gc_error_clear(gc_error *err);

/* Sets `err` (when not NULL) and returns `code`. */
int gc_errorf(gc_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* As gc_errorf, recording the node index and argument name too. */
int gc_error_at(gc_error *err, int code, int node, const char *arg,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* A short description of a GC_E* code. Never NULL. */
const char *gc_strerror(int code);

/* The symbolic name of a code ("INVAL"-style, without the prefix). */
const char *gc_errname(int code);

#endif
