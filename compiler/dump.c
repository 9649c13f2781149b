/*
 * dump.c: every printer a pass dump uses, in one file (the passes' state as
 * text, for `compilectl graph PASS`, --dump-after, the golden dump tests
 * and the explorer). See dump.h. The loop IR prints itself
 * (compiler/ir/print.c): its expression printer also writes the comments
 * of the generated C and the guards of the artifact.
 */
#include "compiler/dump.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- graphs ---- */

static const char *memory_format_name(int64_t v) {
  switch (v) {
  case 1:
    return "contiguous_format";
  case 2:
    return "channels_last";
  case 3:
    return "channels_last_3d";
  case 4:
    return "preserve_format";
  }
  return "?";
}

static const char *layout_name(int64_t v) {
  static const char *const names[] = {"?",          "sparse_coo", "sparse_csr",
                                      "sparse_csc", "sparse_bsr", "sparse_bsc",
                                      "mkldnn",     "strided"};
  return v >= 0 && v <= 7 ? names[v] : "?";
}

static void print_symint(const gc_symint *s, gc_buf *out) {
  if (s->expr)
    gc_buf_printf(out, "(%s)", s->expr);
  else
    gc_buf_printf(out, "%" PRId64, s->v);
}

static void print_float(double f, gc_buf *out) {
  if (isnan(f))
    gc_buf_puts(out, "nan");
  else if (isinf(f))
    gc_buf_puts(out, f > 0 ? "inf" : "-inf");
  else
    gc_buf_printf(out, "%.17g", f);
}

static void print_symarg(const gc_symarg *s, gc_arg_kind k, gc_buf *out) {
  if (s->v)
    gc_buf_printf(out, "%%%s", s->v->name);
  else if (k == GC_ARG_SYM_INT)
    gc_buf_printf(out, "%" PRId64, s->i);
  else if (k == GC_ARG_SYM_FLOAT)
    print_float(s->f, out);
  else
    gc_buf_puts(out, s->b ? "True" : "False");
}

void gc_arg_print(const gc_arg *a, gc_buf *out) {
  switch (a->kind) {
  case GC_ARG_NONE:
    gc_buf_puts(out, "None");
    return;
  case GC_ARG_TENSOR:
    gc_buf_printf(out, "%%%s", a->v->name);
    return;
  case GC_ARG_INT:
    gc_buf_printf(out, "%" PRId64, a->i);
    return;
  case GC_ARG_FLOAT:
    print_float(a->f, out);
    return;
  case GC_ARG_BOOL:
    gc_buf_puts(out, a->i ? "True" : "False");
    return;
  case GC_ARG_STRING:
    gc_buf_printf(out, "\"%s\"", a->s);
    return;
  case GC_ARG_SYM_INT:
  case GC_ARG_SYM_FLOAT:
  case GC_ARG_SYM_BOOL:
    print_symarg(&a->sym, a->kind, out);
    return;
  case GC_ARG_SCALAR_TYPE: {
    const char *n = gc_dtype_name((gc_dtype)a->i);
    gc_buf_puts(out, n ? n : "?");
    return;
  }
  case GC_ARG_MEMORY_FORMAT:
    gc_buf_puts(out, memory_format_name(a->i));
    return;
  case GC_ARG_LAYOUT:
    gc_buf_puts(out, layout_name(a->i));
    return;
  case GC_ARG_DEVICE:
    if (a->dev.index >= 0)
      gc_buf_printf(out, "device(%s:%d)", a->dev.type, a->dev.index);
    else
      gc_buf_printf(out, "device(%s)", a->dev.type);
    return;
  default: /* a list: its items as single arguments */
    break;
  }
  gc_buf_puts(out, "[");
  for (int i = 0; i < a->n; i++) {
    if (i)
      gc_buf_puts(out, ", ");
    gc_arg item = gc_arg_item(a, i);
    gc_arg_print(&item, out);
  }
  gc_buf_puts(out, "]");
}

