/*
 * target.c: host architecture, ISA features and toolchain identity.
 */
#include "compiler/target.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* The ISA features generated code may use, as a comma-separated list. */
static void host_isa(char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
#define FEAT(name)                                                             \
  if (__builtin_cpu_supports(name) && used < size)                             \
  used +=                                                                      \
      (size_t)snprintf(buf + used, size - used, "%s%s", used ? "," : "", name)
  FEAT("sse4.2");
  FEAT("avx");
  FEAT("avx2");
  FEAT("fma");
  FEAT("bmi2");
  FEAT("avx512f");
  FEAT("avx512bw");
  FEAT("avx512vl");
  FEAT("avx512dq");
#undef FEAT
#elif defined(__aarch64__)
  snprintf(buf, size, "neon");
#endif
  (void)used;
}

/* Is `feat` one of the comma-separated features of `isa`? */
static bool has_feature(const char *isa, const char *feat) {
  size_t n = strlen(feat);
  for (const char *p = isa; p && *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, feat, n) == 0)
      return true;
    p = end ? end + 1 : NULL;
  }
  return false;
}

bool gc_target_has(const gc_target *t, const char *feat) {
  return t && t->isa && has_feature(t->isa, feat);
}

const char *gc_target_march(const gc_target *t) {
  const char *arch = t->arch ? t->arch : "";
  const char *isa = t->isa ? t->isa : "";
  if (!strcmp(arch, "aarch64") || !strcmp(arch, "arm64"))
    return "armv8-a";
  if (strcmp(arch, "x86_64") != 0 && strcmp(arch, "amd64") != 0)
    return NULL;
  bool v2 = has_feature(isa, "sse4.2");
  bool v3 = v2 && has_feature(isa, "avx") && has_feature(isa, "avx2") &&
            has_feature(isa, "fma") && has_feature(isa, "bmi2");
  bool v4 = v3 && has_feature(isa, "avx512f") && has_feature(isa, "avx512bw") &&
            has_feature(isa, "avx512vl") && has_feature(isa, "avx512dq");
  return v4 ? "x86-64-v4" : v3 ? "x86-64-v3" : v2 ? "x86-64-v2" : "x86-64";
}

int gc_target_host(gc_arena *a, gc_target *t) {
  struct utsname u;
  char isa[256];
  memset(t, 0, sizeof *t);
  host_isa(isa, sizeof isa);
  t->arch = gc_arena_strdup(a, uname(&u) == 0 ? u.machine : "unknown");
  t->isa = gc_arena_strdup(a, isa);
  t->cflags = GC_DEFAULT_CFLAGS;
  return t->arch && t->isa ? 0 : GC_ENOMEM;
}

int gc_toolchain_identity(gc_arena *a, const char *cc, int timeout_ms,
                          const char **out, gc_error *err) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return gc_errorf(err, GC_EIO, "pipe: %s", strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY,
                                   0);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  char *argv[] = {(char *)cc, "--version", NULL};
  pid_t pid;
  int rc = posix_spawnp(&pid, cc, &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return gc_errorf(err, GC_EIO, "cannot run '%s --version': %s", cc,
                     strerror(rc));
  }
  /* A compiler that does not answer within the limit is killed (with its
   * process group): a hung probe must not hang the daemon's start. */
  char buf[512];
  size_t len = 0;
  bool timed_out = false;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long spent =
        (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    if (spent >= timeout_ms) {
      timed_out = true;
      break;
    }
    struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
    int pr = poll(&pfd, 1, (int)(timeout_ms - spent));
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0) {
      timed_out = pr == 0;
      break;
    }
    char tmp[512];
    ssize_t n = read(fds[0], tmp, sizeof tmp);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    size_t take =
        (size_t)n < sizeof buf - 1 - len ? (size_t)n : sizeof buf - 1 - len;
    memcpy(buf + len, tmp, take);
    len += take;
  }
  close(fds[0]);
  if (timed_out)
    kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (timed_out)
    return gc_errorf(err, GC_EIO, "'%s --version' did not answer within %d ms",
                     cc, timeout_ms);
  buf[len] = '\0';
  char *nl = strchr(buf, '\n');
  if (nl)
    *nl = '\0';
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !buf[0])
    return gc_errorf(err, GC_EIO, "'%s --version' failed", cc);
  *out = gc_arena_strdup(a, buf);
  return *out ? 0 : gc_errorf(err, GC_ENOMEM, "out of memory");
}
