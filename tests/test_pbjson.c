/*
 * test_pbjson.c: the JSON form of protobuf-c messages (client/lib/pbjson.c).
 *
 * Round trips are checked on the wire: a message is encoded to JSON text,
 * decoded again and packed, and the bytes must equal the original's. Besides
 * graph.proto's messages, a small descriptor written by hand below ("Kitchen")
 * covers the types graph.proto lacks: bytes, uint64, float, sint32, fixed64,
 * proto2 optional and a recursive message for the depth limit.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/pbjson.h"
#include "compiled/v1/graph.pb-c.h"

typedef Compiled__V1__Argument Arg;
typedef Compiled__V1__GraphModule Module;
#define MODULE_DESC (&compiled__v1__graph_module__descriptor)

/* ---- helpers ---- */

/* A packed message: malloc'd bytes and their count. */
typedef struct packed {
  uint8_t *data; /* owned */
  size_t len;    /* bytes in data */
} packed;

static packed pack(const ProtobufCMessage *m) {
  packed p;

  p.len = protobuf_c_message_get_packed_size(m);
  p.data = malloc(p.len + 1);
  cr_assert_not_null(p.data);
  cr_assert_eq(protobuf_c_message_pack(m, p.data), p.len);
  return p;
}

static void assert_same_bytes(packed a, packed b) {
  cr_assert_eq(a.len, b.len, "packed sizes differ: %zu vs %zu", a.len, b.len);
  cr_assert(memcmp(a.data, b.data, a.len) == 0, "packed bytes differ");
}

/*
 * encode -> text -> decode -> pack, asserting the bytes equal m's and that
 * the text is a fixed point. Returns the text; the caller frees it.
 */
static char *roundtrip(const ProtobufCMessage *m) {
  char err[512] = "";
  char *text = pbjson_encode_text(m, err, sizeof err);
  char *again;
  ProtobufCMessage *back = NULL;
  packed a, b;

  cr_assert_not_null(text, "encode failed: %s", err);
  cr_assert_eq(pbjson_decode_text(m->descriptor, text, strlen(text), &back, err,
                                  sizeof err),
               0, "decode failed: %s\n%s", err, text);
  a = pack(m);
  b = pack(back);
  assert_same_bytes(a, b);
  again = pbjson_encode_text(back, err, sizeof err);
  cr_assert_not_null(again, "re-encode failed: %s", err);
  cr_assert_str_eq(again, text);
  free(again);
  free(a.data);
  free(b.data);
  protobuf_c_message_free_unpacked(back, NULL);
  return text;
}

/* Decodes `text` as a GraphModule, expecting failure with both fragments. */
static void expect_error(const ProtobufCMessageDescriptor *desc,
                         const char *text, const char *frag1,
                         const char *frag2) {
  char err[512] = "";
  ProtobufCMessage *m = (ProtobufCMessage *)1;

  cr_assert_eq(
      pbjson_decode_text(desc, text, strlen(text), &m, err, sizeof err), -1,
      "decoding should fail: %s", text);
  cr_assert_null(m);
  cr_assert(strstr(err, frag1) != NULL, "error \"%s\" lacks \"%s\"", err,
            frag1);
  if (frag2 != NULL)
    cr_assert(strstr(err, frag2) != NULL, "error \"%s\" lacks \"%s\"", err,
              frag2);
}

static Module *decode_ok(const char *text) {
  char err[512] = "";
  ProtobufCMessage *m = NULL;

  cr_assert_eq(
      pbjson_decode_text(MODULE_DESC, text, strlen(text), &m, err, sizeof err),
      0, "decode failed: %s", err);
  return (Module *)m;
}

/* ---- building a graph on the heap, freed by free_unpacked ---- */

static void *new_msg(const ProtobufCMessageDescriptor *d) {
  void *m = malloc(d->sizeof_message);
  cr_assert_not_null(m);
  protobuf_c_message_init(d, m);
  return m;
}

static void *new_array(size_t n, size_t size) {
  void *a = calloc(n, size);
  cr_assert_not_null(a);
  return a;
}

static char *dup(const char *s) {
  char *d = strdup(s);
  cr_assert_not_null(d);
  return d;
}

#define NEW(type, desc) ((type *)new_msg(&(desc)))

static Arg *arg(Compiled__V1__Argument__KindCase k) {
  Arg *a = NEW(Arg, compiled__v1__argument__descriptor);
  a->kind_case = k;
  return a;
}

static Arg *arg_int(int64_t v) {
  Arg *a = arg(COMPILED__V1__ARGUMENT__KIND_AS_INT);
  a->as_int = v;
  return a;
}

static Arg *arg_float(double v) {
  Arg *a = arg(COMPILED__V1__ARGUMENT__KIND_AS_FLOAT);
  a->as_float = v;
  return a;
}

static Compiled__V1__TensorArgument *tensor(const char *name) {
  Compiled__V1__TensorArgument *t = NEW(
      Compiled__V1__TensorArgument, compiled__v1__tensor_argument__descriptor);
  t->name = dup(name);
  return t;
}

static Arg *arg_tensor(const char *name) {
  Arg *a = arg(COMPILED__V1__ARGUMENT__KIND_AS_TENSOR);
  a->as_tensor = tensor(name);
  return a;
}

static Compiled__V1__SymIntArgument *symint_arg(const char *name, int64_t v) {
  Compiled__V1__SymIntArgument *s = NEW(
      Compiled__V1__SymIntArgument, compiled__v1__sym_int_argument__descriptor);
  if (name != NULL) {
    s->kind_case = COMPILED__V1__SYM_INT_ARGUMENT__KIND_AS_NAME;
    s->as_name = dup(name);
  } else {
    s->kind_case = COMPILED__V1__SYM_INT_ARGUMENT__KIND_AS_INT;
    s->as_int = v;
  }
  return s;
}

static Compiled__V1__SymInt *symint(int64_t v, const char *expr) {
  Compiled__V1__SymInt *s =
      NEW(Compiled__V1__SymInt, compiled__v1__sym_int__descriptor);
  if (expr != NULL) {
    s->kind_case = COMPILED__V1__SYM_INT__KIND_AS_EXPR;
    s->as_expr = NEW(Compiled__V1__SymExpr, compiled__v1__sym_expr__descriptor);
    s->as_expr->expr = dup(expr);
    s->as_expr->has_hint = 1;
    s->as_expr->hint = v;
  } else {
    s->kind_case = COMPILED__V1__SYM_INT__KIND_AS_INT;
    s->as_int = v;
  }
  return s;
}

