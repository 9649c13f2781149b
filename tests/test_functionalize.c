/*
 * test_functionalize.c: the alias/mutation analysis on small graphs: which
 * functional operators come out, and the input and output metadata, for the
 * cases AOTAutograd distinguishes. (tests/python/test_semantics.py checks
 * the same programs end to end against eager PyTorch.)
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "compiler/buf.h"
#include "compiler/functionalize.h"
#include "compiler/graph.h"
#include "compiler/key.h"
#include "tests/lib/tgraph.h"

static gc_arena *a;
static void setup(void) {
  a = gc_arena_new(0);
}
static void teardown(void) {
  gc_arena_free(a);
}

#define T(name) Test(functionalize, name, .init = setup, .fini = teardown)

static gc_functional run_opts(const char *spec, bool keep, bool training) {
  size_t len;
  uint8_t *buf = tg_bytes(a, spec, &len);
  gc_graph *g;
  gc_error err;
  cr_assert_eq(gc_graph_decode(a, buf, len, NULL, &g, &err), 0, "%s", err.msg);
  int *order = gc_arena_calloc(a, (size_t)g->nnodes + 1, sizeof *order);
  cr_assert_eq(gc_canonical_order(g, order, &err), 0);
  gc_options o;
  gc_options_default(&o);
  o.keep_input_mutations = keep;
  o.training = training;
  gc_functional f;
  cr_assert_eq(gc_functionalize(a, g, order, &o, &f, &err), 0, "%s", err.msg);
  return f;
}

static gc_functional run(const char *spec) {
  return run_opts(spec, true, false);
}

/* "aten::add.Tensor aten::copy_": the program's operators in order. */
static const char *ops(const gc_functional *f) {
  static char buf[2048];
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < f->graph->nnodes && used < sizeof buf; i++)
    used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s",
                             i ? " " : "", f->graph->nodes[f->order[i]].target);
  return buf;
}

#define OPS_ARE(f, want) cr_assert_str_eq(ops(&(f)), want, "ops: %s", ops(&(f)))

T(inplace_on_input_is_kept_in_graph) {
  gc_functional f = run("x: f32[4]\n"
                        "y = aten::add_.Tensor(x, 1): f32[4]\n"
                        "z = aten::mul.Tensor(x, 2): f32[4]\n"
                        "return z\n");
  cr_assert(f.functional);
  OPS_ARE(f, "aten::add.Tensor aten::mul.Tensor aten::copy_");
  cr_assert(f.inputs[0].mutates_data && !f.inputs[0].mutates_metadata);
  cr_assert_eq(f.inputs[0].type, GC_MUT_IN_GRAPH);
  cr_assert_eq(f.num_mutated_outputs, 0);
  /* mul reads the new value: its first argument is add's result */
  const gc_node *add = &f.graph->nodes[f.order[0]],
                *mul = &f.graph->nodes[f.order[1]];
  cr_assert_eq(mul->args[0].arg.v, add->outputs[0].v);
}

T(inplace_on_input_out_of_graph_without_keep) {
  gc_functional f = run_opts("x: f32[4]\n"
                             "y = aten::add_.Tensor(x, 1): f32[4]\n"
                             "return y\n",
                             false, false);
  OPS_ARE(f, "aten::add.Tensor");
  cr_assert_eq(f.inputs[0].type, GC_MUT_OUT_GRAPH);
  cr_assert_eq(f.inputs[0].mutated_output, 0);
  cr_assert_eq(f.num_mutated_outputs, 1);
  cr_assert_eq(f.outputs[0].type, GC_OUT_IS_INPUT);
  cr_assert_eq(f.outputs[0].base, 0);
  cr_assert_eq(f.outputs[0].program_output, 1);
}

