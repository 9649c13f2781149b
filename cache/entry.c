/*
 * entry.c: the operations on entries and failure records.
 *
 * Reads run in a read transaction (one snapshot for the row and its parts);
 * writes in one IMMEDIATE transaction each, committed by
 * cache__commit_write, which also publishes the new sizes.
 *
 * get: read the row and blob, decode (codec.c checks everything), and on
 * success count the hit and queue its touch (touch.c). A corrupt entry is
 * deleted by its id in a separate write transaction: ids are never reused
 * (AUTOINCREMENT), so if another thread replaced the entry meanwhile, the
 * healthy replacement is not touched.
 *
 * put: digest and compress outside any transaction (the slow part), then in
 * one transaction: delete the old entry under the key (parts and blob go by
 * cascade), insert the new one, then evict by GDSF priority until the stored
 * bytes fit the cap. The new entry is never its own victim: it fits (larger
 * ones are refused before the transaction), so evicting the others is
 * always enough. Each eviction raises the clock to the victim's priority,
 * which is what makes entries nobody uses age out: a later entry or hit
 * starts from the higher clock.
 *
 * list and find_by_part walk in pages of PAGE rows by keyset (last_used,
 * id), and call the callback between pages with no statement running, so a
 * callback may use the same connection (even to evict what it is shown).
 */
#include "cache/internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows fetched per page by list and find_by_part. */
#define PAGE 64

/* Failure messages longer than this are cut. */
#define FAIL_MSG_MAX 65536

static uint64_t col_u64(sqlite3_stmt *st, int i) {
  sqlite3_int64 v = sqlite3_column_int64(st, i);
  return v < 0 ? 0 : (uint64_t)v;
}

/* Copies a BLOB column into a fixed buffer, zero-padded or cut. */
static void col_fixed(sqlite3_stmt *st, int i, uint8_t *out, size_t n) {
  const void *p = sqlite3_column_blob(st, i);
  size_t len = (size_t)sqlite3_column_bytes(st, i);
  memset(out, 0, n);
  if (p)
    memcpy(out, p, len < n ? len : n);
}

/* Copies a TEXT column into a fixed buffer of cap bytes, NUL-terminated
 * (cut when longer, which only a database edited by hand holds; NULL:
 * empty). */
static void col_text(sqlite3_stmt *st, int i, char *out, size_t cap) {
  const unsigned char *t = sqlite3_column_text(st, i);
  size_t len = t ? (size_t)sqlite3_column_bytes(st, i) : 0;
  if (len >= cap)
    len = cap - 1;
  if (len)
    memcpy(out, t, len);
  out[len] = '\0';
}

/* First bytes of a key in hex, for messages. */
static const char *key_hex(const uint8_t *key, char buf[17]) {
  for (int i = 0; i < 8; i++)
    snprintf(buf + 2 * i, 3, "%02x", key[i]);
  return buf;
}

int64_t cache__row_info(sqlite3_stmt *st, cache_info *info) {
  memset(info, 0, sizeof *info);
  col_fixed(st, 1, info->key, CACHE_KEY_LEN);
  col_fixed(st, 2, info->digest, CACHE_KEY_LEN);
  info->size = col_u64(st, 3);
  info->stored_size = col_u64(st, 4);
  info->compile_us = col_u64(st, 5);
  info->created = sqlite3_column_int64(st, 6) / 1000;
  info->last_used = sqlite3_column_int64(st, 7) / 1000;
  info->hits = col_u64(st, 8);
  const unsigned char *kid = sqlite3_column_text(st, 10);
  int kidlen = sqlite3_column_bytes(st, 10);
  if (sqlite3_column_type(st, 9) == SQLITE_BLOB &&
      sqlite3_column_bytes(st, 9) == CACHE_SIG_LEN && kid && kidlen > 0 &&
      kidlen < CACHE_SIG_KEY_MAX) {
    info->is_signed = true;
    memcpy(info->sig.mac, sqlite3_column_blob(st, 9), CACHE_SIG_LEN);
    memcpy(info->sig.key_id, kid, (size_t)kidlen);
    info->sig.key_id[kidlen] = '\0';
  }
  cache_label *l = &info->label;
  col_text(st, 11, l->name, sizeof l->name);
  col_text(st, 12, l->file, sizeof l->file);
  sqlite3_int64 line = sqlite3_column_int64(st, 13);
  l->line = line > 0 && line <= INT32_MAX ? (int32_t)line : 0;
  col_text(st, 14, l->host, sizeof l->host);
  return sqlite3_column_int64(st, 0);
}

