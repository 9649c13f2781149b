/*
 * reduce.c: reduction stages of a loop kernel, and a big reduction with
 * no outer loop split into per-thread partials.
 *
 * Reductions accumulate in the innermost loop under `omp simd reduction`
 * (so gcc vectorizes them without -ffast-math), float32 sums in blocks of
 * CG_SUM_BLOCK elements whose float partial sums are added in double, Welford
 * in blocks of CG_WELFORD_BLOCK elements (block sum, then the block's squared
 * deviations from its mean, both in double so a constant row's variance is
 * exactly 0 as eager's is, merged with Chan's formula), max/min with a
 * separate NaN flag so NaN propagates. argmax/argmin are scalar loops (NaN
 * is the maximum, ties keep the first index). A kernel with no outer loop
 * and one big reduction stage splits the reduction between threads, each
 * with its own partial result, combined in thread order afterwards (the
 * result depends on the thread count, not on timing).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/codegen/cexpr.h"
#include "compiler/codegen/cgen_internal.h"

/* ---- reduction stages ---- */

bool cg__float32_sum(const ir_node *n) {
  return n->red == IR_RED_SUM && n->out->dtype == GC_DTYPE_FLOAT32;
}

const char *cg__acc_type(const ir_node *n) {
  if (cg__float32_sum(n) || n->red == IR_RED_WELFORD)
    return "double";
  if (n->red == IR_RED_SUM && n->out->dtype != GC_DTYPE_FLOAT64)
    return "int64_t";
  return cx_ctype(n->red == IR_RED_ARGMAX || n->red == IR_RED_ARGMIN
                      ? n->out2->dtype
                      : n->out->dtype);
}

/* Value dtype a reduction reads (the body's). */
gc_dtype cg__val_dtype(const cg *g, const ir_node *n) {
  return g->s->place[n->id].body->dtype;
}

bool cg__is_float(gc_dtype d) {
  return d == GC_DTYPE_FLOAT32 || d == GC_DTYPE_FLOAT64;
}

/* Declares the accumulators of n ("a<id>", "a<id>_n" ...). */
static void declare_acc(cg *g, const ir_node *n, int ind, const char *sfx) {
  int id = n->id;
  gc_dtype vd = cg__val_dtype(g, n);
  switch (n->red) {
  case IR_RED_WELFORD:
    cg__line(g, ind,
             "double a%d_mean%s = 0, a%d_m2%s = 0; int64_t a%d_n%s = 0;", id,
             sfx, id, sfx, id, sfx);
    break;
  case IR_RED_ARGMAX:
  case IR_RED_ARGMIN:
    cg__line(g, ind, "%s a%d_v%s = %s; int64_t a%d_i%s = 0;", cx_ctype(vd), id,
             sfx, cx_reduction_init(cg__arena(g), n->red, vd), id, sfx);
    break;
  default:
    cg__line(g, ind, "%s a%d%s = %s;", cg__acc_type(n), id, sfx,
             cx_reduction_init(cg__arena(g), n->red, vd));
    if ((n->red == IR_RED_MAX || n->red == IR_RED_MIN) && cg__is_float(vd))
      cg__line(g, ind, "int a%d_nan%s = 0;", id, sfx);
  }
}

/* The innermost loop's reduction clauses (NULL when it cannot be simd). */
static const char *simd_clauses(cg *g, const sc_stage *st, bool second) {
  char buf[1024] = "";
  size_t len = 0;
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    int id = n->id;
    if (n->red == IR_RED_ARGMAX || n->red == IR_RED_ARGMIN)
      return NULL;
    if (second && n->red != IR_RED_WELFORD)
      continue;
    const char *c = NULL;
    switch (n->red) {
    case IR_RED_SUM:
      c = gc_arena_printf(cg__arena(g), " reduction(+:%s%d)",
                          cg__float32_sum(n) ? "p" : "a", id);
      break;
    case IR_RED_PROD:
      c = gc_arena_printf(cg__arena(g), " reduction(*:a%d)", id);
      break;
    case IR_RED_MAX:
    case IR_RED_MIN:
      c = gc_arena_printf(
          cg__arena(g), " reduction(%s:a%d)%s",
          n->red == IR_RED_MAX ? "max" : "min", id,
          cg__is_float(cg__val_dtype(g, n))
              ? gc_arena_printf(cg__arena(g), " reduction(|:a%d_nan)", id)
              : "");
      break;
    case IR_RED_ANY:
      c = gc_arena_printf(cg__arena(g), " reduction(|:a%d)", id);
      break;
    case IR_RED_ALL:
      c = gc_arena_printf(cg__arena(g), " reduction(&:a%d)", id);
      break;
    case IR_RED_WELFORD:
      c = gc_arena_printf(cg__arena(g), " reduction(+:%s%d)",
                          second ? "wq" : "ws", id);
      break;
    default:
      break;
    }
    if (c && len + strlen(c) < sizeof buf) {
      memcpy(buf + len, c, strlen(c) + 1);
      len += strlen(c);
    }
  }
  return gc_arena_strdup(cg__arena(g), buf);
}

