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
#include "compiler/key_internal.h"
#include "compiler/opfacts.h"
#include "compiler/ops.h"
#include "compiler/strmap.h"
#include "compiler/symexpr.h"

/* ---- symbolic expressions, symbols renamed by first appearance ---- */

/* Recursion is bounded: a parsed tree is at most GC_SYMEXPR_MAX_DEPTH high
 * (symexpr.h), and the decoder's limit is lower still. */
static void hash_symexpr(keyer *k, const gc_symexpr *e) {
  hasher *h = &k->h;
  hash_u8(h, (uint8_t)e->kind);
  switch (e->kind) {
  case GC_SX_INT:
  case GC_SX_BOOL:
    hash_i64(h, e->i);
    return;
  case GC_SX_FLOAT:
    hash_f64(h, e->f);
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
    hash_i64(h, (int64_t)idx);
    return;
  }
  default:
    hash_i64(h, e->nargs);
    for (int i = 0; i < e->nargs; i++)
      hash_symexpr(k, e->args[i]);
  }
}

/* A symbolic value: its tree, parsed (within the limits) by the decoder. */
static void hash_symint(keyer *k, const gc_symint *s) {
  if (s->tree) {
    hash_u8(&k->h, 'x');
    hash_symexpr(k, s->tree); /* the hint is not part of the key */
  } else {
    hash_u8(&k->h, 'i');
    hash_i64(&k->h, s->v);
  }
}

/* Tensor metadata; the device index is left out on purpose (see key.h). */
static void hash_meta(keyer *k, const gc_tensor_meta *t) {
  hasher *h = &k->h;
  hash_u8(h, 'm');
  hash_i64(h, t->dtype);
  hash_i64(h, t->rank);
  for (int i = 0; i < t->rank; i++)
    hash_symint(k, &t->sizes[i]);
  for (int i = 0; i < t->rank; i++)
    hash_symint(k, &t->strides[i]);
  hash_symint(k, &t->offset);
  hash_str(h, t->device.type);
  hash_u8(h, t->requires_grad);
  hash_i64(h, t->layout);
}

/* A symbolic scalar value's own description (its expression, if any). */
static void hash_symvalue(keyer *k, const gc_value *v) {
  hash_u8(&k->h, (uint8_t)v->kind);
  if (v->kind == GC_VALUE_SYM_INT)
    hash_symint(k, &v->sym);
  else if (v->sym.tree)
    hash_symexpr(k, v->sym.tree);
}

/* ---- references and arguments ---- */

