/*
 * target.c: host architecture and ISA features. The toolchain's identity
 * comes from the caller (common/spawn.c runs `cc --version`): the compiler
 * library runs no process.
 */
#include "compiler/target.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>

/* The ISA features generated code may use, as a comma-separated list. */
static void host_isa(char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
#define FEAT(name)                                                             \
  if (__builtin_cpu_supports(name) && used < size)                             \
  used +=                                                                      \
      (size_t)snprintf(buf + used, size - used, "%s%s", used ? "," : "", name)
  FEAT("sse4.2");
  FEAT("avx");
  FEAT("avx2");
  FEAT("fma");
  FEAT("bmi2");
  FEAT("avx512f");
  FEAT("avx512bw");
  FEAT("avx512vl");
  FEAT("avx512dq");
#undef FEAT
#elif defined(__aarch64__)
  snprintf(buf, size, "neon");
#endif
  (void)used;
}

/* Is `feat` one of the comma-separated features of `isa`? */
static bool has_feature(const char *isa, const char *feat) {
  size_t n = strlen(feat);
  for (const char *p = isa; p && *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, feat, n) == 0)
      return true;
    p = end ? end + 1 : NULL;
  }
  return false;
}

bool gc_target_has(const gc_target *t, const char *feat) {
  return t && t->isa && has_feature(t->isa, feat);
}

const char *gc_target_march(const gc_target *t) {
  const char *arch = t->arch ? t->arch : "";
  const char *isa = t->isa ? t->isa : "";
  if (!strcmp(arch, "aarch64") || !strcmp(arch, "arm64"))
    return "armv8-a";
  if (strcmp(arch, "x86_64") != 0 && strcmp(arch, "amd64") != 0)
    return NULL;
  bool v2 = has_feature(isa, "sse4.2");
  bool v3 = v2 && has_feature(isa, "avx") && has_feature(isa, "avx2") &&
            has_feature(isa, "fma") && has_feature(isa, "bmi2");
  bool v4 = v3 && has_feature(isa, "avx512f") && has_feature(isa, "avx512bw") &&
            has_feature(isa, "avx512vl") && has_feature(isa, "avx512dq");
  return v4 ? "x86-64-v4" : v3 ? "x86-64-v3" : v2 ? "x86-64-v2" : "x86-64";
}

int gc_target_host(gc_arena *a, gc_target *t) {
  struct utsname u;
  char isa[256];
  memset(t, 0, sizeof *t);
  host_isa(isa, sizeof isa);
  t->arch = gc_arena_strdup(a, uname(&u) == 0 ? u.machine : "unknown");
  t->isa = gc_arena_strdup(a, isa);
  t->cflags = GC_DEFAULT_CFLAGS;
  return t->arch && t->isa ? 0 : GC_ENOMEM;
}
