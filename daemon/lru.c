/*
 * lru.c: hash table with chaining plus an intrusive doubly-linked recency
 * list, under one mutex. See lru.h.
 */
#include "daemon/lru.h"

#include <stdlib.h>
#include <string.h>

struct lru_node {
  uint8_t key[LRU_KEY_LEN];
  void *value;
  size_t charge;
  lru_node *chain;       /* next in the bucket */
  lru_node *prev, *next; /* recency list */
};

int lru_init(lru *m, size_t budget, void (*release)(void *value)) {
  memset(m, 0, sizeof *m);
  m->budget = budget;
  m->release = release;
  m->nbuckets = 1024;
  m->buckets = calloc(m->nbuckets, sizeof *m->buckets);
  pthread_mutex_init(&m->mu, NULL);
  return m->buckets ? 0 : -1;
}

static size_t bucket_of(const lru *m, const uint8_t *key) {
  uint64_t h;
  memcpy(&h, key, sizeof h); /* keys are digests: already uniform */
  return (size_t)h & (m->nbuckets - 1);
}

static void list_unlink(lru *m, lru_node *n) {
  if (n->prev)
    n->prev->next = n->next;
  else
    m->head = n->next;
  if (n->next)
    n->next->prev = n->prev;
  else
    m->tail = n->prev;
  n->prev = n->next = NULL;
}

static void list_push_front(lru *m, lru_node *n) {
  n->prev = NULL;
  n->next = m->head;
  if (m->head)
    m->head->prev = n;
  m->head = n;
  if (!m->tail)
    m->tail = n;
}

static lru_node **find(lru *m, const uint8_t *key) {
  lru_node **p = &m->buckets[bucket_of(m, key)];
  while (*p && memcmp((*p)->key, key, LRU_KEY_LEN) != 0)
    p = &(*p)->chain;
  return p;
}

/* Unlinks *p from its bucket and the list; returns the node. */
static lru_node *take(lru *m, lru_node **p) {
  lru_node *n = *p;
  *p = n->chain;
  list_unlink(m, n);
  m->bytes -= n->charge;
  m->count--;
  return n;
}

static void drop(lru *m, lru_node *n) {
  if (m->release)
    m->release(n->value);
  free(n);
}

static void grow(lru *m) {
  size_t nb = m->nbuckets * 2;
  lru_node **b = calloc(nb, sizeof *b);
  if (!b)
    return;
  for (size_t i = 0; i < m->nbuckets; i++)
    for (lru_node *n = m->buckets[i], *next; n; n = next) {
      next = n->chain;
      uint64_t h;
      memcpy(&h, n->key, sizeof h);
      size_t k = (size_t)h & (nb - 1);
      n->chain = b[k];
      b[k] = n;
    }
  free(m->buckets);
  m->buckets = b;
  m->nbuckets = nb;
}

void lru_put(lru *m, const uint8_t key[LRU_KEY_LEN], void *value,
             size_t charge) {
  if (charge > m->budget) {
    if (m->release)
      m->release(value);
    return;
  }
  lru_node *n = malloc(sizeof *n);
  if (!n) {
    if (m->release)
      m->release(value);
    return;
  }
  memcpy(n->key, key, LRU_KEY_LEN);
  n->value = value;
  n->charge = charge;
  lru_node *old = NULL, *victims = NULL;
  pthread_mutex_lock(&m->mu);
  lru_node **p = find(m, key);
  if (*p)
    old = take(m, p);
  if (m->count + 1 > m->nbuckets)
    grow(m);
  p = find(m, key);
  n->chain = NULL;
  *p = n;
  list_push_front(m, n);
  m->bytes += charge;
  m->count++;
  while (m->bytes > m->budget && m->tail && m->tail != n) {
    lru_node *v = take(m, find(m, m->tail->key));
    v->chain = victims; /* released outside the lock */
    victims = v;
    m->evictions++;
  }
  pthread_mutex_unlock(&m->mu);
  if (old)
    drop(m, old);
  while (victims) {
    lru_node *next = victims->chain;
    drop(m, victims);
    victims = next;
  }
}

bool lru_get(lru *m, const uint8_t key[LRU_KEY_LEN],
             void (*copy)(const void *value, void *out), void *out) {
  if (!m->budget)
    return false;
  pthread_mutex_lock(&m->mu);
  lru_node *n = *find(m, key);
  if (n) {
    list_unlink(m, n);
    list_push_front(m, n);
    copy(n->value, out);
    m->hits++;
  } else {
    m->misses++;
  }
  pthread_mutex_unlock(&m->mu);
  return n != NULL;
}

void lru_remove(lru *m, const uint8_t *key) {
  lru_node *gone = NULL;
  pthread_mutex_lock(&m->mu);
  if (key) {
    lru_node **p = find(m, key);
    if (*p) {
      gone = take(m, p);
      gone->chain = NULL;
    }
  } else {
    while (m->head) {
      lru_node *v = take(m, find(m, m->head->key));
      v->chain = gone;
      gone = v;
    }
  }
  pthread_mutex_unlock(&m->mu);
  while (gone) {
    lru_node *next = gone->chain;
    drop(m, gone);
    gone = next;
  }
}

void lru_destroy(lru *m) {
  if (!m->buckets)
    return;
  lru_remove(m, NULL);
  free(m->buckets);
  pthread_mutex_destroy(&m->mu);
  m->buckets = NULL;
}
