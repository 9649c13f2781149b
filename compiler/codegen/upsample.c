/*
 * upsample.c: the C of a linear upsampling backward node (the backwards
 * of upsample_linear1d, upsample_bilinear2d, upsample_trilinear3d;
 * lower/upsample.c).
 *
 * ATen's CPU kernel zeroes grad_input and then walks grad_output plane by
 * plane in output order, adding each element times its 2^d weights to the
 * input positions it came from, first axis outermost; in 2-D:
 *
 *   gi[h0][w0] += lh0 * lw0 * g;   gi[h0][w1] += lh0 * lw1 * g;
 *   gi[h1][w0] += lh1 * lw0 * g;   gi[h1][w1] += lh1 * lw1 * g;
 *
 * (1-D: lw0 * g, lw1 * g; 3-D: lt * lh * lw * g, eight of them)
 * in the element type. So does this kernel, the same expressions in the
 * same order per element (whatever the layouts: an element's additions
 * come in (oh, ow) order either way), with the indices and weights as
 * tables the compiler computed as ATen computes them (hexadecimal
 * literals: exact). Where the target has FMA, `+= t * g` is an explicit
 * multiply-add, as ATen's kernel built for that ISA contracts it: eager's
 * bits (tests/python/test_native_index.py). (Left to gcc's contraction it
 * was not always one: with small constant tables gcc unrolls everything,
 * and its SLP vectorizer paired a product with a weight-1 term, whose
 * product had folded away, in one vector add, left uncontracted.) Planes
 * are independent: the OpenMP team splits them.
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
  int d = n->interp.naxes; /* spatial axes, 1-3 (out->rank - 2) */
  bool f64 = o->dtype == GC_DTYPE_FLOAT64;
  const char *t = f64 ? "double" : "float";
  gc_arena *ar = cg__arena(g);
  const char *name = gc_arena_printf(ar, "gc_interp%d", k->id);
  g->impl[k->id] = name;
  long long N = (long long)o->sizes[0], C = (long long)o->sizes[1];
  long long planes = N * C;
  int64_t in = 1, out = 1;
  for (int a = 0; a < d; a++) {
    in *= n->interp.axes[a].in;
    out *= n->interp.axes[a].out;
  }
  gc_buf_printf(&g->out,
                "/* %s: %s, %lld planes of %lld from %lld positions over %d "
                "axes, in ATen's order */\n",
                name, n->op ? n->op->name : "upsample_linear_backward", planes,
                (long long)out, (long long)in, d);
  const char *tab[3];
  for (int a = 0; a < d; a++) {
    tab[a] = gc_arena_printf(ar, "gc_interp%d_%c", k->id, "abc"[a]);
    tables(g, tab[a], &n->interp.axes[a], o->strides[a + 2], f64);
  }
  gc_buf_printf(&g->out,
                "#if defined(__FMA__)\n"
                "#define GC_IMADD(w, v, acc) fma%s(w, v, acc)\n"
                "#else\n"
                "#define GC_IMADD(w, v, acc) ((acc) + (w) * (v))\n"
                "#endif\n",
                f64 ? "" : "f");
  gc_buf_printf(&g->out,
                "static int %s(const %s *restrict x, %s *restrict y) {\n", name,
                t, t);
  if (planes == 0 || in == 0) {
    cg__line(g, 2, "return 0; /* no element */");
    gc_buf_puts(&g->out, "}\n#undef GC_IMADD\n\n");
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
  /* the plane is zeroed first */
  gc_buf zo = GC_BUF_INIT, xo = GC_BUF_INIT;
  gc_buf_puts(&zo, "0");
  for (int a = 0; a < d; a++) {
    cg__line(g, 4 + 2 * a, "for (int64_t i%d = 0; i%d < %lld; i%d++)", a, a,
             (long long)n->interp.axes[a].in, a);
    gc_buf_printf(&zo, " + i%d * %lld", a, (long long)o->strides[a + 2]);
  }
  cg__line(g, 4 + 2 * d, "yp[%s] = 0;", zo.data ? zo.data : "0");
  /* then each gradient element, in output order, to its 2^d sources */
  gc_buf_puts(&xo, "0");
  int ind = 4;
  for (int a = 0; a < d; a++) {
    cg__line(g, ind, "for (int64_t o%d = 0; o%d < %lld; o%d++) {", a, a,
             (long long)n->interp.axes[a].out, a);
    cg__line(g, ind + 2, "const int64_t a%d0 = %s0[o%d], a%d1 = %s1[o%d];", a,
             tab[a], a, a, tab[a], a);
    cg__line(g, ind + 2, "const %s l%d0 = %sl0[o%d], l%d1 = %sl1[o%d];", t, a,
             tab[a], a, a, tab[a], a);
    gc_buf_printf(&xo, " + o%d * %lld", a, (long long)x->strides[a + 2]);
    ind += 2;
  }
  cg__line(g, ind, "const %s v = xp[%s];", t, xo.data ? xo.data : "0");
  for (int bits = 0; bits < (1 << d); bits++) {
    gc_buf at = GC_BUF_INIT, w = GC_BUF_INIT;
    for (int a = 0; a < d; a++) {
      int bit = (bits >> (d - 1 - a)) & 1;
      gc_buf_printf(&at, "%sa%d%d", a ? " + " : "", a, bit);
      gc_buf_printf(&w, "%sl%d%d", a ? " * " : "", a, bit);
    }
    const char *ix = at.data ? at.data : "0";
    cg__line(g, ind, "yp[%s] = GC_IMADD(%s, v, yp[%s]);", ix,
             w.data ? w.data : "1", ix);
    if (at.failed || w.failed)
      g->out.failed = true;
    gc_buf_free(&at);
    gc_buf_free(&w);
  }
  for (; ind > 4; ind -= 2)
    cg__line(g, ind - 2, "}");
  cg__line(g, 2, "}");
  cg__line(g, 2, "return 0;");
  gc_buf_puts(&g->out, "}\n#undef GC_IMADD\n\n");
  if (zo.failed || xo.failed)
    g->out.failed = true;
  gc_buf_free(&zo);
  gc_buf_free(&xo);
}
