/*
 * schema.c: parsing and printing TorchScript function schemas. See schema.h.
 *
 * A schema string is the only thing the daemon knows about an operator it has
 * never seen: what it is called, what it takes, what it returns, and (through
 * the alias annotations) what it writes and which outputs are views of which
 * inputs. So this parser must accept every schema torch prints, and it must
 * print a parsed schema back exactly as torch did, byte for byte: that is the
 * test that nothing was lost (tests/test_schema.c runs it over every schema
 * torch 1.13 ships).
 *
 * The parser is a hand-written recursive descent over the NUL-terminated
 * text, with no separate tokenizer: the grammar is small, and reading
 * characters directly keeps byte offsets exact for error messages. Blanks are
 * skipped between tokens. Each parse_* function consumes one production and
 * returns 0 or a negative GC_E* code; the first failure fills the caller's
 * gc_error ("schema: at offset 17: expected ...") and unwinds. All memory
 * comes from the caller's arena, so a failed parse needs no cleanup: what was
 * allocated dies with the arena.
 *
 * Types are trees (gc_type). Suffixes wrap what came before: "Tensor(a!)[]?"
 * is OPTIONAL(LIST(TENSOR with alias a!)), the alias annotation sitting on
 * the node it follows. Printing walks the same tree in the same order, which
 * is why torch's own spelling comes out: an annotation is printed right after
 * the node it belongs to. Recursion is bounded: a type may nest at most
 * GC_SCHEMA_MAX_DEPTH levels, counted as the height of its tree plus the
 * types enclosing it, and the check happens before descending, so neither
 * parsing nor any later walk of a parsed type can run away on hostile input.
 *
 * Defaults are kept twice: as written (default_text), because torch prints
 * them in ways no single conversion reproduces (1e-05 comes out as
 * 1.0000000000000001e-05, int[2] stride=[1, 1] as stride=1, dtypes as c10
 * enum numbers), and converted by the declared type into a gc_arg, so that
 * an omitted argument and an explicit one compare and hash alike. The enum
 * numbers torch prints are c10's (ScalarType Long is 4); they are translated
 * to graph.proto's numbering (LONG is 5), which is what gc_arg carries.
 *
 * What the compiler asks most (does argument i get written, which argument
 * does return r alias) is answered once, at the end of the parse, and kept
 * in the schema: the alias sets of all arguments are sorted and each return
 * looks its own up. With the limits of schema.h (depth, arguments, alias
 * sets, list length), no text can make parsing or a query superlinear.
 *
 * The file holds the parser; a default's conversion is in schema_default.c
 * and printing in schema_print.c (schema_internal.h is what they share).
 *
 * Three things torch does that one might not expect, mirrored when
 * printing (schema_print.c): an alias annotation whose sets do not change ("a
 * -> a") prints without its arrow; a single return prints without parentheses
 * unless its type starts with one ("-> ((Tensor, t)[])"); and "*" prints before
 * the first keyword-only argument only, so a trailing "*" disappears.
 */
#include "compiler/schema.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiled/v1/graph.pb-c.h"
#include "compiler/dtype.h"
#include "compiler/schema_internal.h"

/* ---- parser state and errors (the state: schema_internal.h) ---- */

/* Fails at `at` with a free-form message. Returns GC_ESCHEMA. */
int sp_fail_at(parser *p, const char *at, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  p->rc = GC_ESCHEMA;
  return gc_errorf(p->err, GC_ESCHEMA, "schema: at offset %zu: %s",
                   (size_t)(at - p->text), msg);
}

/* Fails at the cursor: "expected <what>, found <the character there>". */
int sp_expected(parser *p, const char *what) {
  unsigned char c = (unsigned char)*p->p;
  char found[32] = "end of input";
  if (c > ' ' && c < 0x7f)
    snprintf(found, sizeof found, "'%c'", c);
  else if (c)
    snprintf(found, sizeof found, "byte 0x%02x", c);
  return sp_fail_at(p, p->p, "expected %s, found %s", what, found);
}

