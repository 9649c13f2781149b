/*
 * config.c: defaults, config file and flags. See config.h.
 *
 * The config file holds `name = value` lines with the flag names (without
 * the dashes); '#' starts a comment. Every setting has one table entry, so
 * the flag, the file key and the --help line cannot drift apart.
 */
#include "daemon/config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/text.h"
#include "compiler/key.h"

typedef enum { T_STR, T_SIZE, T_INT, T_LEVEL, T_FORMAT, T_BOOL } opt_type;

typedef struct opt {
  const char *name; /* flag and config-file key */
  opt_type type;
  size_t offset;   /* into config */
  size_t size;     /* T_STR: buffer size */
  const char *arg; /* argument name for --help */
  const char *help;
} opt;

#define F(field) offsetof(config, field)

static const opt opts[] = {
    {"listen", T_STR, F(listen), sizeof(((config *)0)->listen), "ADDR",
     "address to serve gRPC on (default 127.0.0.1:7421)"},
    {"cache-dir", T_STR, F(cache_dir), sizeof(((config *)0)->cache_dir), "DIR",
     "cache directory (default $XDG_CACHE_HOME/compiled, else ./var)"},
    {"cache-max-bytes", T_SIZE, F(cache_max_bytes), 0, "SIZE",
     "cap on cached bytes, e.g. 10G (default 10G)"},
    {"workers", T_INT, F(workers), 0, "N",
     "compile worker threads (default: number of CPUs)"},
    {"max-queue", T_INT, F(max_queue), 0, "N",
     "compiles allowed to wait for a worker; more misses get\n"
     "                            RESOURCE_EXHAUSTED (default 64)"},
    {"max-message-bytes", T_SIZE, F(max_message_bytes), 0, "SIZE",
     "largest request accepted (default 64M)"},
    {"max-nodes", T_INT, F(max_nodes), 0, "N",
     "most nodes in a graph (default: 500000, or fewer when a\n"
     "                            small --memory-budget cannot compile that\n"
     "                            many: about 7 KiB each)"},
    {"memory-budget", T_SIZE, F(memory_budget), 0, "SIZE",
     "memory all requests being decoded and compiled may hold\n"
     "                            together; past it they get "
     "RESOURCE_EXHAUSTED\n"
     "                            (default: a quarter of RAM, at most 4G)"},
    {"inline-decode-bytes", T_SIZE, F(inline_decode_bytes), 0, "SIZE",
     "larger requests are decoded on the decode threads, never\n"
     "                            on the threads that answer cache hits\n"
     "                            (default 256K)"},
    {"decode-threads", T_INT, F(decode_threads), 0, "N",
     "threads decoding big requests, at low priority (default:\n"
     "                            half the CPUs, at least 1)"},
    {"max-inline-bytes", T_SIZE, F(max_inline_bytes), 0, "SIZE",
     "largest artifact returned inline unless the client asks\n"
     "                            otherwise; larger ones are fetched (default "
     "1M)"},
    {"hot-cache-bytes", T_SIZE, F(hot_cache_bytes), 0, "SIZE",
     "memory for prebuilt hit responses of recently used entries\n"
     "                            (verified when read from disk); 0 disables\n"
     "                            (default 256M)"},
    {"cq-threads", T_INT, F(cq_threads), 0, "N",
     "gRPC completion-queue threads (default 2)"},
    {"max-connections", T_INT, F(max_connections), 0, "N",
     "open client connections allowed at once; more are closed\n"
     "                            on arrival (default 1024, lowered to what\n"
     "                            the descriptor limit allows)"},
    {"max-client-calls", T_INT, F(max_client_calls), 0, "N",
     "calls one client (a token's name, else an address) may have\n"
     "                            open at once; more get RESOURCE_EXHAUSTED\n"
     "                            (default 256; 0: no limit)"},
    {"max-client-bytes", T_SIZE, F(max_client_bytes), 0, "SIZE",
     "request bytes one client's open calls may hold together\n"
     "                            (default: half the memory budget; 0: no "
     "limit)"},
    {"idle-timeout", T_INT, F(idle_timeout), 0, "SECONDS",
     "close a connection that has had no call for this long,\n"
     "                            or never completed its HTTP/2 handshake\n"
     "                            (default 120; 0 never)"},
    {"keepalive", T_INT, F(keepalive), 0, "SECONDS",
     "ping clients this often; a connection whose peer does not\n"
     "                            answer within 20 s is dropped (default 60;\n"
     "                            0: gRPC's 2 hours)"},
    {"grace-seconds", T_INT, F(grace_seconds), 0, "N",
     "on SIGTERM/SIGINT, time given to running compiles (default 30)"},
    {"lame-duck-ms", T_INT, F(lame_duck_ms), 0, "MS",
     "on SIGTERM/SIGINT, keep the port open at least MS: hits are\n"
     "                            served, new compiles get UNAVAILABLE "
     "\"stopping\"\n"
     "                            (default 250)"},
    {"failure-ttl", T_INT, F(failure_ttl), 0, "SECONDS",
     "how long a failing graph is remembered (default 600)"},
    {"log-level", T_LEVEL, F(log_level), 0, "LEVEL",
     "error, warn, info or debug (default info)"},
    {"log-format", T_FORMAT, F(log_format), 0, "FORMAT",
     "text or json (default text)"},
    {"log-file", T_STR, F(log_file), sizeof(((config *)0)->log_file), "FILE",
     "log to FILE (reopened on SIGHUP; default stderr)"},
    {"port-file", T_STR, F(port_file), sizeof(((config *)0)->port_file), "FILE",
     "write the bound port to FILE once listening (useful with\n"
     "                            --listen 127.0.0.1:0)"},
    {"debug-compile-delay-ms", T_INT, F(debug_compile_delay_ms), 0, "MS",
     "for tests: make every compile wait MS first (it still\n"
     "                            stops early when abandoned)"},
    {"debug-compile-stuck-ms", T_INT, F(debug_compile_stuck_ms), 0, "MS",
     "for tests: make every compile wait MS first, even when\n"
     "                            abandoned (a compile that does not end)"},
    {"debug-decode-delay-ms", T_INT, F(debug_decode_delay_ms), 0, "MS",
     "for tests: make every decode on the decode threads wait\n"
     "                            MS first"},
    {"native", T_BOOL, F(native), 0, NULL,
     "compile inference graphs to native code (default on; --native=0\n"
     "                            serves ATen programs only)"},
    {"cc", T_STR, F(cc), sizeof(((config *)0)->cc), "CC",
     "the C compiler for native code (default: $CC, else cc)"},
    {"cc-timeout", T_INT, F(cc_timeout), 0, "SECONDS",
     "time a C compile may take before it is killed and the graph\n"
     "                            served with its ATen program (default 120)"},
    {"verify-ir", T_BOOL, F(verify_ir), 0, NULL,
     "run the loop IR verifier after every pass (default on: a\n"
     "                            program that fails it is served as its\n"
     "                            ATen program; --verify-ir=0 skips it)"},
    {"tokens", T_STR, F(tokens), sizeof(((config *)0)->tokens), "FILE",
     "bearer tokens with roles, one 'ROLE TOKEN [NAME]' per line\n"
     "                            (read, compile, admin; reloaded on SIGHUP).\n"
     "                            Without it every client is admin and only\n"
     "                            a loopback --listen is allowed"},
    {"insecure", T_BOOL, F(insecure), 0, NULL,
     "allow a non-loopback --listen without --tokens (anyone who\n"
     "                            can connect may compile and evict)"},
    {"signing-keys", T_STR, F(signing_keys),
     sizeof(((config *)0)->signing_keys), "FILE",
     "sign every artifact stored (HMAC-SHA-256); lines 'KEY_ID\n"
     "                            HEX_SECRET', the first signs, all verify"},
    {"verify-cache", T_BOOL, F(verify_cache), 0, NULL,
     "check the signature of every entry read from the cache;\n"
     "                            one that fails is dropped and recompiled\n"
     "                            (needs --signing-keys)"},
    {"tls-cert", T_STR, F(tls_cert), sizeof(((config *)0)->tls_cert), "FILE",
     "serve gRPC over TLS with this certificate chain (PEM)"},
    {"tls-key", T_STR, F(tls_key), sizeof(((config *)0)->tls_key), "FILE",
     "the private key of --tls-cert (PEM)"},
    {"tls-client-ca", T_STR, F(tls_client_ca),
     sizeof(((config *)0)->tls_client_ca), "FILE",
     "mutual TLS: clients must present a certificate this CA\n"
     "                            signed (PEM)"},
    {"tls-handshake-timeout", T_INT, F(tls_handshake_timeout), 0, "SECONDS",
     "close a TLS connection whose handshake is not done this\n"
     "                            long after it was accepted (default 10; at\n"
     "                            most --idle-timeout)"},
    {"metrics-listen", T_STR, F(metrics_listen),
     sizeof(((config *)0)->metrics_listen), "ADDR",
     "serve /metrics (Prometheus) and /healthz over HTTP on\n"
     "                            HOST:PORT (default: off)"},
    {"metrics-request-timeout", T_INT, F(metrics_timeout), 0, "SECONDS",
     "close an HTTP connection of --metrics-listen whose request\n"
     "                            is not in this long after it connected (or\n"
     "                            after its previous answer) (default 10)"},
    {"explorer", T_BOOL, F(explorer), 0, NULL,
     "serve the compile explorer's pages (/explorer/) and JSON API\n"
     "                            (/api/) on --metrics-listen, behind the\n"
     "                            tokens of --tokens (default on)"},
    {"explorer-keep-bytes", T_SIZE, F(explorer_keep_bytes), 0, "SIZE",
     "disk for the requests kept beside cache entries (the graphs\n"
     "                            the explorer shows), compressed; the oldest\n"
     "                            go first; 0 keeps none (default 256M)"},
    {"explorer-keep-max", T_SIZE, F(explorer_keep_max), 0, "SIZE",
     "largest request kept for the explorer (default 64M)"},
    {"redis", T_STR, F(redis), sizeof(((config *)0)->redis), "URL",
     "shared cache tier: redis[s]://[user:password@]host:port[/db];\n"
     "                            daemons on one Redis compile each graph\n"
     "                            once for the cluster (needs --signing-keys,\n"
     "                            or --redis-unsigned)"},
    {"redis-unsigned", T_BOOL, F(redis_unsigned), 0, NULL,
     "allow --redis without --signing-keys: whoever can write to\n"
     "                            Redis then chooses the code this daemon\n"
     "                            serves (and its clients run)"},
    {"redis-ca", T_STR, F(redis_ca), sizeof(((config *)0)->redis_ca), "FILE",
     "rediss://: the CA of Redis's certificate (PEM; default: the\n"
     "                            system's roots)"},
    {"redis-timeout-ms", T_INT, F(redis_timeout_ms), 0, "MS",
     "time limit of a Redis connect or command (default 200)"},
    {"redis-ttl", T_INT, F(redis_ttl), 0, "SECONDS",
     "how long entries live in Redis (default 604800, 7 days)"},
    {"redis-lease-ms", T_INT, F(redis_lease_ms), 0, "MS",
     "a compile's lease in Redis, renewed while it runs; other\n"
     "                            daemons wait for its result, or take over\n"
     "                            when it expires (default 30000)"},
    {"redis-lease-wait-ms", T_INT, F(redis_lease_wait_ms), 0, "MS",
     "the longest a compile waits on another daemon's lease before\n"
     "                            compiling here (default 120000)"},
    {"check-cache", T_BOOL, F(check_cache), 0, NULL,
     "verify the cache (integrity check, every digest) and exit"},
};

