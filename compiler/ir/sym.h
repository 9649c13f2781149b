/*
 * sym.h: symbolic integer expressions, the index arithmetic of the loop IR.
 *
 * Every size, stride, offset and index in the loop IR is a gc_sym: an
 * expression over integer variables. Two kinds of variables exist:
 *
 *   loop indices   i0, i1, ... (r0, r1 for reduction loops): each has a range
 *                  [0, size-1] given when it is made;
 *   size symbols   s0, s1, ...: sizes not known until run time (dynamic
 *                  shapes, docs/dynamic-shapes.md), each with the range
 *                  its guards allow ([0, GC_SYM_SIZE_MAX] unless a guard
 *                  says more). A loop index over a symbolic extent
 *                  (gc_sym_loopvar) keeps that extent: its numeric range
 *                  is only what the symbols' ranges imply, and
 *                  gc_sym_upper() uses the extent to bound an index
 *                  symbolically (the verifier's proof that a load stays
 *                  inside its buffer at every size).
 *
 * Expressions are hash-consed in a context (gc_symctx): building the same
 * expression twice returns the same pointer, so equality is pointer
 * equality and expressions can key tables. They are kept in a canonical
 * form as they are built:
 *
 *   CONST     an integer
 *   VAR       a variable
 *   ADD       c + k1*t1 + k2*t2 + ...: integer coefficients, terms sorted by
 *             id, no CONST or ADD among them, no zero coefficient
 *   MUL       t1 * t2 * ...: a product of at least two non-constant factors
 *             (a constant factor becomes an ADD coefficient)
 *   FLOORDIV  floor(a / d), d a positive constant
 *   MOD       a mod m (Python's: the result has the sign of m), m > 0
 *   MIN, MAX  of two expressions
 *
 * Each expression carries a range [lo, hi] derived from its variables'
 * ranges. Simplification uses it, which is what makes reshapes cheap: the
 * index of element (i, j) of a [2, 3] view of a [6] tensor is 3*i + j, and
 * going back, (3*i + j) // 3 is i and (3*i + j) mod 3 is j because j lies in
 * [0, 2]. The rules (all exact, none assumes more than the ranges say):
 *
 *   (Q*d + R) // d  = Q + R // d           Q an integer combination
 *   R // d          = k   when R lies in [k*d, k*d + d - 1]
 *   (x // a) // b   = x // (a*b)
 *   (Q*m + R) mod m = R mod m
 *   R mod m         = R   when R lies in [0, m - 1]
 *   (x mod a) mod b = x mod b               when b divides a
 *   k*d*(x // d) + k*(x mod d) = k*x        (merging a split index back)
 *
 * Arithmetic overflow of int64 is not wrapped: it sets the context's
 * `overflow` flag and yields 0, and callers refuse the result. Ranges are
 * bounds, not values: they saturate at the int64 limits instead (a
 * product of symbols may be huge; its range then says nothing).
 *
 * Everything lives in the context's arena; there is no free.
 */
#ifndef GC_IR_SYM_H
#define GC_IR_SYM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler/arena.h"

typedef enum gc_sym_kind {
  GC_SYM_CONST,    /* c */
  GC_SYM_VAR,      /* variable `var` */
  GC_SYM_ADD,      /* c + sum(coefs[k] * ops[k]) */
  GC_SYM_MUL,      /* product of ops */
  GC_SYM_FLOORDIV, /* ops[0] // c */
  GC_SYM_MOD,      /* ops[0] mod c */
  GC_SYM_MIN,      /* min(ops[0], ops[1]) */
  GC_SYM_MAX,      /* max(ops[0], ops[1]) */
} gc_sym_kind;

