/*
 * norm.c: lowering of batch normalization: native_batch_norm and
 * _native_batch_norm_legit (what make_fx records in eval and in training
 * mode), batch_norm (what torch.export records without
 * run_decompositions()), and the forms torch 2's AOTAutograd records,
 * _native_batch_norm_legit_no_training (eval) and
 * _native_batch_norm_legit_functional (training; the new running
 * statistics are its outputs 3 and 4 instead of writes).
 *
 * Eval (training false): a per-channel affine map of the input, as ATen's
 * CPU kernel computes it:
 *
 *   invstd = 1 / sqrt(running_var + eps)          in the input's dtype
 *   alpha  = invstd * weight
 *   beta   = bias - running_mean * alpha          (fused multiply-add)
 *   out    = x * alpha + beta                     (fused multiply-add)
 *
 * ATen's vectorized loop contracts both multiply-adds (one rounding); on
 * float32 generated code gets the same with fmaf where the target has FMA,
 * else by computing them in double and rounding once. alpha and beta are
 * realized per channel (two small buffers), so the per-element work is one
 * multiply-add that the scheduler fuses with the convolution's other consumers
 * (relu, the residual add). save_mean and save_invstd are empty in eval mode,
 * as eager's.
 *
 * Training: the batch statistics are a Welford reduction over every dim
 * but the channel (dim 1); save_invstd = 1 / sqrt(m2 / N + eps); out =
 * (x - mean) * invstd * weight + bias. The running statistics' update,
 * momentum * mean + (1 - momentum) * running_mean and the same with the
 * unbiased variance m2 / (N - 1), is the new value of the clones
 * functionalization makes the in-place forms write (see
 * docs/functionalization.md), or the functional form's outputs 3 and 4.
 *
 * Every size is read as an expression (docs/dynamic-shapes.md): the batch,
 * the channels and the planes may be size symbols. Training's N is then
 * read at run time, and its N >= 1 (N >= 2 with running statistics, whose
 * update divides by N - 1) is a guard where eager raises.
 */
#include <string.h>

#include "compiler/lower/pointwise.h"

#define OP1(op, a) ir_op1(ir, IR_##op, dt, a)
#define OP2(op, a, b) ir_op2(ir, IR_##op, dt, a, b)

/* t's sizes as expressions (the int64 sizes hold IR_SYMBOLIC where a size
 * is a symbol: every size below is compared and used as an expression, so
 * the rule is one of lower.c's symbolic_rules) */
static gc_sym **ssizes(lower_ctx *L, ir_tensor *t) {
  return t->ssizes ? t->ssizes : ir_syms_of(L_ir(L), t->rank, t->sizes);
}

/* A per-channel tensor (rank 1, size c) of dtype dt, or NULL. Expressions
 * are interned: one size is one pointer. */
static bool per_channel(lower_ctx *L, ir_tensor *t, gc_sym *c, gc_dtype dt) {
  if (!t || t->rank != 1 || t->dtype != dt)
    return false;
  gc_sym **ts = ssizes(L, t);
  return ts && ts[0] == c;
}

/* A [c] value computed by `body` over the variable v, realized. */
static ir_tensor *chan_buf(lower_ctx *L, const gc_node *n, gc_dtype dt,
                           gc_sym *c, gc_sym **v, ir_expr *body) {
  ir_tensor *t = L_spointwise(L, n, dt, 1, &c, v, body);
  if (!t || !L_realize(L, t, NULL))
    return NULL;
  return t;
}

/* a * b + c rounded once: a multiply-add instruction where the target has
 * one (IR FMA: ATen's contraction itself, and 8 float32 lanes to a vector
 * against 4 through double: eval batch norm's per-element map, a memory
 * pass in every convolutional net, took 1.5x as long through double on
 * AVX2), else float32 through double (the product is exact in double, the
 * sum rounded twice: not once where the double lands on a float tie, as
 * test_batch_norm_eval_is_atens_multiply_add shows). */
