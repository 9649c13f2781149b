/*
 * torchops.h: the operators torch 2.13 ships, by name.
 *
 * Graphs bring the schemas of the operators they use. Two things need
 * torch's own: validation, which refuses a graph whose client claims torch
 * 2.13 and sends a schema that is not 2.13's (a lie about what an operator
 * writes or aliases would otherwise be trusted, and cached); and passes that
 * introduce operators of their own (functionalization's scatter inverses,
 * the functional variants of in-place and out= operators, view replays,
 * the .out overloads of extern calls). The table is torch 2.13's schema
 * dump (every operator registered once `import torch` is done), compiled
 * into the library from compiler/data/torch-2.13-schemas.txt, made by
 * compiler/data/dump_schemas.py. Clients of other releases (1.13 among
 * them) send schemas the daemon cannot check; they are trusted and enter
 * the key.
 */
#ifndef GC_TORCHOPS_H
#define GC_TORCHOPS_H

#include <stdbool.h>
#include <stddef.h>

/* The torch release whose table this is, for messages ("2.13"). */
#define GC_TORCH_TABLE_VERSION "2.13"

/* True when a client's torch.__version__ is of the table's release (2.13.x:
 * "2.13.0", "2.13.0+cpu", "2.13.1+cu128", "2.13.0a0+git..."): its operators'
 * schemas are then the table's, and a graph must send them unchanged. Other
 * versions (and an empty one) bring schemas the daemon cannot check. */
bool gc_torch_table_covers(const char *torch_version);

/* The schema string of operator `qualified` ("aten::slice_scatter",
 * "aten::add.Tensor"), or NULL when torch 2.13 has no such operator.
 * A binary search: the table is sorted by byte value, which sorts it by
 * qualified name too (see torchops.c). */
const char *gc_torch_schema(const char *qualified);

/* Calls fn(schema, ctx) for every operator named `name` ("aten::sum"),
 * whatever its overload; stops when fn returns non-zero and returns that. */
int gc_torch_overloads(const char *name,
                       int (*fn)(const char *schema, void *ctx), void *ctx);

#endif
