/*
 * submit.c: `compilectl submit` (compile graph files on a daemon, or have
 * them served from its cache) and `compilectl explain` (what key a graph
 * gets and, on a miss, how it differs from the nearest cached entry).
 *
 * submit reads the Compile event stream: queue position and stage events
 * drive a one-line progress display on a terminal (or become JSON lines
 * with --json); the last event is the result, summarised in one line per
 * file. With -o the artifact is written out, taken from the result when it
 * came inline and fetched otherwise, its SHA-256 checked either way.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "client/ctl/ctl.h"
#include "compiler/wire.h"

static const char submit_usage[] =
    "usage: compilectl submit [OPTIONS] FILE...\n"
    "\n"
    "Sends each graph file (.pb or .json) to the daemon, which serves it from\n"
    "its cache or compiles it, and prints one line per file:\n"
    "  KEY  SERVED  SIZE  compile TIME  total TIME  FILE\n"
    "SERVED is hit (from the cache), joined (waited for a compile of the same\n"
    "key that another request started) or compiled (compiled for this\n"
    "request). \"compile\" is what compiling cost (for a hit, back then);\n"
    "\"total\" is this request end to end. On a terminal, progress (queue\n"
    "position, compile stages) is shown on stderr; warnings of the compile\n"
    "go to stderr too.\n"
    "\n"
    "options:\n"
    "  --json                 print every event of the stream as one JSON "
    "line\n"
    "                         (a compiled.v1.CompileEvent) instead of the\n"
    "                         summary; inline artifact bytes are left out\n"
    "  -o, --output OUT       write the artifact (a compiled.v1.Artifact\n"
    "                         message) to OUT, \"-\" for standard output; "
    "only\n"
    "                         with one FILE. Its SHA-256 is checked against\n"
    "                         the result's digest.\n"
    "  --opt-level 0-3        optimisation level (default: the daemon's, 2)\n"
    "  --training             compile for training (default: inference)\n"
    "  --return-input-mutations\n"
    "                         have the program return new values of mutated\n"
    "                         inputs for the caller to apply (default: the\n"
    "                         program applies them)\n"
    "  --force                compile even when cached; the new artifact\n"
    "                         replaces the entry\n"
    "  --max-inline SIZE      largest artifact to receive in the result, e.g.\n"
    "                         512K (default: the daemon's, 1M); larger ones\n"
    "                         are fetched when -o asks for them\n"
    "  --client ID            the client name the daemon logs "
    "(default compilectl)\n"
    "  --label NAME           what to call the cache entry a compile stores\n"
    "                         (at most 256 bytes); compilectl ls and lookup\n"
    "                         show it with FILE's path and this host's name,\n"
    "                         which are sent too. An entry keeps the label\n"
    "                         of the request that stored it.\n"
    "  -q, --quiet            no progress display\n"
    "  --timeout SECONDS      give up on a file after this long "
    "(default 600)\n"
    "  -h, --help             this text\n";

static const char explain_usage[] =
    "usage: compilectl explain [OPTIONS] FILE\n"
    "\n"
    "Asks the daemon which cache key FILE gets, without compiling it, and\n"
    "prints a one-line summary, the key and, when the key is not cached, the\n"
    "nearest cached entry with the same graph (with its label: what it was\n"
    "compiled from) and the key components that differ (inputs, options,\n"
    "target, compiler, schema).\n"
    "\n"
    "options:\n"
    "  --json                 print the compiled.v1.ExplainResponse as JSON\n"
    "  --opt-level 0-3, --training, --return-input-mutations\n"
    "                         the compile options, as for submit (they are\n"
    "                         part of the key)\n"
    "  --timeout SECONDS      give up after this long (default 60)\n"
    "  -h, --help             this text\n";

/* What the command line asked for. */
typedef struct submit_opts {
  bool json;           /* events as JSON lines */
  bool quiet;          /* no progress display */
  bool force;          /* compile even if cached */
  bool training;       /* MODE_TRAINING */
  bool return_mut;     /* return_input_mutations */
  int opt_level;       /* 0..3, or -1 for the daemon's default */
  uint64_t max_inline; /* 0: the daemon's default */
  const char *out;     /* -o, or NULL */
  const char *client;  /* CompileRequest.client */
  const char *label;   /* --label: Label.name, or NULL */
  int64_t timeout_ms;
} submit_opts;

