/*
 * outputs.c: the program's outputs: OUTPUT buffers with eager's exact
 * strides, aliases between outputs kept, and the values whose layout must
 * stay eager's.
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

/* ---- program outputs ---- */

/* Records where program output i lives: `v` (copied). */
static int set_output(lower_ctx *L, int i, const ir_view *v) {
  ir_view *c = gc_arena_alloc(L->ir->a, sizeof *c);
  if (!c)
    return GC_ENOMEM;
  *c = *v;
  L->ir->outputs[i] = c;
  return 0;
}

/* Whether graph value v is, in eager, a view of `target` (NULL: of a graph
 * input): following the operators whose return aliases an argument (view
 * operators) from v back, target (an input) is reached before a fresh
 * tensor. The functional graph keeps no producer links, so they are
 * searched (only for outputs that land on another value's buffer). True
 * when unsure. */
static bool aliases(const lower_ctx *L, const gc_value *v,
                    const gc_value *target) {
  const gc_graph *g = L->g;
  for (int depth = 0; v && depth <= g->nnodes; depth++) {
    if (target && v == target)
      return true;
    const gc_node *n = NULL;
    int slot = -1;
    for (int k = 0; k < g->nnodes && !n; k++)
      for (int j = 0; j < g->nodes[k].noutputs && !n; j++) {
        const gc_arg *o = &g->nodes[k].outputs[j];
        bool hit = o->kind == GC_ARG_TENSOR && o->v == v;
        for (int e = 0; o->kind == GC_ARG_TENSORS && e < o->n && !hit; e++)
          hit = o->vals[e] == v;
        if (hit) {
          n = &g->nodes[k];
          slot = j;
        }
      }
    if (!n)
      return !target; /* an input (or a constant) */
    if (!n->op || !n->op->schema)
      return true;
    int a = gc_schema_return_alias(n->op->schema, slot);
    if (a < 0)
      return false; /* a fresh tensor */
    const gc_value *next = NULL;
    for (int k = 0; k < n->nargs; k++)
      if (n->args[k].param == a && n->args[k].arg.kind == GC_ARG_TENSOR)
        next = n->args[k].arg.v;
    if (!next)
      return true;
    v = next;
  }
  return true;
}

/* Is v laid out otherwise than eager's strides st, in a channels-last
 * program (an intermediate lowering chose channels-last: the output is
 * copied in eager's layout)? */
static bool restrided(const ir_view *v, const int64_t *st) {
  for (int i = 0; i < v->rank; i++)
    if (v->sizes[i] > 1 && v->strides[i] != st[i])
      return true;
  return false;
}

/* The same with symbolic strides (sizes that may be 1 count: the layout
 * must be eager's at every size). */
static bool srestrided(const ir_view *v, gc_sym *const *st) {
  for (int i = 0; i < v->rank; i++)
    if (!gc_sym_is_const(v->ssizes[i], 1) &&
        !gc_sym_is_const(v->ssizes[i], 0) && v->sstrides[i] != st[i])
      return true;
  return false;
}

static bool relaid(const lower_ctx *L, const ir_view *v, const int64_t *st) {
  return L->channels_last && restrided(v, st);
}

/* Does output value o stay v, a view of a buffer (static strides st, else
 * symbolic sst)? A view of an input only where eager's output aliases an
 * input; of another buffer only where eager's output views that buffer's
 * value, or, of a buffer of no known value, with eager's strides (and,
 * static, eager's layout). */
static bool stays_view(const lower_ctx *L, const gc_value *o, const ir_view *v,
                       bool sym, const int64_t *st, gc_sym *const *sst) {
  if (v->buf->kind == IR_BUF_INPUT)
    return aliases(L, o, NULL);
  if (v->buf->value ? !aliases(L, o, v->buf->value)
      : sym         ? srestrided(v, sst)
                    : restrided(v, st))
    return false;
  return sym || !relaid(L, v, st);
}

/* Program outputs. An output that eager returns as a view of something
 * (an input, another output, an intermediate: chunks of one tensor share
 * its storage) stays a view here: the buffer it views becomes a per-call
 * OUTPUT buffer (never the reused arena) and the output a strided view of
 * it, so storage sharing and offsets are eager's. Other outputs are
 * computed straight into an OUTPUT buffer with eager's strides. */
