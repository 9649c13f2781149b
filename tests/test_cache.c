/*
 * test_cache.c: the sqlite artifact store (cache/cache.h).
 *
 * Every test works in its own temporary directory (mkdtemp under /tmp),
 * removed at the end. Corruption is made the way a disk or a person would
 * make it: by writing to the database with sqlite3 directly, or by
 * overwriting the file. Crash safety forks a child that writes in a loop and
 * SIGKILLs it at random moments.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "tests/lib/testutil.h"

/* ---- fixtures ---- */

/* A store in a temporary directory, with one connection. */
typedef struct env {
  char dir[64];     /* the temporary directory */
  char db[128];     /* <dir>/cache.db */
  cache_config cfg; /* what the store was opened with */
  cache_store *s;   /* the store */
  cache_conn *c;    /* a connection of the test thread */
} env;

static void env_mkdir(env *e) {
  snprintf(e->dir, sizeof e->dir, "/tmp/test_cache.XXXXXX");
  cr_assert_not_null(mkdtemp(e->dir), "mkdtemp: %s", strerror(errno));
  snprintf(e->db, sizeof e->db, "%s/cache.db", e->dir);
  cache_config_default(&e->cfg);
  e->cfg.dir = e->dir;
  e->cfg.touch_flush_ms = 60000; /* tests flush explicitly */
}

static void env_open(env *e) {
  cache_error err;
  int rc = cache_store_open(&e->cfg, &e->s, &err);
  cr_assert_eq(rc, 0, "cache_store_open: %s", err.msg);
  rc = cache_conn_open(e->s, &e->c, &err);
  cr_assert_eq(rc, 0, "cache_conn_open: %s", err.msg);
}

static void env_init(env *e, uint64_t max_bytes) {
  env_mkdir(e);
  e->cfg.max_bytes = max_bytes;
  env_open(e);
}

static void env_shut(env *e) {
  cache_conn_close(e->c);
  cache_store_close(e->s);
  e->c = NULL;
  e->s = NULL;
}

static void env_reopen(env *e) {
  env_shut(e);
  env_open(e);
}

static void env_fini(env *e) {
  env_shut(e);
  tu_rm_tree(e->dir);
}

/* ---- data ---- */

static void make_key(uint64_t n, uint8_t key[CACHE_KEY_LEN]) {
  tu_rng r;
  tu_rng_seed(&r, n * 7919 + 17);
  for (int i = 0; i < CACHE_KEY_LEN; i += 8) {
    uint64_t v = tu_rng_next(&r);
    memcpy(key + i, &v, 8);
  }
}

/* Random (incompressible) bytes. */
static uint8_t *random_data(uint64_t seed, size_t len) {
  uint8_t *d = malloc(len ? len : 1);
  tu_rng r;
  tu_rng_seed(&r, seed + 1);
  for (size_t i = 0; i < len; i += 8) {
    uint64_t v = tu_rng_next(&r);
    memcpy(d + i, &v, len - i < 8 ? len - i : 8);
  }
  return d;
}

/* Text-like bytes that compress well. */
static uint8_t *text_data(uint64_t seed, size_t len) {
  static const char *words[] = {"tensor ", "aten::add ",   "fused_kernel_",
                                "float* ", "for (i = 0; ", "buf[i] = "};
  uint8_t *d = malloc(len ? len : 1);
  tu_rng r;
  tu_rng_seed(&r, seed + 1);
  size_t i = 0;
  while (i < len) {
    const char *w = words[tu_rng_below(&r, 6)];
    for (size_t k = 0; w[k] && i < len; k++)
      d[i++] = (uint8_t)w[k];
  }
  return d;
}

static void sha256(const uint8_t *d, size_t len, uint8_t out[32]) {
  unsigned int n;
  static const uint8_t z = 0;
  EVP_Digest(d ? d : &z, len, out, &n, EVP_sha256(), NULL);
}

static void put_ok(env *e, uint64_t k, const uint8_t *d, size_t len,
                   uint64_t compile_us) {
  uint8_t key[CACHE_KEY_LEN];
  make_key(k, key);
  cache_error err;
  int rc = cache_put(e->c, key, NULL, 0, d, len, compile_us, &err);
  cr_assert_eq(rc, 0, "put %llu: %s", (unsigned long long)k, err.msg);
}

static void put_random(env *e, uint64_t k, size_t len, uint64_t compile_us) {
  uint8_t *d = random_data(k, len);
  put_ok(e, k, d, len, compile_us);
  free(d);
}

/* cache_get of key k: the result code; data checked against `want`. */
static int get_key(env *e, uint64_t k, const uint8_t *want, size_t wantlen) {
  uint8_t key[CACHE_KEY_LEN];
  make_key(k, key);
  uint8_t *d = NULL;
  size_t len = 0;
  cache_error err;
  int rc = cache_get(e->c, key, &d, &len, NULL, &err);
  if (rc == 0 && want) {
    cr_assert_eq(len, wantlen, "key %llu: length", (unsigned long long)k);
    cr_assert(len == 0 || memcmp(d, want, len) == 0, "key %llu: bytes",
              (unsigned long long)k);
  }
  if (rc == 0)
    cr_assert_not_null(d);
  free(d);
  return rc;
}

static bool has_key(env *e, uint64_t k) {
  uint8_t key[CACHE_KEY_LEN];
  cache_info info;
  make_key(k, key);
  return cache_info_get(e->c, key, &info, NULL) == 0;
}

/* ---- direct database access ---- */

