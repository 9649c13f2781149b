/*
 * fnqueue.h: a FIFO of calls to make later (a function and its argument),
 * as the daemon's thread pools queue jobs and the server posts work to its
 * event loop. Not locked: its owner holds its own lock around each use.
 */
#ifndef COMMON_FNQUEUE_H
#define COMMON_FNQUEUE_H

#include <stdlib.h>

/* One call: fn(arg). */
typedef struct fnq_item {
  void (*fn)(void *arg);
  void *arg;
  struct fnq_item *next;
} fnq_item;

typedef struct fnq {
  fnq_item *head, *tail; /* both NULL when empty */
} fnq;

/* A new call fn(arg) to queue (free it once made), or NULL when out of
 * memory: allocated before taking the owner's lock. */
static inline fnq_item *fnq_item_new(void (*fn)(void *arg), void *arg) {
  fnq_item *it = malloc(sizeof *it);
  if (it) {
    it->fn = fn;
    it->arg = arg;
    it->next = NULL;
  }
  return it;
}

/* Appends `it` (its `next` is overwritten). */
static inline void fnq_push(fnq *q, fnq_item *it) {
  it->next = NULL;
  if (q->tail)
    q->tail->next = it;
  else
    q->head = it;
  q->tail = it;
}

/* Removes and returns the first call, or NULL when empty. */
static inline fnq_item *fnq_pop(fnq *q) {
  fnq_item *it = q->head;
  if (it) {
    q->head = it->next;
    if (!q->head)
      q->tail = NULL;
  }
  return it;
}

/* Empties the queue; returns its calls, in order, linked by `next`. */
static inline fnq_item *fnq_take(fnq *q) {
  fnq_item *all = q->head;
  q->head = q->tail = NULL;
  return all;
}

#endif
