/*
 * admin.c: the cheap RPCs, answered on the completion-queue thread that
 * received them: Lookup, Fetch, Stats, List, Evict, Explain, and the
 * standard grpc.health.v1.Health/Check.
 *
 * Each handler unpacks its request into a small arena, asks the cache
 * through the thread's own connection, replies and drops the call.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiled/v1/health.pb-c.h"
#include "compiler/pipeline.h"
#include "compiler/wire.h"
#include "daemon/daemon.h"
#include "daemon/explorer.h"
#include "daemon/label.h"
#include "daemon/log.h"
#include "daemon/message.h"
#include "daemon/store.h"

#define FETCH_DEFAULT_CHUNK (1u << 20)
#define FETCH_MAX_CHUNK (3u << 20)
#define LIST_DEFAULT 100

/* Unpacks the request of `c` with descriptor `desc` into arena `a`; on
 * failure (bytes that are not the message, or a string field with a NUL or
 * not UTF-8, which unpacking would hide: compiler/wire.h) answers
 * INVALID_ARGUMENT and returns NULL. */
static void *unpack(srv_call *c, gc_arena *a,
                    const ProtobufCMessageDescriptor *desc) {
  size_t len;
  const uint8_t *bytes = srv_call_request(c, &len);
  ProtobufCAllocator al = gc_arena_pb_allocator(a);
  void *m = protobuf_c_message_unpack(desc, &al, len, bytes);
  gc_error err;
  gc_error_clear(&err);
  if (!m)
    gc_errorf(&err, GC_EMALFORMED,
              "request bytes are not a valid %s message (%zu bytes)",
              desc->name, len);
  else if (gc_wire_check_strings(desc, bytes, len, &err))
    m = NULL;
  if (!m)
    srv_finish(c, GRPC_STATUS_INVALID_ARGUMENT, err.msg);
  return m;
}

/* Logs one admin call; `detail` says what a state-changing call did. */
static void log_admin_detail(srv_call *c, const char *method, const char *key,
                             int status, const char *detail,
                             const char *error) {
  log_req r = {.method = method,
               .key = key,
               .outcome = status ? "error" : "ok",
               .status = status,
               .peer = srv_call_peer(c),
               .total_us = srv_call_age_us(c),
               .validate_us = -1,
               .key_us = -1,
               .queue_us = -1,
               .compile_us = -1,
               .detail = detail,
               .error = error};
  log_request(&r);
}

static void log_admin(srv_call *c, const char *method, const char *key,
                      int status, const char *error) {
  log_admin_detail(c, method, key, status, NULL, error);
}

/* Answers with an error status and logs it. */
static void fail(srv_call *c, const char *method, const char *key,
                 grpc_status_code code, const char *msg) {
  log_admin(c, method, key, code, msg);
  srv_finish(c, code, msg);
}

/* A key from hex, or an INVALID_ARGUMENT answer. */
static bool parse_key(srv_call *c, const char *method, const char *hex,
                      uint8_t key[GC_DIGEST_LEN]) {
  if (gc_digest_parse(hex, key) == 0)
    return true;
  char msg[200];
  snprintf(msg, sizeof msg, "key must be 64 hex digits, got '%.80s'", hex);
  fail(c, method, NULL, GRPC_STATUS_INVALID_ARGUMENT, msg);
  return false;
}

/* An EntryInfo from the store's metadata; strings go into `a`. */
static Compiled__V1__EntryInfo *entry_info(gc_arena *a, const cache_info *i) {
  Compiled__V1__EntryInfo *e = gc_arena_zalloc(a, sizeof *e);
  Compiled__V1__KeyComponents *kc = gc_arena_zalloc(a, sizeof *kc);
  char *hex = gc_arena_alloc(a, (size_t)(2 + CACHE_MAX_PARTS) * GC_HEX_LEN);
  if (!e || !kc || !hex)
    return NULL;
  compiled__v1__entry_info__init(e);
  compiled__v1__key_components__init(kc);
  gc_digest_hex(i->key, hex);
  e->key = hex;
  gc_digest_hex(i->digest, hex + GC_HEX_LEN);
  e->digest = hex + GC_HEX_LEN;
  for (int p = 0; p < i->nparts; p++) {
    char *h = hex + (2 + p) * GC_HEX_LEN;
    gc_digest_hex(i->parts[p].digest, h);
    const char *n = i->parts[p].name;
    if (!strcmp(n, "graph"))
      kc->graph = h;
    else if (!strcmp(n, "inputs"))
      kc->inputs = h;
    else if (!strcmp(n, "options"))
      kc->options = h;
    else if (!strcmp(n, "target"))
      kc->target = h;
    else if (!strcmp(n, "compiler"))
      kc->compiler = h;
    else if (!strcmp(n, "schema"))
      kc->schema = h;
  }
  e->components = kc;
  e->size = i->size;
  e->stored_size = i->stored_size;
  e->compile_micros = (int64_t)i->compile_us;
  e->created = i->created;
  e->last_used = i->last_used;
  e->hits = i->hits;
  e->label = label_message(a, &i->label); /* NULL: none stored */
  return e;
}

