/*
 * fuzz_pbjson.c: libFuzzer target for the JSON form of messages
 * (client/lib/pbjson.c).
 *
 * The input is taken as JSON text and decoded as a GraphModule. Decoding may
 * fail (it must then say why) but never crash or leak. When it succeeds, the
 * message is encoded to text and decoded again, and the two messages must
 * pack to the same bytes; the second encoding must equal the first.
 *
 * Seeds: tests/fuzz/corpus/pbjson/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/pbjson.h"
#include "compiled/v1/graph.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Packs m into a new malloc'd buffer; *len gets its size. */
static uint8_t *pack_new(const ProtobufCMessage *m, size_t *len) {
  uint8_t *buf;

  *len = protobuf_c_message_get_packed_size(m);
  buf = malloc(*len + 1);
  if (buf == NULL)
    abort();
  if (protobuf_c_message_pack(m, buf) != *len)
    abort();
  return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const ProtobufCMessageDescriptor *desc =
      &compiled__v1__graph_module__descriptor;
  char err[512] = "";
  ProtobufCMessage *m = NULL, *again = NULL;
  char *text, *text2;
  uint8_t *a, *b;
  size_t alen, blen;

  if (pbjson_decode_text(desc, (const char *)data, size, &m, err, sizeof err) !=
      0) {
    if (m != NULL || err[0] == '\0')
      abort(); /* a failure leaves no message and says why */
    return 0;
  }
  a = pack_new(m, &alen);
  text = pbjson_encode_text(m, err, sizeof err);
  if (text == NULL)
    abort(); /* decoded strings are UTF-8 and depth is bounded */
  if (pbjson_decode_text(desc, text, strlen(text), &again, err, sizeof err) !=
      0)
    abort(); /* whatever we write, we read */
  b = pack_new(again, &blen);
  if (alen != blen || memcmp(a, b, alen) != 0)
    abort(); /* not lossless */
  text2 = pbjson_encode_text(again, err, sizeof err);
  if (text2 == NULL || strcmp(text, text2) != 0)
    abort(); /* the text form is a fixed point */
  free(text2);
  free(text);
  free(a);
  free(b);
  protobuf_c_message_free_unpacked(again, NULL);
  protobuf_c_message_free_unpacked(m, NULL);
  return 0;
}
