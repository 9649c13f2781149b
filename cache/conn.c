/*
 * conn.c: one sqlite connection of the store, and the small helpers every
 * operation uses on it: errors, prepared statements, transactions.
 *
 * A connection belongs to one thread (sqlite is opened in its multi-thread
 * mode, SQLITE_OPEN_NOMUTEX: no locking inside the connection, so a
 * connection must never be used by two threads at once). Each connection
 * prepares a statement the first time it runs it and keeps it until it
 * closes, so the hot path never parses SQL.
 *
 * Pragmas, per connection:
 *   busy_timeout   writers queue on each other for up to cfg.busy_timeout_ms.
 *   synchronous=NORMAL   in WAL mode this fsyncs the WAL only at checkpoints,
 *                  not at every commit. That is enough for a cache: the
 *                  database stays consistent after any crash of the process
 *                  or the machine; a power loss can lose at most the last
 *                  transactions committed before it, which are entries we
 *                  can recompile. FULL would cost an fsync per put.
 *   foreign_keys   parts and blobs go when their entry goes (ON DELETE
 *                  CASCADE).
 *   journal_size_limit   artifacts are large, so one busy moment can grow
 *                  the WAL far; after a checkpoint it is cut back to 64 MiB.
 *   cache_size     8 MiB of page cache (the default is 2 MiB): a 2 MB
 *                  artifact then stays cached, and re-reading it (many ranks
 *                  asking for one graph) costs a memcpy instead of a pread per
 *                  page, about 5x less for the sqlite part of the get. mmap
 *                  would do as well, but turns an I/O error into SIGBUS.
 * Writes start with BEGIN IMMEDIATE: the write lock is taken (waiting through
 * the busy handler) before anything is read, so a write transaction never
 * fails halfway with SQLITE_BUSY because another connection wrote first.
 */
#include "cache/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const stmt_sql[CACHE__STMT_COUNT] = {
#define X(name, sql) sql,
    CACHE__STMTS(X)
#undef X
};

int cache__errorf(cache_error *err, int code, const char *fmt, ...) {
  if (!err)
    return code;
  va_list ap;
  va_start(ap, fmt);
  err->code = code;
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return code;
}

int cache__code_of(int rc) {
  switch (rc & 0xff) {
  case SQLITE_OK:
  case SQLITE_DONE:
  case SQLITE_ROW:
    return 0;
  case SQLITE_BUSY:
  case SQLITE_LOCKED:
    return CACHE_EBUSY;
  case SQLITE_NOMEM:
    return CACHE_ENOMEM;
  case SQLITE_TOOBIG:
    return CACHE_ETOOBIG;
  default:
    return CACHE_EIO;
  }
}

int cache__sqlite_error(cache_conn *c, int rc, const char *what,
                        cache_error *err) {
  int primary = rc & 0xff;
  if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB)
    cache__note_malformed(c->store);
  const char *msg = c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc);
  return cache__errorf(err, cache__code_of(rc), "%s: %s (sqlite code %d)", what,
                       msg, rc);
}

int cache__no_row(cache_conn *c, int step, const char *miss, const char *what,
                  cache_error *err) {
  if (step == SQLITE_DONE)
    return cache__errorf(err, CACHE_EMISS, "%s", miss);
  return cache__sqlite_error(c, step, what, err);
}

sqlite3_stmt *cache__stmt(cache_conn *c, int id, cache_error *err) {
  sqlite3_stmt *st = c->stmt[id];
  if (st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
  }
  int rc = sqlite3_prepare_v3(c->db, stmt_sql[id], -1,
                              SQLITE_PREPARE_PERSISTENT, &st, NULL);
  if (rc != SQLITE_OK) {
    cache__sqlite_error(c, rc, "preparing a statement", err);
    sqlite3_finalize(st);
    return NULL;
  }
  c->stmt[id] = st;
  return st;
}

int cache__step_done(cache_conn *c, sqlite3_stmt *st, const char *what,
                     cache_error *err) {
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  if (rc != SQLITE_DONE)
    return cache__sqlite_error(c, rc, what, err);
  return 0;
}

static int run(cache_conn *c, int id, const char *what, cache_error *err) {
  sqlite3_stmt *st = cache__stmt(c, id, err);
  if (!st)
    return err ? err->code : CACHE_EIO;
  return cache__step_done(c, st, what, err);
}

int cache__begin_read(cache_conn *c, cache_error *err) {
  return run(c, CACHE__STMT_BEGIN_READ, "starting a read", err);
}

int cache__begin_write(cache_conn *c, cache_error *err) {
  return run(c, CACHE__STMT_BEGIN_WRITE, "starting a write", err);
}

