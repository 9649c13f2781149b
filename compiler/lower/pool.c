/*
 * pool.c: lowering of 2-D pooling over the last two dims of a 3-D or 4-D
 * input (any layout: loads go through the input's strides, outputs get
 * eager's layout, channels-last included).
 *
 * max_pool2d_with_indices: the window (at most 64 positions) is unrolled
 *   into a pointwise chain that visits the positions in ATen's order (rows,
 *   then columns) and takes a value when it is greater than the maximum so
 *   far or NaN, as ATen's CPU kernel: NaN propagates, the index of the
 *   last NaN wins, ties keep the first index, and an all -inf window gives
 *   its first position. Positions in the padding are skipped (their loads
 *   are clamped to the input and masked); the index output is the flat
 *   h * W + w of the input plane, int64.
 * avg_pool2d: a sum reduction over the window (padding positions add 0)
 *   and a pointwise division by ATen's divisor: the window clipped to the
 *   padded input (count_include_pad), to the input, or divisor_override.
 * _adaptive_avg_pool2d: window [floor(o*H/OH), ceil((o+1)*H/OH)) per
 *   output; a sum reduction over the largest window with the positions
 *   past a smaller window masked, divided by the window's height and then
 *   its width, as ATen.
 * adaptive_max_pool2d: the same windows, unrolled (the largest at most 64
 *   positions) into max_pool2d_with_indices's chain, positions past a
 *   smaller window masked; its backward is an extern call (extern.c).
 *
 * Floating dtypes only (ATen's integer pooling is declined).
 *
 * With size symbols (docs/dynamic-shapes.md) the forward rules take
 * symbolic leading dims (batch, channels): the windows are constants over
 * static planes, the leading dims are loop bounds only. A symbolic height
 * or width is declined (an ATen call).
 */
#include <math.h>
#include <string.h>

#include "compiler/lower/pointwise.h"

#define OP2(op, a, b) ir_op2(ir, IR_##op, dt, a, b)
#define WHERE(c, a, b) ir_op3(ir, IR_WHERE, dt, c, a, b)
#define AND(a, b) ir_op2(ir, IR_AND, GC_DTYPE_BOOL, a, b)
#define OR(a, b) ir_op2(ir, IR_OR, GC_DTYPE_BOOL, a, b)
#define MAX_WINDOW 64 /* unrolled max-pool windows */

/* An int[2] argument: one value means both; none gives `dflt`. */
static bool pair_arg(lower_ctx *L, const gc_node *n, const char *name,
                     const int64_t *dflt, int64_t out[2]) {
  const int64_t *v;
  int k;
  if (!L_ints(L, n, name, &v, &k))
    return false;
  if (k == 0 && dflt) {
    out[0] = dflt[0];
    out[1] = dflt[1];
    return true;
  }
  if (k != 1 && k != 2)
    return false;
  out[0] = v[0];
  out[1] = v[k - 1];
  return true;
}

/* The pooling parameters and the input. */
typedef struct pool {
  ir_tensor *x;
  int rank;     /* 3 or 4 */
  int64_t H, W; /* input plane */
  int64_t k[2], s[2], p[2], d[2];
  L__elementwise out; /* output 0 */
} pool;

/* Are the input's and the output's planes static, and the output's leading
 * dims (batch, channels) the input's, sizes or symbols? The forward rules
 * then run on graphs with size symbols in the leading dims (lower.c's
 * symbolic_rules): the window arithmetic is in constants, the leading dims
 * only index (through P->out.ssizes; P->out.sizes holds IR_SYMBOLIC
 * there). A symbolic plane is declined (an ATen call). */
static bool static_planes(lower_ctx *L, const pool *P) {
  int r = P->rank;
  if (P->H == IR_SYMBOLIC || P->W == IR_SYMBOLIC ||
      P->out.sizes[r - 2] == IR_SYMBOLIC || P->out.sizes[r - 1] == IR_SYMBOLIC)
    return false;
  gc_sym **xs =
      P->x->ssizes ? P->x->ssizes : ir_syms_of(L_ir(L), r, P->x->sizes);
  if (!xs)
    return false;
  for (int i = 0; i < r - 2; i++)
    if (P->out.ssizes[i] != xs[i])
      return false;
  return true;
}

/* The input is `self`; `reads`: the rule reads its values (not only its
 * shape, as a backward does). */
static int pool_args(lower_ctx *L, const gc_node *n, bool dilation, bool reads,
                     pool *P) {
  memset(P, 0, sizeof *P);
  P->x = L_tensor(L, n, "self");
  static const int64_t zero[2] = {0, 0}, one[2] = {1, 1};
  if (!P->x || (P->x->rank != 3 && P->x->rank != 4) ||
      !L_is_float(P->x->dtype) || !pair_arg(L, n, "kernel_size", NULL, P->k) ||
      !pair_arg(L, n, "stride", P->k, P->s) ||
      !pair_arg(L, n, "padding", zero, P->p) ||
      (dilation && !pair_arg(L, n, "dilation", one, P->d)))
    return GC_EUNSUPPORTED;
  if (!dilation)
    P->d[0] = P->d[1] = 1;
  /* (bounds on the window and the planes keep the window arithmetic below
   * from overflowing, whatever a graph says: fuzz_native found a kernel
   * of 2^63 - 1) */
  const int64_t big = INT64_C(1) << 30;
  for (int i = 0; i < 2; i++)
    if (P->k[i] <= 0 || P->s[i] <= 0 || P->p[i] < 0 || P->d[i] <= 0 ||
        P->p[i] > P->k[i] / 2 || P->k[i] > big || P->s[i] > big ||
        P->d[i] > big)
      return GC_EUNSUPPORTED; /* eager raises */
  for (int i = P->x->rank - 2; i < P->x->rank; i++)
    if (P->x->sizes[i] > (INT64_C(1) << 40))
      return GC_EUNSUPPORTED;
  /* A window reads each input element up to kh * kw times: computing an
   * inlined producer (batch norm, relu, ...) that often costs more than
   * writing it once, and its index arithmetic at the padded borders keeps
   * the pooling loop from vectorizing. Realize it unless it is a plain
   * load (Inductor's pooling lowerings hint the same). */
  if (reads && P->k[0] * P->k[1] > 1 && P->x->kind == IR_T_LOOP &&
      !P->x->realized && P->x->nops > 0 &&
      !L_realize_chosen(L, P->x, P->x->value ? &P->x->value->meta : NULL))
    return GC_ENOMEM;
  P->rank = P->x->rank;
  P->H = P->x->sizes[P->rank - 2];
  P->W = P->x->sizes[P->rank - 1];
  int rc = L__elementwise_begin(L, n, 0, &P->out);
  if (rc)
    return rc;
  if (P->out.rank != P->rank || P->out.dt != P->x->dtype)
    return GC_EUNSUPPORTED;
  return static_planes(L, P) ? 0 : GC_EUNSUPPORTED;
}

