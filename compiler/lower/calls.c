/*
 * calls.c: ATen calls in the IR: operators lowering introduces (the .out
 * overloads), fallbacks (a node as a call on realized inputs) and extern
 * calls writing planned buffers. See lower.h.
 */
#include "compiler/lower/ctx.h"

#include <string.h>

#include "compiler/torchops.h"

/* ---- operators introduced by lowering (extern .out overloads) ---- */

static const gc_op *op_named(lower_ctx *L, const char *name) {
  gc_op *op = gc_strmap_get(&L->ops, name);
  if (op)
    return op;
  for (int i = 0; i < L->g->nops; i++)
    if (strcmp(L->g->ops[i].name, name) == 0)
      return &L->g->ops[i];
  const char *text = gc_torch_schema(name);
  if (!text)
    return NULL;
  op = gc_arena_zalloc(L->ir->a, sizeof *op);
  if (!op || gc_schema_parse(L->ir->a, text, &op->schema, NULL) != 0)
    return NULL;
  op->name = op->schema->qualified;
  op->text = text;
  if (gc_strmap_put(&L->ops, op->name, op, NULL) < 0)
    return NULL;
  return op;
}

const gc_op *L_op(lower_ctx *L, const char *name) {
  return op_named(L, name);
}

/* ---- fallbacks and extern calls ---- */

/* The unrealized computation a view reads through (NULL: none). */
ir_tensor *L__view_root(ir_tensor *t) {
  for (int depth = 0; t && depth < 64; depth++) {
    if (t->kind == IR_T_LOOP)
      return t->realized ? NULL : t;
    if (t->kind != IR_T_VIEW)
      return NULL;
    t = t->base;
  }
  return NULL;
}

/* A strided view of t for an ATen call that must see the layout `meta`
 * describes (eager's), realizing or copying t when needed. */
static int call_view(lower_ctx *L, ir_tensor *t, const gc_tensor_meta *meta,
                     ir_buf **buf, ir_view **view) {
  ir_graph *ir = L->ir;
  int64_t ms[IR_MAX_RANK];
  gc_sym *mss[IR_MAX_RANK];
  bool have = meta && meta->rank == t->rank && L__static_strides(meta, ms);
  bool shave =
      ir->nsyms && meta && meta->rank == t->rank && L_sym_strides(L, meta, mss);
  /* a view of an unrealized computation: realize the computation (in its
   * own eager layout), so the view is a strided view of its buffer rather
   * than a copy of the view */
  ir_tensor *root = t->kind == IR_T_VIEW ? L__view_root(t) : NULL;
  if (root && root->value && !L_realize(L, root, &root->value->meta))
    return GC_ENOMEM;
  ir_view v;
  bool ok = ir_tensor_as_strided(ir, t, &v);
  if (ok && ir->nsyms) { /* the layout eager had, exactly? */
    ir_view_sym(ir, &v);
    if (!shave)
      ok = false;
    for (int i = 0; ok && i < t->rank; i++)
      if (!gc_sym_is_const(v.ssizes[i], 1) &&
          !gc_sym_is_const(v.ssizes[i], 0) && v.sstrides[i] != mss[i])
        ok = false;
  } else if (ok && have) { /* the layout eager had, exactly? */
    for (int i = 0; i < t->rank; i++)
      if (t->sizes[i] > 1 && v.strides[i] != ms[i])
        ok = false;
  }
  if (!ok) {
    /* copy it, in eager's layout when that layout is dense */
    ir_buf *b = t->kind == IR_T_LOOP ? L_realize(L, t, meta) : NULL;
    /* realized before, for other consumers, in another layout (channels-
     * last): a copy in eager's */
    for (int i = 0; b && have && !ir->nsyms && i < t->rank; i++)
      if (t->sizes[i] > 1 && b->strides[i] != ms[i])
        b = NULL;
    if (!b) {
      b = L__materialize(L, t, IR_BUF_ARENA, NULL, meta);
      if (!b)
        return GC_ENOMEM;
    }
    v = L__whole_buf(L, t, b);
  }
  ir_view_sym(ir, &v);
  ir_view *pv = gc_arena_alloc(ir->a, sizeof *pv);
  if (!pv)
    return GC_ENOMEM;
  *pv = v;
  *buf = v.buf;
  *view = pv;
  return 0;
}

