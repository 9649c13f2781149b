/*
 * tls.c: the TLS bridge. See tls.h.
 */
#include "daemon/tls.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/x509v3.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "daemon/log.h"

#define HANDSHAKE_MS 10000
#define BUF 16384

struct tls_server {
  SSL_CTX *ctx;
  int handshake_ms; /* the whole handshake */
  int stall_ms;     /* a send to the peer without progress; 0: no limit */
};

static void ssl_message(const char *what, const char *file, char *err,
                        size_t errlen) {
  unsigned long e = ERR_get_error();
  char why[256] = "unknown error";
  if (e)
    ERR_error_string_n(e, why, sizeof why);
  ERR_clear_error();
  snprintf(err, errlen, "%s %s: %s", what, file, why);
}

/* ALPN: gRPC speaks HTTP/2 only. */
static int select_h2(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                     const unsigned char *in, unsigned int inlen, void *arg) {
  (void)ssl;
  (void)arg;
  for (unsigned i = 0; i < inlen; i += 1u + in[i])
    if (in[i] == 2 && i + 3 <= inlen && !memcmp(in + i + 1, "h2", 2)) {
      *out = in + i + 1;
      *outlen = 2;
      return SSL_TLSEXT_ERR_OK;
    }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

tls_server *tls_new(const char *cert, const char *key, const char *client_ca,
                    char *err, size_t errlen) {
  tls_server *t = calloc(1, sizeof *t);
  if (!t || !(t->ctx = SSL_CTX_new(TLS_server_method()))) {
    snprintf(err, errlen, "TLS: out of memory");
    free(t);
    return NULL;
  }
  t->handshake_ms = HANDSHAKE_MS;
  SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
  /* SSL_read returns after a record with no data (a session ticket, a key
   * update) instead of blocking for the next: the pump must go back to
   * poll, or the other direction stalls */
  SSL_CTX_clear_mode(t->ctx, SSL_MODE_AUTO_RETRY);
  SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE); /* see pump */
  SSL_CTX_set_alpn_select_cb(t->ctx, select_h2, NULL);
  if (SSL_CTX_use_certificate_chain_file(t->ctx, cert) != 1) {
    ssl_message("--tls-cert", cert, err, errlen);
    goto fail;
  }
  if (SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1) {
    ssl_message("--tls-key", key, err, errlen);
    goto fail;
  }
  if (SSL_CTX_check_private_key(t->ctx) != 1) {
    ssl_message("--tls-key", key, err, errlen);
    goto fail;
  }
  if (client_ca && *client_ca) {
    if (SSL_CTX_load_verify_locations(t->ctx, client_ca, NULL) != 1) {
      ssl_message("--tls-client-ca", client_ca, err, errlen);
      goto fail;
    }
    SSL_CTX_set_verify(t->ctx,
                       SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
  }
  return t;
fail:
  tls_free(t);
  return NULL;
}

void tls_set_limits(tls_server *t, int handshake_ms, int stall_ms) {
  t->handshake_ms = handshake_ms > 0 ? handshake_ms : HANDSHAKE_MS;
  t->stall_ms = stall_ms > 0 ? stall_ms : 0;
}

void tls_free(tls_server *t) {
  if (!t)
    return;
  SSL_CTX_free(t->ctx);
  free(t);
}

typedef struct bridge {
  SSL_CTX *ctx;
  int tcp, plain;
  int handshake_ms, stall_ms;
} bridge;

static void set_blocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0)
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

static void set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0)
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until `fd` has `events` or `deadline` (now_ms) passes; 1 when it
 * has them, 0 at the deadline, -1 on error. */
static int wait_until(int fd, short events, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - now_ms();
    if (left <= 0)
      return 0;
    struct pollfd p = {fd, events, 0};
    int rc = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
    if (rc > 0)
      return 1;
    if (rc < 0 && errno != EINTR)
      return -1;
  }
}

/* The server's handshake on non-blocking `fd`, all of it within
 * timeout_ms: a socket timeout would restart at every byte, so a peer
 * sending one byte every few seconds held its connection (and a slot of
 * the connection cap) for as long as it liked. 1 when done; 0 when it
 * failed or ran out of time (*timed_out says which). */
static int accept_within(SSL *ssl, int fd, int timeout_ms, bool *timed_out) {
  int64_t deadline = now_ms() + timeout_ms;
  *timed_out = false;
  for (;;) {
    int rc = SSL_accept(ssl);
    if (rc == 1)
      return 1;
    int e = SSL_get_error(ssl, rc);
    short want = e == SSL_ERROR_WANT_READ    ? POLLIN
                 : e == SSL_ERROR_WANT_WRITE ? POLLOUT
                                             : 0;
    if (!want)
      return 0;
    int w = wait_until(fd, want, deadline);
    if (w <= 0) {
      *timed_out = w == 0;
      return 0;
    }
  }
}