#define NOPTS (sizeof opts / sizeof opts[0])

static void usage(FILE *f) {
  fprintf(f, "usage: compiled [OPTIONS]\n"
             "\n"
             "The compiled daemon: compiles PyTorch graphs sent over gRPC and "
             "caches them.\n"
             "\n"
             "options:\n");
  for (size_t i = 0; i < NOPTS; i++) {
    char left[64];
    snprintf(left, sizeof left, "--%s%s%s", opts[i].name,
             opts[i].arg ? " " : "", opts[i].arg ? opts[i].arg : "");
    if (strlen(left) < 26)
      fprintf(f, "  %-26s%s\n", left, opts[i].help);
    else /* too long for the column: help on the next line */
      fprintf(f, "  %s\n  %-26s%s\n", left, "", opts[i].help);
  }
  fprintf(f, "  %-26s%s\n", "--config FILE",
          "read settings from FILE (lines `name = value`, names as\n"
          "                            the options above); flags override it");
  fprintf(f, "  %-26s%s\n", "--help", "this text");
  fprintf(f, "  %-26s%s\n", "--version", "print the version");
  fprintf(f, "\nSignals: SIGTERM/SIGINT drain and stop; SIGHUP reopens the log "
             "file.\n");
}

int config_parse_size(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || v < 0)
    return -1;
  while (isspace((unsigned char)*end))
    end++;
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
  case 'K':
    mult = 1024.0;
    break;
  case 'M':
    mult = 1024.0 * 1024;
    break;
  case 'G':
    mult = 1024.0 * 1024 * 1024;
    break;
  case 'T':
    mult = 1024.0 * 1024 * 1024 * 1024;
    break;
  case '\0':
    break;
  default:
    return -1;
  }
  if (*end) {
    end++;
    if (toupper((unsigned char)*end) == 'B' ||
        toupper((unsigned char)*end) == 'I')
      end++;
    if (toupper((unsigned char)*end) == 'B')
      end++;
    if (*end)
      return -1;
  }
  if (v * mult > 1.8e19)
    return -1;
  *out = (uint64_t)(v * mult);
  return 0;
}

