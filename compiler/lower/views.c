/*
 * views.c: lowering rules for view operators.
 *
 * A view never copies: its result is an index map over its input (L_view),
 * and when the input is a buffer and the map is affine the view is a plain
 * strided view of that buffer (what eager's strides are). Reshapes of
 * non-contiguous data map through floor divisions and remainders, which
 * the symbolic layer simplifies where the layout allows.
 *
 * Every rule takes the output's sizes from the graph's metadata (eager's)
 * and derives the map from the operator's arguments; the driver checks the
 * result against the metadata.
 */
#include <string.h>

#include "compiler/lower/lower.h"

/* Output shape and fresh variables. */
typedef struct vw {
  int rank;
  int64_t sizes[IR_MAX_RANK]; /* IR_SYMBOLIC where symbolic */
  gc_sym **vars;
  ir_tensor *x;                /* the viewed input */
  gc_sym **map;                /* x->rank expressions */
  gc_sym *ssizes[IR_MAX_RANK]; /* the output's sizes as expressions */
  gc_sym **xs;                 /* the input's sizes as expressions */
} vw;

static int begin(lower_ctx *L, const gc_node *n, const char *self, vw *v) {
  const gc_tensor_meta *m = L_out_meta(n, 0);
  v->x = L_tensor(L, n, self);
  if (!m || !v->x || m->rank > IR_MAX_RANK || !L_sym_sizes(L, m, v->ssizes))
    return GC_EUNSUPPORTED;
  ir_ints_of(m->rank, v->ssizes, v->sizes);
  v->rank = m->rank;
  v->xs = v->x->ssizes ? v->x->ssizes
                       : ir_syms_of(L_ir(L), v->x->rank, v->x->sizes);
  v->vars = L_svars(L, v->rank, v->ssizes);
  v->map = gc_arena_calloc(L_ir(L)->a, (size_t)v->x->rank + 1, sizeof *v->map);
  return v->vars && v->map && v->xs ? 0 : GC_ENOMEM;
}

static int finish(lower_ctx *L, const gc_node *n, vw *v) {
  return L_set(L, n, 0, L_sview(L, v->x, v->rank, v->ssizes, v->vars, v->map));
}

static int64_t norm_dim(int64_t d, int rank) {
  return d < 0 ? d + rank : d;
}

/* ---- identity and reshapes ---- */

/* alias, detach, lift_fresh: the same tensor. */
int lower_alias(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_tensor *x = L_tensor(L, n, "self");
  return x ? L_set(L, n, 0, x) : GC_EUNSUPPORTED;
}

/* view, reshape, _unsafe_view, _reshape_alias, flatten, unflatten,
 * squeeze, unsqueeze, view_as ...: same elements in row-major order, new
 * sizes. The output's flat index unravels over the input's sizes. */
static int sym_reshape(lower_ctx *L, const gc_node *n, vw *v);

int lower_reshape(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  vw v;
  int rc = begin(L, n, "self", &v);
  if (rc)
    return rc;
  if (L_symbolic(L))
    return sym_reshape(L, n, &v);
  gc_symctx *s = &L_ir(L)->sym;
  int64_t numel = 1, xnumel = 1;
  for (int i = 0; i < v.rank; i++)
    numel *= v.sizes[i];
  for (int i = 0; i < v.x->rank; i++)
    xnumel *= v.x->sizes[i];
  if (numel != xnumel)
    return GC_EUNSUPPORTED;
  gc_sym *flat = gc_sym_const(s, 0);
  int64_t st = 1;
  for (int i = v.rank - 1; i >= 0; i--) {
    flat = gc_sym_add(s, flat, gc_sym_scale(s, v.vars[i], st));
    st *= v.sizes[i];
  }
  st = 1;
  for (int i = v.x->rank - 1; i >= 0; i--) {
    int64_t sz = v.x->sizes[i];
    /* no element to read when a size is 0 (and no mod by 0) */
    v.map[i] = sz == 1 || numel == 0
                   ? gc_sym_const(s, 0)
                   : gc_sym_mod(s, gc_sym_floordiv(s, flat, st), sz);
    st *= sz > 0 ? sz : 1;
  }
  return finish(L, n, &v);
}

