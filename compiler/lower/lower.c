/*
 * lower.c: the lowering driver. See lower.h for what lowering guarantees;
 * the helpers rules are written with live in the other files of
 * compiler/lower/ that ctx.h lists.
 *
 * Order of work:
 *   1. every tensor input becomes an INPUT buffer with its metadata;
 *   2. nodes in program order: the table's rule, else a fallback; after a
 *      rule the outputs are checked against the metadata, and unrealized
 *      results with several users that are costly to recompute are
 *      realized;
 *   3. program outputs get OUTPUT buffers with eager's exact strides (before
 *      the write-backs: they read the inputs as they were);
 *   4. the epilogue (aten::copy_ into graph inputs) last, in two phases so
 *      that no write-back reads an input another one already overwrote.
 *
 * A rule that fails (GC_EUNSUPPORTED, or outputs that disagree with the
 * metadata) is undone: the nodes it appended are dropped and the values it
 * realized forget their buffers, then the node becomes a fallback.
 */
#include "compiler/lower/ctx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ir/half.h"
#include "compiler/opfacts.h"
#include "compiler/ops.h"
#include "compiler/schema.h"
#include "compiler/strmap.h"
#include "compiler/torchops.h"

typedef struct rule {
  const char *name;
  gc_opclass cls;
  lower_fn fn; /* NULL: a row of facts only, a fallback */
  int param;
} rule;

/* The lowering columns of the operator facts table, row for row (a row's
 * gc_opfacts.index is its index here). */
static const rule rules[] = {
#define RULE(name, cls, fn, param) {name, GC_OPC_##cls, fn, param},
#define OP(name, cls, fn, param, flags, inv, inv_op, writes, when)             \
  RULE(name, cls, fn, param)
#define FACTS(name, flags, inv, inv_op, writes, when)                          \
  {name, GC_OPC_FALLBACK, NULL, 0},
#include "compiler/opfacts.def"
#undef RULE
#undef OP
#undef FACTS
};
#define NRULES (sizeof rules / sizeof rules[0])

ir_graph *L_ir(lower_ctx *L) {
  return L->ir;
}

/* ---- the driver ---- */

static void count_users(lower_ctx *L) {
  const gc_graph *g = L->g;
  for (int i = 0; i < g->nnodes; i++) {
    const gc_node *n = &g->nodes[i];
    for (int a = 0; a < n->nargs; a++) {
      const gc_arg *x = &n->args[a].arg;
      if (x->kind == GC_ARG_TENSOR && x->v)
        L->users[x->v->id]++;
      else if (x->kind == GC_ARG_TENSORS || x->kind == GC_ARG_OPT_TENSORS)
        for (int k = 0; k < x->n; k++)
          if (x->vals[k])
            L->users[x->vals[k]->id]++;
    }
  }
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].kind == GC_ARG_TENSOR && g->outputs[i].v)
      L->users[g->outputs[i].v->id] += 2; /* an output is always realized */
  /* A view is not a user of its base but a way to it: the base has the
   * view's users (later views first, so chains add up). Otherwise a value
   * read through views by a reduction and by an output would be inlined
   * into the reduction and computed again for the output, and where the
   * two evaluations differ in the last bit (a vector math call against a
   * scalar one) amax's backward finds no element equal to the maximum
   * (graphgen --grad, seed 272777: 0 / 0). */
  for (int i = g->nnodes - 1; i >= 0; i--) {
    const gc_node *n = &g->nodes[i];
    const gc_opfacts *f = gc_opfacts_of(n->op->schema->qualified);
    if (!f || f->cls != GC_OPC_VIEW)
      continue;
    int through = 0;
    for (int k = 0; k < n->noutputs; k++)
      if (n->outputs[k].kind == GC_ARG_TENSOR && n->outputs[k].v)
        through += L->users[n->outputs[k].v->id];
    if (through <= 1)
      continue;
    for (int a = 0; a < n->nargs; a++) {
      const gc_arg *x = &n->args[a].arg;
      if (x->kind == GC_ARG_TENSOR && x->v)
        L->users[x->v->id] += through - 1;
    }
  }
}

/* Marks the values an extern or fallback call will read (which realizes
 * them), following views back to their bases: realized when made, the
 * other users of such a value read the buffer instead of recomputing it
 * (a cat whose column sum is a bias's gradient and whose transpose is a
 * matrix product's operand: the sum then reads the cat's rows). */
