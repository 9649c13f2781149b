/*
 * server.c: gRPC C core plumbing. See server.h for the model.
 *
 * Every asynchronous operation carries a tag: a small struct whose first
 * member is the function to run when it completes. The completion-queue
 * threads do nothing but take completions and run those functions.
 *
 * A call's life:
 *   arm      a srv_call is allocated and a request is posted for its method
 *            (registered: with the request payload; generic: unknown paths)
 *   matched  the request tag completes: re-arm the method, start the
 *            RECV_CLOSE_ON_SERVER batch (it completes when the call ends and
 *            says whether it was cancelled), run the handler
 *   sending  srv_send/srv_finish queue work; pump() starts one batch at a
 *            time (initial metadata with the first message, the status with
 *            the last)
 *   end      when the references (handler, pending batches, pending close)
 *            are gone, the call is unreffed and freed
 *
 * Live calls are counted from arming to freeing, so shutdown knows when no
 * call can touch the completion queue any more (shutting a queue down under
 * a live call aborts inside gRPC).
 */
#include "daemon/server.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/string_util.h>
#include <grpc/support/time.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/fnqueue.h"
#include "daemon/listen.h"
#include "daemon/log.h"
#include "daemon/tls.h"

/* Requests kept armed per method, so bursts do not wait for re-arming. */
#define ARMED_PER_METHOD 8
#define MAX_METHODS 32

typedef struct srv_tag {
  void (*fn)(struct srv_tag *t, bool ok);
} srv_tag;

#define NCODES 17 /* gRPC status codes 0..16 */

typedef struct method {
  char *path;
  srv_handler handler;
  void *registered; /* grpc_server_register_method's handle */
  atomic_uint_fast64_t answered[NCODES]; /* calls finished, by status */
} method;

struct srv {
  uv_loop_t *loop;
  grpc_server *server;
  grpc_completion_queue *cq;
  srv_options opts;
  char listen[256];
  lsn *lsn;                       /* our listening sockets (listen.c) */
  grpc_server_credentials *creds; /* insecure, for the connections we hand */
  method methods[MAX_METHODS];
  int nmethods;
  atomic_uint_fast64_t unknown_answered[NCODES]; /* unregistered methods */
  /* per-client use (open addressing, by client name) */
  pthread_mutex_t clients_mu;
  struct client *clients;
  size_t nclients_cap, nclients;
  atomic_uint_fast64_t client_rejections;
  /* TLS: the peer of the connection behind each socketpair end the core
   * serves (by descriptor) */
  pthread_mutex_t alias_mu;
  char (*alias)[64];
  int nalias;
  pthread_t *threads;
  int nthreads;
  /* loop bridge */
  uv_async_t async;
  pthread_mutex_t post_mu;
  fnq posts; /* srv_post's calls for the loop; guarded by post_mu */
  /* shutdown */
  atomic_int live; /* calls armed and not yet freed */
  atomic_bool shutting_down;
  bool shutdown_notified; /* grpc's shutdown tag completed (loop) */
  bool done_called;
  srv_tag t_shutdown;
  void (*done)(void *arg);
  void *done_arg;
};

/* A client's open calls and the request bytes they hold. */
typedef struct client {
  char name[96]; /* "" : free slot */
  int calls;
  uint64_t bytes;
} client;

/* One queued outgoing message. */
typedef struct out {
  grpc_byte_buffer *bb;
  struct out *next;
} out;

struct srv_call {
  srv *s;
  method *m; /* NULL: generic (unknown method) */
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_call_details details; /* generic requests */
  grpc_byte_buffer *payload; /* registered requests, until made contiguous */
  grpc_slice request;        /* the payload, contiguous (on first use) */
  size_t request_len;        /* its length, known from the start */
  bool has_request;
  char *peer;
  int role;        /* from srv_options.auth */
  char who[64];    /* the credential's name, for logs */
  char client[96]; /* counted against this client ("": not counted) */
  uint64_t client_bytes;
  int64_t start_us;
  srv_tag t_request, t_close, t_send;
  int cancelled; /* written by gRPC when the close completes */
  atomic_int refs;
  pthread_mutex_t mu;         /* guards everything below */
  out *head, *tail;           /* queued messages */
  grpc_byte_buffer *inflight; /* message of the batch in flight */
  bool sending;               /* a send batch is in flight */
  bool md_sent;               /* initial metadata went out */
  bool finish_queued, finish_started, finished;
  grpc_status_code status;
  grpc_slice status_details;
  grpc_metadata trailing; /* at most one trailing entry */
  size_t ntrailing;
  bool closed;
  void (*on_cancel)(srv_call *c, void *arg);
  void *on_cancel_arg;
};

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- the loop bridge ---- */

