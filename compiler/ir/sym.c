/*
 * sym.c: symbolic integer expressions. See sym.h for the canonical form and
 * the simplification rules.
 *
 * Construction goes through a few normalizers: add_terms() builds ADD from a
 * list of (coefficient, term) pairs and a constant, mul_factors() builds MUL,
 * and the division operators apply their rules before interning. intern()
 * is the only place that allocates an expression; it hash-conses. The
 * printer is symfmt.c.
 */
#include "compiler/ir/sym.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Expressions are small; a longer ADD or a deeper nesting means a bug or a
 * pathological graph, and is refused (NULL) rather than risking the stack
 * (GC_SYM_MAX_DEPTH, sym.h). */
#define MAX_TERMS 256

/* ---- checked int64 arithmetic ---- */

static int64_t add64(gc_symctx *s, int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    s->overflow = true;
    return 0;
  }
  return r;
}

static int64_t mul64(gc_symctx *s, int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    s->overflow = true;
    return 0;
  }
  return r;
}

/* Python's floor division and modulo for d > 0. */
static int64_t fdiv(int64_t a, int64_t d) {
  int64_t q = a / d;
  return (a % d != 0 && a < 0) ? q - 1 : q;
}

static int64_t fmod64(int64_t a, int64_t d) {
  int64_t r = a % d;
  return r < 0 ? r + d : r;
}

static int64_t gcd64(int64_t a, int64_t b) {
  if (a < 0)
    a = -a;
  if (b < 0)
    b = -b;
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

/* ---- the context and hash-consing ---- */

int gc_symctx_init(gc_symctx *s, gc_arena *a) {
  memset(s, 0, sizeof *s);
  s->a = a;
  s->nbuckets = 256;
  s->buckets = gc_arena_calloc(a, s->nbuckets, sizeof *s->buckets);
  return s->buckets ? 0 : -1;
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

static uint64_t hash_of(gc_sym_kind kind, int64_t c, int var, int n,
                        gc_sym *const *ops, const int64_t *coefs) {
  uint64_t h = mix(mix(mix((uint64_t)kind, (uint64_t)c), (uint64_t)var), n);
  for (int i = 0; i < n; i++) {
    h = mix(h, (uint64_t)ops[i]->id);
    if (coefs)
      h = mix(h, (uint64_t)coefs[i]);
  }
  /* the table indexes by the low bits: mix the high ones down (murmur3's
   * finalizer), else values differing only there (multiples of a large
   * power of two) share a bucket */
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  return h ^ (h >> 33);
}

static bool same(const gc_sym *e, gc_sym_kind kind, int64_t c, int var, int n,
                 gc_sym *const *ops, const int64_t *coefs) {
  if (e->kind != kind || e->c != c || e->var != var || e->n != n)
    return false;
  for (int i = 0; i < n; i++)
    if (e->ops[i] != ops[i] || (coefs && e->coefs[i] != coefs[i]))
      return false;
  return true;
}

static void grow(gc_symctx *s) {
  size_t nb = s->nbuckets * 2;
  gc_sym **b = gc_arena_calloc(s->a, nb, sizeof *b);
  if (!b)
    return; /* keep the old table: slower, still correct */
  for (size_t i = 0; i < s->nbuckets; i++) {
    gc_sym *e = s->buckets[i];
    while (e) {
      gc_sym *next = e->chain;
      size_t k = (size_t)e->hash & (nb - 1);
      e->chain = b[k];
      b[k] = e;
      e = next;
    }
  }
  s->buckets = b;
  s->nbuckets = nb;
}

static void set_range(gc_symctx *s, gc_sym *e);

/* The unique expression with this structure (made if new). */
static gc_sym *intern(gc_symctx *s, gc_sym_kind kind, int64_t c, int var, int n,
                      gc_sym *const *ops, const int64_t *coefs) {
  if (s->oom)
    return NULL;
  uint64_t h = hash_of(kind, c, var, n, ops, coefs);
  size_t k = (size_t)h & (s->nbuckets - 1);
  for (gc_sym *e = s->buckets[k]; e; e = e->chain)
    if (e->hash == h && same(e, kind, c, var, n, ops, coefs))
      return e;
  gc_sym *e = gc_arena_zalloc(s->a, sizeof *e);
  if (!e || (n && !(e->ops = gc_arena_alloc(s->a, (size_t)n * sizeof *ops))) ||
      (coefs &&
       !(e->coefs = gc_arena_alloc(s->a, (size_t)n * sizeof *coefs)))) {
    s->oom = true;
    return NULL;
  }
  e->kind = kind;
  e->c = c;
  e->var = var;
  e->n = n;
  if (n)
    memcpy(e->ops, ops, (size_t)n * sizeof *ops);
  if (coefs)
    memcpy(e->coefs, coefs, (size_t)n * sizeof *coefs);
  e->id = (int)s->count++;
  e->hash = h;
  set_range(s, e);
  e->chain = s->buckets[k];
  s->buckets[k] = e;
  if (s->count > s->nbuckets * 2)
    grow(s);
  return e;
}

/* Saturating arithmetic for ranges: a range is a bound, and a bound at
 * the int64 limit is still a bound (products of size symbols overflow
 * any exact range). */
static int64_t sat_add64(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_add_overflow(a, b, &r))
    return r;
  return a > 0 ? INT64_MAX : INT64_MIN;
}

static int64_t sat_mul64(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_mul_overflow(a, b, &r))
    return r;
  return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
}

