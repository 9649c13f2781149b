/*
 * split.c: loops split into ranges where an index takes different forms
 * (a pad, a cat), so each range's body has no select.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/codegen/cexpr.h"
#include "compiler/codegen/cgen_internal.h"

/* ---- loops split into ranges ----
 *
 * cat selects its input by comparing the index along the concatenated dim
 * with each input's end (a chain of where()s), and every element loads
 * from every input at a clamped index; constant_pad_nd compares the index
 * with the padding's bounds. When that dim is an outer loop of a kernel
 * (whose outer points are independent), the loop splits at those bounds: one
 * loop nest per range, each with a variable whose range is that range, so the
 * comparisons fold to constants (expr.c's make_op), the where()s to one arm and
 * the clamps to the plain index (sym.c): each range loads only its own input.
 * densenet's cat + batch norm + relu kernels load 1 input per element instead
 * of up to 16. A padded window (max or average pooling) compares k*x + c
 * with the input's bounds (k the stride): its loops split where the window
 * leaves the input, and the inner range reads at affine indices, which gcc
 * vectorizes (it does not vectorize a clamped index beside strided loads
 * of the same array). resnet's 3x3 stride-2 max pool with indices: 19 ->
 * 3.5 ms on resnet18's activation in a standalone C test. */

#define SPLIT_MAX 32                /* ranges per kernel */
#define SPLIT_MAX_COEF 64           /* |k| of an index k*x + c compared */
#define SPLIT_MAX_BOUND (1LL << 48) /* |c|, |bound|: no overflow below */

/* floor(a / d), d > 0 */
static int64_t floordiv64(int64_t a, int64_t d) {
  int64_t q = a / d;
  return q * d > a ? q - 1 : q;
}

typedef struct splits {
  int var;
  int64_t size;
  int64_t pts[SPLIT_MAX + 1];
  int n;
} splits;

static int find_splits(const ir_expr *e, void *ctx) {
  splits *sp = ctx;
  if (ir_op_arity(e->op) != 2 || e->dtype != GC_DTYPE_BOOL)
    return 0;
  const ir_expr *a = e->args[0], *b = e->args[1];
  if (a->op != IR_INDEX || b->op != IR_CONST || !a->index ||
      cg__is_float(b->dtype))
    return 0;
  /* the index is k times the variable plus a constant (k = 2: a window
   * of a stride-2 pooling or convolution) */
  const gc_sym *x = a->index;
  int64_t c0 = 0, k = 1;
  if (x->kind == GC_SYM_ADD && x->n == 1) {
    c0 = x->c;
    k = x->coefs[0];
    x = x->ops[0];
  }
  if (x->kind != GC_SYM_VAR || x->var != sp->var || k == 0 ||
      k < -SPLIT_MAX_COEF || k > SPLIT_MAX_COEF)
    return 0;
  /* k*x + c0 < t holds on one side of the point p where it changes */
  int64_t t = e->op == IR_LT || e->op == IR_GE   ? b->k.i
              : e->op == IR_LE || e->op == IR_GT ? b->k.i + 1
                                                 : INT64_MIN;
  if (t == INT64_MIN || t < -SPLIT_MAX_BOUND || t > SPLIT_MAX_BOUND ||
      c0 < -SPLIT_MAX_BOUND || c0 > SPLIT_MAX_BOUND)
    return 0;
  /* k > 0: k*x + c0 >= t from x = ceil((t - c0) / k); k < 0: it holds up
   * to x = floor((c0 - t) / -k) */
  int64_t p =
      k > 0 ? floordiv64(t - c0 + k - 1, k) : floordiv64(c0 - t, -k) + 1;
  if (p <= 0 || p >= sp->size)
    return 0;
  for (int i = 0; i < sp->n; i++)
    if (sp->pts[i] == p)
      return 0;
  if (sp->n == SPLIT_MAX)
    return 1;
  sp->pts[sp->n++] = p;
  return 0;
}

static int cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The ranges variable `var` (of `size` points) splits into at the bounds
 * the bodies of `nodes` compare it with: sp->pts sorted, ending with size.
 * False when there is nothing to split. */
static bool find_ranges(cg *g, ir_node *const *nodes, int n, int var,
                        int64_t size, splits *sp) {
  *sp = (splits){var, size, {0}, 0};
  int rc = 0;
  for (int i = 0; i < n && !rc; i++)
    rc = ir_expr_walk(g->s->place[nodes[i]->id].body, find_splits, sp);
  if (rc || sp->n == 0)
    return false;
  qsort(sp->pts, (size_t)sp->n, sizeof *sp->pts, cmp64);
  sp->pts[sp->n] = sp->size;
  return true;
}

/* The places of `n` nodes while they are rewritten range by range: a
 * variable per range of sp (ranging over it), substituted for sp->var in
 * every place (ranged_enter), the places restored after (ranged_end). */
typedef struct ranged {
  ir_node *const *nodes;
  int n;
  const splits *sp;
  sc_place *saved;
  gc_symmap *map;
  gc_sym *vars[SPLIT_MAX + 1];
} ranged;

