/*
 * main.c: compilectl, the command-line client of compiled.
 *
 * `compilectl graph ...` works on local graph files; the commands that talk
 * to a daemon (submit, lookup, stats, ...) use --server or $COMPILED_SERVER.
 * main() reads the global options, then hands the rest of the command line
 * to the command, whose argv[0] reads "compilectl COMMAND" so that getopt's
 * messages name it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/ctl/ctl.h"
#include "compiler/key.h"

static const char usage[] =
    "usage: compilectl [--server ADDR] [--token TOKEN] [--ca FILE [--cert FILE "
    "--key FILE]]\n"
    "                  COMMAND [ARGS]\n"
    "\n"
    "local commands:\n"
    "  graph validate|hash|fmt|convert FILE...   local graph tools (no "
    "daemon)\n"
    "  graph functionalize|lower|schedule|plan|codegen|program FILE\n"
    "                                            the graph after each "
    "compiler pass\n"
    "  help [COMMAND]                            this text, or COMMAND's help\n"
    "  version                                   print the version\n"
    "\n"
    "commands that talk to a daemon:\n"
    "  submit FILE...      compile graphs, or have them served from the "
    "cache\n"
    "  explain FILE        the key of a graph; on a miss, the nearest entry\n"
    "  lookup KEY          what the cache holds for a key\n"
    "  fetch KEY -o FILE   download an artifact (digest checked)\n"
    "  ls                  list cached entries\n"
    "  evict KEY | --all | --older-than DURATION\n"
    "                      remove entries from the cache\n"
    "  stats               the daemon's counters\n"
    "  health              the standard gRPC health check\n"
    "  bench FILE          load-test the daemon with one graph\n"
    "\n"
    "global options:\n"
    "  --server ADDR       the daemon's gRPC address (default: "
    "$COMPILED_SERVER,\n"
    "                      else " CTL_DEFAULT_SERVER ")\n"
    "  --token TOKEN       bearer token for a daemon with --tokens (default:\n"
    "                      $COMPILED_TOKEN, which keeps it out of `ps`)\n"
    "  --ca FILE           TLS: the daemon's CA (PEM; $COMPILED_CA)\n"
    "  --cert FILE, --key FILE\n"
    "                      mutual TLS: this client's certificate and key\n"
    "                      ($COMPILED_CERT, $COMPILED_KEY)\n"
    "\n"
    "Every daemon command takes --timeout SECONDS (default 60, submit 600)\n"
    "and --help. KEYs are 64 hex digits or a unique prefix of at least 4.\n"
    "Run 'compilectl COMMAND --help' for a command's options and\n"
    "'compilectl graph --help' for the graph commands.\n"
    "\n"
    "Exit codes: 0 ok, 1 graph or compile error (INVALID_ARGUMENT,\n"
    "FAILED_PRECONDITION, a failed compile), 2 usage error,\n"
    "3 server unreachable (UNAVAILABLE, or no answer within the timeout),\n"
    "4 local I/O error, 5 server error (RESOURCE_EXHAUSTED, INTERNAL, a\n"
    "timeout after the server started answering, a bad answer, any other\n"
    "gRPC error), 6 key not in the cache (NOT_FOUND), 7 not allowed\n"
    "(UNAUTHENTICATED, PERMISSION_DENIED: see --token).\n";

/* The commands that talk to a daemon. */
static const struct net_command {
  const char *name;
  int (*run)(int argc, char **argv);
} net_commands[] = {
    {"submit", ctl_cmd_submit}, {"explain", ctl_cmd_explain},
    {"lookup", ctl_cmd_lookup}, {"fetch", ctl_cmd_fetch},
    {"ls", ctl_cmd_ls},         {"evict", ctl_cmd_evict},
    {"stats", ctl_cmd_stats},   {"health", ctl_cmd_health},
    {"bench", ctl_cmd_bench},
};

/* Reads the global options at the front of argv; returns the index of the
 * command, or -1 after printing a usage error. */
