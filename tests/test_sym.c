/*
 * test_sym.c: the symbolic index expressions (compiler/ir/sym.c).
 *
 * Two kinds of checks: the simplifications that make reshapes and views
 * cheap (exact forms), and a brute-force check that every rule is exact:
 * random expressions over small ranges are evaluated at every point of
 * their variables' ranges, before and after simplification.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "compiler/arena.h"
#include "compiler/ir/sym.h"

static gc_arena *a;
static gc_symctx S;

static void setup(void) {
  a = gc_arena_new(0);
  cr_assert_eq(gc_symctx_init(&S, a), 0);
}

static void teardown(void) {
  gc_arena_free(a);
}

static const char *str(const gc_sym *e) {
  return gc_sym_str(&S, e);
}

#define EXPECT_STR(e, want)                                                    \
  cr_assert_str_eq(str(e), (want), "got %s, want %s", str(e), (want))

TestSuite(sym, .init = setup, .fini = teardown);

Test(sym, hash_consing_and_canonical_sums) {
  gc_sym *i = gc_sym_newvar(&S, "i", 0, 9), *j = gc_sym_newvar(&S, "j", 0, 9);
  gc_sym *x = gc_sym_add(&S, gc_sym_scale(&S, i, 3), j);
  gc_sym *y = gc_sym_add(&S, j, gc_sym_scale(&S, i, 3));
  cr_assert_eq(x, y, "same sum built in two orders must be one expression");
  cr_assert_eq(gc_sym_sub(&S, x, x), gc_sym_const(&S, 0));
  EXPECT_STR(gc_sym_addc(&S, x, 4), "(3*i + j + 4)");
  cr_assert_eq(x->lo, 0);
  cr_assert_eq(x->hi, 36);
}

Test(sym, reshape_split_and_merge_simplify) {
  /* element (i, j) of a [2, 3] view of a [6] tensor, and back */
  gc_sym *i = gc_sym_newvar(&S, "i", 0, 1), *j = gc_sym_newvar(&S, "j", 0, 2);
  gc_sym *flat = gc_sym_add(&S, gc_sym_scale(&S, i, 3), j);
  cr_assert_eq(gc_sym_floordiv(&S, flat, 3), i);
  cr_assert_eq(gc_sym_mod(&S, flat, 3), j);
  /* a [6] view of a [2, 3] tensor: x // 3 and x mod 3, recombined */
  gc_sym *x = gc_sym_newvar(&S, "x", 0, 5);
  gc_sym *row = gc_sym_floordiv(&S, x, 3), *col = gc_sym_mod(&S, x, 3);
  EXPECT_STR(row, "(x / 3)");
  EXPECT_STR(col, "(x % 3)");
  cr_assert_eq(gc_sym_add(&S, gc_sym_scale(&S, row, 3), col), x,
               "3*(x//3) + x%3 must merge back to x");
  /* and scaled: a contiguous stride-2 buffer */
  gc_sym *off =
      gc_sym_add(&S, gc_sym_scale(&S, row, 6), gc_sym_scale(&S, col, 2));
  EXPECT_STR(off, "(2*x)");
}

Test(sym, nested_divisions) {
  gc_sym *x = gc_sym_newvar(&S, "x", 0, 1000);
  cr_assert_eq(gc_sym_floordiv(&S, gc_sym_floordiv(&S, x, 4), 5),
               gc_sym_floordiv(&S, x, 20));
  cr_assert_eq(gc_sym_mod(&S, gc_sym_mod(&S, x, 12), 4), gc_sym_mod(&S, x, 4));
  cr_assert_eq(gc_sym_floordiv(&S, gc_sym_scale(&S, x, 2), 4),
               gc_sym_floordiv(&S, x, 2), "gcd rule");
  EXPECT_STR(gc_sym_mod(&S, gc_sym_scale(&S, x, 6), 4), "(2*(x % 2))");
  cr_assert_eq(gc_sym_floordiv(&S, x, 1), x);
  cr_assert_eq(gc_sym_mod(&S, x, 1), gc_sym_const(&S, 0));
  cr_assert_eq(gc_sym_floordiv(&S, x, 0), NULL, "division by zero refused");
  cr_assert_eq(gc_sym_mod(&S, x, -3), NULL);
}

