/*
 * test_log.c: the daemon's log (daemon/log.c) keeps every entry on one line
 * whatever a client put in it: text lines escape control characters,
 * quotes, backslashes, invalid UTF-8 and Unicode line separators; JSON lines
 * keep fields holding invalid UTF-8 (escaped) instead of dropping them.
 *
 * log.c is compiled into this test directly (the daemon is a program, not
 * a library).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/log.c"

static char *esc(const char *s, bool quotes) {
  static char out[512];
  log_escape(out, sizeof out, s, strlen(s), quotes);
  return out;
}

Test(log_escape, control_characters_become_c_escapes) {
  cr_assert_str_eq(esc("a\nb\rc\td\x1b[2J\a\b\f\v", false),
                   "a\\nb\\rc\\td\\e[2J\\a\\b\\f\\v");
  cr_assert_str_eq(esc("\x01\x1f\x7f", false), "\\x01\\x1f\\x7f");
}

Test(log_escape, quotes_and_backslashes) {
  cr_assert_str_eq(esc("say \"hi\" \\ ok", true), "say \\\"hi\\\" \\\\ ok");
  cr_assert_str_eq(esc("say \"hi\"", false), "say \"hi\"");
}

Test(log_escape, utf8_kept_invalid_bytes_escaped) {
  cr_assert_str_eq(esc("caf\xc3\xa9 \xe2\x9c\x93", false),
                   "caf\xc3\xa9 \xe2\x9c\x93");
  cr_assert_str_eq(esc("a\xff\xfe"
                       "b",
                       false),
                   "a\\xff\\xfeb");
  /* overlong '/', a surrogate, a truncated sequence */
  cr_assert_str_eq(esc("\xc0\xaf", false), "\\xc0\\xaf");
  cr_assert_str_eq(esc("\xed\xa0\x80", false), "\\xed\\xa0\\x80");
  cr_assert_str_eq(esc("x\xe2\x9c", false), "x\\xe2\\x9c");
}

Test(log_escape, unicode_separators_and_bidi_controls) {
  /* U+2028 LINE SEPARATOR, U+0085 NEL, U+202E RIGHT-TO-LEFT OVERRIDE */
  cr_assert_str_eq(esc("a\xe2\x80\xa8"
                       "b\xc2\x85"
                       "c\xe2\x80\xae",
                       false),
                   "a\\u2028b\\u0085c\\u202e");
}

Test(log_escape, truncates_on_whole_escapes) {
  char out[6];
  size_t n = log_escape(out, sizeof out, "ab\n\n\n", 5, false);
  cr_assert_str_eq(out, "ab\\n");
  cr_assert_eq(n, 4);
}

/* Logs one request whose error holds a forged line, to a file; returns the
 * file's contents (malloc'd). */
static char *log_one(log_format fmt, const char *error, const char *peer) {
  char path[] = "/tmp/test_log_XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  cr_assert_eq(log_init(LOG_INFO, fmt, path), 0);
  log_req r = {.method = "Compile",
               .key = NULL,
               .outcome = "invalid",
               .status = 3,
               .peer = peer,
               .total_us = 12,
               .validate_us = -1,
               .key_us = -1,
               .queue_us = -1,
               .compile_us = -1,
               .error = error};
  log_request(&r);
  LOG(LOG_WARN, "message with %s", error);
  log_close();
  FILE *f = fopen(path, "rb");
  cr_assert(f);
  char *buf = calloc(1, 65536);
  fread(buf, 1, 65535, f);
  fclose(f);
  unlink(path);
  return buf;
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++)
    n += *s == '\n' || *s == '\r';
  return n;
}

#define FORGED                                                                 \
  "bad 'x\n2026-01-01T00:00:00.000Z info  Compile hit key=0 status=0 "         \
  "peer=ipv4:10.0.0.1\r\x1b[1A\a\" end\\'"

Test(log_text, a_forged_line_stays_inside_its_field) {
  char *out = log_one(LOG_TEXT, FORGED, "ipv4:127.0.0.1:1");
  cr_assert_eq(count_lines(out), 2, "%s", out); /* request + LOG line */
  cr_assert(strstr(out, "error=\"bad 'x\\n2026-01-01T00:00:00.000Z info  "
                        "Compile hit key=0 status=0 peer=ipv4:10.0.0.1\\r"
                        "\\e[1A\\a\\\" end\\\\'\"\n"),
            "%s", out);
  cr_assert(strstr(out, "peer=ipv4:127.0.0.1:1 error="), "%s", out);
  cr_assert(strstr(out, "warn  message with bad 'x\\n2026"), "%s", out);
  free(out);
}

Test(log_json, invalid_utf8_is_escaped_not_dropped) {
  char *out = log_one(LOG_JSON, "name 'a\xff\xfe\\b' \xe2\x80\xa8 bad\n",
                      "ipv4:127.0.0.1:1");
  cr_assert_eq(count_lines(out), 2, "%s", out);
  char *second = strchr(out, '\n') + 1;
  json_error_t jerr;
  json_t *req = json_loadb(out, (size_t)(second - out), 0, &jerr);
  cr_assert(req, "%s: %s", jerr.text, out);
  const char *e = json_string_value(json_object_get(req, "error"));
  cr_assert(e, "error field dropped: %s", out);
  cr_assert_str_eq(e, "name 'a\\xff\\xfe\\\\b' \\u2028 bad\\n");
  cr_assert_str_eq(json_string_value(json_object_get(req, "peer")),
                   "ipv4:127.0.0.1:1");
  json_t *msg = json_loads(second, 0, &jerr);
  cr_assert(msg, "%s", jerr.text);
  cr_assert(strstr(json_string_value(json_object_get(msg, "msg")), "\\xff"));
  json_decref(req);
  json_decref(msg);
  free(out);
}

Test(log_json, valid_utf8_is_kept_and_written_as_ascii) {
  char *out = log_one(LOG_JSON, "caf\xc3\xa9\n", NULL);
  for (const char *p = out; *p; p++)
    cr_assert((unsigned char)*p < 0x80, "non-ASCII byte in %s", out);
  json_t *req = json_loads(strtok(out, "\n"), 0, NULL);
  cr_assert(req);
  cr_assert_str_eq(json_string_value(json_object_get(req, "error")),
                   "caf\xc3\xa9\n");
  json_decref(req);
  free(out);
}
