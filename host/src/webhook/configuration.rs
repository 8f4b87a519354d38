//! The webhook configurations `jumppod webhook-configuration` prints.

use super::PATH;
use serde_json::{Value, json};

/// Where the API server reaches the webhook.
pub enum Endpoint {
    Url(String),
    /// namespace, name, port
    Service(String, String, i32),
}

/// The MutatingWebhookConfiguration that sends pods and ReplicaSets to the webhook, with the
/// rules of the policy's metadata.yml (the same requests Kubewarden would send it).
pub fn configuration(
    endpoint: &Endpoint,
    ca_pem: &[u8],
    failure_policy: &str,
    namespaces: &[String],
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
    let mut webhook = json!({
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
    });
    if !namespaces.is_empty() {
        webhook["namespaceSelector"] = json!({"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]});
    }
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

    #[test]
    fn the_configuration_sends_what_the_policys_metadata_names() {
        let config = configuration(
            &Endpoint::Url("https://127.0.0.1:8443/mutate".into()),
            b"CA",
            "Fail",
            &[],
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
}
