/*
 * emit.c: the program of an artifact, from a validated graph.
 *
 * Version 0 programs are "fallback" programs: every node becomes a
 * KernelCall that the client executes with its own torch (torch.ops.aten.*).
 * The emitter lays out a value table in the manner of ExecuTorch's emitter:
 *
 *   - one value per graph input, in input order;
 *   - per node, in canonical order: a constant value per literal argument,
 *     a list value per tensor-list argument, and a value per output (a
 *     Tensor[] output is a list value whose items are values of their own);
 *   - a constant value per literal graph output.
 *
 * Everything is addressed by value index, names disappear. Instructions
 * follow the canonical order and tensor metadata drops the device index, so
 * the program is a function of the cache key: whichever renamed or reordered
 * variant of a graph is compiled first, the same program comes out.
 */
#include "compiler/emit.h"

#include <string.h>

#include "compiler/graph_internal.h"

typedef Compiled__V1__Value pb_value;

typedef struct emitter {
  gc_arena *a;
  const gc_graph *g;
  const gc_symbols *symbols; /* symbols are written "s<i>" (NULL: as sent) */
  pb_value **values;         /* growing value table */
  int nvalues, cap;
  int *slot; /* gc_value id -> value index; -1 before it exists */
  gc_error *err;
  int failed;
} emitter;

/* A new message of descriptor `d`, initialised, in the arena. */
static void *msg_new(emitter *e, const ProtobufCMessageDescriptor *d) {
  void *p = gc_arena_alloc(e->a, d->sizeof_message);
  if (!p) {
    e->failed = 1;
    return NULL;
  }
  protobuf_c_message_init(d, p);
  return p;
}

#define NEW(e, T, desc) ((T *)msg_new((e), &(desc)))

static int add_value(emitter *e, pb_value *v) {
  if (!v || e->failed) {
    e->failed = 1;
    return -1;
  }
  pb_value **nv =
      gc_arena_grow(e->a, e->values, e->nvalues, &e->cap, 64, sizeof *nv);
  if (!nv) {
    e->failed = 1;
    return -1;
  }
  e->values = nv;
  nv[e->nvalues] = v;
  return e->nvalues++;
}

static pb_value *new_value(emitter *e) {
  return NEW(e, pb_value, compiled__v1__value__descriptor);
}

static Compiled__V1__SymInt *sym_int(emitter *e, const gc_symint *s) {
  Compiled__V1__SymInt *x =
      NEW(e, Compiled__V1__SymInt, compiled__v1__sym_int__descriptor);
  if (!x)
    return NULL;
  if (s->expr) {
    Compiled__V1__SymExpr *ex =
        NEW(e, Compiled__V1__SymExpr, compiled__v1__sym_expr__descriptor);
    if (!ex)
      return NULL;
    /* with the key's names, never the client's (nor its hint): the
     * artifact is a function of the key */
    ex->expr = e->symbols && s->tree
                   ? gc_symbols_text(e->symbols, e->a, s->tree)
                   : (char *)s->expr;
    if (!ex->expr) {
      e->failed = 1;
      return NULL;
    }
    x->kind_case = COMPILED__V1__SYM_INT__KIND_AS_EXPR;
    x->as_expr = ex;
  } else {
    x->kind_case = COMPILED__V1__SYM_INT__KIND_AS_INT;
    x->as_int = s->v;
  }
  return x;
}

/* Tensor metadata without the device index (see the file comment). */
static Compiled__V1__TensorMeta *meta(emitter *e, const gc_tensor_meta *t) {
  Compiled__V1__TensorMeta *m =
      NEW(e, Compiled__V1__TensorMeta, compiled__v1__tensor_meta__descriptor);
  Compiled__V1__Device *d =
      NEW(e, Compiled__V1__Device, compiled__v1__device__descriptor);
  if (!m || !d)
    return NULL;
  m->dtype = (Compiled__V1__ScalarType)t->dtype;
  m->n_sizes = m->n_strides = (size_t)t->rank;
  m->sizes = gc_arena_calloc(e->a, (size_t)t->rank + 1, sizeof *m->sizes);
  m->strides = gc_arena_calloc(e->a, (size_t)t->rank + 1, sizeof *m->strides);
  if (!m->sizes || !m->strides) {
    e->failed = 1;
    return NULL;
  }
  for (int i = 0; i < t->rank; i++) {
    m->sizes[i] = sym_int(e, &t->sizes[i]);
    m->strides[i] = sym_int(e, &t->strides[i]);
  }
  m->storage_offset = sym_int(e, &t->offset);
  d->type = (char *)t->device.type;
  m->device = d;
  m->requires_grad = t->requires_grad;
  m->layout = (Compiled__V1__Layout)t->layout;
  return m;
}

