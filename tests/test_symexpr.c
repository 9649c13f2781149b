/*
 * test_symexpr.c: the symbolic expression parser builds the tree the text
 * means (n-ary sums and products, subtraction as a negated term, "**" to the
 * right), and refuses text past its limits with a message naming the limit,
 * however long or deep the text: a sum of 200,000 terms, 100,000 nested
 * parentheses or minus signs, a chain of 100,000 floor divisions.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/symexpr.h"
#include "tests/lib/testutil.h"

static gc_arena *a;
static void setup(void) {
  a = gc_arena_new(0);
}
static void teardown(void) {
  gc_arena_free(a);
}

#define CASE(name) Test(symexpr, name, .init = setup, .fini = teardown)

static const gc_symexpr_limits LIM = {.max_depth = 64, .max_nodes = 10000};

/* Parses `text` and returns its prefix form; fails the test on error. */
static char *tree(const char *text) {
  gc_symexpr *e;
  gc_error err;
  gc_error_clear(&err);
  int rc = gc_symexpr_parse(a, text, &LIM, &e, &err);
  cr_assert_eq(rc, 0, "\"%s\": %s", text, err.msg);
  gc_buf b = GC_BUF_INIT;
  gc_symexpr_print(e, &b);
  char *s = gc_arena_strdup(a, b.data);
  gc_buf_free(&b);
  return s;
}

#define SHAPE(text, want)                                                      \
  do {                                                                         \
    char *got_ = tree(text);                                                   \
    cr_assert_str_eq(got_, want, "\"%s\"", text);                              \
  } while (0)

/* Parses `text` expecting `code` and a message containing `want`. */
static void refused(const char *text, const gc_symexpr_limits *lim, int code,
                    const char *want) {
  gc_symexpr *e = NULL;
  gc_error err;
  gc_error_clear(&err);
  int rc = gc_symexpr_parse(a, text, lim, &e, &err);
  cr_assert_eq(rc, code, "\"%.80s\": expected %s, got %s: %s", text,
               gc_errname(code), gc_errname(rc), err.msg);
  cr_assert(strstr(err.msg, want), "message \"%s\" lacks \"%s\"", err.msg,
            want);
  cr_assert(strlen(err.msg) < 400, "message too long: %s", err.msg);
}

/* "s0" joined `n` times by `op` (malloc'd). */
static char *repeat(const char *item, const char *op, int n) {
  size_t li = strlen(item), lo = strlen(op);
  char *s = malloc((size_t)n * (li + lo) + 1), *p = s;
  for (int i = 0; i < n; i++) {
    if (i) {
      memcpy(p, op, lo);
      p += lo;
    }
    memcpy(p, item, li);
    p += li;
  }
  *p = '\0';
  return s;
}

/* ---- shapes ---- */

CASE(sums_and_products_are_n_ary) {
  SHAPE("s0 + s1 + s2", "(+ s0 s1 s2)");
  SHAPE("s0 - s1 + 2", "(+ s0 (neg s1) 2)");
  SHAPE("s0*s1*4", "(* s0 s1 4)");
  SHAPE("2*s0 + 3*s1 - 1", "(+ (* 2 s0) (* 3 s1) (neg 1))");
  SHAPE("(s0 + s1) + s2", "(+ (+ s0 s1) s2)");
  SHAPE("s0 + (s1 + s2)", "(+ s0 (+ s1 s2))");
}

CASE(division_keeps_left_to_right_order) {
  SHAPE("s0*s1//2*s2", "(* (// (* s0 s1) 2) s2)");
  SHAPE("s0 // 2 // 3", "(// (// s0 2) 3)");
  SHAPE("s0 % 4 * 2", "(* (% s0 4) 2)");
  SHAPE("s0 / 2", "(/ s0 2)");
}

CASE(unary_minus_and_power) {
  SHAPE("-s0", "(neg s0)");
  SHAPE("--s0", "(neg (neg s0))");
  SHAPE("- - s0", "(neg (neg s0))");
  SHAPE("-2**2", "(neg (** 2 2))");
  SHAPE("2**3**2", "(** 2 (** 3 2))");
  SHAPE("2 ** -s0 ** 2", "(** 2 (neg (** s0 2)))");
  SHAPE("s0 - -1", "(+ s0 (neg (neg 1)))");
}

CASE(logic_comparisons_and_calls) {
  SHAPE("s0 > 2 and s1 < 3 and True", "(and (> s0 2) (< s1 3) True)");
  SHAPE("not not s0 == 1 or False", "(or (not (not (== s0 1))) False)");
  SHAPE("max(s0, s1, 4) // min(s2, 1)", "(// (max s0 s1 4) (min s2 1))");
  SHAPE("floor(s0 / 2.5) + ceil(abs(s1))",
        "(+ (floor (/ s0 2.5)) (ceil (abs s1)))");
}

