/*
 * pt2.c: torch.export `.pt2` archives to compiled.v1.GraphModule (pt2.h).
 *
 * The archive is read with libzip from memory; its JSON members with
 * jansson. The conversion builds the graph in its JSON form
 * (docs/graph-format.md, "JSON form") and decodes that with pbjson, so
 * every field the graph format checks (enum names, UTF-8, lists) is checked
 * by the one decoder compilectl already uses for .json graphs.
 *
 * What maps how (torch.export schema 8.x -> graph.proto):
 *   node target "torch.ops.NS.NAME.OVERLOAD"  "NS::NAME.OVERLOAD" (".default"
 *                                              dropped), schema from torch
 *                                              2.13's table (torchops.h)
 *   tensor_values {name: meta}                 TensorValue list; dtypes
 *                                              renumbered (export's HALF is 6,
 *                                              graph.proto's 7, ...)
 *   SymInt as_expr.expr_str (sympy srepr)      the graph grammar
 *   signature.input_specs                      InputSpec kinds
 *   signature.output_specs                     the convention's outputs (the
 *                                              graph returns them all)
 *   range_constraints                          the convention's symbols
 */
#include "client/lib/pt2.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zip.h>

#include "client/lib/pbjson.h"
#include "compiler/torchops.h"

typedef struct cx {
  char *err;
  size_t errlen;
  bool failed;
  const char *member; /* the member being read, for messages */
} cx;

__attribute__((format(printf, 3, 4))) static int fail(cx *c, const char *path,
                                                      const char *fmt, ...) {
  if (c->failed)
    return -1;
  c->failed = true;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (path && *path)
    snprintf(c->err, c->errlen, "%s: %s: %s", c->member, path, msg);
  else
    snprintf(c->err, c->errlen, "%s: %s", c->member, msg);
  return -1;
}

int pt2_looks_like_zip(const void *data, size_t len) {
  return len >= 4 && memcmp(data, "PK\3\4", 4) == 0;
}

/* ---- the archive ---- */

typedef struct archive {
  zip_t *z;
  char prefix[256]; /* "model/" (with the slash), or "" */
} archive;

/* Reads member `rel` (below the prefix) into a new buffer. `max` bounds
 * its size. Returns 0, 1 when missing (no error set), -1 on error. */
static int read_member(cx *c, archive *a, const char *rel, uint64_t max,
                       uint8_t **data, size_t *len) {
  char name[1024];
  snprintf(name, sizeof name, "%s%s", a->prefix, rel);
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat(a->z, name, 0, &st) != 0)
    return 1;
  c->member = rel;
  if (!(st.valid & ZIP_STAT_SIZE))
    return fail(c, NULL, "the archive does not give the member's size");
  if (st.size > max)
    return fail(c, NULL, "%" PRIu64 " bytes, more than the limit of %" PRIu64,
                (uint64_t)st.size, max);
  zip_file_t *f = zip_fopen_index(a->z, st.index, 0);
  if (!f)
    return fail(c, NULL, "cannot open: %s", zip_strerror(a->z));
  uint8_t *buf = malloc(st.size + 1);
  if (!buf) {
    zip_fclose(f);
    return fail(c, NULL, "out of memory (%" PRIu64 " bytes)",
                (uint64_t)st.size);
  }
  zip_int64_t got = zip_fread(f, buf, st.size);
  /* one more byte must not come: the data must match the declared size */
  uint8_t extra;
  zip_int64_t more = got == (zip_int64_t)st.size ? zip_fread(f, &extra, 1) : 0;
  int bad = got != (zip_int64_t)st.size || more != 0;
  char why[256] = "";
  if (bad)
    snprintf(why, sizeof why, "%s", zip_file_strerror(f));
  zip_fclose(f);
  if (bad) {
    free(buf);
    return fail(c, NULL,
                "truncated or corrupt (read %lld of %" PRIu64 " bytes: %s)",
                (long long)got, (uint64_t)st.size, why);
  }
  buf[st.size] = 0;
  *data = buf;
  *len = st.size;
  return 0;
}

static int read_json(cx *c, archive *a, const char *rel, json_t **out) {
  uint8_t *data;
  size_t len;
  int r = read_member(c, a, rel, PT2_MAX_JSON_BYTES, &data, &len);
  if (r > 0) {
    c->member = rel;
    return fail(c, NULL, "missing from the archive (expected %s%s)", a->prefix,
                rel);
  }
  if (r < 0)
    return -1;
  json_error_t je;
  *out = json_loadb((const char *)data, len, JSON_REJECT_DUPLICATES, &je);
  free(data);
  if (!*out)
    return fail(c, NULL, "not valid JSON: %s (line %d, column %d)", je.text,
                je.line, je.column);
  return 0;
}

/* Finds the archive's top folder: the one holding `archive_format`. */
static int find_prefix(cx *c, archive *a) {
  zip_int64_t n = zip_get_num_entries(a->z, 0);
  for (zip_int64_t i = 0; i < n; i++) {
    const char *name = zip_get_name(a->z, (zip_uint64_t)i, 0);
    if (!name)
      continue;
    size_t l = strlen(name);
    static const char tail[] = "archive_format";
    size_t tl = sizeof tail - 1;
    if (l < tl || strcmp(name + l - tl, tail) != 0)
      continue;
    size_t pl = l - tl;
    if (pl > 0 && name[pl - 1] != '/')
      continue;
    if (pl >= sizeof a->prefix)
      continue;
    if (memchr(name, '/', pl ? pl - 1 : 0))
      continue; /* only a top-level folder */
    memcpy(a->prefix, name, pl);
    a->prefix[pl] = 0;
    return 0;
  }
  c->member = "archive_format";
  return fail(c, NULL,
              "missing from the archive: not a torch.export .pt2 archive "
              "(expected NAME/archive_format holding \"pt2\")");
}

/* ---- JSON helpers ---- */

static json_t *get(cx *c, json_t *o, const char *path, const char *key,
                   json_type want) {
  if (!json_is_object(o)) {
    fail(c, path, "expected an object");
    return NULL;
  }
  json_t *v = json_object_get(o, key);
  if (!v) {
    fail(c, path, "missing field '%s'", key);
    return NULL;
  }
  if (json_typeof(v) != want && !(want == JSON_REAL && json_is_integer(v)) &&
      !(want == JSON_TRUE && json_is_boolean(v))) {
    fail(c, path, "field '%s' has the wrong type", key);
    return NULL;
  }
  return v;
}

/* The one member of a union object ({"as_int": 3}); nulls are skipped
 * (the serializer writes other members as null in some places). */
static const char *union_member(cx *c, json_t *o, const char *path,
                                json_t **val) {
  if (!json_is_object(o)) {
    fail(c, path, "expected an object with one member");
    return NULL;
  }
  const char *key, *found = NULL;
  json_t *v;
  json_object_foreach(o, key, v) {
    if (json_is_null(v))
      continue;
    if (found) {
      fail(c, path, "has two members, '%s' and '%s' (a union has one)", found,
           key);
      return NULL;
    }
    found = key;
    *val = v;
  }
  if (!found)
    fail(c, path, "is an empty union");
  return found;
}

static void pathf(char *buf, size_t n, const char *base, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void pathf(char *buf, size_t n, const char *base, const char *fmt, ...) {
  int l = snprintf(buf, n, "%s", base);
  if (l < 0 || (size_t)l >= n)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + l, n - (size_t)l, fmt, ap);
  va_end(ap);
}

