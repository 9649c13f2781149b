/*
 * cgen.c: a schedule as one C translation unit. See cgen.h for the calling
 * convention.
 *
 * What a loop kernel looks like:
 *
 *   static void k3_native_layer_norm(const float *restrict b0, ...) {
 *     #pragma omp parallel for schedule(static)      (outer dims, if big)
 *     for (int64_t x12 = 0; x12 < 10; x12++) {
 *       // stage 0: reduce (welford) over [x13 < 16]
 *       ... accumulators; loops; const float r5_0 = ...;
 *       // stage 1: pointwise over [x14 < 16]
 *       #pragma omp simd
 *       for (int64_t x14 = 0; x14 < 16; x14++) { temporaries; stores }
 *     }
 *   }
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
 *
 * Kernels whose work is below CG_PARALLEL_MIN elements run on the calling
 * thread: an OpenMP fork costs microseconds.
 *
 * Streamed stores. A plain store to memory not in any cache first reads the
 * line it writes (read-for-ownership): a kernel writing a large output
 * moves 1.5 times the bytes it needs. A non-temporal store writes whole
 * lines without reading them. gcc has no way to ask for one from C loops
 * (it parses `omp simd nontemporal` and ignores it), so the last stage of
 * a loop kernel whose output is at least CG_STREAM_MIN_BYTES and contiguous
 * along the stage's inner loop computes blocks of CG_STREAM_BLOCK elements
 * into a local array (the vectorized loop, unchanged) and gc_stream copies
 * each block out with the target's non-temporal vector stores; each thread
 * fences once at the end of its share. Only the last stage: an earlier
 * stage's output is read back by a later one, from cache. A 2-thread
 * streaming loop on these machines: 78-80 GB/s against 50-57 with plain
 * stores; blocks of 16 KiB instead of 1 KiB lose that (the loads and the
 * stores no longer overlap), a fence per block halves it.
 */
#include "compiler/codegen/cgen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/codegen/cexpr.h"
#include "compiler/codegen/cgen_internal.h"

#define CG_STREAM_MIN_BYTES ((int64_t)32 << 20) /* a last-level cache */
#define CG_STREAM_BLOCK 256                     /* elements per block */
#define CG_STREAM_MIN_INNER 512                 /* bytes of an inner loop */

/* Does e read a buffer through a data index (IR_GATHER)? */
static int is_gather(const ir_expr *e, void *unused) {
  (void)unused;
  return e->op == IR_GATHER;
}

bool cg__has_gather(const ir_expr *e) {
  return ir_expr_walk(e, is_gather, NULL) != 0; /* too deep: check anyway */
}

gc_arena *cg__arena(cg *g) {
  return g->ir->a;
}

void cg__line(cg *g, int ind, const char *fmt, ...) {
  for (int i = 0; i < ind; i++)
    gc_buf_puts(&g->out, " ");
  va_list ap;
  va_start(ap, fmt);
  gc_buf_vprintf(&g->out, fmt, ap);
  va_end(ap);
  gc_buf_puts(&g->out, "\n");
}

const char *cg__sym(cg *g, const gc_sym *e) {
  return gc_sym_str(&g->ir->sym, e);
}

/* ---- comments ---- */

char *gc_c_comment_text(gc_arena *a, const char *text, size_t max) {
  size_t n = text ? strlen(text) : 0;
  if (n > max)
    n = max;
  char *o = gc_arena_alloc(a, n * 4 + 8);
  if (!o)
    return NULL;
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)text[i];
    if (ch == '*' && i + 1 < n && text[i + 1] == '/') {
      o[j++] = '*';
      o[j++] = ' ';
      continue;
    }
    if (ch == '/' && i + 1 < n && text[i + 1] == '*') {
      o[j++] = '/';
      o[j++] = ' ';
      continue;
    }
    if (ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '?') {
      o[j++] = (char)ch;
    } else {
      snprintf(o + j, 5, "\\x%02x", ch);
      j += 4;
    }
  }
  if (text && strlen(text) > max) {
    memcpy(o + j, "...", 3);
    j += 3;
  }
  o[j] = '\0';
  return o;
}

/* "%f49 = aten::native_layer_norm" of graph node i, escaped. */
static const char *gnode_text(cg *g, int id) {
  const gc_graph *gr = g->ir->g;
  if (!gr || id < 0 || id >= gr->nnodes)
    return "?";
  const gc_node *n = &gr->nodes[id];
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%%%s = %s", n->label ? n->label : "?",
           n->target ? n->target : "?");
  return gc_c_comment_text(cg__arena(g), tmp, 120);
}

/* ---- locals: loads that never read memory ---- */

int cg__which_out(const ir_node *w, const ir_buf *b) {
  return b == w->out ? 0 : b == w->out2 ? 1 : 2;
}

static const char *local_load(cx *c, const ir_expr *ld, void *ctx) {
  cg *g = ctx;
  const ir_buf *b = ld->load.buf;
  if (!g->s->local[b->id])
    return NULL;
  const ir_node *w = b->def;
  if (w->kind == IR_REDUCTION)
    return g->lane ? gc_arena_printf(cg__arena(g), "r%d_%d[%s]", w->id,
                                     cg__which_out(w, b), g->lane)
                   : gc_arena_printf(cg__arena(g), "r%d_%d", w->id,
                                     cg__which_out(w, b));
  return cx_emit(c, g->s->place[w->id].body);
}

/* ---- kernel parameters ---- */

/* Appends b (once) to a list of buffers with a written flag. */
static void add_unique(cg *g, ir_buf ***bufs, bool **written, int *n, int *cap,
                       ir_buf *b, bool write) {
  for (int i = 0; i < *n; i++)
    if ((*bufs)[i] == b) {
      (*written)[i] |= write;
      return;
    }
  if (*n == *cap) {
    int nc = *cap ? *cap * 2 : 16;
    ir_buf **nb = gc_arena_calloc(cg__arena(g), (size_t)nc, sizeof *nb);
    bool *nw = gc_arena_calloc(cg__arena(g), (size_t)nc, sizeof *nw);
    if (!nb || !nw)
      return;
    if (*n) {
      memcpy(nb, *bufs, (size_t)*n * sizeof *nb);
      memcpy(nw, *written, (size_t)*n * sizeof *nw);
    }
    *bufs = nb;
    *written = nw;
    *cap = nc;
  }
  (*bufs)[*n] = b;
  (*written)[*n] = write;
  (*n)++;
}

static void cg__add_param(cg *g, params *p, ir_buf *b, bool write) {
  if (!b || g->s->local[b->id])
    return;
  if (b->share) {
    add_unique(g, &p->alias, &p->alias_written, &p->nalias, &p->capalias, b,
               write);
    b = ir_buf_storage(b);
  }
  add_unique(g, &p->bufs, &p->written, &p->n, &p->cap, b, write);
}

typedef struct loadparams {
  cg *g;
  params *p;
} loadparams;

static int param_load(const ir_expr *e, void *ctx) {
  const loadparams *l = ctx;
  if (ir_reads_buffer(e))
    cg__add_param(l->g, l->p, e->load.buf, false);
  return 0;
}

void cg__kernel_params(cg *g, const sc_kernel *k, params *p) {
  for (int i = 0; i < k->nnodes; i++) {
    const ir_node *n = k->nodes[i];
    cg__add_param(g, p, n->out, true);
    cg__add_param(g, p, n->out2, true);
    cg__add_param(g, p, n->out3, true);
  }
  for (int i = 0; i < k->nnodes; i++) {
    loadparams l = {g, p};
    ir_expr_walk(g->s->place[k->nodes[i]->id].body, param_load, &l);
  }
  /* by buffer id: a deterministic signature */
  for (int i = 1; i < p->n; i++) {
    ir_buf *b = p->bufs[i];
    bool w = p->written[i];
    int j = i - 1;
    while (j >= 0 && p->bufs[j]->id > b->id) {
      p->bufs[j + 1] = p->bufs[j];
      p->written[j + 1] = p->written[j];
      j--;
    }
    p->bufs[j + 1] = b;
    p->written[j + 1] = w;
  }
}

