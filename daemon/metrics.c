/*
 * metrics.c: /metrics (Prometheus text format 0.0.4) and /healthz on a
 * separate HTTP port (--metrics-listen), served by libmicrohttpd on a
 * thread of its own. See daemon.h and docs/operations.md for the metrics.
 *
 * Everything read here is an atomic counter or a snapshot a function of
 * another module takes under its own lock, so a scrape never blocks the
 * gRPC threads or the event loop. The endpoint carries no secrets (no
 * keys, tokens or cache keys) and needs no token: bind it to loopback or
 * to the monitoring network.
 *
 * Slow peers. libmicrohttpd's own connection timeout is one of inactivity,
 * restarted by every byte, and its connection limit refuses newcomers: 200
 * connections sending a byte a second kept /healthz unreachable for as
 * long as they kept sending. So every connection is tracked here (the
 * table below, filled by libmicrohttpd's connection notifications):
 *
 *   deadline  a request must be complete (its headers in) within
 *             --metrics-request-timeout seconds of the accept, or of the
 *             previous response on a kept-alive connection; a watchdog
 *             thread shuts a connection past it down
 *   room      at PEERS_CAP connections, a newcomer makes room by shutting
 *             down the connection that has waited longest for its request.
 *             A probe's request takes a millisecond, so slow peers, however
 *             many, cannot keep it out; they only push each other out.
 *
 * libmicrohttpd accepts up to twice PEERS_CAP (what is shut down leaves
 * its table in its next round) and polls with epoll, so descriptors above
 * FD_SETSIZE (the gRPC connections take many) are served too.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "common/monocond.h"
#include "common/rpcwire.h"
#include "daemon/daemon.h"
#include "daemon/explorer.h"
#include "daemon/log.h"

typedef struct text {
  char *s;
  size_t len, cap;
  bool failed;
} text;

static void put(text *t, const char *fmt, ...) {
  if (t->failed)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = (t->cap + (size_t)n) * 2;
    char *s = realloc(t->s, cap);
    if (!s) {
      t->failed = true;
      return;
    }
    t->s = s;
    t->cap = cap;
  }
}

static void metric(text *t, const char *name, const char *type,
                   const char *help) {
  put(t, "# HELP compiled_%s %s\n# TYPE compiled_%s %s\n", name, help, name,
      type);
}

static void one(text *t, const char *name, const char *type, const char *help,
                double v) {
  metric(t, name, type, help);
  put(t, "compiled_%s %.17g\n", name, v);
}

static void request_line(void *arg, const char *method, int code, uint64_t n) {
  text *t = arg;
  const char *name = method ? strrchr(method, '/') : NULL;
  put(t, "compiled_requests_total{method=\"%s\",code=\"%s\"} %llu\n",
      name ? name + 1 : "unknown", rpc_code_name((grpc_status_code)code),
      (unsigned long long)n);
}

#define A(x) ((double)atomic_load(&d->stats.x))

static void render(daemon_ctx *d, text *t) {
  metric(t, "requests_total", "counter",
         "gRPC calls answered, by method and status code.");
  srv_method_counts(d->server, request_line, t);
  metric(t, "cache_hits_total", "counter",
         "Compile requests served from a cache tier: memory (prebuilt "
         "responses), l1 (this daemon's sqlite), l2 (the cluster's Redis).");
  put(t, "compiled_cache_hits_total{tier=\"memory\"} %.17g\n", A(hot_hits));
  put(t, "compiled_cache_hits_total{tier=\"l1\"} %.17g\n",
      A(hits) - A(hot_hits));
  put(t, "compiled_cache_hits_total{tier=\"l2\"} %.17g\n", A(l2_hits));
  one(t, "cache_misses_total", "counter",
      "Compile requests found in neither the memory tier nor sqlite "
      "(served from Redis, a compile, or a join).",
      A(misses));
  one(t, "joins_total", "counter",
      "Requests that waited for a compile already running here.", A(joins));
  one(t, "compiles_total", "counter",
      "Compiles run to their end (succeeded or failed).", A(compiles));
  one(t, "compile_failures_total", "counter", "Compiles that failed.",
      A(compile_failures));
  one(t, "native_failures_total", "counter",
      "Compiles whose native code failed (served as ATen programs).",
      A(native_failures));
  metric(t, "compile_duration_seconds", "histogram",
         "Duration of the compiles compiles_total counts.");
  static const int64_t bounds[] = DAEMON_COMPILE_BUCKETS_US;
  uint64_t cum = 0;
  for (int b = 0; b < DAEMON_COMPILE_NBUCKETS; b++) {
    cum += atomic_load(&d->stats.compile_hist[b]);
    if (b < DAEMON_COMPILE_NBUCKETS - 1)
      put(t, "compiled_compile_duration_seconds_bucket{le=\"%g\"} %llu\n",
          (double)bounds[b] / 1e6, (unsigned long long)cum);
    else
      put(t, "compiled_compile_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
          (unsigned long long)cum);
  }
  put(t, "compiled_compile_duration_seconds_sum %.6f\n",
      A(compile_sum_us) / 1e6);
  put(t, "compiled_compile_duration_seconds_count %llu\n",
      (unsigned long long)cum);
  one(t, "queue_depth", "gauge", "Compiles waiting for a worker.", A(queued));
  one(t, "compiles_in_flight", "gauge", "Compiles running on a worker.",
      A(running));
  one(t, "lease_waits_total", "counter",
      "Compiles left to another daemon holding the cluster lease.",
      A(lease_waits));
  one(t, "lease_takeovers_total", "counter",
      "Compiles run here despite another's lease: expired, not honoured "
      "(no TTL, or one over --redis-lease-ms), or waited on too long.",
      A(lease_takeovers));
  one(t, "l2_puts_total", "counter", "Artifacts stored in Redis.", A(l2_puts));
  one(t, "signature_failures_total", "counter",
      "Cache entries not served: a missing, unknown or wrong signature, or "
      "(Redis) a size, compression or digest failing its check.",
      A(signature_failures));
  one(t, "redis_errors_total", "counter",
      "Redis calls that failed (timeouts, connection errors).",
      d->l2 ? (double)l2_errors(d->l2) : 0);
  one(t, "redis_up", "gauge",
      "1 when the last Redis call succeeded (0 as well without --redis).",
      d->l2 && l2_up(d->l2));
  one(t, "rejected_busy_total", "counter",
      "Requests refused RESOURCE_EXHAUSTED: the compile queue was full.",
      A(rejected_busy));
  one(t, "rejected_memory_total", "counter",
      "Requests refused RESOURCE_EXHAUSTED: the memory budget was used up.",
      A(rejected_memory));
  one(t, "rejected_client_total", "counter",
      "Calls refused RESOURCE_EXHAUSTED: their client's own limits.",
      (double)srv_client_rejections(d->server));
  one(t, "unauthenticated_total", "counter",
      "Calls refused for no or an unknown bearer token.", A(unauthenticated));
  one(t, "permission_denied_total", "counter",
      "Calls refused for their token's role.", A(permission_denied));
  cache_stats cs;
  cache_stats_get(d->cache, &cs);
  one(t, "cache_bytes", "gauge", "Bytes stored in sqlite (compressed).",
      (double)cs.bytes);
  one(t, "cache_entries", "gauge", "Entries in sqlite.", (double)cs.entries);
  one(t, "compile_seconds_saved_total", "counter",
      "Compile time the hits of this daemon saved.", A(saved_us) / 1e6);
  one(t, "draining", "gauge", "1 while the daemon drains after a signal.",
      atomic_load(&d->draining));
  one(t, "http_connections_dropped_total", "counter",
      "Connections to this endpoint closed for no complete request within "
      "--metrics-request-timeout, or to make room for a newer one.",
      A(http_dropped));
}

/* ---- the connections (see the top of the file) ---- */

