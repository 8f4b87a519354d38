#!/bin/bash
# Pushes what an operator installs to an OCI registry: jumppod's image (`make image`'s
# archive, under the same digest) as REGISTRY/jumppod:VERSION, and the Helm chart, packaged at
# VERSION, as oci://REGISTRY/charts/jumppod. Writes OUT/published.env: the image's repository
# and digest, the chart's reference, version and digest (for `helm install`, and what the
# release workflow signs).
#
# usage: image/publish.sh REGISTRY ARCHIVE VERSION CHART_DIR HELM OUT [plain-http]
#   plain-http: the registry speaks HTTP, not HTTPS (a registry on loopback, as the tests').
set -euo pipefail
registry=$1 archive=$2 version=$3 chart=$4 helm=$5 out=$6 plain=${7:-}
push_tls=() read_tls=() helm_tls=()
if [ "$plain" = plain-http ]; then
  push_tls=(--dest-tls-verify=false) read_tls=(--tls-verify=false) helm_tls=(--plain-http)
fi
[ -f "$archive" ] || { echo "publish: $archive is missing: make image builds it" >&2; exit 1; }
mkdir -p "$out"

image=$registry/jumppod
skopeo copy --quiet "${push_tls[@]}" "oci-archive:$archive" "docker://$image:$version"
digest=$(skopeo inspect "${read_tls[@]}" --format '{{.Digest}}' "docker://$image:$version")
built=$(cat "$(dirname "$archive")/jumppod.digest")
[ "$digest" = "$built" ] || { echo "publish: pushed as $digest, built as $built" >&2; exit 1; }
echo "publish: image $image:$version, $image@$digest"

"$helm" package "$chart" --version "$version" --app-version "$version" --destination "$out" >/dev/null
pushed=$("$helm" push "$out/jumppod-$version.tgz" "oci://$registry/charts" "${helm_tls[@]}" 2>&1) ||
  { echo "$pushed" >&2; exit 1; }
chart_digest=$(echo "$pushed" | sed -n 's/^Digest: //p')
case $chart_digest in sha256:*) ;; *) echo "publish: no digest in helm push's output: $pushed" >&2; exit 1 ;; esac
echo "publish: chart oci://$registry/charts/jumppod --version $version, $registry/charts/jumppod@$chart_digest"

cat >"$out/published.env" <<ENV
IMAGE_REPOSITORY=$image
IMAGE_DIGEST=$digest
CHART=oci://$registry/charts/jumppod
CHART_VERSION=$version
CHART_DIGEST=$chart_digest
ENV