/* Reads the parts of entry `id` into info. Malformed part rows are skipped
 * and reported through *bad: parts only explain misses, so a bad one never
 * costs the entry (cache_verify_all reports it). */
static int read_parts(cache_conn *c, int64_t id, cache_info *info, bool *bad,
                      cache_error *err) {
  sqlite3_stmt *st = cache__stmt(c, CACHE__STMT_PARTS_GET, err);
  if (!st)
    return err ? err->code : CACHE_EIO;
  sqlite3_bind_int64(st, 1, id);
  int rc;
  info->nparts = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const unsigned char *name = sqlite3_column_text(st, 0);
    int namelen = sqlite3_column_bytes(st, 0);
    const void *digest = sqlite3_column_blob(st, 1);
    int digestlen = sqlite3_column_bytes(st, 1);
    if (!name || namelen <= 0 || namelen >= CACHE_PART_NAME_MAX ||
        strlen((const char *)name) != (size_t)namelen || !digest ||
        digestlen != CACHE_KEY_LEN || info->nparts >= CACHE_MAX_PARTS) {
      *bad = true;
      continue;
    }
    cache_part *p = &info->parts[info->nparts++];
    memset(p->name, 0, sizeof p->name);
    memcpy(p->name, name, (size_t)namelen);
    memcpy(p->digest, digest, CACHE_KEY_LEN);
  }
  sqlite3_reset(st);
  if (rc != SQLITE_DONE)
    return cache__sqlite_error(c, rc, "reading parts", err);
  return 0;
}

/* Deletes entry `id`, found corrupt. Counted only if this call deleted it
 * (two threads may find the same corrupt entry). */
static int drop_corrupt(cache_conn *c, int64_t id) {
  cache_error e;
  int changes = 0;
  int rc = cache__begin_write(c, &e);
  if (rc != 0)
    return rc;
  sqlite3_stmt *st = cache__stmt(c, CACHE__STMT_ENTRY_DELETE_ID, &e);
  rc = st ? 0 : e.code;
  if (st) {
    sqlite3_bind_int64(st, 1, id);
    rc = cache__step_done(c, st, "dropping a corrupt entry", &e);
    changes = sqlite3_changes(c->db);
  }
  if (rc == 0)
    rc = cache__commit_write(c, &e);
  else
    cache__rollback(c);
  if (rc == 0 && changes > 0)
    atomic_fetch_add(&c->store->corrupt_dropped, 1);
  return rc;
}

int cache_get(cache_conn *c, const uint8_t key[CACHE_KEY_LEN], uint8_t **data,
              size_t *len, cache_info *info, cache_error *err) {
  if (!c || !key || !data || !len)
    return cache__errorf(err, CACHE_EINVAL, "cache_get: NULL argument");
  *data = NULL;
  *len = 0;
  cache_store *s = c->store;
  int rc = cache__begin_read(c, err);
  if (rc != 0)
    return rc;
  sqlite3_stmt *st = cache__stmt(c, CACHE__STMT_ENTRY_GET, err);
  if (!st) {
    cache__end_read(c);
    return err ? err->code : CACHE_EIO;
  }
  sqlite3_bind_blob(st, 1, key, CACHE_KEY_LEN, SQLITE_STATIC);
  int step = sqlite3_step(st);
  if (step != SQLITE_ROW) {
    sqlite3_reset(st);
    cache__end_read(c);
    if (step != SQLITE_DONE)
      return cache__sqlite_error(c, step, "reading an entry", err);
    atomic_fetch_add(&s->misses, 1);
    return cache__errorf(err, CACHE_EMISS, "no such entry");
  }
  cache_info tmp;
  int64_t id = cache__row_info(st, &tmp);
  const void *blob = sqlite3_column_type(st, CACHE__INFO_NCOLS) == SQLITE_BLOB
                         ? sqlite3_column_blob(st, CACHE__INFO_NCOLS)
                         : NULL;
  int blob_len = blob ? sqlite3_column_bytes(st, CACHE__INFO_NCOLS) : 0;
  const void *digest = sqlite3_column_type(st, 2) == SQLITE_BLOB
                           ? sqlite3_column_blob(st, 2)
                           : NULL;
  int digest_len = digest ? sqlite3_column_bytes(st, 2) : 0;
  cache_error why = {0};
  rc = cache__decode(c, blob, blob_len, sqlite3_column_int64(st, 3),
                     sqlite3_column_int64(st, 4), digest, digest_len, data, len,
                     &why);
  bool bad_parts = false; /* parts are not the artifact: skipped, not fatal */
  if (rc == 0 && info)
    rc = read_parts(c, id, &tmp, &bad_parts, &why);
  sqlite3_reset(st);
  cache__end_read(c);
  if (rc != 0) {
    free(*data);
    *data = NULL;
    *len = 0;
  }
  if (rc == CACHE_ECORRUPT) {
    atomic_fetch_add(&s->misses, 1);
    char hex[17];
    int drc = drop_corrupt(c, id);
    return cache__errorf(err, CACHE_ECORRUPT, "entry %s... was corrupt (%s)%s",
                         key_hex(key, hex), why.msg,
                         drc == 0 ? "; dropped" : "; dropping it failed");
  }
  if (rc != 0) {
    if (err)
      *err = why;
    return rc;
  }
  atomic_fetch_add(&s->hits, 1);
  atomic_fetch_add(&s->compile_us_saved, tmp.compile_us);
  cache__touch_add(s, key, cache__now_ms());
  if (info) {
    cache__touch_overlay(s, &tmp);
    *info = tmp;
  }
  return 0;
}