/* Applies one setting; `where` names its origin for messages. */
static int set(config *c, const opt *o, const char *value, const char *where) {
  char *field = (char *)c + o->offset;
  char *end;
  switch (o->type) {
  case T_STR:
    if (strlen(value) >= o->size) {
      fprintf(stderr, "compiled: %s: %s is too long\n", where, o->name);
      return -1;
    }
    strcpy(field, value);
    return 0;
  case T_SIZE:
    if (config_parse_size(value, (uint64_t *)field) != 0) {
      fprintf(stderr, "compiled: %s: %s wants a size like 512M, got '%s'\n",
              where, o->name, value);
      return -1;
    }
    return 0;
  case T_INT: {
    long v = strtol(value, &end, 10);
    if (*end || end == value || v < 0 || v > 1000000) {
      fprintf(stderr,
              "compiled: %s: %s wants a non-negative integer, got '%s'\n",
              where, o->name, value);
      return -1;
    }
    *(int *)field = (int)v;
    return 0;
  }
  case T_LEVEL: {
    int l = log_level_parse(value);
    if (l < 0) {
      fprintf(stderr,
              "compiled: %s: log-level wants error|warn|info|debug, got '%s'\n",
              where, value);
      return -1;
    }
    *(log_level *)field = (log_level)l;
    return 0;
  }
  case T_FORMAT:
    if (strcmp(value, "text") == 0)
      *(log_format *)field = LOG_TEXT;
    else if (strcmp(value, "json") == 0)
      *(log_format *)field = LOG_JSON;
    else {
      fprintf(stderr, "compiled: %s: log-format wants text|json, got '%s'\n",
              where, value);
      return -1;
    }
    return 0;
  case T_BOOL:
    if (!strcmp(value, "") || !strcmp(value, "true") || !strcmp(value, "1") ||
        !strcmp(value, "yes"))
      *(bool *)field = true;
    else if (!strcmp(value, "false") || !strcmp(value, "0") ||
             !strcmp(value, "no"))
      *(bool *)field = false;
    else {
      fprintf(stderr, "compiled: %s: %s wants true|false, got '%s'\n", where,
              o->name, value);
      return -1;
    }
    return 0;
  }
  return -1;
}

