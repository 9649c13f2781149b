/*
 * print.h: the graph as readable text, for `compilectl graph fmt`, messages
 * and IR dumps between passes.
 *
 *   input 0 %x: float32[4, 8] (user)
 *   input 1 %w: float32[8, 8] (parameter fc.weight)
 *   %mm: float32[4, 8] = aten::mm(self=%x, mat2=%w)
 *   return (%mm)
 *
 * Strides are shown only when they differ from the contiguous ones, the
 * storage offset only when non-zero.
 */
#ifndef GC_PRINT_H
#define GC_PRINT_H

#include "compiler/buf.h"
#include "compiler/graph.h"

/* Appends the listing of `g` to `out`. */
void gc_graph_print(const gc_graph *g, gc_buf *out);

/* Appends one argument ("%x", "[1, 2]", "float32", "None", ...). */
void gc_arg_print(const gc_arg *a, gc_buf *out);

/* Appends tensor metadata ("float32[4, 8]", strides and flags as needed). */
void gc_meta_print(const gc_tensor_meta *t, gc_buf *out);

#endif
