/*
 * test_lower_math.c: lowering rules of compiler/lower/ (pointwise.c,
 * activations.c, backward.c) on graphs a Python capture may never produce
 * (torch 1.13's make_fx decomposed where.ScalarOther, true_divide, selu,
 * square ... before they reached a graph, but other clients may send them),
 * and the cases the rules decline. Each graph goes through lower,
 * schedule, plan and codegen with the IR verifier on; values are checked
 * against eager PyTorch in tests/python/test_native_math.py.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/functionalize.h"
#include "compiler/graph.h"
#include "compiler/key.h"
#include "compiler/native.h"
#include "tests/lib/tgraph.h"

static gc_arena *a;
static void setup(void) {
  a = gc_arena_new(0);
}
static void teardown(void) {
  gc_arena_free(a);
}

#define T(name) Test(lower_math, name, .init = setup, .fini = teardown)

/* Lowers the graph `spec` through codegen; returns its statistics. */
static gc_lower_stats lower(const char *spec) {
  size_t len;
  uint8_t *buf = tg_bytes(a, spec, &len);
  gc_graph *g;
  gc_error err;
  cr_assert_eq(gc_graph_decode(a, buf, len, NULL, &g, &err), 0, "%s", err.msg);
  int *order = gc_arena_calloc(a, (size_t)g->nnodes + 1, sizeof *order);
  cr_assert_eq(gc_canonical_order(g, order, &err), 0);
  gc_options o;
  gc_options_default(&o);
  gc_functional f;
  cr_assert_eq(gc_functionalize(a, g, order, &o, &f, &err), 0, "%s", err.msg);
  cr_assert(f.functional);
  gc_backend be = {.verify = true};
  gc_native n = {0}; /* gc_native_lower reads temp_min_bytes */
  cr_assert_eq(gc_native_lower(&n, a, &f, &be, &err), 0, "%s", err.msg);
  cr_assert_eq(gc_native_schedule(&n, &be, &err), 0, "%s", err.msg);
  cr_assert_eq(gc_native_plan(&n, &be, &err), 0, "%s", err.msg);
  cr_assert_eq(gc_native_codegen(&n, "00", &err), 0, "%s", err.msg);
  return n.stats;
}

