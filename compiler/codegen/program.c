/*
 * program.c: the artifact's NativeProgram from a schedule, its generated
 * code and the shared object (artifact.proto, docs/artifact.md).
 *
 * Values: one per buffer the runtime has to know (inputs, outputs, call
 * results, arena buffers a call reads or writes), one per strided view a
 * call or an output needs, and the literal arguments of calls. Each value
 * has a Placement. Instructions follow the kernels: a segment instruction
 * at the first kernel of each segment, a kernel call per call kernel,
 * before each an alloc of the program outputs and TEMP buffers it is the
 * first to write, and after each a free of the call results and TEMP
 * buffers nobody reads any more (unless they are program outputs).
 *
 * Everything is in the job's arena and a function of the schedule, which is
 * a function of the key: the same key gives the same bytes. The values and
 * their placements are made in values.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "compiler/emit.h"
#include "compiler/native.h"
#include "compiler/target.h"

#include "compiler/codegen/program_internal.h"

/* ---- buffers by kernel or input ----
 *
 * The instructions of each kernel name the buffers it frees or allocates,
 * and each program input its buffers: a scan of all buffers for each
 * kernel or input (with an array of all of them each time) made emitting
 * a program of many call kernels quadratic in time and memory (8,000
 * matrix products: 2 s and 500 MB). The buffers are grouped once instead. */

/* Buffer ids by a key: those with key k are ids[start[k] .. start[k + 1]),
 * ascending. */
typedef struct groups {
  int *start, *ids;
} groups;

/* Groups the n buffers by key[b] in [0, nkeys) (others are left out). */
static bool group(gc_arena *a, int n, int nkeys, const int *key, groups *g) {
  g->start = gc_arena_calloc(a, (size_t)nkeys + 2, sizeof *g->start);
  g->ids = gc_arena_calloc(a, (size_t)n + 1, sizeof *g->ids);
  int *at = gc_arena_calloc(a, (size_t)nkeys + 1, sizeof *at);
  if (!g->start || !g->ids || !at)
    return false;
  for (int b = 0; b < n; b++)
    if (key[b] >= 0 && key[b] < nkeys)
      g->start[key[b] + 1]++;
  for (int k = 0; k < nkeys; k++)
    g->start[k + 1] += g->start[k];
  memcpy(at, g->start, (size_t)nkeys * sizeof *at);
  for (int b = 0; b < n; b++)
    if (key[b] >= 0 && key[b] < nkeys)
      g->ids[at[key[b]]++] = b;
  return true;
}

/* What instructions() and the input passes look up per kernel and input. */
typedef struct bufidx {
  groups by_input;   /* INPUT buffers by graph input */
  groups by_last;    /* call results and TEMPs (or buffers living in one)
                        that are not program outputs, by last kernel */
  groups by_first;   /* OUTPUT and TEMP storage roots by first kernel writing
                        them */
  bool *out_storage; /* per buffer: a program output lives in it */
} bufidx;

static bool index_bufs(pe *e, bufidx *x) {
  ir_graph *ir = &e->n->ir;
  const gc_graph *g = e->n->f->graph;
  int nb = ir->nbufs, nk = e->n->sched.nkernels;
  int *key = gc_arena_calloc(e->a, (size_t)nb + 1, sizeof *key);
  bool *output = gc_arena_calloc(e->a, (size_t)nb + 1, sizeof *output);
  x->out_storage = gc_arena_calloc(e->a, (size_t)nb + 1, sizeof(bool));
  if (!key || !output || !x->out_storage)
    return false;
  for (int o = 0; o < ir->noutputs; o++)
    if (ir->outputs[o]) {
      output[ir->outputs[o]->buf->id] = true;
      x->out_storage[ir_buf_storage(ir->outputs[o]->buf)->id] = true;
    }
  for (int b = 0; b < nb; b++)
    key[b] = ir->bufs[b]->kind == IR_BUF_INPUT ? ir->bufs[b]->index : -1;
  if (!group(e->a, nb, g->ninputs, key, &x->by_input))
    return false;
  /* a call's result or a TEMP, or a view of one a kernel computed in
     place (a root's `last` covers the buffers living in it) */
  for (int b = 0; b < nb; b++) {
    ir_buf_kind rk = ir_buf_storage(ir->bufs[b])->kind;
    key[b] = (rk == IR_BUF_RESULT || rk == IR_BUF_TEMP) && !output[b]
                 ? ir->bufs[b]->last
                 : -1;
  }
  if (!group(e->a, nb, nk, key, &x->by_last))
    return false;
  /* per OUTPUT or TEMP root: the first kernel writing its memory (-1:
     none): an output's memory is first written by the earliest buffer
     living in it (a matrix product computed into it) */
  for (int b = 0; b < nb; b++)
    key[b] = -1;
  for (int b = 0; b < nb; b++) {
    ir_buf *bb = ir->bufs[b], *root = ir_buf_storage(bb);
    if ((root->kind == IR_BUF_OUTPUT || root->kind == IR_BUF_TEMP) &&
        bb->first >= 0 && (key[root->id] < 0 || bb->first < key[root->id]))
      key[root->id] = bb->first;
  }
  return group(e->a, nb, nk, key, &x->by_first);
}