/* ---- Lookup ---- */

static void handle_lookup(srv_call *c) {
  daemon_ctx *d = srv_call_user(c);
  gc_arena *a = gc_arena_new(1 << 20);
  Compiled__V1__LookupRequest *req =
      a ? unpack(c, a, &compiled__v1__lookup_request__descriptor) : NULL;
  uint8_t key[GC_DIGEST_LEN];
  cache_conn *conn = daemon_conn(d);
  if (!req || !parse_key(c, "Lookup", req->key, key))
    goto out;
  if (!conn) {
    fail(c, "Lookup", req->key, GRPC_STATUS_UNAVAILABLE, "cache unavailable");
    goto out;
  }
  Compiled__V1__LookupResponse resp;
  compiled__v1__lookup_response__init(&resp);
  cache_info info;
  cache_error cerr;
  uint8_t *data = NULL;
  size_t len = 0;
  int rc;
  if (req->include_artifact) {
    store_entry e;
    rc = store_get(d, conn, key, NULL, req->key, &e, &info, &cerr);
    if (rc == STORE_UNTRUSTED)
      rc = CACHE_EMISS;
    data = e.data;
    len = e.len;
    if (rc == 0) {
      uint64_t limit = req->max_inline_bytes ? req->max_inline_bytes
                                             : d->cfg.max_inline_bytes;
      if (len <= limit) {
        resp.artifact.data = data;
        resp.artifact.len = len;
        resp.artifact_inline = 1;
      }
    }
  } else {
    rc = cache_info_get(conn, key, &info, &cerr);
  }
  if (rc == 0) {
    resp.found = 1;
    resp.entry = entry_info(a, &info);
  } else if (rc != CACHE_EMISS && rc != CACHE_ECORRUPT) {
    free(data);
    fail(c, "Lookup", req->key, GRPC_STATUS_INTERNAL, cerr.msg);
    goto out;
  }
  log_admin(c, "Lookup", req->key, 0, NULL);
  srv_reply(c, rpc_pack(&resp.base));
  free(data);
out:
  gc_arena_free(a);
  srv_call_unref(c);
}

/* ---- Fetch ---- */