/* ---- reshapes with symbolic sizes ----
 *
 * A flat index unravelled over symbolic sizes would divide by symbols,
 * which the index arithmetic does not (floor division and remainder take
 * constant divisors). So dims are grouped, input and output, into runs
 * whose products are equal (as expressions: [B, T, C] to [B*T, C] is the
 * groups {B, T} -> {B*T} and {C} -> {C}), and each group maps alone:
 *
 *   - a strided input whose group is contiguous in memory (each dim's
 *     stride the next one's times its size) is a strided view of it, the
 *     group's output dims taking the strides of a contiguous run (ATen's
 *     computeStride): no division at all;
 *   - else one input dim split into output dims is their flat index (a
 *     sum of products), and output dims merged into input dims unravel by
 *     constant divisors only; a group needing a symbolic divisor is
 *     declined (the node stays an ATen call).
 *
 * An output size X // c that a product equal to X (a reshape to [-1, c]
 * of X elements) makes matches X when c divides X: a guard says so. */

typedef struct group {
  int x0, x1; /* input dims [x0, x1) */
  int o0, o1; /* output dims [o0, o1) */
} group;

/* Is `a` equal to `b`, or equal to it when c divides X for b = c*(X // c)
 * (*div gets X and *c then)? */
static bool same_count(gc_symctx *s, gc_sym *a, gc_sym *b, gc_sym **div,
                       int64_t *c) {
  *div = NULL;
  if (a == b)
    return true;
  if (b->kind == GC_SYM_ADD && b->c == 0 && b->n == 1 &&
      b->ops[0]->kind == GC_SYM_FLOORDIV && b->ops[0]->c == b->coefs[0] &&
      b->ops[0]->ops[0] == a) {
    *div = a;
    *c = b->coefs[0];
    return true;
  }
  (void)s;
  return false;
}

/* e as a monomial: *coef times the product of factors f (a non-product
 * expression is one factor). False when it has too many factors. */
static bool monomial(const gc_sym *e, int64_t *coef, const gc_sym **f,
                     int *nf) {
  *coef = 1;
  *nf = 0;
  if (e->kind == GC_SYM_ADD && e->c == 0 && e->n == 1) {
    *coef = e->coefs[0];
    e = e->ops[0];
  }
  if (e->kind == GC_SYM_CONST) {
    *coef *= e->c;
    return true;
  }
  if (e->kind != GC_SYM_MUL) {
    f[(*nf)++] = e;
    return true;
  }
  if (e->n > 2 * IR_MAX_RANK)
    return false;
  for (int i = 0; i < e->n; i++)
    f[(*nf)++] = e->ops[i];
  return true;
}

/* Does product a divide product b (b's factors include a's, and a's
 * coefficient divides b's)? */
static bool divides(const gc_sym *a, const gc_sym *b) {
  int64_t ca, cb;
  const gc_sym *fa[2 * IR_MAX_RANK], *fb[2 * IR_MAX_RANK];
  int na, nb;
  if (!monomial(a, &ca, fa, &na) || !monomial(b, &cb, fb, &nb) || ca <= 0 ||
      cb % ca != 0)
    return false;
  bool used[2 * IR_MAX_RANK] = {false};
  for (int i = 0; i < na; i++) {
    bool found = false;
    for (int j = 0; j < nb && !found; j++)
      if (!used[j] && fb[j] == fa[i])
        found = used[j] = true;
    if (!found)
      return false;
  }
  return true;
}

