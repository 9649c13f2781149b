/*
 * segments.c: the program's segments (runs of kernels between ATen calls)
 * and the slots their buffers live in.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/codegen/cexpr.h"
#include "compiler/codegen/cgen_internal.h"

void cg__assign_slots(cg *g) {
  gc_csource *src = g->src;
  const sc_schedule *s = g->s;
  src->nslots = 1; /* slot 0: the arena */
  for (int k = 0; k < s->nkernels; k++) {
    const sc_kernel *kn = s->kernels[k];
    if (sc_aten_call(kn))
      continue;
    params p = {0};
    if (kn->in_c)
      cg__call_params(g, kn, &p);
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

static void call_kernel(cg *g, const sc_kernel *k) {
  params p = {0};
  if (k->in_c)
    cg__call_params(g, k, &p);
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
void cg__gen_segments(cg *g) {
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
