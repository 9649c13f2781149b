/*
 * test_schema.c: the TorchScript schema parser (compiler/schema.c).
 *
 * Three parts. The corpus test parses every schema torch 2.13 ships
 * (compiler/data/torch-2.13-schemas.txt, made by dump_schemas.py next to it)
 * and prints
 * each back, which must reproduce torch's str(schema) byte for byte. The
 * focused tests take real schemas from that corpus by name and check what
 * the compiler relies on: alias queries, default conversion, keyword-only
 * arguments, varargs and names. The malformed tests check that bad input is
 * refused with GC_ESCHEMA and a message naming the offset and what was
 * expected, including types nested past the depth limit.
 *
 * The corpus is found through COMPILED_SRC (the repository root, set by
 * `make test`), or the current directory.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/schema.h"
#include "compiler/torchops.h"
#include "tests/lib/testutil.h"

/* ---- fixtures and helpers ---- */

/* The corpus file, read whole; malloc'd, NUL-terminated; NULL if absent. */
static char *read_corpus(size_t *len) {
  const char *root = getenv("COMPILED_SRC");
  char path[4096];
  snprintf(path, sizeof path, "%s/compiler/data/torch-2.13-schemas.txt",
           root && *root ? root : ".");
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s (set COMPILED_SRC to the repo root)",
                     path);
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (cap - n < 65536) {
      cap = cap ? cap * 2 : 1 << 20;
      buf = realloc(buf, cap + 1);
      cr_assert_not_null(buf);
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0)
      break;
  }
  fclose(f);
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* The corpus line of the operator `qualified` ("aten::add_.Tensor"), parsed
 * into the test's arena. The tests below use real schemas only. */
static gc_schema *real(const char *qualified) {
  size_t len;
  char *corpus = read_corpus(&len);
  size_t qn = strlen(qualified);
  char *line = NULL;
  for (char *l = corpus; l && *l;) {
    char *end = strchr(l, '\n');
    if (strncmp(l, qualified, qn) == 0 && l[qn] == '(') {
      line = gc_arena_strndup(tu_arena, l, end ? (size_t)(end - l) : strlen(l));
      break;
    }
    l = end ? end + 1 : NULL;
  }
  free(corpus);
  cr_assert_not_null(line, "%s is not in the corpus", qualified);
  gc_schema *s = NULL;
  gc_error err;
  gc_error_clear(&err);
  int rc = gc_schema_parse(tu_arena, line, &s, &err);
  cr_assert_eq(rc, 0, "%s: %s", line, err.msg);
  return s;
}

/* Parses a schema written in the test; it must parse. */
static gc_schema *parse(const char *text) {
  gc_schema *s = NULL;
  gc_error err;
  gc_error_clear(&err);
  int rc = gc_schema_parse(tu_arena, text, &s, &err);
  cr_assert_eq(rc, 0, "%s: %s", text, err.msg);
  return s;
}

/* The default of argument `name`, which must exist and have one. */
static const gc_arg *def(const gc_schema *s, const char *name) {
  int i = gc_schema_find_arg(s, name);
  cr_assert_geq(i, 0, "%s has no argument %s", s->qualified, name);
  cr_assert(s->args[i].has_default, "%s.%s has no default", s->qualified, name);
  return &s->args[i].def;
}

static const char *type_str(const gc_type *t) {
  static char buf[256];
  gc_type_format(t, buf, sizeof buf);
  return buf;
}

/* ---- the corpus ---- */

Test(schema_corpus, every_torch_schema_round_trips) {
  size_t len;
  char *corpus = read_corpus(&len);
  gc_arena *a = gc_arena_new(0);
  char out[8192];
  int lines = 0, ok = 0, first_bad = 0; /* first_bad: failures seen */
  char why[2048] = "";
  for (char *l = corpus; *l;) {
    char *end = strchr(l, '\n');
    if (end)
      *end = '\0';
    lines++;
    gc_schema *s = NULL;
    gc_error err;
    gc_error_clear(&err);
    char detail[1024] = "";
    bool good = false;
    if (gc_schema_parse(a, l, &s, &err) == 0) {
      size_t n = gc_schema_format(s, out, sizeof out);
      good = n == strlen(l) && strcmp(out, l) == 0;
      if (!good)
        snprintf(detail, sizeof detail, "printed back as\n  %.900s", out);
    } else {
      snprintf(detail, sizeof detail, "%s", err.msg);
    }
    if (good)
      ok++;
    else if (!first_bad++)
      snprintf(why, sizeof why, "line %d:\n  %.900s\n%s", lines, l, detail);
    if (!end)
      break;
    l = end + 1;
  }
  gc_arena_free(a);
  free(corpus);
  cr_assert_gt(lines, 4000, "the corpus has only %d lines", lines);
  cr_assert_eq(ok, lines, "%d of %d schemas round-trip; first failure at %s",
               ok, lines, why);
}

/* The compiled-in table finds every schema of the dump by its name with a
 * binary search (which needs the dump's order to be the names' order), and
 * nothing else. */
Test(schema_corpus, torch_table_finds_every_operator) {
  size_t len;
  char *corpus = read_corpus(&len);
  int lines = 0;
  for (char *l = corpus; *l;) {
    char *end = strchr(l, '\n');
    if (end)
      *end = '\0';
    char name[512];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(l, "("), l);
    const char *got = gc_torch_schema(name);
    cr_assert_not_null(got, "%s not found", name);
    cr_assert_str_eq(got, l);
    lines++;
    if (!end)
      break;
    l = end + 1;
  }
  free(corpus);
  cr_assert_gt(lines, 4000);
  const char *absent[] = {"aten::mm.out2", "aten::add_",  "aten::add.Tensorx",
                          "aten::ad",      "aten::",      "",
                          "zzz::relu",     "aten::relu.", "Aten::relu",
                          "aten::relu("};
  for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
    cr_assert_null(gc_torch_schema(absent[i]), "%s", absent[i]);
}

