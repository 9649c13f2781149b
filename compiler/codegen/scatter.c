/*
 * scatter.c: the C of a scatter node (scatter_add, scatter.src, index_add,
 * embedding_dense_backward, index_put with accumulate; lower/scatter.c).
 *
 * The output first gets its base: self copied (any strides), or the
 * constant self was (zeros, for a backward). Then the positions of the
 * contributions (index's shape for scatter; source's for index_add, whose
 * 1-D index is read along dim; the gradient's for the embedding backward,
 * whose index is read along every dim but the last; index_put's values,
 * whose index names a row of dim `first` per token, or with several index
 * tensors an element offset, odims) are split in two:
 *
 *   sequential dims   where two contributions can meet in one output
 *                     element: dim (the embedding backward: the tokens'
 *                     dims, row-major), walked in ascending order;
 *   lane dims         the others, which name distinct output elements:
 *                     the OpenMP team splits them, the innermost runs as
 *                     up to SC_LANES side by side inside each sequential
 *                     step.
 *
 * So every output element takes its contributions in ascending order
 * along the sequential dims, as ATen's kernels do (ATen adds in the element
 * type too: `+=` in float for float32), and the result is eager's bit for
 * bit. An index out of range sets the error flag (the call raises) and the
 * element is skipped; the embedding backward skips tokens of the padding
 * index.
 */
#include "compiler/codegen/cgen_internal.h"

#define SC_LANES 64

/* A dimension of the contributions' position space. */
typedef struct pdim {
  int64_t size;
  int64_t xs, is, ys; /* strides: source, index, output (0 for sequential
                         dims, whose output position comes from the index) */
  bool seq;
} pdim;

/* The output's base: a copy of self or the constant. */
static void base(cg *g, const ir_node *n, const ir_view *self) {
  const ir_buf *o = n->out;
  if (!self) {
    const ir_expr *fill = n->scatter.fill;
    const char *k =
        fill && fill->op == IR_CONST
            ? cx_literal(cg__arena(g), fill->k.f, fill->k.i, o->dtype)
            : "0";
    if (o->numel >= CG_PARALLEL_MIN)
      cg__line(g, 2, "#pragma omp parallel for simd schedule(static)");
    cg__line(g, 2, "for (int64_t e = 0; e < %lld; e++) /* dense */",
             (long long)o->numel);
    cg__line(g, 4, "y[e] = %s;", k);
    return;
  }
  int nd = 0, dims[IR_MAX_RANK];
  for (int d = 0; d < o->rank; d++)
    if (o->sizes[d] > 1)
      dims[nd++] = d;
  if (nd > 1 && o->numel >= CG_PARALLEL_MIN)
    cg__line(g, 2, "#pragma omp parallel for collapse(%d) schedule(static)",
             nd);
  else if (nd == 1 && o->numel >= CG_PARALLEL_MIN)
    cg__line(g, 2, "#pragma omp parallel for schedule(static)");
  gc_buf yo = GC_BUF_INIT, xo = GC_BUF_INIT;
  gc_buf_printf(&xo, "%lld", (long long)self->offset);
  gc_buf_puts(&yo, "0");
  for (int i = 0; i < nd; i++) {
    int d = dims[i];
    cg__line(g, 2 + 2 * i, "for (int64_t i%d = 0; i%d < %lld; i%d++)", i, i,
             (long long)o->sizes[d], i);
    gc_buf_printf(&xo, " + i%d * %lld", i, (long long)self->strides[d]);
    gc_buf_printf(&yo, " + i%d * %lld", i, (long long)o->strides[d]);
  }
  cg__line(g, 2 + 2 * nd, "y[%s] = x0[%s];", yo.data ? yo.data : "0",
           xo.data ? xo.data : "0");
  if (yo.failed || xo.failed)
    g->out.failed = true;
  gc_buf_free(&yo);
  gc_buf_free(&xo);
}

