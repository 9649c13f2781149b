/*
 * store.c: the cache_store: opening the database, its schema and migrations,
 * moving a malformed file aside, the size counters, and the touch flusher.
 *
 * Opening, in order:
 *   1. Read PRAGMA user_version before anything can write. A version newer
 *      than this code knows is refused and the file is left as it is: an
 *      older daemon must not "repair" a newer daemon's database.
 *   2. Switch to WAL (persistent in the file) and run the migrations from
 *      the file's version to ours in one IMMEDIATE transaction, so a crash
 *      halfway leaves the old version intact and two processes opening at
 *      once migrate once.
 *   3. Recompute the totals row from the entries (cheap: the metadata lives
 *      apart from the blobs) in the same transaction, so stats always start
 *      equal to what the database holds.
 *   4. Check the small tables with PRAGMA quick_check(<table>). A full check
 *      reads every page, which for a cache of many GB would make every
 *      daemon start slow; blobs are verified by their digest on every read
 *      instead. When sqlite reported the file malformed while running, a
 *      marker file makes the next open run the full check.
 * If sqlite says the file is not a database or is malformed (SQLITE_NOTADB,
 * SQLITE_CORRUPT, or a check that fails), the file and its -wal/-shm are
 * renamed to cache.db.corrupt-<unix time>[-N] and a fresh database is made;
 * open succeeds and err->msg says what happened. Nothing is ever deleted:
 * any other error (busy, permissions, I/O, a newer version) fails the open.
 * All of this runs under an flock on cache.db.lock, so processes opening one
 * directory at once take turns (and never move aside each other's fresh
 * file).
 *
 * Files in the directory: cache.db, cache.db-wal, cache.db-shm (sqlite),
 * cache.db.lock (the open lock), cache.db.check (the marker, rarely).
 * They are private to the user running the daemon: directories it creates
 * are 0700, files 0600. cache.db is created by us before sqlite opens it, and
 * sqlite gives -wal and -shm the mode of cache.db; files of an older cache
 * that are more open than that are narrowed to 0600 at open.
 *
 * Sizes. Triggers keep a one-row `state` table exact inside every
 * transaction (entries, bytes, raw_bytes, failures, and a generation number
 * bumped by each change). Every write transaction reads that row before it
 * commits and publishes it here; the generation orders publications from
 * different threads, so stats never go back to an older state.
 *
 * The flusher is a thread with its own connection. It sleeps on a condition
 * variable with a timeout of touch_flush_ms (so close wakes it at once),
 * writes the pending touches and drops expired failure records.
 */
#include "cache/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/monocond.h"

/* ---- schema ---- */

/* Migration i takes a database from user_version i to i + 1. Append only:
 * never edit a step that has shipped. */
