/*
 * touch.c: hits that are counted in memory and written later.
 *
 * A hit must not cost a write transaction (that would serialise every reader
 * behind the write lock and fsync the WAL at checkpoints). So cache_get only
 * records the hit in a table of the store, under a mutex, and a flush writes
 * the whole table in one transaction: hits += n, last_used = latest, and the
 * entry's GDSF priority recomputed with the current clock (a hit renews an
 * entry: priority = clock + compile_us * (1 + hits) / stored_bytes).
 *
 * The flush takes the table out under the mutex and writes it without
 * holding the mutex, so hits keep flowing while it writes; if the write
 * fails, the taken touches are merged back and retried at the next flush.
 * A touch of an entry that was evicted meanwhile updates nothing.
 *
 * The table is open addressing with linear probing on the first 8 bytes of
 * the key (keys are digests, so they are uniformly distributed already).
 */
#include "cache/internal.h"

#include <stdlib.h>
#include <string.h>

static size_t slot_of(const cache__touches *t, const uint8_t *key) {
  uint64_t h;
  memcpy(&h, key, sizeof h);
  size_t mask = t->cap - 1;
  size_t i = (size_t)h & mask;
  while (t->slots[i].used && memcmp(t->slots[i].key, key, CACHE_KEY_LEN) != 0)
    i = (i + 1) & mask;
  return i;
}

/* Adds `hits` at `last_ms` to key's slot, growing when half full. */
static int touches_add(cache__touches *t, const uint8_t *key, uint64_t hits,
                       int64_t last_ms) {
  if ((t->count + 1) * 2 > t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    cache__touches bigger = {.slots = calloc(cap, sizeof(cache__touch)),
                             .cap = cap};
    if (!bigger.slots)
      return CACHE_ENOMEM;
    for (size_t i = 0; i < t->cap; i++) {
      if (t->slots[i].used) {
        bigger.slots[slot_of(&bigger, t->slots[i].key)] = t->slots[i];
        bigger.count++;
      }
    }
    free(t->slots);
    *t = bigger;
  }
  cache__touch *s = &t->slots[slot_of(t, key)];
  if (!s->used) {
    memcpy(s->key, key, CACHE_KEY_LEN);
    s->used = true;
    s->hits = 0;
    s->last_ms = last_ms;
    t->count++;
  }
  s->hits += hits;
  if (last_ms > s->last_ms)
    s->last_ms = last_ms;
  return 0;
}

int cache__touch_add(cache_store *s, const uint8_t key[CACHE_KEY_LEN],
                     int64_t now_ms) {
  pthread_mutex_lock(&s->touch_mu);
  int rc = touches_add(&s->touches, key, 1, now_ms);
  pthread_mutex_unlock(&s->touch_mu);
  return rc;
}

int cache_touch(cache_store *s, const uint8_t key[CACHE_KEY_LEN]) {
  if (!s || !key)
    return CACHE_EINVAL;
  return cache__touch_add(s, key, cache__now_ms());
}

void cache__touch_overlay(cache_store *s, cache_info *info) {
  pthread_mutex_lock(&s->touch_mu);
  if (s->touches.count > 0) {
    cache__touch *t = &s->touches.slots[slot_of(&s->touches, info->key)];
    if (t->used) {
      info->hits += t->hits;
      if (t->last_ms / 1000 > info->last_used)
        info->last_used = t->last_ms / 1000;
    }
  }
  pthread_mutex_unlock(&s->touch_mu);
}

/* Puts touches that could not be written back into the store's table. */
static void merge_back(cache_store *s, cache__touches *taken) {
  pthread_mutex_lock(&s->touch_mu);
  for (size_t i = 0; i < taken->cap; i++) {
    cache__touch *t = &taken->slots[i];
    /* Out of memory here loses these touches: only counters, never data. */
    if (t->used)
      touches_add(&s->touches, t->key, t->hits, t->last_ms);
  }
  pthread_mutex_unlock(&s->touch_mu);
}

static int write_touches(cache_conn *c, const cache__touches *taken,
                         cache_error *err) {
  int rc = cache__begin_write(c, err);
  if (rc != 0)
    return rc;
  for (size_t i = 0; i < taken->cap && rc == 0; i++) {
    const cache__touch *t = &taken->slots[i];
    if (!t->used)
      continue;
    sqlite3_stmt *st = cache__stmt(c, CACHE__STMT_TOUCH, err);
    if (!st) {
      rc = err ? err->code : CACHE_EIO;
      break;
    }
    sqlite3_bind_blob(st, 1, t->key, CACHE_KEY_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)t->hits);
    sqlite3_bind_int64(st, 3, t->last_ms);
    rc = cache__step_done(c, st, "writing hits", err);
  }
  if (rc != 0) {
    cache__rollback(c);
    return rc;
  }
  return cache__commit_write(c, err);
}

int cache__touch_flush(cache_conn *c, cache_error *err) {
  cache_store *s = c->store;
  pthread_mutex_lock(&s->touch_mu);
  cache__touches taken = s->touches;
  s->touches = (cache__touches){0};
  pthread_mutex_unlock(&s->touch_mu);
  if (taken.count == 0) {
    cache__touches_free(&taken);
    return 0;
  }
  int rc = write_touches(c, &taken, err);
  if (rc != 0)
    merge_back(s, &taken);
  cache__touches_free(&taken);
  return rc;
}

void cache__touches_free(cache__touches *t) {
  free(t->slots);
  *t = (cache__touches){0};
}

int cache_flush_touches(cache_conn *c, cache_error *err) {
  if (!c)
    return cache__errorf(err, CACHE_EINVAL, "cache_flush_touches: NULL");
  return cache__touch_flush(c, err);
}
