/*
 * cgen_internal.h: what the C generators share. Not part of the library's
 * interface.
 *
 *   cgen.c      gc_codegen, and the helpers every generator uses (lines,
 *               index expressions, comments, kernel parameters, loops)
 *   segments.c  the program's segments and the slots of their buffers
 *   kernel.c    one kernel as a C function: signature and loop nest
 *   pointwise.c pointwise stages (random draws, hoisted loads)
 *   stream.c    streamed (non-temporal) stores of a last stage
 *   reduce.c    reduction stages, per-thread partials of big reductions
 *   split.c     loops split into ranges where an index changes form
 *   colsum.c    column sums as row-wise vector adds
 *   dedup.c     kernels identical to an earlier one
 *   blas.c      matrix products through BLAS and oneDNN
 *   tiled.c     kernels whose reductions run across a tile of the
 *               innermost outer dim, and 2-D tiles (transposes)
 *   reuse.c, prefetch.c, scan.c, scatter.c, upsample.c: as below
 */
#ifndef GC_CODEGEN_CGEN_INTERNAL_H
#define GC_CODEGEN_CGEN_INTERNAL_H

#include "compiler/codegen/cexpr.h"
#include "compiler/codegen/cgen.h"
#include "compiler/strmap.h"

#define CG_PARALLEL_MIN 32768 /* elements: smaller kernels run serially */
#define CG_SUM_BLOCK 4096     /* float32 sums: float partials this long */
#define CG_WELFORD_BLOCK 1024 /* Welford: blocks merged with Chan's formula */
#define CG_MAX_THREADS 256    /* per-thread partials of big reductions */
#define CG_TILE 64            /* lanes of a tiled kernel */
#define CG_MAX_REUSE 8        /* reused reduction values per kernel */
#define CG_MAX_PREFETCH 8     /* prefetched rows per kernel */
#define CG_MAX_RAND 8         /* random draws filled per block, per stage */
#define CG_MAX_HOIST 32       /* loads hoisted out of a stage's inner loop */
#define CG_STREAM_BLOCK 256   /* streamed stores: elements per block */

/* A sum's value that a later pointwise stage reads back (reuse.c). */
#define CG_MAX_RANGE_MAPS 4

typedef struct cg_reuse {
  const ir_node *red;   /* the sum */
  const ir_expr *expr;  /* the value in the later stage's loop variables */
  ir_buf *buf;          /* where the sum stage stores it */
  gc_sym *store_r;      /* at this index in the sum stage's variables */
  gc_sym *store_p;      /* the same index in the later stage's variables */
  int stage, red_stage; /* the later stage, the sum's stage */
} cg_reuse;

typedef struct cg {
  ir_graph *ir;
  const sc_schedule *s;
  gc_buf out;
  gc_csource *src;
  gc_error *err;
  int temp;           /* temporaries of the current function */
  const sc_kernel *k; /* the kernel being generated */
  bool chk;           /* it checks data indices: gc_err is in scope */
  const char *lane;   /* tiled kernels: the lane index expression, which
                         local reduction results are indexed by */
  cx x;               /* expression emitter */
  const char **impl;  /* per kernel index: the function that runs it (its
                         own, or an identical earlier kernel's) */
  gc_strmap bodies;   /* canonical kernel text -> function name */
  bool tr16;          /* a kernel uses gc_tr16 (tiled.c) */
  bool streams;       /* the kernel being generated streams a store */
  bool *streamed;     /* per buffer id: its store streams (that kernel) */
  bool stream_used;   /* a kernel uses gc_stream */
  bool scan_math;     /* gc_scan_exp and gc_scan_log1p are defined */
  const sc_stage *stream_st; /* the stage whose loop body is being emitted
                                with its streamed stores into blocks */
  const char *stream_lo;     /* the inner variable's value at the block's
                                first element */
  struct {
    const char *text;    /* C: the address of a later outer point's row */
    int64_t bytes;       /* of the row */
  } pf[CG_MAX_PREFETCH]; /* of the kernel being generated */
  int npf;
  cg_reuse reuse[CG_MAX_REUSE]; /* of the kernel being generated */
  int nreuse;
  /* the variable maps of the loops split into ranges around the code being
   * emitted (outermost first; split.c ranged_begin): reuse entries, found
   * before the split, are in the original variables */
  const gc_symmap *range_maps[CG_MAX_RANGE_MAPS];
  int nrange_maps;
  /* the stage being generated: its random draws (IR_RAND) whose counter
   * steps by one along the inner loop, filled a block at a time */
  const ir_expr *rand[CG_MAX_RAND];
  int nrand;
  /* loads of the current stage that the inner loop does not vary, read
   * once before it into these temporaries (hoist_loads in pointwise.c) */
  const ir_expr *hoist[CG_MAX_HOIST];
  const char *hoist_name[CG_MAX_HOIST];
  int nhoist;
  /* a kernel with symbolic bounds (sc_kernel.symbolic): its OpenMP
   * regions fork only when the work is worth it at run time (the clause
   * " if (work >= CG_PARALLEL_MIN)"); "" otherwise */
  const char *par_if;
} cg;

