/*
 * symexpr.h: symbolic scalar expressions ("s0*2 + 1", "max(s0, s1) // 4").
 *
 * Sizes and scalars that were symbolic at capture time travel as expressions
 * over named symbols. torch.export writes sympy srepr strings; a C daemon
 * needs a small, language-neutral grammar instead (docs/graph-format.md):
 *
 *   expr  := or
 *   or    := and ("or" and)*            and  := not ("and" not)*
 *   not   := "not" not | cmp            cmp  := sum [CMPOP sum]
 *   sum   := prod (("+"|"-") prod)*     prod := unary (("*"|"/"|"//"|"%")
 *                                                       unary)*
 *   unary := "-" unary | power          power := atom ["**" unary]
 *   atom  := INT | FLOAT | "True" | "False" | SYMBOL
 *          | FUNC "(" expr ("," expr)* ")" | "(" expr ")"
 *   CMPOP := "==" | "!=" | "<" | "<=" | ">" | ">="
 *   FUNC  := max | min | floor | ceil | abs
 *
 * The tree. Like sympy's, sums, products, conjunctions, disjunctions, max
 * and min are n-ary: "a + b - c" is one ADD node with the terms a, b and
 * NEG(c) (there is no subtraction node), "a*b*c" one MUL. Only a chain
 * written at one level is gathered: "(a + b) + c" keeps its inner ADD, so
 * the tree follows the text and evaluating it left to right gives what the
 * text means. Division, floor division, modulo, power and comparisons stay
 * binary.
 *
 * Limits. A client controls the text, so parsing is bounded twice over:
 *   - depth: the tree's height (a leaf is 1), and separately the nesting of
 *     parentheses and function calls, may not exceed the caller's max_depth,
 *     itself clamped to GC_SYMEXPR_MAX_DEPTH. The parser recurses only into
 *     parentheses and calls (prefix operators and "**" chains are read in
 *     loops), so its stack use is bounded by the depth limit, and so is the
 *     recursion of any later walk over a tree it returned: no code needs to
 *     check the depth of a parsed tree again.
 *   - size: the tree has at most max_nodes nodes.
 * Past either the text is refused with GC_ELIMIT and a message naming the
 * limit. A literal zero divisor ("s0 // 0", "s0 % 0.0", "s0 / -0") is
 * refused with GC_EINVAL.
 *
 * All memory comes from the caller's arena. Nothing here has global state.
 */
#ifndef GC_SYMEXPR_H
#define GC_SYMEXPR_H

#include <stdint.h>

#include "compiler/arena.h"
#include "compiler/buf.h"
#include "compiler/error.h"

/* No parsed tree is deeper than this, whatever limit a caller asks for: a
 * recursive walk over a tree uses at most this many frames. */
#define GC_SYMEXPR_MAX_DEPTH 256

/* Node kinds. X(NAME, spelling in gc_symexpr_print). */
#define GC_SX_KINDS(X)                                                         \
  X(INT, "int")                                                                \
  X(FLOAT, "float")                                                            \
  X(BOOL, "bool")                                                              \
  X(SYM, "sym")                                                                \
  X(NEG, "neg")                                                                \
  X(NOT, "not")                                                                \
  X(ADD, "+")                                                                  \
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
  gc_sx_kind kind;   /* what this node is */
  int64_t i;         /* INT: the value (non-negative as written; "-3" is
                        NEG(3)); BOOL: 0 or 1 */
  double f;          /* FLOAT: the value */
  const char *name;  /* SYM: the symbol's name */
  gc_symexpr **args; /* operands: 1 for NEG, NOT, FLOOR, CEIL, ABS; 2 for
                        DIV, FLOORDIV, MOD, POW and comparisons (left,
                        right); 2 or more for ADD, MUL, AND, OR, MAX, MIN */
  int nargs;         /* entries of args; 0 for a leaf */
  int height;        /* levels of this subtree: 1 for a leaf */
  int size;          /* nodes of this subtree, itself included */
};

/* What one expression may contain. */
typedef struct gc_symexpr_limits {
  int max_depth; /* tree height and parenthesis nesting; values above
                    GC_SYMEXPR_MAX_DEPTH (or below 1) mean that bound */
  int max_nodes; /* nodes of the tree; <= 0 means no limit */
} gc_symexpr_limits;

/* Parses the NUL-terminated `text` into *out (arena-owned; set only on
 * success). A tree past a limit is refused with GC_ELIMIT, a literal zero
 * divisor and any syntax error with GC_EINVAL, an arena that refuses memory
 * with GC_ENOMEM; the message quotes the start of the text and gives the
 * offset. Never crashes and never recurses deeper than the depth limit,
 * whatever the text. */
int gc_symexpr_parse(gc_arena *a, const char *text,
                     const gc_symexpr_limits *lim, gc_symexpr **out,
                     gc_error *err);

/* Appends `e` in prefix form, one pair of parentheses per operator node:
 * "s0 - 2*s1" prints as "(+ s0 (neg (* 2 s1)))". For tests and debugging
 * dumps; the form shows the tree's exact shape. */
void gc_symexpr_print(const gc_symexpr *e, gc_buf *out);

/* Renames a symbol for gc_symexpr_format: returns the name to print
 * (NULL: the symbol's own). */
typedef const char *(*gc_symexpr_rename)(const char *name, void *ctx);

/* Appends `e` in the grammar above, infix, with the parentheses the tree
 * needs and no others: parsing the text again gives the same tree
 * ("(s0 + 1) + s1" keeps its inner sum; "s0 - 2*s1" is the sum of s0 and
 * NEG(2*s1)). Symbols are renamed through `rename` (NULL: kept). What the
 * artifact states about sizes is written this way (docs/artifact.md). */
void gc_symexpr_format(const gc_symexpr *e, gc_symexpr_rename rename, void *ctx,
                       gc_buf *out);

#endif
