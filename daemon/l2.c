/*
 * l2.c: the Redis tier. See l2.h.
 */
#include "daemon/l2.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "compiler/key.h"
#include "daemon/log.h"
#include "daemon/tls.h"

#define BACKOFF_MIN_US 100000
#define BACKOFF_MAX_US 5000000
#define WARN_EVERY_US 10000000
#define MAX_CONNS 256
#define MAX_ARTIFACT ((size_t)1 << 31)

struct l2 {
  char host[256];
  int port;
  int db;
  char user[128], password[256];
  char where[400];
  bool tls;      /* rediss:// */
  char ca[1024]; /* its CA file ("": system roots) */
  int timeout_ms, ttl_s;
  atomic_bool up;
  atomic_uint_fast64_t errors;
  atomic_int_fast64_t retry_at_us; /* down: no attempt before this */
  atomic_int_fast64_t backoff_us;
  atomic_int_fast64_t last_warn_us;
  pthread_mutex_t mu; /* every connection, to close them at the end */
  redisContext *conns[MAX_CONNS];
  int nconns;
};

/* The calling thread's connection (one l2 per process). */
static __thread redisContext *tls_conn;
static __thread int tls_slot = -1;

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void hexkey(const char *prefix, const uint8_t key[32], char *out,
                   size_t n) {
  char hex[GC_HEX_LEN];
  gc_digest_hex(key, hex);
  snprintf(out, n, "%s%s", prefix, hex);
}

l2 *l2_new(const l2_config *cfg, char *err, size_t errlen) {
  l2 *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  const char *u = cfg->url;
  t->tls = strncmp(u, "rediss://", 9) == 0;
  if (!t->tls && strncmp(u, "redis://", 8) != 0) {
    snprintf(err, errlen,
             "--redis %s: want redis[s]://[user:password@]host:port[/db]", u);
    free(t);
    return NULL;
  }
  u += t->tls ? 9 : 8;
  snprintf(t->ca, sizeof t->ca, "%s", cfg->ca ? cfg->ca : "");
  const char *at = strrchr(u, '@');
  if (at) {
    const char *colon = memchr(u, ':', (size_t)(at - u));
    const char *pw = colon ? colon + 1 : u;
    if (colon && (size_t)(colon - u) < sizeof t->user)
      snprintf(t->user, sizeof t->user, "%.*s", (int)(colon - u), u);
    if ((size_t)(at - pw) >= sizeof t->password) {
      snprintf(err, errlen, "--redis: the password is too long");
      free(t);
      return NULL;
    }
    snprintf(t->password, sizeof t->password, "%.*s", (int)(at - pw), pw);
    u = at + 1;
  }
  const char *slash = strchr(u, '/');
  size_t hp = slash ? (size_t)(slash - u) : strlen(u);
  const char *colon = memchr(u, ':', hp);
  char *end = NULL;
  long port = colon ? strtol(colon + 1, &end, 10) : 6379;
  size_t hl = colon ? (size_t)(colon - u) : hp;
  long db = slash && slash[1] ? strtol(slash + 1, NULL, 10) : 0;
  if (hl == 0 || hl >= sizeof t->host || port <= 0 || port > 65535 ||
      (colon && end != u + hp) || db < 0 || db > 1 << 20) {
    snprintf(err, errlen,
             "--redis %s: want redis://[user:password@]host:port[/db]",
             cfg->url);
    free(t);
    return NULL;
  }
  memcpy(t->host, u, hl);
  t->port = (int)port;
  t->db = (int)db;
  snprintf(t->where, sizeof t->where, "%s://%s%s:%d/%d",
           t->tls ? "rediss" : "redis", t->password[0] ? "***@" : "", t->host,
           t->port, t->db);
  t->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 200;
  t->ttl_s = cfg->ttl_s > 0 ? cfg->ttl_s : 7 * 86400;
  atomic_init(&t->backoff_us, BACKOFF_MIN_US);
  pthread_mutex_init(&t->mu, NULL);
  return t;
}

