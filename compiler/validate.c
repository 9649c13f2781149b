/*
 * validate.c: checks a decoded graph against its operator schemas.
 *
 * graph.c guarantees that every name resolves. This file checks what needs
 * the schema or the whole graph:
 *
 *   - binding: each named argument names a parameter of the operator's
 *     schema, at most once; positional arguments come first and in schema
 *     order, never for a keyword-only parameter; every parameter without a
 *     default is given;
 *   - types: each argument's kind is one the parameter's type accepts (an int
 *     where a float is declared is fine, as in TorchScript; a string where a
 *     Tensor is declared is not; a number where a Tensor is declared only
 *     for the operators torch allows it, see gc_op_takes_wrapped_numbers);
 *   - returns: each output of a kind its schema return accepts (graph.c
 *     already checked that there is one output per return);
 *   - order: nodes come in topological order; when they do not, a cycle is
 *     looked for so the message can say "cycle" rather than just "order".
 */
#include <stdio.h>
#include <string.h>

#include "compiler/graph_internal.h"
#include "compiler/ops.h"

static const char *type_text(const gc_type *t, char *buf, size_t size) {
  gc_type_format(t, buf, size);
  return buf;
}

static bool is_list_kind(gc_arg_kind k) {
  switch (k) {
  case GC_ARG_TENSORS:
  case GC_ARG_OPT_TENSORS:
  case GC_ARG_INTS:
  case GC_ARG_FLOATS:
  case GC_ARG_BOOLS:
  case GC_ARG_STRINGS:
  case GC_ARG_SYM_INTS:
  case GC_ARG_SYM_FLOATS:
  case GC_ARG_SYM_BOOLS:
    return true;
  default:
    return false;
  }
}

static bool is_scalar_kind(gc_arg_kind k) {
  return k == GC_ARG_INT || k == GC_ARG_FLOAT || k == GC_ARG_BOOL ||
         k == GC_ARG_SYM_INT || k == GC_ARG_SYM_FLOAT || k == GC_ARG_SYM_BOOL;
}

/* Does a list type with element type `e` accept argument kind `k`? */
static bool list_accepts(const gc_type *list, gc_arg_kind k) {
  const gc_type *e = list->elem;
  switch (e->kind) {
  case GC_TY_TENSOR:
    return k == GC_ARG_TENSORS;
  case GC_TY_OPTIONAL:
    return e->elem->kind == GC_TY_TENSOR &&
           (k == GC_ARG_OPT_TENSORS || k == GC_ARG_TENSORS);
  case GC_TY_INT:
  case GC_TY_SYMINT:
    return k == GC_ARG_INTS || k == GC_ARG_SYM_INTS ||
           (list->fixed_len > 0 && (k == GC_ARG_INT || k == GC_ARG_SYM_INT));
  case GC_TY_FLOAT:
    return k == GC_ARG_FLOATS || k == GC_ARG_INTS;
  case GC_TY_BOOL:
    return k == GC_ARG_BOOLS || (list->fixed_len > 0 && k == GC_ARG_BOOL);
  case GC_TY_STR:
  case GC_TY_DIMNAME:
    return k == GC_ARG_STRINGS;
  case GC_TY_SCALAR:
  case GC_TY_NUMBER:
    return k == GC_ARG_INTS || k == GC_ARG_FLOATS;
  case GC_TY_ANY:
  case GC_TY_VAR:
    return is_list_kind(k);
  default:
    return false;
  }
}

/* Does parameter type `t` accept argument `a`? `wrapped`: the operator
 * takes a number for a Tensor. Recursion is bounded by the type's depth
 * (GC_SCHEMA_MAX_DEPTH). */