enum {
  O_JSON = 256,
  O_OPT,
  O_TRAIN,
  O_RETMUT,
  O_FORCE,
  O_INLINE,
  O_CLIENT,
  O_LABEL,
};

/* The daemon's limits of a Label's strings, in bytes (docs/protocol.md,
 * "Labels"). */
#define LABEL_NAME_MAX 256
#define LABEL_FILE_MAX 1024
#define LABEL_HOST_MAX 255

/* Handles an option both commands take. Returns
 * 1 if it was one, 0 if not, -1 on a bad value (after printing why). */
static int common_opt(int c, submit_opts *o) {
  char *end;
  switch (c) {
  case O_JSON:
    o->json = true;
    return 1;
  case O_OPT:
    o->opt_level = (int)strtol(optarg, &end, 10);
    if (*end || end == optarg || o->opt_level < 0 || o->opt_level > 3) {
      ctl_errorf("--opt-level wants 0..3, got '%s'", optarg);
      return -1;
    }
    return 1;
  case O_TRAIN:
    o->training = true;
    return 1;
  case O_RETMUT:
    o->return_mut = true;
    return 1;
  default:
    return 0;
  }
}

static void fill_options(const submit_opts *o,
                         Compiled__V1__CompileOptions *co) {
  compiled__v1__compile_options__init(co);
  if (o->opt_level >= 0)
    co->opt_level =
        (Compiled__V1__OptLevel)(COMPILED__V1__OPT_LEVEL__OPT_LEVEL_O0 +
                                 o->opt_level);
  co->return_input_mutations = o->return_mut;
  co->mode = o->training ? COMPILED__V1__MODE__MODE_TRAINING
                         : COMPILED__V1__MODE__MODE_INFERENCE;
  co->force = o->force;
}

/* ---- the label ---- */

/* Makes `s` (NUL-terminated) text the daemon takes in a label, in place:
 * bytes that are not UTF-8 and control characters (C0, DEL; C1 as its two
 * bytes) become '?'. File and host names may hold anything. */
static void label_text(char *s) {
  uint8_t *u = (uint8_t *)s;
  size_t n = strlen(s);
  for (size_t i = 0; i < n;) {
    long bad = gc_utf8_invalid_at(u + i, n - i);
    if (bad < 0)
      break;
    u[i + (size_t)bad] = '?';
    i += (size_t)bad + 1;
  }
  for (size_t i = 0; i < n; i++) {
    if (u[i] < 0x20 || u[i] == 0x7f)
      u[i] = '?';
    else if (u[i] == 0xc2 && i + 1 < n && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f)
      u[i] = u[i + 1] = '?';
  }
}

/* Keeps the last `max` bytes of `s` at most, in place: "..." and the tail,
 * starting at a whole character (the end of a path says the most). */
static void keep_tail(char *s, size_t max) {
  size_t n = strlen(s);
  if (n <= max)
    return;
  size_t from = n - (max - 3);
  while (from < n && ((uint8_t)s[from] & 0xc0) == 0x80)
    from++;
  memmove(s + 3, s + from, n - from + 1);
  memcpy(s, "...", 3);
}

/* Checks --label: what the daemon takes (docs/protocol.md). */
static int check_label(const char *name) {
  size_t n = strlen(name);
  if (n > LABEL_NAME_MAX) {
    ctl_errorf("--label is %zu bytes; the daemon takes at most %d", n,
               LABEL_NAME_MAX);
    return CTL_EUSAGE;
  }
  long bad = gc_utf8_invalid_at((const uint8_t *)name, n);
  if (bad >= 0) {
    ctl_errorf("--label is not UTF-8 (byte %ld)", bad);
    return CTL_EUSAGE;
  }
  char *copy = strdup(name);
  if (!copy)
    return CTL_EIO;
  label_text(copy);
  int same = strcmp(copy, name) == 0;
  free(copy);
  if (!same) {
    ctl_errorf("--label has a control character");
    return CTL_EUSAGE;
  }
  return CTL_OK;
}