static void drain_posts(uv_async_t *a) {
  srv *s = a->data;
  pthread_mutex_lock(&s->post_mu);
  fnq_item *p = fnq_take(&s->posts);
  pthread_mutex_unlock(&s->post_mu);
  while (p) {
    fnq_item *next = p->next;
    p->fn(p->arg);
    free(p);
    p = next;
  }
}

void srv_post(srv *s, void (*fn)(void *arg), void *arg) {
  fnq_item *p = fnq_item_new(fn, arg);
  if (!p) {
    LOG(LOG_ERROR, "out of memory posting to the loop");
    abort(); /* losing a loop message would strand a call */
  }
  pthread_mutex_lock(&s->post_mu);
  fnq_push(&s->posts, p);
  pthread_mutex_unlock(&s->post_mu);
  uv_async_send(&s->async);
}

/* ---- completion-queue threads ---- */

static void *cq_thread(void *arg) {
  srv *s = arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(
        s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN)
      break;
    if (ev.type == GRPC_OP_COMPLETE) {
      srv_tag *t = ev.tag;
      t->fn(t, ev.success != 0);
    }
  }
  return NULL;
}

/* ---- calls ---- */

static void maybe_done(void *arg);

static client *client_slot(srv *s, const char *name, bool add);

/* Rebuilds the table with the clients that have calls open (the others'
 * slots would fill it over time); with clients_mu held. */
static void compact_clients(srv *s) {
  client *old = s->clients;
  size_t cap = s->nclients_cap;
  s->clients = calloc(cap, sizeof *s->clients);
  s->nclients = 0;
  if (!s->clients) { /* keep counting in the old table, full or not */
    s->clients = old;
    return;
  }
  for (size_t i = 0; i < cap; i++)
    if (old[i].name[0] && old[i].calls > 0) {
      client *c = client_slot(s, old[i].name, true);
      if (c)
        *c = old[i];
    }
  free(old);
}

/* The slot of client `name` (a new one when absent and `add`); NULL when
 * absent. Called with clients_mu held. */
static client *client_slot(srv *s, const char *name, bool add) {
  if (!s->clients)
    return NULL;
  size_t h = 1469598103934665603u;
  for (const char *p = name; *p; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211u;
  for (size_t i = 0; i < s->nclients_cap; i++) {
    client *c = &s->clients[(h + i) % s->nclients_cap];
    if (!strcmp(c->name, name))
      return c;
    if (!c->name[0]) {
      if (!add)
        return NULL;
      if (2 * (s->nclients + 1) > s->nclients_cap) {
        compact_clients(s);
        return client_slot(s, name, true);
      }
      snprintf(c->name, sizeof c->name, "%s", name);
      s->nclients++;
      return c;
    }
  }
  return NULL;
}

/* Gives a call's use back to its client: its request bytes, and with
 * `call` the call itself. */
static void client_release(srv_call *c, bool call) {
  srv *s = c->s;
  if (!c->client[0])
    return;
  pthread_mutex_lock(&s->clients_mu);
  client *k = client_slot(s, c->client, false);
  if (k) {
    k->calls -= call;
    k->bytes -= c->client_bytes;
    /* Slots stay (open addressing): a client that comes back reuses its
     * own; compact_clients drops the idle ones when the table fills. */
  }
  c->client_bytes = 0;
  if (call)
    c->client[0] = '\0';
  pthread_mutex_unlock(&s->clients_mu);
}

static void call_free(srv_call *c) {
  srv *s = c->s;
  client_release(c, true);
  if (c->call)
    grpc_call_unref(c->call);
  grpc_metadata_array_destroy(&c->md);
  if (!c->m)
    grpc_call_details_destroy(&c->details);
  if (c->payload)
    grpc_byte_buffer_destroy(c->payload);
  grpc_slice_unref(c->request);
  grpc_slice_unref(c->status_details);
  if (c->ntrailing) {
    grpc_slice_unref(c->trailing.key);
    grpc_slice_unref(c->trailing.value);
  }
  for (out *o = c->head; o;) {
    out *next = o->next;
    grpc_byte_buffer_destroy(o->bb);
    free(o);
    o = next;
  }
  if (c->inflight)
    grpc_byte_buffer_destroy(c->inflight);
  if (c->peer)
    gpr_free(c->peer);
  pthread_mutex_destroy(&c->mu);
  free(c);
  if (atomic_fetch_sub(&s->live, 1) == 1 && atomic_load(&s->shutting_down))
    srv_post(s, maybe_done, s);
}

void srv_call_ref(srv_call *c) {
  atomic_fetch_add(&c->refs, 1);
}

void srv_call_unref(srv_call *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1)
    call_free(c);
}