void cg__gen_scatter(cg *g, const sc_kernel *k) {
  const ir_node *n = k->call;
  const ir_scatter_op op = n->scatter.op;
  const int dim = n->scatter.dim, first = n->scatter.first;
  const int *odims = n->scatter.odims;
  const ir_view *self, *ix, *src;
  ir_scatter_views(n, &self, &ix, &src);
  const ir_buf *o = n->out;
  gc_arena *ar = cg__arena(g);
  const char *t = cx_ctype(o->dtype), *ti = cx_ctype(ix->buf->dtype);
  bool emb = op == IR_SCATTER_EMBEDDING, tok = ir_scatter_by_token(n);
  /* the position space */
  pdim p[IR_MAX_RANK + 1] = {{0}};
  /* the token forms: the source's dims are the output's before `first`,
   * the index's (sequential), then the output's after dims first..dim,
   * whose row (one run of memory) the index names */
  int np = src->rank, tdim = tok ? first : dim, ns = tok ? ix->rank : 0;
  int f = tok ? first : 0;
  for (int d = 0; d < np; d++) {
    p[d].size = op == IR_SCATTER_ADD || op == IR_SCATTER_SET ? ix->sizes[d]
                                                             : src->sizes[d];
    p[d].xs = src->strides[d];
    p[d].seq = tok ? d >= f && d < f + ns : d == dim;
    if (tok)
      p[d].is = p[d].seq ? ix->strides[d - f] : 0;
    else if (op == IR_SCATTER_INDEX_ADD)
      p[d].is = d == dim && ix->rank ? ix->strides[0] : 0;
    else
      p[d].is = ix->strides[d];
    p[d].ys = p[d].seq        ? 0
              : odims         ? o->strides[odims[d < f ? d : d - ns]]
              : !tok || d < f ? o->strides[d]
                              : o->strides[d - f - ns + dim + 1];
  }
  int64_t tsize = o->sizes[tdim], tstride = o->strides[tok ? dim : tdim];
  for (int d = tdim + 1; tok && d <= dim; d++)
    tsize *= o->sizes[d];
  if (odims) {
    /* element offsets: below the extent of the indexed dims, so a write
     * stays inside the buffer whatever the offsets are */
    bool indexed[IR_MAX_RANK];
    for (int d = 0; d < o->rank; d++)
      indexed[d] = true;
    for (int j = 0; j < np - ns; j++)
      indexed[odims[j]] = false;
    tsize = 1;
    tstride = 1;
    for (int d = 0; d < o->rank; d++)
      if (indexed[d])
        tsize += (o->sizes[d] - 1) * o->strides[d];
  }
  int64_t total = 1;
  for (int d = 0; d < np; d++)
    total *= p[d].size;
  /* lane dims: all but the lane dim peel from the row index */
  int lane = -1;
  for (int d = np - 1; d >= 0 && lane < 0; d--)
    if (!p[d].seq && p[d].size > 1)
      lane = d;
  int64_t lsize = lane >= 0 ? p[lane].size : 1;
  int64_t blocks = (lsize + SC_LANES - 1) / SC_LANES;
  int64_t outer = 1;
  for (int d = 0; d < np; d++)
    if (!p[d].seq && d != lane)
      outer *= p[d].size;

  const char *name = gc_arena_printf(ar, "gc_scatter%d", k->id);
  g->impl[k->id] = name;
  gc_buf_printf(&g->out,
                "/* %s: %s, %lld contributions along %s into dim %d (size "
                "%lld), in ATen's order */\n",
                name, n->op ? n->op->name : "scatter", (long long)total,
                tok ? "the tokens" : "dim", tdim, (long long)tsize);
  gc_buf_printf(&g->out,
                "static int %s(%s%s%sconst %s *restrict ix, const %s "
                "*restrict x, %s *restrict y) {\n",
                name, self ? "const " : "", self ? t : "",
                self ? " *restrict x0, " : "", ti, t, t);
  base(g, n, self);
  cg__line(g, 2, "int err = 0;");
  if (total == 0) {
    cg__line(g, 2, "return err;");
    gc_buf_puts(&g->out, "}\n\n");
    return;
  }
  bool par = outer * blocks >= 2 && total >= CG_PARALLEL_MIN;
  if (par)
    cg__line(g, 2,
             "#pragma omp parallel for schedule(static) reduction(|:err)");
  cg__line(g, 2, "for (int64_t r = 0; r < %lld; r++) {",
           (long long)(outer * blocks));
  cg__line(g, 4, "const int64_t c0 = r %% %lld * %d;", (long long)blocks,
           SC_LANES);
  cg__line(g, 4, "const int64_t nc = %lld - c0 < %d ? %lld - c0 : %d;",
           (long long)lsize, SC_LANES, (long long)lsize, SC_LANES);
  cg__line(g, 4,
           "int64_t xo = %lld + c0 * %lld, io = %lld + c0 * %lld, "
           "yo = c0 * %lld;",
           (long long)src->offset, lane >= 0 ? (long long)p[lane].xs : 0LL,
           (long long)ix->offset, lane >= 0 ? (long long)p[lane].is : 0LL,
           lane >= 0 ? (long long)p[lane].ys : 0LL);
  cg_odim rows[IR_MAX_RANK + 1];
  int nrows = 0;
  for (int d = 0; d < np; d++)
    if (!p[d].seq && d != lane && p[d].size > 1)
      rows[nrows++] = (cg_odim){p[d].size, p[d].xs, p[d].ys, p[d].is};
  cg__peel(g, 4, gc_arena_printf(ar, "(r / %lld)", (long long)blocks), rows,
           nrows);
  /* the sequential dims, outermost first */
  int ind = 4, nseq = 0;
  for (int d = 0; d < np; d++) {
    if (!p[d].seq)
      continue;
    cg__line(g, ind, "for (int64_t s%d = 0; s%d < %lld; s%d++) {", d, d,
             (long long)p[d].size, d);
    cg__line(g, ind + 2,
             "const int64_t xo%d = %s + s%d * %lld, io%d = %s + s%d * %lld;",
             nseq + 1, nseq ? gc_arena_printf(ar, "xo%d", nseq) : "xo", d,
             (long long)p[d].xs, nseq + 1,
             nseq ? gc_arena_printf(ar, "io%d", nseq) : "io", d,
             (long long)p[d].is);
    ind += 2;
    nseq++;
  }
  const char *xs = nseq ? gc_arena_printf(ar, "xo%d", nseq) : "xo";
  const char *is = nseq ? gc_arena_printf(ar, "io%d", nseq) : "io";
  cg__line(g, ind, "for (int64_t c = 0; c < nc; c++) {");
  /* advanced indexing: negative indices count from the end (element
   * offsets were checked and wrapped when they were made) */
  bool wrap = op == IR_SCATTER_INDEX_PUT && !odims;
  cg__line(g, ind + 2, "const int64_t k%s = (int64_t)ix[%s + c * %lld];",
           wrap ? "0" : "", is, lane >= 0 ? (long long)p[lane].is : 0LL);
  if (wrap)
    cg__line(g, ind + 2, "const int64_t k = k0 < 0 ? k0 + %lld : k0;",
             (long long)tsize);
  if (emb)
    cg__line(g, ind + 2, "if (k == %lld) /* padding */",
             (long long)n->scatter.padding);
  if (emb)
    cg__line(g, ind + 4, "continue;");
  cg__line(g, ind + 2, "if (k < 0 || k >= %lld) {", (long long)tsize);
  cg__line(g, ind + 4, "err = 1;");
  cg__line(g, ind + 4, "continue;");
  cg__line(g, ind + 2, "}");
  const char *scale =
      n->scatter.alpha == 1
          ? ""
          : gc_arena_printf(ar, "(%s)%s * ", t,
                            cx_literal(ar, n->scatter.alpha,
                                       (int64_t)n->scatter.alpha, o->dtype));
  cg__line(g, ind + 2, "y[yo + c * %lld + k * %lld] %s %sx[%s + c * %lld];",
           lane >= 0 ? (long long)p[lane].ys : 0LL, (long long)tstride,
           op == IR_SCATTER_SET ? "=" : "+=", scale, xs,
           lane >= 0 ? (long long)p[lane].xs : 0LL);
  cg__line(g, ind, "}");
  for (; ind > 4; ind -= 2)
    cg__line(g, ind - 2, "}");
  cg__line(g, 2, "}");
  cg__line(g, 2, "return err;");
  gc_buf_puts(&g->out, "}\n\n");
}