/* Is some size a constant 0 (a symbolic one is not: a loop over it runs
 * no iteration at 0)? */
static bool has_zero(int rank, const int64_t *sizes) {
  for (int i = 0; i < rank; i++)
    if (sizes[i] == 0)
      return true;
  return false;
}

/* 0 <= e < size as a bool expression; NULL when always true. */
static ir_expr *in_range(ir_graph *ir, gc_sym *e, int64_t size) {
  if (e->lo >= 0 && e->hi < size)
    return NULL;
  gc_dtype dt = GC_DTYPE_INT64;
  ir_expr *v = ir_index(ir, e, dt);
  return AND(ir_op2(ir, IR_GE, dt, v, ir_const_i(ir, 0, dt)),
             ir_op2(ir, IR_LT, dt, v, ir_const_i(ir, size, dt)));
}

static ir_expr *and_opt(ir_graph *ir, ir_expr *a, ir_expr *b) {
  return !a ? b : !b ? a : AND(a, b);
}

/* The max-pool chain over output variables v: the maximum (which 0) or
 * its flat index (which 1). */
static ir_expr *max_chain(lower_ctx *L, pool *P, gc_sym **v, int which) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_dtype dt = P->x->dtype;
  int r = P->rank;
  ir_expr *m = ir_const_f(ir, -INFINITY, dt);
  ir_expr *idx = ir_const_i(ir, -1, GC_DTYPE_INT64);
  bool unset = true, first = true; /* idx may be -1; no position yet */
  gc_sym *xi[4];
  for (int i = 0; i < r - 2; i++)
    xi[i] = v[i];
  for (int64_t kh = 0; kh < P->k[0]; kh++) {
    gc_sym *ih = gc_sym_addc(s, gc_sym_scale(s, v[r - 2], P->s[0]),
                             kh * P->d[0] - P->p[0]);
    for (int64_t kw = 0; kw < P->k[1]; kw++) {
      gc_sym *iw = gc_sym_addc(s, gc_sym_scale(s, v[r - 1], P->s[1]),
                               kw * P->d[1] - P->p[1]);
      if (!ih || !iw)
        return NULL;
      /* a position outside the input for every output is never taken */
      if (ih->hi < 0 || ih->lo >= P->H || iw->hi < 0 || iw->lo >= P->W)
        continue;
      ir_expr *inb =
          and_opt(ir, in_range(ir, ih, P->H), in_range(ir, iw, P->W));
      xi[r - 2] = L__clamp_index(s, ih, P->H - 1);
      xi[r - 1] = L__clamp_index(s, iw, P->W - 1);
      ir_expr *val = L_load(L, P->x, xi);
      ir_expr *at = ir_index(ir, gc_sym_add(s, gc_sym_scale(s, ih, P->W), iw),
                             GC_DTYPE_INT64);
      if (!val || !at)
        return NULL;
      if (first && !inb) { /* the first position: always taken */
        m = val;
        idx = at;
        unset = first = false;
        continue;
      }
      first = false;
      ir_expr *take =
          OR(ir_op2(ir, IR_GT, dt, val, m), ir_op1(ir, IR_ISNAN, dt, val));
      if (unset)
        take = OR(take, ir_op2(ir, IR_LT, GC_DTYPE_INT64, idx,
                               ir_const_i(ir, 0, GC_DTYPE_INT64)));
      take = and_opt(ir, inb, take);
      m = WHERE(take, val, m);
      idx = ir_op3(ir, IR_WHERE, GC_DTYPE_INT64, take, at, idx);
      if (!inb)
        unset = false; /* a position always inside is taken when unset */
    }
  }
  return which ? idx : m;
}

/* max_pool2d_with_indices(self, kernel_size, stride, padding, dilation,
 * ceil_mode) -> (values, indices), and max_pool2d (the same parameters;
 * torch.export's undecomposed form) -> values: the same maximum, without
 * the indices. */
