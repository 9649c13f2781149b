/*
 * schema_default.c: an argument's default, converted by its declared type
 * into a gc_arg (so an omitted argument and an explicit one compare and hash
 * alike): numbers, words (dtypes, memory formats, layouts by torch's names
 * and c10's numbers, translated to graph.proto's), devices, strings and
 * lists. See schema.c for the parser it is part of.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "compiled/v1/graph.pb-c.h"
#include "compiler/dtype.h"
#include "compiler/schema_internal.h"

/* ---- converting defaults ---- */

/* A name and the graph.proto number it stands for. */
typedef struct named {
  const char *name;
  int64_t value;
} named;

/* dtype names: torch's (float32), from dtype.h... */
static const named dtype_names[] = {
#define X(name, num, size, torch) {torch, num},
    GC_DTYPES(X)
#undef X
        {NULL, 0}};

/* ...the legacy short ones (torch.long) and c10's (Long, as C++ prints
 * them). Quantized types are 0: graph.proto has no number for them. */
// clang-format off
static const named dtype_aliases[] = {
    {"short", GC_DTYPE_INT16},     {"int", GC_DTYPE_INT32},
    {"long", GC_DTYPE_INT64},      {"half", GC_DTYPE_FLOAT16},
    {"float", GC_DTYPE_FLOAT32},   {"double", GC_DTYPE_FLOAT64},
    {"chalf", GC_DTYPE_COMPLEX32}, {"cfloat", GC_DTYPE_COMPLEX64},
    {"cdouble", GC_DTYPE_COMPLEX128},
    {"Byte", GC_DTYPE_UINT8},      {"Char", GC_DTYPE_INT8},
    {"Short", GC_DTYPE_INT16},     {"Int", GC_DTYPE_INT32},
    {"Long", GC_DTYPE_INT64},      {"Half", GC_DTYPE_FLOAT16},
    {"Float", GC_DTYPE_FLOAT32},   {"Double", GC_DTYPE_FLOAT64},
    {"ComplexHalf", GC_DTYPE_COMPLEX32},
    {"ComplexFloat", GC_DTYPE_COMPLEX64},
    {"ComplexDouble", GC_DTYPE_COMPLEX128},
    {"Bool", GC_DTYPE_BOOL},       {"BFloat16", GC_DTYPE_BFLOAT16},
    {"UInt16", GC_DTYPE_UINT16},
    {"qint8", GC_DTYPE_UNKNOWN},   {"quint8", GC_DTYPE_UNKNOWN},
    {"qint32", GC_DTYPE_UNKNOWN},  {"quint4x2", GC_DTYPE_UNKNOWN},
    {"quint2x4", GC_DTYPE_UNKNOWN},
    {"QInt8", GC_DTYPE_UNKNOWN},   {"QUInt8", GC_DTYPE_UNKNOWN},
    {"QInt32", GC_DTYPE_UNKNOWN},  {"QUInt4x2", GC_DTYPE_UNKNOWN},
    {"QUInt2x4", GC_DTYPE_UNKNOWN},
    {NULL, 0},
};
// clang-format on

/* c10::ScalarType numbers (what torch prints) in order: Byte, Char, Short,
 * Int, Long, Half, Float, Double, ComplexHalf, ComplexFloat, ComplexDouble,
 * Bool, QInt8, QUInt8, QInt32, BFloat16. Later ones have no proto number. */
static const int64_t c10_dtypes[] = {
    GC_DTYPE_UINT8,     GC_DTYPE_INT8,       GC_DTYPE_INT16,
    GC_DTYPE_INT32,     GC_DTYPE_INT64,      GC_DTYPE_FLOAT16,
    GC_DTYPE_FLOAT32,   GC_DTYPE_FLOAT64,    GC_DTYPE_COMPLEX32,
    GC_DTYPE_COMPLEX64, GC_DTYPE_COMPLEX128, GC_DTYPE_BOOL,
    GC_DTYPE_UNKNOWN,   GC_DTYPE_UNKNOWN,    GC_DTYPE_UNKNOWN,
    GC_DTYPE_BFLOAT16,
};

#define MF(x) COMPILED__V1__MEMORY_FORMAT__MEMORY_FORMAT_##x

static const named memory_format_names[] = {
    {"contiguous_format", MF(CONTIGUOUS)},
    {"preserve_format", MF(PRESERVE)},
    {"channels_last", MF(CHANNELS_LAST)},
    {"channels_last_3d", MF(CHANNELS_LAST_3D)},
    {NULL, 0}};

