#!/usr/bin/env bash
# `make bench-webhook`: `jumppod webhook` over TLS on 127.0.0.1, loaded by wrk (8 connections,
# 8 s per request) with the AdmissionReviews of issue 25: an ordinary pod, a conforming jump pod
# (dstack's, with the kit), a bare legacy pod it mutates; and dstack's bare jump pod, which it
# gives resources and the kit (policy/test_data). Prints req/s, p50 and p99 per
# request, and the process's memory (/proc/PID/status): VmRSS once ready, VmHWM then (the peak
# while starting: compiling the module), and VmRSS and VmHWM after the load.
#
# usage: host/bench/webhook.sh JUMPPOD POLICY_WASM [EXTRA_WEBHOOK_ARGS...]
set -euo pipefail

jumppod=$1 module=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
data=$here/../../policy/test_data
connections=${CONNECTIONS:-8} duration=${DURATION:-8s}
work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# A self-signed serving pair for 127.0.0.1 (wrk does not verify it).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
  -keyout "$work/tls.key" -out "$work/tls.crt" 2>/dev/null

# Each fixture is a bare AdmissionRequest: sent in an AdmissionReview, compact, as the API
# server sends it (the fixture's key order; &, < and > escaped as Go's encoder escapes them,
# which outside strings compact JSON has none of).
requests=(ordinary_pod:ordinary_pod_create.json
          conforming_jump_pod:dstack_0_22_5_bare_jump_pod_with_kit_create.json
          bare_legacy_pod_mutated:legacy_bare_pod_create.json
          dstack_pod_mutated:dstack_0_22_5_bare_jump_pod_create.json)
for entry in "${requests[@]}"; do
  jq -c '{kind: "AdmissionReview", apiVersion: "admission.k8s.io/v1", request: .}' \
    "$data/${entry#*:}" | sed 's/&/\\u0026/g; s/</\\u003c/g; s/>/\\u003e/g' > "$work/${entry%%:*}.json"
done

status() { awk -v k="$1:" '$1 == k {printf "%.1f", $2 / 1024}' "/proc/$pid/status"; }

"$jumppod" webhook --listen 127.0.0.1:0 --tls-cert "$work/tls.crt" --tls-key "$work/tls.key" \
  --policy "$module" "$@" > "$work/stdout" 2> "$work/stderr" &
pid=$!
started=$(date +%s%N)
# Ready when it prints the address it serves on; bounded: a cold compile takes seconds.
url=
for _ in $(seq 1 1200); do
  url=$(sed -n 's/^serving AdmissionReviews on \(https:.*\)$/\1/p' "$work/stdout")
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/stderr" >&2; echo "jumppod webhook exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { cat "$work/stderr" >&2; echo "jumppod webhook not ready after 120 s" >&2; exit 1; }
ready_ms=$(( ($(date +%s%N) - started) / 1000000 ))
rest_rss=$(status VmRSS) start_peak=$(status VmHWM)

printf '%-24s %9s %9s %9s\n' request req/s p50 p99
for entry in "${requests[@]}"; do
  name=${entry%%:*}
  # The answer first: a bench of refusals would measure nothing.
  answer=$(curl -sk --data-binary "@$work/$name.json" -H 'Content-Type: application/json' "$url")
  case $name in
    *_mutated) echo "$answer" | jq -e '.response.allowed and .response.patch' >/dev/null ;;
    *) echo "$answer" | jq -e '.response.allowed and (.response.patch == null)' >/dev/null ;;
  esac || { echo "unexpected answer for $name: $answer" >&2; exit 1; }
  wrk -t 2 -c "$connections" -d "$duration" --latency -s "$here/post.lua" "$url" -- "$work/$name.json" \
    > "$work/wrk-$name.txt"
  grep -q 'Non-2xx\|Socket errors' "$work/wrk-$name.txt" && { cat "$work/wrk-$name.txt" >&2; exit 1; }
  awk -v name="$name" '
    $1 == "Requests/sec:" {rps = $2}
    $1 == "50%" {p50 = $2}
    $1 == "99%" {p99 = $2}
    END {printf "%-24s %9.0f %9s %9s\n", name, rps, p50, p99}' "$work/wrk-$name.txt"
done

# No review under the load failed: a refusal because the policy failed (a trap, the deadline,
# no instance) is an HTTP 200 too, which wrk does not count; the webhook logs it as a warning.
if grep -q 'the policy failed' "$work/stderr"; then
  grep -m 3 'the policy failed' "$work/stderr" >&2
  echo "$(grep -c 'the policy failed' "$work/stderr") reviews failed during the load" >&2
  exit 1
fi

printf 'ready after %d ms; RSS at rest after start %s MiB (peak while starting %s MiB); after the load RSS %s MiB, peak %s MiB\n' \
  "$ready_ms" "$rest_rss" "$start_peak" "$(status VmRSS)" "$(status VmHWM)"
