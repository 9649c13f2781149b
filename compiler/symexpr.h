/*
 * symexpr.h: symbolic scalar expressions ("s0*2 + 1", "max(s0, s1) // 4").
 *
 * Sizes and scalars that were symbolic at capture time travel as expressions
 * over named symbols. torch.export writes sympy srepr strings; a C daemon
 * needs a small, language-neutral grammar instead (docs/graph-format.md):
 *
 *   expr  := or
 *   or    := and ("or" and)*          and := not ("and" not)*
 *   not   := "not" not | cmp          cmp := sum [("=="|"!="|"<"|"<="|">"|">=")
 * sum] sum   := prod (("+"|"-") prod)*   prod := unary (("*"|"/"|"//"|"%")
 * unary)* unary := "-" unary | power        power := atom ["**" unary] atom  :=
 * INT | FLOAT | "True" | "False" | SYMBOL | FUNC "(" expr ("," expr)* ")" | "("
 * expr ")" FUNC  := max | min | floor | ceil | abs
 *
 * Parsing is depth-limited: a hostile expression cannot exhaust the stack.
 */
#ifndef GC_SYMEXPR_H
#define GC_SYMEXPR_H

#include <stdint.h>

#include "compiler/arena.h"
#include "compiler/error.h"

/* Node kinds. X(NAME, operator spelling or function name). */
#define GC_SX_KINDS(X)                                                         \
  X(INT, "int")                                                                \
  X(FLOAT, "float")                                                            \
  X(BOOL, "bool")                                                              \
  X(SYM, "sym")                                                                \
  X(NEG, "-")                                                                  \
  X(NOT, "not")                                                                \
  X(ADD, "+")                                                                  \
  X(SUB, "-")                                                                  \
  X(MUL, "*")                                                                  \
  X(DIV, "/")                                                                  \
  X(FLOORDIV, "//")                                                            \
  X(MOD, "%")                                                                  \
  X(POW, "**")                                                                 \
  X(EQ, "==")                                                                  \
  X(NE, "!=")                                                                  \
  X(LT, "<")                                                                   \
  X(LE, "<=")                                                                  \
  X(GT, ">")                                                                   \
  X(GE, ">=")                                                                  \
  X(AND, "and")                                                                \
  X(OR, "or")                                                                  \
  X(MAX, "max")                                                                \
  X(MIN, "min")                                                                \
  X(FLOOR, "floor")                                                            \
  X(CEIL, "ceil")                                                              \
  X(ABS, "abs")

typedef enum gc_sx_kind {
#define X(name, text) GC_SX_##name,
  GC_SX_KINDS(X)
#undef X
} gc_sx_kind;

typedef struct gc_symexpr gc_symexpr;
struct gc_symexpr {
  gc_sx_kind kind;
  int64_t i;         /* INT; BOOL (0/1) */
  double f;          /* FLOAT */
  const char *name;  /* SYM */
  gc_symexpr **args; /* operands: 1 for NEG/NOT/FLOOR/CEIL/ABS, 2 for binary
                        operators, 1 or more for MAX/MIN */
  int nargs;
};

/* Parses `text`. Nesting deeper than `max_depth` is refused with GC_ELIMIT;
 * any other error is GC_EINVAL with the offset and what was expected. */
int gc_symexpr_parse(gc_arena *a, const char *text, int max_depth,
                     gc_symexpr **out, gc_error *err);

#endif
