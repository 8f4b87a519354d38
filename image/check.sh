#!/bin/bash
# Proves what `make image` promises, on this machine:
#  1. reproducible: the image built again from the same commit (a new root filesystem, files
#     written at another time) has the same digest;
#  2. self-contained: its layer, unpacked alone, runs `jumppod --version` as user 65532 in a
#     chroot (only the libraries the image carries);
#  3. pushable: `skopeo copy` puts it into a registry (Debian's docker-registry on loopback)
#     under the same digest, and a pull by that digest gives back the same image.
#
# usage: image/check.sh CONTROLPLANE BINARY POLICY_WASM OUTDIR REF
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
controlplane=$1 binary=$2 policy=$3 out=$4 ref=$5
first=$(cat "$out/jumppod.digest")
work=$(mktemp -d)
registry_pid=
cleanup() {
  if [ -n "$registry_pid" ]; then kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# 1. Again, from scratch.
"$here/build.sh" "$controlplane" "$binary" "$policy" "$work/again" "$ref" >/dev/null
second=$(cat "$work/again/jumppod.digest")
[ "$first" = "$second" ] || { echo "image-check: built twice from the same inputs: $first, then $second" >&2; exit 1; }
echo "image-check: built twice, the same digest $first"

# 2. The layer alone runs the binary.
mkdir "$work/oci" "$work/root"
tar -xf "$out/jumppod.oci.tar" -C "$work/oci"
layer=$(python3 -c '
import json, sys
d = sys.argv[1]
index = json.load(open(d + "/index.json"))
manifest = json.load(open(d + "/blobs/sha256/" + index["manifests"][0]["digest"].split(":")[1]))
print(d + "/blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1])' "$work/oci")
tar -xzf "$layer" -C "$work/root"
version=$(chroot --userspec=65532:65532 "$work/root" /usr/local/bin/jumppod --version)
echo "image-check: its layer alone runs as 65532: $version"

# 3. Push, then pull by digest.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/registry.yml" <<CONFIG
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $work/registry}}
http: {addr: 127.0.0.1:$port}
CONFIG
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null 2>&1 && break
  kill -0 "$registry_pid" 2>/dev/null || { cat "$work/registry.log" >&2; exit 1; }
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null || { echo "image-check: the registry did not answer within 10 s" >&2; cat "$work/registry.log" >&2; exit 1; }
name=127.0.0.1:$port/jumppod/jumppod
skopeo copy --quiet --dest-tls-verify=false "oci-archive:$out/jumppod.oci.tar" "docker://$name:${ref##*:}"
pushed=$(skopeo inspect --tls-verify=false --format '{{.Digest}}' "docker://$name:${ref##*:}")
[ "$pushed" = "$first" ] || { echo "image-check: pushed as $pushed, built as $first" >&2; exit 1; }
skopeo copy --quiet --src-tls-verify=false "docker://$name@$first" "oci-archive:$work/pulled.oci.tar"
pulled=$(skopeo inspect --format '{{.Digest}}' "oci-archive:$work/pulled.oci.tar")
[ "$pulled" = "$first" ] || { echo "image-check: pulled by digest $first, got $pulled" >&2; exit 1; }
echo "image-check: pushed to a registry and pulled by digest: $name@$pulled"
