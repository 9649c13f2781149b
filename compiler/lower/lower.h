/*
 * lower.h: lowering the functional graph into the loop IR, and the API the
 * lowering rules are written in.
 *
 * gc_lower() walks the functional graph's nodes in order. For each it looks
 * its operator up in the operator facts table (compiler/opfacts.def): a row
 * names the operator's class and the C function that lowers it, with an
 * integer parameter (which operation of a family). The function reads the
 * node's arguments through L_* helpers and sets an ir_tensor for each
 * output value:
 *
 *   pointwise  an unrealized IR_T_LOOP (L_pointwise): consumers inline it
 *   view       an index map over its input (L_view): no copy, no node
 *   reduction  a realized reduction node (L_reduce)
 *   extern     an ATen library call writing a planned buffer (L_extern)
 *
 * A rule may decline a particular call (a dtype or argument it does not
 * handle) by returning GC_EUNSUPPORTED: the node then becomes a fallback,
 * an ATen call on realized inputs. So may the driver: after a rule, every
 * output's dtype and sizes are checked against the graph's metadata, and a
 * disagreement (a lowering bug) turns the node into a fallback too, with a
 * diagnostic. Nothing a rule does wrong becomes a wrong answer silently.
 *
 * Realization (giving an unrealized value a buffer) follows Inductor: a
 * pointwise value is computed where it is used (inlined) unless it has
 * several users and is expensive (many loads, a long body, or exp/log/...),
 * or is read by an extern or fallback call, or is a program output.
 */
#ifndef GC_LOWER_LOWER_H
#define GC_LOWER_LOWER_H

#include "compiler/functionalize.h"
#include "compiler/ir/ir.h"
#include "compiler/opfacts.h"

typedef struct lower_ctx lower_ctx;

/* What the back half made of a graph (for the artifact and summary()). */
typedef struct gc_lower_stats {
  int nodes;    /* nodes of the functional graph */
  int native;   /* lowered into generated code (pointwise, reduction, view) */
  int extern_;  /* library calls through ATen (mm, conv, ...) */
  int fallback; /* other ATen calls */
  const char **fallback_ops; /* operator of each fallback node */
  int nfallback_ops;
} gc_lower_stats;

/* Lowers `f` (a functional program) into `ir`. Fails only for out of memory
 * or an internal error; every unsupported operator becomes a fallback. */
int gc_lower(ir_graph *ir, const gc_functional *f, gc_lower_stats *stats,
             gc_error *err);

/* ---- for lowering rules ---- */

/* A rule: lowers node `n` (param: the row's parameter). Returns 0, or
 * GC_EUNSUPPORTED to make the node a fallback, or another GC_E* to fail. */
typedef int (*lower_fn)(lower_ctx *L, const gc_node *n, int param);

/* Operator classes of the table: gc_opclass (compiler/opfacts.h). */

/* The graph and the IR being built. */
ir_graph *L_ir(lower_ctx *L);

/* Arguments by schema parameter name (the default when not passed). */
const gc_arg *L_arg(lower_ctx *L, const gc_node *n, const char *name);
/* The IR tensor of a tensor argument; NULL when None, absent or not a
 * tensor (a number in a Tensor slot is not a tensor: see L_scalar). */
ir_tensor *L_tensor(lower_ctx *L, const gc_node *n, const char *name);
/* The same, for a reduction that picks one of its elements (max, min and
 * their arg forms): when the computation it reads has other users, it is
 * realized first, so the reduction and every other reader see the same
 * bits (0 with *out NULL: not a tensor; GC_ENOMEM). */
int L_tensor_once(lower_ctx *L, const gc_node *n, const char *name,
                  ir_tensor **out);
/* Argument `name` (as L_tensor), realized into a buffer first when it is a
 * computation: for a rule that reads each element several times over
 * (bilinear upsampling: each input element feeds up to 4 * (out/in)^2
 * outputs), where inlining would compute it again at every read. */
int L_tensor_realized(lower_ctx *L, const gc_node *n, const char *name,
                      ir_tensor **out);
/* Argument `name` (as L_tensor), realized first when it is a computation
 * with an expensive operation (exp, erf, ...), for a rule whose passes
 * each read every element (softmax: max, sum of exp, quotient). Inlined,
 * each pass would evaluate it again, and two evaluations can differ in the
 * last bit (a vector erf in one loop, a scalar one in another's tail): a
 * row of equal values would then not give equal results, and a max pool
 * of them would pick another of the tied positions than eager (graphgen
 * --grad seed 1900572). */
int L_tensor_passes(lower_ctx *L, const gc_node *n, const char *name,
                    ir_tensor **out);
