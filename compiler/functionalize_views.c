/*
 * functionalize_views.c: reading an object's current contents through its
 * view chain (replaying the views on the root's current value) and writing
 * new contents back (inverting each view: a scatter into its base), for
 * functionalize.c. See docs/functionalization.md.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "compiler/functionalize_internal.h"
#include "compiler/opfacts.h"
#include "compiler/ops.h"
#include "compiler/torchops.h"

/* ---- replaying and inverting views ---- */

static int64_t arg_int(const gc_node *n, const char *name, int64_t dflt) {
  for (int i = 0; i < n->nargs; i++) {
    if (strcmp(n->args[i].name, name) != 0)
      continue;
    const gc_arg *a = &n->args[i].arg;
    if (a->kind == GC_ARG_INT)
      return a->i;
    if (a->kind == GC_ARG_SYM_INT && !a->sym.v)
      return a->sym.i;
    return dflt;
  }
  const gc_schema *s = n->op->schema;
  int p = gc_schema_find_arg(s, name);
  if (p >= 0 && s->args[p].has_default && s->args[p].def.kind == GC_ARG_INT)
    return s->args[p].def.i;
  return dflt;
}

static const gc_arg *arg_named(const gc_node *n, const char *name) {
  for (int i = 0; i < n->nargs; i++)
    if (strcmp(n->args[i].name, name) == 0)
      return &n->args[i].arg;
  return NULL;
}

/* The original value a step views, and the one it produces. */
static const gc_value *step_input(const gc_view_step *s) {
  return s->node->args[s->self_arg].arg.v;
}

static const gc_value *step_output(const gc_view_step *s) {
  const gc_arg *o = &s->node->outputs[0];
  if (o->kind == GC_ARG_TENSORS)
    return s->item >= 0 && s->item < o->n ? o->vals[s->item] : NULL;
  return o->kind == GC_ARG_TENSOR ? o->v : NULL;
}

/* Maps an original argument into the new graph: tensors to their objects'
 * current values, named scalars to their new values. `self_arg` (when >= 0)
 * is replaced by `self`. */
bool fz_map_arg(fz *z, const gc_arg *in, gc_arg *out) {
  *out = *in;
  switch (in->kind) {
  case GC_ARG_TENSOR:
    out->v = fz_read_obj(z, z->objof[in->v->id]);
    return out->v != NULL;
  case GC_ARG_TENSORS:
  case GC_ARG_OPT_TENSORS:
    out->vals = gc_arena_calloc(z->a, (size_t)in->n + 1, sizeof *out->vals);
    if (!out->vals)
      return z->oom = true, false;
    for (int i = 0; i < in->n; i++)
      if (in->vals[i] &&
          !(out->vals[i] = fz_read_obj(z, z->objof[in->vals[i]->id])))
        return false;
    return true;
  case GC_ARG_SYM_INT:
  case GC_ARG_SYM_FLOAT:
  case GC_ARG_SYM_BOOL:
    if (in->sym.v)
      out->sym.v = z->vmap[in->sym.v->id];
    return true;
  case GC_ARG_SYM_INTS:
  case GC_ARG_SYM_FLOATS:
  case GC_ARG_SYM_BOOLS:
    out->syms = gc_arena_calloc(z->a, (size_t)in->n + 1, sizeof *out->syms);
    if (!out->syms)
      return z->oom = true, false;
    for (int i = 0; i < in->n; i++) {
      out->syms[i] = in->syms[i];
      if (in->syms[i].v)
        out->syms[i].v = z->vmap[in->syms[i].v->id];
    }
    return true;
  default:
    return true;
  }
}

/* The view operator that replays `n` (t for an in-place t_, transpose.int
 * for transpose_). */
const gc_op *fz_replay_op(fz *z, const gc_node *n) {
  const gc_schema *s = n->op->schema;
  size_t len = strlen(s->name);
  if (!len || s->name[len - 1] != '_')
    return fz_fg_op(z, n->op);
  const gc_op *op = fz_variant_of(z, s);
  if (!op)
    fz_bailf(z, "no view operator replays %s", s->qualified);
  return op;
}

