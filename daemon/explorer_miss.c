/*
 * explorer_miss.c: why a request missed, in words.
 *
 * A miss is explained against the nearest cached program "of the same
 * graph": first as Explain finds it (store.c, store_nearest: the same
 * graph component, fewest other components differing), else, because a
 * graph's component covers its nodes' output shapes and so changes with
 * its input shapes, the most recently used program whose kept request has
 * the same operators in the same order (the summary's "ops" digest,
 * explorer_keep). The key components that differ are then itemized from
 * the two kept requests: which input, which dimension, dtype, stride,
 * requires_grad or storage sharing; which option; the client's torch
 * version or target; the compiler build. When a request was not kept,
 * the component names are all there is to say.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/explore.h"
#include "compiled/v1/artifact.pb-c.h"
#include "compiler/strmap.h"
#include "daemon/explorer_internal.h"
#include "daemon/store.h"

#define MAX_ITEMS 24 /* differences itemized */
#define SCAN 1000    /* entries looked at for the same operators */

/* ---- the nearest program ---- */

static int component_of(const char *name) {
  for (int c = 0; c < GC_KEY_NCOMPONENTS; c++)
    if (!strcmp(name, gc_key_component_name((gc_key_component)c)))
      return c;
  return -1;
}

/* Components of info that differ from k's; their names into names[]. */
static int differ(const gc_key *k, const cache_info *info, const char **names) {
  int n = 0;
  for (int c = 0; c < GC_KEY_NCOMPONENTS; c++) {
    bool same = false;
    for (int p = 0; p < info->nparts; p++)
      if (component_of(info->parts[p].name) == c)
        same = !memcmp(info->parts[p].digest, k->part[c], GC_DIGEST_LEN);
    if (!same)
      names[n++] = gc_key_component_name((gc_key_component)c);
  }
  return n;
}

typedef struct same_ops {
  const char *ops;        /* the digest to match */
  const uint8_t *exclude; /* the program itself */
  bool found;
  uint8_t key[GC_DIGEST_LEN];
} same_ops;

static int match_ops(const cache_info *info, const char *summary, void *arg) {
  same_ops *s = arg;
  if (!summary || (s->exclude && !memcmp(info->key, s->exclude, GC_DIGEST_LEN)))
    return 0;
  json_t *j = json_loads(summary, 0, NULL);
  const char *ops = json_string_value(json_object_get(j, "ops"));
  bool hit = ops && !strcmp(ops, s->ops);
  json_decref(j);
  if (hit) {
    s->found = true;
    memcpy(s->key, info->key, GC_DIGEST_LEN);
  }
  return hit;
}

/* ---- itemizing ---- */

typedef struct items {
  json_t *list;
  int n;
} items;