/* Every Argument kind, several with default values inside their oneof. */
static Arg **all_kinds(size_t *n_out) {
  static const double floats[] = {0.1, -0.0, 1e-300, 1e300, 0, -2.5};
  Arg **a = new_array(64, sizeof *a);
  size_t n = 0, i;

  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_NONE);
  a[n++]->as_none = 1;
  a[n++] = arg(COMPILED__V1__ARGUMENT__KIND_AS_NONE); /* as_none: false */
  a[n++] = arg_tensor("x");
  a[n++] = arg_tensor(""); /* a tensor argument with the default name */
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_TENSORS);
  a[n]->as_tensors =
      NEW(Compiled__V1__TensorList, compiled__v1__tensor_list__descriptor);
  a[n]->as_tensors->n_items = 2;
  a[n]->as_tensors->items = new_array(2, sizeof(void *));
  a[n]->as_tensors->items[0] = tensor("a");
  a[n]->as_tensors->items[1] = tensor("b");
  n++;
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_TENSORS); /* empty typed list */
  a[n++]->as_tensors =
      NEW(Compiled__V1__TensorList, compiled__v1__tensor_list__descriptor);
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_OPTIONAL_TENSORS);
  {
    Compiled__V1__OptionalTensorList *l =
        NEW(Compiled__V1__OptionalTensorList,
            compiled__v1__optional_tensor_list__descriptor);
    l->n_items = 3;
    l->items = new_array(3, sizeof(void *));
    for (i = 0; i < 3; i++)
      l->items[i] = NEW(Compiled__V1__OptionalTensorArgument,
                        compiled__v1__optional_tensor_argument__descriptor);
    l->items[0]->kind_case =
        COMPILED__V1__OPTIONAL_TENSOR_ARGUMENT__KIND_AS_TENSOR;
    l->items[0]->as_tensor = tensor("w");
    l->items[1]->kind_case =
        COMPILED__V1__OPTIONAL_TENSOR_ARGUMENT__KIND_AS_NONE;
    l->items[1]->as_none = 1;
    l->items[2]->kind_case =
        COMPILED__V1__OPTIONAL_TENSOR_ARGUMENT__KIND_AS_NONE;
    a[n++]->as_optional_tensors = l;
  }
  a[n++] = arg_int(0);
  a[n++] = arg_int(-5);
  a[n++] = arg_int(INT64_MIN);
  a[n++] = arg_int(INT64_MAX);
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_INTS);
  a[n]->as_ints =
      NEW(Compiled__V1__IntList, compiled__v1__int_list__descriptor);
  a[n]->as_ints->n_items = 5;
  a[n]->as_ints->items = new_array(5, sizeof(int64_t));
  a[n]->as_ints->items[0] = INT64_MIN;
  a[n]->as_ints->items[1] = -1;
  a[n]->as_ints->items[2] = 0;
  a[n]->as_ints->items[3] = 1;
  a[n++]->as_ints->items[4] = INT64_MAX;
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_INTS); /* empty typed list */
  a[n++]->as_ints =
      NEW(Compiled__V1__IntList, compiled__v1__int_list__descriptor);
  a[n++] = arg_float(0.0);
  a[n++] = arg_float(-0.0);
  a[n++] = arg_float(NAN);
  a[n++] = arg_float(INFINITY);
  a[n++] = arg_float(-INFINITY);
  a[n++] = arg_float(1e-300);
  a[n++] = arg_float(0.1);
  a[n++] = arg_float(DBL_MAX);
  a[n++] = arg_float(4.9e-324);
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_FLOATS);
  a[n]->as_floats =
      NEW(Compiled__V1__FloatList, compiled__v1__float_list__descriptor);
  a[n]->as_floats->n_items = 9;
  a[n]->as_floats->items = new_array(9, sizeof(double));
  memcpy(a[n]->as_floats->items, floats, sizeof floats);
  a[n]->as_floats->items[6] = NAN;
  a[n]->as_floats->items[7] = INFINITY;
  a[n++]->as_floats->items[8] = -INFINITY;
  a[n++] = arg(COMPILED__V1__ARGUMENT__KIND_AS_BOOL); /* as_bool: false */
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_BOOL);
  a[n++]->as_bool = 1;
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_BOOLS);
  a[n]->as_bools =
      NEW(Compiled__V1__BoolList, compiled__v1__bool_list__descriptor);
  a[n]->as_bools->n_items = 3;
  a[n]->as_bools->items = new_array(3, sizeof(protobuf_c_boolean));
  a[n++]->as_bools->items[1] = 1;
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_STRING);
  a[n++]->as_string = dup(""); /* empty, but malloc'd: packed */
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_STRING);
  a[n++]->as_string =
      dup("h\xc3\xa9llo \xe2\x88\x91 \xf0\x9d\x84\x9e \"q\"\\\n\t\x01");
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_STRINGS);
  a[n]->as_strings =
      NEW(Compiled__V1__StringList, compiled__v1__string_list__descriptor);
  a[n]->as_strings->n_items = 3;
  a[n]->as_strings->items = new_array(3, sizeof(char *));
  a[n]->as_strings->items[0] = dup("");
  a[n]->as_strings->items[1] = dup("\xe6\x97\xa5\xe6\x9c\xac");
  a[n++]->as_strings->items[2] = dup("a,b");
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_SYM_INT);
  a[n++]->as_sym_int = symint_arg(NULL, 0); /* as_int: 0 in a oneof */
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_SYM_INT);
  a[n++]->as_sym_int = symint_arg("s0", 0);
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_SYM_INTS);
  a[n]->as_sym_ints =
      NEW(Compiled__V1__SymIntList, compiled__v1__sym_int_list__descriptor);
  a[n]->as_sym_ints->n_items = 3;
  a[n]->as_sym_ints->items = new_array(3, sizeof(void *));
  a[n]->as_sym_ints->items[0] = symint_arg("s1", 0);
  a[n]->as_sym_ints->items[1] = symint_arg(NULL, -3);
  a[n++]->as_sym_ints->items[2] = symint_arg(NULL, 0);
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_SYM_FLOAT);
  a[n]->as_sym_float = NEW(Compiled__V1__SymFloatArgument,
                           compiled__v1__sym_float_argument__descriptor);
  a[n]->as_sym_float->kind_case =
      COMPILED__V1__SYM_FLOAT_ARGUMENT__KIND_AS_FLOAT;
  a[n++]->as_sym_float->as_float = -0.0;
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_SYM_FLOATS);
  a[n]->as_sym_floats =
      NEW(Compiled__V1__SymFloatList, compiled__v1__sym_float_list__descriptor);
  a[n]->as_sym_floats->n_items = 2;
  a[n]->as_sym_floats->items = new_array(2, sizeof(void *));
  for (i = 0; i < 2; i++)
    a[n]->as_sym_floats->items[i] =
        NEW(Compiled__V1__SymFloatArgument,
            compiled__v1__sym_float_argument__descriptor);
  a[n]->as_sym_floats->items[0]->kind_case =
      COMPILED__V1__SYM_FLOAT_ARGUMENT__KIND_AS_NAME;
  a[n]->as_sym_floats->items[0]->as_name = dup("f0");
  a[n]->as_sym_floats->items[1]->kind_case =
      COMPILED__V1__SYM_FLOAT_ARGUMENT__KIND_AS_FLOAT;
  a[n++]->as_sym_floats->items[1]->as_float = NAN;
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_SYM_BOOL);
  a[n]->as_sym_bool = NEW(Compiled__V1__SymBoolArgument,
                          compiled__v1__sym_bool_argument__descriptor);
  a[n++]->as_sym_bool->kind_case =
      COMPILED__V1__SYM_BOOL_ARGUMENT__KIND_AS_BOOL; /* as_bool: false */
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_SYM_BOOLS);
  a[n++]->as_sym_bools =
      NEW(Compiled__V1__SymBoolList, compiled__v1__sym_bool_list__descriptor);
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_SCALAR_TYPE);
  a[n++]->as_scalar_type = COMPILED__V1__SCALAR_TYPE__SCALAR_TYPE_FLOAT;
  a[n++] = arg(COMPILED__V1__ARGUMENT__KIND_AS_SCALAR_TYPE); /* enum 0 */
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_SCALAR_TYPE);
  a[n++]->as_scalar_type = (Compiled__V1__ScalarType)99; /* not in the enum */
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_MEMORY_FORMAT);
  a[n++]->as_memory_format =
      COMPILED__V1__MEMORY_FORMAT__MEMORY_FORMAT_CHANNELS_LAST;
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_LAYOUT);
  a[n++]->as_layout = COMPILED__V1__LAYOUT__LAYOUT_STRIDED;
  a[n] = arg(COMPILED__V1__ARGUMENT__KIND_AS_DEVICE);
  a[n]->as_device = NEW(Compiled__V1__Device, compiled__v1__device__descriptor);
  a[n]->as_device->type = dup("cuda");
  a[n]->as_device->has_index = 1;
  a[n++]->as_device->index = 1;
  a[n++] = arg(0); /* an argument with nothing set */
  *n_out = n;
  return a;
}

