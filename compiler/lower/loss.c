/*
 * loss.c: lowering of loss forwards.
 *
 * nll_loss_forward(self, target, weight, reduction, ignore_index) ->
 *   (output, total_weight). self is [N, C] (target [N]) or [C] (target
 *   0-D). The picked log-probability self[i, target[i]] and the class
 *   weight weight[target[i]] are gathers (a target out of [0, C) that is
 *   not ignore_index raises IndexError, as eager); an ignored row counts 0
 *   and reads class 0 instead. reduction none on [N, C] gives the
 *   per-row losses and a total_weight of 0; otherwise both are sums over
 *   the rows (output divided by total_weight for mean: all rows ignored
 *   gives NaN, as eager).
 * mse_loss(self, target, reduction): (self - target)^2, summed or averaged
 *   over every element for sum/mean (same shapes only; broadcasting falls
 *   back).
 */
#include <string.h>

#include "compiler/lower/pointwise.h"

#define OP1(op, a) ir_op1(ir, IR_##op, dt, a)
#define OP2(op, a, b) ir_op2(ir, IR_##op, dt, a, b)
#define WHERE(c, a, b) ir_op3(ir, IR_WHERE, dt, c, a, b)

/* The loss of row `row` (NULL for a 1-D self): -w[t] * x[row, t], 0 when
 * ignored; *wt gets the row's weight (0 when ignored). */
static ir_expr *nll_row(lower_ctx *L, ir_tensor *xt, ir_view *xv, ir_view *wv,
                        ir_tensor *t, gc_sym *row, int64_t ignore, gc_dtype dt,
                        ir_expr **wt) {
  ir_graph *ir = L_ir(L);
  gc_symctx *s = &ir->sym;
  gc_dtype i64 = GC_DTYPE_INT64;
  ir_expr *tv = ir_cast(ir, L_load(L, t, row ? &row : NULL), i64);
  ir_expr *ign = ir_op2(ir, IR_EQ, i64, tv, ir_const_i(ir, ignore, i64));
  ir_expr *cls = ir_op3(ir, IR_WHERE, i64, ign, ir_const_i(ir, 0, i64), tv);
  int cd = xt->rank - 1;
  ir_expr *x;
  if (!xv) { /* computed only at the picked class */
    gc_sym *at[2] = {row, NULL};
    x = L_gather_loop(L, xt, at, cd, cls, false);
  } else {
    gc_sym *off = gc_sym_const(s, xv->offset);
    if (row)
      off = gc_sym_add(s, off, gc_sym_scale(s, row, xv->strides[0]));
    x = ir_gather(ir, xv->buf, off, cls, xv->strides[cd], xv->sizes[cd], false);
  }
  ir_expr *w = ir_const_f(ir, 1, dt);
  if (wv)
    w = ir_gather(ir, wv->buf, gc_sym_const(s, wv->offset), cls, wv->strides[0],
                  wv->sizes[0], false);
  if (!x || !w)
    return NULL;
  ir_expr *zero = ir_const_f(ir, 0, dt);
  *wt = WHERE(ign, zero, w);
  return WHERE(ign, zero, OP1(NEG, OP2(MUL, w, x)));
}

