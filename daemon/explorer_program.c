/*
 * explorer_program.c: one cached program in the explorer: its summary
 * from the artifact, its generated C, and what is derived again from the
 * request kept beside it (cache/explore.h): the graph's nodes with their
 * source locations and the kernels that compute them, each pass's IR, and
 * the memory plan (derived by explorer_derive.c).
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

#define C_INLINE ((size_t)256 << 10) /* C inside GET /api/programs/{key} */
#define LINES_MAX 5000               /* lines per page of a text */
#define BUFS_MAX 4000                /* buffers in the memory plan */

/* ---- texts ---- */

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
Compiled__V1__Artifact *xp_load_artifact(cache_conn *conn, const uint8_t *key,
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
char *xp_inflate_source(const ProtobufCBinaryData *z, size_t *len) {
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
      if (strcmp(rest + 8, xd_pass_names[p]))
        continue;
      if (!v->pass[p].text) {
        *status = MHD_HTTP_NOT_FOUND;
        return x_error("no_pass", "pass '%s' did not run for this program%s%s",
                       xd_pass_names[p], v->error ? ": " : "",
                       v->error ? v->error : "");
      }
      if (!page_args(conn, 1000, LINES_MAX, &offset, &limit, &err, status))
        return err;
      return text_page(&v->pass[p], xd_pass_names[p], offset, limit);
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
      xp_load_artifact(conn, key, &peeked, why, sizeof why);
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
      char *c = xp_inflate_source(&np->source_zlib, &clen);
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
        passes,
        json_pack("{s:s,s:o}", "name", xd_pass_names[p], "url",
                  json_sprintf("%s/passes/%s", base, xd_pass_names[p])));
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
  x_derived *v = xd_acquire(d, key, status, why, sizeof why);
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
  xd_release(d, v);
  return j;
}