int sp_nomem(parser *p) {
  p->rc = GC_ENOMEM;
  return gc_errorf(p->err, GC_ENOMEM, "schema: at offset %zu: out of memory",
                   (size_t)(p->p - p->text));
}

/* ---- characters ---- */

static bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}

bool sp_is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool sp_is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool sp_is_ident_char(char c) {
  return sp_is_ident_start(c) || sp_is_digit(c);
}

void sp_skip_blanks(parser *p) {
  while (is_blank(*p->p))
    p->p++;
}

/* Skips blanks, then consumes `tok` if the text continues with it. */
bool sp_accept(parser *p, const char *tok) {
  sp_skip_blanks(p);
  size_t n = strlen(tok);
  if (strncmp(p->p, tok, n) != 0)
    return false;
  p->p += n;
  return true;
}

/* True when the text at `at` is the whole word `w` (not a prefix of one). */
bool sp_word_at(const char *at, const char *w) {
  size_t n = strlen(w);
  return strncmp(at, w, n) == 0 && !sp_is_ident_char(at[n]);
}

/* ---- memory ---- */

int sp_dup(parser *p, const char *s, size_t n, const char **out) {
  char *c = gc_arena_strndup(p->a, s, n);
  if (!c)
    return sp_nomem(p);
  *out = c;
  return 0;
}

/* Returns `items` (n used of *cap, `size` bytes each) with room for one more,
 * moved to a twice larger arena block when full; the old block stays in the
 * arena. NULL on failure, with p->rc set. */
void *sp_reserve(parser *p, void *items, int n, int *cap, size_t size) {
  if (n == *cap && *cap > INT_MAX / 2) {
    sp_fail_at(p, p->p, "too many items");
    return NULL;
  }
  void *fresh = gc_arena_grow(p->a, items, n, cap, 4, size);
  if (!fresh)
    sp_nomem(p);
  return fresh;
}

/* Reads an identifier at the cursor (blanks are not skipped) into *out. */
static int read_ident(parser *p, const char *what, const char **out) {
  const char *s = p->p;
  if (!sp_is_ident_start(*s))
    return sp_expected(p, what);
  while (sp_is_ident_char(*p->p))
    p->p++;
  return sp_dup(p, s, (size_t)(p->p - s), out);
}

/* ---- alias annotations ---- */

/* sets := name ('|' name)* where a name may be '*' */
static int parse_sets(parser *p, const char ***out, int *n) {
  const char **sets = NULL;
  int cap = 0;
  *n = 0;
  do {
    sp_skip_blanks(p);
    const char *name = "*";
    if (*p->p == '*') {
      p->p++;
    } else {
      int rc = read_ident(p, "an alias set name or '*'", &name);
      if (rc)
        return rc;
    }
    if (*n == GC_SCHEMA_MAX_ALIAS_SETS)
      return sp_fail_at(p, p->p, "more than %d alias sets",
                        GC_SCHEMA_MAX_ALIAS_SETS);
    sets = sp_reserve(p, sets, *n, &cap, sizeof *sets);
    if (!sets)
      return p->rc;
    sets[(*n)++] = name;
  } while (sp_accept(p, "|"));
  *out = sets;
  return 0;
}

/* alias := '(' sets ['!'] ['->' sets] ')'; the cursor is on the '('. */
static int parse_alias(parser *p, gc_alias **out) {
  p->p++;
  gc_alias *al = gc_arena_zalloc(p->a, sizeof *al);
  if (!al)
    return sp_nomem(p);
  int rc = parse_sets(p, &al->before, &al->nbefore);
  if (rc)
    return rc;
  if (sp_accept(p, "!"))
    al->is_write = true;
  if (sp_accept(p, "->")) {
    rc = parse_sets(p, &al->after, &al->nafter);
    if (rc)
      return rc;
  }
  if (!sp_accept(p, ")"))
    return sp_expected(p, "')' to close the alias annotation");
  *out = al;
  return 0;
}

