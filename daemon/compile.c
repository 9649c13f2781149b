/*
 * compile.c: the Compile RPC: cache hits, single-flight compiles, workers.
 *
 * A request goes through three places:
 *
 *   completion-queue thread   unpack, validate, compute the key; answer a
 *                             cache hit or a remembered failure right there
 *   loop                      a miss joins the flight for its key, or starts
 *                             one; flights wait in a FIFO for a worker
 *                             (RESOURCE_EXHAUSTED when the FIFO is full)
 *   worker (libuv pool)       look in the cache again (another daemon
 *                             thread may have stored it meanwhile), compile,
 *                             store; stage events and the result are posted
 *                             back to the loop, which fans them out
 *
 * Single flight: every concurrent request for one key waits on one flight
 * and gets its result. A waiter whose call ends early (cancel, deadline)
 * leaves the flight; a flight with no waiters left is dropped from the
 * queue, or, if running, told to stop at the next stage boundary.
 *
 * Ordering: stage events and the final "done" are posted from the worker in
 * order through one queue, so waiters see stages before the result. A flight
 * is freed when both the loop (after delivering) and libuv (after the work
 * request's after-callback) are done with it.
 */
#include <grpc/support/time.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiled/v1/artifact.pb-c.h"
#include "compiler/native.h"
#include "compiler/pipeline.h"
#include "compiler/wire.h"
#include "daemon/daemon.h"
#include "daemon/label.h"
#include "daemon/explorer.h"
#include "daemon/log.h"

#define COMPILE_PATH "/compiled.v1.Compiler/Compile"

typedef struct waiter {
  srv_call *call;
  uint64_t max_inline;
  bool owner; /* created the flight */
  int64_t validate_us, key_us;
  struct waiter *next;
} waiter;

typedef enum { F_QUEUED, F_RUNNING, F_DONE } flight_state;

struct flight {
  daemon_ctx *d;
  uint8_t key[GC_DIGEST_LEN];
  char hex[GC_HEX_LEN];
  gc_key fullkey;
  gc_arena *arena; /* the job's: request, graph, everything */
  size_t len;      /* bytes of the request that made the flight */
  gc_graph *graph;
  gc_options opts;
  gc_target target; /* what native code is built for */
  bool force;
  waiter *waiters;
  flight_state state;
  flight *next;    /* d->flights */
  flight *qnext;   /* d->queue_* FIFO */
  atomic_int refs; /* the list, the work request, posted events */
  int64_t queued_at, started_at;
  atomic_bool abandoned;
  /* written by the worker before it posts "done" */
  int rc;
  gc_error err;
  gc_compiled out; /* artifact and timings */
  bool from_cache; /* found in the cache by the worker */
  bool stored;
  uint8_t digest[GC_DIGEST_LEN];
  bool is_signed; /* sig holds the artifact's signature */
  cache_sig sig;
  bool from_l2;           /* found in Redis */
  size_t l2_charged;      /* of the memory budget, for out.artifact (l2.h) */
  atomic_bool no_compile; /* every waiter has a read-only token: Redis only */
  bool denied;            /* ... and it was not there */
  bool lease;             /* this daemon holds the cluster's lease */
  int64_t lease_renewed;  /* when (monotonic us) */
  cache_label label;      /* the owner's: stored with the entry */
  const Compiled__V1__CompileRequest *msg; /* the request (in the arena) */
};

/* A request between the completion-queue thread and the loop. */
typedef struct request {
  daemon_ctx *d;
  srv_call *call;
  size_t len;     /* request bytes */
  size_t charged; /* of them, still charged to the memory budget */
  uint8_t digest[GC_DIGEST_LEN]; /* of the bytes, for the request memo */
  gc_arena *arena;
  gc_graph *graph;
  gc_key key;
  char hex[GC_HEX_LEN];
  gc_options opts;
  gc_target target; /* the client's (strings in the arena or the daemon's) */
  bool force;
  uint64_t max_inline;
  gc_compiled prep;  /* validate/key timings */
  cache_label label; /* what the client calls the graph (label.h) */
  /* the request as unpacked (in the arena), kept beside the entry for the
   * explorer */
  const Compiled__V1__CompileRequest *msg;
} request;

void daemon_components(const uint8_t parts[][GC_DIGEST_LEN],
                       Compiled__V1__KeyComponents *kc, char *hex) {
  char *h[GC_KEY_NCOMPONENTS];
  for (int i = 0; i < GC_KEY_NCOMPONENTS; i++) {
    h[i] = hex + i * GC_HEX_LEN;
    gc_digest_hex(parts[i], h[i]);
  }
  kc->graph = h[GC_KEY_GRAPH];
  kc->inputs = h[GC_KEY_INPUTS];
  kc->options = h[GC_KEY_OPTIONS];
  kc->target = h[GC_KEY_TARGET];
  kc->compiler = h[GC_KEY_COMPILER];
  kc->schema = h[GC_KEY_SCHEMA];
}

static grpc_status_code status_of(int gc_code) {
  switch (gc_code) {
  case GC_EMALFORMED:
  case GC_EVERSION:
  case GC_EINVAL:
  case GC_ELIMIT:
  case GC_ESCHEMA:
  case GC_EJSON:
    return GRPC_STATUS_INVALID_ARGUMENT;
  case GC_ENOMEM:
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  case GC_EUNSUPPORTED:
    return GRPC_STATUS_UNIMPLEMENTED;
  case GC_ECANCELED:
    return GRPC_STATUS_CANCELLED;
  default:
    return GRPC_STATUS_INTERNAL;
  }
}

/* Ends a call with a graph error: status, message, and the details as a
 * GraphError in the "compiled-error-bin" trailer. */
void daemon_finish_graph_error(srv_call *c, int code, const gc_error *err) {
  Compiled__V1__GraphError ge;
  compiled__v1__graph_error__init(&ge);
  ge.message = (char *)err->msg;
  ge.node = err->node;
  ge.argument = (char *)err->arg;
  ge.code = (char *)gc_errname(code);
  srv_finish_bin(c, status_of(code), err->msg, RPC_GRAPH_ERROR_KEY, &ge.base);
}

/* Logs a Compile request's end, and records it for the explorer with its
 * key's components (`key`, may be NULL) and its compile's stages (`out`,
 * may be NULL). */
static void log_done_ex(srv_call *c, const char *hex, const gc_key *key,
                        const gc_compiled *out, const char *outcome, int status,
                        int64_t validate_us, int64_t key_us, int64_t queue_us,
                        int64_t compile_us, uint64_t bytes, const char *error) {
  daemon_ctx *d = srv_call_user(c);
  recent_req rr;
  memset(&rr, 0, sizeof rr);
  snprintf(rr.peer, sizeof rr.peer, "%s",
           srv_call_peer(c) ? srv_call_peer(c) : "");
  snprintf(rr.who, sizeof rr.who, "%s", d->auth ? srv_call_who(c) : "");
  rr.has_key = hex && gc_digest_parse(hex, rr.key) == 0;
  if (key) {
    rr.has_parts = true;
    memcpy(rr.parts, key->part, sizeof rr.parts);
  }
  snprintf(rr.outcome, sizeof rr.outcome, "%s", outcome);
  rr.status = status;
  rr.total_us = srv_call_age_us(c);
  rr.validate_us = validate_us;
  rr.key_us = key_us;
  rr.queue_us = queue_us;
  rr.compile_us = compile_us;
  rr.bytes = bytes;
  for (int i = 0; out && i < out->ntimings && i < RECENT_STAGES; i++) {
    rr.stages[i].name = out->timings[i].stage;
    rr.stages[i].micros = out->timings[i].micros;
    rr.nstages = i + 1;
  }
  snprintf(rr.error, sizeof rr.error, "%s", error ? error : "");
  recent_add(&d->recent, &rr);

  log_req r = {.method = "Compile",
               .key = hex,
               .outcome = outcome,
               .status = status,
               .peer = srv_call_peer(c),
               .total_us = srv_call_age_us(c),
               .validate_us = validate_us,
               .key_us = key_us,
               .queue_us = queue_us,
               .compile_us = compile_us,
               .bytes = bytes,
               .error = error};
  log_request(&r);
}