static bool ranged_begin(cg *g, ir_node *const *nodes, int n, const splits *sp,
                         ranged *r) {
  ir_graph *ir = g->ir;
  *r = (ranged){.nodes = nodes, .n = n, .sp = sp};
  r->saved = gc_arena_calloc(ir->a, (size_t)n, sizeof *r->saved);
  r->map = gc_arena_zalloc(ir->a, sizeof *r->map);
  if (!r->saved || !r->map)
    return false;
  for (int k = 0; k <= sp->n; k++) {
    char name[24];
    snprintf(name, sizeof name, "x%d", ir->sym.nvars);
    r->vars[k] =
        gc_sym_newvar(&ir->sym, name, k ? sp->pts[k - 1] : 0, sp->pts[k] - 1);
    if (!r->vars[k])
      return false;
  }
  for (int i = 0; i < n; i++)
    r->saved[i] = g->s->place[nodes[i]->id];
  if (g->nrange_maps == CG_MAX_RANGE_MAPS)
    return false;
  g->range_maps[g->nrange_maps++] = r->map;
  return true;
}

/* Rewrites the places for range k; returns its variable. */
static gc_sym *ranged_enter(cg *g, ranged *r, int k) {
  sc_place *places = (sc_place *)g->s->place;
  if (!gc_symmap_set(&g->ir->sym, r->map, r->sp->var, r->vars[k]))
    g->out.failed = true;
  for (int i = 0; i < r->n; i++) {
    sc_place *p = &places[r->nodes[i]->id];
    p->body = ir_expr_subst(g->ir, r->saved[i].body, r->map);
    p->store = gc_sym_subst(&g->ir->sym, r->saved[i].store, r->map);
  }
  cx_reset(&g->x);
  return r->vars[k];
}

static void ranged_end(cg *g, ranged *r) {
  sc_place *places = (sc_place *)g->s->place;
  for (int i = 0; i < r->n; i++)
    places[r->nodes[i]->id] = r->saved[i];
  g->nrange_maps--; /* r's, pushed by ranged_begin */
}

/* The innermost loop of pointwise stage st (whose outer loops are open at
 * indentation ind) split at the bounds its values are compared with, as
 * cg__split_kernel splits outer loops: one loop per range, each with its own
 * variable, so the comparisons fold. A cat along a channels-last tensor's
 * channels is a cat along its innermost loop: densenet121's cat + batch
 * norm + relu kernels loaded every input at every element (clamped) without
 * this. False (nothing emitted) when there is nothing to split. */
bool cg__split_inner(cg *g, const sc_stage *st, int ind) {
  const sc_dim *in = &st->dims[st->ndims - 1];
  splits sp;
  ranged r;
  if (!find_ranges(g, st->nodes, st->nnodes, in->var->var, in->size, &sp) ||
      !ranged_begin(g, st->nodes, st->nnodes, &sp, &r))
    return false;
  const char *red = g->chk ? " reduction(|:gc_err)" : "";
  for (int k = 0; k <= sp.n; k++) {
    sc_dim d = {.var = ranged_enter(g, &r, k), .size = sp.pts[k]};
    cg__line(g, ind, "#pragma omp simd%s", red);
    cg__open_loop(g, ind, &d,
                  gc_arena_printf(cg__arena(g), "%lld",
                                  (long long)(k ? sp.pts[k - 1] : 0)),
                  gc_arena_printf(cg__arena(g), "%lld", (long long)sp.pts[k]));
    cg__bind_reused(g, (int)(st - g->k->stages), ind + 2);
    cg__emit_stores(g, st, ind + 2);
    cg__line(g, ind, "}");
  }
  ranged_end(g, &r);
  return true;
}

bool cg__split_kernel(cg *g, const sc_kernel *k, bool par) {
  if (k->call || k->ndims == 0) /* (outer points are independent) */
    return false;
  for (int d = 0; d < k->ndims; d++) {
    splits sp;
    ranged r;
    if (!find_ranges(g, k->nodes, k->nnodes, k->dims[d].var->var,
                     k->dims[d].size, &sp))
      continue;
    /* each range: a variable ranging over it, substituted in every place
     * of the kernel (restored after) */
    if (!ranged_begin(g, k->nodes, k->nnodes, &sp, &r))
      return false;
    sc_dim *dim = (sc_dim *)&k->dims[d];
    gc_sym *var = dim->var;
    cg__line(g, 2, "/* %s split at the bounds its values are compared with */",
             cg__sym(g, var));
    /* one parallel region for all ranges (each its own outlined function
     * would double the C compiler's time on densenet121) */
    if (par) {
      cg__line(g, 2, "#pragma omp parallel%s",
               g->chk ? " reduction(|:gc_err)" : "");
      cg__line(g, 2, "{");
    }
    for (int i = 0; i <= sp.n; i++) {
      dim->var = ranged_enter(g, &r, i);
      cg__gen_nest(g, k, par, true, d,
                   gc_arena_printf(cg__arena(g), "%lld",
                                   (long long)(i ? sp.pts[i - 1] : 0)),
                   gc_arena_printf(cg__arena(g), "%lld", (long long)sp.pts[i]));
    }
    if (par && g->streams)
      cg__line(g, 4, "gc_stream_fence();");
    if (par)
      cg__line(g, 2, "}");
    dim->var = var;
    ranged_end(g, &r);
    return true;
  }
  return false;
}