/* "[a, b, ...]" of n values. */
static void print_symints(const gc_symint *v, int n, gc_buf *out) {
  gc_buf_puts(out, "[");
  for (int i = 0; i < n; i++) {
    if (i)
      gc_buf_puts(out, ", ");
    print_symint(&v[i], out);
  }
  gc_buf_puts(out, "]");
}

void gc_meta_print(const gc_tensor_meta *t, gc_buf *out) {
  const char *dn = gc_dtype_name(t->dtype);
  gc_buf_puts(out, dn ? dn : "?");
  print_symints(t->sizes, t->rank, out);
  if (!gc_meta_contiguous(t)) {
    gc_buf_puts(out, " strides ");
    print_symints(t->strides, t->rank, out);
  }
  if (t->offset.expr || t->offset.v) {
    gc_buf_puts(out, " offset ");
    print_symint(&t->offset, out);
  }
  if (strcmp(t->device.type, "cpu") != 0 || t->device.index >= 0) {
    gc_buf_printf(out, " %s", t->device.type);
    if (t->device.index >= 0)
      gc_buf_printf(out, ":%d", t->device.index);
  }
  if (t->requires_grad)
    gc_buf_puts(out, " requires_grad");
  if (t->layout != GC_LAYOUT_STRIDED)
    gc_buf_printf(out, " %s", layout_name(t->layout));
}

static void print_value_decl(const gc_value *v, gc_buf *out) {
  gc_buf_printf(out, "%%%s", v->name);
  if (v->kind == GC_VALUE_TENSOR) {
    gc_buf_puts(out, ": ");
    gc_meta_print(&v->meta, out);
  } else if (v->sym.expr) {
    gc_buf_printf(out, ": sym(%s)", v->sym.expr);
  }
}

static const char *input_kind_name(gc_input_kind k) {
  switch (k) {
  case GC_INPUT_USER:
    return "user";
  case GC_INPUT_PARAMETER:
    return "parameter";
  case GC_INPUT_BUFFER:
    return "buffer";
  case GC_INPUT_CONSTANT:
    return "constant";
  default:
    return "?";
  }
}

static void print_outputs(const gc_node *n, gc_buf *out) {
  int shown = 0;
  for (int o = 0; o < n->noutputs; o++) {
    const gc_arg *a = &n->outputs[o];
    if (a->kind == GC_ARG_NONE)
      continue;
    if (shown++)
      gc_buf_puts(out, ", ");
    if (a->kind == GC_ARG_TENSOR) {
      print_value_decl(a->v, out);
    } else if (a->kind == GC_ARG_TENSORS) {
      gc_buf_puts(out, "[");
      for (int j = 0; j < a->n; j++) {
        if (j)
          gc_buf_puts(out, ", ");
        print_value_decl(a->vals[j], out);
      }
      gc_buf_puts(out, "]");
    } else if (a->sym.v) {
      print_value_decl(a->sym.v, out);
    }
  }
  if (!shown)
    gc_buf_puts(out, "()");
}

void gc_graph_print(const gc_graph *g, gc_buf *out) {
  gc_buf_printf(out,
                "# %d inputs, %d nodes, %d outputs; schema %d.%d; torch %s\n",
                g->ninputs, g->nnodes, g->noutputs, g->schema_major,
                g->schema_minor, *g->torch_version ? g->torch_version : "?");
  for (int i = 0; i < g->ninputs; i++) {
    const gc_input *in = &g->inputs[i];
    gc_buf_printf(out, "input %d ", i);
    if (in->arg.kind == GC_ARG_TENSOR)
      print_value_decl(in->arg.v, out);
    else if (in->arg.kind >= GC_ARG_SYM_INT &&
             in->arg.kind <= GC_ARG_SYM_BOOLS && in->arg.sym.v)
      print_value_decl(in->arg.sym.v, out);
    else
      gc_arg_print(&in->arg, out);
    gc_buf_printf(out, " (%s", input_kind_name(in->kind));
    if (*in->target)
      gc_buf_printf(out, " %s", in->target);
    if (in->storage_group >= 0)
      gc_buf_printf(out, ", shares storage group %d", in->storage_group);
    gc_buf_puts(out, ")\n");
  }
  for (int i = 0; i < g->nnodes; i++) {
    const gc_node *n = &g->nodes[i];
    print_outputs(n, out);
    gc_buf_printf(out, " = %s(", n->target);
    for (int k = 0; k < n->nargs; k++) {
      if (k)
        gc_buf_puts(out, ", ");
      if (n->args[k].keyword)
        gc_buf_printf(out, "%s=", n->args[k].name);
      gc_arg_print(&n->args[k].arg, out);
    }
    gc_buf_puts(out, ")\n");
  }
  gc_buf_puts(out, "return (");
  for (int o = 0; o < g->noutputs; o++) {
    if (o)
      gc_buf_puts(out, ", ");
    gc_arg_print(&g->outputs[o], out);
  }
  gc_buf_puts(out, ")\n");
}