static const char *const migrations[] = {
    /* 0 -> 1: the initial schema. Blobs live in their own table so that
     * scans of the metadata (eviction, listing, totals) never page through
     * artifact bytes. AUTOINCREMENT: an id is never reused, so "delete the
     * corrupt row with id N" cannot hit a newer entry under the same key. */
    "CREATE TABLE entries ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  key BLOB NOT NULL UNIQUE,"     /* 32 bytes */
    "  digest BLOB,"                  /* SHA-256 of the artifact */
    "  size INTEGER NOT NULL,"        /* uncompressed bytes */
    "  stored_size INTEGER NOT NULL," /* bytes of the zstd frame */
    "  compile_us INTEGER NOT NULL,"  /* what a hit saves */
    "  created_ms INTEGER NOT NULL,"
    "  last_used_ms INTEGER NOT NULL,"
    "  hits INTEGER NOT NULL DEFAULT 0,"
    "  priority REAL NOT NULL" /* GDSF priority */
    ");"
    "CREATE INDEX entries_by_priority ON entries (priority);"
    "CREATE INDEX entries_by_last_used ON entries (last_used_ms);"
    "CREATE TABLE blobs ("
    "  id INTEGER PRIMARY KEY REFERENCES entries (id) ON DELETE CASCADE,"
    "  data BLOB" /* one zstd frame */
    ");"
    "CREATE TABLE parts ("
    "  entry INTEGER NOT NULL REFERENCES entries (id) ON DELETE CASCADE,"
    "  name TEXT NOT NULL,"
    "  digest BLOB NOT NULL,"
    "  PRIMARY KEY (entry, name)"
    ") WITHOUT ROWID;"
    "CREATE INDEX parts_by_digest ON parts (name, digest);"
    "CREATE TABLE failures ("
    "  key BLOB PRIMARY KEY,"
    "  message TEXT NOT NULL,"
    "  created_ms INTEGER NOT NULL"
    ");"
    "CREATE INDEX failures_by_time ON failures (created_ms);"
    "CREATE TABLE state ("
    "  id INTEGER PRIMARY KEY CHECK (id = 1),"
    "  entries INTEGER NOT NULL, bytes INTEGER NOT NULL,"
    "  raw_bytes INTEGER NOT NULL, failures INTEGER NOT NULL,"
    "  gen INTEGER NOT NULL, clock REAL NOT NULL"
    ");"
    "INSERT INTO state VALUES (1, 0, 0, 0, 0, 0, 0.0);"
    "CREATE TRIGGER entries_ins AFTER INSERT ON entries BEGIN"
    "  UPDATE state SET entries = entries + 1,"
    "    bytes = bytes + NEW.stored_size, raw_bytes = raw_bytes + NEW.size,"
    "    gen = gen + 1 WHERE id = 1;"
    "END;"
    "CREATE TRIGGER entries_del AFTER DELETE ON entries BEGIN"
    "  UPDATE state SET entries = entries - 1,"
    "    bytes = bytes - OLD.stored_size, raw_bytes = raw_bytes - OLD.size,"
    "    gen = gen + 1 WHERE id = 1;"
    "END;"
    "CREATE TRIGGER entries_upd AFTER UPDATE OF size, stored_size ON entries"
    " BEGIN"
    "  UPDATE state SET bytes = bytes - OLD.stored_size + NEW.stored_size,"
    "    raw_bytes = raw_bytes - OLD.size + NEW.size,"
    "    gen = gen + 1 WHERE id = 1;"
    "END;"
    "CREATE TRIGGER failures_ins AFTER INSERT ON failures BEGIN"
    "  UPDATE state SET failures = failures + 1, gen = gen + 1 WHERE id = 1;"
    "END;"
    "CREATE TRIGGER failures_del AFTER DELETE ON failures BEGIN"
    "  UPDATE state SET failures = failures - 1, gen = gen + 1 WHERE id = 1;"
    "END;",
    /* 1 -> 2: signatures (an HMAC and the id of its key); entries of
     * version 1 are unsigned. */
    "ALTER TABLE entries ADD COLUMN sig BLOB;"
    "ALTER TABLE entries ADD COLUMN sig_key TEXT;",
    /* 2 -> 3: labels (what people call an entry: a name, a source file and
     * line, a host); entries of version 2 have none (NULLs). Adding
     * columns with no default rewrites no row, so this is instant on a
     * cache of any size. */
    "ALTER TABLE entries ADD COLUMN label_name TEXT;"
    "ALTER TABLE entries ADD COLUMN label_file TEXT;"
    "ALTER TABLE entries ADD COLUMN label_line INTEGER;"
    "ALTER TABLE entries ADD COLUMN label_host TEXT;",
    /* 3 -> 4: the request each entry was compiled from, for the explorer
     * (cache/explore.h): one zstd frame with its digest, and a short JSON
     * summary. Dropped with its entry; kept apart from the artifacts' cap,
     * under a budget of its own. */
    "CREATE TABLE sources ("
    "  id INTEGER PRIMARY KEY REFERENCES entries (id) ON DELETE CASCADE,"
    "  digest BLOB NOT NULL,"
    "  size INTEGER NOT NULL,"
    "  stored_size INTEGER NOT NULL,"
    "  created_ms INTEGER NOT NULL,"
    "  summary TEXT NOT NULL,"
    "  data BLOB NOT NULL"
    ");"
    "CREATE INDEX sources_by_time ON sources (created_ms);",
};

_Static_assert(sizeof migrations / sizeof migrations[0] ==
                   CACHE__SCHEMA_VERSION,
               "one migration per schema version");

/* Tables checked at every open (small: no artifact bytes). */
static const char *const checked_tables[] = {"entries", "parts", "failures",
                                             "state"};

