/*
 * explorer_internal.h: what the explorer's files share (explorer.h says
 * which file does what). Handlers build a jansson object and a status;
 * explorer.c turns it into a bounded response with the explorer's
 * headers.
 */
#ifndef DAEMON_EXPLORER_INTERNAL_H
#define DAEMON_EXPLORER_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>

#include "daemon/daemon.h"
#include "daemon/explorer.h"

/* The largest JSON response (bytes); handlers page their listings so that
 * a response stays far below it, and one over it is refused. */
#define X_MAX_RESPONSE ((size_t)16 << 20)

/* Paging bounds for every listing (items per page). */
#define X_PAGE_DEFAULT 200
#define X_PAGE_MAX 1000

typedef struct x_derived x_derived;

/* The explorer's state (daemon_ctx.explorer). */
typedef struct explorer {
  unsigned char secret[32]; /* sessions' HMAC key: random, per process */
  /* derived programs (explorer_derive.c) */
  pthread_mutex_t mu;   /* guards the list, `deriving` and `waiting` */
  pthread_cond_t done;  /* a derivation ended */
  x_derived *derived;   /* most recently used first */
  size_t derived_bytes; /* what they hold */
  bool deriving;        /* one derivation at a time */
  int waiting;          /* requests waiting for it (at most WAITERS) */
} explorer;

/* A query parameter, or NULL. */
const char *x_arg(struct MHD_Connection *conn, const char *name);

/* An integer query parameter within [lo, hi], `def` when absent; false
 * (with *bad naming it) when it is not one. */
bool x_int_arg(struct MHD_Connection *conn, const char *name, int64_t def,
               int64_t lo, int64_t hi, int64_t *out, const char **bad);

/* A JSON string of bytes a client may have sent: jansson refuses invalid
 * UTF-8, so such bytes come out as \\xNN (log_escape) instead of being
 * lost. NULL becomes JSON null. */
json_t *x_str(const char *s);
json_t *x_strn(const char *s, size_t len);

/* {"error": {"code": code, "message": ...}} */
json_t *x_error(const char *code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Whether a traceback's file is a library's (torch's own, installed
 * packages), not the user's code (explorer_derive.c). */
bool x_library_file(const char *f, size_t n);

/* A key in hex (64 digits) as JSON. */
json_t *x_key(const uint8_t key[GC_DIGEST_LEN]);

/* An entry's metadata as JSON (the listing's and the program page's). */
json_t *x_entry(const cache_info *info, const char *summary);

/* GET /api/programs/{key}[/...]: `rest` is what follows the key ("",
 * "/graph", "/c", ...). Sets *status (explorer_program.c). */
json_t *xp_program(daemon_ctx *d, struct MHD_Connection *conn,
                   const uint8_t key[GC_DIGEST_LEN], const char *rest,
                   unsigned *status);

/* Frees the derived programs (explorer_derive.c). */
void xp_cleanup(explorer *x);

/* Why key `key` was a miss: the nearest cached program of the same graph
 * and what differs, in words (explorer_miss.c). `parts` are the key's
 * components (NULL: read from the key's entry). Sets *status. */
json_t *xm_explain(daemon_ctx *d, const uint8_t key[GC_DIGEST_LEN],
                   const uint8_t (*parts)[GC_DIGEST_LEN], unsigned *status);

/* The digest of a graph's operators in order (their targets), as hex
 * (X_OPS_LEN digits): the "ops" of a kept request's summary, by which a
 * miss finds a program of the same operators and other shapes. False
 * when OpenSSL fails (explorer.c). */
#define X_OPS_LEN 32
bool x_ops_digest(const Compiled__V1__Graph *g, char out[X_OPS_LEN + 1]);

/* The stored request of entry `key`, unpacked into arena `a`: 0, or
 * CACHE_EMISS (none kept) or another error with a message
 * (explorer_program.c). */
int xp_load_request(daemon_ctx *d, cache_conn *conn, gc_arena *a,
                    const uint8_t key[GC_DIGEST_LEN],
                    Compiled__V1__CompileRequest **req, char *err,
                    size_t errlen);

#endif
