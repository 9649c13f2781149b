/*
 * pointwise.c: lowering rules for elementwise math operators (activations
 * are in activations.c, backward operators in backward.c).
 *
 * Every rule here returns an unrealized IR_T_LOOP over the output's shape:
 * operands are loaded broadcast to it (L_load_bcast) and converted to the
 * computation dtype, which follows PyTorch:
 *
 *   - arithmetic computes in the output's dtype (the graph's metadata holds
 *     eager's result type, wrapped-number rules included: int + 2.5 is
 *     float32, float32 + a float64 number stays float32; an integer input
 *     of a float operation such as reciprocal or copysign is converted);
 *   - comparisons compute in the promoted dtype of their operands
 *     (L_result_type) and yield bool;
 *   - a Python number is converted to the computation dtype first (x + 0.1
 *     on float32 adds (float)0.1), as ATen does.
 *
 * Each rule writes the formula of ATen's CPU kernel in ATen's order of
 * operations, so results agree bit for bit where ATen's do not depend on
 * vectorization: pow's special exponents (2, 3, 0.5, -0.5, -1, -2) are
 * the products, square roots and reciprocals ATen computes, lerp splits at
 * weight 0.5 as ATen does, floor division has ATen's rounding fix-up.
 * Where ATen's vectorized and scalar loops disagree (a NaN at a branch),
 * the vectorized loop's answer is the one kept: it is what all but the
 * last few elements of a tensor get.
 *
 * Declined (GC_EUNSUPPORTED: the node stays an ATen call):
 *   - integer division, remainder and fmod by a tensor or by 0: ATen raises
 *     on a zero divisor and generated code cannot (a divisor of -1 is
 *     declined too: INT64_MIN / -1 traps);
 *   - integer pow other than exponents 0-3, integer lerp/addcdiv (torch
 *     refuses them);
 *   - float numbers in integer computations that torch would refuse or
 *     truncate.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "compiler/ir/half.h"
#include "compiler/lower/pointwise.h"

/* ---- shared helpers (pointwise.h) ---- */

/* The variables of a tensor operand of n that is an unrealized computation
 * over exactly the output's space; NULL when none is. The output shares
 * them: loading the operand at its own variables gives its body as it is
 * (ir_tensor_load), where fresh variables would copy the body, and a chain
 * of k pointwise operations inlined into one loop would make k^2/2
 * expressions rather than k. Variables only name positions of a space, so
 * two computations over the same space may use the same ones. */
static gc_sym **space_vars(lower_ctx *L, const gc_node *n,
                           const L__elementwise *p) {
  for (int i = 0; i < n->nargs; i++) {
    const ir_tensor *t = L_tensor(L, n, n->args[i].name);
    if (!t || t->kind != IR_T_LOOP || t->realized || t->rank != p->rank ||
        (p->rank &&
         memcmp(t->ssizes, p->ssizes, (size_t)p->rank * sizeof *p->ssizes)))
      continue;
    return t->vars;
  }
  return NULL;
}

int L__elementwise_begin(lower_ctx *L, const gc_node *n, int k,
                         L__elementwise *p) {
  const gc_tensor_meta *m = L_out_meta(n, k);
  if (!m || m->rank > IR_MAX_RANK || !L_sym_sizes(L, m, p->ssizes))
    return GC_EUNSUPPORTED;
  ir_ints_of(m->rank, p->ssizes, p->sizes);
  p->rank = m->rank;
  p->odt = m->dtype;
  p->dt = L_opmath(m->dtype);
  p->vars = space_vars(L, n, p);
  if (!p->vars)
    p->vars = L_svars(L, p->rank, p->ssizes);
  return p->vars ? 0 : GC_ENOMEM;
}

int L__elementwise_finish(lower_ctx *L, const gc_node *n, int k,
                          L__elementwise *p, ir_expr *body) {
  if (!body)
    return L_ir(L)->oom ? GC_ENOMEM : GC_EUNSUPPORTED;
  return L_set(L, n, k,
               L_spointwise(L, n, p->odt, p->rank, p->ssizes, p->vars,
                            ir_cast(L_ir(L), body, p->odt)));
}

bool L__scalar_as(lower_ctx *L, const gc_node *n, const char *name, gc_dtype dt,
                  ir_expr **out) {
  double v;
  int64_t iv;
  gc_dtype sdt;
  if (!L_scalar(L, n, name, &v, &iv, &sdt))
    return false;
  if (L_is_float(dt))
    *out = ir_const_f(L_ir(L), v, dt);
  else if (sdt == GC_DTYPE_FLOAT64) /* a float number in an integer op */
    return false;
  else
    *out = ir_const_i(L_ir(L), iv, dt);
  return *out != NULL;
}

ir_expr *L__operand_at(lower_ctx *L, const gc_node *n, L__elementwise *p,
                       const char *name, gc_dtype dt) {
  ir_tensor *t = L_tensor(L, n, name);
  if (t)
    return ir_cast(L_ir(L), L_load_bcast(L, t, p->rank, p->vars), dt);
  /* a number of a half computation: ATen's TensorIterator converts it to
   * the half dtype with the tensors, before the kernel computes in float32
   * (x + 0.1 adds bfloat16(0.1)) */
  gc_dtype kdt = ir_dtype_half(p->odt) && L_is_float(dt) ? p->odt : dt;
  ir_expr *k = NULL;
  return L__scalar_as(L, n, name, kdt, &k) ? ir_cast(L_ir(L), k, dt) : NULL;
}