void cache__end_read(cache_conn *c) {
  /* COMMIT of a read-only transaction only releases the snapshot. */
  if (run(c, CACHE__STMT_COMMIT, "ending a read", NULL) != 0)
    cache__rollback(c);
}

void cache__rollback(cache_conn *c) {
  if (!sqlite3_get_autocommit(c->db))
    run(c, CACHE__STMT_ROLLBACK, "rolling back", NULL);
}

static uint64_t col_u64(sqlite3_stmt *st, int i) {
  sqlite3_int64 v = sqlite3_column_int64(st, i);
  return v < 0 ? 0 : (uint64_t)v;
}

int cache__totals_read(cache_conn *c, cache__totals *t, cache_error *err) {
  sqlite3_stmt *st = cache__stmt(c, CACHE__STMT_STATE_GET, err);
  if (!st)
    return err ? err->code : CACHE_EIO;
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_reset(st);
    if (rc == SQLITE_DONE)
      return cache__errorf(err, CACHE_EIO, "the state row is missing");
    return cache__sqlite_error(c, rc, "reading totals", err);
  }
  t->entries = col_u64(st, 0);
  t->bytes = col_u64(st, 1);
  t->raw_bytes = col_u64(st, 2);
  t->failures = col_u64(st, 3);
  t->gen = col_u64(st, 4);
  t->clock = sqlite3_column_double(st, 5);
  sqlite3_reset(st);
  return 0;
}

int cache__commit_write(cache_conn *c, cache_error *err) {
  cache__totals t;
  int rc = cache__totals_read(c, &t, err);
  if (rc == 0)
    rc = run(c, CACHE__STMT_COMMIT, "committing", err);
  if (rc != 0) {
    cache__rollback(c);
    return rc;
  }
  cache__publish(c->store, &t);
  return 0;
}

/* Runs a pragma that returns nothing we need. */
static int pragma(cache_conn *c, const char *sql, cache_error *err) {
  int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
  if (rc != SQLITE_OK)
    return cache__sqlite_error(c, rc, sql, err);
  return 0;
}

int cache__conn_new(cache_store *s, cache_conn **out, cache_error *err) {
  *out = NULL;
  cache_conn *c = calloc(1, sizeof *c);
  if (!c)
    return cache__errorf(err, CACHE_ENOMEM, "out of memory");
  c->store = s;
  c->cctx = ZSTD_createCCtx();
  c->dctx = ZSTD_createDCtx();
  c->md = EVP_MD_CTX_new();
  if (!c->cctx || !c->dctx || !c->md) {
    cache__conn_free(c);
    return cache__errorf(err, CACHE_ENOMEM, "out of memory");
  }
  size_t zr = ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_compressionLevel,
                                     s->cfg.zstd_level);
  if (!ZSTD_isError(zr))
    zr = ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_contentSizeFlag, 1);
  if (ZSTD_isError(zr)) {
    cache__conn_free(c);
    return cache__errorf(err, CACHE_EINVAL, "zstd: %s", ZSTD_getErrorName(zr));
  }
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(s->path, &c->db, flags, NULL);
  if (rc != SQLITE_OK) {
    rc = cache__sqlite_error(c, rc, "opening the database", err);
    cache__conn_free(c);
    return rc;
  }
  sqlite3_extended_result_codes(c->db, 1);
  sqlite3_busy_timeout(c->db, (int)s->cfg.busy_timeout_ms);
  rc = pragma(c, "PRAGMA synchronous = NORMAL", err);
  if (rc == 0)
    rc = pragma(c, "PRAGMA foreign_keys = ON", err);
  if (rc == 0)
    rc = pragma(c, "PRAGMA journal_size_limit = 67108864", err);
  if (rc == 0)
    rc = pragma(c, "PRAGMA cache_size = -8192", err);
  if (rc != 0) {
    cache__conn_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

void cache__conn_free(cache_conn *c) {
  if (!c)
    return;
  for (int i = 0; i < CACHE__STMT_COUNT; i++)
    sqlite3_finalize(c->stmt[i]);
  /* sqlite3_close_v2 defers the close if anything is still open. */
  sqlite3_close_v2(c->db);
  ZSTD_freeCCtx(c->cctx);
  ZSTD_freeDCtx(c->dctx);
  EVP_MD_CTX_free(c->md);
  free(c);
}

int cache_conn_open(cache_store *s, cache_conn **out, cache_error *err) {
  if (!s || !out)
    return cache__errorf(err, CACHE_EINVAL, "cache_conn_open: NULL argument");
  return cache__conn_new(s, out, err);
}

void cache_conn_close(cache_conn *c) {
  if (c)
    cache__rollback(c);
  cache__conn_free(c);
}
