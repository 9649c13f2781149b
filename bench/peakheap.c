/*
 * peakheap.c: counts the bytes a process has allocated with malloc and
 * friends, and the peak of that count, for `make bench-models`.
 *
 * Preloaded (LD_PRELOAD) into a benchmark's Python process, it forwards
 * every allocation to glibc and adds or subtracts its usable size. The
 * peak is the memory a computation needs, whatever glibc's heap did with
 * earlier frees (resident set size also counts freed memory glibc keeps,
 * and pages of holes it faults back in, so it differs between processes
 * that ran the same calls). Python reads it through ctypes:
 * peakheap_current(), peakheap_peak(), peakheap_reset() (peak := current).
 * PyTorch's CPU tensors, numpy arrays and Python objects all come from
 * these functions; memory mapped directly with mmap is not counted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stddef.h>

void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);
void __libc_free(void *p);

static _Atomic long long current, peak;

static void *counted(void *p) {
  if (p) {
    long long now =
        atomic_fetch_add(&current, (long long)malloc_usable_size(p)) +
        (long long)malloc_usable_size(p);
    long long seen = atomic_load(&peak);
    while (now > seen && !atomic_compare_exchange_weak(&peak, &seen, now))
      ;
  }
  return p;
}

static void uncount(void *p) {
  if (p)
    atomic_fetch_sub(&current, (long long)malloc_usable_size(p));
}

void *malloc(size_t n) {
  return counted(__libc_malloc(n));
}

void *calloc(size_t n, size_t size) {
  return counted(__libc_calloc(n, size));
}

void free(void *p) {
  uncount(p);
  __libc_free(p);
}

void *realloc(void *p, size_t n) {
  size_t old = p ? malloc_usable_size(p) : 0;
  void *q = __libc_realloc(p, n);
  if (q || !n) { /* p was freed (or moved into q) */
    atomic_fetch_sub(&current, (long long)old);
    counted(q);
  }
  return q;
}

void *memalign(size_t align, size_t n) {
  return counted(__libc_memalign(align, n));
}

void *aligned_alloc(size_t align, size_t n) {
  return counted(__libc_memalign(align, n));
}

int posix_memalign(void **out, size_t align, size_t n) {
  if (align < sizeof(void *) || (align & (align - 1)))
    return EINVAL;
  void *p = __libc_memalign(align, n);
  if (!p)
    return ENOMEM;
  *out = counted(p);
  return 0;
}

long long peakheap_current(void) {
  return atomic_load(&current);
}

long long peakheap_peak(void) {
  return atomic_load(&peak);
}

void peakheap_reset(void) {
  atomic_store(&peak, atomic_load(&current));
}
