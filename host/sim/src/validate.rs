//! Defaulting and validation the API server applies, with its messages.

use crate::errors::{FieldError, go_map, quote};
use crate::quantity;
use crate::selector::LabelSelector;
use serde_json::{Map, Value, json};

const DNS1123_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_LABEL: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const QUALIFIED_NAME: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn is_dns_subdomain(s: &str) -> bool {
    s.split('.').all(is_dns_label)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, non-empty.
fn is_label_token(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// `IsDNS1123Label`: the length error first, then the format error (a valid subdomain that is
/// not a label can only have dots).
fn dns1123_label_errors(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    if value.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    if !is_dns_label(value) {
        if is_dns_subdomain(value) {
            out.push("must not contain dots".to_string());
        } else {
            out.push(DNS1123_LABEL.to_string());
        }
    }
    out
}

/// Validates an object name; `style` is "subdomain", "label" or "dns1035".
pub fn name(name: &str, style: &str, errs: &mut Vec<FieldError>) {
    let (ok, msg, max) = match style {
        "label" => (is_dns_label(name), DNS1123_LABEL, 63),
        "dns1035" => (
            is_dns_label(name) && name.as_bytes()[0].is_ascii_lowercase(),
            DNS1035_LABEL,
            63,
        ),
        _ => (is_dns_subdomain(name), DNS1123_SUBDOMAIN, 253),
    };
    if name.len() > max {
        errs.push(FieldError::invalid(
            "metadata.name",
            quote(name),
            format!("must be no more than {max} characters"),
        ));
    }
    if !ok {
        errs.push(FieldError::invalid("metadata.name", quote(name), msg));
    }
}

/// Validates label keys and values at `path` (e.g. `metadata.labels`).
pub fn labels(labels: Option<&Map<String, Value>>, path: &str, errs: &mut Vec<FieldError>) {
    for (k, v) in labels.into_iter().flatten() {
        let (prefix, nm) = match k.rsplit_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k.as_str()),
        };
        if let Some(p) = prefix
            && (!is_dns_subdomain(p) || p.len() > 253)
        {
            errs.push(FieldError::invalid(
                path,
                quote(k),
                format!("prefix part {DNS1123_SUBDOMAIN}"),
            ));
        }
        if nm.is_empty() {
            errs.push(FieldError::invalid(
                path,
                quote(k),
                "name part must be non-empty",
            ));
        } else {
            if nm.len() > 63 {
                errs.push(FieldError::invalid(
                    path,
                    quote(k),
                    "name part must be no more than 63 characters",
                ));
            }
            if !is_label_token(nm) {
                errs.push(FieldError::invalid(path, quote(k), QUALIFIED_NAME));
            }
        }
        let Some(v) = v.as_str() else {
            errs.push(FieldError::invalid(
                path,
                v.to_string(),
                "label values must be strings",
            ));
            continue;
        };
        if v.len() > 63 {
            errs.push(FieldError::invalid(
                path,
                quote(v),
                "must be no more than 63 characters",
            ));
        }
        if !v.is_empty() && !is_label_token(v) {
            errs.push(FieldError::invalid(path, quote(v), LABEL_VALUE));
        }
    }
}

fn containers_mut(spec: &mut Value) -> impl Iterator<Item = &mut Value> {
    let mut out = Vec::new();
    if let Some(obj) = spec.as_object_mut() {
        for (k, v) in obj.iter_mut() {
            if (k == "containers" || k == "initContainers")
                && let Some(a) = v.as_array_mut()
            {
                out.extend(a.iter_mut());
            }
        }
    }
    out.into_iter()
}

/// Pod spec defaulting: requests default to limits, and the usual scalar defaults.
pub fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    for c in containers_mut(spec) {
        if let Some(limits) = c
            .pointer("/resources/limits")
            .and_then(Value::as_object)
            .cloned()
        {
            let res = c["resources"].as_object_mut().unwrap();
            let req = res.entry("requests").or_insert_with(|| json!({}));
            if let Some(req) = req.as_object_mut() {
                for (k, v) in limits {
                    req.entry(k).or_insert(v);
                }
            }
        }
        if let Some(c) = c.as_object_mut() {
            c.entry("terminationMessagePath")
                .or_insert(json!("/dev/termination-log"));
            c.entry("terminationMessagePolicy").or_insert(json!("File"));
            let pull = if c
                .get("image")
                .and_then(Value::as_str)
                .is_some_and(|i| i.ends_with(":latest") || !i.contains(':'))
            {
                "Always"
            } else {
                "IfNotPresent"
            };
            c.entry("imagePullPolicy").or_insert(json!(pull));
        }
    }
    let s = spec.as_object_mut().unwrap();
    s.entry("restartPolicy").or_insert(json!("Always"));
    s.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
    s.entry("schedulerName")
        .or_insert(json!("default-scheduler"));
    s.entry("terminationGracePeriodSeconds")
        .or_insert(json!(30));
    s.entry("securityContext").or_insert(json!({}));
}