/* The flat index of the current point of a reduction's inner space. */
const char *cg__flat_index(cg *g, const sc_stage *st) {
  gc_sym *e = gc_sym_const(&g->ir->sym, 0);
  gc_sym *m = gc_sym_const(&g->ir->sym, 1);
  for (int i = st->ndims - 1; i >= 0; i--) {
    e = gc_sym_add(&g->ir->sym, e, gc_sym_mul(&g->ir->sym, st->dims[i].var, m));
    m = gc_sym_mul(&g->ir->sym, m, st->dims[i].ssize);
  }
  return cg__sym(g, e);
}

/* The updates of the innermost loop's body (first pass; `second`: the
 * Welford deviations pass). */
static void update_accs(cg *g, const sc_stage *st, int ind, bool second) {
  g->x.indent = ind;
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    int id = n->id;
    if (second && n->red != IR_RED_WELFORD)
      continue;
    const char *v = cx_emit(&g->x, g->s->place[id].body);
    bool fl = cg__is_float(cg__val_dtype(g, n));
    const cg_reuse *u = second ? NULL : cg__reuse_of(g, n);
    if (u)
      cg__line(g, ind, "b%d[%s] = %s; /* read back by stage %d */", u->buf->id,
               cg__sym(g, cg__reuse_store_r(g, u)), v, u->stage);
    switch (n->red) {
    case IR_RED_SUM:
      cg__line(g, ind, "%s%d += %s;", cg__float32_sum(n) ? "p" : "a", id, v);
      break;
    case IR_RED_PROD:
      cg__line(g, ind, "a%d *= %s;", id, v);
      break;
    case IR_RED_MAX:
    case IR_RED_MIN:
      cg__line(g, ind, "a%d = %s %s a%d ? %s : a%d;", id, v,
               n->red == IR_RED_MAX ? ">" : "<", id, v, id);
      if (fl)
        cg__line(g, ind, "a%d_nan |= %s != %s;", id, v, v);
      break;
    case IR_RED_ANY:
      cg__line(g, ind, "a%d |= (%s != 0);", id, v);
      break;
    case IR_RED_ALL:
      cg__line(g, ind, "a%d &= (%s != 0);", id, v);
      break;
    case IR_RED_ARGMAX:
    case IR_RED_ARGMIN:
      if (fl)
        cg__line(
            g, ind,
            "if (%s %s a%d_v || (%s != %s && a%d_v == a%d_v)) { a%d_v = %s; "
            "a%d_i = %s; }",
            v, n->red == IR_RED_ARGMAX ? ">" : "<", id, v, v, id, id, id, v, id,
            cg__flat_index(g, st));
      else
        cg__line(g, ind, "if (%s %s a%d_v) { a%d_v = %s; a%d_i = %s; }", v,
                 n->red == IR_RED_ARGMAX ? ">" : "<", id, id, v, id,
                 cg__flat_index(g, st));
      break;
    case IR_RED_WELFORD:
      if (!second)
        cg__line(g, ind, "ws%d += %s;", id, v);
      else
        cg__line(g, ind,
                 "{ const double d = (double)%s - wm%d; wq%d += d * d; }", v,
                 id, id);
      break;
    }
  }
}

/* Whether the innermost loop needs blocks (float32 sums, Welford). */
static int64_t block_of(const sc_stage *st) {
  int64_t b = 0;
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    int64_t want = n->red == IR_RED_WELFORD ? CG_WELFORD_BLOCK
                   : cg__float32_sum(n)     ? CG_SUM_BLOCK
                                            : 0;
    if (want && (!b || want < b))
      b = want;
  }
  return b;
}

