/*
 * graph.c: from GraphModule bytes to a resolved in-memory graph.
 *
 * Decoding runs in four steps, each refusing bad input with a message that
 * says where it is:
 *
 *   1. unpack     protobuf-c unpacks the bytes into the job's arena. The
 *                 message schema has no recursion, so unpacking cannot be
 *                 driven into deep recursion. The bytes are then checked
 *                 for strings that are not UTF-8 or hide a NUL (wire.h).
 *   2. tables     the operator table (every schema parsed) and the value side
 *                 tables: every name unique, every tensor's metadata sound
 *                 (known dtype, sizes and strides non-negative, element count
 *                 and byte extent within int64).
 *   3. defs       inputs, then node outputs, define values; a value defined
 *                 twice, a definition of an unknown name, or a table entry
 *                 nobody defines is an error.
 *   4. args       every argument is converted to a gc_arg with its value
 *                 references resolved to gc_value pointers (graph_arg.c).
 *
 * validate.c then checks what needs the whole graph: arguments against
 * operator schemas, topological order and cycles, storage groups.
 *
 * Every count and string length is checked against gc_limits before it is
 * trusted, so a hostile graph is refused instead of exhausting memory.
 */
#include "compiler/graph.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "compiler/graph_internal.h"
#include "compiler/strmap.h"
#include "compiler/symexpr.h"
#include "compiler/torchops.h"
#include "compiler/wire.h"

typedef Compiled__V1__Argument PbArg;
typedef Compiled__V1__TensorMeta PbMeta;
typedef Compiled__V1__SymInt PbSymInt;

void gc_limits_default(gc_limits *l) {
  l->max_bytes = (size_t)256 << 20;
  l->max_memory = (size_t)1 << 30;
  l->max_nodes = 1000000;
  l->max_values = 4000000;
  l->max_rank = 64;
  l->max_list = 1000000;
  l->max_string = (size_t)1 << 20;
  l->max_nesting = 64;
  l->max_expr_nodes = 10000;
}

/* Device types torch knows; anything else is refused. */
static const char *const device_types[] = {
    "cpu",    "cuda",   "meta",   "mps",   "xpu",  "hip", "xla",
    "lazy",   "vulkan", "ipu",    "hpu",   "mtia", "ort", "privateuseone",
    "mkldnn", "opengl", "opencl", "ideep", "fpga", "ve"};

bool gc__device_type_known(const char *type) {
  for (size_t i = 0; i < sizeof device_types / sizeof device_types[0]; i++)
    if (strcmp(type, device_types[i]) == 0)
      return true;
  return false;
}

const char *gc_node_describe(const gc_graph *g, int node, char *buf,
                             size_t size) {
  if (node < 0 || node >= g->nnodes) {
    snprintf(buf, size, "node %d", node);
    return buf;
  }
  const gc_node *n = &g->nodes[node];
  if (n->label)
    snprintf(buf, size, "node %d (%%%s = %s)", node, n->label,
             n->target ? n->target : "?");
  else
    snprintf(buf, size, "node %d (%s)", node, n->target ? n->target : "?");
  return buf;
}

bool gc_meta_contiguous(const gc_tensor_meta *m) {
  int64_t expect = 1;
  for (int i = m->rank - 1; i >= 0; i--) {
    if (m->sizes[i].expr || m->strides[i].expr)
      return false;
    if (m->sizes[i].v != 1 && m->strides[i].v != expect)
      return false;
    expect *= m->sizes[i].v;
  }
  return true;
}

/* ---- the decoder and its error reporting ---- */

/* Formats "<where>: [argument 'x': ]<msg>" into the error. `where` is the
 * current node's description, or the context string outside nodes. */
int gc__fail(gc_decoder *d, int code, const char *arg, const char *fmt, ...) {
  char where[256], msg[768];
  if (d->node >= 0)
    gc_node_describe(d->g, d->node, where, sizeof where);
  else
    snprintf(where, sizeof where, "%s", d->where ? d->where : "graph");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (arg && *arg)
    return gc_error_at(d->err, code, d->node, arg, "%s: argument '%s': %s",
                       where, arg, msg);
  return gc_error_at(d->err, code, d->node, arg, "%s: %s", where, msg);
}

int gc__nomem(gc_decoder *d) {
  return gc_errorf(d->err, GC_ENOMEM,
                   "out of memory decoding the graph (arena limit %zu bytes)",
                   d->lim->max_memory);
}

/* Checks a string from the message against the length limit. */
int gc__check_str(gc_decoder *d, const char *s, const char *what) {
  if (!s)
    return 0;
  size_t n = strnlen(s, d->lim->max_string + 1);
  if (n > d->lim->max_string)
    return gc__fail(d, GC_ELIMIT, NULL,
                    "%s is longer than the string limit of %zu bytes", what,
                    d->lim->max_string);
  return 0;
}

