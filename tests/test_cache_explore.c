/*
 * test_cache_explore.c: what the explorer keeps in and reads from the
 * store (cache/explore.h): sources beside entries, their budget, their
 * checks, and browsing entries in pages and orders.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/explore.h"
#include "tests/lib/testutil.h"

typedef struct env {
  char dir[64];
  cache_store *s;
  cache_conn *c;
} env;

static void env_init(env *e, uint64_t max_bytes) {
  snprintf(e->dir, sizeof e->dir, "/tmp/test_explore.XXXXXX");
  cr_assert_not_null(mkdtemp(e->dir), "mkdtemp: %s", strerror(errno));
  cache_config cfg;
  cache_config_default(&cfg);
  cfg.dir = e->dir;
  cfg.max_bytes = max_bytes;
  cfg.touch_flush_ms = 60000;
  cache_error err;
  cr_assert_eq(cache_store_open(&cfg, &e->s, &err), 0, "%s", err.msg);
  cr_assert_eq(cache_conn_open(e->s, &e->c, &err), 0, "%s", err.msg);
}

static void env_fini(env *e) {
  cache_conn_close(e->c);
  cache_store_close(e->s);
  tu_rm_tree(e->dir);
}

static void key_of(int n, uint8_t key[CACHE_KEY_LEN]) {
  memset(key, 0, CACHE_KEY_LEN);
  key[0] = (uint8_t)n;
  key[31] = 0xa5;
}

/* Puts entry n with `len` bytes and compile time `us`. */
static void put(env *e, int n, size_t len, uint64_t us) {
  uint8_t key[CACHE_KEY_LEN];
  key_of(n, key);
  uint8_t *d = malloc(len);
  for (size_t i = 0; i < len; i++)
    d[i] = (uint8_t)(i * 31 + (size_t)n);
  cache_error err;
  cr_assert_eq(cache_put(e->c, key, NULL, 0, d, len, us, &err), 0, "%s",
               err.msg);
  free(d);
}

/* Random bytes: they do not compress, so stored sizes are known. */
static uint8_t *noise(size_t len, unsigned seed) {
  uint8_t *d = malloc(len);
  uint64_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < len; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    d[i] = (uint8_t)s;
  }
  return d;
}

static int source_put(env *e, int n, const uint8_t *d, size_t len,
                      const char *summary, uint64_t budget) {
  uint8_t key[CACHE_KEY_LEN];
  key_of(n, key);
  cache_error err;
  return cache_source_put(e->c, key, d, len, summary, budget, &err);
}

static int source_get(env *e, int n, uint8_t **d, size_t *len, char **sum) {
  uint8_t key[CACHE_KEY_LEN];
  key_of(n, key);
  cache_error err;
  return cache_source_get(e->c, key, d, len, sum, &err);
}

/* Opens `e` with entry 1 and a source of `len` noise bytes (returned, for
 * the caller to free) and summary `sum` beside it. */
static uint8_t *env_with_source(env *e, size_t len, unsigned seed,
                                const char *sum) {
  env_init(e, 0);
  put(e, 1, 100, 10);
  uint8_t *d = noise(len, seed);
  cr_assert_eq(source_put(e, 1, d, len, sum, 0), 0);
  return d;
}

Test(explore, source_round_trip_and_goes_with_its_entry) {
  env e;
  uint8_t *d = env_with_source(&e, 5000, 1, "{\"nodes\":3}");
  uint8_t *got;
  size_t len;
  char *sum;
  cr_assert_eq(source_get(&e, 1, &got, &len, &sum), 0);
  cr_assert_eq(len, 5000);
  cr_assert_arr_eq(got, d, 5000);
  cr_assert_str_eq(sum, "{\"nodes\":3}");
  free(got);
  free(sum);
  /* no entry: refused; evicting the entry takes its source */
  cr_assert_eq(source_put(&e, 2, d, 10, "{}", 0), CACHE_EMISS);
  uint8_t key[CACHE_KEY_LEN];
  key_of(1, key);
  cache_error err;
  cr_assert_eq(cache_evict_key(e.c, key, NULL, &err), 0);
  cr_assert_eq(source_get(&e, 1, &got, &len, NULL), CACHE_EMISS);
  uint64_t count, stored, raw;
  cr_assert_eq(cache_source_totals(e.c, &count, &stored, &raw, &err), 0);
  cr_assert_eq(count, 0);
  /* an entry replaced (a forced compile) loses the old source too */
  put(&e, 3, 100, 10);
  cr_assert_eq(source_put(&e, 3, d, 100, "{}", 0), 0);
  put(&e, 3, 120, 10);
  cr_assert_eq(source_get(&e, 3, &got, &len, NULL), CACHE_EMISS);
  free(d);
  env_fini(&e);
}

