/*
 * verify.c: the loop IR verifier (ir_verify). See ir.h for the model.
 *
 * The verifier states the invariants every pass must keep:
 *   - every node writes buffers it owns (buf->def == node), with an
 *     iteration space equal to the buffer's sizes;
 *   - every load reads a buffer that exists, at an index whose range (from
 *     the loop variables' ranges) stays inside the buffer's span: an
 *     out-of-bounds access is a compiler bug caught here, not a crash in
 *     the user's process; a buffer without elements is read only in a
 *     loop that never runs;
 *   - every buffer has at most IR_MAX_BUF_BYTES bytes;
 *   - loads only use the node's own loop variables;
 *   - nodes are in execution order: a buffer is read only after the node
 *     that writes it;
 *   - expression dtypes agree with the operations (comparisons are bool,
 *     a reduction body has a dtype its reduction accepts);
 *   - half values (float16, bfloat16) are only loaded, stored, selected,
 *     cast and written as constants (half.h): arithmetic on them is
 *     float32 arithmetic between casts, and reductions are not half;
 *   - a scan, scatter or interpolation node (the call nodes generated code
 *     makes) writes only its out= buffer (a scan's indices too), has no
 *     loop of its own, takes no half values, and the operands its code
 *     trusts have the sizes, dtypes and tables it assumes.
 */
#include "compiler/ir/ir.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "compiler/ir/half.h"

/* ---- verifier ---- */

typedef struct vctx {
  const ir_graph *ir;
  const ir_node *n;
  gc_error *err;
  int rc;
  const int *defined_at; /* buffer id -> index of the node defining it */
} vctx;

static void vfail(vctx *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void vfail(vctx *v, const char *fmt, ...) {
  if (v->rc)
    return;
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!v->n)
    v->rc = gc_errorf(v->err, GC_EINTERNAL, "loop IR verifier: %s", msg);
  else
    v->rc =
        gc_errorf(v->err, GC_EINTERNAL, "loop IR verifier: node %d (%s): %s",
                  v->n->id, v->n->what ? v->n->what : "", msg);
}

static bool own_var(const ir_node *n, int var) {
  for (int i = 0; i < n->rank; i++)
    if (n->vars[i]->var == var)
      return true;
  for (int i = 0; i < n->rrank; i++)
    if (n->rvars[i]->var == var)
      return true;
  return false;
}

/* size symbols are everyone's */
static bool only_own_vars(const ir_graph *ir, const ir_node *n,
                          const gc_sym *e) {
  if (e->kind == GC_SYM_VAR)
    return own_var(n, e->var) || ir->sym.vars[e->var].size;
  for (int i = 0; i < e->n; i++)
    if (!only_own_vars(ir, n, e->ops[i]))
      return false;
  return true;
}

/* Does node n's loop run at least once? (A load from a buffer without
 * elements is only harmless in a loop that never does.) */
static bool node_iterates(const ir_node *n) {
  if (!n)
    return false;
  for (int i = 0; i < n->rank; i++)
    if (n->ranges[i] <= 0 && n->ranges[i] != IR_SYMBOLIC)
      return false;
  for (int i = 0; i < n->rrank; i++)
    if (n->rranges[i] <= 0 && n->rranges[i] != IR_SYMBOLIC)
      return false;
  return true;
}

/* A load of buffer b at index ix (gathers have static tables only) inside
 * the symbolic buffer's span at every size: the index never negative, its
 * largest value (each loop index at the end of its extent,
 * gc_sym_upper) provably below the span, or the numeric range inside a
 * static span. */
static bool sym_load_inside(vctx *v, const ir_buf *b, const gc_sym *ix) {
  gc_symctx *s = (gc_symctx *)&v->ir->sym;
  if (ix->lo < 0)
    return false;
  if (!b->symbolic && ix->hi < b->span)
    return true;
  gc_sym *up = gc_sym_upper(s, (gc_sym *)ix);
  return up && b->sspan && gc_sym_le(s, gc_sym_addc(s, up, 1), b->sspan);
}

