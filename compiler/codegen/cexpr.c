/*
 * cexpr.c: scalar expressions as C. See cexpr.h.
 *
 * Semantics kept exactly as PyTorch's CPU kernels define them:
 *   - maximum/minimum (and max/min reductions) propagate NaN; fmax/fmin
 *     let it lose and, of two equal values (0.0, -0.0), return the first,
 *     as ATen and glibc do;
 *   - integer shifts by a count outside [0, width) give 0 (<<) or the sign
 *     (>>), as torch 2's kernels; integer fmod is C's % (lowering only
 *     divides integers by a known nonzero number);
 *   - floor division and remainder of floats follow Python (the sign of
 *     the divisor), with ATen's rounding fix-up;
 *   - a float converted to uint8 goes through int64 (c10's
 *     static_cast_with_inter_type), to bool through != 0;
 *   - round is half-to-even (nearbyint under the default rounding mode);
 *   - rsqrt is 1 / sqrt(x) and sigmoid 1 / (1 + exp(-x)), as ATen computes
 *     them.
 * Transcendental functions are the C library's names; the prelude declares
 * them `simd`, so gcc's vectorizer calls their vector versions through the
 * GNU vector ABI in vectorized loops: glibc's libmvec, or SLEEF's
 * libsleefgnuabi for the few libmvec lacks (GC_CODEGEN_LIBS).
 */
#include "compiler/codegen/cexpr.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compiler/ir/half.h"

const char *cx_ctype(gc_dtype d) {
  switch (d) {
  case GC_DTYPE_FLOAT32:
    return "float";
  case GC_DTYPE_FLOAT64:
    return "double";
  case GC_DTYPE_INT64:
    return "int64_t";
  case GC_DTYPE_INT32:
    return "int32_t";
  case GC_DTYPE_INT16:
    return "int16_t";
  case GC_DTYPE_INT8:
    return "int8_t";
  case GC_DTYPE_UINT8:
  case GC_DTYPE_BOOL:
    return "uint8_t";
  case GC_DTYPE_FLOAT16:
  case GC_DTYPE_BFLOAT16:
    return "uint16_t"; /* the bits (ir/half.h) */
  default:
    return "void";
  }
}

static bool is_f(gc_dtype d) {
  return d == GC_DTYPE_FLOAT32 || d == GC_DTYPE_FLOAT64;
}

/* Negative literals are parenthesized: operations spell their operands
 * after a unary minus ("(-%s)"), and "--0.5f" is a decrement. */
char *cx_literal(gc_arena *a, double f, int64_t i, gc_dtype d) {
  if (ir_dtype_half(d))
    return gc_arena_printf(a, "((uint16_t)0x%04x)", ir_half_bits(f, d));
  if (!is_f(d)) {
    if (d == GC_DTYPE_BOOL)
      return gc_arena_printf(a, "%d", i != 0);
    if (i == INT64_MIN)
      return gc_arena_strdup(a, "INT64_MIN");
    return gc_arena_printf(a, i < 0 ? "(%" PRId64 "%s)" : "%" PRId64 "%s", i,
                           d == GC_DTYPE_INT64 ? "LL" : "");
  }
  bool fl = d == GC_DTYPE_FLOAT32;
  if (isnan(f))
    return gc_arena_strdup(a, fl ? "NAN" : "((double)NAN)");
  if (isinf(f))
    return gc_arena_printf(a, "%s%s%s", f < 0 ? "(-" : "",
                           fl ? "INFINITY" : "((double)INFINITY)",
                           f < 0 ? ")" : "");
  char num[64];
  snprintf(num, sizeof num, fl ? "%.9g" : "%.17g", f);
  if (!strpbrk(num, ".e"))
    strcat(num, ".0");
  return gc_arena_printf(a, signbit(f) ? "(%s%s)" : "%s%s", num, fl ? "f" : "");
}

const char *cx_reduction_init(gc_arena *a, ir_reduction r, gc_dtype d) {
  switch (r) {
  case IR_RED_SUM:
  case IR_RED_ANY:
  case IR_RED_WELFORD:
    return cx_literal(a, 0, 0, d);
  case IR_RED_PROD:
  case IR_RED_ALL:
    return cx_literal(a, 1, 1, d);
  case IR_RED_MAX:
  case IR_RED_ARGMAX:
    if (is_f(d))
      return cx_literal(a, -INFINITY, 0, d);
    return d == GC_DTYPE_UINT8   ? "0"
           : d == GC_DTYPE_INT8  ? "INT8_MIN"
           : d == GC_DTYPE_INT16 ? "INT16_MIN"
           : d == GC_DTYPE_INT32 ? "INT32_MIN"
                                 : "INT64_MIN";
  case IR_RED_MIN:
  case IR_RED_ARGMIN:
    if (is_f(d))
      return cx_literal(a, INFINITY, 0, d);
    return d == GC_DTYPE_UINT8   ? "UINT8_MAX"
           : d == GC_DTYPE_INT8  ? "INT8_MAX"
           : d == GC_DTYPE_INT16 ? "INT16_MAX"
           : d == GC_DTYPE_INT32 ? "INT32_MAX"
                                 : "INT64_MAX";
  }
  return "0";
}

/* ---- the prelude ---- */