int lower_max_pool2d(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  pool P;
  int rc = pool_args(L, n, true, true, &P);
  if (rc)
    return rc;
  if (P.k[0] * P.k[1] > MAX_WINDOW)
    return GC_EUNSUPPORTED;
  L__elementwise pi;
  bool indices = n->noutputs > 1;
  if (indices && (rc = L__elementwise_begin(L, n, 1, &pi)))
    return rc;
  if (indices && (pi.dt != GC_DTYPE_INT64 || pi.rank != P.rank))
    return GC_EUNSUPPORTED;
  if (has_zero(P.rank, P.out.sizes)) { /* nothing to read */
    rc = L__elementwise_finish(L, n, 0, &P.out, ir_const_f(ir, 0, P.out.dt));
    return rc || !indices
               ? rc
               : L__elementwise_finish(L, n, 1, &pi,
                                       ir_const_i(ir, 0, GC_DTYPE_INT64));
  }
  if (P.H == 0 || P.W == 0)
    return GC_EUNSUPPORTED;
  rc = L__elementwise_finish(L, n, 0, &P.out, max_chain(L, &P, P.out.vars, 0));
  return rc || !indices ? rc
                        : L__elementwise_finish(L, n, 1, &pi,
                                                max_chain(L, &P, pi.vars, 1));
}

/* A sum over a window of x: output variables ov (P->out's shape), window
 * variables rv of sizes kh x kw; the input row/column of window position
 * (rv0, rv1) are h0 + rv0 and w0 + rv1, valid below hend/wend (NULL: the
 * input's end). Positions outside contribute 0. */
static ir_tensor *window_sum(lower_ctx *L, const gc_node *n, pool *P,
                             gc_sym **ov, gc_sym *h0, gc_sym *w0,
                             const int64_t *ksz, gc_sym *hend, gc_sym *wend) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_dtype dt = P->x->dtype;
  int r = P->rank;
  gc_sym **rv = L_vars(L, 2, ksz);
  gc_sym **ks = ir_syms_of(ir, 2, ksz);
  if (!rv || !ks)
    return NULL;
  gc_sym *ih = gc_sym_add(s, h0, rv[0]), *iw = gc_sym_add(s, w0, rv[1]);
  gc_sym *xi[4];
  for (int i = 0; i < r - 2; i++)
    xi[i] = ov[i];
  xi[r - 2] = L__clamp_index(s, ih, P->H - 1);
  xi[r - 1] = L__clamp_index(s, iw, P->W - 1);
  ir_expr *inb = and_opt(ir, in_range(ir, ih, P->H), in_range(ir, iw, P->W));
  gc_dtype i64 = GC_DTYPE_INT64;
  if (hend)
    inb = and_opt(
        ir, inb,
        ir_op2(ir, IR_LT, i64, ir_index(ir, ih, i64), ir_index(ir, hend, i64)));
  if (wend)
    inb = and_opt(
        ir, inb,
        ir_op2(ir, IR_LT, i64, ir_index(ir, iw, i64), ir_index(ir, wend, i64)));
  ir_expr *val = L_load(L, P->x, xi);
  if (inb)
    val = WHERE(inb, val, ir_const_f(ir, 0, dt));
  ir_buf *b = L_sreduce(L, n, IR_RED_SUM, dt, r, P->out.ssizes, ov, 2, ks, rv,
                        val, NULL, NULL);
  return b ? ir_tensor_of_buf(ir, b) : NULL;
}

/* The window of output position (oh, ow) as ATen's average pooling
 * computes it: start (hs, ws) and end (he, we) in padded coordinates (the
 * end clamped to the padded input), their sizes' product pool_size, and
 * the part inside the input [hs0, he0) x [ws0, we0) of `valid` elements. */
typedef struct win {
  gc_sym *hs0, *ws0, *he0, *we0, *pool_size, *valid;
} win;

static bool window(gc_symctx *s, const pool *P, gc_sym *oh, gc_sym *ow,
                   win *w) {
  gc_sym *hs = gc_sym_addc(s, gc_sym_scale(s, oh, P->s[0]), -P->p[0]);
  gc_sym *ws = gc_sym_addc(s, gc_sym_scale(s, ow, P->s[1]), -P->p[1]);
  gc_sym *he = gc_sym_min(s, gc_sym_addc(s, hs, P->k[0]),
                          gc_sym_const(s, P->H + P->p[0]));
  gc_sym *we = gc_sym_min(s, gc_sym_addc(s, ws, P->k[1]),
                          gc_sym_const(s, P->W + P->p[1]));
  w->pool_size = gc_sym_mul(s, gc_sym_sub(s, he, hs), gc_sym_sub(s, we, ws));
  w->hs0 = gc_sym_max(s, hs, gc_sym_const(s, 0));
  w->ws0 = gc_sym_max(s, ws, gc_sym_const(s, 0));
  w->he0 = gc_sym_min(s, he, gc_sym_const(s, P->H));
  w->we0 = gc_sym_min(s, we, gc_sym_const(s, P->W));
  w->valid = gc_sym_mul(s, gc_sym_sub(s, w->he0, w->hs0),
                        gc_sym_sub(s, w->we0, w->ws0));
  return w->pool_size && w->valid;
}

/* ATen's divide_factor in dt: divisor_override (div != 0), else the
 * window's size with the padding (incl) or without. */
static ir_expr *divisor(ir_graph *ir, const win *w, bool incl, int64_t div,
                        gc_dtype dt) {
  return div ? ir_const_f(ir, (double)div, dt)
             : ir_cast(
                   ir,
                   ir_index(ir, incl ? w->pool_size : w->valid, GC_DTYPE_INT64),
                   dt);
}

/* count_include_pad and divisor_override (false, 0: none); false when
 * eager would refuse them. */
static bool avg_args(lower_ctx *L, const gc_node *n, bool *incl, int64_t *div) {
  *incl = true;
  *div = 0;
  L_bool(L, n, "count_include_pad", incl);
  const gc_arg *da = L_arg(L, n, "divisor_override");
  return !(da && da->kind != GC_ARG_NONE &&
           (!L_int(L, n, "divisor_override", div) || *div == 0));
}