/* The innermost loop of a reduction stage over [lo, hi) of dim d. */
static void reduce_innermost(cg *g, const sc_stage *st, const sc_dim *d,
                             int ind, const char *lo, const char *hi) {
  int64_t blk = block_of(st);
  const char *v = cg__sym(g, d->var);
  const char *loe = lo ? lo : "0";
  const char *hie = hi ? hi : cg__dim_size(g, d);
  /* (one block when it fits: the same sums either way) */
  bool blocked = blk && (lo || d->size > blk || d->size == IR_SYMBOLIC);
  const char *blo = loe, *bhi = hie;
  if (blocked) {
    cg__line(g, ind, "for (int64_t %s_b = %s; %s_b < %s; %s_b += %lld) {", v,
             loe, v, hie, v, (long long)blk);
    ind += 2;
    cg__line(g, ind,
             "const int64_t %s_e = %s_b + %lld < %s ? %s_b + %lld : %s;", v, v,
             (long long)blk, hie, v, (long long)blk, hie);
    blo = gc_arena_printf(cg__arena(g), "%s_b", v);
    bhi = gc_arena_printf(cg__arena(g), "%s_e", v);
  } else {
    cg__line(g, ind, "{"); /* a scope for the block's partials */
    ind += 2;
  }
  /* block partials */
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    if (cg__float32_sum(n))
      cg__line(g, ind, "float p%d = 0;", n->id);
    if (n->red == IR_RED_WELFORD)
      cg__line(g, ind, "double ws%d = 0, wq%d = 0;", n->id, n->id);
  }
  const char *clauses = simd_clauses(g, st, false);
  if (clauses)
    cg__line(g, ind, "#pragma omp simd%s%s", clauses,
             g->chk ? " reduction(|:gc_err)" : "");
  cg__line(g, ind, "for (int64_t %s = %s; %s < %s; %s++) {", v, blo, v, bhi, v);
  cx_reset(&g->x);
  update_accs(g, st, ind + 2, false);
  cg__line(g, ind, "}");
  bool welford = false;
  for (int i = 0; i < st->nnodes; i++)
    welford |= st->nodes[i]->red == IR_RED_WELFORD;
  if (welford) {
    cg__line(g, ind, "const int64_t wn = %s - %s;", bhi, blo);
    for (int i = 0; i < st->nnodes; i++)
      if (st->nodes[i]->red == IR_RED_WELFORD)
        cg__line(g, ind, "const double wm%d = ws%d / (double)wn;",
                 st->nodes[i]->id, st->nodes[i]->id);
    const char *c2 = simd_clauses(g, st, true);
    if (c2)
      cg__line(g, ind, "#pragma omp simd%s%s", c2,
               g->chk ? " reduction(|:gc_err)" : "");
    cg__line(g, ind, "for (int64_t %s = %s; %s < %s; %s++) {", v, blo, v, bhi,
             v);
    cx_reset(&g->x);
    update_accs(g, st, ind + 2, true);
    cg__line(g, ind, "}");
    /* A one-element block deviates by nothing. The deviation pass
     * recomputes the body, and gcc may contract its last product into
     * "value - mean" (an FMA), leaving the product's rounding error: a
     * positive m2 would make var(one element) +inf instead of eager's
     * 0/0 = NaN. */
    for (int i = 0; i < st->nnodes; i++)
      if (st->nodes[i]->red == IR_RED_WELFORD)
        cg__line(g, ind, "if (wn == 1) wq%d = 0;", st->nodes[i]->id);
  }
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    int id = n->id;
    if (cg__float32_sum(n))
      cg__line(g, ind, "a%d += p%d;", id, id);
    if (n->red == IR_RED_WELFORD) {
      /* Chan et al.: merge (n, mean, m2) with the block's */
      cg__line(g, ind,
               "{ const int64_t nn = a%d_n + wn; const double dl = "
               "(double)wm%d - a%d_mean;",
               id, id, id);
      cg__line(g, ind, "  a%d_mean += dl * (double)wn / (double)nn;", id);
      cg__line(
          g, ind,
          "  a%d_m2 += (double)wq%d + dl * dl * (double)a%d_n * (double)wn "
          "/ (double)nn; a%d_n = nn; }",
          id, id, id, id);
    }
  }
  cg__line(g, ind - 2, "}");
}

/* Loops of a reduction stage; the outermost dim restricted to [lo, hi)
 * when lo is not NULL. */
