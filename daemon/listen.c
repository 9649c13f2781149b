/*
 * listen.c: listening sockets, the accept loop, the connection table. See
 * listen.h for why the daemon accepts connections itself.
 *
 * Each listening socket has a uv_poll_t; when it is readable the loop
 * accepts up to ACCEPT_BATCH connections, so a flood cannot starve the
 * loop's other work. The connection table is indexed by descriptor number
 * (descriptors are small integers, reused lowest first) and guarded by a
 * mutex, because completion-queue threads look peers up in it.
 */
#include "daemon/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/log.h"

#define MAX_LISTENERS 8
#define ACCEPT_BATCH 64
#define PAUSE_MS 100
#define WARN_EVERY_S 10

/* One accepted connection, at index fd of the table. */
typedef struct conn {
  bool live; /* handed to gRPC and not seen closed yet */
  dev_t dev; /* identity of the socket, to tell a reused descriptor */
  ino_t ino;
  char peer[64]; /* "ipv4:127.0.0.1:5555" */
} conn;

/* One listening socket. */
typedef struct sock {
  lsn *l; /* back pointer for callbacks */
  int fd; /* the listening socket; -1 once closed */
  uv_poll_t poll;
  bool polling; /* poll started */
} sock;

struct lsn {
  uv_loop_t *loop;
  sock socks[MAX_LISTENERS];
  int nsocks;
  int port;
  int reserve_fd;   /* kept open to be given up on EMFILE; -1: none */
  uv_timer_t pause; /* restarts accepting after a pause */
  bool paused, closed, free_asked;
  int open_handles; /* handles whose close callback has not run */
  lsn_adopt_fn adopt;
  void *adopt_arg;
  int max_conns;
  time_t cap_warned, fd_warned; /* last warnings, for rate limiting */
  pthread_mutex_t mu;           /* guards everything below */
  conn *conns;                  /* indexed by descriptor */
  int nconns_cap;               /* entries allocated */
  int nlive;                    /* live entries */
  uint64_t accepted, refused_cap, refused_fds;
  uint64_t refused_cap_logged, refused_fds_logged;
};

/* ---- the connection table ---- */

/* Forgets connections whose descriptor closed or names another file now.
 * Called with l->mu held. */
static void sweep(lsn *l) {
  for (int fd = 0; fd < l->nconns_cap; fd++) {
    conn *c = &l->conns[fd];
    if (!c->live)
      continue;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_dev != c->dev || sb.st_ino != c->ino) {
      c->live = false;
      l->nlive--;
    }
  }
}

/* Records an accepted connection. Called with l->mu held. */
static int remember(lsn *l, int fd, const struct sockaddr_storage *sa) {
  if (fd >= l->nconns_cap) {
    int cap = l->nconns_cap ? l->nconns_cap : 256;
    while (cap <= fd)
      cap *= 2;
    conn *n = realloc(l->conns, (size_t)cap * sizeof *n);
    if (!n)
      return -1;
    memset(n + l->nconns_cap, 0, (size_t)(cap - l->nconns_cap) * sizeof *n);
    l->conns = n;
    l->nconns_cap = cap;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0)
    return -1;
  conn *c = &l->conns[fd];
  if (!c->live)
    l->nlive++; /* else an entry whose socket closed unseen: replaced */
  c->live = true;
  c->dev = sb.st_dev;
  c->ino = sb.st_ino;
  char host[INET6_ADDRSTRLEN] = "?";
  if (sa->ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    snprintf(c->peer, sizeof c->peer, "ipv4:%s:%d", host, ntohs(in->sin_port));
  } else if (sa->ss_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    bool mapped = IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr); /* dual stack */
    inet_ntop(mapped ? AF_INET : AF_INET6,
              mapped ? (const void *)&in6->sin6_addr.s6_addr[12]
                     : (const void *)&in6->sin6_addr,
              host, sizeof host);
    snprintf(c->peer, sizeof c->peer, mapped ? "ipv4:%s:%d" : "ipv6:[%s]:%d",
             host, ntohs(in6->sin6_port));
  } else {
    snprintf(c->peer, sizeof c->peer, "fd:%d", fd);
  }
  return 0;
}

bool lsn_peer(lsn *l, int fd, char *buf, size_t n) {
  bool found = false;
  pthread_mutex_lock(&l->mu);
  struct stat sb;
  if (fd >= 0 && fd < l->nconns_cap && l->conns[fd].live &&
      fstat(fd, &sb) == 0 && sb.st_ino == l->conns[fd].ino &&
      sb.st_dev == l->conns[fd].dev) {
    snprintf(buf, n, "%s", l->conns[fd].peer);
    found = true;
  }
  pthread_mutex_unlock(&l->mu);
  return found;
}

void lsn_stats_get(lsn *l, lsn_stats *st) {
  pthread_mutex_lock(&l->mu);
  sweep(l);
  st->connections = l->nlive;
  st->max_connections = l->max_conns;
  st->accepted = l->accepted;
  st->refused_cap = l->refused_cap;
  st->refused_no_fds = l->refused_fds;
  pthread_mutex_unlock(&l->mu);
}

