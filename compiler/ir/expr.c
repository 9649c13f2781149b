/*
 * expr.c: the loop IR's expressions: hash-consed constructors (constants,
 * loads, gathers, casts, operations with their folding), substitution,
 * walking and statistics. See ir.h.
 */
#include "compiler/ir/ir.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ir/half.h"

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