static bool accepts(const gc_type *t, const gc_arg *a, bool wrapped) {
  gc_arg_kind k = a->kind;
  switch (t->kind) {
  case GC_TY_OPTIONAL:
    return k == GC_ARG_NONE || accepts(t->elem, a, wrapped);
  case GC_TY_TENSOR:
    /* A Python number where a Tensor is declared is a "wrapped number"
     * (x.add_(1) traces as aten::add_.Tensor(x, 1)), for the operators
     * torch allows it. */
    return k == GC_ARG_TENSOR || (wrapped && is_scalar_kind(k));
  case GC_TY_INT:
  case GC_TY_SYMINT:
    return k == GC_ARG_INT || k == GC_ARG_SYM_INT;
  case GC_TY_FLOAT:
  case GC_TY_SYMFLOAT:
    return k == GC_ARG_FLOAT || k == GC_ARG_INT || k == GC_ARG_SYM_FLOAT ||
           k == GC_ARG_SYM_INT;
  case GC_TY_COMPLEX:
    return k == GC_ARG_FLOAT || k == GC_ARG_INT;
  case GC_TY_BOOL:
  case GC_TY_SYMBOOL:
    return k == GC_ARG_BOOL || k == GC_ARG_SYM_BOOL;
  case GC_TY_STR:
  case GC_TY_DIMNAME:
    return k == GC_ARG_STRING;
  case GC_TY_SCALAR:
  case GC_TY_NUMBER:
    return is_scalar_kind(k);
  case GC_TY_SCALAR_TYPE:
    return k == GC_ARG_SCALAR_TYPE;
  case GC_TY_LAYOUT:
    return k == GC_ARG_LAYOUT;
  case GC_TY_MEMORY_FORMAT:
    return k == GC_ARG_MEMORY_FORMAT;
  case GC_TY_DEVICE:
    return k == GC_ARG_DEVICE;
  case GC_TY_ANY:
  case GC_TY_VAR:
    return true;
  case GC_TY_LIST:
    if (is_list_kind(k) && a->n == 0)
      return true; /* an empty list takes the declared type */
    return list_accepts(t, k);
  default:
    return false; /* Generator, Storage, tuples...: not expressible */
  }
}

/* Does return type `t` accept node output `o`? Outputs that are not tensors
 * may be left unnamed (none). Recursion is bounded by the type's depth. */
static bool returns_ok(const gc_type *t, const gc_arg *o) {
  gc_arg_kind k = o->kind;
  switch (t->kind) {
  case GC_TY_TENSOR:
    /* An operator may leave a Tensor return undefined at run time (C++'s
     * undefined Tensor, None in Python): _native_multi_head_attention's
     * weights without need_weights, convolution_backward's gradients that
     * output_mask does not ask for. Nothing can read such an output. */
    return k == GC_ARG_TENSOR || k == GC_ARG_NONE;
  case GC_TY_OPTIONAL:
    return k == GC_ARG_NONE || returns_ok(t->elem, o);
  case GC_TY_LIST:
    return t->elem->kind == GC_TY_TENSOR ? k == GC_ARG_TENSORS
                                         : k == GC_ARG_NONE;
  case GC_TY_INT:
  case GC_TY_SYMINT:
    return k == GC_ARG_SYM_INT || k == GC_ARG_NONE;
  case GC_TY_FLOAT:
  case GC_TY_SYMFLOAT:
    return k == GC_ARG_SYM_FLOAT || k == GC_ARG_NONE;
  case GC_TY_BOOL:
  case GC_TY_SYMBOOL:
    return k == GC_ARG_SYM_BOOL || k == GC_ARG_NONE;
  case GC_TY_SCALAR:
  case GC_TY_NUMBER:
    return k == GC_ARG_SYM_INT || k == GC_ARG_SYM_FLOAT ||
           k == GC_ARG_SYM_BOOL || k == GC_ARG_NONE;
  default:
    return k == GC_ARG_NONE;
  }
}

/* A number given where a (possibly optional) Tensor is declared? */
static bool number_for_tensor(const gc_type *t, const gc_arg *a) {
  while (t->kind == GC_TY_OPTIONAL)
    t = t->elem;
  return t->kind == GC_TY_TENSOR && is_scalar_kind(a->kind);
}

/* "self, other, alpha": the parameter names of a schema, for messages. */
static const char *param_list(const gc_schema *s, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < s->nargs && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
                             s->args[i].name);
  return buf;
}

