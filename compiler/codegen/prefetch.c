/*
 * prefetch.c: software prefetch of the next outer point's rows.
 *
 * A loop kernel whose stages pass over the same row more than once
 * (LayerNorm: the statistics, then the normalized row; softmax: the max, the
 * sum of exponentials, the output) reads the row from memory in its first
 * stage and from cache in the later ones. The hardware prefetcher follows
 * demand misses only: while the later stages compute, the memory bus idles,
 * and the next row's first stage waits for memory again. So after the first
 * stage the kernel asks for the lines the first stage will read at a later
 * outer point (`gc_prefetch`, into L2), and those loads overlap the later
 * stages' arithmetic. The prefetches are spread over the last stage's loop,
 * a few lines per block of CG_STREAM_BLOCK elements (the block of the
 * streamed stores, see stream.c), the same share of each row as the block is
 * of the stage. Measured on LayerNorm over 8192 x 2048 float32 (2 threads):
 * 3.96 -> 3.08 ms with a copy bound of 2.3 ms. All of a row's prefetches at
 * once after the first stage: 3.2 ms on LayerNorm, and softmax slower than
 * with none (4.1 -> 5.2 ms: they queue behind its second stage's store
 * misses and hold up its loads); before the first stage (competing with
 * its own loads): slower than none; into L1 instead of L2: little gain.
 *
 * Which loads: those of the first stage from a buffer in memory whose index
 * is affine, covers a dense block (the block's last element minus its first
 * is the stage's point count minus one) and moves with the kernel's
 * innermost outer variable. The rows prefetched are that many outer points
 * ahead that their starts are at least CG_PREFETCH_AHEAD bytes apart (a
 * short row is done before a prefetch one row ahead arrives). Rows that
 * together exceed CG_PREFETCH_MAX bytes are not prefetched: the current row
 * must stay in cache for the later stages. Each thread runs consecutive outer
 * points (schedule(static)), so the next points are its own; a prefetch past a
 * thread's share or the buffer's end is harmless (it never faults).
 */
#include <stdlib.h>

#include "compiler/codegen/cgen_internal.h"

#define CG_PREFETCH_MAX ((int64_t)64 << 10) /* bytes of one outer point */
#define CG_PREFETCH_AHEAD 4096              /* bytes ahead, at least */

typedef struct pf_row {
  const ir_buf *buf; /* the buffer read (its own id names it in C) */
  gc_sym *first;     /* index of the row's first element */
  int64_t elems;     /* elements in the row */
  int64_t step;      /* elements between consecutive outer points */
} pf_row;

typedef struct pf_scan {
  cg *g;
  const sc_kernel *k;
  const sc_stage *st;
  gc_symmap at0, atlast; /* stage variables -> 0, -> size - 1 */
  pf_row rows[CG_MAX_PREFETCH];
  int n;
  bool skip; /* too many rows: prefetch none */
} pf_scan;

static int scan_load(const ir_expr *e, void *ctx) {
  pf_scan *p = ctx;
  if (e->op != IR_LOAD || p->g->s->local[e->load.buf->id])
    return 0;
  gc_symctx *sx = &p->g->ir->sym;
  gc_sym *ix = e->load.index;
  int outer = p->k->dims[p->k->ndims - 1].var->var;
  int64_t step;
  if (!gc_sym_is_affine(ix) || !gc_sym_linear_in(ix, outer, &step) || step <= 0)
    return 0;
  gc_sym *first = gc_sym_subst(sx, ix, &p->at0);
  gc_sym *last = gc_sym_subst(sx, ix, &p->atlast);
  gc_sym *span = first && last ? gc_sym_sub(sx, last, first) : NULL;
  int64_t points = 1;
  for (int i = 0; i < p->st->ndims; i++)
    points *= p->st->dims[i].size;
  if (!span || span->kind != GC_SYM_CONST || span->c != points - 1)
    return 0;
  for (int i = 0; i < p->n; i++)
    if (p->rows[i].buf == e->load.buf && p->rows[i].first == first)
      return 0;
  if (p->n == CG_MAX_PREFETCH) {
    p->skip = true;
    return 1;
  }
  p->rows[p->n++] = (pf_row){e->load.buf, first, points, step};
  return 0;
}

void cg__find_prefetch(cg *g, const sc_kernel *k) {
  g->npf = 0;
  const sc_stage *st = &k->stages[0];
  const sc_stage *last = &k->stages[k->nstages - 1];
  if (k->ndims < 1 || k->nstages < 2 || st->ndims < 1 || last->reduction ||
      last->ndims != 1 || last->dims[0].size < 1)
    return;
  for (int i = 0; i < st->ndims; i++)
    if (st->dims[i].size < 1) /* no points: nothing to read */
      return;
  gc_symctx *sx = &g->ir->sym;
  gc_arena *a = cg__arena(g);
  pf_scan p = {.g = g, .k = k, .st = st};
  gc_symmap ahead = {0};
  for (int i = 0; i < st->ndims; i++)
    if (!gc_symmap_set(sx, &p.at0, st->dims[i].var->var, gc_sym_const(sx, 0)) ||
        !gc_symmap_set(sx, &p.atlast, st->dims[i].var->var,
                       gc_sym_const(sx, st->dims[i].size - 1)))
      return;
  for (int i = 0; i < st->nnodes && !p.skip; i++)
    ir_expr_walk(g->s->place[st->nodes[i]->id].body, scan_load, &p);
  int64_t bytes = 0;
  for (int i = 0; i < p.n; i++)
    bytes += p.rows[i].elems * gc_dtype_size(p.rows[i].buf->dtype);
  if (p.skip || bytes > CG_PREFETCH_MAX)
    return;
  const sc_dim *outer = &k->dims[k->ndims - 1];
  for (int i = 0; i < p.n; i++) {
    const pf_row *r = &p.rows[i];
    int64_t size = gc_dtype_size(r->buf->dtype);
    int64_t dist = r->step * size;
    gc_sym *next =
        gc_symmap_set(
            sx, &ahead, outer->var->var,
            gc_sym_addc(sx, outer->var, (CG_PREFETCH_AHEAD + dist - 1) / dist))
            ? gc_sym_subst(sx, r->first, &ahead)
            : NULL;
    if (!next)
      return;
    g->pf[i].text =
        gc_arena_printf(a, "&b%d[%s]", r->buf->id, cg__sym(g, next));
    g->pf[i].bytes = r->elems * size;
  }
  g->npf = p.n;
}

void cg__emit_prefetch(cg *g, int ind, const char *lo, const char *hi,
                       int64_t n) {
  for (int i = 0; i < g->npf; i++) {
    int64_t b = g->pf[i].bytes;
    if (b % n == 0)
      cg__line(g, ind,
               "gc_prefetch((const char *)%s + %lld * %s, %lld * (%s - %s));",
               g->pf[i].text, (long long)(b / n), lo, (long long)(b / n), hi,
               lo);
    else
      cg__line(g, ind,
               "gc_prefetch((const char *)%s + %lld * %s / %lld, "
               "%lld * (%s - %s) / %lld + 1);",
               g->pf[i].text, (long long)b, lo, (long long)n, (long long)b, hi,
               lo, (long long)n);
  }
}
