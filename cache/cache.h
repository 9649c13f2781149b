/*
 * cache.h: the artifact store, sqlite on the node (docs/design.md).
 *
 * The store keeps opaque artifacts under 32-byte keys. It knows nothing about
 * graphs: besides the bytes it keeps, per entry, a few named 32-byte "parts"
 * (the daemon stores the key's component digests there, so a miss can be
 * explained by finding entries that share a part), the compile time the
 * entry saves, its size, when it was created and last used, its hit
 * count, and a label for people (a name, a file and line, a host: text the
 * store only keeps; it is written when the entry is put and never changes
 * on a hit).
 *
 * Integrity. Artifacts are stored compressed (zstd) with the SHA-256 digest
 * of the uncompressed bytes. Every read decompresses and checks the digest; a
 * corrupt entry is deleted, counted and reported as CACHE_ECORRUPT so the
 * caller recompiles: a corrupt artifact is never returned. The database runs
 * in WAL mode; each write is one transaction, so a process killed at any
 * point leaves a consistent database.
 *
 * Concurrency. One cache_store per process; one cache_conn per thread that
 * uses it (sqlite connections are not shared between threads). Writers wait
 * on each other through sqlite's busy timeout.
 *
 * Eviction. A size cap (bytes stored, compressed) enforced after every put,
 * by greedy-dual-size-frequency priority rather than plain LRU:
 *   priority = clock + compile_us * (1 + hits) / stored_bytes
 * where `clock` rises to the priority of each evicted entry, so entries not
 * used for a long time age out while expensive, small, popular ones stay.
 *
 * Hot path. A hit updates last_used/hits in memory; a background thread of
 * the store flushes those updates in one transaction every touch_flush_ms.
 *
 * Failures. cache_fail_put remembers that a key failed deterministically
 * (an invalid graph) with its message, for failure_ttl_s seconds.
 *
 * Errors: negative CACHE_E* codes with a message in a caller-provided
 * cache_error; cache_strerror() names them. Nothing here logs or prints.
 */
#ifndef CACHE_H
#define CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CACHE_KEY_LEN 32
#define CACHE_MAX_PARTS 8
#define CACHE_PART_NAME_MAX 16

#define CACHE_ERRORS(X)                                                        \
  X(OK, 0, "success")                                                          \
  X(MISS, -1, "no such entry")                                                 \
  X(CORRUPT, -2, "entry was corrupt and has been dropped")                     \
  X(IO, -3, "database error")                                                  \
  X(NOMEM, -4, "out of memory")                                                \
  X(INVAL, -5, "invalid argument")                                             \
  X(TOOBIG, -6, "artifact larger than the cache")                              \
  X(BUSY, -7, "database busy")

enum {
#define X(name, code, text) CACHE_E##name = code,
  CACHE_ERRORS(X)
#undef X
};

typedef struct cache_error {
  int code;
  char msg[512];
} cache_error;

const char *cache_strerror(int code);

/* A field left 0 (other than dir and max_bytes) takes its default. */
typedef struct cache_config {
  const char *dir;          /* directory of the database (created if absent) */
  uint64_t max_bytes;       /* cap on stored (compressed) bytes; 0: none */
  int zstd_level;           /* compression level (default 3) */
  uint32_t busy_timeout_ms; /* sqlite busy timeout (default 5000) */
  uint32_t failure_ttl_s;   /* how long failures are remembered (600) */
  uint32_t touch_flush_ms;  /* last-used batching period (1000) */
} cache_config;

/* Fills the defaults above (dir NULL, max_bytes 0). */
void cache_config_default(cache_config *c);

/* A named 32-byte digest stored with an entry ("graph", "target", ...). */
typedef struct cache_part {
  char name[CACHE_PART_NAME_MAX];
  uint8_t digest[CACHE_KEY_LEN];
} cache_part;

/* A signature stored with an entry: an HMAC-SHA-256 by the key `key_id`
 * (the daemon's, over the entry's key and digest; the store only keeps
 * it). */
