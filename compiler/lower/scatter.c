/*
 * scatter.c: lowering rules for scatters: scatter_add, scatter.src,
 * index_add, embedding_dense_backward and index_put with accumulate (the
 * backwards of gather, index_select, embedding and advanced indexing: x[i],
 * x[:, i] with one index tensor, whose index names a row; x[i, j],
 * x[i, :, j], x[i[:, None], j] with several, which become one element
 * offset per position, each index checked against its own dim).
 *
 * A scatter writes where its index says, so it is not a function of its
 * output's index and cannot be a loop of the IR: like a scan (scan.c) it is
 * a node kind of its own, IR_SCATTER, described as a call of the
 * operator's .out overload, that generated code makes itself
 * (codegen/scatter.c), inside its segment. The
 * output starts as `self` (a copy) or, when self is an unrealized constant
 * (the zeros a backward scatters into), as that constant without reading
 * anything; then every element goes to its position in ATen's order: for
 * each output position, contributions in ascending position along the
 * scattered dimension, added in the element type, as ATen's kernels do, so
 * the results are eager's bit for bit. An index out of range makes the
 * call raise (eager raises too; its embedding backward does not check).
 *
 * Declined (ATen calls): a float alpha that is not 0 or a power of two
 * (ATen multiplies and adds with an FMA or without, and the two agree only
 * on exact products), scale_grad_by_freq, index and source shapes ATen would
 * refuse or broadcast, dtypes generated code does not compute in.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "compiler/lower/lower.h"

static const char *const out_ops[] = {
    [IR_SCATTER_ADD] = "aten::scatter_add.out",
    [IR_SCATTER_SET] = "aten::scatter.src_out",
    [IR_SCATTER_INDEX_ADD] = "aten::index_add.out",
    [IR_SCATTER_EMBEDDING] = "aten::embedding_dense_backward.out",
    [IR_SCATTER_INDEX_PUT] = "aten::index_put.out",
};

static bool is_index(gc_dtype d) {
  return d == GC_DTYPE_INT64 || d == GC_DTYPE_INT32;
}

/* Has t the output's sizes (as the operator's semantics say; metadata a
 * client got wrong must not make generated code read past a buffer)? */
static bool same_sizes(const ir_tensor *t, const int64_t *sz) {
  for (int d = 0; d < t->rank; d++)
    if (t->sizes[d] != sz[d])
      return false;
  return true;
}

/* Is self an unrealized constant (zeros a backward scatters into)? */
static bool const_base(const ir_tensor *self, gc_dtype dt) {
  return self->kind == IR_T_LOOP && !self->realized && self->body &&
         self->body->op == IR_CONST && self->body->dtype == dt;
}

/* index_put with several index tensors (ixs, ni items, None between or
 * around them; adjacent: no None between): the element form. The index
 * tensors broadcast to a shape S; each is checked against its own dim
 * (L_checked_index: wrapped when negative, IndexError when out of range)
 * and their sum times the output's strides (st, from the metadata: the
 * extern's buffer gets them) is one element offset per position of S
 * (*flat). The values are [dims before the first index, S, dims after]
 * when the indices are adjacent, else [S, every other dim] (ATen's rule):
 * that shape goes to E (*erank dims), *first gets the number before S,
 * *odims the output dim of each values dim that is not one of S's. */