Test(sym, negative_operands_use_floor_semantics) {
  gc_sym *x = gc_sym_newvar(&S, "x", -5, 5);
  gc_sym *d = gc_sym_floordiv(&S, x, 2);
  EXPECT_STR(d, "gc_floordiv(x, 2)");
  cr_assert_eq(d->lo, -3);
  cr_assert_eq(d->hi, 2);
  cr_assert_eq(gc_sym_floordiv(&S, gc_sym_const(&S, -7), 2)->c, -4);
  cr_assert_eq(gc_sym_mod(&S, gc_sym_const(&S, -7), 3)->c, 2);
}

Test(sym, linearity_queries) {
  gc_sym *i = gc_sym_newvar(&S, "i", 0, 7), *j = gc_sym_newvar(&S, "j", 0, 7);
  gc_sym *e = gc_sym_add(&S, gc_sym_scale(&S, i, 8), gc_sym_floordiv(&S, j, 2));
  int64_t k;
  cr_assert(gc_sym_linear_in(e, i->var, &k));
  cr_assert_eq(k, 8);
  cr_assert_not(gc_sym_linear_in(e, j->var, &k));
  cr_assert_not(gc_sym_is_affine(e));
  cr_assert(gc_sym_is_affine(gc_sym_add(&S, i, gc_sym_scale(&S, j, -3))));
  gc_symmap map = {0};
  cr_assert(gc_symmap_set(&S, &map, j->var, gc_sym_scale(&S, i, 2)));
  EXPECT_STR(gc_sym_subst(&S, e, &map), "(9*i)");
}

Test(sym, overflow_is_reported) {
  gc_sym *x = gc_sym_newvar(&S, "x", 0, 10);
  gc_sym_scale(&S, gc_sym_scale(&S, x, INT64_MAX / 2), 4);
  cr_assert(S.overflow);
}

/* ---- brute force: every simplification is exact ---- */

static int64_t fdiv(int64_t x, int64_t d) {
  int64_t q = x / d;
  return (x % d != 0 && x < 0) ? q - 1 : q;
}

static int64_t eval(const gc_sym *e, const int64_t *val) {
  switch (e->kind) {
  case GC_SYM_CONST:
    return e->c;
  case GC_SYM_VAR:
    return val[e->var];
  case GC_SYM_ADD: {
    int64_t r = e->c;
    for (int i = 0; i < e->n; i++)
      r += e->coefs[i] * eval(e->ops[i], val);
    return r;
  }
  case GC_SYM_MUL: {
    int64_t r = 1;
    for (int i = 0; i < e->n; i++)
      r *= eval(e->ops[i], val);
    return r;
  }
  case GC_SYM_FLOORDIV:
    return fdiv(eval(e->ops[0], val), e->c);
  case GC_SYM_MOD:
    return eval(e->ops[0], val) - e->c * fdiv(eval(e->ops[0], val), e->c);
  case GC_SYM_MIN: {
    int64_t x = eval(e->ops[0], val), y = eval(e->ops[1], val);
    return x < y ? x : y;
  }
  case GC_SYM_MAX: {
    int64_t x = eval(e->ops[0], val), y = eval(e->ops[1], val);
    return x > y ? x : y;
  }
  }
  return 0;
}

/* A random expression tree, built and evaluated side by side: the reference
 * value is computed by plain arithmetic as the tree is built. */
typedef struct ref {
  gc_sym *e;
  int64_t v[64]; /* value at each of the 64 sample points */
} ref;

static unsigned rng = 12345;
static unsigned next(void) {
  rng = rng * 1103515245u + 12345u;
  return (rng >> 16) & 0x7fff;
}

static int64_t points[64][3]; /* sample values of the 3 variables */

