/*
 * norm_backward.c: lowering rules for the normalization backwards of
 * AOTAutograd's backward graphs.
 *
 * The normalization backwards need reductions first, and an elementwise
 * epilogue that reads them (the scheduler fuses the epilogue into the
 * reduction's kernel where the ranges allow):
 *
 *   _softmax_backward_data      (g - sum(g * y)) * y        over dim
 *   _log_softmax_backward_data  g - exp(y) * sum(g)         over dim
 *   native_layer_norm_backward  per row: s = sum(dy * w * (mean - x)),
 *                               db = sum(dy * w); a = rstd,
 *                               dx = a (dy w - db / N) + s a^3 / N (x - mean)
 *                               (ATen's formula, cancelling terms first);
 *                               dw, db over the rows
 *   native_batch_norm_backward  per channel: sum(dy), sum((x - mean) dy)
 *
 * Sums accumulate as every reduction of the loop IR does (float32 in
 * double), so they may differ from ATen's float sums in the last bits.
 * Outputs that output_mask leaves undefined are not computed. The masks
 * come from the graph's metadata: an output without a tensor is skipped.
 */
#include <math.h>
#include <string.h>

#include "compiler/lower/pointwise.h"

#define OP1(op, a) ir_op1(ir, IR_##op, dt, a)
#define OP2(op, a, b) ir_op2(ir, IR_##op, dt, a, b)
#define WHERE(c, a, b) ir_op3(ir, IR_WHERE, dt, c, a, b)
#define AND(a, b) ir_op2(ir, IR_AND, GC_DTYPE_BOOL, a, b)
#define OR(a, b) ir_op2(ir, IR_OR, GC_DTYPE_BOOL, a, b)

/* ---- reductions for the normalization backwards ---- */

/* A sum of an expression over some dimensions of an input-shaped space:
 * `xi` indexes the input (reduced dims by rv, kept ones by ov), the
 * result has the kept dims (keep: and size 1 where the reduced were). */
typedef struct rsum {
  int rank;                    /* of the result */
  int64_t sizes[IR_MAX_RANK];  /* of the result */
  gc_sym **ov;                 /* result variables */
  int rrank;                   /* reduced dims */
  int64_t rsizes[IR_MAX_RANK]; /* their sizes */
  gc_sym **rv;                 /* reduced variables */
  gc_sym *xi[IR_MAX_RANK];     /* input index */
} rsum;

static int rsum_begin(lower_ctx *L, int rank, const int64_t *sizes,
                      const bool *reduced, bool keep, rsum *r) {
  memset(r, 0, sizeof *r);
  for (int i = 0; i < rank; i++) {
    if (reduced[i])
      r->rsizes[r->rrank++] = sizes[i];
    if (!reduced[i] || keep)
      r->sizes[r->rank++] = reduced[i] ? 1 : sizes[i];
  }
  r->ov = L_vars(L, r->rank, r->sizes);
  r->rv = L_vars(L, r->rrank, r->rsizes);
  if (!r->ov || !r->rv)
    return GC_ENOMEM;
  for (int i = 0, o = 0, q = 0; i < rank; i++) {
    r->xi[i] = reduced[i] ? r->rv[q++] : r->ov[o];
    if (!reduced[i] || keep)
      o++;
  }
  return 0;
}

/* The reduction node of `body` (written over r->xi); its buffer as a
 * tensor of r's shape. */
static ir_tensor *rsum_end(lower_ctx *L, const gc_node *n, rsum *r, gc_dtype dt,
                           ir_expr *body) {
  ir_buf *b = L_reduce(L, n, IR_RED_SUM, dt, r->rank, r->sizes, r->ov, r->rrank,
                       r->rsizes, r->rv, body, NULL, NULL);
  return b ? ir_tensor_of_buf(L_ir(L), b) : NULL;
}

/* An index of a keepdim result at the input's point: reduced dims 0. */
static void kept_index(lower_ctx *L, int rank, const bool *reduced,
                       gc_sym *const *vars, gc_sym **out) {
  for (int i = 0; i < rank; i++)
    out[i] = reduced[i] ? gc_sym_const(&L_ir(L)->sym, 0) : vars[i];
}

/* _softmax_backward_data(grad_output, output, dim, input_dtype) (param
 * 0): (g - sum(g * y)) * y; _log_softmax_backward_data (param 1):
 * g - exp(y) * sum(g). */
