/*
 * explorer_program.c: one cached program in the explorer: its summary
 * from the artifact, its generated C, and what is derived again from the
 * request kept beside it (cache/explore.h): the graph's nodes with their
 * source locations and the kernels that compute them, each pass's IR, and
 * the memory plan.
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
#include "daemon/explorer_internal.h"
#include "daemon/message.h"
#include "daemon/log.h"

#define DERIVED_BUDGET ((size_t)256 << 20)
#define PASS_MAX ((size_t)16 << 20)
#define C_MAX ((size_t)64 << 20)     /* generated C inflated at most */
#define C_INLINE ((size_t)256 << 10) /* C inside GET /api/programs/{key} */
#define STACK_MAX 4096               /* a node's stack trace as shown */
#define NODE_KERNELS 8               /* kernels listed per node */
#define LINES_MAX 5000               /* lines per page of a text */
#define BUFS_MAX 4000                /* buffers in the memory plan */
#define WAITERS 2                    /* requests waiting for a derivation */
#define WAIT_S 30                    /* ... at most this long */

static const char *const pass_names[] = {"graph",    "functionalize", "lower",
                                         "schedule", "plan",          "codegen",
                                         "program"};
#define NPASSES 7

typedef struct x_text {
  char *text; /* NULL: not derived */
  size_t len;
  size_t *line_at; /* offset of each line */
  int nlines;
  bool cut; /* over PASS_MAX */
} x_text;

typedef struct x_node {
  const char *text;   /* "%relu: float32[2, 16] = aten::relu(%addmm)" */
  const char *target; /* operator */
  const char *module; /* module path ("" if none) */
  const char *stack;  /* stack trace, cut at STACK_MAX ("" if none) */
  const char *file;   /* innermost frame of the stack trace, or NULL */
  int line;
  const char *func;
  const char *status; /* native, extern, fallback, folded, eager */
  const char *reason; /* why, for fallbacks (and a word for the others) */
  int kernels[NODE_KERNELS];
  int nkernels;
} x_node;

typedef struct x_kernel {
  const char *name;
  const char *kind; /* "loop", "call" (ATen, on the client), "library" */
  const char *what; /* the call's operator, or NULL */
  int *nodes;
  int nnodes;
  int line; /* 1-based line of its comment in the artifact's C; 0: none */
} x_kernel;

typedef struct x_buf {
  int id;
  int64_t offset, bytes;
  int first, last; /* live range, in kernels */
  const char *dtype;
  const char *shape;
  const char *value; /* the graph value it holds, or NULL */
  int share;         /* computed in place of buffer `share`; -1 */
} x_buf;

struct x_derived {
  x_derived *next;
  uint8_t key[GC_DIGEST_LEN];
  int refs;         /* under explorer.mu: the list's and readers' */
  size_t bytes;     /* what it holds */
  gc_arena *a;      /* owns everything below but the texts */
  char *error;      /* derivation stopped: why (the rest is partial) */
  const char *note; /* about the build or target it was derived with */
  bool functional;
  const char *eager_reason;
  x_text pass[NPASSES];
  x_text c; /* the artifact's C */
  x_node *nodes;
  int nnodes;
  x_kernel *kernels;
  int nkernels;
  x_buf *bufs;
  int nbufs;
  int64_t arena_bytes;
};

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

/* Lines [offset, offset + limit) of t as JSON. */
static json_t *text_page(const x_text *t, const char *name, int64_t offset,
                         int64_t limit) {
  json_t *lines = json_array();
  for (int64_t i = offset; i < t->nlines && i < offset + limit; i++) {
    size_t s = t->line_at[i], e = t->line_at[i + 1] - 1;
    json_array_append_new(lines, x_strn(t->text + s, e - s));
  }
  return json_pack("{s:s,s:i,s:I,s:b,s:o}", "name", name, "total_lines",
                   t->nlines, "offset", (json_int_t)offset, "cut", t->cut,
                   "lines", lines);
}

/* ---- the artifact ---- */

