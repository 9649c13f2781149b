/*
 * arg.c: names of argument kinds and iteration over the values an argument
 * refers to. See arg.h.
 */
#include "compiler/arg.h"

const char *gc_arg_kind_name(gc_arg_kind k) {
  switch (k) {
#define X(name, text)                                                          \
  case GC_ARG_##name:                                                          \
    return text;
    GC_ARG_KINDS(X)
#undef X
  case GC_ARG_KIND_COUNT:
    break;
  }
  return "?";
}

void gc_arg_each_value(const gc_arg *a,
                       void (*fn)(const gc_value *v, int item, void *ctx),
                       void *ctx) {
  switch (a->kind) {
  case GC_ARG_TENSOR:
    fn(a->v, 0, ctx);
    break;
  case GC_ARG_TENSORS:
  case GC_ARG_OPT_TENSORS:
    for (int i = 0; i < a->n; i++)
      if (a->vals[i])
        fn(a->vals[i], i, ctx);
    break;
  case GC_ARG_SYM_INT:
  case GC_ARG_SYM_FLOAT:
  case GC_ARG_SYM_BOOL:
    if (a->sym.v)
      fn(a->sym.v, 0, ctx);
    break;
  case GC_ARG_SYM_INTS:
  case GC_ARG_SYM_FLOATS:
  case GC_ARG_SYM_BOOLS:
    for (int i = 0; i < a->n; i++)
      if (a->syms[i].v)
        fn(a->syms[i].v, i, ctx);
    break;
  default:
    break;
  }
}
