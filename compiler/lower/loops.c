/*
 * loops.c: building IR for a rule: loop variables, loads (and the graph
 * nodes a result inlines), unrealized pointwise loops and views, checked
 * indices, dense strides, and gathers from an unrealized loop's body.
 * See lower.h.
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

/* ---- IR helpers ---- */

/* New loop variables i<n> over `sizes`, or over `ssizes` when symbolic. */
static gc_sym **new_vars(lower_ctx *L, int rank, const int64_t *sizes,
                         gc_sym *const *ssizes) {
  gc_symctx *s = &L->ir->sym;
  gc_sym **v = gc_arena_calloc(L->ir->a, (size_t)rank + 1, sizeof *v);
  if (!v)
    return NULL;
  for (int i = 0; i < rank; i++) {
    char name[24];
    snprintf(name, sizeof name, "i%d", s->nvars);
    v[i] = ssizes ? gc_sym_loopvar(s, name, ssizes[i])
                  : gc_sym_newvar(s, name, 0, sizes[i] > 0 ? sizes[i] - 1 : 0);
    if (!v[i])
      return NULL;
  }
  return v;
}

gc_sym **L_vars(lower_ctx *L, int rank, const int64_t *sizes) {
  return new_vars(L, rank, sizes, NULL);
}

gc_sym **L_svars(lower_ctx *L, int rank, gc_sym *const *sizes) {
  return new_vars(L, rank, NULL, sizes);
}

/* The extent of loop variable x (NULL: not a variable). */
static gc_sym *extent_of(lower_ctx *L, const gc_sym *x) {
  if (!x || x->kind != GC_SYM_VAR)
    return NULL;
  const gc_symvar *v = &L->ir->sym.vars[x->var];
  if (v->extent)
    return v->extent;
  return NULL; /* a constant extent: the metadata is static there */
}

/* Remembers that graph nodes `ids` are being inlined into cur's result. */
static void add_prov(lower_ctx *L, const int *ids, int n) {
  for (int i = 0; i < n; i++) {
    bool seen = false;
    for (int k = 0; k < L->nprov && !seen; k++)
      seen = L->prov[k] == ids[i];
    if (seen)
      continue;
    int *p =
        gc_arena_grow(L->ir->a, L->prov, L->nprov, &L->capprov, 16, sizeof *p);
    if (!p)
      return;
    L->prov = p;
    p[L->nprov++] = ids[i];
  }
}

/* Unrealized tensors t reads through (itself, a view's bases). */
static void note_inlined(lower_ctx *L, const ir_tensor *t) {
  for (int depth = 0; t && depth < 64; depth++) {
    if (t->kind == IR_T_LOOP && !t->realized)
      add_prov(L, t->gnodes, t->ngnodes);
    t = t->kind == IR_T_VIEW ? t->base : NULL;
  }
}

ir_expr *L_load(lower_ctx *L, ir_tensor *t, gc_sym *const *idx) {
  if (t) {
    t->uses++;
    note_inlined(L, t);
  }
  return ir_tensor_load(L->ir, t, idx);
}

/* The graph nodes a new result computes: cur and what it inlined. */
int L__provenance(lower_ctx *L, int **out) {
  if (L->cur)
    add_prov(L, &L->cur->id, 1);
  int *p = gc_arena_calloc(L->ir->a, (size_t)L->nprov + 1, sizeof *p);
  if (!p)
    return 0;
  memcpy(p, L->prov, (size_t)L->nprov * sizeof *p);
  for (int i = 1; i < L->nprov; i++) { /* ascending, for readable comments */
    int v = p[i], j = i - 1;
    while (j >= 0 && p[j] > v) {
      p[j + 1] = p[j];
      j--;
    }
    p[j + 1] = v;
  }
  *out = p;
  return L->nprov;
}

