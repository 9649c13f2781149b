/*
 * test_sched.c: the scheduler (compiler/sched/schedule.c) on loop IR built
 * by hand (tests/lib/irbuild.h): which nodes share a kernel and a stage,
 * the order of kernels, which buffers stay local, how contiguous loops
 * merge, and what ends a kernel (a call, a write to an input, a read of a
 * neighbour's element, the node limit).
 */
#include <criterion/criterion.h>
#include <string.h>

#include "compiler/arena.h"
#include "compiler/ir/ir.h"
#include "compiler/sched/sched.h"
#include "tests/lib/irbuild.h"

static ir_graph *const ir = &ib_ir;
static sc_schedule S;

#define T(name) Test(sched, name, .init = ib_setup, .fini = ib_teardown)

static const gc_dtype F32 = GC_DTYPE_FLOAT32;
static const int64_t S48[2] = {4, 8};

static void schedule(void) {
  ib_schedule(ir, &S);
}

static sc_kernel *kernel_of(const ir_node *n) {
  return S.place[n->id].kernel;
}

/* f(b) at n's element: b's load, through exp */
static ir_node *exp_of(ir_buf *b, int rank, const int64_t *sizes) {
  ir_node *n = ib_pointwise(ir, F32, rank, sizes);
  n->body = ir_op1(ir, IR_EXP, F32, ib_read(ir, n, b));
  ib_append(ir, n);
  return n;
}

T(a_pointwise_chain_is_one_flat_loop_with_a_local_intermediate) {
  ir_buf *x = ib_input(ir, 0, F32, 2, S48);
  ir_node *p = exp_of(x, 2, S48);
  ir_node *q = exp_of(p->out, 2, S48);
  q->out->kind = IR_BUF_OUTPUT;
  schedule();
  cr_assert_eq(S.nkernels, 1);
  sc_kernel *k = S.kernels[0];
  cr_assert_eq(kernel_of(p), k);
  cr_assert_eq(kernel_of(q), k);
  cr_assert_null(k->call);
  cr_assert_eq(k->nstages, 1);
  cr_assert_eq(k->stages[0].nnodes, 2);
  /* a contiguous [4, 8] loop merges into one loop of 32 elements */
  cr_assert_eq(k->ndims, 0);
  cr_assert_eq(k->stages[0].ndims, 1);
  cr_assert_eq(k->stages[0].dims[0].size, 32);
  cr_assert_eq(k->work, 64, "two nodes times 32 elements");
  /* p's result is read only at the element just computed */
  cr_assert(S.local[p->out->id]);
  cr_assert_not(S.local[q->out->id], "an output is written to memory");
  cr_assert_eq(S.nlocal, 1);
  cr_assert_str_eq(k->name, "k0");
}

T(contiguous_outer_dims_merge_into_one_loop) {
  const int64_t sz[3] = {2, 4, 8};
  ir_node *p = exp_of(ib_input(ir, 0, F32, 3, sz), 3, sz);
  p->out->kind = IR_BUF_OUTPUT;
  schedule();
  cr_assert_eq(S.nkernels, 1);
  sc_kernel *k = S.kernels[0];
  /* outer [2, 4] merge into [8], which then merges with the inner 8 */
  cr_assert_eq(k->ndims, 0);
  cr_assert_eq(k->stages[0].ndims, 1);
  cr_assert_eq(k->stages[0].dims[0].size, 64);
}

T(a_transposed_output_keeps_its_dims_apart) {
  const int64_t sz[2] = {4, 8};
  ir_buf *x = ib_input(ir, 0, F32, 2, sz);
  /* an output written transposed: [4, 8] with strides [1, 4] */
  ir_buf *o = ir_buf_new(ir, IR_BUF_OUTPUT, F32, 2, sz, (int64_t[]){1, 4});
  ir_node *p = ib_pointwise_into(ir, o);
  p->body = ir_op1(ir, IR_EXP, F32, ib_read(ir, p, x));
  ib_append(ir, p);
  schedule();
  sc_kernel *k = S.kernels[0];
  /* loops by decreasing output stride: dim 1 (stride 4) outside, dim 0
   * (stride 1) innermost; x's index then allows no merge */
  cr_assert_eq(k->ndims + k->stages[0].ndims, 2);
  cr_assert_eq(k->dims[0].size, 8);
  cr_assert_eq(k->stages[0].dims[0].size, 4);
}