static void handle_fetch(srv_call *c) {
  daemon_ctx *d = srv_call_user(c);
  gc_arena *a = gc_arena_new(1 << 20);
  Compiled__V1__FetchRequest *req =
      a ? unpack(c, a, &compiled__v1__fetch_request__descriptor) : NULL;
  uint8_t key[GC_DIGEST_LEN];
  cache_conn *conn = daemon_conn(d);
  if (!req || !parse_key(c, "Fetch", req->key, key))
    goto out;
  store_entry e;
  cache_error cerr;
  int rc = store_get(d, conn, key, NULL, req->key, &e, NULL, &cerr);
  if (rc == STORE_UNTRUSTED)
    rc = CACHE_ECORRUPT;
  if (rc == CACHE_EMISS || rc == CACHE_ECORRUPT) {
    fail(c, "Fetch", req->key, GRPC_STATUS_NOT_FOUND,
         rc == CACHE_EMISS ? "no such key in the cache"
                           : "the entry was corrupt and has been dropped");
    goto out;
  }
  if (rc) {
    fail(c, "Fetch", req->key, GRPC_STATUS_INTERNAL,
         conn ? cerr.msg : "no cache");
    goto out;
  }
  /* A hit like a Compile's (the client's graph memo fetches by key
   * without one): counted here; the cache counted it and queued its touch
   * (hit count, last use) in store_get. */
  atomic_fetch_add(&d->stats.hits, 1);
  atomic_fetch_add(&d->stats.saved_us, (uint64_t)e.compile_us);
  size_t chunk = req->chunk_bytes ? req->chunk_bytes : FETCH_DEFAULT_CHUNK;
  if (chunk > FETCH_MAX_CHUNK)
    chunk = FETCH_MAX_CHUNK;
  if (chunk < 4096)
    chunk = 4096;
  char digest[GC_HEX_LEN];
  gc_digest_hex(e.digest, digest);
  size_t off = 0;
  do {
    Compiled__V1__FetchChunk ch;
    compiled__v1__fetch_chunk__init(&ch);
    size_t n = e.len - off < chunk ? e.len - off : chunk;
    ch.offset = off;
    ch.data.data = e.data + off;
    ch.data.len = n;
    ch.total_size = e.len;
    if (off == 0)
      ch.digest = digest;
    srv_send_msg(c, &ch.base);
    off += n;
  } while (off < e.len);
  log_admin(c, "Fetch", req->key, 0, NULL);
  srv_finish(c, GRPC_STATUS_OK, "");
  free(e.data);
out:
  gc_arena_free(a);
  srv_call_unref(c);
}

/* ---- Stats ---- */

static void handle_stats(srv_call *c) {
  daemon_ctx *d = srv_call_user(c);
  gc_arena *a = gc_arena_new(1 << 16);
  /* StatsRequest is empty, but bytes that are not one are an error. */
  if (!a || !unpack(c, a, &compiled__v1__stats_request__descriptor)) {
    if (!a)
      srv_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    gc_arena_free(a);
    srv_call_unref(c);
    return;
  }
  gc_arena_free(a);
  cache_stats cs;
  cache_stats_get(d->cache, &cs);
  Compiled__V1__StatsResponse r;
  compiled__v1__stats_response__init(&r);
  r.unauthenticated = atomic_load(&d->stats.unauthenticated);
  r.permission_denied = atomic_load(&d->stats.permission_denied);
  r.tokens = d->auth ? (uint32_t)auth_count(d->auth) : 0;
  r.signature_failures = atomic_load(&d->stats.signature_failures);
  r.redis_configured = d->l2 != NULL;
  r.redis_up = d->l2 && l2_up(d->l2);
  r.redis_errors = d->l2 ? l2_errors(d->l2) : 0;
  r.l2_hits = atomic_load(&d->stats.l2_hits);
  r.l2_puts = atomic_load(&d->stats.l2_puts);
  r.lease_waits = atomic_load(&d->stats.lease_waits);
  r.lease_takeovers = atomic_load(&d->stats.lease_takeovers);
  r.rejected_client = srv_client_rejections(d->server);
  r.hits = atomic_load(&d->stats.hits);
  r.misses = atomic_load(&d->stats.misses);
  r.joins = atomic_load(&d->stats.joins);
  r.compiles = atomic_load(&d->stats.compiles);
  r.compile_failures = atomic_load(&d->stats.compile_failures);
  r.native_compiles = atomic_load(&d->stats.native_compiles);
  r.native_failures = atomic_load(&d->stats.native_failures);
  r.failures_cached_hits = atomic_load(&d->stats.failure_hits);
  r.rejected_busy = atomic_load(&d->stats.rejected_busy);
  r.requests = atomic_load(&d->stats.requests);
  r.queued = (uint32_t)atomic_load(&d->stats.queued);
  r.running = (uint32_t)atomic_load(&d->stats.running);
  r.workers = (uint32_t)d->cfg.workers;
  r.evictions = cs.evictions + atomic_load(&d->stats.evicted);
  r.corrupt_dropped = cs.corrupt_dropped;
  r.entries = cs.entries;
  r.bytes = cs.bytes;
  r.raw_bytes = cs.raw_bytes;
  r.compile_micros_saved = (int64_t)atomic_load(&d->stats.saved_us);
  r.uptime_seconds = (int64_t)time(NULL) - d->started_unix;
  r.hot_hits = atomic_load(&d->stats.hot_hits);
  r.memo_hits = atomic_load(&d->stats.memo_hits);
  r.hot_bytes = d->hot.bytes;
  lsn_stats ls;
  srv_conn_stats(d->server, &ls);
  r.connections = (uint32_t)ls.connections;
  r.max_connections = (uint32_t)ls.max_connections;
  r.connections_refused = ls.refused_cap + ls.refused_no_fds;
  r.memory_budget = d->cfg.memory_budget;
  r.memory_in_use = gc_budget_used(&d->budget);
  r.rejected_memory = atomic_load(&d->stats.rejected_memory);
  r.version = DAEMON_VERSION;
  r.build_id = (char *)gc_build_id();
  srv_reply(c, rpc_pack(&r.base));
  srv_call_unref(c);
}

