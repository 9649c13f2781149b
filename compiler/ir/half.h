/*
 * half.h: the 16-bit floating dtypes, float16 and bfloat16, as the compiler
 * handles them.
 *
 * Generated code keeps a value of either dtype as its bits (a uint16_t) and
 * computes in float32, as Inductor's CPU backend and ATen's kernels do: an
 * operation on half values reads them as float32 (exact), computes, and
 * rounds its result to the dtype (to nearest even, as c10 rounds). The loop
 * IR says so by construction (expr.c, make_op): an operation whose dtype or
 * operands are half is built as the float32 operation between casts, so the
 * only operations on half values themselves are loads, stores, constants,
 * casts and selects (where). docs/native-math.md, "Half precision".
 *
 * These are the compiler's own conversions, for constants: a constant of a
 * half dtype holds the value rounded as c10 rounds a number into it (to
 * float32 first, then to nearest even). Generated code has its own,
 * vectorizable ones (codegen/cexpr.c's prelude); both are exact.
 */
#ifndef GC_IR_HALF_H
#define GC_IR_HALF_H

#include <stdbool.h>
#include <stdint.h>

#include "compiler/graph.h"

/* Is d float16 or bfloat16? */
bool ir_dtype_half(gc_dtype d);

/* v converted to half dtype d, as its bits: through float32, then rounded
 * to nearest even; NaN becomes the NaN eager's conversions make (bfloat16:
 * 0xffff, float16: quiet, sign and leading payload kept). */
uint16_t ir_half_bits(double v, gc_dtype d);

/* The value of half bits h of dtype d. */
double ir_half_value(uint16_t h, gc_dtype d);

/* v rounded to half dtype d (ir_half_value of ir_half_bits). */
double ir_half_round(double v, gc_dtype d);

#endif
