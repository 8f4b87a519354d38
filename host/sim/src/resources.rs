//! The resource types the simulator serves, and the discovery documents describing them.

use serde_json::{Value, json};

/// One served resource type.
#[derive(Debug)]
pub struct ResDef {
    pub resource: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short: &'static [&'static str],
    pub subresources: &'static [&'static str],
}

impl ResDef {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods`, `replicasets.apps`: how the API server names a resource in messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    /// `Pod`, `ReplicaSet.apps`: how validation errors name a kind.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// Kinds whose main endpoint ignores `status` (it has its own subresource).
    pub fn has_status(&self) -> bool {
        self.subresources.contains(&"status")
    }
}

const RBAC: &str = "rbac.authorization.k8s.io";

macro_rules! res {
    ($r:expr, $g:expr, $k:expr, $ns:expr, $short:expr, $sub:expr) => {
        ResDef {
            resource: $r,
            group: $g,
            version: "v1",
            kind: $k,
            namespaced: $ns,
            short: $short,
            subresources: $sub,
        }
    };
}

/// Every resource type served.
pub static RESOURCES: &[ResDef] = &[
    res!("namespaces", "", "Namespace", false, &["ns"], &["status"]),
    res!("nodes", "", "Node", false, &["no"], &["status"]),
    res!("pods", "", "Pod", true, &["po"], &["status"]),
    res!("services", "", "Service", true, &["svc"], &["status"]),
    res!("configmaps", "", "ConfigMap", true, &["cm"], &[]),
    res!("secrets", "", "Secret", true, &[], &[]),
    res!("serviceaccounts", "", "ServiceAccount", true, &["sa"], &[]),
    res!("events", "", "Event", true, &["ev"], &[]),
    res!("limitranges", "", "LimitRange", true, &["limits"], &[]),
    res!(
        "replicasets",
        "apps",
        "ReplicaSet",
        true,
        &["rs"],
        &["status"]
    ),
    res!("roles", RBAC, "Role", true, &[], &[]),
    res!("clusterroles", RBAC, "ClusterRole", false, &[], &[]),
    res!("rolebindings", RBAC, "RoleBinding", true, &[], &[]),
    res!(
        "clusterrolebindings",
        RBAC,
        "ClusterRoleBinding",
        false,
        &[],
        &[]
    ),
];

/// Looks a resource up by group and plural name.
pub fn find(group: &str, resource: &str) -> Option<&'static ResDef> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.resource == resource)
}

/// Looks a resource up by plural name alone (names are unique across the served groups).
pub fn by_name(resource: &str) -> Option<&'static ResDef> {
    RESOURCES.iter().find(|r| r.resource == resource)
}

/// Looks a resource up by `apiVersion` and `kind`.
pub fn by_kind(api_version: &str, kind: &str) -> Option<&'static ResDef> {
    RESOURCES
        .iter()
        .find(|r| r.api_version() == api_version && r.kind == kind)
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
];

/// `/api/v1` or `/apis/GROUP/v1`.
pub fn resource_list(group: &str) -> Option<Value> {
    let defs: Vec<&ResDef> = RESOURCES.iter().filter(|r| r.group == group).collect();
    if defs.is_empty() {
        return None;
    }
    let mut list = Vec::new();
    for r in &defs {
        list.push(json!({
            "name": r.resource, "singularName": r.kind.to_lowercase(), "namespaced": r.namespaced,
            "kind": r.kind, "verbs": VERBS, "shortNames": r.short,
        }));
        for sub in r.subresources {
            list.push(json!({
                "name": format!("{}/{}", r.resource, sub), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"],
            }));
        }
    }
    Some(json!({
        "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": defs[0].api_version(), "resources": list,
    }))
}

/// `/api`.
pub fn api_versions(server: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}]})
}

fn group_doc(group: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/v1"), "version": "v1"});
    json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
}

/// `/apis`.
pub fn group_list() -> Value {
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group_doc("apps"), group_doc(RBAC)]})
}

/// `/apis/GROUP`.
pub fn group(group: &str) -> Option<Value> {
    (group == "apps" || group == RBAC).then(|| {
        let mut g = group_doc(group);
        g["kind"] = json!("APIGroup");
        g["apiVersion"] = json!("v1");
        g
    })
}

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": "v1.33.0-jumppod-sim", "gitCommit": "0000000",
        "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24",
        "compiler": "gc", "platform": "linux/amd64",
    })
}