static const char prelude[] =
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "#include <omp.h>\n"
    "\n"
    "/* Vector math: gcc vectorizes calls to functions declared simd, calling\n"
    " * the GNU vector ABI variants (_ZGVdN8v_expf, ...), which glibc's\n"
    " * libmvec provides (up to 4 ulp, IEEE special values), and SLEEF's\n"
    " * libsleefgnuabi (1 ulp) where libmvec has none (lgamma, fmod). */\n"
    "#define GC_SIMD __attribute__((simd(\"notinbranch\")))\n"
    "#define GC_MATH(n) GC_SIMD float n##f(float); GC_SIMD double n(double);\n"
    "#define GC_MATH2(n) GC_SIMD float n##f(float, float); "
    "GC_SIMD double n(double, double);\n"
    "GC_MATH(exp) GC_MATH(exp2) GC_MATH(expm1) GC_MATH(log) GC_MATH(log2)\n"
    "GC_MATH(log10) GC_MATH(log1p) GC_MATH(sin) GC_MATH(cos) GC_MATH(tan)\n"
    "GC_MATH(asin) GC_MATH(acos) GC_MATH(atan) GC_MATH(sinh) GC_MATH(cosh)\n"
    "GC_MATH(tanh) GC_MATH(asinh) GC_MATH(acosh) GC_MATH(atanh) GC_MATH(erf)\n"
    "GC_MATH(erfc) GC_MATH(cbrt) GC_MATH(lgamma)\n"
    "GC_MATH2(pow) GC_MATH2(atan2) GC_MATH2(hypot) GC_MATH2(fmod)\n"
    "\n"
    "/* 0, in a variable gcc cannot see through: an integer made from a\n"
    " * float and made a float again is offset by it, or gcc turns the two\n"
    " * conversions into trunc(), which keeps the sign of -0.4 (cexpr.c). */\n"
    "__attribute__((visibility(\"hidden\"))) int64_t gc_izero = 0;\n"
    "\n"
    "/* Python's floor division and modulo of integers (b != 0). */\n"
    "static inline int64_t gc_floordiv(int64_t a, int64_t b) {\n"
    "  int64_t q = a / b;\n"
    "  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n"
    "}\n"
    "static inline int64_t gc_mod(int64_t a, int64_t b) {\n"
    "  int64_t r = a % b;\n"
    "  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n"
    "}\n"
    "static inline int64_t gc_min(int64_t a, int64_t b) { return a < b ? a : "
    "b; }\n"
    "static inline int64_t gc_max(int64_t a, int64_t b) { return a > b ? a : "
    "b; }\n"
    "\n"
    "/* torch.maximum/minimum: NaN wins (C's fmax/fmin let it lose). */\n"
    "#define GC_MAXIMUM(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))\n"
    "#define GC_MINIMUM(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))\n"
    "/* torch.fmax/fmin: NaN loses; of equal values (0.0 and -0.0) the first\n"
    " * wins, as in ATen's loops and glibc (a plain blend, so it vectorizes). "
    "*/\n"
    "#define GC_FMAX(a, b) (((a) < (b) || (a) != (a)) ? (b) : (a))\n"
    "#define GC_FMIN(a, b) (((a) > (b) || (a) != (a)) ? (b) : (a))\n"
    "\n"
    "/* Floor division and remainder of floats, as ATen's div_floor_floating\n"
    " * and remainder: the sign of the divisor, rounded like Python. */\n"
    "#define GC_FLOORDIV(T, S, M)                                           "
    "\\\n"
    "  static inline T gc_floordiv##S(T a, T b) {                            "
    "\\\n"
    "    if (b == 0) return a / b;                                          "
    "\\\n"
    "    T m = fmod##M(a, b), d = (a - m) / b;                               "
    "\\\n"
    "    if (m != 0 && ((b < 0) != (m < 0))) d -= 1;                         "
    "\\\n"
    "    if (d == 0) return copysign##M(0, a / b);                           "
    "\\\n"
    "    T f = floor##M(d);                                                  "
    "\\\n"
    "    return d - f > (T)0.5 ? f + 1 : f;                                  "
    "\\\n"
    "  }                                                                     "
    "\\\n"
    "  static inline T gc_rem##S(T a, T b) {                                 "
    "\\\n"
    "    T m = fmod##M(a, b);                                                "
    "\\\n"
    "    return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;                "
    "\\\n"
    "  }\n"
    "GC_FLOORDIV(float, f, f)\n"
    "GC_FLOORDIV(double, d, )\n"
    "\n"
    "/* float16 and bfloat16 values are their bits (uint16_t); operations on\n"
    " * them compute in float. The conversions are exact integer and float\n"
    " * arithmetic that gcc vectorizes on any x86-64 (neither F16C nor\n"
    " * AVX512-BF16 needed; AVX512-BF16's conversion flushes subnormals):\n"
    " * to float exactly, from float rounded to nearest even as c10 rounds,\n"
    " * NaN as ATen's vectorized conversions make it (docs/native-math.md). "
    "*/\n"
    "static inline float gc_bits_f32(uint32_t u) {\n"
    "  float f;\n"
    "  __builtin_memcpy(&f, &u, 4);\n"
    "  return f;\n"
    "}\n"
    "static inline uint32_t gc_f32_bits(float f) {\n"
    "  uint32_t u;\n"
    "  __builtin_memcpy(&u, &f, 4);\n"
    "  return u;\n"
    "}\n"
    "static inline float gc_bf16_f32(uint16_t h) {\n"
    "  return gc_bits_f32((uint32_t)h << 16);\n"
    "}\n"
    "static inline uint16_t gc_f32_bf16(float f) {\n"
    "  const uint32_t u = gc_f32_bits(f);\n"
    "  return f != f ? (uint16_t)0xffffu\n"
    "                : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
    "}\n"
    "/* float16: exponent rebiased 15 -> 127 (infinities and NaN to 255),\n"
    " * subnormals (exponent 0) as their mantissa times 2^-24. */\n"
    "static inline float gc_f16_f32(uint16_t h) {\n"
    "  const uint32_t mag = (uint32_t)(h & 0x7fffu) << 13;\n"
    "  const uint32_t e = mag & 0x0f800000u;\n"
    "  const uint32_t norm = mag + (e == 0x0f800000u ? 0x70000000u : "
    "0x38000000u);\n"
    "  const float sub = (float)(int32_t)(h & 0x3ffu) * 0x1p-24f;\n"
    "  const uint32_t r = e == 0 ? gc_f32_bits(sub) : norm;\n"
    "  return gc_bits_f32(r | ((uint32_t)(h & 0x8000u) << 16));\n"
    "}\n"
    "/* Normal results: rebiased, 13 mantissa bits rounded off (a carry\n"
    " * goes into the exponent); 65520 and up: infinity; below 2^-14:\n"
    " * |f| + 0.5f rounds |f| to a multiple of 2^-24 (0.5f's ulp), the\n"
    " * float16 subnormal's mantissa (1024 being the least normal). */\n"
    "static inline uint16_t gc_f32_f16(float f) {\n"
    "  const uint32_t u = gc_f32_bits(f), a = u & 0x7fffffffu;\n"
    "  const uint32_t norm = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> "
    "13;\n"
    "  const uint32_t sub = gc_f32_bits(gc_bits_f32(a) + 0.5f) - "
    "0x3f000000u;\n"
    "  const uint32_t r = a > 0x7f800000u    ? 0x7e00u | ((a >> 13) & "
    "0x3ffu)\n"
    "                     : a >= 0x477ff000u ? 0x7c00u\n"
    "                     : a < 0x38800000u  ? sub\n"
    "                                        : norm;\n"
    "  return (uint16_t)(((u >> 16) & 0x8000u) | r);\n"
    "}\n"
    "\n"
    "/* 16 float lanes (GCC vector extension) and their 16 x 16 transpose,\n"
    " * defined at the end when a kernel uses it. */\n"
    "typedef float gc_v16 __attribute__((vector_size(64)));\n"
    "static inline void gc_tr16(gc_v16 r[16]);\n"
    "/* Streamed (non-temporal) stores of a block, and the fence after a\n"
    " * thread's last one, defined at the end when a kernel uses them. */\n"
    "static inline void gc_stream(void *restrict dst, const void *restrict "
    "src,\n"
    "                             int64_t n);\n"
    "static inline void gc_stream_fence(void);\n"
    "/* Prefetches n bytes from p into L2 (no fault on any address). */\n"
    "static inline void gc_prefetch(const void *p, int64_t n) {\n"
    "  const char *c = (const char *)p;\n"
    "  for (int64_t o = 0; o < n; o += 64)\n"
    "    __builtin_prefetch(c + o, 0, 1);\n"
    "  __builtin_prefetch(c + n - 1, 0, 1);\n"
    "}\n"
    "\n"
    "/* Uniform floats in [0, 1) from a key and a counter: Philox4x32-10\n"
    " * (Salmon et al., \"Parallel random numbers: as easy as 1, 2, 3\", SC\n"
    " * 2011), the top 24 bits of a word. One Philox call gives four words;\n"
    " * they serve four counters: counter c is word (c >> 6) & 3 of the call\n"
    " * on ((c >> 8) << 6) | (c & 63), so a block of 256 consecutive counters\n"
    " * (256-aligned) is 64 calls, vectorized across the calls, and a single\n"
    " * counter is one call and a select. Pure integer arithmetic; the words\n"
    " * live in 64-bit lanes where AVX-512 multiplies them (vpmullq), in\n"
    " * 32-bit ones elsewhere (vpmuludq pairs): the same numbers either way.\n"
    " */\n"
    "#if defined(__AVX512DQ__)\n"
    "typedef uint64_t gc_pw;\n"
    "#define GC_PHILOX_MUL(x, m) ((x) * (m))\n"
    "#else\n"
    "typedef uint32_t gc_pw;\n"
    "#define GC_PHILOX_MUL(x, m) ((uint64_t)(x) * (m))\n"
    "#endif\n"
    "#define GC_PHILOX_ROUND                                                "
    "\\\n"
    "  do {                                                                 "
    "\\\n"
    "    uint64_t p0 = GC_PHILOX_MUL(c0, 0xD2511F53u);                      "
    "\\\n"
    "    uint64_t p1 = GC_PHILOX_MUL(c2, 0xCD9E8D57u);                      "
    "\\\n"
    "    gc_pw n0 = (gc_pw)(((p1 >> 32) ^ c1 ^ k0) & 0xffffffffu);          "
    "\\\n"
    "    gc_pw n2 = (gc_pw)(((p0 >> 32) ^ c3 ^ k1) & 0xffffffffu);          "
    "\\\n"
    "    c1 = (gc_pw)(p1 & 0xffffffffu);                                    "
    "\\\n"
    "    c3 = (gc_pw)(p0 & 0xffffffffu);                                    "
    "\\\n"
    "    c0 = n0;                                                           "
    "\\\n"
    "    c2 = n2;                                                           "
    "\\\n"
    "    k0 = (gc_pw)((k0 + 0x9E3779B9u) & 0xffffffffu);                    "
    "\\\n"
    "    k1 = (gc_pw)((k1 + 0xBB67AE85u) & 0xffffffffu);                    "
    "\\\n"
    "  } while (0)\n"
    "#define GC_PHILOX10(key, q)                                            "
    "\\\n"
    "  gc_pw c0 = (gc_pw)((q) & 0xffffffffu), c1 = (gc_pw)((q) >> 32);      "
    "\\\n"
    "  gc_pw c2 = 0, c3 = 0;                                                "
    "\\\n"
    "  gc_pw k0 = (gc_pw)((key) & 0xffffffffu), k1 = (gc_pw)((key) >> 32);  "
    "\\\n"
    "  GC_PHILOX_ROUND; GC_PHILOX_ROUND; GC_PHILOX_ROUND; GC_PHILOX_ROUND;  "
    "\\\n"
    "  GC_PHILOX_ROUND; GC_PHILOX_ROUND; GC_PHILOX_ROUND; GC_PHILOX_ROUND;  "
    "\\\n"
    "  GC_PHILOX_ROUND; GC_PHILOX_ROUND\n"
    "#define GC_U24(w) ((float)(int32_t)((w) >> 8) * (1.0f / 16777216.0f))\n"
    "static inline float gc_rand_u01(uint64_t key, uint64_t ctr) {\n"
    "  GC_PHILOX10(key, ((ctr >> 8) << 6) | (ctr & 63));\n"
    "  const uint64_t w = (ctr >> 6) & 3;\n"
    "  return GC_U24(w == 0 ? c0 : w == 1 ? c1 : w == 2 ? c2 : c3);\n"
    "}\n"
    "/* The 256 values of counters 256 blk .. 256 blk + 255. */\n"
    "#if defined(__AVX2__) && !defined(__AVX512DQ__) && !defined(__clang__)\n"
    "/* AVX2 without AVX-512: gcc vectorizes the generic loop below with\n"
    " * the words in 64-bit lanes, moving them between 32- and 64-bit lanes\n"
    " * every round (lane-crossing shuffles). Here they stay in 32-bit\n"
    " * lanes, eight calls a vector, two vectors in flight, and vpmuludq\n"
    " * multiplies the even and the odd lanes: 2.5x faster, the same\n"
    " * numbers. */\n"
    "typedef uint32_t gc_pv __attribute__((vector_size(32)));\n"
    "typedef uint64_t gc_pq __attribute__((vector_size(32)));\n"
    "typedef int32_t gc_pi __attribute__((vector_size(32)));\n"
    "typedef float gc_pf __attribute__((vector_size(32)));\n"
    "#define GC_MULEVEN(a, b) \\\n"
    "  ((gc_pq)__builtin_ia32_pmuludq256((gc_pi)(a), (gc_pi)(b)))\n"
    "/* The high and low words of the eight 64-bit products c * m. */\n"
    "static inline void gc_philox_mul8(gc_pv c, uint32_t m, gc_pv *hi,\n"
    "                                  gc_pv *lo) {\n"
    "  const gc_pv mv = (gc_pv){0} + m;\n"
    "  const gc_pv even_odd = {0, 9, 2, 11, 4, 13, 6, 15};\n"
    "  const gc_pq e = GC_MULEVEN(c, mv);\n"
    "  const gc_pq o = GC_MULEVEN((gc_pq)c >> 32, mv);\n"
    "  *hi = __builtin_shuffle((gc_pv)(e >> 32), (gc_pv)o, even_odd);\n"
    "  *lo = __builtin_shuffle((gc_pv)e, (gc_pv)(o << 32), even_odd);\n"
    "}\n"
    "/* One round of eight calls (words c[0..3]) under the key (k0, k1). */\n"
    "static inline void gc_philox_round8(gc_pv c[4], uint32_t k0,\n"
    "                                    uint32_t k1) {\n"
    "  gc_pv h0, l0, h1, l1;\n"
    "  gc_philox_mul8(c[0], 0xD2511F53u, &h0, &l0);\n"
    "  gc_philox_mul8(c[2], 0xCD9E8D57u, &h1, &l1);\n"
    "  c[0] = h1 ^ c[1] ^ k0;\n"
    "  c[2] = h0 ^ c[3] ^ k1;\n"
    "  c[1] = l1;\n"
    "  c[3] = l0;\n"
    "}\n"
    "/* The 24-bit uniform floats of eight words, stored at r. */\n"
    "static inline void gc_u24x8(gc_pv w, float *r) {\n"
    "  const gc_pf f = __builtin_convertvector((gc_pi)(w >> 8), gc_pf) *\n"
    "                  (1.0f / 16777216.0f);\n"
    "  __builtin_memcpy(r, &f, sizeof f);\n"
    "}\n"
    "static void gc_rand_block(uint64_t key, uint64_t blk,\n"
    "                          float *restrict r) {\n"
    "  const uint64_t q = blk << 6; /* low 6 bits 0: q | j == q + j */\n"
    "  for (int j = 0; j < 64; j += 16) {\n"
    "    gc_pv a[4], b[4];\n"
    "    a[0] = (gc_pv){0, 1, 2, 3, 4, 5, 6, 7} + (uint32_t)(q + j);\n"
    "    b[0] = a[0] + 8;\n"
    "    a[1] = b[1] = (gc_pv){0} + (uint32_t)(q >> 32);\n"
    "    a[2] = a[3] = b[2] = b[3] = (gc_pv){0};\n"
    "    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);\n"
    "    for (int i = 0; i < 10; i++) {\n"
    "      gc_philox_round8(a, k0, k1);\n"
    "      gc_philox_round8(b, k0, k1);\n"
    "      k0 += 0x9E3779B9u;\n"
    "      k1 += 0xBB67AE85u;\n"
    "    }\n"
    "    for (int w = 0; w < 4; w++) {\n"
    "      gc_u24x8(a[w], r + 64 * w + j);\n"
    "      gc_u24x8(b[w], r + 64 * w + j + 8);\n"
    "    }\n"
    "  }\n"
    "}\n"
    "#else\n"
    "static void gc_rand_block(uint64_t key, uint64_t blk,\n"
    "                          float *restrict r) {\n"
    "  #pragma omp simd\n"
    "  for (uint64_t j = 0; j < 64; j++) {\n"
    "    GC_PHILOX10(key, (blk << 6) | j);\n"
    "    r[j] = GC_U24(c0);\n"
    "    r[64 + j] = GC_U24(c1);\n"
    "    r[128 + j] = GC_U24(c2);\n"
    "    r[192 + j] = GC_U24(c3);\n"
    "  }\n"
    "}\n"
    "#endif\n"
    "/* out[i] = gc_rand_u01(key, ctr + i) for i < n. A thread remembers its\n"
    " * last block: rows shorter than 256 that share one cost it once. */\n"
    "static void gc_rand_fill(uint64_t key, uint64_t ctr, int64_t n,\n"
    "                         float *restrict out) {\n"
    "  static __thread uint64_t last_key, last_blk = ~(uint64_t)0;\n"
    "  static __thread float last[256];\n"
    "  while (n > 0) {\n"
    "    const uint64_t blk = ctr >> 8, off = ctr & 255;\n"
    "    const int64_t m = gc_min(256 - (int64_t)off, n);\n"
    "    if (off == 0 && m == 256) {\n"
    "      gc_rand_block(key, blk, out);\n"
    "    } else {\n"
    "      if (blk != last_blk || key != last_key) {\n"
    "        gc_rand_block(key, blk, last);\n"
    "        last_key = key;\n"
    "        last_blk = blk;\n"
    "      }\n"
    "      __builtin_memcpy(out, last + off, (uint64_t)m * sizeof *out);\n"
    "    }\n"
    "    out += m;\n"
    "    ctr += (uint64_t)m;\n"
    "    n -= m;\n"
    "  }\n"
    "}\n";