static void reduce_loops(cg *g, const sc_stage *st, int ind, const char *lo,
                         const char *hi) {
  int nd = st->ndims;
  if (nd == 0) { /* a single element: the body itself */
    sc_dim one = {1, gc_sym_newvar(&g->ir->sym, "z", 0, 0),
                  gc_sym_const(&g->ir->sym, 1)};
    cg__line(g, ind, "{");
    cg__line(g, ind + 2, "const int64_t %s = 0; (void)%s;", cg__sym(g, one.var),
             cg__sym(g, one.var));
    sc_stage s1 = *st;
    s1.dims = &one;
    s1.ndims = 1;
    reduce_innermost(g, &s1, &one, ind + 2, NULL, NULL);
    cg__line(g, ind, "}");
    return;
  }
  for (int i = 0; i < nd - 1; i++) {
    cg__open_loop(g, ind, &st->dims[i], i == 0 ? lo : NULL, i == 0 ? hi : NULL);
    ind += 2;
  }
  reduce_innermost(g, st, &st->dims[nd - 1], ind, nd == 1 ? lo : NULL,
                   nd == 1 ? hi : NULL);
  for (int i = nd - 2; i >= 0; i--)
    cg__line(g, ind -= 2, "}");
}

/* Final values r<id>_<which> and stores of a reduction stage's nodes. */
static void finish_accs(cg *g, const sc_stage *st, int ind) {
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    int id = n->id;
    const sc_place *pl = &g->s->place[id];
    const char *t0 = cx_ctype(n->out->dtype);
    switch (n->red) {
    case IR_RED_WELFORD:
      cg__line(g, ind, "const %s r%d_0 = (%s)a%d_mean;", t0, id, t0, id);
      if (n->out2)
        cg__line(g, ind, "const %s r%d_1 = (%s)a%d_m2;",
                 cx_ctype(n->out2->dtype), id, cx_ctype(n->out2->dtype), id);
      if (n->out3)
        cg__line(g, ind, "const %s r%d_2 = (%s)a%d_n;",
                 cx_ctype(n->out3->dtype), id, cx_ctype(n->out3->dtype), id);
      break;
    case IR_RED_ARGMAX:
    case IR_RED_ARGMIN:
      cg__line(g, ind, "const int64_t r%d_0 = a%d_i;", id, id);
      cg__line(g, ind, "const %s r%d_1 = a%d_v;", cx_ctype(n->out2->dtype), id,
               id);
      break;
    case IR_RED_MAX:
    case IR_RED_MIN:
      if (cg__is_float(cg__val_dtype(g, n))) {
        cg__line(g, ind, "const %s r%d_0 = a%d_nan ? %s : a%d;", t0, id, id,
                 n->out->dtype == GC_DTYPE_FLOAT32 ? "NAN" : "((double)NAN)",
                 id);
        break;
      }
      /* fall through */
    default:
      cg__line(g, ind, "const %s r%d_0 = (%s)a%d;", t0, id, t0, id);
    }
    ir_buf *outs[3] = {n->out, n->out2, n->out3};
    for (int o = 0; o < 3; o++)
      if (outs[o] && !g->s->local[outs[o]->id])
        cg__line(g, ind, "b%d[%s] = r%d_%d;", outs[o]->id,
                 cg__sym(g, pl->store), id, o);
  }
}

void cg__reduction_stage(cg *g, const sc_stage *st, int ind) {
  for (int i = 0; i < st->nnodes; i++)
    declare_acc(g, st->nodes[i], ind, "");
  reduce_loops(g, st, ind, NULL, NULL);
  finish_accs(g, st, ind);
}

/* ---- a big reduction with no outer loop: per-thread partials ---- */

bool cg__combinable(const sc_stage *st) {
  for (int i = 0; i < st->nnodes; i++)
    if (st->nodes[i]->red == IR_RED_ARGMAX ||
        st->nodes[i]->red == IR_RED_ARGMIN)
      return false;
  return st->ndims > 0;
}

