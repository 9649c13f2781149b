/*
 * explorer_derive.c: one cached program derived again for the explorer
 * (explorer_program.c serves it): from the request kept beside it
 * (cache/explore.h), the graph's nodes with their source locations and
 * the kernels that compute them, each pass's IR, and the memory plan.
 *
 * Deriving. The daemon keeps the request, not the passes' output: a
 * program's page runs the passes again (decode, functionalize, lower,
 * schedule, plan, codegen, emit; never the C compiler) on this daemon's
 * build and target, in an arena charged to the memory budget like a big
 * request's, one program at a time (another asking meanwhile is told to
 * retry: 503 with Retry-After). What it finds is copied into a view of
 * its own (x_derived) and kept in a small cache of views, most recently
 * used first, within DERIVED_BUDGET bytes, so paging through a big
 * program derives it once. Each pass's text is cut at PASS_MAX bytes.
 *
 * Node ids are those of the functional graph, the graph the back half
 * compiles (for a graph that is functional already, as AOTAutograd's are,
 * the graph as sent, node for node); the C's kernel comments name the
 * same ids ("graph node 12: ..."), which is what links nodes and kernels
 * both ways on the pages.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "cache/explore.h"
#include "compiled/v1/artifact.pb-c.h"
#include "compiler/buf.h"
#include "compiler/passes.h"
#include "compiler/opfacts.h"
#include "compiler/pipeline.h"
#include "compiler/dump.h"
#include "daemon/explorer_derive.h"
#include "daemon/message.h"
#include "daemon/log.h"

#define DERIVED_BUDGET ((size_t)256 << 20)
#define PASS_MAX ((size_t)16 << 20)
#define WAITERS 2 /* requests waiting for a derivation */
#define WAIT_S 30 /* ... at most this long */

const char *const xd_pass_names[NPASSES] = {
    "graph", "functionalize", "lower",  "schedule",
    "plan",  "codegen",       "program"};

/* ---- texts ---- */

/* Takes `text` (malloc'd) into t, cut at max bytes, and indexes its lines. */
static void text_set(x_text *t, char *text, size_t len, size_t max) {
  t->text = text;
  t->len = len;
  if (!text)
    return;
  if (len > max) {
    t->cut = true;
    t->len = max;
    while (t->len && text[t->len - 1] != '\n')
      t->len--;
    text[t->len] = '\0';
  }
  int n = 0;
  for (size_t i = 0; i < t->len; i++)
    n += text[i] == '\n';
  if (t->len && text[t->len - 1] != '\n')
    n++;
  t->line_at = malloc(((size_t)n + 1) * sizeof *t->line_at);
  if (!t->line_at) {
    t->nlines = 0;
    return;
  }
  int k = 0;
  size_t start = 0;
  for (size_t i = 0; i < t->len && k < n; i++)
    if (text[i] == '\n') {
      t->line_at[k++] = start;
      start = i + 1;
    }
  if (k < n)
    t->line_at[k++] = start;
  /* one past the last line's end, as if a newline followed it */
  t->line_at[n] = t->len && text[t->len - 1] == '\n' ? t->len : t->len + 1;
  t->nlines = n;
}

static void text_free(x_text *t) {
  free(t->text);
  free(t->line_at);
  memset(t, 0, sizeof *t);
}

static size_t text_bytes(const x_text *t) {
  return t->len + (size_t)t->nlines * sizeof(size_t);
}

/* ---- locations in stack traces ---- */

bool x_library_file(const char *f, size_t n) {
  char s[1100];
  snprintf(s, sizeof s, "%.*s", (int)(n < 1024 ? n : 1024), f);
  return !strncmp(s, "torch/", 6) || strstr(s, "/torch/") ||
         strstr(s, "site-packages/") || strstr(s, "dist-packages/") ||
         s[0] == '<';
}

/* The user's frame of a Python traceback ('File "x.py", line 12, in f'):
 * the innermost frame outside libraries, else the innermost. */
static void locate(gc_arena *a, const char *st, x_node *n) {
  const char *last = NULL, *user = NULL;
  for (const char *p = st; (p = strstr(p, "File \"")); p++) {
    const char *q = strchr(p + 6, '"');
    last = p;
    if (q && !x_library_file(p + 6, (size_t)(q - p - 6)))
      user = p;
  }
  if (user)
    last = user;
  if (!last)
    return;
  const char *f = last + 6, *q = strchr(f, '"');
  if (!q || q - f > 1024 || strncmp(q, "\", line ", 8))
    return;
  n->file = gc_arena_strndup(a, f, (size_t)(q - f));
  n->line = atoi(q + 8);
  const char *in = strstr(q, ", in ");
  const char *eol = strchr(q, '\n');
  if (in && (!eol || in < eol)) {
    in += 5;
    size_t len = eol ? (size_t)(eol - in) : strlen(in);
    n->func = gc_arena_strndup(a, in, len > 200 ? 200 : len);
  }
}

