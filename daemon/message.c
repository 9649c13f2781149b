/*
 * message.c: the Compile RPC's messages (message.h): moved out of
 * compile.c so that admin.c, store.c and the explorer read and answer
 * them without depending on the Compile handler.
 */
#include "daemon/message.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/pipeline.h"

void daemon_components(const uint8_t parts[][GC_DIGEST_LEN],
                       Compiled__V1__KeyComponents *kc, char *hex) {
  char *h[GC_KEY_NCOMPONENTS];
  for (int i = 0; i < GC_KEY_NCOMPONENTS; i++) {
    h[i] = hex + i * GC_HEX_LEN;
    gc_digest_hex(parts[i], h[i]);
  }
  kc->graph = h[GC_KEY_GRAPH];
  kc->inputs = h[GC_KEY_INPUTS];
  kc->options = h[GC_KEY_OPTIONS];
  kc->target = h[GC_KEY_TARGET];
  kc->compiler = h[GC_KEY_COMPILER];
  kc->schema = h[GC_KEY_SCHEMA];
}

grpc_status_code daemon_status_of(int gc_code) {
  switch (gc_code) {
  case GC_EMALFORMED:
  case GC_EVERSION:
  case GC_EINVAL:
  case GC_ELIMIT:
  case GC_ESCHEMA:
  case GC_EJSON:
    return GRPC_STATUS_INVALID_ARGUMENT;
  case GC_ENOMEM:
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  case GC_EUNSUPPORTED:
    return GRPC_STATUS_UNIMPLEMENTED;
  case GC_ECANCELED:
    return GRPC_STATUS_CANCELLED;
  default:
    return GRPC_STATUS_INTERNAL;
  }
}

/* Ends a call with a graph error: status, message, and the details as a
 * GraphError in the "compiled-error-bin" trailer. */
void daemon_finish_graph_error(srv_call *c, int code, const gc_error *err) {
  Compiled__V1__GraphError ge;
  compiled__v1__graph_error__init(&ge);
  ge.message = (char *)err->msg;
  ge.node = err->node;
  ge.argument = (char *)err->arg;
  ge.code = (char *)gc_errname(code);
  srv_finish_bin(c, daemon_status_of(code), err->msg, RPC_GRAPH_ERROR_KEY,
                 &ge.base);
}

