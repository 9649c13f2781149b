/*
 * server.h: the gRPC side of the daemon, on the gRPC C core.
 *
 * Threads. A few completion-queue threads block in grpc_completion_queue_next
 * and run each completion's callback. Handlers for cheap calls run right
 * there; anything that touches loop-owned state is posted to the libuv loop
 * with srv_post() (a locked queue plus uv_async_send, drained whole on each
 * wake).
 *
 * Calls. Every RPC is a srv_call: its request bytes, deadline and peer, a
 * send queue and a reference count. Sending is thread-safe: srv_send queues a
 * message, srv_finish queues the final status; one batch is in flight at a
 * time and the next starts from the completion. A call stays alive while a
 * batch is pending, while its close is pending, and while anybody holds a
 * reference (srv_call_ref/unref).
 *
 * Methods are registered by path with a handler; unknown methods get
 * UNIMPLEMENTED (a generic request is always armed for them).
 *
 * Connections. The daemon listens and accepts itself (listen.c: a cap on
 * open connections, recovery from running out of descriptors, peers) and
 * hands each connection to the core. Connections without calls for
 * idle_timeout_ms are closed by the core (GOAWAY).
 *
 * Shutdown. srv_shutdown stops accepting calls; existing calls go on until
 * they finish or srv_cancel_all cancels them; when the last call is gone the
 * `done` callback runs on the loop, after which srv_free may be called.
 */
#ifndef DAEMON_SERVER_H
#define DAEMON_SERVER_H

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/rpcwire.h"
#include "daemon/listen.h"

typedef struct srv srv;
typedef struct srv_call srv_call;

/* Runs on a completion-queue thread with one reference to the call, which
 * the handler must eventually drop (after srv_finish). */
typedef void (*srv_handler)(srv_call *c);

/* Authenticates a call before its handler runs: `value` is its
 * "authorization" metadata (NULL when absent). Returns the call's role
 * (>= 0, srv_call_role) and may name the credential in who[wholen] (for
 * logs), or returns < 0 to refuse the call UNAUTHENTICATED. */
typedef int (*srv_auth_fn)(void *user, const char *method, const char *value,
                           size_t len, char *who, size_t wholen);

typedef struct srv_options {
  void *user;                 /* returned by srv_call_user() */
  srv_auth_fn auth;           /* NULL: every call has role 0 */
  const char *listen;         /* "host:port"; port 0 picks a free one */
  uint64_t max_message_bytes; /* receive limit */
  int cq_threads;
  int max_connections; /* open at once; more are accepted and closed */
  int idle_timeout_ms; /* close connections without calls this long; 0: no */
  int keepalive_ms;    /* ping interval to find dead peers; 0: gRPC's */
  /* Per client (the credential's name from auth, else the peer's
   * address without its port): calls open at once, and request bytes
   * they hold (until the handler drops them); past either, a new call gets
   * RESOURCE_EXHAUSTED (a lone request is left to the memory budget). 0: no
   * limit. */
  int max_client_calls;
  uint64_t max_client_bytes;
  struct tls_server *tls; /* TLS terminated by the daemon (tls.h); NULL:
                             plain connections */
} srv_options;

/* Creates the server; nothing is bound yet. NULL on failure. */
srv *srv_new(uv_loop_t *loop, const srv_options *o);

/* Registers a method ("/compiled.v1.Compiler/Compile"). Before srv_start. */
int srv_add_method(srv *s, const char *path, srv_handler h);

/* Binds, starts the threads, arms requests and starts accepting. Returns
 * the bound port, or -1 (with a message in err) when the address cannot be
 * bound. */
int srv_start(srv *s, char *err, size_t errlen);

/* Runs fn(arg) on the loop thread soon. Thread-safe. */
void srv_post(srv *s, void (*fn)(void *arg), void *arg);

/* Stops accepting connections and calls; `done(arg)` runs on the loop once
 * every call has ended. */
void srv_shutdown(srv *s, void (*done)(void *arg), void *arg);

/* Cancels every live call (after a grace period). */
void srv_cancel_all(srv *s);

/* Live calls (for stats and shutdown). */
int srv_live_calls(srv *s);

/* Connection counts from the listener (zeros before srv_start). */
void srv_conn_stats(srv *s, lsn_stats *st);

/* Joins the threads and releases everything; the last piece is freed by
 * the loop, so run the loop once more afterwards. Only after `done` ran. */
void srv_free(srv *s);

/* ---- calls ---- */

/* The request message bytes (empty when the client sent none), made
 * contiguous on the first call (a copy of the received bytes: call it on
 * the thread that should pay for it). Valid until the call is freed or
 * srv_call_drop_request. */
const uint8_t *srv_call_request(srv_call *c, size_t *len);
bool srv_call_has_request(srv_call *c);

/* The request's length in bytes, without touching the bytes. */
size_t srv_call_request_len(srv_call *c);

/* Frees the request bytes (once they are decoded); srv_call_request then
 * gives an empty message. */
void srv_call_drop_request(srv_call *c);

/* The srv_options.user of the server the call arrived on. */
void *srv_call_user(srv_call *c);

/* The method path, the peer ("ipv4:127.0.0.1:5555"), the deadline. */
const char *srv_call_method(srv_call *c);
/* Calls answered so far, per method (NULL: unregistered ones) and gRPC
 * status code with a non-zero count. Any thread. */
void srv_method_counts(srv *s,
                       void (*fn)(void *arg, const char *method, int code,
                                  uint64_t n),
                       void *arg);

/* Calls refused for their client's limits so far. */
uint64_t srv_client_rejections(srv *s);

/* What srv_options.auth said: the role, and the credential's name ("" when
 * none). */
int srv_call_role(srv_call *c);
const char *srv_call_who(srv_call *c);
const char *srv_call_peer(srv_call *c);

/* Microseconds since the call arrived. */
int64_t srv_call_age_us(srv_call *c);

void srv_call_ref(srv_call *c);
void srv_call_unref(srv_call *c);

/* Queues a message (takes ownership of `bb`). */
void srv_send(srv_call *c, grpc_byte_buffer *bb);

/* Packs and queues a protobuf message. */
void srv_send_msg(srv_call *c, const ProtobufCMessage *m);

/* Queues a last message and status OK together, so they leave in one batch
 * with the initial metadata when nothing else is pending (takes `bb`). */
void srv_reply(srv_call *c, grpc_byte_buffer *bb);

/* Queues the final status. `details` is copied. A trailing binary metadata
 * entry (key ending in "-bin") may be attached with srv_finish_bin. */
void srv_finish(srv_call *c, grpc_status_code code, const char *details);
void srv_finish_bin(srv_call *c, grpc_status_code code, const char *details,
                    const char *md_key, const ProtobufCMessage *md_value);

/* True once the call is over because it was cancelled (client cancel,
 * deadline, server shutdown). */
bool srv_call_cancelled(srv_call *c);

/* Calls fn(c, arg) on a completion-queue thread when the call ends
 * cancelled, or at once if it already did. At most one callback. */
void srv_call_on_cancel(srv_call *c, void (*fn)(srv_call *c, void *arg),
                        void *arg);

#endif
