/*
 * pointwise.h: helpers shared by the elementwise rule files (pointwise.c,
 * activations.c, backward.c); internal to compiler/lower/.
 *
 * An elementwise rule computes one expression per element of an output:
 * L__elementwise_begin() takes the output's shape from the graph's
 * metadata and makes loop variables over it, L__operand_at() reads an
 * argument at the current point (a tensor broadcast to the output, or a
 * number converted to the computation dtype), and L__elementwise_finish()
 * sets the output to the unrealized loop computing the body (converted to
 * the output's dtype).
 */
#ifndef GC_LOWER_POINTWISE_H
#define GC_LOWER_POINTWISE_H

#include "compiler/lower/lower.h"

/* The shape of one output, fresh variables over it, and its dtypes. */
typedef struct L__elementwise {
  int rank;                    /* of the output */
  int64_t sizes[IR_MAX_RANK];  /* the output's sizes (eager's; IR_SYMBOLIC
                                  where symbolic) */
  gc_sym **vars;               /* one loop variable per dimension */
  gc_dtype dt;                 /* the dtype the rule computes in: the
                                  output's, float32 for a half output
                                  (L_opmath) */
  gc_dtype odt;                /* the output's dtype */
  gc_sym *ssizes[IR_MAX_RANK]; /* the sizes as expressions */
} L__elementwise;

/* Sets up p for output `k` of n. GC_EUNSUPPORTED when that output is not a
 * tensor with static sizes; GC_ENOMEM. */
int L__elementwise_begin(lower_ctx *L, const gc_node *n, int k,
                         L__elementwise *p);

/* Sets output `k` of n to the loop computing `body` (NULL: out of memory
 * when the IR says so, else unsupported), converted to p->odt. */
int L__elementwise_finish(lower_ctx *L, const gc_node *n, int k,
                          L__elementwise *p, ir_expr *body);

/* Argument `name` at p's point in dtype dt: a tensor broadcast to the
 * output, or a number converted to dt (as ATen converts a Scalar to the
 * computation's dtype; for a half output, to the half dtype first, as
 * ATen's TensorIterator converts a wrapped number with the tensors). NULL
 * when neither, or for a float number in an integer computation. */
ir_expr *L__operand_at(lower_ctx *L, const gc_node *n, L__elementwise *p,
                       const char *name, gc_dtype dt);

/* A Scalar argument converted to dt as ATen's Scalar::to<scalar_t>() does
 * (false when absent or not a number). */
bool L__scalar_as(lower_ctx *L, const gc_node *n, const char *name, gc_dtype dt,
                  ir_expr **out);

/* x clamped by a number as ATen's clamp with Scalar bounds does it:
 * x < lo ? lo : x (and x > hi ? hi : x), so -0.0 stays -0.0 at a bound of
 * 0, NaN in x stays and a NaN bound is ignored. */
ir_expr *L__clamp_lo(ir_graph *ir, gc_dtype dt, ir_expr *x, ir_expr *lo);
ir_expr *L__clamp_hi(ir_graph *ir, gc_dtype dt, ir_expr *x, ir_expr *hi);

/* A floating constant of dtype dt (shorthand). */
ir_expr *L__float_const(lower_ctx *L, double v, gc_dtype dt);

/* index.c: the number of elements of `sizes`; output 0 of n, which is
 * empty, as a constant; index `e` clamped to [0, hi]. */
int64_t L__numel(int rank, const int64_t *sizes);
int L__empty_output(lower_ctx *L, const gc_node *n, L__elementwise *p);
gc_sym *L__clamp_index(gc_symctx *s, gc_sym *e, int64_t hi);

#endif
