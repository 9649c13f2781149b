/*
 * ops.c: what operators write, from their schemas and the operator facts
 * table (opfacts.def). See ops.h.
 */
#include "compiler/ops.h"

#include <string.h>

#include "compiler/opfacts.h"

/* The row with parameter i of s among its unannotated writes, or NULL. */
static const gc_opfacts *omission(const gc_schema *s, int i) {
  if (i < 0 || i >= s->nargs)
    return NULL;
  const gc_opfacts *f = gc_opfacts_of(s->qualified);
  return gc_opfacts_writes_param(f, s->args[i].name) ? f : NULL;
}

bool gc_write_unannotated(const gc_schema *s, int i) {
  return !gc_schema_arg_is_write(s, i) && omission(s, i) != NULL;
}

bool gc_op_writes(const gc_schema *s, int i) {
  if (i < 0 || i >= s->nargs)
    return false;
  return gc_schema_arg_is_write(s, i) || omission(s, i) != NULL;
}

/* Is the argument n passes for parameter i None (given, or its default)? */
static bool arg_is_none(const gc_node *n, int i) {
  for (int a = 0; a < n->nargs; a++)
    if (n->args[a].param == i)
      return n->args[a].arg.kind == GC_ARG_NONE;
  const gc_schema *s = n->op->schema;
  return s->args[i].has_default && s->args[i].def.kind == GC_ARG_NONE;
}

bool gc_node_writes(const gc_node *n, int i) {
  const gc_schema *s = n->op->schema;
  if (i < 0 || i >= s->nargs)
    return false;
  if (arg_is_none(n, i))
    return false; /* instance norm's batch norm without running stats */
  if (gc_schema_arg_is_write(s, i))
    return true;
  const gc_opfacts *f = omission(s, i);
  if (!f)
    return false;
  const char *when = f->writes_when;
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

bool gc_op_takes_wrapped_numbers(const gc_schema *s) {
  return gc_opfacts_wrapped_numbers(s);
}
