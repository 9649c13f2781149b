/*
 * tiled.c: kernels whose reductions run across a tile of lanes.
 *
 * A reduction whose reduced dimension is strided in memory while an outer
 * dimension is contiguous (the column sum of a row-major matrix, batch-norm
 * statistics of a channels-last tensor, softmax over dim 0) is slow in the
 * natural loop order: the inner loop jumps a whole row per element. A tiled
 * kernel turns it around. The innermost outer dimension L is cut into
 * tiles of CG_TILE lanes; for each tile, every stage loops over its own
 * dimensions with the lanes innermost:
 *
 *   for (each point of the other outer dims, each tile of L)  (parallel)
 *     stage (reduce):    acc[lane] = init for every lane
 *                        for (reduced dims) for (lane) acc[lane] op= x
 *                        results r<id>_<k>[lane]
 *     stage (pointwise): for (its dims) for (lane) out = f(..., r[lane])
 *
 * The lane loop walks memory contiguously and its iterations are
 * independent, so gcc vectorizes it without a reduction clause. Welford
 * runs per lane in its online form (the count is the same for every lane,
 * so 1/n is computed once per step); argmax/argmin compare per lane; float32
 * sums accumulate in double per lane.
 *
 * When: a kernel with outer dims whose innermost outer dim is contiguous
 * (unit stride) in the loads of a reduction stage whose innermost reduced
 * dim is not (tile_kernel below counts the loads).
 */
#include <stdio.h>
#include <string.h>

#include "compiler/codegen/cgen_internal.h"

/* ---- when to tile: sc_tiles (sched/schedule.c) ---- */

bool cg__tile_kernel(cg *g, const sc_kernel *k) {
  return sc_tiles(g->s, k);
}

/* ---- the code ---- */

typedef struct tile {
  const sc_dim *L;  /* the tiled dim */
  const char *v;    /* its variable (the lane loop's) */
  const char *base; /* the tile's first index */
  const char *end;  /* one past its last */
  const char *lane; /* v - base */
} tile;

/* for (L = base; L < end; L++) with the simd pragma. */
static void lane_loop(cg *g, const tile *t, int ind) {
  cg__line(g, ind, "#pragma omp simd%s", g->chk ? " reduction(|:gc_err)" : "");
  cg__line(g, ind, "for (int64_t %s = %s; %s < %s; %s++) {", t->v, t->base,
           t->v, t->end, t->v);
}

static const char *init_of(cg *g, const ir_node *n) {
  return cx_reduction_init(cg__arena(g), n->red, cg__val_dtype(g, n));
}

/* Accumulator arrays of n, initialized for every lane. */
static void declare(cg *g, const ir_node *n, const tile *t, int ind) {
  int id = n->id;
  const char *vt = cx_ctype(cg__val_dtype(g, n));
  switch (n->red) {
  case IR_RED_WELFORD:
    cg__line(g, ind, "double a%d_mean[%d], a%d_m2[%d];", id, CG_TILE, id,
             CG_TILE);
    break;
  case IR_RED_ARGMAX:
  case IR_RED_ARGMIN:
    cg__line(g, ind, "%s a%d_v[%d]; int64_t a%d_i[%d];", vt, id, CG_TILE, id,
             CG_TILE);
    break;
  default:
    cg__line(g, ind, "%s a%d[%d];", cg__acc_type(n), id, CG_TILE);
    if ((n->red == IR_RED_MAX || n->red == IR_RED_MIN) &&
        cg__is_float(cg__val_dtype(g, n)))
      cg__line(g, ind, "int a%d_nan[%d];", id, CG_TILE);
  }
  lane_loop(g, t, ind);
  int in = ind + 2;
  switch (n->red) {
  case IR_RED_WELFORD:
    cg__line(g, in, "a%d_mean[%s] = 0; a%d_m2[%s] = 0;", id, t->lane, id,
             t->lane);
    break;
  case IR_RED_ARGMAX:
  case IR_RED_ARGMIN:
    cg__line(g, in, "a%d_v[%s] = %s; a%d_i[%s] = 0;", id, t->lane,
             init_of(g, n), id, t->lane);
    break;
  default:
    cg__line(g, in, "a%d[%s] = %s;", id, t->lane, init_of(g, n));
    if ((n->red == IR_RED_MAX || n->red == IR_RED_MIN) &&
        cg__is_float(cg__val_dtype(g, n)))
      cg__line(g, in, "a%d_nan[%s] = 0;", id, t->lane);
  }
  cg__line(g, ind, "}");
}

