/*
 * gemm.c: which extern matrix products generated code makes itself
 * (sched.h: sc_blas_call, sc_gemm_of) and how BLAS or oneDNN's sgemm reads
 * their operands. The scheduler decides it once per call kernel
 * (schedule.c); codegen emits the calls.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "compiler/sched/sched.h"

/* ---- batched products in generated code ---- */

/* The matrix in the last two dims of v (rows r, columns c) as BLAS reads
 * it: 'N' with the row stride when rows are contiguous, 'T' with the
 * column stride when columns are. */
static bool mat_layout(const ir_view *v, char *op, int64_t *ld) {
  int64_t r = v->sizes[v->rank - 2], c = v->sizes[v->rank - 1];
  int64_t sr = v->strides[v->rank - 2], sc = v->strides[v->rank - 1];
  /* BLAS takes sizes and leading dimensions as (32-bit) ints */
  if (r <= 0 || c <= 0 || r > INT32_MAX || c > INT32_MAX || sr > INT32_MAX ||
      sc > INT32_MAX)
    return false;
  if (sc == 1 && sr >= c) { /* rows contiguous */
    *op = 'N';
    *ld = sr;
    return true;
  }
  if (sr == 1 && sc >= r) { /* columns contiguous */
    *op = 'T';
    *ld = sc;
    return true;
  }
  return false;
}

/* Does every element of v lie inside its buffer's span? Generated code
 * hands the view to a library, which reads all of it: no bounds check
 * there, so the verifier's promise (no access outside a buffer, whatever
 * a graph says) is kept here. An empty view or a negative stride (which a
 * hostile graph may state) is declined. */
static bool view_inside(const ir_view *v) {
  if (!v || v->offset < 0)
    return false;
  int64_t last = v->offset;
  for (int i = 0; i < v->rank; i++) {
    if (v->sizes[i] <= 0)
      return false; /* empty: nothing to multiply (callers decline) */
    if (v->strides[i] < 0 ||
        v->strides[i] >
            (INT64_MAX - last) / (v->sizes[i] > 1 ? v->sizes[i] - 1 : 1))
      return false;
    last += (v->sizes[i] - 1) * v->strides[i];
  }
  return last < v->buf->span;
}

bool sc_blas_layout(const ir_view *v, char *op, int64_t *ld) {
  return v && v->rank == 3 && mat_layout(v, op, ld) && view_inside(v);
}

void sc_bmm_operands(const ir_node *n, const ir_view **a, const ir_view **b) {
  *a = *b = NULL;
  for (int i = 0; i < n->nargs; i++) {
    const ir_call_arg *x = &n->args[i];
    if (x->arg.kind != GC_ARG_TENSOR || !x->views)
      continue;
    if (!strcmp(x->name, "self"))
      *a = x->views[0];
    else if (!strcmp(x->name, "mat2"))
      *b = x->views[0];
  }
}

/* A number argument of a call (int, float or bool), `dflt` when absent;
 * false when it is something else (a symbolic value). */
static bool call_number(const ir_node *n, const char *name, double dflt,
                        double *out) {
  *out = dflt;
  for (int i = 0; i < n->nargs; i++) {
    const ir_call_arg *x = &n->args[i];
    if (!x->name || strcmp(x->name, name) != 0)
      continue;
    switch (x->arg.kind) {
    case GC_ARG_INT:
    case GC_ARG_BOOL:
      *out = (double)x->arg.i;
      return true;
    case GC_ARG_FLOAT:
      *out = x->arg.f;
      return true;
    case GC_ARG_NONE:
      return true;
    default:
      return false;
    }
  }
  return true;
}

