//! The RBAC rules the host needs: exactly the verbs it uses, nothing more.
//!
//! | resource | verbs | used by |
//! |---|---|---|
//! | replicasets (apps) | get, create | ensure |
//! | services | get, create, delete | ensure (delete: the pre-#3891 Service), resolve, status |
//! | pods | get, list, delete, patch | ensure (get/delete: the legacy pod), resolve, status, keys (patch: the running pods told to remount the keys) |
//! | secrets | get, create, patch | keys (the users' keys, `<name>-authorized-keys`) |
//! | namespaces (cluster) | get, create | ensure when the namespace may be missing, status |
//! | nodes (cluster) | get, list | resolve without `hostname` |
//!
//! A RoleBinding can only exist in a namespace that exists: with these bindings the namespace
//! is created beforehand (by whoever applies them), and `namespaces create` only matters when
//! the namespaced rules are granted cluster-wide.

use serde_json::{Value, json};

/// One rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
    pub cluster: bool,
}

pub const RULES: &[Rule] = &[
    Rule {
        group: "apps",
        resource: "replicasets",
        verbs: &["get", "create"],
        cluster: false,
    },
    Rule {
        group: "",
        resource: "services",
        verbs: &["get", "create", "delete"],
        cluster: false,
    },
    Rule {
        group: "",
        resource: "pods",
        verbs: &["get", "list", "delete", "patch"],
        cluster: false,
    },
    // Write access to the keys is root-free SSH access to the jump host: kept on Secrets,
    // whose access operators already guard. The pods mount the Secret; the host never reads
    // other Secrets, but RBAC cannot name objects for create.
    Rule {
        group: "",
        resource: "secrets",
        verbs: &["get", "create", "patch"],
        cluster: false,
    },
    Rule {
        group: "",
        resource: "namespaces",
        verbs: &["get", "create"],
        cluster: true,
    },
    Rule {
        group: "",
        resource: "nodes",
        verbs: &["get", "list"],
        cluster: true,
    },
];

/// What `jumppod run` uses. It never creates ReplicaSets or namespaces: it watches, deletes
/// finished pods and old Services, recreates Services, surges a ReplicaSet whose pod's node goes
/// away (patch: its replicas; the pod's retiring mark), makes a released dstack server's bare
/// jump pod again under its name and a standby beside it (pods create; delete, with a grace
/// period of 0 off a node found lost), takes a pod on a silent node out of its Service's
/// endpoints (pods/status patch: its Ready condition), writes the keys of the project's live jobs into the
/// users' keys Secret (secrets get, create, patch: `<name>-authorized-keys` only, but RBAC
/// cannot name objects for create), and reports through Events (events.k8s.io, written by
/// `controller::events`: create, then patch for a repeated event's series). Nodes are watched
/// cluster-wide, whatever namespaces are, and their Leases in `kube-node-lease`
/// ([`NODE_LEASE_RULES`]).
pub const CONTROLLER_RULES: &[Rule] = &[
    Rule {
        group: "apps",
        resource: "replicasets",
        verbs: &["list", "watch", "patch"],
        cluster: false,
    },
    Rule {
        group: "",
        resource: "services",
        verbs: &["list", "watch", "create", "delete"],
        cluster: false,
    },
    Rule {
        group: "",
        resource: "pods",
        verbs: &["list", "watch", "create", "delete", "patch"],
        cluster: false,
    },
    Rule {
        group: "",
        resource: "pods/status",
        verbs: &["patch"],
        cluster: false,
    },
    Rule {
        group: "",
        resource: "secrets",
        verbs: &["get", "create", "patch"],
        cluster: false,
    },
    Rule {
        group: "events.k8s.io",
        resource: "events",
        verbs: &["create", "patch"],
        cluster: false,
    },
    Rule {
        group: "",
        resource: "nodes",
        verbs: &["list", "watch"],
        cluster: true,
    },
];

/// The namespace where kubelets renew their nodes' Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// What `jumppod run` reads in [`NODE_LEASE_NAMESPACE`]: which node stopped renewing its Lease
/// (`--silent-node-after`), so that its jump pod is replaced before the node-lifecycle
/// controller finds it lost.
pub fn node_lease_rules() -> Vec<Value> {
    vec![
        json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list", "watch"]}),
    ]
}