static ir_expr *fma_of(ir_graph *ir, gc_dtype dt, ir_expr *a, ir_expr *b,
                       ir_expr *c) {
  if (dt != GC_DTYPE_FLOAT32)
    return OP2(ADD, OP2(MUL, a, b), c);
  if (ir->fma)
    return ir_op3(ir, IR_FMA, dt, a, b, c);
  gc_dtype d = GC_DTYPE_FLOAT64;
  ir_expr *r =
      ir_op2(ir, IR_ADD, d,
             ir_op2(ir, IR_MUL, d, ir_cast(ir, a, d), ir_cast(ir, b, d)),
             ir_cast(ir, c, d));
  return ir_cast(ir, r, dt);
}

/* Outputs 1 and 2 of eval mode: empty tensors. */
static int empty_out(lower_ctx *L, const gc_node *n, int k) {
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, k, &p);
  if (rc)
    return rc;
  for (int i = 0; i < p.rank; i++)
    if (p.sizes[i] == 0)
      return L__elementwise_finish(L, n, k, &p, ir_const_f(L_ir(L), 0, p.dt));
  return GC_EUNSUPPORTED;
}

/* The graph value of a tensor argument (NULL when none). */
static const gc_value *arg_value(lower_ctx *L, const gc_node *n,
                                 const char *name) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a || a->kind != GC_ARG_TENSOR || !a->v || a->v->kind != GC_VALUE_TENSOR)
    return NULL;
  return a->v;
}

/* A value computed by the program (functionalization's clone of a running
 * statistic), not a graph input or a view of one. */
static bool owned(const ir_tensor *t) {
  return t->kind == IR_T_LOOP ||
         (t->kind == IR_T_BUF && t->buf->kind != IR_BUF_INPUT);
}

/* The forms of batch norm (the rows' parameter). */
enum {
  BN_NATIVE,      /* native_batch_norm, _native_batch_norm_legit(.no_stats):
                     the running statistics are written (clones) */
  BN_NO_TRAINING, /* _native_batch_norm_legit_no_training: eval, no
                     `training` parameter */
  BN_FUNCTIONAL,  /* _native_batch_norm_legit_functional: the new running
                     statistics are outputs 3 and 4 */
  BN_COMPOSITE,   /* batch_norm (torch.export's default, undecomposed form):
                     native_batch_norm's parameters (and cudnn_enabled, which
                     the CPU ignores) and only its first output */
};

/* The number of elements per channel, N = numel / C, as a value of dt: a
 * constant, or the symbolic count converted at run time (through double,
 * as the constant is). */
static ir_expr *count_value(ir_graph *ir, gc_sym *count, double plus,
                            gc_dtype dt) {
  int64_t k;
  if (gc_sym_const_of(count, &k))
    return ir_const_f(ir, (double)k + plus, dt);
  ir_expr *v =
      ir_cast(ir, ir_index(ir, count, GC_DTYPE_INT64), GC_DTYPE_FLOAT64);
  if (plus != 0)
    v = ir_op2(ir, IR_ADD, GC_DTYPE_FLOAT64, v,
               ir_const_f(ir, plus, GC_DTYPE_FLOAT64));
  return ir_cast(ir, v, dt);
}

