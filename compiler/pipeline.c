/*
 * pipeline.c: the passes of a compile, in order. See pipeline.h.
 */
#include "compiler/pipeline.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiled/v1/artifact.pb-c.h"
#include "compiler/emit.h"
#include "compiler/functionalize.h"
#include "compiler/native.h"

int64_t gc_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void record(gc_compiled *t, const char *stage, int64_t micros) {
  if (t && t->ntimings < GC_MAX_STAGES) {
    t->timings[t->ntimings].stage = stage;
    t->timings[t->ntimings].micros = micros;
    t->ntimings++;
  }
}

int gc_prepare(gc_arena *a, const Compiled__V1__GraphModule *m,
               const gc_limits *lim, const gc_options *o,
               const gc_target *target, gc_graph **g, gc_key *key,
               gc_compiled *t, gc_error *err) {
  int64_t t0 = gc_now_us();
  int rc = gc_graph_from_message(a, m, lim, g, err);
  int64_t t1 = gc_now_us();
  record(t, "validate", t1 - t0);
  if (rc)
    return rc;
  rc = gc_key_compute(*g, o, target, key, err);
  record(t, "key", gc_now_us() - t1);
  return rc;
}

/* Wraps the program (and its native version, when there is one) into an
 * Artifact and packs it with malloc. A program kept in eager form carries
 * the reason as a warning; a native build that failed carries its error. */
static int package(gc_arena *a, const gc_key *key, Compiled__V1__Program *p,
                   Compiled__V1__NativeProgram *np, const char *eager_reason,
                   const char *native_failure, gc_compiled *out,
                   gc_error *err) {
  Compiled__V1__Artifact art;
  Compiled__V1__ArtifactVersion ver;
  compiled__v1__artifact__init(&art);
  compiled__v1__artifact_version__init(&ver);
  ver.major = GC_ARTIFACT_MAJOR;
  ver.minor = GC_ARTIFACT_MINOR;
  char *hex = gc_arena_alloc(a, GC_HEX_LEN);
  if (!hex)
    return gc_errorf(err, GC_ENOMEM, "package: out of memory");
  gc_digest_hex(key->key, hex);
  art.version = &ver;
  art.key = hex;
  art.compiler_build_id = (char *)gc_build_id();
  art.program = p;
  art.native_program = np;
  Compiled__V1__Diagnostic diag[2], *diags[2] = {&diag[0], &diag[1]};
  const char *msgs[2] = {
      eager_reason
          ? gc_arena_printf(a, "program kept in eager form: %s", eager_reason)
          : NULL,
      native_failure ? gc_arena_printf(a,
                                       "no native code (the program runs "
                                       "through ATen): %s",
                                       native_failure)
                     : NULL};
  for (int i = 0; i < 2; i++) {
    if (!msgs[i])
      continue;
    Compiled__V1__Diagnostic *d = diags[art.n_diagnostics++];
    compiled__v1__diagnostic__init(d);
    d->severity = COMPILED__V1__SEVERITY__SEVERITY_WARNING;
    d->node = -1;
    d->message = (char *)msgs[i];
  }
  art.diagnostics = diags;
  /* Timings stay out of the artifact (they travel in the CompileResult):
   * an artifact is a deterministic function of its key, so two daemons that
   * compile the same key produce the same bytes and the same digest. */
  size_t len = compiled__v1__artifact__get_packed_size(&art);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf)
    return gc_errorf(err, GC_ENOMEM, "package: out of memory (%zu bytes)", len);
  compiled__v1__artifact__pack(&art, buf);
  out->artifact = buf;
  out->len = len;
  return 0;
}

/* Runs one stage: hooks before and after, timing, abandonment. */
#define STAGE(name, call)                                                      \
  do {                                                                         \
    if (hooks && hooks->abandoned && hooks->abandoned(hooks->ctx))             \
      return gc_errorf(err, GC_ECANCELED, "compile abandoned before %s",       \
                       name);                                                  \
    if (hooks && hooks->stage)                                                 \
      hooks->stage(hooks->ctx, name, false, 0);                                \
    int64_t t0_ = gc_now_us();                                                 \
    int rc_ = (call);                                                          \
    int64_t dt_ = gc_now_us() - t0_;                                           \
    record(out, name, dt_);                                                    \
    if (rc_)                                                                   \
      return rc_;                                                              \
    if (hooks && hooks->stage)                                                 \
      hooks->stage(hooks->ctx, name, true, dt_);                               \
  } while (0)