/* Applies view step `s` to new-graph value `base`. */
static gc_value *replay(fz *z, const gc_view_step *s, gc_value *base) {
  const gc_node *n = s->node;
  const gc_op *op = s->op;
  gc_named_arg *args =
      gc_arena_calloc(z->a, (size_t)n->nargs + 1, sizeof *args);
  if (!args)
    return z->oom = true, NULL;
  for (int i = 0; i < n->nargs; i++) {
    args[i] = n->args[i];
    args[i].param = gc_schema_find_arg(op->schema, n->args[i].name);
    if (i == s->self_arg)
      args[i].arg = A_T(base);
    else if (!fz_map_arg(z, &n->args[i].arg, &args[i].arg))
      return NULL;
  }
  gc_node *c = fz_add_node(z, op, n->nargs, 1);
  if (!c)
    return NULL;
  memcpy(c->args, args, (size_t)n->nargs * sizeof *args);

  if (s->item < 0) {
    gc_value *out = fz_new_value(z, GC_VALUE_TENSOR, &step_output(s)->meta);
    if (!out)
      return NULL;
    c->outputs[0] = A_T(out);
    c->label = out->name;
    return out;
  }
  /* A Tensor[] view (split, unbind): every element, keep ours. */
  const gc_arg *orig = &n->outputs[0];
  gc_arg list = {.kind = GC_ARG_TENSORS, .n = orig->n};
  list.vals = gc_arena_calloc(z->a, (size_t)orig->n + 1, sizeof *list.vals);
  if (!list.vals)
    return z->oom = true, NULL;
  for (int i = 0; i < orig->n; i++)
    if (!(list.vals[i] =
              fz_new_value(z, GC_VALUE_TENSOR, &orig->vals[i]->meta)))
      return NULL;
  c->outputs[0] = list;
  c->label = list.vals[0]->name;
  return list.vals[s->item];
}

static bool same_sizes(const gc_tensor_meta *a, const gc_tensor_meta *b) {
  if (a->rank != b->rank)
    return false;
  for (int i = 0; i < a->rank; i++)
    if (a->sizes[i].expr || b->sizes[i].expr || a->sizes[i].v != b->sizes[i].v)
      return false;
  return true;
}

static bool dense_contiguous(const gc_tensor_meta *m) {
  return !m->offset.expr && m->offset.v == 0 && gc_meta_contiguous(m);
}

static gc_arg sizes_arg(fz *z, const gc_tensor_meta *m) {
  int64_t v[64];
  for (int i = 0; i < m->rank && i < 64; i++)
    v[i] = m->sizes[i].v;
  return fz_A_INTS(z, v, m->rank);
}

/* Puts `src` (the new value of step `s`'s output) into `base` (the current
 * value of its input): the step's inverse. `root_meta` is the storage's
 * original metadata (for as_strided). */
