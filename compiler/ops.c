/*
 * ops.c: operator facts the schemas leave out. See ops.h.
 */
#include "compiler/ops.h"

#include <string.h>

/* Parameters that are written although the schema does not say so, and the
 * boolean parameter that must be true for the write to happen (NULL:
 * always). Treating a write as possible only costs freedom, never
 * correctness. */
static const struct {
  const char *op;    /* qualified name, overload included */
  const char *param; /* the written parameter */
  const char *when;  /* a bool parameter that enables the write, or NULL */
} unannotated_writes[] = {
    {"aten::native_batch_norm", "running_mean", "training"},
    {"aten::native_batch_norm", "running_var", "training"},
    {"aten::batch_norm", "running_mean", "training"},
    {"aten::batch_norm", "running_var", "training"},
    {"aten::_batch_norm_impl_index", "running_mean", "training"},
    {"aten::_batch_norm_impl_index", "running_var", "training"},
    {"aten::cudnn_batch_norm", "running_mean", "training"},
    {"aten::cudnn_batch_norm", "running_var", "training"},
    {"aten::miopen_batch_norm", "running_mean", "training"},
    {"aten::miopen_batch_norm", "running_var", "training"},
    {"aten::instance_norm", "running_mean", "use_input_stats"},
    {"aten::instance_norm", "running_var", "use_input_stats"},
};

#define NWRITES (sizeof unannotated_writes / sizeof unannotated_writes[0])

/* The table row for parameter i of s, or -1. */
static int omission(const gc_schema *s, int i) {
  if (i < 0 || i >= s->nargs)
    return -1;
  for (size_t k = 0; k < NWRITES; k++)
    if (strcmp(s->qualified, unannotated_writes[k].op) == 0 &&
        strcmp(s->args[i].name, unannotated_writes[k].param) == 0)
      return (int)k;
  return -1;
}

bool gc_write_unannotated(const gc_schema *s, int i) {
  return !gc_schema_arg_is_write(s, i) && omission(s, i) >= 0;
}

bool gc_op_writes(const gc_schema *s, int i) {
  if (i < 0 || i >= s->nargs)
    return false;
  return gc_schema_arg_is_write(s, i) || omission(s, i) >= 0;
}

bool gc_op_is_mutating(const gc_schema *s) {
  for (int i = 0; i < s->nargs; i++)
    if (gc_op_writes(s, i))
      return true;
  return false;
}

bool gc_node_writes(const gc_node *n, int i) {
  const gc_schema *s = n->op->schema;
  if (i < 0 || i >= s->nargs)
    return false;
  if (gc_schema_arg_is_write(s, i))
    return true;
  int k = omission(s, i);
  if (k < 0)
    return false;
  const char *when = unannotated_writes[k].when;
  if (!when)
    return true;
  /* The condition's argument, or its default; anything not a literal
   * false counts as true. */
  for (int a = 0; a < n->nargs; a++)
    if (strcmp(n->args[a].name, when) == 0)
      return !(n->args[a].arg.kind == GC_ARG_BOOL && n->args[a].arg.i == 0);
  int p = gc_schema_find_arg(s, when);
  return !(p >= 0 && s->args[p].has_default &&
           s->args[p].def.kind == GC_ARG_BOOL && s->args[p].def.i == 0);
}

bool gc_node_is_mutating(const gc_node *n) {
  for (int i = 0; i < n->op->schema->nargs; i++)
    if (gc_node_writes(n, i))
      return true;
  return false;
}

/* torch 1.13's should_allow_numbers_as_tensors (torch/csrc/utils/
 * python_arg_parser.cpp), by unqualified operator name as torch checks it;
 * later releases add copy and _conj. */
static const char *const wrapped_number_ops[] = {
    "add",          "add_",         "sub",           "sub_",     "subtract",
    "subtract_",    "mul",          "mul_",          "multiply", "multiply_",
    "div",          "div_",         "divide",        "divide_",  "true_divide",
    "true_divide_", "floor_divide", "floor_divide_", "to",       "_to_copy",
    "copy_",        "copy",         "_conj",
};

bool gc_op_takes_wrapped_numbers(const gc_schema *s) {
  for (size_t k = 0; k < sizeof wrapped_number_ops / sizeof *wrapped_number_ops;
       k++)
    if (strcmp(s->name, wrapped_number_ops[k]) == 0)
      return true;
  return false;
}
