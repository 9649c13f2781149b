/*
 * functionalize_ops.c: each original node made functional for
 * functionalize.c: views become objects, in-place and out= operators
 * their functional variants with the result written back, other calls
 * copied with their arguments read through their objects. See
 * docs/functionalization.md.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "compiler/functionalize_internal.h"
#include "compiler/opfacts.h"
#include "compiler/ops.h"
#include "compiler/torchops.h"

/* ---- the operators ---- */

/* In-place operators that change metadata only (opfacts.def). */
bool fz_is_meta_inplace(const gc_schema *s) {
  return gc_opfacts_meta_inplace(s);
}

int fz_bound_index(const gc_node *n, int param) {
  for (int i = 0; i < n->nargs; i++)
    if (n->args[i].param == param)
      return i;
  return -1;
}

/* Gives the copy `c` of node `n` new output values; with `roots`, each
 * tensor result also becomes a fresh root and object. */
static void new_outputs(fz *z, const gc_node *n, gc_node *c, bool roots) {
  for (int k = 0; k < n->noutputs; k++) {
    const gc_arg *o = &n->outputs[k];
    gc_arg *co = &c->outputs[k];
    *co = *o;
    if (o->kind == GC_ARG_TENSOR) {
      gc_value *v = fz_new_value(z, GC_VALUE_TENSOR, &o->v->meta);
      if (!v)
        return;
      co->v = v;
      int r = roots ? fz_new_root(z, -1, v) : -1;
      if (r >= 0)
        z->objof[o->v->id] = fz_new_obj(z, r, o->v);
    } else if (o->kind == GC_ARG_TENSORS) {
      co->vals = gc_arena_calloc(z->a, (size_t)o->n + 1, sizeof *co->vals);
      if (!co->vals)
        return (void)(z->oom = true);
      for (int j = 0; j < o->n; j++) {
        gc_value *v = fz_new_value(z, GC_VALUE_TENSOR, &o->vals[j]->meta);
        if (!v)
          return;
        co->vals[j] = v;
        int r = roots ? fz_new_root(z, -1, v) : -1;
        if (r >= 0)
          z->objof[o->vals[j]->id] = fz_new_obj(z, r, o->vals[j]);
      }
    } else if (o->kind != GC_ARG_NONE && o->sym.v) {
      gc_value *v = fz_new_value(z, o->sym.v->kind, NULL);
      if (!v)
        return;
      v->sym = o->sym.v->sym;
      co->sym.v = v;
      z->vmap[o->sym.v->id] = v;
    }
  }
  if (c->noutputs > 0 && c->outputs[0].kind == GC_ARG_TENSOR)
    c->label = c->outputs[0].v->name;
}

/* Copies a node into the new graph with `op` (itself or its functional
 * variant), skipping the arguments marked in `skip`. */
static gc_node *copy_node(fz *z, const gc_node *n, const gc_op *op,
                          const bool *skip) {
  /* Arguments first: reading them may emit regenerations, which must come
   * before this node. */
  const gc_schema *fs = op->schema;
  gc_named_arg *args =
      gc_arena_calloc(z->a, (size_t)(n->nargs + fs->nargs) + 1, sizeof *args);
  if (!args)
    return z->oom = true, NULL;
  int k = 0;
  for (int i = 0; i < n->nargs; i++) {
    if (skip && skip[i])
      continue;
    args[k] = n->args[i];
    args[k].param = gc_schema_find_arg(fs, n->args[i].name);
    if (!fz_map_arg(z, &n->args[i].arg, &args[k].arg))
      return NULL;
    k++;
  }
  /* A variant may require what the original left to its default
   * (bernoulli_.float(p=0.5) -> bernoulli.p(p)): spell it out. */
  for (int p = 0; p < fs->nargs && op != fz_fg_op(z, n->op); p++) {
    bool bound = false;
    for (int i = 0; i < k; i++)
      bound |= args[i].param == p;
    if (bound || fs->args[p].has_default)
      continue;
    int q = gc_schema_find_arg(n->op->schema, fs->args[p].name);
    if (q < 0 || !n->op->schema->args[q].has_default) {
      fz_bailf(z, "%s needs argument '%s', which %s does not give",
               fs->qualified, fs->args[p].name, n->op->schema->qualified);
      return NULL;
    }
    args[k] = (gc_named_arg){.name = fs->args[p].name,
                             .arg = n->op->schema->args[q].def,
                             .keyword = true,
                             .param = p};
    k++;
  }

  gc_node *c = fz_add_node(z, op, k, n->noutputs);
  if (!c)
    return NULL;
  memcpy(c->args, args, (size_t)k * sizeof *args);
  c->stack_trace = n->stack_trace;
  c->module_path = n->module_path;
  return c;
}