/* Binds a graph argument as a call argument (a tensor channels-last with
 * `cl`). */
static int call_arg(lower_ctx *L, const gc_named_arg *na, ir_call_arg *ca,
                    bool cl) {
  ca->name = na->name;
  ca->arg = na->arg;
  ca->keyword = na->keyword;
  const gc_arg *a = &na->arg;
  int cnt = a->kind == GC_ARG_TENSOR                                     ? 1
            : a->kind == GC_ARG_TENSORS || a->kind == GC_ARG_OPT_TENSORS ? a->n
                                                                         : 0;
  if (!cnt)
    return 0;
  if (a->kind == GC_ARG_TENSOR && (!a->v || a->v->kind != GC_VALUE_TENSOR))
    return 0; /* a symbolic scalar: passed as a value */
  ca->bufs = gc_arena_calloc(L->ir->a, (size_t)cnt, sizeof *ca->bufs);
  ca->views = gc_arena_calloc(L->ir->a, (size_t)cnt, sizeof *ca->views);
  if (!ca->bufs || !ca->views)
    return GC_ENOMEM;
  for (int i = 0; i < cnt; i++) {
    const gc_value *v = a->kind == GC_ARG_TENSOR ? a->v : a->vals[i];
    if (!v)
      continue;
    ir_tensor *t = L->val[v->id];
    if (!t)
      return gc_errorf(L->err, GC_EINTERNAL, "lower: value %s has no IR value",
                       v->name);
    const gc_tensor_meta *m = &v->meta;
    if (cl && m->rank == 4 && t->rank == 4 && !(m = L__cl_meta(L, m, t->sizes)))
      return GC_ENOMEM;
    int rc = call_view(L, t, m, &ca->bufs[i], &ca->views[i]);
    if (rc)
      return rc;
  }
  return 0;
}

/* A RESULT buffer for a call's tensor result `v` (eager's layout, or
 * channels-last with `cl`). */
static ir_buf *result_buf(lower_ctx *L, ir_node *n, const gc_value *v,
                          bool cl) {
  int64_t sz[IR_MAX_RANK], st[IR_MAX_RANK];
  gc_sym *ssz[IR_MAX_RANK], *sst[IR_MAX_RANK];
  if (L->ir->nsyms && !cl && L_sym_sizes(L, &v->meta, ssz) &&
      L_sym_strides(L, &v->meta, sst)) {
    ir_buf *b = ir_buf_new_s(L->ir, IR_BUF_RESULT, v->meta.dtype, v->meta.rank,
                             ssz, sst);
    if (b) {
      b->def = n;
      b->value = v;
    }
    return b;
  }
  if (v->meta.rank > IR_MAX_RANK || !L_static_sizes(&v->meta, sz) ||
      !L__static_strides(&v->meta, st))
    return NULL;
  if (cl && v->meta.rank == 4)
    L__cl_strides(sz, st);
  ir_buf *b =
      ir_buf_new(L->ir, IR_BUF_RESULT, v->meta.dtype, v->meta.rank, sz, st);
  if (!b)
    return NULL;
  b->def = n;
  b->value = v;
  return b;
}

/* An ATen call of gn's operator on realized inputs, its results in RESULT
 * buffers (ATen allocates them): a fallback, or an extern call of an
 * operator without a usable .out overload (convolution). With `cl`, the
 * argument named "input" and the tensor results are channels-last. */
