/*
 * pool.c: fixed threads, one locked FIFO, a condition variable. See pool.h.
 */
#include "daemon/pool.h"

#include "common/fnqueue.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

struct pool {
  pthread_mutex_t mu; /* guards the queue and `stopping` */
  pthread_cond_t cv;  /* a job was queued, or the pool is stopping */
  fnq jobs;           /* waiting jobs */
  bool stopping;      /* pool_free was called */
  int nice;           /* niceness each thread sets for itself */
  pthread_t *threads;
  int nthreads; /* threads started */
};

static void *worker(void *arg) {
  pool *p = arg;
  /* Linux: niceness is per thread (the thread id names it). */
  if (p->nice)
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), p->nice);
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->jobs.head && !p->stopping)
      pthread_cond_wait(&p->cv, &p->mu);
    fnq_item *j = fnq_pop(&p->jobs);
    if (!j)
      break; /* stopping, and nothing left to run */
    pthread_mutex_unlock(&p->mu);
    j->fn(j->arg);
    free(j);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

pool *pool_new(int threads, int nice) {
  pool *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->threads = calloc((size_t)threads, sizeof *p->threads);
  if (!p->threads) {
    free(p);
    return NULL;
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->nice = nice;
  /* Signals go to the loop thread (libuv), never to a pool thread. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (int i = 0; i < threads; i++)
    if (pthread_create(&p->threads[p->nthreads], NULL, worker, p) == 0)
      p->nthreads++;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!p->nthreads) {
    pool_free(p);
    return NULL;
  }
  return p;
}

int pool_submit(pool *p, void (*fn)(void *arg), void *arg) {
  fnq_item *j = fnq_item_new(fn, arg);
  if (!j)
    return -1;
  pthread_mutex_lock(&p->mu);
  fnq_push(&p->jobs, j);
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return 0;
}

void pool_free(pool *p) {
  if (!p)
    return;
  pthread_mutex_lock(&p->mu);
  p->stopping = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->nthreads; i++)
    pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p->threads);
  free(p);
}
