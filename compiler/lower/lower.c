/*
 * lower.c: the lowering driver and the helpers rules are written with. See
 * lower.h for what lowering guarantees.
 *
 * Order of work:
 *   1. every tensor input becomes an INPUT buffer with its metadata;
 *   2. nodes in program order: the table's rule, else a fallback; after a
 *      rule the outputs are checked against the metadata, and unrealized
 *      results with several users that are costly to recompute are
 *      realized;
 *   3. program outputs get OUTPUT buffers with eager's exact strides (before
 *      the write-backs: they read the inputs as they were);
 *   4. the epilogue (aten::copy_ into graph inputs) last, in two phases so
 *      that no write-back reads an input another one already overwrote.
 *
 * A rule that fails (GC_EUNSUPPORTED, or outputs that disagree with the
 * metadata) is undone: the nodes it appended are dropped and the values it
 * realized forget their buffers, then the node becomes a fallback.
 */
#include "compiler/lower/lower.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ir/half.h"
#include "compiler/opfacts.h"
#include "compiler/ops.h"
#include "compiler/schema.h"
#include "compiler/strmap.h"
#include "compiler/torchops.h"

/* Inlining limits (Inductor's realization heuristics, see lower.h). */
#define REALIZE_READS_SHARED 4 /* a multi-user value with more loads */
#define REALIZE_OPS_SHARED 30  /* ... or more operations is realized */
#define REALIZE_READS_ANY 8    /* any value with more loads is realized */
#define REALIZE_OPS_ANY 96     /* ... or more operations */

typedef struct rule {
  const char *name;
  gc_opclass cls;
  lower_fn fn; /* NULL: a row of facts only, a fallback */
  int param;
} rule;

/* The lowering columns of the operator facts table, row for row (a row's
 * gc_opfacts.index is its index here). */
static const rule rules[] = {
#define RULE(name, cls, fn, param) {name, GC_OPC_##cls, fn, param},
#define OP(name, cls, fn, param, flags, inv, inv_op, writes, when)             \
  RULE(name, cls, fn, param)
#define FACTS(name, flags, inv, inv_op, writes, when)                          \
  {name, GC_OPC_FALLBACK, NULL, 0},
#include "compiler/opfacts.def"
#undef RULE
#undef OP
#undef FACTS
};
#define NRULES (sizeof rules / sizeof rules[0])

struct lower_ctx {
  ir_graph *ir;
  const gc_functional *f;
  const gc_graph *g;
  gc_error *err;
  ir_tensor **val;          /* graph value id -> its IR tensor */
  int *users;               /* graph value id -> number of uses */
  gc_strmap ops;            /* operator name -> gc_op (introduced operators) */
  ir_tensor **realized_log; /* tensors realized, for undoing a rule */
  int nrealized, caprealized;
  gc_lower_stats *stats;
  const gc_node *cur; /* the node being lowered */
  int *prov;          /* graph nodes inlined into what cur builds */
  int nprov, capprov;
  bool channels_last; /* 4-D float32 intermediates channels-last (see
                         chosen_layout) */
  bool *eager_layout; /* graph value id -> a program output or what one
                         views: keeps eager's layout */
  bool *call_reads;   /* graph value id -> an extern or fallback call reads
                         it, directly or through views (realized then) */
  const gc_symbols *symbols; /* the graph's symbols, numbered as the key */
};

ir_graph *L_ir(lower_ctx *L) {
  return L->ir;
}

/* ---- dtypes ---- */

bool L_is_float(gc_dtype d) {
  return d == GC_DTYPE_FLOAT32 || d == GC_DTYPE_FLOAT64 || ir_dtype_half(d);
}

gc_dtype L_opmath(gc_dtype d) {
  return ir_dtype_half(d) ? GC_DTYPE_FLOAT32 : d;
}

bool L_is_integral(gc_dtype d) {
  switch (d) {
  case GC_DTYPE_UINT8:
  case GC_DTYPE_INT8:
  case GC_DTYPE_INT16:
  case GC_DTYPE_INT32:
  case GC_DTYPE_INT64:
  case GC_DTYPE_BOOL:
    return true;
  default:
    return false;
  }
}

bool L_dtype_ok(gc_dtype d) {
  return L_is_float(d) || L_is_integral(d);
}

/* ---- arguments ---- */

const gc_arg *L_arg(lower_ctx *L, const gc_node *n, const char *name) {
  (void)L;
  for (int i = 0; i < n->nargs; i++)
    if (strcmp(n->args[i].name, name) == 0)
      return &n->args[i].arg;
  const gc_schema *s = n->op->schema;
  int p = gc_schema_find_arg(s, name);
  if (p >= 0 && s->args[p].has_default)
    return &s->args[p].def;
  return NULL;
}

ir_tensor *L_tensor(lower_ctx *L, const gc_node *n, const char *name) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a || a->kind != GC_ARG_TENSOR || !a->v || a->v->kind != GC_VALUE_TENSOR)
    return NULL;
  return L->val[a->v->id];
}

int L_tensors(lower_ctx *L, const gc_node *n, const char *name,
              ir_tensor ***out) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a || (a->kind != GC_ARG_TENSORS && a->kind != GC_ARG_OPT_TENSORS))
    return -1;
  ir_tensor **t = gc_arena_calloc(L->ir->a, (size_t)a->n + 1, sizeof *t);
  if (!t)
    return -1;
  for (int i = 0; i < a->n; i++) {
    const gc_value *v = a->vals[i];
    if (v && v->kind != GC_VALUE_TENSOR)
      return -1;
    t[i] = v ? L->val[v->id] : NULL;
  }
  *out = t;
  return a->n;
}

bool L_scalar(lower_ctx *L, const gc_node *n, const char *name, double *v,
              int64_t *iv, gc_dtype *dt) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a)
    return false;
  switch (a->kind) {
  case GC_ARG_INT:
    *iv = a->i;
    *v = (double)a->i;
    *dt = GC_DTYPE_INT64;
    return true;
  case GC_ARG_BOOL:
    *iv = a->i != 0;
    *v = (double)*iv;
    *dt = GC_DTYPE_BOOL;
    return true;
  case GC_ARG_FLOAT:
    *v = a->f;
    *iv = (int64_t)0;
    *dt = GC_DTYPE_FLOAT64;
    return true;
  default:
    return false;
  }
}

bool L_int(lower_ctx *L, const gc_node *n, const char *name, int64_t *out) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a || a->kind != GC_ARG_INT)
    return false;
  *out = a->i;
  return true;
}

bool L_bool(lower_ctx *L, const gc_node *n, const char *name, bool *out) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a || a->kind != GC_ARG_BOOL)
    return false;
  *out = a->i != 0;
  return true;
}

bool L_float(lower_ctx *L, const gc_node *n, const char *name, double *out) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a)
    return false;
  if (a->kind == GC_ARG_FLOAT)
    *out = a->f;
  else if (a->kind == GC_ARG_INT || a->kind == GC_ARG_BOOL)
    *out = (double)a->i;
  else
    return false;
  return true;
}

bool L_ints(lower_ctx *L, const gc_node *n, const char *name,
            const int64_t **ints, int *count) {
  static const int64_t none[1] = {0};
  const gc_arg *a = L_arg(L, n, name);
  if (!a)
    return false;
  if (a->kind == GC_ARG_INTS) {
    *ints = a->n ? a->ints : none;
    *count = a->n;
    return true;
  }
  if (a->kind == GC_ARG_INT) { /* int[1] given as a single int */
    *ints = &a->i;
    *count = 1;
    return true;
  }
  return false;
}

bool L_dtype(lower_ctx *L, const gc_node *n, const char *name, gc_dtype *out) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a || a->kind != GC_ARG_SCALAR_TYPE)
    return false;
  *out = (gc_dtype)a->i;
  return true;
}

const gc_tensor_meta *L_out_meta(const gc_node *n, int k) {
  if (k < 0 || k >= n->noutputs || n->outputs[k].kind != GC_ARG_TENSOR ||
      !n->outputs[k].v)
    return NULL;
  return &n->outputs[k].v->meta;
}

bool L_static_sizes(const gc_tensor_meta *m, int64_t *sizes) {
  for (int i = 0; i < m->rank; i++) {
    if (m->sizes[i].expr)
      return false;
    sizes[i] = m->sizes[i].v;
  }
  return true;
}

static bool static_strides(const gc_tensor_meta *m, int64_t *strides) {
  for (int i = 0; i < m->rank; i++) {
    if (m->strides[i].expr)
      return false;
    strides[i] = m->strides[i].v;
  }
  return !m->offset.expr;
}

/* ---- symbolic sizes ---- */

bool L_symbolic(lower_ctx *L) {
  return L->ir->nsyms > 0;
}

/* A parsed expression as a gc_sym over the size symbols (recursion
 * bounded by the parser's depth limit). */
static gc_sym *sx_sym(lower_ctx *L, const gc_symexpr *e) {
  gc_symctx *s = &L->ir->sym;
  gc_sym *r, *d;
  int64_t k;
  switch (e->kind) {
  case GC_SX_INT:
    return gc_sym_const(s, e->i);
  case GC_SX_SYM: {
    int i = L->symbols ? gc_symbols_find(L->symbols, e->name) : -1;
    return i >= 0 && i < L->ir->nsyms ? L->ir->syms[i] : NULL;
  }
  case GC_SX_NEG:
    return gc_sym_scale(s, sx_sym(L, e->args[0]), -1);
  case GC_SX_ADD:
  case GC_SX_MUL:
    r = sx_sym(L, e->args[0]);
    for (int i = 1; i < e->nargs && r; i++)
      r = e->kind == GC_SX_ADD ? gc_sym_add(s, r, sx_sym(L, e->args[i]))
                               : gc_sym_mul(s, r, sx_sym(L, e->args[i]));
    return r;
  case GC_SX_FLOORDIV:
  case GC_SX_MOD:
    r = sx_sym(L, e->args[0]);
    d = sx_sym(L, e->args[1]);
    if (!r || !d || !gc_sym_const_of(d, &k) || k <= 0)
      return NULL;
    return e->kind == GC_SX_FLOORDIV ? gc_sym_floordiv(s, r, k)
                                     : gc_sym_mod(s, r, k);
  case GC_SX_MAX:
  case GC_SX_MIN:
    r = sx_sym(L, e->args[0]);
    for (int i = 1; i < e->nargs && r; i++)
      r = e->kind == GC_SX_MAX ? gc_sym_max(s, r, sx_sym(L, e->args[i]))
                               : gc_sym_min(s, r, sx_sym(L, e->args[i]));
    return r;
  default:
    return NULL; /* true division, powers, comparisons... */
  }
}

gc_sym *L_symint(lower_ctx *L, const gc_symint *v) {
  if (!v->expr)
    return gc_sym_const(&L->ir->sym, v->v);
  return v->tree && L->ir->nsyms ? sx_sym(L, v->tree) : NULL;
}

bool L_sym_sizes(lower_ctx *L, const gc_tensor_meta *m, gc_sym **sizes) {
  if (m->rank > IR_MAX_RANK)
    return false;
  for (int i = 0; i < m->rank; i++)
    if (!(sizes[i] = L_symint(L, &m->sizes[i])))
      return false;
  return true;
}

bool L_sym_strides(lower_ctx *L, const gc_tensor_meta *m, gc_sym **strides) {
  if (m->rank > IR_MAX_RANK)
    return false;
  for (int i = 0; i < m->rank; i++)
    if (!(strides[i] = L_symint(L, &m->strides[i])))
      return false;
  return true;
}

bool L_symints(lower_ctx *L, const gc_node *n, const char *name, gc_sym **out,
               int *count, int max) {
  const gc_arg *a = L_arg(L, n, name);
  if (!a)
    return false;
  gc_symctx *s = &L->ir->sym;
  if (a->kind == GC_ARG_INTS || a->kind == GC_ARG_INT) {
    int cnt = a->kind == GC_ARG_INT ? 1 : a->n;
    if (cnt > max)
      return false;
    for (int i = 0; i < cnt; i++)
      if (!(out[i] =
                gc_sym_const(s, a->kind == GC_ARG_INT ? a->i : a->ints[i])))
        return false;
    *count = cnt;
    return true;
  }
  if (a->kind != GC_ARG_SYM_INTS || a->n > max)
    return false;
  for (int i = 0; i < a->n; i++) {
    const gc_value *v = a->syms[i].v;
    out[i] = v ? (v->kind == GC_VALUE_SYM_INT ? L_symint(L, &v->sym) : NULL)
               : gc_sym_const(s, a->syms[i].i);
    if (!out[i])
      return false;
  }
  *count = a->n;
  return true;
}

bool L_guard(lower_ctx *L, const gc_node *n, ir_guard_op op, gc_sym *a,
             gc_sym *b, ir_guard_kind kind, const char *what) {
  /* node ids and operator names follow the key (the canonical order, the
   * compiler's operator table), never the client's names */
  const char *text =
      n ? gc_arena_printf(L->ir->a, "%s (node %d, %s)", what, n->id,
                          n->op ? n->op->schema->qualified : "?")
        : what;
  return ir_guard_add(L->ir, op, a, b, kind, text);
}

