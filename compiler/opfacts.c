/*
 * opfacts.c: the operator facts table (opfacts.def) and its index. See
 * opfacts.h.
 */
#include "compiler/opfacts.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const gc_opfacts table[] = {
#define RULE(name, cls, fn, param)                                             \
  {name, 0, GC_OPC_##cls, #fn, 0, GC_INV_NONE, NULL, NULL, NULL},
#define OP(name, cls, fn, param, flags, inv, inv_op, writes, when)             \
  {name, 0, GC_OPC_##cls, #fn, flags, GC_INV_##inv, inv_op, writes, when},
#define FACTS(name, flags, inv, inv_op, writes, when)                          \
  {name, 0, GC_OPC_FALLBACK, NULL, flags, GC_INV_##inv, inv_op, writes, when},
#include "compiler/opfacts.def"
#undef RULE
#undef OP
#undef FACTS
};
#define NROWS (sizeof table / sizeof table[0])

/* Two open-addressing indexes (row number + 1; 0: empty): every row by its
 * name, and family rows by their name. Built once; read-only afterwards. */
#define NSLOTS 2048 /* a power of two, well above twice the rows */
_Static_assert(NROWS * 2 < NSLOTS, "opfacts: grow NSLOTS");

static uint16_t exact_slots[NSLOTS], family_slots[NSLOTS];
static gc_opfacts rows[NROWS]; /* the table with row numbers */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static uint32_t hash(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (uint8_t)s[i]) * 16777619u;
  return h;
}

static void put(uint16_t *slots, size_t i) {
  const char *k = rows[i].name;
  size_t at = hash(k, strlen(k)) & (NSLOTS - 1);
  while (slots[at]) {
    if (strcmp(rows[slots[at] - 1].name, k) == 0)
      return; /* a duplicate name: the first row wins (a test forbids it) */
    at = (at + 1) & (NSLOTS - 1);
  }
  slots[at] = (uint16_t)(i + 1);
}

/* The row named by the `n` bytes at `k`, or NULL. */
static const gc_opfacts *get(const uint16_t *slots, const char *k, size_t n) {
  size_t at = hash(k, n) & (NSLOTS - 1);
  for (; slots[at]; at = (at + 1) & (NSLOTS - 1)) {
    const gc_opfacts *r = &rows[slots[at] - 1];
    if (strncmp(r->name, k, n) == 0 && r->name[n] == '\0')
      return r;
  }
  return NULL;
}

static void build(void) {
  for (size_t i = 0; i < NROWS; i++) {
    rows[i] = table[i];
    rows[i].index = (int)i;
    put(exact_slots, i);
    if (rows[i].flags & GC_OF_FAMILY)
      put(family_slots, i);
  }
}

static void init(void) {
  pthread_once(&once, build);
}

const gc_opfacts *gc_opfacts_table(size_t *n) {
  init();
  *n = NROWS;
  return rows;
}

const gc_opfacts *gc_opfacts_of(const char *name) {
  if (!name)
    return NULL;
  init();
  return get(exact_slots, name, strlen(name));
}

/* The family row of ns::name with `drop` bytes cut off the end of name. */
static const gc_opfacts *family(const char *ns, const char *name, size_t drop) {
  char key[256];
  size_t nl = strlen(name);
  if (!ns || drop > nl)
    return NULL;
  int n = snprintf(key, sizeof key, "%s::%.*s", ns, (int)(nl - drop), name);
  if (n < 0 || (size_t)n >= sizeof key)
    return NULL;
  init();
  return get(family_slots, key, (size_t)n);
}

const gc_opfacts *gc_opfacts_family(const char *ns, const char *name) {
  return name ? family(ns, name, 0) : NULL;
}

const gc_opfacts *gc_opfacts_view(const gc_schema *s) {
  const gc_opfacts *f = gc_opfacts_of(s->qualified);
  if (f && f->inverse != GC_INV_NONE)
    return f;
  f = family(s->ns, s->name, 0);
  if (f && f->inverse != GC_INV_NONE)
    return f;
  /* in-place view steps invert like their view ops */
  size_t nl = strlen(s->name);
  if (nl && s->name[nl - 1] == '_') {
    f = family(s->ns, s->name, 1);
    if (f && f->inverse != GC_INV_NONE)
      return f;
  }
  return NULL;
}

bool gc_opfacts_random_name(const char *name) {
  static const char *const words[] = {
      "rand",    "dropout",     "bernoulli", "multinomial", "normal", "uniform",
      "poisson", "exponential", "cauchy",    "geometric",   "random"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (strstr(name, words[i]))
      return true;
  return false;
}

static const gc_type *base_type(const gc_type *t) {
  while (t && t->kind == GC_TY_OPTIONAL)
    t = t->elem;
  return t;
}

bool gc_opfacts_is_random(const gc_schema *s) {
  for (int i = 0; i < s->nargs; i++) {
    const gc_type *t = base_type(s->args[i].type);
    if (t && t->kind == GC_TY_GENERATOR)
      return true;
  }
  if (gc_opfacts_random_name(s->name))
    return true;
  const gc_opfacts *f = gc_opfacts_of(s->qualified);
  if (!f)
    f = family(s->ns, s->name, 0);
  return f && (f->flags & GC_OF_RANDOM);
}

bool gc_opfacts_meta_inplace(const gc_schema *s) {
  if (strcmp(s->ns, "aten") != 0)
    return false;
  const gc_opfacts *f = family(s->ns, s->name, 0);
  return f && (f->flags & GC_OF_META_INPLACE);
}

bool gc_opfacts_wrapped_numbers(const gc_schema *s) {
  const gc_opfacts *f = family("aten", s->name, 0);
  return f && (f->flags & GC_OF_WRAPPED_NUMBERS);
}

bool gc_opfacts_writes_param(const gc_opfacts *f, const char *param) {
  if (!f || !f->writes || !param)
    return false;
  size_t pl = strlen(param);
  for (const char *p = f->writes; *p;) {
    while (*p == ' ')
      p++;
    size_t n = strcspn(p, " ");
    if (n == pl && n && strncmp(p, param, n) == 0)
      return true;
    p += n;
  }
  return false;
}
