/*
 * symexpr.c: a parser for symbolic expressions. See symexpr.h.
 *
 * One function per precedence level, as in symexpr.h's grammar, but only
 * parentheses and function calls recurse: prefix operators ("- - x",
 * "not not p") are counted in a loop and applied afterwards, a "**" chain is
 * read into a list and folded from the right, and chains of "+", "*", "and"
 * and "or" are gathered into one n-ary node. So the C stack holds at most a
 * fixed number of frames per open parenthesis, and the parenthesis count is
 * checked against the depth limit when one opens.
 *
 * Every node is made by one function (make), which computes its height and
 * size from its operands and refuses it past the limits: no tree taller or
 * larger than the limits ever exists, so nothing that walks one later has
 * to check again.
 */
#include "compiler/symexpr.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
  gc_arena *arena;
  const char *text; /* the whole expression */
  const char *p;    /* next unread character */
  int nesting;      /* open parentheses and calls */
  int max_depth;    /* limit on tree height and nesting */
  int max_nodes;    /* limit on nodes; INT32_MAX when none */
  int nodes;        /* nodes made so far */
  gc_error *err;
  int rc; /* first error; 0 while none */
} parser;

/* A growing operand list (arena memory; outgrown blocks stay there). */
typedef struct list {
  gc_symexpr **items;
  int n, cap;
} list;

static gc_symexpr *parse_or(parser *ps);

static gc_symexpr *fail(parser *ps, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static gc_symexpr *fail(parser *ps, int code, const char *fmt, ...) {
  if (ps->rc)
    return NULL;
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  size_t len = strlen(ps->text);
  ps->rc = gc_errorf(
      ps->err, code, "symbolic expression \"%.64s%s\": at offset %d: %s",
      ps->text, len > 64 ? "..." : "", (int)(ps->p - ps->text), what);
  return NULL;
}

static void skip_space(parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t')
    ps->p++;
}

/* Consumes `tok` when it comes next (a word token must not run on into an
 * identifier character; "*" must not be the start of "**", "/" of "//"). */
static int accept(parser *ps, const char *tok) {
  skip_space(ps);
  size_t n = strlen(tok);
  if (strncmp(ps->p, tok, n) != 0)
    return 0;
  if (isalpha((unsigned char)tok[0]) &&
      (isalnum((unsigned char)ps->p[n]) || ps->p[n] == '_'))
    return 0;
  if (n == 1 && (tok[0] == '*' || tok[0] == '/') && ps->p[1] == tok[0])
    return 0;
  ps->p += n;
  return 1;
}

/* Refuses the text for nesting past the depth limit. Returns NULL. */
static gc_symexpr *too_deep(parser *ps) {
  return fail(ps, GC_ELIMIT,
              "nests deeper than %d levels, the limit (every operator, call "
              "and parenthesis is a level)",
              ps->max_depth);
}

/* ---- making nodes within the limits ---- */

/* A node of kind `k` over `nargs` operands (copied). Computes height and
 * size and refuses the node past a limit. NULL on failure. */
static gc_symexpr *make(parser *ps, gc_sx_kind k, gc_symexpr *const *args,
                        int nargs) {
  if (ps->rc)
    return NULL;
  int height = 1, size = 1;
  for (int i = 0; i < nargs; i++) {
    if (!args[i])
      return NULL;
    if (args[i]->height + 1 > height)
      height = args[i]->height + 1;
    size += args[i]->size;
  }
  if (height > ps->max_depth)
    return too_deep(ps);
  if (++ps->nodes > ps->max_nodes)
    return fail(ps, GC_ELIMIT,
                "has more than %d nodes, the limit (every number, symbol, "
                "operator and call is a node)",
                ps->max_nodes);
  gc_symexpr *e = gc_arena_zalloc(ps->arena, sizeof *e);
  if (e && nargs) {
    e->args = gc_arena_calloc(ps->arena, (size_t)nargs, sizeof *e->args);
    if (!e->args)
      e = NULL;
  }
  if (!e)
    return fail(ps, GC_ENOMEM, "out of memory");
  e->kind = k;
  e->nargs = nargs;
  e->height = height;
  e->size = size;
  if (nargs)
    memcpy(e->args, args, (size_t)nargs * sizeof *args);
  return e;
}

static gc_symexpr *unary_node(parser *ps, gc_sx_kind k, gc_symexpr *x) {
  return make(ps, k, &x, 1);
}

static bool is_zero_literal(const gc_symexpr *e) {
  while (e->kind == GC_SX_NEG)
    e = e->args[0];
  return (e->kind == GC_SX_INT && e->i == 0) ||
         (e->kind == GC_SX_FLOAT && e->f == 0.0);
}

static gc_symexpr *binary_node(parser *ps, gc_sx_kind k, gc_symexpr *l,
                               gc_symexpr *r, const char *op) {
  if (!l || !r)
    return NULL;
  if ((k == GC_SX_DIV || k == GC_SX_FLOORDIV || k == GC_SX_MOD) &&
      is_zero_literal(r))
    return fail(ps, GC_EINVAL, "'%s' by zero", op);
  gc_symexpr *args[2] = {l, r};
  return make(ps, k, args, 2);
}

/* Appends `x` (NULL: an error is pending) to `l`. Returns 0 or -1. */
static int push(parser *ps, list *l, gc_symexpr *x) {
  if (!x)
    return -1;
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 8;
    gc_symexpr **items = gc_arena_calloc(ps->arena, (size_t)cap, sizeof *items);
    if (!items) {
      fail(ps, GC_ENOMEM, "out of memory");
      return -1;
    }
    if (l->n)
      memcpy(items, l->items, (size_t)l->n * sizeof *items);
    l->items = items;
    l->cap = cap;
  }
  l->items[l->n++] = x;
  return 0;
}