static sqlite3 *raw_open(env *e) {
  sqlite3 *db;
  cr_assert_eq(sqlite3_open(e->db, &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  return db;
}

/* Runs sql with ?1 bound to key k (if k != UINT64_MAX). With `out`, sql must
 * yield a row and *out is its first column; without, it may yield rows or
 * none. */
static void raw_run(env *e, const char *sql, uint64_t k, int64_t *out) {
  sqlite3 *db = raw_open(e);
  sqlite3_stmt *st;
  cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s",
               sql, sqlite3_errmsg(db));
  uint8_t key[CACHE_KEY_LEN];
  if (k != UINT64_MAX) {
    make_key(k, key);
    sqlite3_bind_blob(st, 1, key, CACHE_KEY_LEN, SQLITE_STATIC);
  }
  int rc = sqlite3_step(st);
  if (out) {
    cr_assert_eq(rc, SQLITE_ROW, "%s", sql);
    *out = sqlite3_column_int64(st, 0);
  } else {
    cr_assert(rc == SQLITE_DONE || rc == SQLITE_ROW, "%s: %s", sql,
              sqlite3_errmsg(db));
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
}

static void raw_exec(env *e, const char *sql, uint64_t k) {
  raw_run(e, sql, k, NULL);
}

/* The integer result of sql with ?1 bound to key k. */
static int64_t raw_int(env *e, const char *sql, uint64_t k) {
  int64_t v;
  raw_run(e, sql, k, &v);
  return v;
}

/* Flips one byte in the middle of key k's stored blob. */
static void raw_flip_blob_byte(env *e, uint64_t k) {
  sqlite3 *db = raw_open(e);
  sqlite3_stmt *st;
  uint8_t key[CACHE_KEY_LEN];
  make_key(k, key);
  const char *q = "SELECT b.id, b.data FROM blobs b JOIN entries e "
                  "ON e.id = b.id WHERE e.key = ?1";
  cr_assert_eq(sqlite3_prepare_v2(db, q, -1, &st, NULL), SQLITE_OK);
  sqlite3_bind_blob(st, 1, key, CACHE_KEY_LEN, SQLITE_STATIC);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  int64_t id = sqlite3_column_int64(st, 0);
  int n = sqlite3_column_bytes(st, 1);
  uint8_t *b = malloc((size_t)n);
  memcpy(b, sqlite3_column_blob(st, 1), (size_t)n);
  sqlite3_finalize(st);
  b[n / 2] ^= 0x40;
  cr_assert_eq(sqlite3_prepare_v2(db,
                                  "UPDATE blobs SET data = ?2 WHERE id = ?1",
                                  -1, &st, NULL),
               SQLITE_OK);
  sqlite3_bind_int64(st, 1, id);
  sqlite3_bind_blob(st, 2, b, n, SQLITE_STATIC);
  cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
  sqlite3_finalize(st);
  sqlite3_close(db);
  free(b);
}

static cache_stats stats(env *e) {
  cache_stats st;
  cache_stats_get(e->s, &st);
  return st;
}

/* Sums over cache_list, to compare with the stats. */
typedef struct sums {
  uint64_t n, bytes, raw; /* entries, stored and raw bytes listed */
} sums;

static int sum_cb(const cache_info *info, void *ctx) {
  sums *s = ctx;
  s->n++;
  s->bytes += info->stored_size;
  s->raw += info->size;
  return 0;
}

static sums list_all(env *e) {
  sums s = {0};
  cache_error err;
  int rc = cache_list(e->c, 0, sum_cb, &s, &err);
  cr_assert_eq(rc, 0, "cache_list: %s", err.msg);
  return s;
}

/* Stats sizes equal what the database holds, and the checker agrees. */
static void assert_consistent(env *e) {
  sums s = list_all(e);
  cache_stats st = stats(e);
  cr_assert_eq(st.entries, s.n, "entries %llu vs listed %llu",
               (unsigned long long)st.entries, (unsigned long long)s.n);
  cr_assert_eq(st.bytes, s.bytes, "bytes %llu vs listed %llu",
               (unsigned long long)st.bytes, (unsigned long long)s.bytes);
  cr_assert_eq(st.raw_bytes, s.raw);
  cr_assert_eq((int64_t)st.entries,
               raw_int(e, "SELECT count(*) FROM entries", UINT64_MAX));
  cr_assert_eq((int64_t)st.bytes,
               raw_int(e, "SELECT coalesce(sum(length(data)), 0) FROM blobs",
                       UINT64_MAX));
  cache_error err;
  uint64_t n = 0;
  int rc = cache_verify_all(e->c, &n, &err);
  cr_assert_eq(rc, 0, "cache_verify_all: %s", err.msg);
  cr_assert_eq(n, s.n);
}

/* ---- round trips ---- */

Test(cache, round_trip_sizes) {
  env e;
  env_init(&e, 0);
  static const size_t sizes[] = {0, 1, 1024, 2 << 20};
  uint64_t k = 1;
  for (int kind = 0; kind < 2; kind++) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++, k++) {
      size_t len = sizes[i];
      uint8_t *d = kind == 0 ? random_data(k, len) : text_data(k, len);
      int64_t t0 = time(NULL);
      put_ok(&e, k, d, len, 1000 * k);
      uint8_t key[CACHE_KEY_LEN], want[32];
      make_key(k, key);
      sha256(d, len, want);
      uint8_t *got = NULL;
      size_t got_len = 99;
      cache_info info;
      cache_error err;
      int rc = cache_get(e.c, key, &got, &got_len, &info, &err);
      cr_assert_eq(rc, 0, "get: %s", err.msg);
      cr_assert_not_null(got);
      cr_assert_eq(got_len, len);
      cr_assert(len == 0 || memcmp(got, d, len) == 0);
      cr_assert(memcmp(info.key, key, CACHE_KEY_LEN) == 0);
      cr_assert(memcmp(info.digest, want, 32) == 0);
      cr_assert_eq(info.size, len);
      cr_assert_eq(info.compile_us, 1000 * k);
      cr_assert_eq(info.hits, 1);
      cr_assert_eq(info.nparts, 0);
      cr_assert(info.created >= t0 - 1 && info.created <= time(NULL) + 1);
      cr_assert(info.last_used >= info.created);
      if (kind == 0 && len >= 1024)
        cr_assert(info.stored_size >= len, "random data does not shrink");
      if (kind == 1 && len >= 1024)
        cr_assert(info.stored_size < len / 3, "text %zu -> %llu", len,
                  (unsigned long long)info.stored_size);
      free(got);
      free(d);
    }
  }
  cache_stats st = stats(&e);
  cr_assert_eq(st.puts, 8);
  cr_assert_eq(st.hits, 8);
  cr_assert_eq(st.misses, 0);
  cr_assert_eq(st.entries, 8);
  uint64_t saved = 0;
  for (uint64_t i = 1; i <= 8; i++)
    saved += 1000 * i;
  cr_assert_eq(st.compile_us_saved, saved);
  cr_assert_eq(st.raw_bytes, 2 * (0 + 1 + 1024 + (2 << 20)));
  assert_consistent(&e);
  env_fini(&e);
}

Test(cache, miss_and_invalid_arguments) {
  env e;
  env_init(&e, 0);
  cr_assert_eq(get_key(&e, 42, NULL, 0), CACHE_EMISS);
  cr_assert_eq(stats(&e).misses, 1);
  uint8_t key[CACHE_KEY_LEN];
  make_key(1, key);
  cache_part parts[CACHE_MAX_PARTS + 1];
  memset(parts, 0, sizeof parts);
  cache_error err;
  cr_assert_eq(cache_put(e.c, key, parts, CACHE_MAX_PARTS + 1,
                         (const uint8_t *)"x", 1, 1, &err),
               CACHE_EINVAL);
  strcpy(parts[0].name, "graph");
  strcpy(parts[1].name, "graph");
  cr_assert_eq(cache_put(e.c, key, parts, 2, (const uint8_t *)"x", 1, 1, &err),
               CACHE_EINVAL);
  cr_assert(strstr(err.msg, "twice"), "%s", err.msg);
  cr_assert_eq(cache_put(e.c, key, parts, 1, NULL, 5, 1, &err), CACHE_EINVAL);
  memset(parts[0].name, 'a', sizeof parts[0].name); /* no NUL */
  cr_assert_eq(cache_put(e.c, key, parts, 1, (const uint8_t *)"x", 1, 1, &err),
               CACHE_EINVAL);
  cr_assert_eq(stats(&e).entries, 0);
  cr_assert_str_eq(cache_strerror(CACHE_ECORRUPT),
                   "entry was corrupt and has been dropped");
  cr_assert_str_eq(cache_strerror(12345), "unknown error");
  cache_config cfg;
  cache_config_default(&cfg);
  cache_store *s = NULL;
  cr_assert_eq(cache_store_open(&cfg, &s, &err), CACHE_EINVAL); /* no dir */
  cr_assert_null(s);
  env_fini(&e);
}

Test(cache, replace_entry) {
  env e;
  env_init(&e, 0);
  uint8_t *a = random_data(1, 5000), *b = text_data(2, 80000);
  put_ok(&e, 7, a, 5000, 10);
  cr_assert_eq(get_key(&e, 7, a, 5000), 0);
  put_ok(&e, 7, b, 80000, 20);
  cr_assert_eq(get_key(&e, 7, b, 80000), 0);
  cache_info info;
  uint8_t key[CACHE_KEY_LEN];
  make_key(7, key);
  cr_assert_eq(cache_info_get(e.c, key, &info, NULL), 0);
  cr_assert_eq(info.compile_us, 20);
  cr_assert_eq(info.size, 80000);
  cache_stats st = stats(&e);
  cr_assert_eq(st.entries, 1);
  cr_assert_eq(st.puts, 2);
  cr_assert_eq(st.raw_bytes, 80000);
  cr_assert_eq(raw_int(&e, "SELECT count(*) FROM blobs", UINT64_MAX), 1);
  assert_consistent(&e);
  free(a);
  free(b);
  env_fini(&e);
}

/* ---- parts ---- */

static void part(cache_part *p, const char *name, uint64_t v) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  make_key(v + 1000000, p->digest);
}

typedef struct found {
  int n;
  uint8_t keys[16][CACHE_KEY_LEN];
  cache_info last;
} found;

static int found_cb(const cache_info *info, void *ctx) {
  found *f = ctx;
  if (f->n < 16)
    memcpy(f->keys[f->n], info->key, CACHE_KEY_LEN);
  f->n++;
  f->last = *info;
  return 0;
}

static bool found_has(const found *f, uint64_t k) {
  uint8_t key[CACHE_KEY_LEN];
  make_key(k, key);
  for (int i = 0; i < f->n && i < 16; i++)
    if (memcmp(f->keys[i], key, CACHE_KEY_LEN) == 0)
      return true;
  return false;
}

