/*
 * ctl.h: what the parts of compilectl share: exit codes, output helpers,
 * loading graph files, and (net.c) talking to a daemon.
 */
#ifndef CTL_H
#define CTL_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "client/lib/rpc.h"
#include "compiled/v1/compiled.pb-c.h"
#include "compiled/v1/graph.pb-c.h"

/* Exit codes: distinct so scripts can tell failures apart. */
enum {
  CTL_OK = 0,           /* success */
  CTL_EGRAPH = 1,       /* the graph is invalid or its compile failed */
  CTL_EUSAGE = 2,       /* bad command line */
  CTL_EUNREACHABLE = 3, /* the server cannot be reached */
  CTL_EIO = 4,          /* a local file could not be read or written */
  CTL_ESERVER = 5,      /* the server failed the request (busy, internal
                           error, timed out mid-call, bad response) */
  CTL_ENOTFOUND = 6,    /* the key is not in the cache */
  CTL_EDENIED = 7,      /* no, an unknown or a too weak bearer token
                           (UNAUTHENTICATED, PERMISSION_DENIED) */
};

/* The bit of exit code `code` in a command's mask of codes it can return. */
#define CTL_BIT(code) (1u << (code))

/* ---- main.c: the commands and the options every command takes ---- */

/* A command of compilectl. `exits` (CTL_BIT of each code it can return)
 * is the one list of its exit codes: ctl_help prints it as the "Exit
 * codes:" lines of the command's help, ctl_status_exit maps a status the
 * command does not list (NOT_FOUND from stats, say) to a server error, and
 * main() reports a command that returns a code outside it as a bug. */
typedef struct ctl_command {
  const char *name;
  int (*run)(int argc, char **argv);
  bool net;              /* talks to a daemon: runs with the gRPC library up */
  unsigned exits;        /* CTL_BIT of every code it can return */
  const char *exit_note; /* what its help adds about its codes, or NULL */
} ctl_command;

/* The command running (set by main() before it runs). */
extern const ctl_command *ctl_cmd;

/* Prints `usage` (a command's help text) and then its exit codes, from
 * ctl_cmd->exits and ->exit_note, to `f`. */
void ctl_help(FILE *f, const char *usage);

/* The options every command takes, before or after its name (main() reads
 * those before it; each command's getopt_long table includes these, ahead
 * of its terminating entry). -h/--help is the command's help. A command
 * starts getopt_long with optind = 0, not 1: that makes glibc start afresh,
 * while 1 would keep the "stop at the first argument" mode ("+") of main's
 * scan, and `submit FILE --json` would take --json for a file. */
enum {
  CTL_O_SERVER = 1000,
  CTL_O_TOKEN,
  CTL_O_CA,
  CTL_O_CERT,
  CTL_O_KEY,
  CTL_O_TIMEOUT,
};
#define CTL_GLOBAL_OPTIONS                                                     \
  {"server", required_argument, NULL, CTL_O_SERVER},                           \
      {"token", required_argument, NULL, CTL_O_TOKEN},                         \
      {"ca", required_argument, NULL, CTL_O_CA},                               \
      {"cert", required_argument, NULL, CTL_O_CERT},                           \
      {"key", required_argument, NULL, CTL_O_KEY},                             \
      {"timeout", required_argument, NULL, CTL_O_TIMEOUT}, {                   \
    "help", no_argument, NULL, 'h'                                             \
  }

/* Handles getopt_long's answer `c` when it is a global option (its value
 * in `arg`). Returns 1 when it was one, 0 when not, -1 after printing why
 * its value is wrong. */
int ctl_global_option(int c, const char *arg);

/* getopt_long over a command's options `opts` (which end with
 * CTL_GLOBAL_OPTIONS and the zero entry), `longindex` as getopt_long's:
 * takes the global options itself, and -h/--help (prints `help`, the
 * command's help text, on stdout) and mistakes (an unknown option or a
 * missing value: `help` on stderr) end the scan. Returns the next of the
 * command's own options, or -1 when the scan ends; *stop is then 0 with optind
 * at the arguments, -1 after the help, or CTL_EUSAGE after saying what is
 * wrong. */
int ctl_getopt(int argc, char **argv, const char *shortopts,
               const struct option *opts, int *longindex, const char *help,
               int *stop);

/* --timeout in milliseconds, else `dflt` (the command's default). */
int64_t ctl_timeout(int64_t dflt);

/* Prints "compilectl: <msg>" on stderr. */
void ctl_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Reads a whole file ("-" is stdin) into a malloc'd buffer. Returns 0, or
 * -1 with errno set. */
int ctl_read_file(const char *path, uint8_t **data, size_t *len);

/* Writes `len` bytes to `path` ("-" is stdout), atomically for files
 * (temporary file then rename). Returns 0 or -1 with errno set. */
int ctl_write_file(const char *path, const void *data, size_t len);

typedef enum ctl_format { CTL_FMT_PB, CTL_FMT_JSON } ctl_format;

/* The format a path names by extension (.pb, .json); otherwise guessed from
 * the content (a '{' first means JSON). */
ctl_format ctl_guess_format(const char *path, const uint8_t *data, size_t len);

/* Loads a graph file of either format. On success *msg is a message to free
 * with protobuf_c_message_free_unpacked(&(*msg)->base, NULL). On failure
 * returns CTL_EIO or CTL_EGRAPH with a message in err. */
int ctl_load_graph(const char *path, Compiled__V1__GraphModule **msg, char *err,
                   size_t errlen);