static const opt *find(const char *name) {
  for (size_t i = 0; i < NOPTS; i++)
    if (strcmp(opts[i].name, name) == 0)
      return &opts[i];
  return NULL;
}

static int read_file(config *c, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "compiled: --config %s: %s\n", path, strerror(errno));
    return -1;
  }
  char line[2048];
  int lineno = 0, rc = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash)
      *hash = '\0';
    char *s = text_trim(line);
    if (!*s)
      continue;
    char *sep = strpbrk(s, "= \t");
    char *value = "";
    if (sep) {
      *sep = '\0';
      value = text_trim(sep + 1);
      if (*value == '=')
        value = text_trim(value + 1);
    }
    char where[1100];
    snprintf(where, sizeof where, "%s:%d", path, lineno);
    const opt *o = find(text_trim(s));
    if (!o) {
      fprintf(stderr, "compiled: %s: unknown setting '%s'\n", where, s);
      rc = -1;
    } else {
      rc = set(c, o, value, where);
    }
  }
  fclose(f);
  return rc;
}

/* A quarter of physical memory, between 256 MiB and 4 GiB. */
static uint64_t default_budget(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  uint64_t ram = pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size
                                       : (uint64_t)4 << 30;
  uint64_t b = ram / 4;
  if (b < ((uint64_t)256 << 20))
    b = (uint64_t)256 << 20;
  if (b > ((uint64_t)4 << 30))
    b = (uint64_t)4 << 30;
  return b;
}

