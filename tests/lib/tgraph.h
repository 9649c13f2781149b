/*
 * tgraph.h: build small GraphModule messages from a few lines of text, so a
 * test can state the graph it needs:
 *
 *   x: f32[4, 4]                       a user input (dtype[sizes], contiguous)
 *   w: f32[4, 4] param                 a parameter (also: buffer, const, grad)
 *   v: f32[4, 4] strides [1, 4] offset 2 group 0
 *   s: f32[s0, 4]                      symbolic sizes: an expression, with
 *   t: f32[2*s1=6, s0] strides [s0, 1] an optional hint after '='
 *                                      (contiguous strides are made as
 *                                      expressions: [s0, 4] has [4, 1])
 *   mm = aten::mm(x, w): f32[4, 4]     a node: positional or name=value args
 *   a, b = aten::max.dim(mm, 1): f32[4]; i64[4]     (one metadata per output,
 *                                      or one for all)
 *   [p, q] = aten::split.Tensor(x, 2): f32[2, 4]   a Tensor[] return
 *   y = aten::add.Tensor(mm, x, alpha=2): f32[4, 4]
 *   return y, mm
 *
 * Literals: 1 (int), 1.5 or 1e-5 (float), True/False, None, "text",
 * [1, 2] (ints), [a, b] (tensors), [a, None] (optional tensors),
 * float32 (a dtype, written dtype:float32), device:cpu.
 * Outputs get the metadata after ':' (the validator does not infer
 * shapes, so tests need not be exact). Operator schemas come from
 * compiler/data/torch-2.13-schemas.txt; `op NAME SCHEMA` lines add others.
 * "group N" puts inputs into storage group N.
 */
#ifndef TGRAPH_H
#define TGRAPH_H

#include "compiler/arena.h"
#include "compiled/v1/graph.pb-c.h"

/* Builds the message in the arena. Returns NULL with a message in err when
 * the text cannot be understood (a test bug, not a graph error). */
Compiled__V1__GraphModule *tg_build(gc_arena *a, const char *spec, char *err,
                                    size_t errlen);

/* tg_build, packed to bytes in the arena; aborts on a spec error. */
uint8_t *tg_bytes(gc_arena *a, const char *spec, size_t *len);

#endif
