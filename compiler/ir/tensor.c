/*
 * tensor.c: the loop IR's tensors as lowering builds them: strided views
 * of buffers, loads through views and loops, and a tensor as a strided
 * view of a buffer when it is one. See ir.h.
 */
#include "compiler/ir/ir.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ir/half.h"

/* ---- tensors ---- */

static ir_tensor *tensor_new(ir_graph *ir, ir_tensor_kind kind, gc_dtype dt,
                             int rank, const int64_t *sizes) {
  ir_tensor *t = gc_arena_zalloc(ir->a, sizeof *t);
  if (!t || !(t->sizes = gc_arena_calloc(ir->a, (size_t)rank + 1, 8))) {
    ir->oom = true;
    return NULL;
  }
  t->kind = kind;
  t->dtype = dt;
  t->rank = rank;
  if (rank)
    memcpy(t->sizes, sizes, (size_t)rank * 8);
  if (!(t->ssizes = ir_syms_of(ir, rank, t->sizes)))
    return NULL;
  return t;
}

ir_tensor *ir_tensor_strided(ir_graph *ir, ir_buf *b, int rank,
                             const int64_t *sizes, const int64_t *strides,
                             int64_t offset) {
  if (!b)
    return NULL;
  ir_tensor *t = tensor_new(ir, IR_T_BUF, b->dtype, rank, sizes);
  if (!t || !(t->strides = gc_arena_calloc(ir->a, (size_t)rank + 1, 8))) {
    ir->oom = true;
    return NULL;
  }
  t->buf = b;
  if (rank)
    memcpy(t->strides, strides, (size_t)rank * 8);
  t->offset = offset;
  if (!(t->sstrides = ir_syms_of(ir, rank, t->strides)) ||
      !(t->soffset = gc_sym_const(&ir->sym, offset))) {
    ir->oom = true;
    return NULL;
  }
  return t;
}

ir_tensor *ir_tensor_strided_s(ir_graph *ir, ir_buf *b, int rank,
                               gc_sym *const *sizes, gc_sym *const *strides,
                               gc_sym *offset) {
  int64_t sz[IR_MAX_RANK + 1], st[IR_MAX_RANK + 1], off;
  if (!b || !offset || rank > IR_MAX_RANK)
    return NULL;
  ir_ints_of(rank, sizes, sz);
  ir_ints_of(rank, strides, st);
  if (!gc_sym_const_of(offset, &off))
    off = IR_SYMBOLIC;
  ir_tensor *t = ir_tensor_strided(ir, b, rank, sz, st, off);
  if (!t)
    return NULL;
  memcpy(t->ssizes, sizes, (size_t)rank * sizeof *sizes);
  memcpy(t->sstrides, strides, (size_t)rank * sizeof *strides);
  t->soffset = offset;
  return t;
}

ir_tensor *ir_tensor_of_buf(ir_graph *ir, ir_buf *b) {
  if (b && b->symbolic)
    return ir_tensor_strided_s(ir, b, b->rank, b->ssizes, b->sstrides,
                               gc_sym_const(&ir->sym, 0));
  return b ? ir_tensor_strided(ir, b, b->rank, b->sizes, b->strides, 0) : NULL;
}

/* Stride i of a strided tensor as an expression. */
static gc_sym *tstride(ir_graph *ir, const ir_tensor *t, int i) {
  return t->sstrides ? t->sstrides[i] : gc_sym_const(&ir->sym, t->strides[i]);
}

ir_expr *ir_tensor_load(ir_graph *ir, ir_tensor *t, gc_sym *const *idx) {
  if (!t)
    return NULL;
  gc_symctx *s = &ir->sym;
  if (t->realized && t->kind != IR_T_BUF) {
    /* a realized computation: read its buffer (contiguous per its layout) */
    gc_sym *off = gc_sym_const(s, 0);
    for (int i = 0; i < t->rank; i++)
      off = gc_sym_add(s, off, gc_sym_mul(s, idx[i], t->realized->sstrides[i]));
    return ir_load(ir, t->realized, off);
  }
  switch (t->kind) {
  case IR_T_BUF: {
    gc_sym *off = t->soffset ? t->soffset : gc_sym_const(s, t->offset);
    for (int i = 0; i < t->rank; i++)
      off = gc_sym_add(s, off, gc_sym_mul(s, idx[i], tstride(ir, t, i)));
    return ir_load(ir, t->buf, off);
  }
  case IR_T_LOOP: {
    /* at its own variables (a consumer over the same space shares them,
     * lower/pointwise.c): the body as it is, rather than a copy */
    int same = 0;
    while (same < t->rank && idx[same] == t->vars[same])
      same++;
    if (same == t->rank)
      return t->body;
    gc_symmap map = {0};
    for (int i = 0; i < t->rank; i++)
      if (!gc_symmap_set(s, &map, t->vars[i]->var, idx[i])) {
        ir->oom = true;
        return NULL;
      }
    return ir_expr_subst(ir, t->body, &map);
  }
  case IR_T_VIEW: {
    /* the map is written in the view's own variables: substitute idx */
    gc_symmap vmap = {0};
    gc_sym **bidx =
        gc_arena_calloc(ir->a, (size_t)t->base->rank + 1, sizeof *bidx);
    if (!bidx) {
      ir->oom = true;
      return NULL;
    }
    for (int i = 0; i < t->rank; i++)
      if (!gc_symmap_set(s, &vmap, t->vars[i]->var, idx[i])) {
        ir->oom = true;
        return NULL;
      }
    for (int i = 0; i < t->base->rank; i++)
      if (!(bidx[i] = gc_sym_subst(s, t->map[i], &vmap)))
        return NULL;
    return ir_tensor_load(ir, t->base, bidx);
  }
  }
  return NULL;
}

