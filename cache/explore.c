/*
 * explore.c: sources (the request each entry was compiled from) and
 * browsing entries page by page. See explore.h.
 *
 * Statements here are prepared per call rather than kept in the
 * connection's table (internal.h): the explorer runs them once per page a
 * person opens, or once per compile, never on the hit path.
 *
 * A source row shares its entry's id, so ON DELETE CASCADE takes it with
 * the entry wherever an entry is deleted (eviction, Evict, replacement,
 * a corrupt entry dropped). Its bytes are checked on read by the codec
 * (codec.c), as an artifact's are; a corrupt source is dropped, its entry
 * kept.
 */
#include "cache/explore.h"

#include <stdlib.h>
#include <string.h>

#include "cache/internal.h"

#define BROWSE_MAX 1000

/* Prepares sql on c, or fills err. */
static sqlite3_stmt *prepare(cache_conn *c, const char *sql, cache_error *err) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK) {
    cache__sqlite_error(c, rc, "preparing an explorer statement", err);
    sqlite3_finalize(st);
    return NULL;
  }
  return st;
}

/* Runs a statement that returns no row, then finalizes it. */
static int run(cache_conn *c, sqlite3_stmt *st, const char *what,
               cache_error *err) {
  int rc = cache__step_done(c, st, what, err);
  sqlite3_finalize(st);
  return rc;
}

/* The id of entry `key`, or CACHE_EMISS. Inside a transaction. */
static int entry_id(cache_conn *c, const uint8_t *key, int64_t *id,
                    cache_error *err) {
  sqlite3_stmt *st = prepare(c, "SELECT id FROM entries WHERE key = ?1", err);
  if (!st)
    return err ? err->code : CACHE_EIO;
  sqlite3_bind_blob(st, 1, key, CACHE_KEY_LEN, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    *id = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  if (rc == SQLITE_ROW)
    return 0;
  if (rc == SQLITE_DONE)
    return cache__errorf(err, CACHE_EMISS, "no such entry");
  return cache__sqlite_error(c, rc, "finding an entry", err);
}

/* Drops the oldest sources but `keep` while they hold more than budget. */
static int sources_to_budget(cache_conn *c, int64_t keep, uint64_t budget,
                             cache_error *err) {
  if (!budget)
    return 0;
  sqlite3_stmt *sum = prepare(
      c, "SELECT CAST(total(stored_size) AS INTEGER) FROM sources", err);
  if (!sum)
    return err ? err->code : CACHE_EIO;
  int rc = sqlite3_step(sum);
  int64_t total = rc == SQLITE_ROW ? sqlite3_column_int64(sum, 0) : 0;
  sqlite3_finalize(sum);
  if (rc != SQLITE_ROW)
    return cache__sqlite_error(c, rc, "summing sources", err);
  while ((uint64_t)total > budget) {
    sqlite3_stmt *old =
        prepare(c,
                "SELECT id, stored_size FROM sources WHERE id != ?1 "
                "ORDER BY created_ms, id LIMIT 1",
                err);
    if (!old)
      return err ? err->code : CACHE_EIO;
    sqlite3_bind_int64(old, 1, keep);
    rc = sqlite3_step(old);
    int64_t id = rc == SQLITE_ROW ? sqlite3_column_int64(old, 0) : 0;
    int64_t n = rc == SQLITE_ROW ? sqlite3_column_int64(old, 1) : 0;
    sqlite3_finalize(old);
    if (rc == SQLITE_DONE)
      break;
    if (rc != SQLITE_ROW)
      return cache__sqlite_error(c, rc, "choosing a source to drop", err);
    sqlite3_stmt *del = prepare(c, "DELETE FROM sources WHERE id = ?1", err);
    if (!del)
      return err ? err->code : CACHE_EIO;
    sqlite3_bind_int64(del, 1, id);
    if ((rc = run(c, del, "dropping a source", err)) != 0)
      return rc;
    total -= n;
  }
  return 0;
}

int cache_source_put(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                     const uint8_t *data, size_t len, const char *summary,
                     uint64_t budget, cache_error *err) {
  if (!c || !key || (!data && len) || !summary)
    return cache__errorf(err, CACHE_EINVAL, "cache_source_put: NULL argument");
  if (strnlen(summary, CACHE_SUMMARY_MAX + 1) > CACHE_SUMMARY_MAX)
    return cache__errorf(err, CACHE_EINVAL,
                         "cache_source_put: summary longer than %d bytes",
                         CACHE_SUMMARY_MAX);
  if (len > (size_t)INT64_MAX)
    return cache__errorf(err, CACHE_ETOOBIG, "source too large");
  uint8_t digest[CACHE_KEY_LEN];
  int rc = cache__sha256(c, data, len, digest, err);
  uint8_t *z = NULL;
  size_t zlen = 0;
  if (rc == 0)
    rc = cache__compress(c, data, len, &z, &zlen, err);
  if (rc != 0)
    return rc;
  if (budget && zlen > budget) {
    free(z);
    return cache__errorf(err, CACHE_ETOOBIG,
                         "source of %zu bytes (%zu compressed) is over the "
                         "sources' budget of %llu bytes",
                         len, zlen, (unsigned long long)budget);
  }
  rc = cache__begin_write(c, err);
  if (rc != 0) {
    free(z);
    return rc;
  }
  int64_t id = 0;
  rc = entry_id(c, key, &id, err);
  sqlite3_stmt *st =
      rc ? NULL
         : prepare(c,
                   "INSERT OR REPLACE INTO sources (id, digest, size, "
                   "stored_size, created_ms, summary, data) "
                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                   err);
  if (!rc && !st)
    rc = err ? err->code : CACHE_EIO;
  if (st) {
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_blob(st, 2, digest, CACHE_KEY_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)len);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)zlen);
    sqlite3_bind_int64(st, 5, cache__now_ms());
    sqlite3_bind_text(st, 6, summary, -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 7, z, zlen, SQLITE_STATIC);
    rc = run(c, st, "storing a source", err);
  }
  if (rc == 0)
    rc = sources_to_budget(c, id, budget, err);
  if (rc == 0)
    rc = cache__commit_write(c, err);
  else
    cache__rollback(c);
  free(z);
  return rc;
}

