/*
 * arena.h: the bump allocator that owns everything of one compile job.
 *
 * One job allocates from one arena and frees it at once when it ends,
 * whatever the outcome (DESIGN.md section 3). An arena has a byte limit so a
 * hostile graph cannot make a job take the machine's memory: an allocation
 * past the limit fails like malloc failing, and callers report GC_ENOMEM.
 *
 * Memory is never freed piecemeal. Allocations are 16-byte aligned.
 */
#ifndef GC_ARENA_H
#define GC_ARENA_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <protobuf-c/protobuf-c.h>

typedef struct gc_arena gc_arena;

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

/* Copies `n` bytes of `s` and a terminating NUL into the arena. */
char *gc_arena_strndup(gc_arena *a, const char *s, size_t n);

/* Copies the NUL-terminated string `s` into the arena. */
char *gc_arena_strdup(gc_arena *a, const char *s);

/* printf into the arena. */
char *gc_arena_printf(gc_arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* True once an allocation was refused (limit reached or malloc failed). */
bool gc_arena_exhausted(const gc_arena *a);

/* Bytes handed out so far (for limits and statistics). */
size_t gc_arena_used(const gc_arena *a);

/* A protobuf-c allocator drawing from the arena, so that unpacked messages
 * are owned by the arena too; its free is a no-op. */
ProtobufCAllocator gc_arena_pb_allocator(gc_arena *a);

#endif
