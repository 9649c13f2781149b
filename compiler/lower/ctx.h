/*
 * ctx.h: the lowering context and the functions the files of
 * compiler/lower/ that implement lower.h share; internal to
 * compiler/lower/ (rules use lower.h and pointwise.h).
 *
 *   lower.c     the driver: the rule table, one node at a time, undo
 *   args.c      arguments, dtypes, type promotion
 *   symbolic.c  sizes as expressions over size symbols, guards
 *   loops.c     loop variables, loads, unrealized loops and views
 *   layout.c    the channels-last choice for intermediates
 *   realize.c   buffers for unrealized values, reductions, outputs of a node
 *   calls.c     fallbacks and extern calls
 *   outputs.c   the program's outputs
 *   epilogue.c  write-backs into the graph's inputs
 *
 * Internal functions are named L__*.
 */
#ifndef GC_LOWER_CTX_H
#define GC_LOWER_CTX_H

#include "compiler/lower/lower.h"
#include "compiler/strmap.h"

struct lower_ctx {
  ir_graph *ir;
  const gc_functional *f;
  const gc_graph *g;
  gc_error *err;
  ir_tensor **val;          /* graph value id -> its IR tensor */
  int *users;               /* graph value id -> number of uses */
  gc_strmap ops;            /* operator name -> gc_op (introduced operators) */
  ir_tensor **realized_log; /* tensors realized, for undoing a rule */
  int nrealized, caprealized;
  gc_lower_stats *stats;
  const gc_node *cur; /* the node being lowered */
  int *prov;          /* graph nodes inlined into what cur builds */
  int nprov, capprov;
  bool channels_last; /* 4-D float32 intermediates channels-last (see
                         L__chosen_layout) */
  bool *eager_layout; /* graph value id -> a program output or what one
                         views: keeps eager's layout */
  bool *call_reads;   /* graph value id -> an extern or fallback call reads
                         it, directly or through views (realized then) */
  const gc_symbols *symbols; /* the graph's symbols, numbered as the key */
};

/* args.c */
/* The static strides of a metadata; false when symbolic. */
bool L__static_strides(const gc_tensor_meta *m, int64_t *strides);

/* symbolic.c */
/* Dense strides (as expressions) for `sizes` in the stride order of `like`
 * (row-major when NULL). */
void L__sdense_like(lower_ctx *L, int rank, gc_sym *const *sizes,
                    const gc_tensor_meta *like, gc_sym **strides);

/* loops.c */
/* The graph nodes a new result computes: cur and what it inlined (their
 * number; *out an arena copy). */
int L__provenance(lower_ctx *L, int **out);
/* Dense strides for `sizes` in the stride order of `like` (row-major when
 * NULL). */
void L__dense_like(int rank, const int64_t *sizes, const gc_tensor_meta *like,
                   int64_t *strides);

/* layout.c */
/* Dense channels-last strides for 4-D `sizes`. */
void L__cl_strides(const int64_t *sizes, int64_t *st);
/* m with dense channels-last strides (NULL when out of memory). */
const gc_tensor_meta *L__cl_meta(lower_ctx *L, const gc_tensor_meta *m,
                                 const int64_t *sizes);
/* The layout an intermediate with eager metadata `like` gets. */
const gc_tensor_meta *L__chosen_layout(lower_ctx *L, const ir_tensor *t,
                                       const gc_tensor_meta *like);
/* Is gn a float32 2-D convolution unambiguously channels-last when dense
 * NHWC? */
bool L__cl_conv(lower_ctx *L, const gc_node *gn);

/* realize.c */
/* Logs t as realized by the current rule (undo forgets its buffer). */
bool L__log_realized(lower_ctx *L, ir_tensor *t);
/* t's sizes as expressions (cached in t->ssizes). */
gc_sym **L__sym_sizes_of(lower_ctx *L, ir_tensor *t);
/* A pointwise node computing t into a new buffer of `kind` with `strides`
 * (NULL: dense like `like`); the symbolic form. */
ir_buf *L__materialize(lower_ctx *L, ir_tensor *t, ir_buf_kind kind,
                       const int64_t *strides, const gc_tensor_meta *like);
ir_buf *L__smaterialize(lower_ctx *L, ir_tensor *t, ir_buf_kind kind,
                        gc_sym *const *strides, const gc_tensor_meta *like);
/* t's value as the whole of buffer b (t realized into b). */
ir_view L__whole_buf(lower_ctx *L, ir_tensor *t, ir_buf *b);
/* Realizes the result of value v when it is shared and costly, or too big
 * to keep inlining (0, or GC_ENOMEM). */
int L__maybe_realize(lower_ctx *L, const gc_value *v);

/* calls.c */
/* The unrealized computation a view reads through (NULL: none). */
ir_tensor *L__view_root(ir_tensor *t);
/* Lowers gn as a fallback: an ATen call on realized inputs. */
int L__fallback(lower_ctx *L, const gc_node *gn);

/* epilogue.c */
/* Is n an aten::copy_ into a graph input (a write-back)? */
bool L__is_input_writeback(const gc_node *n);
/* Lowers the write-backs wb[0..nwb), after everything else. */
int L__lower_epilogue(lower_ctx *L, const gc_node **wb, int nwb);

/* outputs.c */
/* Gives each program output its OUTPUT buffer. */
int L__lower_outputs(lower_ctx *L);
/* Marks the program outputs and what they view: they keep eager's layout. */
void L__mark_output_bases(lower_ctx *L);

#endif
