/*
 * schema.h: TorchScript function schemas.
 *
 * Every operator a graph uses comes with its schema string, for example
 *
 *   aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1)
 *       -> Tensor(a!)
 *
 * The parser turns it into a gc_schema: the qualified name and overload,
 * arguments (type, default, keyword-only), returns, and the alias annotations
 * that tell the compiler what an operator writes and which outputs alias
 * which inputs. It parses every schema torch 1.13 ships (compiler/data).
 *
 * Grammar (as TorchScript's own parser accepts it; blanks between tokens):
 *   schema    := qualname ['.' overload] '(' args ')' '->' returns
 *   qualname  := [ns '::'] name           (no blanks inside qualname.overload)
 *   args      := [arg (',' arg)*]    with '*' marking keyword-only and '...'
 *                (varargs) allowed as the last item
 *   arg       := type name ['=' default]
 *   returns   := ret | '(' [ret (',' ret)*] [',' '...'] ')' | '...'
 *   ret       := type [name]
 *   type      := base ['(' alias ')'] ('[' [N] ']' ['(' alias ')'] | '?')*
 *   base      := Tensor | int | SymInt | float | bool | str | Scalar | ...
 *              | Dict(type, type) | Future(type) | RRef(type) | Await(type)
 *              | Union(type, ...) | '(' [type (',' type)*] ')'
 *              | a dotted class name (__torch__.torch.classes.ns.Name)
 *              | a type variable (an unknown name starting in lower case: t)
 *   alias     := sets ['!'] ['->' sets]    sets := name ('|' name)* | '*'
 *   default   := literal | '[' [literal (',' literal)*] ']'
 *
 * Types nest at most GC_SCHEMA_MAX_DEPTH deep (counting every list, optional
 * and composite level), a fixed list length N is at most
 * GC_SCHEMA_MAX_FIXED_LEN, and GC_SCHEMA_MAX_ARGS, GC_SCHEMA_MAX_RETURNS and
 * GC_SCHEMA_MAX_ALIAS_SETS bound the rest; past a bound the text is refused
 * with GC_ESCHEMA. So parsing takes time and memory in proportion to the text,
 * and the queries below take constant time (their answers are computed while
 * parsing).
 *
 * All memory comes from the caller's arena. Nothing here has global state.
 */
#ifndef GC_SCHEMA_H
#define GC_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include "compiler/arena.h"
#include "compiler/arg.h"
#include "compiler/error.h"

/* The deepest a type may nest: "int[][]" is 3 deep, "Dict(str, t?)" 3. */
#define GC_SCHEMA_MAX_DEPTH 32

/* The most arguments a schema may have (torch 1.13's longest has 26).
 * Every node of an operator pays for each of its parameters (binding,
 * defaults in the key, lookups by name), so this bounds what one node of a
 * few bytes can cost: at 1024, 100,000 nodes of a 1,000-parameter
 * operator (2.8 MB) took 10 s to key. */
#define GC_SCHEMA_MAX_ARGS 64

/* The most returns a schema may have (a node has one output per return,
 * so its bytes pay for them). */
#define GC_SCHEMA_MAX_RETURNS 1024

/* The most alias sets on either side of an annotation (torch uses 2). */
#define GC_SCHEMA_MAX_ALIAS_SETS 16

/* The largest N of a fixed-size list type "int[N]" (torch uses up to 5; the
 * bound keeps "int[N] x=1" from growing N values out of a few bytes). */
#define GC_SCHEMA_MAX_FIXED_LEN 1024

/* The type kinds. X(NAME, spelling in schema strings; NULL for composites).
 * ANY_ENUM and ANY_CLASS are torch's AnyEnumType and AnyClassType, which
 * prim:: and aten:: operators on enums and classes take (prim::EnumName);
 * SYMFLOAT and SYMBOOL come with torch 2 schemas. */
#define GC_TYPE_KINDS(X)                                                       \
  X(TENSOR, "Tensor")                                                          \
  X(INT, "int")                                                                \
  X(SYMINT, "SymInt")                                                          \
  X(SYMFLOAT, "SymFloat")                                                      \
  X(SYMBOOL, "SymBool")                                                        \
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
  X(ANY_ENUM, "AnyEnumType")                                                   \
  X(ANY_CLASS, "AnyClassType")                                                 \
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
  int nbefore;         /* at least 1 */
  const char **after;  /* alias sets after "->"; NULL and 0 without an arrow */
  int nafter;          /* entries of after */
  bool is_write;       /* "!": the value is written */
} gc_alias;

typedef struct gc_type gc_type;
struct gc_type {
  gc_type_kind kind; /* what this node is */
  gc_type *elem;     /* LIST, OPTIONAL, FUTURE, RREF, AWAIT: the element */
  gc_type **items;   /* TUPLE and UNION members; DICT: key then value */
  int nitems;        /* entries of items (DICT: 2; TUPLE: 0 for "()") */
  int fixed_len;     /* LIST: N of "int[N]"; -1 when unsized */
  const char *name;  /* VAR: "t"; CLASS: "__torch__.torch.classes.x.Y" */
  gc_alias *alias;   /* annotation on this type; NULL when none. A LIST's is
                        the one after "[]" (t[](a!)), while Tensor(a!)[] has
                        it on elem; an OPTIONAL never has one ("Tensor(a)?"
                        annotates the element) */
};

