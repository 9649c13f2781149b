/*
 * reduce.c: lowering rules for reductions and the normalizations built on
 * them (softmax, log_softmax, layer_norm).
 *
 * A reduction is always realized: L_reduce appends a node writing an arena
 * buffer whose shape is the output's (size-1 dimensions kept where the
 * reduced dimensions were, when keepdim). What follows a reduction (the
 * division of a mean, the normalization of softmax) is pointwise and stays
 * unrealized, so the scheduler can fuse it into the reduction's kernel.
 *
 * Accumulation: sums of float32 accumulate in double within the generated
 * kernel and round once (closer to ATen's cascade summation than a float
 * accumulator); var/std/layer_norm use Welford's algorithm (blocked, with
 * Chan's combination), as ATen does.
 */
#include <math.h>
#include <string.h>

#include "compiler/lower/lower.h"

/* A reduction over some dims of x: output shape (from the metadata),
 * variables for it and for the reduced dims, and the input index. */
typedef struct red {
  ir_tensor *x;
  int rank; /* of the output */
  int64_t sizes[IR_MAX_RANK];
  gc_sym **vars;
  int rrank;
  int64_t rsizes[IR_MAX_RANK];
  gc_sym **rvars;
  gc_sym *xidx[IR_MAX_RANK]; /* x's index in vars and rvars */
  int64_t count;             /* elements reduced per output element
                                (IR_SYMBOLIC: see scount) */
  gc_sym *ss[IR_MAX_RANK], *srs[IR_MAX_RANK]; /* sizes, rsizes */
  gc_sym *scount;
} red;

/* x's sizes as expressions */
static gc_sym **xsizes(lower_ctx *L, ir_tensor *x) {
  return x->ssizes ? x->ssizes : ir_syms_of(L_ir(L), x->rank, x->sizes);
}

/* The number reduced per output element as a value of dt: a constant, or
 * the symbolic count converted at run time (in double first, as the
 * constant is). */
static ir_expr *count_of(lower_ctx *L, const red *r, gc_dtype dt) {
  ir_graph *ir = L_ir(L);
  if (r->count != IR_SYMBOLIC)
    return ir_const_f(ir, (double)r->count, dt);
  return ir_cast(
      ir,
      ir_cast(ir, ir_index(ir, r->scount, GC_DTYPE_INT64), GC_DTYPE_FLOAT64),
      dt);
}

/* A reduction that eager refuses over no element (max, min, softmax...):
 * with a symbolic count, the code assumes at least one (a guard). False
 * when it is a constant 0 (or out of memory). */
static bool nonempty(lower_ctx *L, const gc_node *n, const red *r) {
  if (r->count != IR_SYMBOLIC)
    return r->count != 0;
  return L_guard(L, n, IR_GUARD_LE, gc_sym_const(&L_ir(L)->sym, 1), r->scount,
                 IR_GUARD_RANGE, "a reduction over at least one element");
}

static int64_t norm_dim(int64_t d, int rank) {
  return d < 0 ? d + (rank > 0 ? rank : 1) : d;
}

/* Sets up reducing `x` over the dims in `dims` (all when ndims == 0 and
 * all_if_empty), output shape from metadata output `k`. */
static int setup_meta(lower_ctx *L, const gc_tensor_meta *m, ir_tensor *x,
                      const int64_t *dims, int ndims, bool all_if_empty,
                      red *r);

static int setup(lower_ctx *L, const gc_node *n, int k, ir_tensor *x,
                 const int64_t *dims, int ndims, bool all_if_empty, red *r) {
  return setup_meta(L, L_out_meta(n, k), x, dims, ndims, all_if_empty, r);
}

/* The same, the output shape from `m`. */
static int setup_meta(lower_ctx *L, const gc_tensor_meta *m, ir_tensor *x,
                      const int64_t *dims, int ndims, bool all_if_empty,
                      red *r) {
  memset(r, 0, sizeof *r);
  if (!x || !m || m->rank > IR_MAX_RANK || !L_sym_sizes(L, m, r->ss))
    return GC_EUNSUPPORTED;
  ir_ints_of(m->rank, r->ss, r->sizes);
  gc_sym **xs = xsizes(L, x);
  gc_symctx *s = &L_ir(L)->sym;
  if (!xs)
    return GC_ENOMEM;
  r->x = x;
  r->rank = m->rank;
  bool reduced[IR_MAX_RANK] = {false};
  if (ndims == 0 && all_if_empty) {
    for (int i = 0; i < x->rank; i++)
      reduced[i] = true;
  }
  for (int i = 0; i < ndims; i++) {
    int64_t d = norm_dim(dims[i], x->rank);
    if (x->rank == 0 && (d == 0 || d == -1))
      continue; /* a 0-D tensor's only "dim" */
    if (d < 0 || d >= x->rank || reduced[d])
      return GC_EUNSUPPORTED;
    reduced[d] = true;
  }
  bool keepdim = r->rank == x->rank;
  r->scount = gc_sym_const(s, 1);
  for (int i = 0; i < x->rank; i++)
    if (reduced[i]) {
      r->srs[r->rrank++] = xs[i];
      r->scount = gc_sym_mul(s, r->scount, xs[i]);
    }
  if (!r->scount)
    return GC_ENOMEM;
  ir_ints_of(r->rrank, r->srs, r->rsizes);
  if (!gc_sym_const_of(r->scount, &r->count))
    r->count = IR_SYMBOLIC;
  if (!keepdim && r->rank != x->rank - r->rrank)
    return GC_EUNSUPPORTED;
  r->vars = L_svars(L, r->rank, r->ss);
  r->rvars = L_svars(L, r->rrank, r->srs);
  if (!r->vars || (r->rrank && !r->rvars))
    return GC_ENOMEM;
  for (int i = 0, o = 0, q = 0; i < x->rank; i++) {
    if (reduced[i]) {
      r->xidx[i] = r->rvars[q++];
      if (keepdim)
        o++;
    } else {
      if (o >= r->rank || r->ss[o] != xs[i])
        return GC_EUNSUPPORTED;
      r->xidx[i] = r->vars[o++];
    }
  }
  return 0;
}