Test(schema_corpus, torch_table_covers_2_13_only) {
  const char *yes[] = {"2.13",     "2.13.0",          "2.13.1+cu128",
                       "2.13.0a0", "2.13.0a0+gitabc", "2.13.0+cpu"};
  const char *no[] = {"",      "1.13.1", "2.12.0", "2.130", "2.1.0",
                      "12.13", "2.1",    "2.14.0", NULL};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
    cr_assert(gc_torch_table_covers(yes[i]), "%s", yes[i]);
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
    cr_assert(!gc_torch_table_covers(no[i]), "%s", no[i] ? no[i] : "NULL");
}

TestSuite(schema, .init = tu_arena_setup, .fini = tu_arena_teardown);

Test(schema, format_counts_like_snprintf) {
  gc_schema *s = real("aten::add_.Tensor");
  const char *want = "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, "
                     "Scalar alpha=1) -> Tensor(a!)";
  char small[10];
  size_t n = gc_schema_format(s, small, sizeof small);
  cr_assert_eq(n, strlen(want));
  cr_assert_str_eq(small, "aten::add");
  cr_assert_eq(gc_schema_format(s, NULL, 0), strlen(want));
  char buf[256];
  gc_schema_format(s, buf, sizeof buf);
  cr_assert_str_eq(buf, want);
}

/* ---- names ---- */

Test(schema, names_and_overloads) {
  gc_schema *s = real("aten::add_.Tensor");
  cr_assert_str_eq(s->ns, "aten");
  cr_assert_str_eq(s->name, "add_");
  cr_assert_str_eq(s->overload, "Tensor");
  cr_assert_str_eq(s->qualified, "aten::add_.Tensor");

  s = real("prim::Uninitialized");
  cr_assert_str_eq(s->ns, "prim");
  cr_assert_str_eq(s->name, "Uninitialized");
  cr_assert_str_eq(s->overload, "");
  cr_assert_str_eq(s->qualified, "prim::Uninitialized");
  cr_assert_eq(s->nargs, 0);
  cr_assert_eq(s->nrets, 1);
  cr_assert_eq(s->rets[0].type->kind, GC_TY_ANY);

  s = parse("my_op(Tensor x) -> Tensor");
  cr_assert_str_eq(s->ns, "");
  cr_assert_str_eq(s->qualified, "my_op");

  s = real("aten::max.dim_max");
  cr_assert_str_eq(s->rets[0].name, "values");
  cr_assert_str_eq(s->rets[1].name, "indices");
  cr_assert_eq(gc_schema_find_arg(s, "keepdim"), 2);
  cr_assert_eq(gc_schema_find_arg(s, "values"), -1, "returns are not args");
  cr_assert_eq(gc_schema_find_arg(s, "nope"), -1);
}

Test(schema, kwarg_only) {
  gc_schema *s = real("aten::add.out");
  cr_assert_eq(s->nargs, 4);
  cr_assert_not(s->args[0].kwarg_only);
  cr_assert_not(s->args[1].kwarg_only);
  cr_assert(s->args[2].kwarg_only); /* alpha */
  cr_assert(s->args[3].kwarg_only); /* out */
  cr_assert_str_eq(s->args[3].name, "out");
}

Test(schema, vararg_and_varret) {
  gc_schema *s = real("aten::format");
  cr_assert(s->vararg);
  cr_assert_not(s->varret);
  cr_assert_eq(s->nargs, 1);
  cr_assert_eq(s->args[0].type->kind, GC_TY_STR);

  s = real("prim::TupleUnpack");
  cr_assert_not(s->vararg);
  cr_assert(s->varret);
  cr_assert_eq(s->nrets, 0);

  s = parse("f(...) -> (Tensor, ...)");
  cr_assert(s->vararg);
  cr_assert(s->varret);
  cr_assert_eq(s->nrets, 1);
  char buf[64];
  gc_schema_format(s, buf, sizeof buf);
  cr_assert_str_eq(buf, "f(...) -> (Tensor, ...)");
}

/* ---- alias queries ---- */

Test(schema, add_inplace) {
  gc_schema *s = real("aten::add_.Tensor");
  cr_assert(gc_schema_arg_is_write(s, 0));
  cr_assert_not(gc_schema_arg_is_write(s, 1));
  cr_assert(gc_schema_is_mutating(s));
  cr_assert_not(gc_schema_is_out_variant(s));
  cr_assert_eq(gc_schema_return_alias(s, 0), 0);
  gc_alias *al = s->args[0].type->alias;
  cr_assert_not_null(al);
  cr_assert_eq(al->nbefore, 1);
  cr_assert_str_eq(al->before[0], "a");
  cr_assert(al->is_write);
  cr_assert_eq(al->nafter, 0);
  cr_assert_null(al->after);
}

Test(schema, add_out) {
  gc_schema *s = real("aten::add.out");
  int out = gc_schema_find_arg(s, "out");
  cr_assert_eq(out, 3);
  cr_assert(gc_schema_arg_is_write(s, out));
  cr_assert_not(gc_schema_arg_is_write(s, 0));
  cr_assert(gc_schema_is_mutating(s));
  cr_assert(gc_schema_is_out_variant(s));
  cr_assert_eq(gc_schema_return_alias(s, 0), out);
}

Test(schema, views) {
  gc_schema *s = real("aten::view");
  cr_assert_not(gc_schema_is_mutating(s));
  cr_assert_not(gc_schema_arg_is_write(s, 0));
  cr_assert_eq(gc_schema_return_alias(s, 0), 0);
  cr_assert_str_eq(type_str(s->args[1].type), "SymInt[]");

  s = real("aten::transpose.int");
  cr_assert_not(gc_schema_is_mutating(s));
  cr_assert_eq(gc_schema_return_alias(s, 0), 0);
  cr_assert_str_eq(type_str(s->args[0].type), "Tensor(a)");
}