/* The IR tensors of a Tensor[] argument: returns how many items it has
 * (-1 when it is not a list of tensors) and sets *out to an array of them
 * (an item that is None gets NULL). */
int L_tensors(lower_ctx *L, const gc_node *n, const char *name,
              ir_tensor ***out);
/* A number argument (int, float, bool literal, or a wrapped number in a
 * Tensor slot). Returns false when it is not one. *dt gets int64, float64
 * or bool; *v the value (as double; exact for ints up to 2^53, see *iv). */
bool L_scalar(lower_ctx *L, const gc_node *n, const char *name, double *v,
              int64_t *iv, gc_dtype *dt);
/* An int argument (false when not an int literal). */
bool L_int(lower_ctx *L, const gc_node *n, const char *name, int64_t *out);
/* A bool argument. */
bool L_bool(lower_ctx *L, const gc_node *n, const char *name, bool *out);
/* A float (or int) argument as double. */
bool L_float(lower_ctx *L, const gc_node *n, const char *name, double *out);
/* An int[] argument; *ints points into the graph. */
bool L_ints(lower_ctx *L, const gc_node *n, const char *name,
            const int64_t **ints, int *count);
/* A ScalarType argument (false when None or absent). */
bool L_dtype(lower_ctx *L, const gc_node *n, const char *name, gc_dtype *out);

/* An upsampling's scale factors over its d spatial dims (1-3), from
 * scale_factors (.vec) or scales / scales_h, scales_w / scales_d, scales_h,
 * scales_w: has[i] is false when the factor is None or not positive (ATen
 * then uses in / out). False when an argument is malformed. */
bool L_upsample_scales(lower_ctx *L, const gc_node *n, int d, bool *has,
                       double *sf);
/* Are out[0..d) the spatial sizes ATen computes for an upsampling of
 * spatial sizes in[] from its output_size, or else from its scale factors
 * (floor(in * factor))? A rule checks its metadata with it: a client's
 * lie would otherwise be computed as told. */
bool L_upsample_out_sizes(lower_ctx *L, const gc_node *n, int d,
                          const int64_t *in, const int64_t *out,
                          const bool *has, const double *sf);

/* Is the 4-D or 5-D value laid out as dense channels-last (3d), by
 * PyTorch's test (size-1 dims ignored)? ATen's upsampling then takes its
 * channels-last kernel. */
bool L_eager_channels_last(const gc_tensor_meta *m);

/* Metadata of output `k` of n (NULL when it is not a tensor). */
const gc_tensor_meta *L_out_meta(const gc_node *n, int k);
/* The static sizes of a metadata; false when symbolic. */
bool L_static_sizes(const gc_tensor_meta *m, int64_t *sizes);

/* ---- symbolic sizes (docs/dynamic-shapes.md) ----
 * In a graph with size symbols, sizes, strides and offsets are gc_sym
 * expressions over the IR's size symbols (ir_graph.syms). A rule runs on
 * a node with symbolic metadata only when lower.c lists it among the
 * rules that read sizes through these helpers (symbolic_rules); any other
 * such node is a fallback. */

/* An integer of the graph (a size, stride, offset or SymInt value) as an
 * expression; NULL when its expression has a form the IR lacks (a division
 * by a symbol, a power...). */
gc_sym *L_symint(lower_ctx *L, const gc_symint *v);
/* A metadata's sizes (strides) as expressions; false when one has no
 * expression form. */
bool L_sym_sizes(lower_ctx *L, const gc_tensor_meta *m, gc_sym **sizes);
bool L_sym_strides(lower_ctx *L, const gc_tensor_meta *m, gc_sym **strides);
/* A SymInt[] (or int[]) argument as expressions: the literals, and each
 * named SymInt value's expression. False when absent or not expressible. */
bool L_symints(lower_ctx *L, const gc_node *n, const char *name, gc_sym **out,
               int *count, int max);
/* Does the graph have size symbols? */
bool L_symbolic(lower_ctx *L);
/* Records a guard (ir_guard_add) with a text naming node n; false when out
 * of memory. */
bool L_guard(lower_ctx *L, const gc_node *n, ir_guard_op op, gc_sym *a,
             gc_sym *b, ir_guard_kind kind, const char *what);

/* The symbolic forms of L_vars, L_pointwise, L_view and L_reduce. */
gc_sym **L_svars(lower_ctx *L, int rank, gc_sym *const *sizes);
ir_tensor *L_spointwise(lower_ctx *L, const gc_node *n, gc_dtype dt, int rank,
                        gc_sym *const *sizes, gc_sym **vars, ir_expr *body);
