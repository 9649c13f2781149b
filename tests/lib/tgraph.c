/*
 * tgraph.c: the little graph language of tgraph.h.
 *
 * A line-oriented parser that fills protobuf-c structs in an arena. It is
 * test scaffolding: it reports what it does not understand and stops, and
 * it never second-guesses the graph (a test may build invalid graphs on
 * purpose, e.g. to check the validator).
 */
#include "tests/lib/tgraph.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/text.h"
#include "compiler/schema.h"
#include "tests/lib/testutil.h"

typedef Compiled__V1__Argument pb_arg;

#define MAXN 512

typedef struct builder {
  gc_arena *a;
  Compiled__V1__GraphModule *m;
  Compiled__V1__Graph *g;
  /* growing arrays, copied into the message at the end */
  Compiled__V1__InputSpec *inputs[MAXN];
  int ninputs;
  Compiled__V1__Node *nodes[MAXN];
  int nnodes;
  Compiled__V1__TensorValue *values[MAXN];
  int nvalues;
  Compiled__V1__Operator *ops[MAXN];
  int nops;
  pb_arg *outputs[MAXN];
  int noutputs;
  int group_of[MAXN]; /* input index -> group, -1 */
  char *err;
  size_t errlen;
  int line;
} builder;

static int fail(builder *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(b->err, b->errlen, "tgraph line %d: ", b->line);
  vsnprintf(b->err + n, b->errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---- the torch schema dump, loaded once per process ---- */

static char *schema_text;

static const char *find_schema(const char *name) {
  if (!schema_text) {
    size_t len;
    uint8_t *data =
        tu_read(tu_path("compiler/data/torch-2.13-schemas.txt"), &len);
    schema_text = realloc(data, len + 1);
    schema_text[len] = '\0';
  }
  size_t n = strlen(name);
  for (const char *p = schema_text; p && *p;) {
    const char *nl = strchr(p, '\n');
    if (strncmp(p, name, n) == 0 && p[n] == '(') {
      static char line[8192];
      size_t l = nl ? (size_t)(nl - p) : strlen(p);
      if (l >= sizeof line)
        return NULL;
      memcpy(line, p, l);
      line[l] = '\0';
      return line;
    }
    p = nl ? nl + 1 : NULL;
  }
  return NULL;
}

static const char *op_schema(builder *b, const char *name) {
  for (int i = 0; i < b->nops; i++)
    if (strcmp(b->ops[i]->name, name) == 0)
      return b->ops[i]->schema;
  const char *s = find_schema(name);
  if (!s)
    return NULL;
  Compiled__V1__Operator *op = gc_arena_zalloc(b->a, sizeof *op);
  compiled__v1__operator__init(op);
  op->name = gc_arena_strdup(b->a, name);
  op->schema = gc_arena_strdup(b->a, s);
  b->ops[b->nops++] = op;
  return op->schema;
}

/* ---- small lexing helpers ---- */

/* Splits `s` at top-level commas (outside brackets, parens and quotes). */
static int split_top(char *s, char **parts, int max) {
  int n = 0, depth = 0, quote = 0;
  char *start = s;
  for (char *p = s;; p++) {
    if (*p == '"')
      quote = !quote;
    else if (!quote && (*p == '[' || *p == '('))
      depth++;
    else if (!quote && (*p == ']' || *p == ')'))
      depth--;
    if (*p == '\0' || (*p == ',' && depth == 0 && !quote)) {
      int end = *p == '\0';
      *p = '\0';
      char *t = text_trim(start);
      if (*t && n < max)
        parts[n++] = t;
      if (end)
        break;
      start = p + 1;
    }
  }
  return n;
}

static const struct {
  const char *name;
  int value;
} dtypes[] = {{"u8", 1},    {"uint8", 1},   {"i8", 2},         {"int8", 2},
              {"i16", 3},   {"int16", 3},   {"i32", 4},        {"int32", 4},
              {"i64", 5},   {"int64", 5},   {"f16", 7},        {"float16", 7},
              {"f32", 8},   {"float32", 8}, {"f64", 9},        {"float64", 9},
              {"c32", 10},  {"c64", 11},    {"complex64", 11}, {"c128", 12},
              {"bool", 13}, {"bf16", 14},   {"bfloat16", 14}};

static int dtype_of(const char *s) {
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (strcmp(dtypes[i].name, s) == 0)
      return dtypes[i].value;
  return -1;
}

static Compiled__V1__SymInt *symint(gc_arena *a, int64_t v) {
  Compiled__V1__SymInt *s = gc_arena_zalloc(a, sizeof *s);
  compiled__v1__sym_int__init(s);
  s->kind_case = COMPILED__V1__SYM_INT__KIND_AS_INT;
  s->as_int = v;
  return s;
}

/* A size, stride or offset item: an int ("4"), or a symbolic expression
 * with an optional hint ("s0", "s0=5", "2*s0+1=11"). */
static Compiled__V1__SymInt *symitem(gc_arena *a, const char *text) {
  char *t = gc_arena_strdup(a, text);
  t = text_trim(t);
  const char *p = *t == '-' ? t + 1 : t;
  bool numeric = *p != '\0';
  for (; *p; p++)
    numeric &= isdigit((unsigned char)*p) != 0;
  if (numeric)
    return symint(a, strtoll(t, NULL, 10));
  Compiled__V1__SymInt *s = gc_arena_zalloc(a, sizeof *s);
  compiled__v1__sym_int__init(s);
  s->kind_case = COMPILED__V1__SYM_INT__KIND_AS_EXPR;
  s->as_expr = gc_arena_zalloc(a, sizeof *s->as_expr);
  compiled__v1__sym_expr__init(s->as_expr);
  char *eq = strchr(t, '='); /* sizes hold no comparisons */
  if (eq) {
    *eq = '\0';
    s->as_expr->has_hint = 1;
    s->as_expr->hint = strtoll(eq + 1, NULL, 10);
  }
  s->as_expr->expr = text_trim(t);
  return s;
}

/* Parses "[4, s0, 2*s1=6]" into items (the text of each; NULL-free);
 * returns the count or -1. */
static int parse_items(char *s, char **out, int max) {
  s = text_trim(s);
  if (*s != '[')
    return -1;
  char *close = strchr(s, ']');
  if (!close)
    return -1;
  *close = '\0';
  char *parts[64];
  int n = split_top(s + 1, parts, 64);
  for (int i = 0; i < n && i < max; i++)
    out[i] = parts[i];
  return n;
}

/* The text of an item without its hint ("s0=5" -> "s0"). */
static const char *item_expr(gc_arena *a, const char *item) {
  const char *eq = strchr(item, '=');
  return eq ? gc_arena_strndup(a, item, (size_t)(eq - item)) : item;
}

/* "f32[4, 4] strides [..] offset N param group 0 ..." */
static Compiled__V1__TensorMeta *parse_meta(builder *b, char *s, int input) {
  Compiled__V1__TensorMeta *t = gc_arena_zalloc(b->a, sizeof *t);
  compiled__v1__tensor_meta__init(t);
  s = text_trim(s);
  char *br = strchr(s, '[');
  if (!br)
    return fail(b, "expected dtype[sizes] in '%s'", s), NULL;
  char dname[32];
  snprintf(dname, sizeof dname, "%.*s", (int)(br - s), s);
  int dt = dtype_of(text_trim(dname));
  if (dt < 0)
    return fail(b, "unknown dtype '%s'", dname), NULL;
  t->dtype = (Compiled__V1__ScalarType)dt;
  char *close = strchr(br, ']');
  if (!close)
    return fail(b, "missing ']'"), NULL;
  char sizes_text[256];
  snprintf(sizes_text, sizeof sizes_text, "%.*s", (int)(close - br + 1), br);
  char *sizes[64], *strides[64] = {NULL};
  int rank = parse_items(sizes_text, sizes, 64);
  if (rank < 0)
    return fail(b, "bad sizes"), NULL;
  /* contiguous strides: the product of the later sizes (an expression
   * when one of them is symbolic) */
  int64_t st = 1;
  const char *sym = NULL;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] =
        sym ? (st == 1 ? gc_arena_strdup(b->a, sym)
                       : gc_arena_printf(b->a, "%lld*%s", (long long)st, sym))
            : gc_arena_printf(b->a, "%lld", (long long)st);
    const char *it = item_expr(b->a, sizes[i]);
    char *end;
    long long v = strtoll(it, &end, 10);
    if (*text_trim(end) == '\0' && end != it)
      /* Wrapping on purpose: tests build tensors whose sizes overflow. */
      st = (int64_t)((uint64_t)st * (uint64_t)(v > 0 ? v : 1));
    else
      sym = sym ? gc_arena_printf(b->a, "%s*(%s)", sym, it)
                : gc_arena_printf(b->a, "(%s)", it);
  }
  char *rest = close + 1;
  char *sp = strstr(rest, "strides");
  if (sp) {
    char *tmp = gc_arena_strdup(b->a, sp + 7);
    char *e = strchr(tmp, ']');
    if (e)
      e[1] = '\0';
    if (parse_items(tmp, strides, 64) != rank)
      return fail(b, "strides do not match the rank"), NULL;
  }
  t->n_sizes = t->n_strides = (size_t)rank;
  t->sizes = gc_arena_calloc(b->a, (size_t)rank + 1, sizeof *t->sizes);
  t->strides = gc_arena_calloc(b->a, (size_t)rank + 1, sizeof *t->strides);
  for (int i = 0; i < rank; i++) {
    t->sizes[i] = symitem(b->a, sizes[i]);
    t->strides[i] = symitem(b->a, strides[i]);
  }
  char *off = strstr(rest, "offset");
  if (off) {
    char tmp[128];
    if (sscanf(off + 6, " %127s", tmp) == 1)
      t->storage_offset = symitem(b->a, tmp);
  }
  t->device = gc_arena_zalloc(b->a, sizeof *t->device);
  compiled__v1__device__init(t->device);
  t->device->type = "cpu";
  char *dev = strstr(rest, "device ");
  if (dev) {
    char tmp[64];
    sscanf(dev + 7, "%63s", tmp);
    char *colon = strchr(tmp, ':');
    if (colon) {
      *colon = '\0';
      t->device->has_index = 1;
      t->device->index = atoi(colon + 1);
    }
    t->device->type = gc_arena_strdup(b->a, tmp);
  }
  t->layout = COMPILED__V1__LAYOUT__LAYOUT_STRIDED;
  t->requires_grad = strstr(rest, "grad") != NULL;
  if (input >= 0) {
    char *grp = strstr(rest, "group");
    b->group_of[input] = grp ? atoi(grp + 5) : -1;
  }
  return t;
}

