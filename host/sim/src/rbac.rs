//! Role-based access control over the stored Role/ClusterRole and binding objects.

use crate::meta::meta_str;
use crate::store::State;
use serde_json::Value;

/// One authorisation question.
pub struct Attrs<'a> {
    pub user: &'a str,
    pub verb: &'a str,
    pub group: &'a str,
    /// `pods` or `pods/status`.
    pub resource: &'a str,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

fn subject_matches(s: &Value, user: &str) -> bool {
    let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = s.get("name").and_then(Value::as_str).unwrap_or("");
    match kind {
        "User" => name == user,
        "ServiceAccount" => {
            let ns = s.get("namespace").and_then(Value::as_str).unwrap_or("");
            user == format!("system:serviceaccount:{ns}:{name}")
        }
        "Group" => {
            name == "system:authenticated" && user != "system:anonymous"
                || name == "system:unauthenticated" && user == "system:anonymous"
                || user
                    .strip_prefix("system:serviceaccount:")
                    .is_some_and(|rest| {
                        name == "system:serviceaccounts"
                            || rest.split_once(':').is_some_and(|(ns, _)| {
                                name == format!("system:serviceaccounts:{ns}")
                            })
                    })
        }
        _ => false,
    }
}

fn list_has(rule: &Value, field: &str, want: &str) -> bool {
    rule.get(field).and_then(Value::as_array).is_some_and(|a| {
        a.iter()
            .any(|v| v.as_str().is_some_and(|v| v == "*" || v == want))
    })
}

fn rule_allows(rule: &Value, a: &Attrs) -> bool {
    let names_ok = match rule.get("resourceNames").and_then(Value::as_array) {
        Some(names) if !names.is_empty() => a
            .name
            .is_some_and(|n| names.iter().any(|v| v.as_str() == Some(n))),
        _ => true,
    };
    list_has(rule, "verbs", a.verb)
        && list_has(rule, "apiGroups", a.group)
        && (list_has(rule, "resources", a.resource)
            || a.resource
                .split_once('/')
                .is_some_and(|(_, sub)| list_has(rule, "resources", &format!("*/{sub}"))))
        && names_ok
}

fn role_rules<'a>(state: &'a State, role_ref: &Value, ns: &str) -> Vec<&'a Value> {
    let kind = role_ref.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = role_ref.get("name").and_then(Value::as_str).unwrap_or("");
    let role = match kind {
        "ClusterRole" => state.get("clusterroles", None, name),
        "Role" => state.get("roles", Some(ns), name),
        _ => None,
    };
    role.and_then(|r| r.get("rules"))
        .and_then(Value::as_array)
        .map(|r| r.iter().collect())
        .unwrap_or_default()
}

/// Whether any binding grants the request.
pub fn allowed(state: &State, a: &Attrs) -> bool {
    let bound = |b: &Value| {
        b.get("subjects")
            .and_then(Value::as_array)
            .is_some_and(|s| s.iter().any(|s| subject_matches(s, a.user)))
    };
    for b in state.iter("clusterrolebindings", None) {
        if bound(b)
            && role_rules(state, &b["roleRef"], "")
                .into_iter()
                .any(|r| rule_allows(r, a))
        {
            return true;
        }
    }
    if let Some(ns) = a.namespace {
        for b in state.iter("rolebindings", Some(ns)) {
            if bound(b)
                && role_rules(state, &b["roleRef"], meta_str(b, "namespace"))
                    .into_iter()
                    .any(|r| rule_allows(r, a))
            {
                return true;
            }
        }
    }
    false
}

/// The API server's Forbidden message.
pub fn forbidden_message(a: &Attrs, qualified: &str) -> String {
    let what = match a.name {
        Some(n) => format!("{qualified} \"{n}\""),
        None => qualified.to_string(),
    };
    let scope = match a.namespace {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".to_string(),
    };
    format!(
        "{what} is forbidden: User \"{}\" cannot {} resource \"{}\" in API group \"{}\" {scope}",
        a.user, a.verb, a.resource, a.group
    )
}