const char *cx_prelude(void) {
  return prelude;
}

/* ---- the memo of a loop body ---- */

void cx_reset(cx *c) {
  if (c->cap)
    memset(c->keys, 0, c->cap * sizeof *c->keys);
  c->n = 0;
}

static const char **memo_slot(cx *c, const ir_expr *e) {
  if ((c->n + 1) * 2 > c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 256;
    const ir_expr **k = gc_arena_calloc(c->ir->a, cap, sizeof *k);
    const char **v = gc_arena_calloc(c->ir->a, cap, sizeof *v);
    if (!k || !v)
      return NULL;
    for (size_t i = 0; i < c->cap; i++) {
      if (!c->keys[i])
        continue;
      size_t j = (size_t)c->keys[i]->id & (cap - 1);
      while (k[j])
        j = (j + 1) & (cap - 1);
      k[j] = c->keys[i];
      v[j] = c->names[i];
    }
    c->keys = k;
    c->names = v;
    c->cap = cap;
  }
  size_t j = (size_t)e->id & (c->cap - 1);
  while (c->keys[j] && c->keys[j] != e)
    j = (j + 1) & (c->cap - 1);
  if (!c->keys[j]) {
    c->keys[j] = e;
    c->names[j] = NULL;
    c->n++;
  }
  return &c->names[j];
}