typedef struct gc_sym gc_sym;
struct gc_sym {
  gc_sym_kind kind;
  int64_t c;      /* CONST: the value; ADD: the constant term; FLOORDIV,
                     MOD: the divisor */
  int var;        /* VAR: index in the context's variable table */
  int n;          /* operands (ADD terms, MUL factors, 1 or 2 otherwise) */
  gc_sym **ops;   /* operands; ADD and MUL keep them sorted by id */
  int64_t *coefs; /* ADD: the coefficient of each term */
  int64_t lo, hi; /* the values it can take, inclusive */
  int id;         /* creation order: the canonical order of terms */
  uint64_t hash;  /* of the structure, for hash-consing */
  gc_sym *chain;  /* next in its hash bucket */
};

/* The largest size a size symbol may take: a tensor of more elements than
 * 2^40 exceeds the compiler's buffer limit anyway (IR_MAX_BUF_BYTES). */
#define GC_SYM_SIZE_MAX ((int64_t)1 << 40)

/* The deepest nesting an expression may have: a deeper one means a bug or
 * a pathological graph, and is refused (NULL) rather than risking the
 * stack (sym.c, symfmt.c). */
#define GC_SYM_MAX_DEPTH 256

/* A variable: a loop index or a size symbol. */
typedef struct gc_symvar {
  const char *name;      /* "i0", "r1", "s0" */
  int64_t lo, hi;        /* its range, inclusive */
  struct gc_sym *extent; /* a loop index over a symbolic extent: it runs
                            over [0, extent - 1]; NULL otherwise */
  bool size;             /* a size symbol */
} gc_symvar;

typedef struct gc_symctx {
  gc_arena *a;
  gc_sym **buckets; /* hash-consing table (open hashing) */
  size_t nbuckets;  /* a power of two */
  size_t count;     /* expressions made */
  gc_symvar *vars;  /* the variables */
  int nvars, capvars;
  bool overflow; /* some arithmetic overflowed int64 (results are wrong) */
  bool oom;      /* an allocation failed (results are NULL) */
} gc_symctx;

/* Prepares a context drawing from `a`. Returns 0 or -1 (out of memory). */
int gc_symctx_init(gc_symctx *s, gc_arena *a);

/* A new variable named `name` (copied) with range [lo, hi]; NULL when out of
 * memory. */
gc_sym *gc_sym_newvar(gc_symctx *s, const char *name, int64_t lo, int64_t hi);

/* A size symbol named `name` with range [lo, hi]. */
gc_sym *gc_sym_sizevar(gc_symctx *s, const char *name, int64_t lo, int64_t hi);

/* Raises size symbol v's lower bound to lo (a guard checks it at run
 * time: ir_guard_add). Expressions made from v afterwards have ranges
 * that know it; those made before keep their wider, still true, ranges.
 * Nothing when v is not a size symbol or lo is not above its bound. */
void gc_sym_narrow(gc_symctx *s, gc_sym *v, int64_t lo);

/* A loop index named `name` over [0, extent - 1]: for a constant extent
 * what gc_sym_newvar(name, 0, max(extent - 1, 0)) makes; for a symbolic
 * one a variable that remembers it. */
gc_sym *gc_sym_loopvar(gc_symctx *s, const char *name, gc_sym *extent);

gc_sym *gc_sym_const(gc_symctx *s, int64_t v);
gc_sym *gc_sym_add(gc_symctx *s, gc_sym *a, gc_sym *b);
gc_sym *gc_sym_sub(gc_symctx *s, gc_sym *a, gc_sym *b);
gc_sym *gc_sym_mul(gc_symctx *s, gc_sym *a, gc_sym *b);
/* a * k for an integer k */
gc_sym *gc_sym_scale(gc_symctx *s, gc_sym *a, int64_t k);
/* a + k */
gc_sym *gc_sym_addc(gc_symctx *s, gc_sym *a, int64_t k);
/* floor(a / d), d > 0 (d <= 0 is refused: NULL) */
gc_sym *gc_sym_floordiv(gc_symctx *s, gc_sym *a, int64_t d);
/* a mod m, m > 0 (m <= 0 is refused: NULL) */
gc_sym *gc_sym_mod(gc_symctx *s, gc_sym *a, int64_t m);
gc_sym *gc_sym_min(gc_symctx *s, gc_sym *a, gc_sym *b);
gc_sym *gc_sym_max(gc_symctx *s, gc_sym *a, gc_sym *b);