/* The node for a gathered chain: its only operand, or an n-ary node. */
static gc_symexpr *chain(parser *ps, gc_sx_kind k, const list *l) {
  if (ps->rc)
    return NULL;
  return l->n == 1 ? l->items[0] : make(ps, k, l->items, l->n);
}

/* ---- atoms ---- */

static gc_symexpr *parse_number(parser *ps) {
  const char *start = ps->p;
  while (isdigit((unsigned char)*ps->p))
    ps->p++;
  char *end;
  errno = 0;
  if (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E') {
    double f = strtod(start, &end);
    if (end == start || errno == ERANGE)
      return fail(ps, GC_EINVAL, "bad number");
    ps->p = end;
    gc_symexpr *e = make(ps, GC_SX_FLOAT, NULL, 0);
    if (e)
      e->f = f;
    return e;
  }
  long long v = strtoll(start, &end, 10);
  if (errno == ERANGE)
    return fail(ps, GC_EINVAL, "integer out of int64 range");
  ps->p = end;
  gc_symexpr *e = make(ps, GC_SX_INT, NULL, 0);
  if (e)
    e->i = v;
  return e;
}

static const struct {
  const char *name;
  gc_sx_kind kind;
  int min_args, max_args;
} funcs[] = {
    {"max", GC_SX_MAX, 2, INT32_MAX}, {"min", GC_SX_MIN, 2, INT32_MAX},
    {"floor", GC_SX_FLOOR, 1, 1},     {"ceil", GC_SX_CEIL, 1, 1},
    {"abs", GC_SX_ABS, 1, 1},
};

/* Opens a parenthesis or a call: one more level of nesting. */
static int enter(parser *ps) {
  if (++ps->nesting > ps->max_depth) {
    too_deep(ps);
    return 0;
  }
  return 1;
}