/* ---- calls ---- */

static int op_index(pe *e, const gc_op *op) {
  for (int i = 0; i < e->nops; i++)
    if (e->ops[i] == op || strcmp(e->ops[i]->name, op->name) == 0)
      return i;
  if (e->nops == e->capops) {
    int cap = e->capops ? e->capops * 2 : 16;
    const gc_op **n = gc_arena_calloc(e->a, (size_t)cap, sizeof *n);
    if (!n) {
      e->failed = true;
      return -1;
    }
    if (e->nops)
      memcpy(n, e->ops, (size_t)e->nops * sizeof *n);
    e->ops = n;
    e->capops = cap;
  }
  e->ops[e->nops] = op;
  return e->nops++;
}

/* The name of a .out overload's output argument: its last argument when
 * that is keyword-only and written ("out", "grad_input"), else "out". */
static const char *out_arg_name(const gc_op *op) {
  const gc_schema *sc = op->schema;
  const gc_schema_arg *last = sc->nargs ? &sc->args[sc->nargs - 1] : NULL;
  return last && last->kwarg_only && last->is_write ? last->name : "out";
}

static Compiled__V1__CallArgument *call_arg(pe *e, const char *name,
                                            bool keyword, int value) {
  Compiled__V1__CallArgument *c = NEW(e, Compiled__V1__CallArgument,
                                      compiled__v1__call_argument__descriptor);
  if (c) {
    c->name = (char *)name;
    c->keyword = keyword;
    c->value = value;
  }
  return c;
}

static int arg_value(pe *e, const ir_call_arg *ca) {
  const gc_arg *a = &ca->arg;
  if (a->kind == GC_ARG_TENSOR && ca->bufs)
    return ca->bufs[0] ? pe_view_value(e, ca->views[0]) : -1;
  if ((a->kind == GC_ARG_TENSORS || a->kind == GC_ARG_OPT_TENSORS) &&
      ca->bufs) {
    int *items = gc_arena_calloc(e->a, (size_t)a->n + 1, sizeof *items);
    if (!items)
      return -1;
    for (int i = 0; i < a->n; i++)
      items[i] = ca->bufs[i] ? pe_view_value(e, ca->views[i]) : -1;
    return pe_list_value(e, items, a->n, a->kind == GC_ARG_OPT_TENSORS);
  }
  return pe_literal(e, a);
}