static int bind_args(gc_decoder *d, gc_node *n) {
  const gc_schema *s = n->op->schema;
  char tbuf[160], lbuf[400];
  bool *bound = gc_arena_calloc(d->a, (size_t)s->nargs + 1, sizeof *bound);
  if (!bound)
    return gc_errorf(d->err, GC_ENOMEM, "out of memory");
  bool seen_keyword = false, wrapped = gc_op_takes_wrapped_numbers(s);
  for (int k = 0; k < n->nargs; k++) {
    gc_named_arg *a = &n->args[k];
    int p = gc_schema_find_arg(s, a->name);
    if (p < 0) {
      if (s->vararg)
        continue;
      return gc__fail(d, GC_EINVAL, a->name,
                      "%s has no such parameter (it takes: %s)", s->qualified,
                      param_list(s, lbuf, sizeof lbuf));
    }
    if (bound[p])
      return gc__fail(d, GC_EINVAL, a->name, "is given twice");
    if (!a->keyword) {
      if (seen_keyword)
        return gc__fail(d, GC_EINVAL, a->name,
                        "positional argument after a keyword argument");
      if (s->args[p].kwarg_only)
        return gc__fail(d, GC_EINVAL, a->name,
                        "is keyword-only and cannot be passed positionally");
      if (p != k)
        return gc__fail(d, GC_EINVAL, a->name,
                        "passed as positional argument %d but it is "
                        "parameter %d of %s",
                        k, p, s->qualified);
    } else {
      seen_keyword = true;
    }
    bound[p] = true;
    a->param = p;
    if (!accepts(s->args[p].type, &a->arg, wrapped))
      return gc__fail(d, GC_EINVAL, a->name, "expected %s, got %s%s",
                      type_text(s->args[p].type, tbuf, sizeof tbuf),
                      gc_arg_kind_name(a->arg.kind),
                      number_for_tensor(s->args[p].type, &a->arg)
                          ? " (torch takes a number for a Tensor only in "
                            "add, sub, mul, div and their variants)"
                          : "");
  }
  for (int p = 0; p < s->nargs; p++)
    if (!bound[p] && !s->args[p].has_default)
      return gc__fail(d, GC_EINVAL, s->args[p].name,
                      "is required by %s (%s) but missing", s->qualified,
                      type_text(s->args[p].type, tbuf, sizeof tbuf));
  return 0;
}

static int check_returns(gc_decoder *d, const gc_node *n) {
  const gc_schema *s = n->op->schema;
  char tbuf[160];
  if (s->varret)
    return 0;
  for (int r = 0; r < s->nrets && r < n->noutputs; r++) {
    if (!returns_ok(s->rets[r].type, &n->outputs[r])) {
      char arg[32];
      snprintf(arg, sizeof arg, "output %d", r);
      return gc__fail(d, GC_EINVAL, arg, "expected %s, got %s",
                      type_text(s->rets[r].type, tbuf, sizeof tbuf),
                      gc_arg_kind_name(n->outputs[r].kind));
    }
  }
  return 0;
}

/* ---- topological order and cycles ---- */

/* Predecessor lists in CSR form: node i's producers are
 * pred[start[i] .. start[i+1]). */
typedef struct deps {
  int *start;
  int *pred;
  int fill;
} deps;

static void count_ref(const gc_value *v, int item, void *ctx) {
  (void)item;
  if (v->def_node >= 0)
    (*(int *)ctx)++;
}

static void add_ref(const gc_value *v, int item, void *ctx) {
  (void)item;
  deps *dp = ctx;
  if (v->def_node >= 0)
    dp->pred[dp->fill++] = v->def_node;
}

static int build_deps(gc_decoder *d, deps *dp) {
  const gc_graph *g = d->g;
  dp->start = gc_arena_calloc(d->a, (size_t)g->nnodes + 1, sizeof(int));
  if (!dp->start)
    return GC_ENOMEM;
  int total = 0;
  for (int i = 0; i < g->nnodes; i++) {
    dp->start[i] = total;
    for (int k = 0; k < g->nodes[i].nargs; k++)
      gc_arg_each_value(&g->nodes[i].args[k].arg, count_ref, &total);
  }
  dp->start[g->nnodes] = total;
  dp->pred = gc_arena_calloc(d->a, (size_t)total + 1, sizeof(int));
  if (!dp->pred)
    return GC_ENOMEM;
  dp->fill = 0;
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i].nargs; k++)
      gc_arg_each_value(&g->nodes[i].args[k].arg, add_ref, dp);
  return 0;
}

/* Kahn's algorithm over the dependencies; when some nodes cannot be
 * ordered, walks predecessors among them until one repeats and reports that
 * cycle. Returns 0 when the graph is acyclic. */