#define PEERS_CAP 64
#define HTTP_THREADS 4            /* with the explorer */
#define PEERS_MAX (2 * PEERS_CAP) /* libmicrohttpd's connection limit */

typedef struct peer {
  int fd;        /* -1: a free entry */
  bool waiting;  /* for its request (or the rest of it) */
  bool dropped;  /* shut down by us; the entry goes when it is closed */
  int64_t since; /* when it began waiting (ms, monotonic) */
} peer;

typedef struct http_peers {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* the watchdog's: a new deadline, or stop */
  pthread_t watchdog;
  bool watching; /* the watchdog thread runs */
  bool stop;
  int timeout_ms; /* --metrics-request-timeout */
  peer slot[PEERS_MAX];
} http_peers;

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Shuts connection `pe` down (libmicrohttpd then closes it and tells
 * peer_notify); called with mu held, so it cannot have been closed yet. */
static void drop(daemon_ctx *d, peer *pe, const char *why) {
  shutdown(pe->fd, SHUT_RDWR);
  pe->dropped = true;
  atomic_fetch_add(&d->stats.http_dropped, 1);
  LOG(LOG_DEBUG, "metrics: HTTP connection closed: %s", why);
}

static void *watchdog(void *arg) {
  daemon_ctx *d = arg;
  http_peers *hp = d->metrics_peers;
  pthread_mutex_lock(&hp->mu);
  while (!hp->stop) {
    int64_t now = mono_ms(), next = INT64_MAX;
    for (int i = 0; i < PEERS_MAX; i++) {
      peer *pe = &hp->slot[i];
      if (pe->fd < 0 || !pe->waiting || pe->dropped)
        continue;
      if (now - pe->since >= hp->timeout_ms)
        drop(d, pe, "no complete request within --metrics-request-timeout");
      else if (pe->since + hp->timeout_ms < next)
        next = pe->since + hp->timeout_ms;
    }
    if (next == INT64_MAX) {
      pthread_cond_wait(&hp->cv, &hp->mu);
      continue;
    }
    struct timespec until = {(time_t)(next / 1000),
                             (long)(next % 1000) * 1000000};
    pthread_cond_timedwait(&hp->cv, &hp->mu, &until);
  }
  pthread_mutex_unlock(&hp->mu);
  return NULL;
}

