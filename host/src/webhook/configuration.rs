//! The webhook configurations `jumppod webhook-configuration` prints.

use super::{MUTATED_ANNOTATION, MUTATED_VALUE, PATH, VALIDATE_PATH};
use jumppod::schema;
use serde_json::{Value, json};

/// Where the API server reaches the webhook.
pub enum Endpoint {
    /// https://host[:port][/prefix]; each configuration appends its path.
    Url(String),
    /// namespace, name, port
    Service(String, String, i32),
}

/// Which configuration: the mutating one (`/mutate`: the policy's patch) or the validating
/// one (`/validate`: the policy's verdict on the object as stored, after every mutation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Mutating,
    Validating,
}

/// Which namespaces the API server sends.
pub struct Scope {
    /// Only these (empty: every namespace but `left_out`).
    pub only: Vec<String>,
    /// Never these: kube-system and the webhook's own namespace, so that the webhook's own
    /// pods (and the cluster's) can be created while it is down.
    pub left_out: Vec<String>,
}

/// The webhook configuration of `kind` that sends pods and ReplicaSets to the webhook, with
/// the rules of the policy's metadata.yml (the same requests Kubewarden would send it),
/// scoped to jump pods and jump-pod ReplicaSets (`matchConditions`) outside `scope.left_out`.
pub fn configuration(
    kind: Kind,
    endpoint: &Endpoint,
    ca_pem: &[u8],
    failure_policy: &str,
    scope: &Scope,
) -> Value {
    use base64::Engine as _;
    let path = match kind {
        Kind::Mutating => PATH,
        Kind::Validating => VALIDATE_PATH,
    };
    let mut client = json!({"caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem)});
    match endpoint {
        Endpoint::Url(base) => client["url"] = json!(format!("{base}{path}")),
        Endpoint::Service(ns, name, port) => {
            client["service"] = json!({"namespace": ns, "name": name, "path": path, "port": port})
        }
    }
    let rule = |group: &str, resource: &str| {
        json!({"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
               "resources": [resource], "scope": "Namespaced"})
    };
    let mut namespaces = vec![json!({
        "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": scope.left_out})];
    if !scope.only.is_empty() {
        namespaces.push(json!({
            "key": "kubernetes.io/metadata.name", "operator": "In", "values": scope.only}));
    }
    let mut webhook = json!({
        "name": "jump-pods.jumppod.dstack.ai",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        // policy-server's own default deadline is 2 s of evaluation; the round trip needs more.
        "timeoutSeconds": 10,
        "clientConfig": client,
        "rules": [rule("", "pods"), rule("apps", "replicasets")],
        // Only what the policy classifies as a jump pod or a jump-pod ReplicaSet is sent: any
        // other pod is admitted without a call, so the cluster's workloads never wait for the
        // webhook, even under Fail. Not an objectSelector: it reads a ReplicaSet's own labels,
        // not its template's, and cannot compare a label with the name.
        "matchConditions": [{"name": "jump-pods", "expression": schema::match_condition()}],
        "namespaceSelector": {"matchExpressions": namespaces},
    });
    let kind = match kind {
        Kind::Mutating => {
            webhook["reinvocationPolicy"] = json!("Never");
            "MutatingWebhookConfiguration"
        }
        Kind::Validating => {
            // Only what the mutating pass admitted (its mark): while the validating
            // configuration exists without the mutating one (one created, updated or deleted
            // before the other), it never refuses what the mutation would have fixed.
            webhook["matchConditions"]
                .as_array_mut()
                .expect("the jump-pods condition")
                .push(json!({"name": "mutated-by-jumppod", "expression": mutated_condition()}));
            "ValidatingWebhookConfiguration"
        }
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "jumppod"},
        "webhooks": [webhook],
    })
}