/* ---- functional programs ---- */

static const char *mutation_name(gc_mutation_type t) {
  switch (t) {
  case GC_MUT_IN_GRAPH:
    return "mutated in graph";
  case GC_MUT_OUT_GRAPH:
    return "mutated out of graph";
  default:
    return "not mutated";
  }
}

static const char *output_name(gc_output_type t) {
  static const char *const names[] = {
      "non_alias",
      "alias_of_input",
      "is_input",
      "alias_of_intermediate_save_as_output",
      "alias_of_intermediate",
      "alias_of_intermediate_base_is_user_output",
      "unsafe_view_alias",
      "custom_function_view"};
  return (int)t >= 0 && (int)t < 8 ? names[t] : "?";
}

void gc_functional_print(const gc_functional *f, gc_buf *out) {
  if (f->functional)
    gc_buf_puts(out, "# functional program\n");
  else
    gc_buf_printf(out, "# kept in eager form: %s\n", f->eager_reason);
  gc_graph_print(f->graph, out);
  for (int i = 0; i < f->ninputs; i++) {
    const gc_input_info *ii = &f->inputs[i];
    if (!ii->mutates_data && !ii->mutates_metadata)
      continue;
    gc_buf_printf(out, "input %d: %s%s%s%s", i, mutation_name(ii->type),
                  ii->mutates_data ? ", data" : "",
                  ii->mutates_metadata ? ", metadata" : "",
                  ii->hidden_from_autograd ? ", hidden from autograd" : "");
    if (ii->mutated_output >= 0)
      gc_buf_printf(out, ", new value is program output %d",
                    ii->mutated_output);
    gc_buf_puts(out, "\n");
  }
  for (int k = 0; k < f->noutputs; k++) {
    const gc_output_info *oi = &f->outputs[k];
    gc_buf_printf(out, "output %d: %s", k, output_name(oi->type));
    if (oi->base >= 0)
      gc_buf_printf(out, " (base %d)", oi->base);
    if (oi->type != GC_OUT_NON_ALIAS && oi->type != GC_OUT_IS_INPUT) {
      if (oi->has_chain) {
        gc_buf_puts(out, ", view chain:");
        for (int s = 0; s < oi->nchain; s++)
          gc_buf_printf(out, " %s", oi->chain[s].op->name);
      } else {
        gc_buf_puts(out, ", as_strided");
      }
    }
    gc_buf_printf(out, ", program output %d\n", oi->program_output);
  }
  if (f->num_intermediate_bases)
    gc_buf_printf(out, "intermediate bases: %d\n", f->num_intermediate_bases);
}

/* ---- the native program ---- */

/* A NativeProgram as text (`compilectl graph program`,
 * docs/artifact.md's example). One line per value with its placement, one
 * per instruction, then the outputs:
 *
 *   # native program: 3 segments, 5 kernels, arena 1024 bytes, x86-64-v4
 *   v0    float32[8] strides [1]          input 0
 *   v9    float32[4, 32] strides [32, 1]  arena +0
 *   v12   float32[4, 32] strides [32, 1]  view of v9 +0
 *   ...
 *   0: segment 0 (gc_seg0) slots p[1]=v6 p[2]=v0 ...
 *   1: call aten::addmm.out(v3, v12, v13, out=v9) -> v9   (graph node 2)
 *   2: free v9
 */
