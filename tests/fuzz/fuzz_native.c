/*
 * fuzz_native.c: libFuzzer target for the back half on graphs a client can
 * send: every graph that decodes is compiled with native code generation
 * on (lowering, the IR verifier after each pass, scheduling, memory
 * planning, C generation), without a C compiler, so the compile ends in
 * "no C toolchain" and serves its ATen program. The lowering rules read
 * the client's metadata (sizes, strides, scalars, index lists): whatever
 * they hold, no pass may read or write out of bounds, and a compile that
 * fails must say why. Seeds: those of fuzz_graph (the captured graphs).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/graph.h"
#include "compiler/key.h"
#include "compiler/native.h"
#include "compiler/pipeline.h"
#include "compiled/v1/graph.pb-c.h"
#include "tests/fuzz/fuzz_decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
                               unsigned int seed);

/* A number near v a rule may trip on. */
static int64_t nudge(int64_t v, unsigned *r) {
  static const int64_t odd[] = {0, 1, -1, 2, 3, 7, 64, 65, 1 << 20, INT64_MAX};
  uint64_t u = (uint64_t)v; /* (wrapping: the mutator's own arithmetic) */
  switch (rand_r(r) % 6) {
  case 0:
    return (int64_t)(u + 1);
  case 1:
    return (int64_t)(u - 1);
  case 2:
    return (int64_t)(u * 2);
  case 3:
    return (int64_t)(0 - u);
  default:
    return odd[rand_r(r) % (sizeof odd / sizeof odd[0])];
  }
}

static void mutate_symint(Compiled__V1__SymInt *s, unsigned *r) {
  if (s && s->kind_case == COMPILED__V1__SYM_INT__KIND_AS_INT)
    s->as_int = nudge(s->as_int, r);
}

static void mutate_meta(Compiled__V1__TensorMeta *m, unsigned *r) {
  if (!m)
    return;
  size_t n = m->n_sizes + m->n_strides + 2;
  size_t k = rand_r(r) % n;
  if (k < m->n_sizes)
    mutate_symint(m->sizes[k], r);
  else if (k < m->n_sizes + m->n_strides)
    mutate_symint(m->strides[k - m->n_sizes], r);
  else if (k == n - 2)
    mutate_symint(m->storage_offset, r);
  else
    m->dtype = (Compiled__V1__ScalarType)(rand_r(r) % 16);
}

/* Points tensor argument t at another tensor value of g (a copy of its
 * name: the message owns each string once). */
static void retarget(Compiled__V1__TensorArgument *t,
                     const Compiled__V1__Graph *g, unsigned *r) {
  if (!t || !g->n_tensor_values)
    return;
  const char *other = g->tensor_values[rand_r(r) % g->n_tensor_values]->name;
  char *copy = other ? strdup(other) : NULL;
  if (!copy)
    return;
  if (t->name != protobuf_c_empty_string) /* (unpacked "" is shared) */
    free(t->name);
  t->name = copy;
}

static void mutate_arg(Compiled__V1__Argument *a, const Compiled__V1__Graph *g,
                       unsigned *r) {
  if (!a)
    return;
  switch (a->kind_case) {
  case COMPILED__V1__ARGUMENT__KIND_AS_TENSOR:
    retarget(a->as_tensor, g, r);
    break;
  case COMPILED__V1__ARGUMENT__KIND_AS_TENSORS:
    if (a->as_tensors && a->as_tensors->n_items)
      retarget(a->as_tensors->items[rand_r(r) % a->as_tensors->n_items], g, r);
    break;
  case COMPILED__V1__ARGUMENT__KIND_AS_OPTIONAL_TENSORS:
    if (a->as_optional_tensors && a->as_optional_tensors->n_items) {
      Compiled__V1__OptionalTensorArgument *o =
          a->as_optional_tensors
              ->items[rand_r(r) % a->as_optional_tensors->n_items];
      if (o->kind_case ==
          COMPILED__V1__OPTIONAL_TENSOR_ARGUMENT__KIND_AS_TENSOR)
        retarget(o->as_tensor, g, r);
    }
    break;
  case COMPILED__V1__ARGUMENT__KIND_AS_INT:
    a->as_int = nudge(a->as_int, r);
    break;
  case COMPILED__V1__ARGUMENT__KIND_AS_INTS:
    if (a->as_ints && a->as_ints->n_items) {
      size_t i = rand_r(r) % a->as_ints->n_items;
      a->as_ints->items[i] = nudge(a->as_ints->items[i], r);
    }
    break;
  case COMPILED__V1__ARGUMENT__KIND_AS_FLOAT:
    a->as_float = rand_r(r) % 2 ? -a->as_float : a->as_float * 3 + 0.5;
    break;
  case COMPILED__V1__ARGUMENT__KIND_AS_BOOL:
    a->as_bool = !a->as_bool;
    break;
  default:
    break;
  }
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
                               unsigned int seed) {
  unsigned r = seed;
  Compiled__V1__GraphModule *m =
      rand_r(&r) % 8 ? compiled__v1__graph_module__unpack(NULL, size, data)
                     : NULL;
  if (!m || !m->graph) {
    if (m)
      compiled__v1__graph_module__free_unpacked(m, NULL);
    return LLVMFuzzerMutate(data, size, max_size);
  }
  Compiled__V1__Graph *g = m->graph;
  for (int times = 1 + rand_r(&r) % 3; times > 0; times--) {
    if (rand_r(&r) % 2 && g->n_tensor_values) {
      mutate_meta(g->tensor_values[rand_r(&r) % g->n_tensor_values]->meta, &r);
    } else if (g->n_nodes) {
      Compiled__V1__Node *nd = g->nodes[rand_r(&r) % g->n_nodes];
      if (nd->n_inputs)
        mutate_arg(nd->inputs[rand_r(&r) % nd->n_inputs]->arg, g, &r);
    }
  }
  size_t len = compiled__v1__graph_module__get_packed_size(m);
  if (len <= max_size)
    size = compiled__v1__graph_module__pack(m, data);
  compiled__v1__graph_module__free_unpacked(m, NULL);
  return size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gc_arena *a;
  gc_graph *g;
  gc_error err;
  /* at most 2000 nodes: a compile per input, keep each one quick */
  if (fuzz_decode(data, size, 2000, &a, &g, &err)) {
    gc_options o;
    gc_options_default(&o);
    /* an AVX-512 target with the system BLAS and oneDNN: the widest code
     * paths (products in generated code) */
    gc_target t = {.arch = "x86_64",
                   .isa = "sse4.2,avx,avx2,fma,avx512f,avx512bw,avx512vl,blas,"
                          "dnnl",
                   .toolchain = "cc",
                   .cflags = "-O2"};
    gc_backend be = {.target = &t, .toolchain = NULL, .verify = true};
    gc_key k;
    gc_compiled art = {0};
    if (gc_key_compute(g, &o, &t, &k, &err) == 0) {
      if (gc_compile(a, g, &k, &o, &be, NULL, &art, &err) == 0)
        free(art.artifact);
      else if (err.msg[0] == '\0')
        abort(); /* a failed compile must say why */
    }
  }
  gc_arena_free(a);
  return 0;
}
