/*
 * compile.h: what the two halves of the Compile RPC share: compile.c
 * (the completion-queue half: decode, key, answer hits) and flight.c (the
 * single flight: the loop's queue of compiles, the workers, delivery).
 */
#ifndef DAEMON_COMPILE_H
#define DAEMON_COMPILE_H

#include "daemon/daemon.h"

/* A request between the completion-queue thread and the loop. */
typedef struct request {
  daemon_ctx *d;
  srv_call *call;
  size_t len;     /* request bytes */
  size_t charged; /* of them, still charged to the memory budget */
  uint8_t digest[GC_DIGEST_LEN]; /* of the bytes, for the request memo */
  gc_arena *arena;
  gc_graph *graph;
  gc_key key;
  char hex[GC_HEX_LEN];
  gc_options opts;
  gc_target target; /* the client's (strings in the arena or the daemon's) */
  bool force;
  uint64_t max_inline;
  gc_compiled prep;  /* validate/key timings */
  cache_label label; /* what the client calls the graph (label.h) */
  /* the request as unpacked (in the arena), kept beside the entry for the
   * explorer */
  const Compiled__V1__CompileRequest *msg;
} request;

/* Frees the request; its call must still be alive if its bytes are (the
 * call holds them). compile_request_end also drops its call reference. */
void compile_request_free(request *r);
void compile_request_end(request *r);

/* Logs a Compile request's end, and records it for the explorer with its
 * key's components (`key`, may be NULL) and its compile's stages (`out`,
 * may be NULL). compile_log_done is the same without both. */
void compile_log_done_ex(srv_call *c, const char *hex, const gc_key *key,
                         const gc_compiled *out, const char *outcome,
                         int status, int64_t validate_us, int64_t key_us,
                         int64_t queue_us, int64_t compile_us, uint64_t bytes,
                         const char *error);
void compile_log_done(srv_call *c, const char *hex, const char *outcome,
                      int status, int64_t validate_us, int64_t key_us,
                      int64_t queue_us, int64_t compile_us, uint64_t bytes,
                      const char *error);

/* A stage event ("receive", "compile", ...) to one call. */
void flight_send_stage_to(srv_call *c, const char *name, bool done,
                          int64_t micros);

/* On the loop: a miss (`arg`: its request, with the call reference) joins
 * the flight of its key or starts one (flight.c). */
void flight_submit_on_loop(void *arg);

#endif