static Compiled__V1__TensorValue *find_value(builder *b, const char *name) {
  for (int i = 0; i < b->nvalues; i++)
    if (strcmp(b->values[i]->name, name) == 0)
      return b->values[i];
  return NULL;
}

static void add_value(builder *b, const char *name,
                      Compiled__V1__TensorMeta *meta) {
  Compiled__V1__TensorValue *v = gc_arena_zalloc(b->a, sizeof *v);
  compiled__v1__tensor_value__init(v);
  v->name = gc_arena_strdup(b->a, name);
  v->meta = meta;
  b->values[b->nvalues++] = v;
}

static pb_arg *new_arg(builder *b) {
  pb_arg *x = gc_arena_zalloc(b->a, sizeof *x);
  compiled__v1__argument__init(x);
  return x;
}

static Compiled__V1__TensorArgument *tensor_ref(builder *b, const char *name) {
  Compiled__V1__TensorArgument *t = gc_arena_zalloc(b->a, sizeof *t);
  compiled__v1__tensor_argument__init(t);
  t->name = gc_arena_strdup(b->a, name);
  return t;
}

static int is_number(const char *s) {
  if (*s == '-' || *s == '+')
    s++;
  return isdigit((unsigned char)*s) ||
         (*s == '.' && isdigit((unsigned char)s[1])) || strcmp(s, "inf") == 0 ||
         strcmp(s, "nan") == 0;
}

