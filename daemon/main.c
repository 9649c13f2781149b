/*
 * main.c: the compiled daemon: settings, cache, target, server, signals.
 *
 * Shutdown (SIGTERM or SIGINT) is a drain in two steps. First a lame duck:
 * the port stays open and the daemon answers new calls itself: hits are
 * served, a request that would start a new compile gets UNAVAILABLE ("the
 * daemon is stopping"), health says NOT_SERVING. Closing the port at once
 * would let the gRPC core kill calls it had accepted but not yet handed over
 * (their clients see a bare CANCELLED). Once --lame-duck-ms has passed and
 * no compile is queued or running, the gRPC server shuts down (no new
 * calls). Compiles get --grace-seconds in all, then what is left is
 * cancelled; when the last call and compile are gone, the cache (flushing
 * its pending updates) and the log are closed. A second signal skips the
 * grace period.
 * SIGHUP reopens the log file and reloads the --tokens file.
 *
 * Authentication (auth.h): with --tokens every call but a health check
 * needs a bearer token; without it every client is admin, so the daemon
 * refuses to listen on anything but loopback unless --insecure says so.
 */
#include <errno.h>
#include <grpc/grpc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/spawn.h"
#include "compiler/pipeline.h"
#include "compiler/target.h"
#include "daemon/daemon.h"
#include "daemon/explorer.h"
#include "daemon/log.h"

static _Thread_local cache_conn *thread_conn;

cache_conn *daemon_conn(daemon_ctx *d) {
  if (thread_conn)
    return thread_conn;
  cache_error err;
  cache_conn *c;
  if (cache_conn_open(d->cache, &c, &err) != 0) {
    LOG(LOG_ERROR, "opening a cache connection: %s", err.msg);
    return NULL;
  }
  pthread_mutex_lock(&d->conns_mu);
  if (d->nconns == d->conns_cap) {
    int cap = d->conns_cap ? d->conns_cap * 2 : 16;
    cache_conn **n = realloc(d->conns, (size_t)cap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&d->conns_mu);
      cache_conn_close(c);
      return NULL;
    }
    d->conns = n;
    d->conns_cap = cap;
  }
  d->conns[d->nconns++] = c;
  pthread_mutex_unlock(&d->conns_mu);
  thread_conn = c;
  return c;
}

static void close_conns(daemon_ctx *d) {
  for (int i = 0; i < d->nconns; i++)
    cache_conn_close(d->conns[i]);
  free(d->conns);
  d->conns = NULL;
  d->nconns = 0;
}

/* ---- shutdown ---- */

static void close_handle(uv_handle_t *h) {
  (void)h;
}

static void on_server_done(void *arg);

/* Once the server shuts down, the gRPC core sends every connection a GOAWAY
 * and waits for the client to acknowledge it (a ping) and to close. A client
 * that is not polling its channel (Python's between calls, or one it has
 * dropped but not closed) answers only at its backup poll, every 5 s, and
 * twice: a stop took 5-10 s, and one that never reads its socket 20 s (the
 * core's limit). So when IDLE_CLOSE_MS after the port closed no call is
 * left, the daemon closes the connections still open (each call's status
 * was sent before the call was freed, and a client waiting for an answer
 * polls its channel); while calls are live, it checks again every
 * IDLE_CLOSE_MS. */
#define IDLE_CLOSE_MS 500

static void on_idle_check(uv_timer_t *t) {
  daemon_ctx *d = t->data;
  if (d->server_done || !d->server)
    return;
  if (srv_live_calls(d->server) > 0) {
    uv_timer_start(t, on_idle_check, IDLE_CLOSE_MS, 0);
    return;
  }
  LOG(LOG_INFO, "no call left: closing the connections of clients that "
                "have not closed them");
  srv_cancel_all(d->server);
}

/* Ends the lame duck once its time is up and no compile is left. */
static void maybe_close_server(daemon_ctx *d) {
  if (d->server_closing || !d->lame_duck_over || compile_inflight(d) > 0)
    return;
  d->server_closing = true;
  LOG(LOG_INFO, "closing the port (no compile left)");
  srv_shutdown(d->server, on_server_done, d);
  /* the lame duck's timer is free now */
  if (!d->server_done)
    uv_timer_start(&d->lame_duck_timer, on_idle_check, IDLE_CLOSE_MS, 0);
}

