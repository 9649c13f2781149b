/*
 * schedule.c: grouping IR nodes into kernels. See sched.h for the kernel
 * model and the fusion rule.
 *
 * The pass walks the IR in execution order and keeps one open loop kernel.
 * Each pointwise or reduction node is offered to it (place()); if it cannot
 * join, the kernel is closed and the node starts the next one. A call node
 * (extern or fallback) closes the open kernel and becomes a kernel of its
 * own. Inputs: a verified IR. Output: kernels in execution order, where
 * every node appears exactly once and keeps its relative order, so the
 * program computes what the IR says.
 *
 * Loop order: a node's dimensions are taken outermost-first by decreasing
 * stride of the buffer it writes, so the innermost loop walks memory
 * contiguously (channels-last outputs loop over channels innermost). A
 * kernel's outer dims are those of its first node (all but the innermost
 * for a pointwise node, the output dims for a reduction); a later node
 * joins when its own dims start with them. Dimensions of size 1 take no
 * loop: their variable is 0.
 *
 * After placing, adjacent dims are merged where every index expression of
 * the kernel allows it (a contiguous [N, C, H, W] loop becomes one loop of
 * N*C*H*W elements), and buffers whose every reader is in the writer's
 * kernel at the element just computed are marked local: they never touch
 * memory.
 */
#include "compiler/sched/sched.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Kernels with more nodes than this are closed (the C function would get
 * unwieldy and compile slowly). */
#define MAX_KERNEL_NODES 48

typedef struct sctx {
  ir_graph *ir;
  sc_schedule *s;
  gc_error *err;
  sc_kernel *open; /* the loop kernel being filled; NULL */
} sctx;

/* ---- small arrays ---- */

static bool grow_ptrs(gc_arena *a, void ***arr, int *n, int *cap, void *p) {
  void **na = gc_arena_grow(a, *arr, *n, cap, 8, sizeof *na);
  if (!na)
    return false;
  *arr = na;
  na[(*n)++] = p;
  return true;
}

/* ---- a node's loop dims ---- */

typedef struct ndim {
  gc_sym *var;
  int64_t size;
  int64_t stride; /* of the written buffer, for ordering */
  gc_sym *ssize;
  double skey; /* the stride at a probe size (symbolic strides) */
} ndim;

/* A range of n as an expression. */
static gc_sym *srange(ir_graph *ir, const ir_node *n, int i, bool reduced) {
  gc_sym *const *sr = reduced ? n->srranges : n->sranges;
  if (sr)
    return sr[i];
  return gc_sym_const(&ir->sym, reduced ? n->rranges[i] : n->ranges[i]);
}

/* The node's output dims of size > 1, ordered by decreasing stride of its
 * output (stable), and its reduced dims of size > 1 in order. Symbolic
 * strides order by their value at a probe size (ir_probe): any order is
 * right, this one makes the innermost loop the densest. */
static void node_dims(ir_graph *ir, const ir_node *n, ndim *outer, int *nouter,
                      ndim *inner, int *ninner) {
  *nouter = *ninner = 0;
  bool sym = ir->nsyms > 0;
  for (int i = 0; i < n->rank; i++) {
    gc_sym *r = srange(ir, n, i, false);
    if (gc_sym_is_const(r, 1))
      continue;
    ndim d = {n->vars[i], n->ranges[i], n->out ? n->out->strides[i] : 0, r,
              sym && n->out ? ir_probe(ir, n->out->sstrides[i]) : 0};
    int j = *nouter - 1;
    while (j >= 0 &&
           (sym ? outer[j].skey < d.skey : outer[j].stride < d.stride)) {
      outer[j + 1] = outer[j];
      j--;
    }
    outer[j + 1] = d;
    (*nouter)++;
  }
  for (int i = 0; i < n->rrank; i++) {
    gc_sym *r = srange(ir, n, i, true);
    if (!gc_sym_is_const(r, 1))
      inner[(*ninner)++] = (ndim){n->rvars[i], n->rranges[i], 0, r, 0};
  }
}

static gc_sym *kvar(sctx *c, gc_sym *size) {
  char name[24];
  snprintf(name, sizeof name, "x%d", c->ir->sym.nvars);
  return gc_sym_loopvar(&c->ir->sym, name, size);
}

