/*
 * key_order.c: the canonical node order of key.c: storage classes
 * (union-find over views and reported storage groups), the edges mutation
 * adds between readers and writers of a class, down and up signatures,
 * and Kahn's algorithm taking the ready node of smallest signature. See
 * key.c's header for why each piece is there.
 */
#include <stdlib.h>
#include <string.h>

#include "compiler/key_internal.h"
#include "compiler/opfacts.h"
#include "compiler/ops.h"

/* ---- canonical order ---- */

/* Union-find over value ids, plus one extra class for the RNG. */
static int uf_find(int *parent, int x) {
  while (parent[x] != x) {
    parent[x] = parent[parent[x]];
    x = parent[x];
  }
  return x;
}

static void uf_union(int *parent, int a, int b) {
  a = uf_find(parent, a);
  b = uf_find(parent, b);
  if (a != b)
    parent[a < b ? b : a] = a < b ? a : b;
}

/* A growable list of edges (from -> to). */
typedef struct edges {
  int *from, *to;
  int n, cap;
} edges;

/* Room for one more element in two int arrays of n elements that grow
 * together (room for *cap in each). */
static bool grow_pair(gc_arena *a, int **x, int **y, int n, int *cap) {
  int cx = *cap, cy = *cap;
  int *nx = gc_arena_grow(a, *x, n, &cx, 256, sizeof *nx);
  int *ny = nx ? gc_arena_grow(a, *y, n, &cy, 256, sizeof *ny) : NULL;
  if (!ny)
    return false;
  *x = nx;
  *y = ny;
  *cap = cx;
  return true;
}

static int edge_add(gc_arena *a, edges *e, int from, int to) {
  if (from < 0 || from == to)
    return 0;
  if (!grow_pair(a, &e->from, &e->to, e->n, &e->cap))
    return GC_ENOMEM;
  e->from[e->n] = from;
  e->to[e->n] = to;
  e->n++;
  return 0;
}

/* Per storage class: the last writer and the readers since it (a linked
 * list threaded through a pool). */
typedef struct access {
  int *last_writer; /* per class; -1: none */
  int *readers;     /* per class: head of pool list; -1: empty */
  int *pool_node, *pool_next;
  int pool_n, pool_cap;
} access;

static void each_tensor(const gc_arg *a, void (*fn)(const gc_value *, void *),
                        void *ctx) {
  if (a->kind == GC_ARG_TENSOR)
    fn(a->v, ctx);
  else if (a->kind == GC_ARG_TENSORS || a->kind == GC_ARG_OPT_TENSORS)
    for (int i = 0; i < a->n; i++)
      if (a->vals[i])
        fn(a->vals[i], ctx);
}

/* The storage classes a node reads or writes, each once: mark[c] == stamp
 * when class c is in the set (a search of the set for each tensor was
 * quadratic in a node's tensor arguments). */
typedef struct class_set {
  int *cls;
  int n, cap;
  int *parent;
  int *mark; /* per class */
  int stamp; /* the node */
} class_set;

static void collect_class(const gc_value *v, void *ctx) {
  class_set *cs = ctx;
  int c = uf_find(cs->parent, v->id);
  if (cs->mark[c] == cs->stamp)
    return;
  cs->mark[c] = cs->stamp;
  if (cs->n < cs->cap)
    cs->cls[cs->n++] = c;
}

static int read_class(gc_arena *ar, access *ac, edges *e, int cls, int node) {
  if (edge_add(ar, e, ac->last_writer[cls], node))
    return GC_ENOMEM;
  if (!grow_pair(ar, &ac->pool_node, &ac->pool_next, ac->pool_n, &ac->pool_cap))
    return GC_ENOMEM;
  ac->pool_node[ac->pool_n] = node;
  ac->pool_next[ac->pool_n] = ac->readers[cls];
  ac->readers[cls] = ac->pool_n++;
  return 0;
}

static int write_class(gc_arena *ar, access *ac, edges *e, int cls, int node) {
  if (edge_add(ar, e, ac->last_writer[cls], node))
    return GC_ENOMEM;
  for (int r = ac->readers[cls]; r >= 0; r = ac->pool_next[r])
    if (edge_add(ar, e, ac->pool_node[r], node))
      return GC_ENOMEM;
  ac->readers[cls] = -1;
  ac->last_writer[cls] = node;
  return 0;
}

/* Per storage group, its first input (in one pass: a search of the
 * inputs before each input was quadratic, 2 s for 50,000 groups of two);
 * in the arena, NULL when out of memory. */
