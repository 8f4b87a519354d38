#!/bin/bash
# Builds jumppod's OCI image without Docker or any daemon: a root filesystem of the jumppod
# binary, the policy module, the shared libraries the binary loads (from this machine's Debian
# libc6 and libgcc-s1, the way distroless images carry them) and a passwd naming the non-root
# user, packed by `jumppod-controlplane oci-archive` into an OCI archive with a gzip layer.
#
# Reproducible: every file's time is the commit's time (SOURCE_DATE_EPOCH), owners are 0:0,
# paths are packed in order, so the same binary, module and libraries give the same digest,
# whoever builds it and whenever. The binary itself is built with paths remapped (Makefile:
# `image`), so a clone in another directory builds the same bytes.
#
# usage: image/build.sh CONTROLPLANE BINARY POLICY_WASM OUTDIR REF
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
controlplane=$1 binary=$2 policy=$3 out=$4 ref=$5
for f in "$controlplane" "$binary" "$policy"; do
  test -f "$f" || { echo "image: $f not found" >&2; exit 1; }
done
repo=$(cd "$here/.." && pwd)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
source_url=$(sed -n 's/^repository = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
license=$(sed -n 's/^license = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
if revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null); then
  epoch=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct)}
  # A build from a changed tree says so rather than claim the commit.
  if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then revision=$revision-dirty; fi
else
  revision=unknown epoch=${SOURCE_DATE_EPOCH:-0}
fi

mkdir -p "$out"
rootfs=$(mktemp -d "$out/rootfs.XXXXXX")
trap 'rm -rf "$rootfs"' EXIT
install -D -m 0755 "$binary" "$rootfs/usr/local/bin/jumppod"
install -D -m 0644 "$policy" "$rootfs/usr/share/jumppod/policy.wasm"
# The libraries at the paths the dynamic loader looks in (the loader at the path written in
# the binary, the rest in Debian's multiarch directory), each as a file, not a link.
ldd "$binary" | awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}' | while read -r lib; do
  install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
  package=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | cut -d: -f1 | head -1) || true
  if [ -n "$package" ] && [ -f "/usr/share/doc/$package/copyright" ]; then
    install -D -m 0644 "/usr/share/doc/$package/copyright" "$rootfs/usr/share/doc/$package/copyright"
  fi
done
install -d -m 0755 "$rootfs/etc"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"

# Directories made above carry this umask's modes; set them so that another umask packs alike.
find "$rootfs" -type d -exec chmod 0755 {} +
archive=$out/jumppod.oci.tar
"$controlplane" oci-archive --rootfs "$rootfs" --ref "$ref" --out "$archive" --gzip --owner 0:0 \
  --entrypoint /usr/local/bin/jumppod --user 65532:65532 --epoch "$epoch" \
  --env JUMPPOD_POLICY_WASM=/usr/share/jumppod/policy.wasm \
  --label "org.opencontainers.image.title=jumppod" \
  --label "org.opencontainers.image.description=Keeps dstack's SSH jump pods Guaranteed, labelled and reachable" \
  --label "org.opencontainers.image.source=$source_url" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.licenses=$license" \
  --label "org.opencontainers.image.created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)" \
  --digest-file "$out/jumppod.digest" >/dev/null
echo "image: $archive $ref@$(cat "$out/jumppod.digest") ($(wc -c <"$archive") bytes)"
