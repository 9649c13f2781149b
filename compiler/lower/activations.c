/*
 * activations.c: lowering rules for activation functions (relu, gelu,
 * silu, hardtanh, hardsigmoid, elu, softplus, shrinks, glu, prelu, ...).
 *
 * Each is an elementwise formula (pointwise.h) written as ATen's CPU
 * kernel computes it, in the same order of operations and with its
 * constants converted to the tensor's dtype first (elu's negative
 * coefficient alpha * scale is a product of two floats for float32, as
 * ATen's). Where ATen's vectorized loop and its scalar tail disagree (a
 * NaN input of hardshrink), the vectorized loop's answer is kept: it is
 * what all but the last few elements get.
 *
 * All are floating-point only (ATen dispatches them over floating types)
 * except relu, threshold and hardtanh, which also take integers; an
 * integer computation with a float number that torch would truncate is
 * declined. glu reads both halves of its input through index arithmetic
 * (no copy); log_sigmoid_forward sets both its outputs (the result and
 * the buffer its backward reads).
 */
#include <math.h>
#include <string.h>

#include "compiler/lower/pointwise.h"

#define OP1(op, a) ir_op1(ir, IR_##op, dt, a)
#define OP2(op, a, b) ir_op2(ir, IR_##op, dt, a, b)
#define WHERE(c, a, b) ir_op3(ir, IR_WHERE, dt, c, a, b)

/* A floating activation's setup: output 0, its dtype float, and x = self
 * (or `name`) loaded in it. */
static int begin_float(lower_ctx *L, const gc_node *n, const char *name,
                       L__elementwise *p, ir_expr **x) {
  int rc = L__elementwise_begin(L, n, 0, p);
  if (rc)
    return rc;
  if (!L_is_float(p->dt))
    return GC_EUNSUPPORTED;
  *x = L__operand_at(L, n, p, name, p->dt);
  return *x ? 0 : GC_EUNSUPPORTED;
}

/* A Scalar argument in dt (false when absent or torch would refuse). */
static bool scalar(lower_ctx *L, const gc_node *n, const char *name,
                   gc_dtype dt, ir_expr **k) {
  return L__scalar_as(L, n, name, dt, k);
}

/* ---- rectifiers and clamps ---- */

/* relu: ATen's clamp_min(x, 0): -0.0 and NaN stay. */
int lower_relu(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (dt == GC_DTYPE_BOOL)
    return GC_EUNSUPPORTED;
  ir_expr *x = L__operand_at(L, n, &p, "self", dt);
  if (!x)
    return GC_EUNSUPPORTED;
  return L__elementwise_finish(L, n, 0, &p,
                               L__clamp_lo(ir, dt, x, ir_const_i(ir, 0, dt)));
}

/* A hardtanh bound of an integer tensor: ATen truncates it to an integer
 * (torch refuses negative bounds for uint8); false when it does not fit
 * the dtype. */
static bool int_bound(lower_ctx *L, const gc_node *n, const char *name,
                      gc_dtype dt, ir_expr **k) {
  double v;
  if (!L_float(L, n, name, &v) || !(fabs(v) < 9e18))
    return false;
  int64_t i = (int64_t)v;
  int bits = gc_dtype_size(dt) * 8;
  int64_t lo = dt == GC_DTYPE_UINT8 ? 0
               : bits == 64         ? INT64_MIN
                                    : -((int64_t)1 << (bits - 1));
  int64_t hi = dt == GC_DTYPE_UINT8 ? 255
               : bits == 64         ? INT64_MAX
                                    : ((int64_t)1 << (bits - 1)) - 1;
  if (i < lo || i > hi)
    return false;
  *k = ir_const_i(L_ir(L), i, dt);
  return true;
}

/* hardtanh(self, min_val, max_val) (relu6 is hardtanh(0, 6)): ATen's
 * clamp with Scalar bounds. */
int lower_hardtanh(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_expr *x = L__operand_at(L, n, &p, "self", dt), *lo, *hi;
  if (!x || dt == GC_DTYPE_BOOL)
    return GC_EUNSUPPORTED;
  if (L_is_float(dt)) {
    double a, b;
    if (!L_float(L, n, "min_val", &a) || !L_float(L, n, "max_val", &b))
      return GC_EUNSUPPORTED;
    lo = L__float_const(L, a, dt);
    hi = L__float_const(L, b, dt);
  } else if (!int_bound(L, n, "min_val", dt, &lo) ||
             !int_bound(L, n, "max_val", dt, &hi)) {
    return GC_EUNSUPPORTED;
  }
  return L__elementwise_finish(
      L, n, 0, &p, L__clamp_hi(ir, dt, L__clamp_lo(ir, dt, x, lo), hi));
}