/* Starts the next send batch if none is in flight. Called with c->mu held. */
static void pump(srv_call *c) {
  if (c->sending || c->finish_started || !c->call)
    return;
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  out *o = c->head;
  if (!o && !c->finish_queued)
    return;
  if (!c->md_sent) {
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].data.send_initial_metadata.count = 0;
    n++;
    c->md_sent = true;
  }
  if (o) {
    c->head = o->next;
    if (!c->head)
      c->tail = NULL;
    c->inflight = o->bb;
    free(o);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = c->inflight;
    n++;
  }
  if (!c->head && c->finish_queued) {
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = c->status;
    ops[n].data.send_status_from_server.status_details = &c->status_details;
    ops[n].data.send_status_from_server.trailing_metadata_count = c->ntrailing;
    ops[n].data.send_status_from_server.trailing_metadata =
        c->ntrailing ? &c->trailing : NULL;
    n++;
    c->finish_started = true;
  }
  c->sending = true;
  srv_call_ref(c);
  grpc_call_error err =
      grpc_call_start_batch(c->call, ops, n, &c->t_send, NULL);
  if (err != GRPC_CALL_OK) {
    LOG(LOG_ERROR, "grpc_call_start_batch (send): error %d", (int)err);
    c->sending = false;
    c->finish_started = true;
    atomic_fetch_sub(&c->refs, 1); /* the caller still holds one */
  }
}

static void on_send(srv_tag *t, bool ok) {
  srv_call *c = (srv_call *)((char *)t - offsetof(srv_call, t_send));
  pthread_mutex_lock(&c->mu);
  c->sending = false;
  if (c->inflight) {
    grpc_byte_buffer_destroy(c->inflight);
    c->inflight = NULL;
  }
  if (!ok) {
    /* The call is broken (cancelled): nothing more will go out. */
    for (out *o = c->head; o;) {
      out *next = o->next;
      grpc_byte_buffer_destroy(o->bb);
      free(o);
      o = next;
    }
    c->head = c->tail = NULL;
    c->finish_started = true;
  }
  if (c->finish_started && !c->sending)
    c->finished = true;
  pump(c);
  pthread_mutex_unlock(&c->mu);
  srv_call_unref(c);
}

/* Counts a call's final status (once: callers hold c->mu and see
 * finish_queued unset). */
static void count_status(srv_call *c, grpc_status_code code) {
  unsigned i = (unsigned)code < NCODES ? (unsigned)code : GRPC_STATUS_UNKNOWN;
  atomic_fetch_add(c->m ? &c->m->answered[i] : &c->s->unknown_answered[i], 1);
}

/* Appends to the send queue; with `last`, queues status OK too before
 * pumping, so both go in one batch. */
