/*
 * pool.h: a small pool of threads running jobs in FIFO order.
 *
 * The daemon decodes big requests on one (compile.c), so that a request of
 * tens of megabytes never holds a completion-queue thread: those threads
 * must stay free to answer cache hits. libuv's pool runs the compiles and is
 * one per process; this one is separate, sized by --decode-threads, and its
 * threads run at a lower scheduling priority (nice), so the completion-queue
 * threads get a core first.
 *
 * Jobs are never dropped: pool_free runs what is queued, then joins.
 */
#ifndef DAEMON_POOL_H
#define DAEMON_POOL_H

typedef struct pool pool;

/* Starts `threads` threads at niceness +`nice` (0: unchanged). NULL when
 * out of memory or no thread could start. */
pool *pool_new(int threads, int nice);

/* Queues fn(arg). Returns 0, or -1 when out of memory (fn is not run). */
int pool_submit(pool *p, void (*fn)(void *arg), void *arg);

/* Runs the queued jobs, stops the threads and frees the pool. NULL is
 * fine. */
void pool_free(pool *p);

#endif
