/*
 * net.c: what the compilectl commands that talk to a daemon share: the
 * server address, status codes to exit codes, error messages, parsing of
 * times and sizes, human formats, JSON output, key prefixes and fetching an
 * artifact in chunks.
 */
#include "client/ctl/ctl.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "client/lib/pbjson.h"

/* The largest artifact fetch accepts (the server's total_size is checked
 * against it before anything is allocated). */
#define CTL_MAX_ARTIFACT ((uint64_t)4 << 30)

const char *ctl_server = CTL_DEFAULT_SERVER;
const char *ctl_token = NULL;
const char *ctl_ca = NULL, *ctl_cert = NULL, *ctl_key = NULL;

rpc_client *ctl_connect(void) {
  char err[1200] = "out of memory";
  rpc_client *c =
      rpc_connect_tls(ctl_server, ctl_ca, ctl_cert, ctl_key, err, sizeof err);
  if (!c || rpc_set_token(c, ctl_token) != 0) {
    rpc_close(c);
    ctl_errorf("%s", err);
    return NULL;
  }
  return c;
}

/* The exit code of a status, whatever the command. */
static int status_exit(const rpc_status *st) {
  switch (st->code) {
  case GRPC_STATUS_OK:
    return CTL_OK;
  case GRPC_STATUS_INVALID_ARGUMENT:
  case GRPC_STATUS_FAILED_PRECONDITION:
    return CTL_EGRAPH;
  case GRPC_STATUS_UNIMPLEMENTED:
    /* A graph the compiler cannot handle comes with a GraphError; without
     * one it is a server that lacks the method (an older daemon). */
    return st->graph_error ? CTL_EGRAPH : CTL_ESERVER;

  case GRPC_STATUS_UNAVAILABLE:
    return CTL_EUNREACHABLE;
  case GRPC_STATUS_DEADLINE_EXCEEDED:
    return st->messages ? CTL_ESERVER : CTL_EUNREACHABLE;
  case GRPC_STATUS_NOT_FOUND:
    return CTL_ENOTFOUND;
  case GRPC_STATUS_UNAUTHENTICATED:
  case GRPC_STATUS_PERMISSION_DENIED:
    return CTL_EDENIED;
  default:
    /* A compile that failed comes with a GraphError whatever its code. */
    return st->graph_error ? CTL_EGRAPH : CTL_ESERVER;
  }
}

int ctl_status_exit(const rpc_status *st) {
  int rc = status_exit(st);
  /* A status that means nothing for this command (INVALID_ARGUMENT for
   * stats, which sends no graph; NOT_FOUND for submit -o, whose artifact
   * the server had just announced) is the server failing. */
  if (ctl_cmd && !(ctl_cmd->exits & CTL_BIT(rc)))
    rc = CTL_ESERVER;
  return rc;
}

/* ---- a plain client at a TLS port ---- */

/* The host and port of a gRPC target: "host:port", "[v6]:port", with
 * "dns:///", "dns:", "ipv4:" or "ipv6:" in front or not. 0, or -1 for
 * anything else (unix: sockets, several addresses). */
static int target_host_port(const char *target, char *host, size_t hn,
                            char *port, size_t pn) {
  static const char *const schemes[] = {"dns:///", "dns:", "ipv4:", "ipv6:"};
  for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
    if (strncmp(target, schemes[i], strlen(schemes[i])) == 0) {
      target += strlen(schemes[i]);
      break;
    }
  const char *colon = strrchr(target, ':');
  if (!colon || strchr(target, ',') || !colon[1] ||
      strspn(colon + 1, "0123456789") != strlen(colon + 1))
    return -1;
  const char *h = target;
  size_t len = (size_t)(colon - target);
  if (h[0] == '[' && len >= 2 && h[len - 1] == ']') {
    h++;
    len -= 2;
  }
  if (len == 0 || len >= hn || strlen(colon + 1) >= pn)
    return -1;
  snprintf(host, hn, "%.*s", (int)len, h);
  snprintf(port, pn, "%s", colon + 1);
  return 0;
}