static int is_float_text(const char *s) {
  return strpbrk(s, ".eE") != NULL || strstr(s, "inf") != NULL ||
         strstr(s, "nan") != NULL;
}

static pb_arg *parse_value(builder *b, char *s);

static pb_arg *parse_list(builder *b, char *s) {
  char *close = strrchr(s, ']');
  if (!close)
    return fail(b, "missing ']'"), NULL;
  *close = '\0';
  char *parts[256];
  int n = split_top(s + 1, parts, 256);
  pb_arg *x = new_arg(b);
  int floats = 0, tensors = 0, nones = 0, bools = 0;
  for (int i = 0; i < n; i++) {
    if (strcmp(parts[i], "None") == 0)
      nones++;
    else if (strcmp(parts[i], "True") == 0 || strcmp(parts[i], "False") == 0)
      bools++;
    else if (is_number(parts[i]))
      floats += is_float_text(parts[i]);
    else
      tensors++;
  }
  if (tensors || nones) {
    if (nones) {
      Compiled__V1__OptionalTensorList *l = gc_arena_zalloc(b->a, sizeof *l);
      compiled__v1__optional_tensor_list__init(l);
      l->n_items = (size_t)n;
      l->items = gc_arena_calloc(b->a, (size_t)n + 1, sizeof *l->items);
      for (int i = 0; i < n; i++) {
        Compiled__V1__OptionalTensorArgument *o =
            gc_arena_zalloc(b->a, sizeof *o);
        compiled__v1__optional_tensor_argument__init(o);
        if (strcmp(parts[i], "None") == 0) {
          o->kind_case = COMPILED__V1__OPTIONAL_TENSOR_ARGUMENT__KIND_AS_NONE;
          o->as_none = 1;
        } else {
          o->kind_case = COMPILED__V1__OPTIONAL_TENSOR_ARGUMENT__KIND_AS_TENSOR;
          o->as_tensor = tensor_ref(b, parts[i]);
        }
        l->items[i] = o;
      }
      x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_OPTIONAL_TENSORS;
      x->as_optional_tensors = l;
      return x;
    }
    Compiled__V1__TensorList *l = gc_arena_zalloc(b->a, sizeof *l);
    compiled__v1__tensor_list__init(l);
    l->n_items = (size_t)n;
    l->items = gc_arena_calloc(b->a, (size_t)n + 1, sizeof *l->items);
    for (int i = 0; i < n; i++)
      l->items[i] = tensor_ref(b, parts[i]);
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_TENSORS;
    x->as_tensors = l;
    return x;
  }
  if (bools) {
    Compiled__V1__BoolList *l = gc_arena_zalloc(b->a, sizeof *l);
    compiled__v1__bool_list__init(l);
    l->n_items = (size_t)n;
    l->items = gc_arena_calloc(b->a, (size_t)n + 1, sizeof *l->items);
    for (int i = 0; i < n; i++)
      l->items[i] = strcmp(parts[i], "True") == 0;
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_BOOLS;
    x->as_bools = l;
    return x;
  }
  if (floats) {
    Compiled__V1__FloatList *l = gc_arena_zalloc(b->a, sizeof *l);
    compiled__v1__float_list__init(l);
    l->n_items = (size_t)n;
    l->items = gc_arena_calloc(b->a, (size_t)n + 1, sizeof *l->items);
    for (int i = 0; i < n; i++)
      l->items[i] = strtod(parts[i], NULL);
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_FLOATS;
    x->as_floats = l;
    return x;
  }
  Compiled__V1__IntList *l = gc_arena_zalloc(b->a, sizeof *l);
  compiled__v1__int_list__init(l);
  l->n_items = (size_t)n;
  l->items = gc_arena_calloc(b->a, (size_t)n + 1, sizeof *l->items);
  for (int i = 0; i < n; i++)
    l->items[i] = strtoll(parts[i], NULL, 10);
  x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_INTS;
  x->as_ints = l;
  return x;
}