/* A GraphModule exercising every message of graph.proto. */
static Module *build_graph(void) {
  Module *gm = NEW(Module, compiled__v1__graph_module__descriptor);
  Compiled__V1__Graph *g =
      NEW(Compiled__V1__Graph, compiled__v1__graph__descriptor);
  Compiled__V1__Node *node;
  Compiled__V1__TensorMeta *meta;
  Arg **kinds;
  size_t n, i;

  gm->schema_version = NEW(Compiled__V1__SchemaVersion,
                           compiled__v1__schema_version__descriptor);
  gm->schema_version->major = 1; /* minor 0: left out */
  gm->graph = g;
  gm->n_operators = 1;
  gm->operators = new_array(1, sizeof(void *));
  gm->operators[0] =
      NEW(Compiled__V1__Operator, compiled__v1__operator__descriptor);
  gm->operators[0]->name = dup("aten::add.Tensor");
  gm->operators[0]->schema = dup("aten::add.Tensor(Tensor self, Tensor other, "
                                 "*, Scalar alpha=1) -> Tensor");
  gm->torch_version = dup("2.3.0+cpu");
  gm->producer = dup("test_pbjson");

  g->n_inputs = 3;
  g->inputs = new_array(3, sizeof(void *));
  for (i = 0; i < 3; i++)
    g->inputs[i] =
        NEW(Compiled__V1__InputSpec, compiled__v1__input_spec__descriptor);
  g->inputs[0]->kind = COMPILED__V1__INPUT_KIND__INPUT_KIND_USER_INPUT;
  g->inputs[0]->arg = arg_tensor("x");
  g->inputs[1]->kind = COMPILED__V1__INPUT_KIND__INPUT_KIND_BUFFER;
  g->inputs[1]->arg = arg_tensor("buf");
  g->inputs[1]->target = dup("layer.running_mean");
  g->inputs[1]->persistent = 1;
  g->inputs[2]->arg = arg(COMPILED__V1__ARGUMENT__KIND_AS_SYM_INT);
  g->inputs[2]->arg->as_sym_int = symint_arg("s0", 0);

  kinds = all_kinds(&n);
  g->n_nodes = 2;
  g->nodes = new_array(2, sizeof(void *));
  node = g->nodes[0] = NEW(Compiled__V1__Node, compiled__v1__node__descriptor);
  node->target = dup("test::everything");
  node->n_inputs = n;
  node->inputs = new_array(n, sizeof(void *));
  for (i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "a%zu", i);
    node->inputs[i] = NEW(Compiled__V1__NamedArgument,
                          compiled__v1__named_argument__descriptor);
    node->inputs[i]->name = dup(name);
    node->inputs[i]->arg = kinds[i];
    node->inputs[i]->kind = (Compiled__V1__ArgumentKind)(i % 3);
  }
  free(kinds);
  node->n_outputs = 1;
  node->outputs = new_array(1, sizeof(void *));
  node->outputs[0] = arg_tensor("y");
  node->metadata =
      NEW(Compiled__V1__NodeMetadata, compiled__v1__node_metadata__descriptor);
  node->metadata->stack_trace = dup("File \"m.py\", line 3\n  return x + y\n");
  node->metadata->n_extra = 1;
  node->metadata->extra = new_array(1, sizeof(void *));
  node->metadata->extra[0] = NEW(Compiled__V1__MetadataEntry,
                                 compiled__v1__metadata_entry__descriptor);
  node->metadata->extra[0]->key = dup("nn_module_stack");
  g->nodes[1] = NEW(Compiled__V1__Node, compiled__v1__node__descriptor);

  g->n_outputs = 1;
  g->outputs = new_array(1, sizeof(void *));
  g->outputs[0] = arg_tensor("y");

  g->n_tensor_values = 2;
  g->tensor_values = new_array(2, sizeof(void *));
  g->tensor_values[0] =
      NEW(Compiled__V1__TensorValue, compiled__v1__tensor_value__descriptor);
  g->tensor_values[0]->name = dup("x");
  meta = g->tensor_values[0]->meta =
      NEW(Compiled__V1__TensorMeta, compiled__v1__tensor_meta__descriptor);
  meta->dtype = COMPILED__V1__SCALAR_TYPE__SCALAR_TYPE_BFLOAT16;
  meta->n_sizes = 3;
  meta->sizes = new_array(3, sizeof(void *));
  meta->sizes[0] = symint(0, NULL);
  meta->sizes[1] = symint(8, "s0*2");
  meta->sizes[2] = symint(-1, NULL);
  meta->n_strides = 1;
  meta->strides = new_array(1, sizeof(void *));
  meta->strides[0] = symint(1, NULL);
  meta->storage_offset =
      NEW(Compiled__V1__SymInt, compiled__v1__sym_int__descriptor);
  meta->device = NEW(Compiled__V1__Device, compiled__v1__device__descriptor);
  meta->device->type = dup("cpu");
  meta->requires_grad = 1;
  meta->layout = COMPILED__V1__LAYOUT__LAYOUT_STRIDED;
  g->tensor_values[1] =
      NEW(Compiled__V1__TensorValue, compiled__v1__tensor_value__descriptor);
  g->tensor_values[1]->name = dup("y");

  g->n_sym_int_values = 1;
  g->sym_int_values = new_array(1, sizeof(void *));
  g->sym_int_values[0] =
      NEW(Compiled__V1__SymIntValue, compiled__v1__sym_int_value__descriptor);
  g->sym_int_values[0]->name = dup("s0");
  g->sym_int_values[0]->value = symint(4, "s0");

  g->n_sym_float_values = 1;
  g->sym_float_values = new_array(1, sizeof(void *));
  g->sym_float_values[0] = NEW(Compiled__V1__SymFloatValue,
                               compiled__v1__sym_float_value__descriptor);
  g->sym_float_values[0]->value =
      NEW(Compiled__V1__SymFloat, compiled__v1__sym_float__descriptor);
  g->sym_float_values[0]->value->kind_case =
      COMPILED__V1__SYM_FLOAT__KIND_AS_FLOAT;

  g->n_sym_bool_values = 1;
  g->sym_bool_values = new_array(1, sizeof(void *));
  g->sym_bool_values[0] =
      NEW(Compiled__V1__SymBoolValue, compiled__v1__sym_bool_value__descriptor);
  g->sym_bool_values[0]->value =
      NEW(Compiled__V1__SymBool, compiled__v1__sym_bool__descriptor);
  g->sym_bool_values[0]->value->kind_case =
      COMPILED__V1__SYM_BOOL__KIND_AS_BOOL;

  g->n_storage_groups = 1;
  g->storage_groups = new_array(1, sizeof(void *));
  g->storage_groups[0] =
      NEW(Compiled__V1__StorageGroup, compiled__v1__storage_group__descriptor);
  g->storage_groups[0]->n_inputs = 3;
  g->storage_groups[0]->inputs = new_array(3, sizeof(int32_t));
  g->storage_groups[0]->inputs[0] = 0;
  g->storage_groups[0]->inputs[1] = INT32_MAX;
  g->storage_groups[0]->inputs[2] = INT32_MIN;
  return gm;
}