/* Makes the totals row equal to what the tables hold. */
static const char recompute_sql[] =
    "UPDATE state SET"
    " entries = (SELECT count(*) FROM entries),"
    " bytes = (SELECT CAST(total(stored_size) AS INTEGER) FROM entries),"
    " raw_bytes = (SELECT CAST(total(size) AS INTEGER) FROM entries),"
    " failures = (SELECT count(*) FROM failures),"
    " gen = gen + 1 WHERE id = 1";

/* ---- small helpers ---- */

int64_t cache__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool is_malformed(int rc) {
  return (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB;
}

/* A setup failure: the sqlite code decides whether the file is moved aside. */
static int db_error(sqlite3 *db, int rc, const char *what, cache_error *err) {
  return cache__errorf(err, cache__code_of(rc), "%s: %s (sqlite code %d)", what,
                       db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), rc);
}

/* Runs a statement that yields one integer (or text, via *text). */
static int query_one(sqlite3 *db, const char *sql, int64_t *num, char *text,
                     size_t textlen, int *sqlite_rc) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
      if (num)
        *num = sqlite3_column_int64(st, 0);
      if (text) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        snprintf(text, textlen, "%s", t ? (const char *)t : "");
      }
      rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
      rc = SQLITE_ERROR;
    }
  }
  sqlite3_finalize(st);
  *sqlite_rc = rc;
  return rc;
}

/* mkdir -p; what it creates is private (0700). */
static int make_dir(const char *dir, cache_error *err) {
  char *p = strdup(dir);
  if (!p)
    return cache__errorf(err, CACHE_ENOMEM, "out of memory");
  for (char *q = p + 1;; q++) {
    if (*q != '/' && *q != '\0')
      continue;
    char saved = *q;
    *q = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST) {
      int e = errno;
      cache__errorf(err, CACHE_EIO, "cannot create %s: %s", p, strerror(e));
      free(p);
      return CACHE_EIO;
    }
    *q = saved;
    if (saved == '\0')
      break;
  }
  free(p);
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return cache__errorf(err, CACHE_EIO, "%s is not a directory", dir);
  return 0;
}

/* "<a><b>" in malloc'd memory, or NULL. */
static char *concat(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *r = malloc(la + lb + 1);
  if (r) {
    memcpy(r, a, la);
    memcpy(r + la, b, lb + 1);
  }
  return r;
}

/* The marker that asks the next open for a full check. */
static char *marker_path(const cache_store *s) {
  return concat(s->path, ".check");
}

void cache__note_malformed(cache_store *s) {
  char *m = marker_path(s);
  if (!m)
    return;
  int fd = open(m, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0)
    close(fd);
  free(m);
}

static bool marker_exists(const cache_store *s) {
  char *m = marker_path(s);
  bool yes = m && access(m, F_OK) == 0;
  free(m);
  return yes;
}

static void marker_remove(const cache_store *s) {
  char *m = marker_path(s);
  if (m)
    unlink(m);
  free(m);
}

/* Renames the database and its -wal/-shm to <path>.corrupt-<time>[-N]; the
 * new name goes to *aside (malloc'd, the caller frees). */
static int move_aside(cache_store *s, char **aside, cache_error *err) {
  long long t = (long long)time(NULL);
  for (int n = 0; n < 1000; n++) {
    char suffix[64];
    if (n == 0)
      snprintf(suffix, sizeof suffix, ".corrupt-%lld", t);
    else
      snprintf(suffix, sizeof suffix, ".corrupt-%lld-%d", t, n);
    char *name = concat(s->path, suffix);
    if (!name)
      return cache__errorf(err, CACHE_ENOMEM, "out of memory");
    if (access(name, F_OK) == 0) {
      free(name);
      continue;
    }
    if (rename(s->path, name) != 0) {
      int e = errno;
      free(name);
      return cache__errorf(err, CACHE_EIO, "cannot move %s aside: %s", s->path,
                           strerror(e));
    }
    static const char *const sfx[] = {"-wal", "-shm"};
    for (int i = 0; i < 2; i++) {
      char *from = concat(s->path, sfx[i]), *to = concat(name, sfx[i]);
      if (from && to && access(from, F_OK) == 0)
        rename(from, to); /* best effort: the main file is already aside */
      free(from);
      free(to);
    }
    *aside = name;
    return 0;
  }
  return cache__errorf(err, CACHE_EIO,
                       "cannot find a free name to move %s aside", s->path);
}

/* ---- setting up the database ---- */

