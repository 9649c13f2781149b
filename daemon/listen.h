/*
 * listen.h: the daemon's own listening sockets and accept loop.
 *
 * Why not the gRPC core's listener: after one failed accept4 with EMFILE
 * the core (1.51) drops its listening socket and never accepts again, even
 * once descriptors are free; and it neither caps connections nor reports
 * them. So the daemon binds, listens and accepts itself, on the libuv loop,
 * and hands each accepted socket to the core, which serves it like any
 * other connection (server.c, grpc_server_add_channel_from_fd). That gives:
 *
 *   a cap     at most `max_connections` open at once; one more is accepted
 *             and closed at once (the client sees the connection reset),
 *             counted, and logged at most every 10 seconds
 *   recovery  one descriptor is kept in reserve; when accept fails for lack
 *             of descriptors (EMFILE, ENFILE), the reserve is closed so the
 *             waiting connection can be accepted and closed, then taken back;
 *             if even that fails, accepting pauses 100 ms rather than
 *             spinning, and resumes by itself
 *   peers     the core names a connection it was handed "fd:N"; the table of
 *             accepted sockets gives its real address for the logs
 *
 * Open connections are counted without help from the core, which closes
 * sockets on its own: each accepted descriptor is remembered with its
 * device and inode, and is gone once fstat() says the descriptor is closed
 * or now names another file. The table is swept when the count reaches the
 * cap and when statistics are read.
 *
 * Threads: lsn_open/start/close/free run on the loop thread; lsn_peer and
 * lsn_stats_get may be called from any thread until lsn_free.
 */
#ifndef DAEMON_LISTEN_H
#define DAEMON_LISTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct lsn lsn;

/* Called on the loop thread with a connected, non-blocking socket whose
 * ownership moves to the callee. */
typedef void (*lsn_adopt_fn)(void *arg, int fd);

typedef struct lsn_stats {
  int connections;         /* open now */
  int max_connections;     /* the cap */
  uint64_t accepted;       /* connections handed to gRPC since start */
  uint64_t refused_cap;    /* closed at once: the cap was reached */
  uint64_t refused_no_fds; /* closed at once: no descriptor left */
} lsn_stats;

/* Binds every address `addr` ("host:port", "[v6]:port"; port 0 picks a
 * free one, shared by all addresses of the host) and listens. Nothing is
 * accepted before lsn_start. Returns 0, or -1 with a message in err. */
int lsn_open(lsn **out, uv_loop_t *loop, const char *addr, char *err,
             size_t errlen);

/* The bound port. */
int lsn_port(const lsn *l);

/* Starts accepting, handing connections to adopt(arg, fd). */
int lsn_start(lsn *l, int max_connections, lsn_adopt_fn adopt, void *arg);

/* Stops accepting and closes the listening sockets (connections already
 * handed over are not touched). lsn_peer and lsn_stats_get still work.
 * Loop thread; NULL is fine. */
void lsn_close(lsn *l);

/* Releases the listener (closing it first if need be) once no other thread
 * can call it; the memory goes when libuv has closed the handles, so run
 * the loop afterwards. Loop thread; NULL is fine. */
void lsn_free(lsn *l);

/* The address of the accepted connection on descriptor `fd`
 * ("ipv4:127.0.0.1:5555"), if it is still open. Thread-safe. */
bool lsn_peer(lsn *l, int fd, char *buf, size_t n);

/* Counts (sweeps closed connections first). Thread-safe. */
void lsn_stats_get(lsn *l, lsn_stats *st);

#endif