static Compiled__V1__NativeInstruction *call(pe *e, const ir_node *n) {
  Compiled__V1__KernelCall *k =
      NEW(e, Compiled__V1__KernelCall, compiled__v1__kernel_call__descriptor);
  Compiled__V1__NativeInstruction *ins =
      NEW(e, Compiled__V1__NativeInstruction,
          compiled__v1__native_instruction__descriptor);
  if (!k || !ins)
    return NULL;
  k->op = op_index(e, n->op);
  k->node = n->gnode ? n->gnode->id : -1;
  int nargs = n->nargs + (n->out_variant ? 1 : 0);
  k->n_args = (size_t)nargs;
  k->args = gc_arena_calloc(e->a, (size_t)nargs + 1, sizeof *k->args);
  if (!k->args) {
    e->failed = true;
    return NULL;
  }
  for (int i = 0; i < n->nargs; i++)
    k->args[i] = call_arg(e, n->args[i].name, n->args[i].keyword,
                          arg_value(e, &n->args[i]));
  if (n->out_variant)
    k->args[n->nargs] =
        call_arg(e, out_arg_name(n->op), true, pe_buf_value(e, n->out));
  /* results: one per schema return of the operator called */
  int nret = n->op->schema->nrets;
  k->n_outputs = (size_t)nret;
  k->outputs = gc_arena_calloc(e->a, (size_t)nret + 1, sizeof *k->outputs);
  if (!k->outputs) {
    e->failed = true;
    return NULL;
  }
  for (int r = 0; r < nret; r++) {
    k->outputs[r] = -1;
    if (n->out_variant) {
      if (r == 0)
        k->outputs[r] = pe_buf_value(e, n->out);
      continue;
    }
    const gc_arg *o = r < n->gnode->noutputs ? &n->gnode->outputs[r] : NULL;
    if (o && o->kind == GC_ARG_TENSORS) {
      int *items = gc_arena_calloc(e->a, (size_t)o->n + 1, sizeof *items);
      if (!items)
        return NULL;
      for (int i = 0; i < o->n; i++) {
        items[i] = -1;
        for (int b = 0; b < e->n->ir.nbufs; b++) {
          ir_buf *bb = e->n->ir.bufs[b];
          if (bb->kind == IR_BUF_RESULT && bb->def == n &&
              bb->value == o->vals[i])
            items[i] = pe_buf_value(e, bb);
        }
      }
      k->outputs[r] = pe_list_value(e, items, o->n, false);
    } else if (n->results[r]) {
      k->outputs[r] = pe_buf_value(e, n->results[r]);
    }
  }
  ins->kind_case = COMPILED__V1__NATIVE_INSTRUCTION__KIND_KERNEL;
  ins->kernel = k;
  return ins;
}

/* ---- the program ---- */

static bool push_ins(pe *e, Compiled__V1__NativeInstruction *ins, int *cap) {
  Compiled__V1__NativeProgram *p = e->p;
  if (!ins)
    return false;
  if ((int)p->n_instructions == *cap) {
    int nc = *cap ? *cap * 2 : 32;
    Compiled__V1__NativeInstruction **n =
        gc_arena_calloc(e->a, (size_t)nc, sizeof *n);
    if (!n)
      return false;
    if (p->n_instructions)
      memcpy(n, p->instructions, p->n_instructions * sizeof *n);
    p->instructions = n;
    *cap = nc;
  }
  p->instructions[p->n_instructions++] = ins;
  return true;
}

/* A free or alloc instruction of n values (none: no instruction). */
static bool push_list(pe *e, Compiled__V1__NativeInstruction__KindCase kind,
                      int *items, int n, int *cap) {
  if (!n)
    return true;
  Compiled__V1__NativeInstruction *ins =
      NEW(e, Compiled__V1__NativeInstruction,
          compiled__v1__native_instruction__descriptor);
  Compiled__V1__ValueList *l =
      NEW(e, Compiled__V1__ValueList, compiled__v1__value_list__descriptor);
  if (!ins || !l)
    return false;
  l->n_items = (size_t)n;
  l->items = items;
  ins->kind_case = kind;
  if (kind == COMPILED__V1__NATIVE_INSTRUCTION__KIND_FREE)
    ins->free = l;
  else
    ins->alloc = l;
  return push_ins(e, ins, cap);
}

/* Frees the results last used by kernel k (and not program outputs). */
static bool frees_after(pe *e, const bufidx *x, int k, int *cap) {
  const groups *g = &x->by_last;
  int *items = gc_arena_calloc(
      e->a, (size_t)(g->start[k + 1] - g->start[k]) + 1, sizeof *items);
  if (!items)
    return false;
  int n = 0;
  for (int j = g->start[k]; j < g->start[k + 1]; j++)
    if (e->buf_value[g->ids[j]] >= 0)
      items[n++] = e->buf_value[g->ids[j]];
  return push_list(e, COMPILED__V1__NATIVE_INSTRUCTION__KIND_FREE, items, n,
                   cap);
}

static int by_id(const void *a, const void *b) {
  return *(const int *)a - *(const int *)b;
}

/* An alloc of the program outputs (and TEMPs) first written by kernels
 * [k, end]. Outputs are made when needed, not when the call starts, so
 * they add nothing to the peak before. */