/* avg_pool2d(self, kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override). */
int lower_avg_pool2d(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  pool P;
  int rc = pool_args(L, n, false, true, &P);
  if (rc)
    return rc;
  bool incl;
  int64_t div;
  if (!avg_args(L, n, &incl, &div))
    return GC_EUNSUPPORTED;
  gc_dtype dt = P.out.dt;
  int r = P.rank;
  if (has_zero(r, P.out.sizes))
    return L__elementwise_finish(L, n, 0, &P.out, ir_const_f(ir, 0, dt));
  if (P.H == 0 || P.W == 0)
    return GC_EUNSUPPORTED;
  gc_sym **ov = L_svars(L, r, P.out.ssizes);
  if (!ov)
    return GC_ENOMEM;
  gc_sym *h0 = gc_sym_addc(s, gc_sym_scale(s, ov[r - 2], P.s[0]), -P.p[0]);
  gc_sym *w0 = gc_sym_addc(s, gc_sym_scale(s, ov[r - 1], P.s[1]), -P.p[1]);
  ir_tensor *sum = window_sum(L, n, &P, ov, h0, w0, P.k, NULL, NULL);
  if (!sum)
    return GC_ENOMEM;
  /* ATen's divisor, over the output variables */
  gc_sym **v = P.out.vars;
  win w;
  if (!window(s, &P, v[r - 2], v[r - 1], &w))
    return GC_ENOMEM;
  ir_expr *d = divisor(ir, &w, incl, div, dt);
  ir_expr *y = OP2(DIV, L_load(L, sum, v), d);
  if (w.valid->lo <= 0) { /* a window entirely in the padding gives 0 */
    gc_dtype i64 = GC_DTYPE_INT64;
    ir_expr *empty = OR(ir_op2(ir, IR_LE, i64, ir_index(ir, w.he0, i64),
                               ir_index(ir, w.hs0, i64)),
                        ir_op2(ir, IR_LE, i64, ir_index(ir, w.we0, i64),
                               ir_index(ir, w.ws0, i64)));
    y = WHERE(empty, ir_const_f(ir, 0, dt), y);
  }
  return L__elementwise_finish(L, n, 0, &P.out, y);
}

/* avg_pool2d_backward(grad_output, self, kernel_size, stride, padding,
 * ceil_mode, count_include_pad, divisor_override): the gradient of input
 * element (ih, iw) gathers grad_output / divide_factor of every window
 * covering it. ATen scatters them, window by window in (oh, ow) order,
 * into zeros; here each input element sums the at most ceil(kh / sh) x
 * ceil(kw / sw) candidate windows in that order, starting from 0 (so a
 * lone -0.0 becomes 0.0, as ATen's), windows that do not cover it adding
 * 0.0 (which changes no sum that starts from 0.0): eager's bits. */
int lower_avg_pool2d_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  pool P;
  int rc = pool_args(L, n, false, false, &P);
  if (rc)
    return rc;
  bool incl;
  int64_t div;
  ir_tensor *g = L_tensor(L, n, "grad_output");
  int r = P.rank;
  if (!avg_args(L, n, &incl, &div) || !g || g->rank != r ||
      g->dtype != P.out.dt)
    return GC_EUNSUPPORTED;
  for (int i = 0; i < r; i++)
    if (P.out.sizes[i] != P.x->sizes[i] ||
        (i < r - 2 && g->sizes[i] != P.x->sizes[i]))
      return GC_EUNSUPPORTED;
  int64_t OH = g->sizes[r - 2], OW = g->sizes[r - 1];
  int64_t nh = (P.k[0] + P.s[0] - 1) / P.s[0],
          nw = (P.k[1] + P.s[1] - 1) / P.s[1];
  gc_dtype dt = P.out.dt, i64 = GC_DTYPE_INT64;
  if (L__numel(r, P.out.sizes) == 0 || OH == 0 || OW == 0)
    return L__elementwise_finish(L, n, 0, &P.out, ir_const_f(ir, 0, dt));
  if (nh * nw > MAX_WINDOW)
    return GC_EUNSUPPORTED;
  gc_sym **v = P.out.vars;
  gc_sym *ih = v[r - 2], *iw = v[r - 1];
  /* the last window starting at or before the element, per axis */
  gc_sym *lh = gc_sym_floordiv(s, gc_sym_addc(s, ih, P.p[0]), P.s[0]);
  gc_sym *lw = gc_sym_floordiv(s, gc_sym_addc(s, iw, P.p[1]), P.s[1]);
  ir_expr *acc = ir_const_f(ir, 0, dt);
  gc_sym *at[4];
  for (int i = 0; i < r - 2; i++)
    at[i] = v[i];
  for (int64_t j = 0; j < nh; j++) {
    gc_sym *oh = gc_sym_addc(s, lh, j - (nh - 1));
    for (int64_t k = 0; k < nw; k++) {
      gc_sym *ow = gc_sym_addc(s, lw, k - (nw - 1));
      win w;
      if (!oh || !ow || !window(s, &P, oh, ow, &w))
        return GC_ENOMEM;
      /* it covers the element: a window, ending after it (its start is
       * at or before it by the choice of oh, ow) */
      ir_expr *covers = and_opt(
          ir, and_opt(ir, in_range(ir, oh, OH), in_range(ir, ow, OW)),
          AND(ir_op2(ir, IR_LT, i64, ir_index(ir, ih, i64),
                     ir_index(ir,
                              gc_sym_addc(s, gc_sym_scale(s, oh, P.s[0]),
                                          P.k[0] - P.p[0]),
                              i64)),
              ir_op2(ir, IR_LT, i64, ir_index(ir, iw, i64),
                     ir_index(ir,
                              gc_sym_addc(s, gc_sym_scale(s, ow, P.s[1]),
                                          P.k[1] - P.p[1]),
                              i64))));
      at[r - 2] = L__clamp_index(s, oh, OH - 1);
      at[r - 1] = L__clamp_index(s, ow, OW - 1);
      ir_expr *term =
          OP2(DIV, L_load(L, g, at), divisor(ir, &w, incl, div, dt));
      acc = OP2(ADD, acc, WHERE(covers, term, ir_const_f(ir, 0, dt)));
    }
  }
  return L__elementwise_finish(L, n, 0, &P.out, acc);
}

