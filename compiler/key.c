/*
 * key.c: canonical form and cache key. See key.h for what enters the key.
 *
 * The hard part is a node order that does not depend on how the client
 * happened to order independent nodes, while never reordering nodes whose
 * order matters.
 *
 * Which orders are allowed. Data dependencies give the obvious edges. Mutation
 * adds more: every value belongs to a storage class (union-find: a view's
 * output joins its base's class as the schema's alias annotations say; inputs
 * the client reported as sharing storage start in one class), and a node that
 * writes a class is ordered after every earlier reader and writer of it, and
 * before every later one. Operators that draw random numbers (a Generator
 * parameter, a name like rand/dropout/bernoulli, a RANDOM row of
 * opfacts.def: gc_opfacts_is_random) read and write one pseudo-class for the
 * random generator, so their relative order is kept.
 *
 * Which order among the allowed ones. Kahn's algorithm, taking among ready
 * nodes the one with the smallest signature. A signature must not depend on
 * names or on the original order, and must tell apart nodes that are not
 * interchangeable. Two Merkle-style passes give that:
 *   down[n] = H(target, arguments with each reference replaced by the down
 *               signature of its producer (or the input position), outputs'
 *               metadata)                  -- what n computes, from below
 *   up[n]   = H(down[n], sorted { H(up[user], where it is used) })
 *                                          -- and how it is used, from above
 * Two nodes with equal up signatures compute the same thing and are used the
 * same way, so whichever comes first, the canonical stream is the same.
 *
 * The canonical stream then names each value by position (input index, or
 * canonical node position with output slot and list item), writes every
 * argument in schema order with omitted defaults filled in (an explicit
 * default hashes like an omitted one), and normalizes literals by the
 * parameter's declared type (int 1 for a float parameter is 1.0; a single int
 * for int[2] is the pair; an empty list is typed by the schema). Floats hash
 * by bit pattern with one canonical NaN; -0.0 stays distinct from 0.0.
 * Symbolic expressions hash as the trees the decoder parsed (symexpr.h),
 * symbols numbered by first appearance. The stream starts with the schema
 * of every operator used, sorted by name: what the compiler believed about
 * an operator's writes and aliases is part of what it compiled.
 */
#include "compiler/key.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "build_id.h"
#include "compiler/opfacts.h"
#include "compiler/ops.h"
#include "compiler/strmap.h"
#include "compiler/symexpr.h"

/* ---- a buffered SHA-256 writer ---- */

typedef struct hasher {
  EVP_MD_CTX *ctx;
  unsigned char buf[4096];
  size_t len;
  int failed; /* an OpenSSL call failed */
} hasher;

static void h_flush(hasher *h) {
  if (h->len && EVP_DigestUpdate(h->ctx, h->buf, h->len) != 1)
    h->failed = 1;
  h->len = 0;
}

static void h_bytes(hasher *h, const void *p, size_t n) {
  if (n > sizeof h->buf - h->len) {
    h_flush(h);
    if (n > sizeof h->buf) {
      if (EVP_DigestUpdate(h->ctx, p, n) != 1)
        h->failed = 1;
      return;
    }
  }
  memcpy(h->buf + h->len, p, n);
  h->len += n;
}

static void h_u8(hasher *h, uint8_t v) {
  h_bytes(h, &v, 1);
}

static void h_i64(hasher *h, int64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)((uint64_t)v >> (8 * i));
  h_bytes(h, b, 8);
}

static void h_str(hasher *h, const char *s) {
  size_t n = s ? strlen(s) : 0;
  h_i64(h, (int64_t)n);
  h_bytes(h, s, n);
}

static void h_f64(hasher *h, double f) {
  uint64_t bits;
  if (f != f)
    bits = 0x7ff8000000000000ull; /* one NaN for all NaNs */
  else
    memcpy(&bits, &f, sizeof bits);
  h_i64(h, (int64_t)bits);
}

static void h_begin(hasher *h) {
  h->len = 0;
  if (EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1)
    h->failed = 1;
}

static void h_end(hasher *h, uint8_t out[GC_DIGEST_LEN]) {
  h_flush(h);
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(h->ctx, out, &n) != 1 || n != GC_DIGEST_LEN)
    h->failed = 1;
}

