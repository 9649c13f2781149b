/*
 * target.h: what the host is and what builds code for it.
 *
 * The target enters the cache key (key.h): code built for one ISA or by one
 * toolchain is never served to another. The daemon detects its own once at
 * start; `compilectl graph hash` does the same to print the key a daemon on
 * this machine would compute.
 */
#ifndef GC_TARGET_H
#define GC_TARGET_H

#include "compiler/arena.h"
#include "compiler/error.h"
#include "compiler/key.h"

/* The flags generated C is compiled with (part of the target). */
#define GC_DEFAULT_CFLAGS "-O2 -fPIC -shared -std=c11"

/* Fills arch and isa with the host's (arena strings), cflags with
 * GC_DEFAULT_CFLAGS, and leaves toolchain and torch_version NULL.
 * Returns 0 or GC_ENOMEM. */
int gc_target_host(gc_arena *a, gc_target *t);

/* Runs `cc --version` (posix_spawn, no shell) and returns its first line,
 * e.g. "gcc (Debian 12.2.0-14) 12.2.0", in the arena. `cc` is a command name
 * or path. Returns 0, or GC_EIO when it cannot be run. */
int gc_toolchain_identity(gc_arena *a, const char *cc, const char **out,
                          gc_error *err);

#endif
