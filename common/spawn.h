/*
 * spawn.h: running another program, for the daemon (the C compiler, its
 * identity) and compilectl (the identity, for the key). The compiler
 * library runs none: the daemon hands it the toolchain (compiler/native.h)
 * and the toolchain's identity (the target, compiler/key.h).
 *
 * posix_spawn only, never fork (the daemon is threaded). The child gets a
 * process group of its own, so that a time limit kills it with everything
 * it started; no blocked signals and the default action for SIGPIPE,
 * SIGTERM, SIGINT and SIGHUP, whatever its parent had; /dev/null as its
 * standard input.
 */
#ifndef COMMON_SPAWN_H
#define COMMON_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

/* Where the child's output goes. */
typedef struct spawn_io {
  const char *dir; /* its working directory; NULL: ours */
  const char *log; /* stdout and stderr into this file (0600, truncated; a
                      relative name is in `dir`); NULL: stdout to out_fd
                      and stderr to /dev/null */
  int out_fd;
} spawn_io;

/* Starts argv (argv[0] looked up in PATH). Returns 0 and *pid, or
 * posix_spawn's error number with "cannot run NAME: REASON" in why. */
int spawn_start(char *const *argv, const spawn_io *io, pid_t *pid, char *why,
                size_t whylen);

/* Waits for `pid` (started as `name`) at most timeout_ms, then kills its
 * process group. Returns the exit status (>= 0; 128 + N when killed by
 * signal N, with why), -1 when waiting failed, -2 on the time limit (why
 * says so). */
int spawn_wait(pid_t pid, const char *name, int timeout_ms, char *why,
               size_t whylen);

/* Runs `prog arg` (e.g. "cc --version") and copies the first line of its
 * standard output into out. A program that has not answered within
 * timeout_ms is killed with its process group. Returns 0, or -1 with why
 * when it cannot be run, fails, says nothing or times out. */
int spawn_first_line(const char *prog, const char *arg, int timeout_ms,
                     char *out, size_t outlen, char *why, size_t whylen);

#endif
