/*
 * rpc.c: the synchronous gRPC client of rpc.h on the gRPC C core.
 *
 * A call is a grpc_call on a completion queue of its own (a "pluck" queue:
 * we wait for exactly the tag we started). Its life:
 *
 *   start    one batch: send initial metadata, the request, close
 *   next     one batch per response: receive a message (the first batch
 *            also receives the initial metadata); NULL means the stream
 *            ended, successfully or not
 *   finish   cancel when the stream was not drained; one batch receives the
 *            status and the trailing metadata, where the daemon's
 *            "compiled-error-bin" GraphError is looked for
 *
 * Unary calls are the same steps with exactly one response expected.
 * Deadlines are enforced by the core on the call; we pluck without one.
 */
#include "client/lib/rpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

/* Largest response accepted: artifacts can be big. */
#define RPC_MAX_RECEIVE (256 << 20)

struct rpc_client {
  grpc_channel *channel;
  char *authorization; /* "Bearer TOKEN", or NULL */
};

struct rpc_stream {
  grpc_call *call;
  grpc_completion_queue *cq;
  const ProtobufCMessageDescriptor *desc;
  grpc_metadata_array initial_md; /* received with the first response */
  bool got_initial;               /* initial_md was asked for */
  bool ended;                     /* a receive returned no message */
  int messages;                   /* responses decoded */
  const char *local_error;        /* a client-side failure, or NULL */
};

void rpc_init(void) {
  grpc_init();
}

/* Blocking, so that the library's threads and memory are gone when this
 * returns (plain grpc_shutdown may finish in the background, which valgrind
 * reports as leaks at exit). */
void rpc_shutdown(void) {
  grpc_shutdown_blocking();
}

static char *slurp_pem(const char *path) {
  FILE *f = path && *path ? fopen(path, "rb") : NULL;
  if (!f)
    return NULL;
  char *s = NULL;
  size_t n = 0, cap = 0;
  int ch;
  while ((ch = fgetc(f)) != EOF) {
    if (n + 2 > cap) {
      cap = cap ? cap * 2 : 4096;
      char *ns = realloc(s, cap);
      if (!ns) {
        free(s);
        fclose(f);
        return NULL;
      }
      s = ns;
    }
    s[n++] = (char)ch;
  }
  fclose(f);
  if (s)
    s[n] = '\0';
  return s;
}

rpc_client *rpc_connect(const char *target) {
  return rpc_connect_tls(target, NULL, NULL, NULL, NULL, 0);
}

rpc_client *rpc_connect_tls(const char *target, const char *ca,
                            const char *cert, const char *key, char *err,
                            size_t errlen) {
  rpc_client *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  grpc_arg args[2];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = RPC_MAX_RECEIVE;
  /* Each client gets connections of its own rather than sharing the
   * process-wide subchannel pool: a load generator wants N connections. */
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
  args[1].value.integer = 1;
  grpc_channel_args cargs = {.num_args = 2, .args = args};
  grpc_channel_credentials *creds = NULL;
  if ((ca && *ca) || (cert && *cert)) {
    char *ca_pem = slurp_pem(ca), *cert_pem = slurp_pem(cert),
         *key_pem = slurp_pem(key);
    const char *bad = (ca && *ca && !ca_pem)         ? ca
                      : (cert && *cert && !cert_pem) ? cert
                      : (cert && *cert && !key_pem)  ? (key ? key : "(no key)")
                                                     : NULL;
    if (bad) {
      if (err)
        snprintf(err, errlen, "cannot read %s", bad);
    } else {
      grpc_ssl_pem_key_cert_pair pair = {key_pem, cert_pem};
      creds = grpc_ssl_credentials_create(ca_pem, cert_pem ? &pair : NULL, NULL,
                                          NULL);
    }
    free(ca_pem);
    free(cert_pem);
    free(key_pem);
    if (!creds) {
      free(c);
      return NULL;
    }
  } else {
    creds = grpc_insecure_credentials_create();
  }
  c->channel = grpc_channel_create(target, creds, &cargs);
  grpc_channel_credentials_release(creds);
  if (!c->channel) {
    free(c);
    return NULL;
  }
  return c;
}

