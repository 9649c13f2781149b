/*
 * schema_internal.h: what the schema parser's files share: schema.c (the
 * parser: characters, types, literals, the schema, aliases),
 * schema_default.c (a default's literal converted by its declared type)
 * and schema_print.c (printing back as torch does). Not part of the
 * library's interface.
 */
#ifndef GC_SCHEMA_INTERNAL_H
#define GC_SCHEMA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler/schema.h"

/* ---- parser state and errors (schema.c) ---- */

typedef struct parser {
  gc_arena *a;      /* everything parsed is allocated here */
  const char *text; /* the whole schema, for offsets in messages */
  const char *p;    /* the cursor */
  gc_error *err;    /* filled by the first failure; may be NULL */
  int rc;           /* the code of that failure, 0 until then */
} parser;

/* Fails at `at` with a free-form message. Returns GC_ESCHEMA. */
int sp_fail_at(parser *p, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Fails at the cursor: "expected <what>, found <the character there>". */
int sp_expected(parser *p, const char *what);
/* Out of memory at the cursor. Returns GC_ENOMEM. */
int sp_nomem(parser *p);

/* ---- characters and memory (schema.c) ---- */

bool sp_is_digit(char c);
bool sp_is_ident_start(char c);
bool sp_is_ident_char(char c);
void sp_skip_blanks(parser *p);
/* Skips blanks, then consumes `tok` if the text continues with it. */
bool sp_accept(parser *p, const char *tok);
/* True when the text at `at` is the whole word `w` (not a prefix of one). */
bool sp_word_at(const char *at, const char *w);
/* *out = a copy of s[0, n) in the parser's arena. */
int sp_dup(parser *p, const char *s, size_t n, const char **out);
/* `items` (n used of *cap, `size` bytes each) with room for one more. */
void *sp_reserve(parser *p, void *items, int n, int *cap, size_t size);

/* How torch spells each type kind ("Tensor", "int", ...), NULL for the
 * composites (schema.c). */
extern const char *const sp_type_spellings[GC_TY_COUNT];

/* The composites spelled Name(type, ...): how many parameters they take. */
typedef struct sp_composite {
  const char *name;
  gc_type_kind kind;
  int min, max;
} sp_composite;
#define SP_NCOMPOSITES 5
extern const sp_composite sp_composites[SP_NCOMPOSITES];

/* ---- literals of defaults (schema.c) ---- */

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

/* Whether l is the word w. */
bool sp_lit_is(const literal *l, const char *w);
/* Reads one literal at the cursor. */
int sp_read_literal(parser *p, literal *l);

/* ---- defaults (schema_default.c) ---- */

/* default := 'None' | literal | list, converted by the type `t` into
 * arg->def; arg->default_text keeps it as written. */
int sp_parse_default(parser *p, const gc_type *t, gc_schema_arg *arg);

#endif
