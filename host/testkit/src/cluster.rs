//! The real control plane the real-cluster tests run against (`make test` starts it once, with
//! `jumppod-controlplane run`), and what older dstack releases left in it.
//!
//! NodePorts the tests ask for by number are in the static band, 30000-30085, each used by one
//! test: the allocator picks at random from 30086 up for Services that do not ask, so another
//! test's Service can never hold one of them first (it once did, at 30307). The demo on the
//! real control plane (`tests/tests/demo.rs`) keeps 30022 for its whole story, and its
//! namespace outlives it, so no test here may ask for 30022 (one did, and failed when the
//! demo ran first).

pub use super::{kube_as, wait_for_up_to};
use jumppod::schema;
use jumppod_e2e::audit::Audit;
use jumppod_host::api::Kube;
use jumppod_host::rbac::{self, RULES, Rule};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, Node, Pod, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The control plane `jumppod-controlplane run` started for this test run.
pub fn cluster_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("JUMPPOD_CLUSTER_DIR").expect(
        "JUMPPOD_CLUSTER_DIR is not set: these tests run against the real control plane, \
         started by `make test` (jumppod-controlplane run --dir DIR -- cargo test ...)",
    ))
}

pub fn admin_kubeconfig() -> PathBuf {
    cluster_dir().join("admin.kubeconfig")
}

pub async fn admin() -> Kube {
    kube_as(&admin_kubeconfig()).await
}

/// The kubeconfig of one of the control plane's users (controlplane/credentials.go).
pub fn kubeconfig_of(user: &str) -> PathBuf {
    cluster_dir().join(format!("users/{user}.kubeconfig"))
}

/// What a scenario's user may do.
#[derive(Clone, Copy, Debug)]
pub enum UserKind {
    /// `tester-N`, in system:masters: the identity of a scenario's own requests, which the
    /// audit log then tells from every other test's.
    Tester,
    /// `user-N` from 10 up (user-1..9 are the controller's tests'): no rights but those a
    /// scenario grants it.
    Plain,
}

/// A user of the control plane that no other scenario of this test process has had or will
/// have: nobody else's grants reach it, and its requests are the scenario's alone. The control
/// plane makes a fixed number (controlplane/credentials.go).
pub fn fresh_user(kind: UserKind) -> String {
    static TESTERS: AtomicUsize = AtomicUsize::new(1);
    static PLAIN: AtomicUsize = AtomicUsize::new(10);
    let (next, prefix) = match kind {
        UserKind::Tester => (&TESTERS, "tester-"),
        UserKind::Plain => (&PLAIN, "user-"),
    };
    let user = format!("{prefix}{}", next.fetch_add(1, Ordering::SeqCst));
    assert!(
        kubeconfig_of(&user).exists(),
        "the control plane has no user {user}: make more in controlplane/credentials.go"
    );
    user
}

/// Waits for `check` to give Some, polling; fails naming what was awaited.
pub async fn wait_for<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for_up_to(what, Duration::from_secs(90), check).await
}

pub fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid object")
}

pub async fn namespace(kube: &Kube, ns: &str) {
    let api: Api<Namespace> = Api::all(kube.client.clone());
    api.create(
        &PostParams::default(),
        &typed(json!({"metadata": {"name": ns}})),
    )
    .await
    .expect("create the namespace");
}

/// The bare jump pod an older dstack created, bound to node-1 (the fake kubelet runs it):
/// `current` labels (after dstack #3891) or only `app.kubernetes.io/name=<name>` (before).
pub async fn bare_pod(kube: &Kube, ns: &str, current: bool) -> Pod {
    bare_pod_of(kube, ns, "main", current).await
}

/// [`bare_pod`] of any project.
pub async fn bare_pod_of(kube: &Kube, ns: &str, project: &str, current: bool) -> Pod {
    let name = schema::jump_pod_name(project);
    let labels = if current {
        schema::current_labels(&name, project)
    } else {
        schema::legacy_selector(&name)
    };
    let api: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let pod = api
        .create(
            &PostParams::default(),
            &bare_pod_on(&name, labels, "node-1"),
        )
        .await
        .expect("create the bare pod");
    wait_for("the bare pod to run", || async {
        api.get(&name)
            .await
            .ok()
            .filter(jumppod_plan::objects::is_ready)
    })
    .await;
    pod
}