void daemon_maybe_stop(daemon_ctx *d) {
  if (!atomic_load(&d->draining) || d->stopped)
    return;
  maybe_close_server(d);
  if (!d->server_done || compile_inflight(d) > 0)
    return;
  d->stopped = true;
  LOG(LOG_INFO, "all calls and compiles finished; stopping");
  uv_timer_stop(&d->grace_timer);
  uv_close((uv_handle_t *)&d->grace_timer, close_handle);
  uv_timer_stop(&d->lame_duck_timer);
  uv_close((uv_handle_t *)&d->lame_duck_timer, close_handle);
  uv_close((uv_handle_t *)&d->sig_term, close_handle);
  uv_close((uv_handle_t *)&d->sig_int, close_handle);
  uv_close((uv_handle_t *)&d->sig_hup, close_handle);
  srv_free(d->server);
  d->server = NULL;
}

static void on_server_done(void *arg) {
  daemon_ctx *d = arg;
  d->server_done = true;
  daemon_maybe_stop(d);
}

/* A compile thread cannot be interrupted: one that never ends (a compiler
 * bug) would keep the daemon from ever stopping. OVERDUE_MS after the grace
 * period the daemon closes its log and exits with status 3 without waiting
 * for such compiles. */
#define OVERDUE_MS 10000

static void on_overdue(uv_timer_t *t) {
  daemon_ctx *d = t->data;
  int left = compile_inflight(d);
  if (left == 0)
    return;
  LOG(LOG_ERROR,
      "%d compiles still running %d s after the grace period: exiting "
      "without them (a compile that does not end is a bug: please report "
      "it with its graph)",
      left, OVERDUE_MS / 1000);
  /* The compile threads may be inside the cache: leave it as it is (every
   * stored entry is committed; only pending hit counts are lost). */
  LOG(LOG_INFO, "stopped (exit status 3: compiles abandoned)");
  log_close();
  _exit(3);
}

static void on_grace(uv_timer_t *t) {
  daemon_ctx *d = t->data;
  LOG(LOG_WARN, "grace period over: cancelling %d calls and %d compiles",
      srv_live_calls(d->server), compile_inflight(d));
  compile_abandon_all(d);
  uv_timer_start(&d->grace_timer, on_overdue, OVERDUE_MS, 0);
  d->lame_duck_over = true;
  if (!d->server_closing) {
    d->server_closing = true;
    srv_shutdown(d->server, on_server_done, d);
  }
  srv_cancel_all(d->server);
}

static void on_lame_duck_over(uv_timer_t *t) {
  daemon_ctx *d = t->data;
  d->lame_duck_over = true;
  daemon_maybe_stop(d);
}

static void begin_drain(daemon_ctx *d, const char *why) {
  if (atomic_exchange(&d->draining, true)) {
    LOG(LOG_WARN, "%s again: cancelling everything now", why);
    on_grace(&d->grace_timer);
    return;
  }
  LOG(LOG_INFO,
      "%s: draining (new compiles refused; %d compiles in flight, grace %ds)",
      why, compile_inflight(d), d->cfg.grace_seconds);
  uv_timer_start(&d->grace_timer, on_grace,
                 (uint64_t)d->cfg.grace_seconds * 1000, 0);
  uv_timer_start(&d->lame_duck_timer, on_lame_duck_over,
                 (uint64_t)(d->cfg.lame_duck_ms > 0 ? d->cfg.lame_duck_ms : 0),
                 0);
  daemon_maybe_stop(d);
}

