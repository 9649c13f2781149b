/*
 * sign.c: HMAC-SHA-256 signatures of artifacts. See sign.h.
 */
#include "daemon/sign.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/key.h"

#define SECRET_MIN 32
#define SECRET_MAX 128

typedef struct skey {
  char id[CACHE_SIG_KEY_MAX];
  uint8_t secret[SECRET_MAX];
  size_t len;
  /* HMAC-SHA-256 keyed with the secret, made once on the loading thread:
   * each signature works on a copy, so the compile threads never fetch
   * algorithms (which leaves OpenSSL error state on every thread) */
  EVP_MAC_CTX *ctx;
} skey;

struct signer {
  skey *k;
  int n;
};

static int hexval(int c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  c = tolower(c);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static bool valid_id(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= CACHE_SIG_KEY_MAX)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
      return false;
  return true;
}

void signer_free(signer *s) {
  if (!s)
    return;
  for (int i = 0; i < s->n; i++)
    EVP_MAC_CTX_free(s->k[i].ctx);
  OPENSSL_cleanse(s->k, (size_t)s->n * sizeof *s->k);
  free(s->k);
  free(s);
}

signer *signer_load(const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "signing keys %s: %s", path, strerror(errno));
    return NULL;
  }
  signer *s = calloc(1, sizeof *s);
  int cap = 0, lineno = 0;
  bool bad = !s;
  if (!s)
    snprintf(err, errlen, "out of memory");
  char line[1024];
  while (!bad && fgets(line, sizeof line, f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash)
      *hash = '\0';
    char id[64], hex[2 * SECRET_MAX + 2], extra[8];
    int nf = sscanf(line, "%63s %257s %7s", id, hex, extra);
    if (nf <= 0)
      continue;
    size_t hl = nf >= 2 ? strlen(hex) : 0;
    if (nf != 2 || !valid_id(id) || hl % 2 || hl < 2 * SECRET_MIN ||
        hl > 2 * SECRET_MAX) {
      snprintf(err, errlen,
               "signing keys %s, line %d: want 'KEY_ID HEX_SECRET' with an id "
               "of 1-%d characters [A-Za-z0-9._-] and a secret of %d-%d bytes "
               "in hex (e.g. `openssl rand -hex 32`)",
               path, lineno, CACHE_SIG_KEY_MAX - 1, SECRET_MIN, SECRET_MAX);
      bad = true;
      break;
    }
    if (s->n == cap) {
      cap = cap ? 2 * cap : 4;
      skey *nk = realloc(s->k, (size_t)cap * sizeof *nk);
      if (!nk) {
        snprintf(err, errlen, "out of memory");
        bad = true;
        break;
      }
      s->k = nk;
    }
    skey *k = &s->k[s->n];
    memset(k, 0, sizeof *k);
    snprintf(k->id, sizeof k->id, "%s", id);
    k->len = hl / 2;
    for (size_t i = 0; i < k->len && !bad; i++) {
      int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
      if (hi < 0 || lo < 0) {
        snprintf(err, errlen, "signing keys %s, line %d: the secret is not hex",
                 path, lineno);
        bad = true;
        break;
      }
      k->secret[i] = (uint8_t)((unsigned)hi << 4 | (unsigned)lo);
    }
    for (int i = 0; i < s->n && !bad; i++)
      if (!strcmp(s->k[i].id, k->id)) {
        snprintf(err, errlen, "signing keys %s, line %d: key id '%s' repeated",
                 path, lineno, k->id);
        bad = true;
      }
    if (!bad) {
      EVP_MAC *hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
      OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(
                                 OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
                             OSSL_PARAM_construct_end()};
      k->ctx = hmac ? EVP_MAC_CTX_new(hmac) : NULL;
      EVP_MAC_free(hmac);
      if (!k->ctx || EVP_MAC_init(k->ctx, k->secret, k->len, params) != 1) {
        EVP_MAC_CTX_free(k->ctx);
        snprintf(err, errlen, "signing keys %s: OpenSSL has no HMAC-SHA-256",
                 path);
        bad = true;
        break;
      }
      s->n++;
    }
    OPENSSL_cleanse(hex, sizeof hex);
  }
  OPENSSL_cleanse(line, sizeof line);
  fclose(f);
  if (!bad && s->n == 0) {
    snprintf(err, errlen, "signing keys %s: no keys ('KEY_ID HEX_SECRET')",
             path);
    bad = true;
  }
  if (bad) {
    signer_free(s);
    return NULL;
  }
  return s;
}