int lower_softmax_backward(lower_ctx *L, const gc_node *n, int is_log) {
  ir_graph *ir = L_ir(L);
  ir_tensor *gt = L_tensor(L, n, "grad_output"), *yt = L_tensor(L, n, "output");
  int64_t dim;
  gc_dtype in_dt;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  gc_dtype dt = p.dt;
  if (!gt || !yt || !L_int(L, n, "dim", &dim) ||
      !L_dtype(L, n, "input_dtype", &in_dt) || in_dt != dt || !L_is_float(dt) ||
      gt->dtype != dt || yt->dtype != dt || gt->rank != p.rank ||
      yt->rank != p.rank || p.rank == 0)
    return GC_EUNSUPPORTED;
  if (dim < 0)
    dim += p.rank;
  if (dim < 0 || dim >= p.rank)
    return GC_EUNSUPPORTED;
  bool reduced[IR_MAX_RANK] = {false};
  reduced[dim] = true;
  rsum r;
  if ((rc = rsum_begin(L, p.rank, p.sizes, reduced, true, &r)))
    return rc;
  ir_expr *gr = L_load_bcast(L, gt, p.rank, r.xi);
  ir_expr *body = is_log ? gr : OP2(MUL, gr, L_load_bcast(L, yt, p.rank, r.xi));
  ir_tensor *s = rsum_end(L, n, &r, dt, body);
  if (!s)
    return GC_ENOMEM;
  gc_sym *ki[IR_MAX_RANK];
  kept_index(L, p.rank, reduced, p.vars, ki);
  ir_expr *sum = L_load(L, s, ki);
  ir_expr *g = L_load_bcast(L, gt, p.rank, p.vars);
  ir_expr *y = L_load_bcast(L, yt, p.rank, p.vars);
  return L__elementwise_finish(L, n, 0, &p,
                               is_log ? OP2(SUB, g, OP2(MUL, OP1(EXP, y), sum))
                                      : OP2(MUL, OP2(SUB, g, sum), y));
}

/* ---- native_layer_norm_backward ---- */

/* What the layer-norm backward reads, at one point of the input. */
typedef struct lnb {
  ir_tensor *dy, *x, *mean, *rstd, *w; /* w may be NULL */
  int rank, lead;                      /* input rank, leading dims */
  int64_t sizes[IR_MAX_RANK];          /* input sizes */
  int64_t N;                           /* elements per row */
  gc_dtype dt;                         /* the input's, computed in */
} lnb;

/* mean/rstd at the row of input index xi. */
static ir_expr *row_stat(lower_ctx *L, lnb *b, ir_tensor *t, gc_sym **xi) {
  gc_sym *si[IR_MAX_RANK];
  for (int i = 0; i < b->rank; i++)
    si[i] = i < b->lead ? xi[i] : gc_sym_const(&L_ir(L)->sym, 0);
  return ir_cast(L_ir(L), L_load(L, t, si), b->dt);
}

/* dy (times the weight, when there is one) at input index xi. */
static ir_expr *dy_w(lower_ctx *L, lnb *b, gc_sym **xi) {
  ir_graph *ir = L_ir(L);
  gc_dtype dt = b->dt;
  ir_expr *dy = ir_cast(ir, L_load(L, b->dy, xi), dt);
  if (!b->w)
    return dy;
  return OP2(MUL, dy, ir_cast(ir, L_load(L, b->w, xi + b->lead), dt));
}

/* grad_input: per row s = sum(dy w (mean - x)), db = sum(dy w); a = rstd,
 * b = s a^3 / N; dx = a (dy w - db / N) + b (x - mean). This is ATen's
 * formula (its b is (db mean - sum(dy w x)) a^3 / N, its c is
 * -b mean - db a / N, dx = a dy w + b x + c) with the cancelling terms
 * taken together before they are rounded: db mean - ds and b x - b mean
 * cancel exactly in exact arithmetic, and their rounding errors, times
 * a^3 (3e7 for eps = 1e-5 and a constant row), are what ATen's order
 * leaves when the mean is large against the spread, or when gcc
 * contracts one of the products into a fused multiply-add. A row whose
 * elements all equal its mean (a one-element row) gets exactly
 * a (dy - db) = 0 without a weight, as eager's uncontracted loop does. */