/* union_member, and in p the path of the member ("path.as_int"). */
static const char *union_at(cx *c, json_t *o, const char *path, json_t **val,
                            char *p, size_t np) {
  const char *k = union_member(c, o, path, val);
  if (k)
    pathf(p, np, path, ".%s", k);
  return k;
}

static int add(cx *c, json_t *o, const char *k, json_t *v) {
  if (!v || json_object_set_new(o, k, v) != 0)
    return fail(c, NULL, "out of memory");
  return 0;
}

static int append(cx *c, json_t *a, json_t *v) {
  if (!v || json_array_append_new(a, v) != 0)
    return fail(c, NULL, "out of memory");
  return 0;
}

/* ---- sympy srepr expressions ---- */

/* A growing string. */
typedef struct sbuf {
  char *s;
  size_t len, cap;
} sbuf;

static int sb_put(sbuf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->len + n + 1)
      cap *= 2;
    char *t = realloc(b->s, cap);
    if (!t)
      return -1;
    b->s = t;
    b->cap = cap;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = 0;
  return 0;
}

static int sb_str(sbuf *b, const char *s) {
  return sb_put(b, s, strlen(s));
}

typedef struct sp {
  const char *s, *p;
  cx *c;
  const char *path;
} sp;

static void sp_ws(sp *x) {
  while (*x->p == ' ')
    x->p++;
}

static int sp_fail(sp *x, const char *what) {
  return fail(x->c, x->path,
              "symbolic expression \"%.120s\": at offset %td: %s", x->s,
              x->p - x->s, what);
}

static int sp_expr(sp *x, sbuf *out, int depth);

/* Skips keyword arguments (`positive=True`) up to the closing parenthesis. */
static int sp_skip_kwargs(sp *x) {
  for (;;) {
    sp_ws(x);
    if (*x->p == ')')
      return 0;
    if (*x->p != ',')
      return sp_fail(x, "expected ',' or ')'");
    x->p++;
    sp_ws(x);
    const char *q = x->p;
    while (isalnum((unsigned char)*q) || *q == '_')
      q++;
    if (q == x->p || *q != '=')
      return sp_fail(x, "expected a keyword argument");
    x->p = q + 1;
    if (strncmp(x->p, "True", 4) == 0)
      x->p += 4;
    else if (strncmp(x->p, "False", 5) == 0)
      x->p += 5;
    else
      return sp_fail(x, "expected True or False");
  }
}

/* A symbol name in quotes: Symbol('s77', ...). */
static int sp_symbol(sp *x, sbuf *out) {
  sp_ws(x);
  char q = *x->p;
  if (q != '\'' && q != '"')
    return sp_fail(x, "expected a quoted symbol name");
  const char *st = ++x->p;
  if (!isalpha((unsigned char)*st) && *st != '_')
    return sp_fail(x, "a symbol name must be an identifier");
  while (isalnum((unsigned char)*x->p) || *x->p == '_')
    x->p++;
  if (*x->p != q)
    return sp_fail(x, "a symbol name must be an identifier");
  size_t n = (size_t)(x->p - st);
  x->p++;
  if (sb_put(out, st, n))
    return fail(x->c, NULL, "out of memory");
  return sp_skip_kwargs(x);
}

/* Arguments of an n-ary function joined by `sep`, in parentheses. */
static int sp_join(sp *x, sbuf *out, const char *open, const char *sep, int min,
                   int max, int depth) {
  if (sb_str(out, open))
    return fail(x->c, NULL, "out of memory");
  int n = 0;
  for (;;) {
    sp_ws(x);
    if (*x->p == ')')
      break;
    if (n > 0) {
      if (*x->p != ',')
        return sp_fail(x, "expected ',' or ')'");
      x->p++;
      if (sb_str(out, sep))
        return fail(x->c, NULL, "out of memory");
    }
    if (sp_expr(x, out, depth + 1))
      return -1;
    n++;
  }
  if (n < min || n > max)
    return sp_fail(x, "wrong number of arguments");
  if (sb_str(out, ")"))
    return fail(x->c, NULL, "out of memory");
  return 0;
}

static int sp_expr(sp *x, sbuf *out, int depth) {
  if (depth > PT2_MAX_DEPTH)
    return sp_fail(x, "nested more than 64 deep");
  sp_ws(x);
  const char *st = x->p;
  if (*x->p == '-' || isdigit((unsigned char)*x->p)) {
    x->p++;
    while (isdigit((unsigned char)*x->p))
      x->p++;
    if (x->p - st > 19)
      return sp_fail(x, "integer out of range");
    if (sb_str(out, "(") || sb_put(out, st, (size_t)(x->p - st)) ||
        sb_str(out, ")"))
      return fail(x->c, NULL, "out of memory");
    return 0;
  }
  while (isalnum((unsigned char)*x->p) || *x->p == '_')
    x->p++;
  size_t n = (size_t)(x->p - st);
  if (n == 0)
    return sp_fail(x, "expected a number, a symbol or a function");
  char fn[32];
  if (n >= sizeof fn)
    return sp_fail(x, "unknown function");
  memcpy(fn, st, n);
  fn[n] = 0;
  sp_ws(x);
  if (*x->p != '(') { /* a bare symbol (str() form rather than srepr) */
    if (isdigit((unsigned char)fn[0]))
      return sp_fail(x, "bad symbol");
    if (sb_str(out, fn))
      return fail(x->c, NULL, "out of memory");
    return 0;
  }
  x->p++;
  int r;
  if (strcmp(fn, "Symbol") == 0)
    r = sp_symbol(x, out);
  else if (strcmp(fn, "Integer") == 0)
    r = sp_join(x, out, "(", "", 1, 1, depth);
  else if (strcmp(fn, "Add") == 0)
    r = sp_join(x, out, "(", " + ", 1, 1 << 20, depth);
  else if (strcmp(fn, "Mul") == 0)
    r = sp_join(x, out, "(", "*", 1, 1 << 20, depth);
  else if (strcmp(fn, "FloorDiv") == 0)
    r = sp_join(x, out, "(", "//", 2, 2, depth);
  else if (strcmp(fn, "Mod") == 0 || strcmp(fn, "PythonMod") == 0)
    r = sp_join(x, out, "(", "%", 2, 2, depth);
  else if (strcmp(fn, "Pow") == 0)
    r = sp_join(x, out, "(", "**", 2, 2, depth);
  else if (strcmp(fn, "Max") == 0)
    r = sp_join(x, out, "max(", ", ", 2, 1 << 20, depth);
  else if (strcmp(fn, "Min") == 0)
    r = sp_join(x, out, "min(", ", ", 2, 1 << 20, depth);
  else {
    x->p = st;
    char msg[200];
    snprintf(msg, sizeof msg,
             "the sympy function '%s' is not supported (supported: Symbol, "
             "Integer, Add, Mul, FloorDiv, Mod, Pow, Max, Min)",
             fn);
    return sp_fail(x, msg);
  }
  if (r)
    return -1;
  sp_ws(x);
  if (*x->p != ')')
    return sp_fail(x, "expected ')'");
  x->p++;
  return 0;
}

/* Converts a serialized sympy expression to the graph grammar. */
static json_t *sym_expr(cx *c, const char *path, const char *s) {
  sp x = {.s = s, .p = s, .c = c, .path = path};
  sbuf b = {0};
  if (sp_expr(&x, &b, 0) == 0) {
    sp_ws(&x);
    if (*x.p)
      sp_fail(&x, "unexpected text after the expression");
  }
  json_t *r = c->failed ? NULL : json_string(b.s ? b.s : "");
  free(b.s);
  if (!r && !c->failed)
    fail(c, path, "out of memory");
  return r;
}

