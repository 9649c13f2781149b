/*
 * pointwise.c: pointwise stages of a loop kernel: random draws filled a
 * block at a time, loads hoisted out of the inner loop, the stage itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/codegen/cexpr.h"
#include "compiler/codegen/cgen_internal.h"

/* The search for random draws or loads to take out of the inner loop. */
typedef struct var_find {
  cg *g;
  int var; /* the inner variable */
} var_find;

/* Adds e to set (*n entries, room for max) unless it is there. */
static void add_once(const ir_expr **set, int *n, int max, const ir_expr *e) {
  for (int i = 0; i < *n; i++)
    if (set[i] == e)
      return;
  if (*n < max)
    set[(*n)++] = e;
}

static int uses_var(const ir_expr *e, void *ctx) {
  int var = *(const int *)ctx;
  if ((e->op == IR_LOAD || e->op == IR_GATHER) &&
      gc_sym_uses(e->load.index, var))
    return 1;
  return e->op == IR_INDEX && gc_sym_uses(e->index, var);
}

static int find_rand(const ir_expr *e, void *ctx) {
  var_find *f = ctx;
  cg *g = f->g;
  int64_t coef;
  if (e->op != IR_RAND || e->args[1]->op != IR_INDEX ||
      !gc_sym_linear_in(e->args[1]->index, f->var, &coef) || coef != 1)
    return 0;
  int var = f->var;
  if (ir_expr_walk(e->args[0], uses_var, &var) != 0)
    return 0;
  add_once(g->rand, &g->nrand, CG_MAX_RAND, e);
  return 0;
}

static void find_rands(cg *g, const sc_stage *st) {
  g->nrand = 0;
  if (st->ndims == 0 || st->reduction)
    return;
  const gc_sym *v = st->dims[st->ndims - 1].var;
  if (v->kind != GC_SYM_VAR)
    return;
  var_find f = {g, v->var};
  for (int i = 0; i < st->nnodes; i++)
    ir_expr_walk(g->s->place[st->nodes[i]->id].body, find_rand, &f);
}

/* At the top of a block (the inner variable v from v_s to v_t): each
 * random draw's values for the block, into gc_r<k>. */
void cg__fill_rands(cg *g, const sc_stage *st, int ind) {
  const char *v = cg__sym(g, st->dims[st->ndims - 1].var);
  for (int k = 0; k < g->nrand; k++) {
    const ir_expr *e = g->rand[k];
    cg__line(g, ind, "float gc_r%d[%d];", k, CG_STREAM_BLOCK);
    cg__line(g, ind, "{");
    cg__line(g, ind + 2, "const int64_t %s = %s_s;", v, v);
    cx_reset(&g->x);
    g->x.indent = ind + 2;
    const char *key = cx_emit(&g->x, e->args[0]);
    const char *ctr = cx_emit(&g->x, e->args[1]);
    cg__line(g, ind + 2,
             "gc_rand_fill((uint64_t)%s, (uint64_t)%s, %s_t - %s_s, gc_r%d);",
             key, ctr, v, v, k);
    cg__line(g, ind, "}");
  }
}

/* In the block's loop body: each draw is its block's element. */
static void bind_rands(cg *g, const sc_stage *st) {
  const char *v = cg__sym(g, st->dims[st->ndims - 1].var);
  for (int k = 0; k < g->nrand; k++)
    cx_bind(&g->x, g->rand[k],
            gc_arena_printf(cg__arena(g), "gc_r%d[%s - %s_s]", k, v, v));
}

/* The inner loop of a stage whose stores stream: blocks of
 * CG_STREAM_BLOCK elements computed into local arrays (opened here; the
 * loop body follows at ind + 4), each block starting with its share of the
 * kernel's prefetches (prefetch.c; a last stage that prefetches is blocked
 * for them alone when it streams nothing) ... */

/* ---- loads the inner loop does not vary ---- */

static int find_hoistable(const ir_expr *e, void *ctx) {
  var_find *f = ctx;
  cg *g = f->g;
  for (int i = 0; i < g->nrand; i++) /* filled a block at a time */
    if (g->rand[i] == e)
      return IR_WALK_SKIP;
  /* a local buffer's load is its producer's body (or an accumulator),
   * which only the loop body defines */
  if (e->op != IR_LOAD || g->s->local[e->load.buf->id] ||
      gc_sym_uses(e->load.index, f->var))
    return 0;
  add_once(g->hoist, &g->nhoist, CG_MAX_HOIST, e);
  return 0;
}

/* Before the inner loop d of stage st (at indentation ind): each load of
 * the stage's bodies whose index does not use d's variable (a channel's
 * mean and weight, a broadcast scalar) into a temporary, which the loop
 * body then names (bind_hoisted after each cx_reset). gcc would hoist them
 * itself, but `restrict` does not reach the functions OpenMP outlines, so
 * it must assume the loop's stores may change them: it then reloads them
 * every iteration, and a loop whose select (threshold_backward's) it can
 * no longer if-convert stays scalar. The element read is the one every
 * iteration would read, so reading it before a loop of at least one
 * iteration reads nothing new. */