static void vexpr1(vctx *v, const ir_expr *e) {
  if (ir_reads_buffer(e)) {
    const ir_buf *b = e->load.buf;
    const gc_sym *ix = e->load.index;
    int64_t lo = ix->lo, hi = ix->hi;
    if (e->op == IR_GATHER) { /* the data index is clamped to [0, size) */
      int64_t reach = e->load.stride * (e->load.size - 1);
      lo += reach < 0 ? reach : 0;
      hi += reach > 0 ? reach : 0;
      if (!e->args[0])
        vfail(v, "gather lacks its index");
      else if (e->args[0]->dtype != GC_DTYPE_INT64)
        vfail(v, "gather index must be int64");
    }
    bool sym =
        b->symbolic || (v->ir->nsyms && gc_sym_symbolic(&v->ir->sym, ix));
    if (b->id < 0 || b->id >= v->ir->nbufs || v->ir->bufs[b->id] != b)
      vfail(v, "load from an unknown buffer");
    else if (sym && e->op == IR_GATHER)
      vfail(v, "gather of buf%d with symbolic sizes", b->id);
    else if (sym && !sym_load_inside(v, b, ix))
      vfail(v, "load of buf%d at %s: not provably inside [0, %s) at every size",
            b->id, gc_sym_str((gc_symctx *)&v->ir->sym, ix),
            gc_sym_str((gc_symctx *)&v->ir->sym, b->sspan));
    else if (sym && !only_own_vars(v->ir, v->n, ix))
      vfail(v, "load of buf%d uses a variable of another loop", b->id);
    else if (sym && b->kind != IR_BUF_INPUT && v->defined_at[b->id] >= v->n->id)
      vfail(v, "reads buf%d before node %d writes it", b->id,
            v->defined_at[b->id]);
    else if (sym)
      ;
    else if (b->numel == 0 && node_iterates(v->n))
      vfail(v, "load of buf%d, which has no element, in a loop that runs",
            b->id);
    else if (b->numel > 0 && (lo < 0 || hi >= b->span))
      vfail(v, "load of buf%d at index range [%lld, %lld] outside [0, %lld)",
            b->id, (long long)lo, (long long)hi, (long long)b->span);
    else if (!only_own_vars(v->ir, v->n, ix))
      vfail(v, "load of buf%d uses a variable of another loop", b->id);
    else if (b->kind != IR_BUF_INPUT && v->defined_at[b->id] >= v->n->id)
      vfail(v, "reads buf%d before node %d writes it", b->id,
            v->defined_at[b->id]);
    return;
  }
  if (e->op == IR_INDEX && !only_own_vars(v->ir, v->n, e->index)) {
    vfail(v, "index uses a variable of another loop");
    return;
  }
  for (int i = 0; i < ir_op_arity(e->op); i++)
    if (!e->args[i]) {
      vfail(v, "%s lacks argument %d", ir_op_name(e->op), i);
      return;
    }
  if (ir_op_yields_bool(e->op) && e->dtype != GC_DTYPE_BOOL)
    vfail(v, "%s must be bool", ir_op_name(e->op));
  if (e->op != IR_CONST && e->op != IR_CAST && e->op != IR_WHERE) {
    bool half = ir_dtype_half(e->dtype);
    for (int i = 0; i < ir_op_arity(e->op); i++)
      half |= ir_dtype_half(e->args[i]->dtype);
    if (half)
      vfail(v, "%s of %s values: half values are computed with as float32",
            ir_op_name(e->op), gc_dtype_name(e->dtype));
  }
  if (e->op == IR_WHERE &&
      (e->args[1]->dtype != e->dtype || e->args[2]->dtype != e->dtype) &&
      (ir_dtype_half(e->dtype) || ir_dtype_half(e->args[1]->dtype) ||
       ir_dtype_half(e->args[2]->dtype)))
    vfail(v, "where of %s values mixes dtypes", gc_dtype_name(e->dtype));
}

static int vexpr_each(const ir_expr *e, void *ctx) {
  vctx *v = ctx;
  vexpr1(v, e);
  return v->rc ? 1 : 0;
}