T(requires_grad_input_is_mutated_out_of_graph) {
  gc_functional f = run("x: f32[4] grad\n"
                        "w: f32[4]\n"
                        "y = aten::mul_.Tensor(w, x): f32[4]\n"
                        "z = aten::add_.Tensor(x, 1): f32[4] grad\n"
                        "return y\n");
  cr_assert_eq(f.inputs[0].type, GC_MUT_OUT_GRAPH);
  cr_assert_eq(f.inputs[1].type, GC_MUT_IN_GRAPH);
}

T(write_through_select_becomes_select_scatter) {
  gc_functional f = run("x: f32[4, 4]\n"
                        "v = aten::select.int(x, 0, 1): f32[4]\n"
                        "w = aten::mul_.Tensor(v, 2): f32[4]\n"
                        "s = aten::sum(x): f32[]\n"
                        "return s\n");
  cr_assert(f.functional);
  OPS_ARE(f, "aten::select.int aten::mul.Tensor aten::select_scatter aten::sum "
             "aten::copy_");
  cr_assert(f.inputs[0].mutates_data);
}

T(write_through_a_chain_scatters_back_up) {
  gc_functional f = run(
      "x: f32[4, 4]\n"
      "t = aten::t(x): f32[4, 4] strides [1, 4]\n"
      "r = aten::slice.Tensor(t, 0, 1, 3): f32[2, 4] strides [1, 4] offset 1\n"
      "w = aten::add_.Tensor(r, 1): f32[2, 4] strides [1, 4] offset 1\n"
      "return x\n");
  cr_assert(f.functional);
  /* new r; t(x) regenerated as the base; slice_scatter into it; t back */
  cr_assert(strstr(ops(&f), "aten::add.Tensor aten::t aten::slice_scatter "
                            "aten::t aten::copy_"),
            "%s", ops(&f));

  cr_assert_eq(f.outputs[0].type, GC_OUT_IS_INPUT);
}

T(view_read_after_the_write_is_regenerated) {
  gc_functional f = run("x: f32[4, 4]\n"
                        "v = aten::select.int(x, 0, 0): f32[4]\n"
                        "w = aten::add_.Tensor(x, 1): f32[4, 4]\n"
                        "y = aten::mul.Tensor(v, 2): f32[4]\n"
                        "return y\n");
  /* v is taken again from the new x before mul reads it */
  OPS_ARE(f, "aten::add.Tensor aten::select.int aten::mul.Tensor aten::copy_");
  const gc_node *sel = &f.graph->nodes[f.order[1]],
                *add = &f.graph->nodes[f.order[0]];
  cr_assert_eq(sel->args[0].arg.v, add->outputs[0].v);
}

T(split_element_write_becomes_slice_scatter) {
  gc_functional f = run("x: f32[6]\n"
                        "[a, b, c] = aten::split.Tensor(x, 2): f32[2]\n"
                        "w = aten::mul_.Tensor(b, 3): f32[2]\n"
                        "return x\n");
  cr_assert(strstr(ops(&f), "aten::slice_scatter"), "%s", ops(&f));
  /* the slice written is [2, 4) */
  for (int i = 0; i < f.graph->nnodes; i++) {
    const gc_node *n = &f.graph->nodes[i];
    if (strcmp(n->target, "aten::slice_scatter") == 0) {
      cr_assert_eq(n->args[3].arg.i, 2);
      cr_assert_eq(n->args[4].arg.i, 4);
    }
  }
}

T(metadata_mutation_twice_is_no_change) {
  gc_functional f = run("x: f32[2, 3]\n"
                        "a = aten::t_(x): f32[3, 2] strides [1, 3]\n"
                        "b = aten::t_(x): f32[2, 3]\n"
                        "y = aten::add.Tensor(x, 1): f32[2, 3]\n"
                        "return y\n");
  cr_assert(!f.inputs[0].mutates_metadata && !f.inputs[0].mutates_data);
  cr_assert_eq(f.inputs[0].type, GC_MUT_NOT_MUTATED);
}

