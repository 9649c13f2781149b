/*
 * store.c: the tiered store (store.h): hot tier, sqlite (L1), Redis (L2),
 * trust checks, leases and signing, for compile.c and admin.c.
 */
#include "daemon/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/pipeline.h"
#include "daemon/log.h"
#include "daemon/message.h"

/* ---- the hot tier ---- */

static void hot_release(void *v) {
  store_hot *h = v;
  grpc_slice_unref(h->response);
  free(h);
}

/* Copies the entry, taking a reference to its response slice. */
static void hot_copy(const void *v, void *out) {
  const store_hot *h = v;
  store_hot *o = out;
  *o = *h;
  o->response = grpc_slice_ref(h->response);
}

int store_init(daemon_ctx *d) {
  return lru_init(&d->hot, d->cfg.hot_cache_bytes, hot_release);
}

void store_cleanup(daemon_ctx *d) {
  lru_destroy(&d->hot);
}

void store_forget_hot(daemon_ctx *d, const uint8_t *key) {
  lru_remove(&d->hot, key);
}

void store_remember_hot(daemon_ctx *d, const gc_key *key, const char *hex,
                        const store_entry *e) {
  if (!d->hot.budget || e->len > d->hot.budget)
    return;
  store_hot *h = malloc(sizeof *h);
  if (!h)
    return;
  const cache_sig *sig = e->is_signed ? &e->sig : NULL;
  daemon_result res = {.hex = hex,
                       .key = key,
                       .served = COMPILED__V1__SERVED__SERVED_L1_HIT,
                       .artifact = e->data,
                       .len = e->len,
                       .digest = e->digest,
                       .sig = sig,
                       .must_inline = true,
                       .compile_us = e->compile_us};
  h->response = daemon_pack_result(&res);
  h->is_signed = sig != NULL;
  if (sig)
    h->sig = *sig;
  h->key = *key;
  h->size = e->len;
  memcpy(h->digest, e->digest, GC_DIGEST_LEN);
  h->compile_us = e->compile_us;
  lru_put(&d->hot, key->key, h, GRPC_SLICE_LENGTH(h->response) + sizeof *h);
}

bool store_hot_get(daemon_ctx *d, const uint8_t *key, store_hot *out) {
  if (!lru_get(&d->hot, key, hot_copy, out))
    return false;
  if (d->cache)
    cache_touch(d->cache, key);
  return true;
}

/* ---- L1 ---- */

bool store_trusted(daemon_ctx *d, cache_conn *conn, const uint8_t *key,
                   const char *hex, const cache_info *info) {
  if (!d->signer || !d->cfg.verify_cache)
    return true;
  sign_check sc = signer_verify(d->signer, key, info->digest,
                                info->is_signed ? &info->sig : NULL);
  if (sc == SIGN_OK)
    return true;
  atomic_fetch_add(&d->stats.signature_failures, 1);
  LOG(LOG_WARN, "cache entry %s: %s%s%s; not served, dropped, recompiling", hex,
      sign_check_name(sc), sc == SIGN_UNKNOWN_KEY ? " " : "",
      sc == SIGN_UNKNOWN_KEY ? info->sig.key_id : "");
  cache_error cerr;
  if (cache_evict_key(conn, key, NULL, &cerr) != 0 && cerr.code != CACHE_EMISS)
    LOG(LOG_WARN, "dropping cache entry %s failed: %s", hex, cerr.msg);
  store_forget_hot(d, key);
  return false;
}

int store_get(daemon_ctx *d, cache_conn *conn, const uint8_t *key,
              const gc_key *full, const char *hex, store_entry *e,
              cache_info *info, cache_error *cerr) {
  memset(e, 0, sizeof *e);
  if (!conn)
    return CACHE_EIO;
  cache_info own;
  memset(&own, 0, sizeof own); /* filled by cache_get */
  cache_info *i = info ? info : &own;
  int rc = cache_get(conn, key, &e->data, &e->len, i, cerr);
  if (rc)
    return rc;
  if (!store_trusted(d, conn, key, hex, i)) {
    free(e->data);
    memset(e, 0, sizeof *e);
    return STORE_UNTRUSTED;
  }
  memcpy(e->digest, i->digest, GC_DIGEST_LEN);
  e->is_signed = i->is_signed;
  e->sig = i->sig;
  e->compile_us = (int64_t)i->compile_us;
  e->stored = true;
  if (full)
    store_remember_hot(d, full, hex, e);
  return 0;
}