/* Applies the missing migrations and recomputes the totals, in one
 * transaction. *sqlite_rc gets the failing sqlite code. */
static int migrate(cache_store *s, sqlite3 *db, int *sqlite_rc,
                   cache_error *err) {
  int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
  if (rc != SQLITE_OK) {
    *sqlite_rc = rc;
    return db_error(db, rc, "starting the migration", err);
  }
  int64_t v = 0;
  rc = query_one(db, "PRAGMA user_version", &v, NULL, 0, sqlite_rc);
  int code = 0;
  if (rc != SQLITE_OK) {
    code = db_error(db, rc, "reading the schema version", err);
  } else if (v < 0 || v > CACHE__SCHEMA_VERSION) {
    code = cache__errorf(err, CACHE_EIO,
                         "%s has schema version %lld; this build knows "
                         "versions up to %d; refusing to open it (left "
                         "untouched)",
                         s->path, (long long)v, CACHE__SCHEMA_VERSION);
  }
  for (int64_t i = v; code == 0 && i < CACHE__SCHEMA_VERSION; i++) {
    rc = sqlite3_exec(db, migrations[i], NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
      *sqlite_rc = rc;
      code = db_error(db, rc, "migrating the schema", err);
    }
  }
  if (code == 0 && v != CACHE__SCHEMA_VERSION) {
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d",
             CACHE__SCHEMA_VERSION);
    rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
      *sqlite_rc = rc;
      code = db_error(db, rc, "setting the schema version", err);
    }
  }
  if (code == 0) {
    /* The row itself may have been deleted by hand: bring it back. */
    rc = sqlite3_exec(db,
                      "INSERT OR IGNORE INTO state VALUES (1, 0, 0, 0, 0, 0, "
                      "0.0);",
                      NULL, NULL, NULL);
    if (rc == SQLITE_OK)
      rc = sqlite3_exec(db, recompute_sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
      *sqlite_rc = rc;
      code = db_error(db, rc, "recomputing the totals", err);
    }
  }
  if (code == 0) {
    rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
      *sqlite_rc = rc;
      code = db_error(db, rc, "committing the migration", err);
    }
  }
  if (code != 0 && !sqlite3_get_autocommit(db))
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  return code;
}

/* Runs quick_check on the small tables, or on everything when `full`. */
static int check(sqlite3 *db, bool full, int *sqlite_rc, cache_error *err) {
  size_t n = full ? 1 : sizeof checked_tables / sizeof checked_tables[0];
  for (size_t i = 0; i < n; i++) {
    char sql[128], res[256];
    if (full)
      snprintf(sql, sizeof sql, "PRAGMA quick_check");
    else
      snprintf(sql, sizeof sql, "PRAGMA quick_check(%s)", checked_tables[i]);
    int rc = query_one(db, sql, NULL, res, sizeof res, sqlite_rc);
    if (rc != SQLITE_OK)
      return db_error(db, rc, sql, err);
    if (strcmp(res, "ok") != 0) {
      *sqlite_rc = SQLITE_CORRUPT;
      return cache__errorf(err, CACHE_EIO, "%s: %s", sql, res);
    }
  }
  return 0;
}

/* Narrows an existing file of ours that others may read to 0600. */
static void make_private(const char *path) {
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 077) &&
      sb.st_uid == geteuid())
    chmod(path, sb.st_mode & 0600);
}

/* Creates the database file (0600) unless it exists, so that sqlite, which
 * would create it 0644, and its -wal/-shm (which take the database's mode)
 * stay private; narrows the files of an older, more open cache. */
static int create_private(const cache_store *s, cache_error *err) {
  int fd = open(s->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    return cache__errorf(err, CACHE_EIO, "cannot open %s: %s", s->path,
                         strerror(e));
  }
  close(fd);
  static const char *const suffixes[] = {"", "-wal", "-shm", ".lock"};
  for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
    char *f = concat(s->path, suffixes[i]);
    if (!f)
      return cache__errorf(err, CACHE_ENOMEM, "out of memory");
    make_private(f);
    free(f);
  }
  return 0;
}

/* Opens, checks and migrates the database once. On failure *sqlite_rc tells
 * whether sqlite found the file malformed. */
