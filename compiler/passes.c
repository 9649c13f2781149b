/*
 * passes.c: the pass table and the verifiers of the passes that have no
 * verifier of their own (the loop IR's is compiler/ir/verify.c). See
 * passes.h.
 */
#include "compiler/passes.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "compiler/dump.h"
#include "compiler/emit.h"
#include "compiler/ops.h"

static int vfailf(gc_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int vfailf(gc_error *err, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return gc_errorf(err, GC_EINTERNAL, "%s", msg);
}

/* Is v[0..n) a permutation of 0..n-1? `seen` has n zeroed entries. */
static bool permutation(const int *v, int n, bool *seen) {
  for (int i = 0; i < n; i++) {
    if (v[i] < 0 || v[i] >= n || seen[v[i]])
      return false;
    seen[v[i]] = true;
  }
  return true;
}

/* ---- order ---- */

static int run_order(gc_pass_state *s, gc_error *err) {
  s->order = gc_arena_calloc(s->a, (size_t)s->g->nnodes + 1, sizeof *s->order);
  if (!s->order)
    return gc_errorf(err, GC_ENOMEM, "out of memory");
  return gc_canonical_order(s->g, s->order, err);
}

static int verify_order(gc_pass_state *s, gc_error *err) {
  bool *seen = gc_arena_calloc(s->a, (size_t)s->g->nnodes + 1, sizeof *seen);
  if (!seen)
    return gc_errorf(err, GC_ENOMEM, "out of memory");
  if (!permutation(s->order, s->g->nnodes, seen))
    return vfailf(err, "the node order is not a permutation of the nodes");
  return 0;
}

/* ---- functionalize ---- */

static int run_functionalize(gc_pass_state *s, gc_error *err) {
  return gc_functionalize(s->a, s->g, s->order, s->o, &s->f, err);
}

/* functionalize.h's promises: a program in functional form writes no input
 * but those mutated "in graph" (what it writes besides are its own fresh
 * values, such as batch norm's running statistics of a clone); its input and
 * output tables match its graph, and its node order covers every node once. */
static int verify_functional(gc_pass_state *s, gc_error *err) {
  const gc_functional *f = &s->f;
  const gc_graph *g = f->graph;
  if (!g || !f->order)
    return vfailf(err, "no program");
  if (f->functional == (f->eager_reason != NULL))
    return vfailf(err, "functional is %d but the eager reason is %s",
                  f->functional, f->eager_reason ? "set" : "not set");
  if (f->ninputs != g->ninputs)
    return vfailf(err, "%d input descriptions for %d inputs", f->ninputs,
                  g->ninputs);
  bool *seen = gc_arena_calloc(s->a, (size_t)g->nnodes + 1, sizeof *seen);
  if (!seen)
    return gc_errorf(err, GC_ENOMEM, "out of memory");
  if (!permutation(f->order, g->nnodes, seen))
    return vfailf(err, "the node order is not a permutation of the nodes");
  for (int i = 0; i < f->ninputs; i++)
    if (f->inputs[i].mutated_output < -1 ||
        f->inputs[i].mutated_output >= g->noutputs)
      return vfailf(err, "input %d: its new value is output %d of %d", i,
                    f->inputs[i].mutated_output, g->noutputs);
  for (int k = 0; k < f->noutputs; k++)
    if (f->outputs[k].program_output < 0 ||
        f->outputs[k].program_output >= g->noutputs)
      return vfailf(err, "output %d is program output %d of %d", k,
                    f->outputs[k].program_output, g->noutputs);
  if (!f->functional)
    return 0;
  /* value id -> 1 + the input it is, 0 for intermediates */
  int *input_of =
      gc_arena_calloc(s->a, (size_t)g->nvalues + 1, sizeof *input_of);
  if (!input_of)
    return gc_errorf(err, GC_ENOMEM, "out of memory");
  for (int i = 0; i < g->ninputs; i++)
    if (g->inputs[i].arg.kind == GC_ARG_TENSOR && g->inputs[i].arg.v)
      input_of[g->inputs[i].arg.v->id] = i + 1;
  for (int i = 0; i < g->nnodes; i++) {
    const gc_node *n = &g->nodes[i];
    for (int k = 0; k < n->nargs && n->op && n->op->schema; k++) {
      const gc_arg *arg = &n->args[k].arg;
      if (!gc_node_writes(n, n->args[k].param))
        continue;
      int nv = arg->kind == GC_ARG_TENSOR    ? 1
               : arg->kind == GC_ARG_TENSORS ? arg->n
                                             : 0;
      for (int j = 0; j < nv; j++) {
        const gc_value *v = arg->kind == GC_ARG_TENSOR ? arg->v : arg->vals[j];
        int in = v ? input_of[v->id] - 1 : -1;
        if (in >= 0 && f->inputs[in].type != GC_MUT_IN_GRAPH)
          return vfailf(err,
                        "node %d (%s) writes input %d (%%%s) of a functional "
                        "program, which is not mutated in the graph",
                        n->id, n->op->name, in, v->name);
      }
    }
  }
  return 0;
}

static const char *dump_functional(gc_pass_state *s) {
  gc_buf b = GC_BUF_INIT;
  gc_functional_print(&s->f, &b);
  const char *text =
      b.failed ? NULL : gc_arena_strdup(s->a, b.data ? b.data : "");
  gc_buf_free(&b);
  return text;
}

/* ---- emit ---- */

static int run_emit(gc_pass_state *s, gc_error *err) {
  return gc_emit_program(&s->f, s->a, &s->program, err);
}

/* ---- the back half ---- */

static int run_lower(gc_pass_state *s, gc_error *err) {
  s->nat.temp_min_bytes = s->o->separate_temporaries ? GC_TEMP_MIN_BYTES : 0;
  s->nat.eager_random = s->o->eager_random;
  return gc_native_lower(&s->nat, s->a, &s->f, s->be, err);
}

static int verify_ir(gc_pass_state *s, gc_error *err) {
  return ir_verify(&s->nat.ir, err);
}

static const char *dump_ir(gc_pass_state *s) {
  return ir_print(&s->nat.ir);
}

static int run_schedule(gc_pass_state *s, gc_error *err) {
  return gc_native_schedule(&s->nat, s->be, err);
}

static const char *dump_schedule(gc_pass_state *s) {
  return sc_print(&s->nat.ir, &s->nat.sched);
}

static int run_plan(gc_pass_state *s, gc_error *err) {
  return gc_native_plan(&s->nat, s->be, err);
}

typedef struct placed {
  int64_t lo, hi; /* bytes [lo, hi) of the arena */
  const ir_buf *b;
} placed;

static int by_first(const void *x, const void *y) {
  const placed *a = x, *b = y;
  return (a->b->first > b->b->first) - (a->b->first < b->b->first);
}

/* The memory plan: every arena buffer with a constant place lies inside
 * the arena, a buffer in place of another has its offset, and no two
 * buffers live in the same kernel share a byte (sched.h). Symbolic plans
 * are checked by the IR verifier's bounds only. */
static int verify_plan(gc_pass_state *s, gc_error *err) {
  int rc = ir_verify(&s->nat.ir, err);
  const ir_graph *ir = &s->nat.ir;
  const sc_schedule *sc = &s->nat.sched;
  if (rc)
    return rc;
  if (!sc->planned)
    return vfailf(err, "memory plan: not planned");
  if (sc->arena_bytes == IR_SYMBOLIC)
    return 0;
  placed *p = gc_arena_calloc(s->a, (size_t)ir->nbufs + 1, sizeof *p);
  if (!p)
    return gc_errorf(err, GC_ENOMEM, "out of memory");
  int n = 0;
  for (int i = 0; i < ir->nbufs; i++) {
    ir_buf *b = ir->bufs[i];
    if (b->kind != IR_BUF_ARENA || sc->local[i] || b->first < 0 || b->symbolic)
      continue;
    const ir_buf *home = ir_buf_storage(b);
    if (b->share) {
      if (home->kind == IR_BUF_ARENA && b->arena_offset != home->arena_offset)
        return vfailf(err,
                      "memory plan: buf%d at %lld in place of buf%d at %lld",
                      b->id, (long long)b->arena_offset, home->id,
                      (long long)home->arena_offset);
      continue;
    }
    int64_t bytes = sc_buf_bytes(b);
    if (b->arena_offset < 0 || bytes < 0 ||
        b->arena_offset > sc->arena_bytes - bytes)
      return vfailf(err,
                    "memory plan: buf%d [%lld, +%lld) is outside the arena "
                    "of %lld bytes",
                    b->id, (long long)b->arena_offset, (long long)bytes,
                    (long long)sc->arena_bytes);
    if (bytes > 0) /* an empty buffer shares no byte */
      p[n++] = (placed){b->arena_offset, b->arena_offset + bytes, b};
  }
  /* a sweep over the kernels: the buffers live at the current one, sorted
   * by offset (pairwise apart once checked), and each new buffer checked
   * against its two neighbours there; comparing every pair that shares
   * bytes would be quadratic where a thousand buffers reuse one slot */
  qsort(p, (size_t)n, sizeof *p, by_first);
  const placed **live = gc_arena_calloc(s->a, (size_t)n + 1, sizeof *live);
  if (!live)
    return gc_errorf(err, GC_ENOMEM, "out of memory");
  int nlive = 0;
  for (int i = 0; i < n; i++) {
    int kept = 0;
    for (int r = 0; r < nlive; r++)
      if (live[r]->b->last >= p[i].b->first)
        live[kept++] = live[r];
    nlive = kept;
    int at = 0, end = nlive;
    while (at < end) {
      int mid = at + (end - at) / 2;
      if (live[mid]->lo < p[i].lo)
        at = mid + 1;
      else
        end = mid;
    }
    const placed *other = at > 0 && live[at - 1]->hi > p[i].lo   ? live[at - 1]
                          : at < nlive && live[at]->lo < p[i].hi ? live[at]
                                                                 : NULL;
    if (other)
      return vfailf(err,
                    "memory plan: buf%d and buf%d overlap in the arena "
                    "while both are live (kernels %d..%d and %d..%d)",
                    other->b->id, p[i].b->id, other->b->first, other->b->last,
                    p[i].b->first, p[i].b->last);
    memmove(live + at + 1, live + at, (size_t)(nlive - at) * sizeof *live);
    live[at] = &p[i];
    nlive++;
  }
  return 0;
}

static int run_codegen(gc_pass_state *s, gc_error *err) {
  return gc_native_codegen(&s->nat, s->key_hex, err);
}

/* The C source against the schedule: its length, a segment per run of
 * kernels between ATen calls (each defined once, in order), and the
 * pointer slots. */
static int verify_codegen(gc_pass_state *s, gc_error *err) {
  const gc_csource *src = &s->nat.src;
  const sc_schedule *sc = &s->nat.sched;
  const ir_graph *ir = &s->nat.ir;
  if (!src->text || strlen(src->text) != src->len)
    return vfailf(err, "codegen: the source is not %zu bytes of text",
                  src->len);
  int last = -1;
  for (int k = 0; k < sc->nkernels; k++) {
    int seg = src->kernel_segment[k];
    if (sc_aten_call(sc->kernels[k]) != (seg == -1) ||
        (seg >= 0 && (seg < last || seg > last + 1)) || seg >= src->nsegments)
      return vfailf(err, "codegen: kernel %d (%s) in segment %d of %d", k,
                    sc->kernels[k]->name, seg, src->nsegments);
    if (seg >= 0)
      last = seg;
  }
  int defined = 0;
  for (const char *t = strstr(src->text, "\nint gc_seg"); t;
       t = strstr(t + 1, "\nint gc_seg")) {
    int seg = -1;
    if (sscanf(t, "\nint gc_seg%d(", &seg) != 1 || seg != defined)
      return vfailf(err, "codegen: segment %d defined where %d was due", seg,
                    defined);
    defined++;
  }
  if (defined != src->nsegments)
    return vfailf(err, "codegen: %d segments defined of %d", defined,
                  src->nsegments);
  for (int i = 0; i < ir->nbufs; i++) {
    int slot = src->buf_slot[i];
    if (slot < 0 || slot >= src->nslots ||
        (slot > 0 && src->slots[slot] != ir->bufs[i]))
      return vfailf(err, "codegen: buf%d has pointer slot %d of %d", i, slot,
                    src->nslots);
  }
  return 0;
}

static const char *dump_codegen(gc_pass_state *s) {
  return s->nat.src.text;
}

/* A program without segments (nothing was lowered into generated code:
 * its instructions are ATen calls) needs no shared object, so the C
 * compiler does not run for it (a few hundred milliseconds). */
static bool no_segments(const gc_pass_state *s) {
  return s->nat.src.nsegments == 0;
}

static int run_cc(gc_pass_state *s, gc_error *err) {
  return gc_native_build(&s->nat, s->be, err);
}

static int run_emit_native(gc_pass_state *s, gc_error *err) {
  return gc_native_emit(&s->nat, s->be, err);
}

static const char *dump_native_program(gc_pass_state *s) {
  return s->nat.program ? gc_native_program_str(s->a, s->nat.program) : "";
}

const gc_pass gc_passes[] = {
    {"order", false, false, run_order, NULL, verify_order, NULL},
    {"functionalize", false, false, run_functionalize, NULL, verify_functional,
     dump_functional},
    {"emit", false, false, run_emit, NULL, NULL, NULL},
    {"lower", true, false, run_lower, NULL, verify_ir, dump_ir},
    {"schedule", true, false, run_schedule, NULL, verify_ir, dump_schedule},
    {"plan", true, false, run_plan, NULL, verify_plan, dump_schedule},
    {"codegen", true, false, run_codegen, NULL, verify_codegen, dump_codegen},
    {"cc", true, true, run_cc, no_segments, NULL, NULL},
    {"emit-native", true, false, run_emit_native, NULL, NULL,
     dump_native_program},
};
const int gc_npasses = (int)(sizeof gc_passes / sizeof gc_passes[0]);

void gc_pass_state_init(gc_pass_state *s, gc_arena *a, const gc_graph *g,
                        const gc_options *o, const gc_backend *be,
                        const char *key_hex) {
  memset(s, 0, sizeof *s);
  s->a = a;
  s->g = g;
  s->o = o;
  s->be = be;
  s->key_hex = key_hex;
  s->verify = be && be->verify;
}

const gc_pass *gc_pass_find(const char *name) {
  for (int i = 0; i < gc_npasses; i++)
    if (!strcmp(gc_passes[i].name, name))
      return &gc_passes[i];
  return NULL;
}

bool gc_pass_state_native(const gc_pass_state *s) {
  return s->be && s->o->opt_level > 0 && s->f.functional && !s->o->training;
}

int gc_pass_run(const gc_pass *p, gc_pass_state *s, gc_error *err) {
  int rc = p->run(s, err);
  if (rc || !s->verify || !p->verify)
    return rc;
  rc = p->verify(s, err);
  if (rc && err) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "after %s: %.1000s", p->name, err->msg);
    memcpy(err->msg, msg, sizeof msg);
  }
  return rc;
}
