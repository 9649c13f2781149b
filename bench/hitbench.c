/*
 * hitbench.c: cache-hit latency and throughput of the daemon, side by side
 * with a bare gRPC echo server returning the same number of bytes.
 *
 *   build/bench/hitbench [--seconds S] [--rounds R] [--graph FILE] [--no-hot]
 *                          [--log-level LEVEL] [--daemon-arg ARG]...
 *
 * For each artifact size (10 KB, 200 KB, 2 MB) it makes a variant of the
 * graph (a distinct torch_version, so a distinct key), computes its key as
 * the daemon does, and stores a random artifact of that size under it in a
 * fresh cache directory. Then it starts the daemon on that cache and
 * build/bench/echo_server, measures the size of the daemon's reply, and for
 * 1 and 4 concurrent clients alternates timed runs against the daemon (every
 * request a hit) and the echo server (asked for a reply of the same size,
 * sent the same request bytes). Each client is a thread with its own channel
 * and completion queue issuing one call at a time. It prints p50/p99 latency
 * and throughput for both and the ratios daemon/echo.
 */
#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "common/spawn.h"
#include "compiled/v1/compiled.pb-c.h"
#include "compiler/graph.h"
#include "compiler/key.h"
#include "compiler/pipeline.h"
#include "compiler/target.h"

#define MAX_LAT 4000000

static const size_t sizes[] = {10 * 1000, 200 * 1000, 2000 * 1000};
static const char *const size_names[] = {"10 KB", "200 KB", "2 MB"};
static const int clients[] = {1, 4};

typedef struct run_cfg {
  const char *target; /* host:port */
  const char *method; /* path */
  const uint8_t *req; /* request bytes */
  size_t req_len;
  size_t expect; /* reply bytes */
  long reply_md; /* x-size metadata to send, or -1 */
  double seconds;
} run_cfg;

typedef struct worker {
  const run_cfg *cfg;
  int64_t *lat;
  size_t nlat, cap;
  int errors;
  char first_error[160]; /* what the first failed call said */
  pthread_t th;
} worker;

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The six operations of one unary call: send `req` and close, receive the
 * initial metadata into `im`, one message into `reply`, the status into
 * `st`, `det` and `tm`. */