int gc__check_count(gc_decoder *d, size_t n, int64_t limit, const char *what,
                    const char *arg) {
  if ((int64_t)n > limit)
    return gc__fail(d, GC_ELIMIT, arg, "%s has %zu elements; the limit is %lld",
                    what, n, (long long)limit);
  return 0;
}

/* ---- step 2: operator table ---- */

/* For a client of the torch release whose operator table the compiler
 * carries, an operator of that table must come with torch's schema: a
 * schema is what tells the compiler what an operator writes and aliases, so
 * a wrong one (relu declared Tensor(a!), add_ without its annotation) would
 * be trusted and its artifact cached. Compared after normalizing (parsed and
 * printed back, as torch prints it), so blanks do not matter. Operators the
 * table lacks, and clients of other releases, keep their own schemas; the
 * schema text is part of the cache key (key.c), so a wrong one cannot reach
 * another client's graphs. */
static int check_known_schema(gc_decoder *d, const gc_op *op) {
  if (!gc_torch_table_covers(d->g->torch_version))
    return 0;
  const char *known = gc_torch_schema(op->name);
  if (!known)
    return 0;
  size_t n = gc_schema_format(op->schema, NULL, 0);
  char *sent = gc_arena_alloc(d->a, n + 1);
  if (!sent)
    return gc__nomem(d);
  gc_schema_format(op->schema, sent, n + 1);
  if (strcmp(sent, known) == 0)
    return 0;
  return gc__fail(d, GC_EINVAL, NULL,
                  "operator '%.120s': the schema sent, '%.280s', is not torch "
                  "%s's, '%.280s' (torch_version '%.40s')",
                  op->name, sent, GC_TORCH_TABLE_VERSION, known,
                  d->g->torch_version);
}

static int decode_operators(gc_decoder *d, const Compiled__V1__GraphModule *m) {
  gc_graph *g = d->g;
  if (gc__check_count(d, m->n_operators, d->lim->max_nodes,
                      "the operator table", NULL))
    return d->err->code;
  g->nops = (int)m->n_operators;
  g->ops = gc_arena_calloc(d->a, m->n_operators, sizeof *g->ops);
  if (m->n_operators && !g->ops)
    return gc__nomem(d);
  if (gc_strmap_init(&d->ops, d->a, m->n_operators))
    return gc__nomem(d);
  for (size_t i = 0; i < m->n_operators; i++) {
    const Compiled__V1__Operator *pm = m->operators[i];
    char ctx[96];
    snprintf(ctx, sizeof ctx, "operators[%zu]", i);
    d->where = ctx;
    if (gc__check_str(d, pm->name, "the operator name") ||
        gc__check_str(d, pm->schema, "the schema string"))
      return d->err->code;
    gc_op *op = &g->ops[i];
    op->name = pm->name;
    op->text = pm->schema;
    if (!*pm->name)
      return gc__fail(d, GC_EINVAL, NULL, "operator has no name");
    gc_error serr;
    gc_error_clear(&serr);
    int rc = gc_schema_parse(d->a, pm->schema, &op->schema, &serr);
    if (rc == GC_ENOMEM)
      return gc__nomem(d);
    if (rc)
      return gc__fail(d, GC_EINVAL, NULL, "operator '%.200s': bad schema: %s",
                      pm->name, serr.msg);
    if (strcmp(op->schema->qualified, pm->name) != 0)
      return gc__fail(d, GC_EINVAL, NULL,
                      "operator '%.200s' has the schema of '%.200s'", pm->name,
                      op->schema->qualified);
    if (check_known_schema(d, op))
      return d->err->code;
    void *old;
    int put = gc_strmap_put(&d->ops, op->name, op, &old);
    if (put < 0)
      return gc__nomem(d);
    if (put == 1)
      return gc__fail(d, GC_EINVAL, NULL,
                      "operator '%.200s' appears twice in the operator table "
                      "(operators[%d] and operators[%zu])",
                      pm->name, (int)((gc_op *)old - g->ops), i);
  }
  d->where = NULL;
  return 0;
}

/* ---- step 2: value side tables ---- */

/* Parses a symbolic expression within the limits into *tree. `what` names
 * the value for messages ("size 0", "value"). */
static int parse_expr(gc_decoder *d, const char *text, const char *what,
                      const gc_symexpr **tree) {
  if (gc__check_str(d, text, what))
    return d->err->code;
  gc_symexpr_limits sl = {.max_depth = d->lim->max_nesting,
                          .max_nodes = d->lim->max_expr_nodes};
  gc_symexpr *e;
  gc_error serr;
  gc_error_clear(&serr);
  int rc = gc_symexpr_parse(d->a, text, &sl, &e, &serr);
  if (rc == GC_ENOMEM)
    return gc__nomem(d);
  if (rc)
    return gc__fail(d, rc, NULL, "%s: %s", what, serr.msg);
  *tree = e;
  return 0;
}

