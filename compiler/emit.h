/*
 * emit.h: builds the program of an artifact (artifact.proto) from a graph.
 */
#ifndef GC_EMIT_H
#define GC_EMIT_H

#include "compiled/v1/artifact.pb-c.h"
#include "compiler/graph.h"

/* Emits the version-0 program of `g`: one fallback KernelCall per node, in
 * the given node order (the canonical order, see key.h). The message lives
 * in the arena. Returns 0 or a GC_E* code. */
int gc_emit_program(const gc_graph *g, const int *order, gc_arena *a,
                    Compiled__V1__Program **out, gc_error *err);

#endif
