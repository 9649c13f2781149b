/*
 * ir.c: the loop IR's constructors, substitution, verifier and printer. See
 * ir.h for the model.
 *
 * The verifier states the invariants every pass must keep:
 *   - every node writes buffers it owns (buf->def == node), with an
 *     iteration space equal to the buffer's sizes;
 *   - every load reads a buffer that exists, at an index whose range (from
 *     the loop variables' ranges) stays inside the buffer's span: an
 *     out-of-bounds access is a compiler bug caught here, not a crash in
 *     the user's process; a buffer without elements is read only in a
 *     loop that never runs;
 *   - every buffer has at most IR_MAX_BUF_BYTES bytes;
 *   - loads only use the node's own loop variables;
 *   - nodes are in execution order: a buffer is read only after the node
 *     that writes it;
 *   - expression dtypes agree with the operations (comparisons are bool,
 *     a reduction body has a dtype its reduction accepts);
 *   - half values (float16, bfloat16) are only loaded, stored, selected,
 *     cast and written as constants (half.h): arithmetic on them is
 *     float32 arithmetic between casts, and reductions are not half.
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

/* ---- expressions: hash-consing ---- */

static uint64_t emix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

static uint64_t ehash(const ir_expr *e) {
  uint64_t h = emix(emix((uint64_t)e->op, (uint64_t)e->dtype), 7);
  for (int i = 0; i < 3; i++)
    h = emix(h, e->args[i] ? (uint64_t)e->args[i]->id + 1 : 0);
  switch (e->op) {
  case IR_CONST: {
    uint64_t bits;
    memcpy(&bits, &e->k.f, sizeof bits);
    h = emix(emix(h, bits), (uint64_t)e->k.i);
    break;
  }
  case IR_LOAD:
  case IR_GATHER:
    h = emix(emix(h, (uint64_t)e->load.buf->id), (uint64_t)e->load.index->id);
    h = emix(emix(h, (uint64_t)e->load.stride), (uint64_t)e->load.size);
    h = emix(h, (uint64_t)e->load.wrap);
    break;
  case IR_INDEX:
    h = emix(h, (uint64_t)e->index->id);
    break;
  case IR_ACC:
    h = emix(emix(h, (uint64_t)e->acc.node->id + 1), (uint64_t)e->acc.which);
    break;
  default:
    break;
  }
  /* the table indexes by the low bits, which the multiplications above
   * leave depending on the operands' low bits only: float constants (whose
   * low mantissa bits are zero) would all share a bucket, and a graph with
   * n of them would intern in n^2 (murmur3's finalizer mixes high bits
   * down) */
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  return h ^ (h >> 33);
}

static bool esame(const ir_expr *a, const ir_expr *b) {
  if (a->op != b->op || a->dtype != b->dtype)
    return false;
  for (int i = 0; i < 3; i++)
    if (a->args[i] != b->args[i])
      return false;
  switch (a->op) {
  case IR_CONST: /* bitwise: NaN equals NaN, -0.0 differs from 0.0 */
    return memcmp(&a->k.f, &b->k.f, sizeof a->k.f) == 0 && a->k.i == b->k.i;
  case IR_LOAD:
  case IR_GATHER:
    return a->load.buf == b->load.buf && a->load.index == b->load.index &&
           a->load.stride == b->load.stride && a->load.size == b->load.size &&
           a->load.wrap == b->load.wrap;
  case IR_INDEX:
    return a->index == b->index;
  case IR_ACC:
    return a->acc.node == b->acc.node && a->acc.which == b->acc.which;
  default:
    return true;
  }
}

static ir_expr *eintern(ir_graph *ir, const ir_expr *proto) {
  if (ir->oom)
    return NULL;
  uint64_t h = ehash(proto);
  size_t k = (size_t)h & (ir->nebuckets - 1);
  for (ir_expr *e = ir->ebuckets[k]; e; e = e->chain)
    if (e->hash == h && esame(e, proto))
      return e;
  ir_expr *e = gc_arena_alloc(ir->a, sizeof *e);
  if (!e) {
    ir->oom = true;
    return NULL;
  }
  *e = *proto;
  e->id = ir->nexprs++;
  e->hash = h;
  e->chain = ir->ebuckets[k];
  ir->ebuckets[k] = e;
  if ((size_t)ir->nexprs > ir->nebuckets * 2) { /* grow */
    size_t nb = ir->nebuckets * 4;
    ir_expr **b = gc_arena_calloc(ir->a, nb, sizeof *b);
    if (b) {
      for (size_t i = 0; i < ir->nebuckets; i++) {
        ir_expr *x = ir->ebuckets[i];
        while (x) {
          ir_expr *next = x->chain;
          size_t kk = (size_t)x->hash & (nb - 1);
          x->chain = b[kk];
          b[kk] = x;
          x = next;
        }
      }
      ir->ebuckets = b;
      ir->nebuckets = nb;
    }
  }
  return e;
}

static bool is_float(gc_dtype d) {
  return d == GC_DTYPE_FLOAT32 || d == GC_DTYPE_FLOAT64 ||
         d == GC_DTYPE_FLOAT16 || d == GC_DTYPE_BFLOAT16;
}

ir_expr *ir_const_f(ir_graph *ir, double v, gc_dtype dt) {
  ir_expr e = {.op = IR_CONST, .dtype = dt};
  if (is_float(dt)) {
    e.k.f = dt == GC_DTYPE_FLOAT32 ? (double)(float)v
            : ir_dtype_half(dt)    ? ir_half_round(v, dt)
                                   : v;
  } else {
    e.k.i = dt == GC_DTYPE_BOOL ? (v != 0) : (int64_t)v;
    e.k.f = (double)e.k.i;
  }
  return eintern(ir, &e);
}

/* v as a value of integer dtype dt: two's complement wrap-around, as
 * ATen converts a Scalar (-4 as uint8 is 252). */
static int64_t wrap_int(int64_t v, gc_dtype dt) {
  switch (dt) {
  case GC_DTYPE_UINT8:
    return (uint8_t)v;
  case GC_DTYPE_INT8:
    return (int8_t)v;
  case GC_DTYPE_INT16:
    return (int16_t)v;
  case GC_DTYPE_INT32:
    return (int32_t)v;
  default:
    return v;
  }
}

ir_expr *ir_const_i(ir_graph *ir, int64_t v, gc_dtype dt) {
  if (is_float(dt))
    return ir_const_f(ir, (double)v, dt);
  ir_expr e = {.op = IR_CONST, .dtype = dt};
  e.k.i = dt == GC_DTYPE_BOOL ? (v != 0) : wrap_int(v, dt);
  e.k.f = (double)e.k.i;
  return eintern(ir, &e);
}

ir_expr *ir_load(ir_graph *ir, ir_buf *b, gc_sym *index) {
  if (!b || !index)
    return NULL;
  ir_expr e = {.op = IR_LOAD, .dtype = b->dtype};
  e.load.buf = b;
  e.load.index = index;
  return eintern(ir, &e);
}

ir_expr *ir_gather(ir_graph *ir, ir_buf *b, gc_sym *index, ir_expr *idx,
                   int64_t stride, int64_t size, bool wrap) {
  if (!b || !index || !idx || size <= 0)
    return NULL;
  ir_expr e = {.op = IR_GATHER, .dtype = b->dtype};
  e.load.buf = b;
  e.load.index = index;
  e.load.stride = stride;
  e.load.size = size;
  e.load.wrap = wrap;
  e.args[0] =
      idx->dtype == GC_DTYPE_INT64 ? idx : ir_cast(ir, idx, GC_DTYPE_INT64);
  return e.args[0] ? eintern(ir, &e) : NULL;
}

bool ir_reads_buffer(const ir_expr *e) {
  return e && (e->op == IR_LOAD || e->op == IR_GATHER);
}

ir_expr *ir_index(ir_graph *ir, gc_sym *x, gc_dtype dt) {
  if (!x)
    return NULL;
  if (ir_dtype_half(dt)) /* the integer, rounded (half.h) */
    return ir_cast(ir, ir_index(ir, x, GC_DTYPE_INT64), dt);
  if (x->kind == GC_SYM_CONST)
    return ir_const_i(ir, x->c, dt);
  ir_expr e = {.op = IR_INDEX, .dtype = dt};
  e.index = x;
  return eintern(ir, &e);
}

ir_expr *ir_acc(ir_graph *ir, ir_node *red, int which, gc_dtype dt) {
  ir_expr e = {.op = IR_ACC, .dtype = dt};
  e.acc.node = red;
  e.acc.which = which;
  return eintern(ir, &e);
}

