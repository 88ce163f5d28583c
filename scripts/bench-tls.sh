#!/usr/bin/env bash
# kvpeer-bench with TLS 1.3 between the daemons (--tls-cert/--tls-key/--tls-ca).
#
# Makes a throwaway CA and one node certificate for 127.0.0.1 (the bench's
# daemons all listen there) with the openssl CLI, then runs kvpeer-bench with
# the TLS flags passed to every kvpeerd it starts. The bulk_* figures then
# measure transfers over TLS against the same raw-TCP baseline as a plain
# run; compare with a plain run (scripts/bench.sh or kvpeer-bench directly)
# to see what TLS costs.
#
# usage: scripts/bench-tls.sh [--build-dir DIR] [kvpeer-bench args...]
#   e.g. scripts/bench-tls.sh --smoke --only bulk
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build="$repo/build"
if [[ "${1:-}" == "--build-dir" ]]; then
  build=$2
  shift 2
fi
bench="$build/bench/kvpeer-bench"
[[ -x "$bench" ]] || { echo "bench-tls.sh: $bench not built" >&2; exit 2; }
command -v openssl > /dev/null || { echo "bench-tls.sh: the openssl CLI is needed (apt-get install openssl)" >&2; exit 2; }

pki=$(mktemp -d /tmp/kvpeer-bench-tls.XXXXXX)
trap 'rm -rf "$pki"' EXIT
cd "$pki"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt \
  -days 1 -subj "/CN=kvpeer bench CA" 2> /dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout node.key -out node.csr \
  -subj "/CN=kvpeer bench node" 2> /dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > node.ext
openssl x509 -req -in node.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out node.crt -days 1 \
  -extfile node.ext 2> /dev/null
chmod 600 node.key ca.key
cd - > /dev/null

echo "bench-tls.sh: every kvpeerd uses TLS 1.3 (certificates in $pki)" >&2
"$bench" --bin-dir "$build" \
  --daemon-arg --tls-cert --daemon-arg "$pki/node.crt" \
  --daemon-arg --tls-key --daemon-arg "$pki/node.key" \
  --daemon-arg --tls-ca --daemon-arg "$pki/ca.crt" \
  "$@"
