#!/usr/bin/env bash
# kwctl end-to-end tests of the policy: `kwctl run` on the fixtures of policy/test_data,
# `kwctl annotate` and `kwctl inspect`. Runs where kwctl, bats and jq are installed; elsewhere
# it says what is missing and exits 0.
#
#   policy/e2e.sh [path/to/policy.wasm]
#
# The module: the argument, else $POLICY_WASM, else ./policy.wasm (`make policy` writes it),
# else $JUMPPOD_POLICY_WASM, else target/wasm32-wasip1/release/jumppod_policy.wasm.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

for tool in kwctl bats jq; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "$tool not found: skipping the kwctl end-to-end tests (install $tool to run them)"
        exit 0
    fi
done

wasm="${1:-${POLICY_WASM:-}}"
if [ -z "$wasm" ]; then
    for candidate in "$root/policy.wasm" "${JUMPPOD_POLICY_WASM:-}" "$root/target/wasm32-wasip1/release/jumppod_policy.wasm"; do
        if [ -n "$candidate" ] && [ -f "$candidate" ]; then
            wasm="$candidate"
            break
        fi
    done
fi
if [ -z "$wasm" ] || [ ! -f "$wasm" ]; then
    echo "no policy module found${wasm:+ at $wasm}: build it first with \`make policy\`" >&2
    exit 1
fi

POLICY_WASM="$(cd "$(dirname "$wasm")" && pwd)/$(basename "$wasm")"
export POLICY_WASM
echo "kwctl $(kwctl --version 2>/dev/null | head -n1) on $POLICY_WASM"
cd "$root"
exec bats "$here/e2e.bats"
