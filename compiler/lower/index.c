/*
 * index.c: lowering of the operators that read their input at indices that
 * are data (embedding, index_select, gather) or piecewise (cat,
 * constant_pad_nd). All return unrealized pointwise values over the
 * output's shape.
 *
 * Indices read from data are IR_GATHER loads from a realized buffer (a
 * view of an input or an intermediate, through its strides): generated
 * code checks each index against the gathered dim's size, and an index
 * out of range makes the call raise IndexError, as eager does (none of the
 * three wraps negative indices: -1 is out of range). A gathered dim of
 * size 0 with a non-empty output is declined (eager raises; the fallback
 * does). int32 and int64 indices are read (gather requires int64, as
 * eager).
 *
 * cat selects, per element along `dim`, which input it comes from: a chain
 * of where() over the inputs, each loaded at an index clamped into its own
 * range, so unselected loads stay in bounds; more than MAX_CAT inputs are
 * concatenated in realized groups first.
 * Inputs that eager skips (1-D and empty) and inputs of size 0 along dim
 * take no part; each input is converted to the output's dtype (cat
 * promotes). constant_pad_nd reads the input where the padded index falls
 * inside it (negative pads crop) and the value elsewhere;
 * slice_backward and select_backward read the gradient where the slice or
 * select took its elements and give 0 elsewhere.
 */
#include <math.h>
#include <string.h>

#include "compiler/lower/pointwise.h"

#define MAX_CAT 16 /* cat inputs per where() chain (see lower_cat) */

static int64_t numel(int rank, const int64_t *sizes) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= sizes[i];
  return n;
}

static bool index_dtype(gc_dtype d) {
  return d == GC_DTYPE_INT64 || d == GC_DTYPE_INT32;
}

/* A gather from view v: element of v at index `at` (v->rank entries) with
 * dim `dim` replaced by the data index `i`. */
static ir_expr *gather_at(lower_ctx *L, ir_view *v, gc_sym **at, int dim,
                          ir_expr *i) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_sym *off = gc_sym_const(s, v->offset);
  for (int k = 0; k < v->rank; k++)
    if (k != dim)
      off = gc_sym_add(s, off, gc_sym_scale(s, at[k], v->strides[k]));
  if (!off || !i)
    return NULL;
  return ir_gather(ir, v->buf, off, ir_cast(ir, i, GC_DTYPE_INT64),
                   v->strides[dim], v->sizes[dim], false);
}

/* Element `at` of x with dim `dim` the data index `i` (as gather_at), or
 * NULL (*rc set): from x's loop when x is computed and the output (`out`
 * elements) is no larger than x, so computing only the gathered elements
 * never computes more than realizing x would; else from x realized. */
static ir_expr *gather_from(lower_ctx *L, ir_tensor *x, int64_t out,
                            gc_sym **at, int dim, ir_expr *i, int *rc) {
  ir_expr *e = NULL;
  if (out <= numel(x->rank, x->sizes))
    e = L_gather_loop(L, x, at, dim, i, false); /* NULL: not a loop */
  if (!e) {
    ir_view v;
    if (!L_as_buffer(L, x, &v)) {
      *rc = GC_ENOMEM;
      return NULL;
    }
    e = gather_at(L, &v, at, dim, i);
  }
  if (!e)
    *rc = GC_ENOMEM;
  return e;
}

/* The output of n is empty: a constant. */
static int empty(lower_ctx *L, const gc_node *n, L__elementwise *p) {
  return L__elementwise_finish(L, n, 0, p, ir_const_i(L_ir(L), 0, p->odt));
}

/* embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse):
 * out[..., j] = weight[indices[...], j]. */
int lower_embedding(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *w = L_tensor(L, n, "weight"), *ix = L_tensor(L, n, "indices");
  if (!w || !ix || w->rank != 2 || !index_dtype(ix->dtype) ||
      p.rank != ix->rank + 1 || p.odt != w->dtype)
    return GC_EUNSUPPORTED;
  if (numel(p.rank, p.sizes) == 0)
    return empty(L, n, &p);
  if (w->sizes[0] == 0)
    return GC_EUNSUPPORTED;
  gc_sym *at[2] = {NULL, p.vars[p.rank - 1]};
  ir_expr *i = L_load(L, ix, p.vars);
  ir_expr *e = gather_from(L, w, numel(p.rank, p.sizes), at, 0, i, &rc);
  return e ? L__elementwise_finish(L, n, 0, &p, e) : rc;
}

/* index_select(self, dim, index): out[.., j, ..] = self[.., index[j], ..]. */
int lower_index_select(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *x = L_tensor(L, n, "self"), *ix = L_tensor(L, n, "index");
  int64_t dim;
  if (!x || !ix || !L_int(L, n, "dim", &dim) || x->rank == 0 || ix->rank > 1 ||
      !index_dtype(ix->dtype) || p.rank != x->rank || p.odt != x->dtype)
    return GC_EUNSUPPORTED;
  if (dim < 0)
    dim += x->rank;
  if (dim < 0 || dim >= x->rank)
    return GC_EUNSUPPORTED;
  if (numel(p.rank, p.sizes) == 0)
    return empty(L, n, &p);
  if (x->sizes[dim] == 0)
    return GC_EUNSUPPORTED;
  ir_expr *i = L_load(L, ix, ix->rank ? &p.vars[dim] : NULL);
  ir_expr *e =
      gather_from(L, x, numel(p.rank, p.sizes), p.vars, (int)dim, i, &rc);
  return e ? L__elementwise_finish(L, n, 0, &p, e) : rc;
}