void cx_bind(cx *c, const ir_expr *e, const char *name) {
  const char **slot = memo_slot(c, e);
  if (slot)
    *slot = name;
}

/* ---- spelling ---- */

static const char *fn_name(ir_op op) {
  switch (op) {
  case IR_EXP:
    return "exp";
  case IR_EXP2:
    return "exp2";
  case IR_EXPM1:
    return "expm1";
  case IR_LOG:
    return "log";
  case IR_LOG2:
    return "log2";
  case IR_LOG10:
    return "log10";
  case IR_LOG1P:
    return "log1p";
  case IR_SQRT:
    return "sqrt";
  case IR_CBRT:
    return "cbrt";
  case IR_SIN:
    return "sin";
  case IR_COS:
    return "cos";
  case IR_TAN:
    return "tan";
  case IR_ASIN:
    return "asin";
  case IR_ACOS:
    return "acos";
  case IR_ATAN:
    return "atan";
  case IR_SINH:
    return "sinh";
  case IR_COSH:
    return "cosh";
  case IR_TANH:
    return "tanh";
  case IR_ASINH:
    return "asinh";
  case IR_ACOSH:
    return "acosh";
  case IR_ATANH:
    return "atanh";
  case IR_ERF:
    return "erf";
  case IR_ERFC:
    return "erfc";
  case IR_LGAMMA:
    return "lgamma";
  case IR_CEIL:
    return "ceil";
  case IR_FLOOR:
    return "floor";
  case IR_ROUND:
    return "nearbyint";
  case IR_TRUNC:
    return "trunc";
  case IR_POW:
    return "pow";
  case IR_ATAN2:
    return "atan2";
  case IR_HYPOT:
    return "hypot";
  case IR_COPYSIGN:
    return "copysign";
  case IR_FMOD:
    return "fmod";
  default:
    return NULL;
  }
}