static int decode_symint(gc_decoder *d, const PbSymInt *s, gc_symint *out,
                         const char *what) {
  if (!s)
    return gc__fail(d, GC_EINVAL, NULL, "%s is missing", what);
  switch (s->kind_case) {
  case COMPILED__V1__SYM_INT__KIND_AS_INT:
    out->v = s->as_int;
    out->expr = NULL;
    out->tree = NULL;
    out->has_hint = false;
    return 0;
  case COMPILED__V1__SYM_INT__KIND_AS_EXPR: {
    const Compiled__V1__SymExpr *e = s->as_expr;
    if (parse_expr(d, e->expr, what, &out->tree))
      return d->err->code;
    if (out->tree->kind == GC_SX_INT) {
      /* "8" (or "(8)") sent as an expression is the int 8: the same graph,
       * the same key, static code (issue 38) */
      out->v = out->tree->i;
      out->expr = NULL;
      out->tree = NULL;
      out->has_hint = false;
      return 0;
    }
    out->expr = e->expr;
    out->has_hint = e->has_hint;
    out->v = e->has_hint ? e->hint : 0;
    return 0;
  }
  default:
    return gc__fail(d, GC_EINVAL, NULL,
                    "%s has neither a value nor an expression", what);
  }
}

/* Sizes, strides, offset: non-negative; element count and byte extent must
 * fit in int64 (checked on concrete values and on hints). */
static int check_extent(gc_decoder *d, const gc_tensor_meta *t) {
  int64_t numel = 1, extent = 0;
  bool overflow = false;
  for (int i = 0; i < t->rank; i++) {
    const gc_symint *sz = &t->sizes[i], *st = &t->strides[i];
    if (sz->v < 0 && (!sz->expr || sz->has_hint))
      return gc__fail(d, GC_EINVAL, NULL, "size %d is negative (%lld)", i,
                      (long long)sz->v);
    if (st->v < 0 && (!st->expr || st->has_hint))
      return gc__fail(d, GC_EINVAL, NULL, "stride %d is negative (%lld)", i,
                      (long long)st->v);
    int64_t span;
    overflow |= __builtin_mul_overflow(numel, sz->v, &numel);
    if (sz->v > 0) {
      overflow |= __builtin_mul_overflow(sz->v - 1, st->v, &span);
      overflow |= __builtin_add_overflow(extent, span, &extent);
    }
  }
  if (t->offset.v < 0 && (!t->offset.expr || t->offset.has_hint))
    return gc__fail(d, GC_EINVAL, NULL, "storage offset is negative (%lld)",
                    (long long)t->offset.v);
  if (overflow)
    return gc__fail(d, GC_EINVAL, NULL, "element count overflows int64");
  int64_t bytes;
  if (numel > 0 && (__builtin_add_overflow(extent, t->offset.v, &extent) ||
                    __builtin_add_overflow(extent, 1, &extent) ||
                    __builtin_mul_overflow(
                        extent, (int64_t)gc_dtype_size(t->dtype), &bytes)))
    return gc__fail(d, GC_EINVAL, NULL,
                    "byte size of the storage it spans overflows int64");
  return 0;
}

int gc__decode_device(gc_decoder *d, const Compiled__V1__Device *pm,
                      gc_device *out, const char *arg) {
  if (!pm)
    return gc__fail(d, GC_EINVAL, arg, "device is missing");
  if (gc__check_str(d, pm->type, "device type"))
    return d->err->code;
  if (!gc__device_type_known(pm->type))
    return gc__fail(d, GC_EINVAL, arg, "unknown device type '%.64s'", pm->type);
  if (pm->has_index && pm->index < 0)
    return gc__fail(d, GC_EINVAL, arg, "device index %d is negative",
                    (int)pm->index);
  out->type = pm->type;
  out->index = pm->has_index ? pm->index : -1;
  return 0;
}