/* The entry of `conn` (its socket context), or NULL. */
static peer *peer_of(http_peers *hp, struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  intptr_t i = ci ? (intptr_t)ci->socket_context : 0;
  return i > 0 && i <= PEERS_MAX ? &hp->slot[i - 1] : NULL;
}

/* MHD_OPTION_NOTIFY_CONNECTION: a connection accepted (given an entry,
 * room made at the cap) or closed (its entry freed). On libmicrohttpd's
 * thread, before it closes the socket. */
static void peer_notify(void *cls, struct MHD_Connection *conn, void **ctx,
                        enum MHD_ConnectionNotificationCode what) {
  daemon_ctx *d = cls;
  http_peers *hp = d->metrics_peers;
  pthread_mutex_lock(&hp->mu);
  if (what == MHD_CONNECTION_NOTIFY_CLOSED) {
    intptr_t i = (intptr_t)*ctx;
    if (i > 0 && i <= PEERS_MAX)
      hp->slot[i - 1].fd = -1;
    *ctx = NULL;
    pthread_mutex_unlock(&hp->mu);
    return;
  }
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  int live = 0, free_at = -1, oldest = -1;
  for (int i = 0; i < PEERS_MAX; i++) {
    peer *pe = &hp->slot[i];
    if (pe->fd < 0) {
      free_at = free_at < 0 ? i : free_at;
      continue;
    }
    if (pe->dropped)
      continue;
    live++;
    if (pe->waiting && (oldest < 0 || pe->since < hp->slot[oldest].since))
      oldest = i;
  }
  if (!ci || free_at < 0) { /* cannot happen: libmicrohttpd's limit */
    pthread_mutex_unlock(&hp->mu);
    return;
  }
  peer *pe = &hp->slot[free_at];
  *pe = (peer){.fd = ci->connect_fd, .waiting = true, .since = mono_ms()};
  *ctx = (void *)(intptr_t)(free_at + 1);
  if (live >= PEERS_CAP) {
    if (oldest >= 0)
      drop(d, &hp->slot[oldest], "room for a newer connection at the cap");
    else
      drop(d, pe, "every connection is being answered");
  }
  pthread_cond_signal(&hp->cv);
  pthread_mutex_unlock(&hp->mu);
}