typedef struct gc_schema_arg {
  const char *name;         /* "self"; NULL for an unnamed return (an argument
                               always has a name) */
  gc_type *type;            /* never NULL */
  bool has_default;         /* a default is given */
  const char *default_text; /* the default as written ("1.", "[-2, -1]",
                               "0" for a dtype); NULL when none */
  gc_arg def;      /* the default as a value (see gc_schema_parse); zeroed when
                      there is none */
  bool kwarg_only; /* declared after "*" */
  bool is_write;   /* an annotation in the type has "!" (what
                      gc_schema_arg_is_write tells); set by the parser */
  int alias_of;    /* returns: the argument gc_schema_return_alias names;
                      -1 when fresh, and for arguments; set by the parser */
} gc_schema_arg;

typedef struct gc_schema {
  const char *ns;        /* "aten"; "" when the name has no "ns::" */
  const char *name;      /* "add_" */
  const char *overload;  /* "Tensor"; "" when there is none */
  const char *qualified; /* "aten::add_.Tensor" (".overload" only if any) */
  gc_schema_arg *args;   /* the arguments, in order */
  int nargs;             /* entries of args */
  gc_schema_arg *rets;   /* the returns, in order; "-> ()" has none */
  int nrets;             /* entries of rets */
  bool vararg;           /* "..." ends the arguments */
  bool varret;           /* "..." ends the returns: "-> ..." */
} gc_schema;

/*
 * Parses the NUL-terminated `text` into *out (arena-owned). On failure
 * returns GC_ESCHEMA (GC_ENOMEM when the arena refuses) and the error says
 * where, e.g. "schema: at offset 22: expected ',' or ')' after an argument,
 * found '-'". *out is only set on success. Never crashes and never recurses
 * deeper than GC_SCHEMA_MAX_DEPTH, whatever the text.
 *
 * Defaults are kept as written (default_text, so that printing is exact) and
 * converted to gc_arg by the declared type (an optional type converts as its
 * element):
 *   None -> NONE, for every type; int/SymInt -> INT, and the reduction names
 *   Mean/Sum -> INT 1/2; float/SymFloat/complex -> FLOAT (an int, inf, -inf,
 *   nan too); bool/SymBool -> BOOL (True/False); str -> STRING (escapes
 *   decoded);
 *   Scalar/number -> INT, FLOAT or BOOL as written;
 *   int[]/SymInt[] -> INTS (a single int for int[N] is repeated N times, as
 *   for float[N] and bool[N]); float[] -> FLOATS; bool[] -> BOOLS;
 *   str[] -> STRINGS; Scalar[] -> INTS, or FLOATS when any item is not an int;
 *   Tensor[] -> TENSORS and Tensor?[] -> OPT_TENSORS (only "[]");
 *   ScalarType -> SCALAR_TYPE, MemoryFormat -> MEMORY_FORMAT, Layout -> LAYOUT,
 *   all as graph.proto enum numbers. These come either as names (long, float,
 *   int64, bfloat16, Long, ...; contiguous_format, channels_last,
 *   channels_last_3d, preserve_format; strided, sparse_coo, sparse_csr, ...)
 *   or as the c10 enum numbers torch prints (`ScalarType? dtype=4` is long and
 *   becomes 5; `memory_format=0` is contiguous_format and becomes 1;
 *   `layout=0` is strided and becomes 7). A dtype graph.proto cannot name
 *   (qint8, ...) becomes 0 (unknown).
 *   Device -> DEVICE, from "cuda:1" or the unquoted cuda:1 torch prints.
 * Any other default (a value of the wrong type, or one for Tensor, t, ...)
 * is refused with GC_ESCHEMA. Numbers are read in the "C" locale.
 */
int gc_schema_parse(gc_arena *a, const char *text, gc_schema **out,
                    gc_error *err);

/* Prints the schema back in TorchScript's own spelling; the result equals
 * str(schema) in torch for every schema torch ships (defaults print as
 * written). What it prints parses back to a schema that prints the same.
 * Writes at most `size` bytes, NUL included, and returns the length it
 * needed (like snprintf; buf may be NULL when size is 0). */
size_t gc_schema_format(const gc_schema *s, char *buf, size_t size);

/* Prints a type in TorchScript's spelling, like gc_schema_format. */
size_t gc_type_format(const gc_type *t, char *buf, size_t size);

/* True when argument `i` is written by the operator: an alias annotation with
 * "!" on the argument's type or on its list elements (Tensor(a!)[]). */
bool gc_schema_arg_is_write(const gc_schema *s, int i);

/* The index of the argument whose alias set return `r` shares (Tensor(a) on
 * both sides, or an element of a list annotated a -> *), or -1 when the
 * return is fresh. The return's own annotation counts, else that of its list
 * or optional element (Tensor(a)[]); the first argument with the set anywhere
 * in its type wins. A return in the wildcard set only (t(*)) names no
 * argument and gives -1: look at its alias if that matters. */
int gc_schema_return_alias(const gc_schema *s, int r);

/* True when any argument is written. */
bool gc_schema_is_mutating(const gc_schema *s);

/* True for an out= variant: it writes keyword-only arguments and returns
 * them: every return aliases a written keyword-only argument (an out variant
 * of a void operator returns "()"). */
bool gc_schema_is_out_variant(const gc_schema *s);

/* The index of the argument called `name`, or -1. */
int gc_schema_find_arg(const gc_schema *s, const char *name);

#endif