static void on_signal(uv_signal_t *h, int signum) {
  daemon_ctx *d = h->data;
  if (signum == SIGHUP) {
    int rc = log_reopen();
    LOG(rc ? LOG_ERROR : LOG_INFO, "SIGHUP: log reopened%s",
        rc ? " (failed)" : "");
    if (d->auth) {
      char err[600];
      if (auth_reload(d->auth, d->cfg.tokens, err, sizeof err))
        LOG(LOG_ERROR, "SIGHUP: %s; keeping the previous tokens", err);
      else
        LOG(LOG_INFO, "SIGHUP: %d tokens reloaded from %s", auth_count(d->auth),
            d->cfg.tokens);
    }
    return;
  }
  begin_drain(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---- start-up ---- */

static int make_dirs(const char *path) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    if (mkdir(buf, 0700) != 0 && errno != EEXIST)
      return -1;
    *p = '/';
  }
  return mkdir(buf, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

static int open_cache(daemon_ctx *d) {
  if (make_dirs(d->cfg.cache_dir) != 0) {
    fprintf(stderr, "compiled: cannot create cache directory %s: %s\n",
            d->cfg.cache_dir, strerror(errno));
    return -1;
  }
  cache_config cc;
  cache_config_default(&cc);
  cc.dir = d->cfg.cache_dir;
  cc.max_bytes = d->cfg.cache_max_bytes;
  cc.failure_ttl_s = (uint32_t)d->cfg.failure_ttl;
  cache_error err;
  err.msg[0] = '\0';
  if (cache_store_open(&cc, &d->cache, &err) != 0) {
    fprintf(stderr, "compiled: cannot open the cache in %s: %s\n",
            d->cfg.cache_dir, err.msg);
    return -1;
  }
  if (err.msg[0])
    LOG(LOG_WARN, "cache: %s", err.msg);
  return 0;
}

static int check_cache(daemon_ctx *d) {
  cache_conn *c = daemon_conn(d);
  uint64_t n = 0;
  cache_error err;
  int rc = c ? cache_verify_all(c, &n, &err) : -1;
  if (rc == 0)
    printf("cache %s: ok (%llu entries verified)\n", d->cfg.cache_dir,
           (unsigned long long)n);
  else
    printf("cache %s: PROBLEM: %s\n", d->cfg.cache_dir,
           c ? err.msg : "no connection");
  return rc == 0 ? 0 : 1;
}

/* The C compiler for native code: private build directories under the
 * cache directory's tmp/ (same file system, mode 0700). */
static int init_toolchain(daemon_ctx *d) {
  char tmp[2048];
  snprintf(tmp, sizeof tmp, "%.2000s/tmp", d->cfg.cache_dir);
  if (daemon_toolchain_init(&d->toolchain, d->cfg.cc, tmp,
                            d->cfg.cc_timeout * 1000) != 0) {
    fprintf(stderr, "compiled: cannot create %s: %s\n", tmp, strerror(errno));
    return -1;
  }
  return 0;
}

/* The `cc --version` probe gets the compile time limit, at most 10 s. */
static int probe_ms(const daemon_ctx *d) {
  int s =
      d->cfg.cc_timeout > 0 && d->cfg.cc_timeout < 10 ? d->cfg.cc_timeout : 10;
  return s * 1000;
}

static int detect_target(daemon_ctx *d) {
  d->target_arena = gc_arena_new(0);
  if (!d->target_arena || gc_target_host(d->target_arena, &d->target) != 0)
    return -1;
  const char *cc = d->cfg.cc;
  char id[512], why[600];
  if (spawn_first_line(cc, "--version", probe_ms(d), id, sizeof id, why,
                       sizeof why) != 0) {
    LOG(LOG_WARN, "%s; the key will name the toolchain 'unknown'", why);
    d->target.toolchain = "unknown";
  } else {
    d->target.toolchain = gc_arena_strdup(d->target_arena, id);
    if (!d->target.toolchain)
      return -1;
  }
  return 0;
}

/* Raises the soft descriptor limit to the hard one; returns the soft limit
 * in force. */
static long raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 1024;
  rlim_t was = rl.rlim_cur;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
      rl.rlim_cur = was;
  }
  if (rl.rlim_cur != was)
    LOG(LOG_INFO, "descriptor limit raised from %llu to %llu",
        (unsigned long long)was, (unsigned long long)rl.rlim_cur);
  return rl.rlim_cur > (rlim_t)INT32_MAX ? INT32_MAX : (long)rl.rlim_cur;
}

/* Descriptors kept for everything but client connections: the log, the
 * loop and gRPC's own, a cache connection (database, -wal, -shm) per
 * thread, and per compile the toolchain's pipes and files. */
static long fds_reserved(const config *c) {
  return 64 + 8L * (c->workers + c->cq_threads + c->decode_threads);
}

/* The connection cap: the setting, lowered to what the descriptor limit
 * leaves once the reserve is set aside. */
static int connection_cap(daemon_ctx *d, long nofile) {
  long room = nofile - fds_reserved(&d->cfg);
  long cap = d->cfg.max_connections;
  if (room < 1)
    room = 1;
  if (cap > room) {
    LOG(LOG_WARN,
        "--max-connections %ld lowered to %ld: the descriptor limit is %ld "
        "and %ld are kept for the daemon's own use (raise LimitNOFILE / "
        "ulimit -n)",
        cap, room, nofile, fds_reserved(&d->cfg));
    cap = room;
  }
  return (int)cap;
}

