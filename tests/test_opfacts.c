/*
 * test_opfacts.c: the operator facts table (compiler/opfacts.def) is
 * consistent with itself and with torch 2.13's operators, and its lookups
 * answer as the passes that use them expect.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "compiler/opfacts.h"
#include "compiler/schema.h"
#include "compiler/torchops.h"
#include "tests/lib/testutil.h"

TestSuite(opfacts, .init = tu_arena_setup, .fini = tu_arena_teardown);

/* The parsed torch schema of `qualified` (which must exist). */
static gc_schema *torch_schema(const char *qualified) {
  const char *text = gc_torch_schema(qualified);
  cr_assert_not_null(text, "torch %s has no operator %s",
                     GC_TORCH_TABLE_VERSION, qualified);
  gc_schema *s = NULL;
  cr_assert_eq(gc_schema_parse(tu_arena, text, &s, NULL), 0, "%s", text);
  return s;
}

static bool has_generator(const gc_schema *s) {
  for (int i = 0; i < s->nargs; i++) {
    const gc_type *t = s->args[i].type;
    while (t && t->kind == GC_TY_OPTIONAL)
      t = t->elem;
    if (t && t->kind == GC_TY_GENERATOR)
      return true;
  }
  return false;
}

/* Counts overloads; checks each is random without the table's help. */
static int random_by_rule(const char *text, void *ctx) {
  gc_schema *s = NULL;
  cr_assert_eq(gc_schema_parse(tu_arena, text, &s, NULL), 0, "%s", text);
  cr_expect(has_generator(s) || gc_opfacts_random_name(s->name),
            "%s is a RANDOM row but neither its schema nor its name says so "
            "(the key would change for it)",
            s->qualified);
  (*(int *)ctx)++;
  return 0;
}

static int count(const char *text, void *ctx) {
  (void)text;
  (*(int *)ctx)++;
  return 0;
}

Test(opfacts, names_are_unique_and_well_formed) {
  size_t n;
  const gc_opfacts *t = gc_opfacts_table(&n);
  cr_assert_gt(n, 100);
  for (size_t i = 0; i < n; i++) {
    cr_expect_eq(t[i].index, (int)i);
    const char *sep = strstr(t[i].name, "::");
    cr_expect(sep && sep != t[i].name, "%s: no namespace", t[i].name);
    if (t[i].flags & GC_OF_FAMILY)
      cr_expect(sep && !strchr(sep, '.'),
                "%s: a family row is named without an overload", t[i].name);
    for (size_t j = i + 1; j < n; j++)
      cr_expect(strcmp(t[i].name, t[j].name) != 0, "%s has two rows",
                t[i].name);
    cr_expect_eq(gc_opfacts_of(t[i].name), &t[i], "%s", t[i].name);
  }
}

Test(opfacts, rows_name_torch_operators) {
  size_t n;
  const gc_opfacts *t = gc_opfacts_table(&n);
  for (size_t i = 0; i < n; i++) {
    int k = 0;
    gc_torch_overloads(t[i].name, count, &k);
    cr_expect(
        gc_torch_schema(t[i].name) || ((t[i].flags & GC_OF_FAMILY) && k > 0),
        "%s is not a torch %s operator%s", t[i].name, GC_TORCH_TABLE_VERSION,
        (t[i].flags & GC_OF_FAMILY) ? " or family" : "");
  }
}

Test(opfacts, view_inverses_name_existing_operators) {
  size_t n;
  const gc_opfacts *t = gc_opfacts_table(&n);
  int views = 0;
  for (size_t i = 0; i < n; i++) {
    if (t[i].inverse == GC_INV_NONE) {
      cr_expect_null(t[i].inverse_op, "%s", t[i].name);
      continue;
    }
    views++;
    if (t[i].inverse == GC_INV_IDENTITY) {
      cr_expect_null(t[i].inverse_op, "%s", t[i].name);
      continue;
    }
    cr_assert_not_null(t[i].inverse_op, "%s: an inverse with no operator",
                       t[i].name);
    cr_expect_not_null(gc_opfacts_of(t[i].inverse_op),
                       "%s: its inverse %s has no row", t[i].name,
                       t[i].inverse_op);
    cr_expect_not_null(gc_torch_schema(t[i].inverse_op),
                       "%s: its inverse %s is not a torch operator", t[i].name,
                       t[i].inverse_op);
  }
  cr_expect_geq(views, 20);
}