static int groups_of(lower_ctx *L, const gc_node *n, vw *v, group *g, int *ng) {
  gc_symctx *s = &L_ir(L)->sym;
  int xi = 0, oi = 0, k = 0, xr = v->x->rank;
  while (xi < xr || oi < v->rank) {
    /* size-1 dims join no group: they map to index 0 (input) or hold
     * none (output) */
    if (xi < xr && gc_sym_is_const(v->xs[xi], 1)) {
      v->map[xi++] = gc_sym_const(s, 0);
      continue;
    }
    if (oi < v->rank && gc_sym_is_const(v->ssizes[oi], 1)) {
      oi++;
      continue;
    }
    if (xi >= xr || oi >= v->rank)
      return GC_EUNSUPPORTED;
    group gr = {xi, xi + 1, oi, oi + 1};
    gc_sym *px = v->xs[xi], *po = v->ssizes[oi];
    for (int guard = 0; guard < 2 * IR_MAX_RANK; guard++) {
      gc_sym *div;
      int64_t c;
      if (same_count(s, px, po, &div, &c)) {
        if (div &&
            !L_guard(L, n, IR_GUARD_MOD0, div, gc_sym_const(s, c),
                     IR_GUARD_DIVISIBLE, "a reshape's size divides evenly"))
          return GC_ENOMEM;
        break;
      }
      /* extend the side whose product divides the other's */
      bool grow_x;
      if (divides(px, po))
        grow_x = true;
      else if (divides(po, px))
        grow_x = false;
      else /* (s0 // 4, 4 for s0 elements) the side with dims left */
        grow_x = gr.o1 >= v->rank;
      if (grow_x && gr.x1 < xr)
        px = gc_sym_mul(s, px, v->xs[gr.x1++]);
      else if (gr.o1 < v->rank)
        po = gc_sym_mul(s, po, v->ssizes[gr.o1++]);
      else if (gr.x1 < xr)
        px = gc_sym_mul(s, px, v->xs[gr.x1++]);
      else
        return GC_EUNSUPPORTED;
    }
    if (!same_count(s, px, po, &(gc_sym *){NULL}, &(int64_t){0}))
      return GC_EUNSUPPORTED;
    /* trailing size-1 dims of the input belong to no group */
    g[k++] = gr;
    xi = gr.x1;
    oi = gr.o1;
  }
  *ng = k;
  return 0;
}

/* The strided form: a strided input whose groups are each contiguous. */
static ir_tensor *reshape_strided(lower_ctx *L, vw *v, const group *g, int ng) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  ir_view x;
  if (!ir_tensor_as_strided(ir, v->x, &x))
    return NULL;
  ir_view_sym(ir, &x);
  gc_sym *st[IR_MAX_RANK];
  for (int i = 0; i < v->rank; i++)
    st[i] = gc_sym_const(s, 0); /* size-1 output dims: any stride */
  for (int k = 0; k < ng; k++) {
    const group *gr = &g[k];
    /* contiguous inside: stride[i] == stride[i+1] * size[i+1] over the
     * non-1 dims */
    int last = -1;
    for (int i = gr->x1 - 1; i >= gr->x0; i--) {
      if (gc_sym_is_const(v->xs[i], 1))
        continue;
      if (last >= 0 &&
          x.sstrides[i] != gc_sym_mul(s, x.sstrides[last], v->xs[last]))
        return NULL;
      last = i;
    }
    int in = gr->x1 - 1;
    while (in > gr->x0 && gc_sym_is_const(v->xs[in], 1))
      in--;
    gc_sym *run = x.sstrides[in];
    for (int o = gr->o1 - 1; o >= gr->o0; o--) {
      if (gc_sym_is_const(v->ssizes[o], 1))
        continue;
      st[o] = run;
      run = gc_sym_mul(s, run, v->ssizes[o]);
    }
  }
  return ir_tensor_strided_s(ir, x.buf, v->rank, v->ssizes, st, x.soffset);
}