static bool allocs_for(pe *e, const bufidx *x, int k, int end, int *cap) {
  ir_graph *ir = &e->n->ir;
  const groups *g = &x->by_first;
  int m = g->start[end + 1] - g->start[k];
  int *ids = gc_arena_calloc(e->a, (size_t)m + 1, sizeof *ids);
  int *items = gc_arena_calloc(e->a, (size_t)m + 1, sizeof *items);
  if (!ids || !items)
    return false;
  memcpy(ids, g->ids + g->start[k], (size_t)m * sizeof *ids);
  qsort(ids, (size_t)m, sizeof *ids, by_id); /* in buffer order */
  for (int j = 0; j < m; j++)
    items[j] = pe_buf_value(e, ir->bufs[ids[j]]);
  return push_list(e, COMPILED__V1__NATIVE_INSTRUCTION__KIND_ALLOC, items, m,
                   cap);
}

static int instructions(pe *e, const bufidx *x) {
  const sc_schedule *s = &e->n->sched;
  const gc_csource *src = &e->n->src;
  int cap = 0, last_seg = -1;
  e->after_kernel =
      gc_arena_calloc(e->a, (size_t)s->nkernels + 1, sizeof *e->after_kernel);
  if (!e->after_kernel)
    return GC_ENOMEM;
  for (int k = 0; k < s->nkernels; k++) {
    const sc_kernel *kn = s->kernels[k];
    bool aten = sc_aten_call(kn);
    int end = k; /* the instruction's last kernel */
    if (!aten && src->kernel_segment[k] != last_seg)
      while (end + 1 < s->nkernels && !sc_aten_call(s->kernels[end + 1]) &&
             src->kernel_segment[end + 1] == src->kernel_segment[k])
        end++;
    if ((aten || src->kernel_segment[k] != last_seg) &&
        !allocs_for(e, x, k, end, &cap))
      return GC_ENOMEM;
    if (aten) {
      if (!push_ins(e, call(e, kn->call), &cap))
        return GC_ENOMEM;
    } else if (src->kernel_segment[k] != last_seg) {
      last_seg = src->kernel_segment[k];
      Compiled__V1__NativeInstruction *ins =
          NEW(e, Compiled__V1__NativeInstruction,
              compiled__v1__native_instruction__descriptor);
      if (!ins)
        return GC_ENOMEM;
      ins->kind_case = COMPILED__V1__NATIVE_INSTRUCTION__KIND_SEGMENT;
      ins->segment = last_seg;
      if (!push_ins(e, ins, &cap))
        return GC_ENOMEM;
    }
    if (!frees_after(e, x, k, &cap))
      return GC_ENOMEM;
    e->after_kernel[k] = (int)e->p->n_instructions;
  }
  return e->failed ? GC_ENOMEM : 0;
}

/* Per program input: the instruction before which no instruction reads it
 * any more (0: none reads it), or -1: it must stay (not a tensor, written
 * by the program, returned or possibly aliased by a call's result, or a
 * program output). A runner whose caller hands over its references may
 * drop the input there (artifact.proto, NativeProgram.input_free_at). */
static int input_free_at(pe *e, const bufidx *bx) {
  const gc_graph *g = e->n->f->graph;
  ir_graph *ir = &e->n->ir;
  int nk = e->n->sched.nkernels;
  const groups *in = &bx->by_input;
  Compiled__V1__NativeProgram *p = e->p;
  p->n_input_free_at = (size_t)g->ninputs;
  p->input_free_at =
      gc_arena_calloc(e->a, (size_t)g->ninputs + 1, sizeof *p->input_free_at);
  if (!p->input_free_at)
    return GC_ENOMEM;
  for (int i = 0; i < g->ninputs; i++) {
    int last = -1, at = 0;
    bool found = false;
    for (int j = in->start[i]; j < in->start[i + 1]; j++) {
      ir_buf *x = ir->bufs[in->ids[j]];
      found = true;
      bool output = bx->out_storage[x->id];
      if (x->mutated || output || x->last >= nk)
        at = -1;
      if (x->last > last)
        last = x->last;
    }
    if (!found)
      at = -1;
    else if (at == 0 && last >= 0)
      at = e->after_kernel[last];
    p->input_free_at[i] = at;
  }
  return 0;
}

/* Program inputs: the INPUT buffer of a tensor input; a literal or a
 * placeholder for the others (the runner binds the caller's value). */
