/*
 * explorer.h: the compile explorer, pages and a JSON API on the daemon's
 * HTTP listener (--metrics-listen), for people and IDE plugins who want to
 * see what the daemon compiled, how well, where the time went and why a
 * request missed. docs/explorer.md describes the pages, the API and who
 * may see them.
 *
 *   /explorer/...        pages (HTML and a little JavaScript embedded in
 *                        the binary: daemon/explorer/, highlight.js for C)
 *   /api/...             the same content as JSON
 *
 * Who may look: with --tokens, any token (read, compile or admin), sent
 * as "Authorization: Bearer TOKEN" or, for a browser, through the login
 * page, which sets a session cookie (HttpOnly, SameSite=Strict) holding an
 * HMAC of the token's digest and an expiry, never the token. Without
 * --tokens, as on the gRPC port, only loopback clients, unless --insecure.
 * Nothing the explorer serves changes the daemon's state.
 *
 * Files: explorer.c (HTTP: routes, who may look, headers, the overview,
 * requests and programs lists), explorer_program.c (one program: its
 * artifact, its request kept beside it), explorer_derive.c (the passes
 * derived again from that request), explorer_miss.c (why a request missed),
 * recent.c (recent requests).
 */
#ifndef DAEMON_EXPLORER_H
#define DAEMON_EXPLORER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct daemon_ctx;
struct MHD_Connection;
struct cache_conn;
struct gc_compiled;
struct Compiled__V1__CompileRequest;
struct gc_arena;
struct gc_key;
struct cache_info;

/* A file served from the binary (generated: embed.sh). */
typedef struct explorer_asset {
  const char *path; /* "/explorer/index.html" */
  const char *type; /* Content-Type */
  const unsigned char *data;
  size_t len;
} explorer_asset;

extern const explorer_asset explorer_assets[];
extern const int explorer_nassets;

/* Sets up and frees the explorer's state (sessions' secret, the derived
 * programs); 0 or -1. */
int explorer_init(struct daemon_ctx *d);
void explorer_cleanup(struct daemon_ctx *d);

/* Answers an HTTP request when `url` is the explorer's (/explorer, /api):
 * returns an MHD_Result; -1 when the URL is not the explorer's (or the
 * explorer is off). Called by metrics.c for every call libmicrohttpd makes
 * for a request (a POST's body arrives over several), with its per-request
 * `state`, which explorer_request_done frees. */
int explorer_answer(struct daemon_ctx *d, struct MHD_Connection *conn,
                    const char *url, const char *method, const char *upload,
                    size_t *upload_len, void **state);
void explorer_request_done(void *state);

/* Keeps the request a compile (or a fetch from Redis) stored an entry for,
 * beside the entry, with a summary of it and of the compile (`out`, may be
 * NULL), within --explorer-keep-bytes. On the worker that stored the
 * entry; failures are logged, never the compile's. */
void explorer_keep(struct daemon_ctx *d, struct cache_conn *conn,
                   const uint8_t *key,
                   const struct Compiled__V1__CompileRequest *req,
                   const struct gc_compiled *out);

/* Why a request that is not cached would miss, for the Explain RPC: the
 * nearest cached program as the explorer's miss page finds it (the same
 * graph component, else, with the explorer on, the same operators in the
 * same order: an input's size changes the graph component too), into
 * *near, the differing components into names[] (static strings), and
 * the differences itemized against the request kept beside that program
 * ("input 2 (x): dimension 0 is 4, the cached program's is 2") into
 * *out (*nout strings in arena a). *by_ops: found by the operators.
 * Returns how many components differ; -1 when no program is near
 * (explorer_miss.c). */
int explorer_explain_miss(struct daemon_ctx *d, struct cache_conn *conn,
                          struct gc_arena *a, const struct gc_key *k,
                          const struct Compiled__V1__CompileRequest *req,
                          struct cache_info *near, const char **names,
                          bool *by_ops, char ***out, size_t *nout);

#endif