static int decode_meta(gc_decoder *d, const PbMeta *pm, gc_tensor_meta *t) {
  if (!pm)
    return gc__fail(d, GC_EINVAL, NULL, "tensor has no metadata");
  t->dtype = (gc_dtype)pm->dtype;
  if (!gc_dtype_size(t->dtype))
    return gc__fail(d, GC_EINVAL, NULL, "unknown dtype %d", (int)pm->dtype);
  if (pm->n_sizes > (size_t)d->lim->max_rank)
    return gc__fail(d, GC_ELIMIT, NULL,
                    "rank %zu is over the limit of %d dimensions", pm->n_sizes,
                    d->lim->max_rank);
  if (pm->n_strides != pm->n_sizes)
    return gc__fail(d, GC_EINVAL, NULL, "has %zu sizes but %zu strides",
                    pm->n_sizes, pm->n_strides);
  t->rank = (int)pm->n_sizes;
  t->sizes = gc_arena_calloc(d->a, pm->n_sizes + 1, sizeof *t->sizes);
  t->strides = gc_arena_calloc(d->a, pm->n_sizes + 1, sizeof *t->strides);
  if (!t->sizes || !t->strides)
    return gc__nomem(d);
  for (int i = 0; i < t->rank; i++) {
    char what[48];
    snprintf(what, sizeof what, "size %d", i);
    if (decode_symint(d, pm->sizes[i], &t->sizes[i], what))
      return d->err->code;
    snprintf(what, sizeof what, "stride %d", i);
    if (decode_symint(d, pm->strides[i], &t->strides[i], what))
      return d->err->code;
  }
  if (pm->storage_offset) {
    if (decode_symint(d, pm->storage_offset, &t->offset, "storage offset"))
      return d->err->code;
  }
  if (gc__decode_device(d, pm->device, &t->device, NULL))
    return d->err->code;
  t->requires_grad = pm->requires_grad;
  t->layout = pm->layout == 0 ? GC_LAYOUT_STRIDED : (gc_layout)pm->layout;
  if (t->layout < GC_LAYOUT_SPARSE_COO || t->layout > GC_LAYOUT_STRIDED)
    return gc__fail(d, GC_EINVAL, NULL, "unknown layout %d", (int)pm->layout);
  return check_extent(d, t);
}

static const char *kind_table(gc_value_kind k) {
  switch (k) {
  case GC_VALUE_TENSOR:
    return "tensor_values";
  case GC_VALUE_SYM_INT:
    return "sym_int_values";
  case GC_VALUE_SYM_FLOAT:
    return "sym_float_values";
  case GC_VALUE_SYM_BOOL:
    return "sym_bool_values";
  }
  return "?";
}

/* Allocates value `g->values[idx]` named `name` of kind `k` and enters it in
 * the name map. `ti` is its index in its table, for messages. */
static gc_value *new_value(gc_decoder *d, const char *name, gc_value_kind k,
                           size_t ti) {
  char ctx[96];
  snprintf(ctx, sizeof ctx, "%s[%zu]", kind_table(k), ti);
  d->where = gc_arena_strdup(d->a, ctx);
  if (!d->where) {
    gc__nomem(d);
    return NULL;
  }
  if (gc__check_str(d, name, "the value name"))
    return NULL;
  if (!*name) {
    gc__fail(d, GC_EINVAL, NULL, "value has an empty name");
    return NULL;
  }
  gc_value *v = gc_arena_zalloc(d->a, sizeof *v);
  if (!v) {
    gc__nomem(d);
    return NULL;
  }
  v->name = name;
  v->kind = k;
  v->id = d->g->nvalues;
  v->def_node = GC__UNDEFINED;
  v->def_item = -1;
  void *old;
  int put = gc_strmap_put(&d->values, name, v, &old);
  if (put < 0) {
    gc__nomem(d);
    return NULL;
  }
  if (put == 1) {
    gc__fail(d, GC_EINVAL, NULL,
             "duplicate value name '%.200s' (already in %s)", name,
             kind_table(((gc_value *)old)->kind));
    return NULL;
  }
  d->g->values[d->g->nvalues++] = v;
  return v;
}

static int decode_values(gc_decoder *d, const Compiled__V1__Graph *pg) {
  gc_graph *g = d->g;
  size_t total = pg->n_tensor_values + pg->n_sym_int_values +
                 pg->n_sym_float_values + pg->n_sym_bool_values;
  if (gc__check_count(d, total, d->lim->max_values, "the value tables", NULL))
    return d->err->code;
  g->values = gc_arena_calloc(d->a, total + 1, sizeof *g->values);
  if (!g->values || gc_strmap_init(&d->values, d->a, total))
    return gc__nomem(d);
  for (size_t i = 0; i < pg->n_tensor_values; i++) {
    const Compiled__V1__TensorValue *tv = pg->tensor_values[i];
    gc_value *v = new_value(d, tv->name, GC_VALUE_TENSOR, i);
    if (!v)
      return d->err->code;
    d->where =
        gc_arena_printf(d->a, "tensor_values[%zu] '%.200s'", i, tv->name);
    if (!d->where)
      return gc__nomem(d);
    if (decode_meta(d, tv->meta, &v->meta))
      return d->err->code;
  }
  for (size_t i = 0; i < pg->n_sym_int_values; i++) {
    const Compiled__V1__SymIntValue *sv = pg->sym_int_values[i];
    gc_value *v = new_value(d, sv->name, GC_VALUE_SYM_INT, i);
    if (!v || decode_symint(d, sv->value, &v->sym, "value"))
      return d->err->code;
  }
  for (size_t i = 0; i < pg->n_sym_float_values; i++) {
    const Compiled__V1__SymFloatValue *sv = pg->sym_float_values[i];
    gc_value *v = new_value(d, sv->name, GC_VALUE_SYM_FLOAT, i);
    if (!v)
      return d->err->code;
    if (sv->value &&
        sv->value->kind_case == COMPILED__V1__SYM_FLOAT__KIND_AS_EXPR) {
      v->sym.expr = sv->value->as_expr->expr;
      if (parse_expr(d, v->sym.expr, "expression", &v->sym.tree))
        return d->err->code;
    }
  }
  for (size_t i = 0; i < pg->n_sym_bool_values; i++) {
    const Compiled__V1__SymBoolValue *sv = pg->sym_bool_values[i];
    gc_value *v = new_value(d, sv->name, GC_VALUE_SYM_BOOL, i);
    if (!v)
      return d->err->code;
    if (sv->value &&
        sv->value->kind_case == COMPILED__V1__SYM_BOOL__KIND_AS_EXPR) {
      v->sym.expr = sv->value->as_expr->expr;
      if (parse_expr(d, v->sym.expr, "expression", &v->sym.tree))
        return d->err->code;
    }
  }
  d->where = NULL;
  return 0;
}

