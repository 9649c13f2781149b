/*
 * cexpr.h: scalar expressions of the loop IR as C statements (internal to
 * codegen/).
 *
 * An expression DAG becomes single-assignment temporaries in dependency
 * order, one per distinct subexpression (the IR is hash-consed, so common
 * subexpressions are computed once per loop body):
 *
 *     const float t3 = b1[(16*x4 + x5)];
 *     const float t4 = expf((t3 - r2_0));
 *
 * The C spelling of each operation depends on the dtype and follows
 * PyTorch's semantics (NaN-propagating maximum, Python's floor division,
 * uint8 conversions through int64, ...); see c_of_op() in cexpr.c.
 */
#ifndef GC_CODEGEN_CEXPR_H
#define GC_CODEGEN_CEXPR_H

#include "compiler/buf.h"
#include "compiler/ir/ir.h"

typedef struct cx cx;

/* Names a LOAD that does not read memory (a local buffer): returns the C
 * expression of the value, or NULL to read the buffer. */
typedef const char *(*cx_local_fn)(cx *c, const ir_expr *load, void *ctx);

struct cx {
  ir_graph *ir;
  gc_buf *out;
  int indent;        /* spaces before each statement */
  cx_local_fn local; /* may be NULL */
  void *local_ctx;
  /* memo of the current loop body: expression -> temporary */
  const ir_expr **keys;
  const char **names;
  size_t cap, n;
  int *next_temp;   /* shared counter: names unique in a function */
  bool vector_math; /* set when a vectorized math function is used */
  unsigned sleef;   /* CX_SLEEF_* bits: the functions taken from SLEEF */
  int depth;
};

/* The math functions whose vector versions come from SLEEF's own API
 * (libsleef) rather than from the GNU vector ABI's first provider, glibc's
 * libmvec: cx_sleef_wrappers() defines their vector ABI names in the
 * translation unit (hidden, so calls bind to them) to call SLEEF. */
enum { CX_SLEEF_EXP = 1, CX_SLEEF_LOG = 2, CX_SLEEF_LOG1P = 4 };

/* The definitions for the bits of `used`, in the arena; "" for none. */
const char *cx_sleef_wrappers(gc_arena *a, unsigned used);

/* Starts a new loop body (forgets earlier temporaries). */
void cx_reset(cx *c);

/* Makes the current loop body name e `name` (a temporary the caller has
 * declared) instead of computing it. */
void cx_bind(cx *c, const ir_expr *e, const char *name);

/* Emits e (and what it needs) and returns the C expression naming it. */
const char *cx_emit(cx *c, const ir_expr *e);

/* The C type of a dtype ("float", "int64_t", bool is "uint8_t"). */
const char *cx_ctype(gc_dtype d);

/* A literal of dtype d ("1.5f", "-INFINITY", "3LL"), in the arena. */
char *cx_literal(gc_arena *a, double f, int64_t i, gc_dtype d);

/* The identity value of a reduction for dtype d, as a C literal. */
const char *cx_reduction_init(gc_arena *a, ir_reduction r, gc_dtype d);

/* The prelude every translation unit starts with: includes, helpers (floor
 * division, NaN-propagating maximum ...) and the SIMD declarations of the
 * math functions SLEEF vectorizes. */
const char *cx_prelude(void);

#endif