/* Drops the source of entry `id` (found corrupt); best effort. */
static void drop_source(cache_conn *c, int64_t id) {
  cache_error e;
  if (cache__begin_write(c, &e) != 0)
    return;
  sqlite3_stmt *st = prepare(c, "DELETE FROM sources WHERE id = ?1", &e);
  int rc = st ? 0 : CACHE_EIO;
  if (st) {
    sqlite3_bind_int64(st, 1, id);
    rc = run(c, st, "dropping a corrupt source", &e);
  }
  if (rc == 0)
    cache__commit_write(c, &e);
  else
    cache__rollback(c);
}

int cache_source_get(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                     uint8_t **data, size_t *len, char **summary,
                     cache_error *err) {
  if (!c || !key || (!data) != (!len) || (!data && !summary))
    return cache__errorf(err, CACHE_EINVAL, "cache_source_get: NULL argument");
  if (data) {
    *data = NULL;
    *len = 0;
  }
  if (summary)
    *summary = NULL;
  int rc = cache__begin_read(c, err);
  if (rc != 0)
    return rc;
  sqlite3_stmt *st = prepare(c,
                             "SELECT s.id, s.digest, s.size, s.stored_size, "
                             "s.summary, s.data FROM sources s "
                             "JOIN entries e ON e.id = s.id WHERE e.key = ?1",
                             err);
  if (!st) {
    cache__end_read(c);
    return err ? err->code : CACHE_EIO;
  }
  sqlite3_bind_blob(st, 1, key, CACHE_KEY_LEN, SQLITE_STATIC);
  int step = sqlite3_step(st);
  int64_t id = 0;
  bool corrupt = false;
  if (step == SQLITE_ROW) {
    id = sqlite3_column_int64(st, 0);
    rc = data ? cache__decode(
                    c, sqlite3_column_blob(st, 5), sqlite3_column_bytes(st, 5),
                    sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3),
                    sqlite3_column_blob(st, 1), sqlite3_column_bytes(st, 1),
                    data, len, err)
              : 0;
    corrupt = rc == CACHE_ECORRUPT;
    const unsigned char *s = sqlite3_column_text(st, 4);
    if (rc == 0 && summary) {
      *summary = strdup(s ? (const char *)s : "");
      if (!*summary && data) {
        free(*data);
        *data = NULL;
      }
      if (!*summary) {
        rc = cache__errorf(err, CACHE_ENOMEM, "out of memory");
      }
    }
  } else {
    rc = cache__no_row(c, step, "no source kept for this entry",
                       "reading a source", err);
  }
  sqlite3_finalize(st);
  cache__end_read(c);
  if (corrupt)
    drop_source(c, id);
  return rc;
}

