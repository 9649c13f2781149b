/*
 * torchops.c: lookups in torch 2.13's operator table. See torchops.h.
 *
 * The table is an array of schema strings sorted by byte value; a schema
 * starts with its qualified name followed by '('. Sorting whole strings
 * sorts them by name: where two names differ, the first difference decides
 * both orders, and where one name is a prefix of the other ("aten::add",
 * "aten::add_"), the shorter one's '(' (0x28) sorts before any character a
 * name can continue with (letters, digits, '_', '.', ':'). So a name is
 * found by binary search, comparing it with the text before each '('.
 * Validation looks up every operator of every request, so this matters.
 */
#include "compiler/torchops.h"

#include <string.h>

static const char *const schemas[] = {
#include "torch_schemas.inc"
};

#define NSCHEMAS (sizeof schemas / sizeof schemas[0])

bool gc_torch_table_covers(const char *v) {
  size_t n = strlen(GC_TORCH_TABLE_VERSION);
  return v && strncmp(v, GC_TORCH_TABLE_VERSION, n) == 0 &&
         !(v[n] >= '0' && v[n] <= '9');
}

/* Compares name `q` (length n) with the name that starts schema `s`. */
static int cmp_name(const char *q, size_t n, const char *s) {
  int c = strncmp(q, s, n);
  if (c)
    return c;
  return (unsigned char)'(' - (unsigned char)s[n];
}

const char *gc_torch_schema(const char *qualified) {
  size_t n = strlen(qualified);
  size_t lo = 0, hi = NSCHEMAS;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = cmp_name(qualified, n, schemas[mid]);
    if (c == 0)
      return schemas[mid];
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}

int gc_torch_overloads(const char *name,
                       int (*fn)(const char *schema, void *ctx), void *ctx) {
  size_t n = strlen(name);
  for (size_t i = 0; i < NSCHEMAS; i++) {
    const char *s = schemas[i];
    if (strncmp(s, name, n) != 0 || (s[n] != '(' && s[n] != '.'))
      continue;
    int rc = fn(s, ctx);
    if (rc)
      return rc;
  }
  return 0;
}