static void random_expr(gc_sym **vars, int depth, ref *out) {
  unsigned op = depth > 3 ? next() % 2 : next() % 8;
  ref x, y;
  switch (op) {
  case 0: {
    int v = (int)(next() % 3);
    out->e = vars[v];
    for (int p = 0; p < 64; p++)
      out->v[p] = points[p][v];
    return;
  }
  case 1: {
    int64_t c = (int64_t)(next() % 13) - 6;
    out->e = gc_sym_const(&S, c);
    for (int p = 0; p < 64; p++)
      out->v[p] = c;
    return;
  }
  case 2:
  case 3:
    random_expr(vars, depth + 1, &x);
    random_expr(vars, depth + 1, &y);
    out->e = gc_sym_add(&S, x.e, y.e);
    for (int p = 0; p < 64; p++)
      out->v[p] = x.v[p] + y.v[p];
    return;
  case 4: {
    int64_t k = (int64_t)(next() % 7) - 3;
    random_expr(vars, depth + 1, &x);
    out->e = gc_sym_scale(&S, x.e, k);
    for (int p = 0; p < 64; p++)
      out->v[p] = x.v[p] * k;
    return;
  }
  case 5:   /* x // d */
  case 6: { /* x % d, Python's: x - d * (x // d) */
    int64_t d = (int64_t)(next() % 6) + 1;
    random_expr(vars, depth + 1, &x);
    out->e = op == 5 ? gc_sym_floordiv(&S, x.e, d) : gc_sym_mod(&S, x.e, d);
    for (int p = 0; p < 64; p++) {
      int64_t q = fdiv(x.v[p], d);
      out->v[p] = op == 5 ? q : x.v[p] - d * q;
    }
    return;
  }
  default:
    random_expr(vars, depth + 1, &x);
    random_expr(vars, depth + 1, &y);
    out->e = gc_sym_min(&S, x.e, y.e);
    for (int p = 0; p < 64; p++)
      out->v[p] = x.v[p] < y.v[p] ? x.v[p] : y.v[p];
    return;
  }
}

Test(sym, random_expressions_simplify_exactly) {
  gc_sym *vars[3] = {gc_sym_newvar(&S, "i", 0, 7), gc_sym_newvar(&S, "j", 0, 4),
                     gc_sym_newvar(&S, "k", -3, 3)};
  for (int p = 0; p < 64; p++) {
    points[p][0] = (int64_t)(next() % 8);
    points[p][1] = (int64_t)(next() % 5);
    points[p][2] = (int64_t)(next() % 7) - 3;
  }
  for (int trial = 0; trial < 3000; trial++) {
    ref r;
    random_expr(vars, 0, &r);
    cr_assert_not_null(r.e);
    for (int p = 0; p < 64; p++) {
      int64_t val[3] = {points[p][0], points[p][1], points[p][2]};
      int64_t got = eval(r.e, val);
      cr_assert_eq(got, r.v[p],
                   "trial %d: %s = %lld at (%lld, %lld, %lld), "
                   "want %lld",
                   trial, str(r.e), (long long)got, (long long)val[0],
                   (long long)val[1], (long long)val[2], (long long)r.v[p]);
      cr_assert(got >= r.e->lo && got <= r.e->hi,
                "trial %d: %s = %lld outside its range [%lld, %lld]", trial,
                str(r.e), (long long)got, (long long)r.e->lo,
                (long long)r.e->hi);
    }
  }
}

/* Issue 38: size symbols. A loop over a symbolic extent keeps it, and the
 * largest index of a load is an expression over the symbols, which the
 * verifier compares with the buffer's span: a [s0, s1] buffer read at
 * s1*i + j over i < s0, j < s1 reaches s0*s1 - 1 exactly. */