/* L_sreduce over r's spaces. */
static ir_buf *reduce_r(lower_ctx *L, const gc_node *n, ir_reduction op,
                        gc_dtype dt, red *r, ir_expr *body, ir_buf **out2,
                        ir_buf **out3) {
  return L_sreduce(L, n, op, dt, r->rank, r->ss, r->vars, r->rrank, r->srs,
                   r->rvars, body, out2, out3);
}

static ir_expr *load_x(lower_ctx *L, red *r) {
  return L_load(L, r->x, r->xidx);
}

/* dims from an int[] argument (sum.dim_IntList's `dim`, amax's `dim`...);
 * an absent or None argument means all. */
static bool get_dims(lower_ctx *L, const gc_node *n, const char *name,
                     const int64_t **dims, int *nd) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a || a->kind == GC_ARG_NONE) {
    *nd = 0;
    return true;
  }
  return L_ints(L, n, name, dims, nd);
}

/* sum(self, dim, keepdim, dtype), sum(self, dtype), mean (param 1),
 * prod (param 2: prod.dim_int / prod), nansum (param 3: NaN adds 0),
 * count_nonzero (param 4: the int64 count of x != 0). The accumulation dtype is
 * the output's. */
static int sum_dims(lower_ctx *L, const gc_node *n, int which,
                    const int64_t *dims, int nd);

int lower_sum(lower_ctx *L, const gc_node *n, int which) {
  const int64_t *dims = NULL;
  int nd = 0;
  if (!get_dims(L, n, "dim", &dims, &nd))
    return GC_EUNSUPPORTED;
  return sum_dims(L, n, which, dims, nd);
}

/* adaptive_avg_pool2d(self, output_size) (torch.export's undecomposed
 * form): ATen's composite takes a 1x1 output as self.mean((-1, -2),
 * keepdim=True), which is what run_decompositions() records, so it is that
 * mean here too (bit for bit the decomposed program's); any other size is
 * _adaptive_avg_pool2d. */
int lower_adaptive_avg_pool2d_composite(lower_ctx *L, const gc_node *n,
                                        int unused) {
  (void)unused;
  ir_tensor *x = L_tensor(L, n, "self");
  const gc_tensor_meta *m = L_out_meta(n, 0);
  if (!x || !m || (x->rank != 3 && x->rank != 4) || m->rank != x->rank)
    return GC_EUNSUPPORTED;
  const gc_symint *h = &m->sizes[m->rank - 2], *w = &m->sizes[m->rank - 1];
  if (h->expr || w->expr || h->v != 1 || w->v != 1)
    return lower_adaptive_avg_pool2d(L, n, 0);
  const int64_t dims[2] = {x->rank - 2, x->rank - 1};
  return sum_dims(L, n, 1, dims, 2);
}

static int sum_dims(lower_ctx *L, const gc_node *n, int which,
                    const int64_t *dims, int nd) {
  ir_graph *ir = L_ir(L);
  red r;
  int rc = setup(L, n, 0, L_tensor(L, n, "self"), dims, nd, true, &r);
  if (rc)
    return rc;
  const gc_tensor_meta *m = L_out_meta(n, 0);
  gc_dtype od = m->dtype, dt = L_opmath(od); /* half: float32, rounded once */
  if (which == 1 && !L_is_float(dt))
    return GC_EUNSUPPORTED;
  if (dt == GC_DTYPE_BOOL || (which == 4 && dt != GC_DTYPE_INT64) ||
      (which == 2 && od != dt))
    return GC_EUNSUPPORTED; /* ATen's half prod rounds every product */
  ir_expr *body = ir_cast(ir, load_x(L, &r), dt);
  if (which == 3 && L_is_float(dt)) /* nansum: NaN counts 0 */
    body = ir_op3(ir, IR_WHERE, dt, ir_op1(ir, IR_ISNAN, dt, body),
                  ir_const_f(ir, 0, dt), body);
  if (which == 4) /* count_nonzero: int64 sum of x != 0 */
    body =
        ir_cast(ir,
                ir_op2(ir, IR_NE, r.x->dtype, load_x(L, &r),
                       L_is_float(r.x->dtype) ? ir_const_f(ir, 0, r.x->dtype)
                                              : ir_const_i(ir, 0, r.x->dtype)),
                dt);
  ir_buf *b = reduce_r(L, n, which == 2 ? IR_RED_PROD : IR_RED_SUM, dt, &r,
                       body, NULL, NULL);
  if (!b)
    return GC_ENOMEM;
  ir_tensor *t = ir_tensor_of_buf(ir, b);
  if (which == 1) { /* mean: the sum divided by the count, pointwise */
    gc_sym **v = L_svars(L, r.rank, r.ss);
    if (!v)
      return GC_ENOMEM;
    ir_expr *s = L_load(L, t, v);
    t = L_spointwise(L, n, dt, r.rank, r.ss, v,
                     ir_op2(ir, IR_DIV, dt, s, count_of(L, &r, dt)));
  }
  return L_set(L, n, 0, L_to_dtype(L, n, t, od));
}

