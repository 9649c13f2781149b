/*
 * test_key.c: the cache key is invariant under renaming, reordering of
 * independent nodes and metadata changes, and changes under any semantic
 * change (docs/graph-format.md, "The cache key"). Property tests run on the
 * graphs captured from real PyTorch modules in tests/data/graphs; hand-made
 * graphs cover the traps (duplicate nodes, mutation order, "_N" names,
 * defaults).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "compiler/graph.h"
#include "compiler/key.h"
#include "tests/lib/graphmut.h"
#include "tests/lib/testutil.h"
#include "tests/lib/tgraph.h"

#define MIN_CORPUS 20
#define INVARIANT_TRIALS 25
#define EDIT_TRIALS 3

static gc_target test_target(void) {
  gc_target t = {.arch = "x86_64",
                 .isa = "avx2,fma,sse4.2",
                 .toolchain = "gcc (Debian 12.2.0-14) 12.2.0",
                 .cflags = "-O2",
                 .torch_version = NULL};
  return t;
}

/* Decodes `m` (via its bytes, as the daemon does) and computes its key.
 * Fails the test with the decoder's message when the graph is invalid. */
static void key_of(gc_arena *a, const gm_module *m, const gc_options *o,
                   const gc_target *t, gc_key *out, const char *what) {
  size_t len;
  uint8_t *buf = gm_pack(a, m, &len);
  gc_graph *g;
  gc_error err;
  int rc = gc_graph_decode(a, buf, len, NULL, &g, &err);
  cr_assert_eq(rc, 0, "%s: graph does not validate: %s", what, err.msg);
  rc = gc_key_compute(g, o, t, out, &err);
  cr_assert_eq(rc, 0, "%s: key: %s", what, err.msg);
}

static gc_key key_default(gc_arena *a, const gm_module *m, const char *what) {
  gc_options o;
  gc_options_default(&o);
  gc_target t = test_target();
  gc_key k;
  key_of(a, m, &o, &t, &k, what);
  return k;
}

static char **corpus(int *n) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/tests/data/graphs", tu_src_dir());
  char **list = tu_list(dir, ".pb", n);
  cr_assert_geq(*n, MIN_CORPUS,
                "expected >= %d captured graphs in %s, found %d", MIN_CORPUS,
                dir, *n);
  return list;
}

static gm_module *load(gc_arena *a, const char *path) {
  size_t len;
  uint8_t *data = tu_read(path, &len);
  uint8_t *copy = gc_arena_alloc(a, len + 1);
  memcpy(copy, data, len);
  free(data);
  gm_module *m = gm_unpack(a, copy, len);
  cr_assert_not_null(m, "%s does not unpack", path);
  return m;
}

Test(key, invariant_under_renaming_reordering_and_metadata) {
  int n;
  char **files = corpus(&n);
  long checked = 0, moved = 0;
  for (int f = 0; f < n; f++) {
    gc_arena *a = gc_arena_new(0);
    gm_module *orig = load(a, files[f]);
    gc_key k0 = key_default(a, orig, files[f]);
    for (int t = 0; t < INVARIANT_TRIALS; t++) {
      tu_rng r;
      uint64_t seed = 1000003ull * (uint64_t)f + (uint64_t)t + 1;
      tu_rng_seed(&r, seed);
      gm_module *m = gm_clone(a, orig);
      gm_reorder(a, m, &r);
      for (size_t i = 0; i < m->graph->n_nodes; i++)
        if (strcmp(m->graph->nodes[i]->target, orig->graph->nodes[i]->target) ||
            compiled__v1__node__get_packed_size(m->graph->nodes[i]) !=
                compiled__v1__node__get_packed_size(orig->graph->nodes[i])) {
          moved++;
          break;
        }
      gm_rename(a, m, &r);
      gm_shuffle_tables(m, &r);
      gm_touch_metadata(a, m, &r);
      if (t % 2)
        gm_spell_defaults(a, m, &r);
      gc_key k = key_default(a, m, files[f]);
      cr_assert(memcmp(k.key, k0.key, GC_DIGEST_LEN) == 0,
                "%s: key changed after renaming/reordering (seed %llu)",
                files[f], (unsigned long long)seed);
      checked++;
    }
    gc_arena_free(a);
  }
  tu_free_list(files, n);
  cr_assert_eq(checked, (long)n * INVARIANT_TRIALS);
  /* The reorderings must really move nodes, or the test proves nothing. */
  cr_assert_gt(moved, checked / 3, "only %ld of %ld trials reordered nodes",
               moved, checked);
}