static int setup_once(cache_store *s, int *sqlite_rc, cache_error *err) {
  sqlite3 *db = NULL;
  *sqlite_rc = SQLITE_OK;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  int code = create_private(s, err);
  if (code != 0)
    return code;
  int rc = sqlite3_open_v2(s->path, &db, flags, NULL);
  int64_t v = 0;
  char mode[32];
  if (rc != SQLITE_OK) {
    code = db_error(db, rc, "opening the database", err);
    goto out; /* not a verdict on the file: *sqlite_rc stays OK */
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, (int)s->cfg.busy_timeout_ms);
  /* 1. The version, before anything may write to the file. */
  rc = query_one(db, "PRAGMA user_version", &v, NULL, 0, sqlite_rc);
  if (rc != SQLITE_OK) {
    code = db_error(db, rc, "reading the schema version", err);
    goto out;
  }
  if (v < 0 || v > CACHE__SCHEMA_VERSION) {
    code = cache__errorf(err, CACHE_EIO,
                         "%s has schema version %lld; this build knows "
                         "versions up to %d; refusing to open it (left "
                         "untouched)",
                         s->path, (long long)v, CACHE__SCHEMA_VERSION);
    goto out;
  }
  /* Version 0 with tables: somebody else's database; not ours to change. */
  int64_t objects = 0;
  if (v == 0) {
    rc = query_one(db, "SELECT count(*) FROM sqlite_schema", &objects, NULL, 0,
                   sqlite_rc);
    if (rc != SQLITE_OK) {
      code = db_error(db, rc, "reading the schema", err);
      goto out;
    }
  }
  if (objects > 0) {
    code = cache__errorf(err, CACHE_EIO,
                         "%s is a sqlite database with %lld schema objects "
                         "but no schema version: not a cache database; "
                         "refusing to open it (left untouched)",
                         s->path, (long long)objects);
    goto out;
  }
  /* A new file gets 16 KiB pages: artifacts are blobs of 10 KiB to MBs, and
   * with 4 KiB pages a 200 KB get walks 50 overflow pages and takes twice as
   * long. The page size of an existing file never changes. */
  if (v == 0) {
    rc = sqlite3_exec(db, "PRAGMA page_size = 16384", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
      *sqlite_rc = rc;
      code = db_error(db, rc, "setting the page size", err);
      goto out;
    }
  }
  /* 2. WAL: persistent, so only the first open of a file changes it. */
  rc = query_one(db, "PRAGMA journal_mode = WAL", NULL, mode, sizeof mode,
                 sqlite_rc);
  if (rc != SQLITE_OK) {
    code = db_error(db, rc, "enabling WAL", err);
    goto out;
  }
  if (strcmp(mode, "wal") != 0) {
    code = cache__errorf(err, CACHE_EIO,
                         "%s: WAL mode is not available here (journal mode "
                         "stays '%s'); is the directory on a network file "
                         "system?",
                         s->path, mode);
    goto out;
  }
  /* 3. Migrate and recompute the totals. */
  code = migrate(s, db, sqlite_rc, err);
  if (code != 0)
    goto out;
  /* 4. Check. */
  code = check(db, marker_exists(s), sqlite_rc, err);
out:
  sqlite3_close_v2(db);
  return code;
}

/* Checks, migrates, and moves a malformed file aside if need be. */
static int setup_locked(cache_store *s, cache_error *err) {
  int sqlite_rc;
  int rc = setup_once(s, &sqlite_rc, err);
  if (rc == 0) {
    marker_remove(s);
    return 0;
  }
  if (!is_malformed(sqlite_rc))
    return rc;
  char why[sizeof err->msg];
  snprintf(why, sizeof why, "%s", err->msg);
  char *aside = NULL;
  rc = move_aside(s, &aside, err);
  if (rc != 0)
    return rc;
  marker_remove(s);
  rc = setup_once(s, &sqlite_rc, err);
  if (rc == 0)
    cache__errorf(err, 0,
                  "the database was malformed (%.200s); moved it aside to "
                  "%.200s and started an empty one",
                  why, aside);
  free(aside);
  return rc;
}

/* Runs setup_locked holding an exclusive lock on <path>.lock, so that two
 * processes opening the same directory check, migrate and move aside one
 * after the other: the second then finds the first one's healthy file. */