T(metadata_mutation_is_out_of_graph_with_final_metadata) {
  gc_functional f = run("x: f32[2, 3]\n"
                        "a = aten::t_(x): f32[3, 2] strides [1, 3]\n"
                        "return a\n");
  cr_assert(f.inputs[0].mutates_metadata && !f.inputs[0].mutates_data);
  cr_assert_eq(f.inputs[0].type, GC_MUT_OUT_GRAPH);
  cr_assert_eq(f.inputs[0].final_meta.rank, 2);
  cr_assert_eq(f.inputs[0].final_meta.size[0], 3);
  cr_assert_eq(f.inputs[0].final_meta.stride[0], 1);
  cr_assert_eq(f.inputs[0].final_meta.stride[1], 3);
  cr_assert_eq(f.outputs[0].type, GC_OUT_IS_INPUT);
}

T(view_of_input_after_metadata_change_uses_as_strided) {
  gc_functional f =
      run("x: f32[2, 3]\n"
          "a = aten::t_(x): f32[3, 2] strides [1, 3]\n"
          "v = aten::select.int(x, 0, 1): f32[2] strides [3] offset 1\n"
          "return v\n");
  cr_assert_eq(f.outputs[0].type, GC_OUT_ALIAS_OF_INPUT);
  cr_assert(!f.outputs[0].has_chain);
  cr_assert_eq(f.outputs[0].strided.offset, 1);
  cr_assert_eq(f.outputs[0].strided.stride[0], 3);
}

T(outputs_that_view_inputs) {
  gc_functional f = run("x: f32[4, 4]\n"
                        "v = aten::view(x, [16]): f32[16]\n"
                        "s = aten::slice.Tensor(v, 0, 2, 5): f32[3] offset 2\n"
                        "return v, s, x\n");
  cr_assert_eq(f.outputs[0].type, GC_OUT_ALIAS_OF_INPUT);
  cr_assert_eq(f.outputs[0].nchain, 1);
  cr_assert_eq(f.outputs[1].type, GC_OUT_ALIAS_OF_INPUT);
  cr_assert_eq(f.outputs[1].nchain, 2);
  cr_assert(f.outputs[1].has_chain);
  cr_assert_eq(f.outputs[2].type, GC_OUT_IS_INPUT);
}

T(views_of_intermediates) {
  const char *spec = "x: f32[4, 4] grad\n"
                     "y = aten::add.Tensor(x, 1): f32[4, 4] grad\n"
                     "a = aten::select.int(y, 0, 0): f32[4] grad\n"
                     "b = aten::select.int(y, 0, 1): f32[4] grad\n"
                     "return a, b\n";
  gc_functional inf = run(spec);
  cr_assert_eq(inf.outputs[0].type, GC_OUT_NON_ALIAS);
  cr_assert_eq(inf.outputs[1].type, GC_OUT_NON_ALIAS);
  gc_functional tr = run_opts(spec, true, true);
  cr_assert_eq(tr.num_intermediate_bases, 1);
  cr_assert(tr.outputs[0].type == GC_OUT_ALIAS_OF_INTERMEDIATE_SAVE_AS_OUTPUT ||
            tr.outputs[1].type == GC_OUT_ALIAS_OF_INTERMEDIATE_SAVE_AS_OUTPUT);
  cr_assert(tr.outputs[0].type == GC_OUT_ALIAS_OF_INTERMEDIATE ||
            tr.outputs[1].type == GC_OUT_ALIAS_OF_INTERMEDIATE);
  gc_functional one = run_opts("x: f32[4, 4] grad\n"
                               "y = aten::add.Tensor(x, 1): f32[4, 4] grad\n"
                               "a = aten::select.int(y, 0, 0): f32[4] grad\n"
                               "return a\n",
                               true, true);
  cr_assert_eq(one.outputs[0].type, GC_OUT_UNSAFE_VIEW_ALIAS);
  gc_functional base = run_opts("x: f32[4, 4] grad\n"
                                "y = aten::add.Tensor(x, 1): f32[4, 4] grad\n"
                                "a = aten::select.int(y, 0, 0): f32[4] grad\n"
                                "return y, a\n",
                                true, true);
  cr_assert_eq(base.outputs[1].type,
               GC_OUT_ALIAS_OF_INTERMEDIATE_BASE_IS_USER_OUTPUT);
  cr_assert_eq(base.outputs[1].base, 0);
}

