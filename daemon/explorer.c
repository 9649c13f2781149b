/*
 * explorer.c: the compile explorer's HTTP side. See explorer.h for what it
 * serves and docs/explorer.md for the pages and the API.
 *
 * Every response carries the same headers: a Content-Security-Policy that
 * lets a page run only the scripts served here ('self': no inline script,
 * no eval, no other origin) and connect only here, nosniff, no framing, no
 * referrer, no caching. Pages never put what a client sent into HTML: the
 * scripts fetch JSON and set it as text (textContent), and the JSON is
 * built by jansson, which escapes it. So a node named "<script>..." or a
 * stack trace holding HTML is shown as those characters, on every page.
 *
 * Who may look (explorer.h): decided per request by `allow`. A session
 * cookie is "1.EXPIRY.DIGEST.MAC": the token's SHA-256 (as the tokens
 * table keeps it), when it expires (unix seconds), and an HMAC-SHA-256 of
 * both under a random key made at start. It is checked against the tokens
 * table on every request, so a token removed from the file (SIGHUP) ends
 * its sessions at once; a restart ends them all. The token itself is never
 * stored, logged, or put in a URL.
 *
 * The login form is the one POST: its body (at most LOGIN_MAX bytes) is
 * gathered over libmicrohttpd's calls in the request's state. Logging in
 * changes nothing in the daemon: the session lives in the browser.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "cache/explore.h"
#include "common/monocond.h"
#include "compiler/pipeline.h"
#include "daemon/explorer_internal.h"
#include "daemon/log.h"

#define COOKIE "compiled_session"
#define SESSION_S (12 * 3600) /* a session's life */
#define LOGIN_MAX 4096        /* bytes of a login form */

static const char csp[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'";

/* ---- small helpers ---- */

static bool prefix(const char *s, const char *p) {
  return strncmp(s, p, strlen(p)) == 0;
}

const char *x_arg(struct MHD_Connection *conn, const char *name) {
  return MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
}

bool x_int_arg(struct MHD_Connection *conn, const char *name, int64_t def,
               int64_t lo, int64_t hi, int64_t *out, const char **bad) {
  const char *v = x_arg(conn, name);
  if (!v || !*v) {
    *out = def;
    return true;
  }
  char *end;
  long long n = strtoll(v, &end, 10);
  if (*end || n < lo || n > hi) {
    *bad = name;
    return false;
  }
  *out = n;
  return true;
}

json_t *x_strn(const char *s, size_t len) {
  if (!s)
    return json_null();
  json_t *j = json_stringn(s, len);
  if (j)
    return j;
  /* not UTF-8: escape what is not, keep the rest */
  size_t cap = len * 4 + 1;
  char *e = malloc(cap);
  if (!e)
    return json_null();
  log_escape(e, cap, s, len, false);
  j = json_string(e);
  free(e);
  return j ? j : json_null();
}

json_t *x_str(const char *s) {
  return s ? x_strn(s, strlen(s)) : json_null();
}

json_t *x_error(const char *code, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return json_pack("{s:{s:s,s:o}}", "error", "code", code, "message",
                   x_str(msg));
}

json_t *x_key(const uint8_t key[GC_DIGEST_LEN]) {
  char hex[GC_HEX_LEN];
  gc_digest_hex(key, hex);
  return json_string(hex);
}

json_t *x_entry(const cache_info *i, const char *summary) {
  json_t *e = json_pack(
      "{s:o,s:I,s:I,s:I,s:I,s:f,s:I,s:b}", "key", x_key(i->key), "created",
      (json_int_t)i->created, "last_used", (json_int_t)i->last_used, "hits",
      (json_int_t)i->hits, "size", (json_int_t)i->size, "compile_ms",
      (double)i->compile_us / 1000.0, "stored_size", (json_int_t)i->stored_size,
      "signed", i->is_signed);
  json_t *s = summary ? json_loads(summary, 0, NULL) : NULL;
  json_object_set_new(e, "kept", json_boolean(s != NULL));
  json_object_set_new(e, "summary", s ? s : json_null());
  return e;
}

/* ---- responses ---- */

static void headers(struct MHD_Response *r, const char *type) {
  MHD_add_response_header(r, "Content-Type", type);
  MHD_add_response_header(r, "Content-Security-Policy", csp);
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(r, "X-Frame-Options", "DENY");
  /* same-origin, not no-referrer: with no-referrer a browser posts the
   * login form with "Origin: null", which same_origin must refuse */
  MHD_add_response_header(r, "Referrer-Policy", "same-origin");
  MHD_add_response_header(r, "Cache-Control", "no-store");
  MHD_add_response_header(r, "Cross-Origin-Resource-Policy", "same-origin");
}

/* Queues a response of `len` bytes (static or malloc'd, as `mem` says),
 * with `extra` header pairs (NULL-terminated). */
static int respond(struct MHD_Connection *conn, unsigned status,
                   const char *type, const void *data, size_t len,
                   enum MHD_ResponseMemoryMode mem, const char *const *extra) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(len, (void *)data, mem);
  if (!r) {
    if (mem == MHD_RESPMEM_MUST_FREE)
      free((void *)data);
    return MHD_NO;
  }
  headers(r, type);
  for (int i = 0; extra && extra[i]; i += 2)
    MHD_add_response_header(r, extra[i], extra[i + 1]);
  enum MHD_Result rc = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return rc;
}