/// What the kubelet writes when it evicts a pod under memory pressure.
pub async fn evict(kube: &Kube, ns: &str, name: &str) {
    let api: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Failed", "reason": "Evicted",
            "message": "The node was low on resource: memory.",
            "conditions": [{"type": "Ready", "status": "False"}]
        }})),
    )
    .await
    .expect("evict the pod");
}

/// The Service of a pre-#3891 release of `project`: the legacy selector, on `node_port`.
pub async fn old_service_of(kube: &Kube, ns: &str, project: &str, node_port: i32) {
    service_of(kube, ns, project, node_port, false).await
}

/// A project's Service on `node_port`, with the current selector or the pre-#3891 one.
pub async fn service_of(kube: &Kube, ns: &str, project: &str, node_port: i32, current: bool) {
    let name = schema::jump_pod_name(project);
    let selector = if current {
        schema::current_selector(&name)
    } else {
        schema::legacy_selector(&name)
    };
    let api: Api<Service> = Api::namespaced(kube.client.clone(), ns);
    api.create(
        &PostParams::default(),
        &typed(json!({
            "metadata": {"name": schema::service_name(&name)},
            "spec": {"type": "NodePort", "selector": selector,
                     "ports": [{"port": 22, "targetPort": 22, "nodePort": node_port}]}
        })),
    )
    .await
    .expect("create the Service");
}

/// A bare BestEffort jump pod as older dstack releases create it, bound to `node`.
fn bare_pod_on(name: &str, labels: std::collections::BTreeMap<String, String>, node: &str) -> Pod {
    typed(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "restartPolicy": "Never",
                 "containers": [{"name": schema::container_name(name), "image": schema::DEFAULT_IMAGE}]}
    }))
}

/// Marks the nodes a test adds to the shared control plane, with the test's namespace.
const NODE_OF_LABEL: &str = "jumppod.test/node-of";

/// Deletes an object of the namespace (pods, services, replicasets), as a client does.
pub async fn delete(kube: &Kube, ns: &str, resource: &str, name: &str) {
    async fn one<K>(api: Api<K>, name: &str)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        api.delete(name, &DeleteParams::default())
            .await
            .expect("delete the object");
    }
    let c = kube.client.clone();
    match resource {
        "pods" => one(Api::<Pod>::namespaced(c, ns), name).await,
        "services" => one(Api::<Service>::namespaced(c, ns), name).await,
        "replicasets" => one(Api::<ReplicaSet>::namespaced(c, ns), name).await,
        other => panic!("no {other} here"),
    }
}

pub async fn limit_range(kube: &Kube, ns: &str, range: Value) {
    Api::<LimitRange>::namespaced(kube.client.clone(), ns)
        .create(&PostParams::default(), &typed(range))
        .await
        .expect("create the LimitRange");
}

/// A pre-#3891 pod bound to a node of the test's own that no kubelet plays, deleted: the API
/// server keeps it, terminating, until a kubelet confirms, which none will.
pub async fn stranded_legacy_pod(kube: &Kube, ns: &str) {
    let nodes: Api<Node> = Api::all(kube.client.clone());
    let dead = format!("{ns}-dead-node");
    let node = json!({"metadata": {"name": dead, "labels": {NODE_OF_LABEL: ns}},
                      "spec": {"unschedulable": true}});
    nodes
        .create(&PostParams::default(), &typed(node))
        .await
        .expect("create the node");
    let name = schema::jump_pod_name("main");
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    pods.create(
        &PostParams::default(),
        &bare_pod_on(&name, schema::legacy_selector(&name), &dead),
    )
    .await
    .expect("create the old pod");
    pods.delete(&name, &DeleteParams::default())
        .await
        .expect("delete the old pod");
    let pod = pods
        .get(&name)
        .await
        .expect("no kubelet confirms: the pod stays");
    assert!(pod.metadata.deletion_timestamp.is_some());
}

