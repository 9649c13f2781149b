/*
 * graph_cmd.c: `compilectl graph validate|hash|fmt|convert` and the pass
 * dumps (functionalize|lower|schedule|plan|codegen|program), the local tools
 * for graph files (.pb or .json). Nothing here talks to a server: they use
 * the same decoder, validator, key code and compiler passes as the daemon.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/ctl/ctl.h"
#include "client/lib/pbjson.h"
#include "common/spawn.h"
#include "compiler/functionalize.h"
#include "compiler/passes.h"
#include "compiler/graph.h"
#include "compiler/key.h"
#include "compiler/dump.h"
#include "compiler/target.h"

static const char graph_usage[] =
    "usage: compilectl graph COMMAND [OPTIONS] FILE...\n"
    "\n"
    "Graph files are GraphModule messages, binary (.pb) or JSON (.json);\n"
    "other names are recognised by content. \"-\" reads standard input.\n"
    "\n"
    "commands:\n"
    "  validate FILE...   check each graph; print precise errors, exit 1 if "
    "any\n"
    "  hash FILE...       print the cache key a daemon on this machine "
    "computes\n"
    "      --json                 also print the component hashes (JSON "
    "lines)\n"
    "      --opt-level N          compile option (default 2)\n"
    "      --training             training instead of inference\n"
    "      --return-input-mutations  return mutated inputs (runner applies "
    "them)\n"
    "      --separate-temporaries  large intermediates get their own memory\n"
    "                             (training programs' compile option)\n"
    "      --eager-random         random operators stay ATen calls (eager's\n"
    "                             numbers under the same seed)\n"
    "      --arch A, --isa LIST, --toolchain ID, --cflags FLAGS\n"
    "                             override the detected target\n"
    "      --cc CC                C compiler whose identity enters the key\n"
    "                             (default $CC, else cc)\n"
    "  fmt FILE           print the graph as readable text\n"
    "      --json                 print it as JSON instead\n"
    "  functionalize FILE the program the daemon makes: functional graph,\n"
    "                     input mutations and output aliasing\n"
    "      --return-input-mutations, --training   compile options\n"
    "  lower FILE         the loop IR the native back half makes of it\n"
    "  schedule FILE      its kernels (fusion) and loop order\n"
    "  plan FILE          the kernels with the memory plan\n"
    "  codegen FILE       the generated C\n"
    "  program FILE       the native program the runtime runs: values and\n"
    "                     their placements, segment calls, ATen calls\n"
    "      --return-input-mutations, --separate-temporaries, --eager-random\n"
    "                             compile options\n"
    "  compile FILE       run the passes (but the C compiler) as the daemon "
    "does\n"
    "      --dump-after PASS      print the state after PASS (functionalize,\n"
    "                             lower, schedule, plan, codegen, "
    "emit-native;\n"
    "                             all: each); repeatable\n"
    "      --verify               run every pass's verifier after it\n"
    "      --arch A, --isa LIST   override the detected target\n"
    "      and the compile options above\n"
    "  convert FILE       turn .pb into .json or back, losslessly\n"

    "      -o, --output OUT       write to OUT (default: standard output)\n"
    "      --to json|pb           output format (default: by OUT's extension,\n"
    "                             else the other one)\n";

/* A graph command's options that are only flags: sets *flags[i] for
 * opts[i]. Returns CTL_OK with optind at the files, -1 after the help, or
 * CTL_EUSAGE. `opts` ends with CTL_GLOBAL_OPTIONS and the zero entry. */
static int flag_options(int argc, char **argv, const struct option *opts,
                        bool *const *flags, int nflags) {
  int c, i, stop;
  optind = 0; /* afresh: see CTL_GLOBAL_OPTIONS */
  while ((c = ctl_getopt(argc, argv, "h", opts, &i, graph_usage, &stop)) != -1)
    if (c == 0 && i < nflags)
      *flags[i] = true;
  return stop;
}

