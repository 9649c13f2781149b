/*
 * arena.c: a chunked bump allocator with a byte limit. See arena.h.
 *
 * Chunks are malloc'd on demand and linked; a request larger than the usual
 * chunk gets a chunk of its own. Freeing walks the chain.
 */
#include "compiler/arena.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_SIZE (64 * 1024)
#define ALIGN 16

typedef struct chunk {
  struct chunk *next; /* previously filled chunk */
  size_t size;        /* usable bytes in data[] */
  size_t used;        /* bytes handed out from data[] */
  _Alignas(ALIGN) unsigned char data[];
} chunk;

struct gc_arena {
  chunk *head;    /* chunk being filled; NULL before the first allocation */
  size_t limit;   /* refuse to hand out more than this; 0: no limit */
  size_t total;   /* bytes handed out, alignment padding included */
  bool exhausted; /* an allocation was refused */
};

gc_arena *gc_arena_new(size_t limit) {
  gc_arena *a = calloc(1, sizeof *a);
  if (a)
    a->limit = limit;
  return a;
}

void gc_arena_free(gc_arena *a) {
  if (!a)
    return;
  chunk *c = a->head;
  while (c) {
    chunk *next = c->next;
    free(c);
    c = next;
  }
  free(a);
}

void *gc_arena_alloc(gc_arena *a, size_t n) {
  if (n == 0)
    n = 1;
  if (n > SIZE_MAX / 2)
    return NULL;
  size_t need = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
  if (a->limit && (need > a->limit || a->total > a->limit - need)) {
    a->exhausted = true;
    return NULL;
  }
  chunk *c = a->head;
  if (!c || c->size - c->used < need) {
    size_t size = need > CHUNK_SIZE ? need : CHUNK_SIZE;
    c = malloc(sizeof(chunk) + size);
    if (!c) {
      a->exhausted = true;
      return NULL;
    }
    c->size = size;
    c->used = 0;
    /* A big private chunk goes behind the current one so the current one
     * keeps filling. */
    if (a->head && need > CHUNK_SIZE) {
      c->next = a->head->next;
      a->head->next = c;
    } else {
      c->next = a->head;
      a->head = c;
    }
  }
  void *p = c->data + c->used;
  c->used += need;
  a->total += need;
  return p;
}

void *gc_arena_zalloc(gc_arena *a, size_t n) {
  void *p = gc_arena_alloc(a, n);
  if (p)
    memset(p, 0, n);
  return p;
}

void *gc_arena_calloc(gc_arena *a, size_t count, size_t size) {
  if (size && count > SIZE_MAX / size)
    return NULL;
  return gc_arena_zalloc(a, count * size);
}

char *gc_arena_strndup(gc_arena *a, const char *s, size_t n) {
  char *p = gc_arena_alloc(a, n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

char *gc_arena_strdup(gc_arena *a, const char *s) {
  return gc_arena_strndup(a, s, strlen(s));
}

char *gc_arena_printf(gc_arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0)
    return NULL;
  char *p = gc_arena_alloc(a, (size_t)n + 1);
  if (!p)
    return NULL;
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

size_t gc_arena_used(const gc_arena *a) {
  return a->total;
}

bool gc_arena_exhausted(const gc_arena *a) {
  return a->exhausted;
}

static void *pb_alloc(void *data, size_t size) {
  return gc_arena_alloc(data, size);
}

static void pb_free(void *data, void *p) {
  (void)data;
  (void)p;
}

ProtobufCAllocator gc_arena_pb_allocator(gc_arena *a) {
  ProtobufCAllocator al = {
      .alloc = pb_alloc, .free = pb_free, .allocator_data = a};
  return al;
}
