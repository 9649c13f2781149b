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
 * Three things torch does that one might not expect, mirrored here when
 * printing: an alias annotation whose sets do not change ("a -> a") prints
 * without its arrow; a single return prints without parentheses unless its
 * type starts with one ("-> ((Tensor, t)[])"); and "*" prints before the
 * first keyword-only argument only, so a trailing "*" disappears.
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

/* ---- parser state and errors ---- */

typedef struct parser {
  gc_arena *a;      /* everything parsed is allocated here */
  const char *text; /* the whole schema, for offsets in messages */
  const char *p;    /* the cursor */
  gc_error *err;    /* filled by the first failure; may be NULL */
  int rc;           /* the code of that failure, 0 until then */
} parser;

/* Fails at `at` with a free-form message. Returns GC_ESCHEMA. */
__attribute__((format(printf, 3, 4))) static int
fail_at(parser *p, const char *at, const char *fmt, ...) {
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
static int expected(parser *p, const char *what) {
  unsigned char c = (unsigned char)*p->p;
  char found[32] = "end of input";
  if (c > ' ' && c < 0x7f)
    snprintf(found, sizeof found, "'%c'", c);
  else if (c)
    snprintf(found, sizeof found, "byte 0x%02x", c);
  return fail_at(p, p->p, "expected %s, found %s", what, found);
}

static int nomem(parser *p) {
  p->rc = GC_ENOMEM;
  return gc_errorf(p->err, GC_ENOMEM, "schema: at offset %zu: out of memory",
                   (size_t)(p->p - p->text));
}

/* ---- characters ---- */

static bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}

static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

static bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_ident_char(char c) {
  return is_ident_start(c) || is_digit(c);
}

static void skip_blanks(parser *p) {
  while (is_blank(*p->p))
    p->p++;
}

/* Skips blanks, then consumes `tok` if the text continues with it. */
static bool accept(parser *p, const char *tok) {
  skip_blanks(p);
  size_t n = strlen(tok);
  if (strncmp(p->p, tok, n) != 0)
    return false;
  p->p += n;
  return true;
}

/* True when the text at `at` is the whole word `w` (not a prefix of one). */
static bool word_at(const char *at, const char *w) {
  size_t n = strlen(w);
  return strncmp(at, w, n) == 0 && !is_ident_char(at[n]);
}

/* ---- memory ---- */

static int dup(parser *p, const char *s, size_t n, const char **out) {
  char *c = gc_arena_strndup(p->a, s, n);
  if (!c)
    return nomem(p);
  *out = c;
  return 0;
}

/* Returns `items` (n used of *cap, `size` bytes each) with room for one more,
 * moved to a twice larger arena block when full; the old block stays in the
 * arena. NULL on failure, with p->rc set. */
static void *reserve(parser *p, void *items, int n, int *cap, size_t size) {
  if (n < *cap)
    return items;
  if (*cap > INT_MAX / 2) {
    fail_at(p, p->p, "too many items");
    return NULL;
  }
  int ncap = *cap ? *cap * 2 : 4;
  void *fresh = gc_arena_calloc(p->a, (size_t)ncap, size);
  if (!fresh) {
    nomem(p);
    return NULL;
  }
  if (n)
    memcpy(fresh, items, (size_t)n * size);
  *cap = ncap;
  return fresh;
}

/* Reads an identifier at the cursor (blanks are not skipped) into *out. */
static int read_ident(parser *p, const char *what, const char **out) {
  const char *s = p->p;
  if (!is_ident_start(*s))
    return expected(p, what);
  while (is_ident_char(*p->p))
    p->p++;
  return dup(p, s, (size_t)(p->p - s), out);
}

/* ---- alias annotations ---- */

/* sets := name ('|' name)* where a name may be '*' */
static int parse_sets(parser *p, const char ***out, int *n) {
  const char **sets = NULL;
  int cap = 0;
  *n = 0;
  do {
    skip_blanks(p);
    const char *name = "*";
    if (*p->p == '*') {
      p->p++;
    } else {
      int rc = read_ident(p, "an alias set name or '*'", &name);
      if (rc)
        return rc;
    }
    if (*n == GC_SCHEMA_MAX_ALIAS_SETS)
      return fail_at(p, p->p, "more than %d alias sets",
                     GC_SCHEMA_MAX_ALIAS_SETS);
    sets = reserve(p, sets, *n, &cap, sizeof *sets);
    if (!sets)
      return p->rc;
    sets[(*n)++] = name;
  } while (accept(p, "|"));
  *out = sets;
  return 0;
}