/* _adaptive_avg_pool2d(self, output_size). */
int lower_adaptive_avg_pool2d(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  pool P;
  memset(&P, 0, sizeof P);
  P.x = L_tensor(L, n, "self");
  if (!P.x || (P.x->rank != 3 && P.x->rank != 4) || !L_is_float(P.x->dtype))
    return GC_EUNSUPPORTED;
  int rc = L__elementwise_begin(L, n, 0, &P.out);
  if (rc)
    return rc;
  int r = P.rank = P.x->rank;
  P.H = P.x->sizes[r - 2];
  P.W = P.x->sizes[r - 1];
  gc_dtype dt = P.out.dt;
  if (P.out.rank != r || dt != P.x->dtype || !static_planes(L, &P))
    return GC_EUNSUPPORTED;
  if (has_zero(r, P.out.sizes))
    return L__elementwise_finish(L, n, 0, &P.out, ir_const_f(ir, 0, dt));
  int64_t in[2] = {P.H, P.W}, on[2] = {P.out.sizes[r - 2], P.out.sizes[r - 1]};
  int64_t kmax[2];
  bool uniform[2];
  for (int a = 0; a < 2; a++) {
    if (in[a] == 0)
      return GC_EUNSUPPORTED;
    kmax[a] = 0;
    int64_t kmin = INT64_MAX;
    for (int64_t o = 0; o < on[a]; o++) {
      int64_t st = o * in[a] / on[a],
              en = ((o + 1) * in[a] + on[a] - 1) / on[a];
      kmax[a] = en - st > kmax[a] ? en - st : kmax[a];
      kmin = en - st < kmin ? en - st : kmin;
    }
    uniform[a] = kmin == kmax[a];
  }
  /* window bounds over output variables v */
  gc_sym *start[2][2], *end[2][2];
  gc_sym **ov = L_svars(L, r, P.out.ssizes);
  if (!ov)
    return GC_ENOMEM;
  gc_sym **vv[2] = {ov, P.out.vars};
  for (int k = 0; k < 2; k++)
    for (int a = 0; a < 2; a++) {
      gc_sym *o = vv[k][r - 2 + a];
      start[k][a] = gc_sym_floordiv(s, gc_sym_scale(s, o, in[a]), on[a]);
      end[k][a] = gc_sym_floordiv(
          s, gc_sym_addc(s, gc_sym_scale(s, o, in[a]), in[a] + on[a] - 1),
          on[a]);
      if (!start[k][a] || !end[k][a])
        return GC_ENOMEM;
    }
  ir_tensor *sum =
      window_sum(L, n, &P, ov, start[0][0], start[0][1], kmax,
                 uniform[0] ? NULL : end[0][0], uniform[1] ? NULL : end[0][1]);
  if (!sum)
    return GC_ENOMEM;
  gc_sym **v = P.out.vars;
  ir_expr *y = L_load(L, sum, v);
  for (int a = 0; a < 2; a++)
    y = OP2(DIV, y,
            ir_cast(ir,
                    ir_index(ir, gc_sym_sub(s, end[1][a], start[1][a]),
                             GC_DTYPE_INT64),
                    dt));
  return L__elementwise_finish(L, n, 0, &P.out, y);
}

/* Are ATen's adaptive window bounds, computed in float (start =
 * floor((float)(o * in) / out), end = ceil((float)((o + 1) * in) / out)),
 * the integer ones floor(o * in / out) and ceil((o + 1) * in / out) at
 * every output position? */
static bool adaptive_exact(int64_t in, int64_t out) {
  for (int64_t o = 0; o < out; o++) {
    int64_t st = (int64_t)floorf((float)(o * in) / (float)out);
    int64_t en = (int64_t)ceilf((float)((o + 1) * in) / (float)out);
    if (st != o * in / out || en != ((o + 1) * in + out - 1) / out)
      return false;
  }
  return true;
}

/* _adaptive_avg_pool2d_backward(grad_output, self): the gradient of input
 * element i sums grad_output / kh / kw (two divisions, as ATen) over the
 * windows covering it, o in [floor(i * out / in), ceil((i + 1) * out /
 * in) - 1] per axis, in ATen's (oh, ow) order from 0.0, the candidates
 * outside that range adding 0.0: eager's bits. */