/* What an entry read from Redis holds of the memory budget (l2.h): it is
 * charged like a request of its size, and one larger than a request may
 * hold is never read. */
static int l2_charge(void *ctx, size_t n) {
  daemon_ctx *d = ctx;
  if (n > d->big_ceiling)
    return L2_REFUSED;
  return gc_budget_charge(&d->budget, n, memory_ceiling(d, n)) ? 0
                                                               : L2_NO_MEMORY;
}

static void l2_release(void *ctx, size_t n) {
  daemon_ctx *d = ctx;
  gc_budget_release(&d->budget, n);
}

/* --redis, --redis-unsigned; 0 or an exit code. Needs init_signing. */
static int init_l2(daemon_ctx *d) {
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  unsigned rnd = 0;
  FILE *u = fopen("/dev/urandom", "rb");
  if (u) {
    if (fread(&rnd, sizeof rnd, 1, u) != 1)
      rnd = (unsigned)time(NULL);
    fclose(u);
  }
  snprintf(d->owner, sizeof d->owner, "%s:%d:%08x", host, (int)getpid(), rnd);
  if (!d->cfg.redis[0]) {
    if (d->cfg.redis_unsigned) {
      fprintf(stderr, "compiled: --redis-unsigned needs --redis URL\n");
      return 2;
    }
    return 0;
  }
  if (!d->signer && !d->cfg.redis_unsigned) {
    fprintf(stderr,
            "compiled: --redis without --signing-keys: anyone who can write "
            "to Redis could make this daemon serve their code, and its "
            "clients run it. Give every daemon of the cluster the same "
            "--signing-keys FILE (deploy/cluster/keys.sh makes one), or "
            "--redis-unsigned to accept unsigned entries from a Redis that "
            "only trusted processes can write.\n");
    return 2;
  }
  if (d->signer && d->cfg.redis_unsigned) {
    fprintf(stderr, "compiled: --redis-unsigned and --signing-keys "
                    "contradict each other: with signing keys, entries in "
                    "Redis are signed and checked; drop one of them\n");
    return 2;
  }
  char err[600];
  l2_config lc = {.url = d->cfg.redis,
                  .ca = d->cfg.redis_ca,
                  .timeout_ms = d->cfg.redis_timeout_ms,
                  .ttl_s = d->cfg.redis_ttl,
                  .signer = d->signer,
                  .charge = l2_charge,
                  .release = l2_release,
                  .budget_ctx = d};
  d->l2 = l2_new(&lc, err, sizeof err);
  if (!d->l2) {
    fprintf(stderr, "compiled: %s\n", err);
    return 2;
  }
  if (d->cfg.redis_lease_ms < 100)
    d->cfg.redis_lease_ms = 100;
  return 0;
}

/* --signing-keys and --verify-cache; 0 or an exit code. */
static int init_signing(daemon_ctx *d) {
  if (!d->cfg.signing_keys[0]) {
    if (d->cfg.verify_cache) {
      fprintf(stderr, "compiled: --verify-cache needs --signing-keys FILE\n");
      return 2;
    }
    return 0;
  }
  char err[600];
  d->signer = signer_load(d->cfg.signing_keys, err, sizeof err);
  if (!d->signer) {
    fprintf(stderr, "compiled: %s\n", err);
    return 2;
  }
  return 0;
}

/* --tls-cert, --tls-key, --tls-client-ca; 0 or an exit code. */
static int init_tls(daemon_ctx *d) {
  if (!d->cfg.tls_cert[0] && !d->cfg.tls_key[0] && !d->cfg.tls_client_ca[0])
    return 0;
  if (!d->cfg.tls_cert[0] || !d->cfg.tls_key[0]) {
    fprintf(stderr, "compiled: TLS needs both --tls-cert and --tls-key\n");
    return 2;
  }
  char err[600];
  d->tls = tls_new(d->cfg.tls_cert, d->cfg.tls_key, d->cfg.tls_client_ca, err,
                   sizeof err);
  if (!d->tls) {
    fprintf(stderr, "compiled: %s\n", err);
    return 2;
  }
  /* A handshake has --tls-handshake-timeout, and no more than an idle
   * connection (the core cannot see one before its handshake ends); once
   * bridged, a peer that takes no bytes for --idle-timeout is dropped. */
  int idle_ms = d->cfg.idle_timeout * 1000;
  int handshake_ms = d->cfg.tls_handshake_timeout * 1000;
  if (idle_ms > 0 && idle_ms < handshake_ms)
    handshake_ms = idle_ms;
  tls_set_limits(d->tls, handshake_ms, idle_ms);
  return 0;
}

