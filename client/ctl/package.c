/*
 * package.c: `compilectl package MODEL.pt2 -o MODEL.cpkg [--target LEVEL]`.
 *
 * Reads a torch.export archive (client/lib/pt2.c), has the daemon compile
 * its graph for the target (cached like any graph), and writes one file a
 * process runs with no daemon, no tracing and no C compiler
 * (compiled.load_package): the artifact, the archive's weights and
 * constants, and the calling convention, covered by a SHA-256 and carrying
 * the artifact's signature when the daemon signs. docs/artifact.md,
 * "Packages", documents the format for other loaders.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "client/ctl/ctl.h"
#include "client/lib/pt2.h"

#define PKG_MAGIC "CPKG\r\n\x1a\n"
#define PKG_MAJOR 1
#define PKG_MINOR 0
#define PKG_ALIGN 64

static const char package_usage[] =
    "usage: compilectl package [OPTIONS] MODEL.pt2 -o MODEL.cpkg\n"
    "\n"
    "Compiles a torch.export program (torch.export.save's .pt2 archive) on\n"
    "the daemon and writes a package: one file holding the compiled\n"
    "artifact for the target, the program's weights and constants, and its\n"
    "calling convention, covered by a SHA-256 digest (and the artifact's\n"
    "signature when the daemon signs). compiled.load_package(PATH) runs it\n"
    "with no daemon; docs/artifact.md describes the format.\n"
    "\n"
    "options:\n"
    "  -o, --output OUT       the package to write (required)\n"
    "  --target LEVEL         x86-64, x86-64-v2, x86-64-v3 or x86-64-v4: the\n"
    "                         CPUs the package runs on (default: this\n"
    "                         machine's level)\n"
    "  --opt-level 0-3        optimisation level (default: the daemon's)\n"
    "  --timeout SECONDS      give up after this long (default 600)\n"
    "  -h, --help             this text\n";

/* The CPU features of each -march level (compiler/target.c). */
static const struct level {
  const char *name;
  const char *isa[10];
} levels[] = {
    {"x86-64", {NULL}},
    {"x86-64-v2", {"sse4.2", NULL}},
    {"x86-64-v3", {"sse4.2", "avx", "avx2", "fma", "bmi2", NULL}},
    {"x86-64-v4",
     {"sse4.2", "avx", "avx2", "fma", "bmi2", "avx512f", "avx512bw", "avx512vl",
      "avx512dq", NULL}},
};
#define N_LEVELS (sizeof levels / sizeof levels[0])

/* /proc/cpuinfo's name of a feature. */
static const char *cpuinfo_name(const char *f) {
  return strcmp(f, "sse4.2") == 0 ? "sse4_2" : f;
}

static bool has_flag(const char *flags, const char *f) {
  size_t n = strlen(f);
  for (const char *p = flags; (p = strstr(p, f)) != NULL; p += n)
    if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || !p[n]))
      return true;
  return false;
}

/* The highest level this machine's CPU has. */
static const struct level *host_level(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[8192];
  const struct level *best = &levels[0];
  if (!f)
    return best;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "flags", 5) != 0)
      continue;
    for (size_t i = 0; i < N_LEVELS; i++) {
      bool all = true;
      for (const char *const *x = levels[i].isa; *x; x++)
        all = all && has_flag(line, cpuinfo_name(*x));
      if (all)
        best = &levels[i];
    }
    break;
  }
  fclose(f);
  return best;
}

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static size_t align_up(size_t n) {
  return (n + PKG_ALIGN - 1) / PKG_ALIGN * PKG_ALIGN;
}

