/*
 * admin_cmd.c: the compilectl commands that inspect and manage a daemon's
 * cache: lookup, fetch, stats, ls, evict, and the standard health check.
 *
 * Each is one unary call (fetch: one stream) printed either for people
 * (aligned key/value lines or a table) or, with --json, as the response
 * message in protobuf's JSON form on one line. Keys may be abbreviated to
 * a unique prefix; ctl_resolve_key expands them through the entry list.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zlib.h>

#include "client/ctl/ctl.h"
#include "compiled/v1/health.pb-c.h"

static const char lookup_usage[] =
    "usage: compilectl lookup [--json] [--timeout SECONDS] KEY\n"
    "\n"
    "Prints what the cache holds for KEY (64 hex digits, or a unique prefix\n"
    "of at least 4): its label (the program's name, source file and line,\n"
    "and the host that sent it), sizes, hits, compile time, when it was\n"
    "created and last used, its digest and key components, and what its\n"
    "program is made of. Does not count as a use.\n"
    "  --json             print the compiled.v1.LookupResponse as JSON\n"
    "  --timeout SECONDS  give up after this long (default 60)\n";

static const char fetch_usage[] =
    "usage: compilectl fetch [--timeout SECONDS] KEY -o FILE\n"
    "       compilectl fetch --source KEY [-o FILE]\n"
    "\n"
    "Downloads the artifact (a compiled.v1.Artifact message) of KEY in\n"
    "chunks, checks its SHA-256 against the server's digest and writes it to\n"
    "FILE (\"-\": standard output, not a terminal).\n"
    "  -o, --output FILE  where to write it (required without --source)\n"
    "  --source           write the generated C of its native program instead\n"
    "                     (default: standard output)\n"
    "  --timeout SECONDS  give up after this long (default 60)\n";

static const char stats_usage[] =
    "usage: compilectl stats [--json] [--timeout SECONDS]\n"
    "\n"
    "Prints the daemon's counters: requests, cache hits, misses, joins\n"
    "(requests that waited for a compile already running), compiles,\n"
    "failures, evictions, corrupt entries dropped, entries and bytes cached,\n"
    "compile time saved by hits, the compile queue, uptime and version;\n"
    "then the most recently used entries with their labels (listing them\n"
    "needs an admin token, as for ls; without one they are left out).\n"
    "  --json             print the compiled.v1.StatsResponse as JSON\n"
    "  --timeout SECONDS  give up after this long (default 60)\n";

static const char ls_usage[] =
    "usage: compilectl ls [--limit N] [--json] [--timeout SECONDS]\n"
    "\n"
    "Lists cached entries, most recently used first: key prefix, artifact\n"
    "size, stored (compressed) size, hits, compile time, last use, and the\n"
    "label: the program's name, source file and line, and the client's host\n"
    "(\"MyModule at model.py:42 on node7\"; \"-\" for an entry stored\n"
    "without one).\n"
    "  --limit N          at most N entries (default 100)\n"
    "  --json             print the compiled.v1.ListResponse as JSON\n"
    "  --timeout SECONDS  give up after this long (default 60)\n";

static const char evict_usage[] =
    "usage: compilectl evict KEY | --all | --older-than DURATION\n"
    "\n"
    "Removes entries from the cache and prints how many and how many bytes.\n"
    "  KEY                   one entry (64 hex digits or a unique prefix)\n"
    "  --all                 every entry\n"
    "  --older-than DURATION entries last used longer ago than DURATION:\n"
    "                        90s, 30m, 12h, 7d, 2w, 1h30m, or seconds\n"
    "  --json                print the compiled.v1.EvictResponse as JSON\n"
    "  --timeout SECONDS     give up after this long (default 60)\n";

static const char health_usage[] =
    "usage: compilectl health [--service NAME] [--json] [--timeout SECONDS]\n"
    "\n"
    "Asks grpc.health.v1.Health/Check and prints the status: SERVING,\n"
    "NOT_SERVING (e.g. the daemon is draining), UNKNOWN or SERVICE_UNKNOWN.\n"
    "  --service NAME     a service to check (default: the server as a "
    "whole;\n"
    "                     the daemon knows compiled.v1.Compiler)\n"
    "  --json             print the grpc.health.v1.HealthCheckResponse as "
    "JSON\n"
    "  --timeout SECONDS  give up after this long (default 60)\n";

/* What the command lines of these commands can say. */
typedef struct admin_opts {
  bool json;
  int64_t timeout_ms;
  const char *out;     /* fetch -o */
  uint32_t limit;      /* ls --limit */
  bool all;            /* evict --all */
  int64_t older_than;  /* evict --older-than, seconds; -1: not given */
  const char *service; /* health --service */
  bool source;         /* fetch --source */
} admin_opts;

