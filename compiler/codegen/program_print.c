/*
 * program_print.c: a NativeProgram as text (`compilectl graph program`,
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
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "compiler/arena.h"
#include "compiler/codegen/program_print.h"
#include "compiler/graph.h"

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