Test(schema, split_unbind_chunk) {
  const char *ops[] = {"aten::split.Tensor", "aten::unbind.int", "aten::chunk"};
  for (int k = 0; k < 3; k++) {
    gc_schema *s = real(ops[k]);
    gc_alias *al = s->args[0].type->alias;
    cr_assert_not_null(al, "%s", ops[k]);
    cr_assert_eq(al->nbefore, 1);
    cr_assert_str_eq(al->before[0], "a");
    cr_assert_eq(al->nafter, 1);
    cr_assert_str_eq(al->after[0], "*");
    cr_assert_not(al->is_write);
    gc_type *r = s->rets[0].type;
    cr_assert_eq(r->kind, GC_TY_LIST);
    cr_assert_null(r->alias);
    cr_assert_eq(r->elem->kind, GC_TY_TENSOR);
    cr_assert_str_eq(r->elem->alias->before[0], "a");
    cr_assert_eq(gc_schema_return_alias(s, 0), 0, "%s", ops[k]);
    cr_assert_not(gc_schema_is_mutating(s));
    cr_assert_str_eq(type_str(s->args[0].type), "Tensor(a -> *)");
    cr_assert_str_eq(type_str(r), "Tensor(a)[]");
  }
  gc_schema *s = real("aten::unbind.int");
  cr_assert_eq(def(s, "dim")->kind, GC_ARG_INT);
  cr_assert_eq(def(s, "dim")->i, 0);
}

Test(schema, multi_return_out) {
  gc_schema *s = real("aten::max.dim_max");
  cr_assert_eq(s->nrets, 2);
  int max = gc_schema_find_arg(s, "max");
  int max_values = gc_schema_find_arg(s, "max_values");
  cr_assert_eq(max, 3);
  cr_assert_eq(max_values, 4);
  cr_assert(gc_schema_arg_is_write(s, max));
  cr_assert(gc_schema_arg_is_write(s, max_values));
  cr_assert_eq(gc_schema_return_alias(s, 0), max);
  cr_assert_eq(gc_schema_return_alias(s, 1), max_values);
  cr_assert(gc_schema_is_out_variant(s));
  cr_assert_eq(gc_schema_return_alias(s, 2), -1, "out of range");
  cr_assert_eq(gc_schema_return_alias(s, -1), -1);
}

Test(schema, copy_and_as_strided_inplace) {
  gc_schema *s = real("aten::copy_");
  cr_assert(gc_schema_arg_is_write(s, 0));
  cr_assert_not(gc_schema_arg_is_write(s, 1));
  cr_assert_eq(gc_schema_return_alias(s, 0), 0);
  cr_assert_not(gc_schema_is_out_variant(s));
  cr_assert_eq(def(s, "non_blocking")->kind, GC_ARG_BOOL);
  cr_assert_eq(def(s, "non_blocking")->i, 0);

  s = real("aten::as_strided_");
  cr_assert(gc_schema_arg_is_write(s, 0));
  cr_assert(gc_schema_is_mutating(s));
  cr_assert_eq(gc_schema_return_alias(s, 0), 0);
  cr_assert_eq(def(s, "storage_offset")->kind, GC_ARG_NONE);
  cr_assert_str_eq(type_str(s->args[3].type), "SymInt?");
}

Test(schema, foreach_inplace_list) {
  gc_schema *s = real("aten::_foreach_add_.List");
  gc_type *t = s->args[0].type;
  cr_assert_eq(t->kind, GC_TY_LIST);
  cr_assert_null(t->alias, "the annotation is on the elements");
  cr_assert(t->elem->alias->is_write);
  cr_assert(gc_schema_arg_is_write(s, 0));
  cr_assert_not(gc_schema_arg_is_write(s, 1));
  cr_assert(gc_schema_is_mutating(s));
  cr_assert_not(gc_schema_is_out_variant(s));
  cr_assert_eq(s->nrets, 0);
  cr_assert_str_eq(type_str(t), "Tensor(a!)[]");

  /* The out variant of a void op returns nothing and is still one. */
  s = real("aten::_foreach_add.List_out");
  cr_assert(gc_schema_is_out_variant(s));
}

Test(schema, native_batch_norm_is_not_annotated) {
  /* torch (1.13 and 2.13 alike) does not mark native_batch_norm's
   * running_mean/var as written; _native_batch_norm_legit does. */
  gc_schema *s = real("aten::native_batch_norm");
  cr_assert_eq(s->nrets, 3);
  cr_assert_not(gc_schema_is_mutating(s));
  for (int r = 0; r < 3; r++)
    cr_assert_eq(gc_schema_return_alias(s, r), -1);
  cr_assert_eq(s->args[3].type->kind, GC_TY_OPTIONAL);

  s = real("aten::_native_batch_norm_legit");
  cr_assert(gc_schema_arg_is_write(s, 3));
  cr_assert(gc_schema_arg_is_write(s, 4));
  cr_assert_not(gc_schema_arg_is_write(s, 0));
  cr_assert_not(gc_schema_is_out_variant(s));
  cr_assert_str_eq(type_str(s->args[3].type), "Tensor(a!)");
  s = parse("aten::native_batch_norm(Tensor input, Tensor? weight, Tensor? "
            "bias, Tensor(a!)? running_mean, Tensor(b!)? running_var, bool "
            "training, float momentum, float eps) -> (Tensor, Tensor, "
            "Tensor)");
  cr_assert(gc_schema_arg_is_write(s, 3));
  cr_assert_str_eq(type_str(s->args[3].type), "Tensor(a!)?");

  /* AOTAutograd's functional form returns the new statistics, by name */
  s = real("aten::_native_batch_norm_legit_functional");
  cr_assert_not(gc_schema_is_mutating(s));
  cr_assert_eq(s->nrets, 5);
  cr_assert_str_eq(s->rets[3].name, "running_mean_out");
  cr_assert_str_eq(s->rets[4].name, "running_var_out");
}

