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
#include "daemon/config.h"
#include "daemon/lru.h"
#include "daemon/server.h"

#define DAEMON_VERSION "0.1.0"

typedef struct flight flight;

typedef struct daemon_stats {
  atomic_uint_fast64_t requests; /* Compile requests */
  atomic_uint_fast64_t hits;     /* served from the cache */
  atomic_uint_fast64_t misses;   /* needed a compile (new or joined) */
  atomic_uint_fast64_t joins;    /* joined a compile in flight */
  atomic_uint_fast64_t compiles; /* compiles run */
  atomic_uint_fast64_t compile_failures;
  atomic_uint_fast64_t failure_hits; /* answered from remembered failures */
  atomic_uint_fast64_t rejected_busy;
  atomic_uint_fast64_t saved_us;  /* compile time the hits saved */
  atomic_uint_fast64_t evicted;   /* entries removed by Evict calls */
  atomic_uint_fast64_t hot_hits;  /* hits from the in-memory tier */
  atomic_uint_fast64_t memo_hits; /* keys known from the request bytes */
  atomic_int queued;              /* mirrors of loop state, for Stats */
  atomic_int running;
} daemon_stats;

typedef struct daemon_ctx {
  config cfg;
  uv_loop_t *loop;
  srv *server;
  int port; /* bound port */
  cache_store *cache;
  gc_arena *target_arena; /* owns the target's strings */
  gc_target target;       /* the host's, toolchain identity included */
  gc_limits limits;
  daemon_stats stats;
  lru memo; /* request digest -> key (memo_entry) */
  lru hot;  /* key -> prebuilt hit response (hot_entry) */
  int64_t started_us;
  int64_t started_unix;

  /* cache connections opened by any thread, closed at exit */
  pthread_mutex_t conns_mu;
  cache_conn **conns;
  int nconns, conns_cap;

  /* loop-owned */
  flight *flights;                 /* every flight, queued or running */
  flight *queue_head, *queue_tail; /* flights waiting for a worker, FIFO */
  int nqueued, nrunning;
  atomic_bool draining; /* read by health checks on any thread */
  bool server_done;     /* every call has ended (draining) */
  bool stopped;
  uv_signal_t sig_term, sig_int, sig_hup;
  uv_timer_t grace_timer;
} daemon_ctx;

/* The calling thread's cache connection (opened on first use); NULL after
 * logging an error. */
cache_conn *daemon_conn(daemon_ctx *d);

/* Registers the RPC handlers (compile.c, admin.c). */
void compile_register(daemon_ctx *d);

/* Sets up and tears down the request memo and the hot tier (compile.c). */
int compile_init(daemon_ctx *d);
void compile_cleanup(daemon_ctx *d);

/* Forgets hot responses: one key, or all (NULL). After evictions. */
void compile_forget(daemon_ctx *d, const uint8_t *key);

void admin_register(daemon_ctx *d);

/* Called on the loop when the last compile ended, during a drain. */
void daemon_maybe_stop(daemon_ctx *d);

/* Number of flights queued or running (loop thread). */
int compile_inflight(daemon_ctx *d);

/* Tells every running compile to stop at its next stage (loop thread). */
void compile_abandon_all(daemon_ctx *d);

/* Ends a call refusing a graph: the status for `code`, the message, and a
 * GraphError in the "compiled-error-bin" trailer (compile.c). */
void daemon_finish_graph_error(srv_call *c, int code, const gc_error *err);

/* Hex of a digest into a buffer of GC_HEX_LEN. */

void daemon_hex(const uint8_t *digest, char *out);

/* Fills a KeyComponents message from key parts (strings in `hex`, which must
 * hold GC_KEY_NCOMPONENTS * GC_HEX_LEN bytes). */
void daemon_components(const uint8_t parts[][GC_DIGEST_LEN],
                       Compiled__V1__KeyComponents *kc, char *hex);

#endif