/* --tokens, or the loopback-only rule without it; 0 or an exit code. */
static int init_auth(daemon_ctx *d) {
  if (!d->cfg.tokens[0]) {
    if (!auth_loopback_listen(d->cfg.listen) && !d->cfg.insecure &&
        !d->cfg.tls_cert[0]) {
      fprintf(stderr,
              "compiled: --listen %s is not a loopback address and there is "
              "neither a --tokens file nor TLS: anyone who can connect could "
              "compile and evict. Give --tokens FILE and/or --tls-cert, or "
              "--insecure to allow it.\n",
              d->cfg.listen);
      return 2;
    }
    return 0;
  }
  char err[600];
  d->auth = auth_load(d->cfg.tokens, err, sizeof err);
  if (!d->auth) {
    fprintf(stderr, "compiled: %s\n", err);
    return 2;
  }
  struct stat st;
  if (stat(d->cfg.tokens, &st) == 0 && (st.st_mode & 077))
    LOG(LOG_WARN,
        "tokens file %s is readable by others (mode %03o): chmod 600 it",
        d->cfg.tokens, (unsigned)(st.st_mode & 0777));
  return 0;
}

static void write_port_file(daemon_ctx *d) {
  if (!d->cfg.port_file[0])
    return;
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp", d->cfg.port_file);
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%d\n", d->port) < 0 || fclose(f) != 0 ||
      rename(tmp, d->cfg.port_file) != 0)
    LOG(LOG_ERROR, "cannot write --port-file %s: %s", d->cfg.port_file,
        strerror(errno));
}

/* A start-up failure: said on stderr, and in the log when that is a file
 * (a log on stderr would say it twice). */
static void start_failed(const char *err) {
  fprintf(stderr, "compiled: %s\n", err);
  if (!log_is_stderr())
    LOG(LOG_ERROR, "%s", err);
}