Test(cache, parts_stored_and_found) {
  env e;
  env_init(&e, 0);
  /* Entries 1..6: graph g = k % 2, target t = k % 3. */
  for (uint64_t k = 1; k <= 6; k++) {
    cache_part p[3];
    part(&p[0], "graph", k % 2);
    part(&p[1], "target", 10 + k % 3);
    part(&p[2], "options", 20);
    uint8_t key[CACHE_KEY_LEN];
    make_key(k, key);
    cache_error err;
    int rc = cache_put(e.c, key, p, 3, (const uint8_t *)"artifact", 8, k, &err);
    cr_assert_eq(rc, 0, "%s", err.msg);
  }
  uint8_t key[CACHE_KEY_LEN];
  make_key(4, key);
  cache_info info;
  cr_assert_eq(cache_info_get(e.c, key, &info, NULL), 0);
  cr_assert_eq(info.nparts, 3);
  cache_part want;
  part(&want, "graph", 0);
  bool seen = false;
  for (int i = 0; i < info.nparts; i++) {
    if (strcmp(info.parts[i].name, "graph") == 0) {
      seen = true;
      cr_assert(memcmp(info.parts[i].digest, want.digest, 32) == 0);
    }
  }
  cr_assert(seen);

  found f = {0};
  cache_error err;
  cr_assert_eq(
      cache_find_by_part(e.c, "graph", want.digest, 0, found_cb, &f, &err), 0,
      "%s", err.msg);
  cr_assert_eq(f.n, 3);
  cr_assert(found_has(&f, 2) && found_has(&f, 4) && found_has(&f, 6));
  cr_assert_eq(f.last.nparts, 3, "found entries come with their parts");

  part(&want, "target", 10 + 1);
  memset(&f, 0, sizeof f);
  cr_assert_eq(
      cache_find_by_part(e.c, "target", want.digest, 0, found_cb, &f, &err), 0);
  cr_assert_eq(f.n, 2);
  cr_assert(found_has(&f, 1) && found_has(&f, 4));

  part(&want, "options", 20);
  memset(&f, 0, sizeof f);
  cr_assert_eq(
      cache_find_by_part(e.c, "options", want.digest, 4, found_cb, &f, &err),
      0);
  cr_assert_eq(f.n, 4, "limit");
  /* Same digest under another name: nothing. */
  memset(&f, 0, sizeof f);
  cr_assert_eq(
      cache_find_by_part(e.c, "graph", want.digest, 0, found_cb, &f, &err), 0);
  cr_assert_eq(f.n, 0);

  /* Replacing an entry replaces its parts; evicting removes them. */
  cache_part p1;
  part(&p1, "graph", 99);
  make_key(2, key);
  cr_assert_eq(cache_put(e.c, key, &p1, 1, (const uint8_t *)"x", 1, 1, &err),
               0);
  part(&want, "graph", 0);
  memset(&f, 0, sizeof f);
  cache_find_by_part(e.c, "graph", want.digest, 0, found_cb, &f, &err);
  cr_assert_eq(f.n, 2);
  make_key(4, key);
  cr_assert_eq(cache_evict_key(e.c, key, NULL, &err), 0);
  memset(&f, 0, sizeof f);
  cache_find_by_part(e.c, "graph", want.digest, 0, found_cb, &f, &err);
  cr_assert_eq(f.n, 1);
  cr_assert(found_has(&f, 6));
  cr_assert_eq(raw_int(&e, "SELECT count(*) FROM parts", UINT64_MAX),
               3 * 4 + 1);
  env_fini(&e);
}

/* ---- corruption ---- */

/* Puts key 1, damages it with `sql` (?1 = key; NULL: flip a blob byte),
 * and checks the whole story: the checker sees it, get reports and drops
 * it, counters, and the key is usable again. */
static void corruption_case(const char *sql) {
  env e;
  env_init(&e, 0);
  size_t len = 300000;
  uint8_t *d = random_data(1, len);
  put_ok(&e, 1, d, len, 5);
  put_random(&e, 2, 1000, 5); /* an innocent bystander */
  if (sql)
    raw_exec(&e, sql, 1);
  else
    raw_flip_blob_byte(&e, 1);

  cache_error err;
  uint64_t n = 0;
  cr_assert_eq(cache_verify_all(e.c, &n, &err), CACHE_ECORRUPT,
               "verify_all must see it");
  cr_assert_eq(n, 2);
  cr_assert(strstr(err.msg, "1 of 2 entries corrupt"), "%s", err.msg);
  cr_assert_eq(stats(&e).entries, 2, "verify_all drops nothing");

  uint8_t key[CACHE_KEY_LEN];
  make_key(1, key);
  uint8_t *got = (uint8_t *)1;
  size_t got_len = 1;
  int rc = cache_get(e.c, key, &got, &got_len, NULL, &err);
  cr_assert_eq(rc, CACHE_ECORRUPT, "got %d: %s", rc, err.msg);
  cr_assert_null(got);
  cr_assert_eq(got_len, 0);
  cr_assert(strstr(err.msg, "dropped"), "%s", err.msg);
  cache_info info;
  cr_assert_eq(cache_info_get(e.c, key, &info, &err), CACHE_EMISS);
  cr_assert_eq(get_key(&e, 1, NULL, 0), CACHE_EMISS);
  cache_stats st = stats(&e);
  cr_assert_eq(st.corrupt_dropped, 1);
  cr_assert_eq(st.hits, 0);
  cr_assert_eq(st.entries, 1);
  cr_assert_eq(raw_int(&e, "SELECT count(*) FROM blobs", UINT64_MAX), 1);
  cr_assert_eq(get_key(&e, 2, NULL, 0), 0);
  assert_consistent(&e);

  put_ok(&e, 1, d, len, 5);
  cr_assert_eq(get_key(&e, 1, d, len), 0);
  env_reopen(&e);
  cr_assert_eq(get_key(&e, 1, d, len), 0);
  assert_consistent(&e);
  free(d);
  env_fini(&e);
}

Test(cache, corrupt_flipped_byte) {
  corruption_case(NULL);
}

Test(cache, corrupt_digest_value) {
  corruption_case("UPDATE entries SET digest = zeroblob(32) WHERE key = ?1");
}

Test(cache, corrupt_digest_length) {
  corruption_case("UPDATE entries SET digest = substr(digest, 1, 31) "
                  "WHERE key = ?1");
}

Test(cache, corrupt_digest_null) {
  corruption_case("UPDATE entries SET digest = NULL WHERE key = ?1");
}

Test(cache, corrupt_truncated_blob) {
  corruption_case("UPDATE blobs SET data = substr(data, 1, length(data) / 2) "
                  "WHERE id = (SELECT id FROM entries WHERE key = ?1)");
}

Test(cache, corrupt_truncated_blob_and_size) {
  /* The stored size agrees with the cut blob: zstd must notice. */
  corruption_case("UPDATE blobs SET data = substr(data, 1, 1000) "
                  "WHERE id = (SELECT id FROM entries WHERE key = ?1); "
                  "UPDATE entries SET stored_size = 1000 WHERE key = ?1");
}

Test(cache, corrupt_null_blob) {
  corruption_case("UPDATE blobs SET data = NULL "
                  "WHERE id = (SELECT id FROM entries WHERE key = ?1)");
}

Test(cache, corrupt_missing_blob_row) {
  corruption_case("DELETE FROM blobs "
                  "WHERE id = (SELECT id FROM entries WHERE key = ?1)");
}

Test(cache, corrupt_text_instead_of_blob) {
  corruption_case("UPDATE blobs SET data = 'hello' "
                  "WHERE id = (SELECT id FROM entries WHERE key = ?1)");
}

Test(cache, corrupt_absurd_size) {
  corruption_case("UPDATE entries SET size = 9000000000000000 WHERE key = ?1");
}

Test(cache, corrupt_negative_size) {
  corruption_case("UPDATE entries SET size = -5 WHERE key = ?1");
}

/* A person may insert anything; nothing may crash, listing still works. */
Test(cache, garbage_rows_never_crash) {
  env e;
  env_init(&e, 0);
  put_random(&e, 1, 100, 1);
  raw_exec(&e,
           "INSERT INTO entries (key, digest, size, stored_size, compile_us, "
           "created_ms, last_used_ms, hits, priority) VALUES "
           "(x'0102', 'text', -1, 'abc', -7, 'x', 5, -3, 'p')",
           UINT64_MAX);
  raw_exec(&e,
           "INSERT INTO entries (key, digest, size, stored_size, compile_us, "
           "created_ms, last_used_ms, hits, priority) VALUES "
           "(?1, randomblob(32), 10, 12, 1, 0, 0, 0, 0)",
           2);
  raw_exec(&e,
           "INSERT INTO blobs VALUES ((SELECT id FROM entries WHERE key = ?1), "
           "randomblob(12))",
           2);
  raw_exec(&e,
           "INSERT INTO parts VALUES ((SELECT id FROM entries WHERE key = ?1), "
           "'a-name-far-too-long-for-a-part', x'00')",
           1);
  sums s = list_all(&e);
  cr_assert_eq(s.n, 3);
  cache_error err;
  cr_assert_eq(cache_verify_all(e.c, NULL, &err), CACHE_ECORRUPT);
  cr_assert(strstr(err.msg, "3 of 3 entries corrupt"), "%s", err.msg);
  cr_assert_eq(get_key(&e, 2, NULL, 0), CACHE_ECORRUPT);
  /* A malformed part costs only the part: parts just explain misses. */
  uint8_t key[CACHE_KEY_LEN], *d;
  size_t len;
  make_key(1, key);
  cache_info info;
  cr_assert_eq(cache_get(e.c, key, &d, &len, &info, &err), 0, "%s", err.msg);
  cr_assert_eq(info.nparts, 0);
  free(d);
  cr_assert_eq(cache_info_get(e.c, key, &info, NULL), 0);
  /* Drop the hand-made rows; then everything is consistent again after a
   * reopen (which recomputes the totals). */
  raw_exec(&e, "DELETE FROM entries WHERE key = x'0102'", UINT64_MAX);
  raw_exec(&e, "DELETE FROM parts WHERE length(name) > 15", UINT64_MAX);
  env_reopen(&e);
  assert_consistent(&e);
  env_fini(&e);
}