/// A node of the test's own that the fake kubelet plays (label `jumppod.test/fake-kubelet`), as
/// the simulator's `node` describes it; once the scheduler may use it: Ready, and without the
/// `node.kubernetes.io/not-ready` taint that node admission puts on a new node until the
/// node-lifecycle controller sees it Ready.
pub async fn played_node(kube: &Kube, ns: &str, mut node: Value) {
    node["metadata"]["labels"]["jumppod.test/fake-kubelet"] = json!("true");
    node["metadata"]["labels"][NODE_OF_LABEL] = json!(ns);
    let name = node["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    let nodes: Api<Node> = Api::all(kube.client.clone());
    nodes
        .create(&PostParams::default(), &typed(node))
        .await
        .expect("create the node");
    wait_for("the new node to be schedulable", || async {
        let node = nodes.get(&name).await.ok()?;
        let ready = node
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let not_ready_taint = node
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == "node.kubernetes.io/not-ready");
        (ready && !not_ready_taint).then_some(())
    })
    .await;
}

/// The Events in `ns` with `reason`.
pub async fn events(kube: &Kube, ns: &str, reason: &str) -> Vec<Event> {
    let list = Api::<Event>::namespaced(kube.client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap();
    list.items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// How many times `events` happened: an Event's series counts its repeats.
pub fn occurrences(events: &[Event]) -> i32 {
    events
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

pub async fn remove_node(kube: &Kube, name: &str) {
    Api::<Node>::all(kube.client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete the node");
}

/// Removes the nodes the namespace's test added, played or dead (the pod GC then removes
/// their pods).
pub async fn remove_played_nodes(kube: &Kube, ns: &str) {
    let nodes: Api<Node> = Api::all(kube.client.clone());
    let params = kube::api::ListParams::default().labels(&format!("{NODE_OF_LABEL}={ns}"));
    for node in nodes
        .list(&params)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let name = node.metadata.name.unwrap_or_default();
        let _ = nodes.delete(&name, &DeleteParams::default()).await;
    }
}

/// A pod's phase as the kubelet reports a container that ran to its end (Succeeded).
pub async fn set_phase(kube: &Kube, ns: &str, name: &str, phase: &str) {
    let api: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": phase, "conditions": [{"type": "Ready", "status": "False"}]
        }})),
    )
    .await
    .expect("set the pod's phase");
}

/// An object of the namespace as JSON (pods, services, replicasets, secrets), None when absent.
pub async fn get(kube: &Kube, ns: &str, resource: &str, name: &str) -> Option<Value> {
    async fn one<K>(api: Api<K>, name: &str) -> Option<Value>
    where
        K: kube::Resource
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let obj = api.get_opt(name).await.expect("read the object")?;
        Some(serde_json::to_value(obj).unwrap())
    }
    let c = kube.client.clone();
    match resource {
        "pods" => one(Api::<Pod>::namespaced(c, ns), name).await,
        "services" => one(Api::<Service>::namespaced(c, ns), name).await,
        "replicasets" => one(Api::<ReplicaSet>::namespaced(c, ns), name).await,
        "secrets" => one(Api::<Secret>::namespaced(c, ns), name).await,
        other => panic!("no {other} here"),
    }
}

/// Every object of a kind in the namespace as JSON (pods, services, replicasets).
pub async fn list(kube: &Kube, ns: &str, resource: &str) -> Vec<Value> {
    async fn all<K>(api: Api<K>) -> Vec<Value>
    where
        K: kube::Resource
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let list = api.list(&Default::default()).await.expect("list");
        list.items
            .into_iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect()
    }
    let c = kube.client.clone();
    match resource {
        "pods" => all(Api::<Pod>::namespaced(c, ns)).await,
        "services" => all(Api::<Service>::namespaced(c, ns)).await,
        "replicasets" => all(Api::<ReplicaSet>::namespaced(c, ns)).await,
        other => panic!("no {other} here"),
    }
}

