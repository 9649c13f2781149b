/*
 * values.c: the NativeProgram's values (program.c): buffers, strided
 * views, size expressions and literal arguments, each with its Placement.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/codegen/program_internal.h"

void *pe_msg(pe *e, const ProtobufCMessageDescriptor *d) {
  void *m = gc_arena_alloc(e->a, d->sizeof_message);
  if (!m) {
    e->failed = true;
    return NULL;
  }
  protobuf_c_message_init(d, m);
  return m;
}

static int add_value(pe *e, pb_value *v, Compiled__V1__PlacementKind kind,
                     int index, int64_t offset) {
  if (!v || e->failed)
    return -1;
  int cv = e->cap, cp = e->cap; /* the two arrays grow together */
  pb_value **nv =
      gc_arena_grow(e->a, e->values, e->nvalues, &cv, 64, sizeof *nv);
  pb_place **np =
      nv ? gc_arena_grow(e->a, e->places, e->nvalues, &cp, 64, sizeof *np)
         : NULL;
  if (!np) {
    e->failed = true;
    return -1;
  }
  e->values = nv;
  e->places = np;
  e->cap = cv;
  pb_place *pl = NEW(e, pb_place, compiled__v1__placement__descriptor);
  if (!pl)
    return -1;
  pl->kind = kind;
  pl->index = index;
  pl->offset = offset;
  e->values[e->nvalues] = v;
  e->places[e->nvalues] = pl;
  return e->nvalues++;
}

static Compiled__V1__SymInt *symint(pe *e, int64_t v) {
  Compiled__V1__SymInt *s =
      NEW(e, Compiled__V1__SymInt, compiled__v1__sym_int__descriptor);
  if (s) {
    s->kind_case = COMPILED__V1__SYM_INT__KIND_AS_INT;
    s->as_int = v;
  }
  return s;
}

/* A symbolic integer: its expression over the size symbols. */
static Compiled__V1__SymInt *ssymint(pe *e, const gc_sym *v) {
  int64_t c;
  if (gc_sym_const_of(v, &c))
    return symint(e, c);
  Compiled__V1__SymInt *s =
      NEW(e, Compiled__V1__SymInt, compiled__v1__sym_int__descriptor);
  Compiled__V1__SymExpr *x =
      NEW(e, Compiled__V1__SymExpr, compiled__v1__sym_expr__descriptor);
  if (!s || !x)
    return NULL;
  x->expr = ir_sym_text(&e->n->ir, v);
  s->kind_case = COMPILED__V1__SYM_INT__KIND_AS_EXPR;
  s->as_expr = x;
  return s;
}

static pb_value *tensor_value(pe *e, gc_dtype dt, int rank,
                              const int64_t *sizes, const int64_t *strides);

/* A tensor Value of symbolic sizes and strides. */
static pb_value *tensor_value_s(pe *e, gc_dtype dt, int rank,
                                gc_sym *const *sizes, gc_sym *const *strides) {
  int64_t z[IR_MAX_RANK] = {0};
  pb_value *v = tensor_value(e, dt, rank, z, z);
  if (!v)
    return NULL;
  for (int i = 0; i < rank; i++) {
    v->tensor->sizes[i] = ssymint(e, sizes[i]);
    v->tensor->strides[i] = ssymint(e, strides[i]);
  }
  return v;
}

/* A tensor Value of dtype, sizes and strides. */
static pb_value *tensor_value(pe *e, gc_dtype dt, int rank,
                              const int64_t *sizes, const int64_t *strides) {
  pb_value *v = NEW(e, pb_value, compiled__v1__value__descriptor);
  Compiled__V1__TensorMeta *m =
      NEW(e, Compiled__V1__TensorMeta, compiled__v1__tensor_meta__descriptor);
  Compiled__V1__Device *d =
      NEW(e, Compiled__V1__Device, compiled__v1__device__descriptor);
  if (!v || !m || !d)
    return NULL;
  m->dtype = (Compiled__V1__ScalarType)dt;
  m->n_sizes = m->n_strides = (size_t)rank;
  m->sizes = gc_arena_calloc(e->a, (size_t)rank + 1, sizeof *m->sizes);
  m->strides = gc_arena_calloc(e->a, (size_t)rank + 1, sizeof *m->strides);
  if (!m->sizes || !m->strides) {
    e->failed = true;
    return NULL;
  }
  for (int i = 0; i < rank; i++) {
    m->sizes[i] = symint(e, sizes[i]);
    m->strides[i] = symint(e, strides[i]);
  }
  m->storage_offset = symint(e, 0);
  d->type = "cpu";
  m->device = d;
  m->layout = COMPILED__V1__LAYOUT__LAYOUT_STRIDED;
  v->kind_case = COMPILED__V1__VALUE__KIND_TENSOR;
  v->tensor = m;
  return v;
}

