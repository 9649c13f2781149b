/*
 * arg.h: an argument value, the in-memory form of graph.proto's Argument.
 *
 * Used for node arguments and outputs, graph inputs and outputs, and for the
 * defaults of operator schemas (so an explicit default and an omitted one can
 * be compared and hashed alike). Every list lives in the owning arena.
 */
#ifndef GC_ARG_H
#define GC_ARG_H

#include <stdbool.h>
#include <stdint.h>

/* The argument kinds, in graph.proto's order. X(NAME, json/text name,
 * ITEM): ITEM is the kind of one element, NAME itself for a single value
 * (a list kind's items are read one at a time as single arguments by
 * gc_arg_item, so code that handles every single kind handles the lists). */
#define GC_ARG_KINDS(X)                                                        \
  X(NONE, "none", NONE)                                                        \
  X(TENSOR, "tensor", TENSOR)                                                  \
  X(TENSORS, "tensors", TENSOR)                                                \
  X(OPT_TENSORS, "optional_tensors", TENSOR) /* None items: NONE */            \
  X(INT, "int", INT)                                                           \
  X(INTS, "ints", INT)                                                         \
  X(FLOAT, "float", FLOAT)                                                     \
  X(FLOATS, "floats", FLOAT)                                                   \
  X(BOOL, "bool", BOOL)                                                        \
  X(BOOLS, "bools", BOOL)                                                      \
  X(STRING, "string", STRING)                                                  \
  X(STRINGS, "strings", STRING)                                                \
  X(SYM_INT, "sym_int", SYM_INT)                                               \
  X(SYM_INTS, "sym_ints", SYM_INT)                                             \
  X(SYM_FLOAT, "sym_float", SYM_FLOAT)                                         \
  X(SYM_FLOATS, "sym_floats", SYM_FLOAT)                                       \
  X(SYM_BOOL, "sym_bool", SYM_BOOL)                                            \
  X(SYM_BOOLS, "sym_bools", SYM_BOOL)                                          \
  X(SCALAR_TYPE, "scalar_type", SCALAR_TYPE)                                   \
  X(MEMORY_FORMAT, "memory_format", MEMORY_FORMAT)                             \
  X(LAYOUT, "layout", LAYOUT)                                                  \
  X(DEVICE, "device", DEVICE)

typedef enum gc_arg_kind {
#define X(name, text, item) GC_ARG_##name,
  GC_ARG_KINDS(X)
#undef X
      GC_ARG_KIND_COUNT
} gc_arg_kind;

typedef struct gc_value gc_value;

/* A device: type ("cpu", "cuda", ...) and index, -1 when none was given. */
typedef struct gc_device {
  const char *type;
  int index;
} gc_device;

/* A symbolic scalar argument: a named value, or a literal when v is NULL. */
typedef struct gc_symarg {
  gc_value *v; /* the named SymInt/SymFloat/SymBool value; NULL: literal */
  union {
    int64_t i; /* literal of a SymInt */
    double f;  /* literal of a SymFloat */
    bool b;    /* literal of a SymBool */
  };
} gc_symarg;

typedef struct gc_arg {
  gc_arg_kind kind;
  int n; /* element count of the list kinds */
  union {
    int64_t i;         /* INT; BOOL (0/1); SCALAR_TYPE, MEMORY_FORMAT, LAYOUT
                          (the enum numbers of graph.proto) */
    double f;          /* FLOAT */
    const char *s;     /* STRING */
    gc_value *v;       /* TENSOR */
    gc_symarg sym;     /* SYM_INT, SYM_FLOAT, SYM_BOOL */
    gc_device dev;     /* DEVICE */
    int64_t *ints;     /* INTS; BOOLS (0/1 each) */
    double *floats;    /* FLOATS */
    const char **strs; /* STRINGS */
    gc_value **vals;   /* TENSORS; OPT_TENSORS (NULL items are None) */
    gc_symarg *syms;   /* SYM_INTS, SYM_FLOATS, SYM_BOOLS */
  };
} gc_arg;

/* "tensor", "ints", ...: the name of a kind as JSON and messages spell it. */
const char *gc_arg_kind_name(gc_arg_kind k);

/* The kind of one element of a `k` argument: k itself for a single
 * value, INT for INTS, TENSOR for TENSORS, ... */
gc_arg_kind gc_arg_item_kind(gc_arg_kind k);

/* Whether `k` is a list kind (its value is a->n elements). */
bool gc_arg_is_list(gc_arg_kind k);

/* Element i of list argument `a` as a single argument of its item kind
 * (a None item of an optional tensor list: NONE). */
gc_arg gc_arg_item(const gc_arg *a, int i);

/* Calls fn(v, item, ctx) for every named value (tensor or symbolic scalar)
 * that `a` refers to; item is the position inside a list argument, 0 for a
 * single one. None items of optional lists and literals are skipped. */
void gc_arg_each_value(const gc_arg *a,
                       void (*fn)(const gc_value *v, int item, void *ctx),
                       void *ctx);

#endif
