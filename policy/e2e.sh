#!/usr/bin/env bash
# The policy's kwctl suite (policy/e2e.bats: `kwctl run`, `annotate` and `inspect` on the
# fixtures of policy/test_data), through one of two runners:
#   kwctl       Kubewarden's kwctl, from PATH;
#   kwctl-wapc  kwctl's command line on the waPC runtime jumppod embeds (tests/kwctl, built by
#               `make test-build`), put on PATH as `kwctl`.
# With kwctl, policy/runners.bats then compares kwctl-wapc's answers with kwctl's on the same
# requests, so that the two cannot drift unseen.
#
#   policy/e2e.sh [--runner auto|kwctl|kwctl-wapc] [path/to/policy.wasm]
#
# --runner auto (the default, `make test`): kwctl where it is installed, else kwctl-wapc.
# --runner kwctl (`make e2e-kwctl`): kwctl or an error. The last line counts the tests.
# The module: the argument, else $POLICY_WASM, else ./policy.wasm (`make policy` writes it),
# else $JUMPPOD_POLICY_WASM. kwctl-wapc: $JUMPPOD_KWCTL_WAPC, else target/debug/kwctl-wapc.
# Needs bats (1.5 or later) and jq: Debian's packages bats and jq. Exit status: bats's.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
runner=auto
wasm=
while [ $# -gt 0 ]; do
    case "$1" in
        --runner) runner="${2:?--runner needs auto, kwctl or kwctl-wapc}"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "e2e.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
        *) wasm="$1"; shift ;;
    esac
done
case "$runner" in
    auto|kwctl|kwctl-wapc) ;;
    *) echo "e2e.sh: --runner $runner: expected auto, kwctl or kwctl-wapc" >&2; exit 2 ;;
esac

for tool in bats jq; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "e2e.sh: $tool not found: install Debian's $tool (apt-get install $tool)" >&2
        exit 1
    }
done

wasm="${wasm:-${POLICY_WASM:-}}"
if [ -z "$wasm" ]; then
    for candidate in "$root/policy.wasm" "${JUMPPOD_POLICY_WASM:-}"; do
        if [ -n "$candidate" ] && [ -f "$candidate" ]; then
            wasm="$candidate"
            break
        fi
    done
fi
if [ -z "$wasm" ] || [ ! -f "$wasm" ]; then
    echo "e2e.sh: no policy module found${wasm:+ at $wasm}: build it first with \`make policy\`" >&2
    exit 1
fi
POLICY_WASM="$(cd "$(dirname "$wasm")" && pwd)/$(basename "$wasm")"
export POLICY_WASM

wapc="${JUMPPOD_KWCTL_WAPC:-$root/target/debug/kwctl-wapc}"
kwctl="$(command -v kwctl || true)"
if [ "$runner" = auto ]; then
    runner=$([ -n "$kwctl" ] && echo kwctl || echo kwctl-wapc)
fi
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
case "$runner" in
    kwctl)
        if [ -z "$kwctl" ]; then
            echo "e2e.sh: kwctl not found on PATH (docs/testing.md: building kwctl from source)" >&2
            exit 1
        fi
        echo "runner: kwctl $("$kwctl" --version 2>/dev/null | head -n1) ($kwctl) on $POLICY_WASM"
        # `kwctl run` fetches Sigstore's trust root from the network unless told where one is.
        # No test here verifies a signature and none may reach the network: given a trust
        # config it cannot read, kwctl warns and runs without one.
        echo '{}' >"$scratch/no-sigstore-trust.json"
        cat >"$scratch/kwctl" <<EOF
#!/bin/sh
if [ "\$1" = run ]; then
    shift
    exec "$kwctl" run --sigstore-trust-config "$scratch/no-sigstore-trust.json" "\$@"
fi
exec "$kwctl" "\$@"
EOF
        chmod +x "$scratch/kwctl"
        PATH="$scratch:$PATH"
        ;;
    kwctl-wapc)
        if [ ! -x "$wapc" ]; then
            echo "e2e.sh: $wapc not found: build it first with \`cargo build -p jumppod-kwctl\`" >&2
            exit 1
        fi
        # The suite calls `kwctl`: kwctl-wapc under that name, first on PATH.
        ln -s "$wapc" "$scratch/kwctl"
        PATH="$scratch:$PATH"
        echo "runner: kwctl-wapc, jumppod's waPC runtime ($wapc; kwctl is not installed) on $POLICY_WASM"
        ;;
esac

suites=("$here/e2e.bats")
if [ "$runner" = kwctl ]; then
    if [ -x "$wapc" ]; then
        export KWCTL_WAPC="$wapc"
        suites+=("$here/runners.bats")
        echo "and kwctl-wapc's answers compared with kwctl's ($wapc)"
    else
        echo "kwctl-wapc not built ($wapc): its answers are not compared with kwctl's"
    fi
fi

cd "$root"
set +e
bats --formatter tap "${suites[@]}" | tee "$scratch/tap"
status=${PIPESTATUS[0]}
set -e
awk -v runner="$runner" '/^ok / {p++} /^not ok / {f++} END {printf "kwctl suite (%s): %d passed, %d failed\n", runner, p, f}' "$scratch/tap"
exit "$status"
