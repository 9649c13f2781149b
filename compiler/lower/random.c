/*
 * random.c: random numbers drawn by generated code.
 *
 * Dropout in a training graph is `bernoulli(empty_like(x), p)`: a mask of
 * ones with probability p. ATen's CPU sampler draws it one element at a
 * time from a Mersenne Twister (6.5 ms per million elements on the
 * development machine, 2 threads), more than the rest of a transformer
 * layer's pointwise work. Here the mask is a pointwise kernel instead:
 *
 *   seed  = randint(0, 2^62, [1])                  an ATen call, per call
 *   out[i] = rand(seed, i) < p ? 1 : 0             generated code
 *
 * where i is the element's row-major index and rand is a word of
 * Philox4x32-10 keyed by the seed (cexpr.c, gc_rand_u01; one call serves
 * four counters, filled a block at a time by cgen.c), a counter-based
 * generator: any element can be computed alone, in any order, on any
 * thread, so the kernel vectorizes and parallelizes like any other and the
 * mask is the same whatever the fusion or the thread count. The seed comes
 * from torch's default generator at every call, so torch.manual_seed makes
 * a run reproducible and every call draws a fresh mask.
 *
 * The distribution is eager's (up to the 2^-24 resolution of the uniform);
 * the numbers are not: the compile option eager_random keeps the ATen call
 * (ir_graph.eager_random), for bitwise agreement with eager under the same
 * seed. A call with its own Generator object stays an ATen call too.
 */
#include <math.h>

#include "compiler/lower/lower.h"

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
  gc_symctx *sx = &ir->sym;
  gc_sym *flat = gc_sym_const(sx, 0);
  int64_t stride = 1;
  for (int d = m->rank - 1; d >= 0; d--) {
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
  ir_expr *mask = ir_op2(ir, IR_SUB, GC_DTYPE_FLOAT32,
                         ir_const_f(ir, 1.0, GC_DTYPE_FLOAT32),
                         ir_op1(ir, IR_FLOOR, GC_DTYPE_FLOAT32, f));
  ir_expr *body = ir_cast(ir, mask, m->dtype);
  if (!body)
    return GC_ENOMEM;
  ir_tensor *t = L_pointwise(L, n, m->dtype, m->rank, sizes, vars, body);
  return t ? L_set(L, n, 0, t) : GC_ENOMEM;
}