/* Range of c*[lo, hi]. */
static void scale_range(gc_symctx *s, int64_t c, int64_t lo, int64_t hi,
                        int64_t *rlo, int64_t *rhi) {
  (void)s;
  int64_t a = sat_mul64(c, lo), b = sat_mul64(c, hi);
  *rlo = min64(a, b);
  *rhi = max64(a, b);
}

static void set_range(gc_symctx *s, gc_sym *e) {
  switch (e->kind) {
  case GC_SYM_CONST:
    e->lo = e->hi = e->c;
    break;
  case GC_SYM_VAR:
    e->lo = s->vars[e->var].lo;
    e->hi = s->vars[e->var].hi;
    break;
  case GC_SYM_ADD:
    e->lo = e->hi = e->c;
    for (int i = 0; i < e->n; i++) {
      int64_t lo, hi;
      scale_range(s, e->coefs[i], e->ops[i]->lo, e->ops[i]->hi, &lo, &hi);
      e->lo = sat_add64(e->lo, lo);
      e->hi = sat_add64(e->hi, hi);
    }
    break;
  case GC_SYM_MUL:
    e->lo = e->hi = 1;
    for (int i = 0; i < e->n; i++) {
      int64_t a = sat_mul64(e->lo, e->ops[i]->lo),
              b = sat_mul64(e->lo, e->ops[i]->hi),
              c = sat_mul64(e->hi, e->ops[i]->lo),
              d = sat_mul64(e->hi, e->ops[i]->hi);
      e->lo = min64(min64(a, b), min64(c, d));
      e->hi = max64(max64(a, b), max64(c, d));
    }
    break;
  case GC_SYM_FLOORDIV:
    e->lo = fdiv(e->ops[0]->lo, e->c);
    e->hi = fdiv(e->ops[0]->hi, e->c);
    break;
  case GC_SYM_MOD:
    e->lo = 0;
    e->hi = e->ops[0]->lo >= 0 ? min64(e->ops[0]->hi, e->c - 1) : e->c - 1;
    break;
  case GC_SYM_MIN:
    e->lo = min64(e->ops[0]->lo, e->ops[1]->lo);
    e->hi = min64(e->ops[0]->hi, e->ops[1]->hi);
    break;
  case GC_SYM_MAX:
    e->lo = max64(e->ops[0]->lo, e->ops[1]->lo);
    e->hi = max64(e->ops[0]->hi, e->ops[1]->hi);
    break;
  }
}

gc_sym *gc_sym_const(gc_symctx *s, int64_t v) {
  return intern(s, GC_SYM_CONST, v, -1, 0, NULL, NULL);
}