/* The label of a submit of `path`: --label, the file's full path, this
 * host. Strings go into the buffers given. */
static void fill_label(const submit_opts *o, const char *path,
                       Compiled__V1__Label *l, char file[PATH_MAX + 8],
                       char host[LABEL_HOST_MAX + 1]) {
  compiled__v1__label__init(l);
  l->name = (char *)(o->label ? o->label : "");
  file[0] = '\0';
  if (strcmp(path, "-") != 0 && !realpath(path, file))
    snprintf(file, PATH_MAX + 8, "%s", path);
  label_text(file);
  keep_tail(file, LABEL_FILE_MAX);
  l->file = file;
  if (gethostname(host, LABEL_HOST_MAX) != 0)
    host[0] = '\0';
  host[LABEL_HOST_MAX] = '\0';
  label_text(host);
  l->host = host;
}

/* ---- progress ---- */

/* The one-line progress display on stderr. */
typedef struct progress {
  bool on;          /* stderr is a terminal and not --quiet */
  bool shown;       /* a line is on the screen */
  const char *file; /* the file being submitted */
  int64_t t0;       /* when the request started */
} progress;

/* The terminal's width, so that the line never wraps (which would defeat
 * the carriage return). */
static int terminal_columns(void) {
  struct winsize ws;
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1)
    return ws.ws_col;
  return 80;
}

static void progress_show(progress *p, const char *what) {
  if (!p->on)
    return;
  char t[32], line[512];
  snprintf(line, sizeof line, "%s: %s [%s]", p->file, what,
           ctl_fmt_micros(ctl_now_us() - p->t0, t, sizeof t));
  int cols = terminal_columns() - 1;
  fprintf(stderr, "\r\033[K%.*s", cols, line);
  fflush(stderr);
  p->shown = true;
}

static void progress_clear(progress *p) {
  if (p->shown)
    fputs("\r\033[K", stderr);
  p->shown = false;
}

static void progress_event(progress *p, const Compiled__V1__CompileEvent *ev) {
  char what[160], t[32];
  if (ev->event_case == COMPILED__V1__COMPILE_EVENT__EVENT_QUEUED) {
    unsigned pos = ev->queued->position;
    if (pos == 0)
      snprintf(what, sizeof what, "queued, next to run");
    else
      snprintf(what, sizeof what, "queued, %u compile%s ahead", pos,
               pos == 1 ? "" : "s");
  } else if (ev->event_case == COMPILED__V1__COMPILE_EVENT__EVENT_STAGE) {
    const Compiled__V1__Stage *s = ev->stage;
    if (s->done)
      snprintf(what, sizeof what, "%s done in %s", s->name,
               ctl_fmt_micros(s->micros, t, sizeof t));
    else
      snprintf(what, sizeof what, "%s ...", s->name);
  } else {
    return;
  }
  progress_show(p, what);
}

/* ---- results ---- */

static const char *served_name(Compiled__V1__Served s) {
  switch (s) {
  case COMPILED__V1__SERVED__SERVED_L1_HIT:
    return "hit";
  case COMPILED__V1__SERVED__SERVED_L2_HIT:
    return "hit-l2";
  case COMPILED__V1__SERVED__SERVED_JOINED:
    return "joined";
  case COMPILED__V1__SERVED__SERVED_COMPILED:
    return "compiled";
  default:
    return "unknown";
  }
}

/* Prints an event as a JSON line, without the bytes of an inline artifact. */
static int print_event_json(Compiled__V1__CompileEvent *ev) {
  Compiled__V1__CompileResult *r =
      ev->event_case == COMPILED__V1__COMPILE_EVENT__EVENT_RESULT ? ev->result
                                                                  : NULL;
  ProtobufCBinaryData saved = {0, NULL};
  if (r) {
    saved = r->artifact;
    r->artifact.len = 0;
    r->artifact.data = NULL;
  }
  int rc = ctl_print_json(&ev->base);
  if (r)
    r->artifact = saved;
  return rc;
}

