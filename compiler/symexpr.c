/*
 * symexpr.c: a recursive-descent parser for symbolic expressions.
 *
 * One function per precedence level, as in symexpr.h's grammar. Every entry
 * into a nested level counts depth so that "((((...))))" or "- - - - x" stops
 * at the limit instead of at the end of the stack.
 */
#include "compiler/symexpr.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
  gc_arena *arena;
  const char *text; /* the whole expression */
  const char *p;    /* next unread character */
  int depth;        /* current nesting */
  int max_depth;    /* refuse deeper nesting */
  gc_error *err;
  int rc; /* first error; 0 while none */
} parser;

static gc_symexpr *parse_or(parser *ps);

static gc_symexpr *fail(parser *ps, int code, const char *what) {
  if (!ps->rc)
    ps->rc = gc_errorf(ps->err, code,
                       "symbolic expression \"%.64s\": at offset %d: %s",
                       ps->text, (int)(ps->p - ps->text), what);
  return NULL;
}

static void skip_space(parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t')
    ps->p++;
}

/* Consumes `tok` when it comes next (a word token must not run on into an
 * identifier character). */
static int accept(parser *ps, const char *tok) {
  skip_space(ps);
  size_t n = strlen(tok);
  if (strncmp(ps->p, tok, n) != 0)
    return 0;
  if (isalpha((unsigned char)tok[0]) &&
      (isalnum((unsigned char)ps->p[n]) || ps->p[n] == '_'))
    return 0;
  ps->p += n;
  return 1;
}

static gc_symexpr *node(parser *ps, gc_sx_kind k, int nargs) {
  gc_symexpr *e = gc_arena_zalloc(ps->arena, sizeof *e);
  if (!e)
    return fail(ps, GC_ENOMEM, "out of memory");
  e->kind = k;
  e->nargs = nargs;
  if (nargs) {
    e->args = gc_arena_calloc(ps->arena, (size_t)nargs, sizeof *e->args);
    if (!e->args)
      return fail(ps, GC_ENOMEM, "out of memory");
  }
  return e;
}

static gc_symexpr *binary(parser *ps, gc_sx_kind k, gc_symexpr *l,
                          gc_symexpr *r) {
  if (!l || !r)
    return NULL;
  gc_symexpr *e = node(ps, k, 2);
  if (e) {
    e->args[0] = l;
    e->args[1] = r;
  }
  return e;
}

static int enter(parser *ps) {
  if (++ps->depth > ps->max_depth) {
    fail(ps, GC_ELIMIT, "nesting deeper than the limit");
    return 0;
  }
  return 1;
}

static gc_symexpr *parse_number(parser *ps) {
  const char *start = ps->p;
  while (isdigit((unsigned char)*ps->p))
    ps->p++;
  int is_float = 0;
  if (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E') {
    is_float = 1;
    char *end;
    errno = 0;
    double f = strtod(start, &end);
    if (end == start || errno == ERANGE)
      return fail(ps, GC_EINVAL, "bad number");
    ps->p = end;
    gc_symexpr *e = node(ps, GC_SX_FLOAT, 0);
    if (e)
      e->f = f;
    return e;
  }
  (void)is_float;
  char *end;
  errno = 0;
  long long v = strtoll(start, &end, 10);
  if (errno == ERANGE)
    return fail(ps, GC_EINVAL, "integer out of int64 range");
  ps->p = end;
  gc_symexpr *e = node(ps, GC_SX_INT, 0);
  if (e)
    e->i = v;
  return e;
}

static const struct {
  const char *name;
  gc_sx_kind kind;
  int min_args, max_args;
} funcs[] = {
    {"max", GC_SX_MAX, 2, 64},    {"min", GC_SX_MIN, 2, 64},
    {"floor", GC_SX_FLOOR, 1, 1}, {"ceil", GC_SX_CEIL, 1, 1},
    {"abs", GC_SX_ABS, 1, 1},
};

static gc_symexpr *parse_call(parser *ps, gc_sx_kind k, int min_args,
                              int max_args) {
  gc_symexpr *args[64];
  int n = 0;
  do {
    if (n == max_args)
      return fail(ps, GC_EINVAL, "too many function arguments");
    args[n] = parse_or(ps);
    if (!args[n])
      return NULL;
    n++;
  } while (accept(ps, ","));
  if (!accept(ps, ")"))
    return fail(ps, GC_EINVAL, "expected ')' after function arguments");
  if (n < min_args)
    return fail(ps, GC_EINVAL, "too few function arguments");
  gc_symexpr *e = node(ps, k, n);
  if (e)
    memcpy(e->args, args, (size_t)n * sizeof *args);
  return e;
}