static void do_pure(fz *z, const gc_node *n) {
  gc_node *c = copy_node(z, n, fz_fg_op(z, n->op), NULL);
  if (c)
    new_outputs(z, n, c, true);
}

/* A view: each output is a new object on the viewed argument's root. */
static void do_view(fz *z, const gc_node *n, int p) {
  int ai = fz_bound_index(n, p);
  if (ai < 0 || n->args[ai].arg.kind != GC_ARG_TENSOR) {
    /* a view of something we cannot follow: treat its results as fresh */
    do_pure(z, n);
    return;
  }
  int parent = z->objof[n->args[ai].arg.v->id];
  gc_node *c = copy_node(z, n, fz_fg_op(z, n->op), NULL);
  if (!c)
    return;
  new_outputs(z, n, c, false); /* the emitted view's results */
  bool detach = !strcmp(n->op->schema->qualified, "aten::detach");
  for (int k = 0; k < n->noutputs; k++) {
    const gc_arg *o = &n->outputs[k];
    if (o->kind == GC_ARG_TENSOR) {
      gc_view_step st = {
          .node = n, .op = fz_fg_op(z, n->op), .self_arg = ai, .item = -1};
      int id = fz_view_obj(z, parent, st, o->v, detach, false);
      if (id < 0)
        return;
      z->objs[id].fv = c->outputs[k].v;
      z->objs[id].gen = z->roots[z->objs[id].root].gen;
      z->objof[o->v->id] = id;
    } else if (o->kind == GC_ARG_TENSORS) {
      for (int j = 0; j < o->n; j++) {
        gc_view_step st = {
            .node = n, .op = fz_fg_op(z, n->op), .self_arg = ai, .item = j};

        int id = fz_view_obj(z, parent, st, o->vals[j], false, true);
        if (id < 0)
          return;
        z->objs[id].fv = c->outputs[k].vals[j];
        z->objs[id].gen = z->roots[z->objs[id].root].gen;
        z->objof[o->vals[j]->id] = id;
      }
    }
  }
}

/* t_(), transpose_(), ...: the object's metadata changes; its chain gets
 * the matching view step. */
static void do_meta_inplace(fz *z, const gc_node *n, int p) {
  int ai = fz_bound_index(n, p);
  if (ai < 0 || n->args[ai].arg.kind != GC_ARG_TENSOR)
    return fz_bail(z, "an in-place view op without a tensor");
  int id = z->objof[n->args[ai].arg.v->id];
  gc_view_step st = {
      .node = n, .op = fz_replay_op(z, n), .self_arg = ai, .item = -1};
  if (!st.op)
    return;
  fz_obj o = z->objs[id];

  if (o.nchain >= MAX_CHAIN)
    return fz_bail(z, "a view chain is too long");
  gc_view_step *chain =
      gc_arena_calloc(z->a, (size_t)o.nchain + 1, sizeof *chain);
  if (!chain)
    return (void)(z->oom = true);
  if (o.nchain)
    memcpy(chain, o.chain, (size_t)o.nchain * sizeof *chain);
  chain[o.nchain] = st;
  z->objs[id].chain = chain;
  z->objs[id].nchain = o.nchain + 1;
  z->objs[id].fv = NULL;
  z->objs[id].gen = -1;
  if (!strcmp(n->op->schema->name, "detach_"))
    z->objs[id].detached = true;
  z->objs[id].last = n->outputs[0].v;
  if (n->outputs[0].kind == GC_ARG_TENSOR)
    z->objof[n->outputs[0].v->id] = id;
}

/* Same type, alias annotations aside? */
bool fz_same_type(const gc_type *a, const gc_type *b) {
  if (!a || !b)
    return a == b;
  if (a->kind != b->kind || a->fixed_len != b->fixed_len ||
      a->nitems != b->nitems)
    return false;
  if (!fz_same_type(a->elem, b->elem))
    return false;
  for (int i = 0; i < a->nitems; i++)
    if (!fz_same_type(a->items[i], b->items[i]))
      return false;
  return true;
}

/* Does schema `f` take exactly `s`'s parameters (names and types) without
 * writing any? */
static bool same_params(const gc_schema *f, const gc_schema *s) {
  if (f->nargs != s->nargs || gc_schema_is_mutating(f))
    return false;
  for (int i = 0; i < s->nargs; i++)
    if (strcmp(f->args[i].name, s->args[i].name) != 0 ||
        !fz_same_type(f->args[i].type, s->args[i].type))
      return false;
  return true;
}

typedef struct variant_match {
  const gc_schema *s;
  const char *found;
  gc_arena *a;
} variant_match;

static int match_variant(const char *text, void *ctx) {
  variant_match *m = ctx;
  gc_schema *f;
  if (gc_schema_parse(m->a, text, &f, NULL) != 0 || !same_params(f, m->s))
    return 0;
  m->found = f->qualified;
  return 1;
}

