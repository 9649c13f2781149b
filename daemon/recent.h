/*
 * recent.h: what the explorer shows of the requests this daemon answered
 * lately (daemon/explorer.c): a bounded ring of the latest Compile
 * requests, and counts per ten-second interval over the last hour.
 *
 * Both are in memory only, filled where a Compile request's log line is
 * written (compile.c), and cost a mutex and a copy of a few hundred bytes
 * per request: the ring holds RECENT_CAP records, and the series
 * RECENT_BUCKETS intervals, whatever the traffic. What a client sent (its
 * peer address, token name, client id) is copied cut to a fixed length;
 * the explorer escapes it where it is shown.
 */
#ifndef DAEMON_RECENT_H
#define DAEMON_RECENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "compiler/key.h"

#define RECENT_CAP 512
#define RECENT_STAGES 16
#define RECENT_BUCKETS 360 /* an hour ... */
#define RECENT_BUCKET_S 10 /* ... of ten-second intervals */
#define RECENT_TEXT 128    /* peer, token name, client id: cut here */
#define RECENT_ERROR 256   /* an error message: cut here */

/* One request as it ended. */
typedef struct recent_req {
  uint64_t seq;  /* 1, 2, ...: its number since the daemon started */
  int64_t at_ms; /* when it ended (unix ms) */
  char peer[RECENT_TEXT];
  char who[RECENT_TEXT];    /* its token's name ("" without --tokens) */
  char client[RECENT_TEXT]; /* CompileRequest.client */
  bool has_key;
  uint8_t key[GC_DIGEST_LEN];
  bool has_parts; /* the key's components are known */
  uint8_t parts[GC_KEY_NCOMPONENTS][GC_DIGEST_LEN];
  char outcome[24]; /* "hit", "compiled", "joined", "l2-hit", "failed", ... */
  int status;       /* gRPC status code */
  int64_t total_us, validate_us, key_us, queue_us, compile_us; /* -1: none */
  uint64_t bytes;                                              /* artifact */
  struct {
    const char *name; /* a static string */
    int64_t micros;
  } stages[RECENT_STAGES]; /* the compile's passes, when it compiled */
  int nstages;
  char error[RECENT_ERROR];
} recent_req;

/* Counts of one interval. */
typedef struct recent_bucket {
  int64_t start; /* unix seconds, a multiple of RECENT_BUCKET_S; 0: unused */
  uint32_t requests, hits, misses, compiles, joins, failures;
  uint64_t compile_us; /* sum over its compiles */
} recent_bucket;

typedef struct recent {
  pthread_mutex_t mu;
  recent_req ring[RECENT_CAP];
  uint64_t next; /* seq of the next record; ring[(seq - 1) % CAP] */
  recent_bucket series[RECENT_BUCKETS];
} recent;

void recent_init(recent *r);
void recent_destroy(recent *r);

/* Records one request (copies everything; `r` may be on the stack). Its
 * seq and at_ms are set here. */
void recent_add(recent *rc, recent_req *r);

/* Copies up to `max` records, newest first, with seq below `before` (0:
 * from the newest), into out; returns how many. */
int recent_list(recent *rc, uint64_t before, recent_req *out, int max);

/* The record with this seq, if the ring still holds it. */
bool recent_get(recent *rc, uint64_t seq, recent_req *out);

/* Copies the series, oldest interval first, the unused and stale ones
 * (older than an hour) left out; returns how many. */
int recent_series(recent *rc, recent_bucket out[RECENT_BUCKETS]);

/* Whether an outcome counts as a hit, a miss, a compile, a join, a
 * failure (what the series counts). */
bool recent_is_hit(const char *outcome);

#endif