/* A loop's size as C: its constant, or its expression over the size
 * symbols (which every kernel of a program with symbols takes). */
const char *cg__dim_size(cg *g, const sc_dim *d);

/* The buffers a kernel touches, and whether it writes each. */
/* A kernel's parameters: the buffers it reads or writes, by storage (a
 * buffer computed in place is its storage's parameter, declared in the
 * body as a pointer based on it, so `restrict` holds). */
typedef struct params {
  ir_buf **bufs;
  bool *written;
  int n, cap;
  ir_buf **alias; /* buffers living in a parameter's memory */
  bool *alias_written;
  int nalias, capalias;
} params;

gc_arena *cg__arena(cg *g);
/* Appends a line indented by `ind` spaces. */
void cg__line(cg *g, int ind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An index expression as C. */
const char *cg__sym(cg *g, const gc_sym *e);
/* Does e read a buffer through a data index (IR_GATHER)? */
bool cg__has_gather(const ir_expr *e);
/* Which output of reduction w buffer b is (0, 1, 2). */
int cg__which_out(const ir_node *w, const ir_buf *b);
void cg__kernel_params(cg *g, const sc_kernel *k, params *p);
void cg__kernel_comment(cg *g, const sc_kernel *k);
/* for (d.var = lo (0); d.var < hi (d.size); d.var++) { */
void cg__open_loop(cg *g, int ind, const sc_dim *d, const char *lo,
                   const char *hi);
bool cg__float32_sum(const ir_node *n);
/* One loop body of a pointwise stage at indentation ind: each node's value,
 * stored unless its buffer is local. */
void cg__emit_stores(cg *g, const sc_stage *st, int ind);
/* The C type reduction n accumulates in. */
const char *cg__acc_type(const ir_node *n);
/* The dtype of the values reduction n reads. */
gc_dtype cg__val_dtype(const cg *g, const ir_node *n);
bool cg__is_float(gc_dtype d);
/* The flat index of the current point of a reduction stage. */
const char *cg__flat_index(cg *g, const sc_stage *st);

/* A dimension of the rows a scan or scatter kernel walks: its size and
 * its strides (elements) in the input, the output and the indices. */
typedef struct cg_odim {
  int64_t size, xs, ys, is;
} cg_odim;
/* scan.c: C that adds row `q`'s (a C expression) offsets over dims
 * d[0..n) (innermost last) to xo, yo and io. */
void cg__peel(cg *g, int ind, const char *q, const cg_odim *d, int n);

/* scan.c: the function of a scan's call kernel (ir_node.scan). */
void cg__gen_scan(cg *g, const sc_kernel *k);
/* scatter.c: the function of a scatter's call kernel (ir_node.scatter). */
void cg__gen_scatter(cg *g, const sc_kernel *k);
/* upsample.c: the function of a bilinear backward's call kernel
 * (ir_node.interp). */
void cg__gen_interp_backward(cg *g, const sc_kernel *k);

/* tiled.c: should kernel k run tiled, and its code (after the signature
 * and the error flag). */
bool cg__tile_kernel(cg *g, const sc_kernel *k);
void cg__gen_tiled(cg *g, const sc_kernel *k, bool par);
/* tiled.c: should pointwise kernel k run in 2-D tiles (a transposing
 * read), and its code. */
bool cg__tile2d_kernel(cg *g, const sc_kernel *k);
void cg__gen_tiled2d(cg *g, const sc_kernel *k, bool par);
/* tiled.c: the definition of gc_tr16, which the prelude declares. */
const char *cg__tr16_text(void);

/* prefetch.c: finds the rows stage 0 of loop kernel k reads that its
 * last stage prefetches for a later outer point (g->pf, g->npf; none where
 * that does not apply), and the prefetches of the share of them that a
 * block [lo, hi) of the last stage's n points carries. */
void cg__find_prefetch(cg *g, const sc_kernel *k);
void cg__emit_prefetch(cg *g, int ind, const char *lo, const char *hi,
                       int64_t n);

/* reuse.c: finds the sums of kernel k whose values a later stage
 * recomputes; the sum's update stores its value (cg__reuse_of) and the
 * later stage loads it (cg__bind_reused, after its cx_reset). */
void cg__find_reuse(cg *g, const sc_kernel *k);
const cg_reuse *cg__reuse_of(const cg *g, const ir_node *red);
/* reuse.c: u's store index in the sum stage's variables, as renamed by the
 * loops split into ranges around it. */
gc_sym *cg__reuse_store_r(cg *g, const cg_reuse *u);
void cg__bind_reused(cg *g, int stage, int ind);

/* cgen.c: the graph nodes of id as comment text. */
const char *cg__gnode_text(cg *g, int id);

/* segments.c: gives each buffer a call kernel passes a slot, and writes
 * the segments (runs of kernels between ATen calls). */
void cg__assign_slots(cg *g);
void cg__gen_segments(cg *g);

/* kernel.c: kernel k as a C function; the loop nest of kernel k, outer
 * dim `sd` (if >= 0) restricted to [lo, hi). */
void cg__gen_kernel(cg *g, const sc_kernel *k);
void cg__gen_nest(cg *g, const sc_kernel *k, bool par, bool inside, int sd,
                  const char *lo, const char *hi);

/* pointwise.c: a pointwise stage (par: OpenMP worksharing on its outermost
 * loop), and its random draws filled a block at a time. */
void cg__pointwise_stage(cg *g, const sc_stage *st, int ind, bool par);
void cg__fill_rands(cg *g, const sc_stage *st, int ind);

/* stream.c: which stores of kernel k stream (and forgetting it), the inner
 * loop of a stage whose stores stream opened in blocks and closed, and the
 * definition of gc_stream (for the prelude when a kernel streams). */
void cg__find_streamed(cg *g, const sc_kernel *k);
void cg__clear_streamed(cg *g, const sc_kernel *k);
void cg__open_streamed_loop(cg *g, const sc_stage *st, const sc_dim *d, int ind,
                            bool par);
void cg__close_streamed_loop(cg *g, const sc_stage *st, const sc_dim *d,
                             int ind);
const char *cg__stream_text(void);

/* reduce.c: a reduction stage; whether a stage's reductions combine from
 * per-thread partials, and such a stage split between threads. */
void cg__reduction_stage(cg *g, const sc_stage *st, int ind);
bool cg__combinable(const sc_stage *st);
void cg__parallel_reduction(cg *g, const sc_stage *st, int ind);

/* dedup.c: the function kernel k wrote from `start` (signature ending at
 * `sig`) replaced by a reference when an earlier one has the same code. */
void cg__dedup_kernel(cg *g, const sc_kernel *k, size_t start, size_t sig);

/* split.c: a stage's inner loop, or a kernel's outer loops, split into
 * ranges; false (nothing emitted) when there is nothing to split. */
bool cg__split_inner(cg *g, const sc_stage *st, int ind);
bool cg__split_kernel(cg *g, const sc_kernel *k, bool par);

/* colsum.c: should kernel k run as a column sum split by rows, and its
 * code. */
bool cg__colsum_kernel(cg *g, const sc_kernel *k, bool par);
void cg__gen_colsum(cg *g, const sc_kernel *k);

/* blas.c: the parameters of a call kernel generated code makes, and the
 * functions of a BLAS batched product and of a oneDNN product. */
void cg__call_params(cg *g, const sc_kernel *k, params *p);
void cg__gen_blas(cg *g, const sc_kernel *k);
void cg__gen_gemm(cg *g, const sc_kernel *k);

#endif