/* ---- deriving ---- */

static const char *node_text(gc_arena *a, const gc_node *n) {
  gc_buf b = GC_BUF_INIT;
  for (int k = 0; k < n->noutputs; k++) {
    if (k)
      gc_buf_puts(&b, ", ");
    gc_arg_print(&n->outputs[k], &b);
    if (n->outputs[k].kind == GC_ARG_TENSOR && n->outputs[k].v &&
        n->outputs[k].v->kind == GC_VALUE_TENSOR) {
      gc_buf_puts(&b, ": ");
      gc_meta_print(&n->outputs[k].v->meta, &b);
    }
  }
  gc_buf_printf(&b, " = %s(", n->target);
  for (int k = 0; k < n->nargs; k++) {
    if (k)
      gc_buf_puts(&b, ", ");
    if (n->args[k].keyword)
      gc_buf_printf(&b, "%s=", n->args[k].name);
    gc_arg_print(&n->args[k].arg, &b);
  }
  gc_buf_puts(&b, ")");
  const char *s =
      b.data ? gc_arena_strndup(a, b.data, b.len > 2000 ? 2000 : b.len) : "";
  gc_buf_free(&b);
  return s;
}

static void add_kernel(x_node *n, int k) {
  for (int i = 0; i < n->nkernels; i++)
    if (n->kernels[i] == k)
      return;
  if (n->nkernels < NODE_KERNELS)
    n->kernels[n->nkernels++] = k;
}

/* Why fallback node n (of the functional graph) is one. */
static const char *fallback_reason(const ir_graph *ir, const gc_node *n,
                                   bool eager_random) {
  const char *what = ir->gnode_what ? ir->gnode_what[n->id] : NULL;
  if (eager_random && n->op && gc_opfacts_is_random(n->op->schema))
    return "a random operator kept as an ATen call (the eager_random option: "
           "the same numbers as eager)";
  if (!what)
    return "no lowering rule: the compiler has no native code for this "
           "operator, so the client runs it through ATen";
  return "its lowering rule declined this call (a dtype, argument or layout "
         "it does not handle natively), so the client runs it through ATen";
}

/* Copies the graph's nodes and their kernels into the view. */
static void take_nodes(x_derived *v, const gc_functional *f,
                       const gc_native *nat, bool native, bool eager_random) {
  const gc_graph *g = f->graph;
  v->nodes = gc_arena_calloc(v->a, (size_t)g->nnodes + 1, sizeof *v->nodes);
  if (!v->nodes)
    return;
  v->nnodes = g->nnodes;
  for (int i = 0; i < g->nnodes; i++) {
    const gc_node *gn = &g->nodes[i];
    x_node *n = &v->nodes[i];
    n->text = node_text(v->a, gn);
    /* copies: the graph lives in the derivation's arena, freed after it */
    n->target = gc_arena_strdup(v->a, gn->target ? gn->target : "?");
    n->module = gn->module_path && *gn->module_path
                    ? gc_arena_strndup(v->a, gn->module_path,
                                       strnlen(gn->module_path, 1024))
                    : "";
    size_t sl = gn->stack_trace ? strlen(gn->stack_trace) : 0;
    n->stack = sl ? gc_arena_strndup(v->a, gn->stack_trace,
                                     sl > STACK_MAX ? STACK_MAX : sl)
                  : "";
    if (sl)
      locate(v->a, gn->stack_trace, n);
    n->status = !f->functional ? "eager" : native ? "folded" : "aten";
    n->reason = !f->functional ? "the program runs in eager form"
                : native       ? "no code of its own: a view, an alias or a "
                                 "value folded into the code of its readers"
                               : "no native code for this program: the client "
                                 "runs its ATen program";
  }
  if (!native)
    return;
  const ir_graph *ir = &nat->ir;
  for (int i = 0; i < ir->nnodes; i++) {
    const ir_node *in = ir->nodes[i];
    for (int j = -1; j < in->ngnodes; j++) {
      int id = j < 0 ? (in->gnode ? in->gnode->id : -1) : in->gnodes[j];
      if (id < 0 || id >= v->nnodes)
        continue;
      x_node *n = &v->nodes[id];
      if (in->kind == IR_FALLBACK) {
        n->status = "fallback";
        n->reason = fallback_reason(ir, &g->nodes[id], eager_random);
      } else if (in->kind == IR_EXTERN && strcmp(n->status, "fallback")) {
        n->status = "extern";
        n->reason = "a library call (BLAS, oneDNN, convolution...) through "
                    "ATen or from generated code";
      } else if (strcmp(n->status, "fallback") && strcmp(n->status, "extern")) {
        n->status = "native";
        n->reason = "computed by generated code";
      }
    }
  }
  const sc_schedule *s = &nat->sched;
  v->kernels =
      gc_arena_calloc(v->a, (size_t)s->nkernels + 1, sizeof *v->kernels);
  if (!v->kernels)
    return;
  v->nkernels = s->nkernels;
  for (int k = 0; k < s->nkernels; k++) {
    const sc_kernel *sk = s->kernels[k];
    x_kernel *xk = &v->kernels[k];
    xk->name = gc_arena_strdup(v->a, sk->name ? sk->name : "?");
    xk->kind = !sk->call ? "loop" : sk->in_c ? "library" : "call";
    xk->what = sk->call && sk->call->what
                   ? gc_arena_strdup(v->a, sk->call->what)
                   : NULL;
    int cap = 0;
    const ir_node *const *ns = sk->call ? (const ir_node *const *)&sk->call
                                        : (const ir_node *const *)sk->nodes;
    int nn = sk->call ? 1 : sk->nnodes;
    for (int i = 0; i < nn; i++)
      cap += ns[i]->ngnodes + 1;
    xk->nodes = gc_arena_calloc(v->a, (size_t)cap + 1, sizeof *xk->nodes);
    for (int i = 0; xk->nodes && i < nn; i++)
      for (int j = -1; j < ns[i]->ngnodes; j++) {
        int id =
            j < 0 ? (ns[i]->gnode ? ns[i]->gnode->id : -1) : ns[i]->gnodes[j];
        bool dup = id < 0 || id >= v->nnodes;
        for (int q = 0; q < xk->nnodes && !dup; q++)
          dup = xk->nodes[q] == id;
        if (dup)
          continue;
        xk->nodes[xk->nnodes++] = id;
        add_kernel(&v->nodes[id], k);
      }
  }
}