/* The update of n's accumulators by value v at the current point. */
static void update(cg *g, const sc_stage *st, const ir_node *n, const tile *t,
                   const char *v, int ind, const char *wi) {
  int id = n->id;
  const char *l = t->lane;
  bool fl = cg__is_float(cg__val_dtype(g, n));
  switch (n->red) {
  case IR_RED_SUM:
    cg__line(g, ind, "a%d[%s] += %s;", id, l, v);
    break;
  case IR_RED_PROD:
    cg__line(g, ind, "a%d[%s] *= %s;", id, l, v);
    break;
  case IR_RED_MAX:
  case IR_RED_MIN:
    cg__line(g, ind, "a%d[%s] = %s %s a%d[%s] ? %s : a%d[%s];", id, l, v,
             n->red == IR_RED_MAX ? ">" : "<", id, l, v, id, l);
    if (fl)
      cg__line(g, ind, "a%d_nan[%s] |= %s != %s;", id, l, v, v);
    break;
  case IR_RED_ANY:
    cg__line(g, ind, "a%d[%s] |= (%s != 0);", id, l, v);
    break;
  case IR_RED_ALL:
    cg__line(g, ind, "a%d[%s] &= (%s != 0);", id, l, v);
    break;
  case IR_RED_ARGMAX:
  case IR_RED_ARGMIN: {
    const char *op = n->red == IR_RED_ARGMAX ? ">" : "<";
    const char *nan = fl ? gc_arena_printf(cg__arena(g),
                                           " || (%s != %s && a%d_v[%s] == "
                                           "a%d_v[%s])",
                                           v, v, id, l, id, l)
                         : "";
    cg__line(g, ind,
             "if (%s %s a%d_v[%s]%s) { a%d_v[%s] = %s; a%d_i[%s] = "
             "%s; }",
             v, op, id, l, nan, id, l, v, id, l, cg__flat_index(g, st));
    break;
  }
  case IR_RED_WELFORD: /* online, per lane; wi is 1 / count */
    cg__line(g, ind,
             "{ const double d = (double)%s - a%d_mean[%s]; a%d_mean[%s] += d "
             "* %s; a%d_m2[%s] += d * ((double)%s - a%d_mean[%s]); }",
             v, id, l, id, l, wi, id, l, v, id, l);
    break;
  }
}

/* Final values r<id>_<k>[lane] and the stores of a reduction stage. */
static void finish(cg *g, const sc_stage *st, const tile *t, int ind,
                   const char *wn) {
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    ir_buf *outs[3] = {n->out, n->out2, n->out3};
    for (int o = 0; o < 3; o++)
      if (outs[o])
        cg__line(g, ind, "%s r%d_%d[%d];", cx_ctype(outs[o]->dtype), n->id, o,
                 CG_TILE);
  }
  if (st->nnodes)
    lane_loop(g, t, ind);
  int in = ind + 2;
  bool welford = false;
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    int id = n->id;
    const char *l = t->lane;
    const char *t0 = cx_ctype(n->out->dtype);
    switch (n->red) {
    case IR_RED_WELFORD:
      welford = true;
      cg__line(g, in, "r%d_0[%s] = (%s)a%d_mean[%s];", id, l, t0, id, l);
      if (n->out2)
        cg__line(g, in, "r%d_1[%s] = (%s)a%d_m2[%s];", id, l,
                 cx_ctype(n->out2->dtype), id, l);
      if (n->out3)
        cg__line(g, in, "r%d_2[%s] = (%s)%s;", id, l, cx_ctype(n->out3->dtype),
                 wn);
      break;
    case IR_RED_ARGMAX:
    case IR_RED_ARGMIN:
      cg__line(g, in, "r%d_0[%s] = a%d_i[%s]; r%d_1[%s] = a%d_v[%s];", id, l,
               id, l, id, l, id, l);
      break;
    case IR_RED_MAX:
    case IR_RED_MIN:
      if (cg__is_float(cg__val_dtype(g, n))) {
        cg__line(g, in, "r%d_0[%s] = a%d_nan[%s] ? %s : a%d[%s];", id, l, id, l,
                 n->out->dtype == GC_DTYPE_FLOAT32 ? "NAN" : "((double)NAN)",
                 id, l);
        break;
      }
      /* fall through */
    default:
      cg__line(g, in, "r%d_0[%s] = (%s)a%d[%s];", id, l, t0, id, l);
    }
    ir_buf *outs[3] = {n->out, n->out2, n->out3};
    for (int o = 0; o < 3; o++)
      if (outs[o] && !g->s->local[outs[o]->id])
        cg__line(g, in, "b%d[%s] = r%d_%d[%s];", outs[o]->id,
                 cg__sym(g, g->s->place[id].store), id, o, l);
  }
  (void)welford;
  if (st->nnodes)
    cg__line(g, ind, "}");
}