CASE(height_and_size) {
  gc_symexpr *e;
  cr_assert_eq(gc_symexpr_parse(a, "s0 + 2*s1 - max(s2, 3)", &LIM, &e, NULL),
               0);
  cr_assert_eq(e->size, 9);   /* + s0 * 2 s1 neg max s2 3 */
  cr_assert_eq(e->height, 4); /* + neg max s2 */
  cr_assert_eq(e->args[1]->height, 2);
}

/* ---- errors ---- */

CASE(syntax_errors) {
  refused("s0 * (2 +", &LIM, GC_EINVAL, "unexpected end of expression");
  refused("s0 +* 2", &LIM, GC_EINVAL, "expected a number, symbol or '('");
  refused("sqrt(s0)", &LIM, GC_EINVAL, "unknown function");
  refused("max(s0)", &LIM, GC_EINVAL, "max() takes at least 2 arguments");
  refused("abs(s0, s1)", &LIM, GC_EINVAL, "abs() takes 1 argument");
  refused("s0 s1", &LIM, GC_EINVAL, "unexpected text after the expression");
  refused("   ", &LIM, GC_EINVAL, "empty");
  refused("99999999999999999999", &LIM, GC_EINVAL, "out of int64 range");
}

CASE(literal_zero_divisor) {
  refused("s0//0", &LIM, GC_EINVAL, "'//' by zero");
  refused("s0 % (0)", &LIM, GC_EINVAL, "'%' by zero");
  refused("s0 / -0.0", &LIM, GC_EINVAL, "'/' by zero");
  SHAPE("s0 // 10", "(// s0 10)");
  SHAPE("0 // s0", "(// 0 s0)");
}

/* The depth limit is exact: 64 levels pass, 65 do not, for parentheses,
 * prefix operators, calls and left-nested chains alike. */
CASE(depth_limit_is_the_documented_one) {
  char *ok = tu_nest("(", "s0", ")", 64), *deep = tu_nest("(", "s0", ")", 65);
  tree(ok);
  refused(deep, &LIM, GC_ELIMIT, "nests deeper than 64 levels, the limit");
  free(ok), free(deep);
  ok = tu_nest("-", "s0", "", 63); /* 63 NEG nodes over a leaf: height 64 */
  deep = tu_nest("-", "s0", "", 64);
  tree(ok);
  refused(deep, &LIM, GC_ELIMIT, "nests deeper than 64 levels");
  free(ok), free(deep);
  ok = tu_nest("abs(", "s0", ")", 63);
  deep = tu_nest("abs(", "s0", ")", 64);
  tree(ok);
  refused(deep, &LIM, GC_ELIMIT, "nests deeper than 64 levels");
  free(ok), free(deep);
  ok = repeat("s0", "//", 64); /* 63 divisions: height 64 */
  deep = repeat("s0", "//", 65);
  tree(ok);
  refused(deep, &LIM, GC_ELIMIT, "nests deeper than 64 levels");
  free(ok), free(deep);
}

CASE(hostile_depth_never_exhausts_the_stack) {
  const char *shapes[][3] = {{"(", "s0", ")"},    {"-", "s0", ""},
                             {"not ", "p", ""},   {"max(1, ", "s0", ")"},
                             {"s0 ** ", "2", ""}, {"(s0 + ", "1", ")"}};
  gc_symexpr_limits big = {.max_depth = 1 << 20, .max_nodes = 0};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    char *t = tu_nest(shapes[i][0], shapes[i][1], shapes[i][2], 100000);
    refused(t, &LIM, GC_ELIMIT, "nests deeper than 64 levels");
    /* A caller's limit never lifts the hard bound. */
    refused(t, &big, GC_ELIMIT, "nests deeper than 256 levels");
    free(t);
  }
  char *t = repeat("s0", "//", 100000);
  refused(t, &big, GC_ELIMIT, "nests deeper than 256 levels");
  free(t);
}

/* The request of issue 9: 200,000 terms, refused by the node limit before
 * any tree of that size exists. */
CASE(node_limit) {
  char *t = repeat("s0", "+", 200000);
  refused(t, &LIM, GC_ELIMIT, "has more than 10000 nodes, the limit");
  refused(t, &LIM, GC_ELIMIT, "symbolic expression \"s0+s0+s0");
  free(t);
  t = repeat("s0", "+", 10000); /* an ADD over 10,000 symbols: 10,001 */
  refused(t, &LIM, GC_ELIMIT, "has more than 10000 nodes");
  free(t);
  t = repeat("s0", "+", 9999);
  gc_symexpr *e;
  cr_assert_eq(gc_symexpr_parse(a, t, &LIM, &e, NULL), 0);
  cr_assert_eq(e->size, 10000);
  cr_assert_eq(e->height, 2, "a long sum stays shallow");
  free(t);
}

