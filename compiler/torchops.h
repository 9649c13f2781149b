/*
 * torchops.h: the operators torch 1.13 ships, by name.
 *
 * Graphs bring the schemas of the operators they use. Passes that introduce
 * operators of their own (functionalization's scatter inverses, the
 * functional variants of in-place and out= operators, view replays) look
 * them up here: torch 1.13's schema dump, compiled into the library from
 * compiler/data/torch-1.13-schemas.txt.
 */
#ifndef GC_TORCHOPS_H
#define GC_TORCHOPS_H

#include <stddef.h>

/* The schema string of operator `qualified` ("aten::slice_scatter",
 * "aten::add.Tensor"), or NULL when torch 1.13 has no such operator. */
const char *gc_torch_schema(const char *qualified);

/* Calls fn(schema, ctx) for every operator named `name` ("aten::sum"),
 * whatever its overload; stops when fn returns non-zero and returns that. */
int gc_torch_overloads(const char *name,
                       int (*fn)(const char *schema, void *ctx), void *ctx);

#endif