static int lnb_input(lower_ctx *L, const gc_node *n, lnb *b) {
  ir_graph *ir = L_ir(L);
  gc_dtype dt = b->dt;
  bool reduced[IR_MAX_RANK];
  for (int i = 0; i < b->rank; i++)
    reduced[i] = i >= b->lead;
  rsum rs, rb;
  int rc = rsum_begin(L, b->rank, b->sizes, reduced, true, &rs);
  if (!rc)
    rc = rsum_begin(L, b->rank, b->sizes, reduced, true, &rb);
  if (rc)
    return rc;
  ir_expr *centred = OP2(SUB, row_stat(L, b, b->mean, rs.xi),
                         ir_cast(ir, L_load(L, b->x, rs.xi), dt));
  ir_tensor *sc = rsum_end(L, n, &rs, dt, OP2(MUL, dy_w(L, b, rs.xi), centred));
  ir_tensor *db = rsum_end(L, n, &rb, dt, dy_w(L, b, rb.xi));
  L__elementwise p;
  if (!sc || !db || (rc = L__elementwise_begin(L, n, 0, &p)))
    return rc ? rc : GC_ENOMEM;
  gc_sym *ki[IR_MAX_RANK];
  kept_index(L, b->rank, reduced, p.vars, ki);
  ir_expr *a = row_stat(L, b, b->rstd, p.vars);
  ir_expr *scale = L__float_const(L, 1.0 / (double)b->N, dt);
  ir_expr *bb =
      OP2(MUL, OP2(MUL, OP2(MUL, OP2(MUL, L_load(L, sc, ki), a), a), a), scale);
  ir_expr *mean_db = OP2(MUL, L_load(L, db, ki), scale);
  ir_expr *x = OP2(SUB, ir_cast(ir, L_load(L, b->x, p.vars), dt),
                   row_stat(L, b, b->mean, p.vars));
  ir_expr *dx = OP2(ADD, OP2(MUL, a, OP2(SUB, dy_w(L, b, p.vars), mean_db)),
                    OP2(MUL, bb, x));
  return L__elementwise_finish(L, n, 0, &p, dx);
}

/* grad_weight (k 1): sum over rows of dy * (x * rstd - rstd * mean);
 * grad_bias (k 2): sum over rows of dy. */
static int lnb_param(lower_ctx *L, const gc_node *n, lnb *b, int k) {
  ir_graph *ir = L_ir(L);
  gc_dtype dt = b->dt;
  const gc_tensor_meta *m = L_out_meta(n, k);
  if (!m || m->rank != b->rank - b->lead || m->dtype != dt)
    return GC_EUNSUPPORTED;
  bool reduced[IR_MAX_RANK];
  for (int i = 0; i < b->rank; i++)
    reduced[i] = i < b->lead;
  rsum r;
  int rc = rsum_begin(L, b->rank, b->sizes, reduced, false, &r);
  if (rc)
    return rc;
  ir_expr *dy = ir_cast(ir, L_load(L, b->dy, r.xi), dt), *body = dy;
  if (k == 1) {
    ir_expr *a = row_stat(L, b, b->rstd, r.xi);
    ir_expr *bb = OP2(MUL, OP1(NEG, a), row_stat(L, b, b->mean, r.xi));
    ir_expr *x = ir_cast(ir, L_load(L, b->x, r.xi), dt);
    body = OP2(MUL, dy, OP2(ADD, OP2(MUL, a, x), bb));
  }
  ir_tensor *t = rsum_end(L, n, &r, dt, body);
  return t ? L_set(L, n, k, t) : GC_ENOMEM;
}

/* Does t have the input's leading sizes and size 1 elsewhere? */
static bool row_shaped(const lnb *b, const ir_tensor *t) {
  if (!t || t->rank != b->rank || !L_is_float(t->dtype))
    return false;
  for (int i = 0; i < b->rank; i++)
    if (t->sizes[i] != (i < b->lead ? b->sizes[i] : 1))
      return false;
  return true;
}

/* native_layer_norm_backward(grad_out, input, normalized_shape, mean,
 * rstd, weight, bias, output_mask) -> (grad_input, grad_weight,
 * grad_bias), each computed when the graph has it. */