/* Checks each distinct subexpression of e once. */
static void vexpr(vctx *v, const ir_expr *e) {
  if (!v->rc && ir_expr_walk(e, vexpr_each, v) == IR_WALK_TOO_DEEP)
    vfail(v, "expression nested too deep");
}

/* Do generated code's call nodes take no half values (codegen computes
 * in the element type)? */
static bool no_half_args(const ir_node *n) {
  bool half = n->out && ir_dtype_half(n->out->dtype);
  for (int a = 0; a < n->nargs; a++)
    for (int i = 0;
         n->args[a].bufs &&
         i < (n->args[a].arg.kind == GC_ARG_TENSOR ? 1 : n->args[a].arg.n);
         i++)
      half |= n->args[a].bufs[i] && ir_dtype_half(n->args[a].bufs[i]->dtype);
  return !half;
}

/* A scatter's generated code (codegen/scatter.c) trusts these sizes: the
 * base is the output's shape; scatter's positions (the index's) lie in the
 * source and, but for dim, in the output; index_add's source is the output
 * but for dim; the token forms' source is the index's dims then the
 * output's after the first (index_put's element form: the output's dims
 * odims names around the index's). Source and self are of the output's
 * dtype, the index int32 or int64, the base a constant of the output's
 * dtype when self is not read. */
static void vscatter(vctx *v, const ir_node *n) {
  ir_scatter_op op = n->scatter.op;
  if (op < IR_SCATTER_ADD || op > IR_SCATTER_INDEX_PUT) {
    vfail(v, "scatter operation %d", (int)op);
    return;
  }
  const int dim = n->scatter.dim, first = n->scatter.first;
  const int *odims = n->scatter.odims;
  const ir_expr *fill = n->scatter.fill;
  bool emb = op == IR_SCATTER_EMBEDDING, tok = ir_scatter_by_token(n);
  const ir_buf *o = n->out;
  const ir_view *self, *ix, *src;
  ir_scatter_views(n, &self, &ix, &src);
  if (!ix || !src || dim < 0 || dim >= o->rank || (!self && !emb && !fill) ||
      (fill && (emb || ir_call_view(n, "self")))) {
    vfail(v, "a scatter needs a dim of its buffer, an index, a source, and "
             "self or a constant (not both; neither: an embedding "
             "backward)");
    return;
  }
  if ((fill && (fill->op != IR_CONST || fill->dtype != o->dtype)) ||
      src->buf->dtype != o->dtype || (self && self->buf->dtype != o->dtype) ||
      (ix->buf->dtype != GC_DTYPE_INT64 && ix->buf->dtype != GC_DTYPE_INT32)) {
    vfail(v, "a scatter's base, self and source have its buffer's dtype, its "
             "index int32 or int64");
    return;
  }
  if ((odims && op != IR_SCATTER_INDEX_PUT) ||
      (n->scatter.alpha != 1 && op != IR_SCATTER_INDEX_ADD) ||
      (!tok && first != 0)) {
    vfail(v,
          "a scatter %s has odims, an alpha or a first dim it does not "
          "use",
          emb ? "backward" : "node");
    return;
  }
  bool ok = true;
  if (self) {
    ok = self->rank == o->rank;
    for (int d = 0; ok && d < o->rank; d++)
      ok = self->sizes[d] == o->sizes[d];
  }
  if (ok && tok && odims) { /* element offsets (index_put) */
    int nrest = src->rank - ix->rank;
    bool used[IR_MAX_RANK] = {false};
    ok = first >= 0 && first <= nrest && nrest < o->rank;
    for (int j = 0; ok && j < nrest; j++) {
      int od = odims[j];
      ok = od >= 0 && od < o->rank && !used[od] &&
           src->sizes[j < first ? j : j + ix->rank] == o->sizes[od];
      if (ok)
        used[od] = true;
    }
    for (int t = 0; ok && t < ix->rank; t++)
      ok = src->sizes[first + t] == ix->sizes[t];
  } else if (ok && tok) { /* the index names a row of dims first..dim */
    int after = dim + 1;  /* source: out's dims before first, the index's, */
    ok = first >= 0 && first <= dim && /* out's from after on */
         src->rank == first + ix->rank + o->rank - after;
    for (int d = 0; ok && d < src->rank; d++)
      ok = src->sizes[d] == (d < first ? o->sizes[d]
                             : d < first + ix->rank
                                 ? ix->sizes[d - first]
                                 : o->sizes[d - first - ix->rank + after]);
    for (int d = first; ok && d < dim; d++)
      ok = o->strides[d] == o->strides[d + 1] * o->sizes[d + 1];
  } else if (ok && op == IR_SCATTER_INDEX_ADD) {
    ok = src->rank == o->rank && ix->rank <= 1 &&
         src->sizes[dim] == (ix->rank ? ix->sizes[0] : 1);
    for (int d = 0; ok && d < o->rank; d++)
      ok = d == dim || src->sizes[d] == o->sizes[d];
  } else if (ok) {
    ok = src->rank == o->rank && ix->rank == o->rank;
    for (int d = 0; ok && d < o->rank; d++)
      ok = ix->sizes[d] <= src->sizes[d] &&
           (d == dim || ix->sizes[d] <= o->sizes[d]);
  }
  if (!ok)
    vfail(v, "a scatter's self, index and source sizes disagree with its "
             "output's");
}