int L__lower_outputs(lower_ctx *L) {
  ir_graph *ir = L->ir;
  const gc_graph *g = L->g;
  ir->noutputs = g->noutputs;
  ir->outputs =
      gc_arena_calloc(ir->a, (size_t)g->noutputs + 1, sizeof *ir->outputs);
  if (!ir->outputs)
    return GC_ENOMEM;
  for (int i = 0; i < g->noutputs; i++) {
    const gc_arg *o = &g->outputs[i];
    if (o->kind != GC_ARG_TENSOR || !o->v || o->v->kind != GC_VALUE_TENSOR)
      continue;
    ir_tensor *t = L->val[o->v->id];
    if (!t)
      return gc_errorf(L->err, GC_EINTERNAL, "lower: output %d has no value",
                       i);
    int64_t st[IR_MAX_RANK];
    gc_sym *sst[IR_MAX_RANK];
    bool sym = ir->nsyms > 0;
    if (sym ? !L_sym_strides(L, &o->v->meta, sst)
            : !L__static_strides(&o->v->meta, st))
      return GC_EUNSUPPORTED;
    /* a view of an unrealized computation: give the computation a buffer */
    ir_tensor *root = t->kind == IR_T_VIEW ? L__view_root(t) : NULL;
    if (root && root->value) {
      ir_buf *b = L_realize(L, root, &root->value->meta);
      if (!b)
        return GC_ENOMEM;
    }
    ir_view v;
    /* An unrealized computation is a fresh tensor in eager even when its
     * body is a plain load (clone, contiguous, x * 1, where(c, x, x), a cat
     * of one input): it gets its own buffer, else the output would alias
     * what it copies. Likewise a view of such a computation, which
     * lowering turns into a view of the input it loads (x.clone().t()),
     * unless the output is a view of that input in eager too. */
    bool computed = (t->kind == IR_T_LOOP && !t->realized) ||
                    (t->kind == IR_T_VIEW && L__view_root(t));
    /* A view of another value's buffer stays one only where eager's output
     * views that value too: a view of a plain-load computation (a 1x1 max
     * pool with stride 2 of an output, reshaped) lands on the buffer the
     * computation loads from (graphgen seed 991863). */
    /* A buffer of no known value (a reduction's) is viewed only with
     * eager's strides: stack([m, m]) of a max m lowers to an expand of m's
     * buffer, strides 0 where eager's are 1 (graphgen seed 2402953). */
    bool strided = !computed && ir_tensor_as_strided(ir, t, &v);
    if (strided && sym)
      ir_view_sym(ir, &v);
    if (strided && stays_view(L, o->v, &v, sym, st, sst)) {
      if (v.buf->kind == IR_BUF_ARENA) {
        /* the call's result lives in the buffer it views (fresh per call) */
        v.buf->kind = IR_BUF_OUTPUT;
        v.buf->index = i;
      }
      if (set_output(L, i, &v))
        return GC_ENOMEM;
      continue;
    }
    ir_buf *b = sym ? L__smaterialize(L, t, IR_BUF_OUTPUT, sst, NULL)
                    : L__materialize(L, t, IR_BUF_OUTPUT, st, NULL);
    if (!b)
      return GC_ENOMEM;
    b->index = i;
    b->value = o->v;
    if (t->kind == IR_T_LOOP && !t->realized) {
      t->realized = b;
      L__log_realized(L, t);
    }
    ir_view whole = {b, b->rank,   b->sizes,    b->strides,
                     0, b->ssizes, b->sstrides, gc_sym_const(&ir->sym, 0)};
    if (set_output(L, i, &whole))
      return GC_ENOMEM;
  }
  return 0;
}

/* Marks the program outputs and, following the operators whose return
 * aliases an argument, what each output views: they keep eager's layout,
 * so outputs that share storage in eager still do. */
void L__mark_output_bases(lower_ctx *L) {
  const gc_graph *g = L->g;
  const gc_value **def_arg =
      gc_arena_calloc(L->ir->a, (size_t)g->nvalues + 1, sizeof *def_arg);
  if (!def_arg)
    return;
  for (int k = 0; k < g->nnodes; k++) { /* the argument each view views */
    const gc_node *n = &g->nodes[k];
    for (int j = 0; j < n->noutputs && n->op && n->op->schema; j++) {
      const gc_arg *o = &n->outputs[j];
      int a = gc_schema_return_alias(n->op->schema, j);
      if (o->kind != GC_ARG_TENSOR || !o->v || a < 0)
        continue;
      for (int i = 0; i < n->nargs; i++)
        if (n->args[i].param == a && n->args[i].arg.kind == GC_ARG_TENSOR)
          def_arg[o->v->id] = n->args[i].arg.v;
    }
  }
  for (int i = 0; i < g->noutputs; i++) {
    const gc_value *v =
        g->outputs[i].kind == GC_ARG_TENSOR ? g->outputs[i].v : NULL;
    for (int depth = 0; v && !L->eager_layout[v->id] && depth <= g->nnodes;
         depth++) {
      L->eager_layout[v->id] = true;
      v = def_arg[v->id];
    }
  }
}
