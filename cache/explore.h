/*
 * explore.h: what the compile explorer (daemon/explorer.c) reads from and
 * keeps in the store, beside the artifacts of cache.h.
 *
 * Sources. The daemon does not need the request an artifact was compiled
 * from once it has the artifact, but a person looking at the artifact does:
 * the graph with its nodes' stack traces, and every pass's IR, which the
 * explorer derives again from it. So the daemon may keep, per entry, the
 * request as opaque bytes (stored as one zstd frame with its SHA-256,
 * checked on every read exactly as artifacts are) and a short summary (a
 * JSON object the daemon writes; the store keeps it as text).
 *
 * A source belongs to its entry: it goes when the entry goes (eviction,
 * Evict, replacement), in the same transaction. Sources have a byte budget
 * of their own, apart from the artifacts' cap (cache_config.max_bytes),
 * so that keeping them never evicts an artifact: past the budget the
 * oldest sources are dropped, their entries stay.
 *
 * Browsing. Entries page by page in a chosen order, each with its source's
 * summary when it has one.
 *
 * Errors as in cache.h; nothing here logs.
 */
#ifndef CACHE_EXPLORE_H
#define CACHE_EXPLORE_H

#include "cache/cache.h"

/* Longest summary kept (bytes, NUL excluded); longer ones are refused. */
#define CACHE_SUMMARY_MAX 4096

/* Stores (or replaces) the source of entry `key`: `data` (len bytes) and
 * `summary` (NUL-terminated text). Then, while sources hold more than
 * `budget` stored (compressed) bytes, drops the oldest other sources (0: no
 * budget). CACHE_EMISS when there is no such entry (evicted meanwhile);
 * CACHE_ETOOBIG when this one alone is over the budget. */
int cache_source_put(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                     const uint8_t *data, size_t len, const char *summary,
                     uint64_t budget, cache_error *err);

/* Reads the source of entry `key`: *data is malloc'd (the caller frees),
 * *summary too when summary is not NULL. CACHE_EMISS when the entry or its
 * source is absent; CACHE_ECORRUPT (and the source dropped) when its bytes
 * fail their checks. With data and len NULL, only the summary is read. */
int cache_source_get(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                     uint8_t **data, size_t *len, char **summary,
                     cache_error *err);

/* Reads entry `key` as cache_get does (every check), but as a look, not a
 * use: no hit is counted, its last use and eviction priority stay, and a
 * corrupt entry is reported (CACHE_ECORRUPT) but left for a real read to
 * drop. */
int cache_peek(cache_conn *c, const uint8_t key[CACHE_KEY_LEN], uint8_t **data,
               size_t *len, cache_info *info, cache_error *err);

/* What sources hold: how many, and their stored and raw bytes. */
int cache_source_totals(cache_conn *c, uint64_t *count, uint64_t *stored,
                        uint64_t *raw, cache_error *err);

typedef enum cache_order {
  CACHE_BY_LAST_USED,    /* most recently used first */
  CACHE_BY_CREATED,      /* newest first */
  CACHE_BY_COMPILE_TIME, /* slowest compile first */
  CACHE_BY_HITS,         /* most hits first */
  CACHE_BY_SIZE,         /* largest artifact first */
} cache_order;

/* Names of the orders ("last_used", "created", "compile_time", "hits",
 * "size"); cache_order_parse returns -1 for an unknown name. */
const char *cache_order_name(cache_order o);
int cache_order_parse(const char *name);

/* Calls fn for up to `limit` entries (at most 1000) after skipping `offset`,
 * in `order`, ties broken by newest id; `summary` is the entry's source
 * summary or NULL when it has none. Parts are not read (nparts 0); hits and
 * last use include touches not yet flushed. fn must not use the connection;
 * it stops the walk by returning non-zero. */
int cache_browse(cache_conn *c, cache_order order, int64_t offset, int limit,
                 int (*fn)(const cache_info *info, const char *summary,
                           void *ctx),
                 void *ctx, cache_error *err);

#endif