/* gather(self, dim, index, sparse_grad): out[i] = self[i with dim replaced
 * by index[i]]; out has index's shape. */
int lower_gather(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *x = L_tensor(L, n, "self"), *ix = L_tensor(L, n, "index");
  int64_t dim;
  if (!x || !ix || !L_int(L, n, "dim", &dim) || ix->dtype != GC_DTYPE_INT64 ||
      p.odt != x->dtype)
    return GC_EUNSUPPORTED;
  int rank = x->rank ? x->rank : 1;
  if (dim < 0)
    dim += rank;
  if (dim < 0 || dim >= rank || x->rank == 0 || ix->rank != x->rank ||
      p.rank != ix->rank)
    return GC_EUNSUPPORTED; /* 0-D gathers fall back */
  for (int k = 0; k < x->rank; k++)
    if (k != dim && ix->sizes[k] > x->sizes[k])
      return GC_EUNSUPPORTED; /* eager raises */
  if (numel(p.rank, p.sizes) == 0)
    return empty(L, n, &p);
  if (x->sizes[dim] == 0)
    return GC_EUNSUPPORTED;
  ir_expr *i = L_load(L, ix, p.vars);
  ir_expr *e =
      gather_from(L, x, numel(p.rank, p.sizes), p.vars, (int)dim, i, &rc);
  return e ? L__elementwise_finish(L, n, 0, &p, e) : rc;
}

/* `e` clamped to [0, hi]. */
static gc_sym *clamp(gc_symctx *s, gc_sym *e, int64_t hi) {
  if (e->lo >= 0 && e->hi <= hi)
    return e;
  return gc_sym_max(s, gc_sym_min(s, e, gc_sym_const(s, hi)),
                    gc_sym_const(s, 0));
}

/* The where() chain selecting, at index `vars` of a tensor of `rank`
 * dims, the element of parts[0..np) (concatenated along dim, parts[k]
 * starting at start[k]; start[np] is the total) in dtype dt. */
static ir_expr *cat_chain(lower_ctx *L, ir_tensor **parts, const int64_t *start,
                          int np, int rank, int dim, gc_sym **vars,
                          gc_dtype dt) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_dtype i64 = GC_DTYPE_INT64;
  ir_expr *j = ir_index(ir, vars[dim], i64);
  ir_expr *e = NULL;
  gc_sym *at[IR_MAX_RANK];
  memcpy(at, vars, (size_t)rank * sizeof *at);
  for (int k = np - 1; k >= 0; k--) {
    at[dim] = clamp(s, gc_sym_addc(s, vars[dim], -start[k]),
                    parts[k]->sizes[dim] - 1);
    ir_expr *x = ir_cast(ir, L_load(L, parts[k], at), dt);
    e = !e ? x
           : ir_op3(
                 ir, IR_WHERE, dt,
                 ir_op2(ir, IR_LT, i64, j, ir_const_i(ir, start[k + 1], i64)),
                 x, e);
  }
  return e;
}

/* cat(tensors, dim). More than MAX_CAT inputs are concatenated in groups
 * of MAX_CAT first (each group realized), so no element evaluates more
 * than MAX_CAT loads. */
/* cat's and stack's arguments: the output (p), the inputs (*ts, *nt) and
 * dim, made non-negative against the output's rank. */
static int cat_args(lower_ctx *L, const gc_node *n, L__elementwise *p,
                    ir_tensor ***ts, int *nt, int64_t *dim) {
  int rc = L__elementwise_begin(L, n, 0, p);
  if (rc)
    return rc;
  *nt = L_tensors(L, n, "tensors", ts);
  if (*nt < 1 || *nt > MAX_CAT * MAX_CAT || !L_int(L, n, "dim", dim) ||
      p->rank == 0)
    return GC_EUNSUPPORTED;
  if (*dim < 0)
    *dim += p->rank;
  return *dim < 0 || *dim >= p->rank ? GC_EUNSUPPORTED : 0;
}