int cache__entry_read(cache_conn *c, int stmt_id,
                      const uint8_t key[CACHE_KEY_LEN], cache_info *info,
                      cache__row_fn row, void *ctx, cache_error *err) {
  int rc = cache__begin_read(c, err);
  if (rc != 0)
    return rc;
  sqlite3_stmt *st = cache__stmt(c, stmt_id, err);
  if (!st) {
    cache__end_read(c);
    return err ? err->code : CACHE_EIO;
  }
  sqlite3_bind_blob(st, 1, key, CACHE_KEY_LEN, SQLITE_STATIC);
  int step = sqlite3_step(st);
  if (step == SQLITE_ROW) {
    int64_t id = cache__row_info(st, info);
    rc = row(c, st, id, info, ctx, err);
  } else {
    rc = cache__no_row(c, step, "no such entry", "reading an entry", err);
  }
  sqlite3_reset(st);
  cache__end_read(c);
  if (rc == 0)
    cache__touch_overlay(c->store, info);
  return rc;
}

/* cache_info_get's row: the entry's parts. */
static int info_row(cache_conn *c, sqlite3_stmt *st, int64_t id,
                    cache_info *info, void *ctx, cache_error *err) {
  (void)st, (void)ctx;
  bool bad = false;
  return read_parts(c, id, info, &bad, err);
}

int cache_info_get(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                   cache_info *info, cache_error *err) {
  if (!c || !key || !info)
    return cache__errorf(err, CACHE_EINVAL, "cache_info_get: NULL argument");
  return cache__entry_read(c, CACHE__STMT_ENTRY_INFO, key, info, info_row, NULL,
                           err);
}

static int check_parts(const cache_part *parts, int nparts, cache_error *err) {
  if (nparts < 0 || nparts > CACHE_MAX_PARTS || (nparts > 0 && !parts))
    return cache__errorf(err, CACHE_EINVAL, "cache_put: %d parts (max %d)",
                         nparts, CACHE_MAX_PARTS);
  for (int i = 0; i < nparts; i++) {
    const char *end = memchr(parts[i].name, '\0', CACHE_PART_NAME_MAX);
    if (!end || end == parts[i].name)
      return cache__errorf(err, CACHE_EINVAL,
                           "cache_put: part %d has an empty or unterminated "
                           "name",
                           i);
    for (int j = 0; j < i; j++)
      if (strcmp(parts[i].name, parts[j].name) == 0)
        return cache__errorf(err, CACHE_EINVAL,
                             "cache_put: part name '%s' given twice",
                             parts[i].name);
  }
  return 0;
}

