/*
 * test_arena.c: the arena's limit, its shared budget and its chunks
 * (compiler/arena.h).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "compiler/arena.h"

Test(arena, own_limit_refuses_and_says_so) {
  gc_arena *a = gc_arena_new(1000);
  cr_assert_not_null(gc_arena_alloc(a, 900));
  cr_assert_eq(gc_arena_refusal(a), GC_REFUSED_NONE);
  cr_assert_null(gc_arena_alloc(a, 200));
  cr_assert(gc_arena_exhausted(a));
  cr_assert_eq(gc_arena_refusal(a), GC_REFUSED_LIMIT);
  gc_arena_free(a);
}

Test(arena, budget_charged_for_chunks_and_given_back) {
  gc_budget b;
  gc_budget_init(&b, 64 << 20);
  gc_arena *a = gc_arena_new(0), *c = gc_arena_new(0);
  gc_arena_set_budget(a, &b, 0);
  gc_arena_set_budget(c, &b, 0);
  for (int i = 0; i < 1000; i++) {
    cr_assert_not_null(gc_arena_alloc(a, 1000));
    cr_assert_not_null(gc_arena_alloc(c, 3000));
  }
  cr_assert_eq(gc_budget_used(&b), gc_arena_held(a) + gc_arena_held(c));
  cr_assert_geq(gc_arena_held(c), gc_arena_used(c));
  gc_arena_free(a);
  cr_assert_eq(gc_budget_used(&b), gc_arena_held(c));
  gc_arena_free(c);
  cr_assert_eq(gc_budget_used(&b), 0);
}

Test(arena, budget_refuses_past_the_ceiling) {
  gc_budget b;
  gc_budget_init(&b, 32 << 20);
  cr_assert(gc_budget_charge(&b, 20 << 20, 0)); /* held by someone else */
  gc_arena *a = gc_arena_new(0);
  gc_arena_set_budget(a, &b, 24 << 20);
  size_t got = 0;
  while (gc_arena_alloc(a, 4096))
    got += 4096;
  cr_assert_eq(gc_arena_refusal(a), GC_REFUSED_BUDGET);
  cr_assert(got > (2 << 20) && got <= (4 << 20), "got %zu", got);
  cr_assert_leq(gc_budget_used(&b), 24 << 20);
  /* Up to the limit for an arena with the whole budget as its ceiling. */
  gc_arena *small = gc_arena_new(0);
  gc_arena_set_budget(small, &b, 0);
  cr_assert_not_null(gc_arena_alloc(small, 4 << 20));
  gc_arena_free(a);
  gc_arena_free(small);
  gc_budget_release(&b, 20 << 20);
  cr_assert_eq(gc_budget_used(&b), 0);
}

Test(arena, big_arena_uses_big_chunks_and_keeps_data) {
  gc_arena *a = gc_arena_new(0);
  unsigned char *first = gc_arena_alloc(a, 100);
  memset(first, 0xab, 100);
  for (int i = 0; i < 200000; i++) {
    unsigned char *p = gc_arena_alloc(a, 1000);
    cr_assert_not_null(p);
    cr_assert_eq((uintptr_t)p % 16, 0);
    memset(p, i & 0xff, 1000);
  }
  for (int i = 0; i < 100; i++)
    cr_assert_eq(first[i], 0xab);
  /* 200 MB in chunks of at most 8 MiB: little headroom. */
  cr_assert_lt(gc_arena_held(a), gc_arena_used(a) + (size_t)(9 << 20));
  gc_arena_free(a);
}

static void *charge_loop(void *arg) {
  gc_budget *b = arg;
  for (int i = 0; i < 100000; i++) {
    if (gc_budget_charge(b, 100, 0))
      gc_budget_release(b, 100);
  }
  return NULL;
}

Test(arena, budget_is_thread_safe) {
  gc_budget b;
  gc_budget_init(&b, 1000);
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    pthread_create(&t[i], NULL, charge_loop, &b);
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  cr_assert_eq(gc_budget_used(&b), 0);
}

Test(arena, grow_keeps_elements_and_doubles_room) {
  gc_arena *a = gc_arena_new(1 << 20);
  int *v = NULL, n = 0, cap = 0;
  for (int i = 0; i < 100; i++) {
    int *g = gc_arena_grow(a, v, n, &cap, 8, sizeof *v);
    cr_assert_not_null(g);
    cr_assert(i < 8 ? cap == 8 : cap >= n + 1 && cap <= 2 * (n + 1));
    v = g;
    v[n++] = i * 3;
  }
  for (int i = 0; i < 100; i++)
    cr_assert_eq(v[i], i * 3);
  cr_assert_eq(cap, 128);
  /* with room left, the array itself */
  cr_assert_eq(gc_arena_grow(a, v, n, &cap, 8, sizeof *v), v);
  /* out of memory: NULL, room unchanged */
  int big = 1 << 17;
  cr_assert_null(gc_arena_grow(a, v, big, &big, 8, sizeof *v));
  cr_assert_eq(big, 1 << 17);
  gc_arena_free(a);
}