/* Sends `j` (taking it) as JSON; a response over X_MAX_RESPONSE is an
 * error instead. */
static int send_json(struct MHD_Connection *conn, unsigned status, json_t *j,
                     const char *const *extra) {
  if (!j) {
    j = x_error("internal", "out of memory");
    status = MHD_HTTP_INTERNAL_SERVER_ERROR;
  }
  char *text = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
  json_decref(j);
  if (text && strlen(text) > X_MAX_RESPONSE) {
    free(text);
    static const char over[] =
        "{\"error\":{\"code\":\"too_big\",\"message\":\"the response would "
        "be over its limit; ask for a smaller page\"}}";
    return respond(conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
                   "application/json; charset=utf-8", over, sizeof over - 1,
                   MHD_RESPMEM_PERSISTENT, extra);
  }
  if (!text)
    return MHD_NO;
  return respond(conn, status, "application/json; charset=utf-8", text,
                 strlen(text), MHD_RESPMEM_MUST_FREE, extra);
}

static int redirect(struct MHD_Connection *conn, const char *to,
                    const char *cookie) {
  const char *extra[] = {"Location", to, cookie ? "Set-Cookie" : NULL, cookie,
                         NULL};
  static const char body[] = "see other\n";
  return respond(conn, MHD_HTTP_SEE_OTHER, "text/plain; charset=utf-8", body,
                 sizeof body - 1, MHD_RESPMEM_PERSISTENT, extra);
}

/* ---- who may look ---- */

typedef struct viewer {
  auth_role role;
  char who[64];    /* the token's name, or "loopback" */
  const char *how; /* "token", "session", "loopback" */
} viewer;

static bool loopback_peer(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  const struct sockaddr *sa = ci ? ci->client_addr : NULL;
  if (!sa)
    return false;
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in6 =
        (const struct sockaddr_in6 *)(const void *)sa;
    const uint8_t *b = in6->sin6_addr.s6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
      return true;
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && b[12] == 127;
  }
  return false;
}

/* Whether the Host header names this machine by a loopback name: a page
 * of another site whose name an attacker points at 127.0.0.1 (DNS
 * rebinding) sends its own name, and is refused. */
static bool loopback_host(struct MHD_Connection *conn) {
  const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
  if (!h)
    return false;
  char host[300];
  snprintf(host, sizeof host, "%s", h);
  char *end = host[0] == '[' ? strchr(host, ']') : strrchr(host, ':');
  if (host[0] == '[' && end)
    end[1] = '\0';
  else if (end)
    *end = '\0';
  char listen[320];
  snprintf(listen, sizeof listen, "%s:0", host);
  return auth_loopback_listen(listen);
}

static void hex_of(const unsigned char *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++)
    snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static void session_mac(explorer *x, const char *text, char out[65]) {
  unsigned char mac[32];
  unsigned int n = 0;
  HMAC(EVP_sha256(), x->secret, sizeof x->secret, (const unsigned char *)text,
       strlen(text), mac, &n);
  hex_of(mac, sizeof mac, out);
}

/* The role of a session cookie's value (AUTH_NONE if it is not valid). */
static auth_role session_role(daemon_ctx *d, const char *value, char *who,
                              size_t wholen) {
  long long expiry;
  char digest[65], mac[65];
  int used = 0;
  if (strlen(value) > 200 ||
      sscanf(value, "1.%lld.%64[0-9a-f].%64[0-9a-f]%n", &expiry, digest, mac,
             &used) != 3 ||
      value[used] || strlen(digest) != 64 || strlen(mac) != 64 ||
      expiry < (long long)time(NULL))
    return AUTH_NONE;
  char text[128], want[65];
  snprintf(text, sizeof text, "1.%lld.%s", expiry, digest);
  session_mac(d->explorer, text, want);
  if (CRYPTO_memcmp(want, mac, 64) != 0)
    return AUTH_NONE;
  unsigned char h[AUTH_DIGEST_LEN];
  for (int i = 0; i < AUTH_DIGEST_LEN; i++) {
    unsigned v;
    sscanf(digest + 2 * i, "%2x", &v);
    h[i] = (unsigned char)v;
  }
  return auth_check_digest(d->auth, h, who, wholen);
}

