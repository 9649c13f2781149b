/*
 * ops.h: what the compiler knows about operators beyond their schemas.
 *
 * Schemas are the source of truth for what an operator writes and aliases,
 * with one exception: a few of torch's schemas omit a mutation.
 * aten::native_batch_norm (1.13's and 2.13's) updates running_mean and
 * running_var in training mode but declares them as plain `Tensor?`. Asking
 * "does this op write argument i" must go through gc_op_writes, which adds
 * those (from the unannotated writes of compiler/opfacts.def).
 */
#ifndef GC_OPS_H
#define GC_OPS_H

#include <stdbool.h>

#include "compiler/graph.h"
#include "compiler/schema.h"

/* True when the operator may write parameter `i`: an alias annotation with
 * '!' in its schema, or a mutation the schema is known to omit. */
bool gc_op_writes(const gc_schema *s, int i);

/* As gc_op_writes for one call: an omitted mutation that only happens under
 * a condition (native_batch_norm writes its running stats only when
 * `training` is true) counts only when the node's arguments meet it. */
bool gc_node_writes(const gc_node *n, int i);

/* True when the call writes any parameter (as gc_node_writes). */
bool gc_node_is_mutating(const gc_node *n);

/* True when the write of parameter `i` is one the schema does not annotate
 * (from the unannotated writes of opfacts.def). */
bool gc_write_unannotated(const gc_schema *s, int i);

/* True when torch lets a Python number stand for a `Tensor` argument of the
 * operator (a "wrapped number": x.add_(1) records aten::add_.Tensor(x, 1)).
 * Torch allows it for a fixed list of operator names (add, sub, mul, div,
 * their aliases and in-place forms, floor_divide, true_divide, to, _to_copy,
 * copy_; torch's should_allow_numbers_as_tensors); for any other operator a
 * number where a Tensor is declared fails in eager PyTorch too. */
bool gc_op_takes_wrapped_numbers(const gc_schema *s);

#endif
