/*
 * internal.h: what the files of cache/ share and nobody else sees.
 *
 * The pieces, one file each:
 *   store.c   the cache_store: config, opening (schema, migrations, moving a
 *             malformed file aside), the size counters, the touch flusher
 *             thread, stats.
 *   conn.c    a cache_conn: one sqlite connection with its pragmas, its
 *             cache of prepared statements, transactions and error mapping.
 *   codec.c   artifact bytes <-> stored bytes: zstd and SHA-256, and the
 *             checks that make any stored garbage a "corrupt" verdict.
 *   touch.c   hits waiting to be written: an in-memory table per store and
 *             the transaction that flushes it.
 *   entry.c   the operations on entries and failures (get, put, evict, list,
 *             find, fail, verify).
 *   explore.c what the explorer reads and keeps: entries page by page in
 *             several orders, the request an entry was compiled from.
 *
 * Time. Rows keep milliseconds (created_ms, last_used_ms) so that ordering by
 * recency and the failure TTL are exact within a second; the API speaks unix
 * seconds.
 */
#ifndef CACHE_INTERNAL_H
#define CACHE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <openssl/evp.h>
#include <zstd.h>

#include "cache/cache.h"

/* The schema version this code writes; see the migrations in store.c. */
#define CACHE__SCHEMA_VERSION 4

/* The columns that describe an entry, in the order cache__row_info reads
 * them (the blob, when a statement has it, comes after). */
#define CACHE__INFO_COLS                                                       \
  "e.id, e.key, e.digest, e.size, e.stored_size, e.compile_us, "               \
  "e.created_ms, e.last_used_ms, e.hits, e.sig, e.sig_key, "                   \
  "e.label_name, e.label_file, e.label_line, e.label_host"
#define CACHE__INFO_NCOLS 15

/* Every statement a connection runs, prepared once on first use and kept
 * for the life of the connection. X(NAME, SQL). */
#define CACHE__STMTS(X)                                                        \
  X(BEGIN_READ, "BEGIN")                                                       \
  X(BEGIN_WRITE, "BEGIN IMMEDIATE")                                            \
  X(COMMIT, "COMMIT")                                                          \
  X(ROLLBACK, "ROLLBACK")                                                      \
  X(STATE_GET, "SELECT entries, bytes, raw_bytes, failures, gen, clock "       \
               "FROM state WHERE id = 1")                                      \
  X(STATE_SET_CLOCK, "UPDATE state SET clock = ?1 WHERE id = 1")               \
  X(ENTRY_GET, "SELECT " CACHE__INFO_COLS ", b.data FROM entries e "           \
               "LEFT JOIN blobs b ON b.id = e.id WHERE e.key = ?1")            \
  X(ENTRY_INFO, "SELECT " CACHE__INFO_COLS " FROM entries e WHERE e.key = ?1") \
  X(PARTS_GET, "SELECT name, digest FROM parts WHERE entry = ?1 "              \
               "ORDER BY name LIMIT 8")                                        \
  X(ENTRY_DELETE_ID, "DELETE FROM entries WHERE id = ?1")                      \
  X(ENTRY_DELETE_KEY, "DELETE FROM entries WHERE key = ?1")                    \
  X(ENTRY_INSERT,                                                              \
    "INSERT INTO entries (key, digest, size, stored_size, compile_us, "        \
    "created_ms, last_used_ms, hits, priority, sig, sig_key, label_name, "     \
    "label_file, label_line, label_host) "                                     \
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, 0, "                                  \
    "(SELECT clock FROM state WHERE id = 1) + ?5 * 1.0 / max(?4, 1), ?7, ?8, " \
    "?9, ?10, ?11, ?12)")                                                      \
  X(BLOB_INSERT, "INSERT INTO blobs (id, data) VALUES (?1, ?2)")               \
  X(PART_INSERT,                                                               \
    "INSERT INTO parts (entry, name, digest) VALUES (?1, ?2, ?3)")             \
  X(EVICT_VICTIM, "SELECT id, priority FROM entries WHERE id != ?1 "           \
                  "ORDER BY priority LIMIT 1")                                 \
  X(EVICT_OLDER, "DELETE FROM entries WHERE last_used_ms < ?1")                \
  X(LIST_PAGE, "SELECT " CACHE__INFO_COLS " FROM entries e "                   \
               "WHERE (e.last_used_ms, e.id) < (?1, ?2) "                      \
               "ORDER BY e.last_used_ms DESC, e.id DESC LIMIT ?3")             \
  X(FIND_PAGE, "SELECT " CACHE__INFO_COLS " FROM parts p "                     \
               "JOIN entries e ON e.id = p.entry "                             \
               "WHERE p.name = ?4 AND p.digest = ?5 "                          \
               "AND (e.last_used_ms, e.id) < (?1, ?2) "                        \
               "ORDER BY e.last_used_ms DESC, e.id DESC LIMIT ?3")             \
  X(TOUCH, "UPDATE entries SET hits = hits + ?2, "                             \
           "last_used_ms = max(last_used_ms, ?3), "                            \
           "priority = (SELECT clock FROM state WHERE id = 1) + "              \
           "compile_us * (1.0 + hits + ?2) / max(stored_size, 1) "             \
           "WHERE key = ?1")                                                   \
  X(FAIL_PUT, "INSERT INTO failures (key, message, created_ms) "               \
              "VALUES (?1, ?2, ?3) ON CONFLICT (key) DO UPDATE SET "           \
              "message = excluded.message, created_ms = excluded.created_ms")  \
  X(FAIL_GET, "SELECT message, created_ms FROM failures WHERE key = ?1")       \
  X(FAIL_PURGE, "DELETE FROM failures WHERE created_ms <= ?1")                 \
  X(VERIFY_ROWS, "SELECT " CACHE__INFO_COLS ", b.data FROM entries e "         \
                 "LEFT JOIN blobs b ON b.id = e.id ORDER BY e.id")             \
  X(VERIFY_SUMS, "SELECT count(*), total(stored_size), total(size) "           \
                 "FROM entries")

