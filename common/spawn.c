/*
 * spawn.c: posix_spawn with a process group, a time limit and a clean
 * signal state. See spawn.h.
 */
#include "common/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int spawn_start(char *const *argv, const spawn_io *io, pid_t *pid, char *why,
                size_t whylen) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  if (io->dir)
    posix_spawn_file_actions_addchdir_np(&fa, io->dir);
  if (io->log) {
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, io->log,
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  } else {
    posix_spawn_file_actions_adddup2(&fa, io->out_fd, STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY,
                                     0);
  }
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_setpgroup(&at, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&at, &none);
  sigset_t dfl;
  sigemptyset(&dfl);
  sigaddset(&dfl, SIGPIPE);
  sigaddset(&dfl, SIGTERM);
  sigaddset(&dfl, SIGINT);
  sigaddset(&dfl, SIGHUP);
  posix_spawnattr_setsigdefault(&at, &dfl);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                    POSIX_SPAWN_SETSIGDEF);
  int rc = posix_spawnp(pid, argv[0], &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0)
    snprintf(why, whylen, "cannot run %s: %s", argv[0], strerror(rc));
  return rc;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int spawn_wait(pid_t pid, const char *name, int timeout_ms, char *why,
               size_t whylen) {
  int64_t deadline = now_ms() + timeout_ms;
  int status = 0;
  for (int sleep_us = 200;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid)
      break;
    if (w < 0 && errno != EINTR) {
      snprintf(why, whylen, "waitpid: %s", strerror(errno));
      return -1;
    }
    if (now_ms() > deadline) {
      kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
      snprintf(why, whylen, "%s did not finish within %d s (killed)", name,
               timeout_ms / 1000);
      return -2;
    }
    usleep((useconds_t)sleep_us);
    if (sleep_us < 20000)
      sleep_us *= 2;
  }
  if (WIFSIGNALED(status)) {
    snprintf(why, whylen, "%s was killed by signal %d", name, WTERMSIG(status));
    return 128 + WTERMSIG(status);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int spawn_first_line(const char *prog, const char *arg, int timeout_ms,
                     char *out, size_t outlen, char *why, size_t whylen) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    snprintf(why, whylen, "pipe: %s", strerror(errno));
    return -1;
  }
  char *argv[] = {(char *)prog, (char *)arg, NULL};
  spawn_io io = {.out_fd = fds[1]};
  pid_t pid;
  char cannot[512];
  int rc = spawn_start(argv, &io, &pid, cannot, sizeof cannot);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    snprintf(why, whylen, "cannot run '%s %s': %s", prog, arg, strerror(rc));
    return -1;
  }
  /* A program that does not answer within the limit is killed (with its
   * process group): a hung probe must not hang the daemon's start. */
  char buf[512];
  size_t len = 0;
  bool timed_out = false;
  int64_t t0 = now_ms();
  for (;;) {
    int64_t spent = now_ms() - t0;
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
  if (timed_out) {
    snprintf(why, whylen, "'%s %s' did not answer within %d ms", prog, arg,
             timeout_ms);
    return -1;
  }
  buf[len] = '\0';
  char *nl = strchr(buf, '\n');
  if (nl)
    *nl = '\0';
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !buf[0]) {
    snprintf(why, whylen, "'%s %s' failed", prog, arg);
    return -1;
  }
  snprintf(out, outlen, "%s", buf);
  return 0;
}
