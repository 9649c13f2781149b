#!/usr/bin/env bash
# deploy/pyenv.sh: the project's Python environment, a venv (default .venv
# in the checkout) holding torch and the client installed in editable mode
# with its test dependencies. Idempotent: an environment that already has
# what it needs is left alone, with no network access.
#
# Usage: deploy/pyenv.sh [VENV]
#
# The interpreter: $COMPILED_PYTHON, else the first python3 on PATH.
# torch: $TORCH_SPEC (default torch==2.13.0, the version the tests are run
# with; pip takes it from the machine's wheel folder where there is one).
# Where that interpreter cannot get torch 2.13.0 from a local wheel (Debian
# 13's Python 3.13: PyPI has only multi-GB CUDA builds for it) and Debian's
# python3-torch is installed, the venv sees the system's packages and uses
# Debian's torch instead.
set -euo pipefail
venv=${1:-.venv}
top=$(cd "$(dirname "$0")/.." && pwd)
py=${COMPILED_PYTHON:-python3}
torch_spec=${TORCH_SPEC:-torch==2.13.0}

command -v "$py" >/dev/null || { echo "pyenv: no $py on PATH (deploy/bootstrap.sh installs python3)" >&2; exit 1; }

# Debian's torch instead of the pinned wheel: Python 3.13 with python3-torch.
system_torch=0
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ -z "${TORCH_SPEC:-}" ] && [ "$pyver" != "3.11" ] && [ "$pyver" != "3.10" ] &&
   [ "$pyver" != "3.12" ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  py=/usr/bin/python3
  system_torch=1
fi

fresh=0
if ! "$venv/bin/python" -c 'import sys' 2>/dev/null; then
  echo "pyenv: creating $venv with $("$py" --version 2>&1) ($py)"
  rm -rf "$venv"
  flags=()
  [ "$system_torch" = 1 ] && flags+=(--system-site-packages)
  "$py" -m venv "${flags[@]}" "$venv" ||
    { echo "pyenv: '$py -m venv' failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
  fresh=1
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

if [ "$system_torch" = 1 ]; then
  echo "pyenv: using Debian's torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
elif ! "$venv/bin/python" -c "
import sys, torch
want = '${torch_spec#torch==}'
sys.exit(0 if '==' not in '$torch_spec' or torch.__version__.split('+')[0] == want else 1)
" 2>/dev/null; then
  echo "pyenv: installing $torch_spec"
  "${pip[@]}" install -q "$torch_spec"
fi

# The client (editable: the checkout's compiled package) and what the tests
# need. pip skips what is already satisfied.
if [ "$fresh" = 1 ] || ! "$venv/bin/python" -c 'import compiled, pytest, expecttest, grpc_tools' 2>/dev/null ||
   [ "$top/client/python/pyproject.toml" -nt "$venv/.compiled-client" ]; then
  echo "pyenv: installing the client (pip install -e client/python[test])"
  "${pip[@]}" install -q -e "$top/client/python[test]"
  touch "$venv/.compiled-client"
fi
echo "pyenv: $venv ready: $("$venv/bin/python" -c 'import torch, compiled; print("torch", torch.__version__, "compiled", compiled.__version__)')"
