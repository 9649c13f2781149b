/*
 * opfacts.h: everything the compiler knows about an operator beyond its
 * schema, read from one table, compiler/opfacts.def.
 *
 * A row names an operator, qualified ("aten::add.Tensor", "aten::mean")
 * and states its lowering (class, rule function, parameter; lower.h) and
 * the facts other passes need:
 *
 *   random            it draws random numbers (key.c keeps the relative
 *                     order of such calls; functionalization never drops
 *                     them as dead)
 *   unannotated       parameters it writes although the schema has no '!'
 *   writes            (native_batch_norm's running stats), and the bool
 *                     parameter the write depends on (ops.c)
 *   view inverse      how a write through the view is put back into its
 *                     base, and the operator that does it (functionalize.c)
 *   metadata in-place an in-place operator that only changes metadata
 *                     (t_, transpose_)
 *   wrapped numbers   torch lets a Python number stand for its Tensor
 *                     arguments
 *
 * Lowering and unannotated writes belong to the exact operator (overload
 * included). A row flagged GC_OF_FAMILY is named without an overload and
 * its view inverse, metadata-in-place and wrapped-number facts cover every
 * overload of that name ("aten::transpose" covers transpose.int and
 * transpose.Dimname); a view inverse covers the in-place form too
 * (transpose_). A name may have one row.
 *
 * Randomness is also read from the schema itself (a Generator parameter)
 * and from the operator's name (rand, dropout, bernoulli, ...: see
 * gc_opfacts_is_random), so operators outside the table are covered; the
 * table's RANDOM rows are a subset of what those rules find (a unit test
 * checks it), listed so that the table is complete.
 */
#ifndef GC_OPFACTS_H
#define GC_OPFACTS_H

#include <stdbool.h>
#include <stddef.h>

#include "compiler/schema.h"

/* Lowering classes (ops rows of opfacts.def; docs/codegen.md). */
typedef enum gc_opclass {
  GC_OPC_POINTWISE,
  GC_OPC_REDUCTION,
  GC_OPC_VIEW,
  GC_OPC_EXTERN,
  GC_OPC_OTHER,    /* lowered natively but none of the above (cat, pad...) */
  GC_OPC_FALLBACK, /* not lowered: an ATen call on the client */
} gc_opclass;

/* Fact flags. */
#define GC_OF_FAMILY 0x1u       /* the row covers every overload of its name */
#define GC_OF_RANDOM 0x2u       /* draws random numbers */
#define GC_OF_META_INPLACE 0x4u /* in-place, changes metadata only */
#define GC_OF_WRAPPED_NUMBERS 0x8u /* numbers may stand for Tensors */

/* How a write through a view goes back into the view's base. */
typedef enum gc_view_inverse {
  GC_INV_NONE,        /* not invertible (or not a view) */
  GC_INV_SELECT,      /* select_scatter(base, src, dim, index) */
  GC_INV_UNBIND,      /* select_scatter at the element's index */
  GC_INV_SLICE,       /* slice_scatter(base, src, dim, start, end, step) */
  GC_INV_SPLIT,       /* slice_scatter of the element's range (split_size) */
  GC_INV_SPLIT_SIZES, /* slice_scatter of the element's range (split_sizes) */
  GC_INV_DIAGONAL,    /* diagonal_scatter(base, src, offset, dim1, dim2) */
  GC_INV_T,           /* t(src) */
  GC_INV_TRANSPOSE,   /* transpose(src, dim0, dim1) */
  GC_INV_SWAPAXES,    /* transpose(src, axis0, axis1) */
  GC_INV_PERMUTE,     /* permute(src, inverse permutation) */
  GC_INV_RESHAPE,     /* reshape(src, base sizes) */
  GC_INV_EXPAND,      /* reshape when the sizes did not change; else refused
                         (eager refuses writes through expanded views) */
  GC_INV_IDENTITY,    /* the view is its base (alias, detach) */
  GC_INV_AS_STRIDED,  /* as_strided_scatter (contiguous storages only) */
} gc_view_inverse;

typedef struct gc_opfacts {
  const char *name;        /* "aten::add.Tensor", or a family "aten::split" */
  int index;               /* row number in opfacts.def */
  gc_opclass cls;          /* GC_OPC_FALLBACK: no lowering rule */
  const char *lowering;    /* the rule function's name; NULL when none */
  unsigned flags;          /* GC_OF_* */
  gc_view_inverse inverse; /* GC_INV_NONE unless a view */
  const char *inverse_op;  /* the operator the inverse emits; NULL: none */
  const char *writes;      /* unannotated written parameters, space-separated;
                              NULL: none */
  const char *writes_when; /* bool parameter enabling them; NULL: always */
} gc_opfacts;

/* The row named exactly `name` (a qualified operator name, or a family
 * name), or NULL. Thread-safe; the index is built once on first use. */
const gc_opfacts *gc_opfacts_of(const char *name);

/* The family row of "ns::name" (`name` without an overload), or NULL. */
const gc_opfacts *gc_opfacts_family(const char *ns, const char *name);

/* The row with the view inverse of the operator of `s`: its own row, else
 * its family's, else (for an in-place name, transpose_) the family of the
 * name without the '_'. NULL when none has an inverse. */
const gc_opfacts *gc_opfacts_view(const gc_schema *s);

/* True when the operator draws random numbers: a Generator parameter, a
 * RANDOM row, or a name containing rand, dropout, bernoulli, multinomial,
 * normal, uniform, poisson, exponential, cauchy, geometric or random. */
bool gc_opfacts_is_random(const gc_schema *s);

/* True when the schema's name (alone) matches the random-name rule above. */
bool gc_opfacts_random_name(const char *name);

/* True when an "aten" operator of this name is in-place on metadata only. */
bool gc_opfacts_meta_inplace(const gc_schema *s);

/* True when torch accepts a wrapped number for its Tensor arguments (by
 * unqualified name, whatever the namespace, as torch checks it). */
bool gc_opfacts_wrapped_numbers(const gc_schema *s);

/* True when parameter `param` is in the row's unannotated writes. */
bool gc_opfacts_writes_param(const gc_opfacts *f, const char *param);

/* The whole table, in row order (for tests and tools). */
const gc_opfacts *gc_opfacts_table(size_t *n);

#endif