gc_sym *gc_sym_newvar(gc_symctx *s, const char *name, int64_t lo, int64_t hi) {
  if (s->nvars == s->capvars) {
    int cap = s->capvars ? s->capvars * 2 : 16;
    gc_symvar *v = gc_arena_calloc(s->a, (size_t)cap, sizeof *v);
    if (!v) {
      s->oom = true;
      return NULL;
    }
    if (s->nvars)
      memcpy(v, s->vars, (size_t)s->nvars * sizeof *v);
    s->vars = v;
    s->capvars = cap;
  }
  gc_symvar *v = &s->vars[s->nvars];
  v->name = gc_arena_strdup(s->a, name);
  v->lo = lo;
  v->hi = hi;
  if (!v->name) {
    s->oom = true;
    return NULL;
  }
  return intern(s, GC_SYM_VAR, 0, s->nvars++, 0, NULL, NULL);
}

bool gc_sym_is_const(const gc_sym *e, int64_t v) {
  return e && e->kind == GC_SYM_CONST && e->c == v;
}

bool gc_sym_const_of(const gc_sym *e, int64_t *v) {
  if (!e || e->kind != GC_SYM_CONST)
    return false;
  *v = e->c;
  return true;
}

gc_sym *gc_sym_sizevar(gc_symctx *s, const char *name, int64_t lo, int64_t hi) {
  gc_sym *v = gc_sym_newvar(s, name, lo, hi);
  if (v)
    s->vars[v->var].size = true;
  return v;
}

void gc_sym_narrow(gc_symctx *s, gc_sym *v, int64_t lo) {
  if (v->kind != GC_SYM_VAR || !s->vars[v->var].size || lo <= v->lo ||
      lo > v->hi)
    return;
  s->vars[v->var].lo = lo;
  v->lo = lo;
}

gc_sym *gc_sym_loopvar(gc_symctx *s, const char *name, gc_sym *extent) {
  if (!extent)
    return NULL;
  if (extent->kind == GC_SYM_CONST)
    return gc_sym_newvar(s, name, 0, extent->c > 0 ? extent->c - 1 : 0);
  gc_sym *v = gc_sym_newvar(s, name, 0, extent->hi > 0 ? extent->hi - 1 : 0);
  if (v)
    s->vars[v->var].extent = extent;
  return v;
}

/* ---- ADD: a linear combination being built ---- */

typedef struct lin {
  int64_t c;
  int n;
  gc_sym *t[MAX_TERMS];
  int64_t k[MAX_TERMS];
  bool too_long;
} lin;

/* Adds k*e to l, flattening ADDs and folding constants. */
static void lin_add(gc_symctx *s, lin *l, gc_sym *e, int64_t k) {
  if (!e || k == 0)
    return;
  if (e->kind == GC_SYM_CONST) {
    l->c = add64(s, l->c, mul64(s, k, e->c));
    return;
  }
  if (e->kind == GC_SYM_ADD) {
    l->c = add64(s, l->c, mul64(s, k, e->c));
    for (int i = 0; i < e->n; i++)
      lin_add(s, l, e->ops[i], mul64(s, k, e->coefs[i]));
    return;
  }
  for (int i = 0; i < l->n; i++) {
    if (l->t[i] == e) {
      l->k[i] = add64(s, l->k[i], k);
      return;
    }
  }
  if (l->n == MAX_TERMS) {
    l->too_long = true;
    return;
  }
  l->t[l->n] = e;
  l->k[l->n] = k;
  l->n++;
}

/* Drops zero coefficients. */
static void lin_compact(lin *l) {
  int m = 0;
  for (int i = 0; i < l->n; i++) {
    if (l->k[i] != 0) {
      l->t[m] = l->t[i];
      l->k[m] = l->k[i];
      m++;
    }
  }
  l->n = m;
}

/* k*d*(x // d) + k*(x mod d) = k*x: merges split indices back. Returns true
 * when it changed something. */
static bool lin_merge_divmod(gc_symctx *s, lin *l) {
  for (int i = 0; i < l->n; i++) {
    gc_sym *m = l->t[i];
    if (m->kind != GC_SYM_MOD || l->k[i] == 0)
      continue;
    for (int j = 0; j < l->n; j++) {
      gc_sym *f = l->t[j];
      if (f->kind == GC_SYM_FLOORDIV && f->ops[0] == m->ops[0] &&
          f->c == m->c && l->k[j] == mul64(s, l->k[i], m->c)) {
        int64_t k = l->k[i];
        l->k[i] = l->k[j] = 0;
        lin_add(s, l, m->ops[0], k);
        return true;
      }
    }
  }
  return false;
}