T(mutation_through_detach_is_hidden_from_autograd) {
  gc_functional f = run("x: f32[4] grad\n"
                        "d = aten::detach(x): f32[4]\n"
                        "w = aten::mul_.Tensor(d, 2): f32[4]\n"
                        "y = aten::add.Tensor(x, 1): f32[4] grad\n"
                        "return y\n");
  cr_assert(f.inputs[0].mutates_data && f.inputs[0].hidden_from_autograd);
  cr_assert_eq(f.inputs[0].type, GC_MUT_IN_GRAPH);
}

T(out_variant_uses_the_typed_functional_overload) {
  gc_functional f = run("a: f32[4]\nb: f32[4]\nc: f32[4]\n"
                        "r = aten::add.out(a, b, out=c): f32[4]\n"
                        "return r\n");
  OPS_ARE(f, "aten::add.Tensor aten::copy_");
  cr_assert_eq(f.inputs[2].type, GC_MUT_IN_GRAPH);
  cr_assert_eq(f.outputs[0].type, GC_OUT_IS_INPUT);
  cr_assert_eq(f.outputs[0].base, 2);
}

T(batch_norm_training_writes_running_stats_on_clones) {
  gc_functional f =
      run("x: f32[2, 3]\nrm: f32[3] buffer\nrv: f32[3] buffer\n"
          "o, m, v = aten::native_batch_norm(x, None, None, rm, rv, "
          "True, 0.1, 1e-5): f32[2, 3]\n"
          "return o\n");
  cr_assert(f.functional);
  cr_assert(strstr(ops(&f), "aten::clone aten::clone aten::native_batch_norm"),
            "%s", ops(&f));
  cr_assert(f.inputs[1].mutates_data && f.inputs[2].mutates_data);
  gc_functional ev =
      run("x: f32[2, 3]\nrm: f32[3] buffer\nrv: f32[3] buffer\n"
          "o, m, v = aten::native_batch_norm(x, None, None, rm, rv, "
          "False, 0.1, 1e-5): f32[2, 3]\n"
          "return o\n");
  cr_assert(!ev.inputs[1].mutates_data && !ev.inputs[2].mutates_data);
  OPS_ARE(ev, "aten::native_batch_norm");
}

T(overlapping_inputs_written_keep_the_eager_form) {
  gc_functional f = run("x: f32[4] group 0\ny: f32[4] group 0\n"
                        "w = aten::add_.Tensor(x, 1): f32[4]\n"
                        "s = aten::add.Tensor(y, 1): f32[4]\n"
                        "return s\n");
  cr_assert(!f.functional);
  cr_assert(strstr(f.eager_reason, "inputs 0 and 1 share overlapping storage"),
            "%s", f.eager_reason);
  cr_assert(f.inputs[0].mutates_data);
  OPS_ARE(f, "aten::add_.Tensor aten::add.Tensor");
}

T(disjoint_inputs_of_one_storage_stay_functional) {
  gc_functional f = run("x: f32[4] group 0\ny: f32[4] offset 4 group 0\n"
                        "w = aten::add_.Tensor(x, 1): f32[4]\n"
                        "s = aten::add.Tensor(y, 1): f32[4]\n"
                        "return s\n");
  cr_assert(f.functional, "%s", f.eager_reason ? f.eager_reason : "");
}