/* Who is asking; AUTH_NONE with *why set when nobody may look. */
static auth_role allow(daemon_ctx *d, struct MHD_Connection *conn, viewer *v,
                       const char **why) {
  memset(v, 0, sizeof *v);
  v->role = AUTH_NONE;
  if (!d->auth) { /* as gRPC: loopback only, unless --insecure */
    if (!d->cfg.insecure && !loopback_peer(conn)) {
      *why = "without --tokens the explorer answers loopback clients only";
      return AUTH_NONE;
    }
    if (!d->cfg.insecure && !loopback_host(conn)) {
      *why = "without --tokens the explorer answers requests for a loopback "
             "host name only (Host: 127.0.0.1, localhost or [::1])";
      return AUTH_NONE;
    }
    v->role = AUTH_ADMIN;
    snprintf(v->who, sizeof v->who, "loopback");
    v->how = d->cfg.insecure ? "insecure" : "loopback";
    return v->role;
  }
  const char *hdr =
      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
  if (hdr) {
    v->role = auth_check(d->auth, hdr, strlen(hdr), v->who, sizeof v->who);
    v->how = "token";
    if (v->role == AUTH_NONE)
      *why = "unknown bearer token";
    return v->role;
  }
  const char *cookie =
      MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, COOKIE);
  if (cookie) {
    v->role = session_role(d, cookie, v->who, sizeof v->who);
    v->how = "session";
    if (v->role == AUTH_NONE)
      *why = "the session has expired or its token is no longer valid; "
             "log in again";
    return v->role;
  }
  *why = "a token is needed: send 'Authorization: Bearer TOKEN', or log in "
         "at /explorer/login";
  return AUTH_NONE;
}

/* ---- the login form ---- */

typedef struct post_state {
  char body[LOGIN_MAX + 1];
  size_t len;
  bool over;
} post_state;

void explorer_request_done(void *state) {
  free(state);
}

/* The form field `name` of an urlencoded body, decoded in place into
 * out; false when absent. */
static bool form_field(const char *body, const char *name, char *out,
                       size_t outlen) {
  size_t nl = strlen(name);
  for (const char *p = body; p && *p; p = strchr(p, '&'), p = p ? p + 1 : p) {
    if (strncmp(p, name, nl) || p[nl] != '=')
      continue;
    const char *v = p + nl + 1, *end = strchr(v, '&');
    size_t n = end ? (size_t)(end - v) : strlen(v);
    if (n >= outlen)
      return false;
    memcpy(out, v, n);
    out[n] = '\0';
    for (char *c = out; *c; c++)
      if (*c == '+')
        *c = ' ';
    MHD_http_unescape(out);
    return true;
  }
  return false;
}

/* The form was posted from a page of this server (or by a client that
 * sends no Origin). */
static bool same_origin(struct MHD_Connection *conn) {
  const char *origin =
      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
  const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
  const char *site =
      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-Fetch-Site");
  if (site && strcmp(site, "same-origin") && strcmp(site, "none"))
    return false;
  if (!origin)
    return true;
  char want[320];
  snprintf(want, sizeof want, "http://%s", host ? host : "");
  return !strcmp(origin, want);
}