/* ---- shared state of one key computation ---- */

typedef struct keyer {
  const gc_graph *g;
  gc_arena *a;
  hasher h;
  gc_strmap syms; /* symbol name -> 1 + first-appearance index */
  int nsyms;
  const char **symnames; /* symnames[i]: the symbol numbered i + 1 */
  int capsyms;
  uint8_t (*down)[GC_DIGEST_LEN]; /* per node, while ordering */
  int *pos;         /* node index -> canonical position (stream phase) */
  int phase;        /* PHASE_DOWN or PHASE_STREAM: how references encode */
  bool freeze_syms; /* ordering phase: do not number new symbols */
  const gc_arg **by_param; /* h_node's scratch: GC_SCHEMA_MAX_ARGS entries */
} keyer;

enum { PHASE_DOWN, PHASE_STREAM };

/* ---- symbolic expressions, symbols renamed by first appearance ---- */

/* Recursion is bounded: a parsed tree is at most GC_SYMEXPR_MAX_DEPTH high
 * (symexpr.h), and the decoder's limit is lower still. */
static void h_symexpr(keyer *k, const gc_symexpr *e) {
  hasher *h = &k->h;
  h_u8(h, (uint8_t)e->kind);
  switch (e->kind) {
  case GC_SX_INT:
  case GC_SX_BOOL:
    h_i64(h, e->i);
    return;
  case GC_SX_FLOAT:
    h_f64(h, e->f);
    return;
  case GC_SX_SYM: {
    /* Symbols are numbered by first appearance: inputs first, then the
     * canonical node order. While that order is being worked out, a symbol
     * not seen in the inputs hashes as 0 so the original order cannot leak
     * in. */
    intptr_t idx = (intptr_t)gc_strmap_get(&k->syms, e->name);
    if (!idx && !k->freeze_syms) {
      idx = ++k->nsyms;
      if (gc_strmap_put(&k->syms, e->name, (void *)idx, NULL) < 0)
        h->failed = 1;
      if (k->nsyms > k->capsyms) {
        int cap = k->capsyms ? 2 * k->capsyms : 8;
        const char **n = gc_arena_calloc(k->a, (size_t)cap, sizeof *n);
        if (!n)
          h->failed = 1;
        else {
          if (k->capsyms)
            memcpy(n, k->symnames, (size_t)k->capsyms * sizeof *n);
          k->symnames = n;
          k->capsyms = cap;
        }
      }
      if (k->nsyms <= k->capsyms)
        k->symnames[k->nsyms - 1] = e->name;
    }
    h_i64(h, (int64_t)idx);
    return;
  }
  default:
    h_i64(h, e->nargs);
    for (int i = 0; i < e->nargs; i++)
      h_symexpr(k, e->args[i]);
  }
}

/* A symbolic value: its tree, parsed (within the limits) by the decoder. */
static void h_symint(keyer *k, const gc_symint *s) {
  if (s->tree) {
    h_u8(&k->h, 'x');
    h_symexpr(k, s->tree); /* the hint is not part of the key */
  } else {
    h_u8(&k->h, 'i');
    h_i64(&k->h, s->v);
  }
}

/* Tensor metadata; the device index is left out on purpose (see key.h). */
static void h_meta(keyer *k, const gc_tensor_meta *t) {
  hasher *h = &k->h;
  h_u8(h, 'm');
  h_i64(h, t->dtype);
  h_i64(h, t->rank);
  for (int i = 0; i < t->rank; i++)
    h_symint(k, &t->sizes[i]);
  for (int i = 0; i < t->rank; i++)
    h_symint(k, &t->strides[i]);
  h_symint(k, &t->offset);
  h_str(h, t->device.type);
  h_u8(h, t->requires_grad);
  h_i64(h, t->layout);
}

/* A symbolic scalar value's own description (its expression, if any). */
static void h_symvalue(keyer *k, const gc_value *v) {
  h_u8(&k->h, (uint8_t)v->kind);
  if (v->kind == GC_VALUE_SYM_INT)
    h_symint(k, &v->sym);
  else if (v->sym.tree)
    h_symexpr(k, v->sym.tree);
}

/* ---- references and arguments ---- */