/* ---- types ---- */

/* The spelling of each kind, NULL for the composites. */
const char *const sp_type_spellings[GC_TY_COUNT] = {
#define X(name, spelling) spelling,
    GC_TYPE_KINDS(X)
#undef X
};

static gc_type *new_type(parser *p, gc_type_kind kind) {
  gc_type *t = gc_arena_zalloc(p->a, sizeof *t);
  if (!t) {
    sp_nomem(p);
    return NULL;
  }
  t->kind = kind;
  t->fixed_len = -1;
  return t;
}

static int too_deep(parser *p, const char *at) {
  return sp_fail_at(p, at, "type nested deeper than %d levels",
                    GC_SCHEMA_MAX_DEPTH);
}

static int parse_type(parser *p, int depth, gc_type **out, int *height);

/* '(' [type (',' type)*] ')' for tuples and the parameters of Dict, Future,
 * RRef, Await and Union; `name` names the construct in messages. The cursor
 * is on the '('. Fills t->items and raises *height over the members. */
static int parse_members(parser *p, gc_type *t, const char *name, int depth,
                         int *height) {
  int cap = 0;
  p->p++;
  if (sp_accept(p, ")"))
    return 0;
  for (;;) {
    gc_type *m = NULL;
    int h;
    int rc = parse_type(p, depth + 1, &m, &h);
    if (rc)
      return rc;
    t->items = sp_reserve(p, t->items, t->nitems, &cap, sizeof *t->items);
    if (!t->items)
      return p->rc;
    t->items[t->nitems++] = m;
    if (h + 1 > *height)
      *height = h + 1;
    if (sp_accept(p, ")"))
      return 0;
    if (!sp_accept(p, ",")) {
      char what[64];
      snprintf(what, sizeof what, "',' or ')' in %s", name);
      return sp_expected(p, what);
    }
  }
}

const sp_composite sp_composites[SP_NCOMPOSITES] = {
    {"Dict", GC_TY_DICT, 2, 2},         {"Future", GC_TY_FUTURE, 1, 1},
    {"RRef", GC_TY_RREF, 1, 1},         {"Await", GC_TY_AWAIT, 1, 1},
    {"Union", GC_TY_UNION, 1, INT_MAX},
};

static int parse_composite(parser *p, int c, const char *at, int depth,
                           gc_type **out, int *height) {
  gc_type *t = new_type(p, sp_composites[c].kind);
  if (!t)
    return p->rc;
  sp_skip_blanks(p);
  if (*p->p != '(') {
    char what[64];
    snprintf(what, sizeof what, "'(' after %s", sp_composites[c].name);
    return sp_expected(p, what);
  }
  *height = 1;
  int rc = parse_members(p, t, sp_composites[c].name, depth, height);
  if (rc)
    return rc;
  if (t->nitems < sp_composites[c].min || t->nitems > sp_composites[c].max) {
    if (sp_composites[c].min == sp_composites[c].max)
      return sp_fail_at(p, at, "%s takes %d type%s, found %d",
                        sp_composites[c].name, sp_composites[c].min,
                        sp_composites[c].min == 1 ? "" : "s", t->nitems);
    return sp_fail_at(p, at, "%s takes at least %d type, found %d",
                      sp_composites[c].name, sp_composites[c].min, t->nitems);
  }
  /* The one-parameter composites keep it in elem only, so that walks of
   * the tree never meet a node twice. */
  if (sp_composites[c].max == 1) {
    t->elem = t->items[0];
    t->items = NULL;
    t->nitems = 0;
  }
  *out = t;
  return 0;
}

