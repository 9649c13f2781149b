/*
 * plan.c: memory planning, and printing a schedule.
 *
 * Receives a schedule. Every ARENA buffer that is not local gets a live
 * range [first, last] in kernel order (the kernel writing it, the last
 * kernel reading it) and an offset in the call's arena such that two
 * buffers whose ranges overlap never overlap in memory. A kernel's inputs
 * and outputs are live at the same kernel, so no kernel ever writes over
 * what it reads (which also makes `restrict` on its parameters true).
 *
 * Placement is greedy by decreasing size (the heuristic of ExecuTorch's and
 * TFLite's planners): each buffer goes to the lowest 64-byte-aligned offset
 * where it fits beside the already placed buffers it is live with. The
 * arena's size is the largest end; it is what a call needs, against the
 * sum of every intermediate eager allocates.
 *
 * The arena lives for the whole call: intermediates of SC_TEMP_MIN_BYTES
 * or more (of temp_min_bytes or more in training programs) are TEMP
 * buffers instead, with memory of their own for their live range only.
 *
 * A call whose result may alias its inputs (a fallback view operator)
 * keeps those inputs alive to the end: the planner cannot see how long
 * the alias is used.
 *
 * In place: a pointwise node whose input dies in the node's kernel writes
 * its output into that input's memory when nothing can see the
 * difference: same dtype and layout, the input read in the node's stage
 * only at the very element the node writes and by no node after it, in
 * an earlier stage only over the same inner loops at the element the node
 * will write at the same point (a row LayerNorm, RMSNorm or softmax reads
 * whole before it writes it), and in no later stage. So every element is
 * read before it is overwritten, whatever the loop order, tiling or
 * threads: a kernel's stages run one after the other for an outer point,
 * and no outer point reads another's elements. The input may be an arena
 * buffer or a tensor an
 * ATen call returned (a convolution's output: batch norm and the
 * activation after it then need no memory of their own, where eager
 * allocates a second tensor). When the node writes a program output,
 * the input (with the chain of buffers computed in place before it) moves
 * into the output's tensor instead, if it is an arena buffer: a matrix
 * product then writes its result where the activation after it returns
 * it. Codegen passes the two as one pointer, so `restrict` stays true.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/schema.h"
#include "compiler/sched/sched.h"

#define ALIGN 64

static int64_t align_up(int64_t v) {
  return (v + ALIGN - 1) / ALIGN * ALIGN;
}

int64_t sc_buf_bytes(const ir_buf *b) {
  if (b->symbolic)
    return IR_SYMBOLIC;
  return align_up(b->span * gc_dtype_size(b->dtype));
}

/* align_up of an expression */
static gc_sym *salign_up(gc_symctx *s, gc_sym *v) {
  return gc_sym_scale(
      s, gc_sym_floordiv(s, gc_sym_addc(s, v, ALIGN - 1), ALIGN), ALIGN);
}

/* buf_bytes as an expression (symbolic buffers). */
gc_sym *sc_buf_sbytes(ir_graph *ir, const ir_buf *b) {
  gc_symctx *s = &ir->sym;
  if (!b->symbolic)
    return gc_sym_const(s, sc_buf_bytes(b));
  return salign_up(s, gc_sym_scale(s, b->sspan, gc_dtype_size(b->dtype)));
}

typedef struct rng {
  ir_buf *b;
  int64_t bytes;
} rng;

static int by_size_desc(const void *x, const void *y) {
  const rng *a = x, *b = y;
  if (a->bytes != b->bytes)
    return a->bytes < b->bytes ? 1 : -1;
  return a->b->id - b->b->id; /* deterministic */
}

/* Widens b's range to include kernel k. */
static void touch(ir_buf *b, int k) {
  if (b->first < 0 || k < b->first)
    b->first = k;
  if (k > b->last)
    b->last = k;
}

static int touch_load(const ir_expr *e, void *k) {
  if (ir_reads_buffer(e))
    touch(e->load.buf, *(const int *)k);
  return 0;
}

/* Whether call argument `a` of `n` may come back as (a view of) one of its
 * results: a return whose alias set names that parameter. The `out` buffer
 * of a .out call is not among n->args: it is the node's own. */