static void mark_call_reads(lower_ctx *L) {
  const gc_graph *g = L->g;
  for (int i = g->nnodes - 1; i >= 0; i--) {
    const gc_node *n = &g->nodes[i];
    const gc_opfacts *f = gc_opfacts_of(n->op->schema->qualified);
    gc_opclass cls = f ? f->cls : GC_OPC_FALLBACK;
    bool mark = cls == GC_OPC_EXTERN || cls == GC_OPC_FALLBACK;
    if (cls == GC_OPC_VIEW)
      for (int k = 0; k < n->noutputs && !mark; k++)
        mark = n->outputs[k].kind == GC_ARG_TENSOR && n->outputs[k].v &&
               L->call_reads[n->outputs[k].v->id];
    if (!mark)
      continue;
    for (int a = 0; a < n->nargs; a++) {
      const gc_arg *x = &n->args[a].arg;
      if (x->kind == GC_ARG_TENSOR && x->v)
        L->call_reads[x->v->id] = true;
      else if (cls != GC_OPC_VIEW &&
               (x->kind == GC_ARG_TENSORS || x->kind == GC_ARG_OPT_TENSORS))
        for (int k = 0; k < x->n; k++)
          if (x->vals[k])
            L->call_reads[x->vals[k]->id] = true;
    }
  }
}

/* Does every tensor the node touches have a dtype generated code handles? */
static bool dtypes_ok(const gc_node *n) {
  for (int a = 0; a < n->nargs; a++) {
    const gc_arg *x = &n->args[a].arg;
    if (x->kind == GC_ARG_TENSOR && x->v && x->v->kind == GC_VALUE_TENSOR &&
        !L_dtype_ok(x->v->meta.dtype))
      return false;
    if (x->kind == GC_ARG_TENSORS || x->kind == GC_ARG_OPT_TENSORS)
      for (int k = 0; k < x->n; k++)
        if (x->vals[k] && !L_dtype_ok(x->vals[k]->meta.dtype))
          return false;
    if (x->kind == GC_ARG_TENSOR && x->v && x->v->kind != GC_VALUE_TENSOR)
      return false; /* symbolic scalars: not lowered yet */
  }
  for (int k = 0; k < n->noutputs; k++) {
    const gc_tensor_meta *m = L_out_meta(n, k);
    if (m && (!L_dtype_ok(m->dtype) || m->rank > IR_MAX_RANK ||
              m->layout != GC_LAYOUT_STRIDED))
      return false;
  }
  return true;
}

/* ---- nodes of a graph with size symbols ---- */

static bool meta_symbolic(const gc_tensor_meta *m) {
  if (m->offset.expr)
    return true;
  for (int i = 0; i < m->rank; i++)
    if (m->sizes[i].expr || m->strides[i].expr)
      return true;
  return false;
}

static bool arg_symbolic(const gc_arg *x) {
  switch (x->kind) {
  case GC_ARG_TENSOR:
    return x->v &&
           (x->v->kind != GC_VALUE_TENSOR || meta_symbolic(&x->v->meta));
  case GC_ARG_TENSORS:
  case GC_ARG_OPT_TENSORS:
    for (int k = 0; k < x->n; k++)
      if (x->vals[k] && meta_symbolic(&x->vals[k]->meta))
        return true;
    return false;
  case GC_ARG_SYM_INT:
  case GC_ARG_SYM_FLOAT:
  case GC_ARG_SYM_BOOL:
    return x->sym.v != NULL;
  case GC_ARG_SYM_INTS:
  case GC_ARG_SYM_FLOATS:
  case GC_ARG_SYM_BOOLS:
    for (int k = 0; k < x->n; k++)
      if (x->syms[k].v)
        return true;
    return false;
  default:
    return false;
  }
}

/* Does node n read or make a value with symbolic metadata, or take a
 * symbolic scalar? Its rule must then be one that reads sizes as
 * expressions (symbolic_rule). */
static bool node_symbolic(const gc_node *n) {
  for (int a = 0; a < n->nargs; a++)
    if (arg_symbolic(&n->args[a].arg))
      return true;
  for (int k = 0; k < n->noutputs; k++) {
    const gc_arg *o = &n->outputs[k];
    if (o->kind == GC_ARG_TENSOR && o->v && meta_symbolic(&o->v->meta))
      return true;
    for (int i = 0; o->kind == GC_ARG_TENSORS && i < o->n; i++)
      if (o->vals[i] && meta_symbolic(&o->vals[i]->meta))
        return true;
  }
  return false;
}

/* The rules that read every size, stride and offset through the symbolic
 * helpers (lower.h), so they run on nodes with symbolic metadata. The
 * others see only static metadata: a node with symbolic metadata whose
 * rule is not listed is a fallback (an ATen call, correct at any size). */
