/*
 * fuzz_decode.h: the start the graph targets (fuzz_graph, fuzz_native)
 * share: decode the input as the daemon does, within 256 MiB.
 */
#ifndef FUZZ_DECODE_H
#define FUZZ_DECODE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "compiler/graph.h"

/* Decodes `data` under the default limits, but at most 256 MiB of memory
 * and, when `max_nodes` > 0, at most that many nodes, into a new arena *a
 * (NULL when it cannot be made; free it either way). Returns true with *g
 * the graph; false when refused, after checking that the refusal says why
 * (aborts if not). */
static inline bool fuzz_decode(const uint8_t *data, size_t size,
                               int64_t max_nodes, gc_arena **a, gc_graph **g,
                               gc_error *err) {
  gc_limits lim;
  gc_limits_default(&lim);
  lim.max_memory = (size_t)256 << 20;
  if (max_nodes > 0)
    lim.max_nodes = max_nodes;
  *a = gc_arena_new(lim.max_memory);
  if (!*a)
    return false;
  if (gc_graph_decode(*a, data, size, &lim, g, err) == 0)
    return true;
  if (err->msg[0] == '\0')
    abort(); /* every failure must say why */
  return false;
}

#endif