/* ---- eviction ---- */

Test(cache, eviction_honours_cap) {
  env e;
  uint64_t cap = 256 * 1024;
  env_init(&e, cap);
  tu_rng r;
  tu_rng_seed(&r, 5);
  for (uint64_t k = 1; k <= 200; k++) {
    size_t len = 10000 + (size_t)tu_rng_below(&r, 20000);
    put_random(&e, k, len, 1000 + (uint64_t)tu_rng_below(&r, 100000));
    cache_stats st = stats(&e);
    cr_assert_leq(st.bytes, cap, "after put %llu: %llu bytes",
                  (unsigned long long)k, (unsigned long long)st.bytes);
    cr_assert(has_key(&e, k), "the entry just put is kept");
  }
  cache_stats st = stats(&e);
  cr_assert_gt(st.evictions, 100);
  cr_assert_eq(st.puts, 200);
  cr_assert_eq(st.entries + st.evictions, 200);
  assert_consistent(&e);
  env_reopen(&e);
  cr_assert_leq(stats(&e).bytes, cap);
  assert_consistent(&e);
  env_fini(&e);
}

/* Entry 1 is small and expensive, put first and never used again: LRU (and
 * FIFO) would evict it first. GDSF weighs cost per byte and keeps it while
 * the cheap, large ones come and go. */
Test(cache, gdsf_keeps_expensive_small_entry) {
  env e;
  env_init(&e, 100 * 1024);
  put_random(&e, 1, 10 * 1024, 10 * 1000 * 1000); /* 10 s to compile */
  for (uint64_t k = 2; k <= 40; k++) {
    put_random(&e, k, 30 * 1024, 1000); /* 1 ms */
    get_key(&e, k, NULL, 0);            /* and used, unlike entry 1 */
  }
  cache_flush_touches(e.c, NULL);
  cr_assert_gt(stats(&e).evictions, 30);
  cr_assert(has_key(&e, 1), "GDSF must keep the expensive entry");
  cr_assert(!has_key(&e, 2), "the oldest cheap entry went");
  assert_consistent(&e);
  env_fini(&e);
}

/* Same cost and size; the hot one was used 20 times but longer ago than the
 * cold one. LRU evicts the hot one; GDSF the cold one. */
Test(cache, gdsf_prefers_hot_over_recent) {
  env e;
  env_init(&e, 100 * 1024);
  put_random(&e, 1, 30 * 1024, 1000000); /* hot */
  put_random(&e, 2, 30 * 1024, 1000000); /* cold */
  for (int i = 0; i < 20; i++)
    cr_assert_eq(get_key(&e, 1, NULL, 0), 0);
  cache_flush_touches(e.c, NULL);
  usleep(20000);
  cr_assert_eq(get_key(&e, 2, NULL, 0), 0); /* the most recent use */
  cache_flush_touches(e.c, NULL);
  put_random(&e, 3, 50 * 1024, 10000000); /* forces one eviction */
  cr_assert_eq(stats(&e).evictions, 1);
  cr_assert(has_key(&e, 1), "the hot entry stays");
  cr_assert(!has_key(&e, 2), "the cold entry goes");
  env_fini(&e);
}

/* The clock: an expensive entry nobody uses is not kept forever. */
Test(cache, gdsf_unused_entries_age_out) {
  env e;
  env_init(&e, 100 * 1024);
  put_random(&e, 1, 10 * 1024, 1000000); /* priority ~98 */
  uint64_t k = 2;
  for (; k < 2000 && has_key(&e, 1); k++)
    put_random(&e, k, 30 * 1024, 1000000); /* ~33 each, the clock rises */
  cr_assert(!has_key(&e, 1), "entry 1 should have aged out");
  cr_assert_gt(k, 4, "but not at once (after %llu puts)",
               (unsigned long long)k);
  env_fini(&e);
}

Test(cache, too_big) {
  env e;
  env_init(&e, 64 * 1024);
  put_random(&e, 1, 1000, 1);
  uint8_t key[CACHE_KEY_LEN];
  make_key(2, key);
  uint8_t *d = random_data(2, 100 * 1024);
  cache_error err;
  int rc = cache_put(e.c, key, NULL, 0, d, 100 * 1024, 1, &err);
  cr_assert_eq(rc, CACHE_ETOOBIG, "%d %s", rc, err.msg);
  cr_assert(has_key(&e, 1), "nothing was evicted for it");
  cr_assert_eq(stats(&e).entries, 1);
  free(d);
  /* Compressible data is measured compressed: 256 KiB of text fits. */
  d = text_data(3, 256 * 1024);
  rc = cache_put(e.c, key, NULL, 0, d, 256 * 1024, 1, &err);
  cr_assert_eq(rc, 0, "%s", err.msg);
  free(d);
  env_fini(&e);
}

/* ---- touches ---- */

Test(cache, touches_flushed_and_persisted) {
  env e;
  env_init(&e, 0);
  put_random(&e, 1, 100, 250);
  put_random(&e, 2, 100, 1);
  raw_exec(&e, "UPDATE entries SET last_used_ms = 1000, created_ms = 1000",
           UINT64_MAX);
  for (int i = 0; i < 3; i++)
    cr_assert_eq(get_key(&e, 1, NULL, 0), 0);
  cache_stats st = stats(&e);
  cr_assert_eq(st.hits, 3);
  cr_assert_eq(st.compile_us_saved, 750);
  const char *hits = "SELECT hits FROM entries WHERE key = ?1";
  const char *used = "SELECT last_used_ms FROM entries WHERE key = ?1";
  cr_assert_eq(raw_int(&e, hits, 1), 0, "not written yet");
  uint8_t key[CACHE_KEY_LEN];
  make_key(1, key);
  cache_info info;
  cr_assert_eq(cache_info_get(e.c, key, &info, NULL), 0);
  cr_assert_eq(info.hits, 3, "pending hits are visible");
  cr_assert_geq(info.last_used, time(NULL) - 2);
  cache_error err;
  cr_assert_eq(cache_flush_touches(e.c, &err), 0, "%s", err.msg);
  cr_assert_eq(raw_int(&e, hits, 1), 3);
  cr_assert_geq(raw_int(&e, used, 1) / 1000, time(NULL) - 2);
  cr_assert_eq(raw_int(&e, used, 2), 1000, "untouched stays");
  cr_assert_eq(cache_info_get(e.c, key, &info, NULL), 0);
  cr_assert_eq(info.hits, 3, "not counted twice");
  /* Close flushes what is pending. */
  cr_assert_eq(get_key(&e, 1, NULL, 0), 0);
  cr_assert_eq(get_key(&e, 1, NULL, 0), 0);
  env_reopen(&e);
  cr_assert_eq(raw_int(&e, hits, 1), 5);
  cr_assert_eq(cache_info_get(e.c, key, &info, NULL), 0);
  cr_assert_eq(info.hits, 5);
  cr_assert_eq(stats(&e).hits, 0, "counters are per process");
  env_fini(&e);
}