static int by_id(const void *a, const void *b) {
  const gc_sym *x = *(gc_sym *const *)a, *y = *(gc_sym *const *)b;
  return (x->id > y->id) - (x->id < y->id);
}

/* The expression of a finished combination. */
static gc_sym *lin_make(gc_symctx *s, lin *l) {
  if (l->too_long) {
    s->oom = true; /* refused: callers see NULL */
    return NULL;
  }
  lin_compact(l);
  for (int guard = 0; guard < MAX_TERMS && lin_merge_divmod(s, l); guard++)
    lin_compact(l);
  lin_compact(l);
  if (l->n == 0)
    return gc_sym_const(s, l->c);
  if (l->n == 1 && l->c == 0 && l->k[0] == 1)
    return l->t[0];
  /* sort the pairs by term id */
  struct pair {
    gc_sym *t;
    int64_t k;
  } p[MAX_TERMS];
  gc_sym *ts[MAX_TERMS];
  int64_t ks[MAX_TERMS];
  for (int i = 0; i < l->n; i++) {
    p[i].t = l->t[i];
    p[i].k = l->k[i];
  }
  for (int i = 1; i < l->n; i++) { /* insertion sort: n is small */
    struct pair x = p[i];
    int j = i - 1;
    while (j >= 0 && p[j].t->id > x.t->id) {
      p[j + 1] = p[j];
      j--;
    }
    p[j + 1] = x;
  }
  for (int i = 0; i < l->n; i++) {
    ts[i] = p[i].t;
    ks[i] = p[i].k;
  }
  return intern(s, GC_SYM_ADD, l->c, -1, l->n, ts, ks);
}

gc_sym *gc_sym_add(gc_symctx *s, gc_sym *a, gc_sym *b) {
  if (!a || !b)
    return NULL;
  lin l = {0};
  lin_add(s, &l, a, 1);
  lin_add(s, &l, b, 1);
  return lin_make(s, &l);
}

gc_sym *gc_sym_sub(gc_symctx *s, gc_sym *a, gc_sym *b) {
  if (!a || !b)
    return NULL;
  lin l = {0};
  lin_add(s, &l, a, 1);
  lin_add(s, &l, b, -1);
  return lin_make(s, &l);
}

gc_sym *gc_sym_scale(gc_symctx *s, gc_sym *a, int64_t k) {
  if (!a)
    return NULL;
  if (k == 1)
    return a;
  lin l = {0};
  lin_add(s, &l, a, k);
  return lin_make(s, &l);
}

gc_sym *gc_sym_addc(gc_symctx *s, gc_sym *a, int64_t k) {
  if (!a)
    return NULL;
  if (k == 0)
    return a;
  lin l = {0};
  lin_add(s, &l, a, 1);
  l.c = add64(s, l.c, k);
  return lin_make(s, &l);
}

/* ---- MUL ---- */

gc_sym *gc_sym_mul(gc_symctx *s, gc_sym *a, gc_sym *b) {
  if (!a || !b)
    return NULL;
  if (a->kind == GC_SYM_CONST)
    return gc_sym_scale(s, b, a->c);
  if (b->kind == GC_SYM_CONST)
    return gc_sym_scale(s, a, b->c);
  /* distribute over sums, so products stay inside linear combinations */
  gc_sym *sum = a->kind == GC_SYM_ADD ? a : b->kind == GC_SYM_ADD ? b : NULL;
  if (sum) {
    gc_sym *other = sum == a ? b : a;
    gc_sym *r = gc_sym_scale(s, other, sum->c);
    for (int i = 0; i < sum->n && r; i++)
      r = gc_sym_add(
          s, r,
          gc_sym_scale(s, gc_sym_mul(s, sum->ops[i], other), sum->coefs[i]));
    return r;
  }
  gc_sym *f[MAX_TERMS];
  int n = 0;
  gc_sym *src[2] = {a, b};
  for (int k = 0; k < 2; k++) {
    if (src[k]->kind == GC_SYM_MUL) {
      for (int i = 0; i < src[k]->n && n < MAX_TERMS; i++)
        f[n++] = src[k]->ops[i];
    } else if (n < MAX_TERMS) {
      f[n++] = src[k];
    }
  }
  qsort(f, (size_t)n, sizeof *f, by_id);
  return intern(s, GC_SYM_MUL, 0, -1, n, f, NULL);
}