int *gc__key_group_firsts(keyer *k) {
  const gc_graph *g = k->g;
  int *first = gc_arena_alloc(k->a, ((size_t)g->ngroups + 1) * sizeof *first);
  if (!first)
    return NULL;
  for (int grp = 0; grp < g->ngroups; grp++)
    first[grp] = -1;
  for (int i = g->ninputs - 1; i >= 0; i--) {
    int grp = g->inputs[i].storage_group;
    if (grp >= 0 && grp < g->ngroups)
      first[grp] = i;
  }
  return first;
}

/* Joins the storage classes that inputs and schema aliasing imply. */
static int join_storage(keyer *k, int *parent) {
  const gc_graph *g = k->g;
  int *first = gc__key_group_firsts(k);
  if (!first)
    return GC_ENOMEM;
  for (int i = 0; i < g->ninputs; i++) {
    const gc_input *in = &g->inputs[i];
    int grp = in->storage_group;
    if (grp >= 0 && grp < g->ngroups && first[grp] != i)
      uf_union(parent, in->arg.v->id, g->inputs[first[grp]].arg.v->id);
  }
  /* Per parameter of the node at hand: the value its returns alias, its
   * list joined once however many returns alias it (up to
   * GC_SCHEMA_MAX_RETURNS; once per return was 8 s for 1,000 returns of a
   * 300,000-tensor list). */
  struct {
    int node; /* whose parameter this entry describes; -1: none */
    const gc_value *base;
  } *seen = gc_arena_alloc(k->a, GC_SCHEMA_MAX_ARGS * sizeof *seen);
  if (!seen)
    return GC_ENOMEM;
  for (int p = 0; p < GC_SCHEMA_MAX_ARGS; p++)
    seen[p].node = -1;
  for (int i = 0; i < g->nnodes; i++) {
    const gc_node *n = &g->nodes[i];
    const gc_schema *s = n->op->schema;
    const gc_arg **bound = NULL;
    for (int r = 0; r < n->noutputs && r < s->nrets; r++) {
      int p = gc_schema_return_alias(s, r);
      if (p < 0 || p >= GC_SCHEMA_MAX_ARGS)
        continue;
      if (seen[p].node != i) {
        if (!bound && !(bound = gc__key_param_table(k, n)))
          return GC_ENOMEM;
        const gc_arg *src = bound[p];
        const gc_value *base = NULL;
        if (src && src->kind == GC_ARG_TENSOR)
          base = src->v;
        else if (src && (src->kind == GC_ARG_TENSORS ||
                         src->kind == GC_ARG_OPT_TENSORS))
          for (int j = 0; j < src->n; j++) {
            if (src->vals[j] && !base)
              base = src->vals[j];
            else if (src->vals[j])
              uf_union(parent, base->id, src->vals[j]->id);
          }
        seen[p].node = i;
        seen[p].base = base;
      }
      const gc_value *base = seen[p].base;
      if (!base)
        continue;
      const gc_arg *out = &n->outputs[r];
      if (out->kind == GC_ARG_TENSOR)
        uf_union(parent, base->id, out->v->id);
      else if (out->kind == GC_ARG_TENSORS)
        for (int j = 0; j < out->n; j++)
          uf_union(parent, base->id, out->vals[j]->id);
    }
  }
  return 0;
}

/* Ordering edges between nodes touching a storage class that one of them
 * writes, in the graph's own (valid) order. */
static int storage_edges(keyer *k, edges *e) {
  const gc_graph *g = k->g;
  gc_arena *ar = k->a;
  int nv = g->nvalues, rng = nv;
  int *parent = gc_arena_calloc(ar, (size_t)nv + 1, sizeof *parent);
  access ac = {0};
  ac.last_writer = gc_arena_calloc(ar, (size_t)nv + 1, sizeof(int));
  ac.readers = gc_arena_calloc(ar, (size_t)nv + 1, sizeof(int));
  int *rd_mark = gc_arena_alloc(ar, ((size_t)nv + 1) * sizeof(int));
  int *wr_mark = gc_arena_alloc(ar, ((size_t)nv + 1) * sizeof(int));
  if (!parent || !ac.last_writer || !ac.readers || !rd_mark || !wr_mark)
    return GC_ENOMEM;
  for (int i = 0; i <= nv; i++) {
    parent[i] = i;
    ac.last_writer[i] = -1;
    ac.readers[i] = -1;
    rd_mark[i] = wr_mark[i] = -1;
  }
  if (join_storage(k, parent))
    return GC_ENOMEM;
  for (int i = 0; i < g->nnodes; i++) {
    const gc_node *n = &g->nodes[i];
    const gc_schema *s = n->op->schema;
    int cap = 1;
    for (int j = 0; j < n->nargs; j++)
      cap += n->args[j].arg.kind == GC_ARG_TENSOR ? 1 : n->args[j].arg.n;
    class_set rd = {.cap = cap, .parent = parent, .mark = rd_mark, .stamp = i};
    class_set wr = {.cap = cap, .parent = parent, .mark = wr_mark, .stamp = i};
    rd.cls = gc_arena_calloc(ar, (size_t)cap, sizeof(int));
    wr.cls = gc_arena_calloc(ar, (size_t)cap, sizeof(int));
    if (!rd.cls || !wr.cls)
      return GC_ENOMEM;
    for (int j = 0; j < n->nargs; j++) {
      const gc_named_arg *na = &n->args[j];
      bool w = na->param >= 0 && gc_node_writes(n, na->param);
      each_tensor(&na->arg, collect_class, w ? &wr : &rd);
    }
    for (int c = 0; c < rd.n; c++)
      if (wr_mark[rd.cls[c]] != i && read_class(ar, &ac, e, rd.cls[c], i))
        return GC_ENOMEM; /* a class also written counts as written */
    for (int w = 0; w < wr.n; w++)
      if (write_class(ar, &ac, e, wr.cls[w], i))
        return GC_ENOMEM;
    if (gc_opfacts_is_random(s) &&
        write_class(ar, &ac, e, uf_find(parent, rng), i))
      return GC_ENOMEM;
  }
  return 0;
}

