/*
 * graph_internal.h: what graph.c and graph_arg.c (decoding) and validate.c
 * (checking) share.
 * Not part of the library's interface.
 */
#ifndef GC_GRAPH_INTERNAL_H
#define GC_GRAPH_INTERNAL_H

#include "compiler/graph.h"
#include "compiler/strmap.h"

/* gc_value.def_node of a value no input or node has defined (yet). */
#define GC__UNDEFINED (-2)

/* State of one decode. */
typedef struct gc_decoder {
  gc_arena *a;
  const gc_limits *lim;
  gc_error *err;
  gc_graph *g;       /* the graph being filled */
  gc_strmap values;  /* value name -> gc_value* */
  gc_strmap ops;     /* operator name -> gc_op* */
  int node;          /* index of the node being decoded; -1 outside nodes */
  const char *where; /* what is being decoded, outside nodes ("input 2") */
} gc_decoder;

/* Reports an error located at the current node (or d->where) and argument
 * `arg` (NULL: none). Returns `code`. */
int gc__fail(gc_decoder *d, int code, const char *arg, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* graph.c's checks and errors, shared with graph_arg.c: out of memory
 * (naming the arena limit); a string longer than the string limit; a count
 * over `limit` (`what` names the list). Each returns 0 or the error code. */
int gc__nomem(gc_decoder *d);
int gc__check_str(gc_decoder *d, const char *s, const char *what);
int gc__check_count(gc_decoder *d, size_t n, int64_t limit, const char *what,
                    const char *arg);

/* A Device message: a known type and a non-negative index (-1: none). */
int gc__decode_device(gc_decoder *d, const Compiled__V1__Device *pm,
                      gc_device *out, const char *arg);

/* graph_arg.c: decodes an Argument message into *out, resolving value
 * names. */
int gc__decode_arg(gc_decoder *d, const Compiled__V1__Argument *m, gc_arg *out,
                   const char *arg);

/* True for device types torch knows ("cpu", "cuda", ...). */
bool gc__device_type_known(const char *type);

/* validate.c: binds arguments to schemas and checks types, returns, order
 * and cycles. Runs after decoding succeeded. */
int gc__validate(gc_decoder *d);

#endif