void l2_free(l2 *t) {
  if (!t)
    return;
  for (int i = 0; i < t->nconns; i++)
    if (t->conns[i])
      redisFree(t->conns[i]);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

const char *l2_where(const l2 *t) {
  return t->where;
}

bool l2_up(const l2 *t) {
  return atomic_load(&t->up);
}

uint64_t l2_errors(const l2 *t) {
  return atomic_load(&t->errors);
}

/* Drops this thread's connection and marks the tier down. `why` may point
 * into the connection: copied first. */
static void fail(l2 *t, const char *what, const char *why_in) {
  char why[256];
  snprintf(why, sizeof why, "%s", why_in);
  atomic_fetch_add(&t->errors, 1);
  if (tls_conn) {
    pthread_mutex_lock(&t->mu);
    if (tls_slot >= 0)
      t->conns[tls_slot] = NULL;
    pthread_mutex_unlock(&t->mu);
    redisFree(tls_conn);
    tls_conn = NULL;
  }
  int64_t now = now_us(), b = atomic_load(&t->backoff_us);
  atomic_store(&t->retry_at_us, now + b);
  atomic_store(&t->backoff_us, b * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US : b * 2);
  bool was_up = atomic_exchange(&t->up, false);
  int64_t last = atomic_load(&t->last_warn_us);
  if (was_up || now - last >= WARN_EVERY_US) {
    atomic_store(&t->last_warn_us, now);
    LOG(LOG_WARN,
        "shared cache %s: %s failed (%s); serving from the local cache, "
        "retrying in %lld ms",
        t->where, what, why, (long long)(b / 1000));
  }
}

static void ok(l2 *t) {
  if (!atomic_exchange(&t->up, true))
    LOG(LOG_INFO, "shared cache %s: connected", t->where);
  atomic_store(&t->backoff_us, BACKOFF_MIN_US);
}

/* Sends one command on ctx and checks for an error reply. */
static redisReply *cmd(l2 *t, const char *what, int argc, const char **argv,
                       const size_t *lens) {
  redisReply *r = redisCommandArgv(tls_conn, argc, argv, lens);
  if (!r) {
    fail(t, what, tls_conn->errstr[0] ? tls_conn->errstr : "no reply");
    return NULL;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    char why[200];
    snprintf(why, sizeof why, "%.190s", r->str ? r->str : "error");
    freeReplyObject(r);
    fail(t, what, why);
    return NULL;
  }
  return r;
}

/* This thread's connection, connecting when needed; NULL while down. */
static redisContext *conn(l2 *t) {
  if (tls_conn)
    return tls_conn;
  if (now_us() < atomic_load(&t->retry_at_us))
    return NULL;
  struct timeval tv = {t->timeout_ms / 1000, (t->timeout_ms % 1000) * 1000};
  redisContext *c = NULL;
  if (t->tls) {
    char why[600];
    int fd = tls_client_connect(t->host, t->port, t->ca, t->timeout_ms, why,
                                sizeof why);
    if (fd < 0) {
      fail(t, "connecting over TLS", why);
      return NULL;
    }
    c = redisConnectFd(fd);
  } else {
    c = redisConnectWithTimeout(t->host, t->port, tv);
  }
  if (!c || c->err) {
    char why[200];
    snprintf(why, sizeof why, "%.190s", c ? c->errstr : "out of memory");
    if (c)
      redisFree(c);
    fail(t, "connecting", why);
    return NULL;
  }
  redisSetTimeout(c, tv);
  pthread_mutex_lock(&t->mu);
  int slot = -1;
  for (int i = 0; i < t->nconns && slot < 0; i++)
    if (!t->conns[i])
      slot = i;
  if (slot < 0 && t->nconns < MAX_CONNS)
    slot = t->nconns++;
  if (slot >= 0)
    t->conns[slot] = c;
  pthread_mutex_unlock(&t->mu);
  if (slot < 0) {
    redisFree(c);
    fail(t, "connecting", "too many threads");
    return NULL;
  }
  tls_conn = c;
  tls_slot = slot;
  if (t->password[0]) {
    const char *a[] = {"AUTH", t->user, t->password};
    int n = t->user[0] ? 3 : 2;
    if (n == 2)
      a[1] = t->password;
    redisReply *r = cmd(t, "AUTH", n, a, NULL);
    if (!r)
      return NULL;
    freeReplyObject(r);
  }
  if (t->db) {
    char db[16];
    snprintf(db, sizeof db, "%d", t->db);
    const char *a[] = {"SELECT", db};
    redisReply *r = cmd(t, "SELECT", 2, a, NULL);
    if (!r)
      return NULL;
    freeReplyObject(r);
  }
  return tls_conn;
}

/* One command on this thread's connection; NULL on error or down. */
static redisReply *run(l2 *t, const char *what, int argc, const char **argv,
                       const size_t *lens) {
  if (!conn(t))
    return NULL;
  redisReply *r = cmd(t, what, argc, argv, lens);
  if (r)
    ok(t);
  return r;
}

static bool field(const redisReply *r, size_t i, size_t want) {
  return i < r->elements && r->element[i]->type == REDIS_REPLY_STRING &&
         (want == 0 || r->element[i]->len == want);
}

int l2_get(l2 *t, const uint8_t key[32], l2_entry *out) {
  memset(out, 0, sizeof *out);
  char k[96];
  hexkey("compiled:v1:a:", key, k, sizeof k);
  const char *a[] = {"HMGET", k, "z", "d", "n", "u", "s", "k"};
  redisReply *r = run(t, "HMGET", 8, a, NULL);
  if (!r)
    return -1;
  int rc = 0;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 6) {
    rc = -1;
  } else if (r->element[0]->type == REDIS_REPLY_NIL) {
    rc = 0; /* absent */
  } else if (!field(r, 0, 0) || !field(r, 1, 32) || !field(r, 2, 0) ||
             !field(r, 3, 0)) {
    rc = -1;
  } else {
    unsigned long long n = strtoull(r->element[2]->str, NULL, 10);
    out->compile_us = strtoull(r->element[3]->str, NULL, 10);
    memcpy(out->digest, r->element[1]->str, 32);
    if (field(r, 4, CACHE_SIG_LEN) && field(r, 5, 0) &&
        r->element[5]->len > 0 && r->element[5]->len < CACHE_SIG_KEY_MAX) {
      out->is_signed = true;
      memcpy(out->sig.mac, r->element[4]->str, CACHE_SIG_LEN);
      memcpy(out->sig.key_id, r->element[5]->str, r->element[5]->len);
    }
    out->data = n <= MAX_ARTIFACT ? malloc(n ? n : 1) : NULL;
    size_t got = out->data ? ZSTD_decompress(out->data, n, r->element[0]->str,
                                             r->element[0]->len)
                           : 0;
    if (!out->data || ZSTD_isError(got) || got != n) {
      free(out->data);
      out->data = NULL;
      rc = -1;
    } else {
      out->len = n;
      rc = 1;
    }
  }
  freeReplyObject(r);
  if (rc < 0) {
    LOG(LOG_WARN, "shared cache %s: entry %s does not decode; deleted",
        t->where, k + 14);
    l2_delete(t, key);
  }
  return rc;
}

