/*
 * bench.c: `compilectl bench`, a load generator for a compiled daemon.
 *
 * N client threads, each with a channel (and so a connection) of its own,
 * send Compile requests for one graph file back to back for a fixed time.
 * A fraction of them are made misses: the graph's torch_version (part of
 * the key's target component) gets a value unique to the run, thread and
 * request, so each is a new key while the graph stays valid. The rest hit
 * the entry that a priming request made before the run.
 *
 * Each request's latency and outcome (hit, compiled, joined, error) go into
 * a per-thread array allocated before the run; requests started during the
 * warmup are not recorded. At the end the latencies are sorted per outcome
 * and printed as percentiles with the throughput.
 */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/ctl/ctl.h"

static const char bench_usage[] =
    "usage: compilectl bench [OPTIONS] FILE\n"
    "\n"
    "Sends Compile requests for graph FILE from N concurrent clients (one\n"
    "connection each) for a while, then prints latency percentiles (p50,\n"
    "p90, p99, max) and throughput, overall and per outcome (hit, compiled,\n"
    "joined, error), and the error codes seen. Before the run one request\n"
    "makes sure FILE is cached.\n"
    "\n"
    "options:\n"
    "  --clients N            concurrent clients (default 4)\n"
    "  --duration SECONDS     how long to measure (default 10)\n"
    "  --warmup SECONDS       run this long first without measuring "
    "(default 1)\n"
    "  --miss-ratio R         fraction 0..1 of requests made misses "
    "(default 0):\n"
    "                         each gets a unique torch_version, hence a new\n"
    "                         key and a real compile; they stay in the "
    "cache\n"
    "                         (remove them with evict --older-than)\n"
    "  --json                 print the results as one JSON object\n"
    "  --timeout SECONDS      limit per request (default 60)\n"
    "  -h, --help             this text\n";

/* How a request ended. */
enum outcome { OUT_HIT, OUT_COMPILED, OUT_JOINED, OUT_ERROR, NOUTCOMES };
static const char *const outcome_names[NOUTCOMES] = {"hit", "compiled",
                                                     "joined", "error"};

#define NCODES 17 /* gRPC status codes 0..16 */

/* One measured request. */
typedef struct sample {
  uint32_t us;     /* latency, microseconds (saturated) */
  uint8_t outcome; /* enum outcome */
  uint8_t code;    /* gRPC status code */
} sample;

/* The run, shared read-only by the threads once they start. */
typedef struct bench_cfg {
  int clients;
  double duration_s, warmup_s, miss_ratio;
  bool json;
  int64_t timeout_ms;
  const char *file;
  uint8_t *graph; /* the GraphModule, packed */
  size_t graph_len;
  uint64_t run_id; /* makes miss keys unique across runs */
  int64_t t_start; /* requests started from here on are measured */
  int64_t t_end;   /* no request starts after this */
} bench_cfg;

/* One client thread. */
typedef struct worker {
  const bench_cfg *cfg;
  int id;
  pthread_t thread;
  sample *samples; /* preallocated: cap entries */
  size_t n, cap;
  bool full;          /* stopped early: the array was full */
  int64_t last_end;   /* when its last measured request ended */
  const char *failed; /* setup failure, or NULL */
} worker;

/* ---- one request ---- */

static enum outcome outcome_of(Compiled__V1__Served s) {
  switch (s) {
  case COMPILED__V1__SERVED__SERVED_L1_HIT:
  case COMPILED__V1__SERVED__SERVED_L2_HIT:
    return OUT_HIT;
  case COMPILED__V1__SERVED__SERVED_JOINED:
    return OUT_JOINED;
  default:
    return OUT_COMPILED;
  }
}

/* Sends `req` and reads its events to the end. Fills the outcome and code;
 * `st` (initialised) receives the status. */
