/*
 * random.c: random numbers drawn by generated code.
 *
 * Dropout in a training graph is `bernoulli(empty_like(x), q)` (make_fx)
 * or `native_dropout(x, p, train)` with q = 1 - p (torch 2's AOTAutograd):
 * a mask of ones with probability q. ATen's CPU sampler draws it one
 * element at a time from a Mersenne Twister (6.5 ms per million elements
 * on the development machine, 2 threads), more than the rest of a
 * transformer layer's pointwise work. Here the mask is a pointwise kernel
 * instead:
 *
 *   seed  = randint(0, 2^62, [1])                  an ATen call, per call
 *   out[i] = rand(seed, i) < q ? 1 : 0             generated code
 *
 * where i is the element's row-major index and rand is a word of
 * Philox4x32-10 keyed by the seed (cexpr.c, gc_rand_u01; one call serves
 * four counters, filled a block at a time by codegen/pointwise.c), a
 * counter-based generator: any element can be computed alone, in any order, on
 * any thread, so the kernel vectorizes and parallelizes like any other and the
 * mask is the same whatever the fusion or the thread count. The seed comes
 * from torch's default generator at every call, so torch.manual_seed makes
 * a run reproducible and every call draws a fresh mask.
 *
 * The distribution is eager's (up to the 2^-24 resolution of the uniform);
 * the numbers are not: the compile option eager_random keeps the ATen call
 * (ir_graph.eager_random), for bitwise agreement with eager under the same
 * seed. A call with its own Generator object stays an ATen call too.
 *
 * native_dropout returns the mask (bool) beside the output, x * mask *
 * scale with scale = 1 / (1 - p) (0 when p = 1) as ATen's CPU kernel
 * computes it (input.mul(mask).mul_(scale): products in the input's dtype,
 * 0 * -x is -0, 0 * inf NaN). Both outputs read the same draws: the
 * generator is a function of (seed, index), so the mask is one kernel's
 * value however the two are fused. native_dropout_backward (grad * mask *
 * scale) draws nothing and is an ordinary pointwise rule.
 */
#include <math.h>

#include "compiler/lower/pointwise.h"

#define SEED_BOUND ((int64_t)1 << 62)

/* An extern call writing one int64 drawn from torch's default generator
 * (aten::randint.low_out(0, SEED_BOUND, [1], out=...)) into a new arena
 * buffer, for node gn; NULL when the operator is unknown or out of
 * memory. */
static ir_buf *seed_call(lower_ctx *L, const gc_node *gn) {
  ir_graph *ir = L_ir(L);
  const gc_op *op = L_op(L, "aten::randint.low_out");
  if (!op)
    return NULL;
  int64_t one = 1;
  ir_buf *b = ir_buf_new(ir, IR_BUF_ARENA, GC_DTYPE_INT64, 1, &one, &one);
  ir_node *n = b ? L_out_call(L, gn, op, b, 3) : NULL;
  int64_t *size = gc_arena_calloc(ir->a, 1, sizeof *size);
  if (!n || !size)
    return NULL;
  *size = 1;
  n->args[0] =
      (ir_call_arg){.name = "low", .arg = {.kind = GC_ARG_INT, .i = 0}};
  n->args[1] = (ir_call_arg){.name = "high",
                             .arg = {.kind = GC_ARG_INT, .i = SEED_BOUND}};
  n->args[2] = (ir_call_arg){
      .name = "size", .arg = {.kind = GC_ARG_INTS, .n = 1, .ints = size}};
  return ir_node_append(ir, n) ? NULL : b;
}

/* The float32 mask, 1 with probability p, at the element `vars` of an
 * iteration space of `rank` dims of `sizes` (its row-major index keys the
 * generator), drawn from `seed`. */
static ir_expr *ones_with_p(lower_ctx *L, ir_buf *seed, int rank,
                            const int64_t *sizes, gc_sym **vars, double p) {
  ir_graph *ir = L_ir(L);
  gc_symctx *sx = &ir->sym;
  gc_sym *flat = gc_sym_const(sx, 0);
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; d--) {
    flat = gc_sym_add(sx, flat, gc_sym_scale(sx, vars[d], stride));
    stride *= sizes[d];
  }
  ir_expr *key = ir_load(ir, seed, gc_sym_const(sx, 0));
  ir_expr *u = ir_op2(ir, IR_RAND, GC_DTYPE_FLOAT32, key,
                      ir_index(ir, flat, GC_DTYPE_INT64));
  /* u is j / 2^24 (j < 2^24), so u < p exactly when u < t, t = ceil(p 2^24)
   * / 2^24, and then u + (1 - t) < 1: both exact in float32 below 1, and a
   * sum that rounds stays at or above 1. The mask 1 - floor(u + 1 - t) is
   * float arithmetic throughout (a bool temporary beside the generator's
   * 64-bit lanes would stop gcc's vectorizer) and never -0. */
  double thr = ceil(p * 16777216.0) / 16777216.0;
  ir_expr *f = ir_op2(ir, IR_ADD, GC_DTYPE_FLOAT32, u,
                      ir_const_f(ir, 1.0 - thr, GC_DTYPE_FLOAT32));
  return ir_op2(ir, IR_SUB, GC_DTYPE_FLOAT32,
                ir_const_f(ir, 1.0, GC_DTYPE_FLOAT32),
                ir_op1(ir, IR_FLOOR, GC_DTYPE_FLOAT32, f));
}

