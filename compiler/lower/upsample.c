/*
 * upsample.c: lowering of linear upsampling (upsample_linear1d,
 * upsample_bilinear2d, upsample_trilinear3d and their .vec overloads) over
 * the last 1-3 dims of a floating input, and of their backwards.
 *
 * ATen (torch 2.13) computes, per output index of each axis, two
 * source indices and two weights on the host, in the tensor's dtype:
 *
 *   scale = align_corners ? (dtype)(in - 1) / (out - 1)   (0 when out == 1)
 *         : scale given ? (dtype)(1.0 / scale) : (dtype)in / out
 *   src   = align_corners ? scale * o
 *         : max(0, fma(scale, o + 0.5, -0.5))   (its AVX2 and AVX-512
 *                                                 kernels contract it)
 *   i0 = min((int64)floorf((float)src), in - 1), i1 = i0 + (i0 < in - 1)
 *   l1 = min(max(src - i0, 0), 1), l0 = 1 - l1
 *
 * (in == out: i0 = i1 = o, l0 = 1, l1 = 0; these formulas were confirmed
 * against eager's weights, read back through one-hot inputs, for float32
 * and float64, both layouts; torch 1.13 computed src in double for every
 * dtype, without the multiply-add), then combines 2^d input values.
 * Generic kernel: t0 * l0 + t1 * l1 over the
 * first axis, each t the same over the axes after it, so in 2-D
 * (x00 * lw0 + x01 * lw1) * lh0 + (x10 * lw0 + x11 * lw1) * lh1.
 * Channels-last 4-D inputs: x00 * (lh0 * lw0) + x01 * (lh0 * lw1) + x10 *
 * (lh1 * lw0) + x11 * (lh1 * lw1), left to right; channels-last 5-D
 * inputs the same with three weights (ATen's own trilinear kernel, whose
 * order is not known here: within two roundings of it).
 *
 * Here the indices are integer index arithmetic, floor((a * o + b) / den),
 * with (a, b, den) from in and out, or else from the scale's binary
 * fraction (exact, or rounded to fewer bits), checked at compile time
 * against ATen's index at every output position; the weights are computed
 * in the generated code from the output index with ATen's operations, the
 * multiply-adds explicit (IR FMA), so that gcc's contraction of generated
 * code cannot round them otherwise. A target without FMA (ATen's baseline
 * kernels round the half-pixel index twice, but a capped COMPILED_TARGET
 * cannot tell which kernels eager runs) uses an axis only where both
 * roundings agree at every position; else the rule declines (the ATen call
 * runs). The final combination may be contracted differently on the two
 * sides (ATen's own loops are compiled with contraction too), so values
 * agree with eager's within a rounding or two, not always bit for bit.
 */
#include <math.h>
#include <string.h>

#include "compiler/lower/pointwise.h"

#define OP2(op, a, b) ir_op2(ir, IR_##op, dt, a, b)

/* One spatial axis of the interpolation. */
typedef struct axis {
  int64_t in, out;
  bool align;       /* align_corners */
  bool has_scale;   /* a scale factor was given (and is positive) */
  double sf;        /* it */
  gc_sym *i0, *i1;  /* source indices at the output variable */
  ir_expr *l0, *l1; /* weights at the output variable, in the dtype */
} axis;

/* ATen's scale for the axis, in the dtype (float32 or float64). */
static double axis_scale(const axis *A, bool f32) {
  if (A->align) {
    if (A->out <= 1)
      return 0;
    return f32 ? (double)((float)(A->in - 1) / (float)(A->out - 1))
               : (double)(A->in - 1) / (double)(A->out - 1);
  }
  if (A->has_scale)
    return f32 ? (double)(float)(1.0 / A->sf) : 1.0 / A->sf;
  return f32 ? (double)((float)A->in / (float)A->out)
             : (double)A->in / (double)A->out;
}

/* ATen's source indices and weights of the axis at output o (its
 * compute_source_index_and_lambda), in the dtype: `scale` from
 * axis_scale, src = align_corners ? scale * o : max(0, scale * (o + 0.5)
 * - 0.5), i0 = min((int64)floorf((float)src), in - 1) (floorf even for
 * float64), l1 = min(max(src - i0, 0), 1), l0 = 1 - l1; in == out copies.
 * `fused`: the half-pixel product and difference rounded once, as ATen's
 * AVX2 and AVX-512 kernels (built with FMA) compute it; else twice, as
 * its baseline kernels. Volatile keeps this file's own compiler from
 * contracting the separate forms. */