static void one_request(rpc_client *c, const Compiled__V1__CompileRequest *req,
                        int64_t timeout_ms, sample *out, rpc_status *st) {
  rpc_stream *s =
      rpc_stream_start(c, "/compiled.v1.Compiler/Compile", &req->base,
                       &compiled__v1__compile_event__descriptor, timeout_ms);
  out->outcome = OUT_ERROR;
  out->code = GRPC_STATUS_RESOURCE_EXHAUSTED;
  if (!s)
    return;
  int served = -1;
  ProtobufCMessage *m;
  while (rpc_stream_next(s, &m) == 1) {
    Compiled__V1__CompileEvent *ev = (Compiled__V1__CompileEvent *)m;
    if (ev->event_case == COMPILED__V1__COMPILE_EVENT__EVENT_RESULT)
      served = (int)ev->result->served;
    protobuf_c_message_free_unpacked(m, NULL);
  }
  rpc_stream_finish(s, st);
  out->code = (uint8_t)(st->code < NCODES ? st->code : GRPC_STATUS_UNKNOWN);
  if (st->code == GRPC_STATUS_OK && served >= 0)
    out->outcome = (uint8_t)outcome_of((Compiled__V1__Served)served);
  else if (st->code == GRPC_STATUS_OK)
    out->code = GRPC_STATUS_INTERNAL; /* a stream without a result */
}

/* ---- the threads ---- */

/* xorshift64*: a uniform double in [0, 1). */
static double next_uniform(uint64_t *x) {
  *x ^= *x >> 12;
  *x ^= *x << 25;
  *x ^= *x >> 27;
  return (double)((*x * 0x2545F4914F6CDD1DULL) >> 11) * 0x1.0p-53;
}

/* Runs requests until t_end; the graph `g` is the thread's own copy. */
static void worker_loop(worker *w, rpc_client *c,
                        Compiled__V1__GraphModule *g) {
  const bench_cfg *cfg = w->cfg;
  char *orig = g->torch_version;
  char version[256];
  uint64_t rng = cfg->run_id ^ ((uint64_t)(w->id + 1) * 0x9E3779B97F4A7C15ULL);
  uint64_t seq = 0;
  Compiled__V1__CompileRequest req = COMPILED__V1__COMPILE_REQUEST__INIT;
  req.graph = g;
  req.client = "compilectl-bench";
  for (;;) {
    int64_t t = ctl_now_us();
    if (t >= cfg->t_end)
      break;
    g->torch_version = orig;
    if (cfg->miss_ratio > 0 && next_uniform(&rng) < cfg->miss_ratio) {
      snprintf(version, sizeof version, "%s+bench.%" PRIx64 ".%d.%" PRIu64,
               orig, cfg->run_id, w->id, seq++);
      g->torch_version = version;
    }
    sample sm;
    rpc_status st;
    rpc_status_init(&st);
    one_request(c, &req, cfg->timeout_ms, &sm, &st);
    rpc_status_clear(&st);
    int64_t end = ctl_now_us();
    if (t < cfg->t_start)
      continue;
    sm.us = end - t > UINT32_MAX ? UINT32_MAX : (uint32_t)(end - t);
    w->samples[w->n++] = sm;
    w->last_end = end;
    if (w->n == w->cap) {
      w->full = true;
      break;
    }
  }
  g->torch_version = orig; /* freed with the message */
}

static void *worker_main(void *arg) {
  worker *w = arg;
  rpc_client *c = ctl_connect();
  Compiled__V1__GraphModule *g = compiled__v1__graph_module__unpack(
      NULL, w->cfg->graph_len, w->cfg->graph);
  if (!c || !g)
    w->failed = c ? "out of memory" : "cannot connect (see the message above)";
  else
    worker_loop(w, c, g);
  if (g)
    protobuf_c_message_free_unpacked(&g->base, NULL);
  rpc_close(c);
  return NULL;
}

/* ---- results ---- */

/* Latency statistics of one outcome. */
typedef struct summary {
  size_t count;
  double rps;
  uint32_t p50, p90, p99, max;
  double mean;
} summary;

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted `v`. */
static uint32_t percentile(const uint32_t *v, size_t n, double p) {
  size_t i = (size_t)ceil(p * (double)n);
  return v[i ? i - 1 : 0];
}

