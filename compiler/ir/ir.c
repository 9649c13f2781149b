/*
 * ir.c: the loop IR's graph, buffers, nodes, probes and guards. See ir.h
 * for the model; expressions are expr.c, tensors tensor.c, the verifier
 * verify.c, the printer compiler/dump_ir.c.
 */
#include "compiler/ir/ir.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ir/half.h"

static const struct {
  int arity;
  const char *name;
} op_info[] = {
#define X(name, arity, text) {arity, text},
    IR_OPS(X)
#undef X
};

int ir_op_arity(ir_op op) {
  return op < IR_OP_COUNT ? op_info[op].arity : 0;
}

const char *ir_op_name(ir_op op) {
  return op < IR_OP_COUNT ? op_info[op].name : "?";
}

const char *ir_reduction_name(ir_reduction r) {
  static const char *names[] = {
#define X(name, text) text,
      IR_REDUCTIONS(X)
#undef X
  };
  return r < sizeof names / sizeof names[0] ? names[r] : "?";
}

int ir_graph_init(ir_graph *ir, gc_arena *a, const gc_graph *g) {
  memset(ir, 0, sizeof *ir);
  ir->a = a;
  ir->g = g;
  ir->nebuckets = 1024;
  ir->ebuckets = gc_arena_calloc(a, ir->nebuckets, sizeof *ir->ebuckets);
  if (!ir->ebuckets || gc_symctx_init(&ir->sym, a) != 0)
    return GC_ENOMEM;
  return 0;
}

/* Appends p to a growing arena array. */
static bool push(gc_arena *a, void ***arr, int *n, int *cap, void *p) {
  if (*n == *cap) {
    int nc = *cap ? *cap * 2 : 32;
    void **na = gc_arena_calloc(a, (size_t)nc, sizeof *na);
    if (!na)
      return false;
    if (*n)
      memcpy(na, *arr, (size_t)*n * sizeof *na);
    *arr = na;
    *cap = nc;
  }
  (*arr)[(*n)++] = p;
  return true;
}

/* a * b and a + b, saturating at INT64_MAX (sizes a graph states may be
 * that large; the verifier then refuses the buffer, IR_MAX_BUF_BYTES) */
static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

void ir_contiguous_strides(int rank, const int64_t *sizes, int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s = sat_mul(s, sizes[i] > 1 ? sizes[i] : 1);
  }
}

gc_sym **ir_syms_of(ir_graph *ir, int n, const int64_t *v) {
  gc_sym **e = gc_arena_calloc(ir->a, (size_t)n + 1, sizeof *e);
  if (!e) {
    ir->oom = true;
    return NULL;
  }
  for (int i = 0; i < n; i++)
    if (!(e[i] = gc_sym_const(&ir->sym, v[i]))) {
      ir->oom = true;
      return NULL;
    }
  return e;
}

void ir_ints_of(int n, gc_sym *const *e, int64_t *v) {
  for (int i = 0; i < n; i++)
    if (!gc_sym_const_of(e[i], &v[i]))
      v[i] = IR_SYMBOLIC;
}

bool ir_any_symbolic(const ir_graph *ir, int n, gc_sym *const *e) {
  for (int i = 0; i < n; i++)
    if (e[i] && e[i]->kind != GC_SYM_CONST && gc_sym_symbolic(&ir->sym, e[i]))
      return true;
  return false;
}

/* numel and span of a symbolic layout */
static void sym_extent(ir_graph *ir, ir_buf *b) {
  gc_symctx *s = &ir->sym;
  gc_sym *numel = gc_sym_const(s, 1), *span = gc_sym_const(s, 1);
  for (int i = 0; i < b->rank; i++) {
    numel = gc_sym_mul(s, numel, b->ssizes[i]);
    span = gc_sym_add(
        s, span,
        gc_sym_mul(s, gc_sym_addc(s, b->ssizes[i], -1), b->sstrides[i]));
  }
  /* a tensor without elements spans nothing; with sizes of at least 1 the
   * formula holds (a dense layout's is its numel) */
  if (span && span->lo < 0)
    span = gc_sym_max(s, span, gc_sym_const(s, 0));
  b->snumel = numel;
  b->sspan = span;
  if (!numel || !span)
    ir->oom = true;
}

ir_buf *ir_buf_new_s(ir_graph *ir, ir_buf_kind kind, gc_dtype dtype, int rank,
                     gc_sym *const *sizes, gc_sym *const *strides) {
  int64_t sz[IR_MAX_RANK + 1], st[IR_MAX_RANK + 1];
  gc_sym *sst[IR_MAX_RANK + 1];
  if (rank > IR_MAX_RANK)
    return NULL;
  if (strides)
    memcpy(sst, strides, (size_t)rank * sizeof *sst);
  else
    ir_contiguous_sstrides(ir, rank, sizes, sst);
  ir_ints_of(rank, sizes, sz);
  ir_ints_of(rank, sst, st);
  bool sym = ir_any_symbolic(ir, rank, sizes) || ir_any_symbolic(ir, rank, sst);
  if (!sym) /* constants: the static buffer */
    return ir_buf_new(ir, kind, dtype, rank, sz, st);
  ir_buf *b = ir_buf_new(ir, kind, dtype, rank, sz, st);
  if (!b)
    return NULL;
  b->symbolic = true;
  memcpy(b->ssizes, sizes, (size_t)rank * sizeof *sizes);
  memcpy(b->sstrides, sst, (size_t)rank * sizeof *sst);
  sym_extent(ir, b);
  b->numel = b->span = IR_SYMBOLIC;
  return b;
}

