/*
 * ir.c: the loop IR's constructors and substitution. See ir.h for the
 * model; the verifier is verify.c, the printer compiler/dump_ir.c.
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

bool ir_dtype_is_float(gc_dtype d) {
  return d == GC_DTYPE_FLOAT32 || d == GC_DTYPE_FLOAT64 ||
         d == GC_DTYPE_FLOAT16 || d == GC_DTYPE_BFLOAT16;
}

ir_expr *ir_const_f(ir_graph *ir, double v, gc_dtype dt) {
  ir_expr e = {.op = IR_CONST, .dtype = dt};
  if (ir_dtype_is_float(dt)) {
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
  if (ir_dtype_is_float(dt))
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

bool ir_op_yields_bool(ir_op op) {
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
      return ir_const_i(
          ir, ir_dtype_is_float(x->dtype) ? x->k.f != 0 : x->k.i != 0, dt);
    if (ir_dtype_is_float(dt))
      return ir_const_f(
          ir, ir_dtype_is_float(x->dtype) ? x->k.f : (double)x->k.i, dt);
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
  bool half = ir_dtype_half(dt) && op != IR_CAST && !ir_op_yields_bool(op);
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
  if (!ir_dtype_half(dt) || ir_op_yields_bool(op))
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
  ir_expr e = {.op = op, .dtype = ir_op_yields_bool(op) ? GC_DTYPE_BOOL : dt};
  e.args[0] = a;
  e.args[1] = n > 1 ? b : NULL;
  e.args[2] = n > 2 ? c : NULL;
  /* exact identities only: x*1, x/1, where(c, x, x), where of a known
   * condition, and a comparison of an index with a constant that the
   * index's range decides (what a loop split into ranges makes of cat's
   * and padding's selections), also through where()s of such indices */
  if ((op == IR_MUL || op == IR_DIV) && b->op == IR_CONST && b->dtype == dt &&
      a->dtype == dt && (ir_dtype_is_float(dt) ? b->k.f == 1.0 : b->k.i == 1))
    return a;
  if (op == IR_WHERE && b == c && b->dtype == e.dtype)
    return b;
  if (op == IR_WHERE && a->op == IR_CONST && !ir_dtype_is_float(a->dtype) &&
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