Test(cache, flusher_thread_writes_touches) {
  env e;
  env_mkdir(&e);
  e.cfg.touch_flush_ms = 50;
  env_open(&e);
  put_random(&e, 1, 100, 1);
  cr_assert_eq(get_key(&e, 1, NULL, 0), 0);
  int64_t h = 0;
  for (int i = 0; i < 100 && h == 0; i++) {
    usleep(20000);
    h = raw_int(&e, "SELECT hits FROM entries WHERE key = ?1", 1);
  }
  cr_assert_eq(h, 1, "the flusher wrote the hit");
  /* Close is prompt even with a long period. */
  env_shut(&e);
  e.cfg.touch_flush_ms = 600000;
  env_open(&e);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  env_fini(&e);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
              (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  cr_assert_lt(ms, 2000, "close took %.0f ms", ms);
}

/* ---- failures ---- */

Test(cache, failures_remembered_with_ttl) {
  env e;
  env_mkdir(&e);
  e.cfg.failure_ttl_s = 1;
  env_open(&e);
  uint8_t key[CACHE_KEY_LEN];
  make_key(1, key);
  char msg[64];
  cache_error err;
  cr_assert_eq(cache_fail_get(e.c, key, msg, sizeof msg, &err), CACHE_EMISS);
  cr_assert_eq(cache_fail_put(e.c, key, "node 3: bad dtype", &err), 0, "%s",
               err.msg);
  cr_assert_eq(cache_fail_put(e.c, key, "node 4: bad shape", &err), 0);
  cr_assert_eq(cache_fail_get(e.c, key, msg, sizeof msg, &err), 0);
  cr_assert_str_eq(msg, "node 4: bad shape");
  char tiny[5];
  cr_assert_eq(cache_fail_get(e.c, key, tiny, sizeof tiny, &err), 0);
  cr_assert_str_eq(tiny, "node");
  cr_assert_eq(stats(&e).failures_remembered, 1);
  uint8_t other[CACHE_KEY_LEN];
  make_key(2, other);
  cr_assert_eq(cache_fail_get(e.c, other, msg, sizeof msg, &err), CACHE_EMISS);
  cr_assert_eq(get_key(&e, 1, NULL, 0), CACHE_EMISS, "not an entry");
  usleep(1100 * 1000);
  cr_assert_eq(cache_fail_get(e.c, key, msg, sizeof msg, &err), CACHE_EMISS);
  /* Remembered again after a new failure; survives a reopen. */
  cr_assert_eq(cache_fail_put(e.c, key, "again", &err), 0);
  env_reopen(&e);
  cr_assert_eq(stats(&e).failures_remembered, 1);
  cr_assert_eq(cache_fail_get(e.c, key, msg, sizeof msg, &err), 0);
  cr_assert_str_eq(msg, "again");
  env_fini(&e);
}

Test(cache, expired_failures_are_purged) {
  env e;
  env_mkdir(&e);
  e.cfg.failure_ttl_s = 1;
  e.cfg.touch_flush_ms = 100;
  env_open(&e);
  uint8_t key[CACHE_KEY_LEN];
  make_key(1, key);
  cr_assert_eq(cache_fail_put(e.c, key, "bad", NULL), 0);
  cr_assert_eq(stats(&e).failures_remembered, 1);
  int64_t n = 1;
  for (int i = 0; i < 60 && n > 0; i++) {
    usleep(50000);
    n = raw_int(&e, "SELECT count(*) FROM failures", UINT64_MAX);
  }
  cr_assert_eq(n, 0);
  cr_assert_eq(stats(&e).failures_remembered, 0);
  env_fini(&e);
}

/* ---- explicit eviction, listing ---- */

Test(cache, evict_key_and_older) {
  env e;
  env_init(&e, 0);
  for (uint64_t k = 1; k <= 5; k++)
    put_random(&e, k, 1000 * k, 1);
  uint8_t key[CACHE_KEY_LEN];
  make_key(3, key);
  cache_info info;
  cr_assert_eq(cache_info_get(e.c, key, &info, NULL), 0);
  uint64_t freed = 0, count = 0;
  cache_error err;
  cr_assert_eq(cache_evict_key(e.c, key, &freed, &err), 0, "%s", err.msg);
  cr_assert_eq(freed, info.stored_size);
  cr_assert_eq(cache_evict_key(e.c, key, &freed, &err), CACHE_EMISS);
  cr_assert_eq(freed, 0);
  /* Entries 1 and 2 were last used in 1970. */
  raw_exec(&e,
           "UPDATE entries SET last_used_ms = 5000 WHERE key IN "
           "(?1, (SELECT key FROM entries ORDER BY id LIMIT 1 OFFSET 1))",
           1);
  cache_stats before = stats(&e);
  cr_assert_eq(cache_evict_older(e.c, 1, &count, &freed, &err), 0);
  cr_assert_eq(count, 0);
  cr_assert_eq(cache_evict_older(e.c, 3600, &count, &freed, &err), 0);
  cr_assert_eq(count, 2);
  cache_stats after = stats(&e);
  cr_assert_eq(freed, before.bytes - after.bytes);
  cr_assert(!has_key(&e, 1) && !has_key(&e, 2) && has_key(&e, 4));
  cr_assert_eq(after.evictions, 0, "explicit evictions are not cap ones");
  /* A hit not yet written counts as recent use. */
  raw_exec(&e, "UPDATE entries SET last_used_ms = 5000", UINT64_MAX);
  cr_assert_eq(get_key(&e, 4, NULL, 0), 0);
  cr_assert_eq(cache_evict_older(e.c, 3600, &count, &freed, &err), 0);
  cr_assert_eq(count, 1);
  cr_assert(has_key(&e, 4) && !has_key(&e, 5));
  cr_assert_eq(cache_evict_older(e.c, INT64_MAX, &count, &freed, &err), 0);
  cr_assert_eq(count, 1);
  cr_assert_eq(stats(&e).entries, 0);
  cr_assert_eq(stats(&e).bytes, 0);
  assert_consistent(&e);
  env_fini(&e);
}

typedef struct order {
  int n, stop_after;
  uint8_t keys[16][CACHE_KEY_LEN];
  env *e;
  bool evict; /* evict each listed entry from inside the callback */
} order;

static int order_cb(const cache_info *info, void *ctx) {
  order *o = ctx;
  memcpy(o->keys[o->n++], info->key, CACHE_KEY_LEN);
  if (o->evict)
    cr_assert_eq(cache_evict_key(o->e->c, info->key, NULL, NULL), 0);
  return o->stop_after > 0 && o->n >= o->stop_after;
}

static void assert_order(const order *o, const uint64_t *want, int n) {
  cr_assert_eq(o->n, n, "listed %d, want %d", o->n, n);
  for (int i = 0; i < n; i++) {
    uint8_t key[CACHE_KEY_LEN];
    make_key(want[i], key);
    cr_assert(memcmp(o->keys[i], key, CACHE_KEY_LEN) == 0,
              "position %d should be key %llu", i, (unsigned long long)want[i]);
  }
}

Test(cache, list_most_recent_first) {
  env e;
  env_init(&e, 0);
  for (uint64_t k = 1; k <= 4; k++) {
    put_random(&e, k, 100, 1);
    usleep(3000);
  }
  order o = {0};
  cache_error err;
  cr_assert_eq(cache_list(e.c, 0, order_cb, &o, &err), 0, "%s", err.msg);
  assert_order(&o, (uint64_t[]){4, 3, 2, 1}, 4);
  cr_assert_eq(get_key(&e, 2, NULL, 0), 0); /* pending touch */
  memset(&o, 0, sizeof o);
  cr_assert_eq(cache_list(e.c, 0, order_cb, &o, &err), 0);
  assert_order(&o, (uint64_t[]){2, 4, 3, 1}, 4);
  memset(&o, 0, sizeof o);
  cr_assert_eq(cache_list(e.c, 2, order_cb, &o, &err), 0);
  assert_order(&o, (uint64_t[]){2, 4}, 2);
  memset(&o, 0, sizeof o);
  o.stop_after = 3;
  cr_assert_eq(cache_list(e.c, 0, order_cb, &o, &err), 0);
  assert_order(&o, (uint64_t[]){2, 4, 3}, 3);
  env_fini(&e);
}

/* More than a page of entries, listed while the callback evicts them. */
Test(cache, list_pages_and_callback_may_use_connection) {
  env e;
  env_init(&e, 0);
  for (uint64_t k = 1; k <= 150; k++)
    put_random(&e, k, 10, 1);
  sums s = list_all(&e);
  cr_assert_eq(s.n, 150);
  order o = {.e = &e, .evict = true, .stop_after = 16};
  cache_error err;
  cr_assert_eq(cache_list(e.c, 0, order_cb, &o, &err), 0, "%s", err.msg);
  cr_assert_eq(stats(&e).entries, 150 - 16);
  assert_consistent(&e);
  env_fini(&e);
}

Test(cache, stats_consistent_after_reopen) {
  env e;
  env_init(&e, 0);
  for (uint64_t k = 1; k <= 30; k++)
    put_random(&e, k, 500 * k, k);
  cache_evict_key(e.c, (uint8_t[CACHE_KEY_LEN]){0}, NULL, NULL);
  uint8_t key[CACHE_KEY_LEN];
  make_key(7, key);
  cache_evict_key(e.c, key, NULL, NULL);
  cache_stats a = stats(&e);
  env_reopen(&e);
  cache_stats b = stats(&e);
  cr_assert_eq(a.entries, 29);
  cr_assert_eq(b.entries, a.entries);
  cr_assert_eq(b.bytes, a.bytes);
  cr_assert_eq(b.raw_bytes, a.raw_bytes);
  cr_assert_eq(b.puts, 0);
  assert_consistent(&e);
  /* A totals row made wrong behind our back is fixed at open, even a
   * deleted one. */
  raw_exec(&e, "UPDATE state SET bytes = 7, entries = 1000", UINT64_MAX);
  env_reopen(&e);
  cr_assert_eq(stats(&e).bytes, a.bytes);
  assert_consistent(&e);
  raw_exec(&e, "DELETE FROM state", UINT64_MAX);
  env_reopen(&e);
  cr_assert_eq(stats(&e).bytes, a.bytes);
  assert_consistent(&e);
  env_fini(&e);
}

/* ---- concurrency ---- */

typedef struct worker {
  env *e;                /* shared store */
  int id;                /* worker number, seeds its RNG */
  int errors;            /* unexpected results */
  char first_error[600]; /* the first one */
  uint64_t gets, hits, puts;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  cache_conn *c;
  cache_error err;
  if (cache_conn_open(w->e->s, &c, &err) != 0) {
    w->errors++;
    snprintf(w->first_error, sizeof w->first_error, "open: %s", err.msg);
    return NULL;
  }
  tu_rng r;
  tu_rng_seed(&r, (uint64_t)w->id * 31 + 7);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    double secs =
        (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9;
    if (secs >= 1.5)
      break;
    uint64_t k = (uint64_t)tu_rng_below(&r, 40);
    uint8_t key[CACHE_KEY_LEN];
    make_key(k, key);
    int op = tu_rng_below(&r, 10);
    int rc;
    if (op < 4) {
      /* The content of key k is always the same: readers can check it. */
      size_t len = 1000 + (size_t)(k * 997) % 30000;
      uint8_t *d = random_data(k, len);
      cache_part p;
      part(&p, "graph", k % 5);
      rc = cache_put(c, key, &p, 1, d, len, 1000 + k, &err);
      free(d);
      w->puts += rc == 0;
    } else if (op < 9) {
      uint8_t *d = NULL;
      size_t len = 0;
      rc = cache_get(c, key, &d, &len, NULL, &err);
      w->gets++;
      if (rc == 0) {
        w->hits++;
        size_t want = 1000 + (size_t)(k * 997) % 30000;
        uint8_t *x = random_data(k, want);
        if (len != want || memcmp(d, x, len) != 0) {
          rc = -100;
          snprintf(err.msg, sizeof err.msg, "wrong bytes for key %llu",
                   (unsigned long long)k);
        }
        free(x);
      } else if (rc == CACHE_EMISS) {
        rc = 0;
      }
      free(d);
    } else {
      cache_info info;
      rc = cache_info_get(c, key, &info, &err);
      if (rc == CACHE_EMISS)
        rc = 0;
    }
    if (rc != 0 && w->errors++ == 0)
      snprintf(w->first_error, sizeof w->first_error, "op %d: %d %s", op, rc,
               err.msg);
  }
  cache_conn_close(c);
  return NULL;
}

Test(cache, concurrent_connections, .timeout = 120) {
  env e;
  env_mkdir(&e);
  e.cfg.max_bytes = 400 * 1024; /* evictions happen concurrently too */
  e.cfg.touch_flush_ms = 20;    /* and so do flushes */
  env_open(&e);
  enum { N = 4 };
  worker w[N];
  pthread_t th[N];
  for (int i = 0; i < N; i++) {
    w[i] = (worker){.e = &e, .id = i};
    cr_assert_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  uint64_t gets = 0, hits = 0, puts = 0;
  for (int i = 0; i < N; i++) {
    pthread_join(th[i], NULL);
    cr_assert_eq(w[i].errors, 0, "worker %d: %d errors, first: %s", i,
                 w[i].errors, w[i].first_error);
    gets += w[i].gets;
    hits += w[i].hits;
    puts += w[i].puts;
  }
  cache_stats st = stats(&e);
  cr_assert_eq(st.hits, hits);
  cr_assert_eq(st.hits + st.misses, gets);
  cr_assert_eq(st.puts, puts);
  cr_assert_gt(puts, 10);
  cr_assert_leq(st.bytes, 400 * 1024);
  cr_assert_eq(st.corrupt_dropped, 0);
  assert_consistent(&e);
  env_reopen(&e);
  assert_consistent(&e);
  env_fini(&e);
}

/* ---- crash safety ---- */

/* The child: opens the store and puts (and sometimes gets and evicts) until
 * killed. Writes one byte to `ready` after its first put. */
static void crash_child(const char *dir, int ready, uint64_t seed) {
  cache_config cfg;
  cache_config_default(&cfg);
  cfg.dir = dir;
  cfg.max_bytes = 512 * 1024;
  cfg.touch_flush_ms = 5;
  cache_store *s;
  cache_conn *c;
  if (cache_store_open(&cfg, &s, NULL) != 0 ||
      cache_conn_open(s, &c, NULL) != 0)
    _exit(3);
  tu_rng r;
  tu_rng_seed(&r, seed);
  for (uint64_t i = 0;; i++) {
    uint64_t k = (uint64_t)tu_rng_below(&r, 200);
    uint8_t key[CACHE_KEY_LEN];
    make_key(k, key);
    size_t len = 100 + (size_t)tu_rng_below(&r, 64 * 1024);
    uint8_t *d =
        tu_rng_below(&r, 2) ? random_data(k + i, len) : text_data(k + i, len);
    cache_part p;
    part(&p, "graph", k % 7);
    if (cache_put(c, key, &p, 1, d, len, 1 + k, NULL) != 0)
      _exit(4);
    free(d);
    if (i == 0 && write(ready, "x", 1) != 1)
      _exit(5);
    if (tu_rng_below(&r, 4) == 0) {
      uint8_t *g;
      size_t glen;
      if (cache_get(c, key, &g, &glen, NULL, NULL) == 0)
        free(g);
    }
    if (tu_rng_below(&r, 20) == 0)
      cache_fail_put(c, key, "failed", NULL);
  }
}

typedef struct readall {
  env *e;
  int bad;
} readall;

static int readall_cb(const cache_info *info, void *ctx) {
  readall *ra = ctx;
  uint8_t *d = NULL;
  size_t len;
  cache_error err;
  if (cache_get(ra->e->c, info->key, &d, &len, NULL, &err) != 0)
    ra->bad++;
  free(d);
  return 0;
}

Test(cache, survives_sigkill, .timeout = 300) {
  env e;
  env_mkdir(&e);
  e.cfg.max_bytes = 512 * 1024;
  tu_rng r;
  tu_rng_seed(&r, (uint64_t)time(NULL));
  bool stored = false;
  for (int round = 0; round < 12; round++) {
    /* Even rounds kill while entries are being written; odd rounds at any
     * moment, opening and migrating included. */
    bool wait_ready = round % 2 == 0;
    int p[2];
    cr_assert_eq(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
      close(p[0]);
      crash_child(e.dir, p[1], (uint64_t)round * 1000 + 1);
      _exit(0);
    }
    close(p[1]);
    if (wait_ready) {
      char b;
      ssize_t got = read(p[0], &b, 1);
      cr_assert_eq(got, 1, "the child stored nothing");
      stored = true;
      usleep((useconds_t)(1000 + tu_rng_below(&r, 40000)));
    } else {
      usleep((useconds_t)tu_rng_below(&r, 20000));
    }
    close(p[0]);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "round %d: the child ended by itself (status %d)", round, status);

    env_open(&e);
    cache_stats st = stats(&e);
    cr_assert(st.entries > 0 || !stored, "round %d: entries lost", round);
    cr_assert_leq(st.bytes, 512 * 1024);
    assert_consistent(&e);
    readall ra = {.e = &e};
    cr_assert_eq(cache_list(e.c, 0, readall_cb, &ra, NULL), 0);
    cr_assert_eq(ra.bad, 0, "round %d: %d entries unreadable", round, ra.bad);
    cr_assert_eq(stats(&e).corrupt_dropped, 0);
    env_shut(&e);
  }
  env_open(&e);
  env_fini(&e);
}

/* ---- schema and file trouble ---- */

static int count_aside(const char *dir) {
  int n = 0;
  int tu_n;
  char **list = tu_list(dir, "", &tu_n);
  for (int i = 0; i < tu_n; i++)
    if (strstr(list[i], "cache.db.corrupt-") && !strstr(list[i], "-wal") &&
        !strstr(list[i], "-shm"))
      n++;
  tu_free_list(list, tu_n);
  return n;
}

Test(cache, schema_version_set_and_migration_idempotent) {
  env e;
  env_init(&e, 0);
  put_random(&e, 1, 100, 1);
  cr_assert_eq(raw_int(&e, "PRAGMA user_version", UINT64_MAX), 4);
  sqlite3 *db = raw_open(&e);
  sqlite3_stmt *st;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "wal");
  sqlite3_finalize(st);
  sqlite3_close(db);
  env_reopen(&e);
  env_reopen(&e);
  cr_assert_eq(get_key(&e, 1, NULL, 0), 0);
  cr_assert_eq(raw_int(&e, "PRAGMA user_version", UINT64_MAX), 4);
  env_fini(&e);
}