/* base := simple | composite | '(' tuple ')' | class | type variable */
static int parse_base(parser *p, int depth, gc_type **out, int *height) {
  const char *at = p->p;
  *height = 1;
  if (*at == '(') {
    gc_type *t = new_type(p, GC_TY_TUPLE);
    if (!t)
      return p->rc;
    *out = t;
    return parse_members(p, t, "the tuple type", depth, height);
  }
  if (!sp_is_ident_start(*at))
    return sp_expected(p, "a type");
  /* A name, dots included: __torch__.torch.classes.quantized.X */
  bool dotted = false;
  while (sp_is_ident_char(*p->p))
    p->p++;
  while (*p->p == '.' && sp_is_ident_start(p->p[1])) {
    dotted = true;
    p->p++;
    while (sp_is_ident_char(*p->p))
      p->p++;
  }
  size_t n = (size_t)(p->p - at);
  if (!dotted) {
    for (size_t c = 0; c < sizeof sp_composites / sizeof *sp_composites; c++)
      if (strlen(sp_composites[c].name) == n &&
          memcmp(sp_composites[c].name, at, n) == 0)
        return parse_composite(p, (int)c, at, depth, out, height);
    for (int k = 0; k < GC_TY_COUNT; k++) {
      const char *s = sp_type_spellings[k];
      if (s && strlen(s) == n && memcmp(s, at, n) == 0) {
        *out = new_type(p, (gc_type_kind)k);
        return *out ? 0 : p->rc;
      }
    }
    if (!(*at >= 'a' && *at <= 'z'))
      return sp_fail_at(p, at, "unknown type '%.*s'", n > 64 ? 64 : (int)n, at);
  }
  gc_type *t = new_type(p, dotted ? GC_TY_CLASS : GC_TY_VAR);
  if (!t)
    return p->rc;
  *out = t;
  return sp_dup(p, at, n, &t->name);
}

/* The N of "[N]"; the cursor is on the first digit. */
static int parse_fixed_len(parser *p, int *n) {
  const char *at = p->p;
  long v = 0;
  while (sp_is_digit(*p->p)) {
    v = v * 10 + (*p->p++ - '0');
    if (v > GC_SCHEMA_MAX_FIXED_LEN)
      return sp_fail_at(p, at, "list size larger than %d",
                        GC_SCHEMA_MAX_FIXED_LEN);
  }
  *n = (int)v;
  return 0;
}

/* Wraps *t into a LIST or OPTIONAL node. */
static int wrap(parser *p, gc_type_kind kind, gc_type **t) {
  gc_type *w = new_type(p, kind);
  if (!w)
    return p->rc;
  w->elem = *t;
  *t = w;
  return 0;
}

/*
 * type := base ['(' alias ')'] ('[' [N] ']' ['(' alias ')'] | '?')*
 *
 * `depth` counts the types enclosing this one; *height is the height of the
 * tree returned. depth + height never exceeds GC_SCHEMA_MAX_DEPTH.
 */
static int parse_type(parser *p, int depth, gc_type **out, int *height) {
  sp_skip_blanks(p);
  const char *at = p->p;
  if (depth >= GC_SCHEMA_MAX_DEPTH)
    return too_deep(p, at);
  gc_type *t = NULL;
  int h;
  int rc = parse_base(p, depth, &t, &h);
  if (rc)
    return rc;
  if (depth + h > GC_SCHEMA_MAX_DEPTH)
    return too_deep(p, at);
  sp_skip_blanks(p);
  if (*p->p == '(' && (rc = parse_alias(p, &t->alias)))
    return rc;
  for (;;) {
    sp_skip_blanks(p);
    if (*p->p == '[') {
      p->p++;
      sp_skip_blanks(p);
      int n = -1;
      if (sp_is_digit(*p->p) && (rc = parse_fixed_len(p, &n)))
        return rc;
      if (!sp_accept(p, "]"))
        return sp_expected(p, "']' to close the list type");
      if ((rc = wrap(p, GC_TY_LIST, &t)))
        return rc;
      t->fixed_len = n;
      sp_skip_blanks(p);
      if (*p->p == '(' && (rc = parse_alias(p, &t->alias)))
        return rc;
    } else if (*p->p == '?') {
      p->p++;
      if ((rc = wrap(p, GC_TY_OPTIONAL, &t)))
        return rc;
    } else {
      break;
    }
    if (depth + ++h > GC_SCHEMA_MAX_DEPTH)
      return too_deep(p, at);
  }
  *out = t;
  *height = h;
  return 0;
}