static int call_node_as(lower_ctx *L, const gc_node *gn, ir_node_kind kind,
                        bool cl) {
  ir_graph *ir = L->ir;
  ir_node *n = ir_node_new(ir, kind);
  if (!n)
    return GC_ENOMEM;
  n->gnode = gn;
  n->op = gn->op;
  n->what = gn->op->name;
  n->nargs = gn->nargs;
  n->args = gc_arena_calloc(ir->a, (size_t)gn->nargs + 1, sizeof *n->args);
  n->nresults = gn->noutputs;
  n->results =
      gc_arena_calloc(ir->a, (size_t)gn->noutputs + 1, sizeof *n->results);
  n->gnodes = gc_arena_calloc(ir->a, 1, sizeof *n->gnodes);
  if (!n->args || !n->results || !n->gnodes)
    return GC_ENOMEM;
  n->gnodes[0] = gn->id;
  n->ngnodes = 1;
  for (int i = 0; i < gn->nargs; i++) {
    /* the weight too: ATen would copy it to channels-last on every call
     * into memory of its own (fresh pages past glibc's mmap threshold);
     * the program copies it into its arena instead */
    bool as_cl = cl && (strcmp(gn->args[i].name, "input") == 0 ||
                        strcmp(gn->args[i].name, "weight") == 0);
    int rc = call_arg(L, &gn->args[i], &n->args[i], as_cl);
    if (rc)
      return rc;
  }
  for (int k = 0; k < gn->noutputs; k++) {
    const gc_arg *o = &gn->outputs[k];
    if (o->kind == GC_ARG_TENSOR && o->v && o->v->kind == GC_VALUE_TENSOR) {
      ir_buf *b = result_buf(L, n, o->v, cl);
      if (!b)
        return gc_errorf(L->err, GC_EUNSUPPORTED,
                         "lower: result %s has symbolic metadata", o->v->name);
      n->results[k] = b;
      L->val[o->v->id] = ir_tensor_of_buf(ir, b);
    } else if (o->kind == GC_ARG_TENSORS) {
      /* a Tensor[] result: one buffer per element, results[k] unused */
      for (int i = 0; i < o->n; i++) {
        ir_buf *b = result_buf(L, n, o->vals[i], false);
        if (!b)
          return GC_EUNSUPPORTED;
        L->val[o->vals[i]->id] = ir_tensor_of_buf(ir, b);
      }
    }
  }
  return ir_node_append(ir, n);
}

static int call_node(lower_ctx *L, const gc_node *gn, ir_node_kind kind) {
  return call_node_as(L, gn, kind, false);
}

int L__fallback(lower_ctx *L, const gc_node *gn) {
  int rc = call_node(L, gn, IR_FALLBACK);
  if (rc == 0 && L->stats) {
    L->stats->fallback++;
    if (L->stats->fallback_ops && L->stats->nfallback_ops < L->stats->nodes)
      L->stats->fallback_ops[L->stats->nfallback_ops++] = gn->op->name;
  }
  return rc;
}

int L_extern_conv(lower_ctx *L, const gc_node *gn) {
  const gc_value *out = gn->noutputs ? gn->outputs[0].v : NULL;
  return call_node_as(L, gn, IR_EXTERN,
                      L->channels_last && L__cl_conv(L, gn) &&
                          !(out && L->eager_layout[out->id]));
}

int L_extern_call(lower_ctx *L, const gc_node *gn) {
  return call_node_as(L, gn, IR_EXTERN, false);
}

static ir_node *out_call_as(lower_ctx *L, const gc_node *gn, ir_node_kind kind,
                            const gc_op *op, ir_buf *out, int nargs) {
  ir_graph *ir = L->ir;
  ir_node *n = ir_node_new(ir, kind);
  ir_call_arg *args = gc_arena_calloc(ir->a, (size_t)nargs + 1, sizeof *args);
  int *gnodes = gc_arena_calloc(ir->a, 1, sizeof *gnodes);
  if (!n || !args || !gnodes)
    return NULL;
  n->gnode = gn;
  n->op = op;
  n->what = gn->op->name;
  n->out = out;
  n->out_variant = true;
  n->args = args;
  n->nargs = nargs;
  gnodes[0] = gn->id;
  n->gnodes = gnodes;
  n->ngnodes = 1;
  out->def = n;
  return n;
}

ir_node *L_out_call(lower_ctx *L, const gc_node *gn, const gc_op *op,
                    ir_buf *out, int nargs) {
  return out_call_as(L, gn, IR_EXTERN, op, out, nargs);
}