static int element_index(lower_ctx *L, const gc_node *n, ir_tensor **ixs,
                         int ni, const int64_t *sz, bool adjacent, int *first,
                         const int **odims, ir_view **flat, int64_t *st,
                         int64_t *E, int *erank) {
  ir_graph *ir = L_ir(L);
  const gc_tensor_meta *m = L_out_meta(n, 0);
  int r = m->rank, srank = 0, nrest = r;
  int64_t S[IR_MAX_RANK];
  for (int k = 0; k < ni; k++) {
    if (!ixs[k])
      continue;
    nrest--;
    ir_tensor *t = ixs[k];
    for (int d = 0; d < t->rank; d++) { /* right-aligned broadcasting */
      int e = d + srank - t->rank;
      if (e < 0) {
        memmove(S - e, S, (size_t)srank * sizeof *S);
        for (int i = 0; i < -e; i++)
          S[i] = 1;
        srank -= e;
        e = 0;
      }
      if (S[e] == 1)
        S[e] = t->sizes[d];
      else if (t->sizes[d] != 1 && t->sizes[d] != S[e])
        return GC_EUNSUPPORTED; /* ATen's broadcasting error */
    }
  }
  if (srank + nrest > IR_MAX_RANK)
    return GC_EUNSUPPORTED;
  for (int d = 0; d < r; d++) {
    if (m->strides[d].expr)
      return GC_EUNSUPPORTED;
    st[d] = m->strides[d].v;
  }
  int *od = gc_arena_alloc(ir->a, (size_t)(nrest + 1) * sizeof *od);
  if (!od)
    return GC_ENOMEM;
  int j = 0, lead = 0;
  for (int d = 0; d < r; d++)
    if (d >= ni || !ixs[d])
      od[j++] = d;
  while (adjacent && !ixs[lead]) /* the dims before the first index */
    lead++;
  *erank = srank + nrest;
  for (int d = 0; d < *erank; d++)
    E[d] = d < lead           ? sz[od[d]]
           : d < lead + srank ? S[d - lead]
                              : sz[od[d - srank]];
  gc_sym **vars = L_vars(L, srank, S);
  if (!vars)
    return GC_ENOMEM;
  ir_expr *off = NULL;
  for (int k = 0; k < ni; k++) {
    if (!ixs[k])
      continue;
    ir_expr *c =
        L_checked_index(L, n, L_load_bcast(L, ixs[k], srank, vars), sz[k]);
    if (!c)
      return sz[k] > 0 ? GC_ENOMEM : GC_EUNSUPPORTED;
    if (st[k] != 1)
      c = ir_op2(ir, IR_MUL, GC_DTYPE_INT64, c,
                 ir_const_i(ir, st[k], GC_DTYPE_INT64));
    off = off ? ir_op2(ir, IR_ADD, GC_DTYPE_INT64, off, c) : c;
  }
  ir_tensor *ft = L_pointwise(L, n, GC_DTYPE_INT64, srank, S, vars, off);
  *flat = gc_arena_alloc(ir->a, sizeof **flat);
  if (!ft || !*flat || !L_as_buffer(L, ft, *flat))
    return GC_ENOMEM;
  *first = lead;
  *odims = od;
  return 0;
}