static int inputs(pe *e, const bufidx *x) {
  const gc_graph *g = e->n->f->graph;
  ir_graph *ir = &e->n->ir;
  const groups *in = &x->by_input;
  Compiled__V1__NativeProgram *p = e->p;
  p->n_inputs = (size_t)g->ninputs;
  p->inputs = gc_arena_calloc(e->a, (size_t)g->ninputs + 1, sizeof *p->inputs);
  if (!p->inputs)
    return GC_ENOMEM;
  for (int i = 0; i < g->ninputs; i++) {
    int v = in->start[i] < in->start[i + 1]
                ? pe_buf_value(e, ir->bufs[in->ids[in->start[i]]])
                : -1;
    if (v < 0) {
      const gc_arg *a = &g->inputs[i].arg;
      if (a->kind == GC_ARG_SYM_INT || a->kind == GC_ARG_SYM_FLOAT ||
          a->kind == GC_ARG_SYM_BOOL || a->kind == GC_ARG_TENSOR) {
        gc_arg none = {.kind = GC_ARG_NONE};
        v = pe_literal(e, &none); /* bound to the caller's value at run time */
      } else {
        v = pe_literal(e, a);
      }
    }
    if (v < 0)
      return GC_EUNSUPPORTED;
    p->inputs[i] = v;
  }
  return 0;
}

static int outputs(pe *e) {
  const gc_graph *g = e->n->f->graph;
  ir_graph *ir = &e->n->ir;
  Compiled__V1__NativeProgram *p = e->p;
  p->n_outputs = (size_t)g->noutputs;
  p->outputs =
      gc_arena_calloc(e->a, (size_t)g->noutputs + 1, sizeof *p->outputs);
  if (!p->outputs)
    return GC_ENOMEM;
  for (int i = 0; i < g->noutputs; i++) {
    int v;
    if (i < ir->noutputs && ir->outputs[i])
      v = pe_view_value(e, ir->outputs[i]);
    else if (g->outputs[i].kind == GC_ARG_TENSOR)
      return gc_errorf(e->err, GC_EINTERNAL,
                       "native: program output %d has no buffer", i);
    else
      v = pe_literal(e, &g->outputs[i]);
    if (v < 0)
      return GC_EUNSUPPORTED;
    p->outputs[i] = v;
  }
  return 0;
}

static int slots(pe *e) {
  const gc_csource *src = &e->n->src;
  Compiled__V1__NativeProgram *p = e->p;
  p->n_slots = (size_t)src->nslots;
  p->slots = gc_arena_calloc(e->a, (size_t)src->nslots + 1, sizeof *p->slots);
  if (!p->slots)
    return GC_ENOMEM;
  p->slots[0] = -1;
  for (int i = 1; i < src->nslots; i++)
    p->slots[i] = pe_buf_value(e, src->slots[i]);
  return e->failed ? GC_ENOMEM : 0;
}

static int operators(pe *e) {
  Compiled__V1__NativeProgram *p = e->p;
  p->n_operators = (size_t)e->nops;
  p->operators =
      gc_arena_calloc(e->a, (size_t)e->nops + 1, sizeof *p->operators);
  if (!p->operators)
    return GC_ENOMEM;
  for (int i = 0; i < e->nops; i++) {
    Compiled__V1__Operator *o =
        NEW(e, Compiled__V1__Operator, compiled__v1__operator__descriptor);
    if (!o)
      return GC_ENOMEM;
    o->name = (char *)e->ops[i]->name;
    o->schema = (char *)e->ops[i]->text;
    p->operators[i] = o;
  }
  return 0;
}

