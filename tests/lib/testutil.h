/*
 * testutil.h: helpers shared by the Criterion tests: where the test data is,
 * reading files, listing the graph corpus, a deterministic RNG.
 */
#ifndef TESTUTIL_H
#define TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

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

/* xorshift64*: deterministic, seedable. */
typedef struct tu_rng {
  uint64_t s;
} tu_rng;

void tu_rng_seed(tu_rng *r, uint64_t seed);
uint64_t tu_rng_next(tu_rng *r);
/* Uniform in [0, n). n must be > 0. */
int tu_rng_below(tu_rng *r, int n);

#endif