Test(cache, signatures_stored_and_read) {
  env e;
  env_init(&e, 0);
  uint8_t key[CACHE_KEY_LEN];
  make_key(5, key);
  cache_sig sig;
  for (int i = 0; i < CACHE_SIG_LEN; i++)
    sig.mac[i] = (uint8_t)(i * 7 + 1);
  snprintf(sig.key_id, sizeof sig.key_id, "k2026");
  cache_error err;
  cr_assert_eq(cache_put_signed(e.c, key, NULL, 0, (const uint8_t *)"abc", 3, 1,
                                &sig, &err),
               0, "%s", err.msg);
  cache_info info;
  uint8_t *data = NULL;
  size_t len = 0;
  cr_assert_eq(cache_get(e.c, key, &data, &len, &info, &err), 0, "%s", err.msg);
  free(data);
  cr_assert(info.is_signed);
  cr_assert_str_eq(info.sig.key_id, "k2026");
  cr_assert_arr_eq(info.sig.mac, sig.mac, CACHE_SIG_LEN);
  /* unsigned entries say so; bad key ids are refused */
  make_key(6, key);
  cr_assert_eq(cache_put(e.c, key, NULL, 0, (const uint8_t *)"x", 1, 1, &err),
               0);
  cr_assert_eq(cache_info_get(e.c, key, &info, &err), 0);
  cr_assert(!info.is_signed);
  sig.key_id[0] = '\0';
  cr_assert_eq(cache_put_signed(e.c, key, NULL, 0, (const uint8_t *)"x", 1, 1,
                                &sig, &err),
               CACHE_EINVAL);
  memset(sig.key_id, 'a', sizeof sig.key_id);
  cr_assert_eq(cache_put_signed(e.c, key, NULL, 0, (const uint8_t *)"x", 1, 1,
                                &sig, &err),
               CACHE_EINVAL);
  env_fini(&e);
}