static void set_timeout(int fd, int seconds) {
  struct timeval tv = {seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static bool write_all(int fd, const unsigned char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* After an SSL_read or SSL_write that returned `ret` <= 0: whether the
 * connection is still good and only waits for tcp, noting in *want_tcp_out
 * when it waits to write to it. */
static bool ssl_waits(SSL *ssl, int ret, bool *want_tcp_out) {
  int e = SSL_get_error(ssl, ret);
  if (e == SSL_ERROR_WANT_WRITE)
    *want_tcp_out = true;
  return e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ;
}

/* Copies between the TLS connection on non-blocking `tcp` and the plain
 * socket (blocking; read only when poll says so) until either side ends,
 * or until bytes for the peer have waited stall_ms (0: no limit) without
 * any of them being taken: a peer that stops reading would otherwise hold
 * the bridge (and its connection slot) for good, whatever the core does
 * on its side. Partial writes (SSL_MODE_ENABLE_PARTIAL_WRITE) make every
 * byte taken count as progress. */
static void pump(SSL *ssl, int tcp, int plain, int stall_ms) {
  unsigned char *in = malloc(BUF), *out = malloc(BUF);
  size_t out_off = 0, out_len = 0; /* from plain, not yet sent */
  int64_t waiting_since = 0;       /* when out last made progress */
  bool want_tcp_out;               /* SSL waits to write to tcp */
  if (!in || !out)
    goto done;
  for (;;) {
    /* to the peer: what plain gave, as far as it goes */
    want_tcp_out = false;
    while (out_len > out_off) {
      int w = SSL_write(ssl, out + out_off, (int)(out_len - out_off));
      if (w > 0) {
        out_off += (size_t)w;
        waiting_since = now_ms();
        continue;
      }
      if (!ssl_waits(ssl, w, &want_tcp_out))
        goto done;
      break;
    }
    if (out_off == out_len)
      out_off = out_len = 0;
    /* from the peer: every record already here */
    for (;;) {
      int n = SSL_read(ssl, in, BUF);
      if (n > 0) {
        if (!write_all(plain, in, (size_t)n))
          goto done;
        continue;
      }
      if (!ssl_waits(ssl, n, &want_tcp_out))
        goto done;
      break;
    }
    /* plain is read only once what it gave is sent (back-pressure), and
     * left out of poll till then (its hang-up would wake poll at once) */
    struct pollfd p[2] = {
        {tcp, (short)(POLLIN | (want_tcp_out ? POLLOUT : 0)), 0},
        {out_len ? -1 : plain, POLLIN, 0}};
    int timeout = -1;
    if (out_len && stall_ms > 0) {
      int64_t left = waiting_since + stall_ms - now_ms();
      if (left <= 0) {
        LOG(LOG_DEBUG, "TLS peer took no bytes for %d ms; connection closed",
            stall_ms);
        goto done;
      }
      timeout = left > INT32_MAX ? INT32_MAX : (int)left;
    }
    if (poll(p, 2, timeout) < 0 && errno != EINTR)
      goto done;
    if (!out_len && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t n = read(plain, out, BUF);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        goto done;
      out_off = 0;
      out_len = (size_t)n;
      waiting_since = now_ms();
    }
  }
done:
  free(in);
  free(out);
}

/* Whether a connection whose handshake failed was a plain HTTP/2 client:
 * the rest of its preface ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"; OpenSSL
 * read the first bytes as a record header) is still unread. */
static bool plain_http2(int fd) {
  static const char tail[] = "HTTP/2.0\r\n\r\nSM\r\n\r\n";
  char buf[32];
  ssize_t n = recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  for (ssize_t i = 0; i + (ssize_t)sizeof tail - 1 <= n; i++)
    if (memcmp(buf + i, tail, sizeof tail - 1) == 0)
      return true;
  return false;
}

/* Says, at most once a minute, that a plain client came to the TLS port
 * (its own error only says the connection was reset). */
static void warn_plain(int fd) {
  static _Atomic int64_t last_s;
  int64_t now = (int64_t)time(NULL), last = atomic_load(&last_s);
  struct sockaddr_storage sa;
  socklen_t len = sizeof sa;
  char host[INET6_ADDRSTRLEN] = "?", port[8] = "?";
  if (getpeername(fd, (struct sockaddr *)&sa, &len) == 0)
    getnameinfo((struct sockaddr *)&sa, len, host, sizeof host, port,
                sizeof port, NI_NUMERICHOST | NI_NUMERICSERV);
  if (now - last < 60 || !atomic_compare_exchange_strong(&last_s, &last, now)) {
    LOG(LOG_DEBUG, "TLS: a plain gRPC client at %s:%s; closed", host, port);
    return;
  }
  LOG(LOG_WARN,
      "TLS: a plain gRPC client at %s:%s (HTTP/2 without TLS): this port "
      "speaks TLS only; clients need the CA of --tls-cert (compilectl --ca, "
      "$COMPILED_CA, compiled.Client(ca=...)); said at most once a minute",
      host, port);
}

static void *run_bridge(void *arg) {
  bridge *b = arg;
  set_nonblocking(b->tcp);
  set_blocking(b->plain);
  SSL *ssl = SSL_new(b->ctx);
  bool timed_out;
  if (ssl && SSL_set_fd(ssl, b->tcp) == 1) {
    if (accept_within(ssl, b->tcp, b->handshake_ms, &timed_out)) {
      pump(ssl, b->tcp, b->plain, b->stall_ms);
      SSL_shutdown(ssl);
    } else if (timed_out) {
      LOG(LOG_DEBUG, "TLS handshake not done within %d ms; connection closed",
          b->handshake_ms);
    } else {
      char why[256] = "handshake failed";
      unsigned long e = ERR_get_error();
      if (e)
        ERR_error_string_n(e, why, sizeof why);
      if (plain_http2(b->tcp))
        warn_plain(b->tcp);
      else
        LOG(LOG_DEBUG, "TLS handshake refused: %s", why);
    }
  }
  ERR_clear_error();
  SSL_free(ssl);
  close(b->plain);
  close(b->tcp);
  free(b);
  return NULL;
}

/* Starts fn(b) on a detached thread with a small stack; 0 or -1. */
static int start_thread(void *(*fn)(void *), void *b) {
  pthread_attr_t at;
  pthread_t th;
  if (pthread_attr_init(&at) != 0)
    return -1;
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&at, 256 << 10);
  int rc = pthread_create(&th, &at, fn, b) == 0 ? 0 : -1;
  pthread_attr_destroy(&at);
  return rc;
}

int tls_bridge(tls_server *t, int tcp_fd, int plain_fd) {
  bridge *b = malloc(sizeof *b);
  int rc = -1;
  if (b) {
    b->ctx = t->ctx;
    b->tcp = tcp_fd;
    b->plain = plain_fd;
    b->handshake_ms = t->handshake_ms;
    b->stall_ms = t->stall_ms;
    rc = start_thread(run_bridge, b);
  }
  if (rc) {
    free(b);
    close(tcp_fd);
    close(plain_fd);
    LOG(LOG_WARN, "TLS: no thread for a new connection; closed it");
  }
  return rc;
}

/* A TCP connection to host:port within timeout_ms (blocking once made). */
static int tcp_connect(const char *host, int port, int timeout_ms, char *err,
                       size_t errlen) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  int g = getaddrinfo(host, ps, &hints, &ai);
  if (g != 0 || !ai) {
    snprintf(err, errlen, "%s: %s", host, gai_strerror(g));
    return -1;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int rc = fd < 0 ? -1 : connect(fd, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  if (rc != 0 && fd >= 0 && errno == EINPROGRESS) {
    struct pollfd p = {fd, POLLOUT, 0};
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (poll(&p, 1, timeout_ms) == 1 &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && !soerr)
      rc = 0;
    else
      errno = soerr ? soerr : ETIMEDOUT;
  }
  if (rc != 0) {
    snprintf(err, errlen, "connecting to %s:%d: %s", host, port,
             strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  set_blocking(fd);
  return fd;
}

/* A client connection: set up and run on a thread of its own (OpenSSL
 * keeps per-thread state, freed when a thread exits normally, which the
 * compile workers asking for connections never do), while the asking
 * thread waits for the handshake's outcome. */
typedef struct client_bridge {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int state; /* 0: connecting; 1: bridged; -1: failed */
  int refs;  /* the thread and the asker */
  char err[1024];
  char host[256], ca[1024];
  int port, timeout_ms, plain;
} client_bridge;

static void client_unref(client_bridge *cb) {
  pthread_mutex_lock(&cb->mu);
  int left = --cb->refs;
  pthread_mutex_unlock(&cb->mu);
  if (left)
    return;
  pthread_mutex_destroy(&cb->mu);
  pthread_cond_destroy(&cb->cv);
  free(cb);
}

static void client_done(client_bridge *cb, int state, const char *fail) {
  pthread_mutex_lock(&cb->mu);
  cb->state = state;
  if (fail) {
    char why[256] = "";
    unsigned long e = ERR_get_error();
    if (e)
      ERR_error_string_n(e, why, sizeof why);
    snprintf(cb->err, sizeof cb->err, "%s:%d: %s%s%s", cb->host, cb->port, fail,
             why[0] ? ": " : "", why);
  }
  pthread_cond_signal(&cb->cv);
  pthread_mutex_unlock(&cb->mu);
}

static void *run_client(void *arg) {
  client_bridge *cb = arg;
  char err[400];
  SSL_CTX *ctx = NULL;
  SSL *ssl = NULL;
  int tcp = tcp_connect(cb->host, cb->port, cb->timeout_ms, err, sizeof err);
  const char *fail = tcp < 0 ? err : "out of memory";
  if (tcp < 0 || !(ctx = SSL_CTX_new(TLS_client_method())))
    goto out;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_clear_mode(ctx, SSL_MODE_AUTO_RETRY); /* see tls_new */
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  if (cb->ca[0] ? SSL_CTX_load_verify_locations(ctx, cb->ca, NULL) != 1
                : SSL_CTX_set_default_verify_paths(ctx) != 1) {
    fail = "cannot load the CA";
    goto out;
  }
  if (!(ssl = SSL_new(ctx)) || SSL_set_fd(ssl, tcp) != 1)
    goto out;
  unsigned char ip[16];
  if (inet_pton(AF_INET, cb->host, ip) == 1 ||
      inet_pton(AF_INET6, cb->host, ip) == 1) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), cb->host);
  } else {
    SSL_set1_host(ssl, cb->host);
    SSL_set_tlsext_host_name(ssl, cb->host);
  }
  set_timeout(tcp, (cb->timeout_ms + 999) / 1000);
  if (SSL_connect(ssl) != 1) {
    fail = "TLS handshake failed";
    goto out;
  }
  set_timeout(tcp, 0);
  set_nonblocking(tcp); /* pump's way */
  client_done(cb, 1, NULL);
  pump(ssl, tcp, cb->plain, 0);
  SSL_shutdown(ssl);
  fail = NULL;
out:
  if (fail)
    client_done(cb, -1, fail);
  ERR_clear_error();
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  if (tcp >= 0)
    close(tcp);
  close(cb->plain);
  client_unref(cb);
  return NULL;
}

int tls_client_connect(const char *host, int port, const char *ca,
                       int timeout_ms, char *err, size_t errlen) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    snprintf(err, errlen, "%s:%d: no socketpair: %s", host, port,
             strerror(errno));
    return -1;
  }
  client_bridge *cb = calloc(1, sizeof *cb);
  if (!cb) {
    snprintf(err, errlen, "out of memory");
    close(sv[0]);
    close(sv[1]);
    return -1;
  }
  pthread_mutex_init(&cb->mu, NULL);
  pthread_cond_init(&cb->cv, NULL);
  cb->refs = 2;
  snprintf(cb->host, sizeof cb->host, "%s", host);
  snprintf(cb->ca, sizeof cb->ca, "%s", ca ? ca : "");
  cb->port = port;
  cb->timeout_ms = timeout_ms;
  cb->plain = sv[1];
  if (start_thread(run_client, cb) != 0) {
    snprintf(err, errlen, "%s:%d: no thread", host, port);
    close(sv[0]);
    close(sv[1]);
    pthread_mutex_destroy(&cb->mu);
    pthread_cond_destroy(&cb->cv);
    free(cb);
    return -1;
  }
  /* the connect and the handshake each have timeout_ms */
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  int64_t ns = until.tv_nsec + (int64_t)(2 * timeout_ms + 1000) * 1000000;
  until.tv_sec += (time_t)(ns / 1000000000);
  until.tv_nsec = (long)(ns % 1000000000);
  pthread_mutex_lock(&cb->mu);
  while (cb->state == 0 &&
         pthread_cond_timedwait(&cb->cv, &cb->mu, &until) != ETIMEDOUT)
    ;
  int state = cb->state;
  if (state < 0)
    snprintf(err, errlen, "%s", cb->err);
  else if (state == 0)
    snprintf(err, errlen, "%s:%d: no TLS connection in time", host, port);
  pthread_mutex_unlock(&cb->mu);
  client_unref(cb);
  if (state != 1) {
    close(sv[0]); /* a late handshake finds nobody and ends */
    return -1;
  }
  return sv[0];
}