static bool arg_returned(const ir_node *n, const ir_call_arg *a) {
  const gc_schema *sc = n->op ? n->op->schema : NULL;
  if (!sc || !a->name)
    return false;
  for (int r = 0; r < sc->nrets; r++) {
    int p = gc_schema_return_alias(sc, r);
    if (p >= 0 && p < sc->nargs && sc->args[p].name &&
        !strcmp(sc->args[p].name, a->name))
      return true;
  }
  return false;
}

/* ---- the placed buffers, by live range ----
 *
 * Placement asks, for each buffer, which placed buffers are live at the
 * same time. Scanning all of them made planning quadratic in the buffers (a
 * chain of 32,000 matrix products, one arena buffer each, took 3.4 s). So
 * the buffers to place are sorted by first kernel, and a max tree over that
 * order holds each placed buffer's last kernel (-1 until it is placed): the
 * placed buffers live during [first, last] are those before the first
 * buffer starting after `last` whose last kernel is at least `first`,
 * found in O(log n) each. */

typedef struct live {
  const rng *r;  /* the buffers to place */
  int *order;    /* indices into r, by first kernel */
  int *pos;      /* r index -> position in order */
  int n, leaves; /* leaves: a power of two >= n */
  int *last;     /* the tree: node 1 the root, node k's children 2k and
                    2k + 1, position p's leaf leaves + p */
} live;

typedef struct start {
  int first, id, i; /* a buffer's first kernel and id, its index in r */
} start;

static int by_first(const void *x, const void *y) {
  const start *a = x, *b = y;
  if (a->first != b->first)
    return a->first < b->first ? -1 : 1;
  return a->id - b->id;
}

static bool live_init(live *t, gc_arena *a, const rng *r, int n) {
  t->r = r;
  t->n = n;
  t->leaves = 1;
  while (t->leaves < n)
    t->leaves *= 2;
  start *st = gc_arena_calloc(a, (size_t)n + 1, sizeof *st);
  t->order = gc_arena_calloc(a, (size_t)n + 1, sizeof *t->order);
  t->pos = gc_arena_calloc(a, (size_t)n + 1, sizeof *t->pos);
  t->last = gc_arena_calloc(a, 2 * (size_t)t->leaves, sizeof *t->last);
  if (!st || !t->order || !t->pos || !t->last)
    return false;
  for (int i = 0; i < n; i++)
    st[i] = (start){r[i].b->first, r[i].b->id, i};
  qsort(st, (size_t)n, sizeof *st, by_first);
  for (int p = 0; p < n; p++) {
    t->order[p] = st[p].i;
    t->pos[st[p].i] = p;
  }
  for (int k = 0; k < 2 * t->leaves; k++)
    t->last[k] = -1;
  return true;
}