/* ---- literals of defaults ---- */

bool sp_lit_is(const literal *l, const char *w) {
  return l->kind == LIT_WORD && strlen(w) == l->n && memcmp(l->s, w, l->n) == 0;
}

/* A number at the cursor; `neg` when a '-' preceded it. Integers are read
 * exactly (with overflow checks), others with strtod. */
static int read_number(parser *p, bool neg, literal *l) {
  const char *s = p->p;
  bool is_float = false;
  while (sp_is_digit(*p->p))
    p->p++;
  if (*p->p == '.') {
    is_float = true;
    p->p++;
    while (sp_is_digit(*p->p))
      p->p++;
  }
  if (*p->p == 'e' || *p->p == 'E') {
    const char *q = p->p + 1;
    if (*q == '+' || *q == '-')
      q++;
    if (sp_is_digit(*q)) {
      is_float = true;
      p->p = q;
      while (sp_is_digit(*p->p))
        p->p++;
    }
  }
  if (sp_is_ident_char(*p->p) || *p->p == '.')
    return sp_fail_at(p, s, "malformed number");
  size_t n = (size_t)(p->p - s);
  if (!is_float) {
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : INT64_MAX;
    for (size_t i = 0; i < n; i++) {
      unsigned d = (unsigned)(s[i] - '0');
      if (v > (limit - d) / 10)
        return sp_fail_at(p, s, "integer out of range");
      v = v * 10 + d;
    }
    l->kind = LIT_INT;
    l->i = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
  }
  const char *copy = NULL;
  int rc = sp_dup(p, s, n, &copy);
  if (rc)
    return rc;
  char *end;
  double f = strtod(copy, &end);
  if (end != copy + n)
    return sp_fail_at(p, s, "malformed number");
  if (!isfinite(f))
    return sp_fail_at(p, s, "number out of range");
  l->kind = LIT_FLOAT;
  l->f = neg ? -f : f;
  return 0;
}

static int hex_value(char c) {
  const char *digits = "0123456789abcdef0123456789ABCDEF";
  const char *k = c ? strchr(digits, c) : NULL;
  return k ? (int)(k - digits) % 16 : -1;
}

/* Decodes one escape of s[0..n) at *i (just past the backslash). */
static int decode_escape(parser *p, const char *s, size_t n, size_t *i,
                         int *out) {
  static const char from[] = "ntrfvab\\'\"";
  static const char to[] = "\n\t\r\f\v\a\b\\'\"";
  char e = s[(*i)++];
  const char *k = strchr(from, e);
  if (k && e) {
    *out = to[k - from];
    return 0;
  }
  if (e >= '0' && e <= '7') {
    int v = e - '0';
    for (int j = 0; j < 2 && *i < n && s[*i] >= '0' && s[*i] <= '7'; j++)
      v = v * 8 + (s[(*i)++] - '0');
    if (v > 255)
      return sp_fail_at(p, s + *i - 1, "octal escape out of range");
    *out = v;
    return 0;
  }
  if (e == 'x' && *i + 2 <= n && hex_value(s[*i]) >= 0 &&
      hex_value(s[*i + 1]) >= 0) {
    *out = hex_value(s[*i]) * 16 + hex_value(s[*i + 1]);
    *i += 2;
    return 0;
  }
  return sp_fail_at(p, s + *i - 2, "unknown escape in a string");
}