static void unary_ops(grpc_op ops[6], grpc_byte_buffer *req,
                      grpc_metadata_array *im, grpc_byte_buffer **reply,
                      grpc_status_code *st, grpc_slice *det,
                      grpc_metadata_array *tm) {
  memset(ops, 0, 6 * sizeof *ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = req;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = im;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = reply;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.status = st;
  ops[5].data.recv_status_on_client.status_details = det;
  ops[5].data.recv_status_on_client.trailing_metadata = tm;
}

/* One call: send the request, receive one message and the status. */
static int one_call(grpc_channel *ch, grpc_completion_queue *cq,
                    const run_cfg *c, grpc_slice method, char *why,
                    size_t whylen) {
  gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                       gpr_time_from_seconds(30, GPR_TIMESPAN));
  grpc_call *call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS,
                                             cq, method, NULL, deadline, NULL);
  grpc_slice s = grpc_slice_from_static_buffer(c->req, c->req_len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_metadata md;
  char sizebuf[32];
  grpc_metadata_array init_md, trailing;
  grpc_metadata_array_init(&init_md);
  grpc_metadata_array_init(&trailing);
  grpc_byte_buffer *reply = NULL;
  grpc_status_code status;
  grpc_slice details;
  grpc_op ops[6];
  unary_ops(ops, bb, &init_md, &reply, &status, &details, &trailing);
  if (c->reply_md >= 0) {
    snprintf(sizebuf, sizeof sizebuf, "%ld", c->reply_md);
    md.key = grpc_slice_from_static_string("x-size");
    md.value = grpc_slice_from_copied_string(sizebuf);
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &md;
  }
  int ok = grpc_call_start_batch(call, ops, 6, (void *)1, NULL) == GRPC_CALL_OK;
  if (ok) {
    grpc_event ev = grpc_completion_queue_pluck(
        cq, (void *)1, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    /* A reply within a few bytes of the expected size: varint-coded
     * per-request fields may vary. */
    size_t got = reply ? grpc_byte_buffer_length(reply) : 0;
    ok = ev.type == GRPC_OP_COMPLETE && ev.success &&
         status == GRPC_STATUS_OK && got + 64 >= c->expect &&
         got <= c->expect + 64;
    if (!ok && why) {
      char *d = grpc_slice_to_c_string(details);
      snprintf(why, whylen, "status %d (%s), reply %zu bytes, expected %zu",
               (int)status, d, got, c->expect);
      gpr_free(d);
    }
    grpc_slice_unref(details);
  }
  if (c->reply_md >= 0)
    grpc_slice_unref(md.value);
  if (reply)
    grpc_byte_buffer_destroy(reply);
  grpc_byte_buffer_destroy(bb);
  grpc_metadata_array_destroy(&init_md);
  grpc_metadata_array_destroy(&trailing);
  grpc_call_unref(call);
  return ok ? 0 : -1;
}

static grpc_channel *open_channel(const char *target) {
  grpc_arg a = {.type = GRPC_ARG_INTEGER,
                .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                .value.integer = 64 << 20};
  grpc_channel_args args = {1, &a};
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  grpc_channel *ch = grpc_channel_create(target, cr, &args);
  grpc_channel_credentials_release(cr);
  return ch;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  grpc_channel *ch = open_channel(w->cfg->target);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_slice method = grpc_slice_from_static_string(w->cfg->method);
  for (int i = 0; i < 3; i++) /* warm the connection */
    one_call(ch, cq, w->cfg, method, NULL, 0);
  int64_t end = now_us() + (int64_t)(w->cfg->seconds * 1e6);
  while (now_us() < end && w->nlat < w->cap) {
    int64_t t0 = now_us();
    if (one_call(ch, cq, w->cfg, method, w->errors ? NULL : w->first_error,
                 sizeof w->first_error) != 0)
      w->errors++;
    else
      w->lat[w->nlat++] = now_us() - t0;
  }
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_pluck(cq, NULL,
                                     gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
             .type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(cq);
  grpc_channel_destroy(ch);
  return NULL;
}

typedef struct measure {
  double p50_us, p99_us, rps;
  size_t n;
  int errors;
} measure;

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static measure run(const run_cfg *c, int nclients) {
  worker w[8];
  int64_t t0 = now_us();
  for (int i = 0; i < nclients; i++) {
    w[i] = (worker){.cfg = c, .cap = MAX_LAT};
    w[i].lat = malloc(MAX_LAT * sizeof(int64_t));
    pthread_create(&w[i].th, NULL, worker_main, &w[i]);
  }
  size_t total = 0;
  int errors = 0;
  for (int i = 0; i < nclients; i++) {
    pthread_join(w[i].th, NULL);
    total += w[i].nlat;
    if (w[i].errors && !errors)
      fprintf(stderr, "hitbench: %s: %d failed calls; first: %s\n", c->method,
              w[i].errors, w[i].first_error);
    errors += w[i].errors;
  }

  double secs = (double)(now_us() - t0) / 1e6;
  int64_t *all = malloc((total + 1) * sizeof *all);
  size_t k = 0;
  for (int i = 0; i < nclients; i++) {
    memcpy(all + k, w[i].lat, w[i].nlat * sizeof *all);
    k += w[i].nlat;
    free(w[i].lat);
  }
  qsort(all, total, sizeof *all, cmp_i64);
  measure m = {.n = total, .errors = errors};
  if (total) {
    m.p50_us = (double)all[total / 2];
    m.p99_us = (double)all[(size_t)((double)total * 0.99)];
  }
  /* Throughput over the timed part only (warm-up excluded approximately). */
  m.rps = (double)total / (secs > c->seconds ? c->seconds : secs);
  free(all);
  return m;
}

/* ---- setup ---- */

static pid_t spawn(char *const argv[], const char *out) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE *f = freopen(out, "w", stdout);
    (void)f;
    dup2(STDOUT_FILENO, STDERR_FILENO);
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

static int wait_port(const char *file, pid_t pid) {
  for (int i = 0; i < 1500; i++) {
    FILE *f = fopen(file, "r");
    int port = 0;
    if (f) {
      if (fscanf(f, "%d", &port) != 1)
        port = 0;
      fclose(f);
    }
    if (port > 0)
      return port;
    if (waitpid(pid, NULL, WNOHANG) == pid)
      return -1;
    usleep(10000);
  }
  return -1;
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return buf;
}

typedef struct variant {
  uint8_t *req; /* packed CompileRequest */
  size_t req_len;
  size_t reply; /* bytes of the daemon's reply message */
} variant;

/* Packs a CompileRequest for a variant of `m` and stores a random artifact
 * of `size` bytes under its key. */
static int seed(Compiled__V1__GraphModule *m, const char *tag, size_t size,
                const gc_target *t, cache_conn *conn, variant *v) {
  char *old = m->torch_version;
  char ver[128];
  snprintf(ver, sizeof ver, "%s+bench-%s", old, tag);
  m->torch_version = ver;
  Compiled__V1__CompileRequest req;
  compiled__v1__compile_request__init(&req);
  req.graph = m;
  req.max_inline_bytes = 8u << 20;
  v->req_len = compiled__v1__compile_request__get_packed_size(&req);
  v->req = malloc(v->req_len);
  compiled__v1__compile_request__pack(&req, v->req);
  gc_arena *a = gc_arena_new(0);
  gc_graph *g;
  gc_key key;
  gc_options o;
  gc_options_default(&o);
  gc_error err;
  int rc = gc_prepare(a, m, NULL, &o, t, &g, &key, NULL, &err);
  m->torch_version = old;
  if (rc) {
    fprintf(stderr, "hitbench: graph: %s\n", err.msg);
    gc_arena_free(a);
    return -1;
  }
  uint8_t *art = malloc(size);
  RAND_bytes(art, (int)size);
  cache_part parts[GC_KEY_NCOMPONENTS];
  memset(parts, 0, sizeof parts);
  for (int i = 0; i < GC_KEY_NCOMPONENTS; i++) {
    snprintf(parts[i].name, sizeof parts[i].name, "%s",
             gc_key_component_name((gc_key_component)i));
    memcpy(parts[i].digest, key.part[i], GC_DIGEST_LEN);
  }
  cache_error cerr;
  rc = cache_put(conn, key.key, parts, GC_KEY_NCOMPONENTS, art, size, 1000000,
                 &cerr);
  if (rc)
    fprintf(stderr, "hitbench: cache_put: %s\n", cerr.msg);
  free(art);
  gc_arena_free(a);
  return rc;
}

/* Size of the daemon's reply to `v` (one call). */
static size_t probe(const char *target, variant *v) {
  grpc_channel *ch = open_channel(target);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  size_t found = 0;
  for (size_t guess = 0; guess < 1; guess++) {
    gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                   gpr_time_from_seconds(30, GPR_TIMESPAN));
    grpc_call *call = grpc_channel_create_call(
        ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
        grpc_slice_from_static_string("/compiled.v1.Compiler/Compile"), NULL,
        dl, NULL);
    grpc_slice s = grpc_slice_from_static_buffer(v->req, v->req_len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1), *reply = NULL;
    grpc_metadata_array im, tm;
    grpc_metadata_array_init(&im);
    grpc_metadata_array_init(&tm);
    grpc_status_code st;
    grpc_slice det;
    grpc_op ops[6];
    unary_ops(ops, bb, &im, &reply, &st, &det, &tm);
    grpc_call_start_batch(call, ops, 6, (void *)1, NULL);
    grpc_completion_queue_pluck(cq, (void *)1,
                                gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (st == GRPC_STATUS_OK && reply) {
      grpc_byte_buffer_reader r;
      grpc_byte_buffer_reader_init(&r, reply);
      grpc_slice all = grpc_byte_buffer_reader_readall(&r);
      Compiled__V1__CompileEvent *ev = compiled__v1__compile_event__unpack(
          NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
      if (ev && ev->event_case == COMPILED__V1__COMPILE_EVENT__EVENT_RESULT &&
          ev->result->served == COMPILED__V1__SERVED__SERVED_L1_HIT &&
          ev->result->artifact_inline)
        found = GRPC_SLICE_LENGTH(all);
      else
        fprintf(stderr,
                "hitbench: the daemon did not answer with an inline hit\n");
      if (ev)
        compiled__v1__compile_event__free_unpacked(ev, NULL);
      grpc_slice_unref(all);
      grpc_byte_buffer_reader_destroy(&r);
    } else {
      char *d = grpc_slice_to_c_string(det);
      fprintf(stderr, "hitbench: probe failed: status %d: %s\n", st, d);
      free(d);
    }
    grpc_slice_unref(det);
    if (reply)
      grpc_byte_buffer_destroy(reply);
    grpc_byte_buffer_destroy(bb);
    grpc_metadata_array_destroy(&im);
    grpc_metadata_array_destroy(&tm);
    grpc_call_unref(call);
  }
  grpc_completion_queue_shutdown(cq);
  grpc_completion_queue_destroy(cq);
  grpc_channel_destroy(ch);
  return found;
}

int main(int argc, char **argv) {
  double seconds = 3;
  int rounds = 2;
  const char *graph = "tests/data/graphs/mlp.pb";
  const char *hot = "256M"; /* the daemon's in-memory tier; "0": sqlite only */
  const char *log_level = "warn"; /* "info": one log line per request */
  char *extra[8];                 /* --daemon-arg: more daemon flags */
  int nextra = 0;

  const char *build =
      getenv("COMPILED_BUILD") ? getenv("COMPILED_BUILD") : "build";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--graph") && i + 1 < argc)
      graph = argv[++i];
    else if (!strcmp(argv[i], "--no-hot"))
      hot = "0";
    else if (!strcmp(argv[i], "--log-level") && i + 1 < argc)
      log_level = argv[++i];
    else if (!strcmp(argv[i], "--daemon-arg") && i + 1 < argc && nextra < 8)
      extra[nextra++] = argv[++i];
    else {
      fprintf(stderr,
              "usage: hitbench [--seconds S] [--rounds R] [--graph FILE] "
              "[--no-hot] [--log-level LEVEL] [--daemon-arg ARG]...\n");
      return 2;
    }
  }
  char dir[] = "/tmp/hitbench.XXXXXX";
  if (!mkdtemp(dir))
    return 1;
  size_t glen;
  uint8_t *gbytes = read_file(graph, &glen);
  Compiled__V1__GraphModule *m =
      gbytes ? compiled__v1__graph_module__unpack(NULL, glen, gbytes) : NULL;
  if (!m) {
    fprintf(stderr, "hitbench: cannot read %s\n", graph);
    return 1;
  }
  /* The key must be the daemon's: same host target and toolchain. */
  gc_arena *ta = gc_arena_new(0);
  gc_target t;
  gc_target_host(ta, &t);
  const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  char id[512], why[600];
  t.toolchain = spawn_first_line(cc, "--version", 10000, id, sizeof id, why,
                                 sizeof why) == 0
                    ? gc_arena_strdup(ta, id)
                    : "unknown";
  char cache_dir[256];
  snprintf(cache_dir, sizeof cache_dir, "%s/cache", dir);
  mkdir(cache_dir, 0755);
  cache_config cc_cfg;
  cache_config_default(&cc_cfg);
  cc_cfg.dir = cache_dir;
  cache_store *store;
  cache_conn *conn;
  cache_error cerr;
  if (cache_store_open(&cc_cfg, &store, &cerr) ||
      cache_conn_open(store, &conn, &cerr)) {
    fprintf(stderr, "hitbench: cache: %s\n", cerr.msg);
    return 1;
  }
  variant v[3];
  for (int i = 0; i < 3; i++)
    if (seed(m, size_names[i], sizes[i], &t, conn, &v[i]) != 0)
      return 1;
  cache_conn_close(conn);
  cache_store_close(store);

  char daemon_bin[512], echo_bin[512], dport[300], eport[300], dout[300],
      eout[300];
  snprintf(daemon_bin, sizeof daemon_bin, "%s/bin/compiled", build);
  snprintf(echo_bin, sizeof echo_bin, "%s/bench/echo_server", build);
  snprintf(dport, sizeof dport, "%s/daemon.port", dir);
  snprintf(eport, sizeof eport, "%s/echo.port", dir);
  snprintf(dout, sizeof dout, "%s/daemon.out", dir);
  snprintf(eout, sizeof eout, "%s/echo.out", dir);
  char *dargv[16 + 8] = {daemon_bin,
                         "--listen",
                         "127.0.0.1:0",
                         "--port-file",
                         dport,
                         "--cache-dir",
                         cache_dir,
                         "--log-level",
                         (char *)log_level,
                         "--max-inline-bytes",
                         "8M",
                         "--hot-cache-bytes",
                         (char *)hot,
                         NULL};
  for (int i = 0; i < nextra; i++)
    dargv[13 + i] = extra[i];
  char *eargv[] = {echo_bin, eport, "2", NULL};
  pid_t dpid = spawn(dargv, dout), epid = spawn(eargv, eout);
  int dp = wait_port(dport, dpid), ep = wait_port(eport, epid);
  if (dp < 0 || ep < 0) {
    fprintf(stderr, "hitbench: servers did not start (see %s, %s)\n", dout,
            eout);
    return 1;
  }
  grpc_init();
  char dtarget[64], etarget[64];
  snprintf(dtarget, sizeof dtarget, "127.0.0.1:%d", dp);
  snprintf(etarget, sizeof etarget, "127.0.0.1:%d", ep);
  for (int i = 0; i < 3; i++)
    if (!(v[i].reply = probe(dtarget, &v[i])))
      return 1;

  int any_errors = 0;
  printf("# cache-hit benchmark: %s, %.1fs per run, %d rounds (medians of "
         "rounds), hot tier %s, daemon log level %s\n",
         graph, seconds, rounds,
         strcmp(hot, "0") ? "on" : "off (every hit reads sqlite)", log_level);

  printf("%-8s %-7s | %10s %10s %10s | %10s %10s %10s | %8s %8s %8s\n", "size",
         "clients", "hit p50", "hit p99", "hit req/s", "echo p50", "echo p99",
         "echo req/s", "p50 x", "p99 x", "tput x");
  for (int s = 0; s < 3; s++) {
    for (int ci = 0; ci < 2; ci++) {
      measure hm[8], em[8];
      run_cfg hc = {dtarget,    "/compiled.v1.Compiler/Compile",
                    v[s].req,   v[s].req_len,
                    v[s].reply, -1,
                    seconds};
      run_cfg ec = {etarget,    "/bench.Echo/Get", v[s].req, v[s].req_len,
                    v[s].reply, (long)v[s].reply,  seconds};
      for (int r = 0; r < rounds && r < 8; r++) {
        hm[r] = run(&hc, clients[ci]);
        em[r] = run(&ec, clients[ci]);
      }
      /* Median of rounds for each figure. */
      double h50[8], h99[8], hr[8], e50[8], e99[8], er[8];
      for (int r = 0; r < rounds; r++) {
        h50[r] = hm[r].p50_us;
        h99[r] = hm[r].p99_us;
        hr[r] = hm[r].rps;
        e50[r] = em[r].p50_us;
        e99[r] = em[r].p99_us;
        er[r] = em[r].rps;
      }
      double *cols[] = {h50, h99, hr, e50, e99, er};
      for (int k = 0; k < 6; k++)
        for (int i = 1; i < rounds; i++)
          for (int j = i; j > 0 && cols[k][j] < cols[k][j - 1]; j--) {
            double x = cols[k][j];
            cols[k][j] = cols[k][j - 1];
            cols[k][j - 1] = x;
          }
      int mid = rounds / 2;
      int errs = 0;
      for (int r = 0; r < rounds; r++)
        errs += hm[r].errors + em[r].errors;
      any_errors += errs;
      printf("%-8s %-7d | %8.0fus %8.0fus %10.0f | %8.0fus %8.0fus %10.0f | "
             "%7.2fx "
             "%7.2fx %7.2fx%s\n",
             size_names[s], clients[ci], h50[mid], h99[mid], hr[mid], e50[mid],
             e99[mid], er[mid], h50[mid] / e50[mid], h99[mid] / e99[mid],
             hr[mid] / er[mid], errs ? "  (errors!)" : "");
      fflush(stdout);
    }
  }
  kill(dpid, SIGTERM);
  kill(epid, SIGTERM);
  waitpid(dpid, NULL, 0);
  waitpid(epid, NULL, 0);
  grpc_shutdown();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (any_errors)
    fprintf(stderr, "hitbench: %d calls failed; the daemon's log is in %s\n",
            any_errors, dout);
  else if (system(cmd) != 0)
    fprintf(stderr, "hitbench: could not remove %s\n", dir);

  for (int i = 0; i < 3; i++)
    free(v[i].req);
  compiled__v1__graph_module__free_unpacked(m, NULL);
  free(gbytes);
  gc_arena_free(ta);
  return 0;
}
