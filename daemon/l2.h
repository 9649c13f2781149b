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
 * loop. A failure marks the tier down; until a back-off (100 ms doubling up
 * to 5 s) has passed, calls fail at once without touching the network, and
 * warnings are logged at most every 10 s. A request never fails because of
 * Redis: a daemon whose L2 is down serves from its own cache and compiles.
 *
 * rediss:// runs the connection over TLS (tls.h's client side: hiredis 0.14,
 * Debian 12's, has no TLS of its own, so it gets a socketpair bridged to
 * the TLS connection by a thread), verifying Redis's certificate.
 *
 * Entries: a hash at "compiled:v1:a:<key hex>" with the zstd-compressed
 * artifact (z), its SHA-256 (d), size (n), compile time (u) and signature
 * (s, k: see sign.h), expiring after --redis-ttl. Leases:
 * "compiled:v1:lease:<key hex>" = the owner's id, set with NX and a TTL,
 * renewed while the compile runs and deleted (only by its owner) after.
 * Readers verify what they get (digest, and signature when the daemon has
 * signing keys) before serving it.
 */
#ifndef DAEMON_L2_H
#define DAEMON_L2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"

typedef struct l2 l2;

typedef struct l2_config {
  const char *url; /* redis[s]://[user:password@]host:port[/db] */
  const char *ca;  /* rediss://: the CA of Redis's certificate (NULL or "":
                      the system's roots) */
  int timeout_ms;  /* connect and each command */
  int ttl_s;       /* entries expire after this */
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
  uint8_t *data; /* malloc'd artifact bytes */
  size_t len;
  uint8_t digest[32]; /* as stored (the caller checks it) */
  uint64_t compile_us;
  bool is_signed;
  cache_sig sig;
} l2_entry;

/* 1: found (out filled; free out->data), 0: absent, -1: error or down
 * (including an entry that does not decode: it is deleted). */
int l2_get(l2 *t, const uint8_t key[32], l2_entry *out);

/* Stores an entry; 0 or -1. */
int l2_put(l2 *t, const uint8_t key[32], const uint8_t *data, size_t len,
           const uint8_t digest[32], const cache_sig *sig, uint64_t compile_us);

/* Deletes an entry (a reader found it bad); 0 or -1. */
int l2_delete(l2 *t, const uint8_t key[32]);

/* Leases: take 1 (taken), 0 (another owner holds it), -1 (error); renew
 * and release only act while `owner` holds it (0 or -1). */
int l2_lease_take(l2 *t, const uint8_t key[32], const char *owner, int ms);
int l2_lease_renew(l2 *t, const uint8_t key[32], const char *owner, int ms);
int l2_lease_release(l2 *t, const uint8_t key[32], const char *owner);

/* Whether anyone holds the lease: 1, 0, or -1 (error). */
int l2_lease_held(l2 *t, const uint8_t key[32]);

#endif