/* ---- FLOORDIV and MOD ---- */

/* Splits e into (Q, R) with e = Q*d + R: Q gets the terms whose coefficient
 * d divides (divided) and floor(c/d); R the rest, its constant in [0, d). */
static void split_by(gc_symctx *s, gc_sym *e, int64_t d, lin *q, lin *r) {
  memset(q, 0, sizeof *q);
  memset(r, 0, sizeof *r);
  if (e->kind != GC_SYM_ADD) {
    lin_add(s, r, e, 1);
    return;
  }
  q->c = fdiv(e->c, d);
  r->c = fmod64(e->c, d);
  for (int i = 0; i < e->n; i++) {
    if (e->coefs[i] % d == 0)
      lin_add(s, q, e->ops[i], e->coefs[i] / d);
    else
      lin_add(s, r, e->ops[i], e->coefs[i]);
  }
}

/* The gcd of the coefficients and constant of `l` with d. */
static int64_t lin_gcd(const lin *l, int64_t d) {
  int64_t g = gcd64(d, l->c);
  for (int i = 0; i < l->n && g > 1; i++)
    g = gcd64(g, l->k[i]);
  return g;
}

static void lin_divide(lin *l, int64_t g) {
  l->c /= g;
  for (int i = 0; i < l->n; i++)
    l->k[i] /= g;
}

/* Finds the largest c > 1 dividing d such that a = c*Q + R with Q an
 * integer combination and R in [0, c): the terms whose coefficient c
 * divides go to Q (divided by c), the others and the constant to R.
 * Returns c (with *q, *r set) or 1 when there is none. */
static int64_t split_small(gc_symctx *s, gc_sym *a, int64_t d, gc_sym **q,
                           gc_sym **r) {
  int64_t best = 1;
  for (int i = 0; i < a->n; i++) {
    int64_t c = gcd64(d, a->coefs[i]);
    if (c <= best || c == d)
      continue;
    lin lq = {0}, lr = {0};
    lq.c = fdiv(a->c, c);
    lr.c = fmod64(a->c, c);
    for (int k = 0; k < a->n; k++) {
      if (a->coefs[k] % c == 0)
        lin_add(s, &lq, a->ops[k], a->coefs[k] / c);
      else
        lin_add(s, &lr, a->ops[k], a->coefs[k]);
    }
    gc_sym *rr = lin_make(s, &lr);
    if (!rr || rr->lo < 0 || rr->hi >= c)
      continue;
    gc_sym *qq = lin_make(s, &lq);
    if (!qq)
      continue;
    best = c;
    *q = qq;
    *r = rr;
  }
  return best;
}

gc_sym *gc_sym_floordiv(gc_symctx *s, gc_sym *a, int64_t d) {
  if (!a || d <= 0)
    return NULL;
  if (d == 1)
    return a;
  if (a->kind == GC_SYM_CONST)
    return gc_sym_const(s, fdiv(a->c, d));
  if (fdiv(a->lo, d) == fdiv(a->hi, d))
    return gc_sym_const(s, fdiv(a->lo, d));
  if (a->kind == GC_SYM_FLOORDIV) {
    int64_t dd = mul64(s, a->c, d);
    return s->overflow ? NULL : gc_sym_floordiv(s, a->ops[0], dd);
  }
  if (a->kind == GC_SYM_ADD) {
    lin q, r;
    split_by(s, a, d, &q, &r);
    lin_compact(&q);
    if (q.n || q.c) {
      gc_sym *rest = lin_make(s, &r);
      return gc_sym_add(s, lin_make(s, &q), gc_sym_floordiv(s, rest, d));
    }
    int64_t g = lin_gcd(&r, d);
    if (g > 1) { /* (g*R') // (g*d') = R' // d' */
      lin_divide(&r, g);
      return gc_sym_floordiv(s, lin_make(s, &r), d / g);
    }
    gc_sym *q2, *r2;
    int64_t c = split_small(s, a, d, &q2, &r2);
    if (c > 1) /* (c*Q + R) // (c*d') = Q // d' when 0 <= R < c */
      return gc_sym_floordiv(s, q2, d / c);
  }
  gc_sym *ops[1] = {a};
  return intern(s, GC_SYM_FLOORDIV, d, -1, 1, ops, NULL);
}