/* One use of a node's output, for the up signatures. */
typedef struct use {
  int def;       /* producing node */
  int user;      /* using node; -1 for a graph output */
  int where;     /* parameter index (node) or output index (graph output) */
  int item;      /* position inside a list argument */
  int slot, sub; /* which output of the producer: slot and list item */
} use;

typedef struct use_list {
  use *u;
  int n, cap;
  int user, where;
  gc_arena *a;
  int failed;
} use_list;

static void add_use(const gc_value *v, int item, void *ctx) {
  use_list *ul = ctx;
  if (v->def_node < 0)
    return;
  use *nu = gc_arena_grow(ul->a, ul->u, ul->n, &ul->cap, 256, sizeof *nu);
  if (!nu) {
    ul->failed = 1;
    return;
  }
  ul->u = nu;
  ul->u[ul->n++] = (use){.def = v->def_node,
                         .user = ul->user,
                         .where = ul->where,
                         .item = item,
                         .slot = v->def_slot,
                         .sub = v->def_item};
}

static int cmp_digest(const void *a, const void *b) {
  return memcmp(a, b, GC_DIGEST_LEN);
}

/* Down signatures in the original (topological) order. */
static int compute_down(keyer *k) {
  const gc_graph *g = k->g;
  k->phase = PHASE_DOWN;
  for (int i = 0; i < g->nnodes; i++) {
    hash_begin(&k->h);
    gc__key_hash_node(k, &g->nodes[i]);
    hash_end(&k->h, k->down[i]);
  }
  return k->h.failed ? GC_EINTERNAL : 0;
}

/* Up signatures, users before producers (reverse original order). */
static int compute_up(keyer *k, uint8_t (*up)[GC_DIGEST_LEN]) {
  const gc_graph *g = k->g;
  use_list ul = {.a = k->a};
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i].nargs; j++) {
      ul.user = i;
      ul.where = g->nodes[i].args[j].param;
      gc_arg_each_value(&g->nodes[i].args[j].arg, add_use, &ul);
    }
  for (int o = 0; o < g->noutputs; o++) {
    ul.user = -1;
    ul.where = o;
    gc_arg_each_value(&g->outputs[o], add_use, &ul);
  }
  if (ul.failed)
    return GC_ENOMEM;
  /* Group uses by producer (counting sort). */
  int *start = gc_arena_calloc(k->a, (size_t)g->nnodes + 2, sizeof(int));
  use *sorted = gc_arena_calloc(k->a, (size_t)ul.n + 1, sizeof(use));
  uint8_t(*contrib)[GC_DIGEST_LEN] =
      gc_arena_calloc(k->a, (size_t)ul.n + 1, GC_DIGEST_LEN);
  if (!start || !sorted || !contrib)
    return GC_ENOMEM;
  for (int i = 0; i < ul.n; i++)
    start[ul.u[i].def + 1]++;
  for (int i = 0; i < g->nnodes; i++)
    start[i + 1] += start[i];
  int *fill = gc_arena_calloc(k->a, (size_t)g->nnodes + 1, sizeof(int));
  if (!fill)
    return GC_ENOMEM;
  for (int i = 0; i < ul.n; i++)
    sorted[start[ul.u[i].def] + fill[ul.u[i].def]++] = ul.u[i];
  for (int i = g->nnodes - 1; i >= 0; i--) {
    int b = start[i], e = start[i + 1];
    for (int j = b; j < e; j++) {
      const use *u = &sorted[j];
      hash_begin(&k->h);
      if (u->user >= 0) {
        hash_u8(&k->h, 'U');
        hash_bytes(&k->h, up[u->user], GC_DIGEST_LEN);
      } else {
        hash_u8(&k->h, 'O');
      }
      hash_i64(&k->h, u->where);
      hash_i64(&k->h, u->item);
      hash_i64(&k->h, u->slot);
      hash_i64(&k->h, u->sub);
      hash_end(&k->h, contrib[j]);
    }
    qsort(contrib + b, (size_t)(e - b), GC_DIGEST_LEN, cmp_digest);
    hash_begin(&k->h);
    hash_bytes(&k->h, k->down[i], GC_DIGEST_LEN);
    hash_i64(&k->h, e - b);
    hash_bytes(&k->h, contrib + b, (size_t)(e - b) * GC_DIGEST_LEN);
    hash_end(&k->h, up[i]);
  }
  return k->h.failed ? GC_EINTERNAL : 0;
}