static int batch_norm_train(lower_ctx *L, const gc_node *n, ir_tensor *x,
                            ir_tensor *w, ir_tensor *b, double eps, int form) {
  bool functional = form == BN_FUNCTIONAL, composite = form == BN_COMPOSITE;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_dtype dt = x->dtype;
  gc_sym **xs = ssizes(L, x);
  if (!xs)
    return GC_ENOMEM;
  gc_sym *c = xs[1];
  ir_tensor *rm = L_tensor(L, n, "running_mean");
  ir_tensor *rv = L_tensor(L, n, "running_var");
  const gc_value *rmv = arg_value(L, n, "running_mean");
  const gc_value *rvv = arg_value(L, n, "running_var");
  double mom;
  if (!L_float(L, n, "momentum", &mom) || (rm && !per_channel(L, rm, c, dt)) ||
      (rv && !per_channel(L, rv, c, dt)) || !rm != !rv)
    return GC_EUNSUPPORTED;
  /* the running statistics written must be values the program owns
   * (clones): a graph input written here would need a write-back. The
   * functional form writes nothing: it has outputs for the new values. */
  if (functional ? !rm : rm && (!rmv || !rvv || !owned(rm) || !owned(rv)))
    return GC_EUNSUPPORTED;
  const gc_tensor_meta *m1 = L_out_meta(n, 1), *m2m = L_out_meta(n, 2);
  /* outputs checked here, not by the driver after the rule: the running
   * statistics' new values cannot be undone */
  gc_sym *s1 = NULL, *s2 = NULL;
  if (!composite &&
      (!m1 || !m2m || m1->rank != 1 || m2m->rank != 1 || m1->dtype != dt ||
       m2m->dtype != dt || !L_sym_sizes(L, m1, &s1) ||
       !L_sym_sizes(L, m2m, &s2) || s1 != c || s2 != c))
    return GC_EUNSUPPORTED;
  gc_sym *count = gc_sym_const(s, 1);
  int rr = 0;
  gc_sym *rsz[IR_MAX_RANK];
  for (int i = 0; i < x->rank; i++)
    if (i != 1) {
      count = gc_sym_mul(s, count, xs[i]);
      rsz[rr++] = xs[i];
    }
  if (!count)
    return GC_ENOMEM;
  /* eager raises over no element, and with running statistics over one
   * (their unbiased variance): a constant count is declined, a symbolic
   * one guarded */
  int64_t kc, least = rm ? 2 : 1;
  if (gc_sym_const_of(count, &kc)
          ? kc < least
          : !L_guard(L, n, IR_GUARD_LE, gc_sym_const(s, least), count,
                     IR_GUARD_RANGE,
                     rm ? "batch norm statistics over "
                          "at least two values"
                        : "batch norm statistics over "
                          "at least one value"))
    return GC_EUNSUPPORTED;
  gc_sym **cv = L_svars(L, 1, &c);
  gc_sym **rvars = L_svars(L, rr, rsz);
  if (!cv || !rvars)
    return GC_ENOMEM;
  gc_sym *xi[IR_MAX_RANK];
  for (int i = 0, q = 0; i < x->rank; i++)
    xi[i] = i == 1 ? cv[0] : rvars[q++];
  ir_buf *m2b = NULL, *cntb = NULL;
  ir_buf *meanb = L_sreduce(L, n, IR_RED_WELFORD, dt, 1, &c, cv, rr, rsz, rvars,
                            ir_cast(ir, L_load(L, x, xi), dt), &m2b, &cntb);
  if (!meanb || !m2b)
    return GC_ENOMEM;
  ir_tensor *mean = ir_tensor_of_buf(ir, meanb);
  ir_tensor *m2 = ir_tensor_of_buf(ir, m2b);
  /* save_invstd = 1 / sqrt(m2 / N + eps) */
  gc_sym **sv = L_svars(L, 1, &c);
  if (!sv || !mean || !m2)
    return GC_ENOMEM;
  ir_expr *var = OP2(DIV, L_load(L, m2, sv), count_value(ir, count, 0, dt));
  ir_tensor *invstd =
      chan_buf(L, n, dt, c, sv,
               OP2(DIV, ir_const_f(ir, 1, dt),
                   OP1(SQRT, OP2(ADD, var, ir_const_f(ir, eps, dt)))));
  if (!invstd)
    return GC_ENOMEM;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  gc_sym **ch = &p.vars[1];
  ir_expr *y = OP2(
      MUL, OP2(SUB, ir_cast(ir, L_load(L, x, p.vars), dt), L_load(L, mean, ch)),
      L_load(L, invstd, ch));
  if (w)
    y = OP2(MUL, y, L_load(L, w, ch));
  if (b)
    y = OP2(ADD, y, L_load(L, b, ch));
  if ((rc = L__elementwise_finish(L, n, 0, &p, y)) ||
      (!composite &&
       ((rc = L_set(L, n, 1, mean)) || (rc = L_set(L, n, 2, invstd)))))
    return rc;
  if (!rm)
    return 0;
  /* the clones of the running statistics take their new values */
  gc_sym **uv = L_svars(L, 1, &c);
  gc_sym **uv2 = L_svars(L, 1, &c);
  if (!uv || !uv2)
    return GC_ENOMEM;
  ir_expr *km = ir_const_f(ir, mom, dt), *k1 = ir_const_f(ir, 1 - mom, dt);
  ir_expr *nm = OP2(ADD, OP2(MUL, km, L_load(L, mean, uv)),
                    OP2(MUL, k1, L_load(L, rm, uv)));
  ir_expr *uvar = OP2(DIV, L_load(L, m2, uv2), count_value(ir, count, -1, dt));
  ir_expr *nv = OP2(ADD, OP2(MUL, km, uvar), OP2(MUL, k1, L_load(L, rv, uv2)));
  ir_tensor *nmt = chan_buf(L, n, dt, c, uv, nm);
  ir_tensor *nvt = chan_buf(L, n, dt, c, uv2, nv);
  if (!nmt || !nvt)
    return GC_ENOMEM;
  if (functional)
    return (rc = L_set(L, n, 3, nmt)) ? rc : L_set(L, n, 4, nvt);
  if ((rc = L_set_value(L, rmv, nmt)))
    return rc;
  return L_set_value(L, rvv, nvt);
}

