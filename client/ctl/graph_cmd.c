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
#include "compiler/functionalize.h"
#include "compiler/native.h"
#include "compiler/graph.h"
#include "compiler/key.h"
#include "compiler/print.h"
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
    "  convert FILE       turn .pb into .json or back, losslessly\n"

    "      -o, --output OUT       write to OUT (default: standard output)\n"
    "      --to json|pb           output format (default: by OUT's extension,\n"
    "                             else the other one)\n";

/* An option that no graph command has of its own: -h/--help, a global
 * option (accepted, its value checked, for a command line that names a
 * server anyway), or a mistake. Returns 0 to go on, -1 after printing the
 * help, or CTL_EUSAGE after saying why. */
static int other_option(int c) {
  if (c == 'h') {
    ctl_help(stdout, graph_usage);
    return -1;
  }
  int g = ctl_global_option(c, optarg);
  if (g > 0)
    return 0;
  if (g == 0)
    ctl_help(stderr, graph_usage);
  return CTL_EUSAGE;
}

/* A graph command's options that are only flags: sets *flags[i] for
 * opts[i]. Returns CTL_OK with optind at the files, -1 after the help, or
 * CTL_EUSAGE. `opts` ends with CTL_GLOBAL_OPTIONS and the zero entry. */
static int flag_options(int argc, char **argv, const struct option *opts,
                        bool *const *flags, int nflags) {
  int c, i;
  optind = 0; /* afresh: see CTL_GLOBAL_OPTIONS */
  while ((c = getopt_long(argc, argv, "h", opts, &i)) != -1) {
    if (c == 0 && i < nflags) {
      *flags[i] = true;
      continue;
    }
    int r = other_option(c);
    if (r)
      return r;
  }
  return CTL_OK;
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
  while (rc == CTL_OK && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
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
    default:
      rc = other_option(c);
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
    gc_error err;
    if (gc_toolchain_identity(ta, cc, 10000, &t.toolchain, &err) != 0) {
      ctl_errorf("%s (the toolchain is part of the key: pass --cc or "
                 "--toolchain)",
                 err.msg);
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
  int c;
  optind = 0; /* afresh: see CTL_GLOBAL_OPTIONS */
  while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
    if (c == 'o')
      out = optarg;
    else if (c == 't')
      to = optarg;
    else {
      int r = other_option(c);
      if (r)
        return r < 0 ? CTL_OK : r;
    }
  }
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

static const char *mutation_name(gc_mutation_type t) {
  switch (t) {
  case GC_MUT_IN_GRAPH:
    return "mutated in graph";
  case GC_MUT_OUT_GRAPH:
    return "mutated out of graph";
  default:
    return "not mutated";
  }
}

static const char *output_name(gc_output_type t) {
  static const char *const names[] = {
      "non_alias",
      "alias_of_input",
      "is_input",
      "alias_of_intermediate_save_as_output",
      "alias_of_intermediate",
      "alias_of_intermediate_base_is_user_output",
      "unsafe_view_alias",
      "custom_function_view"};
  return (int)t >= 0 && (int)t < 8 ? names[t] : "?";
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
  if (f.functional)
    printf("# functional program\n");
  else
    printf("# kept in eager form: %s\n", f.eager_reason);
  gc_buf out = GC_BUF_INIT;
  gc_graph_print(f.graph, &out);
  fputs(out.data ? out.data : "", stdout);
  gc_buf_free(&out);
  for (int i = 0; i < f.ninputs; i++) {
    const gc_input_info *ii = &f.inputs[i];
    if (!ii->mutates_data && !ii->mutates_metadata)
      continue;
    printf("input %d: %s%s%s%s", i, mutation_name(ii->type),
           ii->mutates_data ? ", data" : "",
           ii->mutates_metadata ? ", metadata" : "",
           ii->hidden_from_autograd ? ", hidden from autograd" : "");
    if (ii->mutated_output >= 0)
      printf(", new value is program output %d", ii->mutated_output);
    printf("\n");
  }
  for (int k = 0; k < f.noutputs; k++) {
    const gc_output_info *oi = &f.outputs[k];
    printf("output %d: %s", k, output_name(oi->type));
    if (oi->base >= 0)
      printf(" (base %d)", oi->base);
    if (oi->type != GC_OUT_NON_ALIAS && oi->type != GC_OUT_IS_INPUT) {
      if (oi->has_chain) {
        printf(", view chain:");
        for (int s = 0; s < oi->nchain; s++)
          printf(" %s", oi->chain[s].op->name);
      } else {
        printf(", as_strided");
      }
    }
    printf(", program output %d\n", oi->program_output);
  }
  if (f.num_intermediate_bases)
    printf("intermediate bases: %d\n", f.num_intermediate_bases);
  loaded_free(&l);
  return CTL_OK;
}

/* `graph lower|schedule|plan|codegen|program FILE`: the back half's state
 * after that pass (loop IR, kernels, memory plan, generated C, the native
 * program without its shared object), with the IR
 * verifier run after every pass. */
static int cmd_native(const char *stage, int argc, char **argv) {
  static const struct option opts[] = {
      {"return-input-mutations", no_argument, NULL, 0},
      {"separate-temporaries", no_argument, NULL, 0},
      {"eager-random", no_argument, NULL, 0},
      CTL_GLOBAL_OPTIONS,
      {NULL, 0, NULL, 0}};
  gc_options o;
  gc_options_default(&o);
  bool retmut = false;
  int rc = flag_options(
      argc, argv, opts,
      (bool *[]){&retmut, &o.separate_temporaries, &o.eager_random}, 3);
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
  gc_error_clear(&err);
  int *order =
      gc_arena_calloc(l.arena, (size_t)l.graph->nnodes + 1, sizeof *order);
  gc_functional f = {0};
  gc_target t;
  gc_native nat;
  gc_backend be = {.target = &t, .verify = true};
  memset(&nat, 0, sizeof nat);
  nat.temp_min_bytes = o.separate_temporaries ? GC_TEMP_MIN_BYTES : 0;
  nat.eager_random = o.eager_random;
  rc = !order ? GC_ENOMEM : gc_canonical_order(l.graph, order, &err);
  if (!rc)
    rc = gc_functionalize(l.arena, l.graph, order, &o, &f, &err);
  if (!rc)
    rc = gc_target_host(l.arena, &t);
  if (!rc && !f.functional) {
    printf("# kept in eager form (%s): no native code\n", f.eager_reason);
    loaded_free(&l);
    return CTL_OK;
  }
  const char *passes[] = {"lower", "schedule", "plan", "codegen", "program"};
  for (int p = 0; p < 5 && !rc; p++) {
    switch (p) {
    case 0:
      rc = gc_native_lower(&nat, l.arena, &f, &be, &err);
      break;
    case 1:
      rc = gc_native_schedule(&nat, &be, &err);
      break;
    case 2:
      rc = gc_native_plan(&nat, &be, &err);
      break;
    case 3:
      rc = gc_native_codegen(&nat, NULL, &err);
      break;
    default: /* no toolchain: the program without its shared object */
      rc = gc_native_emit(&nat, &be, &err);
    }
    if (!rc && !strcmp(stage, passes[p])) {
      const char *text = gc_native_dump(&nat, stage);
      fputs(text ? text : "", stdout);
      break;
    }
  }
  if (rc)
    ctl_errorf("%s: %s", path, err.msg[0] ? err.msg : gc_strerror(rc));
  gc_native_release(&nat);
  loaded_free(&l);
  return rc ? CTL_EGRAPH : CTL_OK;
}

int ctl_cmd_graph(int argc, char **argv) {
  /* the options before the graph command: global ones, --help */
  static const struct option opts[] = {CTL_GLOBAL_OPTIONS, {NULL, 0, NULL, 0}};
  int c;
  optind = 0; /* afresh: see CTL_GLOBAL_OPTIONS */
  while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
    int r = other_option(c);
    if (r)
      return r < 0 ? CTL_OK : r;
  }
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
      !strcmp(cmd, "program"))
    return cmd_native(cmd, argc, argv);
  ctl_errorf("unknown graph command '%s'", cmd);
  ctl_help(stderr, graph_usage);
  return CTL_EUSAGE;
}