static sc_dim *new_dims(sctx *c, const ndim *d, int n) {
  sc_dim *out = gc_arena_calloc(c->ir->a, (size_t)n + 1, sizeof *out);
  if (!out)
    return NULL;
  for (int i = 0; i < n; i++) {
    out[i].size = d[i].size;
    out[i].ssize = d[i].ssize;
    if (!(out[i].var = kvar(c, d[i].ssize)))
      return NULL;
  }
  return out;
}

/* The store index of n's output in its own variables. */
static gc_sym *store_index(ir_graph *ir, const ir_node *n) {
  gc_sym *e = gc_sym_const(&ir->sym, 0);
  for (int i = 0; i < n->rank; i++)
    e = gc_sym_add(&ir->sym, e,
                   gc_sym_mul(&ir->sym, n->vars[i], n->out->sstrides[i]));
  return e;
}

/* ---- loads of an expression ---- */

typedef void (*load_fn)(const ir_expr *load, void *ctx);

typedef struct loads {
  load_fn fn;
  void *ctx;
} loads;

static int on_load(const ir_expr *e, void *ctx) {
  const loads *l = ctx;
  if (ir_reads_buffer(e))
    l->fn(e, l->ctx);
  return 0;
}

/* Calls fn once for every distinct LOAD and GATHER of e (a GATHER's data
 * index is visited too). False when e is too deep to walk. */
static bool each_load(const ir_expr *e, load_fn fn, void *ctx) {
  loads l = {fn, ctx};
  return ir_expr_walk(e, on_load, &l) == 0;
}

/* ---- placing a node ---- */

typedef struct trial {
  sctx *c;
  sc_kernel *k;
  const ir_node *n;
  int stage;             /* the stage n would go to */
  const sc_stage *st;    /* that stage (NULL: a new one) */
  const sc_dim *newdims; /* a new stage's dims */
  int nnew;
  bool ok;
} trial;

static bool same_sizes(const sc_dim *a, int na, const ndim *b, int nb) {
  if (na != nb)
    return false;
  for (int i = 0; i < na; i++)
    if (a[i].ssize != b[i].ssize)
      return false;
  return true;
}

static int stage_of(const sc_schedule *s, const ir_node *n) {
  return s->place[n->id].stage;
}

static bool in_kernel(const sc_schedule *s, const ir_node *n,
                      const sc_kernel *k) {
  return n && n->id >= 0 && s->place[n->id].kernel == k;
}

/* Renames the variables of the dims `from` (nfrom of them) to those of
 * stage `to` in e; NULL when the two loop over different spaces. */
static gc_sym *restage(sctx *c, gc_sym *e, const sc_dim *from, int nfrom,
                       const sc_stage *to) {
  if (to->ndims != nfrom)
    return NULL;
  gc_symmap map = {0};
  for (int i = 0; i < nfrom; i++) {
    if (from[i].ssize != to->dims[i].ssize ||
        !gc_symmap_set(&c->ir->sym, &map, from[i].var->var, to->dims[i].var))
      return NULL;
  }
  return gc_sym_subst(&c->ir->sym, e, &map);
}

/* A load of n's (substituted) body: is it consistent with where its buffer
 * is written in this kernel? */
static void check_load(const ir_expr *ld, void *ctx) {
  trial *t = ctx;
  if (!t->ok)
    return;
  const ir_buf *b = ld->load.buf;
  const ir_node *p = b->def;
  sc_schedule *s = t->c->s;
  if (!in_kernel(s, p, t->k))
    return; /* written by an earlier kernel: any element is ready */
  const sc_place *pp = &s->place[p->id];
  if (ld->op == IR_GATHER) { /* reads anywhere: only earlier kernels' */
    t->ok = false;
    return;
  }
  if (p->kind == IR_REDUCTION) {
    /* its result exists once its stage has run, at the current point */
    t->ok = pp->stage < t->stage && ld->load.index == pp->store;
    return;
  }
  if (pp->stage == t->stage) {
    t->ok = ld->load.index == pp->store; /* the element just computed */
    return;
  }
  /* an earlier stage looped over the same inner space: the element is
   * ready if the load, with this stage's variables renamed to the
   * producer stage's, is the producer's store */
  const sc_dim *dims = t->st ? t->st->dims : t->newdims;
  int nd = t->st ? t->st->ndims : t->nnew;
  const sc_stage *ps = &t->k->stages[pp->stage];
  gc_sym *e = restage(t->c, ld->load.index, dims, nd, ps);
  t->ok = e && e == pp->store;
}

