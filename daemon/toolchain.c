/*
 * toolchain.c: the system C compiler, run for the compiler library.
 *
 * The compiler library never touches files or processes; it asks the
 * gc_toolchain the daemon hands it (compiler/native.h) to build its C. This
 * one:
 *
 *   - makes a private directory (mode 0700) under the cache directory's
 *     tmp/, writes the source there as k.c;
 *   - runs `<cc> <flags> -o k.so k.c <libs>` with posix_spawn (never fork:
 *     the daemon is threaded; common/spawn.c), in its own process group,
 *     with that directory as the working directory: file names are
 *     relative, so no path enters the object and the same source gives the
 *     same bytes;
 *   - waits at most the time limit, then kills the whole process group;
 *   - reads k.so; on failure returns the first lines of the compiler's
 *     output;
 *   - removes the directory, whatever happened.
 */
#include "daemon/toolchain.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/spawn.h"

/* Most lines of compiler output a diagnostic keeps. */
#define DIAG_LINES 12

static int write_file(const char *path, const char *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return -1;
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(fd, data + done, len - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      close(fd);
      return -1;
    }
    done += (size_t)n;
  }
  return close(fd);
}

/* Reads a whole file (at most `max` bytes) into malloc'd memory. */
static uint8_t *read_file(const char *path, size_t max, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < 0 || (size_t)st.st_size > max) {
    close(fd);
    return NULL;
  }
  uint8_t *buf = malloc((size_t)st.st_size + 1);
  size_t done = 0;
  while (buf && done < (size_t)st.st_size) {
    ssize_t n = read(fd, buf + done, (size_t)st.st_size - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      free(buf);
      buf = NULL;
      break;
    }
    done += (size_t)n;
  }
  close(fd);
  if (buf) {
    buf[done] = 0;
    *len = done;
  }
  return buf;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
        continue;
      char p[4400];
      snprintf(p, sizeof p, "%.4000s/%.256s", dir, e->d_name);
      unlink(p);
    }
    closedir(d);
  }
  rmdir(dir);
}

/* The first DIAG_LINES lines of the compiler's output, for a diagnostic. */
static void first_lines(const char *log, char *out, size_t size) {
  size_t len = 0;
  int lines = 0;
  out[0] = '\0';
  for (const char *p = log; p && *p && lines < DIAG_LINES && len + 2 < size;
       p++) {
    out[len++] = *p == '\t' ? ' ' : *p;
    if (*p == '\n')
      lines++;
  }
  while (len && (out[len - 1] == '\n' || out[len - 1] == ' '))
    len--;
  out[len] = '\0';
}

/* Runs argv in dir with output to dir/cc.log; waits up to timeout_ms.
 * Returns the exit status (>= 0), -1 when it could not run, -2 on timeout
 * (the process group is killed). */
static int run(const char *dir, char *const *argv, int timeout_ms, char *why,
               size_t whylen) {
  spawn_io io = {.dir = dir, .log = "cc.log"};
  pid_t pid;
  if (spawn_start(argv, &io, &pid, why, whylen) != 0)
    return -1;
  return spawn_wait(pid, argv[0], timeout_ms, why, whylen);
}

static int build(void *ctx, const char *const *flags, int nflags,
                 const char *const *libs, int nlibs, const char *source,
                 size_t len, uint8_t **so, size_t *so_len, gc_error *err) {
  const daemon_toolchain *tc = ctx;
  char dir[4096];
  snprintf(dir, sizeof dir, "%.2040s/cc-XXXXXX", tc->tmpdir);
  if (!mkdtemp(dir))
    return gc_errorf(err, GC_ETOOLCHAIN,
                     "cc: cannot make a directory in %s: %s", tc->tmpdir,
                     strerror(errno));
  char src[4200];
  snprintf(src, sizeof src, "%.4000s/k.c", dir);
  int rc = 0;
  if (write_file(src, source, len) != 0) {
    rc = gc_errorf(err, GC_ETOOLCHAIN, "cc: cannot write the source: %s",
                   strerror(errno));
    goto out;
  }
  const char **argv = calloc((size_t)(nflags + nlibs + 6), sizeof *argv);
  if (!argv) {
    rc = gc_errorf(err, GC_ENOMEM, "cc: out of memory");
    goto out;
  }
  int k = 0;
  argv[k++] = tc->cc;
  for (int i = 0; i < nflags; i++)
    argv[k++] = flags[i];
  argv[k++] = "-o";
  argv[k++] = "k.so";
  argv[k++] = "k.c";
  for (int i = 0; i < nlibs; i++)
    argv[k++] = libs[i];
  argv[k] = NULL;
  char why[512] = "";
  int st = run(dir, (char *const *)argv, tc->timeout_ms, why, sizeof why);
  free(argv);
  if (st != 0) {
    char logp[4200], lines[2048];
    snprintf(logp, sizeof logp, "%.4000s/cc.log", dir);
    size_t n = 0;
    char *log = (char *)read_file(logp, 1 << 20, &n);
    first_lines(log, lines, sizeof lines);
    free(log);
    rc = gc_errorf(err, GC_ETOOLCHAIN, "%s%s%s",
                   why[0] ? why
                          : (st > 0 ? "the C compiler failed" : "cc failed"),
                   lines[0] ? ":\n" : "", lines);
    goto out;
  }
  char sop[4200];
  snprintf(sop, sizeof sop, "%.4000s/k.so", dir);
  *so = read_file(sop, (size_t)1 << 30, so_len);
  if (!*so)
    rc = gc_errorf(err, GC_ETOOLCHAIN, "cc: cannot read the shared object");
out:
  remove_dir(dir);
  return rc;
}

int daemon_toolchain_init(daemon_toolchain *tc, const char *cc,
                          const char *tmpdir, int timeout_ms) {
  snprintf(tc->cc, sizeof tc->cc, "%s", cc && *cc ? cc : "cc");
  snprintf(tc->tmpdir, sizeof tc->tmpdir, "%s", tmpdir);
  tc->timeout_ms = timeout_ms > 0 ? timeout_ms : 120000;
  if (mkdir(tc->tmpdir, 0700) != 0 && errno != EEXIST)
    return -1;
  tc->iface.build = build;
  tc->iface.ctx = tc;
  return 0;
}