int lower_adaptive_avg_pool2d_backward(lower_ctx *L, const gc_node *n,
                                       int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *g = L_tensor(L, n, "grad_output"), *x = L_tensor(L, n, "self");
  gc_dtype dt = p.dt, i64 = GC_DTYPE_INT64;
  int r = p.rank;
  if (!g || !x || (r != 3 && r != 4) || g->rank != r || x->rank != r ||
      g->dtype != dt || !L_is_float(dt))
    return GC_EUNSUPPORTED;
  for (int i = 0; i < r; i++)
    if (x->sizes[i] != p.sizes[i] || (i < r - 2 && g->sizes[i] != p.sizes[i]))
      return GC_EUNSUPPORTED;
  if (L__numel(r, p.sizes) == 0)
    return L__elementwise_finish(L, n, 0, &p, ir_const_f(ir, 0, dt));
  int64_t in[2], out[2], m[2];
  gc_sym *lo[2], *hi[2];
  for (int a = 0; a < 2; a++) {
    in[a] = p.sizes[r - 2 + a];
    out[a] = g->sizes[r - 2 + a];
    if (out[a] == 0 || !adaptive_exact(in[a], out[a]))
      return GC_EUNSUPPORTED;
    m[a] = (out[a] + in[a] - 1) / in[a] + 1;
    gc_sym *i = p.vars[r - 2 + a];
    lo[a] = gc_sym_floordiv(s, gc_sym_scale(s, i, out[a]), in[a]);
    hi[a] = gc_sym_addc(
        s,
        gc_sym_floordiv(
            s, gc_sym_addc(s, gc_sym_scale(s, i, out[a]), out[a] + in[a] - 1),
            in[a]),
        -1);
  }
  if (m[0] * m[1] > MAX_WINDOW)
    return GC_EUNSUPPORTED;
  ir_expr *acc = ir_const_f(ir, 0, dt);
  gc_sym *at[4];
  for (int i = 0; i < r - 2; i++)
    at[i] = p.vars[i];
  for (int64_t j = 0; j < m[0]; j++) {
    for (int64_t k = 0; k < m[1]; k++) {
      ir_expr *ok = NULL, *term;
      ir_expr *size[2];
      for (int a = 0; a < 2; a++) {
        gc_sym *o = gc_sym_addc(s, lo[a], a ? k : j);
        ok = and_opt(ir, ok,
                     AND(ir_op2(ir, IR_LE, i64, ir_index(ir, o, i64),
                                ir_index(ir, hi[a], i64)),
                         ir_op2(ir, IR_LT, i64, ir_index(ir, o, i64),
                                ir_const_i(ir, out[a], i64))));
        gc_sym *oc = L__clamp_index(s, o, out[a] - 1);
        at[r - 2 + a] = oc;
        /* the window's size: end - start, as the forward's */
        gc_sym *st = gc_sym_floordiv(s, gc_sym_scale(s, oc, in[a]), out[a]);
        gc_sym *en = gc_sym_floordiv(
            s, gc_sym_addc(s, gc_sym_scale(s, oc, in[a]), in[a] + out[a] - 1),
            out[a]);
        size[a] = ir_cast(ir, ir_index(ir, gc_sym_sub(s, en, st), i64), dt);
      }
      term = OP2(DIV, OP2(DIV, L_load(L, g, at), size[0]), size[1]);
      acc = OP2(ADD, acc, WHERE(ok, term, ir_const_f(ir, 0, dt)));
    }
  }
  return L__elementwise_finish(L, n, 0, &p, acc);
}

/* The adaptive max-pool chain over output variables v (values: which 0,
 * flat indices: 1): windows [floor(o * in / on), ceil((o + 1) * in / on))
 * visited as ATen's CPU kernel does (rows, then columns, from the first
 * position, taking a value greater than the maximum so far or NaN);
 * kmax/kmin the largest and smallest window per axis. */
static ir_expr *adaptive_max_chain(lower_ctx *L, pool *P, gc_sym **v,
                                   const int64_t *on, const int64_t *kmax,
                                   const int64_t *kmin, int which) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_dtype dt = P->x->dtype, i64 = GC_DTYPE_INT64;
  int r = P->rank;
  int64_t in[2] = {P->H, P->W};
  gc_sym *st[2], *en[2];
  for (int a = 0; a < 2; a++) {
    gc_sym *o = gc_sym_scale(s, v[r - 2 + a], in[a]);
    st[a] = gc_sym_floordiv(s, o, on[a]);
    en[a] = gc_sym_floordiv(s, gc_sym_addc(s, o, in[a] + on[a] - 1), on[a]);
    if (!st[a] || !en[a])
      return NULL;
  }
  ir_expr *m = NULL, *idx = NULL;
  gc_sym *xi[4];
  for (int i = 0; i < r - 2; i++)
    xi[i] = v[i];
  for (int64_t kh = 0; kh < kmax[0]; kh++) {
    gc_sym *ih = gc_sym_addc(s, st[0], kh);
    for (int64_t kw = 0; kw < kmax[1]; kw++) {
      gc_sym *iw = gc_sym_addc(s, st[1], kw);
      if (!ih || !iw)
        return NULL;
      xi[r - 2] = L__clamp_index(s, ih, P->H - 1);
      xi[r - 1] = L__clamp_index(s, iw, P->W - 1);
      ir_expr *val = L_load(L, P->x, xi);
      ir_expr *at =
          ir_index(ir, gc_sym_add(s, gc_sym_scale(s, ih, P->W), iw), i64);
      if (!val || !at)
        return NULL;
      if (!m) { /* the window's first position, never empty */
        m = val;
        idx = at;
        continue;
      }
      /* positions a smaller window lacks */
      ir_expr *inw = NULL;
      if (kh >= kmin[0])
        inw = ir_op2(ir, IR_LT, i64, ir_index(ir, ih, i64),
                     ir_index(ir, en[0], i64));
      if (kw >= kmin[1])
        inw = and_opt(ir, inw,
                      ir_op2(ir, IR_LT, i64, ir_index(ir, iw, i64),
                             ir_index(ir, en[1], i64)));
      ir_expr *take = and_opt(
          ir, inw,
          OR(ir_op2(ir, IR_GT, dt, val, m), ir_op1(ir, IR_ISNAN, dt, val)));
      m = WHERE(take, val, m);
      idx = ir_op3(ir, IR_WHERE, i64, take, at, idx);
    }
  }
  return which ? idx : m;
}