static int sym_reshape(lower_ctx *L, const gc_node *n, vw *v) {
  gc_symctx *s = &L_ir(L)->sym;
  group g[IR_MAX_RANK];
  int ng = 0;
  int rc = groups_of(L, n, v, g, &ng);
  if (rc)
    return rc;
  ir_tensor *t = reshape_strided(L, v, g, ng);
  if (t)
    return L_set(L, n, 0, t);
  /* groups that would need a symbolic divisor: the input copied into a
   * contiguous buffer, as eager's reshape copies what it cannot view */
  bool symdiv = false;
  for (int k = 0; k < ng; k++)
    for (int i = g[k].x0 + 1; i < g[k].x1; i++)
      symdiv |= !gc_sym_is_const(v->xs[i], 1) && gc_sym_symbolic(s, v->xs[i]) &&
                g[k].o1 - g[k].o0 < g[k].x1 - g[k].x0;
  if (symdiv) {
    ir_tensor *x = v->x;
    gc_sym **cv = L_svars(L, x->rank, v->xs);
    ir_tensor *c =
        cv ? L_spointwise(L, n, x->dtype, x->rank, v->xs, cv, L_load(L, x, cv))
           : NULL;
    ir_buf *b = c ? L_realize_chosen(L, c, NULL) : NULL;
    if (!b)
      return GC_ENOMEM;
    v->x = ir_tensor_of_buf(L_ir(L), b);
    t = v->x ? reshape_strided(L, v, g, ng) : NULL;
    if (t)
      return L_set(L, n, 0, t);
  }
  for (int k = 0; k < ng; k++) {
    const group *gr = &g[k];
    /* the group's flat index over its output dims */
    gc_sym *flat = gc_sym_const(s, 0), *st = gc_sym_const(s, 1);
    for (int o = gr->o1 - 1; o >= gr->o0; o--) {
      flat = gc_sym_add(s, flat, gc_sym_mul(s, v->vars[o], st));
      st = gc_sym_mul(s, st, v->ssizes[o]);
    }
    /* unravelled over its input dims: constant divisors only */
    int64_t div = 1;
    for (int i = gr->x1 - 1; i >= gr->x0; i--) {
      int64_t sz;
      bool cst = gc_sym_const_of(v->xs[i], &sz);
      if (i == gr->x0) {
        v->map[i] = gc_sym_floordiv(s, flat, div);
        break;
      }
      if (!cst)
        return GC_EUNSUPPORTED;
      v->map[i] = sz == 1 ? gc_sym_const(s, 0)
                          : gc_sym_mod(s, gc_sym_floordiv(s, flat, div), sz);
      div *= sz > 0 ? sz : 1;
    }
  }
  for (int i = 0; i < v->x->rank; i++)
    if (!v->map[i])
      v->map[i] = gc_sym_const(s, 0);
  return finish(L, n, v);
}

/* ---- permutations ---- */

/* permute(self, dims): output dim k is input dim dims[k]. */
int lower_permute(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  vw v;
  int rc = begin(L, n, "self", &v);
  if (rc)
    return rc;
  const int64_t *dims;
  int nd;
  if (!L_ints(L, n, "dims", &dims, &nd) || nd != v.x->rank || nd != v.rank)
    return GC_EUNSUPPORTED;
  for (int k = 0; k < nd; k++) {
    int64_t d = norm_dim(dims[k], nd);
    if (d < 0 || d >= nd || v.map[d])
      return GC_EUNSUPPORTED;
    v.map[d] = v.vars[k];
  }
  return finish(L, n, &v);
}

/* transpose(self, dim0, dim1), t(self) (param 1: t, 2-D or less). */
int lower_transpose(lower_ctx *L, const gc_node *n, int is_t) {
  vw v;
  int rc = begin(L, n, "self", &v);
  if (rc)
    return rc;
  int r = v.x->rank;
  int64_t d0 = 0, d1 = 1;
  if (is_t) {
    if (r < 2) { /* t of a 0-D or 1-D tensor is itself */
      for (int i = 0; i < r; i++)
        v.map[i] = v.vars[i];
      return finish(L, n, &v);
    }
  } else if (!L_int(L, n, "dim0", &d0) || !L_int(L, n, "dim1", &d1)) {
    return GC_EUNSUPPORTED;
  }
  d0 = norm_dim(d0, r);
  d1 = norm_dim(d1, r);
  if (d0 < 0 || d0 >= r || d1 < 0 || d1 >= r || r != v.rank)
    return GC_EUNSUPPORTED;
  for (int i = 0; i < r; i++)
    v.map[i] = v.vars[i];
  v.map[d0] = v.vars[d1];
  v.map[d1] = v.vars[d0];
  return finish(L, n, &v);
}