static void print_summary(FILE *f, const char *path,
                          const Compiled__V1__CompileResult *r,
                          int64_t total_us) {
  char size[32], comp[32], total[32];
  fprintf(f, "%s  %-8s  %10s  compile %9s  total %9s  %s\n",
          r->key ? r->key : "?", served_name(r->served),
          ctl_fmt_bytes(r->artifact_size, size, sizeof size),
          ctl_fmt_micros(r->compile_micros, comp, sizeof comp),
          ctl_fmt_micros(total_us, total, sizeof total), path);
}

static void print_diagnostics(const char *path,
                              const Compiled__V1__CompileResult *r) {
  for (size_t i = 0; i < r->n_diagnostics; i++) {
    const Compiled__V1__Diagnostic *d = r->diagnostics[i];
    if (d->severity < COMPILED__V1__SEVERITY__SEVERITY_WARNING)
      continue;
    const char *sev = d->severity == COMPILED__V1__SEVERITY__SEVERITY_ERROR
                          ? "error"
                          : "warning";
    if (d->node >= 0)
      fprintf(stderr, "%s: %s: node %d: %s\n", path, sev, d->node, d->message);
    else
      fprintf(stderr, "%s: %s: %s\n", path, sev, d->message);
  }
}

/* Writes the artifact of result `r` to `out`: the inline bytes, or fetched.
 * Checks size and digest. Returns CTL_OK or an exit code after printing. */
static int write_artifact(rpc_client *c, const submit_opts *o,
                          const Compiled__V1__CompileResult *r) {
  uint8_t *fetched = NULL;
  const uint8_t *data = r->artifact.data;
  size_t len = r->artifact.len;
  if (!r->artifact_inline) {
    int rc = ctl_fetch_artifact(c, r->key, o->timeout_ms, &fetched, &len, NULL);
    if (rc)
      return rc;
    data = fetched;
  }
  char have[65];
  ctl_sha256_hex(data, len, have);
  int rc = CTL_OK;
  if (len != r->artifact_size ||
      strcasecmp(have, r->artifact_digest ? r->artifact_digest : "") != 0) {
    ctl_errorf("%.16s: the artifact does not match the result (%zu bytes, "
               "sha256 %s; expected %llu bytes, sha256 %s)",
               r->key, len, have, (unsigned long long)r->artifact_size,
               r->artifact_digest);
    rc = CTL_ESERVER;
  } else if (ctl_write_file(o->out, data, len) != 0) {
    ctl_errorf("%s: %s", o->out, strerror(errno));
    rc = CTL_EIO;
  }
  free(fetched);
  return rc;
}

/* ---- submit ---- */

/* Reads the event stream of `s` to its end; keeps the result event in
 * *result (the caller frees it). Returns CTL_OK or CTL_EIO. */
static int read_events(rpc_stream *s, const submit_opts *o, progress *p,
                       Compiled__V1__CompileEvent **result) {
  ProtobufCMessage *m;
  int rc = CTL_OK;
  while (rpc_stream_next(s, &m) == 1) {
    Compiled__V1__CompileEvent *ev = (Compiled__V1__CompileEvent *)m;
    if (o->json && rc == CTL_OK)
      rc = print_event_json(ev);
    progress_event(p, ev);
    if (ev->event_case == COMPILED__V1__COMPILE_EVENT__EVENT_RESULT) {
      if (*result)
        protobuf_c_message_free_unpacked(&(*result)->base, NULL);
      *result = ev;
    } else {
      protobuf_c_message_free_unpacked(m, NULL);
    }
  }
  return rc;
}

/* After the stream: reports, summarises, writes. */
static int finish_submit(rpc_client *c, const submit_opts *o, const char *path,
                         const rpc_status *st,
                         const Compiled__V1__CompileEvent *ev,
                         int64_t total_us) {
  if (st->code != GRPC_STATUS_OK)
    return ctl_rpc_error(path, st);
  if (!ev || !ev->result) {
    ctl_errorf("%s: the server ended the stream without a result", path);
    return CTL_ESERVER;
  }
  const Compiled__V1__CompileResult *r = ev->result;
  if (!o->json) {
    bool to_stdout = o->out && strcmp(o->out, "-") == 0;
    print_summary(to_stdout ? stderr : stdout, path, r, total_us);
    fflush(stdout);
  }
  print_diagnostics(path, r);
  return o->out ? write_artifact(c, o, r) : CTL_OK;
}