/* The number of buffers whose first kernel is at most `k`. */
static int live_end(const live *t, int k) {
  int lo = 0, hi = t->n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (t->r[t->order[mid]].b->first <= k)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Appends to iv the [offset, end) of each placed buffer at a position of
 * node's range [lo, hi) before `end` whose last kernel is at least `from`. */
static void live_overlapping(const live *t, int node, int lo, int hi, int end,
                             int from, int64_t (*iv)[2], int *m) {
  if (lo >= end || t->last[node] < from)
    return;
  if (hi - lo == 1) {
    const rng *x = &t->r[t->order[lo]];
    iv[*m][0] = x->b->arena_offset;
    iv[*m][1] = x->b->arena_offset + x->bytes;
    (*m)++;
    return;
  }
  int mid = lo + (hi - lo) / 2;
  live_overlapping(t, 2 * node, lo, mid, end, from, iv, m);
  live_overlapping(t, 2 * node + 1, mid, hi, end, from, iv, m);
}

/* Marks r[i] placed. */
static void live_place(live *t, int i) {
  int k = t->leaves + t->pos[i];
  t->last[k] = t->r[i].b->last;
  for (k /= 2; k >= 1; k /= 2)
    t->last[k] = t->last[2 * k] > t->last[2 * k + 1] ? t->last[2 * k]
                                                     : t->last[2 * k + 1];
}

static int by_start(const void *x, const void *y) {
  const int64_t *a = x, *b = y;
  return a[0] < b[0] ? -1 : a[0] > b[0];
}

/* ---- in place ---- */

typedef struct inplace_scan {
  const ir_buf *r;     /* the candidate input */
  const gc_sym *index; /* where it may be read; NULL: nowhere */
} inplace_scan;

static int bad_read(const ir_expr *e, void *ctx) {
  const inplace_scan *c = ctx;
  if (!ir_reads_buffer(e) || e->load.buf != c->r)
    return 0;
  return e->op != IR_LOAD || !c->index || e->load.index != c->index;
}

static bool is_output(const ir_graph *ir, const ir_buf *b) {
  for (int o = 0; o < ir->noutputs; o++)
    if (ir->outputs[o] && ir->outputs[o]->buf == b)
      return true;
  return false;
}

/* Whether a call's results are all fresh tensors (no alias annotation). */
static bool fresh_results(const ir_node *call) {
  const gc_schema *sc = call && call->op ? call->op->schema : NULL;
  if (!sc || (call->kind != IR_EXTERN && call->kind != IR_FALLBACK))
    return false;
  for (int r = 0; r < sc->nrets; r++)
    if (gc_schema_return_alias(sc, r) >= 0)
      return false;
  return true;
}

/* Whether b's elements fill [0, span) exactly once (no element shares an
 * address with another: each is written by one iteration). */
/* dense() with symbolic sizes: the dims of non-constant-1 size, innermost
 * first, each stride the product of the sizes inside it, exactly (sizes
 * that may be 0 or 1 at run time included: the layout must be dense at
 * every size). */
static bool sdense(ir_graph *ir, const ir_buf *b) {
  gc_symctx *s = &ir->sym;
  if (b->snumel != b->sspan)
    return false;
  gc_sym *want = gc_sym_const(s, 1);
  bool used[IR_MAX_RANK] = {false};
  int left = 0;
  for (int d = 0; d < b->rank; d++)
    left += !gc_sym_is_const(b->ssizes[d], 1);
  for (int n = 0; n < left; n++) {
    int best = -1;
    for (int d = 0; d < b->rank && best < 0; d++)
      if (!used[d] && !gc_sym_is_const(b->ssizes[d], 1) &&
          b->sstrides[d] == want)
        best = d;
    if (best < 0)
      return false;
    used[best] = true;
    want = gc_sym_mul(s, want, b->ssizes[best]);
  }
  return want == b->snumel;
}

static bool dense(ir_graph *ir, const ir_buf *b) {
  if (b->symbolic)
    return sdense(ir, b);
  if (b->numel != b->span || b->numel <= 0)
    return false;
  int64_t want = 1;
  bool used[IR_MAX_RANK] = {false};
  for (int n = 0; n < b->rank; n++) { /* innermost first, by stride */
    int best = -1;
    for (int d = 0; d < b->rank; d++)
      if (!used[d] && b->sizes[d] > 1 && b->strides[d] == want)
        best = d;
    if (best < 0)
      break;
    used[best] = true;
    want *= b->sizes[best];
  }
  return want == b->numel;
}

/* Whether node n (in stage st of loop kernel k) may write its output over
 * buffer r: the same dtype and extent, b dense, and every read of r at
 * the element n writes in the same iteration (the layouts may differ: a
 * matrix product's [M, N] result read as the [B, T, N] it is a view of). */
static bool can_overwrite(ir_graph *ir, const sc_schedule *s,
                          const sc_kernel *kn, int k, const ir_node *n,
                          ir_buf *r) {
  ir_buf *b = n->out, *root = ir_buf_storage(r);
  if (r == b || r->shared || s->local[r->id] || r->first >= k || r->last != k ||
      root->last != k || r->dtype != b->dtype || r->sspan != b->sspan ||
      r->symbolic != b->symbolic || !dense(ir, b) || is_output(ir, root))
    return false;
  if (root->kind == IR_BUF_RESULT) {
    /* a fresh ATen tensor nobody else holds: an intermediate, or, in a
       program with separate temporaries (training), a program output
       (returned as a view of it, as eager's in-place op would leave it:
       dropout's mask is bernoulli's tensor divided in place). Inference
       programs keep outputs out of results: efficientnet_b0's peak heap
       rose by 8% with it (not yet understood). */
    bool output_ok = s->temp_min_bytes > 0 && r == root;
    if (!fresh_results(root->def) ||
        (b->kind != IR_BUF_ARENA && !(b->kind == IR_BUF_OUTPUT && output_ok)))
      return false;
  } else if (root->kind != IR_BUF_ARENA) {
    return false;
  }
  /* every read of r: in an earlier stage over the same inner loops, at
     the element n writes at the same inner point (so each outer point's
     elements are all read before n writes them, and no other outer point
     reads them); in n's stage, at n's element, at or before n; none in a
     later stage */
  const sc_place *pn = &s->place[n->id];
  const sc_stage *sn = &kn->stages[pn->stage];
  for (int st = 0; st < kn->nstages; st++) {
    const sc_stage *sg = &kn->stages[st];
    const gc_sym *at = NULL;
    if (st == pn->stage) {
      at = pn->store;
    } else if (st < pn->stage && sc_same_inner(sn, sg)) {
      gc_symmap map;
      at = sc_rename_inner(ir, sn, sg, &map)
               ? gc_sym_subst(&ir->sym, pn->store, &map)
               : NULL;
    }
    bool after = false;
    for (int i = 0; i < sg->nnodes; i++) {
      const ir_node *m = sg->nodes[i];
      inplace_scan c = {r, after ? NULL : at};
      if (ir_expr_walk(s->place[m->id].body, bad_read, &c))
        return false;
      after |= m == n;
    }
  }
  return true;
}

typedef struct loadlist {
  ir_buf **bufs;
  int n, cap;
} loadlist;

static int collect_load(const ir_expr *e, void *ctx) {
  loadlist *l = ctx;
  if (e->op != IR_LOAD || l->n == l->cap)
    return 0;
  for (int i = 0; i < l->n; i++)
    if (l->bufs[i] == e->load.buf)
      return 0;
  l->bufs[l->n++] = e->load.buf;
  return 0;
}

/* Chooses the buffers computed in place (kernel order, so chains form:
 * conv -> batch norm -> activation all in the convolution's tensor). */
static int plan_in_place(ir_graph *ir, sc_schedule *s, gc_error *err) {
  loadlist l = {gc_arena_calloc(ir->a, 64, sizeof(ir_buf *)), 0, 64};
  if (!l.bufs)
    return gc_errorf(err, GC_ENOMEM, "plan: out of memory");
  for (int k = 0; k < s->nkernels; k++) {
    sc_kernel *kn = s->kernels[k];
    if (kn->call)
      continue;
    for (int i = 0; i < kn->nnodes; i++) {
      ir_node *n = kn->nodes[i];
      ir_buf *b = n->out;
      const sc_place *pn = &s->place[n->id];
      if (n->kind != IR_POINTWISE || n->out2 || !b ||
          (b->kind != IR_BUF_ARENA && b->kind != IR_BUF_OUTPUT) ||
          s->local[b->id] || b->first != k || kn->stages[pn->stage].reduction)
        continue;
      l.n = 0;
      if (ir_expr_walk(pn->body, collect_load, &l))
        return gc_errorf(err, GC_EINTERNAL,
                         "memory plan: node %d's body is nested too deep",
                         n->id);
      for (int j = 0; j < l.n; j++) {
        ir_buf *r = l.bufs[j];
        if (!can_overwrite(ir, s, kn, k, n, r))
          continue;
        ir_buf *root = ir_buf_storage(r);
        r->shared = true;
        if (b->kind == IR_BUF_OUTPUT && root->kind == IR_BUF_RESULT) {
          /* the output is the call's tensor: it is never freed */
          b->share = r;
          root->last = s->nkernels;
          break;
        }
        if (b->kind == IR_BUF_OUTPUT) {
          /* an arena chain ending in a program output: all of it lives in
             the output's tensor (allocated when the call starts) */
          root->share = b;
          b->shared = true;
          break;
        }
        b->share = r;
        if (b->last > root->last)
          root->last = b->last;
        break;
      }
    }
  }
  return 0;
}

/* ---- symbolic plans ----
 *
 * With size symbols, buffer sizes and offsets are expressions, and the
 * plan must be right at every size: each buffer goes to the first of a
 * few candidate offsets (0, the end of each live-overlapping buffer
 * already placed, in order of their value at a probe size) that provably
 * overlaps none of them at every size (gc_sym_le over the symbols'
 * ranges), or, if none does, after all of them (the max of their ends).
 * Buffers are placed largest first at the probe size. The arena's size is
 * the largest end: an expression the runtime evaluates per call. */

typedef struct splaced {
  ir_buf *b;
  gc_sym *bytes, *off;
  double key; /* bytes at the probe size */
} splaced;

static int by_key_desc(const void *x, const void *y) {
  const splaced *a = x, *b = y;
  if (a->key != b->key)
    return a->key < b->key ? 1 : -1;
  return a->b->id - b->b->id;
}

static bool live_together(const ir_buf *a, const ir_buf *b) {
  return !(a->last < b->first || b->last < a->first);
}

/* Is [o1, o1 + n1) disjoint from [o2, o2 + n2) at every size? */
static bool apart(gc_symctx *s, gc_sym *o1, gc_sym *n1, gc_sym *o2,
                  gc_sym *n2) {
  return gc_sym_le(s, gc_sym_add(s, o1, n1), o2) ||
         gc_sym_le(s, gc_sym_add(s, o2, n2), o1);
}

static int plan_symbolic(ir_graph *ir, sc_schedule *s, gc_error *err) {
  gc_symctx *sy = &ir->sym;
  splaced *r = gc_arena_calloc(ir->a, (size_t)ir->nbufs + 1, sizeof *r);
  gc_sym **cand = gc_arena_calloc(ir->a, (size_t)ir->nbufs + 2, sizeof *cand);
  if (!r || !cand)
    return gc_errorf(err, GC_ENOMEM, "plan: out of memory");
  int n = 0;
  for (int i = 0; i < ir->nbufs; i++) {
    ir_buf *b = ir->bufs[i];
    if (b->kind != IR_BUF_ARENA || s->local[i] || b->first < 0 || b->share)
      continue;
    r[n].b = b;
    r[n].bytes = sc_buf_sbytes(ir, b);
    r[n].key = ir_probe(ir, r[n].bytes);
    if (!r[n].bytes)
      return gc_errorf(err, GC_ENOMEM, "plan: out of memory");
    n++;
  }
  qsort(r, (size_t)n, sizeof *r, by_key_desc);
  gc_sym *arena = gc_sym_const(sy, 0);
  for (int i = 0; i < n; i++) {
    /* candidates: 0, then the ends of the live-overlapping placed ones */
    int nc = 0;
    cand[nc++] = gc_sym_const(sy, 0);
    for (int j = 0; j < i; j++)
      if (live_together(r[i].b, r[j].b))
        cand[nc++] = gc_sym_add(sy, r[j].off, r[j].bytes);
    for (int a = 2; a < nc; a++) { /* by value at the probe size */
      gc_sym *c = cand[a];
      int k = a - 1;
      while (k >= 1 && ir_probe(ir, cand[k]) > ir_probe(ir, c)) {
        cand[k + 1] = cand[k];
        k--;
      }
      cand[k + 1] = c;
    }
    gc_sym *off = NULL;
    for (int c = 0; c < nc && !off; c++) {
      bool ok = cand[c] != NULL;
      for (int j = 0; j < i && ok; j++)
        if (live_together(r[i].b, r[j].b))
          ok = apart(sy, cand[c], r[i].bytes, r[j].off, r[j].bytes);
      if (ok)
        off = cand[c];
    }
    if (!off) { /* after all of them */
      off = gc_sym_const(sy, 0);
      for (int c = 1; c < nc; c++)
        off = gc_sym_max(sy, off, cand[c]);
    }
    r[i].off = off;
    r[i].b->sarena_offset = off;
    int64_t v;
    r[i].b->arena_offset = gc_sym_const_of(off, &v) ? v : IR_SYMBOLIC;
    arena = gc_sym_max(sy, arena, gc_sym_add(sy, off, r[i].bytes));
    if (!off || !arena)
      return gc_errorf(err, GC_ENOMEM, "plan: out of memory");
  }
  for (int i = 0; i < ir->nbufs; i++) {
    ir_buf *b = ir->bufs[i];
    if (b->share) {
      b->arena_offset = ir_buf_storage(b)->arena_offset;
      b->sarena_offset = ir_buf_storage(b)->sarena_offset;
    }
  }
  s->sarena_bytes = arena;
  if (!gc_sym_const_of(arena, &s->arena_bytes))
    s->arena_bytes = IR_SYMBOLIC;
  s->planned = true;
  return 0;
}

int sc_plan_memory(ir_graph *ir, sc_schedule *s, gc_error *err) {
  for (int i = 0; i < ir->nbufs; i++) {
    ir->bufs[i]->first = ir->bufs[i]->last = -1;
    ir->bufs[i]->share = NULL;
    ir->bufs[i]->shared = false;
  }
  int end = s->nkernels;
  for (int k = 0; k < s->nkernels; k++) {
    sc_kernel *kn = s->kernels[k];
    for (int i = 0; i < kn->nnodes; i++) {
      ir_node *n = kn->nodes[i];
      ir_buf *outs[3] = {n->out, n->out2, n->out3};
      for (int o = 0; o < 3; o++)
        if (outs[o])
          touch(outs[o], k);
      for (int r = 0; r < n->nresults; r++)
        if (n->results[r])
          touch(n->results[r], k);
      if (kn->call) {
        for (int a = 0; a < n->nargs; a++) {
          bool alias = arg_returned(n, &n->args[a]);
          int cnt = n->args[a].arg.kind == GC_ARG_TENSOR ? 1 : n->args[a].arg.n;
          for (int j = 0; n->args[a].bufs && j < cnt; j++)
            if (n->args[a].bufs[j]) {
              touch(n->args[a].bufs[j], k);
              if (alias)
                touch(n->args[a].bufs[j], end);
            }
        }
      } else {
        if (ir_expr_walk(s->place[n->id].body, touch_load, &k))
          return gc_errorf(err, GC_EINTERNAL,
                           "memory plan: node %d's body is nested too deep",
                           n->id);
      }
    }
  }
  int rc = plan_in_place(ir, s, err);
  if (rc)
    return rc;
  /* Large intermediates get their own memory for their live range only
   * (buffers computed in place in one follow it: they are views of it):
   * from temp_min_bytes in a program whose inputs are donated, from
   * SC_TEMP_MIN_BYTES in any other. The arena lives for the whole call, so
   * a large buffer in it is held long after its last use: a network's
   * input copied to channels-last for its first convolution (4.6 MiB at
   * batch 8, 224 x 224) stayed allocated through every later layer. */
  int64_t temp_min =
      s->temp_min_bytes > 0 ? s->temp_min_bytes : SC_TEMP_MIN_BYTES;
  for (int i = 0; i < ir->nbufs; i++) {
    ir_buf *b = ir->bufs[i];
    /* (a symbolic one may be large: its own memory, as eager's, when
       inputs are donated) */
    if (b->kind == IR_BUF_ARENA && !s->local[i] && b->first >= 0 && !b->share &&
        (b->symbolic ? s->temp_min_bytes > 0 : sc_buf_bytes(b) >= temp_min))
      b->kind = IR_BUF_TEMP;
  }
  if (ir->nsyms)
    return plan_symbolic(ir, s, err);
  /* the arena buffers that need memory, largest first */
  rng *r = gc_arena_calloc(ir->a, (size_t)ir->nbufs + 1, sizeof *r);
  if (!r)
    return gc_errorf(err, GC_ENOMEM, "plan: out of memory");
  int n = 0;
  for (int i = 0; i < ir->nbufs; i++) {
    ir_buf *b = ir->bufs[i];
    if (b->kind != IR_BUF_ARENA || s->local[i] || b->first < 0 || b->share)
      continue;
    r[n].b = b;
    r[n].bytes = sc_buf_bytes(b);
    n++;
  }
  qsort(r, (size_t)n, sizeof *r, by_size_desc);
  s->arena_bytes = 0;
  live t;
  /* scratch: the intervals of live-overlapping placed buffers, sorted */
  int64_t(*iv)[2] = gc_arena_calloc(ir->a, (size_t)n + 1, sizeof *iv);
  if (!iv || !live_init(&t, ir->a, r, n))
    return gc_errorf(err, GC_ENOMEM, "plan: out of memory");
  for (int i = 0; i < n; i++) {
    ir_buf *b = r[i].b;
    int m = 0;
    live_overlapping(&t, 1, 0, t.leaves, live_end(&t, b->last), b->first, iv,
                     &m);
    qsort(iv, (size_t)m, sizeof *iv, by_start);
    int64_t off = 0;
    for (int q = 0; q < m; q++) {
      if (off + r[i].bytes <= iv[q][0])
        break;
      if (iv[q][1] > off)
        off = iv[q][1];
    }
    b->arena_offset = off;
    live_place(&t, i);
    if (off + r[i].bytes > s->arena_bytes)
      s->arena_bytes = off + r[i].bytes;
  }
  for (int i = 0; i < ir->nbufs; i++) {
    ir_buf *b = ir->bufs[i];
    if (b->share)
      b->arena_offset = ir_buf_storage(b)->arena_offset;
  }
  s->planned = true;
  return 0;
}
