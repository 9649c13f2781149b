/*
 * test_ir_fold.c: the exact identities the loop IR's expression builder
 * applies (compiler/ir/ir.c, make_op), in particular comparisons that an
 * index's range decides, directly or through where()s: what a loop split
 * into ranges makes of a padded window's bounds checks (cgen.c).
 */
#include <criterion/criterion.h>

#include "compiler/arena.h"
#include "compiler/ir/ir.h"
#include "tests/lib/irbuild.h"

/* The graph every test builds in: ib_ir (tests/lib/irbuild.h). */
TestSuite(ir_fold, .init = ib_setup, .fini = ib_teardown);

static const gc_dtype I64 = GC_DTYPE_INT64, F32 = GC_DTYPE_FLOAT32;

static ir_expr *k(int64_t v) {
  return ir_const_i(&ib_ir, v, I64);
}

/* INDEX(c*x + d) for a variable x over [lo, hi] */
static ir_expr *affine(gc_sym *x, int64_t c, int64_t d) {
  return ir_index(
      &ib_ir, gc_sym_addc(&ib_ir.sym, gc_sym_scale(&ib_ir.sym, x, c), d), I64);
}

static void expect_const(const ir_expr *e, int64_t v) {
  cr_assert_not_null(e);
  cr_assert_eq(e->op, IR_CONST, "not folded (op %d)", (int)e->op);
  cr_assert_eq(e->k.i, v);
}

static void expect_not_const(const ir_expr *e) {
  cr_assert_not_null(e);
  cr_assert_neq(e->op, IR_CONST, "folded but not decided");
}

Test(ir_fold, constants_compare) {
  expect_const(ir_op2(&ib_ir, IR_LT, I64, k(-1), k(0)), 1);
  expect_const(ir_op2(&ib_ir, IR_GE, I64, k(-1), k(0)), 0);
  expect_const(ir_op2(&ib_ir, IR_EQ, I64, k(7), k(7)), 1);
  expect_const(ir_op2(&ib_ir, IR_NE, I64, k(7), k(7)), 0);
  expect_const(ir_op2(&ib_ir, IR_LE, I64, k(3), k(2)), 0);
  expect_const(ir_op2(&ib_ir, IR_GT, I64, k(3), k(2)), 1);
}

Test(ir_fold, an_index_compared_within_its_range) {
  gc_sym *x = gc_sym_newvar(&ib_ir.sym, "x", 1, 55);
  /* 2x - 1 lies in [1, 109] */
  expect_const(ir_op2(&ib_ir, IR_GE, I64, affine(x, 2, -1), k(0)), 1);
  expect_const(ir_op2(&ib_ir, IR_LT, I64, affine(x, 2, -1), k(0)), 0);
  expect_const(ir_op2(&ib_ir, IR_LT, I64, affine(x, 2, -1), k(110)), 1);
  /* 2x - 3 lies in [-1, 107]: undecided */
  expect_not_const(ir_op2(&ib_ir, IR_LT, I64, affine(x, 2, -3), k(0)));
}

Test(ir_fold, through_where_chains) {
  gc_sym *x = gc_sym_newvar(&ib_ir.sym, "x", 1, 55);
  int64_t sizes[1] = {112}, strides[1] = {1};
  ir_buf *b = ir_buf_new(&ib_ir, IR_BUF_ARENA, F32, 1, sizes, strides);
  cr_assert_not_null(b);
  /* a data-dependent condition, as a max pool's "take this position" */
  ir_expr *v = ir_load(&ib_ir, b, gc_sym_addc(&ib_ir.sym, x, 0));
  ir_expr *c = ir_op2(&ib_ir, IR_GT, F32, v, ir_const_f(&ib_ir, 0.5, F32));
  /* both arms non-negative: decided */
  ir_expr *w =
      ir_op3(&ib_ir, IR_WHERE, I64, c, affine(x, 2, -1), affine(x, 2, 0));
  cr_assert_eq(w->op, IR_WHERE);
  expect_const(ir_op2(&ib_ir, IR_LT, I64, w, k(0)), 0);
  /* a chain of them, the last arm's value deciding too */
  ir_expr *chain = w;
  for (int i = 1; i <= 60; i++)
    chain = ir_op3(&ib_ir, IR_WHERE, I64, c, affine(x, 2, i), chain);
  expect_const(ir_op2(&ib_ir, IR_LT, I64, chain, k(0)), 0);
  expect_const(ir_op2(&ib_ir, IR_GE, I64, chain, k(0)), 1);
  /* one arm -1 ("nothing taken yet"): undecided */
  ir_expr *unset = ir_op3(&ib_ir, IR_WHERE, I64, c, affine(x, 2, -1), k(-1));
  expect_not_const(ir_op2(&ib_ir, IR_LT, I64, unset, k(0)));
  expect_not_const(
      ir_op2(&ib_ir, IR_LT, I64,
             ir_op3(&ib_ir, IR_WHERE, I64, c, affine(x, 1, 0), unset), k(0)));
}
