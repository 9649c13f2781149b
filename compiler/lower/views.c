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
  int64_t sizes[IR_MAX_RANK];
  gc_sym **vars;
  ir_tensor *x; /* the viewed input */
  gc_sym **map; /* x->rank expressions */
} vw;

static int begin(lower_ctx *L, const gc_node *n, const char *self, vw *v) {
  const gc_tensor_meta *m = L_out_meta(n, 0);
  v->x = L_tensor(L, n, self);
  if (!m || !v->x || m->rank > IR_MAX_RANK || !L_static_sizes(m, v->sizes))
    return GC_EUNSUPPORTED;
  v->rank = m->rank;
  v->vars = L_vars(L, v->rank, v->sizes);
  v->map = gc_arena_calloc(L_ir(L)->a, (size_t)v->x->rank + 1, sizeof *v->map);
  return v->vars && v->map ? 0 : GC_ENOMEM;
}

static int finish(lower_ctx *L, const gc_node *n, vw *v) {
  return L_set(L, n, 0, L_view(L, v->x, v->rank, v->sizes, v->vars, v->map));
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
int lower_reshape(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  vw v;
  int rc = begin(L, n, "self", &v);
  if (rc)
    return rc;
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
    if (v.x->sizes[i] == v.sizes[lead + i])
      v.map[i] = v.vars[lead + i];
    else if (v.x->sizes[i] == 1)
      v.map[i] = gc_sym_const(s, 0);
    else
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
  start = narrow ? norm_dim(start, v.x->sizes[dim])
                 : clamp_bound(start, v.x->sizes[dim]);
  for (int i = 0; i < v.rank; i++)
    v.map[i] = i == dim
                   ? gc_sym_addc(s, gc_sym_scale(s, v.vars[i], step), start)
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
  if (index < 0)
    index += v.x->sizes[dim];
  if (index < 0 || index >= v.x->sizes[dim])
    return GC_EUNSUPPORTED; /* eager raises: let it */
  for (int i = 0, k = 0; i < v.x->rank; i++)
    v.map[i] = i == dim ? gc_sym_const(s, index) : v.vars[k++];
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