/* ---- values ---- */

/* export ScalarType -> graph.proto enum name */
static const char *dtype_name(int e) {
  switch (e) {
  case 1:
    return "SCALAR_TYPE_BYTE";
  case 2:
    return "SCALAR_TYPE_CHAR";
  case 3:
    return "SCALAR_TYPE_SHORT";
  case 4:
    return "SCALAR_TYPE_INT";
  case 5:
    return "SCALAR_TYPE_LONG";
  case 6:
    return "SCALAR_TYPE_HALF";
  case 7:
    return "SCALAR_TYPE_FLOAT";
  case 8:
    return "SCALAR_TYPE_DOUBLE";
  case 9:
    return "SCALAR_TYPE_COMPLEXHALF";
  case 10:
    return "SCALAR_TYPE_COMPLEXFLOAT";
  case 11:
    return "SCALAR_TYPE_COMPLEXDOUBLE";
  case 12:
    return "SCALAR_TYPE_BOOL";
  case 13:
    return "SCALAR_TYPE_BFLOAT16";
  case 28:
    return "SCALAR_TYPE_UINT16";
  default:
    return NULL;
  }
}

static const char *layout_name(int e) {
  static const char *const n[] = {NULL,
                                  "LAYOUT_SPARSE_COO",
                                  "LAYOUT_SPARSE_CSR",
                                  "LAYOUT_SPARSE_CSC",
                                  "LAYOUT_SPARSE_BSR",
                                  "LAYOUT_SPARSE_BSC",
                                  "LAYOUT_MKLDNN",
                                  "LAYOUT_STRIDED"};
  return e >= 1 && e <= 7 ? n[e] : NULL;
}

static const char *memfmt_name(int e) {
  static const char *const n[] = {
      NULL, "MEMORY_FORMAT_CONTIGUOUS", "MEMORY_FORMAT_CHANNELS_LAST",
      "MEMORY_FORMAT_CHANNELS_LAST_3D", "MEMORY_FORMAT_PRESERVE"};
  return e >= 1 && e <= 4 ? n[e] : NULL;
}

static int enum_int(cx *c, json_t *v, const char *path, int *out) {
  if (!json_is_integer(v) || json_integer_value(v) < 0 ||
      json_integer_value(v) > 1000)
    return fail(c, path, "expected an enum number");
  *out = (int)json_integer_value(v);
  return 0;
}

/* SymInt {as_int} | {as_expr: {expr_str, hint?}} */
static json_t *sym_int(cx *c, json_t *v, const char *path) {
  json_t *m;
  char p[512];
  const char *k = union_at(c, v, path, &m, p, sizeof p);
  if (!k)
    return NULL;
  if (strcmp(k, "as_int") == 0) {
    if (!json_is_integer(m)) {
      fail(c, p, "expected an integer");
      return NULL;
    }
    return json_pack("{sI}", "as_int", json_integer_value(m));
  }
  if (strcmp(k, "as_expr") == 0) {
    json_t *es = get(c, m, p, "expr_str", JSON_STRING);
    if (!es)
      return NULL;
    char pe[600];
    pathf(pe, sizeof pe, p, ".expr_str");
    json_t *e = sym_expr(c, pe, json_string_value(es));
    if (!e)
      return NULL;
    json_t *r = json_pack("{s{so}}", "as_expr", "expr", e);
    json_t *hint = json_object_get(m, "hint");
    json_t *hv;
    if (r && hint && !json_is_null(hint) && json_is_object(hint) &&
        (hv = json_object_get(hint, "as_int")) && json_is_integer(hv)) {
      json_t *ex = json_object_get(r, "as_expr");
      json_object_set_new(ex, "has_hint", json_true());
      json_object_set_new(ex, "hint", json_integer(json_integer_value(hv)));
    }
    return r;
  }
  fail(c, path, "unsupported SymInt member '%s'", k);
  return NULL;
}

static json_t *device(cx *c, json_t *v, const char *path) {
  json_t *t = get(c, v, path, "type", JSON_STRING);
  if (!t)
    return NULL;
  json_t *r = json_pack("{sO}", "type", t);
  json_t *i = json_object_get(v, "index");
  if (r && i && json_is_integer(i)) {
    json_object_set_new(r, "has_index", json_true());
    json_object_set_new(r, "index", json_integer(json_integer_value(i)));
  } else if (i && !json_is_null(i)) {
    json_decref(r);
    fail(c, path, "field 'index' must be an integer or null");
    return NULL;
  }
  return r;
}

static json_t *sym_list(cx *c, json_t *o, const char *path, const char *key) {
  json_t *a = get(c, o, path, key, JSON_ARRAY);
  if (!a)
    return NULL;
  json_t *r = json_array();
  size_t i;
  json_t *v;
  json_array_foreach(a, i, v) {
    char p[512];
    pathf(p, sizeof p, path, ".%s[%zu]", key, i);
    if (append(c, r, sym_int(c, v, p))) {
      json_decref(r);
      return NULL;
    }
  }
  return r;
}

/* TensorMeta */
static json_t *tensor_meta(cx *c, json_t *m, const char *path) {
  json_t *dt = get(c, m, path, "dtype", JSON_INTEGER);
  if (!dt)
    return NULL;
  int d;
  char p[512];
  pathf(p, sizeof p, path, ".dtype");
  if (enum_int(c, dt, p, &d))
    return NULL;
  const char *dn = dtype_name(d);
  if (!dn) {
    fail(c, p, "dtype %d is not supported", d);
    return NULL;
  }
  json_t *r = json_pack("{ss}", "dtype", dn);
  json_t *sizes = sym_list(c, m, path, "sizes");
  json_t *strides = sizes ? sym_list(c, m, path, "strides") : NULL;
  if (!strides || add(c, r, "sizes", sizes) || add(c, r, "strides", strides)) {
    json_decref(sizes);
    json_decref(r);
    return NULL;
  }
  json_t *so = json_object_get(m, "storage_offset");
  if (so && !json_is_null(so)) {
    pathf(p, sizeof p, path, ".storage_offset");
    if (add(c, r, "storage_offset", sym_int(c, so, p))) {
      json_decref(r);
      return NULL;
    }
  }
  json_t *dev = get(c, m, path, "device", JSON_OBJECT);
  pathf(p, sizeof p, path, ".device");
  if (!dev || add(c, r, "device", device(c, dev, p))) {
    json_decref(r);
    return NULL;
  }
  json_t *rg = json_object_get(m, "requires_grad");
  if (rg && json_is_true(rg))
    json_object_set_new(r, "requires_grad", json_true());
  json_t *lay = json_object_get(m, "layout");
  if (lay && !json_is_null(lay)) {
    int l;
    pathf(p, sizeof p, path, ".layout");
    if (enum_int(c, lay, p, &l)) {
      json_decref(r);
      return NULL;
    }
    if (!layout_name(l)) {
      fail(c, p, "layout %d is not supported", l);
      json_decref(r);
      return NULL;
    }
    json_object_set_new(r, "layout", json_string(layout_name(l)));
  }
  return r;
}

/* ---- arguments ---- */

static json_t *named(cx *c, json_t *v, const char *path) {
  json_t *n = get(c, v, path, "name", JSON_STRING);
  return n ? json_pack("{sO}", "name", n) : NULL;
}