int main(int argc, char **argv) {
  static daemon_ctx D;
  daemon_ctx *d = &D;
  int rc = config_load(&d->cfg, argc, argv);
  if (rc)
    return rc > 0 ? 0 : 2;
  if (log_init(d->cfg.log_level, d->cfg.log_format, d->cfg.log_file) != 0) {
    fprintf(stderr, "compiled: cannot open log file %s: %s\n", d->cfg.log_file,
            strerror(errno));
    return 1;
  }
  if ((rc = init_auth(d)) != 0 || (rc = init_signing(d)) != 0 ||
      (rc = init_l2(d)) != 0 || (rc = init_tls(d)) != 0)
    return rc;
  signal(SIGPIPE, SIG_IGN);
  /* The libuv pool runs the compiles: size it before its first use. */
  char workers[16];
  snprintf(workers, sizeof workers, "%d", d->cfg.workers);
  setenv("UV_THREADPOOL_SIZE", workers, 1);
  pthread_mutex_init(&d->conns_mu, NULL);
  atomic_init(&d->draining, false);
  d->started_unix = (int64_t)time(NULL);
  d->started_us = gc_now_us();
  if (open_cache(d) != 0)
    return 1;
  if (d->cfg.check_cache) {
    rc = check_cache(d);
    close_conns(d);
    cache_store_close(d->cache);
    return rc;
  }
  if (compile_init(d) != 0 || memory_init(d) != 0 || detect_target(d) != 0 ||
      explorer_init(d) != 0) {
    fprintf(stderr, "compiled: out of memory\n");
    return 1;
  }
  if (init_toolchain(d) != 0)
    return 1;
  long nofile = raise_nofile();
  grpc_init();
  d->loop = uv_default_loop();
  srv_options so = {.user = d,
                    .auth = daemon_auth,
                    .listen = d->cfg.listen,
                    .max_message_bytes = d->cfg.max_message_bytes,
                    .cq_threads = d->cfg.cq_threads,
                    .max_connections = connection_cap(d, nofile),
                    .idle_timeout_ms = d->cfg.idle_timeout * 1000,
                    .keepalive_ms = d->cfg.keepalive * 1000,
                    .tls = d->tls,
                    .max_client_calls = d->cfg.max_client_calls,
                    .max_client_bytes = d->cfg.max_client_bytes == UINT64_MAX
                                            ? d->cfg.memory_budget / 2
                                            : d->cfg.max_client_bytes};
  d->server = srv_new(d->loop, &so);
  compile_register(d);
  admin_register(d);
  /* Signal handlers first: a signal that arrives once the port is known
   * must find them installed. */
  uv_timer_init(d->loop, &d->grace_timer);
  d->grace_timer.data = d;
  uv_timer_init(d->loop, &d->lame_duck_timer);
  d->lame_duck_timer.data = d;
  uv_signal_t *sigs[] = {&d->sig_term, &d->sig_int, &d->sig_hup};
  int nums[] = {SIGTERM, SIGINT, SIGHUP};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(d->loop, sigs[i]);
    sigs[i]->data = d;
    uv_signal_start(sigs[i], on_signal, nums[i]);
  }
  char err[300];
  d->port = srv_start(d->server, err, sizeof err);
  if (d->port < 0) {
    start_failed(err);
    return 1;
  }
  if (metrics_start(d, err, sizeof err) != 0) {
    start_failed(err);
    return 1;
  }
  write_port_file(d);
  if (d->tls)
    LOG(LOG_INFO, "TLS on the gRPC port (%s)%s", d->cfg.tls_cert,
        d->cfg.tls_client_ca[0] ? "; clients need a certificate (mutual TLS)"
                                : "");
  if (d->l2)
    LOG(LOG_INFO,
        "shared cache tier %s (entries live %d s, leases %d ms, waits on "
        "another's lease at most %d ms, timeout %d ms); this daemon is %s%s",
        l2_where(d->l2), d->cfg.redis_ttl, d->cfg.redis_lease_ms,
        d->cfg.redis_lease_wait_ms, d->cfg.redis_timeout_ms, d->owner,
        d->signer ? "; entries are signed and checked" : "");
  if (d->l2 && !d->signer)
    LOG(LOG_WARN,
        "shared cache tier UNSIGNED (--redis-unsigned): entries from Redis "
        "are checked against their own digest only, so whoever can write to "
        "Redis chooses the code this daemon serves");
  if (d->signer)
    LOG(LOG_INFO,
        "signing artifacts with key '%s' (%d keys verify); cache reads %s",
        signer_key_id(d->signer), signer_count(d->signer),
        d->cfg.verify_cache ? "verified" : "not verified (no --verify-cache)");
  if (d->auth)
    LOG(LOG_INFO, "authentication: %d bearer tokens from %s",
        auth_count(d->auth), d->cfg.tokens);
  else
    LOG(LOG_INFO,
        "authentication: none (no --tokens): every client is "
        "admin%s",
        auth_loopback_listen(d->cfg.listen) ? "; listening on loopback only"
                                            : "; NOT on loopback (--insecure)");
  LOG(LOG_INFO,
      "compiled %s listening on %s (port %d); cache %s (cap %llu bytes); "
      "%d workers; at most %d connections (descriptor limit %ld); memory "
      "budget %llu bytes (big requests up to %zu), %d decode threads, at "
      "most %d nodes; target %s [%s] %s",
      DAEMON_VERSION, d->cfg.listen, d->port, d->cfg.cache_dir,
      (unsigned long long)d->cfg.cache_max_bytes, d->cfg.workers,
      so.max_connections, nofile, (unsigned long long)d->cfg.memory_budget,
      d->big_ceiling, d->cfg.decode_threads, d->cfg.max_nodes, d->target.arch,
      d->target.isa, d->target.toolchain);
  uv_run(d->loop, UV_RUN_DEFAULT);

  metrics_stop(d);
  explorer_cleanup(d); /* no HTTP thread runs any more */
  uv_loop_close(d->loop);
  close_conns(d);
  cache_store_close(d->cache);
  compile_cleanup(d);
  memory_cleanup(d);
  grpc_shutdown();

  gc_arena_free(d->target_arena);
  auth_free(d->auth);
  signer_free(d->signer);
  l2_free(d->l2);
  tls_free(d->tls); /* bridges still running hold the context's refs */
  LOG(LOG_INFO, "stopped");
  log_close();
  return 0;
}
