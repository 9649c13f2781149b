/*
 * scan.c: the C of a scan node (cumsum, cumprod; lower/scan.c).
 *
 * Every point of the dimensions other than the scanned one is a row of N
 * elements; a row is one pass, each element the accumulator after adding
 * (multiplying) it in:
 *
 *   acc = 0;                                 (1 for a product)
 *   for (j = 0; j < N; j++) { acc += (ACC)(OUT)x[j]; y[j] = (OUT)acc; }
 *
 * exactly as ATen's CPU kernel does it: the input converted to the result's
 * dtype first, accumulated in ATen's accumulator type for it (double for
 * float32 and float64, int64 for int64, wrapping: unsigned arithmetic in
 * C), so each element is eager's bit for bit. Rows are independent: the
 * OpenMP team splits them when the scan is big enough.
 *
 * When the result is contiguous along another dimension than the scanned
 * one (cumsum over dim 0 of a [N, C] matrix), walking one row at a time
 * would stride through memory; instead up to SCAN_LANES neighbouring rows
 * advance together, their accumulators in a local array: the same additions
 * in the same order per element, with each step a contiguous (vectorizable)
 * run of the output.
 */
#include "compiler/codegen/cgen_internal.h"

#define SCAN_LANES 64

void cg__peel(cg *g, int ind, const char *q, const cg_odim *d, int n) {
  if (n == 0)
    return;
  if (n == 1) {
    cg__line(g, ind, "xo += %s * %lld; yo += %s * %lld; io += %s * %lld;", q,
             (long long)d[0].xs, q, (long long)d[0].ys, q, (long long)d[0].is);
    return;
  }
  cg__line(g, ind, "int64_t q = %s;", q);
  for (int i = n - 1; i >= 0; i--) {
    if (i > 0) {
      cg__line(g, ind, "{ const int64_t i = q %% %lld; q /= %lld;",
               (long long)d[i].size, (long long)d[i].size);
      cg__line(g, ind, "  xo += i * %lld; yo += i * %lld; io += i * %lld; }",
               (long long)d[i].xs, (long long)d[i].ys, (long long)d[i].is);
    } else {
      cg__line(g, ind, "xo += q * %lld; yo += q * %lld; io += q * %lld;",
               (long long)d[i].xs, (long long)d[i].ys, (long long)d[i].is);
    }
  }
}

/* What one scan computes, as C text. */
typedef struct scan_c {
  const char *acc;  /* the accumulator's C type */
  const char *init; /* its initial value; NULL: the row's first element */
  bool index;       /* cummax/cummin: an index runs along */
  bool simd;        /* lanes may run as one vector loop */
} scan_c;

static scan_c scan_kind(const ir_node *n, const char *tin, const char *tout) {
  bool fl =
      n->out->dtype == GC_DTYPE_FLOAT32 || n->out->dtype == GC_DTYPE_FLOAT64;
  switch (n->scan.op) {
  case IR_SCAN_SUM:
    return (scan_c){fl ? "double" : "int64_t", "0", false, true};
  case IR_SCAN_PROD:
    return (scan_c){fl ? "double" : "int64_t", "1", false, true};
  case IR_SCAN_LOGSUMEXP: /* exp and log1p: libm's, as ATen's */
    return (scan_c){"double", "-INFINITY", false, false};
  default:
    (void)tout;
    return (scan_c){tin, NULL, true, true};
  }
}

/* One element of a row: the accumulator `a` (and index `ix`) takes in
 * element `xe` (C lvalue of the input) at position j and stores into `ye`
 * (and `ie`). */