/* Dense strides for sizes in the stride order of `like` (contiguous
 * without it), symbolic: the order of like's strides is read at a probe
 * size (ir_probe), which only chooses a layout: the code is right for
 * any. */
static void dense_like_s(lower_ctx *L, int rank, gc_sym *const *sizes,
                         const gc_tensor_meta *like, gc_sym **strides) {
  gc_symctx *s = &L->ir->sym;
  gc_sym *ls[IR_MAX_RANK];
  if (!like || like->rank != rank || !L_sym_strides(L, like, ls)) {
    ir_contiguous_sstrides(L->ir, rank, sizes, strides);
    return;
  }
  double key[IR_MAX_RANK];
  for (int i = 0; i < rank; i++)
    key[i] = ir_probe(L->ir, ls[i]);
  int order[IR_MAX_RANK];
  for (int i = 0; i < rank; i++)
    order[i] = i;
  for (int i = 1; i < rank; i++) { /* stable insertion sort, stride desc */
    int d = order[i], j = i - 1;
    while (j >= 0 && key[order[j]] < key[d]) {
      order[j + 1] = order[j];
      j--;
    }
    order[j + 1] = d;
  }
  gc_sym *st = gc_sym_const(s, 1);
  for (int i = rank - 1; i >= 0; i--) {
    strides[order[i]] = st;
    int64_t v;
    if (gc_sym_const_of(sizes[order[i]], &v))
      st = gc_sym_scale(s, st, v > 1 ? v : 1);
    else
      st = gc_sym_mul(s, st, sizes[order[i]]);
  }
}

/* ---- type promotion (torch.result_type) ---- */

static int category(gc_dtype d) {
  if (d == GC_DTYPE_BOOL)
    return 0;
  if (L_is_integral(d))
    return 1;
  return 2; /* floating (complex falls back before promotion matters) */
}

/* torch.promote_types on the dtypes generated code handles. */
static gc_dtype promote(gc_dtype a, gc_dtype b) {
  if (a == GC_DTYPE_UNKNOWN)
    return b;
  if (b == GC_DTYPE_UNKNOWN || a == b)
    return a;
  int ca = category(a), cb = category(b);
  if (ca != cb)
    return ca > cb ? a : b;
  if (ca == 2)
    return gc_dtype_size(a) >= gc_dtype_size(b) ? a : b;
  /* integers: uint8 with a signed type needs the next wider signed type */
  bool ua = a == GC_DTYPE_UINT8, ub = b == GC_DTYPE_UINT8;
  if (ua || ub) {
    gc_dtype other = ua ? b : a;
    if (other == GC_DTYPE_INT8)
      return GC_DTYPE_INT16;
    return other;
  }
  return gc_dtype_size(a) >= gc_dtype_size(b) ? a : b;
}

gc_dtype L_result_type(lower_ctx *L, const gc_node *n,
                       const char *const *names) {
  /* three priority classes: tensors with dimensions, zero-dim tensors,
   * numbers (wrapped or literal) */
  gc_dtype cls[3] = {GC_DTYPE_UNKNOWN, GC_DTYPE_UNKNOWN, GC_DTYPE_UNKNOWN};
  for (; *names; names++) {
    const gc_arg *a = L_arg(L, n, *names);
    if (!a || a->kind == GC_ARG_NONE)
      continue;
    if (a->kind == GC_ARG_TENSOR && a->v && a->v->kind == GC_VALUE_TENSOR) {
      int c = a->v->meta.rank > 0 ? 0 : 1;
      cls[c] = promote(cls[c], a->v->meta.dtype);
    } else if (a->kind == GC_ARG_INT) {
      cls[2] = promote(cls[2], GC_DTYPE_INT64);
    } else if (a->kind == GC_ARG_FLOAT) {
      cls[2] = promote(cls[2], GC_DTYPE_FLOAT32); /* the default dtype */
    } else if (a->kind == GC_ARG_BOOL) {
      cls[2] = promote(cls[2], GC_DTYPE_BOOL);
    } else {
      return GC_DTYPE_UNKNOWN;
    }
  }
  gc_dtype r = cls[0];
  for (int c = 1; c < 3; c++) {
    if (cls[c] == GC_DTYPE_UNKNOWN)
      continue;
    if (r == GC_DTYPE_UNKNOWN)
      r = cls[c];
    else if (category(cls[c]) > category(r))
      r = c == 2 && category(cls[c]) == 2 && category(r) < 2
              ? GC_DTYPE_FLOAT32
              : promote(r, cls[c]);
  }
  return r;
}

/* ---- IR helpers ---- */

gc_sym **L_vars(lower_ctx *L, int rank, const int64_t *sizes) {
  gc_symctx *s = &L->ir->sym;
  gc_sym **v = gc_arena_calloc(L->ir->a, (size_t)rank + 1, sizeof *v);
  if (!v)
    return NULL;
  for (int i = 0; i < rank; i++) {
    char name[24];
    snprintf(name, sizeof name, "i%d", s->nvars);
    if (!(v[i] = gc_sym_newvar(s, name, 0, sizes[i] > 0 ? sizes[i] - 1 : 0)))
      return NULL;
  }
  return v;
}

gc_sym **L_svars(lower_ctx *L, int rank, gc_sym *const *sizes) {
  gc_symctx *s = &L->ir->sym;
  gc_sym **v = gc_arena_calloc(L->ir->a, (size_t)rank + 1, sizeof *v);
  if (!v)
    return NULL;
  for (int i = 0; i < rank; i++) {
    char name[24];
    snprintf(name, sizeof name, "i%d", s->nvars);
    if (!(v[i] = gc_sym_loopvar(s, name, sizes[i])))
      return NULL;
  }
  return v;
}

/* The extent of loop variable x (NULL: not a variable). */
static gc_sym *extent_of(lower_ctx *L, const gc_sym *x) {
  if (!x || x->kind != GC_SYM_VAR)
    return NULL;
  const gc_symvar *v = &L->ir->sym.vars[x->var];
  if (v->extent)
    return v->extent;
  return NULL; /* a constant extent: the metadata is static there */
}

/* Remembers that graph nodes `ids` are being inlined into cur's result. */
static void add_prov(lower_ctx *L, const int *ids, int n) {
  for (int i = 0; i < n; i++) {
    bool seen = false;
    for (int k = 0; k < L->nprov && !seen; k++)
      seen = L->prov[k] == ids[i];
    if (seen)
      continue;
    if (L->nprov == L->capprov) {
      int cap = L->capprov ? L->capprov * 2 : 16;
      int *p = gc_arena_calloc(L->ir->a, (size_t)cap, sizeof *p);
      if (!p)
        return;
      if (L->nprov)
        memcpy(p, L->prov, (size_t)L->nprov * sizeof *p);
      L->prov = p;
      L->capprov = cap;
    }
    L->prov[L->nprov++] = ids[i];
  }
}

/* Unrealized tensors t reads through (itself, a view's bases). */
static void note_inlined(lower_ctx *L, const ir_tensor *t) {
  for (int depth = 0; t && depth < 64; depth++) {
    if (t->kind == IR_T_LOOP && !t->realized)
      add_prov(L, t->gnodes, t->ngnodes);
    t = t->kind == IR_T_VIEW ? t->base : NULL;
  }
}

ir_expr *L_load(lower_ctx *L, ir_tensor *t, gc_sym *const *idx) {
  if (t) {
    t->uses++;
    note_inlined(L, t);
  }
  return ir_tensor_load(L->ir, t, idx);
}

/* The graph nodes a new result computes: cur and what it inlined. */
static int provenance(lower_ctx *L, int **out) {
  if (L->cur)
    add_prov(L, &L->cur->id, 1);
  int *p = gc_arena_calloc(L->ir->a, (size_t)L->nprov + 1, sizeof *p);
  if (!p)
    return 0;
  memcpy(p, L->prov, (size_t)L->nprov * sizeof *p);
  for (int i = 1; i < L->nprov; i++) { /* ascending, for readable comments */
    int v = p[i], j = i - 1;
    while (j >= 0 && p[j] > v) {
      p[j + 1] = p[j];
      j--;
    }
    p[j + 1] = v;
  }
  *out = p;
  return L->nprov;
}

ir_expr *L_load_bcast(lower_ctx *L, ir_tensor *t, int rank,
                      gc_sym *const *idx) {
  if (!t || t->rank > rank)
    return NULL;
  gc_sym *ti[IR_MAX_RANK];
  int lead = rank - t->rank;
  for (int i = 0; i < t->rank; i++) {
    bool one = t->ssizes ? gc_sym_is_const(t->ssizes[i], 1) : t->sizes[i] == 1;
    ti[i] = one ? gc_sym_const(&L->ir->sym, 0) : idx[lead + i];
    if (one || !L->ir->nsyms || !t->ssizes)
      continue;
    /* a symbolic dim read at the result's index: the two must be equal
     * (a symbolic size that is 1 at run time would broadcast: not the
     * code compiled here) */
    gc_sym *ext = extent_of(L, idx[lead + i]);
    bool sym = gc_sym_symbolic(&L->ir->sym, t->ssizes[i]);
    if (!ext && sym && idx[lead + i]->kind == GC_SYM_VAR)
      ext =
          gc_sym_const(&L->ir->sym, L->ir->sym.vars[idx[lead + i]->var].hi + 1);
    if (ext && ext != t->ssizes[i] &&
        (sym || gc_sym_symbolic(&L->ir->sym, ext)) &&
        !L_guard(L, L->cur, IR_GUARD_EQ, t->ssizes[i], ext, IR_GUARD_BROADCAST,
                 gc_arena_printf(L->ir->a,
                                 "dim %d of an operand is not broadcast", i)))
      return NULL;
  }
  return L_load(L, t, ti);
}

static void note_gnode(lower_ctx *L, ir_tensor *t) {
  if (t)
    t->ngnodes = provenance(L, &t->gnodes);
}

ir_tensor *L_pointwise(lower_ctx *L, const gc_node *n, gc_dtype dt, int rank,
                       const int64_t *sizes, gc_sym **vars, ir_expr *body) {
  gc_sym **ss = ir_syms_of(L->ir, rank, sizes);
  return ss ? L_spointwise(L, n, dt, rank, ss, vars, body) : NULL;
}

/* t->sizes and t->ssizes from symbolic sizes (arena copies). */
static bool set_sizes(lower_ctx *L, ir_tensor *t, int rank,
                      gc_sym *const *sizes) {
  if (!(t->sizes = gc_arena_calloc(L->ir->a, (size_t)rank + 1, 8)) ||
      !(t->ssizes =
            gc_arena_calloc(L->ir->a, (size_t)rank + 1, sizeof *t->ssizes)))
    return false;
  if (rank)
    memcpy(t->ssizes, sizes, (size_t)rank * sizeof *sizes);
  ir_ints_of(rank, sizes, t->sizes);
  return true;
}

ir_tensor *L_spointwise(lower_ctx *L, const gc_node *n, gc_dtype dt, int rank,
                        gc_sym *const *sizes, gc_sym **vars, ir_expr *body) {
  (void)n;
  if (!body || !vars || rank > IR_MAX_RANK)
    return NULL;
  ir_tensor *t = gc_arena_zalloc(L->ir->a, sizeof *t);
  if (!t || !set_sizes(L, t, rank, sizes))
    return NULL;
  t->kind = IR_T_LOOP;
  t->dtype = dt;
  t->rank = rank;
  t->vars = vars;
  t->body = body->dtype == dt ? body : ir_cast(L->ir, body, dt);
  if (!t->body)
    return NULL;
  ir_expr_stats(t->body, &t->nreads, &t->nops, &t->costly);
  note_gnode(L, t);
  return t;
}

static gc_sym **tsizes(lower_ctx *L, ir_tensor *t);

ir_tensor *L_to_dtype(lower_ctx *L, const gc_node *n, ir_tensor *t,
                      gc_dtype dt) {
  if (!t || t->dtype == dt)
    return t;
  /* over the sizes as expressions: t's may be symbolic */
  gc_sym **ss = tsizes(L, t);
  gc_sym **v = ss ? L_svars(L, t->rank, ss) : NULL;
  return v ? L_spointwise(L, n, dt, t->rank, ss, v, L_load(L, t, v)) : NULL;
}

ir_tensor *L_view(lower_ctx *L, ir_tensor *base, int rank, const int64_t *sizes,
                  gc_sym **vars, gc_sym **map) {
  gc_sym **ss = ir_syms_of(L->ir, rank, sizes);
  return ss ? L_sview(L, base, rank, ss, vars, map) : NULL;
}