int cache_source_totals(cache_conn *c, uint64_t *count, uint64_t *stored,
                        uint64_t *raw, cache_error *err) {
  sqlite3_stmt *st = prepare(c,
                             "SELECT count(*), "
                             "CAST(total(stored_size) AS INTEGER), "
                             "CAST(total(size) AS INTEGER) FROM sources",
                             err);
  if (!st)
    return err ? err->code : CACHE_EIO;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *count = (uint64_t)sqlite3_column_int64(st, 0);
    *stored = (uint64_t)sqlite3_column_int64(st, 1);
    *raw = (uint64_t)sqlite3_column_int64(st, 2);
  }
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? 0 : cache__sqlite_error(c, rc, "counting", err);
}

/* cache_peek's row: the entry's bytes, decoded. */
struct peek_out {
  uint8_t **data;
  size_t *len;
};
static int peek_row(cache_conn *c, sqlite3_stmt *st, int64_t id,
                    cache_info *info, void *ctx, cache_error *err) {
  (void)id, (void)info;
  struct peek_out *out = ctx;
  return cache__decode(c, sqlite3_column_blob(st, CACHE__INFO_NCOLS),
                       sqlite3_column_bytes(st, CACHE__INFO_NCOLS),
                       sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4),
                       sqlite3_column_blob(st, 2), sqlite3_column_bytes(st, 2),
                       out->data, out->len, err);
}

int cache_peek(cache_conn *c, const uint8_t key[CACHE_KEY_LEN], uint8_t **data,
               size_t *len, cache_info *info, cache_error *err) {
  if (!c || !key || !data || !len || !info)
    return cache__errorf(err, CACHE_EINVAL, "cache_peek: NULL argument");
  *data = NULL;
  *len = 0;
  struct peek_out out = {data, len};
  return cache__entry_read(c, CACHE__STMT_ENTRY_GET, key, info, peek_row, &out,
                           err);
}

/* ---- browsing ---- */

static const char *const order_names[] = {"last_used", "created",
                                          "compile_time", "hits", "size"};
static const char *const order_cols[] = {"e.last_used_ms", "e.created_ms",
                                         "e.compile_us", "e.hits", "e.size"};

const char *cache_order_name(cache_order o) {
  return (unsigned)o < 5 ? order_names[o] : "?";
}

int cache_order_parse(const char *name) {
  for (int i = 0; name && i < 5; i++)
    if (!strcmp(name, order_names[i]))
      return i;
  return -1;
}

typedef struct row {
  cache_info info;
  char *summary; /* NULL: no source */
} row;

int cache_browse(cache_conn *c, cache_order order, int64_t offset, int limit,
                 int (*fn)(const cache_info *info, const char *summary,
                           void *ctx),
                 void *ctx, cache_error *err) {
  if (!c || !fn || (unsigned)order >= 5 || offset < 0 || limit < 0)
    return cache__errorf(err, CACHE_EINVAL, "cache_browse: bad argument");
  if (limit > BROWSE_MAX)
    limit = BROWSE_MAX;
  char sql[512];
  snprintf(sql, sizeof sql,
           "SELECT " CACHE__INFO_COLS ", s.summary FROM entries e "
           "LEFT JOIN sources s ON s.id = e.id "
           "ORDER BY %s DESC, e.id DESC LIMIT ?1 OFFSET ?2",
           order_cols[order]);
  row *rows = calloc((size_t)limit + 1, sizeof *rows);
  if (!rows)
    return cache__errorf(err, CACHE_ENOMEM, "out of memory");
  int n = 0, rc = cache__begin_read(c, err);
  bool began = rc == 0;
  sqlite3_stmt *st = rc ? NULL : prepare(c, sql, err);
  if (!rc && !st)
    rc = err ? err->code : CACHE_EIO;
  if (st) {
    sqlite3_bind_int(st, 1, limit);
    sqlite3_bind_int64(st, 2, offset);
    int step = SQLITE_DONE;
    while (n < limit && (step = sqlite3_step(st)) == SQLITE_ROW) {
      cache__row_info(st, &rows[n].info);
      const unsigned char *s = sqlite3_column_text(st, CACHE__INFO_NCOLS);
      if (s && !(rows[n].summary = strdup((const char *)s))) {
        rc = cache__errorf(err, CACHE_ENOMEM, "out of memory");
        break;
      }
      n++;
    }
    if (!rc && n < limit && step != SQLITE_DONE)
      rc = cache__sqlite_error(c, step, "browsing entries", err);
    sqlite3_finalize(st);
  }
  if (began)
    cache__end_read(c);
  for (int i = 0; i < n && rc == 0; i++) {
    cache__touch_overlay(c->store, &rows[i].info);
    if (fn(&rows[i].info, rows[i].summary, ctx))
      break;
  }
  for (int i = 0; i < n; i++)
    free(rows[i].summary);
  free(rows);
  return rc;
}
