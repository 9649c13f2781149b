/*
 * symfmt.c: symbolic integer expressions as text (gc_sym_format,
 * gc_sym_str), for dumps, diagnostics and generated code. See sym.h.
 */
#include "compiler/ir/sym.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct out {
  char *buf;
  size_t size, len;
} out;

static void put(out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = o->len < o->size ? o->size - o->len : 0;
  int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0)
    o->len += (size_t)n;
}

static void format(const gc_symctx *s, const gc_sym *e, out *o, int depth) {
  if (depth > GC_SYM_MAX_DEPTH) {
    put(o, "0 /* too deep */");
    return;
  }
  switch (e->kind) {
  case GC_SYM_CONST:
    if (e->c == INT64_MIN)
      put(o, "INT64_MIN");
    else
      put(o, "%lld", (long long)e->c);
    return;
  case GC_SYM_VAR:
    put(o, "%s", s->vars[e->var].name);
    return;
  case GC_SYM_ADD:
    put(o, "(");
    for (int i = 0; i < e->n; i++) {
      int64_t k = e->coefs[i];
      if (i)
        put(o, k < 0 ? " - " : " + ");
      else if (k < 0)
        put(o, "-");
      if (k != 1 && k != -1)
        put(o, "%lld*", (long long)(k < 0 ? -k : k));
      format(s, e->ops[i], o, depth + 1);
    }
    if (e->c)
      put(o, " %s %lld", e->c < 0 ? "-" : "+",
          (long long)(e->c < 0 ? -e->c : e->c));
    put(o, ")");
    return;
  case GC_SYM_MUL:
    put(o, "(");
    for (int i = 0; i < e->n; i++) {
      if (i)
        put(o, " * ");
      format(s, e->ops[i], o, depth + 1);
    }
    put(o, ")");
    return;
  case GC_SYM_FLOORDIV:
  case GC_SYM_MOD: {
    bool div = e->kind == GC_SYM_FLOORDIV;
    if (e->ops[0]->lo >= 0) { /* C's / and % agree with floor here */
      put(o, "(");
      format(s, e->ops[0], o, depth + 1);
      put(o, " %s %lld)", div ? "/" : "%", (long long)e->c);
    } else {
      put(o, "%s(", div ? "gc_floordiv" : "gc_mod");
      format(s, e->ops[0], o, depth + 1);
      put(o, ", %lld)", (long long)e->c);
    }
    return;
  }
  case GC_SYM_MIN:
  case GC_SYM_MAX:
    put(o, "%s(", e->kind == GC_SYM_MIN ? "gc_min" : "gc_max");
    format(s, e->ops[0], o, depth + 1);
    put(o, ", ");
    format(s, e->ops[1], o, depth + 1);
    put(o, ")");
    return;
  }
}

size_t gc_sym_format(const gc_symctx *s, const gc_sym *e, char *buf,
                     size_t size) {
  out o = {buf, size, 0};
  if (size)
    buf[0] = '\0';
  if (!e) {
    put(&o, "<null>");
    return o.len;
  }
  format(s, e, &o, 0);
  return o.len;
}

char *gc_sym_str(gc_symctx *s, const gc_sym *e) {
  size_t n = gc_sym_format(s, e, NULL, 0);
  char *b = gc_arena_alloc(s->a, n + 1);
  if (b)
    gc_sym_format(s, e, b, n + 1);
  return b;
}
