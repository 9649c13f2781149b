/*
 * fuzz_pt2.c: libFuzzer target for the torch.export .pt2 reader
 * (client/lib/pt2.c).
 *
 * An input that starts like a zip archive ("PK\3\4") is read as a whole
 * archive (libzip, the member checks, weights and their bounds); any other
 * input is taken as the program's JSON (models/model.json) and converted
 * without weights, which is where most of the reader's code is. Reading may
 * fail (it must then say why and leave nothing behind) but never crash or
 * leak. When it succeeds, the graph must pack, and validate or be refused
 * with a message (the validator is fuzzed on its own by fuzz_graph).
 *
 * Seeds: tests/fuzz/corpus/pt2/ (tests/fuzz/make_pt2_seeds.py).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/pt2.h"
#include "compiler/arena.h"
#include "compiler/error.h"
#include "compiler/graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[1024] = "";
  pt2_program *p = NULL;
  int rc = pt2_looks_like_zip(data, size)
               ? pt2_read(data, size, "fuzz.pt2", &p, err, sizeof err)
               : pt2_read_model_json(data, size, &p, err, sizeof err);
  if (rc != 0) {
    if (p != NULL || err[0] == '\0')
      abort(); /* a failure leaves nothing and says why */
    return 0;
  }
  if (p == NULL || p->graph == NULL || !json_is_object(p->convention))
    abort();
  size_t len = protobuf_c_message_get_packed_size(&p->graph->base);
  uint8_t *buf = malloc(len + 1);
  if (buf == NULL || protobuf_c_message_pack(&p->graph->base, buf) != len)
    abort();
  free(buf);
  gc_limits lim;
  gc_limits_default(&lim);
  gc_arena *a = gc_arena_new(lim.max_memory);
  if (a == NULL)
    abort();
  gc_graph *g;
  gc_error gerr;
  if (gc_graph_from_message(a, p->graph, &lim, &g, &gerr) != 0 &&
      gerr.msg[0] == '\0')
    abort();
  gc_arena_free(a);
  pt2_free(p);
  return 0;
}