/// The Lease `jumppod run` elects its leader with, unless `--lease-name` says otherwise.
pub const LEASE_NAME: &str = "jumppod";

/// The controller's Lease, in its own namespace only: `get` and `update` of that one Lease by
/// name, and `create`, which RBAC cannot limit by name (the authorizer sees no name on a create:
/// Kubernetes' "Referring to resources" in Using RBAC Authorization).
pub fn lease_rules(name: &str) -> Vec<Value> {
    vec![
        json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}),
        json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
               "resourceNames": [name], "verbs": ["get", "update"]}),
    ]
}

/// The image the printed Deployment runs unless told otherwise.
pub const CONTROLLER_IMAGE: &str = concat!("ghcr.io/jumppod/jumppod:", env!("CARGO_PKG_VERSION"));

/// The default service account name.
pub const SERVICE_ACCOUNT: &str = "jumppod";

fn rules_json(rules: &[Rule], cluster: bool) -> Vec<Value> {
    rules
        .iter()
        .filter(|r| r.cluster == cluster && !r.verbs.is_empty())
        .map(|r| json!({"apiGroups": [r.group], "resources": [r.resource], "verbs": r.verbs}))
        .collect()
}

/// Role, RoleBinding, ClusterRole and ClusterRoleBinding for `service_account` in `namespace`,
/// from `rules`.
pub fn objects_with(rules: &[Rule], namespace: &str, service_account: &str) -> Vec<Value> {
    let subject =
        json!([{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]);
    let cluster_name = format!("jumppod-{namespace}-{service_account}");
    vec![
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "jumppod", "namespace": namespace},
            "rules": rules_json(rules, false),
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("jumppod-{service_account}"), "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jumppod"},
            "subjects": subject,
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": cluster_name},
            "rules": rules_json(rules, true),
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": cluster_name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_name},
            "subjects": subject,
        }),
    ]
}

pub fn objects(namespace: &str, service_account: &str) -> Vec<Value> {
    objects_with(RULES, namespace, service_account)
}

/// The objects as a multi-document YAML stream, with a ServiceAccount first.
pub fn yaml(namespace: &str, service_account: &str) -> String {
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": service_account, "namespace": namespace}});
    let objects: Vec<Value> = std::iter::once(sa)
        .chain(objects(namespace, service_account))
        .collect();
    yaml_stream(
        "RBAC for jumppod: exactly the verbs it uses (generated by `jumppod rbac`).",
        &objects,
    )
}

/// Which namespaces `jumppod run` watches.
#[derive(Clone, Copy, Debug)]
pub enum Watched<'a> {
    /// Its own (`--namespace`).
    Own,
    /// Every namespace (`--all-namespaces`).
    Every,
    /// These (`--namespace` repeated): the middle ground between one and every namespace.
    These(&'a [String]),
}

