/*
 * daemon.h: the state of the compiled process and what its parts share.
 *
 * Ownership. Everything under "loop-owned" is touched only on the libuv loop
 * thread. Counters are atomics any thread may bump. The cache is used
 * through one connection per thread (daemon_conn()).
 */
#ifndef DAEMON_DAEMON_H
#define DAEMON_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "cache/cache.h"
#include "compiled/v1/compiled.pb-c.h"
#include "compiler/graph.h"
#include "compiler/key.h"
#include "daemon/auth.h"
#include "daemon/config.h"
#include "daemon/l2.h"
#include "daemon/server.h"
#include "daemon/sign.h"
#include "daemon/tls.h"
#include "daemon/toolchain.h"
#include "daemon/lru.h"
#include "daemon/pool.h"
#include "daemon/recent.h"
#include "daemon/server.h"

#define DAEMON_VERSION "0.1.0"

typedef struct flight flight;

/* Upper bounds of the compile-duration histogram's buckets (us). */
#define DAEMON_COMPILE_BUCKETS_US                                              \
  {                                                                            \
    10000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, \
        30000000, 60000000                                                     \
  }
#define DAEMON_COMPILE_NBUCKETS 12 /* the 11 bounds and +Inf */

typedef struct daemon_stats {
  atomic_uint_fast64_t requests; /* Compile requests */
  atomic_uint_fast64_t hits;     /* served from the cache (Compile, Fetch) */
  atomic_uint_fast64_t misses;   /* needed a compile (new or joined) */
  atomic_uint_fast64_t joins;    /* joined a compile in flight */
  atomic_uint_fast64_t compiles; /* compiles run to their end (flight.c's
                                   count_compile) */
  atomic_uint_fast64_t compile_failures;
  atomic_uint_fast64_t failure_hits; /* answered from remembered failures */
  atomic_uint_fast64_t rejected_busy;
  atomic_uint_fast64_t saved_us;        /* compile time the hits saved */
  atomic_uint_fast64_t evicted;         /* entries removed by Evict calls */
  atomic_uint_fast64_t hot_hits;        /* hits from the in-memory tier */
  atomic_uint_fast64_t memo_hits;       /* keys known from the request bytes */
  atomic_uint_fast64_t rejected_memory; /* refused: memory budget */
  atomic_uint_fast64_t native_compiles; /* artifacts with native code */
  atomic_uint_fast64_t native_failures; /* native code failed: ATen program */
  atomic_uint_fast64_t unauthenticated; /* refused: no or unknown token */
  atomic_uint_fast64_t permission_denied;  /* refused: role too low */
  atomic_uint_fast64_t signature_failures; /* entries not served (sign.h) */
  atomic_uint_fast64_t l2_hits;            /* served from Redis */
  /* the durations of those compiles: counts per bucket of
   * DAEMON_COMPILE_BUCKETS_US (the last: +Inf), their sum */
  atomic_uint_fast64_t compile_hist[12];
  atomic_uint_fast64_t compile_sum_us;
  atomic_uint_fast64_t l2_puts;         /* entries stored in Redis */
  atomic_uint_fast64_t lease_waits;     /* compiles another daemon ran */
  atomic_uint_fast64_t lease_takeovers; /* ... until its lease expired, was
                                           not honoured or waited too long */
  atomic_uint_fast64_t http_dropped;    /* slow /metrics connections closed */
  atomic_int queued;                    /* mirrors of loop state, for Stats */
  atomic_int running;
} daemon_stats;

