/*
 * auth.c: the tokens file and token checks. See auth.h.
 */
#include "daemon/auth.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HASH_LEN AUTH_DIGEST_LEN
#define NAME_LEN 64

typedef struct entry {
  uint8_t hash[HASH_LEN]; /* SHA-256 of the token */
  auth_role role;
  char name[NAME_LEN];
} entry;

typedef struct table {
  entry *e;
  int n;
} table;

struct auth {
  pthread_rwlock_t mu;
  table t;
};

static void digest(const char *s, size_t len, uint8_t out[HASH_LEN]) {
  unsigned int n = 0;
  EVP_Digest(s, len, out, &n, EVP_sha256(), NULL);
}

const char *auth_role_name(auth_role r) {
  switch (r) {
  case AUTH_READ:
    return "read";
  case AUTH_COMPILE:
    return "compile";
  case AUTH_ADMIN:
    return "admin";
  default:
    return "none";
  }
}

static auth_role parse_role(const char *s) {
  for (auth_role r = AUTH_READ; r <= AUTH_ADMIN; r++)
    if (!strcmp(s, auth_role_name(r)))
      return r;
  return AUTH_NONE;
}

/* Splits the next whitespace-separated word off *p (NUL-terminating it). */
static char *word(char **p) {
  char *s = *p;
  while (*s && isspace((unsigned char)*s))
    s++;
  if (!*s)
    return NULL;
  char *w = s;
  while (*s && !isspace((unsigned char)*s))
    s++;
  if (*s)
    *s++ = '\0';
  *p = s;
  return w;
}

static int load_table(const char *path, table *t, char *err, size_t errlen) {
  t->e = NULL;
  t->n = 0;
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "tokens file %s: %s", path, strerror(errno));
    return -1;
  }
  int cap = 0, lineno = 0, rc = 0;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    lineno++;
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n') {
      snprintf(err, errlen, "tokens file %s, line %d: longer than %zu bytes",
               path, lineno, sizeof line - 2);
      rc = -1;
      break;
    }
    char *hash = strchr(line, '#');
    if (hash)
      *hash = '\0';
    char *p = line, *role = word(&p);
    if (!role)
      continue;
    char *tok = word(&p), *name = word(&p), *extra = word(&p);
    auth_role r = parse_role(role);
    if (r == AUTH_NONE) {
      snprintf(err, errlen,
               "tokens file %s, line %d: unknown role '%.32s' (read, compile "
               "or admin)",
               path, lineno, role);
      rc = -1;
      break;
    }
    if (!tok || strlen(tok) < AUTH_MIN_TOKEN || extra) {
      snprintf(err, errlen,
               "tokens file %s, line %d: want 'ROLE TOKEN [NAME]' with a "
               "token of at least %d characters (e.g. from `openssl rand "
               "-hex 32`)",
               path, lineno, AUTH_MIN_TOKEN);
      rc = -1;
      break;
    }
    if (t->n == cap) {
      cap = cap ? cap * 2 : 8;
      entry *ne = realloc(t->e, (size_t)cap * sizeof *ne);
      if (!ne) {
        snprintf(err, errlen, "tokens file %s: out of memory", path);
        rc = -1;
        break;
      }
      t->e = ne;
    }
    entry *e = &t->e[t->n];
    digest(tok, strlen(tok), e->hash);
    e->role = r;
    snprintf(e->name, sizeof e->name, "%s", name ? name : "");
    if (!name)
      snprintf(e->name, sizeof e->name, "%s#%d", role, lineno);
    bool dup = false;
    for (int i = 0; i < t->n; i++)
      dup |= !memcmp(t->e[i].hash, e->hash, HASH_LEN);
    if (dup) {
      snprintf(err, errlen, "tokens file %s, line %d: the token is repeated",
               path, lineno);
      rc = -1;
      break;
    }
    t->n++;
  }
  if (!rc && ferror(f)) {
    snprintf(err, errlen, "tokens file %s: read error", path);
    rc = -1;
  }
  fclose(f);
  if (!rc && t->n == 0) {
    snprintf(err, errlen, "tokens file %s: no tokens ('ROLE TOKEN [NAME]')",
             path);
    rc = -1;
  }
  if (rc) {
    OPENSSL_cleanse(t->e, (size_t)cap * sizeof *t->e);
    free(t->e);
    t->e = NULL;
    t->n = 0;
  }
  OPENSSL_cleanse(line, sizeof line);
  return rc;
}

auth *auth_load(const char *path, char *err, size_t errlen) {
  auth *a = calloc(1, sizeof *a);
  if (!a) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (load_table(path, &a->t, err, errlen)) {
    free(a);
    return NULL;
  }
  pthread_rwlock_init(&a->mu, NULL);
  return a;
}

void auth_free(auth *a) {
  if (!a)
    return;
  pthread_rwlock_destroy(&a->mu);
  free(a->t.e);
  free(a);
}

int auth_reload(auth *a, const char *path, char *err, size_t errlen) {
  table t;
  if (load_table(path, &t, err, errlen))
    return -1;
  pthread_rwlock_wrlock(&a->mu);
  table old = a->t;
  a->t = t;
  pthread_rwlock_unlock(&a->mu);
  free(old.e);
  return 0;
}

int auth_count(auth *a) {
  pthread_rwlock_rdlock(&a->mu);
  int n = a->t.n;
  pthread_rwlock_unlock(&a->mu);
  return n;
}

void auth_token_digest(const char *token, size_t len,
                       unsigned char out[AUTH_DIGEST_LEN]) {
  digest(token, len, out);
}

auth_role auth_check(auth *a, const char *value, size_t len, char *name,
                     size_t namelen) {
  static const char scheme[] = "Bearer ";
  size_t sl = sizeof scheme - 1;
  if (!value || len <= sl || strncasecmp(value, scheme, sl) != 0)
    return AUTH_NONE;
  uint8_t h[HASH_LEN];
  digest(value + sl, len - sl, h);
  return auth_check_digest(a, h, name, namelen);
}

auth_role auth_check_digest(auth *a, const unsigned char h[AUTH_DIGEST_LEN],
                            char *name, size_t namelen) {
  auth_role role = AUTH_NONE;
  pthread_rwlock_rdlock(&a->mu);
  for (int i = 0; i < a->t.n; i++) /* every entry: no early exit */
    if (CRYPTO_memcmp(a->t.e[i].hash, h, HASH_LEN) == 0) {
      role = a->t.e[i].role;
      if (name && namelen)
        snprintf(name, namelen, "%s", a->t.e[i].name);
    }
  pthread_rwlock_unlock(&a->mu);
  return role;
}

bool auth_loopback_listen(const char *listen) {
  char host[256];
  const char *colon = strrchr(listen, ':');
  size_t n = colon ? (size_t)(colon - listen) : strlen(listen);
  if (n >= sizeof host)
    return false;
  memcpy(host, listen, n);
  host[n] = '\0';
  if (host[0] == '[' && n >= 2 && host[n - 1] == ']') { /* [::1] */
    memmove(host, host + 1, n - 2);
    host[n - 2] = '\0';
  }
  if (!strcmp(host, "localhost") || !strcmp(host, "::1"))
    return true;
  unsigned a, b, c, d;
  char tail;
  return sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 &&
         a == 127 && b < 256 && c < 256 && d < 256;
}
