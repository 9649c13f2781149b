/*
 * ir.h: the loop-level IR, between the functional graph and C.
 *
 * The compiler's back half (docs/codegen.md) works on this IR, allocated from
 * the job's arena like everything else:
 *
 *   ir_buf     a realized buffer: dtype, sizes and strides (in elements),
 *              and where its memory comes from: a graph input, the arena of
 *              the call, a fresh output tensor, or an extern/fallback call's
 *              result. Buffers are the only things that live in memory.
 *   ir_expr    a scalar value computed at a point of an iteration space: a
 *              small DAG of operations (load from a buffer at a symbolic
 *              index, constants, index values, math, casts, where). This is
 *              Inductor's inner_fn as data rather than a closure, so passes
 *              can inspect, substitute and print it. Expressions are
 *              hash-consed: equal expressions are one pointer (CSE for
 *              free).
 *   ir_node    a computation the scheduler places: a pointwise loop nest or
 *              a reduction writing a buffer, an extern call (BLAS,
 *              convolution, through ATen on the client), a fallback call
 *              (any other ATen operator), or an input write-back.
 *   ir_tensor  what lowering returns for a graph value (Inductor's
 *              TensorBox): a buffer seen through a strided layout, an
 *              unrealized pointwise computation, or a view (index map) of
 *              another ir_tensor. Loading an element of any of them gives an
 *              ir_expr; realizing one gives it a buffer.
 *
 * Indices are gc_sym expressions (sym.h), symbolic from the start: loop
 * variables are symbols, strides and offsets are expressions.
 */
#ifndef GC_IR_IR_H
#define GC_IR_IR_H

#include <stdbool.h>
#include <stdint.h>

#include "compiler/arena.h"
#include "compiler/error.h"
#include "compiler/graph.h"
#include "compiler/ir/sym.h"

#define IR_MAX_RANK 16 /* tensors of higher rank fall back to ATen */

/* ---- scalar operations ----
 * X(NAME, arity, "name") for every operation of ir_expr. Semantics follow
 * PyTorch's for the dtype the expression has (see codegen/cexpr.c for the C
 * spelling): MAXIMUM/MINIMUM propagate NaN, FMAX/FMIN ignore it, FLOORDIV
 * and MOD round toward minus infinity (Python's // and %), comparisons and
 * logical operations yield bool. */