gc_sym *gc_sym_mod(gc_symctx *s, gc_sym *a, int64_t m) {
  if (!a || m <= 0)
    return NULL;
  if (m == 1)
    return gc_sym_const(s, 0);
  if (a->kind == GC_SYM_CONST)
    return gc_sym_const(s, fmod64(a->c, m));
  if (a->lo >= 0 && a->hi < m)
    return a;
  if (a->kind == GC_SYM_MOD && a->c % m == 0)
    return gc_sym_mod(s, a->ops[0], m);
  if (a->kind == GC_SYM_ADD) {
    /* coefficients and the constant only matter modulo m */
    bool reduced = fmod64(a->c, m) != a->c;
    lin r = {0};
    r.c = fmod64(a->c, m);
    for (int i = 0; i < a->n; i++) {
      int64_t k = fmod64(a->coefs[i], m);
      reduced |= k != a->coefs[i];
      lin_add(s, &r, a->ops[i], k);
    }
    if (reduced)
      return gc_sym_mod(s, lin_make(s, &r), m);
    int64_t g = lin_gcd(&r, m);
    if (g > 1) { /* (g*R') mod (g*m') = g * (R' mod m') */
      lin_divide(&r, g);
      return gc_sym_scale(s, gc_sym_mod(s, lin_make(s, &r), m / g), g);
    }
    gc_sym *q2, *r2;
    int64_t c = split_small(s, a, m, &q2, &r2);
    if (c > 1) /* (c*Q + R) mod (c*m') = c*(Q mod m') + R when 0 <= R < c */
      return gc_sym_add(s, gc_sym_scale(s, gc_sym_mod(s, q2, m / c), c), r2);
  }
  gc_sym *ops[1] = {a};
  return intern(s, GC_SYM_MOD, m, -1, 1, ops, NULL);
}

/* ---- MIN, MAX ---- */

static gc_sym *minmax(gc_symctx *s, gc_sym_kind kind, gc_sym *a, gc_sym *b) {
  if (!a || !b)
    return NULL;
  bool is_min = kind == GC_SYM_MIN;
  if (a == b)
    return a;
  if (a->hi <= b->lo)
    return is_min ? a : b;
  if (b->hi <= a->lo)
    return is_min ? b : a;
  if (a->id > b->id) { /* commutative: canonical order */
    gc_sym *t = a;
    a = b;
    b = t;
  }
  gc_sym *ops[2] = {a, b};
  return intern(s, kind, 0, -1, 2, ops, NULL);
}

gc_sym *gc_sym_min(gc_symctx *s, gc_sym *a, gc_sym *b) {
  return minmax(s, GC_SYM_MIN, a, b);
}

gc_sym *gc_sym_max(gc_symctx *s, gc_sym *a, gc_sym *b) {
  return minmax(s, GC_SYM_MAX, a, b);
}

/* ---- substitution maps ---- */

bool gc_symmap_set(gc_symctx *s, gc_symmap *m, int var, gc_sym *to) {
  for (int k = 0; k < m->n; k++)
    if (m->var[k] == var) {
      m->to[k] = to;
      return true;
    }
  if (m->n == m->cap) { /* doubling: the old arrays stay in the arena */
    int cap = m->cap ? m->cap * 2 : 8;
    int *v = gc_arena_alloc(s->a, (size_t)cap * sizeof *v);
    gc_sym **t = gc_arena_alloc(s->a, (size_t)cap * sizeof *t);
    if (!v || !t) {
      s->oom = true;
      return false;
    }
    if (m->n) {
      memcpy(v, m->var, (size_t)m->n * sizeof *v);
      memcpy(t, m->to, (size_t)m->n * sizeof *t);
    }
    m->var = v;
    m->to = t;
    m->cap = cap;
  }
  m->var[m->n] = var;
  m->to[m->n++] = to;
  return true;
}