/* The out-of-place operator for in-place `foo_`: `foo` with the same
 * overload, else any overload of `foo` with the same parameters (transpose_
 * -> transpose.int). NULL when there is none. */
const gc_op *fz_variant_of(fz *z, const gc_schema *s) {
  size_t len = strlen(s->name);
  char fname[256];
  snprintf(fname, sizeof fname, "%s::%.*s%s%s", s->ns, (int)(len - 1), s->name,
           *s->overload ? "." : "", s->overload);
  const gc_op *op = fz_op_lookup(z, fname);
  if (op && same_params(op->schema, s))
    return op;
  snprintf(fname, sizeof fname, "%s::%.*s", s->ns, (int)(len - 1), s->name);
  variant_match m = {.s = s, .a = z->a};
  gc_torch_overloads(fname, match_variant, &m);
  return m.found ? fz_op_lookup(z, m.found) : NULL;
}

static const gc_op *inplace_variant(fz *z, const gc_schema *s) {
  return fz_variant_of(z, s);
}

/* The functional operator for out= variant `s`: an overload of the same
 * name whose parameters are s's minus the written keyword-only ones. */
typedef struct out_match {
  const gc_schema *out;
  int nwritten;
  const char *found;
  gc_arena *a;
} out_match;

static int match_out(const char *text, void *ctx) {
  out_match *m = ctx;
  gc_schema *f;
  if (gc_schema_parse(m->a, text, &f, NULL) != 0 || gc_schema_is_mutating(f))
    return 0;
  if (f->nargs != m->out->nargs - m->nwritten || f->nrets != m->out->nrets)
    return 0;
  int k = 0;
  for (int i = 0; i < m->out->nargs; i++) {
    if (gc_schema_arg_is_write(m->out, i))
      continue;
    if (strcmp(f->args[k].name, m->out->args[i].name) != 0 ||
        !fz_same_type(f->args[k].type, m->out->args[i].type))
      return 0;
    k++;
  }
  m->found = f->qualified;
  return 1;
}

static const gc_op *out_variant(fz *z, const gc_schema *s, int nwritten) {
  char base[256];
  snprintf(base, sizeof base, "%s::%s", s->ns, s->name);
  out_match m = {.out = s, .nwritten = nwritten, .a = z->a};
  gc_torch_overloads(base, match_out, &m);
  return m.found ? fz_op_lookup(z, m.found) : NULL;
}

bool fz_meta_equal(const gc_tensor_meta *a, const gc_tensor_meta *b) {
  if (a->rank != b->rank || a->dtype != b->dtype)
    return false;
  for (int i = 0; i < a->rank; i++)
    if (a->sizes[i].v != b->sizes[i].v || a->strides[i].v != b->strides[i].v ||
        !!a->sizes[i].expr != !!b->sizes[i].expr)
      return false;
  return a->offset.v == b->offset.v;
}

/* Writes the new values of the written arguments to their objects, after
 * checking that their metadata did not change (that would be a resize). */
static void write_args(fz *z, const gc_node *n, const int *ai, gc_value **nv,
                       int nw) {
  for (int k = 0; k < nw && !z->bail; k++) {
    const gc_value *arg = n->args[ai[k]].arg.v;
    int id = z->objof[arg->id];
    /* The metadata after the call: the return aliasing it, if any. */
    const gc_value *after = z->objs[id].last;
    for (int r = 0; r < n->noutputs; r++) {
      int p = gc_schema_return_alias(n->op->schema, r);
      if (p == n->args[ai[k]].param && n->outputs[r].kind == GC_ARG_TENSOR)
        after = n->outputs[r].v;
    }
    if (!fz_meta_equal(&z->objs[id].last->meta, &after->meta))
      return fz_bailf(z, "%s resizes argument '%s'", n->op->schema->qualified,
                      n->args[ai[k]].name);
    fz_write_obj(z, id, nv[k]);
    z->objs[id].last = after;
  }
}

/* Results aliasing a written argument are that argument's object; the
 * others are fresh roots (their values already made by new_outputs). */
static void alias_results(fz *z, const gc_node *n, const gc_node *c) {
  for (int r = 0; r < n->noutputs; r++) {
    int p = gc_schema_return_alias(n->op->schema, r);
    int ai = p >= 0 ? fz_bound_index(n, p) : -1;
    if (ai >= 0 && n->outputs[r].kind == GC_ARG_TENSOR &&
        n->args[ai].arg.kind == GC_ARG_TENSOR)
      z->objof[n->outputs[r].v->id] = z->objof[n->args[ai].arg.v->id];
  }
  (void)c;
}

