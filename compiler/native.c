/*
 * native.c: the back half's passes as the pipeline calls them. See native.h.
 */
#include "compiler/native.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/target.h"

int gc_native_lower(gc_native *n, gc_arena *a, const gc_functional *f,
                    const gc_backend *be, gc_error *err) {
  int64_t temp_min_bytes = n->temp_min_bytes;
  bool eager_random = n->eager_random;
  memset(n, 0, sizeof *n);
  n->a = a;
  n->f = f;
  n->temp_min_bytes = temp_min_bytes;
  n->eager_random = eager_random;
  if (ir_graph_init(&n->ir, a, f->graph) != 0)
    return gc_errorf(err, GC_ENOMEM, "lower: out of memory");
  n->ir.memory_first = temp_min_bytes > 0;
  n->ir.eager_random = eager_random;
  n->ir.blas = be && gc_target_has(be->target, "blas");
  n->ir.dnnl = be && gc_target_has(be->target, "dnnl") &&
               gc_target_has(be->target, "avx512f");
  n->ir.fma = be && gc_target_has(be->target, "fma");
  return gc_lower(&n->ir, f, &n->stats, err);
}

int gc_native_schedule(gc_native *n, const gc_backend *be, gc_error *err) {
  (void)be;
  return sc_schedule_build(&n->ir, &n->sched, err);
}

int gc_native_plan(gc_native *n, const gc_backend *be, gc_error *err) {
  (void)be;
  n->sched.temp_min_bytes = n->temp_min_bytes;
  return sc_plan_memory(&n->ir, &n->sched, err);
}

int gc_native_codegen(gc_native *n, const char *key_hex, gc_error *err) {
  return gc_codegen(&n->ir, &n->sched, key_hex, &n->src, err);
}

/* Splits `s` at spaces into an arena array. */
static int split(gc_arena *a, const char *s, const char ***out, int *n) {
  int cap = 1;
  for (const char *p = s; *p; p++)
    cap += *p == ' ';
  const char **v = gc_arena_calloc(a, (size_t)cap + 2, sizeof *v);
  char *copy = gc_arena_strdup(a, s);
  if (!v || !copy)
    return GC_ENOMEM;
  int k = 0;
  char *save = NULL;
  for (char *tok = strtok_r(copy, " ", &save); tok;
       tok = strtok_r(NULL, " ", &save))
    v[k++] = tok;
  *out = v;
  *n = k;
  return 0;
}

int gc_native_flags(gc_arena *a, const gc_target *t, const char ***flags,
                    int *nflags, const char ***libs, int *nlibs) {
  const char *march = gc_target_march(t);
  const char *cflags = t->cflags && *t->cflags ? t->cflags : GC_DEFAULT_CFLAGS;
  char *all =
      march ? gc_arena_printf(a, "%s -march=%s -mtune=generic", cflags, march)
            : gc_arena_strdup(a, cflags);
  if (!all || split(a, all, flags, nflags) ||
      split(a, GC_CODEGEN_LIBS, libs, nlibs))
    return GC_ENOMEM;
  return 0;
}

int gc_native_build(gc_native *n, const gc_backend *be, gc_error *err) {
  if (!be || !be->toolchain || !be->toolchain->build)
    return gc_errorf(err, GC_EUNSUPPORTED, "no C toolchain");
  const char **flags, **libs;
  int nflags, nlibs;
  if (gc_native_flags(n->a, be->target, &flags, &nflags, &libs, &nlibs))
    return gc_errorf(err, GC_ENOMEM, "cc: out of memory");
  if (n->src.uses_blas || n->src.uses_dnnl) {
    const char **more = gc_arena_calloc(n->a, (size_t)nlibs + 3, sizeof *more);
    if (!more)
      return gc_errorf(err, GC_ENOMEM, "cc: out of memory");
    memcpy(more, libs, (size_t)nlibs * sizeof *more);
    /* libraries the client's torch has loaded (the runtime packages
     * suffice here: the names are sonames) */
    if (n->src.uses_blas)
      more[nlibs++] = "-l:libblas.so.3";
    if (n->src.uses_dnnl)
      more[nlibs++] = "-l:libdnnl.so.2";
    libs = more;
  }
  return be->toolchain->build(be->toolchain->ctx, flags, nflags, libs, nlibs,
                              n->src.text, n->src.len, &n->so, &n->so_len, err);
}

void gc_native_release(gc_native *n) {
  free(n->so);
  n->so = NULL;
  n->so_len = 0;
}
