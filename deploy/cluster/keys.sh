#!/usr/bin/env bash
# deploy/cluster/keys.sh DIR: makes a signing key and three tokens (read,
# compile, admin) in DIR (mode 0600), as a cluster's daemons use them
# (--signing-keys DIR/signing.keys --tokens DIR/tokens). Copy signing.keys
# to every daemon; give each client the token of its role.
set -euo pipefail
dir=${1:?usage: keys.sh DIR}
mkdir -p "$dir"
umask 077
echo "k$(date +%Y%m%d) $(openssl rand -hex 32)" > "$dir/signing.keys"
{
  echo "read $(openssl rand -hex 32) readers"
  echo "compile $(openssl rand -hex 32) compilers"
  echo "admin $(openssl rand -hex 32) operators"
} > "$dir/tokens"
echo "keys.sh: wrote $dir/signing.keys and $dir/tokens"