ir_tensor *L_sview(lower_ctx *L, ir_tensor *base, int rank,
                   gc_sym *const *sizes, gc_sym **vars, gc_sym **map) {
  if (!base || !vars || !map || rank > IR_MAX_RANK)
    return NULL;
  for (int i = 0; i < base->rank; i++)
    if (!map[i])
      return NULL;
  ir_tensor *t = gc_arena_zalloc(L->ir->a, sizeof *t);
  if (!t || !set_sizes(L, t, rank, sizes))
    return NULL;
  t->kind = IR_T_VIEW;
  t->dtype = base->dtype;
  t->rank = rank;
  t->vars = vars;
  t->base = base;
  t->map = map;
  /* a view of a buffer is a strided buffer view when the map is affine */
  ir_view v;
  if (ir_tensor_as_strided(L->ir, t, &v)) {
    ir_view_sym(L->ir, &v);
    ir_tensor *s = L->ir->nsyms
                       ? ir_tensor_strided_s(L->ir, v.buf, rank, t->ssizes,
                                             v.sstrides, v.soffset)
                       : ir_tensor_strided(L->ir, v.buf, rank, t->sizes,
                                           v.strides, v.offset);
    if (s)
      return s;
  }
  return t;
}

ir_expr *L_checked_index(lower_ctx *L, const gc_node *n, ir_expr *i,
                         int64_t size) {
  ir_graph *ir = L->ir;
  gc_sym **vars = L_vars(L, 1, &size);
  ir_tensor *t = vars ? L_pointwise(L, n, GC_DTYPE_INT64, 1, &size, vars,
                                    ir_index(ir, vars[0], GC_DTYPE_INT64))
                      : NULL;
  ir_view v;
  if (!t || !i || !L_as_buffer(L, t, &v))
    return NULL;
  return ir_gather(ir, v.buf, gc_sym_const(&ir->sym, v.offset),
                   ir_cast(ir, i, GC_DTYPE_INT64), v.strides[0], size, true);
}

bool L_dense_strides(int rank, const int64_t *sizes, const int64_t *strides) {
  int order[IR_MAX_RANK]; /* dims by decreasing stride */
  if (rank > IR_MAX_RANK)
    return false;
  for (int i = 0; i < rank; i++)
    order[i] = i;
  for (int i = 1; i < rank; i++) {
    int d = order[i], j = i - 1;
    while (j >= 0 && strides[order[j]] < strides[d]) {
      order[j + 1] = order[j];
      j--;
    }
    order[j + 1] = d;
  }
  int64_t dense = 1;
  for (int i = rank - 1; i >= 0; i--) {
    int d = order[i];
    if (sizes[d] > 1 && strides[d] != dense)
      return false;
    dense *= sizes[d];
  }
  return true;
}

/* Dense strides for `sizes` in the stride order of `like` (eager's layout:
 * channels-last stays channels-last); contiguous without `like`. */
static void dense_like(int rank, const int64_t *sizes,
                       const gc_tensor_meta *like, int64_t *strides) {
  int64_t ls[IR_MAX_RANK];
  if (!like || like->rank != rank || !static_strides(like, ls)) {
    ir_contiguous_strides(rank, sizes, strides);
    return;
  }
  int order[IR_MAX_RANK]; /* dims from outermost to innermost */
  for (int i = 0; i < rank; i++)
    order[i] = i;
  for (int i = 1; i < rank; i++) { /* stable insertion sort, stride desc */
    int d = order[i], j = i - 1;
    while (j >= 0 && ls[order[j]] < ls[d]) {
      order[j + 1] = order[j];
      j--;
    }
    order[j + 1] = d;
  }
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[order[i]] = s;
    s *= sizes[order[i]] > 1 ? sizes[order[i]] : 1;
  }
}

/* ---- channels-last intermediates ----
 *
 * oneDNN convolves channels-last (NHWC) tensors in place; given NCHW ones,
 * ATen's convolution reorders its input and output on every call. In a
 * program of float32 2-D convolutions (gc_lower decides), every 4-D
 * float32 intermediate the program lays out itself is therefore dense
 * channels-last, and each convolution gets a channels-last input and
 * returns a channels-last result (ATen's rule: the output takes the
 * input's memory format), so the reorders go; the generated kernels
 * around the convolutions index any strides. Eager layouts stay where they
 * are observable: graph inputs and outputs, and the arguments of fallback
 * calls (call_view copies when they differ). Eager on resnet18 batch 8,
 * NCHW against an NHWC input: 185 -> 161 ms; densenet121 98 -> 76 ms;
 * efficientnet_b0 163 -> 126 ms. */

static bool cl_eligible(const lower_ctx *L, int rank, gc_dtype dt) {
  return L->channels_last && rank == 4 && dt == GC_DTYPE_FLOAT32;
}

/* Dense channels-last strides for 4-D `sizes` (dims 0, 2, 3, 1 from
 * outermost to innermost). */
static void cl_strides(const int64_t *sizes, int64_t *st) {
  static const int order[4] = {0, 2, 3, 1};
  int64_t s = 1;
  for (int i = 3; i >= 0; i--) {
    st[order[i]] = s;
    s *= sizes[order[i]] > 1 ? sizes[order[i]] : 1;
  }
}

/* m with dense channels-last strides (NULL when out of memory). */
static const gc_tensor_meta *cl_meta(lower_ctx *L, const gc_tensor_meta *m,
                                     const int64_t *sizes) {
  gc_tensor_meta *c = gc_arena_alloc(L->ir->a, sizeof *c);
  gc_symint *st = gc_arena_calloc(L->ir->a, 4, sizeof *st);
  if (!c || !st)
    return NULL;
  int64_t s[4];
  cl_strides(sizes, s);
  for (int i = 0; i < 4; i++)
    st[i].v = s[i];
  *c = *m;
  c->strides = st;
  return c;
}

/* The layout an intermediate with eager metadata `like` gets when lowering
 * chooses: channels-last where cl_eligible, else `like`. */
static const gc_tensor_meta *chosen_layout(lower_ctx *L, const ir_tensor *t,
                                           const gc_tensor_meta *like) {
  if (!cl_eligible(L, t->rank, t->dtype) ||
      (t->value && L->eager_layout[t->value->id]))
    return like;
  gc_tensor_meta m = {.dtype = t->dtype, .rank = 4};
  return cl_meta(L, like ? like : &m, t->sizes);
}

static bool log_realized(lower_ctx *L, ir_tensor *t) {
  if (L->nrealized == L->caprealized) {
    int cap = L->caprealized ? L->caprealized * 2 : 64;
    ir_tensor **n = gc_arena_calloc(L->ir->a, (size_t)cap, sizeof *n);
    if (!n)
      return false;
    if (L->nrealized)
      memcpy(n, L->realized_log, (size_t)L->nrealized * sizeof *n);
    L->realized_log = n;
    L->caprealized = cap;
  }
  L->realized_log[L->nrealized++] = t;
  return true;
}

/* A pointwise node computing t into a new buffer of `kind` with `strides`
 * (NULL: dense like `like`). */
/* The tensor's sizes as expressions. */
static gc_sym **tsizes(lower_ctx *L, ir_tensor *t) {
  if (!t->ssizes)
    t->ssizes = ir_syms_of(L->ir, t->rank, t->sizes);
  return t->ssizes;
}

static ir_buf *materialize_s(lower_ctx *L, ir_tensor *t, ir_buf_kind kind,
                             gc_sym *const *strides,
                             const gc_tensor_meta *like);

static ir_buf *materialize(lower_ctx *L, ir_tensor *t, ir_buf_kind kind,
                           const int64_t *strides, const gc_tensor_meta *like) {
  ir_graph *ir = L->ir;
  if (ir->nsyms) {
    gc_sym **ss = strides ? ir_syms_of(ir, t->rank, strides) : NULL;
    return strides && !ss ? NULL : materialize_s(L, t, kind, ss, like);
  }
  int64_t st[IR_MAX_RANK];
  if (strides)
    memcpy(st, strides, (size_t)t->rank * 8);
  else
    dense_like(t->rank, t->sizes, like, st);
  ir_buf *b = ir_buf_new(ir, kind, t->dtype, t->rank, t->sizes, st);
  ir_node *n = ir_node_new(ir, IR_POINTWISE);
  if (!b || !n)
    return NULL;
  n->out = b;
  n->rank = t->rank;
  n->ranges = b->sizes;
  n->sranges = b->ssizes;
  if (t->kind == IR_T_LOOP && !t->realized) {
    n->vars = t->vars; /* the node owns the value's variables */
    n->body = t->body;
    n->gnodes = t->gnodes;
    n->ngnodes = t->ngnodes;
  } else {
    n->vars = L_vars(L, t->rank, t->sizes);
    if (!n->vars)
      return NULL;
    n->body = ir_tensor_load(ir, t, n->vars);
  }
  if (!n->body)
    return NULL;
  n->what = "pointwise";
  b->def = n;
  if (ir_node_append(ir, n) != 0)
    return NULL;
  return b;
}

/* materialize with symbolic sizes: strides given, or dense like `like`. */
static ir_buf *materialize_s(lower_ctx *L, ir_tensor *t, ir_buf_kind kind,
                             gc_sym *const *strides,
                             const gc_tensor_meta *like) {
  ir_graph *ir = L->ir;
  gc_sym *st[IR_MAX_RANK];
  gc_sym *const *sz = tsizes(L, t);
  if (!sz || t->rank > IR_MAX_RANK)
    return NULL;
  if (strides)
    memcpy(st, strides, (size_t)t->rank * sizeof *st);
  else
    dense_like_s(L, t->rank, sz, like, st);
  ir_buf *b = ir_buf_new_s(ir, kind, t->dtype, t->rank, sz, st);
  ir_node *n = ir_node_new(ir, IR_POINTWISE);
  if (!b || !n)
    return NULL;
  n->out = b;
  n->rank = t->rank;
  n->ranges = b->sizes;
  n->sranges = b->ssizes;
  if (t->kind == IR_T_LOOP && !t->realized) {
    n->vars = t->vars; /* the node owns the value's variables */
    n->body = t->body;
    n->gnodes = t->gnodes;
    n->ngnodes = t->ngnodes;
  } else {
    n->vars = L_svars(L, t->rank, sz);
    if (!n->vars)
      return NULL;
    n->body = ir_tensor_load(ir, t, n->vars);
  }
  if (!n->body)
    return NULL;
  n->what = "pointwise";
  b->def = n;
  if (ir_node_append(ir, n) != 0)
    return NULL;
  return b;
}

ir_buf *L_realize(lower_ctx *L, ir_tensor *t, const gc_tensor_meta *like) {
  if (!t)
    return NULL;
  if (t->kind == IR_T_BUF)
    return t->buf;
  if (t->realized)
    return t->realized;
  ir_buf *b = materialize(L, t, IR_BUF_ARENA, NULL, like);
  if (!b || !log_realized(L, t))
    return NULL;
  t->realized = b;
  return b;
}

ir_buf *L_realize_chosen(lower_ctx *L, ir_tensor *t,
                         const gc_tensor_meta *like) {
  if (!t)
    return NULL;
  if (t->kind == IR_T_BUF || t->realized)
    return L_realize(L, t, like);
  const gc_tensor_meta *m = chosen_layout(L, t, like);
  return L_realize(L, t, m ? m : like);
}

bool L_as_buffer(lower_ctx *L, ir_tensor *t, ir_view *v) {
  if (ir_tensor_as_strided(L->ir, t, v))
    return true;
  ir_buf *b = L_realize_chosen(L, t, t->value ? &t->value->meta : NULL);
  if (!b)
    return false;
  *v = (ir_view){.buf = b,
                 .rank = t->rank,
                 .sizes = t->sizes,
                 .strides = b->strides,
                 .offset = 0,
                 .ssizes = tsizes(L, t),
                 .sstrides = b->sstrides,
                 .soffset = gc_sym_const(&L->ir->sym, 0)};
  return true;
}

/* b (a float32 result of a reduction) rounded to half dtype dt, in a new
 * buffer of b's layout, computed by a pointwise node the scheduler fuses
 * into the reduction's kernel. */
static ir_buf *rounded_copy(lower_ctx *L, ir_buf *b, gc_dtype dt) {
  /* b's sizes and strides as expressions (b->sizes are IR_SYMBOLIC where
   * symbolic) */
  ir_tensor *src = b ? ir_tensor_of_buf(L->ir, b) : NULL;
  gc_sym **v = src ? L_svars(L, b->rank, b->ssizes) : NULL;
  ir_tensor *t = v ? L_spointwise(L, NULL, dt, b->rank, b->ssizes, v,
                                  ir_tensor_load(L->ir, src, v))
                   : NULL;
  if (!t)
    return NULL;
  return L->ir->nsyms ? materialize_s(L, t, IR_BUF_ARENA, b->sstrides, NULL)
                      : materialize(L, t, IR_BUF_ARENA, b->strides, NULL);
}

ir_buf *L_reduce(lower_ctx *L, const gc_node *gn, ir_reduction red, gc_dtype dt,
                 int rank, const int64_t *ranges, gc_sym **vars, int rrank,
                 const int64_t *rranges, gc_sym **rvars, ir_expr *body,
                 ir_buf **out2, ir_buf **out3) {
  gc_sym **sr = ir_syms_of(L->ir, rank, ranges);
  gc_sym **srr = ir_syms_of(L->ir, rrank, rranges);
  return sr && srr ? L_sreduce(L, gn, red, dt, rank, sr, vars, rrank, srr,
                               rvars, body, out2, out3)
                   : NULL;
}