/* expand(self, size): input dims aligned right; size-1 dims broadcast. */
int lower_expand(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  vw v;
  int rc = begin(L, n, "self", &v);
  if (rc)
    return rc;
  gc_symctx *s = &L_ir(L)->sym;
  int lead = v.rank - v.x->rank;
  if (lead < 0)
    return GC_EUNSUPPORTED;
  for (int i = 0; i < v.x->rank; i++) {
    if (v.xs[i] == v.ssizes[lead + i])
      v.map[i] = v.vars[lead + i];
    else if (gc_sym_is_const(v.xs[i], 1))
      v.map[i] = gc_sym_const(s, 0);
    else if (gc_sym_symbolic(s, v.xs[i]) ||
             gc_sym_symbolic(s, v.ssizes[lead + i])) {
      /* a symbolic size expanded to another: equal (not broadcast) */
      if (!L_guard(L, n, IR_GUARD_EQ, v.xs[i], v.ssizes[lead + i],
                   IR_GUARD_BROADCAST, "an expanded dim is not broadcast"))
        return GC_ENOMEM;
      v.map[i] = v.vars[lead + i];
    } else
      return GC_EUNSUPPORTED;
  }
  return finish(L, n, &v);
}

/* ---- selections ---- */

/* Python's slice bounds: start/end clamped to [0, size], negative from the
 * end; the output size (from the metadata) fixes the count. */
static int64_t clamp_bound(int64_t b, int64_t size) {
  if (b < 0)
    b += size;
  if (b < 0)
    b = 0;
  if (b > size)
    b = size;
  return b;
}

/* slice.Tensor(self, dim, start, end, step); narrow(self, dim, start,
 * length) with param 1. */
int lower_slice(lower_ctx *L, const gc_node *n, int narrow) {
  vw v;
  int rc = begin(L, n, "self", &v);
  if (rc)
    return rc;
  gc_symctx *s = &L_ir(L)->sym;
  int64_t dim = 0, start = 0, step = 1;
  L_int(L, n, "dim", &dim);
  dim = norm_dim(dim, v.x->rank);
  if (dim < 0 || dim >= v.x->rank || v.rank != v.x->rank)
    return GC_EUNSUPPORTED;
  const gc_arg *sa = L_arg(L, n, "start");
  if (sa && sa->kind == GC_ARG_INT)
    start = sa->i;
  else if (sa && sa->kind != GC_ARG_NONE)
    return GC_EUNSUPPORTED;
  if (!narrow && L_arg(L, n, "step") && !L_int(L, n, "step", &step))
    return GC_EUNSUPPORTED;
  if (step <= 0)
    return GC_EUNSUPPORTED;
  gc_sym *first;
  if (gc_sym_symbolic(s, v.xs[dim])) {
    /* a start counted from the end of a symbolic dim, or clamped to it:
     * the code assumes it lies inside (a guard), Python's clamping would
     * make another slice */
    gc_sym *size = v.xs[dim];
    first = start < 0 ? gc_sym_addc(s, size, start) : gc_sym_const(s, start);
    if (!L_guard(L, n, IR_GUARD_LE, gc_sym_const(s, 0), first, IR_GUARD_RANGE,
                 "a slice's start lies inside its dim") ||
        !L_guard(L, n, IR_GUARD_LE, first, size, IR_GUARD_RANGE,
                 "a slice's start lies inside its dim"))
      return GC_ENOMEM;
  } else {
    first = gc_sym_const(s, narrow ? norm_dim(start, v.x->sizes[dim])
                                   : clamp_bound(start, v.x->sizes[dim]));
  }
  for (int i = 0; i < v.rank; i++)
    v.map[i] = i == dim ? gc_sym_add(s, gc_sym_scale(s, v.vars[i], step), first)
                        : v.vars[i];
  return finish(L, n, &v);
}