/// CEL: the object carries the mutating pass's mark.
pub fn mutated_condition() -> String {
    format!(
        "has(object.metadata.annotations) && '{MUTATED_ANNOTATION}' in object.metadata.annotations && \
         object.metadata.annotations['{MUTATED_ANNOTATION}'] == '{MUTATED_VALUE}'"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn scope(only: &[&str], left_out: &[&str]) -> Scope {
        let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
        Scope {
            only: owned(only),
            left_out: owned(left_out),
        }
    }

    #[rstest]
    #[case::mutating(Kind::Mutating)]
    #[case::validating(Kind::Validating)]
    fn the_configuration_sends_what_the_policys_metadata_names(#[case] kind: Kind) {
        let config = configuration(
            kind,
            &Endpoint::Url("https://127.0.0.1:8443".into()),
            b"CA",
            "Fail",
            &scope(&[], &["kube-system"]),
        );
        let metadata: Value =
            serde_yaml::from_str(include_str!("../../../policy/metadata.yml")).unwrap();
        let rules = config["webhooks"][0]["rules"].as_array().unwrap();
        let wanted = metadata["rules"].as_array().unwrap();
        assert_eq!(rules.len(), wanted.len());
        for (rule, want) in rules.iter().zip(wanted) {
            for field in ["apiGroups", "apiVersions", "resources", "operations"] {
                assert_eq!(rule[field], want[field], "{field}");
            }
        }
        assert_eq!(config["webhooks"][0]["clientConfig"]["caBundle"], "Q0E=");
    }

    #[rstest]
    #[case::mutating_by_url(Kind::Mutating, Endpoint::Url("https://h:1".into()),
        "MutatingWebhookConfiguration", json!({"url": "https://h:1/mutate"}), Some("Never"))]
    #[case::validating_by_url(Kind::Validating, Endpoint::Url("https://h:1".into()),
        "ValidatingWebhookConfiguration", json!({"url": "https://h:1/validate"}), None)]
    #[case::validating_by_service(Kind::Validating, Endpoint::Service("jp".into(), "wh".into(), 443),
        "ValidatingWebhookConfiguration",
        json!({"service": {"namespace": "jp", "name": "wh", "path": "/validate", "port": 443}}), None)]
    fn each_kind_points_at_its_path(
        #[case] kind: Kind,
        #[case] endpoint: Endpoint,
        #[case] expected_kind: &str,
        #[case] expected_client: Value,
        #[case] reinvocation: Option<&str>,
    ) {
        let config = configuration(kind, &endpoint, b"", "Fail", &scope(&[], &[]));
        assert_eq!(config["kind"], expected_kind);
        let mut client = config["webhooks"][0]["clientConfig"].clone();
        client.as_object_mut().unwrap().remove("caBundle");
        assert_eq!(client, expected_client);
        assert_eq!(
            config["webhooks"][0]["reinvocationPolicy"].as_str(),
            reinvocation
        );
    }

    #[rstest]
    #[case::every_namespace_but_those_left_out(&[], &["kube-system", "jumppod"], json!([
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "jumppod"]}]))]
    #[case::only_some_namespaces_and_never_those_left_out(&["dstack"], &["kube-system"], json!([
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["dstack"]}]))]
    fn only_jump_pods_of_the_namespaces_in_scope_are_sent(
        #[case] only: &[&str],
        #[case] left_out: &[&str],
        #[case] expressions: Value,
    ) {
        for kind in [Kind::Mutating, Kind::Validating] {
            let config = configuration(
                kind,
                &Endpoint::Url("https://h".into()),
                b"",
                "Fail",
                &scope(only, left_out),
            );
            let webhook = &config["webhooks"][0];
            assert_eq!(
                webhook["namespaceSelector"],
                json!({"matchExpressions": expressions})
            );
            // No objectSelector: it would skip a ReplicaSet labelled only on its template.
            assert_eq!(webhook.get("objectSelector"), None);
            let mut conditions =
                vec![json!({"name": "jump-pods", "expression": schema::match_condition()})];
            if kind == Kind::Validating {
                conditions
                    .push(json!({"name": "mutated-by-jumppod", "expression": mutated_condition()}));
            }
            assert_eq!(webhook["matchConditions"], json!(conditions));
        }
    }
}