static const lower_fn symbolic_rules[] = {
    /* pointwise.c: every rule reads its shape through L__elementwise_begin */
    lower_unary,
    lower_unary_math,
    lower_binary,
    lower_rsub,
    lower_div_mode,
    lower_pow,
    lower_xlogy,
    lower_logaddexp,
    lower_lerp,
    lower_addcmul,
    lower_heaviside,
    lower_compare,
    lower_logical,
    lower_where,
    lower_masked_fill,
    lower_clamp,
    lower_copy,
    lower_copy_functional,
    lower_fill,
    lower_eye,
    lower_scalar_tensor,
    lower_arange,
    lower_round_decimals,
    lower_tri,
    /* index.c: cat with constant sizes along its dim */
    lower_cat,
    /* activations.c, backward.c: the elementwise ones */
    lower_relu,
    lower_hardtanh,
    lower_threshold,
    lower_leaky_relu,
    lower_gelu,
    lower_silu,
    lower_hardsigmoid,
    lower_softplus,
    lower_mish,
    lower_elu,
    lower_shrink,
    lower_log_sigmoid,
    lower_threshold_backward,
    lower_gelu_backward,
    lower_silu_backward,
    lower_sigmoid_backward,
    lower_hardtanh_backward,
    lower_leaky_relu_backward,
    lower_elu_backward,
    lower_softplus_backward,
    lower_hardsigmoid_backward,
    lower_shrink_backward,
    lower_log_sigmoid_backward,
    lower_logit_backward,
    /* views.c */
    lower_alias,
    lower_reshape,
    lower_permute,
    lower_transpose,
    lower_expand,
    lower_slice,
    lower_select,
    lower_diagonal,
    lower_unfold,
    /* reduce.c */
    lower_sum,
    lower_amax,
    lower_argmax,
    lower_any,
    lower_var,
    lower_softmax,
    lower_layer_norm,
    lower_logsumexp,
    lower_vector_norm,
    /* norm.c: every form of batch norm (symbolic batch, channels or
     * planes) */
    lower_batch_norm,
    /* pool.c: the forward poolings, symbolic leading dims (a symbolic
     * plane is declined) */
    lower_max_pool2d,
    lower_avg_pool2d,
    lower_adaptive_avg_pool2d,
    /* extern.c: library calls, sizes at run time */
    lower_extern_out,
    lower_conv,
    lower_extern_call,
};

static bool symbolic_rule(lower_fn fn) {
  for (size_t i = 0; i < sizeof symbolic_rules / sizeof *symbolic_rules; i++)
    if (symbolic_rules[i] == fn)
      return true;
  return false;
}

/* A node that only makes symbolic scalars (aten::sym_size, SymInt
 * arithmetic) whose values are expressions over the symbols: nothing to
 * run, the values are known (a call that takes one gets its expression,
 * which the runtime evaluates: codegen/program.c). */
static bool sym_scalar_node(lower_ctx *L, const gc_node *n) {
  if (!L->ir->nsyms || n->noutputs == 0)
    return false;
  for (int k = 0; k < n->noutputs; k++) {
    const gc_arg *o = &n->outputs[k];
    if (o->kind == GC_ARG_NONE)
      continue;
    if (o->kind != GC_ARG_SYM_INT || !o->sym.v ||
        o->sym.v->kind != GC_VALUE_SYM_INT || !L_symint(L, &o->sym.v->sym))
      return false;
  }
  /* it must not write anything (a schema that says it does is obeyed) */
  for (int a = 0; a < n->nargs; a++)
    if (n->args[a].param >= 0 && gc_node_writes(n, n->args[a].param))
      return false;
  return true;
}

/* Every output the rule set matches the metadata? */
static bool value_matches(lower_ctx *L, const gc_value *v) {
  const ir_tensor *t = L->val[v->id];
  const gc_tensor_meta *m = &v->meta;
  if (!t || t->dtype != m->dtype || t->rank != m->rank)
    return false;
  for (int i = 0; i < m->rank; i++) {
    if (L->ir->nsyms) {
      if (!t->ssizes || t->ssizes[i] != L_symint(L, &m->sizes[i]))
        return false;
    } else if (t->sizes[i] != m->sizes[i].v) {
      return false;
    }
  }
  return true;
}

static bool outputs_match(lower_ctx *L, const gc_node *n) {
  for (int k = 0; k < n->noutputs; k++) {
    const gc_arg *o = &n->outputs[k];
    if (o->kind == GC_ARG_TENSOR && o->v && !value_matches(L, o->v))
      return false;
    if (o->kind == GC_ARG_TENSORS)
      for (int i = 0; i < o->n; i++)
        if (o->vals[i] && !value_matches(L, o->vals[i]))
          return false;
  }
  return true;
}