static int login(daemon_ctx *d, struct MHD_Connection *conn, post_state *ps) {
  if (!d->auth)
    return redirect(conn, "/explorer/", NULL);
  char token[512];
  const char *peer = "?";
  char peer_buf[64];
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  if (ci && ci->client_addr && ci->client_addr->sa_family == AF_INET &&
      inet_ntop(AF_INET,
                &((const struct sockaddr_in *)(const void *)ci->client_addr)
                     ->sin_addr,
                peer_buf, sizeof peer_buf))
    peer = peer_buf;
  if (ps->over || !same_origin(conn) ||
      !form_field(ps->body, "token", token, sizeof token) || !token[0]) {
    OPENSSL_cleanse(ps->body, sizeof ps->body);
    return redirect(conn, "/explorer/login?failed=1", NULL);
  }
  unsigned char h[AUTH_DIGEST_LEN];
  auth_token_digest(token, strlen(token), h);
  OPENSSL_cleanse(token, sizeof token);
  OPENSSL_cleanse(ps->body, sizeof ps->body);
  char who[64] = "";
  auth_role role = auth_check_digest(d->auth, h, who, sizeof who);
  if (role == AUTH_NONE) {
    LOG(LOG_WARN, "explorer: login from %s with an unknown token", peer);
    return redirect(conn, "/explorer/login?failed=1", NULL);
  }
  char digest[65], text[128], mac[65], cookie[400];
  hex_of(h, sizeof h, digest);
  long long expiry = (long long)time(NULL) + SESSION_S;
  snprintf(text, sizeof text, "1.%lld.%s", expiry, digest);
  session_mac(d->explorer, text, mac);
  snprintf(cookie, sizeof cookie,
           COOKIE "=%s.%s; Path=/; Max-Age=%d; HttpOnly; SameSite=Strict", text,
           mac, SESSION_S);
  LOG(LOG_INFO, "explorer: login from %s with token '%s' (role %s)", peer, who,
      auth_role_name(role));
  return redirect(conn, "/explorer/", cookie);
}

/* ---- pages and files ---- */

static const explorer_asset *asset(const char *path) {
  for (int i = 0; i < explorer_nassets; i++)
    if (!strcmp(explorer_assets[i].path, path))
      return &explorer_assets[i];
  return NULL;
}

static int send_asset(struct MHD_Connection *conn, const explorer_asset *a) {
  return respond(conn, MHD_HTTP_OK, a->type, a->data, a->len,
                 MHD_RESPMEM_PERSISTENT, NULL);
}

static int not_allowed_page(daemon_ctx *d, struct MHD_Connection *conn,
                            const char *why) {
  if (d->auth) /* a browser: to the login form */
    return redirect(conn, "/explorer/login", NULL);
  char *text = NULL;
  if (asprintf(&text, "403 forbidden: %s\n", why) < 0)
    return MHD_NO;
  return respond(conn, MHD_HTTP_FORBIDDEN, "text/plain; charset=utf-8", text,
                 strlen(text), MHD_RESPMEM_MUST_FREE, NULL);
}

static int page(daemon_ctx *d, struct MHD_Connection *conn, const char *url) {
  if (!strcmp(url, "/explorer"))
    return redirect(conn, "/explorer/", NULL);
  if (!strcmp(url, "/explorer/login"))
    return d->auth ? send_asset(conn, asset("/explorer/login.html"))
                   : redirect(conn, "/explorer/", NULL);
  const explorer_asset *a =
      asset(!strcmp(url, "/explorer/") ? "/explorer/index.html" : url);
  if (!a) {
    static const char nf[] = "404 not found\n";
    return respond(conn, MHD_HTTP_NOT_FOUND, "text/plain; charset=utf-8", nf,
                   sizeof nf - 1, MHD_RESPMEM_PERSISTENT, NULL);
  }
  /* Scripts, styles and the login page hold no data: anyone may have them.
   * The other pages are for those who may look. */
  if (strstr(a->type, "text/html") && strcmp(a->path, "/explorer/login.html")) {
    viewer v;
    const char *why = NULL;
    if (allow(d, conn, &v, &why) == AUTH_NONE)
      return not_allowed_page(d, conn, why);
  }
  return send_asset(conn, a);
}

/* ---- the API: overview, requests, programs ---- */

static json_t *stage_json(int64_t us) {
  return us < 0 ? json_null() : json_real((double)us / 1000.0);
}

static json_t *request_json(const recent_req *r, bool full) {
  json_t *j = json_pack(
      "{s:I,s:I,s:o,s:o,s:s,s:i,s:o,s:o,s:o,s:o,s:o,s:I}", "seq",
      (json_int_t)r->seq, "at", (json_int_t)r->at_ms, "peer", x_str(r->peer),
      "who", x_str(r->who), "outcome", r->outcome, "status", r->status,
      "total_ms", stage_json(r->total_us), "validate_ms",
      stage_json(r->validate_us), "key_ms", stage_json(r->key_us), "queue_ms",
      stage_json(r->queue_us), "compile_ms", stage_json(r->compile_us), "bytes",
      (json_int_t)r->bytes);
  json_object_set_new(j, "key", r->has_key ? x_key(r->key) : json_null());
  json_object_set_new(j, "error", r->error[0] ? x_str(r->error) : json_null());
  bool missed =
      !strcmp(r->outcome, "compiled") || !strcmp(r->outcome, "joined") ||
      !strncmp(r->outcome, "refused", 7) || !strcmp(r->outcome, "failed");
  json_object_set_new(j, "missed", json_boolean(missed && r->has_key));
  if (full) {
    json_t *st = json_array();
    for (int i = 0; i < r->nstages; i++)
      json_array_append_new(st,
                            json_pack("{s:s,s:o}", "stage", r->stages[i].name,
                                      "ms", stage_json(r->stages[i].micros)));
    json_object_set_new(j, "stages", st);
  }
  return j;
}

