/*
 * pipeline.c: a compile: the pass table (passes.h) in order, with hooks,
 * timings and abandonment, then the artifact. See pipeline.h.
 */
#include "compiler/pipeline.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiled/v1/artifact.pb-c.h"
#include "compiler/passes.h"

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

static bool abandoned(const gc_hooks *hooks) {
  return hooks && hooks->abandoned && hooks->abandoned(hooks->ctx);
}

static void stage(const gc_hooks *hooks, const char *name, bool done,
                  int64_t micros) {
  if (hooks && hooks->stage)
    hooks->stage(hooks->ctx, name, done, micros);
}

int gc_compile(gc_arena *a, const gc_graph *g, const gc_key *key,
               const gc_options *o, const gc_backend *be, const gc_hooks *hooks,
               gc_compiled *out, gc_error *err) {
  int64_t start = gc_now_us();
  char hex[GC_HEX_LEN];
  gc_digest_hex(key->key, hex);
  gc_pass_state s;
  gc_pass_state_init(&s, a, g, o, be, hex);
  gc_error nerr;
  const char *native_failure = NULL;
  for (int i = 0; i < gc_npasses; i++) {
    const gc_pass *p = &gc_passes[i];
    /* Native code for inference programs in functional form. Training
     * programs run through ATen (autograd records them) until the backward
     * graph is compiled too. */
    if ((p->native && !gc_pass_state_native(&s)) || (p->skip && p->skip(&s)))
      continue;
    if (abandoned(hooks)) {
      gc_native_release(&s.nat);
      return gc_errorf(err, GC_ECANCELED, "compile abandoned before %s",
                       p->name);
    }
    stage(hooks, p->name, false, 0);
    int64_t t0 = gc_now_us();
    gc_error_clear(&nerr);
    int rc = gc_pass_run(p, &s, p->native ? &nerr : err);
    int64_t dt = gc_now_us() - t0;
    record(out, p->name, dt);
    /* A back-half pass that fails (other than by running out of memory or
     * being abandoned) ends the native build, not the compile: the
     * artifact is served with its ATen program and the error as a
     * diagnostic. */
    if (rc && p->native && rc != GC_ENOMEM && rc != GC_ECANCELED) {
      native_failure = gc_arena_printf(a, "%s: %s", p->name, nerr.msg);
      out->native_failed = true;
      out->native_failed_stage = p->name;
      break;
    }
    if (rc) {
      if (p->native)
        *err = nerr;
      gc_native_release(&s.nat);
      return rc;
    }
    stage(hooks, p->name, true, dt);
  }
  out->micros = gc_now_us() - start;
  if (abandoned(hooks)) {
    gc_native_release(&s.nat);
    return gc_errorf(err, GC_ECANCELED, "compile abandoned before package");
  }
  stage(hooks, "package", false, 0);
  int64_t t0 = gc_now_us();
  int rc = package(a, key, s.program, s.nat.program, s.f.eager_reason,
                   native_failure, out, err);
  int64_t dt = gc_now_us() - t0;
  record(out, "package", dt);
  if (rc) {
    gc_native_release(&s.nat);
    return rc;
  }
  stage(hooks, "package", true, dt);
  if (s.nat.program) {
    out->native = true;
    out->summary.nodes = s.nat.stats.nodes;
    out->summary.native = s.nat.stats.native;
    out->summary.extern_ = s.nat.stats.extern_;
    out->summary.fallback = s.nat.stats.fallback;
    out->summary.kernels = s.nat.src.nkernels;
  }
  gc_native_release(&s.nat);
  out->micros = gc_now_us() - start;
  return 0;
}