enum { O_JSON = 256, O_LIMIT, O_ALL, O_OLDER, O_SERVICE, O_SOURCE };

/* Handles one of the own options of any of these commands (ctl_getopt
 * takes the others). Returns 0, or CTL_EUSAGE after saying why. */
static int handle_opt(int c, admin_opts *o) {
  char *end;
  switch (c) {
  case O_JSON:
    o->json = true;
    return 0;
  case O_SOURCE:
    o->source = true;
    return 0;
  case 'o':
    o->out = optarg;
    return 0;
  case O_LIMIT: {
    unsigned long v = strtoul(optarg, &end, 10);
    if (*end || end == optarg || optarg[0] == '-' || v == 0 || v > 100000) {
      ctl_errorf("--limit wants 1..100000, got '%s'", optarg);
      return CTL_EUSAGE;
    }
    o->limit = (uint32_t)v;
    return 0;
  }
  case O_ALL:
    o->all = true;
    return 0;
  case O_OLDER:
    return ctl_parse_duration("--older-than", optarg, &o->older_than)
               ? CTL_EUSAGE
               : 0;
  case O_SERVICE:
    o->service = optarg;
    return 0;
  default:
    return 0;
  }
}

/* Parses options with table `opts`, then checks that `npos` positional
 * arguments remain (-1: any number). Returns 0, 1 for --help, or
 * CTL_EUSAGE. */
static int parse(int argc, char **argv, const struct option *opts,
                 const char *shortopts, const char *usage, int npos,
                 admin_opts *o) {
  *o = (admin_opts){.older_than = -1};
  int c, stop;
  optind = 0; /* afresh: see CTL_GLOBAL_OPTIONS */
  while ((c = ctl_getopt(argc, argv, shortopts, opts, NULL, usage, &stop)) !=
         -1) {
    int rc = handle_opt(c, o);
    if (rc)
      return rc;
  }
  if (stop)
    return stop < 0 ? 1 : stop;
  o->timeout_ms = ctl_timeout(CTL_DEFAULT_TIMEOUT_MS);
  if (npos >= 0 && argc - optind != npos) {
    const char *name = strrchr(argv[0], ' ');
    ctl_errorf("%s: wants %d argument%s, got %d", name ? name + 1 : argv[0],
               npos, npos == 1 ? "" : "s", argc - optind);
    ctl_help(stderr, usage);
    return CTL_EUSAGE;
  }
  return 0;
}

/* parse() with short options "h", then connects. Returns the exit code the
 * command ends with (CTL_OK after --help), or -1 with `*c` connected. */
static int begin(int argc, char **argv, const struct option *opts,
                 const char *usage, int npos, admin_opts *o, rpc_client **c) {
  *c = NULL;
  int rc = parse(argc, argv, opts, "h", usage, npos, o);
  if (rc)
    return rc == 1 ? CTL_OK : rc;
  *c = ctl_connect();
  return *c ? -1 : CTL_EIO;
}