static gc_value *invert(fz *z, const gc_view_step *s, gc_value *base,
                        gc_value *src, const gc_tensor_meta *root_meta) {
  const gc_node *n = s->node;
  const char *q = n->op->schema->qualified;
  const gc_tensor_meta *bm = &step_input(s)->meta;
  /* how to invert the view, from the operator facts table (opfacts.def) */
  const gc_opfacts *f = gc_opfacts_view(n->op->schema);
  const char *inv = f ? f->inverse_op : NULL;
  switch (f ? f->inverse : GC_INV_NONE) {
  case GC_INV_SELECT:
  case GC_INV_UNBIND: {
    if (f->inverse == GC_INV_UNBIND && s->item < 0)
      break;
    int64_t dim = arg_int(n, "dim", 0);
    int64_t idx =
        f->inverse == GC_INV_SELECT ? arg_int(n, "index", 0) : s->item;
    gc_arg a[] = {A_T(base), A_T(src), A_I(dim), A_I(idx)};
    return fz_emit_call(z, inv, a, 4, bm);
  }
  case GC_INV_SLICE: {
    const gc_arg *st = arg_named(n, "start"), *en = arg_named(n, "end");
    gc_arg a[] = {A_T(base),
                  A_T(src),
                  A_I(arg_int(n, "dim", 0)),
                  st ? *st : A_NONE(),
                  en ? *en : A_NONE(),
                  A_I(arg_int(n, "step", 1))};
    return fz_emit_call(z, inv, a, 6, bm);
  }
  case GC_INV_SPLIT:
  case GC_INV_SPLIT_SIZES: {
    int64_t dim = arg_int(n, "dim", 0);
    if (dim < 0)
      dim += bm->rank;
    if (dim < 0 || dim >= bm->rank || bm->sizes[dim].expr)
      return fz_bail(z, "split of a symbolic dimension"), NULL;
    int64_t start = 0, end = 0, total = bm->sizes[dim].v;
    if (f->inverse == GC_INV_SPLIT) {
      int64_t ss = arg_int(n, "split_size", 1);
      start = (int64_t)s->item * ss;
      end = start + ss < total ? start + ss : total;
    } else {
      const gc_arg *sz = arg_named(n, "split_sizes");
      for (int i = 0; sz && i < sz->n && i <= s->item; i++) {
        start = end;
        end += sz->ints[i];
      }
    }
    gc_arg a[] = {A_T(base), A_T(src), A_I(dim), A_I(start), A_I(end), A_I(1)};
    return fz_emit_call(z, inv, a, 6, bm);
  }
  case GC_INV_DIAGONAL: {
    gc_arg a[] = {A_T(base), A_T(src), A_I(arg_int(n, "offset", 0)),
                  A_I(arg_int(n, "dim1", 0)), A_I(arg_int(n, "dim2", 1))};
    return fz_emit_call(z, inv, a, 5, bm);
  }
  case GC_INV_T: {
    gc_arg a[] = {A_T(src)};
    return fz_emit_call(z, inv, a, 1, bm);
  }
  case GC_INV_TRANSPOSE:
  case GC_INV_SWAPAXES: {
    bool axes = f->inverse == GC_INV_SWAPAXES;
    int64_t d0 = arg_int(n, axes ? "axis0" : "dim0", 0);
    int64_t d1 = arg_int(n, axes ? "axis1" : "dim1", 1);
    gc_arg a[] = {A_T(src), A_I(d0), A_I(d1)};
    return fz_emit_call(z, inv, a, 3, bm);
  }
  case GC_INV_PERMUTE: {
    const gc_arg *dims = arg_named(n, "dims");
    if (!dims || dims->kind != GC_ARG_INTS || dims->n > 64)
      return fz_bail(z, "permute with unusual dims"), NULL;
    int64_t pinv[64];
    for (int i = 0; i < dims->n; i++) {
      int64_t d = dims->ints[i] < 0 ? dims->ints[i] + dims->n : dims->ints[i];
      if (d < 0 || d >= dims->n)
        return fz_bail(z, "permute with bad dims"), NULL;
      pinv[d] = i;
    }
    gc_arg a[] = {A_T(src), fz_A_INTS(z, pinv, dims->n)};
    return fz_emit_call(z, inv, a, 2, bm);
  }
  case GC_INV_EXPAND:
    if (!same_sizes(bm, &step_output(s)->meta)) {
      fz_bailf(z,
               "an in-place write through an expanded view (%s): eager refuses "
               "it too",
               q);
      return NULL;
    }
    /* an expand that changes no size is a reshape */
    /* fall through */
  case GC_INV_RESHAPE: {
    if (bm->rank > 64)
      return fz_bail(z, "rank too large"), NULL;
    gc_arg a[] = {A_T(src), sizes_arg(z, bm)};
    return fz_emit_call(z, inv, a, 2, bm);
  }
  case GC_INV_IDENTITY:
    return src;
  case GC_INV_AS_STRIDED: {
    /* as_strided_scatter places src by storage offsets of a clone of the
     * base, which match the storage's only if it is contiguous from 0. */
    if (!dense_contiguous(root_meta))
      return fz_bail(z,
                     "a write through an as_strided view of a storage that is "
                     "not contiguous"),
             NULL;
    const gc_arg *size = arg_named(n, "size"), *stride = arg_named(n, "stride"),
                 *off = arg_named(n, "storage_offset");
    if (!size || !stride)
      return fz_bail(z, "as_strided without sizes"), NULL;
    gc_arg a[] = {A_T(base), A_T(src), *size, *stride, off ? *off : A_NONE()};
    return fz_emit_call(z, inv, a, 5, bm);
  }
  case GC_INV_NONE:
    break;
  }
  fz_bailf(z, "a write through the view %s, which the compiler cannot invert",
           q);
  return NULL;
}