/* native_batch_norm(input, weight, bias, running_mean, running_var,
 * training, momentum, eps) -> (out, save_mean, save_invstd), and the
 * _native_batch_norm_legit forms (`form`: BN_*): the same parameters
 * (no_training without `training`, .no_stats without the running
 * statistics), the same outputs (the functional form's two more: the new
 * running statistics), and batch_norm(input, weight, bias, running_mean,
 * running_var, training, momentum, eps, cudnn_enabled) -> out, which ATen's
 * CPU path runs as native_batch_norm (through _batch_norm_impl_index). */
int lower_batch_norm(lower_ctx *L, const gc_node *n, int form) {
  ir_graph *ir = L_ir(L);
  ir_tensor *x = L_tensor(L, n, "input");
  ir_tensor *w = L_tensor(L, n, "weight"), *b = L_tensor(L, n, "bias");
  bool train = false;
  double eps;
  if (!x || x->rank < 2 || !L_is_float(x->dtype) ||
      (form != BN_NO_TRAINING && !L_bool(L, n, "training", &train)) ||
      !L_float(L, n, "eps", &eps))
    return GC_EUNSUPPORTED;
  /* eval computes in float32 for a half input, rounded once (training
   * with half values stays ATen's) */
  gc_dtype od = x->dtype, dt = L_opmath(od);
  gc_sym **xs = ssizes(L, x);
  if (!xs)
    return GC_ENOMEM;
  gc_sym *c = xs[1];
  if ((w && !per_channel(L, w, c, od)) || (b && !per_channel(L, b, c, od)))
    return GC_EUNSUPPORTED;
  if (train)
    return od != dt ? GC_EUNSUPPORTED
                    : batch_norm_train(L, n, x, w, b, eps, form);
  if (form == BN_FUNCTIONAL)
    return GC_EUNSUPPORTED; /* AOTAutograd records eval as no_training */
  ir_tensor *rm = L_tensor(L, n, "running_mean");
  ir_tensor *rv = L_tensor(L, n, "running_var");
  if (!per_channel(L, rm, c, od) || !per_channel(L, rv, c, od))
    return GC_EUNSUPPORTED;
  /* alpha and beta per channel */
  gc_sym **av = L_svars(L, 1, &c), **bv = L_svars(L, 1, &c);
  if (!av || !bv)
    return GC_ENOMEM;
  ir_expr *invstd =
      OP2(DIV, ir_const_f(ir, 1, dt),
          OP1(SQRT, OP2(ADD, L_load(L, rv, av), ir_const_f(ir, eps, dt))));
  ir_expr *alpha = w ? OP2(MUL, invstd, L_load(L, w, av)) : invstd;
  ir_tensor *at = chan_buf(L, n, dt, c, av, alpha);
  if (!at)
    return GC_ENOMEM;
  ir_expr *bias = b ? L_load(L, b, bv) : ir_const_f(ir, 0, dt);
  ir_tensor *bt = chan_buf(
      L, n, dt, c, bv,
      fma_of(ir, dt, OP1(NEG, L_load(L, rm, bv)), L_load(L, at, bv), bias));
  if (!bt)
    return GC_ENOMEM;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  gc_sym **ch = &p.vars[1];
  rc = L__elementwise_finish(L, n, 0, &p,
                             fma_of(ir, dt, L_load(L, x, p.vars),
                                    L_load(L, at, ch), L_load(L, bt, ch)));
  if (!rc && form != BN_COMPOSITE)
    rc = empty_out(L, n, 1);
  if (!rc && form != BN_COMPOSITE)
    rc = empty_out(L, n, 2);
  return rc;
}
