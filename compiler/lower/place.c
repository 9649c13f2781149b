/*
 * place.c: lowering of the operators that place a tensor where a view of
 * another takes its elements: slice_backward and select_backward (zeros
 * elsewhere), and what functionalization makes of a write through a view
 * (slice_scatter, select_scatter, as_strided_scatter, diagonal_scatter:
 * self elsewhere). All return unrealized pointwise values over the
 * output's shape.
 */
#include <math.h>
#include <string.h>

#include "compiler/lower/pointwise.h"

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
  if (L__numel(p.rank, p.sizes) == 0)
    return L__empty_output(L, n, &p);
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
    at[d] = d == dim ? L__clamp_index(s, gc_sym_floordiv(s, j, step), len - 1)
                     : p.vars[d];
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
  if (L__numel(p.rank, p.sizes) == 0)
    return L__empty_output(L, n, &p);
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
 * e is in the view when 0 <= e - offset < L__numel(view), and is then src at
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
    return L__empty_output(L, n, &p);
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
  if (L__numel(r, p.sizes) == 0)
    return L__empty_output(L, n, &p);
  ir_expr *base = L_load(L, self, p.vars);
  if (len == 0)
    return L__elementwise_finish(L, n, 0, &p, base);
  gc_symctx *s = &ir->sym;
  gc_sym *i = off >= 0 ? p.vars[d1] : p.vars[d2]; /* position on it */
  at[r - 2] = L__clamp_index(s, i, len - 1);
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