int lower_layer_norm_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  lnb b = {0};
  const int64_t *shape;
  int ns;
  b.dy = L_tensor(L, n, "grad_out");
  b.x = L_tensor(L, n, "input");
  b.mean = L_tensor(L, n, "mean");
  b.rstd = L_tensor(L, n, "rstd");
  b.w = L_tensor(L, n, "weight");
  if (!b.dy || !b.x || !b.mean || !b.rstd ||
      !L_ints(L, n, "normalized_shape", &shape, &ns) || ns > b.x->rank ||
      !L_is_float(b.x->dtype) || b.dy->rank != b.x->rank)
    return GC_EUNSUPPORTED;
  b.rank = b.x->rank;
  b.lead = b.rank - ns;
  b.dt = b.x->dtype;
  b.N = 1;
  for (int i = 0; i < b.rank; i++) {
    b.sizes[i] = b.x->sizes[i];
    if (b.dy->sizes[i] != b.sizes[i] ||
        (i >= b.lead && shape[i - b.lead] != b.sizes[i]))
      return GC_EUNSUPPORTED;
    if (i >= b.lead)
      b.N *= b.sizes[i];
  }
  if (b.N == 0 || !row_shaped(&b, b.mean) || !row_shaped(&b, b.rstd) ||
      (b.w && b.w->rank != ns))
    return GC_EUNSUPPORTED;
  int rc = 0;
  if (L_out_meta(n, 0))
    rc = lnb_input(L, n, &b);
  if (!rc && L_out_meta(n, 1))
    rc = b.w ? lnb_param(L, n, &b, 1) : GC_EUNSUPPORTED;
  if (!rc && L_out_meta(n, 2))
    rc = lnb_param(L, n, &b, 2);
  return rc;
}

/* ---- native_batch_norm_backward ---- */

/* What the batch-norm backward reads: per channel (dim 1) statistics. */
typedef struct bnb {
  ir_tensor *dy, *x, *w, *mean, *invstd_or_var; /* w may be NULL */
  bool train; /* invstd_or_var is save_invstd, else running_var */
  double eps; /* for 1 / sqrt(running_var + eps) */
  int rank;   /* of the input */
  int64_t sizes[IR_MAX_RANK]; /* of the input */
  int64_t count;              /* elements per channel */
  gc_dtype dt;                /* the input's, computed in */
} bnb;

/* A per-channel tensor at the channel of input index xi. */
static ir_expr *chan(lower_ctx *L, bnb *b, ir_tensor *t, gc_sym **xi) {
  return ir_cast(L_ir(L), L_load(L, t, &xi[1]), b->dt);
}

static ir_expr *invstd_at(lower_ctx *L, bnb *b, gc_sym **xi) {
  ir_graph *ir = L_ir(L);
  gc_dtype dt = b->dt;
  ir_expr *v = chan(L, b, b->invstd_or_var, xi);
  if (b->train)
    return v;
  /* 1 / sqrt(running_var + eps) in double, rounded once, as ATen */
  gc_dtype d = GC_DTYPE_FLOAT64;
  v = ir_cast(ir, v, d);
  v = ir_op2(ir, IR_DIV, d, ir_const_f(ir, 1, d),
             ir_op1(ir, IR_SQRT, d,
                    ir_op2(ir, IR_ADD, d, v, ir_const_f(ir, b->eps, d))));
  return ir_cast(ir, v, dt);
}

/* Per-channel sums of dy (which 0) and of (x - mean) * dy (which 1). */
static ir_tensor *bnb_sum(lower_ctx *L, const gc_node *n, bnb *b, int which) {
  ir_graph *ir = L_ir(L);
  gc_dtype dt = b->dt;
  bool reduced[IR_MAX_RANK];
  for (int i = 0; i < b->rank; i++)
    reduced[i] = i != 1;
  rsum r;
  if (rsum_begin(L, b->rank, b->sizes, reduced, false, &r))
    return NULL;
  ir_expr *dy = ir_cast(ir, L_load(L, b->dy, r.xi), dt), *body = dy;
  if (which == 1)
    body = OP2(MUL,
               OP2(SUB, ir_cast(ir, L_load(L, b->x, r.xi), dt),
                   chan(L, b, b->mean, r.xi)),
               dy);
  return rsum_end(L, n, &r, dt, body);
}

/* grad_input: in training (dy - sum/N - (x - mean) * k) * invstd * w with
 * k = dotp * invstd^2 / N; in eval dy * invstd * w. */