/* A list argument: {"items": [...]} with each element converted by fn. */
static json_t *items(cx *c, json_t *a, const char *path,
                     json_t *(*fn)(cx *, json_t *, const char *)) {
  if (!json_is_array(a)) {
    fail(c, path, "expected a list");
    return NULL;
  }
  json_t *l = json_array();
  size_t i;
  json_t *v;
  json_array_foreach(a, i, v) {
    char p[512];
    pathf(p, sizeof p, path, "[%zu]", i);
    if (append(c, l, fn(c, v, p))) {
      json_decref(l);
      return NULL;
    }
  }
  return json_pack("{so}", "items", l);
}

static json_t *lit_int(cx *c, json_t *v, const char *path) {
  if (!json_is_integer(v)) {
    fail(c, path, "expected an integer");
    return NULL;
  }
  return json_incref(v);
}
static json_t *lit_float(cx *c, json_t *v, const char *path) {
  if (json_is_number(v))
    return json_incref(v);
  if (json_is_string(v)) { /* "NaN", "Infinity", "-Infinity" */
    const char *s = json_string_value(v);
    if (!strcmp(s, "NaN") || !strcmp(s, "Infinity") || !strcmp(s, "-Infinity"))
      return json_incref(v);
  }
  fail(c, path, "expected a number");
  return NULL;
}
static json_t *lit_bool(cx *c, json_t *v, const char *path) {
  if (!json_is_boolean(v)) {
    fail(c, path, "expected true or false");
    return NULL;
  }
  return json_incref(v);
}
static json_t *lit_string(cx *c, json_t *v, const char *path) {
  if (!json_is_string(v)) {
    fail(c, path, "expected a string");
    return NULL;
  }
  return json_incref(v);
}

/* SymIntArgument {as_name | as_int}; likewise float and bool */
static json_t *sym_arg(cx *c, json_t *v, const char *path, const char *lit) {
  json_t *m;
  char p[512];
  const char *k = union_at(c, v, path, &m, p, sizeof p);
  if (!k)
    return NULL;
  if (strcmp(k, "as_name") == 0) {
    if (!json_is_string(m)) {
      fail(c, p, "expected a string");
      return NULL;
    }
    return json_pack("{sO}", "as_name", m);
  }
  if (strcmp(k, lit) == 0) {
    json_t *x = strcmp(lit, "as_int") == 0    ? lit_int(c, m, p)
                : strcmp(lit, "as_bool") == 0 ? lit_bool(c, m, p)
                                              : lit_float(c, m, p);
    return x ? json_pack("{so}", lit, x) : NULL;
  }
  fail(c, path, "unsupported member '%s'", k);
  return NULL;
}
static json_t *sym_int_arg(cx *c, json_t *v, const char *p) {
  return sym_arg(c, v, p, "as_int");
}
static json_t *sym_float_arg(cx *c, json_t *v, const char *p) {
  return sym_arg(c, v, p, "as_float");
}
static json_t *sym_bool_arg(cx *c, json_t *v, const char *p) {
  return sym_arg(c, v, p, "as_bool");
}

/* OptionalTensorArgument {as_tensor | as_none} */
static json_t *opt_tensor(cx *c, json_t *v, const char *path) {
  json_t *m;
  char p[512];
  const char *k = union_at(c, v, path, &m, p, sizeof p);
  if (!k)
    return NULL;
  if (strcmp(k, "as_tensor") == 0) {
    json_t *t = named(c, m, p);
    return t ? json_pack("{so}", "as_tensor", t) : NULL;
  }
  if (strcmp(k, "as_none") == 0)
    return json_pack("{sb}", "as_none", 1);
  fail(c, path, "unsupported member '%s'", k);
  return NULL;
}

static json_t *enum_arg(cx *c, json_t *m, const char *p, const char *key,
                        const char *(*name)(int)) {
  int e;
  if (enum_int(c, m, p, &e))
    return NULL;
  if (!name(e)) {
    fail(c, p, "value %d is not supported", e);
    return NULL;
  }
  return json_pack("{ss}", key, name(e));
}

/* The argument kinds that come as one value ("as_int") and as a list of
 * them ("as_ints"), with the conversion of one value. */
struct arg_kind {
  const char *one, *many;
  json_t *(*convert)(cx *, json_t *, const char *);
};
static const struct arg_kind ARG_KINDS[] = {
    {"as_tensor", "as_tensors", named},
    {"as_optional_tensor", "as_optional_tensors", opt_tensor},
    {"as_int", "as_ints", lit_int},
    {"as_float", "as_floats", lit_float},
    {"as_bool", "as_bools", lit_bool},
    {"as_string", "as_strings", lit_string},
    {"as_sym_int", "as_sym_ints", sym_int_arg},
    {"as_sym_float", "as_sym_floats", sym_float_arg},
    {"as_sym_bool", "as_sym_bools", sym_bool_arg},
};

/* Argument: one member, converted. */
static json_t *argument(cx *c, json_t *v, const char *path) {
  json_t *m;
  char p[512];
  const char *k = union_at(c, v, path, &m, p, sizeof p);
  if (!k)
    return NULL;
  if (!strcmp(k, "as_none"))
    return json_pack("{sb}", "as_none", 1);
  if (!strcmp(k, "as_optional_tensor")) /* already the graph format's form */
    return opt_tensor(c, m, p);
  json_t *x = NULL;
  const struct arg_kind *kind = NULL;
  for (size_t i = 0; i < sizeof ARG_KINDS / sizeof *ARG_KINDS && !kind; i++)
    if (!strcmp(k, ARG_KINDS[i].one) || !strcmp(k, ARG_KINDS[i].many))
      kind = &ARG_KINDS[i];
  if (kind)
    x = !strcmp(k, kind->one) ? kind->convert(c, m, p)
                              : items(c, m, p, kind->convert);
  else if (!strcmp(k, "as_scalar_type"))
    return enum_arg(c, m, p, k, dtype_name);
  else if (!strcmp(k, "as_memory_format"))
    return enum_arg(c, m, p, k, memfmt_name);
  else if (!strcmp(k, "as_layout"))
    return enum_arg(c, m, p, k, layout_name);
  else if (!strcmp(k, "as_device"))
    x = device(c, m, p);
  else {
    fail(c, path,
         "argument kind '%s' is not supported (subgraphs, custom objects, "
         "operators and complex numbers are not in the graph format)",
         k);
    return NULL;
  }
  if (!x)
    return NULL;
  json_t *r = json_object();
  if (add(c, r, k, x)) {
    json_decref(r);
    return NULL;
  }
  return r;
}

/* ---- the graph ---- */

/* "torch.ops.aten.add.Tensor" -> "aten::add.Tensor" ("aten::relu" for
 * ".default"). Returns 0, or -1 when the target is not an operator. */
static int op_name(const char *target, char *out, size_t n) {
  static const char pre[] = "torch.ops.";
  if (strncmp(target, pre, sizeof pre - 1) != 0)
    return -1;
  const char *ns = target + sizeof pre - 1;
  const char *d1 = strchr(ns, '.');
  if (!d1 || d1 == ns)
    return -1;
  const char *nm = d1 + 1;
  const char *d2 = strchr(nm, '.');
  if (!d2 || d2 == nm || !d2[1] || strchr(d2 + 1, '.'))
    return -1;
  const char *ov = d2 + 1;
  int l;
  if (strcmp(ov, "default") == 0)
    l = snprintf(out, n, "%.*s::%.*s", (int)(d1 - ns), ns, (int)(d2 - nm), nm);
  else
    l = snprintf(out, n, "%.*s::%.*s.%s", (int)(d1 - ns), ns, (int)(d2 - nm),
                 nm, ov);
  return l > 0 && (size_t)l < n ? 0 : -1;
}

