/*
 * test_cache_modes.c: the cache's files are private to the daemon's user.
 *
 * A directory the store creates is 0700; cache.db, its -wal and -shm, and
 * cache.db.lock are 0600 whatever the umask; an older cache whose files are
 * world-readable is narrowed at open.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache.h"
#include "tests/lib/testutil.h"

static mode_t mode_of(const char *dir, const char *name) {
  char p[256];
  snprintf(p, sizeof p, "%s%s%s", dir, *name ? "/" : "", name);
  struct stat sb;
  cr_assert_eq(stat(p, &sb), 0, "%s is missing", p);
  return sb.st_mode & 07777;
}

/* Opens a store in `dir`, writes one entry (so that -wal and -shm exist),
 * checks the modes while it is open, and closes it. */
static void open_write_check(const char *dir) {
  cache_config cfg;
  cache_config_default(&cfg);
  cfg.dir = dir;
  cache_store *s;
  cache_conn *c;
  cache_error err;
  cr_assert_eq(cache_store_open(&cfg, &s, &err), 0, "%s", err.msg);
  cr_assert_eq(cache_conn_open(s, &c, &err), 0, "%s", err.msg);
  uint8_t key[CACHE_KEY_LEN] = {1};
  cr_assert_eq(cache_put(c, key, NULL, 0, (const uint8_t *)"abc", 3, 1, &err),
               0, "%s", err.msg);
  static const char *const files[] = {"cache.db", "cache.db-wal",
                                      "cache.db-shm", "cache.db.lock"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
    cr_expect_eq(mode_of(dir, files[i]), 0600, "%s is %o", files[i],
                 (unsigned)mode_of(dir, files[i]));
  cache_conn_close(c);
  cache_store_close(s);
}

Test(cache_modes, new_cache_is_private) {
  umask(022);
  char top[] = "/tmp/test_cache_modes.XXXXXX";
  cr_assert_not_null(mkdtemp(top));
  char dir[128];
  snprintf(dir, sizeof dir, "%s/a/b", top);
  open_write_check(dir);
  cr_expect_eq(mode_of(dir, ""), 0700, "cache dir is %o",
               (unsigned)mode_of(dir, ""));
  cr_expect_eq(mode_of(top, "a"), 0700);
  tu_rm_tree(top);
}

Test(cache_modes, older_open_cache_is_narrowed) {
  umask(022);
  char dir[] = "/tmp/test_cache_modes.XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  open_write_check(dir);
  char p[256];
  snprintf(p, sizeof p, "%s/cache.db", dir);
  cr_assert_eq(chmod(p, 0644), 0);
  snprintf(p, sizeof p, "%s/cache.db.lock", dir);
  cr_assert_eq(chmod(p, 0666), 0);
  open_write_check(dir);
  tu_rm_tree(dir);
}