static int bnb_input(lower_ctx *L, const gc_node *n, bnb *b, ir_tensor *sum,
                     ir_tensor *dotp) {
  ir_graph *ir = L_ir(L);
  gc_dtype dt = b->dt;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_expr *dy = ir_cast(ir, L_load(L, b->dy, p.vars), dt);
  ir_expr *is = invstd_at(L, b, p.vars);
  ir_expr *w = b->w ? chan(L, b, b->w, p.vars) : L__float_const(L, 1, dt);
  if (!b->train)
    return L__elementwise_finish(L, n, 0, &p, OP2(MUL, OP2(MUL, dy, is), w));
  ir_expr *cnt = L__float_const(L, (double)b->count, dt);
  ir_expr *k =
      OP2(DIV, OP2(MUL, OP2(MUL, L_load(L, dotp, &p.vars[1]), is), is), cnt);
  ir_expr *gm = OP2(DIV, L_load(L, sum, &p.vars[1]), cnt);
  ir_expr *xm = OP2(SUB, ir_cast(ir, L_load(L, b->x, p.vars), dt),
                    chan(L, b, b->mean, p.vars));
  ir_expr *gi = OP2(SUB, OP2(SUB, dy, gm), OP2(MUL, xm, k));
  return L__elementwise_finish(L, n, 0, &p, OP2(MUL, OP2(MUL, gi, is), w));
}

/* Reads the arguments of native_batch_norm_backward into b. */
static int bnb_args(lower_ctx *L, const gc_node *n, bnb *b) {
  b->dy = L_tensor(L, n, "grad_out");
  b->x = L_tensor(L, n, "input");
  b->w = L_tensor(L, n, "weight");
  if (!b->dy || !b->x || !L_bool(L, n, "train", &b->train) ||
      !L_float(L, n, "eps", &b->eps) || b->x->rank < 2 ||
      !L_is_float(b->x->dtype) || b->dy->rank != b->x->rank)
    return GC_EUNSUPPORTED;
  b->mean = L_tensor(L, n, b->train ? "save_mean" : "running_mean");
  b->invstd_or_var = L_tensor(L, n, b->train ? "save_invstd" : "running_var");
  b->rank = b->x->rank;
  b->dt = b->x->dtype;
  b->count = 1;
  int64_t c = b->x->sizes[1];
  for (int i = 0; i < b->rank; i++) {
    b->sizes[i] = b->x->sizes[i];
    if (b->dy->sizes[i] != b->sizes[i])
      return GC_EUNSUPPORTED;
    if (i != 1)
      b->count *= b->sizes[i];
  }
  ir_tensor *per_chan[3] = {b->mean, b->invstd_or_var, b->w};
  for (int i = 0; i < 3; i++)
    if (per_chan[i] && (per_chan[i]->rank != 1 || per_chan[i]->sizes[0] != c))
      return GC_EUNSUPPORTED;
  return b->mean && b->invstd_or_var && b->count > 0 ? 0 : GC_EUNSUPPORTED;
}

/* native_batch_norm_backward(grad_out, input, weight, running_mean,
 * running_var, save_mean, save_invstd, train, eps, output_mask) ->
 * (grad_input, grad_weight = dotp * invstd, grad_bias = sum(dy)). */
int lower_batch_norm_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  bnb b = {0};
  int rc = bnb_args(L, n, &b);
  if (rc)
    return rc;
  bool want[3];
  for (int k = 0; k < 3; k++)
    want[k] = L_out_meta(n, k) != NULL;
  ir_tensor *sum = NULL, *dotp = NULL;
  if (want[2] || (want[0] && b.train))
    sum = bnb_sum(L, n, &b, 0);
  if (want[1] || (want[0] && b.train))
    dotp = bnb_sum(L, n, &b, 1);
  if (((want[2] || (want[0] && b.train)) && !sum) ||
      ((want[1] || (want[0] && b.train)) && !dotp))
    return GC_ENOMEM;
  if (want[0] && (rc = bnb_input(L, n, &b, sum, dotp)))
    return rc;
  if (want[1]) {
    L__elementwise p;
    if ((rc = L__elementwise_begin(L, n, 1, &p)))
      return rc;
    if (p.rank != 1)
      return GC_EUNSUPPORTED;
    gc_sym *xi[2] = {NULL, p.vars[0]};
    ir_graph *ir = L_ir(L);
    gc_dtype dt = b.dt;
    rc = L__elementwise_finish(
        L, n, 1, &p, OP2(MUL, L_load(L, dotp, p.vars), invstd_at(L, &b, xi)));
    if (rc)
      return rc;
  }
  return want[2] ? L_set(L, n, 2, sum) : 0;
}