/// What `jumppod rbac --controller` prints: the ServiceAccount, the rules of `jumppod run`
/// (a Role in each namespace it watches, or for every namespace a ClusterRole), a Role for its
/// Lease in `namespace` (named `lease`), a ClusterRole to watch nodes, and a Deployment of two
/// replicas.
pub fn controller_objects(
    namespace: &str,
    service_account: &str,
    watched: Watched,
    image: &str,
    lease: &str,
) -> Vec<Value> {
    let subject =
        json!([{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]);
    let rules = rules_json(CONTROLLER_RULES, false);
    let name = "jumppod-controller";
    let cluster_name = format!("jumppod-controller-{namespace}-{service_account}");
    let mut objects = vec![json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": service_account, "namespace": namespace}
    })];
    let role = |ns: &str, rules: Vec<Value>| {
        [
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": name, "namespace": ns}, "rules": rules,
            }),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": subject,
            }),
        ]
    };
    let own_watched = match watched {
        Watched::Own => true,
        Watched::Every => {
            objects.push(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": cluster_name}, "rules": rules,
            }));
            objects.push(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": cluster_name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_name},
                "subjects": subject,
            }));
            false
        }
        Watched::These(list) => {
            for ns in list.iter().filter(|ns| *ns != namespace) {
                objects.extend(role(ns, rules.clone()));
            }
            list.iter().any(|ns| ns == namespace)
        }
    };
    let mut namespaced = if own_watched { rules } else { Vec::new() };
    namespaced.extend(lease_rules(lease));
    objects.extend(role(namespace, namespaced));
    // The nodes' Leases, in their namespace, whatever the namespaces watched.
    let leases_name = format!("jumppod-controller-{namespace}-{service_account}");
    objects.push(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": leases_name, "namespace": NODE_LEASE_NAMESPACE}, "rules": node_lease_rules(),
    }));
    objects.push(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": leases_name, "namespace": NODE_LEASE_NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": leases_name},
        "subjects": subject,
    }));
    // Nodes are cluster-scoped: whatever the namespaces, a ClusterRole of their own.
    let nodes_name = format!("jumppod-controller-nodes-{namespace}-{service_account}");
    objects.push(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": nodes_name}, "rules": rules_json(CONTROLLER_RULES, true),
    }));
    objects.push(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": nodes_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": nodes_name},
        "subjects": subject,
    }));
    let mut args = vec![json!("run")];
    match watched {
        Watched::Own => args.extend([json!("--namespace"), json!(namespace)]),
        Watched::Every => args.push(json!("--all-namespaces")),
        Watched::These(list) => {
            for ns in list {
                args.extend([json!("--namespace"), json!(ns)]);
            }
        }
    }
    args.extend([
        json!("--listen"),
        json!("0.0.0.0:8080"),
        json!("--lease-name"),
        json!(lease),
    ]);
    let labels = json!({"app.kubernetes.io/name": "jumppod-controller"});
    let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
    objects.push(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            // Two replicas: one leads, the other takes over within the lease duration.
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": service_account,
                    // No variable per Service of the namespace (dstack's holds one per project).
                    "enableServiceLinks": false,
                    // The lease is released on SIGTERM; 30 s leaves time for a write in flight.
                    "terminationGracePeriodSeconds": 30,
                    // Non-root as the image's numeric user says (65532): no runAsUser, which
                    // OpenShift's restricted SCCs refuse outside their own range.
                    "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "jumppod",
                        "image": image,
                        "args": args,
                        "env": [
                            {"name": "POD_NAME", "valueFrom": field("metadata.name")},
                            {"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")},
                        ],
                        "ports": [{"name": "metrics", "containerPort": 8080}],
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}},
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}},
                        // Guaranteed, like the jump pods it keeps.
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "64Mi"},
                            "limits": {"cpu": "100m", "memory": "64Mi"},
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }],
                },
            },
        },
    }));
    objects
}

