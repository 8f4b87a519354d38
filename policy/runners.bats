#!/usr/bin/env bats
# kwctl-wapc (jumppod's waPC runtime behind kwctl's command line, which runs policy/e2e.bats
# where kwctl is not installed) against kwctl itself, on every request of policy/test_data and
# the settings the suite uses: the same AdmissionResponse, the same refusals. Run by
# policy/e2e.sh when the runner is kwctl, with $POLICY_WASM and $KWCTL_WAPC set.

bats_require_minimum_version 1.5.0

setup_file() {
    export ANNOTATED="$BATS_FILE_TMPDIR/annotated-policy.wasm"
    kwctl annotate -m policy/metadata.yml -u policy/README.md -o "$ANNOTATED" "$POLICY_WASM"
}

# Both runners on one request; prints the fixture when their answers differ. kwctl writes the
# AdmissionResponse's absent fields (auditAnnotations, warnings) as null: Kubernetes reads a
# null field as an absent one, so nulls are dropped before the answers are compared.
same_answer() {
    local fixture="$1"
    shift
    local ours theirs
    theirs="$(kwctl run --request-path "policy/test_data/$fixture" "$@" "$ANNOTATED" 2>/dev/null | jq -S 'del(.. | nulls)')" || {
        echo "kwctl failed on $fixture $*"
        return 1
    }
    ours="$("$KWCTL_WAPC" run --request-path "policy/test_data/$fixture" "$@" "$ANNOTATED" 2>/dev/null | jq -S 'del(.. | nulls)')" || {
        echo "kwctl-wapc failed on $fixture $*"
        return 1
    }
    if [ "$ours" != "$theirs" ]; then
        echo "$fixture $*: kwctl-wapc answered"
        echo "$ours"
        echo "kwctl answered"
        echo "$theirs"
        return 1
    fi
}

fixtures() {
    (cd policy/test_data && ls ./*.json hostile/*.json | sed 's|^\./||')
}

@test "kwctl-wapc answers every request of the fixtures as kwctl does" {
    local differ=0 count=0
    for fixture in $(fixtures); do
        count=$((count + 1))
        same_answer "$fixture" || differ=$((differ + 1))
    done
    echo "$differ of $count differ"
    [ "$count" -gt 30 ]
    [ "$differ" -eq 0 ]
}

@test "kwctl-wapc answers as kwctl does under each settings file the suite uses" {
    local differ=0
    for settings in no_mutation no_kit raised_minimums short_session_drain; do
        for fixture in legacy_bare_pod_create.json conforming_jump_pod_create.json \
            dstack_0_22_5_bare_jump_pod_create.json replicaset_besteffort_template_create.json; do
            same_answer "$fixture" --settings-path "policy/test_data/settings/$settings.json" ||
                differ=$((differ + 1))
        done
    done
    same_answer legacy_bare_pod_create.json --settings-json '{"mutate": false}' || differ=$((differ + 1))
    [ "$differ" -eq 0 ]
}

@test "kwctl-wapc refuses the settings kwctl refuses, for the policy's reason where kwctl gives it" {
    local theirs
    for settings in policy/test_data/settings/invalid_*.json; do
        run kwctl run --request-path policy/test_data/ordinary_pod_create.json --settings-path "$settings" "$ANNOTATED"
        [ "$status" -ne 0 ]
        # kwctl refuses settings that are not an object itself, before the policy sees them.
        theirs="$output"
        run "$KWCTL_WAPC" run --request-path policy/test_data/ordinary_pod_create.json --settings-path "$settings" "$ANNOTATED"
        [ "$status" -ne 0 ]
        if [[ "$theirs" == *"Provided settings are not valid"* ]]; then
            [[ "$output" == *"Provided settings are not valid"* ]]
        fi
    done
}

@test "kwctl-wapc annotates as kwctl does, but for kwctl's own version" {
    "$KWCTL_WAPC" annotate -m policy/metadata.yml -u policy/README.md -o "$BATS_TEST_TMPDIR/ours.wasm" "$POLICY_WASM"
    # Each runner reads the other's annotation.
    theirs="$("$KWCTL_WAPC" inspect -o yaml "$ANNOTATED")"
    ours="$(kwctl inspect -o yaml "$BATS_TEST_TMPDIR/ours.wasm" 2>/dev/null)"
    diff <(echo "$theirs" | grep -v 'io.kubewarden.kwctl:' | sort) <(echo "$ours" | sort)
}
