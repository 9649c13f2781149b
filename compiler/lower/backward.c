/*
 * backward.c: lowering rules for the backward operators AOTAutograd's
 * backward graphs contain.
 *
 * Activation backwards (threshold_backward, gelu_backward, ...) are
 * elementwise formulas of the incoming gradient and the forward's input
 * or result (pointwise.h), written as ATen's CPU kernels compute them.
 * ATen's vectorized loops and scalar tails disagree on a few inputs (a
 * NaN in hardtanh_backward, elu_backward, hardswish_backward, the shrink
 * backwards; hardswish_backward at exactly 3): the vectorized loop's
 * answer is kept, it is what all but the last few elements get.
 *
 * Normalization backwards (softmax, layer, batch and group norm) are
 * norm_backward.c.
 */
#include <math.h>
#include <string.h>

#include "compiler/lower/pointwise.h"

#define OP1(op, a) ir_op1(ir, IR_##op, dt, a)
#define OP2(op, a, b) ir_op2(ir, IR_##op, dt, a, b)
#define WHERE(c, a, b) ir_op3(ir, IR_WHERE, dt, c, a, b)
#define AND(a, b) ir_op2(ir, IR_AND, GC_DTYPE_BOOL, a, b)
#define OR(a, b) ir_op2(ir, IR_OR, GC_DTYPE_BOOL, a, b)

/* Output 0 (floating), and the gradient and the forward's value as g and
 * x in its dtype. */
static int begin2(lower_ctx *L, const gc_node *n, const char *gname,
                  const char *xname, L__elementwise *p, ir_expr **g,
                  ir_expr **x) {
  int rc = L__elementwise_begin(L, n, 0, p);
  if (rc)
    return rc;
  if (!L_is_float(p->dt))
    return GC_EUNSUPPORTED;
  *g = L__operand_at(L, n, p, gname, p->dt);
  *x = L__operand_at(L, n, p, xname, p->dt);
  return *g && *x ? 0 : GC_EUNSUPPORTED;
}

/* ---- activation backwards ---- */

/* threshold_backward(grad_output, self, threshold): 0 where self <=
 * threshold, else the gradient (relu's backward). */
int lower_threshold_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_expr *g = L__operand_at(L, n, &p, "grad_output", dt);
  ir_expr *x = L__operand_at(L, n, &p, "self", dt), *th = NULL;
  if (!g || !x || dt == GC_DTYPE_BOOL ||
      !L__scalar_as(L, n, "threshold", dt, &th))
    return GC_EUNSUPPORTED;
  return L__elementwise_finish(L, n, 0, &p,
                               WHERE(OP2(LE, x, th), ir_const_i(ir, 0, dt), g));
}

/* gelu's derivative at x, exact ("none") form: cdf + x * pdf. */
static ir_expr *gelu_grad_erf(lower_ctx *L, gc_dtype dt, ir_expr *x) {
  ir_graph *ir = L_ir(L);
  ir_expr *cdf =
      OP2(MUL, L__float_const(L, 0.5, dt),
          OP2(ADD, L__float_const(L, 1, dt),
              OP1(ERF, OP2(MUL, x, L__float_const(L, M_SQRT1_2, dt)))));
  ir_expr *pdf =
      OP2(MUL, L__float_const(L, M_2_SQRTPI * M_SQRT1_2 * 0.5, dt),
          OP1(EXP, OP2(MUL, OP2(MUL, x, x), L__float_const(L, -0.5, dt))));
  return OP2(ADD, cdf, OP2(MUL, x, pdf));
}

/* gelu's derivative at x, tanh form, in ATen's steps. */
static ir_expr *gelu_grad_tanh(lower_ctx *L, gc_dtype dt, ir_expr *x) {
  ir_graph *ir = L_ir(L);
  ir_expr *beta = L__float_const(L, M_SQRT2 * M_2_SQRTPI * 0.5, dt);
  ir_expr *kappa = L__float_const(L, 0.044715, dt);
  ir_expr *one = L__float_const(L, 1, dt), *half = L__float_const(L, 0.5, dt);
  ir_expr *x_sq = OP2(MUL, x, x);
  ir_expr *x_cube = OP2(MUL, x_sq, x);
  ir_expr *t = OP1(TANH, OP2(MUL, beta, OP2(ADD, x, OP2(MUL, kappa, x_cube))));
  ir_expr *left = OP2(MUL, half, x);
  ir_expr *left_d = OP2(MUL, half, OP2(ADD, one, t));
  ir_expr *tanh_d = OP2(SUB, one, OP2(MUL, t, t));
  ir_expr *k3 =
      L__float_const(L, 3 * kappa->k.f, dt); /* scalar_t(3) * kKappa */
  ir_expr *inner_d = OP2(MUL, beta, OP2(ADD, one, OP2(MUL, k3, x_sq)));
  ir_expr *right_d = OP2(MUL, OP2(MUL, left, tanh_d), inner_d);
  return OP2(ADD, left_d, right_d);
}

