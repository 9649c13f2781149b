/*
 * cgen.c: a schedule as one C translation unit. See cgen.h for the calling
 * convention.
 */
#include "compiler/codegen/cgen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/codegen/cexpr.h"
#include "compiler/codegen/cgen_internal.h"

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
const char *cg__gnode_text(cg *g, int id) {
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
  int cb = *cap, cw = *cap; /* the two arrays grow together */
  ir_buf **nb = gc_arena_grow(cg__arena(g), *bufs, *n, &cb, 16, sizeof *nb);
  bool *nw = nb ? gc_arena_grow(cg__arena(g), *written, *n, &cw, 16, sizeof *nw)
                : NULL;
  if (!nw)
    return;
  *bufs = nb;
  *written = nw;
  *cap = cb;
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

/* The function of call kernel k that generated code makes (in_c). */
static void gen_call(cg *g, const sc_kernel *k, gc_csource *out) {
  switch (k->call->kind) {
  case IR_SCAN:
    cg__gen_scan(g, k);
    out->nkernels++;
    break;
  case IR_SCATTER:
    cg__gen_scatter(g, k);
    out->nkernels++;
    break;
  case IR_INTERP:
    cg__gen_interp_backward(g, k);
    out->nkernels++;
    break;
  case IR_EXTERN: /* a product */
    if (k->gemm)
      cg__gen_gemm(g, k);
    else
      cg__gen_blas(g, k);
    break;
  case IR_POINTWISE: /* (not call nodes) */
  case IR_REDUCTION:
  case IR_FALLBACK: /* (ATen's) */
    g->out.failed = true;
    break;
  }
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
  cg__assign_slots(&g);
  for (int k = 0; k < s->nkernels; k++)
    if (!s->kernels[k]->call) {
      cg__gen_kernel(&g, s->kernels[k]);
      out->nkernels++;
    } else if (s->kernels[k]->in_c) {
      gen_call(&g, s->kernels[k], out);
    }
  cg__gen_segments(&g);
  out->uses_vector_math = g.x.vector_math;
  out->uses_sleef = g.x.sleef != 0;
  if (g.tr16)
    gc_buf_puts(&g.out, cg__tr16_text());
  if (g.stream_used)
    gc_buf_puts(&g.out, cg__stream_text());
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
