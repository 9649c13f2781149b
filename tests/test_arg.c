/*
 * test_arg.c: the argument kinds' table (compiler/arg.h GC_ARG_KINDS): each
 * list kind's item kind, gc_arg_item reading a list's elements as single
 * arguments, gc_arg_each_value visiting the named values, and
 * gc_arg_print printing a list as its items.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/arg.h"
#include "compiler/buf.h"
#include "compiler/dump.h"
#include "compiler/graph.h"

Test(arg, every_list_kind_has_a_single_item_kind) {
  for (int k = 0; k < GC_ARG_KIND_COUNT; k++) {
    gc_arg_kind item = gc_arg_item_kind((gc_arg_kind)k);
    cr_assert_not(gc_arg_is_list(item), "%s's item %s is a list",
                  gc_arg_kind_name((gc_arg_kind)k), gc_arg_kind_name(item));
  }
  cr_assert_eq(gc_arg_item_kind(GC_ARG_INTS), GC_ARG_INT);
  cr_assert_eq(gc_arg_item_kind(GC_ARG_BOOLS), GC_ARG_BOOL);
  cr_assert_eq(gc_arg_item_kind(GC_ARG_OPT_TENSORS), GC_ARG_TENSOR);
  cr_assert_eq(gc_arg_item_kind(GC_ARG_SYM_FLOATS), GC_ARG_SYM_FLOAT);
  cr_assert_eq(gc_arg_item_kind(GC_ARG_DEVICE), GC_ARG_DEVICE);
  int lists = 0;
  for (int k = 0; k < GC_ARG_KIND_COUNT; k++)
    lists += gc_arg_is_list((gc_arg_kind)k);
  cr_assert_eq(lists, 9,
               "tensors, optional tensors, ints, floats, bools, "
               "strings and the three symbolic lists");
}

static void count(const gc_value *v, int item, void *ctx) {
  int *seen = ctx;
  seen[item] = v->id + 1;
}

Test(arg, items_and_named_values) {
  gc_value x = {.name = "x", .id = 4}, s = {.name = "s", .id = 7};
  gc_value *vals[3] = {&x, NULL, &x};
  gc_arg opt = {.kind = GC_ARG_OPT_TENSORS, .n = 3, .vals = vals};
  gc_arg it = gc_arg_item(&opt, 1);
  cr_assert_eq(it.kind, GC_ARG_NONE, "a None item");
  it = gc_arg_item(&opt, 2);
  cr_assert_eq(it.kind, GC_ARG_TENSOR);
  cr_assert_eq(it.v, &x);
  int seen[3] = {0};
  gc_arg_each_value(&opt, count, seen);
  cr_assert(seen[0] == 5 && seen[1] == 0 && seen[2] == 5);

  gc_symarg syms[2] = {{.v = NULL, .i = 3}, {.v = &s}};
  gc_arg sl = {.kind = GC_ARG_SYM_INTS, .n = 2, .syms = syms};
  it = gc_arg_item(&sl, 0);
  cr_assert(it.kind == GC_ARG_SYM_INT && !it.sym.v && it.sym.i == 3);
  memset(seen, 0, sizeof seen);
  gc_arg_each_value(&sl, count, seen);
  cr_assert(seen[0] == 0 && seen[1] == 8, "only the named item");

  int64_t bools[2] = {1, 0};
  gc_arg bl = {.kind = GC_ARG_BOOLS, .n = 2, .ints = bools};
  it = gc_arg_item(&bl, 0);
  cr_assert(it.kind == GC_ARG_BOOL && it.i == 1);

  gc_arg one = {.kind = GC_ARG_SYM_FLOAT, .sym = {.v = &s}};
  memset(seen, 0, sizeof seen);
  gc_arg_each_value(&one, count, seen);
  cr_assert_eq(seen[0], 8);
}

static void expect_print(const gc_arg *a, const char *want) {
  gc_buf b = GC_BUF_INIT;
  gc_arg_print(a, &b);
  char *got = gc_buf_take(&b);
  cr_assert_str_eq(got, want);
  free(got);
}

Test(arg, lists_print_as_their_items) {
  gc_value x = {.name = "x"}, s = {.name = "s0"};
  gc_value *vals[2] = {&x, NULL};
  expect_print(&(gc_arg){.kind = GC_ARG_OPT_TENSORS, .n = 2, .vals = vals},
               "[%x, None]");
  int64_t bools[2] = {1, 0};
  expect_print(&(gc_arg){.kind = GC_ARG_BOOLS, .n = 2, .ints = bools},
               "[True, False]");
  double fl[2] = {0.5, -INFINITY};
  expect_print(&(gc_arg){.kind = GC_ARG_FLOATS, .n = 2, .floats = fl},
               "[0.5, -inf]");
  gc_symarg syms[2] = {{.v = NULL, .f = 2.5}, {.v = &s}};
  expect_print(&(gc_arg){.kind = GC_ARG_SYM_FLOATS, .n = 2, .syms = syms},
               "[2.5, %s0]");
  gc_symarg bs[1] = {{.v = NULL, .b = true}};
  expect_print(&(gc_arg){.kind = GC_ARG_SYM_BOOLS, .n = 1, .syms = bs},
               "[True]");
  const char *strs[1] = {"mean"};
  expect_print(&(gc_arg){.kind = GC_ARG_STRINGS, .n = 1, .strs = strs},
               "[\"mean\"]");
}