typedef struct axis_at {
  int64_t i0, i1;
  double l0, l1; /* in the dtype */
} axis_at;

static axis_at aten_at(const axis *A, double scale, bool f32, bool fused,
                       int64_t o) {
  axis_at r;
  if (A->in == A->out)
    return (axis_at){o, o, 1, 0};
  double l1;
  if (f32) {
    float k = (float)scale, t;
    if (A->align) {
      volatile float prod = k * (float)o;
      t = prod;
    } else {
      if (fused) {
        t = fmaf(k, (float)o + 0.5f, -0.5f);
      } else {
        volatile float prod = k * ((float)o + 0.5f);
        t = prod - 0.5f;
      }
      t = t < 0 ? 0 : t;
    }
    r.i0 = (int64_t)floorf(t);
    r.i0 = r.i0 < A->in - 1 ? r.i0 : A->in - 1;
    float w = t - (float)r.i0;
    w = w < 0 ? 0 : w > 1 ? 1 : w;
    l1 = w;
    r.l0 = 1.0f - w;
  } else {
    double src;
    if (A->align) {
      volatile double prod = scale * (double)o;
      src = prod;
    } else {
      if (fused) {
        src = fma(scale, (double)o + 0.5, -0.5);
      } else {
        volatile double prod = scale * ((double)o + 0.5);
        src = prod - 0.5;
      }
      src = src < 0 ? 0 : src;
    }
    r.i0 = (int64_t)floorf((float)src);
    r.i0 = r.i0 < A->in - 1 ? r.i0 : A->in - 1;
    l1 = src - (double)r.i0;
    l1 = l1 < 0 ? 0 : l1 > 1 ? 1 : l1;
    r.l0 = 1.0 - l1;
  }
  r.l1 = l1;
  r.i1 = r.i0 < A->in - 1 ? r.i0 + 1 : r.i0;
  return r;
}

/* Whether the axis's indices and weights are known for the target: with
 * FMA ATen runs its contracted kernels; without, a capped target
 * (COMPILED_TARGET) cannot tell which kernels eager runs, so the axis is
 * used only where both roundings agree at every position. */
static bool axis_known(const axis *A, double scale, bool f32, bool fma) {
  if (fma || A->align || A->in == A->out)
    return true;
  for (int64_t o = 0; o < A->out; o++) {
    axis_at x = aten_at(A, scale, f32, true, o);
    axis_at y = aten_at(A, scale, f32, false, o);
    if (x.i0 != y.i0 || x.l1 != y.l1)
      return false;
  }
  return true;
}

/* x as p / 2^k with integer p (k as small as possible, at most 60);
 * false when x needs more. */
static bool dyadic(double x, int64_t *p, int *k) {
  for (int e = 0; e <= 60; e++) {
    double y = ldexp(x, e);
    if (y == floor(y) && fabs(y) < 0x1p40) {
      *p = (int64_t)y;
      *k = e;
      return true;
    }
  }
  return false;
}

/* floor((a * o + b) / den), clamped to [0, in - 1] as the symbols are. */
static int64_t rat_at(int64_t a, int64_t b, int64_t den, int64_t in,
                      int64_t o) {
  int64_t t = a * o + b;
  int64_t q = t >= 0 ? t / den : -((-t + den - 1) / den);
  return q < 0 ? 0 : q > in - 1 ? in - 1 : q;
}

/* Checks the axis against ATen's arithmetic at every output position and
 * builds its indices and weights at output variable v. false: decline. */
