# Makefile for compiled. See README.md for the two commands a newcomer needs.
#
#   make            build everything into $(BUILD) (default build/)
#   make demo       build, then run the main job on a shipped example graph
#   make test       run every test (Criterion and Python); non-zero on failure
#   make check      tests + clang-format check + cppcheck on our own sources
#   make asan       build with ASan+UBSan into $(BUILD)/asan and run the tests
#   make fuzz       build the libFuzzer targets (clang) and run each for
#                   FUZZ_SECONDS (default 60)
#   make bootstrap  install missing Debian packages (deploy/bootstrap.sh)
#   make golden     rewrite the golden pass dumps (tests/data/golden/)
#   make bench-hit  cache-hit benchmark against a bare gRPC echo (not a test)
#   make bench-models     eager vs Inductor vs the compiled backend on models
#   make bench-package    packages vs eager, torch.export and AOTInductor
#   make bench-bandwidth  memory-bound graphs vs the copy-bandwidth bound
#   make bench-train      one training step, eager vs Inductor vs compiled
#   make bench-gemm       matrix products: oneDNN's sgemm vs eager's mm
#   make bench-compile    cold compiles: request to artifact, time per pass
#   make bench-heavy      cache hits during two huge requests; daemon memory
#   make bench-memory     compile memory and time against graph size
#   make bench-dynamic    many sizes: one program with size symbols vs Inductor
#
# Sources are found by wildcard: a new compiler/*.c joins libcompiler, a new
# tests/test_*.c becomes a Criterion binary. Header dependencies are tracked
# with -MMD. Several builds can coexist: BUILD=somewhere make.

BUILD   ?= build
CC      ?= gcc
# The project's Python environment (deploy/pyenv.sh): a venv with torch and
# the client installed in editable mode. PYTHON=... runs the Python tests and
# benchmarks with another interpreter that has both.
VENV    ?= .venv
PYTHON  ?= $(VENV)/bin/python
SAN     ?=
FUZZ_SECONDS ?= 60
FUZZ_GRAPHS ?= 2000
FUZZ_SEED ?=
# V=1 shows full command lines.
Q := $(if $(V),,@)

# ---- configuration: install packages first, then ask pkg-config ----
# pkg-config only knows the libraries' flags once deploy/bootstrap.sh has
# installed the -dev packages, so the flags are not read when this file is
# parsed: a rule runs the bootstrap and writes them to $(CONFIG_MK), which is
# included. GNU make remakes an included makefile before anything else and
# then restarts itself with it, so the very first `make` on a fresh machine
# installs, configures and builds in one run. Goals that need no libraries
# (clean, format, bootstrap) skip it.
PKGS     := grpc gpr libprotobuf-c libuv sqlite3 libcrypto libzstd jansson libzip zlib hiredis libmicrohttpd libssl
CONFIG_MK := $(BUILD)/config.mk
NO_CONFIG_GOALS := clean distclean format bootstrap
ifneq ($(filter-out $(NO_CONFIG_GOALS),$(or $(MAKECMDGOALS),all)),)
include $(CONFIG_MK)
endif

# OPT sets optimisation; SAN_FLAGS instrumentation; CFLAGS/LDFLAGS given on
# the command line are added, never replace the project's own flags.
WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wno-unused-parameter -Wvla
OPT      ?= -O2 -g
ifeq ($(SAN),1)
SAN_FLAGS ?= -fsanitize=address,undefined -fno-omit-frame-pointer \
             -fno-sanitize-recover=undefined
SAN_LDFLAGS ?= -fsanitize=address,undefined
endif
ALL_CFLAGS   = $(OPT) -std=c11 $(WARN) -D_GNU_SOURCE -fno-strict-aliasing \
               -pthread $(SAN_FLAGS) $(CFLAGS)
ALL_CPPFLAGS = -I. -I$(BUILD)/gen $(PKG_CFLAGS) -MMD -MP $(CPPFLAGS)
ALL_LDFLAGS  = $(SAN_LDFLAGS) $(LDFLAGS)
LDLIBS   += $(PKG_LIBS) -lm -pthread