/* One unary call; prints the error and returns its exit code on failure. */
static int unary(rpc_client *c, const char *method, const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *desc,
                 ProtobufCMessage **resp, int64_t timeout_ms,
                 const char *what) {
  rpc_status st;
  rpc_status_init(&st);
  int rc = CTL_OK;
  if (rpc_unary(c, method, req, desc, resp, timeout_ms, &st) != 0)
    rc = ctl_rpc_error(what, &st);
  rpc_status_clear(&st);
  return rc;
}

static char *fmt_time(int64_t unix_seconds, char *buf, size_t len) {
  time_t t = (time_t)unix_seconds;
  struct tm tm;
  if (unix_seconds <= 0 || !localtime_r(&t, &tm) ||
      strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm) == 0)
    snprintf(buf, len, "-");
  return buf;
}

/* ---- lookup ---- */

/* The label's lines of lookup: the full file path, unlike ls. */
static void print_label(const Compiled__V1__Label *l) {
  if (!l) {
    printf("label       -\n");
    return;
  }
  printf("label       %s\n", l->name && *l->name ? l->name : "-");
  if (l->file && *l->file && l->line > 0)
    printf("source      %s:%d\n", l->file, (int)l->line);
  else
    printf("source      %s\n", l->file && *l->file ? l->file : "-");
  printf("host        %s\n", l->host && *l->host ? l->host : "-");
}

static void print_entry(const Compiled__V1__EntryInfo *e) {
  char a[32], b[32], c[32], d[32];
  printf("key         %s\n", e->key);
  print_label(e->label);
  printf("digest      %s\n", e->digest);
  printf("size        %s (%" PRIu64 " bytes), stored %s\n",
         ctl_fmt_bytes(e->size, a, sizeof a), e->size,
         ctl_fmt_bytes(e->stored_size, b, sizeof b));
  printf("hits        %" PRIu64 "\n", e->hits);
  printf("compile     %s\n", ctl_fmt_micros(e->compile_micros, a, sizeof a));
  printf("created     %s (%s)\n", fmt_time(e->created, c, sizeof c),
         ctl_fmt_ago(e->created, a, sizeof a));
  printf("last used   %s (%s)\n", fmt_time(e->last_used, d, sizeof d),
         ctl_fmt_ago(e->last_used, b, sizeof b));
  const Compiled__V1__KeyComponents *k = e->components;
  if (!k)
    return;
  printf("components  graph    %s\n", k->graph);
  printf("            inputs   %s\n", k->inputs);
  printf("            options  %s\n", k->options);
  printf("            target   %s\n", k->target);
  printf("            compiler %s\n", k->compiler);
  printf("            schema   %s\n", k->schema);
}

/* What the artifact's program is made of (the same counts as Python's
 * CompiledFunction.summary()): "runs native" when it has generated code,
 * "runs aten" when every node is an ATen call. */
static void print_program(const Compiled__V1__Artifact *art) {
  const Compiled__V1__NativeProgram *np = art->native_program;
  if (np && np->summary && (!np->code || !np->code->n_entry_symbols)) {
    const Compiled__V1__NativeSummary *s = np->summary;
    printf("program     runs aten: no generated code (nothing needed a "
           "kernel): %d nodes: %d extern, %d fallback, %d views or copies\n",
           s->nodes, s->extern_, s->fallback, s->native);
    for (size_t i = 0; i < s->n_fallback_ops; i++)
      printf("%s %s\n", i ? "           " : "fallbacks  ", s->fallback_ops[i]);
  } else if (np && np->summary) {
    const Compiled__V1__NativeSummary *s = np->summary;
    char b[32];
    printf("program     runs native (%s): %d nodes: %d native in %d generated "
           "kernels, %d extern, %d fallback\n",
           np->code && np->code->target && *np->code->target ? np->code->target
                                                             : "?",
           s->nodes, s->native, s->kernels, s->extern_, s->fallback);
    printf("arena       %s per call\n",
           ctl_fmt_bytes(
               np->memory_plan ? (uint64_t)np->memory_plan->arena_bytes : 0, b,
               sizeof b));
    for (size_t i = 0; i < s->n_fallback_ops; i++)
      printf("%s %s\n", i ? "           " : "fallbacks  ", s->fallback_ops[i]);
  } else {
    size_t n = art->program ? art->program->n_instructions : 0;
    printf("program     runs aten: no native program: %zu nodes, all "
           "fallback\n",
           n);
  }
  for (size_t i = 0; i < art->n_diagnostics; i++)
    printf("%s %s\n", i ? "           " : "diagnostic ",
           art->diagnostics[i]->message);
}