/* One FILE after the flags; otherwise a usage error. */
static int one_file(int argc, char **argv) {
  if (optind == argc - 1)
    return CTL_OK;
  ctl_errorf("%s: wants one graph file, got %d", argv[0], argc - optind);
  ctl_help(stderr, graph_usage);
  return CTL_EUSAGE;
}

/* A graph file loaded and validated, with the arena that owns it. */
typedef struct loaded {
  Compiled__V1__GraphModule *msg;
  gc_arena *arena;
  gc_graph *graph;
} loaded;

static void loaded_free(loaded *l) {
  if (l->msg)
    protobuf_c_message_free_unpacked(&l->msg->base, NULL);
  gc_arena_free(l->arena);
  memset(l, 0, sizeof *l);
}

/* Loads and validates `path`. Prints the error and returns an exit code on
 * failure. */
static int load_valid(const char *path, loaded *l) {
  char err[1024];
  memset(l, 0, sizeof *l);
  int rc = ctl_load_graph(path, &l->msg, err, sizeof err);
  if (rc) {
    ctl_errorf("%s", err);
    return rc;
  }
  gc_limits lim;
  gc_limits_default(&lim);
  l->arena = gc_arena_new(lim.max_memory);
  if (!l->arena) {
    ctl_errorf("out of memory");
    loaded_free(l);
    return CTL_EIO;
  }
  gc_error gerr;
  if (gc_graph_from_message(l->arena, l->msg, &lim, &l->graph, &gerr) != 0) {
    fprintf(stderr, "%s: error: %s\n", path, gerr.msg);
    loaded_free(l);
    return CTL_EGRAPH;
  }
  return CTL_OK;
}

static int cmd_validate(int argc, char **argv) {
  static const struct option opts[] = {CTL_GLOBAL_OPTIONS, {NULL, 0, NULL, 0}};
  int rc = flag_options(argc, argv, opts, NULL, 0);
  if (rc)
    return rc < 0 ? CTL_OK : rc;
  if (optind >= argc) {
    ctl_errorf("validate: no graph file given");
    ctl_help(stderr, graph_usage);
    return CTL_EUSAGE;
  }
  int worst = CTL_OK;
  for (int i = optind; i < argc; i++) {
    loaded l;
    int lrc = load_valid(argv[i], &l);
    if (lrc) {
      if (worst == CTL_OK || lrc == CTL_EIO)
        worst = lrc;
      continue;
    }
    printf("%s: ok (%d inputs, %d nodes, %d outputs, %d operators)\n", argv[i],
           l.graph->ninputs, l.graph->nnodes, l.graph->noutputs, l.graph->nops);
    loaded_free(&l);
  }
  return worst;
}

static void print_key_json(const char *path, const gc_key *k) {
  char hex[GC_HEX_LEN];
  json_t *comp = json_object();
  for (int c = 0; c < GC_KEY_NCOMPONENTS; c++) {
    gc_digest_hex(k->part[c], hex);
    json_object_set_new(comp, gc_key_component_name((gc_key_component)c),
                        json_string(hex));
  }
  gc_digest_hex(k->key, hex);
  json_t *o = json_pack("{s:s, s:s, s:o}", "file", path, "key", hex,
                        "components", comp);
  char *text = json_dumps(o, JSON_PRESERVE_ORDER | JSON_COMPACT);
  if (text)
    puts(text);
  free(text);
  json_decref(o);
}

