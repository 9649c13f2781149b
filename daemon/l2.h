/*
 * l2.h: the shared cache tier in Redis (--redis URL).
 *
 * Daemons of a cluster share one Redis: an artifact one of them compiles is
 * a hit for the others, and a lease in Redis lets one daemon of the cluster
 * compile a graph while the others wait for its result.
 *
 * Calls are synchronous (hiredis) and made only from compile worker
 * threads, each with a connection of its own, every command under a
 * timeout (--redis-timeout-ms): never on the gRPC threads or the event
 * loop. A failure of the connection or the server (no reply, a timeout, an
 * error reply such as NOAUTH or OOM) marks the tier down; until a back-off
 * (100 ms doubling up to 5 s) has passed, calls fail at once without
 * touching the network, and warnings are logged at most every 10 s. A
 * request never fails because of Redis: a daemon whose L2 is down serves
 * from its own cache and compiles. A key holding something this daemon did
 * not write there (a list where an entry's hash should be, a field of the
 * wrong size, a lease without a TTL) is that key's problem, not the tier's:
 * it is a miss, deleted or replaced, and the tier stays up.
 *
 * rediss:// runs the connection over TLS (tls.h's client side: hiredis 0.14,
 * Debian 12's, has no TLS of its own, so it gets a socketpair bridged to
 * the TLS connection by a thread), verifying Redis's certificate.
 *
 * Entries: a hash at "compiled:v2:a:<key hex>" with the zstd-compressed
 * artifact (z), its SHA-256 (d), size (n), compile time (u), the artifact's
 * signature (s, k: see sign.h) and the header's (h: over key, d, n and u),
 * expiring after --redis-ttl. Written in one script (delete, fill, expire),
 * so a reader never sees half an entry or one without a TTL.
 *
 * Reading trusts nothing that Redis holds (docs/operations.md, "Trust
 * model of the Redis tier"). In order, before the next step:
 *   1. the header alone (every field but z, each at most 64 bytes, and z's
 *      length) is fetched, in one script that also reports a key of the
 *      wrong type (then deleted: a miss);
 *   2. with a signer: the header's signature h and the artifact's
 *      signature s must be valid, by a key the daemon holds;
 *   3. the claimed size must be at most L2_MAX_ARTIFACT, and z's length at
 *      most what zstd may take for that size;
 *   4. the memory budget must take the size and z's length (charge()):
 *      an entry larger than an artifact may ever hold of it is refused;
 *      when the budget cannot take it now, the entry is left alone and
 *      the lookup fails (L2_NO_MEMORY);
 *   5. z is fetched, by a script that returns it only while the entry still
 *      has the digest and z length checked above;
 *   6. z must be one zstd frame stating that size, and decompress to
 *      exactly that many bytes;
 *   7. their SHA-256 must equal the digest.
 * An entry failing 1-4 or 6-7 is logged, deleted from Redis and reported
 * as L2_REFUSED (a key of the wrong type: L2_ABSENT; one that changed
 * between 1 and 5: L2_ABSENT too, to be looked up again). Without a
 * signer (--redis-unsigned) step 2 is skipped: anyone who can write to
 * Redis can then choose what this daemon serves, within the limits of 3-4.
 *
 * Leases: "compiled:v2:lease:<key hex>" = the owner's id, set with NX and a
 * TTL of the lease time, renewed while the compile runs and deleted (only
 * by its owner) after. A lease is honoured only when it is a string whose
 * TTL is at most the lease time this daemon uses: one without a TTL, with
 * a longer one, or of another type was not set by a daemon of the cluster
 * (or by one configured differently), so taking the lease replaces it.
 * How long a daemon waits on an honoured lease is the caller's limit
 * (--redis-lease-wait-ms, store.c).
 */
#ifndef DAEMON_L2_H
#define DAEMON_L2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"

typedef struct l2 l2;

/* No artifact read from Redis may claim more bytes than this, whatever
 * the memory budget allows. */
#define L2_MAX_ARTIFACT ((size_t)1 << 31)

typedef struct signer signer;

typedef struct l2_config {
  const char *url;      /* redis[s]://[user:password@]host:port[/db] */
  const char *ca;       /* rediss://: the CA of Redis's certificate (NULL or "":
                           the system's roots) */
  int timeout_ms;       /* connect and each command */
  int ttl_s;            /* entries expire after this */
  const signer *signer; /* signs entries stored, verifies entries read;
                           NULL: unsigned (--redis-unsigned) */
  /* The memory budget an entry read is charged to: charge() returns 0
   * (charged), L2_NO_MEMORY (not now: the budget is full) or L2_REFUSED
   * (never: more than an artifact may hold); release() gives bytes back. */
  int (*charge)(void *ctx, size_t n);
  void (*release)(void *ctx, size_t n);
  void *budget_ctx;
} l2_config;

/* Parses the URL (no connection yet). NULL and a message on error. */
l2 *l2_new(const l2_config *cfg, char *err, size_t errlen);
void l2_free(l2 *t);

/* The URL without its password, for logs. */
const char *l2_where(const l2 *t);

/* Whether the last call succeeded (false until the first one). */
bool l2_up(const l2 *t);

/* Calls that failed (timeouts, connection errors, error replies). */
uint64_t l2_errors(const l2 *t);

typedef struct l2_entry {
  uint8_t *data; /* malloc'd artifact bytes, verified */
  size_t len;
  uint8_t digest[32]; /* their SHA-256 */
  uint64_t compile_us;
  bool is_signed; /* sig holds the artifact's signature */
  cache_sig sig;
  size_t charged; /* bytes charged to the budget for data: the caller
                     releases them (release()) when it frees data */
} l2_entry;

/* What l2_get found. */
enum {
  L2_FOUND = 1,      /* out filled: free out->data, release out->charged */
  L2_ABSENT = 0,     /* no entry (or one of the wrong type, now deleted) */
  L2_DOWN = -1,      /* the tier is down, or the call failed */
  L2_REFUSED = -2,   /* an entry failed a check: logged and deleted */
  L2_NO_MEMORY = -3, /* the memory budget cannot hold it now */
};

/* Reads and verifies an entry (the steps above); one of the L2_ codes. */
int l2_get(l2 *t, const uint8_t key[32], l2_entry *out);

/* Stores an entry; 0 or -1. */
int l2_put(l2 *t, const uint8_t key[32], const uint8_t *data, size_t len,
           const uint8_t digest[32], const cache_sig *sig, uint64_t compile_us);

/* Deletes an entry (a reader found it bad); 0 or -1. */
int l2_delete(l2 *t, const uint8_t key[32]);

/* What l2_lease_take did. */
enum {
  L2_LEASE_TAKEN = 1,    /* it was free: now ours for ms */
  L2_LEASE_HELD = 0,     /* another owner holds an honoured lease */
  L2_LEASE_ERROR = -1,   /* the tier is down, or the call failed */
  L2_LEASE_REPLACED = 2, /* a lease not honoured (no TTL, a TTL over ms,
                            not a string) was there: replaced by ours */
};

/* Leases of at most `ms` (the lease time): take (an L2_LEASE_ code); renew
 * and release only act while `owner` holds it (0 or -1). */
int l2_lease_take(l2 *t, const uint8_t key[32], const char *owner, int ms);
int l2_lease_renew(l2 *t, const uint8_t key[32], const char *owner, int ms);
int l2_lease_release(l2 *t, const uint8_t key[32], const char *owner);

/* Whether someone holds a lease this daemon honours (TTL at most ms): 1,
 * 0, or -1 (error). */
int l2_lease_held(l2 *t, const uint8_t key[32], int ms);

#endif
