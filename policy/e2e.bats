#!/usr/bin/env bats
# The policy as kwctl runs it, on the fixtures the Rust tests use (tests/tests/policy_wasm.rs).
# Run through policy/e2e.sh (`make policy-e2e`: kwctl, or kwctl-wapc where kwctl is not
# installed; `make e2e-kwctl`: kwctl), from the repository root, with $POLICY_WASM set.

bats_require_minimum_version 1.5.0

setup_file() {
    export ANNOTATED="$BATS_FILE_TMPDIR/annotated-policy.wasm"
    kwctl annotate -m policy/metadata.yml -u policy/README.md -o "$ANNOTATED" "$POLICY_WASM"
}

# kwctl run on a fixture with the annotated module; the AdmissionResponse lands in $output.
evaluate() {
    local fixture="$1"
    shift
    run --separate-stderr kwctl run --request-path "policy/test_data/$fixture" "$@" "$ANNOTATED"
    if [ "$status" -ne 0 ]; then
        echo "kwctl run failed ($status): $stderr" >&2
        return 1
    fi
}

# The decoded JSONPatch of the last response.
patch() {
    echo "$output" | jq -c '.patch | @base64d | fromjson'
}

# The patch's operations, "op path" each, sorted, one line.
operations() {
    patch | jq -c 'map(.op + " " + .path) | sort'
}

# What the kit adds to a jump pod whose container 0 runs dstack's command and has one volume
# mount, in a pod with one volume and the API server's default grace period (30 s): sorted as
# operations() prints them.
KIT='"add /spec/containers/0/lifecycle","add /spec/containers/0/readinessProbe","add /spec/containers/0/volumeMounts/1","add /spec/volumes/1","replace /spec/terminationGracePeriodSeconds"'
LABELS='"add /metadata/labels/app.kubernetes.io~1instance","add /metadata/labels/app.kubernetes.io~1managed-by","add /metadata/labels/k8s.dstack.ai~1project"'
RESOURCES='"add /spec/containers/0/resources/limits","add /spec/containers/0/resources/requests"'

# The operations of the last response equal the union of the given groups.
operations_are() {
    local expected
    expected="$(echo "[$(IFS=,; echo "$*")]" | jq -c 'sort')"
    [ "$(operations)" = "$expected" ] || {
        echo "expected $expected"
        echo "got      $(operations)"
        return 1
    }
}

@test "an ordinary pod is accepted untouched" {
    evaluate ordinary_pod_create.json
    echo "$output" | jq -e '.allowed == true and .patch == null and .uid == "6b2e9f1a-4c7d-4e8b-a3f5-1d9c7e2b4a60"'
}

@test "a conforming jump pod running dstack's command gets the kit and nothing else" {
    evaluate conforming_jump_pod_create.json
    echo "$output" | jq -e '.allowed == true and .patchType == "JSONPatch"'
    operations_are "$KIT"
    patch | jq -e 'any(.[]; .path == "/spec/containers/0/lifecycle" and (.value | keys) == ["postStart", "preStop"])'
    patch | jq -e 'any(.[]; .path == "/spec/containers/0/readinessProbe" and .value.periodSeconds == 2)'
    patch | jq -e 'any(.[]; .path == "/spec/containers/0/volumeMounts/1" and .value == {"mountPath": "/etc/ssh/jumppod/keys", "name": "authorized-keys", "readOnly": true})'
    patch | jq -e 'any(.[]; .path == "/spec/volumes/1" and .value.secret == {"defaultMode": 292, "optional": true, "secretName": "dstack-main-ssh-jump-pod-authorized-keys"})'
    # The handover (20 s) and the default session drain (300 s).
    patch | jq -e 'any(.[]; .path == "/spec/terminationGracePeriodSeconds" and .value == 320)'
}

@test "the grace period follows the session drain of the settings" {
    evaluate conforming_jump_pod_create.json --settings-path policy/test_data/settings/short_session_drain.json
    patch | jq -e 'any(.[]; .path == "/spec/terminationGracePeriodSeconds" and .value == 80)'
}

@test "with the kit off, a conforming jump pod is accepted untouched" {
    evaluate conforming_jump_pod_create.json --settings-path policy/test_data/settings/no_kit.json
    echo "$output" | jq -e '.allowed == true and .patch == null'
}

@test "a bare legacy pod gets the labels, the default resources and the kit" {
    evaluate legacy_bare_pod_create.json
    echo "$output" | jq -e '.allowed == true and .patchType == "JSONPatch"'
    operations_are "$LABELS" "$RESOURCES" "$KIT"
    patch | jq -e 'any(.[]; .path == "/metadata/labels/app.kubernetes.io~1instance" and .value == "dstack-main-ssh-jump-pod")'
    patch | jq -e 'any(.[]; .path == "/metadata/labels/app.kubernetes.io~1managed-by" and .value == "dstack")'
    patch | jq -e 'any(.[]; .path == "/metadata/labels/k8s.dstack.ai~1project" and .value == "main")'
    patch | jq -e 'any(.[]; .path == "/spec/containers/0/resources/limits" and .value == {"cpu": "500m", "memory": "1Gi"})'
    patch | jq -e 'any(.[]; .path == "/spec/containers/0/resources/requests" and .value == {"cpu": "500m", "ephemeral-storage": "64Mi", "memory": "1Gi"})'
}

@test "with the kit off, a bare legacy pod gets the labels and the default resources only" {
    evaluate legacy_bare_pod_create.json --settings-path policy/test_data/settings/no_kit.json
    operations_are "$LABELS" "$RESOURCES"
}