static void scan_step(cg *g, int ind, const ir_node *n, const char *tout,
                      const char *a, const char *ix, const char *xe,
                      const char *ye, const char *ie) {
  bool fl =
      n->out->dtype == GC_DTYPE_FLOAT32 || n->out->dtype == GC_DTYPE_FLOAT64;
  switch (n->scan.op) {
  case IR_SCAN_SUM:
  case IR_SCAN_PROD: {
    const char *op = n->scan.op == IR_SCAN_PROD ? "*" : "+";
    cg__line(g, ind, "const %s v = (%s)%s;", tout, tout, xe);
    if (fl)
      cg__line(g, ind, "%s %s= (double)v;", a, op);
    else
      cg__line(g, ind, "%s = (int64_t)((uint64_t)%s %s (uint64_t)v);", a, a,
               op);
    cg__line(g, ind, "%s = (%s)%s;", ye, tout, a);
    break;
  }
  case IR_SCAN_LOGSUMEXP: /* ATen's _log_add_exp_helper(v, a), libm's math */
    cg__line(g, ind, "const double v = (double)%s;", xe);
    cg__line(g, ind, "const double mn = isnan(%s) ? %s : (%s < v ? %s : v);", a,
             a, a, a);
    cg__line(g, ind, "const double mx = isnan(%s) ? %s : (v < %s ? %s : v);", a,
             a, a, a);
    cg__line(g, ind,
             "%s = mn != mx || isfinite(mn) ? gc_scan_log1p(gc_scan_exp(mn - "
             "mx)) + mx : v;",
             a);
    cg__line(g, ind, "%s = (%s)%s;", ye, tout, a);
    break;
  default: { /* cummax (>=), cummin (<=): NaN wins, ties move the index */
    const char *cmp = n->scan.op == IR_SCAN_MAX ? ">=" : "<=";
    cg__line(g, ind, "const %s v = %s;", tout, xe);
    if (fl)
      cg__line(g, ind, "if (isnan(v) || (!isnan(%s) && v %s %s)) {", a, cmp, a);
    else
      cg__line(g, ind, "if (v %s %s) {", cmp, a);
    cg__line(g, ind + 2, "%s = v;", a);
    cg__line(g, ind + 2, "%s = j;", ix);
    cg__line(g, ind, "}");
    cg__line(g, ind, "%s = %s;", ye, a);
    cg__line(g, ind, "%s = %s;", ie, ix);
  }
  }
}