/* The value index of a graph value, creating its slot on first sight
 * (inputs and node outputs are created in order, so a missing slot means a
 * bug). */
static int slot_of(emitter *e, const gc_value *v) {
  if (e->slot[v->id] < 0) {
    e->failed = 1;
    gc_errorf(e->err, GC_EINTERNAL, "emit: value '%s' used before its slot",
              v->name);
  }
  return e->slot[v->id];
}

static int tensor_value(emitter *e, const gc_value *v) {
  pb_value *x = new_value(e);
  if (x) {
    x->kind_case = COMPILED__V1__VALUE__KIND_TENSOR;
    x->tensor = meta(e, &v->meta);
  }
  int idx = add_value(e, x);
  if (idx >= 0)
    e->slot[v->id] = idx;
  return idx;
}

static int symbolic_value(emitter *e, const gc_value *v) {
  pb_value *x = new_value(e);
  if (x) {
    x->kind_case = COMPILED__V1__VALUE__KIND_SYM_INT;
    x->sym_int = v->sym.expr ? 0 : v->sym.v;
  }
  int idx = add_value(e, x);
  if (idx >= 0)
    e->slot[v->id] = idx;
  return idx;
}

static int index_list(emitter *e, const gc_arg *a, bool optional) {
  pb_value *x = new_value(e);
  Compiled__V1__ValueList *l =
      NEW(e, Compiled__V1__ValueList, compiled__v1__value_list__descriptor);
  if (!x || !l)
    return -1;
  l->n_items = (size_t)a->n;
  l->items = gc_arena_calloc(e->a, (size_t)a->n + 1, sizeof *l->items);
  if (!l->items) {
    e->failed = 1;
    return -1;
  }
  for (int i = 0; i < a->n; i++)
    l->items[i] = a->vals[i] ? slot_of(e, a->vals[i]) : -1;
  if (optional) {
    x->kind_case = COMPILED__V1__VALUE__KIND_OPTIONAL_TENSORS;
    x->optional_tensors = l;
  } else {
    x->kind_case = COMPILED__V1__VALUE__KIND_TENSORS;
    x->tensors = l;
  }
  return add_value(e, x);
}

/* A SymInt[] argument with symbolic items: ints and references to the
 * sym_int values that hold the others (which an earlier input or
 * instruction made). NULL in an emitter without a value table
 * (gc_literal_value). */
static pb_value *sym_list_value(emitter *e, pb_value *x, const gc_arg *a) {
  Compiled__V1__ValueRefList *l = NEW(e, Compiled__V1__ValueRefList,
                                      compiled__v1__value_ref_list__descriptor);
  if (!l || !e->slot) {
    e->failed = 1;
    if (!e->slot)
      gc_errorf(e->err, GC_EUNSUPPORTED,
                "emit: a symbolic list is not a literal");
    return NULL;
  }
  l->n_items = (size_t)a->n;
  l->items = gc_arena_calloc(e->a, (size_t)a->n + 1, sizeof *l->items);
  if (!l->items) {
    e->failed = 1;
    return NULL;
  }
  for (int i = 0; i < a->n; i++) {
    Compiled__V1__ValueRef *r =
        NEW(e, Compiled__V1__ValueRef, compiled__v1__value_ref__descriptor);
    if (!r)
      return NULL;
    if (a->syms[i].v) {
      r->kind_case = COMPILED__V1__VALUE_REF__KIND_VALUE;
      r->value = slot_of(e, a->syms[i].v);
    } else {
      r->kind_case = COMPILED__V1__VALUE_REF__KIND_INT;
      r->int_ = a->syms[i].i;
    }
    l->items[i] = r;
  }
  x->kind_case = COMPILED__V1__VALUE__KIND_SYM_INTS;
  x->sym_ints = l;
  return x;
}