static void enqueue(srv_call *c, grpc_byte_buffer *bb, bool last) {
  out *o = malloc(sizeof *o);
  if (!o) {
    grpc_byte_buffer_destroy(bb);
    return;
  }
  o->bb = bb;
  o->next = NULL;
  pthread_mutex_lock(&c->mu);
  if (c->finish_queued || c->finish_started) {
    pthread_mutex_unlock(&c->mu);
    grpc_byte_buffer_destroy(bb);
    free(o);
    return;
  }
  if (c->tail)
    c->tail->next = o;
  else
    c->head = o;
  c->tail = o;
  if (last) {
    c->finish_queued = true;
    c->status = GRPC_STATUS_OK;
    count_status(c, GRPC_STATUS_OK);
  }
  pump(c);
  pthread_mutex_unlock(&c->mu);
}

void srv_send(srv_call *c, grpc_byte_buffer *bb) {
  enqueue(c, bb, false);
}

void srv_reply(srv_call *c, grpc_byte_buffer *bb) {
  enqueue(c, bb, true);
}

void srv_send_msg(srv_call *c, const ProtobufCMessage *m) {
  srv_send(c, rpc_pack(m));
}

void srv_finish_bin(srv_call *c, grpc_status_code code, const char *details,
                    const char *md_key, const ProtobufCMessage *md_value) {
  pthread_mutex_lock(&c->mu);
  if (c->finish_queued || c->finish_started) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  c->finish_queued = true;
  c->status = code;
  count_status(c, code);
  grpc_slice_unref(c->status_details);
  c->status_details = grpc_slice_from_copied_string(details ? details : "");
  if (md_key && md_value) {
    size_t len = protobuf_c_message_get_packed_size(md_value);
    grpc_slice v = grpc_slice_malloc(len);
    protobuf_c_message_pack(md_value, GRPC_SLICE_START_PTR(v));
    c->trailing.key = grpc_slice_from_copied_string(md_key);
    c->trailing.value = v;
    c->ntrailing = 1;
  }
  pump(c);
  pthread_mutex_unlock(&c->mu);
}

void srv_finish(srv_call *c, grpc_status_code code, const char *details) {
  srv_finish_bin(c, code, details, NULL, NULL);
}

static void on_close(srv_tag *t, bool ok) {
  (void)ok;
  srv_call *c = (srv_call *)((char *)t - offsetof(srv_call, t_close));
  pthread_mutex_lock(&c->mu);
  c->closed = true;
  void (*fn)(srv_call *, void *) = c->cancelled ? c->on_cancel : NULL;
  void *arg = c->on_cancel_arg;
  c->on_cancel = NULL;
  pthread_mutex_unlock(&c->mu);
  if (fn)
    fn(c, arg);
  srv_call_unref(c);
}

bool srv_call_cancelled(srv_call *c) {
  pthread_mutex_lock(&c->mu);
  bool r = c->closed && c->cancelled;
  pthread_mutex_unlock(&c->mu);
  return r;
}

void srv_call_on_cancel(srv_call *c, void (*fn)(srv_call *c, void *arg),
                        void *arg) {
  pthread_mutex_lock(&c->mu);
  bool now = c->closed && c->cancelled;
  if (!now) {
    c->on_cancel = fn;
    c->on_cancel_arg = arg;
  }
  pthread_mutex_unlock(&c->mu);
  if (now)
    fn(c, arg);
}

/* The payload as one slice, made on first use: by the thread that needs
 * it, so a big copy never runs on a completion-queue thread unless the
 * handler reads the bytes there. */
const uint8_t *srv_call_request(srv_call *c, size_t *len) {
  pthread_mutex_lock(&c->mu);
  if (c->payload) {
    grpc_byte_buffer_reader r;
    if (grpc_byte_buffer_reader_init(&r, c->payload)) {
      grpc_slice_unref(c->request);
      c->request = grpc_byte_buffer_reader_readall(&r);
      grpc_byte_buffer_reader_destroy(&r);
    }
    grpc_byte_buffer_destroy(c->payload);
    c->payload = NULL;
  }
  pthread_mutex_unlock(&c->mu);
  *len = GRPC_SLICE_LENGTH(c->request);
  return GRPC_SLICE_START_PTR(c->request);
}

size_t srv_call_request_len(srv_call *c) {
  return c->request_len;
}