static void log_done(srv_call *c, const char *hex, const char *outcome,
                     int status, int64_t validate_us, int64_t key_us,
                     int64_t queue_us, int64_t compile_us, uint64_t bytes,
                     const char *error) {
  log_done_ex(c, hex, NULL, NULL, outcome, status, validate_us, key_us,
              queue_us, compile_us, bytes, error);
}

static void sha256(const uint8_t *data, size_t len,
                   uint8_t out[GC_DIGEST_LEN]) {
  unsigned int n = 0;
  EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

/* Everything a result message needs. */
typedef struct result {
  const char *hex;
  const gc_key *key;
  Compiled__V1__Served served;
  const uint8_t *artifact;
  size_t len;
  const uint8_t *digest;
  const cache_sig *sig; /* NULL: unsigned */
  bool must_inline;     /* not in the cache: Fetch could not serve it */
  uint64_t max_inline;
  int64_t compile_us;
  const gc_timing *timings;
  int ntimings;
} result;

/* Packs a CompileEvent holding the result into a new slice. */
static grpc_slice pack_result(const result *r) {
  Compiled__V1__CompileResult res;
  Compiled__V1__KeyComponents kc;
  Compiled__V1__CompileEvent ev;
  char comp_hex[GC_KEY_NCOMPONENTS * GC_HEX_LEN], digest_hex[GC_HEX_LEN];
  char sig_hex[GC_HEX_LEN];
  compiled__v1__compile_result__init(&res);
  compiled__v1__key_components__init(&kc);
  compiled__v1__compile_event__init(&ev);
  daemon_components(r->key->part, &kc, comp_hex);
  gc_digest_hex(r->digest, digest_hex);
  res.key = (char *)r->hex;
  res.components = &kc;
  res.served = r->served;
  res.artifact_size = r->len;
  res.artifact_digest = digest_hex;
  res.compile_micros = r->compile_us;
  if (r->sig) {
    gc_digest_hex(r->sig->mac, sig_hex);
    res.signature = sig_hex;
    res.signature_key = (char *)r->sig->key_id;
  }
  if (r->must_inline || r->len <= r->max_inline) {
    res.artifact_inline = 1;
    res.artifact.data = (uint8_t *)r->artifact;
    res.artifact.len = r->len;
  }
  Compiled__V1__StageTiming tim[GC_MAX_STAGES];
  Compiled__V1__StageTiming *tp[GC_MAX_STAGES];
  int n = r->ntimings < GC_MAX_STAGES ? r->ntimings : GC_MAX_STAGES;
  for (int i = 0; i < n; i++) {
    compiled__v1__stage_timing__init(&tim[i]);
    tim[i].stage = (char *)r->timings[i].stage;
    tim[i].micros = r->timings[i].micros;
    tp[i] = &tim[i];
  }
  res.n_timings = (size_t)n;
  res.timings = tp;
  ev.event_case = COMPILED__V1__COMPILE_EVENT__EVENT_RESULT;
  ev.result = &res;
  size_t len = compiled__v1__compile_event__get_packed_size(&ev);
  grpc_slice s = grpc_slice_malloc(len);
  compiled__v1__compile_event__pack(&ev, GRPC_SLICE_START_PTR(s));
  return s;
}

/* Sends a packed result (the call takes its own reference) and finishes. */
static void send_slice(srv_call *c, grpc_slice s) {
  srv_reply(c, grpc_raw_byte_buffer_create(&s, 1));
}

static void send_result(srv_call *c, const result *r) {
  grpc_slice s = pack_result(r);
  send_slice(c, s);
  grpc_slice_unref(s);
}

/* ---- the in-memory tiers ---- */

#define MEMO_BYTES (16u << 20)

/* Request memo: the digest of a request's bytes -> its key. Requests with
 * the same bytes have the same key for the life of the process (same build,
 * target and limits), so a repeated request skips decoding, validation and
 * hashing. Forced compiles are never memoized. */
typedef struct memo_entry {
  gc_key key;
  uint64_t max_inline;
} memo_entry;

/* Hot tier: key -> the prebuilt response of a hit (artifact inline, served
 * as L1_HIT, no per-request timings), with what a non-inline answer needs.
 * Filled from artifacts just verified on a disk read or just compiled and
 * stored; dropped on eviction. */
typedef struct hot_entry {
  grpc_slice response; /* packed CompileEvent, artifact inline */
  gc_key key;
  uint64_t size;
  uint8_t digest[GC_DIGEST_LEN];
  int64_t compile_us;
  bool is_signed;
  cache_sig sig;
} hot_entry;

static void memo_release(void *v) {
  free(v);
}

static void memo_copy(const void *v, void *out) {
  *(memo_entry *)out = *(const memo_entry *)v;
}

static void hot_release(void *v) {
  hot_entry *h = v;
  grpc_slice_unref(h->response);
  free(h);
}

/* Copies the entry, taking a reference to its response slice. */
static void hot_copy(const void *v, void *out) {
  const hot_entry *h = v;
  hot_entry *o = out;
  *o = *h;
  o->response = grpc_slice_ref(h->response);
}

int compile_init(daemon_ctx *d) {
  if (lru_init(&d->memo, MEMO_BYTES, memo_release) != 0 ||
      lru_init(&d->hot, d->cfg.hot_cache_bytes, hot_release) != 0)
    return -1;
  return 0;
}

void compile_cleanup(daemon_ctx *d) {
  lru_destroy(&d->memo);
  lru_destroy(&d->hot);
}

void compile_forget(daemon_ctx *d, const uint8_t *key) {
  lru_remove(&d->hot, key);
}

/* Keeps the hit response of a verified artifact in memory. */
static void hot_remember(daemon_ctx *d, const gc_key *key, const char *hex,
                         const uint8_t *artifact, size_t len,
                         const uint8_t *digest, const cache_sig *sig,
                         int64_t compile_us) {
  if (!d->hot.budget || len > d->hot.budget)
    return;
  hot_entry *h = malloc(sizeof *h);
  if (!h)
    return;
  result res = {.hex = hex,
                .key = key,
                .served = COMPILED__V1__SERVED__SERVED_L1_HIT,
                .artifact = artifact,
                .len = len,
                .digest = digest,
                .sig = sig,
                .must_inline = true,
                .compile_us = compile_us};
  h->response = pack_result(&res);
  h->is_signed = sig != NULL;
  if (sig)
    h->sig = *sig;
  h->key = *key;
  h->size = len;
  memcpy(h->digest, digest, GC_DIGEST_LEN);
  h->compile_us = compile_us;
  lru_put(&d->hot, key->key, h, GRPC_SLICE_LENGTH(h->response) + sizeof *h);
}

/* Answers from the hot tier; true when it did. */
static bool try_hot(daemon_ctx *d, srv_call *c, const gc_key *key,
                    uint64_t max_inline, int64_t validate_us, int64_t key_us) {
  hot_entry h;
  if (!lru_get(&d->hot, key->key, hot_copy, &h))
    return false;
  char hex[GC_HEX_LEN];
  gc_digest_hex(key->key, hex);
  atomic_fetch_add(&d->stats.hits, 1);
  atomic_fetch_add(&d->stats.hot_hits, 1);
  atomic_fetch_add(&d->stats.saved_us, (uint64_t)h.compile_us);
  /* The store learns of the hit too (hit count, last use, eviction
   * priority), batched by its touch flusher. */
  if (d->cache)
    cache_touch(d->cache, key->key);
  log_done_ex(c, hex, key, NULL, "hit", 0, validate_us, key_us, -1, -1, h.size,
              NULL);
  if (h.size <= max_inline) {
    send_slice(c, h.response);
  } else {
    result res = {.hex = hex,
                  .key = &h.key,
                  .served = COMPILED__V1__SERVED__SERVED_L1_HIT,
                  .len = h.size,
                  .digest = h.digest,
                  .sig = h.is_signed ? &h.sig : NULL,
                  .max_inline = max_inline,
                  .compile_us = h.compile_us};
    send_result(c, &res);
  }
  grpc_slice_unref(h.response);
  return true;
}

/* ---- the completion-queue half ---- */

/* Frees the request bytes once decoded (or answered) and gives their
 * charge back to the budget. */
static void request_drop_bytes(request *r) {
  if (!r->charged)
    return;
  srv_call_drop_request(r->call);
  gc_budget_release(&r->d->budget, r->charged);
  r->charged = 0;
}

/* Frees the request; its call must still be alive if its bytes are (the
 * call holds them). */
static void request_free(request *r) {
  if (!r)
    return;
  request_drop_bytes(r);
  memory_free_arena(r->d, r->arena);
  if (memory_is_big(r->d, r->len))
    memory_job_ended(r->d, r->len);
  free(r);
}

/* Frees the request, then drops its call reference. */
static void request_end(request *r) {
  srv_call *c = r->call;
  request_free(r);
  srv_call_unref(c);
}

int daemon_read_options(const Compiled__V1__CompileOptions *po, gc_options *o,
                        bool *force, gc_error *err) {
  gc_options_default(o);
  *force = false;
  if (!po)
    return 0;
  switch (po->opt_level) {
  case COMPILED__V1__OPT_LEVEL__OPT_LEVEL_DEFAULT:
    break;
  case COMPILED__V1__OPT_LEVEL__OPT_LEVEL_O0:
  case COMPILED__V1__OPT_LEVEL__OPT_LEVEL_O1:
  case COMPILED__V1__OPT_LEVEL__OPT_LEVEL_O2:
  case COMPILED__V1__OPT_LEVEL__OPT_LEVEL_O3:
    o->opt_level = (int)po->opt_level - 1;
    break;
  default:
    return gc_errorf(err, GC_EINVAL, "options.opt_level: unknown value %d",
                     (int)po->opt_level);
  }
  if (po->mode != COMPILED__V1__MODE__MODE_INFERENCE &&
      po->mode != COMPILED__V1__MODE__MODE_TRAINING)
    return gc_errorf(err, GC_EINVAL, "options.mode: unknown value %d",
                     (int)po->mode);
  o->training = po->mode == COMPILED__V1__MODE__MODE_TRAINING;
  o->keep_input_mutations = !po->return_input_mutations;
  o->separate_temporaries = po->separate_temporaries;
  o->eager_random = po->eager_random;
  *force = po->force;
  return 0;
}

int daemon_read_target(daemon_ctx *d, gc_arena *a,
                       const Compiled__V1__Target *pt, gc_target *t,
                       gc_error *err) {
  *t = d->target;
  if (!pt)
    return 0;
  /* Counts and lengths first: nothing is copied or joined before they are
   * known to be small. */
  if (pt->n_isa > DAEMON_TARGET_MAX_ISA)
    return gc_errorf(err, GC_ELIMIT,
                     "target.isa has %zu entries; the limit is %d", pt->n_isa,
                     DAEMON_TARGET_MAX_ISA);
  size_t len = 1;
  for (size_t i = 0; i < pt->n_isa; i++) {
    size_t n = strnlen(pt->isa[i], DAEMON_TARGET_MAX_NAME + 1);
    if (n > DAEMON_TARGET_MAX_NAME)
      return gc_errorf(err, GC_ELIMIT,
                       "target.isa[%zu] is longer than %d bytes, the limit", i,
                       DAEMON_TARGET_MAX_NAME);
    len += n + 1;
  }
  if (pt->arch &&
      strnlen(pt->arch, DAEMON_TARGET_MAX_NAME + 1) > DAEMON_TARGET_MAX_NAME)
    return gc_errorf(err, GC_ELIMIT,
                     "target.arch is longer than %d bytes, the limit",
                     DAEMON_TARGET_MAX_NAME);
  /* A target naming its architecture carries its whole ISA list: none is
   * the architecture's baseline (COMPILED_TARGET=x86-64 reports no
   * feature), not the daemon's features. */
  if (pt->arch && *pt->arch) {
    t->arch = pt->arch;
    t->isa = "";
  }
  if (pt->n_isa) {
    char *isa = gc_arena_alloc(a, len);
    if (!isa)
      return gc_errorf(err, GC_ENOMEM, "out of memory");
    size_t used = 0; /* appended at the end: linear in the list's bytes */
    for (size_t i = 0; i < pt->n_isa; i++) {
      size_t n = strlen(pt->isa[i]);
      if (i)
        isa[used++] = ',';
      memcpy(isa + used, pt->isa[i], n);
      used += n;
    }
    isa[used] = '\0';
    t->isa = isa;
  }
  return 0;
}

static void submit_on_loop(void *arg);

bool daemon_entry_trusted(daemon_ctx *d, cache_conn *conn, const uint8_t *key,
                          const char *hex, const cache_info *info) {
  if (!d->signer || !d->cfg.verify_cache)
    return true;
  sign_check sc = signer_verify(d->signer, key, info->digest,
                                info->is_signed ? &info->sig : NULL);
  if (sc == SIGN_OK)
    return true;
  atomic_fetch_add(&d->stats.signature_failures, 1);
  LOG(LOG_WARN, "cache entry %s: %s%s%s; not served, dropped, recompiling", hex,
      sign_check_name(sc), sc == SIGN_UNKNOWN_KEY ? " " : "",
      sc == SIGN_UNKNOWN_KEY ? info->sig.key_id : "");
  cache_error cerr;
  if (cache_evict_key(conn, key, NULL, &cerr) != 0 && cerr.code != CACHE_EMISS)
    LOG(LOG_WARN, "dropping cache entry %s failed: %s", hex, cerr.msg);
  compile_forget(d, key);
  return false;
}

/* Serves a hit from the cache; returns true when the call was answered. */
static bool try_cache(daemon_ctx *d, request *r) {
  cache_conn *conn = daemon_conn(d);
  if (!conn)
    return false;
  uint8_t *data = NULL;
  size_t len = 0;
  cache_info info;
  cache_error cerr;
  int rc = cache_get(conn, r->key.key, &data, &len, &info, &cerr);
  if (rc == 0 && !daemon_entry_trusted(d, conn, r->key.key, r->hex, &info)) {
    free(data);
    return false; /* dropped: compile it again */
  }
  if (rc == 0) {
    atomic_fetch_add(&d->stats.hits, 1);
    atomic_fetch_add(&d->stats.saved_us, info.compile_us);
    result res = {.hex = r->hex,
                  .key = &r->key,
                  .served = COMPILED__V1__SERVED__SERVED_L1_HIT,
                  .artifact = data,
                  .len = len,
                  .digest = info.digest,
                  .sig = info.is_signed ? &info.sig : NULL,
                  .max_inline = r->max_inline,
                  .compile_us = (int64_t)info.compile_us,
                  .timings = r->prep.timings,
                  .ntimings = r->prep.ntimings};
    log_done_ex(r->call, r->hex, &r->key, NULL, "hit", 0,
                r->prep.timings[0].micros, r->prep.timings[1].micros, -1, -1,
                len, NULL);
    send_result(r->call, &res);
    hot_remember(d, &r->key, r->hex, data, len, info.digest,
                 info.is_signed ? &info.sig : NULL, (int64_t)info.compile_us);
    free(data);
    return true;
  }
  if (rc == CACHE_ECORRUPT)
    LOG(LOG_WARN, "cache entry %s was corrupt; dropped, recompiling", r->hex);
  else if (rc != CACHE_EMISS)
    LOG(LOG_WARN, "cache read of %s failed: %s", r->hex, cerr.msg);
  char msg[1024];
  if (cache_fail_get(conn, r->key.key, msg, sizeof msg, &cerr) == 0) {
    atomic_fetch_add(&d->stats.failure_hits, 1);
    gc_error ge;
    gc_error_clear(&ge);
    snprintf(ge.msg, sizeof ge.msg, "%s", msg);
    log_done(r->call, r->hex, "failed-remembered", GRPC_STATUS_INVALID_ARGUMENT,
             -1, -1, -1, -1, 0, msg);
    daemon_finish_graph_error(r->call, GC_EINVAL, &ge);
    return true;
  }
  return false;
}

/* Ends a request refused before or while decoding. */
static void refuse(request *r, int code, gc_error *err) {
  grpc_status_code st = status_of(code);
  log_done(r->call, NULL,
           st == GRPC_STATUS_RESOURCE_EXHAUSTED ? "rejected" : "invalid",
           (int)st, -1, -1, -1, -1, 0, err->msg);
  daemon_finish_graph_error(r->call, code, err);
}

/* Unpacks the request into its arena; NULL after answering the call. */
static Compiled__V1__CompileRequest *unpack_request(request *r) {
  daemon_ctx *d = r->d;
  gc_error err;
  gc_error_clear(&err);
  r->arena = memory_arena(d, r->len);
  if (!r->arena) {
    gc_errorf(&err, GC_ENOMEM, "out of memory");
    refuse(r, GC_ENOMEM, &err);
    return NULL;
  }
  size_t len;
  const uint8_t *bytes = srv_call_request(r->call, &len);
  ProtobufCAllocator al = gc_arena_pb_allocator(r->arena);
  Compiled__V1__CompileRequest *req =
      srv_call_has_request(r->call)
          ? compiled__v1__compile_request__unpack(&al, len, bytes)
          : NULL;
  /* Strings with a NUL or not UTF-8 (invisible once unpacked): wire.h. */
  int wrc =
      req ? gc_wire_check_strings(req->base.descriptor, bytes, len, &err) : 0;
  request_drop_bytes(r); /* the message holds copies of what it needs */
  const char *bad = NULL;
  if (!req && memory_explain(d, r->arena, len, GC_ENOMEM, &err)) {
    refuse(r, GC_ENOMEM, &err);
    return NULL;
  }
  if (!req)
    bad = "request bytes are not a valid CompileRequest message";
  else if (!req->graph)
    bad = "CompileRequest has no graph";
  if (bad) {
    gc_errorf(&err, GC_EMALFORMED, "%s (%zu bytes)", bad, len);
    refuse(r, GC_EMALFORMED, &err);
    return NULL;
  }
  if (wrc) {
    refuse(r, wrc, &err);
    return NULL;
  }
  return req;
}

/* Answers from the memo and the hot tier when the request's bytes were
 * seen before; their digest stays in r->digest for later. */
static bool try_memo(request *r) {
  size_t len;
  const uint8_t *bytes = srv_call_request(r->call, &len);
  memo_entry me;
  sha256(bytes, len, r->digest);
  if (!srv_call_has_request(r->call) ||
      !lru_get(&r->d->memo, r->digest, memo_copy, &me))
    return false;
  atomic_fetch_add(&r->d->stats.memo_hits, 1);
  return try_hot(r->d, r->call, &me.key, me.max_inline, 0, 0);
}

/* Decode, validate, key, hot tier, cache, then the loop for a miss. Takes
 * `r` and its call reference. */
static void decode_and_answer(request *r) {
  daemon_ctx *d = r->d;
  srv_call *c = r->call;
  Compiled__V1__CompileRequest *req = unpack_request(r);
  if (!req)
    goto done;
  gc_error err;
  gc_error_clear(&err);
  gc_target *target = &r->target;
  int rc = daemon_read_options(req->options, &r->opts, &r->force, &err);
  if (!rc)
    rc = daemon_read_target(d, r->arena, req->target, target, &err);
  if (!rc)
    rc = label_read(req->label, &r->label, &err);
  if (!rc)
    rc = gc_prepare(r->arena, req->graph, &d->limits, &r->opts, target,
                    &r->graph, &r->key, &r->prep, &err);
  if (rc) {
    memory_explain(d, r->arena, r->len, rc, &err);
    refuse(r, rc, &err);
    goto done;
  }
  gc_digest_hex(r->key.key, r->hex);
  r->msg = req;
  r->max_inline =
      req->max_inline_bytes ? req->max_inline_bytes : d->cfg.max_inline_bytes;
  if (!r->force) {
    memo_entry *m = malloc(sizeof *m);
    if (m) {
      m->key = r->key;
      m->max_inline = r->max_inline;
      lru_put(&d->memo, r->digest, m, sizeof *m + 64);
    }
    if (try_hot(d, c, &r->key, r->max_inline, r->prep.timings[0].micros,
                r->prep.timings[1].micros) ||
        try_cache(d, r))
      goto done;
  }
  atomic_fetch_add(&d->stats.misses, 1);
  srv_post(d->server, submit_on_loop, r); /* the loop takes r and the ref */
  return;
done:
  request_end(r);
}

/* True (after ending `r`) when its call was cancelled while it waited for
 * a thread: a deadline passed, or the client gave up. */
static bool gone(request *r) {
  if (!srv_call_cancelled(r->call))
    return false;
  log_done(r->call, NULL, "cancelled", GRPC_STATUS_CANCELLED, -1, -1, -1, -1, 0,
           NULL);
  request_end(r);
  return true;
}

/* A big request's turn on a decode thread (low priority, --decode-threads
 * of them). */
static void decode_job(void *arg) {
  request *r = arg;
  int delay = r->d->cfg.debug_decode_delay_ms;
  for (int waited = 0; waited < delay && !srv_call_cancelled(r->call);
       waited += 5)
    uv_sleep(5);
  if (!gone(r))
    decode_and_answer(r);
}

/* A big request's first stop, on the memo thread: a repeated request is
 * answered from the hot tier at the cost of hashing its bytes, without
 * waiting behind other big requests' decodes; the rest go on to decode. */
static void memo_job(void *arg) {
  request *r = arg;
  if (gone(r))
    return;
  if (try_memo(r)) {
    request_end(r);
    return;
  }
  if (pool_submit(r->d->decoders, decode_job, r) != 0) {
    srv_finish(r->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    request_end(r);
  }
}

/* A Compile call: its bytes are charged to the memory budget (refused when
 * they do not fit). A small request is answered or decoded right here; a
 * big one goes to the memo thread, then to a decode thread, so that this
 * completion-queue thread stays free for cache hits. */
static void send_stage_to(srv_call *c, const char *name, bool done,
                          int64_t micros);

static void handle_compile(srv_call *c) {
  daemon_ctx *d = srv_call_user(c);
  atomic_fetch_add(&d->stats.requests, 1);
  request *r = calloc(1, sizeof *r);
  if (!r) {
    srv_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    srv_call_unref(c);
    return;
  }
  r->d = d;
  r->call = c;
  r->len = srv_call_request_len(c);
  if (!gc_budget_charge(&d->budget, r->len, memory_ceiling(d, r->len))) {
    gc_error err;
    gc_error_clear(&err);
    memory_refused(d, r->len, 0, &err);
    refuse(r, GC_ENOMEM, &err);
    srv_call_unref(c);
    free(r);
    return;
  }
  r->charged = r->len;
  if (!memory_is_big(d, r->len)) {
    if (try_memo(r))
      request_end(r);
    else
      decode_and_answer(r);
    return;
  }
  /* A big request waits for the memo lane and takes a while to decode: the
   * client hears at once that it was received (it gives up on a daemon
   * that does not answer at all, docs/protocol.md). */
  send_stage_to(c, "receive", true, 0);
  if (pool_submit(d->memo_lane, memo_job, r) != 0) {
    srv_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    request_end(r);
  }
}

/* ---- the loop half: flights ---- */

static flight *find_flight(daemon_ctx *d, const uint8_t *key) {
  for (flight *f = d->flights; f; f = f->next)
    if (memcmp(f->key, key, GC_DIGEST_LEN) == 0)
      return f;
  return NULL;
}

static void flight_ref(flight *f) {
  atomic_fetch_add(&f->refs, 1);
}

/* Frees the flight's artifact (and gives back what it held of the memory
 * budget, for one read from Redis). */
static void free_artifact(flight *f) {
  free(f->out.artifact);
  f->out.artifact = NULL;
  gc_budget_release(&f->d->budget, f->l2_charged);
  f->l2_charged = 0;
}

static void flight_unref(flight *f) {
  if (atomic_fetch_sub(&f->refs, 1) > 1)
    return;
  free_artifact(f);
  memory_free_arena(f->d, f->arena);
  free(f);
}

static void unlink_flight(daemon_ctx *d, flight *f) {
  for (flight **p = &d->flights; *p; p = &(*p)->next)
    if (*p == f) {
      *p = f->next;
      break;
    }
}

static void unqueue(daemon_ctx *d, flight *f) {
  flight *prev = NULL;
  for (flight *q = d->queue_head; q; prev = q, q = q->qnext)
    if (q == f) {
      if (prev)
        prev->qnext = q->qnext;
      else
        d->queue_head = q->qnext;
      if (d->queue_tail == q)
        d->queue_tail = prev;
      d->nqueued--;
      atomic_store(&d->stats.queued, d->nqueued);
      return;
    }
}

/* Appends `f` to the queue of compiles waiting for a worker. */
static void enqueue(daemon_ctx *d, flight *f) {
  f->state = F_QUEUED;
  f->queued_at = gc_now_us();
  f->qnext = NULL;
  if (d->queue_tail)
    d->queue_tail->qnext = f;
  else
    d->queue_head = f;
  d->queue_tail = f;
  d->nqueued++;
  atomic_store(&d->stats.queued, d->nqueued);
}

static void send_queued(srv_call *c, int position) {
  Compiled__V1__Queued q;
  Compiled__V1__CompileEvent ev;
  compiled__v1__queued__init(&q);
  compiled__v1__compile_event__init(&ev);
  q.position = (uint32_t)position;
  ev.event_case = COMPILED__V1__COMPILE_EVENT__EVENT_QUEUED;
  ev.queued = &q;
  srv_send_msg(c, &ev.base);
}

/* Tells every waiter of a queued flight where it stands. */
static void announce_positions(daemon_ctx *d) {
  int pos = 0;
  for (flight *f = d->queue_head; f; f = f->qnext, pos++)
    for (waiter *w = f->waiters; w; w = w->next)
      send_queued(w->call, pos);
}

static void run_flight(uv_work_t *w);
static void after_flight(uv_work_t *w, int status);
static void send_stage(flight *f, const char *name, bool done, int64_t micros);
static void send_stage_to(srv_call *c, const char *name, bool done,
                          int64_t micros);

/* Starts queued flights while workers are free. */
static void dispatch(daemon_ctx *d) {
  bool moved = false;
  while (d->queue_head && d->nrunning < d->cfg.workers) {
    /* A work request of its own per run: a requeued flight may start again
     * before libuv has called back the previous run's after_flight. */
    uv_work_t *work = malloc(sizeof *work);
    if (!work)
      break; /* stays queued; the next dispatch tries again */
    flight *f = d->queue_head;
    unqueue(d, f);
    f->state = F_RUNNING;
    f->started_at = gc_now_us();
    d->nrunning++;
    atomic_store(&d->stats.running, d->nrunning);
    flight_ref(f); /* the work request */
    work->data = f;
    uv_queue_work(d->loop, work, run_flight, after_flight);
    send_stage(f, "compile", false, 0);
    moved = true;
  }
  if (moved)
    announce_positions(d);
}

static void on_waiter_cancel(srv_call *c, void *arg);

static void add_waiter(flight *f, request *r, bool owner) {
  waiter *w = calloc(1, sizeof *w);
  if (!w) {
    srv_finish(r->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    srv_call_unref(r->call);
    return;
  }
  w->call = r->call; /* the request's reference moves to the waiter */
  w->max_inline = r->max_inline;
  w->owner = owner;
  w->validate_us = r->prep.timings[0].micros;
  w->key_us = r->prep.timings[1].micros;
  w->next = f->waiters;
  f->waiters = w;
  srv_call_on_cancel(r->call, on_waiter_cancel, f->d);
}

/* Ends a miss that will not be compiled (loop thread). */
static void refuse_miss(request *r, const char *outcome, grpc_status_code code,
                        const char *msg) {
  log_done_ex(r->call, r->hex, &r->key, NULL, outcome, code,
              r->prep.timings[0].micros, r->prep.timings[1].micros, -1, -1, 0,
              msg);
  srv_finish(r->call, code, msg);
  request_end(r);
}

static void submit_on_loop(void *arg) {
  request *r = arg;
  daemon_ctx *d = r->d;
  flight *f = find_flight(d, r->key.key);
  if (f) {
    atomic_fetch_add(&d->stats.joins, 1);
    /* A running flight whose waiters all left was told to stop; it has one
     * again. If it stops anyway, deliver_on_loop queues it again. */
    atomic_store(&f->abandoned, false);
    if (srv_call_role(r->call) >= AUTH_COMPILE)
      atomic_store(&f->no_compile, false);
    add_waiter(f, r, false);
    if (f->state == F_QUEUED) {
      int pos = 0;
      for (flight *q = d->queue_head; q && q != f; q = q->qnext)
        pos++;
      send_queued(r->call, pos);
    } else {
      send_stage_to(r->call, "compile", false, 0); /* joined a running one */
    }
    request_free(r);
    return;
  }
  /* A read-only token gets hits (from Redis too: its flight looks there
   * and waits for another daemon's compile) and joins of compiles others
   * started, never a compile of its own. */
  bool read_only = srv_call_role(r->call) < AUTH_COMPILE;
  if (read_only && (!d->l2 || r->force)) {
    atomic_fetch_add(&d->stats.permission_denied, 1);
    char msg[300];
    snprintf(msg, sizeof msg,
             "graph %.16s is not cached, and compiling it needs a token "
             "with role 'compile'; token '%s' has role '%s'",
             r->hex, srv_call_who(r->call),
             auth_role_name((auth_role)srv_call_role(r->call)));
    refuse_miss(r, "refused-role", GRPC_STATUS_PERMISSION_DENIED, msg);
    return;
  }
  /* A drain lets running compiles finish but starts none: the client runs
   * eagerly and retries later, or asks another daemon. (Hits and joins of a
   * running compile are still served above.) */
  if (atomic_load(&d->draining)) {
    const char *msg = "the daemon is stopping (draining after a signal) and "
                      "starts no new compiles; retry later or use another "
                      "daemon";
    log_done(r->call, r->hex, "refused-draining", GRPC_STATUS_UNAVAILABLE,
             r->prep.timings[0].micros, r->prep.timings[1].micros, -1, -1, 0,
             msg);
    srv_finish(r->call, GRPC_STATUS_UNAVAILABLE, msg);
    srv_call_unref(r->call);
    request_free(r);
    return;
  }
  if (d->nqueued >= d->cfg.max_queue) {
    atomic_fetch_add(&d->stats.rejected_busy, 1);
    char msg[160];
    snprintf(msg, sizeof msg,
             "compile queue is full (%d waiting, --max-queue %d); retry later",
             d->nqueued, d->cfg.max_queue);
    refuse_miss(r, "rejected", GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
    return;
  }
  f = calloc(1, sizeof *f);
  if (!f) {
    srv_finish(r->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    request_end(r);
    return;
  }
  f->d = d;
  memcpy(f->key, r->key.key, GC_DIGEST_LEN);
  memcpy(f->hex, r->hex, GC_HEX_LEN);
  f->fullkey = r->key;
  f->arena = r->arena; /* the job takes the request's arena */
  f->len = r->len;
  r->arena = NULL;
  f->graph = r->graph;
  f->msg = r->msg;
  f->opts = r->opts;
  f->target = r->target;
  f->force = r->force;
  f->label = r->label; /* an entry keeps the label of the request that
                          stored it; joiners' labels are not kept */
  atomic_init(&f->no_compile, read_only);
  atomic_init(&f->refs, 1); /* the flight list */
  atomic_init(&f->abandoned, false);
  f->next = d->flights;
  d->flights = f;
  enqueue(d, f);
  add_waiter(f, r, true);
  request_free(r);
  if (d->nrunning >= d->cfg.workers)
    send_queued(f->waiters->call, d->nqueued - 1);
  dispatch(d);
}

/* A waiter's call ended early: take it off its flight (loop thread). */
typedef struct leave {
  daemon_ctx *d;
  srv_call *call;
} leave;

static void leave_on_loop(void *arg) {
  leave *l = arg;
  daemon_ctx *d = l->d;
  for (flight *f = d->flights; f; f = f->next) {
    for (waiter **p = &f->waiters; *p; p = &(*p)->next) {
      if ((*p)->call != l->call)
        continue;
      waiter *w = *p;
      *p = w->next;
      log_done(w->call, f->hex, "cancelled", GRPC_STATUS_CANCELLED,
               w->validate_us, w->key_us, -1, -1, 0, NULL);
      srv_call_unref(w->call); /* the waiter's reference */
      free(w);
      if (!f->waiters) {
        if (f->state == F_QUEUED) {
          LOG(LOG_INFO, "flight %.16s dropped: no waiter left", f->hex);
          unqueue(d, f);
          unlink_flight(d, f);
          flight_unref(f);
          announce_positions(d);
          daemon_maybe_stop(d);
        } else {
          LOG(LOG_INFO, "flight %.16s abandoned: no waiter left", f->hex);
          atomic_store(&f->abandoned, true);
        }
      }
      goto out;
    }
  }
out:
  srv_call_unref(l->call); /* the cancel callback's reference */
  free(l);
}

/* Runs on a completion-queue thread while the call's close still holds it;
 * the posted message takes its own reference. */
static void on_waiter_cancel(srv_call *c, void *arg) {
  leave *l = malloc(sizeof *l);
  if (!l)
    return;
  srv_call_ref(c);
  l->d = arg;
  l->call = c;
  srv_post(l->d->server, leave_on_loop, l);
}

/* ---- the worker half ---- */

typedef struct stage_event {
  flight *f;
  const char *name;
  bool done;
  int64_t micros;
} stage_event;

/* A packed CompileEvent carrying one stage. */
static grpc_byte_buffer *stage_message(const char *name, bool done,
                                       int64_t micros) {
  Compiled__V1__Stage st;
  Compiled__V1__CompileEvent ev;
  compiled__v1__stage__init(&st);
  compiled__v1__compile_event__init(&ev);
  st.name = (char *)name;
  st.done = done;
  st.micros = micros;
  ev.event_case = COMPILED__V1__COMPILE_EVENT__EVENT_STAGE;
  ev.stage = &st;
  return rpc_pack(&ev.base);
}

/* Sends a stage event to one call. */
static void send_stage_to(srv_call *c, const char *name, bool done,
                          int64_t micros) {
  srv_send(c, stage_message(name, done, micros));
}

/* Sends a stage event to every waiter of `f` (loop thread): packed once, a
 * copy of the buffer (a slice reference, not the bytes) per waiter. */
static void send_stage(flight *f, const char *name, bool done, int64_t micros) {
  grpc_byte_buffer *bb = stage_message(name, done, micros);
  for (waiter *w = f->waiters; w; w = w->next)
    srv_send(w->call, grpc_byte_buffer_copy(bb));
  grpc_byte_buffer_destroy(bb);
}

static void stage_on_loop(void *arg) {
  stage_event *e = arg;
  send_stage(e->f, e->name, e->done, e->micros);
  flight_unref(e->f);
  free(e);
}

static void renew_lease(flight *f);

static void hook_stage(void *ctx, const char *stage, bool done,
                       int64_t micros) {
  flight *f = ctx;
  renew_lease(f); /* a stage boundary: the worker's thread */
  stage_event *e = malloc(sizeof *e);
  if (!e)
    return;
  e->f = f;
  e->name = stage;
  e->done = done;
  e->micros = micros;
  flight_ref(f); /* the event's; dropped on the loop */
  srv_post(f->d->server, stage_on_loop, e);
}

static bool hook_abandoned(void *ctx) {
  flight *f = ctx;
  return atomic_load(&f->abandoned);
}

/* The key's components, stored with an entry (Explain finds near misses
 * by them). */
static void key_parts(const flight *f, cache_part parts[GC_KEY_NCOMPONENTS]) {
  memset(parts, 0, GC_KEY_NCOMPONENTS * sizeof *parts);
  for (int i = 0; i < GC_KEY_NCOMPONENTS; i++) {
    snprintf(parts[i].name, sizeof parts[i].name, "%s",
             gc_key_component_name((gc_key_component)i));
    memcpy(parts[i].digest, f->fullkey.part[i], GC_DIGEST_LEN);
  }
}

/* ---- the shared tier (l2.h), on the worker ---- */

/* Renews the flight's lease when a third of it has passed. */
static void renew_lease(flight *f) {
  daemon_ctx *d = f->d;
  int64_t now = gc_now_us();
  if (!f->lease || now - f->lease_renewed < d->cfg.redis_lease_ms * 1000 / 3)
    return;
  f->lease_renewed = now;
  l2_lease_renew(d->l2, f->key, d->owner, d->cfg.redis_lease_ms);
}

/* Looks the flight's key up in Redis (l2_get verifies what it finds) and,
 * while another daemon holds an honoured lease on it, waits for that
 * daemon's result, at most --redis-lease-wait-ms; takes the lease when it
 * is free (or not honoured: l2.h). Returns true when the artifact came
 * from Redis (f->out filled). Any Redis failure ends it: the flight
 * compiles locally. */
static bool from_l2(flight *f) {
  daemon_ctx *d = f->d;
  int64_t waiting_since = 0; /* 0: not waiting */
  for (int polls = 0; !atomic_load(&f->abandoned); polls++) {
    l2_entry e;
    int rc = l2_get(d->l2, f->key, &e);
    if (rc == L2_FOUND) {
      f->out.artifact = e.data;
      f->out.len = e.len;
      f->out.micros = (int64_t)e.compile_us;
      f->l2_charged = e.charged;
      memcpy(f->digest, e.digest, GC_DIGEST_LEN);
      f->is_signed = e.is_signed;
      f->sig = e.sig;
      return true;
    }
    if (rc == L2_REFUSED)
      atomic_fetch_add(&d->stats.signature_failures, 1);
    else if (rc != L2_ABSENT)
      return false; /* down, or no memory for it now */
    bool read_only = atomic_load(&f->no_compile);
    int t = read_only /* wait while someone holds it; never take it */
                ? L2_LEASE_HELD
                : l2_lease_take(d->l2, f->key, d->owner, d->cfg.redis_lease_ms);
    if (read_only && l2_lease_held(d->l2, f->key, d->cfg.redis_lease_ms) != 1)
      return false;
    if (t != L2_LEASE_HELD) {
      if (t == L2_LEASE_TAKEN || t == L2_LEASE_REPLACED) {
        f->lease = true;
        f->lease_renewed = gc_now_us();
        if (waiting_since || t == L2_LEASE_REPLACED) {
          atomic_fetch_add(&d->stats.lease_takeovers, 1);
          if (waiting_since)
            LOG(LOG_INFO, "%s: the lease was free again; compiling here",
                f->hex);
        }
      }
      return false;
    }
    int64_t now = gc_now_us();
    if (!waiting_since) {
      waiting_since = now;
      atomic_fetch_add(&d->stats.lease_waits, 1);
      LOG(LOG_DEBUG, "%s: another daemon is compiling it; waiting", f->hex);
    } else if (now - waiting_since >=
               (int64_t)d->cfg.redis_lease_wait_ms * 1000) {
      if (!read_only)
        atomic_fetch_add(&d->stats.lease_takeovers, 1);
      LOG(LOG_WARN,
          "%s: waited %d ms (--redis-lease-wait-ms) for the daemon holding "
          "its lease in Redis; %s",
          f->hex, d->cfg.redis_lease_wait_ms,
          read_only ? "giving up (this request may not compile)"
                    : "compiling here");
      return false;
    }
    uv_sleep(polls < 20 ? 25 : 100);
  }
  return false;
}

static void deliver_on_loop(void *arg);

/* A compile that ran to its end, succeeded or failed, taking `us`: counted
 * (Stats' compiles, compiles_total) and observed in the duration histogram
 * in one place, so that /metrics' compile_duration_seconds_count equals
 * compiles_total. A compile stopped because nobody waited for it any more
 * is neither: the compile of its key that a later request starts is the
 * one that counts. */
static void count_compile(daemon_ctx *d, int64_t us) {
  static const int64_t bounds[] = DAEMON_COMPILE_BUCKETS_US;
  int b = 0;
  while (b < DAEMON_COMPILE_NBUCKETS - 1 && us > bounds[b])
    b++;
  atomic_fetch_add(&d->stats.compiles, 1);
  atomic_fetch_add(&d->stats.compile_hist[b], 1);
  atomic_fetch_add(&d->stats.compile_sum_us, (uint64_t)(us > 0 ? us : 0));
}

static void run_flight(uv_work_t *work) {
  flight *f = work->data;
  daemon_ctx *d = f->d;
  cache_conn *conn = daemon_conn(d);
  cache_error cerr;
  gc_error_clear(&f->err);
  if (atomic_load(&f->abandoned)) {
    f->rc = gc_errorf(&f->err, GC_ECANCELED, "abandoned before it started");
    goto out;
  }
  /* Another thread may have stored it since the request missed. */
  if (!f->force && conn) {
    cache_info info;
    int grc =
        cache_get(conn, f->key, &f->out.artifact, &f->out.len, &info, &cerr);
    if (grc == 0 && !daemon_entry_trusted(d, conn, f->key, f->hex, &info)) {
      free(f->out.artifact);
      f->out.artifact = NULL;
      f->out.len = 0;
      grc = CACHE_EMISS;
    }
    if (grc == 0) {
      f->from_cache = true;
      f->stored = true;
      f->out.micros = (int64_t)info.compile_us;
      memcpy(f->digest, info.digest, GC_DIGEST_LEN);
      f->is_signed = info.is_signed;
      f->sig = info.sig;
      f->rc = 0;
      hot_remember(d, &f->fullkey, f->hex, f->out.artifact, f->out.len,
                   f->digest, f->is_signed ? &f->sig : NULL, f->out.micros);
      goto out;
    }
  }
  if (d->l2 && !f->force && from_l2(f)) {
    f->from_l2 = true;
    f->rc = 0;
    atomic_fetch_add(&d->stats.l2_hits, 1);
    cache_part parts[GC_KEY_NCOMPONENTS];
    key_parts(f, parts);
    /* Redis holds no label: the copy here gets this request's */
    cache_meta meta = {.parts = parts,
                       .nparts = GC_KEY_NCOMPONENTS,
                       .compile_us = (uint64_t)f->out.micros,
                       .sig = f->is_signed ? &f->sig : NULL,
                       .label = &f->label};
    if (conn && cache_put_entry(conn, f->key, f->out.artifact, f->out.len,
                                &meta, &cerr) == 0) {
      f->stored = true;
      explorer_keep(d, conn, f->key, f->msg, NULL);
    }
    hot_remember(d, &f->fullkey, f->hex, f->out.artifact, f->out.len, f->digest,
                 f->is_signed ? &f->sig : NULL, f->out.micros);
    goto out;
  }
  if (atomic_load(&f->no_compile)) {
    f->denied = true;
    f->rc = gc_errorf(&f->err, GC_EINVAL, "not cached");
    goto out;
  }
  /* Tests make compiles slow to exercise joining, cancelling, queueing. */
  for (int waited = 0; waited < d->cfg.debug_compile_delay_ms; waited += 5) {
    if (atomic_load(&f->abandoned))
      break;
    uv_sleep(5);
    renew_lease(f);
  }
  if (d->cfg.debug_compile_stuck_ms > 0)
    uv_sleep((unsigned)d->cfg.debug_compile_stuck_ms);
  gc_hooks hooks = {.stage = hook_stage, .abandoned = hook_abandoned, .ctx = f};
  gc_backend be = {.target = &f->target,
                   .toolchain = &d->toolchain.iface,
                   .verify = d->cfg.verify_ir};
  int64_t begun = gc_now_us();
  f->rc = gc_compile(f->arena, f->graph, &f->fullkey, &f->opts,
                     d->cfg.native ? &be : NULL, &hooks, &f->out, &f->err);
  if (f->rc != GC_ECANCELED)
    count_compile(d, f->rc == 0 ? f->out.micros : gc_now_us() - begun);
  if (f->rc == 0 && f->out.native_failed) {
    atomic_fetch_add(&d->stats.native_failures, 1);
    LOG(LOG_WARN, "native code for %s failed at %s; serving its ATen program",
        f->hex, f->out.native_failed_stage);
  } else if (f->rc == 0 && f->out.native) {
    atomic_fetch_add(&d->stats.native_compiles, 1);
  }
  if (f->rc == 0) {
    sha256(f->out.artifact, f->out.len, f->digest);
    cache_part parts[GC_KEY_NCOMPONENTS];
    key_parts(f, parts);
    int64_t t0 = gc_now_us();
    if (d->signer) {
      f->is_signed = signer_sign(d->signer, f->key, f->digest, &f->sig);
      if (!f->is_signed)
        LOG(LOG_ERROR, "signing %s failed (OpenSSL); stored unsigned", f->hex);
    }
    const cache_sig *sig = f->is_signed ? &f->sig : NULL;
    if (d->l2 && l2_put(d->l2, f->key, f->out.artifact, f->out.len, f->digest,
                        sig, (uint64_t)f->out.micros) == 0)
      atomic_fetch_add(&d->stats.l2_puts, 1);
    cache_meta meta = {.parts = parts,
                       .nparts = GC_KEY_NCOMPONENTS,
                       .compile_us = (uint64_t)f->out.micros,
                       .sig = sig,
                       .label = &f->label};
    if (conn && cache_put_entry(conn, f->key, f->out.artifact, f->out.len,
                                &meta, &cerr) == 0) {
      f->stored = true;
      hot_remember(d, &f->fullkey, f->hex, f->out.artifact, f->out.len,
                   f->digest, sig, f->out.micros);
      explorer_keep(d, conn, f->key, f->msg, &f->out);
    } else

      LOG(LOG_WARN, "storing %s failed: %s", f->hex,
          conn ? cerr.msg : "no cache connection");
    if (f->out.ntimings < GC_MAX_STAGES) {
      f->out.timings[f->out.ntimings].stage = "store";
      f->out.timings[f->out.ntimings].micros = gc_now_us() - t0;
      f->out.ntimings++;
    }
  } else if (f->rc != GC_ECANCELED &&
             !memory_explain(d, f->arena, f->len, f->rc, &f->err)) {
    atomic_fetch_add(&d->stats.compile_failures, 1);
    if (f->rc != GC_EINTERNAL && f->rc != GC_ENOMEM && conn)
      cache_fail_put(conn, f->key, f->err.msg, &cerr);
  }
out:
  if (f->lease) { /* stored (or failed): the others need not wait */
    l2_lease_release(d->l2, f->key, d->owner);
    f->lease = false;
  }
  flight_ref(f); /* the delivery's */
  srv_post(d->server, deliver_on_loop, f);
}

static void after_flight(uv_work_t *work, int status) {
  (void)status;
  flight_unref(work->data);
  free(work);
}

/* A flight that stopped because it was abandoned, but gained waiters
 * meanwhile, goes back to the queue instead of failing them. */
static bool requeue_if_wanted(daemon_ctx *d, flight *f) {
  /* a flight whose read-only waiters were denied while a request that may
   * compile joined: compile it after all */
  bool may_compile_now = f->denied && !atomic_load(&f->no_compile);
  if (!f->waiters || (f->rc != GC_ECANCELED && !may_compile_now))
    return false;
  f->denied = false;
  LOG(LOG_INFO, "flight %.16s was abandoned but has waiters again; requeued",
      f->hex);
  f->rc = 0;
  gc_error_clear(&f->err);
  free_artifact(f);
  memset(&f->out, 0, sizeof f->out);
  atomic_store(&f->abandoned, false);
  enqueue(d, f);
  d->nrunning--;

  atomic_store(&d->stats.running, d->nrunning);
  flight_unref(f); /* the delivery reference; the list keeps it */
  dispatch(d);
  return true;
}

static void deliver_on_loop(void *arg) {
  flight *f = arg;
  daemon_ctx *d = f->d;
  if (requeue_if_wanted(d, f))
    return;
  f->state = F_DONE;
  int64_t queue_us = f->started_at - f->queued_at;
  send_stage(f, "compile", true, gc_now_us() - f->started_at);

  for (waiter *w = f->waiters; w;) {
    waiter *next = w->next;
    if (f->denied) {
      atomic_fetch_add(&d->stats.permission_denied, 1);
      char msg[300];
      snprintf(msg, sizeof msg,
               "graph %.16s is cached neither here nor in the shared tier, "
               "and compiling it needs a token with role 'compile'; token "
               "'%s' has role '%s'",
               f->hex, srv_call_who(w->call),
               auth_role_name((auth_role)srv_call_role(w->call)));
      log_done_ex(w->call, f->hex, &f->fullkey, NULL, "refused-role",
                  GRPC_STATUS_PERMISSION_DENIED, w->validate_us, w->key_us, -1,
                  -1, 0, msg);
      srv_finish(w->call, GRPC_STATUS_PERMISSION_DENIED, msg);
    } else if (f->rc == 0) {
      gc_timing tim[GC_MAX_STAGES + 2];
      int nt = 0;
      tim[nt++] = (gc_timing){"validate", w->validate_us};
      tim[nt++] = (gc_timing){"key", w->key_us};
      tim[nt++] = (gc_timing){"queue", queue_us};
      for (int i = 0; i < f->out.ntimings && nt < GC_MAX_STAGES; i++)
        tim[nt++] = f->out.timings[i];
      Compiled__V1__Served served =
          f->from_l2      ? COMPILED__V1__SERVED__SERVED_L2_HIT
          : f->from_cache ? COMPILED__V1__SERVED__SERVED_L1_HIT
          : w->owner      ? COMPILED__V1__SERVED__SERVED_COMPILED
                          : COMPILED__V1__SERVED__SERVED_JOINED;
      result res = {.hex = f->hex,
                    .key = &f->fullkey,
                    .served = served,
                    .artifact = f->out.artifact,
                    .len = f->out.len,
                    .digest = f->digest,
                    .sig = f->is_signed ? &f->sig : NULL,
                    .must_inline = !f->stored,
                    .max_inline = w->max_inline,
                    .compile_us = f->out.micros,
                    .timings = tim,
                    .ntimings = nt};
      log_done_ex(w->call, f->hex, &f->fullkey,
                  served == COMPILED__V1__SERVED__SERVED_COMPILED ? &f->out
                                                                  : NULL,
                  served == COMPILED__V1__SERVED__SERVED_COMPILED ? "compiled"
                  : served == COMPILED__V1__SERVED__SERVED_JOINED ? "joined"
                  : served == COMPILED__V1__SERVED__SERVED_L2_HIT ? "l2-hit"
                                                                  : "hit",
                  0, w->validate_us, w->key_us, queue_us, f->out.micros,
                  f->out.len, NULL);
      send_result(w->call, &res);
    } else {
      log_done_ex(w->call, f->hex, &f->fullkey, NULL, "failed",
                  (int)status_of(f->rc), w->validate_us, w->key_us, queue_us,
                  -1, 0, f->err.msg);
      daemon_finish_graph_error(w->call, f->rc, &f->err);
    }
    srv_call_unref(w->call);
    free(w);
    w = next;
  }
  f->waiters = NULL;
  unlink_flight(d, f);
  d->nrunning--;
  atomic_store(&d->stats.running, d->nrunning);
  flight_unref(f); /* the worker's delivery reference */
  flight_unref(f); /* the flight list's */
  dispatch(d);
  daemon_maybe_stop(d);
}

int compile_inflight(daemon_ctx *d) {
  return d->nqueued + d->nrunning;
}

void compile_abandon_all(daemon_ctx *d) {
  for (flight *f = d->flights; f; f = f->next)
    atomic_store(&f->abandoned, true);
}

void compile_register(daemon_ctx *d) {
  srv_add_method(d->server, COMPILE_PATH, handle_compile);
}