Test(key, sensitive_to_every_semantic_edit) {
  int n;
  char **files = corpus(&n);
  int applied[GM_NEDITS] = {0};
  for (int f = 0; f < n; f++) {
    gc_arena *a = gc_arena_new(0);
    gm_module *orig = load(a, files[f]);
    gc_key k0 = key_default(a, orig, files[f]);
    for (int e = 0; e < GM_NEDITS; e++) {
      for (int t = 0; t < EDIT_TRIALS; t++) {
        tu_rng r;
        uint64_t seed =
            7919ull * (uint64_t)f + 31ull * (uint64_t)e + (uint64_t)t;
        tu_rng_seed(&r, seed);
        gm_module *m = gm_clone(a, orig);
        const char *what = gm_edit(a, m, &r, e);
        if (!what)
          continue;
        /* Invariant noise on top must not hide the edit. */
        gm_rename(a, m, &r);
        gm_reorder(a, m, &r);
        gc_key k = key_default(a, m, what);
        cr_assert(memcmp(k.key, k0.key, GC_DIGEST_LEN) != 0,
                  "%s: key unchanged after a semantic edit: %s (seed %llu)",
                  files[f], what, (unsigned long long)seed);
        applied[e]++;
      }
    }
    gc_arena_free(a);
  }
  tu_free_list(files, n);
  for (int e = 0; e < GM_NEDITS; e++)
    cr_assert_gt(applied[e], 0, "edit %d applied to no graph of the corpus", e);
}

/* An edit of one kind changes exactly the component it belongs to, so a miss
 * can be explained. */
Test(key, components_attribute_changes) {
  gc_arena *a = gc_arena_new(0);
  gm_module *orig = load(a, tu_path("tests/data/graphs/mlp.pb"));
  gc_key k0 = key_default(a, orig, "orig");
  struct {
    int edit;
    gc_key_component comp;
  } cases[] = {{0, GC_KEY_GRAPH},
               {4, GC_KEY_INPUTS},
               {6, GC_KEY_INPUTS},
               {7, GC_KEY_INPUTS},
               {13, GC_KEY_GRAPH}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tu_rng r;
    tu_rng_seed(&r, 42 + i);
    gm_module *m = gm_clone(a, orig);
    const char *what = gm_edit(a, m, &r, cases[i].edit);
    cr_assert_not_null(what);
    gc_key k = key_default(a, m, what);
    for (int c = 0; c < GC_KEY_NCOMPONENTS; c++) {
      bool same = memcmp(k.part[c], k0.part[c], GC_DIGEST_LEN) == 0;
      cr_assert_eq(same, c != (int)cases[i].comp, "%s: component %s %s", what,
                   gc_key_component_name((gc_key_component)c),
                   same ? "unchanged" : "changed");
    }
  }
  gc_arena_free(a);
}

