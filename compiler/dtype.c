/*
 * dtype.c: sizes and names of the element types (dtype.h).
 */
#include "compiler/dtype.h"

#include <stddef.h>

int gc_dtype_size(gc_dtype d) {
  switch (d) {
#define X(name, num, size, torch)                                              \
  case GC_DTYPE_##name:                                                        \
    return size;
    GC_DTYPES(X)
#undef X
  case GC_DTYPE_UNKNOWN:
    break;
  }
  return 0;
}

const char *gc_dtype_name(gc_dtype d) {
  switch (d) {
#define X(name, num, size, torch)                                              \
  case GC_DTYPE_##name:                                                        \
    return torch;
    GC_DTYPES(X)
#undef X
  case GC_DTYPE_UNKNOWN:
    break;
  }
  return NULL;
}