/* gelu_backward(grad_output, self, approximate) */
int lower_gelu_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *g, *x;
  int rc = begin2(L, n, "grad_output", "self", &p, &g, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  const gc_arg *ap = L_arg(L, n, "approximate");
  bool th = ap && ap->kind == GC_ARG_STRING && !strcmp(ap->s, "tanh");
  if (ap && ap->kind == GC_ARG_STRING && !th && strcmp(ap->s, "none"))
    return GC_EUNSUPPORTED;
  ir_expr *d = th ? gelu_grad_tanh(L, dt, x) : gelu_grad_erf(L, dt, x);
  return L__elementwise_finish(L, n, 0, &p, OP2(MUL, g, d));
}

/* native_dropout_backward(grad_output, mask, scale): g * mask * scale, as
 * ATen (the mask, bool from native_dropout, a 0/1 factor; the scale a
 * number in the gradient's dtype). */
int lower_native_dropout_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *g, *m;
  double scale;
  int rc = begin2(L, n, "grad_output", "mask", &p, &g, &m);
  if (rc)
    return rc;
  if (!L_float(L, n, "scale", &scale))
    return GC_EUNSUPPORTED;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  return L__elementwise_finish(
      L, n, 0, &p, OP2(MUL, OP2(MUL, g, m), L__float_const(L, scale, dt)));
}

/* silu_backward(grad_output, self): g * s * (1 + x * (1 - s)), s the
 * sigmoid of x. */
int lower_silu_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *g, *x;
  int rc = begin2(L, n, "grad_output", "self", &p, &g, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_expr *one = L__float_const(L, 1, dt), *s = OP1(SIGMOID, x);
  return L__elementwise_finish(
      L, n, 0, &p,
      OP2(MUL, OP2(MUL, g, s), OP2(ADD, one, OP2(MUL, x, OP2(SUB, one, s)))));
}

/* mish_backward(grad_output, self): g * (t + x * s * (1 - t * t)), s the
 * sigmoid of x and t = tanh(log1p(exp(x))), as ATen's CPU kernel (torch 2
 * keeps this operator in backward graphs; torch 1.13 decomposed it). */
int lower_mish_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *g, *x;
  int rc = begin2(L, n, "grad_output", "self", &p, &g, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_expr *one = L__float_const(L, 1, dt), *s = OP1(SIGMOID, x);
  ir_expr *t = OP1(TANH, OP1(LOG1P, OP1(EXP, x)));
  return L__elementwise_finish(
      L, n, 0, &p,
      OP2(MUL, g,
          OP2(ADD, t,
              OP2(MUL, OP2(MUL, x, s), OP2(SUB, one, OP2(MUL, t, t))))));
}

/* sigmoid_backward(grad_output, output): g * (1 - y) * y (param 0);
 * tanh_backward: g * (1 - y * y) (param 1). */
int lower_sigmoid_backward(lower_ctx *L, const gc_node *n, int is_tanh) {
  L__elementwise p;
  ir_expr *g, *y;
  int rc = begin2(L, n, "grad_output", "output", &p, &g, &y);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_expr *one = L__float_const(L, 1, dt);
  return L__elementwise_finish(
      L, n, 0, &p,
      is_tanh ? OP2(MUL, g, OP2(SUB, one, OP2(MUL, y, y)))
              : OP2(MUL, OP2(MUL, g, OP2(SUB, one, y)), y));
}

/* hardtanh_backward(grad_output, self, min_val, max_val): g strictly
 * between the bounds, else 0 (NaN gives 0). */