static bool vector_math(ir_op op) {
  switch (op) {
  case IR_SQRT:
  case IR_CEIL:
  case IR_FLOOR:
  case IR_ROUND:
  case IR_TRUNC:
  case IR_COPYSIGN:
    return false; /* gcc vectorizes these itself */
  default:
    return fn_name(op) != NULL;
  }
}

/* ---- vector math from SLEEF's own API ----
 *
 * Generated code links glibc's libmvec before SLEEF's libsleefgnuabi (both
 * implement the GNU vector ABI), since libmvec is 2-4x faster for erf,
 * tanh, sin, cos, expm1, sinh, cosh and atan. For exp, log and log1p SLEEF
 * is the better one: libmvec's exp made the softmax kernel 1.5x slower, its
 * log and log1p take a slow path (8x) on inputs giving NaN, and SLEEF's are
 * the ones ATen uses, to 1 ulp (libmvec: up to 4). These three get
 * definitions of their vector ABI names in the translation unit, hidden so
 * the kernels' calls bind to them, calling SLEEF's dispatching entry points
 * (Sleef_expf16_u10, ...) in libsleef. One per x86-64 vector ABI level the
 * target has: b (SSE2), c (AVX), d (AVX2), e (AVX-512). */

static unsigned sleef_bit(ir_op op) {
  return op == IR_EXP     ? CX_SLEEF_EXP
         : op == IR_LOG   ? CX_SLEEF_LOG
         : op == IR_LOG1P ? CX_SLEEF_LOG1P
                          : 0;
}