gc_sym *gc_symmap_get(const gc_symmap *m, int var) {
  if (m)
    for (int k = 0; k < m->n; k++) /* a few entries: a scan is quickest */
      if (m->var[k] == var)
        return m->to[k];
  return NULL;
}

/* ---- substitution and queries ---- */

static gc_sym *subst(gc_symctx *s, gc_sym *e, const gc_symmap *map, int depth) {
  if (!e || depth > GC_SYM_MAX_DEPTH) {
    s->oom = true;
    return NULL;
  }
  switch (e->kind) {
  case GC_SYM_CONST:
    return e;
  case GC_SYM_VAR: {
    gc_sym *to = gc_symmap_get(map, e->var);
    return to ? to : e;
  }
  case GC_SYM_ADD: {
    gc_sym *r = gc_sym_const(s, e->c);
    for (int i = 0; i < e->n && r; i++)
      r = gc_sym_add(
          s, r,
          gc_sym_scale(s, subst(s, e->ops[i], map, depth + 1), e->coefs[i]));
    return r;
  }
  case GC_SYM_MUL: {
    gc_sym *r = gc_sym_const(s, 1);
    for (int i = 0; i < e->n && r; i++)
      r = gc_sym_mul(s, r, subst(s, e->ops[i], map, depth + 1));
    return r;
  }
  case GC_SYM_FLOORDIV:
    return gc_sym_floordiv(s, subst(s, e->ops[0], map, depth + 1), e->c);
  case GC_SYM_MOD:
    return gc_sym_mod(s, subst(s, e->ops[0], map, depth + 1), e->c);
  case GC_SYM_MIN:
  case GC_SYM_MAX:
    return minmax(s, e->kind, subst(s, e->ops[0], map, depth + 1),
                  subst(s, e->ops[1], map, depth + 1));
  }
  return NULL;
}

gc_sym *gc_sym_subst(gc_symctx *s, gc_sym *e, const gc_symmap *map) {
  return subst(s, e, map, 0);
}

bool gc_sym_uses(const gc_sym *e, int var) {
  if (e->kind == GC_SYM_VAR)
    return e->var == var;
  for (int i = 0; i < e->n; i++)
    if (gc_sym_uses(e->ops[i], var))
      return true;
  return false;
}

bool gc_sym_linear_in(const gc_sym *e, int var, int64_t *coef) {
  *coef = 0;
  if (e->kind == GC_SYM_CONST)
    return true;
  if (e->kind == GC_SYM_VAR) {
    *coef = e->var == var;
    return true;
  }
  if (e->kind == GC_SYM_ADD) {
    for (int i = 0; i < e->n; i++) {
      const gc_sym *t = e->ops[i];
      if (t->kind == GC_SYM_VAR) {
        if (t->var == var)
          *coef = e->coefs[i];
      } else if (gc_sym_uses(t, var)) {
        return false;
      }
    }
    return true;
  }
  return !gc_sym_uses(e, var);
}

bool gc_sym_is_affine(const gc_sym *e) {
  if (e->kind == GC_SYM_CONST || e->kind == GC_SYM_VAR)
    return true;
  if (e->kind != GC_SYM_ADD)
    return false;
  for (int i = 0; i < e->n; i++)
    if (e->ops[i]->kind != GC_SYM_VAR)
      return false;
  return true;
}

/* ---- symbolic sizes ---- */

static bool symbolic_in(const gc_symctx *s, const gc_sym *e, int depth) {
  if (depth > GC_SYM_MAX_DEPTH)
    return true;
  if (e->kind == GC_SYM_VAR)
    return s->vars[e->var].size;
  for (int i = 0; i < e->n; i++)
    if (symbolic_in(s, e->ops[i], depth + 1))
      return true;
  return false;
}

bool gc_sym_symbolic(const gc_symctx *s, const gc_sym *e) {
  return e && symbolic_in(s, e, 0);
}

bool gc_sym_le(gc_symctx *s, gc_sym *a, gc_sym *b) {
  gc_sym *d = gc_sym_sub(s, b, a);
  return d && d->lo >= 0;
}