static void h_ref(keyer *k, const gc_value *v) {
  hasher *h = &k->h;
  if (v->def_node < 0) {
    h_u8(h, 'I');
    h_i64(h, v->def_slot);
    return;
  }
  h_u8(h, 'N');
  if (k->phase == PHASE_DOWN)
    h_bytes(h, k->down[v->def_node], GC_DIGEST_LEN);
  else
    h_i64(h, k->pos[v->def_node]);
  h_i64(h, v->def_slot);
  h_i64(h, v->def_item);
}

/* The declared type with Optional stripped; NULL when unknown. */
static const gc_type *base_type(const gc_type *t) {
  while (t && t->kind == GC_TY_OPTIONAL)
    t = t->elem;
  return t;
}

static bool is_float_type(const gc_type *t) {
  return t && (t->kind == GC_TY_FLOAT || t->kind == GC_TY_SYMFLOAT ||
               t->kind == GC_TY_COMPLEX);
}

/* An integer literal, as the declared type `t` reads it. */
static void h_int_as(keyer *k, const gc_type *t, int64_t v) {
  if (is_float_type(t)) {
    h_u8(&k->h, 'f');
    h_f64(&k->h, (double)v);
  } else {
    h_u8(&k->h, 'i');
    h_i64(&k->h, v);
  }
}

static void h_symarg(keyer *k, const gc_type *elem, gc_arg_kind kind,
                     const gc_symarg *s) {
  if (s->v) {
    h_u8(&k->h, 's');
    h_ref(k, s->v);
  } else if (kind == GC_ARG_SYM_INT || kind == GC_ARG_SYM_INTS) {
    h_int_as(k, elem, s->i);
  } else if (kind == GC_ARG_SYM_FLOAT || kind == GC_ARG_SYM_FLOATS) {
    h_u8(&k->h, 'f');
    h_f64(&k->h, s->f);
  } else {
    h_u8(&k->h, 'b');
    h_u8(&k->h, s->b);
  }
}

/* Writes argument `a` for a parameter of type `t` (NULL: no schema). */
static void h_arg(keyer *k, const gc_type *t, const gc_arg *a) {
  hasher *h = &k->h;
  const gc_type *bt = base_type(t);
  const gc_type *elem =
      bt && bt->kind == GC_TY_LIST ? base_type(bt->elem) : NULL;
  switch (a->kind) {
  case GC_ARG_NONE:
    h_u8(h, 'N');
    return;
  case GC_ARG_TENSOR:
    h_u8(h, 'T');
    h_ref(k, a->v);
    return;
  case GC_ARG_INT:
    /* A single int where int[N] is declared means N copies. */
    if (bt && bt->kind == GC_TY_LIST && bt->fixed_len > 0) {
      h_u8(h, 'L');
      h_i64(h, bt->fixed_len);
      for (int i = 0; i < bt->fixed_len; i++)
        h_int_as(k, elem, a->i);
      return;
    }
    h_int_as(k, bt, a->i);
    return;
  case GC_ARG_FLOAT:
    h_u8(h, 'f');
    h_f64(h, a->f);
    return;
  case GC_ARG_BOOL:
    if (bt && bt->kind == GC_TY_LIST && bt->fixed_len > 0) {
      h_u8(h, 'L');
      h_i64(h, bt->fixed_len);
      for (int i = 0; i < bt->fixed_len; i++) {
        h_u8(h, 'b');
        h_u8(h, (uint8_t)a->i);
      }
      return;
    }
    h_u8(h, 'b');
    h_u8(h, (uint8_t)a->i);
    return;
  case GC_ARG_STRING:
    h_u8(h, 'S');
    h_str(h, a->s);
    return;
  case GC_ARG_SYM_INT:
  case GC_ARG_SYM_FLOAT:
  case GC_ARG_SYM_BOOL:
    if (!a->sym.v && a->kind == GC_ARG_SYM_INT && bt &&
        bt->kind == GC_TY_LIST && bt->fixed_len > 0) {
      gc_arg lit = {.kind = GC_ARG_INT, .i = a->sym.i};
      h_arg(k, t, &lit);
      return;
    }
    h_symarg(k, bt, a->kind, &a->sym);
    return;
  case GC_ARG_SCALAR_TYPE:
    h_u8(h, 'D');
    h_i64(h, a->i);
    return;
  case GC_ARG_MEMORY_FORMAT:
    h_u8(h, 'M');
    h_i64(h, a->i);
    return;
  case GC_ARG_LAYOUT:
    h_u8(h, 'Y');
    h_i64(h, a->i);
    return;
  case GC_ARG_DEVICE:
    /* An explicit device argument is semantic: its index stays. */
    h_u8(h, 'V');
    h_str(h, a->dev.type);
    h_i64(h, a->dev.index);
    return;
  default:
    break;
  }
  /* Lists. An empty list is just "empty": the schema gives its type. */
  if (a->n == 0) {
    h_u8(h, 'E');
    return;
  }
  h_u8(h, 'L');
  h_i64(h, a->n);
  for (int i = 0; i < a->n; i++) {
    switch (a->kind) {
    case GC_ARG_TENSORS:
    case GC_ARG_OPT_TENSORS:
      if (a->vals[i]) {
        h_u8(h, 'T');
        h_ref(k, a->vals[i]);
      } else {
        h_u8(h, 'N');
      }
      break;
    case GC_ARG_INTS:
      h_int_as(k, elem, a->ints[i]);
      break;
    case GC_ARG_BOOLS:
      h_u8(h, 'b');
      h_u8(h, (uint8_t)a->ints[i]);
      break;
    case GC_ARG_FLOATS:
      h_u8(h, 'f');
      h_f64(h, a->floats[i]);
      break;
    case GC_ARG_STRINGS:
      h_u8(h, 'S');
      h_str(h, a->strs[i]);
      break;
    case GC_ARG_SYM_INTS:
    case GC_ARG_SYM_FLOATS:
    case GC_ARG_SYM_BOOLS:
      h_symarg(k, elem, a->kind, &a->syms[i]);
      break;
    default:
      k->h.failed = 1;
    }
  }
}