/* The value of a buffer (made on first use). */
/* A buffer's tensor Value (its sizes and strides, symbolic or not). */
static pb_value *buf_tensor(pe *e, const ir_buf *b) {
  return b->symbolic
             ? tensor_value_s(e, b->dtype, b->rank, b->ssizes, b->sstrides)
             : tensor_value(e, b->dtype, b->rank, b->sizes, b->strides);
}

/* A placement's offset as an expression (a symbolic arena offset). */
static void place_offset(pe *e, int v, const gc_sym *off) {
  int64_t c;
  if (v < 0 || !off || gc_sym_const_of(off, &c))
    return;
  e->places[v]->offset = 0;
  e->places[v]->offset_expr = ir_sym_text(&e->n->ir, off);
}

int pe_buf_value(pe *e, ir_buf *b) {
  if (e->buf_value[b->id] >= 0)
    return e->buf_value[b->id];
  Compiled__V1__PlacementKind k = COMPILED__V1__PLACEMENT_KIND__PLACEMENT_NONE;
  int index = 0;
  int64_t off = 0;
  ir_buf *root = ir_buf_storage(b);
  if (root != b && root->kind != IR_BUF_ARENA) {
    /* living in a call's result or a program output: a view of it */
    int base = pe_buf_value(e, root);
    int v = add_value(e, buf_tensor(e, b),
                      COMPILED__V1__PLACEMENT_KIND__PLACEMENT_VIEW, base, 0);
    e->buf_value[b->id] = v;
    return v;
  }
  switch (b->kind) {
  case IR_BUF_INPUT:
    k = COMPILED__V1__PLACEMENT_KIND__PLACEMENT_INPUT;
    index = b->index;
    break;
  case IR_BUF_ARENA:
    k = COMPILED__V1__PLACEMENT_KIND__PLACEMENT_ARENA;
    off = b->arena_offset;
    break;
  case IR_BUF_OUTPUT:
    k = COMPILED__V1__PLACEMENT_KIND__PLACEMENT_OUTPUT;
    index = b->index;
    break;
  case IR_BUF_RESULT:
    k = COMPILED__V1__PLACEMENT_KIND__PLACEMENT_RESULT;
    break;
  case IR_BUF_TEMP:
    k = COMPILED__V1__PLACEMENT_KIND__PLACEMENT_TEMP;
    break;
  }
  int v =
      add_value(e, buf_tensor(e, b), k, index, off == IR_SYMBOLIC ? 0 : off);
  if (b->kind == IR_BUF_ARENA && off == IR_SYMBOLIC)
    place_offset(e, v, b->sarena_offset);
  e->buf_value[b->id] = v;
  return v;
}

/* The value of a strided view: the buffer's own when the view is the
 * whole buffer, else a VIEW value over it. */
int pe_view_value(pe *e, const ir_view *w) {
  int base = pe_buf_value(e, w->buf);
  if (e->n->ir.nsyms) {
    ir_view c = *w;
    ir_view_sym(&e->n->ir, &c);
    const ir_buf *b = w->buf;
    bool whole = gc_sym_is_const(c.soffset, 0) && w->rank == b->rank;
    for (int i = 0; whole && i < w->rank; i++)
      whole = c.ssizes[i] == b->ssizes[i] && (gc_sym_is_const(c.ssizes[i], 1) ||
                                              gc_sym_is_const(c.ssizes[i], 0) ||
                                              c.sstrides[i] == b->sstrides[i]);
    if (whole)
      return base;
    int64_t off;
    bool cst = gc_sym_const_of(c.soffset, &off);
    int v = add_value(
        e, tensor_value_s(e, b->dtype, w->rank, c.ssizes, c.sstrides),
        COMPILED__V1__PLACEMENT_KIND__PLACEMENT_VIEW, base, cst ? off : 0);
    place_offset(e, v, c.soffset);
    return v;
  }
  bool whole = w->offset == 0 && w->rank == w->buf->rank;
  for (int i = 0; whole && i < w->rank; i++)
    whole = w->sizes[i] == w->buf->sizes[i] &&
            (w->sizes[i] <= 1 || w->strides[i] == w->buf->strides[i]);
  if (whole)
    return base;
  return add_value(
      e, tensor_value(e, w->buf->dtype, w->rank, w->sizes, w->strides),
      COMPILED__V1__PLACEMENT_KIND__PLACEMENT_VIEW, base, w->offset);
}