static json_t *node(cx *c, json_t *nd, size_t i, json_t *ops) {
  char path[128];
  snprintf(path, sizeof path, "graph_module.graph.nodes[%zu]", i);
  json_t *t = get(c, nd, path, "target", JSON_STRING);
  if (!t)
    return NULL;
  char name[256];
  const char *tgt = json_string_value(t);
  if (op_name(tgt, name, sizeof name)) {
    fail(c, path,
         "target '%.100s' is not an operator (torch.ops.NAMESPACE.NAME."
         "OVERLOAD); Python-level calls and higher-order operators "
         "(control flow) are not supported",
         tgt);
    return NULL;
  }
  const char *schema = gc_torch_schema(name);
  if (!schema) {
    fail(c, path,
         "operator '%s' is not one torch " GC_TORCH_TABLE_VERSION
         " ships (custom operators are not supported in .pt2 programs)",
         name);
    return NULL;
  }
  if (!json_object_get(ops, name))
    json_object_set_new(ops, name, json_string(schema));
  json_t *r = json_pack("{ss}", "target", name);
  json_t *ins = json_array(), *outs = json_array();
  json_object_set_new(r, "inputs", ins);
  json_object_set_new(r, "outputs", outs);
  json_t *a = get(c, nd, path, "inputs", JSON_ARRAY);
  size_t j;
  json_t *v;
  if (!a)
    goto bad;
  json_array_foreach(a, j, v) {
    char p[512];
    snprintf(p, sizeof p, "%s.inputs[%zu]", path, j);
    json_t *an = get(c, v, p, "name", JSON_STRING);
    json_t *aa = an ? get(c, v, p, "arg", JSON_OBJECT) : NULL;
    if (!aa)
      goto bad;
    char pa[600];
    pathf(pa, sizeof pa, p, ".arg");
    json_t *conv = argument(c, aa, pa);
    if (!conv)
      goto bad;
    json_t *kind = json_object_get(v, "kind");
    const char *kn = "ARGUMENT_KIND_KEYWORD";
    if (kind && json_is_integer(kind) && json_integer_value(kind) == 1)
      kn = "ARGUMENT_KIND_POSITIONAL";
    else if (kind && !json_is_null(kind) &&
             !(json_is_integer(kind) && json_integer_value(kind) == 2)) {
      json_decref(conv);
      fail(c, p, "field 'kind' must be 1 (positional) or 2 (keyword)");
      goto bad;
    }
    if (append(c, ins,
               json_pack("{sOsoss}", "name", an, "arg", conv, "kind", kn)))
      goto bad;
  }
  a = get(c, nd, path, "outputs", JSON_ARRAY);
  if (!a)
    goto bad;
  json_array_foreach(a, j, v) {
    char p[512];
    snprintf(p, sizeof p, "%s.outputs[%zu]", path, j);
    if (append(c, outs, argument(c, v, p)))
      goto bad;
  }
  json_t *md = json_object_get(nd, "metadata");
  json_t *stk = json_is_object(md) ? json_object_get(md, "stack_trace") : NULL;
  if (json_is_string(stk))
    json_object_set_new(r, "metadata", json_pack("{sO}", "stack_trace", stk));
  return r;
bad:
  json_decref(r);
  return NULL;
}

/* {name: value} side table -> [{name, value-key: converted}] */
static int side_table(cx *c, json_t *g, json_t *out, const char *key,
                      const char *out_key, const char *val_key,
                      json_t *(*fn)(cx *, json_t *, const char *)) {
  json_t *t = json_object_get(g, key);
  if (!t || json_is_null(t))
    return 0;
  char path[128];
  snprintf(path, sizeof path, "graph_module.graph.%s", key);
  if (!json_is_object(t))
    return fail(c, path, "expected an object");
  json_t *l = json_array();
  json_object_set_new(out, out_key, l);
  const char *name;
  json_t *v;
  json_object_foreach(t, name, v) {
    char p[512];
    snprintf(p, sizeof p, "%s['%.200s']", path, name);
    json_t *conv = fn(c, v, p);
    if (!conv ||
        append(c, l, json_pack("{sss o}", "name", name, val_key, conv)))
      return -1;
  }
  return 0;
}

static json_t *sym_float_value(cx *c, json_t *v, const char *path) {
  json_t *m;
  const char *k = union_member(c, v, path, &m);
  if (!k)
    return NULL;
  if (!strcmp(k, "as_float")) {
    json_t *f = lit_float(c, m, path);
    return f ? json_pack("{so}", "as_float", f) : NULL;
  }
  if (!strcmp(k, "as_expr"))
    return sym_int(c, v, path); /* the same shape: {as_expr: {expr}} */
  fail(c, path, "unsupported member '%s'", k);
  return NULL;
}

static json_t *sym_bool_value(cx *c, json_t *v, const char *path) {
  json_t *m;
  const char *k = union_member(c, v, path, &m);
  if (!k)
    return NULL;
  if (!strcmp(k, "as_bool")) {
    json_t *b = lit_bool(c, m, path);
    return b ? json_pack("{so}", "as_bool", b) : NULL;
  }
  if (!strcmp(k, "as_expr")) {
    json_t *es = get(c, m, path, "expr_str", JSON_STRING);
    json_t *e = es ? sym_expr(c, path, json_string_value(es)) : NULL;
    return e ? json_pack("{s{so}}", "as_expr", "expr", e) : NULL;
  }
  fail(c, path, "unsupported member '%s'", k);
  return NULL;
}

/* One input spec: sets *kind, *target, *persistent; returns the name of its
 * value (or NULL for a user input, whose argument is taken as it is). */
static int input_spec(cx *c, json_t *s, size_t i, const char **kind,
                      const char **target, bool *persistent) {
  char path[128];
  snprintf(path, sizeof path, "graph_module.signature.input_specs[%zu]", i);
  json_t *m;
  const char *k = union_member(c, s, path, &m);
  if (!k)
    return -1;
  char p[256];
  snprintf(p, sizeof p, "%s.%s", path, k);
  *target = NULL;
  *persistent = false;
  if (!strcmp(k, "user_input")) {
    *kind = "user_input";
    return 0;
  }
  const char *tk;
  if (!strcmp(k, "parameter")) {
    *kind = "parameter";
    tk = "parameter_name";
  } else if (!strcmp(k, "buffer")) {
    *kind = "buffer";
    tk = "buffer_name";
    json_t *ps = json_object_get(m, "persistent");
    *persistent = ps && json_is_true(ps);
  } else if (!strcmp(k, "tensor_constant")) {
    *kind = "constant";
    tk = "tensor_constant_name";
  } else {
    return fail(c, path,
                "input kind '%s' is not supported (parameters, buffers, "
                "tensor constants and user inputs are)",
                k);
  }
  json_t *t = get(c, m, p, tk, JSON_STRING);
  if (!t)
    return -1;
  *target = json_string_value(t);
  return 0;
}

static const char *kind_enum(const char *kind) {
  if (!strcmp(kind, "parameter"))
    return "INPUT_KIND_PARAMETER";
  if (!strcmp(kind, "buffer"))
    return "INPUT_KIND_BUFFER";
  if (!strcmp(kind, "constant"))
    return "INPUT_KIND_CONSTANT";
  return "INPUT_KIND_USER_INPUT";
}