/* select.int(self, dim, index) */
int lower_select(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  vw v;
  int rc = begin(L, n, "self", &v);
  if (rc)
    return rc;
  gc_symctx *s = &L_ir(L)->sym;
  int64_t dim, index;
  if (!L_int(L, n, "dim", &dim) || !L_int(L, n, "index", &index))
    return GC_EUNSUPPORTED;
  dim = norm_dim(dim, v.x->rank);
  if (dim < 0 || dim >= v.x->rank || v.rank != v.x->rank - 1)
    return GC_EUNSUPPORTED;
  gc_sym *at;
  if (gc_sym_symbolic(s, v.xs[dim])) {
    /* inside the symbolic dim at every size the code runs for */
    at = index < 0 ? gc_sym_addc(s, v.xs[dim], index) : gc_sym_const(s, index);
    if (!L_guard(L, n, IR_GUARD_LE, gc_sym_const(s, 0), at, IR_GUARD_RANGE,
                 "a selected index lies inside its dim") ||
        !L_guard(L, n, IR_GUARD_LE, gc_sym_addc(s, at, 1), v.xs[dim],
                 IR_GUARD_RANGE, "a selected index lies inside its dim"))
      return GC_ENOMEM;
  } else {
    if (index < 0)
      index += v.x->sizes[dim];
    if (index < 0 || index >= v.x->sizes[dim])
      return GC_EUNSUPPORTED; /* eager raises: let it */
    at = gc_sym_const(s, index);
  }
  for (int i = 0, k = 0; i < v.x->rank; i++)
    v.map[i] = i == dim ? at : v.vars[k++];
  return finish(L, n, &v);
}

/* diagonal(self, offset, dim1, dim2): the diagonal becomes the last dim. */
int lower_diagonal(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  vw v;
  int rc = begin(L, n, "self", &v);
  if (rc)
    return rc;
  gc_symctx *s = &L_ir(L)->sym;
  int64_t off = 0, d1 = 0, d2 = 1;
  L_int(L, n, "offset", &off);
  L_int(L, n, "dim1", &d1);
  L_int(L, n, "dim2", &d2);
  int r = v.x->rank;
  d1 = norm_dim(d1, r);
  d2 = norm_dim(d2, r);
  if (d1 < 0 || d1 >= r || d2 < 0 || d2 >= r || d1 == d2 || v.rank != r - 1)
    return GC_EUNSUPPORTED;
  gc_sym *diag = v.vars[v.rank - 1];
  for (int i = 0, k = 0; i < r; i++) {
    if (i == d1)
      v.map[i] = gc_sym_addc(s, diag, off < 0 ? -off : 0);
    else if (i == d2)
      v.map[i] = gc_sym_addc(s, diag, off > 0 ? off : 0);
    else
      v.map[i] = v.vars[k++];
  }
  return finish(L, n, &v);
}

/* unfold(self, dimension, size, step): windows along `dimension`, the
 * window index in place of it and the position inside a new last dim. */
int lower_unfold(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  vw v;
  int rc = begin(L, n, "self", &v);
  if (rc)
    return rc;
  gc_symctx *s = &L_ir(L)->sym;
  int64_t dim, size, step;
  if (!L_int(L, n, "dimension", &dim) || !L_int(L, n, "size", &size) ||
      !L_int(L, n, "step", &step) || step <= 0)
    return GC_EUNSUPPORTED;
  int r = v.x->rank;
  dim = norm_dim(dim, r > 0 ? r : 1);
  if (r == 0 || dim < 0 || dim >= r || v.rank != r + 1)
    return GC_EUNSUPPORTED;
  for (int i = 0; i < r; i++)
    v.map[i] = i == dim ? gc_sym_add(s, gc_sym_scale(s, v.vars[i], step),
                                     v.vars[v.rank - 1])
                        : v.vars[i];
  return finish(L, n, &v);
}

/* ---- Tensor[] views: split, split_with_sizes, unbind, chunk ---- */

/* Sets item i of a Tensor[] output. */
static int set_item(lower_ctx *L, const gc_node *n, int i, ir_tensor *t) {
  if (!t)
    return GC_EUNSUPPORTED;
  const gc_arg *o = &n->outputs[0];
  if (o->kind != GC_ARG_TENSORS || i >= o->n || !o->vals[i])
    return GC_EUNSUPPORTED;
  return L_set_value(L, o->vals[i], t);
}

/* split.Tensor, split_with_sizes, chunk (slices along dim), unbind
 * (param 1: selects). Each item's sizes come from its metadata. */
