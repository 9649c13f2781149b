/*
 * functionalize.h: functionalization and alias/mutation analysis.
 *
 * This is the part AOTAutograd plays in PyTorch 2 (ViewAndMutationMeta),
 * done in C. Input: a validated graph as captured, with in-place ops, view
 * ops, in-place view ops, out= variants and copy_. Output:
 *
 *   - a functional graph: no operator writes a value, except an epilogue of
 *     aten::copy_ into inputs mutated "in graph"; a write through a view
 *     becomes its scatter inverse on the base; later readers read the new
 *     value; views of a mutated base are regenerated;
 *   - per input: what is mutated and how the runner applies it;
 *   - per output: whether it is fresh, an input, or a view of an input or of
 *     an intermediate, and how to rebuild it.
 *
 * What an operator writes or aliases comes from its schema's annotations
 * (plus compiler/ops.c's table of annotations torch omits), so it works for
 * operators the compiler has never seen. What it takes to replay or invert
 * a view is the compiler's own knowledge (functionalize.c's view table).
 *
 * When a graph does something the functional form cannot express exactly
 * (a write through an as_strided view of a base that is not dense, a write
 * to inputs whose memory overlaps, set_/resize_, a mutation the schema does
 * not describe precisely), the pass keeps the program in *eager form*: the
 * original operators in their original order, run on the caller's own
 * tensors, which is eager's semantics by construction. `eager_reason` says
 * why; nothing is ever silently wrong.
 */
#ifndef GC_FUNCTIONALIZE_H
#define GC_FUNCTIONALIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "compiler/graph.h"
#include "compiler/key.h"

typedef enum gc_mutation_type {
  GC_MUT_NOT_MUTATED = 0,
  GC_MUT_IN_GRAPH = 1,
  GC_MUT_OUT_GRAPH = 2,
} gc_mutation_type;

typedef enum gc_output_type {
  GC_OUT_NON_ALIAS = 0,
  GC_OUT_ALIAS_OF_INPUT = 1,
  GC_OUT_IS_INPUT = 2,
  GC_OUT_ALIAS_OF_INTERMEDIATE_SAVE_AS_OUTPUT = 3,
  GC_OUT_ALIAS_OF_INTERMEDIATE = 4,
  GC_OUT_ALIAS_OF_INTERMEDIATE_BASE_IS_USER_OUTPUT = 5,
  GC_OUT_UNSAFE_VIEW_ALIAS = 6,
  GC_OUT_CUSTOM_FUNCTION_VIEW = 7,
} gc_output_type;

/* Concrete tensor geometry relative to a storage. */
typedef struct gc_strided {
  int rank;
  int64_t *size;
  int64_t *stride;
  int64_t offset;
} gc_strided;

/* One step of a view chain: call `node`'s operator with its arguments, the
 * viewed tensor in argument `self_arg`; take element `item` of a Tensor[]
 * result (-1: the single result). */
typedef struct gc_view_step {
  const gc_node *node; /* the original view node */
  const gc_op *op;     /* the view operator to replay (t for a t_ node) */
  int self_arg;        /* index into node->args of the viewed tensor */
  int item;
} gc_view_step;

typedef struct gc_input_info {
  bool mutates_data;
  bool mutates_metadata;
  bool hidden_from_autograd; /* every data write went through detach() */
  bool under_no_grad;
  bool mutates_storage_metadata;
  bool requires_grad;
  bool is_leaf;
  gc_mutation_type type;
  int mutated_output;    /* its program output; -1 */
  gc_strided final_meta; /* when mutates_metadata */
} gc_input_info;

typedef struct gc_output_info {
  gc_output_type type;
  int base; /* see artifact.proto OutputInfo.base_index */
  gc_view_step *chain;
  int nchain;
  bool has_chain;
  gc_strided strided; /* as_strided fallback */
  bool requires_grad;
  int program_output;
  bool multi_output_view;
} gc_output_info;

typedef struct gc_functional {
  gc_graph *graph; /* the program: functional, or the original (eager) */
  int *order;      /* node emission order */
  bool functional;
  const char *eager_reason; /* why eager form; NULL when functional */
  gc_input_info *inputs;    /* graph->ninputs of them */
  int ninputs;
  gc_output_info *outputs; /* user outputs */
  int noutputs;
  int num_mutated_outputs;
  int num_intermediate_bases;
  bool keep_input_mutations;
  bool training;
  gc_symbols symbols; /* the graph's symbols as the key numbers them: the
                         artifact calls symbol i "s<i>" */
} gc_functional;

/* Functionalizes `g` (nodes taken in `order`). Everything lives in `a`.
 * Returns 0 (functional or eager form, see out->functional) or an error. */
int gc_functionalize(gc_arena *a, const gc_graph *g, const int *order,
                     const gc_options *o, gc_functional *out, gc_error *err);

#endif
