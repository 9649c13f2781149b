/*
 * irbuild.c: small loop-IR graphs built by hand (irbuild.h).
 */
#include "tests/lib/irbuild.h"

#include <criterion/criterion.h>
#include <stdio.h>

#include "compiler/sched/sched.h"

ir_graph ib_ir;

void ib_setup(void) {
  gc_arena *a = gc_arena_new(0);
  cr_assert_not_null(a);
  cr_assert_eq(ir_graph_init(&ib_ir, a, NULL), 0);
}

void ib_teardown(void) {
  gc_arena_free(ib_ir.a);
}

static void *need(ir_graph *ir, void *p) {
  cr_assert(p && !ir->oom && !ir->sym.oom, "irbuild: out of memory");
  return p;
}

ir_buf *ib_input(ir_graph *ir, int index, gc_dtype dt, int rank,
                 const int64_t *sizes) {
  ir_buf *b = need(ir, ir_buf_new(ir, IR_BUF_INPUT, dt, rank, sizes, NULL));
  b->index = index;
  return b;
}

static gc_sym **vars(ir_graph *ir, int rank, const int64_t *sizes) {
  gc_sym **v = need(ir, gc_arena_calloc(ir->a, (size_t)rank + 1, sizeof *v));
  for (int i = 0; i < rank; i++) {
    char name[24];
    snprintf(name, sizeof name, "i%d", ir->sym.nvars);
    v[i] = need(
        ir, gc_sym_newvar(&ir->sym, name, 0, sizes[i] > 0 ? sizes[i] - 1 : 0));
  }
  return v;
}

ir_node *ib_pointwise(ir_graph *ir, gc_dtype dt, int rank,
                      const int64_t *sizes) {
  return ib_pointwise_into(
      ir, need(ir, ir_buf_new(ir, IR_BUF_ARENA, dt, rank, sizes, NULL)));
}

ir_node *ib_pointwise_into(ir_graph *ir, ir_buf *out) {
  ir_node *n = need(ir, ir_node_new(ir, IR_POINTWISE));
  n->out = out;
  n->rank = out->rank;
  n->ranges = out->sizes;
  n->sranges = out->ssizes;
  n->vars = vars(ir, out->rank, out->sizes);
  n->what = "pointwise";
  return n;
}

ir_node *ib_reduction(ir_graph *ir, ir_reduction red, gc_dtype dt, int rank,
                      const int64_t *sizes, int rrank, const int64_t *rsizes) {
  ir_node *n = ib_pointwise(ir, dt, rank, sizes);
  n->kind = IR_REDUCTION;
  n->what = ir_reduction_name(red);
  n->red = red;
  n->rrank = rrank;
  n->rranges = need(ir, gc_arena_calloc(ir->a, (size_t)rrank + 1, 8));
  for (int i = 0; i < rrank; i++)
    n->rranges[i] = rsizes[i];
  n->srranges = need(ir, ir_syms_of(ir, rrank, n->rranges));
  n->rvars = vars(ir, rrank, rsizes);
  return n;
}

ir_node *ib_call(ir_graph *ir, ir_buf *in, gc_dtype dt, int rank,
                 const int64_t *sizes) {
  ir_node *n = need(ir, ir_node_new(ir, IR_FALLBACK));
  ir_buf *r = need(ir, ir_buf_new(ir, IR_BUF_RESULT, dt, rank, sizes, NULL));
  n->args = need(ir, gc_arena_calloc(ir->a, 1, sizeof *n->args));
  n->nargs = 1;
  n->args[0].name = "self";
  n->args[0].arg.kind = GC_ARG_TENSOR;
  n->args[0].bufs = need(ir, gc_arena_calloc(ir->a, 1, sizeof(ir_buf *)));
  n->args[0].bufs[0] = in;
  n->results = need(ir, gc_arena_calloc(ir->a, 1, sizeof(ir_buf *)));
  n->results[0] = r;
  n->nresults = 1;
  n->what = "call";
  r->def = n;
  cr_assert_eq(ir_node_append(ir, n), 0);
  return n;
}

gc_sym *ib_at(ir_graph *ir, const ir_node *n, const ir_buf *b) {
  gc_symctx *s = &ir->sym;
  gc_sym *e = need(ir, gc_sym_const(s, 0));
  cr_assert(b->rank == n->rank || b->rank == n->rank + n->rrank,
            "ib_at: buf%d's rank %d fits neither %d nor %d", b->id, b->rank,
            n->rank, n->rank + n->rrank);
  for (int i = 0; i < b->rank; i++) {
    gc_sym *v = i < n->rank ? n->vars[i] : n->rvars[i - n->rank];
    e = need(ir, gc_sym_add(s, e, gc_sym_scale(s, v, b->strides[i])));
  }
  return e;
}

ir_expr *ib_read(ir_graph *ir, const ir_node *n, ir_buf *b) {
  return need(ir, ir_load(ir, b, ib_at(ir, n, b)));
}

ir_buf *ib_append(ir_graph *ir, ir_node *n) {
  ir_buf *outs[3] = {n->out, n->out2, n->out3};
  for (int i = 0; i < 3; i++)
    if (outs[i])
      outs[i]->def = n;
  cr_assert_eq(ir_node_append(ir, n), 0);
  return n->out;
}

void ib_schedule(ir_graph *ir, sc_schedule *s) {
  gc_error err;
  gc_error_clear(&err);
  cr_assert_eq(ir_verify(ir, &err), 0, "the test's IR: %s", err.msg);
  cr_assert_eq(sc_schedule_build(ir, s, &err), 0, "%s", err.msg);
  int next = 0;
  for (int k = 0; k < s->nkernels; k++) {
    cr_assert_eq(s->kernels[k]->id, k);
    for (int i = 0; i < s->kernels[k]->nnodes; i++)
      cr_assert_eq(s->kernels[k]->nodes[i]->id, next++, "kernel %d node %d", k,
                   i);
  }
  cr_assert_eq(next, ir->nnodes);
}
