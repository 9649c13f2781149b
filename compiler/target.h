/*
 * target.h: what the host is and what builds code for it.
 *
 * The target enters the cache key (key.h): code built for one ISA or by one
 * toolchain is never served to another. The daemon detects its own once at
 * start; `compilectl graph hash` does the same to print the key a daemon on
 * this machine would compute. Both fill in the toolchain's identity
 * themselves (common/spawn.h's spawn_first_line of `cc --version`): the
 * compiler library runs no process.
 */
#ifndef GC_TARGET_H
#define GC_TARGET_H

#include "compiler/arena.h"
#include "compiler/error.h"
#include "compiler/key.h"

/* The flags generated C is compiled with (part of the target, so of the
 * key), besides -march (from the target's ISA features, gc_target_march)
 * and the libraries: optimized and vectorized, OpenMP for the outer loops,
 * errno-free math (so math calls vectorize), floating-point operations
 * that do not trap (so gcc may compute both sides of a select and
 * if-convert loops full of them; values are unchanged, only FP exception
 * flags, which nothing reads, may differ), wrapping signed integer
 * arithmetic (what PyTorch's integer tensors do in practice). */
#define GC_DEFAULT_CFLAGS                                                      \
  "-O3 -std=gnu11 -fPIC -shared -fopenmp -fno-math-errno -fno-trapping-math "  \
  "-fwrapv -fno-plt "                                                          \
  "-w"

/* The libraries generated code links, in the order symbols resolve: glibc's
 * libmvec, then SLEEF's GNU-vector-ABI math (for what libmvec lacks: lgamma,
 * fmod), SLEEF's own API (exp, log, log1p: see cx_sleef_wrappers), then libm
 * (OpenMP's comes with -fopenmp). libmvec first because it is 2-4x faster
 * for erf, tanh, sin, cos, expm1, sinh, cosh, atan at up to 4 ulp, against
 * SLEEF's 1 ulp: docs/native-math.md has the measurements. */
#define GC_CODEGEN_LIBS "-lmvec -lsleefgnuabi -lsleef -lm"

/* Is `feat` one of the target's features (t->isa, comma-separated)? Besides
 * the ISA's, a client reports "blas" when its process has the system BLAS
 * (libblas.so.3) loaded: generated code may then call it (codegen/blas.c, "BLAS
 * calls in segments"). */
bool gc_target_has(const gc_target *t, const char *feat);

/* The -march value for the target's architecture and ISA features:
 * "x86-64-v4" (AVX-512), "x86-64-v3" (AVX2, FMA, BMI2), "x86-64-v2"
 * (SSE4.2), "x86-64", "armv8-a"; NULL when the architecture is unknown. */
const char *gc_target_march(const gc_target *t);

/* Fills arch and isa with the host's (arena strings), cflags with
 * GC_DEFAULT_CFLAGS, and leaves toolchain and torch_version NULL.
 * Returns 0 or GC_ENOMEM. */
int gc_target_host(gc_arena *a, gc_target *t);

#endif
