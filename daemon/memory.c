/*
 * memory.c: the daemon's memory budget for requests, and the limits that
 * follow from it.
 *
 * Every Compile and Explain request is charged to one budget
 * (--memory-budget) from the moment its bytes arrive until its job ends:
 * first its bytes, then its arena (decoded graph, key, compile), whose
 * chunks are charged as they are taken (gc_arena_set_budget). What does not
 * fit is refused with RESOURCE_EXHAUSTED and a message naming the budget;
 * nothing grows past it. Two details keep small requests (cache hits, small
 * compiles) from ever being refused because of big ones:
 *
 *   a share   big requests (over --inline-decode-bytes) may only take the
 *             budget up to its "big ceiling", a share of it (7/8, at least
 *             64 MiB less than the whole) is left to small requests
 *   threads   big requests are decoded on --decode-threads threads (pool.c),
 *             so at most that many decode at once; others wait their turn
 *             (after a look in the request memo on a thread of its own, so
 *             that a repeated big request does not wait behind decodes)
 *
 * The per-request limit (gc_limits.max_memory) is the big ceiling, and the
 * other limits are set to be reachable within it (docs/operations.md,
 * "Limits"): a graph at --max-nodes with full metadata fits in the default
 * --max-message-bytes and decodes in well under the big ceiling.
 *
 * Returning memory: big arena chunks are mmap'd and go back to the system
 * when freed (arena.c); what malloc kept from a big request (gRPC's receive
 * slices) is released by malloc_trim, run on a decode thread after a big
 * job ends.
 */
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "daemon/log.h"

/* Jobs that held this much make the daemon trim malloc's free memory. */
#define TRIM_AFTER ((size_t)32 << 20)

/* Bytes a request's decode may take per byte of request, measured on real
 * and generated graphs (docs/operations.md); used to warn about settings
 * that cannot fit a request at the message limit. */
#define DECODE_FACTOR 24

/* Bytes of the budget a node may take from decode to generated C, and the
 * node limit when the budget is big enough: `make bench-memory` measures
 * 4.8-5.2 KiB per node on relu chains of 20,000-500,000 nodes with full
 * metadata and 5.6-5.8 KiB on wide graphs of adds and products
 * (docs/operations.md, "Limits"); 7 KiB keeps a margin, and the default
 * budget's big-request share (3.5 GiB) still fits MAX_NODES. */
#define NODE_BYTES 7168
#define MAX_NODES 500000

static size_t big_ceiling(size_t budget) {
  size_t share = budget / 8;
  if (share < ((size_t)64 << 20))
    share = (size_t)64 << 20;
  return budget > 2 * share ? budget - share : budget / 2;
}

static char *fmt_bytes(uint64_t n, char *buf, size_t len) {
  if (n >= ((uint64_t)1 << 30))
    snprintf(buf, len, "%.1f GiB", (double)n / (1 << 30));
  else
    snprintf(buf, len, "%.0f MiB", (double)n / (1 << 20));
  return buf;
}

int memory_init(daemon_ctx *d) {
  gc_budget_init(&d->budget, d->cfg.memory_budget);
  d->big_ceiling = big_ceiling(d->cfg.memory_budget);
  gc_limits_default(&d->limits);
  d->limits.max_bytes = d->cfg.max_message_bytes;
  d->limits.max_memory = d->big_ceiling;
  if (!d->cfg.max_nodes) {
    size_t fit = d->big_ceiling / NODE_BYTES;
    d->cfg.max_nodes = fit < MAX_NODES ? (int)fit : MAX_NODES;
  }
  d->limits.max_nodes = d->cfg.max_nodes;
  d->limits.max_values = 4 * (int64_t)d->cfg.max_nodes;
  char a[32], b[32];
  if (d->cfg.max_message_bytes * DECODE_FACTOR > d->big_ceiling)
    LOG(LOG_WARN,
        "a request near --max-message-bytes (%s) may need up to %d times its "
        "size to decode, more than a big request may use (%s of "
        "--memory-budget): such requests will get RESOURCE_EXHAUSTED",
        fmt_bytes(d->cfg.max_message_bytes, a, sizeof a), DECODE_FACTOR,
        fmt_bytes(d->big_ceiling, b, sizeof b));
  d->decoders = pool_new(d->cfg.decode_threads, 10);
  d->memo_lane = pool_new(1, 0);
  return d->decoders && d->memo_lane ? 0 : -1;
}

void memory_cleanup(daemon_ctx *d) {
  pool_free(d->memo_lane); /* it hands work to the decoders: first */
  d->memo_lane = NULL;
  pool_free(d->decoders);
  d->decoders = NULL;
}

bool memory_is_big(daemon_ctx *d, size_t request_len) {
  return request_len > d->cfg.inline_decode_bytes;
}

size_t memory_ceiling(daemon_ctx *d, size_t request_len) {
  return memory_is_big(d, request_len) ? d->big_ceiling : 0;
}

gc_arena *memory_arena(daemon_ctx *d, size_t request_len) {
  gc_arena *a = gc_arena_new(d->limits.max_memory);
  if (a)
    gc_arena_set_budget(a, &d->budget, memory_ceiling(d, request_len));
  return a;
}

static void trim_job(void *arg) {
  daemon_ctx *d = arg;
  atomic_store(&d->trim_pending, false);
  malloc_trim(0);
}

void memory_job_ended(daemon_ctx *d, size_t held) {
  if (held < TRIM_AFTER || !d->decoders ||
      atomic_exchange(&d->trim_pending, true))
    return;
  if (pool_submit(d->decoders, trim_job, d) != 0)
    atomic_store(&d->trim_pending, false);
}

void memory_free_arena(daemon_ctx *d, gc_arena *a) {
  if (!a)
    return;
  size_t held = gc_arena_held(a);
  gc_arena_free(a);
  memory_job_ended(d, held);
}

void memory_refused(daemon_ctx *d, size_t len, size_t own, gc_error *err) {
  size_t used = gc_budget_used(&d->budget);
  size_t others = used > own ? used - own : 0;
  char a[32], b[32], c[32], e[32];
  atomic_fetch_add(&d->stats.rejected_memory, 1);
  gc_errorf(
      err, GC_ENOMEM,
      "not enough memory for this request (%zu bytes): it held %s when "
      "refused, other requests %s, and requests of its size may use %s "
      "of the %s --memory-budget%s",
      len, fmt_bytes(own, a, sizeof a), fmt_bytes(others, b, sizeof b),
      fmt_bytes(memory_is_big(d, len) ? d->big_ceiling : d->cfg.memory_budget,
                c, sizeof c),
      fmt_bytes(d->cfg.memory_budget, e, sizeof e),
      others ? "; retry when they are done" : "");
}

bool memory_explain(daemon_ctx *d, const gc_arena *a, size_t len, int rc,
                    gc_error *err) {
  if (rc != GC_ENOMEM || !a)
    return false;
  gc_refusal why = gc_arena_refusal(a);
  if (why != GC_REFUSED_BUDGET && why != GC_REFUSED_LIMIT)
    return false;
  memory_refused(d, len, gc_arena_held(a), err);
  return true;
}
