/*
 * index.c: lowering of the operators that read their input at indices that
 * are data (embedding, index_select, gather, index.Tensor) or piecewise
 * (cat, stack), and flip, roll, repeat. All return unrealized pointwise values
 * over the output's shape.
 *
 * Indices read from data are IR_GATHER loads from a realized buffer (a
 * view of an input or an intermediate, through its strides): generated
 * code checks each index against the gathered dim's size, and an index
 * out of range makes the call raise IndexError, as eager does (none of the
 * three wraps negative indices: -1 is out of range). A gathered dim of
 * size 0 with a non-empty output is declined (eager raises; the fallback
 * does). int32 and int64 indices are read (gather requires int64, as
 * eager).
 *
 * cat selects, per element along `dim`, which input it comes from: a chain
 * of where() over the inputs, each loaded at an index clamped into its own
 * range, so unselected loads stay in bounds; more than MAX_CAT inputs are
 * concatenated in realized groups first.
 * Inputs that eager skips (1-D and empty) and inputs of size 0 along dim
 * take no part; each input is converted to the output's dtype (cat
 * promotes). Padding is pad.c; slice_backward, select_backward and the
 * scatters into views are place.c.
 */
#include <math.h>
#include <string.h>

#include "compiler/lower/pointwise.h"

#define MAX_CAT 16 /* cat inputs per where() chain (see lower_cat) */

int64_t L__numel(int rank, const int64_t *sizes) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= sizes[i];
  return n;
}

static bool index_dtype(gc_dtype d) {
  return d == GC_DTYPE_INT64 || d == GC_DTYPE_INT32;
}

/* A gather from view v: element of v at index `at` (v->rank entries) with
 * dim `dim` replaced by the data index `i`. */
static ir_expr *gather_at(lower_ctx *L, ir_view *v, gc_sym **at, int dim,
                          ir_expr *i) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_sym *off = gc_sym_const(s, v->offset);
  for (int k = 0; k < v->rank; k++)
    if (k != dim)
      off = gc_sym_add(s, off, gc_sym_scale(s, at[k], v->strides[k]));
  if (!off || !i)
    return NULL;
  return ir_gather(ir, v->buf, off, ir_cast(ir, i, GC_DTYPE_INT64),
                   v->strides[dim], v->sizes[dim], false);
}

/* Element `at` of x with dim `dim` the data index `i` (as gather_at), or
 * NULL (*rc set): from x's loop when x is computed and the output (`out`
 * elements) is no larger than x, so computing only the gathered elements
 * never computes more than realizing x would; else from x realized. */
static ir_expr *gather_from(lower_ctx *L, ir_tensor *x, int64_t out,
                            gc_sym **at, int dim, ir_expr *i, int *rc) {
  ir_expr *e = NULL;
  if (out <= L__numel(x->rank, x->sizes))
    e = L_gather_loop(L, x, at, dim, i, false); /* NULL: not a loop */
  if (!e) {
    ir_view v;
    if (!L_as_buffer(L, x, &v)) {
      *rc = GC_ENOMEM;
      return NULL;
    }
    e = gather_at(L, &v, at, dim, i);
  }
  if (!e)
    *rc = GC_ENOMEM;
  return e;
}

/* The output of n is empty: a constant. */
int L__empty_output(lower_ctx *L, const gc_node *n, L__elementwise *p) {
  return L__elementwise_finish(L, n, 0, p, ir_const_i(L_ir(L), 0, p->odt));
}

/* embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse):
 * out[..., j] = weight[indices[...], j]. */
int lower_embedding(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *w = L_tensor(L, n, "weight"), *ix = L_tensor(L, n, "indices");
  if (!w || !ix || w->rank != 2 || !index_dtype(ix->dtype) ||
      p.rank != ix->rank + 1 || p.odt != w->dtype)
    return GC_EUNSUPPORTED;
  if (L__numel(p.rank, p.sizes) == 0)
    return L__empty_output(L, n, &p);
  if (w->sizes[0] == 0)
    return GC_EUNSUPPORTED;
  gc_sym *at[2] = {NULL, p.vars[p.rank - 1]};
  ir_expr *i = L_load(L, ix, p.vars);
  ir_expr *e = gather_from(L, w, L__numel(p.rank, p.sizes), at, 0, i, &rc);
  return e ? L__elementwise_finish(L, n, 0, &p, e) : rc;
}