ir_buf *L_sreduce(lower_ctx *L, const gc_node *gn, ir_reduction red,
                  gc_dtype dt, int rank, gc_sym *const *ranges, gc_sym **vars,
                  int rrank, gc_sym *const *rranges, gc_sym **rvars,
                  ir_expr *body, ir_buf **out2, ir_buf **out3) {
  ir_graph *ir = L->ir;
  if (!body || !vars || (rrank && !rvars) || rank > IR_MAX_RANK)
    return NULL;
  if (ir_dtype_half(dt)) {
    /* half values accumulate in float32 and the results are rounded, as
     * ATen's reductions do (rules that compute more than the reduction in
     * float32 call this with float32 themselves) */
    ir_buf *b2 = NULL, *b3 = NULL;
    ir_buf *b = L_sreduce(L, gn, red, GC_DTYPE_FLOAT32, rank, ranges, vars,
                          rrank, rranges, rvars,
                          ir_cast(ir, body, GC_DTYPE_FLOAT32), &b2, &b3);
    if (!b)
      return NULL;
    if (b->dtype == GC_DTYPE_FLOAT32 && !(b = rounded_copy(L, b, dt)))
      return NULL;
    if ((b2 && !(b2 = rounded_copy(L, b2, dt))) ||
        (b3 && !(b3 = rounded_copy(L, b3, dt))))
      return NULL;
    if (out2)
      *out2 = b2;
    if (out3)
      *out3 = b3;
    return b;
  }
  if (ir_dtype_half(body->dtype)) /* a max of half values, ... */
    body = ir_cast(ir, body, GC_DTYPE_FLOAT32);
  const gc_tensor_meta *like = gn ? L_out_meta(gn, 0) : NULL;
  gc_sym *st[IR_MAX_RANK];
  if (ir->nsyms) {
    dense_like_s(L, rank, ranges, like && like->rank == rank ? like : NULL, st);
  } else {
    int64_t r64[IR_MAX_RANK], s64[IR_MAX_RANK];
    ir_ints_of(rank, ranges, r64);
    dense_like(rank, r64, like && like->rank == rank ? like : NULL, s64);
    for (int i = 0; i < rank; i++)
      st[i] = gc_sym_const(&ir->sym, s64[i]);
  }
  bool arg = red == IR_RED_ARGMAX || red == IR_RED_ARGMIN;
  gc_dtype odt = arg                                      ? GC_DTYPE_INT64
                 : red == IR_RED_ANY || red == IR_RED_ALL ? GC_DTYPE_BOOL
                                                          : dt;
  ir_buf *b = ir_buf_new_s(ir, IR_BUF_ARENA, odt, rank, ranges, st);
  ir_node *n = ir_node_new(ir, IR_REDUCTION);
  if (!b || !n)
    return NULL;
  n->out = b;
  n->rank = rank;
  n->ranges = b->sizes;
  n->sranges = b->ssizes;
  n->vars = vars;
  n->rrank = rrank;
  n->rranges = gc_arena_calloc(ir->a, (size_t)rrank + 1, 8);
  n->srranges = gc_arena_calloc(ir->a, (size_t)rrank + 1, sizeof *n->srranges);
  if (!n->rranges || !n->srranges)
    return NULL;
  if (rrank)
    memcpy(n->srranges, rranges, (size_t)rrank * sizeof *rranges);
  ir_ints_of(rrank, rranges, n->rranges);
  n->rvars = rvars;
  n->red = red;
  n->body = body;
  n->what = ir_reduction_name(red);
  n->ngnodes = provenance(L, &n->gnodes);
  b->def = n;
  if (arg || red == IR_RED_WELFORD) {
    gc_dtype d2 = arg ? dt : dt;
    ir_buf *b2 = ir_buf_new_s(ir, IR_BUF_ARENA, d2, rank, ranges, st);
    if (!b2)
      return NULL;
    b2->def = n;
    n->out2 = b2;
    if (out2)
      *out2 = b2;
    if (red == IR_RED_WELFORD) {
      ir_buf *b3 = ir_buf_new_s(ir, IR_BUF_ARENA, dt, rank, ranges, st);
      if (!b3)
        return NULL;
      b3->def = n;
      n->out3 = b3;
      if (out3)
        *out3 = b3;
    }
  }
  if (ir_node_append(ir, n) != 0)
    return NULL;
  return b;
}

int L_set_value(lower_ctx *L, const gc_value *v, ir_tensor *t) {
  if (!t)
    return L->ir->oom ? GC_ENOMEM : GC_EUNSUPPORTED;
  if (!t->value)
    t->value = v;
  L->val[v->id] = t;
  return 0;
}

int L_set(lower_ctx *L, const gc_node *n, int k, ir_tensor *t) {
  if (!t)
    return L->ir->oom ? GC_ENOMEM : GC_EUNSUPPORTED;
  if (k < 0 || k >= n->noutputs || n->outputs[k].kind != GC_ARG_TENSOR)
    return GC_EUNSUPPORTED;
  return L_set_value(L, n->outputs[k].v, t);
}

/* ---- operators introduced by lowering (extern .out overloads) ---- */

static const gc_op *op_named(lower_ctx *L, const char *name) {
  gc_op *op = gc_strmap_get(&L->ops, name);
  if (op)
    return op;
  for (int i = 0; i < L->g->nops; i++)
    if (strcmp(L->g->ops[i].name, name) == 0)
      return &L->g->ops[i];
  const char *text = gc_torch_schema(name);
  if (!text)
    return NULL;
  op = gc_arena_zalloc(L->ir->a, sizeof *op);
  if (!op || gc_schema_parse(L->ir->a, text, &op->schema, NULL) != 0)
    return NULL;
  op->name = op->schema->qualified;
  op->text = text;
  if (gc_strmap_put(&L->ops, op->name, op, NULL) < 0)
    return NULL;
  return op;
}

const gc_op *L_op(lower_ctx *L, const char *name) {
  return op_named(L, name);
}

/* ---- fallbacks and extern calls ---- */

/* The unrealized computation a view reads through (NULL: none). */
static ir_tensor *view_root(ir_tensor *t) {
  for (int depth = 0; t && depth < 64; depth++) {
    if (t->kind == IR_T_LOOP)
      return t->realized ? NULL : t;
    if (t->kind != IR_T_VIEW)
      return NULL;
    t = t->base;
  }
  return NULL;
}

/* A strided view of t for an ATen call that must see the layout `meta`
 * describes (eager's), realizing or copying t when needed. */
static int call_view(lower_ctx *L, ir_tensor *t, const gc_tensor_meta *meta,
                     ir_buf **buf, ir_view **view) {
  ir_graph *ir = L->ir;
  int64_t ms[IR_MAX_RANK];
  gc_sym *mss[IR_MAX_RANK];
  bool have = meta && meta->rank == t->rank && static_strides(meta, ms);
  bool shave =
      ir->nsyms && meta && meta->rank == t->rank && L_sym_strides(L, meta, mss);
  /* a view of an unrealized computation: realize the computation (in its
   * own eager layout), so the view is a strided view of its buffer rather
   * than a copy of the view */
  ir_tensor *root = t->kind == IR_T_VIEW ? view_root(t) : NULL;
  if (root && root->value && !L_realize(L, root, &root->value->meta))
    return GC_ENOMEM;
  ir_view v;
  bool ok = ir_tensor_as_strided(ir, t, &v);
  if (ok && ir->nsyms) { /* the layout eager had, exactly? */
    ir_view_sym(ir, &v);
    if (!shave)
      ok = false;
    for (int i = 0; ok && i < t->rank; i++)
      if (!gc_sym_is_const(v.ssizes[i], 1) &&
          !gc_sym_is_const(v.ssizes[i], 0) && v.sstrides[i] != mss[i])
        ok = false;
  } else if (ok && have) { /* the layout eager had, exactly? */
    for (int i = 0; i < t->rank; i++)
      if (t->sizes[i] > 1 && v.strides[i] != ms[i])
        ok = false;
  }
  if (!ok) {
    /* copy it, in eager's layout when that layout is dense */
    ir_buf *b = t->kind == IR_T_LOOP ? L_realize(L, t, meta) : NULL;
    /* realized before, for other consumers, in another layout (channels-
     * last): a copy in eager's */
    for (int i = 0; b && have && !ir->nsyms && i < t->rank; i++)
      if (t->sizes[i] > 1 && b->strides[i] != ms[i])
        b = NULL;
    if (!b) {
      b = materialize(L, t, IR_BUF_ARENA, NULL, meta);
      if (!b)
        return GC_ENOMEM;
    }
    v = (ir_view){.buf = b,
                  .rank = t->rank,
                  .sizes = t->sizes,
                  .strides = b->strides,
                  .offset = 0,
                  .ssizes = tsizes(L, t),
                  .sstrides = b->sstrides,
                  .soffset = gc_sym_const(&ir->sym, 0)};
  }
  ir_view_sym(ir, &v);
  ir_view *pv = gc_arena_alloc(ir->a, sizeof *pv);
  if (!pv)
    return GC_ENOMEM;
  *pv = v;
  *buf = v.buf;
  *view = pv;
  return 0;
}

/* Binds a graph argument as a call argument (a tensor channels-last with
 * `cl`). */
static int call_arg(lower_ctx *L, const gc_named_arg *na, ir_call_arg *ca,
                    bool cl) {
  ca->name = na->name;
  ca->arg = na->arg;
  ca->keyword = na->keyword;
  const gc_arg *a = &na->arg;
  int cnt = a->kind == GC_ARG_TENSOR                                     ? 1
            : a->kind == GC_ARG_TENSORS || a->kind == GC_ARG_OPT_TENSORS ? a->n
                                                                         : 0;
  if (!cnt)
    return 0;
  if (a->kind == GC_ARG_TENSOR && (!a->v || a->v->kind != GC_VALUE_TENSOR))
    return 0; /* a symbolic scalar: passed as a value */
  ca->bufs = gc_arena_calloc(L->ir->a, (size_t)cnt, sizeof *ca->bufs);
  ca->views = gc_arena_calloc(L->ir->a, (size_t)cnt, sizeof *ca->views);
  if (!ca->bufs || !ca->views)
    return GC_ENOMEM;
  for (int i = 0; i < cnt; i++) {
    const gc_value *v = a->kind == GC_ARG_TENSOR ? a->v : a->vals[i];
    if (!v)
      continue;
    ir_tensor *t = L->val[v->id];
    if (!t)
      return gc_errorf(L->err, GC_EINTERNAL, "lower: value %s has no IR value",
                       v->name);
    const gc_tensor_meta *m = &v->meta;
    if (cl && m->rank == 4 && t->rank == 4 && !(m = cl_meta(L, m, t->sizes)))
      return GC_ENOMEM;
    int rc = call_view(L, t, m, &ca->bufs[i], &ca->views[i]);
    if (rc)
      return rc;
  }
  return 0;
}

/* A RESULT buffer for a call's tensor result `v` (eager's layout, or
 * channels-last with `cl`). */
static ir_buf *result_buf(lower_ctx *L, ir_node *n, const gc_value *v,
                          bool cl) {
  int64_t sz[IR_MAX_RANK], st[IR_MAX_RANK];
  gc_sym *ssz[IR_MAX_RANK], *sst[IR_MAX_RANK];
  if (L->ir->nsyms && !cl && L_sym_sizes(L, &v->meta, ssz) &&
      L_sym_strides(L, &v->meta, sst)) {
    ir_buf *b = ir_buf_new_s(L->ir, IR_BUF_RESULT, v->meta.dtype, v->meta.rank,
                             ssz, sst);
    if (b) {
      b->def = n;
      b->value = v;
    }
    return b;
  }
  if (v->meta.rank > IR_MAX_RANK || !L_static_sizes(&v->meta, sz) ||
      !static_strides(&v->meta, st))
    return NULL;
  if (cl && v->meta.rank == 4)
    cl_strides(sz, st);
  ir_buf *b =
      ir_buf_new(L->ir, IR_BUF_RESULT, v->meta.dtype, v->meta.rank, sz, st);
  if (!b)
    return NULL;
  b->def = n;
  b->value = v;
  return b;
}

/* An ATen call of gn's operator on realized inputs, its results in RESULT
 * buffers (ATen allocates them): a fallback, or an extern call of an
 * operator without a usable .out overload (convolution). With `cl`, the
 * argument named "input" and the tensor results are channels-last. */
