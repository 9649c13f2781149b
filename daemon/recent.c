/*
 * recent.c: the ring of recent requests and the hour of counts. See
 * recent.h.
 */
#include "daemon/recent.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void recent_init(recent *r) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  r->next = 1;
}

void recent_destroy(recent *r) {
  pthread_mutex_destroy(&r->mu);
}

bool recent_is_hit(const char *o) {
  return !strcmp(o, "hit") || !strcmp(o, "l2-hit");
}

static void count(recent *rc, const recent_req *r) {
  int64_t s = r->at_ms / 1000;
  int64_t start = s - s % RECENT_BUCKET_S;
  recent_bucket *b = &rc->series[(start / RECENT_BUCKET_S) % RECENT_BUCKETS];
  if (b->start != start)
    *b = (recent_bucket){.start = start};
  b->requests++;
  const char *o = r->outcome;
  if (recent_is_hit(o))
    b->hits++;
  else if (!strcmp(o, "compiled") || !strcmp(o, "joined") ||
           !strncmp(o, "refused", 7))
    b->misses++;
  if (!strcmp(o, "joined"))
    b->joins++;
  if (!strcmp(o, "compiled")) {
    b->compiles++;
    b->compile_us += r->compile_us > 0 ? (uint64_t)r->compile_us : 0;
  }
  if (!strcmp(o, "failed") || !strcmp(o, "failed-remembered") ||
      !strcmp(o, "invalid"))
    b->failures++;
}

void recent_add(recent *rc, recent_req *r) {
  r->at_ms = now_ms();
  pthread_mutex_lock(&rc->mu);
  r->seq = rc->next++;
  rc->ring[(r->seq - 1) % RECENT_CAP] = *r;
  count(rc, r);
  pthread_mutex_unlock(&rc->mu);
}

int recent_list(recent *rc, uint64_t before, recent_req *out, int max) {
  int n = 0;
  pthread_mutex_lock(&rc->mu);
  uint64_t newest = rc->next - 1;
  uint64_t from = before && before - 1 < newest ? before - 1 : newest;
  uint64_t oldest = newest > RECENT_CAP ? newest - RECENT_CAP + 1 : 1;
  for (uint64_t s = from; s >= oldest && s > 0 && n < max; s--)
    out[n++] = rc->ring[(s - 1) % RECENT_CAP];
  pthread_mutex_unlock(&rc->mu);
  return n;
}

bool recent_get(recent *rc, uint64_t seq, recent_req *out) {
  pthread_mutex_lock(&rc->mu);
  uint64_t newest = rc->next - 1;
  bool ok = seq > 0 && seq <= newest && newest - seq < RECENT_CAP;
  if (ok)
    *out = rc->ring[(seq - 1) % RECENT_CAP];
  pthread_mutex_unlock(&rc->mu);
  return ok;
}

int recent_series(recent *rc, recent_bucket out[RECENT_BUCKETS]) {
  int64_t s = now_ms() / 1000;
  int64_t newest = s - s % RECENT_BUCKET_S;
  int64_t oldest = newest - (int64_t)(RECENT_BUCKETS - 1) * RECENT_BUCKET_S;
  int n = 0;
  pthread_mutex_lock(&rc->mu);
  for (int64_t t = oldest; t <= newest; t += RECENT_BUCKET_S) {
    const recent_bucket *b =
        &rc->series[(t / RECENT_BUCKET_S) % RECENT_BUCKETS];
    if (b->start == t)
      out[n++] = *b;
  }
  pthread_mutex_unlock(&rc->mu);
  return n;
}