/* The artifact of `key`, unpacked with malloc (free with
 * compiled__v1__artifact__free_unpacked), or NULL with err set. */
static Compiled__V1__Artifact *load_artifact(cache_conn *conn,
                                             const uint8_t *key,
                                             cache_info *info, char *err,
                                             size_t errlen) {
  uint8_t *data = NULL;
  size_t len = 0;
  cache_error cerr;
  int rc = conn ? cache_peek(conn, key, &data, &len, info, &cerr) : CACHE_EIO;
  if (rc) {
    snprintf(err, errlen, "%s",
             rc == CACHE_EMISS ? "no such program in the cache"
             : conn            ? cerr.msg
                               : "no cache connection");
    return NULL;
  }
  Compiled__V1__Artifact *art = compiled__v1__artifact__unpack(NULL, len, data);
  free(data);
  if (!art)
    snprintf(err, errlen, "the cached artifact does not unpack");
  return art;
}

/* The generated C of a native program, inflated (malloc'd), or NULL. */
static char *inflate_source(const ProtobufCBinaryData *z, size_t *len) {
  if (!z->len)
    return NULL;
  z_stream s;
  memset(&s, 0, sizeof s);
  if (inflateInit(&s) != Z_OK)
    return NULL;
  size_t cap = z->len * 4 + 1024, n = 0;
  char *out = malloc(cap + 1);
  if (!out) {
    inflateEnd(&s);
    return NULL;
  }
  s.next_in = z->data;
  s.avail_in = (uInt)z->len;
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (n == cap) {
      if (cap >= C_MAX)
        break;
      cap = cap * 2 > C_MAX ? C_MAX : cap * 2;
      char *o = realloc(out, cap + 1);
      if (!o) {
        rc = Z_MEM_ERROR;
        break;
      }
      out = o;
    }
    s.next_out = (Bytef *)out + n;
    s.avail_out = (uInt)(cap - n);
    rc = inflate(&s, Z_NO_FLUSH);
    n = cap - s.avail_out;
  }
  inflateEnd(&s);
  if (rc != Z_STREAM_END && !(rc == Z_OK && n >= C_MAX)) {
    free(out);
    return NULL;
  }
  out[n] = '\0';
  *len = n;
  return out;
}

/* ---- the kept request ---- */

