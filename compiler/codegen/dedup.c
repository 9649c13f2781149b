/*
 * dedup.c: kernels whose code is the same as an earlier one's (up to
 * the names codegen invents) become a reference to it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/codegen/cexpr.h"
#include "compiler/codegen/cgen_internal.h"

/* ---- identical kernels ----
 * Models repeat blocks (transformer layers, ResNet stages), and their
 * kernels differ only in the names codegen invents: buffer parameters
 * (b12), loop variables (x40), temporaries (t3), accumulators (a2_mean).
 * Such a kernel is generated once; the others call it. Two kernels are
 * identical when their text, from the parameter list on, is the same after
 * renaming each invented name to its order of first appearance (a
 * consistent renaming of locals and parameters: the same function). Names
 * are recognized by prefix; a prefix missing from the list only costs a
 * missed match, never a wrong one, since no C library name starts with one
 * of these followed by digits. */
static const char *const invented[] = {
    "a",  "b",  "g",  "i",  "p",    "r",     "s",    "t",
    "v",  "w",  "x",  "z",  "pa",   "pm",    "pn",   "pq",
    "sv", "wm", "wq", "ws", "pnan", "gc_wi", "gc_wn"};

static bool invented_prefix(const char *s, size_t n) {
  for (size_t i = 0; i < sizeof invented / sizeof invented[0]; i++)
    if (strlen(invented[i]) == n && !memcmp(invented[i], s, n))
      return true;
  return false;
}

static bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_';
}

/* `text` with invented names renamed canonically; NULL when out of memory. */
static char *canonical_text(cg *g, const char *text) {
  gc_arena *a = cg__arena(g);
  gc_strmap seen;
  if (gc_strmap_init(&seen, a, 64) != 0)
    return NULL;
  gc_buf o = GC_BUF_INIT;
  int next = 0;
  for (const char *p = text; *p;) {
    if (!ident_char(*p)) {
      gc_buf_append(&o, p++, 1);
      continue;
    }
    const char *q = p;
    while (ident_char(*q))
      q++;
    size_t n = (size_t)(q - p);
    size_t pre = 0; /* letters and '_' before the first digit */
    while (pre < n && !(p[pre] >= '0' && p[pre] <= '9'))
      pre++;
    size_t dig = pre;
    while (dig < n && p[dig] >= '0' && p[dig] <= '9')
      dig++;
    if (pre == 0 || dig == pre || (dig < n && p[dig] != '_') ||
        !invented_prefix(p, pre)) {
      gc_buf_append(&o, p, n); /* a number, a keyword, a library name */
      p = q;
      continue;
    }
    /* a name seen before is looked up in place, not copied (a copy per
     * occurrence was a tenth of a big graph's compile memory) */
    char name[64];
    void *old = NULL;
    if (dig < sizeof name) {
      memcpy(name, p, dig);
      name[dig] = '\0';
      old = gc_strmap_get(&seen, name);
    }
    intptr_t id = (intptr_t)old;
    if (!old) {
      char *key = gc_arena_strndup(a, p, dig);
      id = next + 1;
      int rc = key ? gc_strmap_put(&seen, key, (void *)id, &old) : GC_ENOMEM;
      if (rc < 0 || rc == GC_ENOMEM) {
        gc_buf_free(&o);
        return NULL;
      }
      if (rc == 1) /* a long name seen before */
        id = (intptr_t)old;
      else
        next++;
    }
    gc_buf_append(&o, p, pre);
    gc_buf_printf(&o, "#%ld", (long)id);
    gc_buf_append(&o, p + dig, n - dig);
    p = q;
  }
  char *r = o.failed ? NULL : gc_arena_strdup(a, o.data ? o.data : "");
  gc_buf_free(&o);
  return r;
}

/* Moves the kernel just generated (text from `start` of g->out) into the
 * source unless an identical one exists: then only a comment stays, and
 * the kernel runs the earlier function. */
void cg__dedup_kernel(cg *g, const sc_kernel *k, size_t start, size_t sig) {
  const char *name = k->name;
  g->impl[k->id] = name;
  if (g->out.failed || !g->out.data)
    return;
  /* from the parameter list on: the comment and the name differ */
  const char *body = strchr(g->out.data + sig, '(');
  char *canon = body ? canonical_text(g, body) : NULL;
  if (!canon)
    return; /* out of memory: keep the kernel; codegen reports it */
  void *old = NULL;
  int rc = gc_strmap_put(&g->bodies, canon, (void *)name, &old);
  if (rc != 1)
    return;
  g->impl[k->id] = old;
  g->out.len = start;
  g->out.data[start] = '\0';
  gc_buf_printf(&g->out, "/* %s: the same code as %s */\n\n", name,
                (const char *)old);
}