ir_tensor *L_sview(lower_ctx *L, ir_tensor *base, int rank,
                   gc_sym *const *sizes, gc_sym **vars, gc_sym **map);
ir_buf *L_sreduce(lower_ctx *L, const gc_node *n, ir_reduction red, gc_dtype dt,
                  int rank, gc_sym *const *ranges, gc_sym **vars, int rrank,
                  gc_sym *const *rranges, gc_sym **rvars, ir_expr *body,
                  ir_buf **out2, ir_buf **out3);

/* Index i (an integer expression) checked against [0, size) and wrapped
 * when negative, as an int64 expression: a gather from an iota buffer
 * (0, 1, ..., size - 1) made for it, whose range check sets the kernel's
 * error flag (the call raises). NULL when out of memory or size <= 0. */
ir_expr *L_checked_index(lower_ctx *L, const gc_node *n, ir_expr *i,
                         int64_t size);

/* Are `strides` those of a dense tensor of `sizes` whose dims are laid
 * out in some order (no gaps, no overlap; size-1 dims ignored)? */
bool L_dense_strides(int rank, const int64_t *sizes, const int64_t *strides);

/* Fresh loop variables for an iteration space. */
gc_sym **L_vars(lower_ctx *L, int rank, const int64_t *sizes);

/* Loads t at `idx` (t->rank expressions). */
ir_expr *L_load(lower_ctx *L, ir_tensor *t, gc_sym *const *idx);
/* Loads t broadcast to an index of rank `rank` (right-aligned; dimensions
 * of size 1 in t read element 0). */
ir_expr *L_load_bcast(lower_ctx *L, ir_tensor *t, int rank, gc_sym *const *idx);

/* An unrealized pointwise value over `vars` (rank, sizes). */
ir_tensor *L_pointwise(lower_ctx *L, const gc_node *n, gc_dtype dt, int rank,
                       const int64_t *sizes, gc_sym **vars, ir_expr *body);
/* A view of `base`: element idx of the result (rank, sizes, written in the
 * variables `vars`) is element map(idx) of base. */
ir_tensor *L_view(lower_ctx *L, ir_tensor *base, int rank, const int64_t *sizes,
                  gc_sym **vars, gc_sym **map);

/* A reduction node writing a new arena buffer; returns the buffer (NULL on
 * failure). `vars`/`ranges` describe the output, `rvars`/`rranges` the
 * reduced space; body is written in both. For ARGMAX/ARGMIN the buffer
 * holds the int64 index and *out2 (if not NULL) gets the values' buffer;
 * for WELFORD out is the mean and out2 and out3 get m2 and count. */
ir_buf *L_reduce(lower_ctx *L, const gc_node *n, ir_reduction red, gc_dtype dt,
                 int rank, const int64_t *ranges, gc_sym **vars, int rrank,
                 const int64_t *rranges, gc_sym **rvars, ir_expr *body,
                 ir_buf **out2, ir_buf **out3);

/* Realizes t into a new buffer of `kind` with a dense layout (the stride
 * order of `like` when given: eager's layout, e.g. channels-last). Returns
 * the buffer; later loads of t read it. */
ir_buf *L_realize(lower_ctx *L, ir_tensor *t, const gc_tensor_meta *like);
/* Realizes t in the layout lowering prefers for an intermediate whose
 * eager layout is `like` (channels-last in convolutional programs, see
 * layout.c; else like's, contiguous when NULL). */
ir_buf *L_realize_chosen(lower_ctx *L, ir_tensor *t,
                         const gc_tensor_meta *like);
/* t as a strided view of a buffer (*v), realizing t when it is not one;
 * false when out of memory. */
bool L_as_buffer(lower_ctx *L, ir_tensor *t, ir_view *v);

/* Element `at` of the unrealized loop tensor t (rank entries; at[dim] is
 * ignored) with index `dim` the int64 data value `i`, computed from t's
 * body (ir_expr_gather_var) instead of from a realized buffer: a gather of
 * a computed tensor computes only the gathered elements. NULL when t is
 * not an unrealized loop or its body has no such form (the caller then
 * realizes t). L_gather_loop_ok says whether it would succeed. */
ir_expr *L_gather_loop(lower_ctx *L, ir_tensor *t, gc_sym *const *at, int dim,
                       ir_expr *i, bool wrap);
bool L_gather_loop_ok(lower_ctx *L, ir_tensor *t, int dim);

/* An operator by qualified name: one of the graph's, or torch 2.13's (for
 * the .out overloads extern calls use). NULL when unknown. */
const gc_op *L_op(lower_ctx *L, const char *name);