const char *signer_key_id(const signer *s) {
  return s->k[0].id;
}

int signer_count(const signer *s) {
  return s->n;
}

/* The HMAC of msg[0..n) with k; false when OpenSSL failed (out unusable). */
static bool mac_msg(const skey *k, const char *msg, size_t n,
                    uint8_t out[CACHE_SIG_LEN]) {
  size_t len = 0;
  EVP_MAC_CTX *c = EVP_MAC_CTX_dup(k->ctx);
  bool ok = c && EVP_MAC_update(c, (const unsigned char *)msg, n) == 1 &&
            EVP_MAC_final(c, out, &len, CACHE_SIG_LEN) == 1 &&
            len == CACHE_SIG_LEN;
  EVP_MAC_CTX_free(c);
  return ok;
}

/* The HMAC of (key, digest). */
static bool mac(const skey *k, const uint8_t key[32], const uint8_t digest[32],
                uint8_t out[CACHE_SIG_LEN]) {
  char kh[GC_HEX_LEN], dh[GC_HEX_LEN], msg[32 + 2 * GC_HEX_LEN];
  gc_digest_hex(key, kh);
  gc_digest_hex(digest, dh);
  size_t n =
      (size_t)snprintf(msg, sizeof msg, "compiled-artifact-v1\n%s\n%s", kh, dh);
  return mac_msg(k, msg, n, out);
}

/* The HMAC of a shared-tier entry's header. */
static bool mac_entry(const skey *k, const uint8_t key[32],
                      const uint8_t digest[32], uint64_t size,
                      uint64_t compile_us, uint8_t out[CACHE_SIG_LEN]) {
  char kh[GC_HEX_LEN], dh[GC_HEX_LEN], msg[64 + 2 * GC_HEX_LEN];
  gc_digest_hex(key, kh);
  gc_digest_hex(digest, dh);
  size_t n = (size_t)snprintf(
      msg, sizeof msg, "compiled-l2-entry-v1\n%s\n%s\n%llu\n%llu", kh, dh,
      (unsigned long long)size, (unsigned long long)compile_us);
  return mac_msg(k, msg, n, out);
}

static const skey *find_key(const signer *s, const char *id) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->k[i].id, id))
      return &s->k[i];
  return NULL;
}

bool signer_sign(const signer *s, const uint8_t key[32],
                 const uint8_t digest[32], cache_sig *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->key_id, sizeof out->key_id, "%s", s->k[0].id);
  return mac(&s->k[0], key, digest, out->mac);
}

sign_check signer_verify(const signer *s, const uint8_t key[32],
                         const uint8_t digest[32], const cache_sig *sig) {
  if (!sig)
    return SIGN_MISSING;
  const skey *k = find_key(s, sig->key_id);
  if (!k)
    return SIGN_UNKNOWN_KEY;
  uint8_t want[CACHE_SIG_LEN];
  if (!mac(k, key, digest, want))
    return SIGN_BAD;
  return CRYPTO_memcmp(want, sig->mac, CACHE_SIG_LEN) == 0 ? SIGN_OK : SIGN_BAD;
}

bool signer_sign_entry(const signer *s, const char *key_id,
                       const uint8_t key[32], const uint8_t digest[32],
                       uint64_t size, uint64_t compile_us,
                       uint8_t out[CACHE_SIG_LEN]) {
  const skey *k = find_key(s, key_id);
  return k && mac_entry(k, key, digest, size, compile_us, out);
}

sign_check signer_verify_entry(const signer *s, const char *key_id,
                               const uint8_t key[32], const uint8_t digest[32],
                               uint64_t size, uint64_t compile_us,
                               const uint8_t *entry_mac) {
  if (!entry_mac)
    return SIGN_MISSING;
  const skey *k = find_key(s, key_id);
  if (!k)
    return SIGN_UNKNOWN_KEY;
  uint8_t want[CACHE_SIG_LEN];
  if (!mac_entry(k, key, digest, size, compile_us, want))
    return SIGN_BAD;
  return CRYPTO_memcmp(want, entry_mac, CACHE_SIG_LEN) == 0 ? SIGN_OK
                                                            : SIGN_BAD;
}

const char *sign_check_name(sign_check c) {
  switch (c) {
  case SIGN_OK:
    return "signature valid";
  case SIGN_MISSING:
    return "no signature";
  case SIGN_UNKNOWN_KEY:
    return "signed with a key this daemon does not hold";
  default:
    return "signature does not match";
  }
}