ir_expr *L__float_const(lower_ctx *L, double v, gc_dtype dt) {
  return ir_const_f(L_ir(L), v, dt);
}

/* Shorthands for this file. */
#define OP1(op, a) ir_op1(ir, IR_##op, dt, a)
#define OP2(op, a, b) ir_op2(ir, IR_##op, dt, a, b)

/* ---- unary: one IR operation ---- */

static bool float_only(ir_op op) {
  switch (op) {
  case IR_NEG:
  case IR_ABS:
  case IR_BNOT:
  case IR_NOT:
  case IR_ISNAN:
  case IR_ISINF:
  case IR_SIGNBIT:
  case IR_CEIL:
  case IR_FLOOR:
  case IR_ROUND:
  case IR_TRUNC:
    return false;
  default:
    return true;
  }
}

/* An integer or bool input of an operation that has a trivial answer for
 * them (rounding is the identity, isnan false, signbit x < 0); NULL when
 * the operation has none. */
static ir_expr *integral_unary(lower_ctx *L, ir_op op, gc_dtype cdt,
                               ir_expr *a) {
  ir_graph *ir = L_ir(L);
  switch (op) {
  case IR_CEIL:
  case IR_FLOOR:
  case IR_ROUND:
  case IR_TRUNC:
    return a;
  case IR_ABS:
    return cdt == GC_DTYPE_BOOL ? a : NULL;
  case IR_ISNAN:
  case IR_ISINF:
    return ir_const_i(ir, 0, GC_DTYPE_BOOL);
  case IR_SIGNBIT:
    return ir_op2(ir, IR_LT, cdt, a, ir_const_i(ir, 0, cdt));
  default:
    return NULL;
  }
}

/* One IR operation of the input, computed in the output dtype (math on an
 * integer tensor yields float32, the metadata says so). */
int lower_unary(lower_ctx *L, const gc_node *n, int op) {
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  ir_tensor *x = L_tensor(L, n, "self");
  if (!x)
    return GC_EUNSUPPORTED;
  gc_dtype cdt = p.dt;
  if (p.dt == GC_DTYPE_BOOL && op != IR_NOT && op != IR_BNOT)
    cdt = x->dtype; /* isnan, signbit ...: test the input itself */
  ir_expr *a = ir_cast(ir, L_load_bcast(L, x, p.rank, p.vars), cdt);
  if (!L_is_float(cdt) && op != IR_NOT) {
    ir_expr *r = integral_unary(L, (ir_op)op, cdt, a);
    if (r)
      return L__elementwise_finish(L, n, 0, &p, r);
  }
  if (float_only((ir_op)op) && !L_is_float(cdt))
    return GC_EUNSUPPORTED;
  if (op == IR_BNOT && !L_is_integral(cdt))
    return GC_EUNSUPPORTED;
  if (op == IR_NEG && cdt == GC_DTYPE_BOOL)
    return GC_EUNSUPPORTED; /* torch refuses */
  if (op == IR_NOT)
    a = ir_cast(ir, a, GC_DTYPE_BOOL);
  return L__elementwise_finish(L, n, 0, &p, ir_op1(ir, (ir_op)op, cdt, a));
}

/* ---- unary: formulas of a few operations ---- */

/* sign (and sgn of a real tensor): (0 < x) - (x < 0), so NaN and -0.0 give
 * +0.0, as ATen's kernel. */
static ir_expr *sign_of(ir_graph *ir, gc_dtype dt, ir_expr *x) {
  if (dt == GC_DTYPE_BOOL)
    return x;
  ir_expr *zero = ir_const_i(ir, 0, dt);
  return OP2(SUB, ir_cast(ir, ir_op2(ir, IR_GT, dt, x, zero), dt),
             ir_cast(ir, ir_op2(ir, IR_LT, dt, x, zero), dt));
}

/* nan_to_num(self, nan, posinf, neginf): replacements default to 0 and the
 * dtype's largest and lowest finite values; integers are unchanged. */
static ir_expr *nan_to_num(lower_ctx *L, const gc_node *n, gc_dtype dt,
                           ir_expr *x) {
  ir_graph *ir = L_ir(L);
  if (!L_is_float(dt))
    return x;
  /* the output dtype's largest finite value (the computation's float32
   * one would round to infinity in a half dtype) */
  const gc_tensor_meta *m = L_out_meta(n, 0);
  gc_dtype od = m ? m->dtype : dt;
  double big = od == GC_DTYPE_FLOAT32    ? FLT_MAX
               : od == GC_DTYPE_BFLOAT16 ? ir_half_value(0x7f7f, od)
               : od == GC_DTYPE_FLOAT16  ? ir_half_value(0x7bff, od)
                                         : DBL_MAX;
  double nan = 0, pinf = big, ninf = -big;
  const gc_arg *a;
  if ((a = L_arg(L, n, "nan")) && a->kind != GC_ARG_NONE &&
      !L_float(L, n, "nan", &nan))
    return NULL;
  if ((a = L_arg(L, n, "posinf")) && a->kind != GC_ARG_NONE &&
      !L_float(L, n, "posinf", &pinf))
    return NULL;
  if ((a = L_arg(L, n, "neginf")) && a->kind != GC_ARG_NONE &&
      !L_float(L, n, "neginf", &ninf))
    return NULL;
  ir_expr *r =
      ir_op3(ir, IR_WHERE, dt, OP2(EQ, x, L__float_const(L, -INFINITY, dt)),
             L__float_const(L, ninf, dt), x);
  r = ir_op3(ir, IR_WHERE, dt, OP2(EQ, x, L__float_const(L, INFINITY, dt)),
             L__float_const(L, pinf, dt), r);
  return ir_op3(ir, IR_WHERE, dt, OP1(ISNAN, x), L__float_const(L, nan, dt), r);
}