#define CACHE_SIG_LEN 32
#define CACHE_SIG_KEY_MAX 33 /* key id, NUL included */
typedef struct cache_sig {
  uint8_t mac[CACHE_SIG_LEN];
  char key_id[CACHE_SIG_KEY_MAX];
} cache_sig;

/* What an entry is called, for people (cache_put_entry). Strings are
 * NUL-terminated within their arrays; all empty and line 0: no label. The
 * store keeps the text as given; the daemon decides what it may hold. */
#define CACHE_LABEL_NAME_MAX 256  /* bytes of name, NUL excluded */
#define CACHE_LABEL_FILE_MAX 1024 /* bytes of file */
#define CACHE_LABEL_HOST_MAX 255  /* bytes of host */
typedef struct cache_label {
  char name[CACHE_LABEL_NAME_MAX + 1]; /* a program's name */
  char file[CACHE_LABEL_FILE_MAX + 1]; /* its source file */
  int32_t line;                        /* its line there; 0: unknown */
  char host[CACHE_LABEL_HOST_MAX + 1]; /* the host that sent it */
} cache_label;

/* Whether a label says anything (a field non-empty or a line). */
bool cache_label_present(const cache_label *l);

/* What the store knows about an entry. */
typedef struct cache_info {
  uint8_t key[CACHE_KEY_LEN];
  cache_part parts[CACHE_MAX_PARTS];
  int nparts;
  uint64_t size;                 /* artifact bytes, uncompressed */
  uint64_t stored_size;          /* bytes on disk, compressed */
  uint64_t compile_us;           /* compile time the entry saves per hit */
  int64_t created;               /* unix seconds */
  int64_t last_used;             /* unix seconds */
  uint64_t hits;                 /* includes hits not yet flushed */
  uint8_t digest[CACHE_KEY_LEN]; /* SHA-256 of the artifact */
  bool is_signed;                /* stored with a signature */
  cache_sig sig;                 /* when is_signed */
  cache_label label;             /* as stored; all empty: none */
} cache_info;

typedef struct cache_stats {
  uint64_t hits, misses;        /* cache_get outcomes (corrupt = miss) */
  uint64_t puts;                /* entries stored */
  uint64_t evictions;           /* entries evicted for the size cap */
  uint64_t corrupt_dropped;     /* entries dropped because they were corrupt */
  uint64_t entries;             /* entries now */
  uint64_t bytes;               /* stored (compressed) bytes now */
  uint64_t raw_bytes;           /* uncompressed bytes now */
  uint64_t compile_us_saved;    /* sum of compile_us over hits */
  uint64_t failures_remembered; /* failure records now (expired ones go
                                   within touch_flush_ms) */
} cache_stats;

typedef struct cache_store cache_store;
typedef struct cache_conn cache_conn;

/* Opens (creating or migrating) the database in cfg->dir and starts the
 * touch flusher. A database that sqlite reports as malformed is moved aside
 * (renamed with a timestamp) and a new one is created; err says so: on
 * success err->code is 0 and err->msg is empty unless it holds such a note.
 * A database of a newer schema version is refused (CACHE_EIO), untouched. */
int cache_store_open(const cache_config *cfg, cache_store **out,
                     cache_error *err);

/* Flushes pending touches, stops the flusher and closes. All connections
 * must be closed first. NULL is fine. */
void cache_store_close(cache_store *s);

/* A connection for the calling thread. */
int cache_conn_open(cache_store *s, cache_conn **out, cache_error *err);
void cache_conn_close(cache_conn *c);

/* Reads an entry: decompresses, verifies the digest. On success *data is a
 * malloc'd buffer the caller frees (never NULL, even for 0 bytes) and *info
 * (if not NULL) is filled. Returns 0, CACHE_EMISS, CACHE_ECORRUPT (the
 * entry is gone now), or an error (CACHE_EIO if sqlite finds the file itself
 * malformed: the next cache_store_open checks it fully). A hit is counted
 * and its touch queued. */
int cache_get(cache_conn *c, const uint8_t key[CACHE_KEY_LEN], uint8_t **data,
              size_t *len, cache_info *info, cache_error *err);

/* Metadata of an entry without reading its data. */
int cache_info_get(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                   cache_info *info, cache_error *err);