T(softmax_is_one_kernel_of_three_stages_over_the_rows) {
  ir_buf *x = ib_input(ir, 0, F32, 2, S48);
  ir_node *e = exp_of(x, 2, S48);
  ir_node *r = ib_reduction(ir, IR_RED_SUM, F32, 1, S48, 1, S48 + 1);
  r->body = ib_read(ir, r, e->out);
  ib_append(ir, r);
  ir_node *d = ib_pointwise(ir, F32, 2, S48);
  d->body = ir_op2(ir, IR_DIV, F32, ib_read(ir, d, e->out),
                   ir_load(ir, r->out, d->vars[0]));
  ib_append(ir, d);
  schedule();
  cr_assert_eq(S.nkernels, 1);
  sc_kernel *k = S.kernels[0];
  cr_assert_eq(k->ndims, 1, "rows outside");
  cr_assert_eq(k->dims[0].size, 4);
  cr_assert_eq(k->nstages, 3);
  cr_assert_not(k->stages[0].reduction);
  cr_assert(k->stages[1].reduction);
  cr_assert_not(k->stages[2].reduction);
  for (int s = 0; s < 3; s++) {
    cr_assert_eq(k->stages[s].ndims, 1);
    cr_assert_eq(k->stages[s].dims[0].size, 8);
  }
  cr_assert(sc_same_inner(&k->stages[0], &k->stages[2]));
  cr_assert_eq(S.place[e->id].stage, 0);
  cr_assert_eq(S.place[r->id].stage, 1);
  cr_assert_eq(S.place[d->id].stage, 2);
  /* the row sum is read at the current row only: local; exp's result is
   * read again by a later stage: in memory */
  cr_assert(S.local[r->out->id]);
  cr_assert_not(S.local[e->out->id]);
}

T(a_call_ends_the_kernel_and_runs_alone) {
  ir_buf *x = ib_input(ir, 0, F32, 2, S48);
  ir_node *p = exp_of(x, 2, S48);
  ir_node *c = ib_call(ir, p->out, F32, 2, S48);
  ir_node *q = exp_of(c->results[0], 2, S48);
  q->out->kind = IR_BUF_OUTPUT;
  schedule();
  cr_assert_eq(S.nkernels, 3);
  cr_assert_eq(kernel_of(p), S.kernels[0]);
  cr_assert_eq(kernel_of(c), S.kernels[1]);
  cr_assert_eq(kernel_of(q), S.kernels[2]);
  cr_assert(sc_aten_call(S.kernels[1]));
  cr_assert_eq(S.kernels[1]->call, c);
  cr_assert_not(sc_aten_call(S.kernels[0]));
  /* the call reads p's result from memory */
  cr_assert_not(S.local[p->out->id]);
  cr_assert_eq(S.nlocal, 0);
}

T(a_read_of_another_element_of_the_kernels_result_starts_a_kernel) {
  const int64_t sq[2] = {8, 8};
  ir_buf *x = ib_input(ir, 0, F32, 2, sq);
  ir_node *p = exp_of(x, 2, sq);
  ir_node *t = ib_pointwise(ir, F32, 2, sq); /* p transposed */
  t->body = ir_load(
      ir, p->out,
      gc_sym_add(&ir->sym, gc_sym_scale(&ir->sym, t->vars[1], 8), t->vars[0]));
  ib_append(ir, t);
  schedule();
  cr_assert_eq(S.nkernels, 2);
  cr_assert_neq(kernel_of(p), kernel_of(t));
  cr_assert_not(S.local[p->out->id]);
}

T(a_node_over_other_rows_starts_a_kernel) {
  ir_buf *x = ib_input(ir, 0, F32, 2, S48);
  ir_node *p = exp_of(x, 2, S48);
  const int64_t s84[2] = {8, 4};
  ir_node *q = exp_of(ib_input(ir, 1, F32, 2, s84), 2, s84);
  ir_node *r = exp_of(ib_input(ir, 2, F32, 2, S48), 2, S48);
  schedule();
  /* q's rows (8) are not p's (4): its own kernel; r's rows are p's, but
   * the open kernel is q's: kernels are never reopened */
  cr_assert_eq(S.nkernels, 3);
  cr_assert_neq(kernel_of(p), kernel_of(q));
  cr_assert_neq(kernel_of(q), kernel_of(r));
}

T(a_write_to_an_input_runs_alone) {
  ir_buf *x = ib_input(ir, 0, F32, 2, S48);
  ir_node *p = exp_of(x, 2, S48);
  /* x.copy_(p): an input written back */
  ir_node *w = ib_pointwise_into(ir, x);
  w->body = ib_read(ir, w, p->out);
  ib_append(ir, w);
  x->mutated = true;
  ir_node *q = exp_of(p->out, 2, S48);
  schedule();
  cr_assert_eq(S.nkernels, 3);
  cr_assert_eq(kernel_of(w)->nnodes, 1);
  cr_assert_neq(kernel_of(q), kernel_of(w));
}

T(a_kernel_holds_at_most_48_nodes) {
  ir_buf *b = ib_input(ir, 0, F32, 2, S48);
  ir_node *n[49];
  for (int i = 0; i < 49; i++) {
    n[i] = exp_of(b, 2, S48);
    b = n[i]->out;
  }
  schedule();
  cr_assert_eq(S.nkernels, 2);
  cr_assert_eq(S.kernels[0]->nnodes, 48);
  cr_assert_eq(kernel_of(n[48]), S.kernels[1]);
}

T(kernels_are_named_after_what_their_nodes_compute) {
  ir_buf *x = ib_input(ir, 0, F32, 2, S48);
  ir_node *p = exp_of(x, 2, S48);
  ir_node *q = exp_of(p->out, 2, S48);
  const char *what[2] = {"aten::exp.default", "aten::relu"};
  int g0 = 0, g1 = 1;
  ir->gnode_what = what;
  p->gnodes = &g0;
  p->ngnodes = 1;
  q->gnodes = &g1;
  q->ngnodes = 1;
  schedule();
  cr_assert_str_eq(S.kernels[0]->name, "k0_exp_relu");
}