/* logit(self, eps): log(x / (1 - x)), x clamped to [eps, 1 - eps] first
 * when eps >= 0 is given (NaN stays NaN). */
static ir_expr *logit(lower_ctx *L, const gc_node *n, gc_dtype dt, ir_expr *x) {
  ir_graph *ir = L_ir(L);
  double eps = -1;
  const gc_arg *a = L_arg(L, n, "eps");
  if (a && a->kind != GC_ARG_NONE && !L_float(L, n, "eps", &eps))
    return NULL;
  ir_expr *one = L__float_const(L, 1, dt);
  if (eps >= 0) {
    ir_expr *lo = L__float_const(L, eps, dt);
    ir_expr *hi = OP2(SUB, one, lo);
    const gc_tensor_meta *m = L_out_meta(n, 0);
    if (m && ir_dtype_half(m->dtype)) { /* ATen: the bounds in the dtype */
      double hlo = ir_half_round(eps, m->dtype);
      lo = L__float_const(L, hlo, dt);
      hi = L__float_const(L, ir_half_round(1 - hlo, m->dtype), dt);
    }
    x = ir_op3(ir, IR_WHERE, dt, OP2(LT, x, lo), lo,
               ir_op3(ir, IR_WHERE, dt, OP2(GT, x, hi), hi, x));
  }
  return OP1(LOG, OP2(DIV, x, OP2(SUB, one, x)));
}

/* sinc: sin(pi x) / (pi x), 1 at 0. */
static ir_expr *sinc(lower_ctx *L, gc_dtype dt, ir_expr *x) {
  ir_graph *ir = L_ir(L);
  ir_expr *px = OP2(MUL, L__float_const(L, M_PI, dt), x);
  return ir_op3(ir, IR_WHERE, dt, OP2(EQ, x, L__float_const(L, 0, dt)),
                L__float_const(L, 1, dt), OP2(DIV, OP1(SIN, px), px));
}

/* The formula of `which` at x (in dt, the computation dtype); NULL to
 * decline. */
static ir_expr *unary_formula(lower_ctx *L, const gc_node *n, int which,
                              gc_dtype dt, ir_expr *x) {
  ir_graph *ir = L_ir(L);
  bool fl = L_is_float(dt);
  switch (which) {
  case L_MATH_SIGN:
    return sign_of(ir, dt, x);
  case L_MATH_FRAC: /* x - trunc(x): inf gives NaN, as ATen's */
    return fl ? OP2(SUB, x, OP1(TRUNC, x)) : NULL;
  case L_MATH_SQUARE:
    return dt == GC_DTYPE_BOOL ? NULL : OP2(MUL, x, x);
  case L_MATH_ISPOSINF:
  case L_MATH_ISNEGINF:
    if (!fl)
      return ir_const_i(ir, 0, GC_DTYPE_BOOL);
    return OP2(
        EQ, x,
        L__float_const(L, which == L_MATH_ISPOSINF ? INFINITY : -INFINITY, dt));
  case L_MATH_ISFINITE:
    if (!fl)
      return ir_const_i(ir, 1, GC_DTYPE_BOOL);
    return ir_op2(ir, IR_AND, GC_DTYPE_BOOL, OP2(EQ, x, x),
                  OP2(NE, OP1(ABS, x), L__float_const(L, INFINITY, dt)));
  case L_MATH_DEG2RAD: /* x * (pi / 180) in the output dtype, as ATen */
    return fl ? OP2(MUL, x, L__float_const(L, M_PI / 180.0, dt)) : NULL;
  case L_MATH_RAD2DEG:
    return fl ? OP2(MUL, x, L__float_const(L, 180.0 / M_PI, dt)) : NULL;
  case L_MATH_NAN_TO_NUM:
    return nan_to_num(L, n, dt, x);
  case L_MATH_LOGIT:
    return fl ? logit(L, n, dt, x) : NULL;
  case L_MATH_SINC:
    return fl ? sinc(L, dt, x) : NULL;
  default:
    return NULL;
  }
}

/* sign, sgn, frac, square, isposinf/isneginf/isfinite, deg2rad/rad2deg,
 * nan_to_num, logit, sinc (param: L_MATH_*). Bool results test the input
 * in its own dtype; others compute in the output's. */
