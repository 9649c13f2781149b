/*
 * upsample.c: the C of a bilinear backward node (upsample_bilinear2d's
 * backward; lower/upsample.c).
 *
 * ATen's CPU kernel zeroes grad_input and then walks grad_output plane by
 * plane in (oh, ow) order, adding each element times its four weights to
 * the four input positions it came from:
 *
 *   gi[h0][w0] += lh0 * lw0 * g;   gi[h0][w1] += lh0 * lw1 * g;
 *   gi[h1][w0] += lh1 * lw0 * g;   gi[h1][w1] += lh1 * lw1 * g;
 *
 * in the element type. So does this kernel, the same expressions in the
 * same order per element (whatever the layouts: an element's additions
 * come in (oh, ow) order either way), with the indices and weights as
 * tables the compiler computed as ATen computes them (hexadecimal
 * literals: exact). gcc contracts `+= t * g` into a multiply-add where the
 * target has one, as it does in ATen's kernel built for that ISA: eager's
 * bits (tests/python/test_native_index.py). Planes are independent: the
 * OpenMP team splits them.
 */
#include "compiler/codegen/cgen_internal.h"

/* The tables of one axis as static arrays named <p>0, <p>1 (indices, times
 * `stride`) and <p>l0, <p>l1 (weights). */
static void tables(cg *g, const char *p, const ir_interp *a, int64_t stride,
                   bool f64) {
  const char *t = f64 ? "double" : "float";
  for (int k = 0; k < 2; k++) {
    const int64_t *ix = k ? a->i1 : a->i0;
    gc_buf_printf(&g->out, "static const int64_t %s%d[%lld] = {", p, k,
                  (long long)a->out);
    for (int64_t i = 0; i < a->out; i++)
      gc_buf_printf(&g->out, "%s%lld", i ? ", " : "",
                    (long long)(ix[i] * stride));
    gc_buf_puts(&g->out, "};\n");
  }
  for (int k = 0; k < 2; k++) {
    const double *l = k ? a->l1 : a->l0;
    gc_buf_printf(&g->out, "static const %s %sl%d[%lld] = {", t, p, k,
                  (long long)a->out);
    for (int64_t i = 0; i < a->out; i++) {
      if (f64)
        gc_buf_printf(&g->out, "%s%a", i ? ", " : "", l[i]);
      else
        gc_buf_printf(&g->out, "%s%af", i ? ", " : "", (double)(float)l[i]);
    }
    gc_buf_puts(&g->out, "};\n");
  }
}

void cg__gen_interp_backward(cg *g, const sc_kernel *k) {
  const ir_node *n = k->call;
  const ir_view *x = ir_call_view(n, "grad_output");
  const ir_buf *o = n->out;
  bool f64 = o->dtype == GC_DTYPE_FLOAT64;
  const char *t = f64 ? "double" : "float";
  gc_arena *ar = cg__arena(g);
  const char *name = gc_arena_printf(ar, "gc_interp%d", k->id);
  const char *ph = gc_arena_printf(ar, "gc_interp%d_h", k->id);
  const char *pw = gc_arena_printf(ar, "gc_interp%d_w", k->id);
  g->impl[k->id] = name;
  const ir_interp *H = &n->interp[0], *W = &n->interp[1];
  long long N = (long long)o->sizes[0], C = (long long)o->sizes[1];
  long long planes = N * C;
  gc_buf_printf(&g->out,
                "/* %s: %s, %lld planes of %lld x %lld from %lld x %lld, "
                "in ATen's order */\n",
                name, n->op ? n->op->name : "upsample_bilinear2d_backward",
                planes, (long long)H->out, (long long)W->out, (long long)H->in,
                (long long)W->in);
  tables(g, ph, H, o->strides[2], f64);
  tables(g, pw, W, o->strides[3], f64);
  gc_buf_printf(&g->out,
                "static int %s(const %s *restrict x, %s *restrict y) {\n", name,
                t, t);
  if (planes == 0 || H->in == 0 || W->in == 0) {
    cg__line(g, 2, "return 0; /* no element */");
    gc_buf_puts(&g->out, "}\n\n");
    return;
  }
  if (planes >= 2 && o->numel + x->buf->numel >= CG_PARALLEL_MIN)
    cg__line(g, 2, "#pragma omp parallel for schedule(static)");
  cg__line(g, 2, "for (int64_t p = 0; p < %lld; p++) {", planes);
  cg__line(g, 4, "const int64_t pn = p / %lld, pc = p %% %lld;", C, C);
  cg__line(g, 4, "%s *restrict yp = y + pn * %lld + pc * %lld;", t,
           (long long)o->strides[0], (long long)o->strides[1]);
  cg__line(g, 4, "const %s *restrict xp = x + %lld + pn * %lld + pc * %lld;", t,
           (long long)x->offset, (long long)x->strides[0],
           (long long)x->strides[1]);
  cg__line(g, 4, "for (int64_t i = 0; i < %lld; i++)", (long long)H->in);
  cg__line(g, 6, "for (int64_t j = 0; j < %lld; j++)", (long long)W->in);
  cg__line(g, 8, "yp[i * %lld + j * %lld] = 0;", (long long)o->strides[2],
           (long long)o->strides[3]);
  cg__line(g, 4, "for (int64_t oh = 0; oh < %lld; oh++) {", (long long)H->out);
  cg__line(g, 6, "const int64_t a0 = %s0[oh], a1 = %s1[oh];", ph, ph);
  cg__line(g, 6, "const %s p0 = %sl0[oh], p1 = %sl1[oh];", t, ph, ph);
  cg__line(g, 6, "for (int64_t ow = 0; ow < %lld; ow++) {", (long long)W->out);
  cg__line(g, 8, "const %s v = xp[oh * %lld + ow * %lld];", t,
           (long long)x->strides[2], (long long)x->strides[3]);
  cg__line(g, 8, "const int64_t b0 = %s0[ow], b1 = %s1[ow];", pw, pw);
  cg__line(g, 8, "const %s q0 = %sl0[ow], q1 = %sl1[ow];", t, pw, pw);
  cg__line(g, 8, "yp[a0 + b0] += p0 * q0 * v;");
  cg__line(g, 8, "yp[a0 + b1] += p0 * q1 * v;");
  cg__line(g, 8, "yp[a1 + b0] += p1 * q0 * v;");
  cg__line(g, 8, "yp[a1 + b1] += p1 * q1 * v;");
  cg__line(g, 6, "}");
  cg__line(g, 4, "}");
  cg__line(g, 2, "}");
  cg__line(g, 2, "return 0;");
  gc_buf_puts(&g->out, "}\n\n");
}