/* A scan reads its `self` view, of the output's sizes, along dim; cummax
 * and cummin also write int64 indices of its shape to out2, and compare
 * in the input's dtype (logcumsumexp computes in it). */
static void vscan(vctx *v, const ir_node *n) {
  ir_scan_op op = n->scan.op;
  if (op < IR_SCAN_SUM || op > IR_SCAN_MIN) {
    vfail(v, "scan operation %d", (int)op);
    return;
  }
  const ir_view *x = ir_call_view(n, "self");
  const ir_buf *o = n->out;
  bool idx = op == IR_SCAN_MAX || op == IR_SCAN_MIN;
  if (!x ||
      (idx && (!n->out2 || n->out2->def != n ||
               n->out2->dtype != GC_DTYPE_INT64 || n->out2->rank != o->rank)) ||
      (!idx && n->out2)) {
    vfail(v, "a scan needs a self view, and indices exactly when it is "
             "cummax or cummin");
    return;
  }
  if ((idx || op == IR_SCAN_LOGSUMEXP) && x->buf->dtype != o->dtype) {
    vfail(v, "a %s scan reads %s values into a %s buffer",
          idx ? "cummax/cummin" : "logcumsumexp", gc_dtype_name(x->buf->dtype),
          gc_dtype_name(o->dtype));
    return;
  }
  int dim = n->scan.dim;
  if (dim < 0 || dim >= o->rank || x->rank != o->rank)
    vfail(v, "scans dim %d of a rank-%d buffer reading a rank-%d view", dim,
          o->rank, x->rank);
  for (int i = 0; i < o->rank && i < x->rank; i++)
    if (x->sizes[i] != o->sizes[i] || (idx && n->out2->sizes[i] != o->sizes[i]))
      vfail(v, "scan input size %d is %lld, the buffer's %lld", i,
            (long long)x->sizes[i], (long long)o->sizes[i]);
}

/* A linear interpolation's backward reads `grad_output` [N, C, out...]
 * and writes `out` [N, C, in...], float32 or float64, with one table per
 * spatial axis (1-3); every table index is inside its axis. */
