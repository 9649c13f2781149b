/*
 * error.c: filling gc_error and naming error codes. See error.h.
 */
#include "compiler/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void gc_error_clear(gc_error *err) {
  if (!err)
    return;
  err->code = 0;
  err->node = -1;
  err->arg[0] = '\0';
  err->msg[0] = '\0';
}

static int error_vset(gc_error *err, int code, int node, const char *arg,
                      const char *fmt, va_list ap) {
  if (!err)
    return code;
  err->code = code;
  err->node = node;
  snprintf(err->arg, sizeof err->arg, "%s", arg ? arg : "");
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  return code;
}

int gc_errorf(gc_error *err, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  error_vset(err, code, -1, NULL, fmt, ap);
  va_end(ap);
  return code;
}

int gc_error_at(gc_error *err, int code, int node, const char *arg,
                const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  error_vset(err, code, node, arg, fmt, ap);
  va_end(ap);
  return code;
}

const char *gc_strerror(int code) {
  switch (code) {
#define X(name, c, text)                                                       \
  case c:                                                                      \
    return text;
    GC_ERRORS(X)
#undef X
  }
  return "unknown error";
}

const char *gc_errname(int code) {
  switch (code) {
#define X(name, c, text)                                                       \
  case c:                                                                      \
    return #name;
    GC_ERRORS(X)
#undef X
  }
  return "UNKNOWN";
}