/* ---- accepting ---- */

static void on_readable(uv_poll_t *p, int status, int events);

static void poll_all(lsn *l, bool on) {
  for (int i = 0; i < l->nsocks; i++) {
    sock *s = &l->socks[i];
    if (s->fd < 0 || s->polling == on)
      continue;
    if (on)
      uv_poll_start(&s->poll, UV_READABLE, on_readable);
    else
      uv_poll_stop(&s->poll);
    s->polling = on;
  }
}

static void on_pause_over(uv_timer_t *t) {
  lsn *l = t->data;
  l->paused = false;
  if (!l->closed)
    poll_all(l, true);
}

/* Out of descriptors even with the reserve given up: stop polling (the
 * pending connection keeps the socket readable) and try again soon. */
static void pause_accepting(lsn *l) {
  if (l->paused)
    return;
  l->paused = true;
  poll_all(l, false);
  uv_timer_start(&l->pause, on_pause_over, PAUSE_MS, 0);
}

/* Logs how many connections were refused for `why`, at most every
 * WARN_EVERY_S seconds. */
static void warn_refused(lsn *l, bool cap) {
  time_t now = time(NULL);
  time_t *last = cap ? &l->cap_warned : &l->fd_warned;
  if (now - *last < WARN_EVERY_S)
    return;
  *last = now;
  pthread_mutex_lock(&l->mu);
  uint64_t total = cap ? l->refused_cap : l->refused_fds;
  uint64_t *logged = cap ? &l->refused_cap_logged : &l->refused_fds_logged;
  uint64_t recent = total - *logged;
  *logged = total;
  int open = l->nlive;
  pthread_mutex_unlock(&l->mu);
  if (cap)
    LOG(LOG_WARN,
        "connection limit reached (%d open, limit %d): refused "
        "%llu connections since the last warning (%llu in all)",
        open, l->max_conns, (unsigned long long)recent,
        (unsigned long long)total);
  else
    LOG(LOG_WARN,
        "out of file descriptors accepting connections (%d open): refused "
        "%llu since the last warning (%llu in all); accepting goes on",
        open, (unsigned long long)recent, (unsigned long long)total);
}

/* Accept failed with EMFILE/ENFILE: give up the reserve descriptor, accept
 * the waiting connection and close it, take the reserve back. */
static void refuse_without_fds(lsn *l, int lfd) {
  if (l->reserve_fd >= 0) {
    close(l->reserve_fd);
    l->reserve_fd = -1;
  }
  int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  if (fd >= 0)
    close(fd);
  l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  pthread_mutex_lock(&l->mu);
  l->refused_fds++;
  pthread_mutex_unlock(&l->mu);
  warn_refused(l, false);
  if (fd < 0 || l->reserve_fd < 0)
    pause_accepting(l);
}

/* Takes one accepted connection: hands it over, or refuses it over the
 * cap. */
static void take(lsn *l, int fd, const struct sockaddr_storage *sa) {
  pthread_mutex_lock(&l->mu);
  if (l->nlive >= l->max_conns)
    sweep(l);
  bool over = l->nlive >= l->max_conns;
  bool ok = !over && remember(l, fd, sa) == 0;
  if (over)
    l->refused_cap++;
  else if (ok)
    l->accepted++;
  pthread_mutex_unlock(&l->mu);
  if (!ok) {
    close(fd);
    if (over)
      warn_refused(l, true);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  l->adopt(l->adopt_arg, fd);
}

static void on_readable(uv_poll_t *p, int status, int events) {
  (void)events;
  sock *s = p->data;
  lsn *l = s->l;
  if (status < 0 || l->closed)
    return;
  for (int i = 0; i < ACCEPT_BATCH && !l->paused; i++) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    int fd = accept4(s->fd, (struct sockaddr *)&sa, &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      take(l, fd, &sa);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return;
    if (errno == EMFILE || errno == ENFILE) {
      refuse_without_fds(l, s->fd);
      continue;
    }
    LOG(LOG_WARN, "accepting a connection: %s; pausing %d ms", strerror(errno),
        PAUSE_MS);
    pause_accepting(l); /* ENOBUFS, ENOMEM: memory, not descriptors */
    return;
  }
}

/* ---- binding ---- */

/* Splits "host:port" / "[v6]:port" into host (NULL: any) and port. */
static int split_addr(const char *addr, char *host, size_t hn, char *port,
                      size_t pn) {
  const char *colon;
  if (addr[0] == '[') {
    const char *close = strchr(addr, ']');
    if (!close || close[1] != ':')
      return -1;
    snprintf(host, hn, "%.*s", (int)(close - addr - 1), addr + 1);
    colon = close + 1;
  } else {
    colon = strrchr(addr, ':');
    if (!colon)
      return -1;
    snprintf(host, hn, "%.*s", (int)(colon - addr), addr);
  }
  snprintf(port, pn, "%s", colon + 1);
  char *end;
  long p = strtol(port, &end, 10);
  return *port && !*end && p >= 0 && p <= 65535 ? 0 : -1;
}

/* Binds one address; returns the socket or -1 (errno set). */
static int bind_one(const struct addrinfo *ai, bool v6only) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  int one = 1, v6 = v6only ? 1 : 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (ai->ai_family == AF_INET6)
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6, sizeof v6);
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
      listen(fd, SOMAXCONN) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