/* Whether buffer b takes arena memory: an intermediate neither kept in
 * registers nor computed in place of an output or an ATen result. */
static bool in_arena(ir_buf *b, const gc_native *nat) {
  return b->kind == IR_BUF_ARENA && !nat->sched.local[b->id] &&
         ir_buf_storage(b)->kind == IR_BUF_ARENA;
}

/* Copies the memory plan (arena buffers) into the view. */
static void take_plan(x_derived *v, const gc_native *nat) {
  const ir_graph *ir = &nat->ir;
  v->arena_bytes = nat->sched.arena_bytes;
  int n = 0;
  for (int i = 0; i < ir->nbufs; i++)
    n += in_arena(ir->bufs[i], nat);
  v->bufs = gc_arena_calloc(v->a, (size_t)n + 1, sizeof *v->bufs);
  if (!v->bufs)
    return;
  for (int i = 0; i < ir->nbufs; i++) {
    ir_buf *b = ir->bufs[i];
    if (!in_arena(b, nat))
      continue;
    x_buf *x = &v->bufs[v->nbufs++];
    x->id = b->id;
    x->offset = ir_buf_storage(b)->arena_offset;
    x->bytes = b->span * gc_dtype_size(b->dtype);
    x->first = b->first;
    x->last = b->last;
    x->dtype = gc_dtype_name(b->dtype);
    gc_buf s = GC_BUF_INIT;
    gc_buf_puts(&s, "[");
    for (int k = 0; k < b->rank; k++)
      gc_buf_printf(&s, "%s%lld", k ? ", " : "", (long long)b->sizes[k]);
    gc_buf_puts(&s, "]");
    x->shape = gc_arena_strdup(v->a, s.data ? s.data : "[]");
    gc_buf_free(&s);
    x->value = b->value && b->value->name
                   ? gc_arena_strndup(v->a, b->value->name,
                                      strnlen(b->value->name, 200))
                   : NULL;
    x->share = b->share ? b->share->id : -1;
  }
}

/* The 1-based line of each kernel's comment ("/ * NAME") in the C. */
static void find_kernel_lines(x_derived *v) {
  const x_text *c = &v->c;
  for (int k = 0; k < v->nkernels; k++) {
    size_t nl = strlen(v->kernels[k].name);
    for (int i = 0; i < c->nlines; i++) {
      const char *l = c->text + c->line_at[i];
      size_t len = c->line_at[i + 1] - 1 - c->line_at[i];
      if (len == nl + 3 && !strncmp(l, "/* ", 3) &&
          !strncmp(l + 3, v->kernels[k].name, nl)) {
        v->kernels[k].line = i + 1;
        break;
      }
    }
  }
}