void cg__parallel_reduction(cg *g, const sc_stage *st, int ind) {
  cg__line(g, ind, "int gc_nt = omp_get_max_threads();");
  cg__line(g, ind, "if (gc_nt > %d) gc_nt = %d;", CG_MAX_THREADS,
           CG_MAX_THREADS);
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    int id = n->id;
    if (n->red == IR_RED_WELFORD)
      cg__line(g, ind, "double pm%d[%d], pq%d[%d]; int64_t pn%d[%d];", id,
               CG_MAX_THREADS, id, CG_MAX_THREADS, id, CG_MAX_THREADS);
    else
      cg__line(g, ind, "%s pa%d[%d]; int pnan%d[%d];", cg__acc_type(n), id,
               CG_MAX_THREADS, id, CG_MAX_THREADS);
  }
  cg__line(g, ind, "int gc_used = 1;");
  cg__line(g, ind, "#pragma omp parallel num_threads(gc_nt)%s%s",
           g->chk ? " reduction(|:gc_err)" : "", g->par_if);
  cg__line(g, ind, "{");
  int in = ind + 2;
  cg__line(g, in,
           "const int gc_t = omp_get_thread_num(), gc_n = "
           "omp_get_num_threads();");
  cg__line(g, in, "if (gc_t == 0) gc_used = gc_n;");
  if (st->dims[0].size == IR_SYMBOLIC) {
    const char *s0 = cg__dim_size(g, &st->dims[0]);
    cg__line(g, in,
             "const int64_t gc_lo = (%s) * gc_t / gc_n, gc_hi = (%s) * "
             "(gc_t + 1) / gc_n;",
             s0, s0);
  } else {
    int64_t s0 = st->dims[0].size;
    cg__line(g, in,
             "const int64_t gc_lo = %lldLL * gc_t / gc_n, gc_hi = %lldLL * "
             "(gc_t + 1) / gc_n;",
             (long long)s0, (long long)s0);
  }
  for (int i = 0; i < st->nnodes; i++)
    declare_acc(g, st->nodes[i], in, "");
  reduce_loops(g, st, in, "gc_lo", "gc_hi");
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    int id = n->id;
    if (n->red == IR_RED_WELFORD)
      cg__line(g, in,
               "pm%d[gc_t] = a%d_mean; pq%d[gc_t] = a%d_m2; pn%d[gc_t] = "
               "a%d_n;",
               id, id, id, id, id, id);
    else
      cg__line(g, in, "pa%d[gc_t] = a%d; pnan%d[gc_t] = %s;", id, id, id,
               (n->red == IR_RED_MAX || n->red == IR_RED_MIN) &&
                       cg__is_float(cg__val_dtype(g, n))
                   ? gc_arena_printf(cg__arena(g), "a%d_nan", id)
                   : "0");
  }
  cg__line(g, ind, "}");
  /* combine in thread order */
  for (int i = 0; i < st->nnodes; i++)
    declare_acc(g, st->nodes[i], ind, "");
  cg__line(g, ind, "for (int gc_t = 0; gc_t < gc_used; gc_t++) {");
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    int id = n->id;
    switch (n->red) {
    case IR_RED_SUM:
      cg__line(g, ind + 2, "a%d += pa%d[gc_t];", id, id);
      break;
    case IR_RED_PROD:
      cg__line(g, ind + 2, "a%d *= pa%d[gc_t];", id, id);
      break;
    case IR_RED_MAX:
    case IR_RED_MIN:
      cg__line(g, ind + 2, "a%d = pa%d[gc_t] %s a%d ? pa%d[gc_t] : a%d;", id,
               id, n->red == IR_RED_MAX ? ">" : "<", id, id, id);
      if (cg__is_float(cg__val_dtype(g, n)))
        cg__line(g, ind + 2, "a%d_nan |= pnan%d[gc_t];", id, id);
      break;
    case IR_RED_ANY:
      cg__line(g, ind + 2, "a%d |= pa%d[gc_t];", id, id);
      break;
    case IR_RED_ALL:
      cg__line(g, ind + 2, "a%d &= pa%d[gc_t];", id, id);
      break;
    case IR_RED_WELFORD:
      cg__line(g, ind + 2,
               "if (pn%d[gc_t]) { const int64_t nn = a%d_n + pn%d[gc_t]; const "
               "double dl = pm%d[gc_t] - a%d_mean;",
               id, id, id, id, id);
      cg__line(g, ind + 2,
               "  a%d_mean += dl * (double)pn%d[gc_t] / (double)nn;", id, id);
      cg__line(g, ind + 2,
               "  a%d_m2 += pq%d[gc_t] + dl * dl * (double)a%d_n * "
               "(double)pn%d[gc_t] / (double)nn; a%d_n = nn; }",
               id, id, id, id, id);
      break;
    default:
      break;
    }
  }
  cg__line(g, ind, "}");
  finish_accs(g, st, ind);
}