/* ---- List ---- */

typedef struct list_ctx {
  gc_arena *a;
  Compiled__V1__EntryInfo **items;
  size_t n, cap;
} list_ctx;

static int list_one(const cache_info *info, void *arg) {
  list_ctx *l = arg;
  if (l->n == l->cap)
    return 1;
  l->items[l->n] = entry_info(l->a, info);
  return l->items[l->n++] ? 0 : 1;
}

static void handle_list(srv_call *c) {
  daemon_ctx *d = srv_call_user(c);
  if (!daemon_allow(d, c, AUTH_ADMIN, "listing the cache"))
    return;
  gc_arena *a = gc_arena_new(0);
  Compiled__V1__ListRequest *req =
      a ? unpack(c, a, &compiled__v1__list_request__descriptor) : NULL;
  cache_conn *conn = daemon_conn(d);
  if (!req)
    goto out;
  uint32_t limit = req->limit ? req->limit : LIST_DEFAULT;
  if (limit > 100000)
    limit = 100000;
  list_ctx l = {.a = a, .cap = limit};
  l.items = gc_arena_calloc(a, limit + 1, sizeof *l.items);
  cache_error cerr;
  if (!conn || !l.items ||
      cache_list(conn, (int)limit, list_one, &l, &cerr) != 0) {
    fail(c, "List", NULL, GRPC_STATUS_INTERNAL, conn ? cerr.msg : "no cache");
    goto out;
  }
  Compiled__V1__ListResponse resp;
  compiled__v1__list_response__init(&resp);
  resp.n_entries = l.n;
  resp.entries = l.items;
  srv_reply(c, rpc_pack(&resp.base));
out:
  gc_arena_free(a);
  srv_call_unref(c);
}

/* ---- Evict ---- */

static void handle_evict(srv_call *c) {
  daemon_ctx *d = srv_call_user(c);
  if (!daemon_allow(d, c, AUTH_ADMIN, "evicting"))
    return;
  gc_arena *a = gc_arena_new(1 << 20);
  Compiled__V1__EvictRequest *req =
      a ? unpack(c, a, &compiled__v1__evict_request__descriptor) : NULL;
  cache_conn *conn = daemon_conn(d);
  if (!req)
    goto out;
  Compiled__V1__EvictResponse resp;
  compiled__v1__evict_response__init(&resp);
  cache_error cerr;
  int rc = CACHE_EIO;
  uint64_t count = 0, freed = 0;
  char what[128];
  switch (req->what_case) {
  case COMPILED__V1__EVICT_REQUEST__WHAT_KEY: {
    uint8_t key[GC_DIGEST_LEN];
    if (!parse_key(c, "Evict", req->key, key))
      goto out;
    rc = store_forget(d, conn, key, &freed, &cerr);
    if (rc == 0)
      count = 1;
    if (rc == CACHE_EMISS)
      rc = 0;
    snprintf(what, sizeof what, "key");
    break;
  }
  case COMPILED__V1__EVICT_REQUEST__WHAT_ALL:
    store_forget_hot(d, NULL);
    rc = conn ? cache_evict_older(conn, INT64_MAX, &count, &freed, &cerr)
              : CACHE_EIO;
    snprintf(what, sizeof what, "all");
    break;
  case COMPILED__V1__EVICT_REQUEST__WHAT_OLDER_THAN_SECONDS:
    store_forget_hot(d, NULL);

    if (req->older_than_seconds < 0) {
      fail(c, "Evict", NULL, GRPC_STATUS_INVALID_ARGUMENT,
           "older_than_seconds must not be negative");
      goto out;
    }
    rc = conn ? cache_evict_older(conn,
                                  (int64_t)time(NULL) - req->older_than_seconds,
                                  &count, &freed, &cerr)
              : CACHE_EIO;
    snprintf(what, sizeof what, "older than %" PRId64 "s",
             req->older_than_seconds);
    break;
  default:
    fail(c, "Evict", NULL, GRPC_STATUS_INVALID_ARGUMENT,
         "EvictRequest needs one of key, all, older_than_seconds");
    goto out;
  }
  if (rc) {
    fail(c, "Evict", NULL, GRPC_STATUS_INTERNAL, conn ? cerr.msg : "no cache");
    goto out;
  }
  atomic_fetch_add(&d->stats.evicted, count);
  resp.evicted = count;
  resp.bytes_freed = freed;

  char detail[200];
  snprintf(detail, sizeof detail,
           "%s: %" PRIu64 " entries, %" PRIu64 " bytes freed", what, count,
           freed);
  log_admin_detail(
      c, "Evict",
      req->what_case == COMPILED__V1__EVICT_REQUEST__WHAT_KEY ? req->key : NULL,
      0, detail, NULL);
  srv_reply(c, rpc_pack(&resp.base));
out:
  gc_arena_free(a);
  srv_call_unref(c);
}