/* Does an earlier node of the kernel read buffer b anywhere but at `at` in
 * stage `stage`? */
typedef struct war {
  const ir_buf *b;
  gc_sym *at;
  bool same_stage;
  bool bad;
} war;

static void check_war(const ir_expr *ld, void *ctx) {
  war *w = ctx;
  if (ld->load.buf == w->b &&
      (ld->op == IR_GATHER || !w->same_stage || ld->load.index != w->at))
    w->bad = true;
}

/* Tries stage `si` (or a new one with `dims` when si == k->nstages). On
 * success fills *pl. */
static bool try_stage(sctx *c, sc_kernel *k, const ir_node *n, gc_symmap *map,
                      const ndim *inner, int ninner, int si,
                      const sc_dim *newdims, sc_place *pl) {
  ir_graph *ir = c->ir;
  const sc_stage *st = si < k->nstages ? &k->stages[si] : NULL;
  const sc_dim *dims = st ? st->dims : newdims;
  for (int i = 0; i < ninner; i++)
    if (!gc_symmap_set(&ir->sym, map, inner[i].var->var, dims[i].var))
      return false;
  ir_expr *body = ir_expr_subst(ir, n->body, map);
  gc_sym *store = gc_sym_subst(&ir->sym, store_index(ir, n), map);
  if (!body || !store)
    return false;
  trial t = {c, k, n, si, st, newdims, ninner, true};
  if (!each_load(body, check_load, &t) || !t.ok)
    return false;
  /* no earlier node may still need what n overwrites (input write-backs) */
  ir_buf *outs[3] = {n->out, n->out2, n->out3};
  for (int o = 0; o < 3; o++) {
    if (!outs[o])
      continue;
    for (int q = 0; q < k->nnodes; q++) {
      const ir_node *m = k->nodes[q];
      war w = {outs[o], store, stage_of(c->s, m) == si, false};
      if (!each_load(c->s->place[m->id].body, check_war, &w))
        w.bad = true;
      if (w.bad)
        return false;
    }
  }
  pl->kernel = k;
  pl->stage = si;
  pl->store = store;
  pl->body = body;
  return true;
}

static bool add_stage(sctx *c, sc_kernel *k, bool reduction, const sc_dim *dims,
                      int ndims) {
  sc_stage *ns = gc_arena_grow(c->ir->a, k->stages, k->nstages, &k->capstages,
                               4, sizeof *ns);
  if (!ns)
    return false;
  k->stages = ns;
  sc_stage *st = &ns[k->nstages++];
  memset(st, 0, sizeof *st);
  st->reduction = reduction;
  st->dims = (sc_dim *)dims;
  st->ndims = ndims;
  return true;
}

static bool writes_input(const ir_node *n) {
  return n->out && n->out->kind == IR_BUF_INPUT;
}

/* Places n in kernel k with its output dims taken in the order `outer`
 * (nouter of them): the first k->ndims become the kernel's outer dims (the
 * kernel takes them when it is empty), the rest the inner dims of a
 * pointwise stage. */
static bool place_ordered(sctx *c, sc_kernel *k, ir_node *n, const ndim *outer,
                          int nouter, const ndim *inner, int ninner) {
  ir_graph *ir = c->ir;
  bool red = n->kind == IR_REDUCTION;
  if (k->nnodes == 0) {
    int no = red ? nouter : (nouter > 0 ? nouter - 1 : 0);
    if (!(k->dims = new_dims(c, outer, no)) && no)
      return false;
    k->ndims = no;
  }
  int ko = k->ndims;
  if (nouter < ko || (red && nouter != ko))
    return false;
  for (int i = 0; i < ko; i++)
    if (outer[i].ssize != k->dims[i].ssize)
      return false;
  /* the substitution: outer dims, then size-1 dims to 0 */
  gc_symmap map = {0};
  gc_sym *zero = gc_sym_const(&ir->sym, 0);
  for (int i = 0; i < n->rank; i++)
    if (gc_sym_is_const(srange(ir, n, i, false), 1) &&
        !gc_symmap_set(&ir->sym, &map, n->vars[i]->var, zero))
      return false;
  for (int i = 0; i < n->rrank; i++)
    if (gc_sym_is_const(srange(ir, n, i, true), 1) &&
        !gc_symmap_set(&ir->sym, &map, n->rvars[i]->var, zero))
      return false;
  for (int i = 0; i < ko; i++)
    if (!gc_symmap_set(&ir->sym, &map, outer[i].var->var, k->dims[i].var))
      return false;
  const ndim *in = red ? inner : outer + ko;
  int nin = red ? ninner : nouter - ko;
  sc_place pl;
  /* join the last stage if it loops over the same inner space */
  if (k->nstages) {
    const sc_stage *last = &k->stages[k->nstages - 1];
    if (last->reduction == red &&
        same_sizes(last->dims, last->ndims, in, nin) &&
        try_stage(c, k, n, &map, in, nin, k->nstages - 1, NULL, &pl))
      goto placed;
  }
  sc_dim *nd = new_dims(c, in, nin);
  if ((!nd && nin) || !try_stage(c, k, n, &map, in, nin, k->nstages, nd, &pl))
    return false;
  if (!add_stage(c, k, red, nd, nin))
    return false;
placed:
  c->s->place[n->id] = pl;
  sc_stage *st = &k->stages[pl.stage];
  if (!grow_ptrs(ir->a, (void ***)&st->nodes, &st->nnodes, &st->cap, n) ||
      !grow_ptrs(ir->a, (void ***)&k->nodes, &k->nnodes, &k->capnodes, n))
    return false;
  return true;
}