static bool yields_bool(ir_op op) {
  switch (op) {
  case IR_EQ:
  case IR_NE:
  case IR_LT:
  case IR_LE:
  case IR_GT:
  case IR_GE:
  case IR_AND:
  case IR_OR:
  case IR_XOR:
  case IR_NOT:
  case IR_ISNAN:
  case IR_ISINF:
  case IR_SIGNBIT:
    return true;
  default:
    return false;
  }
}

ir_expr *ir_cast(ir_graph *ir, ir_expr *x, gc_dtype dt) {
  if (!x)
    return NULL;
  if (x->dtype == dt)
    return x;
  /* a half value made float32 or float64 and back is itself (every half
   * value is exact in both; a NaN's payload may differ, as in eager) */
  if (ir_dtype_half(dt) && x->op == IR_CAST && x->args[0]->dtype == dt &&
      (x->dtype == GC_DTYPE_FLOAT32 || x->dtype == GC_DTYPE_FLOAT64))
    return x->args[0];
  if (x->op == IR_CONST) { /* fold, with C's conversion semantics */
    if (dt == GC_DTYPE_BOOL)
      return ir_const_i(ir, is_float(x->dtype) ? x->k.f != 0 : x->k.i != 0, dt);
    if (is_float(dt))
      return ir_const_f(ir, is_float(x->dtype) ? x->k.f : (double)x->k.i, dt);
  }
  return ir_op1(ir, IR_CAST, dt, x);
}

/* a op b for an INDEX or integer constant a and an integer constant b: 1
 * or 0 when a's range (a constant's value) decides it, -1 otherwise. */
static int index_compare(ir_op op, const ir_expr *a, const ir_expr *b) {
  /* int64 only: a narrower INDEX wraps values outside its dtype, which
   * the range (of the unwrapped expression) does not describe */
  if (b->op != IR_CONST || a->dtype != GC_DTYPE_INT64 ||
      b->dtype != GC_DTYPE_INT64 ||
      !(a->op == IR_CONST || (a->op == IR_INDEX && a->index)))
    return -1;
  int64_t lo = a->op == IR_CONST ? a->k.i : a->index->lo;
  int64_t hi = a->op == IR_CONST ? a->k.i : a->index->hi, k = b->k.i;
  switch (op) {
  case IR_LT:
    return hi < k ? 1 : lo >= k ? 0 : -1;
  case IR_LE:
    return hi <= k ? 1 : lo > k ? 0 : -1;
  case IR_GT:
    return lo > k ? 1 : hi <= k ? 0 : -1;
  case IR_GE:
    return lo >= k ? 1 : hi < k ? 0 : -1;
  case IR_EQ:
    return lo == hi && lo == k ? 1 : (k < lo || k > hi) ? 0 : -1;
  case IR_NE:
    return lo == hi && lo == k ? 0 : (k < lo || k > hi) ? 1 : -1;
  default:
    return -1;
  }
}

/* index_compare through where()s: a op b is decided when it is for every
 * value a where() chain can take (a max pool's index chain compared with
 * -1, "no position taken yet", in the interior of a split loop). *budget
 * bounds the nodes visited. */
static int select_compare(ir_op op, const ir_expr *a, const ir_expr *b,
                          int *budget) {
  if (--*budget < 0)
    return -1;
  if (a->op != IR_WHERE)
    return index_compare(op, a, b);
  int x = select_compare(op, a->args[1], b, budget);
  if (x < 0)
    return -1;
  return select_compare(op, a->args[2], b, budget) == x ? x : -1;
}

/* Operations on half values (half.h): every operand that is half read as
 * float32, the operation in float32, its result rounded to dt when dt is
 * half. A select (where) of half values stays one (it moves bits); its
 * value operands take its dtype. NULL when op needs no rewriting. */
static ir_expr *make_op(ir_graph *ir, ir_op op, gc_dtype dt, ir_expr *a,
                        ir_expr *b, ir_expr *c);

static ir_expr *half_op(ir_graph *ir, ir_op op, gc_dtype dt, ir_expr *a,
                        ir_expr *b, ir_expr *c) {
  ir_expr *x[3] = {a, b, c};
  int n = ir_op_arity(op);
  bool half = ir_dtype_half(dt) && op != IR_CAST && !yields_bool(op);
  for (int i = op == IR_WHERE ? 1 : 0; i < n; i++)
    half |= ir_dtype_half(x[i]->dtype);
  if (!half || op == IR_CAST)
    return NULL;
  if (op == IR_WHERE) {
    if (b->dtype == dt && c->dtype == dt)
      return NULL;
    return make_op(ir, op, dt, a, ir_cast(ir, b, dt), ir_cast(ir, c, dt));
  }
  gc_dtype f = GC_DTYPE_FLOAT32;
  for (int i = 0; i < n; i++)
    if (ir_dtype_half(x[i]->dtype))
      x[i] = ir_cast(ir, x[i], f);
  if (!ir_dtype_half(dt) || yields_bool(op))
    return make_op(ir, op, dt, x[0], x[1], x[2]);
  return ir_cast(ir, make_op(ir, op, f, x[0], x[1], x[2]), dt);
}

static ir_expr *make_op(ir_graph *ir, ir_op op, gc_dtype dt, ir_expr *a,
                        ir_expr *b, ir_expr *c) {
  int n = ir_op_arity(op);
  if (!a || (n > 1 && !b) || (n > 2 && !c))
    return NULL;
  ir_expr *h = half_op(ir, op, dt, a, b, c);
  if (h)
    return h;
  ir_expr e = {.op = op, .dtype = yields_bool(op) ? GC_DTYPE_BOOL : dt};
  e.args[0] = a;
  e.args[1] = n > 1 ? b : NULL;
  e.args[2] = n > 2 ? c : NULL;
  /* exact identities only: x*1, x/1, where(c, x, x), where of a known
   * condition, and a comparison of an index with a constant that the
   * index's range decides (what a loop split into ranges makes of cat's
   * and padding's selections), also through where()s of such indices */
  if ((op == IR_MUL || op == IR_DIV) && b->op == IR_CONST && b->dtype == dt &&
      a->dtype == dt && (is_float(dt) ? b->k.f == 1.0 : b->k.i == 1))
    return a;
  if (op == IR_WHERE && b == c && b->dtype == e.dtype)
    return b;
  if (op == IR_WHERE && a->op == IR_CONST && !is_float(a->dtype) &&
      b->dtype == e.dtype && c->dtype == e.dtype)
    return a->k.i ? b : c;
  if ((op == IR_AND || op == IR_OR) && a->dtype == GC_DTYPE_BOOL &&
      b->dtype == GC_DTYPE_BOOL && (a->op == IR_CONST || b->op == IR_CONST)) {
    const ir_expr *k = a->op == IR_CONST ? a : b, *x = k == a ? b : a;
    bool one = k->k.i != 0;
    if (op == IR_AND)
      return one ? (ir_expr *)x : (ir_expr *)k;
    return one ? (ir_expr *)k : (ir_expr *)x;
  }
  int budget = 256;
  int decided = n == 2 ? select_compare(op, a, b, &budget) : -1;
  if (decided >= 0)
    return ir_const_i(ir, decided, GC_DTYPE_BOOL);
  return eintern(ir, &e);
}

ir_expr *ir_op1(ir_graph *ir, ir_op op, gc_dtype dt, ir_expr *a) {
  return make_op(ir, op, dt, a, NULL, NULL);
}

ir_expr *ir_op2(ir_graph *ir, ir_op op, gc_dtype dt, ir_expr *a, ir_expr *b) {
  return make_op(ir, op, dt, a, b, NULL);
}

ir_expr *ir_op3(ir_graph *ir, ir_op op, gc_dtype dt, ir_expr *a, ir_expr *b,
                ir_expr *c) {
  return make_op(ir, op, dt, a, b, c);
}

/* ---- substitution (memoized, so shared subexpressions stay shared) ----
 *
 * The memo is kept in the expressions themselves (ir_expr.subst, .image):
 * a table per substitution, made for every load of a computation, cost a
 * kilobyte or more each, most of a big graph's lowering. Each substitution
 * has a number of its own, so an expression's entry counts only when it
 * carries that number; one substitution started inside another (none is)
 * would only make the outer one redo what the inner one overwrote. */

/* Substitutions of all graphs share one counter, as walks do (below). */
static _Atomic uint64_t substs;

/* ir_expr_gather_var's variable: its data value, and what was made */
typedef struct gvar {
  int var;
  ir_expr *data;
  int64_t size;
  bool wrap;
  int made;  /* gathers made from loads */
  bool fail; /* an index depends on var in a way a gather cannot express */
} gvar;