/* The key's components, stored with an entry (Explain finds near misses
 * by them). */
static void key_parts(const gc_key *k, cache_part parts[GC_KEY_NCOMPONENTS]) {
  memset(parts, 0, GC_KEY_NCOMPONENTS * sizeof *parts);
  for (int i = 0; i < GC_KEY_NCOMPONENTS; i++) {
    snprintf(parts[i].name, sizeof parts[i].name, "%s",
             gc_key_component_name((gc_key_component)i));
    memcpy(parts[i].digest, k->part[i], GC_DIGEST_LEN);
  }
}

/* Stores e in L1 with the key's components and `label`; 0 or -1 (cerr). */
static int put_l1(cache_conn *conn, const gc_key *full,
                  const cache_label *label, const store_entry *e,
                  cache_error *cerr) {
  cache_part parts[GC_KEY_NCOMPONENTS];
  key_parts(full, parts);
  cache_meta meta = {.parts = parts,
                     .nparts = GC_KEY_NCOMPONENTS,
                     .compile_us = (uint64_t)e->compile_us,
                     .sig = e->is_signed ? &e->sig : NULL,
                     .label = label};
  return conn && cache_put_entry(conn, full->key, e->data, e->len, &meta,
                                 cerr) == 0
             ? 0
             : -1;
}

int store_put(daemon_ctx *d, cache_conn *conn, const gc_key *full,
              const char *hex, const cache_label *label, store_entry *e) {
  daemon_sha256(e->data, e->len, e->digest);
  if (d->signer) {
    e->is_signed = signer_sign(d->signer, full->key, e->digest, &e->sig);
    if (!e->is_signed)
      LOG(LOG_ERROR, "signing %s failed (OpenSSL); stored unsigned", hex);
  }
  if (d->l2 &&
      l2_put(d->l2, full->key, e->data, e->len, e->digest,
             e->is_signed ? &e->sig : NULL, (uint64_t)e->compile_us) == 0)
    atomic_fetch_add(&d->stats.l2_puts, 1);
  cache_error cerr;
  if (put_l1(conn, full, label, e, &cerr) != 0) {
    LOG(LOG_WARN, "storing %s failed: %s", hex,
        conn ? cerr.msg : "no cache connection");
    return -1;
  }
  e->stored = true;
  store_remember_hot(d, full, hex, e);
  return 0;
}

int store_forget(daemon_ctx *d, cache_conn *conn, const uint8_t *key,
                 uint64_t *freed, cache_error *cerr) {
  store_forget_hot(d, key); /* not served from memory either */
  return conn ? cache_evict_key(conn, key, freed, cerr) : CACHE_EIO;
}

/* ---- L2, on the worker ---- */

void store_lease_renew(daemon_ctx *d, const uint8_t *key, store_lease *l) {
  int64_t now = gc_now_us();
  if (!l->held || now - l->renewed < d->cfg.redis_lease_ms * 1000 / 3)
    return;
  l->renewed = now;
  l2_lease_renew(d->l2, key, d->owner, d->cfg.redis_lease_ms);
}

void store_lease_release(daemon_ctx *d, const uint8_t *key, store_lease *l) {
  if (!l->held)
    return;
  l2_lease_release(d->l2, key, d->owner);
  l->held = false;
}

/* The Redis lookup with the lease protocol (store_get_shared); true when
 * the entry was found. */