/* index_select(self, dim, index): out[.., j, ..] = self[.., index[j], ..]. */
int lower_index_select(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *x = L_tensor(L, n, "self"), *ix = L_tensor(L, n, "index");
  int64_t dim;
  if (!x || !ix || !L_int(L, n, "dim", &dim) || x->rank == 0 || ix->rank > 1 ||
      !index_dtype(ix->dtype) || p.rank != x->rank || p.odt != x->dtype)
    return GC_EUNSUPPORTED;
  if (dim < 0)
    dim += x->rank;
  if (dim < 0 || dim >= x->rank)
    return GC_EUNSUPPORTED;
  if (L__numel(p.rank, p.sizes) == 0)
    return L__empty_output(L, n, &p);
  if (x->sizes[dim] == 0)
    return GC_EUNSUPPORTED;
  ir_expr *i = L_load(L, ix, ix->rank ? &p.vars[dim] : NULL);
  ir_expr *e =
      gather_from(L, x, L__numel(p.rank, p.sizes), p.vars, (int)dim, i, &rc);
  return e ? L__elementwise_finish(L, n, 0, &p, e) : rc;
}

/* gather(self, dim, index, sparse_grad): out[i] = self[i with dim replaced
 * by index[i]]; out has index's shape. */
int lower_gather(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *x = L_tensor(L, n, "self"), *ix = L_tensor(L, n, "index");
  int64_t dim;
  if (!x || !ix || !L_int(L, n, "dim", &dim) || ix->dtype != GC_DTYPE_INT64 ||
      p.odt != x->dtype)
    return GC_EUNSUPPORTED;
  int rank = x->rank ? x->rank : 1;
  if (dim < 0)
    dim += rank;
  if (dim < 0 || dim >= rank || x->rank == 0 || ix->rank != x->rank ||
      p.rank != ix->rank)
    return GC_EUNSUPPORTED; /* 0-D gathers fall back */
  for (int k = 0; k < x->rank; k++)
    if (k != dim && ix->sizes[k] > x->sizes[k])
      return GC_EUNSUPPORTED; /* eager raises */
  if (L__numel(p.rank, p.sizes) == 0)
    return L__empty_output(L, n, &p);
  if (x->sizes[dim] == 0)
    return GC_EUNSUPPORTED;
  ir_expr *i = L_load(L, ix, p.vars);
  ir_expr *e =
      gather_from(L, x, L__numel(p.rank, p.sizes), p.vars, (int)dim, i, &rc);
  return e ? L__elementwise_finish(L, n, 0, &p, e) : rc;
}

/* `e` clamped to [0, hi]. */
gc_sym *L__clamp_index(gc_symctx *s, gc_sym *e, int64_t hi) {
  if (e->lo >= 0 && e->hi <= hi)
    return e;
  return gc_sym_max(s, gc_sym_min(s, e, gc_sym_const(s, hi)),
                    gc_sym_const(s, 0));
}

/* The where() chain selecting, at index `vars` of a tensor of `rank`
 * dims, the element of parts[0..np) (concatenated along dim, parts[k]
 * starting at start[k]; start[np] is the total) in dtype dt. */