/* The artifact of `key`, unpacked (free with
 * protobuf_c_message_free_unpacked); NULL after printing why. */
static Compiled__V1__Artifact *fetch_unpacked(rpc_client *c, const char *key,
                                              int64_t timeout_ms) {
  uint8_t *data = NULL;
  size_t len = 0;
  char digest[65];
  if (ctl_fetch_artifact(c, key, timeout_ms, &data, &len, digest) != CTL_OK)
    return NULL;
  Compiled__V1__Artifact *art = compiled__v1__artifact__unpack(NULL, len, data);
  free(data);
  if (!art)
    ctl_errorf("%s: the artifact does not parse", key);
  return art;
}

int ctl_cmd_lookup(int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, O_JSON},
                                       CTL_GLOBAL_OPTIONS,
                                       {NULL, 0, NULL, 0}};
  admin_opts o;
  rpc_client *c;
  int rc = begin(argc, argv, opts, lookup_usage, 1, &o, &c);
  if (rc >= 0)
    return rc;
  char key[65];
  rc = ctl_resolve_key(c, argv[optind], o.timeout_ms, key);
  Compiled__V1__LookupRequest req = COMPILED__V1__LOOKUP_REQUEST__INIT;
  req.key = key;
  ProtobufCMessage *m = NULL;
  if (rc == CTL_OK)
    rc = unary(c, "/compiled.v1.Compiler/Lookup", &req.base,
               &compiled__v1__lookup_response__descriptor, &m, o.timeout_ms,
               "lookup");
  if (rc == CTL_OK) {
    Compiled__V1__LookupResponse *r = (Compiled__V1__LookupResponse *)m;
    if (o.json)
      rc = ctl_print_json(m);
    else if (r->found && r->entry) {
      print_entry(r->entry);
      Compiled__V1__Artifact *art = fetch_unpacked(c, key, o.timeout_ms);
      if (art) {
        print_program(art);
        protobuf_c_message_free_unpacked(&art->base, NULL);
      }
    }
    if (rc == CTL_OK && !r->found) {
      if (!o.json)
        ctl_errorf("%s: not in the cache", key);
      rc = CTL_ENOTFOUND;
    }
  }
  if (m)
    protobuf_c_message_free_unpacked(m, NULL);
  rpc_close(c);
  return rc;
}

/* ---- fetch ---- */

/* The generated C of an artifact's native program, to `out` (NULL or "-":
 * standard output). */
static int write_source(const Compiled__V1__Artifact *art, const char *key,
                        const char *out) {
  const Compiled__V1__NativeProgram *np = art->native_program;
  if (!np || !np->source_zlib.len) {
    ctl_errorf("%s: the artifact has no native code%s%s", key,
               art->n_diagnostics ? ": " : "",
               art->n_diagnostics ? art->diagnostics[0]->message : "");
    return CTL_ENOTFOUND;
  }
  uLongf cap = 1 << 20;
  for (;;) {
    uint8_t *buf = malloc(cap);
    uLongf len = cap;
    int zr = buf ? uncompress(buf, &len, np->source_zlib.data,
                              (uLong)np->source_zlib.len)
                 : Z_MEM_ERROR;
    if (zr == Z_BUF_ERROR && cap < (1u << 30)) {
      free(buf);
      cap *= 4;
      continue;
    }
    if (zr != Z_OK) {
      free(buf);
      ctl_errorf("%s: the source does not decompress", key);
      return CTL_ESERVER;
    }
    int rc = CTL_OK;
    if (!out || !strcmp(out, "-"))
      fwrite(buf, 1, len, stdout);
    else if (ctl_write_file(out, buf, len) != 0) {
      ctl_errorf("%s: %s", out, strerror(errno));
      rc = CTL_EIO;
    }
    free(buf);
    return rc;
  }
}

