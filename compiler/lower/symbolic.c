/*
 * symbolic.c: sizes, strides and SymInt arguments of a graph with size
 * symbols as gc_sym expressions over the IR's size symbols, and guards
 * (docs/dynamic-shapes.md). See lower.h.
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

/* ---- symbolic sizes ---- */

bool L_symbolic(lower_ctx *L) {
  return L->ir->nsyms > 0;
}

/* a + b, a * b, max(a, b) or min(a, b) as `kind` says. */
static gc_sym *combine(gc_symctx *s, gc_sx_kind kind, gc_sym *a, gc_sym *b) {
  switch (kind) {
  case GC_SX_ADD:
    return gc_sym_add(s, a, b);
  case GC_SX_MUL:
    return gc_sym_mul(s, a, b);
  case GC_SX_MAX:
    return gc_sym_max(s, a, b);
  default:
    return gc_sym_min(s, a, b);
  }
}

/* A parsed expression as a gc_sym over the size symbols (recursion
 * bounded by the parser's depth limit). */
static gc_sym *sx_sym(lower_ctx *L, const gc_symexpr *e) {
  gc_symctx *s = &L->ir->sym;
  gc_sym *r, *d;
  int64_t k;
  switch (e->kind) {
  case GC_SX_INT:
    return gc_sym_const(s, e->i);
  case GC_SX_SYM: {
    int i = L->symbols ? gc_symbols_find(L->symbols, e->name) : -1;
    return i >= 0 && i < L->ir->nsyms ? L->ir->syms[i] : NULL;
  }
  case GC_SX_NEG:
    return gc_sym_scale(s, sx_sym(L, e->args[0]), -1);
  case GC_SX_ADD:
  case GC_SX_MUL:
  case GC_SX_MAX:
  case GC_SX_MIN:
    r = sx_sym(L, e->args[0]);
    for (int i = 1; i < e->nargs && r; i++)
      r = combine(s, e->kind, r, sx_sym(L, e->args[i]));
    return r;
  case GC_SX_FLOORDIV:
  case GC_SX_MOD:
    r = sx_sym(L, e->args[0]);
    d = sx_sym(L, e->args[1]);
    if (!r || !d || !gc_sym_const_of(d, &k) || k <= 0)
      return NULL;
    return e->kind == GC_SX_FLOORDIV ? gc_sym_floordiv(s, r, k)
                                     : gc_sym_mod(s, r, k);
  default:
    return NULL; /* true division, powers, comparisons... */
  }
}

gc_sym *L_symint(lower_ctx *L, const gc_symint *v) {
  if (!v->expr)
    return gc_sym_const(&L->ir->sym, v->v);
  return v->tree && L->ir->nsyms ? sx_sym(L, v->tree) : NULL;
}

/* The rank values v as gc_syms (false past IR_MAX_RANK). */
static bool syms_of(lower_ctx *L, int rank, const gc_symint *v, gc_sym **out) {
  if (rank > IR_MAX_RANK)
    return false;
  for (int i = 0; i < rank; i++)
    if (!(out[i] = L_symint(L, &v[i])))
      return false;
  return true;
}

bool L_sym_sizes(lower_ctx *L, const gc_tensor_meta *m, gc_sym **sizes) {
  return syms_of(L, m->rank, m->sizes, sizes);
}

bool L_sym_strides(lower_ctx *L, const gc_tensor_meta *m, gc_sym **strides) {
  return syms_of(L, m->rank, m->strides, strides);
}

bool L_symints(lower_ctx *L, const gc_node *n, const char *name, gc_sym **out,
               int *count, int max) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a)
    return false;
  gc_symctx *s = &L->ir->sym;
  if (a->kind == GC_ARG_INTS || a->kind == GC_ARG_INT) {
    int cnt = a->kind == GC_ARG_INT ? 1 : a->n;
    if (cnt > max)
      return false;
    for (int i = 0; i < cnt; i++)
      if (!(out[i] =
                gc_sym_const(s, a->kind == GC_ARG_INT ? a->i : a->ints[i])))
        return false;
    *count = cnt;
    return true;
  }
  if (a->kind != GC_ARG_SYM_INTS || a->n > max)
    return false;
  for (int i = 0; i < a->n; i++) {
    const gc_value *v = a->syms[i].v;
    out[i] = v ? (v->kind == GC_VALUE_SYM_INT ? L_symint(L, &v->sym) : NULL)
               : gc_sym_const(s, a->syms[i].i);
    if (!out[i])
      return false;
  }
  *count = a->n;
  return true;
}

bool L_guard(lower_ctx *L, const gc_node *n, ir_guard_op op, gc_sym *a,
             gc_sym *b, ir_guard_kind kind, const char *what) {
  /* node ids and operator names follow the key (the canonical order, the
   * compiler's operator table), never the client's names */
  const char *text =
      n ? gc_arena_printf(L->ir->a, "%s (node %d, %s)", what, n->id,
                          n->op ? n->op->schema->qualified : "?")
        : what;
  return ir_guard_add(L->ir, op, a, b, kind, text);
}

/* Dense strides for sizes in the stride order of `like` (contiguous
 * without it), symbolic: the order of like's strides is read at a probe
 * size (ir_probe), which only chooses a layout: the code is right for
 * any. */
void L__sdense_like(lower_ctx *L, int rank, gc_sym *const *sizes,
                    const gc_tensor_meta *like, gc_sym **strides) {
  gc_symctx *s = &L->ir->sym;
  gc_sym *ls[IR_MAX_RANK];
  if (!like || like->rank != rank || !L_sym_strides(L, like, ls)) {
    ir_contiguous_sstrides(L->ir, rank, sizes, strides);
    return;
  }
  double key[IR_MAX_RANK];
  for (int i = 0; i < rank; i++)
    key[i] = ir_probe(L->ir, ls[i]);
  int order[IR_MAX_RANK];
  for (int i = 0; i < rank; i++)
    order[i] = i;
  for (int i = 1; i < rank; i++) { /* stable insertion sort, stride desc */
    int d = order[i], j = i - 1;
    while (j >= 0 && key[order[j]] < key[d]) {
      order[j + 1] = order[j];
      j--;
    }
    order[j + 1] = d;
  }
  gc_sym *st = gc_sym_const(s, 1);
  for (int i = rank - 1; i >= 0; i--) {
    strides[order[i]] = st;
    int64_t v;
    if (gc_sym_const_of(sizes[order[i]], &v))
      st = gc_sym_scale(s, st, v > 1 ? v : 1);
    else
      st = gc_sym_mul(s, st, sizes[order[i]]);
  }
}