/* Writes the package. The convention is consumed (extended in place). */
static int write_package(const char *out, const pt2_program *p,
                         const char *level, const uint8_t *art, size_t art_len,
                         const char *sig, const char *sig_key) {
  json_t *h = json_deep_copy(p->convention);
  if (!h) {
    ctl_errorf("out of memory");
    return CTL_EIO;
  }
  /* the data section: the artifact, then each tensor */
  size_t off = 0;
  char digest[65];
  ctl_sha256_hex(art, art_len, digest);
  json_object_set_new(h, "format", json_string("compiled-package"));
  json_object_set_new(h, "target", json_string(level));
  json_object_set_new(h, "artifact",
                      json_pack("{sIsIssss?ss?}", "offset", (json_int_t)0,
                                "length", (json_int_t)art_len, "sha256", digest,
                                "signature", *sig ? sig : NULL, "signature_key",
                                *sig_key ? sig_key : NULL));
  if (!json_object_get(h, "artifact")) {
    json_decref(h);
    ctl_errorf("out of memory");
    return CTL_EIO;
  }
  off = align_up(art_len);
  json_t *tensors = json_array();
  json_object_set_new(h, "tensors", tensors);
  json_t *inputs = json_object_get(h, "inputs");
  for (size_t i = 0; i < p->n_tensors; i++) {
    const pt2_tensor *t = &p->tensors[i];
    if (t->input < 0)
      continue; /* in the archive but used by no input */
    json_t *in = json_array_get(inputs, (size_t)t->input);
    json_t *stored = json_object_get(in, "stored");
    json_array_append_new(
        tensors, json_pack("{sssisIsIsO}", "target", t->target, "input",
                           t->input, "offset", (json_int_t)off, "length",
                           (json_int_t)t->len, "meta", stored));
    json_object_set_new(in, "tensor",
                        json_integer((json_int_t)json_array_size(tensors) - 1));
    json_object_del(in, "stored");
    off = align_up(off + t->len);
  }
  size_t data_len = off;
  char *text = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(h);
  if (!text) {
    ctl_errorf("out of memory");
    return CTL_EIO;
  }
  size_t hlen = strlen(text);
  size_t data_start = align_up(24 + hlen);
  size_t total = data_start + data_len + 32;
  uint8_t *buf = calloc(1, total);
  if (!buf) {
    free(text);
    ctl_errorf("out of memory (%zu bytes)", total);
    return CTL_EIO;
  }
  memcpy(buf, PKG_MAGIC, 8);
  put_le(buf + 8, PKG_MAJOR, 4);
  put_le(buf + 12, PKG_MINOR, 4);
  put_le(buf + 16, hlen, 8);
  memcpy(buf + 24, text, hlen);
  free(text);
  memcpy(buf + data_start, art, art_len);
  off = align_up(art_len);
  for (size_t i = 0; i < p->n_tensors; i++) {
    if (p->tensors[i].input < 0)
      continue;
    memcpy(buf + data_start + off, p->tensors[i].data, p->tensors[i].len);
    off = align_up(off + p->tensors[i].len);
  }
  unsigned int n = 0;
  EVP_Digest(buf, total - 32, buf + total - 32, &n, EVP_sha256(), NULL);
  int rc = CTL_OK;
  if (ctl_write_file(out, buf, total) != 0) {
    ctl_errorf("%s: %s", out, strerror(errno));
    rc = CTL_EIO;
  }
  free(buf);
  return rc;
}

enum { O_TARGET = 256, O_OPT };

int ctl_cmd_package(int argc, char **argv) {
  static const struct option opts[] = {
      {"output", required_argument, NULL, 'o'},
      {"target", required_argument, NULL, O_TARGET},
      {"opt-level", required_argument, NULL, O_OPT},
      CTL_GLOBAL_OPTIONS,
      {NULL, 0, NULL, 0}};
  const char *out = NULL;
  const struct level *lv = NULL;
  int opt_level = -1, c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
    if (c == 'o') {
      out = optarg;
    } else if (c == O_TARGET) {
      for (size_t i = 0; i < N_LEVELS; i++)
        if (strcmp(optarg, levels[i].name) == 0)
          lv = &levels[i];
      if (!lv) {
        ctl_errorf("--target wants x86-64, x86-64-v2, x86-64-v3 or "
                   "x86-64-v4, got '%s'",
                   optarg);
        return CTL_EUSAGE;
      }
    } else if (c == O_OPT) {
      char *end;
      opt_level = (int)strtol(optarg, &end, 10);
      if (*end || end == optarg || opt_level < 0 || opt_level > 3) {
        ctl_errorf("--opt-level wants 0..3, got '%s'", optarg);
        return CTL_EUSAGE;
      }
    } else if (c == 'h') {
      ctl_help(stdout, package_usage);
      return CTL_OK;
    } else if (ctl_global_option(c, optarg) <= 0) {
      ctl_help(stderr, package_usage);
      return CTL_EUSAGE;
    }
  }
  if (optind != argc - 1 || !out) {
    ctl_errorf("package: wants one MODEL.pt2 and -o OUT");
    ctl_help(stderr, package_usage);
    return CTL_EUSAGE;
  }
  const char *path = argv[optind];
  if (!lv)
    lv = host_level();
  uint8_t *data;
  size_t len;
  if (ctl_read_file(path, &data, &len) != 0) {
    ctl_errorf("%s: %s", path, strerror(errno));
    return CTL_EIO;
  }
  char err[1024];
  pt2_program *p;
  int r = pt2_read(data, len, path, &p, err, sizeof err);
  free(data);
  if (r != 0) {
    ctl_errorf("%s", err);
    return CTL_EGRAPH;
  }
  Compiled__V1__Target target = COMPILED__V1__TARGET__INIT;
  target.arch = (char *)"x86_64";
  size_t n_isa = 0;
  while (lv->isa[n_isa])
    n_isa++;
  target.n_isa = n_isa;
  target.isa = (char **)lv->isa;
  rpc_client *cl = ctl_connect();
  if (!cl) {
    pt2_free(p);
    return CTL_EIO;
  }
  uint8_t *art = NULL;
  size_t art_len = 0;
  char *sig = NULL, *sig_key = NULL;
  int rc = ctl_compile_artifact(cl, path, p->graph, &target, opt_level,
                                ctl_timeout(600 * 1000), &art, &art_len, &sig,
                                &sig_key);
  rpc_close(cl);
  if (rc == CTL_OK)
    rc = write_package(out, p, lv->name, art, art_len, sig, sig_key);
  free(art);
  free(sig);
  free(sig_key);
  pt2_free(p);
  return rc;
}