/* threshold(self, threshold, value): value where x <= threshold, else x
 * (NaN stays); any dtype but bool, numbers in it. */
int lower_threshold(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_expr *x = L__operand_at(L, n, &p, "self", dt), *th, *v;
  if (!x || dt == GC_DTYPE_BOOL || !scalar(L, n, "threshold", dt, &th) ||
      !scalar(L, n, "value", dt, &v))
    return GC_EUNSUPPORTED;
  return L__elementwise_finish(L, n, 0, &p, WHERE(OP2(LE, x, th), v, x));
}

/* leaky_relu(self, negative_slope): x > 0 ? x : x * slope. */
static ir_expr *leaky(ir_graph *ir, gc_dtype dt, ir_expr *x, ir_expr *slope) {
  return WHERE(OP2(GT, x, ir_const_f(ir, 0, dt)), x, OP2(MUL, x, slope));
}

int lower_leaky_relu(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *x, *slope;
  int rc = begin_float(L, n, "self", &p, &x);
  if (rc)
    return rc;
  if (!scalar(L, n, "negative_slope", p.dt, &slope))
    return GC_EUNSUPPORTED;
  return L__elementwise_finish(L, n, 0, &p, leaky(L_ir(L), p.dt, x, slope));
}

/* rrelu_with_noise(self, noise, lower, upper, training) in eval mode:
 * leaky_relu with slope (lower + upper) / 2 (noise is not read). Training
 * draws random slopes: declined. */
int lower_rrelu(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *x;
  bool training = false;
  double lo = 1.0 / 8, hi = 1.0 / 3;
  int rc = begin_float(L, n, "self", &p, &x);
  if (rc)
    return rc;
  if (!L_bool(L, n, "training", &training) || training ||
      !L_float(L, n, "lower", &lo) || !L_float(L, n, "upper", &hi))
    return GC_EUNSUPPORTED;
  ir_graph *ir = L_ir(L);
  return L__elementwise_finish(
      L, n, 0, &p, leaky(ir, p.dt, x, L__float_const(L, (lo + hi) / 2, p.dt)));
}

/* prelu(self, weight): x > 0 ? x : w * x, one weight, or one per channel
 * (dim 1) of a 1-D weight. _prelu_kernel (kernel 1), what torch 2's prelu
 * calls after reshaping the weight to [C, 1, ...]: the same with the
 * weight broadcast to self's shape, as any binary operand. */