/* Evicts by lowest priority, never `keep`, until bytes fit the cap. */
static int evict_to_cap(cache_conn *c, int64_t keep, uint64_t *evicted,
                        cache_error *err) {
  uint64_t max = c->store->cfg.max_bytes;
  if (max == 0)
    return 0;
  cache__totals t;
  int rc = cache__totals_read(c, &t, err);
  double clock = t.clock;
  while (rc == 0 && t.bytes > max) {
    sqlite3_stmt *st = cache__stmt(c, CACHE__STMT_EVICT_VICTIM, err);
    if (!st)
      return err ? err->code : CACHE_EIO;
    sqlite3_bind_int64(st, 1, keep);
    int step = sqlite3_step(st);
    if (step != SQLITE_ROW) {
      sqlite3_reset(st);
      if (step != SQLITE_DONE)
        return cache__sqlite_error(c, step, "choosing a victim", err);
      break; /* only `keep` is left */
    }
    int64_t victim = sqlite3_column_int64(st, 0);
    double prio = sqlite3_column_double(st, 1);
    sqlite3_reset(st);
    st = cache__stmt(c, CACHE__STMT_ENTRY_DELETE_ID, err);
    if (!st)
      return err ? err->code : CACHE_EIO;
    sqlite3_bind_int64(st, 1, victim);
    rc = cache__step_done(c, st, "evicting", err);
    if (rc != 0)
      return rc;
    (*evicted)++;
    if (prio > clock)
      clock = prio;
    rc = cache__totals_read(c, &t, err);
  }
  if (rc == 0 && clock > t.clock) {
    sqlite3_stmt *st = cache__stmt(c, CACHE__STMT_STATE_SET_CLOCK, err);
    if (!st)
      return err ? err->code : CACHE_EIO;
    sqlite3_bind_double(st, 1, clock);
    rc = cache__step_done(c, st, "advancing the clock", err);
  }
  return rc;
}

/* The body of a put's transaction. */
static int put_rows(cache_conn *c, const uint8_t *key, const cache_meta *m,
                    const uint8_t *digest, size_t len, const uint8_t *z,
                    size_t zlen, uint64_t *evicted, cache_error *err) {
  const cache_sig *sig = m->sig;
  const cache_label *label =
      m->label && cache_label_present(m->label) ? m->label : NULL;
  sqlite3_stmt *st = cache__stmt(c, CACHE__STMT_ENTRY_DELETE_KEY, err);
  if (!st)
    return err ? err->code : CACHE_EIO;
  sqlite3_bind_blob(st, 1, key, CACHE_KEY_LEN, SQLITE_STATIC);
  int rc = cache__step_done(c, st, "replacing an entry", err);
  if (rc != 0)
    return rc;
  if (!(st = cache__stmt(c, CACHE__STMT_ENTRY_INSERT, err)))
    return err ? err->code : CACHE_EIO;
  sqlite3_bind_blob(st, 1, key, CACHE_KEY_LEN, SQLITE_STATIC);
  sqlite3_bind_blob(st, 2, digest, CACHE_KEY_LEN, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)len);
  sqlite3_bind_int64(st, 4, (sqlite3_int64)zlen);
  sqlite3_bind_int64(st, 5,
                     m->compile_us > INT64_MAX ? INT64_MAX
                                               : (sqlite3_int64)m->compile_us);
  sqlite3_bind_int64(st, 6, cache__now_ms());
  if (sig) {
    sqlite3_bind_blob(st, 7, sig->mac, CACHE_SIG_LEN, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, sig->key_id, -1, SQLITE_STATIC);
  } else {
    sqlite3_bind_null(st, 7);
    sqlite3_bind_null(st, 8);
  }
  if (label) { /* unbound parameters are NULL: no label */
    sqlite3_bind_text(st, 9, label->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 10, label->file, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 11, label->line);
    sqlite3_bind_text(st, 12, label->host, -1, SQLITE_STATIC);
  }
  if ((rc = cache__step_done(c, st, "inserting an entry", err)) != 0)
    return rc;
  int64_t id = sqlite3_last_insert_rowid(c->db);
  if (!(st = cache__stmt(c, CACHE__STMT_BLOB_INSERT, err)))
    return err ? err->code : CACHE_EIO;
  sqlite3_bind_int64(st, 1, id);
  sqlite3_bind_blob64(st, 2, z, zlen, SQLITE_STATIC);
  rc = cache__step_done(c, st, "storing the artifact", err);
  sqlite3_clear_bindings(st); /* drop the pointer to z */
  if (rc != 0)
    return rc;
  for (int i = 0; i < m->nparts; i++) {
    if (!(st = cache__stmt(c, CACHE__STMT_PART_INSERT, err)))
      return err ? err->code : CACHE_EIO;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, m->parts[i].name, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 3, m->parts[i].digest, CACHE_KEY_LEN, SQLITE_STATIC);
    if ((rc = cache__step_done(c, st, "storing a part", err)) != 0)
      return rc;
  }
  return evict_to_cap(c, id, evicted, err);
}

int cache_put(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
              const cache_part *parts, int nparts, const uint8_t *data,
              size_t len, uint64_t compile_us, cache_error *err) {
  return cache_put_signed(c, key, parts, nparts, data, len, compile_us, NULL,
                          err);
}

