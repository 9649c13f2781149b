/*
 * ops.h: what the compiler knows about operators beyond their schemas.
 *
 * Schemas are the source of truth for what an operator writes and aliases,
 * with one exception: a few of torch's schemas omit a mutation. In torch
 * 1.13, aten::native_batch_norm updates running_mean and running_var in
 * training mode but declares them as plain `Tensor?`. Asking "does this op
 * write argument i" must go through gc_op_writes, which adds those.
 */
#ifndef GC_OPS_H
#define GC_OPS_H

#include <stdbool.h>

#include "compiler/schema.h"

/* True when the operator writes parameter `i`: an alias annotation with '!'
 * in its schema, or a mutation the schema is known to omit. */
bool gc_op_writes(const gc_schema *s, int i);

/* True when the operator writes any parameter (as gc_op_writes). */
bool gc_op_is_mutating(const gc_schema *s);

#endif
