/*
 * config.h: the daemon's settings, from defaults, an optional config file
 * and command-line flags (flags win over the file, the file over defaults).
 */
#ifndef DAEMON_CONFIG_H
#define DAEMON_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/log.h"

typedef struct config {
  char listen[256]; /* host:port */
  char cache_dir[1024];
  uint64_t cache_max_bytes;
  int workers;   /* compile worker threads */
  int max_queue; /* compiles waiting for a worker before refusing */
  uint64_t max_message_bytes;
  uint64_t memory_budget;       /* bytes all requests may hold together */
  uint64_t inline_decode_bytes; /* larger requests decode on decode threads */
  int decode_threads;           /* threads decoding big requests */
  int max_nodes;                /* nodes in a graph; 0: from the budget */
  uint64_t max_inline_bytes;    /* default inline artifact limit */
  uint64_t hot_cache_bytes;     /* in-memory tier of hit responses; 0: off */

  int cq_threads;            /* gRPC completion-queue threads */
  int max_connections;       /* open at once (lowered to fit the descriptors) */
  int max_client_calls;      /* calls open per client; 0: no limit */
  uint64_t max_client_bytes; /* request bytes held per client; 0: none */
  int idle_timeout;          /* seconds a connection may go without calls */
  int keepalive;     /* seconds between keepalive pings; 0: gRPC's 2 h */
  int grace_seconds; /* drain time on SIGTERM/SIGINT */
  int lame_duck_ms;  /* drain: answer new calls ourselves this long before
                        the port closes (UNAVAILABLE for new compiles) */
  int failure_ttl;   /* seconds a failed graph is remembered */
  log_level log_level;
  log_format log_format;
  char log_file[1024];        /* "" or "-": stderr */
  char port_file[1024];       /* write the bound port here ("": don't) */
  bool check_cache;           /* verify the cache and exit */
  int debug_compile_delay_ms; /* tests: each compile first waits this long */
  int debug_compile_stuck_ms; /* tests: ... and this long, abandoned or not */
  int debug_decode_delay_ms;  /* tests: each big decode first waits */
  bool native;                /* compile to native code (else ATen only) */
  char cc[1024];              /* the C compiler ($CC or cc) */
  int cc_timeout;             /* seconds a C compile may take */
  bool verify_ir;             /* verify the loop IR after every pass
                                 (default on) */
  char tokens[1024];          /* bearer tokens file ("": no authentication) */
  bool insecure;              /* allow a non-loopback --listen without tokens */
  char signing_keys[1024];    /* HMAC keys file ("": artifacts unsigned) */
  bool verify_cache;          /* check the signature of every cache read */
  char redis[512];            /* shared tier URL ("": none) */
  char metrics_listen[256];   /* HTTP host:port of /metrics ("": off) */
  int metrics_timeout;        /* seconds an HTTP request may take to come */
  char tls_cert[1024];        /* PEM chain for TLS on the gRPC port */
  char tls_key[1024];         /* its private key */
  char tls_client_ca[1024];   /* mutual TLS: CA of client certificates */
  int tls_handshake_timeout;  /* seconds a TLS handshake may take, all of it */
  int redis_timeout_ms;       /* connect and each command */
  char redis_ca[1024];        /* rediss://: CA of Redis's certificate */
  int redis_ttl;              /* seconds entries live in Redis */
  int redis_lease_ms;         /* a compile's lease, renewed while it runs */
  int redis_lease_wait_ms;    /* the longest wait on another's lease */
  bool redis_unsigned;        /* --redis without --signing-keys allowed */
  bool explorer;              /* serve the explorer on --metrics-listen */
  uint64_t explorer_keep_bytes; /* budget of kept requests; 0: keep none */
  uint64_t explorer_keep_max;   /* largest request kept (packed bytes) */
} config;

/* Fills defaults, reads --config FILE if given, then applies the flags.
 * Returns 0 to run, 1 when it printed --help/--version (exit 0), or -1
 * after printing a usage error (exit 2). */
int config_load(config *c, int argc, char **argv);

/* "64M" -> bytes. Returns 0 or -1. Suffixes K, M, G, T (powers of 1024). */
int config_parse_size(const char *s, uint64_t *out);

#endif