int cache_put_signed(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                     const cache_part *parts, int nparts, const uint8_t *data,
                     size_t len, uint64_t compile_us, const cache_sig *sig,
                     cache_error *err) {
  cache_meta m = {
      .parts = parts, .nparts = nparts, .compile_us = compile_us, .sig = sig};
  return cache_put_entry(c, key, data, len, &m, err);
}

bool cache_label_present(const cache_label *l) {
  return l->name[0] || l->file[0] || l->host[0] || l->line != 0;
}

/* A label's strings end within their arrays and its line is not negative:
 * whatever the caller's buffers held, the store writes bounded text. */
static int check_label(const cache_label *l, cache_error *err) {
  static const struct {
    const char *name;
    size_t offset, size;
  } fields[] = {
      {"name", offsetof(cache_label, name), sizeof l->name},
      {"file", offsetof(cache_label, file), sizeof l->file},
      {"host", offsetof(cache_label, host), sizeof l->host},
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    const char *p = (const char *)l + fields[i].offset;
    if (!memchr(p, '\0', fields[i].size))
      return cache__errorf(err, CACHE_EINVAL,
                           "cache_put: the label's %s is longer than %zu "
                           "bytes",
                           fields[i].name, fields[i].size - 1);
  }
  if (l->line < 0)
    return cache__errorf(err, CACHE_EINVAL,
                         "cache_put: the label's line is negative (%d)",
                         (int)l->line);
  return 0;
}

int cache_put_entry(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                    const uint8_t *data, size_t len, const cache_meta *m,
                    cache_error *err) {
  if (!c || !key || !m || (!data && len > 0))
    return cache__errorf(err, CACHE_EINVAL, "cache_put: NULL argument");
  const cache_sig *sig = m->sig;
  if (sig && (!sig->key_id[0] ||
              strnlen(sig->key_id, CACHE_SIG_KEY_MAX) == CACHE_SIG_KEY_MAX))
    return cache__errorf(err, CACHE_EINVAL,
                         "cache_put: the signature's key id is empty or "
                         "longer than %d bytes",
                         CACHE_SIG_KEY_MAX - 1);
  int rc = check_parts(m->parts, m->nparts, err);
  if (rc == 0 && m->label)
    rc = check_label(m->label, err);
  if (rc != 0)
    return rc;
  if (len > (size_t)INT64_MAX)
    return cache__errorf(err, CACHE_ETOOBIG, "artifact too large");
  uint8_t digest[CACHE_KEY_LEN];
  if ((rc = cache__sha256(c, data, len, digest, err)) != 0)
    return rc;
  uint8_t *z = NULL;
  size_t zlen = 0;
  if ((rc = cache__compress(c, data, len, &z, &zlen, err)) != 0)
    return rc;
  uint64_t max = c->store->cfg.max_bytes;
  if (max > 0 && zlen > max) {
    free(z);
    return cache__errorf(err, CACHE_ETOOBIG,
                         "artifact of %zu bytes (%zu compressed) is larger "
                         "than the cache (%llu bytes)",
                         len, zlen, (unsigned long long)max);
  }
  uint64_t evicted = 0;
  rc = cache__begin_write(c, err);
  if (rc == 0) {
    rc = put_rows(c, key, m, digest, len, z, zlen, &evicted, err);
    if (rc == 0)
      rc = cache__commit_write(c, err);
    else
      cache__rollback(c);
  }
  free(z);
  if (rc != 0)
    return rc;
  atomic_fetch_add(&c->store->puts, 1);
  atomic_fetch_add(&c->store->evictions, evicted);
  return 0;
}

int cache_evict_key(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                    uint64_t *freed, cache_error *err) {
  if (!c || !key)
    return cache__errorf(err, CACHE_EINVAL, "cache_evict_key: NULL argument");
  if (freed)
    *freed = 0;
  cache__totals before, after;
  int rc = cache__begin_write(c, err);
  if (rc != 0)
    return rc;
  rc = cache__totals_read(c, &before, err);
  sqlite3_stmt *st = NULL;
  if (rc == 0 && !(st = cache__stmt(c, CACHE__STMT_ENTRY_DELETE_KEY, err)))
    rc = err ? err->code : CACHE_EIO;
  if (rc == 0) {
    sqlite3_bind_blob(st, 1, key, CACHE_KEY_LEN, SQLITE_STATIC);
    rc = cache__step_done(c, st, "evicting an entry", err);
  }
  if (rc == 0 && sqlite3_changes(c->db) == 0)
    rc = cache__errorf(err, CACHE_EMISS, "no such entry");
  if (rc == 0)
    rc = cache__totals_read(c, &after, err);
  if (rc != 0) {
    cache__rollback(c);
    return rc;
  }
  if ((rc = cache__commit_write(c, err)) != 0)
    return rc;
  if (freed)
    *freed = before.bytes - after.bytes;
  return 0;
}