/* A string in single or double quotes at the cursor, escapes decoded. */
static int read_string(parser *p, literal *l) {
  char quote = *p->p;
  const char *s = p->p + 1;
  size_t n = 0;
  while (s[n] && s[n] != quote)
    n += s[n] == '\\' && s[n + 1] ? 2 : 1;
  if (!s[n])
    return sp_fail_at(p, l->at, "unterminated string");
  char *buf = gc_arena_alloc(p->a, n + 1);
  if (!buf)
    return sp_nomem(p);
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    int c = (unsigned char)s[i++];
    if (c == '\\') {
      int rc = decode_escape(p, s, n, &i, &c);
      if (rc)
        return rc;
      if (c == 0)
        return sp_fail_at(p, s + i - 1, "NUL character in a string");
    }
    buf[o++] = (char)c;
  }
  buf[o] = '\0';
  p->p = s + n + 1;
  l->kind = LIT_STRING;
  l->s = buf;
  return 0;
}

/* literal := ['-'] number | ['-'] inf | nan | word | string */
int sp_read_literal(parser *p, literal *l) {
  sp_skip_blanks(p);
  memset(l, 0, sizeof *l);
  l->at = p->p;
  if (*p->p == '"' || *p->p == '\'')
    return read_string(p, l);
  bool neg = false;
  if (*p->p == '-') {
    neg = true;
    p->p++;
    sp_skip_blanks(p);
  }
  if (sp_is_digit(*p->p) || (*p->p == '.' && sp_is_digit(p->p[1])))
    return read_number(p, neg, l);
  if (sp_word_at(p->p, "inf") || (!neg && sp_word_at(p->p, "nan"))) {
    l->kind = LIT_FLOAT;
    l->f = *p->p == 'n' ? NAN : neg ? -INFINITY : INFINITY;
    p->p += 3;
    return 0;
  }
  if (neg)
    return sp_expected(p, "a number after '-'");
  if (!sp_is_ident_start(*p->p))
    return sp_expected(p, "a default value");
  l->kind = LIT_WORD;
  l->s = p->p;
  while (sp_is_ident_char(*p->p))
    p->p++;
  l->n = (size_t)(p->p - l->s);
  return 0;
}

/* ---- the schema ---- */

/* qualname := [ns '::'] name ['.' overload] */
static int parse_name(parser *p, gc_schema *s) {
  sp_skip_blanks(p);
  const char *start = p->p;
  const char *first = NULL;
  int rc = read_ident(p, "an operator name", &first);
  if (rc)
    return rc;
  s->ns = "";
  s->name = first;
  if (p->p[0] == ':' && p->p[1] == ':') {
    p->p += 2;
    s->ns = first;
    if ((rc = read_ident(p, "an operator name after '::'", &s->name)))
      return rc;
  }
  s->overload = "";
  if (*p->p == '.') {
    p->p++;
    if ((rc = read_ident(p, "an overload name after '.'", &s->overload)))
      return rc;
  }
  return sp_dup(p, start, (size_t)(p->p - start), &s->qualified);
}

/* arg := type name ['=' default] */
static int parse_arg(parser *p, gc_schema_arg *arg, bool kwarg_only) {
  int h;
  int rc = parse_type(p, 0, &arg->type, &h);
  if (rc)
    return rc;
  sp_skip_blanks(p);
  if ((rc = read_ident(p, "an argument name", &arg->name)))
    return rc;
  arg->kwarg_only = kwarg_only;
  if (sp_accept(p, "="))
    return sp_parse_default(p, arg->type, arg);
  return 0;
}

/* '(' args ')', with '*' and a final '...' */
static int parse_args(parser *p, gc_schema *s) {
  int cap = 0;
  bool kwarg_only = false;
  if (!sp_accept(p, "("))
    return sp_expected(p, "'(' after the operator name");
  if (sp_accept(p, ")"))
    return 0;
  for (;;) {
    sp_skip_blanks(p);
    if (strncmp(p->p, "...", 3) == 0) {
      p->p += 3;
      s->vararg = true;
      if (!sp_accept(p, ")"))
        return sp_expected(p, "')' after '...' (it ends the arguments)");
      return 0;
    }
    if (*p->p == '*') {
      if (kwarg_only)
        return sp_fail_at(p, p->p, "'*' given twice");
      p->p++;
      kwarg_only = true;
    } else {
      if (s->nargs == GC_SCHEMA_MAX_ARGS)
        return sp_fail_at(p, p->p, "more than %d arguments",
                          GC_SCHEMA_MAX_ARGS);
      s->args = sp_reserve(p, s->args, s->nargs, &cap, sizeof *s->args);
      if (!s->args)
        return p->rc;
      int rc = parse_arg(p, &s->args[s->nargs], kwarg_only);
      if (rc)
        return rc;
      s->nargs++;
    }
    if (sp_accept(p, ")"))
      return 0;
    if (!sp_accept(p, ","))
      return sp_expected(p, "',' or ')' after an argument");
  }
}