enum {
#define X(name, sql) CACHE__STMT_##name,
  CACHE__STMTS(X)
#undef X
      CACHE__STMT_COUNT /* number of statements */
};

/* The totals row of the database (table `state`), kept exact by triggers. */
typedef struct cache__totals {
  uint64_t entries;   /* rows in entries */
  uint64_t bytes;     /* sum of stored_size */
  uint64_t raw_bytes; /* sum of size */
  uint64_t failures;  /* rows in failures */
  uint64_t gen;       /* bumped by every change of the above */
  double clock;       /* the GDSF clock: priority of the last eviction */
} cache__totals;

/* One pending touch: hits of a key not yet written to its row. */
typedef struct cache__touch {
  uint8_t key[CACHE_KEY_LEN]; /* the entry's key */
  bool used;                  /* slot occupied */
  uint64_t hits;              /* hits since the last flush */
  int64_t last_ms;            /* time of the latest of them */
} cache__touch;

/* Open-addressing table of pending touches, keyed by entry key. */
typedef struct cache__touches {
  cache__touch *slots; /* cap slots, or NULL while empty */
  size_t cap;          /* a power of two, or 0 */
  size_t count;        /* occupied slots */
} cache__touches;

struct cache_store {
  cache_config cfg; /* the caller's config, defaults applied; cfg.dir = dir */
  char *dir;        /* owned copy of the directory */
  char *path;       /* "<dir>/cache.db" */
  EVP_MD *sha256;   /* fetched once, shared read-only by all connections */

  /* Process-lifetime counters. */
  _Atomic uint64_t hits, misses, puts, evictions, corrupt_dropped;
  _Atomic uint64_t compile_us_saved;

  /* Current sizes, as of the newest committed transaction seen. */
  pthread_mutex_t sizes_mu; /* guards sizes */
  cache__totals sizes;      /* published by cache__publish, by gen */

  /* Hits not yet written (touch.c). */
  pthread_mutex_t touch_mu; /* guards touches */
  cache__touches touches;   /* key -> pending hits */

  /* The flusher thread. */
  pthread_mutex_t flush_mu; /* guards stop, with flush_cv */
  pthread_cond_t flush_cv;  /* signalled to stop the flusher */
  bool stop;                /* close asked the flusher to exit */
  bool flusher_running;     /* the thread was started and not yet joined */
  pthread_t flusher;        /* the thread */
  cache_conn *flush_conn;   /* the flusher's own connection */
};

struct cache_conn {
  cache_store *store;                    /* the store it belongs to */
  sqlite3 *db;                           /* the connection */
  sqlite3_stmt *stmt[CACHE__STMT_COUNT]; /* prepared on first use */
  ZSTD_CCtx *cctx;                       /* reused for every put */
  ZSTD_DCtx *dctx;                       /* reused for every get */
  EVP_MD_CTX *md;                        /* reused for every digest */
};

/* ---- errors (conn.c) ---- */