static int call_node_as(lower_ctx *L, const gc_node *gn, ir_node_kind kind,
                        bool cl) {
  ir_graph *ir = L->ir;
  ir_node *n = ir_node_new(ir, kind);
  if (!n)
    return GC_ENOMEM;
  n->gnode = gn;
  n->op = gn->op;
  n->what = gn->op->name;
  n->nargs = gn->nargs;
  n->args = gc_arena_calloc(ir->a, (size_t)gn->nargs + 1, sizeof *n->args);
  n->nresults = gn->noutputs;
  n->results =
      gc_arena_calloc(ir->a, (size_t)gn->noutputs + 1, sizeof *n->results);
  n->gnodes = gc_arena_calloc(ir->a, 1, sizeof *n->gnodes);
  if (!n->args || !n->results || !n->gnodes)
    return GC_ENOMEM;
  n->gnodes[0] = gn->id;
  n->ngnodes = 1;
  for (int i = 0; i < gn->nargs; i++) {
    /* the weight too: ATen would copy it to channels-last on every call
     * into memory of its own (fresh pages past glibc's mmap threshold);
     * the program copies it into its arena instead */
    bool as_cl = cl && (strcmp(gn->args[i].name, "input") == 0 ||
                        strcmp(gn->args[i].name, "weight") == 0);
    int rc = call_arg(L, &gn->args[i], &n->args[i], as_cl);
    if (rc)
      return rc;
  }
  for (int k = 0; k < gn->noutputs; k++) {
    const gc_arg *o = &gn->outputs[k];
    if (o->kind == GC_ARG_TENSOR && o->v && o->v->kind == GC_VALUE_TENSOR) {
      ir_buf *b = result_buf(L, n, o->v, cl);
      if (!b)
        return gc_errorf(L->err, GC_EUNSUPPORTED,
                         "lower: result %s has symbolic metadata", o->v->name);
      n->results[k] = b;
      L->val[o->v->id] = ir_tensor_of_buf(ir, b);
    } else if (o->kind == GC_ARG_TENSORS) {
      /* a Tensor[] result: one buffer per element, results[k] unused */
      for (int i = 0; i < o->n; i++) {
        ir_buf *b = result_buf(L, n, o->vals[i], false);
        if (!b)
          return GC_EUNSUPPORTED;
        L->val[o->vals[i]->id] = ir_tensor_of_buf(ir, b);
      }
    }
  }
  return ir_node_append(ir, n);
}

static int call_node(lower_ctx *L, const gc_node *gn, ir_node_kind kind) {
  return call_node_as(L, gn, kind, false);
}

static int fallback(lower_ctx *L, const gc_node *gn) {
  int rc = call_node(L, gn, IR_FALLBACK);
  if (rc == 0 && L->stats) {
    L->stats->fallback++;
    if (L->stats->fallback_ops && L->stats->nfallback_ops < L->stats->nodes)
      L->stats->fallback_ops[L->stats->nfallback_ops++] = gn->op->name;
  }
  return rc;
}

/* The bytes of gn's weight when they are not laid out channels-last (0
 * when they are, as every 1x1 kernel is; -1 past int64). */
static int64_t cl_weight_copy_bytes(lower_ctx *L, const gc_node *gn) {
  const gc_arg *w = L_arg(L, gn, "weight");
  int64_t sz[4], st[4], cl[4];
  if (!w || w->kind != GC_ARG_TENSOR || !w->v ||
      w->v->kind != GC_VALUE_TENSOR || w->v->meta.rank != 4 ||
      !L_static_sizes(&w->v->meta, sz) || !static_strides(&w->v->meta, st))
    return 0;
  cl_strides(sz, cl);
  bool same = true;
  for (int i = 0; i < 4; i++)
    if (sz[i] > 1 && st[i] != cl[i])
      same = false;
  if (same)
    return 0;
  int64_t n = 1;
  for (int i = 0; i < 4; i++)
    if (__builtin_mul_overflow(n, sz[i], &n))
      return INT64_MAX / 8;
  return n * gc_dtype_size(w->v->meta.dtype);
}

/* Is gn a float32 2-D convolution whose input and result are unambiguously
 * channels-last when dense NHWC (more than one channel and one pixel: else
 * ATen may take either layout for the other)? */
static bool cl_conv(lower_ctx *L, const gc_node *gn) {
  const gc_arg *in = L_arg(L, gn, "input");
  const gc_tensor_meta *out = L_out_meta(gn, 0);
  bool transposed = true;
  if (!in || in->kind != GC_ARG_TENSOR || !in->v ||
      in->v->kind != GC_VALUE_TENSOR || !out || out->rank != 4 ||
      (L_arg(L, gn, "transposed") &&
       (!L_bool(L, gn, "transposed", &transposed) || transposed)))
    return false; /* conv2d has no `transposed`: it never is */
  const gc_tensor_meta *m = &in->v->meta;
  int64_t a[4], b[4];
  if (!(m->rank == 4 && m->dtype == GC_DTYPE_FLOAT32 &&
        out->dtype == GC_DTYPE_FLOAT32 && L_static_sizes(m, a) &&
        L_static_sizes(out, b) && a[1] > 1 && a[2] * a[3] > 1 && b[1] > 1 &&
        b[2] * b[3] > 1))
    return false;
  /* Channels-last pays where the reorders it saves outweigh the copy it
   * adds. Given an NCHW weight and an NHWC input, ATen copies the weight to
   * channels-last on every call (its kernel is 1x1: the two layouts are the
   * same bytes, no copy); given NCHW, oneDNN reorders the input and the
   * result instead. So a convolution whose weight outweighs its input and
   * result (the late layers at small batch: wide_resnet50_2's 3x3 layer4
   * weights are 37.7 MB against 0.4 MB of activations at batch 1) keeps
   * eager's layout. */
  int64_t wb = cl_weight_copy_bytes(L, gn);
  return wb <= (a[0] * a[1] * a[2] * a[3] + b[0] * b[1] * b[2] * b[3]) * 4;
}

int L_extern_conv(lower_ctx *L, const gc_node *gn) {
  const gc_value *out = gn->noutputs ? gn->outputs[0].v : NULL;
  return call_node_as(L, gn, IR_EXTERN,
                      L->channels_last && cl_conv(L, gn) &&
                          !(out && L->eager_layout[out->id]));
}

int L_extern_call(lower_ctx *L, const gc_node *gn) {
  return call_node_as(L, gn, IR_EXTERN, false);
}

ir_node *L_out_call(lower_ctx *L, const gc_node *gn, const gc_op *op,
                    ir_buf *out, int nargs) {
  ir_graph *ir = L->ir;
  ir_node *n = ir_node_new(ir, IR_EXTERN);
  ir_call_arg *args = gc_arena_calloc(ir->a, (size_t)nargs + 1, sizeof *args);
  int *gnodes = gc_arena_calloc(ir->a, 1, sizeof *gnodes);
  if (!n || !args || !gnodes)
    return NULL;
  n->gnode = gn;
  n->op = op;
  n->what = gn->op->name;
  n->out = out;
  n->out_variant = true;
  n->args = args;
  n->nargs = nargs;
  gnodes[0] = gn->id;
  n->gnodes = gnodes;
  n->ngnodes = 1;
  out->def = n;
  return n;
}

/* An arena buffer in eager's layout for output k of gn (*b NULL when out
 * of memory); GC_EUNSUPPORTED when that layout is not dense. */
static int out_buffer(lower_ctx *L, const gc_node *gn, int k, ir_buf **b) {
  const gc_tensor_meta *m = L_out_meta(gn, k);
  int64_t sz[IR_MAX_RANK], st[IR_MAX_RANK];
  *b = NULL;
  if (L->ir->nsyms && m && m->rank <= IR_MAX_RANK) {
    gc_sym *ssz[IR_MAX_RANK], *sst[IR_MAX_RANK], *dense[IR_MAX_RANK];
    if (!L_sym_sizes(L, m, ssz) || !L_sym_strides(L, m, sst))
      return GC_EUNSUPPORTED;
    dense_like_s(L, m->rank, ssz, m, dense);
    for (int i = 0; i < m->rank; i++)
      if (!gc_sym_is_const(ssz[i], 1) && !gc_sym_is_const(ssz[i], 0) &&
          dense[i] != sst[i])
        return GC_EUNSUPPORTED;
    *b = ir_buf_new_s(L->ir, IR_BUF_ARENA, m->dtype, m->rank, ssz, sst);
    if (*b)
      (*b)->value = gn->outputs[k].v;
    return 0;
  }
  if (!m || m->rank > IR_MAX_RANK || !L_static_sizes(m, sz) ||
      !static_strides(m, st))
    return GC_EUNSUPPORTED;
  /* out= writes a dense tensor; a layout with gaps would make ATen copy */
  int64_t dense[IR_MAX_RANK];
  dense_like(m->rank, sz, m, dense);
  for (int i = 0; i < m->rank; i++)
    if (sz[i] > 1 && dense[i] != st[i])
      return GC_EUNSUPPORTED;
  *b = ir_buf_new(L->ir, IR_BUF_ARENA, m->dtype, m->rank, sz, st);
  if (*b)
    (*b)->value = gn->outputs[k].v;
  return 0;
}

/* An extern call writing `out` through the .out overload `out_op` (the
 * graph node's arguments, plus out=; a node with two outputs, as cummax,
 * writes the second into out2). The buffers are arena buffers in eager's
 * layout, so BLAS writes where the planner put them. */
int L_extern_out(lower_ctx *L, const gc_node *gn, const char *out_op) {
  return L_extern_out_skip(L, gn, out_op, NULL);
}

int L_extern_out_skip(lower_ctx *L, const gc_node *gn, const char *out_op,
                      const char *skip) {
  ir_graph *ir = L->ir;
  const gc_op *op = op_named(L, out_op);
  bool two = gn->noutputs == 2;
  if (!op || gn->noutputs < 1 || gn->noutputs > 2)
    return GC_EUNSUPPORTED;
  ir_buf *b, *b2 = NULL;
  int rc = out_buffer(L, gn, 0, &b);
  if (!rc && two)
    rc = out_buffer(L, gn, 1, &b2);
  if (rc)
    return rc;
  ir_node *n = b && (b2 || !two) ? L_out_call(L, gn, op, b, gn->nargs) : NULL;
  if (!n)
    return GC_ENOMEM;
  if (two) {
    n->out2 = b2;
    b2->def = n;
  }
  for (int i = 0; i < gn->nargs; i++) {
    if (skip && !strcmp(gn->args[i].name, skip)) {
      n->args[i].name = gn->args[i].name; /* not read: no buffer */
      n->args[i].arg = gn->args[i].arg;
      n->args[i].keyword = gn->args[i].keyword;
      continue;
    }
    rc = call_arg(L, &gn->args[i], &n->args[i], false);
    if (rc)
      return rc;
  }
  rc = ir_node_append(ir, n);
  if (!rc)
    rc = L_set(L, gn, 0, ir_tensor_of_buf(ir, b));
  if (!rc && two)
    rc = L_set(L, gn, 1, ir_tensor_of_buf(ir, b2));
  return rc;
}

/* ---- the driver ---- */

static void count_users(lower_ctx *L) {
  const gc_graph *g = L->g;
  for (int i = 0; i < g->nnodes; i++) {
    const gc_node *n = &g->nodes[i];
    for (int a = 0; a < n->nargs; a++) {
      const gc_arg *x = &n->args[a].arg;
      if (x->kind == GC_ARG_TENSOR && x->v)
        L->users[x->v->id]++;
      else if (x->kind == GC_ARG_TENSORS || x->kind == GC_ARG_OPT_TENSORS)
        for (int k = 0; k < x->n; k++)
          if (x->vals[k])
            L->users[x->vals[k]->id]++;
    }
  }
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].kind == GC_ARG_TENSOR && g->outputs[i].v)
      L->users[g->outputs[i].v->id] += 2; /* an output is always realized */
  /* A view is not a user of its base but a way to it: the base has the
   * view's users (later views first, so chains add up). Otherwise a value
   * read through views by a reduction and by an output would be inlined
   * into the reduction and computed again for the output, and where the
   * two evaluations differ in the last bit (a vector math call against a
   * scalar one) amax's backward finds no element equal to the maximum
   * (graphgen --grad, seed 272777: 0 / 0). */
  for (int i = g->nnodes - 1; i >= 0; i--) {
    const gc_node *n = &g->nodes[i];
    const gc_opfacts *f = gc_opfacts_of(n->op->schema->qualified);
    if (!f || f->cls != GC_OPC_VIEW)
      continue;
    int through = 0;
    for (int k = 0; k < n->noutputs; k++)
      if (n->outputs[k].kind == GC_ARG_TENSOR && n->outputs[k].v)
        through += L->users[n->outputs[k].v->id];
    if (through <= 1)
      continue;
    for (int a = 0; a < n->nargs; a++) {
      const gc_arg *x = &n->args[a].arg;
      if (x->kind == GC_ARG_TENSOR && x->v)
        L->users[x->v->id] += through - 1;
    }
  }
}

/* Marks the values an extern or fallback call will read (which realizes
 * them), following views back to their bases: realized when made, the
 * other users of such a value read the buffer instead of recomputing it
 * (a cat whose column sum is a bias's gradient and whose transpose is a
 * matrix product's operand: the sum then reads the cat's rows). */