static void hoist_loads(cg *g, const sc_stage *st, const sc_dim *d, int ind) {
  g->nhoist = 0;
  /* (a symbolic loop may run no iteration: its caller wraps the hoisted
   * loads and the loop in a test, hoist_open) */
  if ((d->size <= 0 && d->size != IR_SYMBOLIC) || d->var->kind != GC_SYM_VAR)
    return;
  var_find f = {g, d->var->var};
  for (int i = 0; i < st->nnodes; i++)
    if (ir_expr_walk(g->s->place[st->nodes[i]->id].body, find_hoistable, &f) <
        0)
      g->nhoist = 0;
  cx_reset(&g->x);
  g->x.indent = ind;
  for (int i = 0; i < g->nhoist; i++)
    g->hoist_name[i] = cx_emit(&g->x, g->hoist[i]);
}

/* In a loop body after cx_reset: the hoisted loads by their names. */
static void bind_hoisted(cg *g) {
  for (int i = 0; i < g->nhoist; i++)
    cx_bind(&g->x, g->hoist[i], g->hoist_name[i]);
}

/* A pointwise stage; `par` puts the OpenMP worksharing on its outermost
 * loop. */
void cg__pointwise_stage(cg *g, const sc_stage *st, int ind, bool par) {
  int nd = st->ndims;
  bool last = st == &g->k->stages[g->k->nstages - 1];
  bool stream = nd > 0 && g->streams && last;
  find_rands(g, st);
  bool blocked = stream || (nd > 0 && g->npf && last) || g->nrand > 0;
  const char *red = g->chk ? " reduction(|:gc_err)" : "";
  /* one parallel region when the blocks are the work shared (a 1-D loop)
   * or when stores stream (each thread fences its own) */
  bool region = par && (stream || (blocked && nd == 1));
  if (region) {
    cg__line(g, ind, "#pragma omp parallel%s%s", red, g->par_if);
    cg__line(g, ind, "{");
    ind += 2;
  }
  /* the inner loop split into ranges (a channels-last cat) */
  bool split = nd > 0 && !blocked && !(par && nd == 1) && !g->k->symbolic;
  /* loads hoisted before a loop that may run no iteration (a symbolic
   * bound) would read what the loop never reads: the two go under a test */
  bool guard = false;
  g->nhoist = 0;
  for (int i = 0; i < nd - split; i++) {
    if (i == nd - 1 && st->dims[i].size == IR_SYMBOLIC) {
      cg__line(g, ind, "if (%s > 0) {", cg__dim_size(g, &st->dims[i]));
      ind += 2;
      guard = true;
    }
    if (i == nd - 1)
      hoist_loads(g, st, &st->dims[i], ind);
    if (i == nd - 1 && blocked) {
      cg__open_streamed_loop(g, st, &st->dims[i], ind, par && nd == 1);
      ind += 4;
      continue;
    }
    if (i == nd - 1)
      cg__line(g, ind, "%s%s%s",
               par && nd == 1 ? "#pragma omp parallel for simd schedule(static)"
                              : "#pragma omp simd",
               red, par && nd == 1 ? g->par_if : "");
    else if (i == 0 && region)
      cg__line(g, ind, "#pragma omp for schedule(static) nowait");
    else if (i == 0 && par)
      cg__line(g, ind, "#pragma omp parallel for schedule(static)%s%s", red,
               g->par_if);
    cg__open_loop(g, ind, &st->dims[i], NULL, NULL);
    ind += 2;
  }
  if (split && !cg__split_inner(g, st, ind)) { /* no ranges: the plain loop */
    hoist_loads(g, st, &st->dims[nd - 1], ind);
    cg__line(g, ind, "#pragma omp simd%s", red);
    cg__open_loop(g, ind, &st->dims[nd - 1], NULL, NULL);
    ind += 2;
    split = false;
  }
  if (!split) {
    cx_reset(&g->x);
    bind_hoisted(g);
    cg__bind_reused(g, (int)(st - g->k->stages), ind);
    if (blocked)
      bind_rands(g, st);
    g->stream_st = stream ? st : NULL;
    cg__emit_stores(g, st, ind);
    g->stream_st = NULL;
  }
  for (int i = nd - 1 - split; i >= 0; i--) {
    if (i == nd - 1 && blocked) {
      ind -= 4;
      cg__close_streamed_loop(g, st, &st->dims[i], ind);
    } else {
      cg__line(g, ind -= 2, "}");
    }
    if (i == nd - 1 && guard)
      cg__line(g, ind -= 2, "}");
  }
  if (region) {
    if (stream)
      cg__line(g, ind, "gc_stream_fence();");
    cg__line(g, ind -= 2, "}");
  }
  g->nrand = 0;
  g->nhoist = 0;
}