/* Tries the orders of n's dims in which the kernel's outer dims come
 * first (each matched to a dim of n of the same size, the others after,
 * in stride order), depth-first; `used` marks n's dims taken so far. */
static bool place_matching(sctx *c, sc_kernel *k, ir_node *n, const ndim *dims,
                           int ndims, const ndim *inner, int ninner,
                           ndim *order, int depth, bool *used) {
  if (depth == k->ndims) {
    int m = depth;
    for (int i = 0; i < ndims; i++)
      if (!used[i])
        order[m++] = dims[i];
    /* an order whose innermost loop is not the pointwise node's unit-stride
     * dim writes it strided: worth it only in a kernel that runs tiled
     * (lanes along that dim), else the node starts its own kernel */
    if (n->kind != IR_REDUCTION && ndims > depth &&
        dims[ndims - 1].stride == 1 && order[ndims - 1].stride != 1 &&
        !sc_tiles(c->s, k))
      return false;
    return place_ordered(c, k, n, order, ndims, inner, ninner);
  }
  for (int i = 0; i < ndims; i++) {
    if (used[i] || dims[i].ssize != k->dims[depth].ssize)
      continue;
    used[i] = true;
    order[depth] = dims[i];
    bool ok = place_matching(c, k, n, dims, ndims, inner, ninner, order,
                             depth + 1, used);
    used[i] = false;
    if (ok)
      return true;
  }
  return false;
}

/* Places n in kernel k if it can join; returns true when placed. Its dims
 * in stride order first (the kernel's outer dims its outermost ones); then
 * any order matching the kernel's outer dims by size, so that a pointwise
 * epilogue whose reduced dim is outermost (softmax over dim 0) still joins
 * its reductions (the kernel then runs tiled, see codegen/tiled.c). */
static bool place(sctx *c, sc_kernel *k, ir_node *n) {
  ndim outer[IR_MAX_RANK], inner[IR_MAX_RANK], order[IR_MAX_RANK];
  int nouter, ninner;
  bool used[IR_MAX_RANK] = {false};
  node_dims(c->ir, n, outer, &nouter, inner, &ninner);
  if (k->nnodes && (k->nnodes >= MAX_KERNEL_NODES || writes_input(n) ||
                    writes_input(k->nodes[0])))
    return false; /* write-backs to inputs run alone (aliasing inputs) */
  if (place_ordered(c, k, n, outer, nouter, inner, ninner))
    return true;
  if (!k->nnodes || c->ir->oom || c->ir->sym.oom)
    return false;
  return place_matching(c, k, n, outer, nouter, inner, ninner, order, 0, used);
}

/* ---- kernels ---- */

static sc_kernel *new_kernel(sctx *c) {
  sc_kernel *k = gc_arena_zalloc(c->ir->a, sizeof *k);
  if (!k)
    return NULL;
  k->id = c->s->nkernels;
  if (!grow_ptrs(c->ir->a, (void ***)&c->s->kernels, &c->s->nkernels,
                 &c->s->cap, k))
    return NULL;
  return k;
}