/* ---- steps 3 and 4: definitions and references ---- */

/* Records that `v` is defined by `node` (-1: graph input) at output `slot`,
 * list item `item`. */
static int define(gc_decoder *d, gc_value *v, int node, int slot, int item,
                  const char *arg) {
  if (v->def_node != GC__UNDEFINED) {
    char prev[160];
    if (v->def_node < 0)
      snprintf(prev, sizeof prev, "input %d", v->def_slot);
    else
      gc_node_describe(d->g, v->def_node, prev, sizeof prev);
    return gc__fail(d, GC_EINVAL, arg,
                    "value '%.200s' is defined twice (also by %s)", v->name,
                    prev);
  }
  v->def_node = node;
  v->def_slot = slot;
  v->def_item = item;
  return 0;
}

static int decode_inputs(gc_decoder *d, const Compiled__V1__Graph *pg) {
  gc_graph *g = d->g;
  if (gc__check_count(d, pg->n_inputs, d->lim->max_values, "the input list",
                      NULL))
    return d->err->code;
  g->ninputs = (int)pg->n_inputs;
  g->inputs = gc_arena_calloc(d->a, pg->n_inputs + 1, sizeof *g->inputs);
  if (!g->inputs)
    return gc__nomem(d);
  for (size_t i = 0; i < pg->n_inputs; i++) {
    const Compiled__V1__InputSpec *ps = pg->inputs[i];
    gc_input *in = &g->inputs[i];
    char ctx[48];
    snprintf(ctx, sizeof ctx, "input %zu", i);
    d->where = ctx;
    if (gc__check_str(d, ps->target, "the input target"))
      return d->err->code;
    in->kind = (gc_input_kind)ps->kind;
    in->target = ps->target;
    in->persistent = ps->persistent;
    in->storage_group = -1;
    if (in->kind < GC_INPUT_USER || in->kind > GC_INPUT_CONSTANT)
      return gc__fail(d, GC_EINVAL, NULL, "unknown input kind %d",
                      (int)ps->kind);
    if (gc__decode_arg(d, ps->arg, &in->arg, NULL))
      return d->err->code;
    gc_value *v = NULL;
    switch (in->arg.kind) {
    case GC_ARG_TENSOR:
      v = in->arg.v;
      break;
    case GC_ARG_SYM_INT:
    case GC_ARG_SYM_FLOAT:
    case GC_ARG_SYM_BOOL:
      v = in->arg.sym.v;
      break;
    case GC_ARG_NONE:
    case GC_ARG_INT:
    case GC_ARG_FLOAT:
    case GC_ARG_BOOL:
    case GC_ARG_STRING:
      break;
    default:
      return gc__fail(d, GC_EINVAL, NULL,
                      "an input must be a tensor, a symbolic scalar or a "
                      "literal, not %s",
                      gc_arg_kind_name(in->arg.kind));
    }
    if (in->kind != GC_INPUT_USER && in->arg.kind != GC_ARG_TENSOR)
      return gc__fail(d, GC_EINVAL, NULL,
                      "a parameter, buffer or constant input must be a tensor");
    if (v && define(d, v, -1, (int)i, -1, NULL))
      return d->err->code;
  }
  d->where = NULL;
  return 0;
}

