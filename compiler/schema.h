/*
 * schema.h: TorchScript function schemas.
 *
 * Every operator a graph uses comes with its schema string, for example
 *
 *   aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)
 *
 * The parser turns it into a gc_schema: the qualified name and overload,
 * arguments (type, default, keyword-only), returns, and the alias annotations
 * that tell the compiler what an operator writes and which outputs alias
 * which inputs. It parses every schema torch 1.13 ships (tests/data/schemas).
 *
 * Grammar (as TorchScript's own parser accepts it):
 *   schema    := qualname ['.' overload] '(' args ')' '->' returns
 *   args      := [arg (',' arg)*]    with '*' marking keyword-only and '...'
 *   arg       := type [name] ['=' default]
 *   returns   := type | '(' [ret (',' ret)*] ')' | '...'
 *   type      := base ['(' alias ')'] ('[' [N] ']' ['(' alias ')'] | '?')*
 *   base      := Tensor | int | SymInt | float | bool | str | Scalar | ...
 *              | Dict(type, type) | Future(type) | Union(type, ...) | '(' tuple ')'
 *   alias     := sets ['!'] ['->' sets]    sets := name ('|' name)* | '*'
 *
 * All memory comes from the caller's arena.
 */
#ifndef GC_SCHEMA_H
#define GC_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include "compiler/arena.h"
#include "compiler/arg.h"
#include "compiler/error.h"

/* The type kinds. X(NAME, spelling in schema strings; NULL for composites). */
#define GC_TYPE_KINDS(X)                                                       \
  X(TENSOR, "Tensor")                                                          \
  X(INT, "int")                                                                \
  X(SYMINT, "SymInt")                                                          \
  X(FLOAT, "float")                                                            \
  X(COMPLEX, "complex")                                                        \
  X(BOOL, "bool")                                                              \
  X(STR, "str")                                                                \
  X(SCALAR, "Scalar")                                                          \
  X(NUMBER, "number")                                                          \
  X(SCALAR_TYPE, "ScalarType")                                                 \
  X(LAYOUT, "Layout")                                                          \
  X(MEMORY_FORMAT, "MemoryFormat")                                             \
  X(DEVICE, "Device")                                                          \
  X(GENERATOR, "Generator")                                                    \
  X(DIMNAME, "Dimname")                                                        \
  X(STORAGE, "Storage")                                                        \
  X(STREAM, "Stream")                                                          \
  X(QSCHEME, "QScheme")                                                        \
  X(ANY, "Any")                                                                \
  X(NONE, "NoneType")                                                          \
  X(CAPSULE, "Capsule")                                                        \
  X(LIST, NULL)                                                                \
  X(OPTIONAL, NULL)                                                            \
  X(TUPLE, NULL)                                                               \
  X(DICT, NULL)                                                                \
  X(FUTURE, NULL)                                                              \
  X(RREF, NULL)                                                                \
  X(AWAIT, NULL)                                                               \
  X(UNION, NULL)                                                               \
  X(VAR, NULL)                                                                 \
  X(CLASS, NULL)

typedef enum gc_type_kind {
#define X(name, spelling) GC_TY_##name,
  GC_TYPE_KINDS(X)
#undef X
      GC_TY_COUNT
} gc_type_kind;

/* An alias annotation such as (a), (a!), (a -> *), (a|b). */
typedef struct gc_alias {
  const char **before; /* alias sets before "->", e.g. "a"; "*" is wildcard */
  int nbefore;
  const char **after; /* alias sets after "->"; NULL and 0 without an arrow */
  int nafter;
  bool is_write; /* "!": the value is written */
} gc_alias;

typedef struct gc_type gc_type;
struct gc_type {
  gc_type_kind kind;
  gc_type *elem;    /* LIST, OPTIONAL, FUTURE, RREF, AWAIT: the element */
  gc_type **items;  /* TUPLE and UNION members; DICT: key then value */
  int nitems;
  int fixed_len;    /* LIST: N of "int[N]"; -1 when unsized */
  const char *name; /* VAR: "t"; CLASS: "__torch__.torch.classes.x.Y" */
  gc_alias *alias;  /* annotation on this type; NULL when none */
};

typedef struct gc_schema_arg {
  const char *name;         /* "self"; NULL for an unnamed return */
  gc_type *type;
  bool has_default;         /* a default is given */
  const char *default_text; /* the default as written; NULL when none */
  gc_arg def;               /* the default as a value (see gc_schema_parse) */
  bool kwarg_only;          /* declared after "*" */
} gc_schema_arg;

typedef struct gc_schema {
  const char *ns;        /* "aten" */
  const char *name;      /* "add_" */
  const char *overload;  /* "Tensor"; "" when there is none */
  const char *qualified; /* "aten::add_.Tensor" (".overload" only if any) */
  gc_schema_arg *args;
  int nargs;
  gc_schema_arg *rets;
  int nrets;
  bool vararg; /* "..." ends the arguments */
  bool varret; /* the returns are "..." */
} gc_schema;

/*
 * Parses `text` into *out (arena-owned). On failure returns GC_ESCHEMA and
 * the error says where (byte offset and what was expected).
 *
 * Defaults are converted to gc_arg by the declared type:
 *   None -> NONE; int/SymInt -> INT; float -> FLOAT (inf, -inf, nan too);
 *   bool -> BOOL; str -> STRING; Scalar -> INT, FLOAT or BOOL as written;
 *   int[]/SymInt[] -> INTS (a single int for int[N] is repeated N times);
 *   float[] -> FLOATS; bool[] -> BOOLS; ScalarType -> SCALAR_TYPE (graph.proto
 *   enum number; `long`, `float`, ... accepted); MemoryFormat -> MEMORY_FORMAT;
 *   Layout -> LAYOUT; Device -> DEVICE; reduction names Mean/Sum/None for int
 *   -> INT 1/2/0; str[] -> STRINGS; an empty list takes its type's list kind.
 */
int gc_schema_parse(gc_arena *a, const char *text, gc_schema **out,
                    gc_error *err);

/* Prints the schema back in TorchScript's own spelling; the result equals
 * str(schema) in torch for every schema torch ships. Returns the length it
 * needed (like snprintf). */
size_t gc_schema_format(const gc_schema *s, char *buf, size_t size);

/* Prints a type in TorchScript's spelling, like gc_schema_format. */
size_t gc_type_format(const gc_type *t, char *buf, size_t size);

/* True when argument `i` is written by the operator: an alias annotation with
 * "!" on the argument's type or on its list elements (Tensor(a!)[]). */
bool gc_schema_arg_is_write(const gc_schema *s, int i);

/* The index of the argument whose alias set return `r` shares (Tensor(a) on
 * both sides, or an element of a list annotated a -> *), or -1 when the
 * return is fresh. */
int gc_schema_return_alias(const gc_schema *s, int r);

/* True when any argument is written. */
bool gc_schema_is_mutating(const gc_schema *s);

/* True for an out= variant: it writes keyword-only arguments and returns
 * them. */
bool gc_schema_is_out_variant(const gc_schema *s);

/* The index of the argument called `name`, or -1. */
int gc_schema_find_arg(const gc_schema *s, const char *name);

#endif