/* A symbolic scalar value of the graph as a sym_expr Value: its
 * expression with the key's names, which the runtime evaluates. */
static int sym_expr_value(pe *e, const gc_value *sv) {
  if (!sv || sv->kind != GC_VALUE_SYM_INT || !sv->sym.tree) {
    gc_errorf(e->err, GC_EUNSUPPORTED,
              "native emit: a symbolic argument without an integer "
              "expression");
    e->failed = true;
    return -1;
  }
  pb_value *v = NEW(e, pb_value, compiled__v1__value__descriptor);
  char *text = gc_symbols_text(&e->n->f->symbols, e->a, sv->sym.tree);
  if (!v || !text) {
    e->failed = true;
    return -1;
  }
  v->kind_case = COMPILED__V1__VALUE__KIND_SYM_EXPR;
  v->sym_expr = text;
  return add_value(e, v, COMPILED__V1__PLACEMENT_KIND__PLACEMENT_NONE, 0, 0);
}

int pe_literal(pe *e, const gc_arg *a) {
  if ((a->kind == GC_ARG_SYM_INT || a->kind == GC_ARG_SYM_FLOAT ||
       a->kind == GC_ARG_SYM_BOOL) &&
      a->sym.v)
    return sym_expr_value(e, a->sym.v);
  bool named = false;
  for (int i = 0; a->kind == GC_ARG_SYM_INTS && i < a->n; i++)
    named |= a->syms[i].v != NULL;
  if (named) { /* a SymInt[] with symbolic items */
    pb_value *v = NEW(e, pb_value, compiled__v1__value__descriptor);
    Compiled__V1__ValueRefList *l =
        NEW(e, Compiled__V1__ValueRefList,
            compiled__v1__value_ref_list__descriptor);
    if (!v || !l)
      return -1;
    l->n_items = (size_t)a->n;
    l->items = gc_arena_calloc(e->a, (size_t)a->n + 1, sizeof *l->items);
    if (!l->items) {
      e->failed = true;
      return -1;
    }
    for (int i = 0; i < a->n; i++) {
      Compiled__V1__ValueRef *r =
          NEW(e, Compiled__V1__ValueRef, compiled__v1__value_ref__descriptor);
      if (!r)
        return -1;
      if (a->syms[i].v) {
        r->kind_case = COMPILED__V1__VALUE_REF__KIND_VALUE;
        r->value = sym_expr_value(e, a->syms[i].v);
      } else {
        r->kind_case = COMPILED__V1__VALUE_REF__KIND_INT;
        r->int_ = a->syms[i].i;
      }
      l->items[i] = r;
    }
    v->kind_case = COMPILED__V1__VALUE__KIND_SYM_INTS;
    v->sym_ints = l;
    return add_value(e, v, COMPILED__V1__PLACEMENT_KIND__PLACEMENT_NONE, 0, 0);
  }
  pb_value *v = gc_literal_value(e->a, a, e->err);
  if (!v) {
    e->failed = true;
    return -1;
  }
  return add_value(e, v, COMPILED__V1__PLACEMENT_KIND__PLACEMENT_NONE, 0, 0);
}

int pe_list_value(pe *e, const int *items, int n, bool optional) {
  pb_value *v = NEW(e, pb_value, compiled__v1__value__descriptor);
  Compiled__V1__ValueList *l =
      NEW(e, Compiled__V1__ValueList, compiled__v1__value_list__descriptor);
  if (!v || !l)
    return -1;
  l->n_items = (size_t)n;
  l->items = gc_arena_calloc(e->a, (size_t)n + 1, sizeof *l->items);
  if (!l->items) {
    e->failed = true;
    return -1;
  }
  memcpy(l->items, items, (size_t)n * sizeof *items);
  if (optional) {
    v->kind_case = COMPILED__V1__VALUE__KIND_OPTIONAL_TENSORS;
    v->optional_tensors = l;
  } else {
    v->kind_case = COMPILED__V1__VALUE__KIND_TENSORS;
    v->tensors = l;
  }
  return add_value(e, v, COMPILED__V1__PLACEMENT_KIND__PLACEMENT_NONE, 0, 0);
}