/* ---- Explain ---- */

static void handle_explain(srv_call *c) {
  daemon_ctx *d = srv_call_user(c);
  /* Charged to the memory budget like a Compile request's. */
  gc_arena *a = memory_arena(d, srv_call_request_len(c));
  Compiled__V1__ExplainRequest *req =
      a ? unpack(c, a, &compiled__v1__explain_request__descriptor) : NULL;
  cache_conn *conn = daemon_conn(d);
  if (!req)
    goto out;
  if (!req->graph) {
    fail(c, "Explain", NULL, GRPC_STATUS_INVALID_ARGUMENT,
         "ExplainRequest has no graph");
    goto out;
  }
  gc_options o;
  gc_options_default(&o);
  if (req->options) {
    if (req->options->opt_level > 0 && req->options->opt_level <= 4)
      o.opt_level = (int)req->options->opt_level - 1;
    o.training = req->options->mode == COMPILED__V1__MODE__MODE_TRAINING;
    o.keep_input_mutations = !req->options->return_input_mutations;
    o.separate_temporaries = req->options->separate_temporaries;
    o.eager_random = req->options->eager_random;
  }
  gc_target t;
  gc_graph *g;
  gc_key key;
  gc_error err;
  gc_error_clear(&err);
  int rc = daemon_read_target(d, a, req->target, &t, &err);
  if (!rc)
    rc = gc_prepare(a, req->graph, &d->limits, &o, &t, &g, &key, NULL, &err);
  if (rc) {
    memory_explain(d, a, srv_call_request_len(c), rc, &err);
    log_admin(c, "Explain", NULL, GRPC_STATUS_INVALID_ARGUMENT, err.msg);
    daemon_finish_graph_error(c, rc, &err);
    goto out;
  }

  Compiled__V1__ExplainResponse resp;
  Compiled__V1__KeyComponents kc;
  compiled__v1__explain_response__init(&resp);
  compiled__v1__key_components__init(&kc);
  char hex[GC_HEX_LEN], comp_hex[GC_KEY_NCOMPONENTS * GC_HEX_LEN];
  gc_digest_hex(key.key, hex);
  daemon_components(key.part, &kc, comp_hex);
  resp.key = hex;
  resp.components = &kc;
  cache_info info;
  cache_error cerr;
  char summary[1024];
  const char *names[GC_KEY_NCOMPONENTS];
  if (conn && cache_info_get(conn, key.key, &info, &cerr) == 0) {
    resp.cached = 1;
    resp.has_nearest = 1;
    resp.nearest = entry_info(a, &info);
    snprintf(summary, sizeof summary, "hit: %.16s is cached", hex);
  } else {
    cache_info best;
    bool by_ops;
    /* the request as a CompileRequest, to itemize against the nearest
     * program's kept one (explorer_miss.c) */
    Compiled__V1__CompileRequest as = COMPILED__V1__COMPILE_REQUEST__INIT;
    as.graph = req->graph;
    as.options = req->options;
    as.target = req->target;
    int n = explorer_explain_miss(d, conn, a, &key, &as, &best, names, &by_ops,
                                  &resp.differences, &resp.n_differences);
    if (n >= 0) {
      resp.has_nearest = 1;
      resp.nearest = entry_info(a, &best);
      resp.n_differing = (size_t)n;
      resp.differing = (char **)names;
      size_t used = (size_t)snprintf(
          summary, sizeof summary, "miss: same %s as cached %.16s; differs in:",
          by_ops ? "operators" : "graph",
          resp.nearest ? resp.nearest->key : "?");
      for (int i = 0; i < n && used < sizeof summary; i++)
        used += (size_t)snprintf(summary + used, sizeof summary - used, "%s %s",
                                 i ? "," : "", names[i]);
      if (resp.n_differences && used < sizeof summary)
        snprintf(summary + used, sizeof summary - used, " (%s%s)",
                 resp.differences[0],
                 resp.n_differences > 1 ? "; and more" : "");
    } else {
      snprintf(summary, sizeof summary,
               "miss: no cached entry has this graph structure");
    }
  }
  resp.summary = summary;
  log_admin(c, "Explain", hex, 0, NULL);
  srv_reply(c, rpc_pack(&resp.base));
out:
  gc_arena_free(a);
  srv_call_unref(c);
}