/* Lowers n as an extern call of `out_op` (its .out overload) writing a
 * planned buffer in eager's layout; sets output 0 (and output 1, in the
 * node's out2, for a node with two: only scans, which generated code makes,
 * have two). GC_EUNSUPPORTED when a layout is not dense or the operator
 * unknown. */
int L_extern_out(lower_ctx *L, const gc_node *n, const char *out_op);
/* The same for a node of `kind` (IR_EXTERN, or IR_SCAN, IR_SCATTER,
 * IR_INTERP: generated code makes it, as a call of out_op), without a
 * buffer for argument `skip` (a parameter name, or NULL: generated code
 * does not read it, as a scatter into a constant); *node: the node, for
 * the caller to fill its kind's fields. */
int L_out_node(lower_ctx *L, const gc_node *n, ir_node_kind kind,
               const char *out_op, const char *skip, ir_node **node);

/* A new extern node for graph node gn calling the .out overload `op` with
 * `out` as out= (out->def is set), with room for nargs arguments (zeroed:
 * the caller fills them), not yet appended to the IR; NULL when out of
 * memory. */
ir_node *L_out_call(lower_ctx *L, const gc_node *gn, const gc_op *op,
                    ir_buf *out, int nargs);

/* Lowers convolution n as an extern call of its own operator: an ATen call
 * on realized inputs whose results ATen allocates (it has no .out overload
 * that writes in place), channels-last where the program's layout is
 * (layout.c). */
int L_extern_conv(lower_ctx *L, const gc_node *n);

/* Lowers n as an extern call of its own operator on realized inputs, its
 * results allocated by ATen: for a library kernel that generated code
 * should not replace and that has no .out overload worth calling
 * (convolution_backward, CPU flash attention). */
int L_extern_call(lower_ctx *L, const gc_node *n);

/* Sets the IR value of output `k` of n. */
int L_set(lower_ctx *L, const gc_node *n, int k, ir_tensor *t);
/* Sets the IR value of a graph value (an item of a Tensor[] output). */
int L_set_value(lower_ctx *L, const gc_value *v, ir_tensor *t);

/* Type promotion (torch.result_type) over the tensor and number arguments
 * named in `names` (NULL-terminated). Returns GC_DTYPE_UNKNOWN when an
 * argument is neither. */
gc_dtype L_result_type(lower_ctx *L, const gc_node *n,
                       const char *const *names);

/* True for the floating dtypes: float32, float64, and float16 and
 * bfloat16, which generated code stores as such and computes with as
 * float32 (compiler/ir/half.h). */
bool L_is_float(gc_dtype d);
/* The dtype an operator computes in for results of dtype d, as ATen's
 * opmath_type: float32 for float16 and bfloat16, d itself otherwise. A
 * rule computes a whole operator in it and rounds once, to the output's
 * dtype, as ATen's kernels do (a formula of several IR operations in a
 * half dtype would round after each, expr.c make_op). */
gc_dtype L_opmath(gc_dtype d);
/* t converted to dtype dt (t itself when it has it): an unrealized
 * pointwise cast (NULL when out of memory). */
ir_tensor *L_to_dtype(lower_ctx *L, const gc_node *n, ir_tensor *t,
                      gc_dtype dt);
/* True for the integer dtypes and bool. */
bool L_is_integral(gc_dtype d);
/* True for every dtype generated code handles. */
bool L_dtype_ok(gc_dtype d);

/* Parameters of lower_unary_math (pointwise.c): elementwise operations
 * that are a formula rather than one IR operation. */
typedef enum L_math {
  L_MATH_SIGN,       /* sign, sgn (real) */
  L_MATH_FRAC,       /* x - trunc(x) */
  L_MATH_SQUARE,     /* x * x */
  L_MATH_ISPOSINF,   /* x == inf */
  L_MATH_ISNEGINF,   /* x == -inf */
  L_MATH_ISFINITE,   /* neither NaN nor infinite */
  L_MATH_DEG2RAD,    /* x * (pi / 180) */
  L_MATH_RAD2DEG,    /* x * (180 / pi) */
  L_MATH_NAN_TO_NUM, /* NaN and infinities replaced */
  L_MATH_LOGIT,      /* log(x / (1 - x)), optionally clamped */
  L_MATH_SINC,       /* sin(pi x) / (pi x) */
} L_math;

/* Rule families (compiler/lower/ files). */
#define RULE(name, cls, fn, param)                                             \
  int fn(lower_ctx *L, const gc_node *n, int p);
#define OP(name, cls, fn, param, flags, inv, inv_op, writes, when)             \
  RULE(name, cls, fn, param)
#define FACTS(name, flags, inv, inv_op, writes, when)
#include "compiler/opfacts.def"
#undef RULE
#undef OP
#undef FACTS

#endif