static int decode_storage_groups(gc_decoder *d, const Compiled__V1__Graph *pg) {
  gc_graph *g = d->g;
  if (gc__check_count(d, pg->n_storage_groups, d->lim->max_values,
                      "the storage group list", NULL))
    return d->err->code;
  g->ngroups = (int)pg->n_storage_groups;
  for (size_t gi = 0; gi < pg->n_storage_groups; gi++) {
    const Compiled__V1__StorageGroup *sg = pg->storage_groups[gi];
    char ctx[40];
    snprintf(ctx, sizeof ctx, "storage_groups[%zu]", gi);
    d->where = ctx;
    if (sg->n_inputs < 2)
      return gc__fail(d, GC_EINVAL, NULL,
                      "a storage group needs at least two inputs, it has %zu",
                      sg->n_inputs);
    if (sg->n_inputs > (size_t)g->ninputs) /* before reading them all */
      return gc__fail(d, GC_EINVAL, NULL,
                      "lists %zu inputs but the graph has %d", sg->n_inputs,
                      g->ninputs);
    const gc_device *dev = NULL;
    for (size_t k = 0; k < sg->n_inputs; k++) {
      int idx = sg->inputs[k];
      if (idx < 0 || idx >= g->ninputs)
        return gc__fail(d, GC_EINVAL, NULL,
                        "input index %d is out of range (the graph has %d "
                        "inputs)",
                        idx, g->ninputs);
      gc_input *in = &g->inputs[idx];
      if (in->arg.kind != GC_ARG_TENSOR)
        return gc__fail(d, GC_EINVAL, NULL, "input %d is not a tensor", idx);
      if (in->storage_group == (int)gi)
        return gc__fail(d, GC_EINVAL, NULL, "input %d is listed twice", idx);
      if (in->storage_group >= 0)
        return gc__fail(d, GC_EINVAL, NULL,
                        "input %d is also in storage_groups[%d]", idx,
                        in->storage_group);
      const gc_device *idev = &in->arg.v->meta.device;
      if (dev && strcmp(dev->type, idev->type) != 0)
        return gc__fail(d, GC_EINVAL, NULL,
                        "inputs on different devices (%s, %s) cannot share "
                        "storage",
                        dev->type, idev->type);
      dev = idev;
      in->storage_group = (int)gi;
    }
  }
  d->where = NULL;
  return 0;
}

/* The name of a node's first named output, for messages; NULL if none. */
static const char *output_label(const Compiled__V1__Node *pn) {
  for (size_t k = 0; k < pn->n_outputs; k++) {
    const PbArg *o = pn->outputs[k];
    if (!o)
      continue;
    switch (o->kind_case) {
    case COMPILED__V1__ARGUMENT__KIND_AS_TENSOR:
      return o->as_tensor->name;
    case COMPILED__V1__ARGUMENT__KIND_AS_TENSORS:
      if (o->as_tensors->n_items)
        return o->as_tensors->items[0]->name;
      break;
    case COMPILED__V1__ARGUMENT__KIND_AS_SYM_INT:
      if (o->as_sym_int->kind_case ==
          COMPILED__V1__SYM_INT_ARGUMENT__KIND_AS_NAME)
        return o->as_sym_int->as_name;
      break;
    default:
      break;
    }
  }
  return NULL;
}

/* Stack trace, module path and extra metadata: strings within the limit. */
static int decode_node_metadata(gc_decoder *d, const Compiled__V1__Node *pn,
                                gc_node *n) {
  n->stack_trace = "";
  n->module_path = "";
  if (!pn->metadata)
    return 0;
  const Compiled__V1__NodeMetadata *md = pn->metadata;
  if (gc__check_str(d, md->stack_trace, "the stack trace") ||
      gc__check_str(d, md->module_path, "the module path"))
    return d->err->code;
  if (gc__check_count(d, md->n_extra, d->lim->max_list, "the metadata list",
                      NULL))
    return d->err->code;
  for (size_t k = 0; k < md->n_extra; k++)
    if (gc__check_str(d, md->extra[k]->key, "a metadata key") ||
        gc__check_str(d, md->extra[k]->value, "a metadata value"))
      return d->err->code;
  n->stack_trace = md->stack_trace;
  n->module_path = md->module_path;
  return 0;
}

/* The node's operator from the table, and as many outputs as it returns:
 * checked before the outputs are read, so that an extra output is reported
 * as one rather than as whatever its name refers to. */
static int resolve_target(gc_decoder *d, const Compiled__V1__Node *pn,
                          gc_node *n) {
  if (!*pn->target)
    return gc__fail(d, GC_EINVAL, NULL, "node has no target");
  n->op = gc_strmap_get(&d->ops, pn->target);
  if (!n->op)
    return gc__fail(d, GC_EINVAL, NULL,
                    "operator '%.200s' is missing from the operator table",
                    pn->target);
  const gc_schema *s = n->op->schema;
  if (!s->varret && pn->n_outputs != (size_t)s->nrets)
    return gc__fail(d, GC_EINVAL, NULL, "has %zu outputs but %s returns %d",
                    pn->n_outputs, s->qualified, s->nrets);
  return 0;
}