int lower_cat(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  L__elementwise p;
  ir_tensor **ts;
  int nt;
  int64_t dim;
  int rc = cat_args(L, n, &p, &ts, &nt, &dim);
  if (rc)
    return rc;
  bool sym = L_symbolic(L);
  if (sym)
    for (int k = 0; k < nt; k++)
      if (!ts[k] || !ts[k]->ssizes)
        return GC_EUNSUPPORTED;
  /* the inputs that contribute, and where each starts along dim */
  ir_tensor **part = gc_arena_calloc(ir->a, (size_t)nt + 1, sizeof *part);
  int64_t *start = gc_arena_calloc(ir->a, (size_t)nt + 1, sizeof *start);
  if (!part || !start)
    return GC_ENOMEM;
  int np = 0;
  int64_t off = 0;
  for (int k = 0; k < nt; k++) {
    ir_tensor *t = ts[k];
    if (!t)
      return GC_EUNSUPPORTED;
    if (t->rank == 1 && t->sizes[0] == 0 && p.rank != 1)
      continue; /* eager skips legacy empty tensors */
    if (t->rank != p.rank)
      return GC_EUNSUPPORTED;
    /* with size symbols: the other dims equal as expressions (hash-consed:
     * pointers), and the sizes along dim constants, so every part starts
     * at a constant (a symbolic start falls back) */
    for (int i = 0; i < p.rank; i++)
      if (i != dim &&
          (sym ? t->ssizes[i] != p.ssizes[i] : t->sizes[i] != p.sizes[i]))
        return GC_EUNSUPPORTED;
    if (t->sizes[dim] == IR_SYMBOLIC)
      return GC_EUNSUPPORTED;
    if (t->sizes[dim] == 0)
      continue;
    part[np] = t;
    start[np++] = off;
    off += t->sizes[dim];
  }
  if (off != p.sizes[dim])
    return GC_EUNSUPPORTED;
  if ((!sym && numel(p.rank, p.sizes) == 0) || np == 0)
    return empty(L, n, &p);
  start[np] = off;
  if (np > MAX_CAT && sym)
    return GC_EUNSUPPORTED; /* the groups are made with constant sizes */
  if (np > MAX_CAT) {       /* groups of MAX_CAT, each a realized buffer */
    int ng = 0;
    for (int g = 0; g < np; g += MAX_CAT) {
      int cnt = np - g < MAX_CAT ? np - g : MAX_CAT;
      if (cnt == 1) { /* a group of one is that input */
        part[ng] = part[g];
        start[ng++] = start[g];
        continue;
      }
      int64_t gsz[IR_MAX_RANK], gst[MAX_CAT + 1];
      memcpy(gsz, p.sizes, (size_t)p.rank * sizeof *gsz);
      gsz[dim] = start[g + cnt] - start[g];
      for (int k = 0; k <= cnt; k++)
        gst[k] = start[g + k] - start[g];
      gc_sym **gv = L_vars(L, p.rank, gsz);
      if (!gv)
        return GC_ENOMEM;
      ir_tensor *gt = L_pointwise(
          L, n, p.odt, p.rank, gsz, gv,
          cat_chain(L, &part[g], gst, cnt, p.rank, (int)dim, gv, p.odt));
      if (!gt || !L_realize(L, gt, L_out_meta(n, 0)))
        return GC_ENOMEM;
      part[ng] = gt;
      start[ng++] = start[g];
    }
    start[ng] = off;
    np = ng;
  }
  return L__elementwise_finish(
      L, n, 0, &p,
      cat_chain(L, part, start, np, p.rank, (int)dim, p.vars, p.odt));
}

/* The where() chain selecting, at index `vars` of a tensor of `rank` dims,
 * the element of ts[vars[dim]] (each of rank - 1 dims, stacked along dim)
 * in dtype dt. */
static ir_expr *stack_chain(lower_ctx *L, ir_tensor **ts, int cnt, int rank,
                            int dim, gc_sym **vars, gc_dtype dt) {
  ir_graph *ir = L_ir(L);
  gc_dtype i64 = GC_DTYPE_INT64;
  gc_sym *at[IR_MAX_RANK];
  for (int i = 0, k = 0; i < rank; i++)
    if (i != dim)
      at[k++] = vars[i];
  ir_expr *j = ir_index(ir, vars[dim], i64), *e = NULL;
  for (int k = cnt - 1; k >= 0; k--) {
    ir_expr *x = ir_cast(ir, L_load(L, ts[k], at), dt);
    e = !e ? x
           : ir_op3(ir, IR_WHERE, dt,
                    ir_op2(ir, IR_LT, i64, j, ir_const_i(ir, k + 1, i64)), x,
                    e);
  }
  return e;
}

/* stack(tensors, dim): the inputs, all of one shape, side by side along a
 * new dim: out[.., k, ..] = tensors[k][.., ..]. More than MAX_CAT inputs
 * are stacked in groups of MAX_CAT first (each realized) and the groups
 * concatenated, so no element evaluates more than MAX_CAT loads. */