static pb_arg *parse_value(builder *b, char *s) {
  s = text_trim(s);
  pb_arg *x = new_arg(b);
  if (*s == '[')
    return parse_list(b, s);
  if (*s == '"') {
    char *end = strrchr(s, '"');
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_STRING;
    x->as_string =
        gc_arena_strndup(b->a, s + 1, end > s ? (size_t)(end - s - 1) : 0);
  } else if (strcmp(s, "None") == 0) {
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_NONE;
    x->as_none = 1;
  } else if (strcmp(s, "True") == 0 || strcmp(s, "False") == 0) {
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_BOOL;
    x->as_bool = s[0] == 'T';
  } else if (strncmp(s, "dtype:", 6) == 0) {
    int dt = dtype_of(s + 6);
    if (dt < 0)
      return fail(b, "unknown dtype '%s'", s + 6), NULL;
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_SCALAR_TYPE;
    x->as_scalar_type = (Compiled__V1__ScalarType)dt;
  } else if (strncmp(s, "device:", 7) == 0) {
    Compiled__V1__Device *d = gc_arena_zalloc(b->a, sizeof *d);
    compiled__v1__device__init(d);
    d->type = gc_arena_strdup(b->a, s + 7);
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_DEVICE;
    x->as_device = d;
  } else if (is_number(s)) {
    if (is_float_text(s)) {
      x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_FLOAT;
      x->as_float = strtod(s, NULL);
    } else {
      x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_INT;
      x->as_int = strtoll(s, NULL, 10);
    }
  } else {
    x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_TENSOR;
    x->as_tensor = tensor_ref(b, s);
  }
  return x;
}