int ctl_cmd_fetch(int argc, char **argv) {
  static const struct option opts[] = {{"source", no_argument, NULL, O_SOURCE},
                                       {"output", required_argument, NULL, 'o'},
                                       CTL_GLOBAL_OPTIONS,
                                       {NULL, 0, NULL, 0}};
  admin_opts o;
  int rc = parse(argc, argv, opts, "o:h", fetch_usage, 1, &o);
  if (rc)
    return rc == 1 ? CTL_OK : rc;
  if (o.source) {
    rpc_client *c = ctl_connect();
    if (!c)
      return CTL_EIO;
    char key[65];
    rc = ctl_resolve_key(c, argv[optind], o.timeout_ms, key);
    Compiled__V1__Artifact *art =
        rc == CTL_OK ? fetch_unpacked(c, key, o.timeout_ms) : NULL;
    if (rc == CTL_OK)
      rc = art ? write_source(art, key, o.out) : CTL_ESERVER;
    if (art)
      protobuf_c_message_free_unpacked(&art->base, NULL);
    rpc_close(c);
    return rc;
  }
  if (!o.out) {
    ctl_errorf("fetch: -o FILE is required");
    return CTL_EUSAGE;
  }
  if (strcmp(o.out, "-") == 0 && isatty(STDOUT_FILENO)) {
    ctl_errorf("refusing to write a binary artifact to a terminal");
    return CTL_EUSAGE;
  }
  rpc_client *c = ctl_connect();
  if (!c)
    return CTL_EIO;
  char key[65], digest[65];
  uint8_t *data = NULL;
  size_t len = 0;
  rc = ctl_resolve_key(c, argv[optind], o.timeout_ms, key);
  if (rc == CTL_OK)
    rc = ctl_fetch_artifact(c, key, o.timeout_ms, &data, &len, digest);
  if (rc == CTL_OK && ctl_write_file(o.out, data, len) != 0) {
    ctl_errorf("%s: %s", o.out, strerror(errno));
    rc = CTL_EIO;
  }
  if (rc == CTL_OK && strcmp(o.out, "-") != 0) {
    char size[32];
    printf("%s: %s (%zu bytes), sha256 %s verified\n", o.out,
           ctl_fmt_bytes(len, size, sizeof size), len, digest);
  }
  free(data);
  rpc_close(c);
  return rc;
}

/* ---- stats ---- */

static void row(const char *name, const char *value, const char *note) {
  printf("%-24s %12s%s%s\n", name, value, *note ? "  " : "", note);
}

static void row_u(const char *name, uint64_t v, const char *note) {
  char b[32];
  snprintf(b, sizeof b, "%" PRIu64, v);
  row(name, b, note);
}