#define IR_OPS(X)                                                              \
  X(CONST, 0, "const")   /* a literal of the expression's dtype */             \
  X(LOAD, 0, "load")     /* buf[index] */                                      \
  X(INDEX, 0, "index")   /* the integer value of a symbolic expression */      \
  X(GATHER, 1, "gather") /* buf[index + stride * wrap(args[0])]: an index      \
                            read from data (embedding, gather, ...); out of    \
                            range sets the kernel error flag and reads a       \
                            clamped element instead */                         \
  X(CAST, 1, "cast")                                                           \
  X(NEG, 1, "neg")                                                             \
  X(ABS, 1, "abs")                                                             \
  X(EXP, 1, "exp")                                                             \
  X(EXP2, 1, "exp2")                                                           \
  X(EXPM1, 1, "expm1")                                                         \
  X(LOG, 1, "log")                                                             \
  X(LOG2, 1, "log2")                                                           \
  X(LOG10, 1, "log10")                                                         \
  X(LOG1P, 1, "log1p")                                                         \
  X(SQRT, 1, "sqrt")                                                           \
  X(RSQRT, 1, "rsqrt")                                                         \
  X(CBRT, 1, "cbrt")                                                           \
  X(SIN, 1, "sin")                                                             \
  X(COS, 1, "cos")                                                             \
  X(TAN, 1, "tan")                                                             \
  X(ASIN, 1, "asin")                                                           \
  X(ACOS, 1, "acos")                                                           \
  X(ATAN, 1, "atan")                                                           \
  X(SINH, 1, "sinh")                                                           \
  X(COSH, 1, "cosh")                                                           \
  X(TANH, 1, "tanh")                                                           \
  X(ASINH, 1, "asinh")                                                         \
  X(ACOSH, 1, "acosh")                                                         \
  X(ATANH, 1, "atanh")                                                         \
  X(ERF, 1, "erf")                                                             \
  X(ERFC, 1, "erfc")                                                           \
  X(LGAMMA, 1, "lgamma")                                                       \
  X(CEIL, 1, "ceil")                                                           \
  X(FLOOR, 1, "floor")                                                         \
  X(ROUND, 1, "round") /* half to even, as torch.round */                      \
  X(TRUNC, 1, "trunc")                                                         \
  X(SIGMOID, 1, "sigmoid")                                                     \
  X(RECIP, 1, "reciprocal")                                                    \
  X(ISNAN, 1, "isnan")                                                         \
  X(ISINF, 1, "isinf")                                                         \
  X(SIGNBIT, 1, "signbit")                                                     \
  X(NOT, 1, "logical_not")                                                     \
  X(BNOT, 1, "bitwise_not")                                                    \
  X(ADD, 2, "add")                                                             \
  X(SUB, 2, "sub")                                                             \
  X(MUL, 2, "mul")                                                             \
  X(DIV, 2, "div") /* true division; integers: C's / (divisor != 0) */         \
  X(FLOORDIV, 2, "floordiv")                                                   \
  X(MOD, 2, "mod")   /* Python's %, sign of the divisor */                     \
  X(FMOD, 2, "fmod") /* C's fmod (integers: %), sign of the dividend */        \
  X(POW, 2, "pow")                                                             \
  X(ATAN2, 2, "atan2")                                                         \
  X(HYPOT, 2, "hypot")                                                         \
  X(COPYSIGN, 2, "copysign")                                                   \
  X(MAXIMUM, 2, "maximum") /* NaN wins */                                      \
  X(MINIMUM, 2, "minimum") /* NaN wins */                                      \
  X(FMAX, 2, "fmax")       /* NaN loses */                                     \
  X(FMIN, 2, "fmin")       /* NaN loses */                                     \
  X(EQ, 2, "eq")                                                               \
  X(NE, 2, "ne")                                                               \
  X(LT, 2, "lt")                                                               \
  X(LE, 2, "le")                                                               \
  X(GT, 2, "gt")                                                               \
  X(GE, 2, "ge")                                                               \
  X(AND, 2, "logical_and")                                                     \
  X(OR, 2, "logical_or")                                                       \
  X(XOR, 2, "logical_xor")                                                     \
  X(BAND, 2, "bitwise_and")                                                    \
  X(BOR, 2, "bitwise_or")                                                      \
  X(BXOR, 2, "bitwise_xor")                                                    \
  X(SHL, 2, "shift_left")  /* 0 for a count outside [0, width), as ATen */     \
  X(SHR, 2, "shift_right") /* arithmetic for signed types */                   \
  X(RAND, 2, "rand")   /* uniform in [0, 1) from (int64 seed, int64 counter):  \
                          Philox4x32-10, float32 (lower/random.c) */           \
  X(WHERE, 3, "where") /* args[0] ? args[1] : args[2] */                       \
  X(FMA, 3, "fma")     /* args[0] * args[1] + args[2], rounded once */

typedef enum ir_op {
#define X(name, arity, text) IR_##name,
  IR_OPS(X)
#undef X
      IR_OP_COUNT
} ir_op;

/* Arity and name of an operation. */
int ir_op_arity(ir_op op);
const char *ir_op_name(ir_op op);

typedef struct ir_buf ir_buf;
typedef struct ir_node ir_node;
typedef struct ir_expr ir_expr;

/* A scalar expression. Hash-consed within an ir_graph. */
struct ir_expr {
  ir_op op;
  gc_dtype dtype; /* of the value (bool for comparisons) */
  ir_expr *args[3];
  union {
    struct {
      double f;  /* CONST of a floating dtype */
      int64_t i; /* CONST of an integer or bool dtype */
    } k;
    struct {
      ir_buf *buf;    /* LOAD, GATHER: the buffer */
      gc_sym *index;  /* LOAD: element index (offset included); GATHER: the
                         part that does not depend on data */
      int64_t stride; /* GATHER: elements between consecutive data indices */
      int64_t size;   /* GATHER: data indices are valid in [0, size) */
      bool wrap;      /* GATHER: negative data indices count from the end */
    } load;
    gc_sym *index; /* INDEX: the expression */
  };
  int id;         /* creation order */
  uint64_t hash;  /* structural, for hash-consing */
  uint64_t walk;  /* scratch of ir_expr_walk: the last walk that saw it */
  uint64_t subst; /* scratch of substitution: the last one that saw it, */
  ir_expr *image; /* and what it made of it */
  ir_expr *chain; /* hash bucket */
};