/* c10::MemoryFormat: Contiguous, Preserve, ChannelsLast, ChannelsLast3d. */
static const int64_t c10_memory_formats[] = {
    MF(CONTIGUOUS), MF(PRESERVE), MF(CHANNELS_LAST), MF(CHANNELS_LAST_3D)};

static const named layout_names[] = {{"strided", GC_LAYOUT_STRIDED},
                                     {"sparse_coo", GC_LAYOUT_SPARSE_COO},
                                     {"sparse_csr", GC_LAYOUT_SPARSE_CSR},
                                     {"sparse_csc", GC_LAYOUT_SPARSE_CSC},
                                     {"sparse_bsr", GC_LAYOUT_SPARSE_BSR},
                                     {"sparse_bsc", GC_LAYOUT_SPARSE_BSC},
                                     {"_mkldnn", GC_LAYOUT_MKLDNN},
                                     {"mkldnn", GC_LAYOUT_MKLDNN},
                                     {NULL, 0}};

/* c10::Layout: Strided, Sparse, SparseCsr, Mkldnn, SparseCsc, SparseBsr,
 * SparseBsc. */
static const int64_t c10_layouts[] = {
    GC_LAYOUT_STRIDED,    GC_LAYOUT_SPARSE_COO, GC_LAYOUT_SPARSE_CSR,
    GC_LAYOUT_MKLDNN,     GC_LAYOUT_SPARSE_CSC, GC_LAYOUT_SPARSE_BSR,
    GC_LAYOUT_SPARSE_BSC,
};

/* The value of the word `l` in `names`; false when it is not there. */
static bool lookup(const named *names, const literal *l, int64_t *v) {
  for (int i = 0; names && names[i].name; i++)
    if (sp_lit_is(l, names[i].name)) {
      *v = names[i].value;
      return true;
    }
  return false;
}

/* An enum default: a name of `names` or `aliases` (may be NULL), or a c10
 * number mapped by `c10` (n entries; past the end is `beyond`, or an error
 * when `beyond` < 0). */
static int convert_enum(parser *p, const literal *l, const named *names,
                        const named *aliases, const int64_t *c10, int64_t n,
                        int64_t beyond, gc_arg_kind kind, const char *type,
                        gc_arg *v) {
  v->kind = kind;
  if (l->kind == LIT_INT && l->i >= 0) {
    if (l->i < n) {
      v->i = c10[l->i];
      return 0;
    }
    if (beyond >= 0) {
      v->i = beyond;
      return 0;
    }
    return sp_fail_at(p, l->at, "%s %lld does not exist", type,
                      (long long)l->i);
  }
  if (lookup(names, l, &v->i) || lookup(aliases, l, &v->i))
    return 0;
  return sp_fail_at(p, l->at, "expected a %s name or number as default", type);
}

/* A device "type" or "type:index", the whole of s[0..n). */
static int convert_device(parser *p, const char *at, const char *s, size_t n,
                          gc_arg *v) {
  size_t i = 0;
  while (i < n && (sp_is_ident_char(s[i]) && !(i == 0 && sp_is_digit(s[i]))))
    i++;
  size_t type_len = i;
  long long index = -1;
  if (i < n && s[i] == ':' && i + 1 < n) {
    index = 0;
    for (i++; i < n && sp_is_digit(s[i]) && index <= INT_MAX; i++)
      index = index * 10 + (s[i] - '0');
  }
  if (type_len == 0 || i != n || index > INT_MAX)
    return sp_fail_at(p, at,
                      "malformed device (expected \"cpu\" or \"cuda:1\")");
  v->kind = GC_ARG_DEVICE;
  v->dev.index = (int)index;
  return sp_dup(p, s, type_len, &v->dev.type);
}

/* A device default: a string, or the unquoted cuda:1 torch prints. */
static int parse_device(parser *p, const literal *l, gc_arg *v) {
  if (l->kind == LIT_STRING)
    return convert_device(p, l->at, l->s, strlen(l->s), v);
  if (l->kind != LIT_WORD)
    return sp_fail_at(p, l->at, "expected a device as default");
  if (*p->p == ':' && sp_is_digit(p->p[1])) {
    p->p++;
    while (sp_is_digit(*p->p))
      p->p++;
  }
  return convert_device(p, l->at, l->at, (size_t)(p->p - l->at), v);
}

static void type_name(const gc_type *t, char *buf, size_t size) {
  size_t n = gc_type_format(t, buf, size);
  if (n >= size && size > 4)
    strcpy(buf + size - 4, "...");
}