static void undo(lower_ctx *L, const gc_node *n, int mark_nodes,
                 int mark_realized) {
  L->ir->nnodes = mark_nodes;
  while (L->nrealized > mark_realized)
    L->realized_log[--L->nrealized]->realized = NULL;
  for (int k = 0; k < n->noutputs; k++) {
    const gc_arg *o = &n->outputs[k];
    if (o->kind == GC_ARG_TENSOR && o->v)
      L->val[o->v->id] = NULL;
    if (o->kind == GC_ARG_TENSORS)
      for (int i = 0; i < o->n; i++)
        if (o->vals[i])
          L->val[o->vals[i]->id] = NULL;
  }
}

static const rule *rule_of(lower_ctx *L, const gc_node *n) {
  const gc_opfacts *f = gc_opfacts_of(n->op->schema->qualified);
  if (!f || f->index < 0 || (size_t)f->index >= NRULES)
    return NULL;
  const rule *r = &rules[f->index];
  return r->fn ? r : NULL;
}

static int lower_node(lower_ctx *L, const gc_node *n) {
  L->cur = n;
  L->nprov = 0;
  if (sym_scalar_node(L, n)) {
    if (L->stats)
      L->stats->native++;
    return 0;
  }
  const rule *r = rule_of(L, n);
  if (r && n->id >= 0 && n->id < L->g->nnodes)
    L->ir->gnode_what[n->id] = r->name;
  if (r && L->ir->nsyms && node_symbolic(n) && !symbolic_rule(r->fn))
    r = NULL; /* it reads static sizes: an ATen call */
  if (r && dtypes_ok(n)) {
    int mark_nodes = L->ir->nnodes, mark_realized = L->nrealized;
    int rc = r->fn(L, n, r->param);
    if (rc == 0 && !outputs_match(L, n))
      rc = GC_EUNSUPPORTED; /* a rule bug: be exact rather than fast */
    if (rc == 0) {
      if (L->stats) {
        if (r->cls == GC_OPC_EXTERN)
          L->stats->extern_++;
        else
          L->stats->native++;
      }
      for (int k = 0; k < n->noutputs; k++)
        if (n->outputs[k].kind == GC_ARG_TENSOR && n->outputs[k].v &&
            (rc = L__maybe_realize(L, n->outputs[k].v)) != 0)
          return rc;
      return 0;
    }
    if (rc != GC_EUNSUPPORTED)
      return rc;
    undo(L, n, mark_nodes, mark_realized);
    L->ir->oom = false;
  }
  return L__fallback(L, n);
}