/* Where a buffer's memory comes from. */
typedef enum ir_buf_kind {
  IR_BUF_INPUT,  /* graph input `index` (the caller's tensor) */
  IR_BUF_ARENA,  /* an intermediate in the call's arena (planned) */
  IR_BUF_OUTPUT, /* a program output, allocated fresh for each call */
  IR_BUF_RESULT, /* returned by an extern/fallback call (ATen allocates) */
  IR_BUF_TEMP,   /* an intermediate with its own memory, allocated before
                    its first write and dropped after its last use (the
                    planner makes them, sc_schedule.temp_min_bytes) */
} ir_buf_kind;

struct ir_buf {
  int id; /* index in ir_graph.bufs */
  ir_buf_kind kind;
  int index; /* INPUT: graph input; OUTPUT: first program output */
  gc_dtype dtype;
  int rank;
  int64_t *sizes;        /* rank entries */
  int64_t *strides;      /* rank entries, in elements, from element 0 (the data
                            pointer of its tensor: a storage offset is already in
                            it) */
  int64_t numel;         /* product of sizes */
  int64_t span;          /* elements the layout reaches: 1 + max offset */
  ir_node *def;          /* the node writing it; NULL for inputs */
  const gc_value *value; /* the graph value it realizes (may be NULL) */
  bool mutated;          /* an INPUT written back by the program */
  /* set by the memory planner (ARENA only) */
  int64_t arena_offset; /* bytes from the arena's base */
  int first, last;      /* live range in kernel order; a storage root's
                           `last` covers every buffer sharing it */
  ir_buf *share;        /* computed in place: this buffer lives in the
                           memory of `share` (an ARENA, RESULT or OUTPUT
                           buffer, or one sharing in turn); NULL: its own
                           memory */
  bool shared;          /* its memory also holds another buffer */
  /* Sizes as expressions (docs/dynamic-shapes.md): always set, constants
   * for a static buffer. A symbolic buffer (a size or stride uses a size
   * symbol) holds IR_SYMBOLIC in the int64 fields where they are not
   * constants: code that has not learned symbols must not read them
   * (lowering rules run on symbolic values only when listed in lower.c's
   * symbolic_rules). */
  gc_sym **ssizes, **sstrides;
  gc_sym *snumel, *sspan;
  bool symbolic;
  gc_sym *sarena_offset; /* a symbolic plan's offset (bytes) */
};

/* An int64 size, stride or offset field whose value is symbolic: see the
 * expression field beside it. */
#define IR_SYMBOLIC ((int64_t)-1)

/* The buffer whose memory b lives in (b itself unless computed in place). */
ir_buf *ir_buf_storage(ir_buf *b);

/* Node kinds. SCAN, SCATTER and INTERP are computations generated code
 * makes that are neither pointwise nor reductions; they are described as
 * the call of an ATen .out overload (op, args with their views, `out`),
 * which names their operands and prints them, but no ATen call is made.
 * EXTERN, FALLBACK and these three are call nodes (ir_node_is_call): each
 * gets a kernel of its own, reading its arguments' buffers from memory. */
typedef enum ir_node_kind {
  IR_POINTWISE, /* out[layout(vars)] = body(vars) for every point */
  IR_REDUCTION, /* out[layout(vars)] = reduce over rvars of body(vars, rvars) */
  IR_EXTERN,    /* an ATen library call (mm, conv...) writing `out` or
                   returning RESULT buffers */
  IR_FALLBACK,  /* any other ATen call, on realized inputs */
  IR_SCAN,      /* a scan along a dim (ir_node.scan; lower/scan.c,
                   codegen/scan.c) */
  IR_SCATTER,   /* a scatter along a dim (ir_node.scatter; lower/scatter.c,
                   codegen/scatter.c) */
  IR_INTERP,    /* a linear interpolation's backward (ir_node.interp;
                   lower/upsample.c, codegen/upsample.c) */
} ir_node_kind;

