/*
 * print.c: the loop IR as text: expressions (ir_expr_str, in comments of
 * the generated C and in dumps), symbolic expressions as the artifact
 * states them (ir_sym_text) and the whole IR (ir_print, `compilectl graph
 * lower`). See ir.h.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ir/ir.h"

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
  return e->op == IR_CONST || e->op == IR_LOAD || e->op == IR_INDEX;
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
    if (ir_dtype_is_float(e->dtype))
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

/* A call node's call: the operator, its arguments and what it writes. */
static void pcall(ir_graph *ir, pbuf *p, const ir_node *n) {
  pf(p, "%s(", n->op ? n->op->name : "?");
  for (int a = 0; a < n->nargs; a++) {
    const ir_call_arg *ca = &n->args[a];
    pf(p, "%s%s=", a ? ", " : "", ca->name);
    if (ca->bufs) {
      int cnt = ca->arg.kind == GC_ARG_TENSOR ? 1 : ca->arg.n;
      for (int k = 0; k < cnt; k++)
        pf(p, "%s%s", k ? "|" : "",
           ca->bufs[k] ? gc_arena_printf(ir->a, "buf%d", ca->bufs[k]->id)
                       : "None");
    } else {
      pf(p, "%s", gc_arg_kind_name(ca->arg.kind));
    }
  }
  pf(p, ")\n");
  for (int k = 0; k < n->nresults; k++)
    if (n->results[k]) {
      pf(p, "  -> ");
      pbufdecl(ir, p, n->results[k]);
      pf(p, "\n");
    }
  const ir_buf *outs[2] = {n->out, n->out2};
  for (int k = 0; k < 2; k++)
    if (outs[k]) {
      pf(p, "  -> ");
      pbufdecl(ir, p, outs[k]);
      pf(p, " (out=)\n");
    }
}

static const char *scan_op_name(ir_scan_op op) {
  switch (op) {
  case IR_SCAN_SUM:
    return "sum";
  case IR_SCAN_PROD:
    return "prod";
  case IR_SCAN_LOGSUMEXP:
    return "logsumexp";
  case IR_SCAN_MAX:
    return "max";
  case IR_SCAN_MIN:
    return "min";
  }
  return "?";
}

static const char *scatter_op_name(ir_scatter_op op) {
  switch (op) {
  case IR_SCATTER_ADD:
    return "add";
  case IR_SCATTER_SET:
    return "set";
  case IR_SCATTER_INDEX_ADD:
    return "index_add";
  case IR_SCATTER_EMBEDDING:
    return "embedding_backward";
  case IR_SCATTER_INDEX_PUT:
    return "index_put";
  }
  return "?";
}

/* "  scatter add along dim 1 ... as ": what a SCATTER node does. */
static void pscatter(ir_graph *ir, pbuf *p, const ir_node *n) {
  pf(p, "  scatter %s along dim %d", scatter_op_name(n->scatter.op),
     n->scatter.dim);
  if (ir_scatter_by_token(n))
    pf(p, " from dim %d", n->scatter.first);
  if (n->scatter.odims) { /* one per source dim that is not an index dim */
    const ir_view *self, *ix, *src;
    ir_scatter_views(n, &self, &ix, &src);
    for (int j = 0; ix && src && j < src->rank - ix->rank; j++)
      pf(p, "%s%d", j ? ", " : " other dims to ", n->scatter.odims[j]);
  }
  if (n->scatter.op == IR_SCATTER_EMBEDDING)
    pf(p, " padding %lld", (long long)n->scatter.padding);
  if (n->scatter.alpha != 1)
    pf(p, " alpha %.17g", n->scatter.alpha);
  if (n->scatter.fill) {
    pf(p, " onto ");
    pexpr_shared(ir, p, n->scatter.fill);
  }
  pf(p, " as ");
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
      pf(&p, "\n  %s over [", ir_node_kind_name(n->kind));
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
      pf(&p, "  %s ", ir_node_kind_name(n->kind));
      pcall(ir, &p, n);
      break;
    case IR_SCAN:
      pf(&p, "  scan %s along dim %d as ", scan_op_name(n->scan.op),
         n->scan.dim);
      pcall(ir, &p, n);
      break;
    case IR_SCATTER:
      pscatter(ir, &p, n);
      pcall(ir, &p, n);
      break;
    case IR_INTERP:
      pf(&p, "  interp (");
      for (int k = 0; k < n->interp.naxes; k++)
        pf(&p, "%s%lld to %lld", k ? ", " : "",
           (long long)n->interp.axes[k].out, (long long)n->interp.axes[k].in);
      pf(&p, ") as ");
      pcall(ir, &p, n);
      break;
    }
  }
  return p.s ? p.s : gc_arena_strdup(ir->a, "");
}