static int cmd_hash(int argc, char **argv) {
  enum {
    O_JSON = 256,
    O_OPT,
    O_TRAIN,
    O_RETMUT,
    O_SEPTEMP,
    O_EAGERRNG,
    O_ARCH,
    O_ISA,
    O_TC,
    O_CFLAGS,
    O_CC
  };
  static const struct option opts[] = {
      {"json", no_argument, NULL, O_JSON},
      {"opt-level", required_argument, NULL, O_OPT},
      {"training", no_argument, NULL, O_TRAIN},
      {"return-input-mutations", no_argument, NULL, O_RETMUT},
      {"separate-temporaries", no_argument, NULL, O_SEPTEMP},
      {"eager-random", no_argument, NULL, O_EAGERRNG},
      {"arch", required_argument, NULL, O_ARCH},
      {"isa", required_argument, NULL, O_ISA},
      {"toolchain", required_argument, NULL, O_TC},
      {"cflags", required_argument, NULL, O_CFLAGS},
      {"cc", required_argument, NULL, O_CC},
      CTL_GLOBAL_OPTIONS,
      {NULL, 0, NULL, 0}};
  gc_options o;
  gc_options_default(&o);
  gc_arena *ta = gc_arena_new(0);
  gc_target t;
  if (!ta || gc_target_host(ta, &t) != 0) {
    ctl_errorf("out of memory");
    gc_arena_free(ta);
    return CTL_EIO;
  }
  bool json = false;
  const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  int c, rc = CTL_OK;
  optind = 0; /* afresh: see CTL_GLOBAL_OPTIONS */
  while (rc == CTL_OK && (c = ctl_getopt(argc, argv, "h", opts, NULL,
                                         graph_usage, &rc)) != -1) {
    char *end;
    switch (c) {
    case O_JSON:
      json = true;
      break;
    case O_OPT:
      o.opt_level = (int)strtol(optarg, &end, 10);
      if (*end || o.opt_level < 0 || o.opt_level > 3) {
        ctl_errorf("--opt-level wants 0..3, got '%s'", optarg);
        rc = CTL_EUSAGE;
      }
      break;
    case O_TRAIN:
      o.training = true;
      break;
    case O_RETMUT:
      o.keep_input_mutations = false;
      break;
    case O_SEPTEMP:
      o.separate_temporaries = true;
      break;
    case O_EAGERRNG:
      o.eager_random = true;
      break;
    case O_ARCH:
      t.arch = optarg;
      break;
    case O_ISA:
      t.isa = optarg;
      break;
    case O_TC:
      t.toolchain = optarg;
      break;
    case O_CFLAGS:
      t.cflags = optarg;
      break;
    case O_CC:
      cc = optarg;
      break;
    }
  }
  if (rc < 0) { /* --help */
    gc_arena_free(ta);
    return CTL_OK;
  }
  if (rc == CTL_OK && optind >= argc) {
    ctl_errorf("hash: no graph file given");
    ctl_help(stderr, graph_usage);
    rc = CTL_EUSAGE;
  }
  if (rc == CTL_OK && !t.toolchain) {
    char id[512], why[600];
    if (spawn_first_line(cc, "--version", 10000, id, sizeof id, why,
                         sizeof why) != 0) {
      ctl_errorf("%s (the toolchain is part of the key: pass --cc or "
                 "--toolchain)",
                 why);
      rc = CTL_EIO;
    } else if (!(t.toolchain = gc_arena_strdup(ta, id))) {
      ctl_errorf("out of memory");
      rc = CTL_EIO;
    }
  }
  for (int i = optind; rc == CTL_OK && i < argc; i++) {
    loaded l;
    int lrc = load_valid(argv[i], &l);
    if (lrc) {
      rc = lrc;
      break;
    }
    gc_key key;
    gc_error err;
    if (gc_key_compute(l.graph, &o, &t, &key, &err) != 0) {
      ctl_errorf("%s: %s", argv[i], err.msg);
      rc = CTL_EGRAPH;
    } else if (json) {
      print_key_json(argv[i], &key);
    } else {
      char hex[GC_HEX_LEN];
      gc_digest_hex(key.key, hex);
      if (argc - optind > 1)
        printf("%s  %s\n", hex, argv[i]);
      else
        puts(hex);
    }
    loaded_free(&l);
  }
  gc_arena_free(ta);
  return rc;
}

/* The message as pretty JSON text ending in a newline (malloc'd), or NULL
 * after printing why. */
static char *message_json(const ProtobufCMessage *m) {
  char err[512];
  char *text = pbjson_encode_text(m, err, sizeof err);
  if (!text)
    ctl_errorf("%s", err);
  return text;
}

