/*
 * compile.c: the Compile RPC's completion-queue half: unpack, validate,
 * compute the key, answer a hit (the request memo, then the store's hot
 * tier and L1, store.h) or a remembered failure right there; a miss goes
 * to the loop, where flight.c runs the single flight.
 *
 * A big request's decode runs on the decode threads (memory.c) after a
 * look at the memo on the memo lane, so that completion-queue threads
 * stay free for hits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/pipeline.h"
#include "compiler/wire.h"
#include "daemon/daemon.h"
#include "daemon/label.h"
#include "daemon/log.h"
#include "daemon/message.h"
#include "daemon/store.h"
#include "daemon/compile.h"

#define COMPILE_PATH "/compiled.v1.Compiler/Compile"

/* Logs a Compile request's end, and records it for the explorer with its
 * key's components (`key`, may be NULL) and its compile's stages (`out`,
 * may be NULL). */
void compile_log_done_ex(srv_call *c, const char *hex, const gc_key *key,
                         const gc_compiled *out, const char *outcome,
                         int status, int64_t validate_us, int64_t key_us,
                         int64_t queue_us, int64_t compile_us, uint64_t bytes,
                         const char *error) {
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

void compile_log_done(srv_call *c, const char *hex, const char *outcome,
                      int status, int64_t validate_us, int64_t key_us,
                      int64_t queue_us, int64_t compile_us, uint64_t bytes,
                      const char *error) {
  compile_log_done_ex(c, hex, NULL, NULL, outcome, status, validate_us, key_us,
                      queue_us, compile_us, bytes, error);
}

#define MEMO_BYTES (16u << 20)

/* Request memo: the digest of a request's bytes -> its key. Requests with
 * the same bytes have the same key for the life of the process (same build,
 * target and limits), so a repeated request skips decoding, validation and
 * hashing. Forced compiles are never memoized. */
typedef struct memo_entry {
  gc_key key;
  uint64_t max_inline;
} memo_entry;

static void memo_release(void *v) {
  free(v);
}

static void memo_copy(const void *v, void *out) {
  *(memo_entry *)out = *(const memo_entry *)v;
}

int compile_init(daemon_ctx *d) {
  if (lru_init(&d->memo, MEMO_BYTES, memo_release) != 0 || store_init(d) != 0)
    return -1;
  return 0;
}

void compile_cleanup(daemon_ctx *d) {
  lru_destroy(&d->memo);
  store_cleanup(d);
}

/* Answers from the hot tier; true when it did. */
static bool try_hot(daemon_ctx *d, srv_call *c, const gc_key *key,
                    uint64_t max_inline, int64_t validate_us, int64_t key_us) {
  store_hot h;
  if (!store_hot_get(d, key->key, &h))
    return false;
  char hex[GC_HEX_LEN];
  gc_digest_hex(key->key, hex);
  atomic_fetch_add(&d->stats.hits, 1);
  atomic_fetch_add(&d->stats.hot_hits, 1);
  atomic_fetch_add(&d->stats.saved_us, (uint64_t)h.compile_us);
  compile_log_done_ex(c, hex, key, NULL, "hit", 0, validate_us, key_us, -1, -1,
                      h.size, NULL);
  if (h.size <= max_inline) {
    daemon_send_slice(c, h.response);
  } else {
    daemon_result res = {.hex = hex,
                         .key = &h.key,
                         .served = COMPILED__V1__SERVED__SERVED_L1_HIT,
                         .len = h.size,
                         .digest = h.digest,
                         .sig = h.is_signed ? &h.sig : NULL,
                         .max_inline = max_inline,
                         .compile_us = h.compile_us};
    daemon_send_result(c, &res);
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
void compile_request_free(request *r) {
  if (!r)
    return;
  request_drop_bytes(r);
  memory_free_arena(r->d, r->arena);
  if (memory_is_big(r->d, r->len))
    memory_job_ended(r->d, r->len);
  free(r);
}

/* Frees the request, then drops its call reference. */
void compile_request_end(request *r) {
  srv_call *c = r->call;
  compile_request_free(r);
  srv_call_unref(c);
}

/* Serves a hit from the cache; returns true when the call was answered. */
static bool try_cache(daemon_ctx *d, request *r) {
  cache_conn *conn = daemon_conn(d);
  if (!conn)
    return false;
  store_entry e;
  cache_error cerr;
  int rc = store_get(d, conn, r->key.key, NULL, r->hex, &e, NULL, &cerr);
  if (rc == STORE_UNTRUSTED)
    return false; /* dropped: compile it again */
  if (rc == 0) {
    atomic_fetch_add(&d->stats.hits, 1);
    atomic_fetch_add(&d->stats.saved_us, (uint64_t)e.compile_us);
    daemon_result res = {.hex = r->hex,
                         .key = &r->key,
                         .served = COMPILED__V1__SERVED__SERVED_L1_HIT,
                         .artifact = e.data,
                         .len = e.len,
                         .digest = e.digest,
                         .sig = e.is_signed ? &e.sig : NULL,
                         .max_inline = r->max_inline,
                         .compile_us = e.compile_us,
                         .timings = r->prep.timings,
                         .ntimings = r->prep.ntimings};
    compile_log_done_ex(r->call, r->hex, &r->key, NULL, "hit", 0,
                        r->prep.timings[0].micros, r->prep.timings[1].micros,
                        -1, -1, e.len, NULL);
    daemon_send_result(r->call, &res);
    store_remember_hot(d, &r->key, r->hex, &e);
    free(e.data);
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
    compile_log_done(r->call, r->hex, "failed-remembered",
                     GRPC_STATUS_INVALID_ARGUMENT, -1, -1, -1, -1, 0, msg);
    daemon_finish_graph_error(r->call, GC_EINVAL, &ge);
    return true;
  }
  return false;
}

/* Ends a request refused before or while decoding. */
static void refuse(request *r, int code, gc_error *err) {
  grpc_status_code st = daemon_status_of(code);
  compile_log_done(r->call, NULL,
                   st == GRPC_STATUS_RESOURCE_EXHAUSTED ? "rejected"
                                                        : "invalid",
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
  daemon_sha256(bytes, len, r->digest);
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
  srv_post(d->server, flight_submit_on_loop,
           r); /* the loop takes r and the ref */
  return;
done:
  compile_request_end(r);
}

/* True (after ending `r`) when its call was cancelled while it waited for
 * a thread: a deadline passed, or the client gave up. */
static bool gone(request *r) {
  if (!srv_call_cancelled(r->call))
    return false;
  compile_log_done(r->call, NULL, "cancelled", GRPC_STATUS_CANCELLED, -1, -1,
                   -1, -1, 0, NULL);
  compile_request_end(r);
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
    compile_request_end(r);
    return;
  }
  if (pool_submit(r->d->decoders, decode_job, r) != 0) {
    srv_finish(r->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    compile_request_end(r);
  }
}

/* A Compile call: its bytes are charged to the memory budget (refused when
 * they do not fit). A small request is answered or decoded right here; a
 * big one goes to the memo thread, then to a decode thread, so that this
 * completion-queue thread stays free for cache hits. */
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
      compile_request_end(r);
    else
      decode_and_answer(r);
    return;
  }
  /* A big request waits for the memo lane and takes a while to decode: the
   * client hears at once that it was received (it gives up on a daemon
   * that does not answer at all, docs/protocol.md). */
  flight_send_stage_to(c, "receive", true, 0);
  if (pool_submit(d->memo_lane, memo_job, r) != 0) {
    srv_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    compile_request_end(r);
  }
}

void compile_register(daemon_ctx *d) {
  srv_add_method(d->server, COMPILE_PATH, handle_compile);
}