/* amax/amin(self, dim, keepdim) (param IR_RED_MAX/MIN); NaN propagates. */
int lower_amax(lower_ctx *L, const gc_node *n, int which) {
  const int64_t *dims = NULL;
  int nd = 0;
  if (!get_dims(L, n, "dim", &dims, &nd))
    return GC_EUNSUPPORTED;
  red r;
  ir_tensor *x;
  int rc = L_tensor_once(L, n, "self", &x);
  if (!rc)
    rc = setup(L, n, 0, x, dims, nd, true, &r);
  if (rc)
    return rc;
  if (r.x->dtype == GC_DTYPE_BOOL || !nonempty(L, n, &r))
    return GC_EUNSUPPORTED; /* eager raises on an empty max */
  ir_buf *b = reduce_r(L, n, (ir_reduction)which, r.x->dtype, &r, load_x(L, &r),
                       NULL, NULL);
  return b ? L_set(L, n, 0, ir_tensor_of_buf(L_ir(L), b)) : GC_ENOMEM;
}

/* max.dim / min.dim (values, indices) and argmax/argmin (param: which
 * reduction; for the .dim forms output 0 is the values). */
int lower_argmax(lower_ctx *L, const gc_node *n, int which) {
  ir_graph *ir = L_ir(L);
  bool pair = n->noutputs == 2;
  int64_t dim = 0;
  bool all = false;
  const gc_arg *da = L_arg(L, n, "dim");
  if (!da || da->kind == GC_ARG_NONE)
    all = true;
  else if (!L_int(L, n, "dim", &dim))
    return GC_EUNSUPPORTED;
  red r;
  int idx_out = pair ? 1 : 0;
  ir_tensor *x;
  int rc = L_tensor_once(L, n, "self", &x);
  if (!rc)
    rc = setup(L, n, idx_out, x, all ? NULL : &dim, all ? 0 : 1, all, &r);
  if (rc)
    return rc;
  if (r.x->dtype == GC_DTYPE_BOOL || !nonempty(L, n, &r))
    return GC_EUNSUPPORTED;
  ir_buf *values = NULL;
  ir_buf *b = reduce_r(L, n, (ir_reduction)which, r.x->dtype, &r, load_x(L, &r),
                       &values, NULL);
  if (!b || !values)
    return GC_ENOMEM;
  if (pair) {
    rc = L_set(L, n, 0, ir_tensor_of_buf(ir, values));
    return rc ? rc : L_set(L, n, 1, ir_tensor_of_buf(ir, b));
  }
  return L_set(L, n, 0, ir_tensor_of_buf(ir, b));
}

/* any/all(self[, dim, keepdim]) (param IR_RED_ANY/ALL). */
int lower_any(lower_ctx *L, const gc_node *n, int which) {
  ir_graph *ir = L_ir(L);
  int64_t dim;
  bool have = L_int(L, n, "dim", &dim);
  red r;
  int rc = setup(L, n, 0, L_tensor(L, n, "self"), have ? &dim : NULL,
                 have ? 1 : 0, !have, &r);
  if (rc)
    return rc;
  const gc_tensor_meta *m = L_out_meta(n, 0);
  if (m->dtype != GC_DTYPE_BOOL)
    return GC_EUNSUPPORTED; /* uint8 inputs keep uint8 in torch 1.13 */
  ir_buf *b = reduce_r(L, n, (ir_reduction)which, GC_DTYPE_BOOL, &r,
                       ir_cast(ir, load_x(L, &r), GC_DTYPE_BOOL), NULL, NULL);
  return b ? L_set(L, n, 0, ir_tensor_of_buf(ir, b)) : GC_ENOMEM;
}

/* The Welford reduction of x over r; returns mean and m2 tensors. */
static int welford(lower_ctx *L, const gc_node *n, red *r, gc_dtype dt,
                   ir_tensor **mean, ir_tensor **m2) {
  ir_graph *ir = L_ir(L);
  ir_buf *b2 = NULL, *b3 = NULL;
  ir_buf *b = reduce_r(L, n, IR_RED_WELFORD, dt, r,
                       ir_cast(ir, load_x(L, r), dt), &b2, &b3);
  if (!b || !b2)
    return GC_ENOMEM;
  *mean = ir_tensor_of_buf(ir, b);
  *m2 = ir_tensor_of_buf(ir, b2);
  return *mean && *m2 ? 0 : GC_ENOMEM;
}

/* var/std(self, dim, correction, keepdim) and var_mean/std_mean (outputs
 * (var, mean)); param 0 var, 1 std. */