/* ---- loops ---- */

const char *cg__dim_size(cg *g, const sc_dim *d) {
  if (d->size != IR_SYMBOLIC || !d->ssize)
    return gc_arena_printf(cg__arena(g), "%lld", (long long)d->size);
  return cg__sym(g, d->ssize);
}

void cg__open_loop(cg *g, int ind, const sc_dim *d, const char *lo,
                   const char *hi) {
  const char *v = cg__sym(g, d->var);
  if (lo)
    cg__line(g, ind, "for (int64_t %s = %s; %s < %s; %s++) {", v, lo, v, hi, v);
  else
    cg__line(g, ind, "for (int64_t %s = 0; %s < %s; %s++) {", v, v,
             cg__dim_size(g, d), v);
}

/* ---- pointwise stages ---- */

static int reads_storage(const ir_expr *e, void *ctx) {
  return ir_reads_buffer(e) && ir_buf_storage(e->load.buf) == ctx;
}

/* Is node n's store in stage st streamed (see the top of the file)? Only
 * the last stage of the loop kernel being generated, a buffer in memory at
 * least CG_STREAM_MIN_BYTES large and contiguous along the stage's inner
 * loop, which is long enough to be worth blocks, and memory the kernel
 * neither reads nor writes otherwise (softmax's output holds `exp` from an
 * earlier stage, an in-place output its input: their lines are in cache
 * already, and a streaming store to a cached line is slower). */
static bool decide_streamed(const cg *g, const sc_stage *st, const ir_node *n) {
  const sc_kernel *k = g->k;
  if (!k || st != &k->stages[k->nstages - 1] || st->reduction ||
      st->ndims < 1 || g->s->local[n->out->id])
    return false;
  int64_t size = gc_dtype_size(n->out->dtype);
  ir_buf *root = ir_buf_storage(n->out);
  const sc_dim *in = &st->dims[st->ndims - 1];
  int64_t c;
  if (size <= 0 || root->span < CG_STREAM_MIN_BYTES / size ||
      in->size < CG_STREAM_MIN_INNER / size ||
      !gc_sym_linear_in(g->s->place[n->id].store, in->var->var, &c) || c != 1)
    return false;
  for (int i = 0; i < k->nnodes; i++) {
    const ir_node *o = k->nodes[i];
    if ((o != n && ir_buf_storage(o->out) == root) ||
        ir_expr_walk(g->s->place[o->id].body, reads_storage, root))
      return false;
  }
  for (int i = 0; i < g->nreuse; i++)
    if (ir_buf_storage(g->reuse[i].buf) == root)
      return false;
  return true;
}

/* Decides the streamed stores of kernel k (its last stage): sets
 * g->streamed[] for their buffers and g->streams. */
static void find_streamed(cg *g, const sc_kernel *k) {
  const sc_stage *st = k->nstages > 0 ? &k->stages[k->nstages - 1] : NULL;
  for (int i = 0; st && i < st->nnodes; i++)
    if (decide_streamed(g, st, st->nodes[i]))
      g->streams = g->streamed[st->nodes[i]->out->id] = true;
}

/* Forgets them after the kernel. */
static void clear_streamed(cg *g, const sc_kernel *k) {
  for (int i = 0; i < k->nnodes; i++)
    g->streamed[k->nodes[i]->out->id] = false;
  g->streams = false;
}

static bool streamed(const cg *g, const ir_node *n) {
  return g->streamed[n->out->id];
}

void cg__emit_stores(cg *g, const sc_stage *st, int ind) {
  g->x.indent = ind;
  const char *in = st->ndims ? cg__sym(g, st->dims[st->ndims - 1].var) : NULL;
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    const sc_place *pl = &g->s->place[n->id];
    const char *v = cx_emit(&g->x, pl->body);
    if (g->stream_st == st && streamed(g, n))
      cg__line(g, ind, "gc_s%d[%s - %s] = %s;", n->out->id, in, g->stream_lo,
               v);
    else if (!g->s->local[n->out->id])
      cg__line(g, ind, "b%d[%s] = %s;", n->out->id, cg__sym(g, pl->store), v);
  }
}

/* The local arrays of `len` elements the block of each streamed store of
 * st is computed into. */
static void stream_blocks(cg *g, const sc_stage *st, int ind, int len) {
  for (int i = 0; i < st->nnodes; i++)
    if (streamed(g, st->nodes[i]))
      cg__line(g, ind, "%s gc_s%d[%d];", cx_ctype(st->nodes[i]->out->dtype),
               st->nodes[i]->out->id, len);
}

/* The streaming copy of a block to memory, the stage's inner variable
 * running from lo to hi (C expressions). */
static void stream_out(cg *g, const sc_stage *st, int ind, const char *lo,
                       const char *hi) {
  const char *v = cg__sym(g, st->dims[st->ndims - 1].var);
  cg__line(g, ind, "{");
  cg__line(g, ind + 2, "const int64_t %s = %s;", v, lo);
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    if (streamed(g, n))
      cg__line(g, ind + 2,
               "gc_stream(&b%d[%s], gc_s%d, (%s - %s) * (int64_t)sizeof "
               "*gc_s%d);",
               n->out->id, cg__sym(g, g->s->place[n->id].store), n->out->id, hi,
               lo, n->out->id);
  }
  cg__line(g, ind, "}");
}

/* Random draws of stage st filled a block at a time (gc_rand_fill): those
 * whose counter is the inner variable plus what the other loops give, and
 * whose key does not depend on the inner variable. */
typedef struct rand_find {
  cg *g;
  int var; /* the inner variable */
} rand_find;

static int uses_var(const ir_expr *e, void *ctx) {
  int var = *(const int *)ctx;
  if ((e->op == IR_LOAD || e->op == IR_GATHER) &&
      gc_sym_uses(e->load.index, var))
    return 1;
  return e->op == IR_INDEX && gc_sym_uses(e->index, var);
}

static int find_rand(const ir_expr *e, void *ctx) {
  rand_find *f = ctx;
  cg *g = f->g;
  int64_t coef;
  if (e->op != IR_RAND || e->args[1]->op != IR_INDEX ||
      !gc_sym_linear_in(e->args[1]->index, f->var, &coef) || coef != 1)
    return 0;
  int var = f->var;
  if (ir_expr_walk(e->args[0], uses_var, &var) != 0)
    return 0;
  for (int i = 0; i < g->nrand; i++)
    if (g->rand[i] == e)
      return 0;
  if (g->nrand < CG_MAX_RAND)
    g->rand[g->nrand++] = e;
  return 0;
}

static void find_rands(cg *g, const sc_stage *st) {
  g->nrand = 0;
  if (st->ndims == 0 || st->reduction)
    return;
  const gc_sym *v = st->dims[st->ndims - 1].var;
  if (v->kind != GC_SYM_VAR)
    return;
  rand_find f = {g, v->var};
  for (int i = 0; i < st->nnodes; i++)
    ir_expr_walk(g->s->place[st->nodes[i]->id].body, find_rand, &f);
}

/* At the top of a block (the inner variable v from v_s to v_t): each
 * random draw's values for the block, into gc_r<k>. */