const char *cx_sleef_wrappers(gc_arena *a, unsigned used) {
  static const char *const names[] = {"exp", "log", "log1p"};
  static const struct {
    const char *isa, *guard;
    int f, d; /* float and double lanes */
  } levels[] = {{"b", "__SSE2__", 4, 2},
                {"c", "__AVX__", 8, 4},
                {"d", "__AVX2__", 8, 4},
                {"e", "__AVX512F__", 16, 8}};
  if (!used)
    return "";
  gc_buf b = {0};
  gc_buf_puts(
      &b, "/* exp, log, log1p: SLEEF's own entry points (libsleef), not\n"
          " * libmvec's (docs/native-math.md says why). */\n"
          "#if defined(__x86_64__)\n"
          "#define GC_SLEEF(isa, fn, vt, sleef)                          "
          "\\\n"
          "  vt sleef(vt);                                               "
          "\\\n"
          "  __attribute__((visibility(\"hidden\"))) vt _ZGV##isa##_##fn(vt x) "
          "{ \\\n"
          "    return sleef(x);                                          "
          "\\\n"
          "  }\n");
  for (size_t l = 0; l < sizeof levels / sizeof *levels; l++) {
    gc_buf_printf(&b, "#if defined(%s)\n", levels[l].guard);
    gc_buf_printf(&b,
                  "typedef float gc_%sf __attribute__((vector_size(%d)));\n"
                  "typedef double gc_%sd __attribute__((vector_size(%d)));\n",
                  levels[l].isa, 4 * levels[l].f, levels[l].isa,
                  8 * levels[l].d);
    for (int i = 0; i < 3; i++) {
      if (!(used & (1u << i)))
        continue;
      gc_buf_printf(&b, "GC_SLEEF(%sN%dv, %sf, gc_%sf, Sleef_%sf%d_u10)\n",
                    levels[l].isa, levels[l].f, names[i], levels[l].isa,
                    names[i], levels[l].f);
      gc_buf_printf(&b, "GC_SLEEF(%sN%dv, %s, gc_%sd, Sleef_%sd%d_u10)\n",
                    levels[l].isa, levels[l].d, names[i], levels[l].isa,
                    names[i], levels[l].d);
    }
    gc_buf_puts(&b, "#endif\n");
  }
  gc_buf_puts(&b, "#endif\n\n");
  const char *r =
      b.failed ? NULL : gc_arena_strndup(a, b.data ? b.data : "", b.len);
  gc_buf_free(&b);
  return r;
}

/* Shifts of integers as torch 2's CPU kernels do them: a count outside
 * [0, width) of the tensor's dtype (a negative count included) gives 0 for
 * a << b, and for a >> b the shift by the largest count that keeps the sign
 * (width - 1 for signed types: -1 or 0; width for unsigned: 0). Otherwise
 * a << b is (unsigned)a << b and a >> b arithmetic, in C's promoted type,
 * converted back. The count compared as uint64_t makes a negative count
 * huge, and keeps every shift the C computes defined. */
static int shift_width(gc_dtype d) {
  return (int)gc_dtype_size(d) * 8;
}

static const char *shift_type(gc_dtype d) {
  return gc_dtype_size(d) == 8 ? "uint64_t" : "uint32_t";
}

/* A conversion to or from a half dtype (ir/half.h): through float, as
 * c10 converts (a float64 or an integer is made a float first). */
static char *half_cast(cx *c, const ir_expr *e, const char *a) {
  gc_arena *ar = c->ir->a;
  gc_dtype d = e->dtype, ad = e->args[0]->dtype;
  const ir_expr *src = e->args[0];
  const char *f = a; /* the operand as a float */
  if (ir_dtype_half(ad))
    f = gc_arena_printf(ar, "gc_%s_f32(%s)",
                        ad == GC_DTYPE_BFLOAT16 ? "bf16" : "f16", a);
  else if (src->op == IR_CAST && src->args[0] && is_f(src->args[0]->dtype) &&
           !is_f(ad)) /* an integer made from a float: see c_of_op's CAST */
    f = gc_arena_printf(ar, "(float)(%s + gc_izero)", a);
  else if (ad != GC_DTYPE_FLOAT32)
    f = gc_arena_printf(ar, "(float)%s", a);
  if (ir_dtype_half(d))
    return gc_arena_printf(ar, "gc_f32_%s(%s)",
                           d == GC_DTYPE_BFLOAT16 ? "bf16" : "f16", f);
  if (d == GC_DTYPE_BOOL)
    return gc_arena_printf(ar, "(uint8_t)(%s != 0)", f);
  if (d == GC_DTYPE_UINT8)
    return gc_arena_printf(ar, "(uint8_t)(int64_t)%s", f);
  return gc_arena_printf(ar, "(%s)%s", cx_ctype(d), f);
}