static int code(pe *e, const gc_backend *be) {
  gc_native *n = e->n;
  Compiled__V1__NativeProgram *p = e->p;
  Compiled__V1__NativeCode *c =
      NEW(e, Compiled__V1__NativeCode, compiled__v1__native_code__descriptor);
  Compiled__V1__MemoryPlan *m =
      NEW(e, Compiled__V1__MemoryPlan, compiled__v1__memory_plan__descriptor);
  Compiled__V1__NativeSummary *s = NEW(
      e, Compiled__V1__NativeSummary, compiled__v1__native_summary__descriptor);
  if (!c || !m || !s)
    return GC_ENOMEM;
  c->shared_object.data = n->so;
  c->shared_object.len = n->so_len;
  c->n_entry_symbols = (size_t)n->src.nsegments;
  c->entry_symbols =
      gc_arena_calloc(e->a, (size_t)n->src.nsegments + 1, sizeof(char *));
  if (!c->entry_symbols)
    return GC_ENOMEM;
  for (int i = 0; i < n->src.nsegments; i++)
    c->entry_symbols[i] = gc_arena_printf(e->a, "gc_seg%d", i);
  static char *libs_math[] = {"libgomp.so.1", "libmvec.so.1",
                              "libsleefgnuabi.so.3", "libm.so.6",
                              "libsleef.so.3"};
  /* no segment: no code (no shared object, no C, nothing to load; the
   * C compiler did not run, pipeline.c) */
  bool code = n->src.nsegments > 0;
  size_t nmath = !code                     ? 0
                 : n->src.uses_sleef       ? 5
                 : n->src.uses_vector_math ? 4
                                           : 1;
  c->n_runtime_libraries =
      nmath + (n->src.uses_blas ? 1 : 0) + (n->src.uses_dnnl ? 1 : 0);
  c->runtime_libraries =
      gc_arena_calloc(e->a, c->n_runtime_libraries + 1, sizeof(char *));
  if (!c->runtime_libraries)
    return GC_ENOMEM;
  for (size_t i = 0; i < nmath; i++)
    c->runtime_libraries[i] = libs_math[i];
  size_t nlib = nmath;
  if (n->src.uses_blas)
    c->runtime_libraries[nlib++] = "libblas.so.3";
  if (n->src.uses_dnnl)
    c->runtime_libraries[nlib++] = "libdnnl.so.2";
  const char *march =
      code && be && be->target ? gc_target_march(be->target) : NULL;
  c->target = (char *)(march ? march : "");
  if (n->sched.arena_bytes == IR_SYMBOLIC) {
    m->arena_bytes = 0;
    m->arena_bytes_expr = ir_sym_text(&n->ir, n->sched.sarena_bytes);
  } else {
    m->arena_bytes = n->sched.arena_bytes;
  }
  s->nodes = n->stats.nodes;
  s->native = n->stats.native;
  s->extern_ = n->stats.extern_;
  s->fallback = n->stats.fallback;
  s->kernels = n->src.nkernels;
  s->local_buffers = n->sched.nlocal;
  s->n_fallback_ops = (size_t)n->stats.nfallback_ops;
  s->fallback_ops = (char **)n->stats.fallback_ops;
  p->code = c;
  p->memory_plan = m;
  p->summary = s;
  if (!code)
    return 0;
  /* the C source, compressed */
  uLongf clen = compressBound((uLong)n->src.len);
  uint8_t *z = gc_arena_alloc(e->a, clen ? clen : 1);
  if (!z || compress2(z, &clen, (const Bytef *)n->src.text, (uLong)n->src.len,
                      6) != Z_OK)
    return GC_ENOMEM;
  p->source_zlib.data = z;
  p->source_zlib.len = clen;
  return 0;
}

/* ---- size symbols and guards ---- */

/* Where symbol i is read from: the first input dim whose size is exactly
 * the symbol, else a SymInt input that is. */
static bool symbol_source(pe *e, int i, int *input, int *dim) {
  const gc_graph *g = e->n->f->graph;
  const gc_symbols *sy = &e->n->f->symbols;
  for (int k = 0; k < g->ninputs; k++) {
    const gc_arg *a = &g->inputs[k].arg;
    if (a->kind == GC_ARG_TENSOR && a->v && a->v->kind == GC_VALUE_TENSOR) {
      const gc_tensor_meta *m = &a->v->meta;
      for (int d = 0; d < m->rank; d++) {
        const gc_symexpr *t = m->sizes[d].tree;
        if (t && t->kind == GC_SX_SYM && gc_symbols_find(sy, t->name) == i) {
          *input = k;
          *dim = d;
          return true;
        }
      }
    }
  }
  for (int k = 0; k < g->ninputs; k++) {
    const gc_arg *a = &g->inputs[k].arg;
    if (a->kind == GC_ARG_SYM_INT && a->sym.v && a->sym.v->sym.tree) {
      const gc_symexpr *t = a->sym.v->sym.tree;
      if (t->kind == GC_SX_SYM && gc_symbols_find(sy, t->name) == i) {
        *input = k;
        *dim = -1;
        return true;
      }
    }
  }
  return false;
}