/* An arena buffer in eager's layout for output k of gn (*b NULL when out
 * of memory); GC_EUNSUPPORTED when that layout is not dense. */
static int out_buffer(lower_ctx *L, const gc_node *gn, int k, ir_buf **b) {
  const gc_tensor_meta *m = L_out_meta(gn, k);
  int64_t sz[IR_MAX_RANK], st[IR_MAX_RANK];
  *b = NULL;
  if (L->ir->nsyms && m && m->rank <= IR_MAX_RANK) {
    gc_sym *ssz[IR_MAX_RANK], *sst[IR_MAX_RANK], *dense[IR_MAX_RANK];
    if (!L_sym_sizes(L, m, ssz) || !L_sym_strides(L, m, sst))
      return GC_EUNSUPPORTED;
    L__sdense_like(L, m->rank, ssz, m, dense);
    for (int i = 0; i < m->rank; i++)
      if (!gc_sym_is_const(ssz[i], 1) && !gc_sym_is_const(ssz[i], 0) &&
          dense[i] != sst[i])
        return GC_EUNSUPPORTED;
    *b = ir_buf_new_s(L->ir, IR_BUF_ARENA, m->dtype, m->rank, ssz, sst);
    if (*b)
      (*b)->value = gn->outputs[k].v;
    return 0;
  }
  if (!m || m->rank > IR_MAX_RANK || !L_static_sizes(m, sz) ||
      !L__static_strides(m, st))
    return GC_EUNSUPPORTED;
  /* out= writes a dense tensor; a layout with gaps would make ATen copy */
  int64_t dense[IR_MAX_RANK];
  L__dense_like(m->rank, sz, m, dense);
  for (int i = 0; i < m->rank; i++)
    if (sz[i] > 1 && dense[i] != st[i])
      return GC_EUNSUPPORTED;
  *b = ir_buf_new(L->ir, IR_BUF_ARENA, m->dtype, m->rank, sz, st);
  if (*b)
    (*b)->value = gn->outputs[k].v;
  return 0;
}

/* An extern call writing `out` through the .out overload `out_op` (the
 * graph node's arguments, plus out=; a node with two outputs, as cummax,
 * writes the second into out2). The buffers are arena buffers in eager's
 * layout, so BLAS writes where the planner put them. */
int L_extern_out(lower_ctx *L, const gc_node *gn, const char *out_op) {
  return L_out_node(L, gn, IR_EXTERN, out_op, NULL, NULL);
}

int L_out_node(lower_ctx *L, const gc_node *gn, ir_node_kind kind,
               const char *out_op, const char *skip, ir_node **node) {
  ir_graph *ir = L->ir;
  const gc_op *op = op_named(L, out_op);
  bool two = gn->noutputs == 2;
  if (!op || gn->noutputs < 1 || gn->noutputs > 2)
    return GC_EUNSUPPORTED;
  ir_buf *b, *b2 = NULL;
  int rc = out_buffer(L, gn, 0, &b);
  if (!rc && two)
    rc = out_buffer(L, gn, 1, &b2);
  if (rc)
    return rc;
  ir_node *n =
      b && (b2 || !two) ? out_call_as(L, gn, kind, op, b, gn->nargs) : NULL;
  if (!n)
    return GC_ENOMEM;
  if (node)
    *node = n;
  if (two) {
    n->out2 = b2;
    b2->def = n;
  }
  for (int i = 0; i < gn->nargs; i++) {
    if (skip && !strcmp(gn->args[i].name, skip)) {
      n->args[i].name = gn->args[i].name; /* not read: no buffer */
      n->args[i].arg = gn->args[i].arg;
      n->args[i].keyword = gn->args[i].keyword;
      continue;
    }
    rc = call_arg(L, &gn->args[i], &n->args[i], false);
    if (rc)
      return rc;
  }
  rc = ir_node_append(ir, n);
  if (!rc)
    rc = L_set(L, gn, 0, ir_tensor_of_buf(ir, b));
  if (!rc && two)
    rc = L_set(L, gn, 1, ir_tensor_of_buf(ir, b2));
  return rc;
}
