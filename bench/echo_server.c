/*
 * echo_server.c: the baseline for the cache-hit benchmark. A bare gRPC
 * server on the same C core as the daemon, with the same number of
 * completion-queue threads, that answers a server-streaming call with one
 * message of the size the client asks for (initial metadata "x-size"),
 * prebuilt once per size. It reads and ignores the request, so the client
 * can send it exactly the bytes it sends the daemon.
 *
 * Usage: echo_server PORT_FILE [THREADS]   (listens on 127.0.0.1:0)
 * Stops on SIGTERM/SIGINT.
 */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PATH "/bench.Echo/Get"
#define ARMED 16
#define MAX_SIZES 16

typedef struct call call;
typedef struct tag {
  void (*fn)(call *c, bool ok);
} tag;

struct call {
  tag t_request, t_done;
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_byte_buffer *payload;
  grpc_byte_buffer *reply;
  int cancelled;
  atomic_int pending; /* the send batch and the close */
};

static grpc_server *server;
static grpc_completion_queue *cq;
static void *method;
static atomic_bool stopping;

/* Prebuilt replies by size; filled on first use under a lock. */
static pthread_mutex_t sizes_mu = PTHREAD_MUTEX_INITIALIZER;
static size_t sizes[MAX_SIZES];
static grpc_slice replies[MAX_SIZES];
static int nsizes;

static grpc_slice reply_for(size_t n) {
  pthread_mutex_lock(&sizes_mu);
  for (int i = 0; i < nsizes; i++)
    if (sizes[i] == n) {
      grpc_slice s = grpc_slice_ref(replies[i]);
      pthread_mutex_unlock(&sizes_mu);
      return s;
    }
  grpc_slice s = grpc_slice_malloc(n);
  for (size_t i = 0; i < n; i++)
    GRPC_SLICE_START_PTR(s)[i] = (uint8_t)(i * 131u + 7u);
  if (nsizes < MAX_SIZES) {
    sizes[nsizes] = n;
    replies[nsizes++] = grpc_slice_ref(s);
  }
  pthread_mutex_unlock(&sizes_mu);
  return s;
}

static void arm(void);

static void call_free(call *c) {
  if (c->call)
    grpc_call_unref(c->call);
  grpc_metadata_array_destroy(&c->md);
  if (c->payload)
    grpc_byte_buffer_destroy(c->payload);
  if (c->reply)
    grpc_byte_buffer_destroy(c->reply);
  free(c);
}

static void on_done(call *c, bool ok) {
  (void)ok;
  if (atomic_fetch_sub(&c->pending, 1) == 1)
    call_free(c);
}

static void on_request(call *c, bool ok) {
  if (!ok) {
    c->call = NULL;
    call_free(c);
    return;
  }
  if (!atomic_load(&stopping))
    arm();
  size_t n = 0;
  for (size_t i = 0; i < c->md.count; i++)
    if (grpc_slice_str_cmp(c->md.metadata[i].key, "x-size") == 0) {
      char buf[32] = {0};
      size_t len = GRPC_SLICE_LENGTH(c->md.metadata[i].value);
      memcpy(buf, GRPC_SLICE_START_PTR(c->md.metadata[i].value),
             len < sizeof buf - 1 ? len : sizeof buf - 1);
      n = (size_t)strtoull(buf, NULL, 10);
    }
  grpc_slice s = reply_for(n);
  c->reply = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  grpc_op ops[4];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = c->reply;
  ops[2].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[2].data.send_status_from_server.status = GRPC_STATUS_OK;
  grpc_slice empty = grpc_empty_slice();
  ops[2].data.send_status_from_server.status_details = &empty;
  ops[3].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[3].data.recv_close_on_server.cancelled = &c->cancelled;
  atomic_store(&c->pending, 1);
  if (grpc_call_start_batch(c->call, ops, 4, &c->t_done, NULL) != GRPC_CALL_OK)
    call_free(c);
}

static void arm(void) {
  call *c = calloc(1, sizeof *c);
  c->t_request.fn = on_request;
  c->t_done.fn = on_done;
  grpc_metadata_array_init(&c->md);
  if (grpc_server_request_registered_call(server, method, &c->call,
                                          &c->deadline, &c->md, &c->payload, cq,
                                          cq, &c->t_request) != GRPC_CALL_OK) {
    c->call = NULL;
    call_free(c);
  }
}

static void *cq_thread(void *arg) {
  (void)arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(
        cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN)
      return NULL;
    if (ev.type == GRPC_OP_COMPLETE && ev.tag) {
      tag *t = ev.tag;
      /* tags are the first or second member of a call */
      call *c = t->fn == on_request
                    ? (call *)((char *)t - offsetof(call, t_request))
                    : (call *)((char *)t - offsetof(call, t_done));
      t->fn(c, ev.success != 0);
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: echo_server PORT_FILE [THREADS]\n");
    return 2;
  }
  int nthreads = argc > 2 ? atoi(argv[2]) : 2;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  grpc_init();
  cq = grpc_completion_queue_create_for_next(NULL);
  grpc_arg a = {.type = GRPC_ARG_INTEGER,
                .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                .value.integer = 64 << 20};
  grpc_channel_args args = {1, &a};
  server = grpc_server_create(&args, NULL);
  method = grpc_server_register_method(
      server, PATH, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
  grpc_server_register_completion_queue(server, cq, NULL);
  grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
  int port = grpc_server_add_http2_port(server, "127.0.0.1:0", creds);
  grpc_server_credentials_release(creds);
  grpc_server_start(server);
  for (int i = 0; i < ARMED; i++)
    arm();
  pthread_t th[64];
  for (int i = 0; i < nthreads && i < 64; i++)
    pthread_create(&th[i], NULL, cq_thread, NULL);
  FILE *f = fopen(argv[1], "w");
  fprintf(f, "%d\n", port);
  fclose(f);
  int sig;
  sigwait(&set, &sig);
  atomic_store(&stopping, true);
  grpc_server_shutdown_and_notify(server, cq, NULL);
  grpc_server_cancel_all_calls(server);
  usleep(100000);
  grpc_server_destroy(server);
  grpc_completion_queue_shutdown(cq);
  for (int i = 0; i < nthreads && i < 64; i++)
    pthread_join(th[i], NULL);
  grpc_completion_queue_destroy(cq);
  for (int i = 0; i < nsizes; i++)
    grpc_slice_unref(replies[i]);
  grpc_shutdown();
  return 0;
}