/* The arguments of a call after "name(", up to and including ")". */
static gc_symexpr *parse_call(parser *ps, int f) {
  if (!enter(ps))
    return NULL;
  list args = {0};
  do {
    if (args.n == funcs[f].max_args)
      return fail(ps, GC_EINVAL, "%s() takes %d argument%s", funcs[f].name,
                  funcs[f].max_args, funcs[f].max_args == 1 ? "" : "s");
    if (push(ps, &args, parse_or(ps)))
      return NULL;
  } while (accept(ps, ","));
  if (!accept(ps, ")"))
    return fail(ps, GC_EINVAL, "expected ',' or ')' in the arguments of %s()",
                funcs[f].name);
  ps->nesting--;
  if (args.n < funcs[f].min_args)
    return fail(ps, GC_EINVAL, "%s() takes at least %d arguments",
                funcs[f].name, funcs[f].min_args);
  return make(ps, funcs[f].kind, args.items, args.n);
}

static gc_symexpr *parse_name(parser *ps) {
  const char *start = ps->p;
  while (isalnum((unsigned char)*ps->p) || *ps->p == '_')
    ps->p++;
  size_t n = (size_t)(ps->p - start);
  if ((n == 4 && !strncmp(start, "True", 4)) ||
      (n == 5 && !strncmp(start, "False", 5))) {
    gc_symexpr *e = make(ps, GC_SX_BOOL, NULL, 0);
    if (e)
      e->i = n == 4;
    return e;
  }
  if (accept(ps, "(")) {
    for (int f = 0; f < (int)(sizeof funcs / sizeof funcs[0]); f++)
      if (strlen(funcs[f].name) == n && !strncmp(start, funcs[f].name, n))
        return parse_call(ps, f);
    ps->p = start;
    return fail(ps, GC_EINVAL, "unknown function (max, min, floor, ceil, abs)");
  }
  gc_symexpr *e = make(ps, GC_SX_SYM, NULL, 0);
  if (e && !(e->name = gc_arena_strndup(ps->arena, start, n)))
    return fail(ps, GC_ENOMEM, "out of memory");
  return e;
}

static gc_symexpr *parse_atom(parser *ps) {
  skip_space(ps);
  if (isdigit((unsigned char)*ps->p) ||
      (*ps->p == '.' && isdigit((unsigned char)ps->p[1])))
    return parse_number(ps);
  if (accept(ps, "(")) {
    if (!enter(ps))
      return NULL;
    gc_symexpr *e = parse_or(ps);
    if (e && !accept(ps, ")"))
      return fail(ps, GC_EINVAL, "expected ')'");
    ps->nesting--;
    return e;
  }
  if (isalpha((unsigned char)*ps->p) || *ps->p == '_')
    return parse_name(ps);
  if (*ps->p == '\0')
    return fail(ps, GC_EINVAL, "unexpected end of expression");
  return fail(ps, GC_EINVAL, "expected a number, symbol or '('");
}

/* ---- operators ---- */

/* Counts prefix minus signs ("- -x" and "--x" are both two). */
static int count_minus(parser *ps) {
  int n = 0;
  for (;;) {
    skip_space(ps);
    if (*ps->p != '-')
      return n;
    ps->p++;
    n++;
  }
}

/* Wraps `e` in `n` nodes of kind `k` (NEG, NOT). */
static gc_symexpr *wrap(parser *ps, gc_sx_kind k, int n, gc_symexpr *e) {
  for (int i = 0; i < n && e; i++)
    e = unary_node(ps, k, e);
  return e;
}

/* unary := "-"* power;  power := atom ["**" unary]. A chain
 * a ** -b ** c is read as the operands a, b, c with the minus counts before
 * each, then folded from the right: a ** (-(b ** c)). */
static gc_symexpr *parse_unary(parser *ps) {
  int lead = count_minus(ps);
  list operands = {0};
  int *negs = NULL, cap = 0, n = 0; /* negs[i]: minus signs before operand
                                       i + 1 */
  for (;;) {
    gc_symexpr *atom = parse_atom(ps);
    if (push(ps, &operands, atom))
      return NULL;
    if (!accept(ps, "**"))
      break;
    if (operands.n >= ps->max_depth) /* the fold would be this high */
      return too_deep(ps);
    if (n == cap) {
      int ncap = cap ? 2 * cap : 8;
      int *nn = gc_arena_calloc(ps->arena, (size_t)ncap, sizeof *nn);
      if (!nn)
        return fail(ps, GC_ENOMEM, "out of memory");
      if (n)
        memcpy(nn, negs, (size_t)n * sizeof *nn);
      negs = nn;
      cap = ncap;
    }
    negs[n++] = count_minus(ps);
  }
  gc_symexpr *acc = operands.items[operands.n - 1];
  for (int i = operands.n - 1; i >= 1 && acc; i--) {
    acc = wrap(ps, GC_SX_NEG, negs[i - 1], acc);
    acc = binary_node(ps, GC_SX_POW, operands.items[i - 1], acc, "**");
  }
  return wrap(ps, GC_SX_NEG, lead, acc);
}

