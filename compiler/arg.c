/*
 * arg.c: names of argument kinds and iteration over the values an argument
 * refers to. See arg.h.
 */
#include "compiler/arg.h"

const char *gc_arg_kind_name(gc_arg_kind k) {
  switch (k) {
#define X(name, text, item)                                                    \
  case GC_ARG_##name:                                                          \
    return text;
    GC_ARG_KINDS(X)
#undef X
  case GC_ARG_KIND_COUNT:
    break;
  }
  return "?";
}

gc_arg_kind gc_arg_item_kind(gc_arg_kind k) {
  switch (k) {
#define X(name, text, item)                                                    \
  case GC_ARG_##name:                                                          \
    return GC_ARG_##item;
    GC_ARG_KINDS(X)
#undef X
  case GC_ARG_KIND_COUNT:
    break;
  }
  return k;
}

bool gc_arg_is_list(gc_arg_kind k) {
  return gc_arg_item_kind(k) != k;
}

gc_arg gc_arg_item(const gc_arg *a, int i) {
  gc_arg it = {.kind = gc_arg_item_kind(a->kind)};
  switch (it.kind) {
  case GC_ARG_TENSOR:
    it.v = a->vals[i];
    if (!it.v) /* an optional tensor list's None */
      it.kind = GC_ARG_NONE;
    break;
  case GC_ARG_INT:
  case GC_ARG_BOOL:
    it.i = a->ints[i];
    break;
  case GC_ARG_FLOAT:
    it.f = a->floats[i];
    break;
  case GC_ARG_STRING:
    it.s = a->strs[i];
    break;
  case GC_ARG_SYM_INT:
  case GC_ARG_SYM_FLOAT:
  case GC_ARG_SYM_BOOL:
    it.sym = a->syms[i];
    break;
  default: /* not a list kind */
    it = *a;
    break;
  }
  return it;
}

void gc_arg_each_value(const gc_arg *a,
                       void (*fn)(const gc_value *v, int item, void *ctx),
                       void *ctx) {
  bool list = gc_arg_is_list(a->kind);
  for (int i = 0; i < (list ? a->n : 1); i++) {
    gc_arg it = list ? gc_arg_item(a, i) : *a;
    if (it.kind == GC_ARG_TENSOR)
      fn(it.v, i, ctx);
    else if ((it.kind == GC_ARG_SYM_INT || it.kind == GC_ARG_SYM_FLOAT ||
              it.kind == GC_ARG_SYM_BOOL) &&
             it.sym.v)
      fn(it.sym.v, i, ctx);
  }
}
