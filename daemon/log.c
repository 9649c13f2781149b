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
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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

bool log_is_stderr(void) {
  pthread_mutex_lock(&log_mu);
  bool r = log_file == NULL;
  pthread_mutex_unlock(&log_mu);
  return r;
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

/* ---- escaping ---- */

/* Length of the valid UTF-8 sequence at s (at most n bytes) and its code
 * point, or 0 when the bytes there are not valid UTF-8 (overlong forms,
 * surrogates and code points past U+10FFFF are invalid). */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp) {
  static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
  size_t len = s[0] < 0x80             ? 1
               : (s[0] & 0xE0) == 0xC0 ? 2
               : (s[0] & 0xF0) == 0xE0 ? 3
               : (s[0] & 0xF8) == 0xF0 ? 4
                                       : 0;
  if (len == 0 || len > n)
    return 0;
  uint32_t c = len == 1 ? s[0] : s[0] & (0x7Fu >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80)
      return 0;
    c = (c << 6) | (s[i] & 0x3Fu);
  }
  if (c < min[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
    return 0;
  *cp = c;
  return len;
}

/* Code points a terminal or log viewer may treat as line structure or that
 * reorder what is displayed: C1 controls (NEL among them), the Unicode line
 * and paragraph separators, and the bidirectional controls. */
static bool unsafe_cp(uint32_t c) {
  return (c >= 0x80 && c <= 0x9F) || c == 0x2028 || c == 0x2029 ||
         (c >= 0x202A && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069);
}

size_t log_escape(char *out, size_t outlen, const char *in, size_t inlen,
                  bool quotes) {
  static const char *const named = "\a\b\t\n\v\f\r";
  static const char *const letters = "abtnvfr";
  size_t o = 0;
  const unsigned char *s = (const unsigned char *)in;
  if (!outlen)
    return 0;
  for (size_t i = 0; i < inlen;) {
    char tmp[12];
    uint32_t cp = 0;
    size_t len = utf8_seq(s + i, inlen - i, &cp);
    const char *hit = s[i] && s[i] < 0x80 ? strchr(named, s[i]) : NULL;
    if (len == 0)
      snprintf(tmp, sizeof tmp, "\\x%02x", s[i]);
    else if (hit)
      snprintf(tmp, sizeof tmp, "\\%c", letters[hit - named]);
    else if (s[i] == '\\' || (quotes && s[i] == '"'))
      snprintf(tmp, sizeof tmp, "\\%c", s[i]);
    else if (cp == 0x1B)
      snprintf(tmp, sizeof tmp, "\\e");
    else if (cp < 0x20 || cp == 0x7F)
      snprintf(tmp, sizeof tmp, "\\x%02x", (unsigned)cp);
    else if (unsafe_cp(cp))
      snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)cp);
    else {
      memcpy(tmp, s + i, len);
      tmp[len] = '\0';
    }
    size_t tl = strlen(tmp);
    if (o + tl >= outlen)
      break; /* truncated on a whole character or escape */
    memcpy(out + o, tmp, tl);
    o += tl;
    i += len ? len : 1;
  }
  out[o] = '\0';
  return o;
}

/* A JSON string for `s`: as it is when it is valid UTF-8 (jansson escapes
 * controls, and JSON_ENSURE_ASCII every other non-ASCII character, at
 * output); otherwise with C-style escapes (\xNN for each invalid byte, and
 * the rest as in the text format), rather than losing the field, which is
 * what json_string() does with invalid UTF-8. */
static json_t *json_str(const char *s) {
  json_t *j = json_string(s);
  if (j)
    return j;
  size_t n = strlen(s), cap = 4 * n + 1;
  char *buf = malloc(cap);
  if (!buf)
    return json_string("(unloggable: out of memory)");
  log_escape(buf, cap, s, n, false);
  j = json_string(buf);
  free(buf);
  return j;
}

/* ---- output ---- */

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
  if (!o)
    return;
  char *s =
      json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
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
    json_t *o = json_object();
    if (o) {
      json_object_set_new(o, "time", json_string(ts));
      json_object_set_new(o, "level", json_string(level_names[level]));
      json_object_set_new(o, "msg", json_str(msg));
    }
    emit_json(o);
    return;
  }
  /* Messages may carry what a client sent: one line, whatever it holds. */
  char line[4 * sizeof msg + 64];
  int n = snprintf(line, sizeof line, "%s %-5s ", ts, level_names[level]);
  log_escape(line + n, sizeof line - (size_t)n, msg, strlen(msg), false);
  emit(line);
}