static void vinterp(vctx *v, const ir_node *n) {
  const ir_view *g = ir_call_view(n, "grad_output");
  const ir_buf *o = n->out;
  if (!g || o->rank < 3 || o->rank > 5 || g->rank != o->rank ||
      g->buf->dtype != o->dtype ||
      (o->dtype != GC_DTYPE_FLOAT32 && o->dtype != GC_DTYPE_FLOAT64)) {
    vfail(v, "a linear upsampling backward needs a float32 or float64 "
             "rank-3 to 5 buffer and a grad_output view of its rank and "
             "dtype");
    return;
  }
  if (!n->interp.axes || n->interp.naxes != o->rank - 2) {
    vfail(v,
          "a linear upsampling backward of a rank-%d buffer has %d axis "
          "tables",
          o->rank, n->interp.axes ? n->interp.naxes : 0);
    return;
  }
  for (int d = 0; d < o->rank; d++) {
    const ir_interp *a = d >= 2 ? &n->interp.axes[d - 2] : NULL;
    int64_t gin = a ? a->out : o->sizes[d], oin = a ? a->in : o->sizes[d];
    if (g->sizes[d] != gin || o->sizes[d] != oin)
      vfail(v,
            "linear upsampling backward dim %d: grad_output %lld (want "
            "%lld), out "
            "%lld (want %lld)",
            d, (long long)g->sizes[d], (long long)gin, (long long)o->sizes[d],
            (long long)oin);
    for (int64_t i = 0; a && i < a->out; i++)
      if (a->i0[i] < 0 || a->i0[i] > a->i1[i] || a->i1[i] >= a->in) {
        vfail(v,
              "linear upsampling backward dim %d: position %lld reads %lld "
              "and "
              "%lld of %lld",
              d, (long long)i, (long long)a->i0[i], (long long)a->i1[i],
              (long long)a->in);
        break;
      }
  }
}

/* What SCAN, SCATTER and INTERP nodes share: the .out call they are
 * described as writes `out` (and a scan's out2) and nothing else, no loop
 * of their own, no half values; then their own kind's invariants. */
static void vgenerated(vctx *v, const ir_node *n) {
  const char *kind = ir_node_kind_name(n->kind);
  if (!n->out || n->out->def != n || n->out->kind == IR_BUF_INPUT ||
      n->out->kind == IR_BUF_RESULT) {
    vfail(v, "a %s node writes a buffer of the program's (out=)", kind);
    return;
  }
  for (int k = 0; k < n->nresults; k++)
    if (n->results[k]) {
      vfail(v, "a %s node returns no ATen result (buf%d)", kind,
            n->results[k]->id);
      return;
    }
  if (n->body || n->rank || n->rrank || n->out3 ||
      (n->out2 && n->kind != IR_SCAN)) {
    vfail(v, "a %s node has no loop body, iteration space or other output",
          kind);
    return;
  }
  if (!no_half_args(n)) {
    vfail(v, "generated scans, scatters and interpolations take no half "
             "values");
    return;
  }
  switch (n->kind) {
  case IR_SCAN:
    vscan(v, n);
    break;
  case IR_SCATTER:
    vscatter(v, n);
    break;
  case IR_INTERP:
    vinterp(v, n);
    break;
  case IR_POINTWISE: /* (not made by generated code as calls) */
  case IR_REDUCTION:
  case IR_EXTERN:
  case IR_FALLBACK:
    break;
  }
}

/* A loop node: its iteration space is its buffer's, its body in range. */
static void vloop(vctx *v, const ir_node *n) {
  if (!n->out || n->out->def != n) {
    vfail(v, "its output buffer is not marked as written by it");
    return;
  }
  if (n->rank != n->out->rank) {
    vfail(v, "iterates %d dimensions, writes a rank-%d buffer", n->rank,
          n->out->rank);
    return;
  }
  for (int i = 0; i < n->rank; i++)
    if (n->sranges ? n->sranges[i] != n->out->ssizes[i]
                   : n->ranges[i] != n->out->sizes[i])
      vfail(v, "range %d is %s, the buffer's size %s", i,
            n->sranges
                ? gc_sym_str((gc_symctx *)&v->ir->sym, n->sranges[i])
                : gc_arena_printf(v->ir->a, "%lld", (long long)n->ranges[i]),
            gc_sym_str((gc_symctx *)&v->ir->sym, n->out->ssizes[i]));
  if (!n->body)
    vfail(v, "no body");
  vexpr(v, n->body);
  if (n->kind == IR_POINTWISE && n->body && n->body->dtype != n->out->dtype)
    vfail(v, "body is %s, the buffer %s", gc_dtype_name(n->body->dtype),
          gc_dtype_name(n->out->dtype));
  if (n->kind == IR_REDUCTION && (ir_dtype_half(n->out->dtype) ||
                                  (n->out2 && ir_dtype_half(n->out2->dtype)) ||
                                  (n->out3 && ir_dtype_half(n->out3->dtype)) ||
                                  (n->body && ir_dtype_half(n->body->dtype))))
    vfail(v, "a reduction of %s values (they accumulate as float32)",
          gc_dtype_name(n->out->dtype));
}