int cache_evict_older(cache_conn *c, int64_t before, uint64_t *count,
                      uint64_t *freed, cache_error *err) {
  if (!c)
    return cache__errorf(err, CACHE_EINVAL, "cache_evict_older: NULL");
  if (count)
    *count = 0;
  if (freed)
    *freed = 0;
  /* Hits not yet written would make recently used entries look old. */
  cache__touch_flush(c, NULL);
  int64_t before_ms = before >= INT64_MAX / 1000   ? INT64_MAX
                      : before <= INT64_MIN / 1000 ? INT64_MIN
                                                   : before * 1000;
  cache__totals t0, t1;
  int rc = cache__begin_write(c, err);
  if (rc != 0)
    return rc;
  rc = cache__totals_read(c, &t0, err);
  sqlite3_stmt *st = NULL;
  if (rc == 0 && !(st = cache__stmt(c, CACHE__STMT_EVICT_OLDER, err)))
    rc = err ? err->code : CACHE_EIO;
  if (rc == 0) {
    sqlite3_bind_int64(st, 1, before_ms);
    rc = cache__step_done(c, st, "evicting old entries", err);
  }
  int n = rc == 0 ? sqlite3_changes(c->db) : 0;
  if (rc == 0)
    rc = cache__totals_read(c, &t1, err);
  if (rc != 0) {
    cache__rollback(c);
    return rc;
  }
  if ((rc = cache__commit_write(c, err)) != 0)
    return rc;
  if (count)
    *count = (uint64_t)n;
  if (freed)
    *freed = t0.bytes - t1.bytes;
  return 0;
}

/* Reads one page of entries from `st` (bound except for the cursor and the
 * page size) into page[]; moves the cursor past them. */
static int read_page(cache_conn *c, int stmt_id, const char *name,
                     const uint8_t *digest, int want, int64_t cursor[2],
                     cache_info *page, int *n, cache_error *err) {
  *n = 0;
  int rc = cache__begin_read(c, err);
  if (rc != 0)
    return rc;
  sqlite3_stmt *st = cache__stmt(c, stmt_id, err);
  if (!st) {
    cache__end_read(c);
    return err ? err->code : CACHE_EIO;
  }
  sqlite3_bind_int64(st, 1, cursor[0]);
  sqlite3_bind_int64(st, 2, cursor[1]);
  sqlite3_bind_int(st, 3, want);
  if (name) {
    sqlite3_bind_text(st, 4, name, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 5, digest, CACHE_KEY_LEN, SQLITE_STATIC);
  }
  int step;
  while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
    bool bad = false;
    int64_t id = cache__row_info(st, &page[*n]);
    cursor[0] = sqlite3_column_int64(st, 7);
    cursor[1] = id;
    rc = read_parts(c, id, &page[*n], &bad, err);
    (*n)++;
  }
  if (rc == 0 && step != SQLITE_DONE)
    rc = cache__sqlite_error(c, step, "listing entries", err);
  sqlite3_reset(st);
  cache__end_read(c);
  return rc;
}

/* Calls fn for each entry of the pages of stmt_id. With `flush`, pending
 * touches are written first so the order is exact (a write: list is an
 * admin tool; find_by_part runs on the miss path and must not wait for the
 * write lock, so its order ignores hits of the last touch_flush_ms). */
static int walk(cache_conn *c, int stmt_id, const char *name,
                const uint8_t *digest, int limit, bool flush,
                int (*fn)(const cache_info *info, void *ctx), void *ctx,
                cache_error *err) {
  if (flush)
    cache__touch_flush(c, NULL); /* best effort */
  cache_info *page = malloc(PAGE * sizeof *page);
  if (!page)
    return cache__errorf(err, CACHE_ENOMEM, "out of memory");
  int64_t cursor[2] = {INT64_MAX, INT64_MAX};
  int done = 0, rc = 0;
  bool stop = false;
  while (!stop) {
    int want = PAGE;
    if (limit > 0 && limit - done < want)
      want = limit - done;
    if (want == 0)
      break;
    int n;
    rc = read_page(c, stmt_id, name, digest, want, cursor, page, &n, err);
    if (rc != 0)
      break;
    for (int i = 0; i < n && !stop; i++) {
      cache__touch_overlay(c->store, &page[i]);
      stop = fn(&page[i], ctx) != 0;
    }
    done += n;
    if (n < want)
      break;
  }
  free(page);
  return rc;
}