static ir_expr *cat_chain(lower_ctx *L, ir_tensor **parts, const int64_t *start,
                          int np, int rank, int dim, gc_sym **vars,
                          gc_dtype dt) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_dtype i64 = GC_DTYPE_INT64;
  ir_expr *j = ir_index(ir, vars[dim], i64);
  ir_expr *e = NULL;
  gc_sym *at[IR_MAX_RANK];
  memcpy(at, vars, (size_t)rank * sizeof *at);
  for (int k = np - 1; k >= 0; k--) {
    at[dim] = L__clamp_index(s, gc_sym_addc(s, vars[dim], -start[k]),
                             parts[k]->sizes[dim] - 1);
    ir_expr *x = ir_cast(ir, L_load(L, parts[k], at), dt);
    e = !e ? x
           : ir_op3(
                 ir, IR_WHERE, dt,
                 ir_op2(ir, IR_LT, i64, j, ir_const_i(ir, start[k + 1], i64)),
                 x, e);
  }
  return e;
}

/* cat(tensors, dim). More than MAX_CAT inputs are concatenated in groups
 * of MAX_CAT first (each group realized), so no element evaluates more
 * than MAX_CAT loads. */
/* cat's and stack's arguments: the output (p), the inputs (*ts, *nt) and
 * dim, made non-negative against the output's rank. */
static int cat_args(lower_ctx *L, const gc_node *n, L__elementwise *p,
                    ir_tensor ***ts, int *nt, int64_t *dim) {
  int rc = L__elementwise_begin(L, n, 0, p);
  if (rc)
    return rc;
  *nt = L_tensors(L, n, "tensors", ts);
  if (*nt < 1 || *nt > MAX_CAT * MAX_CAT || !L_int(L, n, "dim", dim) ||
      p->rank == 0)
    return GC_EUNSUPPORTED;
  if (*dim < 0)
    *dim += p->rank;
  return *dim < 0 || *dim >= p->rank ? GC_EUNSUPPORTED : 0;
}

int lower_cat(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  L__elementwise p;
  ir_tensor **ts;
  int nt;
  int64_t dim;
  int rc = cat_args(L, n, &p, &ts, &nt, &dim);
  if (rc)
    return rc;
  bool sym = L_symbolic(L);
  if (sym)
    for (int k = 0; k < nt; k++)
      if (!ts[k] || !ts[k]->ssizes)
        return GC_EUNSUPPORTED;
  /* the inputs that contribute, and where each starts along dim */
  ir_tensor **part = gc_arena_calloc(ir->a, (size_t)nt + 1, sizeof *part);
  int64_t *start = gc_arena_calloc(ir->a, (size_t)nt + 1, sizeof *start);
  if (!part || !start)
    return GC_ENOMEM;
  int np = 0;
  int64_t off = 0;
  for (int k = 0; k < nt; k++) {
    ir_tensor *t = ts[k];
    if (!t)
      return GC_EUNSUPPORTED;
    if (t->rank == 1 && t->sizes[0] == 0 && p.rank != 1)
      continue; /* eager skips legacy empty tensors */
    if (t->rank != p.rank)
      return GC_EUNSUPPORTED;
    /* with size symbols: the other dims equal as expressions (hash-consed:
     * pointers), and the sizes along dim constants, so every part starts
     * at a constant (a symbolic start falls back) */
    for (int i = 0; i < p.rank; i++)
      if (i != dim &&
          (sym ? t->ssizes[i] != p.ssizes[i] : t->sizes[i] != p.sizes[i]))
        return GC_EUNSUPPORTED;
    if (t->sizes[dim] == IR_SYMBOLIC)
      return GC_EUNSUPPORTED;
    if (t->sizes[dim] == 0)
      continue;
    part[np] = t;
    start[np++] = off;
    off += t->sizes[dim];
  }
  if (off != p.sizes[dim])
    return GC_EUNSUPPORTED;
  if ((!sym && L__numel(p.rank, p.sizes) == 0) || np == 0)
    return L__empty_output(L, n, &p);
  start[np] = off;
  if (np > MAX_CAT && sym)
    return GC_EUNSUPPORTED; /* the groups are made with constant sizes */
  if (np > MAX_CAT) {       /* groups of MAX_CAT, each a realized buffer */
    int ng = 0;
    for (int g = 0; g < np; g += MAX_CAT) {
      int cnt = np - g < MAX_CAT ? np - g : MAX_CAT;
      if (cnt == 1) { /* a group of one is that input */
        part[ng] = part[g];
        start[ng++] = start[g];
        continue;
      }
      int64_t gsz[IR_MAX_RANK], gst[MAX_CAT + 1];
      memcpy(gsz, p.sizes, (size_t)p.rank * sizeof *gsz);
      gsz[dim] = start[g + cnt] - start[g];
      for (int k = 0; k <= cnt; k++)
        gst[k] = start[g + k] - start[g];
      gc_sym **gv = L_vars(L, p.rank, gsz);
      if (!gv)
        return GC_ENOMEM;
      ir_tensor *gt = L_pointwise(
          L, n, p.odt, p.rank, gsz, gv,
          cat_chain(L, &part[g], gst, cnt, p.rank, (int)dim, gv, p.odt));
      if (!gt || !L_realize(L, gt, L_out_meta(n, 0)))
        return GC_ENOMEM;
      part[ng] = gt;
      start[ng++] = start[g];
    }
    start[ng] = off;
    np = ng;
  }
  return L__elementwise_finish(
      L, n, 0, &p,
      cat_chain(L, part, start, np, p.rank, (int)dim, p.vars, p.odt));
}

