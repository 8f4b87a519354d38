//! The webhook configurations `jumppod webhook-configuration` prints.

use super::PATH;
use jumppod::schema;
use serde_json::{Value, json};

/// Where the API server reaches the webhook.
pub enum Endpoint {
    Url(String),
    /// namespace, name, port
    Service(String, String, i32),
}

/// Which namespaces the API server sends.
pub struct Scope {
    /// Only these (empty: every namespace but `left_out`).
    pub only: Vec<String>,
    /// Never these: kube-system and the webhook's own namespace, so that the webhook's own
    /// pods (and the cluster's) can be created while it is down.
    pub left_out: Vec<String>,
}

/// The MutatingWebhookConfiguration that sends pods and ReplicaSets to the webhook, with the
/// rules of the policy's metadata.yml (the same requests Kubewarden would send it), scoped to
/// the objects labelled `app.kubernetes.io/name` outside `scope.left_out`.
pub fn configuration(
    endpoint: &Endpoint,
    ca_pem: &[u8],
    failure_policy: &str,
    scope: &Scope,
) -> Value {
    use base64::Engine as _;
    let mut client = json!({"caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem)});
    match endpoint {
        Endpoint::Url(url) => client["url"] = json!(url),
        Endpoint::Service(ns, name, port) => {
            client["service"] = json!({"namespace": ns, "name": name, "path": PATH, "port": port})
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
    let webhook = json!({
        "name": "jump-pods.jumppod.dstack.ai",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "reinvocationPolicy": "Never",
        // policy-server's own default deadline is 2 s of evaluation; the round trip needs more.
        "timeoutSeconds": 10,
        "clientConfig": client,
        "rules": [rule("", "pods"), rule("apps", "replicasets")],
        // Every jump pod carries the key, with a value per schema: dstack-ssh-proxy (current),
        // its own name (pre-#3891, one per project), so Exists, not In. The API server reads
        // the object's own labels (a ReplicaSet's, not its template's).
        "objectSelector": {"matchExpressions": [{"key": schema::NAME_LABEL, "operator": "Exists"}]},
        "namespaceSelector": {"matchExpressions": namespaces},
    });
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "jumppod"},
        "webhooks": [webhook],
    })
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

    #[test]
    fn the_configuration_sends_what_the_policys_metadata_names() {
        let config = configuration(
            &Endpoint::Url("https://127.0.0.1:8443/mutate".into()),
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
    #[case::every_namespace_but_those_left_out(&[], &["kube-system", "jumppod"], json!([
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "jumppod"]}]))]
    #[case::only_some_namespaces_and_never_those_left_out(&["dstack"], &["kube-system"], json!([
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["dstack"]}]))]
    fn the_selectors_send_only_labelled_objects_of_the_namespaces_in_scope(
        #[case] only: &[&str],
        #[case] left_out: &[&str],
        #[case] expressions: Value,
    ) {
        let config = configuration(
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
        assert_eq!(
            webhook["objectSelector"],
            json!({"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "Exists"}]})
        );
    }
}
