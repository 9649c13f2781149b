/*
 * create.c: lowering rules for the operators that make a tensor from sizes
 * and numbers (fill, full, zeros, ones and their _like and new_ forms, eye,
 * scalar_tensor, arange): unrealized loops over the output's shape, in
 * the output's dtype, the values as ATen computes them.
 */
#include <string.h>

#include "compiler/lower/pointwise.h"

/* fill.Scalar(self, value), full(size, fill_value), full_like(self,
 * fill_value), zeros/ones(_like), new_zeros/new_ones/new_full(self, size,
 * ...), fill.Tensor(self, value) (param: 0 zeros, 1 ones, 2 "value", 3
 * "fill_value", 4 the 0-d tensor "value", which x[2:] = 0.5 makes). Only
 * the output's shape and dtype matter. */
int lower_fill(lower_ctx *L, const gc_node *n, int which) {
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  if (which == 4) { /* fill.Tensor: a 0-d tensor's value, as value.item() */
    ir_tensor *t = L_tensor(L, n, "value");
    if (!t || t->rank != 0)
      return GC_EUNSUPPORTED;
    ir_expr *e = L_load_bcast(L, t, p.rank, p.vars);
    return L__elementwise_finish(L, n, 0, &p, e ? ir_cast(ir, e, p.dt) : NULL);
  }
  double v = which;
  int64_t iv = which;
  gc_dtype sdt = GC_DTYPE_INT64;
  if (which >= 2 &&
      !L_scalar(L, n, which == 2 ? "value" : "fill_value", &v, &iv, &sdt))
    return GC_EUNSUPPORTED;
  const gc_arg *dev = L_arg(L, n, "device");
  if (dev && dev->kind == GC_ARG_DEVICE && strcmp(dev->dev.type, "cpu") != 0)
    return GC_EUNSUPPORTED;
  ir_expr *k;
  if (L_is_float(p.dt))
    k = ir_const_f(ir, sdt == GC_DTYPE_FLOAT64 ? v : (double)iv, p.dt);
  else if (sdt == GC_DTYPE_FLOAT64)
    k = ir_cast(ir, ir_const_f(ir, v, GC_DTYPE_FLOAT64), p.dt);
  else
    k = ir_const_i(ir, iv, p.dt);
  return L__elementwise_finish(L, n, 0, &p, k);
}

/* eye(n), eye.m(n, m): 1 where the row equals the column, else 0. */
int lower_eye(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  if (p.rank != 2)
    return GC_EUNSUPPORTED;
  ir_graph *ir = L_ir(L);
  ir_expr *diag =
      ir_op2(ir, IR_EQ, GC_DTYPE_BOOL, ir_index(ir, p.vars[0], GC_DTYPE_INT64),
             ir_index(ir, p.vars[1], GC_DTYPE_INT64));
  return L__elementwise_finish(L, n, 0, &p, ir_cast(ir, diag, p.dt));
}

/* scalar_tensor(s): a zero-dim tensor holding s. */
int lower_scalar_tensor(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  double v;
  int64_t iv;
  gc_dtype sdt;
  if (!L_scalar(L, n, "s", &v, &iv, &sdt))
    return GC_EUNSUPPORTED;
  ir_expr *k = sdt == GC_DTYPE_FLOAT64 ? ir_const_f(ir, v, GC_DTYPE_FLOAT64)
                                       : ir_const_i(ir, iv, GC_DTYPE_INT64);
  return L__elementwise_finish(L, n, 0, &p, ir_cast(ir, k, p.dt));
}

/* arange(start, end, step): element i is start + i * step, computed as
 * ATen does (in double for floating outputs, then converted). */
int lower_arange(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  L__elementwise p;
  int rc = L__elementwise_begin(L, n, 0, &p);
  if (rc)
    return rc;
  ir_graph *ir = L_ir(L);
  double start = 0, step = 1, v;
  int64_t istart = 0, istep = 1, iv;
  gc_dtype d1 = GC_DTYPE_INT64, d2 = GC_DTYPE_INT64;
  if (p.rank != 1)
    return GC_EUNSUPPORTED;
  if (L_scalar(L, n, "start", &v, &iv, &d1)) {
    start = v;
    istart = iv;
  }
  if (L_scalar(L, n, "step", &v, &iv, &d2)) {
    step = v;
    istep = iv;
  }
  ir_expr *i = ir_index(ir, p.vars[0], GC_DTYPE_INT64);
  ir_expr *r;
  if (L_is_float(p.dt) || d1 == GC_DTYPE_FLOAT64 || d2 == GC_DTYPE_FLOAT64) {
    gc_dtype acc = GC_DTYPE_FLOAT64;
    r = ir_op2(ir, IR_ADD, acc, ir_const_f(ir, start, acc),
               ir_op2(ir, IR_MUL, acc, ir_cast(ir, i, acc),
                      ir_const_f(ir, step, acc)));
    if (!L_is_float(p.dt))
      return GC_EUNSUPPORTED; /* float steps into an integer tensor */
  } else {
    r = ir_op2(ir, IR_ADD, GC_DTYPE_INT64,
               ir_const_i(ir, istart, GC_DTYPE_INT64),
               ir_op2(ir, IR_MUL, GC_DTYPE_INT64, i,
                      ir_const_i(ir, istep, GC_DTYPE_INT64)));
  }
  return L__elementwise_finish(L, n, 0, &p, r);
}