int lower_hardtanh_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *g, *x, *lo, *hi;
  int rc = begin2(L, n, "grad_output", "self", &p, &g, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (!L__scalar_as(L, n, "min_val", dt, &lo) ||
      !L__scalar_as(L, n, "max_val", dt, &hi))
    return GC_EUNSUPPORTED;
  return L__elementwise_finish(
      L, n, 0, &p,
      WHERE(AND(OP2(GT, x, lo), OP2(LT, x, hi)), g, L__float_const(L, 0, dt)));
}

/* leaky_relu_backward(grad_output, self, negative_slope, self_is_result):
 * self > 0 ? g : g * slope. */
int lower_leaky_relu_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *g, *x, *slope;
  int rc = begin2(L, n, "grad_output", "self", &p, &g, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (!L__scalar_as(L, n, "negative_slope", dt, &slope))
    return GC_EUNSUPPORTED;
  return L__elementwise_finish(
      L, n, 0, &p,
      WHERE(OP2(GT, x, L__float_const(L, 0, dt)), g, OP2(MUL, g, slope)));
}

/* elu_backward(grad_output, alpha, scale, input_scale, is_result,
 * self_or_result): for b > 0 g * scale, else (from the result)
 * g * input_scale * (b + alpha * scale) or (from the input)
 * g * input_scale * (alpha * scale) * exp(b * input_scale). */
int lower_elu_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *g, *b;
  double alpha, scale, iscale;
  bool is_result;
  int rc = begin2(L, n, "grad_output", "self_or_result", &p, &g, &b);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (!L_float(L, n, "alpha", &alpha) || !L_float(L, n, "scale", &scale) ||
      !L_float(L, n, "input_scale", &iscale) ||
      !L_bool(L, n, "is_result", &is_result))
    return GC_EUNSUPPORTED;
  ir_expr *pos = L__float_const(L, scale, dt),
          *ipt = L__float_const(L, iscale, dt);
  ir_expr *neg =
      L__float_const(L, L__float_const(L, alpha, dt)->k.f * pos->k.f, dt);
  ir_expr *gi = OP2(MUL, g, ipt), *r;
  if (is_result)
    r = OP2(MUL, gi, OP2(ADD, b, neg));
  else
    r = OP2(MUL, OP2(MUL, gi, neg), OP1(EXP, OP2(MUL, b, ipt)));
  return L__elementwise_finish(
      L, n, 0, &p,
      WHERE(OP2(GT, b, L__float_const(L, 0, dt)), OP2(MUL, g, pos), r));
}

/* softplus_backward(grad_output, self, beta, threshold): g where
 * x * beta > threshold, else g * z / (z + 1), z = exp(x * beta). */
int lower_softplus_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *g, *x, *beta, *th;
  int rc = begin2(L, n, "grad_output", "self", &p, &g, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (!L__scalar_as(L, n, "beta", dt, &beta) ||
      !L__scalar_as(L, n, "threshold", dt, &th))
    return GC_EUNSUPPORTED;
  ir_expr *xb = OP2(MUL, x, beta), *z = OP1(EXP, xb);
  return L__elementwise_finish(
      L, n, 0, &p,
      WHERE(OP2(GT, xb, th), g,
            OP2(DIV, OP2(MUL, g, z), OP2(ADD, z, L__float_const(L, 1, dt)))));
}

/* hardsigmoid_backward (param 0): g / 6 (times 1.0f / 6.0f, as ATen)
 * strictly inside (-3, 3), else 0; hardswish_backward (param 1): 0 below
 * -3, g from 3 on, else g * (x / 3 + 0.5). */