/* A call node: a kernel of its own, which ends the open loop kernel. */
static int schedule_call(sctx *c, ir_node *n) {
  c->open = NULL;
  sc_kernel *k = new_kernel(c);
  if (!k)
    return GC_ENOMEM;
  k->call = n;
  sc_gemm g;
  if (sc_gemm_of(c->ir, n, &g)) {
    sc_gemm *kept = gc_arena_alloc(c->ir->a, sizeof *kept);
    if (!kept)
      return GC_ENOMEM;
    *kept = g;
    k->gemm = kept;
  }
  k->in_c = ir_node_is_generated(n) || k->gemm || sc_blas_call(c->ir, n);
  c->s->place[n->id].kernel = k;
  return grow_ptrs(c->ir->a, (void ***)&k->nodes, &k->nnodes, &k->capnodes, n)
             ? 0
             : GC_ENOMEM;
}

/* A loop node: into the open kernel if it fits, else a new one. */
static int schedule_loop(sctx *c, ir_node *n) {
  if (c->open && place(c, c->open, n))
    return 0;
  if (c->ir->oom || c->ir->sym.oom)
    return GC_ENOMEM;
  sc_kernel *k = new_kernel(c);
  if (!k)
    return GC_ENOMEM;
  c->open = k;
  if (!place(c, k, n))
    return c->ir->oom || c->ir->sym.oom
               ? GC_ENOMEM
               : gc_errorf(c->err, GC_EINTERNAL,
                           "schedule: node %d does not fit an empty kernel",
                           n->id);
  return 0;
}

static int schedule_node(sctx *c, ir_node *n) {
  switch (n->kind) {
  case IR_POINTWISE:
  case IR_REDUCTION:
    return schedule_loop(c, n);
  case IR_EXTERN:   /* ATen's, or generated code's product (in_c) */
  case IR_FALLBACK: /* ATen's */
  case IR_SCAN:     /* generated code's, reading their arguments */
  case IR_SCATTER:  /* from memory */
  case IR_INTERP:
    return schedule_call(c, n);
  }
  return gc_errorf(c->err, GC_EINTERNAL, "schedule: node %d of kind %d", n->id,
                   (int)n->kind);
}

/* ---- merging adjacent dims ---- */

/* Every index expression of the kernel, for the merge test. */
typedef struct idxs {
  gc_sym **e;
  int n, cap;
  gc_arena *a;
  bool incomplete; /* out of memory or too deep: merge nothing */
} idxs;

static void add_index(idxs *x, gc_sym *e) {
  if (!grow_ptrs(x->a, (void ***)&x->e, &x->n, &x->cap, e))
    x->incomplete = true;
}

static int collect_index(const ir_expr *e, void *ctx) {
  if (ir_reads_buffer(e) || e->op == IR_INDEX)
    add_index(ctx, e->op == IR_INDEX ? e->index : e->load.index);
  return 0;
}

/* Can dims a (outer) and b (inner, size sb) be one loop? Every expression
 * must be affine in both with coef(a) == coef(b) * sb. With size symbols
 * the coefficients may be symbolic (s1*i + j), sb must be a constant (the
 * merged index is split again by floor division and remainder, which take
 * constant divisors). */
static bool mergeable(ir_graph *ir, const idxs *x, const gc_sym *a,
                      const gc_sym *b, int64_t sb) {
  if (x->incomplete)
    return false;
  if (ir->nsyms) {
    if (sb == IR_SYMBOLIC)
      return false;
    for (int i = 0; i < x->n; i++) {
      gc_sym *ca, *cb;
      if (!gc_sym_coef(&ir->sym, x->e[i], a->var, &ca) ||
          !gc_sym_coef(&ir->sym, x->e[i], b->var, &cb) ||
          ca != gc_sym_scale(&ir->sym, cb, sb))
        return false;
    }
    return true;
  }
  for (int i = 0; i < x->n; i++) {
    int64_t ca, cb;
    if (!gc_sym_linear_in(x->e[i], a->var, &ca) ||
        !gc_sym_linear_in(x->e[i], b->var, &cb))
      return false;
    if (ca != cb * sb)
      return false;
  }
  return true;
}