/* A Value for a literal argument (no tensors, no named symbols). */
static pb_value *literal_value(emitter *e, const gc_arg *a) {
  pb_value *x = new_value(e);
  if (!x)
    return NULL;
  switch (a->kind) {
  case GC_ARG_NONE:
    x->kind_case = COMPILED__V1__VALUE__KIND_NONE;
    x->none = 1;
    break;
  case GC_ARG_INT:
    x->kind_case = COMPILED__V1__VALUE__KIND_INT;
    x->int_ = a->i;
    break;
  case GC_ARG_SYM_INT:
    x->kind_case = COMPILED__V1__VALUE__KIND_INT;
    x->int_ = a->sym.i;
    break;
  case GC_ARG_FLOAT:
    x->kind_case = COMPILED__V1__VALUE__KIND_FLOAT;
    x->float_ = a->f;
    break;
  case GC_ARG_SYM_FLOAT:
    x->kind_case = COMPILED__V1__VALUE__KIND_FLOAT;
    x->float_ = a->sym.f;
    break;
  case GC_ARG_BOOL:
    x->kind_case = COMPILED__V1__VALUE__KIND_BOOL;
    x->bool_ = a->i != 0;
    break;
  case GC_ARG_SYM_BOOL:
    x->kind_case = COMPILED__V1__VALUE__KIND_BOOL;
    x->bool_ = a->sym.b;
    break;
  case GC_ARG_STRING:
    x->kind_case = COMPILED__V1__VALUE__KIND_STRING;
    x->string = (char *)a->s;
    break;
  case GC_ARG_INTS:
  case GC_ARG_SYM_INTS: {
    for (int i = 0; a->kind == GC_ARG_SYM_INTS && i < a->n; i++)
      if (a->syms[i].v)
        return sym_list_value(e, x, a);
    Compiled__V1__IntList *l =
        NEW(e, Compiled__V1__IntList, compiled__v1__int_list__descriptor);
    if (!l)
      return NULL;
    l->n_items = (size_t)a->n;
    l->items = gc_arena_calloc(e->a, (size_t)a->n + 1, sizeof *l->items);
    if (!l->items) {
      e->failed = 1;
      return NULL;
    }
    for (int i = 0; i < a->n; i++) {
      l->items[i] = a->kind == GC_ARG_INTS ? a->ints[i] : a->syms[i].i;
    }
    x->kind_case = COMPILED__V1__VALUE__KIND_INTS;
    x->ints = l;
    break;
  }
  case GC_ARG_FLOATS: {
    Compiled__V1__FloatList *l =
        NEW(e, Compiled__V1__FloatList, compiled__v1__float_list__descriptor);
    if (!l)
      return NULL;
    l->n_items = (size_t)a->n;
    l->items = a->floats;
    x->kind_case = COMPILED__V1__VALUE__KIND_FLOATS;
    x->floats = l;
    break;
  }
  case GC_ARG_BOOLS: {
    Compiled__V1__BoolList *l =
        NEW(e, Compiled__V1__BoolList, compiled__v1__bool_list__descriptor);
    if (!l)
      return NULL;
    l->n_items = (size_t)a->n;
    l->items = gc_arena_calloc(e->a, (size_t)a->n + 1, sizeof *l->items);
    if (!l->items) {
      e->failed = 1;
      return NULL;
    }
    for (int i = 0; i < a->n; i++)
      l->items[i] = a->ints[i] != 0;
    x->kind_case = COMPILED__V1__VALUE__KIND_BOOLS;
    x->bools = l;
    break;
  }
  case GC_ARG_STRINGS: {
    Compiled__V1__StringList *l =
        NEW(e, Compiled__V1__StringList, compiled__v1__string_list__descriptor);
    if (!l)
      return NULL;
    l->n_items = (size_t)a->n;
    l->items = (char **)a->strs;
    x->kind_case = COMPILED__V1__VALUE__KIND_STRINGS;
    x->strings = l;
    break;
  }
  case GC_ARG_SCALAR_TYPE:
    x->kind_case = COMPILED__V1__VALUE__KIND_SCALAR_TYPE;
    x->scalar_type = (Compiled__V1__ScalarType)a->i;
    break;
  case GC_ARG_MEMORY_FORMAT:
    x->kind_case = COMPILED__V1__VALUE__KIND_MEMORY_FORMAT;
    x->memory_format = (Compiled__V1__MemoryFormat)a->i;
    break;
  case GC_ARG_LAYOUT:
    x->kind_case = COMPILED__V1__VALUE__KIND_LAYOUT;
    x->layout = (Compiled__V1__Layout)a->i;
    break;
  case GC_ARG_DEVICE: {
    Compiled__V1__Device *d =
        NEW(e, Compiled__V1__Device, compiled__v1__device__descriptor);
    if (!d)
      return NULL;
    d->type = (char *)a->dev.type;
    d->has_index = a->dev.index >= 0;
    d->index = a->dev.index >= 0 ? a->dev.index : 0;
    x->kind_case = COMPILED__V1__VALUE__KIND_DEVICE;
    x->device = d;
    break;
  }
  default:
    e->failed = 1;
    gc_errorf(e->err, GC_EINTERNAL, "emit: unexpected argument kind %s",
              gc_arg_kind_name(a->kind));
    return NULL;
  }
  return x;
}

