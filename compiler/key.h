/*
 * key.h: the cache key of a compile, SHA-256 over a canonical byte stream.
 *
 * The key of a (graph, options, target) triple is the SHA-256 of six
 * component digests, each over its own canonical stream (docs/graph-format.md,
 * "The cache key"):
 *
 *   graph     the schemas of the operators used (as torch prints them);
 *             the nodes in canonical topological order, value names replaced
 *             by positions, every argument in schema order with omitted
 *             defaults filled in, intermediate tensor metadata, outputs
 *   inputs    per input: kind and metadata (dtype, sizes, strides, offset,
 *             device type, requires_grad, layout); the storage-sharing pattern
 *   options   the compile options that change the result
 *   target    architecture, ISA features, toolchain identity and flags, the
 *             client's torch version
 *   compiler  the compiler's build id (a digest of its sources)
 *   schema    the graph schema's major version
 *
 * Names, node order among independent nodes, node metadata, device indices
 * of tensors, module paths of parameters and the hint of a symbolic size
 * never enter it; anything that changes what the program computes does.
 * Keeping one digest per component lets a miss be explained ("same graph,
 * different target").
 */
#ifndef GC_KEY_H
#define GC_KEY_H

#include <stdbool.h>
#include <stdint.h>

#include "compiler/graph.h"
#include "compiler/strmap.h"

#define GC_DIGEST_LEN 32
#define GC_HEX_LEN (2 * GC_DIGEST_LEN + 1)

/* The key components, in the order they are combined. */
#define GC_KEY_COMPONENTS(X)                                                   \
  X(GRAPH, "graph")                                                            \
  X(INPUTS, "inputs")                                                          \
  X(OPTIONS, "options")                                                        \
  X(TARGET, "target")                                                          \
  X(COMPILER, "compiler")                                                      \
  X(SCHEMA, "schema")

typedef enum gc_key_component {
#define X(name, text) GC_KEY_##name,
  GC_KEY_COMPONENTS(X)
#undef X
      GC_KEY_NCOMPONENTS
} gc_key_component;

/* The compile options that change an artifact. */
typedef struct gc_options {
  int opt_level;             /* 0: every op a fallback call; 1..3 native */
  bool keep_input_mutations; /* input mutations stay in the program */
  bool training;             /* training (autograd) rather than inference */
  bool separate_temporaries; /* large intermediates get their own memory
                                (IR_BUF_TEMP), not arena space */
  bool eager_random;         /* random operators stay ATen calls (eager's
                                numbers under the same seed) */
} gc_options;

/* Defaults: opt_level 2, keep_input_mutations true, inference. */
void gc_options_default(gc_options *o);

/* Where the artifact will run and what builds it. Strings are borrowed. */
typedef struct gc_target {
  const char *arch;          /* "x86_64", "aarch64" */
  const char *isa;           /* ISA features, comma-separated, any order */
  const char *toolchain;     /* identity of the C compiler ("gcc 12.2.0") */
  const char *cflags;        /* flags the toolchain is run with */
  const char *torch_version; /* the client's torch; NULL: the graph's own */
} gc_target;

typedef struct gc_key {
  uint8_t key[GC_DIGEST_LEN];
  uint8_t part[GC_KEY_NCOMPONENTS][GC_DIGEST_LEN];
} gc_key;

/* Computes the key of `g` compiled with `o` for `t`. Temporary memory comes
 * from the graph's arena. Returns 0, or GC_ENOMEM/GC_EINTERNAL. */
int gc_key_compute(const gc_graph *g, const gc_options *o, const gc_target *t,
                   gc_key *out, gc_error *err);

/* Lowercase hex of a digest into `out` (GC_HEX_LEN bytes). */
void gc_digest_hex(const uint8_t d[GC_DIGEST_LEN], char out[GC_HEX_LEN]);

/* Parses 64 hex digits. Returns 0, or GC_EINVAL. */
int gc_digest_parse(const char *hex, uint8_t d[GC_DIGEST_LEN]);

/* "graph", "inputs", ...: the name of a component. */
const char *gc_key_component_name(gc_key_component c);

/* The compiler's build id (a digest of the compiler's sources). */
const char *gc_build_id(void);

/* The canonical node order the graph hash uses: order[i] is the index of the
 * i-th node. Exposed for tests and for passes that want a stable order.
 * `order` must hold g->nnodes entries. */
int gc_canonical_order(const gc_graph *g, int *order, gc_error *err);

/* The graph's symbols as the key numbers them (first appearance: inputs
 * first, then the nodes in the canonical node order): names[i] is the
 * client's name of the symbol the key numbers i, which artifacts call
 * "s<i>" (docs/artifact.md), so that an artifact does not depend on the
 * names its client chose. */
typedef struct gc_symbols {
  const char **names; /* n of them, in the graph's arena */
  int n;
  gc_strmap index; /* client name -> 1 + its number */
} gc_symbols;

/* Numbers g's symbols (order: the canonical node order). A graph without
 * symbols gets n = 0 at the cost of a scan of its values. */
int gc_symbols_make(const gc_graph *g, const int *order, gc_symbols *out,
                    gc_error *err);

/* The number of symbol `name`; -1 when the graph has no such symbol. */
int gc_symbols_find(const gc_symbols *s, const char *name);

/* `e` as text in the graph grammar (gc_symexpr_format) with every symbol
 * renamed "s<i>"; in the arena, NULL when out of memory or when a symbol is
 * not numbered (not one of the graph's). */
char *gc_symbols_text(const gc_symbols *s, gc_arena *a, const gc_symexpr *e);

#endif
