//! Fidelity tests of RBAC authorisation and its Forbidden messages.

use jumppod_sim::testing::*;
use jumppod_sim::{Sim, SimConfig};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

async fn rbac_sim() -> Sim {
    let sim = Sim::start(SimConfig {
        rbac: true,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    namespace(&sim, "team");
    namespace(&sim, "other");
    sim
}

fn pod(name: &str) -> Pod {
    typed(
        json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )
}

// Without a binding a user is denied with the API server's exact Forbidden message.
#[tokio::test(flavor = "multi_thread")]
async fn denied_without_binding() {
    let sim = rbac_sim().await;
    let alice = client_at(&sim.kubeconfig_for("alice")).await;
    let pods: Api<Pod> = Api::namespaced(alice.clone(), "team");
    let s = status(pods.list(&ListParams::default()).await);
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        s.message,
        "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"team\""
    );
    let nss: Api<Namespace> = Api::all(alice);
    let s = status(nss.get("team").await);
    assert_eq!(
        s.message,
        "namespaces \"team\" is forbidden: User \"alice\" cannot get resource \"namespaces\" in API group \"\" at the cluster scope"
    );
    let (code, body) = raw(&sim, "alice", "GET", "/api/v1/namespaces/team/pods", None);
    assert_eq!(code, 403);
    assert_eq!(body["details"], json!({"kind": "pods"}));
}

// A RoleBinding grants its Role's verbs in its namespace only.
#[tokio::test(flavor = "multi_thread")]
async fn role_binding_grants_in_namespace() {
    let sim = rbac_sim().await;
    sim.create(
        "roles",
        Some("team"),
        json!({"metadata": {"name": "reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}),
    )
    .unwrap();
    sim.create(
        "rolebindings",
        Some("team"),
        json!({"metadata": {"name": "alice-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]}),
    )
    .unwrap();
    let alice = client_at(&sim.kubeconfig_for("alice")).await;
    let pods: Api<Pod> = Api::namespaced(alice.clone(), "team");
    pods.list(&ListParams::default()).await.unwrap();
    let s = status(pods.create(&PostParams::default(), &pod("x")).await);
    assert_eq!(
        s.message,
        "pods is forbidden: User \"alice\" cannot create resource \"pods\" in API group \"\" in the namespace \"team\""
    );
    let other: Api<Pod> = Api::namespaced(alice, "other");
    assert_eq!(
        status(other.list(&ListParams::default()).await).reason,
        "Forbidden"
    );
    assert_eq!(sim.count(|r| r.user == "alice" && r.status == 403), 2);
}

// A ClusterRoleBinding to a ServiceAccount grants everywhere; API groups and resourceNames are honoured.
#[tokio::test(flavor = "multi_thread")]
async fn cluster_role_for_service_account() {
    let sim = rbac_sim().await;
    sim.create("clusterroles", None, json!({"metadata": {"name": "rs-admin"}, "rules": [
        {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["allowed"]}]})).unwrap();
    sim.create("clusterrolebindings", None, json!({"metadata": {"name": "host"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "rs-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "host", "namespace": "jumppod"}]})).unwrap();
    let sa = client_at(&sim.kubeconfig_for("system:serviceaccount:jumppod:host")).await;
    let rss: Api<ReplicaSet> = Api::namespaced(sa.clone(), "team");
    rss.list(&ListParams::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(sa, "team");
    assert_eq!(status(pods.get("allowed").await).reason, "NotFound");
    let s = status(pods.get("denied").await);
    assert_eq!(
        s.message,
        "pods \"denied\" is forbidden: User \"system:serviceaccount:jumppod:host\" cannot get resource \"pods\" in API group \"\" in the namespace \"team\""
    );
    let (_, body) = raw(
        &sim,
        "bob",
        "GET",
        "/apis/apps/v1/namespaces/team/replicasets",
        None,
    );
    assert_eq!(
        body["message"],
        "replicasets.apps is forbidden: User \"bob\" cannot list resource \"replicasets\" in API group \"apps\" in the namespace \"team\""
    );
}

// The admin token bypasses RBAC so tests can seed.
#[tokio::test(flavor = "multi_thread")]
async fn admin_bypasses() {
    let sim = rbac_sim().await;
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "team");
    pods.create(&PostParams::default(), &pod("x"))
        .await
        .unwrap();
}