/* A store holding entry 3 (2000 bytes, 5 hits) taken back to an older
 * schema by `sql` (run with sqlite3 directly, as an older daemon left it),
 * then opened: the migration to version 4 must keep the entry. */
static void env_migrated(env *e, const char *sql) {
  env_init(e, 0);
  put_random(e, 3, 2000, 5);
  env_shut(e);
  sqlite3 *db = raw_open(e);
  cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s",
               sqlite3_errmsg(db));
  sqlite3_close(db);
  env_open(e);
  cr_assert_eq(raw_int(e, "PRAGMA user_version", UINT64_MAX), 4);
  cr_assert_eq(get_key(e, 3, NULL, 0), 0);
}

Test(cache, version_1_database_migrates_with_its_entries) {
  env e;
  /* back to version 1: the columns versions 2 and 3 added are gone, and
   * the table version 4 added */
  env_migrated(&e, "DROP TABLE sources;"
                   "ALTER TABLE entries DROP COLUMN sig;"
                   "ALTER TABLE entries DROP COLUMN sig_key;"
                   "ALTER TABLE entries DROP COLUMN label_name;"
                   "ALTER TABLE entries DROP COLUMN label_file;"
                   "ALTER TABLE entries DROP COLUMN label_line;"
                   "ALTER TABLE entries DROP COLUMN label_host;"
                   "PRAGMA user_version = 1;");
  cache_info info;
  uint8_t key[CACHE_KEY_LEN];
  make_key(3, key);
  cr_assert_eq(cache_info_get(e.c, key, &info, NULL), 0);
  cr_assert(!info.is_signed);
  env_fini(&e);
}

static cache_label test_label(const char *name, const char *file, int line,
                              const char *host) {
  cache_label l;
  memset(&l, 0, sizeof l);
  snprintf(l.name, sizeof l.name, "%s", name);
  snprintf(l.file, sizeof l.file, "%s", file);
  l.line = line;
  snprintf(l.host, sizeof l.host, "%s", host);
  return l;
}

static int put_labelled(env *e, uint64_t k, const cache_label *label,
                        cache_error *err) {
  uint8_t key[CACHE_KEY_LEN];
  make_key(k, key);
  cache_meta m = {.compile_us = 10, .label = label};
  return cache_put_entry(e->c, key, (const uint8_t *)"artifact", 8, &m, err);
}

static cache_info info_of(env *e, uint64_t k) {
  uint8_t key[CACHE_KEY_LEN];
  make_key(k, key);
  cache_info info;
  cache_error err;
  cr_assert_eq(cache_info_get(e->c, key, &info, &err), 0, "%s", err.msg);
  return info;
}

/* Whether entry k has a label. */
static bool labelled(env *e, uint64_t k) {
  cache_info info = info_of(e, k);
  return cache_label_present(&info.label);
}

static int first_label_cb(const cache_info *info, void *ctx) {
  *(cache_label *)ctx = info->label;
  return 1;
}

Test(cache, labels_stored_and_read) {
  env e;
  env_init(&e, 0);
  cache_error err;
  cache_label l = test_label("Net (forward)", "/src/model.py", 42, "node7");
  memset(l.name + sizeof "Net (forward)", 'x', 10); /* past the NUL: ignored */
  cr_assert_eq(put_labelled(&e, 1, &l, &err), 0, "%s", err.msg);
  cache_info info = info_of(&e, 1);
  cr_assert_str_eq(info.label.name, "Net (forward)");
  cr_assert_str_eq(info.label.file, "/src/model.py");
  cr_assert_eq(info.label.line, 42);
  cr_assert_str_eq(info.label.host, "node7");
  cr_assert(cache_label_present(&info.label));
  /* get and list return it too */
  uint8_t key[CACHE_KEY_LEN], *data = NULL;
  size_t len;
  make_key(1, key);
  cr_assert_eq(cache_get(e.c, key, &data, &len, &info, &err), 0, "%s", err.msg);
  free(data);
  cr_assert_str_eq(info.label.host, "node7");
  cache_label listed;
  memset(&listed, 0, sizeof listed);
  cr_assert_eq(cache_list(e.c, 1, first_label_cb, &listed, &err), 0);
  cr_assert_str_eq(listed.file, "/src/model.py");
  /* the longest strings fit exactly */
  memset(l.name, 'n', CACHE_LABEL_NAME_MAX);
  l.name[CACHE_LABEL_NAME_MAX] = '\0';
  memset(l.file, 'f', CACHE_LABEL_FILE_MAX);
  l.file[CACHE_LABEL_FILE_MAX] = '\0';
  memset(l.host, 'h', CACHE_LABEL_HOST_MAX);
  l.host[CACHE_LABEL_HOST_MAX] = '\0';
  cr_assert_eq(put_labelled(&e, 2, &l, &err), 0, "%s", err.msg);
  info = info_of(&e, 2);
  cr_assert_eq(strlen(info.label.name), CACHE_LABEL_NAME_MAX);
  cr_assert_eq(strlen(info.label.file), CACHE_LABEL_FILE_MAX);
  cr_assert_eq(strlen(info.label.host), CACHE_LABEL_HOST_MAX);
  /* none given, or an empty one: no label */
  cr_assert_eq(put_labelled(&e, 3, NULL, &err), 0, "%s", err.msg);
  cr_assert(!labelled(&e, 3));
  cache_label empty = test_label("", "", 0, "");
  cr_assert_eq(put_labelled(&e, 4, &empty, &err), 0, "%s", err.msg);
  cr_assert(!labelled(&e, 4));
  cr_assert_eq(raw_int(&e,
                       "SELECT count(*) FROM entries WHERE label_name "
                       "IS NULL",
                       UINT64_MAX),
               2);
  /* a string without its NUL, a negative line: refused, nothing stored */
  l = test_label("a", "b", 1, "c");
  memset(l.host, 'h', sizeof l.host);
  cr_assert_eq(put_labelled(&e, 5, &l, &err), CACHE_EINVAL);
  cr_assert(strstr(err.msg, "host"), "%s", err.msg);
  l = test_label("a", "b", -3, "c");
  cr_assert_eq(put_labelled(&e, 5, &l, &err), CACHE_EINVAL);
  cr_assert(strstr(err.msg, "line"), "%s", err.msg);
  cr_assert_eq(stats(&e).entries, 4);
  env_fini(&e);
}

