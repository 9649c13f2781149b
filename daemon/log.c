/*
 * log.c: level-checked, thread-safe logging in text or JSON. See log.h.
 *
 * The log is the one piece of process-wide state the daemon keeps outside
 * its loop: every thread may log, under one mutex.
 */
#include "daemon/log.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

log_level log_current_level = LOG_INFO;

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_file; /* NULL: stderr */
static char *log_path; /* NULL: stderr */
static log_format log_fmt = LOG_TEXT;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int log_level_parse(const char *s) {
  for (int i = 0; i < 4; i++)
    if (strcmp(s, level_names[i]) == 0)
      return i;
  if (strcmp(s, "warning") == 0)
    return LOG_WARN;
  return -1;
}

int log_init(log_level level, log_format format, const char *path) {
  log_current_level = level;
  log_fmt = format;
  if (path && *path && strcmp(path, "-") != 0) {
    FILE *f = fopen(path, "a");
    if (!f)
      return -errno;
    setvbuf(f, NULL, _IOLBF, 0);
    pthread_mutex_lock(&log_mu);
    log_file = f;
    free(log_path);
    log_path = strdup(path);
    pthread_mutex_unlock(&log_mu);
  }
  return 0;
}

void log_close(void) {
  pthread_mutex_lock(&log_mu);
  if (log_file)
    fclose(log_file);
  log_file = NULL;
  free(log_path);
  log_path = NULL;
  pthread_mutex_unlock(&log_mu);
}

int log_reopen(void) {
  int rc = 0;
  pthread_mutex_lock(&log_mu);
  if (log_path) {
    FILE *f = fopen(log_path, "a");
    if (f) {
      setvbuf(f, NULL, _IOLBF, 0);
      if (log_file)
        fclose(log_file);
      log_file = f;
    } else {
      rc = -errno;
    }
  }
  pthread_mutex_unlock(&log_mu);
  return rc;
}

static void timestamp(char *buf, size_t n) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  size_t k = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + k, n - k, ".%03dZ", (int)(tv.tv_usec / 1000));
}

/* Writes a finished line under the lock. */
static void emit(const char *line) {
  pthread_mutex_lock(&log_mu);
  FILE *f = log_file ? log_file : stderr;
  fputs(line, f);
  fputc('\n', f);
  fflush(f);
  pthread_mutex_unlock(&log_mu);
}

static void emit_json(json_t *o) {
  char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (s)
    emit(s);
  free(s);
  json_decref(o);
}

void log_write(log_level level, const char *fmt, ...) {
  char msg[2048], ts[40];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  timestamp(ts, sizeof ts);
  if (log_fmt == LOG_JSON) {
    emit_json(json_pack("{s:s, s:s, s:s}", "time", ts, "level",
                        level_names[level], "msg", msg));
    return;
  }
  char line[2200];
  snprintf(line, sizeof line, "%s %-5s %s", ts, level_names[level], msg);
  emit(line);
}

void log_request(const log_req *r) {
  if (LOG_INFO > log_current_level)
    return;
  char ts[40];
  timestamp(ts, sizeof ts);
  if (log_fmt == LOG_JSON) {
    json_t *o =
        json_pack("{s:s, s:s, s:s, s:s, s:i, s:I}", "time", ts, "level", "info",
                  "method", r->method, "outcome", r->outcome, "status",
                  r->status, "total_us", (json_int_t)r->total_us);
    if (!o)
      return;
    if (r->key)
      json_object_set_new(o, "key", json_string(r->key));
    if (r->peer)
      json_object_set_new(o, "peer", json_string(r->peer));
    const struct {
      const char *name;
      int64_t v;
    } t[] = {{"validate_us", r->validate_us},
             {"key_us", r->key_us},
             {"queue_us", r->queue_us},
             {"compile_us", r->compile_us}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
      if (t[i].v >= 0)
        json_object_set_new(o, t[i].name, json_integer(t[i].v));
    if (r->bytes)
      json_object_set_new(o, "bytes", json_integer((json_int_t)r->bytes));
    if (r->error)
      json_object_set_new(o, "error", json_string(r->error));
    emit_json(o);
    return;
  }
  char line[2048];
  int n = snprintf(line, sizeof line,
                   "%s info  %s %s key=%.16s status=%d total=%lldus", ts,
                   r->method, r->outcome, r->key ? r->key : "-", r->status,
                   (long long)r->total_us);
  const struct {
    const char *name;
    int64_t v;
  } t[] = {{"validate", r->validate_us},
           {"key", r->key_us},
           {"queue", r->queue_us},
           {"compile", r->compile_us}};
  for (size_t i = 0; i < sizeof t / sizeof t[0] && n < (int)sizeof line; i++)
    if (t[i].v >= 0)
      n += snprintf(line + n, sizeof line - (size_t)n, " %s=%lldus", t[i].name,
                    (long long)t[i].v);
  if (r->bytes && n < (int)sizeof line)
    n += snprintf(line + n, sizeof line - (size_t)n, " bytes=%llu",
                  (unsigned long long)r->bytes);
  if (r->peer && n < (int)sizeof line)
    n += snprintf(line + n, sizeof line - (size_t)n, " peer=%s", r->peer);
  if (r->error && n < (int)sizeof line)
    snprintf(line + n, sizeof line - (size_t)n, " error=\"%s\"", r->error);
  emit(line);
}