/// The pod's QoS class by the Kubernetes rules (requests already defaulted from limits).
pub fn qos_class(spec: &Value) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    let all: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .collect();
    for c in all {
        let req = c.pointer("/resources/requests").and_then(Value::as_object);
        let lim = c.pointer("/resources/limits").and_then(Value::as_object);
        for r in ["cpu", "memory"] {
            let rq = req
                .and_then(|m| m.get(r))
                .and_then(|v| quantity::amount(r, v))
                .filter(|v| *v != 0);
            let lm = lim
                .and_then(|m| m.get(r))
                .and_then(|v| quantity::amount(r, v))
                .filter(|v| *v != 0);
            if rq.is_some() || lm.is_some() {
                any = true;
            }
            if lm.is_none() || rq != lm {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Pod validation (the parts the simulator models).
pub fn pod_spec(spec: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let containers = spec.get("containers").and_then(Value::as_array);
    if containers.is_none_or(|c| c.is_empty()) {
        errs.push(FieldError::required(format!("{path}.containers"), ""));
    }
    for (i, c) in containers.into_iter().flatten().enumerate() {
        match c.get("name").and_then(Value::as_str) {
            None | Some("") => errs.push(FieldError::required(
                format!("{path}.containers[{i}].name"),
                "",
            )),
            // Container names are DNS-1123 labels (`ValidateDNS1123Label`): at most 63
            // characters, one error per broken rule.
            Some(n) => {
                for detail in dns1123_label_errors(n) {
                    errs.push(FieldError::invalid(
                        format!("{path}.containers[{i}].name"),
                        quote(n),
                        detail,
                    ));
                }
            }
        }
        if c.get("image")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            errs.push(FieldError::required(
                format!("{path}.containers[{i}].image"),
                "",
            ));
        }
    }
    if let Some(rp) = spec.get("restartPolicy").and_then(Value::as_str)
        && !["Always", "OnFailure", "Never"].contains(&rp)
    {
        errs.push(FieldError::not_supported(
            format!("{path}.restartPolicy"),
            rp,
            &["Always", "OnFailure", "Never"],
        ));
    }
}

/// ReplicaSet validation: selector required, non-empty and matching the template labels;
/// template labels valid; restartPolicy Always.
pub fn replicaset(rs: &Value, errs: &mut Vec<FieldError>) {
    let tlabels = rs
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object);
    match rs.pointer("/spec/selector") {
        None | Some(Value::Null) => errs.push(FieldError::required("spec.selector", "")),
        Some(sel) => match LabelSelector::from_object(sel) {
            None => errs.push(FieldError::invalid("spec.selector", sel.to_string(), "invalid label selector")),
            Some(s) if s.is_empty() => errs.push(FieldError::invalid(
                "spec.selector",
                "v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}",
                "empty selector is invalid for deployment",
            )),
            Some(s) => {
                if !s.matches(tlabels) {
                    errs.push(FieldError::invalid(
                        "spec.template.metadata.labels",
                        go_map(tlabels),
                        "`selector` does not match template `labels`",
                    ));
                }
            }
        },
    }
    if let Some(r) = rs.pointer("/spec/replicas").and_then(Value::as_i64)
        && r < 0
    {
        errs.push(FieldError::invalid(
            "spec.replicas",
            r.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    labels(tlabels, "spec.template.metadata.labels", errs);
    if let Some(spec) = rs.pointer("/spec/template/spec") {
        pod_spec(spec, "spec.template.spec", errs);
        let rp = spec
            .get("restartPolicy")
            .and_then(Value::as_str)
            .unwrap_or("Always");
        if rp != "Always" {
            errs.push(FieldError::not_supported(
                "spec.template.spec.restartPolicy",
                rp,
                &["Always"],
            ));
        }
    } else {
        errs.push(FieldError::required("spec.template.spec.containers", ""));
    }
}