int lower_unary_math(lower_ctx *L, const gc_node *n, int which) {
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *x = L_tensor(L, n, "self");
  if (!x)
    return GC_EUNSUPPORTED;
  gc_dtype cdt = p.dt == GC_DTYPE_BOOL ? x->dtype : p.dt;
  ir_expr *a = ir_cast(L_ir(L), L_load_bcast(L, x, p.rank, p.vars), cdt);
  if (!a)
    return GC_ENOMEM;
  return L__elementwise_finish(L, n, 0, &p, unary_formula(L, n, which, cdt, a));
}

/* ---- binary arithmetic ---- */

/* Integer division, remainder and fmod in dtype dt: only by a number that
 * is, as dt holds it, neither 0 (ATen raises) nor -1 (INT64_MIN / -1
 * traps). */
static bool safe_int_divisor(lower_ctx *L, const gc_node *n, const char *name,
                             gc_dtype dt) {
  ir_expr *k = NULL;
  if (L_tensor(L, n, name) || !L__scalar_as(L, n, name, dt, &k))
    return false;
  return k->k.i != 0 && k->k.i != -1;
}

/* Can `op` compute in dtype cdt for this node? */
static bool binary_ok(lower_ctx *L, const gc_node *n, ir_op op, gc_dtype cdt) {
  switch (op) {
  case IR_FMOD:
  case IR_MOD:
  case IR_FLOORDIV:
    return L_is_float(cdt) || (L_is_integral(cdt) && cdt != GC_DTYPE_BOOL &&
                               safe_int_divisor(L, n, "other", cdt));
  case IR_DIV:
  case IR_POW:
  case IR_ATAN2:
  case IR_HYPOT:
  case IR_COPYSIGN:
    return L_is_float(cdt);
  case IR_BAND:
  case IR_BOR:
  case IR_BXOR:
    return L_is_integral(cdt);
  case IR_SHL:
  case IR_SHR:
    return L_is_integral(cdt) && cdt != GC_DTYPE_BOOL;
  case IR_SUB:
    return cdt != GC_DTYPE_BOOL; /* torch refuses bool subtraction */
  default:
    return L_dtype_ok(cdt);
  }
}

/* other * alpha for add/sub (ATen multiplies the second operand); b
 * unchanged when alpha is 1 or absent, NULL when torch would refuse. */
static ir_expr *times_alpha(lower_ctx *L, const gc_node *n, gc_dtype cdt,
                            ir_expr *b) {
  ir_graph *ir = L_ir(L);
  double alpha = 1;
  int64_t ialpha = 1;
  gc_dtype adt;
  if (!L_scalar(L, n, "alpha", &alpha, &ialpha, &adt))
    return b;
  if (L_is_float(cdt) ? alpha == 1.0 : ialpha == 1)
    return b;
  if (cdt == GC_DTYPE_BOOL)
    return NULL;
  if (!L_is_float(cdt) && adt == GC_DTYPE_FLOAT64)
    return NULL; /* torch refuses a float alpha here */
  /* a half output takes alpha rounded to its dtype, as ATen's kernel */
  const gc_tensor_meta *m = L_out_meta(n, 0);
  gc_dtype kdt = m && ir_dtype_half(m->dtype) ? m->dtype : cdt;
  ir_expr *k = L_is_float(cdt) ? ir_cast(ir, ir_const_f(ir, alpha, kdt), cdt)
                               : ir_const_i(ir, ialpha, cdt);
  return ir_op2(ir, IR_MUL, cdt, k, b);
}

/* Argument `name` as L__operand_at, a number converted to dt directly
 * when `opmath`. */
static ir_expr *opmath_operand(lower_ctx *L, const gc_node *n,
                               L__elementwise *p, const char *name, gc_dtype dt,
                               bool opmath) {
  ir_expr *k = NULL;
  if (opmath && !L_tensor(L, n, name))
    return L__scalar_as(L, n, name, dt, &k) ? k : NULL;
  return L__operand_at(L, n, p, name, dt);
}

/* self OP other (times alpha for add/sub), in the output dtype. fmax/fmin
 * of integers are maximum/minimum. */
int lower_binary(lower_ctx *L, const gc_node *n, int op) {
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype cdt = p.dt;
  if (!binary_ok(L, n, (ir_op)op, cdt))
    return GC_EUNSUPPORTED;
  if (!L_is_float(cdt) && (op == IR_FMAX || op == IR_FMIN))
    op = op == IR_FMAX ? IR_MAXIMUM : IR_MINIMUM;
  /* a number in mul, div and floor division is taken in the computation's
   * dtype, as their ATen kernels read it (original_scalar_value<opmath>),
   * not in the half dtype as other operators' (L__operand_at) */
  bool opmath = op == IR_MUL || op == IR_DIV || op == IR_FLOORDIV;
  ir_expr *a = opmath_operand(L, n, &p, "self", cdt, opmath);
  ir_expr *b = opmath_operand(L, n, &p, "other", cdt, opmath);
  if (!a || !b)
    return GC_EUNSUPPORTED;
  if (op == IR_ADD || op == IR_SUB) {
    b = times_alpha(L, n, cdt, b);
    if (!b)
      return GC_EUNSUPPORTED;
  }
  return L__elementwise_finish(L, n, 0, &p, ir_op2(ir, (ir_op)op, cdt, a, b));
}