/* Reductions: X(NAME, "name"). */
#define IR_REDUCTIONS(X)                                                       \
  X(SUM, "sum")                                                                \
  X(PROD, "prod")                                                              \
  X(MAX, "max")       /* NaN propagates */                                     \
  X(MIN, "min")       /* NaN propagates */                                     \
  X(ARGMAX, "argmax") /* NaN is the max; ties: first index */                  \
  X(ARGMIN, "argmin")                                                          \
  X(ANY, "any")                                                                \
  X(ALL, "all")                                                                \
  X(WELFORD, "welford") /* results: mean, m2 (sum of squared deviations),      \
                           count */

typedef enum ir_reduction {
#define X(name, text) IR_RED_##name,
  IR_REDUCTIONS(X)
#undef X
} ir_reduction;

const char *ir_reduction_name(ir_reduction r);

/* What a SCATTER node does: out starts as self (or a constant), then
 * along `dim` each element of src goes to the position its index names,
 * in ATen's order (ascending position along dim). */
typedef enum ir_scatter_op {
  IR_SCATTER_ADD,       /* scatter_add: out[.., index[p], ..] += src[p] */
  IR_SCATTER_SET,       /* scatter.src: out[.., index[p], ..] = src[p] */
  IR_SCATTER_INDEX_ADD, /* index_add: out.select(dim, index[j]) +=
                           source.select(dim, j) */
  IR_SCATTER_EMBEDDING, /* embedding_dense_backward: out[index[j]] +=
                           grad[j], rows of `padding` skipped */
  IR_SCATTER_INDEX_PUT, /* index_put(accumulate=True) with one index
                           tensor on dim first (= dim): out[.., index[j],
                           ..] += values[.., j, ..], negative indices
                           counting from the end; with several (odims):
                           out[offset[j] + rest] += values[.., j, ..] */
} ir_scatter_op;

/* What a SCAN node computes: cumsum, cumprod, logcumsumexp, cummax,
 * cummin. */
typedef enum ir_scan_op {
  IR_SCAN_SUM,
  IR_SCAN_PROD,
  IR_SCAN_LOGSUMEXP,
  IR_SCAN_MAX, /* values and indices; NaN wins, ties take the later index */
  IR_SCAN_MIN,
} ir_scan_op;

/* An argument of an extern or fallback call: a value of the original
 * graph's node, with tensors replaced by IR tensors. */
typedef struct ir_call_arg {
  const char *name; /* schema parameter */
  gc_arg arg;       /* the literal (TENSOR/TENSORS items are unused) */
  ir_buf **bufs;    /* TENSOR: 1, TENSORS/OPT_TENSORS: arg.n (NULL: None) */
  struct ir_view **views; /* the strided view of each buffer passed */
  bool keyword;
} ir_call_arg;

/* One axis of a bilinear interpolation: for each output position o, the
 * two input positions i0[o] <= i1[o] it reads and their weights l0[o],
 * l1[o] (values of the output's dtype), as ATen computes them. */
typedef struct ir_interp {
  int64_t in, out;
  int64_t *i0, *i1; /* `out` entries each */
  double *l0, *l1;
} ir_interp;

/* A strided view of a buffer, as an extern call sees its argument. */
/* The most bytes a buffer may span (1 TiB): sizes a graph states beyond it
 * are refused by the verifier, so the passes' sums and products of sizes
 * cannot overflow. */
#define IR_MAX_BUF_BYTES ((int64_t)1 << 40)

typedef struct ir_view {
  ir_buf *buf;
  int rank;
  int64_t *sizes, *strides;    /* in elements */
  int64_t offset;              /* from the buffer's first element */
  gc_sym **ssizes, **sstrides; /* the same as expressions (NULL: static,
                                  see ir_view_sym) */
  gc_sym *soffset;
} ir_view;