void srv_call_drop_request(srv_call *c) {
  client_release(c, false); /* the bytes are gone */
  pthread_mutex_lock(&c->mu);
  if (c->payload)
    grpc_byte_buffer_destroy(c->payload);
  c->payload = NULL;
  grpc_slice_unref(c->request);
  c->request = grpc_empty_slice();
  pthread_mutex_unlock(&c->mu);
}

bool srv_call_has_request(srv_call *c) {
  return c->has_request;
}

const char *srv_call_method(srv_call *c) {
  return c->m ? c->m->path : "(unknown)";
}

void srv_method_counts(srv *s,
                       void (*fn)(void *arg, const char *method, int code,
                                  uint64_t n),
                       void *arg) {
  for (int m = 0; m < s->nmethods; m++)
    for (int k = 0; k < NCODES; k++) {
      uint64_t n = atomic_load(&s->methods[m].answered[k]);
      if (n)
        fn(arg, s->methods[m].path, k, n);
    }
  for (int k = 0; k < NCODES; k++) {
    uint64_t n = atomic_load(&s->unknown_answered[k]);
    if (n)
      fn(arg, NULL, k, n);
  }
}

int srv_call_role(srv_call *c) {
  return c->role;
}

const char *srv_call_who(srv_call *c) {
  return c->who;
}

const char *srv_call_peer(srv_call *c) {
  return c->peer ? c->peer : "?";
}

void *srv_call_user(srv_call *c) {
  return c->s->opts.user;
}

int64_t srv_call_age_us(srv_call *c) {
  return now_us() - c->start_us;
}

/* ---- arming and matching ---- */

static void arm(srv *s, method *m);

static void unimplemented(srv_call *c) {
  char msg[512];
  char *path = grpc_slice_to_c_string(c->details.method);
  snprintf(msg, sizeof msg, "unknown method %s", path);
  LOG(LOG_DEBUG, "unimplemented method %s from %s", path, srv_call_peer(c));
  gpr_free(path);
  srv_finish(c, GRPC_STATUS_UNIMPLEMENTED, msg);
  srv_call_unref(c);
}

/* The core names a connection handed to it by descriptor "fd:N"; the
 * listener knows its address. */
static void resolve_peer(srv *s, srv_call *c) {
  char buf[80];
  if (!c->peer || strncmp(c->peer, "fd:", 3) != 0)
    return;
  int fd = atoi(c->peer + 3);
  bool found = false;
  if (s->opts.tls) {
    pthread_mutex_lock(&s->alias_mu);
    if (fd >= 0 && fd < s->nalias && s->alias[fd][0]) {
      snprintf(buf, sizeof buf, "%s", s->alias[fd]);
      found = true;
    }
    pthread_mutex_unlock(&s->alias_mu);
  } else {
    found = s->lsn && lsn_peer(s->lsn, fd, buf, sizeof buf);
  }
  if (!found)
    return;
  gpr_free(c->peer);
  c->peer = gpr_strdup(buf);
}

/* Runs srv_options.auth on the call's "authorization" metadata; false
 * when the call was refused (and finished). */
static bool authenticate(srv *s, srv_call *c) {
  if (!s->opts.auth)
    return true;
  const char *value = NULL;
  size_t len = 0;
  for (size_t i = 0; i < c->md.count; i++)
    if (grpc_slice_str_cmp(c->md.metadata[i].key, "authorization") == 0) {
      value = (const char *)GRPC_SLICE_START_PTR(c->md.metadata[i].value);
      len = GRPC_SLICE_LENGTH(c->md.metadata[i].value);
      break;
    }
  c->role = s->opts.auth(s->opts.user, c->m ? c->m->path : NULL, value, len,
                         c->who, sizeof c->who);
  if (c->role >= 0)
    return true;
  LOG(LOG_WARN, "refused %s from %s: %s bearer token", srv_call_method(c),
      srv_call_peer(c), value ? "unknown" : "no");
  srv_finish(c, GRPC_STATUS_UNAUTHENTICATED,
             value ? "unknown bearer token (metadata 'authorization: Bearer "
                     "TOKEN'; see the daemon's --tokens file)"
                   : "this daemon needs a bearer token (metadata "
                     "'authorization: Bearer TOKEN'; compilectl --token, "
                     "COMPILED_TOKEN)");
  srv_call_unref(c);
  return false;
}

