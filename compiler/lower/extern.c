/*
 * extern.c: lowering rules for operators that stay library calls.
 *
 * Matrix products and convolutions are faster in BLAS and oneDNN than in
 * anything a C code generator writes, so, as Inductor does, they run
 * through ATen on the client: mm, addmm, bmm and baddbmm through their .out
 * overloads, which write straight into a buffer the memory planner placed
 * (or into the program output itself); convolution, whose .out overload
 * would compute into a temporary and copy, as a plain call whose result
 * ATen allocates. The pointwise work around them (bias, batch norm in eval
 * mode, activation, residual add) is lowered natively and fused into the
 * kernels that read their results. A bmm whose operands BLAS can read
 * becomes BLAS calls from generated code instead, when the target has the
 * system BLAS (sched/schedule.c sc_blas_call). max_pool2d_with_indices_backward
 * and adaptive_max_pool2d_backward (scatters, not pointwise functions of
 * their output's index) go through their .grad_input overloads for the same
 * reason: their output is planned memory, reused between calls, not a fresh
 * zero-filled allocation.
 * convolution_backward and the CPU flash attention of
 * scaled_dot_product_attention (forward and backward) are plain calls of
 * their own operators, as convolution: oneDNN's and ATen's blocked kernels
 * are what generated code would have to match, and they have no .out
 * overload that writes in place.
 */
#include "compiler/lower/lower.h"

/* Lowers n through the .out overload named by the table row's parameter. */
static const char *const out_ops[] = {
    "aten::mm.out",
    "aten::addmm.out",
    "aten::bmm.out",
    "aten::baddbmm.out",
    "aten::max_pool2d_with_indices_backward.grad_input",
    "aten::adaptive_max_pool2d_backward.grad_input",
};

int lower_extern_out(lower_ctx *L, const gc_node *n, int which) {
  if (which < 0 || which >= (int)(sizeof out_ops / sizeof out_ops[0]))
    return GC_EUNSUPPORTED;
  const gc_tensor_meta *m = L_out_meta(n, 0);
  if (!m || !L_is_float(m->dtype))
    return GC_EUNSUPPORTED; /* integer matmuls are rare: fall back */
  return L_extern_out(L, n, out_ops[which]);
}

/* An ATen call of the node's own operator, its results allocated by ATen
 * (see the top of the file). */
int lower_extern_call(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  /* attention with dropout draws random numbers (ATen's CPU flash kernels
   * refuse it): an ATen call, the fallback's */
  double dropout = 0;
  if (L_arg(L, n, "dropout_p") &&
      (!L_float(L, n, "dropout_p", &dropout) || dropout != 0))
    return GC_EUNSUPPORTED;
  return L_extern_call(L, n);
}

/* convolution: an ATen call with an ATen-allocated result, channels-last
 * in a program that lays its intermediates out channels-last (layout.c). */
int lower_conv(lower_ctx *L, const gc_node *n, int unused) {
  (void)unused;
  return L_extern_conv(L, n);
}