int lower_var(lower_ctx *L, const gc_node *n, int is_std) {
  ir_graph *ir = L_ir(L);
  const int64_t *dims = NULL;
  int nd = 0;
  if (!get_dims(L, n, "dim", &dims, &nd))
    return GC_EUNSUPPORTED;
  red r;
  int rc = setup(L, n, 0, L_tensor(L, n, "self"), dims, nd, true, &r);
  if (rc)
    return rc;
  gc_dtype od = L_out_meta(n, 0)->dtype, dt = L_opmath(od);
  if (!L_is_float(dt) || (n->noutputs == 2 && L_out_meta(n, 1)->dtype != od))
    return GC_EUNSUPPORTED;
  double corr = 1;
  const gc_arg *c = L_arg(L, n, "correction");
  if (c && c->kind != GC_ARG_NONE && !L_float(L, n, "correction", &corr))
    return GC_EUNSUPPORTED;
  bool unbiased;
  if (L_bool(L, n, "unbiased", &unbiased))
    corr = unbiased ? 1 : 0;
  ir_tensor *mean, *m2;
  if ((rc = welford(L, n, &r, dt, &mean, &m2)))
    return rc;
  gc_sym **v = L_svars(L, r.rank, r.ss);
  if (!v)
    return GC_ENOMEM;
  /* ATen: m2 / max(0, N - correction); N - correction <= 0 gives inf/nan */
  ir_expr *den;
  if (r.count != IR_SYMBOLIC) {
    double denom = (double)r.count - corr;
    den = ir_const_f(ir, denom > 0 ? denom : 0, dt);
  } else { /* the same in double at run time */
    gc_dtype f64 = GC_DTYPE_FLOAT64;
    ir_expr *d = ir_op2(ir, IR_SUB, f64, count_of(L, &r, f64),
                        ir_const_f(ir, corr, f64));
    den =
        ir_cast(ir, ir_op2(ir, IR_MAXIMUM, f64, d, ir_const_f(ir, 0, f64)), dt);
  }
  ir_expr *var = ir_op2(ir, IR_DIV, dt, L_load(L, m2, v), den);
  if (is_std)
    var = ir_op1(ir, IR_SQRT, dt, var);
  rc = L_set(L, n, 0, L_spointwise(L, n, od, r.rank, r.ss, v, var));
  if (!rc && n->noutputs == 2)
    rc = L_set(L, n, 1, L_to_dtype(L, n, mean, od));
  return rc;
}

/* _softmax(self, dim, half_to_float) (which 0), _log_softmax (1), and
 * _safe_softmax(self, dim, dtype) (2: softmax, but 0 along a row that is
 * -inf throughout, where softmax gives NaN; ATen tests the row with
 * all(self == -inf), which is the row's max being -inf). */
int lower_softmax(lower_ctx *L, const gc_node *n, int which) {
  ir_graph *ir = L_ir(L);
  ir_tensor *x;
  int64_t dim;
  bool h2f = false, is_log = which == 1, safe = which == 2;
  gc_dtype want;
  int rc = L_tensor_passes(L, n, "self", &x);
  if (rc)
    return rc;
  L_bool(L, n, "half_to_float", &h2f);
  if (!x || !L_int(L, n, "dim", &dim) || h2f || !L_is_float(x->dtype) ||
      (safe && L_dtype(L, n, "dtype", &want) && want != x->dtype))
    return GC_EUNSUPPORTED;
  dim = norm_dim(dim, x->rank);
  /* computed in float32 for half inputs, rounded once at the end */
  gc_dtype od = x->dtype, dt = L_opmath(od);
  if (x->rank == 0) { /* ATen views it as [1]: max and sum are x, exp(x-x) */
    if (dim != 0 || safe)
      return GC_EUNSUPPORTED;
    ir_expr *xv = L_load(L, x, NULL);
    ir_expr *sh = ir_op2(ir, IR_SUB, dt, xv, xv); /* 0, or NaN if not finite */
    ir_expr *body =
        is_log ? ir_op2(ir, IR_SUB, dt, sh,
                        ir_op1(ir, IR_LOG, dt, ir_op1(ir, IR_EXP, dt, sh)))
               : ir_op2(ir, IR_MUL, dt, ir_op1(ir, IR_EXP, dt, sh),
                        ir_op1(ir, IR_RECIP, dt, ir_op1(ir, IR_EXP, dt, sh)));
    return L_set(L, n, 0,
                 L_pointwise(L, n, od, 0, NULL, L_vars(L, 0, NULL), body));
  }
  if (dim < 0 || dim >= x->rank)
    return GC_EUNSUPPORTED;
  /* max over dim (keepdim), sum of exp(x - max), then the epilogue */
  gc_sym **xs = xsizes(L, x);
  gc_sym *ksz[IR_MAX_RANK];
  if (!xs)
    return GC_ENOMEM;
  memcpy(ksz, xs, (size_t)x->rank * sizeof *ksz);
  ksz[dim] = gc_sym_const(&ir->sym, 1);
  if (gc_sym_is_const(xs[dim], 0))
    return GC_EUNSUPPORTED;
  if (gc_sym_symbolic(&ir->sym, xs[dim]) &&
      !L_guard(L, n, IR_GUARD_LE, gc_sym_const(&ir->sym, 1), xs[dim],
               IR_GUARD_RANGE, "a softmax over at least one element"))
    return GC_ENOMEM;
  gc_sym **ov = L_svars(L, x->rank, ksz);
  gc_sym **rv = L_svars(L, 1, &xs[dim]);
  if (!ov || !rv)
    return GC_ENOMEM;
  gc_sym *xi[IR_MAX_RANK];
  for (int i = 0; i < x->rank; i++)
    xi[i] = i == dim ? rv[0] : ov[i];
  ir_buf *mx = L_sreduce(L, n, IR_RED_MAX, dt, x->rank, ksz, ov, 1, &xs[dim],
                         rv, L_load(L, x, xi), NULL, NULL);
  if (!mx)
    return GC_ENOMEM;
  ir_tensor *mxt = ir_tensor_of_buf(ir, mx);
  gc_sym **ov2 = L_svars(L, x->rank, ksz);
  gc_sym **rv2 = L_svars(L, 1, &xs[dim]);
  if (!ov2 || !rv2)
    return GC_ENOMEM;
  for (int i = 0; i < x->rank; i++)
    xi[i] = i == dim ? rv2[0] : ov2[i];
  ir_expr *sh = ir_op2(ir, IR_SUB, dt, L_load(L, x, xi), L_load(L, mxt, ov2));
  ir_buf *sm = L_sreduce(L, n, IR_RED_SUM, dt, x->rank, ksz, ov2, 1, &xs[dim],
                         rv2, ir_op1(ir, IR_EXP, dt, sh), NULL, NULL);
  if (!sm)
    return GC_ENOMEM;
  ir_tensor *smt = ir_tensor_of_buf(ir, sm);
  gc_sym **v = L_svars(L, x->rank, xs);
  if (!v)
    return GC_ENOMEM;
  gc_sym *ki[IR_MAX_RANK];
  for (int i = 0; i < x->rank; i++)
    ki[i] = i == dim ? gc_sym_const(&ir->sym, 0) : v[i];
  ir_expr *shifted =
      ir_op2(ir, IR_SUB, dt, L_load(L, x, v), L_load(L, mxt, ki));
  ir_expr *body;
  if (is_log && od != dt) { /* ATen keeps the sum and its log in the half
                               dtype (scalar_t buffers) */
    ir_expr *s = ir_cast(ir, ir_cast(ir, L_load(L, smt, ki), od), dt);
    ir_expr *ls = ir_cast(ir, ir_cast(ir, ir_op1(ir, IR_LOG, dt, s), od), dt);
    body = ir_op2(ir, IR_SUB, dt, shifted, ls);
  } else if (is_log)
    body = ir_op2(ir, IR_SUB, dt, shifted,
                  ir_op1(ir, IR_LOG, dt, L_load(L, smt, ki)));
  else
    body = ir_op2(ir, IR_MUL, dt, ir_op1(ir, IR_EXP, dt, shifted),
                  ir_op1(ir, IR_RECIP, dt, L_load(L, smt, ki)));
  if (safe)
    body = ir_op3(ir, IR_WHERE, dt,
                  ir_op2(ir, IR_EQ, dt, L_load(L, mxt, ki),
                         ir_const_f(ir, -INFINITY, dt)),
                  ir_const_f(ir, 0, dt), body);
  return L_set(L, n, 0, L_spointwise(L, n, od, x->rank, xs, v, body));
}