/* Output specs -> the convention's outputs. */
static json_t *output_specs(cx *c, json_t *specs, size_t n_outputs) {
  const char *path = "graph_module.signature.output_specs";
  if (!json_is_array(specs)) {
    fail(c, path, "expected a list");
    return NULL;
  }
  if (json_array_size(specs) != n_outputs) {
    fail(c, path, "has %zu entries, the graph has %zu outputs",
         json_array_size(specs), n_outputs);
    return NULL;
  }
  json_t *r = json_array();
  size_t i;
  json_t *s;
  json_array_foreach(specs, i, s) {
    char p[128];
    snprintf(p, sizeof p, "%s[%zu]", path, i);
    json_t *m;
    const char *k = union_member(c, s, p, &m);
    if (!k)
      goto bad;
    char pk[256];
    snprintf(pk, sizeof pk, "%s.%s", p, k);
    json_t *o = NULL;
    if (!strcmp(k, "user_output")) {
      o = json_pack("{ss}", "kind", "user_output");
    } else if (!strcmp(k, "buffer_mutation")) {
      json_t *t = get(c, m, pk, "buffer_name", JSON_STRING);
      if (!t)
        goto bad;
      o = json_pack("{sssO}", "kind", "buffer_mutation", "target", t);
    } else if (!strcmp(k, "user_input_mutation")) {
      json_t *t = get(c, m, pk, "user_input_name", JSON_STRING);
      if (!t)
        goto bad;
      o = json_pack("{sssO}", "kind", "user_input_mutation", "target", t);
    } else {
      fail(c, p,
           "output kind '%s' is not supported (user outputs, buffer "
           "mutations and user input mutations are)",
           k);
      goto bad;
    }
    if (append(c, r, o))
      goto bad;
  }
  return r;
bad:
  json_decref(r);
  return NULL;
}

/* range_constraints {sym: {min_val, max_val}} -> [{name, min, max?}] */
static json_t *ranges(cx *c, json_t *rc) {
  json_t *r = json_array();
  if (!rc || json_is_null(rc))
    return r;
  if (!json_is_object(rc)) {
    fail(c, "range_constraints", "expected an object");
    json_decref(r);
    return NULL;
  }
  const char *name;
  json_t *v;
  json_object_foreach(rc, name, v) {
    char p[300];
    snprintf(p, sizeof p, "range_constraints['%.200s']", name);
    if (!json_is_object(v)) {
      fail(c, p, "expected an object");
      json_decref(r);
      return NULL;
    }
    json_t *o = json_pack("{ss}", "name", name);
    json_t *lo = json_object_get(v, "min_val"),
           *hi = json_object_get(v, "max_val");
    /* an unbounded end is null (or absent); torch writes a bound it
     * cannot represent as a huge number, which jansson reads as a real */
    if (lo && json_is_integer(lo))
      json_object_set_new(o, "min", json_integer(json_integer_value(lo)));
    else if (lo && !json_is_null(lo) && !json_is_real(lo)) {
      json_decref(o);
      json_decref(r);
      fail(c, p, "field 'min_val' must be an integer or null");
      return NULL;
    }
    if (hi && json_is_integer(hi))
      json_object_set_new(o, "max", json_integer(json_integer_value(hi)));
    else if (hi && !json_is_null(hi) && !json_is_real(hi)) {
      json_decref(o);
      json_decref(r);
      fail(c, p, "field 'max_val' must be an integer or null");
      return NULL;
    }
    if (append(c, r, o)) {
      json_decref(r);
      return NULL;
    }
  }
  return r;
}

/* ---- weights and constants ---- */

static int elem_size(const char *dtype) {
  static const struct {
    const char *n;
    int s;
  } t[] = {{"SCALAR_TYPE_BYTE", 1},           {"SCALAR_TYPE_CHAR", 1},
           {"SCALAR_TYPE_SHORT", 2},          {"SCALAR_TYPE_INT", 4},
           {"SCALAR_TYPE_LONG", 8},           {"SCALAR_TYPE_HALF", 2},
           {"SCALAR_TYPE_FLOAT", 4},          {"SCALAR_TYPE_DOUBLE", 8},
           {"SCALAR_TYPE_COMPLEXHALF", 4},    {"SCALAR_TYPE_COMPLEXFLOAT", 8},
           {"SCALAR_TYPE_COMPLEXDOUBLE", 16}, {"SCALAR_TYPE_BOOL", 1},
           {"SCALAR_TYPE_BFLOAT16", 2},       {"SCALAR_TYPE_UINT16", 2}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!strcmp(t[i].n, dtype))
      return t[i].s;
  return 0;
}

/* The byte extent a converted TensorMeta spans; -1 if not all sizes,
 * strides and the offset are integers or it overflows. */
static int64_t extent_bytes(json_t *meta) {
  int64_t es = elem_size(json_string_value(json_object_get(meta, "dtype")));
  json_t *sz = json_object_get(meta, "sizes"),
         *st = json_object_get(meta, "strides");
  if (json_array_size(sz) != json_array_size(st))
    return -1;
  int64_t off = 0;
  json_t *so = json_object_get(meta, "storage_offset");
  if (so) {
    json_t *v = json_object_get(so, "as_int");
    if (!json_is_integer(v) || json_integer_value(v) < 0)
      return -1;
    off = json_integer_value(v);
  }
  int64_t last = off;
  for (size_t i = 0; i < json_array_size(sz); i++) {
    json_t *s = json_object_get(json_array_get(sz, i), "as_int");
    json_t *d = json_object_get(json_array_get(st, i), "as_int");
    if (!json_is_integer(s) || !json_is_integer(d))
      return -1;
    int64_t n = json_integer_value(s), k = json_integer_value(d);
    if (n < 0 || k < 0 || n > ((int64_t)1 << 40) || k > ((int64_t)1 << 40))
      return -1;
    if (n == 0)
      return 0;
    if (__builtin_mul_overflow(n - 1, k, &n) ||
        __builtin_add_overflow(last, n, &last))
      return -1;
  }
  int64_t bytes;
  if (__builtin_add_overflow(last, 1, &bytes) ||
      __builtin_mul_overflow(bytes, es, &bytes))
    return -1;
  return bytes;
}

/* Reads the tensors a config member lists ({"config": {target: {path_name,
 * tensor_meta, use_pickle}}}) from folder `dir`. Adds each to p->tensors
 * and its converted metadata to `metas` (by target). */
