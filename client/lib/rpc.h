/*
 * rpc.h: a small synchronous gRPC client on the gRPC C core, for compilectl
 * and anything else in C that talks to a compiled daemon.
 *
 * Requests and responses are protobuf-c messages. Every call runs on a
 * completion queue of its own, plucked by this thread until the call ends,
 * so one rpc_client may be shared by the calls of one thread, and threads
 * that want independent connections open one client each.
 *
 *   rpc_init();                           once per process
 *   rpc_client *c = rpc_connect("127.0.0.1:7421");
 *   rpc_status st;
 *   ProtobufCMessage *resp;
 *   if (rpc_unary(c, "/compiled.v1.Compiler/Stats", &req.base,
 *                 &compiled__v1__stats_response__descriptor, &resp, 5000,
 *                 &st) == 0) {
 *     ... use resp ...
 *     protobuf_c_message_free_unpacked(resp, NULL);
 *   }
 *   rpc_status_clear(&st);
 *   rpc_close(c);
 *   rpc_shutdown();                       once, at exit
 *
 * Server streaming: rpc_stream_start, then rpc_stream_next until it returns
 * 0, then rpc_stream_finish for the status. A caller may finish early: the
 * call is then cancelled.
 *
 * Errors of any kind (unreachable server, deadline, a response that does
 * not decode) end up in the rpc_status as a gRPC status code and a message;
 * no function here prints anything.
 */
#ifndef RPC_H
#define RPC_H

#include <stdbool.h>
#include <stdint.h>

#include <grpc/grpc.h>
#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>

#include "common/rpcwire.h" /* rpc_code_name, rpc_pack, RPC_GRAPH_ERROR_KEY */
#include "compiled/v1/compiled.pb-c.h"

typedef struct rpc_client rpc_client;
typedef struct rpc_stream rpc_stream;

/* How a call ended. rpc_status_init before use; rpc_status_clear after. */
typedef struct rpc_status {
  grpc_status_code code; /* GRPC_STATUS_OK on success */
  char *details;         /* the status message (malloc'd); "" when none */
  /* The decoded "compiled-error-bin" trailer when the server sent one, else
   * NULL. Owned by the status. */
  Compiled__V1__GraphError *graph_error;
  int messages; /* response messages received before the status */
} rpc_status;

/* Initialises and shuts down the gRPC library: once per process, around
 * every other function here. */
void rpc_init(void);
void rpc_shutdown(void);

/* Opens a channel to `target` ("host:port", "unix:/path", any gRPC target
 * name) without transport security. Connecting is lazy: an unreachable
 * server shows as UNAVAILABLE in the first call's status. Returns NULL only
 * when out of memory. The caller frees the client with rpc_close. */
rpc_client *rpc_connect(const char *target);

/* Closes the channel and frees `c` (NULL is fine). No call of `c` may be
 * in progress. */
void rpc_close(rpc_client *c);

/* rpc_connect over TLS: `ca` (PEM file; NULL: the system's roots), and a
 * client certificate and key for mutual TLS (NULL: none). NULL with a
 * message in err (when given) if a file cannot be read. */
rpc_client *rpc_connect_tls(const char *target, const char *ca,
                            const char *cert, const char *key, char *err,
                            size_t errlen);

/* Sends `authorization: Bearer TOKEN` with every call (NULL or "": none).
 * Returns 0, or -1 out of memory. */
int rpc_set_token(rpc_client *c, const char *token);

void rpc_status_init(rpc_status *st);
/* Frees what `st` holds and initialises it again. */
void rpc_status_clear(rpc_status *st);

/*
 * Calls unary method `method` ("/package.Service/Method") with `req` and
 * waits at most timeout_ms (<= 0: no deadline). On success returns 0 and
 * sets *resp to a message of type `resp_desc` that the caller frees with
 * protobuf_c_message_free_unpacked(*resp, NULL). Otherwise returns -1 and
 * sets *resp to NULL. Either way `st` (initialised by the caller) receives
 * the status; the caller clears it.
 */
int rpc_unary(rpc_client *c, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc,
              ProtobufCMessage **resp, int64_t timeout_ms, rpc_status *st);

/*
 * Starts a server-streaming call of `method` with `req`, whose responses
 * are of type `resp_desc`, with a deadline timeout_ms from now (<= 0: none).
 * Returns NULL only when out of memory; a failure to reach the server shows
 * in rpc_stream_finish's status. The stream must be ended with
 * rpc_stream_finish, which frees it.
 */
rpc_stream *rpc_stream_start(rpc_client *c, const char *method,
                             const ProtobufCMessage *req,
                             const ProtobufCMessageDescriptor *resp_desc,
                             int64_t timeout_ms);

/*
 * Waits for the next response. Returns 1 and sets *msg (the caller frees it
 * with protobuf_c_message_free_unpacked(*msg, NULL)); or returns 0 at the
 * end of the stream, whether the call succeeded or failed (the status tells
 * which). A response that does not decode ends the stream: the call is
 * cancelled and its status becomes INTERNAL.
 */
int rpc_stream_next(rpc_stream *s, ProtobufCMessage **msg);

/*
 * Ends the call (cancelling it when the stream was not read to its end),
 * fills `st` (initialised by the caller) and frees `s`. Returns 0 when the
 * status is OK, else -1.
 */
int rpc_stream_finish(rpc_stream *s, rpc_status *st);

#endif