int gc_lower(ir_graph *ir, const gc_functional *f, gc_lower_stats *stats,
             gc_error *err) {
  const gc_graph *g = f->graph;
  lower_ctx L = {.ir = ir, .f = f, .g = g, .err = err, .stats = stats};
  L.val = gc_arena_calloc(ir->a, (size_t)g->nvalues + 1, sizeof *L.val);
  L.users = gc_arena_calloc(ir->a, (size_t)g->nvalues + 1, sizeof *L.users);
  L.eager_layout =
      gc_arena_calloc(ir->a, (size_t)g->nvalues + 1, sizeof *L.eager_layout);
  L.call_reads =
      gc_arena_calloc(ir->a, (size_t)g->nvalues + 1, sizeof *L.call_reads);
  const gc_node **wb =
      gc_arena_calloc(ir->a, (size_t)g->nnodes + 1, sizeof *wb);
  ir->gnode_what =
      gc_arena_calloc(ir->a, (size_t)g->nnodes + 1, sizeof *ir->gnode_what);
  if (!L.val || !L.users || !L.eager_layout || !L.call_reads || !wb ||
      !ir->gnode_what || gc_strmap_init(&L.ops, ir->a, 16) != 0)
    return gc_errorf(err, GC_ENOMEM, "lower: out of memory");
  if (stats) {
    memset(stats, 0, sizeof *stats);
    stats->nodes = g->nnodes;
    stats->fallback_ops =
        gc_arena_calloc(ir->a, (size_t)g->nnodes + 1, sizeof(char *));
  }
  count_users(&L);
  mark_call_reads(&L);
  /* channels-last intermediates for convolutional inference programs.
   * Not for training programs: convolution_backward is a fallback that
   * sees eager's layout, so channels-last saved values would be copied
   * back for it (tried: resnet18's training step 1.03x either way). */
  /* size symbols, as the key numbers them ("s<i>") */
  L.symbols = &f->symbols;
  if (f->symbols.n > 0) {
    ir->nsyms = f->symbols.n;
    ir->syms = gc_arena_calloc(ir->a, (size_t)ir->nsyms + 1, sizeof *ir->syms);
    if (!ir->syms)
      return gc_errorf(err, GC_ENOMEM, "lower: out of memory");
    for (int i = 0; i < ir->nsyms; i++) {
      char name[24];
      snprintf(name, sizeof name, "s%d", i);
      if (!(ir->syms[i] = gc_sym_sizevar(&ir->sym, name, 0, GC_SYM_SIZE_MAX)))
        return gc_errorf(err, GC_ENOMEM, "lower: out of memory");
    }
  }
  /* not (yet) in programs with size symbols: the layout choice reads
   * static sizes */
  for (int k = 0; k < g->nnodes && !ir->memory_first && !ir->nsyms; k++)
    if ((strcmp(g->nodes[k].op->schema->qualified, "aten::convolution") == 0 ||
         strcmp(g->nodes[k].op->schema->qualified, "aten::conv2d") == 0) &&
        L__cl_conv(&L, &g->nodes[k]))
      L.channels_last = true;
  if (L.channels_last)
    L__mark_output_bases(&L);
  for (int i = 0; i < g->ninputs; i++) {
    const gc_arg *a = &g->inputs[i].arg;
    if (a->kind != GC_ARG_TENSOR || !a->v || a->v->kind != GC_VALUE_TENSOR)
      continue;
    const gc_tensor_meta *m = &a->v->meta;
    int64_t sz[IR_MAX_RANK], st[IR_MAX_RANK];
    gc_sym *ssz[IR_MAX_RANK], *sst[IR_MAX_RANK];
    ir_buf *b;
    if (ir->nsyms && m->rank <= IR_MAX_RANK) {
      /* the storage offset is in the data pointer the kernels get */
      if (!L_sym_sizes(&L, m, ssz) || !L_sym_strides(&L, m, sst))
        return gc_errorf(err, GC_EUNSUPPORTED,
                         "lower: input %d has a symbolic size or stride the "
                         "loop IR cannot express",
                         i);
      b = ir_buf_new_s(ir, IR_BUF_INPUT, m->dtype, m->rank, ssz, sst);
    } else if (m->rank > IR_MAX_RANK || !L_static_sizes(m, sz) ||
               !L__static_strides(m, st)) {
      return gc_errorf(err, GC_EUNSUPPORTED,
                       "lower: input %d has symbolic or very high-rank "
                       "metadata",
                       i);
    } else {
      b = ir_buf_new(ir, IR_BUF_INPUT, m->dtype, m->rank, sz, st);
    }
    if (!b)
      return gc_errorf(err, GC_ENOMEM, "lower: out of memory");
    b->index = i;
    b->value = a->v;
    L.val[a->v->id] = ir_tensor_of_buf(ir, b);
  }
  int nwb = 0;
  for (int k = 0; k < g->nnodes; k++) {
    const gc_node *n = &g->nodes[f->order ? f->order[k] : k];
    if (L__is_input_writeback(n)) {
      wb[nwb++] = n;
      continue;
    }
    int rc = lower_node(&L, n);
    if (rc)
      return rc == GC_ENOMEM ? gc_errorf(err, rc, "lower: out of memory") : rc;
  }
  /* Outputs first: they hold values computed from the inputs as they were
   * before the write-backs, which come last. */
  int rc = L__lower_outputs(&L);
  if (!rc && nwb)
    rc = L__lower_epilogue(&L, wb, nwb);
  /* a symbolic buffer stays within the compiler's limit (the passes' sums
   * of sizes cannot overflow): a guard per distinct size */
  for (int i = 0; !rc && i < ir->nbufs; i++) {
    ir_buf *b = ir->bufs[i];
    if (!b->symbolic || b->kind == IR_BUF_INPUT)
      continue;
    gc_sym *bytes = gc_sym_scale(&ir->sym, b->sspan, gc_dtype_size(b->dtype));
    if (!ir_guard_add(ir, IR_GUARD_LE, bytes,
                      gc_sym_const(&ir->sym, IR_MAX_BUF_BYTES), IR_GUARD_BOUND,
                      "an intermediate of at most 1 TiB"))
      rc = GC_ENOMEM;
  }
  if (rc == GC_ENOMEM || ir->oom)
    return gc_errorf(err, GC_ENOMEM, "lower: out of memory");
  if (rc == GC_EUNSUPPORTED)
    return gc_errorf(err, rc,
                     "lower: the program's inputs or outputs cannot "
                     "be compiled natively");
  return rc;
}