void daemon_sha256(const uint8_t *data, size_t len,
                   uint8_t out[GC_DIGEST_LEN]) {
  unsigned int n = 0;
  EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

/* Packs a CompileEvent holding the result into a new slice. */
grpc_slice daemon_pack_result(const daemon_result *r) {
  Compiled__V1__CompileResult res;
  Compiled__V1__KeyComponents kc;
  Compiled__V1__CompileEvent ev;
  char comp_hex[GC_KEY_NCOMPONENTS * GC_HEX_LEN], digest_hex[GC_HEX_LEN];
  char sig_hex[GC_HEX_LEN];
  compiled__v1__compile_result__init(&res);
  compiled__v1__key_components__init(&kc);
  compiled__v1__compile_event__init(&ev);
  daemon_components(r->key->part, &kc, comp_hex);
  gc_digest_hex(r->digest, digest_hex);
  res.key = (char *)r->hex;
  res.components = &kc;
  res.served = r->served;
  res.artifact_size = r->len;
  res.artifact_digest = digest_hex;
  res.compile_micros = r->compile_us;
  if (r->sig) {
    gc_digest_hex(r->sig->mac, sig_hex);
    res.signature = sig_hex;
    res.signature_key = (char *)r->sig->key_id;
  }
  if (r->must_inline || r->len <= r->max_inline) {
    res.artifact_inline = 1;
    res.artifact.data = (uint8_t *)r->artifact;
    res.artifact.len = r->len;
  }
  Compiled__V1__StageTiming tim[GC_MAX_STAGES];
  Compiled__V1__StageTiming *tp[GC_MAX_STAGES];
  int n = r->ntimings < GC_MAX_STAGES ? r->ntimings : GC_MAX_STAGES;
  for (int i = 0; i < n; i++) {
    compiled__v1__stage_timing__init(&tim[i]);
    tim[i].stage = (char *)r->timings[i].stage;
    tim[i].micros = r->timings[i].micros;
    tp[i] = &tim[i];
  }
  res.n_timings = (size_t)n;
  res.timings = tp;
  ev.event_case = COMPILED__V1__COMPILE_EVENT__EVENT_RESULT;
  ev.result = &res;
  size_t len = compiled__v1__compile_event__get_packed_size(&ev);
  grpc_slice s = grpc_slice_malloc(len);
  compiled__v1__compile_event__pack(&ev, GRPC_SLICE_START_PTR(s));
  return s;
}

/* Sends a packed result (the call takes its own reference) and finishes. */
void daemon_send_slice(srv_call *c, grpc_slice s) {
  srv_reply(c, grpc_raw_byte_buffer_create(&s, 1));
}

void daemon_send_result(srv_call *c, const daemon_result *r) {
  grpc_slice s = daemon_pack_result(r);
  daemon_send_slice(c, s);
  grpc_slice_unref(s);
}

int daemon_read_options(const Compiled__V1__CompileOptions *po, gc_options *o,
                        bool *force, gc_error *err) {
  gc_options_default(o);
  *force = false;
  if (!po)
    return 0;
  switch (po->opt_level) {
  case COMPILED__V1__OPT_LEVEL__OPT_LEVEL_DEFAULT:
    break;
  case COMPILED__V1__OPT_LEVEL__OPT_LEVEL_O0:
  case COMPILED__V1__OPT_LEVEL__OPT_LEVEL_O1:
  case COMPILED__V1__OPT_LEVEL__OPT_LEVEL_O2:
  case COMPILED__V1__OPT_LEVEL__OPT_LEVEL_O3:
    o->opt_level = (int)po->opt_level - 1;
    break;
  default:
    return gc_errorf(err, GC_EINVAL, "options.opt_level: unknown value %d",
                     (int)po->opt_level);
  }
  if (po->mode != COMPILED__V1__MODE__MODE_INFERENCE &&
      po->mode != COMPILED__V1__MODE__MODE_TRAINING)
    return gc_errorf(err, GC_EINVAL, "options.mode: unknown value %d",
                     (int)po->mode);
  o->training = po->mode == COMPILED__V1__MODE__MODE_TRAINING;
  o->keep_input_mutations = !po->return_input_mutations;
  o->separate_temporaries = po->separate_temporaries;
  o->eager_random = po->eager_random;
  *force = po->force;
  return 0;
}

int daemon_read_target(daemon_ctx *d, gc_arena *a,
                       const Compiled__V1__Target *pt, gc_target *t,
                       gc_error *err) {
  *t = d->target;
  if (!pt)
    return 0;
  /* Counts and lengths first: nothing is copied or joined before they are
   * known to be small. */
  if (pt->n_isa > DAEMON_TARGET_MAX_ISA)
    return gc_errorf(err, GC_ELIMIT,
                     "target.isa has %zu entries; the limit is %d", pt->n_isa,
                     DAEMON_TARGET_MAX_ISA);
  size_t len = 1;
  for (size_t i = 0; i < pt->n_isa; i++) {
    size_t n = strnlen(pt->isa[i], DAEMON_TARGET_MAX_NAME + 1);
    if (n > DAEMON_TARGET_MAX_NAME)
      return gc_errorf(err, GC_ELIMIT,
                       "target.isa[%zu] is longer than %d bytes, the limit", i,
                       DAEMON_TARGET_MAX_NAME);
    len += n + 1;
  }
  if (pt->arch &&
      strnlen(pt->arch, DAEMON_TARGET_MAX_NAME + 1) > DAEMON_TARGET_MAX_NAME)
    return gc_errorf(err, GC_ELIMIT,
                     "target.arch is longer than %d bytes, the limit",
                     DAEMON_TARGET_MAX_NAME);
  /* A target naming its architecture carries its whole ISA list: none is
   * the architecture's baseline (COMPILED_TARGET=x86-64 reports no
   * feature), not the daemon's features. */
  if (pt->arch && *pt->arch) {
    t->arch = pt->arch;
    t->isa = "";
  }
  if (pt->n_isa) {
    char *isa = gc_arena_alloc(a, len);
    if (!isa)
      return gc_errorf(err, GC_ENOMEM, "out of memory");
    size_t used = 0; /* appended at the end: linear in the list's bytes */
    for (size_t i = 0; i < pt->n_isa; i++) {
      size_t n = strlen(pt->isa[i]);
      if (i)
        isa[used++] = ',';
      memcpy(isa + used, pt->isa[i], n);
      used += n;
    }
    isa[used] = '\0';
    t->isa = isa;
  }
  return 0;
}