static void print_stats(const Compiled__V1__StatsResponse *s) {
  char a[64], b[64], note[96] = "";
  uint64_t lookups = s->hits + s->misses;
  row_u("requests", s->requests, "");
  if (lookups)
    snprintf(note, sizeof note, "(%.1f%% of hits+misses)",
             100.0 * (double)s->hits / (double)lookups);
  row_u("hits", s->hits, note);
  row_u("  from memory", s->hot_hits, "(in-memory tier)");
  row_u("  key memo hits", s->memo_hits, "(key known from request bytes)");
  row_u("misses", s->misses, "");
  row_u("joins", s->joins, "");
  row_u("compiles", s->compiles, "");
  row_u("compile failures", s->compile_failures, "");
  row_u("failures remembered", s->failures_cached_hits, "(answered again)");
  row_u("rejected busy", s->rejected_busy, "");
  row_u("evictions", s->evictions, "");
  row_u("corrupt dropped", s->corrupt_dropped, "");
  row_u("entries", s->entries, "");
  snprintf(note, sizeof note, "(raw %s)",
           ctl_fmt_bytes(s->raw_bytes, b, sizeof b));
  row("bytes", ctl_fmt_bytes(s->bytes, a, sizeof a), note);
  row("in-memory bytes", ctl_fmt_bytes(s->hot_bytes, a, sizeof a), "");
  row("compile time saved",
      ctl_fmt_micros(s->compile_micros_saved, a, sizeof a), "");
  snprintf(a, sizeof a, "%u/%u/%u", s->queued, s->running, s->workers);
  row("queued/running/workers", a, "");
  snprintf(a, sizeof a, "%u/%u", s->connections, s->max_connections);
  snprintf(note, sizeof note, "(%" PRIu64 " refused)", s->connections_refused);
  row("connections/limit", a, note);
  snprintf(note, sizeof note, "(of %s; %" PRIu64 " requests refused)",
           ctl_fmt_bytes(s->memory_budget, b, sizeof b), s->rejected_memory);
  row("request memory", ctl_fmt_bytes(s->memory_in_use, a, sizeof a), note);
  row("uptime", ctl_fmt_seconds(s->uptime_seconds, a, sizeof a), "");
  snprintf(note, sizeof note, "(build %.16s)", s->build_id ? s->build_id : "");
  row("version", s->version && *s->version ? s->version : "?", note);
}

/* How many entries stats shows. */
#define STATS_RECENT 5

/* After the counters: the most recently used entries with their labels,
 * from List. List wants an admin token (Stats a read one), so a refusal
 * only leaves the section out, saying why; it never fails the command. */
static void print_recent(rpc_client *c, int64_t timeout_ms) {
  Compiled__V1__ListRequest req = COMPILED__V1__LIST_REQUEST__INIT;
  req.limit = STATS_RECENT;
  ProtobufCMessage *m = NULL;
  rpc_status st;
  rpc_status_init(&st);
  int rc =
      rpc_unary(c, "/compiled.v1.Compiler/List", &req.base,
                &compiled__v1__list_response__descriptor, &m, timeout_ms, &st);
  if (rc != 0) {
    if (st.code == GRPC_STATUS_PERMISSION_DENIED)
      printf("\nrecent entries: not shown (listing them needs an admin "
             "token)\n");
    else
      printf("\nrecent entries: not shown (List failed: %s)\n",
             st.details && *st.details ? st.details : "no details");
    rpc_status_clear(&st);
    return;
  }
  rpc_status_clear(&st);
  const Compiled__V1__ListResponse *r = (Compiled__V1__ListResponse *)m;
  if (r->n_entries) {
    printf("\nrecent entries (most recently used first):\n");
    printf("  %-16s  %6s  %10s  %-12s  %s\n", "KEY", "HITS", "SIZE",
           "LAST USED", "LABEL");
  }
  for (size_t i = 0; i < r->n_entries; i++) {
    const Compiled__V1__EntryInfo *e = r->entries[i];
    char size[32], ago[32], label[1700];
    printf("  %-16.16s  %6" PRIu64 "  %10s  %-12s  %s\n", e->key, e->hits,
           ctl_fmt_bytes(e->size, size, sizeof size),
           ctl_fmt_ago(e->last_used, ago, sizeof ago),
           ctl_fmt_label(e->label, label, sizeof label));
  }
  protobuf_c_message_free_unpacked(m, NULL);
}

int ctl_cmd_stats(int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, O_JSON},
                                       CTL_GLOBAL_OPTIONS,
                                       {NULL, 0, NULL, 0}};
  admin_opts o;
  rpc_client *c;
  int rc = begin(argc, argv, opts, stats_usage, 0, &o, &c);
  if (rc >= 0)
    return rc;
  Compiled__V1__StatsRequest req = COMPILED__V1__STATS_REQUEST__INIT;
  ProtobufCMessage *m = NULL;
  rc = unary(c, "/compiled.v1.Compiler/Stats", &req.base,
             &compiled__v1__stats_response__descriptor, &m, o.timeout_ms,
             "stats");
  if (rc == CTL_OK && o.json)
    rc = ctl_print_json(m);
  else if (rc == CTL_OK) {
    print_stats((Compiled__V1__StatsResponse *)m);
    print_recent(c, o.timeout_ms);
  }
  if (m)
    protobuf_c_message_free_unpacked(m, NULL);
  rpc_close(c);
  return rc;
}

