/*
 * monocond.h: condition variables whose timed waits count on the monotonic
 * clock, for the threads that wait with a deadline (the cache's touch
 * flusher, the explorer's derivations, the metrics listener's watchdog): a
 * step of the wall clock neither cuts such a wait short nor stretches it.
 */
#ifndef COMMON_MONOCOND_H
#define COMMON_MONOCOND_H

#include <pthread.h>

/* pthread_cond_init of `cv` on CLOCK_MONOTONIC: pthread_cond_timedwait's
 * deadline is then a clock_gettime(CLOCK_MONOTONIC) time. */
void monocond_init(pthread_cond_t *cv);

#endif