static void mark_call_reads(lower_ctx *L) {
  const gc_graph *g = L->g;
  for (int i = g->nnodes - 1; i >= 0; i--) {
    const gc_node *n = &g->nodes[i];
    const gc_opfacts *f = gc_opfacts_of(n->op->schema->qualified);
    gc_opclass cls = f ? f->cls : GC_OPC_FALLBACK;
    bool mark = cls == GC_OPC_EXTERN || cls == GC_OPC_FALLBACK;
    if (cls == GC_OPC_VIEW)
      for (int k = 0; k < n->noutputs && !mark; k++)
        mark = n->outputs[k].kind == GC_ARG_TENSOR && n->outputs[k].v &&
               L->call_reads[n->outputs[k].v->id];
    if (!mark)
      continue;
    for (int a = 0; a < n->nargs; a++) {
      const gc_arg *x = &n->args[a].arg;
      if (x->kind == GC_ARG_TENSOR && x->v)
        L->call_reads[x->v->id] = true;
      else if (cls != GC_OPC_VIEW &&
               (x->kind == GC_ARG_TENSORS || x->kind == GC_ARG_OPT_TENSORS))
        for (int k = 0; k < x->n; k++)
          if (x->vals[k])
            L->call_reads[x->vals[k]->id] = true;
    }
  }
}

/* Does every tensor the node touches have a dtype generated code handles? */
static bool dtypes_ok(const gc_node *n) {
  for (int a = 0; a < n->nargs; a++) {
    const gc_arg *x = &n->args[a].arg;
    if (x->kind == GC_ARG_TENSOR && x->v && x->v->kind == GC_VALUE_TENSOR &&
        !L_dtype_ok(x->v->meta.dtype))
      return false;
    if (x->kind == GC_ARG_TENSORS || x->kind == GC_ARG_OPT_TENSORS)
      for (int k = 0; k < x->n; k++)
        if (x->vals[k] && !L_dtype_ok(x->vals[k]->meta.dtype))
          return false;
    if (x->kind == GC_ARG_TENSOR && x->v && x->v->kind != GC_VALUE_TENSOR)
      return false; /* symbolic scalars: not lowered yet */
  }
  for (int k = 0; k < n->noutputs; k++) {
    const gc_tensor_meta *m = L_out_meta(n, k);
    if (m && (!L_dtype_ok(m->dtype) || m->rank > IR_MAX_RANK ||
              m->layout != GC_LAYOUT_STRIDED))
      return false;
  }
  return true;
}

/* ---- nodes of a graph with size symbols ---- */

static bool meta_symbolic(const gc_tensor_meta *m) {
  if (m->offset.expr)
    return true;
  for (int i = 0; i < m->rank; i++)
    if (m->sizes[i].expr || m->strides[i].expr)
      return true;
  return false;
}

static bool arg_symbolic(const gc_arg *x) {
  switch (x->kind) {
  case GC_ARG_TENSOR:
    return x->v &&
           (x->v->kind != GC_VALUE_TENSOR || meta_symbolic(&x->v->meta));
  case GC_ARG_TENSORS:
  case GC_ARG_OPT_TENSORS:
    for (int k = 0; k < x->n; k++)
      if (x->vals[k] && meta_symbolic(&x->vals[k]->meta))
        return true;
    return false;
  case GC_ARG_SYM_INT:
  case GC_ARG_SYM_FLOAT:
  case GC_ARG_SYM_BOOL:
    return x->sym.v != NULL;
  case GC_ARG_SYM_INTS:
  case GC_ARG_SYM_FLOATS:
  case GC_ARG_SYM_BOOLS:
    for (int k = 0; k < x->n; k++)
      if (x->syms[k].v)
        return true;
    return false;
  default:
    return false;
  }
}

/* Does node n read or make a value with symbolic metadata, or take a
 * symbolic scalar? Its rule must then be one that reads sizes as
 * expressions (symbolic_rule). */
static bool node_symbolic(const gc_node *n) {
  for (int a = 0; a < n->nargs; a++)
    if (arg_symbolic(&n->args[a].arg))
      return true;
  for (int k = 0; k < n->noutputs; k++) {
    const gc_arg *o = &n->outputs[k];
    if (o->kind == GC_ARG_TENSOR && o->v && meta_symbolic(&o->v->meta))
      return true;
    for (int i = 0; o->kind == GC_ARG_TENSORS && i < o->n; i++)
      if (o->vals[i] && meta_symbolic(&o->vals[i]->meta))
        return true;
  }
  return false;
}

/* The rules that read every size, stride and offset through the symbolic
 * helpers (lower.h), so they run on nodes with symbolic metadata. The
 * others see only static metadata: a node with symbolic metadata whose
 * rule is not listed is a fallback (an ATen call, correct at any size). */
static const lower_fn symbolic_rules[] = {
    /* pointwise.c: every rule reads its shape through L__pw_begin */
    lower_unary,
    lower_unary_math,
    lower_binary,
    lower_rsub,
    lower_div_mode,
    lower_pow,
    lower_xlogy,
    lower_logaddexp,
    lower_lerp,
    lower_addcmul,
    lower_heaviside,
    lower_compare,
    lower_logical,
    lower_where,
    lower_masked_fill,
    lower_clamp,
    lower_copy,
    lower_copy_functional,
    lower_fill,
    lower_eye,
    lower_scalar_tensor,
    lower_arange,
    lower_round_decimals,
    lower_tri,
    /* index.c: cat with constant sizes along its dim */
    lower_cat,
    /* activations.c, backward.c: the elementwise ones */
    lower_relu,
    lower_hardtanh,
    lower_threshold,
    lower_leaky_relu,
    lower_gelu,
    lower_silu,
    lower_hardsigmoid,
    lower_softplus,
    lower_mish,
    lower_elu,
    lower_shrink,
    lower_log_sigmoid,
    lower_threshold_backward,
    lower_gelu_backward,
    lower_silu_backward,
    lower_sigmoid_backward,
    lower_hardtanh_backward,
    lower_leaky_relu_backward,
    lower_elu_backward,
    lower_softplus_backward,
    lower_hardsigmoid_backward,
    lower_shrink_backward,
    lower_log_sigmoid_backward,
    lower_logit_backward,
    /* views.c */
    lower_alias,
    lower_reshape,
    lower_permute,
    lower_transpose,
    lower_expand,
    lower_slice,
    lower_select,
    lower_diagonal,
    lower_unfold,
    /* reduce.c */
    lower_sum,
    lower_amax,
    lower_argmax,
    lower_any,
    lower_var,
    lower_softmax,
    lower_layer_norm,
    lower_logsumexp,
    lower_vector_norm,
    /* norm.c: every form of batch norm (symbolic batch, channels or
     * planes) */
    lower_batch_norm,
    /* pool.c: the forward poolings, symbolic leading dims (a symbolic
     * plane is declined) */
    lower_max_pool2d,
    lower_avg_pool2d,
    lower_adaptive_avg_pool2d,
    /* extern.c: library calls, sizes at run time */
    lower_extern_out,
    lower_conv,
    lower_extern_call,
};

static bool symbolic_rule(lower_fn fn) {
  for (size_t i = 0; i < sizeof symbolic_rules / sizeof *symbolic_rules; i++)
    if (symbolic_rules[i] == fn)
      return true;
  return false;
}

/* A node that only makes symbolic scalars (aten::sym_size, SymInt
 * arithmetic) whose values are expressions over the symbols: nothing to
 * run, the values are known (a call that takes one gets its expression,
 * which the runtime evaluates: codegen/program.c). */
static bool sym_scalar_node(lower_ctx *L, const gc_node *n) {
  if (!L->ir->nsyms || n->noutputs == 0)
    return false;
  for (int k = 0; k < n->noutputs; k++) {
    const gc_arg *o = &n->outputs[k];
    if (o->kind == GC_ARG_NONE)
      continue;
    if (o->kind != GC_ARG_SYM_INT || !o->sym.v ||
        o->sym.v->kind != GC_VALUE_SYM_INT || !L_symint(L, &o->sym.v->sym))
      return false;
  }
  /* it must not write anything (a schema that says it does is obeyed) */
  for (int a = 0; a < n->nargs; a++)
    if (n->args[a].param >= 0 && gc_node_writes(n, n->args[a].param))
      return false;
  return true;
}

/* Every output the rule set matches the metadata? */
static bool value_matches(lower_ctx *L, const gc_value *v) {
  const ir_tensor *t = L->val[v->id];
  const gc_tensor_meta *m = &v->meta;
  if (!t || t->dtype != m->dtype || t->rank != m->rank)
    return false;
  for (int i = 0; i < m->rank; i++) {
    if (L->ir->nsyms) {
      if (!t->ssizes || t->ssizes[i] != L_symint(L, &m->sizes[i]))
        return false;
    } else if (t->sizes[i] != m->sizes[i].v) {
      return false;
    }
  }
  return true;
}

static bool outputs_match(lower_ctx *L, const gc_node *n) {
  for (int k = 0; k < n->noutputs; k++) {
    const gc_arg *o = &n->outputs[k];
    if (o->kind == GC_ARG_TENSOR && o->v && !value_matches(L, o->v))
      return false;
    if (o->kind == GC_ARG_TENSORS)
      for (int i = 0; i < o->n; i++)
        if (o->vals[i] && !value_matches(L, o->vals[i]))
          return false;
  }
  return true;
}

static void undo(lower_ctx *L, const gc_node *n, int mark_nodes,
                 int mark_realized) {
  L->ir->nnodes = mark_nodes;
  while (L->nrealized > mark_realized)
    L->realized_log[--L->nrealized]->realized = NULL;
  for (int k = 0; k < n->noutputs; k++) {
    const gc_arg *o = &n->outputs[k];
    if (o->kind == GC_ARG_TENSOR && o->v)
      L->val[o->v->id] = NULL;
    if (o->kind == GC_ARG_TENSORS)
      for (int i = 0; i < o->n; i++)
        if (o->vals[i])
          L->val[o->vals[i]->id] = NULL;
  }
}

/* Realizes an unrealized result that is shared and costly, or too big to
 * keep inlining. */
static ir_expr *gather_loop(lower_ctx *L, ir_tensor *t, gc_sym *const *at,
                            int dim, ir_expr *i, bool wrap) {
  ir_graph *ir = L->ir;
  if (!t || t->kind != IR_T_LOOP || t->realized || dim < 0 || dim >= t->rank)
    return NULL;
  gc_symmap map = {0};
  for (int k = 0; k < t->rank; k++)
    if (k != dim && !gc_symmap_set(&ir->sym, &map, t->vars[k]->var,
                                   at ? at[k] : t->vars[k]))
      return NULL;
  return ir_expr_gather_var(ir, t->body, &map, t->vars[dim]->var, i,
                            t->sizes[dim], wrap);
}

bool L_gather_loop_ok(lower_ctx *L, ir_tensor *t, int dim) {
  return gather_loop(L, t, NULL, dim, ir_const_i(L->ir, 0, GC_DTYPE_INT64),
                     false) != NULL;
}

ir_expr *L_gather_loop(lower_ctx *L, ir_tensor *t, gc_sym *const *at, int dim,
                       ir_expr *i, bool wrap) {
  ir_expr *r = gather_loop(L, t, at, dim, i, wrap);
  if (r) {
    t->uses++;
    note_inlined(L, t);
  }
  return r;
}

typedef struct held {
  ir_buf *buf[2];
  int n;
  int64_t min_bytes;
} held;

static int note_held(const ir_expr *e, void *ctx) {
  held *h = ctx;
  if (!ir_reads_buffer(e))
    return 0;
  ir_buf *b = e->load.buf;
  if (b->kind == IR_BUF_INPUT ||
      b->numel * gc_dtype_size(b->dtype) < h->min_bytes ||
      (h->n == 1 && h->buf[0] == b))
    return 0;
  h->buf[h->n++] = b;
  return h->n == 2; /* enough: stop */
}

/* Does t's body read two or more intermediates, each at least as large as
 * t? Inlined into several consumers, t keeps all of them alive until the
 * last consumer; realized, only its own buffer (which may take the memory
 * of one of them). In a training backward, the sum of the two gradients
 * that reach a residual block's input goes through the previous block's
 * ReLU backward, whose result has two consumers: inlined, both addends
 * lived on through that block's whole backward (resnet18: +1 MiB at the
 * step's peak), where eager's autograd holds one sum. */
static bool holds_intermediates(const ir_tensor *t) {
  int64_t numel = 1;
  for (int i = 0; i < t->rank; i++)
    numel *= t->sizes[i];
  held h = {{NULL, NULL}, 0, numel * gc_dtype_size(t->dtype)};
  return ir_expr_walk(t->body, note_held, &h) == 1;
}

/* Realizes the computation t of value v in the layout maybe_realize
 * would give it. */
static ir_buf *realize_value(lower_ctx *L, ir_tensor *t, const gc_value *v) {
  ir_buf *b = L->eager_layout[v->id] ? L_realize(L, t, &v->meta)
                                     : L_realize_chosen(L, t, &v->meta);
  if (b && !b->value)
    b->value = v; /* what views of it view in eager (lower_outputs) */
  return b;
}