static bool axis_build(lower_ctx *L, axis *A, gc_sym *v, gc_dtype dt) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_dtype i64 = GC_DTYPE_INT64;
  bool f32 = dt == GC_DTYPE_FLOAT32;
  if (A->in <= 0 || A->out <= 0 || A->out > (INT64_C(1) << 24))
    return false;
  if (A->in == A->out) {
    A->i0 = A->i1 = v;
    A->l0 = ir_const_f(ir, 1, dt);
    A->l1 = ir_const_f(ir, 0, dt);
    return true;
  }
  double scale = axis_scale(A, f32);
  if (!axis_known(A, scale, f32, ir->fma))
    return false;
  /* The source index as floor((a * o + b) / den) (clamped to the input):
   * align_corners floor(o * (in - 1) / (out - 1)), else floor(((2o + 1) *
   * in - out) / (2 * out)); if that is not ATen's at some o, the same with
   * the scale's exact binary fraction p / 2^k; then (up to 2^16 outputs)
   * with p / 2^k the scale rounded to k bits, k = 1..36 (a scale factor of
   * 2.7 gives 1 / 2.7, neither in / out nor a short binary fraction). */
  int64_t a, b, den;
  bool exact_w = false; /* the fraction's remainder / den is ATen's weight */
  int forms = 2 + (A->out <= (INT64_C(1) << 16) ? 36 : 0);
  for (int form = 0;; form++) {
    /* float32: the binary fraction first (where the source index is exact
     * in float it is that fraction at every position, and the weight can
     * then be integer arithmetic); else in/out first */
    bool frac = form > 1 || (f32 ? form == 0 : form == 1);
    if (form >= forms)
      return false;
    if (!frac) {
      a = A->align ? A->in - 1 : 2 * A->in;
      b = A->align ? 0 : A->in - A->out;
      den = A->align ? (A->out > 1 ? A->out - 1 : 1) : 2 * A->out;
    } else {
      int64_t p;
      int k = form - 1;
      if (form > 1)
        p = (int64_t)llround(ldexp(scale, k));
      else if (!dyadic(scale, &p, &k) || k > 60)
        continue;
      if (p > (INT64_C(1) << 36))
        continue;
      a = A->align ? p : 2 * p;
      b = A->align ? 0 : p - (INT64_C(1) << k);
      den = A->align ? INT64_C(1) << k : INT64_C(1) << (k + 1);
    }
    bool ok = true, w = frac && f32 && den <= (INT64_C(1) << 24);
    for (int64_t o = 0; o < A->out && ok; o++) {
      axis_at at = aten_at(A, scale, f32, true, o);
      ok = rat_at(a, b, den, A->in, o) == at.i0;
      /* the fraction's remainder is ATen's weight (an exact float) */
      if (ok && w) {
        int64_t num = a * o + b;
        num = num < 0 ? 0 : num;
        w = at.i0 == num / den && (double)(num % den) / (double)den == at.l1;
      }
    }
    if (ok) {
      exact_w = w;
      break;
    }
  }
  gc_sym *i0 =
      gc_sym_floordiv(s, gc_sym_addc(s, gc_sym_scale(s, v, a), b), den);
  if (b < 0)
    i0 = gc_sym_max(s, i0, gc_sym_const(s, 0));
  i0 = gc_sym_min(s, i0, gc_sym_const(s, A->in - 1));
  A->i0 = i0;
  A->i1 = gc_sym_min(s, gc_sym_addc(s, i0, 1), gc_sym_const(s, A->in - 1));
  if (exact_w) {
    /* l1 = src - i0 = ((a * o + b) mod den) / den, exact in float32 (a
     * remainder below 2^24 times a power of two): integer arithmetic and
     * one multiply, where the float form costs several operations per
     * element (lraspp's last upsampling, 8 x 21 x 224 x 224 from 28 x 28
     * channels-last: 8.3 -> 5.9 ms, COMPILED_PROFILE) */
    gc_sym *num = gc_sym_addc(s, gc_sym_scale(s, v, a), b);
    if (b < 0)
      num = gc_sym_max(s, num, gc_sym_const(s, 0));
    ir_expr *r = ir_cast(
        ir,
        ir_cast(ir, ir_index(ir, gc_sym_mod(s, num, den), i64), GC_DTYPE_INT32),
        dt);
    A->l1 = OP2(MUL, r, ir_const_f(ir, 1.0 / (double)den, dt));
    A->l0 = OP2(SUB, ir_const_f(ir, 1, dt), A->l1);
    return A->l0 && A->l1;
  }
  /* the weights as ATen computes them from the output index (aten_at), in
   * the dtype; the products are explicit multiply-adds (the align_corners
   * one with a zero addend), so gcc's contraction cannot round them
   * differently */
  ir_expr *o = ir_cast(ir, ir_index(ir, v, i64), dt), *src;
  ir_expr *k = ir_const_f(ir, scale, dt), *zero = ir_const_f(ir, 0, dt);
  ir_expr *one = ir_const_f(ir, 1, dt);
  if (A->align) {
    src = ir_op3(ir, IR_FMA, dt, k, o, zero);
  } else {
    src = ir_op3(ir, IR_FMA, dt, k, OP2(ADD, o, ir_const_f(ir, 0.5, dt)),
                 ir_const_f(ir, -0.5, dt));
    src = ir_op3(ir, IR_WHERE, dt, OP2(LT, src, zero), zero, src);
  }
  ir_expr *l1 = OP2(SUB, src, ir_cast(ir, ir_index(ir, i0, i64), dt));
  l1 = ir_op3(ir, IR_WHERE, dt, OP2(LT, l1, zero), zero, l1);
  l1 = ir_op3(ir, IR_WHERE, dt, OP2(GT, l1, one), one, l1);
  A->l1 = l1;
  A->l0 = OP2(SUB, one, l1);
  return A->l0 && A->l1;
}