/// A list of objects as a multi-document YAML stream under a comment.
pub fn yaml_stream(comment: &str, objects: &[Value]) -> String {
    let mut out = format!("# {comment}\n");
    for doc in objects {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(doc).unwrap_or_default());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_yaml_holds_the_five_objects_with_the_verbs_used() {
        let text = yaml("dstack", "jumppod");
        let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "ClusterRole",
                "ClusterRoleBinding"
            ]
        );
        assert_eq!(
            docs[1]["rules"][0],
            json!({"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get", "create"]})
        );
        assert!(!text.contains("watch") && !text.contains("update"));
        // patch only on secrets (the keys' entries are changed one by one) and pods (the
        // running ones annotated after a change of the keys).
        assert_eq!(text.matches("patch").count(), 2, "{text}");
    }

    /// The controller's rules that go in a Role (or, with `-A`, in the watch ClusterRole).
    fn namespaced_rules() -> usize {
        CONTROLLER_RULES.iter().filter(|r| !r.cluster).count()
    }

    #[test]
    fn the_controller_watches_but_never_creates_replicasets_and_keeps_its_lease_at_home() {
        let objects = controller_objects("ops", "jumppod", Watched::Own, "img", LEASE_NAME);
        let kinds: Vec<&str> = objects
            .iter()
            .map(|d| d["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "Role",
                "RoleBinding",
                "ClusterRole",
                "ClusterRoleBinding",
                "Deployment"
            ]
        );
        let rules = &objects[1]["rules"];
        // patch: a surge's replicas, never the template.
        assert_eq!(
            rules[0],
            json!({"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["list", "watch", "patch"]})
        );
        // Whatever the namespaces, the nodes' Leases read in their namespace, and the nodes in
        // a ClusterRole of their own, read only.
        assert_eq!(objects[3]["metadata"]["namespace"], NODE_LEASE_NAMESPACE);
        assert_eq!(
            objects[3]["rules"],
            json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list", "watch"]}])
        );
        assert_eq!(
            objects[5]["rules"],
            json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}])
        );
        assert_eq!(
            rules.as_array().unwrap().last().unwrap(),
            &json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "resourceNames": ["jumppod"], "verbs": ["get", "update"]})
        );
        assert_eq!(
            objects[7]["spec"]["template"]["spec"]["containers"][0]["args"],
            json!([
                "run",
                "--namespace",
                "ops",
                "--listen",
                "0.0.0.0:8080",
                "--lease-name",
                "jumppod"
            ])
        );
    }

    /// Another Lease: the Role grants that one, and the Deployment's replicas elect on it.
    #[test]
    fn another_lease_is_the_one_granted_and_run_is_told() {
        let objects = controller_objects("ops", "jumppod", Watched::Own, "img", "release-a");
        assert_eq!(
            objects[1]["rules"].as_array().unwrap().last().unwrap(),
            &json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "resourceNames": ["release-a"], "verbs": ["get", "update"]})
        );
        assert_eq!(
            objects[7]["spec"]["template"]["spec"]["containers"][0]["args"],
            json!([
                "run",
                "--namespace",
                "ops",
                "--listen",
                "0.0.0.0:8080",
                "--lease-name",
                "release-a"
            ])
        );
    }

    #[test]
    fn watching_some_namespaces_takes_a_role_in_each_and_the_lease_stays_at_home() {
        let list = ["dstack".to_owned(), "dstack-staging".to_owned()];
        let objects =
            controller_objects("ops", "jumppod", Watched::These(&list), "img", LEASE_NAME);
        let placed: Vec<(&str, &str)> = objects
            .iter()
            .map(|d| {
                (
                    d["kind"].as_str().unwrap(),
                    d["metadata"]["namespace"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            placed,
            [
                ("ServiceAccount", "ops"),
                ("Role", "dstack"),
                ("RoleBinding", "dstack"),
                ("Role", "dstack-staging"),
                ("RoleBinding", "dstack-staging"),
                ("Role", "ops"),
                ("RoleBinding", "ops"),
                ("Role", "kube-node-lease"),
                ("RoleBinding", "kube-node-lease"),
                ("ClusterRole", ""),
                ("ClusterRoleBinding", ""),
                ("Deployment", "ops"),
            ]
        );
        assert_eq!(
            objects[1]["rules"].as_array().unwrap().len(),
            namespaced_rules()
        );
        assert_eq!(objects[5]["rules"], json!(lease_rules(LEASE_NAME)));
        assert_eq!(
            objects[2]["subjects"],
            json!([{"kind": "ServiceAccount", "name": "jumppod", "namespace": "ops"}])
        );
        assert_eq!(
            objects[11]["spec"]["template"]["spec"]["containers"][0]["args"],
            json!([
                "run",
                "--namespace",
                "dstack",
                "--namespace",
                "dstack-staging",
                "--listen",
                "0.0.0.0:8080",
                "--lease-name",
                "jumppod"
            ])
        );
        // Its own namespace among them: one Role there, with both.
        let list = ["ops".to_owned(), "dstack".to_owned()];
        let objects =
            controller_objects("ops", "jumppod", Watched::These(&list), "img", LEASE_NAME);
        let own = objects
            .iter()
            .find(|d| d["kind"] == "Role" && d["metadata"]["namespace"] == "ops")
            .unwrap();
        assert_eq!(
            own["rules"].as_array().unwrap().len(),
            namespaced_rules() + 2
        );
    }

    #[test]
    fn watching_every_namespace_takes_a_cluster_role_and_the_lease_stays_namespaced() {
        let objects = controller_objects("ops", "jumppod", Watched::Every, "img", LEASE_NAME);
        let kinds: Vec<&str> = objects
            .iter()
            .map(|d| d["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Role",
                "RoleBinding",
                "ClusterRole",
                "ClusterRoleBinding",
                "Deployment"
            ]
        );
        assert_eq!(
            objects[1]["rules"].as_array().unwrap().len(),
            namespaced_rules()
        );
        assert_eq!(
            objects[3]["rules"],
            json!([
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "resourceNames": ["jumppod"], "verbs": ["get", "update"]},
            ])
        );
    }
}