typedef struct tb {
  gc_arena *a;
  char *s;
  size_t len, cap;
  bool failed;
} tb;

static void putf(tb *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void putf(tb *t, const char *fmt, ...) {
  if (t->failed)
    return;
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n >= 0 && t->len + (size_t)n + 1 > t->cap) {
    size_t cap = (t->cap ? t->cap * 2 : 4096) + (size_t)n;
    char *s = gc_arena_alloc(t->a, cap);
    if (s && t->len)
      memcpy(s, t->s, t->len);
    t->s = s;
    t->cap = cap;
  }
  if (n < 0 || !t->s)
    t->failed = true;
  else
    t->len += (size_t)vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap2);
  va_end(ap2);
}

static void symints(tb *t, Compiled__V1__SymInt **v, size_t n) {
  putf(t, "[");
  for (size_t i = 0; i < n; i++) {
    if (v[i]->kind_case == COMPILED__V1__SYM_INT__KIND_AS_INT)
      putf(t, "%s%" PRId64, i ? ", " : "", v[i]->as_int);
    else
      putf(t, "%s%s", i ? ", " : "",
           v[i]->as_expr && v[i]->as_expr->expr ? v[i]->as_expr->expr : "?");
  }
  putf(t, "]");
}

static void ints(tb *t, const int32_t *v, size_t n, const char *prefix) {
  for (size_t i = 0; i < n; i++)
    putf(t, "%s%s%d", i ? ", " : "", v[i] >= 0 ? prefix : "", v[i]);
}

static void value(tb *t, const Compiled__V1__Value *v) {
  switch (v->kind_case) {
  case COMPILED__V1__VALUE__KIND_TENSOR: {
    const char *dt = gc_dtype_name((gc_dtype)v->tensor->dtype);
    putf(t, "%s", dt ? dt : "?");
    symints(t, v->tensor->sizes, v->tensor->n_sizes);
    putf(t, " strides ");
    symints(t, v->tensor->strides, v->tensor->n_strides);
    break;
  }
  case COMPILED__V1__VALUE__KIND_NONE:
    putf(t, "None");
    break;
  case COMPILED__V1__VALUE__KIND_INT:
    putf(t, "%" PRId64, v->int_);
    break;
  case COMPILED__V1__VALUE__KIND_FLOAT:
    putf(t, "%.17g", v->float_);
    break;
  case COMPILED__V1__VALUE__KIND_BOOL:
    putf(t, "%s", v->bool_ ? "True" : "False");
    break;
  case COMPILED__V1__VALUE__KIND_INTS:
    putf(t, "[");
    for (size_t i = 0; i < v->ints->n_items; i++)
      putf(t, "%s%" PRId64, i ? ", " : "", v->ints->items[i]);
    putf(t, "]");
    break;
  case COMPILED__V1__VALUE__KIND_TENSORS:
  case COMPILED__V1__VALUE__KIND_OPTIONAL_TENSORS: {
    const Compiled__V1__ValueList *l =
        v->kind_case == COMPILED__V1__VALUE__KIND_TENSORS ? v->tensors
                                                          : v->optional_tensors;
    putf(t, "list [");
    ints(t, l->items, l->n_items, "v");
    putf(t, "]");
    break;
  }
  case COMPILED__V1__VALUE__KIND_SCALAR_TYPE: {
    const char *dt = gc_dtype_name((gc_dtype)v->scalar_type);
    putf(t, "dtype %s", dt ? dt : "?");
    break;
  }
  default: {
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(
        &compiled__v1__value__descriptor, (unsigned)v->kind_case);
    putf(t, "(%s)", f ? f->name : "?");
  }
  }
}