/* The argument bound to each parameter of n's schema (NULL: its default),
 * in k's scratch table, filled in one pass over the arguments: searching
 * the arguments for each parameter made keying quadratic (a node of
 * 300,000 arguments to a schema of 1,000 parameters: 3.4 s). NULL when out
 * of memory. */
static const gc_arg **param_table(keyer *k, const gc_node *n) {
  const gc_schema *s = n->op->schema;
  if (!k->by_param)
    k->by_param = gc_arena_alloc(k->a, GC_SCHEMA_MAX_ARGS * sizeof(gc_arg *));
  if (!k->by_param || s->nargs > GC_SCHEMA_MAX_ARGS)
    return NULL;
  for (int p = 0; p < s->nargs; p++)
    k->by_param[p] = NULL;
  for (int i = n->nargs - 1; i >= 0; i--) /* the first argument wins */
    if (n->args[i].param >= 0 && n->args[i].param < s->nargs)
      k->by_param[n->args[i].param] = &n->args[i].arg;
  return k->by_param;
}

/* A node: its target, each parameter's value in schema order (defaults
 * filled in), vararg extras, and its outputs with their metadata. */
static void h_node(keyer *k, const gc_node *n) {
  hasher *h = &k->h;
  const gc_schema *s = n->op->schema;
  h_u8(h, 'n');
  h_str(h, n->target);
  const gc_arg **bound = param_table(k, n);
  if (!bound) {
    h->failed = 1;
    return;
  }
  for (int p = 0; p < s->nargs; p++) {
    const gc_arg *a = bound[p];
    if (a)
      h_arg(k, s->args[p].type, a);
    else
      h_arg(k, s->args[p].type, &s->args[p].def);
  }
  for (int i = 0; i < n->nargs; i++) {
    if (n->args[i].param < 0) {
      h_u8(h, 'v');
      h_str(h, n->args[i].name);
      h_arg(k, NULL, &n->args[i].arg);
    }
  }
  h_i64(h, n->noutputs);
  for (int o = 0; o < n->noutputs; o++) {
    const gc_arg *out = &n->outputs[o];
    h_u8(h, (uint8_t)out->kind);
    if (out->kind == GC_ARG_TENSOR) {
      h_meta(k, &out->v->meta);
    } else if (out->kind == GC_ARG_TENSORS) {
      h_i64(h, out->n);
      for (int j = 0; j < out->n; j++)
        h_meta(k, &out->vals[j]->meta);
    } else if (out->kind != GC_ARG_NONE) {
      h_symvalue(k, out->sym.v);
    }
  }
}

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