/* The where() chain selecting, at index `vars` of a tensor of `rank` dims,
 * the element of ts[vars[dim]] (each of rank - 1 dims, stacked along dim)
 * in dtype dt. */
static ir_expr *stack_chain(lower_ctx *L, ir_tensor **ts, int cnt, int rank,
                            int dim, gc_sym **vars, gc_dtype dt) {
  ir_graph *ir = L_ir(L);
  gc_dtype i64 = GC_DTYPE_INT64;
  gc_sym *at[IR_MAX_RANK];
  for (int i = 0, k = 0; i < rank; i++)
    if (i != dim)
      at[k++] = vars[i];
  ir_expr *j = ir_index(ir, vars[dim], i64), *e = NULL;
  for (int k = cnt - 1; k >= 0; k--) {
    ir_expr *x = ir_cast(ir, L_load(L, ts[k], at), dt);
    e = !e ? x
           : ir_op3(ir, IR_WHERE, dt,
                    ir_op2(ir, IR_LT, i64, j, ir_const_i(ir, k + 1, i64)), x,
                    e);
  }
  return e;
}

/* stack(tensors, dim): the inputs, all of one shape, side by side along a
 * new dim: out[.., k, ..] = tensors[k][.., ..]. More than MAX_CAT inputs
 * are stacked in groups of MAX_CAT first (each realized) and the groups
 * concatenated, so no element evaluates more than MAX_CAT loads. */
int lower_stack(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  L__elementwise p;
  ir_tensor **ts;
  int nt;
  int64_t dim; /* against the output's rank: the inputs' plus one */
  int rc = cat_args(L, n, &p, &ts, &nt, &dim);
  if (rc)
    return rc;
  if (p.sizes[dim] != nt)
    return GC_EUNSUPPORTED;
  for (int k = 0; k < nt; k++) {
    if (!ts[k] || ts[k]->rank != p.rank - 1)
      return GC_EUNSUPPORTED;
    for (int i = 0, j = 0; i < p.rank; i++)
      if (i != dim && ts[k]->sizes[j++] != p.sizes[i])
        return GC_EUNSUPPORTED;
  }
  if (L__numel(p.rank, p.sizes) == 0)
    return L__empty_output(L, n, &p);
  if (nt <= MAX_CAT)
    return L__elementwise_finish(
        L, n, 0, &p, stack_chain(L, ts, nt, p.rank, (int)dim, p.vars, p.odt));
  ir_tensor **part = gc_arena_calloc(ir->a, MAX_CAT + 1, sizeof *part);
  int64_t start[MAX_CAT + 1];
  if (!part)
    return GC_ENOMEM;
  int ng = 0;
  for (int g = 0; g < nt; g += MAX_CAT) {
    int cnt = nt - g < MAX_CAT ? nt - g : MAX_CAT;
    int64_t gsz[IR_MAX_RANK];
    memcpy(gsz, p.sizes, (size_t)p.rank * sizeof *gsz);
    gsz[dim] = cnt;
    gc_sym **gv = L_vars(L, p.rank, gsz);
    if (!gv)
      return GC_ENOMEM;
    ir_tensor *gt =
        L_pointwise(L, n, p.odt, p.rank, gsz, gv,
                    stack_chain(L, &ts[g], cnt, p.rank, (int)dim, gv, p.odt));
    /* a group of one is one load: left inline */
    if (!gt || (cnt > 1 && !L_realize(L, gt, L_out_meta(n, 0))))
      return GC_ENOMEM;
    part[ng] = gt;
    start[ng++] = g;
  }
  start[ng] = nt;
  return L__elementwise_finish(
      L, n, 0, &p,
      cat_chain(L, part, start, ng, p.rank, (int)dim, p.vars, p.odt));
}