static void set_pass(x_derived *v, int p, const char *text) {
  if (!text)
    return;
  size_t len = strlen(text);
  char *copy = malloc(len + 1);
  if (!copy)
    return;
  memcpy(copy, text, len + 1);
  text_set(&v->pass[p], copy, len, PASS_MAX);
}

/* Runs the passes for `key` on `req` into view v (everything but the C). */
static void derive_passes(daemon_ctx *d, gc_arena *a, x_derived *v,
                          const Compiled__V1__CompileRequest *req) {
  gc_options o;
  bool force;
  gc_target t;
  gc_graph *g = NULL;
  gc_key key;
  gc_error err;
  gc_error_clear(&err);
  int rc = daemon_read_options(req->options, &o, &force, &err);
  if (!rc)
    rc = daemon_read_target(d, a, req->target, &t, &err);
  if (!rc)
    rc = gc_prepare(a, req->graph, &d->limits, &o, &t, &g, &key, NULL, &err);
  if (rc) {
    v->error = strdup(err.msg);
    return;
  }
  if (memcmp(key.key, v->key, GC_DIGEST_LEN))
    v->note = "this daemon's build or target gives the kept request another "
              "key than the program's: the passes below are what this build "
              "makes of it now; the generated C is the program's own";
  gc_buf b = GC_BUF_INIT;
  gc_graph_print(g, &b);
  set_pass(v, 0, b.data);
  gc_buf_free(&b);
  gc_backend be = {.target = &t, .toolchain = NULL, .verify = false};
  char hex[GC_HEX_LEN];
  gc_digest_hex(v->key, hex);
  gc_pass_state s;
  gc_pass_state_init(&s, a, g, &o, d->cfg.native ? &be : NULL, hex);
  rc = gc_pass_run(gc_pass_find("order"), &s, &err);
  if (!rc)
    rc = gc_pass_run(gc_pass_find("functionalize"), &s, &err);
  if (rc) {
    v->error = strdup(err.msg);
    return;
  }
  const gc_functional *f = &s.f;
  v->functional = f->functional;
  v->eager_reason =
      f->eager_reason ? gc_arena_strdup(v->a, f->eager_reason) : NULL;
  gc_buf fb = GC_BUF_INIT;
  gc_graph_print(f->graph, &fb);
  set_pass(v, 1, fb.data);
  gc_buf_free(&fb);
  bool native = gc_pass_state_native(&s);
  if (native) {
    /* the back half's passes with a dump, as the pass table lists them
     * (xd_pass_names from "lower" on); no C compiler */
    int p = 2;
    for (int i = 0; i < gc_npasses && !rc; i++) {
      const gc_pass *ps = &gc_passes[i];
      if (!ps->native || ps->toolchain || (ps->skip && ps->skip(&s)))
        continue;
      rc = gc_pass_run(ps, &s, &err);
      if (!rc)
        set_pass(v, p++, ps->dump(&s));
    }
    if (rc) {
      char msg[sizeof err.msg + 64];
      snprintf(msg, sizeof msg, "the %s pass failed: %s", xd_pass_names[p],
               err.msg);
      v->error = strdup(msg);
    }
    native = p > 3; /* scheduled: kernels are known */
  }
  gc_native nat = s.nat;
  take_nodes(v, f, &nat, native, o.eager_random);
  if (native && nat.sched.planned)
    take_plan(v, &nat);
  gc_native_release(&nat);
}

static void derived_free(x_derived *v) {
  if (!v)
    return;
  for (int p = 0; p < NPASSES; p++)
    text_free(&v->pass[p]);
  text_free(&v->c);
  free(v->error);
  gc_arena_free(v->a);
  free(v);
}

/* A new view of program `key`: derived from its kept request and its
 * artifact. NULL with *status and *why when it cannot be. */