/* adaptive_max_pool2d(self, output_size) -> (values, indices). */
int lower_adaptive_max_pool2d(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  pool P;
  memset(&P, 0, sizeof P);
  P.x = L_tensor(L, n, "self");
  if (!P.x || (P.x->rank != 3 && P.x->rank != 4) || !L_is_float(P.x->dtype))
    return GC_EUNSUPPORTED;
  int r = P.rank = P.x->rank;
  P.H = P.x->sizes[r - 2];
  P.W = P.x->sizes[r - 1];
  L__elementwise pi;
  int rc = L__elementwise_begin(L, n, 0, &P.out);
  if (!rc)
    rc = L__elementwise_begin(L, n, 1, &pi);
  if (rc)
    return rc;
  if (P.out.rank != r || P.out.dt != P.x->dtype || pi.rank != r ||
      pi.dt != GC_DTYPE_INT64 || L__numel(r, P.out.sizes) == 0)
    return GC_EUNSUPPORTED;
  for (int i = 0; i < r; i++)
    if (pi.sizes[i] != P.out.sizes[i] ||
        (i < r - 2 && P.out.sizes[i] != P.x->sizes[i]))
      return GC_EUNSUPPORTED;
  int64_t in[2] = {P.H, P.W}, on[2] = {P.out.sizes[r - 2], P.out.sizes[r - 1]};
  int64_t kmax[2], kmin[2];
  for (int a = 0; a < 2; a++) {
    /* ATen computes the bounds in float: use them where they are exact */
    if (in[a] == 0 || in[a] > (INT64_C(1) << 24) ||
        on[a] > (INT64_C(1) << 24) || !adaptive_exact(in[a], on[a]))
      return GC_EUNSUPPORTED;
    kmax[a] = 0;
    kmin[a] = INT64_MAX;
    for (int64_t o = 0; o < on[a]; o++) {
      int64_t k = ((o + 1) * in[a] + on[a] - 1) / on[a] - o * in[a] / on[a];
      kmax[a] = k > kmax[a] ? k : kmax[a];
      kmin[a] = k < kmin[a] ? k : kmin[a];
    }
  }
  if (kmax[0] * kmax[1] > MAX_WINDOW)
    return GC_EUNSUPPORTED;
  /* each input element is read by up to kmax windows: realize a
   * computation first (as pool_args) */
  if (kmax[0] * kmax[1] > 1 && P.x->kind == IR_T_LOOP && !P.x->realized &&
      P.x->nops > 0 &&
      !L_realize_chosen(L, P.x, P.x->value ? &P.x->value->meta : NULL))
    return GC_ENOMEM;
  rc = L__elementwise_finish(
      L, n, 0, &P.out,
      adaptive_max_chain(L, &P, P.out.vars, on, kmax, kmin, 0));
  return rc ? rc
            : L__elementwise_finish(
                  L, n, 1, &pi,
                  adaptive_max_chain(L, &P, pi.vars, on, kmax, kmin, 1));
}

/* ---- nearest upsampling ---- */

/* ATen's nearest source index for output o: min(floorf(o * scale), in -
 * 1) in float, scale = 1 / scale_factor when one is given, else in / out.
 * `shortcuts` (nearest_idx) first takes o when out == in and o >> 1 when
 * out == 2 in. Which kernels take them was measured on torch 2.13's
 * eager (one-hot inputs): every backward and the 2-D forward in both
 * layouts do; the 1-D and 3-D forwards do not, channels-last 3-D included
 * (a scale factor of 1.1 on 2 elements: out == in, index floor(o / 1.1)).
 * Torch 1.13 differed: its channels-last forwards took them, its generic
 * 2-D forward did not. */
static int64_t nearest_src(int64_t in, int64_t out, float scale, bool shortcuts,
                           int64_t o) {
  if (shortcuts && out == in)
    return o;
  if (shortcuts && out == 2 * in)
    return o >> 1;
  int64_t src = (int64_t)floorf((float)o * scale);
  return src > in - 1 ? in - 1 : src;
}

/* The source index as floor(o * num / den), where that is ATen's at every
 * output index: in / out when it is, else any fraction num / 2^k inside
 * the interval ATen's indices allow (max over o of src / o, min of (src +
 * 1) / o: a scale factor of 1.7 gives 1 / 1.7 in float, not 4 / 6). The
 * index arithmetic can simplify and invert that form. False: decline. */
static bool nearest_form(int64_t in, int64_t out, bool has_sf, double sf,
                         bool shortcuts, int64_t *num, int64_t *den) {
  if (in <= 0 || out <= 0 || out > (INT64_C(1) << 24))
    return false;
  float scale = has_sf && sf > 0 ? (float)(1.0 / sf) : (float)in / (float)out;
  bool ok = true;
  /* lo = ln / ld <= q < up = un / ud */
  int64_t ln = 0, ld = 1, un = 1, ud = 0; /* [0, infinity) */
  for (int64_t o = 0; o < out; o++) {
    int64_t src = nearest_src(in, out, scale, shortcuts, o);
    ok = ok && src == o * in / out;
    if (o == 0) {
      if (src != 0)
        return false;
      continue;
    }
    if ((__int128)src * ld > (__int128)ln * o) /* src / o > lo */
      ln = src, ld = o;
    if (ud == 0 || (__int128)(src + 1) * ud < (__int128)un * o)
      un = src + 1, ud = o;
  }
  if (ok) {
    *num = in;
    *den = out;
    return true;
  }
  if (ud == 0 || (__int128)ln * ud >= (__int128)un * ld)
    return false; /* empty: not of the form floor(o q) */
  /* num and den below 2^36: times an index below 2^24 they fit int64 */
  for (int k = 0; k <= 35; k++) {
    __int128 d = (__int128)1 << k;
    __int128 n = ((__int128)ln * d + ld - 1) / ld; /* ceil(lo 2^k) */
    if (n * ud < (__int128)un * d && n < ((__int128)1 << 36)) {
      *num = (int64_t)n;
      *den = (int64_t)d;
      return true;
    }
  }
  return false;
}

