/*
 * explorer_derive.h: a program's view derived again from its kept request
 * (explorer_derive.c), and what explorer_program.c reads of it.
 */
#ifndef DAEMON_EXPLORER_DERIVE_H
#define DAEMON_EXPLORER_DERIVE_H

#include "compiled/v1/artifact.pb-c.h"
#include "daemon/explorer_internal.h"

#define C_MAX ((size_t)64 << 20) /* generated C inflated at most */
#define STACK_MAX 4096           /* a node's stack trace as shown */
#define NODE_KERNELS 8           /* kernels listed per node */
#define NPASSES 7

/* The passes whose output a view holds, in order. */
extern const char *const xd_pass_names[NPASSES];

typedef struct x_text {
  char *text; /* NULL: not derived */
  size_t len;
  size_t *line_at; /* offset of each line */
  int nlines;
  bool cut; /* over PASS_MAX */
} x_text;

typedef struct x_node {
  const char *text;   /* "%relu: float32[2, 16] = aten::relu(%addmm)" */
  const char *target; /* operator */
  const char *module; /* module path ("" if none) */
  const char *stack;  /* stack trace, cut at STACK_MAX ("" if none) */
  const char *file;   /* innermost frame of the stack trace, or NULL */
  int line;
  const char *func;
  const char *status; /* native, extern, fallback, folded, eager */
  const char *reason; /* why, for fallbacks (and a word for the others) */
  int kernels[NODE_KERNELS];
  int nkernels;
} x_node;

typedef struct x_kernel {
  const char *name;
  const char *kind; /* "loop", "call" (ATen, on the client), "library" */
  const char *what; /* the call's operator, or NULL */
  int *nodes;
  int nnodes;
  int line; /* 1-based line of its comment in the artifact's C; 0: none */
} x_kernel;

typedef struct x_buf {
  int id;
  int64_t offset, bytes;
  int first, last; /* live range, in kernels */
  const char *dtype;
  const char *shape;
  const char *value; /* the graph value it holds, or NULL */
  int share;         /* computed in place of buffer `share`; -1 */
} x_buf;

struct x_derived {
  x_derived *next;
  uint8_t key[GC_DIGEST_LEN];
  int refs;         /* under explorer.mu: the list's and readers' */
  size_t bytes;     /* what it holds */
  gc_arena *a;      /* owns everything below but the texts */
  char *error;      /* derivation stopped: why (the rest is partial) */
  const char *note; /* about the build or target it was derived with */
  bool functional;
  const char *eager_reason;
  x_text pass[NPASSES];
  x_text c; /* the artifact's C */
  x_node *nodes;
  int nnodes;
  x_kernel *kernels;
  int nkernels;
  x_buf *bufs;
  int nbufs;
  int64_t arena_bytes;
};

/* The view of `key`, derived now if need be, with a reference the caller
 * drops (xd_release). NULL with *status and the reason in why. */
x_derived *xd_acquire(daemon_ctx *d, const uint8_t *key, unsigned *status,
                      char *why, size_t whylen);
void xd_release(daemon_ctx *d, x_derived *v);

/* The artifact of `key`, unpacked with malloc (free with
 * compiled__v1__artifact__free_unpacked), or NULL with err set
 * (explorer_program.c). */
Compiled__V1__Artifact *xp_load_artifact(cache_conn *conn, const uint8_t *key,
                                         cache_info *info, char *err,
                                         size_t errlen);

/* The generated C of a native program, inflated (malloc'd), or NULL
 * (explorer_program.c). */
char *xp_inflate_source(const ProtobufCBinaryData *z, size_t *len);

#endif