static void placement(tb *t, const Compiled__V1__Placement *p) {
  switch (p->kind) {
  case COMPILED__V1__PLACEMENT_KIND__PLACEMENT_INPUT:
    putf(t, "input %d", p->index);
    break;
  case COMPILED__V1__PLACEMENT_KIND__PLACEMENT_ARENA:
    if (p->offset_expr && *p->offset_expr)
      putf(t, "arena +(%s)", p->offset_expr);
    else
      putf(t, "arena +%" PRId64, p->offset);
    break;
  case COMPILED__V1__PLACEMENT_KIND__PLACEMENT_OUTPUT:
    putf(t, "output (allocated per call)");
    break;
  case COMPILED__V1__PLACEMENT_KIND__PLACEMENT_RESULT:
    putf(t, "result of a call");
    break;
  case COMPILED__V1__PLACEMENT_KIND__PLACEMENT_VIEW:
    if (p->offset_expr && *p->offset_expr)
      putf(t, "view of v%d +(%s)", p->index, p->offset_expr);
    else
      putf(t, "view of v%d +%" PRId64, p->index, p->offset);
    break;
  case COMPILED__V1__PLACEMENT_KIND__PLACEMENT_LOCAL:
    putf(t, "local");
    break;
  default:
    putf(t, "literal");
  }
}

char *gc_native_program_str(gc_arena *a, const Compiled__V1__NativeProgram *p) {
  tb t = {.a = a};
  const Compiled__V1__NativeCode *c = p->code;
  const Compiled__V1__MemoryPlan *m = p->memory_plan;
  putf(&t, "# native program: %zu segments, %d kernels, arena ",
       c ? c->n_entry_symbols : 0, p->summary ? p->summary->kernels : 0);
  if (m && m->arena_bytes_expr && *m->arena_bytes_expr)
    putf(&t, "(%s)", m->arena_bytes_expr);
  else
    putf(&t, "%" PRId64, m ? m->arena_bytes : 0);
  putf(&t, " bytes, target %s\n",
       c && c->target && *c->target ? c->target : "(host)");
  /* size symbols and the guards the code relies on */
  for (size_t i = 0; i < p->n_symbols; i++)
    if (p->symbols[i]->dim >= 0)
      putf(&t, "# symbol %s = input %d .size(%d)\n", p->symbols[i]->name,
           p->symbols[i]->input, p->symbols[i]->dim);
    else
      putf(&t, "# symbol %s = input %d\n", p->symbols[i]->name,
           p->symbols[i]->input);
  for (size_t i = 0; i < p->n_guards; i++)
    putf(&t, "# guard %s\n",
         p->guards[i]->text && *p->guards[i]->text ? p->guards[i]->text
                                                   : p->guards[i]->expr);
  putf(&t, "# inputs ");
  ints(&t, p->inputs, p->n_inputs, "v");
  putf(&t, "; pointer table p[0] = arena");
  for (size_t i = 1; i < p->n_slots; i++)
    putf(&t, ", p[%zu] = v%d", i, p->slots[i]);
  putf(&t, "\n\n");
  for (size_t i = 0; i < p->n_values; i++) {
    const Compiled__V1__Value *v = p->values[i];
    char head[32];
    snprintf(head, sizeof head, "v%zu", i);
    putf(&t, "%-6s", head);
    size_t start = t.len;
    value(&t, v);
    if (v->kind_case == COMPILED__V1__VALUE__KIND_TENSOR &&
        i < p->n_placements) {
      size_t w = t.len - start;
      putf(&t, "%*s", w < 36 ? (int)(38 - w) : 2, "");
      placement(&t, p->placements[i]);
    }
    putf(&t, "\n");
  }
  putf(&t, "\n");
  for (size_t i = 0; i < p->n_instructions; i++) {
    const Compiled__V1__NativeInstruction *ins = p->instructions[i];
    putf(&t, "%3zu: ", i);
    switch (ins->kind_case) {
    case COMPILED__V1__NATIVE_INSTRUCTION__KIND_SEGMENT:
      putf(&t, "segment %d (%s)\n", ins->segment,
           c && (size_t)ins->segment < c->n_entry_symbols
               ? c->entry_symbols[ins->segment]
               : "?");
      break;
    case COMPILED__V1__NATIVE_INSTRUCTION__KIND_KERNEL: {
      const Compiled__V1__KernelCall *k = ins->kernel;
      putf(&t, "call %s(",
           (size_t)k->op < p->n_operators && p->operators[k->op]->name
               ? p->operators[k->op]->name
               : "?");
      for (size_t j = 0; j < k->n_args; j++)
        putf(&t, "%s%s%sv%d", j ? ", " : "",
             k->args[j]->keyword ? k->args[j]->name : "",
             k->args[j]->keyword ? "=" : "", k->args[j]->value);
      putf(&t, ") -> ");
      ints(&t, k->outputs, k->n_outputs, "v");
      putf(&t, "   (graph node %d)\n", k->node);
      break;
    }
    case COMPILED__V1__NATIVE_INSTRUCTION__KIND_FREE:
    case COMPILED__V1__NATIVE_INSTRUCTION__KIND_ALLOC: {
      bool f = ins->kind_case == COMPILED__V1__NATIVE_INSTRUCTION__KIND_FREE;
      const Compiled__V1__ValueList *l = f ? ins->free : ins->alloc;
      putf(&t, f ? "free " : "alloc ");
      ints(&t, l->items, l->n_items, "v");
      putf(&t, "\n");
      break;
    }
    default:
      putf(&t, "?\n");
    }
  }
  putf(&t, "\nreturn ");
  ints(&t, p->outputs, p->n_outputs, "v");
  putf(&t, "\n");
  return t.failed ? NULL : t.s;
}