static recent_req *req_buf(int n) {
  return calloc((size_t)n, sizeof(recent_req));
}

static json_t *api_requests(daemon_ctx *d, struct MHD_Connection *conn,
                            unsigned *status) {
  int64_t before, limit;
  const char *bad = NULL;
  if (!x_int_arg(conn, "before", 0, 0, INT64_MAX, &before, &bad) ||
      !x_int_arg(conn, "limit", 100, 1, RECENT_CAP, &limit, &bad)) {
    *status = MHD_HTTP_BAD_REQUEST;
    return x_error("bad_request", "query parameter '%s' is out of range", bad);
  }
  recent_req *buf = req_buf((int)limit);
  if (!buf)
    return NULL;
  int n = recent_list(&d->recent, (uint64_t)before, buf, (int)limit);
  json_t *list = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(list, request_json(&buf[i], true));
  json_t *j = json_pack("{s:o,s:I,s:o}", "requests", list, "capacity",
                        (json_int_t)RECENT_CAP, "next_before",
                        n == limit && buf[n - 1].seq > 1
                            ? json_integer((json_int_t)buf[n - 1].seq)
                            : json_null());
  free(buf);
  return j;
}

static json_t *api_request(daemon_ctx *d, const char *rest, unsigned *status) {
  char *end;
  unsigned long long seq = strtoull(rest, &end, 10);
  recent_req r;
  if (end == rest || (*end && strcmp(end, "/explain")) ||
      !recent_get(&d->recent, seq, &r)) {
    *status = MHD_HTTP_NOT_FOUND;
    return x_error("not_found",
                   "no such request among the last %d this daemon answered",
                   RECENT_CAP);
  }
  if (!*end)
    return request_json(&r, true);
  if (!r.has_key) {
    *status = MHD_HTTP_NOT_FOUND;
    return x_error("no_key", "this request ended before its key was known");
  }
  json_t *j = xm_explain(d, r.key, r.has_parts ? r.parts : NULL, status);
  if (j && !json_object_get(j, "error"))
    json_object_set_new(j, "request", request_json(&r, false));
  return j;
}

typedef struct rows_ctx {
  json_t *list;
} rows_ctx;

static int add_row(const cache_info *info, const char *summary, void *arg) {
  rows_ctx *r = arg;
  json_array_append_new(r->list, x_entry(info, summary));
  return 0;
}

static json_t *api_programs(daemon_ctx *d, struct MHD_Connection *conn,
                            unsigned *status) {
  int64_t offset, limit;
  const char *bad = NULL;
  const char *order_name = x_arg(conn, "order");
  int order = order_name ? cache_order_parse(order_name) : CACHE_BY_LAST_USED;
  if (order < 0) {
    *status = MHD_HTTP_BAD_REQUEST;
    return x_error("bad_request",
                   "order must be last_used, created, compile_time, hits or "
                   "size");
  }
  if (!x_int_arg(conn, "offset", 0, 0, INT64_MAX / 2, &offset, &bad) ||
      !x_int_arg(conn, "limit", 50, 1, X_PAGE_MAX, &limit, &bad)) {
    *status = MHD_HTTP_BAD_REQUEST;
    return x_error("bad_request", "query parameter '%s' is out of range", bad);
  }
  cache_conn *cc = daemon_conn(d);
  rows_ctx r = {.list = json_array()};
  cache_error cerr;
  if (!cc || cache_browse(cc, (cache_order)order, offset, (int)limit, add_row,
                          &r, &cerr) != 0) {
    json_decref(r.list);
    *status = MHD_HTTP_SERVICE_UNAVAILABLE;
    return x_error("cache", "the cache cannot be read: %s",
                   cc ? cerr.msg : "no connection");
  }
  cache_stats cs;
  cache_stats_get(d->cache, &cs);
  return json_pack("{s:I,s:I,s:I,s:s,s:o}", "total", (json_int_t)cs.entries,
                   "offset", (json_int_t)offset, "limit", (json_int_t)limit,
                   "order", cache_order_name((cache_order)order), "programs",
                   r.list);
}

#define A(x) ((json_int_t)atomic_load(&d->stats.x))

