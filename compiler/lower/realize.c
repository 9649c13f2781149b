/*
 * realize.c: giving an unrealized value a buffer: realization in a chosen
 * layout (undone with a failed rule), reductions, setting a node's outputs,
 * and when an argument or a result is realized rather than inlined
 * (Inductor's heuristics, see lower.h).
 */
#include "compiler/lower/ctx.h"

#include <string.h>

#include "compiler/ir/half.h"

/* Inlining limits (Inductor's realization heuristics, see lower.h). */
#define REALIZE_READS_SHARED 4 /* a multi-user value with more loads */
#define REALIZE_OPS_SHARED 30  /* ... or more operations is realized */
#define REALIZE_READS_ANY 8    /* any value with more loads is realized */
#define REALIZE_OPS_ANY 96     /* ... or more operations */

bool L__log_realized(lower_ctx *L, ir_tensor *t) {
  ir_tensor **log = gc_arena_grow(L->ir->a, L->realized_log, L->nrealized,
                                  &L->caprealized, 64, sizeof *log);
  if (!log)
    return false;
  L->realized_log = log;
  log[L->nrealized++] = t;
  return true;
}

/* The tensor's sizes as expressions. */
gc_sym **L__sym_sizes_of(lower_ctx *L, ir_tensor *t) {
  if (!t->ssizes)
    t->ssizes = ir_syms_of(L->ir, t->rank, t->sizes);
  return t->ssizes;
}

/* A pointwise node computing t into b, a new buffer of t's sizes (`ss`
 * when symbolic, the loop then over them; NULL: t->sizes). NULL when b is
 * (out of memory). */
static ir_buf *compute_into(lower_ctx *L, ir_tensor *t, ir_buf *b,
                            gc_sym *const *ss) {
  ir_graph *ir = L->ir;
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
    n->vars = ss ? L_svars(L, t->rank, ss) : L_vars(L, t->rank, t->sizes);
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

/* A pointwise node computing t into a new buffer of `kind` with `strides`
 * (NULL: dense like `like`). */
ir_buf *L__materialize(lower_ctx *L, ir_tensor *t, ir_buf_kind kind,
                       const int64_t *strides, const gc_tensor_meta *like) {
  ir_graph *ir = L->ir;
  if (ir->nsyms) {
    gc_sym **ss = strides ? ir_syms_of(ir, t->rank, strides) : NULL;
    return strides && !ss ? NULL : L__smaterialize(L, t, kind, ss, like);
  }
  int64_t st[IR_MAX_RANK];
  if (strides)
    memcpy(st, strides, (size_t)t->rank * 8);
  else
    L__dense_like(t->rank, t->sizes, like, st);
  return compute_into(
      L, t, ir_buf_new(ir, kind, t->dtype, t->rank, t->sizes, st), NULL);
}

/* L__materialize with symbolic sizes: strides given, or dense like `like`. */
ir_buf *L__smaterialize(lower_ctx *L, ir_tensor *t, ir_buf_kind kind,
                        gc_sym *const *strides, const gc_tensor_meta *like) {
  ir_graph *ir = L->ir;
  gc_sym *st[IR_MAX_RANK];
  gc_sym *const *sz = L__sym_sizes_of(L, t);
  if (!sz || t->rank > IR_MAX_RANK)
    return NULL;
  if (strides)
    memcpy(st, strides, (size_t)t->rank * sizeof *st);
  else
    L__sdense_like(L, t->rank, sz, like, st);
  return compute_into(L, t, ir_buf_new_s(ir, kind, t->dtype, t->rank, sz, st),
                      sz);
}

ir_buf *L_realize(lower_ctx *L, ir_tensor *t, const gc_tensor_meta *like) {
  if (!t)
    return NULL;
  if (t->kind == IR_T_BUF)
    return t->buf;
  if (t->realized)
    return t->realized;
  ir_buf *b = L__materialize(L, t, IR_BUF_ARENA, NULL, like);
  if (!b || !L__log_realized(L, t))
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
  const gc_tensor_meta *m = L__chosen_layout(L, t, like);
  return L_realize(L, t, m ? m : like);
}

bool L_as_buffer(lower_ctx *L, ir_tensor *t, ir_view *v) {
  if (ir_tensor_as_strided(L->ir, t, v))
    return true;
  ir_buf *b = L_realize_chosen(L, t, t->value ? &t->value->meta : NULL);
  if (!b)
    return false;
  *v = L__whole_buf(L, t, b);
  return true;
}

ir_view L__whole_buf(lower_ctx *L, ir_tensor *t, ir_buf *b) {
  return (ir_view){.buf = b,
                   .rank = t->rank,
                   .sizes = t->sizes,
                   .strides = b->strides,
                   .offset = 0,
                   .ssizes = L__sym_sizes_of(L, t),
                   .sstrides = b->sstrides,
                   .soffset = gc_sym_const(&L->ir->sym, 0)};
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
  return L->ir->nsyms ? L__smaterialize(L, t, IR_BUF_ARENA, b->sstrides, NULL)
                      : L__materialize(L, t, IR_BUF_ARENA, b->strides, NULL);
}

/* A further output of reduction node n, in dt (also set in *out when out
 * is not NULL). */
static ir_buf *extra_out(ir_graph *ir, ir_node *n, gc_dtype dt, int rank,
                         gc_sym *const *sizes, gc_sym *const *strides,
                         ir_buf **out) {
  ir_buf *b = ir_buf_new_s(ir, IR_BUF_ARENA, dt, rank, sizes, strides);
  if (!b)
    return NULL;
  b->def = n;
  if (out)
    *out = b;
  return b;
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
    L__sdense_like(L, rank, ranges, like && like->rank == rank ? like : NULL,
                   st);
  } else {
    int64_t r64[IR_MAX_RANK], s64[IR_MAX_RANK];
    ir_ints_of(rank, ranges, r64);
    L__dense_like(rank, r64, like && like->rank == rank ? like : NULL, s64);
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
  n->ngnodes = L__provenance(L, &n->gnodes);
  b->def = n;
  /* out2 of an arg reduction, and of a Welford with out3 (ir.h) */
  if ((arg || red == IR_RED_WELFORD) &&
      !(n->out2 = extra_out(ir, n, dt, rank, ranges, st, out2)))
    return NULL;
  if (red == IR_RED_WELFORD &&
      !(n->out3 = extra_out(ir, n, dt, rank, ranges, st, out3)))
    return NULL;
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

/* Realizes the computation t of value v in the layout L__maybe_realize
 * would give it. */
static ir_buf *realize_value(lower_ctx *L, ir_tensor *t, const gc_value *v) {
  ir_buf *b = L->eager_layout[v->id] ? L_realize(L, t, &v->meta)
                                     : L_realize_chosen(L, t, &v->meta);
  if (b && !b->value)
    b->value = v; /* what views of it view in eager (L__lower_outputs) */
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
  ir_tensor *root = L__view_root(t);
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

int L__maybe_realize(lower_ctx *L, const gc_value *v) {
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
