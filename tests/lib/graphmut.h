/*
 * graphmut.h: random transformations of GraphModule messages, for the key's
 * property tests.
 *
 * Messages are unpacked into an arena and every change allocates from it,
 * so nothing is freed piecemeal. Two families:
 *   - invariant: must leave the cache key unchanged (renaming every value,
 *     reordering independent nodes, shuffling side tables, changing node
 *     metadata, spelling out omitted defaults);
 *   - semantic: must change the key (an operator, a literal, a size, a
 *     stride, a dtype, the aliasing pattern, ...).
 */
#ifndef GRAPHMUT_H
#define GRAPHMUT_H

#include "compiler/arena.h"
#include "compiled/v1/graph.pb-c.h"
#include "tests/lib/testutil.h"

typedef Compiled__V1__GraphModule gm_module;

/* Unpacks into the arena; NULL when the bytes are not a GraphModule. */
gm_module *gm_unpack(gc_arena *a, const uint8_t *buf, size_t len);

/* Packs into the arena; *len gets the size. */
uint8_t *gm_pack(gc_arena *a, const gm_module *m, size_t *len);

/* A deep copy (by packing and unpacking) into the arena. */
gm_module *gm_clone(gc_arena *a, const gm_module *m);

/* ---- invariant transformations ---- */
void gm_rename(gc_arena *a, gm_module *m, tu_rng *r);
void gm_reorder(gc_arena *a, gm_module *m, tu_rng *r);
void gm_shuffle_tables(gm_module *m, tu_rng *r);
void gm_touch_metadata(gc_arena *a, gm_module *m, tu_rng *r);
/* Adds, as keyword arguments, omitted parameters whose default is a plain
 * literal (as the schema states it). Returns how many were added. */
int gm_spell_defaults(gc_arena *a, gm_module *m, tu_rng *r);

/* ---- semantic edits ---- */
#define GM_NEDITS 14

/* Applies edit `which` (0 .. GM_NEDITS-1) at a random applicable place.
 * Returns a description of what changed, or NULL when the graph has no place
 * for this edit. */
const char *gm_edit(gc_arena *a, gm_module *m, tu_rng *r, int which);

#endif