@test "dstack 0.22.5's bare jump pod gets the default resources and the kit, and a pod that has them nothing" {
    evaluate dstack_0_22_5_bare_jump_pod_create.json
    operations_are "$RESOURCES" "$KIT"
    evaluate dstack_0_22_5_bare_jump_pod_with_kit_create.json
    echo "$output" | jq -e '.allowed == true and .patch == null'
}

@test "an AdmissionReview is read like a bare request" {
    evaluate legacy_bare_pod_create.json
    local bare
    bare="$(patch)"
    evaluate admission_review_legacy_bare_pod_create.json
    echo "$output" | jq -e '.allowed == true and .uid == "9c2f5e8b-1a4d-4c7f-b0e3-6a9d2f5c8b41"'
    [ "$(patch)" = "$bare" ]
}

@test "an undersized jump pod is rejected naming container, value and minimum" {
    evaluate undersized_jump_pod_create.json
    echo "$output" | jq -e '.allowed == false'
    echo "$output" | jq -e '.status.message | contains("container \"dstack-main-ssh-jump-pod-container\": cpu request 50m is below the minimum 100m")'
}

@test "an ephemeral-storage limit is rejected" {
    evaluate ephemeral_storage_limit_create.json
    echo "$output" | jq -e '.allowed == false and (.status.message | contains("ephemeral-storage limit 1Gi must not be set"))'
}

@test "a pod of an old BestEffort template gets the resources and the kit but no labels" {
    evaluate rs_pod_from_besteffort_template_create.json
    echo "$output" | jq -e '.allowed == true'
    operations_are "$RESOURCES" "$KIT"
}

@test "adopting a BestEffort legacy pod is accepted with a warning" {
    evaluate legacy_pod_adoption_update.json
    echo "$output" | jq -e '.allowed == true and .patch == null'
    echo "$output" | jq -e '.warnings | length == 1 and (.[0] | contains("accepted: its resources did not change"))'
}

@test "a ReplicaSet with a BestEffort template is admitted untouched: its pods get the resources" {
    evaluate replicaset_besteffort_template_create.json
    echo "$output" | jq -e '.allowed == true and .patch == null and .status == null'
}

@test "with mutation off, a ReplicaSet with a BestEffort template is rejected, not mutated" {
    evaluate replicaset_besteffort_template_create.json --settings-path policy/test_data/settings/no_mutation.json
    echo "$output" | jq -e '.allowed == false and .patch == null'
    echo "$output" | jq -e '.status.message | contains("cpu has no request and no limit") and contains("ephemeral-storage request is missing")'
}

@test "a legacy name too long for a label value leaves that label out, with a warning" {
    evaluate legacy_long_name_create.json
    echo "$output" | jq -e '.allowed == true and (.warnings[0] | contains("must be no more than 63 characters"))'
    patch | jq -e 'all(.[]; .path != "/metadata/labels/app.kubernetes.io~1instance")'
}

@test "a ConfigMap and a DELETE are not judged" {
    evaluate configmap_create.json
    echo "$output" | jq -e '.allowed == true and .patch == null'
    evaluate jump_pod_delete.json
    echo "$output" | jq -e '.allowed == true and .patch == null'
}

@test "with mutation off, a bare legacy pod is rejected naming what is missing" {
    evaluate legacy_bare_pod_create.json --settings-json '{"mutate": false}'
    echo "$output" | jq -e '.allowed == false'
    echo "$output" | jq -e '.status.message | contains("mutation is off") and contains("label k8s.dstack.ai/project is missing")'
}

@test "raised minimums from a settings file apply" {
    evaluate conforming_jump_pod_create.json --settings-path policy/test_data/settings/raised_minimums.json
    echo "$output" | jq -e '.allowed == false and (.status.message | contains("ephemeral-storage request 64Mi is below the minimum 128Mi"))'
}

@test "a hostile payload gets a verdict" {
    evaluate hostile/resources_as_list.json
    echo "$output" | jq -e '.allowed == false and (.status.message | contains("spec.containers[0].resources"))'
}

@test "invalid settings make kwctl exit non-zero" {
    for settings in invalid_cpu_minimum_below_floor invalid_unknown_key invalid_ephemeral_storage_quantity; do
        run kwctl run --request-path policy/test_data/ordinary_pod_create.json \
            --settings-path "policy/test_data/settings/$settings.json" "$ANNOTATED"
        [ "$status" -ne 0 ]
        [[ "$output" == *"Provided settings are not valid"* ]]
    done
}

# Without metadata kwctl needs to be told the execution mode on some releases and refuses the
# flag's spellings on others (1.36: `-e kubewarden` is unknown, `-e kubewarden-wapc` is refused
# by its argument parser); a plain `kwctl run` of the unannotated module works on every release.
@test "the module runs unannotated too" {
    run --separate-stderr kwctl run --request-path policy/test_data/conforming_jump_pod_create.json "$POLICY_WASM"
    [ "$status" -eq 0 ]
    echo "$output" | jq -e '.allowed == true'
}

@test "the annotated module carries the metadata" {
    run --separate-stderr kwctl inspect -o yaml "$ANNOTATED"
    [ "$status" -eq 0 ]
    [[ "$output" == *"mutating: true"* ]]
    [[ "$output" == *"executionMode: kubewarden-wapc"* ]]
    [[ "$output" == *"io.kubewarden.policy.title: jumppod"* ]]
    [[ "$output" == *"replicasets"* ]]
    run kwctl inspect "$ANNOTATED"
    [ "$status" -eq 0 ]
    [[ "$output" == *"jumppod"* ]]
}
