/*
 * key_internal.h: what key.c (the canonical stream and the key) and
 * key_order.c (the canonical node order) share: the buffered SHA-256
 * writer, the state of one key computation, and the functions each calls of the
 * other. Not part of the library's interface.
 */
#ifndef GC_KEY_INTERNAL_H
#define GC_KEY_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>

#include "compiler/graph.h"
#include "compiler/key.h"
#include "compiler/strmap.h"

/* ---- a buffered SHA-256 writer ---- */

typedef struct hasher {
  EVP_MD_CTX *ctx;
  unsigned char buf[4096];
  size_t len;
  int failed; /* an OpenSSL call failed */
} hasher;

static inline void hash_flush(hasher *h) {
  if (h->len && EVP_DigestUpdate(h->ctx, h->buf, h->len) != 1)
    h->failed = 1;
  h->len = 0;
}

static inline void hash_bytes(hasher *h, const void *p, size_t n) {
  if (n > sizeof h->buf - h->len) {
    hash_flush(h);
    if (n > sizeof h->buf) {
      if (EVP_DigestUpdate(h->ctx, p, n) != 1)
        h->failed = 1;
      return;
    }
  }
  memcpy(h->buf + h->len, p, n);
  h->len += n;
}

static inline void hash_u8(hasher *h, uint8_t v) {
  hash_bytes(h, &v, 1);
}

static inline void hash_i64(hasher *h, int64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)((uint64_t)v >> (8 * i));
  hash_bytes(h, b, 8);
}

static inline void hash_str(hasher *h, const char *s) {
  size_t n = s ? strlen(s) : 0;
  hash_i64(h, (int64_t)n);
  hash_bytes(h, s, n);
}

static inline void hash_f64(hasher *h, double f) {
  uint64_t bits;
  if (f != f)
    bits = 0x7ff8000000000000ull; /* one NaN for all NaNs */
  else
    memcpy(&bits, &f, sizeof bits);
  hash_i64(h, (int64_t)bits);
}

static inline void hash_begin(hasher *h) {
  h->len = 0;
  if (EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1)
    h->failed = 1;
}

static inline void hash_end(hasher *h, uint8_t out[GC_DIGEST_LEN]) {
  hash_flush(h);
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(h->ctx, out, &n) != 1 || n != GC_DIGEST_LEN)
    h->failed = 1;
}

/* ---- shared state of one key computation ---- */

typedef struct keyer {
  const gc_graph *g;
  gc_arena *a;
  hasher h;
  gc_strmap syms; /* symbol name -> 1 + first-appearance index */
  int nsyms;
  const char **symnames; /* symnames[i]: the symbol numbered i + 1 */
  int capsyms;
  uint8_t (*down)[GC_DIGEST_LEN]; /* per node, while ordering */
  int *pos;         /* node index -> canonical position (stream phase) */
  int phase;        /* PHASE_DOWN or PHASE_STREAM: how references encode */
  bool freeze_syms; /* ordering phase: do not number new symbols */
  const gc_arg *
      *by_param; /* gc__key_hash_node's scratch: GC_SCHEMA_MAX_ARGS entries */
} keyer;

enum { PHASE_DOWN, PHASE_STREAM };

/* key.c: writes node n (target, arguments in schema order with defaults
 * filled in, outputs' metadata) into the stream; references encode by
 * k->phase. */
void gc__key_hash_node(keyer *k, const gc_node *n);

/* key.c: node n's arguments by schema parameter (k->by_param, reused);
 * NULL when out of memory. */
const gc_arg **gc__key_param_table(keyer *k, const gc_node *n);

/* key_order.c: per storage group, the first input in it (-1: none); NULL
 * when out of memory. */
int *gc__key_group_firsts(keyer *k);

/* key_order.c: the canonical order of the graph's nodes into order[]
 * (node indices, g->nnodes of them). Returns 0, GC_ENOMEM or
 * GC_EINTERNAL. */
int gc__key_order_nodes(keyer *k, int *order);

#endif