/* ---- the schedule and the memory plan (`compilectl graph schedule|plan`) ----
 */

static void dims(ir_graph *ir, tb *p, const sc_dim *d, int n) {
  putf(p, "[");
  for (int i = 0; i < n; i++)
    putf(p, "%s",
         gc_arena_printf(ir->a, "%s%s<%s", i ? ", " : "",
                         gc_sym_str(&ir->sym, d[i].var),
                         d[i].ssize ? gc_sym_str(&ir->sym, d[i].ssize)
                                    : gc_arena_printf(ir->a, "%lld",
                                                      (long long)d[i].size)));
  putf(p, "]");
}

char *sc_print(ir_graph *ir, const sc_schedule *s) {
  tb p = {.a = ir->a};
  putf(&p, "%s",
       gc_arena_printf(
           ir->a, "# %d kernels, %d buffers kept in locals, arena %s bytes\n",
           s->nkernels, s->nlocal,
           s->sarena_bytes && s->arena_bytes == IR_SYMBOLIC
               ? gc_sym_str(&ir->sym, s->sarena_bytes)
               : gc_arena_printf(ir->a, "%lld", (long long)s->arena_bytes)));
  for (int k = 0; k < s->nkernels; k++) {
    const sc_kernel *kn = s->kernels[k];
    if (kn->call) {
      putf(&p, "%s",
           gc_arena_printf(ir->a, "\n%s: call %s (node %d)\n", kn->name,
                           kn->call->op ? kn->call->op->name : "?",
                           kn->call->id));
      continue;
    }
    putf(&p, "%s", gc_arena_printf(ir->a, "\n%s: loop over ", kn->name));
    dims(ir, &p, kn->dims, kn->ndims);
    putf(&p, "\n");
    for (int st = 0; st < kn->nstages; st++) {
      const sc_stage *sg = &kn->stages[st];
      putf(&p, "%s",
           gc_arena_printf(ir->a, "  stage %d %s ", st,
                           sg->reduction ? "reduce" : "pointwise"));
      dims(ir, &p, sg->dims, sg->ndims);
      putf(&p, "\n");
      for (int i = 0; i < sg->nnodes; i++) {
        const ir_node *n = sg->nodes[i];
        const sc_place *pl = &s->place[n->id];
        const ir_buf *b = n->out;
        const char *where =
            s->local[b->id] ? "local"
            : b->share      ? gc_arena_printf(ir->a, "in buf%d", b->share->id)
            : b->kind == IR_BUF_ARENA
                ? (b->sarena_offset && b->arena_offset == IR_SYMBOLIC
                       ? gc_arena_printf(ir->a, "arena@%s",
                                         gc_sym_str(&ir->sym, b->sarena_offset))
                       : gc_arena_printf(ir->a, "arena@%lld",
                                         (long long)b->arena_offset))
            : b->kind == IR_BUF_OUTPUT ? "output"
            : b->kind == IR_BUF_TEMP   ? "temp"
            : b->kind == IR_BUF_INPUT  ? "input"
                                       : "result";
        putf(&p, "%s",
             gc_arena_printf(
                 ir->a, "    node%d %s -> buf%d (%s)[%s]%s = %s\n", n->id,
                 n->what ? n->what : "", b->id, where,
                 gc_sym_str(&ir->sym, pl->store),
                 n->kind == IR_REDUCTION
                     ? gc_arena_printf(ir->a, " %s", ir_reduction_name(n->red))
                     : "",
                 ir_expr_str(ir, pl->body)));
      }
    }
  }
  if (s->planned) {
    putf(&p, "\nmemory plan (arena buffers, by offset; live: kernels that use "
             "them)\n");
    for (int64_t at = -1;;) { /* ascending offsets, then buffer ids */
      int64_t next = INT64_MAX;
      for (int i = 0; i < ir->nbufs; i++) {
        const ir_buf *b = ir->bufs[i];
        if (b->kind == IR_BUF_ARENA && !s->local[i] && b->first >= 0 &&
            ir_buf_storage((ir_buf *)b)->kind == IR_BUF_ARENA && !b->symbolic &&
            b->arena_offset > at && b->arena_offset < next)
          next = b->arena_offset;
      }
      if (next == INT64_MAX)
        break;
      for (int i = 0; i < ir->nbufs; i++) {
        const ir_buf *b = ir->bufs[i];
        if (b->kind != IR_BUF_ARENA || s->local[i] || b->first < 0 ||
            b->symbolic || b->arena_offset != next ||
            ir_buf_storage((ir_buf *)b)->kind != IR_BUF_ARENA)
          continue;
        putf(&p, "%s",
             gc_arena_printf(ir->a, "  [%6lld, %6lld) buf%d, live k%d..k%d%s\n",
                             (long long)b->arena_offset,
                             (long long)(b->arena_offset + sc_buf_bytes(b)),
                             b->id, b->first, b->last,
                             b->share ? gc_arena_printf(ir->a,
                                                        " (in place of buf%d)",
                                                        b->share->id)
                                      : ""));
      }
      at = next;
    }
    /* symbolic buffers: offsets and ends as expressions, by buffer id */
    for (int i = 0; i < ir->nbufs; i++) {
      const ir_buf *b = ir->bufs[i];
      if (b->kind != IR_BUF_ARENA || s->local[i] || b->first < 0 ||
          !b->symbolic || ir_buf_storage((ir_buf *)b)->kind != IR_BUF_ARENA)
        continue;
      gc_sym *off = b->sarena_offset ? b->sarena_offset
                                     : gc_sym_const(&ir->sym, b->arena_offset);
      putf(&p, "%s",
           gc_arena_printf(
               ir->a, "  [%s, %s) buf%d, live k%d..k%d%s\n",
               gc_sym_str(&ir->sym, off),
               gc_sym_str(&ir->sym,
                          gc_sym_add(&ir->sym, off, sc_buf_sbytes(ir, b))),
               b->id, b->first, b->last,
               b->share ? gc_arena_printf(ir->a, " (in place of buf%d)",
                                          b->share->id)
                        : ""));
    }
  }
  return p.s ? p.s : gc_arena_strdup(ir->a, "");
}