static int setup(cache_store *s, cache_error *err) {
  char *lock = concat(s->path, ".lock");
  if (!lock)
    return cache__errorf(err, CACHE_ENOMEM, "out of memory");
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    cache__errorf(err, CACHE_EIO, "cannot open %s: %s", lock, strerror(e));
    free(lock);
    return CACHE_EIO;
  }
  free(lock);
  while (flock(fd, LOCK_EX) != 0 && errno == EINTR)
    ;
  int rc = setup_locked(s, err);
  close(fd); /* releases the lock */
  return rc;
}

/* ---- the flusher ---- */

static void purge_failures(cache_store *s) {
  pthread_mutex_lock(&s->sizes_mu);
  uint64_t n = s->sizes.failures;
  pthread_mutex_unlock(&s->sizes_mu);
  if (n == 0)
    return;
  cache_conn *c = s->flush_conn;
  if (cache__begin_write(c, NULL) != 0)
    return;
  sqlite3_stmt *st = cache__stmt(c, CACHE__STMT_FAIL_PURGE, NULL);
  int rc = CACHE_EIO;
  if (st) {
    sqlite3_bind_int64(st, 1,
                       cache__now_ms() - (int64_t)s->cfg.failure_ttl_s * 1000);
    rc = cache__step_done(c, st, "dropping expired failures", NULL);
  }
  if (rc == 0)
    cache__commit_write(c, NULL);
  else
    cache__rollback(c);
}

static void *flusher_main(void *arg) {
  cache_store *s = arg;
  pthread_mutex_lock(&s->flush_mu);
  while (!s->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec +
                  (uint64_t)(s->cfg.touch_flush_ms % 1000) * 1000000;
    ts.tv_sec += s->cfg.touch_flush_ms / 1000 + (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    int rc = 0;
    while (!s->stop && rc == 0)
      rc = pthread_cond_timedwait(&s->flush_cv, &s->flush_mu, &ts);
    if (s->stop)
      break;
    pthread_mutex_unlock(&s->flush_mu);
    cache__touch_flush(s->flush_conn, NULL); /* failures stay pending */
    purge_failures(s);
    pthread_mutex_lock(&s->flush_mu);
  }
  pthread_mutex_unlock(&s->flush_mu);
  return NULL;
}

/* Starts the flusher with every signal blocked: a library thread must not
 * receive the process's signals. */
static int start_flusher(cache_store *s, cache_error *err) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&s->flusher, NULL, flusher_main, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0)
    return cache__errorf(err, CACHE_EIO, "cannot start the flusher: %s",
                         strerror(rc));
  s->flusher_running = true;
  return 0;
}

/* ---- public ---- */

const char *cache_strerror(int code) {
  switch (code) {
#define X(name, c, text)                                                       \
  case c:                                                                      \
    return text;
    CACHE_ERRORS(X)
#undef X
  }
  return "unknown error";
}

void cache_config_default(cache_config *c) {
  memset(c, 0, sizeof *c);
  c->zstd_level = 3;
  c->busy_timeout_ms = 5000;
  c->failure_ttl_s = 600;
  c->touch_flush_ms = 1000;
}

void cache__publish(cache_store *s, const cache__totals *t) {
  pthread_mutex_lock(&s->sizes_mu);
  if (t->gen >= s->sizes.gen)
    s->sizes = *t;
  pthread_mutex_unlock(&s->sizes_mu);
}

void cache_stats_get(cache_store *s, cache_stats *out) {
  memset(out, 0, sizeof *out);
  if (!s)
    return;
  out->hits = atomic_load(&s->hits);
  out->misses = atomic_load(&s->misses);
  out->puts = atomic_load(&s->puts);
  out->evictions = atomic_load(&s->evictions);
  out->corrupt_dropped = atomic_load(&s->corrupt_dropped);
  out->compile_us_saved = atomic_load(&s->compile_us_saved);
  pthread_mutex_lock(&s->sizes_mu);
  out->entries = s->sizes.entries;
  out->bytes = s->sizes.bytes;
  out->raw_bytes = s->sizes.raw_bytes;
  out->failures_remembered = s->sizes.failures;
  pthread_mutex_unlock(&s->sizes_mu);
}

