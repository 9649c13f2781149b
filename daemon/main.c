/*
 * main.c: the compiled daemon: settings, cache, target, server, signals.
 *
 * Shutdown (SIGTERM or SIGINT): stop accepting calls, let queued and running
 * compiles finish within --grace-seconds, then cancel what is left; when the
 * last call and compile are gone, close the server, the cache (flushing its
 * pending updates) and the log. A second signal skips the grace period.
 * SIGHUP reopens the log file.
 */
#include <errno.h>
#include <grpc/grpc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "compiler/pipeline.h"
#include "compiler/target.h"
#include "daemon/daemon.h"
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

void daemon_maybe_stop(daemon_ctx *d) {
  if (!atomic_load(&d->draining) || d->stopped || !d->server_done ||
      compile_inflight(d) > 0)
    return;
  d->stopped = true;
  LOG(LOG_INFO, "all calls and compiles finished; stopping");
  uv_timer_stop(&d->grace_timer);
  uv_close((uv_handle_t *)&d->grace_timer, close_handle);
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

static void on_grace(uv_timer_t *t) {
  daemon_ctx *d = t->data;
  LOG(LOG_WARN, "grace period over: cancelling %d calls and %d compiles",
      srv_live_calls(d->server), compile_inflight(d));
  compile_abandon_all(d);
  srv_cancel_all(d->server);
}

static void begin_drain(daemon_ctx *d, const char *why) {
  if (atomic_exchange(&d->draining, true)) {
    LOG(LOG_WARN, "%s again: cancelling everything now", why);
    on_grace(&d->grace_timer);
    return;
  }
  LOG(LOG_INFO, "%s: draining (no new calls; %d compiles in flight, grace %ds)",
      why, compile_inflight(d), d->cfg.grace_seconds);
  srv_shutdown(d->server, on_server_done, d);
  uv_timer_start(&d->grace_timer, on_grace,
                 (uint64_t)d->cfg.grace_seconds * 1000, 0);
  daemon_maybe_stop(d);
}

static void on_signal(uv_signal_t *h, int signum) {
  daemon_ctx *d = h->data;
  if (signum == SIGHUP) {
    int rc = log_reopen();
    LOG(rc ? LOG_ERROR : LOG_INFO, "SIGHUP: log reopened%s",
        rc ? " (failed)" : "");
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
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
      return -1;
    *p = '/';
  }
  return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
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

static int detect_target(daemon_ctx *d) {
  d->target_arena = gc_arena_new(0);
  if (!d->target_arena || gc_target_host(d->target_arena, &d->target) != 0)
    return -1;
  const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  gc_error err;
  if (gc_toolchain_identity(d->target_arena, cc, &d->target.toolchain, &err) !=
      0) {
    LOG(LOG_WARN, "%s; the key will name the toolchain 'unknown'", err.msg);
    d->target.toolchain = "unknown";
  }
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
  signal(SIGPIPE, SIG_IGN);
  /* The libuv pool runs the compiles: size it before its first use. */
  char workers[16];
  snprintf(workers, sizeof workers, "%d", d->cfg.workers);
  setenv("UV_THREADPOOL_SIZE", workers, 1);
  pthread_mutex_init(&d->conns_mu, NULL);
  atomic_init(&d->draining, false);
  gc_limits_default(&d->limits);
  d->limits.max_bytes = d->cfg.max_message_bytes;
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
  if (compile_init(d) != 0 || detect_target(d) != 0) {

    fprintf(stderr, "compiled: out of memory\n");
    return 1;
  }
  grpc_init();
  d->loop = uv_default_loop();
  srv_options so = {.user = d,
                    .listen = d->cfg.listen,
                    .max_message_bytes = d->cfg.max_message_bytes,
                    .cq_threads = d->cfg.cq_threads};
  d->server = srv_new(d->loop, &so);
  compile_register(d);
  admin_register(d);
  /* Signal handlers first: a signal that arrives once the port is known
   * must find them installed. */
  uv_timer_init(d->loop, &d->grace_timer);
  d->grace_timer.data = d;
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
    fprintf(stderr, "compiled: %s\n", err);
    LOG(LOG_ERROR, "%s", err);
    return 1;
  }
  write_port_file(d);
  LOG(LOG_INFO,
      "compiled %s listening on %s (port %d); cache %s (cap %llu bytes); "
      "%d workers; target %s [%s] %s",
      DAEMON_VERSION, d->cfg.listen, d->port, d->cfg.cache_dir,
      (unsigned long long)d->cfg.cache_max_bytes, d->cfg.workers,
      d->target.arch, d->target.isa, d->target.toolchain);
  uv_run(d->loop, UV_RUN_DEFAULT);

  uv_loop_close(d->loop);
  close_conns(d);
  cache_store_close(d->cache);
  compile_cleanup(d);
  grpc_shutdown();

  gc_arena_free(d->target_arena);
  LOG(LOG_INFO, "stopped");
  log_close();
  return 0;
}
