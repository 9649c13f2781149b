/*
 * test_passes.c: the pass table (compiler/passes.h) and the verifiers it
 * runs after each pass. The pipeline must run the table's passes in its
 * order; each verifier must pass on what its pass made of a graph and
 * catch the broken invariant it states when a test breaks it (a node order
 * with a node twice, a functional program that writes an input it says is
 * not mutated, two live buffers sharing arena bytes, a kernel in the wrong
 * segment).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/passes.h"
#include "compiler/pipeline.h"
#include "tests/lib/tgraph.h"

static gc_arena *a;
static void setup(void) {
  a = gc_arena_new(0);
}
static void teardown(void) {
  gc_arena_free(a);
}

#define T(name) Test(passes, name, .init = setup, .fini = teardown)

/* Two pointwise results both live at an ATen call (mm): two arena
 * buffers live at once; three segments' worth of kernels around it. */
static const char *const MM_GRAPH = "x: f32[8, 8]\n"
                                    "y: f32[8, 8]\n"
                                    "s = aten::add.Tensor(x, y): f32[8, 8]\n"
                                    "p = aten::mul.Tensor(x, y): f32[8, 8]\n"
                                    "m = aten::mm(s, p): f32[8, 8]\n"
                                    "r = aten::relu(m): f32[8, 8]\n"
                                    "return r\n";

static gc_options opts;
static gc_backend be = {.verify = true};

/* The graph of `spec`, decoded; the options reset to their defaults. */
static gc_graph *decode(const char *spec) {
  size_t len;
  uint8_t *buf = tg_bytes(a, spec, &len);
  gc_graph *g;
  gc_error err;
  cr_assert_eq(gc_graph_decode(a, buf, len, NULL, &g, &err), 0, "%s", err.msg);
  gc_options_default(&opts);
  return g;
}

/* Runs the table on `spec` up to and including pass `upto`, verifying. */
static gc_pass_state run_upto(const char *spec, const char *upto) {
  gc_graph *g = decode(spec);
  gc_error err;
  gc_pass_state s;
  gc_pass_state_init(&s, a, g, &opts, &be, "00");
  for (int i = 0; i < gc_npasses; i++) {
    cr_assert_eq(gc_pass_run(&gc_passes[i], &s, &err), 0, "%s: %s",
                 gc_passes[i].name, err.msg);
    if (!strcmp(gc_passes[i].name, upto))
      return s;
  }
  cr_assert_fail("no pass %s", upto);
  return s;
}

/* The pass's verifier on the (broken) state: its error. */
static gc_error verify(gc_pass_state *s, const char *pass) {
  const gc_pass *p = gc_pass_find(pass);
  gc_error err;
  gc_error_clear(&err);
  cr_assert(p && p->verify, "%s has a verifier", pass);
  cr_assert_eq(p->verify(s, &err), GC_EINTERNAL, "%s's verifier passed", pass);
  return err;
}

T(pipeline_runs_the_table_in_order) {
  gc_graph *g = decode(MM_GRAPH);
  gc_error err;
  gc_key key;
  memset(&key, 0, sizeof key);
  gc_compiled out;
  memset(&out, 0, sizeof out);
  /* no toolchain: the back half runs to cc, which fails the native build */
  cr_assert_eq(gc_compile(a, g, &key, &opts, &be, NULL, &out, &err), 0, "%s",
               err.msg);
  free(out.artifact);
  cr_assert(out.native_failed);
  cr_assert_str_eq(out.native_failed_stage, "cc");
  cr_assert_eq(out.ntimings, gc_npasses,
               "every pass but emit-native, "
               "and package");
  for (int i = 0; i < gc_npasses - 1; i++)
    cr_assert_str_eq(out.timings[i].stage, gc_passes[i].name);
  cr_assert_str_eq(out.timings[gc_npasses - 1].stage, "package");
}

T(every_pass_is_found_by_name) {
  for (int i = 0; i < gc_npasses; i++)
    cr_assert_eq(gc_pass_find(gc_passes[i].name), &gc_passes[i]);
  cr_assert_null(gc_pass_find("no-such-pass"));
  cr_assert_leq(gc_npasses, GC_MAX_PASSES);
}

T(order_verifier_catches_a_node_twice) {
  gc_pass_state s = run_upto(MM_GRAPH, "order");
  s.order[1] = s.order[0];
  gc_error err = verify(&s, "order");
  cr_assert(strstr(err.msg, "not a permutation"), "%s", err.msg);
}

T(functional_verifier_catches_a_write_to_an_input_said_unmutated) {
  gc_pass_state s = run_upto("x: f32[4]\n"
                             "y = aten::add_.Tensor(x, 1): f32[4]\n"
                             "return y\n",
                             "functionalize");
  cr_assert(s.f.functional);
  cr_assert_eq(s.f.inputs[0].type, GC_MUT_IN_GRAPH);
  s.f.inputs[0].type = GC_MUT_NOT_MUTATED;
  gc_error err = verify(&s, "functionalize");
  cr_assert(strstr(err.msg, "writes input 0"), "%s", err.msg);
}

T(plan_verifier_catches_live_buffers_sharing_bytes) {
  gc_pass_state s = run_upto(MM_GRAPH, "plan");
  ir_graph *ir = &s.nat.ir;
  ir_buf *b[2] = {NULL, NULL};
  int n = 0;
  for (int i = 0; i < ir->nbufs && n < 2; i++)
    if (ir->bufs[i]->kind == IR_BUF_ARENA && !s.nat.sched.local[i] &&
        ir->bufs[i]->first >= 0 && !ir->bufs[i]->share)
      b[n++] = ir->bufs[i];
  cr_assert_eq(n, 2, "the sum and the product are in the arena");
  cr_assert(b[0]->first <= b[1]->last && b[1]->first <= b[0]->last,
            "both live at the product");
  cr_assert_neq(b[0]->arena_offset, b[1]->arena_offset);
  b[1]->arena_offset = b[0]->arena_offset;
  gc_error err = verify(&s, "plan");
  cr_assert(strstr(err.msg, "overlap"), "%s", err.msg);
}

T(plan_verifier_catches_a_buffer_outside_the_arena) {
  gc_pass_state s = run_upto(MM_GRAPH, "plan");
  s.nat.sched.arena_bytes -= 64;
  gc_error err = verify(&s, "plan");
  cr_assert(strstr(err.msg, "outside the arena"), "%s", err.msg);
}

T(codegen_verifier_catches_a_kernel_in_the_wrong_segment) {
  gc_pass_state s = run_upto(MM_GRAPH, "codegen");
  cr_assert_geq(s.nat.src.nsegments, 2);
  int call = -1;
  for (int k = 0; k < s.nat.sched.nkernels; k++)
    if (s.nat.src.kernel_segment[k] == -1)
      call = k;
  cr_assert_geq(call, 0, "mm is an ATen call");
  s.nat.src.kernel_segment[call] = 0;
  gc_error err = verify(&s, "codegen");
  cr_assert(strstr(err.msg, "segment"), "%s", err.msg);
}

T(codegen_verifier_catches_a_missing_segment) {
  gc_pass_state s = run_upto(MM_GRAPH, "codegen");
  char *def = strstr(s.nat.src.text, "\nint gc_seg1(");
  cr_assert_not_null(def);
  def[5] = 'X'; /* "int gc_seg1" no longer defines segment 1 */
  gc_error err = verify(&s, "codegen");
  cr_assert(strstr(err.msg, "segments defined"), "%s", err.msg);
}