int lower_split(lower_ctx *L, const gc_node *n, int unbind) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  ir_tensor *x = L_tensor(L, n, "self");
  const gc_arg *o = &n->outputs[0];
  int64_t dim = 0;
  L_int(L, n, "dim", &dim);
  if (!x || o->kind != GC_ARG_TENSORS || x->rank == 0)
    return GC_EUNSUPPORTED;
  dim = norm_dim(dim, x->rank);
  if (dim < 0 || dim >= x->rank)
    return GC_EUNSUPPORTED;
  int64_t start = 0;
  for (int it = 0; it < o->n; it++) {
    const gc_value *ov = o->vals[it];
    int64_t sz[IR_MAX_RANK];
    if (!ov || ov->meta.rank > IR_MAX_RANK || !L_static_sizes(&ov->meta, sz))
      return GC_EUNSUPPORTED;
    int rank = ov->meta.rank;
    if (rank != x->rank - (unbind ? 1 : 0))
      return GC_EUNSUPPORTED;
    gc_sym **vars = L_vars(L, rank, sz);
    gc_sym **map = gc_arena_calloc(ir->a, (size_t)x->rank + 1, sizeof *map);
    if (!vars || !map)
      return GC_ENOMEM;
    for (int i = 0, k = 0; i < x->rank; i++) {
      if (i != dim)
        map[i] = vars[k++];
      else if (unbind)
        map[i] = gc_sym_const(s, it);
      else
        map[i] = gc_sym_addc(s, vars[k++], start);
    }
    start += unbind ? 1 : sz[dim];
    int rc = set_item(L, n, it, L_view(L, x, rank, sz, vars, map));
    if (rc)
      return rc;
  }
  return start == x->sizes[dim] ? 0 : GC_EUNSUPPORTED;
}

/* as_strided(self, size, stride, storage_offset) over a value whose
 * storage is exactly its own elements (dense strides, offset 0, as a fresh
 * result is: adaptive_avg_pool2d's channels-last restride of a mean): the
 * storage position of each output element is decomposed back into the
 * input's index through its strides. Positions past the input's elements
 * and other layouts are declined. */
int lower_as_strided(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  gc_symctx *s = &L_ir(L)->sym;
  vw v;
  int rc = begin(L, n, "self", &v);
  if (rc)
    return rc;
  const gc_arg *xa = L_arg(L, n, "self");
  const int64_t *sz, *st;
  int nsz, nst;
  int64_t off = 0;
  const gc_arg *oa = L_arg(L, n, "storage_offset");
  if (!xa || !xa->v || !L_ints(L, n, "size", &sz, &nsz) ||
      !L_ints(L, n, "stride", &st, &nst) || nsz != v.rank || nst != v.rank ||
      (oa && oa->kind != GC_ARG_NONE && !L_int(L, n, "storage_offset", &off)))
    return GC_EUNSUPPORTED;
  const gc_tensor_meta *m = &xa->v->meta;
  ir_tensor *x = v.x;
  if (m->rank != x->rank || m->offset.expr || m->offset.v != 0)
    return GC_EUNSUPPORTED;
  /* x's strides dense for its sizes (in any dim order) */
  int64_t ms[IR_MAX_RANK], numel = 1;
  for (int i = 0; i < x->rank; i++) {
    if (m->strides[i].expr)
      return GC_EUNSUPPORTED;
    ms[i] = m->strides[i].v;
    numel *= x->sizes[i];
  }
  if (!L_dense_strides(x->rank, x->sizes, ms))
    return GC_EUNSUPPORTED;
  gc_sym *p = gc_sym_const(s, off);
  for (int i = 0; i < v.rank; i++)
    p = gc_sym_add(s, p, gc_sym_scale(s, v.vars[i], st[i]));
  if (!p)
    return GC_ENOMEM;
  int64_t total = 1;
  for (int i = 0; i < v.rank; i++)
    total *= v.sizes[i];
  if (total > 0 && (p->lo < 0 || p->hi >= numel))
    return GC_EUNSUPPORTED;
  for (int i = 0; i < x->rank; i++)
    v.map[i] = x->sizes[i] == 1
                   ? gc_sym_const(s, 0)
                   : gc_sym_mod(s, gc_sym_floordiv(s, p, ms[i]), x->sizes[i]);
  return finish(L, n, &v);
}