/* A float scale argument: absent or None leaves *has false. */
static bool opt_float(lower_ctx *L, const gc_node *n, const char *name,
                      bool *has, double *v) {
  const gc_arg *a = L_arg(L, n, name);
  *has = false;
  if (!a || a->kind == GC_ARG_NONE)
    return true;
  if (!L_float(L, n, name, v))
    return false;
  *has = true;
  return true;
}

bool L_upsample_scales(lower_ctx *L, const gc_node *n, int d, bool *has,
                       double *sf) {
  static const char *const names[3][3] = {{"scales"},
                                          {"scales_h", "scales_w"},
                                          {"scales_d", "scales_h", "scales_w"}};
  if (d < 1 || d > 3)
    return false;
  const gc_arg *sfs = L_arg(L, n, "scale_factors");
  if (sfs && sfs->kind != GC_ARG_NONE) {
    if (sfs->kind != GC_ARG_FLOATS || sfs->n != d)
      return false;
    for (int i = 0; i < d; i++) {
      sf[i] = sfs->floats[i];
      has[i] = sf[i] > 0;
    }
    return true;
  }
  for (int i = 0; i < d; i++) {
    if (!opt_float(L, n, names[d - 1][i], &has[i], &sf[i]))
      return false;
    has[i] = has[i] && sf[i] > 0;
  }
  return true;
}

bool L_upsample_out_sizes(lower_ctx *L, const gc_node *n, int d,
                          const int64_t *in, const int64_t *out,
                          const bool *has, const double *sf) {
  const gc_arg *os = L_arg(L, n, "output_size");
  if (os && os->kind != GC_ARG_NONE) {
    const int64_t *v;
    int k;
    if (!L_ints(L, n, "output_size", &v, &k) || k != d)
      return false;
    for (int i = 0; i < d; i++)
      if (v[i] != out[i])
        return false;
    return true;
  }
  for (int i = 0; i < d; i++)
    if (!has[i] || (int64_t)floor((double)in[i] * sf[i]) != out[i])
      return false;
  return true;
}

/* The d axes' align_corners and scale factors (also in has[], sf[]). */
static bool scale_args(lower_ctx *L, const gc_node *n, int d, bool align,
                       axis *A, bool *has, double *sf) {
  memset(A, 0, (size_t)d * sizeof *A);
  if (!L_upsample_scales(L, n, d, has, sf))
    return false;
  for (int i = 0; i < d; i++)
    A[i] = (axis){.align = align, .has_scale = has[i], .sf = sf[i]};
  return true;
}

bool L_eager_channels_last(const gc_tensor_meta *m) {
  static const int order4[4] = {1, 3, 2, 0}, order5[5] = {1, 4, 3, 2, 0};
  if (m->rank != 4 && m->rank != 5)
    return false;
  const int *order = m->rank == 4 ? order4 : order5;
  int64_t expect = 1;
  for (int i = 0; i < m->rank; i++) {
    int d = order[i];
    if (m->sizes[d].expr || m->strides[d].expr)
      return false;
    if (m->sizes[d].v != 1 && m->strides[d].v != expect)
      return false;
    expect *= m->sizes[d].v;
  }
  return true;
}