struct ir_node {
  int id;
  ir_node_kind kind;
  const char *name; /* "k3_layernorm_gelu"-style; set by the scheduler */
  ir_buf *out;      /* the buffer written: POINTWISE, REDUCTION, and a call
                       node through its .out overload (out_variant) */
  /* iteration space: one variable per dimension of `out` */
  int rank;
  int64_t *ranges;
  gc_sym **vars;
  /* REDUCTION: the reduced dimensions */
  int rrank;
  int64_t *rranges;
  gc_sym **rvars;
  gc_sym **sranges, **srranges; /* ranges as expressions (always set) */
  ir_reduction red;
  ir_buf *out2, *out3; /* REDUCTION: argmax/argmin's value buffer is `out`
                          and the index `out2`; WELFORD: mean `out`, m2
                          `out2`, count `out3` (any may be NULL); SCAN
                          (cummax, cummin): the indices in `out2` */
  ir_expr *body;       /* POINTWISE, REDUCTION: value at (vars, rvars) */
  /* call nodes (ir_node_is_call): the ATen call (SCAN, SCATTER, INTERP:
   * the one they compute as) */
  const gc_node *gnode; /* the functional graph's node */
  const gc_op *op;      /* the operator called */
  ir_call_arg *args;
  int nargs;
  ir_buf **results; /* one per schema return (NULL: unused/none) */
  int nresults;
  bool out_variant; /* EXTERN, SCAN, SCATTER, INTERP: op is the .out
                       overload writing `out` */
  union {
    /* SCAN: along dimension `dim` of `out`, reading the call's `self` (of
     * out's sizes), in ATen's order; cummax and cummin write their indices
     * into out2 */
    struct {
      ir_scan_op op;
      int dim;
    } scan;
    /* SCATTER: into `out` along `dim` */
    struct {
      ir_scatter_op op;
      int dim;
      int first;        /* a token-form scatter (embedding backward,
                           index_put: ir_scatter_by_token): its index names
                           a row of dims first..dim of `out` */
      const int *odims; /* index_put's element form (several index
                           tensors): the index is an element offset of
                           `out` (checked indices times strides), the
                           source's dims are its `first` dims, the
                           index's, then the rest, and odims[j] is the
                           output dim of the source's j-th dim that is not
                           an index dim; NULL otherwise */
      int64_t padding;  /* the embedding backward skips the rows of index
                           `padding` */
      double alpha;     /* index_add: source times alpha (1 for the
                           others; a float alpha is 0 or a power of two:
                           exact products) */
      ir_expr *fill;    /* a constant `out` starts from (its self is not
                           read); NULL: from self (none for the embedding
                           backward: zeros) */
    } scatter;
    /* INTERP: the backward of upsample_linear1d, bilinear2d or
     * trilinear3d: `out` [N, C, in...] (1-3 spatial dims) gets each
     * `grad_output` [N, C, out...] element times its 2^d weights, in
     * ATen's order; axes[k] is spatial axis k (naxes = out->rank - 2) */
    struct {
      ir_interp *axes;
      int naxes;
    } interp;
  };
  /* provenance, for comments and dumps */
  int *gnodes; /* graph node ids it computes */
  int ngnodes;
  const char *what; /* short description ("relu", "layer_norm") */
};

/* An IR value: what lowering makes of a graph value. */
typedef enum ir_tensor_kind {
  IR_T_BUF,  /* a buffer through `strides`/`offset` (a view of it, perhaps) */
  IR_T_LOOP, /* an unrealized pointwise computation: `body` over `vars` */
  IR_T_VIEW, /* element `idx` is element map(idx) of `base` */
} ir_tensor_kind;

typedef struct ir_tensor ir_tensor;
struct ir_tensor {
  ir_tensor_kind kind;
  gc_dtype dtype;
  int rank;
  int64_t *sizes;
  /* IR_T_BUF */
  ir_buf *buf;
  int64_t *strides; /* in elements */
  int64_t offset;   /* elements from the buffer's element 0 */
  /* IR_T_LOOP */
  gc_sym **vars; /* rank variables the body is written in */
  ir_expr *body;
  int nreads;  /* loads in the body (realization heuristic) */
  int nops;    /* operations in the body */
  bool costly; /* contains an expensive operation (exp, log, ...) */
  int *gnodes; /* graph nodes folded into it */
  int ngnodes;
  /* IR_T_VIEW */
  ir_tensor *base;
  gc_sym **map;          /* base->rank index expressions over `vars` */
  const gc_value *value; /* the graph value it was first set for (NULL
                            for internal tensors): eager's layout */
  int uses;              /* times a consumer loaded it (lowering counts) */
  ir_buf *realized;      /* set once realized: later loads read the buffer */
  gc_sym **ssizes;       /* sizes as expressions (always set) */
  gc_sym **sstrides;     /* IR_T_BUF: strides as expressions */
  gc_sym *soffset;       /* IR_T_BUF: offset as an expression */
};