Test(opfacts, random_rows_are_never_lowered_and_agree_with_the_rule) {
  size_t n;
  const gc_opfacts *t = gc_opfacts_table(&n);
  int nrandom = 0;
  for (size_t i = 0; i < n; i++) {
    if (t[i].flags & GC_OF_RANDOM) {
      nrandom++;
      /* reviewed: rrelu_with_noise is random only in training, and
       * lower_rrelu declines training calls, as lower_dropout does
       * dropout's; native_dropout draws its
       * mask as bernoulli.p does (compiler/lower/random.c) */
      bool reviewed = !strcmp(t[i].name, "aten::rrelu_with_noise") ||
                      !strcmp(t[i].name, "aten::native_dropout") ||
                      !strcmp(t[i].name, "aten::dropout");
      if (!reviewed) {
        cr_expect_eq(t[i].cls, GC_OPC_FALLBACK,
                     "%s draws random numbers but has a lowering", t[i].name);
        cr_expect_null(t[i].lowering, "%s", t[i].name);
      }
      int k = 0;
      gc_torch_overloads(t[i].name, random_by_rule, &k);
      cr_expect_gt(k, 0, "%s: no torch operator", t[i].name);
    } else if (t[i].lowering) {
      cr_expect_neq(t[i].cls, GC_OPC_FALLBACK, "%s", t[i].name);
      /* a lowered operator is a pure function of its inputs */
      const char *text = gc_torch_schema(t[i].name);
      if (!text)
        continue; /* rows_name_torch_operators reports it */
      gc_schema *s = torch_schema(t[i].name);
      /* reviewed: bernoulli.p draws from a seed an ATen call takes from
       * torch's generator at every call (compiler/lower/random.c);
       * native_dropout_backward is random by its name only (it multiplies
       * by the forward's mask, an input) */
      bool drawn = !strcmp(t[i].name, "aten::bernoulli.p") ||
                   !strcmp(t[i].name, "aten::native_dropout_backward");
      cr_expect(drawn || !gc_opfacts_is_random(s), "%s is lowered but random",
                t[i].name);
    }
  }
  cr_expect_geq(nrandom, 10);
}

Test(opfacts, unannotated_writes_name_parameters) {
  size_t n;
  const gc_opfacts *t = gc_opfacts_table(&n);
  int rows = 0;
  for (size_t i = 0; i < n; i++) {
    if (!t[i].writes) {
      cr_expect_null(t[i].writes_when, "%s", t[i].name);
      continue;
    }
    rows++;
    gc_schema *s = torch_schema(t[i].name);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", t[i].writes);
    int params = 0;
    for (char *save, *p = strtok_r(buf, " ", &save); p;
         p = strtok_r(NULL, " ", &save)) {
      int a = gc_schema_find_arg(s, p);
      cr_expect_geq(a, 0, "%s has no parameter %s", t[i].name, p);
      if (a >= 0)
        cr_expect(!gc_schema_arg_is_write(s, a),
                  "%s: %s is annotated after all", t[i].name, p);
      cr_expect(gc_opfacts_writes_param(&t[i], p));
      params++;
    }
    cr_expect_gt(params, 0);
    cr_expect(!gc_opfacts_writes_param(&t[i], "running"),
              "parameter names match whole");
    if (t[i].writes_when) {
      int w = gc_schema_find_arg(s, t[i].writes_when);
      cr_expect(w >= 0 && s->args[w].type->kind == GC_TY_BOOL,
                "%s: condition %s is not a bool parameter", t[i].name,
                t[i].writes_when);
    }
  }
  cr_expect_geq(rows, 6);
}