/* index.Tensor with several index tensors (pos[0..m) the indexed dims):
 * they broadcast together to B; the output is self's other dims with B in
 * place of the indexed ones when those are adjacent, else B first (NumPy's
 * rule). Each index is checked against its dim's size (and wrapped when
 * negative) by a gather from an iota buffer, the element read by one gather
 * at the sum of the checked indices times the dims' strides. */
static int index_several(lower_ctx *L, const gc_node *n, L__elementwise *p,
                         ir_tensor *x, ir_tensor **ix, const int *pos, int m) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_dtype i64 = GC_DTYPE_INT64;
  bool adjacent = pos[m - 1] - pos[0] == m - 1;
  int br = p->rank - (x->rank - m); /* B's rank */
  if (br < 0 || br > p->rank)
    return GC_EUNSUPPORTED;
  int b0 = adjacent ? pos[0] : 0; /* B's first dim in the output */
  bool indexed[IR_MAX_RANK] = {false};
  for (int k = 0; k < m; k++) {
    indexed[pos[k]] = true;
    ir_tensor *t = ix[pos[k]];
    if (t->rank > br)
      return GC_EUNSUPPORTED;
    for (int j = 0; j < t->rank; j++)
      if (t->sizes[j] != 1 && t->sizes[j] != p->sizes[b0 + br - t->rank + j])
        return GC_EUNSUPPORTED;
  }
  int outdim[IR_MAX_RANK]; /* the output dim of each dim not indexed */
  for (int d = 0, u = 0; d < x->rank; d++) {
    if (indexed[d])
      continue;
    outdim[d] = adjacent ? (d < pos[0] ? d : d - m + br) : br + u;
    u++;
    if (p->sizes[outdim[d]] != x->sizes[d])
      return GC_EUNSUPPORTED;
  }
  for (int d = 0; d < x->rank; d++)
    if (indexed[d] && x->sizes[d] == 0 && L__numel(p->rank, p->sizes) != 0)
      return GC_EUNSUPPORTED; /* eager raises */
  if (L__numel(p->rank, p->sizes) == 0)
    return L__empty_output(L, n, p);
  ir_view v;
  if (!L_as_buffer(L, x, &v))
    return GC_ENOMEM;
  gc_sym *base = gc_sym_const(s, v.offset);
  ir_expr *flat = NULL;
  int64_t span = 1;
  for (int d = 0; d < x->rank; d++) {
    if (!indexed[d]) {
      base = gc_sym_add(s, base,
                        gc_sym_scale(s, p->vars[outdim[d]], v.strides[d]));
      continue;
    }
    if (v.strides[d] < 0)
      return GC_EUNSUPPORTED;
    ir_expr *g = L_checked_index(L, n, L_load_bcast(L, ix[d], br, &p->vars[b0]),
                                 x->sizes[d]);
    if (!g)
      return GC_ENOMEM;
    if (v.strides[d] != 1)
      g = ir_op2(ir, IR_MUL, i64, g, ir_const_i(ir, v.strides[d], i64));
    flat = flat ? ir_op2(ir, IR_ADD, i64, flat, g) : g;
    span += (x->sizes[d] - 1) * v.strides[d];
  }
  if (!base || !flat)
    return GC_ENOMEM;
  return L__elementwise_finish(
      L, n, 0, p, ir_gather(ir, v.buf, base, flat, 1, span, false));
}