static int edge_add(gc_arena *a, edges *e, int from, int to) {
  if (from < 0 || from == to)
    return 0;
  if (e->n == e->cap) {
    int cap = e->cap ? e->cap * 2 : 256;
    int *f = gc_arena_calloc(a, (size_t)cap, sizeof *f);
    int *t = gc_arena_calloc(a, (size_t)cap, sizeof *t);
    if (!f || !t)
      return GC_ENOMEM;
    if (e->n) {
      memcpy(f, e->from, (size_t)e->n * sizeof *f);
      memcpy(t, e->to, (size_t)e->n * sizeof *t);
    }
    e->from = f;
    e->to = t;
    e->cap = cap;
  }
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
  if (ac->pool_n == ac->pool_cap) {
    int cap = ac->pool_cap ? ac->pool_cap * 2 : 256;
    int *pn = gc_arena_calloc(ar, (size_t)cap, sizeof *pn);
    int *px = gc_arena_calloc(ar, (size_t)cap, sizeof *px);
    if (!pn || !px)
      return GC_ENOMEM;
    if (ac->pool_n) {
      memcpy(pn, ac->pool_node, (size_t)ac->pool_n * sizeof *pn);
      memcpy(px, ac->pool_next, (size_t)ac->pool_n * sizeof *px);
    }
    ac->pool_node = pn;
    ac->pool_next = px;
    ac->pool_cap = cap;
  }
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
static int *group_firsts(keyer *k) {
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
  int *first = group_firsts(k);
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
        if (!bound && !(bound = param_table(k, n)))
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
  if (ul->n == ul->cap) {
    int cap = ul->cap ? ul->cap * 2 : 256;
    use *nu = gc_arena_calloc(ul->a, (size_t)cap, sizeof *nu);
    if (!nu) {
      ul->failed = 1;
      return;
    }
    if (ul->n)
      memcpy(nu, ul->u, (size_t)ul->n * sizeof *nu);
    ul->u = nu;
    ul->cap = cap;
  }
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
    h_begin(&k->h);
    h_node(k, &g->nodes[i]);
    h_end(&k->h, k->down[i]);
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
      h_begin(&k->h);
      if (u->user >= 0) {
        h_u8(&k->h, 'U');
        h_bytes(&k->h, up[u->user], GC_DIGEST_LEN);
      } else {
        h_u8(&k->h, 'O');
      }
      h_i64(&k->h, u->where);
      h_i64(&k->h, u->item);
      h_i64(&k->h, u->slot);
      h_i64(&k->h, u->sub);
      h_end(&k->h, contrib[j]);
    }
    qsort(contrib + b, (size_t)(e - b), GC_DIGEST_LEN, cmp_digest);
    h_begin(&k->h);
    h_bytes(&k->h, k->down[i], GC_DIGEST_LEN);
    h_i64(&k->h, e - b);
    h_bytes(&k->h, contrib + b, (size_t)(e - b) * GC_DIGEST_LEN);
    h_end(&k->h, up[i]);
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

static int order_nodes(keyer *k, int *order) {
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

/* ---- the components ---- */

static int keyer_init(keyer *k, const gc_graph *g) {
  memset(k, 0, sizeof *k);
  k->g = g;
  k->a = g->arena;
  k->h.ctx = EVP_MD_CTX_new();
  if (!k->h.ctx)
    return GC_ENOMEM;
  if (gc_strmap_init(&k->syms, k->a, 16))
    return GC_ENOMEM;
  k->down = gc_arena_calloc(k->a, (size_t)g->nnodes + 1, GC_DIGEST_LEN);
  k->pos = gc_arena_calloc(k->a, (size_t)g->nnodes + 1, sizeof(int));
  return k->down && k->pos ? 0 : GC_ENOMEM;
}

static void keyer_close(keyer *k) {
  EVP_MD_CTX_free(k->h.ctx);
}

static void hash_inputs(keyer *k, uint8_t out[GC_DIGEST_LEN]);
static void hash_graph(keyer *k, const int *order, uint8_t out[GC_DIGEST_LEN]);

/* Orders the nodes after numbering the inputs' symbols. */
static int canonical_order(keyer *k, int *order,
                           uint8_t inputs[GC_DIGEST_LEN]) {
  hash_inputs(k, inputs);
  k->freeze_syms = true;
  int rc = order_nodes(k, order);
  k->freeze_syms = false;
  return rc;
}

int gc_canonical_order(const gc_graph *g, int *order, gc_error *err) {
  keyer k;
  uint8_t scratch[GC_DIGEST_LEN];
  int rc = keyer_init(&k, g);
  if (!rc)
    rc = canonical_order(&k, order, scratch);
  keyer_close(&k);
  if (rc)
    return gc_errorf(err, rc, "canonical order: %s", gc_strerror(rc));
  return 0;
}

static void hash_inputs(keyer *k, uint8_t out[GC_DIGEST_LEN]) {
  const gc_graph *g = k->g;
  hasher *h = &k->h;
  h_begin(h);
  h_str(h, "inputs-v1");
  h_i64(h, g->ninputs);
  for (int i = 0; i < g->ninputs; i++) {
    const gc_input *in = &g->inputs[i];
    h_i64(h, in->kind);
    const gc_arg *a = &in->arg;
    if (a->kind == GC_ARG_TENSOR) {
      h_u8(h, 'T');
      h_meta(k, &a->v->meta);
    } else if ((a->kind == GC_ARG_SYM_INT || a->kind == GC_ARG_SYM_FLOAT ||
                a->kind == GC_ARG_SYM_BOOL) &&
               a->sym.v) {
      h_u8(h, 's');
      h_symvalue(k, a->sym.v);
    } else {
      h_arg(k, NULL, a);
    }
  }
  /* Storage sharing: each input names the first input of its group. */
  int *first = group_firsts(k);
  if (!first)
    h->failed = 1;
  for (int i = 0; i < g->ninputs && first; i++) {
    int grp = g->inputs[i].storage_group;
    h_i64(h, grp >= 0 && grp < g->ngroups ? first[grp] : -1);
  }
  h_end(h, out);
}

/* Does any value of g have a symbolic size, stride, offset or value? */
static bool has_symbols(const gc_graph *g) {
  for (int i = 0; i < g->nvalues; i++) {
    const gc_value *v = g->values[i];
    if (v->kind != GC_VALUE_TENSOR) {
      if (v->sym.tree)
        return true;
      continue;
    }
    const gc_tensor_meta *m = &v->meta;
    if (m->offset.tree)
      return true;
    for (int d = 0; d < m->rank; d++)
      if (m->sizes[d].tree || m->strides[d].tree)
        return true;
  }
  return false;
}

int gc_symbols_make(const gc_graph *g, const int *order, gc_symbols *out,
                    gc_error *err) {
  memset(out, 0, sizeof *out);
  if (gc_strmap_init(&out->index, g->arena, 16))
    return gc_errorf(err, GC_ENOMEM, "numbering symbols: out of memory");
  if (!has_symbols(g))
    return 0;
  keyer k;
  uint8_t scratch[GC_DIGEST_LEN];
  int rc = keyer_init(&k, g);
  if (!rc) {
    hash_inputs(&k, scratch);
    hash_graph(&k, order, scratch);
    if (k.h.failed)
      rc = GC_ENOMEM;
  }
  for (int i = 0; !rc && i < k.nsyms; i++)
    if (gc_strmap_put(&out->index, k.symnames[i], (void *)(intptr_t)(i + 1),
                      NULL) < 0)
      rc = GC_ENOMEM;
  if (!rc) {
    out->names = k.symnames;
    out->n = k.nsyms;
  }
  keyer_close(&k);
  if (rc)
    return gc_errorf(err, rc, "numbering symbols: %s", gc_strerror(rc));
  return 0;
}

int gc_symbols_find(const gc_symbols *s, const char *name) {
  intptr_t i = s->n ? (intptr_t)gc_strmap_get(&s->index, name) : 0;
  return (int)i - 1;
}

typedef struct rename_ctx {
  const gc_symbols *s;
  gc_arena *a;
  bool missing;
} rename_ctx;

static const char *canonical_name(const char *name, void *ctx) {
  rename_ctx *r = ctx;
  int i = gc_symbols_find(r->s, name);
  if (i < 0) {
    r->missing = true;
    return NULL;
  }
  return gc_arena_printf(r->a, "s%d", i);
}

char *gc_symbols_text(const gc_symbols *s, gc_arena *a, const gc_symexpr *e) {
  rename_ctx r = {s, a, false};
  gc_buf b = GC_BUF_INIT;
  gc_symexpr_format(e, canonical_name, &r, &b);
  char *text = b.data && !r.missing ? gc_arena_strdup(a, b.data) : NULL;
  gc_buf_free(&b);
  return text;
}

static int cmp_op_name(const void *a, const void *b) {
  return strcmp((*(const gc_op *const *)a)->name,
                (*(const gc_op *const *)b)->name);
}

/* The operators the nodes use, each once, by name, with their schemas as
 * torch prints them. A schema says what an operator writes and aliases, so
 * two graphs whose clients disagree on one (an operator the compiler does
 * not know, or another torch release) must not share an artifact. */
static void hash_operators(keyer *k) {
  const gc_graph *g = k->g;
  hasher *h = &k->h;
  gc_strmap seen;
  const gc_op **used =
      gc_arena_calloc(k->a, (size_t)g->nnodes + 1, sizeof *used);
  if (!used || gc_strmap_init(&seen, k->a, 64)) {
    h->failed = 1;
    return;
  }
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const gc_op *op = g->nodes[i].op;
    int put = gc_strmap_put(&seen, op->name, (void *)op, NULL);
    if (put < 0)
      h->failed = 1;
    else if (put == 0)
      used[n++] = op;
  }
  qsort(used, (size_t)n, sizeof *used, cmp_op_name);
  h_i64(h, n);
  for (int i = 0; i < n; i++) {
    size_t len = gc_schema_format(used[i]->schema, NULL, 0);
    char *text = gc_arena_alloc(k->a, len + 1);
    if (!text) {
      h->failed = 1;
      return;
    }
    gc_schema_format(used[i]->schema, text, len + 1);
    h_str(h, used[i]->name);
    h_str(h, text);
  }
}

static void hash_graph(keyer *k, const int *order, uint8_t out[GC_DIGEST_LEN]) {
  const gc_graph *g = k->g;
  hasher *h = &k->h;
  for (int i = 0; i < g->nnodes; i++)
    k->pos[order[i]] = i;
  k->phase = PHASE_STREAM;
  h_begin(h);
  h_str(h, "graph-v1");
  h_i64(h, g->ninputs);
  hash_operators(k);
  h_i64(h, g->nnodes);
  for (int i = 0; i < g->nnodes; i++)
    h_node(k, &g->nodes[order[i]]);
  h_i64(h, g->noutputs);
  for (int o = 0; o < g->noutputs; o++)
    h_arg(k, NULL, &g->outputs[o]);
  h_end(h, out);
}

static void hash_options(keyer *k, const gc_options *o,
                         uint8_t out[GC_DIGEST_LEN]) {
  hasher *h = &k->h;
  h_begin(h);
  h_str(h, "options-v1");
  h_i64(h, o->opt_level);
  h_u8(h, o->keep_input_mutations);
  h_u8(h, o->training);
  if (o->separate_temporaries) /* absent when false: older keys stay valid */
    h_str(h, "separate-temporaries");
  if (o->eager_random)
    h_str(h, "eager-random");
  h_end(h, out);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The ISA feature list as a sorted, de-duplicated set. */
static void h_isa(keyer *k, const char *isa) {
  hasher *h = &k->h;
  char *copy = gc_arena_strdup(k->a, isa ? isa : "");
  if (!copy) {
    h->failed = 1;
    return;
  }
  size_t cap = 1;
  for (const char *p = copy; *p; p++)
    cap += *p == ',';
  char **feat = gc_arena_calloc(k->a, cap, sizeof *feat);
  if (!feat) {
    h->failed = 1;
    return;
  }
  size_t n = 0;
  char *save = NULL; /* strtok's hidden state would race between threads */
  for (char *tok = strtok_r(copy, ", ", &save); tok;
       tok = strtok_r(NULL, ", ", &save))

    feat[n++] = tok;
  qsort(feat, n, sizeof *feat, cmp_str);
  size_t uniq = 0;
  for (size_t i = 0; i < n; i++)
    if (i == 0 || strcmp(feat[i], feat[i - 1]) != 0)
      uniq++;
  h_i64(h, (int64_t)uniq);
  for (size_t i = 0; i < n; i++)
    if (i == 0 || strcmp(feat[i], feat[i - 1]) != 0)
      h_str(h, feat[i]);
}

static void hash_target(keyer *k, const gc_target *t,
                        uint8_t out[GC_DIGEST_LEN]) {
  hasher *h = &k->h;
  h_begin(h);
  h_str(h, "target-v1");
  h_str(h, t->arch);
  h_isa(k, t->isa);
  h_str(h, t->toolchain);
  h_str(h, t->cflags);
  h_str(h, t->torch_version ? t->torch_version : k->g->torch_version);
  h_end(h, out);
}

static void hash_text(keyer *k, const char *tag, const char *text,
                      uint8_t out[GC_DIGEST_LEN]) {
  h_begin(&k->h);
  h_str(&k->h, tag);
  h_str(&k->h, text);
  h_end(&k->h, out);
}

int gc_key_compute(const gc_graph *g, const gc_options *o, const gc_target *t,
                   gc_key *out, gc_error *err) {
  keyer k;
  int rc = keyer_init(&k, g);
  int *order =
      rc ? NULL : gc_arena_calloc(k.a, (size_t)g->nnodes + 1, sizeof(int));
  if (!rc && !order)
    rc = GC_ENOMEM;
  if (!rc)
    rc = canonical_order(&k, order, out->part[GC_KEY_INPUTS]);
  if (!rc) {
    hash_graph(&k, order, out->part[GC_KEY_GRAPH]);
    hash_options(&k, o, out->part[GC_KEY_OPTIONS]);
    hash_target(&k, t, out->part[GC_KEY_TARGET]);
    hash_text(&k, "compiler", GC_BUILD_ID, out->part[GC_KEY_COMPILER]);
    char major[16];
    snprintf(major, sizeof major, "%d", g->schema_major);
    hash_text(&k, "schema", major, out->part[GC_KEY_SCHEMA]);
    h_begin(&k.h);
    h_str(&k.h, "compiled-key-v1");
    for (int c = 0; c < GC_KEY_NCOMPONENTS; c++)
      h_bytes(&k.h, out->part[c], GC_DIGEST_LEN);
    h_end(&k.h, out->key);
    if (k.h.failed)
      rc = GC_EINTERNAL;
  }
  keyer_close(&k);
  if (rc)
    return gc_errorf(err, rc, "computing the cache key: %s", gc_strerror(rc));
  return 0;
}

void gc_options_default(gc_options *o) {
  o->opt_level = 2;
  o->keep_input_mutations = true;
  o->training = false;
  o->separate_temporaries = false;
  o->eager_random = false;
}

void gc_digest_hex(const uint8_t d[GC_DIGEST_LEN], char out[GC_HEX_LEN]) {
  static const char hexd[] = "0123456789abcdef";
  for (int i = 0; i < GC_DIGEST_LEN; i++) {
    out[2 * i] = hexd[d[i] >> 4];
    out[2 * i + 1] = hexd[d[i] & 15];
  }
  out[2 * GC_DIGEST_LEN] = '\0';
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  c = (char)tolower((unsigned char)c);
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  return -1;
}

int gc_digest_parse(const char *hex, uint8_t d[GC_DIGEST_LEN]) {
  if (!hex || strlen(hex) != 2 * GC_DIGEST_LEN)
    return GC_EINVAL;
  for (int i = 0; i < GC_DIGEST_LEN; i++) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return GC_EINVAL;
    d[i] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

const char *gc_key_component_name(gc_key_component c) {
  switch (c) {
#define X(name, text)                                                          \
  case GC_KEY_##name:                                                          \
    return text;
    GC_KEY_COMPONENTS(X)
#undef X
  case GC_KEY_NCOMPONENTS:
    break;
  }
  return "?";
}

const char *gc_build_id(void) {
  return GC_BUILD_ID;
}