Test(key, options_and_target_enter_the_key) {
  gc_arena *a = gc_arena_new(0);
  gm_module *m = tg_build(a,
                          "x: f32[4]\n"
                          "y = aten::relu(x): f32[4]\n"
                          "return y\n",
                          NULL, 0);
  gc_options o0;
  gc_options_default(&o0);
  gc_target t0 = test_target();
  gc_key k0, k;
  key_of(a, m, &o0, &t0, &k0, "base");

  gc_options o = o0;
  o.opt_level = 0;
  key_of(a, m, &o, &t0, &k, "opt_level");
  cr_assert(memcmp(k.key, k0.key, GC_DIGEST_LEN) != 0);
  cr_assert(memcmp(k.part[GC_KEY_OPTIONS], k0.part[GC_KEY_OPTIONS], 32) != 0);
  cr_assert(memcmp(k.part[GC_KEY_GRAPH], k0.part[GC_KEY_GRAPH], 32) == 0);
  o = o0;
  o.keep_input_mutations = false;
  key_of(a, m, &o, &t0, &k, "keep_input_mutations");
  cr_assert(memcmp(k.key, k0.key, GC_DIGEST_LEN) != 0);
  o = o0;
  o.training = true;
  key_of(a, m, &o, &t0, &k, "training");
  cr_assert(memcmp(k.key, k0.key, GC_DIGEST_LEN) != 0);
  o = o0;
  o.separate_temporaries = true;
  key_of(a, m, &o, &t0, &k, "separate_temporaries");
  cr_assert(memcmp(k.key, k0.key, GC_DIGEST_LEN) != 0);

  const char *fields[] = {"arch", "isa", "toolchain", "cflags", "torch"};
  for (int i = 0; i < 5; i++) {
    gc_target t = t0;
    if (i == 0)
      t.arch = "aarch64";
    if (i == 1)
      t.isa = "avx2,sse4.2";
    if (i == 2)
      t.toolchain = "clang 14";
    if (i == 3)
      t.cflags = "-O3";
    if (i == 4)
      t.torch_version = "2.1.0";
    key_of(a, m, &o0, &t, &k, fields[i]);
    cr_assert(memcmp(k.key, k0.key, GC_DIGEST_LEN) != 0, "%s", fields[i]);
    cr_assert(memcmp(k.part[GC_KEY_TARGET], k0.part[GC_KEY_TARGET], 32) != 0,
              "%s", fields[i]);
  }
  /* ISA features are a set: order and repeats do not matter. */
  gc_target t = t0;
  t.isa = "sse4.2, fma,avx2,fma";
  key_of(a, m, &o0, &t, &k, "isa order");
  cr_assert(memcmp(k.key, k0.key, GC_DIGEST_LEN) == 0);
  gc_arena_free(a);
}

static gc_key key_spec(gc_arena *a, const char *spec) {
  char err[512];
  gm_module *m = tg_build(a, spec, err, sizeof err);
  cr_assert_not_null(m, "%s", err);
  return key_default(a, m, spec);
}

static bool same_key(gc_key x, gc_key y) {
  return memcmp(x.key, y.key, GC_DIGEST_LEN) == 0;
}

/* Two identical nodes used differently: whichever comes first, one key. */
Test(key, duplicate_nodes_in_any_order) {
  gc_arena *a = gc_arena_new(0);
  gc_key k1 = key_spec(a, "x: f32[4]\n"
                          "a = aten::relu(x): f32[4]\n"
                          "b = aten::relu(x): f32[4]\n"
                          "c = aten::add.Tensor(a, x): f32[4]\n"
                          "d = aten::mul.Tensor(b, x): f32[4]\n"
                          "return c, d\n");
  gc_key k2 = key_spec(a, "x: f32[4]\n"
                          "b = aten::relu(x): f32[4]\n"
                          "a = aten::relu(x): f32[4]\n"
                          "d = aten::mul.Tensor(b, x): f32[4]\n"
                          "c = aten::add.Tensor(a, x): f32[4]\n"
                          "return c, d\n");
  cr_assert(same_key(k1, k2));
  /* ... but swapping what the two outputs are is a different program. */
  gc_key k3 = key_spec(a, "x: f32[4]\n"
                          "a = aten::relu(x): f32[4]\n"
                          "b = aten::relu(x): f32[4]\n"
                          "c = aten::add.Tensor(a, x): f32[4]\n"
                          "d = aten::mul.Tensor(b, x): f32[4]\n"
                          "return d, c\n");
  cr_assert(!same_key(k1, k3));
  gc_arena_free(a);
}