static int bound_port(int fd) {
  struct sockaddr_storage sa;
  socklen_t len = sizeof sa;
  if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
    return -1;
  return ntohs(sa.ss_family == AF_INET6
                   ? ((struct sockaddr_in6 *)&sa)->sin6_port
                   : ((struct sockaddr_in *)&sa)->sin_port);
}

/* Sets the port of a resolved address. */
static void set_port(struct addrinfo *ai, int port) {
  if (ai->ai_family == AF_INET6)
    ((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons((uint16_t)port);
  else
    ((struct sockaddr_in *)ai->ai_addr)->sin_port = htons((uint16_t)port);
}

/* What to do about a bind error `e`, to follow its message. */
static const char *bind_hint(int e) {
  switch (e) {
  case EADDRINUSE:
    return " (another process, perhaps another compiled, listens there: stop "
           "it or give --listen another port)";
  case EADDRNOTAVAIL:
    return " (no network interface of this machine has that address)";
  case EACCES:
    return " (ports below 1024 need privileges: use a higher one)";
  default:
    return "";
  }
}

/* Binds every address of host:port; returns how many were bound. */
static int bind_all(lsn *l, const char *addr, char *err, size_t errlen) {
  char host[256], port[16];
  if (split_addr(addr, host, sizeof host, port, sizeof port) != 0) {
    snprintf(err, errlen, "cannot listen on %s: want host:port or [v6]:port",
             addr);
    return 0;
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *res = NULL;
  bool any = !*host || !strcmp(host, "*");
  int rc = getaddrinfo(any ? NULL : host, port, &hints, &res);
  if (rc != 0) {
    snprintf(err, errlen, "cannot listen on %s: %s", addr, gai_strerror(rc));
    return 0;
  }
  bool has_v4 = false;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
    has_v4 |= ai->ai_family == AF_INET;
  int first_errno = 0;
  for (struct addrinfo *ai = res; ai && l->nsocks < MAX_LISTENERS;
       ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
      continue;
    if (l->port > 0)
      set_port(ai, l->port); /* port 0: every address gets the first's */
    int fd = bind_one(ai, has_v4);
    if (fd < 0) {
      first_errno = first_errno ? first_errno : errno;
      continue;
    }
    l->port = bound_port(fd);
    l->socks[l->nsocks++].fd = fd;
  }
  freeaddrinfo(res);
  if (!l->nsocks)
    snprintf(err, errlen, "cannot listen on %s: %s%s", addr,
             first_errno ? strerror(first_errno) : "no usable address",
             bind_hint(first_errno));
  return l->nsocks;
}

/* ---- life cycle ---- */

int lsn_open(lsn **out, uv_loop_t *loop, const char *addr, char *err,
             size_t errlen) {
  lsn *l = calloc(1, sizeof *l);
  if (!l) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  l->loop = loop;
  l->reserve_fd = -1;
  pthread_mutex_init(&l->mu, NULL);
  if (!bind_all(l, addr, err, errlen)) {
    pthread_mutex_destroy(&l->mu);
    free(l);
    return -1;
  }
  l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  uv_timer_init(loop, &l->pause);
  l->pause.data = l;
  l->open_handles = 1;
  for (int i = 0; i < l->nsocks; i++) {
    sock *s = &l->socks[i];
    s->l = l;
    uv_poll_init_socket(loop, &s->poll, s->fd);
    s->poll.data = s;
    l->open_handles++;
  }
  *out = l;
  return 0;
}

int lsn_port(const lsn *l) {
  return l->port;
}

int lsn_start(lsn *l, int max_connections, lsn_adopt_fn adopt, void *arg) {
  l->max_conns = max_connections > 0 ? max_connections : 1;
  l->adopt = adopt;
  l->adopt_arg = arg;
  poll_all(l, true);
  return 0;
}

static void release(lsn *l) {
  free(l->conns);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

static void on_handle_closed(uv_handle_t *h) {
  lsn *l = h->type == UV_TIMER ? h->data : ((sock *)h->data)->l;
  if (--l->open_handles == 0 && l->free_asked)
    release(l);
}

void lsn_close(lsn *l) {
  if (!l || l->closed)
    return;
  l->closed = true;
  uv_timer_stop(&l->pause);
  uv_close((uv_handle_t *)&l->pause, on_handle_closed);
  for (int i = 0; i < l->nsocks; i++) {
    sock *s = &l->socks[i];
    uv_close((uv_handle_t *)&s->poll, on_handle_closed);
    close(s->fd); /* uv_poll does not own it; the handle is stopped */
    s->fd = -1;
  }
  if (l->reserve_fd >= 0)
    close(l->reserve_fd);
  l->reserve_fd = -1;
}

void lsn_free(lsn *l) {
  if (!l)
    return;
  lsn_close(l);
  l->free_asked = true;
  if (l->open_handles == 0)
    release(l);
}