/* other - alpha * self */
int lower_rsub(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  if (p.dt == GC_DTYPE_BOOL)
    return GC_EUNSUPPORTED;
  ir_graph *ir = L_ir(L);
  ir_expr *a = L__operand_at(L, n, &p, "self", p.dt);
  ir_expr *b = L__operand_at(L, n, &p, "other", p.dt);
  if (!a || !b || !(a = times_alpha(L, n, p.dt, a)))
    return GC_EUNSUPPORTED;
  return L__elementwise_finish(L, n, 0, &p, ir_op2(ir, IR_SUB, p.dt, b, a));
}

/* div(self, other, rounding_mode): None is true division, "trunc" rounds
 * the quotient toward zero (C's / for integers), "floor" is floor_divide.
 * Integers only by a safe number (see safe_int_divisor). */
int lower_div_mode(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  const gc_arg *m = L_arg(L, n, "rounding_mode");
  if (!m || m->kind == GC_ARG_NONE)
    return lower_binary(L, n, IR_DIV);
  if (m->kind != GC_ARG_STRING)
    return GC_EUNSUPPORTED;
  if (!strcmp(m->s, "floor"))
    return lower_binary(L, n, IR_FLOORDIV);
  if (strcmp(m->s, "trunc"))
    return GC_EUNSUPPORTED;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (!L_is_float(dt) && (dt == GC_DTYPE_BOOL || !L_dtype_ok(dt) ||
                          !safe_int_divisor(L, n, "other", dt)))
    return GC_EUNSUPPORTED;
  ir_expr *a = opmath_operand(L, n, &p, "self", dt, true); /* as div's */
  ir_expr *b = opmath_operand(L, n, &p, "other", dt, true);
  if (!a || !b)
    return GC_EUNSUPPORTED;
  ir_expr *q = OP2(DIV, a, b);
  return L__elementwise_finish(L, n, 0, &p, L_is_float(dt) ? OP1(TRUNC, q) : q);
}

/* x ** e for a number e, as ATen's pow_tensor_scalar: 2, 3 and -2 are
 * products, 0.5, -0.5 and -1 sqrt, 1/sqrt and 1/x; other exponents call
 * pow with e in the tensor's dtype. Integers: exponents 0 to 3 only. */
static ir_expr *pow_scalar(lower_ctx *L, gc_dtype dt, ir_expr *x, double e,
                           int64_t ie, gc_dtype edt) {
  ir_graph *ir = L_ir(L);
  if (!L_is_float(dt)) {
    if (edt == GC_DTYPE_FLOAT64 || ie < 0 || ie > 3)
      return NULL;
    ir_expr *r = ir_const_i(ir, 1, dt);
    for (int64_t i = 0; i < ie; i++) /* x, x*x, x*x*x */
      r = i == 0 ? x : OP2(MUL, r, x);
    return r;
  }
  if (e == 2)
    return OP2(MUL, x, x);
  if (e == 3)
    return OP2(MUL, OP2(MUL, x, x), x);
  if (e == -2)
    return OP2(DIV, L__float_const(L, 1, dt), OP2(MUL, x, x));
  if (e == 0.5)
    return OP1(SQRT, x);
  if (e == -0.5)
    return OP1(RSQRT, x);
  if (e == -1)
    return OP1(RECIP, x);
  return OP2(POW, x, L__float_const(L, e, dt));
}

/* pow.Tensor_Scalar (param 0), pow.Scalar (param 1: a number to a tensor
 * power; 1 ** x is 1, even for NaN) and pow.Tensor_Tensor (param 2: pow
 * of every pair, a wrapped-number exponent included, as ATen's tensor
 * kernel). Integer tensor powers fall back. */
int lower_pow(lower_ctx *L, const gc_node *n, int form) {
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  double e, b;
  int64_t ie, ib;
  gc_dtype edt, bdt;
  if (!L_dtype_ok(dt) || dt == GC_DTYPE_BOOL)
    return GC_EUNSUPPORTED;
  if (form == 0) {
    ir_expr *x = L__operand_at(L, n, &p, "self", dt);
    if (!x || !L_scalar(L, n, "exponent", &e, &ie, &edt))
      return GC_EUNSUPPORTED;
    if (ir_dtype_half(p.odt)) /* ATen rounds the exponent to the dtype */
      e = ir_half_round(e, p.odt);
    return L__elementwise_finish(L, n, 0, &p, pow_scalar(L, dt, x, e, ie, edt));
  }
  if (!L_is_float(dt))
    return GC_EUNSUPPORTED;
  ir_expr *x = L__operand_at(L, n, &p, "self", dt);
  ir_expr *y = L__operand_at(L, n, &p, "exponent", dt);
  if (!x || !y)
    return GC_EUNSUPPORTED;
  if (form == 1 && L_scalar(L, n, "self", &b, &ib, &bdt) && b == 1)
    return L__elementwise_finish(L, n, 0, &p, L__float_const(L, 1, dt));
  return L__elementwise_finish(L, n, 0, &p, OP2(POW, x, y));
}