/* A native stage: as STAGE, but a failure (other than running out of
 * memory or being abandoned) ends the native build, not the compile: the
 * artifact is served with its ATen program and the error as a diagnostic. */
#define NSTAGE(name, call)                                                     \
  do {                                                                         \
    if (hooks && hooks->abandoned && hooks->abandoned(hooks->ctx))             \
      return gc_errorf(err, GC_ECANCELED, "compile abandoned before %s",       \
                       name);                                                  \
    if (hooks && hooks->stage)                                                 \
      hooks->stage(hooks->ctx, name, false, 0);                                \
    int64_t t0_ = gc_now_us();                                                 \
    gc_error_clear(&nerr);                                                     \
    int rc_ = (call);                                                          \
    int64_t dt_ = gc_now_us() - t0_;                                           \
    record(out, name, dt_);                                                    \
    if (rc_ == GC_ENOMEM || rc_ == GC_ECANCELED) {                             \
      *err = nerr;                                                             \
      gc_native_release(&nat);                                                 \
      return rc_;                                                              \
    }                                                                          \
    if (rc_) {                                                                 \
      native_failure = gc_arena_printf(a, "%s: %s", name, nerr.msg);           \
      out->native_failed = true;                                               \
      out->native_failed_stage = name;                                         \
      goto package;                                                            \
    }                                                                          \
    if (hooks && hooks->stage)                                                 \
      hooks->stage(hooks->ctx, name, true, dt_);                               \
  } while (0)

int gc_compile(gc_arena *a, const gc_graph *g, const gc_key *key,
               const gc_options *o, const gc_backend *be, const gc_hooks *hooks,
               gc_compiled *out, gc_error *err) {

  int64_t start = gc_now_us();
  int *order = gc_arena_calloc(a, (size_t)g->nnodes + 1, sizeof *order);
  Compiled__V1__Program *program = NULL;
  gc_functional f;
  gc_native nat;
  gc_error nerr;
  const char *native_failure = NULL;
  char hex[GC_HEX_LEN];
  memset(&nat, 0, sizeof nat);
  gc_digest_hex(key->key, hex);
  if (!order)
    return gc_errorf(err, GC_ENOMEM, "out of memory");

  STAGE("order", gc_canonical_order(g, order, err));
  STAGE("functionalize", gc_functionalize(a, g, order, o, &f, err));
  STAGE("emit", gc_emit_program(&f, a, &program, err));
  /* Native code for inference programs in functional form. Training
   * programs run through ATen (autograd records them) until the backward
   * graph is compiled too. */
  if (be && o->opt_level > 0 && f.functional && !o->training) {
    nat.temp_min_bytes = o->separate_temporaries ? GC_TEMP_MIN_BYTES : 0;
    nat.eager_random = o->eager_random;
    NSTAGE("lower", gc_native_lower(&nat, a, &f, be, &nerr));
    NSTAGE("schedule", gc_native_schedule(&nat, be, &nerr));
    NSTAGE("plan", gc_native_plan(&nat, be, &nerr));
    NSTAGE("codegen", gc_native_codegen(&nat, hex, &nerr));
    /* A program without segments (nothing was lowered into generated
     * code: its instructions are ATen calls) needs no shared object, so
     * the C compiler does not run for it (a few hundred milliseconds). */
    if (nat.src.nsegments > 0)
      NSTAGE("cc", gc_native_build(&nat, be, &nerr));
    NSTAGE("emit-native", gc_native_emit(&nat, be, &nerr));
  }
package:
  out->micros = gc_now_us() - start;
  STAGE("package", package(a, key, program, nat.program, f.eager_reason,
                           native_failure, out, err));
  if (nat.program) {
    out->native = true;
    out->summary.nodes = nat.stats.nodes;
    out->summary.native = nat.stats.native;
    out->summary.extern_ = nat.stats.extern_;
    out->summary.fallback = nat.stats.fallback;
    out->summary.kernels = nat.src.nkernels;
  }
  gc_native_release(&nat);
  out->micros = gc_now_us() - start;
  return 0;
}