Test(schema, container_aliases) {
  gc_schema *s = real("aten::cpu"); /* -> Tensor(b|a) */
  cr_assert_eq(s->rets[0].type->alias->nbefore, 2);
  cr_assert_eq(gc_schema_return_alias(s, 0), 0);

  s = real("aten::append.t");
  cr_assert(gc_schema_arg_is_write(s, 0));
  cr_assert_not(gc_schema_arg_is_write(s, 1));
  cr_assert_eq(gc_schema_return_alias(s, 0), 0);
  cr_assert_str_eq(type_str(s->args[0].type), "t[](a!)");

  s = real("aten::get.str"); /* -> t(*)?: the wildcard names no argument */
  cr_assert_eq(gc_schema_return_alias(s, 0), -1);
  cr_assert_str_eq(type_str(s->rets[0].type), "t(*)?");
  cr_assert_eq(s->rets[0].type->elem->kind, GC_TY_VAR);
  cr_assert_str_eq(s->rets[0].type->elem->name, "t");

  s = real("aten::items.str");
  gc_type *r = s->rets[0].type;
  cr_assert_eq(r->kind, GC_TY_LIST);
  cr_assert_eq(r->elem->kind, GC_TY_TUPLE);
  cr_assert_eq(r->elem->nitems, 2);
  cr_assert_str_eq(type_str(s->args[0].type), "Dict(str, t)");
}

Test(schema, return_alias_picks_the_first_owner) {
  gc_schema *s = parse("f(Tensor(b) x, Tensor(a) y, Tensor(a!)[] z) -> "
                       "(Tensor(c|a), Tensor(b|a), Tensor(*), Tensor(z), "
                       "Tensor)");
  cr_assert_eq(gc_schema_return_alias(s, 0), 1, "c is nobody's; a is y's");
  cr_assert_eq(gc_schema_return_alias(s, 1), 0, "b comes first");
  cr_assert_eq(gc_schema_return_alias(s, 2), -1, "the wildcard");
  cr_assert_eq(gc_schema_return_alias(s, 3), -1, "nobody's set");
  cr_assert_eq(gc_schema_return_alias(s, 4), -1, "fresh");
  cr_assert(gc_schema_arg_is_write(s, 2));
  cr_assert_not(gc_schema_arg_is_write(s, 1));
  cr_assert_not(gc_schema_arg_is_write(s, 3), "out of range");
  cr_assert_eq(s->args[0].alias_of, -1);
}

Test(schema, hostile_sizes_stay_linear, .timeout = 10) {
  /* 64 arguments and 1024 returns with 16 alias sets each, none shared:
   * answering every query must not take args x returns x sets. */
  size_t cap = 1 << 20, n = 0;
  char *text = malloc(cap);
  cr_assert_not_null(text);
  n += (size_t)sprintf(text + n, "f(");
  for (int i = 0; i < GC_SCHEMA_MAX_ARGS; i++) {
    n += (size_t)sprintf(text + n, "%sTensor(", i ? ", " : "");
    for (int k = 0; k < GC_SCHEMA_MAX_ALIAS_SETS; k++)
      n += (size_t)sprintf(text + n, "%sa%d_%d", k ? "|" : "", i, k);
    n += (size_t)sprintf(text + n, ") x%d", i);
  }
  n += (size_t)sprintf(text + n, ") -> (");
  for (int r = 0; r < GC_SCHEMA_MAX_RETURNS; r++) {
    n += (size_t)sprintf(text + n, "%sTensor(", r ? ", " : "");
    for (int k = 0; k < GC_SCHEMA_MAX_ALIAS_SETS; k++)
      n += (size_t)sprintf(text + n, "%sr%d_%d", k ? "|" : "", r, k);
    n += (size_t)sprintf(text + n, ")");
  }
  sprintf(text + n, ")");
  gc_schema *s = parse(text);
  for (int r = 0; r < s->nrets; r++)
    cr_assert_eq(gc_schema_return_alias(s, r), -1);
  cr_assert_not(gc_schema_is_out_variant(s));
  free(text);
}

Test(schema, class_and_special_types) {
  gc_schema *s = real("quantized::linear");
  cr_assert_eq(s->args[1].type->kind, GC_TY_CLASS);
  cr_assert_str_eq(s->args[1].type->name,
                   "__torch__.torch.classes.quantized.LinearPackedParamsBase");
  s = real("aten::eq.enum");
  cr_assert_eq(s->args[0].type->kind, GC_TY_ANY_ENUM);
  s = real("prim::id");
  cr_assert_eq(s->args[0].type->kind, GC_TY_OPTIONAL);
  cr_assert_eq(s->args[0].type->elem->kind, GC_TY_ANY_CLASS);
  s = real("aten::wait");
  cr_assert_eq(s->args[0].type->kind, GC_TY_FUTURE);
  cr_assert_eq(s->args[0].type->elem->kind, GC_TY_VAR);
  cr_assert_eq(s->args[0].type->nitems, 0, "the element is in elem only");
  cr_assert_null(s->args[0].type->items);
  s = parse("f(Union(int, str, Tensor) u, Await(t) w) -> ()");
  cr_assert_eq(s->args[0].type->kind, GC_TY_UNION);
  cr_assert_eq(s->args[0].type->nitems, 3);
  cr_assert_eq(s->args[1].type->kind, GC_TY_AWAIT);
}

/* ---- defaults ---- */