# ---- generated protobuf code ----
# The protos live under proto/compiled/v1/ so they register as
# "compiled/v1/*.proto": torch registers an unrelated "graph.proto" in
# protobuf's shared descriptor pool, and names there must be unique.
PROTOS     := $(wildcard proto/compiled/v1/*.proto)
PROTO_C    := $(patsubst proto/%.proto,$(BUILD)/gen/%.pb-c.c,$(PROTOS))
PROTO_H    := $(PROTO_C:.c=.h)
PY_PB_DIR  := client/python/compiled/v1
PY_PB      := $(patsubst proto/compiled/v1/%.proto,$(PY_PB_DIR)/%_pb2.py,$(PROTOS))

# ---- libraries ----
COMMON_SRC   := $(wildcard common/*.c)
COMPILER_SRC := $(sort $(wildcard compiler/*.c compiler/*/*.c))
CACHE_SRC    := $(wildcard cache/*.c)
DAEMON_SRC   := $(wildcard daemon/*.c)
CTL_SRC      := $(wildcard client/ctl/*.c)
CLIENT_SRC   := $(wildcard client/lib/*.c)
TEST_SRC     := $(wildcard tests/test_*.c)
TESTLIB_SRC  := $(wildcard tests/lib/*.c)
FUZZ_SRC     := $(wildcard tests/fuzz/fuzz_*.c)
BENCH_SRC    := $(filter-out bench/peakheap.c,$(wildcard bench/*.c))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIB_PROTO    := $(BUILD)/lib/libcdproto.a
LIB_COMMON   := $(BUILD)/lib/libcdcommon.a
LIB_COMPILER := $(BUILD)/lib/libcdcompiler.a
LIB_CACHE    := $(BUILD)/lib/libcdcache.a
LIB_CLIENT   := $(BUILD)/lib/libcdclient.a
LIBS := $(LIB_CLIENT) $(LIB_COMPILER) $(LIB_CACHE) $(LIB_COMMON) $(LIB_PROTO)

BINS := $(BUILD)/bin/compilectl
ifneq ($(DAEMON_SRC),)
BINS += $(BUILD)/bin/compiled
endif
TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
BUILD_ID_H := $(BUILD)/gen/build_id.h

.PHONY: all venv demo bench-build bench-hit bench-runtime bench-models bench-bandwidth bench-startup bench-package bench-train bench-gemm bench-compile bench-heavy bench-memory bench-dynamic bench-zoo test test-c test-py golden test-avx2 test-browser test-opinfo capture-zoo train-zoo vec-audit fuzz-graphs fuzz-grads check valgrind format format-check lint asan fuzz \
        fuzz-build bootstrap clean distclean py-proto
.DEFAULT_GOAL := all

all: $(BINS) py-proto

# The bootstrap runs once per build tree, and again whenever the script or
# this Makefile changes; `make bootstrap` forces it. The configuration is
# written to a temporary file first, so a failed bootstrap leaves no
# half-written $(CONFIG_MK) behind.
$(CONFIG_MK): deploy/bootstrap.sh Makefile
	@mkdir -p $(BUILD)
	@deploy/bootstrap.sh
	@pkg-config --exists --print-errors $(PKGS)
	@{ echo '# written by make from pkg-config; delete to regenerate'; \
	   echo 'PKG_CFLAGS := '"$$(pkg-config --cflags $(PKGS))"; \
	   echo 'PKG_LIBS := '"$$(pkg-config --libs $(PKGS))"; } > $@.tmp
	@mv $@.tmp $@

bootstrap:
	deploy/bootstrap.sh

# Everything compiled depends on the generated headers being present.
$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: proto/%.proto 
	@mkdir -p $(BUILD)/gen
	@echo "  PROTOC  $<"
	$(Q)protoc-c -Iproto --c_out=$(BUILD)/gen $<

# torch 2.13's operator schemas as a C table: the compiler's knowledge of
# operators it introduces (scatter inverses, functional variants).
TORCH_SCHEMAS := compiler/data/torch-2.13-schemas.txt
$(BUILD)/gen/torch_schemas.inc: $(TORCH_SCHEMAS)
	@mkdir -p $(dir $@)
	@echo "  GEN     $@"
	$(Q)sed 's/\\/\\\\/g; s/"/\\"/g; s/^/"/; s/$$/",/' $< > $@.tmp && mv $@.tmp $@
$(BUILD)/obj/compiler/torchops.o: $(BUILD)/gen/torch_schemas.inc

# The compiler's build id: a digest of every source that shapes an artifact.
# Rewritten only when it changes, so it does not force rebuilds.
# It covers, in a fixed order: every file under compiler/ (sub-folders and
# data included), the protos, and the rule that builds the compiler itself
# (this Makefile). The flags and toolchain that build *generated* code are
# not in it: they enter the key's target component when the daemon starts
# (compiler/target.c), because they are read from the machine.
# Rewritten only when it changes, so it does not force rebuilds. The file
# names are hashed too, so a rename or a new empty file changes the id.
BUILD_ID_SRC = $(sort $(shell find compiler -type f ! -name '*~' ! -name '.*') $(PROTOS) Makefile)
$(BUILD_ID_H): FORCE
	@mkdir -p $(dir $@)
	@id=$$(for f in $(BUILD_ID_SRC); do printf '%s\0' "$$f"; cat "$$f"; done | sha256sum | cut -c1-32); \
	  test -n "$$id" || { echo "build id: empty digest" >&2; exit 1; }; \
	  printf '#define GC_BUILD_ID "%s"\n' "$$id" > $@.tmp; \
	  if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
.PHONY: FORCE
FORCE:

# Only the key includes the build id; the rest must not rebuild when it moves.
$(BUILD)/obj/compiler/key.o: $(BUILD_ID_H)

$(BUILD)/obj/%.o: %.c $(PROTO_H) 
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) -c $< -o $@

# Generated code is not ours: compile it without our warning set.
$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c $(PROTO_H)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALL_CPPFLAGS) $(filter-out $(WARN),$(ALL_CFLAGS)) -c $< -o $@

$(LIB_PROTO): $(patsubst $(BUILD)/gen/%.c,$(BUILD)/obj/gen/%.o,$(PROTO_C))
	@mkdir -p $(dir $@)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIB_COMPILER): $(call obj,$(COMPILER_SRC))
	@mkdir -p $(dir $@)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIB_CACHE): $(call obj,$(CACHE_SRC))
	@mkdir -p $(dir $@)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIB_COMMON): $(call obj,$(COMMON_SRC))
	@mkdir -p $(dir $@)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIB_CLIENT): $(call obj,$(CLIENT_SRC))
	@mkdir -p $(dir $@)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/compilectl: $(call obj,$(CTL_SRC)) $(LIBS)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/bin/compiled: $(call obj,$(DAEMON_SRC)) $(BUILD)/obj/gen/explorer_assets.o $(LIBS)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

# ---- the explorer's pages, embedded in the daemon ----
# daemon/explorer/ holds the pages, scripts and styles; highlight.js (core
# and its C grammar, BSD-3-Clause, with its licence) comes from the npm
# registry through package-lock.json, installed into ./node_modules by
# `npm ci` (Debian's nodejs and npm: deploy/bootstrap.sh). embed.sh turns
# them into a C array: the daemon reads nothing from disk to serve them.
NODE_STAMP := node_modules/.compiled-npm-ci
$(NODE_STAMP): package.json package-lock.json | $(CONFIG_MK)
	@echo "  NPM     ci"
	$(Q)npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@
HLJS := node_modules/@highlightjs/cdn-assets
# The read-only pages share one skeleton, page.html.in: NAME.html gets the
# title EXPLORER_TITLE_NAME (the <title> and the <h1> that stands until its
# script, EXPLORER_SCRIPT_NAME.js, draws the page).
EXPLORER_PAGES := index miss program programs requests
EXPLORER_TITLE_index := Overview
EXPLORER_SCRIPT_index := overview
EXPLORER_TITLE_miss := Why a request missed
EXPLORER_TITLE_program := Program
EXPLORER_TITLE_programs := Programs
EXPLORER_TITLE_requests := Recent requests
$(BUILD)/gen/explorer/%.html: daemon/explorer/page.html.in Makefile
	@mkdir -p $(dir $@)
	$(Q)sed -e 's|@TITLE@|$(EXPLORER_TITLE_$*)|g' \
	  -e 's|@SCRIPT@|$(or $(EXPLORER_SCRIPT_$*),$*)|g' $< > $@.tmp && mv $@.tmp $@
EXPLORER_FILES := $(sort $(wildcard daemon/explorer/*.html daemon/explorer/*.js daemon/explorer/*.css) \
  $(patsubst %,$(BUILD)/gen/explorer/%.html,$(EXPLORER_PAGES)))
EXPLORER_VENDOR := /explorer/vendor/highlight-core.js=$(HLJS)/es/core.min.js \
  /explorer/vendor/highlight-c.js=$(HLJS)/es/languages/c.min.js \
  /explorer/vendor/highlight-github.css=$(HLJS)/styles/github.min.css \
  /explorer/vendor/highlight-LICENSE.txt=$(HLJS)/LICENSE
$(BUILD)/gen/explorer_assets.c: $(EXPLORER_FILES) daemon/explorer/embed.sh $(NODE_STAMP)
	@mkdir -p $(dir $@)
	@echo "  EMBED   $@"
	$(Q)daemon/explorer/embed.sh $@ $(foreach f,$(EXPLORER_FILES),/explorer/$(notdir $(f))=$(f)) \
	  $(EXPLORER_VENDOR)

# ---- the Python environment and protobuf modules ----
# deploy/pyenv.sh makes $(VENV) (torch, the client in editable mode, test
# dependencies) the first time, and again when the client's packaging or the
# script changes. The generated modules compiled.v1.*_pb2 (and gRPC stubs)
# are written into the package by grpcio-tools' protoc (gen_proto.py, which
# the package's own build also runs), so they match the venv's protobuf.
VENV_STAMP := $(VENV)/.compiled-env
$(VENV_STAMP): client/python/pyproject.toml client/python/setup.py deploy/pyenv.sh | $(CONFIG_MK)
	@deploy/pyenv.sh $(VENV)
	@touch $@
venv: $(VENV_STAMP)
py-proto: venv $(PY_PB)
$(PY_PB) &: $(PROTOS) client/python/gen_proto.py $(VENV_STAMP)
	@echo "  PROTOPY proto/compiled/v1"
	$(Q)$(VENV)/bin/python client/python/gen_proto.py
	@touch $(PY_PB)

# ---- the demo: the main job on its embedded defaults ----
DEMO_GRAPH ?= tests/data/graphs/mlp.pb
demo: all
	@BUILD=$(BUILD) deploy/demo.sh $(DEMO_GRAPH)


# ---- tests ----
$(BUILD)/tests/%: tests/%.c $(call obj,$(TESTLIB_SRC)) $(LIBS) $(PROTO_H)
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	$(Q)$(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(call obj,$(TESTLIB_SRC)) $(LIBS) $(LDLIBS) -lcriterion

# ---- benchmarks (never part of the tests) ----
$(BUILD)/bench/%: bench/%.c $(LIBS) $(PROTO_H)
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	$(Q)$(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

bench-build: all $(BENCHES)

# Cache-hit latency/throughput vs a bare gRPC echo (docs/performance.md).
bench-hit: bench-build
	COMPILED_BUILD=$(abspath $(BUILD)) $(BUILD)/bench/hitbench $(BENCH_ARGS)

# Per-call overhead of the Python runtime against eager PyTorch.
bench-runtime: all
	COMPILED_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/runtime_overhead.py $(BENCH_ARGS)

# eager, Inductor and the compiled torch.compile backend on models: speed,
# peak memory, cold compile (docs/performance.md).
# counts malloc'd bytes in a preloaded process: the models' peak memory
$(BUILD)/bench/peakheap.so: bench/peakheap.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) -O2 -fPIC -shared -Wall -Wextra -o $@ $<

bench-models: all $(BUILD)/bench/peakheap.so
	COMPILED_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/models.py $(BENCH_ARGS)

# Memory-bound graphs against the copy-bandwidth bound of the same run.
bench-bandwidth: all
	COMPILED_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/bandwidth.py $(BENCH_ARGS)

# A new process's wait for its first compiled result, Inductor and compiled
# each on warm caches.
bench-startup: all
	COMPILED_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/startup.py $(BENCH_ARGS)

# Packages (compilectl package, compiled.load_package) against eager,
# torch.export.load and AOTInductor: fresh-process start and steady state.
bench-package: all
	COMPILED_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/package.py $(BENCH_ARGS)

# float32 matrix products: oneDNN's sgemm against eager's torch.mm.
bench-gemm: all
	$(PYTHON) bench/gemm.py $(BENCH_ARGS)

# One training step (forward, backward, SGD), eager vs Inductor vs compiled.
bench-train: all $(BUILD)/bench/peakheap.so
	COMPILED_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/train.py $(BENCH_ARGS)

# Cold compiles (empty cache): request to artifact, time per pass.
bench-compile: all
	COMPILED_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/cold_compile.py $(BENCH_ARGS)

# torchvision's classification models at batch 1, 2 and 8: eager, the
# native program, the ATen program and the runtime's choice (bench/zoo.py).
# torchvision needs a Python of its own (torch 2.14.1's CUDA build):
# ZOO_PYTHON=/path/to/venv/bin/python; without it the target says so.
ZOO_PYTHON ?= $(PYTHON)
bench-zoo: all
	COMPILED_BUILD=$(abspath $(BUILD)) $(ZOO_PYTHON) bench/zoo.py $(BENCH_ARGS)

# Cache hits while two huge requests are decoded and compiled; memory.
bench-heavy: all
	COMPILED_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/heavy_requests.py $(BENCH_ARGS)

# A cold compile's peak memory (of the budget and of the daemon's process)
# and time against node count: relu chains, a wide graph, resnet18/50.
bench-memory: all
	COMPILED_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/compile_memory.py $(BENCH_ARGS)

# Dynamic shapes: a transformer at 32 sequence lengths, a CNN at 64 batch
# sizes; eager, Inductor and compiled, dynamic=None and True; compiles and
# total time; the program with size symbols against a static one.
bench-dynamic: all
	COMPILED_BUILD=$(abspath $(BUILD)) $(PYTHON) bench/dynamic.py $(BENCH_ARGS)

# Test binaries find data and binaries through these variables.

TEST_ENV := COMPILED_SRC=$(CURDIR) COMPILED_BUILD=$(abspath $(BUILD)) \
            PYTHONPATH=$(CURDIR)/client/python

test: test-c test-py test-avx2 test-browser

test-c: all $(TESTS)
	@$(TEST_ENV) tests/run_c_tests.sh $(BUILD) $(TESTS)

test-py: all
	$(TEST_ENV) $(PYTHON) -m pytest -q -p no:cacheprovider tests/python

# The explorer's pages in Debian's Chromium (deploy/bootstrap.sh installs
# it), driven by playwright-core from ./node_modules (npm ci), and the
# example client's TypeScript compiled and run against a real daemon.
IDE_TS := $(wildcard client/ide/*.ts) client/ide/tsconfig.json
$(BUILD)/ide/explorer.js: $(IDE_TS) $(NODE_STAMP)
	@echo "  TSC     client/ide"
	$(Q)node_modules/.bin/tsc -p client/ide/tsconfig.json --outDir $(BUILD)/ide
	@echo '{"type": "module"}' > $(BUILD)/ide/package.json
test-browser: all $(NODE_STAMP) $(BUILD)/ide/explorer.js
	$(TEST_ENV) PYTHON=$(abspath $(PYTHON)) node --test tests/browser/

# The native, training, oneDNN-product and random-number tests again as on
# an AVX2-only CPU (generated code for x86-64-v3, oneDNN's AVX2 code,
# products on eager's BLAS), whatever this machine has: CI machines differ.
AVX2_TESTS := test_native.py test_training.py test_opinfo_short.py test_native_gemm.py \
              test_native_random.py
test-avx2: all
	COMPILED_TARGET=x86-64-v3 ONEDNN_MAX_CPU_ISA=AVX2 $(TEST_ENV) $(PYTHON) -m pytest -q \
	  -p no:cacheprovider $(addprefix tests/python/,$(AVX2_TESTS))

# Differential testing against eager PyTorch (long; not part of `make test`,
# which runs short fixed subsets): every float32 OpInfo operator, and
# FUZZ_GRAPHS random programs (FUZZ_SEED: the first seed; default random).
test-opinfo: all
	$(TEST_ENV):$(CURDIR)/tests/python $(PYTHON) tests/python/difftest.py

# Every torchvision classification model through both capture traces.
capture-zoo: all
	$(TEST_ENV):$(CURDIR)/tests/python $(PYTHON) tests/python/metatrace_zoo.py $(ZOO_ARGS)

# Every torchvision classification model trained one step through compiled,
# gradients against a float64 eager reference.
train-zoo: all
	$(TEST_ENV):$(CURDIR)/tests/python $(PYTHON) tests/python/train_zoo.py $(ZOO_ARGS)

# Inner loops of generated code that gcc left scalar (a diagnostic).
vec-audit: all
	$(TEST_ENV):$(CURDIR)/tests/python $(PYTHON) tests/python/vec_audit.py $(VEC_ARGS)

# The golden pass dumps of tests/data/golden/ rewritten from this build
# (tests/python/golden.py; test_golden.py compares): after a change that is
# meant to change what a pass makes, and reviewed in the diff.
golden: all
	$(TEST_ENV) $(PYTHON) tests/python/golden.py --update

fuzz-graphs: all
	$(TEST_ENV):$(CURDIR)/tests/python $(PYTHON) tests/python/graphgen.py -n $(FUZZ_GRAPHS) \
	  $(if $(FUZZ_SEED),--seed $(FUZZ_SEED))

# The same programs as training graphs: the gradients of every floating input.
fuzz-grads: all
	$(TEST_ENV):$(CURDIR)/tests/python $(PYTHON) tests/python/graphgen.py --grad \
	  -n $(FUZZ_GRAPHS) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED))

# ---- quality gates ----
OUR_C := $(sort $(wildcard common/*.[ch] compiler/*.[ch] compiler/*/*.[ch] cache/*.[ch] daemon/*.[ch] client/ctl/*.[ch] client/lib/*.[ch] \
           tests/*.c tests/lib/*.[ch] tests/fuzz/*.c bench/*.c))

format:
	clang-format -i $(OUR_C)
format-check:
	clang-format --dry-run --Werror $(OUR_C)
lint: $(PROTO_H) $(BUILD_ID_H)
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability,performance \
	  --std=c11 --inline-suppr --suppress=missingIncludeSystem --suppress=missingInclude \
	  -I. -D__GNUC__ common compiler cache daemon client/ctl client/lib

check: test format-check lint

# The daemon's integration tests with the daemon under valgrind (slow).
valgrind: all
	$(TEST_ENV) COMPILED_DAEMON_WRAPPER="valgrind -q --leak-check=full \
	  --errors-for-leak-kinds=definite --error-exitcode=99" \
	  $(PYTHON) -m pytest -q -p no:cacheprovider tests/python/test_daemon.py

# Sanitizer and fuzz builds live under $(BUILD), so BUILD=elsewhere keeps
# two trees (and their asan/fuzz builds) apart.
ASAN_BUILD := $(BUILD)/asan
asan:
	$(MAKE) BUILD=$(ASAN_BUILD) SAN=1 OPT="-O1 -g" test

# ---- fuzzing (clang + libFuzzer) ----
FUZZ_BUILD := $(BUILD)/fuzz
fuzz-build:
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=clang OPT="-O1 -g" \
	  SAN_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  SAN_LDFLAGS="-fsanitize=address,undefined" $(FUZZ_BUILD)/lib/libcdcompiler.a \
	  $(FUZZ_BUILD)/lib/libcdproto.a $(FUZZ_BUILD)/lib/libcdclient.a $(FUZZ_BUILD)/lib/libcdcommon.a
	@mkdir -p $(FUZZ_BUILD)/fuzz
	@for f in $(FUZZ_SRC); do \
	  n=$$(basename $$f .c); \
	  echo "CC $$n"; \
	  clang -O1 -g -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    -I. -I$(FUZZ_BUILD)/gen $(PKG_CFLAGS) -o $(FUZZ_BUILD)/fuzz/$$n $$f \
	    $(FUZZ_BUILD)/lib/libcdclient.a $(FUZZ_BUILD)/lib/libcdcompiler.a \
	    $(FUZZ_BUILD)/lib/libcdcommon.a $(FUZZ_BUILD)/lib/libcdproto.a $(LDLIBS) || exit 1; \
	done

fuzz: fuzz-build
	@for f in $(FUZZ_SRC); do \
	  n=$$(basename $$f .c); \
	  tests/fuzz/run.sh $(FUZZ_BUILD)/fuzz/$$n $(FUZZ_SECONDS) $(FUZZ_BUILD) || exit 1; \
	done

clean:
	rm -rf build $(PY_PB_DIR) client/python/compiled/_pb

# The Python environment is kept by `make clean`; this removes it too.
distclean: clean
	rm -rf $(VENV) client/python/compiled.egg-info

.SECONDARY:

-include $(shell find $(BUILD)/obj $(BUILD)/tests $(BUILD)/bench -name '*.d' 2>/dev/null)