int lower_hardsigmoid_backward(lower_ctx *L, const gc_node *n, int swish) {
  L__elementwise p;
  ir_expr *g, *x;
  int rc = begin2(L, n, "grad_output", "self", &p, &g, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_expr *three = L__float_const(L, 3, dt), *m3 = L__float_const(L, -3, dt);
  ir_expr *zero = L__float_const(L, 0, dt);
  if (!swish)
    return L__elementwise_finish(
        L, n, 0, &p,
        WHERE(AND(OP2(GT, x, m3), OP2(LT, x, three)),
              OP2(MUL, g, L__float_const(L, (double)(1.0f / 6.0f), dt)), zero));
  ir_expr *mid =
      OP2(MUL, g, OP2(ADD, OP2(DIV, x, three), L__float_const(L, 0.5, dt)));
  return L__elementwise_finish(
      L, n, 0, &p,
      WHERE(OP2(LT, x, m3), zero, WHERE(OP2(GE, x, three), g, mid)));
}

/* hardshrink_backward / softshrink_backward(grad, self, lambd): g outside
 * [-lambd, lambd], else 0 (NaN gives 0). */
int lower_shrink_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *g, *x, *l;
  const char *gname = L_arg(L, n, "grad_out") ? "grad_out" : "grad_output";
  int rc = begin2(L, n, gname, "self", &p, &g, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (!L__scalar_as(L, n, "lambd", dt, &l))
    return GC_EUNSUPPORTED;
  ir_expr *out = OR(OP2(LT, x, OP1(NEG, l)), OP2(GT, x, l));
  return L__elementwise_finish(L, n, 0, &p,
                               WHERE(out, g, L__float_const(L, 0, dt)));
}

/* log_sigmoid_backward(grad_output, self, buffer):
 * (max_deriv - sign * (b / (1 + b))) * g, max_deriv and sign 1, 1 for
 * x < 0 and 0, -1 otherwise. */
int lower_log_sigmoid_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *g, *x, *b;
  int rc = begin2(L, n, "grad_output", "self", &p, &g, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (!(b = L__operand_at(L, n, &p, "buffer", dt)))
    return GC_EUNSUPPORTED;
  ir_expr *one = L__float_const(L, 1, dt),
          *neg = OP2(LT, x, L__float_const(L, 0, dt));
  ir_expr *md = WHERE(neg, one, L__float_const(L, 0, dt));
  ir_expr *sign = WHERE(neg, one, L__float_const(L, -1, dt));
  ir_expr *q = OP2(DIV, b, OP2(ADD, one, b));
  return L__elementwise_finish(L, n, 0, &p,
                               OP2(MUL, OP2(SUB, md, OP2(MUL, sign, q)), g));
}

/* logit_backward(grad_output, self, eps): g / (x * (1 - x)) inside the
 * domain ([0, 1], or [eps, 1 - eps] when eps >= 0), else NaN (no eps) or
 * 0. */
int lower_logit_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *g, *x;
  double eps = -1;
  int rc = begin2(L, n, "grad_output", "self", &p, &g, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  const gc_arg *a = L_arg(L, n, "eps");
  if (a && a->kind != GC_ARG_NONE && !L_float(L, n, "eps", &eps))
    return GC_EUNSUPPORTED;
  ir_expr *one = L__float_const(L, 1, dt);
  ir_expr *lo = L__float_const(L, eps < 0 ? 0 : eps, dt);
  ir_expr *hi = eps < 0 ? one : OP2(SUB, one, lo);
  ir_expr *d = OP2(DIV, g, OP2(MUL, x, OP2(SUB, one, x)));
  ir_expr *in = AND(OP2(GE, x, lo), OP2(LE, x, hi));
  return L__elementwise_finish(
      L, n, 0, &p, WHERE(in, d, L__float_const(L, eps < 0 ? NAN : 0, dt)));
}

/* glu_backward(grad_output, self, dim): with a and b the halves of self
 * along dim and s = sigmoid(b), the first half of the gradient is s * g
 * and the second (1 - s) * s * a * g (ATen's order). One loop over self's
 * shape reads both halves at the position modulo the half size. */
int lower_glu_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_tensor *x = L_tensor(L, n, "self"), *gt = L_tensor(L, n, "grad_output");
  int64_t dim;
  if (!x || !gt || !L_int(L, n, "dim", &dim) || !L_is_float(dt) ||
      x->rank != p.rank || gt->rank != p.rank || p.rank == 0)
    return GC_EUNSUPPORTED;
  if (dim < 0)
    dim += p.rank;
  if (dim < 0 || dim >= p.rank || p.sizes[dim] % 2)
    return GC_EUNSUPPORTED;
  int64_t h = p.sizes[dim] / 2;
  if (h == 0)
    return L__elementwise_finish(L, n, 0, &p, L__float_const(L, 0, dt));
  gc_sym *ai[IR_MAX_RANK], *bi[IR_MAX_RANK];
  for (int i = 0; i < p.rank; i++)
    ai[i] = bi[i] = p.vars[i];
  ai[dim] = gc_sym_mod(&ir->sym, p.vars[dim], h);
  bi[dim] = gc_sym_addc(&ir->sym, ai[dim], h);
  ir_expr *a = ir_cast(ir, L_load(L, x, ai), dt);
  ir_expr *s = OP1(SIGMOID, ir_cast(ir, L_load(L, x, bi), dt));
  ir_expr *g = ir_cast(ir, L_load(L, gt, ai), dt);
  ir_expr *second = OP2(
      MUL, OP2(MUL, OP2(MUL, OP2(SUB, L__float_const(L, 1, dt), s), s), a), g);
  ir_expr *first_half = ir_op2(ir, IR_LT, GC_DTYPE_INT64,
                               ir_index(ir, p.vars[dim], GC_DTYPE_INT64),
                               ir_const_i(ir, h, GC_DTYPE_INT64));
  return L__elementwise_finish(L, n, 0, &p,
                               WHERE(first_half, OP2(MUL, s, g), second));
}

