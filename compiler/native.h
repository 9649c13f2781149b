/*
 * native.h: the compiler's back half, from a functional program to native
 * code, as the pass table (passes.h) runs them in order:
 *
 *   gc_native_lower     functional graph -> loop IR (compiler/lower/)
 *   gc_native_schedule  fusion: IR nodes -> kernels (compiler/sched/)
 *   gc_native_plan      memory planning: buffers -> arena offsets
 *   gc_native_codegen   kernels -> one C translation unit (compiler/codegen/)
 *   gc_native_build     the C compiler, through the toolchain interface
 *   gc_native_emit      the artifact's NativeProgram
 *
 * Each pass leaves its result in a gc_native. The pass table (passes.h)
 * runs them with their verifiers and dumps. The library stays free of
 * process and file I/O: running the C compiler is the gc_toolchain the
 * caller provides.
 */
#ifndef GC_NATIVE_H
#define GC_NATIVE_H

#include "compiled/v1/artifact.pb-c.h"
#include "compiler/codegen/cgen.h"
#include "compiler/functionalize.h"
#include "compiler/lower/lower.h"
#include "compiler/sched/sched.h"

/* Builds C into a shared object. The caller's implementation (the daemon:
 * posix_spawn of the system compiler in a private temporary directory with
 * a time limit) runs
 *     <cc> <flags...> -o <so> <source file> <libs...>
 * On success returns 0 and *so (malloc'd; the caller of gc_native_build
 * frees it through gc_native) of *so_len bytes. On failure returns
 * GC_ETOOLCHAIN with the compiler's first error lines, or its time limit,
 * in err. The same source and flags must give the same bytes. */
typedef struct gc_toolchain {
  int (*build)(void *ctx, const char *const *flags, int nflags,
               const char *const *libs, int nlibs, const char *source,
               size_t len, uint8_t **so, size_t *so_len, gc_error *err);
  void *ctx;
} gc_toolchain;

/* What the back half needs besides the program. */
typedef struct gc_backend {
  const gc_target *target;       /* what to build for (the client's) */
  const gc_toolchain *toolchain; /* NULL: no shared object */
  bool verify;                   /* run each pass's verifier (passes.h) */
} gc_backend;

/* With CompileOptions.separate_temporaries: intermediates of at least this
 * many bytes get their own memory (IR_BUF_TEMP) instead of arena space,
 * which lives for the whole call (docs/codegen.md, "Temporaries outside
 * the arena"). */
#define GC_TEMP_MIN_BYTES ((int64_t)4 << 10)

typedef struct gc_native {
  gc_arena *a;
  const gc_functional *f;
  ir_graph ir;
  gc_lower_stats stats;
  sc_schedule sched;
  gc_csource src;
  uint8_t *so; /* malloc'd; freed by gc_native_release */
  size_t so_len;
  Compiled__V1__NativeProgram *program; /* in the arena */
  int64_t temp_min_bytes; /* set before lowering, in a zeroed gc_native
                             (gc_native_lower keeps it; > 0 also makes
                             lowering favour memory, see
                             ir_graph.memory_first): see sc_schedule */
  bool eager_random;      /* set before lowering: random operators stay ATen
                             calls (ir_graph.eager_random) */
} gc_native;

int gc_native_lower(gc_native *n, gc_arena *a, const gc_functional *f,
                    const gc_backend *be, gc_error *err);
int gc_native_schedule(gc_native *n, const gc_backend *be, gc_error *err);
int gc_native_plan(gc_native *n, const gc_backend *be, gc_error *err);
int gc_native_codegen(gc_native *n, const char *key_hex, gc_error *err);
int gc_native_build(gc_native *n, const gc_backend *be, gc_error *err);
int gc_native_emit(gc_native *n, const gc_backend *be, gc_error *err);

/* Frees what the arena does not own (the shared object). */
void gc_native_release(gc_native *n);

/* The flags and libraries generated C is built with for target t, split
 * into arrays in the arena (for the toolchain and for tests). */
int gc_native_flags(gc_arena *a, const gc_target *t, const char ***flags,
                    int *nflags, const char ***libs, int *nlibs);

#endif