static json_t *api_overview(daemon_ctx *d, const viewer *v) {
  recent_bucket *b = calloc(RECENT_BUCKETS, sizeof *b);
  if (!b)
    return NULL;
  int nb = recent_series(&d->recent, b);
  json_t *series = json_array();
  for (int i = 0; i < nb; i++)
    json_array_append_new(
        series,
        json_pack("{s:I,s:i,s:i,s:i,s:i,s:i,s:i,s:f}", "t",
                  (json_int_t)b[i].start, "requests", b[i].requests, "hits",
                  b[i].hits, "misses", b[i].misses, "compiles", b[i].compiles,
                  "joins", b[i].joins, "failures", b[i].failures, "compile_ms",
                  (double)b[i].compile_us / 1000.0));
  free(b);
  cache_stats cs;
  cache_stats_get(d->cache, &cs);
  json_int_t hits = A(hits), misses = A(misses);
  json_t *j = json_pack(
      "{s:s,s:s,s:I,s:I,s:{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:o},"
      "s:{s:i,s:o}}",
      "version", DAEMON_VERSION, "build_id", gc_build_id(), "started",
      (json_int_t)d->started_unix, "now", (json_int_t)time(NULL), "requests",
      "total", A(requests), "hits", hits, "memory_hits", A(hot_hits), "l2_hits",
      A(l2_hits), "misses", misses, "joins", A(joins), "compiles", A(compiles),
      "compile_failures", A(compile_failures), "native_failures",
      A(native_failures), "saved_s", (double)A(saved_us) / 1e6, "hit_rate",
      hits + misses ? json_real((double)hits / (double)(hits + misses))
                    : json_null(),
      "series", "bucket_s", RECENT_BUCKET_S, "buckets", series);
  json_object_set_new(j, "queue",
                      json_pack("{s:i,s:i,s:i,s:i,s:I,s:I}", "queued",
                                atomic_load(&d->stats.queued), "running",
                                atomic_load(&d->stats.running), "workers",
                                d->cfg.workers, "max_queue", d->cfg.max_queue,
                                "rejected_busy", A(rejected_busy),
                                "rejected_memory", A(rejected_memory)));
  json_object_set_new(j, "memory",
                      json_pack("{s:I,s:I}", "budget",
                                (json_int_t)d->cfg.memory_budget, "in_use",
                                (json_int_t)gc_budget_used(&d->budget)));
  json_t *cache = json_pack(
      "{s:I,s:I,s:I,s:I,s:I}", "entries", (json_int_t)cs.entries, "bytes",
      (json_int_t)cs.bytes, "raw_bytes", (json_int_t)cs.raw_bytes, "cap",
      (json_int_t)d->cfg.cache_max_bytes, "evictions",
      (json_int_t)(cs.evictions + (uint64_t)A(evicted)));
  cache_conn *cc = daemon_conn(d);
  uint64_t n = 0, stored = 0, raw = 0;
  cache_error cerr;
  if (cc && cache_source_totals(cc, &n, &stored, &raw, &cerr) == 0)
    json_object_set_new(cache, "kept_requests",
                        json_pack("{s:I,s:I,s:I,s:I}", "count", (json_int_t)n,
                                  "bytes", (json_int_t)stored, "raw_bytes",
                                  (json_int_t)raw, "budget",
                                  (json_int_t)d->cfg.explorer_keep_bytes));
  json_object_set_new(j, "cache", cache);
  json_object_set_new(
      j, "cluster",
      json_pack("{s:b,s:b,s:I,s:I,s:I,s:I,s:I}", "configured", d->l2 != NULL,
                "up", d->l2 && l2_up(d->l2), "errors",
                (json_int_t)(d->l2 ? l2_errors(d->l2) : 0), "l2_hits",
                A(l2_hits), "l2_puts", A(l2_puts), "lease_waits",
                A(lease_waits), "lease_takeovers", A(lease_takeovers)));
  rows_ctx r = {.list = json_array()};
  if (cc)
    cache_browse(cc, CACHE_BY_COMPILE_TIME, 0, 10, add_row, &r, &cerr);
  json_object_set_new(j, "slowest", r.list);
  json_object_set_new(j, "viewer",
                      json_pack("{s:o,s:s,s:s}", "who", x_str(v->who), "role",
                                auth_role_name(v->role), "how", v->how));
  json_object_set_new(j, "draining", json_boolean(atomic_load(&d->draining)));
  return j;
}

