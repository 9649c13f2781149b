/*
 * fuzz_schema.c: libFuzzer target for the schema parser (compiler/schema.c).
 *
 * The input, cut at its first NUL, is parsed as a schema. Parsing may fail
 * (it must then say so, and leave no schema) but never crash, leak or run
 * away. When it succeeds, every query is asked of the schema, it is printed,
 * and the printed text must parse again and print identically: printing is
 * a fixed point after one step.
 *
 * Seeds: tests/fuzz/corpus/schema/ (a few real torch schemas and odd ones).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The schema printed into a new malloc'd string. */
static char *format_new(const gc_schema *s) {
  size_t n = gc_schema_format(s, NULL, 0);
  char *buf = malloc(n + 1);
  if (!buf)
    abort();
  if (gc_schema_format(s, buf, n + 1) != n || strlen(buf) != n)
    abort();
  return buf;
}

/* Asks every query; only their not crashing is checked, and their bounds. */
static void query(const gc_schema *s) {
  char buf[64];
  for (int i = 0; i < s->nargs; i++) {
    gc_schema_arg_is_write(s, i);
    gc_type_format(s->args[i].type, buf, sizeof buf);
    if (gc_schema_find_arg(s, s->args[i].name) > i)
      abort(); /* the first argument of that name */
  }
  for (int r = 0; r < s->nrets; r++) {
    int i = gc_schema_return_alias(s, r);
    if (i < -1 || i >= s->nargs)
      abort();
  }
  if (gc_schema_is_out_variant(s) && !gc_schema_is_mutating(s))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text)
    abort();
  memcpy(text, data, size);
  text[size] = '\0';

  gc_arena *a = gc_arena_new(64 << 20);
  if (!a)
    abort();
  gc_schema *s = NULL;
  gc_error err;
  gc_error_clear(&err);
  int rc = gc_schema_parse(a, text, &s, &err);
  if (rc != 0) {
    if ((rc != GC_ESCHEMA && rc != GC_ENOMEM) || err.code != rc ||
        err.msg[0] == '\0' || s != NULL)
      abort(); /* a failure says why and leaves no schema */
    gc_arena_free(a);
    free(text);
    return 0;
  }
  query(s);
  char *first = format_new(s);

  gc_schema *again = NULL;
  if (gc_schema_parse(a, first, &again, &err) != 0)
    abort(); /* whatever we print, we read */
  query(again);
  char *second = format_new(again);
  if (strcmp(first, second) != 0)
    abort(); /* printing is not a fixed point */

  free(second);
  free(first);
  gc_arena_free(a);
  free(text);
  return 0;
}