static void defaults(config *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->listen, sizeof c->listen, "127.0.0.1:7421");
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && *xdg)
    snprintf(c->cache_dir, sizeof c->cache_dir, "%s/compiled", xdg);
  else
    snprintf(c->cache_dir, sizeof c->cache_dir, "./var");
  c->cache_max_bytes = (uint64_t)10 << 30;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  c->workers = n > 0 ? (int)n : 2;
  c->max_queue = 64;
  c->max_message_bytes = (uint64_t)64 << 20;
  c->memory_budget = default_budget();
  c->inline_decode_bytes = (uint64_t)256 << 10;
  c->decode_threads = n > 3 ? (int)n / 2 : 1;
  c->max_inline_bytes = (uint64_t)1 << 20;
  c->hot_cache_bytes = (uint64_t)256 << 20;

  c->cq_threads = 2;
  c->max_connections = 1024;
  c->max_client_calls = 256;
  c->max_client_bytes = UINT64_MAX; /* half the budget, once it is known */
  c->idle_timeout = 120;
  c->tls_handshake_timeout = 10;
  c->metrics_timeout = 10;
  c->explorer = true;
  c->explorer_keep_bytes = (uint64_t)256 << 20;
  c->explorer_keep_max = (uint64_t)64 << 20;
  c->keepalive = 60;
  c->grace_seconds = 30;
  c->native = true;
  c->verify_ir = true;
  c->cc_timeout = 120;
  snprintf(c->cc, sizeof c->cc, "%s",
           getenv("CC") && *getenv("CC") ? getenv("CC") : "cc");
  c->lame_duck_ms = 250;
  c->redis_timeout_ms = 200;
  c->redis_ttl = 7 * 86400;
  c->redis_lease_ms = 30000;
  c->redis_lease_wait_ms = 120000;
  c->failure_ttl = 600;
  c->log_level = LOG_INFO;
  c->log_format = LOG_TEXT;
}

int config_load(config *c, int argc, char **argv) {
  defaults(c);
  /* The config file first, wherever --config appears. */
  for (int i = 1; i < argc; i++) {
    const char *file = NULL;
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
      file = argv[i + 1];
    else if (strncmp(argv[i], "--config=", 9) == 0)
      file = argv[i] + 9;
    if (file && read_file(c, file) != 0)
      return -1;
  }
  struct option lopts[NOPTS + 4];
  for (size_t i = 0; i < NOPTS; i++) {
    lopts[i].name = opts[i].name;
    lopts[i].has_arg =
        opts[i].type == T_BOOL ? optional_argument : required_argument;
    lopts[i].flag = NULL;
    lopts[i].val = 1000 + (int)i;
  }
  lopts[NOPTS] = (struct option){"config", required_argument, NULL, 'c'};
  lopts[NOPTS + 1] = (struct option){"help", no_argument, NULL, 'h'};
  lopts[NOPTS + 2] = (struct option){"version", no_argument, NULL, 'v'};
  lopts[NOPTS + 3] = (struct option){NULL, 0, NULL, 0};
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
    if (ch == 'h') {
      usage(stdout);
      return 1;
    }
    if (ch == 'v') {
      printf("compiled 0.1.0 (compiler build %s)\n", gc_build_id());
      return 1;
    }
    if (ch == 'c')
      continue;
    if (ch < 1000 || ch >= 1000 + (int)NOPTS) {
      usage(stderr);
      return -1;
    }
    const opt *o = &opts[ch - 1000];
    char where[64];
    snprintf(where, sizeof where, "--%s", o->name);
    if (set(c, o, optarg ? optarg : "", where) != 0)
      return -1;
  }
  if (optind < argc) {
    fprintf(stderr, "compiled: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return -1;
  }
  if (c->workers < 1 || c->cq_threads < 1 || c->decode_threads < 1) {
    fprintf(stderr, "compiled: --workers, --cq-threads and --decode-threads "
                    "must be at least 1\n");
    return -1;
  }
  if (c->tls_handshake_timeout < 1 || c->metrics_timeout < 1) {
    fprintf(stderr, "compiled: --tls-handshake-timeout and "
                    "--metrics-request-timeout must be at least 1\n");
    return -1;
  }
  if (c->memory_budget < ((uint64_t)16 << 20)) {
    fprintf(stderr, "compiled: --memory-budget must be at least 16M\n");
    return -1;
  }
  return 0;
}