Test(schema, scalar_defaults) {
  gc_schema *s = real("aten::add.Tensor");
  cr_assert_eq(def(s, "alpha")->kind, GC_ARG_INT);
  cr_assert_eq(def(s, "alpha")->i, 1);
  cr_assert_str_eq(s->args[2].default_text, "1");

  s = real("aten::layer_norm");
  cr_assert_eq(def(s, "eps")->kind, GC_ARG_FLOAT);
  cr_assert_float_eq(def(s, "eps")->f, 1e-05, 1e-20);
  cr_assert_str_eq(s->args[4].default_text, "1.0000000000000001e-05");
  cr_assert_eq(def(s, "weight")->kind, GC_ARG_NONE);
  cr_assert_eq(def(s, "cudnn_enable")->kind, GC_ARG_BOOL);
  cr_assert_eq(def(s, "cudnn_enable")->i, 1);

  s = real("aten::rrelu");
  cr_assert_eq(def(s, "lower")->kind, GC_ARG_FLOAT);
  cr_assert_float_eq(def(s, "lower")->f, 0.125, 1e-15);
  cr_assert_float_eq(def(s, "upper")->f, 1.0 / 3, 1e-15);

  s = real("aten::hardtanh");
  cr_assert_eq(def(s, "min_val")->kind, GC_ARG_INT);
  cr_assert_eq(def(s, "min_val")->i, -1);

  s = parse("f(Scalar a=True, Scalar b=2.5, float c=3, complex d=1., SymFloat "
            "e=0.5, SymBool g=False) -> ()");
  cr_assert_eq(def(s, "a")->kind, GC_ARG_BOOL);
  cr_assert_eq(def(s, "a")->i, 1);
  cr_assert_eq(def(s, "b")->kind, GC_ARG_FLOAT);
  cr_assert_eq(def(s, "c")->kind, GC_ARG_FLOAT);
  cr_assert_float_eq(def(s, "c")->f, 3.0, 0);
  cr_assert_eq(def(s, "d")->kind, GC_ARG_FLOAT);
  cr_assert_eq(def(s, "e")->kind, GC_ARG_FLOAT);
  cr_assert_eq(s->args[4].type->kind, GC_TY_SYMFLOAT);
  cr_assert_eq(def(s, "g")->kind, GC_ARG_BOOL);
  cr_assert_eq(def(s, "g")->i, 0);
  cr_assert_eq(s->args[5].type->kind, GC_TY_SYMBOOL);
}

Test(schema, infinities) {
  gc_schema *s =
      parse("f(float a=inf, float b=-inf, Scalar c=-inf, float? d=nan) -> ()");
  cr_assert_eq(def(s, "a")->kind, GC_ARG_FLOAT);
  cr_assert(isinf(def(s, "a")->f) && def(s, "a")->f > 0);
  cr_assert(isinf(def(s, "b")->f) && def(s, "b")->f < 0);
  cr_assert(isinf(def(s, "c")->f) && def(s, "c")->f < 0);
  cr_assert(isnan(def(s, "d")->f));
  char buf[128];
  gc_schema_format(s, buf, sizeof buf);
  cr_assert_str_eq(
      buf, "f(float a=inf, float b=-inf, Scalar c=-inf, float? d=nan) -> ()");
}

Test(schema, none_defaults) {
  gc_schema *s = real("aten::empty.memory_format");
  cr_assert_eq(def(s, "dtype")->kind, GC_ARG_NONE);
  cr_assert_eq(def(s, "layout")->kind, GC_ARG_NONE);
  cr_assert_eq(def(s, "device")->kind, GC_ARG_NONE);
  cr_assert_eq(def(s, "memory_format")->kind, GC_ARG_NONE);
  cr_assert_str_eq(type_str(s->args[1].type), "ScalarType?");

  s = real("aten::split.str");
  cr_assert_eq(def(s, "separator")->kind, GC_ARG_NONE);
  cr_assert_str_eq(type_str(s->args[1].type), "str?");

  /* rounding_mode has no default: it is a required str? */
  s = real("aten::div.Tensor_mode");
  int i = gc_schema_find_arg(s, "rounding_mode");
  cr_assert(s->args[i].kwarg_only);
  cr_assert_not(s->args[i].has_default);
  cr_assert_null(s->args[i].default_text);
  s = parse("f(Tensor self, *, str? rounding_mode=None) -> Tensor");
  cr_assert_eq(def(s, "rounding_mode")->kind, GC_ARG_NONE);
}

Test(schema, enum_defaults) {
  /* torch prints c10 numbers: dtype=4 is long (proto 5). */
  gc_schema *s = real("aten::randperm");
  cr_assert_eq(def(s, "dtype")->kind, GC_ARG_SCALAR_TYPE);
  cr_assert_eq(def(s, "dtype")->i, 5);

  /* memory_format=0 is contiguous_format (proto 1). */
  s = real("aten::contiguous");
  cr_assert_eq(def(s, "memory_format")->kind, GC_ARG_MEMORY_FORMAT);
  cr_assert_eq(def(s, "memory_format")->i, 1);
  cr_assert_eq(gc_schema_return_alias(s, 0), 0);

  s = parse("f(ScalarType a=long, ScalarType b=float, ScalarType? c=half, "
            "ScalarType d=bfloat16, ScalarType e=int, ScalarType f=bool, "
            "ScalarType g=double, ScalarType h=Long, ScalarType i=uint8, "
            "ScalarType j=6) -> ()");
  const struct {
    const char *name;
    int64_t want;
  } dtypes[] = {{"a", 5},  {"b", 8}, {"c", 7}, {"d", 14}, {"e", 4},
                {"f", 13}, {"g", 9}, {"h", 5}, {"i", 1},  {"j", 8}};
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++) {
    cr_assert_eq(def(s, dtypes[k].name)->kind, GC_ARG_SCALAR_TYPE);
    cr_assert_eq(def(s, dtypes[k].name)->i, dtypes[k].want, "%s",
                 dtypes[k].name);
  }

  s = parse("f(MemoryFormat a=contiguous_format, MemoryFormat b="
            "channels_last, MemoryFormat? c=channels_last_3d, MemoryFormat "
            "d=preserve_format, MemoryFormat e=1) -> ()");
  cr_assert_eq(def(s, "a")->i, 1);
  cr_assert_eq(def(s, "b")->i, 2);
  cr_assert_eq(def(s, "c")->i, 3);
  cr_assert_eq(def(s, "d")->i, 4);
  cr_assert_eq(def(s, "e")->i, 4, "c10 Preserve is 1");
  cr_assert_eq(def(s, "a")->kind, GC_ARG_MEMORY_FORMAT);

  s = parse("f(Layout a=strided, Layout? b=sparse_coo, Layout c=0, Layout "
            "d=sparse_csr) -> ()");
  cr_assert_eq(def(s, "a")->kind, GC_ARG_LAYOUT);
  cr_assert_eq(def(s, "a")->i, 7);
  cr_assert_eq(def(s, "b")->i, 1);
  cr_assert_eq(def(s, "c")->i, 7);
  cr_assert_eq(def(s, "d")->i, 2);
}