/* `compilectl graph ...` */
int ctl_cmd_graph(int argc, char **argv);

/* ---- net.c: talking to a daemon ---- */

#define CTL_DEFAULT_SERVER "127.0.0.1:7421"
#define CTL_DEFAULT_TIMEOUT_MS 60000

/* The daemon's address: --server, else $COMPILED_SERVER, else the default.
 * Set by main() before any command runs. */
extern const char *ctl_server;

/* The bearer token sent with every call: --token, else $COMPILED_TOKEN
 * (NULL: none). */
extern const char *ctl_token;

/* TLS: --ca (the daemon's CA; "": the system's roots when --cert is
 * given), --cert and --key (mutual TLS), else $COMPILED_CA, $COMPILED_CERT,
 * $COMPILED_KEY. All NULL: plain gRPC. */
extern const char *ctl_ca, *ctl_cert, *ctl_key;

/* A client for ctl_server, or NULL after printing why. Free with
 * rpc_close. */
rpc_client *ctl_connect(void);

/* The exit code for a failed call's status (see the enum above), one that
 * ctl_cmd lists: any other is CTL_ESERVER. */
int ctl_status_exit(const rpc_status *st);

/* Prints "compilectl: <what>: <why>" for a failed call and returns its exit
 * code. A GraphError's message is printed as it is (it names the node and
 * argument); otherwise the status message and code name. */
int ctl_rpc_error(const char *what, const rpc_status *st);

/* Parses seconds ("60", "0.5") into milliseconds. Returns 0, or -1 after
 * printing an error naming `opt`. */
int ctl_parse_timeout(const char *opt, const char *s, int64_t *ms);

/* Parses a byte count with an optional K, M, G suffix (powers of 1024). */
int ctl_parse_size(const char *opt, const char *s, uint64_t *out);

/* Parses a duration such as 90s, 30m, 12h, 7d, 2w, 1h30m or a plain number
 * of seconds. */
int ctl_parse_duration(const char *opt, const char *s, int64_t *seconds);

/* Human forms: "12.3 KiB"; "850 us", "12.3 ms", "4.21 s", "3m 12s";
 * "5m ago". Each writes at most `len` bytes into `buf` and returns it. */
char *ctl_fmt_bytes(uint64_t n, char *buf, size_t len);
char *ctl_fmt_micros(int64_t us, char *buf, size_t len);
char *ctl_fmt_ago(int64_t unix_seconds, char *buf, size_t len);
/* Whole seconds as "45s", "3m 12s", "2h 5m", "3d 4h". */
char *ctl_fmt_seconds(int64_t s, char *buf, size_t len);
/* An entry's label on one line: "NAME at FILE:LINE on HOST", FILE without
 * its directories, each part left out when empty; "-" for none (NULL). */
char *ctl_fmt_label(const Compiled__V1__Label *l, char *buf, size_t len);

/* Prints message `m` as one line of JSON on stdout. Returns 0, or CTL_EIO
 * after printing why. */
int ctl_print_json(const ProtobufCMessage *m);

/* A monotonic clock in microseconds. */
int64_t ctl_now_us(void);

/* The SHA-256 of `len` bytes as 64 lowercase hex digits plus NUL. */
void ctl_sha256_hex(const void *data, size_t len, char out[65]);

/* Resolves a key given on the command line: 64 hex digits as they are, a
 * shorter prefix (at least 4 digits) through the server's entry list.
 * Writes the full key to `out`. Returns CTL_OK or an exit code after
 * printing why (usage for a malformed or ambiguous prefix, not-found). */
int ctl_resolve_key(rpc_client *c, const char *arg, int64_t timeout_ms,
                    char out[65]);

/* Fetches the artifact of `key` in chunks, reassembles it and checks its
 * SHA-256 against the digest the server sends. On success *data (malloc'd)
 * and *len hold it, and `digest` (may be NULL) the hex digest. Returns
 * CTL_OK or an exit code after printing why. */
int ctl_fetch_artifact(rpc_client *c, const char *key, int64_t timeout_ms,
                       uint8_t **data, size_t *len, char *digest);

/* ---- the commands that talk to a daemon ---- */

int ctl_cmd_submit(int argc, char **argv);  /* submit.c */
int ctl_cmd_explain(int argc, char **argv); /* submit.c */
int ctl_cmd_lookup(int argc, char **argv);  /* admin_cmd.c */
int ctl_cmd_fetch(int argc, char **argv);
int ctl_cmd_stats(int argc, char **argv);
int ctl_cmd_ls(int argc, char **argv);
int ctl_cmd_evict(int argc, char **argv);
int ctl_cmd_health(int argc, char **argv);
int ctl_cmd_bench(int argc, char **argv);   /* bench.c */
int ctl_cmd_package(int argc, char **argv); /* package.c */

/* Compiles graph `g` (read from `path`, for messages and the label) for
 * `target` (NULL: the daemon's) in inference mode, showing progress on a
 * terminal, and returns the artifact (malloc'd, its SHA-256 checked against
 * the result's) with the result's signature and key id (malloc'd, "" when
 * the daemon does not sign). Returns CTL_OK or an exit code after printing
 * why. (submit.c) */
int ctl_compile_artifact(rpc_client *c, const char *path,
                         Compiled__V1__GraphModule *g,
                         Compiled__V1__Target *target, int opt_level,
                         int64_t timeout_ms, uint8_t **art, size_t *art_len,
                         char **signature, char **signature_key);

#endif