/// The real controllers and the fake kubelet have done what they will do, as the API shows it:
/// every ReplicaSet has seen its latest spec (observedGeneration), owns as many active pods
/// as it wants and says so in its status (replicas, readyReplicas: it lags behind an eviction
/// or a pod's readiness until the controller has seen them), no active pod without a
/// controller matches a ReplicaSet's selector (the controller is about to adopt it), and every
/// active pod is Ready or refused by the scheduler. Polled; fails after 90 s naming what was
/// still missing.
pub async fn settled(kube: &Kube, ns: &str) {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let sets: Api<ReplicaSet> = Api::namespaced(kube.client.clone(), ns);
    let look = || async {
        let pods = pods
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        let sets = sets
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        let active: Vec<&Pod> = pods
            .iter()
            .filter(|p| jumppod_plan::objects::is_active(p))
            .collect();
        for rs in &sets {
            let rs_name = jumppod_plan::objects::name_of(&rs.metadata);
            let status = rs.status.clone().unwrap_or_default();
            let wanted = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let owned: Vec<&&Pod> = active
                .iter()
                .filter(|p| {
                    jumppod_plan::objects::controller_of(p)
                        .is_some_and(|(kind, name)| kind == "ReplicaSet" && name == rs_name)
                })
                .collect();
            let ready = owned
                .iter()
                .filter(|p| jumppod_plan::objects::is_ready(p))
                .count();
            if status.observed_generation != rs.metadata.generation {
                return Err(format!("ReplicaSet {rs_name} to observe its generation"));
            }
            if owned.len() != wanted as usize
                || status.replicas != wanted
                || status.ready_replicas.unwrap_or(0) as usize != ready
            {
                return Err(format!(
                    "ReplicaSet {rs_name} to own {wanted} active pods and count them ({} owned, \
                     {ready} ready; status: {} replicas, {:?} ready)",
                    owned.len(),
                    status.replicas,
                    status.ready_replicas
                ));
            }
            let selector = jumppod_plan::objects::replicaset_selector(rs);
            let orphan = active.iter().find(|p| {
                let labels = p.metadata.labels.clone().unwrap_or_default();
                jumppod_plan::objects::controller_of(p).is_none()
                    && !selector.is_empty()
                    && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            });
            if let Some(pod) = orphan {
                return Err(format!(
                    "ReplicaSet {rs_name} to adopt the pod {}",
                    jumppod_plan::objects::name_of(&pod.metadata)
                ));
            }
        }
        for pod in active {
            let placed_or_refused = jumppod_plan::objects::is_ready(pod)
                || jumppod_plan::findings::unschedulable(pod).is_some();
            if !placed_or_refused {
                return Err(format!(
                    "pod {} to be Ready or refused by the scheduler",
                    jumppod_plan::objects::name_of(&pod.metadata)
                ));
            }
        }
        Ok(())
    };
    let limit = Duration::from_secs(90);
    let start = Instant::now();
    loop {
        let missing = match look().await {
            Ok(()) => return,
            Err(missing) => missing,
        };
        assert!(
            start.elapsed() < limit,
            "namespace {ns} did not settle in {limit:?}: still waiting for {missing}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Until the ReplicaSet controller has acted on every pod of `ns` created so far: a probe pod
/// with `labels` (those of a ReplicaSet's selector) that no node can take is adopted and, as
/// the surplus pod it deletes first (unassigned pods go first), deleted. The controller's
/// informer delivers a namespace's pods in the order they were written, so by then it had seen
/// every earlier pod: what it did not do about one, it will not do.
pub async fn replicaset_controller_caught_up(
    kube: &Kube,
    ns: &str,
    labels: std::collections::BTreeMap<String, String>,
) {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let probe: Pod = typed(json!({
        "metadata": {"generateName": "probe-", "labels": labels},
        "spec": {"nodeSelector": {"jumppod.test/no-such-node": "true"},
                 "containers": [{"name": "probe", "image": schema::DEFAULT_IMAGE}]}
    }));
    let probe = pods
        .create(&PostParams::default(), &probe)
        .await
        .expect("create the probe pod");
    let name = jumppod_plan::objects::name_of(&probe.metadata).to_owned();
    let what = format!("the ReplicaSet controller to adopt and delete the probe pod {name}");
    wait_for(&what, || async {
        pods.get_opt(&name)
            .await
            .expect("read the probe pod")
            .is_none()
            .then_some(())
    })
    .await;
}

/// The control plane's audit log, which counts API requests here.
pub fn audit() -> Audit {
    Audit::new(cluster_dir().join("audit.log"))
}

/// The Role, RoleBinding, ClusterRole and ClusterRoleBinding `jumppod rbac` prints, bound to
/// `user` instead of the ServiceAccount; replaced when they exist.
pub async fn grant(admin: &Kube, rules: &[Rule], ns: &str, user: &str) {
    apply_bound_to(admin, rbac::objects_with(rules, ns, user), ns, user).await
}

/// Only the ClusterRole and ClusterRoleBinding of `rules` (which say `cluster: true` where
/// they should apply everywhere): what a namespace that does not exist yet allows.
pub async fn grant_cluster_wide(admin: &Kube, rules: &[Rule], ns: &str, user: &str) {
    apply_bound_to(
        admin,
        super::cluster_wide_objects(rules, ns, user),
        ns,
        user,
    )
    .await
}

/// What `jumppod rbac --controller` prints for a controller watching `ns` (its Roles there and
/// in `kube-node-lease`, the nodes' ClusterRole), bound to `user` instead of the ServiceAccount.
pub async fn grant_controller(admin: &Kube, ns: &str, user: &str) {
    let objects = rbac::controller_objects(
        ns,
        "jumppod",
        rbac::Watched::Own,
        "unused",
        rbac::LEASE_NAME,
    )
    .into_iter()
    .filter(|o| !matches!(o["kind"].as_str(), Some("ServiceAccount" | "Deployment")))
    .collect();
    apply_bound_to(admin, objects, ns, user).await
}

async fn apply_bound_to(admin: &Kube, objects: Vec<Value>, ns: &str, user: &str) {
    let subject = json!([{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]);
    for mut object in objects {
        if object.get("subjects").is_some() {
            object["subjects"] = subject.clone();
        }
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(ns)
            .to_owned();
        let ns = ns.as_str();
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let c = admin.client.clone();
        let params = PatchParams::apply("jumppod-tests").force();
        let patch = Patch::Apply(object.clone());
        match object["kind"].as_str().unwrap() {
            "Role" => drop(
                Api::<Role>::namespaced(c, ns)
                    .patch(&name, &params, &patch)
                    .await
                    .unwrap(),
            ),
            "RoleBinding" => drop(
                Api::<RoleBinding>::namespaced(c, ns)
                    .patch(&name, &params, &patch)
                    .await
                    .unwrap(),
            ),
            "ClusterRole" => drop(
                Api::<ClusterRole>::all(c)
                    .patch(&name, &params, &patch)
                    .await
                    .unwrap(),
            ),
            "ClusterRoleBinding" => drop(
                Api::<ClusterRoleBinding>::all(c)
                    .patch(&name, &params, &patch)
                    .await
                    .unwrap(),
            ),
            kind => panic!("unexpected {kind}"),
        }
    }
}

/// Until the API server's authorizer grants `user` every verb of `rules` and none of
/// `refused`: RBAC objects reach the authorizer through an informer, a moment after they
/// are written.
pub async fn authorized(
    admin: &Kube,
    rules: &[Rule],
    refused: &[(&str, &str, &str)],
    ns: &str,
    user: &str,
) {
    let may = |group: &str, resource: &str, verb: &str, cluster: bool| {
        let review: SubjectAccessReview = typed(json!({
            "spec": {"user": user, "resourceAttributes": {
                "group": group, "resource": resource, "verb": verb,
                "namespace": if cluster { "" } else { ns }
            }}
        }));
        let api: Api<SubjectAccessReview> = Api::all(admin.client.clone());
        async move {
            api.create(&PostParams::default(), &review)
                .await
                .expect("a SubjectAccessReview")
                .status
                .is_some_and(|s| s.allowed)
        }
    };
    wait_for("the RBAC rules to reach the authorizer", || async {
        for rule in rules {
            for verb in rule.verbs {
                if !may(rule.group, rule.resource, verb, rule.cluster).await {
                    return None;
                }
            }
        }
        for (group, resource, verb) in refused {
            let cluster = RULES.iter().any(|r| r.resource == *resource && r.cluster);
            if may(group, resource, verb, cluster).await {
                return None;
            }
        }
        Some(())
    })
    .await;
}

/// Deletes what [`grant`] made cluster-wide for `ns` and `user` (the namespaced objects go
/// with the namespace).
async fn revoke(admin: &Kube, ns: &str, user: &str) {
    let name = format!("jumppod-{ns}-{user}");
    let c = admin.client.clone();
    let _ = Api::<ClusterRoleBinding>::all(c.clone())
        .delete(&name, &Default::default())
        .await;
    let _ = Api::<ClusterRole>::all(c)
        .delete(&name, &Default::default())
        .await;
}

/// Leaves nothing of a scenario behind on the shared control plane: its webhook
/// configurations (jumppod's two and the test's own sidecar injector), what it granted its
/// `users`, the nodes it added, its namespace. Called from `Drop`, so on a panic too: Drop
/// cannot await, so on a thread and a runtime of its own.
pub fn clean_up_after(ns: &str, users: Vec<String>) {
    let ns = ns.to_owned();
    let cleanup = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the cleanup");
        runtime.block_on(async {
            let admin = admin().await;
            let mutating = Api::<MutatingWebhookConfiguration>::all(admin.client.clone());
            for name in [
                webhook_configuration_name(&ns),
                sidecar_configuration_name(&ns),
            ] {
                let _ = mutating.delete(&name, &Default::default()).await;
            }
            let _ = Api::<ValidatingWebhookConfiguration>::all(admin.client.clone())
                .delete(&webhook_configuration_name(&ns), &Default::default())
                .await;
            for user in &users {
                revoke(&admin, &ns, user).await;
            }
            remove_played_nodes(&admin, &ns).await;
            let _ = Api::<Namespace>::all(admin.client.clone())
                .delete(&ns, &Default::default())
                .await;
        })
    });
    if cleanup.join().is_err() {
        eprintln!("the cleanup of a scenario's namespace failed; see its panic above");
    }
}

/// Runs [`clean_up_after`] for a namespace when dropped, so on a panic too: for a test that
/// makes its namespace without a [`super::both::Cluster`].
pub struct CleanUp(pub String);

impl Drop for CleanUp {
    fn drop(&mut self) {
        clean_up_after(&self.0, Vec::new());
    }
}

/// `jumppod webhook`, the real binary, serving the policy module with the control plane's
/// webhook pair. It runs under `sh`, which stops it when its stdin closes: when this is
/// dropped, or when the test process ends, however it ends (the shared one is never dropped).
pub struct Webhook {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    pub addr: String,
}

impl Webhook {
    /// How long the webhook may take to compile the module and listen (about 5 s alone).
    const START: Duration = Duration::from_secs(120);

    pub fn start() -> Webhook {
        let module = std::env::var("JUMPPOD_POLICY_WASM")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../policy.wasm").into());
        Webhook::start_with(&module)
    }

    /// `jumppod webhook --policy module`.
    pub fn start_with(module: &str) -> Webhook {
        let dir = cluster_dir().join("webhook");
        Webhook::start_serving(module, &dir.join("tls.crt"), &dir.join("tls.key"))
    }

    /// `jumppod webhook --policy module` serving the pair `cert` and `key`.
    pub fn start_serving(module: &str, cert: &std::path::Path, key: &std::path::Path) -> Webhook {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            // `sh` lets go of the pipe at once, so a webhook that exits early closes it.
            .arg(r#""$0" "$@" & exec >/dev/null; read -r _line; kill "$!"; wait "$!""#)
            .arg(crate::jumppod_bin())
            .args(["webhook", "--listen", "127.0.0.1:0", "--policy", module])
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("jumppod webhook");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("the webhook's stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            // Read on, so that the webhook never blocks on a full pipe.
            lines.for_each(drop);
        });
        let line = match rx.recv_timeout(Webhook::START) {
            Ok(Some(Ok(line))) => line,
            Ok(other) => panic!("the webhook ended before saying where it serves: {other:?}"),
            Err(_) => panic!(
                "timed out after {:?} waiting for the webhook to print \
                 `serving AdmissionReviews on https://...`",
                Webhook::START
            ),
        };
        let addr = line
            .trim()
            .strip_prefix("serving AdmissionReviews on https://")
            .and_then(|rest| rest.strip_suffix("/mutate"))
            .unwrap_or_else(|| panic!("the webhook did not start: {line:?}"))
            .to_owned();
        Webhook { child, stdin, addr }
    }

    /// One raw HTTPS request, the answer's status line and body.
    pub async fn post(&self, body: &str) -> (String, String) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut tls = tls_session(&self.addr, &cluster_dir().join("webhook/ca.crt")).await;
        let request = format!(
            "POST /mutate HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        tls.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tls.read_to_string(&mut answer).await.unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_owned(), body.to_owned())
    }

    /// The MutatingWebhookConfiguration of [`Webhook::configurations`].
    pub fn configuration(&self, failure_policy: &str, ns: &str) -> Value {
        let [mutating, _] = self.configurations(failure_policy, ns);
        mutating
    }

    /// What `jumppod webhook-configuration -o json` prints to register this webhook for `ns`:
    /// a List of its MutatingWebhookConfiguration and its ValidatingWebhookConfiguration.
    pub fn configurations(&self, failure_policy: &str, ns: &str) -> [Value; 2] {
        self.configurations_trusting(failure_policy, ns, &cluster_dir().join("webhook/ca.crt"))
    }

    /// [`Webhook::configurations`] with `ca` as the caBundle.
    pub fn configurations_trusting(
        &self,
        failure_policy: &str,
        ns: &str,
        ca: &std::path::Path,
    ) -> [Value; 2] {
        let out = std::process::Command::new(crate::jumppod_bin())
            .args([
                "webhook-configuration",
                "-o",
                "json",
                "--failure-policy",
                failure_policy,
            ])
            .args([
                "--only-namespace",
                ns,
                "--url",
                &format!("https://{}", self.addr),
            ])
            .arg("--ca-bundle")
            .arg(ca)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(list["kind"], "List", "{list}");
        let [mutating, validating] =
            <[Value; 2]>::try_from(list["items"].as_array().unwrap().clone())
                .unwrap_or_else(|items| panic!("two configurations, got {items:?}"));
        assert_eq!(mutating["kind"], "MutatingWebhookConfiguration");
        assert_eq!(validating["kind"], "ValidatingWebhookConfiguration");
        [mutating, validating]
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        // Its stdin closed, `sh` stops the webhook and waits for it.
        drop(self.stdin.take());
        let limit = Instant::now() + Duration::from_secs(30);
        while Instant::now() < limit {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("the webhook did not stop within 30 s of its stdin closing");
        let _ = self.child.kill();
    }
}

/// A TLS session with the server at `addr` (127.0.0.1), its certificate verified against the
/// CA certificates of the PEM file `ca`.
pub async fn tls_session(
    addr: &str,
    ca: &std::path::Path,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    tls_connect(addr, &std::fs::read(ca).unwrap(), "127.0.0.1")
        .await
        .expect("a TLS session verified against the CA")
}

/// A TLS session with the server at `addr`, its certificate verified for `name` against the
/// CA certificates of the PEM `ca`, as the API server verifies a webhook's: the error of the
/// connection or the handshake otherwise.
pub async fn tls_connect(
    addr: &str,
    ca: &[u8],
    name: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from(name.to_owned())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
}

/// The name of the webhook configurations that send a scenario's namespace to the policy.
pub fn webhook_configuration_name(ns: &str) -> String {
    format!("jumppod-{ns}")
}

/// The name of a scenario's own sidecar-injecting MutatingWebhookConfiguration: after
/// jumppod's, as the API server orders mutating configurations by name (k8s.io/apiserver
/// v0.36 `MutatingWebhookConfigurationSorter.ByName`).
pub fn sidecar_configuration_name(ns: &str) -> String {
    format!("{}-sidecar", webhook_configuration_name(ns))
}

/// The policy as the API server's admission webhook for the pods and ReplicaSets of `ns`
/// (which must exist), as a cluster with the policy has it: one `jumppod webhook` for the
/// whole test process, registered for each such namespace by what `jumppod
/// webhook-configuration` prints. Returns once the API server calls it for a pod of `ns`.
pub async fn policy_webhook_for(admin: &Kube, ns: &str) {
    use std::sync::OnceLock;
    static SHARED: OnceLock<Webhook> = OnceLock::new();
    let webhook = tokio::task::spawn_blocking(|| SHARED.get_or_init(Webhook::start))
        .await
        .expect("start the webhook");
    let mut configuration = webhook.configuration("Fail", ns);
    configuration["metadata"]["name"] = json!(webhook_configuration_name(ns));
    Api::<MutatingWebhookConfiguration>::all(admin.client.clone())
        .create(&PostParams::default(), &typed(configuration))
        .await
        .expect("register the webhook");
    // The API server reads webhook configurations through an informer: a moment later, a
    // dry-run pre-#3891 pod comes back with the current labels.
    let name = schema::jump_pod_name("main");
    let legacy: Pod = bare_pod_on(&name, schema::legacy_selector(&name), "node-1");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let pods: Api<Pod> = Api::namespaced(admin.client.clone(), ns);
    let what = format!("the API server to send a dry-run pod of {ns} to the policy's webhook");
    wait_for(&what, || async {
        pods.create(&dry, &legacy).await.ok().filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(schema::INSTANCE_LABEL))
        })
    })
    .await;
}

