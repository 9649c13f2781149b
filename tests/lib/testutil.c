/*
 * testutil.c: see testutil.h.
 */
#include "tests/lib/testutil.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

const char *tu_src_dir(void) {
  const char *s = getenv("COMPILED_SRC");
  return s && *s ? s : ".";
}

const char *tu_build_dir(void) {
  const char *s = getenv("COMPILED_BUILD");
  return s && *s ? s : "build";
}

const char *tu_path(const char *rel) {
  static char buf[4096];
  snprintf(buf, sizeof buf, "%s/%s", tu_src_dir(), rel);
  return buf;
}

uint8_t *tu_read(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "tu_read: %s: %s\n", path, strerror(errno));
    abort();
  }
  size_t cap = 1 << 16, used = 0;
  uint8_t *buf = malloc(cap);
  size_t n;
  while (buf && (n = fread(buf + used, 1, cap - used, f)) > 0) {
    used += n;
    if (used == cap)
      buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (!buf)
    abort();
  *len = used;
  return buf;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

char **tu_list(const char *dir, const char *suffix, int *n) {
  DIR *d = opendir(dir);
  *n = 0;
  if (!d)
    return NULL;
  int cap = 64;
  char **list = malloc((size_t)cap * sizeof *list);
  struct dirent *e;
  size_t sl = strlen(suffix);
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < sl || strcmp(e->d_name + l - sl, suffix) != 0)
      continue;
    if (*n == cap)
      list = realloc(list, (size_t)(cap *= 2) * sizeof *list);
    size_t pl = strlen(dir) + l + 2;
    list[*n] = malloc(pl);
    snprintf(list[*n], pl, "%s/%s", dir, e->d_name);
    (*n)++;
  }
  closedir(d);
  qsort(list, (size_t)*n, sizeof *list, cmp_str);
  return list;
}

void tu_free_list(char **list, int n) {
  for (int i = 0; i < n; i++)
    free(list[i]);
  free(list);
}

void tu_rng_seed(tu_rng *r, uint64_t seed) {
  r->s = seed ? seed : 0x9e3779b97f4a7c15ull;
}

uint64_t tu_rng_next(tu_rng *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 0x2545f4914f6cdd1dull;
}

int tu_rng_below(tu_rng *r, int n) {
  return (int)(tu_rng_next(r) % (uint64_t)n);
}

static int rm_one(const char *path, const struct stat *sb, int flag,
                  struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

void tu_rm_tree(const char *dir) {
  nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

gc_arena *tu_arena;

void tu_arena_setup(void) {
  tu_arena = gc_arena_new(0);
  cr_assert_not_null(tu_arena);
}

void tu_arena_teardown(void) {
  gc_arena_free(tu_arena);
  tu_arena = NULL;
}

char *tu_nest(const char *open, const char *mid, const char *close, int n) {
  size_t lo = strlen(open), lm = strlen(mid), lc = strlen(close);
  char *s = malloc((size_t)n * (lo + lc) + lm + 1), *p = s;
  cr_assert_not_null(s);
  for (int i = 0; i < n; i++, p += lo)
    memcpy(p, open, lo);
  memcpy(p, mid, lm);
  p += lm;
  for (int i = 0; i < n; i++, p += lc)
    memcpy(p, close, lc);
  *p = '\0';
  return s;
}
