/*
 * test_ir_half.c: float16 and bfloat16 in the loop IR (compiler/ir/half.h):
 * the compiler's conversions of constants, the rewriting of operations on
 * half values into float32 ones between casts (ir.c, make_op), and the
 * generated code's own conversions (codegen/cexpr.c's prelude), built with
 * the system C compiler and compared with the compiler's on every half
 * value, every rounding boundary between two of them (and one float32 ulp
 * either side), and a sample of all float32 values.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler/arena.h"
#include "compiler/codegen/cexpr.h"
#include "compiler/ir/half.h"
#include "compiler/ir/ir.h"
#include "tests/lib/irbuild.h"

/* The graph every test builds in: ib_ir (tests/lib/irbuild.h). */
TestSuite(ir_half, .init = ib_setup, .fini = ib_teardown);

static const gc_dtype BF16 = GC_DTYPE_BFLOAT16, F16 = GC_DTYPE_FLOAT16,
                      F32 = GC_DTYPE_FLOAT32;

Test(ir_half, constants_round_to_nearest_even) {
  /* bfloat16: 8 significant bits */
  cr_assert_eq(ir_half_round(0.1, BF16), 0.10009765625);
  cr_assert_eq(ir_half_round(1 + 0x1p-8, BF16), 1.0);            /* tie: even */
  cr_assert_eq(ir_half_round(1 + 3 * 0x1p-8, BF16), 1 + 0x1p-6); /* tie: even */
  cr_assert_eq(ir_half_round(1 + 0x1p-8 + 0x1p-20, BF16), 1 + 0x1p-7);
  cr_assert(isinf(ir_half_round(3.4e38, BF16)));
  cr_assert_eq(ir_half_bits(NAN, BF16), 0xffff);
  cr_assert_eq(ir_half_bits(-0.0, BF16), 0x8000);
  /* float16: 11 significant bits, subnormals down to 2^-24 */
  cr_assert_eq(ir_half_round(65519.0, F16), 65504.0);
  cr_assert(isinf(ir_half_round(65520.0, F16)));
  cr_assert_eq(ir_half_round(0x1p-25, F16), 0.0);             /* tie: even 0 */
  cr_assert_eq(ir_half_round(3 * 0x1p-26, F16), 0x1p-24);     /* above: up */
  cr_assert_eq(ir_half_round(3 * 0x1p-25, F16), 2 * 0x1p-24); /* tie: even */
  cr_assert_eq(ir_half_round(2049.0, F16), 2048.0);
  cr_assert_eq(ir_half_round(2051.0, F16), 2052.0);
  cr_assert_eq(ir_half_bits(NAN, F16) & 0x7e00, 0x7e00);
  /* through float32 first, as c10 converts a double */
  double v = 1 + 0x1p-8 + 0x1p-30; /* float32 rounds it to the tie */
  cr_assert_eq(ir_half_round(v, BF16), 1.0);
}

static const gc_dtype HALVES[2] = {GC_DTYPE_FLOAT16, GC_DTYPE_BFLOAT16};

Test(ir_half, every_half_value_round_trips) {
  for (int i = 0; i < 2; i++)
    for (unsigned h = 0; h < 65536; h++) {
      double v = ir_half_value((uint16_t)h, HALVES[i]);
      if (isnan(v))
        continue;
      cr_assert_eq(ir_half_bits(v, HALVES[i]), h, "%s %04x",
                   gc_dtype_name(HALVES[i]), h);
    }
}

Test(ir_half, constants_of_half_dtypes_hold_rounded_values) {
  ir_expr *k = ir_const_f(&ib_ir, 0.1, BF16);
  cr_assert_eq(k->k.f, 0.10009765625);
  /* a float32 constant cast to bfloat16 folds to the rounded constant */
  ir_expr *c = ir_cast(&ib_ir, ir_const_f(&ib_ir, 0.1, F32), BF16);
  cr_assert_eq(c->op, IR_CONST);
  cr_assert_eq(c, k);
}

static ir_expr *load(gc_dtype d) {
  int64_t sizes[1] = {8}, strides[1] = {1};
  ir_buf *b = ir_buf_new(&ib_ir, IR_BUF_ARENA, d, 1, sizes, strides);
  cr_assert_not_null(b);
  return ir_load(&ib_ir, b, gc_sym_const(&ib_ir.sym, 0));
}