int lower_nll_loss_forward(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  ir_tensor *x = L_tensor(L, n, "self"), *t = L_tensor(L, n, "target");
  ir_tensor *w = L_tensor(L, n, "weight");
  int64_t red, ignore;
  if (!x || !t || !L_int(L, n, "reduction", &red) ||
      !L_int(L, n, "ignore_index", &ignore) || !L_is_float(x->dtype) ||
      (x->rank != 1 && x->rank != 2) || t->rank != x->rank - 1 ||
      !L_is_integral(t->dtype) || t->dtype == GC_DTYPE_BOOL || red < 0 ||
      red > 2)
    return GC_EUNSUPPORTED;
  gc_dtype dt = x->dtype;
  int64_t nrow = x->rank == 2 ? x->sizes[0] : 1, ncls = x->sizes[x->rank - 1];
  if ((x->rank == 2 && t->sizes[0] != nrow) || ncls == 0 ||
      (w && (w->rank != 1 || w->sizes[0] != ncls || w->dtype != dt)))
    return GC_EUNSUPPORTED;
  /* self computed (a log_softmax): only the picked elements are, from its
   * loop, instead of realizing all of it */
  ir_view xbuf, wv, *xv = NULL;
  if (!L_gather_loop_ok(L, x, x->rank - 1)) {
    if (!L_as_buffer(L, x, &xbuf))
      return GC_ENOMEM;
    xv = &xbuf;
  }
  if (w && !L_as_buffer(L, w, &wv))
    return GC_ENOMEM;
  L__elementwise p0, p1;
  int rc = L__elementwise_begin(L, n, 0, &p0);
  if (!rc)
    rc = L__elementwise_begin(L, n, 1, &p1);
  if (rc)
    return rc;
  if (p0.dt != dt || p1.dt != dt || p1.rank != 0)
    return GC_EUNSUPPORTED;
  ir_expr *wt;
  if (red == 0 && x->rank == 2) { /* per row */
    if (p0.rank != 1)
      return GC_EUNSUPPORTED;
    ir_expr *e =
        nll_row(L, x, xv, w ? &wv : NULL, t, p0.vars[0], ignore, dt, &wt);
    if ((rc = L__elementwise_finish(L, n, 0, &p0, e)))
      return rc;
    return L__elementwise_finish(L, n, 1, &p1, ir_const_f(ir, 0, dt));
  }
  if (p0.rank != 0)
    return GC_EUNSUPPORTED;
  ir_tensor *loss, *total;
  if (x->rank == 1) {
    gc_sym **v = L_vars(L, 0, NULL);
    ir_expr *e = nll_row(L, x, xv, w ? &wv : NULL, t, NULL, ignore, dt, &wt);
    if (!v || !e)
      return GC_ENOMEM;
    loss = L_pointwise(L, n, dt, 0, NULL, v, e);
    total = L_pointwise(L, n, dt, 0, NULL, L_vars(L, 0, NULL), wt);
  } else {
    gc_sym **ov = L_vars(L, 0, NULL), **rv = L_vars(L, 1, &nrow);
    gc_sym **ov2 = L_vars(L, 0, NULL), **rv2 = L_vars(L, 1, &nrow);
    if (!ov || !rv || !ov2 || !rv2)
      return GC_ENOMEM;
    ir_expr *wt2;
    ir_expr *e = nll_row(L, x, xv, w ? &wv : NULL, t, rv[0], ignore, dt, &wt);
    ir_expr *e2 =
        nll_row(L, x, xv, w ? &wv : NULL, t, rv2[0], ignore, dt, &wt2);
    if (!e || !e2)
      return GC_ENOMEM;
    ir_buf *lb = L_reduce(L, n, IR_RED_SUM, dt, 0, NULL, ov, 1, &nrow, rv, e,
                          NULL, NULL);
    ir_buf *tb = L_reduce(L, n, IR_RED_SUM, dt, 0, NULL, ov2, 1, &nrow, rv2,
                          wt2, NULL, NULL);
    if (!lb || !tb)
      return GC_ENOMEM;
    loss = ir_tensor_of_buf(ir, lb);
    total = ir_tensor_of_buf(ir, tb);
  }
  if (!loss || !total)
    return GC_ENOMEM;
  if (red == 1) {
    ir_expr *q = OP2(DIV, L_load(L, loss, NULL), L_load(L, total, NULL));
    loss = L_pointwise(L, n, dt, 0, NULL, p0.vars, q);
  }
  if ((rc = L_set(L, n, 0, loss)))
    return rc;
  return L_set(L, n, 1, total);
}

/* mse_loss(self, target, reduction). */
int lower_mse_loss(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  ir_graph *ir = L_ir(L);
  ir_tensor *x = L_tensor(L, n, "self"), *y = L_tensor(L, n, "target");
  int64_t red;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  gc_dtype dt = p.dt;
  if (!x || !y || !L_int(L, n, "reduction", &red) || !L_is_float(dt) ||
      x->rank != y->rank || red < 0 || red > 2)
    return GC_EUNSUPPORTED;
  int64_t cnt = 1;
  for (int i = 0; i < x->rank; i++) {
    if (x->sizes[i] != y->sizes[i])
      return GC_EUNSUPPORTED;
    cnt *= x->sizes[i];
  }
  if (red == 0) {
    if (p.rank != x->rank)
      return GC_EUNSUPPORTED;
    ir_expr *d = OP2(SUB, ir_cast(ir, L_load(L, x, p.vars), dt),
                     ir_cast(ir, L_load(L, y, p.vars), dt));
    return L__elementwise_finish(L, n, 0, &p, OP2(MUL, d, d));
  }
  if (p.rank != 0 || (red == 1 && cnt == 0))
    return GC_EUNSUPPORTED; /* the mean of nothing: eager's NaN, left to it */
  gc_sym **rv = L_vars(L, x->rank, x->sizes);
  if (!rv)
    return GC_ENOMEM;
  ir_expr *d = OP2(SUB, ir_cast(ir, L_load(L, x, rv), dt),
                   ir_cast(ir, L_load(L, y, rv), dt));
  ir_buf *b = L_reduce(L, n, IR_RED_SUM, dt, 0, NULL, p.vars, x->rank, x->sizes,
                       rv, OP2(MUL, d, d), NULL, NULL);
  if (!b)
    return GC_ENOMEM;
  ir_tensor *s = ir_tensor_of_buf(ir, b);
  if (red == 2)
    return L_set(L, n, 0, L_to_dtype(L, n, s, p.odt));
  gc_sym **v = L_vars(L, 0, NULL);
  if (!v)
    return GC_ENOMEM;
  return L_set(L, n, 0,
               L_pointwise(L, n, p.odt, 0, NULL, v,
                           OP2(DIV, L_load(L, s, NULL),
                               ir_const_f(ir, (double)cnt, dt))));
}
