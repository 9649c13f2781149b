/*
 * log.h: the daemon's log. Only daemon/ logs (docs/design.md, "Rules
 * kept").
 *
 * LOG(level, fmt, ...) checks the level before formatting anything. Lines
 * go to a file or stderr, as text ("2026-11-22T10:00:00.123Z info  msg") or
 * as one JSON object per line. log_request() writes the one line per
 * request, with its fields, in either format. Whatever a message holds, it
 * stays one line: text lines escape what a client may have sent
 * (log_escape), JSON lines are ASCII with invalid UTF-8 escaped rather than
 * dropped. Thread-safe; log_reopen()
 * (on SIGHUP) reopens the file for log rotation.
 */
#ifndef DAEMON_LOG_H
#define DAEMON_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum log_level {
  LOG_ERROR = 0,
  LOG_WARN = 1,
  LOG_INFO = 2,
  LOG_DEBUG = 3,
} log_level;

typedef enum log_format { LOG_TEXT, LOG_JSON } log_format;

/* Sets up the log; path NULL or "-" is stderr. Returns 0 or -errno. */
int log_init(log_level level, log_format format, const char *path);
void log_close(void);
int log_reopen(void);

/* Whether the log goes to stderr (no log file). */
bool log_is_stderr(void);

/* "error", "warn", "info", "debug" -> level; -1 when unknown. */
int log_level_parse(const char *s);

extern log_level log_current_level;

void log_write(log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define LOG(level, ...)                                                        \
  do {                                                                         \
    if ((level) <= log_current_level)                                          \
      log_write((level), __VA_ARGS__);                                         \
  } while (0)

/* Writes `in` (inlen bytes) to `out` (a string of at most outlen - 1 bytes)
 * so that it cannot break a log line or be mistaken for its structure:
 * control characters as C escapes (\n, \r, \t, \a, \e, \x01...), DEL
 * and bytes that are not valid UTF-8 as \xNN, a backslash as \\, with
 * `quotes` the double quote as \", and the Unicode line separators, C1
 * controls and bidirectional controls as \uNNNN. Stops before a character
 * or escape that does not fit. Returns the length written. */
size_t log_escape(char *out, size_t outlen, const char *in, size_t inlen,
                  bool quotes);

/* One request: the method, the key (may be NULL), how it ended ("hit",
 * "compiled", "joined", "invalid", ...), the gRPC status and timings. */
typedef struct log_req {
  const char *method;
  const char *key; /* hex, or NULL */
  const char *outcome;
  int status;       /* grpc_status_code */
  const char *peer; /* may be NULL */
  int64_t total_us;
  int64_t validate_us, key_us, queue_us, compile_us; /* -1: not measured */
  uint64_t bytes;     /* artifact bytes, 0 if none */
  const char *detail; /* what a state-changing call did, or NULL */
  const char *error;  /* message for a failure, or NULL */
} log_req;

void log_request(const log_req *r);

#endif