static int check_config(const cache_config *cfg, cache_error *err) {
  if (!cfg->dir || !cfg->dir[0])
    return cache__errorf(err, CACHE_EINVAL, "cache: no directory given");
  if (cfg->zstd_level < ZSTD_minCLevel() || cfg->zstd_level > ZSTD_maxCLevel())
    return cache__errorf(err, CACHE_EINVAL,
                         "cache: zstd level %d is outside [%d, %d]",
                         cfg->zstd_level, ZSTD_minCLevel(), ZSTD_maxCLevel());
  if (cfg->busy_timeout_ms > INT32_MAX)
    return cache__errorf(err, CACHE_EINVAL, "cache: busy timeout too large");
  if (!sqlite3_threadsafe())
    return cache__errorf(err, CACHE_EINVAL,
                         "cache: sqlite was built without thread support");
  return 0;
}

/* Allocates the store and its locks; fills in defaults for zero fields. */
static int store_new(const cache_config *cfg, cache_store **out,
                     cache_error *err) {
  cache_store *s = calloc(1, sizeof *s);
  if (!s)
    return cache__errorf(err, CACHE_ENOMEM, "out of memory");
  s->cfg = *cfg;
  if (s->cfg.zstd_level == 0)
    s->cfg.zstd_level = 3;
  if (s->cfg.busy_timeout_ms == 0)
    s->cfg.busy_timeout_ms = 5000;
  if (s->cfg.failure_ttl_s == 0)
    s->cfg.failure_ttl_s = 600;
  if (s->cfg.touch_flush_ms == 0)
    s->cfg.touch_flush_ms = 1000;
  size_t n = strlen(cfg->dir) + sizeof "/cache.db";
  s->dir = strdup(cfg->dir);
  s->path = malloc(n);
  s->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
  pthread_mutex_init(&s->sizes_mu, NULL);
  pthread_mutex_init(&s->touch_mu, NULL);
  pthread_mutex_init(&s->flush_mu, NULL);
  monocond_init(&s->flush_cv);
  *out = s;
  if (!s->dir || !s->path)
    return cache__errorf(err, CACHE_ENOMEM, "out of memory");
  if (!s->sha256)
    return cache__errorf(err, CACHE_EIO, "OpenSSL has no SHA-256");
  snprintf(s->path, n, "%s/cache.db", cfg->dir);
  s->cfg.dir = s->dir;
  return 0;
}

int cache_store_open(const cache_config *cfg, cache_store **out,
                     cache_error *err) {
  cache_error local;
  if (!err)
    err = &local;
  err->code = 0;
  err->msg[0] = '\0';
  if (!out)
    return cache__errorf(err, CACHE_EINVAL, "cache_store_open: NULL out");
  *out = NULL;
  if (!cfg)
    return cache__errorf(err, CACHE_EINVAL, "cache_store_open: NULL config");
  int rc = check_config(cfg, err);
  if (rc != 0)
    return rc;
  cache_store *s = NULL;
  rc = store_new(cfg, &s, err);
  if (rc == 0)
    rc = make_dir(s->dir, err);
  if (rc == 0)
    rc = setup(s, err);
  /* setup may leave a note (a file moved aside) in err; keep it. */
  cache_error note = {0};
  if (rc == 0)
    note = *err;
  if (rc == 0)
    rc = cache__conn_new(s, &s->flush_conn, err);
  if (rc == 0) {
    cache__totals t;
    rc = cache__totals_read(s->flush_conn, &t, err);
    if (rc == 0)
      cache__publish(s, &t);
  }
  if (rc == 0)
    rc = start_flusher(s, err);
  if (rc != 0) {
    cache_store_close(s);
    return rc;
  }
  *err = note;
  *out = s;
  return 0;
}

void cache_store_close(cache_store *s) {
  if (!s)
    return;
  if (s->flusher_running) {
    pthread_mutex_lock(&s->flush_mu);
    s->stop = true;
    pthread_cond_signal(&s->flush_cv);
    pthread_mutex_unlock(&s->flush_mu);
    pthread_join(s->flusher, NULL);
  }
  if (s->flush_conn) {
    cache__touch_flush(s->flush_conn, NULL);
    cache__conn_free(s->flush_conn);
  }
  cache__touches_free(&s->touches);
  pthread_mutex_destroy(&s->sizes_mu);
  pthread_mutex_destroy(&s->touch_mu);
  pthread_mutex_destroy(&s->flush_mu);
  pthread_cond_destroy(&s->flush_cv);
  EVP_MD_free(s->sha256);
  free(s->dir);
  free(s->path);
  free(s);
}