/* upsample_nearest1d/2d/3d(.vec): out[n, c, o...] = x[n, c, floor(o * in /
 * out)...] per spatial axis, where that is ATen's float index for every
 * output position (nearest_form). */
int lower_upsample_nearest(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  const char *xname = L_arg(L, n, "input") ? "input" : "self";
  ir_tensor *x = L_tensor(L, n, xname);
  int d = p.rank - 2;
  /* torch 2's 2-D kernels take nearest_idx's shortcuts, its 1-D and 3-D
   * kernels do not (nearest_src) */
  bool shortcuts = d == 2;
  bool has[3];
  double sf[3];
  if (!x || x->rank != p.rank || d < 1 || d > 3 || x->dtype != p.odt ||
      x->sizes[0] != p.sizes[0] || x->sizes[1] != p.sizes[1] ||
      !L_upsample_scales(L, n, d, has, sf) ||
      !L_upsample_out_sizes(L, n, d, x->sizes + 2, p.sizes + 2, has, sf))
    return GC_EUNSUPPORTED;
  if (L__numel(p.rank, p.sizes) == 0)
    return L__elementwise_finish(L, n, 0, &p, ir_const_f(ir, 0, p.odt));
  gc_sym *at[5] = {p.vars[0], p.vars[1]};
  for (int i = 2; i < p.rank; i++) {
    int64_t in = x->sizes[i], out = p.sizes[i];
    int64_t num, den;
    if (!nearest_form(in, out, has[i - 2], sf[i - 2], shortcuts, &num, &den))
      return GC_EUNSUPPORTED;
    at[i] = gc_sym_floordiv(s, gc_sym_scale(s, p.vars[i], num), den);
  }
  return L__elementwise_finish(L, n, 0, &p, L_load(L, x, at));
}

/* upsample_nearest1d/2d/3d_backward(.vec): the gradient of input element
 * i (per spatial axis) sums grad_output over the output positions that
 * copied it, o in [ceil(i * den / num), ceil((i + 1) * den / num)) per
 * axis (the source index floor(o * num / den), nearest_form): at most
 * ceil(den / num) each. ATen adds them into zeros in the output's
 * order (the first spatial axis outermost); so does this sum, from 0.0,
 * positions outside the range adding 0.0. */
int lower_upsample_nearest_backward(lower_ctx *L, const gc_node *n,
                                    int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *g = L_tensor(L, n, "grad_output");
  int d = p.rank - 2;
  bool has[3];
  double sf[3];
  const int64_t *isz;
  int k;
  gc_dtype dt = p.dt, i64 = GC_DTYPE_INT64;
  if (!g || g->rank != p.rank || d < 1 || d > 3 || g->dtype != dt ||
      g->sizes[0] != p.sizes[0] || g->sizes[1] != p.sizes[1] ||
      !L_upsample_scales(L, n, d, has, sf) ||
      !L_upsample_out_sizes(L, n, d, p.sizes + 2, g->sizes + 2, has, sf))
    return GC_EUNSUPPORTED;
  /* the input size ATen reads from the arguments is the metadata's */
  if (!L_ints(L, n, "input_size", &isz, &k) || k != p.rank)
    return GC_EUNSUPPORTED;
  for (int i = 0; i < p.rank; i++)
    if (isz[i] != p.sizes[i])
      return GC_EUNSUPPORTED;
  if (L__numel(p.rank, p.sizes) == 0)
    return L__elementwise_finish(L, n, 0, &p, ir_const_f(ir, 0, dt));
  int64_t m[3], window = 1;
  gc_sym *lo[3];
  gc_sym *hi[3];
  for (int a = 0; a < d; a++) {
    int64_t in = p.sizes[a + 2], out = g->sizes[a + 2];
    int64_t num, den;
    if (!nearest_form(in, out, has[a], sf[a], true, &num, &den))
      return GC_EUNSUPPORTED;
    /* the outputs o with floor(o * num / den) = i: [ceil(i * den / num),
     * ceil((i + 1) * den / num)), at most ceil(den / num) */
    m[a] = (den + num - 1) / num;
    window *= m[a];
    if (window > MAX_WINDOW)
      return GC_EUNSUPPORTED;
    gc_sym *v = gc_sym_scale(s, p.vars[a + 2], den);
    lo[a] = gc_sym_floordiv(s, gc_sym_addc(s, v, num - 1), num);
    hi[a] = gc_sym_floordiv(s, gc_sym_addc(s, v, den + num - 1), num);
  }
  ir_expr *acc = ir_const_f(ir, 0, dt);
  gc_sym *at[5] = {p.vars[0], p.vars[1]};
  int64_t j[3] = {0, 0, 0}; /* the window position, last axis fastest */
  for (int64_t w = 0; w < window; w++) {
    ir_expr *ok = NULL;
    for (int a = 0; a < d; a++) {
      int64_t out = g->sizes[a + 2];
      gc_sym *o = gc_sym_addc(s, lo[a], j[a]);
      /* o < ceil((i + 1) * den / num), and inside the output */
      ir_expr *c = AND(ir_op2(ir, IR_LT, i64, ir_index(ir, o, i64),
                              ir_index(ir, hi[a], i64)),
                       ir_op2(ir, IR_LT, i64, ir_index(ir, o, i64),
                              ir_const_i(ir, out, i64)));
      ok = and_opt(ir, ok, c);
      at[a + 2] = L__clamp_index(s, o, out - 1);
    }
    acc = OP2(ADD, acc, WHERE(ok, L_load(L, g, at), ir_const_f(ir, 0, dt)));
    for (int a = d - 1; a >= 0 && ++j[a] == m[a]; a--)
      j[a] = 0;
  }
  return L__elementwise_finish(L, n, 0, &p, acc);
}