/* mse_loss_backward(grad_output, self, target, reduction):
 * norm * (self - target) * g, norm 2 / numel for a mean, else 2. */
int lower_mse_loss_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *g, *x, *t;
  int64_t red;
  int rc = begin2(L, n, "grad_output", "self", &p, &g, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_tensor *self = L_tensor(L, n, "self");
  if (!(t = L__operand_at(L, n, &p, "target", dt)) ||
      !L_int(L, n, "reduction", &red) || red < 0 || red > 2 || !self)
    return GC_EUNSUPPORTED;
  int64_t numel = 1;
  for (int i = 0; i < self->rank; i++)
    numel *= self->sizes[i];
  double norm = red == 1 ? 2.0 / (double)numel : 2.0;
  return L__elementwise_finish(
      L, n, 0, &p,
      OP2(MUL, OP2(MUL, L__float_const(L, norm, dt), OP2(SUB, x, t)), g));
}

/* nll_loss_backward(grad_output, self, target, weight, reduction,
 * ignore_index, total_weight): element [i, j] is -w[j] * g (g divided by
 * total_weight for a mean, g[i] without reduction) where target[i] is j
 * and not ignore_index, else 0. A target out of range leaves its row 0
 * (eager's forward has already refused it). */
int lower_nll_loss_backward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_tensor *t = L_tensor(L, n, "target"), *w = L_tensor(L, n, "weight");
  ir_tensor *go = L_tensor(L, n, "grad_output");
  ir_tensor *tw = L_tensor(L, n, "total_weight");
  int64_t red, ignore;
  if (!L_is_float(dt) || !t || !go || !tw || p.rank < 1 || p.rank > 2 ||
      t->rank != p.rank - 1 || !L_int(L, n, "reduction", &red) ||
      !L_int(L, n, "ignore_index", &ignore) || tw->rank != 0 ||
      (w && (w->rank != 1 || w->sizes[0] != p.sizes[p.rank - 1])))
    return GC_EUNSUPPORTED;
  gc_sym *row = p.rank == 2 ? p.vars[0] : NULL, *col = p.vars[p.rank - 1];
  ir_expr *tv = ir_cast(ir, L_load(L, t, &row), GC_DTYPE_INT64);
  ir_expr *g;
  if (red == 0 && go->rank == t->rank)
    g = L_load(L, go, &row); /* no reduction: one gradient per row */
  else if (go->rank == 0)
    g = L_load(L, go, NULL);
  else
    return GC_EUNSUPPORTED;
  g = ir_cast(ir, g, dt);
  if (red == 1)
    g = OP2(DIV, g, ir_cast(ir, L_load(L, tw, NULL), dt));
  ir_expr *wv =
      w ? ir_cast(ir, L_load(L, w, &col), dt) : L__float_const(L, 1, dt);
  ir_expr *j = ir_index(ir, col, GC_DTYPE_INT64);
  ir_expr *hit = AND(ir_op2(ir, IR_EQ, GC_DTYPE_INT64, tv, j),
                     ir_op2(ir, IR_NE, GC_DTYPE_INT64, tv,
                            ir_const_i(ir, ignore, GC_DTYPE_INT64)));
  return L__elementwise_finish(
      L, n, 0, &p,
      WHERE(hit, OP2(MUL, wv, OP1(NEG, g)), L__float_const(L, 0, dt)));
}