static int submit_one(rpc_client *c, const submit_opts *o, const char *path) {
  char err[1024];
  Compiled__V1__GraphModule *g;
  int rc = ctl_load_graph(path, &g, err, sizeof err);
  if (rc) {
    ctl_errorf("%s", err);
    return rc;
  }
  Compiled__V1__CompileRequest req = COMPILED__V1__COMPILE_REQUEST__INIT;
  Compiled__V1__CompileOptions co;
  fill_options(o, &co);
  req.graph = g;
  req.options = &co;
  req.max_inline_bytes = o->max_inline;
  req.client = (char *)o->client;
  Compiled__V1__Label label;
  char file[PATH_MAX + 8], host[LABEL_HOST_MAX + 1];
  fill_label(o, path, &label, file, host);
  req.label = &label;
  progress p = {.on = !o->quiet && isatty(STDERR_FILENO),
                .file = path,
                .t0 = ctl_now_us()};
  rpc_stream *s =
      rpc_stream_start(c, "/compiled.v1.Compiler/Compile", &req.base,
                       &compiled__v1__compile_event__descriptor, o->timeout_ms);
  protobuf_c_message_free_unpacked(&g->base, NULL);
  if (!s) {
    ctl_errorf("out of memory");
    return CTL_EIO;
  }
  progress_show(&p, "sent");
  Compiled__V1__CompileEvent *result = NULL;
  int jrc = read_events(s, o, &p, &result);
  rpc_status st;
  rpc_status_init(&st);
  rpc_stream_finish(s, &st);
  progress_clear(&p);
  rc = finish_submit(c, o, path, &st, result, ctl_now_us() - p.t0);
  if (rc == CTL_OK)
    rc = jrc;
  rpc_status_clear(&st);
  if (result)
    protobuf_c_message_free_unpacked(&result->base, NULL);
  return rc;
}

/* Parses submit's command line into `o`. Returns CTL_OK, -1 after printing
 * the help, or an exit code. */
static int parse_submit(int argc, char **argv, submit_opts *o) {
  static const struct option opts[] = {
      {"json", no_argument, NULL, O_JSON},
      {"output", required_argument, NULL, 'o'},
      {"opt-level", required_argument, NULL, O_OPT},
      {"training", no_argument, NULL, O_TRAIN},
      {"return-input-mutations", no_argument, NULL, O_RETMUT},
      {"force", no_argument, NULL, O_FORCE},
      {"max-inline", required_argument, NULL, O_INLINE},
      {"client", required_argument, NULL, O_CLIENT},
      {"label", required_argument, NULL, O_LABEL},
      {"quiet", no_argument, NULL, 'q'},
      CTL_GLOBAL_OPTIONS,
      {NULL, 0, NULL, 0}};
  int c, stop;
  optind = 0; /* afresh: see CTL_GLOBAL_OPTIONS */
  while ((c = ctl_getopt(argc, argv, "o:qh", opts, NULL, submit_usage,
                         &stop)) != -1) {
    int r = common_opt(c, o);
    if (r < 0)
      return CTL_EUSAGE;
    if (r > 0)
      continue;
    if (c == 'o')
      o->out = optarg;
    else if (c == 'q')
      o->quiet = true;
    else if (c == O_FORCE)
      o->force = true;
    else if (c == O_CLIENT)
      o->client = optarg;
    else if (c == O_LABEL) {
      if (check_label(optarg))
        return CTL_EUSAGE;
      o->label = optarg;
    } else if (c == O_INLINE) {
      if (ctl_parse_size("--max-inline", optarg, &o->max_inline))
        return CTL_EUSAGE;
    }
  }
  if (stop)
    return stop;
  o->timeout_ms = ctl_timeout(600 * 1000);
  if (optind >= argc) {
    ctl_errorf("submit: no graph file given");
    ctl_help(stderr, submit_usage);
    return CTL_EUSAGE;
  }
  if (o->out && strcmp(o->out, "-") == 0 &&
      (o->json || isatty(STDOUT_FILENO))) {
    ctl_errorf("submit: -o - writes binary to standard output: not with "
               "--json, nor to a terminal");
    return CTL_EUSAGE;
  }
  if (o->out && argc - optind > 1) {
    ctl_errorf("submit: -o takes one FILE, got %d", argc - optind);
    return CTL_EUSAGE;
  }
  return CTL_OK;
}