static int find_cycle(gc_decoder *d, const deps *dp) {
  const gc_graph *g = d->g;
  int n = g->nnodes;
  int *indeg = gc_arena_calloc(d->a, (size_t)n + 1, sizeof(int));
  int *succ_start = gc_arena_calloc(d->a, (size_t)n + 2, sizeof(int));
  int *succ = gc_arena_calloc(d->a, (size_t)dp->start[n] + 1, sizeof(int));
  int *queue = gc_arena_calloc(d->a, (size_t)n + 1, sizeof(int));
  int *mark = gc_arena_calloc(d->a, (size_t)n + 1, sizeof(int));
  if (!indeg || !succ_start || !succ || !queue || !mark)
    return gc_errorf(d->err, GC_ENOMEM, "out of memory");
  for (int i = 0; i < n; i++)
    for (int e = dp->start[i]; e < dp->start[i + 1]; e++) {
      indeg[i]++;
      succ_start[dp->pred[e] + 1]++;
    }
  for (int i = 0; i < n; i++)
    succ_start[i + 1] += succ_start[i];
  int *fill = mark; /* reuse as a cursor, reset below */
  for (int i = 0; i < n; i++)
    for (int e = dp->start[i]; e < dp->start[i + 1]; e++) {
      int p = dp->pred[e];
      succ[succ_start[p] + fill[p]++] = i;
    }
  memset(mark, 0, (size_t)n * sizeof(int));
  int head = 0, tail = 0;
  for (int i = 0; i < n; i++)
    if (indeg[i] == 0)
      queue[tail++] = i;
  while (head < tail) {
    int u = queue[head++];
    mark[u] = 1;
    for (int e = succ_start[u]; e < succ_start[u + 1]; e++)
      if (--indeg[succ[e]] == 0)
        queue[tail++] = succ[e];
  }
  if (tail == n)
    return 0;
  /* Every unordered node has an unordered predecessor: walk back, recording
   * the walk (pos[] holds each node's place in it) until a node repeats. */
  int *walk = queue, *pos = indeg;
  for (int i = 0; i < n; i++)
    pos[i] = -1;
  int u = 0, len = 0;
  while (mark[u])
    u++;
  while (pos[u] < 0) {
    pos[u] = len;
    walk[len++] = u;
    for (int e = dp->start[u]; e < dp->start[u + 1]; e++)
      if (!mark[dp->pred[e]]) {
        u = dp->pred[e];
        break;
      }
  }
  /* walk[pos[u]] .. walk[len-1] is the cycle, each using the next. */
  char msg[700], nb[200];
  size_t used = 0;
  int count = len - pos[u];
  for (int i = 0; i < count && i < 6; i++) {
    gc_node_describe(g, walk[pos[u] + i], nb, sizeof nb);
    used +=
        (size_t)snprintf(msg + used, used < sizeof msg ? sizeof msg - used : 0,
                         "%s%s", i ? " uses " : "", nb);
  }
  d->node = -1;
  d->where = "graph";
  return gc__fail(d, GC_EINVAL, NULL, "cycle of %d nodes: %s%s", count, msg,
                  count > 6 ? " ..." : "");
}

typedef struct order_ctx {
  int node;              /* the node whose arguments are checked */
  const gc_value *first; /* first value used before its definition */
} order_ctx;

static void check_ref(const gc_value *v, int item, void *ctx) {
  (void)item;
  order_ctx *oc = ctx;
  if (!oc->first && v->def_node >= oc->node)
    oc->first = v;
}

static int check_order(gc_decoder *d) {
  gc_graph *g = d->g;
  for (int i = 0; i < g->nnodes; i++) {
    for (int k = 0; k < g->nodes[i].nargs; k++) {
      order_ctx oc = {.node = i};
      gc_arg_each_value(&g->nodes[i].args[k].arg, check_ref, &oc);
      if (!oc.first)
        continue;
      deps dp;
      if (build_deps(d, &dp))
        return gc_errorf(d->err, GC_ENOMEM, "out of memory");
      int rc = find_cycle(d, &dp);
      if (rc)
        return rc;
      char nb[200];
      d->node = i;
      return gc__fail(d, GC_EINVAL, g->nodes[i].args[k].name,
                      "uses '%.200s' before it is defined by %s (nodes must "
                      "be in topological order)",
                      oc.first->name,
                      gc_node_describe(g, oc.first->def_node, nb, sizeof nb));
    }
  }
  return 0;
}

int gc__validate(gc_decoder *d) {
  gc_graph *g = d->g;
  for (int i = 0; i < g->nnodes; i++) {
    d->node = i;
    if (bind_args(d, &g->nodes[i]) || check_returns(d, &g->nodes[i]))
      return d->err->code;
  }
  d->node = -1;
  return check_order(d);
}