/* prod := unary (("*"|"/"|"//"|"%") unary)*: runs of "*" make one MUL. */
static gc_symexpr *parse_prod(parser *ps) {
  static const struct {
    const char *tok;
    gc_sx_kind kind;
  } ops[] = {{"//", GC_SX_FLOORDIV}, {"/", GC_SX_DIV}, {"%", GC_SX_MOD}};
  list run = {0}; /* factors of the current run of '*' */
  if (push(ps, &run, parse_unary(ps)))
    return NULL;
  for (;;) {
    if (accept(ps, "*")) {
      if (push(ps, &run, parse_unary(ps)))
        return NULL;
      continue;
    }
    size_t k = 0;
    while (k < sizeof ops / sizeof ops[0] && !accept(ps, ops[k].tok))
      k++;
    if (k == sizeof ops / sizeof ops[0])
      break;
    gc_symexpr *left = chain(ps, GC_SX_MUL, &run);
    gc_symexpr *e =
        binary_node(ps, ops[k].kind, left, parse_unary(ps), ops[k].tok);
    run = (list){0};
    if (push(ps, &run, e))
      return NULL;
  }
  return chain(ps, GC_SX_MUL, &run);
}

/* sum := prod (("+"|"-") prod)*: one ADD, "a - b" as the term NEG(b). */
static gc_symexpr *parse_sum(parser *ps) {
  list terms = {0};
  if (push(ps, &terms, parse_prod(ps)))
    return NULL;
  for (;;) {
    gc_symexpr *t;
    if (accept(ps, "+"))
      t = parse_prod(ps);
    else if (accept(ps, "-"))
      t = unary_node(ps, GC_SX_NEG, parse_prod(ps));
    else
      break;
    if (push(ps, &terms, t))
      return NULL;
  }
  return chain(ps, GC_SX_ADD, &terms);
}

static gc_symexpr *parse_cmp(parser *ps) {
  static const struct {
    const char *tok;
    gc_sx_kind kind;
  } ops[] = {{"==", GC_SX_EQ}, {"!=", GC_SX_NE}, {"<=", GC_SX_LE},
             {">=", GC_SX_GE}, {"<", GC_SX_LT},  {">", GC_SX_GT}};
  gc_symexpr *e = parse_sum(ps);
  if (!e)
    return NULL;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (accept(ps, ops[i].tok))
      return binary_node(ps, ops[i].kind, e, parse_sum(ps), ops[i].tok);
  return e;
}

/* not := "not"* cmp */
static gc_symexpr *parse_not(parser *ps) {
  int n = 0;
  while (accept(ps, "not"))
    n++;
  return wrap(ps, GC_SX_NOT, n, parse_cmp(ps));
}

/* and := not ("and" not)*, one AND node. */
static gc_symexpr *parse_and(parser *ps) {
  list l = {0};
  if (push(ps, &l, parse_not(ps)))
    return NULL;
  while (accept(ps, "and"))
    if (push(ps, &l, parse_not(ps)))
      return NULL;
  return chain(ps, GC_SX_AND, &l);
}

/* or := and ("or" and)*, one OR node. */
static gc_symexpr *parse_or(parser *ps) {
  list l = {0};
  if (push(ps, &l, parse_and(ps)))
    return NULL;
  while (accept(ps, "or"))
    if (push(ps, &l, parse_and(ps)))
      return NULL;
  return chain(ps, GC_SX_OR, &l);
}

