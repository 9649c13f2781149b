/*
 * sched.h: scheduling (which IR nodes share a loop nest) and memory
 * planning (where each intermediate buffer lives in the call's arena).
 *
 * A kernel is either a call (an extern or fallback ATen call, run by the
 * client, or a call node generated code makes: a product, a scan, a
 * scatter, an interpolation's backward) or a loop kernel of generated
 * code:
 *
 *   for each point of the outer dims          (parallel, OpenMP)
 *     stage 1: for each point of its inner dims: its nodes   (a loop nest)
 *     stage 2: ...
 *
 * A stage is a pointwise loop (its nodes compute one element each) or a
 * reduction loop (its nodes accumulate over the inner dims, one result per
 * outer point). So LayerNorm is one kernel: rows outside, a Welford stage
 * over the row, then a pointwise stage normalizing it; softmax is a max
 * stage, a sum stage and a pointwise stage over the same rows: two or three
 * passes over a row that stays in cache.
 *
 * Every node placed in a kernel carries a substitution from its own loop
 * variables to the kernel's (size-1 dimensions become 0). A node joins the
 * current kernel only if the result is exactly what running it alone would
 * compute: a buffer produced earlier in the kernel is read only where it
 * has already been written for the current outer point (the same element
 * in the same stage, any element of an earlier stage's loop over the same
 * inner space, a reduction's result at the current outer point), and no
 * node overwrites what an earlier node of the kernel still reads
 * elsewhere.
 *
 * After scheduling, a buffer whose every reader is in its writer's kernel,
 * at the element just written (or a reduction's result at the current
 * point), never touches memory: codegen keeps it in a local variable.
 */
#ifndef GC_SCHED_SCHED_H
#define GC_SCHED_SCHED_H

#include "compiler/ir/ir.h"

typedef struct sc_dim {
  int64_t size;  /* IR_SYMBOLIC when symbolic: see ssize */
  gc_sym *var;   /* the kernel's variable for it */
  gc_sym *ssize; /* the size as an expression (always set) */
} sc_dim;

typedef struct sc_stage {
  bool reduction; /* its nodes reduce over `dims` */
  sc_dim *dims;   /* inner loop dims, outermost first */
  int ndims;
  ir_node **nodes; /* in execution order */
  int nnodes, cap;
} sc_stage;

/* How a node sits in a kernel. */
typedef struct sc_place {
  struct sc_kernel *kernel;
  int stage;
  gc_sym *store; /* its output index in kernel variables */
  ir_expr *body; /* its body in kernel variables */
} sc_place;

typedef struct sc_kernel {
  int id;
  const char *name; /* "k3_layer_norm" */
  ir_node *call;    /* a call kernel: the call node (ir_node_is_call) */
  bool in_c;        /* a call kernel that generated code makes (a batched
                       product through BLAS, see sc_blas_call; a product
                       through oneDNN, .gemm; a SCAN, SCATTER or INTERP
                       node, ir_node_is_generated) */
  const struct sc_gemm *gemm; /* in_c through oneDNN's sgemm (sc_gemm_of),
                                 decided once here; else NULL */
  sc_dim *dims;               /* outer dims (loop kernels) */
  int ndims;
  sc_stage *stages;
  int nstages, capstages;
  ir_node **nodes; /* every node, in order */
  int nnodes, capnodes;
  int64_t work;  /* elements of the iteration space, all stages
                    (IR_SYMBOLIC: see swork) */
  gc_sym *swork; /* the same as an expression (always set) */
  bool symbolic; /* a loop bound is symbolic: the kernel is generated in
                    its plain form (no tiles, splits, streamed stores) */
} sc_kernel;

/* A call kernel the runtime makes as an ATen call (not generated code):
 * it ends a segment. */
static inline bool sc_aten_call(const sc_kernel *k) {
  return k->call && !k->in_c;
}