/* Does index expression x depend on g's variable? (*fail when it does
 * other than affinely.) */
static int64_t gvar_coef(gvar *g, const gc_sym *x) {
  int64_t c = 0;
  if (!gc_sym_linear_in(x, g->var, &c))
    g->fail = true;
  return c;
}

static ir_expr *subst(ir_graph *ir, ir_expr *e, const gc_symmap *map,
                      uint64_t id, gvar *g, int depth) {
  if (!e)
    return NULL;
  if (depth > 10000) { /* bodies are bounded by realization; be safe */
    ir->oom = true;
    return NULL;
  }
  switch (e->op) {
  case IR_CONST:
    return e;
  case IR_ACC:
    if (g)
      g->fail = true; /* a reduction of the kernel reading it */
    return g ? NULL : e;
  case IR_LOAD: {
    gc_sym *at = gc_sym_subst(&ir->sym, e->load.index, map);
    int64_t c = g ? gvar_coef(g, e->load.index) : 0;
    if (g && g->fail)
      return NULL;
    if (!c)
      return ir_load(ir, e->load.buf, at);
    g->made++;
    return ir_gather(ir, e->load.buf, at, g->data, c, g->size, g->wrap);
  }
  case IR_INDEX:
    if (g && (gvar_coef(g, e->index) || g->fail)) {
      g->fail = true;
      return NULL;
    }
    return ir_index(ir, gc_sym_subst(&ir->sym, e->index, map), e->dtype);
  default:
    break;
  }
  if (e->op == IR_GATHER) {
    if (g && (gvar_coef(g, e->load.index) || g->fail)) {
      g->fail = true;
      return NULL;
    }
    return ir_gather(ir, e->load.buf,
                     gc_sym_subst(&ir->sym, e->load.index, map),
                     subst(ir, e->args[0], map, id, g, depth + 1),
                     e->load.stride, e->load.size, e->load.wrap);
  }
  if (e->subst == id)
    return e->image;
  ir_expr *a[3] = {NULL, NULL, NULL};
  for (int i = 0; i < ir_op_arity(e->op); i++)
    if (!(a[i] = subst(ir, e->args[i], map, id, g, depth + 1)))
      return NULL;
  ir_expr *r = e->op == IR_CAST
                   ? ir_cast(ir, a[0], e->dtype)
                   : make_op(ir, e->op, e->dtype, a[0], a[1], a[2]);
  if (r) { /* scratch: exprs live in a mutable arena */
    e->subst = id;
    e->image = r;
  }
  return r;
}

ir_expr *ir_expr_subst(ir_graph *ir, ir_expr *e, const gc_symmap *map) {
  return subst(ir, e, map, ++substs, NULL, 0);
}

ir_expr *ir_expr_gather_var(ir_graph *ir, ir_expr *e, const gc_symmap *map,
                            int var, ir_expr *data, int64_t size, bool wrap) {
  gc_symctx *s = &ir->sym;
  if (!e || !data || var < 0 || var >= s->nvars || size <= 0)
    return NULL;
  gc_symmap m0 = {0};
  for (int i = 0; map && i < map->n; i++)
    if (!gc_symmap_set(s, &m0, map->var[i], map->to[i]))
      return NULL;
  /* the data part goes into the gather */
  if (!gc_symmap_set(s, &m0, var, gc_sym_const(s, 0)))
    return NULL;
  gvar g = {var, data, size, wrap, 0, false};
  ir_expr *r = subst(ir, e, &m0, ++substs, &g, 0);
  return g.fail || !g.made ? NULL : r;
}

/* ---- walking ---- */

/* Walks of all graphs share one counter: an expression belongs to one graph,
 * compiled on one thread, and a 64-bit counter does not wrap. */
static _Atomic uint64_t walks;

static int walk(const ir_expr *e, uint64_t id, ir_walk_fn fn, void *ctx,
                int depth) {
  if (!e || e->walk == id)
    return 0;
  if (depth > 10000)
    return IR_WALK_TOO_DEEP;
  ((ir_expr *)e)->walk = id; /* scratch: exprs live in a mutable arena */
  int rc = fn(e, ctx);
  if (rc == IR_WALK_SKIP)
    return 0;
  if (rc)
    return rc;
  for (int i = 0; i < ir_op_arity(e->op); i++)
    if ((rc = walk(e->args[i], id, fn, ctx, depth + 1)))
      return rc;
  return 0;
}

int ir_expr_walk(const ir_expr *e, ir_walk_fn fn, void *ctx) {
  return walk(e, ++walks, fn, ctx, 0);
}

/* ---- statistics ---- */

static bool costly_op(ir_op op) {
  switch (op) {
  case IR_EXP:
  case IR_EXP2:
  case IR_EXPM1:
  case IR_LOG:
  case IR_LOG2:
  case IR_LOG10:
  case IR_LOG1P:
  case IR_SIN:
  case IR_COS:
  case IR_TAN:
  case IR_ASIN:
  case IR_ACOS:
  case IR_ATAN:
  case IR_SINH:
  case IR_COSH:
  case IR_TANH:
  case IR_ASINH:
  case IR_ACOSH:
  case IR_ATANH:
  case IR_ERF:
  case IR_ERFC:
  case IR_LGAMMA:
  case IR_POW:
  case IR_SIGMOID:
  case IR_ATAN2:
  case IR_CBRT:
  case IR_RAND:
    return true;
  default:
    return false;
  }
}

typedef struct counts {
  int loads, ops;
  bool costly;
} counts;

static int count(const ir_expr *e, void *ctx) {
  counts *c = ctx;
  if (ir_reads_buffer(e))
    c->loads++;
  else if (e->op != IR_CONST && e->op != IR_INDEX)
    c->ops++;
  c->costly |= costly_op(e->op);
  return 0;
}

void ir_expr_stats(const ir_expr *e, int *loads, int *ops, bool *costly) {
  counts c = {0, 0, false};
  if (ir_expr_walk(e, count, &c)) /* too deep: as if too big to inline */
    c.ops = INT_MAX;
  *loads = c.loads;
  *ops = c.ops;
  *costly = c.costly;
}

/* ---- tensors ---- */

static ir_tensor *tensor_new(ir_graph *ir, ir_tensor_kind kind, gc_dtype dt,
                             int rank, const int64_t *sizes) {
  ir_tensor *t = gc_arena_zalloc(ir->a, sizeof *t);
  if (!t || !(t->sizes = gc_arena_calloc(ir->a, (size_t)rank + 1, 8))) {
    ir->oom = true;
    return NULL;
  }
  t->kind = kind;
  t->dtype = dt;
  t->rank = rank;
  if (rank)
    memcpy(t->sizes, sizes, (size_t)rank * 8);
  if (!(t->ssizes = ir_syms_of(ir, rank, t->sizes)))
    return NULL;
  return t;
}

ir_tensor *ir_tensor_strided(ir_graph *ir, ir_buf *b, int rank,
                             const int64_t *sizes, const int64_t *strides,
                             int64_t offset) {
  if (!b)
    return NULL;
  ir_tensor *t = tensor_new(ir, IR_T_BUF, b->dtype, rank, sizes);
  if (!t || !(t->strides = gc_arena_calloc(ir->a, (size_t)rank + 1, 8))) {
    ir->oom = true;
    return NULL;
  }
  t->buf = b;
  if (rank)
    memcpy(t->strides, strides, (size_t)rank * 8);
  t->offset = offset;
  if (!(t->sstrides = ir_syms_of(ir, rank, t->strides)) ||
      !(t->soffset = gc_sym_const(&ir->sym, offset))) {
    ir->oom = true;
    return NULL;
  }
  return t;
}

ir_tensor *ir_tensor_strided_s(ir_graph *ir, ir_buf *b, int rank,
                               gc_sym *const *sizes, gc_sym *const *strides,
                               gc_sym *offset) {
  int64_t sz[IR_MAX_RANK + 1], st[IR_MAX_RANK + 1], off;
  if (!b || !offset || rank > IR_MAX_RANK)
    return NULL;
  ir_ints_of(rank, sizes, sz);
  ir_ints_of(rank, strides, st);
  if (!gc_sym_const_of(offset, &off))
    off = IR_SYMBOLIC;
  ir_tensor *t = ir_tensor_strided(ir, b, rank, sz, st, off);
  if (!t)
    return NULL;
  memcpy(t->ssizes, sizes, (size_t)rank * sizeof *sizes);
  memcpy(t->sstrides, strides, (size_t)rank * sizeof *strides);
  t->soffset = offset;
  return t;
}