Test(opfacts, lookups) {
  const gc_opfacts *f = gc_opfacts_of("aten::add.Tensor");
  cr_assert_not_null(f);
  cr_expect_eq(f->cls, GC_OPC_POINTWISE);
  cr_expect_str_eq(f->lowering, "lower_binary");
  const gc_opfacts *fam = gc_opfacts_of("aten::add"); /* wrapped numbers */
  cr_assert_not_null(fam);
  cr_expect(fam->flags & GC_OF_FAMILY);
  cr_expect_eq(fam->cls, GC_OPC_FALLBACK);
  cr_expect_null(fam->lowering);
  cr_expect_null(gc_opfacts_of("aten::add.out"));
  cr_expect_null(gc_opfacts_of("aten::no_such_op"));
  cr_expect_null(gc_opfacts_of(NULL));

  /* view inverses: exact, family, and the in-place form */
  const gc_opfacts *v = gc_opfacts_view(torch_schema("aten::select.int"));
  cr_assert_not_null(v);
  cr_expect_eq(v->inverse, GC_INV_SELECT);
  cr_expect_str_eq(v->inverse_op, "aten::select_scatter");
  cr_expect_null(gc_opfacts_view(torch_schema("aten::select.t")),
                 "select inverts by its int overload only");
  v = gc_opfacts_view(torch_schema("aten::transpose_"));
  cr_assert_not_null(v);
  cr_expect_eq(v->inverse, GC_INV_TRANSPOSE);
  v = gc_opfacts_view(torch_schema("aten::squeeze_.dim"));
  cr_assert_not_null(v);
  cr_expect_eq(v->inverse, GC_INV_RESHAPE);
  v = gc_opfacts_view(torch_schema("aten::split.Tensor"));
  cr_assert_not_null(v);
  cr_expect_eq(v->inverse, GC_INV_SPLIT);
  cr_expect_null(gc_opfacts_view(torch_schema("aten::add.Tensor")));

  cr_expect(gc_opfacts_meta_inplace(torch_schema("aten::t_")));
  cr_expect(gc_opfacts_meta_inplace(torch_schema("aten::squeeze_.dim")));
  cr_expect(!gc_opfacts_meta_inplace(torch_schema("aten::add_.Tensor")));

  cr_expect(gc_opfacts_wrapped_numbers(torch_schema("aten::add.Tensor")));
  cr_expect(gc_opfacts_wrapped_numbers(torch_schema("aten::copy_")));
  cr_expect(!gc_opfacts_wrapped_numbers(torch_schema("aten::maximum")));

  cr_expect(gc_opfacts_is_random(torch_schema("aten::bernoulli")));
  cr_expect(gc_opfacts_is_random(torch_schema("aten::rrelu_with_noise")));
  cr_expect(!gc_opfacts_is_random(torch_schema("aten::native_layer_norm")));

  /* a family name too long for the lookup buffer is simply unknown */
  char longname[400];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  cr_expect_null(gc_opfacts_family("aten", longname));
}

/* The index is built on first use; concurrent first uses must agree. */
static void *lookup_many(void *arg) {
  const gc_opfacts **out = arg;
  for (int i = 0; i < 1000; i++)
    *out = gc_opfacts_of("aten::mm");
  return NULL;
}

Test(opfacts, first_use_from_many_threads) {
  pthread_t th[8];
  const gc_opfacts *got[8] = {0};
  for (int i = 0; i < 8; i++)
    cr_assert_eq(pthread_create(&th[i], NULL, lookup_many, &got[i]), 0);
  for (int i = 0; i < 8; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < 8; i++) {
    cr_assert_not_null(got[i]);
    cr_expect_eq(got[i]->cls, GC_OPC_EXTERN);
  }
}