static bool has_welford(const sc_stage *st) {
  for (int i = 0; i < st->nnodes; i++)
    if (st->nodes[i]->red == IR_RED_WELFORD)
      return true;
  return false;
}

static void reduce_stage(cg *g, const sc_stage *st, const tile *t, int ind,
                         int s) {
  for (int i = 0; i < st->nnodes; i++)
    declare(g, st->nodes[i], t, ind);
  bool welford = has_welford(st);
  char wn[32] = "", wi[32] = "";
  if (welford) {
    snprintf(wn, sizeof wn, "gc_wn%d", s);
    snprintf(wi, sizeof wi, "gc_wi%d", s);
    cg__line(g, ind, "int64_t %s = 0;", wn);
  }
  int in = ind;
  for (int i = 0; i < st->ndims; i++) {
    cg__open_loop(g, in, &st->dims[i], NULL, NULL);
    in += 2;
  }
  if (welford)
    cg__line(g, in, "%s++; const double %s = 1.0 / (double)%s;", wn, wi, wn);
  lane_loop(g, t, in);
  cx_reset(&g->x);
  g->x.indent = in + 2;
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    update(g, st, n, t, cx_emit(&g->x, g->s->place[n->id].body), in + 2, wi);
  }
  cg__line(g, in, "}");
  for (int i = st->ndims - 1; i >= 0; i--)
    cg__line(g, in -= 2, "}");
  finish(g, st, t, ind, wn);
}

static void pointwise_stage(cg *g, const sc_stage *st, const tile *t, int ind) {
  int in = ind;
  for (int i = 0; i < st->ndims; i++) {
    cg__open_loop(g, in, &st->dims[i], NULL, NULL);
    in += 2;
  }
  lane_loop(g, t, in);
  cx_reset(&g->x);
  cg__emit_stores(g, st, in + 2);
  cg__line(g, in, "}");
  for (int i = st->ndims - 1; i >= 0; i--)
    cg__line(g, in -= 2, "}");
}

void cg__gen_tiled(cg *g, const sc_kernel *k, bool par) {
  const sc_dim *L = &k->dims[k->ndims - 1];
  tile t;
  t.L = L;
  t.v = cg__sym(g, L->var);
  t.base = gc_arena_printf(cg__arena(g), "%s_b", t.v);
  t.end = gc_arena_printf(cg__arena(g), "%s_e", t.v);
  t.lane = gc_arena_printf(cg__arena(g), "%s - %s", t.v, t.base);
  int64_t ntiles = (L->size + CG_TILE - 1) / CG_TILE;
  int ind = 2;
  cg__line(g, ind, "/* tiled: %s in tiles of %d lanes, innermost */", t.v,
           CG_TILE);
  if (par)
    cg__line(g, ind, "#pragma omp parallel for schedule(static)%s%s",
             k->ndims > 1
                 ? gc_arena_printf(cg__arena(g), " collapse(%d)", k->ndims)
                 : "",
             g->chk ? " reduction(|:gc_err)" : "");
  for (int i = 0; i < k->ndims - 1; i++) {
    cg__open_loop(g, ind, &k->dims[i], NULL, NULL);
    ind += 2;
  }
  cg__line(g, ind, "for (int64_t %s_t = 0; %s_t < %lld; %s_t++) {", t.v, t.v,
           (long long)ntiles, t.v);
  ind += 2;
  cg__line(g, ind, "const int64_t %s = %s_t * %d;", t.base, t.v, CG_TILE);
  cg__line(g, ind, "const int64_t %s = %s + %d < %lld ? %s + %d : %lld;", t.end,
           t.base, CG_TILE, (long long)L->size, t.base, CG_TILE,
           (long long)L->size);
  g->lane = t.lane;
  for (int s = 0; s < k->nstages; s++) {
    const sc_stage *st = &k->stages[s];
    cg__line(g, ind, "/* stage %d: %s */", s,
             st->reduction ? "reduce" : "pointwise");
    if (st->reduction)
      reduce_stage(g, st, &t, ind, s);
    else
      pointwise_stage(g, st, &t, ind);
  }
  g->lane = NULL;
  cg__line(g, ind -= 2, "}");
  for (int i = 0; i < k->ndims - 1; i++)
    cg__line(g, ind -= 2, "}");
}