static int api(daemon_ctx *d, struct MHD_Connection *conn, const char *url) {
  viewer v;
  const char *why = NULL;
  if (allow(d, conn, &v, &why) == AUTH_NONE) {
    const char *extra[] = {"WWW-Authenticate", "Bearer realm=\"compiled\"",
                           NULL};
    bool forbidden = !d->auth;
    return send_json(
        conn, forbidden ? MHD_HTTP_FORBIDDEN : MHD_HTTP_UNAUTHORIZED,
        x_error(forbidden ? "forbidden" : "unauthenticated", "%s", why),
        forbidden ? NULL : extra);
  }
  unsigned status = MHD_HTTP_OK;
  json_t *j;
  const char *rest;
  if (!strcmp(url, "/api/overview")) {
    j = api_overview(d, &v);
  } else if (!strcmp(url, "/api/whoami")) {
    j = json_pack("{s:o,s:s,s:s}", "who", x_str(v.who), "role",
                  auth_role_name(v.role), "how", v.how);
  } else if (!strcmp(url, "/api/requests")) {
    j = api_requests(d, conn, &status);
  } else if (prefix(url, "/api/requests/")) {
    j = api_request(d, url + strlen("/api/requests/"), &status);
  } else if (!strcmp(url, "/api/programs")) {
    j = api_programs(d, conn, &status);
  } else if (prefix(url, "/api/programs/")) {
    rest = url + strlen("/api/programs/");
    char hex[GC_HEX_LEN];
    uint8_t key[GC_DIGEST_LEN];
    size_t n = strcspn(rest, "/");
    snprintf(hex, sizeof hex, "%.*s", (int)(n < GC_HEX_LEN ? n : 0), rest);
    if (n != GC_HEX_LEN - 1 || gc_digest_parse(hex, key) != 0) {
      status = MHD_HTTP_BAD_REQUEST;
      j = x_error("bad_key", "a program's key is 64 hex digits");
    } else {
      j = xp_program(d, conn, key, rest + n, &status);
    }
  } else {
    status = MHD_HTTP_NOT_FOUND;
    j = x_error("not_found", "no such API path; docs/explorer.md lists them");
  }
  return send_json(conn, status, j, NULL);
}

/* ---- the entry point ---- */

int explorer_answer(daemon_ctx *d, struct MHD_Connection *conn, const char *url,
                    const char *method, const char *upload, size_t *upload_len,
                    void **state) {
  if (!d->cfg.explorer || !d->explorer)
    return -1;
  if (strcmp(url, "/explorer") && !prefix(url, "/explorer/") &&
      strcmp(url, "/api") && !prefix(url, "/api/"))
    return -1;
  if (!strcmp(method, "POST") &&
      (!strcmp(url, "/explorer/login") || !strcmp(url, "/explorer/logout"))) {
    post_state *ps = *state;
    if (!ps) { /* the headers: the body follows */
      ps = calloc(1, sizeof *ps);
      if (!ps)
        return MHD_NO;
      *state = ps;
      return MHD_YES;
    }
    if (*upload_len) {
      size_t n = *upload_len;
      if (ps->len + n > LOGIN_MAX)
        ps->over = true;
      else {
        memcpy(ps->body + ps->len, upload, n);
        ps->len += n;
      }
      *upload_len = 0;
      return MHD_YES;
    }
    if (!strcmp(url, "/explorer/logout"))
      return redirect(conn, "/explorer/login",
                      COOKIE "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
    return login(d, conn, ps);
  }
  if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
    static const char body[] = "only GET (and POST to /explorer/login)\n";
    const char *extra[] = {"Allow", "GET, HEAD", NULL};
    return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                   "text/plain; charset=utf-8", body, sizeof body - 1,
                   MHD_RESPMEM_PERSISTENT, extra);
  }
  if (prefix(url, "/api"))
    return api(d, conn, url);
  return page(d, conn, url);
}

/* ---- keeping requests (on the worker) ---- */

bool x_ops_digest(const Compiled__V1__Graph *g, char out[X_OPS_LEN + 1]) {
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  unsigned char ops[32];
  unsigned int olen = 0;
  bool ok = false;
  if (md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1) {
    for (size_t i = 0; g && i < g->n_nodes; i++) {
      const char *t = g->nodes[i]->target ? g->nodes[i]->target : "";
      EVP_DigestUpdate(md, t, strlen(t) + 1);
    }
    if (EVP_DigestFinal_ex(md, ops, &olen) == 1 && olen == sizeof ops) {
      char ops_hex[GC_HEX_LEN];
      gc_digest_hex(ops, ops_hex);
      snprintf(out, X_OPS_LEN + 1, "%.*s", X_OPS_LEN, ops_hex);
      ok = true;
    }
  }
  EVP_MD_CTX_free(md);
  return ok;
}