/* xlogy(x, y) (param 0): NaN if y is NaN, else 0 where x is 0, else
 * x * log(y); special_xlog1py (param 1) with log1p. */
int lower_xlogy(lower_ctx *L, const gc_node *n, int log1p) {
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_expr *x = L__operand_at(L, n, &p, "self", dt);
  ir_expr *y = L__operand_at(L, n, &p, "other", dt);
  if (!x || !y || !L_is_float(dt))
    return GC_EUNSUPPORTED;
  ir_expr *r = OP2(MUL, x, log1p ? OP1(LOG1P, y) : OP1(LOG, y));
  r = ir_op3(ir, IR_WHERE, dt, OP2(EQ, x, L__float_const(L, 0, dt)),
             L__float_const(L, 0, dt), r);
  return L__elementwise_finish(
      L, n, 0, &p,
      ir_op3(ir, IR_WHERE, dt, OP1(ISNAN, y), L__float_const(L, NAN, dt), r));
}

/* logaddexp (param 0): max + log(1 + exp(-|a - b|)), a itself when a and
 * b are the same infinity; logaddexp2 (param 1) with log2 and exp2 (ATen
 * 1.13 adds 1 rather than calling log1p). */
int lower_logaddexp(lower_ctx *L, const gc_node *n, int base2) {
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_expr *a = L__operand_at(L, n, &p, "self", dt);
  ir_expr *b = L__operand_at(L, n, &p, "other", dt);
  if (!a || !b || !L_is_float(dt))
    return GC_EUNSUPPORTED;
  ir_expr *d = OP1(NEG, OP1(ABS, OP2(SUB, a, b)));
  ir_expr *s =
      OP2(ADD, L__float_const(L, 1, dt), base2 ? OP1(EXP2, d) : OP1(EXP, d));
  ir_expr *r = OP2(ADD, OP2(MAXIMUM, a, b), base2 ? OP1(LOG2, s) : OP1(LOG, s));
  ir_expr *same_inf =
      ir_op2(ir, IR_AND, GC_DTYPE_BOOL, OP1(ISINF, a), OP2(EQ, a, b));
  return L__elementwise_finish(L, n, 0, &p,
                               ir_op3(ir, IR_WHERE, dt, same_inf, a, r));
}

/* lerp(self, end, weight) with a Scalar or Tensor weight, as ATen's
 * vectorized loop (torch 2 splits at |weight| < 0.5, not weight < 0.5:
 * lerp(0, inf, -0.7) is NaN):
 *   |weight| < 0.5 ? weight * (end - self) + self
 *                  : (weight - 1) * (end - self) + end. */
int lower_lerp(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_expr *s = L__operand_at(L, n, &p, "self", dt);
  ir_expr *e = L__operand_at(L, n, &p, "end", dt);
  ir_expr *w = opmath_operand(L, n, &p, "weight", dt, true); /* ATen's */
  if (!s || !e || !w || !L_is_float(dt))
    return GC_EUNSUPPORTED;
  ir_expr *diff = OP2(SUB, e, s);
  ir_expr *lo = OP2(ADD, OP2(MUL, w, diff), s);
  ir_expr *hi =
      OP2(ADD, OP2(MUL, OP2(SUB, w, L__float_const(L, 1, dt)), diff), e);
  if (w->op == IR_CONST) /* a Scalar weight: the branch is known */
    return L__elementwise_finish(L, n, 0, &p, fabs(w->k.f) < 0.5 ? lo : hi);
  return L__elementwise_finish(
      L, n, 0, &p,
      ir_op3(ir, IR_WHERE, dt, OP2(LT, OP1(ABS, w), L__float_const(L, 0.5, dt)),
             lo, hi));
}

/* addcmul (param 0): self + value * tensor1 * tensor2; addcdiv (param 1):
 * self + value * tensor1 / tensor2 (floats only, as torch). */
int lower_addcmul(lower_ctx *L, const gc_node *n, int div) {
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  if (!L_dtype_ok(dt) || dt == GC_DTYPE_BOOL || (div && !L_is_float(dt)))
    return GC_EUNSUPPORTED;
  ir_expr *s = L__operand_at(L, n, &p, "self", dt);
  ir_expr *t1 = L__operand_at(L, n, &p, "tensor1", dt);
  ir_expr *t2 = L__operand_at(L, n, &p, "tensor2", dt);
  ir_expr *v = NULL;
  if (!s || !t1 || !t2 || !L__scalar_as(L, n, "value", dt, &v))
    return GC_EUNSUPPORTED;
  ir_expr *vt = OP2(MUL, t1, v); /* value * t1 (x * 1 folds away) */
  return L__elementwise_finish(
      L, n, 0, &p, OP2(ADD, s, div ? OP2(DIV, vt, t2) : OP2(MUL, vt, t2)));
}

/* heaviside(self, values): values where self is 0, else self > 0. */
int lower_heaviside(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_dtype dt = p.dt;
  ir_expr *x = L__operand_at(L, n, &p, "self", dt);
  ir_expr *v = L__operand_at(L, n, &p, "values", dt);
  if (!x || !v || !L_dtype_ok(dt))
    return GC_EUNSUPPORTED;
  ir_expr *zero = ir_const_i(ir, 0, dt);
  return L__elementwise_finish(L, n, 0, &p,
                               ir_op3(ir, IR_WHERE, dt, OP2(EQ, x, zero), v,
                                      ir_cast(ir, OP2(GT, x, zero), dt)));
}