/* index.Tensor(self, indices): integer index tensors (any shapes that
 * broadcast) at some dims, the others None. One index tensor at dim d:
 * out = self[:, ..., idx, ...] with the index's dims in place of dim d, a
 * gather along d; several: index_several. Negative indices count from the
 * end (advanced indexing wraps, unlike index_select). Boolean masks fall
 * back. */
int lower_index_tensor(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *x = L_tensor(L, n, "self");
  ir_tensor **ix;
  int ni = L_tensors(L, n, "indices", &ix);
  if (!x || ni < 1 || ni > x->rank || p.odt != x->dtype)
    return GC_EUNSUPPORTED;
  int d = -1, pos[IR_MAX_RANK], m = 0;
  for (int k = 0; k < ni; k++)
    if (ix[k]) {
      if (!index_dtype(ix[k]->dtype))
        return GC_EUNSUPPORTED;
      d = pos[m++] = k;
    }
  if (m > 1)
    return index_several(L, n, &p, x, ix, pos, m);
  if (d < 0)
    return GC_EUNSUPPORTED;
  ir_tensor *t = ix[d];
  if (p.rank != x->rank - 1 + t->rank)
    return GC_EUNSUPPORTED;
  for (int k = 0; k < x->rank; k++) {
    int o = k < d ? k : k + t->rank - 1;
    if (k != d && p.sizes[o] != x->sizes[k])
      return GC_EUNSUPPORTED;
  }
  for (int k = 0; k < t->rank; k++)
    if (p.sizes[d + k] != t->sizes[k])
      return GC_EUNSUPPORTED;
  if (L__numel(p.rank, p.sizes) == 0)
    return L__empty_output(L, n, &p);
  if (x->sizes[d] == 0)
    return GC_EUNSUPPORTED;
  ir_view v;
  if (!L_as_buffer(L, x, &v))
    return GC_ENOMEM;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_sym *off = gc_sym_const(s, v.offset);
  for (int k = 0; k < x->rank; k++)
    if (k != d)
      off = gc_sym_add(
          s, off,
          gc_sym_scale(s, p.vars[k < d ? k : k + t->rank - 1], v.strides[k]));
  ir_expr *i = ir_cast(ir, L_load(L, t, &p.vars[d]), GC_DTYPE_INT64);
  if (!off || !i)
    return GC_ENOMEM;
  return L__elementwise_finish(
      L, n, 0, &p,
      ir_gather(ir, v.buf, off, i, v.strides[d], v.sizes[d], true));
}

/* flip(self, dims): a load through a view with those dims' strides negated
 * (a copy, as eager's: never a view of self). */
int lower_flip(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  ir_tensor *x = L_tensor(L, n, "self");
  const int64_t *dims;
  int nd;
  if (!x || x->rank != p.rank || !L_ints(L, n, "dims", &dims, &nd))
    return GC_EUNSUPPORTED;
  ir_view v;
  if (!L_as_buffer(L, x, &v))
    return GC_ENOMEM;
  int64_t strides[IR_MAX_RANK];
  bool flipped[IR_MAX_RANK] = {false};
  int64_t offset = v.offset;
  memcpy(strides, v.strides, (size_t)v.rank * sizeof *strides);
  for (int i = 0; i < nd; i++) {
    int64_t d = dims[i] < 0 ? dims[i] + v.rank : dims[i];
    if (d < 0 || d >= v.rank || flipped[d])
      return GC_EUNSUPPORTED; /* eager raises; so does the fallback */
    flipped[d] = true;
    if (v.sizes[d] > 0)
      offset += (v.sizes[d] - 1) * strides[d];
    strides[d] = -strides[d];
  }
  ir_tensor *t = ir_tensor_strided(ir, v.buf, v.rank, v.sizes, strides, offset);
  if (!t)
    return GC_ENOMEM;
  return L__elementwise_finish(
      L, n, 0, &p, ir_cast(ir, ir_tensor_load(ir, t, p.vars), p.odt));
}

