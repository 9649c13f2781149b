/*
 * graph_arg.c: decoding one Argument message into a gc_arg (step 4 of
 * graph.c's decode): every kind of argument, value names resolved to the
 * values the tables define, lists and strings checked against the limits,
 * enums against the numbers graph.proto gives them.
 */
#include <string.h>

#include "compiler/graph_internal.h"

static const char *value_kind_name(gc_value_kind k) {
  switch (k) {
  case GC_VALUE_TENSOR:
    return "a tensor";
  case GC_VALUE_SYM_INT:
    return "a SymInt";
  case GC_VALUE_SYM_FLOAT:
    return "a SymFloat";
  case GC_VALUE_SYM_BOOL:
    return "a SymBool";
  }
  return "?";
}

/* Looks up a referenced name. `want` is the kind the reference needs. */
static gc_value *lookup(gc_decoder *d, const char *name, gc_value_kind want,
                        const char *arg) {
  if (gc__check_str(d, name, "a value name"))
    return NULL;
  gc_value *v = gc_strmap_get(&d->values, name);
  if (!v) {
    gc__fail(d, GC_EINVAL, arg,
             "refers to '%.200s', which is not in any value table (dangling "
             "name)",
             name);
    return NULL;
  }
  if (v->kind != want) {
    gc__fail(d, GC_EINVAL, arg, "'%.200s' is %s, expected %s", name,
             value_kind_name(v->kind), value_kind_name(want));
    return NULL;
  }
  return v;
}

/* Converts a list's elements, checking the list length limit first. */
#define LIST_CHECK(n, what)                                                    \
  do {                                                                         \
    if (gc__check_count(d, (n), d->lim->max_list, what, arg))                  \
      return d->err->code;                                                     \
  } while (0)

/* One SymInt/SymFloat/SymBool argument message `p` (its type given by `k`)
 * into `s`: a literal, or a symbolic value resolved by name. Returns 1 when
 * it has neither (the caller words that error), else 0 or the error code. */
static int decode_symarg(gc_decoder *d, const void *p, gc_value_kind k,
                         gc_symarg *s, const char *arg) {
  const char *name = NULL;
  if (k == GC_VALUE_SYM_INT) {
    const Compiled__V1__SymIntArgument *q = p;
    if (q->kind_case == COMPILED__V1__SYM_INT_ARGUMENT__KIND_AS_INT)
      return s->i = q->as_int, 0;
    if (q->kind_case == COMPILED__V1__SYM_INT_ARGUMENT__KIND_AS_NAME)
      name = q->as_name;
  } else if (k == GC_VALUE_SYM_FLOAT) {
    const Compiled__V1__SymFloatArgument *q = p;
    if (q->kind_case == COMPILED__V1__SYM_FLOAT_ARGUMENT__KIND_AS_FLOAT)
      return s->f = q->as_float, 0;
    if (q->kind_case == COMPILED__V1__SYM_FLOAT_ARGUMENT__KIND_AS_NAME)
      name = q->as_name;
  } else {
    const Compiled__V1__SymBoolArgument *q = p;
    if (q->kind_case == COMPILED__V1__SYM_BOOL_ARGUMENT__KIND_AS_BOOL)
      return s->b = q->as_bool, 0;
    if (q->kind_case == COMPILED__V1__SYM_BOOL_ARGUMENT__KIND_AS_NAME)
      name = q->as_name;
  }
  if (!name)
    return 1;
  s->v = lookup(d, name, k, arg);
  return s->v ? 0 : d->err->code;
}

/* A symbolic scalar argument of type `k` ("SymInt", ...: `type`). */
static int decode_sym(gc_decoder *d, gc_arg *out, const void *p,
                      gc_value_kind k, const char *type, const char *arg) {
  int rc = decode_symarg(d, p, k, &out->sym, arg);
  if (rc == 1)
    return gc__fail(d, GC_EINVAL, arg, "%s has neither a name nor a value",
                    type);
  return rc;
}

static int decode_sym_list(gc_decoder *d, gc_arg *out, size_t n, void **items,
                           gc_value_kind k, const char *arg) {
  LIST_CHECK(n, "the list");
  out->n = (int)n;
  out->syms = gc_arena_calloc(d->a, n + 1, sizeof *out->syms);
  if (!out->syms)
    return gc__nomem(d);
  for (size_t i = 0; i < n; i++) {
    int rc = decode_symarg(d, items[i], k, &out->syms[i], arg);
    if (rc == 1)
      return gc__fail(d, GC_EINVAL, arg,
                      "list item %zu has neither a name nor a value", i);
    if (rc)
      return rc;
  }
  return 0;
}

