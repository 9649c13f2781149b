/*
 * functionalize_internal.h: what functionalization's files share:
 * functionalize.c (the new graph, storage roots and objects, inputs and
 * outputs, the eager form, the entry point), functionalize_views.c
 * (reading and writing objects through view chains: replaying and
 * inverting views) and functionalize_ops.c (each original node made
 * functional). Not part of the library's interface.
 */
#ifndef GC_FUNCTIONALIZE_INTERNAL_H
#define GC_FUNCTIONALIZE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "compiler/functionalize.h"

#define MAX_CHAIN 64 /* longer view chains are kept in eager form */
/* Reading a stale view replays its chain, and a step with another tensor
 * argument (view_as(self, other)) reads that tensor first, which may be a
 * stale view in turn: read_obj recurses once per such link. Deeper than
 * this, the graph is kept in eager form rather than the stack exhausted. */
#define MAX_READ_NESTING 64

typedef struct fz_root {
  int input;                   /* the graph input owning this storage; -1 */
  const gc_tensor_meta *meta0; /* the storage's original layout */
  gc_value *cur;               /* new-graph value of the whole storage now */
  int gen;                     /* bumped at every write */
  bool written;                /* some write reached it */
  bool written_visible;        /* some write not through detach() */
} fz_root;

typedef struct fz_obj {
  int root;
  gc_view_step *chain; /* from the root's object to this one */
  int nchain;
  bool detached;        /* the chain contains detach */
  bool multi;           /* the last step is a multi-output view */
  gc_value *fv;         /* new-graph value of its contents */
  int gen;              /* the root generation fv reflects */
  int input;            /* the graph input this object is; -1 */
  const gc_value *last; /* original value with its latest metadata */
} fz_obj;

typedef struct fz {
  gc_arena *a;
  gc_error *err;
  const gc_graph *g;
  const gc_options *o;
  gc_graph *fg;    /* the graph being built */
  gc_node **nodes; /* its nodes, in order, while building */
  int nnodes, cap_nodes;
  int cap_values;
  int cap_ops;
  fz_root *roots;
  int nroots, cap_roots;
  fz_obj *objs;
  int nobjs, cap_objs;
  int *objof;       /* original value id -> object; -1 */
  gc_value **vmap;  /* original value id -> new value (scalars, inputs) */
  const char *bail; /* set: keep the eager form, this is why */
  bool oom;
  bool finishing; /* reading final values for the runner, not for
                     the program's own computation */
  int reading;    /* read_obj calls in progress (nesting) */
} fz;

/* Arguments of calls the pass emits. */
static inline gc_arg A_T(gc_value *v) {
  return (gc_arg){.kind = GC_ARG_TENSOR, .v = v};
}
static inline gc_arg A_I(int64_t i) {
  return (gc_arg){.kind = GC_ARG_INT, .i = i};
}
static inline gc_arg A_NONE(void) {
  return (gc_arg){.kind = GC_ARG_NONE};
}

/* ---- functionalize.c: arrays, giving up, the new graph, roots and
 * objects ---- */

/* Gives up on the functional form (keeps the eager one), saying why. */
void fz_bail(fz *z, const char *why);
void fz_bailf(fz *z, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A new value, node or operator of the new graph. */
gc_value *fz_new_value(fz *z, gc_value_kind kind, const gc_tensor_meta *meta);
const gc_op *fz_fg_op(fz *z, const gc_op *orig);
const gc_op *fz_op_lookup(fz *z, const char *name);
gc_node *fz_add_node(fz *z, const gc_op *op, int nargs, int noutputs);
/* An int[] argument in the arena. */
gc_arg fz_A_INTS(fz *z, const int64_t *vals, int n);
/* Appends a call of operator `name` to the new graph: its result. */
gc_value *fz_emit_call(fz *z, const char *name, const gc_arg *args, int n,
                       const gc_tensor_meta *meta);
/* A storage root, an object of it, a view object of `parent`. */
int fz_new_root(fz *z, int input, gc_value *cur);
int fz_new_obj(fz *z, int root, const gc_value *last);
int fz_view_obj(fz *z, int parent, gc_view_step step, const gc_value *last,
                bool detach, bool multi);

/* ---- functionalize_views.c ---- */

/* An original argument mapped into the new graph (objects read). */
bool fz_map_arg(fz *z, const gc_arg *in, gc_arg *out);
/* The view operator that replays view node n. */
const gc_op *fz_replay_op(fz *z, const gc_node *n);
/* An object's current contents; new contents written through its
 * chain into its root. */
gc_value *fz_read_obj(fz *z, int id);
void fz_write_obj(fz *z, int id, gc_value *nv);

/* ---- functionalize_ops.c ---- */

/* Small facts about schemas, nodes and metadata. */
bool fz_is_meta_inplace(const gc_schema *s);
int fz_bound_index(const gc_node *n, int param);
bool fz_same_type(const gc_type *a, const gc_type *b);
const gc_op *fz_variant_of(fz *z, const gc_schema *s);
bool fz_meta_equal(const gc_tensor_meta *a, const gc_tensor_meta *b);
/* Makes original node n functional in the new graph. */
void fz_do_node(fz *z, const gc_node *n);

#endif