/* OpenSSL's message callback: notes a handshake message or an alert from
 * the server, which only a TLS server sends. */
static void note_tls_record(int write_p, int version, int content_type,
                            const void *buf, size_t len, SSL *ssl, void *arg) {
  (void)version;
  (void)buf;
  (void)len;
  (void)ssl;
  if (!write_p &&
      (content_type == SSL3_RT_HANDSHAKE || content_type == SSL3_RT_ALERT))
    *(bool *)arg = true;
}

/* Whether the server at `target` answers a TLS handshake (in timeout_ms
 * to connect and as long for each read or write). Its certificate is not
 * checked: the question is only whether it speaks TLS, as a daemon with
 * --tls-cert does, which resets a plain client's connection. */
static bool speaks_tls(const char *target, int timeout_ms) {
  char host[256], port[16];
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  if (target_host_port(target, host, sizeof host, port, sizeof port) != 0 ||
      getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
    return false;
  bool seen = false;
  /* the server may reset the connection while OpenSSL writes */
  struct sigaction ign = {.sa_handler = SIG_IGN}, old;
  sigaction(SIGPIPE, &ign, &old);
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  SSL_CTX *ctx = NULL;
  SSL *ssl = NULL;
  if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0 &&
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0 &&
      connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
      (ctx = SSL_CTX_new(TLS_client_method())) && (ssl = SSL_new(ctx)) &&
      SSL_set_fd(ssl, fd) == 1) {
    unsigned char ip[16];
    if (inet_pton(AF_INET, host, ip) != 1 && inet_pton(AF_INET6, host, ip) != 1)
      SSL_set_tlsext_host_name(ssl, host);
    static const unsigned char h2[] = {2, 'h', '2'};
    SSL_set_alpn_protos(ssl, h2, sizeof h2);
    SSL_set_msg_callback(ssl, note_tls_record);
    SSL_set_msg_callback_arg(ssl, &seen);
    SSL_connect(ssl); /* refused (a mutual-TLS daemon) or not: seen says */
  }
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  ERR_clear_error();
  if (fd >= 0)
    close(fd);
  sigaction(SIGPIPE, &old, NULL);
  freeaddrinfo(ai);
  return seen;
}

int ctl_rpc_error(const char *what, const rpc_status *st) {
  const Compiled__V1__GraphError *ge = st->graph_error;
  bool plain = !(ctl_ca && *ctl_ca) && !(ctl_cert && *ctl_cert);
  if (ge && ge->message && *ge->message)
    ctl_errorf("%s: %s", what, ge->message);
  else if (st->code == GRPC_STATUS_UNAVAILABLE) {
    ctl_errorf("%s: cannot reach the server at %s (%s)", what, ctl_server,
               st->details);
    if (plain && speaks_tls(ctl_server, 2000))
      ctl_errorf("%s: the server at %s expects TLS, and this client spoke "
                 "plain gRPC: give the CA of its certificate with --ca FILE "
                 "(or $COMPILED_CA)",
                 what, ctl_server);
  } else if (st->code == GRPC_STATUS_DEADLINE_EXCEEDED)
    ctl_errorf("%s: %s at %s within the timeout (see --timeout)", what,
               st->messages ? "no complete answer" : "no answer", ctl_server);
  else
    ctl_errorf("%s: %s (%s)", what, *st->details ? st->details : "failed",
               rpc_code_name(st->code));
  return ctl_status_exit(st);
}

/* ---- parsing ---- */

int ctl_parse_timeout(const char *opt, const char *s, int64_t *ms) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v <= 0 || v > 1e7) {
    ctl_errorf("%s wants a positive number of seconds, got '%s'", opt, s);
    return -1;
  }
  *ms = (int64_t)ceil(v * 1000);
  return 0;
}

