/*
 * testutil.h: helpers shared by the Criterion tests: where the test data is,
 * reading files, listing the graph corpus, removing a temporary tree, an
 * arena per test, a deterministic RNG.
 */
#ifndef TESTUTIL_H
#define TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "compiler/arena.h"

/* The repository root: $COMPILED_SRC, else ".". */
const char *tu_src_dir(void);

/* The build directory: $COMPILED_BUILD, else "build". */
const char *tu_build_dir(void);

/* "<src>/<rel>" in a static buffer (one at a time). */
const char *tu_path(const char *rel);

/* Reads a file into malloc'd memory; aborts the test on failure. */
uint8_t *tu_read(const char *path, size_t *len);

/* Sorted malloc'd list of "<dir>/<name>" for files in `dir` ending in
 * `suffix`; *n gets the count. Free with tu_free_list. */
char **tu_list(const char *dir, const char *suffix, int *n);
void tu_free_list(char **list, int n);

/* Removes `dir` and everything below it (best effort: a test's temporary
 * directory at its end; symbolic links are removed, not followed). */
void tu_rm_tree(const char *dir);

/* `open` n times, `mid`, `close` n times: a deeply nested expression
 * (malloc'd; aborts the test when out of memory). */
char *tu_nest(const char *open, const char *mid, const char *close, int n);

/* An arena for the test: Criterion's .init tu_arena_setup makes it,
 * .fini tu_arena_teardown frees it. */
extern gc_arena *tu_arena;
void tu_arena_setup(void);
void tu_arena_teardown(void);

/* xorshift64*: deterministic, seedable. */
typedef struct tu_rng {
  uint64_t s;
} tu_rng;

void tu_rng_seed(tu_rng *r, uint64_t seed);
uint64_t tu_rng_next(tu_rng *r);
/* Uniform in [0, n). n must be > 0. */
int tu_rng_below(tu_rng *r, int n);

#endif