Test(cache, version_2_database_migrates_with_its_entries) {
  env e;
  /* back to version 2: the label columns of version 3 are gone, and the
   * table version 4 added */
  env_migrated(&e, "DROP TABLE sources;"
                   "ALTER TABLE entries DROP COLUMN label_name;"
                   "ALTER TABLE entries DROP COLUMN label_file;"
                   "ALTER TABLE entries DROP COLUMN label_line;"
                   "ALTER TABLE entries DROP COLUMN label_host;"
                   "PRAGMA user_version = 2;");
  cr_assert(!labelled(&e, 3));
  cache_error err;
  cache_label l = test_label("f", "/x.py", 7, "h");
  cr_assert_eq(put_labelled(&e, 4, &l, &err), 0, "%s", err.msg);
  env_reopen(&e);
  cr_assert_eq(info_of(&e, 4).label.line, 7);
  cr_assert_eq(get_key(&e, 3, NULL, 0), 0);
  uint64_t checked;
  cr_assert_eq(cache_verify_all(e.c, &checked, &err), 0, "%s", err.msg);
  cr_assert_eq(checked, 2);
  env_fini(&e);
}

/* Makes a database with `sql`, and checks that opening it fails with a
 * message containing `why` and leaves the file exactly as it was. */
static void refused_untouched(const char *sql, const char *why) {
  env e;
  env_mkdir(&e);
  sqlite3 *db;
  cr_assert_eq(sqlite3_open(e.db, &db), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  size_t n0, n1;
  uint8_t *before = tu_read(e.db, &n0);
  cache_error err;
  cache_store *s = (cache_store *)1;
  int rc = cache_store_open(&e.cfg, &s, &err);
  cr_assert_eq(rc, CACHE_EIO, "rc %d: %s", rc, err.msg);
  cr_assert_null(s);
  cr_assert(strstr(err.msg, why), "%s", err.msg);
  cr_assert(strstr(err.msg, "refusing"), "%s", err.msg);
  uint8_t *after = tu_read(e.db, &n1);
  cr_assert_not_null(after);
  cr_assert(n0 == n1 && memcmp(before, after, n0) == 0, "file modified");
  cr_assert_eq(count_aside(e.dir), 0, "nothing moved aside");
  free(before);
  free(after);
  tu_rm_tree(e.dir);
}

Test(cache, future_schema_refused_untouched) {
  refused_untouched("CREATE TABLE entries (x); INSERT INTO entries VALUES (42);"
                    "PRAGMA user_version = 99",
                    "schema version 99");
}

/* A healthy sqlite file that is not ours is not ours to change. */
Test(cache, foreign_database_refused_untouched) {
  refused_untouched("CREATE TABLE notes (x); INSERT INTO notes VALUES ('mine')",
                    "not a cache database");
}

static void garbage_case(bool keep_header) {
  env e;
  env_mkdir(&e);
  size_t len = 64 * 1024;
  uint8_t *g;
  if (keep_header) {
    /* A real cache database whose pages after the header are garbage. */
    env_open(&e);
    for (uint64_t k = 1; k <= 20; k++)
      put_random(&e, k, 2000, 1);
    env_shut(&e);
    g = tu_read(e.db, &len);
    cr_assert_gt(len, 8192);
    uint8_t *noise = random_data(99, len);
    memcpy(g + 100, noise + 100, len - 100);
    free(noise);
  } else {
    g = random_data(77, len);
  }
  FILE *f = fopen(e.db, "wb");
  cr_assert_eq(fwrite(g, 1, len, f), len);
  fclose(f);

  cache_error err;
  int rc = cache_store_open(&e.cfg, &e.s, &err);
  cr_assert_eq(rc, 0, "open: %s", err.msg);
  cr_assert(strstr(err.msg, "moved it aside"), "err says so: '%s'", err.msg);
  cr_assert_eq(err.code, 0);
  cr_assert_eq(count_aside(e.dir), 1);
  /* The bad file is kept byte for byte. */
  int tn;
  char **list = tu_list(e.dir, "", &tn);
  for (int i = 0; i < tn; i++) {
    const char *p = strstr(list[i], "cache.db.corrupt-");
    if (p && !strstr(p, "-wal") && !strstr(p, "-shm")) {
      size_t n;
      uint8_t *kept = tu_read(list[i], &n);
      cr_assert_eq(n, len);
      cr_assert(memcmp(kept, g, len) == 0);
      free(kept);
    }
  }
  tu_free_list(list, tn);
  cr_assert_eq(cache_conn_open(e.s, &e.c, &err), 0);
  cr_assert_eq(stats(&e).entries, 0);
  uint8_t *d = random_data(5, 5000);
  put_ok(&e, 5, d, 5000, 1);
  cr_assert_eq(get_key(&e, 5, d, 5000), 0);
  free(d);
  env_reopen(&e);
  cr_assert_eq(get_key(&e, 5, NULL, 0), 0);
  cr_assert_eq(count_aside(e.dir), 1, "a healthy file stays");
  free(g);
  env_fini(&e);
}

/* sqlite finds a broken page while running (here: an overflow chain of a
 * blob, which the checks at open do not read). The operation fails with an
 * I/O error, and the next open runs the full check and moves the file
 * aside. */
Test(cache, runtime_malformed_checked_at_next_open) {
  env e;
  env_init(&e, 0);
  size_t len = 1 << 20;
  put_random(&e, 1, len, 1);
  int64_t page = raw_int(&e, "PRAGMA page_size", UINT64_MAX);
  env_shut(&e);
  size_t n;
  uint8_t *file = tu_read(e.db, &n);
  cr_assert_gt(n, len);
  /* Pages in the middle of the file hold the blob's overflow chain; the
   * first 4 bytes of each is the next page's number. */
  size_t mid = (n / 2 / (size_t)page) * (size_t)page;
  memset(file + mid, 0xee, 4);
  FILE *f = fopen(e.db, "wb");
  cr_assert_eq(fwrite(file, 1, n, f), n);
  fclose(f);
  free(file);

  env_open(&e); /* the small tables are fine */
  cr_assert_eq(count_aside(e.dir), 0);
  cr_assert_eq(get_key(&e, 1, NULL, 0), CACHE_EIO);
  env_shut(&e);
  cache_error err;
  int rc = cache_store_open(&e.cfg, &e.s, &err);
  cr_assert_eq(rc, 0, "%s", err.msg);
  cr_assert(strstr(err.msg, "moved it aside"), "'%s'", err.msg);
  cr_assert_eq(count_aside(e.dir), 1);
  cr_assert_eq(cache_conn_open(e.s, &e.c, &err), 0);
  put_random(&e, 2, 100, 1);
  cr_assert_eq(get_key(&e, 2, NULL, 0), 0);
  env_fini(&e);
}

Test(cache, garbage_file_moved_aside) {
  garbage_case(false);
}

Test(cache, malformed_pages_moved_aside) {
  garbage_case(true);
}

static void *open_garbage(void *arg) {
  env *e = arg;
  cache_store *s = NULL;
  cache_error err;
  intptr_t rc = cache_store_open(&e->cfg, &s, &err);
  cache_store_close(s);
  return (void *)rc;
}

/* Four openers find the same garbage at once: one moves it aside, the
 * others find its fresh file healthy. */
Test(cache, concurrent_opens_move_aside_once) {
  env e;
  env_mkdir(&e);
  uint8_t *g = random_data(3, 20000);
  FILE *f = fopen(e.db, "wb");
  cr_assert_eq(fwrite(g, 1, 20000, f), 20000);
  fclose(f);
  free(g);
  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    cr_assert_eq(pthread_create(&th[i], NULL, open_garbage, &e), 0);
  for (int i = 0; i < 4; i++) {
    void *rc;
    pthread_join(th[i], &rc);
    cr_assert_eq((intptr_t)rc, 0);
  }
  cr_assert_eq(count_aside(e.dir), 1);
  env_open(&e);
  put_random(&e, 1, 10, 1);
  env_fini(&e);
}

Test(cache, unopenable_directory_is_an_error) {
  env e;
  env_mkdir(&e);
  char file[128];
  snprintf(file, sizeof file, "%s/plainfile", e.dir);
  FILE *f = fopen(file, "w");
  fclose(f);
  e.cfg.dir = file;
  cache_error err;
  cache_store *s = NULL;
  cr_assert_eq(cache_store_open(&e.cfg, &s, &err), CACHE_EIO);
  cr_assert_null(s);
  cr_assert(strstr(err.msg, "plainfile"), "%s", err.msg);
  tu_rm_tree(e.dir);
}