/* Counts call c against its client's limits; false when over them (and
 * the call finished RESOURCE_EXHAUSTED). */
static bool admit_client(srv *s, srv_call *c) {
  if (!s->clients)
    return true;
  char name[96];
  if (c->who[0]) {
    snprintf(name, sizeof name, "token %s", c->who);
  } else {
    snprintf(name, sizeof name, "%s", srv_call_peer(c));
    char *colon = strrchr(name, ':'); /* the port */
    if (colon && colon != name)
      *colon = '\0';
  }
  uint64_t bytes = c->request_len;
  pthread_mutex_lock(&s->clients_mu);
  client *k = client_slot(s, name, true);
  /* bytes: a request joining others the client's calls still hold may
   * not take them past the limit (a lone big one is the memory budget's
   * to judge) */
  bool over =
      k &&
      ((s->opts.max_client_calls > 0 && k->calls >= s->opts.max_client_calls) ||
       (s->opts.max_client_bytes > 0 && bytes > 0 && k->bytes > 0 &&
        k->bytes + bytes > s->opts.max_client_bytes));
  int calls = k ? k->calls : 0;
  uint64_t held = k ? k->bytes : 0;
  if (k && !over) {
    k->calls++;
    k->bytes += bytes;
    snprintf(c->client, sizeof c->client, "%s", name);
    c->client_bytes = bytes;
  }
  pthread_mutex_unlock(&s->clients_mu);
  if (!over)
    return true;
  atomic_fetch_add(&s->client_rejections, 1);
  char msg[300];
  snprintf(msg, sizeof msg,
           "client %s has %d calls open holding %llu request bytes; the "
           "daemon allows %d calls and %llu bytes per client "
           "(--max-client-calls, --max-client-bytes): retry later",
           name, calls, (unsigned long long)held, s->opts.max_client_calls,
           (unsigned long long)s->opts.max_client_bytes);
  LOG(LOG_WARN, "refused %s: %s", srv_call_method(c), msg);
  srv_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
  srv_call_unref(c);
  return false;
}

uint64_t srv_client_rejections(srv *s) {
  return atomic_load(&s->client_rejections);
}

static void on_request(srv_tag *t, bool ok) {
  srv_call *c = (srv_call *)((char *)t - offsetof(srv_call, t_request));
  srv *s = c->s;
  if (!ok) {
    /* The server is shutting down: this request will never match. */
    c->call = NULL;
    srv_call_unref(c);
    return;
  }
  if (!atomic_load(&s->shutting_down))
    arm(s, c->m);
  c->start_us = now_us();
  c->peer = grpc_call_get_peer(c->call);
  resolve_peer(s, c);
  if (c->payload) {
    c->has_request = true;
    c->request_len = grpc_byte_buffer_length(c->payload);
  }
  /* The close batch holds a reference until the call is over. */
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->cancelled;
  srv_call_ref(c);
  if (grpc_call_start_batch(c->call, &op, 1, &c->t_close, NULL) !=
      GRPC_CALL_OK) {
    LOG(LOG_ERROR, "grpc_call_start_batch (close) failed");
    atomic_fetch_sub(&c->refs, 1);
  }
  if (!authenticate(s, c) || !admit_client(s, c))
    return;
  if (c->m)
    c->m->handler(c);
  else
    unimplemented(c);
}

static srv_call *call_new(srv *s, method *m) {
  srv_call *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->s = s;
  c->m = m;
  c->t_request.fn = on_request;
  c->t_close.fn = on_close;
  c->t_send.fn = on_send;
  c->request = grpc_empty_slice();
  c->status_details = grpc_empty_slice();
  atomic_init(&c->refs, 1);
  pthread_mutex_init(&c->mu, NULL);
  grpc_metadata_array_init(&c->md);
  if (!m)
    grpc_call_details_init(&c->details);
  atomic_fetch_add(&s->live, 1);
  return c;
}