Test(ir_half, operations_on_half_values_compute_in_float32) {
  ir_expr *x = load(BF16), *y = load(BF16);
  ir_expr *s = ir_op2(&ib_ir, IR_ADD, BF16, x, y);
  /* cast(bf16) of an add of float32 casts */
  cr_assert_eq(s->op, IR_CAST);
  cr_assert_eq(s->dtype, BF16);
  const ir_expr *add = s->args[0];
  cr_assert_eq(add->op, IR_ADD);
  cr_assert_eq(add->dtype, F32);
  cr_assert_eq(add->args[0]->op, IR_CAST);
  cr_assert_eq(add->args[0]->dtype, F32);
  cr_assert_eq(add->args[0]->args[0], x);
  /* a comparison: bool of float32 operands */
  ir_expr *lt = ir_op2(&ib_ir, IR_LT, BF16, x, ir_const_f(&ib_ir, 0.5, BF16));
  cr_assert_eq(lt->dtype, GC_DTYPE_BOOL);
  cr_assert_eq(lt->args[0]->dtype, F32);
  cr_assert_eq(lt->args[1]->dtype, F32);
  /* a select of half values stays one; its operands take its dtype */
  ir_expr *w =
      ir_op3(&ib_ir, IR_WHERE, BF16, lt, x, ir_const_f(&ib_ir, 2, F32));
  cr_assert_eq(w->op, IR_WHERE);
  cr_assert_eq(w->args[1], x);
  cr_assert_eq(w->args[2]->dtype, BF16);
  /* float32 operations on half operands read them as float32 */
  ir_expr *m = ir_op2(&ib_ir, IR_MUL, F32, x, load(GC_DTYPE_FLOAT16));
  cr_assert_eq(m->op, IR_MUL);
  cr_assert_eq(m->args[0]->op, IR_CAST);
  cr_assert_eq(m->args[1]->op, IR_CAST);
  /* an index of a half dtype is the rounded integer */
  gc_sym *i = gc_sym_newvar(&ib_ir.sym, "i", 0, 1000);
  ir_expr *ix = ir_index(&ib_ir, i, BF16);
  cr_assert_eq(ix->op, IR_CAST);
  cr_assert_eq(ix->args[0]->dtype, GC_DTYPE_INT64);
}

Test(ir_half, a_half_value_made_float_and_back_is_itself) {
  ir_expr *x = load(BF16), *f = load(F32);
  cr_assert_eq(ir_cast(&ib_ir, ir_cast(&ib_ir, x, F32), BF16), x);
  cr_assert_eq(ir_cast(&ib_ir, ir_cast(&ib_ir, x, GC_DTYPE_FLOAT64), BF16), x);
  /* a float32 rounded to bfloat16 and back is not the float32 */
  ir_expr *r = ir_cast(&ib_ir, ir_cast(&ib_ir, f, BF16), F32);
  cr_assert_neq(r, f);
  cr_assert_eq(r->args[0]->op, IR_CAST);
  /* bfloat16 to float16 goes through float32 rounding: not folded */
  ir_expr *h = ir_cast(&ib_ir, ir_cast(&ib_ir, x, F16), BF16);
  cr_assert_neq(h, x);
}

/* ---- the generated code's conversions ---- */

/* The float32 values checked: every boundary between two consecutive
 * finite half values of each dtype (their midpoint) and one float32 ulp
 * either side, every half value itself, infinities, NaN, and every 4099th
 * float32 bit pattern. */
static float *sample(size_t *n) {
  size_t cap = 2 * 65536 * 4 + (1u << 20) + 16, k = 0;
  float *v = malloc(cap * sizeof *v);
  cr_assert_not_null(v);
  for (int i = 0; i < 2; i++)
    for (unsigned h = 1; h < 65535; h++) {
      if (h == 0x8000)
        continue; /* -0.0 after the largest positive value */
      double x = ir_half_value((uint16_t)h, HALVES[i]);
      double y = ir_half_value((uint16_t)(h + 1), HALVES[i]);
      if (isnan(x) || isinf(x) || isnan(y))
        continue;
      /* past the largest finite value: the boundary to infinity */
      if (isinf(y))
        y = x + (x - ir_half_value((uint16_t)(h - 1), HALVES[i]));
      float mid = (float)((x + y) / 2); /* exact in float32 */
      v[k++] = (float)x;
      v[k++] = mid;
      v[k++] = nextafterf(mid, INFINITY);
      v[k++] = nextafterf(mid, -INFINITY);
    }
  for (uint64_t u = 0; u < (1ull << 32) && k < cap; u += 4099) {
    uint32_t w = (uint32_t)u;
    memcpy(&v[k++], &w, sizeof w);
  }
  *n = k;
  return v;
}