int xp_load_request(daemon_ctx *d, cache_conn *conn, gc_arena *a,
                    const uint8_t key[GC_DIGEST_LEN],
                    Compiled__V1__CompileRequest **req, char *err,
                    size_t errlen) {
  (void)d;
  uint8_t *data = NULL;
  size_t len = 0;
  cache_error cerr;
  int rc =
      conn ? cache_source_get(conn, key, &data, &len, NULL, &cerr) : CACHE_EIO;
  if (rc) {
    snprintf(err, errlen, "%s",
             rc == CACHE_EMISS
                 ? "the request of this program was not kept (compiled "
                   "before the explorer kept requests, over "
                   "--explorer-keep-max, dropped for --explorer-keep-bytes, "
                   "or kept off with --explorer-keep-bytes 0)"
             : conn ? cerr.msg
                    : "no cache connection");
    return rc;
  }
  ProtobufCAllocator al = gc_arena_pb_allocator(a);
  *req = compiled__v1__compile_request__unpack(&al, len, data);
  free(data);
  if (!*req || !(*req)->graph) {
    snprintf(err, errlen, "the kept request does not unpack");
    return CACHE_ECORRUPT;
  }
  return 0;
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
     * (pass_names from "lower" on); no C compiler */
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
      snprintf(msg, sizeof msg, "the %s pass failed: %s", pass_names[p],
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
  Compiled__V1__Artifact *art = load_artifact(conn, key, &info, why, whylen);
  if (!art) {
    *status = MHD_HTTP_NOT_FOUND;
    derived_free(v);
    memory_free_arena(d, a);
    return NULL;
  }
  if (art->native_program) {
    size_t len = 0;
    char *c = inflate_source(&art->native_program->source_zlib, &len);
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
static x_derived *acquire(daemon_ctx *d, const uint8_t *key, unsigned *status,
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

static void release(daemon_ctx *d, x_derived *v) {
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

/* ---- JSON of a view ---- */

static json_t *node_json(const x_derived *v, int i) {
  const x_node *n = &v->nodes[i];
  json_t *ks = json_array();
  for (int k = 0; k < n->nkernels; k++)
    json_array_append_new(ks, x_str(v->kernels[n->kernels[k]].name));
  json_t *loc = n->file ? json_pack("{s:o,s:i,s:o}", "file", x_str(n->file),
                                    "line", n->line, "function", x_str(n->func))
                        : json_null();
  return json_pack("{s:i,s:o,s:o,s:o,s:o,s:o,s:s,s:s,s:o}", "id", i, "text",
                   x_str(n->text), "target", x_str(n->target), "module",
                   x_str(n->module), "stack_trace", x_str(n->stack), "location",
                   loc, "status", n->status, "reason", n->reason, "kernels",
                   ks);
}

static json_t *kernel_json(const x_derived *v, int k) {
  const x_kernel *xk = &v->kernels[k];
  json_t *ns = json_array();
  for (int i = 0; i < xk->nnodes; i++)
    json_array_append_new(ns, json_integer(xk->nodes[i]));
  return json_pack("{s:i,s:o,s:s,s:o,s:o,s:o}", "index", k, "name",
                   x_str(xk->name), "kind", xk->kind, "what", x_str(xk->what),
                   "line", xk->line ? json_integer(xk->line) : json_null(),
                   "nodes", ns);
}

static bool page_args(struct MHD_Connection *conn, int64_t def, int64_t max,
                      int64_t *offset, int64_t *limit, json_t **err,
                      unsigned *status) {
  const char *bad = NULL;
  if (x_int_arg(conn, "offset", 0, 0, INT32_MAX, offset, &bad) &&
      x_int_arg(conn, "limit", def, 1, max, limit, &bad))
    return true;
  *status = MHD_HTTP_BAD_REQUEST;
  *err = x_error("bad_request",
                 "query parameter '%s' is out of range (limit: 1 to %lld)", bad,
                 (long long)max);
  return false;
}

static json_t *view_json(const x_derived *v, struct MHD_Connection *conn,
                         const char *rest, unsigned *status) {
  int64_t offset = 0, limit = 0;
  json_t *err = NULL;
  if (!strcmp(rest, "/graph")) {
    if (!page_args(conn, X_PAGE_DEFAULT, X_PAGE_MAX, &offset, &limit, &err,
                   status))
      return err;
    json_t *list = json_array();
    for (int64_t i = offset; i < v->nnodes && i < offset + limit; i++)
      json_array_append_new(list, node_json(v, (int)i));
    return json_pack("{s:i,s:I,s:I,s:b,s:o,s:o}", "total", v->nnodes, "offset",
                     (json_int_t)offset, "limit", (json_int_t)limit,
                     "functional", v->functional, "eager_reason",
                     x_str(v->eager_reason), "nodes", list);
  }
  if (!strcmp(rest, "/kernels")) {
    if (!page_args(conn, X_PAGE_MAX, 5000, &offset, &limit, &err, status))
      return err;
    json_t *list = json_array();
    for (int64_t k = offset; k < v->nkernels && k < offset + limit; k++)
      json_array_append_new(list, kernel_json(v, (int)k));
    return json_pack("{s:i,s:I,s:o}", "total", v->nkernels, "offset",
                     (json_int_t)offset, "kernels", list);
  }
  if (!strcmp(rest, "/fallbacks")) {
    json_t *list = json_array();
    for (int i = 0; i < v->nnodes && json_array_size(list) < X_PAGE_MAX; i++)
      if (!strcmp(v->nodes[i].status, "fallback"))
        json_array_append_new(list, node_json(v, i));
    return json_pack("{s:o}", "fallbacks", list);
  }
  if (!strcmp(rest, "/memory")) {
    json_t *list = json_array();
    /* the largest BUFS_MAX when there are more */
    int64_t min_bytes = 0;
    if (v->nbufs > BUFS_MAX) {
      int64_t *sz = malloc((size_t)v->nbufs * sizeof *sz);
      if (sz) {
        for (int i = 0; i < v->nbufs; i++)
          sz[i] = v->bufs[i].bytes;
        for (int i = 0; i < BUFS_MAX; i++) /* partial selection */
          for (int j = i + 1; j < v->nbufs; j++)
            if (sz[j] > sz[i]) {
              int64_t t = sz[i];
              sz[i] = sz[j];
              sz[j] = t;
            }
        min_bytes = sz[BUFS_MAX - 1];
        free(sz);
      }
    }
    for (int i = 0; i < v->nbufs && json_array_size(list) < BUFS_MAX; i++) {
      const x_buf *b = &v->bufs[i];
      if (b->bytes < min_bytes)
        continue;
      json_array_append_new(
          list,
          json_pack("{s:i,s:I,s:I,s:i,s:i,s:s,s:s,s:o,s:o}", "id", b->id,
                    "offset", (json_int_t)b->offset, "bytes",
                    (json_int_t)b->bytes, "first", b->first, "last", b->last,
                    "dtype", b->dtype, "shape", b->shape, "value",
                    x_str(b->value), "in_place_of",
                    b->share >= 0 ? json_integer(b->share) : json_null()));
    }
    return json_pack("{s:I,s:i,s:i,s:o}", "arena_bytes",
                     (json_int_t)v->arena_bytes, "kernels", v->nkernels,
                     "total_buffers", v->nbufs, "buffers", list);
  }
  if (!strcmp(rest, "/c")) {
    if (!v->c.text) {
      *status = MHD_HTTP_NOT_FOUND;
      return x_error("no_native_code",
                     "this program has no generated C (it runs as ATen "
                     "calls: see its diagnostics)");
    }
    if (!page_args(conn, 1000, LINES_MAX, &offset, &limit, &err, status))
      return err;
    return text_page(&v->c, "c", offset, limit);
  }
  if (!strncmp(rest, "/passes/", 8)) {
    for (int p = 0; p < NPASSES; p++) {
      if (strcmp(rest + 8, pass_names[p]))
        continue;
      if (!v->pass[p].text) {
        *status = MHD_HTTP_NOT_FOUND;
        return x_error("no_pass", "pass '%s' did not run for this program%s%s",
                       pass_names[p], v->error ? ": " : "",
                       v->error ? v->error : "");
      }
      if (!page_args(conn, 1000, LINES_MAX, &offset, &limit, &err, status))
        return err;
      return text_page(&v->pass[p], pass_names[p], offset, limit);
    }
  }
  *status = MHD_HTTP_NOT_FOUND;
  return x_error("not_found",
                 "no such part of a program (graph, kernels, fallbacks, "
                 "memory, c, passes/NAME, explain)");
}

/* ---- GET /api/programs/{key} ---- */

static json_t *summary_json(const Compiled__V1__NativeSummary *s) {
  json_t *ops = json_array();
  for (size_t i = 0; i < s->n_fallback_ops && i < 1000; i++)
    json_array_append_new(ops, x_str(s->fallback_ops[i]));
  return json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:o}", "nodes", s->nodes, "native",
                   s->native, "extern", s->extern_, "fallback", s->fallback,
                   "kernels", s->kernels, "local_buffers", s->local_buffers,
                   "fallback_ops", ops);
}

static json_t *request_json(const Compiled__V1__CompileRequest *r) {
  const Compiled__V1__GraphModule *gm = r->graph;
  const Compiled__V1__Graph *g = gm ? gm->graph : NULL;
  const Compiled__V1__CompileOptions *o = r->options;
  json_t *isa = json_array();
  for (size_t i = 0; r->target && i < r->target->n_isa && i < 256; i++)
    json_array_append_new(isa, x_str(r->target->isa[i]));
  return json_pack(
      "{s:o,s:o,s:o,s:I,s:I,s:{s:i,s:s,s:b,s:b,s:b},s:{s:o,s:o}}", "client",
      x_str(r->client), "torch_version", x_str(gm ? gm->torch_version : NULL),
      "producer", x_str(gm ? gm->producer : NULL), "nodes",
      (json_int_t)(g ? g->n_nodes : 0), "inputs",
      (json_int_t)(g ? g->n_inputs : 0), "options", "opt_level",
      o ? (int)o->opt_level : 0, "mode",
      o && o->mode == COMPILED__V1__MODE__MODE_TRAINING ? "training"
                                                        : "inference",
      "return_input_mutations", o && o->return_input_mutations,
      "separate_temporaries", o && o->separate_temporaries, "eager_random",
      o && o->eager_random, "target", "arch",
      x_str(r->target ? r->target->arch : NULL), "isa", isa);
}

static json_t *program_json(daemon_ctx *d, const uint8_t *key,
                            unsigned *status) {
  cache_conn *conn = daemon_conn(d);
  cache_info info;
  cache_error cerr;
  char why[600];
  if (!conn || cache_info_get(conn, key, &info, &cerr) != 0) {
    *status = MHD_HTTP_NOT_FOUND;
    return x_error("not_found", "no such program in the cache");
  }
  char *summary = NULL;
  cache_source_get(conn, key, NULL, NULL, &summary, &cerr);
  json_t *j = json_pack("{s:o,s:o}", "key", x_key(key), "entry",
                        x_entry(&info, summary));
  free(summary);
  json_t *parts = json_object();
  for (int p = 0; p < info.nparts; p++) {
    char hex[GC_HEX_LEN];
    gc_digest_hex(info.parts[p].digest, hex);
    json_object_set_new(parts, info.parts[p].name, json_string(hex));
  }
  json_object_set_new(j, "components", parts);
  cache_info peeked;
  Compiled__V1__Artifact *art =
      load_artifact(conn, key, &peeked, why, sizeof why);
  if (!art) {
    json_object_set_new(j, "artifact", x_error("artifact", "%s", why));
  } else {
    json_t *diags = json_array();
    for (size_t i = 0; i < art->n_diagnostics && i < 1000; i++) {
      const Compiled__V1__Diagnostic *dg = art->diagnostics[i];
      static const char *const sev[] = {"unknown", "info", "warning", "error"};
      json_array_append_new(
          diags,
          json_pack("{s:s,s:o,s:i}", "severity",
                    (unsigned)dg->severity < 4 ? sev[dg->severity] : "unknown",
                    "message", x_str(dg->message), "node", dg->node));
    }
    const Compiled__V1__Program *p = art->program;
    json_t *a = json_pack(
        "{s:s,s:o,s:b,s:o,s:{s:I,s:I,s:I,s:I,s:b,s:b}}", "version",
        art->version ? (art->version->major == 0 ? "0" : "1") : "?",
        "compiler_build_id", x_str(art->compiler_build_id), "this_build",
        art->compiler_build_id &&
            !strcmp(art->compiler_build_id, gc_build_id()),
        "diagnostics", diags, "program", "instructions",
        (json_int_t)(p ? p->n_instructions : 0), "values",
        (json_int_t)(p ? p->n_values : 0), "inputs",
        (json_int_t)(p ? p->n_inputs : 0), "outputs",
        (json_int_t)(p ? p->n_outputs : 0), "training", p && p->training,
        "functional", p && p->functional);
    if (art->version)
      json_object_set_new(
          a, "version",
          json_sprintf("%d.%d", art->version->major, art->version->minor));
    const Compiled__V1__NativeProgram *np = art->native_program;
    json_t *native = json_null();
    if (np) {
      size_t clen = 0;
      char *c = inflate_source(&np->source_zlib, &clen);
      json_t *libs = json_array();
      for (size_t i = 0; np->code && i < np->code->n_runtime_libraries; i++)
        json_array_append_new(libs, x_str(np->code->runtime_libraries[i]));
      native = json_pack(
          "{s:o,s:I,s:o,s:o,s:I,s:I}", "summary",
          np->summary ? summary_json(np->summary) : json_null(), "arena_bytes",
          (json_int_t)(np->memory_plan ? np->memory_plan->arena_bytes : 0),
          "target", x_str(np->code ? np->code->target : NULL),
          "runtime_libraries", libs, "shared_object_bytes",
          (json_int_t)(np->code ? np->code->shared_object.len : 0),
          "instructions", (json_int_t)np->n_instructions);
      if (c) {
        int lines = 0;
        for (size_t i = 0; i < clen; i++)
          lines += c[i] == '\n';
        bool cut = clen > C_INLINE;
        json_object_set_new(native, "c",
                            json_pack("{s:I,s:i,s:o,s:b}", "bytes",
                                      (json_int_t)clen, "lines", lines, "text",
                                      x_strn(c, cut ? C_INLINE : clen), "cut",
                                      cut));
        free(c);
      }
    }
    json_object_set_new(a, "native", native);
    json_object_set_new(j, "artifact", a);
    compiled__v1__artifact__free_unpacked(art, NULL);
  }
  /* the kept request: what the client sent */
  gc_arena *ra = memory_arena(d, SIZE_MAX);
  Compiled__V1__CompileRequest *req = NULL;
  if (ra && xp_load_request(d, conn, ra, key, &req, why, sizeof why) == 0)
    json_object_set_new(j, "request", request_json(req));
  else
    json_object_set_new(j, "request", json_null());
  json_object_set_new(j, "request_note",
                      req ? json_null() : x_str(ra ? why : "out of memory"));
  memory_free_arena(d, ra);
  char base[100];
  char hex[GC_HEX_LEN];
  gc_digest_hex(key, hex);
  snprintf(base, sizeof base, "/api/programs/%s", hex);
  json_t *passes = json_array();
  for (int p = 0; p < NPASSES; p++)
    json_array_append_new(
        passes, json_pack("{s:s,s:o}", "name", pass_names[p], "url",
                          json_sprintf("%s/passes/%s", base, pass_names[p])));
  json_object_set_new(j, "passes", passes);
  json_object_set_new(
      j, "links",
      json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "graph",
                json_sprintf("%s/graph", base), "kernels",
                json_sprintf("%s/kernels", base), "fallbacks",
                json_sprintf("%s/fallbacks", base), "memory",
                json_sprintf("%s/memory", base), "c",
                json_sprintf("%s/c", base), "explain",
                json_sprintf("%s/explain", base), "page",
                json_sprintf("/explorer/program.html?key=%s", hex)));
  return j;
}

json_t *xp_program(daemon_ctx *d, struct MHD_Connection *conn,
                   const uint8_t key[GC_DIGEST_LEN], const char *rest,
                   unsigned *status) {
  if (!*rest)
    return program_json(d, key, status);
  if (!strcmp(rest, "/explain"))
    return xm_explain(d, key, NULL, status);
  char why[600];
  x_derived *v = acquire(d, key, status, why, sizeof why);
  if (!v)
    return x_error(*status == MHD_HTTP_SERVICE_UNAVAILABLE ? "busy"
                                                           : "not_kept",
                   "%s", why);
  json_t *j;
  if (strcmp(rest, "/c") && !v->pass[0].text) { /* the request is missing */
    *status = MHD_HTTP_NOT_FOUND;
    j = x_error("not_kept", "%s", v->error ? v->error : "nothing derived");
  } else {
    j = view_json(v, conn, rest, status);
  }
  if (j && !json_object_get(j, "error")) {
    if (v->error)
      json_object_set_new(j, "derive_error", x_str(v->error));
    if (v->note)
      json_object_set_new(j, "derive_note", json_string(v->note));
  }
  release(d, v);
  return j;
}
