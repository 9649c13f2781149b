/*
 * auth.h: bearer tokens and roles.
 *
 * A tokens file (--tokens FILE) holds one token per line:
 *
 *   # role    token                              name (for logs)
 *   read      3f9c0b2e8d7a41c6b5e0f1a2d3c4b5a6     ide-plugins
 *   compile   b1e2c3d4a5f60718293a4b5c6d7e8f90     training-jobs
 *   admin     0a1b2c3d4e5f60718293a4b5c6d7e8f9     ops
 *
 * Roles, each including the one before:
 *   read     cache hits only (Compile answers a miss PERMISSION_DENIED),
 *            Lookup, Fetch, Stats, Explain
 *   compile  Compile misses too
 *   admin    Evict, List (every entry)
 * Health checks need no token.
 *
 * A client sends `authorization: Bearer TOKEN` in its call metadata. The
 * table keeps SHA-256 digests of the tokens, never the tokens, and compares
 * a presented token's digest with every entry in constant time (no early
 * exit, CRYPTO_memcmp). Tokens never reach the logs: a call is logged with
 * its token's name. SIGHUP reloads the file; a file that fails to load
 * leaves the previous table in place.
 */
#ifndef DAEMON_AUTH_H
#define DAEMON_AUTH_H

#include <stdbool.h>
#include <stddef.h>

typedef enum auth_role {
  AUTH_NONE = -1, /* unauthenticated: refused */
  AUTH_READ = 0,
  AUTH_COMPILE = 1,
  AUTH_ADMIN = 2,
} auth_role;

typedef struct auth auth;

/* Tokens shorter than this are refused when the file is loaded. */
#define AUTH_MIN_TOKEN 16

/* Loads a tokens file. Returns NULL and a message naming the file and line
 * on error (an unknown role, a short or repeated token, no token at all). */
auth *auth_load(const char *path, char *err, size_t errlen);
void auth_free(auth *a);

/* Replaces a's table with the file's (thread-safe against auth_check);
 * returns 0, or -1 with a message and the old table kept. */
int auth_reload(auth *a, const char *path, char *err, size_t errlen);

/* The role of an "authorization" metadata value ("Bearer TOKEN"; NULL or
 * anything else: AUTH_NONE). *name receives the token's name (copied into
 * name[namelen]) when found. */
auth_role auth_check(auth *a, const char *value, size_t len, char *name,
                     size_t namelen);

/* The SHA-256 of a token (what the table keeps), and the role of the
 * token with that digest: for the explorer's sessions (daemon/explorer.c),
 * which keep a token's digest, never the token. */
#define AUTH_DIGEST_LEN 32
void auth_token_digest(const char *token, size_t len,
                       unsigned char out[AUTH_DIGEST_LEN]);
auth_role auth_check_digest(auth *a, const unsigned char d[AUTH_DIGEST_LEN],
                            char *name, size_t namelen);

/* Number of tokens in the table. */
int auth_count(auth *a);

/* "read", "compile", "admin" ("none" for AUTH_NONE). */
const char *auth_role_name(auth_role r);

/* Whether host (of a --listen "host:port") is a loopback address:
 * 127.0.0.0/8, ::1 or localhost. */
bool auth_loopback_listen(const char *listen);

#endif