/* Names shaped like canonical ones ("_0", "_1") swapped between values. */
Test(key, names_that_look_canonical) {
  gc_arena *a = gc_arena_new(0);
  gc_key k1 = key_spec(a, "_0: f32[4]\n_1: f32[4]\n"
                          "_2 = aten::sub.Tensor(_0, _1): f32[4]\n"
                          "return _2\n");
  gc_key k2 = key_spec(a, "_1: f32[4]\n_0: f32[4]\n"
                          "_3 = aten::sub.Tensor(_1, _0): f32[4]\n"
                          "return _3\n");
  gc_key k3 = key_spec(a, "_0: f32[4]\n_1: f32[4]\n"
                          "_2 = aten::sub.Tensor(_1, _0): f32[4]\n"
                          "return _2\n");
  cr_assert(same_key(k1, k2));
  cr_assert(!same_key(k1, k3), "sub(a, b) and sub(b, a) must differ");
  gc_arena_free(a);
}

/* A read before an in-place write and a read after it are different
 * programs, even though no data edge orders them. */
Test(key, mutation_order_is_semantic) {
  gc_arena *a = gc_arena_new(0);
  gc_key before = key_spec(a, "x: f32[4]\n"
                              "y = aten::add.Tensor(x, 1): f32[4]\n"
                              "x2 = aten::mul_.Tensor(x, 2): f32[4]\n"
                              "return y\n");
  gc_key after = key_spec(a, "x: f32[4]\n"
                             "x2 = aten::mul_.Tensor(x, 2): f32[4]\n"
                             "y = aten::add.Tensor(x, 1): f32[4]\n"
                             "return y\n");
  cr_assert(!same_key(before, after));
  /* Through a view: v aliases x, so writing v orders against reads of x. */
  gc_key v1 = key_spec(a, "x: f32[4, 4]\n"
                          "v = aten::select.int(x, 0, 0): f32[4]\n"
                          "y = aten::sum(x): f32[]\n"
                          "w = aten::add_.Tensor(v, 1): f32[4]\n"
                          "return y\n");
  gc_key v2 = key_spec(a, "x: f32[4, 4]\n"
                          "v = aten::select.int(x, 0, 0): f32[4]\n"
                          "w = aten::add_.Tensor(v, 1): f32[4]\n"
                          "y = aten::sum(x): f32[]\n"
                          "return y\n");
  cr_assert(!same_key(v1, v2));
  /* Two reads around nothing: free to reorder. */
  gc_key r1 = key_spec(a, "x: f32[4]\n"
                          "y = aten::add.Tensor(x, 1): f32[4]\n"
                          "z = aten::mul.Tensor(x, 2): f32[4]\n"
                          "return y, z\n");
  gc_key r2 = key_spec(a, "x: f32[4]\n"
                          "z = aten::mul.Tensor(x, 2): f32[4]\n"
                          "y = aten::add.Tensor(x, 1): f32[4]\n"
                          "return y, z\n");
  cr_assert(same_key(r1, r2));
  gc_arena_free(a);
}

/* Random ops keep their relative order: the RNG stream is shared state. */
Test(key, random_ops_keep_their_order) {
  gc_arena *a = gc_arena_new(0);
  gc_key k1 = key_spec(a, "x: f32[4]\n"
                          "p = aten::rand_like(x): f32[4]\n"
                          "q = aten::bernoulli(x): f32[4]\n"
                          "return p, q\n");
  gc_key k2 = key_spec(a, "x: f32[4]\n"
                          "q = aten::bernoulli(x): f32[4]\n"
                          "p = aten::rand_like(x): f32[4]\n"
                          "return p, q\n");
  cr_assert(!same_key(k1, k2));
  gc_arena_free(a);
}