/* ---- round trips ---- */

Test(pbjson, graph_roundtrip) {
  Module *gm = build_graph();
  char *text = roundtrip(&gm->base);
  static const char *const must[] = {
      "\"as_none\": true",
      "\"as_none\": false",
      "\"as_int\": 0",
      "\"as_int\": -9223372036854775808",
      "\"as_int\": 9223372036854775807",
      "\"as_float\": 0.0",
      "\"as_float\": -0.0",
      "\"as_float\": \"NaN\"",
      "\"as_float\": \"Infinity\"",
      "\"as_float\": \"-Infinity\"",
      "\"as_float\": 1e-300",
      "\"as_float\": 0.10000000000000001",
      "\"as_bool\": false",
      "\"as_string\": \"\"",
      ("\"as_string\": \"h\xc3\xa9llo \xe2\x88\x91 \xf0\x9d\x84\x9e "
       "\\\"q\\\"\\\\\\n\\t\\u0001\""),
      "\"as_tensors\": {}",
      "\"as_ints\": {}",
      "\"as_sym_bools\": {}",
      "\"as_scalar_type\": \"SCALAR_TYPE_FLOAT\"",
      "\"as_scalar_type\": \"SCALAR_TYPE_UNKNOWN\"",
      "\"as_scalar_type\": 99",
      "\"kind\": \"ARGUMENT_KIND_KEYWORD\"",
      "\"storage_offset\": {}",
      "\"schema_version\": {\n    \"major\": 1\n  }",
      "2147483647,",
      "-2147483648\n",
  };
  size_t i;

  for (i = 0; i < sizeof must / sizeof must[0]; i++)
    cr_expect(strstr(text, must[i]) != NULL, "text lacks %s", must[i]);
  /* field-number order, proto names, and defaults left out */
  cr_expect(strstr(text, "\"schema_version\"") < strstr(text, "\"graph\""));
  cr_expect(strstr(text, "\"graph\"") < strstr(text, "\"operators\""));
  cr_expect(strstr(text, "\"minor\"") == NULL);
  cr_expect(strstr(text, "\"has_index\": false") == NULL);
  cr_expect(strstr(text, "schemaVersion") == NULL);
  cr_expect(text[strlen(text) - 1] == '\n');
  free(text);
  protobuf_c_message_free_unpacked(&gm->base, NULL);
}

Test(pbjson, json_value_roundtrip) {
  Module *gm = build_graph();
  char err[256] = "";
  json_t *j = pbjson_encode(&gm->base, err, sizeof err);
  ProtobufCMessage *back = NULL;
  packed a, b;

  cr_assert_not_null(j, "%s", err);
  cr_assert_eq(pbjson_decode(MODULE_DESC, j, &back, err, sizeof err), 0, "%s",
               err);
  a = pack(&gm->base);
  b = pack(back);
  assert_same_bytes(a, b);
  free(a.data);
  free(b.data);
  json_decref(j);
  protobuf_c_message_free_unpacked(back, NULL);
  protobuf_c_message_free_unpacked(&gm->base, NULL);
}

Test(pbjson, empty_message) {
  Module gm = COMPILED__V1__GRAPH_MODULE__INIT;
  char *text = roundtrip(&gm.base);

  cr_assert_str_eq(text, "{}\n");
  free(text);
}

/* A oneof string left at the static default is not packed, so not written. */
Test(pbjson, oneof_default_pointer) {
  Arg a = COMPILED__V1__ARGUMENT__INIT;
  char *text;

  a.kind_case = COMPILED__V1__ARGUMENT__KIND_AS_STRING;
  a.as_string = (char *)protobuf_c_empty_string;
  text = roundtrip(&a.base);
  cr_assert_str_eq(text, "{}\n");
  free(text);
}

/*
 * Written by Python: json_format.MessageToJson(m) with its default camelCase
 * names, 64-bit integers as strings, plus a few forms Python also accepts.
 */