static int check_enum(gc_decoder *d, int v, int lo, int hi, const char *what,
                      const char *arg) {
  if (v < lo || v > hi)
    return gc__fail(d, GC_EINVAL, arg, "unknown %s %d", what, v);
  return 0;
}

int gc__decode_arg(gc_decoder *d, const Compiled__V1__Argument *m, gc_arg *out,
                   const char *arg) {
  memset(out, 0, sizeof *out);
  if (!m)
    return gc__fail(d, GC_EINVAL, arg, "has no value");
  switch (m->kind_case) {
  case COMPILED__V1__ARGUMENT__KIND_AS_NONE:
    out->kind = GC_ARG_NONE;
    return 0;
  case COMPILED__V1__ARGUMENT__KIND_AS_TENSOR:
    out->kind = GC_ARG_TENSOR;
    out->v = lookup(d, m->as_tensor->name, GC_VALUE_TENSOR, arg);
    return out->v ? 0 : d->err->code;
  case COMPILED__V1__ARGUMENT__KIND_AS_TENSORS: {
    const Compiled__V1__TensorList *l = m->as_tensors;
    LIST_CHECK(l->n_items, "the tensor list");
    out->kind = GC_ARG_TENSORS;
    out->n = (int)l->n_items;
    out->vals = gc_arena_calloc(d->a, l->n_items + 1, sizeof *out->vals);
    if (!out->vals)
      return gc__nomem(d);
    for (size_t i = 0; i < l->n_items; i++)
      if (!(out->vals[i] = lookup(d, l->items[i]->name, GC_VALUE_TENSOR, arg)))
        return d->err->code;
    return 0;
  }
  case COMPILED__V1__ARGUMENT__KIND_AS_OPTIONAL_TENSORS: {
    const Compiled__V1__OptionalTensorList *l = m->as_optional_tensors;
    LIST_CHECK(l->n_items, "the tensor list");
    out->kind = GC_ARG_OPT_TENSORS;
    out->n = (int)l->n_items;
    out->vals = gc_arena_calloc(d->a, l->n_items + 1, sizeof *out->vals);
    if (!out->vals)
      return gc__nomem(d);
    for (size_t i = 0; i < l->n_items; i++) {
      const Compiled__V1__OptionalTensorArgument *it = l->items[i];
      if (it->kind_case ==
          COMPILED__V1__OPTIONAL_TENSOR_ARGUMENT__KIND_AS_TENSOR) {
        if (!(out->vals[i] =
                  lookup(d, it->as_tensor->name, GC_VALUE_TENSOR, arg)))
          return d->err->code;
      } else if (it->kind_case !=
                 COMPILED__V1__OPTIONAL_TENSOR_ARGUMENT__KIND_AS_NONE) {
        return gc__fail(d, GC_EINVAL, arg,
                        "list item %zu is neither a tensor nor None", i);
      }
    }
    return 0;
  }
  case COMPILED__V1__ARGUMENT__KIND_AS_INT:
    out->kind = GC_ARG_INT;
    out->i = m->as_int;
    return 0;
  case COMPILED__V1__ARGUMENT__KIND_AS_INTS:
    LIST_CHECK(m->as_ints->n_items, "the int list");
    out->kind = GC_ARG_INTS;
    out->n = (int)m->as_ints->n_items;
    out->ints = m->as_ints->items;
    return 0;
  case COMPILED__V1__ARGUMENT__KIND_AS_FLOAT:
    out->kind = GC_ARG_FLOAT;
    out->f = m->as_float;
    return 0;
  case COMPILED__V1__ARGUMENT__KIND_AS_FLOATS:
    LIST_CHECK(m->as_floats->n_items, "the float list");
    out->kind = GC_ARG_FLOATS;
    out->n = (int)m->as_floats->n_items;
    out->floats = m->as_floats->items;
    return 0;
  case COMPILED__V1__ARGUMENT__KIND_AS_BOOL:
    out->kind = GC_ARG_BOOL;
    out->i = m->as_bool ? 1 : 0;
    return 0;
  case COMPILED__V1__ARGUMENT__KIND_AS_BOOLS: {
    const Compiled__V1__BoolList *l = m->as_bools;
    LIST_CHECK(l->n_items, "the bool list");
    out->kind = GC_ARG_BOOLS;
    out->n = (int)l->n_items;
    out->ints = gc_arena_calloc(d->a, l->n_items + 1, sizeof *out->ints);
    if (!out->ints)
      return gc__nomem(d);
    for (size_t i = 0; i < l->n_items; i++)
      out->ints[i] = l->items[i] ? 1 : 0;
    return 0;
  }
  case COMPILED__V1__ARGUMENT__KIND_AS_STRING:
    if (gc__check_str(d, m->as_string, "the string"))
      return d->err->code;
    out->kind = GC_ARG_STRING;
    out->s = m->as_string;
    return 0;
  case COMPILED__V1__ARGUMENT__KIND_AS_STRINGS:
    LIST_CHECK(m->as_strings->n_items, "the string list");
    for (size_t i = 0; i < m->as_strings->n_items; i++)
      if (gc__check_str(d, m->as_strings->items[i], "a string"))
        return d->err->code;
    out->kind = GC_ARG_STRINGS;
    out->n = (int)m->as_strings->n_items;
    out->strs = (const char **)m->as_strings->items;
    return 0;
  case COMPILED__V1__ARGUMENT__KIND_AS_SYM_INT:
    out->kind = GC_ARG_SYM_INT;
    return decode_sym(d, out, m->as_sym_int, GC_VALUE_SYM_INT, "SymInt", arg);
  case COMPILED__V1__ARGUMENT__KIND_AS_SYM_INTS:
    out->kind = GC_ARG_SYM_INTS;
    return decode_sym_list(d, out, m->as_sym_ints->n_items,
                           (void **)m->as_sym_ints->items, GC_VALUE_SYM_INT,
                           arg);
  case COMPILED__V1__ARGUMENT__KIND_AS_SYM_FLOAT:
    out->kind = GC_ARG_SYM_FLOAT;
    return decode_sym(d, out, m->as_sym_float, GC_VALUE_SYM_FLOAT, "SymFloat",
                      arg);
  case COMPILED__V1__ARGUMENT__KIND_AS_SYM_FLOATS:
    out->kind = GC_ARG_SYM_FLOATS;
    return decode_sym_list(d, out, m->as_sym_floats->n_items,
                           (void **)m->as_sym_floats->items, GC_VALUE_SYM_FLOAT,
                           arg);
  case COMPILED__V1__ARGUMENT__KIND_AS_SYM_BOOL:
    out->kind = GC_ARG_SYM_BOOL;
    return decode_sym(d, out, m->as_sym_bool, GC_VALUE_SYM_BOOL, "SymBool",
                      arg);

  case COMPILED__V1__ARGUMENT__KIND_AS_SYM_BOOLS:
    out->kind = GC_ARG_SYM_BOOLS;
    return decode_sym_list(d, out, m->as_sym_bools->n_items,
                           (void **)m->as_sym_bools->items, GC_VALUE_SYM_BOOL,
                           arg);
  case COMPILED__V1__ARGUMENT__KIND_AS_SCALAR_TYPE:
    out->kind = GC_ARG_SCALAR_TYPE;
    out->i = m->as_scalar_type;
    if (!gc_dtype_size((gc_dtype)m->as_scalar_type))
      return gc__fail(d, GC_EINVAL, arg, "unknown scalar type %d",
                      (int)m->as_scalar_type);
    return 0;
  case COMPILED__V1__ARGUMENT__KIND_AS_MEMORY_FORMAT:
    out->kind = GC_ARG_MEMORY_FORMAT;
    out->i = m->as_memory_format;
    return check_enum(d, (int)out->i, 1, 4, "memory format", arg);
  case COMPILED__V1__ARGUMENT__KIND_AS_LAYOUT:
    out->kind = GC_ARG_LAYOUT;
    out->i = m->as_layout;
    return check_enum(d, (int)out->i, 1, 7, "layout", arg);
  case COMPILED__V1__ARGUMENT__KIND_AS_DEVICE:
    out->kind = GC_ARG_DEVICE;
    return gc__decode_device(d, m->as_device, &out->dev, arg);
  default:
    return gc__fail(d, GC_EINVAL, arg, "argument has no kind set");
  }
}