/* An explicit default hashes like an omitted one; a different value does
 * not; literals are normalized by the declared type. */
Test(key, defaults_and_literal_normalization) {
  gc_arena *a = gc_arena_new(0);
  gc_key omitted =
      key_spec(a, "x: f32[4]\ny: f32[4]\n"
                  "z = aten::add.Tensor(x, y): f32[4]\nreturn z\n");
  gc_key explicit1 = key_spec(a, "x: f32[4]\ny: f32[4]\n"
                                 "z = aten::add.Tensor(x, y, alpha=1): f32[4]\n"
                                 "return z\n");
  gc_key two = key_spec(a, "x: f32[4]\ny: f32[4]\n"
                           "z = aten::add.Tensor(x, y, alpha=2): f32[4]\n"
                           "return z\n");
  cr_assert(same_key(omitted, explicit1));
  cr_assert(!same_key(omitted, two));
  /* A float parameter given an int: the same value. */
  gc_key f1 =
      key_spec(a, "x: f32[4]\n"
                  "z = aten::layer_norm(x, [4], eps=0.0): f32[4]\nreturn z\n");
  gc_key f2 =
      key_spec(a, "x: f32[4]\n"
                  "z = aten::layer_norm(x, [4], eps=0): f32[4]\nreturn z\n");
  cr_assert(same_key(f1, f2));
  /* -0.0 and 0.0 are different numbers. */
  gc_key f3 =
      key_spec(a, "x: f32[4]\n"
                  "z = aten::layer_norm(x, [4], eps=-0.0): f32[4]\nreturn z\n");
  cr_assert(!same_key(f1, f3));
  /* A Scalar keeps its kind: 1 and 1.0 may promote differently. */
  gc_key s1 = key_spec(a, "x: f32[4]\n"
                          "z = aten::leaky_relu(x, 1): f32[4]\nreturn z\n");
  gc_key s2 = key_spec(a, "x: f32[4]\n"
                          "z = aten::leaky_relu(x, 1.0): f32[4]\nreturn z\n");
  cr_assert(!same_key(s1, s2));
  /* int[2] given one int means that int twice. */
  gc_key p1 =
      key_spec(a, "x: f32[1, 1, 8, 8]\n"
                  "y = aten::avg_pool2d(x, [2, 2], [2, 2]): f32[1, 1, 4, 4]\n"
                  "return y\n");
  gc_key p2 = key_spec(a, "x: f32[1, 1, 8, 8]\n"
                          "y = aten::avg_pool2d(x, 2, 2): f32[1, 1, 4, 4]\n"
                          "return y\n");
  cr_assert(same_key(p1, p2));
  gc_arena_free(a);
}

/* The aliasing pattern of inputs is part of the key; which group index the
 * client used is not. */
Test(key, storage_sharing_pattern) {
  gc_arena *a = gc_arena_new(0);
  gc_key alone = key_spec(a, "x: f32[4]\ny: f32[4]\nz: f32[4]\n"
                             "s = aten::add.Tensor(x, y): f32[4]\nreturn s\n");
  gc_key xy = key_spec(a, "x: f32[4] group 0\ny: f32[4] group 0\nz: f32[4]\n"
                          "s = aten::add.Tensor(x, y): f32[4]\nreturn s\n");
  gc_key yz = key_spec(a, "x: f32[4]\ny: f32[4] group 0\nz: f32[4] group 0\n"
                          "s = aten::add.Tensor(x, y): f32[4]\nreturn s\n");
  cr_assert(!same_key(alone, xy));
  cr_assert(!same_key(xy, yz));
  gc_key xy2 = key_spec(a, "x: f32[4] group 1\ny: f32[4] group 1\n"
                           "z: f32[4] group 0\nw: f32[4] group 0\n"
                           "s = aten::add.Tensor(x, y): f32[4]\nreturn s\n");
  gc_key xy3 = key_spec(a, "x: f32[4] group 0\ny: f32[4] group 0\n"
                           "z: f32[4] group 1\nw: f32[4] group 1\n"
                           "s = aten::add.Tensor(x, y): f32[4]\nreturn s\n");
  cr_assert(same_key(xy2, xy3));
  gc_arena_free(a);
}