Test(pbjson, python_style) {
  static const char text[] =
      "{\n"
      "  \"schemaVersion\": {\"major\": 1, \"minor\": \"2\"},\n"
      "  \"graph\": {\n"
      "    \"nodes\": [{\n"
      "      \"target\": \"aten::add.Tensor\",\n"
      "      \"inputs\": [\n"
      "        {\"name\": \"alpha\", \"arg\": {\"asInt\": "
      "\"-9223372036854775808\"}, \"kind\": \"ARGUMENT_KIND_KEYWORD\"},\n"
      "        {\"name\": \"n\", \"arg\": {\"asSymInt\": {\"asInt\": "
      "\"0\"}}},\n"
      "        {\"name\": \"f\", \"arg\": {\"asFloat\": \"-Infinity\"}},\n"
      "        {\"name\": \"g\", \"arg\": {\"asFloat\": 1e3}},\n"
      "        {\"name\": \"l\", \"arg\": {\"asInts\": {\"items\": [\"1\", "
      "\"-2\", 3, 4.0]}}},\n"
      "        {\"name\": \"d\", \"arg\": {\"asDevice\": {\"type\": \"cuda\", "
      "\"hasIndex\": true, \"index\": 0}}, \"kind\": 2},\n"
      "        {\"name\": \"z\", \"arg\": {\"asNone\": false, \"asInt\": "
      "null}}\n"
      "      ],\n"
      "      \"metadata\": null\n"
      "    }],\n"
      "    \"tensorValues\": [{\"name\": \"x\", \"meta\": {\"dtype\": "
      "\"SCALAR_TYPE_HALF\", \"sizes\": [{\"asInt\": \"2\"}, {\"asExpr\": "
      "{\"expr\": \"s0\", \"hasHint\": true, \"hint\": \"9007199254740993\"}}],"
      " \"storageOffset\": {}, \"requiresGrad\": true, \"layout\": 7}}],\n"
      "    \"storageGroups\": [{\"inputs\": [0, \"1\"]}]\n"
      "  },\n"
      "  \"torchVersion\": \"2.3.0\"\n"
      "}\n";
  Module *gm = decode_ok(text);
  Compiled__V1__Node *node;
  Compiled__V1__TensorMeta *meta;
  char *back;

  cr_assert_eq(gm->schema_version->major, 1);
  cr_assert_eq(gm->schema_version->minor, 2);
  cr_assert_str_eq(gm->torch_version, "2.3.0");
  cr_assert_eq(gm->graph->n_nodes, 1);
  node = gm->graph->nodes[0];
  cr_assert_eq(node->n_inputs, 7);
  cr_assert_null(node->metadata);
  cr_assert_eq(node->inputs[0]->arg->kind_case,
               COMPILED__V1__ARGUMENT__KIND_AS_INT);
  cr_assert_eq(node->inputs[0]->arg->as_int, INT64_MIN);
  cr_assert_eq(node->inputs[0]->kind,
               COMPILED__V1__ARGUMENT_KIND__ARGUMENT_KIND_KEYWORD);
  cr_assert_eq(node->inputs[1]->arg->as_sym_int->kind_case,
               COMPILED__V1__SYM_INT_ARGUMENT__KIND_AS_INT);
  cr_assert_eq(node->inputs[1]->arg->as_sym_int->as_int, 0);
  cr_assert(isinf(node->inputs[2]->arg->as_float) &&
            node->inputs[2]->arg->as_float < 0);
  cr_assert_eq(node->inputs[3]->arg->as_float, 1000.0);
  cr_assert_eq(node->inputs[4]->arg->as_ints->n_items, 4);
  cr_assert_eq(node->inputs[4]->arg->as_ints->items[1], -2);
  cr_assert_eq(node->inputs[4]->arg->as_ints->items[3], 4);
  cr_assert_str_eq(node->inputs[5]->arg->as_device->type, "cuda");
  cr_assert(node->inputs[5]->arg->as_device->has_index);
  cr_assert_eq(node->inputs[5]->kind, 2);
  cr_assert_eq(node->inputs[6]->arg->kind_case,
               COMPILED__V1__ARGUMENT__KIND_AS_NONE);
  cr_assert_eq(node->inputs[6]->arg->as_none, 0);
  meta = gm->graph->tensor_values[0]->meta;
  cr_assert_eq(meta->dtype, COMPILED__V1__SCALAR_TYPE__SCALAR_TYPE_HALF);
  cr_assert_eq(meta->layout, COMPILED__V1__LAYOUT__LAYOUT_STRIDED);
  cr_assert_eq(meta->sizes[1]->as_expr->hint, INT64_C(9007199254740993));
  cr_assert_not_null(meta->storage_offset);
  cr_assert(meta->requires_grad);
  cr_assert_eq(gm->graph->storage_groups[0]->inputs[1], 1);
  /* and it survives a round trip of its own */
  back = roundtrip(&gm->base);
  cr_assert(strstr(back, "\"hint\": 9007199254740993") != NULL);
  free(back);
  protobuf_c_message_free_unpacked(&gm->base, NULL);
}

/* ---- errors: each names the JSON path and the problem ---- */

Test(pbjson, error_unknown_field) {
  expect_error(MODULE_DESC,
               "{\"graph\": {\"nodes\": [{}, {}, {}, {\"inputs\": [{\"arg\": "
               "{\"as_tenser\": {}}}]}]}}",
               "graph.nodes[3].inputs[0].arg: unknown field \"as_tenser\"",
               "compiled.v1.Argument");
  expect_error(MODULE_DESC, "{\"grpah\": {}}", "unknown field \"grpah\"",
               "compiled.v1.GraphModule");
  /* a camelCase spelling of a snake_case name is not a JSON name */
  expect_error(MODULE_DESC, "{\"torch_Version\": \"\"}",
               "unknown field \"torch_Version\"", NULL);
}

Test(pbjson, error_wrong_types) {
  expect_error(MODULE_DESC, "{\"graph\": {\"nodes\": [{\"target\": 5}]}}",
               "graph.nodes[0].target: expected a string, got a number", NULL);
  expect_error(MODULE_DESC, "{\"graph\": []}",
               "graph: expected an object for compiled.v1.Graph, got an array",
               NULL);
  expect_error(MODULE_DESC, "{\"operators\": {}}",
               "operators: expected an array, got an object", NULL);
  expect_error(
      MODULE_DESC, "{\"graph\": {\"outputs\": [{\"as_bool\": \"true\"}]}}",
      "graph.outputs[0].as_bool: expected a boolean, got a string", NULL);
  expect_error(MODULE_DESC, "{\"graph\": {\"outputs\": [{\"as_float\": [1]}]}}",
               "graph.outputs[0].as_float: expected a number, got an array",
               NULL);
  expect_error(MODULE_DESC, "{\"graph\": {\"outputs\": [{\"as_int\": true}]}}",
               "graph.outputs[0].as_int: expected an integer, got a boolean",
               NULL);
  expect_error(MODULE_DESC, "[]",
               "expected an object for compiled.v1.GraphModule, got an array",
               NULL);
  expect_error(MODULE_DESC, "{\"operators\": [{}, null]}",
               "operators[1]: null is not allowed in a repeated field", NULL);
}

Test(pbjson, error_bad_enum) {
  expect_error(MODULE_DESC,
               "{\"graph\": {\"tensor_values\": [{}, {}, {\"meta\": "
               "{\"dtype\": \"SCALAR_TYPE_FLOT\"}}]}}",
               "graph.tensor_values[2].meta.dtype: unknown enum value "
               "\"SCALAR_TYPE_FLOT\" for compiled.v1.ScalarType",
               NULL);
  expect_error(MODULE_DESC,
               "{\"graph\": {\"tensor_values\": [{\"meta\": {\"layout\": "
               "{}}}]}}",
               "graph.tensor_values[0].meta.layout: expected an enum name or "
               "number for compiled.v1.Layout, got an object",
               NULL);
  expect_error(MODULE_DESC,
               "{\"graph\": {\"tensor_values\": [{\"meta\": {\"layout\": "
               "4294967296}}]}}",
               "graph.tensor_values[0].meta.layout: 4294967296 is out of "
               "range for enum",
               NULL);
}