/* Posts one request for method m (NULL: generic). */
static void arm(srv *s, method *m) {
  srv_call *c = call_new(s, m);
  if (!c) {
    LOG(LOG_ERROR, "out of memory arming a request");
    return;
  }
  grpc_call_error err;
  if (m)
    err = grpc_server_request_registered_call(
        s->server, m->registered, &c->call, &c->deadline, &c->md, &c->payload,
        s->cq, s->cq, &c->t_request);
  else
    err = grpc_server_request_call(s->server, &c->call, &c->details, &c->md,
                                   s->cq, s->cq, &c->t_request);
  if (err != GRPC_CALL_OK) {
    if (!atomic_load(&s->shutting_down))
      LOG(LOG_ERROR, "requesting a call failed: error %d", (int)err);
    c->call = NULL;
    srv_call_unref(c);
  }
}

/* ---- server ---- */

static void int_arg(grpc_arg *a, const char *key, int value) {
  a->type = GRPC_ARG_INTEGER;
  a->key = (char *)key;
  a->value.integer = value;
}

srv *srv_new(uv_loop_t *loop, const srv_options *o) {
  srv *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->loop = loop;
  s->opts = *o;
  snprintf(s->listen, sizeof s->listen, "%s", o->listen);
  s->opts.listen = s->listen;
  pthread_mutex_init(&s->post_mu, NULL);
  pthread_mutex_init(&s->clients_mu, NULL);
  pthread_mutex_init(&s->alias_mu, NULL);
  if (o->max_client_calls > 0 || o->max_client_bytes > 0) {
    /* twice the connections: a client per connection at most, half full */
    s->nclients_cap =
        2 * (size_t)(o->max_connections > 64 ? o->max_connections : 64) + 1;
    s->clients = calloc(s->nclients_cap, sizeof *s->clients);
  }
  atomic_init(&s->live, 0);
  atomic_init(&s->shutting_down, false);
  s->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_arg args[8];
  size_t n = 0;
  int_arg(&args[n++], GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
          o->max_message_bytes > INT32_MAX ? INT32_MAX
                                           : (int)o->max_message_bytes);
  int_arg(&args[n++], GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, -1);
  /* A connection without calls for this long gets GOAWAY and is closed;
   * that includes one that never finished its HTTP/2 handshake (the core
   * sees no call on it either). */
  if (o->idle_timeout_ms > 0)
    int_arg(&args[n++], GRPC_ARG_MAX_CONNECTION_IDLE_MS, o->idle_timeout_ms);
  /* Pings find peers that vanished without closing (their host went
   * down); unanswered for 20 s, the connection is dropped. */
  if (o->keepalive_ms > 0) {
    int_arg(&args[n++], GRPC_ARG_KEEPALIVE_TIME_MS, o->keepalive_ms);
    int_arg(&args[n++], GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
    int_arg(&args[n++], GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  grpc_channel_args ca = {n, args};
  s->server = grpc_server_create(&ca, NULL);
  s->creds = grpc_insecure_server_credentials_create();
  grpc_server_register_completion_queue(s->server, s->cq, NULL);
  uv_async_init(loop, &s->async, drain_posts);
  s->async.data = s;
  return s;
}

int srv_add_method(srv *s, const char *path, srv_handler h) {
  if (s->nmethods == MAX_METHODS)
    return -1;
  method *m = &s->methods[s->nmethods++];
  m->path = strdup(path);
  m->handler = h;
  m->registered = grpc_server_register_method(
      s->server, path, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
  return m->registered ? 0 : -1;
}

/* Remembers the peer of the TCP connection behind socketpair end `fd`. */
static void set_alias(srv *s, int fd, int tcp) {
  char peer[64] = "";
  if (s->lsn)
    lsn_peer(s->lsn, tcp, peer, sizeof peer);
  pthread_mutex_lock(&s->alias_mu);
  if (fd >= s->nalias) {
    int n = fd + 64;
    char(*a)[64] = realloc(s->alias, (size_t)n * sizeof *a);
    if (a) {
      memset(a + s->nalias, 0, (size_t)(n - s->nalias) * sizeof *a);
      s->alias = a;
      s->nalias = n;
    }
  }
  if (fd < s->nalias)
    snprintf(s->alias[fd], sizeof s->alias[fd], "%s", peer);
  pthread_mutex_unlock(&s->alias_mu);
}

/* Hands an accepted connection to the core (loop thread); with TLS, the
 * core gets one end of a socketpair and a bridge thread the rest. */
static void adopt(void *arg, int fd) {
  srv *s = arg;
  if (!s->opts.tls) {
    grpc_server_add_channel_from_fd(s->server, fd, s->creds);
    return;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    LOG(LOG_WARN, "TLS: socketpair failed (%s); connection closed",
        strerror(errno));
    close(fd);
    return;
  }
  int fl = fcntl(sv[0], F_GETFL);
  fcntl(sv[0], F_SETFL, fl | O_NONBLOCK);
  set_alias(s, sv[0], fd);
  if (tls_bridge(s->opts.tls, fd, sv[1]) != 0) {
    close(sv[0]);
    return;
  }
  grpc_server_add_channel_from_fd(s->server, sv[0], s->creds);
}

int srv_start(srv *s, char *err, size_t errlen) {
  if (lsn_open(&s->lsn, s->loop, s->listen, err, errlen) != 0)
    return -1;
  grpc_server_start(s->server);
  for (int i = 0; i < s->nmethods; i++)
    for (int k = 0; k < ARMED_PER_METHOD; k++)
      arm(s, &s->methods[i]);
  for (int k = 0; k < 2; k++)
    arm(s, NULL);
  s->nthreads = s->opts.cq_threads;
  s->threads = calloc((size_t)s->nthreads, sizeof *s->threads);
  for (int i = 0; i < s->nthreads; i++)
    pthread_create(&s->threads[i], NULL, cq_thread, s);
  lsn_start(s->lsn, s->opts.max_connections, adopt, s);
  return lsn_port(s->lsn);
}

void srv_conn_stats(srv *s, lsn_stats *st) {
  memset(st, 0, sizeof *st);
  if (s->lsn)
    lsn_stats_get(s->lsn, st);
}

static void maybe_done(void *arg) {
  srv *s = arg;
  if (s->done_called || !s->shutdown_notified || atomic_load(&s->live) > 0)
    return;
  s->done_called = true;
  if (s->done)
    s->done(s->done_arg);
}

static void shutdown_notified(void *arg) {
  srv *s = arg;
  s->shutdown_notified = true;
  maybe_done(s);
}

static void on_shutdown(srv_tag *t, bool ok) {
  (void)ok;
  srv *s = (srv *)((char *)t - offsetof(srv, t_shutdown));
  srv_post(s, shutdown_notified, s);
}

void srv_shutdown(srv *s, void (*done)(void *arg), void *arg) {
  if (atomic_exchange(&s->shutting_down, true))
    return;
  s->done = done;
  s->done_arg = arg;
  lsn_close(s->lsn); /* new connections are refused by the kernel now */
  s->t_shutdown.fn = on_shutdown;
  grpc_server_shutdown_and_notify(s->server, s->cq, &s->t_shutdown);
}

void srv_cancel_all(srv *s) {
  grpc_server_cancel_all_calls(s->server);
}

int srv_live_calls(srv *s) {
  return atomic_load(&s->live);
}

/* The async handle is the last thing alive; its close callback frees. */
static void close_async(uv_handle_t *h) {
  srv *s = h->data;
  for (int i = 0; i < s->nmethods; i++)
    free(s->methods[i].path);
  free(s->threads);
  free(s->clients);
  free(s->alias);
  pthread_mutex_destroy(&s->alias_mu);
  pthread_mutex_destroy(&s->post_mu);
  pthread_mutex_destroy(&s->clients_mu);
  free(s);
}

void srv_free(srv *s) {
  if (!s)
    return;
  grpc_server_destroy(s->server);
  grpc_completion_queue_shutdown(s->cq);
  for (int i = 0; i < s->nthreads; i++)
    pthread_join(s->threads[i], NULL);
  grpc_completion_queue_destroy(s->cq);
  grpc_server_credentials_release(s->creds);
  lsn_free(s->lsn); /* no thread can look a peer up any more */
  s->lsn = NULL;
  drain_posts(&s->async);
  uv_close((uv_handle_t *)&s->async, close_async);
}
