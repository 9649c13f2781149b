/*
 * pt2.h: reading torch.export's `.pt2` archives.
 *
 * `torch.export.save(ep, "model.pt2")` writes a zip archive holding an
 * ExportedProgram serialized as JSON (torch/_export/serde/schema.py,
 * schema 8.x in torch 2.13) plus the program's weights and constants as raw
 * bytes. pt2_read converts the program into a compiled.v1.GraphModule
 * (docs/graph-format.md) that a daemon compiles like any captured graph, and
 * keeps what a runner needs besides the graph: each input's role (parameter,
 * buffer, constant, user input) with the bytes of the tensors the archive
 * holds, each output's role (user output, mutated buffer, mutated user
 * input), the dynamic dimensions' ranges and the module's pytree specs. That
 * "calling convention" is a JSON object, the same one a package
 * (docs/artifact.md, "Packages") stores in its header.
 *
 * Every malformed archive gets an error naming the member and the JSON path
 * of what is wrong (`models/model.json: graph_module.graph.nodes[3].inputs[1]
 * .arg: ...`). Nothing in an archive is trusted: sizes are bounded before
 * anything is read, and the reader never recurses deeper than
 * PT2_MAX_DEPTH.
 */
#ifndef PT2_H
#define PT2_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "compiled/v1/graph.pb-c.h"

/* The major version of torch.export's serialization schema this reader
 * takes (torch 2.13 writes 8.20); other majors are refused. */
#define PT2_SCHEMA_MAJOR 8
/* Largest member read: the program's JSON and each weight. */
#define PT2_MAX_MEMBER_BYTES ((uint64_t)1 << 33)
/* Largest JSON member (the program, the weights' configuration). */
#define PT2_MAX_JSON_BYTES ((uint64_t)256 << 20)
/* Deepest nesting of a sympy expression. */
#define PT2_MAX_DEPTH 64

/* A tensor the archive holds: a parameter, buffer or constant. */
typedef struct pt2_tensor {
  char *target; /* its path in the module ("fc.weight") */
  int input;    /* index of the graph input it binds */
  uint8_t *data;
  size_t len;
} pt2_tensor;

typedef struct pt2_program {
  Compiled__V1__GraphModule *graph; /* protobuf-c, freed by pt2_free */
  /* The calling convention (docs/artifact.md, "Packages"): inputs, outputs,
   * symbols, tensors (without offsets), specs, versions. */
  json_t *convention;
  pt2_tensor *tensors;
  size_t n_tensors;
} pt2_program;

/* Reads the archive in `data` (`len` bytes; `name` is used in messages).
 * Returns 0 and *out, or -1 with a message in err. */
int pt2_read(const void *data, size_t len, const char *name, pt2_program **out,
             char *err, size_t errlen);

/* Converts a program's JSON alone (an archive's models/model.json), without
 * its weights: no tensors are read or bound. For fuzzing and tools. */
int pt2_read_model_json(const void *data, size_t len, pt2_program **out,
                        char *err, size_t errlen);

/* True when `data` starts like a zip archive ("PK\3\4"). */
int pt2_looks_like_zip(const void *data, size_t len);

void pt2_free(pt2_program *p);

#endif