static void hash_ref(keyer *k, const gc_value *v) {
  hasher *h = &k->h;
  if (v->def_node < 0) {
    hash_u8(h, 'I');
    hash_i64(h, v->def_slot);
    return;
  }
  hash_u8(h, 'N');
  if (k->phase == PHASE_DOWN)
    hash_bytes(h, k->down[v->def_node], GC_DIGEST_LEN);
  else
    hash_i64(h, k->pos[v->def_node]);
  hash_i64(h, v->def_slot);
  hash_i64(h, v->def_item);
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
static void hash_int_as(keyer *k, const gc_type *t, int64_t v) {
  if (is_float_type(t)) {
    hash_u8(&k->h, 'f');
    hash_f64(&k->h, (double)v);
  } else {
    hash_u8(&k->h, 'i');
    hash_i64(&k->h, v);
  }
}

static void hash_symarg(keyer *k, const gc_type *elem, gc_arg_kind kind,
                        const gc_symarg *s) {
  if (s->v) {
    hash_u8(&k->h, 's');
    hash_ref(k, s->v);
  } else if (kind == GC_ARG_SYM_INT || kind == GC_ARG_SYM_INTS) {
    hash_int_as(k, elem, s->i);
  } else if (kind == GC_ARG_SYM_FLOAT || kind == GC_ARG_SYM_FLOATS) {
    hash_u8(&k->h, 'f');
    hash_f64(&k->h, s->f);
  } else {
    hash_u8(&k->h, 'b');
    hash_u8(&k->h, s->b);
  }
}

/* Writes a single (not list) value `a` for the declared type `t` (Optional
 * stripped; NULL: no schema): an int as `t` reads it. */
static void hash_single(keyer *k, const gc_type *t, const gc_arg *a) {
  hasher *h = &k->h;
  switch (a->kind) {
  case GC_ARG_NONE:
    hash_u8(h, 'N');
    return;
  case GC_ARG_TENSOR:
    hash_u8(h, 'T');
    hash_ref(k, a->v);
    return;
  case GC_ARG_INT:
    hash_int_as(k, t, a->i);
    return;
  case GC_ARG_FLOAT:
    hash_u8(h, 'f');
    hash_f64(h, a->f);
    return;
  case GC_ARG_BOOL:
    hash_u8(h, 'b');
    hash_u8(h, (uint8_t)a->i);
    return;
  case GC_ARG_STRING:
    hash_u8(h, 'S');
    hash_str(h, a->s);
    return;
  case GC_ARG_SYM_INT:
  case GC_ARG_SYM_FLOAT:
  case GC_ARG_SYM_BOOL:
    hash_symarg(k, t, a->kind, &a->sym);
    return;
  case GC_ARG_SCALAR_TYPE:
    hash_u8(h, 'D');
    hash_i64(h, a->i);
    return;
  case GC_ARG_MEMORY_FORMAT:
    hash_u8(h, 'M');
    hash_i64(h, a->i);
    return;
  case GC_ARG_LAYOUT:
    hash_u8(h, 'Y');
    hash_i64(h, a->i);
    return;
  case GC_ARG_DEVICE:
    /* An explicit device argument is semantic: its index stays. */
    hash_u8(h, 'V');
    hash_str(h, a->dev.type);
    hash_i64(h, a->dev.index);
    return;
  default: /* a list kind: not a single value */
    h->failed = 1;
  }
}

/* Writes argument `a` for a parameter of type `t` (NULL: no schema). */
static void hash_arg(keyer *k, const gc_type *t, const gc_arg *a) {
  hasher *h = &k->h;
  const gc_type *bt = base_type(t);
  const gc_type *elem =
      bt && bt->kind == GC_TY_LIST ? base_type(bt->elem) : NULL;
  if (gc_arg_is_list(a->kind)) {
    /* An empty list is just "empty": the schema gives its type. */
    if (a->n == 0) {
      hash_u8(h, 'E');
      return;
    }
    hash_u8(h, 'L');
    hash_i64(h, a->n);
    for (int i = 0; i < a->n; i++) {
      gc_arg item = gc_arg_item(a, i);
      hash_single(k, elem, &item);
    }
    return;
  }
  /* A single int or bool (a literal SymInt is an int) where int[N] or
   * bool[N] is declared means N copies. */
  gc_arg item = *a;
  if (a->kind == GC_ARG_SYM_INT && !a->sym.v)
    item = (gc_arg){.kind = GC_ARG_INT, .i = a->sym.i};
  if ((item.kind == GC_ARG_INT || item.kind == GC_ARG_BOOL) && bt &&
      bt->kind == GC_TY_LIST && bt->fixed_len > 0) {
    hash_u8(h, 'L');
    hash_i64(h, bt->fixed_len);
    for (int i = 0; i < bt->fixed_len; i++)
      hash_single(k, elem, &item);
    return;
  }
  hash_single(k, bt, a);
}

/* The argument bound to each parameter of n's schema (NULL: its default),
 * in k's scratch table, filled in one pass over the arguments: searching
 * the arguments for each parameter made keying quadratic (a node of
 * 300,000 arguments to a schema of 1,000 parameters: 3.4 s). NULL when out
 * of memory. */
const gc_arg **gc__key_param_table(keyer *k, const gc_node *n) {
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
void gc__key_hash_node(keyer *k, const gc_node *n) {
  hasher *h = &k->h;
  const gc_schema *s = n->op->schema;
  hash_u8(h, 'n');
  hash_str(h, n->target);
  const gc_arg **bound = gc__key_param_table(k, n);
  if (!bound) {
    h->failed = 1;
    return;
  }
  for (int p = 0; p < s->nargs; p++) {
    const gc_arg *a = bound[p];
    if (a)
      hash_arg(k, s->args[p].type, a);
    else
      hash_arg(k, s->args[p].type, &s->args[p].def);
  }
  for (int i = 0; i < n->nargs; i++) {
    if (n->args[i].param < 0) {
      hash_u8(h, 'v');
      hash_str(h, n->args[i].name);
      hash_arg(k, NULL, &n->args[i].arg);
    }
  }
  hash_i64(h, n->noutputs);
  for (int o = 0; o < n->noutputs; o++) {
    const gc_arg *out = &n->outputs[o];
    hash_u8(h, (uint8_t)out->kind);
    if (out->kind == GC_ARG_TENSOR) {
      hash_meta(k, &out->v->meta);
    } else if (out->kind == GC_ARG_TENSORS) {
      hash_i64(h, out->n);
      for (int j = 0; j < out->n; j++)
        hash_meta(k, &out->vals[j]->meta);
    } else if (out->kind != GC_ARG_NONE) {
      hash_symvalue(k, out->sym.v);
    }
  }
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
  int rc = gc__key_order_nodes(k, order);
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
  hash_begin(h);
  hash_str(h, "inputs-v1");
  hash_i64(h, g->ninputs);
  for (int i = 0; i < g->ninputs; i++) {
    const gc_input *in = &g->inputs[i];
    hash_i64(h, in->kind);
    const gc_arg *a = &in->arg;
    if (a->kind == GC_ARG_TENSOR) {
      hash_u8(h, 'T');
      hash_meta(k, &a->v->meta);
    } else if ((a->kind == GC_ARG_SYM_INT || a->kind == GC_ARG_SYM_FLOAT ||
                a->kind == GC_ARG_SYM_BOOL) &&
               a->sym.v) {
      hash_u8(h, 's');
      hash_symvalue(k, a->sym.v);
    } else {
      hash_arg(k, NULL, a);
    }
  }
  /* Storage sharing: each input names the first input of its group. */
  int *first = gc__key_group_firsts(k);
  if (!first)
    h->failed = 1;
  for (int i = 0; i < g->ninputs && first; i++) {
    int grp = g->inputs[i].storage_group;
    hash_i64(h, grp >= 0 && grp < g->ngroups ? first[grp] : -1);
  }
  hash_end(h, out);
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
  hash_i64(h, n);
  for (int i = 0; i < n; i++) {
    size_t len = gc_schema_format(used[i]->schema, NULL, 0);
    char *text = gc_arena_alloc(k->a, len + 1);
    if (!text) {
      h->failed = 1;
      return;
    }
    gc_schema_format(used[i]->schema, text, len + 1);
    hash_str(h, used[i]->name);
    hash_str(h, text);
  }
}

static void hash_graph(keyer *k, const int *order, uint8_t out[GC_DIGEST_LEN]) {
  const gc_graph *g = k->g;
  hasher *h = &k->h;
  for (int i = 0; i < g->nnodes; i++)
    k->pos[order[i]] = i;
  k->phase = PHASE_STREAM;
  hash_begin(h);
  hash_str(h, "graph-v1");
  hash_i64(h, g->ninputs);
  hash_operators(k);
  hash_i64(h, g->nnodes);
  for (int i = 0; i < g->nnodes; i++)
    gc__key_hash_node(k, &g->nodes[order[i]]);
  hash_i64(h, g->noutputs);
  for (int o = 0; o < g->noutputs; o++)
    hash_arg(k, NULL, &g->outputs[o]);
  hash_end(h, out);
}

static void hash_options(keyer *k, const gc_options *o,
                         uint8_t out[GC_DIGEST_LEN]) {
  hasher *h = &k->h;
  hash_begin(h);
  hash_str(h, "options-v1");
  hash_i64(h, o->opt_level);
  hash_u8(h, o->keep_input_mutations);
  hash_u8(h, o->training);
  if (o->separate_temporaries) /* absent when false: older keys stay valid */
    hash_str(h, "separate-temporaries");
  if (o->eager_random)
    hash_str(h, "eager-random");
  hash_end(h, out);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The ISA feature list as a sorted, de-duplicated set. */
static void hash_isa(keyer *k, const char *isa) {
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
  hash_i64(h, (int64_t)uniq);
  for (size_t i = 0; i < n; i++)
    if (i == 0 || strcmp(feat[i], feat[i - 1]) != 0)
      hash_str(h, feat[i]);
}

static void hash_target(keyer *k, const gc_target *t,
                        uint8_t out[GC_DIGEST_LEN]) {
  hasher *h = &k->h;
  hash_begin(h);
  hash_str(h, "target-v1");
  hash_str(h, t->arch);
  hash_isa(k, t->isa);
  hash_str(h, t->toolchain);
  hash_str(h, t->cflags);
  hash_str(h, t->torch_version ? t->torch_version : k->g->torch_version);
  hash_end(h, out);
}

static void hash_text(keyer *k, const char *tag, const char *text,
                      uint8_t out[GC_DIGEST_LEN]) {
  hash_begin(&k->h);
  hash_str(&k->h, tag);
  hash_str(&k->h, text);
  hash_end(&k->h, out);
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
    hash_begin(&k.h);
    hash_str(&k.h, "compiled-key-v1");
    for (int c = 0; c < GC_KEY_NCOMPONENTS; c++)
      hash_bytes(&k.h, out->part[c], GC_DIGEST_LEN);
    hash_end(&k.h, out->key);
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
