/*
 * cgen.h: C code generation from a schedule, and the calling convention of
 * the generated code.
 *
 * One translation unit per graph. Each loop kernel becomes a static C
 * function taking one restrict-qualified pointer per buffer it touches;
 * runs of consecutive loop kernels (between the extern and fallback calls
 * the client makes) become exported segment functions:
 *
 *     int gc_seg<N>(void **p);
 *
 * p is the pointer table: p[0] is the base of the call's arena (64-byte
 * aligned, memory_plan.arena_bytes long) and p[i] for i >= 1 the data
 * pointer (element 0, storage offset included) of the buffer the native
 * program's slot i names: an input, an output allocated by the runtime, or
 * a tensor an ATen call returned. A segment returns 0, or a positive error
 * code (GC_SEG_EINDEX: an index out of range, as eager's IndexError;
 * GC_SEG_ELIBRARY: a library call failed, out of memory for its scratch); it
 * never reads or writes outside the buffers, whatever the data.
 * `int gc_abi(void)` returns GC_ABI_VERSION.
 *
 * Generated C is meant to be read: kernels are named after what they
 * compute (k3_native_layer_norm_gelu), each starts with a comment listing
 * the graph nodes it fuses and its loops, index variables are named after
 * loop levels, and values are single-assignment temporaries. It never
 * contains a string from the client outside of comments, and those are
 * escaped.
 */
#ifndef GC_CODEGEN_CGEN_H
#define GC_CODEGEN_CGEN_H

#include "compiler/key.h"
#include "compiler/sched/sched.h"

#define GC_ABI_VERSION 1
/* A program with size symbols (docs/dynamic-shapes.md) speaks ABI 2: its
 * segments take the symbols' values too,
 *     int gc_seg<N>(void **p, const int64_t *s);
 * s[i] is symbol s<i> for the call. A runner of ABI 1 refuses it. */
#define GC_ABI_SYMBOLIC 2
#define GC_SEG_EINDEX 1
#define GC_SEG_ELIBRARY 2

typedef struct gc_csource {
  char *text; /* the C source, in the arena */
  size_t len;
  int nsegments;         /* gc_seg0 .. gc_seg<n-1> */
  int *kernel_segment;   /* per kernel: its segment; -1 for call kernels */
  ir_buf **slots;        /* slots[i], i >= 1: the buffer of pointer i */
  int nslots;            /* including slot 0 (the arena) */
  int *buf_slot;         /* per buffer id: its slot, 0 when none */
  int nkernels;          /* loop kernels generated */
  bool uses_vector_math; /* needs vector math (libmvec, libsleefgnuabi) */
  bool uses_sleef;       /* needs SLEEF's own API (libsleef) */
  bool uses_blas;        /* calls the system BLAS (libblas: sgemm_, dgemm_) */
  bool uses_dnnl;        /* calls oneDNN (libdnnl.so.2: dnnl_sgemm) */
} gc_csource;

/* Generates the C source for schedule `s` of `ir`. key_hex (may be NULL)
 * and the build id go into the header comment; nothing time- or
 * path-dependent does, so the same key gives the same source. */
int gc_codegen(ir_graph *ir, const sc_schedule *s, const char *key_hex,
               gc_csource *out, gc_error *err);

/* Writes `text` into a C comment safely: printable ASCII only, no comment
 * terminator, bounded length. Returns the arena copy. */
char *gc_c_comment_text(gc_arena *a, const char *text, size_t max);

#endif
