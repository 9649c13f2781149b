/*
 * stream.c: streamed (non-temporal) stores for the last stage of a loop
 * kernel.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/codegen/cexpr.h"
#include "compiler/codegen/cgen_internal.h"

#define CG_STREAM_MIN_BYTES ((int64_t)32 << 20) /* a last-level cache */
#define CG_STREAM_MIN_INNER 512                 /* bytes of an inner loop */

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
void cg__find_streamed(cg *g, const sc_kernel *k) {
  const sc_stage *st = k->nstages > 0 ? &k->stages[k->nstages - 1] : NULL;
  for (int i = 0; st && i < st->nnodes; i++)
    if (decide_streamed(g, st, st->nodes[i]))
      g->streams = g->streamed[st->nodes[i]->out->id] = true;
}

/* Forgets them after the kernel. */
void cg__clear_streamed(cg *g, const sc_kernel *k) {
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

void cg__open_streamed_loop(cg *g, const sc_stage *st, const sc_dim *d, int ind,
                            bool par) {
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
  cg__fill_rands(g, st, ind + 2);
  cg__line(g, ind + 2, "#pragma omp simd%s",
           g->chk ? " reduction(|:gc_err)" : "");
  cg__line(g, ind + 2, "for (int64_t %s = %s_s; %s < %s_t; %s++) {", v, v, v, v,
           v);
  g->stream_lo = gc_arena_printf(cg__arena(g), "%s_s", v);
}

/* ... and closed: each block written out with streaming stores. */
void cg__close_streamed_loop(cg *g, const sc_stage *st, const sc_dim *d,
                             int ind) {
  const char *v = cg__sym(g, d->var);
  cg__line(g, ind + 2, "}");
  if (g->streams && st == &g->k->stages[g->k->nstages - 1])
    stream_out(g, st, ind + 2, gc_arena_printf(cg__arena(g), "%s_s", v),
               gc_arena_printf(cg__arena(g), "%s_t", v));
  cg__line(g, ind, "}");
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

const char *cg__stream_text(void) {
  return stream_text;
}
