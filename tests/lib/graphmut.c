/*
 * graphmut.c: random transformations of GraphModule messages. See
 * graphmut.h.
 *
 * Everything works on the protobuf-c structs directly. Value names live in
 * the side tables and in every Argument that refers to a value; a visitor
 * hands out pointers to those name fields so renaming and dependency
 * tracking share one walk.
 */
#include "tests/lib/graphmut.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/schema.h"
#include "compiler/strmap.h"

typedef Compiled__V1__Argument pb_arg;
typedef Compiled__V1__Node pb_node;

gm_module *gm_unpack(gc_arena *a, const uint8_t *buf, size_t len) {
  ProtobufCAllocator al = gc_arena_pb_allocator(a);
  return compiled__v1__graph_module__unpack(&al, len, buf);
}

uint8_t *gm_pack(gc_arena *a, const gm_module *m, size_t *len) {
  *len = compiled__v1__graph_module__get_packed_size(m);
  uint8_t *buf = gc_arena_alloc(a, *len + 1);
  compiled__v1__graph_module__pack(m, buf);
  return buf;
}

gm_module *gm_clone(gc_arena *a, const gm_module *m) {
  size_t len;
  uint8_t *buf = gm_pack(a, m, &len);
  return gm_unpack(a, buf, len);
}

/* Appends `item` to the repeated field `field` of message `msg` (its count
 * n_<field>): a protobuf-c array has no spare room, so it is copied into a
 * one-longer one from arena `a`. */
