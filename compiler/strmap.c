/*
 * strmap.c: open-addressing string map in an arena. See strmap.h.
 */
#include "compiler/strmap.h"

#include <stdint.h>
#include <string.h>

#include "compiler/error.h"

static uint64_t hash_str(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 0x100000001b3ull;
  }
  return h;
}

int gc_strmap_init(gc_strmap *m, gc_arena *a, size_t hint) {
  size_t cap = 16;
  while (cap < hint * 2 && cap < ((size_t)1 << 40))
    cap <<= 1;
  m->arena = a;
  m->count = 0;
  m->cap = cap;
  m->slots = gc_arena_calloc(a, cap, sizeof *m->slots);
  return m->slots ? 0 : GC_ENOMEM;
}

static gc_strmap_slot *find_slot(const gc_strmap *m, const char *key) {
  size_t mask = m->cap - 1;
  size_t i = (size_t)hash_str(key) & mask;
  while (m->slots[i].key && strcmp(m->slots[i].key, key) != 0)
    i = (i + 1) & mask;
  return &m->slots[i];
}

static int grow(gc_strmap *m) {
  gc_strmap bigger = {.arena = m->arena, .cap = m->cap * 2};
  bigger.slots = gc_arena_calloc(m->arena, bigger.cap, sizeof *bigger.slots);
  if (!bigger.slots)
    return GC_ENOMEM;
  for (size_t i = 0; i < m->cap; i++) {
    if (m->slots[i].key) {
      *find_slot(&bigger, m->slots[i].key) = m->slots[i];
      bigger.count++;
    }
  }
  *m = bigger;
  return 0;
}

int gc_strmap_put(gc_strmap *m, const char *key, void *value, void **existing) {
  if ((m->count + 1) * 2 > m->cap && grow(m) != 0)
    return GC_ENOMEM;
  gc_strmap_slot *s = find_slot(m, key);
  if (s->key) {
    if (existing)
      *existing = s->value;
    return 1;
  }
  s->key = key;
  s->value = value;
  m->count++;
  return 0;
}

void *gc_strmap_get(const gc_strmap *m, const char *key) {
  if (!m->slots)
    return NULL;
  gc_strmap_slot *s = find_slot(m, key);
  return s->key ? s->value : NULL;
}
