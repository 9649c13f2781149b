/*
 * main.c: compilectl, the command-line client of compiled.
 *
 * `compilectl graph ...` works on local graph files; the commands that talk
 * to a daemon (submit, lookup, stats, ...) use --server or $COMPILED_SERVER.
 * main() reads the global options in front of the command, then hands the
 * rest of the command line to the command, whose argv[0] reads "compilectl
 * COMMAND" so that getopt's messages name it. Every command's option table
 * holds the global options too (CTL_GLOBAL_OPTIONS), so that they work after
 * the command as well, and getopt_long keeps an option's value (--client
 * --server is a client named "--server") apart from an option.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/ctl/ctl.h"
#include "compiler/key.h"

static const char usage[] =
    "usage: compilectl [GLOBAL OPTIONS] COMMAND [ARGS]\n"
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
    "  package MODEL.pt2 -o MODEL.cpkg\n"
    "                      compile a torch.export program into a package\n"
    "                      that runs with no daemon (compiled.load_package)\n"
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
    "global options (before or after COMMAND):\n"
    "  --server ADDR       the daemon's gRPC address (default: "
    "$COMPILED_SERVER,\n"
    "                      else " CTL_DEFAULT_SERVER ")\n"
    "  --timeout SECONDS   how long a daemon command waits (default 60, "
    "submit\n"
    "                      600 per file)\n"
    "  --token TOKEN       bearer token for a daemon with --tokens (default:\n"
    "                      $COMPILED_TOKEN, which keeps it out of `ps`)\n"
    "  --ca FILE           TLS: the daemon's CA (PEM; $COMPILED_CA)\n"
    "  --cert FILE, --key FILE\n"
    "                      mutual TLS: this client's certificate and key\n"
    "                      ($COMPILED_CERT, $COMPILED_KEY)\n"
    "  -h, --help          help (after COMMAND: COMMAND's help)\n"
    "\n"
    "KEYs are 64 hex digits or a unique prefix of at least 4.\n"
    "Run 'compilectl COMMAND --help' for a command's options and exit codes\n"
    "and 'compilectl graph --help' for the graph commands.\n"
    "\n"
    "Exit codes: 0 ok, 1 graph or compile error (INVALID_ARGUMENT,\n"
    "FAILED_PRECONDITION, a failed compile), 2 usage error,\n"
    "3 server unreachable (UNAVAILABLE, or no answer within the timeout),\n"
    "4 local I/O error, 5 server error (RESOURCE_EXHAUSTED, INTERNAL, a\n"
    "timeout after the server started answering, a bad answer, any other\n"
    "gRPC error), 6 key not in the cache (NOT_FOUND), 7 not allowed\n"
    "(UNAUTHENTICATED, PERMISSION_DENIED: see --token). Each command\n"
    "returns only the codes its help lists; a status that means nothing\n"
    "for it is a server error (5).\n";

static const char help_usage[] =
    "usage: compilectl help [COMMAND]\n"
    "\n"
    "Prints compilectl's help: its commands and global options, or with\n"
    "COMMAND that command's help (as 'compilectl COMMAND --help' does).\n";

static const char version_usage[] =
    "usage: compilectl version\n"
    "\n"
    "Prints the version of compilectl and the build id of the compiler it\n"
    "holds (the compiler component of the cache keys `graph hash` "
    "computes).\n";

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

/* The exit codes every command that talks to a daemon can return. */
#define NET_EXITS                                                              \
  (CTL_BIT(CTL_OK) | CTL_BIT(CTL_EUSAGE) | CTL_BIT(CTL_EUNREACHABLE) |         \
   CTL_BIT(CTL_EIO) | CTL_BIT(CTL_ESERVER))