/* Summarises the samples of outcome `which` (NOUTCOMES: all) using `buf`
 * (room for every sample). */
static summary summarize(const worker *ws, int nw, int which, uint32_t *buf,
                         double elapsed_s) {
  summary s = {0};
  double sum = 0;
  for (int i = 0; i < nw; i++)
    for (size_t j = 0; j < ws[i].n; j++)
      if (which == NOUTCOMES || ws[i].samples[j].outcome == which) {
        buf[s.count++] = ws[i].samples[j].us;
        sum += ws[i].samples[j].us;
      }
  if (s.count == 0)
    return s;
  qsort(buf, s.count, sizeof *buf, cmp_u32);
  s.rps = (double)s.count / elapsed_s;
  s.p50 = percentile(buf, s.count, 0.50);
  s.p90 = percentile(buf, s.count, 0.90);
  s.p99 = percentile(buf, s.count, 0.99);
  s.max = buf[s.count - 1];
  s.mean = sum / (double)s.count;
  return s;
}

static void print_row(const char *name, const summary *s) {
  char a[32], b[32], c[32], d[32];
  if (s->count == 0) {
    printf("%-9s %9d %10s %10s %10s %10s %10s\n", name, 0, "-", "-", "-", "-",
           "-");
    return;
  }
  printf(
      "%-9s %9zu %10.1f %10s %10s %10s %10s\n", name, s->count, s->rps,
      ctl_fmt_micros(s->p50, a, sizeof a), ctl_fmt_micros(s->p90, b, sizeof b),
      ctl_fmt_micros(s->p99, c, sizeof c), ctl_fmt_micros(s->max, d, sizeof d));
}

static void print_text(const bench_cfg *cfg, const summary *sums,
                       const size_t *codes, double elapsed_s) {
  printf("bench %s: %d client%s, %.1f s measured after %.1f s warmup, miss "
         "ratio %.2f, server %s\n",
         cfg->file, cfg->clients, cfg->clients == 1 ? "" : "s", elapsed_s,
         cfg->warmup_s, cfg->miss_ratio, ctl_server);
  printf("%-9s %9s %10s %10s %10s %10s %10s\n", "outcome", "requests", "req/s",
         "p50", "p90", "p99", "max");
  print_row("all", &sums[NOUTCOMES]);
  for (int o = 0; o < NOUTCOMES; o++)
    print_row(outcome_names[o], &sums[o]);
  printf("errors: %zu", sums[OUT_ERROR].count);
  for (int c = 0; c < NCODES; c++)
    if (codes[c])
      printf(" %s %zu", rpc_code_name((grpc_status_code)c), codes[c]);
  putchar('\n');
}

static json_t *summary_json(const summary *s) {
  return json_pack("{s:I, s:f, s:I, s:I, s:I, s:I, s:f}", "count",
                   (json_int_t)s->count, "rps", s->rps, "p50_us",
                   (json_int_t)s->p50, "p90_us", (json_int_t)s->p90, "p99_us",
                   (json_int_t)s->p99, "max_us", (json_int_t)s->max, "mean_us",
                   s->mean);
}

static int print_json(const bench_cfg *cfg, const summary *sums,
                      const size_t *codes, double elapsed_s) {
  json_t *outcomes = json_object(), *errors = json_object();
  json_object_set_new(outcomes, "all", summary_json(&sums[NOUTCOMES]));
  for (int o = 0; o < NOUTCOMES; o++)
    json_object_set_new(outcomes, outcome_names[o], summary_json(&sums[o]));
  for (int c = 0; c < NCODES; c++)
    if (codes[c])
      json_object_set_new(errors, rpc_code_name((grpc_status_code)c),
                          json_integer((json_int_t)codes[c]));
  json_t *j = json_pack(
      "{s:s, s:s, s:i, s:f, s:f, s:f, s:f, s:o, s:o}", "file", cfg->file,
      "server", ctl_server, "clients", cfg->clients, "duration_s",
      cfg->duration_s, "warmup_s", cfg->warmup_s, "miss_ratio", cfg->miss_ratio,
      "elapsed_s", elapsed_s, "outcomes", outcomes, "errors", errors);
  char *text = j ? json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT) : NULL;
  json_decref(j);
  if (!text) {
    ctl_errorf("out of memory");
    return CTL_EIO;
  }
  puts(text);
  free(text);
  return CTL_OK;
}