int lower_prelu(lower_ctx *L, const gc_node *n, int kernel) {
  L__elementwise p;
  ir_expr *x;
  int rc = begin_float(L, n, "self", &p, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (kernel) {
    ir_expr *wb = L__operand_at(L, n, &p, "weight", dt);
    if (!wb || !L_tensor(L, n, "weight"))
      return GC_EUNSUPPORTED;
    return L__elementwise_finish(
        L, n, 0, &p,
        WHERE(OP2(GT, x, L__float_const(L, 0, dt)), x, OP2(MUL, wb, x)));
  }
  ir_tensor *w = L_tensor(L, n, "weight");
  if (!w || w->rank > IR_MAX_RANK)
    return GC_EUNSUPPORTED;
  int64_t numel = 1;
  gc_sym *wi[IR_MAX_RANK];
  for (int i = 0; i < w->rank; i++) {
    numel *= w->sizes[i];
    wi[i] = gc_sym_const(&ir->sym, 0);
  }
  if (numel != 1) { /* per channel: dim 1 of self */
    if (w->rank != 1 || p.rank < 2 || w->sizes[0] != p.sizes[1])
      return GC_EUNSUPPORTED;
    wi[0] = p.vars[1];
  }
  ir_expr *wv = ir_cast(ir, L_load(L, w, wi), dt);
  return L__elementwise_finish(
      L, n, 0, &p,
      WHERE(OP2(GT, x, L__float_const(L, 0, dt)), x, OP2(MUL, wv, x)));
}

/* ---- smooth activations ---- */

/* gelu(self, approximate="none"|"tanh") */
int lower_gelu(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *x;
  int rc = begin_float(L, n, "self", &p, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  const gc_arg *ap = L_arg(L, n, "approximate");
  bool tanh_approx = ap && ap->kind == GC_ARG_STRING && !strcmp(ap->s, "tanh");
  if (ap && ap->kind == GC_ARG_STRING && !tanh_approx && strcmp(ap->s, "none"))
    return GC_EUNSUPPORTED;
  ir_expr *inner;
  if (tanh_approx) {
    /* 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) */
    ir_expr *x3 = OP2(MUL, OP2(MUL, x, x), x);
    ir_expr *u = OP2(ADD, x, OP2(MUL, L__float_const(L, 0.044715, dt), x3));
    inner = OP1(TANH,
                OP2(MUL, L__float_const(L, M_SQRT2 * M_2_SQRTPI * 0.5, dt), u));
  } else {
    /* 0.5 * x * (1 + erf(x / sqrt(2))) */
    inner = OP1(ERF, OP2(MUL, x, L__float_const(L, M_SQRT1_2, dt)));
  }
  return L__elementwise_finish(L, n, 0, &p,
                               OP2(MUL, OP2(MUL, x, L__float_const(L, 0.5, dt)),
                                   OP2(ADD, L__float_const(L, 1, dt), inner)));
}

/* silu: x / (1 + exp(-x)); sigmoid: 1 / (1 + exp(-x)) (param 1); both as
 * ATen's kernels write them (silu is one division, not x * sigmoid(x)) */
int lower_silu(lower_ctx *L, const gc_node *n, int sigmoid_only) {
  L__elementwise p;
  ir_expr *x;
  int rc = begin_float(L, n, "self", &p, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (sigmoid_only)
    return L__elementwise_finish(L, n, 0, &p, OP1(SIGMOID, x));
  ir_expr *den = OP2(ADD, L__float_const(L, 1, dt), OP1(EXP, OP1(NEG, x)));
  return L__elementwise_finish(L, n, 0, &p, OP2(DIV, x, den));
}

/* hardsigmoid (param 0): min(max(x + 3, 0), 6) / 6; hardswish (param 1):
 * x * min(max(x + 3, 0), 6) / 6. NaN propagates. */
int lower_hardsigmoid(lower_ctx *L, const gc_node *n, int swish) {
  L__elementwise p;
  ir_expr *x;
  int rc = begin_float(L, n, "self", &p, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_expr *six = L__float_const(L, 6, dt);
  ir_expr *r = OP2(MINIMUM,
                   OP2(MAXIMUM, OP2(ADD, x, L__float_const(L, 3, dt)),
                       L__float_const(L, 0, dt)),
                   six);
  return L__elementwise_finish(
      L, n, 0, &p, swish ? OP2(DIV, OP2(MUL, x, r), six) : OP2(DIV, r, six));
}

/* softplus(self, beta, threshold): x where x * beta > threshold, else
 * log1p(exp(x * beta)) / beta. */
int lower_softplus(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *x, *beta, *th;
  int rc = begin_float(L, n, "self", &p, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (!scalar(L, n, "beta", dt, &beta) || !scalar(L, n, "threshold", dt, &th))
    return GC_EUNSUPPORTED;
  ir_expr *xb = OP2(MUL, x, beta);
  return L__elementwise_finish(
      L, n, 0, &p,
      WHERE(OP2(GT, xb, th), x, OP2(DIV, OP1(LOG1P, OP1(EXP, xb)), beta)));
}

/* mish: x * tanh(log1p(exp(x))) */
int lower_mish(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  ir_expr *x;
  int rc = begin_float(L, n, "self", &p, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  return L__elementwise_finish(L, n, 0, &p,
                               OP2(MUL, x, OP1(TANH, OP1(LOG1P, OP1(EXP, x)))));
}

/* The coefficients of elu for param which: 0 elu(alpha, scale,
 * input_scale), 1 selu, 2 celu(alpha) (input_scale 1 / alpha, in double
 * as ATen). False when an argument is missing. */
static bool elu_params(lower_ctx *L, const gc_node *n, int which, double *alpha,
                       double *scale, double *iscale) {
  *alpha = *scale = *iscale = 1;
  if (which == 1) {
    *alpha = 1.6732632423543772848170429916717;
    *scale = 1.0507009873554804934193349852946;
    return true;
  }
  if (!L_float(L, n, "alpha", alpha))
    return false;
  if (which == 2) {
    *iscale = 1.0 / *alpha;
    return *alpha != 0;
  }
  return L_float(L, n, "scale", scale) && L_float(L, n, "input_scale", iscale);
}

/* elu/selu/celu: x > 0 ? x * scale : expm1(x * input_scale) * (alpha *
 * scale), the coefficients rounded to the dtype before their product, as
 * torch 2's kernel (expm1: -0.0 stays -0.0 and tiny inputs keep their
 * value; torch 1.13's exp - 1 gave +0.0 for both). */
int lower_elu(lower_ctx *L, const gc_node *n, int which) {
  L__elementwise p;
  ir_expr *x;
  double alpha, scale, iscale;
  int rc = begin_float(L, n, "self", &p, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (!elu_params(L, n, which, &alpha, &scale, &iscale))
    return GC_EUNSUPPORTED;
  ir_expr *ka = L__float_const(L, alpha, dt),
          *ks = L__float_const(L, scale, dt);
  double neg = ka->k.f * ks->k.f; /* exact in double; rounded below */
  ir_expr *r =
      WHERE(OP2(GT, x, L__float_const(L, 0, dt)), OP2(MUL, x, ks),
            OP2(MUL, OP1(EXPM1, OP2(MUL, x, L__float_const(L, iscale, dt))),
                L__float_const(L, neg, dt)));
  return L__elementwise_finish(L, n, 0, &p, r);
}

/* hardshrink (param 0): 0 where -lambd <= x <= lambd, else x (NaN stays);
 * softshrink (param 1): x - lambd above lambd, x + lambd below -lambd,
 * NaN stays (torch 2's vectorized loop; torch 1.13 gave 0), else +0.0
 * (the vectorized loop's; the scalar tail's x * 0 is -0.0 below 0). */
int lower_shrink(lower_ctx *L, const gc_node *n, int soft) {
  L__elementwise p;
  ir_expr *x, *l;
  int rc = begin_float(L, n, "self", &p, &x);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (!scalar(L, n, "lambd", dt, &l))
    return GC_EUNSUPPORTED;
  ir_expr *zero = L__float_const(L, 0, dt), *nl = OP1(NEG, l);
  if (soft)
    return L__elementwise_finish(L, n, 0, &p,
                                 WHERE(OP2(GT, x, l), OP2(SUB, x, l),
                                       WHERE(OP2(LT, x, nl), OP2(ADD, x, l),
                                             WHERE(OP1(ISNAN, x), x, zero))));
  ir_expr *in =
      ir_op2(ir, IR_AND, GC_DTYPE_BOOL, OP2(GE, x, nl), OP2(LE, x, l));
  return L__elementwise_finish(L, n, 0, &p, WHERE(in, zero, x));
}

/* log_sigmoid_forward(self) -> (output, buffer): buffer = exp(-|x|),
 * output = min(x, 0) - log1p(buffer), as ATen's CPU kernel. */
int lower_log_sigmoid(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p, pb;
  ir_expr *x, *xb;
  int rc = begin_float(L, n, "self", &p, &x);
  if (rc)
    return rc;
  if ((rc = L__elementwise_begin(L, n, 1, &pb)))
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (pb.dt != dt || !(xb = L__operand_at(L, n, &pb, "self", dt)))
    return GC_EUNSUPPORTED;
  ir_expr *z = OP1(EXP, OP1(NEG, OP1(ABS, x)));
  rc = L__elementwise_finish(
      L, n, 0, &p,
      OP2(SUB, OP2(MINIMUM, x, L__float_const(L, 0, dt)), OP1(LOG1P, z)));
  if (rc)
    return rc;
  return L__elementwise_finish(L, n, 1, &pb, OP1(EXP, OP1(NEG, OP1(ABS, xb))));
}

/* glu(self, dim): a * sigmoid(b), a and b the halves of self along dim,
 * read in place. */
int lower_glu(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_tensor *x = L_tensor(L, n, "self");
  int64_t dim = -1;
  L_int(L, n, "dim", &dim);
  if (!x || !L_is_float(dt) || x->dtype != p.odt || x->rank != p.rank ||
      x->rank == 0)
    return GC_EUNSUPPORTED;
  if (dim < 0)
    dim += x->rank;
  if (dim < 0 || dim >= x->rank || x->sizes[dim] != 2 * p.sizes[dim])
    return GC_EUNSUPPORTED;
  gc_sym *bi[IR_MAX_RANK];
  for (int i = 0; i < x->rank; i++)
    bi[i] =
        i == dim ? gc_sym_addc(&ir->sym, p.vars[i], p.sizes[dim]) : p.vars[i];
  ir_expr *a = L_load(L, x, p.vars), *b = L_load(L, x, bi);
  return L__elementwise_finish(L, n, 0, &p, OP2(MUL, a, OP1(SIGMOID, b)));
}