static int parse_input(builder *b, char *name, char *rest) {
  name = text_trim(name);
  int idx = b->ninputs;
  Compiled__V1__TensorMeta *meta = parse_meta(b, rest, idx);
  if (!meta)
    return -1;
  add_value(b, name, meta);
  Compiled__V1__InputSpec *in = gc_arena_zalloc(b->a, sizeof *in);
  compiled__v1__input_spec__init(in);
  in->kind =
      strstr(rest, "param")    ? COMPILED__V1__INPUT_KIND__INPUT_KIND_PARAMETER
      : strstr(rest, "buffer") ? COMPILED__V1__INPUT_KIND__INPUT_KIND_BUFFER
      : strstr(rest, "const")  ? COMPILED__V1__INPUT_KIND__INPUT_KIND_CONSTANT
                              : COMPILED__V1__INPUT_KIND__INPUT_KIND_USER_INPUT;
  if (in->kind != COMPILED__V1__INPUT_KIND__INPUT_KIND_USER_INPUT)
    in->target = gc_arena_printf(b->a, "mod.%s", name);
  in->arg = new_arg(b);
  in->arg->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_TENSOR;
  in->arg->as_tensor = tensor_ref(b, name);
  b->inputs[b->ninputs++] = in;
  return 0;
}

static int parse_node(builder *b, char *lhs, char *rhs) {
  rhs = text_trim(rhs);
  char *open = strchr(rhs, '(');
  if (!open)
    return fail(b, "expected target(args)");
  *open = '\0';
  const char *target = text_trim(rhs);
  const char *stext = op_schema(b, target);
  if (!stext)
    return fail(b, "no schema for '%s' (add an 'op' line)", target);
  gc_schema *schema;
  if (gc_schema_parse(b->a, stext, &schema, NULL) != 0)
    return fail(b, "schema of '%s' does not parse", target);
  /* find the matching ')' */
  char *p = open + 1;
  int depth = 1, quote = 0;
  for (; *p && depth; p++) {
    if (*p == '"')
      quote = !quote;
    else if (!quote && (*p == '(' || *p == '['))
      depth++;
    else if (!quote && (*p == ')' || *p == ']'))
      depth--;
  }
  if (depth)
    return fail(b, "missing ')'");
  p[-1] = '\0';
  char *meta_text = strchr(p, ':');
  Compiled__V1__Node *n = gc_arena_zalloc(b->a, sizeof *n);
  compiled__v1__node__init(n);
  n->target = gc_arena_strdup(b->a, target);
  char *parts[64];
  int nargs = split_top(open + 1, parts, 64);
  n->inputs = gc_arena_calloc(b->a, (size_t)nargs + 1, sizeof *n->inputs);
  for (int i = 0; i < nargs; i++) {
    Compiled__V1__NamedArgument *na = gc_arena_zalloc(b->a, sizeof *na);
    compiled__v1__named_argument__init(na);
    char *eq = parts[i];
    while (*eq && (isalnum((unsigned char)*eq) || *eq == '_'))
      eq++;
    if (*eq == '=' && eq != parts[i]) {
      *eq = '\0';
      na->name = gc_arena_strdup(b->a, parts[i]);
      na->kind = COMPILED__V1__ARGUMENT_KIND__ARGUMENT_KIND_KEYWORD;
      na->arg = parse_value(b, eq + 1);
    } else {
      na->name = i < schema->nargs ? (char *)schema->args[i].name
                                   : gc_arena_printf(b->a, "arg%d", i);
      na->kind = COMPILED__V1__ARGUMENT_KIND__ARGUMENT_KIND_POSITIONAL;
      na->arg = parse_value(b, parts[i]);
    }
    if (!na->arg)
      return -1;
    n->inputs[n->n_inputs++] = na;
  }
  /* outputs: one metadata for all, or one per output separated by ';'
   * (the last repeated) */
  lhs = text_trim(lhs);
  Compiled__V1__TensorMeta *metas[64] = {NULL}, *meta = NULL;
  int nmetas = 0;
  for (char *mt = meta_text ? meta_text + 1 : NULL; mt && nmetas < 64;) {
    char *semi = strchr(mt, ';');
    if (semi)
      *semi = '\0';
    if (!(metas[nmetas++] = parse_meta(b, mt, -1)))
      return -1;
    mt = semi ? semi + 1 : NULL;
  }
  meta = metas[0];
  n->outputs = gc_arena_calloc(b->a, 64, sizeof *n->outputs);
  if (*lhs == '[') {
    pb_arg *x = parse_list(b, lhs);
    if (!x)
      return -1;
    n->outputs[n->n_outputs++] = x;
    for (size_t i = 0; i < x->as_tensors->n_items; i++)
      add_value(b, x->as_tensors->items[i]->name, meta);
  } else if (*lhs) {
    char *outs[64];
    int nouts = split_top(lhs, outs, 64);
    for (int i = 0; i < nouts; i++) {
      pb_arg *x = new_arg(b);
      if (strcmp(outs[i], "_") == 0) {
        x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_NONE;
        x->as_none = 1;
      } else {
        x->kind_case = COMPILED__V1__ARGUMENT__KIND_AS_TENSOR;
        x->as_tensor = tensor_ref(b, outs[i]);
        if (!find_value(b, outs[i]))
          add_value(b, outs[i],
                    nmetas ? metas[i < nmetas ? i : nmetas - 1] : NULL);
      }
      n->outputs[n->n_outputs++] = x;
    }
  }
  if (n->n_outputs && !meta &&
      n->outputs[0]->kind_case != COMPILED__V1__ARGUMENT__KIND_AS_NONE)
    return fail(b, "node outputs need ': dtype[sizes]'");
  b->nodes[b->nnodes++] = n;
  return 0;
}

