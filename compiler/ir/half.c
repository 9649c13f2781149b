/*
 * half.c: conversions between numbers and float16 / bfloat16 bits. See
 * half.h.
 *
 * Exact, portable and slow (constants only): float16 through frexp-free
 * bit arithmetic on the float32 value, bfloat16 by c10's rounding of the
 * float32 bits.
 */
#include "compiler/ir/half.h"

#include <math.h>
#include <string.h>

bool ir_dtype_half(gc_dtype d) {
  return d == GC_DTYPE_FLOAT16 || d == GC_DTYPE_BFLOAT16;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* bfloat16: the upper half of the float32 bits, rounded to nearest even
 * (c10::round_to_nearest_even); NaN is 0xffff, as ATen's vectorized
 * conversion makes it. */
static uint16_t bf16_bits(float f) {
  if (isnan(f))
    return 0xffff;
  uint32_t u = f32_bits(f);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* float16 (IEEE binary16), rounded to nearest even. */
static uint16_t f16_bits(float f) {
  uint32_t u = f32_bits(f), a = u & 0x7fffffffu;
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  if (a > 0x7f800000u) /* NaN: quiet, leading payload bits kept */
    return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) /* 65520 and above round to infinity */
    return (uint16_t)(sign | 0x7c00u);
  if (a < 0x38800000u) { /* below 2^-14: a multiple of 2^-24 */
    double m = nearbyint((double)bits_f32(a) * 16777216.0);
    return (uint16_t)(sign | (uint16_t)m); /* 1024 is the least normal */
  }
  /* rebias the exponent (127 -> 15) and round off 13 mantissa bits; a
   * carry rounds up into the exponent, as it should */
  return (uint16_t)(sign |
                    ((a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13));
}

uint16_t ir_half_bits(double v, gc_dtype d) {
  float f = (float)v;
  return d == GC_DTYPE_BFLOAT16 ? bf16_bits(f) : f16_bits(f);
}

double ir_half_value(uint16_t h, gc_dtype d) {
  if (d == GC_DTYPE_BFLOAT16)
    return (double)bits_f32((uint32_t)h << 16);
  double sign = (h & 0x8000u) ? -1.0 : 1.0;
  int e = (h >> 10) & 0x1f;
  int m = h & 0x3ff;
  if (e == 0x1f)
    return m ? (double)NAN : sign * (double)INFINITY;
  if (e == 0)
    return sign * ldexp((double)m, -24);
  return sign * ldexp((double)(1024 + m), e - 25);
}

double ir_half_round(double v, gc_dtype d) {
  return ir_half_value(ir_half_bits(v, d), d);
}