ir_expr *L_load_bcast(lower_ctx *L, ir_tensor *t, int rank,
                      gc_sym *const *idx) {
  if (!t || t->rank > rank)
    return NULL;
  gc_sym *ti[IR_MAX_RANK];
  int lead = rank - t->rank;
  for (int i = 0; i < t->rank; i++) {
    bool one = t->ssizes ? gc_sym_is_const(t->ssizes[i], 1) : t->sizes[i] == 1;
    ti[i] = one ? gc_sym_const(&L->ir->sym, 0) : idx[lead + i];
    if (one || !L->ir->nsyms || !t->ssizes)
      continue;
    /* a symbolic dim read at the result's index: the two must be equal
     * (a symbolic size that is 1 at run time would broadcast: not the
     * code compiled here) */
    gc_sym *ext = extent_of(L, idx[lead + i]);
    bool sym = gc_sym_symbolic(&L->ir->sym, t->ssizes[i]);
    if (!ext && sym && idx[lead + i]->kind == GC_SYM_VAR)
      ext =
          gc_sym_const(&L->ir->sym, L->ir->sym.vars[idx[lead + i]->var].hi + 1);
    if (ext && ext != t->ssizes[i] &&
        (sym || gc_sym_symbolic(&L->ir->sym, ext)) &&
        !L_guard(L, L->cur, IR_GUARD_EQ, t->ssizes[i], ext, IR_GUARD_BROADCAST,
                 gc_arena_printf(L->ir->a,
                                 "dim %d of an operand is not broadcast", i)))
      return NULL;
  }
  return L_load(L, t, ti);
}

static void note_gnode(lower_ctx *L, ir_tensor *t) {
  if (t)
    t->ngnodes = L__provenance(L, &t->gnodes);
}

ir_tensor *L_pointwise(lower_ctx *L, const gc_node *n, gc_dtype dt, int rank,
                       const int64_t *sizes, gc_sym **vars, ir_expr *body) {
  gc_sym **ss = ir_syms_of(L->ir, rank, sizes);
  return ss ? L_spointwise(L, n, dt, rank, ss, vars, body) : NULL;
}

/* t->sizes and t->ssizes from symbolic sizes (arena copies). */
static bool set_sizes(lower_ctx *L, ir_tensor *t, int rank,
                      gc_sym *const *sizes) {
  if (!(t->sizes = gc_arena_calloc(L->ir->a, (size_t)rank + 1, 8)) ||
      !(t->ssizes =
            gc_arena_calloc(L->ir->a, (size_t)rank + 1, sizeof *t->ssizes)))
    return false;
  if (rank)
    memcpy(t->ssizes, sizes, (size_t)rank * sizeof *sizes);
  ir_ints_of(rank, sizes, t->sizes);
  return true;
}

ir_tensor *L_spointwise(lower_ctx *L, const gc_node *n, gc_dtype dt, int rank,
                        gc_sym *const *sizes, gc_sym **vars, ir_expr *body) {
  (void)n;
  if (!body || !vars || rank > IR_MAX_RANK)
    return NULL;
  ir_tensor *t = gc_arena_zalloc(L->ir->a, sizeof *t);
  if (!t || !set_sizes(L, t, rank, sizes))
    return NULL;
  t->kind = IR_T_LOOP;
  t->dtype = dt;
  t->rank = rank;
  t->vars = vars;
  t->body = body->dtype == dt ? body : ir_cast(L->ir, body, dt);
  if (!t->body)
    return NULL;
  ir_expr_stats(t->body, &t->nreads, &t->nops, &t->costly);
  note_gnode(L, t);
  return t;
}

ir_tensor *L_to_dtype(lower_ctx *L, const gc_node *n, ir_tensor *t,
                      gc_dtype dt) {
  if (!t || t->dtype == dt)
    return t;
  /* over the sizes as expressions: t's may be symbolic */
  gc_sym **ss = L__sym_sizes_of(L, t);
  gc_sym **v = ss ? L_svars(L, t->rank, ss) : NULL;
  return v ? L_spointwise(L, n, dt, t->rank, ss, v, L_load(L, t, v)) : NULL;
}

ir_tensor *L_view(lower_ctx *L, ir_tensor *base, int rank, const int64_t *sizes,
                  gc_sym **vars, gc_sym **map) {
  gc_sym **ss = ir_syms_of(L->ir, rank, sizes);
  return ss ? L_sview(L, base, rank, ss, vars, map) : NULL;
}