static bool from_l2(daemon_ctx *d, const uint8_t *key, const char *hex,
                    store_lease *lease, const atomic_bool *abandoned,
                    const atomic_bool *no_compile, store_entry *out) {
  int64_t waiting_since = 0; /* 0: not waiting */
  for (int polls = 0; !atomic_load(abandoned); polls++) {
    l2_entry e;
    int rc = l2_get(d->l2, key, &e);
    if (rc == L2_FOUND) {
      out->data = e.data;
      out->len = e.len;
      out->compile_us = (int64_t)e.compile_us;
      out->charged = e.charged;
      memcpy(out->digest, e.digest, GC_DIGEST_LEN);
      out->is_signed = e.is_signed;
      out->sig = e.sig;
      return true;
    }
    if (rc == L2_REFUSED)
      atomic_fetch_add(&d->stats.signature_failures, 1);
    else if (rc != L2_ABSENT)
      return false; /* down, or no memory for it now */
    bool read_only = atomic_load(no_compile);
    int t = read_only /* wait while someone holds it; never take it */
                ? L2_LEASE_HELD
                : l2_lease_take(d->l2, key, d->owner, d->cfg.redis_lease_ms);
    if (read_only && l2_lease_held(d->l2, key, d->cfg.redis_lease_ms) != 1)
      return false;
    if (t != L2_LEASE_HELD) {
      if (t == L2_LEASE_TAKEN || t == L2_LEASE_REPLACED) {
        lease->held = true;
        lease->renewed = gc_now_us();
        if (waiting_since || t == L2_LEASE_REPLACED) {
          atomic_fetch_add(&d->stats.lease_takeovers, 1);
          if (waiting_since)
            LOG(LOG_INFO, "%s: the lease was free again; compiling here", hex);
        }
      }
      return false;
    }
    int64_t now = gc_now_us();
    if (!waiting_since) {
      waiting_since = now;
      atomic_fetch_add(&d->stats.lease_waits, 1);
      LOG(LOG_DEBUG, "%s: another daemon is compiling it; waiting", hex);
    } else if (now - waiting_since >=
               (int64_t)d->cfg.redis_lease_wait_ms * 1000) {
      if (!read_only)
        atomic_fetch_add(&d->stats.lease_takeovers, 1);
      LOG(LOG_WARN,
          "%s: waited %d ms (--redis-lease-wait-ms) for the daemon holding "
          "its lease in Redis; %s",
          hex, d->cfg.redis_lease_wait_ms,
          read_only ? "giving up (this request may not compile)"
                    : "compiling here");
      return false;
    }
    uv_sleep(polls < 20 ? 25 : 100);
  }
  return false;
}

bool store_get_shared(daemon_ctx *d, cache_conn *conn, const gc_key *full,
                      const char *hex, const cache_label *label,
                      store_lease *lease, const atomic_bool *abandoned,
                      const atomic_bool *read_only, store_entry *e) {
  memset(e, 0, sizeof *e);
  if (!d->l2 || !from_l2(d, full->key, hex, lease, abandoned, read_only, e))
    return false;
  atomic_fetch_add(&d->stats.l2_hits, 1);
  /* Redis holds no label: the copy here gets this request's */
  cache_error cerr;
  e->stored = put_l1(conn, full, label, e, &cerr) == 0;
  store_remember_hot(d, full, hex, e);
  return true;
}

/* ---- nearest entries (Explain) ---- */

typedef struct nearest {
  const gc_key *key;
  const uint8_t *exclude; /* an entry never chosen (may be NULL) */
  cache_info best;
  int best_diff; /* components that differ; INT_MAX before the first */
  bool found;
} nearest;

static int differing(const gc_key *k, const cache_info *i, const char **names) {
  int n = 0;
  for (int c = 0; c < GC_KEY_NCOMPONENTS; c++) {
    const char *name = gc_key_component_name((gc_key_component)c);
    bool same = false;
    for (int p = 0; p < i->nparts; p++)
      if (!strcmp(i->parts[p].name, name))
        same = memcmp(i->parts[p].digest, k->part[c], GC_DIGEST_LEN) == 0;
    if (!same) {
      if (names)
        names[n] = name;
      n++;
    }
  }
  return n;
}

static int consider(const cache_info *info, void *arg) {
  nearest *nr = arg;
  if (nr->exclude && !memcmp(info->key, nr->exclude, GC_DIGEST_LEN))
    return 0;
  int diff = differing(nr->key, info, NULL);
  if (!nr->found || diff < nr->best_diff) {
    nr->best = *info;
    nr->best_diff = diff;
    nr->found = true;
  }
  return 0;
}

int store_nearest(cache_conn *conn, const gc_key *key, const uint8_t *exclude,
                  cache_info *best, const char **names) {
  nearest nr = {.key = key, .exclude = exclude};
  cache_error cerr;
  if (conn)
    cache_find_by_part(conn, "graph", key->part[GC_KEY_GRAPH], 1000, consider,
                       &nr, &cerr);
  if (!nr.found)
    return -1;
  *best = nr.best;
  return differing(key, &nr.best, names);
}