int ctl_parse_size(const char *opt, const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  int shift = 0;
  if (*end == 'K' || *end == 'k')
    shift = 10;
  else if (*end == 'M' || *end == 'm')
    shift = 20;
  else if (*end == 'G' || *end == 'g')
    shift = 30;
  if (shift)
    end++;
  if (*end == 'i' && shift)
    end++;
  if (*end == 'B' || *end == 'b')
    end++;
  if (errno || end == s || *end || s[0] == '-' || v > (UINT64_MAX >> shift)) {
    ctl_errorf("%s wants a size such as 4096, 512K, 16M or 1G, got '%s'", opt,
               s);
    return -1;
  }
  *out = (uint64_t)v << shift;
  return 0;
}

/* Seconds per unit letter, or 0 for an unknown unit. */
static int64_t unit_seconds(char u) {
  switch (u) {
  case 's':
    return 1;
  case 'm':
    return 60;
  case 'h':
    return 3600;
  case 'd':
    return 86400;
  case 'w':
    return 7 * 86400;
  default:
    return 0;
  }
}

int ctl_parse_duration(const char *opt, const char *s, int64_t *seconds) {
  int64_t total = 0;
  const char *p = s;
  bool ok = *p != '\0';
  while (ok && *p) {
    if (!isdigit((unsigned char)*p)) {
      ok = false;
      break;
    }
    char *end;
    errno = 0;
    long long n = strtoll(p, &end, 10);
    int64_t unit = *end ? unit_seconds(*end) : 1;
    if (errno || unit == 0 || n > INT64_MAX / unit / 2 ||
        total > INT64_MAX / 2) {
      ok = false;
      break;
    }
    total += n * unit;
    p = *end ? end + 1 : end;
  }
  if (!ok) {
    ctl_errorf("%s wants a duration such as 90s, 30m, 12h, 7d or 1h30m, got "
               "'%s'",
               opt, s);
    return -1;
  }
  *seconds = total;
  return 0;
}

/* ---- human formats ---- */

char *ctl_fmt_bytes(uint64_t n, char *buf, size_t len) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (n < 1024) {
    snprintf(buf, len, "%" PRIu64 " B", n);
    return buf;
  }
  double v = (double)n / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    u++;
  }
  snprintf(buf, len, v < 10 ? "%.2f %s" : "%.1f %s", v, units[u]);
  return buf;
}

char *ctl_fmt_seconds(int64_t s, char *buf, size_t len) {
  if (s < 60)
    snprintf(buf, len, "%" PRId64 "s", s);
  else if (s < 3600)
    snprintf(buf, len, "%" PRId64 "m %" PRId64 "s", s / 60, s % 60);
  else if (s < 86400)
    snprintf(buf, len, "%" PRId64 "h %" PRId64 "m", s / 3600, s % 3600 / 60);
  else
    snprintf(buf, len, "%" PRId64 "d %" PRId64 "h", s / 86400,
             s % 86400 / 3600);
  return buf;
}

char *ctl_fmt_micros(int64_t us, char *buf, size_t len) {
  if (us < 0)
    snprintf(buf, len, "-");
  else if (us < 1000)
    snprintf(buf, len, "%" PRId64 " us", us);
  else if (us < 10000)
    snprintf(buf, len, "%.2f ms", (double)us / 1e3);
  else if (us < 1000000)
    snprintf(buf, len, "%.1f ms", (double)us / 1e3);
  else if (us < 60000000)
    snprintf(buf, len, "%.2f s", (double)us / 1e6);
  else
    ctl_fmt_seconds(us / 1000000, buf, len);
  return buf;
}

char *ctl_fmt_ago(int64_t unix_seconds, char *buf, size_t len) {
  if (unix_seconds <= 0) {
    snprintf(buf, len, "never");
    return buf;
  }
  int64_t d = (int64_t)time(NULL) - unix_seconds;
  if (d < 0)
    d = 0;
  char t[32];
  if (d < 60)
    snprintf(buf, len, "%" PRId64 "s ago", d);
  else
    snprintf(buf, len, "%s ago", ctl_fmt_seconds(d, t, sizeof t));
  return buf;
}