/* alias := '(' sets ['!'] ['->' sets] ')'; the cursor is on the '('. */
static int parse_alias(parser *p, gc_alias **out) {
  p->p++;
  gc_alias *al = gc_arena_zalloc(p->a, sizeof *al);
  if (!al)
    return nomem(p);
  int rc = parse_sets(p, &al->before, &al->nbefore);
  if (rc)
    return rc;
  if (accept(p, "!"))
    al->is_write = true;
  if (accept(p, "->")) {
    rc = parse_sets(p, &al->after, &al->nafter);
    if (rc)
      return rc;
  }
  if (!accept(p, ")"))
    return expected(p, "')' to close the alias annotation");
  *out = al;
  return 0;
}

/* ---- types ---- */

/* The spelling of each kind, NULL for the composites. */
static const char *const spellings[GC_TY_COUNT] = {
#define X(name, spelling) spelling,
    GC_TYPE_KINDS(X)
#undef X
};

static gc_type *new_type(parser *p, gc_type_kind kind) {
  gc_type *t = gc_arena_zalloc(p->a, sizeof *t);
  if (!t) {
    nomem(p);
    return NULL;
  }
  t->kind = kind;
  t->fixed_len = -1;
  return t;
}

static int too_deep(parser *p, const char *at) {
  return fail_at(p, at, "type nested deeper than %d levels",
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
  if (accept(p, ")"))
    return 0;
  for (;;) {
    gc_type *m = NULL;
    int h;
    int rc = parse_type(p, depth + 1, &m, &h);
    if (rc)
      return rc;
    t->items = reserve(p, t->items, t->nitems, &cap, sizeof *t->items);
    if (!t->items)
      return p->rc;
    t->items[t->nitems++] = m;
    if (h + 1 > *height)
      *height = h + 1;
    if (accept(p, ")"))
      return 0;
    if (!accept(p, ",")) {
      char what[64];
      snprintf(what, sizeof what, "',' or ')' in %s", name);
      return expected(p, what);
    }
  }
}

/* The composites spelled Name(type, ...): how many parameters they take. */
static const struct {
  const char *name;
  gc_type_kind kind;
  int min, max;
} composites[] = {
    {"Dict", GC_TY_DICT, 2, 2},         {"Future", GC_TY_FUTURE, 1, 1},
    {"RRef", GC_TY_RREF, 1, 1},         {"Await", GC_TY_AWAIT, 1, 1},
    {"Union", GC_TY_UNION, 1, INT_MAX},
};

static int parse_composite(parser *p, int c, const char *at, int depth,
                           gc_type **out, int *height) {
  gc_type *t = new_type(p, composites[c].kind);
  if (!t)
    return p->rc;
  skip_blanks(p);
  if (*p->p != '(') {
    char what[64];
    snprintf(what, sizeof what, "'(' after %s", composites[c].name);
    return expected(p, what);
  }
  *height = 1;
  int rc = parse_members(p, t, composites[c].name, depth, height);
  if (rc)
    return rc;
  if (t->nitems < composites[c].min || t->nitems > composites[c].max) {
    if (composites[c].min == composites[c].max)
      return fail_at(p, at, "%s takes %d type%s, found %d", composites[c].name,
                     composites[c].min, composites[c].min == 1 ? "" : "s",
                     t->nitems);
    return fail_at(p, at, "%s takes at least %d type, found %d",
                   composites[c].name, composites[c].min, t->nitems);
  }
  /* The one-parameter composites keep it in elem only, so that walks of
   * the tree never meet a node twice. */
  if (composites[c].max == 1) {
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
  if (!is_ident_start(*at))
    return expected(p, "a type");
  /* A name, dots included: __torch__.torch.classes.quantized.X */
  bool dotted = false;
  while (is_ident_char(*p->p))
    p->p++;
  while (*p->p == '.' && is_ident_start(p->p[1])) {
    dotted = true;
    p->p++;
    while (is_ident_char(*p->p))
      p->p++;
  }
  size_t n = (size_t)(p->p - at);
  if (!dotted) {
    for (size_t c = 0; c < sizeof composites / sizeof *composites; c++)
      if (strlen(composites[c].name) == n &&
          memcmp(composites[c].name, at, n) == 0)
        return parse_composite(p, (int)c, at, depth, out, height);
    for (int k = 0; k < GC_TY_COUNT; k++) {
      const char *s = spellings[k];
      if (s && strlen(s) == n && memcmp(s, at, n) == 0) {
        *out = new_type(p, (gc_type_kind)k);
        return *out ? 0 : p->rc;
      }
    }
    if (!(*at >= 'a' && *at <= 'z'))
      return fail_at(p, at, "unknown type '%.*s'", n > 64 ? 64 : (int)n, at);
  }
  gc_type *t = new_type(p, dotted ? GC_TY_CLASS : GC_TY_VAR);
  if (!t)
    return p->rc;
  *out = t;
  return dup(p, at, n, &t->name);
}

/* The N of "[N]"; the cursor is on the first digit. */
static int parse_fixed_len(parser *p, int *n) {
  const char *at = p->p;
  long v = 0;
  while (is_digit(*p->p)) {
    v = v * 10 + (*p->p++ - '0');
    if (v > GC_SCHEMA_MAX_FIXED_LEN)
      return fail_at(p, at, "list size larger than %d",
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
  skip_blanks(p);
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
  skip_blanks(p);
  if (*p->p == '(' && (rc = parse_alias(p, &t->alias)))
    return rc;
  for (;;) {
    skip_blanks(p);
    if (*p->p == '[') {
      p->p++;
      skip_blanks(p);
      int n = -1;
      if (is_digit(*p->p) && (rc = parse_fixed_len(p, &n)))
        return rc;
      if (!accept(p, "]"))
        return expected(p, "']' to close the list type");
      if ((rc = wrap(p, GC_TY_LIST, &t)))
        return rc;
      t->fixed_len = n;
      skip_blanks(p);
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

typedef enum lit_kind {
  LIT_INT,    /* 1, -100 */
  LIT_FLOAT,  /* 1., 1e-05, inf, -inf, nan */
  LIT_WORD,   /* True, Mean, long, contiguous_format, cpu */
  LIT_STRING, /* "linear", 'L' */
} lit_kind;

typedef struct literal {
  lit_kind kind;
  const char *at; /* where it starts, for messages */
  int64_t i;      /* LIT_INT */
  double f;       /* LIT_FLOAT */
  const char *s;  /* LIT_WORD: the word in the text; LIT_STRING: decoded */
  size_t n;       /* LIT_WORD: its length */
} literal;

static bool lit_is(const literal *l, const char *w) {
  return l->kind == LIT_WORD && strlen(w) == l->n && memcmp(l->s, w, l->n) == 0;
}

/* A number at the cursor; `neg` when a '-' preceded it. Integers are read
 * exactly (with overflow checks), others with strtod. */
static int read_number(parser *p, bool neg, literal *l) {
  const char *s = p->p;
  bool is_float = false;
  while (is_digit(*p->p))
    p->p++;
  if (*p->p == '.') {
    is_float = true;
    p->p++;
    while (is_digit(*p->p))
      p->p++;
  }
  if (*p->p == 'e' || *p->p == 'E') {
    const char *q = p->p + 1;
    if (*q == '+' || *q == '-')
      q++;
    if (is_digit(*q)) {
      is_float = true;
      p->p = q;
      while (is_digit(*p->p))
        p->p++;
    }
  }
  if (is_ident_char(*p->p) || *p->p == '.')
    return fail_at(p, s, "malformed number");
  size_t n = (size_t)(p->p - s);
  if (!is_float) {
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : INT64_MAX;
    for (size_t i = 0; i < n; i++) {
      unsigned d = (unsigned)(s[i] - '0');
      if (v > (limit - d) / 10)
        return fail_at(p, s, "integer out of range");
      v = v * 10 + d;
    }
    l->kind = LIT_INT;
    l->i = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
  }
  const char *copy = NULL;
  int rc = dup(p, s, n, &copy);
  if (rc)
    return rc;
  char *end;
  double f = strtod(copy, &end);
  if (end != copy + n)
    return fail_at(p, s, "malformed number");
  if (!isfinite(f))
    return fail_at(p, s, "number out of range");
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
      return fail_at(p, s + *i - 1, "octal escape out of range");
    *out = v;
    return 0;
  }
  if (e == 'x' && *i + 2 <= n && hex_value(s[*i]) >= 0 &&
      hex_value(s[*i + 1]) >= 0) {
    *out = hex_value(s[*i]) * 16 + hex_value(s[*i + 1]);
    *i += 2;
    return 0;
  }
  return fail_at(p, s + *i - 2, "unknown escape in a string");
}

/* A string in single or double quotes at the cursor, escapes decoded. */
static int read_string(parser *p, literal *l) {
  char quote = *p->p;
  const char *s = p->p + 1;
  size_t n = 0;
  while (s[n] && s[n] != quote)
    n += s[n] == '\\' && s[n + 1] ? 2 : 1;
  if (!s[n])
    return fail_at(p, l->at, "unterminated string");
  char *buf = gc_arena_alloc(p->a, n + 1);
  if (!buf)
    return nomem(p);
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    int c = (unsigned char)s[i++];
    if (c == '\\') {
      int rc = decode_escape(p, s, n, &i, &c);
      if (rc)
        return rc;
      if (c == 0)
        return fail_at(p, s + i - 1, "NUL character in a string");
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
static int read_literal(parser *p, literal *l) {
  skip_blanks(p);
  memset(l, 0, sizeof *l);
  l->at = p->p;
  if (*p->p == '"' || *p->p == '\'')
    return read_string(p, l);
  bool neg = false;
  if (*p->p == '-') {
    neg = true;
    p->p++;
    skip_blanks(p);
  }
  if (is_digit(*p->p) || (*p->p == '.' && is_digit(p->p[1])))
    return read_number(p, neg, l);
  if (word_at(p->p, "inf") || (!neg && word_at(p->p, "nan"))) {
    l->kind = LIT_FLOAT;
    l->f = *p->p == 'n' ? NAN : neg ? -INFINITY : INFINITY;
    p->p += 3;
    return 0;
  }
  if (neg)
    return expected(p, "a number after '-'");
  if (!is_ident_start(*p->p))
    return expected(p, "a default value");
  l->kind = LIT_WORD;
  l->s = p->p;
  while (is_ident_char(*p->p))
    p->p++;
  l->n = (size_t)(p->p - l->s);
  return 0;
}

/* ---- converting defaults ---- */

/* A name and the graph.proto number it stands for. */
typedef struct named {
  const char *name;
  int64_t value;
} named;

/* dtype names: torch's (float32), from dtype.h... */
static const named dtype_names[] = {
#define X(name, num, size, torch) {torch, num},
    GC_DTYPES(X)
#undef X
        {NULL, 0}};

/* ...the legacy short ones (torch.long) and c10's (Long, as C++ prints
 * them). Quantized types are 0: graph.proto has no number for them. */
// clang-format off
static const named dtype_aliases[] = {
    {"short", GC_DTYPE_INT16},     {"int", GC_DTYPE_INT32},
    {"long", GC_DTYPE_INT64},      {"half", GC_DTYPE_FLOAT16},
    {"float", GC_DTYPE_FLOAT32},   {"double", GC_DTYPE_FLOAT64},
    {"chalf", GC_DTYPE_COMPLEX32}, {"cfloat", GC_DTYPE_COMPLEX64},
    {"cdouble", GC_DTYPE_COMPLEX128},
    {"Byte", GC_DTYPE_UINT8},      {"Char", GC_DTYPE_INT8},
    {"Short", GC_DTYPE_INT16},     {"Int", GC_DTYPE_INT32},
    {"Long", GC_DTYPE_INT64},      {"Half", GC_DTYPE_FLOAT16},
    {"Float", GC_DTYPE_FLOAT32},   {"Double", GC_DTYPE_FLOAT64},
    {"ComplexHalf", GC_DTYPE_COMPLEX32},
    {"ComplexFloat", GC_DTYPE_COMPLEX64},
    {"ComplexDouble", GC_DTYPE_COMPLEX128},
    {"Bool", GC_DTYPE_BOOL},       {"BFloat16", GC_DTYPE_BFLOAT16},
    {"UInt16", GC_DTYPE_UINT16},
    {"qint8", GC_DTYPE_UNKNOWN},   {"quint8", GC_DTYPE_UNKNOWN},
    {"qint32", GC_DTYPE_UNKNOWN},  {"quint4x2", GC_DTYPE_UNKNOWN},
    {"quint2x4", GC_DTYPE_UNKNOWN},
    {"QInt8", GC_DTYPE_UNKNOWN},   {"QUInt8", GC_DTYPE_UNKNOWN},
    {"QInt32", GC_DTYPE_UNKNOWN},  {"QUInt4x2", GC_DTYPE_UNKNOWN},
    {"QUInt2x4", GC_DTYPE_UNKNOWN},
    {NULL, 0},
};
// clang-format on

/* c10::ScalarType numbers (what torch prints) in order: Byte, Char, Short,
 * Int, Long, Half, Float, Double, ComplexHalf, ComplexFloat, ComplexDouble,
 * Bool, QInt8, QUInt8, QInt32, BFloat16. Later ones have no proto number. */
static const int64_t c10_dtypes[] = {
    GC_DTYPE_UINT8,     GC_DTYPE_INT8,       GC_DTYPE_INT16,
    GC_DTYPE_INT32,     GC_DTYPE_INT64,      GC_DTYPE_FLOAT16,
    GC_DTYPE_FLOAT32,   GC_DTYPE_FLOAT64,    GC_DTYPE_COMPLEX32,
    GC_DTYPE_COMPLEX64, GC_DTYPE_COMPLEX128, GC_DTYPE_BOOL,
    GC_DTYPE_UNKNOWN,   GC_DTYPE_UNKNOWN,    GC_DTYPE_UNKNOWN,
    GC_DTYPE_BFLOAT16,
};

#define MF(x) COMPILED__V1__MEMORY_FORMAT__MEMORY_FORMAT_##x

static const named memory_format_names[] = {
    {"contiguous_format", MF(CONTIGUOUS)},
    {"preserve_format", MF(PRESERVE)},
    {"channels_last", MF(CHANNELS_LAST)},
    {"channels_last_3d", MF(CHANNELS_LAST_3D)},
    {NULL, 0}};

/* c10::MemoryFormat: Contiguous, Preserve, ChannelsLast, ChannelsLast3d. */
static const int64_t c10_memory_formats[] = {
    MF(CONTIGUOUS), MF(PRESERVE), MF(CHANNELS_LAST), MF(CHANNELS_LAST_3D)};

static const named layout_names[] = {{"strided", GC_LAYOUT_STRIDED},
                                     {"sparse_coo", GC_LAYOUT_SPARSE_COO},
                                     {"sparse_csr", GC_LAYOUT_SPARSE_CSR},
                                     {"sparse_csc", GC_LAYOUT_SPARSE_CSC},
                                     {"sparse_bsr", GC_LAYOUT_SPARSE_BSR},
                                     {"sparse_bsc", GC_LAYOUT_SPARSE_BSC},
                                     {"_mkldnn", GC_LAYOUT_MKLDNN},
                                     {"mkldnn", GC_LAYOUT_MKLDNN},
                                     {NULL, 0}};

/* c10::Layout: Strided, Sparse, SparseCsr, Mkldnn, SparseCsc, SparseBsr,
 * SparseBsc. */
static const int64_t c10_layouts[] = {
    GC_LAYOUT_STRIDED,    GC_LAYOUT_SPARSE_COO, GC_LAYOUT_SPARSE_CSR,
    GC_LAYOUT_MKLDNN,     GC_LAYOUT_SPARSE_CSC, GC_LAYOUT_SPARSE_BSR,
    GC_LAYOUT_SPARSE_BSC,
};

/* The value of the word `l` in `names`; false when it is not there. */
static bool lookup(const named *names, const literal *l, int64_t *v) {
  for (int i = 0; names && names[i].name; i++)
    if (lit_is(l, names[i].name)) {
      *v = names[i].value;
      return true;
    }
  return false;
}

/* An enum default: a name of `names` or `aliases` (may be NULL), or a c10
 * number mapped by `c10` (n entries; past the end is `beyond`, or an error
 * when `beyond` < 0). */
static int convert_enum(parser *p, const literal *l, const named *names,
                        const named *aliases, const int64_t *c10, int64_t n,
                        int64_t beyond, gc_arg_kind kind, const char *type,
                        gc_arg *v) {
  v->kind = kind;
  if (l->kind == LIT_INT && l->i >= 0) {
    if (l->i < n) {
      v->i = c10[l->i];
      return 0;
    }
    if (beyond >= 0) {
      v->i = beyond;
      return 0;
    }
    return fail_at(p, l->at, "%s %lld does not exist", type, (long long)l->i);
  }
  if (lookup(names, l, &v->i) || lookup(aliases, l, &v->i))
    return 0;
  return fail_at(p, l->at, "expected a %s name or number as default", type);
}

/* A device "type" or "type:index", the whole of s[0..n). */
static int convert_device(parser *p, const char *at, const char *s, size_t n,
                          gc_arg *v) {
  size_t i = 0;
  while (i < n && (is_ident_char(s[i]) && !(i == 0 && is_digit(s[i]))))
    i++;
  size_t type_len = i;
  long long index = -1;
  if (i < n && s[i] == ':' && i + 1 < n) {
    index = 0;
    for (i++; i < n && is_digit(s[i]) && index <= INT_MAX; i++)
      index = index * 10 + (s[i] - '0');
  }
  if (type_len == 0 || i != n || index > INT_MAX)
    return fail_at(p, at, "malformed device (expected \"cpu\" or \"cuda:1\")");
  v->kind = GC_ARG_DEVICE;
  v->dev.index = (int)index;
  return dup(p, s, type_len, &v->dev.type);
}

/* A device default: a string, or the unquoted cuda:1 torch prints. */
static int parse_device(parser *p, const literal *l, gc_arg *v) {
  if (l->kind == LIT_STRING)
    return convert_device(p, l->at, l->s, strlen(l->s), v);
  if (l->kind != LIT_WORD)
    return fail_at(p, l->at, "expected a device as default");
  if (*p->p == ':' && is_digit(p->p[1])) {
    p->p++;
    while (is_digit(*p->p))
      p->p++;
  }
  return convert_device(p, l->at, l->at, (size_t)(p->p - l->at), v);
}

static void type_name(const gc_type *t, char *buf, size_t size) {
  size_t n = gc_type_format(t, buf, size);
  if (n >= size && size > 4)
    strcpy(buf + size - 4, "...");
}

/* Converts the literal `l` to a value of the non-list type `t`. */
static int convert(parser *p, const gc_type *t, const literal *l, gc_arg *v) {
  char name[64];
  memset(v, 0, sizeof *v);
  bool is_true = lit_is(l, "True"), is_false = lit_is(l, "False");
  switch (t->kind) {
  case GC_TY_INT:
  case GC_TY_SYMINT:
    v->kind = GC_ARG_INT;
    v->i = l->i;
    if (l->kind == LIT_INT)
      return 0;
    /* at::Reduction, which native_functions.yaml spells by name */
    v->i = lit_is(l, "Mean") ? 1 : lit_is(l, "Sum") ? 2 : -1;
    if (v->i >= 0)
      return 0;
    break;
  case GC_TY_FLOAT:
  case GC_TY_SYMFLOAT:
  case GC_TY_COMPLEX:
    v->kind = GC_ARG_FLOAT;
    v->f = l->kind == LIT_INT ? (double)l->i : l->f;
    if (l->kind == LIT_INT || l->kind == LIT_FLOAT)
      return 0;
    break;
  case GC_TY_BOOL:
  case GC_TY_SYMBOOL:
    v->kind = GC_ARG_BOOL;
    v->i = is_true;
    if (is_true || is_false)
      return 0;
    break;
  case GC_TY_STR:
  case GC_TY_DIMNAME:
    v->kind = GC_ARG_STRING;
    v->s = l->s;
    if (l->kind == LIT_STRING)
      return 0;
    break;
  case GC_TY_SCALAR:
  case GC_TY_NUMBER:
    v->kind = l->kind == LIT_INT ? GC_ARG_INT : GC_ARG_FLOAT;
    v->i = l->i;
    if (l->kind == LIT_FLOAT)
      v->f = l->f;
    if (l->kind == LIT_INT || l->kind == LIT_FLOAT)
      return 0;
    v->kind = GC_ARG_BOOL;
    v->i = is_true;
    if (is_true || is_false)
      return 0;
    break;
  case GC_TY_SCALAR_TYPE:
    return convert_enum(p, l, dtype_names, dtype_aliases, c10_dtypes,
                        sizeof c10_dtypes / sizeof *c10_dtypes,
                        GC_DTYPE_UNKNOWN, GC_ARG_SCALAR_TYPE, "ScalarType", v);
  case GC_TY_MEMORY_FORMAT:
    return convert_enum(p, l, memory_format_names, NULL, c10_memory_formats,
                        sizeof c10_memory_formats / sizeof *c10_memory_formats,
                        -1, GC_ARG_MEMORY_FORMAT, "MemoryFormat", v);
  case GC_TY_LAYOUT:
    return convert_enum(p, l, layout_names, NULL, c10_layouts,
                        sizeof c10_layouts / sizeof *c10_layouts, -1,
                        GC_ARG_LAYOUT, "Layout", v);
  case GC_TY_DEVICE:
    return parse_device(p, l, v);
  default:
    type_name(t, name, sizeof name);
    return fail_at(p, l->at, "a default of type %s is not supported", name);
  }
  type_name(t, name, sizeof name);
  return fail_at(p, l->at, "default does not fit type %s", name);
}

/* The list kind of a default of list type `t`; -1 when there is none. */
static int list_kind(const gc_type *t) {
  const gc_type *e = t->elem;
  switch (e->kind) {
  case GC_TY_INT:
  case GC_TY_SYMINT:
  case GC_TY_SCALAR:
  case GC_TY_NUMBER:
    return GC_ARG_INTS; /* Scalar[] turns FLOATS when an item is a float */
  case GC_TY_FLOAT:
  case GC_TY_SYMFLOAT:
    return GC_ARG_FLOATS;
  case GC_TY_BOOL:
  case GC_TY_SYMBOOL:
    return GC_ARG_BOOLS;
  case GC_TY_STR:
  case GC_TY_DIMNAME:
    return GC_ARG_STRINGS;
  case GC_TY_TENSOR:
    return GC_ARG_TENSORS;
  case GC_TY_OPTIONAL:
    return e->elem->kind == GC_TY_TENSOR ? GC_ARG_OPT_TENSORS : -1;
  default:
    return -1;
  }
}

/* Builds the list value of kind `kind` from n converted items: items[0..n),
 * or items[0] n times when `repeat` (int[2] stride=1). */
static int make_list(parser *p, int kind, const gc_arg *items, int n,
                     bool repeat, const char *at, gc_arg *v) {
  size_t step = repeat ? 0 : 1;
  memset(v, 0, sizeof *v);
  v->n = n;
  bool any_float = false;
  for (int i = 0; i < n; i++) {
    if (items[i * step].kind == GC_ARG_BOOL && kind == GC_ARG_INTS)
      return fail_at(p, at, "a bool in a Scalar[] default");
    any_float |= items[i * step].kind == GC_ARG_FLOAT;
  }
  if (kind == GC_ARG_INTS && any_float)
    kind = GC_ARG_FLOATS;
  v->kind = (gc_arg_kind)kind;
  switch (kind) {
  case GC_ARG_INTS:
  case GC_ARG_BOOLS:
    v->ints = gc_arena_calloc(p->a, (size_t)n + 1, sizeof *v->ints);
    if (!v->ints)
      return nomem(p);
    for (int i = 0; i < n; i++)
      v->ints[i] = items[i * step].i;
    return 0;
  case GC_ARG_FLOATS:
    v->floats = gc_arena_calloc(p->a, (size_t)n + 1, sizeof *v->floats);
    if (!v->floats)
      return nomem(p);
    for (int i = 0; i < n; i++)
      v->floats[i] = items[i * step].kind == GC_ARG_INT
                         ? (double)items[i * step].i
                         : items[i * step].f;
    return 0;
  case GC_ARG_STRINGS:
    v->strs = gc_arena_calloc(p->a, (size_t)n + 1, sizeof *v->strs);
    if (!v->strs)
      return nomem(p);
    for (int i = 0; i < n; i++)
      v->strs[i] = items[i * step].s;
    return 0;
  default: /* TENSORS, OPT_TENSORS: only ever empty */
    v->vals = gc_arena_calloc(p->a, 1, sizeof *v->vals);
    return v->vals ? 0 : nomem(p);
  }
}

/* A default of list type `t`: '[' items ']', or one item repeated N times
 * for a sized list (int[2] stride=1). */
static int parse_list_default(parser *p, const gc_type *t, gc_arg *v) {
  const char *at = p->p;
  int kind = list_kind(t);
  char name[64];
  type_name(t, name, sizeof name);
  if (kind < 0)
    return fail_at(p, at, "a default of type %s is not supported", name);
  bool tensors = kind == GC_ARG_TENSORS || kind == GC_ARG_OPT_TENSORS;
  gc_arg *items = NULL;
  int n = 0, cap = 0;
  if (*p->p == '[') {
    p->p++;
    if (!accept(p, "]")) {
      if (tensors)
        return fail_at(p, at, "a default of type %s must be []", name);
      for (;;) {
        literal l;
        items = reserve(p, items, n, &cap, sizeof *items);
        if (!items)
          return p->rc;
        int rc = read_literal(p, &l);
        if (rc || (rc = convert(p, t->elem, &l, &items[n])))
          return rc;
        n++;
        if (accept(p, "]"))
          break;
        if (!accept(p, ","))
          return expected(p, "',' or ']' in the list default");
      }
    }
  } else {
    if (t->fixed_len < 0 || tensors) {
      char what[96];
      snprintf(what, sizeof what, "'[' to start a default of type %s", name);
      return expected(p, what);
    }
    literal l;
    gc_arg one;
    int rc = read_literal(p, &l);
    if (rc || (rc = convert(p, t->elem, &l, &one)))
      return rc;
    return make_list(p, kind, &one, t->fixed_len, true, at, v);
  }
  return make_list(p, kind, items, n, false, at, v);
}

/* default := 'None' | literal | list, converted by the type `t`. */
static int parse_default(parser *p, const gc_type *t, gc_schema_arg *arg) {
  skip_blanks(p);
  const char *start = p->p;
  int rc;
  while (t->kind == GC_TY_OPTIONAL)
    t = t->elem;
  if (word_at(p->p, "None")) {
    p->p += 4;
    memset(&arg->def, 0, sizeof arg->def);
    arg->def.kind = GC_ARG_NONE;
    rc = 0;
  } else if (t->kind == GC_TY_LIST) {
    rc = parse_list_default(p, t, &arg->def);
  } else {
    literal l;
    rc = read_literal(p, &l);
    if (!rc)
      rc = convert(p, t, &l, &arg->def);
  }
  if (rc)
    return rc;
  arg->has_default = true;
  return dup(p, start, (size_t)(p->p - start), &arg->default_text);
}

/* ---- the schema ---- */

/* qualname := [ns '::'] name ['.' overload] */
static int parse_name(parser *p, gc_schema *s) {
  skip_blanks(p);
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
  return dup(p, start, (size_t)(p->p - start), &s->qualified);
}

/* arg := type name ['=' default] */
static int parse_arg(parser *p, gc_schema_arg *arg, bool kwarg_only) {
  int h;
  int rc = parse_type(p, 0, &arg->type, &h);
  if (rc)
    return rc;
  skip_blanks(p);
  if ((rc = read_ident(p, "an argument name", &arg->name)))
    return rc;
  arg->kwarg_only = kwarg_only;
  if (accept(p, "="))
    return parse_default(p, arg->type, arg);
  return 0;
}

/* '(' args ')', with '*' and a final '...' */
static int parse_args(parser *p, gc_schema *s) {
  int cap = 0;
  bool kwarg_only = false;
  if (!accept(p, "("))
    return expected(p, "'(' after the operator name");
  if (accept(p, ")"))
    return 0;
  for (;;) {
    skip_blanks(p);
    if (strncmp(p->p, "...", 3) == 0) {
      p->p += 3;
      s->vararg = true;
      if (!accept(p, ")"))
        return expected(p, "')' after '...' (it ends the arguments)");
      return 0;
    }
    if (*p->p == '*') {
      if (kwarg_only)
        return fail_at(p, p->p, "'*' given twice");
      p->p++;
      kwarg_only = true;
    } else {
      if (s->nargs == GC_SCHEMA_MAX_ARGS)
        return fail_at(p, p->p, "more than %d arguments", GC_SCHEMA_MAX_ARGS);
      s->args = reserve(p, s->args, s->nargs, &cap, sizeof *s->args);
      if (!s->args)
        return p->rc;
      int rc = parse_arg(p, &s->args[s->nargs], kwarg_only);
      if (rc)
        return rc;
      s->nargs++;
    }
    if (accept(p, ")"))
      return 0;
    if (!accept(p, ","))
      return expected(p, "',' or ')' after an argument");
  }
}

/* ret := type [name] */
static int parse_ret(parser *p, gc_schema *s, int *cap) {
  skip_blanks(p);
  if (s->nrets == GC_SCHEMA_MAX_RETURNS)
    return fail_at(p, p->p, "more than %d returns", GC_SCHEMA_MAX_RETURNS);
  s->rets = reserve(p, s->rets, s->nrets, cap, sizeof *s->rets);
  if (!s->rets)
    return p->rc;
  gc_schema_arg *r = &s->rets[s->nrets++];
  int h;
  int rc = parse_type(p, 0, &r->type, &h);
  if (rc)
    return rc;
  skip_blanks(p);
  if (is_ident_start(*p->p))
    return read_ident(p, "a return name", &r->name);
  return 0;
}

/* '->' (ret | '(' [ret (',' ret)*] [',' '...'] ')' | '...') */
static int parse_returns(parser *p, gc_schema *s) {
  int cap = 0;
  if (!accept(p, "->"))
    return expected(p, "'->' after the arguments");
  if (accept(p, "...")) {
    s->varret = true;
    return 0;
  }
  skip_blanks(p);
  if (*p->p != '(')
    return parse_ret(p, s, &cap);
  p->p++;
  if (accept(p, ")"))
    return 0;
  for (;;) {
    if (accept(p, "...")) {
      s->varret = true;
      if (!accept(p, ")"))
        return expected(p, "')' after '...' (it ends the returns)");
      return 0;
    }
    int rc = parse_ret(p, s, &cap);
    if (rc)
      return rc;
    if (accept(p, ")"))
      return 0;
    if (!accept(p, ","))
      return expected(p, "',' or ')' after a return");
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
    if (!(*v = reserve(p, *v, *n, cap, sizeof **v)))
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
    return nomem(&p);
  int rc = parse_name(&p, s);
  if (!rc)
    rc = parse_args(&p, s);
  if (!rc)
    rc = parse_returns(&p, s);
  if (rc)
    return rc;
  skip_blanks(&p);
  if (*p.p)
    return expected(&p, "the end of the schema after the returns");
  if ((rc = resolve_aliases(&p, s)))
    return rc;
  *out = s;
  return 0;
}

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
    for (size_t c = 0; c < sizeof composites / sizeof *composites; c++)
      if (composites[c].kind == t->kind)
        puts_(o, composites[c].name);
    put_members(o, t);
    break;
  case GC_TY_VAR:
  case GC_TY_CLASS:
    puts_(o, t->name ? t->name : "?");
    break;
  default:
    puts_(o, t->kind < GC_TY_COUNT && spellings[t->kind] ? spellings[t->kind]
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