/* ---- group norm ---- */

/* A sum over the reduced variables rv (rsizes) of body, one value per
 * point of the output space (sizes, vars); the result as a tensor. */
static ir_tensor *sum_of(lower_ctx *L, const gc_node *n, gc_dtype dt, int rank,
                         const int64_t *sizes, gc_sym **vars, int rrank,
                         const int64_t *rsizes, gc_sym **rv, ir_expr *body) {
  ir_buf *b = L_reduce(L, n, IR_RED_SUM, dt, rank, sizes, vars, rrank, rsizes,
                       rv, body, NULL, NULL);
  return b ? ir_tensor_of_buf(L_ir(L), b) : NULL;
}

/* native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C,
 * HxW, group, output_mask) -> (grad_input, grad_weight, grad_bias), as
 * ATen's kernel: per (n, c) ds = sum(dy * x), db = sum(dy) over the
 * spatial dims; per (n, g) over the group's channels dsg = sum(ds * w),
 * dbg = sum(db * w), c2 = (dbg * mean - dsg) * rstd^3 / (D * HxW), c3 =
 * -c2 * mean - dbg * rstd / (D * HxW); dx = rstd * w * dy + c2 * x + c3;
 * dw = sum over n of (ds - db * mean) * rstd, dbias = sum over n of db.
 * Inputs without spatial dims ([N, C]) are declined. */