/* Substitutes a -> m // sb, b -> m mod sb in every place of the kernel. */
static bool apply_merge(sctx *c, sc_kernel *k, gc_sym *a, gc_sym *b, int64_t sb,
                        gc_sym *m) {
  ir_graph *ir = c->ir;
  gc_symmap map = {0};
  if (!gc_symmap_set(&ir->sym, &map, a->var,
                     gc_sym_floordiv(&ir->sym, m, sb)) ||
      !gc_symmap_set(&ir->sym, &map, b->var, gc_sym_mod(&ir->sym, m, sb)))
    return false;
  for (int i = 0; i < k->nnodes; i++) {
    sc_place *p = &c->s->place[k->nodes[i]->id];
    p->body = ir_expr_subst(ir, p->body, &map);
    p->store = gc_sym_subst(&ir->sym, p->store, &map);
    if (!p->body || !p->store)
      return false;
  }
  return true;
}

static void kernel_indices(sctx *c, sc_kernel *k, idxs *x) {
  x->a = c->ir->a;
  for (int i = 0; i < k->nnodes; i++) {
    const sc_place *p = &c->s->place[k->nodes[i]->id];
    add_index(x, p->store);
    if (ir_expr_walk(p->body, collect_index, x))
      x->incomplete = true;
  }
}

/* Merges runs of dims in a list (the outer dims, or one stage's). */
static bool merge_dims(sctx *c, sc_kernel *k, sc_dim *dims, int *nd) {
  for (int i = *nd - 2; i >= 0; i--) {
    idxs x = {0};
    kernel_indices(c, k, &x);
    if (!mergeable(c->ir, &x, dims[i].var, dims[i + 1].var, dims[i + 1].size))
      continue;
    gc_sym *ssize = gc_sym_mul(&c->ir->sym, dims[i].ssize, dims[i + 1].ssize);
    int64_t size;
    if (!ssize || !gc_sym_const_of(ssize, &size))
      size = IR_SYMBOLIC;
    gc_sym *m = ssize ? kvar(c, ssize) : NULL;
    if (!m ||
        !apply_merge(c, k, dims[i].var, dims[i + 1].var, dims[i + 1].size, m))
      return false;
    dims[i].size = size;
    dims[i].ssize = ssize;
    dims[i].var = m;
    memmove(&dims[i + 1], &dims[i + 2], (size_t)(*nd - i - 2) * sizeof *dims);
    (*nd)--;
  }
  return true;
}

/* A kernel of a single pointwise stage with no outer dims left over could
 * merge its last outer dim with its inner one too; we keep outer and inner
 * separate (parallel outside, vector inside) unless the outer loop is too
 * short to share between threads. */
#define SHORT_INNER 512 /* an inner loop this short takes in an outer dim */
#define MIN_OUTER 16    /* outer iterations left to share between threads */

static int finish_kernel(sctx *c, sc_kernel *k) {
  if (k->call)
    return 0;
  if (!merge_dims(c, k, k->dims, &k->ndims))
    return GC_ENOMEM;
  for (int s = 0; s < k->nstages; s++)
    if (!merge_dims(c, k, k->stages[s].dims, &k->stages[s].ndims))
      return GC_ENOMEM;
  /* one pointwise stage and at most one outer dim left: one flat loop.
   * With more outer dims, a short inner loop (a 56-wide image row of a
   * per-channel batch norm + silu) takes in the last outer dim when the
   * indices allow, as long as the outer dims left still give threads
   * work: a 56-element loop of 16-lane vectors ends in a scalar
   * remainder of 8 (scalar exp calls) per row; 3136 elements do not. */
  int64_t rest = 1;
  bool sym_rest = false;
  for (int i = 0; i + 1 < k->ndims; i++) {
    sym_rest |= k->dims[i].size == IR_SYMBOLIC;
    rest *= k->dims[i].size;
  }
  bool short_inner = k->nstages >= 1 && k->stages[0].ndims >= 1 &&
                     k->stages[0].dims[0].size != IR_SYMBOLIC &&
                     k->stages[0].dims[0].size < SHORT_INNER && !sym_rest &&
                     rest >= MIN_OUTER;
  if (k->nstages == 1 && !k->stages[0].reduction && k->ndims >= 1 &&
      k->stages[0].ndims == 1 && (k->ndims == 1 || short_inner)) {
    sc_dim d[2] = {k->dims[k->ndims - 1], k->stages[0].dims[0]};
    int nd = 2;
    idxs x = {0};
    kernel_indices(c, k, &x);
    if (mergeable(c->ir, &x, d[0].var, d[1].var, d[1].size)) {
      if (!merge_dims(c, k, d, &nd))
        return GC_ENOMEM;
      if (nd == 1) {
        k->ndims--;
        k->stages[0].dims[0] = d[0];
      }
    }
  }
  gc_symctx *sy = &c->ir->sym;
  gc_sym *outer = gc_sym_const(sy, 1);
  for (int i = 0; i < k->ndims; i++)
    outer = gc_sym_mul(sy, outer, k->dims[i].ssize);
  gc_sym *work = gc_sym_const(sy, 0);
  for (int s = 0; s < k->nstages; s++) {
    gc_sym *in = gc_sym_const(sy, 1);
    for (int i = 0; i < k->stages[s].ndims; i++)
      in = gc_sym_mul(sy, in, k->stages[s].dims[i].ssize);
    work = gc_sym_add(
        sy, work,
        gc_sym_scale(sy, gc_sym_mul(sy, outer, in), k->stages[s].nnodes));
  }
  if (!work)
    return GC_ENOMEM;
  k->swork = work;
  if (!gc_sym_const_of(work, &k->work))
    k->work = IR_SYMBOLIC;
  k->symbolic = k->work == IR_SYMBOLIC;
  for (int s = 0; s < k->nstages && !k->symbolic; s++)
    for (int i = 0; i < k->stages[s].ndims; i++)
      k->symbolic |= k->stages[s].dims[i].size == IR_SYMBOLIC;
  for (int i = 0; i < k->ndims; i++)
    k->symbolic |= k->dims[i].size == IR_SYMBOLIC;
  return 0;
}