typedef struct sc_schedule {
  sc_kernel **kernels; /* execution order */
  int nkernels, cap;
  sc_place *place;        /* per IR node id */
  bool *local;            /* per buffer id: kept in a local variable */
  int64_t arena_bytes;    /* the memory plan's size (IR_SYMBOLIC: see
                             sarena_bytes) */
  gc_sym *sarena_bytes;   /* the same as an expression over the size
                             symbols (a symbolic plan, plan.c) */
  int nlocal;             /* buffers that never touch memory */
  bool planned;           /* sc_plan_memory has run */
  int64_t temp_min_bytes; /* > 0: arena intermediates at least this large
                             become TEMP buffers (own memory, allocated at
                             their first write, dropped after their last
                             use); 0: from SC_TEMP_MIN_BYTES */
} sc_schedule;

/* Intermediates at least this large get their own memory in every program
 * (IR_BUF_TEMP, as eager's temporaries): one in the arena would be held
 * for the whole call. Below it a buffer is small against a call's peak,
 * and its own memory would cost an allocation and a free per call. */
#define SC_TEMP_MIN_BYTES ((int64_t)1 << 20)

/* Groups ir's nodes into kernels. */
int sc_schedule_build(ir_graph *ir, sc_schedule *s, gc_error *err);

/* Assigns arena offsets to the ARENA buffers that need memory: live ranges
 * in kernel order, greedy placement by decreasing size, 64-byte aligned.
 * Buffers that a call may alias (a fallback returning a view of its input)
 * live to the end. Sets arena_bytes. */
int sc_plan_memory(ir_graph *ir, sc_schedule *s, gc_error *err);

/* Whether stages a and b loop over the same inner dims (at least one). */
bool sc_same_inner(const sc_stage *a, const sc_stage *b);

/* Fills *map with the substitution (for gc_sym_subst and ir_expr_subst)
 * from stage a's inner loop variables to stage b's, which loop over the
 * same dims; false when out of memory. */
bool sc_rename_inner(ir_graph *ir, const sc_stage *a, const sc_stage *b,
                     gc_symmap *map);

/* Whether loop kernel k runs tiled (codegen/tiled.c): a reduction stage
 * reads more loads contiguous along the kernel's innermost outer dim and
 * strided along the stage's innermost dim than loads contiguous along the
 * latter. */
bool sc_tiles(const sc_schedule *s, const sc_kernel *k);

/* Whether extern node n (a bmm) runs in generated code: the target has
 * BLAS, float32 or float64, at least 2 items, each operand matrix with a
 * unit stride along one of its dims, the output's rows dense. Generated
 * code then calls sgemm/dgemm per batch item inside the OpenMP team:
 * ATen's bmm loops over the batch on one thread. */
bool sc_blas_call(const ir_graph *ir, const ir_node *n);
/* A matrix product generated code makes through oneDNN's sgemm
 * (row-major: C = alpha A B + beta C): an mm or addmm, float32, when the
 * target has oneDNN ("dnnl", with AVX-512: ir_graph.dnnl). A and B as
 * sgemm reads them (op 'N' or 'T' and leading dimension, mat_layout);
 * addmm's self (bias) is copied into C first, broadcast with strides
 * bias_sr, bias_sc (0 along a broadcast dim), unless beta is 0. */
typedef struct sc_gemm {
  const ir_view *a, *b, *bias; /* bias: addmm's self, else NULL */
  char opa, opb;
  int64_t lda, ldb, m, n, k;
  int64_t bias_sr, bias_sc;
  double alpha, beta;
} sc_gemm;
/* Whether extern node n is such a product (fills *g). */
bool sc_gemm_of(const ir_graph *ir, const ir_node *n, sc_gemm *g);

/* How BLAS reads a [batch, rows, cols] operand view's matrices, column-major:
 * op 'N' with leading dimension *ld = the row stride when rows are
 * contiguous (a row-major R x C matrix is BLAS's C x R, the transpose it
 * wants for C^T = B^T A^T), 'T' with the column stride when columns are;
 * false when neither, or a size or stride does not fit BLAS's int. */
bool sc_blas_layout(const ir_view *v, char *op, int64_t *ld);
/* A bmm node's operand views: self (*a) and mat2 (*b); NULL when absent. */
void sc_bmm_operands(const ir_node *n, const ir_view **a, const ir_view **b);

/* The bytes an arena buffer takes (aligned); IR_SYMBOLIC for a symbolic
 * one, whose size is sc_buf_sbytes. */
int64_t sc_buf_bytes(const ir_buf *b);
gc_sym *sc_buf_sbytes(ir_graph *ir, const ir_buf *b);

#endif