T(write_through_expand_keeps_the_eager_form) {
  gc_functional f =
      run("x: f32[1, 4]\n"
          "e = aten::expand(x, [3, 4]): f32[3, 4] strides [0, 1]\n"
          "w = aten::add_.Tensor(e, 1): f32[3, 4] strides [0, 1]\n"
          "return w\n");
  cr_assert(!f.functional);
  cr_assert(strstr(f.eager_reason, "expanded view"), "%s", f.eager_reason);
}

T(set_keeps_the_eager_form) {
  gc_functional f = run("x: f32[4]\ny: f32[4]\n"
                        "s = aten::set_.source_Tensor(x, y): f32[4]\n"
                        "return s\n");
  cr_assert(!f.functional);
  cr_assert(strstr(f.eager_reason, "changes a tensor's storage"), "%s",
            f.eager_reason);
}

T(dead_nodes_are_dropped) {
  gc_functional f = run("x: f32[4]\n"
                        "d = aten::detach(x): f32[4]\n"
                        "e = aten::exp(x): f32[4]\n"
                        "y = aten::relu(x): f32[4]\n"
                        "return y\n");
  OPS_ARE(f, "aten::relu");
}

/* Every captured graph compiles through the whole pipeline; all but the
 * ones that need it are functional. */
#include "compiler/pipeline.h"
#include "tests/lib/testutil.h"

Test(functionalize, whole_corpus_compiles) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/tests/data/graphs", tu_src_dir());
  int n, functional = 0;
  char **files = tu_list(dir, ".pb", &n);
  cr_assert_geq(n, 20);
  for (int i = 0; i < n; i++) {
    gc_arena *ar = gc_arena_new(0);
    size_t len;
    uint8_t *buf = tu_read(files[i], &len);
    gc_graph *g;
    gc_error err;
    cr_assert_eq(gc_graph_decode(ar, buf, len, NULL, &g, &err), 0, "%s",
                 err.msg);
    gc_options o;
    gc_options_default(&o);
    gc_target t = {
        .arch = "x86_64", .isa = "", .toolchain = "cc", .cflags = ""};
    gc_key key;
    cr_assert_eq(gc_key_compute(g, &o, &t, &key, &err), 0);
    int *order = gc_arena_calloc(ar, (size_t)g->nnodes + 1, sizeof *order);
    cr_assert_eq(gc_canonical_order(g, order, &err), 0);
    gc_functional f;
    cr_assert_eq(gc_functionalize(ar, g, order, &o, &f, &err), 0, "%s: %s",
                 files[i], err.msg);
    functional += f.functional;
    if (!f.functional)
      cr_log_info("%s: eager form: %s", files[i], f.eager_reason);
    gc_compiled out = {0};
    cr_assert_eq(gc_compile(ar, g, &key, &o, NULL, NULL, &out, &err), 0,
                 "%s: %s", files[i], err.msg);
    free(out.artifact);
    free(buf);
    gc_arena_free(ar);
  }
  /* Only shared_storage (overlapping inputs, one written) needs eager form. */
  cr_assert_eq(functional, n - 1, "%d of %d functional", functional, n);
  tu_free_list(files, n);
}

T(transpose_inplace_replays_as_transpose_int) {
  gc_functional f =
      run("x: f32[2, 3]\n"
          "a = aten::transpose_(x, 0, 1): f32[3, 2] strides [1, 3]\n"
          "y = aten::add.Tensor(x, 1): f32[3, 2]\n"
          "return y\n");
  cr_assert(f.functional, "%s", f.eager_reason ? f.eager_reason : "");
  OPS_ARE(f, "aten::transpose.int aten::add.Tensor");
  cr_assert(f.inputs[0].mutates_metadata);
}