/* The C expression of operation e applied to the named operands. */
static char *c_of_op(cx *c, const ir_expr *e, const char *a, const char *b,
                   const char *x) {
  gc_arena *ar = c->ir->a;
  gc_dtype d = e->dtype;
  gc_dtype ad = e->args[0] ? e->args[0]->dtype : d;
  const char *sfx = ad == GC_DTYPE_FLOAT32 ? "f" : "";
  const char *one = ad == GC_DTYPE_FLOAT32 ? "1.0f" : "1.0";
  switch (e->op) {
  case IR_CAST:
    if (ir_dtype_half(d) || ir_dtype_half(ad))
      return half_cast(c, e, a);
    if (d == GC_DTYPE_BOOL)
      return gc_arena_printf(ar, "(uint8_t)(%s != 0)", a);
    if (d == GC_DTYPE_UINT8 && is_f(ad))
      return gc_arena_printf(ar, "(uint8_t)(int64_t)%s", a);
    /* An integer made a float is never -0.0, but under -fno-trapping-math
     * gcc turns (float)(int)x of a float x into trunc(x), which keeps x's
     * sign, and then drops a + 0.0 as it would for an integer:
     * (float)(int64_t)-0.4f came out -0.0 (atan2 of it and -1 was -pi
     * against eager's pi; graphgen seed 313879). Offset by gc_izero, the
     * integer is not one gcc knows came from a float. */
    if (is_f(d) && e->args[0] && e->args[0]->op == IR_CAST &&
        e->args[0]->args[0] && is_f(e->args[0]->args[0]->dtype))
      return gc_arena_printf(ar, "(%s)(%s + gc_izero)", cx_ctype(d), a);
    return gc_arena_printf(ar, "(%s)%s", cx_ctype(d), a);
  case IR_NEG:
    return gc_arena_printf(ar, "(-%s)", a);
  case IR_ABS:
    if (is_f(ad))
      return gc_arena_printf(ar, "fabs%s(%s)", sfx, a);
    return gc_arena_printf(ar, "(%s < 0 ? -%s : %s)", a, a, a);
  case IR_RSQRT:
    return gc_arena_printf(ar, "(%s / sqrt%s(%s))", one, sfx, a);
  case IR_RECIP:
    return gc_arena_printf(ar, "(%s / %s)", one, a);
  case IR_SIGMOID:
    c->vector_math = true;
    c->sleef |= CX_SLEEF_EXP;
    return gc_arena_printf(ar, "(%s / (%s + exp%s(-%s)))", one, one, sfx, a);
  case IR_ISNAN:
    return gc_arena_printf(ar, "(%s != %s)", a, a);
  case IR_ISINF:
    return gc_arena_printf(ar, "(isinf(%s) != 0)", a);
  case IR_SIGNBIT:
    return gc_arena_printf(ar, "(signbit(%s) != 0)", a);
  case IR_NOT:
    return gc_arena_printf(ar, "(!%s)", a);
  case IR_BNOT:
    return ad == GC_DTYPE_BOOL
               ? gc_arena_printf(ar, "(!%s)", a)
               : gc_arena_printf(ar, "(%s)(~%s)", cx_ctype(d), a);
  case IR_ADD:
    return d == GC_DTYPE_BOOL ? gc_arena_printf(ar, "(%s | %s)", a, b)
                              : gc_arena_printf(ar, "(%s + %s)", a, b);
  case IR_SUB:
    return gc_arena_printf(ar, "(%s - %s)", a, b);
  case IR_MUL:
    return d == GC_DTYPE_BOOL ? gc_arena_printf(ar, "(%s & %s)", a, b)
                              : gc_arena_printf(ar, "(%s * %s)", a, b);
  case IR_DIV:
    return gc_arena_printf(ar, "(%s / %s)", a, b);
  case IR_FLOORDIV:
    return is_f(d) ? gc_arena_printf(ar, "gc_floordiv%s(%s, %s)",
                                     ad == GC_DTYPE_FLOAT32 ? "f" : "d", a, b)
                   : gc_arena_printf(ar, "(%s)gc_floordiv(%s, %s)", cx_ctype(d),
                                     a, b);
  case IR_MOD:
    return is_f(d)
               ? gc_arena_printf(ar, "gc_rem%s(%s, %s)",
                                 ad == GC_DTYPE_FLOAT32 ? "f" : "d", a, b)
               : gc_arena_printf(ar, "(%s)gc_mod(%s, %s)", cx_ctype(d), a, b);
  case IR_MAXIMUM:
    return gc_arena_printf(ar, "GC_MAXIMUM(%s, %s)", a, b);
  case IR_MINIMUM:
    return gc_arena_printf(ar, "GC_MINIMUM(%s, %s)", a, b);
  case IR_EQ:
    return gc_arena_printf(ar, "(%s == %s)", a, b);
  case IR_NE:
    return gc_arena_printf(ar, "(%s != %s)", a, b);
  case IR_LT:
    return gc_arena_printf(ar, "(%s < %s)", a, b);
  case IR_LE:
    return gc_arena_printf(ar, "(%s <= %s)", a, b);
  case IR_GT:
    return gc_arena_printf(ar, "(%s > %s)", a, b);
  case IR_GE:
    return gc_arena_printf(ar, "(%s >= %s)", a, b);
  /* No && or ||: their short circuit is control flow, which stops gcc's
   * vectorizer (both operands are computed values without side effects). */
  case IR_AND:
  case IR_OR: {
    const char *op = e->op == IR_AND ? "&" : "|";
    gc_dtype bd = e->args[1] ? e->args[1]->dtype : d;
    if (ad == GC_DTYPE_BOOL && bd == GC_DTYPE_BOOL)
      return gc_arena_printf(ar, "(%s %s %s)", a, op, b);
    return gc_arena_printf(ar, "((%s != 0) %s (%s != 0))", a, op, b);
  }
  case IR_XOR:
    return gc_arena_printf(ar, "((%s != 0) != (%s != 0))", a, b);
  case IR_BAND:
    return gc_arena_printf(ar, "(%s & %s)", a, b);
  case IR_BOR:
    return gc_arena_printf(ar, "(%s | %s)", a, b);
  case IR_BXOR:
    return gc_arena_printf(ar, "(%s ^ %s)", a, b);
  case IR_SHL: /* torch 2: 0 for a count out of range (see above) */
    return gc_arena_printf(
        ar, "((uint64_t)(%s) < %d ? (%s)((%s)%s << (%s)) : (%s)0)", b,
        shift_width(d), cx_ctype(d), shift_type(d), a, b, cx_ctype(d));
  case IR_SHR: { /* the count saturates at the sign-keeping shift */
    int top =
        shift_width(d) - (d == GC_DTYPE_UINT8 || d == GC_DTYPE_UINT16 ? 0 : 1);
    return gc_arena_printf(ar, "(%s)(%s >> ((uint64_t)(%s) < %d ? (%s) : %d))",
                           cx_ctype(d), a, b, top, b, top);
  }
  case IR_FMOD:
    if (!is_f(d)) /* integers: C's %, sign of the dividend (b != 0) */
      return gc_arena_printf(ar, "(%s)(%s %% %s)", cx_ctype(d), a, b);
    break;
  case IR_FMAX:
  case IR_FMIN:
    return gc_arena_printf(ar, "GC_%s(%s, %s)",
                           e->op == IR_FMAX ? "FMAX" : "FMIN", a, b);
  case IR_WHERE:
    return gc_arena_printf(ar, "(%s ? %s : %s)", a, b, x);
  case IR_FMA: /* C's fma: rounded once whatever gcc contracts elsewhere
                  (an instruction where the target has one; gcc vectorizes
                  it itself, libmvec has no vector fma) */
    return gc_arena_printf(ar, "fma%s(%s, %s, %s)", sfx, a, b, x);
  case IR_RAND:
    return gc_arena_printf(ar, "gc_rand_u01((uint64_t)%s, (uint64_t)%s)", a, b);
  default:
    break;
  }
  const char *f = fn_name(e->op);
  if (!f)
    return NULL;
  if (vector_math(e->op))
    c->vector_math = true;
  c->sleef |= sleef_bit(e->op);
  if (ir_op_arity(e->op) == 2)
    return gc_arena_printf(ar, "%s%s(%s, %s)", f, sfx, a, b);
  return gc_arena_printf(ar, "%s%s(%s)", f, sfx, a);
}