/* ---- 2-D tiles for transposing pointwise kernels ----
 *
 * A pointwise kernel whose stores walk memory along its innermost dim i
 * while some load walks along its last outer dim o (out[o][i] = a[o][i] +
 * b[i][o]) reads b a whole row apart per element. Cutting the dims into
 * TILE2_O x TILE2_I rectangles keeps the lines of b a rectangle touches in
 * cache while it is done:
 *
 *   for (o tile) for (i tile)                       (parallel)
 *     for (o in its tile) for (i in its tile) body
 *
 * The rectangle is long along o (b's contiguous dim: each of the TILE2_I
 * rows of b it touches is read as one TILE2_O-element run the hardware
 * prefetcher follows) and one cache line of floats wide along i (the
 * stores and the contiguous loads use whole lines). Measured on a 2-core
 * EPYC for 4096 x 4096 float32 x + y.t(): 32 x 32 squares with a simd
 * inner loop (gathers) 28 ms, 256 x 16 rectangles 10 ms, 256 x 8 14 ms,
 * 256 x 4 28 ms; the simd pragma on the 16-lane inner loop costs 10%.
 */

#define TILE2_O 256 /* along the outer dim o */
#define TILE2_I 16  /* along the inner dim i */

typedef struct vote2 {
  int o, i;    /* the outer and inner loop variables */
  int strided; /* loads contiguous along o, strided along i */
} vote2;

static int vote_2d(const ir_expr *e, void *ctx) {
  vote2 *v = ctx;
  int64_t co, ci;
  if (ir_reads_buffer(e) && gc_sym_linear_in(e->load.index, v->o, &co) &&
      gc_sym_linear_in(e->load.index, v->i, &ci) && (co == 1 || co == -1) &&
      (ci >= TILE2_I || ci <= -TILE2_I))
    v->strided++;
  return 0;
}

bool cg__tile2d_kernel(cg *g, const sc_kernel *k) {
  if (k->call || k->ndims == 0 || k->nstages != 1 || k->stages[0].reduction ||
      k->stages[0].ndims == 0)
    return false;
  const sc_stage *st = &k->stages[0];
  const sc_dim *o = &k->dims[k->ndims - 1], *i = &st->dims[st->ndims - 1];
  if (o->size < 4 * TILE2_I || i->size < 4 * TILE2_I)
    return false;
  vote2 v = {o->var->var, i->var->var, 0};
  for (int n = 0; n < st->nnodes; n++)
    ir_expr_walk(g->s->place[st->nodes[n]->id].body, vote_2d, &v);
  return v.strided > 0;
}

/* ---- 16 x 16 blocks transposed in registers ----
 *
 * Inside a rectangle, a full 16 x 16 block whose transposed operands are
 * float32 loads contiguous along o reads each such operand as 16 vectors
 * along o (one per i), transposes them with shuffles (gc_tr16, GCC vector
 * extensions: vpermt2ps on AVX-512, split on narrower targets) and runs
 * the body over the block with those loads replaced by the transposed
 * values, so every load and store of the inner loop is contiguous along
 * i. Partial blocks run the plain loop. 4096 x 4096 float32 x + y.t():
 * 10.5 -> 7.1-7.7 ms in a standalone C test (x86-64-v3 and -v4 alike). */

typedef struct tloads {
  int o, i;
  const ir_expr *ld[4];
  int n;
  bool other; /* a transposed read this path does not handle */
} tloads;

static int find_tloads(const ir_expr *e, void *ctx) {
  tloads *t = ctx;
  int64_t co, ci;
  if (!ir_reads_buffer(e))
    return 0;
  if (!gc_sym_linear_in(e->load.index, t->o, &co) ||
      !gc_sym_linear_in(e->load.index, t->i, &ci)) {
    t->other = true;
    return 0;
  }
  if (ci == 1 || ci == 0)
    return 0; /* contiguous (or constant) along i */
  if (e->op == IR_LOAD && e->dtype == GC_DTYPE_FLOAT32 && co == 1 && t->n < 4) {
    for (int k = 0; k < t->n; k++)
      if (t->ld[k] == e)
        return 0;
    t->ld[t->n++] = e;
  } else {
    t->other = true;
  }
  return 0;
}