/* which: the ir_scatter_op. */
int lower_scatter(lower_ctx *L, const gc_node *n, int which) {
  ir_graph *ir = L_ir(L);
  const gc_tensor_meta *m = L_out_meta(n, 0);
  int64_t sz[IR_MAX_RANK];
  if (which < IR_SCATTER_ADD || which > IR_SCATTER_INDEX_PUT || !m ||
      m->rank < 1 || m->rank > IR_MAX_RANK || !L_static_sizes(m, sz) ||
      !L_dtype_ok(m->dtype) || L_opmath(m->dtype) != m->dtype)
    return GC_EUNSUPPORTED; /* codegen/scatter.c computes in the dtype */
  int r = m->rank;
  if (m->dtype == GC_DTYPE_BOOL && which != IR_SCATTER_SET)
    return GC_EUNSUPPORTED; /* bool sums saturate: C's += on uint8 would not */
  int64_t dim = 0, padding = -1;
  int first = 0;           /* index_put: the values' dims before the index's */
  int kfirst = 0;          /* index_put: the first index tensor's position */
  const int *odims = NULL; /* index_put's element form (element_index) */
  ir_view *flat_ix = NULL; /* its element offsets */
  int64_t st[IR_MAX_RANK]; /* the strides they were computed for */
  int64_t E[IR_MAX_RANK];  /* index_put: the values' shape ATen expands to */
  int erank = 0;
  bool bcast = false; /* the values broadcast to it */
  double alpha = 1;
  const char *skip = NULL;
  ir_expr *fill = NULL;
  if (which == IR_SCATTER_EMBEDDING) {
    ir_tensor *g = L_tensor(L, n, "grad_output"),
              *ix = L_tensor(L, n, "indices");
    int64_t nw;
    bool freq = true;
    if (!g || !ix || r != 2 || g->dtype != m->dtype || !L_is_float(m->dtype) ||
        !is_index(ix->dtype) || g->rank != ix->rank + 1 ||
        !L_int(L, n, "num_weights", &nw) ||
        !L_int(L, n, "padding_idx", &padding) ||
        !L_bool(L, n, "scale_grad_by_freq", &freq) || freq)
      return GC_EUNSUPPORTED;
    for (int d = 0; d < ix->rank; d++)
      if (g->sizes[d] != ix->sizes[d])
        return GC_EUNSUPPORTED;
    if (g->sizes[g->rank - 1] != sz[1] || nw != sz[0] ||
        ix->rank + 1 > IR_MAX_RANK)
      return GC_EUNSUPPORTED;
  } else if (which == IR_SCATTER_INDEX_PUT) {
    ir_tensor *self = L_tensor(L, n, "self"), *v = L_tensor(L, n, "values");
    ir_tensor **ixs;
    int ni = L_tensors(L, n, "indices", &ixs);
    bool acc = false;
    if (!self || !v || ni < 1 || ni > r || !L_bool(L, n, "accumulate", &acc) ||
        !acc || self->rank != r || self->dtype != m->dtype ||
        v->dtype != m->dtype || !same_sizes(self, sz))
      return GC_EUNSUPPORTED; /* (without accumulate, duplicates race) */
    int nk = 0, last = -1;
    for (int k = 0; k < ni; k++) {
      if (!ixs[k])
        continue;
      if (!is_index(ixs[k]->dtype))
        return GC_EUNSUPPORTED;
      if (!nk)
        kfirst = k;
      last = k;
      nk++;
    }
    if (!nk)
      return GC_EUNSUPPORTED;
    if (nk == 1) {
      /* one index tensor on dim kfirst: it names a row of that dim */
      ir_tensor *ix = ixs[kfirst];
      first = kfirst;
      erank = r - 1 + ix->rank;
      if (erank > IR_MAX_RANK)
        return GC_EUNSUPPORTED;
      for (int d = 0; d < erank; d++)
        E[d] = d < first              ? sz[d]
               : d < first + ix->rank ? ix->sizes[d - first]
                                      : sz[d - ix->rank + 1];
      dim = first;
    } else {
      int rc = element_index(L, n, ixs, ni, sz, last - kfirst + 1 == nk, &first,
                             &odims, &flat_ix, st, E, &erank);
      if (rc)
        return rc;
      dim = kfirst;
    }
    /* the values: of that shape, or broadcast to it (x[i] += 1) */
    if (v->rank > erank)
      return GC_EUNSUPPORTED;
    for (int d = 0; d < v->rank; d++) {
      int64_t e = E[d + erank - v->rank];
      if (v->sizes[d] != e && v->sizes[d] != 1)
        return GC_EUNSUPPORTED; /* ATen's broadcasting error */
      bcast |= v->sizes[d] != e;
    }
    bcast |= v->rank != erank;
    if (const_base(self, m->dtype)) {
      fill = self->body;
      skip = "self";
    }
  } else {
    const char *src_name = which == IR_SCATTER_INDEX_ADD ? "source" : "src";
    ir_tensor *self = L_tensor(L, n, "self"), *ix = L_tensor(L, n, "index"),
              *src = L_tensor(L, n, src_name);
    if (!self || !ix || !src || !L_int(L, n, "dim", &dim) || self->rank != r ||
        self->dtype != m->dtype || src->dtype != m->dtype ||
        !same_sizes(self, sz))
      return GC_EUNSUPPORTED;
    if (dim < 0)
      dim += r;
    if (dim < 0 || dim >= r)
      return GC_EUNSUPPORTED;
    if (which == IR_SCATTER_INDEX_ADD) {
      int64_t ialpha;
      gc_dtype adt;
      if (!L_scalar(L, n, "alpha", &alpha, &ialpha, &adt) ||
          !is_index(ix->dtype) || ix->rank > 1 || src->rank != r)
        return GC_EUNSUPPORTED;
      if (adt != GC_DTYPE_FLOAT64)
        alpha = (double)ialpha;
      if (L_is_float(m->dtype)) {
        /* ATen multiplies and adds with one rounding (an FMA) or two; both
         * agree when the product is exact */
        int e;
        if (alpha != 0 && fabs(frexp(alpha, &e)) != 0.5)
          return GC_EUNSUPPORTED;
        if (m->dtype == GC_DTYPE_FLOAT32 && (double)(float)alpha != alpha)
          return GC_EUNSUPPORTED;
      } else if (adt == GC_DTYPE_FLOAT64 || ialpha < INT32_MIN ||
                 ialpha > INT32_MAX) {
        return GC_EUNSUPPORTED;
      }
      for (int d = 0; d < r; d++)
        if (src->sizes[d] != (d == dim ? (ix->rank ? ix->sizes[0] : 1) : sz[d]))
          return GC_EUNSUPPORTED;
    } else {
      if (ix->dtype != GC_DTYPE_INT64 || ix->rank != r || src->rank != r)
        return GC_EUNSUPPORTED;
      for (int d = 0; d < r; d++)
        if (ix->sizes[d] > src->sizes[d] || (d != dim && ix->sizes[d] > sz[d]))
          return GC_EUNSUPPORTED;
    }
    if (const_base(self, m->dtype)) {
      fill = self->body;
      skip = "self";
    }
  }
  ir_node *call;
  int rc = L_out_node(L, n, IR_SCATTER, out_ops[which], skip, &call);
  if (rc)
    return rc;
  if (which == IR_SCATTER_INDEX_PUT) {
    /* generated code reads the index as the list's first item: the index
     * tensor, or the element offsets, computed for the output's strides */
    for (int d = 0; odims && d < r; d++)
      if (sz[d] > 1 && call->out->strides[d] != st[d])
        return GC_EUNSUPPORTED;
    for (int a = 0; a < call->nargs; a++) {
      ir_call_arg *ca = &call->args[a];
      if (!ca->views || !ca->bufs)
        continue;
      if (!strcmp(ca->name, "indices")) {
        ca->views[0] = flat_ix ? flat_ix : ca->views[kfirst];
        ca->bufs[0] = flat_ix ? flat_ix->buf : ca->bufs[kfirst];
      } else if (!strcmp(ca->name, "values") && bcast && ca->views[0]) {
        /* the values expanded to E: stride 0 where they broadcast */
        const ir_view *v0 = ca->views[0];
        ir_view *w = gc_arena_alloc(ir->a, sizeof *w);
        int64_t *ws = gc_arena_calloc(ir->a, (size_t)erank + 1, 16);
        if (!w || !ws)
          return GC_ENOMEM;
        *w = (ir_view){.buf = v0->buf,
                       .rank = erank,
                       .sizes = ws,
                       .strides = ws + erank + 1,
                       .offset = v0->offset};
        for (int d = 0; d < erank; d++) {
          int e = d - (erank - v0->rank);
          ws[d] = E[d];
          w->strides[d] =
              e >= 0 && v0->sizes[e] == E[d] && E[d] != 1 ? v0->strides[e] : 0;
        }
        ca->views[0] = w;
      }
    }
  }
  call->scatter.op = (ir_scatter_op)which;
  call->scatter.dim = (int)dim;
  call->scatter.first = first;
  call->scatter.odims = odims;
  call->scatter.padding = padding;
  call->scatter.alpha = alpha;
  call->scatter.fill = fill;
  return 0;
}