/* "--NAME VALUE" or "--NAME=VALUE" at argv[*i]: sets *value, advances *i;
 * 0 when argv[*i] is not --NAME, -1 when it has no value. */
static int global_option(int argc, char **argv, int *i, const char *name,
                         const char **value) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0)
    return 0;
  if (argv[*i][n] == '=') {
    *value = argv[*i] + n + 1;
    *i += 1;
    return 1;
  }
  if (argv[*i][n] == '\0' && *i + 1 < argc) {
    *value = argv[*i + 1];
    *i += 2;
    return 1;
  }
  return argv[*i][n] == '\0' ? -1 : 0;
}

static int global_options(int argc, char **argv) {
  const char *env = getenv("COMPILED_SERVER");
  if (env && *env)
    ctl_server = env;
  static const struct {
    const char *flag, *env, *want;
    const char **value;
  } opts[] = {
      {"--server", "COMPILED_SERVER",
       "an address, e.g. --server 127.0.0.1:7421", &ctl_server},
      {"--token", "COMPILED_TOKEN",
       "a token (or set $COMPILED_TOKEN, which keeps it out of the process "
       "list)",
       &ctl_token},
      {"--ca", "COMPILED_CA", "the PEM file of the daemon's CA", &ctl_ca},
      {"--cert", "COMPILED_CERT", "a PEM client certificate", &ctl_cert},
      {"--key", "COMPILED_KEY", "the PEM key of --cert", &ctl_key},
  };
  const int nopts = (int)(sizeof opts / sizeof opts[0]);
  for (int o = 1; o < nopts; o++) {
    env = getenv(opts[o].env);
    if (env && *env)
      *opts[o].value = env;
  }
  int i = 1;
  for (bool more = true; more && i < argc;) {
    more = false;
    for (int o = 0; o < nopts && !more; o++) {
      int r = global_option(argc, argv, &i, opts[o].flag, opts[o].value);
      if (r < 0) {
        ctl_errorf("%s wants %s", opts[o].flag, opts[o].want);
        return -1;
      }
      more = r > 0;
    }
  }
  if (!*ctl_server) {
    ctl_errorf("--server wants an address, e.g. --server 127.0.0.1:7421");
    return -1;
  }
  return i;
}

/* Runs a daemon command with the gRPC library up. */
static int run_net(const struct net_command *c, int argc, char **argv) {
  char prog[64];
  snprintf(prog, sizeof prog, "compilectl %s", c->name);
  argv[0] = prog;
  rpc_init();
  int rc = c->run(argc, argv);
  rpc_shutdown();
  return rc;
}

/* Runs command argv[0]. */
static int dispatch(int argc, char **argv) {
  if (strcmp(argv[0], "graph") == 0)
    return ctl_cmd_graph(argc, argv);
  for (size_t k = 0; k < sizeof net_commands / sizeof net_commands[0]; k++)
    if (strcmp(argv[0], net_commands[k].name) == 0)
      return run_net(&net_commands[k], argc, argv);
  ctl_errorf("unknown command '%s'", argv[0]);
  fputs(usage, stderr);
  return CTL_EUSAGE;
}

int main(int argc, char **argv) {
  int i = global_options(argc, argv);
  if (i < 0)
    return CTL_EUSAGE;
  if (i >= argc) {
    fputs(usage, stderr);
    return CTL_EUSAGE;
  }
  const char *cmd = argv[i];
  if (strcmp(cmd, "help") == 0 && i + 1 < argc) {
    /* "help COMMAND" is "COMMAND --help". */
    char *args[] = {argv[i + 1], "--help", NULL};
    return dispatch(2, args);
  }
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 ||
      strcmp(cmd, "-h") == 0) {
    fputs(usage, stdout);
    return CTL_OK;
  }
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    printf("compilectl 0.1.0 (compiler build %s)\n", gc_build_id());
    return CTL_OK;
  }
  return dispatch(argc - i, argv + i);
}
