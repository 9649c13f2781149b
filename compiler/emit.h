/*
 * emit.h: builds the program of an artifact (artifact.proto) from a graph.
 */
#ifndef GC_EMIT_H
#define GC_EMIT_H

#include "compiled/v1/artifact.pb-c.h"
#include "compiler/functionalize.h"
#include "compiler/graph.h"

/* Emits the program of a functionalized graph: one fallback KernelCall per
 * node of f->graph in f->order, its outputs, and the input and output
 * metadata of the analysis. The message lives in the arena. Returns 0 or a
 * GC_E* code. */
int gc_emit_program(const gc_functional *f, gc_arena *a,
                    Compiled__V1__Program **out, gc_error *err);

/* A Value message (in the arena) for a literal argument: none, numbers,
 * strings, their lists, dtypes, layouts, memory formats, devices. NULL with
 * err set for anything else (tensors, named symbols). */
Compiled__V1__Value *gc_literal_value(gc_arena *a, const gc_arg *arg,
                                      gc_error *err);

#endif