ir_tensor *ir_tensor_of_buf(ir_graph *ir, ir_buf *b) {
  if (b && b->symbolic)
    return ir_tensor_strided_s(ir, b, b->rank, b->ssizes, b->sstrides,
                               gc_sym_const(&ir->sym, 0));
  return b ? ir_tensor_strided(ir, b, b->rank, b->sizes, b->strides, 0) : NULL;
}

/* Stride i of a strided tensor as an expression. */
static gc_sym *tstride(ir_graph *ir, const ir_tensor *t, int i) {
  return t->sstrides ? t->sstrides[i] : gc_sym_const(&ir->sym, t->strides[i]);
}

ir_expr *ir_tensor_load(ir_graph *ir, ir_tensor *t, gc_sym *const *idx) {
  if (!t)
    return NULL;
  gc_symctx *s = &ir->sym;
  if (t->realized && t->kind != IR_T_BUF) {
    /* a realized computation: read its buffer (contiguous per its layout) */
    gc_sym *off = gc_sym_const(s, 0);
    for (int i = 0; i < t->rank; i++)
      off = gc_sym_add(s, off, gc_sym_mul(s, idx[i], t->realized->sstrides[i]));
    return ir_load(ir, t->realized, off);
  }
  switch (t->kind) {
  case IR_T_BUF: {
    gc_sym *off = t->soffset ? t->soffset : gc_sym_const(s, t->offset);
    for (int i = 0; i < t->rank; i++)
      off = gc_sym_add(s, off, gc_sym_mul(s, idx[i], tstride(ir, t, i)));
    return ir_load(ir, t->buf, off);
  }
  case IR_T_LOOP: {
    /* at its own variables (a consumer over the same space shares them,
     * lower/pointwise.c): the body as it is, rather than a copy */
    int same = 0;
    while (same < t->rank && idx[same] == t->vars[same])
      same++;
    if (same == t->rank)
      return t->body;
    gc_symmap map = {0};
    for (int i = 0; i < t->rank; i++)
      if (!gc_symmap_set(s, &map, t->vars[i]->var, idx[i])) {
        ir->oom = true;
        return NULL;
      }
    return ir_expr_subst(ir, t->body, &map);
  }
  case IR_T_VIEW: {
    /* the map is written in the view's own variables: substitute idx */
    gc_symmap vmap = {0};
    gc_sym **bidx =
        gc_arena_calloc(ir->a, (size_t)t->base->rank + 1, sizeof *bidx);
    if (!bidx) {
      ir->oom = true;
      return NULL;
    }
    for (int i = 0; i < t->rank; i++)
      if (!gc_symmap_set(s, &vmap, t->vars[i]->var, idx[i])) {
        ir->oom = true;
        return NULL;
      }
    for (int i = 0; i < t->base->rank; i++)
      if (!(bidx[i] = gc_sym_subst(s, t->map[i], &vmap)))
        return NULL;
    return ir_tensor_load(ir, t->base, bidx);
  }
  }
  return NULL;
}

/* A view of a symbolic tensor: strides and offset read off the index of a
 * load at fresh variables, with coefficients of constants and size
 * symbols. */
static bool as_strided_sym(ir_graph *ir, ir_tensor *t, ir_view *v) {
  gc_symctx *s = &ir->sym;
  int r = t->rank;
  gc_sym **idx = gc_arena_calloc(ir->a, (size_t)r + 1, sizeof *idx);
  gc_sym **st = gc_arena_calloc(ir->a, (size_t)r + 1, sizeof *st);
  int64_t *ist = gc_arena_calloc(ir->a, (size_t)r + 1, 8);
  if (!idx || !st || !ist)
    return false;
  gc_symmap zero = {0};
  for (int i = 0; i < r; i++) {
    char name[32];
    snprintf(name, sizeof name, "v%d", s->nvars);
    if (!(idx[i] = gc_sym_loopvar(s, name, t->ssizes[i])) ||
        !gc_symmap_set(s, &zero, idx[i]->var, gc_sym_const(s, 0)))
      return false;
  }
  ir_expr *e = ir_tensor_load(ir, t, idx);
  if (!e || e->op != IR_LOAD)
    return false;
  gc_sym *ix = e->load.index;
  gc_sym *rest = ix;
  for (int i = 0; i < r; i++) {
    if (!gc_sym_coef(s, ix, idx[i]->var, &st[i]))
      return false;
    rest = gc_sym_sub(s, rest, gc_sym_mul(s, idx[i], st[i]));
  }
  /* nothing but our variables times their coefficients may vary */
  gc_sym *off = gc_sym_subst(s, ix, &zero);
  if (!rest || !off || rest != off)
    return false;
  for (int i = 0; i < r; i++) /* size-1 dims: any stride; keep 0 off */
    if (gc_sym_is_const(t->ssizes[i], 1) || gc_sym_is_const(t->ssizes[i], 0))
      if (st[i]->hi < 0)
        st[i] = gc_sym_const(s, 0);
  ir_ints_of(r, st, ist);
  v->buf = e->load.buf;
  v->rank = r;
  v->sizes = t->sizes;
  v->strides = ist;
  v->ssizes = t->ssizes;
  v->sstrides = st;
  v->soffset = off;
  if (!gc_sym_const_of(off, &v->offset))
    v->offset = IR_SYMBOLIC;
  return true;
}

bool ir_tensor_as_strided(ir_graph *ir, ir_tensor *t, ir_view *v) {
  if (!t)
    return false;
  memset(v, 0, sizeof *v);
  if (t->kind == IR_T_BUF) {
    v->buf = t->buf;
    v->rank = t->rank;
    v->sizes = t->sizes;
    v->strides = t->strides;
    v->offset = t->offset;
    v->ssizes = t->ssizes;
    v->sstrides = t->sstrides;
    v->soffset = t->soffset;
    return true;
  }
  if (t->realized && t->kind == IR_T_LOOP) {
    v->buf = t->realized;
    v->rank = t->rank;
    v->sizes = t->sizes;
    v->strides = t->realized->strides;
    v->offset = 0;
    v->ssizes = t->ssizes;
    v->sstrides = t->realized->sstrides;
    v->soffset = gc_sym_const(&ir->sym, 0);
    return true;
  }
  if (ir->nsyms) /* a graph with size symbols: strides may be symbolic */
    return as_strided_sym(ir, t, v);
  /* a view: load with fresh variables and read the strides off the index */
  gc_symctx *s = &ir->sym;
  gc_sym **idx = gc_arena_calloc(ir->a, (size_t)t->rank + 1, sizeof *idx);
  int64_t *st = gc_arena_calloc(ir->a, (size_t)t->rank + 1, 8);
  if (!idx || !st)
    return false;
  for (int i = 0; i < t->rank; i++) {
    char name[32];
    snprintf(name, sizeof name, "v%d", s->nvars);
    idx[i] = gc_sym_newvar(s, name, 0, t->sizes[i] > 0 ? t->sizes[i] - 1 : 0);
    if (!idx[i])
      return false;
  }
  ir_expr *e = ir_tensor_load(ir, t, idx);
  if (!e || e->op != IR_LOAD || !gc_sym_is_affine(e->load.index))
    return false;
  const gc_sym *ix = e->load.index;
  for (int i = 0; i < t->rank; i++)
    if (!gc_sym_linear_in(ix, idx[i]->var, &st[i]))
      return false;
  /* nothing but our variables may appear */
  if (ix->kind == GC_SYM_ADD)
    for (int k = 0; k < ix->n; k++) {
      bool ours = false;
      for (int i = 0; i < t->rank; i++)
        ours |= ix->ops[k] == idx[i];
      if (!ours)
        return false;
    }
  v->buf = e->load.buf;
  v->rank = t->rank;
  v->sizes = t->sizes;
  v->strides = st;
  v->offset = ix->kind == GC_SYM_CONST ? ix->c
              : ix->kind == GC_SYM_ADD ? ix->c
                                       : 0;
  for (int i = 0; i < t->rank; i++) /* size-1 dims: any stride; keep 0 off */
    if (t->sizes[i] <= 1 && st[i] < 0)
      st[i] = 0;
  ir_view_sym(ir, v);
  return true;
}

void ir_view_sym(ir_graph *ir, ir_view *v) {
  if (!v->ssizes)
    v->ssizes = ir_syms_of(ir, v->rank, v->sizes);
  if (!v->sstrides)
    v->sstrides = ir_syms_of(ir, v->rank, v->strides);
  if (!v->soffset)
    v->soffset = gc_sym_const(&ir->sym, v->offset);
  if (!v->soffset)
    ir->oom = true;
}