/* Stores (or replaces) an entry, then evicts to honour the cap, in one
 * transaction. An artifact larger than the cap (compressed, as the cap
 * counts) is refused with CACHE_ETOOBIG. Part names must be non-empty,
 * NUL-terminated and distinct. */
int cache_put(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
              const cache_part *parts, int nparts, const uint8_t *data,
              size_t len, uint64_t compile_us, cache_error *err);

/* cache_put with a signature stored beside the entry (NULL: none); an
 * empty or over-long key id is CACHE_EINVAL. */
int cache_put_signed(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                     const cache_part *parts, int nparts, const uint8_t *data,
                     size_t len, uint64_t compile_us, const cache_sig *sig,
                     cache_error *err);

/* Everything cache_put_entry stores beside the artifact. */
typedef struct cache_meta {
  const cache_part *parts;  /* nparts named digests (NULL when 0) */
  int nparts;               /* at most CACHE_MAX_PARTS */
  uint64_t compile_us;      /* what a hit saves */
  const cache_sig *sig;     /* NULL: unsigned */
  const cache_label *label; /* NULL or empty: no label */
} cache_meta;

/* cache_put with everything: parts, signature and label as in `m`. A
 * signature as for cache_put_signed; a label string that is not
 * terminated within its array, or a negative line, is CACHE_EINVAL. */
int cache_put_entry(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                    const uint8_t *data, size_t len, const cache_meta *m,
                    cache_error *err);

/* Removes one entry; CACHE_EMISS if absent. *freed (if not NULL) gets the
 * stored bytes released. */
int cache_evict_key(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                    uint64_t *freed, cache_error *err);

/* Removes every entry last used before `before` (unix seconds; INT64_MAX:
 * all). *count and *freed get what was removed. */
int cache_evict_older(cache_conn *c, int64_t before, uint64_t *count,
                      uint64_t *freed, cache_error *err);

/* Calls fn for up to `limit` entries (0: all), most recently used first.
 * Stops early when fn returns non-zero. fn may use the same connection
 * (rows are fetched in pages, and no statement runs while fn does). */
int cache_list(cache_conn *c, int limit,
               int (*fn)(const cache_info *info, void *ctx), void *ctx,
               cache_error *err);

/* Calls fn for entries having part `name` equal to `digest` (most recently
 * used first as of the last touch flush, up to `limit`; 0: all). It never
 * writes, so it never waits for the write lock. fn may use the connection. */
int cache_find_by_part(cache_conn *c, const char *name,
                       const uint8_t digest[CACHE_KEY_LEN], int limit,
                       int (*fn)(const cache_info *info, void *ctx), void *ctx,
                       cache_error *err);

/* Remembers that `key` failed with `message`. */
int cache_fail_put(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                   const char *message, cache_error *err);

/* If `key` failed less than failure_ttl_s ago, returns 0 and copies the
 * message; otherwise CACHE_EMISS. */
int cache_fail_get(cache_conn *c, const uint8_t key[CACHE_KEY_LEN], char *msg,
                   size_t msglen, cache_error *err);

/* Counters and sizes. Thread-safe; cheap. */
void cache_stats_get(cache_store *s, cache_stats *out);

/* Records a hit on `key` served from a copy the caller keeps (the daemon's
 * memory tier) without reading the entry: its hit count, last-used time and
 * eviction priority are updated at the next touch flush, exactly as for a
 * cache_get hit. Cheap (a mutex and a hash-table slot); never touches the
 * database. A key that is not stored (evicted meanwhile) updates nothing.
 * Returns 0, or CACHE_ENOMEM (the hit is not recorded). */
int cache_touch(cache_store *s, const uint8_t key[CACHE_KEY_LEN]);

/* Writes pending touches now (the flusher does it periodically). */
int cache_flush_touches(cache_conn *c, cache_error *err);

/* Runs PRAGMA integrity_check and verifies every entry's digest. Returns 0
 * when both are fine; otherwise CACHE_ECORRUPT with a description. Does not
 * drop anything. For tests and `compiled --check-cache`. */
int cache_verify_all(cache_conn *c, uint64_t *entries_checked,
                     cache_error *err);

#endif