/* ATen's generic (not channels-last) combination over axes k..d-1 at
 * `at`: axis k's two source rows, each combined over the axes after it,
 * times their weights: t0 * l0 + t1 * l1. */
static ir_expr *combine(lower_ctx *L, ir_tensor *x, const axis *A, gc_sym **at,
                        int k, int d, gc_dtype dt) {
  ir_graph *ir = L_ir(L);
  if (k == d)
    return L_load(L, x, at);
  at[2 + k] = A[k].i0;
  ir_expr *t0 = combine(L, x, A, at, k + 1, d, dt);
  at[2 + k] = A[k].i1;
  ir_expr *t1 = combine(L, x, A, at, k + 1, d, dt);
  return OP2(ADD, OP2(MUL, t0, A[k].l0), OP2(MUL, t1, A[k].l1));
}

/* upsample_linear1d, upsample_bilinear2d, upsample_trilinear3d (and .vec)
 * (input, output_size, align_corners, scales): param d, the spatial dims. */
int lower_upsample_linear(lower_ctx *L, const gc_node *n, int d) {
  ir_graph *ir = L_ir(L);
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  const char *xname = L_arg(L, n, "input") ? "input" : "self";
  const gc_arg *xa = L_arg(L, n, xname);
  ir_tensor *x;
  if ((rc = L_tensor_realized(L, n, xname, &x)) != 0)
    return rc;
  gc_dtype dt = p.dt;
  bool align;
  if (d < 1 || d > 3 || !x || x->rank != d + 2 || p.rank != d + 2 ||
      x->dtype != dt || (dt != GC_DTYPE_FLOAT32 && dt != GC_DTYPE_FLOAT64) ||
      !L_bool(L, n, "align_corners", &align))
    return GC_EUNSUPPORTED;
  axis A[3];
  bool has[3];
  double sf[3];
  if (!scale_args(L, n, d, align, A, has, sf))
    return GC_EUNSUPPORTED;
  for (int i = 0; i < 2; i++)
    if (x->sizes[i] != p.sizes[i])
      return GC_EUNSUPPORTED;
  /* the output size ATen computes from the arguments is the metadata's
   * (a client's lie would otherwise be computed as told) */
  if (!L_upsample_out_sizes(L, n, d, x->sizes + 2, p.sizes + 2, has, sf))
    return GC_EUNSUPPORTED;
  bool cl = xa && xa->v && L_eager_channels_last(&xa->v->meta);
  int64_t total = 1;
  for (int i = 0; i < p.rank; i++)
    total *= p.sizes[i];
  if (total == 0)
    return L__elementwise_finish(L, n, 0, &p, ir_const_f(ir, 0, dt));
  for (int i = 0; i < d; i++) {
    A[i].in = x->sizes[i + 2];
    A[i].out = p.sizes[i + 2];
    if (!axis_build(L, &A[i], p.vars[i + 2], dt))
      return GC_EUNSUPPORTED;
  }
  gc_sym *at[5] = {p.vars[0], p.vars[1]};
  if (!cl)
    return L__elementwise_finish(L, n, 0, &p, combine(L, x, A, at, 0, d, dt));
  /* ATen's channels-last bilinear kernel: each value times the product of
   * its weights, summed left to right; its trilinear kernel is within a
   * rounding or two of the same form (its own order is not known here) */
  ir_expr *body = NULL;
  for (int bits = 0; bits < (1 << d); bits++) {
    ir_expr *w = NULL;
    for (int a = 0; a < d; a++) {
      int b = (bits >> (d - 1 - a)) & 1;
      at[2 + a] = b ? A[a].i1 : A[a].i0;
      w = w ? OP2(MUL, w, b ? A[a].l1 : A[a].l0) : (b ? A[a].l1 : A[a].l0);
    }
    ir_expr *t = OP2(MUL, w, L_load(L, x, at));
    body = body ? OP2(ADD, body, t) : t;
  }
  return L__elementwise_finish(L, n, 0, &p, body);
}

/* ATen's indices and weights of the axis at every output position, as a
 * table (in the dtype dt); false: declined (a float64 half-pixel source
 * index that contraction would change, or out of range). */
