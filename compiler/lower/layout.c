/*
 * layout.c: the layout lowering chooses for intermediates: channels-last
 * in programs of float32 2-D convolutions.
 */
#include "compiler/lower/ctx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ir/half.h"
#include "compiler/opfacts.h"
#include "compiler/ops.h"
#include "compiler/schema.h"
#include "compiler/torchops.h"

/* ---- channels-last intermediates ----
 *
 * oneDNN convolves channels-last (NHWC) tensors in place; given NCHW ones,
 * ATen's convolution reorders its input and output on every call. In a
 * program of float32 2-D convolutions (gc_lower decides), every 4-D
 * float32 intermediate the program lays out itself is therefore dense
 * channels-last, and each convolution gets a channels-last input and
 * returns a channels-last result (ATen's rule: the output takes the
 * input's memory format), so the reorders go; the generated kernels
 * around the convolutions index any strides. Eager layouts stay where they
 * are observable: graph inputs and outputs, and the arguments of fallback
 * calls (call_view copies when they differ). Eager on resnet18 batch 8,
 * NCHW against an NHWC input: 185 -> 161 ms; densenet121 98 -> 76 ms;
 * efficientnet_b0 163 -> 126 ms. */

static bool cl_eligible(const lower_ctx *L, int rank, gc_dtype dt) {
  return L->channels_last && rank == 4 && dt == GC_DTYPE_FLOAT32;
}

/* Dense channels-last strides for 4-D `sizes` (dims 0, 2, 3, 1 from
 * outermost to innermost). */
void L__cl_strides(const int64_t *sizes, int64_t *st) {
  static const int order[4] = {0, 2, 3, 1};
  int64_t s = 1;
  for (int i = 3; i >= 0; i--) {
    st[order[i]] = s;
    s *= sizes[order[i]] > 1 ? sizes[order[i]] : 1;
  }
}

/* m with dense channels-last strides (NULL when out of memory). */
const gc_tensor_meta *L__cl_meta(lower_ctx *L, const gc_tensor_meta *m,
                                 const int64_t *sizes) {
  gc_tensor_meta *c = gc_arena_alloc(L->ir->a, sizeof *c);
  gc_symint *st = gc_arena_calloc(L->ir->a, 4, sizeof *st);
  if (!c || !st)
    return NULL;
  int64_t s[4];
  L__cl_strides(sizes, s);
  for (int i = 0; i < 4; i++)
    st[i].v = s[i];
  *c = *m;
  c->strides = st;
  return c;
}

/* The layout an intermediate with eager metadata `like` gets when lowering
 * chooses: channels-last where cl_eligible, else `like`. */
const gc_tensor_meta *L__chosen_layout(lower_ctx *L, const ir_tensor *t,
                                       const gc_tensor_meta *like) {
  if (!cl_eligible(L, t->rank, t->dtype) ||
      (t->value && L->eager_layout[t->value->id]))
    return like;
  gc_tensor_meta m = {.dtype = t->dtype, .rank = 4};
  return L__cl_meta(L, like ? like : &m, t->sizes);
}

/* The bytes of gn's weight when they are not laid out channels-last (0
 * when they are, as every 1x1 kernel is). */
static int64_t cl_weight_copy_bytes(lower_ctx *L, const gc_node *gn) {
  const gc_arg *w = L_arg(L, gn, "weight");
  int64_t sz[4], st[4], cl[4];
  if (!w || w->kind != GC_ARG_TENSOR || !w->v ||
      w->v->kind != GC_VALUE_TENSOR || w->v->meta.rank != 4 ||
      !L_static_sizes(&w->v->meta, sz) || !L__static_strides(&w->v->meta, st))
    return 0;
  L__cl_strides(sz, cl);
  bool same = true;
  for (int i = 0; i < 4; i++)
    if (sz[i] > 1 && st[i] != cl[i])
      same = false;
  if (same)
    return 0;
  int64_t n = 1;
  for (int i = 0; i < 4; i++)
    if (__builtin_mul_overflow(n, sz[i], &n))
      return INT64_MAX / 8;
  return n * gc_dtype_size(w->v->meta.dtype);
}

/* Is gn a float32 2-D convolution whose input and result are unambiguously
 * channels-last when dense NHWC (more than one channel and one pixel: else
 * ATen may take either layout for the other)? */
bool L__cl_conv(lower_ctx *L, const gc_node *gn) {
  const gc_arg *in = L_arg(L, gn, "input");
  const gc_tensor_meta *out = L_out_meta(gn, 0);
  bool transposed = true;
  if (!in || in->kind != GC_ARG_TENSOR || !in->v ||
      in->v->kind != GC_VALUE_TENSOR || !out || out->rank != 4 ||
      (L_arg(L, gn, "transposed") &&
       (!L_bool(L, gn, "transposed", &transposed) || transposed)))
    return false; /* conv2d has no `transposed`: it never is */
  const gc_tensor_meta *m = &in->v->meta;
  int64_t a[4], b[4];
  if (!(m->rank == 4 && m->dtype == GC_DTYPE_FLOAT32 &&
        out->dtype == GC_DTYPE_FLOAT32 && L_static_sizes(m, a) &&
        L_static_sizes(out, b) && a[1] > 1 && a[2] * a[3] > 1 && b[1] > 1 &&
        b[2] * b[3] > 1))
    return false;
  /* Channels-last pays where the reorders it saves outweigh the copy it
   * adds. Given an NCHW weight and an NHWC input, ATen copies the weight to
   * channels-last on every call (its kernel is 1x1: the two layouts are the
   * same bytes, no copy); given NCHW, oneDNN reorders the input and the
   * result instead. So a convolution whose weight outweighs its input and
   * result (the late layers at small batch: wide_resnet50_2's 3x3 layer4
   * weights are 37.7 MB against 0.4 MB of activations at batch 1) keeps
   * eager's layout. */
  int64_t wb = cl_weight_copy_bytes(L, gn);
  return wb <= (a[0] * a[1] * a[2] * a[3] + b[0] * b[1] * b[2] * b[3]) * 4;
}