static int read_tensors(cx *c, archive *a, const char *config, const char *dir,
                        pt2_program *p, json_t *metas) {
  json_t *cfg;
  if (read_json(c, a, config, &cfg))
    return -1;
  int rc = -1;
  json_t *t = get(c, cfg, "", "config", JSON_OBJECT);
  if (!t)
    goto out;
  const char *target;
  json_t *v;
  json_object_foreach(t, target, v) {
    c->member = config;
    char path[300];
    snprintf(path, sizeof path, "config['%.200s']", target);
    json_t *pn = get(c, v, path, "path_name", JSON_STRING);
    json_t *tm = pn ? get(c, v, path, "tensor_meta", JSON_OBJECT) : NULL;
    if (!tm)
      goto out;
    json_t *up = json_object_get(v, "use_pickle");
    if (up && json_is_true(up)) {
      fail(c, path,
           "the tensor is pickled (use_pickle), which this reader does not "
           "read");
      goto out;
    }
    const char *pname = json_string_value(pn);
    if (!*pname || strstr(pname, "..") || strchr(pname, '/')) {
      fail(c, path, "path_name '%.100s' is not a plain file name", pname);
      goto out;
    }
    char tp[320];
    snprintf(tp, sizeof tp, "%s.tensor_meta", path);
    json_t *meta = tensor_meta(c, tm, tp);
    if (!meta)
      goto out;
    json_object_set_new(metas, target, meta);
    int64_t need = extent_bytes(meta);
    if (need < 0) {
      fail(c, tp,
           "sizes, strides and offset must be non-negative integers "
           "within range");
      goto out;
    }
    char rel[512];
    snprintf(rel, sizeof rel, "%s/%s", dir, pname);
    uint8_t *data;
    size_t len;
    int r = read_member(c, a, rel, PT2_MAX_MEMBER_BYTES, &data, &len);
    if (r > 0) {
      c->member = config;
      fail(c, path, "its data, %s%s, is missing from the archive", a->prefix,
           rel);
      goto out;
    }
    if (r < 0)
      goto out;
    if ((uint64_t)len < (uint64_t)need) {
      free(data);
      fail(c, NULL, "holds %zu bytes; the tensor '%s' needs %" PRId64, len,
           target, need);
      goto out;
    }
    pt2_tensor *nt =
        realloc(p->tensors, (p->n_tensors + 1) * sizeof *p->tensors);
    char *tcopy = strdup(target);
    if (!nt || !tcopy) {
      free(nt ? NULL : data);
      free(tcopy);
      if (nt)
        p->tensors = nt;
      fail(c, NULL, "out of memory");
      goto out;
    }
    p->tensors = nt;
    p->tensors[p->n_tensors++] =
        (pt2_tensor){.target = tcopy, .input = -1, .data = data, .len = len};
  }
  rc = 0;
out:
  json_decref(cfg);
  return rc;
}

/* ---- the whole program ---- */

static int convert(cx *c, archive *a, json_t *root, pt2_program *p) {
  c->member = "models/model.json";
  json_t *sv = get(c, root, "", "schema_version", JSON_OBJECT);
  if (!sv)
    return -1;
  json_t *maj = get(c, sv, "schema_version", "major", JSON_INTEGER);
  json_t *min =
      maj ? get(c, sv, "schema_version", "minor", JSON_INTEGER) : NULL;
  if (!min)
    return -1;
  if (json_integer_value(maj) != PT2_SCHEMA_MAJOR)
    return fail(c, "schema_version",
                "version %" JSON_INTEGER_FORMAT ".%" JSON_INTEGER_FORMAT
                " is not supported (this reader reads %d.x, torch 2.13's)",
                json_integer_value(maj), json_integer_value(min),
                PT2_SCHEMA_MAJOR);
  json_t *tv = json_object_get(root, "torch_version");
  const char *torch_version = json_is_string(tv) ? json_string_value(tv) : "";
  json_t *gm = get(c, root, "", "graph_module", JSON_OBJECT);
  json_t *g = gm ? get(c, gm, "graph_module", "graph", JSON_OBJECT) : NULL;
  json_t *sig = g ? get(c, gm, "graph_module", "signature", JSON_OBJECT) : NULL;
  if (!sig)
    return -1;
  json_t *cov = json_object_get(g, "custom_obj_values");
  if (json_object_size(cov) > 0)
    return fail(c, "graph_module.graph.custom_obj_values",
                "custom objects (torchbind) are not supported");

  json_t *graph = json_object(), *ops = json_object();
  json_t *conv = json_object();
  p->convention = conv;
  json_t *gmod = json_pack("{s{sisi}sossss}", "schema_version", "major", 1,
                           "minor", 0, "graph", graph, "torch_version",
                           torch_version, "producer", "torch.export .pt2");
  int rc = -1;
  if (!gmod) { /* the graph went with it: "o" steals even on failure */
    fail(c, NULL, "out of memory");
    goto out;
  }

  /* side tables */
  if (side_table(c, g, graph, "tensor_values", "tensor_values", "meta",
                 tensor_meta) ||
      side_table(c, g, graph, "sym_int_values", "sym_int_values", "value",
                 sym_int) ||
      side_table(c, g, graph, "sym_float_values", "sym_float_values", "value",
                 sym_float_value) ||
      side_table(c, g, graph, "sym_bool_values", "sym_bool_values", "value",
                 sym_bool_value))
    goto out;

  /* inputs */
  json_t *gin = get(c, g, "graph_module.graph", "inputs", JSON_ARRAY);
  json_t *specs =
      gin ? get(c, sig, "graph_module.signature", "input_specs", JSON_ARRAY)
          : NULL;
  if (!specs)
    goto out;
  if (json_array_size(gin) != json_array_size(specs)) {
    fail(c, "graph_module.signature.input_specs",
         "has %zu entries, the graph has %zu inputs", json_array_size(specs),
         json_array_size(gin));
    goto out;
  }
  json_t *inputs = json_array(), *cin = json_array();
  json_object_set_new(graph, "inputs", inputs);
  json_object_set_new(conv, "inputs", cin);
  json_t *tvals = json_object_get(g, "tensor_values");
  size_t i;
  json_t *v;
  json_array_foreach(gin, i, v) {
    const char *kind = "user_input", *target = NULL;
    bool persistent;
    if (input_spec(c, json_array_get(specs, i), i, &kind, &target, &persistent))
      goto out;
    char path[128];
    snprintf(path, sizeof path, "graph_module.graph.inputs[%zu]", i);
    json_t *arg = argument(c, v, path);
    if (!arg)
      goto out;
    json_t *is = json_pack("{ssso}", "kind", kind_enum(kind), "arg", arg);
    json_t *ci = json_pack("{ss}", "kind", kind);
    if (target) {
      json_object_set_new(is, "target", json_string(target));
      json_object_set_new(ci, "target", json_string(target));
      if (!json_object_get(arg, "as_tensor")) {
        json_decref(is);
        json_decref(ci);
        fail(c, path, "a %s must be a tensor", kind);
        goto out;
      }
    }
    if (persistent)
      json_object_set_new(is, "persistent", json_true());
    json_t *tn = json_object_get(json_object_get(arg, "as_tensor"), "name");
    if (tn) {
      json_object_set(ci, "name", tn);
      json_t *m = json_object_get(tvals, json_string_value(tn));
      if (m) { /* the converted meta is in the graph's table */
        json_t *gtv = json_object_get(graph, "tensor_values");
        size_t k;
        json_t *e;
        json_array_foreach(gtv, k, e) {
          if (!strcmp(json_string_value(json_object_get(e, "name")),
                      json_string_value(tn))) {
            json_object_set(ci, "meta", json_object_get(e, "meta"));
            break;
          }
        }
      }
    } else if (strcmp(kind, "user_input") == 0) {
      json_object_set(ci, "arg", arg);
    }
    if (append(c, inputs, is) || append(c, cin, ci))
      goto out;
  }

  /* nodes */
  json_t *nodes = get(c, g, "graph_module.graph", "nodes", JSON_ARRAY);
  if (!nodes)
    goto out;
  json_t *gnodes = json_array();
  json_object_set_new(graph, "nodes", gnodes);
  json_array_foreach(nodes, i, v) {
    if (append(c, gnodes, node(c, v, i, ops)))
      goto out;
  }
  json_t *olist = json_array();
  json_object_set_new(gmod, "operators", olist);
  const char *oname;
  json_object_foreach(ops, oname, v) {
    if (append(c, olist,
               json_pack("{ssso}", "name", oname, "schema", json_incref(v))))
      goto out;
  }

  /* outputs */
  json_t *gout = get(c, g, "graph_module.graph", "outputs", JSON_ARRAY);
  if (!gout)
    goto out;
  json_t *outs = json_array();
  json_object_set_new(graph, "outputs", outs);
  json_array_foreach(gout, i, v) {
    char path[128];
    snprintf(path, sizeof path, "graph_module.graph.outputs[%zu]", i);
    if (append(c, outs, argument(c, v, path)))
      goto out;
  }
  if (json_array_size(gout) == 0)
    append(c, outs, json_pack("{sb}", "as_none", 1));
  json_t *oconv = output_specs(c, json_object_get(sig, "output_specs"),
                               json_array_size(gout));
  if (!oconv || add(c, conv, "outputs", oconv))
    goto out;

  /* symbols, specs, versions */
  json_t *syms = ranges(c, json_object_get(root, "range_constraints"));
  if (!syms || add(c, conv, "symbols", syms))
    goto out;
  json_t *mcg = json_object_get(gm, "module_call_graph");
  json_t *top = json_is_array(mcg) ? json_array_get(mcg, 0) : NULL;
  json_t *sg = top ? json_object_get(top, "signature") : NULL;
  if (json_is_object(sg)) {
    json_t *is = json_object_get(sg, "in_spec"),
           *os = json_object_get(sg, "out_spec");
    if (json_is_string(is))
      json_object_set(conv, "in_spec", is);
    if (json_is_string(os))
      json_object_set(conv, "out_spec", os);
  }
  json_object_set_new(conv, "torch_version", json_string(torch_version));
  json_object_set_new(
      conv, "export_schema",
      json_pack("[II]", json_integer_value(maj), json_integer_value(min)));

  /* weights and constants (none without an archive: pt2_read_model_json) */
  if (!a)
    goto decode;
  json_t *metas = json_object();
  if (read_tensors(c, a, "data/weights/model_weights_config.json",
                   "data/weights", p, metas)) {
    json_decref(metas);
    goto out;
  }
  {
    uint8_t *probe;
    size_t plen;
    int r = read_member(c, a, "data/constants/model_constants_config.json",
                        PT2_MAX_JSON_BYTES, &probe, &plen);
    if (r < 0) {
      json_decref(metas);
      goto out;
    }
    if (r == 0) {
      free(probe);
      if (read_tensors(c, a, "data/constants/model_constants_config.json",
                       "data/constants", p, metas)) {
        json_decref(metas);
        goto out;
      }
    }
  }
  /* bind each archive tensor to its input; every parameter, buffer and
   * constant input must have one */
  c->member = "models/model.json";
  json_array_foreach(cin, i, v) {
    json_t *t = json_object_get(v, "target");
    if (!t)
      continue;
    size_t k;
    for (k = 0; k < p->n_tensors; k++)
      if (!strcmp(p->tensors[k].target, json_string_value(t)))
        break;
    char path[128];
    snprintf(path, sizeof path, "graph_module.signature.input_specs[%zu]", i);
    if (k == p->n_tensors) {
      json_decref(metas);
      fail(c, path, "%s '%s' has no data in the archive",
           json_string_value(json_object_get(v, "kind")), json_string_value(t));
      goto out;
    }
    p->tensors[k].input = (int)i;
    /* the stored tensor's own layout (the archive's, not the graph's) */
    json_object_set(v, "stored", json_object_get(metas, json_string_value(t)));
  }
  json_decref(metas);

decode:;
  char *text = json_dumps(gmod, JSON_COMPACT);
  if (!text) {
    fail(c, NULL, "out of memory");
    goto out;
  }
  char perr[512];
  ProtobufCMessage *msg = NULL;
  if (pbjson_decode_text(&compiled__v1__graph_module__descriptor, text,
                         strlen(text), &msg, perr, sizeof perr) != 0) {
    free(text);
    fail(c, NULL, "the converted graph is not valid: %s", perr);
    goto out;
  }
  free(text);
  p->graph = (Compiled__V1__GraphModule *)msg;
  rc = 0;
out:
  json_decref(gmod);
  json_decref(ops);
  return rc;
}