ir_tensor *L_sview(lower_ctx *L, ir_tensor *base, int rank,
                   gc_sym *const *sizes, gc_sym **vars, gc_sym **map) {
  if (!base || !vars || !map || rank > IR_MAX_RANK)
    return NULL;
  for (int i = 0; i < base->rank; i++)
    if (!map[i])
      return NULL;
  ir_tensor *t = gc_arena_zalloc(L->ir->a, sizeof *t);
  if (!t || !set_sizes(L, t, rank, sizes))
    return NULL;
  t->kind = IR_T_VIEW;
  t->dtype = base->dtype;
  t->rank = rank;
  t->vars = vars;
  t->base = base;
  t->map = map;
  /* a view of a buffer is a strided buffer view when the map is affine */
  ir_view v;
  if (ir_tensor_as_strided(L->ir, t, &v)) {
    ir_view_sym(L->ir, &v);
    ir_tensor *s = L->ir->nsyms
                       ? ir_tensor_strided_s(L->ir, v.buf, rank, t->ssizes,
                                             v.sstrides, v.soffset)
                       : ir_tensor_strided(L->ir, v.buf, rank, t->sizes,
                                           v.strides, v.offset);
    if (s)
      return s;
  }
  return t;
}

ir_expr *L_checked_index(lower_ctx *L, const gc_node *n, ir_expr *i,
                         int64_t size) {
  ir_graph *ir = L->ir;
  gc_sym **vars = L_vars(L, 1, &size);
  ir_tensor *t = vars ? L_pointwise(L, n, GC_DTYPE_INT64, 1, &size, vars,
                                    ir_index(ir, vars[0], GC_DTYPE_INT64))
                      : NULL;
  ir_view v;
  if (!t || !i || !L_as_buffer(L, t, &v))
    return NULL;
  return ir_gather(ir, v.buf, gc_sym_const(&ir->sym, v.offset),
                   ir_cast(ir, i, GC_DTYPE_INT64), v.strides[0], size, true);
}

/* The dims by decreasing stride, equal strides in dim order (a stable
 * insertion sort). */
static void order_by_stride(int rank, const int64_t *strides, int *order) {
  for (int i = 0; i < rank; i++)
    order[i] = i;
  for (int i = 1; i < rank; i++) {
    int d = order[i], j = i - 1;
    while (j >= 0 && strides[order[j]] < strides[d]) {
      order[j + 1] = order[j];
      j--;
    }
    order[j + 1] = d;
  }
}

bool L_dense_strides(int rank, const int64_t *sizes, const int64_t *strides) {
  int order[IR_MAX_RANK]; /* dims by decreasing stride */
  if (rank > IR_MAX_RANK)
    return false;
  order_by_stride(rank, strides, order);
  int64_t dense = 1;
  for (int i = rank - 1; i >= 0; i--) {
    int d = order[i];
    if (sizes[d] > 1 && strides[d] != dense)
      return false;
    dense *= sizes[d];
  }
  return true;
}

/* Dense strides for `sizes` in the stride order of `like` (eager's layout:
 * channels-last stays channels-last); contiguous without `like`. */
void L__dense_like(int rank, const int64_t *sizes, const gc_tensor_meta *like,
                   int64_t *strides) {
  int64_t ls[IR_MAX_RANK];
  if (!like || like->rank != rank || !L__static_strides(like, ls)) {
    ir_contiguous_strides(rank, sizes, strides);
    return;
  }
  int order[IR_MAX_RANK]; /* dims from outermost to innermost */
  order_by_stride(rank, ls, order);
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[order[i]] = s;
    s *= sizes[order[i]] > 1 ? sizes[order[i]] : 1;
  }
}

static ir_expr *gather_loop(lower_ctx *L, ir_tensor *t, gc_sym *const *at,
                            int dim, ir_expr *i, bool wrap) {
  ir_graph *ir = L->ir;
  if (!t || t->kind != IR_T_LOOP || t->realized || dim < 0 || dim >= t->rank)
    return NULL;
  gc_symmap map = {0};
  for (int k = 0; k < t->rank; k++)
    if (k != dim && !gc_symmap_set(&ir->sym, &map, t->vars[k]->var,
                                   at ? at[k] : t->vars[k]))
      return NULL;
  return ir_expr_gather_var(ir, t->body, &map, t->vars[dim]->var, i,
                            t->sizes[dim], wrap);
}

bool L_gather_loop_ok(lower_ctx *L, ir_tensor *t, int dim) {
  return gather_loop(L, t, NULL, dim, ir_const_i(L->ir, 0, GC_DTYPE_INT64),
                     false) != NULL;
}

ir_expr *L_gather_loop(lower_ctx *L, ir_tensor *t, gc_sym *const *at, int dim,
                       ir_expr *i, bool wrap) {
  ir_expr *r = gather_loop(L, t, at, dim, i, wrap);
  if (r) {
    t->uses++;
    note_inlined(L, t);
  }
  return r;
}