/* A guard: a fact about the size symbols the generated code relies on,
 * which the runtime checks on every call (docs/dynamic-shapes.md). */
typedef enum ir_guard_op {
  IR_GUARD_EQ,   /* a == b */
  IR_GUARD_NE,   /* a != b */
  IR_GUARD_LE,   /* a <= b */
  IR_GUARD_MOD0, /* a % b == 0 (b a positive constant) */
} ir_guard_op;

typedef enum ir_guard_kind { /* artifact.proto GuardKind */
                             IR_GUARD_INPUT = 1,
                             IR_GUARD_BROADCAST = 2,
                             IR_GUARD_DIVISIBLE = 3,
                             IR_GUARD_BOUND = 4,
                             IR_GUARD_RANGE = 5,
} ir_guard_kind;

typedef struct ir_guard {
  ir_guard_op op;
  gc_sym *a, *b;
  ir_guard_kind kind;
  const char *text; /* for people: names inputs and dims */
} ir_guard;

/* Everything of one compile's back half. */
typedef struct ir_graph {
  gc_arena *a;
  gc_symctx sym;
  const gc_graph *g; /* the functional graph it lowers */
  ir_buf **bufs;
  int nbufs, capbufs;
  ir_node **nodes; /* in a valid execution order */
  int nnodes, capnodes;
  const char **gnode_what; /* per graph node: the operator table's name of
                              its operator (the compiler's own string, not
                              the client's), NULL for fallbacks */
  ir_view **outputs;       /* per program output: where it lives (NULL: not a
                              tensor); set by lowering */
  int noutputs;
  ir_expr **ebuckets; /* expression hash-consing */
  size_t nebuckets;
  int nexprs;
  bool oom;
  bool memory_first; /* lowering favours memory over recomputation
                        (training programs: see L__maybe_realize) */
  bool eager_random; /* random operators stay ATen calls (compile option
                        eager_random; else lowered: lower/random.c) */
  bool blas;         /* the target has the system BLAS: batched products
                        may run in generated code (sched/schedule.c) */
  bool dnnl;         /* the target has oneDNN (libdnnl.so.2) and AVX-512:
                        float32 mm and addmm may run in generated code
                        through its sgemm (sched/schedule.c sc_gemm_of) */
  bool fma;          /* the target has FMA: ATen runs its AVX2 or AVX-512
                        kernels, whose host arithmetic is contracted into
                        multiply-adds (lower/upsample.c) */
  /* size symbols (docs/dynamic-shapes.md): syms[i] is "s<i>", the key's
   * symbol i; none in a static graph */
  gc_sym **syms;
  int nsyms;
  ir_guard *guards; /* what the code assumes about them */
  int nguards, capguards;
} ir_graph;

int ir_graph_init(ir_graph *ir, gc_arena *a, const gc_graph *g);

/* Buffers and nodes. NULL when out of memory. */
ir_buf *ir_buf_new(ir_graph *ir, ir_buf_kind kind, gc_dtype dtype, int rank,
                   const int64_t *sizes, const int64_t *strides);
ir_node *ir_node_new(ir_graph *ir, ir_node_kind kind);
/* Appends n to the execution order. */
int ir_node_append(ir_graph *ir, ir_node *n);

/* Contiguous (row-major) strides of `sizes`. */
void ir_contiguous_strides(int rank, const int64_t *sizes, int64_t *strides);

/* ---- symbolic sizes (docs/dynamic-shapes.md) ---- */

/* A buffer whose sizes and strides are expressions (NULL strides:
 * contiguous). The int64 fields get the constants, IR_SYMBOLIC elsewhere. */
ir_buf *ir_buf_new_s(ir_graph *ir, ir_buf_kind kind, gc_dtype dtype, int rank,
                     gc_sym *const *sizes, gc_sym *const *strides);
