/*
 * pipeline.h: a compile, from graph bytes to artifact bytes.
 *
 * Two halves, because the daemon needs the key before it knows whether to
 * compile at all:
 *
 *   gc_prepare   decode + validate + key          (cheap; every request)
 *   gc_compile   order -> functionalize -> emit -> lower -> schedule ->
 *                plan -> codegen -> cc -> emit-native -> package
 *                                                 (misses only; a worker)
 *
 * gc_compile runs the pass table (passes.h) in order, then packages the
 * artifact. Between passes it reports progress through gc_hooks and stops
 * early when the hooks say the compile was abandoned (nobody waits for it
 * any more).
 */
#ifndef GC_PIPELINE_H
#define GC_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "compiler/graph.h"
#include "compiler/key.h"

/* The artifact format version this build writes. */
#define GC_ARTIFACT_MAJOR 0
#define GC_ARTIFACT_MINOR 6

#define GC_MAX_STAGES 16

typedef struct gc_hooks {
  /* A stage started (done false) or ended (done true, after `micros`). */
  void (*stage)(void *ctx, const char *stage, bool done, int64_t micros);
  /* Asked between stages; true stops the compile with GC_ECANCELED. */
  bool (*abandoned)(void *ctx);
  void *ctx;
} gc_hooks;

typedef struct gc_timing {
  const char *stage; /* static string */
  int64_t micros;
} gc_timing;

typedef struct gc_compiled {
  uint8_t *artifact; /* packed Artifact; malloc'd, the caller frees */
  size_t len;
  int64_t micros; /* the whole gc_compile */
  gc_timing timings[GC_MAX_STAGES];
  int ntimings;
  bool native;                     /* the artifact has native code */
  bool native_failed;              /* a native stage failed (diagnostic) */
  const char *native_failed_stage; /* which (static string) */
  struct {
    int nodes, native, extern_, fallback, kernels;
  } summary; /* of the native program, when there is one */
} gc_compiled;

/* Decodes and validates a graph already unpacked from a request, and
 * computes its key. The graph lives in `a`; `m` must outlive it. Timings of
 * the stages are appended to `t` (may be NULL). */
int gc_prepare(gc_arena *a, const Compiled__V1__GraphModule *m,
               const gc_limits *lim, const gc_options *o,
               const gc_target *target, gc_graph **g, gc_key *key,
               gc_compiled *t, gc_error *err);

struct gc_backend; /* compiler/native.h */

/* Compiles a prepared graph into a packed artifact. With a backend `be`
 * (the client's target and a toolchain) inference programs also get native
 * code; NULL makes an ATen program only. A native stage that fails does
 * not fail the compile (see gc_compile in pipeline.c). */
int gc_compile(gc_arena *a, const gc_graph *g, const gc_key *key,
               const gc_options *o, const struct gc_backend *be,
               const gc_hooks *hooks, gc_compiled *out, gc_error *err);

/* Monotonic microseconds. */
int64_t gc_now_us(void);

#endif