void cg__gen_scan(cg *g, const sc_kernel *k) {
  const ir_node *n = k->call;
  const ir_view *x = ir_call_view(n, "self");
  const ir_buf *o = n->out, *oi = n->out2;
  const char *tin = cx_ctype(x->buf->dtype), *tout = cx_ctype(o->dtype);
  scan_c sk = scan_kind(n, tin, tout);
  int d = n->scan.dim;
  int64_t N = o->sizes[d], xsd = x->strides[d], ysd = o->strides[d];
  int64_t isd = sk.index ? oi->strides[d] : 0;
  cg_odim dims[IR_MAX_RANK];
  int nd = 0, lane = -1;
  int64_t rows = 1;
  for (int i = 0; i < o->rank; i++) {
    if (i == d || o->sizes[i] == 1)
      continue;
    dims[nd] = (cg_odim){o->sizes[i], x->strides[i], o->strides[i],
                         sk.index ? oi->strides[i] : 0};
    if (o->strides[i] == 1 && ysd != 1 && (!sk.index || oi->strides[i] == 1))
      lane = nd;
    rows *= o->sizes[i];
    nd++;
  }
  gc_arena *ar = cg__arena(g);
  if (n->scan.op == IR_SCAN_LOGSUMEXP && !g->scan_math) {
    /* The prelude declares exp and log1p simd: a loop over lanes calling
     * them would call vector versions, which differ from libm's in the
     * last bit. Through these (not inlined, not simd) every call is
     * libm's, as ATen's. */
    gc_buf_puts(&g->out,
                "/* libm's exp and log1p, never a vector version */\n"
                "__attribute__((noinline)) static double gc_scan_exp(double "
                "v) { return exp(v); }\n"
                "__attribute__((noinline)) static double gc_scan_log1p(double "
                "v) { return log1p(v); }\n\n");
    g->scan_math = true;
  }
  const char *name = gc_arena_printf(ar, "gc_scan%d", k->id);
  g->impl[k->id] = name;
  gc_buf_printf(&g->out,
                "/* %s: %s over dim %d (%lld elements) of %lld rows%s, in "
                "ATen's order, in %s */\n",
                name, n->op ? n->op->name : "scan", d, (long long)N,
                (long long)rows,
                lane >= 0 ? " (neighbouring rows side by side)" : "", sk.acc);
  gc_buf_printf(&g->out,
                "static int %s(const %s *restrict x, %s *restrict y%s) {\n",
                name, tin, tout, sk.index ? ", int64_t *restrict yi" : "");
  bool par = rows >= 2 && rows * N >= CG_PARALLEL_MIN;
  if (N == 0 || rows == 0) {
    cg__line(g, 2, "return 0; /* no element */");
    gc_buf_puts(&g->out, "}\n\n");
    return;
  }
  if (lane < 0) {
    if (par)
      cg__line(g, 2, "#pragma omp parallel for schedule(static)");
    cg__line(g, 2, "for (int64_t r = 0; r < %lld; r++) {", (long long)rows);
    cg__line(g, 4, "int64_t xo = %lld, yo = 0, io = 0;", (long long)x->offset);
    cg__peel(g, 4, "r", dims, nd);
    cg__line(g, 4, "%s acc = %s;", sk.acc, sk.init ? sk.init : "x[xo]");
    if (sk.index)
      cg__line(g, 4, "int64_t idx = 0;");
    cg__line(g, 4, "for (int64_t j = 0; j < %lld; j++) {", (long long)N);
    scan_step(g, 6, n, tout, "acc", "idx",
              gc_arena_printf(ar, "x[xo + j * %lld]", (long long)xsd),
              gc_arena_printf(ar, "y[yo + j * %lld]", (long long)ysd),
              gc_arena_printf(ar, "yi[io + j * %lld]", (long long)isd));
    cg__line(g, 4, "}");
    cg__line(g, 2, "}");
  } else {
    cg_odim ln = dims[lane];
    for (int i = lane; i + 1 < nd; i++)
      dims[i] = dims[i + 1];
    nd--;
    int64_t blocks = (ln.size + SCAN_LANES - 1) / SCAN_LANES;
    int64_t outer = rows / ln.size;
    if (par)
      cg__line(g, 2, "#pragma omp parallel for schedule(static)");
    cg__line(g, 2, "for (int64_t r = 0; r < %lld; r++) {",
             (long long)(outer * blocks));
    cg__line(g, 4, "const int64_t c0 = r %% %lld * %d;", (long long)blocks,
             SCAN_LANES);
    cg__line(g, 4, "const int64_t nc = %lld - c0 < %d ? %lld - c0 : %d;",
             (long long)ln.size, SCAN_LANES, (long long)ln.size, SCAN_LANES);
    cg__line(g, 4, "int64_t xo = %lld + c0 * %lld, yo = c0, io = c0;",
             (long long)x->offset, (long long)ln.xs);
    cg__peel(g, 4, gc_arena_printf(ar, "(r / %lld)", (long long)blocks), dims,
             nd);
    cg__line(g, 4, "%s acc[%d];", sk.acc, SCAN_LANES);
    if (sk.index)
      cg__line(g, 4, "int64_t idx[%d];", SCAN_LANES);
    cg__line(g, 4, "for (int64_t c = 0; c < nc; c++) {");
    cg__line(g, 6, "acc[c] = %s;",
             sk.init
                 ? sk.init
                 : gc_arena_printf(ar, "x[xo + c * %lld]", (long long)ln.xs));
    if (sk.index)
      cg__line(g, 6, "idx[c] = 0;");
    cg__line(g, 4, "}");
    cg__line(g, 4, "for (int64_t j = 0; j < %lld; j++) {", (long long)N);
    cg__line(g, 6, "const %s *restrict xj = x + xo + j * %lld;", tin,
             (long long)xsd);
    cg__line(g, 6, "%s *restrict yj = y + yo + j * %lld;", tout,
             (long long)ysd);
    if (sk.index)
      cg__line(g, 6, "int64_t *restrict ij = yi + io + j * %lld;",
               (long long)isd);
    if (sk.simd)
      cg__line(g, 6, "#pragma omp simd");
    cg__line(g, 6, "for (int64_t c = 0; c < nc; c++) {");
    scan_step(g, 8, n, tout, "acc[c]", "idx[c]",
              gc_arena_printf(ar, "xj[c * %lld]", (long long)ln.xs), "yj[c]",
              "ij[c]");
    cg__line(g, 6, "}");
    cg__line(g, 4, "}");
    cg__line(g, 2, "}");
  }
  cg__line(g, 2, "return 0;");
  gc_buf_puts(&g->out, "}\n\n");
}