/* Contiguous strides of symbolic sizes (the product of the later sizes;
 * sizes of 0 and 1 do not matter: nothing is stored there). */
void ir_contiguous_sstrides(ir_graph *ir, int rank, gc_sym *const *sizes,
                            gc_sym **strides);
/* Constants as expressions, and back (IR_SYMBOLIC for a symbolic one). */
gc_sym **ir_syms_of(ir_graph *ir, int n, const int64_t *v);
void ir_ints_of(int n, gc_sym *const *e, int64_t *v);
/* Is any of the n expressions symbolic? */
bool ir_any_symbolic(const ir_graph *ir, int n, gc_sym *const *e);
/* Records a guard (deduplicated); false when out of memory. A guard that
 * the symbols' ranges prove is not recorded. */
bool ir_guard_add(ir_graph *ir, ir_guard_op op, gc_sym *a, gc_sym *b,
                  ir_guard_kind kind, const char *text);
/* The view's sizes, strides and offset as expressions (made from the int64
 * fields for a view that has none). */
void ir_view_sym(ir_graph *ir, ir_view *v);
/* An unrealized pointwise tensor or a view with expression sizes (the
 * int64 sizes follow, IR_SYMBOLIC where symbolic). */
ir_tensor *ir_tensor_strided_s(ir_graph *ir, ir_buf *b, int rank,
                               gc_sym *const *sizes, gc_sym *const *strides,
                               gc_sym *offset);
/* e's value with every size symbol 1021 (a prime no size is likely to tie
 * with; loop indices 0), in double: what a heuristic that must order
 * symbolic sizes (strides for a loop order, buffers for the memory plan)
 * compares. It never decides what the code computes, only how. */
double ir_probe(const ir_graph *ir, const gc_sym *e);
/* e as text in the graph grammar ("2*s0 + 1", "s0 // 4"): what the
 * artifact states (no loop index may occur); in the arena. */
char *ir_sym_text(ir_graph *ir, const gc_sym *e);

/* ---- expressions ---- */
ir_expr *ir_const_f(ir_graph *ir, double v, gc_dtype dt);
/* An integer constant, wrapped to dt's range (-4 as uint8 is 252). */
ir_expr *ir_const_i(ir_graph *ir, int64_t v, gc_dtype dt);
ir_expr *ir_load(ir_graph *ir, ir_buf *b, gc_sym *index);
/* An indirect load: b[index + stride * i] where i = idx (an int64
 * expression), valid in [0, size) (in [-size, size) counting from the end
 * when wrap). Generated code checks the range (see IR_GATHER). */
ir_expr *ir_gather(ir_graph *ir, ir_buf *b, gc_sym *index, ir_expr *idx,
                   int64_t stride, int64_t size, bool wrap);
/* True for operations that read a buffer (LOAD, GATHER). */
bool ir_reads_buffer(const ir_expr *e);
ir_expr *ir_index(ir_graph *ir, gc_sym *e, gc_dtype dt);
/* An operation. CAST's dtype is the target; comparisons and logical ops
 * yield bool whatever dt says. */
ir_expr *ir_op1(ir_graph *ir, ir_op op, gc_dtype dt, ir_expr *a);
ir_expr *ir_op2(ir_graph *ir, ir_op op, gc_dtype dt, ir_expr *a, ir_expr *b);
ir_expr *ir_op3(ir_graph *ir, ir_op op, gc_dtype dt, ir_expr *a, ir_expr *b,
                ir_expr *c);
/* `e` converted to `dt` (e itself when it has that dtype). */
ir_expr *ir_cast(ir_graph *ir, ir_expr *e, gc_dtype dt);
/* Replaces loop variables inside LOAD and INDEX (map as gc_sym_subst). */
ir_expr *ir_expr_subst(ir_graph *ir, ir_expr *e, const gc_symmap *map);

/* e at a data-dependent point: variables replaced by `map` (as
 * ir_expr_subst; its entry for var, if any, is ignored) and variable `var` by
 * the int64 value `data`, so every load whose index is affine in var becomes a
 * gather of `data` (checked against [0, size), negative values counted from the
 * end when `wrap`). A gather of a computed tensor then computes only the
 * gathered elements. NULL when var occurs in an index other than affinely
 * or in an INDEX or a gather's own index (no data form), when e reads a
 * reduction's accumulator, or when no load depends on var (the range check
 * would be lost). */
