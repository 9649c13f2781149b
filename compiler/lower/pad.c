/*
 * pad.c: lowering of padding: constant_pad_nd (the input where the padded
 * index falls inside it, negative pads crop, the value elsewhere), and
 * reflection and replication padding and their backwards. All return
 * unrealized pointwise values over the output's shape.
 */
#include <math.h>
#include <string.h>

#include "compiler/lower/pointwise.h"

/* Is in + lo + hi == out, pads within +-2^62 (so that neither the sum,
 * which overflowed for a hostile pad in fuzz_native, nor a pad's negation
 * can overflow)? */
static bool padded_size_is(int64_t in, int64_t lo, int64_t hi, int64_t out) {
  const int64_t big = INT64_C(1) << 62;
  int64_t t;
  return lo >= -big && lo <= big && hi >= -big && hi <= big &&
         !__builtin_add_overflow(in, lo + hi, &t) && t == out;
}

/* constant_pad_nd(self, pad, value): pad pairs (before, after) from the
 * last dim backwards; negative pads crop. */
int lower_constant_pad(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *x = L_tensor(L, n, "self");
  const int64_t *pad;
  int np;
  ir_expr *value = NULL;
  if (!x || !L_ints(L, n, "pad", &pad, &np) || np % 2 || np / 2 > x->rank ||
      p.rank != x->rank || p.odt != x->dtype)
    return GC_EUNSUPPORTED;
  if (!L__scalar_as(L, n, "value", p.odt, &value)) {
    /* a float value of an integer tensor: exact integers only (the default
     * 0.0 is one) */
    double f;
    if (!L_float(L, n, "value", &f) || !(fabs(f) <= 1e15) || f != trunc(f) ||
        !(value = ir_const_i(ir, (int64_t)f, p.odt)))
      return GC_EUNSUPPORTED;
  }
  if (L__numel(p.rank, p.sizes) == 0)
    return L__empty_output(L, n, &p);
  if (L__numel(x->rank, x->sizes) == 0)
    return L__elementwise_finish(L, n, 0, &p, value);
  gc_sym *at[IR_MAX_RANK];
  ir_expr *inside = NULL;
  gc_dtype i64 = GC_DTYPE_INT64;
  for (int d = 0; d < p.rank; d++) {
    int i = p.rank - 1 - d; /* pad pair i pads dim d */
    int64_t lo = i < np / 2 ? pad[2 * i] : 0;
    int64_t hi = i < np / 2 ? pad[2 * i + 1] : 0;
    if (!padded_size_is(x->sizes[d], lo, hi, p.sizes[d]))
      return GC_EUNSUPPORTED;
    gc_sym *src = gc_sym_addc(s, p.vars[d], -lo);
    if (!src)
      return GC_ENOMEM;
    if (src->lo < 0 || src->hi >= x->sizes[d]) {
      ir_expr *v = ir_index(ir, src, i64);
      ir_expr *c =
          ir_op2(ir, IR_AND, GC_DTYPE_BOOL,
                 ir_op2(ir, IR_GE, i64, v, ir_const_i(ir, 0, i64)),
                 ir_op2(ir, IR_LT, i64, v, ir_const_i(ir, x->sizes[d], i64)));
      inside = inside ? ir_op2(ir, IR_AND, GC_DTYPE_BOOL, inside, c) : c;
    }
    at[d] = L__clamp_index(s, src, x->sizes[d] - 1);
  }
  ir_expr *e = L_load(L, x, at);
  if (inside)
    e = ir_op3(ir, IR_WHERE, p.odt, inside, e, value);
  return L__elementwise_finish(L, n, 0, &p, e);
}

/* ---- reflection and replication padding ---- */

#define MAX_PAD_TERMS 64 /* a padding backward's summed terms per element */
#define AND(a, b) ir_op2(ir, IR_AND, GC_DTYPE_BOOL, a, b)

/* The pads (before, after) of dim k of a rank-`rank` value whose last d dims
 * are padded by `pad` (pairs from the last dim backwards); 0 for the
 * others. */
static void edge_pads(const int64_t *pad, int d, int rank, int k, int64_t *lo,
                      int64_t *hi) {
  int i = rank - 1 - k;
  *lo = i < d ? pad[2 * i] : 0;
  *hi = i < d ? pad[2 * i + 1] : 0;
}

/* The padding (*pad) and the checks both directions share, for input
 * sizes `in` (self's; for a backward, its output's) and padded sizes `out`:
 * pads not negative, below the input's size for reflection (eager raises),
 * in + lo + hi = out. */
