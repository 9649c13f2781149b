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

#include <openssl/evp.h>

#include "compiler/key.h"
#include "daemon/log.h"
#include "daemon/sign.h"
#include "daemon/tls.h"

#define BACKOFF_MIN_US 100000
#define BACKOFF_MAX_US 5000000
#define WARN_EVERY_US 10000000
#define MAX_CONNS 256
#define ENTRY_PREFIX "compiled:v2:a:"
#define LEASE_PREFIX "compiled:v2:lease:"
/* The longest header field (d, n, u, s, k, h) an entry may have. */
#define FIELD_MAX 64

struct l2 {
  char host[256];
  int port;
  int db;
  char user[128], password[256];
  char where[400];
  bool tls;      /* rediss:// */
  char ca[1024]; /* its CA file ("": system roots) */
  int timeout_ms, ttl_s;
  const signer *signer;
  int (*charge)(void *ctx, size_t n);
  void (*release)(void *ctx, size_t n);
  void *budget_ctx;
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
  t->signer = cfg->signer;
  t->charge = cfg->charge;
  t->release = cfg->release;
  t->budget_ctx = cfg->budget_ctx;
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

/* Sends one command on ctx and checks for an error reply. WRONGTYPE is the
 * one key's problem, not the tier's: the call fails (NULL), the connection
 * stays and the tier stays up. */
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
    if (strncmp(why, "WRONGTYPE", 9) == 0) {
      ok(t);
      LOG(LOG_WARN, "shared cache %s: %s: %s", t->where, what, why);
    } else {
      fail(t, what, why);
    }
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

/* Runs a command whose reply is a status, an integer or nil: 0 with the
 * reply's type (and integer) in *type (*val), or -1. */
static int run_small(l2 *t, const char *what, int argc, const char **argv,
                     const size_t *lens, int *type, long long *val) {
  redisReply *r = run(t, what, argc, argv, lens);
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
  hexkey(ENTRY_PREFIX, key, k, sizeof k);
  const char *a[] = {"DEL", k};
  return run_small(t, "DEL", 2, a, NULL, NULL, NULL);
}

/* ---- reading an entry ---- */

/* Step 1: the header, without z. Replies 0 (no key), 1 (not a hash: the
 * type's name follows), 2 (a field longer than ARGV[1]), or the fields d,
 * n, u, s, k, h and z's length. */
static const char head_lua[] =
    "local t = redis.call('type', KEYS[1]).ok "
    "if t == 'none' then return 0 end "
    "if t ~= 'hash' then return {1, t} end "
    "local f = {'d', 'n', 'u', 's', 'k', 'h'} "
    "for i = 1, #f do "
    "  if redis.call('hstrlen', KEYS[1], f[i]) > tonumber(ARGV[1]) then "
    "    return 2 end end "
    "local r = redis.call('hmget', KEYS[1], 'd', 'n', 'u', 's', 'k', 'h') "
    "r[7] = redis.call('hstrlen', KEYS[1], 'z') "
    "return r";

/* Step 5: z, only while the entry has the digest ARGV[1] and a z of ARGV[2]
 * bytes (else nil: it changed since its header was read). */
static const char body_lua[] =
    "if redis.call('type', KEYS[1]).ok ~= 'hash' or "
    "redis.call('hget', KEYS[1], 'd') ~= ARGV[1] or "
    "redis.call('hstrlen', KEYS[1], 'z') ~= tonumber(ARGV[2]) then "
    "return false end "
    "return redis.call('hget', KEYS[1], 'z')";

/* A header field: its bytes when it is a string (NULL otherwise). */
static const char *hfield(const redisReply *r, size_t i, size_t *len) {
  if (i >= r->elements || r->element[i]->type != REDIS_REPLY_STRING)
    return NULL;
  *len = r->element[i]->len;
  return r->element[i]->str;
}

/* A decimal field of at most 19 digits; false when it is not one. */
static bool decimal(const redisReply *r, size_t i, uint64_t *out) {
  size_t n = 0;
  const char *s = hfield(r, i, &n);
  if (!s || n == 0 || n > 19)
    return false;
  uint64_t v = 0;
  for (size_t j = 0; j < n; j++) {
    if (s[j] < '0' || s[j] > '9')
      return false;
    v = v * 10 + (uint64_t)(s[j] - '0');
  }
  *out = v;
  return true;
}

/* What the header says, as far as it is well formed (step 1). */
typedef struct head {
  uint8_t digest[32];
  uint64_t size, compile_us, zlen;
  bool is_signed; /* s and k */
  cache_sig sig;
  bool has_mac; /* h */
  uint8_t mac[CACHE_SIG_LEN];
} head;

/* Parses the header reply; NULL, or what is wrong with it. */
static const char *parse_head(const redisReply *r, head *h) {
  size_t n = 0;
  const char *d = hfield(r, 0, &n);
  if (!d || n != 32)
    return "its digest (d) is missing or not 32 bytes";
  memcpy(h->digest, d, 32);
  if (!decimal(r, 1, &h->size))
    return "its size (n) is not a decimal number";
  if (!decimal(r, 2, &h->compile_us))
    return "its compile time (u) is not a decimal number";
  if (r->element[6]->type != REDIS_REPLY_INTEGER || r->element[6]->integer <= 0)
    return "its artifact (z) is missing";
  h->zlen = (uint64_t)r->element[6]->integer;
  size_t sl = 0, kl = 0, hl = 0;
  const char *s = hfield(r, 3, &sl), *k = hfield(r, 4, &kl),
             *m = hfield(r, 5, &hl);
  if (s && sl == CACHE_SIG_LEN && k && kl > 0 && kl < CACHE_SIG_KEY_MAX &&
      !memchr(k, '\0', kl)) {
    h->is_signed = true;
    memcpy(h->sig.mac, s, CACHE_SIG_LEN);
    memcpy(h->sig.key_id, k, kl);
    h->sig.key_id[kl] = '\0';
  }
  if (m && hl == CACHE_SIG_LEN) {
    h->has_mac = true;
    memcpy(h->mac, m, CACHE_SIG_LEN);
  }
  return NULL;
}

/* Step 2: both signatures; NULL, or why the entry is not trusted. */
static const char *check_signatures(l2 *t, const uint8_t key[32], const head *h,
                                    char *why, size_t n) {
  if (!t->signer)
    return NULL;
  if (!h->is_signed || !h->has_mac)
    return "no signature";
  sign_check sc = signer_verify_entry(t->signer, h->sig.key_id, key, h->digest,
                                      h->size, h->compile_us, h->mac);
  if (sc == SIGN_OK)
    sc = signer_verify(t->signer, key, h->digest, &h->sig);
  if (sc == SIGN_OK)
    return NULL;
  snprintf(why, n, "%s%s%s", sign_check_name(sc),
           sc == SIGN_UNKNOWN_KEY ? " " : "",
           sc == SIGN_UNKNOWN_KEY ? h->sig.key_id : "");
  return why;
}

/* decode's answer when malloc fails: the entry is not to blame. */
static const char out_of_memory[] = "out of memory";

/* Steps 6-7: z decompressed and checked; NULL, or what is wrong. */
static const char *decode(const head *h, const char *z, size_t zlen,
                          uint8_t **out) {
  size_t frame = ZSTD_findFrameCompressedSize(z, zlen);
  if (ZSTD_isError(frame) || frame != zlen)
    return "its artifact (z) is not one zstd frame";
  if (ZSTD_getFrameContentSize(z, zlen) != h->size)
    return "its zstd frame does not state the size the header claims";
  uint8_t *data = malloc(h->size ? h->size : 1);
  if (!data)
    return out_of_memory;
  size_t got = ZSTD_decompress(data, h->size, z, zlen);
  if (ZSTD_isError(got) || got != h->size) {
    free(data);
    return "its artifact (z) does not decompress to its size";
  }
  uint8_t dg[32];
  unsigned int dl = 0;
  if (EVP_Digest(data, h->size, dg, &dl, EVP_sha256(), NULL) != 1 ||
      memcmp(dg, h->digest, 32) != 0) {
    free(data);
    return "its bytes do not match its digest";
  }
  *out = data;
  return NULL;
}

/* An entry that failed a check: logged and deleted. */
static int refuse(l2 *t, const uint8_t key[32], const char *why) {
  char hex[GC_HEX_LEN];
  gc_digest_hex(key, hex);
  LOG(LOG_WARN,
      "shared cache entry %s: %s; not served, deleted from Redis, "
      "recompiling",
      hex, why);
  l2_delete(t, key);
  return L2_REFUSED;
}

int l2_get(l2 *t, const uint8_t key[32], l2_entry *out) {
  memset(out, 0, sizeof *out);
  char k[96], fmax[8];
  hexkey(ENTRY_PREFIX, key, k, sizeof k);
  snprintf(fmax, sizeof fmax, "%d", FIELD_MAX);
  const char *a[] = {"EVAL", head_lua, "1", k, fmax};
  redisReply *r = run(t, "reading an entry", 5, a, NULL);
  if (!r)
    return L2_DOWN;
  /* 1. the header */
  head h;
  memset(&h, 0, sizeof h);
  const char *bad = NULL;
  char why[160];
  if (r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
    freeReplyObject(r);
    return L2_ABSENT;
  }
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
      r->element[1]->type == REDIS_REPLY_STRING) {
    char hex[GC_HEX_LEN];
    gc_digest_hex(key, hex);
    LOG(LOG_WARN,
        "shared cache entry %s is a Redis %.20s, not an entry; deleted (a "
        "miss)",
        hex, r->element[1]->str);
    freeReplyObject(r);
    l2_delete(t, key);
    return L2_ABSENT;
  }
  if (r->type == REDIS_REPLY_INTEGER && r->integer == 2) {
    snprintf(why, sizeof why, "a header field is longer than %d bytes",
             FIELD_MAX);
    bad = why;
  } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 7)
    bad = "its header does not decode";
  else
    bad = parse_head(r, &h);
  freeReplyObject(r);
  /* 2. the signatures, 3. the sizes */
  if (!bad)
    bad = check_signatures(t, key, &h, why, sizeof why);
  if (!bad && (h.size > L2_MAX_ARTIFACT ||
               h.zlen > ZSTD_compressBound((size_t)h.size))) {
    snprintf(why, sizeof why,
             "it claims %llu bytes in %llu compressed ones, more than an "
             "artifact may have (%zu) or zstd would take for it",
             (unsigned long long)h.size, (unsigned long long)h.zlen,
             L2_MAX_ARTIFACT);
    bad = why;
  }
  if (bad)
    return refuse(t, key, bad);
  /* 4. the memory budget */
  size_t need = (size_t)h.size + (size_t)h.zlen;
  int c = t->charge ? t->charge(t->budget_ctx, need) : 0;
  if (c == L2_REFUSED) {
    snprintf(why, sizeof why,
             "it claims %llu bytes, more than an artifact may hold of the "
             "memory budget",
             (unsigned long long)h.size);
    return refuse(t, key, why);
  }
  if (c != 0) {
    char hex[GC_HEX_LEN];
    gc_digest_hex(key, hex);
    LOG(LOG_INFO,
        "shared cache entry %s (%llu bytes) does not fit the memory budget "
        "now; compiling here",
        hex, (unsigned long long)h.size);
    return L2_NO_MEMORY;
  }
  /* 5. z, while the entry is the one checked */
  char zl[24];
  snprintf(zl, sizeof zl, "%llu", (unsigned long long)h.zlen);
  const char *b[] = {"EVAL", body_lua, "1", k, (const char *)h.digest, zl};
  size_t bl[] = {4, sizeof body_lua - 1, 1, strlen(k), 32, strlen(zl)};
  r = run(t, "reading an entry", 6, b, bl);
  if (!r || r->type != REDIS_REPLY_STRING || r->len != h.zlen) {
    bool down = !r;
    if (r)
      freeReplyObject(r);
    if (t->release)
      t->release(t->budget_ctx, need);
    return down ? L2_DOWN : L2_ABSENT; /* changed meanwhile: look again */
  }
  /* 6-7. decompressed and checked */
  uint8_t *data = NULL;
  bad = decode(&h, r->str, r->len, &data);
  freeReplyObject(r);
  if (t->release)
    t->release(t->budget_ctx, bad ? need : (size_t)h.zlen);
  if (bad == out_of_memory)
    return L2_NO_MEMORY;
  if (bad)
    return refuse(t, key, bad);
  out->data = data;
  out->len = (size_t)h.size;
  memcpy(out->digest, h.digest, 32);
  out->compile_us = h.compile_us;
  out->is_signed = h.is_signed;
  out->sig = h.sig;
  out->charged = t->charge ? (size_t)h.size : 0;
  return L2_FOUND;
}