/* ---- comparisons and logical operators ---- */

int lower_compare(lower_ctx *L, const gc_node *n, int op) {
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  static const char *const args[] = {"self", "other", NULL};
  gc_dtype cdt = L_result_type(L, n, args);
  if (!L_dtype_ok(cdt) || p.dt != GC_DTYPE_BOOL)
    return GC_EUNSUPPORTED;
  ir_expr *a = L__operand_at(L, n, &p, "self", cdt);
  ir_expr *b = L__operand_at(L, n, &p, "other", cdt);
  if (!a || !b)
    return GC_EUNSUPPORTED;
  return L__elementwise_finish(L, n, 0, &p,
                               ir_op2(L_ir(L), (ir_op)op, GC_DTYPE_BOOL, a, b));
}

/* logical_and/or/xor: operands as booleans; the output may be any dtype. */
int lower_logical(lower_ctx *L, const gc_node *n, int op) {
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  ir_tensor *x = L_tensor(L, n, "self"), *y = L_tensor(L, n, "other");
  if (!x || !y)
    return GC_EUNSUPPORTED;
  ir_expr *a = ir_cast(ir, L_load_bcast(L, x, p.rank, p.vars), GC_DTYPE_BOOL);
  ir_expr *b = ir_cast(ir, L_load_bcast(L, y, p.rank, p.vars), GC_DTYPE_BOOL);
  return L__elementwise_finish(L, n, 0, &p,
                               ir_op2(ir, (ir_op)op, GC_DTYPE_BOOL, a, b));
}

/* where(condition, self, other): self and other tensors or numbers
 * (where.self, .ScalarSelf, .ScalarOther, .Scalar). */
int lower_where(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  ir_tensor *c = L_tensor(L, n, "condition");
  if (!c || !L_dtype_ok(p.odt))
    return GC_EUNSUPPORTED;
  ir_expr *cond =
      ir_cast(ir, L_load_bcast(L, c, p.rank, p.vars), GC_DTYPE_BOOL);
  /* a select moves values: in the output's dtype, half ones included */
  ir_expr *a = L__operand_at(L, n, &p, "self", p.odt);
  ir_expr *b = L__operand_at(L, n, &p, "other", p.odt);
  if (!cond || !a || !b)
    return GC_EUNSUPPORTED;
  return L__elementwise_finish(L, n, 0, &p,
                               ir_op3(ir, IR_WHERE, p.odt, cond, a, b));
}

/* masked_fill(self, mask, value): where(mask, value, self); value a
 * number (.Scalar) or a 0-d tensor (.Tensor), cast to self's dtype. */
int lower_masked_fill(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  ir_tensor *m = L_tensor(L, n, "mask");
  if (!m || m->dtype != GC_DTYPE_BOOL || !L_dtype_ok(p.odt))
    return GC_EUNSUPPORTED;
  ir_expr *mask = L_load_bcast(L, m, p.rank, p.vars);
  ir_expr *x = L__operand_at(L, n, &p, "self", p.odt);
  ir_expr *v = L__operand_at(L, n, &p, "value", p.odt);
  if (!mask || !x || !v)
    return GC_EUNSUPPORTED;
  return L__elementwise_finish(L, n, 0, &p,
                               ir_op3(ir, IR_WHERE, p.odt, mask, v, x));
}

/* ---- clamps ---- */

/* A number bound that is NaN: torch 2's clamp, clamp_min and clamp_max
 * (and hardtanh, which calls clamp) fill the whole result with NaN then
 * (torch 1.13 ignored such a bound). */
static bool nan_bound(gc_dtype dt, const ir_expr *b) {
  return L_is_float(dt) && b->op == IR_CONST && isnan(b->k.f);
}

/* x clamped below by a number: x < lo ? lo : x, as ATen's clamp with a
 * Scalar bound (both its loops): -0.0 stays -0.0 at a bound of 0, NaN in x
 * stays; a NaN bound gives NaN. */
ir_expr *L__clamp_lo(ir_graph *ir, gc_dtype dt, ir_expr *x, ir_expr *lo) {
  if (nan_bound(dt, lo))
    return lo;
  return ir_op3(ir, IR_WHERE, dt, ir_op2(ir, IR_LT, dt, x, lo), lo, x);
}

/* x clamped above by a number: x > hi ? hi : x (a NaN bound gives NaN). */
ir_expr *L__clamp_hi(ir_graph *ir, gc_dtype dt, ir_expr *x, ir_expr *hi) {
  if (nan_bound(dt, hi))
    return hi;
  return ir_op3(ir, IR_WHERE, dt, ir_op2(ir, IR_GT, dt, x, hi), hi, x);
}

/* clamp(self, min, max) with Scalar or Tensor bounds (either may be None);
 * clamp_min/clamp_max pass param 1/2 for the one bound they have. Number
 * bounds as L__clamp_lo/hi; tensor bounds as ATen's vectorized loop:
 * min(max(x, lo), hi) with NaN-propagating min/max (a NaN bound gives
 * NaN, an equal bound wins over x). */