static x_derived *derive(daemon_ctx *d, const uint8_t *key, unsigned *status,
                         char *why, size_t whylen) {
  cache_conn *conn = daemon_conn(d);
  x_derived *v = calloc(1, sizeof *v);
  gc_arena *a = memory_arena(d, SIZE_MAX); /* charged like a big request */
  if (v)
    v->a = gc_arena_new(0);
  if (!v || !a || !v->a) {
    derived_free(v);
    memory_free_arena(d, a);
    *status = MHD_HTTP_SERVICE_UNAVAILABLE;
    snprintf(why, whylen, "out of memory (the memory budget is in use)");
    return NULL;
  }
  memcpy(v->key, key, GC_DIGEST_LEN);
  cache_info info;
  Compiled__V1__Artifact *art = xp_load_artifact(conn, key, &info, why, whylen);
  if (!art) {
    *status = MHD_HTTP_NOT_FOUND;
    derived_free(v);
    memory_free_arena(d, a);
    return NULL;
  }
  if (art->native_program) {
    size_t len = 0;
    char *c = xp_inflate_source(&art->native_program->source_zlib, &len);
    text_set(&v->c, c, len, C_MAX);
  }
  compiled__v1__artifact__free_unpacked(art, NULL);
  Compiled__V1__CompileRequest *req = NULL;
  char err[400];
  if (xp_load_request(d, conn, a, key, &req, err, sizeof err) == 0)
    derive_passes(d, a, v, req);
  else
    v->error = strdup(err);
  if (v->error && !v->nodes && !v->pass[0].text && !v->c.text) {
    /* nothing at all to show: not kept */
    *status = MHD_HTTP_NOT_FOUND;
    snprintf(why, whylen, "%s", v->error);
    derived_free(v);
    memory_free_arena(d, a);
    return NULL;
  }
  find_kernel_lines(v);
  memory_free_arena(d, a);
  v->bytes = gc_arena_held(v->a) + text_bytes(&v->c) + sizeof *v;
  for (int p = 0; p < NPASSES; p++)
    v->bytes += text_bytes(&v->pass[p]);
  return v;
}

/* Drops a reference (with x->mu held). */
static void unref_locked(x_derived *v) {
  if (--v->refs == 0)
    derived_free(v);
}

/* The view of `key`, derived now if need be, with a reference the caller
 * drops (release). NULL with *status and the reason in why. */
x_derived *xd_acquire(daemon_ctx *d, const uint8_t *key, unsigned *status,
                      char *why, size_t whylen) {
  explorer *x = d->explorer;
  pthread_mutex_lock(&x->mu);
  for (;;) {
    for (x_derived **p = &x->derived; *p; p = &(*p)->next) {
      x_derived *v = *p;
      if (memcmp(v->key, key, GC_DIGEST_LEN))
        continue;
      *p = v->next; /* to the front */
      v->next = x->derived;
      x->derived = v;
      v->refs++;
      pthread_mutex_unlock(&x->mu);
      return v;
    }
    if (!x->deriving)
      break;
    /* Another is being derived (this one, perhaps, for another page of
     * it): wait for it, a few requests at most, so that the HTTP threads
     * stay free for the others (/healthz among them). */
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += WAIT_S;
    int rc = 0;
    if (x->waiting < WAITERS) {
      x->waiting++;
      while (x->deriving && rc == 0)
        rc = pthread_cond_timedwait(&x->done, &x->mu, &until);
      x->waiting--;
    }
    if (x->deriving) {
      pthread_mutex_unlock(&x->mu);
      *status = MHD_HTTP_SERVICE_UNAVAILABLE;
      snprintf(why, whylen, "another program is being derived; retry");
      return NULL;
    }
  }
  x->deriving = true;
  pthread_mutex_unlock(&x->mu);
  int64_t t0 = gc_now_us();
  x_derived *v = derive(d, key, status, why, whylen);
  if (v) {
    char hex[GC_HEX_LEN];
    gc_digest_hex(key, hex);
    LOG(LOG_INFO, "explorer: derived %.16s in %.1f ms (%zu bytes kept)", hex,
        (double)(gc_now_us() - t0) / 1000.0, v->bytes);
  }
  pthread_mutex_lock(&x->mu);
  x->deriving = false;
  pthread_cond_broadcast(&x->done);
  if (v) {
    v->refs = 2; /* the list's and the caller's */
    v->next = x->derived;
    x->derived = v;
    x->derived_bytes += v->bytes;
    /* the least recently used go while over the budget (never v) */
    while (x->derived_bytes > DERIVED_BUDGET && x->derived->next) {
      x_derived **p = &x->derived;
      while ((*p)->next)
        p = &(*p)->next;
      x_derived *old = *p;
      *p = NULL;
      x->derived_bytes -= old->bytes;
      unref_locked(old);
    }
  }
  pthread_mutex_unlock(&x->mu);
  return v;
}

void xd_release(daemon_ctx *d, x_derived *v) {
  pthread_mutex_lock(&d->explorer->mu);
  unref_locked(v);
  pthread_mutex_unlock(&d->explorer->mu);
}

void xp_cleanup(explorer *x) {
  while (x->derived) {
    x_derived *v = x->derived;
    x->derived = v->next;
    derived_free(v);
  }
}