/* A binary min-heap of node indices ordered by (up signature, index). */
typedef struct heap {
  int *items;
  int n;
  uint8_t (*sig)[GC_DIGEST_LEN];
} heap;

static bool heap_less(const heap *hp, int a, int b) {
  int c = memcmp(hp->sig[a], hp->sig[b], GC_DIGEST_LEN);
  return c < 0 || (c == 0 && a < b);
}

static void heap_push(heap *hp, int x) {
  int i = hp->n++;
  hp->items[i] = x;
  while (i > 0) {
    int p = (i - 1) / 2;
    if (!heap_less(hp, hp->items[i], hp->items[p]))
      break;
    int t = hp->items[p];
    hp->items[p] = hp->items[i];
    hp->items[i] = t;
    i = p;
  }
}

static int heap_pop(heap *hp) {
  int top = hp->items[0];
  hp->items[0] = hp->items[--hp->n];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < hp->n && heap_less(hp, hp->items[l], hp->items[m]))
      m = l;
    if (r < hp->n && heap_less(hp, hp->items[r], hp->items[m]))
      m = r;
    if (m == i)
      break;
    int t = hp->items[m];
    hp->items[m] = hp->items[i];
    hp->items[i] = t;
    i = m;
  }
  return top;
}

typedef struct def_edge_ctx {
  gc_arena *a;
  edges *e;
  int node;
  int failed;
} def_edge_ctx;

static void add_def_edge(const gc_value *v, int item, void *ctx) {
  (void)item;
  def_edge_ctx *c = ctx;
  if (v->def_node >= 0 && edge_add(c->a, c->e, v->def_node, c->node))
    c->failed = 1;
}

int gc__key_order_nodes(keyer *k, int *order) {
  const gc_graph *g = k->g;
  int n = g->nnodes;
  uint8_t(*up)[GC_DIGEST_LEN] =
      gc_arena_calloc(k->a, (size_t)n + 1, GC_DIGEST_LEN);
  if (!up)
    return GC_ENOMEM;
  int rc = compute_down(k);
  if (!rc)
    rc = compute_up(k, up);
  if (rc)
    return rc;
  edges e = {0};
  def_edge_ctx dc = {.a = k->a, .e = &e};
  for (int i = 0; i < n; i++) {
    dc.node = i;
    for (int j = 0; j < g->nodes[i].nargs; j++)
      gc_arg_each_value(&g->nodes[i].args[j].arg, add_def_edge, &dc);
  }
  if (dc.failed || storage_edges(k, &e))
    return GC_ENOMEM;
  int *indeg = gc_arena_calloc(k->a, (size_t)n + 1, sizeof(int));
  int *sstart = gc_arena_calloc(k->a, (size_t)n + 2, sizeof(int));
  int *succ = gc_arena_calloc(k->a, (size_t)e.n + 1, sizeof(int));
  int *fill = gc_arena_calloc(k->a, (size_t)n + 1, sizeof(int));
  heap hp = {.sig = up};
  hp.items = gc_arena_calloc(k->a, (size_t)n + 1, sizeof(int));
  if (!indeg || !sstart || !succ || !fill || !hp.items)
    return GC_ENOMEM;
  for (int i = 0; i < e.n; i++) {
    indeg[e.to[i]]++;
    sstart[e.from[i] + 1]++;
  }
  for (int i = 0; i < n; i++)
    sstart[i + 1] += sstart[i];
  for (int i = 0; i < e.n; i++)
    succ[sstart[e.from[i]] + fill[e.from[i]]++] = e.to[i];
  for (int i = 0; i < n; i++)
    if (indeg[i] == 0)
      heap_push(&hp, i);
  int placed = 0;
  while (hp.n > 0) {
    int u = heap_pop(&hp);
    order[placed++] = u;
    for (int j = sstart[u]; j < sstart[u + 1]; j++)
      if (--indeg[succ[j]] == 0)
        heap_push(&hp, succ[j]);
  }
  return placed == n ? 0 : GC_EINTERNAL; /* validated graphs are acyclic */
}