int l2_put(l2 *t, const uint8_t key[32], const uint8_t *data, size_t len,
           const uint8_t digest[32], const cache_sig *sig,
           uint64_t compile_us) {
  if (!conn(t))
    return -1;
  size_t cap = ZSTD_compressBound(len);
  uint8_t *z = malloc(cap ? cap : 1);
  if (!z)
    return -1;
  size_t zl = ZSTD_compress(z, cap, data, len, 3);
  if (ZSTD_isError(zl)) {
    free(z);
    return -1;
  }
  char k[96], n[24], u[24], ttl[24];
  hexkey("compiled:v1:a:", key, k, sizeof k);
  snprintf(n, sizeof n, "%zu", len);
  snprintf(u, sizeof u, "%llu", (unsigned long long)compile_us);
  snprintf(ttl, sizeof ttl, "%d", t->ttl_s);
  const char *a[] = {"HSET", k,
                     "z",    (const char *)z,
                     "d",    (const char *)digest,
                     "n",    n,
                     "u",    u,
                     "s",    sig ? (const char *)sig->mac : "",
                     "k",    sig ? sig->key_id : ""};
  size_t l[] = {4, strlen(k),
                1, zl,
                1, 32,
                1, strlen(n),
                1, strlen(u),
                1, sig ? CACHE_SIG_LEN : 0,
                1, sig ? strlen(sig->key_id) : 0};
  redisAppendCommandArgv(tls_conn, 14, a, l);
  const char *e[] = {"EXPIRE", k, ttl};
  redisAppendCommandArgv(tls_conn, 3, e, NULL);
  free(z);
  int rc = 0;
  for (int i = 0; i < 2; i++) {
    redisReply *r = NULL;
    if (redisGetReply(tls_conn, (void **)&r) != REDIS_OK || !r) {
      fail(t, "storing",
           tls_conn && tls_conn->errstr[0] ? tls_conn->errstr : "no reply");
      return -1;
    }
    if (r->type == REDIS_REPLY_ERROR)
      rc = -1;
    freeReplyObject(r);
  }
  if (rc == 0)
    ok(t);
  else
    fail(t, "storing", "error reply");
  return rc;
}