static int symbols_and_guards(pe *e) {
  ir_graph *ir = &e->n->ir;
  Compiled__V1__NativeProgram *p = e->p;
  if (!ir->nsyms)
    return 0;
  p->n_symbols = (size_t)ir->nsyms;
  p->symbols = gc_arena_calloc(e->a, (size_t)ir->nsyms + 1, sizeof *p->symbols);
  if (!p->symbols)
    return GC_ENOMEM;
  for (int i = 0; i < ir->nsyms; i++) {
    Compiled__V1__SizeSymbol *y =
        NEW(e, Compiled__V1__SizeSymbol, compiled__v1__size_symbol__descriptor);
    if (!y)
      return GC_ENOMEM;
    y->name = gc_arena_printf(e->a, "s%d", i);
    if (!symbol_source(e, i, &y->input, &y->dim))
      return gc_errorf(e->err, GC_EUNSUPPORTED,
                       "native emit: symbol s%d is no input's size and no "
                       "SymInt input: the runtime could not read it",
                       i);
    p->symbols[i] = y;
  }
  p->n_guards = (size_t)ir->nguards;
  p->guards = gc_arena_calloc(e->a, (size_t)ir->nguards + 1, sizeof *p->guards);
  if (!p->guards)
    return GC_ENOMEM;
  for (int i = 0; i < ir->nguards; i++) {
    const ir_guard *gd = &ir->guards[i];
    Compiled__V1__Guard *m =
        NEW(e, Compiled__V1__Guard, compiled__v1__guard__descriptor);
    if (!m)
      return GC_ENOMEM;
    const char *a = ir_sym_text(ir, gd->a), *b = ir_sym_text(ir, gd->b);
    switch (gd->op) {
    case IR_GUARD_EQ:
      m->expr = gc_arena_printf(e->a, "%s == %s", a, b);
      break;
    case IR_GUARD_NE:
      m->expr = gc_arena_printf(e->a, "%s != %s", a, b);
      break;
    case IR_GUARD_LE:
      m->expr = gc_arena_printf(e->a, "%s <= %s", a, b);
      break;
    case IR_GUARD_MOD0:
      m->expr = gc_arena_printf(e->a, "(%s) %% %s == 0", a, b);
      break;
    }
    m->kind = (Compiled__V1__GuardKind)gd->kind;
    m->text =
        gd->text ? gc_arena_printf(e->a, "%s: %s", m->expr, gd->text) : m->expr;
    p->guards[i] = m;
  }
  return 0;
}

int gc_native_emit(gc_native *n, const gc_backend *be, gc_error *err) {
  pe e = {.n = n, .a = n->a, .err = err};
  e.p = NEW(&e, Compiled__V1__NativeProgram,
            compiled__v1__native_program__descriptor);
  e.buf_value = gc_arena_calloc(n->a, (size_t)n->ir.nbufs + 1, sizeof(int));
  if (!e.p || !e.buf_value)
    return gc_errorf(err, GC_ENOMEM, "native emit: out of memory");
  for (int i = 0; i < n->ir.nbufs; i++)
    e.buf_value[i] = -1;
  bufidx x;
  if (!index_bufs(&e, &x))
    return gc_errorf(err, GC_ENOMEM, "native emit: out of memory");
  int rc = inputs(&e, &x);
  if (!rc)
    rc = instructions(&e, &x);
  if (!rc)
    rc = outputs(&e);
  if (!rc)
    rc = input_free_at(&e, &x);
  if (!rc)
    rc = slots(&e);
  if (!rc)
    rc = operators(&e);
  if (!rc)
    rc = code(&e, be);
  if (!rc)
    rc = symbols_and_guards(&e);
  if (rc || e.failed)
    return err && err->code
               ? err->code
               : gc_errorf(err, rc ? rc : GC_ENOMEM, "native emit: %s",
                           gc_strerror(rc ? rc : GC_ENOMEM));
  e.p->n_values = (size_t)e.nvalues;
  e.p->values = e.values;
  e.p->n_placements = (size_t)e.nvalues;
  e.p->placements = e.places;
  n->program = e.p;
  return 0;
}