/* ---- local buffers ---- */

typedef struct localctx {
  sctx *c;
  int *bad; /* per buffer: read where it cannot be forwarded */
  const ir_node *reader;
} localctx;

static void mark_reads(const ir_expr *ld, void *ctx) {
  localctx *l = ctx;
  const ir_buf *b = ld->load.buf;
  const ir_node *w = b->def;
  sc_schedule *s = l->c->s;
  if (!w || b->kind != IR_BUF_ARENA || ld->op == IR_GATHER) {
    l->bad[b->id] = 1;
    return;
  }
  const sc_place *wp = &s->place[w->id], *rp = &s->place[l->reader->id];
  if (wp->kernel != rp->kernel || ld->load.index != wp->store)
    l->bad[b->id] = 1;
  else if (w->kind != IR_REDUCTION && wp->stage != rp->stage)
    l->bad[b->id] = 1;
}

static int find_locals(sctx *c) {
  ir_graph *ir = c->ir;
  sc_schedule *s = c->s;
  localctx l = {c, gc_arena_calloc(ir->a, (size_t)ir->nbufs + 1, sizeof(int)),
                NULL};
  if (!l.bad)
    return GC_ENOMEM;
  for (int i = 0; i < ir->nnodes; i++) {
    ir_node *n = ir->nodes[i];
    if (ir_node_is_call(n)) { /* arguments are read from memory */
      for (int a = 0; a < n->nargs; a++) {
        int cnt = n->args[a].arg.kind == GC_ARG_TENSOR ? 1 : n->args[a].arg.n;
        for (int j = 0; n->args[a].bufs && j < cnt; j++)
          if (n->args[a].bufs[j])
            l.bad[n->args[a].bufs[j]->id] = 1;
      }
      continue;
    }
    l.reader = n;
    if (!each_load(s->place[n->id].body, mark_reads, &l))
      return gc_errorf(c->err, GC_EINTERNAL,
                       "schedule: node %d's body is nested too deep", n->id);
  }
  s->nlocal = 0;
  for (int i = 0; i < ir->nbufs; i++) {
    ir_buf *b = ir->bufs[i];
    s->local[i] =
        b->kind == IR_BUF_ARENA && b->def && !l.bad[i] &&
        (b->def->kind == IR_POINTWISE || b->def->kind == IR_REDUCTION);
    s->nlocal += s->local[i];
  }
  return 0;
}

/* ---- names ---- */

/* "k3_layer_norm_gelu": the kernel's index and what its nodes compute (our
 * own vocabulary: the IR's descriptions come from the operator table, not
 * from the client's strings). */