int cache_list(cache_conn *c, int limit,
               int (*fn)(const cache_info *info, void *ctx), void *ctx,
               cache_error *err) {
  if (!c || !fn)
    return cache__errorf(err, CACHE_EINVAL, "cache_list: NULL argument");
  return walk(c, CACHE__STMT_LIST_PAGE, NULL, NULL, limit, true, fn, ctx, err);
}

int cache_find_by_part(cache_conn *c, const char *name,
                       const uint8_t digest[CACHE_KEY_LEN], int limit,
                       int (*fn)(const cache_info *info, void *ctx), void *ctx,
                       cache_error *err) {
  if (!c || !name || !digest || !fn)
    return cache__errorf(err, CACHE_EINVAL,
                         "cache_find_by_part: NULL argument");
  return walk(c, CACHE__STMT_FIND_PAGE, name, digest, limit, false, fn, ctx,
              err);
}

int cache_fail_put(cache_conn *c, const uint8_t key[CACHE_KEY_LEN],
                   const char *message, cache_error *err) {
  if (!c || !key)
    return cache__errorf(err, CACHE_EINVAL, "cache_fail_put: NULL argument");
  if (!message)
    message = "";
  size_t n = strnlen(message, FAIL_MSG_MAX);
  int rc = cache__begin_write(c, err);
  if (rc != 0)
    return rc;
  sqlite3_stmt *st = cache__stmt(c, CACHE__STMT_FAIL_PUT, err);
  if (!st)
    rc = err ? err->code : CACHE_EIO;
  if (rc == 0) {
    sqlite3_bind_blob(st, 1, key, CACHE_KEY_LEN, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, message, (int)n, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, cache__now_ms());
    rc = cache__step_done(c, st, "remembering a failure", err);
  }
  if (rc != 0) {
    cache__rollback(c);
    return rc;
  }
  return cache__commit_write(c, err);
}

int cache_fail_get(cache_conn *c, const uint8_t key[CACHE_KEY_LEN], char *msg,
                   size_t msglen, cache_error *err) {
  if (!c || !key)
    return cache__errorf(err, CACHE_EINVAL, "cache_fail_get: NULL argument");
  sqlite3_stmt *st = cache__stmt(c, CACHE__STMT_FAIL_GET, err);
  if (!st)
    return err ? err->code : CACHE_EIO;
  sqlite3_bind_blob(st, 1, key, CACHE_KEY_LEN, SQLITE_STATIC);
  int step = sqlite3_step(st);
  if (step != SQLITE_ROW) {
    sqlite3_reset(st);
    if (step != SQLITE_DONE)
      return cache__sqlite_error(c, step, "reading a failure", err);
    return cache__errorf(err, CACHE_EMISS, "no failure remembered");
  }
  int64_t age = cache__now_ms() - sqlite3_column_int64(st, 1);
  int rc = 0;
  if (age >= (int64_t)c->store->cfg.failure_ttl_s * 1000) {
    rc = cache__errorf(err, CACHE_EMISS, "the failure has expired");
  } else if (msg && msglen > 0) {
    const unsigned char *t = sqlite3_column_text(st, 0);
    snprintf(msg, msglen, "%s", t ? (const char *)t : "");
  }
  sqlite3_reset(st);
  return rc;
}

/* ---- verification ---- */

/* Appends a problem description to msg (kept short). */
static void note(char *msg, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note(char *msg, size_t cap, const char *fmt, ...) {
  size_t used = strlen(msg);
  if (used + 4 >= cap)
    return;
  if (used > 0) {
    snprintf(msg + used, cap - used, "; ");
    used += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg + used, cap - used, fmt, ap);
  va_end(ap);
}

static int integrity(cache_conn *c, char *msg, size_t cap, cache_error *err) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(c->db, "PRAGMA integrity_check", -1, &st, NULL);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(st);
    return cache__sqlite_error(c, rc, "integrity_check", err);
  }
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const unsigned char *t = sqlite3_column_text(st, 0);
    if (t && strcmp((const char *)t, "ok") != 0)
      note(msg, cap, "integrity_check: %s", (const char *)t);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    note(msg, cap, "integrity_check failed: %s", sqlite3_errstr(rc));
  return 0;
}