char *ctl_fmt_label(const Compiled__V1__Label *l, char *buf, size_t len) {
  const char *name = l && l->name ? l->name : "";
  const char *file = l && l->file ? l->file : "";
  const char *host = l && l->host ? l->host : "";
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  size_t used = 0;
  buf[0] = '\0';
#define ADD(...)                                                               \
  do {                                                                         \
    if (used < len)                                                            \
      used += (size_t)snprintf(buf + used, len - used, __VA_ARGS__);           \
  } while (0)
  if (*name)
    ADD("%s", name);
  if (*base)
    ADD("%s%s", used ? " at " : "", base);
  if (*base && l->line > 0)
    ADD(":%d", (int)l->line);
  if (*host)
    ADD("%son %s", used ? " " : "", host);
#undef ADD
  if (!buf[0])
    snprintf(buf, len, "-");
  return buf;
}

/* ---- JSON, digests ---- */

/* Every field is written, zeros included, so scripts can rely on the keys. */
int ctl_print_json(const ProtobufCMessage *m) {
  char err[512];
  json_t *j = pbjson_encode_flags(m, PBJSON_WITH_DEFAULTS, err, sizeof err);
  if (!j) {
    ctl_errorf("%s", err);
    return CTL_EIO;
  }
  char *text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(j);
  if (!text) {
    ctl_errorf("out of memory");
    return CTL_EIO;
  }
  puts(text);
  fflush(stdout);
  free(text);
  return CTL_OK;
}

int64_t ctl_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void ctl_sha256_hex(const void *data, size_t len, char out[65]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
  for (unsigned int i = 0; i < n && i < 32; i++)
    snprintf(out + 2 * i, 3, "%02x", md[i]);
  out[64] = '\0';
}

/* ---- keys ---- */

/* Matches entries of a List response against a prefix. */
static int match_prefix(const Compiled__V1__ListResponse *lr, const char *pfx,
                        char out[65]) {
  size_t n = strlen(pfx);
  int matches = 0;
  for (size_t i = 0; i < lr->n_entries; i++) {
    const char *k = lr->entries[i]->key;
    if (k && strncmp(k, pfx, n) == 0 && strlen(k) == 64) {
      if (matches++ == 0)
        memcpy(out, k, 65);
    }
  }
  return matches;
}

int ctl_resolve_key(rpc_client *c, const char *arg, int64_t timeout_ms,
                    char out[65]) {
  size_t n = strlen(arg);
  char pfx[65];
  for (size_t i = 0; i < n && i < 64; i++)
    pfx[i] = (char)tolower((unsigned char)arg[i]);
  bool hex = n > 0 && n <= 64 && strspn(arg, "0123456789abcdefABCDEF") == n;
  if (!hex || n < 4) {
    ctl_errorf("a key is 64 hex digits (or a unique prefix of at least 4), "
               "got '%s'",
               arg);
    return CTL_EUSAGE;
  }
  pfx[n] = '\0';
  if (n == 64) {
    memcpy(out, pfx, 65);
    return CTL_OK;
  }
  /* The protocol has no prefix search: look through the entry list (the
   * most recently used 100000, the most List returns). */
  Compiled__V1__ListRequest req = COMPILED__V1__LIST_REQUEST__INIT;
  req.limit = 100000;
  ProtobufCMessage *resp;
  rpc_status st;
  rpc_status_init(&st);
  if (rpc_unary(c, "/compiled.v1.Compiler/List", &req.base,
                &compiled__v1__list_response__descriptor, &resp, timeout_ms,
                &st) != 0) {
    int rc = ctl_rpc_error("list", &st);
    rpc_status_clear(&st);
    return rc;
  }
  rpc_status_clear(&st);
  int matches = match_prefix((Compiled__V1__ListResponse *)resp, pfx, out);
  protobuf_c_message_free_unpacked(resp, NULL);
  if (matches == 0) {
    ctl_errorf("%s: no cached entry has a key starting with it", arg);
    return CTL_ENOTFOUND;
  }
  if (matches > 1) {
    ctl_errorf("%s: ambiguous, %d cached keys start with it", arg, matches);
    return CTL_EUSAGE;
  }
  return CTL_OK;
}