static bool edge_pad_args(lower_ctx *L, const gc_node *n, int d, bool repl,
                          int rank, const int64_t *in, const int64_t *out,
                          const int64_t **pad) {
  int np;
  if (!L_ints(L, n, "padding", pad, &np) || np != 2 * d ||
      (rank != d + 1 && rank != d + 2))
    return false;
  for (int k = 0; k < rank; k++) {
    int64_t lo, hi;
    edge_pads(*pad, d, rank, k, &lo, &hi);
    if (lo < 0 || hi < 0 || !padded_size_is(in[k], lo, hi, out[k]) ||
        (in[k] == 0 && out[k] != 0) ||
        (!repl && (lo >= in[k] || hi >= in[k]) && (lo || hi)))
      return false;
  }
  return true;
}

/* A padding rule's start: its output (p), padded dims (*d) and mode (*repl)
 * from the table's param (d, plus 10 for replication). */
static int edge_pad_begin(lower_ctx *L, const gc_node *n, int param,
                          L__elementwise *p, int *d, bool *repl) {
  *d = param % 10;
  *repl = param >= 10;
  return L__elementwise_begin(L, n, 0, p);
}

/* reflection_pad1d/2d/3d, replication_pad1d/2d/3d(self, padding): the last
 * d dims padded with the input's own elements, reflected about the edge
 * (which is not repeated: source index |t| below 0, 2 (in - 1) - t above
 * in - 1, t = o - lo), or the edge repeated (t clamped). param: d, plus 10
 * for replication. */
int lower_edge_pad(lower_ctx *L, const gc_node *n, int param) {
  int d;
  bool repl;
  L__elementwise p;
  int rc = edge_pad_begin(L, n, param, &p, &d, &repl);
  if (rc)
    return rc;
  ir_tensor *x = L_tensor(L, n, "self");
  const int64_t *pad;
  if (!x || x->rank != p.rank || p.odt != x->dtype ||
      !edge_pad_args(L, n, d, repl, p.rank, x->sizes, p.sizes, &pad))
    return GC_EUNSUPPORTED;
  if (L__numel(p.rank, p.sizes) == 0)
    return L__empty_output(L, n, &p);
  gc_symctx *s = &L_ir(L)->sym;
  gc_sym *at[IR_MAX_RANK];
  for (int k = 0; k < p.rank; k++) {
    int64_t lo, hi, in = x->sizes[k];
    edge_pads(pad, d, p.rank, k, &lo, &hi);
    gc_sym *t = gc_sym_addc(s, p.vars[k], -lo);
    if (lo == 0 && hi == 0)
      at[k] = t;
    else if (repl)
      at[k] = L__clamp_index(s, t, in - 1);
    else /* max(-t, min(t, 2 (in-1) - t)): min and max of affine terms,
            which code generation splits into ranges; clamped too, as
            interval ranges cannot show that it stays inside */
      at[k] = L__clamp_index(
          s,
          gc_sym_max(
              s, gc_sym_scale(s, t, -1),
              gc_sym_min(s, t,
                         gc_sym_addc(s, gc_sym_scale(s, t, -1), 2 * (in - 1)))),
          in - 1);
    if (!at[k])
      return GC_ENOMEM;
  }
  return L__elementwise_finish(L, n, 0, &p, L_load(L, x, at));
}

/* One output position that copied input element i of a padded axis: o =
 * `at` (a symbolic index), taken when `ok` (NULL: always). */
typedef struct {
  gc_sym *at;
  ir_expr *ok;
} pad_src;

/* The output positions that copied input element i (variable v) of an axis
 * of `in` elements padded by (lo, hi) to `out`, in increasing order; their
 * count. Reflection: lo - i (for 1 <= i <= lo), i + lo, lo + 2 (in - 1) - i
 * (for in - 1 - hi <= i <= in - 2). Replication: i + lo, and for the edges
 * every padded position: o in [min(i + lo, i (lo + 1)), i + lo + (i == in -
 * 1) hi], m = (in == 1 ? lo + hi : max(lo, hi)) + 1 candidates. */
