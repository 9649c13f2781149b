/*
 * print.c: the readable listing of a graph. See print.h.
 */
#include "compiler/print.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

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
  else if (k == GC_ARG_SYM_INT || k == GC_ARG_SYM_INTS)
    gc_buf_printf(out, "%" PRId64, s->i);
  else if (k == GC_ARG_SYM_FLOAT || k == GC_ARG_SYM_FLOATS)
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
  default:
    break;
  }
  gc_buf_puts(out, "[");
  for (int i = 0; i < a->n; i++) {
    if (i)
      gc_buf_puts(out, ", ");
    switch (a->kind) {
    case GC_ARG_TENSORS:
    case GC_ARG_OPT_TENSORS:
      if (a->vals[i])
        gc_buf_printf(out, "%%%s", a->vals[i]->name);
      else
        gc_buf_puts(out, "None");
      break;
    case GC_ARG_INTS:
      gc_buf_printf(out, "%" PRId64, a->ints[i]);
      break;
    case GC_ARG_BOOLS:
      gc_buf_puts(out, a->ints[i] ? "True" : "False");
      break;
    case GC_ARG_FLOATS:
      print_float(a->floats[i], out);
      break;
    case GC_ARG_STRINGS:
      gc_buf_printf(out, "\"%s\"", a->strs[i]);
      break;
    default:
      print_symarg(&a->syms[i], a->kind, out);
    }
  }
  gc_buf_puts(out, "]");
}

/* Are the strides the contiguous strides of the sizes? */
static bool contiguous(const gc_tensor_meta *t) {
  int64_t expect = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    if (t->sizes[i].expr || t->strides[i].expr)
      return false;
    if (t->sizes[i].v != 1 && t->strides[i].v != expect)
      return false;
    expect *= t->sizes[i].v;
  }
  return true;
}

void gc_meta_print(const gc_tensor_meta *t, gc_buf *out) {
  const char *dn = gc_dtype_name(t->dtype);
  gc_buf_printf(out, "%s[", dn ? dn : "?");
  for (int i = 0; i < t->rank; i++) {
    if (i)
      gc_buf_puts(out, ", ");
    print_symint(&t->sizes[i], out);
  }
  gc_buf_puts(out, "]");
  if (!contiguous(t)) {
    gc_buf_puts(out, " strides [");
    for (int i = 0; i < t->rank; i++) {
      if (i)
        gc_buf_puts(out, ", ");
      print_symint(&t->strides[i], out);
    }
    gc_buf_puts(out, "]");
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