/* The extent of loop index v (a constant one from its range). */
static gc_sym *extent_of(gc_symctx *s, const gc_sym *v) {
  const gc_symvar *x = &s->vars[v->var];
  if (x->extent)
    return x->extent;
  return gc_sym_const(s, x->hi + 1);
}

/* The largest (upper) or smallest value of e over its loop indices, as an
 * expression over the size symbols: every operation is monotone in its
 * operands once their signs are known (sums by their coefficients'
 * signs, products of non-negative factors, floor division by a positive
 * constant, min and max), so each index goes to an end of its extent.
 * NULL when e has a form that is not (a product with a factor of unknown
 * sign). */
static gc_sym *bound(gc_symctx *s, gc_sym *e, bool upper, int depth) {
  if (!e || depth > GC_SYM_MAX_DEPTH)
    return NULL;
  switch (e->kind) {
  case GC_SYM_CONST:
    return e;
  case GC_SYM_VAR:
    if (s->vars[e->var].size)
      return e;
    return upper ? gc_sym_addc(s, extent_of(s, e), -1) : gc_sym_const(s, 0);
  case GC_SYM_ADD: {
    gc_sym *r = gc_sym_const(s, e->c);
    for (int i = 0; i < e->n && r; i++)
      r = gc_sym_add(s, r,
                     gc_sym_scale(s,
                                  bound(s, e->ops[i],
                                        upper == (e->coefs[i] > 0), depth + 1),
                                  e->coefs[i]));
    return r;
  }
  case GC_SYM_MUL: {
    gc_sym *r = gc_sym_const(s, 1);
    for (int i = 0; i < e->n && r; i++) {
      if (e->ops[i]->lo < 0)
        return NULL;
      r = gc_sym_mul(s, r, bound(s, e->ops[i], upper, depth + 1));
    }
    return r;
  }
  case GC_SYM_FLOORDIV:
    return gc_sym_floordiv(s, bound(s, e->ops[0], upper, depth + 1), e->c);
  case GC_SYM_MOD:
    return gc_sym_const(s, upper ? e->c - 1 : 0);
  case GC_SYM_MIN:
  case GC_SYM_MAX: {
    gc_sym *a = bound(s, e->ops[0], upper, depth + 1);
    gc_sym *b = bound(s, e->ops[1], upper, depth + 1);
    return e->kind == GC_SYM_MIN ? gc_sym_min(s, a, b) : gc_sym_max(s, a, b);
  }
  }
  return NULL;
}

gc_sym *gc_sym_upper(gc_symctx *s, gc_sym *e) {
  return bound(s, e, true, 0);
}

bool gc_sym_coef(gc_symctx *s, const gc_sym *e, int var, gc_sym **coef) {
  *coef = gc_sym_const(s, 0);
  if (e->kind == GC_SYM_CONST)
    return true;
  gc_sym *one[1] = {(gc_sym *)e};
  int64_t ones[1] = {1};
  gc_sym *const *ops = e->kind == GC_SYM_ADD ? e->ops : one;
  const int64_t *coefs = e->kind == GC_SYM_ADD ? e->coefs : ones;
  int n = e->kind == GC_SYM_ADD ? e->n : 1;
  for (int i = 0; i < n; i++) {
    const gc_sym *t = ops[i];
    if (!gc_sym_uses(t, var))
      continue;
    gc_sym *c = NULL;
    if (t->kind == GC_SYM_VAR) {
      c = gc_sym_const(s, 1);
    } else if (t->kind == GC_SYM_MUL) {
      c = gc_sym_const(s, 1);
      int seen = 0;
      for (int k = 0; k < t->n && c; k++) {
        const gc_sym *f = t->ops[k];
        if (f->kind == GC_SYM_VAR && f->var == var)
          seen++;
        else if (f->kind == GC_SYM_VAR && s->vars[f->var].size)
          c = gc_sym_mul(s, c, (gc_sym *)f);
        else
          return false;
      }
      if (seen != 1)
        return false;
    } else {
      return false;
    }
    *coef = gc_sym_add(s, *coef, gc_sym_scale(s, c, coefs[i]));
  }
  return *coef != NULL;
}