int ctl_cmd_submit(int argc, char **argv) {
  submit_opts o = {.opt_level = -1, .client = "compilectl"};
  int rc = parse_submit(argc, argv, &o);
  if (rc)
    return rc < 0 ? CTL_OK : rc;
  rpc_client *c = ctl_connect();
  if (!c)
    return CTL_EIO;
  for (int i = optind; i < argc; i++) {
    int frc = submit_one(c, &o, argv[i]);
    if (frc && !rc)
      rc = frc;
    if (frc == CTL_EUNREACHABLE)
      break;
  }
  rpc_close(c);
  return rc;
}

/* ---- explain ---- */

static void print_explain(const Compiled__V1__ExplainResponse *r) {
  puts(r->summary && *r->summary ? r->summary : r->cached ? "hit" : "miss");
  printf("key      %s\n", r->key);
  if (!r->cached && r->has_nearest && r->nearest) {
    const Compiled__V1__EntryInfo *e = r->nearest;
    char size[32], comp[32], ago[32];
    printf("nearest  %s  %s, %llu hits, compiled in %s, last used %s\n", e->key,
           ctl_fmt_bytes(e->size, size, sizeof size),
           (unsigned long long)e->hits,
           ctl_fmt_micros(e->compile_micros, comp, sizeof comp),
           ctl_fmt_ago(e->last_used, ago, sizeof ago));
    if (e->label) {
      char label[1700];
      printf("label    %s\n", ctl_fmt_label(e->label, label, sizeof label));
    }
    fputs("differs ", stdout);
    for (size_t i = 0; i < r->n_differing; i++)
      printf("%s%s", i ? ", " : " ", r->differing[i]);
    puts(r->n_differing ? "" : " nothing");
    for (size_t i = 0; i < r->n_differences; i++)
      printf("         %s\n", r->differences[i]);
  }
}

/* As parse_submit, for explain. */
static int parse_explain(int argc, char **argv, submit_opts *o) {
  static const struct option opts[] = {
      {"json", no_argument, NULL, O_JSON},
      {"opt-level", required_argument, NULL, O_OPT},
      {"training", no_argument, NULL, O_TRAIN},
      {"return-input-mutations", no_argument, NULL, O_RETMUT},
      CTL_GLOBAL_OPTIONS,
      {NULL, 0, NULL, 0}};
  int c, stop;
  optind = 0; /* afresh: see CTL_GLOBAL_OPTIONS */
  while ((c = ctl_getopt(argc, argv, "h", opts, NULL, explain_usage, &stop)) !=
         -1)
    if (common_opt(c, o) < 0)
      return CTL_EUSAGE;
  if (stop)
    return stop;
  o->timeout_ms = ctl_timeout(CTL_DEFAULT_TIMEOUT_MS);
  if (optind != argc - 1) {
    ctl_errorf("explain: wants exactly one graph file");
    ctl_help(stderr, explain_usage);
    return CTL_EUSAGE;
  }
  return CTL_OK;
}