/* A literal argument (or a reference, for the value kinds) as a value
 * index. */
static int arg_value(emitter *e, const gc_arg *a) {
  switch (a->kind) {
  case GC_ARG_TENSOR:
    return slot_of(e, a->v);
  case GC_ARG_TENSORS:
    return index_list(e, a, false);
  case GC_ARG_OPT_TENSORS:
    return index_list(e, a, true);
  case GC_ARG_SYM_INT:
  case GC_ARG_SYM_FLOAT:
  case GC_ARG_SYM_BOOL:
    if (a->sym.v)
      return slot_of(e, a->sym.v);
    break;
  default:
    break;
  }
  return add_value(e, literal_value(e, a));
}

/* The output slots of a node: a value per tensor, a list value for a
 * Tensor[] return, -1 for an unused non-tensor return. */
static int emit_outputs(emitter *e, const gc_node *n,
                        Compiled__V1__KernelCall *k) {
  k->n_outputs = (size_t)n->noutputs;
  k->outputs =
      gc_arena_calloc(e->a, (size_t)n->noutputs + 1, sizeof *k->outputs);
  if (!k->outputs) {
    e->failed = 1;
    return -1;
  }
  for (int o = 0; o < n->noutputs; o++) {
    const gc_arg *out = &n->outputs[o];
    int idx = -1;
    if (out->kind == GC_ARG_TENSOR) {
      idx = tensor_value(e, out->v);
    } else if (out->kind == GC_ARG_TENSORS) {
      for (int j = 0; j < out->n; j++)
        tensor_value(e, out->vals[j]);
      idx = index_list(e, out, false);
    } else if (out->kind != GC_ARG_NONE && out->sym.v) {
      idx = symbolic_value(e, out->sym.v);
    }
    k->outputs[o] = idx;
  }
  return 0;
}

static Compiled__V1__Instruction *emit_node(emitter *e, const gc_node *n) {
  Compiled__V1__KernelCall *k =
      NEW(e, Compiled__V1__KernelCall, compiled__v1__kernel_call__descriptor);
  Compiled__V1__Instruction *ins =
      NEW(e, Compiled__V1__Instruction, compiled__v1__instruction__descriptor);
  if (!k || !ins)
    return NULL;
  k->op = (int32_t)(n->op - e->g->ops);
  k->node = n->id;
  k->n_args = (size_t)n->nargs;
  k->args = gc_arena_calloc(e->a, (size_t)n->nargs + 1, sizeof *k->args);
  if (!k->args) {
    e->failed = 1;
    return NULL;
  }
  for (int i = 0; i < n->nargs; i++) {
    Compiled__V1__CallArgument *ca = NEW(
        e, Compiled__V1__CallArgument, compiled__v1__call_argument__descriptor);
    if (!ca)
      return NULL;
    ca->name = (char *)n->args[i].name;
    ca->keyword = n->args[i].keyword;
    ca->value = arg_value(e, &n->args[i].arg);
    k->args[i] = ca;
  }
  emit_outputs(e, n, k);
  ins->kind_case = COMPILED__V1__INSTRUCTION__KIND_KERNEL;
  ins->kernel = k;
  return ins;
}

static int emit_inputs(emitter *e, Compiled__V1__Program *p) {
  const gc_graph *g = e->g;
  p->n_inputs = (size_t)g->ninputs;
  p->inputs = gc_arena_calloc(e->a, (size_t)g->ninputs + 1, sizeof *p->inputs);
  if (!p->inputs) {
    e->failed = 1;
    return -1;
  }
  for (int i = 0; i < g->ninputs; i++) {
    const gc_input *in = &g->inputs[i];
    Compiled__V1__ProgramInput *pi = NEW(
        e, Compiled__V1__ProgramInput, compiled__v1__program_input__descriptor);
    if (!pi)
      return -1;
    pi->kind = (Compiled__V1__InputKind)in->kind;
    if (in->arg.kind == GC_ARG_TENSOR) {
      pi->value = tensor_value(e, in->arg.v);
    } else if (in->arg.kind >= GC_ARG_SYM_INT &&
               in->arg.kind <= GC_ARG_SYM_BOOLS && in->arg.sym.v) {
      pi->value = symbolic_value(e, in->arg.sym.v);
    } else {
      pi->value = arg_value(e, &in->arg);
      pi->specialized = 1;
    }
    p->inputs[i] = pi;
  }
  return 0;
}