/* native_batch_norm writes its running stats in training mode although
 * torch's schema does not say so: reads of them stay ordered. */
Test(key, unannotated_batch_norm_mutation_keeps_order) {
  gc_arena *a = gc_arena_new(0);
  gc_key k1 =
      key_spec(a, "x: f32[2, 3]\nrm: f32[3] buffer\nrv: f32[3] buffer\n"
                  "s = aten::sum(rm): f32[]\n"
                  "o, m, v = aten::native_batch_norm(x, None, None, rm, "
                  "rv, True, 0.1, 1e-5): f32[2, 3]\n"
                  "return o, s\n");
  gc_key k2 =
      key_spec(a, "x: f32[2, 3]\nrm: f32[3] buffer\nrv: f32[3] buffer\n"
                  "o, m, v = aten::native_batch_norm(x, None, None, rm, "
                  "rv, True, 0.1, 1e-5): f32[2, 3]\n"
                  "s = aten::sum(rm): f32[]\n"
                  "return o, s\n");
  cr_assert(!same_key(k1, k2));
  gc_arena_free(a);
}

/* Keys are computed on several daemon threads at once: every thread must
 * get the same key (a non-reentrant libc call once broke this). */
#include <pthread.h>

typedef struct key_thread {
  const uint8_t *bytes;
  size_t len;
  gc_key first;
  int mismatches;
} key_thread;

static void *key_worker(void *arg) {
  key_thread *kt = arg;
  gc_options o;
  gc_options_default(&o);
  gc_target t = {.arch = "x86_64",
                 .isa = "sse4.2,avx,avx2,fma,bmi2,avx512f,avx512bw",
                 .toolchain = "gcc 12",
                 .cflags = "-O2"};
  for (int i = 0; i < 400; i++) {
    gc_arena *a = gc_arena_new(0);
    gc_graph *g;
    gc_key k;
    if (gc_graph_decode(a, kt->bytes, kt->len, NULL, &g, NULL) != 0 ||
        gc_key_compute(g, &o, &t, &k, NULL) != 0)
      kt->mismatches++;
    else if (i == 0)
      kt->first = k;
    else if (memcmp(&k, &kt->first, sizeof k) != 0)
      kt->mismatches++;
    gc_arena_free(a);
  }
  return NULL;
}

Test(key, same_key_from_concurrent_threads) {
  size_t len;
  uint8_t *bytes = tu_read(tu_path("tests/data/graphs/mlp.pb"), &len);
  key_thread kt[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    kt[i] = (key_thread){.bytes = bytes, .len = len};
    pthread_create(&th[i], NULL, key_worker, &kt[i]);
  }
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(kt[i].mismatches, 0, "thread %d: %d keys differed", i,
                 kt[i].mismatches);
    cr_assert(memcmp(&kt[i].first, &kt[0].first, sizeof kt[0].first) == 0);
  }
  free(bytes);
}

/* ---- symbolic expressions and operator schemas (issue 9) ---- */

/* A graph whose input x has size 0 `expr`, as a module to decode. */
static gm_module *with_size_expr(gc_arena *a, const char *expr) {
  gm_module *m = tg_build(a,
                          "x: f32[4, 4]\n"
                          "y = aten::relu(x): f32[4, 4]\n"
                          "return y\n",
                          NULL, 0);
  for (size_t v = 0; v < m->graph->n_tensor_values; v++) {
    Compiled__V1__SymInt *s = m->graph->tensor_values[v]->meta->sizes[0];
    s->kind_case = COMPILED__V1__SYM_INT__KIND_AS_EXPR;
    s->as_expr = gc_arena_zalloc(a, sizeof *s->as_expr);
    compiled__v1__sym_expr__init(s->as_expr);
    s->as_expr->expr = gc_arena_strdup(a, expr);
  }
  return m;
}