int rpc_set_token(rpc_client *c, const char *token) {
  free(c->authorization);
  c->authorization = NULL;
  if (!token || !*token)
    return 0;
  size_t n = strlen(token) + sizeof "Bearer ";
  if (!(c->authorization = malloc(n)))
    return -1;
  snprintf(c->authorization, n, "Bearer %s", token);
  return 0;
}

void rpc_close(rpc_client *c) {
  if (!c)
    return;
  grpc_channel_destroy(c->channel);
  free(c->authorization);
  free(c);
}

void rpc_status_init(rpc_status *st) {
  memset(st, 0, sizeof *st);
}

void rpc_status_clear(rpc_status *st) {
  free(st->details);
  if (st->graph_error)
    protobuf_c_message_free_unpacked(&st->graph_error->base, NULL);
  rpc_status_init(st);
}

/* ---- batches and messages ---- */

/* Runs `n` ops as one batch and waits for it. Returns the batch's success
 * flag (false also when the batch could not start). */
static bool run_batch(rpc_stream *s, const grpc_op *ops, size_t n) {
  void *tag = (void *)ops;
  if (grpc_call_start_batch(s->call, ops, n, tag, NULL) != GRPC_CALL_OK) {
    s->local_error = "the gRPC core refused a batch (client bug)";
    return false;
  }
  grpc_event ev = grpc_completion_queue_pluck(
      s->cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  return ev.type == GRPC_OP_COMPLETE && ev.success;
}

/* Decodes byte buffer `bb` as a `desc` message; NULL when it does not. */
static ProtobufCMessage *
unpack_message(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc) {
  grpc_byte_buffer_reader reader;
  if (!grpc_byte_buffer_reader_init(&reader, bb))
    return NULL;
  grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
  ProtobufCMessage *m = protobuf_c_message_unpack(
      desc, NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
  grpc_slice_unref(all);
  grpc_byte_buffer_reader_destroy(&reader);
  return m;
}

/* ---- streams ---- */

static gpr_timespec deadline_of(int64_t timeout_ms) {
  if (timeout_ms <= 0)
    return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

rpc_stream *rpc_stream_start(rpc_client *c, const char *method,
                             const ProtobufCMessage *req,
                             const ProtobufCMessageDescriptor *resp_desc,
                             int64_t timeout_ms) {
  rpc_stream *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->desc = resp_desc;
  grpc_metadata_array_init(&s->initial_md);
  s->cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_slice m = grpc_slice_from_copied_string(method);
  s->call =
      grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq,
                               m, NULL, deadline_of(timeout_ms), NULL);
  grpc_slice_unref(m);
  grpc_byte_buffer *bb = rpc_pack(req);
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  grpc_metadata md;
  if (c->authorization) {
    md.key = grpc_slice_from_static_string("authorization");
    md.value = grpc_slice_from_copied_string(c->authorization);
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &md;
  }
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = bb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  /* A failed send shows in the status; nothing to do about it here. */
  (void)run_batch(s, ops, 3);
  grpc_byte_buffer_destroy(bb);
  if (c->authorization)
    grpc_slice_unref(md.value);
  return s;
}

int rpc_stream_next(rpc_stream *s, ProtobufCMessage **msg) {
  *msg = NULL;
  if (s->ended)
    return 0;
  grpc_byte_buffer *bb = NULL;
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!s->got_initial) {
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = &s->initial_md;
    s->got_initial = true;
  }
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n++].data.recv_message.recv_message = &bb;
  if (!run_batch(s, ops, n) || !bb) {
    if (bb)
      grpc_byte_buffer_destroy(bb);
    s->ended = true;
    return 0;
  }
  *msg = unpack_message(bb, s->desc);
  grpc_byte_buffer_destroy(bb);
  if (!*msg) {
    s->local_error = "a response from the server does not decode";
    s->ended = true;
    grpc_call_cancel(s->call, NULL);
    return 0;
  }
  s->messages++;
  return 1;
}