/* Converts the literal `l` to a value of the non-list type `t`. */
static int convert(parser *p, const gc_type *t, const literal *l, gc_arg *v) {
  char name[64];
  memset(v, 0, sizeof *v);
  bool is_true = sp_lit_is(l, "True"), is_false = sp_lit_is(l, "False");
  switch (t->kind) {
  case GC_TY_INT:
  case GC_TY_SYMINT:
    v->kind = GC_ARG_INT;
    v->i = l->i;
    if (l->kind == LIT_INT)
      return 0;
    /* at::Reduction, which native_functions.yaml spells by name */
    v->i = sp_lit_is(l, "Mean") ? 1 : sp_lit_is(l, "Sum") ? 2 : -1;
    if (v->i >= 0)
      return 0;
    break;
  case GC_TY_FLOAT:
  case GC_TY_SYMFLOAT:
  case GC_TY_COMPLEX:
    v->kind = GC_ARG_FLOAT;
    v->f = l->kind == LIT_INT ? (double)l->i : l->f;
    if (l->kind == LIT_INT || l->kind == LIT_FLOAT)
      return 0;
    break;
  case GC_TY_BOOL:
  case GC_TY_SYMBOOL:
    v->kind = GC_ARG_BOOL;
    v->i = is_true;
    if (is_true || is_false)
      return 0;
    break;
  case GC_TY_STR:
  case GC_TY_DIMNAME:
    v->kind = GC_ARG_STRING;
    v->s = l->s;
    if (l->kind == LIT_STRING)
      return 0;
    break;
  case GC_TY_SCALAR:
  case GC_TY_NUMBER:
    v->kind = l->kind == LIT_INT ? GC_ARG_INT : GC_ARG_FLOAT;
    v->i = l->i;
    if (l->kind == LIT_FLOAT)
      v->f = l->f;
    if (l->kind == LIT_INT || l->kind == LIT_FLOAT)
      return 0;
    v->kind = GC_ARG_BOOL;
    v->i = is_true;
    if (is_true || is_false)
      return 0;
    break;
  case GC_TY_SCALAR_TYPE:
    return convert_enum(p, l, dtype_names, dtype_aliases, c10_dtypes,
                        sizeof c10_dtypes / sizeof *c10_dtypes,
                        GC_DTYPE_UNKNOWN, GC_ARG_SCALAR_TYPE, "ScalarType", v);
  case GC_TY_MEMORY_FORMAT:
    return convert_enum(p, l, memory_format_names, NULL, c10_memory_formats,
                        sizeof c10_memory_formats / sizeof *c10_memory_formats,
                        -1, GC_ARG_MEMORY_FORMAT, "MemoryFormat", v);
  case GC_TY_LAYOUT:
    return convert_enum(p, l, layout_names, NULL, c10_layouts,
                        sizeof c10_layouts / sizeof *c10_layouts, -1,
                        GC_ARG_LAYOUT, "Layout", v);
  case GC_TY_DEVICE:
    return parse_device(p, l, v);
  default:
    type_name(t, name, sizeof name);
    return sp_fail_at(p, l->at, "a default of type %s is not supported", name);
  }
  type_name(t, name, sizeof name);
  return sp_fail_at(p, l->at, "default does not fit type %s", name);
}

/* The list kind of a default of list type `t`; -1 when there is none. */
static int list_kind(const gc_type *t) {
  const gc_type *e = t->elem;
  switch (e->kind) {
  case GC_TY_INT:
  case GC_TY_SYMINT:
  case GC_TY_SCALAR:
  case GC_TY_NUMBER:
    return GC_ARG_INTS; /* Scalar[] turns FLOATS when an item is a float */
  case GC_TY_FLOAT:
  case GC_TY_SYMFLOAT:
    return GC_ARG_FLOATS;
  case GC_TY_BOOL:
  case GC_TY_SYMBOOL:
    return GC_ARG_BOOLS;
  case GC_TY_STR:
  case GC_TY_DIMNAME:
    return GC_ARG_STRINGS;
  case GC_TY_TENSOR:
    return GC_ARG_TENSORS;
  case GC_TY_OPTIONAL:
    return e->elem->kind == GC_TY_TENSOR ? GC_ARG_OPT_TENSORS : -1;
  default:
    return -1;
  }
}

/* Builds the list value of kind `kind` from n converted items: items[0..n),
 * or items[0] n times when `repeat` (int[2] stride=1). */