/* roll(self, shifts, dims): out[i] = self[(i - shift) mod size] along each
 * rolled dim; with no dims, along the flattened tensor (and the shape is
 * kept). A copy, as eager's. */
int lower_roll(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  ir_tensor *x = L_tensor(L, n, "self");
  const int64_t *shifts, *dims;
  int ns, nd;
  if (!x || x->rank != p.rank || p.odt != x->dtype ||
      !L_ints(L, n, "shifts", &shifts, &ns) ||
      !L_ints(L, n, "dims", &dims, &nd))
    return GC_EUNSUPPORTED;
  if (L__numel(p.rank, p.sizes) == 0)
    return L__empty_output(L, n, &p);
  gc_sym *xi[IR_MAX_RANK];
  for (int k = 0; k < p.rank; k++)
    xi[k] = p.vars[k];
  if (nd == 0) { /* the flattened tensor */
    if (ns != 1)
      return GC_EUNSUPPORTED;
    int64_t total = L__numel(p.rank, p.sizes), st[IR_MAX_RANK], acc = 1;
    gc_sym *flat = gc_sym_const(s, 0);
    for (int k = p.rank - 1; k >= 0; k--) {
      st[k] = acc;
      flat = gc_sym_add(s, flat, gc_sym_scale(s, p.vars[k], acc));
      acc *= p.sizes[k];
    }
    int64_t sh = ((shifts[0] % total) + total) % total;
    gc_sym *src = gc_sym_mod(s, gc_sym_addc(s, flat, total - sh), total);
    for (int k = 0; k < p.rank; k++)
      xi[k] = gc_sym_mod(s, gc_sym_floordiv(s, src, st[k]), p.sizes[k]);
  } else {
    if (ns != nd)
      return GC_EUNSUPPORTED; /* eager raises */
    for (int i = 0; i < nd; i++) {
      int64_t d = dims[i] < 0 ? dims[i] + p.rank : dims[i];
      if (d < 0 || d >= p.rank)
        return GC_EUNSUPPORTED;
      int64_t size = p.sizes[d];
      int64_t sh = ((shifts[i] % size) + size) % size;
      xi[d] = gc_sym_mod(s, gc_sym_addc(s, xi[d], size - sh), size);
    }
  }
  for (int k = 0; k < p.rank; k++)
    if (!xi[k])
      return GC_ENOMEM;
  return L__elementwise_finish(L, n, 0, &p, L_load(L, x, xi));
}

/* repeat(self, repeats): self tiled; output dim k of size
 * repeats[k] * (self's size aligned to the right, 1 where self has none)
 * reads self at the output index modulo self's size. */
int lower_repeat(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  ir_tensor *x = L_tensor(L, n, "self");
  const int64_t *reps;
  int nr;
  if (!x || p.odt != x->dtype || !L_ints(L, n, "repeats", &reps, &nr) ||
      nr != p.rank || nr < x->rank)
    return GC_EUNSUPPORTED;
  int lead = p.rank - x->rank;
  for (int k = 0; k < p.rank; k++) {
    int64_t xs = k < lead ? 1 : x->sizes[k - lead];
    if (reps[k] < 0 || p.sizes[k] != xs * reps[k])
      return GC_EUNSUPPORTED;
  }
  if (L__numel(p.rank, p.sizes) == 0)
    return L__empty_output(L, n, &p);
  gc_sym *xi[IR_MAX_RANK];
  for (int j = 0; j < x->rank; j++)
    if (!(xi[j] = gc_sym_mod(s, p.vars[j + lead], x->sizes[j])))
      return GC_ENOMEM;
  return L__elementwise_finish(L, n, 0, &p, L_load(L, x, xi));
}
