/*
 * passes.h: the compiler's passes, in order, as one table.
 *
 *   order          canonical node order (the key's)
 *   functionalize  mutations and aliasing -> a functional program
 *   emit           the ATen program (every artifact has one)
 *   lower          functional graph -> loop IR            (back half)
 *   schedule       fusion: IR nodes -> kernels            (back half)
 *   plan           memory planning: buffers -> offsets    (back half)
 *   codegen        kernels -> one C translation unit      (back half)
 *   cc             the C compiler, through the toolchain  (back half)
 *   emit-native    the artifact's NativeProgram           (back half)
 *
 * Every driver iterates gc_passes: the pipeline (pipeline.c, which then
 * packages the artifact), `compilectl graph PASS|compile` (--dump-after,
 * --verify) and the golden dump tests. Each entry has
 *
 *   run     the pass itself, on the state the passes share (gc_pass_state);
 *   verify  the invariants its result must keep (NULL: none of its own),
 *           run after it when the state says so (tests, compilectl, the
 *           daemon unless --verify-ir=0);
 *   dump    its result as text (NULL: nothing to show), from dump.c.
 *
 * The back half runs only for functional inference programs with a backend
 * (gc_pass_state_native); a back-half pass that fails ends the native
 * build, not the compile (pipeline.c). The library stays free of process
 * and file I/O: `cc` is the gc_toolchain the caller provides.
 */
#ifndef GC_PASSES_H
#define GC_PASSES_H

#include <stdbool.h>

#include "compiled/v1/artifact.pb-c.h"
#include "compiler/functionalize.h"
#include "compiler/native.h"

/* What the passes share: their inputs, then each one's result
 * (gc_pass_state_init, then the passes in order). */
typedef struct gc_pass_state {
  gc_arena *a;
  const gc_graph *g;
  const gc_options *o;
  const gc_backend *be; /* NULL: the ATen program only */
  const char *key_hex;  /* into the generated C's header; may be NULL */
  bool verify;          /* run each pass's verifier after it */
  int *order;           /* order */
  gc_functional f;      /* functionalize */
  Compiled__V1__Program *program; /* emit */
  gc_native nat;                  /* the back half's passes */
} gc_pass_state;

typedef struct gc_pass {
  const char *name;
  bool native;    /* a back-half pass */
  bool toolchain; /* runs the C compiler: drivers without a toolchain
                     (compilectl, the explorer) leave it out; the pipeline
                     runs it, and a missing toolchain fails the native build */
  int (*run)(gc_pass_state *s, gc_error *err);
  /* true: the pass has nothing to do in this state (NULL: never) */
  bool (*skip)(const gc_pass_state *s);
  int (*verify)(gc_pass_state *s, gc_error *err);
  /* the result as text in the arena; NULL when out of memory */
  const char *(*dump)(gc_pass_state *s);
} gc_pass;

/* At most this many passes (for drivers' per-pass arrays). */
#define GC_MAX_PASSES 16

extern const gc_pass gc_passes[];
extern const int gc_npasses;

/* Zeroes `s` and sets its inputs; the verifiers run when be->verify. */
void gc_pass_state_init(gc_pass_state *s, gc_arena *a, const gc_graph *g,
                        const gc_options *o, const gc_backend *be,
                        const char *key_hex);

/* The pass called `name`, or NULL. */
const gc_pass *gc_pass_find(const char *name);

/* Does this state get the back half (a backend, an optimising compile of a
 * functional inference program)? Known after functionalize. */
bool gc_pass_state_native(const gc_pass_state *s);

/* Runs pass `p` on `s`, then its verifier when s->verify (a verifier's
 * error says "after PASS: ..."). */
int gc_pass_run(const gc_pass *p, gc_pass_state *s, gc_error *err);

#endif
