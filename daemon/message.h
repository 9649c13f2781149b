/*
 * message.h: the Compile RPC's messages, for every file that reads or
 * answers one: options and target from a request, a result event packed
 * (the hot tier keeps such packed answers, store.c), key components, and
 * graph errors with their status. Shared by compile.c, store.c, admin.c
 * (Explain) and the explorer (message.c).
 */
#ifndef DAEMON_MESSAGE_H
#define DAEMON_MESSAGE_H

#include "compiler/pipeline.h"
#include "daemon/daemon.h"

/* Everything a result message needs. */
typedef struct daemon_result {
  const char *hex;
  const gc_key *key;
  Compiled__V1__Served served;
  const uint8_t *artifact;
  size_t len;
  const uint8_t *digest;
  const cache_sig *sig; /* NULL: unsigned */
  bool must_inline;     /* not in the cache: Fetch could not serve it */
  uint64_t max_inline;
  int64_t compile_us;
  const gc_timing *timings;
  int ntimings;
} daemon_result;

/* Packs a CompileEvent holding the result into a new slice. */
grpc_slice daemon_pack_result(const daemon_result *r);

/* Sends a packed result (the call takes its own reference) and finishes;
 * daemon_send_result packs and sends. */
void daemon_send_slice(srv_call *c, grpc_slice s);
void daemon_send_result(srv_call *c, const daemon_result *r);

/* The gRPC status for a compiler error code (GC_E*). */
grpc_status_code daemon_status_of(int gc_code);

/* SHA-256 of `len` bytes (an artifact's digest, a request's memo key). */
void daemon_sha256(const uint8_t *data, size_t len, uint8_t out[GC_DIGEST_LEN]);

/* Limits of a request's Target (docs/protocol.md): ISA features, and the
 * bytes of one feature name or of the architecture. */
#define DAEMON_TARGET_MAX_ISA 256
#define DAEMON_TARGET_MAX_NAME 64

/* The daemon's target (d->target) with a request's overrides: its arch if
 * set, its ISA features (joined with commas, in arena a) if any. A list or
 * name over the limits above is refused (GC_ELIMIT, naming the field)
 * before anything is copied (Compile and Explain). */
int daemon_read_target(daemon_ctx *d, gc_arena *a,
                       const Compiled__V1__Target *pt, gc_target *t,
                       gc_error *err);

/* Compile options from a request's CompileOptions (NULL: the defaults);
 * an unknown enum value is refused. */
int daemon_read_options(const Compiled__V1__CompileOptions *po, gc_options *o,
                        bool *force, gc_error *err);

/* Ends a call refusing a graph: the status for `code`, the message, and a
 * GraphError in the "compiled-error-bin" trailer. */
void daemon_finish_graph_error(srv_call *c, int code, const gc_error *err);

/* Fills a KeyComponents message from key parts (strings in `hex`, which must
 * hold GC_KEY_NCOMPONENTS * GC_HEX_LEN bytes). */
void daemon_components(const uint8_t parts[][GC_DIGEST_LEN],
                       Compiled__V1__KeyComponents *kc, char *hex);

#endif