int ctl_cmd_explain(int argc, char **argv) {
  submit_opts o = {.opt_level = -1};
  int rc = parse_explain(argc, argv, &o);
  if (rc)
    return rc < 0 ? CTL_OK : rc;
  const char *path = argv[optind];
  char err[1024];
  Compiled__V1__GraphModule *g;
  rc = ctl_load_graph(path, &g, err, sizeof err);
  if (rc) {
    ctl_errorf("%s", err);
    return rc;
  }
  rpc_client *c = ctl_connect();
  Compiled__V1__ExplainRequest req = COMPILED__V1__EXPLAIN_REQUEST__INIT;
  Compiled__V1__CompileOptions co;
  fill_options(&o, &co);
  req.graph = g;
  req.options = &co;
  ProtobufCMessage *resp = NULL;
  rpc_status st;
  rpc_status_init(&st);
  if (!c)
    rc = CTL_EIO;
  else if (rpc_unary(c, "/compiled.v1.Compiler/Explain", &req.base,
                     &compiled__v1__explain_response__descriptor, &resp,
                     o.timeout_ms, &st) != 0)
    rc = ctl_rpc_error(path, &st);
  else if (o.json)
    rc = ctl_print_json(resp);
  else
    print_explain((Compiled__V1__ExplainResponse *)resp);
  if (resp)
    protobuf_c_message_free_unpacked(resp, NULL);
  rpc_status_clear(&st);
  protobuf_c_message_free_unpacked(&g->base, NULL);
  rpc_close(c);
  return rc;
}

/* ---- for package.c ---- */

int ctl_compile_artifact(rpc_client *c, const char *path,
                         Compiled__V1__GraphModule *g,
                         Compiled__V1__Target *target, int opt_level,
                         int64_t timeout_ms, uint8_t **art, size_t *art_len,
                         char **signature, char **signature_key) {
  submit_opts o = {.opt_level = opt_level,
                   .client = "compilectl package",
                   .quiet = !isatty(STDERR_FILENO),
                   .timeout_ms = timeout_ms};
  Compiled__V1__CompileRequest req = COMPILED__V1__COMPILE_REQUEST__INIT;
  Compiled__V1__CompileOptions co;
  fill_options(&o, &co);
  req.graph = g;
  req.options = &co;
  req.target = target;
  req.client = (char *)o.client;
  Compiled__V1__Label label;
  char file[PATH_MAX + 8], host[LABEL_HOST_MAX + 1];
  fill_label(&o, path, &label, file, host);
  req.label = &label;
  progress p = {.on = !o.quiet, .file = path, .t0 = ctl_now_us()};
  rpc_stream *s =
      rpc_stream_start(c, "/compiled.v1.Compiler/Compile", &req.base,
                       &compiled__v1__compile_event__descriptor, o.timeout_ms);
  if (!s) {
    ctl_errorf("out of memory");
    return CTL_EIO;
  }
  progress_show(&p, "sent");
  Compiled__V1__CompileEvent *ev = NULL;
  read_events(s, &o, &p, &ev);
  rpc_status st;
  rpc_status_init(&st);
  rpc_stream_finish(s, &st);
  progress_clear(&p);
  int rc = CTL_OK;
  if (st.code != GRPC_STATUS_OK) {
    rc = ctl_rpc_error(path, &st);
  } else if (!ev || !ev->result) {
    ctl_errorf("%s: the server ended the stream without a result", path);
    rc = CTL_ESERVER;
  } else {
    const Compiled__V1__CompileResult *r = ev->result;
    print_diagnostics(path, r);
    uint8_t *fetched = NULL;
    const uint8_t *data = r->artifact.data;
    size_t len = r->artifact.len;
    if (!r->artifact_inline) {
      rc = ctl_fetch_artifact(c, r->key, o.timeout_ms, &fetched, &len, NULL);
      data = fetched;
    }
    if (rc == CTL_OK) {
      char have[65];
      ctl_sha256_hex(data, len, have);
      if (len != r->artifact_size ||
          strcasecmp(have, r->artifact_digest ? r->artifact_digest : "")) {
        ctl_errorf("%.16s: the artifact does not match the result", r->key);
        rc = CTL_ESERVER;
      } else if (!(*art = malloc(len ? len : 1))) {
        ctl_errorf("out of memory");
        rc = CTL_EIO;
      } else {
        memcpy(*art, data, len);
        *art_len = len;
        *signature = strdup(r->signature ? r->signature : "");
        *signature_key = strdup(r->signature_key ? r->signature_key : "");
      }
    }
    free(fetched);
  }
  rpc_status_clear(&st);
  if (ev)
    protobuf_c_message_free_unpacked(&ev->base, NULL);
  return rc;
}