static int cmd_fmt(int argc, char **argv) {
  static const struct option opts[] = {
      {"json", no_argument, NULL, 0}, CTL_GLOBAL_OPTIONS, {NULL, 0, NULL, 0}};
  bool json = false;
  int rc = flag_options(argc, argv, opts, (bool *[]){&json}, 1);
  if (!rc)
    rc = one_file(argc, argv);
  if (rc)
    return rc < 0 ? CTL_OK : rc;
  const char *path = argv[optind];
  loaded l;
  rc = load_valid(path, &l);
  if (rc)
    return rc;
  if (json) {
    char *text = message_json(&l.msg->base);
    if (text)
      fputs(text, stdout);
    else
      rc = CTL_EIO;
    free(text);
  } else {
    gc_buf out = GC_BUF_INIT;
    gc_graph_print(l.graph, &out);
    if (out.failed)
      rc = CTL_EIO;
    else
      fputs(out.data, stdout);
    gc_buf_free(&out);
  }
  loaded_free(&l);
  return rc;
}

static int cmd_convert(int argc, char **argv) {
  static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                       {"to", required_argument, NULL, 't'},
                                       CTL_GLOBAL_OPTIONS,
                                       {NULL, 0, NULL, 0}};
  const char *out = "-", *to = NULL;
  int c, stop;
  optind = 0; /* afresh: see CTL_GLOBAL_OPTIONS */
  while ((c = ctl_getopt(argc, argv, "o:h", opts, NULL, graph_usage, &stop)) !=
         -1) {
    if (c == 'o')
      out = optarg;
    else if (c == 't')
      to = optarg;
  }
  if (stop)
    return stop < 0 ? CTL_OK : stop;
  int frc = one_file(argc, argv);
  if (frc)
    return frc;
  const char *in = argv[optind];
  char err[1024];
  Compiled__V1__GraphModule *msg;
  int rc = ctl_load_graph(in, &msg, err, sizeof err);
  if (rc) {
    ctl_errorf("%s", err);
    return rc;
  }
  uint8_t *head;
  size_t hlen;
  ctl_format from = CTL_FMT_PB;
  if (ctl_read_file(in, &head, &hlen) == 0) {
    from = ctl_guess_format(in, head, hlen);
    free(head);
  }
  ctl_format dest;
  if (to && strcmp(to, "json") == 0)
    dest = CTL_FMT_JSON;
  else if (to && strcmp(to, "pb") == 0)
    dest = CTL_FMT_PB;
  else if (to) {
    ctl_errorf("--to wants json or pb, got '%s'", to);
    protobuf_c_message_free_unpacked(&msg->base, NULL);
    return CTL_EUSAGE;
  } else if (strcmp(out, "-") != 0)
    dest = ctl_guess_format(out, NULL, 0);
  else
    dest = from == CTL_FMT_JSON ? CTL_FMT_PB : CTL_FMT_JSON;
  if (dest == CTL_FMT_PB && strcmp(out, "-") == 0 && isatty(STDOUT_FILENO)) {
    ctl_errorf("refusing to write binary protobuf to a terminal; use -o FILE");
    protobuf_c_message_free_unpacked(&msg->base, NULL);
    return CTL_EUSAGE;
  }
  int wrc;
  if (dest == CTL_FMT_JSON) {
    char *text = message_json(&msg->base);
    wrc = text ? ctl_write_file(out, text, strlen(text)) : -1;
    free(text);
    if (!text) {
      protobuf_c_message_free_unpacked(&msg->base, NULL);
      return CTL_EIO;
    }
  } else {
    size_t n = protobuf_c_message_get_packed_size(&msg->base);
    uint8_t *buf = malloc(n ? n : 1);
    wrc = buf ? (protobuf_c_message_pack(&msg->base, buf),
                 ctl_write_file(out, buf, n))
              : -1;
    free(buf);
  }
  protobuf_c_message_free_unpacked(&msg->base, NULL);
  if (wrc != 0) {
    ctl_errorf("%s: %s", out, strerror(errno));
    return CTL_EIO;
  }
  return CTL_OK;
}

/* `graph functionalize FILE`: the program functionalization makes, and the
 * input and output metadata, as text. */