static void name_kernel(sctx *c, sc_kernel *k) {
  char buf[64];
  int len = snprintf(buf, sizeof buf, "k%d", k->id);
  const char *seen[8];
  int nseen = 0;
  for (int i = 0; i < k->nnodes && len < 40; i++) {
    const ir_node *n = k->nodes[i];
    for (int j = 0; j < n->ngnodes && len < 40; j++) {
      const char *w =
          c->ir->gnode_what ? c->ir->gnode_what[n->gnodes[j]] : NULL;
      if (!w)
        continue;
      const char *colon = strstr(w, "::");
      if (colon)
        w = colon + 2;
      bool dup = false;
      for (int q = 0; q < nseen; q++)
        dup |= strcmp(seen[q], w) == 0;
      if (dup || nseen == 8)
        continue;
      seen[nseen++] = w;
      buf[len++] = '_';
      for (; *w && *w != '.' && len < 48; w++)
        buf[len++] = isalnum((unsigned char)*w) ? (char)tolower(*w) : '_';
      buf[len] = '\0';
    }
  }
  k->name = gc_arena_strdup(c->ir->a, buf);
}

int sc_schedule_build(ir_graph *ir, sc_schedule *s, gc_error *err) {
  memset(s, 0, sizeof *s);
  s->place = gc_arena_calloc(ir->a, (size_t)ir->nnodes + 1, sizeof *s->place);
  s->local = gc_arena_calloc(ir->a, (size_t)ir->nbufs + 1, sizeof *s->local);
  if (!s->place || !s->local)
    return gc_errorf(err, GC_ENOMEM, "schedule: out of memory");
  sctx c = {ir, s, err, NULL};
  for (int i = 0; i < ir->nnodes; i++) {
    int rc = schedule_node(&c, ir->nodes[i]);
    if (rc)
      return rc == GC_ENOMEM ? gc_errorf(err, rc, "schedule: out of memory")
                             : rc;
  }
  for (int i = 0; i < s->nkernels; i++) {
    int rc = finish_kernel(&c, s->kernels[i]);
    if (rc)
      return gc_errorf(err, rc, "schedule: out of memory");
    name_kernel(&c, s->kernels[i]);
  }
  if (find_locals(&c) || ir->oom || ir->sym.oom)
    return gc_errorf(err, GC_ENOMEM, "schedule: out of memory");
  return 0;
}

bool sc_same_inner(const sc_stage *a, const sc_stage *b) {
  if (a->ndims != b->ndims || a->ndims == 0)
    return false;
  for (int i = 0; i < a->ndims; i++)
    if (a->dims[i].ssize != b->dims[i].ssize)
      return false;
  return true;
}

bool sc_rename_inner(ir_graph *ir, const sc_stage *a, const sc_stage *b,
                     gc_symmap *map) {
  *map = (gc_symmap){0};
  for (int i = 0; i < a->ndims; i++)
    if (!gc_symmap_set(&ir->sym, map, a->dims[i].var->var, b->dims[i].var))
      return false;
  return true;
}

/* ---- tiling ---- */

typedef struct votes {
  int lane, var; /* the last outer dim's and the stage's innermost var ids */
  int for_tile, against;
} votes;

static int vote(const ir_expr *e, void *ctx) {
  votes *v = ctx;
  if (ir_reads_buffer(e)) {
    int64_t cl, cv;
    bool ll = gc_sym_linear_in(e->load.index, v->lane, &cl);
    bool lv = gc_sym_linear_in(e->load.index, v->var, &cv);
    if (ll && lv && cl == 1 && cv != 0 && cv != 1)
      v->for_tile++;
    else if (lv && cv == 1)
      v->against++;
  }
  return 0;
}

bool sc_tiles(const sc_schedule *s, const sc_kernel *k) {
  /* (a kernel with symbolic bounds runs untiled: codegen/tiled.c's tiles
   * are sized at compile time) */
  if (k->call || k->ndims == 0 || k->dims[k->ndims - 1].size < 8 || k->symbolic)
    return false;
  for (int i = 0; i < k->nstages; i++)
    for (int j = 0; j < k->stages[i].ndims; j++)
      if (k->stages[i].dims[j].size == IR_SYMBOLIC)
        return false;
  for (int i = 0; i < k->nstages; i++) {
    const sc_stage *st = &k->stages[i];
    if (!st->reduction || st->ndims == 0)
      continue;
    votes v = {k->dims[k->ndims - 1].var->var, st->dims[st->ndims - 1].var->var,
               0, 0};
    for (int j = 0; j < st->nnodes; j++)
      ir_expr_walk(s->place[st->nodes[j]->id].body, vote, &v);
    if (v.for_tile > v.against)
      return true;
  }
  return false;
}