/* Copies the GraphError trailer of `md`, if any, into `st`. */
static void find_graph_error(const grpc_metadata_array *md, rpc_status *st) {
  for (size_t i = 0; i < md->count; i++) {
    const grpc_metadata *e = &md->metadata[i];
    if (grpc_slice_str_cmp(e->key, RPC_GRAPH_ERROR_KEY) != 0)
      continue;
    st->graph_error = compiled__v1__graph_error__unpack(
        NULL, GRPC_SLICE_LENGTH(e->value), GRPC_SLICE_START_PTR(e->value));
    return;
  }
}

/* Receives the status of the call into `st`. */
static void receive_status(rpc_stream *s, rpc_status *st) {
  grpc_metadata_array trailing;
  grpc_metadata_array_init(&trailing);
  grpc_status_code code = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  op.data.recv_status_on_client.trailing_metadata = &trailing;
  op.data.recv_status_on_client.status = &code;
  op.data.recv_status_on_client.status_details = &details;
  bool ok = run_batch(s, &op, 1);
  if (!ok && !s->local_error)
    s->local_error = "the call ended without a status";
  st->code = ok ? code : GRPC_STATUS_INTERNAL;
  st->details = ok ? strndup((const char *)GRPC_SLICE_START_PTR(details),
                             GRPC_SLICE_LENGTH(details))
                   : NULL;
  if (ok)
    find_graph_error(&trailing, st);
  grpc_slice_unref(details);
  grpc_metadata_array_destroy(&trailing);
}

int rpc_stream_finish(rpc_stream *s, rpc_status *st) {
  rpc_status_clear(st);
  if (!s->ended)
    grpc_call_cancel(s->call, NULL);
  receive_status(s, st);
  if (s->local_error) {
    /* A client-side failure outranks the CANCELLED our cancel caused. */
    st->code = GRPC_STATUS_INTERNAL;
    free(st->details);
    st->details = strdup(s->local_error);
  }
  if (!st->details)
    st->details = strdup("");
  st->messages = s->messages;
  grpc_metadata_array_destroy(&s->initial_md);
  grpc_call_unref(s->call);
  grpc_completion_queue_shutdown(s->cq);
  grpc_completion_queue_destroy(s->cq);
  free(s);
  return st->code == GRPC_STATUS_OK ? 0 : -1;
}

/* ---- unary ---- */

int rpc_unary(rpc_client *c, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *resp_desc,
              ProtobufCMessage **resp, int64_t timeout_ms, rpc_status *st) {
  *resp = NULL;
  rpc_stream *s = rpc_stream_start(c, method, req, resp_desc, timeout_ms);
  if (!s) {
    rpc_status_clear(st);
    st->code = GRPC_STATUS_RESOURCE_EXHAUSTED;
    st->details = strdup("out of memory");
    return -1;
  }
  ProtobufCMessage *m = NULL;
  if (rpc_stream_next(s, &m) == 1) {
    ProtobufCMessage *extra = NULL;
    if (rpc_stream_next(s, &extra) == 1) {
      protobuf_c_message_free_unpacked(extra, NULL);
      s->local_error = "the server sent more than one response to a unary call";
    }
  }
  int rc = rpc_stream_finish(s, st);
  if (rc == 0 && !m) {
    free(st->details);
    st->code = GRPC_STATUS_INTERNAL;
    st->details = strdup("the server sent no response");
    rc = -1;
  }
  if (rc != 0 && m) {
    protobuf_c_message_free_unpacked(m, NULL);
    m = NULL;
  }
  *resp = m;
  return rc;
}