Test(sym, symbolic_extents_bound_indices) {
  gc_sym *s0 = gc_sym_sizevar(&S, "s0", 0, GC_SYM_SIZE_MAX);
  gc_sym *s1 = gc_sym_sizevar(&S, "s1", 0, GC_SYM_SIZE_MAX);
  gc_sym *i = gc_sym_loopvar(&S, "i", s0), *j = gc_sym_loopvar(&S, "j", s1);
  gc_sym *k = gc_sym_loopvar(&S, "k", gc_sym_const(&S, 4));
  cr_assert_eq(k->hi, 3, "a constant extent is an ordinary range");
  cr_assert(gc_sym_symbolic(&S, s0) && !gc_sym_symbolic(&S, i));
  cr_assert(!S.overflow);
  gc_sym *ix = gc_sym_add(&S, gc_sym_mul(&S, s1, i), j);
  cr_assert(!S.overflow, "ranges of products of symbols saturate");
  gc_sym *up = gc_sym_upper(&S, ix);
  cr_assert_not_null(up);
  gc_sym *span = gc_sym_mul(&S, s0, s1);
  cr_assert_eq(gc_sym_sub(&S, span, up), gc_sym_const(&S, 1),
               "span - max index = %s", str(gc_sym_sub(&S, span, up)));
  cr_assert(gc_sym_le(&S, gc_sym_addc(&S, up, 1), span));
  cr_assert(!gc_sym_le(&S, gc_sym_addc(&S, up, 2), span));
  /* a column of a [s0, 8] buffer: 8*i + 3 */
  gc_sym *col = gc_sym_addc(&S, gc_sym_scale(&S, i, 8), 3);
  EXPECT_STR(gc_sym_upper(&S, col), "(8*s0 - 5)");
  /* a reversed index (flip): s0 - 1 - i is largest at i = 0 */
  gc_sym *rev = gc_sym_sub(&S, gc_sym_addc(&S, s0, -1), i);
  cr_assert_eq(gc_sym_upper(&S, rev), gc_sym_addc(&S, s0, -1));
  /* products of non-negative factors are monotone: i*j is largest at the
   * last i and j; a factor that may be negative has no such bound */
  cr_assert_eq(
      gc_sym_upper(&S, gc_sym_mul(&S, i, j)),
      gc_sym_mul(&S, gc_sym_addc(&S, s0, -1), gc_sym_addc(&S, s1, -1)));
  /* (i*(s0 - 5) distributes into i*s0 - 5*i, bounded term by term; a
   * max() does not distribute) */
  gc_sym *neg = gc_sym_mul(
      &S, i, gc_sym_max(&S, gc_sym_addc(&S, j, -5), gc_sym_const(&S, -2)));
  cr_assert_null(gc_sym_upper(&S, neg), "%s: %s", str(neg),
                 str(gc_sym_upper(&S, neg)));
  /* a clamped index (cat's, padding's): min and max of bounds */
  gc_sym *cl = gc_sym_max(
      &S, gc_sym_min(&S, gc_sym_addc(&S, k, -2), gc_sym_const(&S, 1)),
      gc_sym_const(&S, 0));
  cr_assert_eq(gc_sym_upper(&S, gc_sym_add(&S, gc_sym_scale(&S, i, 2), cl)),
               gc_sym_addc(&S, gc_sym_scale(&S, s0, 2), -1));
  /* symbolic coefficients */
  gc_sym *c;
  cr_assert(gc_sym_coef(&S, ix, i->var, &c));
  cr_assert_eq(c, s1);
  cr_assert(gc_sym_coef(&S, ix, j->var, &c));
  cr_assert_eq(c, gc_sym_const(&S, 1));
  cr_assert(gc_sym_coef(&S, ix, k->var, &c));
  cr_assert_eq(c, gc_sym_const(&S, 0));
  cr_assert(!gc_sym_coef(&S, gc_sym_mul(&S, i, j), i->var, &c));
}

/* A guard c <= s narrows s (ir_guard_add): expressions made afterwards
 * have ranges that know it (the load of x[-1], at 24*s0 - 24 + j, is then
 * provably at or above 0); a loop index is never narrowed. */
Test(sym, narrowing_a_size_symbol) {
  gc_sym *s0 = gc_sym_sizevar(&S, "s0", 0, GC_SYM_SIZE_MAX);
  gc_sym *i = gc_sym_newvar(&S, "i", 0, 7);
  gc_sym *before = gc_sym_addc(&S, gc_sym_scale(&S, s0, 24), -24);
  cr_assert_eq(before->lo, -24);
  gc_sym_narrow(&S, s0, 1);
  gc_sym *after =
      gc_sym_add(&S, gc_sym_addc(&S, gc_sym_scale(&S, s0, 24), -24), i);
  cr_assert_eq(after->lo, 0, "lo %lld", (long long)after->lo);
  gc_sym_narrow(&S, s0, 0); /* never widened */
  cr_assert_eq(s0->lo, 1);
  gc_sym_narrow(&S, i, 3);
  cr_assert_eq(i->lo, 0);
}
