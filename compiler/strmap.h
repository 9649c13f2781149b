/*
 * strmap.h: a string-keyed hash map that lives in an arena.
 *
 * Open addressing with linear probing, FNV-1a hashing, grown by doubling.
 * Keys are not copied: they must outlive the map (they usually live in the
 * same arena or in the message being decoded). Values are void pointers.
 */
#ifndef GC_STRMAP_H
#define GC_STRMAP_H

#include <stdbool.h>
#include <stddef.h>

#include "compiler/arena.h"

typedef struct gc_strmap_slot {
  const char *key; /* NULL: empty slot */
  void *value;
} gc_strmap_slot;

typedef struct gc_strmap {
  gc_arena *arena;
  gc_strmap_slot *slots;
  size_t cap;   /* a power of two */
  size_t count; /* occupied slots */
} gc_strmap;

/* Prepares an empty map expecting about `hint` keys. Returns 0 or GC_ENOMEM. */
int gc_strmap_init(gc_strmap *m, gc_arena *a, size_t hint);

/* Inserts key -> value. Returns 0, 1 when the key is already present (the
 * map is unchanged and *existing, when not NULL, gets the old value), or
 * GC_ENOMEM. */
int gc_strmap_put(gc_strmap *m, const char *key, void *value, void **existing);

/* The value of `key`, or NULL when absent. */
void *gc_strmap_get(const gc_strmap *m, const char *key);

#endif
