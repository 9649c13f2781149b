/*
 * fuzz_graph.c: libFuzzer target for everything that reads graph bytes from
 * the network: unpack, resolve, validate; and, for graphs that pass, the
 * cache key (computed twice: it must be deterministic), the listing, and the
 * whole compile (functionalization, emission, packaging).
 * Seeds: the captured graphs in tests/data/graphs.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/graph.h"
#include "compiler/key.h"
#include "compiler/pipeline.h"
#include "compiler/dump.h"
#include "tests/fuzz/fuzz_decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gc_arena *a;
  gc_graph *g;
  gc_error err;
  if (fuzz_decode(data, size, 0, &a, &g, &err)) {
    gc_options o;
    gc_options_default(&o);
    gc_target t = {
        .arch = "x86_64", .isa = "avx2", .toolchain = "cc", .cflags = "-O2"};
    gc_key k1, k2;
    int r1 = gc_key_compute(g, &o, &t, &k1, &err);
    int r2 = gc_key_compute(g, &o, &t, &k2, &err);
    if (r1 != r2 || (r1 == 0 && memcmp(&k1, &k2, sizeof k1) != 0))
      abort(); /* the key must be deterministic */
    gc_buf out = GC_BUF_INIT;
    gc_graph_print(g, &out);
    gc_buf_free(&out);
    gc_compiled art = {0};
    if (r1 == 0 && gc_compile(a, g, &k1, &o, NULL, NULL, &art, &err) == 0)
      free(art.artifact);
    else if (r1 == 0 && err.msg[0] == '\0')
      abort(); /* a failed compile must say why */
  }
  gc_arena_free(a);
  return 0;
}
