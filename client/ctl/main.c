/*
 * main.c: compilectl, the command-line client of compiled.
 *
 * `compilectl graph ...` works on local graph files; the commands that talk
 * to a daemon (submit, lookup, stats, ...) use --server or $COMPILED_SERVER.
 */
#include <stdio.h>
#include <string.h>

#include "client/ctl/ctl.h"
#include "compiler/key.h"

static const char usage[] =
    "usage: compilectl COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  graph validate|hash|fmt|convert FILE...   local graph tools\n"
    "  help                                      this text\n"
    "  version                                   print the version\n"
    "\n"
    "Run 'compilectl graph --help' for the graph commands.\n"
    "Exit codes: 0 ok, 1 graph or compile error, 2 usage error,\n"
    "            3 server unreachable, 4 local I/O error.\n";

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage, stderr);
    return CTL_EUSAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 ||
      strcmp(cmd, "-h") == 0) {
    fputs(usage, stdout);
    return CTL_OK;
  }
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    printf("compilectl 0.1.0 (compiler build %s)\n", gc_build_id());
    return CTL_OK;
  }
  if (strcmp(cmd, "graph") == 0)
    return ctl_cmd_graph(argc - 1, argv + 1);
  ctl_errorf("unknown command '%s'", cmd);
  fputs(usage, stderr);
  return CTL_EUSAGE;
}