/* native_layer_norm(input, normalized_shape, weight, bias, eps) ->
 * (out, mean, rstd). mean and rstd have the input's leading dims and size
 * 1 for the normalized ones. */
int lower_layer_norm(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  ir_tensor *x = L_tensor(L, n, "input");
  gc_sym *shape[IR_MAX_RANK];
  int ns;
  double eps;
  if (!x || !L_symints(L, n, "normalized_shape", shape, &ns, IR_MAX_RANK) ||
      !L_float(L, n, "eps", &eps) || ns > x->rank || !L_is_float(x->dtype))
    return GC_EUNSUPPORTED;
  gc_dtype od = x->dtype, dt = L_opmath(od); /* half: float32, as ATen */
  int lead = x->rank - ns;
  int64_t dims[IR_MAX_RANK];
  gc_sym **xs = xsizes(L, x);
  if (!xs)
    return GC_ENOMEM;
  for (int i = 0; i < ns; i++) {
    if (shape[i] != xs[lead + i])
      return GC_EUNSUPPORTED;
    dims[i] = lead + i;
  }
  /* the statistics' shape: output 1's; layer_norm (torch.export's
   * undecomposed form) has only output 0, x's shape, whose normalized dims
   * the statistics keep as 1 */
  const gc_tensor_meta *sm = L_out_meta(n, 1), *om = L_out_meta(n, 0);
  if (!sm && om && n->noutputs == 1 && om->rank == x->rank) {
    gc_tensor_meta *k = gc_arena_alloc(ir->a, sizeof *k);
    gc_symint *ks =
        gc_arena_calloc(ir->a, (size_t)om->rank + 1, sizeof *k->sizes);
    if (!k || !ks)
      return GC_ENOMEM;
    *k = *om;
    for (int i = 0; i < om->rank; i++)
      ks[i] = i < lead ? om->sizes[i] : (gc_symint){.v = 1};
    k->sizes = ks;
    sm = k;
  }
  red r;
  int rc = setup_meta(L, sm, x, dims, ns, false, &r);
  if (rc)
    return rc;
  if (!nonempty(L, n, &r))
    return GC_EUNSUPPORTED;
  ir_tensor *mean, *m2;
  if ((rc = welford(L, n, &r, dt, &mean, &m2)))
    return rc;
  /* rstd = 1 / sqrt(max(m2 / N, 0) + eps), over mean's shape */
  gc_sym **sv = L_svars(L, r.rank, r.ss);
  if (!sv)
    return GC_ENOMEM;
  ir_expr *var = ir_op2(ir, IR_DIV, dt, L_load(L, m2, sv), count_of(L, &r, dt));
  var = ir_op2(ir, IR_MAXIMUM, dt, var, ir_const_f(ir, 0, dt));
  ir_tensor *rstd = L_spointwise(
      L, n, dt, r.rank, r.ss, sv,
      ir_op1(ir, IR_RSQRT, dt,
             ir_op2(ir, IR_ADD, dt, var, ir_const_f(ir, eps, dt))));
  if (!rstd)
    return GC_ENOMEM;
  /* out = (x - mean) * rstd * weight + bias, as torch 2's kernel computes
   * it (read back from eager): the last product and the bias one
   * multiply-add where the target has FMA (ATen's AVX2 and AVX-512 kernels
   * are contracted), explicit so gcc cannot contract otherwise. A constant
   * row gives exactly 0 (torch 1.13's x * rstd + (-rstd * mean) did too,
   * but contracted by gcc it was rstd * mean's rounding error). */
  gc_sym **v = L_svars(L, x->rank, xs);
  if (!v)
    return GC_ENOMEM;
  gc_sym *si[IR_MAX_RANK];
  for (int i = 0; i < x->rank; i++)
    si[i] = i < lead ? v[i] : gc_sym_const(&ir->sym, 0);
  ir_expr *rs = L_load(L, rstd, si), *mu = L_load(L, mean, si);
  ir_expr *d = ir_op2(ir, IR_SUB, dt, L_load(L, x, v), mu);
  ir_tensor *w = L_tensor(L, n, "weight"), *b = L_tensor(L, n, "bias");
  ir_expr *p = rs, *y;
  if (w) { /* (d * rstd) * w + b */
    d = ir_op2(ir, IR_MUL, dt, d, rs);
    p = L_load_bcast(L, w, x->rank, v);
  }
  if (!b)
    y = ir_op2(ir, IR_MUL, dt, d, p);
  else if (ir->fma)
    y = ir_op3(ir, IR_FMA, dt, d, p, L_load_bcast(L, b, x->rank, v));
  else
    y = ir_op2(ir, IR_ADD, dt, ir_op2(ir, IR_MUL, dt, d, p),
               L_load_bcast(L, b, x->rank, v));
  rc = L_set(L, n, 0, L_spointwise(L, n, od, x->rank, xs, v, y));
  /* layer_norm (torch.export's undecomposed form) has only the first */
  if (!rc && n->noutputs > 1) {
    const gc_tensor_meta *mm = L_out_meta(n, 1), *mr = L_out_meta(n, 2);
    if (!mm || !mr)
      return GC_EUNSUPPORTED;
    rc = L_set(L, n, 1, L_to_dtype(L, n, mean, mm->dtype));
    if (!rc)
      rc = L_set(L, n, 2, L_to_dtype(L, n, rstd, mr->dtype));
  }
  return rc;
}