/* Sorts, summarises and prints the samples of all workers. */
static int report(const bench_cfg *cfg, const worker *ws) {
  size_t total = 0, codes[NCODES] = {0};
  int64_t last = cfg->t_end;
  for (int i = 0; i < cfg->clients; i++) {
    total += ws[i].n;
    if (ws[i].last_end > last)
      last = ws[i].last_end;
    if (ws[i].full)
      ctl_errorf("bench: client %d filled its sample array and stopped early",
                 i);
    for (size_t j = 0; j < ws[i].n; j++)
      if (ws[i].samples[j].outcome == OUT_ERROR)
        codes[ws[i].samples[j].code]++;
  }
  double elapsed_s = (double)(last - cfg->t_start) / 1e6;
  uint32_t *buf = malloc((total ? total : 1) * sizeof *buf);
  if (!buf) {
    ctl_errorf("out of memory");
    return CTL_EIO;
  }
  summary sums[NOUTCOMES + 1];
  for (int o = 0; o <= NOUTCOMES; o++)
    sums[o] = summarize(ws, cfg->clients, o, buf, elapsed_s);
  free(buf);
  if (cfg->json)
    return print_json(cfg, sums, codes, elapsed_s);
  print_text(cfg, sums, codes, elapsed_s);
  return CTL_OK;
}

/* ---- setup ---- */

/* One request for the unmodified graph, so that hits are hits. */
static int prime(const bench_cfg *cfg) {
  rpc_client *c = ctl_connect();
  Compiled__V1__GraphModule *g =
      compiled__v1__graph_module__unpack(NULL, cfg->graph_len, cfg->graph);
  if (!c || !g) {
    rpc_close(c);
    if (g)
      protobuf_c_message_free_unpacked(&g->base, NULL);
    return CTL_EIO;
  }
  Compiled__V1__CompileRequest req = COMPILED__V1__COMPILE_REQUEST__INIT;
  req.graph = g;
  req.client = "compilectl-bench";
  sample sm;
  rpc_status st;
  rpc_status_init(&st);
  one_request(c, &req, cfg->timeout_ms, &sm, &st);
  int rc = CTL_OK;
  if (sm.outcome == OUT_ERROR)
    rc = st.code == GRPC_STATUS_OK
             ? (ctl_errorf("%s: the stream ended without a result", cfg->file),
                CTL_ESERVER)
             : ctl_rpc_error(cfg->file, &st);
  rpc_status_clear(&st);
  protobuf_c_message_free_unpacked(&g->base, NULL);
  rpc_close(c);
  return rc;
}

/* Runs the threads. Returns CTL_OK or an exit code after printing why. */
static int run(bench_cfg *cfg, worker *ws) {
  size_t cap = (size_t)ceil(cfg->duration_s) * 50000 + 1024;
  for (int i = 0; i < cfg->clients; i++) {
    ws[i] = (worker){.cfg = cfg, .id = i, .cap = cap};
    ws[i].samples = malloc(cap * sizeof *ws[i].samples);
    if (!ws[i].samples) {
      ctl_errorf("out of memory");
      return CTL_EIO;
    }
  }
  cfg->t_start = ctl_now_us() + (int64_t)(cfg->warmup_s * 1e6);
  cfg->t_end = cfg->t_start + (int64_t)(cfg->duration_s * 1e6);
  int started = 0;
  for (; started < cfg->clients; started++)
    if (pthread_create(&ws[started].thread, NULL, worker_main, &ws[started])) {
      ctl_errorf("cannot start thread %d", started);
      break;
    }
  for (int i = 0; i < started; i++)
    pthread_join(ws[i].thread, NULL);
  if (started < cfg->clients)
    return CTL_EIO;
  for (int i = 0; i < cfg->clients; i++)
    if (ws[i].failed) {
      ctl_errorf("bench: client %d: %s", i, ws[i].failed);
      return CTL_EIO;
    }
  return report(cfg, ws);
}

