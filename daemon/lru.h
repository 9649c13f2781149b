/*
 * lru.h: a bounded, thread-safe map from 32-byte digests to values, evicting
 * the least recently used entries past a byte budget.
 *
 * The daemon keeps two: the request memo (request digest -> cache key) and
 * the hot tier (cache key -> a prebuilt hit response). Values are opaque;
 * the map calls `release` when it drops one (eviction, replacement, clear).
 * lru_get copies the value out under the lock through a caller's function,
 * so a value may be evicted the moment the lock is released without harm.
 */
#ifndef DAEMON_LRU_H
#define DAEMON_LRU_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LRU_KEY_LEN 32

typedef struct lru_node lru_node;

typedef struct lru {
  pthread_mutex_t mu;
  lru_node **buckets;
  size_t nbuckets; /* a power of two */
  lru_node *head;  /* most recently used */
  lru_node *tail;  /* least recently used */
  size_t bytes;    /* sum of the entries' charged sizes */
  size_t budget;   /* evict past this; 0 disables the map */
  size_t count;
  void (*release)(void *value);
  uint64_t hits, misses, evictions;
} lru;

/* Prepares a map charging at most `budget` bytes (0: always empty). */
int lru_init(lru *m, size_t budget, void (*release)(void *value));
void lru_destroy(lru *m);

/* Inserts or replaces. `charge` is the bytes the entry costs. An entry
 * larger than the budget is released at once and not kept. */
void lru_put(lru *m, const uint8_t key[LRU_KEY_LEN], void *value,
             size_t charge);

/* On a hit calls copy(value, out) under the lock and returns true. */
bool lru_get(lru *m, const uint8_t key[LRU_KEY_LEN],
             void (*copy)(const void *value, void *out), void *out);

/* Drops one entry, or all of them (key NULL). */
void lru_remove(lru *m, const uint8_t *key);

#endif