static void fill_rands(cg *g, const sc_stage *st, int ind) {
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
static void open_streamed_loop(cg *g, const sc_stage *st, const sc_dim *d,
                               int ind, bool par) {
  const char *v = cg__sym(g, d->var);
  const char *size = cg__dim_size(g, d);
  if (par)
    cg__line(g, ind, "#pragma omp for schedule(static) nowait");
  cg__line(g, ind, "for (int64_t %s_s = 0; %s_s < %s; %s_s += %d) {", v, v,
           size, v, CG_STREAM_BLOCK);
  cg__line(g, ind + 2, "const int64_t %s_t = gc_min(%s_s + %d, %s);", v, v,
           CG_STREAM_BLOCK, size);
  stream_blocks(g, st, ind + 2, CG_STREAM_BLOCK);
  if (st == &g->k->stages[g->k->nstages - 1])
    cg__emit_prefetch(g, ind + 2, gc_arena_printf(cg__arena(g), "%s_s", v),
                      gc_arena_printf(cg__arena(g), "%s_t", v), d->size);
  fill_rands(g, st, ind + 2);
  cg__line(g, ind + 2, "#pragma omp simd%s",
           g->chk ? " reduction(|:gc_err)" : "");
  cg__line(g, ind + 2, "for (int64_t %s = %s_s; %s < %s_t; %s++) {", v, v, v, v,
           v);
  g->stream_lo = gc_arena_printf(cg__arena(g), "%s_s", v);
}

/* ... and closed: each block written out with streaming stores. */
static void close_streamed_loop(cg *g, const sc_stage *st, const sc_dim *d,
                                int ind) {
  const char *v = cg__sym(g, d->var);
  cg__line(g, ind + 2, "}");
  if (g->streams && st == &g->k->stages[g->k->nstages - 1])
    stream_out(g, st, ind + 2, gc_arena_printf(cg__arena(g), "%s_s", v),
               gc_arena_printf(cg__arena(g), "%s_t", v));
  cg__line(g, ind, "}");
}

/* ---- loads the inner loop does not vary ---- */

typedef struct hoist_find {
  cg *g;
  int var; /* the inner variable */
} hoist_find;

static int find_hoistable(const ir_expr *e, void *ctx) {
  hoist_find *f = ctx;
  cg *g = f->g;
  for (int i = 0; i < g->nrand; i++) /* filled a block at a time */
    if (g->rand[i] == e)
      return IR_WALK_SKIP;
  /* a local buffer's load is its producer's body (or an accumulator),
   * which only the loop body defines */
  if (e->op != IR_LOAD || g->s->local[e->load.buf->id] ||
      gc_sym_uses(e->load.index, f->var))
    return 0;
  for (int i = 0; i < g->nhoist; i++)
    if (g->hoist[i] == e)
      return 0;
  if (g->nhoist < CG_MAX_HOIST)
    g->hoist[g->nhoist++] = e;
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
  hoist_find f = {g, d->var->var};
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

static bool split_inner(cg *g, const sc_stage *st, int ind);

/* A pointwise stage; `par` puts the OpenMP worksharing on its outermost
 * loop. */
static void pointwise_stage(cg *g, const sc_stage *st, int ind, bool par) {
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
      open_streamed_loop(g, st, &st->dims[i], ind, par && nd == 1);
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
  if (split && !split_inner(g, st, ind)) { /* no ranges: the plain loop */
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
      close_streamed_loop(g, st, &st->dims[i], ind);
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

static void reduction_stage(cg *g, const sc_stage *st, int ind) {
  for (int i = 0; i < st->nnodes; i++)
    declare_acc(g, st->nodes[i], ind, "");
  reduce_loops(g, st, ind, NULL, NULL);
  finish_accs(g, st, ind);
}

/* ---- a big reduction with no outer loop: per-thread partials ---- */

static bool combinable(const sc_stage *st) {
  for (int i = 0; i < st->nnodes; i++)
    if (st->nodes[i]->red == IR_RED_ARGMAX ||
        st->nodes[i]->red == IR_RED_ARGMIN)
      return false;
  return st->ndims > 0;
}

static void parallel_reduction(cg *g, const sc_stage *st, int ind) {
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

/* ---- kernels ---- */

void cg__kernel_comment(cg *g, const sc_kernel *k) {
  cg__line(g, 0, "/* %s", k->name);
  int nseen = 0, *seen = gc_arena_calloc(cg__arena(g), 256, sizeof *seen);
  for (int i = 0; i < k->nnodes && seen; i++) {
    const ir_node *n = k->nodes[i];
    for (int j = 0; j < n->ngnodes; j++) {
      bool dup = false;
      for (int q = 0; q < nseen && !dup; q++)
        dup = seen[q] == n->gnodes[j];
      if (dup || nseen == 256)
        continue;
      seen[nseen++] = n->gnodes[j];
      cg__line(g, 0, " *   graph node %d: %s", n->gnodes[j],
               gnode_text(g, n->gnodes[j]));
    }
  }
  char *loops = gc_arena_strdup(cg__arena(g), "");
  for (int i = 0; i < k->ndims; i++)
    loops = gc_arena_printf(cg__arena(g), "%s%s%s < %s", loops, i ? ", " : "",
                            cg__sym(g, k->dims[i].var),
                            cg__dim_size(g, &k->dims[i]));
  cg__line(g, 0, " * outer loop [%s]; %d stage%s; work %s elements */", loops,
           k->nstages, k->nstages == 1 ? "" : "s",
           k->work == IR_SYMBOLIC && k->swork
               ? cg__sym(g, k->swork)
               : gc_arena_printf(cg__arena(g), "%lld", (long long)k->work));
}

/* ---- identical kernels ----
 * Models repeat blocks (transformer layers, ResNet stages), and their
 * kernels differ only in the names codegen invents: buffer parameters
 * (b12), loop variables (x40), temporaries (t3), accumulators (a2_mean).
 * Such a kernel is generated once; the others call it. Two kernels are
 * identical when their text, from the parameter list on, is the same after
 * renaming each invented name to its order of first appearance (a
 * consistent renaming of locals and parameters: the same function). Names
 * are recognized by prefix; a prefix missing from the list only costs a
 * missed match, never a wrong one, since no C library name starts with one
 * of these followed by digits. */
static const char *const invented[] = {
    "a",  "b",  "g",  "i",  "p",    "r",     "s",    "t",
    "v",  "w",  "x",  "z",  "pa",   "pm",    "pn",   "pq",
    "sv", "wm", "wq", "ws", "pnan", "gc_wi", "gc_wn"};

static bool invented_prefix(const char *s, size_t n) {
  for (size_t i = 0; i < sizeof invented / sizeof invented[0]; i++)
    if (strlen(invented[i]) == n && !memcmp(invented[i], s, n))
      return true;
  return false;
}

static bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_';
}

/* `text` with invented names renamed canonically; NULL when out of memory. */
static char *canonical_text(cg *g, const char *text) {
  gc_arena *a = cg__arena(g);
  gc_strmap seen;
  if (gc_strmap_init(&seen, a, 64) != 0)
    return NULL;
  gc_buf o = GC_BUF_INIT;
  int next = 0;
  for (const char *p = text; *p;) {
    if (!ident_char(*p)) {
      gc_buf_append(&o, p++, 1);
      continue;
    }
    const char *q = p;
    while (ident_char(*q))
      q++;
    size_t n = (size_t)(q - p);
    size_t pre = 0; /* letters and '_' before the first digit */
    while (pre < n && !(p[pre] >= '0' && p[pre] <= '9'))
      pre++;
    size_t dig = pre;
    while (dig < n && p[dig] >= '0' && p[dig] <= '9')
      dig++;
    if (pre == 0 || dig == pre || (dig < n && p[dig] != '_') ||
        !invented_prefix(p, pre)) {
      gc_buf_append(&o, p, n); /* a number, a keyword, a library name */
      p = q;
      continue;
    }
    /* a name seen before is looked up in place, not copied (a copy per
     * occurrence was a tenth of a big graph's compile memory) */
    char name[64];
    void *old = NULL;
    if (dig < sizeof name) {
      memcpy(name, p, dig);
      name[dig] = '\0';
      old = gc_strmap_get(&seen, name);
    }
    intptr_t id = (intptr_t)old;
    if (!old) {
      char *key = gc_arena_strndup(a, p, dig);
      id = next + 1;
      int rc = key ? gc_strmap_put(&seen, key, (void *)id, &old) : GC_ENOMEM;
      if (rc < 0 || rc == GC_ENOMEM) {
        gc_buf_free(&o);
        return NULL;
      }
      if (rc == 1) /* a long name seen before */
        id = (intptr_t)old;
      else
        next++;
    }
    gc_buf_append(&o, p, pre);
    gc_buf_printf(&o, "#%ld", (long)id);
    gc_buf_append(&o, p + dig, n - dig);
    p = q;
  }
  char *r = o.failed ? NULL : gc_arena_strdup(a, o.data ? o.data : "");
  gc_buf_free(&o);
  return r;
}

/* Moves the kernel just generated (text from `start` of g->out) into the
 * source unless an identical one exists: then only a comment stays, and
 * the kernel runs the earlier function. */
static void dedup_kernel(cg *g, const sc_kernel *k, size_t start, size_t sig) {
  const char *name = k->name;
  g->impl[k->id] = name;
  if (g->out.failed || !g->out.data)
    return;
  /* from the parameter list on: the comment and the name differ */
  const char *body = strchr(g->out.data + sig, '(');
  char *canon = body ? canonical_text(g, body) : NULL;
  if (!canon)
    return; /* out of memory: keep the kernel; codegen reports it */
  void *old = NULL;
  int rc = gc_strmap_put(&g->bodies, canon, (void *)name, &old);
  if (rc != 1)
    return;
  g->impl[k->id] = old;
  g->out.len = start;
  g->out.data[start] = '\0';
  gc_buf_printf(&g->out, "/* %s: the same code as %s */\n\n", name,
                (const char *)old);
}

static void gen_nest(cg *g, const sc_kernel *k, bool par, bool inside, int sd,
                     const char *lo, const char *hi);
static bool split_kernel(cg *g, const sc_kernel *k, bool par);
static bool colsum_kernel(cg *g, const sc_kernel *k, bool par);
static void gen_colsum(cg *g, const sc_kernel *k);

static void gen_kernel(cg *g, const sc_kernel *k) {
  size_t start = g->out.len;
  g->k = k;
  g->temp = 0;
  g->nreuse = 0;
  params p = {0};
  cg__kernel_params(g, k, &p);
  cg__kernel_comment(g, k);
  g->chk = false;
  for (int i = 0; i < k->nnodes; i++)
    g->chk |= cg__has_gather(g->s->place[k->nodes[i]->id].body);
  size_t sig = g->out.len;
  gc_buf_printf(&g->out, "static int %s(", k->name);
  for (int i = 0; i < p.n; i++)
    gc_buf_printf(&g->out, "%s%s%s *restrict b%d", i ? ", " : "",
                  p.written[i] ? "" : "const ", cx_ctype(p.bufs[i]->dtype),
                  p.bufs[i]->id);
  /* the size symbols: every kernel takes them all (a program with symbols) */
  for (int i = 0; i < g->ir->nsyms; i++)
    gc_buf_printf(&g->out, "%sint64_t %s", p.n || i ? ", " : "",
                  cg__sym(g, g->ir->syms[i]));
  if (!p.n && !g->ir->nsyms)
    gc_buf_puts(&g->out, "void");
  gc_buf_puts(&g->out, ") {\n");
  for (int i = 0; i < g->ir->nsyms; i++)
    cg__line(g, 2, "(void)%s;", cg__sym(g, g->ir->syms[i]));
  for (int i = 0; i < p.nalias; i++) {
    const ir_buf *a = p.alias[i];
    cg__line(g, 2, "%s%s *const b%d = b%d; /* in place */",
             p.alias_written[i] ? "" : "const ", cx_ctype(a->dtype), a->id,
             ir_buf_storage(p.alias[i])->id);
  }
  if (g->chk)
    cg__line(g, 2, "int gc_err = 0; /* a data index out of range */");
  bool par = k->work >= CG_PARALLEL_MIN;
  g->par_if = "";
  if (k->symbolic) {
    /* forks decided at run time; the kernel in its plain form (tiles,
     * loop splits at constants, streamed stores, prefetches and reused
     * sums are sized or proved at compile time) */
    par = true;
    g->par_if = gc_arena_printf(cg__arena(g), " if (%s >= %d)",
                                cg__sym(g, k->swork), CG_PARALLEL_MIN);
    gen_nest(g, k, par, false, -1, NULL, NULL);
    cg__line(g, 2, "return %s;", g->chk ? "gc_err" : "0");
    gc_buf_puts(&g->out, "}\n\n");
    g->par_if = "";
    dedup_kernel(g, k, start, sig);
    return;
  }
  if (colsum_kernel(g, k, par)) {
    gen_colsum(g, k);
    cg__line(g, 2, "return 0;");
    gc_buf_puts(&g->out, "}\n\n");
    dedup_kernel(g, k, start, sig);
    return;
  }
  if (cg__tile_kernel(g, k) || cg__tile2d_kernel(g, k)) {
    if (cg__tile2d_kernel(g, k))
      cg__gen_tiled2d(g, k, par);
    else
      cg__gen_tiled(g, k, par);
    cg__line(g, 2, "return %s;", g->chk ? "gc_err" : "0");
    gc_buf_puts(&g->out, "}\n\n");
    dedup_kernel(g, k, start, sig);
    return;
  }
  cg__find_reuse(g, k);
  find_streamed(g, k);
  g->stream_used |= g->streams;
  if (!split_kernel(g, k, par))
    gen_nest(g, k, par, false, -1, NULL, NULL);
  if (g->streams) /* the calling thread's stores (serial kernels) */
    cg__line(g, 2, "gc_stream_fence();");
  clear_streamed(g, k);
  cg__line(g, 2, "return %s;", g->chk ? "gc_err" : "0");
  gc_buf_puts(&g->out, "}\n\n");
  dedup_kernel(g, k, start, sig);
}

/* The loop nest of kernel k; outer dim `sd` (if >= 0) restricted to
 * [lo, hi). */
static void gen_nest(cg *g, const sc_kernel *k, bool par, bool inside, int sd,
                     const char *lo, const char *hi) {
  int ind = 2;
  bool outer_region = false;
  if (k->ndims > 0) {
    const char *collapse =
        k->ndims > 1 ? gc_arena_printf(cg__arena(g), " collapse(%d)", k->ndims)
                     : "";
    bool region = par && !inside && g->streams;
    if (region) { /* each thread fences its streamed stores */
      cg__line(g, ind, "#pragma omp parallel%s%s",
               g->chk ? " reduction(|:gc_err)" : "", g->par_if);
      cg__line(g, ind, "{");
      ind += 2;
    }
    if (par && (inside || region)) /* in one parallel region */
      cg__line(g, ind, "#pragma omp for schedule(static)%s nowait", collapse);
    else if (par)
      cg__line(g, ind, "#pragma omp parallel for schedule(static)%s%s%s",
               collapse, g->chk ? " reduction(|:gc_err)" : "", g->par_if);
    for (int i = 0; i < k->ndims; i++) {
      cg__open_loop(g, ind, &k->dims[i], i == sd ? lo : NULL,
                    i == sd ? hi : NULL);
      ind += 2;
    }
    outer_region = par && !inside && g->streams;
    par = false;
  }
  /* here, not once per kernel: split_kernel renames the outer variables */
  if (k->symbolic)
    g->npf = 0;
  else
    cg__find_prefetch(g, k);
  for (int s = 0; s < k->nstages; s++) {
    const sc_stage *st = &k->stages[s];
    char dims[256] = "";
    size_t len = 0;
    for (int i = 0; i < st->ndims && len < sizeof dims - 64; i++)
      len += (size_t)snprintf(dims + len, sizeof dims - len, "%s%s < %s",
                              i ? ", " : "", cg__sym(g, st->dims[i].var),
                              cg__dim_size(g, &st->dims[i]));
    cg__line(g, ind, "/* stage %d: %s over [%s] */", s,
             st->reduction ? "reduce" : "pointwise", dims);
    if (st->reduction) {
      bool alone = k->ndims == 0 && k->nstages == 1 && par && combinable(st);
      if (alone)
        parallel_reduction(g, st, ind);
      else
        reduction_stage(g, st, ind);
    } else {
      pointwise_stage(g, st, ind, par && k->nstages == 1 && st->ndims > 0);
    }
  }
  for (int i = 0; i < k->ndims; i++)
    cg__line(g, ind -= 2, "}");
  if (outer_region) {
    cg__line(g, ind, "gc_stream_fence();");
    cg__line(g, ind -= 2, "}");
  }
}

/* ---- loops split into ranges ----
 *
 * cat selects its input by comparing the index along the concatenated dim
 * with each input's end (a chain of where()s), and every element loads
 * from every input at a clamped index; constant_pad_nd compares the index
 * with the padding's bounds. When that dim is an outer loop of a kernel
 * (whose outer points are independent), the loop splits at those bounds: one
 * loop nest per range, each with a variable whose range is that range, so the
 * comparisons fold to constants (ir.c's make_op), the where()s to one arm and
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
 * split_kernel splits outer loops: one loop per range, each with its own
 * variable, so the comparisons fold. A cat along a channels-last tensor's
 * channels is a cat along its innermost loop: densenet121's cat + batch
 * norm + relu kernels loaded every input at every element (clamped) without
 * this. False (nothing emitted) when there is nothing to split. */
static bool split_inner(cg *g, const sc_stage *st, int ind) {
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

static bool split_kernel(cg *g, const sc_kernel *k, bool par) {
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
      gen_nest(g, k, par, true, d,
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

/* ---- column sums ----
 *
 * A float32 sum over the rows of a [R, W] operand (x.sum(0), a bias's
 * gradient) is a tiled kernel by default: each thread takes tiles of 64
 * columns and walks all R rows of them, 256 bytes a row apart by 4 KiB or
 * more. With W small enough for a row of partial sums to stay in L1, the
 * rows split between threads instead: each thread adds whole rows (one
 * contiguous stream) into float partials over blocks of COLSUM_BLOCK rows,
 * added into its own double row; the threads' rows are then added in
 * thread order (deterministic for a given thread count). 8192 x 2048:
 * 3.3 -> 2.7 ms in a standalone C test. */

#define COLSUM_MAX_W 2048 /* columns: the partials fit L1 */
#define COLSUM_MIN_R 1024 /* rows worth splitting */
#define COLSUM_BLOCK 256  /* rows per float block */
#define COLSUM_THREADS 8  /* partial rows on the caller's stack */
#define COLSUM_NODES 2    /* sums in one kernel (2 x 8 x 2048 doubles) */
#define COLSUM_ROWS 8     /* rows added together before the partial row */

static int contiguous_in(const ir_expr *e, void *ctx) {
  const int *var = ctx;
  int64_t c;
  if (e->op == IR_LOAD && gc_sym_linear_in(e->load.index, *var, &c) && c == 1)
    return 1;
  return 0;
}

static bool colsum_kernel(cg *g, const sc_kernel *k, bool par) {
  if (!par || k->call || k->ndims != 1 || k->nstages != 1 || g->chk)
    return false;
  const sc_stage *st = &k->stages[0];
  if (!st->reduction || st->ndims != 1 || st->nnodes < 1 ||
      st->nnodes > COLSUM_NODES || k->nnodes != st->nnodes ||
      k->dims[0].size < 16 || k->dims[0].size > COLSUM_MAX_W ||
      st->dims[0].size < COLSUM_MIN_R)
    return false;
  int var = k->dims[0].var->var;
  bool contiguous = false;
  for (int i = 0; i < st->nnodes; i++) {
    const ir_node *n = st->nodes[i];
    if (!cg__float32_sum(n) || cg__val_dtype(g, n) != GC_DTYPE_FLOAT32 ||
        g->s->local[n->out->id])
      return false;
    contiguous |=
        ir_expr_walk(g->s->place[n->id].body, contiguous_in, &var) == 1;
  }
  return contiguous;
}

static void gen_colsum(cg *g, const sc_kernel *k) {
  const sc_stage *st = &k->stages[0];
  const char *x = cg__sym(g, k->dims[0].var), *y = cg__sym(g, st->dims[0].var);
  long long w = (long long)k->dims[0].size, r = (long long)st->dims[0].size;
  int nn = st->nnodes, ind = 2;
  cg__line(g, ind, "/* column sum: rows split between threads */");
  for (int i = 0; i < nn; i++)
    cg__line(g, ind, "double gc_cs%d[%d][%lld];", i, COLSUM_THREADS, w);
  cg__line(g, ind, "int gc_nt = 1;");
  cg__line(g, ind,
           "#pragma omp parallel num_threads(omp_get_max_threads() < %d ? "
           "omp_get_max_threads() : %d)",
           COLSUM_THREADS, COLSUM_THREADS);
  cg__line(g, ind, "{");
  ind += 2;
  cg__line(g, ind,
           "const int gc_t = omp_get_thread_num(), gc_n = "
           "omp_get_num_threads();");
  cg__line(g, ind, "#pragma omp single");
  cg__line(g, ind, "gc_nt = gc_n;");
  cg__line(g, ind,
           "const int64_t gc_lo = %lldLL * gc_t / gc_n, gc_hi = %lldLL * "
           "(gc_t + 1) / gc_n;",
           r, r);
  for (int i = 0; i < nn; i++) {
    cg__line(g, ind, "double *gc_acc%d = gc_cs%d[gc_t];", i, i);
    cg__line(g, ind, "float gc_blk%d[%lld];", i, w);
  }
  cg__line(g, ind, "for (int64_t %s = 0; %s < %lld; %s++) {", x, x, w, x);
  for (int i = 0; i < nn; i++)
    cg__line(g, ind + 2, "gc_acc%d[%s] = 0;", i, x);
  cg__line(g, ind, "}");
  cg__line(g, ind, "for (int64_t gc_rb = gc_lo; gc_rb < gc_hi; gc_rb += %d) {",
           COLSUM_BLOCK);
  ind += 2;
  cg__line(g, ind,
           "const int64_t gc_re = gc_rb + %d < gc_hi ? gc_rb + %d : gc_hi;",
           COLSUM_BLOCK, COLSUM_BLOCK);
  cg__line(g, ind, "for (int64_t %s = 0; %s < %lld; %s++) {", x, x, w, x);
  for (int i = 0; i < nn; i++)
    cg__line(g, ind + 2, "gc_blk%d[%s] = 0;", i, x);
  cg__line(g, ind, "}");
  /* COLSUM_ROWS rows at a time: their sum is added to the partial row
   * once (one load and store of it per COLSUM_ROWS elements read) */
  cg__line(g, ind, "int64_t gc_r = gc_rb;");
  cg__line(g, ind, "for (; gc_r + %d <= gc_re; gc_r += %d) {", COLSUM_ROWS,
           COLSUM_ROWS);
  cg__line(g, ind + 2, "#pragma omp simd");
  cg__line(g, ind + 2, "for (int64_t %s = 0; %s < %lld; %s++) {", x, x, w, x);
  for (int i = 0; i < nn; i++)
    cg__line(g, ind + 4, "float gc_u%d = 0;", i);
  for (int row = 0; row < COLSUM_ROWS; row++) {
    cg__line(g, ind + 4, "{");
    cg__line(g, ind + 6, "const int64_t %s = gc_r + %d;", y, row);
    cx_reset(&g->x);
    g->x.indent = ind + 6;
    for (int i = 0; i < nn; i++) {
      const char *v = cx_emit(&g->x, g->s->place[st->nodes[i]->id].body);
      cg__line(g, ind + 6, "gc_u%d += %s;", i, v);
    }
    cg__line(g, ind + 4, "}");
  }
  for (int i = 0; i < nn; i++)
    cg__line(g, ind + 4, "gc_blk%d[%s] += gc_u%d;", i, x, i);
  cg__line(g, ind + 2, "}");
  cg__line(g, ind, "}");
  cg__line(g, ind, "for (int64_t %s = gc_r; %s < gc_re; %s++) {", y, y, y);
  cg__line(g, ind + 2, "#pragma omp simd");
  cg__line(g, ind + 2, "for (int64_t %s = 0; %s < %lld; %s++) {", x, x, w, x);
  cx_reset(&g->x);
  g->x.indent = ind + 4;
  for (int i = 0; i < nn; i++) {
    const char *v = cx_emit(&g->x, g->s->place[st->nodes[i]->id].body);
    cg__line(g, ind + 4, "gc_blk%d[%s] += %s;", i, x, v);
  }
  cg__line(g, ind + 2, "}");
  cg__line(g, ind, "}");
  cg__line(g, ind, "for (int64_t %s = 0; %s < %lld; %s++) {", x, x, w, x);
  for (int i = 0; i < nn; i++)
    cg__line(g, ind + 2, "gc_acc%d[%s] += gc_blk%d[%s];", i, x, i, x);
  cg__line(g, ind, "}");
  ind -= 2;
  cg__line(g, ind, "}");
  ind -= 2;
  cg__line(g, ind, "}");
  cg__line(g, ind, "for (int64_t %s = 0; %s < %lld; %s++) {", x, x, w, x);
  for (int i = 0; i < nn; i++) {
    const ir_node *n = st->nodes[i];
    cg__line(g, ind + 2, "{ double gc_s = 0;");
    cg__line(g, ind + 2,
             "  for (int gc_k = 0; gc_k < gc_nt; gc_k++) gc_s += "
             "gc_cs%d[gc_k][%s];",
             i, x);
    cg__line(g, ind + 2, "  b%d[%s] = (float)gc_s; }", n->out->id,
             cg__sym(g, g->s->place[n->id].store));
  }
  cg__line(g, ind, "}");
}

/* ---- segments and slots ---- */

/* ---- BLAS calls in segments ----
 *
 * A batched product whose operands BLAS can read (sc_blas_call) runs in
 * generated code: one sgemm_/dgemm_ (the Fortran BLAS the client's torch
 * calls too) per batch item, the items split between the OpenMP team's
 * threads. ATen's bmm (torch 1.13 without MKL) loops over the items on one
 * thread, and OpenBLAS runs a product of at most 64^3 multiply-adds on one
 * thread, so a [64, 64, 64] bmm used one core of two; inside a parallel
 * region OpenBLAS runs single-threaded, the team's threads take the items.
 * 64 x [64x64] x [64x64]: 0.30 -> 0.16 ms; 96 x [256x64] x [64x256]:
 * 7.2 -> 5.1 ms; 96 x [256x256] x [256x64]: 12.8 -> 5.9 ms (standalone C,
 * 2 threads). Each product is the same library call on the same operands
 * as ATen's, so results are eager's. Row-major C = A B is column-major
 * C^T = B^T A^T: BLAS gets B first. */

/* The parameters of a call kernel generated code makes: a bmm's self,
 * mat2 and out; a scan's self, out and (cummax, cummin) out2; a scatter's
 * self (unless a constant), index, source and out; a bilinear backward's
 * grad_output and out. */
static void call_params(cg *g, const sc_kernel *k, params *p) {
  const ir_node *c = k->call;
  const ir_view *a, *b, *self = NULL;
  if (c->scatter)
    ir_scatter_views(c, &self, &a, &b);
  else if (c->interp)
    a = ir_call_view(c, "grad_output"), b = NULL;
  else if (k->gemm) {
    a = k->gemm->a, b = k->gemm->b;
    /* beta 0: self is not read */
    self = k->gemm->beta != 0 ? k->gemm->bias : NULL;
  } else
    sc_bmm_operands(c, &a, &b);
  /* in the compile's arena: daemon workers generate code concurrently */
  ir_buf **bufs = gc_arena_calloc(cg__arena(g), 4, sizeof *bufs);
  bool *written = gc_arena_calloc(cg__arena(g), 4, sizeof *written);
  if (!bufs || !written || (c->scatter && (!a || !b)) || (c->interp && !a)) {
    g->out.failed = true;
    *p = (params){0};
    return;
  }
  /* by storage, as loop kernels' parameters (a buffer computed in place
   * of another lives at its storage's address) */
  int n = 0;
  if (self)
    bufs[n++] = ir_buf_storage(self->buf);
  bufs[n++] = ir_buf_storage(a->buf);
  if (!c->scan && !c->interp)
    bufs[n++] = ir_buf_storage(b->buf);
  written[n] = true;
  bufs[n++] = ir_buf_storage(c->out);
  if (c->scan && c->out2) {
    written[n] = true;
    bufs[n++] = ir_buf_storage(c->out2);
  }
  *p = (params){.bufs = bufs, .written = written, .n = n};
}

static void gen_blas(cg *g, const sc_kernel *k) {
  const ir_node *n = k->call;
  const ir_view *a, *b;
  sc_bmm_operands(n, &a, &b);
  const ir_buf *o = n->out;
  bool f64 = o->dtype == GC_DTYPE_FLOAT64;
  const char *t = f64 ? "double" : "float", *fn = f64 ? "dgemm_" : "sgemm_";
  char opa, opb;
  int64_t lda, ldb;
  sc_blas_layout(a, &opa, &lda); /* sc_blas_call checked both */
  sc_blas_layout(b, &opb, &ldb);
  long long B = (long long)o->sizes[0], M = (long long)o->sizes[1],
            N = (long long)o->sizes[2], K = (long long)a->sizes[2];
  const char *name = gc_arena_printf(cg__arena(g), "gc_bmm%d", k->id);
  g->impl[k->id] = name;
  gc_buf_printf(&g->out,
                "/* %s: aten::bmm.out, %lld x [%lld x %lld] x [%lld x %lld] "
                "through BLAS, items split between threads */\n",
                name, B, M, K, K, N);
  gc_buf_printf(&g->out,
                "void %s(const char *, const char *, const int *, const int *, "
                "const int *, const %s *, const %s *, const int *, const %s *, "
                "const int *, const %s *, %s *, const int *);\n",
                fn, t, t, t, t, t);
  gc_buf_printf(&g->out,
                "static int %s(const %s *restrict a, const %s *restrict b, "
                "%s *restrict c) {\n",
                name, t, t, t);
  cg__line(g, 2, "const int m = %lld, n = %lld, k = %lld;", M, N, K);
  cg__line(g, 2, "const int lda = %lld, ldb = %lld, ldc = %lld;",
           (long long)lda, (long long)ldb, (long long)o->strides[1]);
  cg__line(g, 2, "const %s one = 1, zero = 0;", t);
  cg__line(g, 2, "#pragma omp parallel for schedule(static)");
  cg__line(g, 2, "for (int64_t i = 0; i < %lld; i++)", B);
  cg__line(g, 4,
           "%s(\"%c\", \"%c\", &n, &m, &k, &one, b + %lld + %lld * i, &ldb, "
           "a + %lld + %lld * i, &lda, &zero, c + %lld * i, &ldc);",
           fn, opb, opa, (long long)b->offset, (long long)b->strides[0],
           (long long)a->offset, (long long)a->strides[0],
           (long long)o->strides[0]);
  cg__line(g, 2, "return 0;");
  gc_buf_puts(&g->out, "}\n\n");
  g->src->uses_blas = true;
}

/* ---- matrix products through oneDNN ----
 *
 * A float32 mm or addmm (sc_gemm_of) is one call of oneDNN's sgemm from
 * generated code, when the client's process has loaded oneDNN
 * (libdnnl.so.2: Debian's torch links it for its convolutions) and the
 * target has AVX-512. OpenBLAS 0.3.21, which ATen's products call, runs
 * its AVX2 (Haswell) kernels on AMD's AVX-512 CPUs; oneDNN's sgemm runs
 * AVX-512 code there: 1.2-2.3x OpenBLAS's speed over the shapes of the
 * training benchmarks at 2 threads (docs/codegen.md has the table). The
 * results are not eager's bits: the sums are in another order. addmm
 * copies self (the bias) into C first, broadcast, and asks for C = alpha
 * A B + beta C, as ATen does with OpenBLAS; beta 0 reads no self and no
 * C (oneDNN's beta 0 ignores C, NaN included). Called outside any
 * parallel region, oneDNN splits the product between the OpenMP team's
 * threads (torch's setting). A failing call (out of memory for its
 * scratch) makes the segment return GC_SEG_ELIBRARY (call_kernel). */
static void gen_gemm(cg *g, const sc_kernel *k) {
  const sc_gemm *mm = k->gemm;
  const ir_node *n = k->call;
  const ir_buf *o = n->out;
  const char *name = gc_arena_printf(cg__arena(g), "gc_mm%d", k->id);
  g->impl[k->id] = name;
  bool copy = mm->beta != 0 && mm->bias;
  gc_buf_printf(&g->out,
                "/* %s: %s, [%lld x %lld] x [%lld x %lld] through oneDNN's "
                "sgemm */\n",
                name, n->op->schema->qualified, (long long)mm->m,
                (long long)mm->k, (long long)mm->k, (long long)mm->n);
  gc_buf_puts(&g->out,
              "int dnnl_sgemm(char, char, int64_t, int64_t, int64_t, float, "
              "const float *, int64_t, const float *, int64_t, float, float *, "
              "int64_t);\n");
  gc_buf_printf(&g->out,
                "static int %s(%sconst float *restrict a, "
                "const float *restrict b, float *restrict c) {\n",
                name, copy ? "const float *restrict self, " : "");
  long long ldc = (long long)o->strides[0];
  if (copy) {
    const ir_view *v = mm->bias;
    cg__line(g, 2, "#pragma omp parallel for schedule(static) if (%d)",
             mm->m * mm->n >= (1 << 16));
    cg__line(g, 2, "for (int64_t i = 0; i < %lld; i++)", (long long)mm->m);
    cg__line(g, 4, "for (int64_t j = 0; j < %lld; j++)", (long long)mm->n);
    cg__line(g, 6, "c[i * %lld + j] = self[%lld + i * %lld + j * %lld];", ldc,
             (long long)v->offset, (long long)mm->bias_sr,
             (long long)mm->bias_sc);
  }
  cg__line(g, 2,
           "return dnnl_sgemm('%c', '%c', %lld, %lld, %lld, %a, a + %lld, "
           "%lld, b + %lld, %lld, %a, c, %lld) != 0;",
           mm->opa, mm->opb, (long long)mm->m, (long long)mm->n,
           (long long)mm->k, (double)(float)mm->alpha, (long long)mm->a->offset,
           (long long)mm->lda, (long long)mm->b->offset, (long long)mm->ldb,
           copy ? (double)(float)mm->beta : 0.0, ldc);
  gc_buf_puts(&g->out, "}\n\n");
  g->src->uses_dnnl = true;
}

static void assign_slots(cg *g) {
  gc_csource *src = g->src;
  const sc_schedule *s = g->s;
  src->nslots = 1; /* slot 0: the arena */
  for (int k = 0; k < s->nkernels; k++) {
    const sc_kernel *kn = s->kernels[k];
    if (sc_aten_call(kn))
      continue;
    params p = {0};
    if (kn->in_c)
      call_params(g, kn, &p);
    else
      cg__kernel_params(g, kn, &p);
    for (int i = 0; i < p.n; i++) {
      ir_buf *b = p.bufs[i];
      if (b->kind == IR_BUF_ARENA || src->buf_slot[b->id])
        continue;
      src->buf_slot[b->id] = src->nslots;
      src->slots[src->nslots++] = b;
    }
  }
}

/* gc_stream and gc_stream_fence, defined when a kernel streams: the
 * widest non-temporal vector store -march allows (aligned; the block's
 * unaligned ends plain), memcpy where there is none. */
static const char stream_text[] =
    "/* streamed stores (non-temporal: no read of the lines written) */\n"
    "#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__)\n"
    "#include <immintrin.h>\n"
    "#if defined(__AVX512F__)\n"
    "#define GC_SV 64\n"
    "#define GC_SV_STORE(d, s) _mm512_stream_si512((void *)(d), "
    "_mm512_loadu_si512((const void *)(s)))\n"
    "#elif defined(__AVX__)\n"
    "#define GC_SV 32\n"
    "#define GC_SV_STORE(d, s) _mm256_stream_si256((__m256i *)(d), "
    "_mm256_loadu_si256((const __m256i *)(s)))\n"
    "#else\n"
    "#define GC_SV 16\n"
    "#define GC_SV_STORE(d, s) _mm_stream_si128((__m128i *)(d), "
    "_mm_loadu_si128((const __m128i *)(s)))\n"
    "#endif\n"
    "#endif\n"
    "static inline void gc_stream(void *restrict dst, const void *restrict "
    "src, int64_t n) {\n"
    "  char *d = (char *)dst;\n"
    "  const char *s = (const char *)src;\n"
    "#ifdef GC_SV\n"
    "  int64_t head = (int64_t)((GC_SV - ((uintptr_t)d & (GC_SV - 1))) & "
    "(GC_SV - 1));\n"
    "  if (head > n)\n"
    "    head = n;\n"
    "  __builtin_memcpy(d, s, (size_t)head);\n"
    "  d += head, s += head, n -= head;\n"
    "  for (; n >= GC_SV; n -= GC_SV, d += GC_SV, s += GC_SV)\n"
    "    GC_SV_STORE(d, s);\n"
    "#endif\n"
    "  __builtin_memcpy(d, s, (size_t)n);\n"
    "}\n"
    "static inline void gc_stream_fence(void) {\n"
    "#ifdef GC_SV\n"
    "  _mm_sfence();\n"
    "#endif\n"
    "}\n";

static void call_kernel(cg *g, const sc_kernel *k) {
  params p = {0};
  if (k->in_c)
    call_params(g, k, &p);
  else
    cg__kernel_params(g, k, &p);
  gc_buf_printf(&g->out, "  if (%s(", g->impl[k->id]);
  for (int i = 0; i < p.n; i++) {
    ir_buf *b = p.bufs[i];
    const char *t = cx_ctype(b->dtype);
    if (b->kind == IR_BUF_ARENA && b->arena_offset == IR_SYMBOLIC)
      gc_buf_printf(&g->out, "%s(%s *)(A + %s)", i ? ", " : "", t,
                    cg__sym(g, b->sarena_offset));
    else if (b->kind == IR_BUF_ARENA)
      gc_buf_printf(&g->out, "%s(%s *)(A + %lld)", i ? ", " : "", t,
                    (long long)b->arena_offset);
    else
      gc_buf_printf(&g->out, "%s(%s *)p[%d]", i ? ", " : "", t,
                    g->src->buf_slot[b->id]);
  }
  if (!k->call) /* loop kernels take the size symbols */
    for (int i = 0; i < g->ir->nsyms; i++)
      gc_buf_printf(&g->out, "%s%s", p.n || i ? ", " : "",
                    cg__sym(g, g->ir->syms[i]));
  /* a kernel fails on an index out of range; a product when oneDNN does */
  gc_buf_printf(&g->out, "))\n    return %d;\n",
                k->gemm ? GC_SEG_ELIBRARY : GC_SEG_EINDEX);
}

/* Segments: the kernels between two ATen calls. A product through oneDNN
 * (sc_kernel.gemm) is a segment of its own, where it was an ATen call: the
 * runtime allocates the outputs a segment writes before running it
 * (docs/artifact.md), so the memory of the outputs of the kernels after the
 * product is taken only after it, and the product's result only after the
 * kernels before it have run and dropped the inputs they last read (a
 * backward's incoming gradient, which a donated call gives to the result:
 * compiled/native.py Donation). Merged into one segment, a training
 * step's peak heap rose by 5% (bench-train's encoder layer). */
static void gen_segments(cg *g) {
  const sc_schedule *s = g->s;
  gc_csource *src = g->src;
  int seg = -1;
  bool open = false, alone = false; /* the open segment is a product's */
  for (int k = 0; k < s->nkernels; k++) {
    const sc_kernel *kn = s->kernels[k];
    bool own = kn->gemm != NULL;
    if (sc_aten_call(kn) || (open && (own || alone))) {
      if (open)
        gc_buf_puts(&g->out, "  return 0;\n}\n\n");
      open = false;
      if (sc_aten_call(kn)) {
        src->kernel_segment[k] = -1;
        continue;
      }
    }
    alone = own;
    if (!open) {
      seg++;
      if (g->ir->nsyms) {
        gc_buf_printf(&g->out,
                      "/* segment %d: the kernels between two ATen calls */\n"
                      "int gc_seg%d(void **p, const int64_t *s) {\n"
                      "  char *A = (char *)p[0];\n  (void)A;\n",
                      seg, seg);
        for (int i = 0; i < g->ir->nsyms; i++) {
          const char *v = cg__sym(g, g->ir->syms[i]);
          gc_buf_printf(&g->out, "  const int64_t %s = s[%d];\n  (void)%s;\n",
                        v, i, v);
        }
      } else {
        gc_buf_printf(&g->out,
                      "/* segment %d: the kernels between two ATen calls */\n"
                      "int gc_seg%d(void **p) {\n"
                      "  char *A = (char *)p[0];\n  (void)A;\n",
                      seg, seg);
      }
      open = true;
    }
    src->kernel_segment[k] = seg;
    call_kernel(g, kn);
  }
  if (open)
    gc_buf_puts(&g->out, "  return 0;\n}\n\n");
  src->nsegments = seg + 1;
}

int gc_codegen(ir_graph *ir, const sc_schedule *s, const char *key_hex,
               gc_csource *out, gc_error *err) {
  memset(out, 0, sizeof *out);
  cg g = {.ir = ir, .s = s, .src = out, .err = err};
  g.out = (gc_buf)GC_BUF_INIT;
  out->kernel_segment =
      gc_arena_calloc(ir->a, (size_t)s->nkernels + 1, sizeof(int));
  out->slots = gc_arena_calloc(ir->a, (size_t)ir->nbufs + 2, sizeof(ir_buf *));
  out->buf_slot = gc_arena_calloc(ir->a, (size_t)ir->nbufs + 1, sizeof(int));
  g.impl = gc_arena_calloc(ir->a, (size_t)s->nkernels + 1, sizeof *g.impl);
  g.streamed =
      gc_arena_calloc(ir->a, (size_t)ir->nbufs + 1, sizeof *g.streamed);
  if (!out->kernel_segment || !out->slots || !out->buf_slot || !g.impl ||
      !g.streamed || gc_strmap_init(&g.bodies, ir->a, 64) != 0)
    return gc_errorf(err, GC_ENOMEM, "codegen: out of memory");
  g.x.ir = ir;
  g.x.out = &g.out;
  g.x.local = local_load;
  g.x.local_ctx = &g;
  g.x.next_temp = &g.temp;
  gc_buf_printf(&g.out,
                "/* Generated by compiled (compiler build %s)%s%s.\n"
                " * Do not edit: docs/codegen.md explains how to read it. */\n",
                gc_build_id(), key_hex ? " for key " : "",
                key_hex ? key_hex : "");
  gc_buf_puts(&g.out, cx_prelude());
  gc_buf_printf(&g.out, "int gc_abi(void) { return %d; }\n\n",
                ir->nsyms ? GC_ABI_SYMBOLIC : GC_ABI_VERSION);
  assign_slots(&g);
  for (int k = 0; k < s->nkernels; k++)
    if (!s->kernels[k]->call) {
      gen_kernel(&g, s->kernels[k]);
      out->nkernels++;
    } else if (s->kernels[k]->in_c) {
      if (s->kernels[k]->call->scan) {
        cg__gen_scan(&g, s->kernels[k]);
        out->nkernels++;
      } else if (s->kernels[k]->call->scatter) {
        cg__gen_scatter(&g, s->kernels[k]);
        out->nkernels++;
      } else if (s->kernels[k]->call->interp) {
        cg__gen_interp_backward(&g, s->kernels[k]);
        out->nkernels++;
      } else if (s->kernels[k]->gemm)
        gen_gemm(&g, s->kernels[k]);
      else
        gen_blas(&g, s->kernels[k]);
    }
  gen_segments(&g);
  out->uses_vector_math = g.x.vector_math;
  out->uses_sleef = g.x.sleef != 0;
  if (g.tr16)
    gc_buf_puts(&g.out, cg__tr16_text());
  if (g.stream_used)
    gc_buf_puts(&g.out, stream_text);
  const char *wrap = cx_sleef_wrappers(ir->a, g.x.sleef);
  if (!wrap)
    g.out.failed = true;
  else
    gc_buf_puts(&g.out, wrap);
  if (g.out.failed || ir->oom || ir->sym.oom) {
    gc_buf_free(&g.out);
    return gc_errorf(err, GC_ENOMEM, "codegen: out of memory");
  }
  out->len = g.out.len;
  out->text = gc_arena_strndup(ir->a, g.out.data ? g.out.data : "", g.out.len);
  gc_buf_free(&g.out);
  return out->text ? 0 : gc_errorf(err, GC_ENOMEM, "codegen: out of memory");
}