/* bernoulli.p(self, p, generator): ones with probability p, in self's
 * shape and dtype (self's values are not read). */
int lower_bernoulli_p(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  const gc_tensor_meta *m = L_out_meta(n, 0);
  const gc_arg *gen = L_arg(L, n, "generator");
  int64_t sizes[IR_MAX_RANK];
  double p;
  if (ir->eager_random || !m || !L_is_float(m->dtype) ||
      m->rank > IR_MAX_RANK || !L_static_sizes(m, sizes) ||
      !L_float(L, n, "p", &p) || !(p >= 0 && p <= 1) ||
      (gen && gen->kind != GC_ARG_NONE))
    return GC_EUNSUPPORTED; /* ATen's call then says what is wrong */
  ir_buf *seed = seed_call(L, n);
  gc_sym **vars = L_vars(L, m->rank, sizes);
  if (!seed || !vars)
    return GC_ENOMEM;
  ir_expr *body =
      ir_cast(ir, ones_with_p(L, seed, m->rank, sizes, vars, p), m->dtype);
  if (!body)
    return GC_ENOMEM;
  ir_tensor *t = L_pointwise(L, n, m->dtype, m->rank, sizes, vars, body);
  return t ? L_set(L, n, 0, t) : GC_ENOMEM;
}

/* dropout(input, p, train) (torch.export's undecomposed form): with train
 * false, the input (decomposed, a clone: the value is the same); with train
 * true it draws its mask in ATen, a fallback (its row is random). */
int lower_dropout(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_tensor *x = L_tensor(L, n, "input");
  bool train = true;
  if (!x || !L_bool(L, n, "train", &train) || train)
    return GC_EUNSUPPORTED;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  if (p.dt != x->dtype || p.rank != x->rank)
    return GC_EUNSUPPORTED;
  return L__elementwise_finish(L, n, 0, &p, L_load(L, x, p.vars));
}

/* native_dropout(input, p, train) -> (output, mask). train None counts as
 * true, as in ATen; train false gives the input and a mask of ones. */
int lower_native_dropout(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  ir_tensor *x = L_tensor(L, n, "input");
  const gc_tensor_meta *mo = L_out_meta(n, 0), *mm = L_out_meta(n, 1);
  const gc_arg *tr = L_arg(L, n, "train");
  bool train = true;
  double p;
  if (!x || !mo || !mm || !L_is_float(x->dtype) || mo->dtype != x->dtype ||
      mm->dtype != GC_DTYPE_BOOL || x->rank > IR_MAX_RANK ||
      !L_float(L, n, "p", &p) ||
      (tr && tr->kind != GC_ARG_NONE && !L_bool(L, n, "train", &train)))
    return GC_EUNSUPPORTED;
  int64_t count = 1;
  for (int i = 0; i < x->rank; i++)
    count *= x->sizes[i];
  /* an empty input gives a mask of the input's dtype (ATen); eager's
   * numbers are kept whenever asked for */
  if (count == 0 || (train && (ir->eager_random || !(p >= 0 && p <= 1))))
    return GC_EUNSUPPORTED;
  gc_dtype dt = x->dtype;
  gc_sym **vars = L_vars(L, x->rank, x->sizes);
  gc_sym **mvars = L_vars(L, x->rank, x->sizes);
  if (!vars || !mvars)
    return GC_ENOMEM;
  if (!train) {
    ir_tensor *out =
        L_pointwise(L, n, dt, x->rank, x->sizes, vars, L_load(L, x, vars));
    ir_tensor *ones = L_pointwise(L, n, GC_DTYPE_BOOL, x->rank, x->sizes, mvars,
                                  ir_const_i(ir, 1, GC_DTYPE_BOOL));
    int rc = L_set(L, n, 0, out);
    return rc ? rc : L_set(L, n, 1, ones);
  }
  double p1m = 1.0 - p;
  double scale = p1m == 0 ? 0.0 : 1.0 / p1m;
  ir_buf *seed = seed_call(L, n);
  if (!seed)
    return GC_ENOMEM;
  /* the same draws twice: the mask, and the output from its own copy of
   * the mask expression (no bool buffer between them) */
  ir_expr *keep = ones_with_p(L, seed, x->rank, x->sizes, vars, p1m);
  ir_expr *kept =
      ir_op2(ir, IR_MUL, dt, L_load(L, x, vars), ir_cast(ir, keep, dt));
  ir_expr *out = ir_op2(ir, IR_MUL, dt, kept, ir_const_f(ir, scale, dt));
  ir_expr *mask = ir_cast(
      ir, ones_with_p(L, seed, x->rank, x->sizes, mvars, p1m), GC_DTYPE_BOOL);
  if (!out || !mask)
    return GC_ENOMEM;
  ir_tensor *ot = L_pointwise(L, n, dt, x->rank, x->sizes, vars, out);
  ir_tensor *mt =
      L_pointwise(L, n, GC_DTYPE_BOOL, x->rank, x->sizes, mvars, mask);
  int rc = L_set(L, n, 0, ot);
  return rc ? rc : L_set(L, n, 1, mt);
}
