/*
 * dump.h: the compiler's state as readable text, after any pass: the
 * printers of `compilectl graph fmt|PASS`, --dump-after, the golden dump
 * tests (tests/data/golden/) and the explorer. One file (dump.c) holds them
 * all; the loop IR's printer is ir_print (compiler/ir/print.c).
 *
 * A graph prints as
 *
 *   input 0 %x: float32[4, 8] (user)
 *   input 1 %w: float32[8, 8] (parameter fc.weight)
 *   %mm: float32[4, 8] = aten::mm(self=%x, mat2=%w)
 *   return (%mm)
 *
 * Strides are shown only when they differ from the contiguous ones, the
 * storage offset only when non-zero.
 */
#ifndef GC_DUMP_H
#define GC_DUMP_H

#include "compiled/v1/artifact.pb-c.h"
#include "compiler/arena.h"
#include "compiler/buf.h"
#include "compiler/functionalize.h"
#include "compiler/graph.h"
#include "compiler/sched/sched.h"

/* Appends the listing of `g` to `out`. */
void gc_graph_print(const gc_graph *g, gc_buf *out);

/* Appends one argument ("%x", "[1, 2]", "float32", "None", ...). */
void gc_arg_print(const gc_arg *a, gc_buf *out);

/* Appends tensor metadata ("float32[4, 8]", strides and flags as needed). */
void gc_meta_print(const gc_tensor_meta *t, gc_buf *out);

/* Appends the program functionalization made: whether it is functional,
 * its graph, then the input mutations and output aliasing. */
void gc_functional_print(const gc_functional *f, gc_buf *out);

/* Values with their placements, instructions and outputs of `p`, one per
 * line, in the arena; NULL when out of memory. */
char *gc_native_program_str(gc_arena *a, const Compiled__V1__NativeProgram *p);

/* The kernels of schedule `s` (and its memory plan once planned) as text
 * in ir's arena. */
char *sc_print(ir_graph *ir, const sc_schedule *s);

#endif