/* The body of the 2-D tiled kernel's innermost loop over [lo, hi) of iv. */
static void tiled2d_body(cg *g, const sc_stage *st, int ind, const char *iv,
                         const char *lo, const char *hi, bool simd) {
  if (simd) /* (with transposed loads left in, gathers: 10% slower) */
    cg__line(g, ind, "#pragma omp simd%s",
             g->chk ? " reduction(|:gc_err)" : "");
  cg__line(g, ind, "for (int64_t %s = %s; %s < %s; %s++) {", iv, lo, iv, hi,
           iv);
  cg__emit_stores(g, st, ind + 2);
  cg__line(g, ind, "}");
}

void cg__gen_tiled2d(cg *g, const sc_kernel *k, bool par) {
  const sc_stage *st = &k->stages[0];
  const sc_dim *o = &k->dims[k->ndims - 1], *i = &st->dims[st->ndims - 1];
  const char *ov = cg__sym(g, o->var), *iv = cg__sym(g, i->var);
  /* the register transpose: one stage dim, float32 transposed loads */
  tloads tl = {o->var->var, i->var->var, {0}, 0, false};
  if (st->ndims == 1)
    for (int n = 0; n < st->nnodes; n++)
      ir_expr_walk(g->s->place[st->nodes[n]->id].body, find_tloads, &tl);
  bool regs = st->ndims == 1 && tl.n > 0 && !tl.other;
  int ind = 2;
  cg__line(g, ind, "/* 2-D tiles of %d x %d over %s and %s%s */", TILE2_O,
           TILE2_I, ov, iv,
           regs ? ", 16 x 16 blocks transposed in registers" : "");
  if (par)
    cg__line(g, ind, "#pragma omp parallel for schedule(static) collapse(%d)%s",
             k->ndims + 1, g->chk ? " reduction(|:gc_err)" : "");
  for (int d = 0; d < k->ndims - 1; d++) {
    cg__open_loop(g, ind, &k->dims[d], NULL, NULL);
    ind += 2;
  }
  cg__line(g, ind, "for (int64_t %s_t = 0; %s_t < %lld; %s_t += %d)", ov, ov,
           (long long)o->size, ov, TILE2_O);
  cg__line(g, ind, "for (int64_t %s_t = 0; %s_t < %lld; %s_t += %d) {", iv, iv,
           (long long)i->size, iv, TILE2_I);
  ind += 2;
  cg__line(g, ind, "const int64_t %s_e = %s_t + %d < %lld ? %s_t + %d : %lld;",
           ov, ov, TILE2_O, (long long)o->size, ov, TILE2_O,
           (long long)o->size);
  cg__line(g, ind, "const int64_t %s_e = %s_t + %d < %lld ? %s_t + %d : %lld;",
           iv, iv, TILE2_I, (long long)i->size, iv, TILE2_I,
           (long long)i->size);
  const char *ilo = gc_arena_printf(cg__arena(g), "%s_t", iv);
  const char *ihi = gc_arena_printf(cg__arena(g), "%s_e", iv);
  if (regs) {
    cg__line(g, ind, "int64_t %s_b = %s_t;", ov, ov);
    cg__line(g, ind, "if (%s_e - %s_t == 16)", iv, iv);
    cg__line(g, ind + 2, "for (; %s_b + 16 <= %s_e; %s_b += 16) {", ov, ov, ov);
    int in2 = ind + 4;
    for (int t = 0; t < tl.n; t++) {
      cg__line(g, in2, "gc_v16 gc_r%d[16];", t);
      cg__line(g, in2, "for (int gc_q = 0; gc_q < 16; gc_q++) {");
      cg__line(g, in2 + 2, "const int64_t %s = %s_b, %s = %s_t + gc_q;", ov, ov,
               iv, iv);
      cg__line(g, in2 + 2, "__builtin_memcpy(&gc_r%d[gc_q], &b%d[%s], 64);", t,
               tl.ld[t]->load.buf->id, cg__sym(g, tl.ld[t]->load.index));
      cg__line(g, in2, "}");
      cg__line(g, in2, "gc_tr16(gc_r%d);", t);
    }
    cg__line(g, in2, "for (int64_t %s = %s_b; %s < %s_b + 16; %s++) {", ov, ov,
             ov, ov, ov);
    cx_reset(&g->x);
    for (int t = 0; t < tl.n; t++)
      cx_bind(&g->x, tl.ld[t],
              gc_arena_printf(cg__arena(g),
                              "((const float *)gc_r%d)[(%s - %s_b) * 16 + (%s "
                              "- %s_t)]",
                              t, ov, ov, iv, iv));
    tiled2d_body(g, st, in2 + 2, iv, ilo, ihi, true);
    cg__line(g, in2, "}");
    cg__line(g, ind + 2, "}");
    g->tr16 = true;
  }
  cg__line(g, ind, "for (int64_t %s = %s; %s < %s_e; %s++) {", ov,
           regs ? gc_arena_printf(cg__arena(g), "%s_b", ov)
                : gc_arena_printf(cg__arena(g), "%s_t", ov),
           ov, ov, ov);
  ind += 2;
  for (int d = 0; d < st->ndims - 1; d++) {
    cg__open_loop(g, ind, &st->dims[d], NULL, NULL);
    ind += 2;
  }
  cx_reset(&g->x);
  tiled2d_body(g, st, ind, iv, ilo, ihi, false);
  for (int d = 0; d < st->ndims - 1; d++)
    cg__line(g, ind -= 2, "}");
  cg__line(g, ind -= 2, "}");
  cg__line(g, ind -= 2, "}");
  for (int d = 0; d < k->ndims - 1; d++)
    cg__line(g, ind -= 2, "}");
}