Test(pbjson, error_two_oneof_members) {
  expect_error(MODULE_DESC,
               "{\"graph\": {\"outputs\": [{\"as_int\": 1, \"as_float\": 2}]}}",
               "graph.outputs[0].as_float: fields \"as_int\" and \"as_float\" "
               "are both set",
               NULL);
  /* default values count as set */
  expect_error(MODULE_DESC,
               "{\"graph\": {\"outputs\": [{\"as_none\": false, "
               "\"asTensor\": {}}]}}",
               "fields \"as_none\" and \"as_tensor\" are both set", NULL);
}

Test(pbjson, error_field_given_twice) {
  expect_error(MODULE_DESC,
               "{\"torch_version\": \"a\", \"torchVersion\": \"b\"}",
               "torchVersion: field \"torch_version\" is given twice", NULL);
}

Test(pbjson, error_bad_integers) {
  expect_error(MODULE_DESC,
               "{\"graph\": {\"outputs\": [{\"as_int\": \"12x\"}]}}",
               "graph.outputs[0].as_int: invalid integer \"12x\"", NULL);
  expect_error(MODULE_DESC,
               "{\"graph\": {\"outputs\": [{\"as_int\": \" 12\"}]}}",
               "invalid integer \" 12\"", NULL);
  expect_error(MODULE_DESC, "{\"graph\": {\"outputs\": [{\"as_int\": \"\"}]}}",
               "invalid integer \"\"", NULL);
  expect_error(MODULE_DESC,
               "{\"graph\": {\"outputs\": [{\"as_int\": "
               "\"9223372036854775808\"}]}}",
               "graph.outputs[0].as_int: 9223372036854775808 is out of range "
               "for int64",
               NULL);
  expect_error(MODULE_DESC,
               "{\"graph\": {\"outputs\": [{\"as_int\": "
               "\"99999999999999999999999\"}]}}",
               "integer \"99999999999999999999999\" is out of range", NULL);
  expect_error(MODULE_DESC, "{\"schema_version\": {\"major\": 2147483648}}",
               "schema_version.major: 2147483648 is out of range for int32",
               NULL);
  expect_error(
      MODULE_DESC, "{\"schema_version\": {\"minor\": \"-2147483649\"}}",
      "schema_version.minor: -2147483649 is out of range for int32", NULL);
  expect_error(MODULE_DESC, "{\"schema_version\": {\"major\": 1.5}}",
               "schema_version.major: 1.5 is not an integer", NULL);
  expect_error(MODULE_DESC, "{\"schema_version\": {\"major\": 1e30}}",
               "schema_version.major: 1e+30 is out of range for an integer",
               NULL);
}

Test(pbjson, error_bad_numbers) {
  expect_error(MODULE_DESC,
               "{\"graph\": {\"outputs\": [{\"as_float\": \"nan\"}]}}",
               "graph.outputs[0].as_float: invalid number \"nan\"", NULL);
  expect_error(MODULE_DESC,
               "{\"graph\": {\"outputs\": [{\"as_float\": \"1e999\"}]}}",
               "number \"1e999\" is out of range for double", NULL);
  expect_error(MODULE_DESC,
               "{\"graph\": {\"outputs\": [{\"as_float\": \"0x10\"}]}}",
               "invalid number \"0x10\"", NULL);
}

Test(pbjson, error_syntax_with_position) {
  expect_error(MODULE_DESC, "{\n  \"graph\": {\n    \"nodes\": [,]\n  }\n}",
               "line 3, column", NULL);
  expect_error(MODULE_DESC, "{\"producer\": \"a\",\n \"producer\": \"b\"}",
               "line 2, column", "duplicate object key");
  expect_error(MODULE_DESC, "{} {}", "end of file expected", NULL);
  expect_error(MODULE_DESC, "", "line 1", NULL);
}

Test(pbjson, error_utf8_and_nul) {
  char err[256] = "";
  ProtobufCMessage *m = NULL;
  json_t *j;

  expect_error(MODULE_DESC, "{\"producer\": \"caf\xe9\"}", "line 1",
               "must be valid UTF-8");
  expect_error(MODULE_DESC, "{\"producer\": \"a\\u0000b\"}", "line 1",
               "\\u0000");
  /* json_t values built without jansson's checks */
  j = json_pack("{s:o}", "producer", json_stringn_nocheck("caf\xe9", 4));
  cr_assert_eq(pbjson_decode(MODULE_DESC, j, &m, err, sizeof err), -1);
  cr_assert_str_eq(err, "producer: string is not valid UTF-8");
  json_decref(j);
  j = json_pack("{s:s%}", "producer", "a\0b", (size_t)3);
  cr_assert_eq(pbjson_decode(MODULE_DESC, j, &m, err, sizeof err), -1);
  cr_assert(strstr(err, "producer: string contains a NUL character"), "%s",
            err);
  json_decref(j);
  cr_assert_eq(pbjson_decode(MODULE_DESC, NULL, &m, err, sizeof err), -1);
}

Test(pbjson, encode_rejects_bad_utf8) {
  Module gm = COMPILED__V1__GRAPH_MODULE__INIT;
  Compiled__V1__Operator op = COMPILED__V1__OPERATOR__INIT;
  Compiled__V1__Operator *ops[2] = {&op, &op};
  char err[256] = "";

  op.name = "\xc0\x80"; /* an overlong NUL */
  gm.n_operators = 2;
  gm.operators = ops;
  cr_assert_null(pbjson_encode(&gm.base, err, sizeof err));
  cr_assert_str_eq(err, "operators[0].name: string is not valid UTF-8");
  cr_assert_null(pbjson_encode_text(&gm.base, NULL, 0));
}

Test(pbjson, error_jansson_depth_limit) {
  size_t n = 5000;
  char *deep = malloc(2 * n + 16);

  deep = malloc(n + 1);
  cr_assert_not_null(deep);
  memset(deep, '[', n);
  deep[n] = '\0';
  expect_error(MODULE_DESC, deep, "maximum parsing depth", "line 1");
  free(deep);
}