static int cmd_functionalize(int argc, char **argv) {
  static const struct option opts[] = {
      {"return-input-mutations", no_argument, NULL, 0},
      {"training", no_argument, NULL, 0},
      CTL_GLOBAL_OPTIONS,
      {NULL, 0, NULL, 0}};
  gc_options o;
  gc_options_default(&o);
  bool retmut = false;
  int rc = flag_options(argc, argv, opts, (bool *[]){&retmut, &o.training}, 2);
  if (!rc)
    rc = one_file(argc, argv);
  if (rc)
    return rc < 0 ? CTL_OK : rc;
  o.keep_input_mutations = !retmut;
  const char *path = argv[optind];
  loaded l;
  rc = load_valid(path, &l);
  if (rc)
    return rc;
  gc_error err;
  int *order =
      gc_arena_calloc(l.arena, (size_t)l.graph->nnodes + 1, sizeof *order);
  gc_functional f;
  if (!order || gc_canonical_order(l.graph, order, &err) != 0 ||
      gc_functionalize(l.arena, l.graph, order, &o, &f, &err) != 0) {
    ctl_errorf("%s: %s", path, order ? err.msg : "out of memory");
    loaded_free(&l);
    return CTL_EGRAPH;
  }
  gc_buf out = GC_BUF_INIT;
  gc_functional_print(&f, &out);
  fputs(out.data ? out.data : "", stdout);
  gc_buf_free(&out);
  loaded_free(&l);
  return CTL_OK;
}

/* `graph compile FILE` and `graph lower|schedule|plan|codegen|program
 * FILE`: the pass table (compiler/passes.h) run on the graph as the daemon
 * runs it, without the C compiler, printing the state after the passes
 * named by --dump-after ("all": every pass that has a dump) and running
 * every pass's verifier with --verify. `graph PASS FILE` is
 * `graph compile --verify --dump-after PASS FILE` without the header line
 * ("program" is emit-native's). */