/* Runs a command whose reply is a status, an integer or nil: 0 with the
 * reply's type (and integer) in *type (*val), or -1. */
static int run_small(l2 *t, const char *what, int argc, const char **argv,
                     int *type, long long *val) {
  redisReply *r = run(t, what, argc, argv, NULL);
  if (!r)
    return -1;
  if (type)
    *type = r->type;
  if (val)
    *val = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
  freeReplyObject(r);
  return 0;
}

int l2_delete(l2 *t, const uint8_t key[32]) {
  char k[96];
  hexkey("compiled:v1:a:", key, k, sizeof k);
  const char *a[] = {"DEL", k};
  return run_small(t, "DEL", 2, a, NULL, NULL);
}

int l2_lease_take(l2 *t, const uint8_t key[32], const char *owner, int ms) {
  char k[96], p[24];
  hexkey("compiled:v1:lease:", key, k, sizeof k);
  snprintf(p, sizeof p, "%d", ms);
  const char *a[] = {"SET", k, owner, "NX", "PX", p};
  int type = 0;
  if (run_small(t, "SET NX", 6, a, &type, NULL))
    return -1;
  return type == REDIS_REPLY_STATUS ? 1 : 0; /* OK, or nil: held */
}

int l2_lease_held(l2 *t, const uint8_t key[32]) {
  char k[96];
  hexkey("compiled:v1:lease:", key, k, sizeof k);
  const char *a[] = {"EXISTS", k};
  long long n = 0;
  if (run_small(t, "EXISTS", 2, a, NULL, &n))
    return -1;
  return n > 0;
}

/* Scripts: act on the lease only while it is ours. */
static const char renew_lua[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
static const char release_lua[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end";

int l2_lease_renew(l2 *t, const uint8_t key[32], const char *owner, int ms) {
  char k[96], p[24];
  hexkey("compiled:v1:lease:", key, k, sizeof k);
  snprintf(p, sizeof p, "%d", ms);
  const char *a[] = {"EVAL", renew_lua, "1", k, owner, p};
  return run_small(t, "renewing a lease", 6, a, NULL, NULL);
}

int l2_lease_release(l2 *t, const uint8_t key[32], const char *owner) {
  char k[96];
  hexkey("compiled:v1:lease:", key, k, sizeof k);
  const char *a[] = {"EVAL", release_lua, "1", k, owner};
  return run_small(t, "releasing a lease", 5, a, NULL, NULL);
}