/* Nothing leaks when decoding fails deep inside (see valgrind). */
Test(pbjson, error_frees_partial_message) {
  expect_error(MODULE_DESC,
               "{\"producer\": \"p\", \"operators\": [{\"name\": \"a\"}], "
               "\"graph\": {\"nodes\": [{\"target\": \"t\", \"inputs\": "
               "[{\"name\": \"n\", \"arg\": {\"as_strings\": {\"items\": "
               "[\"a\", \"b\", 3]}}}]}]}}",
               "graph.nodes[0].inputs[0].arg.as_strings.items[2]: expected a "
               "string",
               NULL);
  expect_error(MODULE_DESC,
               "{\"graph\": {\"outputs\": [{\"as_tensors\": {\"items\": "
               "[{\"name\": \"a\"}, {\"name\": \"b\", \"x\": 1}]}}]}}",
               "graph.outputs[0].as_tensors.items[1]: unknown field \"x\"",
               NULL);
  expect_error(MODULE_DESC,
               "{\"graph\": {\"outputs\": [{\"as_string\": \"s\", "
               "\"as_int\": 1}]}}",
               "are both set", NULL);
}

/* ---- a descriptor written by hand, for the types graph.proto lacks ---- */

typedef struct Kitchen Kitchen;
struct Kitchen {
  ProtobufCMessage base;
  ProtobufCBinaryData blob; /* 1: bytes */
  size_t n_blobs;           /* 2: repeated bytes */
  ProtobufCBinaryData *blobs;
  uint64_t big;    /* 3: uint64 */
  float ratio;     /* 4: float */
  Kitchen *child;  /* 5: Kitchen (recursive) */
  int32_t zig;     /* 6: sint32 */
  size_t n_ratios; /* 7: repeated float */
  float *ratios;
  protobuf_c_boolean has_opt; /* 8: proto2 optional int32 */
  int32_t opt;
  uint64_t fixed; /* 9: fixed64 */
};

static const ProtobufCMessageDescriptor kitchen_descriptor;

static void kitchen_init(ProtobufCMessage *m) {
  memset(m, 0, sizeof(Kitchen));
  m->descriptor = &kitchen_descriptor;
}

static const ProtobufCFieldDescriptor kitchen_fields[] = {
    {"blob", 1, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_BYTES, 0,
     offsetof(Kitchen, blob), NULL, NULL, 0, 0, NULL, NULL},
    {"blobs", 2, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_BYTES,
     offsetof(Kitchen, n_blobs), offsetof(Kitchen, blobs), NULL, NULL, 0, 0,
     NULL, NULL},
    {"big", 3, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_UINT64, 0,
     offsetof(Kitchen, big), NULL, NULL, 0, 0, NULL, NULL},
    {"ratio", 4, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_FLOAT, 0,
     offsetof(Kitchen, ratio), NULL, NULL, 0, 0, NULL, NULL},
    {"child", 5, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_MESSAGE, 0,
     offsetof(Kitchen, child), &kitchen_descriptor, NULL, 0, 0, NULL, NULL},
    {"zig", 6, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_SINT32, 0,
     offsetof(Kitchen, zig), NULL, NULL, 0, 0, NULL, NULL},
    {"ratios", 7, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_FLOAT,
     offsetof(Kitchen, n_ratios), offsetof(Kitchen, ratios), NULL, NULL,
     PROTOBUF_C_FIELD_FLAG_PACKED, 0, NULL, NULL},
    {"opt", 8, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_INT32,
     offsetof(Kitchen, has_opt), offsetof(Kitchen, opt), NULL, NULL, 0, 0, NULL,
     NULL},
    {"fixed", 9, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_FIXED64, 0,
     offsetof(Kitchen, fixed), NULL, NULL, 0, 0, NULL, NULL},
};
static const unsigned kitchen_by_name[] = {2, 1, 0, 4, 8, 7, 3, 6, 5};
static const ProtobufCIntRange kitchen_ranges[] = {{1, 0}, {0, 9}};

static const ProtobufCMessageDescriptor kitchen_descriptor = {
    PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC,
    "test.Kitchen",
    "Kitchen",
    "Kitchen",
    "test",
    sizeof(Kitchen),
    9,
    kitchen_fields,
    kitchen_by_name,
    1,
    kitchen_ranges,
    kitchen_init,
    NULL,
    NULL,
    NULL};

static Kitchen *kitchen_decode(const char *text) {
  char err[256] = "";
  ProtobufCMessage *m = NULL;

  cr_assert_eq(pbjson_decode_text(&kitchen_descriptor, text, strlen(text), &m,
                                  err, sizeof err),
               0, "decode failed: %s", err);
  return (Kitchen *)m;
}

Test(pbjson, kitchen_roundtrip) {
  static const uint8_t raw[] = {0x00, 0xff, 0x10, 'h', 'e', 'l', 'l', 'o'};
  static const char *const parts[] = {"", "a", "ab", "abc", "\xfb\xff"};
  Kitchen k, kid, grandkid;
  ProtobufCBinaryData blobs[5];
  float ratios[6] = {NAN, -INFINITY, FLT_MAX, 1e-45f, -0.0f, 0.1f};
  char *text;
  size_t i;

  kitchen_init(&k.base);
  kitchen_init(&kid.base);
  kitchen_init(&grandkid.base);
  k.blob.data = (uint8_t *)raw;
  k.blob.len = sizeof raw;
  for (i = 0; i < 5; i++) {
    blobs[i].data = (uint8_t *)parts[i];
    blobs[i].len = strlen(parts[i]);
  }
  k.n_blobs = 5;
  k.blobs = blobs;
  k.big = UINT64_MAX;
  k.ratio = 0.1f;
  k.child = &kid;
  kid.child = &grandkid; /* an empty message, still written */
  kid.big = (uint64_t)INT64_MAX;
  kid.has_opt = 1; /* opt: 0 is present */
  k.zig = -7;
  k.n_ratios = 6;
  k.ratios = ratios;
  k.fixed = 12345;
  text = roundtrip(&k.base);
  cr_expect(strstr(text, "\"blob\": \"AP8QaGVsbG8=\"") != NULL, "%s", text);
  cr_expect(strstr(text, "\"\",\n    \"YQ==\",\n    \"YWI=\",\n    "
                         "\"YWJj\",\n    \"+/8=\"") != NULL,
            "%s", text);
  cr_expect(strstr(text, "\"big\": \"18446744073709551615\"") != NULL);
  cr_expect(strstr(text, "\"big\": 9223372036854775807") != NULL);
  cr_expect(strstr(text, "\"ratio\": 0.10000000149011612") != NULL);
  cr_expect(strstr(text, "\"child\": {}") != NULL);
  cr_expect(strstr(text, "\"opt\": 0") != NULL);
  cr_expect(strstr(text, "\"zig\": -7") != NULL);
  free(text);
}