CASE(long_products_and_calls_stay_shallow) {
  char *t = repeat("s1", " * ", 5000);
  gc_symexpr *e;
  cr_assert_eq(gc_symexpr_parse(a, t, &LIM, &e, NULL), 0);
  cr_assert_eq(e->kind, GC_SX_MUL);
  cr_assert_eq(e->nargs, 5000);
  free(t);
  char *args = repeat("s2", ", ", 3000);
  char *call = malloc(strlen(args) + 8);
  sprintf(call, "max(%s)", args);
  cr_assert_eq(gc_symexpr_parse(a, call, &LIM, &e, NULL), 0);
  cr_assert_eq(e->nargs, 3000);
  free(args), free(call);
}

CASE(arena_exhaustion_is_nomem) {
  gc_arena *small = gc_arena_new(4096);
  char *t = repeat("s0", "+", 5000);
  gc_symexpr *e;
  gc_error err;
  gc_error_clear(&err);
  cr_assert_eq(gc_symexpr_parse(small, t, &LIM, &e, &err), GC_ENOMEM, "%s",
               err.msg);
  gc_arena_free(small);
  free(t);
}

/* Issue 38: the artifact writes expressions back as text (renamed
 * symbols); parsing that text gives the tree it came from. */
static char *formatted(const char *text) {
  gc_symexpr *e;
  gc_error err;
  gc_error_clear(&err);
  cr_assert_eq(gc_symexpr_parse(a, text, &LIM, &e, &err), 0, "%s", err.msg);
  gc_buf b = GC_BUF_INIT;
  gc_symexpr_format(e, NULL, NULL, &b);
  char *s = gc_arena_strdup(a, b.data);
  gc_buf_free(&b);
  return s;
}

CASE(format_round_trips) {
  static const char *const texts[] = {
      "s0",
      "4",
      "2.0",
      "1e-05",
      "True",
      "-3",
      "s0 + 1",
      "s0 - s1",
      "s0 + -s1",
      "-s0 + s1",
      "(s0 + s1) + s2",
      "s0 + (s1 + s2)",
      "s0 - (s1 - s2)",
      "2*s0*s1",
      "(2*s0)*s1",
      "s0*(s1*s2)",
      "s0 // 2 // 3",
      "s0 // (2 // 3)",
      "s0*s1 // 4",
      "s0*(s1 // 4)",
      "(s0 // 4)*s1",
      "s0 % 8 + 1",
      "s0 / 2",
      "-(s0*s1)",
      "-s0*s1",
      "--s0",
      "-(-s0)",
      "2**3**2",
      "(2**3)**2",
      "2**-s0",
      "-2**s0",
      "(-2)**s0",
      "max(s0, s1 + 1, 3)",
      "min(s0, 2)*4",
      "floor(s0 / 2)",
      "ceil(s0 / 3) - 1",
      "abs(s0 - s1)",
      "s0 >= 2",
      "s0 + 1 == s1*2",
      "not s0 < 2",
      "not not s0 < 2",
      "s0 > 1 and s1 > 1 or s0 == s1",
      "s0 > 1 and (s1 > 1 or s0 == s1)",
      "(s0 == 1) == (s1 == 1)",
      "s0 - 2*s1 + 3",
      "s0 + -2*s1",
      "s0 - -s1",
      "(s0 - 1)*(s1 - 1)",
      "64*s0 <= 2147483647",
      "s0 % 4 == 0",
  };
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    char *f = formatted(texts[i]);
    cr_assert_str_eq(tree(f), tree(texts[i]), "\"%s\" formatted as \"%s\"",
                     texts[i], f);
  }
  cr_assert_str_eq(formatted("s0+1"), "s0 + 1");
  cr_assert_str_eq(formatted("(s0*2)//4"), "s0*2 // 4");
  cr_assert_str_eq(formatted("s0 - (s1 + 1)"), "s0 - (s1 + 1)");
}

static const char *rename_s(const char *name, void *ctx) {
  (void)ctx;
  return strcmp(name, "batch") == 0 ? "s0" : NULL;
}

CASE(format_renames_symbols) {
  gc_symexpr *e;
  gc_error err;
  cr_assert_eq(gc_symexpr_parse(a, "2*batch + seq", &LIM, &e, &err), 0);
  gc_buf b = GC_BUF_INIT;
  gc_symexpr_format(e, rename_s, NULL, &b);
  cr_assert_str_eq(b.data, "2*s0 + seq");
  gc_buf_free(&b);
}
