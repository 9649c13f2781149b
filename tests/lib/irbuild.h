/*
 * irbuild.h: small loop-IR graphs built by hand, for the unit tests of the
 * scheduler, the memory planner and the IR verifier (which otherwise see
 * only what lowering makes of a graph). Buffers are contiguous and static;
 * a node's loop variables are made here, its body by the test:
 *
 *   ir_buf *x = ib_input(ir, 0, F32, 2, (int64_t[]){4, 8});
 *   ir_node *n = ib_pointwise(ir, F32, 2, (int64_t[]){4, 8});
 *   n->body = ir_op1(ir, IR_RELU, F32, ib_read(ir, n, x));
 *   ib_append(ir, n);
 *
 * Every function aborts the test when out of memory.
 */
#ifndef IRBUILD_H
#define IRBUILD_H

#include "compiler/ir/ir.h"
#include "compiler/sched/sched.h"

/* The graph a test builds (ib_ir, in its own arena): Criterion's .init
 * and .fini for the tests that use it. */
extern ir_graph ib_ir;
void ib_setup(void);
void ib_teardown(void);

/* Graph input `index`: an INPUT buffer. */
ir_buf *ib_input(ir_graph *ir, int index, gc_dtype dt, int rank,
                 const int64_t *sizes);

/* A pointwise node writing a new ARENA buffer of these sizes, with one loop
 * variable per dim; no body, not yet appended. */
ir_node *ib_pointwise(ir_graph *ir, gc_dtype dt, int rank,
                      const int64_t *sizes);

/* A pointwise node writing buffer `out` (an input written back, say). */
ir_node *ib_pointwise_into(ir_graph *ir, ir_buf *out);

/* A reduction node writing a new ARENA buffer of `sizes`, reducing `rsizes`
 * (variables vars then rvars); no body, not yet appended. */
ir_node *ib_reduction(ir_graph *ir, ir_reduction red, gc_dtype dt, int rank,
                      const int64_t *sizes, int rrank, const int64_t *rsizes);

/* A fallback ATen call reading buffer `in` and returning a new RESULT
 * buffer of these sizes (no operator: it aliases nothing); appended. */
ir_node *ib_call(ir_graph *ir, ir_buf *in, gc_dtype dt, int rank,
                 const int64_t *sizes);

/* The element index of b at node n's loop variables: vars, then rvars,
 * times b's strides (b has rank + rrank dims, or rank for a reduction
 * whose input broadcasts over the reduced dims: then the rvars are
 * ignored). */
gc_sym *ib_at(ir_graph *ir, const ir_node *n, const ir_buf *b);

/* ir_load of b at ib_at(n, b). */
ir_expr *ib_read(ir_graph *ir, const ir_node *n, ir_buf *b);

/* Verifies ir and schedules it into *s (sched.h), asserting that every
 * node is placed exactly once and kernels keep the IR's order. */
void ib_schedule(ir_graph *ir, sc_schedule *s);

/* Marks n as the writer of its outputs and appends it; returns n->out. */
ir_buf *ib_append(ir_graph *ir, ir_node *n);

#endif