/* Parses a number in [lo, hi] for option `opt`. */
static int parse_num(const char *opt, const char *s, double lo, double hi,
                     double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || !(v >= lo && v <= hi)) {
    ctl_errorf("%s wants a number from %g to %g, got '%s'", opt, lo, hi, s);
    return -1;
  }
  *out = v;
  return 0;
}

/* Parses the command line into `cfg`; returns CTL_OK, -1 for --help, or
 * CTL_EUSAGE. */
static int parse_bench(int argc, char **argv, bench_cfg *cfg) {
  enum { O_CLIENTS = 256, O_DUR, O_MISS, O_WARM, O_JSON };
  static const struct option opts[] = {
      {"clients", required_argument, NULL, O_CLIENTS},
      {"duration", required_argument, NULL, O_DUR},
      {"miss-ratio", required_argument, NULL, O_MISS},
      {"warmup", required_argument, NULL, O_WARM},
      {"json", no_argument, NULL, O_JSON},
      CTL_GLOBAL_OPTIONS,
      {NULL, 0, NULL, 0}};
  int c, bad = 0, stop = 0;
  double clients = 4;
  optind = 0; /* afresh: see CTL_GLOBAL_OPTIONS */
  while (!bad && (c = ctl_getopt(argc, argv, "h", opts, NULL, bench_usage,
                                 &stop)) != -1) {
    if (c == O_CLIENTS) {
      bad = parse_num("--clients", optarg, 1, 1024, &clients);
      if (!bad && clients != floor(clients)) {
        ctl_errorf("--clients wants a whole number, got '%s'", optarg);
        bad = 1;
      }
    } else if (c == O_DUR)
      bad = parse_num("--duration", optarg, 0.1, 86400, &cfg->duration_s);
    else if (c == O_MISS)
      bad = parse_num("--miss-ratio", optarg, 0, 1, &cfg->miss_ratio);
    else if (c == O_WARM)
      bad = parse_num("--warmup", optarg, 0, 3600, &cfg->warmup_s);
    else if (c == O_JSON)
      cfg->json = true;
  }
  if (stop)
    return stop;
  cfg->timeout_ms = ctl_timeout(CTL_DEFAULT_TIMEOUT_MS);
  if (bad || optind != argc - 1) {
    if (!bad)
      ctl_errorf("bench: wants exactly one graph file");
    return CTL_EUSAGE;
  }
  cfg->clients = (int)clients;
  cfg->file = argv[optind];
  return CTL_OK;
}

int ctl_cmd_bench(int argc, char **argv) {
  bench_cfg cfg = {.duration_s = 10,
                   .warmup_s = 1,
                   .run_id =
                       (uint64_t)ctl_now_us() ^ ((uint64_t)getpid() << 40)};
  int rc = parse_bench(argc, argv, &cfg);
  if (rc)
    return rc < 0 ? CTL_OK : rc;
  char err[1024];
  Compiled__V1__GraphModule *g;
  rc = ctl_load_graph(cfg.file, &g, err, sizeof err);
  if (rc) {
    ctl_errorf("%s", err);
    return rc;
  }
  cfg.graph_len = protobuf_c_message_get_packed_size(&g->base);
  cfg.graph = malloc(cfg.graph_len ? cfg.graph_len : 1);
  if (cfg.graph)
    protobuf_c_message_pack(&g->base, cfg.graph);
  protobuf_c_message_free_unpacked(&g->base, NULL);
  worker *ws = calloc((size_t)cfg.clients, sizeof *ws);
  if (!cfg.graph || !ws) {
    ctl_errorf("out of memory");
    rc = CTL_EIO;
  }
  if (rc == CTL_OK)
    rc = prime(&cfg);
  if (rc == CTL_OK)
    rc = run(&cfg, ws);
  for (int i = 0; ws && i < cfg.clients; i++)
    free(ws[i].samples);
  free(ws);
  free(cfg.graph);
  return rc;
}