T(read_after_hidden_mutation_in_training_keeps_eager_form) {
  const char *spec = "x: f32[4] grad\n"
                     "d = aten::detach(x): f32[4]\n"
                     "w = aten::mul_.Tensor(d, 2): f32[4]\n"
                     "y = aten::add.Tensor(x, 1): f32[4] grad\n"
                     "return y\n";
  gc_functional tr = run_opts(spec, true, true);
  cr_assert(!tr.functional);
  cr_assert(
      strstr(tr.eager_reason, "read after a mutation hidden from autograd"),
      "%s", tr.eager_reason);
  cr_assert(tr.inputs[0].mutates_data);
  cr_assert_eq(tr.inputs[0].type, GC_MUT_IN_GRAPH);
  /* Without autograd the functional form is exact. */
  cr_assert(run(spec).functional);
}

T(eager_form_reports_metadata_and_resizing_writes) {
  gc_functional f = run("x: f32[2, 3]\no: f32[5]\n"
                        "a = aten::t_(x): f32[3, 2] strides [1, 3]\n"
                        "s = aten::sum.IntList_out(a, [0], out=o): f32[2]\n"
                        "return s\n");
  cr_assert(!f.functional);
  cr_assert(strstr(f.eager_reason, "resizes"), "%s", f.eager_reason);
  cr_assert(f.inputs[0].mutates_metadata && !f.inputs[0].mutates_data);
  cr_assert(f.inputs[1].mutates_data);
  cr_assert_eq(f.inputs[0].type, GC_MUT_IN_GRAPH);
  cr_assert_eq(f.inputs[1].type, GC_MUT_IN_GRAPH);
}

T(variant_gets_defaults_the_original_left_out) {
  gc_functional f = run("x: f32[4]\n"
                        "e = aten::empty_like(x): f32[4]\n"
                        "b = aten::bernoulli_.float(e): f32[4]\n"
                        "return b\n");
  cr_assert(f.functional);
  const gc_node *bern = NULL;
  for (int i = 0; i < f.graph->nnodes; i++)
    if (strstr(f.graph->nodes[i].target, "bernoulli"))
      bern = &f.graph->nodes[i];
  cr_assert_not_null(bern);
  cr_assert_str_eq(bern->target, "aten::bernoulli.p");
  bool has_p = false;
  for (int i = 0; i < bern->nargs; i++)
    if (!strcmp(bern->args[i].name, "p")) {
      has_p = true;
      cr_assert_eq(bern->args[i].arg.kind, GC_ARG_FLOAT);
      cr_assert_float_eq(bern->args[i].arg.f, 0.5, 1e-12);
    }
  cr_assert(has_p, "bernoulli.p without p");
}

/* x viewed n times, each view_as(x, previous view), then written: reading
 * the last view replays view_as, which reads its `other` argument, a stale
 * view in turn. */
static const char *view_chain_spec(int n) {
  gc_buf b = GC_BUF_INIT;
  gc_buf_puts(&b, "x: f32[4]\n");
  for (int i = 0; i < n; i++) {
    if (i)
      gc_buf_printf(&b, "v%d = aten::view_as(x, v%d): f32[4]\n", i, i - 1);
    else
      gc_buf_puts(&b, "v0 = aten::view_as(x, x): f32[4]\n");
  }
  gc_buf_printf(&b,
                "w = aten::add_.Tensor(x, 1): f32[4]\n"
                "y = aten::mul.Tensor(v%d, 2): f32[4]\n"
                "return y\n",
                n - 1);
  const char *s = gc_arena_strdup(a, b.data);
  gc_buf_free(&b);
  return s;
}

/* Each such link was one more level of recursion (read_obj -> replay ->
 * map_arg -> read_obj): 100,000 of them crashed a worker (issue 9's
 * audit; tests/python/test_hostile_input.py sends that graph). Past 64 the
 * graph keeps its eager form instead. */
T(views_of_stale_views_are_bounded) {
  gc_functional f = run(view_chain_spec(20));
  cr_assert(f.functional, "%s", f.eager_reason ? f.eager_reason : "");
  f = run(view_chain_spec(200));
  cr_assert(!f.functional);
  cr_assert(strstr(f.eager_reason, "views of views more than 64 levels deep"),
            "%s", f.eager_reason);
}