/* Every command, with the exit codes it can return. */
static const ctl_command commands[] = {
    {"submit", ctl_cmd_submit, true,
     NET_EXITS | CTL_BIT(CTL_EGRAPH) | CTL_BIT(CTL_EDENIED),
     "With several files each is tried (until the server is unreachable);\n"
     "the exit code is the first failure's.\n"},
    {"package", ctl_cmd_package, true,
     NET_EXITS | CTL_BIT(CTL_EGRAPH) | CTL_BIT(CTL_EDENIED),
     "A .pt2 the reader refuses, or a graph the daemon refuses, exits 1.\n"},
    {"explain", ctl_cmd_explain, true,
     NET_EXITS | CTL_BIT(CTL_EGRAPH) | CTL_BIT(CTL_EDENIED),
     "A miss is an answer too: 0 for a hit and for a miss.\n"},
    {"lookup", ctl_cmd_lookup, true,
     NET_EXITS | CTL_BIT(CTL_ENOTFOUND) | CTL_BIT(CTL_EDENIED), NULL},
    {"fetch", ctl_cmd_fetch, true,
     NET_EXITS | CTL_BIT(CTL_ENOTFOUND) | CTL_BIT(CTL_EDENIED),
     "A digest mismatch exits 5 and writes nothing. With --source, an\n"
     "artifact without native code exits 6.\n"},
    {"ls", ctl_cmd_ls, true, NET_EXITS | CTL_BIT(CTL_EDENIED), NULL},
    {"evict", ctl_cmd_evict, true,
     NET_EXITS | CTL_BIT(CTL_ENOTFOUND) | CTL_BIT(CTL_EDENIED),
     "6 is for a KEY: --all and --older-than exit 0 whatever they removed.\n"},
    {"stats", ctl_cmd_stats, true, NET_EXITS | CTL_BIT(CTL_EDENIED), NULL},
    /* The daemon's health check needs no token. */
    {"health", ctl_cmd_health, true, NET_EXITS,
     "Any status but SERVING exits 5.\n"},
    {"bench", ctl_cmd_bench, true,
     NET_EXITS | CTL_BIT(CTL_EGRAPH) | CTL_BIT(CTL_EDENIED),
     "The codes are about the run, not its requests: 0 once it ran, however\n"
     "many of them failed. The request that makes sure FILE is cached\n"
     "before the run ends it with its own code when it fails.\n"},
    {"graph", ctl_cmd_graph, false,
     CTL_BIT(CTL_OK) | CTL_BIT(CTL_EGRAPH) | CTL_BIT(CTL_EUSAGE) |
         CTL_BIT(CTL_EIO),
     NULL},
    {"help", cmd_help, false, CTL_BIT(CTL_OK) | CTL_BIT(CTL_EUSAGE), NULL},
    {"version", cmd_version, false, CTL_BIT(CTL_OK) | CTL_BIT(CTL_EUSAGE),
     NULL},
};

const ctl_command *ctl_cmd;

static const ctl_command *find_command(const char *name) {
  for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++)
    if (strcmp(name, commands[k].name) == 0)
      return &commands[k];
  return NULL;
}

/* ---- help ---- */

/* What each exit code means in the "Exit codes:" lines. */
static const char *const exit_meaning[] = {
    [CTL_OK] = "ok",
    [CTL_EGRAPH] = "invalid graph or failed compile",
    [CTL_EUSAGE] = "usage error",
    [CTL_EUNREACHABLE] = "server unreachable",
    [CTL_EIO] = "local I/O error",
    [CTL_ESERVER] = "server error",
    [CTL_ENOTFOUND] = "key not in the cache",
    [CTL_EDENIED] = "not allowed (see --token)",
};

void ctl_help(FILE *f, const char *text) {
  fputs(text, f);
  if (!ctl_cmd)
    return;
  /* "Exit codes: 0 ok, 2 usage error, ..." wrapped at 76 columns */
  fputs("\nExit codes:", f);
  int col = (int)strlen("Exit codes:");
  bool first = true;
  for (int code = 0; code < (int)(sizeof exit_meaning / sizeof *exit_meaning);
       code++) {
    if (!(ctl_cmd->exits & CTL_BIT(code)))
      continue;
    char item[96];
    int len = snprintf(item, sizeof item, "%d %s", code, exit_meaning[code]);
    if (!first) {
      fputc(',', f);
      col++;
    }
    first = false;
    if (col + 1 + len + 1 > 76) {
      fputc('\n', f);
      col = 0;
    } else {
      fputc(' ', f);
      col++;
    }
    fputs(item, f);
    col += len;
  }
  fputs(".\n", f);
  if (ctl_cmd->exit_note)
    fputs(ctl_cmd->exit_note, f);
  if (ctl_cmd->net)
    fputs("\nGlobal options (--server, --timeout, --token, --ca, --cert, "
          "--key) go\nbefore or after the command: see 'compilectl help'.\n",
          f);
}

/* ---- global options ---- */

/* --timeout, milliseconds; 0: not given. */
static int64_t timeout_ms;

int64_t ctl_timeout(int64_t dflt) {
  return timeout_ms ? timeout_ms : dflt;
}

int ctl_global_option(int c, const char *arg) {
  switch (c) {
  case CTL_O_SERVER:
    if (!*arg) {
      ctl_errorf("--server wants an address, e.g. --server 127.0.0.1:7421");
      return -1;
    }
    ctl_server = arg;
    return 1;
  case CTL_O_TOKEN:
    ctl_token = arg;
    return 1;
  case CTL_O_CA:
    ctl_ca = arg;
    return 1;
  case CTL_O_CERT:
    ctl_cert = arg;
    return 1;
  case CTL_O_KEY:
    ctl_key = arg;
    return 1;
  case CTL_O_TIMEOUT:
    return ctl_parse_timeout("--timeout", arg, &timeout_ms) ? -1 : 1;
  default:
    return 0;
  }
}