static int pad_sources(lower_ctx *L, bool repl, gc_sym *v, int64_t in,
                       int64_t out, int64_t lo, int64_t hi, pad_src *src) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_dtype i64 = GC_DTYPE_INT64;
  if (lo == 0 && hi == 0) {
    src[0] = (pad_src){v, NULL};
    return 1;
  }
  if (!repl) {
    ir_expr *iv = ir_index(ir, v, i64);
    src[0] = (pad_src){
        L__clamp_index(s, gc_sym_addc(s, gc_sym_scale(s, v, -1), lo), out - 1),
        AND(ir_op2(ir, IR_GE, i64, iv, ir_const_i(ir, 1, i64)),
            ir_op2(ir, IR_LE, i64, iv, ir_const_i(ir, lo, i64)))};
    src[1] = (pad_src){gc_sym_addc(s, v, lo), NULL};
    src[2] = (pad_src){
        L__clamp_index(
            s, gc_sym_addc(s, gc_sym_scale(s, v, -1), lo + 2 * (in - 1)),
            out - 1),
        AND(ir_op2(ir, IR_GE, i64, iv, ir_const_i(ir, in - 1 - hi, i64)),
            ir_op2(ir, IR_LE, i64, iv, ir_const_i(ir, in - 2, i64)))};
    return 3;
  }
  int64_t m = (in == 1 ? lo + hi : (lo > hi ? lo : hi)) + 1;
  if (m > MAX_PAD_TERMS)
    return -1;
  gc_sym *first =
      gc_sym_min(s, gc_sym_addc(s, v, lo), gc_sym_scale(s, v, lo + 1));
  gc_sym *last = gc_sym_max(
      s, gc_sym_addc(s, v, lo),
      gc_sym_addc(s, gc_sym_scale(s, gc_sym_addc(s, v, -(in - 2)), hi + 1),
                  in - 2 + lo));
  for (int64_t j = 0; j < m; j++) {
    gc_sym *o = gc_sym_addc(s, first, j);
    src[j] = (pad_src){L__clamp_index(s, o, out - 1),
                       j == 0 ? NULL
                              : ir_op2(ir, IR_LE, i64, ir_index(ir, o, i64),
                                       ir_index(ir, last, i64))};
  }
  return (int)m;
}

/* reflection_pad1d/2d/3d_backward, replication_pad1d/2d/3d_backward
 * (grad_output, self, padding): the gradient of each input element sums
 * grad_output over the positions that copied it (pad_sources), in ATen's
 * order (it adds every output position into zeros, first padded dim
 * outermost), from 0.0; positions not taken add 0.0. */
int lower_edge_pad_backward(lower_ctx *L, const gc_node *n, int param) {
  int d;
  bool repl;
  L__elementwise p;
  int rc = edge_pad_begin(L, n, param, &p, &d, &repl);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  ir_tensor *g = L_tensor(L, n, "grad_output"), *x = L_tensor(L, n, "self");
  const int64_t *pad;
  if (!g || !x || g->rank != p.rank || x->rank != p.rank || g->dtype != p.odt ||
      !edge_pad_args(L, n, d, repl, p.rank, p.sizes, g->sizes, &pad))
    return GC_EUNSUPPORTED;
  for (int k = 0; k < p.rank; k++)
    if (x->sizes[k] != p.sizes[k])
      return GC_EUNSUPPORTED;
  if (L__numel(p.rank, p.sizes) == 0)
    return L__empty_output(L, n, &p);
  pad_src src[IR_MAX_RANK][MAX_PAD_TERMS];
  int cnt[IR_MAX_RANK], terms = 1;
  for (int k = 0; k < p.rank; k++) {
    int64_t lo, hi;
    edge_pads(pad, d, p.rank, k, &lo, &hi);
    cnt[k] = pad_sources(L, repl, p.vars[k], p.sizes[k], g->sizes[k], lo, hi,
                         src[k]);
    if (cnt[k] < 1 || (terms *= cnt[k]) > MAX_PAD_TERMS)
      return GC_EUNSUPPORTED;
  }
  ir_expr *acc = ir_const_f(ir, 0, p.odt);
  int j[IR_MAX_RANK] = {0};
  gc_sym *at[IR_MAX_RANK];
  for (int t = 0; t < terms; t++) {
    ir_expr *ok = NULL;
    for (int k = 0; k < p.rank; k++) {
      at[k] = src[k][j[k]].at;
      if (src[k][j[k]].ok)
        ok = ok ? AND(ok, src[k][j[k]].ok) : src[k][j[k]].ok;
    }
    ir_expr *v = L_load(L, g, at);
    if (ok)
      v = ir_op3(ir, IR_WHERE, p.odt, ok, v, ir_const_f(ir, 0, p.odt));
    acc = ir_op2(ir, IR_ADD, p.odt, acc, v);
    for (int k = p.rank - 1; k >= 0 && ++j[k] == cnt[k]; k--)
      j[k] = 0;
  }
  return L__elementwise_finish(L, n, 0, &p, acc);
}
#undef AND