const char *cg__tr16_text(void) {
  return "/* the 16 x 16 transpose of 2-D tiled kernels: r[j][q] <- r[q][j] "
         "*/\n"
         "static inline void gc_tr16(gc_v16 r[16]) {\n"
         "  typedef int gc_i16 __attribute__((vector_size(64)));\n"
         "  const gc_i16 l1 = {0,16,2,18,4,20,6,22,8,24,10,26,12,28,14,30};\n"
         "  const gc_i16 h1 = {1,17,3,19,5,21,7,23,9,25,11,27,13,29,15,31};\n"
         "  const gc_i16 l2 = {0,1,16,17,4,5,20,21,8,9,24,25,12,13,28,29};\n"
         "  const gc_i16 h2 = {2,3,18,19,6,7,22,23,10,11,26,27,14,15,30,31};\n"
         "  const gc_i16 l4 = {0,1,2,3,16,17,18,19,8,9,10,11,24,25,26,27};\n"
         "  const gc_i16 h4 = {4,5,6,7,20,21,22,23,12,13,14,15,28,29,30,31};\n"
         "  const gc_i16 l8 = {0,1,2,3,4,5,6,7,16,17,18,19,20,21,22,23};\n"
         "  const gc_i16 h8 = "
         "{8,9,10,11,12,13,14,15,24,25,26,27,28,29,30,31};\n"
         "  gc_v16 t[16];\n"
         "  for (int i = 0; i < 16; i += 2) {\n"
         "    t[i] = __builtin_shuffle(r[i], r[i + 1], l1);\n"
         "    t[i + 1] = __builtin_shuffle(r[i], r[i + 1], h1);\n"
         "  }\n"
         "  for (int i = 0; i < 16; i += 4)\n"
         "    for (int j = 0; j < 2; j++) {\n"
         "      r[i + j] = __builtin_shuffle(t[i + j], t[i + j + 2], l2);\n"
         "      r[i + j + 2] = __builtin_shuffle(t[i + j], t[i + j + 2], h2);\n"
         "    }\n"
         "  for (int i = 0; i < 16; i += 8)\n"
         "    for (int j = 0; j < 4; j++) {\n"
         "      t[i + j] = __builtin_shuffle(r[i + j], r[i + j + 4], l4);\n"
         "      t[i + j + 4] = __builtin_shuffle(r[i + j], r[i + j + 4], h4);\n"
         "    }\n"
         "  for (int j = 0; j < 8; j++) {\n"
         "    r[j] = __builtin_shuffle(t[j], t[j + 8], l8);\n"
         "    r[j + 8] = __builtin_shuffle(t[j], t[j + 8], h8);\n"
         "  }\n"
         "}\n\n";
}