static int by_name(const void *x, const void *y) {
  return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* The fallback operators, sorted, space-separated. */
static const char *fallbacks(const gc_lower_stats *s) {
  static char out[1024];
  const char *names[64];
  int n = s->nfallback_ops < 64 ? s->nfallback_ops : 64;
  memcpy(names, s->fallback_ops, (size_t)n * sizeof *names);
  qsort(names, (size_t)n, sizeof *names, by_name);
  out[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (i)
      strncat(out, " ", sizeof out - strlen(out) - 1);
    strncat(out, names[i], sizeof out - strlen(out) - 1);
  }
  return out;
}

#define ALL_NATIVE(s)                                                          \
  cr_assert_eq((s).fallback, 0, "fallbacks: %s", fallbacks(&(s)))

T(composite_overloads_lower) {
  gc_lower_stats s =
      lower("x: f32[4, 6]\n"
            "i: i64[4, 6]\n"
            "c: bool[4, 6]\n"
            "a = aten::where.ScalarOther(c, x, 1.5): f32[4, 6]\n"
            "b = aten::where.ScalarSelf(c, 2, x): f32[4, 6]\n"
            "d = aten::where.Scalar(c, 1.0, 0): f32[4, 6]\n"
            "e = aten::true_divide.Tensor(x, a): f32[4, 6]\n"
            "f = aten::true_divide.Scalar(i, 3): f32[4, 6]\n"
            "g = aten::__and__.Tensor(i, i): i64[4, 6]\n"
            "h = aten::__or__.Scalar(i, 3): i64[4, 6]\n"
            "j = aten::__xor__.Scalar(i, 5): i64[4, 6]\n"
            "k = aten::__lshift__.Tensor(i, i): i64[4, 6]\n"
            "l = aten::__rshift__.Scalar(i, 2): i64[4, 6]\n"
            "m = aten::bitwise_right_shift.Scalar_Tensor(-300, i): i64[4, 6]\n"
            "n = aten::square(x): f32[4, 6]\n"
            "o = aten::selu(x): f32[4, 6]\n"
            "p = aten::isfinite(x): bool[4, 6]\n"
            "q = aten::clamp_min.Tensor(x, a): f32[4, 6]\n"
            "r = aten::clamp_max.Tensor(x, b): f32[4, 6]\n"
            "t = aten::special_xlog1py.other_scalar(x, 2.0): f32[4, 6]\n"
            "u = aten::empty_like(x): f32[4, 6]\n"
            "v = aten::fill.Scalar(u, 2.0): f32[4, 6]\n"
            "return a, b, d, e, f, g, h, j, k, l, m, n, o, p, q, r, t, v\n");
  ALL_NATIVE(s);
  cr_assert_eq(s.native, s.nodes);
}

T(backward_operators_lower) {
  gc_lower_stats s = lower(
      "g: f32[4, 8]\n"
      "x: f32[4, 8]\n"
      "y: f32[4, 8]\n"
      "mean: f32[1, 1]\n"
      "rstd: f32[1, 1]\n"
      "w: f32[4, 8]\n"
      "a = aten::threshold_backward(g, x, 0): f32[4, 8]\n"
      "b = aten::gelu_backward(g, x, approximate=\"tanh\"): f32[4, 8]\n"
      "c = aten::_softmax_backward_data(g, y, 1, dtype:float32): f32[4, 8]\n"
      "d = aten::_log_softmax_backward_data(g, y, 0, dtype:float32): f32[4, "
      "8]\n"
      /* normalized over every dimension: all three results are [4, 8] (the
       * weight's gradient sums over no dimension at all) */
      "e, f, h = aten::native_layer_norm_backward(g, x, [4, 8], mean, rstd, "
      "w, None, [True, True, True]): f32[4, 8]\n"
      "k = aten::hardswish_backward(g, x): f32[4, 8]\n"
      "l = aten::glu_backward(g, x, 0): f32[4, 8]\n"
      "return a, b, c, d, e, f, h, k, l\n");
  ALL_NATIVE(s);
}

T(integer_division_by_zero_or_minus_one_is_declined) {
  /* ATen raises on 0; INT64_MIN / -1 traps; 256 is 0 as uint8 */
  gc_lower_stats s = lower("i: i64[5]\n"
                           "u: u8[5]\n"
                           "a = aten::remainder.Scalar(i, 0): i64[5]\n"
                           "b = aten::floor_divide.Scalar(i, -1): i64[5]\n"
                           "c = aten::fmod.Scalar(u, 256): u8[5]\n"
                           "d = aten::remainder.Tensor(i, i): i64[5]\n"
                           "e = aten::remainder.Scalar(i, 7): i64[5]\n"
                           "f = aten::fmod.Scalar(u, 255): u8[5]\n"
                           "return a, b, c, d, e, f\n");
  cr_assert_str_eq(fallbacks(&s),
                   "aten::floor_divide.Scalar aten::fmod.Scalar "
                   "aten::remainder.Scalar aten::remainder.Tensor");
  cr_assert_eq(s.native, 2);
}

T(integer_pow_and_training_rrelu_are_declined) {
  gc_lower_stats s =
      lower("i: i64[5]\n"
            "x: f32[5]\n"
            "nz: f32[5]\n"
            "a = aten::pow.Tensor_Scalar(i, 5): i64[5]\n"
            "b = aten::pow.Tensor_Scalar(i, 3): i64[5]\n"
            "c = aten::pow.Tensor_Tensor(i, i): i64[5]\n"
            "d = aten::rrelu_with_noise(x, nz, 0.1, 0.3, True): f32[5]\n"
            "e = aten::rrelu_with_noise(x, nz, 0.1, 0.3, False): f32[5]\n"
            "f = aten::erfinv(x): f32[5]\n"
            "return a, b, c, d, e, f\n");
  cr_assert_str_eq(fallbacks(&s), "aten::erfinv aten::pow.Tensor_Scalar "
                                  "aten::pow.Tensor_Tensor "
                                  "aten::rrelu_with_noise");
  /* pow(i, 3) and the eval rrelu; torch 2's schema says rrelu_with_noise
   * writes `noise` (Tensor(b!)), so functionalization adds a copy of nz
   * per call and the write-back of the last into nz: 3 more */
  cr_assert_eq(s.nodes, 9);
  cr_assert_eq(s.native, 2 + 3);
}