/* ---- verifier ---- */

typedef struct vctx {
  const ir_graph *ir;
  const ir_node *n;
  gc_error *err;
  int rc;
  const int *defined_at; /* buffer id -> index of the node defining it */
} vctx;

static void vfail(vctx *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void vfail(vctx *v, const char *fmt, ...) {
  if (v->rc)
    return;
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!v->n)
    v->rc = gc_errorf(v->err, GC_EINTERNAL, "loop IR verifier: %s", msg);
  else
    v->rc =
        gc_errorf(v->err, GC_EINTERNAL, "loop IR verifier: node %d (%s): %s",
                  v->n->id, v->n->what ? v->n->what : "", msg);
}

static bool own_var(const ir_node *n, int var) {
  for (int i = 0; i < n->rank; i++)
    if (n->vars[i]->var == var)
      return true;
  for (int i = 0; i < n->rrank; i++)
    if (n->rvars[i]->var == var)
      return true;
  return false;
}

/* size symbols are everyone's */
static bool only_own_vars(const ir_graph *ir, const ir_node *n,
                          const gc_sym *e) {
  if (e->kind == GC_SYM_VAR)
    return own_var(n, e->var) || ir->sym.vars[e->var].size;
  for (int i = 0; i < e->n; i++)
    if (!only_own_vars(ir, n, e->ops[i]))
      return false;
  return true;
}

/* Does node n's loop run at least once? (A load from a buffer without
 * elements is only harmless in a loop that never does.) */
static bool node_iterates(const ir_node *n) {
  if (!n)
    return false;
  for (int i = 0; i < n->rank; i++)
    if (n->ranges[i] <= 0 && n->ranges[i] != IR_SYMBOLIC)
      return false;
  for (int i = 0; i < n->rrank; i++)
    if (n->rranges[i] <= 0 && n->rranges[i] != IR_SYMBOLIC)
      return false;
  return true;
}

/* A load of buffer b at index ix (gathers have static tables only) inside
 * the symbolic buffer's span at every size: the index never negative, its
 * largest value (each loop index at the end of its extent,
 * gc_sym_upper) provably below the span, or the numeric range inside a
 * static span. */
static bool sym_load_inside(vctx *v, const ir_buf *b, const gc_sym *ix) {
  gc_symctx *s = (gc_symctx *)&v->ir->sym;
  if (ix->lo < 0)
    return false;
  if (!b->symbolic && ix->hi < b->span)
    return true;
  gc_sym *up = gc_sym_upper(s, (gc_sym *)ix);
  return up && b->sspan && gc_sym_le(s, gc_sym_addc(s, up, 1), b->sspan);
}

static void vexpr1(vctx *v, const ir_expr *e) {
  if (ir_reads_buffer(e)) {
    const ir_buf *b = e->load.buf;
    const gc_sym *ix = e->load.index;
    int64_t lo = ix->lo, hi = ix->hi;
    if (e->op == IR_GATHER) { /* the data index is clamped to [0, size) */
      int64_t reach = e->load.stride * (e->load.size - 1);
      lo += reach < 0 ? reach : 0;
      hi += reach > 0 ? reach : 0;
      if (!e->args[0])
        vfail(v, "gather lacks its index");
      else if (e->args[0]->dtype != GC_DTYPE_INT64)
        vfail(v, "gather index must be int64");
    }
    bool sym =
        b->symbolic || (v->ir->nsyms && gc_sym_symbolic(&v->ir->sym, ix));
    if (b->id < 0 || b->id >= v->ir->nbufs || v->ir->bufs[b->id] != b)
      vfail(v, "load from an unknown buffer");
    else if (sym && e->op == IR_GATHER)
      vfail(v, "gather of buf%d with symbolic sizes", b->id);
    else if (sym && !sym_load_inside(v, b, ix))
      vfail(v, "load of buf%d at %s: not provably inside [0, %s) at every size",
            b->id, gc_sym_str((gc_symctx *)&v->ir->sym, ix),
            gc_sym_str((gc_symctx *)&v->ir->sym, b->sspan));
    else if (sym && !only_own_vars(v->ir, v->n, ix))
      vfail(v, "load of buf%d uses a variable of another loop", b->id);
    else if (sym && b->kind != IR_BUF_INPUT && v->defined_at[b->id] >= v->n->id)
      vfail(v, "reads buf%d before node %d writes it", b->id,
            v->defined_at[b->id]);
    else if (sym)
      ;
    else if (b->numel == 0 && node_iterates(v->n))
      vfail(v, "load of buf%d, which has no element, in a loop that runs",
            b->id);
    else if (b->numel > 0 && (lo < 0 || hi >= b->span))
      vfail(v, "load of buf%d at index range [%lld, %lld] outside [0, %lld)",
            b->id, (long long)lo, (long long)hi, (long long)b->span);
    else if (!only_own_vars(v->ir, v->n, ix))
      vfail(v, "load of buf%d uses a variable of another loop", b->id);
    else if (b->kind != IR_BUF_INPUT && v->defined_at[b->id] >= v->n->id)
      vfail(v, "reads buf%d before node %d writes it", b->id,
            v->defined_at[b->id]);
    return;
  }
  if (e->op == IR_INDEX && !only_own_vars(v->ir, v->n, e->index)) {
    vfail(v, "index uses a variable of another loop");
    return;
  }
  for (int i = 0; i < ir_op_arity(e->op); i++)
    if (!e->args[i]) {
      vfail(v, "%s lacks argument %d", ir_op_name(e->op), i);
      return;
    }
  if (yields_bool(e->op) && e->dtype != GC_DTYPE_BOOL)
    vfail(v, "%s must be bool", ir_op_name(e->op));
  if (e->op != IR_CONST && e->op != IR_CAST && e->op != IR_WHERE) {
    bool half = ir_dtype_half(e->dtype);
    for (int i = 0; i < ir_op_arity(e->op); i++)
      half |= ir_dtype_half(e->args[i]->dtype);
    if (half)
      vfail(v, "%s of %s values: half values are computed with as float32",
            ir_op_name(e->op), gc_dtype_name(e->dtype));
  }
  if (e->op == IR_WHERE &&
      (e->args[1]->dtype != e->dtype || e->args[2]->dtype != e->dtype) &&
      (ir_dtype_half(e->dtype) || ir_dtype_half(e->args[1]->dtype) ||
       ir_dtype_half(e->args[2]->dtype)))
    vfail(v, "where of %s values mixes dtypes", gc_dtype_name(e->dtype));
}

static int vexpr_each(const ir_expr *e, void *ctx) {
  vctx *v = ctx;
  vexpr1(v, e);
  return v->rc ? 1 : 0;
}

/* Checks each distinct subexpression of e once. */
static void vexpr(vctx *v, const ir_expr *e) {
  if (!v->rc && ir_expr_walk(e, vexpr_each, v) == IR_WALK_TOO_DEEP)
    vfail(v, "expression nested too deep");
}

/* A scatter's generated code (codegen/scatter.c) trusts these sizes: the
 * base is the output's shape; scatter's positions (the index's) lie in the
 * source and, but for dim, in the output; index_add's source is the output
 * but for dim; the token forms' source is the index's dims then the
 * output's after the first (index_put's element form: the output's dims
 * odims names around the index's). */