/* ret := type [name] */
static int parse_ret(parser *p, gc_schema *s, int *cap) {
  sp_skip_blanks(p);
  if (s->nrets == GC_SCHEMA_MAX_RETURNS)
    return sp_fail_at(p, p->p, "more than %d returns", GC_SCHEMA_MAX_RETURNS);
  s->rets = sp_reserve(p, s->rets, s->nrets, cap, sizeof *s->rets);
  if (!s->rets)
    return p->rc;
  gc_schema_arg *r = &s->rets[s->nrets++];
  int h;
  int rc = parse_type(p, 0, &r->type, &h);
  if (rc)
    return rc;
  sp_skip_blanks(p);
  if (sp_is_ident_start(*p->p))
    return read_ident(p, "a return name", &r->name);
  return 0;
}

/* '->' (ret | '(' [ret (',' ret)*] [',' '...'] ')' | '...') */
static int parse_returns(parser *p, gc_schema *s) {
  int cap = 0;
  if (!sp_accept(p, "->"))
    return sp_expected(p, "'->' after the arguments");
  if (sp_accept(p, "...")) {
    s->varret = true;
    return 0;
  }
  sp_skip_blanks(p);
  if (*p->p != '(')
    return parse_ret(p, s, &cap);
  p->p++;
  if (sp_accept(p, ")"))
    return 0;
  for (;;) {
    if (sp_accept(p, "...")) {
      s->varret = true;
      if (!sp_accept(p, ")"))
        return sp_expected(p, "')' after '...' (it ends the returns)");
      return 0;
    }
    int rc = parse_ret(p, s, &cap);
    if (rc)
      return rc;
    if (sp_accept(p, ")"))
      return 0;
    if (!sp_accept(p, ","))
      return sp_expected(p, "',' or ')' after a return");
  }
}

/* ---- resolving aliases, once per schema ---- */

/* True when an annotation anywhere in `t` has "!". */
static bool type_writes(const gc_type *t) {
  if (t->alias && t->alias->is_write)
    return true;
  if (t->elem && type_writes(t->elem))
    return true;
  for (int i = 0; i < t->nitems; i++)
    if (type_writes(t->items[i]))
      return true;
  return false;
}

/* An alias set named (before an arrow) in the type of argument `arg`. */
typedef struct owner {
  const char *set;
  int arg;
} owner;

static int owner_cmp(const void *x, const void *y) {
  const owner *a = x, *b = y;
  int c = strcmp(a->set, b->set);
  return c ? c : (a->arg > b->arg) - (a->arg < b->arg);
}

/* Appends every set named in `t` (but the wildcard) as owned by `arg`. */
static int collect_sets(parser *p, const gc_type *t, int arg, owner **v, int *n,
                        int *cap) {
  for (int k = 0; t->alias && k < t->alias->nbefore; k++) {
    if (strcmp(t->alias->before[k], "*") == 0)
      continue;
    if (!(*v = sp_reserve(p, *v, *n, cap, sizeof **v)))
      return p->rc;
    (*v)[(*n)++] = (owner){t->alias->before[k], arg};
  }
  int rc = t->elem ? collect_sets(p, t->elem, arg, v, n, cap) : 0;
  for (int i = 0; !rc && i < t->nitems; i++)
    rc = collect_sets(p, t->items[i], arg, v, n, cap);
  return rc;
}