/* Checks the totals row against the tables. */
static int sums(cache_conn *c, char *msg, size_t cap, cache_error *err) {
  cache__totals t;
  int rc = cache__totals_read(c, &t, err);
  if (rc != 0)
    return rc;
  sqlite3_stmt *st = cache__stmt(c, CACHE__STMT_VERIFY_SUMS, err);
  if (!st)
    return err ? err->code : CACHE_EIO;
  int step = sqlite3_step(st);
  if (step == SQLITE_ROW) {
    uint64_t n = col_u64(st, 0);
    uint64_t bytes = (uint64_t)sqlite3_column_double(st, 1);
    uint64_t raw = (uint64_t)sqlite3_column_double(st, 2);
    if (n != t.entries || bytes != t.bytes || raw != t.raw_bytes)
      note(msg, cap,
           "totals say %llu entries / %llu bytes / %llu raw, tables hold "
           "%llu / %llu / %llu",
           (unsigned long long)t.entries, (unsigned long long)t.bytes,
           (unsigned long long)t.raw_bytes, (unsigned long long)n,
           (unsigned long long)bytes, (unsigned long long)raw);
  }
  sqlite3_reset(st);
  if (step != SQLITE_ROW)
    return cache__sqlite_error(c, step, "summing entries", err);
  return 0;
}

/* Decodes every entry; counts and describes the bad ones. */
static int entries(cache_conn *c, uint64_t *checked, char *msg, size_t cap,
                   cache_error *err) {
  sqlite3_stmt *st = cache__stmt(c, CACHE__STMT_VERIFY_ROWS, err);
  if (!st)
    return err ? err->code : CACHE_EIO;
  uint64_t n = 0, bad = 0;
  int step, rc = 0;
  char first[300] = "";
  while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
    cache_info info;
    int64_t id = cache__row_info(st, &info);
    const void *blob = sqlite3_column_type(st, CACHE__INFO_NCOLS) == SQLITE_BLOB
                           ? sqlite3_column_blob(st, CACHE__INFO_NCOLS)
                           : NULL;
    int blob_len = blob ? sqlite3_column_bytes(st, CACHE__INFO_NCOLS) : 0;
    const void *dg = sqlite3_column_type(st, 2) == SQLITE_BLOB
                         ? sqlite3_column_blob(st, 2)
                         : NULL;
    int dg_len = dg ? sqlite3_column_bytes(st, 2) : 0;
    cache_error why = {0};
    int d = cache__decode(c, blob, blob_len, sqlite3_column_int64(st, 3),
                          sqlite3_column_int64(st, 4), dg, dg_len, NULL, NULL,
                          &why);
    bool bad_parts = false;
    if (d == 0)
      rc = read_parts(c, id, &info, &bad_parts, err);
    if (d == 0 && bad_parts)
      d = cache__errorf(&why, CACHE_ECORRUPT, "a part row is malformed");
    if (d == CACHE_ENOMEM)
      rc = cache__errorf(err, d, "%s", why.msg);
    n++;
    if (d != 0 && d != CACHE_ENOMEM) {
      char hex[17];
      if (bad++ == 0)
        snprintf(first, sizeof first, "%s...: %.250s", key_hex(info.key, hex),
                 why.msg);
    }
  }
  if (rc == 0 && step != SQLITE_DONE)
    rc = cache__sqlite_error(c, step, "reading entries", err);
  sqlite3_reset(st);
  if (bad > 0)
    note(msg, cap, "%llu of %llu entries corrupt (first: %s)",
         (unsigned long long)bad, (unsigned long long)n, first);
  *checked = n;
  return rc;
}

int cache_verify_all(cache_conn *c, uint64_t *entries_checked,
                     cache_error *err) {
  if (!c)
    return cache__errorf(err, CACHE_EINVAL, "cache_verify_all: NULL");
  uint64_t checked = 0;
  if (entries_checked)
    *entries_checked = 0;
  char msg[sizeof((cache_error *)0)->msg] = "";
  int rc = cache__begin_read(c, err);
  if (rc != 0)
    return rc;
  rc = integrity(c, msg, sizeof msg, err);
  if (rc == 0)
    rc = sums(c, msg, sizeof msg, err);
  if (rc == 0)
    rc = entries(c, &checked, msg, sizeof msg, err);
  cache__end_read(c);
  if (entries_checked)
    *entries_checked = checked;
  if (rc != 0)
    return rc;
  if (msg[0])
    return cache__errorf(err, CACHE_ECORRUPT, "%s", msg);
  return 0;
}
