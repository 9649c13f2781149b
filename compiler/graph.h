/*
 * graph.h: the in-memory graph, decoded from graph.proto and validated.
 *
 * A gc_graph and everything it points to live in one arena. Values (tensors
 * and symbolic scalars) are described once and referenced by pointer; every
 * name has been resolved, every node bound to its parsed operator schema, and
 * every argument checked against that schema, so later passes never meet a
 * dangling reference or a type they did not expect.
 *
 * Lifecycle: gc_graph_decode() fills a graph from bytes (unpack, resolve,
 * validate); gc_graph_from_message() does the same from an unpacked message.
 * There is no free: free the arena.
 */
#ifndef GC_GRAPH_H
#define GC_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler/arena.h"
#include "compiler/arg.h"
#include "compiler/dtype.h"
#include "compiler/error.h"
#include "compiler/schema.h"
#include "compiler/symexpr.h"
#include "compiled/v1/graph.pb-c.h"

/* The schema version this build reads and writes. */
#define GC_SCHEMA_MAJOR 1
#define GC_SCHEMA_MINOR 0

/* Limits on what a graph may contain; a graph past one is refused with
 * GC_ELIMIT naming the limit. gc_limits_default() gives the defaults. */
typedef struct gc_limits {
  size_t max_bytes;   /* encoded message size (default 256 MiB) */
  size_t max_memory;  /* arena bytes a decode may use (default 1 GiB) */
  int64_t max_nodes;  /* nodes in the graph (default 1,000,000) */
  int64_t max_values; /* named values (default 4,000,000) */
  int max_rank;       /* dimensions of a tensor (default 64) */
  int64_t max_list;   /* elements of one list argument (default 1,000,000) */
  size_t max_string;  /* bytes of one string (default 1 MiB) */
  int max_nesting;    /* depth of a symbolic expression: tree height and
                         parenthesis nesting (default 64; at most
                         GC_SYMEXPR_MAX_DEPTH) */
  int max_expr_nodes; /* nodes of one symbolic expression (default 10,000) */
} gc_limits;

void gc_limits_default(gc_limits *l);

/* An integer that is known (expr NULL) or symbolic. */
typedef struct gc_symint {
  int64_t v;              /* the value; for a symbolic integer its hint, if
                             any */
  const char *expr;       /* symbolic expression as sent; NULL when known */
  const gc_symexpr *tree; /* expr parsed (within the limits); NULL when
                             known */
  bool has_hint;          /* symbolic: v holds the hint */
} gc_symint;

typedef struct gc_tensor_meta {
  gc_dtype dtype;
  int rank;
  gc_symint *sizes;   /* rank entries */
  gc_symint *strides; /* rank entries, in elements */
  gc_symint offset;   /* storage offset, in elements */
  gc_device device;
  bool requires_grad;
  gc_layout layout;
} gc_tensor_meta;

typedef enum gc_value_kind {
  GC_VALUE_TENSOR,
  GC_VALUE_SYM_INT,
  GC_VALUE_SYM_FLOAT,
  GC_VALUE_SYM_BOOL,
} gc_value_kind;

/* A named value of the graph. */
struct gc_value {
  const char *name;
  int id; /* index in gc_graph.values */
  gc_value_kind kind;
  gc_tensor_meta meta; /* GC_VALUE_TENSOR */
  gc_symint sym;       /* GC_VALUE_SYM_INT (SYM_FLOAT/BOOL: expr and tree
                          only) */
  int def_node;        /* node that produces it; -1 for a graph input */
  int def_slot;        /* that node's output index, or the input index */
  int def_item;        /* index inside a list output; -1 otherwise */
};

/* An argument bound to a schema parameter. */
typedef struct gc_named_arg {
  const char *name;
  gc_arg arg;
  bool keyword; /* passed by keyword */
  int param;    /* index of the schema argument it binds */
} gc_named_arg;

/* An operator of the graph's operator table. */
typedef struct gc_op {
  const char *name;  /* "aten::add.Tensor" */
  const char *text;  /* the schema string as sent */
  gc_schema *schema; /* parsed */
} gc_op;

typedef struct gc_node {
  int id;             /* index in gc_graph.nodes */
  const char *target; /* operator name */
  const gc_op *op;
  gc_named_arg *args; /* in the order sent */
  int nargs;
  gc_arg *outputs; /* one per schema return */
  int noutputs;
  const char *stack_trace; /* "" when absent; never hashed */
  const char *module_path; /* "" when absent; never hashed */
  const char *label;       /* name of its first output value, for messages */
} gc_node;

typedef enum gc_input_kind {
  GC_INPUT_UNKNOWN = 0,
  GC_INPUT_USER = 1,
  GC_INPUT_PARAMETER = 2,
  GC_INPUT_BUFFER = 3,
  GC_INPUT_CONSTANT = 4,
} gc_input_kind;

typedef struct gc_input {
  gc_input_kind kind;
  gc_arg arg;         /* TENSOR, SYM_*, or a literal */
  const char *target; /* module path of a parameter/buffer/constant */
  bool persistent;
  int storage_group; /* index into storage groups; -1 when alone */
} gc_input;

typedef struct gc_graph {
  gc_arena *arena;
  int schema_major, schema_minor;
  const char *torch_version;
  gc_value **values; /* every named value, inputs' first */
  int nvalues;
  gc_input *inputs;
  int ninputs;
  gc_node *nodes;
  int nnodes;
  gc_arg *outputs;
  int noutputs;
  gc_op *ops;
  int nops;
  int ngroups; /* storage groups; members have storage_group set */
} gc_graph;

/*
 * Unpacks `len` bytes of a GraphModule, resolves and validates it. On success
 * *out is an arena-owned graph. On failure returns GC_EMALFORMED, GC_EVERSION,
 * GC_EINVAL, GC_ELIMIT or GC_ENOMEM with `err` naming the node and argument.
 * Never crashes, whatever the bytes.
 */
int gc_graph_decode(gc_arena *a, const uint8_t *buf, size_t len,
                    const gc_limits *lim, gc_graph **out, gc_error *err);

/* As gc_graph_decode, from a message already unpacked (which must outlive
 * the graph: strings are shared, not copied). An embedded NUL is invisible
 * in an unpacked string: whoever unpacked the message from bytes must have
 * run gc_wire_check_strings on them (the daemon does on every request). */
int gc_graph_from_message(gc_arena *a, const Compiled__V1__GraphModule *m,
                          const gc_limits *lim, gc_graph **out, gc_error *err);

/* "node 3 (%add_1 = aten::add.Tensor)": how messages name a node. */
const char *gc_node_describe(const gc_graph *g, int node, char *buf,
                             size_t size);

/* Are m's sizes and strides static, the strides contiguous (a dim of size
 * 1 may have any stride)? The offset is not looked at. */
bool gc_meta_contiguous(const gc_tensor_meta *m);

#endif
