/*
 * args.c: the L_* helpers a rule reads its node with: dtype predicates,
 * arguments by schema parameter name, output metadata, and type promotion
 * (torch.result_type). See lower.h.
 */
#include "compiler/lower/ctx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ir/half.h"
#include "compiler/opfacts.h"
#include "compiler/ops.h"
#include "compiler/schema.h"
#include "compiler/torchops.h"

/* ---- dtypes ---- */

bool L_is_float(gc_dtype d) {
  return d == GC_DTYPE_FLOAT32 || d == GC_DTYPE_FLOAT64 || ir_dtype_half(d);
}

gc_dtype L_opmath(gc_dtype d) {
  return ir_dtype_half(d) ? GC_DTYPE_FLOAT32 : d;
}

bool L_is_integral(gc_dtype d) {
  switch (d) {
  case GC_DTYPE_UINT8:
  case GC_DTYPE_INT8:
  case GC_DTYPE_INT16:
  case GC_DTYPE_INT32:
  case GC_DTYPE_INT64:
  case GC_DTYPE_BOOL:
    return true;
  default:
    return false;
  }
}

bool L_dtype_ok(gc_dtype d) {
  return L_is_float(d) || L_is_integral(d);
}

/* ---- arguments ---- */

const gc_arg *L_arg(lower_ctx *L, const gc_node *n, const char *name) {
  (void)L;
  for (int i = 0; i < n->nargs; i++)
    if (strcmp(n->args[i].name, name) == 0)
      return &n->args[i].arg;
  const gc_schema *s = n->op->schema;
  int p = gc_schema_find_arg(s, name);
  if (p >= 0 && s->args[p].has_default)
    return &s->args[p].def;
  return NULL;
}

ir_tensor *L_tensor(lower_ctx *L, const gc_node *n, const char *name) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a || a->kind != GC_ARG_TENSOR || !a->v || a->v->kind != GC_VALUE_TENSOR)
    return NULL;
  return L->val[a->v->id];
}

int L_tensors(lower_ctx *L, const gc_node *n, const char *name,
              ir_tensor ***out) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a || (a->kind != GC_ARG_TENSORS && a->kind != GC_ARG_OPT_TENSORS))
    return -1;
  ir_tensor **t = gc_arena_calloc(L->ir->a, (size_t)a->n + 1, sizeof *t);
  if (!t)
    return -1;
  for (int i = 0; i < a->n; i++) {
    const gc_value *v = a->vals[i];
    if (v && v->kind != GC_VALUE_TENSOR)
      return -1;
    t[i] = v ? L->val[v->id] : NULL;
  }
  *out = t;
  return a->n;
}

bool L_scalar(lower_ctx *L, const gc_node *n, const char *name, double *v,
              int64_t *iv, gc_dtype *dt) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a)
    return false;
  switch (a->kind) {
  case GC_ARG_INT:
    *iv = a->i;
    *v = (double)a->i;
    *dt = GC_DTYPE_INT64;
    return true;
  case GC_ARG_BOOL:
    *iv = a->i != 0;
    *v = (double)*iv;
    *dt = GC_DTYPE_BOOL;
    return true;
  case GC_ARG_FLOAT:
    *v = a->f;
    *iv = (int64_t)0;
    *dt = GC_DTYPE_FLOAT64;
    return true;
  default:
    return false;
  }
}

bool L_int(lower_ctx *L, const gc_node *n, const char *name, int64_t *out) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a || a->kind != GC_ARG_INT)
    return false;
  *out = a->i;
  return true;
}

bool L_bool(lower_ctx *L, const gc_node *n, const char *name, bool *out) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a || a->kind != GC_ARG_BOOL)
    return false;
  *out = a->i != 0;
  return true;
}

bool L_float(lower_ctx *L, const gc_node *n, const char *name, double *out) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a)
    return false;
  if (a->kind == GC_ARG_FLOAT)
    *out = a->f;
  else if (a->kind == GC_ARG_INT || a->kind == GC_ARG_BOOL)
    *out = (double)a->i;
  else
    return false;
  return true;
}