/* When realize_arg realizes an argument's computation. */
typedef enum realize_when {
  REALIZE_SHARED, /* the computation has other users */
  REALIZE_ALWAYS, /* it is a computation */
  REALIZE_COSTLY, /* it is a computation with exp, erf, ... */
} realize_when;

/* Inlined into a max or min, a computation with other users would be
 * evaluated twice, and two evaluations of one expression can differ in the
 * last bit: a product contracted into a multiply-add in one loop and not
 * in the other, a vector math call against a scalar one in a loop's tail.
 * The backward of amax compares the maximum with the values it came from
 * and divides by how many are equal: 0 / 0 when none is (graphgen --grad,
 * seed 282388). */
static int realize_arg(lower_ctx *L, const gc_node *n, const char *name,
                       ir_tensor **out, realize_when when) {
  ir_tensor *t = *out = L_tensor(L, n, name);
  if (!t)
    return 0;
  ir_tensor *root = view_root(t);
  if (!root || !root->value)
    return 0;
  if (when == REALIZE_SHARED && L->users[root->value->id] <= 1)
    return 0;
  if (when != REALIZE_SHARED && (root->kind != IR_T_LOOP || root->realized))
    return 0;
  if (when == REALIZE_COSTLY) {
    int loads = 0, ops = 0;
    bool costly = false;
    ir_expr_stats(root->body, &loads, &ops, &costly);
    if (!costly)
      return 0;
  }
  return realize_value(L, root, root->value) ? 0 : GC_ENOMEM;
}

int L_tensor_once(lower_ctx *L, const gc_node *n, const char *name,
                  ir_tensor **out) {
  return realize_arg(L, n, name, out, REALIZE_SHARED);
}

int L_tensor_realized(lower_ctx *L, const gc_node *n, const char *name,
                      ir_tensor **out) {
  return realize_arg(L, n, name, out, REALIZE_ALWAYS);
}

int L_tensor_passes(lower_ctx *L, const gc_node *n, const char *name,
                    ir_tensor **out) {
  return realize_arg(L, n, name, out, REALIZE_COSTLY);
}

static int maybe_realize(lower_ctx *L, const gc_value *v) {
  ir_tensor *t = L->val[v->id];
  if (!t || t->kind != IR_T_LOOP || t->realized)
    return 0;
  bool shared = L->users[v->id] > 1;
  bool realize = t->nreads > REALIZE_READS_ANY || t->nops > REALIZE_OPS_ANY ||
                 (shared && (t->nreads > REALIZE_READS_SHARED ||
                             t->nops > REALIZE_OPS_SHARED || t->costly)) ||
                 (shared && L->ir->memory_first && holds_intermediates(t)) ||
                 (shared && L->call_reads[v->id]);
  if (!realize)
    return 0;
  return realize_value(L, t, v) ? 0 : GC_ENOMEM;
}

static const rule *rule_of(lower_ctx *L, const gc_node *n) {
  const gc_opfacts *f = gc_opfacts_of(n->op->schema->qualified);
  if (!f || f->index < 0 || (size_t)f->index >= NRULES)
    return NULL;
  const rule *r = &rules[f->index];
  return r->fn ? r : NULL;
}

static int lower_node(lower_ctx *L, const gc_node *n) {
  L->cur = n;
  L->nprov = 0;
  if (sym_scalar_node(L, n)) {
    if (L->stats)
      L->stats->native++;
    return 0;
  }
  const rule *r = rule_of(L, n);
  if (r && n->id >= 0 && n->id < L->g->nnodes)
    L->ir->gnode_what[n->id] = r->name;
  if (r && L->ir->nsyms && node_symbolic(n) && !symbolic_rule(r->fn))
    r = NULL; /* it reads static sizes: an ATen call */
  if (r && dtypes_ok(n)) {
    int mark_nodes = L->ir->nnodes, mark_realized = L->nrealized;
    int rc = r->fn(L, n, r->param);
    if (rc == 0 && !outputs_match(L, n))
      rc = GC_EUNSUPPORTED; /* a rule bug: be exact rather than fast */
    if (rc == 0) {
      if (L->stats) {
        if (r->cls == GC_OPC_EXTERN)
          L->stats->extern_++;
        else
          L->stats->native++;
      }
      for (int k = 0; k < n->noutputs; k++)
        if (n->outputs[k].kind == GC_ARG_TENSOR && n->outputs[k].v &&
            (rc = maybe_realize(L, n->outputs[k].v)) != 0)
          return rc;
      return 0;
    }
    if (rc != GC_EUNSUPPORTED)
      return rc;
    undo(L, n, mark_nodes, mark_realized);
    L->ir->oom = false;
  }
  return fallback(L, n);
}

/* ---- the epilogue: copy_ into graph inputs ---- */

static bool is_input_writeback(const gc_node *n) {
  if (strcmp(n->op->schema->qualified, "aten::copy_") != 0 || n->nargs < 2)
    return false;
  const gc_arg *dst = &n->args[0].arg;
  return dst->kind == GC_ARG_TENSOR && dst->v && dst->v->def_node == -1;
}

/* Does expression e read any of the buffers in `bufs` (n of them) other
 * than at exactly `same` of buffer `own`? */
typedef struct others {
  ir_buf *const *bufs;
  int n;
  const ir_buf *own;
  const gc_sym *same;
} others;

static int read_other(const ir_expr *e, void *ctx) {
  const others *o = ctx;
  if (ir_reads_buffer(e))
    for (int i = 0; i < o->n; i++)
      if (e->load.buf == o->bufs[i] &&
          (e->op == IR_GATHER ||
           !(e->load.buf == o->own && e->load.index == o->same)))
        return 1;
  return 0;
}

static bool reads_other(const ir_expr *e, ir_buf *const *bufs, int n,
                        const ir_buf *own, const gc_sym *same) {
  others o = {bufs, n, own, same};
  return ir_expr_walk(e, read_other, &o) != 0; /* too deep counts as yes */
}

static ir_buf *input_buf(lower_ctx *L, const gc_value *v) {
  const ir_tensor *t = L->val[v->id];
  return t && t->kind == IR_T_BUF ? t->buf : NULL;
}

static int lower_epilogue(lower_ctx *L, const gc_node **wb, int nwb) {
  ir_graph *ir = L->ir;
  /* buffers written back, and every input sharing storage with one */
  ir_buf **written =
      gc_arena_calloc(ir->a, (size_t)L->g->ninputs + 1, sizeof *written);
  if (!written)
    return GC_ENOMEM;
  int nw = 0;
  for (int i = 0; i < L->g->ninputs; i++) {
    const gc_input *in = &L->g->inputs[i];
    if (in->arg.kind != GC_ARG_TENSOR || !in->arg.v)
      continue;
    bool hit = false;
    for (int k = 0; k < nwb && !hit; k++) {
      const gc_value *dv = wb[k]->args[0].arg.v;
      if (dv == in->arg.v)
        hit = true;
      for (int j = 0; j < L->g->ninputs && !hit; j++)
        if (L->g->inputs[j].arg.v == dv && in->storage_group >= 0 &&
            L->g->inputs[j].storage_group == in->storage_group)
          hit = true;
    }
    if (hit && input_buf(L, in->arg.v))
      written[nw++] = input_buf(L, in->arg.v);
  }
  /* phase 1: every source that reads a written input (other than its own
   * destination, element by element) is computed first */
  ir_expr **body = gc_arena_calloc(ir->a, (size_t)nwb + 1, sizeof *body);
  gc_sym ***vars = gc_arena_calloc(ir->a, (size_t)nwb + 1, sizeof *vars);
  if (!body || !vars)
    return GC_ENOMEM;
  for (int k = 0; k < nwb; k++) {
    L->cur = wb[k];
    const gc_value *dv = wb[k]->args[0].arg.v;
    ir_buf *dst = input_buf(L, dv);
    ir_tensor *src = L_tensor(L, wb[k], "src");
    if (!dst || !src || dst->kind != IR_BUF_INPUT)
      return GC_EUNSUPPORTED;
    vars[k] = L_svars(L, dst->rank, dst->ssizes);
    if (!vars[k])
      return GC_ENOMEM;
    ir_expr *e = L_load_bcast(L, src, dst->rank, vars[k]);
    gc_sym *at = gc_sym_const(&ir->sym, 0);
    for (int i = 0; i < dst->rank; i++)
      at = gc_sym_add(&ir->sym, at,
                      gc_sym_mul(&ir->sym, vars[k][i], dst->sstrides[i]));
    if (!e || reads_other(e, written, nw, dst, at)) {
      ir_buf *b = materialize(L, src, IR_BUF_ARENA, NULL, &dv->meta);
      if (!b)
        return GC_ENOMEM;
      ir_tensor *bt = ir_tensor_of_buf(ir, b);
      e = L_load_bcast(L, bt, dst->rank, vars[k]);
    }
    body[k] = ir_cast(ir, e, dst->dtype);
    if (!body[k])
      return GC_ENOMEM;
  }
  /* phase 2: the writes */
  for (int k = 0; k < nwb; k++) {
    const gc_value *dv = wb[k]->args[0].arg.v;
    ir_buf *dst = input_buf(L, dv);
    ir_node *n = ir_node_new(ir, IR_POINTWISE);
    if (!n)
      return GC_ENOMEM;
    n->out = dst;
    n->rank = dst->rank;
    n->ranges = dst->sizes;
    n->sranges = dst->ssizes;
    n->vars = vars[k];
    n->body = body[k];
    n->what = "copy_ into input";
    n->gnodes = gc_arena_calloc(ir->a, 1, sizeof *n->gnodes);
    if (n->gnodes) {
      n->gnodes[0] = wb[k]->id;
      n->ngnodes = 1;
    }
    dst->def = n;
    dst->mutated = true;
    if (ir_node_append(ir, n) != 0)
      return GC_ENOMEM;
    if (wb[k]->noutputs && wb[k]->outputs[0].kind == GC_ARG_TENSOR)
      L->val[wb[k]->outputs[0].v->id] = ir_tensor_of_buf(ir, dst);
    if (L->stats)
      L->stats->native++;
  }
  return 0;
}

/* ---- program outputs ---- */

/* Records where program output i lives: `v` (copied). */
static int set_output(lower_ctx *L, int i, const ir_view *v) {
  ir_view *c = gc_arena_alloc(L->ir->a, sizeof *c);
  if (!c)
    return GC_ENOMEM;
  *c = *v;
  L->ir->outputs[i] = c;
  return 0;
}

/* Whether graph value v is, in eager, a view of `target` (NULL: of a graph
 * input): following the operators whose return aliases an argument (view
 * operators) from v back, target (an input) is reached before a fresh
 * tensor. The functional graph keeps no producer links, so they are
 * searched (only for outputs that land on another value's buffer). True
 * when unsure. */
static bool aliases(const lower_ctx *L, const gc_value *v,
                    const gc_value *target) {
  const gc_graph *g = L->g;
  for (int depth = 0; v && depth <= g->nnodes; depth++) {
    if (target && v == target)
      return true;
    const gc_node *n = NULL;
    int slot = -1;
    for (int k = 0; k < g->nnodes && !n; k++)
      for (int j = 0; j < g->nodes[k].noutputs && !n; j++) {
        const gc_arg *o = &g->nodes[k].outputs[j];
        bool hit = o->kind == GC_ARG_TENSOR && o->v == v;
        for (int e = 0; o->kind == GC_ARG_TENSORS && e < o->n && !hit; e++)
          hit = o->vals[e] == v;
        if (hit) {
          n = &g->nodes[k];
          slot = j;
        }
      }
    if (!n)
      return !target; /* an input (or a constant) */
    if (!n->op || !n->op->schema)
      return true;
    int a = gc_schema_return_alias(n->op->schema, slot);
    if (a < 0)
      return false; /* a fresh tensor */
    const gc_value *next = NULL;
    for (int k = 0; k < n->nargs; k++)
      if (n->args[k].param == a && n->args[k].arg.kind == GC_ARG_TENSOR)
        next = n->args[k].arg.v;
    if (!next)
      return true;
    v = next;
  }
  return true;
}

/* Is v laid out otherwise than eager's strides st, in a channels-last
 * program (an intermediate lowering chose channels-last: the output is
 * copied in eager's layout)? */
static bool restrided(const ir_view *v, const int64_t *st) {
  for (int i = 0; i < v->rank; i++)
    if (v->sizes[i] > 1 && v->strides[i] != st[i])
      return true;
  return false;
}

/* The same with symbolic strides (sizes that may be 1 count: the layout
 * must be eager's at every size). */
static bool srestrided(const ir_view *v, gc_sym *const *st) {
  for (int i = 0; i < v->rank; i++)
    if (!gc_sym_is_const(v->ssizes[i], 1) &&
        !gc_sym_is_const(v->ssizes[i], 0) && v->sstrides[i] != st[i])
      return true;
  return false;
}

static bool relaid(const lower_ctx *L, const ir_view *v, const int64_t *st) {
  return L->channels_last && restrided(v, st);
}

