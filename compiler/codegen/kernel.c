/*
 * kernel.c: one kernel of the schedule as a C function: its comment, its
 * signature, and its loop nest of stages.
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
 * Kernels whose work is below CG_PARALLEL_MIN elements run on the calling
 * thread: an OpenMP fork costs microseconds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/codegen/cexpr.h"
#include "compiler/codegen/cgen_internal.h"

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
               cg__gnode_text(g, n->gnodes[j]));
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

void cg__gen_kernel(cg *g, const sc_kernel *k) {
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
    cg__gen_nest(g, k, par, false, -1, NULL, NULL);
    cg__line(g, 2, "return %s;", g->chk ? "gc_err" : "0");
    gc_buf_puts(&g->out, "}\n\n");
    g->par_if = "";
    cg__dedup_kernel(g, k, start, sig);
    return;
  }
  if (cg__colsum_kernel(g, k, par)) {
    cg__gen_colsum(g, k);
    cg__line(g, 2, "return 0;");
    gc_buf_puts(&g->out, "}\n\n");
    cg__dedup_kernel(g, k, start, sig);
    return;
  }
  if (cg__tile_kernel(g, k) || cg__tile2d_kernel(g, k)) {
    if (cg__tile2d_kernel(g, k))
      cg__gen_tiled2d(g, k, par);
    else
      cg__gen_tiled(g, k, par);
    cg__line(g, 2, "return %s;", g->chk ? "gc_err" : "0");
    gc_buf_puts(&g->out, "}\n\n");
    cg__dedup_kernel(g, k, start, sig);
    return;
  }
  cg__find_reuse(g, k);
  cg__find_streamed(g, k);
  g->stream_used |= g->streams;
  if (!cg__split_kernel(g, k, par))
    cg__gen_nest(g, k, par, false, -1, NULL, NULL);
  if (g->streams) /* the calling thread's stores (serial kernels) */
    cg__line(g, 2, "gc_stream_fence();");
  cg__clear_streamed(g, k);
  cg__line(g, 2, "return %s;", g->chk ? "gc_err" : "0");
  gc_buf_puts(&g->out, "}\n\n");
  cg__dedup_kernel(g, k, start, sig);
}

/* The loop nest of kernel k; outer dim `sd` (if >= 0) restricted to
 * [lo, hi). */
void cg__gen_nest(cg *g, const sc_kernel *k, bool par, bool inside, int sd,
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
  /* here, not once per kernel: cg__split_kernel renames the outer variables */
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
      bool alone =
          k->ndims == 0 && k->nstages == 1 && par && cg__combinable(st);
      if (alone)
        cg__parallel_reduction(g, st, ind);
      else
        cg__reduction_stage(g, st, ind);
    } else {
      cg__pointwise_stage(g, st, ind, par && k->nstages == 1 && st->ndims > 0);
    }
  }
  for (int i = 0; i < k->ndims; i++)
    cg__line(g, ind -= 2, "}");
  if (outer_region) {
    cg__line(g, ind, "gc_stream_fence();");
    cg__line(g, ind -= 2, "}");
  }
}
