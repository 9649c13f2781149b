/*
 * arena.c: a chunked bump allocator with a byte limit. See arena.h.
 *
 * Chunks are allocated on demand and linked; their size grows with the
 * arena (CHUNK_MIN, then a quarter of the bytes held, up to CHUNK_MAX), so a
 * big arena is a few large chunks rather than many small ones. A request
 * larger than the next chunk gets a chunk of its own. Chunks of MAP_MIN
 * bytes and more are mmap'd, so that freeing them returns the memory to the
 * system at once; smaller ones come from malloc. Freeing walks the chain.
 */
#include "compiler/arena.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CHUNK_MIN (64 * 1024)
#define CHUNK_MAX (8 * 1024 * 1024)
#define MAP_MIN (1024 * 1024)
#define ALIGN 16

typedef struct chunk {
  struct chunk *next; /* previously filled chunk */
  size_t size;        /* usable bytes in data[] */
  size_t used;        /* bytes handed out from data[] */
  bool mapped;        /* from mmap (else malloc) */
  _Alignas(ALIGN) unsigned char data[];
} chunk;

struct gc_arena {
  chunk *head;        /* chunk being filled; NULL before the first allocation */
  size_t limit;       /* refuse to hand out more than this; 0: no limit */
  size_t total;       /* bytes handed out, alignment padding included */
  size_t held;        /* bytes of all chunks, headers included */
  gc_budget *budget;  /* charged for `held`; NULL: none */
  size_t ceiling;     /* refuse chunks taking the budget past this */
  gc_refusal refusal; /* why the first refused allocation was refused */
};

/* ---- budgets ---- */

void gc_budget_init(gc_budget *b, size_t limit) {
  atomic_init(&b->used, 0);
  b->limit = limit;
}

bool gc_budget_charge(gc_budget *b, size_t n, size_t ceiling) {
  size_t cap =
      ceiling && (!b->limit || ceiling < b->limit) ? ceiling : b->limit;
  size_t cur = atomic_load(&b->used);
  do {
    if (cap && (n > cap || cur > cap - n))
      return false;
  } while (!atomic_compare_exchange_weak(&b->used, &cur, cur + n));
  return true;
}

void gc_budget_release(gc_budget *b, size_t n) {
  atomic_fetch_sub(&b->used, n);
}

size_t gc_budget_used(gc_budget *b) {
  return atomic_load(&b->used);
}

/* ---- chunks ---- */

static void refuse(gc_arena *a, gc_refusal why) {
  if (a->refusal == GC_REFUSED_NONE)
    a->refusal = why;
}

/* A chunk with `size` usable bytes, charged to the budget; NULL (with the
 * refusal recorded) when it cannot be had. */
static chunk *chunk_new(gc_arena *a, size_t size) {
  size_t bytes = sizeof(chunk) + size;
  if (a->budget && !gc_budget_charge(a->budget, bytes, a->ceiling)) {
    refuse(a, GC_REFUSED_BUDGET);
    return NULL;
  }
  chunk *c;
  bool mapped = bytes >= MAP_MIN;
  if (mapped) {
    c = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (c == MAP_FAILED)
      c = NULL;
  } else {
    c = malloc(bytes);
  }
  if (!c) {
    if (a->budget)
      gc_budget_release(a->budget, bytes);
    refuse(a, GC_REFUSED_SYSTEM);
    return NULL;
  }
  c->size = size;
  c->used = 0;
  c->mapped = mapped;
  a->held += bytes;
  return c;
}

static void chunk_free(chunk *c) {
  if (c->mapped)
    munmap(c, sizeof(chunk) + c->size);
  else
    free(c);
}

/* The size of the next regular chunk: grows with the arena. */
static size_t next_size(const gc_arena *a) {
  size_t s = a->held / 4;
  if (s < CHUNK_MIN)
    return CHUNK_MIN;
  if (s > CHUNK_MAX)
    return CHUNK_MAX;
  return (s + 4095) & ~(size_t)4095;
}

/* ---- arenas ---- */

gc_arena *gc_arena_new(size_t limit) {
  gc_arena *a = calloc(1, sizeof *a);
  if (a)
    a->limit = limit;
  return a;
}

void gc_arena_set_budget(gc_arena *a, gc_budget *b, size_t ceiling) {
  a->budget = b;
  a->ceiling = ceiling;
}

void gc_arena_free(gc_arena *a) {
  if (!a)
    return;
  chunk *c = a->head;
  while (c) {
    chunk *next = c->next;
    chunk_free(c);
    c = next;
  }
  if (a->budget)
    gc_budget_release(a->budget, a->held);
  free(a);
}

void *gc_arena_alloc(gc_arena *a, size_t n) {
  if (n == 0)
    n = 1;
  if (n > SIZE_MAX / 2)
    return NULL;
  size_t need = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
  if (a->limit && (need > a->limit || a->total > a->limit - need)) {
    refuse(a, GC_REFUSED_LIMIT);
    return NULL;
  }
  chunk *c = a->head;
  if (!c || c->size - c->used < need) {
    size_t regular = next_size(a);
    c = chunk_new(a, need > regular ? need : regular);
    if (!c)
      return NULL;
    /* A big private chunk goes behind the current one so the current one
     * keeps filling. */
    if (a->head && need > regular) {
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

void *gc_arena_grow(gc_arena *a, void *arr, int n, int *cap, int first,
                    size_t size) {
  if (n < *cap)
    return arr;
  if (*cap > INT_MAX / 2)
    return NULL;
  int nc = *cap ? *cap * 2 : first;
  void *na = gc_arena_calloc(a, (size_t)nc, size);
  if (!na)
    return NULL;
  if (n)
    memcpy(na, arr, (size_t)n * size);
  *cap = nc;
  return na;
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
  return a->refusal != GC_REFUSED_NONE;
}

gc_refusal gc_arena_refusal(const gc_arena *a) {
  return a->refusal;
}

size_t gc_arena_held(const gc_arena *a) {
  return a->held;
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
