#!/usr/bin/env bash
# deploy/bootstrap.sh: install every Debian package that building, testing and
# running compiled needs. Idempotent: packages already installed are skipped,
# and when nothing is missing the script touches neither apt nor the network.
#
# Usage: deploy/bootstrap.sh [--check]
#   --check   only report what is missing; exit 1 if anything is.
#
# Runs apt-get as root, or through sudo when it is available. PyPI is never
# used: every Python dependency comes from Debian packages.
set -euo pipefail

PACKAGES=(
  # toolchain and build
  build-essential pkg-config make git
  # protobuf, protobuf-c and the gRPC C core
  protobuf-compiler protobuf-c-compiler libprotobuf-c-dev
  libgrpc-dev protobuf-compiler-grpc
  # daemon, cache and compiler libraries
  libuv1-dev libsqlite3-dev sqlite3 libssl-dev libzstd-dev libjansson-dev
  libhiredis-dev
  # the shared cache tier (tests start their own redis-server)
  redis-server
  # /metrics and /healthz
  libmicrohttpd-dev
  # generated code: vectorized math (SLEEF) and OpenMP (with gcc); oneDNN,
  # whose sgemm float32 matrix products call on AVX-512 targets (linked by
  # soname: the runtime package, which Debian's torch depends on, suffices)
  libsleef-dev libgomp1 libdnnl2
  # tests, analysis and fuzzing
  libcriterion-dev clang libclang-rt-14-dev clang-format clang-tidy cppcheck
  valgrind
  # the Python client and its tests
  python3-torch python3-torchvision python3-grpcio python3-grpc-tools
  python3-protobuf python3-numpy python3-pytest
  # an optimized BLAS for torch: without it Debian's torch uses the reference
  # BLAS and matrix products run ~25x slower. OpenBLAS's OpenMP build, which
  # takes over libblas.so.3 through update-alternatives: its threads are
  # libgomp's, which torch and the generated kernels use too; the pthread
  # build (libopenblas0's default) brings its own, and on 2 cores the two
  # pools spin against each other (docs/performance.md, "Threads")
  libopenblas0-openmp
  # benchmarks
  hyperfine
)

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