/* ---- grpc.health.v1.Health/Check ---- */

/* ---- authentication (auth.h) ---- */

#define HEALTH_PATH "/grpc.health.v1.Health/Check"

int daemon_auth(void *user, const char *method, const char *value, size_t len,
                char *who, size_t wholen) {
  daemon_ctx *d = user;
  if (!d->auth)
    return AUTH_ADMIN;
  if (method && !strcmp(method, HEALTH_PATH))
    return AUTH_READ; /* load balancers probe without credentials */
  auth_role r = auth_check(d->auth, value, len, who, wholen);
  if (r == AUTH_NONE)
    atomic_fetch_add(&d->stats.unauthenticated, 1);
  return r;
}

bool daemon_allow(daemon_ctx *d, srv_call *c, auth_role need,
                  const char *what) {
  auth_role have = (auth_role)srv_call_role(c);
  if (have >= need)
    return true;
  atomic_fetch_add(&d->stats.permission_denied, 1);
  char msg[256];
  snprintf(msg, sizeof msg,
           "%s needs a token with role '%s'; token '%s' has role '%s'", what,
           auth_role_name(need), srv_call_who(c), auth_role_name(have));
  LOG(LOG_WARN, "refused %s from %s: %s", srv_call_method(c), srv_call_peer(c),
      msg);
  srv_finish(c, GRPC_STATUS_PERMISSION_DENIED, msg);
  srv_call_unref(c);
  return false;
}

static void handle_health(srv_call *c) {
  daemon_ctx *d = srv_call_user(c);
  gc_arena *a = gc_arena_new(1 << 16);
  Grpc__Health__V1__HealthCheckRequest *req =
      a ? unpack(c, a, &grpc__health__v1__health_check_request__descriptor)
        : NULL;
  if (!req)
    goto out;
  if (*req->service && strcmp(req->service, "compiled.v1.Compiler") != 0) {
    srv_finish(c, GRPC_STATUS_NOT_FOUND, "unknown service");
    goto out;
  }
  Grpc__Health__V1__HealthCheckResponse resp;
  grpc__health__v1__health_check_response__init(&resp);
  resp.status =
      atomic_load(&d->draining)
          ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
          : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  srv_reply(c, rpc_pack(&resp.base));
out:
  gc_arena_free(a);
  srv_call_unref(c);
}

void admin_register(daemon_ctx *d) {
  srv_add_method(d->server, "/compiled.v1.Compiler/Lookup", handle_lookup);
  srv_add_method(d->server, "/compiled.v1.Compiler/Fetch", handle_fetch);
  srv_add_method(d->server, "/compiled.v1.Compiler/Stats", handle_stats);
  srv_add_method(d->server, "/compiled.v1.Compiler/List", handle_list);
  srv_add_method(d->server, "/compiled.v1.Compiler/Evict", handle_evict);
  srv_add_method(d->server, "/compiled.v1.Compiler/Explain", handle_explain);
  srv_add_method(d->server, HEALTH_PATH, handle_health);
}