static bool axis_table(lower_ctx *L, const axis *A, gc_dtype dt, ir_interp *t) {
  ir_graph *ir = L_ir(L);
  bool f32 = dt == GC_DTYPE_FLOAT32;
  if (A->in <= 0 || A->out <= 0 || A->out > (INT64_C(1) << 24))
    return false;
  t->in = A->in;
  t->out = A->out;
  t->i0 = gc_arena_calloc(ir->a, (size_t)A->out, sizeof *t->i0);
  t->i1 = gc_arena_calloc(ir->a, (size_t)A->out, sizeof *t->i1);
  t->l0 = gc_arena_calloc(ir->a, (size_t)A->out, sizeof *t->l0);
  t->l1 = gc_arena_calloc(ir->a, (size_t)A->out, sizeof *t->l1);
  if (!t->i0 || !t->i1 || !t->l0 || !t->l1)
    return false;
  double scale = axis_scale(A, f32);
  if (!axis_known(A, scale, f32, ir->fma))
    return false;
  for (int64_t o = 0; o < A->out; o++) {
    axis_at at = aten_at(A, scale, f32, true, o);
    t->i0[o] = at.i0;
    t->i1[o] = at.i1;
    t->l0[o] = at.l0;
    t->l1[o] = at.l1;
  }
  return true;
}

/* upsample_linear1d, _bilinear2d, _trilinear3d_backward (and .vec)
 * (grad_output, output_size, input_size, align_corners, scales): param d,
 * the spatial dims. An IR_INTERP node, which generated code makes in
 * ATen's order
 * (codegen/upsample.c), with ATen's tables. ATen's backward kernel has one
 * order of operations for every layout (unlike its forward): channels-last
 * gradients are eager's bits too. */
int lower_upsample_linear_backward(lower_ctx *L, const gc_node *n, int d) {
  static const char *const ops[3][2] = {
      {"aten::upsample_linear1d_backward.grad_input",
       "aten::upsample_linear1d_backward.vec_out"},
      {"aten::upsample_bilinear2d_backward.grad_input",
       "aten::upsample_bilinear2d_backward.vec_out"},
      {"aten::upsample_trilinear3d_backward.grad_input",
       "aten::upsample_trilinear3d_backward.vec_out"}};
  ir_graph *ir = L_ir(L);
  const gc_tensor_meta *m = L_out_meta(n, 0);
  ir_tensor *g = L_tensor(L, n, "grad_output");
  int64_t sz[5];
  bool align;
  if (d < 1 || d > 3 || !m || !g || m->rank != d + 2 || g->rank != d + 2 ||
      !L_static_sizes(m, sz) || g->dtype != m->dtype ||
      (m->dtype != GC_DTYPE_FLOAT32 && m->dtype != GC_DTYPE_FLOAT64) ||
      !L_bool(L, n, "align_corners", &align))
    return GC_EUNSUPPORTED;
  axis A[3];
  bool has[3];
  double sf[3];
  if (!scale_args(L, n, d, align, A, has, sf) || g->sizes[0] != sz[0] ||
      g->sizes[1] != sz[1])
    return GC_EUNSUPPORTED;
  /* the sizes ATen reads from the arguments are the metadata's */
  const int64_t *v;
  int k;
  if (!L_ints(L, n, "input_size", &v, &k) || k != d + 2)
    return GC_EUNSUPPORTED;
  for (int i = 0; i < d + 2; i++)
    if (v[i] != sz[i])
      return GC_EUNSUPPORTED;
  if (!L_upsample_out_sizes(L, n, d, sz + 2, g->sizes + 2, has, sf))
    return GC_EUNSUPPORTED;
  ir_interp *t = gc_arena_calloc(ir->a, (size_t)d, sizeof *t);
  if (!t)
    return GC_ENOMEM;
  for (int i = 0; i < d; i++) {
    A[i].in = sz[i + 2];
    A[i].out = g->sizes[i + 2];
    if (!axis_table(L, &A[i], m->dtype, &t[i]))
      return GC_EUNSUPPORTED;
  }
  const char *out_op = ops[d - 1][L_arg(L, n, "scale_factors") ? 1 : 0];
  ir_node *call;
  int rc = L_out_node(L, n, IR_INTERP, out_op, NULL, &call);
  if (rc)
    return rc;
  call->interp.axes = t;
  call->interp.naxes = d;
  return 0;
}