/* MHD_OPTION_NOTIFY_COMPLETED: a request answered (or given up); a
 * kept-alive connection waits for its next one from now. */
static void request_done(void *cls, struct MHD_Connection *conn, void **state,
                         enum MHD_RequestTerminationCode toe) {
  (void)toe;
  explorer_request_done(*state); /* a login form's body, or NULL */
  *state = NULL;
  daemon_ctx *d = cls;
  http_peers *hp = d->metrics_peers;
  pthread_mutex_lock(&hp->mu);
  peer *pe = peer_of(hp, conn);
  if (pe && pe->fd >= 0) {
    pe->waiting = true;
    pe->since = mono_ms();
    pthread_cond_signal(&hp->cv);
  }
  pthread_mutex_unlock(&hp->mu);
}

/* Its request is in: no longer waiting. */
static void request_in(daemon_ctx *d, struct MHD_Connection *conn) {
  http_peers *hp = d->metrics_peers;
  pthread_mutex_lock(&hp->mu);
  peer *pe = peer_of(hp, conn);
  if (pe)
    pe->waiting = false;
  pthread_mutex_unlock(&hp->mu);
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_len, void **state) {
  (void)version;
  daemon_ctx *d = cls;
  unsigned status = MHD_HTTP_OK;
  const char *type = "text/plain; charset=utf-8";
  text t = {0};
  request_in(d, conn);
  int er = explorer_answer(d, conn, url, method, upload, upload_len, state);
  if (er >= 0)
    return (enum MHD_Result)er;
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    status = MHD_HTTP_METHOD_NOT_ALLOWED;
    put(&t, "only GET\n");
  } else if (!strcmp(url, "/metrics")) {
    type = "text/plain; version=0.0.4; charset=utf-8";
    render(d, &t);
  } else if (!strcmp(url, "/healthz")) {
    bool draining = atomic_load(&d->draining);
    status = draining ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK;
    put(&t, "%s; redis %s\n", draining ? "draining" : "ok",
        !d->l2         ? "not configured"
        : l2_up(d->l2) ? "up"
                       : "down");
  } else {
    status = MHD_HTTP_NOT_FOUND;
    put(&t, "not found: /metrics, /healthz%s are served here\n",
        d->cfg.explorer ? ", /explorer/ and /api/" : "");
  }
  if (t.failed) {
    free(t.s);
    return MHD_NO;
  }
  struct MHD_Response *r =
      MHD_create_response_from_buffer(t.len, t.s, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(t.s);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", type);
  enum MHD_Result rc = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return rc;
}