static int make_list(parser *p, int kind, const gc_arg *items, int n,
                     bool repeat, const char *at, gc_arg *v) {
  size_t step = repeat ? 0 : 1;
  memset(v, 0, sizeof *v);
  v->n = n;
  bool any_float = false;
  for (int i = 0; i < n; i++) {
    if (items[i * step].kind == GC_ARG_BOOL && kind == GC_ARG_INTS)
      return sp_fail_at(p, at, "a bool in a Scalar[] default");
    any_float |= items[i * step].kind == GC_ARG_FLOAT;
  }
  if (kind == GC_ARG_INTS && any_float)
    kind = GC_ARG_FLOATS;
  v->kind = (gc_arg_kind)kind;
  switch (kind) {
  case GC_ARG_INTS:
  case GC_ARG_BOOLS:
    v->ints = gc_arena_calloc(p->a, (size_t)n + 1, sizeof *v->ints);
    if (!v->ints)
      return sp_nomem(p);
    for (int i = 0; i < n; i++)
      v->ints[i] = items[i * step].i;
    return 0;
  case GC_ARG_FLOATS:
    v->floats = gc_arena_calloc(p->a, (size_t)n + 1, sizeof *v->floats);
    if (!v->floats)
      return sp_nomem(p);
    for (int i = 0; i < n; i++)
      v->floats[i] = items[i * step].kind == GC_ARG_INT
                         ? (double)items[i * step].i
                         : items[i * step].f;
    return 0;
  case GC_ARG_STRINGS:
    v->strs = gc_arena_calloc(p->a, (size_t)n + 1, sizeof *v->strs);
    if (!v->strs)
      return sp_nomem(p);
    for (int i = 0; i < n; i++)
      v->strs[i] = items[i * step].s;
    return 0;
  default: /* TENSORS, OPT_TENSORS: only ever empty */
    v->vals = gc_arena_calloc(p->a, 1, sizeof *v->vals);
    return v->vals ? 0 : sp_nomem(p);
  }
}

/* A default of list type `t`: '[' items ']', or one item repeated N times
 * for a sized list (int[2] stride=1). */
static int parse_list_default(parser *p, const gc_type *t, gc_arg *v) {
  const char *at = p->p;
  int kind = list_kind(t);
  char name[64];
  type_name(t, name, sizeof name);
  if (kind < 0)
    return sp_fail_at(p, at, "a default of type %s is not supported", name);
  bool tensors = kind == GC_ARG_TENSORS || kind == GC_ARG_OPT_TENSORS;
  gc_arg *items = NULL;
  int n = 0, cap = 0;
  if (*p->p == '[') {
    p->p++;
    if (!sp_accept(p, "]")) {
      if (tensors)
        return sp_fail_at(p, at, "a default of type %s must be []", name);
      for (;;) {
        literal l;
        items = sp_reserve(p, items, n, &cap, sizeof *items);
        if (!items)
          return p->rc;
        int rc = sp_read_literal(p, &l);
        if (rc || (rc = convert(p, t->elem, &l, &items[n])))
          return rc;
        n++;
        if (sp_accept(p, "]"))
          break;
        if (!sp_accept(p, ","))
          return sp_expected(p, "',' or ']' in the list default");
      }
    }
  } else {
    if (t->fixed_len < 0 || tensors) {
      char what[96];
      snprintf(what, sizeof what, "'[' to start a default of type %s", name);
      return sp_expected(p, what);
    }
    literal l;
    gc_arg one;
    int rc = sp_read_literal(p, &l);
    if (rc || (rc = convert(p, t->elem, &l, &one)))
      return rc;
    return make_list(p, kind, &one, t->fixed_len, true, at, v);
  }
  return make_list(p, kind, items, n, false, at, v);
}

/* default := 'None' | literal | list, converted by the type `t`. */
int sp_parse_default(parser *p, const gc_type *t, gc_schema_arg *arg) {
  sp_skip_blanks(p);
  const char *start = p->p;
  int rc;
  while (t->kind == GC_TY_OPTIONAL)
    t = t->elem;
  if (sp_word_at(p->p, "None")) {
    p->p += 4;
    memset(&arg->def, 0, sizeof arg->def);
    arg->def.kind = GC_ARG_NONE;
    rc = 0;
  } else if (t->kind == GC_TY_LIST) {
    rc = parse_list_default(p, t, &arg->def);
  } else {
    literal l;
    rc = sp_read_literal(p, &l);
    if (!rc)
      rc = convert(p, t, &l, &arg->def);
  }
  if (rc)
    return rc;
  arg->has_default = true;
  return sp_dup(p, start, (size_t)(p->p - start), &arg->default_text);
}
