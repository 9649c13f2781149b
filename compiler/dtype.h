/*
 * dtype.h: element types, numbered as graph.proto's ScalarType: the one
 * table of their numbers, sizes and torch names; and tensor layouts,
 * numbered as its Layout. The decoder (graph.c), the schema parser's
 * default literals (schema.c) and the back half read them from here.
 */
#ifndef GC_DTYPE_H
#define GC_DTYPE_H

/* Element types: X(NAME, proto enum number, bytes per element, torch name). */
#define GC_DTYPES(X)                                                           \
  X(UINT8, 1, 1, "uint8")                                                      \
  X(INT8, 2, 1, "int8")                                                        \
  X(INT16, 3, 2, "int16")                                                      \
  X(INT32, 4, 4, "int32")                                                      \
  X(INT64, 5, 8, "int64")                                                      \
  X(FLOAT16, 7, 2, "float16")                                                  \
  X(FLOAT32, 8, 4, "float32")                                                  \
  X(FLOAT64, 9, 8, "float64")                                                  \
  X(COMPLEX32, 10, 4, "complex32")                                             \
  X(COMPLEX64, 11, 8, "complex64")                                             \
  X(COMPLEX128, 12, 16, "complex128")                                          \
  X(BOOL, 13, 1, "bool")                                                       \
  X(BFLOAT16, 14, 2, "bfloat16")                                               \
  X(UINT16, 28, 2, "uint16")

typedef enum gc_dtype {
  GC_DTYPE_UNKNOWN = 0,
#define X(name, num, size, torch) GC_DTYPE_##name = num,
  GC_DTYPES(X)
#undef X
} gc_dtype;

/* Bytes per element of `d`; 0 for an unknown dtype. */
int gc_dtype_size(gc_dtype d);
/* "float32", ...; NULL for an unknown dtype. */
const char *gc_dtype_name(gc_dtype d);

/* Tensor layouts (graph.proto's Layout numbers). */
typedef enum gc_layout {
  GC_LAYOUT_UNKNOWN = 0,
  GC_LAYOUT_SPARSE_COO = 1,
  GC_LAYOUT_SPARSE_CSR = 2,
  GC_LAYOUT_SPARSE_CSC = 3,
  GC_LAYOUT_SPARSE_BSR = 4,
  GC_LAYOUT_SPARSE_BSC = 5,
  GC_LAYOUT_MKLDNN = 6,
  GC_LAYOUT_STRIDED = 7,
} gc_layout;

#endif