static gc_key key_expr(gc_arena *a, const char *expr) {
  return key_default(a, with_size_expr(a, expr), expr);
}

Test(key, symbolic_sizes_hash_their_structure) {
  gc_arena *a = gc_arena_new(0);
  gc_key k = key_expr(a, "2*s0 + 1");
  /* Symbols are renamed by first appearance; blanks do not matter. */
  cr_assert(same_key(k, key_expr(a, "2 * s7+1")));
  cr_assert(!same_key(k, key_expr(a, "2*s0 + 2")));
  cr_assert(!same_key(k, key_expr(a, "s0*2 + 1")));
  /* a - b is the sum a + (-b): the same tree, so the same key. */
  cr_assert(same_key(key_expr(a, "s0 - s1"), key_expr(a, "s0 + -s1")));
  cr_assert(!same_key(key_expr(a, "s0 - s1"), key_expr(a, "-s0 + s1")));
  cr_assert(!same_key(key_expr(a, "s0 // 2 // 3"), key_expr(a, "s0 // 6")));
  gc_arena_free(a);
}

/* Issue 38: one key for every size of a symbolic dimension. The hint (the
 * size seen at capture) is not part of it, symbols are renamed by first
 * appearance in the inputs, and a "symbolic" size that is a constant is
 * that constant. */
Test(key, symbolic_graph_key_ignores_hints_and_symbol_names) {
  gc_arena *a = gc_arena_new(0);
  const char *base = "x: f32[s0=4, s1=8]\n"
                     "y: f32[s1=8]\n"
                     "z = aten::add.Tensor(x, y): f32[s0=4, s1=8]\n"
                     "return z\n";
  gc_key k = key_spec(a, base);
  /* other hints */
  cr_assert(same_key(k, key_spec(a, "x: f32[s0=17, s1=3]\n"
                                    "y: f32[s1=3]\n"
                                    "z = aten::add.Tensor(x, y): f32[s0=17, "
                                    "s1=3]\n"
                                    "return z\n")));
  /* no hints at all */
  cr_assert(same_key(k, key_spec(a, "x: f32[s0, s1]\n"
                                    "y: f32[s1]\n"
                                    "z = aten::add.Tensor(x, y): f32[s0, s1]\n"
                                    "return z\n")));
  /* other names, in another order of numbering */
  cr_assert(same_key(k, key_spec(a, "x: f32[s9=4, s2=8]\n"
                                    "y: f32[s2=8]\n"
                                    "z = aten::add.Tensor(x, y): f32[s9, s2]\n"
                                    "return z\n")));
  /* but not another structure: both dims the same symbol */
  cr_assert(!same_key(k, key_spec(a, "x: f32[s0, s0]\n"
                                     "y: f32[s0]\n"
                                     "z = aten::add.Tensor(x, y): f32[s0, s0]\n"
                                     "return z\n")));
  /* nor the static graph of the hints */
  cr_assert(!same_key(k, key_spec(a, "x: f32[4, 8]\n"
                                     "y: f32[8]\n"
                                     "z = aten::add.Tensor(x, y): f32[4, 8]\n"
                                     "return z\n")));
  gc_arena_free(a);
}