/* ---- storing an entry ---- */

/* Replaces the key with the entry ARGV[1..] (field, value pairs) and its
 * TTL (ARGV[#ARGV]), in one step. */
static const char put_lua[] =
    "redis.call('del', KEYS[1]) "
    "local n = #ARGV "
    "redis.call('hset', KEYS[1], unpack(ARGV, 1, n - 1)) "
    "return redis.call('expire', KEYS[1], ARGV[n])";

int l2_put(l2 *t, const uint8_t key[32], const uint8_t *data, size_t len,
           const uint8_t digest[32], const cache_sig *sig,
           uint64_t compile_us) {
  uint8_t mac[CACHE_SIG_LEN];
  bool has_mac = sig && t->signer &&
                 signer_sign_entry(t->signer, sig->key_id, key, digest, len,
                                   compile_us, mac);
  if (t->signer && !has_mac)
    return -1; /* readers would refuse it */
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
  hexkey(ENTRY_PREFIX, key, k, sizeof k);
  snprintf(n, sizeof n, "%zu", len);
  snprintf(u, sizeof u, "%llu", (unsigned long long)compile_us);
  snprintf(ttl, sizeof ttl, "%d", t->ttl_s);
  const char *a[19] = {
      "EVAL", put_lua, "1", k, "z", (const char *)z, "d", (const char *)digest,
      "n",    n,       "u", u};
  size_t l[19] = {4, sizeof put_lua - 1, 1, strlen(k), 1, zl, 1, 32,
                  1, strlen(n),          1, strlen(u)};
  int argc = 12;
  if (sig) {
    a[argc] = "s", l[argc++] = 1;
    a[argc] = (const char *)sig->mac, l[argc++] = CACHE_SIG_LEN;
    a[argc] = "k", l[argc++] = 1;
    a[argc] = sig->key_id, l[argc++] = strlen(sig->key_id);
  }
  if (has_mac) {
    a[argc] = "h", l[argc++] = 1;
    a[argc] = (const char *)mac, l[argc++] = CACHE_SIG_LEN;
  }
  a[argc] = ttl, l[argc++] = strlen(ttl);
  int rc = run_small(t, "storing an entry", argc, a, l, NULL, NULL);
  free(z);
  return rc;
}