/* ---- ls ---- */

static void print_list(const Compiled__V1__ListResponse *r) {
  printf("%-16s  %10s  %10s  %6s  %10s  %-12s  %s\n", "KEY", "SIZE", "STORED",
         "HITS", "COMPILE", "LAST USED", "LABEL");
  for (size_t i = 0; i < r->n_entries; i++) {
    const Compiled__V1__EntryInfo *e = r->entries[i];
    char size[32], stored[32], comp[32], ago[32], label[1700];
    printf("%-16.16s  %10s  %10s  %6" PRIu64 "  %10s  %-12s  %s\n", e->key,
           ctl_fmt_bytes(e->size, size, sizeof size),
           ctl_fmt_bytes(e->stored_size, stored, sizeof stored), e->hits,
           ctl_fmt_micros(e->compile_micros, comp, sizeof comp),
           ctl_fmt_ago(e->last_used, ago, sizeof ago),
           ctl_fmt_label(e->label, label, sizeof label));
  }
}

int ctl_cmd_ls(int argc, char **argv) {
  static const struct option opts[] = {
      {"limit", required_argument, NULL, O_LIMIT},
      {"json", no_argument, NULL, O_JSON},
      CTL_GLOBAL_OPTIONS,
      {NULL, 0, NULL, 0}};
  admin_opts o;
  rpc_client *c;
  int rc = begin(argc, argv, opts, ls_usage, 0, &o, &c);
  if (rc >= 0)
    return rc;
  Compiled__V1__ListRequest req = COMPILED__V1__LIST_REQUEST__INIT;
  req.limit = o.limit;
  ProtobufCMessage *m = NULL;
  rc = unary(c, "/compiled.v1.Compiler/List", &req.base,
             &compiled__v1__list_response__descriptor, &m, o.timeout_ms, "ls");
  if (rc == CTL_OK && o.json)
    rc = ctl_print_json(m);
  else if (rc == CTL_OK)
    print_list((Compiled__V1__ListResponse *)m);
  uint32_t limit = o.limit ? o.limit : 100;
  if (rc == CTL_OK && !o.json &&
      ((Compiled__V1__ListResponse *)m)->n_entries >= limit)
    fprintf(stderr, "(the %u most recently used entries; see --limit)\n",
            limit);
  if (m)
    protobuf_c_message_free_unpacked(m, NULL);
  rpc_close(c);
  return rc;
}

/* ---- evict ---- */

/* Fills `req` from the command line. Returns CTL_OK or an exit code. */
static int evict_request(rpc_client *c, const admin_opts *o, int npos,
                         const char *arg, char key[65],
                         Compiled__V1__EvictRequest *req) {
  int given = (npos > 0) + o->all + (o->older_than >= 0);
  if (given != 1 || npos > 1) {
    ctl_errorf("evict: give exactly one of KEY, --all, --older-than");
    ctl_help(stderr, evict_usage);
    return CTL_EUSAGE;
  }
  if (o->all) {
    req->what_case = COMPILED__V1__EVICT_REQUEST__WHAT_ALL;
    req->all = 1;
  } else if (o->older_than >= 0) {
    req->what_case = COMPILED__V1__EVICT_REQUEST__WHAT_OLDER_THAN_SECONDS;
    req->older_than_seconds = o->older_than;
  } else {
    int rc = ctl_resolve_key(c, arg, o->timeout_ms, key);
    if (rc)
      return rc;
    req->what_case = COMPILED__V1__EVICT_REQUEST__WHAT_KEY;
    req->key = key;
  }
  return CTL_OK;
}