Test(explore, budget_drops_oldest_sources_never_entries) {
  env e;
  env_init(&e, 0);
  for (int n = 1; n <= 5; n++)
    put(&e, n, 50, 10);
  uint8_t *d = noise(4000, 2);
  /* 4000 incompressible bytes each: three fit in 13000 */
  for (int n = 1; n <= 5; n++) {
    cr_assert_eq(source_put(&e, n, d, 4000, "{}", 13000), 0);
    usleep(2000); /* distinct creation times */
  }
  uint8_t *got;
  size_t len;
  for (int n = 1; n <= 5; n++) {
    int rc = source_get(&e, n, &got, &len, NULL);
    cr_assert_eq(rc, n <= 2 ? CACHE_EMISS : 0, "source %d: %d", n, rc);
    if (!rc)
      free(got);
  }
  cache_stats st;
  cache_stats_get(e.s, &st);
  cr_assert_eq(st.entries, 5, "entries stay");
  /* one alone over the budget is refused */
  cr_assert_eq(source_put(&e, 1, d, 4000, "{}", 1000), CACHE_ETOOBIG);
  free(d);
  env_fini(&e);
}

Test(explore, corrupt_source_is_dropped_and_entry_kept) {
  env e;
  uint8_t *d = env_with_source(&e, 3000, 3, "{}");
  char path[128];
  snprintf(path, sizeof path, "%s/cache.db", e.dir);
  sqlite3 *db;
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(db,
                            "UPDATE sources SET data = "
                            "zeroblob(stored_size)",
                            NULL, NULL, NULL),
               SQLITE_OK, "%s", sqlite3_errmsg(db));
  sqlite3_close(db);
  uint8_t *got;
  size_t len;
  cr_assert_eq(source_get(&e, 1, &got, &len, NULL), CACHE_ECORRUPT);
  cr_assert_eq(source_get(&e, 1, &got, &len, NULL), CACHE_EMISS, "dropped");
  uint8_t key[CACHE_KEY_LEN];
  key_of(1, key);
  cache_info info;
  cache_error err;
  cr_assert_eq(cache_info_get(e.c, key, &info, &err), 0, "the entry stays");
  /* a summary that is too long is refused */
  char *big = malloc(CACHE_SUMMARY_MAX + 2);
  memset(big, 'x', CACHE_SUMMARY_MAX + 1);
  big[CACHE_SUMMARY_MAX + 1] = '\0';
  cr_assert_eq(source_put(&e, 1, d, 10, big, 0), CACHE_EINVAL);
  free(big);
  free(d);
  env_fini(&e);
}

typedef struct seen {
  int keys[16];
  bool has_summary[16];
  int n;
} seen;

static int collect(const cache_info *info, const char *summary, void *ctx) {
  seen *s = ctx;
  s->has_summary[s->n] = summary != NULL;
  s->keys[s->n++] = info->key[0];
  return 0;
}

Test(explore, browse_orders_and_pages) {
  env e;
  env_init(&e, 0);
  /* key n: n * 100 bytes, compile time (6 - n) ms */
  for (int n = 1; n <= 5; n++)
    put(&e, n, (size_t)n * 100, (uint64_t)(6 - n) * 1000);
  uint8_t *d = noise(10, 4);
  cr_assert_eq(source_put(&e, 2, d, 10, "{\"a\":1}", 0), 0);
  free(d);
  cache_error err;
  seen s = {0};
  cr_assert_eq(cache_browse(e.c, CACHE_BY_SIZE, 0, 10, collect, &s, &err), 0);
  cr_assert_eq(s.n, 5);
  for (int i = 0; i < 5; i++)
    cr_assert_eq(s.keys[i], 5 - i);
  cr_assert(s.has_summary[3] && !s.has_summary[0]);
  memset(&s, 0, sizeof s);
  cr_assert_eq(
      cache_browse(e.c, CACHE_BY_COMPILE_TIME, 1, 2, collect, &s, &err), 0);
  cr_assert_eq(s.n, 2);
  cr_assert_eq(s.keys[0], 2);
  cr_assert_eq(s.keys[1], 3);
  memset(&s, 0, sizeof s);
  cr_assert_eq(cache_browse(e.c, CACHE_BY_CREATED, 5, 10, collect, &s, &err),
               0);
  cr_assert_eq(s.n, 0);
  cr_assert_eq(cache_order_parse("hits"), CACHE_BY_HITS);
  cr_assert_eq(cache_order_parse("nope"), -1);
  cr_assert_str_eq(cache_order_name(CACHE_BY_LAST_USED), "last_used");
  env_fini(&e);
}