/* Fills err (if not NULL) and returns code. */
int cache__errorf(cache_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Maps a sqlite result code to a CACHE_E* code. */
int cache__code_of(int sqlite_rc);

/* Reports a failed sqlite call on c: "<what>: <sqlite message>". */
int cache__sqlite_error(cache_conn *c, int rc, const char *what,
                        cache_error *err);

/* The error of a lookup whose step (`step`) gave no row: CACHE_EMISS saying
 * `miss` when there is none (SQLITE_DONE), else the sqlite error of
 * `what`. */
int cache__no_row(cache_conn *c, int step, const char *miss, const char *what,
                  cache_error *err);

/* ---- connections (conn.c) ---- */

/* Opens a connection to s->path with the pragmas every connection needs
 * (busy timeout, synchronous, foreign keys). The schema must exist. */
int cache__conn_new(cache_store *s, cache_conn **out, cache_error *err);

/* Frees c and its statements; NULL is fine. */
void cache__conn_free(cache_conn *c);

/* The prepared statement `id` of c, reset and with cleared bindings, or NULL
 * with err filled. */
sqlite3_stmt *cache__stmt(cache_conn *c, int id, cache_error *err);

/* Steps st expecting no row (SQLITE_DONE), then resets it. */
int cache__step_done(cache_conn *c, sqlite3_stmt *st, const char *what,
                     cache_error *err);

/* Transactions: a read snapshot, or a write that takes the write lock at
 * once (BEGIN IMMEDIATE, waiting up to the busy timeout). */
int cache__begin_read(cache_conn *c, cache_error *err);
int cache__begin_write(cache_conn *c, cache_error *err);

/* Ends a read transaction (never fails in a way the caller must handle). */
void cache__end_read(cache_conn *c);

/* Rolls back the current transaction, if any. */
void cache__rollback(cache_conn *c);

/* Reads the totals row inside the current transaction. */
int cache__totals_read(cache_conn *c, cache__totals *t, cache_error *err);

/* Commits a write transaction and publishes its totals to the store's sizes.
 * On failure the transaction is rolled back. */
int cache__commit_write(cache_conn *c, cache_error *err);

/* ---- store (store.c) ---- */

/* Publishes totals read inside a committed transaction: kept if newer (by
 * gen) than what the store has. */
void cache__publish(cache_store *s, const cache__totals *t);

/* Milliseconds since the epoch. */
int64_t cache__now_ms(void);

/* Remembers that sqlite found the database malformed while running, so the
 * next open runs a full integrity check (a marker file beside it). */
void cache__note_malformed(cache_store *s);

/* ---- codec (codec.c) ---- */

/* SHA-256 of data into out. */
int cache__sha256(cache_conn *c, const uint8_t *data, size_t len,
                  uint8_t out[CACHE_KEY_LEN], cache_error *err);

/* Compresses data into a malloc'd zstd frame (caller frees *out). */
int cache__compress(cache_conn *c, const uint8_t *data, size_t len,
                    uint8_t **out, size_t *outlen, cache_error *err);

/* Checks and decodes a stored artifact: blob is the column value (may be
 * NULL), size the recorded uncompressed size, digest the recorded digest
 * (digest_len bytes). On success returns 0 with a malloc'd *data of *len
 * bytes (NULL data, NULL len: check only). Anything wrong with the stored
 * bytes returns CACHE_ECORRUPT with the reason in err. */
int cache__decode(cache_conn *c, const void *blob, int blob_len, int64_t size,
                  int64_t stored_size, const void *digest, int digest_len,
                  uint8_t **data, size_t *len, cache_error *err);

/* ---- entry rows (entry.c) ---- */

/* Fills info from the CACHE__INFO_COLS columns of st (starting at column 0)
 * and returns the row id. Parts are not read. */
int64_t cache__row_info(sqlite3_stmt *st, cache_info *info);

/* Reads entry `key` with the prepared statement `stmt_id` (?1: the key; its
 * first columns CACHE__INFO_COLS) in a read transaction: `row` gets the
 * entry's row, info filled from it, and returns 0 or an error; no row is
 * CACHE_EMISS. On success the entry's pending touches are laid over *info. */
typedef int (*cache__row_fn)(cache_conn *c, sqlite3_stmt *st, int64_t id,
                             cache_info *info, void *ctx, cache_error *err);
int cache__entry_read(cache_conn *c, int stmt_id,
                      const uint8_t key[CACHE_KEY_LEN], cache_info *info,
                      cache__row_fn row, void *ctx, cache_error *err);

/* ---- touches (touch.c) ---- */

/* Records a hit of key at now_ms. Returns CACHE_ENOMEM if the table could
 * not grow (the hit is then still counted, its touch lost). */
int cache__touch_add(cache_store *s, const uint8_t key[CACHE_KEY_LEN],
                     int64_t now_ms);

/* Adds the pending hits of info->key to info (hits, last_used). */
void cache__touch_overlay(cache_store *s, cache_info *info);

/* Writes all pending touches in one transaction on c; on failure they stay
 * pending. */
int cache__touch_flush(cache_conn *c, cache_error *err);

/* Frees the table. */
void cache__touches_free(cache__touches *t);

#endif