static Compiled__V1__Operator **emit_operators(emitter *e, size_t *n) {
  const gc_graph *g = e->g;
  Compiled__V1__Operator **ops =
      gc_arena_calloc(e->a, (size_t)g->nops + 1, sizeof *ops);
  if (!ops) {
    e->failed = 1;
    return NULL;
  }
  for (int i = 0; i < g->nops; i++) {
    ops[i] = NEW(e, Compiled__V1__Operator, compiled__v1__operator__descriptor);
    if (!ops[i])
      return NULL;
    ops[i]->name = (char *)g->ops[i].name;
    ops[i]->schema = (char *)g->ops[i].text;
  }
  *n = (size_t)g->nops;
  return ops;
}

/* ---- the analysis: input and output metadata ---- */

/* True when an argument is a literal (no tensor, no named scalar). */
static bool is_constant(const gc_arg *a) {
  switch (a->kind) {
  case GC_ARG_TENSOR:
  case GC_ARG_TENSORS:
  case GC_ARG_OPT_TENSORS:
    return false;
  case GC_ARG_SYM_INT:
  case GC_ARG_SYM_FLOAT:
  case GC_ARG_SYM_BOOL:
    return a->sym.v == NULL;
  case GC_ARG_SYM_INTS:
  case GC_ARG_SYM_FLOATS:
  case GC_ARG_SYM_BOOLS:
    for (int i = 0; i < a->n; i++)
      if (a->syms[i].v)
        return false;
    return true;
  default:
    return true;
  }
}

static Compiled__V1__AsStrided *as_strided_msg(emitter *e,
                                               const gc_strided *st) {
  Compiled__V1__AsStrided *m =
      NEW(e, Compiled__V1__AsStrided, compiled__v1__as_strided__descriptor);
  if (!m)
    return NULL;
  m->n_size = m->n_stride = (size_t)st->rank;
  m->size = st->size;
  m->stride = st->stride;
  m->storage_offset = st->offset;
  return m;
}

static Compiled__V1__InputInfo *input_info(emitter *e,
                                           const gc_input_info *ii) {
  Compiled__V1__InputInfo *m =
      NEW(e, Compiled__V1__InputInfo, compiled__v1__input_info__descriptor);
  if (!m)
    return NULL;
  m->mutates_data = ii->mutates_data;
  m->mutates_metadata = ii->mutates_metadata;
  m->mutations_hidden_from_autograd = ii->hidden_from_autograd;
  m->mutations_under_no_grad_or_inference_mode = ii->under_no_grad;
  m->mutates_storage_metadata = ii->mutates_storage_metadata;
  m->requires_grad = ii->requires_grad;
  m->is_leaf = ii->is_leaf;
  m->mutation_type = (Compiled__V1__MutationType)ii->type;
  m->mutated_output = ii->mutated_output;
  if (ii->mutates_metadata)
    m->final_metadata = as_strided_msg(e, &ii->final_meta);
  return m;
}

/* A view step as replayable on the caller's tensor: the viewed argument is
 * -1, the others constants. False when another argument is a tensor (then
 * the runner uses as_strided). */
static bool view_step(emitter *e, const gc_view_step *st,
                      Compiled__V1__ViewStep **out) {
  const gc_node *n = st->node;
  Compiled__V1__ViewStep *m =
      NEW(e, Compiled__V1__ViewStep, compiled__v1__view_step__descriptor);
  if (!m)
    return false;
  m->op = (int32_t)(st->op - e->g->ops);
  m->item = st->item;
  m->n_args = (size_t)n->nargs;
  m->args = gc_arena_calloc(e->a, (size_t)n->nargs + 1, sizeof *m->args);
  if (!m->args) {
    e->failed = 1;
    return false;
  }
  for (int i = 0; i < n->nargs; i++) {
    const gc_arg *a = &n->args[i].arg;
    if (i != st->self_arg && !is_constant(a))
      return false;
    Compiled__V1__CallArgument *ca = NEW(
        e, Compiled__V1__CallArgument, compiled__v1__call_argument__descriptor);
    if (!ca)
      return false;
    ca->name = (char *)n->args[i].name;
    ca->keyword = n->args[i].keyword;
    ca->value = i == st->self_arg ? -1 : arg_value(e, a);
    m->args[i] = ca;
  }
  *out = m;
  return true;
}

