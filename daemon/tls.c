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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "daemon/log.h"

#define HANDSHAKE_S 10
#define BUF 16384

struct tls_server {
  SSL_CTX *ctx;
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
  SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
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

void tls_free(tls_server *t) {
  if (!t)
    return;
  SSL_CTX_free(t->ctx);
  free(t);
}

typedef struct bridge {
  SSL_CTX *ctx;
  SSL *ssl; /* client side: already connected */
  int tcp, plain;
} bridge;

static void set_blocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0)
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
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

/* Copies until either side ends. */
static void pump(SSL *ssl, int tcp, int plain) {
  unsigned char *buf = malloc(BUF);
  if (!buf)
    return;
  for (;;) {
    if (SSL_pending(ssl) == 0) {
      struct pollfd p[2] = {{tcp, POLLIN, 0}, {plain, POLLIN, 0}};
      if (poll(p, 2, -1) < 0) {
        if (errno == EINTR)
          continue;
        break;
      }
      if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
        ssize_t n = read(plain, buf, BUF);
        if (n < 0 && errno == EINTR)
          continue;
        if (n <= 0 || SSL_write(ssl, buf, (int)n) <= 0)
          break;
      }
      if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
    }
    int n = SSL_read(ssl, buf, BUF);
    if (n <= 0) {
      int e = SSL_get_error(ssl, n);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        continue;
      break;
    }
    if (!write_all(plain, buf, (size_t)n))
      break;
  }
  free(buf);
}

/* Client side: the handshake is done; copy, then clean up. */
static void *run_client_bridge(void *arg) {
  bridge *b = arg;
  pump(b->ssl, b->tcp, b->plain);
  SSL_shutdown(b->ssl);
  SSL_free(b->ssl);
  SSL_CTX_free(b->ctx);
  ERR_clear_error();
  close(b->plain);
  close(b->tcp);
  free(b);
  return NULL;
}

static void *run_bridge(void *arg) {
  bridge *b = arg;
  set_blocking(b->tcp);
  set_blocking(b->plain);
  SSL *ssl = SSL_new(b->ctx);
  if (ssl && SSL_set_fd(ssl, b->tcp) == 1) {
    set_timeout(b->tcp, HANDSHAKE_S);
    if (SSL_accept(ssl) == 1) {
      set_timeout(b->tcp, 0); /* keepalive pings find dead peers now */
      pump(ssl, b->tcp, b->plain);
      SSL_shutdown(ssl);
    } else {
      char why[256] = "handshake failed";
      unsigned long e = ERR_get_error();
      if (e)
        ERR_error_string_n(e, why, sizeof why);
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
static int start_thread(void *(*fn)(void *), bridge *b) {
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
    b->ssl = NULL;
    b->tcp = tcp_fd;
    b->plain = plain_fd;
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

int tls_client_connect(const char *host, int port, const char *ca,
                       int timeout_ms, char *err, size_t errlen) {
  int tcp = tcp_connect(host, port, timeout_ms, err, errlen);
  if (tcp < 0)
    return -1;
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  SSL *ssl = NULL;
  int sv[2] = {-1, -1};
  const char *fail = "out of memory";
  if (!ctx)
    goto out;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  if ((ca && *ca) ? SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1
                  : SSL_CTX_set_default_verify_paths(ctx) != 1) {
    fail = "cannot load the CA";
    goto out;
  }
  if (!(ssl = SSL_new(ctx)) || SSL_set_fd(ssl, tcp) != 1)
    goto out;
  unsigned char ip[16];
  bool is_ip =
      inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
  if (is_ip)
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host);
  else {
    SSL_set1_host(ssl, host);
    SSL_set_tlsext_host_name(ssl, host);
  }
  set_timeout(tcp, (timeout_ms + 999) / 1000);
  if (SSL_connect(ssl) != 1) {
    fail = "TLS handshake failed";
    goto out;
  }
  set_timeout(tcp, 0);
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    fail = "no socketpair";
    goto out;
  }
  bridge *b = malloc(sizeof *b);
  if (!b)
    goto out;
  *b = (bridge){.ctx = ctx, .ssl = ssl, .tcp = tcp, .plain = sv[1]};
  if (start_thread(run_client_bridge, b) != 0) {
    free(b);
    fail = "no thread";
    goto out;
  }
  return sv[0];
out:;
  char why[256] = "";
  unsigned long e = ERR_get_error();
  if (e)
    ERR_error_string_n(e, why, sizeof why);
  ERR_clear_error();
  snprintf(err, errlen, "%s:%d: %s%s%s", host, port, fail, why[0] ? ": " : "",
           why);
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  close(tcp);
  if (sv[0] >= 0) {
    close(sv[0]);
    close(sv[1]);
  }
  return -1;
}
