/*
 * scan.c: lowering rules for scans: cumsum, cumprod, logcumsumexp, cummax
 * and cummin.
 *
 * A scan is neither pointwise (element i of a row depends on elements 0..i)
 * nor a reduction (it keeps every partial result), so it is its own node
 * kind: an IR_SCAN node, described as a call of the operator's .out
 * overload on a realized input, which generated code makes (codegen/scan.c)
 * rather than ATen: one pass along the scanned dimension per point of the
 * others, in ATen's order and with ATen's accumulator (double for float32,
 * int64 for integers: ATen's CPU acc_type; cummax and cummin compare in the
 * input's type), so the results are eager's bit for bit. No segment ends at a
 * scan, and prod's backward (an exclusive cumprod each way) has no ATen call
 * left.
 *
 * Declined (the node stays an ATen call): a 0-d input (ATen copies it,
 * keeping a -0.0 that 0 + -0.0 would not); for cumsum and cumprod a result
 * that is neither float32, float64 nor int64, and a floating input scanned
 * as integers (C's float-to-integer conversion is undefined out of range);
 * dtypes generated code does not compute in.
 */
#include "compiler/lower/lower.h"

static const char *const out_ops[] = {
    [IR_SCAN_SUM] = "aten::cumsum.out",
    [IR_SCAN_PROD] = "aten::cumprod.out",
    [IR_SCAN_LOGSUMEXP] = "aten::logcumsumexp.out",
    [IR_SCAN_MAX] = "aten::cummax.out",
    [IR_SCAN_MIN] = "aten::cummin.out",
};

/* which: the ir_scan_op. */
int lower_scan(lower_ctx *L, const gc_node *n, int which) {
  const gc_tensor_meta *m = L_out_meta(n, 0);
  ir_tensor *x = L_tensor(L, n, "self");
  int64_t dim;
  if (which < IR_SCAN_SUM || which > IR_SCAN_MIN || !m || !x ||
      !L_int(L, n, "dim", &dim) || m->rank < 1 || x->rank != m->rank)
    return GC_EUNSUPPORTED;
  int64_t sz[IR_MAX_RANK];
  if (m->rank > IR_MAX_RANK || !L_static_sizes(m, sz))
    return GC_EUNSUPPORTED;
  for (int d = 0; d < m->rank; d++)
    if (x->sizes[d] != sz[d])
      return GC_EUNSUPPORTED; /* (metadata a client got wrong) */
  if (dim < 0)
    dim += m->rank;
  if (dim < 0 || dim >= m->rank)
    return GC_EUNSUPPORTED;
  gc_dtype out = m->dtype;
  if (L_opmath(out) != out || L_opmath(x->dtype) != x->dtype)
    return GC_EUNSUPPORTED; /* codegen/scan.c computes in the dtype */
  switch (which) {
  case IR_SCAN_SUM:
  case IR_SCAN_PROD:
    if (out != GC_DTYPE_FLOAT32 && out != GC_DTYPE_FLOAT64 &&
        out != GC_DTYPE_INT64)
      return GC_EUNSUPPORTED;
    if (!L_is_float(out) && !L_is_integral(x->dtype))
      return GC_EUNSUPPORTED;
    break;
  case IR_SCAN_LOGSUMEXP:
    if (!L_is_float(out) || x->dtype != out)
      return GC_EUNSUPPORTED;
    break;
  default: { /* values in the input's dtype, int64 indices of their shape */
    const gc_tensor_meta *mi = L_out_meta(n, 1);
    int64_t si[IR_MAX_RANK];
    if (x->dtype != out || !L_dtype_ok(out) || !mi ||
        mi->dtype != GC_DTYPE_INT64 || mi->rank != m->rank ||
        !L_static_sizes(mi, si))
      return GC_EUNSUPPORTED;
    for (int d = 0; d < m->rank; d++)
      if (si[d] != sz[d])
        return GC_EUNSUPPORTED;
  }
  }
  ir_node *call;
  int rc = L_out_node(L, n, IR_SCAN, out_ops[which], NULL, &call);
  if (rc)
    return rc;
  call->scan.op = (ir_scan_op)which;
  call->scan.dim = (int)dim;
  return 0;
}
