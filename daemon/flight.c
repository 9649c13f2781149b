/*
 * flight.c: the Compile RPC's single flight: the loop's queue of
 * compiles, the workers, and delivery of results (compile.c answers hits
 * before a request gets here).
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/pipeline.h"
#include "daemon/daemon.h"
#include "daemon/explorer.h"
#include "daemon/log.h"
#include "daemon/message.h"
#include "daemon/store.h"
#include "daemon/compile.h"

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
  store_lease lease;      /* the cluster's, for this key (store.h) */
  cache_label label;      /* the owner's: stored with the entry */
  const Compiled__V1__CompileRequest *msg; /* the request (in the arena) */
};

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
  compile_log_done_ex(r->call, r->hex, &r->key, NULL, outcome, code,
                      r->prep.timings[0].micros, r->prep.timings[1].micros, -1,
                      -1, 0, msg);
  srv_finish(r->call, code, msg);
  compile_request_end(r);
}

void flight_submit_on_loop(void *arg) {
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
      flight_send_stage_to(r->call, "compile", false,
                           0); /* joined a running one */
    }
    compile_request_free(r);
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
    compile_log_done(r->call, r->hex, "refused-draining",
                     GRPC_STATUS_UNAVAILABLE, r->prep.timings[0].micros,
                     r->prep.timings[1].micros, -1, -1, 0, msg);
    srv_finish(r->call, GRPC_STATUS_UNAVAILABLE, msg);
    srv_call_unref(r->call);
    compile_request_free(r);
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
    compile_request_end(r);
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
  compile_request_free(r);
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
      compile_log_done(w->call, f->hex, "cancelled", GRPC_STATUS_CANCELLED,
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
void flight_send_stage_to(srv_call *c, const char *name, bool done,
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

static void hook_stage(void *ctx, const char *stage, bool done,
                       int64_t micros) {
  flight *f = ctx;
  store_lease_renew(f->d, f->key, &f->lease); /* a stage boundary */
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

/* The flight's result is entry e, read from L1 or L2 by the worker. */
static void took(flight *f, store_entry *e) {
  f->out.artifact = e->data;
  f->out.len = e->len;
  f->out.micros = e->compile_us;
  f->l2_charged = e->charged;
  memcpy(f->digest, e->digest, GC_DIGEST_LEN);
  f->is_signed = e->is_signed;
  f->sig = e->sig;
  f->stored = e->stored;
  f->rc = 0;
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
  store_entry e;
  if (!f->force && conn &&
      store_get(d, conn, f->key, &f->fullkey, f->hex, &e, NULL, &cerr) == 0) {
    f->from_cache = true;
    took(f, &e);
    goto out;
  }
  if (!f->force &&
      store_get_shared(d, conn, &f->fullkey, f->hex, &f->label, &f->lease,
                       &f->abandoned, &f->no_compile, &e)) {
    f->from_l2 = true;
    took(f, &e);
    if (e.stored)
      explorer_keep(d, conn, f->key, f->msg, NULL);
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
    store_lease_renew(d, f->key, &f->lease);
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
    int64_t t0 = gc_now_us();
    store_entry put = {.data = f->out.artifact,
                       .len = f->out.len,
                       .compile_us = f->out.micros};
    if (store_put(d, conn, &f->fullkey, f->hex, &f->label, &put) == 0)
      explorer_keep(d, conn, f->key, f->msg, &f->out);
    f->stored = put.stored;
    memcpy(f->digest, put.digest, GC_DIGEST_LEN);
    f->is_signed = put.is_signed;
    f->sig = put.sig;
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
  /* stored (or failed): the others need not wait */
  store_lease_release(d, f->key, &f->lease);
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
      compile_log_done_ex(w->call, f->hex, &f->fullkey, NULL, "refused-role",
                          GRPC_STATUS_PERMISSION_DENIED, w->validate_us,
                          w->key_us, -1, -1, 0, msg);
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
      daemon_result res = {.hex = f->hex,
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
      compile_log_done_ex(
          w->call, f->hex, &f->fullkey,
          served == COMPILED__V1__SERVED__SERVED_COMPILED ? &f->out : NULL,
          served == COMPILED__V1__SERVED__SERVED_COMPILED ? "compiled"
          : served == COMPILED__V1__SERVED__SERVED_JOINED ? "joined"
          : served == COMPILED__V1__SERVED__SERVED_L2_HIT ? "l2-hit"
                                                          : "hit",
          0, w->validate_us, w->key_us, queue_us, f->out.micros, f->out.len,
          NULL);
      daemon_send_result(w->call, &res);
    } else {
      compile_log_done_ex(w->call, f->hex, &f->fullkey, NULL, "failed",
                          (int)daemon_status_of(f->rc), w->validate_us,
                          w->key_us, queue_us, -1, 0, f->err.msg);
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