/* True when `e` is the constant `v`. */
bool gc_sym_is_const(const gc_sym *e, int64_t v);

/* True when `e` is a constant (its value in *v). */
bool gc_sym_const_of(const gc_sym *e, int64_t *v);

/* True when a size symbol occurs in `e`. */
bool gc_sym_symbolic(const gc_symctx *s, const gc_sym *e);

/* a <= b for every value of the variables (from the range of b - a);
 * false when unknown. */
bool gc_sym_le(gc_symctx *s, gc_sym *a, gc_sym *b);

/* The largest value of `e` over its loop indices as an expression over
 * the size symbols (each index at the end of its extent where the
 * expression grows with it, at 0 where it shrinks: sums, products of
 * non-negative factors, floor division, min and max are monotone). NULL
 * when e is not so (a product with a factor that may be negative). */
gc_sym *gc_sym_upper(gc_symctx *s, gc_sym *e);

/* Sets *coef to e's coefficient of variable `var` when e is affine in it
 * with a coefficient made of constants and size symbols (s1*i + j: s1 for
 * i); false otherwise (a product of two loop indices, a division...). The
 * symbolic form of gc_sym_linear_in. */
bool gc_sym_coef(gc_symctx *s, const gc_sym *e, int var, gc_sym **coef);

/* A substitution of variables: variable var[k] becomes to[k], k < n. It
 * holds only the variables it renames (a loop nest's, a few dozen at most),
 * so making one costs its entries whatever the number of variables in the
 * context, which grows with the graph: a map with an entry per variable of
 * the context, made for every load, made lowering quadratic in the graph.
 * {0} is the empty map; entries are drawn from the context's arena. */
typedef struct gc_symmap {
  int n, cap;
  int *var;
  gc_sym **to;
} gc_symmap;

/* Variable `var` becomes `to` (replacing an earlier entry for var). False,
 * with s->oom set, when out of memory. */
bool gc_symmap_set(gc_symctx *s, gc_symmap *m, int var, gc_sym *to);

/* What m makes of variable `var`; NULL when it keeps it. */
gc_sym *gc_symmap_get(const gc_symmap *m, int var);

/* Replaces variables: every VAR that `map` renames becomes what it maps to
 * (NULL: none). The result is simplified. */
gc_sym *gc_sym_subst(gc_symctx *s, gc_sym *e, const gc_symmap *map);

/* If `e` is affine in variable `var` (it appears only as a plain term of an
 * ADD, or is the variable itself), returns true and sets *coef (0 when the
 * variable does not occur). False when it occurs inside a product, a
 * division, a mod, a min or a max. */
bool gc_sym_linear_in(const gc_sym *e, int var, int64_t *coef);

/* True when `var` occurs anywhere in `e`. */
bool gc_sym_uses(const gc_sym *e, int var);

/* True when `e` is affine in every variable (an ADD of VAR terms, a VAR or a
 * constant): then it is c + sum(coef_k * var_k). */
bool gc_sym_is_affine(const gc_sym *e);

/* Writes `e` as a C expression of int64_t values (variables by name,
 * floordiv and mod through the helpers gc_floordiv/gc_mod unless the operand
 * is known non-negative, where plain / and % are exact). Returns the length
 * it needed (as snprintf). */
size_t gc_sym_format(const gc_symctx *s, const gc_sym *e, char *buf,
                     size_t size);

/* As gc_sym_format, into the arena. NULL when out of memory. */
char *gc_sym_str(gc_symctx *s, const gc_sym *e);

#endif
