/*
 * ops.c: operator facts the schemas leave out. See ops.h.
 */
#include "compiler/ops.h"

#include <string.h>

/* Parameters that are written although the schema does not say so. The
 * write happens only in training mode; treating it as unconditional only
 * costs reordering freedom, never correctness. */
static const struct {
  const char *op;    /* qualified name, overload included */
  const char *param; /* parameter name */
} unannotated_writes[] = {
    {"aten::native_batch_norm", "running_mean"},
    {"aten::native_batch_norm", "running_var"},
    {"aten::batch_norm", "running_mean"},
    {"aten::batch_norm", "running_var"},
    {"aten::_batch_norm_impl_index", "running_mean"},
    {"aten::_batch_norm_impl_index", "running_var"},
    {"aten::cudnn_batch_norm", "running_mean"},
    {"aten::cudnn_batch_norm", "running_var"},
    {"aten::miopen_batch_norm", "running_mean"},
    {"aten::miopen_batch_norm", "running_var"},
    {"aten::instance_norm", "running_mean"},
    {"aten::instance_norm", "running_var"},
};

bool gc_op_writes(const gc_schema *s, int i) {
  if (i < 0 || i >= s->nargs)
    return false;
  if (gc_schema_arg_is_write(s, i))
    return true;
  for (size_t k = 0;
       k < sizeof unannotated_writes / sizeof unannotated_writes[0]; k++)
    if (strcmp(s->qualified, unannotated_writes[k].op) == 0 &&
        strcmp(s->args[i].name, unannotated_writes[k].param) == 0)
      return true;
  return false;
}

bool gc_op_is_mutating(const gc_schema *s) {
  for (int i = 0; i < s->nargs; i++)
    if (gc_op_writes(s, i))
      return true;
  return false;
}