#define APPEND(a, msg, field, item)                                            \
  do {                                                                         \
    void *grown_ =                                                             \
        gc_arena_calloc((a), (msg)->n_##field + 1, sizeof *(msg)->field);      \
    memcpy(grown_, (msg)->field, (msg)->n_##field * sizeof *(msg)->field);     \
    (msg)->field = grown_;                                                     \
    (msg)->field[(msg)->n_##field++] = (item);                                 \
  } while (0)

/* ---- visiting value names ---- */

typedef void (*name_fn)(char **name, void *ctx);

static void visit_arg(pb_arg *a, name_fn fn, void *ctx) {
  if (!a)
    return;
  switch (a->kind_case) {
  case COMPILED__V1__ARGUMENT__KIND_AS_TENSOR:
    fn(&a->as_tensor->name, ctx);
    break;
  case COMPILED__V1__ARGUMENT__KIND_AS_TENSORS:
    for (size_t i = 0; i < a->as_tensors->n_items; i++)
      fn(&a->as_tensors->items[i]->name, ctx);
    break;
  case COMPILED__V1__ARGUMENT__KIND_AS_OPTIONAL_TENSORS:
    for (size_t i = 0; i < a->as_optional_tensors->n_items; i++) {
      Compiled__V1__OptionalTensorArgument *o =
          a->as_optional_tensors->items[i];
      if (o->kind_case ==
          COMPILED__V1__OPTIONAL_TENSOR_ARGUMENT__KIND_AS_TENSOR)
        fn(&o->as_tensor->name, ctx);
    }
    break;
  case COMPILED__V1__ARGUMENT__KIND_AS_SYM_INT:
    if (a->as_sym_int->kind_case ==
        COMPILED__V1__SYM_INT_ARGUMENT__KIND_AS_NAME)
      fn(&a->as_sym_int->as_name, ctx);
    break;
  case COMPILED__V1__ARGUMENT__KIND_AS_SYM_INTS:
    for (size_t i = 0; i < a->as_sym_ints->n_items; i++)
      if (a->as_sym_ints->items[i]->kind_case ==
          COMPILED__V1__SYM_INT_ARGUMENT__KIND_AS_NAME)
        fn(&a->as_sym_ints->items[i]->as_name, ctx);
    break;
  default:
    break;
  }
}

static void visit_node_uses(pb_node *n, name_fn fn, void *ctx) {
  for (size_t j = 0; j < n->n_inputs; j++)
    visit_arg(n->inputs[j]->arg, fn, ctx);
}

static void visit_node_defs(pb_node *n, name_fn fn, void *ctx) {
  for (size_t j = 0; j < n->n_outputs; j++)
    visit_arg(n->outputs[j], fn, ctx);
}

static void visit_all(gm_module *m, name_fn fn, void *ctx) {
  Compiled__V1__Graph *g = m->graph;
  for (size_t i = 0; i < g->n_inputs; i++)
    visit_arg(g->inputs[i]->arg, fn, ctx);
  for (size_t i = 0; i < g->n_nodes; i++) {
    visit_node_uses(g->nodes[i], fn, ctx);
    visit_node_defs(g->nodes[i], fn, ctx);
  }
  for (size_t i = 0; i < g->n_outputs; i++)
    visit_arg(g->outputs[i], fn, ctx);
  for (size_t i = 0; i < g->n_tensor_values; i++)
    fn(&g->tensor_values[i]->name, ctx);
  for (size_t i = 0; i < g->n_sym_int_values; i++)
    fn(&g->sym_int_values[i]->name, ctx);
}

/* ---- renaming ---- */

typedef struct rename_ctx {
  gc_strmap map; /* old -> new */
} rename_ctx;

static void rename_one(char **name, void *ctx) {
  rename_ctx *rc = ctx;
  char *nw = gc_strmap_get(&rc->map, *name);
  if (nw)
    *name = nw;
}

static void shuffle_ints(int *v, int n, tu_rng *r) {
  for (int i = n - 1; i > 0; i--) {
    int j = tu_rng_below(r, i + 1);
    int t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

void gm_rename(gc_arena *a, gm_module *m, tu_rng *r) {
  Compiled__V1__Graph *g = m->graph;
  int n = (int)(g->n_tensor_values + g->n_sym_int_values);
  int *perm = gc_arena_calloc(a, (size_t)n + 1, sizeof *perm);
  for (int i = 0; i < n; i++)
    perm[i] = i;
  shuffle_ints(perm, n, r);
  rename_ctx rc;
  gc_strmap_init(&rc.map, a, (size_t)n);
  /* New names look like the old "_N" ones on purpose: a rename done in
   * place would corrupt the tables (the flaw of torch.export's canonicalize
   * this key must not share). Half the time use other spellings. */
  int style = tu_rng_below(r, 2);
  int k = 0;
  for (size_t i = 0; i < g->n_tensor_values; i++, k++)
    gc_strmap_put(&rc.map, g->tensor_values[i]->name,
                  gc_arena_printf(a, style ? "_%d" : "v%d_%llx", perm[k],
                                  (unsigned long long)(tu_rng_next(r) & 0xfff)),
                  NULL);
  for (size_t i = 0; i < g->n_sym_int_values; i++, k++)
    gc_strmap_put(&rc.map, g->sym_int_values[i]->name,
                  gc_arena_printf(a, "_%d", perm[k]), NULL);
  visit_all(m, rename_one, &rc);
}

/* ---- reordering ---- */

typedef struct producers {
  gc_strmap def; /* value name -> 1 + producing node index */
  int *deps;     /* per use */
  int ndeps;
  int cap;
  gc_arena *a;
} producers;

static void record_def(char **name, void *ctx) {
  producers *p = ctx;
  gc_strmap_put(&p->def, *name, (void *)(intptr_t)(p->ndeps + 1), NULL);
}

static void record_dep(char **name, void *ctx) {
  producers *p = ctx;
  intptr_t d = (intptr_t)gc_strmap_get(&p->def, *name);
  if (d && p->ndeps < p->cap)
    p->deps[p->ndeps++] = (int)d - 1;
}

/* Nodes that must keep their place relative to all others: those that write
 * something (an alias annotation with '!') or draw random numbers. */
static int is_barrier(const gm_module *m, const pb_node *n) {
  for (size_t i = 0; i < m->n_operators; i++) {
    if (strcmp(m->operators[i]->name, n->target) != 0)
      continue;
    const char *s = m->operators[i]->schema;
    return strchr(s, '!') != NULL || strstr(s, "batch_norm") ||
           strstr(s, "rand") || strstr(s, "dropout") ||
           strstr(s, "bernoulli") || strstr(s, "normal") ||
           strstr(s, "uniform");
  }
  return 1;
}

void gm_reorder(gc_arena *a, gm_module *m, tu_rng *r) {
  Compiled__V1__Graph *g = m->graph;
  int n = (int)g->n_nodes;
  if (n < 2)
    return;
  producers p = {.a = a};
  gc_strmap_init(&p.def, a, (size_t)n * 2);
  /* Map each defined name to its node (ndeps doubles as the node index). */
  for (int i = 0; i < n; i++) {
    p.ndeps = i;
    visit_node_defs(g->nodes[i], record_def, &p);
  }
  int *pred_start = gc_arena_calloc(a, (size_t)n + 1, sizeof(int));
  p.cap = 1 << 20;
  p.deps = gc_arena_calloc(a, (size_t)p.cap, sizeof(int));
  p.ndeps = 0;
  for (int i = 0; i < n; i++) {
    pred_start[i] = p.ndeps;
    visit_node_uses(g->nodes[i], record_dep, &p);
  }
  pred_start[n] = p.ndeps;
  pb_node **out = gc_arena_calloc(a, (size_t)n, sizeof *out);
  int *placed = gc_arena_calloc(a, (size_t)n, sizeof(int));
  int *ready = gc_arena_calloc(a, (size_t)n, sizeof(int));
  int nout = 0;
  /* Segments between barriers are shuffled independently; a barrier stays
   * where it is relative to everything. */
  int seg = 0;
  while (seg < n) {
    int end = seg;
    while (end < n && !is_barrier(m, g->nodes[end]))
      end++;
    int remaining = end - seg;
    while (remaining > 0) {
      int nready = 0;
      for (int i = seg; i < end; i++) {
        if (placed[i])
          continue;
        int ok = 1;
        for (int e = pred_start[i]; e < pred_start[i + 1] && ok; e++)
          ok = placed[p.deps[e]];
        if (ok)
          ready[nready++] = i;
      }
      int pick = ready[tu_rng_below(r, nready)];
      placed[pick] = 1;
      out[nout++] = g->nodes[pick];
      remaining--;
    }
    if (end < n) {
      placed[end] = 1;
      out[nout++] = g->nodes[end];
    }
    seg = end + 1;
  }
  memcpy(g->nodes, out, (size_t)n * sizeof *out);
}

#define SHUFFLE(arr, cnt)                                                      \
  do {                                                                         \
    for (size_t i_ = (cnt); i_ > 1; i_--) {                                    \
      size_t j_ = (size_t)tu_rng_below(r, (int)i_);                            \
      void *t_ = (void *)(arr)[i_ - 1];                                        \
      (arr)[i_ - 1] = (arr)[j_];                                               \
      (arr)[j_] = t_;                                                          \
    }                                                                          \
  } while (0)

void gm_shuffle_tables(gm_module *m, tu_rng *r) {
  Compiled__V1__Graph *g = m->graph;
  SHUFFLE(g->tensor_values, g->n_tensor_values);
  SHUFFLE(g->sym_int_values, g->n_sym_int_values);
  SHUFFLE(m->operators, m->n_operators);
  for (size_t i = 0; i < g->n_storage_groups; i++) {
    Compiled__V1__StorageGroup *sg = g->storage_groups[i];
    for (size_t k = sg->n_inputs; k > 1; k--) {
      size_t j = (size_t)tu_rng_below(r, (int)k);
      int32_t t = sg->inputs[k - 1];
      sg->inputs[k - 1] = sg->inputs[j];
      sg->inputs[j] = t;
    }
  }
  SHUFFLE(g->storage_groups, g->n_storage_groups);
}

static Compiled__V1__NodeMetadata *new_metadata(gc_arena *a) {
  Compiled__V1__NodeMetadata *md = gc_arena_zalloc(a, sizeof *md);
  compiled__v1__node_metadata__init(md);
  return md;
}

void gm_touch_metadata(gc_arena *a, gm_module *m, tu_rng *r) {
  Compiled__V1__Graph *g = m->graph;
  for (size_t i = 0; i < g->n_nodes; i++) {
    pb_node *n = g->nodes[i];
    if (!n->metadata)
      n->metadata = new_metadata(a);
    n->metadata->stack_trace =
        gc_arena_printf(a, "File \"/home/rank%d/train.py\", line %d",
                        tu_rng_below(r, 256), tu_rng_below(r, 1000));
    n->metadata->module_path =
        gc_arena_printf(a, "layer.%d", tu_rng_below(r, 9));
  }
  for (size_t i = 0; i < g->n_inputs; i++)
    if (*g->inputs[i]->target)
      g->inputs[i]->target = gc_arena_printf(a, "renamed.%zu", i);
  /* Device indices vary between ranks and never enter the key. */
  for (size_t i = 0; i < g->n_tensor_values; i++) {
    Compiled__V1__Device *d = g->tensor_values[i]->meta->device;
    if (d) {
      d->has_index = 1;
      d->index = tu_rng_below(r, 8);
    }
  }
  m->producer = gc_arena_printf(a, "producer-%d", tu_rng_below(r, 100));
}

/* ---- spelling out defaults ---- */

static pb_arg *literal_arg(gc_arena *a, const gc_arg *d) {
  pb_arg *x = gc_arena_zalloc(a, sizeof *x);
  compiled__v1__argument__init(x);
  switch (d->kind) {
  case GC_ARG_NONE:
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_NONE;
    x->as_none = 1;
    return x;
  case GC_ARG_INT:
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_INT;
    x->as_int = d->i;
    return x;
  case GC_ARG_FLOAT:
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_FLOAT;
    x->as_float = d->f;
    return x;
  case GC_ARG_BOOL:
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_BOOL;
    x->as_bool = d->i != 0;
    return x;
  case GC_ARG_INTS: {
    Compiled__V1__IntList *l = gc_arena_zalloc(a, sizeof *l);
    compiled__v1__int_list__init(l);
    l->n_items = (size_t)d->n;
    l->items = gc_arena_calloc(a, (size_t)d->n + 1, sizeof(int64_t));
    memcpy(l->items, d->ints, (size_t)d->n * sizeof(int64_t));
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_INTS;
    x->as_ints = l;
    return x;
  }
  default:
    return NULL;
  }
}

int gm_spell_defaults(gc_arena *a, gm_module *m, tu_rng *r) {
  Compiled__V1__Graph *g = m->graph;
  int added = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    pb_node *n = g->nodes[i];
    const char *text = NULL;
    for (size_t k = 0; k < m->n_operators; k++)
      if (strcmp(m->operators[k]->name, n->target) == 0)
        text = m->operators[k]->schema;
    gc_schema *s;
    if (!text || gc_schema_parse(a, text, &s, NULL) != 0 || s->vararg)
      continue;
    for (int p = 0; p < s->nargs; p++) {
      if (!s->args[p].has_default || tu_rng_below(r, 2))
        continue;
      int given = 0;
      for (size_t j = 0; j < n->n_inputs; j++)
        given |= strcmp(n->inputs[j]->name, s->args[p].name) == 0;
      pb_arg *lit = given ? NULL : literal_arg(a, &s->args[p].def);
      if (!lit)
        continue;
      Compiled__V1__NamedArgument *na = gc_arena_zalloc(a, sizeof *na);
      compiled__v1__named_argument__init(na);
      na->name = (char *)s->args[p].name;
      na->arg = lit;
      na->kind = COMPILED__V1__ARGUMENT_KIND__ARGUMENT_KIND_KEYWORD;
      APPEND(a, n, inputs, na);
      added++;
    }
  }
  return added;
}

/* ---- semantic edits ---- */

/* A random node index whose arguments contain a literal of `kind_case`,
 * with *out pointing at that argument; -1 when there is none. */
static int find_literal(gm_module *m, tu_rng *r, int kind_case, pb_arg **out) {
  Compiled__V1__Graph *g = m->graph;
  int n = (int)g->n_nodes, start = n ? tu_rng_below(r, n) : 0;
  for (int k = 0; k < n; k++) {
    pb_node *node = g->nodes[(start + k) % n];
    for (size_t j = 0; j < node->n_inputs; j++)
      if (node->inputs[j]->arg &&
          (int)node->inputs[j]->arg->kind_case == kind_case) {
        *out = node->inputs[j]->arg;
        return (start + k) % n;
      }
  }
  return -1;
}

/* The TensorMeta of a random tensor input, or NULL. */
static Compiled__V1__TensorMeta *input_meta(gm_module *m, tu_rng *r,
                                            int min_rank, int *which) {
  Compiled__V1__Graph *g = m->graph;
  int n = (int)g->n_inputs, start = n ? tu_rng_below(r, n) : 0;
  for (int k = 0; k < n; k++) {
    int i = (start + k) % n;
    pb_arg *a = g->inputs[i]->arg;
    if (a->kind_case != COMPILED__V1__ARGUMENT__KIND_AS_TENSOR)
      continue;
    for (size_t t = 0; t < g->n_tensor_values; t++)
      if (strcmp(g->tensor_values[t]->name, a->as_tensor->name) == 0 &&
          (int)g->tensor_values[t]->meta->n_sizes >= min_rank) {
        if (which)
          *which = i;
        return g->tensor_values[t]->meta;
      }
  }
  return NULL;
}

/* Points a node at a fresh operator that is a copy of its own in another
 * namespace ("aten_edited::add_.Tensor"; the unqualified name stays, so
 * what torch allows of the operator, such as a number for a Tensor, stays
 * too). */
static const char *edit_op(gc_arena *a, gm_module *m, tu_rng *r) {
  Compiled__V1__Graph *g = m->graph;
  if (!g->n_nodes)
    return NULL;
  pb_node *n = g->nodes[tu_rng_below(r, (int)g->n_nodes)];
  const char *schema = NULL;
  for (size_t k = 0; k < m->n_operators; k++)
    if (strcmp(m->operators[k]->name, n->target) == 0)
      schema = m->operators[k]->schema;
  if (!schema)
    return NULL;
  const char *sep = strstr(schema, "::");
  if (!sep)
    return NULL;
  char *nschema =
      gc_arena_printf(a, "%.*s_edited%s", (int)(sep - schema), schema, sep);
  char *nname =
      gc_arena_strndup(a, nschema, (size_t)(strchr(nschema, '(') - nschema));
  Compiled__V1__Operator *op = gc_arena_zalloc(a, sizeof *op);
  compiled__v1__operator__init(op);
  op->name = nname;
  op->schema = nschema;
  APPEND(a, m, operators, op);
  const char *old = n->target;
  n->target = nname;
  return gc_arena_printf(a, "operator %s -> %s", old, nname);
}

/* Swaps two distinct graph outputs, or replaces one with another value. */
static const char *edit_outputs(gc_arena *a, gm_module *m, tu_rng *r) {
  Compiled__V1__Graph *g = m->graph;
  for (size_t i = 0; i + 1 < g->n_outputs; i++)
    for (size_t j = i + 1; j < g->n_outputs; j++) {
      pb_arg *x = g->outputs[i], *y = g->outputs[j];
      if (x->kind_case == COMPILED__V1__ARGUMENT__KIND_AS_TENSOR &&
          y->kind_case == COMPILED__V1__ARGUMENT__KIND_AS_TENSOR &&
          strcmp(x->as_tensor->name, y->as_tensor->name) != 0) {
        g->outputs[i] = y;
        g->outputs[j] = x;
        return "swapped two graph outputs";
      }
    }
  /* Else return one more value: the first tensor input. */
  for (size_t i = 0; i < g->n_inputs; i++)
    if (g->inputs[i]->arg->kind_case ==
        COMPILED__V1__ARGUMENT__KIND_AS_TENSOR) {
      APPEND(a, g, outputs, g->inputs[i]->arg);
      return "added a graph output";
    }
  (void)r;
  return NULL;
}

/* Adds a storage group of two tensor inputs, or drops an existing one. */
static const char *edit_aliasing(gc_arena *a, gm_module *m, tu_rng *r) {
  Compiled__V1__Graph *g = m->graph;
  if (g->n_storage_groups) {
    g->n_storage_groups--;
    return "dropped a storage group";
  }
  int first = -1, second = -1;
  for (size_t i = 0; i < g->n_inputs && second < 0; i++)
    if (g->inputs[i]->arg->kind_case ==
        COMPILED__V1__ARGUMENT__KIND_AS_TENSOR) {
      if (first < 0)
        first = (int)i;
      else
        second = (int)i;
    }
  if (second < 0)
    return NULL;
  Compiled__V1__StorageGroup *sg = gc_arena_zalloc(a, sizeof *sg);
  compiled__v1__storage_group__init(sg);
  sg->n_inputs = 2;
  sg->inputs = gc_arena_calloc(a, 2, sizeof(int32_t));
  sg->inputs[0] = first;
  sg->inputs[1] = second;
  g->storage_groups = gc_arena_calloc(a, 1, sizeof *g->storage_groups);
  g->storage_groups[0] = sg;
  g->n_storage_groups = 1;
  (void)r;
  return gc_arena_printf(a, "inputs %d and %d now share storage", first,
                         second);
}

/* Points one tensor argument of a node at a different earlier value with
 * the same metadata (so the graph stays valid): a rewiring. */
static const char *edit_rewire(gc_arena *a, gm_module *m, tu_rng *r) {
  Compiled__V1__Graph *g = m->graph;
  for (size_t i = 0; i < g->n_nodes; i++) {
    pb_node *n = g->nodes[i];
    for (size_t j = 0; j < n->n_inputs; j++) {
      pb_arg *arg = n->inputs[j]->arg;
      if (arg->kind_case != COMPILED__V1__ARGUMENT__KIND_AS_TENSOR)
        continue;
      /* Candidates: the graph's tensor inputs with identical metadata. */
      const Compiled__V1__TensorMeta *want = NULL;
      for (size_t t = 0; t < g->n_tensor_values; t++)
        if (strcmp(g->tensor_values[t]->name, arg->as_tensor->name) == 0)
          want = g->tensor_values[t]->meta;
      for (size_t k = 0; want && k < g->n_inputs; k++) {
        pb_arg *in = g->inputs[k]->arg;
        if (in->kind_case != COMPILED__V1__ARGUMENT__KIND_AS_TENSOR ||
            strcmp(in->as_tensor->name, arg->as_tensor->name) == 0)
          continue;
        for (size_t t = 0; t < g->n_tensor_values; t++) {
          if (strcmp(g->tensor_values[t]->name, in->as_tensor->name) != 0)
            continue;
          size_t l1 = compiled__v1__tensor_meta__get_packed_size(want);
          size_t l2 = compiled__v1__tensor_meta__get_packed_size(
              g->tensor_values[t]->meta);
          uint8_t *b1 = gc_arena_alloc(a, l1 + 1),
                  *b2 = gc_arena_alloc(a, l2 + 1);
          compiled__v1__tensor_meta__pack(want, b1);
          compiled__v1__tensor_meta__pack(g->tensor_values[t]->meta, b2);
          if (l1 == l2 && memcmp(b1, b2, l1) == 0 && tu_rng_below(r, 4) != 0) {
            Compiled__V1__TensorArgument *ta = gc_arena_zalloc(a, sizeof *ta);
            compiled__v1__tensor_argument__init(ta);
            ta->name = in->as_tensor->name;
            const char *old = arg->as_tensor->name;
            arg->as_tensor = ta;
            return gc_arena_printf(a, "node %zu argument %s: %s -> %s", i,
                                   n->inputs[j]->name, old, ta->name);
          }
        }
      }
    }
  }
  return NULL;
}

const char *gm_edit(gc_arena *a, gm_module *m, tu_rng *r, int which) {
  Compiled__V1__Graph *g = m->graph;
  pb_arg *lit;
  Compiled__V1__TensorMeta *t;
  int idx;
  switch (which) {
  case 0:
    return edit_op(a, m, r);
  case 1:
    if ((idx = find_literal(m, r, COMPILED__V1__ARGUMENT__KIND_AS_INT, &lit)) <
        0)
      return NULL;
    lit->as_int += 1 + tu_rng_below(r, 3);
    return gc_arena_printf(a, "int literal of node %d", idx);
  case 2:
    if ((idx = find_literal(m, r, COMPILED__V1__ARGUMENT__KIND_AS_FLOAT,
                            &lit)) < 0)
      return NULL;
    lit->as_float = lit->as_float + 1.0 == lit->as_float ? lit->as_float * 2 + 1
                                                         : lit->as_float + 1.0;
    return gc_arena_printf(a, "float literal of node %d", idx);
  case 3:
    if ((idx = find_literal(m, r, COMPILED__V1__ARGUMENT__KIND_AS_BOOL, &lit)) <
        0)
      return NULL;
    lit->as_bool = !lit->as_bool;
    return gc_arena_printf(a, "bool literal of node %d", idx);
  case 4:
    if (!(t = input_meta(m, r, 1, &idx)))
      return NULL;
    t->sizes[tu_rng_below(r, (int)t->n_sizes)]->as_int += 1;
    return gc_arena_printf(a, "a size of input %d", idx);
  case 5:
    if (!(t = input_meta(m, r, 1, &idx)))
      return NULL;
    t->strides[tu_rng_below(r, (int)t->n_strides)]->as_int += 1;
    return gc_arena_printf(a, "a stride of input %d", idx);
  case 6:
    if (!(t = input_meta(m, r, 0, &idx)))
      return NULL;
    t->dtype = t->dtype == COMPILED__V1__SCALAR_TYPE__SCALAR_TYPE_DOUBLE
                   ? COMPILED__V1__SCALAR_TYPE__SCALAR_TYPE_FLOAT
                   : COMPILED__V1__SCALAR_TYPE__SCALAR_TYPE_DOUBLE;
    return gc_arena_printf(a, "dtype of input %d", idx);
  case 7:
    return edit_aliasing(a, m, r);
  case 8:
    if (!(t = input_meta(m, r, 0, &idx)))
      return NULL;
    t->requires_grad = !t->requires_grad;
    return gc_arena_printf(a, "requires_grad of input %d", idx);
  case 9: {
    if (!g->n_inputs)
      return NULL;
    int i = tu_rng_below(r, (int)g->n_inputs);
    if (g->inputs[i]->arg->kind_case != COMPILED__V1__ARGUMENT__KIND_AS_TENSOR)
      return NULL;
    g->inputs[i]->kind =
        g->inputs[i]->kind == COMPILED__V1__INPUT_KIND__INPUT_KIND_USER_INPUT
            ? COMPILED__V1__INPUT_KIND__INPUT_KIND_BUFFER
            : COMPILED__V1__INPUT_KIND__INPUT_KIND_USER_INPUT;
    return gc_arena_printf(a, "kind of input %d", i);
  }
  case 10:
    return edit_outputs(a, m, r);
  case 11:
    return edit_rewire(a, m, r);
  case 12: {
    if (!(t = input_meta(m, r, 0, &idx)))
      return NULL;
    if (!t->storage_offset) {
      t->storage_offset = gc_arena_zalloc(a, sizeof *t->storage_offset);
      compiled__v1__sym_int__init(t->storage_offset);
      t->storage_offset->kind_case = COMPILED__V1__SYM_INT__KIND_AS_INT;
    }
    t->storage_offset->as_int += 3;
    return gc_arena_printf(a, "storage offset of input %d", idx);
  }
  case 13: {
    /* An intermediate's metadata: the first node output's first size. */
    for (size_t i = 0; i < g->n_nodes; i++) {
      pb_arg *o = g->nodes[i]->n_outputs ? g->nodes[i]->outputs[0] : NULL;
      if (!o || o->kind_case != COMPILED__V1__ARGUMENT__KIND_AS_TENSOR)
        continue;
      for (size_t k = 0; k < g->n_tensor_values; k++)
        if (strcmp(g->tensor_values[k]->name, o->as_tensor->name) == 0 &&
            g->tensor_values[k]->meta->n_sizes > 0) {
          g->tensor_values[k]->meta->sizes[0]->as_int += 1;
          return gc_arena_printf(a, "size of node %zu's output", i);
        }
    }
    return NULL;
  }
  }
  return NULL;
}