int gc_symexpr_parse(gc_arena *a, const char *text,
                     const gc_symexpr_limits *lim, gc_symexpr **out,
                     gc_error *err) {
  int depth = lim ? lim->max_depth : GC_SYMEXPR_MAX_DEPTH;
  if (depth < 1 || depth > GC_SYMEXPR_MAX_DEPTH)
    depth = GC_SYMEXPR_MAX_DEPTH;
  parser ps = {.arena = a,
               .text = text,
               .p = text,
               .max_depth = depth,
               .max_nodes =
                   lim && lim->max_nodes > 0 ? lim->max_nodes : INT32_MAX,
               .err = err};
  skip_space(&ps);
  if (*ps.p == '\0')
    return gc_errorf(err, GC_EINVAL, "symbolic expression is empty");
  gc_symexpr *e = parse_or(&ps);
  if (e) {
    skip_space(&ps);
    if (*ps.p != '\0')
      fail(&ps, GC_EINVAL, "unexpected text after the expression");
  }
  if (ps.rc)
    return ps.rc;
  if (!e) /* every failure sets rc; this is a guard */
    return gc_errorf(err, GC_EINTERNAL, "symbolic expression: parse failed");
  *out = e;
  return 0;
}

/* ---- printing ---- */

static const char *kind_text(gc_sx_kind k) {
  switch (k) {
#define X(name, text)                                                          \
  case GC_SX_##name:                                                           \
    return text;
    GC_SX_KINDS(X)
#undef X
  }
  return "?";
}

/* Recursion is bounded: a parsed tree is at most GC_SYMEXPR_MAX_DEPTH high. */
void gc_symexpr_print(const gc_symexpr *e, gc_buf *out) {
  switch (e->kind) {
  case GC_SX_INT:
    gc_buf_printf(out, "%" PRId64, e->i);
    return;
  case GC_SX_FLOAT:
    gc_buf_printf(out, "%.17g", e->f);
    return;
  case GC_SX_BOOL:
    gc_buf_puts(out, e->i ? "True" : "False");
    return;
  case GC_SX_SYM:
    gc_buf_puts(out, e->name);
    return;
  default:
    break;
  }
  gc_buf_printf(out, "(%s", kind_text(e->kind));
  for (int i = 0; i < e->nargs; i++) {
    gc_buf_puts(out, " ");
    gc_symexpr_print(e->args[i], out);
  }
  gc_buf_puts(out, ")");
}

/* Binding levels of the grammar, loosest first: a node is written in
 * parentheses where its parent needs a tighter one. */
enum {
  LV_OR = 1,
  LV_AND,
  LV_NOT,
  LV_CMP,
  LV_SUM,
  LV_PROD,
  LV_UNARY,
  LV_POWER,
  LV_ATOM,
};

static int level_of(const gc_symexpr *e) {
  switch (e->kind) {
  case GC_SX_OR:
    return LV_OR;
  case GC_SX_AND:
    return LV_AND;
  case GC_SX_NOT:
    return LV_NOT;
  case GC_SX_EQ:
  case GC_SX_NE:
  case GC_SX_LT:
  case GC_SX_LE:
  case GC_SX_GT:
  case GC_SX_GE:
    return LV_CMP;
  case GC_SX_ADD:
    return LV_SUM;
  case GC_SX_MUL:
  case GC_SX_DIV:
  case GC_SX_FLOORDIV:
  case GC_SX_MOD:
    return LV_PROD;
  case GC_SX_NEG:
    return LV_UNARY;
  case GC_SX_POW:
    return LV_POWER;
  default:
    return LV_ATOM; /* numbers, symbols, calls */
  }
}

typedef struct fmt {
  gc_symexpr_rename rename;
  void *ctx;
  gc_buf *out;
} fmt;

static void fmt_at(fmt *f, const gc_symexpr *e, int min);