bool L_ints(lower_ctx *L, const gc_node *n, const char *name,
            const int64_t **ints, int *count) {
  static const int64_t none[1] = {0};
  const gc_arg *a = L_arg(L, n, name);
  if (!a)
    return false;
  if (a->kind == GC_ARG_INTS) {
    *ints = a->n ? a->ints : none;
    *count = a->n;
    return true;
  }
  if (a->kind == GC_ARG_INT) { /* int[1] given as a single int */
    *ints = &a->i;
    *count = 1;
    return true;
  }
  return false;
}

bool L_dtype(lower_ctx *L, const gc_node *n, const char *name, gc_dtype *out) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a || a->kind != GC_ARG_SCALAR_TYPE)
    return false;
  *out = (gc_dtype)a->i;
  return true;
}

const gc_tensor_meta *L_out_meta(const gc_node *n, int k) {
  if (k < 0 || k >= n->noutputs || n->outputs[k].kind != GC_ARG_TENSOR ||
      !n->outputs[k].v)
    return NULL;
  return &n->outputs[k].v->meta;
}

bool L_static_sizes(const gc_tensor_meta *m, int64_t *sizes) {
  for (int i = 0; i < m->rank; i++) {
    if (m->sizes[i].expr)
      return false;
    sizes[i] = m->sizes[i].v;
  }
  return true;
}

bool L__static_strides(const gc_tensor_meta *m, int64_t *strides) {
  for (int i = 0; i < m->rank; i++) {
    if (m->strides[i].expr)
      return false;
    strides[i] = m->strides[i].v;
  }
  return !m->offset.expr;
}

/* ---- type promotion (torch.result_type) ---- */

static int category(gc_dtype d) {
  if (d == GC_DTYPE_BOOL)
    return 0;
  if (L_is_integral(d))
    return 1;
  return 2; /* floating (complex falls back before promotion matters) */
}

/* torch.promote_types on the dtypes generated code handles. */
static gc_dtype promote(gc_dtype a, gc_dtype b) {
  if (a == GC_DTYPE_UNKNOWN)
    return b;
  if (b == GC_DTYPE_UNKNOWN || a == b)
    return a;
  int ca = category(a), cb = category(b);
  if (ca != cb)
    return ca > cb ? a : b;
  if (ca == 2)
    return gc_dtype_size(a) >= gc_dtype_size(b) ? a : b;
  /* integers: uint8 with a signed type needs the next wider signed type */
  bool ua = a == GC_DTYPE_UINT8, ub = b == GC_DTYPE_UINT8;
  if (ua || ub) {
    gc_dtype other = ua ? b : a;
    if (other == GC_DTYPE_INT8)
      return GC_DTYPE_INT16;
    return other;
  }
  return gc_dtype_size(a) >= gc_dtype_size(b) ? a : b;
}

gc_dtype L_result_type(lower_ctx *L, const gc_node *n,
                       const char *const *names) {
  /* three priority classes: tensors with dimensions, zero-dim tensors,
   * numbers (wrapped or literal) */
  gc_dtype cls[3] = {GC_DTYPE_UNKNOWN, GC_DTYPE_UNKNOWN, GC_DTYPE_UNKNOWN};
  for (; *names; names++) {
    const gc_arg *a = L_arg(L, n, *names);
    if (!a || a->kind == GC_ARG_NONE)
      continue;
    if (a->kind == GC_ARG_TENSOR && a->v && a->v->kind == GC_VALUE_TENSOR) {
      int c = a->v->meta.rank > 0 ? 0 : 1;
      cls[c] = promote(cls[c], a->v->meta.dtype);
    } else if (a->kind == GC_ARG_INT) {
      cls[2] = promote(cls[2], GC_DTYPE_INT64);
    } else if (a->kind == GC_ARG_FLOAT) {
      cls[2] = promote(cls[2], GC_DTYPE_FLOAT32); /* the default dtype */
    } else if (a->kind == GC_ARG_BOOL) {
      cls[2] = promote(cls[2], GC_DTYPE_BOOL);
    } else {
      return GC_DTYPE_UNKNOWN;
    }
  }
  gc_dtype r = cls[0];
  for (int c = 1; c < 3; c++) {
    if (cls[c] == GC_DTYPE_UNKNOWN)
      continue;
    if (r == GC_DTYPE_UNKNOWN)
      r = cls[c];
    else if (category(cls[c]) > category(r))
      r = c == 2 && category(cls[c]) == 2 && category(r) < 2
              ? GC_DTYPE_FLOAT32
              : promote(r, cls[c]);
  }
  return r;
}
