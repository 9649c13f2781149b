/*
 * arena.h: the bump allocator that owns everything of one compile job.
 *
 * One job allocates from one arena and frees it at once when it ends,
 * whatever the outcome (docs/design.md). An arena has a byte limit so a
 * hostile graph cannot make a job take the machine's memory: an allocation
 * past the limit fails like malloc failing, and callers report GC_ENOMEM.
 *
 * Memory is never freed piecemeal. Allocations are 16-byte aligned.
 *
 * Memory comes in chunks that grow with the arena (64 KiB at first, then a
 * quarter of what it holds, up to 8 MiB). Chunks of 1 MiB and more are
 * mapped from the system directly, so freeing a big arena gives its memory
 * back to the system at once rather than leaving it in malloc's free lists.
 *
 * Several arenas can share a budget (gc_budget): the caller's count of the
 * chunk bytes all of them hold, with a limit. An arena attached to a budget
 * refuses a new chunk that would take the budget past the arena's
 * `ceiling`, like malloc failing; gc_arena_refusal() tells which limit
 * refused. A budget is owned by the caller (the library keeps no global
 * state) and is thread-safe: arenas on different threads may share it.
 */
#ifndef GC_ARENA_H
#define GC_ARENA_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <protobuf-c/protobuf-c.h>

typedef struct gc_arena gc_arena;

/* Bytes held by several arenas (and whatever else the caller charges),
 * against one limit. */
typedef struct gc_budget {
  atomic_size_t used; /* bytes charged now */
  size_t limit;       /* the most that may be charged; 0: no limit */
} gc_budget;

/* Why an arena refused an allocation (gc_arena_refusal). */
typedef enum gc_refusal {
  GC_REFUSED_NONE = 0,   /* nothing was refused */
  GC_REFUSED_LIMIT = 1,  /* the arena's own limit */
  GC_REFUSED_BUDGET = 2, /* the shared budget (up to the arena's ceiling) */
  GC_REFUSED_SYSTEM = 3, /* the system had no memory */
} gc_refusal;

/* Sets the budget's limit and nothing charged. */
void gc_budget_init(gc_budget *b, size_t limit);

/* Charges `n` bytes when the budget stays within `ceiling` (at most its
 * limit; 0: the limit) after it. Returns false, charging nothing, otherwise. */
bool gc_budget_charge(gc_budget *b, size_t n, size_t ceiling);

/* Gives back `n` charged bytes. */
void gc_budget_release(gc_budget *b, size_t n);

/* Bytes charged now. */
size_t gc_budget_used(gc_budget *b);

/* Creates an arena that refuses to grow past `limit` bytes (0: no limit).
 * Returns NULL when out of memory. Owned by the caller: gc_arena_free(). */
gc_arena *gc_arena_new(size_t limit);

/* Frees every allocation of the arena and the arena itself. NULL is fine. */
void gc_arena_free(gc_arena *a);

/* Returns `n` bytes (uninitialised), or NULL past the limit or out of memory.
 * The memory lives until gc_arena_free(a). */
void *gc_arena_alloc(gc_arena *a, size_t n);

/* As gc_arena_alloc, zero-filled. */
void *gc_arena_zalloc(gc_arena *a, size_t n);

/* `count * size` zero-filled bytes; NULL on overflow of the product. */
void *gc_arena_calloc(gc_arena *a, size_t count, size_t size);

/* Room for one more element of a growing array of `size`-byte elements
 * that holds `n` in room for *cap: arr itself while n < *cap, else a
 * zero-filled copy of its n elements in room for twice *cap (`first` when
 * *cap is 0), *cap then updated. NULL out of memory or past INT_MAX
 * elements, *cap and arr unchanged (arrays in an arena are never freed). */
void *gc_arena_grow(gc_arena *a, void *arr, int n, int *cap, int first,
                    size_t size);

/* Copies `n` bytes of `s` and a terminating NUL into the arena. */
char *gc_arena_strndup(gc_arena *a, const char *s, size_t n);

/* Copies the NUL-terminated string `s` into the arena. */
char *gc_arena_strdup(gc_arena *a, const char *s);

/* printf into the arena. */
char *gc_arena_printf(gc_arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* True once an allocation was refused (limit reached or malloc failed). */
bool gc_arena_exhausted(const gc_arena *a);

/* Which limit refused the first refused allocation. */
gc_refusal gc_arena_refusal(const gc_arena *a);

/* Charges the arena's chunks to `b`, refusing chunks that would take `b`
 * past `ceiling` (0: b's limit). Call before the first allocation; the
 * budget must outlive the arena, which gives its bytes back when freed. */
void gc_arena_set_budget(gc_arena *a, gc_budget *b, size_t ceiling);

/* Bytes of memory the arena holds (its chunks), padding and headroom
 * included: what it costs, where gc_arena_used() is what it handed out. */
size_t gc_arena_held(const gc_arena *a);

/* Bytes handed out so far (for limits and statistics). */
size_t gc_arena_used(const gc_arena *a);

/* A protobuf-c allocator drawing from the arena, so that unpacked messages
 * are owned by the arena too; its free is a no-op. */
ProtobufCAllocator gc_arena_pb_allocator(gc_arena *a);

#endif
