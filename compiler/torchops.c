/*
 * torchops.c: lookups in torch 1.13's operator table. See torchops.h.
 *
 * The table is a sorted array of schema strings; a schema starts with its
 * qualified name followed by '('. Lookups are linear: they happen only
 * while compiling a miss, a few per mutating node.
 */
#include "compiler/torchops.h"

#include <string.h>

static const char *const schemas[] = {
#include "torch_schemas.inc"
};

#define NSCHEMAS (sizeof schemas / sizeof schemas[0])

const char *gc_torch_schema(const char *qualified) {
  size_t n = strlen(qualified);
  for (size_t i = 0; i < NSCHEMAS; i++)
    if (strncmp(schemas[i], qualified, n) == 0 && schemas[i][n] == '(')
      return schemas[i];
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