static void item(items *it, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void item(items *it, const char *component, const char *fmt, ...) {
  if (it->n++ >= MAX_ITEMS)
    return;
  char text[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  json_array_append_new(it->list, json_pack("{s:s,s:o}", "component", component,
                                            "what", x_str(text)));
}

/* A SymInt as text ("8", "s0*2"). */
static void symint(const Compiled__V1__SymInt *s, char *out, size_t n) {
  if (!s)
    snprintf(out, n, "?");
  else if (s->kind_case == COMPILED__V1__SYM_INT__KIND_AS_INT)
    snprintf(out, n, "%lld", (long long)s->as_int);
  else if (s->kind_case == COMPILED__V1__SYM_INT__KIND_AS_EXPR && s->as_expr)
    snprintf(out, n, "%.60s", s->as_expr->expr);
  else
    snprintf(out, n, "?");
}

static const char *dtype_name(int t) {
  return gc_dtype_name((gc_dtype)t);
}

/* One input of a request: its name (the value's, and the module path of a
 * parameter) and its metadata. */
typedef struct input {
  char name[200];
  const Compiled__V1__InputSpec *spec;
  const Compiled__V1__TensorMeta *meta; /* NULL: not a tensor */
} input;

static input *inputs_of(gc_arena *a, const Compiled__V1__CompileRequest *r,
                        int *n) {
  const Compiled__V1__Graph *g = r->graph ? r->graph->graph : NULL;
  *n = 0;
  if (!g)
    return NULL;
  gc_strmap values;
  if (gc_strmap_init(&values, a, g->n_tensor_values) != 0)
    return NULL;
  for (size_t i = 0; i < g->n_tensor_values; i++)
    if (g->tensor_values[i]->name)
      gc_strmap_put(&values, g->tensor_values[i]->name,
                    g->tensor_values[i]->meta, NULL);
  input *in = gc_arena_calloc(a, g->n_inputs + 1, sizeof *in);
  if (!in)
    return NULL;
  for (size_t i = 0; i < g->n_inputs; i++) {
    const Compiled__V1__InputSpec *s = g->inputs[i];
    in[i].spec = s;
    const char *vn = NULL;
    if (s->arg && s->arg->kind_case == COMPILED__V1__ARGUMENT__KIND_AS_TENSOR &&
        s->arg->as_tensor) {
      vn = s->arg->as_tensor->name;
      in[i].meta = gc_strmap_get(&values, vn ? vn : "");
    }
    if (s->target && *s->target)
      snprintf(in[i].name, sizeof in[i].name, "%.80s, %.100s", vn ? vn : "?",
               s->target);
    else
      snprintf(in[i].name, sizeof in[i].name, "%.180s", vn ? vn : "?");
  }
  *n = (int)g->n_inputs;
  return in;
}

static void compare_meta(items *it, int i, const input *a, const input *b) {
  const Compiled__V1__TensorMeta *x = a->meta, *y = b->meta;
  if (!x || !y) {
    if (!x != !y)
      item(it, "inputs", "input %d (%s) is %s here, %s in the cached program",
           i, a->name, x ? "a tensor" : "not a tensor",
           y ? "a tensor" : "not a tensor");
    return;
  }
  if (x->dtype != y->dtype)
    item(it, "inputs", "input %d (%s): dtype %s, the cached program's %s", i,
         a->name, dtype_name(x->dtype), dtype_name(y->dtype));
  if (x->n_sizes != y->n_sizes) {
    item(it, "inputs",
         "input %d (%s): %zu dimensions, the cached program's %zu", i, a->name,
         x->n_sizes, y->n_sizes);
    return;
  }
  for (size_t k = 0; k < x->n_sizes; k++) {
    char s1[80], s2[80];
    symint(x->sizes[k], s1, sizeof s1);
    symint(y->sizes[k], s2, sizeof s2);
    if (strcmp(s1, s2))
      item(it, "inputs",
           "input %d (%s): dimension %zu is %s, the cached program's is %s", i,
           a->name, k, s1, s2);
  }
  for (size_t k = 0; k < x->n_strides && k < y->n_strides; k++) {
    char s1[80], s2[80];
    symint(x->strides[k], s1, sizeof s1);
    symint(y->strides[k], s2, sizeof s2);
    if (strcmp(s1, s2))
      item(it, "inputs",
           "input %d (%s): the stride of dimension %zu is %s, the cached "
           "program's %s",
           i, a->name, k, s1, s2);
  }
  char o1[80], o2[80];
  symint(x->storage_offset, o1, sizeof o1);
  symint(y->storage_offset, o2, sizeof o2);
  if (x->storage_offset && y->storage_offset && strcmp(o1, o2))
    item(it, "inputs",
         "input %d (%s): storage offset %s, the cached program's %s", i,
         a->name, o1, o2);
  if (x->requires_grad != y->requires_grad)
    item(it, "inputs",
         "input %d (%s): requires_grad is %s, in the cached program %s", i,
         a->name, x->requires_grad ? "true" : "false",
         y->requires_grad ? "true" : "false");
  const char *d1 = x->device ? x->device->type : "",
             *d2 = y->device ? y->device->type : "";
  if (strcmp(d1 ? d1 : "", d2 ? d2 : ""))
    item(it, "inputs",
         "input %d (%s): device %.40s, the cached program's %.40s", i, a->name,
         d1 ? d1 : "", d2 ? d2 : "");
  if (x->layout != y->layout)
    item(it, "inputs", "input %d (%s): another layout", i, a->name);
}

static void compare_inputs(items *it, gc_arena *a,
                           const Compiled__V1__CompileRequest *r,
                           const Compiled__V1__CompileRequest *c) {
  int n1, n2;
  input *x = inputs_of(a, r, &n1), *y = inputs_of(a, c, &n2);
  int before = it->n;
  if (n1 != n2)
    item(it, "inputs", "%d inputs, the cached program has %d", n1, n2);
  for (int i = 0; x && y && i < n1 && i < n2; i++) {
    if (x[i].spec->kind != y[i].spec->kind)
      item(it, "inputs", "input %d (%s) is of another kind (%d, cached %d)", i,
           x[i].name, (int)x[i].spec->kind, (int)y[i].spec->kind);
    compare_meta(it, i, &x[i], &y[i]);
  }
  const Compiled__V1__Graph *g1 = r->graph->graph, *g2 = c->graph->graph;
  if (g1 && g2 && g1->n_storage_groups != g2->n_storage_groups)
    item(it, "inputs",
         "%zu groups of inputs share storage, in the cached program %zu",
         g1->n_storage_groups, g2->n_storage_groups);
  if (it->n == before)
    item(it, "inputs",
         "the inputs' metadata differ in a way not itemized here (how inputs "
         "share storage, or a literal input's value)");
}

static void compare_options(items *it, const Compiled__V1__CompileRequest *r,
                            const Compiled__V1__CompileRequest *c) {
  Compiled__V1__CompileOptions none = COMPILED__V1__COMPILE_OPTIONS__INIT;
  const Compiled__V1__CompileOptions *x = r->options ? r->options : &none,
                                     *y = c->options ? c->options : &none;
  int before = it->n;
  if (x->opt_level != y->opt_level)
    item(it, "options", "opt_level %d, the cached program's %d",
         (int)x->opt_level, (int)y->opt_level);
  if (x->mode != y->mode)
    item(it, "options", "mode %s, the cached program's %s",
         x->mode == COMPILED__V1__MODE__MODE_TRAINING ? "training"
                                                      : "inference",
         y->mode == COMPILED__V1__MODE__MODE_TRAINING ? "training"
                                                      : "inference");
  if (x->return_input_mutations != y->return_input_mutations)
    item(it, "options", "return_input_mutations %s, the cached program's %s",
         x->return_input_mutations ? "on" : "off",
         y->return_input_mutations ? "on" : "off");
  if (x->separate_temporaries != y->separate_temporaries)
    item(it, "options", "separate_temporaries %s, the cached program's %s",
         x->separate_temporaries ? "on" : "off",
         y->separate_temporaries ? "on" : "off");
  if (x->eager_random != y->eager_random)
    item(it, "options", "eager_random %s, the cached program's %s",
         x->eager_random ? "on" : "off", y->eager_random ? "on" : "off");
  if (it->n == before)
    item(it, "options", "the compile options differ");
}

static void compare_target(items *it, const Compiled__V1__CompileRequest *r,
                           const Compiled__V1__CompileRequest *c) {
  const char *t1 = r->graph->torch_version, *t2 = c->graph->torch_version;
  int before = it->n;
  if (strcmp(t1 ? t1 : "", t2 ? t2 : ""))
    item(it, "target",
         "the client's torch is %.60s, the cached program's %.60s",
         t1 ? t1 : "", t2 ? t2 : "");
  const char *a1 = r->target && r->target->arch ? r->target->arch : "",
             *a2 = c->target && c->target->arch ? c->target->arch : "";
  if (strcmp(a1, a2))
    item(it, "target",
         "the client asked for arch '%.60s', the cached "
         "program for '%.60s'",
         a1, a2);
  size_t n1 = r->target ? r->target->n_isa : 0,
         n2 = c->target ? c->target->n_isa : 0;
  bool isa = n1 != n2;
  for (size_t i = 0; !isa && i < n1; i++)
    isa = strcmp(r->target->isa[i], c->target->isa[i]) != 0;
  if (isa)
    item(it, "target",
         "the client asked for other ISA features (%zu, the "
         "cached program %zu)",
         n1, n2);
  if (it->n == before)
    item(it, "target",
         "this daemon's target differs from the one the cached program was "
         "built for: the machine, the C compiler or its flags");
}

/* The compiler build an entry's artifact was made by ("" if unknown). */
static void build_of(cache_conn *conn, const uint8_t *key, char *out,
                     size_t n) {
  uint8_t *data = NULL;
  size_t len = 0;
  cache_info info;
  cache_error cerr;
  out[0] = '\0';
  if (cache_peek(conn, key, &data, &len, &info, &cerr) != 0)
    return;
  Compiled__V1__Artifact *a = compiled__v1__artifact__unpack(NULL, len, data);
  free(data);
  if (a && a->compiler_build_id)
    snprintf(out, n, "%.40s", a->compiler_build_id);
  if (a)
    compiled__v1__artifact__free_unpacked(a, NULL);
}

/* ---- the explanation ---- */

static const char BY_GRAPH[] = "the same graph component";
static const char BY_OPS[] = "the same operators in the same order (its graph "
                             "component differs, as it covers every node's "
                             "output shape)";

/* The nearest cached program to k (never `exclude`, may be NULL) into
 * *near and the components that differ into names[]: by the graph
 * component, else by the operators' digest `ops` (may be NULL); then the
 * differences itemized into it against request `mine` (may be NULL: not
 * kept). Returns how many components differ; -1 when no program is near. */
static int compare(daemon_ctx *d, cache_conn *conn, gc_arena *a,
                   const gc_key *k, const uint8_t *exclude,
                   const Compiled__V1__CompileRequest *mine, const char *ops,
                   cache_info *near, const char **names, const char **how,
                   items *it) {
  cache_error cerr;
  int n = store_nearest(conn, k, exclude, near, names);
  *how = BY_GRAPH;
  if (n < 0 && ops && conn) { /* the same operators, other shapes */
    same_ops s = {.ops = ops, .exclude = exclude};
    cache_browse(conn, CACHE_BY_LAST_USED, 0, SCAN, match_ops, &s, &cerr);
    if (s.found && cache_info_get(conn, s.key, near, &cerr) == 0) {
      n = differ(k, near, names);
      *how = BY_OPS;
    }
  }
  if (n < 0)
    return n;
  Compiled__V1__CompileRequest *theirs = NULL;
  char why[400];
  bool near_kept =
      mine && a &&
      xp_load_request(d, conn, a, near->key, &theirs, why, sizeof why) == 0;
  /* the most telling first: which input, option, target; the graph's
   * own component last (it follows from input shapes) */
  static const char *const order[] = {"inputs",   "options", "target",
                                      "compiler", "schema",  "graph"};
  for (int o = 0; o < 6; o++) {
    const char *c = NULL;
    for (int i = 0; i < n; i++)
      if (!strcmp(names[i], order[o]))
        c = names[i];
    if (!c)
      continue;
    if (!strcmp(c, "compiler")) {
      char b1[48], b2[48];
      build_of(conn, k->key, b1, sizeof b1);
      build_of(conn, near->key, b2, sizeof b2);
      item(it, c, "compiled by compiler build %s, the cached program by %s",
           b1[0] ? b1 : gc_build_id(), b2[0] ? b2 : "another");
    } else if (!strcmp(c, "schema")) {
      item(it, c, "another major version of the graph schema");
    } else if (!near_kept) {
      item(it, c,
           "the %s differ (the requests were not both kept, so not "
           "itemized)",
           c);
    } else if (!strcmp(c, "inputs")) {
      compare_inputs(it, a, mine, theirs);
    } else if (!strcmp(c, "options")) {
      compare_options(it, mine, theirs);
    } else if (!strcmp(c, "target")) {
      compare_target(it, mine, theirs);
    } else if (!strcmp(c, "graph")) {
      item(it, c,
           "the graph's nodes differ in their output shapes, dtypes or "
           "literals (the operators are the same)");
    }
  }
  if (it->n > MAX_ITEMS)
    item(it, "more", "... and %d more differences", it->n - MAX_ITEMS);
  return n;
}

json_t *xm_explain(daemon_ctx *d, const uint8_t key[GC_DIGEST_LEN],
                   const uint8_t (*parts)[GC_DIGEST_LEN], unsigned *status) {
  cache_conn *conn = daemon_conn(d);
  cache_error cerr;
  gc_key k;
  memset(&k, 0, sizeof k);
  memcpy(k.key, key, GC_DIGEST_LEN);
  cache_info self;
  bool cached = conn && cache_info_get(conn, key, &self, &cerr) == 0;
  if (parts) {
    memcpy(k.part, parts, sizeof k.part);
  } else if (cached) {
    for (int p = 0; p < self.nparts; p++) {
      int c = component_of(self.parts[p].name);
      if (c >= 0)
        memcpy(k.part[c], self.parts[p].digest, GC_DIGEST_LEN);
    }
  } else {
    *status = MHD_HTTP_NOT_FOUND;
    return x_error("not_found", "no such program in the cache, and the "
                                "request's key components are not known");
  }
  gc_arena *a = memory_arena(d, SIZE_MAX);
  Compiled__V1__CompileRequest *mine = NULL;
  char why[400];
  bool kept =
      a && xp_load_request(d, conn, a, key, &mine, why, sizeof why) == 0;
  json_t *sj = NULL; /* the kept request's summary: its "ops" */
  if (kept) {
    char *summary = NULL;
    if (cache_source_get(conn, key, NULL, NULL, &summary, &cerr) == 0)
      sj = json_loads(summary, 0, NULL);
    free(summary);
  }
  const char *names[GC_KEY_NCOMPONENTS];
  cache_info near;
  const char *how;
  items it = {.list = json_array()};
  int n = compare(d, conn, a, &k, key, kept ? mine : NULL,
                  json_string_value(json_object_get(sj, "ops")), &near, names,
                  &how, &it);
  json_decref(sj);
  json_t *j = json_pack("{s:o,s:b}", "key", x_key(key), "cached", cached);
  if (n < 0) {
    json_decref(it.list);
    json_object_set_new(j, "nearest", json_null());
    json_object_set_new(j, "differences", json_array());
    json_object_set_new(
        j, "summary",
        json_string("no cached program has this graph: it is new to this "
                    "daemon (another model, or the code that builds the "
                    "graph changed)"));
    memory_free_arena(d, a);
    return j;
  }
  json_t *diff = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(diff, json_string(names[i]));
  char nhex[GC_HEX_LEN];
  gc_digest_hex(near.key, nhex);
  const char *first = json_array_size(it.list)
                          ? json_string_value(json_object_get(
                                json_array_get(it.list, 0), "what"))
                          : "";
  json_t *sum = json_sprintf("miss: %s%s (against the nearest cached "
                             "program, %.16s)",
                             first, it.n > 1 ? "; and more below" : "", nhex);
  json_object_set_new(j, "nearest", x_entry(&near, NULL));
  json_object_set_new(j, "found_by", json_string(how));
  json_object_set_new(j, "differing", diff);
  json_object_set_new(j, "differences", it.list);
  json_object_set_new(j, "summary", sum ? sum : json_null());
  memory_free_arena(d, a);
  return j;
}

int explorer_explain_miss(daemon_ctx *d, cache_conn *conn, gc_arena *a,
                          const gc_key *k,
                          const Compiled__V1__CompileRequest *req,
                          cache_info *near, const char **names, bool *by_ops,
                          char ***out, size_t *nout) {
  *out = NULL;
  *nout = 0;
  *by_ops = false;
  /* requests are kept (with their operators' digest) only with the
   * explorer on */
  char ops[X_OPS_LEN + 1];
  bool have_ops =
      d->cfg.explorer && req->graph && x_ops_digest(req->graph->graph, ops);
  const char *how;
  items it = {.list = json_array()};
  int n = compare(d, conn, a, k, NULL, req, have_ops ? ops : NULL, near, names,
                  &how, &it);
  *by_ops = n >= 0 && how == BY_OPS;
  size_t m = json_array_size(it.list);
  char **list = m ? gc_arena_calloc(a, m, sizeof *list) : NULL;
  for (size_t i = 0; list && i < m; i++) {
    const char *w =
        json_string_value(json_object_get(json_array_get(it.list, i), "what"));
    list[i] = gc_arena_strndup(a, w ? w : "", strlen(w ? w : ""));
    if (list[i])
      (*nout)++;
  }
  *out = list;
  json_decref(it.list);
  return n;
}