/* Defines the values named by node `ni`'s outputs and sets its label. */
static int define_outputs(gc_decoder *d, const Compiled__V1__Node *pn, int ni) {
  gc_node *n = &d->g->nodes[ni];
  if (gc__check_count(d, pn->n_outputs, d->lim->max_list, "the output list",
                      NULL))
    return d->err->code;
  n->noutputs = (int)pn->n_outputs;
  n->outputs = gc_arena_calloc(d->a, pn->n_outputs + 1, sizeof *n->outputs);
  if (!n->outputs)
    return gc__nomem(d);
  for (size_t k = 0; k < pn->n_outputs; k++) {
    char arg[48];
    snprintf(arg, sizeof arg, "output %zu", k);
    gc_arg *o = &n->outputs[k];
    if (gc__decode_arg(d, pn->outputs[k], o, arg))
      return d->err->code;
    switch (o->kind) {
    case GC_ARG_TENSOR:
      if (define(d, o->v, ni, (int)k, -1, arg))
        return d->err->code;
      break;
    case GC_ARG_TENSORS:
      for (int j = 0; j < o->n; j++)
        if (define(d, o->vals[j], ni, (int)k, j, arg))
          return d->err->code;
      break;
    case GC_ARG_SYM_INT:
    case GC_ARG_SYM_FLOAT:
    case GC_ARG_SYM_BOOL:
      if (!o->sym.v)
        return gc__fail(d, GC_EINVAL, arg, "a node output must be named");
      if (define(d, o->sym.v, ni, (int)k, -1, arg))
        return d->err->code;
      break;
    case GC_ARG_NONE:
      break;
    default:
      return gc__fail(d, GC_EINVAL, arg,
                      "a node output must be a tensor, a tensor list, a "
                      "symbolic scalar or none, not %s",
                      gc_arg_kind_name(o->kind));
    }
  }
  return 0;
}

static int decode_nodes(gc_decoder *d, const Compiled__V1__Graph *pg) {
  gc_graph *g = d->g;
  if (gc__check_count(d, pg->n_nodes, d->lim->max_nodes,
                      "the graph's node list", NULL))
    return d->err->code;
  g->nnodes = (int)pg->n_nodes;
  g->nodes = gc_arena_calloc(d->a, pg->n_nodes + 1, sizeof *g->nodes);
  if (!g->nodes)
    return gc__nomem(d);
  /* Targets and outputs first: every definition is known before any use. */
  for (int i = 0; i < g->nnodes; i++) {
    const Compiled__V1__Node *pn = pg->nodes[i];
    gc_node *n = &g->nodes[i];
    n->id = i;
    d->node = i;
    if (gc__check_str(d, pn->target, "the target"))
      return d->err->code;
    n->target = pn->target;
    n->label = output_label(pn);
    if (decode_node_metadata(d, pn, n) || resolve_target(d, pn, n) ||
        define_outputs(d, pn, i))
      return d->err->code;
  }
  for (int i = 0; i < g->nnodes; i++) {
    const Compiled__V1__Node *pn = pg->nodes[i];
    gc_node *n = &g->nodes[i];
    d->node = i;
    if (gc__check_count(d, pn->n_inputs, d->lim->max_list, "the argument list",
                        NULL))
      return d->err->code;
    n->nargs = (int)pn->n_inputs;
    n->args = gc_arena_calloc(d->a, pn->n_inputs + 1, sizeof *n->args);
    if (!n->args)
      return gc__nomem(d);
    for (size_t k = 0; k < pn->n_inputs; k++) {
      const Compiled__V1__NamedArgument *na = pn->inputs[k];
      gc_named_arg *a = &n->args[k];
      if (gc__check_str(d, na->name, "an argument name"))
        return d->err->code;
      a->name = na->name;
      a->keyword =
          na->kind != COMPILED__V1__ARGUMENT_KIND__ARGUMENT_KIND_POSITIONAL;
      a->param = -1;
      if (!*na->name)
        return gc__fail(d, GC_EINVAL, NULL, "argument %zu has no name", k);
      if (na->kind > COMPILED__V1__ARGUMENT_KIND__ARGUMENT_KIND_KEYWORD)
        return gc__fail(d, GC_EINVAL, na->name, "unknown argument kind %d",
                        (int)na->kind);
      if (gc__decode_arg(d, na->arg, &a->arg, na->name))
        return d->err->code;
    }
  }
  d->node = -1;
  return 0;
}