int lower_stack(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  L__elementwise p;
  ir_tensor **ts;
  int nt;
  int64_t dim; /* against the output's rank: the inputs' plus one */
  int rc = cat_args(L, n, &p, &ts, &nt, &dim);
  if (rc)
    return rc;
  if (p.sizes[dim] != nt)
    return GC_EUNSUPPORTED;
  for (int k = 0; k < nt; k++) {
    if (!ts[k] || ts[k]->rank != p.rank - 1)
      return GC_EUNSUPPORTED;
    for (int i = 0, j = 0; i < p.rank; i++)
      if (i != dim && ts[k]->sizes[j++] != p.sizes[i])
        return GC_EUNSUPPORTED;
  }
  if (numel(p.rank, p.sizes) == 0)
    return empty(L, n, &p);
  if (nt <= MAX_CAT)
    return L__elementwise_finish(
        L, n, 0, &p, stack_chain(L, ts, nt, p.rank, (int)dim, p.vars, p.odt));
  ir_tensor **part = gc_arena_calloc(ir->a, MAX_CAT + 1, sizeof *part);
  int64_t start[MAX_CAT + 1];
  if (!part)
    return GC_ENOMEM;
  int ng = 0;
  for (int g = 0; g < nt; g += MAX_CAT) {
    int cnt = nt - g < MAX_CAT ? nt - g : MAX_CAT;
    int64_t gsz[IR_MAX_RANK];
    memcpy(gsz, p.sizes, (size_t)p.rank * sizeof *gsz);
    gsz[dim] = cnt;
    gc_sym **gv = L_vars(L, p.rank, gsz);
    if (!gv)
      return GC_ENOMEM;
    ir_tensor *gt =
        L_pointwise(L, n, p.odt, p.rank, gsz, gv,
                    stack_chain(L, &ts[g], cnt, p.rank, (int)dim, gv, p.odt));
    /* a group of one is one load: left inline */
    if (!gt || (cnt > 1 && !L_realize(L, gt, L_out_meta(n, 0))))
      return GC_ENOMEM;
    part[ng] = gt;
    start[ng++] = g;
  }
  start[ng] = nt;
  return L__elementwise_finish(
      L, n, 0, &p,
      cat_chain(L, part, start, ng, p.rank, (int)dim, p.vars, p.odt));
}

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
  if (numel(p.rank, p.sizes) == 0)
    return empty(L, n, &p);
  if (numel(x->rank, x->sizes) == 0)
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
    at[d] = clamp(s, src, x->sizes[d] - 1);
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
  if (numel(p.rank, p.sizes) == 0)
    return empty(L, n, &p);
  gc_symctx *s = &L_ir(L)->sym;
  gc_sym *at[IR_MAX_RANK];
  for (int k = 0; k < p.rank; k++) {
    int64_t lo, hi, in = x->sizes[k];
    edge_pads(pad, d, p.rank, k, &lo, &hi);
    gc_sym *t = gc_sym_addc(s, p.vars[k], -lo);
    if (lo == 0 && hi == 0)
      at[k] = t;
    else if (repl)
      at[k] = clamp(s, t, in - 1);
    else /* max(-t, min(t, 2 (in-1) - t)): min and max of affine terms,
            which code generation splits into ranges; clamped too, as
            interval ranges cannot show that it stays inside */
      at[k] = clamp(s,
                    gc_sym_max(s, gc_sym_scale(s, t, -1),
                               gc_sym_min(s, t,
                                          gc_sym_addc(s, gc_sym_scale(s, t, -1),
                                                      2 * (in - 1)))),
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
    src[0] =
        (pad_src){clamp(s, gc_sym_addc(s, gc_sym_scale(s, v, -1), lo), out - 1),
                  AND(ir_op2(ir, IR_GE, i64, iv, ir_const_i(ir, 1, i64)),
                      ir_op2(ir, IR_LE, i64, iv, ir_const_i(ir, lo, i64)))};
    src[1] = (pad_src){gc_sym_addc(s, v, lo), NULL};
    src[2] = (pad_src){
        clamp(s, gc_sym_addc(s, gc_sym_scale(s, v, -1), lo + 2 * (in - 1)),
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
    src[j] = (pad_src){clamp(s, o, out - 1),
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
  if (numel(p.rank, p.sizes) == 0)
    return empty(L, n, &p);
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

/* slice_backward and select_backward are zeros with grad_output where the
 * view took its elements; slice_scatter and select_scatter (what
 * functionalization makes of a write through the view: x[:, 0] = v) are
 * self with src there. One rule each way, over a base value. */

/* The output (p), the tensor placed (*g, with `dropped` dims fewer: select
 * drops dim) of the output's dtype, dim normalized, and the base at p's
 * point (*base: zeros of input_sizes for the backwards, self for the
 * scatters). */
static int view_place_begin(lower_ctx *L, const gc_node *n, bool scatter,
                            int dropped, L__elementwise *p, ir_tensor **g,
                            ir_expr **base, int64_t *dim) {
  int rc = L__elementwise_begin(L, n, 0, p);
  if (rc)
    return rc;
  *g = L_tensor(L, n, scatter ? "src" : "grad_output");
  if (!*g || !L_int(L, n, "dim", dim) || (*g)->rank != p->rank - dropped ||
      (*g)->dtype != p->odt)
    return GC_EUNSUPPORTED;
  if (scatter) {
    ir_tensor *self = L_tensor(L, n, "self");
    if (!self || self->rank != p->rank || self->dtype != p->odt)
      return GC_EUNSUPPORTED;
    for (int d = 0; d < p->rank; d++)
      if (self->sizes[d] != p->sizes[d])
        return GC_EUNSUPPORTED;
    *base = p->rank ? L_load(L, self, p->vars) : NULL;
  } else {
    const int64_t *in_sizes;
    int nin;
    if (!L_ints(L, n, "input_sizes", &in_sizes, &nin) || nin != p->rank)
      return GC_EUNSUPPORTED;
    for (int d = 0; d < p->rank; d++)
      if (in_sizes[d] != p->sizes[d])
        return GC_EUNSUPPORTED;
    *base = ir_const_i(L_ir(L), 0, p->odt);
  }
  if (*dim < 0)
    *dim += p->rank;
  if (*dim < 0 || *dim >= p->rank || !*base)
    return GC_EUNSUPPORTED;
  return 0;
}

/* slice_backward(grad_output, input_sizes, dim, start, end, step) and
 * slice_scatter(self, src, dim, start=None, end=None, step=1): the base
 * with grad_output (src) where the slice took its elements (start and end
 * normalized as slicing does: negative ones count from the end, both
 * clamped into the dim; None is the dim's start and end). */
int lower_slice_place(lower_ctx *L, const gc_node *n, int scatter) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  L__elementwise p;
  ir_tensor *g;
  ir_expr *base;
  int64_t dim, start = 0, end = INT64_MAX, step = 1;
  int rc = view_place_begin(L, n, scatter, 0, &p, &g, &base, &dim);
  if (rc)
    return rc;
  const gc_arg *a_start = L_arg(L, n, "start"), *a_end = L_arg(L, n, "end");
  bool none_start = scatter && (!a_start || a_start->kind == GC_ARG_NONE);
  bool none_end = scatter && (!a_end || a_end->kind == GC_ARG_NONE);
  if ((!none_start && !L_int(L, n, "start", &start)) ||
      (!none_end && !L_int(L, n, "end", &end)) || !L_int(L, n, "step", &step) ||
      step <= 0)
    return GC_EUNSUPPORTED;
  for (int d = 0; d < p.rank; d++)
    if (d != dim && g->sizes[d] != p.sizes[d])
      return GC_EUNSUPPORTED;
  int64_t size = p.sizes[dim];
  if (start < 0)
    start += size;
  if (end < 0)
    end += size;
  start = start < 0 ? 0 : start > size ? size : start;
  end = end < start ? start : end > size ? size : end;
  /* (end - start + step - 1) / step would overflow for a step near
   * INT64_MAX (fuzz_native) */
  int64_t len = end > start ? (end - start - 1) / step + 1 : 0;
  if (g->sizes[dim] != len)
    return GC_EUNSUPPORTED;
  if (numel(p.rank, p.sizes) == 0)
    return empty(L, n, &p);
  if (len == 0)
    return L__elementwise_finish(L, n, 0, &p, base);
  gc_sym *j = gc_sym_addc(s, p.vars[dim], -start); /* offset into the slice */
  if (!j)
    return GC_ENOMEM;
  gc_dtype i64 = GC_DTYPE_INT64;
  ir_expr *v = ir_index(ir, j, i64);
  ir_expr *inside =
      ir_op2(ir, IR_AND, GC_DTYPE_BOOL,
             ir_op2(ir, IR_GE, i64, v, ir_const_i(ir, 0, i64)),
             ir_op2(ir, IR_LE, i64, v, ir_const_i(ir, (len - 1) * step, i64)));
  if (step > 1)
    inside =
        ir_op2(ir, IR_AND, GC_DTYPE_BOOL, inside,
               ir_op2(ir, IR_EQ, i64, ir_index(ir, gc_sym_mod(s, j, step), i64),
                      ir_const_i(ir, 0, i64)));
  gc_sym *at[IR_MAX_RANK];
  for (int d = 0; d < p.rank; d++)
    at[d] =
        d == dim ? clamp(s, gc_sym_floordiv(s, j, step), len - 1) : p.vars[d];
  ir_expr *e = ir_op3(ir, IR_WHERE, p.odt, inside, L_load(L, g, at), base);
  return L__elementwise_finish(L, n, 0, &p, e);
}

/* select_backward(grad_output, input_sizes, dim, index) and
 * select_scatter(self, src, dim, index): the base with grad_output (src)
 * at `index` of dim (negative counts from the end). */
int lower_select_place(lower_ctx *L, const gc_node *n, int scatter) {
  ir_graph *ir = L_ir(L);
  L__elementwise p;
  ir_tensor *g;
  ir_expr *base;
  int64_t dim, index;
  int rc = view_place_begin(L, n, scatter, 1, &p, &g, &base, &dim);
  if (rc)
    return rc;
  if (!L_int(L, n, "index", &index))
    return GC_EUNSUPPORTED;
  if (index < 0)
    index += p.sizes[dim];
  if (index < 0 || index >= p.sizes[dim])
    return GC_EUNSUPPORTED;
  gc_sym *at[IR_MAX_RANK];
  for (int d = 0, k = 0; d < p.rank; d++) {
    if (d == dim)
      continue;
    if (g->sizes[k] != p.sizes[d])
      return GC_EUNSUPPORTED;
    at[k++] = p.vars[d];
  }
  if (numel(p.rank, p.sizes) == 0)
    return empty(L, n, &p);
  gc_dtype i64 = GC_DTYPE_INT64;
  ir_expr *here = ir_op2(ir, IR_EQ, i64, ir_index(ir, p.vars[dim], i64),
                         ir_const_i(ir, index, i64));
  ir_expr *e = ir_op3(ir, IR_WHERE, p.odt, here, L_load(L, g, at), base);
  return L__elementwise_finish(L, n, 0, &p, e);
}

/* as_strided_scatter(self, src, size, stride, storage_offset=None): self
 * (its clone, eager's layout, the output's strides) with src written
 * through the view as_strided(size, stride, storage_offset) of its
 * memory, for a view that is dense (its strides dense for its sizes in
 * some dim order: what autograd's as_strided backward makes, a flat
 * buffer seen as the gradient's shape). Output element at memory position
 * e is in the view when 0 <= e - offset < numel(view), and is then src at
 * ((e - offset) / stride_k) mod size_k. */
int lower_as_strided_scatter(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *self = L_tensor(L, n, "self"), *src = L_tensor(L, n, "src");
  const gc_tensor_meta *m = L_out_meta(n, 0);
  const int64_t *sz, *st;
  int nsz, nst;
  int64_t off = 0, os[IR_MAX_RANK];
  const gc_arg *oa = L_arg(L, n, "storage_offset");
  if (!self || !src || !m || self->rank != p.rank || self->dtype != p.odt ||
      src->dtype != p.odt || !L_ints(L, n, "size", &sz, &nsz) ||
      !L_ints(L, n, "stride", &st, &nst) || nsz != src->rank ||
      nst != src->rank ||
      (oa && oa->kind != GC_ARG_NONE && !L_int(L, n, "storage_offset", &off)) ||
      m->offset.expr || m->offset.v != 0)
    return GC_EUNSUPPORTED;
  int64_t numel_out = 1, numel_v = 1;
  for (int d = 0; d < p.rank; d++) {
    if (m->strides[d].expr || self->sizes[d] != p.sizes[d])
      return GC_EUNSUPPORTED;
    os[d] = m->strides[d].v;
    numel_out *= p.sizes[d];
  }
  for (int k = 0; k < src->rank; k++) {
    if (sz[k] != src->sizes[k] || st[k] < 0)
      return GC_EUNSUPPORTED;
    numel_v *= sz[k];
  }
  if (!L_dense_strides(p.rank, p.sizes, os) ||
      !L_dense_strides(src->rank, sz, st) || off < 0 ||
      off + numel_v > numel_out)
    return GC_EUNSUPPORTED;
  if (numel_out == 0)
    return empty(L, n, &p);
  ir_expr *base = L_load(L, self, p.vars);
  if (numel_v == 0)
    return L__elementwise_finish(L, n, 0, &p, base);
  gc_sym *j = gc_sym_const(s, -off); /* position in the view's block */
  for (int d = 0; d < p.rank; d++)
    j = gc_sym_add(s, j, gc_sym_scale(s, p.vars[d], os[d]));
  if (!j)
    return GC_ENOMEM;
  gc_sym *at[IR_MAX_RANK];
  for (int k = 0; k < src->rank; k++)
    at[k] = sz[k] == 1 ? gc_sym_const(s, 0)
                       : gc_sym_mod(s, gc_sym_floordiv(s, j, st[k]), sz[k]);
  gc_dtype i64 = GC_DTYPE_INT64;
  ir_expr *v = ir_index(ir, j, i64);
  ir_expr *inside =
      ir_op2(ir, IR_AND, GC_DTYPE_BOOL,
             ir_op2(ir, IR_GE, i64, v, ir_const_i(ir, 0, i64)),
             ir_op2(ir, IR_LT, i64, v, ir_const_i(ir, numel_v, i64)));
  ir_expr *e = ir_op3(ir, IR_WHERE, p.odt, inside, L_load(L, src, at), base);
  return L__elementwise_finish(L, n, 0, &p, e);
}

/* diagonal_scatter(self, src, offset=0, dim1=0, dim2=1): self with src on
 * the diagonal (src's last dim runs along it, its others are self's other
 * dims in order): where i2 - i1 == offset, src[..., offset >= 0 ? i1 : i2]. */
int lower_diagonal_scatter(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *self = L_tensor(L, n, "self"), *src = L_tensor(L, n, "src");
  int64_t off = 0, d1 = 0, d2 = 1;
  L_int(L, n, "offset", &off);
  L_int(L, n, "dim1", &d1);
  L_int(L, n, "dim2", &d2);
  int r = p.rank;
  if (d1 < 0)
    d1 += r;
  if (d2 < 0)
    d2 += r;
  if (!self || !src || r < 2 || d1 < 0 || d1 >= r || d2 < 0 || d2 >= r ||
      d1 == d2 || self->rank != r || src->rank != r - 1 ||
      self->dtype != p.odt || src->dtype != p.odt)
    return GC_EUNSUPPORTED;
  int64_t len = off >= 0 ? p.sizes[d2] - off : p.sizes[d1] + off;
  if (p.sizes[d1] < len)
    len = p.sizes[d1];
  if (p.sizes[d2] < len)
    len = p.sizes[d2];
  if (len < 0)
    len = 0;
  gc_sym *at[IR_MAX_RANK];
  for (int d = 0, k = 0; d < r; d++) {
    if (self->sizes[d] != p.sizes[d])
      return GC_EUNSUPPORTED;
    if (d == d1 || d == d2)
      continue;
    if (src->sizes[k] != p.sizes[d])
      return GC_EUNSUPPORTED;
    at[k++] = p.vars[d];
  }
  if (src->sizes[r - 2] != len)
    return GC_EUNSUPPORTED;
  if (numel(r, p.sizes) == 0)
    return empty(L, n, &p);
  ir_expr *base = L_load(L, self, p.vars);
  if (len == 0)
    return L__elementwise_finish(L, n, 0, &p, base);
  gc_symctx *s = &ir->sym;
  gc_sym *i = off >= 0 ? p.vars[d1] : p.vars[d2]; /* position on it */
  at[r - 2] = clamp(s, i, len - 1);
  gc_dtype i64 = GC_DTYPE_INT64;
  ir_expr *on = ir_op2(
      ir, IR_AND, GC_DTYPE_BOOL,
      ir_op2(ir, IR_EQ, i64,
             ir_op2(ir, IR_SUB, i64, ir_index(ir, p.vars[d2], i64),
                    ir_index(ir, p.vars[d1], i64)),
             ir_const_i(ir, off, i64)),
      ir_op2(ir, IR_LT, i64, ir_index(ir, i, i64), ir_const_i(ir, len, i64)));
  ir_expr *e = ir_op3(ir, IR_WHERE, p.odt, on, L_load(L, src, at), base);
  return L__elementwise_finish(L, n, 0, &p, e);
}

/* index.Tensor with several index tensors (pos[0..m) the indexed dims):
 * they broadcast together to B; the output is self's other dims with B in
 * place of the indexed ones when those are adjacent, else B first (NumPy's
 * rule). Each index is checked against its dim's size (and wrapped when
 * negative) by a gather from an iota buffer, the element read by one gather
 * at the sum of the checked indices times the dims' strides. */
static int index_several(lower_ctx *L, const gc_node *n, L__elementwise *p,
                         ir_tensor *x, ir_tensor **ix, const int *pos, int m) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_dtype i64 = GC_DTYPE_INT64;
  bool adjacent = pos[m - 1] - pos[0] == m - 1;
  int br = p->rank - (x->rank - m); /* B's rank */
  if (br < 0 || br > p->rank)
    return GC_EUNSUPPORTED;
  int b0 = adjacent ? pos[0] : 0; /* B's first dim in the output */
  bool indexed[IR_MAX_RANK] = {false};
  for (int k = 0; k < m; k++) {
    indexed[pos[k]] = true;
    ir_tensor *t = ix[pos[k]];
    if (t->rank > br)
      return GC_EUNSUPPORTED;
    for (int j = 0; j < t->rank; j++)
      if (t->sizes[j] != 1 && t->sizes[j] != p->sizes[b0 + br - t->rank + j])
        return GC_EUNSUPPORTED;
  }
  int outdim[IR_MAX_RANK]; /* the output dim of each dim not indexed */
  for (int d = 0, u = 0; d < x->rank; d++) {
    if (indexed[d])
      continue;
    outdim[d] = adjacent ? (d < pos[0] ? d : d - m + br) : br + u;
    u++;
    if (p->sizes[outdim[d]] != x->sizes[d])
      return GC_EUNSUPPORTED;
  }
  for (int d = 0; d < x->rank; d++)
    if (indexed[d] && x->sizes[d] == 0 && numel(p->rank, p->sizes) != 0)
      return GC_EUNSUPPORTED; /* eager raises */
  if (numel(p->rank, p->sizes) == 0)
    return empty(L, n, p);
  ir_view v;
  if (!L_as_buffer(L, x, &v))
    return GC_ENOMEM;
  gc_sym *base = gc_sym_const(s, v.offset);
  ir_expr *flat = NULL;
  int64_t span = 1;
  for (int d = 0; d < x->rank; d++) {
    if (!indexed[d]) {
      base = gc_sym_add(s, base,
                        gc_sym_scale(s, p->vars[outdim[d]], v.strides[d]));
      continue;
    }
    if (v.strides[d] < 0)
      return GC_EUNSUPPORTED;
    ir_expr *g = L_checked_index(L, n, L_load_bcast(L, ix[d], br, &p->vars[b0]),
                                 x->sizes[d]);
    if (!g)
      return GC_ENOMEM;
    if (v.strides[d] != 1)
      g = ir_op2(ir, IR_MUL, i64, g, ir_const_i(ir, v.strides[d], i64));
    flat = flat ? ir_op2(ir, IR_ADD, i64, flat, g) : g;
    span += (x->sizes[d] - 1) * v.strides[d];
  }
  if (!base || !flat)
    return GC_ENOMEM;
  return L__elementwise_finish(
      L, n, 0, p, ir_gather(ir, v.buf, base, flat, 1, span, false));
}

/* index.Tensor(self, indices): integer index tensors (any shapes that
 * broadcast) at some dims, the others None. One index tensor at dim d:
 * out = self[:, ..., idx, ...] with the index's dims in place of dim d, a
 * gather along d; several: index_several. Negative indices count from the
 * end (advanced indexing wraps, unlike index_select). Boolean masks fall
 * back. */
int lower_index_tensor(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_tensor *x = L_tensor(L, n, "self");
  ir_tensor **ix;
  int ni = L_tensors(L, n, "indices", &ix);
  if (!x || ni < 1 || ni > x->rank || p.odt != x->dtype)
    return GC_EUNSUPPORTED;
  int d = -1, pos[IR_MAX_RANK], m = 0;
  for (int k = 0; k < ni; k++)
    if (ix[k]) {
      if (!index_dtype(ix[k]->dtype))
        return GC_EUNSUPPORTED;
      d = pos[m++] = k;
    }
  if (m > 1)
    return index_several(L, n, &p, x, ix, pos, m);
  if (d < 0)
    return GC_EUNSUPPORTED;
  ir_tensor *t = ix[d];
  if (p.rank != x->rank - 1 + t->rank)
    return GC_EUNSUPPORTED;
  for (int k = 0; k < x->rank; k++) {
    int o = k < d ? k : k + t->rank - 1;
    if (k != d && p.sizes[o] != x->sizes[k])
      return GC_EUNSUPPORTED;
  }
  for (int k = 0; k < t->rank; k++)
    if (p.sizes[d + k] != t->sizes[k])
      return GC_EUNSUPPORTED;
  if (numel(p.rank, p.sizes) == 0)
    return empty(L, n, &p);
  if (x->sizes[d] == 0)
    return GC_EUNSUPPORTED;
  ir_view v;
  if (!L_as_buffer(L, x, &v))
    return GC_ENOMEM;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_sym *off = gc_sym_const(s, v.offset);
  for (int k = 0; k < x->rank; k++)
    if (k != d)
      off = gc_sym_add(
          s, off,
          gc_sym_scale(s, p.vars[k < d ? k : k + t->rank - 1], v.strides[k]));
  ir_expr *i = ir_cast(ir, L_load(L, t, &p.vars[d]), GC_DTYPE_INT64);
  if (!off || !i)
    return GC_ENOMEM;
  return L__elementwise_finish(
      L, n, 0, &p,
      ir_gather(ir, v.buf, off, i, v.strides[d], v.sizes[d], true));
}

/* flip(self, dims): a load through a view with those dims' strides negated
 * (a copy, as eager's: never a view of self). */
int lower_flip(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  ir_tensor *x = L_tensor(L, n, "self");
  const int64_t *dims;
  int nd;
  if (!x || x->rank != p.rank || !L_ints(L, n, "dims", &dims, &nd))
    return GC_EUNSUPPORTED;
  ir_view v;
  if (!L_as_buffer(L, x, &v))
    return GC_ENOMEM;
  int64_t strides[IR_MAX_RANK];
  bool flipped[IR_MAX_RANK] = {false};
  int64_t offset = v.offset;
  memcpy(strides, v.strides, (size_t)v.rank * sizeof *strides);
  for (int i = 0; i < nd; i++) {
    int64_t d = dims[i] < 0 ? dims[i] + v.rank : dims[i];
    if (d < 0 || d >= v.rank || flipped[d])
      return GC_EUNSUPPORTED; /* eager raises; so does the fallback */
    flipped[d] = true;
    if (v.sizes[d] > 0)
      offset += (v.sizes[d] - 1) * strides[d];
    strides[d] = -strides[d];
  }
  ir_tensor *t = ir_tensor_strided(ir, v.buf, v.rank, v.sizes, strides, offset);
  if (!t)
    return GC_ENOMEM;
  return L__elementwise_finish(
      L, n, 0, &p, ir_cast(ir, ir_tensor_load(ir, t, p.vars), p.odt));
}

/* roll(self, shifts, dims): out[i] = self[(i - shift) mod size] along each
 * rolled dim; with no dims, along the flattened tensor (and the shape is
 * kept). A copy, as eager's. */
int lower_roll(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  ir_tensor *x = L_tensor(L, n, "self");
  const int64_t *shifts, *dims;
  int ns, nd;
  if (!x || x->rank != p.rank || p.odt != x->dtype ||
      !L_ints(L, n, "shifts", &shifts, &ns) ||
      !L_ints(L, n, "dims", &dims, &nd))
    return GC_EUNSUPPORTED;
  if (numel(p.rank, p.sizes) == 0)
    return empty(L, n, &p);
  gc_sym *xi[IR_MAX_RANK];
  for (int k = 0; k < p.rank; k++)
    xi[k] = p.vars[k];
  if (nd == 0) { /* the flattened tensor */
    if (ns != 1)
      return GC_EUNSUPPORTED;
    int64_t total = numel(p.rank, p.sizes), st[IR_MAX_RANK], acc = 1;
    gc_sym *flat = gc_sym_const(s, 0);
    for (int k = p.rank - 1; k >= 0; k--) {
      st[k] = acc;
      flat = gc_sym_add(s, flat, gc_sym_scale(s, p.vars[k], acc));
      acc *= p.sizes[k];
    }
    int64_t sh = ((shifts[0] % total) + total) % total;
    gc_sym *src = gc_sym_mod(s, gc_sym_addc(s, flat, total - sh), total);
    for (int k = 0; k < p.rank; k++)
      xi[k] = gc_sym_mod(s, gc_sym_floordiv(s, src, st[k]), p.sizes[k]);
  } else {
    if (ns != nd)
      return GC_EUNSUPPORTED; /* eager raises */
    for (int i = 0; i < nd; i++) {
      int64_t d = dims[i] < 0 ? dims[i] + p.rank : dims[i];
      if (d < 0 || d >= p.rank)
        return GC_EUNSUPPORTED;
      int64_t size = p.sizes[d];
      int64_t sh = ((shifts[i] % size) + size) % size;
      xi[d] = gc_sym_mod(s, gc_sym_addc(s, xi[d], size - sh), size);
    }
  }
  for (int k = 0; k < p.rank; k++)
    if (!xi[k])
      return GC_ENOMEM;
  return L__elementwise_finish(L, n, 0, &p, L_load(L, x, xi));
}

/* repeat(self, repeats): self tiled; output dim k of size
 * repeats[k] * (self's size aligned to the right, 1 where self has none)
 * reads self at the output index modulo self's size. */
int lower_repeat(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  ir_tensor *x = L_tensor(L, n, "self");
  const int64_t *reps;
  int nr;
  if (!x || p.odt != x->dtype || !L_ints(L, n, "repeats", &reps, &nr) ||
      nr != p.rank || nr < x->rank)
    return GC_EUNSUPPORTED;
  int lead = p.rank - x->rank;
  for (int k = 0; k < p.rank; k++) {
    int64_t xs = k < lead ? 1 : x->sizes[k - lead];
    if (reps[k] < 0 || p.sizes[k] != xs * reps[k])
      return GC_EUNSUPPORTED;
  }
  if (numel(p.rank, p.sizes) == 0)
    return empty(L, n, &p);
  gc_sym *xi[IR_MAX_RANK];
  for (int j = 0; j < x->rank; j++)
    if (!(xi[j] = gc_sym_mod(s, p.vars[j + lead], x->sizes[j])))
      return GC_ENOMEM;
  return L__elementwise_finish(L, n, 0, &p, L_load(L, x, xi));
}