static void vscatter(vctx *v, const ir_node *n) {
  bool emb = n->scatter == IR_SCATTER_EMBEDDING, tok = ir_scatter_by_token(n);
  const ir_buf *o = n->out;
  const ir_view *self, *ix, *src;
  ir_scatter_views(n, &self, &ix, &src);
  if (n->kind != IR_EXTERN || !o || o->def != n || n->scan || !ix || !src ||
      n->dim < 0 || n->dim >= o->rank || (!self && !emb && !n->body) ||
      (n->body && n->body->op != IR_CONST)) {
    vfail(v, "a scatter needs an extern node writing its buffer along one "
             "of its dims, an index, a source, and self or a constant");
    return;
  }
  bool ok = true;
  if (self) {
    ok = self->rank == o->rank;
    for (int d = 0; ok && d < o->rank; d++)
      ok = self->sizes[d] == o->sizes[d];
  }
  if (ok && tok && n->odims) { /* element offsets (index_put) */
    int f = n->first, nrest = src->rank - ix->rank;
    bool used[IR_MAX_RANK] = {false};
    ok = f >= 0 && f <= nrest && nrest < o->rank;
    for (int j = 0; ok && j < nrest; j++) {
      int od = n->odims[j];
      ok = od >= 0 && od < o->rank && !used[od] &&
           src->sizes[j < f ? j : j + ix->rank] == o->sizes[od];
      if (ok)
        used[od] = true;
    }
    for (int t = 0; ok && t < ix->rank; t++)
      ok = src->sizes[f + t] == ix->sizes[t];
  } else if (ok && tok) { /* the index names a row of dims first..dim */
    int f = n->first, after = n->dim + 1; /* source: out's dims before f, */
    ok = f >= 0 && f <= n->dim &&         /* the index's, out's from after on */
         src->rank == f + ix->rank + o->rank - after;
    for (int d = 0; ok && d < src->rank; d++)
      ok = src->sizes[d] == (d < f ? o->sizes[d]
                             : d < f + ix->rank
                                 ? ix->sizes[d - f]
                                 : o->sizes[d - f - ix->rank + after]);
    for (int d = f; ok && d < n->dim; d++)
      ok = o->strides[d] == o->strides[d + 1] * o->sizes[d + 1];
  } else if (ok && n->scatter == IR_SCATTER_INDEX_ADD) {
    ok = src->rank == o->rank && ix->rank <= 1 &&
         src->sizes[n->dim] == (ix->rank ? ix->sizes[0] : 1);
    for (int d = 0; ok && d < o->rank; d++)
      ok = d == n->dim || src->sizes[d] == o->sizes[d];
  } else if (ok) {
    ok = src->rank == o->rank && ix->rank == o->rank;
    for (int d = 0; ok && d < o->rank; d++)
      ok = ix->sizes[d] <= src->sizes[d] &&
           (d == n->dim || ix->sizes[d] <= o->sizes[d]);
  }
  if (!ok)
    vfail(v, "a scatter's self, index and source sizes disagree with its "
             "output's");
}

/* A scan reads its `self` view, of the output's sizes, along dim. */
static void vscan(vctx *v, const ir_node *n) {
  const ir_view *x = ir_call_view(n, "self");
  const ir_buf *o = n->out;
  bool idx = n->scan == IR_SCAN_MAX || n->scan == IR_SCAN_MIN;
  if (n->kind != IR_EXTERN || !o || o->def != n || !x ||
      (idx && (!n->out2 || n->out2->def != n ||
               n->out2->dtype != GC_DTYPE_INT64 || n->out2->rank != o->rank))) {
    vfail(v, "a scan needs an extern node writing its buffer (and indices), "
             "and a self view");
    return;
  }
  if (n->dim < 0 || n->dim >= o->rank || x->rank != o->rank)
    vfail(v, "scans dim %d of a rank-%d buffer reading a rank-%d view", n->dim,
          o->rank, x->rank);
  for (int i = 0; i < o->rank && i < x->rank; i++)
    if (x->sizes[i] != o->sizes[i] || (idx && n->out2->sizes[i] != o->sizes[i]))
      vfail(v, "scan input size %d is %lld, the buffer's %lld", i,
            (long long)x->sizes[i], (long long)o->sizes[i]);
}

/* A bilinear backward reads `grad_output` [N, C, OH, OW] and writes `out`
 * [N, C, IH, IW]; every table index is inside its axis. */
static void vinterp(vctx *v, const ir_node *n) {
  const ir_view *g = ir_call_view(n, "grad_output");
  const ir_buf *o = n->out;
  if (n->kind != IR_EXTERN || !o || o->def != n || !g || o->rank < 3 ||
      o->rank > 5 || g->rank != o->rank || g->buf->dtype != o->dtype) {
    vfail(v, "a linear upsampling backward needs an extern node writing a "
             "rank-3 to 5 buffer and a grad_output view of its rank and "
             "dtype");
    return;
  }
  for (int d = 0; d < o->rank; d++) {
    const ir_interp *a = d >= 2 ? &n->interp[d - 2] : NULL;
    int64_t gin = a ? a->out : o->sizes[d], oin = a ? a->in : o->sizes[d];
    if (g->sizes[d] != gin || o->sizes[d] != oin)
      vfail(v,
            "linear upsampling backward dim %d: grad_output %lld (want "
            "%lld), out "
            "%lld (want %lld)",
            d, (long long)g->sizes[d], (long long)gin, (long long)o->sizes[d],
            (long long)oin);
    for (int64_t i = 0; a && i < a->out; i++)
      if (a->i0[i] < 0 || a->i0[i] > a->i1[i] || a->i1[i] >= a->in) {
        vfail(v,
              "linear upsampling backward dim %d: position %lld reads %lld "
              "and "
              "%lld of %lld",
              d, (long long)i, (long long)a->i0[i], (long long)a->i1[i],
              (long long)a->in);
        break;
      }
  }
}

static void vnode(vctx *v, const ir_node *n) {
  if (n->kind == IR_POINTWISE || n->kind == IR_REDUCTION) {
    if (!n->out || n->out->def != n) {
      vfail(v, "its output buffer is not marked as written by it");
      return;
    }
    if (n->rank != n->out->rank) {
      vfail(v, "iterates %d dimensions, writes a rank-%d buffer", n->rank,
            n->out->rank);
      return;
    }
    for (int i = 0; i < n->rank; i++)
      if (n->sranges ? n->sranges[i] != n->out->ssizes[i]
                     : n->ranges[i] != n->out->sizes[i])
        vfail(v, "range %d is %s, the buffer's size %s", i,
              n->sranges
                  ? gc_sym_str((gc_symctx *)&v->ir->sym, n->sranges[i])
                  : gc_arena_printf(v->ir->a, "%lld", (long long)n->ranges[i]),
              gc_sym_str((gc_symctx *)&v->ir->sym, n->out->ssizes[i]));
    if (!n->body)
      vfail(v, "no body");
    vexpr(v, n->body);
    if (n->kind == IR_POINTWISE && n->body && n->body->dtype != n->out->dtype)
      vfail(v, "body is %s, the buffer %s", gc_dtype_name(n->body->dtype),
            gc_dtype_name(n->out->dtype));
    if (n->kind == IR_REDUCTION &&
        (ir_dtype_half(n->out->dtype) ||
         (n->out2 && ir_dtype_half(n->out2->dtype)) ||
         (n->out3 && ir_dtype_half(n->out3->dtype)) ||
         (n->body && ir_dtype_half(n->body->dtype))))
      vfail(v, "a reduction of %s values (they accumulate as float32)",
            gc_dtype_name(n->out->dtype));
  } else {
    if (n->scan || n->scatter || n->interp) {
      bool half = n->out && ir_dtype_half(n->out->dtype);
      for (int a = 0; a < n->nargs; a++)
        for (int i = 0;
             n->args[a].bufs &&
             i < (n->args[a].arg.kind == GC_ARG_TENSOR ? 1 : n->args[a].arg.n);
             i++)
          half |=
              n->args[a].bufs[i] && ir_dtype_half(n->args[a].bufs[i]->dtype);
      if (half)
        vfail(v, "generated scans, scatters and interpolations take no half "
                 "values");
    }
    for (int a = 0; a < n->nargs; a++)
      for (int i = 0;
           n->args[a].bufs &&
           i < (n->args[a].arg.kind == GC_ARG_TENSOR ? 1 : n->args[a].arg.n);
           i++) {
        const ir_buf *b = n->args[a].bufs[i];
        if (b && b->kind != IR_BUF_INPUT && v->defined_at[b->id] >= n->id)
          vfail(v, "argument %s reads buf%d before it is written",
                n->args[a].name, b->id);
      }
    if (n->scan)
      vscan(v, n);
    if (n->scatter)
      vscatter(v, n);
    if (n->interp)
      vinterp(v, n);
  }
}

const ir_view *ir_call_view(const ir_node *n, const char *name) {
  for (int a = 0; a < n->nargs; a++)
    if (n->args[a].arg.kind != GC_ARG_NONE && n->args[a].views &&
        n->args[a].bufs && n->args[a].bufs[0] && !strcmp(n->args[a].name, name))
      return n->args[a].views[0];
  return NULL;
}

bool ir_scatter_by_token(const ir_node *n) {
  return n->scatter == IR_SCATTER_EMBEDDING ||
         n->scatter == IR_SCATTER_INDEX_PUT;
}

void ir_scatter_views(const ir_node *n, const ir_view **self,
                      const ir_view **index, const ir_view **src) {
  bool emb = n->scatter == IR_SCATTER_EMBEDDING;
  *self = emb ? NULL : ir_call_view(n, "self");
  *index = ir_call_view(n, ir_scatter_by_token(n) ? "indices" : "index");
  *src = ir_call_view(n, emb                                  ? "grad_output"
                         : n->scatter == IR_SCATTER_INDEX_PUT ? "values"
                         : n->scatter == IR_SCATTER_INDEX_ADD ? "source"
                                                              : "src");
}