int ctl_getopt(int argc, char **argv, const char *shortopts,
               const struct option *opts, int *longindex, const char *help,
               int *stop) {
  int c;
  *stop = 0;
  while ((c = getopt_long(argc, argv, shortopts, opts, longindex)) != -1) {
    int g = ctl_global_option(c, optarg);
    if (g > 0)
      continue;
    if (g < 0) {
      *stop = CTL_EUSAGE;
    } else if (c == 'h') {
      ctl_help(stdout, help);
      *stop = -1;
    } else if (c == '?' || c == ':') {
      ctl_help(stderr, help);
      *stop = CTL_EUSAGE;
    } else {
      return c;
    }
    return -1;
  }
  return -1;
}

/* The environment's defaults for the global options. */
static void global_env(void) {
  static const struct {
    const char *name;
    const char **value;
  } env[] = {{"COMPILED_SERVER", &ctl_server},
             {"COMPILED_TOKEN", &ctl_token},
             {"COMPILED_CA", &ctl_ca},
             {"COMPILED_CERT", &ctl_cert},
             {"COMPILED_KEY", &ctl_key}};
  for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) {
    const char *v = getenv(env[i].name);
    if (v && *v)
      *env[i].value = v;
  }
}

/* ---- help, version ---- */

/* Parses the options of a command that takes nothing but global options
 * and at most `maxpos` arguments. Returns 0, 1 after printing its help, or
 * CTL_EUSAGE. */
static int simple_options(int argc, char **argv, const char *text, int maxpos) {
  static const struct option opts[] = {CTL_GLOBAL_OPTIONS, {NULL, 0, NULL, 0}};
  int stop;
  optind = 0; /* afresh: see CTL_GLOBAL_OPTIONS */
  ctl_getopt(argc, argv, "h", opts, NULL, text, &stop);
  if (stop)
    return stop < 0 ? 1 : stop;
  if (argc - optind > maxpos) {
    ctl_errorf("%s: unexpected argument '%s'", ctl_cmd->name,
               argv[optind + maxpos]);
    ctl_help(stderr, text);
    return CTL_EUSAGE;
  }
  return 0;
}

static int run(const ctl_command *c, int argc, char **argv);

/* The command called `name`; else NULL after saying so (the message
 * starts with `who`) and printing the usage on stderr. */
static const ctl_command *known_command(const char *name, const char *who) {
  const ctl_command *c = find_command(name);
  if (!c) {
    ctl_errorf("%sunknown command '%s'", who, name);
    fputs(usage, stderr);
  }
  return c;
}

/* `compilectl help [COMMAND]`: COMMAND's help is `COMMAND --help`. */
static int cmd_help(int argc, char **argv) {
  int rc = simple_options(argc, argv, help_usage, 1);
  if (rc)
    return rc == 1 ? CTL_OK : rc;
  if (optind == argc) {
    fputs(usage, stdout);
    return CTL_OK;
  }
  const ctl_command *c = known_command(argv[optind], "help: ");
  if (!c)
    return CTL_EUSAGE;
  char *args[] = {argv[optind], "--help", NULL};
  return run(c, 2, args);
}

static int cmd_version(int argc, char **argv) {
  int rc = simple_options(argc, argv, version_usage, 0);
  if (rc)
    return rc == 1 ? CTL_OK : rc;
  printf("compilectl 0.1.0 (compiler build %s)\n", gc_build_id());
  return CTL_OK;
}

/* ---- running a command ---- */

/* Runs command `c`: argv[0] becomes "compilectl NAME", the gRPC library is
 * up for the commands that talk to a daemon. */
static int run(const ctl_command *c, int argc, char **argv) {
  char prog[64];
  snprintf(prog, sizeof prog, "compilectl %s", c->name);
  argv[0] = prog;
  const ctl_command *outer = ctl_cmd;
  ctl_cmd = c;
  if (c->net)
    rpc_init();
  int rc = c->run(argc, argv);
  if (c->net)
    rpc_shutdown();
  if (rc < 0 || rc >= 32 || !(c->exits & CTL_BIT(rc)))
    ctl_errorf("internal error: '%s' exits %d, a code its help does not "
               "list; please report it",
               c->name, rc);
  ctl_cmd = outer;
  return rc;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"version", no_argument, NULL, 'V'},
                                       CTL_GLOBAL_OPTIONS,
                                       {NULL, 0, NULL, 0}};
  global_env();
  argv[0] = "compilectl"; /* getopt's messages */
  int c, stop;
  /* "+": stop at the command; what follows is the command's. No command
   * runs yet (ctl_cmd is NULL): ctl_help prints just `usage`. */
  while ((c = ctl_getopt(argc, argv, "+h", opts, NULL, usage, &stop)) != -1)
    if (c == 'V')
      return run(find_command("version"), 1, (char *[]){"version", NULL});
  if (stop)
    return stop < 0 ? CTL_OK : stop;
  if (optind >= argc) {
    fputs(usage, stderr);
    return CTL_EUSAGE;
  }
  const ctl_command *cmd = known_command(argv[optind], "");
  if (!cmd)
    return CTL_EUSAGE;
  return run(cmd, argc - optind, argv + optind);
}