#define COPY_OUT(dst, ndst, src, nsrc)                                         \
  do {                                                                         \
    ndst = (size_t)(nsrc);                                                     \
    dst = gc_arena_calloc(b.a, (size_t)(nsrc) + 1, sizeof *(src));             \
    memcpy(dst, src, (size_t)(nsrc) * sizeof *(src));                          \
  } while (0)

Compiled__V1__GraphModule *tg_build(gc_arena *a, const char *spec, char *err,
                                    size_t errlen) {
  builder b = {.a = a, .err = err, .errlen = errlen};
  char *text = gc_arena_strdup(a, spec);
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    b.line++;
    line = text_trim(line);
    if (!*line || *line == '#')
      continue;
    if (strncmp(line, "op ", 3) == 0) {
      char *rest = text_trim(line + 3);
      char *sp = strchr(rest, ' ');
      if (!sp)
        return fail(&b, "op NAME SCHEMA"), NULL;
      *sp = '\0';
      Compiled__V1__Operator *op = gc_arena_zalloc(a, sizeof *op);
      compiled__v1__operator__init(op);
      op->name = gc_arena_strdup(a, rest);
      op->schema = gc_arena_strdup(a, text_trim(sp + 1));
      b.ops[b.nops++] = op;
      continue;
    }
    if (strncmp(line, "return", 6) == 0) {
      char *parts[64];
      int n = split_top(line + 6, parts, 64);
      for (int i = 0; i < n; i++)
        if (!(b.outputs[b.noutputs++] = parse_value(&b, parts[i])))
          return NULL;
      continue;
    }
    char *eq = strstr(line, " = ");
    if (eq && strstr(eq, "::")) {
      *eq = '\0';
      if (parse_node(&b, line, eq + 3))
        return NULL;
      continue;
    }
    char *colon = strchr(line, ':');
    if (!colon)
      return fail(&b, "cannot read '%s'", line), NULL;
    *colon = '\0';
    if (parse_input(&b, line, colon + 1))
      return NULL;
  }
  Compiled__V1__GraphModule *m = gc_arena_zalloc(a, sizeof *m);
  compiled__v1__graph_module__init(m);
  m->schema_version = gc_arena_zalloc(a, sizeof *m->schema_version);
  compiled__v1__schema_version__init(m->schema_version);
  m->schema_version->major = 1;
  m->torch_version = "2.13.0";
  m->producer = "tgraph";
  Compiled__V1__Graph *g = gc_arena_zalloc(a, sizeof *g);
  compiled__v1__graph__init(g);
  m->graph = g;
  COPY_OUT(g->inputs, g->n_inputs, b.inputs, b.ninputs);
  COPY_OUT(g->nodes, g->n_nodes, b.nodes, b.nnodes);
  COPY_OUT(g->tensor_values, g->n_tensor_values, b.values, b.nvalues);
  COPY_OUT(g->outputs, g->n_outputs, b.outputs, b.noutputs);
  COPY_OUT(m->operators, m->n_operators, b.ops, b.nops);
  /* storage groups */
  int maxg = -1;
  for (int i = 0; i < b.ninputs; i++)
    maxg = b.group_of[i] > maxg ? b.group_of[i] : maxg;
  if (maxg >= 0) {
    g->n_storage_groups = (size_t)maxg + 1;
    g->storage_groups =
        gc_arena_calloc(a, (size_t)maxg + 1, sizeof *g->storage_groups);
    for (int k = 0; k <= maxg; k++) {
      Compiled__V1__StorageGroup *sg = gc_arena_zalloc(a, sizeof *sg);
      compiled__v1__storage_group__init(sg);
      sg->inputs = gc_arena_calloc(a, (size_t)b.ninputs + 1, sizeof(int32_t));
      for (int i = 0; i < b.ninputs; i++)
        if (b.group_of[i] == k)
          sg->inputs[sg->n_inputs++] = i;
      g->storage_groups[k] = sg;
    }
  }
  return m;
}

uint8_t *tg_bytes(gc_arena *a, const char *spec, size_t *len) {
  char err[512];
  Compiled__V1__GraphModule *m = tg_build(a, spec, err, sizeof err);
  if (!m) {
    fprintf(stderr, "%s\n", err);
    abort();
  }
  *len = compiled__v1__graph_module__get_packed_size(m);
  uint8_t *buf = gc_arena_alloc(a, *len + 1);
  compiled__v1__graph_module__pack(m, buf);
  return buf;
}
