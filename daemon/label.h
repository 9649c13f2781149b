/*
 * label.h: the Label of a Compile request (docs/protocol.md, "Labels"):
 * what people call the entry a compile stores. Read and checked with the
 * rest of the request (compile.c), kept with the flight, stored with the
 * entry (cache_put_entry), returned in EntryInfo (admin.c). Never part of
 * the key.
 */
#ifndef DAEMON_LABEL_H
#define DAEMON_LABEL_H

#include "cache/cache.h"
#include "compiled/v1/compiled.pb-c.h"
#include "compiler/arena.h"
#include "compiler/error.h"

/* Copies a request's label (NULL: none) into *out. Refused, naming the
 * field: a string longer than its CACHE_LABEL_*_MAX (GC_ELIMIT), one with a
 * control character, or a negative line (GC_EINVAL). Strings reach here
 * valid UTF-8 without NUL bytes (compiler/wire.h). */
int label_read(const Compiled__V1__Label *pl, cache_label *out, gc_error *err);

/* A Label message for a stored label, its strings copied into arena `a`;
 * NULL for an entry stored without one (or when `a` is exhausted). */
Compiled__V1__Label *label_message(gc_arena *a, const cache_label *l);

#endif