int ir_verify(const ir_graph *ir, gc_error *err) {
  if (ir->oom || ir->sym.oom)
    return gc_errorf(err, GC_ENOMEM, "loop IR: out of memory");
  if (ir->sym.overflow)
    return gc_errorf(err, GC_EINTERNAL, "loop IR: index arithmetic overflowed");
  gc_arena *a = gc_arena_new(0);
  int *def = a ? gc_arena_calloc(a, (size_t)ir->nbufs + 1, sizeof *def) : NULL;
  if (!def) {
    gc_arena_free(a);
    return gc_errorf(err, GC_ENOMEM, "loop IR verifier: out of memory");
  }
  for (int i = 0; i < ir->nbufs; i++)
    def[i] = ir->bufs[i]->kind == IR_BUF_INPUT ? -1 : ir->nnodes + 1;
  for (int i = 0; i < ir->nnodes; i++) {
    const ir_node *n = ir->nodes[i];
    ir_buf *outs[3] = {n->out, n->out2, n->out3};
    for (int k = 0; k < 3; k++)
      if (outs[k] && outs[k]->kind != IR_BUF_INPUT && def[outs[k]->id] > i)
        def[outs[k]->id] = i;
    for (int k = 0; k < n->nresults; k++)
      if (n->results[k] && def[n->results[k]->id] > i)
        def[n->results[k]->id] = i;
  }
  vctx v = {.ir = ir, .err = err, .defined_at = def};
  /* later passes add and multiply sizes (the schedule's work, the memory
   * plan's offsets): each buffer is at most IR_MAX_BUF_BYTES, so no sum or
   * product of them over a graph's nodes overflows (a size of 2^63 - 1
   * with stride 0 passes validation; fuzz_native) */
  for (int i = 0; i < ir->nbufs && !v.rc; i++) {
    const ir_buf *b = ir->bufs[i];
    int64_t size = gc_dtype_size(b->dtype), cap = IR_MAX_BUF_BYTES;
    if (b->symbolic) { /* bounded by a guard (gc_lower) */
      if (!b->sspan || !b->snumel || !b->ssizes || !b->sstrides)
        vfail(&v, "buf%d is symbolic without expressions", b->id);
      continue;
    }
    if (b->span < 0 || b->numel < 0 ||
        (size > 0 && (b->span > cap / size || b->numel > cap / size)))
      vfail(&v, "buf%d has more than the %lld bytes a buffer may have", b->id,
            (long long)cap);
  }
  for (int i = 0; i < ir->nnodes && !v.rc; i++) {
    v.n = ir->nodes[i];
    if (v.n->id != i)
      vfail(&v, "its id is %d at position %d", v.n->id, i);
    vnode(&v, v.n);
  }
  gc_arena_free(a);
  return v.rc;
}

/* ---- printing ---- */

typedef struct pbuf {
  gc_arena *a;
  char *s;
  size_t len, cap;
} pbuf;

static void pf(pbuf *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void pf(pbuf *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) {
    va_end(ap2);
    return;
  }
  if (p->len + (size_t)n + 1 > p->cap) {
    size_t cap = (p->cap ? p->cap * 2 : 1024) + (size_t)n;
    char *s = gc_arena_alloc(p->a, cap);
    if (!s) {
      va_end(ap2);
      return;
    }
    if (p->len)
      memcpy(s, p->s, p->len);
    p->s = s;
    p->cap = cap;
  }
  vsnprintf(p->s + p->len, p->cap - p->len, fmt, ap2);
  va_end(ap2);
  p->len += (size_t)n;
}

static const char *short_dtype(gc_dtype d) {
  switch (d) {
  case GC_DTYPE_FLOAT32:
    return "f32";
  case GC_DTYPE_FLOAT64:
    return "f64";
  case GC_DTYPE_INT64:
    return "i64";
  case GC_DTYPE_INT32:
    return "i32";
  case GC_DTYPE_INT16:
    return "i16";
  case GC_DTYPE_INT8:
    return "i8";
  case GC_DTYPE_UINT8:
    return "u8";
  case GC_DTYPE_BOOL:
    return "b8";
  case GC_DTYPE_FLOAT16:
    return "f16";
  case GC_DTYPE_BFLOAT16:
    return "bf16";
  default:
    return gc_dtype_name(d) ? gc_dtype_name(d) : "?";
  }
}

/* Printing shares what the DAG shares: an operation used by more than one
 * parent is printed once, as "$N = ...; " ahead of the expression, and
 * named $N where it is used (a tree print of a chain of n relus would be
 * 2^n long). */
typedef struct pctx {
  ir_graph *ir;
  pbuf lets; /* "$0 = ...; $1 = ...; " */
  int *uses; /* per expression id: parents that use it */
  int *name; /* per expression id: its $N + 1, 0 before it is printed */
  int nnames;
} pctx;

static bool leaf(const ir_expr *e) {
  return e->op == IR_CONST || e->op == IR_LOAD || e->op == IR_INDEX ||
         e->op == IR_ACC;
}

static int count_uses(const ir_expr *e, void *ctx) {
  pctx *c = ctx;
  for (int i = 0; i < ir_op_arity(e->op); i++)
    if (e->args[i] && e->args[i]->id < c->ir->nexprs)
      c->uses[e->args[i]->id]++;
  return 0;
}

static void pexpr(pctx *c, pbuf *p, const ir_expr *e, int depth);

static void parg(pctx *c, pbuf *p, const ir_expr *e, int depth) {
  if (!e || leaf(e) || !c->uses || c->uses[e->id] < 2) {
    pexpr(c, p, e, depth);
    return;
  }
  if (!c->name[e->id]) { /* first use: define it */
    pbuf def = {.a = p->a};
    pexpr(c, &def, e, 0);
    c->name[e->id] = ++c->nnames;
    pf(&c->lets, "$%d = %s; ", c->name[e->id] - 1, def.s ? def.s : "");
  }
  pf(p, "$%d", c->name[e->id] - 1);
}

static void pexpr(pctx *c, pbuf *p, const ir_expr *e, int depth) {
  ir_graph *ir = c->ir;
  if (!e) {
    pf(p, "<null>");
    return;
  }
  if (depth > 64) {
    pf(p, "...");
    return;
  }
  switch (e->op) {
  case IR_CONST:
    if (is_float(e->dtype))
      pf(p, "%.9g", e->k.f);
    else
      pf(p, "%lld", (long long)e->k.i);
    return;
  case IR_LOAD:
    pf(p, "buf%d[%s]", e->load.buf->id, gc_sym_str(&ir->sym, e->load.index));
    return;
  case IR_GATHER:
    pf(p, "buf%d[%s + %lld*", e->load.buf->id,
       gc_sym_str(&ir->sym, e->load.index), (long long)e->load.stride);
    parg(c, p, e->args[0], depth + 1);
    pf(p, " (of %lld%s)]", (long long)e->load.size,
       e->load.wrap ? ", wraps" : "");
    return;
  case IR_INDEX:
    pf(p, "%s", gc_sym_str(&ir->sym, e->index));
    return;
  case IR_ACC:
    pf(p, "acc(node%d.%d)", e->acc.node->id, e->acc.which);
    return;
  case IR_CAST:
    pf(p, "%s(", short_dtype(e->dtype));
    parg(c, p, e->args[0], depth + 1);
    pf(p, ")");
    return;
  default:
    pf(p, "%s(", ir_op_name(e->op));
    for (int i = 0; i < ir_op_arity(e->op); i++) {
      if (i)
        pf(p, ", ");
      parg(c, p, e->args[i], depth + 1);
    }
    pf(p, ")");
  }
}

/* e as text into p, shared operations first. */
static void pexpr_shared(ir_graph *ir, pbuf *p, const ir_expr *e) {
  pctx c = {.ir = ir, .lets = {.a = p->a}};
  size_t n = (size_t)ir->nexprs + 1;
  c.uses = calloc(n, sizeof *c.uses);
  c.name = calloc(n, sizeof *c.name);
  int rc = c.uses && c.name ? ir_expr_walk(e, count_uses, &c) : 1;
  if (rc) {
    pf(p, "<%s>", rc == IR_WALK_TOO_DEEP ? "nested too deep" : "out of memory");
    free(c.uses);
    free(c.name);
    return;
  }
  pbuf body = {.a = p->a};
  pexpr(&c, &body, e, 0);
  if (c.lets.len)
    pf(p, "%s", c.lets.s);
  pf(p, "%s", body.s ? body.s : "");
  free(c.uses);
  free(c.name);
}

