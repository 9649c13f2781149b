/*
 * blas.c: matrix products in generated code: batched products through
 * BLAS, and products through oneDNN.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/codegen/cexpr.h"
#include "compiler/codegen/cgen_internal.h"

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
void cg__call_params(cg *g, const sc_kernel *k, params *p) {
  const ir_node *c = k->call;
  const ir_view *a = NULL, *b = NULL, *self = NULL;
  bool two = false; /* a and b (else a alone) */
  switch (c->kind) {
  case IR_SCAN:
    a = ir_call_view(c, "self");
    break;
  case IR_SCATTER:
    ir_scatter_views(c, &self, &a, &b);
    two = true;
    break;
  case IR_INTERP:
    a = ir_call_view(c, "grad_output");
    break;
  case IR_EXTERN:
    if (k->gemm) {
      a = k->gemm->a, b = k->gemm->b;
      /* beta 0: self is not read */
      self = k->gemm->beta != 0 ? k->gemm->bias : NULL;
    } else {
      sc_bmm_operands(c, &a, &b);
    }
    two = true;
    break;
  case IR_POINTWISE: /* (loop kernels: cg__kernel_params) */
  case IR_REDUCTION:
  case IR_FALLBACK: /* (ATen's) */
    break;
  }
  /* in the compile's arena: daemon workers generate code concurrently */
  ir_buf **bufs = gc_arena_calloc(cg__arena(g), 4, sizeof *bufs);
  bool *written = gc_arena_calloc(cg__arena(g), 4, sizeof *written);
  if (!bufs || !written || !a || (two && !b)) {
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
  if (two)
    bufs[n++] = ir_buf_storage(b->buf);
  written[n] = true;
  bufs[n++] = ir_buf_storage(c->out);
  if (c->kind == IR_SCAN && c->out2) { /* cummax, cummin: the indices */
    written[n] = true;
    bufs[n++] = ir_buf_storage(c->out2);
  }
  *p = (params){.bufs = bufs, .written = written, .n = n};
}

void cg__gen_blas(cg *g, const sc_kernel *k) {
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
void cg__gen_gemm(cg *g, const sc_kernel *k) {
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