void ir_contiguous_sstrides(ir_graph *ir, int rank, gc_sym *const *sizes,
                            gc_sym **strides) {
  gc_symctx *s = &ir->sym;
  gc_sym *st = gc_sym_const(s, 1);
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = st;
    int64_t v;
    if (gc_sym_const_of(sizes[i], &v))
      st = gc_sym_scale(s, st, v > 1 ? v : 1);
    else
      st = gc_sym_mul(s, st, sizes[i]);
  }
}

ir_buf *ir_buf_new(ir_graph *ir, ir_buf_kind kind, gc_dtype dtype, int rank,
                   const int64_t *sizes, const int64_t *strides) {
  ir_buf *b = gc_arena_zalloc(ir->a, sizeof *b);
  if (!b || !(b->sizes = gc_arena_calloc(ir->a, (size_t)rank + 1, 8)) ||
      !(b->strides = gc_arena_calloc(ir->a, (size_t)rank + 1, 8))) {
    ir->oom = true;
    return NULL;
  }
  b->id = ir->nbufs;
  b->kind = kind;
  b->index = -1;
  b->dtype = dtype;
  b->rank = rank;
  b->numel = 1;
  b->span = 1;
  if (rank)
    memcpy(b->sizes, sizes, (size_t)rank * 8);
  if (strides && rank)
    memcpy(b->strides, strides, (size_t)rank * 8);
  else
    ir_contiguous_strides(rank, sizes, b->strides);
  for (int i = 0; i < rank; i++) {
    b->numel = sat_mul(b->numel, sizes[i]);
    if (sizes[i] > 0)
      b->span = sat_add(b->span, sat_mul(sizes[i] - 1, b->strides[i]));
  }
  if (b->numel == 0)
    b->span = 0;
  b->first = b->last = -1;
  if (!(b->ssizes = ir_syms_of(ir, rank, b->sizes)) ||
      !(b->sstrides = ir_syms_of(ir, rank, b->strides)) ||
      !(b->snumel = gc_sym_const(&ir->sym, b->numel)) ||
      !(b->sspan = gc_sym_const(&ir->sym, b->span))) {
    ir->oom = true;
    return NULL;
  }
  if (!push(ir->a, (void ***)&ir->bufs, &ir->nbufs, &ir->capbufs, b)) {
    ir->oom = true;
    return NULL;
  }
  return b;
}

ir_node *ir_node_new(ir_graph *ir, ir_node_kind kind) {
  ir_node *n = gc_arena_zalloc(ir->a, sizeof *n);
  if (!n) {
    ir->oom = true;
    return NULL;
  }
  n->kind = kind;
  n->id = -1;
  return n;
}

int ir_node_append(ir_graph *ir, ir_node *n) {
  n->id = ir->nnodes;
  if (!push(ir->a, (void ***)&ir->nodes, &ir->nnodes, &ir->capnodes, n)) {
    ir->oom = true;
    return GC_ENOMEM;
  }
  return 0;
}

const ir_view *ir_call_view(const ir_node *n, const char *name) {
  for (int a = 0; a < n->nargs; a++)
    if (n->args[a].arg.kind != GC_ARG_NONE && n->args[a].views &&
        n->args[a].bufs && n->args[a].bufs[0] && !strcmp(n->args[a].name, name))
      return n->args[a].views[0];
  return NULL;
}

bool ir_node_is_call(const ir_node *n) {
  switch (n->kind) {
  case IR_POINTWISE:
  case IR_REDUCTION:
    return false;
  case IR_EXTERN:
  case IR_FALLBACK:
  case IR_SCAN:
  case IR_SCATTER:
  case IR_INTERP:
    return true;
  }
  return false;
}

bool ir_node_is_generated(const ir_node *n) {
  switch (n->kind) {
  case IR_POINTWISE:
  case IR_REDUCTION:
  case IR_EXTERN: /* (generated code may make some: sc_kernel.in_c) */
  case IR_FALLBACK:
    return false;
  case IR_SCAN:
  case IR_SCATTER:
  case IR_INTERP:
    return true;
  }
  return false;
}

const char *ir_node_kind_name(ir_node_kind kind) {
  switch (kind) {
  case IR_POINTWISE:
    return "pointwise";
  case IR_REDUCTION:
    return "reduce";
  case IR_EXTERN:
    return "extern";
  case IR_FALLBACK:
    return "fallback";
  case IR_SCAN:
    return "scan";
  case IR_SCATTER:
    return "scatter";
  case IR_INTERP:
    return "interp";
  }
  return "?";
}

bool ir_scatter_by_token(const ir_node *n) {
  return n->kind == IR_SCATTER && (n->scatter.op == IR_SCATTER_EMBEDDING ||
                                   n->scatter.op == IR_SCATTER_INDEX_PUT);
}

