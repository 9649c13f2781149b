/*
 * sign.h: signed artifacts.
 *
 * A daemon given --signing-keys FILE signs every artifact it stores: an
 * HMAC-SHA-256, with the file's first key, of
 *
 *   "compiled-artifact-v1\n" + KEY + "\n" + DIGEST
 *
 * where KEY is the entry's cache key and DIGEST the SHA-256 of the artifact
 * bytes, both as 64 lowercase hex digits. The signature and the key's id
 * travel with the entry (cache_sig) and with every CompileResult
 * (`signature`, `signature_key`), so a client holding the key checks that
 * what it loads came from a daemon holding it; with --verify-cache the
 * daemon checks every entry it reads from its cache the same way and never
 * serves one that fails.
 *
 * The shared tier (l2.h) also signs each entry's header, so that a reader
 * checks what an entry claims (above all its size) before it fetches or
 * decompresses a byte of the artifact: an HMAC, with the key that signed
 * the artifact, of
 *
 *   "compiled-l2-entry-v1\n" + KEY + "\n" + DIGEST + "\n" + SIZE + "\n" +
 *   COMPILE_US
 *
 * with SIZE (the artifact's bytes, uncompressed) and COMPILE_US in decimal.
 * It never leaves the daemons; clients check the artifact's signature.
 *
 * The file holds one key per line, `KEY_ID HEX_SECRET`: ids of 1-32
 * characters [A-Za-z0-9._-], secrets of at least 32 bytes (64 hex digits,
 * e.g. `openssl rand -hex 32`); '#' starts a comment. Every key verifies;
 * the first one signs, so a rotation puts the new key first and keeps the
 * old one until the entries it signed are gone.
 */
#ifndef DAEMON_SIGN_H
#define DAEMON_SIGN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"

typedef struct signer signer;

/* NULL and a message naming the file and line on error. */
signer *signer_load(const char *path, char *err, size_t errlen);
void signer_free(signer *s);

/* The id of the signing key. */
const char *signer_key_id(const signer *s);
int signer_count(const signer *s);

/* Signs (key, digest) with the first key; false when OpenSSL failed (the
 * artifact then goes unsigned). */
bool signer_sign(const signer *s, const uint8_t key[32],
                 const uint8_t digest[32], cache_sig *out);

typedef enum sign_check {
  SIGN_OK,
  SIGN_MISSING,     /* the entry has no signature */
  SIGN_UNKNOWN_KEY, /* signed by a key this daemon does not hold */
  SIGN_BAD,         /* the signature does not match */
} sign_check;

/* Checks an entry's signature (sig NULL: unsigned); constant time in the
 * MAC comparison. */
sign_check signer_verify(const signer *s, const uint8_t key[32],
                         const uint8_t digest[32], const cache_sig *sig);

const char *sign_check_name(sign_check c);

/* The entry header's HMAC (above) with the key `key_id`; false when the
 * daemon does not hold that key or OpenSSL failed. */
bool signer_sign_entry(const signer *s, const char *key_id,
                       const uint8_t key[32], const uint8_t digest[32],
                       uint64_t size, uint64_t compile_us,
                       uint8_t out[CACHE_SIG_LEN]);

/* Checks an entry header's HMAC (entry_mac NULL: none), constant time. */
sign_check signer_verify_entry(const signer *s, const char *key_id,
                               const uint8_t key[32], const uint8_t digest[32],
                               uint64_t size, uint64_t compile_us,
                               const uint8_t *entry_mac);

#endif