int lower_clamp(lower_ctx *L, const gc_node *n, int which) {
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  ir_expr *x = L__operand_at(L, n, &p, "self", p.dt);
  if (!x)
    return GC_EUNSUPPORTED;
  const char *lo_name = which == 2 ? NULL : "min";
  const char *hi_name = which == 1 ? NULL : "max";
  if (which == 1)
    lo_name = L_arg(L, n, "min") ? "min" : "min_val";
  if (which == 2)
    hi_name = L_arg(L, n, "max") ? "max" : "max_val";
  ir_expr *r = x;
  const char *names[2] = {lo_name, hi_name};
  for (int k = 0; k < 2; k++) {
    if (!names[k])
      continue;
    const gc_arg *a = L_arg(L, n, names[k]);
    if (!a || a->kind == GC_ARG_NONE)
      continue;
    ir_expr *bound = L__operand_at(L, n, &p, names[k], p.dt);
    if (!bound)
      return GC_EUNSUPPORTED;
    if (L_tensor(L, n, names[k]))
      r = ir_op2(ir, k == 0 ? IR_MAXIMUM : IR_MINIMUM, p.dt, r, bound);
    else
      r = k == 0 ? L__clamp_lo(ir, p.dt, r, bound)
                 : L__clamp_hi(ir, p.dt, r, bound);
  }
  return L__elementwise_finish(L, n, 0, &p, r);
}

/* ---- conversions and copies ---- */

/* _to_copy / clone / alias-free copies: the input, converted to the output
 * dtype. The layout (memory_format) matters only if it is realized, and
 * then the metadata's layout is used. */
int lower_copy(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *x = L_tensor(L, n, "self");
  if (!x)
    return GC_EUNSUPPORTED;
  const gc_arg *dev = L_arg(L, n, "device");
  if (dev && dev->kind == GC_ARG_DEVICE && strcmp(dev->dev.type, "cpu") != 0)
    return GC_EUNSUPPORTED;
  return L__elementwise_finish(L, n, 0, &p, L_load_bcast(L, x, p.rank, p.vars));
}

/* copy(self, src): src broadcast to self's shape, in self's dtype. */
int lower_copy_functional(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *src = L_tensor(L, n, "src");
  if (!src)
    return GC_EUNSUPPORTED;
  return L__elementwise_finish(L, n, 0, &p,
                               L_load_bcast(L, src, p.rank, p.vars));
}

/* round.decimals(self, decimals): ATen's kernel with p = 10^|decimals| in
 * self's dtype: nearbyint(x * p) / p, or nearbyint(x / p) * p for negative
 * decimals (the same operations, so the same roundings). */
int lower_round_decimals(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  int64_t dec;
  if (!L_is_float(p.dt) || !L_int(L, n, "decimals", &dec))
    return GC_EUNSUPPORTED;
  ir_expr *x = L__operand_at(L, n, &p, "self", p.dt);
  if (!x)
    return GC_EUNSUPPORTED;
  bool neg = dec < 0;
  double pw = pow(10.0, (double)(neg ? -dec : dec));
  if (p.dt == GC_DTYPE_FLOAT32)
    pw = (double)(float)pw;
  ir_expr *c = ir_const_f(ir, pw, p.dt);
  ir_expr *r =
      neg ? ir_op2(ir, IR_MUL, p.dt,
                   ir_op1(ir, IR_ROUND, p.dt, ir_op2(ir, IR_DIV, p.dt, x, c)),
                   c)
          : ir_op2(ir, IR_DIV, p.dt,
                   ir_op1(ir, IR_ROUND, p.dt, ir_op2(ir, IR_MUL, p.dt, x, c)),
                   c);
  return L__elementwise_finish(L, n, 0, &p, r);
}

/* tril/triu(self, diagonal): self where column - row <= diagonal (tril)
 * or >= diagonal (triu) over the last two dims, else 0. */
int lower_tri(lower_ctx *L, const gc_node *n, int upper) {
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  int64_t diag = 0;
  const gc_arg *a = L_arg(L, n, "diagonal");
  if (a && a->kind != GC_ARG_NONE && !L_int(L, n, "diagonal", &diag))
    return GC_EUNSUPPORTED;
  if (p.rank < 2 || !L_dtype_ok(p.odt))
    return GC_EUNSUPPORTED;
  ir_expr *x = L__operand_at(L, n, &p, "self", p.odt);
  if (!x)
    return GC_EUNSUPPORTED;
  gc_dtype i64 = GC_DTYPE_INT64;
  gc_symctx *s = &ir->sym;
  ir_expr *d =
      ir_index(ir, gc_sym_sub(s, p.vars[p.rank - 1], p.vars[p.rank - 2]), i64);
  ir_expr *keep =
      ir_op2(ir, upper ? IR_GE : IR_LE, i64, d, ir_const_i(ir, diag, i64));
  return L__elementwise_finish(L, n, 0, &p,
                               ir_op3(ir, IR_WHERE, p.odt, keep, x,
                                      L_is_float(p.odt)
                                          ? ir_const_f(ir, 0, p.odt)
                                          : ir_const_i(ir, 0, p.odt)));
}