/* The first argument owning `set` in the sorted v[0..n); -1 when none. */
static int owner_of(const owner *v, int n, const char *set) {
  int lo = 0, hi = n; /* the first entry not below `set` is in [lo, hi] */
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (strcmp(v[mid].set, set) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && strcmp(v[lo].set, set) == 0 ? v[lo].arg : -1;
}

/*
 * Fills is_write and alias_of, so that the queries cost nothing and a
 * hostile schema (many returns, many sets) cannot make them quadratic: the
 * sets of all arguments are sorted once, and each return looks its own up.
 * A return's annotation is its own, else its list or optional element's.
 */
static int resolve_aliases(parser *p, gc_schema *s) {
  owner *v = NULL;
  int n = 0, cap = 0;
  for (int i = 0; i < s->nargs; i++) {
    s->args[i].is_write = type_writes(s->args[i].type);
    s->args[i].alias_of = -1;
    int rc = collect_sets(p, s->args[i].type, i, &v, &n, &cap);
    if (rc)
      return rc;
  }
  if (n > 1)
    qsort(v, (size_t)n, sizeof *v, owner_cmp);
  for (int r = 0; r < s->nrets; r++) {
    const gc_type *t = s->rets[r].type;
    s->rets[r].is_write = type_writes(t);
    s->rets[r].alias_of = -1;
    while (!t->alias && (t->kind == GC_TY_LIST || t->kind == GC_TY_OPTIONAL))
      t = t->elem;
    for (int k = 0; t->alias && k < t->alias->nbefore; k++) {
      s->rets[r].alias_of = owner_of(v, n, t->alias->before[k]);
      if (s->rets[r].alias_of >= 0)
        break;
    }
  }
  return 0;
}

int gc_schema_parse(gc_arena *a, const char *text, gc_schema **out,
                    gc_error *err) {
  if (!a || !text || !out)
    return gc_errorf(err, GC_ESCHEMA, "schema: no text to parse");
  parser p = {.a = a, .text = text, .p = text, .err = err};
  gc_schema *s = gc_arena_zalloc(a, sizeof *s);
  if (!s)
    return sp_nomem(&p);
  int rc = parse_name(&p, s);
  if (!rc)
    rc = parse_args(&p, s);
  if (!rc)
    rc = parse_returns(&p, s);
  if (rc)
    return rc;
  sp_skip_blanks(&p);
  if (*p.p)
    return sp_expected(&p, "the end of the schema after the returns");
  if ((rc = resolve_aliases(&p, s)))
    return rc;
  *out = s;
  return 0;
}

/* ---- alias queries ---- */

bool gc_schema_arg_is_write(const gc_schema *s, int i) {
  return s && i >= 0 && i < s->nargs && s->args[i].is_write;
}

int gc_schema_return_alias(const gc_schema *s, int r) {
  return s && r >= 0 && r < s->nrets ? s->rets[r].alias_of : -1;
}

bool gc_schema_is_mutating(const gc_schema *s) {
  for (int i = 0; s && i < s->nargs; i++)
    if (gc_schema_arg_is_write(s, i))
      return true;
  return false;
}

bool gc_schema_is_out_variant(const gc_schema *s) {
  bool writes_kwarg = false;
  for (int i = 0; s && i < s->nargs; i++)
    if (s->args[i].kwarg_only && gc_schema_arg_is_write(s, i))
      writes_kwarg = true;
  if (!writes_kwarg)
    return false;
  for (int r = 0; r < s->nrets; r++) {
    int i = gc_schema_return_alias(s, r);
    if (i < 0 || !s->args[i].kwarg_only || !gc_schema_arg_is_write(s, i))
      return false;
  }
  return true;
}

int gc_schema_find_arg(const gc_schema *s, const char *name) {
  for (int i = 0; s && name && i < s->nargs; i++)
    if (s->args[i].name && strcmp(s->args[i].name, name) == 0)
      return i;
  return -1;
}