int ctl_cmd_evict(int argc, char **argv) {
  static const struct option opts[] = {
      {"all", no_argument, NULL, O_ALL},
      {"older-than", required_argument, NULL, O_OLDER},
      {"json", no_argument, NULL, O_JSON},
      CTL_GLOBAL_OPTIONS,
      {NULL, 0, NULL, 0}};
  admin_opts o;
  rpc_client *c;
  int rc = begin(argc, argv, opts, evict_usage, -1, &o, &c);
  if (rc >= 0)
    return rc;
  int npos = argc - optind;
  char key[65];
  Compiled__V1__EvictRequest req = COMPILED__V1__EVICT_REQUEST__INIT;
  ProtobufCMessage *m = NULL;
  rc = evict_request(c, &o, npos, npos ? argv[optind] : "", key, &req);
  if (rc == CTL_OK)
    rc = unary(c, "/compiled.v1.Compiler/Evict", &req.base,
               &compiled__v1__evict_response__descriptor, &m, o.timeout_ms,
               "evict");
  if (rc == CTL_OK) {
    const Compiled__V1__EvictResponse *r = (Compiled__V1__EvictResponse *)m;
    char freed[32];
    if (o.json)
      rc = ctl_print_json(m);
    else
      printf("evicted %" PRIu64 " entr%s, %s freed\n", r->evicted,
             r->evicted == 1 ? "y" : "ies",
             ctl_fmt_bytes(r->bytes_freed, freed, sizeof freed));
    if (rc == CTL_OK &&
        req.what_case == COMPILED__V1__EVICT_REQUEST__WHAT_KEY &&
        r->evicted == 0) {
      ctl_errorf("%s: not in the cache", key);
      rc = CTL_ENOTFOUND;
    }
  }
  if (m)
    protobuf_c_message_free_unpacked(m, NULL);
  rpc_close(c);
  return rc;
}

/* ---- health ---- */

static const char *serving_name(int status) {
  switch (status) {
  case GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING:
    return "SERVING";
  case GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING:
    return "NOT_SERVING";
  case GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN:
    return "SERVICE_UNKNOWN";
  default:
    return "UNKNOWN";
  }
}

/* Calls Health/Check; returns CTL_OK and the status, or an exit code. */
static int health_check(rpc_client *c, const admin_opts *o, int *status,
                        ProtobufCMessage **resp) {
  Grpc__Health__V1__HealthCheckRequest req =
      GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  req.service = (char *)(o->service ? o->service : "");
  rpc_status st;
  rpc_status_init(&st);
  int rc = CTL_OK;
  if (rpc_unary(c, "/grpc.health.v1.Health/Check", &req.base,
                &grpc__health__v1__health_check_response__descriptor, resp,
                o->timeout_ms, &st) == 0)
    *status = ((Grpc__Health__V1__HealthCheckResponse *)*resp)->status;
  else if (st.code == GRPC_STATUS_NOT_FOUND)
    *status =
        GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
  else
    rc = ctl_rpc_error("health", &st);
  rpc_status_clear(&st);
  return rc;
}

int ctl_cmd_health(int argc, char **argv) {
  static const struct option opts[] = {
      {"service", required_argument, NULL, O_SERVICE},
      {"json", no_argument, NULL, O_JSON},
      CTL_GLOBAL_OPTIONS,
      {NULL, 0, NULL, 0}};
  admin_opts o;
  rpc_client *c;
  int rc = begin(argc, argv, opts, health_usage, 0, &o, &c);
  if (rc >= 0)
    return rc;
  int status = 0;
  ProtobufCMessage *m = NULL;
  rc = health_check(c, &o, &status, &m);
  if (rc == CTL_OK) {
    if (o.json && m)
      rc = ctl_print_json(m);
    else
      puts(serving_name(status));
    if (rc == CTL_OK &&
        status !=
            GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING)
      rc = CTL_ESERVER;
  }
  if (m)
    protobuf_c_message_free_unpacked(m, NULL);
  rpc_close(c);
  return rc;
}
