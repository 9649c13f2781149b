/*
 * codec.c: artifact bytes to stored bytes and back.
 *
 * An artifact is stored as one zstd frame that records its content size,
 * next to the SHA-256 of the uncompressed bytes and both sizes. Reading is
 * where integrity lives: every column can hold anything (a disk, a bug or a
 * person with the sqlite3 shell may have put it there), so before any byte
 * is trusted we check, in order:
 *   - the blob is a BLOB of exactly the recorded stored size,
 *   - the digest is a BLOB of 32 bytes,
 *   - the recorded size is sane for that many compressed bytes (a zstd block
 *     expands at most about 32768 times, so a larger claim is a lie, and we
 *     must not malloc what a lie asks for),
 *   - the blob is exactly one zstd frame whose header states that size,
 *   - it decompresses to exactly that many bytes,
 *   - their SHA-256 equals the digest.
 * Any failure is CACHE_ECORRUPT with the reason; zstd itself is robust to
 * hostile input, so garbage cannot do worse than fail one of these checks.
 *
 * The zstd contexts and the digest context live in the connection and are
 * reused, so a get allocates nothing but the output buffer.
 */
#include "cache/internal.h"

#include <stdlib.h>
#include <string.h>

/* A zstd block of up to 128 KiB can be stored in 4 bytes (an RLE block), so
 * no frame expands more than this; used only to refuse absurd sizes. */
#define MAX_EXPANSION 65536

int cache__sha256(cache_conn *c, const uint8_t *data, size_t len,
                  uint8_t out[CACHE_KEY_LEN], cache_error *err) {
  unsigned int n = 0;
  static const uint8_t empty = 0;
  if (!data)
    data = &empty; /* EVP wants a valid pointer even for 0 bytes */
  if (EVP_DigestInit_ex(c->md, c->store->sha256, NULL) != 1 ||
      EVP_DigestUpdate(c->md, data, len) != 1 ||
      EVP_DigestFinal_ex(c->md, out, &n) != 1 || n != CACHE_KEY_LEN)
    return cache__errorf(err, CACHE_EIO, "SHA-256 failed");
  return 0;
}

int cache__compress(cache_conn *c, const uint8_t *data, size_t len,
                    uint8_t **out, size_t *outlen, cache_error *err) {
  size_t cap = ZSTD_compressBound(len);
  if (ZSTD_isError(cap))
    return cache__errorf(err, CACHE_ETOOBIG,
                         "artifact of %zu bytes is too "
                         "large to compress",
                         len);
  uint8_t *buf = malloc(cap);
  if (!buf)
    return cache__errorf(err, CACHE_ENOMEM, "out of memory (%zu bytes)", cap);
  static const uint8_t empty = 0;
  size_t n = ZSTD_compress2(c->cctx, buf, cap, data ? data : &empty, len);
  if (ZSTD_isError(n)) {
    free(buf);
    return cache__errorf(err, CACHE_EIO, "zstd: %s", ZSTD_getErrorName(n));
  }
  *out = buf;
  *outlen = n;
  return 0;
}

int cache__decode(cache_conn *c, const void *blob, int blob_len, int64_t size,
                  int64_t stored_size, const void *digest, int digest_len,
                  uint8_t **data, size_t *len, cache_error *err) {
  if (!blob || blob_len <= 0)
    return cache__errorf(err, CACHE_ECORRUPT, "the data is missing");
  if ((int64_t)blob_len != stored_size)
    return cache__errorf(err, CACHE_ECORRUPT,
                         "the data has %d bytes, the entry says %lld", blob_len,
                         (long long)stored_size);
  if (!digest || digest_len != CACHE_KEY_LEN)
    return cache__errorf(err, CACHE_ECORRUPT,
                         "the digest has %d bytes instead of %d", digest_len,
                         CACHE_KEY_LEN);
  if (size < 0 || (uint64_t)size / MAX_EXPANSION > (uint64_t)blob_len ||
      (uint64_t)size >= SIZE_MAX)
    return cache__errorf(err, CACHE_ECORRUPT,
                         "recorded size %lld is impossible for %d "
                         "compressed bytes",
                         (long long)size, blob_len);
  size_t frame = ZSTD_findFrameCompressedSize(blob, (size_t)blob_len);
  if (ZSTD_isError(frame) || frame != (size_t)blob_len)
    return cache__errorf(err, CACHE_ECORRUPT,
                         "the data is not a single zstd frame");
  unsigned long long content = ZSTD_getFrameContentSize(blob, frame);
  if (content != (unsigned long long)size)
    return cache__errorf(err, CACHE_ECORRUPT,
                         "the zstd frame does not hold %lld bytes",
                         (long long)size);
  uint8_t *out = malloc(size > 0 ? (size_t)size : 1);
  if (!out)
    return cache__errorf(err, CACHE_ENOMEM, "out of memory (%lld bytes)",
                         (long long)size);
  size_t got = ZSTD_decompressDCtx(c->dctx, out, (size_t)size, blob, frame);
  if (ZSTD_isError(got) || got != (size_t)size) {
    free(out);
    return cache__errorf(err, CACHE_ECORRUPT, "zstd: %s",
                         ZSTD_isError(got) ? ZSTD_getErrorName(got)
                                           : "short output");
  }
  uint8_t sum[CACHE_KEY_LEN];
  int rc = cache__sha256(c, out, (size_t)size, sum, err);
  if (rc != 0) {
    free(out);
    return rc;
  }
  if (memcmp(sum, digest, CACHE_KEY_LEN) != 0) {
    free(out);
    return cache__errorf(err, CACHE_ECORRUPT,
                         "SHA-256 of the data does not match its digest");
  }
  if (data) {
    *data = out;
    *len = (size_t)size;
  } else {
    free(out);
  }
  return 0;
}