char *ir_expr_str(ir_graph *ir, const ir_expr *e) {
  pbuf p = {.a = ir->a};
  pexpr_shared(ir, &p, e);
  return p.s ? p.s : gc_arena_strdup(ir->a, "");
}

ir_buf *ir_buf_storage(ir_buf *b) {
  while (b && b->share)
    b = b->share;
  return b;
}

static const char *kind_name(ir_buf_kind k) {
  switch (k) {
  case IR_BUF_INPUT:
    return "input";
  case IR_BUF_ARENA:
    return "arena";
  case IR_BUF_OUTPUT:
    return "output";
  case IR_BUF_RESULT:
    return "result";
  case IR_BUF_TEMP:
    return "temp";
  }
  return "?";
}

/* A size of a buffer or loop as text: its value, or its expression. */
static const char *psize(ir_graph *ir, int64_t v, const gc_sym *e) {
  if (v != IR_SYMBOLIC || !e)
    return gc_arena_printf(ir->a, "%lld", (long long)v);
  return ir_sym_text(ir, e);
}

static void pbufdecl(ir_graph *ir, pbuf *p, const ir_buf *b) {
  pf(p, "buf%d: %s[", b->id, short_dtype(b->dtype));
  for (int i = 0; i < b->rank; i++)
    pf(p, "%s%s", i ? ", " : "", psize(ir, b->sizes[i], b->ssizes[i]));
  pf(p, "] strides [");
  for (int i = 0; i < b->rank; i++)
    pf(p, "%s%s", i ? ", " : "", psize(ir, b->strides[i], b->sstrides[i]));
  pf(p, "] %s", kind_name(b->kind));
  if (b->kind == IR_BUF_INPUT || b->kind == IR_BUF_OUTPUT)
    pf(p, " %d", b->index);
  if (b->share)
    pf(p, " in place of buf%d live %d..%d", b->share->id, b->first, b->last);
  else if (b->kind == IR_BUF_ARENA && b->first >= 0)
    pf(p, " @%lld live %d..%d", (long long)b->arena_offset, b->first, b->last);
  if (b->mutated)
    pf(p, " (written back)");
}

static void pvars(ir_graph *ir, pbuf *p, gc_sym **vars, const int64_t *r,
                  gc_sym *const *sr, int n) {
  for (int i = 0; i < n; i++)
    pf(p, "%s%s<%s", i ? ", " : "", gc_sym_str(&ir->sym, vars[i]),
       psize(ir, r[i], sr ? sr[i] : NULL));
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

/* ---- guards and expressions as the artifact states them ---- */

static void stext(const gc_symctx *s, const gc_sym *e, pbuf *p, int depth) {
  if (depth > 256) {
    pf(p, "0");
    return;
  }
  switch (e->kind) {
  case GC_SYM_CONST:
    pf(p, "%lld", (long long)e->c);
    return;
  case GC_SYM_VAR:
    pf(p, "%s", s->vars[e->var].name);
    return;
  case GC_SYM_ADD: {
    bool first = true;
    for (int i = 0; i < e->n; i++) {
      int64_t k = e->coefs[i];
      pf(p, "%s", first ? (k < 0 ? "-" : "") : (k < 0 ? " - " : " + "));
      if (k != 1 && k != -1)
        pf(p, "%lld*", (long long)(k < 0 ? -k : k));
      bool paren = e->ops[i]->kind == GC_SYM_ADD;
      pf(p, "%s", paren ? "(" : "");
      stext(s, e->ops[i], p, depth + 1);
      pf(p, "%s", paren ? ")" : "");
      first = false;
    }
    if (e->c)
      pf(p, " %s %lld", e->c < 0 ? "-" : "+",
         (long long)(e->c < 0 ? -e->c : e->c));
    return;
  }
  case GC_SYM_MUL:
    for (int i = 0; i < e->n; i++) {
      bool paren = e->ops[i]->kind == GC_SYM_ADD;
      pf(p, "%s%s", i ? "*" : "", paren ? "(" : "");
      stext(s, e->ops[i], p, depth + 1);
      pf(p, "%s", paren ? ")" : "");
    }
    return;
  case GC_SYM_FLOORDIV:
  case GC_SYM_MOD:
    /* parenthesized whole: in a product, "64*(x + 15) // 16" would read
     * as (64*(x + 15)) // 16 (the grammar's * and // are one
     * left-associative level), not the 64*((x + 15) // 16) the generated
     * C computes */
    pf(p, "((");
    stext(s, e->ops[0], p, depth + 1);
    pf(p, ") %s %lld)", e->kind == GC_SYM_FLOORDIV ? "//" : "%",
       (long long)e->c);
    return;
  case GC_SYM_MIN:
  case GC_SYM_MAX:
    pf(p, "%s(", e->kind == GC_SYM_MIN ? "min" : "max");
    stext(s, e->ops[0], p, depth + 1);
    pf(p, ", ");
    stext(s, e->ops[1], p, depth + 1);
    pf(p, ")");
    return;
  }
}

char *ir_sym_text(ir_graph *ir, const gc_sym *e) {
  pbuf p = {.a = ir->a};
  if (!e)
    return gc_arena_strdup(ir->a, "?");
  stext(&ir->sym, e, &p, 0);
  return p.s ? p.s : gc_arena_strdup(ir->a, "");
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

char *ir_print(ir_graph *ir) {
  pbuf p = {.a = ir->a};
  for (int i = 0; i < ir->nbufs; i++)
    if (ir->bufs[i]->kind == IR_BUF_INPUT) {
      pbufdecl(ir, &p, ir->bufs[i]);
      pf(&p, "\n");
    }
  for (int i = 0; i < ir->nnodes; i++) {
    ir_node *n = ir->nodes[i];
    pf(&p, "\nnode%d %s", n->id, n->name ? n->name : "");
    if (n->what)
      pf(&p, " (%s)", n->what);
    if (n->ngnodes) {
      pf(&p, " graph nodes");
      for (int k = 0; k < n->ngnodes; k++)
        pf(&p, " %d", n->gnodes[k]);
    }
    pf(&p, "\n");
    switch (n->kind) {
    case IR_POINTWISE:
    case IR_REDUCTION:
      pf(&p, "  ");
      pbufdecl(ir, &p, n->out);
      pf(&p, "\n  %s over [", n->kind == IR_POINTWISE ? "pointwise" : "reduce");
      pvars(ir, &p, n->vars, n->ranges, n->sranges, n->rank);
      pf(&p, "]");
      if (n->kind == IR_REDUCTION) {
        pf(&p, " %s over [", ir_reduction_name(n->red));
        pvars(ir, &p, n->rvars, n->rranges, n->srranges, n->rrank);
        pf(&p, "]");
        if (n->out2) {
          pf(&p, "\n  also ");
          pbufdecl(ir, &p, n->out2);
        }
        if (n->out3) {
          pf(&p, "\n  also ");
          pbufdecl(ir, &p, n->out3);
        }
      }
      pf(&p, "\n  = ");
      pexpr_shared(ir, &p, n->body);
      pf(&p, "\n");
      break;
    case IR_EXTERN:
    case IR_FALLBACK:
      pf(&p, "  %s %s(",
         n->scan                ? "scan"
         : n->scatter           ? "scatter"
         : n->interp            ? "interp"
         : n->kind == IR_EXTERN ? "extern"
                                : "fallback",
         n->op ? n->op->name : "?");
      for (int a = 0; a < n->nargs; a++) {
        const ir_call_arg *ca = &n->args[a];
        pf(&p, "%s%s=", a ? ", " : "", ca->name);
        if (ca->bufs) {
          int cnt = ca->arg.kind == GC_ARG_TENSOR ? 1 : ca->arg.n;
          for (int k = 0; k < cnt; k++)
            pf(&p, "%s%s", k ? "|" : "",
               ca->bufs[k] ? gc_arena_printf(ir->a, "buf%d", ca->bufs[k]->id)
                           : "None");
        } else {
          pf(&p, "%s", gc_arg_kind_name(ca->arg.kind));
        }
      }
      pf(&p, ")\n");
      for (int k = 0; k < n->nresults; k++)
        if (n->results[k]) {
          pf(&p, "  -> ");
          pbufdecl(ir, &p, n->results[k]);
          pf(&p, "\n");
        }
      if (n->out) {
        pf(&p, "  -> ");
        pbufdecl(ir, &p, n->out);
        pf(&p, " (out=)\n");
      }
      break;
    }
  }
  return p.s ? p.s : gc_arena_strdup(ir->a, "");
}