bool sc_gemm_of(const ir_graph *ir, const ir_node *n, sc_gemm *g) {
  memset(g, 0, sizeof *g);
  if (!ir->dnnl || n->kind != IR_EXTERN || !n->out_variant || !n->out ||
      !n->op || n->out->dtype != GC_DTYPE_FLOAT32)
    return false;
  const char *op = n->op->schema->qualified;
  bool addmm = !strcmp(op, "aten::addmm.out");
  if (!addmm && strcmp(op, "aten::mm.out") != 0)
    return false;
  g->a = ir_call_view(n, addmm ? "mat1" : "self");
  g->b = ir_call_view(n, "mat2");
  g->bias = addmm ? ir_call_view(n, "self") : NULL;
  const ir_buf *o = n->out;
  if (!g->a || !g->b || (addmm && !g->bias) || g->a->rank != 2 ||
      g->b->rank != 2 || o->rank != 2 || g->a->buf->dtype != o->dtype ||
      g->b->buf->dtype != o->dtype ||
      (g->bias && (g->bias->buf->dtype != o->dtype || g->bias->rank > 2)))
    return false;
  g->m = o->sizes[0];
  g->n = o->sizes[1];
  g->k = g->a->sizes[1];
  /* empty products keep ATen's special cases (K = 0 scales self) */
  if (g->m <= 0 || g->n <= 0 || g->k <= 0 || g->a->sizes[0] != g->m ||
      g->b->sizes[0] != g->k || g->b->sizes[1] != g->n || o->strides[1] != 1 ||
      o->strides[0] < g->n || o->strides[0] > INT32_MAX ||
      !mat_layout(g->a, &g->opa, &g->lda) ||
      !mat_layout(g->b, &g->opb, &g->ldb) || !view_inside(g->a) ||
      !view_inside(g->b) || (g->bias && !view_inside(g->bias)) ||
      !call_number(n, "alpha", 1, &g->alpha) ||
      !call_number(n, "beta", 1, &g->beta) || !(fabs(g->alpha) <= FLT_MAX) ||
      !(fabs(g->beta) <= FLT_MAX))
    return false; /* (ATen refuses a scalar beyond float's range) */
  if (g->bias) {  /* broadcast to [m, n], right-aligned */
    const ir_view *v = g->bias;
    int64_t want[2] = {g->m, g->n}, *st[2] = {&g->bias_sr, &g->bias_sc};
    for (int d = 0; d < 2; d++) {
      int vd = v->rank - 2 + d;
      *st[d] = 0;
      if (vd < 0 || v->sizes[vd] == 1)
        continue;
      if (v->sizes[vd] != want[d])
        return false;
      *st[d] = v->strides[vd];
    }
  }
  /* oneDNN 2.6's sgemm reads a transposed B with a leading dimension that
   * is a multiple of 512 floats at a fraction of its speed when A has 16
   * to 127 rows (2-4 KiB strides alias in the cache): 0.3-1.0x OpenBLAS's
   * at [16-127 x 512-2048] x [512-2048 x 256-4096]^T; with fewer rows it
   * takes another path, 4-7x OpenBLAS's; 1.4-2.4x everywhere else
   * measured (docs/codegen.md, make bench-gemm). Those stay ATen's
   * (OpenBLAS) call. */
  if (g->opb == 'T' && g->ldb % 512 == 0 && g->m >= 16 && g->m < 128)
    return false;
  return true;
}

bool sc_blas_call(const ir_graph *ir, const ir_node *n) {
  if (!ir->blas || n->kind != IR_EXTERN || !n->out_variant || !n->out ||
      !n->op || strcmp(n->op->schema->qualified, "aten::bmm.out") != 0 ||
      n->nargs < 2)
    return false;
  gc_dtype dt = n->out->dtype;
  if (dt != GC_DTYPE_FLOAT32 && dt != GC_DTYPE_FLOAT64)
    return false;
  const ir_view *a, *b;
  sc_bmm_operands(n, &a, &b);
  const ir_buf *o = n->out;
  char op;
  int64_t ld;
  if (!sc_blas_layout(a, &op, &ld) || !sc_blas_layout(b, &op, &ld) ||
      a->buf->dtype != dt || b->buf->dtype != dt || o->rank != 3 ||
      o->sizes[0] < 2 || o->strides[2] != 1 || o->strides[1] < o->sizes[2] ||
      o->strides[1] > INT32_MAX || a->sizes[0] != o->sizes[0] ||
      b->sizes[0] != o->sizes[0])
    return false;
  return true;
}
