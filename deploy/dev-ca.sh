#!/usr/bin/env bash
# deploy/dev-ca.sh: TLS certificates to develop and test with: a private CA,
# a server certificate it signs for the names and addresses clients connect
# to, and optionally client certificates for mutual TLS. Everything is made
# by the openssl command; nothing leaves DIR. For production, use your
# organisation's CA: this one's key sits unencrypted next to its
# certificate.
#
# Usage: deploy/dev-ca.sh [-o DIR] [--days N] [--client NAME]... [HOST...]
#
#   HOST          a DNS name or an IP address the daemon is reached at; all
#                 of them go into the server certificate's subject
#                 alternative names (clients check the address they dial
#                 against those). Default: localhost 127.0.0.1 ::1
#   -o DIR        where the files go (default: ./dev-ca)
#   --days N      validity of the certificates made now (default 365)
#   --client NAME also a client certificate with common name NAME, for a
#                 daemon with --tls-client-ca DIR/ca.pem (repeatable)
#
# Writes DIR/ca.pem and DIR/ca.key (kept when they exist, so certificates
# made earlier stay valid), DIR/server.pem and DIR/server.key, and
# DIR/NAME.pem and DIR/NAME.key per client. Keys are readable by their
# owner only. Then:
#
#   compiled --tls-cert DIR/server.pem --tls-key DIR/server.key \
#            [--tls-client-ca DIR/ca.pem]
#   compilectl --ca DIR/ca.pem [--cert DIR/NAME.pem --key DIR/NAME.key] stats
#   compiled.Client(address, ca="DIR/ca.pem"[, cert=..., key=...])
set -euo pipefail

die() { echo "dev-ca: $*" >&2; exit 2; }

dir=dev-ca
days=365
clients=()
hosts=()
while [ $# -gt 0 ]; do
  case "$1" in
    -o) [ $# -ge 2 ] || die "-o wants a directory"; dir=$2; shift 2 ;;
    --days) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--days wants a positive number"
            days=$2; shift 2 ;;
    --client) [ $# -ge 2 ] && [[ $2 =~ ^[A-Za-z0-9._-]+$ ]] && [ "$2" != ca ] && [ "$2" != server ] ||
                die "--client wants a name of letters, digits, '.', '_' or '-' (not ca or server)"
              clients+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) hosts+=("$1"); shift ;;
  esac
done
[ ${#hosts[@]} -gt 0 ] || hosts=(localhost 127.0.0.1 ::1)
command -v openssl >/dev/null || die "no openssl command (Debian: apt-get install openssl)"

# The subject alternative names: IP: for addresses (IPv4, or IPv6 with a
# colon), DNS: for names.
san=""
for h in "${hosts[@]}"; do
  if [[ $h =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ || $h == *:* ]]; then
    san+="${san:+,}IP:$h"
  elif [[ $h =~ ^[A-Za-z0-9*]([A-Za-z0-9.-]*[A-Za-z0-9])?$ ]]; then
    san+="${san:+,}DNS:$h"
  else
    die "'$h' is neither a DNS name nor an IP address"
  fi
done

mkdir -p "$dir"
umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One configuration for every step, so that the system's openssl.cnf adds
# nothing unexpected.
cat > "$tmp/openssl.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = $san
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
EOF

ossl() {
  local out
  out=$(openssl "$@" 2>&1) || { echo "$out" >&2; die "openssl $1 failed"; }
}
newkey=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

if [ -s "$dir/ca.pem" ] && [ -s "$dir/ca.key" ]; then
  echo "dev-ca: keeping the CA in $dir/ca.pem"
else
  ossl req -config "$tmp/openssl.cnf" -x509 "${newkey[@]}" -keyout "$dir/ca.key" \
    -out "$dir/ca.pem" -days "$((days > 3650 ? days : 3650))" \
    -subj "/CN=compiled development CA $(hostname 2>/dev/null || echo) $(date +%Y-%m-%d)" \
    -extensions ca
  echo "dev-ca: made the CA $dir/ca.pem"
fi

# Signs a new key pair NAME.pem / NAME.key with the CA (extensions SECTION).
sign() {
  local name=$1 section=$2 cn=$3
  ossl req -config "$tmp/openssl.cnf" -new "${newkey[@]}" -keyout "$dir/$name.key" \
    -out "$tmp/$name.csr" -subj "/CN=$cn"
  ossl x509 -req -in "$tmp/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" -out "$dir/$name.pem" \
    -extfile "$tmp/openssl.cnf" -extensions "$section"
  chmod 644 "$dir/$name.pem"
}

sign server server "${hosts[0]}"
echo "dev-ca: made $dir/server.pem for ${san//,/, }"
for c in ${clients[@]+"${clients[@]}"}; do
  sign "$c" client "$c"
  echo "dev-ca: made the client certificate $dir/$c.pem"
done
chmod 644 "$dir/ca.pem"