static void fmt_node(fmt *f, const gc_symexpr *e) {
  gc_buf *out = f->out;
  switch (e->kind) {
  case GC_SX_INT:
    gc_buf_printf(out, "%" PRId64, e->i);
    return;
  case GC_SX_FLOAT: {
    char num[40];
    snprintf(num, sizeof num, "%.17g", e->f);
    gc_buf_puts(out, num);
    if (!strpbrk(num, ".eEni")) /* 2.0 stays a float */
      gc_buf_puts(out, ".0");
    return;
  }
  case GC_SX_BOOL:
    gc_buf_puts(out, e->i ? "True" : "False");
    return;
  case GC_SX_SYM: {
    const char *n = f->rename ? f->rename(e->name, f->ctx) : NULL;
    gc_buf_puts(out, n ? n : e->name);
    return;
  }
  case GC_SX_NEG:
    gc_buf_puts(out, "-");
    fmt_at(f, e->args[0], LV_POWER);
    return;
  case GC_SX_NOT:
    gc_buf_puts(out, "not ");
    fmt_at(f, e->args[0], LV_NOT);
    return;
  case GC_SX_ADD:
    for (int i = 0; i < e->nargs; i++) {
      const gc_symexpr *t = e->args[i];
      if (i && t->kind == GC_SX_NEG) { /* the parser's "a - b" */
        gc_buf_puts(out, " - ");
        fmt_at(f, t->args[0], LV_PROD);
        continue;
      }
      if (i)
        gc_buf_puts(out, " + ");
      fmt_at(f, t, LV_PROD);
    }
    return;
  case GC_SX_MUL:
    for (int i = 0; i < e->nargs; i++) {
      if (i)
        gc_buf_puts(out, "*");
      fmt_at(f, e->args[i], LV_UNARY);
    }
    return;
  case GC_SX_DIV:
  case GC_SX_FLOORDIV:
  case GC_SX_MOD: /* left-associative: a // b // c is (a // b) // c */
    fmt_at(f, e->args[0], LV_PROD);
    gc_buf_printf(out, " %s ", kind_text(e->kind));
    fmt_at(f, e->args[1], LV_UNARY);
    return;
  case GC_SX_POW: /* right-associative */
    fmt_at(f, e->args[0], LV_ATOM);
    gc_buf_puts(out, "**");
    fmt_at(f, e->args[1], LV_UNARY);
    return;
  case GC_SX_EQ:
  case GC_SX_NE:
  case GC_SX_LT:
  case GC_SX_LE:
  case GC_SX_GT:
  case GC_SX_GE:
    fmt_at(f, e->args[0], LV_SUM);
    gc_buf_printf(out, " %s ", kind_text(e->kind));
    fmt_at(f, e->args[1], LV_SUM);
    return;
  case GC_SX_AND:
  case GC_SX_OR:
    for (int i = 0; i < e->nargs; i++) {
      if (i)
        gc_buf_printf(out, " %s ", kind_text(e->kind));
      fmt_at(f, e->args[i], e->kind == GC_SX_AND ? LV_NOT : LV_AND);
    }
    return;
  case GC_SX_MAX:
  case GC_SX_MIN:
  case GC_SX_FLOOR:
  case GC_SX_CEIL:
  case GC_SX_ABS:
    gc_buf_printf(out, "%s(", kind_text(e->kind));
    for (int i = 0; i < e->nargs; i++) {
      if (i)
        gc_buf_puts(out, ", ");
      fmt_at(f, e->args[i], 0);
    }
    gc_buf_puts(out, ")");
    return;
  }
}

/* Recursion is bounded: a parsed tree is at most GC_SYMEXPR_MAX_DEPTH high. */
static void fmt_at(fmt *f, const gc_symexpr *e, int min) {
  bool paren = level_of(e) < min;
  if (paren)
    gc_buf_puts(f->out, "(");
  fmt_node(f, e);
  if (paren)
    gc_buf_puts(f->out, ")");
}

void gc_symexpr_format(const gc_symexpr *e, gc_symexpr_rename rename, void *ctx,
                       gc_buf *out) {
  fmt f = {rename, ctx, out};
  fmt_at(&f, e, 0);
}
