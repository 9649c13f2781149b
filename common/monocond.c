/*
 * monocond.c: condition variables on the monotonic clock. See monocond.h.
 */
#include "common/monocond.h"

#include <time.h>

void monocond_init(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
}