/* native_group_norm(input, weight, bias, N, C, HxW, group, eps) -> (out,
 * mean [N, G], rstd [N, G]): the input seen as [N, G, C / G, *] (a view),
 * a Welford reduction over its dims after the group's, rstd = 1 /
 * sqrt(max(m2 / count, 0) + eps), then per channel c of group g, as ATen's
 * kernel: scale = rstd * weight[c], bias' = -scale * mean + bias[c], out =
 * scale * x + bias' (without weight and bias: (x - mean) * rstd). */
int lower_group_norm(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  ir_tensor *x = L_tensor(L, n, "input");
  int64_t G;
  double eps;
  if (!x || x->rank < 2 || x->rank + 1 > IR_MAX_RANK || !L_is_float(x->dtype) ||
      !L_int(L, n, "group", &G) || !L_float(L, n, "eps", &eps) || G <= 0 ||
      x->sizes[1] % G != 0)
    return GC_EUNSUPPORTED;
  gc_dtype od = x->dtype, dt = L_opmath(od);
  int64_t C = x->sizes[1], D = C / G;
  /* the grouped view [N, G, D, *] */
  int vr = x->rank + 1;
  int64_t vs[IR_MAX_RANK];
  vs[0] = x->sizes[0];
  vs[1] = G;
  vs[2] = D;
  for (int i = 2; i < x->rank; i++)
    vs[i + 1] = x->sizes[i];
  gc_sym **vv = L_vars(L, vr, vs);
  gc_sym **map =
      vv ? gc_arena_calloc(ir->a, (size_t)x->rank, sizeof *map) : NULL;
  if (!map)
    return GC_ENOMEM;
  map[0] = vv[0];
  map[1] = gc_sym_add(s, gc_sym_scale(s, vv[1], D), vv[2]);
  for (int i = 2; i < x->rank; i++)
    map[i] = vv[i + 1];
  ir_tensor *xv = L_view(L, x, vr, vs, vv, map);
  int64_t dims[IR_MAX_RANK];
  for (int i = 2; i < vr; i++)
    dims[i - 2] = i;
  red r;
  int rc = setup(L, n, 1, xv, dims, vr - 2, false, &r);
  if (rc)
    return rc;
  if (r.count == 0 || r.rank != 2)
    return GC_EUNSUPPORTED;
  ir_tensor *mean, *m2;
  if ((rc = welford(L, n, &r, dt, &mean, &m2)))
    return rc;
  gc_sym **sv = L_vars(L, r.rank, r.sizes);
  if (!sv)
    return GC_ENOMEM;
  ir_expr *var = ir_op2(ir, IR_DIV, dt, L_load(L, m2, sv),
                        ir_const_f(ir, (double)r.count, dt));
  var = ir_op2(ir, IR_MAXIMUM, dt, var, ir_const_f(ir, 0, dt));
  ir_tensor *rstd = L_pointwise(
      L, n, dt, r.rank, r.sizes, sv,
      ir_op2(ir, IR_DIV, dt, ir_const_f(ir, 1, dt),
             ir_op1(ir, IR_SQRT, dt,
                    ir_op2(ir, IR_ADD, dt, var, ir_const_f(ir, eps, dt)))));
  if (!rstd)
    return GC_ENOMEM;
  gc_sym **v = L_vars(L, x->rank, x->sizes);
  if (!v)
    return GC_ENOMEM;
  gc_sym *ng[2] = {v[0], gc_sym_floordiv(s, v[1], D)};
  ir_expr *rs = L_load(L, rstd, ng), *mu = L_load(L, mean, ng);
  ir_expr *xe = L_load(L, x, v), *y;
  ir_tensor *w = L_tensor(L, n, "weight"), *b = L_tensor(L, n, "bias");
  if ((w && (w->rank != 1 || w->sizes[0] != C || w->dtype != od)) ||
      (b && (b->rank != 1 || b->sizes[0] != C || b->dtype != od)))
    return GC_EUNSUPPORTED;
  if (!w && !b) {
    y = ir_op2(ir, IR_MUL, dt, ir_op2(ir, IR_SUB, dt, xe, mu), rs);
  } else {
    gc_sym *c[1] = {v[1]};
    ir_expr *scale = w ? ir_op2(ir, IR_MUL, dt, rs, L_load(L, w, c)) : rs;
    ir_expr *shift = ir_op2(ir, IR_MUL, dt, ir_op1(ir, IR_NEG, dt, scale), mu);
    shift = ir_op2(ir, IR_ADD, dt, shift,
                   b ? L_load(L, b, c) : ir_const_f(ir, 0, dt));
    y = ir_op2(ir, IR_ADD, dt, ir_op2(ir, IR_MUL, dt, scale, xe), shift);
  }
  rc = L_set(L, n, 0, L_pointwise(L, n, od, x->rank, x->sizes, v, y));
  if (!rc)
    rc = L_set(L, n, 1, L_to_dtype(L, n, mean, L_out_meta(n, 1)->dtype));
  if (!rc)
    rc = L_set(L, n, 2, L_to_dtype(L, n, rstd, L_out_meta(n, 2)->dtype));
  return rc;
}