/* A bounded text line under construction. */
typedef struct line {
  char buf[8192];
  size_t n;
} line;

static void add(line *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void add(line *l, const char *fmt, ...) {
  if (l->n >= sizeof l->buf - 1)
    return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(l->buf + l->n, sizeof l->buf - l->n, fmt, ap);
  va_end(ap);
  if (k > 0)
    l->n +=
        (size_t)k < sizeof l->buf - l->n ? (size_t)k : sizeof l->buf - 1 - l->n;
}

/* ` name=value` with value escaped; quoted when asked. */
static void add_field(line *l, const char *name, const char *v, bool quote) {
  add(l, quote ? " %s=\"" : " %s=", name);
  if (l->n < sizeof l->buf - 2)
    l->n += log_escape(l->buf + l->n, sizeof l->buf - l->n - 1, v, strlen(v),
                       quote);
  if (quote)
    add(l, "\"");
}

/* The stages a request line times, in the order both formats give them
 * (`validate=12us` in text, `"validate_us": 12` in JSON); a stage is left
 * out where log_req holds -1 (not measured). */
static const struct {
  const char *name;
  size_t offset; /* of its int64_t in log_req */
} stages[] = {{"validate", offsetof(log_req, validate_us)},
              {"key", offsetof(log_req, key_us)},
              {"queue", offsetof(log_req, queue_us)},
              {"compile", offsetof(log_req, compile_us)}};
#define NSTAGES (sizeof stages / sizeof stages[0])

static int64_t stage_us(const log_req *r, size_t i) {
  return *(const int64_t *)((const char *)r + stages[i].offset);
}

static void request_json(const log_req *r, const char *ts) {
  json_t *o = json_object();
  if (!o)
    return;
  json_object_set_new(o, "time", json_string(ts));
  json_object_set_new(o, "level", json_string("info"));
  json_object_set_new(o, "method", json_str(r->method));
  json_object_set_new(o, "outcome", json_str(r->outcome));
  json_object_set_new(o, "status", json_integer(r->status));
  json_object_set_new(o, "total_us", json_integer((json_int_t)r->total_us));
  if (r->key)
    json_object_set_new(o, "key", json_str(r->key));
  if (r->peer)
    json_object_set_new(o, "peer", json_str(r->peer));
  for (size_t i = 0; i < NSTAGES; i++)
    if (stage_us(r, i) >= 0) {
      char name[32];
      snprintf(name, sizeof name, "%s_us", stages[i].name);
      json_object_set_new(o, name, json_integer(stage_us(r, i)));
    }
  if (r->bytes)
    json_object_set_new(o, "bytes", json_integer((json_int_t)r->bytes));
  if (r->detail)
    json_object_set_new(o, "detail", json_str(r->detail));
  if (r->error)
    json_object_set_new(o, "error", json_str(r->error));
  emit_json(o);
}

void log_request(const log_req *r) {
  if (LOG_INFO > log_current_level)
    return;
  char ts[40];
  timestamp(ts, sizeof ts);
  if (log_fmt == LOG_JSON) {
    request_json(r, ts);
    return;
  }
  /* Method and outcome are the daemon's own words; everything else may
   * come from a client, so it is escaped. */
  line l = {.n = 0};
  add(&l, "%s info  %s %s", ts, r->method, r->outcome);
  char key[17];
  snprintf(key, sizeof key, "%s", r->key ? r->key : "-");
  add_field(&l, "key", key, false);
  add(&l, " status=%d total=%lldus", r->status, (long long)r->total_us);
  for (size_t i = 0; i < NSTAGES; i++)
    if (stage_us(r, i) >= 0)
      add(&l, " %s=%lldus", stages[i].name, (long long)stage_us(r, i));
  if (r->bytes)
    add(&l, " bytes=%llu", (unsigned long long)r->bytes);
  if (r->peer)
    add_field(&l, "peer", r->peer, false);
  if (r->detail)
    add_field(&l, "detail", r->detail, true);
  if (r->error)
    add_field(&l, "error", r->error, true);
  emit(l.buf);
}
