#!/usr/bin/env bash
# deploy/bootstrap.sh: install every Debian package that building, testing and
# running compiled needs. Idempotent: packages already installed are skipped,
# and when nothing is missing the script touches neither apt nor the network.
#
# Usage: deploy/bootstrap.sh [--check]
#   --check   only report what is missing; exit 1 if anything is.
#
# Runs apt-get as root, or through sudo when it is available. Python
# packages are not installed here: deploy/pyenv.sh makes the project's venv.
set -euo pipefail

# The release decides some package names: oneDNN's runtime and clang's
# runtime (for LeakSanitizer and libFuzzer) are versioned in their names.
# Picked before anything else, so a Debian 13 machine never asks apt for a
# Debian 12 name (or the reverse).
codename=$( . /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}" )
case "$codename" in
  bookworm) DNNL=libdnnl2;   CLANG_RT=libclang-rt-14-dev ;;
  trixie)   DNNL=libdnnl3.6; CLANG_RT=libclang-rt-19-dev ;;
  *)
    echo "bootstrap: Debian 12 (bookworm) and 13 (trixie) are supported; this is" \
         "'${codename:-unknown}' (/etc/os-release): using Debian 13's package names" >&2
    DNNL=libdnnl3.6; CLANG_RT=libclang-rt-dev ;;
esac

PACKAGES=(
  # toolchain and build
  build-essential pkg-config make git
  # protobuf-c and the gRPC C core (the Python modules come from
  # grpcio-tools in the project's venv: deploy/pyenv.sh)
  protobuf-compiler protobuf-c-compiler libprotobuf-c-dev libgrpc-dev
  # daemon, cache and compiler libraries
  libuv1-dev libsqlite3-dev sqlite3 libssl-dev libzstd-dev libjansson-dev
  # torch.export .pt2 archives are zip files (client/lib/pt2.c); the -dev
  # package has one name on Debian 12 and 13 (its runtime, libzip4 and
  # libzip5, follows from it)
  libzip-dev
  libhiredis-dev
  # the shared cache tier (tests start their own redis-server)
  redis-server
  # /metrics and /healthz
  libmicrohttpd-dev
  # generated code: vectorized math (SLEEF) and OpenMP (with gcc); oneDNN,
  # whose sgemm float32 matrix products can call on AVX-512 targets (linked
  # by soname: the runtime package suffices)
  libsleef-dev libgomp1 "$DNNL"
  # tests, analysis and fuzzing
  libcriterion-dev clang "$CLANG_RT" clang-format clang-tidy cppcheck
  valgrind
  # the Python environment (deploy/pyenv.sh makes a venv with torch and the
  # client; PyPI and the machine's wheel folder provide the packages)
  python3 python3-venv python3-pip
  # an optimized BLAS: OpenBLAS's OpenMP build, which takes over
  # libblas.so.3 through update-alternatives: its threads are libgomp's, as
  # torch's and the generated kernels' are; the pthread build (libopenblas0's
  # default) brings its own, and on 2 cores the two pools spin against each
  # other (docs/performance.md, "Threads")
  libopenblas0-openmp
  # benchmarks
  hyperfine
  # the compile explorer: Node.js runs npm ci (highlight.js, embedded in the
  # daemon at build time; the browser tests' playwright-core), and its
  # browser tests drive Debian's Chromium headless
  nodejs chromium
)

# npm ships inside some Node.js packages (NodeSource's) and apart from
# Debian's: ask for Debian's only when no npm is on PATH.
if ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(npm)
fi

# Debian 13's own Python is 3.13, for which no local torch wheel exists:
# there the venv uses Debian's torch (deploy/pyenv.sh), unless the first
# python3 on PATH is one the wheel serves.
if [ "$codename" != bookworm ] &&
   ! python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
  PACKAGES+=(python3-torch)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

# The BLAS alternatives that should point at OpenBLAS's OpenMP build but do
# not (another OpenBLAS build installed beside it wins on priority).
OPENMP_BLAS=/usr/lib/x86_64-linux-gnu/openblas-openmp
unselected() {
  local name
  for name in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
    local alt="$name-$(uname -m)-linux-gnu"
    [ -e "$OPENMP_BLAS/$name" ] || continue
    if [ "$(update-alternatives --query "$alt" 2>/dev/null | sed -n 's/^Value: //p')" \
         != "$OPENMP_BLAS/$name" ]; then
      echo "$alt:$OPENMP_BLAS/$name"
    fi
  done
}

pending="$(unselected)"
if [ "${#missing[@]}" -eq 0 ] && [ -z "$pending" ]; then
  echo "bootstrap: all ${#PACKAGES[@]} packages present"
  exit 0
fi

if [ "${1:-}" = "--check" ]; then
  [ "${#missing[@]}" -eq 0 ] || echo "bootstrap: missing: ${missing[*]}"
  [ -z "$pending" ] || echo "bootstrap: BLAS alternatives not on OpenBLAS's OpenMP build"
  exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "bootstrap: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

if [ "${#missing[@]}" -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  pending="$(unselected)" # the install may have added alternatives
fi
for pair in $pending; do
  echo "bootstrap: update-alternatives --set ${pair%%:*} ${pair#*:}"
  $SUDO update-alternatives --set "${pair%%:*}" "${pair#*:}" >/dev/null
done
echo "bootstrap: done"