/* logsumexp(self, dim, keepdim): max over dim, then log(sum(exp(x - max)))
 * + max, with an infinite max replaced by 0 in both places, as ATen. */
int lower_logsumexp(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  const int64_t *dims = NULL;
  int nd = 0;
  if (!get_dims(L, n, "dim", &dims, &nd))
    return GC_EUNSUPPORTED;
  ir_tensor *x = L_tensor(L, n, "self");
  const gc_tensor_meta *m = L_out_meta(n, 0);
  if (!x || !m || !L_is_float(m->dtype))
    return GC_EUNSUPPORTED;
  gc_dtype od = m->dtype, dt = L_opmath(od);
  red r;
  int rc = setup(L, n, 0, x, dims, nd, true, &r);
  if (rc)
    return rc;
  if (!nonempty(L, n, &r))
    return GC_EUNSUPPORTED;
  ir_buf *mb = reduce_r(L, n, IR_RED_MAX, dt, &r,
                        ir_cast(ir, load_x(L, &r), dt), NULL, NULL);
  if (!mb)
    return GC_ENOMEM;
  ir_tensor *mt = ir_tensor_of_buf(ir, mb);
  /* the max with infinities replaced by 0, at output variables v */
  red r2;
  if ((rc = setup(L, n, 0, x, dims, nd, true, &r2)))
    return rc;
  ir_expr *mx = L_load(L, mt, r2.vars);
  ir_expr *inf = ir_const_f(ir, INFINITY, dt);
  mx = ir_op3(ir, IR_WHERE, dt,
              ir_op2(ir, IR_EQ, dt, ir_op1(ir, IR_ABS, dt, mx), inf),
              ir_const_f(ir, 0, dt), mx);
  ir_expr *body =
      ir_op1(ir, IR_EXP, dt,
             ir_op2(ir, IR_SUB, dt, ir_cast(ir, load_x(L, &r2), dt), mx));
  ir_buf *sb = reduce_r(L, n, IR_RED_SUM, dt, &r2, body, NULL, NULL);
  if (!sb)
    return GC_ENOMEM;
  ir_tensor *st = ir_tensor_of_buf(ir, sb);
  gc_sym **v = L_svars(L, r.rank, r.ss);
  if (!v)
    return GC_ENOMEM;
  ir_expr *mv = L_load(L, mt, v);
  mv = ir_op3(ir, IR_WHERE, dt,
              ir_op2(ir, IR_EQ, dt, ir_op1(ir, IR_ABS, dt, mv), inf),
              ir_const_f(ir, 0, dt), mv);
  ir_expr *y =
      ir_op2(ir, IR_ADD, dt, ir_op1(ir, IR_LOG, dt, L_load(L, st, v)), mv);
  return L_set(L, n, 0, L_spointwise(L, n, od, r.rank, r.ss, v, y));
}

/* dot/vdot (param 0: [K] . [K] -> []) and mv (param 1: [M, K] x [K] ->
 * [M]) as sum reductions of products (float dtypes; the sum accumulates
 * as every float sum here does, see the top of this file). */
