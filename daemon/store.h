/*
 * store.h: the daemon's tiered store of artifacts: the hot tier (prebuilt
 * hit answers in memory, lru.h), the sqlite cache (L1, cache/cache.h) and
 * the shared Redis tier (L2, l2.h), with the trust checks inside.
 *
 * Everything read from a tier is checked before it is handed out: the
 * cache verifies its digest (cache_get), Redis entries are verified by
 * l2_get, and with --verify-cache every L1 entry's signature is checked
 * here (store_trusted; one that fails is dropped from L1 and the hot tier
 * and counted). What is read from L1 or L2, and what is stored, is
 * remembered in the hot tier, so that the next hit is answered without a
 * disk read. compile.c holds the RPC and the single flight on top of it;
 * admin.c reads (Lookup, Fetch) and forgets (Evict) through it.
 */
#ifndef DAEMON_STORE_H
#define DAEMON_STORE_H

#include "daemon/daemon.h"

/* A hot-tier entry: the packed answer of a hit (artifact inline, served
 * as L1_HIT, no per-request timings) and what a non-inline answer needs. */
typedef struct store_hot {
  grpc_slice response; /* packed CompileEvent; the copy holds a reference */
  gc_key key;
  uint64_t size;
  uint8_t digest[GC_DIGEST_LEN];
  int64_t compile_us;
  bool is_signed;
  cache_sig sig;
} store_hot;

/* An artifact read from L1 or L2. */
typedef struct store_entry {
  uint8_t *data; /* malloc'd; the caller frees it (and releases charged) */
  size_t len;
  uint8_t digest[GC_DIGEST_LEN];
  bool is_signed;
  cache_sig sig;
  int64_t compile_us;
  size_t charged; /* of the memory budget (an L2 read: l2.h), else 0 */
  bool stored;    /* in L1 (an L2 read copied there) */
} store_entry;

/* A Redis lease held by a flight (l2.h): whether, and when renewed. */
typedef struct store_lease {
  bool held;
  int64_t renewed; /* monotonic us */
} store_lease;

/* What store_get found besides an entry (0). */
enum { STORE_UNTRUSTED = -100 /* failed the signature check: dropped */ };

/* Sets up and tears down the hot tier. */
int store_init(daemon_ctx *d);
void store_cleanup(daemon_ctx *d);

/* The hot tier's answer for key (*out filled, its response referenced:
 * the caller unrefs it); the cache learns of the hit (hit count, last
 * use, eviction priority; batched by its touch flusher). False: not in
 * memory. The daemon's counters are the caller's. */
bool store_hot_get(daemon_ctx *d, const uint8_t *key, store_hot *out);

/* Reads key from L1 through conn, checked (store_trusted), counting a hit
 * in the cache (its hit count and last use). `full` (may be NULL) is the
 * key with its components: a found entry is then remembered in the hot
 * tier. Returns 0 (*e filled, and *info: may be NULL), STORE_UNTRUSTED, or a
 * cache code (CACHE_EMISS, CACHE_ECORRUPT, another error with cerr filled). */
int store_get(daemon_ctx *d, cache_conn *conn, const uint8_t *key,
              const gc_key *full, const char *hex, store_entry *e,
              cache_info *info, cache_error *cerr);

/* Remembers a verified entry in the hot tier (after store_get without
 * `full`, once the answer is sent). */
void store_remember_hot(daemon_ctx *d, const gc_key *full, const char *hex,
                        const store_entry *e);

/* Looks `full` up in Redis (l2_get verifies what it finds) and, while
 * another daemon holds an honoured lease on it, waits for that daemon's
 * result, at most --redis-lease-wait-ms; takes the lease when it is free
 * (or not honoured: l2.h), unless `*read_only` (then it never takes it
 * and gives up when nobody holds it). Stops when `*abandoned`. True when
 * the artifact came from Redis: *e filled, copied to L1 (with `label`)
 * and remembered in the hot tier. Any Redis failure ends it (false: the
 * caller compiles). Runs on a worker. */
bool store_get_shared(daemon_ctx *d, cache_conn *conn, const gc_key *full,
                      const char *hex, const cache_label *label,
                      store_lease *lease, const atomic_bool *abandoned,
                      const atomic_bool *read_only, store_entry *e);

/* Renews a held lease when a third of its time has passed; releases it
 * (the others need not wait any more). */
void store_lease_renew(daemon_ctx *d, const uint8_t *key, store_lease *l);
void store_lease_release(daemon_ctx *d, const uint8_t *key, store_lease *l);

/* Stores a compiled artifact: its digest (into e->digest), its signature
 * (--signing-keys), then Redis, L1 (with `label` and the key components)
 * and the hot tier. e->data/len/compile_us are the artifact's. Returns 0
 * when L1 holds it (e->stored), else -1 after logging. */
int store_put(daemon_ctx *d, cache_conn *conn, const gc_key *full,
              const char *hex, const cache_label *label, store_entry *e);

/* Forgets key (NULL: every key) in the hot tier. */
void store_forget_hot(daemon_ctx *d, const uint8_t *key);

/* Forgets key in the hot tier and L1: 0 (*freed bytes), CACHE_EMISS, or
 * an error with cerr filled (CACHE_EIO without a connection). */
int store_forget(daemon_ctx *d, cache_conn *conn, const uint8_t *key,
                 uint64_t *freed, cache_error *cerr);

/* Whether an entry read from L1 may be served: always without
 * --verify-cache; else only with a valid signature by a key of
 * --signing-keys. An entry that fails is counted, logged, dropped from L1
 * and the hot tier. */
bool store_trusted(daemon_ctx *d, cache_conn *conn, const uint8_t *key,
                   const char *hex, const cache_info *info);

/* The cached entry nearest to `key` (Explain, and the explorer's miss
 * explanations): among the entries with the same graph component (up to
 * 1000, most recently used first), one with the fewest differing
 * components, never `exclude` (may be NULL). Fills *best and names[] (up
 * to GC_KEY_NCOMPONENTS component names, static strings) and returns how
 * many differ; -1 when no entry has the graph. */
int store_nearest(cache_conn *conn, const gc_key *key, const uint8_t *exclude,
                  cache_info *best, const char **names);

#endif