/* The exact fallback for a write without a functional variant (or one the
 * schema does not annotate): run the operator itself on private clones of
 * the written arguments, then write the clones back. */
static void clone_and_mutate(fz *z, const gc_node *n, const int *ai, int nw) {
  gc_value *clones[16];
  for (int k = 0; k < nw; k++) {
    const gc_value *arg = n->args[ai[k]].arg.v;
    gc_value *cur = fz_read_obj(z, z->objof[arg->id]);
    gc_arg a[] = {A_T(cur)};
    if (!cur || !(clones[k] = fz_emit_call(z, "aten::clone", a, 1, &arg->meta)))
      return;
  }
  gc_node *c = copy_node(z, n, fz_fg_op(z, n->op), NULL);
  if (!c)
    return;
  for (int k = 0; k < nw; k++)
    for (int i = 0; i < c->nargs; i++)
      if (c->args[i].param == n->args[ai[k]].param)
        c->args[i].arg = A_T(clones[k]);
  new_outputs(z, n, c, true);
  alias_results(z, n, c);
  write_args(z, n, ai, clones, nw);
}

/* A node that writes: in-place `foo_`, an out= variant, an omitted
 * mutation, or something we keep in eager form. */
static void do_write(fz *z, const gc_node *n) {
  const gc_schema *s = n->op->schema;
  int written[16], ai[16], nw = 0;
  for (int p = 0; p < s->nargs; p++)
    if (gc_node_writes(n, p)) {
      if (nw == 16)
        return fz_bail(z, "too many written arguments");
      written[nw++] = p;
    }
  if (!strcmp(s->name, "set_") || !strcmp(s->name, "resize_") ||
      !strcmp(s->name, "resize_as_"))
    return fz_bailf(z, "%s changes a tensor's storage", s->qualified);
  bool unannotated = false;
  for (int k = 0; k < nw; k++) {
    ai[k] = fz_bound_index(n, written[k]);
    if (ai[k] < 0 || n->args[ai[k]].arg.kind != GC_ARG_TENSOR)
      return fz_bailf(z, "%s writes a list or an unbound argument",
                      s->qualified);
    unannotated |= gc_write_unannotated(s, written[k]);
  }
  size_t len = strlen(s->name);
  bool inplace = nw == 1 && len > 1 && s->name[len - 1] == '_' &&
                 !s->args[written[0]].kwarg_only;
  if (inplace && fz_is_meta_inplace(s))
    return do_meta_inplace(z, n, written[0]);
  bool skip[64] = {false};
  const gc_op *fop = NULL;
  if (!unannotated && inplace)
    fop = inplace_variant(z, s);
  if (!unannotated && !inplace && n->nargs <= 64) {
    bool all_kw = true;
    for (int k = 0; k < nw; k++) {
      all_kw &= s->args[written[k]].kwarg_only;
      skip[ai[k]] = true;
    }
    fop = all_kw ? out_variant(z, s, nw) : NULL;
  }
  if (!fop || fop->schema->nrets != (inplace ? 1 : nw) ||
      n->noutputs != fop->schema->nrets)
    return clone_and_mutate(z, n, ai, nw);
  gc_node *c = copy_node(z, n, fop, inplace ? NULL : skip);
  if (!c)
    return;
  /* The functional results: one per written argument, in return order. */
  gc_value *nv[16] = {NULL};
  for (int k = 0; k < c->noutputs; k++) {
    const gc_arg *o = &n->outputs[k];
    if (o->kind != GC_ARG_TENSOR)
      return fz_bailf(z, "%s returns a non-tensor", s->qualified);
    if (!(nv[k] = fz_new_value(z, GC_VALUE_TENSOR, &o->v->meta)))
      return;
    c->outputs[k] = A_T(nv[k]);
  }
  if (c->noutputs)
    c->label = c->outputs[0].v->name;
  /* Return k goes to the argument it aliases. */
  int ret_ai[16];
  for (int k = 0; k < c->noutputs; k++) {
    int p = gc_schema_return_alias(s, k);
    ret_ai[k] = p >= 0 ? fz_bound_index(n, p) : -1;
    if (ret_ai[k] < 0)
      return fz_bailf(z, "%s: return %d aliases no argument", s->qualified, k);
  }
  alias_results(z, n, c);
  write_args(z, n, ret_ai, nv, c->noutputs);
}

void fz_do_node(fz *z, const gc_node *n) {
  const gc_schema *s = n->op->schema;
  if (gc_node_is_mutating(n)) {
    do_write(z, n);
    return;
  }
  int alias = -1;
  for (int r = 0; r < s->nrets && alias < 0; r++)
    alias = gc_schema_return_alias(s, r);
  if (alias >= 0)
    do_view(z, n, alias);
  else
    do_pure(z, n);
}