Test(pbjson, kitchen_inputs) {
  Kitchen *k = kitchen_decode(
      "{\"blob\": \"-_8\", \"blobs\": [\"YQ\", \"\", \"+/8=\"], \"big\": "
      "\"18446744073709551615\", \"ratio\": \"1.5\", \"ratios\": [\"NaN\", "
      "3.4028234663852886e+38, 1], \"opt\": null, \"fixed\": 7.0}");

  cr_assert_eq(k->blob.len, 2);
  cr_assert(memcmp(k->blob.data, "\xfb\xff", 2) == 0);
  cr_assert_eq(k->n_blobs, 3);
  cr_assert_eq(k->blobs[0].len, 1);
  cr_assert_eq(k->blobs[0].data[0], 'a');
  cr_assert_eq(k->blobs[1].len, 0);
  cr_assert_eq(k->blobs[2].len, 2);
  cr_assert_eq(k->big, UINT64_MAX);
  cr_assert_eq(k->ratio, 1.5f);
  cr_assert(isnan(k->ratios[0]));
  cr_assert_eq(k->ratios[1], FLT_MAX);
  cr_assert_eq(k->has_opt, 0);
  cr_assert_eq(k->fixed, 7);
  protobuf_c_message_free_unpacked(&k->base, NULL);
}

Test(pbjson, error_kitchen) {
  expect_error(&kitchen_descriptor, "{\"blob\": \"QQ=Q\"}",
               "blob: invalid base64: data after '=' padding", NULL);
  expect_error(&kitchen_descriptor, "{\"blobs\": [\"YQ==\", \"Q\"]}",
               "blobs[1]: invalid base64: bad length or padding", NULL);
  expect_error(&kitchen_descriptor, "{\"blob\": \"YQ=\"}",
               "blob: invalid base64: bad length or padding", NULL);
  expect_error(&kitchen_descriptor, "{\"blob\": \"Y Q==\"}",
               "blob: invalid base64: unexpected character at offset 1", NULL);
  expect_error(&kitchen_descriptor, "{\"blob\": 12}",
               "blob: expected a base64 string, got a number", NULL);
  expect_error(&kitchen_descriptor, "{\"big\": \"-1\"}",
               "big: -1 is out of range for uint64", NULL);
  expect_error(&kitchen_descriptor, "{\"big\": \"18446744073709551616\"}",
               "big: integer \"18446744073709551616\" is out of range", NULL);
  expect_error(&kitchen_descriptor, "{\"big\": 18446744073709551615}",
               "too big integer", NULL);
  expect_error(&kitchen_descriptor, "{\"ratio\": 1e39}",
               "ratio: 1e+39 is out of range for float", NULL);
  expect_error(&kitchen_descriptor, "{\"child\": {\"zig\": 2147483648}}",
               "child.zig: 2147483648 is out of range for sint32", NULL);
}

/* Messages nest at most PBJSON_MAX_DEPTH deep, in both directions. */
Test(pbjson, depth_limit) {
  size_t len = 0, i, levels;
  char *text = malloc(16 * 80);
  Kitchen *k, *p;
  char err[1024] = "";

  cr_assert_not_null(text);
  for (levels = PBJSON_MAX_DEPTH; levels <= PBJSON_MAX_DEPTH + 1; levels++) {
    len = 0;
    for (i = 1; i < levels; i++)
      len += (size_t)sprintf(text + len, "{\"child\":");
    len += (size_t)sprintf(text + len, "{");
    for (i = 0; i < levels; i++)
      text[len++] = '}';
    text[len] = '\0';
    if (levels == PBJSON_MAX_DEPTH) {
      k = kitchen_decode(text);
      /* one level more cannot be written */
      for (p = k; p->child != NULL; p = p->child)
        ;
      p->child = (Kitchen *)malloc(sizeof(Kitchen));
      cr_assert_not_null(p->child);
      kitchen_init(&p->child->base);
      cr_assert_null(pbjson_encode(&k->base, err, sizeof err));
      cr_assert(strstr(err, "child.child") != NULL, "%s", err);
      cr_assert(strstr(err, "messages nest deeper than 64 levels") != NULL,
                "%s", err);
      /* a short buffer loses the start of the path, not the problem */
      cr_assert_null(pbjson_encode(&k->base, err, 80));
      cr_assert(strncmp(err, "...child.child", 14) == 0, "%s", err);
      cr_assert(strstr(err, ".child: messages nest deeper than 64 levels"),
                "%s", err);
      protobuf_c_message_free_unpacked(&k->base, NULL);
    } else {
      expect_error(&kitchen_descriptor, text,
                   "messages nest deeper than 64 levels", "child.child.child");
    }
  }
  free(text);
}

/* ---- captured graphs (tests/data/graphs, written by the Python client) ----
 */

/* The bytes of file `path` (malloc'd; *len gets the size), or NULL. */
static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  uint8_t *buf = NULL;
  long size;

  if (f == NULL)
    return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 &&
      fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)size + 1)) != NULL)
    *len = fread(buf, 1, (size_t)size, f);
  fclose(f);
  return buf;
}

/*
 * Every <name>.pb round-trips through JSON; every <name>.json (Python's
 * json_format output) decodes to the message of <name>.pb.
 */
Test(pbjson, captured_graphs) {
  const char *src = getenv("COMPILED_SRC");
  char dir[2048], path[4096];
  DIR *d;
  struct dirent *e;
  size_t n_pb = 0, n_json = 0;

  snprintf(dir, sizeof dir, "%s/tests/data/graphs", src != NULL ? src : ".");
  d = opendir(dir);
  if (d == NULL) {
    cr_log_info("no %s: only hand-built graphs are checked", dir);
    return;
  }
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name), len = 0, pblen = 0;
    int is_json = n > 5 && strcmp(e->d_name + n - 5, ".json") == 0;
    uint8_t *buf, *pb;
    ProtobufCMessage *m = NULL, *want;
    char err[512] = "";
    char *text;

    if (!is_json && !(n > 3 && strcmp(e->d_name + n - 3, ".pb") == 0))
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    buf = read_file(path, &len);
    cr_assert_not_null(buf, "cannot read %s", path);
    if (is_json) {
      cr_assert_eq(pbjson_decode_text(MODULE_DESC, (const char *)buf, len, &m,
                                      err, sizeof err),
                   0, "%s: %s", path, err);
      snprintf(path + strlen(path) - 5, 4, ".pb");
      pb = read_file(path, &pblen);
      if (pb != NULL) {
        want = protobuf_c_message_unpack(MODULE_DESC, NULL, pblen, pb);
        cr_assert_not_null(want, "%s does not unpack", path);
        packed a = pack(want), b = pack(m);
        assert_same_bytes(a, b);
        free(a.data);
        free(b.data);
        protobuf_c_message_free_unpacked(want, NULL);
        free(pb);
      }
      n_json++;
    } else {
      m = protobuf_c_message_unpack(MODULE_DESC, NULL, len, buf);
      cr_assert_not_null(m, "%s does not unpack", path);
      n_pb++;
    }
    text = roundtrip(m);
    free(text);
    protobuf_c_message_free_unpacked(m, NULL);
    free(buf);
  }
  closedir(d);
  cr_log_info("%zu .pb and %zu .json captured graphs round-tripped", n_pb,
              n_json);
}
