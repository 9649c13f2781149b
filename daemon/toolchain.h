/*
 * toolchain.h: the daemon's gc_toolchain (compiler/native.h): the system C
 * compiler run with posix_spawn in a private temporary directory, with a
 * time limit. See toolchain.c.
 */
#ifndef DAEMON_TOOLCHAIN_H
#define DAEMON_TOOLCHAIN_H

#include "compiler/native.h"

typedef struct daemon_toolchain {
  gc_toolchain iface; /* what the compiler library calls */
  char cc[1024];      /* the compiler command ($CC or "cc") */
  char tmpdir[2048];  /* where private build directories are made */
  int timeout_ms;     /* per build */
} daemon_toolchain;

/* Prepares tc; makes tmpdir (0700) if absent. Returns 0 or -1 (errno). */
int daemon_toolchain_init(daemon_toolchain *tc, const char *cc,
                          const char *tmpdir, int timeout_ms);

#endif