void explorer_keep(daemon_ctx *d, cache_conn *conn, const uint8_t *key,
                   const Compiled__V1__CompileRequest *req,
                   const gc_compiled *out) {
  if (!req || !conn || !d->cfg.explorer || !d->cfg.explorer_keep_bytes)
    return;
  char hex[GC_HEX_LEN];
  gc_digest_hex(key, hex);
  size_t len = compiled__v1__compile_request__get_packed_size(req);
  if (len > d->cfg.explorer_keep_max) {
    LOG(LOG_INFO,
        "explorer: request of %.16s not kept: %zu bytes, over "
        "--explorer-keep-max",
        hex, len);
    return;
  }
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf)
    return;
  compiled__v1__compile_request__pack(req, buf);
  /* the summary: what a listing shows without unpacking anything */
  const Compiled__V1__GraphModule *gm = req->graph;
  const Compiled__V1__Graph *g = gm ? gm->graph : NULL;
  json_t *s = json_pack("{s:o,s:I,s:I,s:o,s:o}", "client", x_str(req->client),
                        "nodes", (json_int_t)(g ? g->n_nodes : 0), "inputs",
                        (json_int_t)(g ? g->n_inputs : 0), "torch_version",
                        x_str(gm ? gm->torch_version : NULL), "producer",
                        x_str(gm ? gm->producer : NULL));
  /* its operators in order, for miss explanations (explorer_miss.c) */
  char ops[X_OPS_LEN + 1];
  if (x_ops_digest(g, ops))
    json_object_set_new(s, "ops", json_string(ops));
  /* where in the user's code: the first node with a stack trace */
  for (size_t i = 0; g && i < g->n_nodes; i++) {
    const Compiled__V1__NodeMetadata *meta = g->nodes[i]->metadata;
    if (meta && meta->stack_trace && *meta->stack_trace) {
      const char *last = NULL, *user = NULL, *p = meta->stack_trace;
      while ((p = strstr(p, "File \""))) {
        const char *q = strchr(p + 6, '"');
        if (q && !x_library_file(p + 6, (size_t)(q - p - 6)))
          user = p;
        last = p++;
      }
      if (user)
        last = user;
      if (last) {
        const char *f = last + 6, *q = strchr(f, '"');
        long line =
            q ? strtol(q + 1 + strcspn(q + 1, "0123456789"), NULL, 10) : 0;
        if (q && q - f < 512)
          json_object_set_new(s, "where",
                              json_pack("{s:o,s:I}", "file",
                                        x_strn(f, (size_t)(q - f)), "line",
                                        (json_int_t)line));
      }
      break;
    }
  }
  if (out && out->native)
    json_object_set_new(
        s, "native",
        json_pack("{s:i,s:i,s:i,s:i,s:i}", "nodes", out->summary.nodes,
                  "native", out->summary.native, "extern", out->summary.extern_,
                  "fallback", out->summary.fallback, "kernels",
                  out->summary.kernels));
  if (out && out->native_failed)
    json_object_set_new(s, "native_failed",
                        json_string(out->native_failed_stage));
  char *text = json_dumps(s, JSON_COMPACT | JSON_ENSURE_ASCII);
  json_decref(s);
  if (text && strlen(text) > CACHE_SUMMARY_MAX) { /* a long client id */
    free(text);
    text = strdup("{}");
  }
  cache_error cerr;
  int rc = text ? cache_source_put(conn, key, buf, len, text,
                                   d->cfg.explorer_keep_bytes, &cerr)
                : CACHE_ENOMEM;
  if (rc && rc != CACHE_EMISS)
    LOG(LOG_WARN, "explorer: keeping the request of %.16s failed: %s", hex,
        text ? cerr.msg : "out of memory");
  free(text);
  free(buf);
}

/* ---- set up ---- */

int explorer_init(daemon_ctx *d) {
  recent_init(&d->recent);
  explorer *x = calloc(1, sizeof *x);
  if (!x || RAND_bytes(x->secret, sizeof x->secret) != 1) {
    free(x);
    return -1;
  }
  pthread_mutex_init(&x->mu, NULL);
  monocond_init(&x->done);
  d->explorer = x;
  return 0;
}

void explorer_cleanup(daemon_ctx *d) {
  explorer *x = d->explorer;
  if (x) {
    xp_cleanup(x);
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->done);
    OPENSSL_cleanse(x->secret, sizeof x->secret);
    free(x);
  }
  d->explorer = NULL;
  recent_destroy(&d->recent);
}
