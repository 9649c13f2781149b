/*
 * ctl.h: what the parts of compilectl share: exit codes, output helpers,
 * loading graph files.
 */
#ifndef CTL_H
#define CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiled/v1/graph.pb-c.h"

/* Exit codes: distinct so scripts can tell failures apart. */
enum {
  CTL_OK = 0,           /* success */
  CTL_EGRAPH = 1,       /* the graph is invalid or its compile failed */
  CTL_EUSAGE = 2,       /* bad command line */
  CTL_EUNREACHABLE = 3, /* the server cannot be reached */
  CTL_EIO = 4,          /* a local file could not be read or written */
};

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

#endif