int pt2_read(const void *data, size_t len, const char *name, pt2_program **out,
             char *err, size_t errlen) {
  cx c = {.err = err, .errlen = errlen, .member = name};
  *out = NULL;
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t *src = zip_source_buffer_create(len ? data : "", len, 0, &ze);
  if (!src) {
    snprintf(err, errlen, "%s: %s", name, zip_error_strerror(&ze));
    zip_error_fini(&ze);
    return -1;
  }
  archive a = {0};
  a.z = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
  if (!a.z) {
    snprintf(err, errlen, "%s: not a readable zip archive (%s)", name,
             zip_error_strerror(&ze));
    zip_source_free(src);
    zip_error_fini(&ze);
    return -1;
  }
  zip_error_fini(&ze);
  pt2_program *p = calloc(1, sizeof *p);
  json_t *root = NULL;
  uint8_t *fmt = NULL;
  size_t flen;
  int rc = -1;
  if (!p) {
    snprintf(err, errlen, "%s: out of memory", name);
    goto done;
  }
  if (find_prefix(&c, &a))
    goto done;
  int r = read_member(&c, &a, "archive_format", 64, &fmt, &flen);
  if (r != 0)
    goto done;
  if (flen != 3 || memcmp(fmt, "pt2", 3) != 0) {
    fail(&c, NULL, "holds \"%.*s\", not \"pt2\"", (int)(flen < 32 ? flen : 32),
         (const char *)fmt);
    goto done;
  }
  if (read_json(&c, &a, "models/model.json", &root))
    goto done;
  if (convert(&c, &a, root, p))
    goto done;
  rc = 0;
done:
  free(fmt);
  json_decref(root);
  zip_close(a.z); /* read-only: closes the source too */
  if (rc == 0 && !c.failed) {
    *out = p;
    return 0;
  }
  if (c.failed && strncmp(err, name, strlen(name)) != 0) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s: %s", name, err);
    snprintf(err, errlen, "%s", tmp);
  }
  pt2_free(p);
  return -1;
}

int pt2_read_model_json(const void *data, size_t len, pt2_program **out,
                        char *err, size_t errlen) {
  cx c = {.err = err, .errlen = errlen, .member = "models/model.json"};
  *out = NULL;
  if (len > PT2_MAX_JSON_BYTES)
    return fail(&c, NULL, "%zu bytes, more than the limit of %" PRIu64, len,
                PT2_MAX_JSON_BYTES);
  json_error_t je;
  json_t *root =
      json_loadb((const char *)data, len, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return fail(&c, NULL, "not valid JSON: %s (line %d, column %d)", je.text,
                je.line, je.column);
  pt2_program *p = calloc(1, sizeof *p);
  int rc = p ? convert(&c, NULL, root, p) : fail(&c, NULL, "out of memory");
  json_decref(root);
  if (rc == 0 && !c.failed) {
    *out = p;
    return 0;
  }
  pt2_free(p);
  return -1;
}

void pt2_free(pt2_program *p) {
  if (!p)
    return;
  if (p->graph)
    protobuf_c_message_free_unpacked(&p->graph->base, NULL);
  json_decref(p->convention);
  for (size_t i = 0; i < p->n_tensors; i++) {
    free(p->tensors[i].target);
    free(p->tensors[i].data);
  }
  free(p->tensors);
  free(p);
}