int lower_group_norm_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  ir_tensor *dy = L_tensor(L, n, "grad_out"), *x = L_tensor(L, n, "input");
  ir_tensor *mean = L_tensor(L, n, "mean"), *rstd = L_tensor(L, n, "rstd");
  ir_tensor *w = L_tensor(L, n, "weight");
  int64_t G;
  if (!dy || !x || !mean || !rstd || !L_int(L, n, "group", &G) || G <= 0 ||
      x->rank < 3 || !L_is_float(x->dtype) || dy->rank != x->rank ||
      dy->dtype != x->dtype || x->sizes[1] % G != 0)
    return GC_EUNSUPPORTED;
  gc_dtype dt = x->dtype;
  int r = x->rank;
  int64_t N = x->sizes[0], C = x->sizes[1], D = C / G, HW = 1;
  for (int i = 0; i < r; i++)
    if (dy->sizes[i] != x->sizes[i])
      return GC_EUNSUPPORTED;
  for (int i = 2; i < r; i++)
    HW *= x->sizes[i];
  if (mean->rank != 2 || rstd->rank != 2 || mean->sizes[0] != N ||
      mean->sizes[1] != G || rstd->sizes[0] != N || rstd->sizes[1] != G ||
      (w && (w->rank != 1 || w->sizes[0] != C)) || N * C * HW == 0)
    return GC_EUNSUPPORTED;
  /* ds, db: [N, C] sums over the spatial dims */
  int64_t nc[2] = {N, C}, sp[IR_MAX_RANK];
  for (int i = 2; i < r; i++)
    sp[i - 2] = x->sizes[i];
  gc_sym **vnc = L_vars(L, 2, nc), **vsp = L_vars(L, r - 2, sp);
  if (!vnc || !vsp)
    return GC_ENOMEM;
  gc_sym *xi[IR_MAX_RANK];
  xi[0] = vnc[0];
  xi[1] = vnc[1];
  for (int i = 2; i < r; i++)
    xi[i] = vsp[i - 2];
  ir_expr *dye = L_load(L, dy, xi);
  ir_tensor *ds = sum_of(L, n, dt, 2, nc, vnc, r - 2, sp, vsp,
                         OP2(MUL, dye, L_load(L, x, xi)));
  ir_tensor *db = sum_of(L, n, dt, 2, nc, vnc, r - 2, sp, vsp, dye);
  if (!ds || !db)
    return GC_ENOMEM;
  int rc = 0;
  if (L_out_meta(n, 0)) {
    /* dsg, dbg: [N, G] sums over the group's channels */
    int64_t ng[2] = {N, G}, dd[1] = {D};
    gc_sym **vng = L_vars(L, 2, ng), **vd = L_vars(L, 1, dd);
    if (!vng || !vd)
      return GC_ENOMEM;
    gc_sym *at[2] = {vng[0], gc_sym_add(s, gc_sym_scale(s, vng[1], D), vd[0])};
    ir_expr *wv = w ? L_load(L, w, &at[1]) : NULL;
    ir_expr *dsw = L_load(L, ds, at), *dbw = L_load(L, db, at);
    if (wv) {
      dsw = OP2(MUL, dsw, wv);
      dbw = OP2(MUL, dbw, wv);
    }
    ir_tensor *dsg = sum_of(L, n, dt, 2, ng, vng, 1, dd, vd, dsw);
    ir_tensor *dbg = sum_of(L, n, dt, 2, ng, vng, 1, dd, vd, dbw);
    gc_sym **v2 = L_vars(L, 2, ng);
    if (!dsg || !dbg || !v2)
      return GC_ENOMEM;
    ir_expr *sc = ir_const_f(ir, 1.0 / (double)(D * HW), dt);
    if (dt == GC_DTYPE_FLOAT32) /* ATen: T(1) / static_cast<T>(D * HxW) */
      sc = ir_const_f(ir, (double)(1.0f / (float)(D * HW)), dt);
    ir_expr *m = L_load(L, mean, v2), *rs = L_load(L, rstd, v2);
    ir_expr *dbv = L_load(L, dbg, v2);
    ir_expr *c2 = OP2(
        MUL,
        OP2(MUL,
            OP2(MUL,
                OP2(MUL, OP2(SUB, OP2(MUL, dbv, m), L_load(L, dsg, v2)), rs),
                rs),
            rs),
        sc);
    ir_tensor *c2t = L_pointwise(L, n, dt, 2, ng, v2, c2);
    if (!c2t || !L_realize(L, c2t, NULL))
      return GC_ENOMEM;
    ir_expr *c3 = OP2(SUB, OP2(MUL, OP1(NEG, L_load(L, c2t, v2)), m),
                      OP2(MUL, OP2(MUL, dbv, rs), sc));
    ir_tensor *c3t = L_pointwise(L, n, dt, 2, ng, v2, c3);
    if (!c3t || !L_realize(L, c3t, NULL))
      return GC_ENOMEM;
    gc_sym **v = L_vars(L, r, x->sizes);
    if (!v)
      return GC_ENOMEM;
    gc_sym *gi[2] = {v[0], gc_sym_floordiv(s, v[1], D)};
    ir_expr *c1 = L_load(L, rstd, gi);
    if (w)
      c1 = OP2(MUL, c1, L_load(L, w, &v[1]));
    ir_expr *dx = OP2(ADD,
                      OP2(ADD, OP2(MUL, c1, L_load(L, dy, v)),
                          OP2(MUL, L_load(L, c2t, gi), L_load(L, x, v))),
                      L_load(L, c3t, gi));
    rc = L_set(L, n, 0, L_pointwise(L, n, dt, r, x->sizes, v, dx));
  }
  int64_t c1s[1] = {C}, n1[1] = {N};
  if (!rc && L_out_meta(n, 1)) {
    gc_sym **vc = L_vars(L, 1, c1s), **vn = L_vars(L, 1, n1);
    if (!vc || !vn)
      return GC_ENOMEM;
    gc_sym *at[2] = {vn[0], vc[0]};
    gc_sym *ag[2] = {vn[0], gc_sym_floordiv(s, vc[0], D)};
    ir_expr *e = OP2(MUL,
                     OP2(SUB, L_load(L, ds, at),
                         OP2(MUL, L_load(L, db, at), L_load(L, mean, ag))),
                     L_load(L, rstd, ag));
    ir_tensor *dw = sum_of(L, n, dt, 1, c1s, vc, 1, n1, vn, e);
    rc = dw ? L_set(L, n, 1, dw) : GC_ENOMEM;
  }
  if (!rc && L_out_meta(n, 2)) {
    gc_sym **vc = L_vars(L, 1, c1s), **vn = L_vars(L, 1, n1);
    if (!vc || !vn)
      return GC_ENOMEM;
    gc_sym *at[2] = {vn[0], vc[0]};
    ir_tensor *dbias =
        sum_of(L, n, dt, 1, c1s, vc, 1, n1, vn, L_load(L, db, at));
    rc = dbias ? L_set(L, n, 2, dbias) : GC_ENOMEM;
  }
  return rc;
}
