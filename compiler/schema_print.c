/*
 * schema_print.c: printing a parsed schema back exactly as torch does
 * (gc_schema_format, gc_type_format; see schema.c for the three surprises
 * mirrored here).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "compiler/schema_internal.h"

/* ---- printing ---- */

/* Output like snprintf's: writes what fits, counts everything. */
typedef struct sink {
  char *buf;   /* may be NULL when size is 0 */
  size_t size; /* bytes available in buf */
  size_t len;  /* bytes the whole output needs, without the NUL */
} sink;

static void put(sink *o, const char *s, size_t n) {
  if (o->len < o->size) {
    size_t room = o->size - o->len;
    memcpy(o->buf + o->len, s, n < room ? n : room);
  }
  o->len += n;
}

static void puts_(sink *o, const char *s) {
  put(o, s, strlen(s));
}

static size_t finish(sink *o) {
  if (o->size)
    o->buf[o->len < o->size ? o->len : o->size - 1] = '\0';
  return o->len;
}

static void put_sets(sink *o, const char *const *sets, int n) {
  for (int i = 0; i < n; i++) {
    if (i)
      puts_(o, "|");
    puts_(o, sets[i]);
  }
}

static bool has_set(const char *const *sets, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(sets[i], name) == 0)
      return true;
  return false;
}

/* Like torch, "a -> a" prints as "a": the arrow shows only a change. */
static bool sets_equal(const gc_alias *al) {
  if (al->nbefore != al->nafter)
    return false;
  for (int i = 0; i < al->nbefore; i++)
    if (!has_set(al->after, al->nafter, al->before[i]) ||
        !has_set(al->before, al->nbefore, al->after[i]))
      return false;
  return true;
}

static void put_alias(sink *o, const gc_alias *al) {
  if (!al)
    return;
  puts_(o, "(");
  put_sets(o, al->before, al->nbefore);
  if (al->is_write)
    puts_(o, "!");
  if (al->nafter && !sets_equal(al)) {
    puts_(o, " -> ");
    put_sets(o, al->after, al->nafter);
  }
  puts_(o, ")");
}

static void put_type(sink *o, const gc_type *t);

/* "(a, b)" from the items, or "(elem)" for Future, RRef and Await. */
static void put_members(sink *o, const gc_type *t) {
  puts_(o, "(");
  for (int i = 0; i < t->nitems; i++) {
    if (i)
      puts_(o, ", ");
    put_type(o, t->items[i]);
  }
  if (t->elem)
    put_type(o, t->elem);
  puts_(o, ")");
}

static void put_type(sink *o, const gc_type *t) {
  char n[16];
  switch (t->kind) {
  case GC_TY_LIST:
    put_type(o, t->elem);
    puts_(o, "[");
    if (t->fixed_len >= 0) {
      snprintf(n, sizeof n, "%d", t->fixed_len);
      puts_(o, n);
    }
    puts_(o, "]");
    break;
  case GC_TY_OPTIONAL:
    put_type(o, t->elem);
    puts_(o, "?");
    break;
  case GC_TY_TUPLE:
    put_members(o, t);
    break;
  case GC_TY_DICT:
  case GC_TY_FUTURE:
  case GC_TY_RREF:
  case GC_TY_AWAIT:
  case GC_TY_UNION:
    for (size_t c = 0; c < sizeof sp_composites / sizeof *sp_composites; c++)
      if (sp_composites[c].kind == t->kind)
        puts_(o, sp_composites[c].name);
    put_members(o, t);
    break;
  case GC_TY_VAR:
  case GC_TY_CLASS:
    puts_(o, t->name ? t->name : "?");
    break;
  default:
    puts_(o, t->kind < GC_TY_COUNT && sp_type_spellings[t->kind]
                 ? sp_type_spellings[t->kind]
                 : "?");
  }
  /* An OPTIONAL's annotation belongs to its element ("Tensor(a)?"). */
  if (t->kind != GC_TY_OPTIONAL)
    put_alias(o, t->alias);
}

size_t gc_type_format(const gc_type *t, char *buf, size_t size) {
  sink o = {buf, size, 0};
  if (t)
    put_type(&o, t);
  return finish(&o);
}

static void put_arg(sink *o, const gc_schema_arg *a) {
  put_type(o, a->type);
  if (a->name) {
    puts_(o, " ");
    puts_(o, a->name);
  }
  if (a->has_default && a->default_text) {
    puts_(o, "=");
    puts_(o, a->default_text);
  }
}

/* True when a type prints starting with '(' (a tuple, or a list of them). */
static bool starts_with_paren(const gc_type *t) {
  while (t->kind == GC_TY_LIST || t->kind == GC_TY_OPTIONAL)
    t = t->elem;
  return t->kind == GC_TY_TUPLE;
}

static void put_returns(sink *o, const gc_schema *s) {
  bool paren = !(s->nrets == 1 && !s->varret) && !(s->nrets == 0 && s->varret);
  if (s->nrets == 1 && !s->varret && starts_with_paren(s->rets[0].type))
    paren = true;
  if (paren)
    puts_(o, "(");
  for (int i = 0; i < s->nrets; i++) {
    if (i)
      puts_(o, ", ");
    put_arg(o, &s->rets[i]);
  }
  if (s->varret)
    puts_(o, s->nrets ? ", ..." : "...");
  if (paren)
    puts_(o, ")");
}

size_t gc_schema_format(const gc_schema *s, char *buf, size_t size) {
  sink o = {buf, size, 0};
  puts_(&o, s->qualified);
  puts_(&o, "(");
  bool star = false;
  for (int i = 0; i < s->nargs; i++) {
    if (i)
      puts_(&o, ", ");
    if (s->args[i].kwarg_only && !star) {
      puts_(&o, "*, ");
      star = true;
    }
    put_arg(&o, &s->args[i]);
  }
  if (s->vararg)
    puts_(&o, s->nargs ? ", ..." : "...");
  puts_(&o, ") -> ");
  put_returns(&o, s);
  return finish(&o);
}