Test(key, constant_symbolic_size_is_its_value) {
  gc_arena *a = gc_arena_new(0);
  gc_key k = key_spec(a, "x: f32[s0, 8]\n"
                         "z = aten::relu(x): f32[s0, 8]\n"
                         "return z\n");
  /* "8" sent as an expression (and its stride "8" too) is the int 8 */
  cr_assert(same_key(k, key_spec(a, "x: f32[s0, 4+4] strides [2*4, 1]\n"
                                    "z = aten::relu(x): f32[s0, 8]\n"
                                    "return z\n")) == false);
  cr_assert(same_key(k, key_spec(a, "x: f32[s0, (8)] strides [8, 1]\n"
                                    "z = aten::relu(x): f32[s0, 8]\n"
                                    "return z\n")));
  gc_arena_free(a);
}

/* Issue 9: "s0+s0+...", 150,000 terms, overflowed the stack in the key's
 * recursive hash (the decoder accepted it: sums were parsed in a loop, but
 * into a left-deep tree). Now the decoder refuses it; a key is computed only
 * for what it accepts, and the widest sum it accepts hashes fine. */
Test(key, huge_symbolic_sum_never_crashes) {
  gc_arena *a = gc_arena_new(0);
  const int n = 150000;
  char *e = gc_arena_alloc(a, 3 * (size_t)n);
  for (int i = 0; i < n; i++)
    memcpy(e + 3 * i, "s0+", 3);
  e[3 * n - 1] = '\0';
  gm_module *m = with_size_expr(a, e);
  size_t len;
  uint8_t *buf = gm_pack(a, m, &len);
  gc_graph *g;
  gc_error err;
  int rc = gc_graph_decode(a, buf, len, NULL, &g, &err);
  if (rc == 0) { /* what happened before the fix: this crashed */
    gc_key k;
    gc_options o;
    gc_options_default(&o);
    gc_target t = test_target();
    gc_key_compute(g, &o, &t, &k, &err);
  }
  cr_assert_eq(rc, GC_ELIMIT, "%s", err.msg);
  cr_assert(strstr(err.msg, "has more than 10000 nodes, the limit"), "%s",
            err.msg);
  e[3 * 9999 - 1] = '\0'; /* 9,999 terms: 10,000 nodes, the limit */
  key_expr(a, e);
  gc_arena_free(a);
}

/* A schema the compiler cannot check (an operator torch 2.13 lacks, or a
 * client of another release) is trusted, but it enters the key: a client
 * that declares relu as writing its input does not get, or give, the
 * artifact of one that does not. */
Test(key, operator_schemas_enter_the_key) {
  gc_arena *a = gc_arena_new(0);
  const char *spec = "x: f32[4]\n"
                     "y = aten::relu(x): f32[4]\n"
                     "return y\n";
  gm_module *honest = tg_build(a, spec, NULL, 0);
  gm_module *liar = tg_build(a, spec, NULL, 0);
  honest->torch_version = liar->torch_version = "2.1.0";
  liar->operators[0]->schema = "aten::relu(Tensor(a!) self) -> Tensor(a!)";
  gc_key kh = key_default(a, honest, "honest"),
         kl = key_default(a, liar, "liar");
  cr_assert(!same_key(kh, kl));
  cr_assert(memcmp(kh.part[GC_KEY_GRAPH], kl.part[GC_KEY_GRAPH], 32) != 0);
  cr_assert(memcmp(kh.part[GC_KEY_TARGET], kl.part[GC_KEY_TARGET], 32) == 0);
  /* Blanks do not matter: schemas are hashed as torch prints them. */
  liar->operators[0]->schema = " aten::relu(Tensor  self)  ->  Tensor";
  cr_assert(same_key(kh, key_default(a, liar, "blanks")));
  /* An operator in the table that no node uses does not matter either. */
  gm_module *extra =
      tg_build(a,
               "op myns::unused myns::unused(Tensor x) -> Tensor\n"
               "x: f32[4]\n"
               "y = aten::relu(x): f32[4]\n"
               "return y\n",
               NULL, 0);
  extra->torch_version = "2.1.0";
  cr_assert(same_key(kh, key_default(a, extra, "unused operator")));
  gc_arena_free(a);
}