typedef struct daemon_ctx {
  config cfg;
  auth *auth;     /* bearer tokens (--tokens); NULL: every client is admin */
  signer *signer; /* --signing-keys; NULL: artifacts are not signed */
  l2 *l2;         /* --redis: the shared tier; NULL: none */
  struct MHD_Daemon *metrics; /* --metrics-listen (metrics.c) */
  tls_server *tls;            /* --tls-cert; NULL: plain gRPC */
  char owner[96];             /* this daemon's id in leases: host:pid:random */
  uv_loop_t *loop;
  srv *server;
  int port; /* bound port */
  cache_store *cache;
  daemon_toolchain toolchain; /* the C compiler native code is built with */
  gc_arena *target_arena;     /* owns the target's strings */
  gc_target target;           /* the host's, toolchain identity included */
  gc_limits limits;   /* decode limits, derived from the settings (memory.c) */
  gc_budget budget;   /* memory held by requests (memory.c) */
  size_t big_ceiling; /* how far big requests may fill the budget */
  pool *decoders;     /* decodes big requests (memory.c, compile.c) */
  pool *memo_lane;    /* looks big requests up in the memo first */
  atomic_bool trim_pending; /* a malloc_trim is queued on the decoders */
  daemon_stats stats;
  lru memo; /* request digest -> key (memo_entry) */
  lru hot;  /* key -> prebuilt hit response (hot_entry) */
  int64_t started_us;
  int64_t started_unix;

  /* --metrics-listen's connections, for its slow peers (metrics.c) */
  struct http_peers *metrics_peers;

  /* the compile explorer (explorer.h): its state, and the requests of late
   * (filled where Compile requests are logged, compile.c) */
  struct explorer *explorer;
  recent recent;

  /* cache connections opened by any thread, closed at exit */
  pthread_mutex_t conns_mu;
  cache_conn **conns;
  int nconns, conns_cap;

  /* loop-owned */
  flight *flights;                 /* every flight, queued or running */
  flight *queue_head, *queue_tail; /* flights waiting for a worker, FIFO */
  int nqueued, nrunning;
  atomic_bool draining; /* read by health checks on any thread */
  bool lame_duck_over;  /* draining: the lame-duck period has passed */
  bool server_closing;  /* draining: the gRPC server is shutting down */
  bool server_done;     /* every call has ended (draining) */
  bool stopped;
  uv_signal_t sig_term, sig_int, sig_hup;
  uv_timer_t grace_timer;
  uv_timer_t lame_duck_timer;
} daemon_ctx;

/* The calling thread's cache connection (opened on first use); NULL after
 * logging an error. */
cache_conn *daemon_conn(daemon_ctx *d);

/* Registers the RPC handlers (compile.c, admin.c). */
void compile_register(daemon_ctx *d);

/* Sets up and tears down the request memo and the store's hot tier
 * (compile.c, store.h). */
int compile_init(daemon_ctx *d);
void compile_cleanup(daemon_ctx *d);

void admin_register(daemon_ctx *d);

/* Starts the /metrics and /healthz server when --metrics-listen is set;
 * 0, or -1 with a message. metrics_stop stops it (metrics.c). */
int metrics_start(daemon_ctx *d, char *err, size_t errlen);
void metrics_stop(daemon_ctx *d);

/* srv_options.auth: the role of a call's bearer token (admin for every call
 * without --tokens; health checks need none). */
int daemon_auth(void *user, const char *method, const char *value, size_t len,
                char *who, size_t wholen);

/* Whether call c's role is at least `need`; if not, finishes it
 * PERMISSION_DENIED naming what needed more (and drops the handler's
 * reference). */
bool daemon_allow(daemon_ctx *d, srv_call *c, auth_role need, const char *what);

/* ---- memory.c: the budget for requests ---- */

/* Sets the budget and the limits from the settings and starts the decode
 * threads; memory_cleanup stops them. */
int memory_init(daemon_ctx *d);
void memory_cleanup(daemon_ctx *d);

/* True for a request decoded on the decode threads, not a CQ thread. */
bool memory_is_big(daemon_ctx *d, size_t request_len);

/* How far a request of this size may fill the budget (0: all of it). */
size_t memory_ceiling(daemon_ctx *d, size_t request_len);

/* A new arena for a request of this size: the per-request limit, charged to
 * the budget up to memory_ceiling. NULL when out of memory. */
gc_arena *memory_arena(daemon_ctx *d, size_t request_len);

/* Frees a request's arena (NULL is fine); after a big one, returns freed
 * memory to the system (malloc_trim on a decode thread). */
void memory_free_arena(daemon_ctx *d, gc_arena *a);

/* A job that held `held` bytes ended (trims after big ones). */
void memory_job_ended(daemon_ctx *d, size_t held);

/* Fills err (GC_ENOMEM) for a request of `len` bytes the budget cannot
 * take, having held `own` bytes itself when refused, and counts it. */
void memory_refused(daemon_ctx *d, size_t len, size_t own, gc_error *err);

/* When rc is GC_ENOMEM because arena `a` was refused by the budget or the
 * per-request limit, rewrites err to say which and returns true. */
bool memory_explain(daemon_ctx *d, const gc_arena *a, size_t len, int rc,
                    gc_error *err);

/* Called on the loop when the last compile ended, during a drain. */
void daemon_maybe_stop(daemon_ctx *d);

/* Number of flights queued or running (loop thread; flight.c). */
int compile_inflight(daemon_ctx *d);

/* Tells every running compile to stop at its next stage (loop thread;
 * flight.c). */
void compile_abandon_all(daemon_ctx *d);

#endif