static gc_value *read_obj_at(fz *z, int id);

/* The current value of an object, regenerated from its root if stale.
 * Recursion (through replay and map_arg) is bounded by MAX_READ_NESTING. */
gc_value *fz_read_obj(fz *z, int id) {
  if (z->reading >= MAX_READ_NESTING) {
    fz_bailf(z,
             "reading a view replays views of views more than %d levels deep "
             "(view_as-like arguments that are stale views themselves)",
             MAX_READ_NESTING);
    return NULL;
  }
  z->reading++;
  gc_value *v = read_obj_at(z, id);
  z->reading--;
  return v;
}

static gc_value *read_obj_at(fz *z, int id) {
  if (id < 0) {
    fz_bail(z, "internal: a tensor with no object");
    return NULL;
  }
  fz_obj *o = &z->objs[id];
  fz_root *r = &z->roots[o->root];
  /* In training, an autograd-visible read of an input that requires grad,
   * after writes autograd did not see (through detach()), needs the new data
   * with the input's autograd identity: the functional form cannot say
   * that exactly. */
  if (z->o->training && !z->finishing && r->input >= 0 && r->written &&
      !r->written_visible && !o->detached &&
      z->g->inputs[r->input].arg.v->meta.requires_grad) {
    fz_bailf(z,
             "input %d, which requires grad, is read after a mutation hidden "
             "from autograd",
             r->input);
    return NULL;
  }

  if (o->nchain == 0)
    return r->cur;
  if (o->fv && o->gen == r->gen)
    return o->fv;
  gc_value *v = r->cur;
  for (int i = 0; i < o->nchain && v; i++)
    v = replay(z, &o->chain[i], v);
  o = &z->objs[id]; /* replay may have grown the array */
  o->fv = v;
  o->gen = z->roots[o->root].gen;
  return v;
}

/* Makes `nv` the new contents of object `id`, updating its root. */
void fz_write_obj(fz *z, int id, gc_value *nv) {
  fz_obj o = z->objs[id];
  fz_root *r = &z->roots[o.root];
  gc_value *val = nv;
  if (o.nchain > 0) {
    gc_value *bases[MAX_CHAIN];
    bases[0] = r->cur;
    for (int i = 0; i + 1 < o.nchain && bases[i]; i++)
      bases[i + 1] = replay(z, &o.chain[i], bases[i]);
    const gc_tensor_meta *root_meta = z->roots[o.root].meta0;
    for (int i = o.nchain - 1; i >= 0 && val && !z->bail; i--)
      val = invert(z, &o.chain[i], bases[i], val, root_meta);
  }
  if (!val || z->bail)
    return;
  r = &z->roots[o.root];
  r->cur = val;
  r->gen++;
  r->written = true;
  if (!o.detached)
    r->written_visible = true;
  z->objs[id].fv = nv;
  z->objs[id].gen = r->gen;
}