static int cmd_native(const char *cmd, int argc, char **argv) {
  enum {
    O_RETMUT = 1,
    O_SEPTEMP,
    O_EAGERRAND,
    O_DUMP,
    O_VERIFY,
    O_ARCH,
    O_ISA
  };
  static const struct option opts[] = {
      {"return-input-mutations", no_argument, NULL, O_RETMUT},
      {"separate-temporaries", no_argument, NULL, O_SEPTEMP},
      {"eager-random", no_argument, NULL, O_EAGERRAND},
      {"dump-after", required_argument, NULL, O_DUMP},
      {"verify", no_argument, NULL, O_VERIFY},
      {"arch", required_argument, NULL, O_ARCH},
      {"isa", required_argument, NULL, O_ISA},
      CTL_GLOBAL_OPTIONS,
      {NULL, 0, NULL, 0}};
  bool compile = !strcmp(cmd, "compile");
  gc_options o;
  gc_options_default(&o);
  bool dump[GC_MAX_PASSES] = {false};
  bool verify = !compile, retmut = false;
  const char *arch = NULL, *isa = NULL;
  if (!compile) {
    const gc_pass *p =
        gc_pass_find(strcmp(cmd, "program") ? cmd : "emit-native");
    dump[p - gc_passes] = true;
  }
  int c, rc;
  optind = 0; /* afresh: see CTL_GLOBAL_OPTIONS */
  while ((c = ctl_getopt(argc, argv, "h", opts, NULL, graph_usage, &rc)) !=
         -1) {
    const gc_pass *p;
    switch (c) {
    case O_RETMUT:
      retmut = true;
      break;
    case O_SEPTEMP:
      o.separate_temporaries = true;
      break;
    case O_EAGERRAND:
      o.eager_random = true;
      break;
    case O_VERIFY:
      verify = true;
      break;
    case O_ARCH:
    case O_ISA:
      if (!compile) {
        ctl_errorf("--%s: only for `graph compile`",
                   c == O_ARCH ? "arch" : "isa");
        return CTL_EUSAGE;
      }
      *(c == O_ARCH ? &arch : &isa) = optarg;
      break;
    case O_DUMP:
      if (!compile) {
        ctl_errorf("--dump-after: only for `graph compile`");
        return CTL_EUSAGE;
      }
      if (!strcmp(optarg, "all")) {
        for (int i = 0; i < gc_npasses; i++)
          dump[i] = gc_passes[i].dump != NULL;
        break;
      }
      p = gc_pass_find(optarg);
      if (!p || !p->dump) {
        ctl_errorf(
            "--dump-after %s: not a pass with a dump (one of:%s)", optarg,
            " functionalize lower schedule plan codegen emit-native all");
        return CTL_EUSAGE;
      }
      dump[p - gc_passes] = true;
      break;
    }
  }
  if (rc)
    return rc < 0 ? CTL_OK : rc;
  rc = one_file(argc, argv);
  if (rc)
    return rc;
  int last = -1; /* the passes after the last dump need not run */
  for (int i = 0; i < gc_npasses; i++)
    if (dump[i] || (compile && !gc_passes[i].toolchain))
      last = i;
  o.keep_input_mutations = !retmut;
  const char *path = argv[optind];
  loaded l;
  rc = load_valid(path, &l);
  if (rc)
    return rc;
  gc_error err;
  gc_error_clear(&err);
  gc_target t;
  gc_backend be = {.target = &t, .verify = verify};
  gc_pass_state s;
  gc_pass_state_init(&s, l.arena, l.graph, &o, &be, NULL);
  rc = gc_target_host(l.arena, &t);
  if (arch)
    t.arch = arch;
  if (isa)
    t.isa = isa;
  for (int i = 0; i <= last && !rc; i++) {
    const gc_pass *p = &gc_passes[i];
    if (p->native && !gc_pass_state_native(&s)) {
      printf("# kept in eager form (%s): no native code\n", s.f.eager_reason);
      break;
    }
    if (p->toolchain || (p->skip && p->skip(&s)))
      continue; /* no toolchain: the program without its shared object */
    rc = gc_pass_run(p, &s, &err);
    if (!rc && dump[i]) {
      const char *text = p->dump(&s);
      if (compile)
        printf("### after %s\n", p->name);
      fputs(text ? text : "", stdout);
    }
  }
  if (rc)
    ctl_errorf("%s: %s", path, err.msg[0] ? err.msg : gc_strerror(rc));
  gc_native_release(&s.nat);
  loaded_free(&l);
  return rc ? CTL_EGRAPH : CTL_OK;
}

int ctl_cmd_graph(int argc, char **argv) {
  /* the options before the graph command: global ones, --help */
  static const struct option opts[] = {CTL_GLOBAL_OPTIONS, {NULL, 0, NULL, 0}};
  int stop;
  optind = 0; /* afresh: see CTL_GLOBAL_OPTIONS */
  ctl_getopt(argc, argv, "+h", opts, NULL, graph_usage, &stop);
  if (stop)
    return stop < 0 ? CTL_OK : stop;
  if (optind >= argc) {
    ctl_help(stderr, graph_usage);
    return CTL_EUSAGE;
  }
  const char *cmd = argv[optind];
  argc -= optind;
  argv += optind;
  if (strcmp(cmd, "validate") == 0)
    return cmd_validate(argc, argv);
  if (strcmp(cmd, "hash") == 0)
    return cmd_hash(argc, argv);
  if (strcmp(cmd, "fmt") == 0)
    return cmd_fmt(argc, argv);
  if (strcmp(cmd, "convert") == 0)
    return cmd_convert(argc, argv);
  if (strcmp(cmd, "functionalize") == 0)
    return cmd_functionalize(argc, argv);
  if (!strcmp(cmd, "lower") || !strcmp(cmd, "schedule") ||
      !strcmp(cmd, "plan") || !strcmp(cmd, "codegen") ||
      !strcmp(cmd, "program") || !strcmp(cmd, "compile"))
    return cmd_native(cmd, argc, argv);
  ctl_errorf("unknown graph command '%s'", cmd);
  ctl_help(stderr, graph_usage);
  return CTL_EUSAGE;
}
