/*
 * target.c: host architecture, ISA features and toolchain identity.
 */
#include "compiler/target.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
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

int gc_toolchain_identity(gc_arena *a, const char *cc, const char **out,
                          gc_error *err) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return gc_errorf(err, GC_EIO, "pipe: %s", strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY,
                                   0);
  char *argv[] = {(char *)cc, "--version", NULL};
  pid_t pid;
  int rc = posix_spawnp(&pid, cc, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return gc_errorf(err, GC_EIO, "cannot run '%s --version': %s", cc,
                     strerror(rc));
  }
  char buf[512];
  size_t len = 0;
  ssize_t n;
  while (len < sizeof buf - 1 &&
         (n = read(fds[0], buf + len, sizeof buf - 1 - len)) != 0) {
    if (n < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    len += (size_t)n;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  buf[len] = '\0';
  char *nl = strchr(buf, '\n');
  if (nl)
    *nl = '\0';
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !buf[0])
    return gc_errorf(err, GC_EIO, "'%s --version' failed", cc);
  *out = gc_arena_strdup(a, buf);
  return *out ? 0 : gc_errorf(err, GC_ENOMEM, "out of memory");
}