/* Program outputs. An output that eager returns as a view of something
 * (an input, another output, an intermediate: chunks of one tensor share
 * its storage) stays a view here: the buffer it views becomes a per-call
 * OUTPUT buffer (never the reused arena) and the output a strided view of
 * it, so storage sharing and offsets are eager's. Other outputs are
 * computed straight into an OUTPUT buffer with eager's strides. */
static int lower_outputs(lower_ctx *L) {
  ir_graph *ir = L->ir;
  const gc_graph *g = L->g;
  ir->noutputs = g->noutputs;
  ir->outputs =
      gc_arena_calloc(ir->a, (size_t)g->noutputs + 1, sizeof *ir->outputs);
  if (!ir->outputs)
    return GC_ENOMEM;
  for (int i = 0; i < g->noutputs; i++) {
    const gc_arg *o = &g->outputs[i];
    if (o->kind != GC_ARG_TENSOR || !o->v || o->v->kind != GC_VALUE_TENSOR)
      continue;
    ir_tensor *t = L->val[o->v->id];
    if (!t)
      return gc_errorf(L->err, GC_EINTERNAL, "lower: output %d has no value",
                       i);
    int64_t st[IR_MAX_RANK];
    gc_sym *sst[IR_MAX_RANK];
    bool sym = ir->nsyms > 0;
    if (sym ? !L_sym_strides(L, &o->v->meta, sst)
            : !static_strides(&o->v->meta, st))
      return GC_EUNSUPPORTED;
    /* a view of an unrealized computation: give the computation a buffer */
    ir_tensor *root = t->kind == IR_T_VIEW ? view_root(t) : NULL;
    if (root && root->value) {
      ir_buf *b = L_realize(L, root, &root->value->meta);
      if (!b)
        return GC_ENOMEM;
    }
    ir_view v;
    /* An unrealized computation is a fresh tensor in eager even when its
     * body is a plain load (clone, contiguous, x * 1, where(c, x, x), a cat
     * of one input): it gets its own buffer, else the output would alias
     * what it copies. Likewise a view of such a computation, which
     * lowering turns into a view of the input it loads (x.clone().t()),
     * unless the output is a view of that input in eager too. */
    bool computed = (t->kind == IR_T_LOOP && !t->realized) ||
                    (t->kind == IR_T_VIEW && view_root(t));
    /* A view of another value's buffer stays one only where eager's output
     * views that value too: a view of a plain-load computation (a 1x1 max
     * pool with stride 2 of an output, reshaped) lands on the buffer the
     * computation loads from (graphgen seed 991863). */
    /* A buffer of no known value (a reduction's) is viewed only with
     * eager's strides: stack([m, m]) of a max m lowers to an expand of m's
     * buffer, strides 0 where eager's are 1 (graphgen seed 2402953). */
    bool strided = !computed && ir_tensor_as_strided(ir, t, &v);
    if (strided && sym)
      ir_view_sym(ir, &v);
    if (strided && sym && v.buf->kind != IR_BUF_INPUT &&
        (v.buf->value ? !aliases(L, o->v, v.buf->value) : srestrided(&v, sst)))
      strided = false;
    if (strided && sym && v.buf->kind == IR_BUF_INPUT &&
        !aliases(L, o->v, NULL))
      strided = false;
    if (strided && sym) {
      if (v.buf->kind == IR_BUF_ARENA) {
        v.buf->kind = IR_BUF_OUTPUT;
        v.buf->index = i;
      }
      if (set_output(L, i, &v))
        return GC_ENOMEM;
      continue;
    }
    if (sym) {
      ir_buf *b = materialize_s(L, t, IR_BUF_OUTPUT, sst, NULL);
      if (!b)
        return GC_ENOMEM;
      b->index = i;
      b->value = o->v;
      if (t->kind == IR_T_LOOP && !t->realized) {
        t->realized = b;
        log_realized(L, t);
      }
      ir_view whole = {b, b->rank,   b->sizes,    b->strides,
                       0, b->ssizes, b->sstrides, gc_sym_const(&ir->sym, 0)};
      if (set_output(L, i, &whole))
        return GC_ENOMEM;
      continue;
    }
    if (strided && (v.buf->kind != IR_BUF_INPUT || aliases(L, o->v, NULL)) &&
        (v.buf->kind == IR_BUF_INPUT ||
         (v.buf->value ? aliases(L, o->v, v.buf->value)
                       : !restrided(&v, st))) &&
        (v.buf->kind == IR_BUF_INPUT || !relaid(L, &v, st))) {
      if (v.buf->kind == IR_BUF_ARENA) {
        /* the call's result lives in the buffer it views (fresh per call) */
        v.buf->kind = IR_BUF_OUTPUT;
        v.buf->index = i;
      }
      if (set_output(L, i, &v))
        return GC_ENOMEM;
      continue;
    }
    ir_buf *b = materialize(L, t, IR_BUF_OUTPUT, st, NULL);
    if (!b)
      return GC_ENOMEM;
    b->index = i;
    b->value = o->v;
    if (t->kind == IR_T_LOOP && !t->realized) {
      t->realized = b;
      log_realized(L, t);
    }
    ir_view whole = {b, b->rank,   b->sizes,    b->strides,
                     0, b->ssizes, b->sstrides, gc_sym_const(&ir->sym, 0)};
    if (set_output(L, i, &whole))
      return GC_ENOMEM;
  }
  return 0;
}

/* Marks the program outputs and, following the operators whose return
 * aliases an argument, what each output views: they keep eager's layout,
 * so outputs that share storage in eager still do. */
static void mark_output_bases(lower_ctx *L) {
  const gc_graph *g = L->g;
  const gc_value **def_arg =
      gc_arena_calloc(L->ir->a, (size_t)g->nvalues + 1, sizeof *def_arg);
  if (!def_arg)
    return;
  for (int k = 0; k < g->nnodes; k++) { /* the argument each view views */
    const gc_node *n = &g->nodes[k];
    for (int j = 0; j < n->noutputs && n->op && n->op->schema; j++) {
      const gc_arg *o = &n->outputs[j];
      int a = gc_schema_return_alias(n->op->schema, j);
      if (o->kind != GC_ARG_TENSOR || !o->v || a < 0)
        continue;
      for (int i = 0; i < n->nargs; i++)
        if (n->args[i].param == a && n->args[i].arg.kind == GC_ARG_TENSOR)
          def_arg[o->v->id] = n->args[i].arg.v;
    }
  }
  for (int i = 0; i < g->noutputs; i++) {
    const gc_value *v =
        g->outputs[i].kind == GC_ARG_TENSOR ? g->outputs[i].v : NULL;
    for (int depth = 0; v && !L->eager_layout[v->id] && depth <= g->nnodes;
         depth++) {
      L->eager_layout[v->id] = true;
      v = def_arg[v->id];
    }
  }
}

int gc_lower(ir_graph *ir, const gc_functional *f, gc_lower_stats *stats,
             gc_error *err) {
  const gc_graph *g = f->graph;
  lower_ctx L = {.ir = ir, .f = f, .g = g, .err = err, .stats = stats};
  L.val = gc_arena_calloc(ir->a, (size_t)g->nvalues + 1, sizeof *L.val);
  L.users = gc_arena_calloc(ir->a, (size_t)g->nvalues + 1, sizeof *L.users);
  L.eager_layout =
      gc_arena_calloc(ir->a, (size_t)g->nvalues + 1, sizeof *L.eager_layout);
  L.call_reads =
      gc_arena_calloc(ir->a, (size_t)g->nvalues + 1, sizeof *L.call_reads);
  const gc_node **wb =
      gc_arena_calloc(ir->a, (size_t)g->nnodes + 1, sizeof *wb);
  ir->gnode_what =
      gc_arena_calloc(ir->a, (size_t)g->nnodes + 1, sizeof *ir->gnode_what);
  if (!L.val || !L.users || !L.eager_layout || !L.call_reads || !wb ||
      !ir->gnode_what || gc_strmap_init(&L.ops, ir->a, 16) != 0)
    return gc_errorf(err, GC_ENOMEM, "lower: out of memory");
  if (stats) {
    memset(stats, 0, sizeof *stats);
    stats->nodes = g->nnodes;
    stats->fallback_ops =
        gc_arena_calloc(ir->a, (size_t)g->nnodes + 1, sizeof(char *));
  }
  count_users(&L);
  mark_call_reads(&L);
  /* channels-last intermediates for convolutional inference programs.
   * Not for training programs: convolution_backward is a fallback that
   * sees eager's layout, so channels-last saved values would be copied
   * back for it (tried: resnet18's training step 1.03x either way). */
  /* size symbols, as the key numbers them ("s<i>") */
  L.symbols = &f->symbols;
  if (f->symbols.n > 0) {
    ir->nsyms = f->symbols.n;
    ir->syms = gc_arena_calloc(ir->a, (size_t)ir->nsyms + 1, sizeof *ir->syms);
    if (!ir->syms)
      return gc_errorf(err, GC_ENOMEM, "lower: out of memory");
    for (int i = 0; i < ir->nsyms; i++) {
      char name[24];
      snprintf(name, sizeof name, "s%d", i);
      if (!(ir->syms[i] = gc_sym_sizevar(&ir->sym, name, 0, GC_SYM_SIZE_MAX)))
        return gc_errorf(err, GC_ENOMEM, "lower: out of memory");
    }
  }
  /* not (yet) in programs with size symbols: the layout choice reads
   * static sizes */
  for (int k = 0; k < g->nnodes && !ir->memory_first && !ir->nsyms; k++)
    if ((strcmp(g->nodes[k].op->schema->qualified, "aten::convolution") == 0 ||
         strcmp(g->nodes[k].op->schema->qualified, "aten::conv2d") == 0) &&
        cl_conv(&L, &g->nodes[k]))
      L.channels_last = true;
  if (L.channels_last)
    mark_output_bases(&L);
  for (int i = 0; i < g->ninputs; i++) {
    const gc_arg *a = &g->inputs[i].arg;
    if (a->kind != GC_ARG_TENSOR || !a->v || a->v->kind != GC_VALUE_TENSOR)
      continue;
    const gc_tensor_meta *m = &a->v->meta;
    int64_t sz[IR_MAX_RANK], st[IR_MAX_RANK];
    gc_sym *ssz[IR_MAX_RANK], *sst[IR_MAX_RANK];
    ir_buf *b;
    if (ir->nsyms && m->rank <= IR_MAX_RANK) {
      /* the storage offset is in the data pointer the kernels get */
      if (!L_sym_sizes(&L, m, ssz) || !L_sym_strides(&L, m, sst))
        return gc_errorf(err, GC_EUNSUPPORTED,
                         "lower: input %d has a symbolic size or stride the "
                         "loop IR cannot express",
                         i);
      b = ir_buf_new_s(ir, IR_BUF_INPUT, m->dtype, m->rank, ssz, sst);
    } else if (m->rank > IR_MAX_RANK || !L_static_sizes(m, sz) ||
               !static_strides(m, st)) {
      return gc_errorf(err, GC_EUNSUPPORTED,
                       "lower: input %d has symbolic or very high-rank "
                       "metadata",
                       i);
    } else {
      b = ir_buf_new(ir, IR_BUF_INPUT, m->dtype, m->rank, sz, st);
    }
    if (!b)
      return gc_errorf(err, GC_ENOMEM, "lower: out of memory");
    b->index = i;
    b->value = a->v;
    L.val[a->v->id] = ir_tensor_of_buf(ir, b);
  }
  int nwb = 0;
  for (int k = 0; k < g->nnodes; k++) {
    const gc_node *n = &g->nodes[f->order ? f->order[k] : k];
    if (is_input_writeback(n)) {
      wb[nwb++] = n;
      continue;
    }
    int rc = lower_node(&L, n);
    if (rc)
      return rc == GC_ENOMEM ? gc_errorf(err, rc, "lower: out of memory") : rc;
  }
  /* Outputs first: they hold values computed from the inputs as they were
   * before the write-backs, which come last. */
  int rc = lower_outputs(&L);
  if (!rc && nwb)
    rc = lower_epilogue(&L, wb, nwb);
  /* a symbolic buffer stays within the compiler's limit (the passes' sums
   * of sizes cannot overflow): a guard per distinct size */
  for (int i = 0; !rc && i < ir->nbufs; i++) {
    ir_buf *b = ir->bufs[i];
    if (!b->symbolic || b->kind == IR_BUF_INPUT)
      continue;
    gc_sym *bytes = gc_sym_scale(&ir->sym, b->sspan, gc_dtype_size(b->dtype));
    if (!ir_guard_add(ir, IR_GUARD_LE, bytes,
                      gc_sym_const(&ir->sym, IR_MAX_BUF_BYTES), IR_GUARD_BOUND,
                      "an intermediate of at most 1 TiB"))
      rc = GC_ENOMEM;
  }
  if (rc == GC_ENOMEM || ir->oom)
    return gc_errorf(err, GC_ENOMEM, "lower: out of memory");
  if (rc == GC_EUNSUPPORTED)
    return gc_errorf(err, rc,
                     "lower: the program's inputs or outputs cannot "
                     "be compiled natively");
  return rc;
}