/* ---- fetching ---- */

/* An artifact being reassembled from chunks. */
typedef struct reassembly {
  uint8_t *data;
  uint64_t total, got;
  char digest[65];
  int chunks;
  const char *bad; /* why the chunks do not add up, or NULL */
  bool oom;        /* bad because memory ran out */
} reassembly;

/* Adds one chunk; sets r->bad and returns false when it does not fit. */
static bool add_chunk(reassembly *r, const Compiled__V1__FetchChunk *ch) {
  if (r->chunks++ == 0) {
    r->total = ch->total_size;
    if (r->total > CTL_MAX_ARTIFACT) {
      r->bad = "the artifact is larger than 4 GiB";
      return false;
    }
    snprintf(r->digest, sizeof r->digest, "%s", ch->digest ? ch->digest : "");
    r->data = malloc(r->total ? r->total : 1);
    if (!r->data) {
      r->bad = "out of memory";
      r->oom = true;
      return false;
    }
  }
  if (ch->total_size != r->total || ch->offset != r->got ||
      ch->data.len > r->total - r->got) {
    r->bad = "the server's chunks do not add up (offsets or sizes)";
    return false;
  }
  memcpy(r->data + r->got, ch->data.data, ch->data.len);
  r->got += ch->data.len;
  return true;
}

/* Checks a complete reassembly. Returns CTL_OK or an exit code after
 * printing why. */
static int check_reassembly(const char *key, reassembly *r) {
  if (r->bad) {
    ctl_errorf("fetch %.16s: %s", key, r->bad);
    return r->oom ? CTL_EIO : CTL_ESERVER;
  }
  if (r->chunks == 0 || r->got != r->total) {
    ctl_errorf("fetch %.16s: the artifact arrived incomplete (%" PRIu64
               " of %" PRIu64 " bytes)",
               key, r->got, r->total);
    return CTL_ESERVER;
  }
  char have[65];
  ctl_sha256_hex(r->data, (size_t)r->total, have);
  if (strcasecmp(have, r->digest) != 0) {
    ctl_errorf("fetch %.16s: digest mismatch: the server says %s, the bytes "
               "hash to %s",
               key, *r->digest ? r->digest : "(none)", have);
    return CTL_ESERVER;
  }
  return CTL_OK;
}

int ctl_fetch_artifact(rpc_client *c, const char *key, int64_t timeout_ms,
                       uint8_t **data, size_t *len, char *digest) {
  Compiled__V1__FetchRequest req = COMPILED__V1__FETCH_REQUEST__INIT;
  req.key = (char *)key;
  rpc_stream *s =
      rpc_stream_start(c, "/compiled.v1.Compiler/Fetch", &req.base,
                       &compiled__v1__fetch_chunk__descriptor, timeout_ms);
  if (!s) {
    ctl_errorf("out of memory");
    return CTL_EIO;
  }
  reassembly r = {0};
  ProtobufCMessage *m;
  while (rpc_stream_next(s, &m) == 1) {
    bool ok = add_chunk(&r, (Compiled__V1__FetchChunk *)m);
    protobuf_c_message_free_unpacked(m, NULL);
    if (!ok)
      break;
  }
  rpc_status st;
  rpc_status_init(&st);
  int rc = CTL_OK;
  if (rpc_stream_finish(s, &st) != 0 && !r.bad) {
    char what[96];
    snprintf(what, sizeof what, "fetch %.16s", key);
    if (st.code == GRPC_STATUS_NOT_FOUND) {
      ctl_errorf("%s: %s", key, st.details);
      rc = ctl_status_exit(&st);
    } else {
      rc = ctl_rpc_error(what, &st);
    }
  }
  rpc_status_clear(&st);
  if (rc == CTL_OK)
    rc = check_reassembly(key, &r);
  if (rc != CTL_OK) {
    free(r.data);
    return rc;
  }
  *data = r.data;
  *len = (size_t)r.total;
  if (digest)
    memcpy(digest, r.digest, 65);
  return CTL_OK;
}