Test(schema, reduction_defaults) {
  gc_schema *s = real("aten::mse_loss");
  cr_assert_eq(def(s, "reduction")->kind, GC_ARG_INT);
  cr_assert_eq(def(s, "reduction")->i, 1);
  s = parse("f(int reduction=Mean, int r2=Sum) -> ()");
  cr_assert_eq(def(s, "reduction")->kind, GC_ARG_INT);
  cr_assert_eq(def(s, "reduction")->i, 1);
  cr_assert_eq(def(s, "r2")->i, 2);
}

Test(schema, device_defaults) {
  gc_schema *s = parse("f(Device a=\"cuda:1\", Device b=cpu, Device? c=cuda:0, "
                       "Device d='meta') -> ()");
  cr_assert_eq(def(s, "a")->kind, GC_ARG_DEVICE);
  cr_assert_str_eq(def(s, "a")->dev.type, "cuda");
  cr_assert_eq(def(s, "a")->dev.index, 1);
  cr_assert_str_eq(def(s, "b")->dev.type, "cpu");
  cr_assert_eq(def(s, "b")->dev.index, -1);
  cr_assert_str_eq(def(s, "c")->dev.type, "cuda");
  cr_assert_eq(def(s, "c")->dev.index, 0);
  cr_assert_str_eq(def(s, "d")->dev.type, "meta");
  char buf[128];
  gc_schema_format(s, buf, sizeof buf);
  cr_assert_str_eq(buf,
                   "f(Device a=\"cuda:1\", Device b=cpu, Device? c=cuda:0, "
                   "Device d='meta') -> ()");
}

Test(schema, string_defaults) {
  gc_schema *s = real("aten::strip");
  cr_assert_eq(def(s, "chars")->kind, GC_ARG_STRING);
  cr_assert_str_eq(def(s, "chars")->s, " \n\t\f\v");
  cr_assert_str_eq(s->args[1].default_text, "\" \\n\\t\\f\\v\"");

  s = real("aten::_test_string_default");
  cr_assert_str_eq(def(s, "a")->s, "\"'\\");
  cr_assert_str_eq(def(s, "b")->s, "\"'\\");

  s = parse("f(str a='single', str b=\"\\x41\\101\", str c=\"\") -> ()");
  cr_assert_str_eq(def(s, "a")->s, "single");
  cr_assert_str_eq(def(s, "b")->s, "AA");
  cr_assert_str_eq(def(s, "c")->s, "");
}

Test(schema, list_defaults) {
  gc_schema *s = real("aten::max_pool2d");
  const gc_arg *stride = def(s, "stride");
  cr_assert_eq(stride->kind, GC_ARG_INTS);
  cr_assert_eq(stride->n, 0, "[] stays empty");
  const gc_arg *padding = def(s, "padding");
  cr_assert_eq(padding->kind, GC_ARG_INTS);
  cr_assert_eq(padding->n, 2);
  cr_assert_eq(padding->ints[0], 0);
  cr_assert_eq(padding->ints[1], 0);
  const gc_arg *dilation = def(s, "dilation");
  cr_assert_eq(dilation->kind, GC_ARG_INTS);
  cr_assert_eq(dilation->n, 2);
  cr_assert_eq(dilation->ints[0], 1);
  cr_assert_eq(dilation->ints[1], 1);
  cr_assert_str_eq(s->args[3].default_text, "0");
  cr_assert_eq(s->args[1].type->fixed_len, 2);

  s = real("aten::fft_fft2");
  const gc_arg *dim = def(s, "dim");
  cr_assert_eq(dim->kind, GC_ARG_INTS);
  cr_assert_eq(dim->n, 2, "int[1] dim=[-2, -1] keeps both");
  cr_assert_eq(dim->ints[0], -2);
  cr_assert_eq(dim->ints[1], -1);
  cr_assert_eq(def(s, "s")->kind, GC_ARG_NONE);

  s = real("aten::upsample_nearest2d.vec");
  int i = gc_schema_find_arg(s, "scale_factors");
  gc_type *t = s->args[i].type;
  cr_assert_eq(t->kind, GC_TY_OPTIONAL);
  cr_assert_eq(t->elem->kind, GC_TY_LIST);
  cr_assert_eq(t->elem->fixed_len, -1);
  cr_assert_eq(t->elem->elem->kind, GC_TY_FLOAT);
  cr_assert_str_eq(type_str(t), "float[]?");
  cr_assert_not(s->args[i].has_default);

  s = parse("f(bool[3] output_mask=[True, True, True], bool[2] m=True, "
            "float[] fs=[1, 2.5], float[2] f2=0.5, str[] ss=['a', \"b\"], "
            "Scalar[] si=[1, 2], Scalar[] sf=[1, 2.5], Tensor[] ts=[], "
            "Tensor?[] ots=[], SymInt[2] sym=3) -> ()");
  const gc_arg *mask = def(s, "output_mask");
  cr_assert_eq(mask->kind, GC_ARG_BOOLS);
  cr_assert_eq(mask->n, 3);
  for (int k = 0; k < 3; k++)
    cr_assert_eq(mask->ints[k], 1);
  cr_assert_eq(def(s, "m")->kind, GC_ARG_BOOLS);
  cr_assert_eq(def(s, "m")->n, 2);
  const gc_arg *fs = def(s, "fs");
  cr_assert_eq(fs->kind, GC_ARG_FLOATS);
  cr_assert_float_eq(fs->floats[0], 1.0, 0);
  cr_assert_float_eq(fs->floats[1], 2.5, 0);
  cr_assert_eq(def(s, "f2")->kind, GC_ARG_FLOATS);
  cr_assert_eq(def(s, "f2")->n, 2);
  const gc_arg *ss = def(s, "ss");
  cr_assert_eq(ss->kind, GC_ARG_STRINGS);
  cr_assert_str_eq(ss->strs[1], "b");
  cr_assert_eq(def(s, "si")->kind, GC_ARG_INTS);
  cr_assert_eq(def(s, "sf")->kind, GC_ARG_FLOATS);
  cr_assert_eq(def(s, "ts")->kind, GC_ARG_TENSORS);
  cr_assert_eq(def(s, "ts")->n, 0);
  cr_assert_eq(def(s, "ots")->kind, GC_ARG_OPT_TENSORS);
  cr_assert_eq(def(s, "sym")->kind, GC_ARG_INTS);
  cr_assert_eq(def(s, "sym")->n, 2);
  cr_assert_eq(def(s, "sym")->ints[1], 3);
}