void ir_scatter_views(const ir_node *n, const ir_view **self,
                      const ir_view **index, const ir_view **src) {
  ir_scatter_op op = n->scatter.op;
  bool emb = op == IR_SCATTER_EMBEDDING;
  *self = emb || n->scatter.fill ? NULL : ir_call_view(n, "self");
  *index = ir_call_view(n, ir_scatter_by_token(n) ? "indices" : "index");
  *src = ir_call_view(n, emb                          ? "grad_output"
                         : op == IR_SCATTER_INDEX_PUT ? "values"
                         : op == IR_SCATTER_INDEX_ADD ? "source"
                                                      : "src");
}

ir_buf *ir_buf_storage(ir_buf *b) {
  while (b && b->share)
    b = b->share;
  return b;
}

static double probe(const ir_graph *ir, const gc_sym *e, int depth) {
  double r;
  if (depth > 64)
    return 0;
  switch (e->kind) {
  case GC_SYM_CONST:
    return (double)e->c;
  case GC_SYM_VAR:
    return ir->sym.vars[e->var].size ? 1021 : 0;
  case GC_SYM_ADD:
    r = (double)e->c;
    for (int i = 0; i < e->n; i++)
      r += (double)e->coefs[i] * probe(ir, e->ops[i], depth + 1);
    return r;
  case GC_SYM_MUL:
    r = 1;
    for (int i = 0; i < e->n; i++)
      r *= probe(ir, e->ops[i], depth + 1);
    return r;
  case GC_SYM_FLOORDIV:
    return floor(probe(ir, e->ops[0], depth + 1) / (double)e->c);
  case GC_SYM_MOD:
    return fmod(probe(ir, e->ops[0], depth + 1), (double)e->c);
  case GC_SYM_MIN:
  case GC_SYM_MAX: {
    double a = probe(ir, e->ops[0], depth + 1),
           b = probe(ir, e->ops[1], depth + 1);
    return (e->kind == GC_SYM_MIN) == (a < b) ? a : b;
  }
  }
  return 0;
}

double ir_probe(const ir_graph *ir, const gc_sym *e) {
  return e ? probe(ir, e, 0) : 0;
}

bool ir_guard_add(ir_graph *ir, ir_guard_op op, gc_sym *a, gc_sym *b,
                  ir_guard_kind kind, const char *text) {
  gc_symctx *s = &ir->sym;
  if (!a || !b)
    return false;
  switch (op) { /* facts the ranges prove need no check */
  case IR_GUARD_EQ:
    if (a == b)
      return true;
    break;
  case IR_GUARD_NE: {
    gc_sym *d = gc_sym_sub(s, a, b);
    if (d && (d->lo > 0 || d->hi < 0))
      return true;
    break;
  }
  case IR_GUARD_LE:
    if (gc_sym_le(s, a, b))
      return true;
    break;
  case IR_GUARD_MOD0: {
    int64_t m;
    if (!gc_sym_const_of(b, &m) || m <= 0)
      return false;
    if (gc_sym_is_const(gc_sym_mod(s, a, m), 0))
      return true;
    break;
  }
  }
  for (int i = 0; i < ir->nguards; i++) {
    ir_guard *g = &ir->guards[i];
    if (g->op == op && g->a == a && g->b == b)
      return true;
    /* bounds by one constant: the largest left side is the guard */
    if (op == IR_GUARD_LE && g->op == IR_GUARD_LE && g->b == b &&
        b->kind == GC_SYM_CONST) {
      if (gc_sym_le(s, a, g->a))
        return true;
      if (gc_sym_le(s, g->a, a)) {
        *g = (ir_guard){op, a, b, kind,
                        text ? gc_arena_strdup(ir->a, text) : NULL};
        return true;
      }
    }
  }
  if (ir->nguards == ir->capguards) {
    int cap = ir->capguards ? 2 * ir->capguards : 16;
    ir_guard *g = gc_arena_calloc(ir->a, (size_t)cap, sizeof *g);
    if (!g) {
      ir->oom = true;
      return false;
    }
    if (ir->nguards)
      memcpy(g, ir->guards, (size_t)ir->nguards * sizeof *g);
    ir->guards = g;
    ir->capguards = cap;
  }
  ir->guards[ir->nguards++] =
      (ir_guard){op, a, b, kind, text ? gc_arena_strdup(ir->a, text) : NULL};
  /* c <= s: what follows may rely on it (the verifier proves that the
   * load of x[-1], at s*k - k, is never below 0 when s >= 1) */
  int64_t c, lo;
  if (op == IR_GUARD_LE && gc_sym_const_of(a, &c)) {
    if (b->kind == GC_SYM_VAR)
      gc_sym_narrow(s, b, c);
    else if (b->kind == GC_SYM_ADD && b->n == 1 && b->coefs[0] == 1 &&
             b->ops[0]->kind == GC_SYM_VAR &&
             !__builtin_sub_overflow(c, b->c, &lo)) /* c <= s + k */
      gc_sym_narrow(s, b->ops[0], lo);
  }
  return true;
}