static Compiled__V1__OutputInfo *output_info(emitter *e,
                                             const gc_output_info *oi) {
  Compiled__V1__OutputInfo *m =
      NEW(e, Compiled__V1__OutputInfo, compiled__v1__output_info__descriptor);
  if (!m)
    return NULL;
  m->output_type = (Compiled__V1__OutputType)oi->type;
  m->base_index = oi->base;
  m->requires_grad = oi->requires_grad;
  m->program_output = oi->program_output;
  m->multi_output_view = oi->multi_output_view;
  if (oi->type == GC_OUT_NON_ALIAS || oi->type == GC_OUT_IS_INPUT)
    return m;
  m->as_strided = as_strided_msg(e, &oi->strided);
  if (oi->has_chain) {
    m->view_chain =
        gc_arena_calloc(e->a, (size_t)oi->nchain + 1, sizeof *m->view_chain);
    bool ok = m->view_chain != NULL;
    for (int i = 0; ok && i < oi->nchain; i++)
      ok = view_step(e, &oi->chain[i], &m->view_chain[i]);
    m->has_view_chain = ok;
    m->n_view_chain = ok ? (size_t)oi->nchain : 0;
  }
  return m;
}

int gc_emit_program(const gc_functional *f, gc_arena *a,
                    Compiled__V1__Program **out, gc_error *err) {
  const gc_graph *g = f->graph;
  emitter e = {.a = a, .g = g, .err = err, .symbols = &f->symbols};
  e.slot = gc_arena_calloc(a, (size_t)g->nvalues + 1, sizeof *e.slot);
  Compiled__V1__Program *p =
      NEW(&e, Compiled__V1__Program, compiled__v1__program__descriptor);
  if (!e.slot || !p)
    return gc_errorf(err, GC_ENOMEM, "emit: out of memory");
  for (int i = 0; i < g->nvalues; i++)
    e.slot[i] = -1;
  p->operators = emit_operators(&e, &p->n_operators);
  emit_inputs(&e, p);
  p->instructions =
      gc_arena_calloc(a, (size_t)g->nnodes + 1, sizeof *p->instructions);
  if (!p->instructions)
    e.failed = 1;
  for (int i = 0; i < g->nnodes && !e.failed; i++)
    p->instructions[p->n_instructions++] =
        emit_node(&e, &g->nodes[f->order[i]]);
  p->outputs = gc_arena_calloc(a, (size_t)g->noutputs + 1, sizeof *p->outputs);
  if (!p->outputs)
    e.failed = 1;
  for (int o = 0; o < g->noutputs && !e.failed; o++) {
    Compiled__V1__ProgramOutput *po =
        NEW(&e, Compiled__V1__ProgramOutput,
            compiled__v1__program_output__descriptor);
    if (!po)
      break;
    po->value = arg_value(&e, &g->outputs[o]);
    p->outputs[p->n_outputs++] = po;
  }
  p->input_info =
      gc_arena_calloc(a, (size_t)f->ninputs + 1, sizeof *p->input_info);
  p->output_info =
      gc_arena_calloc(a, (size_t)f->noutputs + 1, sizeof *p->output_info);
  if (!p->input_info || !p->output_info)
    e.failed = 1;
  for (int i = 0; i < f->ninputs && !e.failed; i++)
    p->input_info[p->n_input_info++] = input_info(&e, &f->inputs[i]);
  for (int k = 0; k < f->noutputs && !e.failed; k++)
    p->output_info[p->n_output_info++] = output_info(&e, &f->outputs[k]);
  p->num_mutated_outputs = f->num_mutated_outputs;
  p->num_intermediate_bases = f->num_intermediate_bases;
  p->keep_input_mutations = f->keep_input_mutations;
  p->training = f->training;
  p->functional = f->functional;
  if (e.failed) {
    if (err && !err->code)
      gc_errorf(err, GC_ENOMEM, "emit: out of memory");
    return err ? err->code : GC_ENOMEM;
  }
  p->n_values = (size_t)e.nvalues;
  p->values = e.values;
  *out = p;
  return 0;
}

Compiled__V1__Value *gc_literal_value(gc_arena *a, const gc_arg *arg,
                                      gc_error *err) {
  emitter e = {.a = a, .err = err};
  pb_value *v = literal_value(&e, arg);
  if (!v && !err->code)
    gc_errorf(err, GC_ENOMEM, "emit: out of memory");
  return v;
}