static void indent(cx *c) {
  for (int i = 0; i < c->indent; i++)
    gc_buf_puts(c->out, " ");
}

const char *cx_emit(cx *c, const ir_expr *e) {
  gc_arena *ar = c->ir->a;
  if (!e)
    return "0 /* missing */";
  if (e->op == IR_CONST)
    return cx_literal(ar, e->k.f, e->k.i, e->dtype);
  const char **slot = memo_slot(c, e);
  if (!slot)
    return "0 /* out of memory */";
  if (*slot)
    return *slot; /* cppcheck-suppress identicalInnerCondition */
  if (c->depth > 5000)
    return "0 /* too deep */";
  c->depth++;
  char *val = NULL;
  switch (e->op) {
  case IR_LOAD: {
    const char *l = c->local ? c->local(c, e, c->local_ctx) : NULL;
    val = l ? (char *)l
            : gc_arena_printf(ar, "b%d[%s]", e->load.buf->id,
                              gc_sym_str(&c->ir->sym, e->load.index));
    break;
  }
  case IR_INDEX:
    val = gc_arena_printf(ar, "(%s)%s", cx_ctype(e->dtype),
                          gc_sym_str(&c->ir->sym, e->index));
    break;
  case IR_GATHER: {
    /* the data index, wrapped and clamped; out of range flags the kernel */
    const char *i = cx_emit(c, e->args[0]);
    int t = (*c->next_temp)++;
    long long n = (long long)e->load.size;
    indent(c);
    if (e->load.wrap)
      gc_buf_printf(c->out, "const int64_t w%d = %s < 0 ? %s + %lld : %s;\n", t,
                    i, i, n, i);
    else
      gc_buf_printf(c->out, "const int64_t w%d = %s;\n", t, i);
    indent(c);
    gc_buf_printf(
        c->out, "const int64_t g%d = w%d < 0 ? 0 : w%d >= %lld ? %lld : w%d;\n",
        t, t, t, n, n - 1, t);
    indent(c);
    gc_buf_printf(c->out, "gc_err |= g%d != w%d;\n", t, t);
    val = gc_arena_printf(ar, "b%d[%s + %lld*g%d]", e->load.buf->id,
                          gc_sym_str(&c->ir->sym, e->load.index),
                          (long long)e->load.stride, t);
    break;
  }
  default: {
    const char *a[3] = {NULL, NULL, NULL};
    for (int i = 0; i < ir_op_arity(e->op); i++)
      a[i] = cx_emit(c, e->args[i]);
    val = c_of_op(c, e, a[0], a[1], a[2]);
    if (!val)
      val = gc_arena_printf(ar, "0 /* %s? */", ir_op_name(e->op));
  }
  }
  c->depth--;
  const char *name = gc_arena_printf(ar, "t%d", (*c->next_temp)++);
  indent(c);
  gc_buf_printf(c->out, "const %s %s = %s;\n", cx_ctype(e->dtype), name, val);
  slot = memo_slot(c, e); /* the table may have grown */
  if (slot)
    *slot = name;
  return name;
}