int lower_dot(lower_ctx *L, const gc_node *n, int is_mv) {
  ir_graph *ir = L_ir(L);
  ir_tensor *a = L_tensor(L, n, "self");
  ir_tensor *b = L_tensor(L, n,
                          is_mv                   ? "vec"
                          : L_arg(L, n, "tensor") ? "tensor"
                                                  : "other");
  const gc_tensor_meta *m = L_out_meta(n, 0);
  if (!a || !b || !m || a->dtype != b->dtype || m->dtype != a->dtype ||
      !L_is_float(a->dtype) || b->rank != 1 || a->rank != 1 + is_mv ||
      a->sizes[a->rank - 1] != b->sizes[0])
    return GC_EUNSUPPORTED;
  gc_dtype od = a->dtype, dt = L_opmath(od);
  int64_t k = b->sizes[0], msz = is_mv ? a->sizes[0] : 1;
  gc_sym **ov = L_vars(L, is_mv, &msz);
  gc_sym **rv = L_vars(L, 1, &k);
  if (!ov || !rv)
    return GC_ENOMEM;
  gc_sym *ai[2] = {is_mv ? ov[0] : rv[0], rv[0]};
  ir_expr *body = ir_op2(ir, IR_MUL, dt, L_load(L, a, ai), L_load(L, b, rv));
  if (k == 0) { /* an empty sum: zeros */
    gc_sym **v = L_vars(L, is_mv, &msz);
    return v ? L_set(
                   L, n, 0,
                   L_pointwise(L, n, od, is_mv, &msz, v, ir_const_f(ir, 0, dt)))
             : GC_ENOMEM;
  }
  ir_buf *r = L_reduce(L, n, IR_RED_SUM, dt, is_mv, &msz, ov, 1, &k, rv, body,
                       NULL, NULL);
  return r ? L_set(L, n, 0, L_to_dtype(L, n, ir_tensor_of_buf(ir, r), od))
           : GC_ENOMEM;
}

/* linalg_vector_norm(self, ord, dim, keepdim, dtype) (param 0) and
 * norm.ScalarOpt_dim / norm.Scalar(self, p, dim, keepdim) (param 1): a
 * reduction of |x| by the order: 2 sqrt of the sum of squares, 1 the sum,
 * inf / -inf the max / min (NaN propagates), 0 the count of non-zeros,
 * other p (sum |x|^p)^(1/p). Float dtypes, no dtype conversion. */
int lower_vector_norm(lower_ctx *L, const gc_node *n, int is_norm) {
  ir_graph *ir = L_ir(L);
  double p = 2;
  const char *pname = is_norm ? "p" : "ord";
  const gc_arg *pa = L_arg(L, n, pname);
  if (pa && pa->kind != GC_ARG_NONE && !L_float(L, n, pname, &p))
    return GC_EUNSUPPORTED;
  const gc_arg *da = L_arg(L, n, "dtype");
  gc_dtype want;
  if (da && da->kind != GC_ARG_NONE &&
      (!L_dtype(L, n, "dtype", &want) || want != L_out_meta(n, 0)->dtype))
    return GC_EUNSUPPORTED; /* the input is converted below: same dtype only */
  const int64_t *dims = NULL;
  int nd = 0;
  if (!get_dims(L, n, "dim", &dims, &nd))
    return GC_EUNSUPPORTED;
  ir_tensor *x = L_tensor(L, n, "self");
  red r;
  int rc = setup(L, n, 0, x, dims, nd, true, &r);
  if (rc)
    return rc;
  gc_dtype od = x ? x->dtype : GC_DTYPE_UNKNOWN, dt = L_opmath(od);
  const gc_tensor_meta *m = L_out_meta(n, 0);
  if (!L_is_float(dt) || m->dtype != od || !nonempty(L, n, &r))
    return GC_EUNSUPPORTED;
  ir_expr *ax = ir_op1(ir, IR_ABS, dt, load_x(L, &r));
  ir_reduction red_op = IR_RED_SUM;
  ir_expr *body;
  if (p == 2)
    body = ir_op2(ir, IR_MUL, dt, ax, ax);
  else if (p == 1)
    body = ax;
  else if (isinf(p)) {
    red_op = p > 0 ? IR_RED_MAX : IR_RED_MIN;
    body = ax;
  } else if (p == 0)
    body = ir_cast(ir, ir_op2(ir, IR_NE, dt, ax, ir_const_f(ir, 0, dt)), dt);
  else
    body = ir_op2(ir, IR_POW, dt, ax, ir_const_f(ir, p, dt));
  ir_buf *b = reduce_r(L, n, red_op, dt, &r, body, NULL, NULL);
  if (!b)
    return GC_ENOMEM;
  ir_tensor *t = ir_tensor_of_buf(ir, b);
  if (p == 2 || (p != 1 && p != 0 && !isinf(p))) {
    gc_sym **v = L_svars(L, r.rank, r.ss);
    if (!v)
      return GC_ENOMEM;
    ir_expr *s = L_load(L, t, v);
    ir_expr *e = p == 2
                     ? ir_op1(ir, IR_SQRT, dt, s)
                     : ir_op2(ir, IR_POW, dt, s, ir_const_f(ir, 1.0 / p, dt));
    t = L_spointwise(L, n, dt, r.rank, r.ss, v, e);
  }
  return L_set(L, n, 0, L_to_dtype(L, n, t, od));
}