static gc_symexpr *parse_atom(parser *ps) {
  skip_space(ps);
  if (isdigit((unsigned char)*ps->p) ||
      (*ps->p == '.' && isdigit((unsigned char)ps->p[1])))
    return parse_number(ps);
  if (accept(ps, "(")) {
    gc_symexpr *e = parse_or(ps);
    if (e && !accept(ps, ")"))
      return fail(ps, GC_EINVAL, "expected ')'");
    return e;
  }
  if (isalpha((unsigned char)*ps->p) || *ps->p == '_') {
    const char *start = ps->p;
    while (isalnum((unsigned char)*ps->p) || *ps->p == '_')
      ps->p++;
    size_t n = (size_t)(ps->p - start);
    if ((n == 4 && !strncmp(start, "True", 4)) ||
        (n == 5 && !strncmp(start, "False", 5))) {
      gc_symexpr *e = node(ps, GC_SX_BOOL, 0);
      if (e)
        e->i = n == 4;
      return e;
    }
    if (accept(ps, "(")) {
      for (size_t i = 0; i < sizeof funcs / sizeof funcs[0]; i++)
        if (strlen(funcs[i].name) == n && !strncmp(start, funcs[i].name, n))
          return parse_call(ps, funcs[i].kind, funcs[i].min_args,
                            funcs[i].max_args);
      ps->p = start;
      return fail(ps, GC_EINVAL,
                  "unknown function (max, min, floor, ceil, abs)");
    }
    gc_symexpr *e = node(ps, GC_SX_SYM, 0);
    if (e && !(e->name = gc_arena_strndup(ps->arena, start, n)))
      return fail(ps, GC_ENOMEM, "out of memory");
    return e;
  }
  if (*ps->p == '\0')
    return fail(ps, GC_EINVAL, "unexpected end of expression");
  return fail(ps, GC_EINVAL, "expected a number, symbol or '('");
}

static gc_symexpr *parse_unary(parser *ps);

static gc_symexpr *parse_power(parser *ps) {
  gc_symexpr *base = parse_atom(ps);
  if (base && accept(ps, "**"))
    return binary(ps, GC_SX_POW, base, parse_unary(ps));
  return base;
}

static gc_symexpr *parse_unary(parser *ps) {
  if (!enter(ps))
    return NULL;
  gc_symexpr *e;
  skip_space(ps);
  if (*ps->p == '-' && ps->p[1] != '-') {
    ps->p++;
    gc_symexpr *x = parse_unary(ps);
    e = x ? node(ps, GC_SX_NEG, 1) : NULL;
    if (e)
      e->args[0] = x;
  } else {
    e = parse_power(ps);
  }
  ps->depth--;
  return e;
}

static gc_symexpr *parse_prod(parser *ps) {
  gc_symexpr *e = parse_unary(ps);
  while (e) {
    if (accept(ps, "//"))
      e = binary(ps, GC_SX_FLOORDIV, e, parse_unary(ps));
    else if (accept(ps, "**"))
      return fail(ps, GC_EINVAL, "unexpected '**'");
    else if (accept(ps, "*"))
      e = binary(ps, GC_SX_MUL, e, parse_unary(ps));
    else if (accept(ps, "/"))
      e = binary(ps, GC_SX_DIV, e, parse_unary(ps));
    else if (accept(ps, "%"))
      e = binary(ps, GC_SX_MOD, e, parse_unary(ps));
    else
      break;
  }
  return e;
}

static gc_symexpr *parse_sum(parser *ps) {
  gc_symexpr *e = parse_prod(ps);
  while (e) {
    if (accept(ps, "+"))
      e = binary(ps, GC_SX_ADD, e, parse_prod(ps));
    else if (accept(ps, "-"))
      e = binary(ps, GC_SX_SUB, e, parse_prod(ps));
    else
      break;
  }
  return e;
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
      return binary(ps, ops[i].kind, e, parse_sum(ps));
  return e;
}

static gc_symexpr *parse_not(parser *ps) {
  if (!enter(ps))
    return NULL;
  gc_symexpr *e;
  if (accept(ps, "not")) {
    gc_symexpr *x = parse_not(ps);
    e = x ? node(ps, GC_SX_NOT, 1) : NULL;
    if (e)
      e->args[0] = x;
  } else {
    e = parse_cmp(ps);
  }
  ps->depth--;
  return e;
}

static gc_symexpr *parse_and(parser *ps) {
  gc_symexpr *e = parse_not(ps);
  while (e && accept(ps, "and"))
    e = binary(ps, GC_SX_AND, e, parse_not(ps));
  return e;
}

static gc_symexpr *parse_or(parser *ps) {
  if (!enter(ps))
    return NULL;
  gc_symexpr *e = parse_and(ps);
  while (e && accept(ps, "or"))
    e = binary(ps, GC_SX_OR, e, parse_and(ps));
  ps->depth--;
  return e;
}

int gc_symexpr_parse(gc_arena *a, const char *text, int max_depth,
                     gc_symexpr **out, gc_error *err) {
  parser ps = {
      .arena = a, .text = text, .p = text, .max_depth = max_depth, .err = err};
  gc_symexpr *e = parse_or(&ps);
  if (e) {
    skip_space(&ps);
    if (*ps.p != '\0')
      fail(&ps, GC_EINVAL, "unexpected text after the expression");
  }
  if (ps.rc)
    return ps.rc;
  if (!e)
    return gc_errorf(err, GC_EINVAL, "symbolic expression is empty");
  *out = e;
  return 0;
}