Test(schema, printing_normalizes_like_torch) {
  const struct {
    const char *in, *out;
  } cases[] = {
      {"  f( Tensor  x ,int y ) ->Tensor ", "f(Tensor x, int y) -> Tensor"},
      {"f(Tensor(a -> a) x) -> (Tensor)", "f(Tensor(a) x) -> Tensor"},
      {"f(Tensor x, *) -> (Tensor a)", "f(Tensor x) -> Tensor a"},
      {"f() -> ((Tensor, int))", "f() -> ((Tensor, int))"},
      {"f(int[02] x) -> (...)", "f(int[2] x) -> ..."},
      {"f(Tensor(a! -> b|c) x) -> ()", "f(Tensor(a! -> b|c) x) -> ()"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    char buf[128];
    gc_schema_format(parse(cases[k].in), buf, sizeof buf);
    cr_assert_str_eq(buf, cases[k].out);
  }
}

Test(schema, depth_limit_boundary) {
  /* "int" + 31 "[]" is 32 levels deep: the most there may be. */
  char text[256] = "f(int";
  for (int k = 0; k < GC_SCHEMA_MAX_DEPTH - 1; k++)
    strcat(text, "[]");
  strcat(text, " x) -> ()");
  gc_schema *s = parse(text);
  char buf[256];
  gc_schema_format(s, buf, sizeof buf);
  cr_assert_str_eq(buf, text);
}

Test(schema, null_error_and_small_arena) {
  gc_schema *s = NULL;
  cr_assert_eq(gc_schema_parse(tu_arena, "f(", &s, NULL), GC_ESCHEMA);
  cr_assert_null(s);
  gc_arena *tiny = gc_arena_new(1);
  gc_error err;
  gc_error_clear(&err);
  cr_assert_eq(gc_schema_parse(tiny, "aten::f(Tensor x) -> Tensor", &s, &err),
               GC_ENOMEM);
  cr_assert_str_eq(err.msg, "schema: at offset 0: out of memory");
  gc_arena_free(tiny);
}

Test(schema, every_allocation_failure_is_reported) {
  /* Grow the arena's limit until the parse fits: every smaller limit must
   * fail cleanly with GC_ENOMEM, whichever allocation it hits. */
  const char *text =
      "aten::f.o(Tensor(a!) self, int[2] k=1, float[] f=[1., 2.], str s=\"x\", "
      "*, Device d=\"cuda:1\", Dict(str, t)(b -> *)[]? m=None) -> (Tensor(a!) "
      "x, (int, t) y, ...)";
  int fails = 0;
  for (size_t limit = 1;; limit += 16) {
    gc_arena *a = gc_arena_new(limit);
    gc_schema *s = NULL;
    gc_error err;
    gc_error_clear(&err);
    int rc = gc_schema_parse(a, text, &s, &err);
    gc_arena_free(a);
    if (rc == 0)
      break;
    cr_assert_eq(rc, GC_ENOMEM, "limit %zu: %s", limit, err.msg);
    cr_assert_null(s);
    fails++;
  }
  cr_assert_gt(fails, 10);
}

/* ---- malformed schemas ---- */

/* Criterion copies parameters into the test's process: no pointers. */
struct bad {
  char text[64]; /* the schema */
  char msg[128]; /* the whole error message expected */
};

ParameterizedTestParameters(schema_malformed, refused) {
  static struct bad cases[] = {
      {"", "schema: at offset 0: expected an operator name, found end of "
           "input"},
      {"aten::add(Tensor self",
       "schema: at offset 21: expected ',' or ')' after an argument, found end "
       "of input"},
      {"aten::add(Tensor self -> Tensor",
       "schema: at offset 22: expected ',' or ')' after an argument, found "
       "'-'"},
      {"aten::add(Tensor self) Tensor",
       "schema: at offset 23: expected '->' after the arguments, found 'T'"},
      {"aten::add(Tensr self) -> Tensor",
       "schema: at offset 10: unknown type 'Tensr'"},
      {"aten::add(Tensor) -> Tensor",
       "schema: at offset 16: expected an argument name, found ')'"},
      {"aten::add_(Tensor(a! self) -> Tensor",
       "schema: at offset 21: expected ')' to close the alias annotation, "
       "found 's'"},
      {"aten::add_(Tensor(!) self) -> Tensor",
       "schema: at offset 18: expected an alias set name or '*', found '!'"},
      {"f(int[2 x) -> ()",
       "schema: at offset 8: expected ']' to close the list type, found 'x'"},
      {"f(Dict(int) x) -> ()", "schema: at offset 2: Dict takes 2 types, found "
                               "1"},
      {"f(int x=1.5) -> ()",
       "schema: at offset 8: default does not fit type int"},
      {"f(str s=\"abc) -> ()", "schema: at offset 8: unterminated string"},
      {"f(int x=99999999999999999999) -> ()",
       "schema: at offset 8: integer out of range"},
      {"f(int[] x=1) -> ()", "schema: at offset 10: expected '[' to start a "
                             "default of type int[], found '1'"},
      {"f(..., Tensor x) -> ()",
       "schema: at offset 5: expected ')' after '...' (it ends the "
       "arguments), found ','"},
      {"f(Tensor x) -> Tensor y z",
       "schema: at offset 24: expected the end of the schema after the "
       "returns, found 'z'"},
      {"f(*, *, Tensor x) -> ()", "schema: at offset 5: '*' given twice"},
      {"f(Tensor x) -> (Tensor, Tensor",
       "schema: at offset 30: expected ',' or ')' after a return, found end "
       "of input"},
      {"aten::(Tensor x) -> ()",
       "schema: at offset 6: expected an operator name after '::', found '('"},
      {"aten::f.(Tensor x) -> ()",
       "schema: at offset 8: expected an overload name after '.', found '('"},
      {"f(ScalarType d=quux) -> ()",
       "schema: at offset 15: expected a ScalarType name or number as "
       "default"},
      {"f(MemoryFormat m=7) -> ()",
       "schema: at offset 17: MemoryFormat 7 does not exist"},
      {"f(Device d=\"cuda:x\") -> ()",
       "schema: at offset 11: malformed device (expected \"cpu\" or "
       "\"cuda:1\")"},
      {"f(Tensor x=1) -> ()",
       "schema: at offset 11: a default of type Tensor is not supported"},
      {"f(bool[2] m=[True, 1]) -> ()",
       "schema: at offset 19: default does not fit type bool"},
      {"f(str s=\"\\q\") -> ()",
       "schema: at offset 9: unknown escape in a string"},
      {"f(Tensor\x01 x) -> ()",
       "schema: at offset 8: expected an argument name, found byte 0x01"},
      {"f(int[99999999] x) -> ()",
       "schema: at offset 6: list size larger than 1024"},
      {"f(float x=1e999) -> ()", "schema: at offset 10: number out of range"},
      {"f(int x=0x10) -> ()", "schema: at offset 8: malformed number"},
      {"f(float x=-) -> ()",
       "schema: at offset 11: expected a number after '-', found ')'"},
      {"f(Tensor[] t=[x]) -> ()",
       "schema: at offset 13: a default of type Tensor[] must be []"},
      {"f(Tensor x) -> (Tensor y=1)",
       "schema: at offset 24: expected ',' or ')' after a return, found '='"},
      {"f(Tensor(a|b|c|d|e|f|g|h|i|j|k|l|m|n|o|p|q) x) -> ()",
       "schema: at offset 42: more than 16 alias sets"},
      {"f(Future(int, int) x) -> ()",
       "schema: at offset 2: Future takes 1 type, found 2"},
  };
  return cr_make_param_array(struct bad, cases, sizeof cases / sizeof *cases);
}

ParameterizedTest(struct bad *b, schema_malformed, refused,
                  .init = tu_arena_setup, .fini = tu_arena_teardown) {
  gc_schema *s = NULL;
  gc_error err;
  gc_error_clear(&err);
  int rc = gc_schema_parse(tu_arena, b->text, &s, &err);
  cr_assert_eq(rc, GC_ESCHEMA, "%s: rc %d (%s)", b->text, rc, err.msg);
  cr_assert_eq(err.code, GC_ESCHEMA);
  cr_assert_str_eq(err.msg, b->msg, "for %s", b->text);
  cr_assert_null(s);
}

/* Builds "f(" + `depth` times `open` + "int" + `depth` times `close` +
 * " x) -> ()" in a malloc'd string. */
static char *nested(const char *open, const char *close, int depth) {
  size_t no = strlen(open), nc = strlen(close);
  char *t = malloc(32 + (size_t)depth * (no + nc));
  cr_assert_not_null(t);
  char *w = t;
  w += sprintf(w, "f(");
  for (int k = 0; k < depth; k++, w += no)
    memcpy(w, open, no);
  w += sprintf(w, "int");
  for (int k = 0; k < depth; k++, w += nc)
    memcpy(w, close, nc);
  sprintf(w, " x) -> ()");
  return t;
}

Test(schema_malformed, too_many_arguments_or_returns, .init = tu_arena_setup,
     .fini = tu_arena_teardown) {
  for (int rets = 0; rets < 2; rets++) {
    int most = rets ? GC_SCHEMA_MAX_RETURNS : GC_SCHEMA_MAX_ARGS;
    char *text = malloc(16 * ((size_t)most + 2));
    cr_assert_not_null(text);
    size_t n = (size_t)sprintf(text, rets ? "f() -> (" : "f(");
    for (int i = 0; i <= most; i++)
      n += (size_t)sprintf(text + n, "%sint x%d", i ? ", " : "", i);
    sprintf(text + n, rets ? ")" : ") -> ()");
    gc_schema *s = NULL;
    gc_error err;
    gc_error_clear(&err);
    cr_assert_eq(gc_schema_parse(tu_arena, text, &s, &err), GC_ESCHEMA);
    cr_assert(strstr(err.msg, rets ? "more than 1024 returns"
                                   : "more than 64 arguments"),
              "%s", err.msg);
    free(text);
  }
}

/* The timeout also guards against walks that meet a node twice, which at
 * 31 levels of Future(...) would take 2^31 steps. */
Test(schema_malformed, deep_nesting_hits_the_limit, .init = tu_arena_setup,
     .fini = tu_arena_teardown, .timeout = 10) {
  const struct {
    const char *open, *close;
    int depth;
    size_t offset;
  } cases[] = {
      {"Future(", ")", 40, 2 + 32 * 7}, /* refused entering level 33 */
      {"Future(", ")", 100000, 2 + 32 * 7},
      {"(", ")", 5000, 2 + 32},
      {"", "[]", 5000, 2}, /* refused once the list is 33 deep */
      {"", "?", 40, 2},
      {"Dict(str, ", ")", 33, 2 + 31 * 10 + 5}, /* the key at level 33 */
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    char *text = nested(cases[k].open, cases[k].close, cases[k].depth);
    gc_schema *s = NULL;
    gc_error err;
    gc_error_clear(&err);
    cr_assert_eq(gc_schema_parse(tu_arena, text, &s, &err), GC_ESCHEMA);
    char want[128];
    snprintf(want, sizeof want,
             "schema: at offset %zu: type nested deeper than 32 levels",
             cases[k].offset);
    cr_assert_str_eq(err.msg, want, "case %zu", k);
    free(text);
  }
  /* 32 levels of Future(...) around nothing deeper is fine: 31 + int. */
  char *text = nested("Future(", ")", 31);
  gc_schema *s = parse(text);
  char buf[512];
  gc_schema_format(s, buf, sizeof buf);
  cr_assert_str_eq(buf, text);
  free(text);
}