/* ---- leases ---- */

/* Takes the lease KEYS[1] for ARGV[1] for ARGV[2] ms: 1 (taken), 0 (held,
 * honoured), or 2 and the TTL and type found (a lease not honoured,
 * replaced by ours). */
static const char take_lua[] =
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "return 1 end "
    "local t = redis.call('type', KEYS[1]).ok "
    "local ttl = redis.call('pttl', KEYS[1]) "
    "if t == 'string' and ttl > 0 and ttl <= tonumber(ARGV[2]) then "
    "return 0 end "
    "if t == 'none' then "
    "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end "
    "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
    "return {2, ttl, t}";

/* 1 when KEYS[1] is a lease honoured for ARGV[1] ms, else 0. */
static const char held_lua[] =
    "local ttl = redis.call('pttl', KEYS[1]) "
    "if redis.call('type', KEYS[1]).ok == 'string' and ttl > 0 and "
    "ttl <= tonumber(ARGV[1]) then return 1 end "
    "return 0";

/* Scripts: act on the lease only while it is ours. */
static const char renew_lua[] =
    "if redis.call('type', KEYS[1]).ok == 'string' and "
    "redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
static const char release_lua[] =
    "if redis.call('type', KEYS[1]).ok == 'string' and "
    "redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end";

int l2_lease_take(l2 *t, const uint8_t key[32], const char *owner, int ms) {
  char k[96], p[24];
  hexkey(LEASE_PREFIX, key, k, sizeof k);
  snprintf(p, sizeof p, "%d", ms);
  const char *a[] = {"EVAL", take_lua, "1", k, owner, p};
  redisReply *r = run(t, "taking a lease", 6, a, NULL);
  if (!r)
    return L2_LEASE_ERROR;
  int rc = L2_LEASE_ERROR;
  if (r->type == REDIS_REPLY_INTEGER) {
    rc = r->integer == 1 ? L2_LEASE_TAKEN : L2_LEASE_HELD;
  } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
             r->element[1]->type == REDIS_REPLY_INTEGER &&
             r->element[2]->type == REDIS_REPLY_STRING) {
    long long ttl = r->element[1]->integer;
    char hex[GC_HEX_LEN];
    gc_digest_hex(key, hex);
    char found[48];
    if (strcmp(r->element[2]->str, "string") != 0)
      snprintf(found, sizeof found, "a Redis %.20s", r->element[2]->str);
    else if (ttl < 0)
      snprintf(found, sizeof found, "no TTL");
    else
      snprintf(found, sizeof found, "a TTL of %lld ms", ttl);
    LOG(LOG_WARN,
        "shared cache: the lease on %s had %s, not a lease of at most "
        "--redis-lease-ms %d: not honoured, replaced by this daemon's",
        hex, found, ms);
    rc = L2_LEASE_REPLACED;
  }
  freeReplyObject(r);
  return rc;
}

int l2_lease_held(l2 *t, const uint8_t key[32], int ms) {
  char k[96], p[24];
  hexkey(LEASE_PREFIX, key, k, sizeof k);
  snprintf(p, sizeof p, "%d", ms);
  const char *a[] = {"EVAL", held_lua, "1", k, p};
  long long n = 0;
  if (run_small(t, "looking at a lease", 5, a, NULL, NULL, &n))
    return -1;
  return n > 0;
}

int l2_lease_renew(l2 *t, const uint8_t key[32], const char *owner, int ms) {
  char k[96], p[24];
  hexkey(LEASE_PREFIX, key, k, sizeof k);
  snprintf(p, sizeof p, "%d", ms);
  const char *a[] = {"EVAL", renew_lua, "1", k, owner, p};
  return run_small(t, "renewing a lease", 6, a, NULL, NULL, NULL);
}

int l2_lease_release(l2 *t, const uint8_t key[32], const char *owner) {
  char k[96];
  hexkey(LEASE_PREFIX, key, k, sizeof k);
  const char *a[] = {"EVAL", release_lua, "1", k, owner};
  return run_small(t, "releasing a lease", 5, a, NULL, NULL, NULL);
}
