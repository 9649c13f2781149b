/*
 * test_lower_math.c: lowering rules of compiler/lower/ (pointwise.c,
 * activations.c, backward.c) on graphs a Python capture may never produce
 * (torch 1.13's make_fx decomposed where.ScalarOther, true_divide, selu,
 * square ... before they reached a graph, but other clients may send them),
 * and the cases the rules decline; the forms torch 2 records (batch norm's
 * _native_batch_norm_legit family, native_dropout, _safe_softmax, ...), and
 * operators that are not ATen's. Each graph goes through lower,
 * schedule, plan and codegen with the IR verifier on; values are checked
 * against eager PyTorch in tests/python/test_native_math.py.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/functionalize.h"
#include "compiler/graph.h"
#include "compiler/key.h"
#include "compiler/passes.h"
#include "tests/lib/tgraph.h"

static gc_arena *a;
static void setup(void) {
  a = gc_arena_new(0);
}
static void teardown(void) {
  gc_arena_free(a);
}

#define T(name) Test(lower_math, name, .init = setup, .fini = teardown)

/* Lowers the graph message `buf` through codegen; returns its statistics. */
static gc_lower_stats lower_bytes(const uint8_t *buf, size_t len) {
  gc_graph *g;
  gc_error err;
  cr_assert_eq(gc_graph_decode(a, buf, len, NULL, &g, &err), 0, "%s", err.msg);
  gc_options o;
  gc_options_default(&o);
  gc_backend be = {.verify = true};
  gc_pass_state s;
  gc_pass_state_init(&s, a, g, &o, &be, "00");
  /* every pass up to codegen, each verified (passes.h) */
  for (int i = 0; i < gc_npasses; i++) {
    const gc_pass *p = &gc_passes[i];
    if (!strcmp(p->name, "lower"))
      cr_assert(s.f.functional);
    cr_assert_eq(gc_pass_run(p, &s, &err), 0, "%s", err.msg);
    if (!strcmp(p->name, "codegen"))
      break;
  }
  return s.nat.stats;
}

/* Lowers the graph `spec` through codegen; returns its statistics. */
static gc_lower_stats lower(const char *spec) {
  size_t len;
  uint8_t *buf = tg_bytes(a, spec, &len);
  return lower_bytes(buf, len);
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

/* Operators that are not ATen's: a higher-order operator a client sends
 * with a schema of its own, and a name without a namespace. Neither has a
 * row: each is an ATen call by name (the client's runtime resolves it, or
 * says it cannot), the rest of the graph native code. */
T(higher_order_and_unqualified_operators_fall_back) {
  gc_lower_stats s = lower(
      "op higher_order::cond higher_order::cond(Tensor pred, Any true_fn, "
      "Any false_fn, Tensor x) -> Tensor\n"
      "x: f32[4]\n"
      "p: bool[]\n"
      "y = higher_order::cond(p, None, None, x): f32[4]\n"
      "z = aten::relu(y): f32[4]\n"
      "return z\n");
  cr_assert_str_eq(fallbacks(&s), "higher_order::cond");
  cr_assert_eq(s.native, 1);

  char err[256] = "";
  Compiled__V1__GraphModule *m =
      tg_build(a,
               "op zz::cond zz::cond(Tensor pred, Tensor x) -> Tensor\n"
               "x: f32[4]\n"
               "p: bool[]\n"
               "y = zz::cond(p, x): f32[4]\n"
               "z = aten::relu(y): f32[4]\n"
               "return z\n",
               err, sizeof err);
  cr_assert_not_null(m, "%s", err);
  m->operators[0]->name = "cond";
  m->operators[0]->schema = "cond(Tensor pred, Tensor x) -> Tensor";
  m->graph->nodes[0]->target = "cond";
  size_t len = compiled__v1__graph_module__get_packed_size(m);
  uint8_t *buf = gc_arena_alloc(a, len);
  cr_assert_not_null(buf);
  compiled__v1__graph_module__pack(m, buf);
  s = lower_bytes(buf, len);
  cr_assert_str_eq(fallbacks(&s), "cond");
  cr_assert_eq(s.native, 1);
}

/* The forms torch 2 records: batch norm's _native_batch_norm_legit family
 * (in place with annotated writes, without statistics, eval, and
 * AOTAutograd's functional form returning the new statistics),
 * native_dropout and its backward, _safe_softmax, adaptive_max_pool2d,
 * _unsafe_index: no fallback (values: tests/python/test_dynamo_ops.py). */
T(torch2_forms_lower) {
  static const char *const specs[] = {
      "x: f32[2, 3, 4]\nw: f32[3] param\nb: f32[3] param\n"
      "rm: f32[3] buffer\nrv: f32[3] buffer\n"
      "o, m, v = aten::_native_batch_norm_legit(x, w, b, rm, rv, True, 0.1, "
      "1e-5): f32[2, 3, 4]; f32[3]\n"
      "return o, m, v\n",
      "x: f32[2, 3, 4]\n"
      "o, m, v = aten::_native_batch_norm_legit.no_stats(x, None, None, "
      "True, 0.1, 1e-5): f32[2, 3, 4]; f32[3]\n"
      "return o, m, v\n",
      "x: f32[2, 3, 4]\nrm: f32[3] buffer\nrv: f32[3] buffer\n"
      "o, m, v = aten::_native_batch_norm_legit_no_training(x, None, None, "
      "rm, rv, 0.1, 1e-5): f32[2, 3, 4]; f32[0]\n"
      "return o\n",
      "x: f32[2, 3, 4]\nrm: f32[3]\nrv: f32[3]\n"
      "o, m, v, nm, nv = aten::_native_batch_norm_legit_functional(x, None, "
      "None, rm, rv, True, 0.1, 1e-5): f32[2, 3, 4]; f32[3]\n"
      "return o, m, v, nm, nv\n",
      "x: f32[2, 3, 4]\ng: f32[2, 3, 4]\n"
      "d, k = aten::native_dropout(x, 0.25, True): f32[2, 3, 4]; "
      "bool[2, 3, 4]\n"
      "dx = aten::native_dropout_backward(g, k, 1.3333333333333333): "
      "f32[2, 3, 4]\n"
      "s = aten::_safe_softmax(dx, -1): f32[2, 3, 4]\n"
      "return d, k, s\n",
      "x: f32[2, 3, 7, 5]\n"
      "v, i = aten::adaptive_max_pool2d(x, [3, 2]): f32[2, 3, 3, 2]; "
      "i64[2, 3, 3, 2]\n"
      "return v, i\n",
      "x: f32[4, 5]\ni: i64[3]\n"
      "y = aten::_unsafe_index.Tensor(x, [i, None]): f32[3, 5]\n"
      "return y\n",
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    gc_lower_stats s = lower(specs[i]);
    cr_assert_eq(s.fallback, 0, "graph %zu: fallbacks: %s", i, fallbacks(&s));
  }
}