/* A call node's arguments are written before it reads them. */
static void vargs(vctx *v, const ir_node *n) {
  for (int a = 0; a < n->nargs; a++)
    for (int i = 0;
         n->args[a].bufs &&
         i < (n->args[a].arg.kind == GC_ARG_TENSOR ? 1 : n->args[a].arg.n);
         i++) {
      const ir_buf *b = n->args[a].bufs[i];
      if (b && b->kind != IR_BUF_INPUT && v->defined_at[b->id] >= n->id)
        vfail(v, "argument %s reads buf%d before it is written",
              n->args[a].name, b->id);
    }
}

static void vnode(vctx *v, const ir_node *n) {
  switch (n->kind) {
  case IR_POINTWISE:
  case IR_REDUCTION:
    vloop(v, n);
    return;
  case IR_EXTERN:
  case IR_FALLBACK:
    vargs(v, n);
    return;
  case IR_SCAN:
  case IR_SCATTER:
  case IR_INTERP:
    vargs(v, n);
    vgenerated(v, n);
    return;
  }
  vfail(v, "unknown node kind %d", (int)n->kind);
}

int ir_verify(const ir_graph *ir, gc_error *err) {
  if (ir->oom || ir->sym.oom)
    return gc_errorf(err, GC_ENOMEM, "loop IR: out of memory");
  if (ir->sym.overflow)
    return gc_errorf(err, GC_EINTERNAL, "loop IR: index arithmetic overflowed");
  gc_arena *a = gc_arena_new(0);
  int *def = a ? gc_arena_calloc(a, (size_t)ir->nbufs + 1, sizeof *def) : NULL;
  if (!def) {
    gc_arena_free(a);
    return gc_errorf(err, GC_ENOMEM, "loop IR verifier: out of memory");
  }
  for (int i = 0; i < ir->nbufs; i++)
    def[i] = ir->bufs[i]->kind == IR_BUF_INPUT ? -1 : ir->nnodes + 1;
  for (int i = 0; i < ir->nnodes; i++) {
    const ir_node *n = ir->nodes[i];
    ir_buf *outs[3] = {n->out, n->out2, n->out3};
    for (int k = 0; k < 3; k++)
      if (outs[k] && outs[k]->kind != IR_BUF_INPUT && def[outs[k]->id] > i)
        def[outs[k]->id] = i;
    for (int k = 0; k < n->nresults; k++)
      if (n->results[k] && def[n->results[k]->id] > i)
        def[n->results[k]->id] = i;
  }
  vctx v = {.ir = ir, .err = err, .defined_at = def};
  /* later passes add and multiply sizes (the schedule's work, the memory
   * plan's offsets): each buffer is at most IR_MAX_BUF_BYTES, so no sum or
   * product of them over a graph's nodes overflows (a size of 2^63 - 1
   * with stride 0 passes validation; fuzz_native) */
  for (int i = 0; i < ir->nbufs && !v.rc; i++) {
    const ir_buf *b = ir->bufs[i];
    int64_t size = gc_dtype_size(b->dtype), cap = IR_MAX_BUF_BYTES;
    if (b->symbolic) { /* bounded by a guard (gc_lower) */
      if (!b->sspan || !b->snumel || !b->ssizes || !b->sstrides)
        vfail(&v, "buf%d is symbolic without expressions", b->id);
      continue;
    }
    if (b->span < 0 || b->numel < 0 ||
        (size > 0 && (b->span > cap / size || b->numel > cap / size)))
      vfail(&v, "buf%d has more than the %lld bytes a buffer may have", b->id,
            (long long)cap);
  }
  for (int i = 0; i < ir->nnodes && !v.rc; i++) {
    v.n = ir->nodes[i];
    if (v.n->id != i)
      vfail(&v, "its id is %d at position %d", v.n->id, i);
    vnode(&v, v.n);
  }
  gc_arena_free(a);
  return v.rc;
}
