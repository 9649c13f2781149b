/*
 * program_internal.h: what program.c (the NativeProgram) and values.c (its
 * values and their placements) share. Internal to compiler/codegen/.
 */
#ifndef GC_CODEGEN_PROGRAM_INTERNAL_H
#define GC_CODEGEN_PROGRAM_INTERNAL_H

#include "compiler/emit.h"
#include "compiler/native.h"
#include "compiler/target.h"

typedef Compiled__V1__Value pb_value;
typedef Compiled__V1__Placement pb_place;

typedef struct pe {
  gc_native *n;
  gc_arena *a;
  gc_error *err;
  Compiled__V1__NativeProgram *p;
  pb_value **values;
  pb_place **places;
  int nvalues, cap;
  int *buf_value; /* per buffer id: its value, -1 */
  const gc_op **ops;
  int nops, capops;
  int *after_kernel; /* per kernel: instructions emitted up to its frees */
  bool failed;
} pe;

/* A new message of type d in the job's arena (NULL, and e->failed, when
 * out of memory); NEW types it. */
void *pe_msg(pe *e, const ProtobufCMessageDescriptor *d);
#define NEW(e, T, d) ((T *)pe_msg((e), &(d)))

/* The value of buffer b, made the first time: placed by its kind (input,
 * arena, output, call result, temporary), or a view of the storage it
 * lives in; -1 when out of memory. */
int pe_buf_value(pe *e, ir_buf *b);
/* The value of a strided view: the buffer's own when the view is the
 * whole buffer, else a VIEW value over it. */
int pe_view_value(pe *e, const ir_view *w);
/* The value of a literal argument: emit.c's gc_literal_value, except a
 * symbolic scalar or a SymInt[] with symbolic items, which name their
 * expressions; -1 on failure (e->failed). */
int pe_literal(pe *e, const gc_arg *a);
/* A Tensor[] value (optional: Tensor?[]) of the values items[0..n); -1
 * when out of memory. */
int pe_list_value(pe *e, const int *items, int n, bool optional);

#endif
