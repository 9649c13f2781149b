/*
 * arg.c: names of argument kinds. See arg.h.
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
