/*
 * epilogue.c: the graph's write-backs into its inputs (aten::copy_), lowered
 * last and in two phases, so that no write-back reads an input another one
 * already overwrote.
 */
#include "compiler/lower/ctx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ir/half.h"
#include "compiler/opfacts.h"
#include "compiler/ops.h"
#include "compiler/schema.h"
#include "compiler/torchops.h"

bool L__is_input_writeback(const gc_node *n) {
  if (strcmp(n->op->schema->qualified, "aten::copy_") != 0 || n->nargs < 2)
    return false;
  const gc_arg *dst = &n->args[0].arg;
  return dst->kind == GC_ARG_TENSOR && dst->v && dst->v->def_node == -1;
}

/* Does expression e read any of the buffers in `bufs` (n of them) other
 * than at exactly `same` of buffer `own`? */
typedef struct others {
  ir_buf *const *bufs;
  int n;
  const ir_buf *own;
  const gc_sym *same;
} others;

static int read_other(const ir_expr *e, void *ctx) {
  const others *o = ctx;
  if (ir_reads_buffer(e))
    for (int i = 0; i < o->n; i++)
      if (e->load.buf == o->bufs[i] &&
          (e->op == IR_GATHER ||
           !(e->load.buf == o->own && e->load.index == o->same)))
        return 1;
  return 0;
}

static bool reads_other(const ir_expr *e, ir_buf *const *bufs, int n,
                        const ir_buf *own, const gc_sym *same) {
  others o = {bufs, n, own, same};
  return ir_expr_walk(e, read_other, &o) != 0; /* too deep counts as yes */
}

static ir_buf *input_buf(lower_ctx *L, const gc_value *v) {
  const ir_tensor *t = L->val[v->id];
  return t && t->kind == IR_T_BUF ? t->buf : NULL;
}

int L__lower_epilogue(lower_ctx *L, const gc_node **wb, int nwb) {
  ir_graph *ir = L->ir;
  /* buffers written back, and every input sharing storage with one */
  ir_buf **written =
      gc_arena_calloc(ir->a, (size_t)L->g->ninputs + 1, sizeof *written);
  if (!written)
    return GC_ENOMEM;
  int nw = 0;
  for (int i = 0; i < L->g->ninputs; i++) {
    const gc_input *in = &L->g->inputs[i];
    if (in->arg.kind != GC_ARG_TENSOR || !in->arg.v)
      continue;
    bool hit = false;
    for (int k = 0; k < nwb && !hit; k++) {
      const gc_value *dv = wb[k]->args[0].arg.v;
      if (dv == in->arg.v)
        hit = true;
      for (int j = 0; j < L->g->ninputs && !hit; j++)
        if (L->g->inputs[j].arg.v == dv && in->storage_group >= 0 &&
            L->g->inputs[j].storage_group == in->storage_group)
          hit = true;
    }
    if (hit && input_buf(L, in->arg.v))
      written[nw++] = input_buf(L, in->arg.v);
  }
  /* phase 1: every source that reads a written input (other than its own
   * destination, element by element) is computed first */
  ir_expr **body = gc_arena_calloc(ir->a, (size_t)nwb + 1, sizeof *body);
  gc_sym ***vars = gc_arena_calloc(ir->a, (size_t)nwb + 1, sizeof *vars);
  if (!body || !vars)
    return GC_ENOMEM;
  for (int k = 0; k < nwb; k++) {
    L->cur = wb[k];
    const gc_value *dv = wb[k]->args[0].arg.v;
    ir_buf *dst = input_buf(L, dv);
    ir_tensor *src = L_tensor(L, wb[k], "src");
    if (!dst || !src || dst->kind != IR_BUF_INPUT)
      return GC_EUNSUPPORTED;
    vars[k] = L_svars(L, dst->rank, dst->ssizes);
    if (!vars[k])
      return GC_ENOMEM;
    ir_expr *e = L_load_bcast(L, src, dst->rank, vars[k]);
    gc_sym *at = gc_sym_const(&ir->sym, 0);
    for (int i = 0; i < dst->rank; i++)
      at = gc_sym_add(&ir->sym, at,
                      gc_sym_mul(&ir->sym, vars[k][i], dst->sstrides[i]));
    if (!e || reads_other(e, written, nw, dst, at)) {
      ir_buf *b = L__materialize(L, src, IR_BUF_ARENA, NULL, &dv->meta);
      if (!b)
        return GC_ENOMEM;
      ir_tensor *bt = ir_tensor_of_buf(ir, b);
      e = L_load_bcast(L, bt, dst->rank, vars[k]);
    }
    body[k] = ir_cast(ir, e, dst->dtype);
    if (!body[k])
      return GC_ENOMEM;
  }
  /* phase 2: the writes */
  for (int k = 0; k < nwb; k++) {
    const gc_value *dv = wb[k]->args[0].arg.v;
    ir_buf *dst = input_buf(L, dv);
    ir_node *n = ir_node_new(ir, IR_POINTWISE);
    if (!n)
      return GC_ENOMEM;
    n->out = dst;
    n->rank = dst->rank;
    n->ranges = dst->sizes;
    n->sranges = dst->ssizes;
    n->vars = vars[k];
    n->body = body[k];
    n->what = "copy_ into input";
    n->gnodes = gc_arena_calloc(ir->a, 1, sizeof *n->gnodes);
    if (n->gnodes) {
      n->gnodes[0] = wb[k]->id;
      n->ngnodes = 1;
    }
    dst->def = n;
    dst->mutated = true;
    if (ir_node_append(ir, n) != 0)
      return GC_ENOMEM;
    if (wb[k]->noutputs && wb[k]->outputs[0].kind == GC_ARG_TENSOR)
      L->val[wb[k]->outputs[0].v->id] = ir_tensor_of_buf(ir, dst);
    if (L->stats)
      L->stats->native++;
  }
  return 0;
}
