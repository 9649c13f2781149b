/*
 * test_wire.c: string checks on encoded messages (compiler/wire.h). Every
 * string field, at any depth, must be UTF-8 without NUL bytes; the error
 * names the field by its path with indices; bytes fields and unknown fields
 * are left alone; the UTF-8 check is strict (no overlong forms, surrogates
 * or code points above U+10FFFF).
 */
#include <criterion/criterion.h>
#include <string.h>

#include "compiled/v1/compiled.pb-c.h"
#include "compiler/wire.h"

#define UTF8_OK(s)                                                             \
  cr_assert_eq(gc_utf8_invalid_at((const uint8_t *)(s), sizeof(s) - 1), -1,    \
               "%s", #s)
#define UTF8_BAD(s, at)                                                        \
  cr_assert_eq(gc_utf8_invalid_at((const uint8_t *)(s), sizeof(s) - 1), at,    \
               "%s", #s)

Test(utf8, valid_sequences) {
  UTF8_OK("");
  UTF8_OK("plain ascii 0123");
  UTF8_OK("\xc3\xa9");         /* U+00E9 */
  UTF8_OK("\xe2\x82\xac");     /* U+20AC */
  UTF8_OK("\xed\x9f\xbf");     /* U+D7FF, just below the surrogates */
  UTF8_OK("\xee\x80\x80");     /* U+E000, just above */
  UTF8_OK("\xf0\x9f\x98\x80"); /* U+1F600 */
  UTF8_OK("\xf4\x8f\xbf\xbf"); /* U+10FFFF */
  UTF8_OK("a\0b");             /* NUL is UTF-8; the wire check refuses it */
}

Test(utf8, invalid_sequences) {
  UTF8_BAD("\x80", 0); /* lone continuation */
  UTF8_BAD("ab\xff", 2);
  UTF8_BAD("\xc0\x80", 0);         /* overlong NUL */
  UTF8_BAD("\xc1\xbf", 0);         /* overlong */
  UTF8_BAD("\xe0\x80\x80", 0);     /* overlong */
  UTF8_BAD("\xed\xa0\x80", 0);     /* surrogate U+D800 */
  UTF8_BAD("\xf0\x80\x80\x80", 0); /* overlong */
  UTF8_BAD("\xf4\x90\x80\x80", 0); /* U+110000 */
  UTF8_BAD("\xf5\x80\x80\x80", 0);
  UTF8_BAD("x\xe2\x82", 1); /* truncated */
  UTF8_BAD("\xc3(", 0);     /* bad continuation */
}

/* A packed CompileRequest with a few strings set. */
static uint8_t *pack_request(const char *arch, const char *isa1,
                             const char *name, size_t *len) {
  Compiled__V1__CompileRequest req;
  compiled__v1__compile_request__init(&req);
  Compiled__V1__GraphModule gm;
  compiled__v1__graph_module__init(&gm);
  Compiled__V1__Graph g;
  compiled__v1__graph__init(&g);
  Compiled__V1__TensorValue tv[2], *tvs[2] = {&tv[0], &tv[1]};
  for (int i = 0; i < 2; i++) {
    compiled__v1__tensor_value__init(&tv[i]);
    tv[i].name = i ? (char *)name : "x";
  }
  g.n_tensor_values = 2;
  g.tensor_values = tvs;
  gm.graph = &g;
  gm.torch_version = "1.13.0";
  req.graph = &gm;
  Compiled__V1__Target t;
  compiled__v1__target__init(&t);
  char *isa[2] = {"avx2", (char *)isa1};
  t.arch = (char *)arch;
  t.n_isa = 2;
  t.isa = isa;
  req.target = &t;
  *len = compiled__v1__compile_request__get_packed_size(&req);
  uint8_t *buf = malloc(*len);
  compiled__v1__compile_request__pack(&req, buf);
  return buf;
}

/* Overwrites the first byte of the only occurrence of `marker`. */
static void patch(uint8_t *buf, size_t len, const char *marker, uint8_t b) {
  size_t ml = strlen(marker);
  for (size_t i = 0; i + ml <= len; i++)
    if (memcmp(buf + i, marker, ml) == 0) {
      buf[i] = b;
      return;
    }
  cr_assert_fail("test bug: no %s", marker);
}

static const ProtobufCMessageDescriptor *REQ =
    &compiled__v1__compile_request__descriptor;

Test(wire, clean_request_passes) {
  size_t len;
  uint8_t *buf = pack_request("x86_64", "fma", "y\xc3\xa9", &len);
  gc_error err;
  gc_error_clear(&err);
  cr_assert_eq(gc_wire_check_strings(REQ, buf, len, &err), 0, "%s", err.msg);
  free(buf);
}

Test(wire, paths_name_the_field) {
  size_t len;
  gc_error err;
  uint8_t *buf = pack_request("x86_64", "fm#a", "y", &len);
  patch(buf, len, "#", 0);
  cr_assert_eq(gc_wire_check_strings(REQ, buf, len, &err), GC_EINVAL);
  cr_assert_str_eq(err.msg,
                   "target.isa[1]: string field contains a NUL byte (byte 2 "
                   "of 4); strings must be UTF-8 without NUL bytes");
  free(buf);
  buf = pack_request("x86#64", "fma", "y", &len);
  patch(buf, len, "#", 0xc0);
  cr_assert_eq(gc_wire_check_strings(REQ, buf, len, &err), GC_EINVAL);
  cr_assert(strstr(err.msg, "target.arch: string field is not valid UTF-8 "
                            "(byte 3 of 6 is 0xc0)"),
            "%s", err.msg);
  free(buf);
  buf = pack_request("x86_64", "fma", "yy#", &len);
  patch(buf, len, "#", 0xfe);
  cr_assert_eq(gc_wire_check_strings(REQ, buf, len, &err), GC_EINVAL);
  cr_assert(strstr(err.msg, "graph.graph.tensor_values[1].name:"), "%s",
            err.msg);
  free(buf);
}

/* Unknown fields (a newer client's) and bytes fields may hold anything. */
Test(wire, unknown_and_bytes_fields_are_not_strings) {
  /* field 99 (unknown), length 2: 0x00 0xff; field 4 varint 7 */
  uint8_t buf[] = {0x9a, 0x06, 2, 0x00, 0xff, (4 << 3) | 0, 7};
  gc_error err;
  gc_error_clear(&err);
  cr_assert_eq(gc_wire_check_strings(REQ, buf, sizeof buf, &err), 0, "%s",
               err.msg);
  uint8_t chunk[] = {(2 << 3) | 2, 3, 0x00, 0xff, 0xc0}; /* FetchChunk.data */
  cr_assert_eq(gc_wire_check_strings(&compiled__v1__fetch_chunk__descriptor,
                                     chunk, sizeof chunk, &err),
               0, "%s", err.msg);
}

Test(wire, malformed_bytes) {
  static const uint8_t cases[][4] = {
      {0x0a, 0x05, 'a', 'b'},   /* length past the end */
      {0x0b, 0x00, 0x00, 0x00}, /* group wire type */
      {0x00, 0x01, 0x00, 0x00}, /* field number 0 */
      {0x08, 0xff, 0xff, 0xff}, /* truncated varint */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gc_error err;
    gc_error_clear(&err);
    cr_assert_eq(gc_wire_check_strings(REQ, cases[i], 4, &err), GC_EMALFORMED,
                 "case %zu: %s", i, err.msg);
    cr_assert(strstr(err.msg, "not protobuf wire format"), "%s", err.msg);
  }
}