int metrics_start(daemon_ctx *d, char *err, size_t errlen) {
  if (!d->cfg.metrics_listen[0])
    return 0;
  char host[256];
  const char *colon = strrchr(d->cfg.metrics_listen, ':');
  if (!colon || colon == d->cfg.metrics_listen ||
      (size_t)(colon - d->cfg.metrics_listen) >= sizeof host) {
    snprintf(err, errlen, "--metrics-listen %s: want HOST:PORT",
             d->cfg.metrics_listen);
    return -1;
  }
  snprintf(host, sizeof host, "%.*s", (int)(colon - d->cfg.metrics_listen),
           d->cfg.metrics_listen);
  if (host[0] == '[' && host[strlen(host) - 1] == ']') {
    memmove(host, host + 1, strlen(host));
    host[strlen(host) - 1] = '\0';
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                  *ai = NULL;
  int g = getaddrinfo(host, colon + 1, &hints, &ai);
  if (g != 0 || !ai) {
    snprintf(err, errlen, "--metrics-listen %s: %s", d->cfg.metrics_listen,
             gai_strerror(g));
    return -1;
  }
  http_peers *hp = calloc(1, sizeof *hp);
  if (!hp) {
    freeaddrinfo(ai);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  pthread_mutex_init(&hp->mu, NULL);
  monocond_init(&hp->cv);
  hp->timeout_ms = d->cfg.metrics_timeout * 1000;
  for (int i = 0; i < PEERS_MAX; i++)
    hp->slot[i].fd = -1;
  d->metrics_peers = hp;
  hp->watching = pthread_create(&hp->watchdog, NULL, watchdog, d) == 0;
  if (!hp->watching) {
    freeaddrinfo(ai);
    metrics_stop(d);
    snprintf(err, errlen, "--metrics-listen: no thread");
    return -1;
  }
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
  if (ai->ai_family == AF_INET6)
    flags |= MHD_USE_IPv6;
  /* libmicrohttpd's own timeout is a backstop: ours is per request */
  /* Threads: the explorer's pages may take a while (a program derived
   * again: explorer_derive.c), so that /healthz and /metrics stay
   * answered, requests are spread over a few. */
  d->metrics = MHD_start_daemon(
      flags, 0, NULL, NULL, answer, d, MHD_OPTION_THREAD_POOL_SIZE,
      (unsigned)(d->cfg.explorer ? HTTP_THREADS : 1), MHD_OPTION_SOCK_ADDR,
      ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT, (unsigned)PEERS_MAX,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)d->cfg.metrics_timeout,
      MHD_OPTION_NOTIFY_CONNECTION, peer_notify, d, MHD_OPTION_NOTIFY_COMPLETED,
      request_done, d, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!d->metrics) {
    metrics_stop(d);
    snprintf(err, errlen, "--metrics-listen %s: cannot listen there",
             d->cfg.metrics_listen);
    return -1;
  }
  const union MHD_DaemonInfo *info =
      MHD_get_daemon_info(d->metrics, MHD_DAEMON_INFO_BIND_PORT);
  LOG(LOG_INFO, "metrics on http://%s:%u/metrics and /healthz%s", host,
      info ? (unsigned)info->port : 0,
      d->cfg.explorer ? "; the explorer on /explorer/ and /api/" : "");
  if (d->cfg.explorer && d->auth &&
      !auth_loopback_listen(d->cfg.metrics_listen))
    LOG(LOG_WARN,
        "the explorer is served over plain HTTP on %s: tokens and session "
        "cookies cross the network in clear; put a TLS proxy in front of it "
        "or bind --metrics-listen to loopback",
        d->cfg.metrics_listen);
  return 0;
}

void metrics_stop(daemon_ctx *d) {
  if (d->metrics)
    MHD_stop_daemon(d->metrics); /* every connection closed and notified */
  d->metrics = NULL;
  http_peers *hp = d->metrics_peers;
  if (!hp)
    return;
  pthread_mutex_lock(&hp->mu);
  hp->stop = true;
  pthread_cond_signal(&hp->cv);
  pthread_mutex_unlock(&hp->mu);
  if (hp->watching)
    pthread_join(hp->watchdog, NULL);
  pthread_cond_destroy(&hp->cv);
  pthread_mutex_destroy(&hp->mu);
  free(hp);
  d->metrics_peers = NULL;
}