static int decode_graph_outputs(gc_decoder *d, const Compiled__V1__Graph *pg) {
  gc_graph *g = d->g;
  if (pg->n_outputs == 0) {
    d->where = "graph";
    return gc__fail(d, GC_EINVAL, NULL,
                    "has no outputs; a Python function always returns "
                    "something, and `return None` is one as_none output");
  }
  if (gc__check_count(d, pg->n_outputs, d->lim->max_list,
                      "the graph output list", NULL))
    return d->err->code;
  g->noutputs = (int)pg->n_outputs;
  g->outputs = gc_arena_calloc(d->a, pg->n_outputs + 1, sizeof *g->outputs);
  if (!g->outputs)
    return gc__nomem(d);
  for (size_t i = 0; i < pg->n_outputs; i++) {
    char ctx[48];
    snprintf(ctx, sizeof ctx, "graph output %zu", i);
    d->where = ctx;
    if (gc__decode_arg(d, pg->outputs[i], &g->outputs[i], NULL))
      return d->err->code;
  }
  d->where = NULL;
  return 0;
}

/* Every value in a side table must be defined by an input or a node. */
static int check_all_defined(gc_decoder *d) {
  const gc_graph *g = d->g;
  for (int i = 0; i < g->nvalues; i++) {
    const gc_value *v = g->values[i];
    if (v->def_node == GC__UNDEFINED) {
      d->where = kind_table(v->kind);
      return gc__fail(d, GC_EINVAL, NULL,
                      "value '%.200s' is not defined by any input or node",
                      v->name);
    }
  }
  return 0;
}

int gc_graph_from_message(gc_arena *a, const Compiled__V1__GraphModule *m,
                          const gc_limits *lim, gc_graph **out, gc_error *err) {
  gc_limits deflim;
  if (!lim) {
    gc_limits_default(&deflim);
    lim = &deflim;
  }
  gc_error_clear(err);
  gc_error scratch;
  if (!err)
    err = &scratch;
  gc_error_clear(err);
  gc_graph *g = gc_arena_zalloc(a, sizeof *g);
  if (!g)
    return gc_errorf(err, GC_ENOMEM, "out of memory");
  gc_decoder d = {.a = a, .lim = lim, .err = err, .g = g, .node = -1};
  g->arena = a;
  if (!m->schema_version)
    return gc_errorf(err, GC_EVERSION,
                     "graph has no schema_version (this build reads %d.x)",
                     GC_SCHEMA_MAJOR);
  g->schema_major = m->schema_version->major;
  g->schema_minor = m->schema_version->minor;
  if (g->schema_major != GC_SCHEMA_MAJOR)
    return gc_errorf(err, GC_EVERSION,
                     "graph schema version %d.%d is not supported (this build "
                     "reads %d.x)",
                     g->schema_major, g->schema_minor, GC_SCHEMA_MAJOR);
  if (!m->graph)
    return gc_errorf(err, GC_EINVAL, "GraphModule has no graph");
  d.where = "graph";
  if (gc__check_str(&d, m->torch_version, "torch_version") ||
      gc__check_str(&d, m->producer, "producer"))
    return err->code;
  g->torch_version = m->torch_version;
  const Compiled__V1__Graph *pg = m->graph;
  if (gc__check_count(&d, pg->n_nodes, lim->max_nodes, "the graph's node list",
                      NULL))
    return err->code;
  if (decode_operators(&d, m) || decode_values(&d, pg) ||
      decode_inputs(&d, pg) || decode_storage_groups(&d, pg) ||
      decode_nodes(&d, pg) || decode_graph_outputs(&d, pg) ||
      check_all_defined(&d) || gc__validate(&d))
    return err->code ? err->code : GC_EINTERNAL;
  *out = g;
  return 0;
}

int gc_graph_decode(gc_arena *a, const uint8_t *buf, size_t len,
                    const gc_limits *lim, gc_graph **out, gc_error *err) {
  gc_limits deflim;
  if (!lim) {
    gc_limits_default(&deflim);
    lim = &deflim;
  }
  gc_error_clear(err);
  if (len > lim->max_bytes)
    return gc_errorf(err, GC_ELIMIT,
                     "graph is %zu bytes; the limit is %zu bytes", len,
                     lim->max_bytes);
  ProtobufCAllocator al = gc_arena_pb_allocator(a);
  Compiled__V1__GraphModule *m =
      compiled__v1__graph_module__unpack(&al, len, buf);
  if (!m && gc_arena_exhausted(a))
    return gc_errorf(err, GC_ENOMEM,
                     "graph of %zu bytes needs more memory than the decode "
                     "limit allows",
                     len);
  if (!m)
    return gc_errorf(err, GC_EMALFORMED,
                     "graph bytes are not a valid GraphModule message (%zu "
                     "bytes; protobuf decoding failed)",
                     len);
  int rc = gc_wire_check_strings(&compiled__v1__graph_module__descriptor, buf,
                                 len, err);
  if (rc)
    return rc;
  return gc_graph_from_message(a, m, lim, out, err);
}