ir_expr *ir_expr_gather_var(ir_graph *ir, ir_expr *e, const gc_symmap *map,
                            int var, ir_expr *data, int64_t size, bool wrap);

/* Bodies are DAGs: hash-consing shares subexpressions, and a chain of n
 * relus (each reading its input twice) is a tree of 2^n nodes. Every walk
 * over an expression goes through ir_expr_walk, which calls fn once per
 * distinct subexpression (pre-order, at its first occurrence). fn returns
 * 0 to go on, IR_WALK_SKIP not to descend into e's arguments, or any other
 * value to stop the walk, which then returns that value. Returns 0 when
 * every subexpression was visited, IR_WALK_TOO_DEEP past 10000 levels.
 * fn must not start another walk over the same expressions. */
#define IR_WALK_SKIP (-2)
#define IR_WALK_TOO_DEEP (-1)
typedef int (*ir_walk_fn)(const ir_expr *e, void *ctx);
int ir_expr_walk(const ir_expr *e, ir_walk_fn fn, void *ctx);

/* Expression statistics: distinct loads, operations, and whether an
 * expensive operation (exp, log, tanh, ...) occurs. */
void ir_expr_stats(const ir_expr *e, int *loads, int *ops, bool *costly);

/* ---- tensors ---- */

/* A buffer as a tensor (its own layout). */
ir_tensor *ir_tensor_of_buf(ir_graph *ir, ir_buf *b);
/* A strided view of a buffer. */
ir_tensor *ir_tensor_strided(ir_graph *ir, ir_buf *b, int rank,
                             const int64_t *sizes, const int64_t *strides,
                             int64_t offset);
/* The element of t at index `idx` (t->rank expressions). */
ir_expr *ir_tensor_load(ir_graph *ir, ir_tensor *t, gc_sym *const *idx);
/* If t is (or can be seen as) a strided view of a buffer, fills the view
 * and returns true. */
bool ir_tensor_as_strided(ir_graph *ir, ir_tensor *t, ir_view *v);

/* ---- call nodes ---- */

/* Is n a call node: EXTERN, FALLBACK, SCAN, SCATTER or INTERP (a kernel
 * of its own, arguments in memory), rather than a loop (POINTWISE,
 * REDUCTION)? */
bool ir_node_is_call(const ir_node *n);
/* Does generated code make call node n itself: SCAN, SCATTER, INTERP
 * (never an ATen call)? */
bool ir_node_is_generated(const ir_node *n);
/* The kind's name, as dumps print it ("pointwise", "scan"...). */
const char *ir_node_kind_name(ir_node_kind kind);

/* A call node's argument `name` as the view its buffer is passed through
 * (a list's first item); NULL when absent, None or not a tensor. */
const ir_view *ir_call_view(const ir_node *n, const char *name);
/* Is n a SCATTER reading its index along the tokens' dims (embedding
 * backward, index_put: the index names a row of dims first..dim of the
 * output), rather than along dim? */
bool ir_scatter_by_token(const ir_node *n);
/* The views SCATTER n reads: self (NULL: the constant scatter.fill, or
 * zeros for the embedding backward), index and source. */
void ir_scatter_views(const ir_node *n, const ir_view **self,
                      const ir_view **index, const ir_view **src);

/* ---- checks and printing ---- */

/* Checks the IR's invariants (see verify.c); GC_EINTERNAL naming the first
 * broken one. */
int ir_verify(const ir_graph *ir, gc_error *err);

/* A floating dtype (float32/64, float16, bfloat16)? */
bool ir_dtype_is_float(gc_dtype d);

/* Does the operation give a bool (comparisons, logic, isnan...)? */
bool ir_op_yields_bool(ir_op op);

/* The IR as text, in the arena ("buf3: f32[8, 16] arena = ..."). */
char *ir_print(ir_graph *ir);
/* An expression as text (for dumps and C comments). */
char *ir_expr_str(ir_graph *ir, const ir_expr *e);

#endif