/// The test's own mutating webhook, a sidecar injector as a cluster may run beside jumppod:
/// it adds a container without resources to every pod labelled `sidecar=yes` of `ns`. A tiny
/// HTTPS server (hyper, rustls) with the control plane's webhook pair; it stops when dropped.
pub struct Sidecar {
    pub addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Sidecar {
    /// The label a pod carries to get the sidecar.
    pub const LABEL: (&'static str, &'static str) = ("sidecar", "yes");

    pub async fn start() -> Sidecar {
        use tokio_rustls::rustls;
        use tokio_rustls::rustls::pki_types::pem::PemObject as _;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let dir = cluster_dir().join("webhook");
        let chain = CertificateDer::pem_file_iter(dir.join("tls.crt"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(dir.join("tls.key")).unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(Sidecar::answer);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Sidecar { addr, task }
    }

    /// Allows the pod with a JSONPatch appending the container.
    async fn answer(
        req: hyper::Request<hyper::body::Incoming>,
    ) -> Result<hyper::Response<http_body_util::Full<bytes::Bytes>>, hyper::Error> {
        use base64::Engine as _;
        use http_body_util::BodyExt as _;
        let body = req.into_body().collect().await?.to_bytes();
        let review: Value = serde_json::from_slice(&body).unwrap_or_default();
        let patch = json!([{"op": "add", "path": "/spec/containers/-",
                            "value": {"name": "sidecar", "image": "busybox"}}]);
        let answer = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": true, "patchType": "JSONPatch",
                "patch": base64::engine::general_purpose::STANDARD.encode(patch.to_string())}});
        Ok(hyper::Response::builder()
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(
                answer.to_string(),
            )))
            .unwrap())
    }

    /// Its MutatingWebhookConfiguration for the pods of `ns` ([`sidecar_configuration_name`]):
    /// called after jumppod's, never again (reinvocationPolicy Never, as jumppod's).
    pub fn configuration(&self, ns: &str) -> MutatingWebhookConfiguration {
        use base64::Engine as _;
        let ca = std::fs::read(cluster_dir().join("webhook/ca.crt")).unwrap();
        typed(json!({
            "metadata": {"name": sidecar_configuration_name(ns)},
            "webhooks": [{
                "name": "sidecar.jumppod.test",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "timeoutSeconds": 10,
                "clientConfig": {"url": format!("https://{}/", self.addr),
                                 "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                "objectSelector": {"matchLabels": {Sidecar::LABEL.0: Sidecar::LABEL.1}},
            }]
        }))
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        self.task.abort();
    }
}