Test(ir_half, generated_conversions_agree_with_the_compilers) {
  char dir[] = "/tmp/test_ir_half.XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char src[256], bin[256], in[256], out[256], cmd[1536];
  snprintf(src, sizeof src, "%s/conv.c", dir);
  snprintf(bin, sizeof bin, "%s/conv", dir);
  snprintf(in, sizeof in, "%s/in", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  /* the prelude, and loops gcc vectorizes over its conversions */
  FILE *f = fopen(src, "w");
  cr_assert_not_null(f);
  fputs(cx_prelude(), f);
  fputs("#include <stdio.h>\n#include <stdlib.h>\n"
        "int main(int argc, char **argv) {\n"
        "  FILE *i = fopen(argv[1], \"rb\"), *o = fopen(argv[2], \"wb\");\n"
        "  long n; if (fread(&n, sizeof n, 1, i) != 1) return 1;\n"
        "  float *x = malloc(n * 4); uint16_t *b = malloc(n * 2),\n"
        "    *h = malloc(n * 2);\n"
        "  float *fb = malloc(65536 * 4), *fh = malloc(65536 * 4);\n"
        "  if (fread(x, 4, n, i) != (size_t)n) return 1;\n"
        "  #pragma omp simd\n"
        "  for (long k = 0; k < n; k++) b[k] = gc_f32_bf16(x[k]);\n"
        "  #pragma omp simd\n"
        "  for (long k = 0; k < n; k++) h[k] = gc_f32_f16(x[k]);\n"
        "  #pragma omp simd\n"
        "  for (long k = 0; k < 65536; k++) fb[k] = gc_bf16_f32(k);\n"
        "  #pragma omp simd\n"
        "  for (long k = 0; k < 65536; k++) fh[k] = gc_f16_f32(k);\n"
        "  fwrite(b, 2, n, o); fwrite(h, 2, n, o);\n"
        "  fwrite(fb, 4, 65536, o); fwrite(fh, 4, 65536, o);\n"
        "  return fclose(o) != 0;\n"
        "}\n",
        f);
  cr_assert_eq(fclose(f), 0);
  const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  snprintf(cmd, sizeof cmd,
           "%s -O3 -march=native -std=gnu11 -fopenmp -fno-math-errno "
           "-fno-trapping-math -fwrapv -w -o %s %s -lm",
           cc, bin, src);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  size_t n;
  float *x = sample(&n);
  f = fopen(in, "wb");
  long ln = (long)n;
  cr_assert_eq(fwrite(&ln, sizeof ln, 1, f), 1);
  cr_assert_eq(fwrite(x, sizeof *x, n, f), n);
  cr_assert_eq(fclose(f), 0);
  snprintf(cmd, sizeof cmd, "%s %s %s", bin, in, out);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  uint16_t *b = malloc(n * 2), *h = malloc(n * 2);
  float *fb = malloc(65536 * 4), *fh = malloc(65536 * 4);
  f = fopen(out, "rb");
  cr_assert_not_null(f);
  cr_assert_eq(fread(b, 2, n, f), n);
  cr_assert_eq(fread(h, 2, n, f), n);
  cr_assert_eq(fread(fb, 4, 65536, f), 65536);
  cr_assert_eq(fread(fh, 4, 65536, f), 65536);
  fclose(f);
  for (size_t k = 0; k < n; k++) {
    cr_assert_eq(b[k], ir_half_bits(x[k], BF16), "bf16 of %a: %04x, want %04x",
                 (double)x[k], b[k], ir_half_bits(x[k], BF16));
    cr_assert_eq(h[k], ir_half_bits(x[k], F16), "f16 of %a: %04x, want %04x",
                 (double)x[k], h[k], ir_half_bits(x[k], F16));
  }
  for (unsigned k = 0; k < 65536; k++) {
    double wb = ir_half_value((uint16_t)k, BF16);
    double wh = ir_half_value((uint16_t)k, F16);
    cr_assert(isnan(wb)
                  ? isnan(fb[k])
                  : (double)fb[k] == wb && !signbit(fb[k]) == !signbit(wb),
              "bf16 %04x", k);
    cr_assert(isnan(wh)
                  ? isnan(fh[k])
                  : (double)fh[k] == wh && !signbit(fh[k]) == !signbit(wh),
              "f16 %04x", k);
  }
  free(x);
  free(b);
  free(h);
  free(fb);
  free(fh);
  unlink(src);
  unlink(bin);
  unlink(in);
  unlink(out);
  rmdir(dir);
}