/* A view of a symbolic tensor: strides and offset read off the index of a
 * load at fresh variables, with coefficients of constants and size
 * symbols. */
static bool as_strided_sym(ir_graph *ir, ir_tensor *t, ir_view *v) {
  gc_symctx *s = &ir->sym;
  int r = t->rank;
  gc_sym **idx = gc_arena_calloc(ir->a, (size_t)r + 1, sizeof *idx);
  gc_sym **st = gc_arena_calloc(ir->a, (size_t)r + 1, sizeof *st);
  int64_t *ist = gc_arena_calloc(ir->a, (size_t)r + 1, 8);
  if (!idx || !st || !ist)
    return false;
  gc_symmap zero = {0};
  for (int i = 0; i < r; i++) {
    char name[32];
    snprintf(name, sizeof name, "v%d", s->nvars);
    if (!(idx[i] = gc_sym_loopvar(s, name, t->ssizes[i])) ||
        !gc_symmap_set(s, &zero, idx[i]->var, gc_sym_const(s, 0)))
      return false;
  }
  ir_expr *e = ir_tensor_load(ir, t, idx);
  if (!e || e->op != IR_LOAD)
    return false;
  gc_sym *ix = e->load.index;
  gc_sym *rest = ix;
  for (int i = 0; i < r; i++) {
    if (!gc_sym_coef(s, ix, idx[i]->var, &st[i]))
      return false;
    rest = gc_sym_sub(s, rest, gc_sym_mul(s, idx[i], st[i]));
  }
  /* nothing but our variables times their coefficients may vary */
  gc_sym *off = gc_sym_subst(s, ix, &zero);
  if (!rest || !off || rest != off)
    return false;
  for (int i = 0; i < r; i++) /* size-1 dims: any stride; keep 0 off */
    if (gc_sym_is_const(t->ssizes[i], 1) || gc_sym_is_const(t->ssizes[i], 0))
      if (st[i]->hi < 0)
        st[i] = gc_sym_const(s, 0);
  ir_ints_of(r, st, ist);
  v->buf = e->load.buf;
  v->rank = r;
  v->sizes = t->sizes;
  v->strides = ist;
  v->ssizes = t->ssizes;
  v->sstrides = st;
  v->soffset = off;
  if (!gc_sym_const_of(off, &v->offset))
    v->offset = IR_SYMBOLIC;
  return true;
}

bool ir_tensor_as_strided(ir_graph *ir, ir_tensor *t, ir_view *v) {
  if (!t)
    return false;
  memset(v, 0, sizeof *v);
  if (t->kind == IR_T_BUF) {
    v->buf = t->buf;
    v->rank = t->rank;
    v->sizes = t->sizes;
    v->strides = t->strides;
    v->offset = t->offset;
    v->ssizes = t->ssizes;
    v->sstrides = t->sstrides;
    v->soffset = t->soffset;
    return true;
  }
  if (t->realized && t->kind == IR_T_LOOP) {
    v->buf = t->realized;
    v->rank = t->rank;
    v->sizes = t->sizes;
    v->strides = t->realized->strides;
    v->offset = 0;
    v->ssizes = t->ssizes;
    v->sstrides = t->realized->sstrides;
    v->soffset = gc_sym_const(&ir->sym, 0);
    return true;
  }
  if (ir->nsyms) /* a graph with size symbols: strides may be symbolic */
    return as_strided_sym(ir, t, v);
  /* a view: load with fresh variables and read the strides off the index */
  gc_symctx *s = &ir->sym;
  gc_sym **idx = gc_arena_calloc(ir->a, (size_t)t->rank + 1, sizeof *idx);
  int64_t *st = gc_arena_calloc(ir->a, (size_t)t->rank + 1, 8);
  if (!idx || !st)
    return false;
  for (int i = 0; i < t->rank; i++) {
    char name[32];
    snprintf(name, sizeof name, "v%d", s->nvars);
    idx[i] = gc_sym_newvar(s, name, 0, t->sizes[i] > 0 ? t->sizes[i] - 1 : 0);
    if (!idx[i])
      return false;
  }
  ir_expr *e = ir_tensor_load(ir, t, idx);
  if (!e || e->op != IR_LOAD || !gc_sym_is_affine(e->load.index))
    return false;
  const gc_sym *ix = e->load.index;
  for (int i = 0; i < t->rank; i++)
    if (!gc_sym_linear_in(ix, idx[i]->var, &st[i]))
      return false;
  /* nothing but our variables may appear */
  if (ix->kind == GC_SYM_ADD)
    for (int k = 0; k < ix->n; k++) {
      bool ours = false;
      for (int i = 0; i < t->rank; i++)
        ours |= ix->ops[k] == idx[i];
      if (!ours)
        return false;
    }
  v->buf = e->load.buf;
  v->rank = t->rank;
  v->sizes = t->sizes;
  v->strides = st;
  v->offset = ix->kind == GC_SYM_CONST ? ix->c
              : ix->kind == GC_SYM_ADD ? ix->c
                                       : 0;
  for (int i = 0; i < t->rank; i++) /* size-1 dims: any stride; keep 0 off */
    if (t->sizes[i] <= 1 && st[i] < 0)
      st[i] = 0;
  ir_view_sym(ir, v);
  return true;
}

void ir_view_sym(ir_graph *ir, ir_view *v) {
  if (!v->ssizes)
    v->ssizes = ir_syms_of(ir, v->rank, v->sizes);
  if (!v->sstrides)
    v->sstrides = ir_syms_of(ir, v->rank, v->strides);
  if (!v->soffset)
    v->soffset = gc_sym_const(&ir->sym, v->offset);
  if (!v->soffset)
    ir->oom = true;
}
