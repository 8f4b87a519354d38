//! The scenarios that run on both backends from one body (issue 8 §2): the simulator
//! (`scenarios.rs`) and the real control plane (`real_cluster.rs`, feature `real-cluster`).
//! [`Cluster`] is what a scenario may do to either: seed what older releases left, wait for
//! the controllers and the kubelet to settle, read objects, count requests (the simulator's
//! request log; the API server's audit log). Where the two disagree, Kubernetes is right.

use super::*;
use jumppod_host::action::Finding;
use jumppod_host::rbac::{RULES, Rule};
use jumppod_host::resolve;
use jumppod_sim::NodeSpec;

/// The simulator of the RBAC scenario: RBAC enforced; node-1 (the only schedulable node) has no
/// ExternalIP, so `resolve` without `hostname` reads its node, then lists the nodes and finds
/// node-2's.
pub fn rbac_sim_config() -> SimConfig {
    SimConfig {
        rbac: true,
        nodes: vec![
            NodeSpec::new("node-1"),
            NodeSpec::new("node-2")
                .ips("203.0.113.2", "10.0.0.2")
                .taint("dedicated", "other", "NoSchedule"),
        ],
        ..sim_config()
    }
}

/// The user the simulator takes for the ServiceAccount `jumppod rbac` prints.
pub const SA_USER: &str = "system:serviceaccount:dstack:jumppod";

/// The real control plane's user for the RBAC scenario (the others use user-1 to user-7;
/// user-9 is never granted anything).
#[cfg(feature = "real-cluster")]
const RBAC_USER: &str = "user-8";

/// The real control plane's user for rules granted cluster-wide, which would reach every
/// namespace of the RBAC scenario's user.
#[cfg(feature = "real-cluster")]
const CLUSTER_WIDE_USER: &str = "user-1";

/// A backend and the namespace a scenario works in; when dropped, it prints how long the
/// scenario took (`--nocapture` shows it; the test harness names the thread after the test).
pub struct Cluster {
    backend: Backend,
    started: std::time::Instant,
    /// Pods pass through the policy's admission on their way in.
    mutates_pods: bool,
}

enum Backend {
    /// Controllers and the kubelet act only in `settle()`.
    Sim(Sim),
    /// Shared by every real-cluster test: each works in a namespace of its own.
    #[cfg(feature = "real-cluster")]
    Real { kube: Kube, ns: String },
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let backend = if self.is_sim() {
            "simulator"
        } else {
            "real control plane"
        };
        println!(
            "timing: {} on the {backend}: {:.2?}",
            std::thread::current().name().unwrap_or("?"),
            self.started.elapsed()
        );
    }
}

impl Cluster {
    pub async fn sim() -> Cluster {
        Cluster::sim_with(sim_config()).await
    }

    /// The simulator with RBAC enforced ([`rbac_sim_config`]).
    pub async fn sim_with_rbac() -> Cluster {
        Cluster::sim_with(rbac_sim_config()).await
    }

    /// The simulator without the policy's admission (the real control plane of these tests
    /// has no webhook either, except in the webhook's own test).
    pub async fn sim_without_the_policy() -> Cluster {
        Cluster::sim_with(SimConfig {
            admission: None,
            ..sim_config()
        })
        .await
    }

    async fn sim_with(config: SimConfig) -> Cluster {
        Cluster {
            started: std::time::Instant::now(),
            mutates_pods: config.admission.is_some(),
            backend: Backend::Sim(Sim::start(config).await.expect("simulator")),
        }
    }

    /// Whether a pod sent by an older server passes through the policy's mutation on its way
    /// in; where it does not, the test sends it as the mutation leaves it.
    pub fn mutates_pods(&self) -> bool {
        self.mutates_pods
    }

    #[cfg(feature = "real-cluster")]
    pub async fn real(ns: impl Into<String>) -> Cluster {
        Cluster {
            started: std::time::Instant::now(),
            mutates_pods: false,
            backend: Backend::Real {
                kube: cluster::admin().await,
                ns: ns.into(),
            },
        }
    }

    pub fn ns(&self) -> &str {
        match &self.backend {
            Backend::Sim(_) => NS,
            #[cfg(feature = "real-cluster")]
            Backend::Real { ns, .. } => ns,
        }
    }

    pub fn is_sim(&self) -> bool {
        self.as_sim().is_some()
    }

    fn as_sim(&self) -> Option<&Sim> {
        match &self.backend {
            Backend::Sim(sim) => Some(sim),
            #[cfg(feature = "real-cluster")]
            Backend::Real { .. } => None,
        }
    }

    pub async fn kube(&self) -> Kube {
        match &self.backend {
            Backend::Sim(sim) => kube(sim).await,
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, .. } => kube.clone(),
        }
    }

    pub fn config(&self, extra: &str) -> Config {
        config_for(self.ns(), "main", extra)
    }

    pub async fn ensure(&self, config: &Config) -> Result<EnsureReport, HostError> {
        jumppod_host::ensure(&self.kube().await, config, &gate()).await
    }

    pub async fn resolve(&self, config: &Config) -> Result<resolve::ResolveReport, HostError> {
        resolve::resolve(&self.kube().await, config).await
    }

    pub async fn namespace(&self) {
        match &self.backend {
            Backend::Sim(sim) => namespace(sim, NS),
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => cluster::namespace(kube, ns).await,
        }
    }

    /// The bare pod an older release left, in `phase` (Running, Failed as evicted, Succeeded).
    pub async fn seed_bare_pod(&self, phase: &str, current: bool) -> Value {
        match &self.backend {
            Backend::Sim(sim) => seed_bare_pod(sim, phase, current),
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => {
                // Run by the fake kubelet first, then finished the way the kubelet finishes it.
                cluster::bare_pod(kube, ns, current).await;
                match phase {
                    "Running" => {}
                    "Failed" => cluster::evict(kube, ns, NAME).await,
                    other => cluster::set_phase(kube, ns, NAME, other).await,
                }
                self.get("pods", NAME).await.expect("the bare pod")
            }
        }
    }

    /// The Service an older release created on `port`; `current`: with the current selector.
    pub async fn seed_service(&self, port: i32, current: bool) -> Value {
        match &self.backend {
            Backend::Sim(sim) => seed_service(sim, port, current),
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => {
                cluster::service_of(kube, ns, "main", port, current).await;
                self.get("services", SVC).await.expect("the Service")
            }
        }
    }

    /// Until the controllers and the kubelet have done what they will do.
    pub async fn settle(&self) {
        match &self.backend {
            Backend::Sim(sim) => sim.settle().await,
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => cluster::settled(kube, ns).await,
        }
    }

    pub async fn get(&self, resource: &str, name: &str) -> Option<Value> {
        match &self.backend {
            Backend::Sim(sim) => sim.get(resource, Some(NS), name),
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => cluster::get(kube, ns, resource, name).await,
        }
    }

    pub async fn service(&self) -> Value {
        self.get("services", SVC).await.expect("the Service exists")
    }

    pub async fn list(&self, resource: &str) -> Vec<Value> {
        match &self.backend {
            Backend::Sim(sim) => sim.list(resource, Some(NS)),
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => cluster::list(kube, ns, resource).await,
        }
    }

    /// Pods of the namespace that are not finished and not being deleted.
    pub async fn active_pods(&self) -> Vec<Value> {
        self.list("pods")
            .await
            .into_iter()
            .filter(|p| {
                !matches!(p["status"]["phase"].as_str(), Some("Failed" | "Succeeded"))
                    && p["metadata"]["deletionTimestamp"].is_null()
            })
            .collect()
    }

    /// What the kubelet writes when it evicts a pod.
    pub async fn evict(&self, name: &str) {
        match &self.backend {
            Backend::Sim(sim) => sim.evict_pod(NS, name),
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => cluster::evict(kube, ns, name).await,
        }
    }

    /// A client of a user granted the Role, RoleBinding, ClusterRole and ClusterRoleBinding
    /// `jumppod rbac` prints for `rules` (on the simulator the printed ServiceAccount; on the
    /// real control plane its plain user `user-8`, once the authorizer has the rules and lacks
    /// `refused`).
    pub async fn granted(&self, rules: &[Rule], refused: &[(&str, &str, &str)]) -> Kube {
        match &self.backend {
            Backend::Sim(sim) => {
                // The simulator's authorizer reads the objects as they are written.
                let _ = refused;
                for o in jumppod_host::rbac::objects_with(rules, NS, "jumppod") {
                    sim.seed(o);
                }
                kube_at(&sim.kubeconfig_for(SA_USER)).await
            }
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => {
                cluster::grant(kube, rules, ns, RBAC_USER).await;
                cluster::authorized(kube, rules, refused, ns, RBAC_USER).await;
                kube_at(&cluster::cluster_dir().join(format!("users/{RBAC_USER}.kubeconfig"))).await
            }
        }
    }

    /// A client of a user granted only the ClusterRole and ClusterRoleBinding of `rules`.
    pub async fn granted_cluster_wide(
        &self,
        rules: &[Rule],
        refused: &[(&str, &str, &str)],
    ) -> Kube {
        match &self.backend {
            Backend::Sim(sim) => {
                let _ = refused;
                let mut objects = jumppod_host::rbac::objects_with(rules, NS, "jumppod");
                objects.retain(|o| o["kind"] == "ClusterRole" || o["kind"] == "ClusterRoleBinding");
                for o in objects {
                    sim.seed(o);
                }
                kube_at(&sim.kubeconfig_for(SA_USER)).await
            }
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => {
                let user = CLUSTER_WIDE_USER;
                cluster::grant_cluster_wide(kube, rules, ns, user).await;
                cluster::authorized(kube, rules, refused, ns, user).await;
                kube_at(&cluster::cluster_dir().join(format!("users/{user}.kubeconfig"))).await
            }
        }
    }

    /// The address `resolve` finds without `hostname`: node-2's ExternalIP on the simulator,
    /// the fake nodes' 127.0.0.1 on the real control plane.
    pub fn external_ip(&self) -> &'static str {
        if self.is_sim() {
            "203.0.113.2"
        } else {
            "127.0.0.1"
        }
    }

    /// The kubeconfig of a user nobody granted anything (on the simulator, RBAC must be on).
    pub fn nobody_kubeconfig(&self) -> std::path::PathBuf {
        match &self.backend {
            Backend::Sim(sim) => sim.kubeconfig_for("nobody"),
            #[cfg(feature = "real-cluster")]
            Backend::Real { .. } => cluster::cluster_dir().join("users/user-9.kubeconfig"),
        }
    }

    /// The kubeconfig of the backend's admin (the simulator's user).
    pub fn kubeconfig(&self) -> std::path::PathBuf {
        match &self.backend {
            Backend::Sim(sim) => sim.kubeconfig_path().to_owned(),
            #[cfg(feature = "real-cluster")]
            Backend::Real { .. } => cluster::admin_kubeconfig(),
        }
    }

    /// Whether the scenario's namespace exists.
    pub async fn namespace_exists(&self) -> bool {
        match &self.backend {
            Backend::Sim(sim) => sim.get("namespaces", None, NS).is_some(),
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => {
                let api: kube::Api<k8s_openapi::api::core::v1::Namespace> =
                    kube::Api::all(kube.client.clone());
                api.get_opt(ns).await.expect("read the namespace").is_some()
            }
        }
    }

    /// Until `check` holds: on the real control plane, polled while its controllers and its
    /// kubelet act (up to 90 s); on the simulator, whose controllers act only in `settle()`,
    /// once settled.
    pub async fn until<T, F, Fut>(&self, what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        self.until_within(what, Duration::from_secs(90), check)
            .await
    }

    /// [`Cluster::until`] for what the real control plane does slowly by design.
    pub async fn until_within<T, F, Fut>(&self, what: &str, limit: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let _ = limit; // the simulator does not wait
        match &self.backend {
            Backend::Sim(sim) => {
                sim.settle().await;
                check()
                    .await
                    .unwrap_or_else(|| panic!("not so once the simulator settled: {what}"))
            }
            #[cfg(feature = "real-cluster")]
            Backend::Real { .. } => cluster::wait_for_up_to(what, limit, check).await,
        }
    }

    /// Until `ensure` finds what `is` picks, which a controller or the kubelet writes.
    pub async fn until_ensure_finds(&self, config: &Config, what: &str, is: fn(&Finding) -> bool) {
        self.until(what, || async {
            let report = self.ensure(config).await.expect("ensure");
            report.findings.iter().any(is).then_some(())
        })
        .await
    }

    /// Until the object is gone (a graceful deletion ends when the kubelet confirms it).
    pub async fn until_gone(&self, resource: &str, name: &str) {
        let what = format!("{resource}/{name} to be gone");
        self.until(&what, || async {
            self.get(resource, name).await.is_none().then_some(())
        })
        .await
    }

    /// Deletes the object and waits until it is gone.
    pub async fn delete(&self, resource: &str, name: &str) {
        match &self.backend {
            Backend::Sim(sim) => sim.delete(resource, Some(NS), name),
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => cluster::delete(kube, ns, resource, name).await,
        }
        self.until_gone(resource, name).await;
    }

    /// A LimitRange capping each container's cpu at `max`, which the LimitRanger admission
    /// plugin enforces on pods (the simulator plays it too).
    pub async fn cap_container_cpu(&self, max: &str) {
        let range = json!({"apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": "small", "namespace": self.ns()},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": max}}]}});
        match &self.backend {
            Backend::Sim(sim) => {
                sim.create("limitranges", Some(NS), range)
                    .expect("create the LimitRange");
            }
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => cluster::limit_range(kube, ns, range).await,
        }
    }

    /// A pre-#3891 pod on a node whose kubelet stopped answering, deleted: it stays
    /// terminating, not Ready. The real API server keeps a bound pod until its kubelet
    /// confirms the deletion, so there it runs on a node of its own that no kubelet plays
    /// (unschedulable, so that no other test's pod lands on it; `finish` removes it).
    pub async fn seed_stranded_legacy_pod(&self) {
        match &self.backend {
            Backend::Sim(sim) => {
                let mut pod = seed_bare_pod(sim, "Running", false);
                pod["metadata"]["deletionTimestamp"] = json!("2026-11-30T10:00:00Z");
                pod["metadata"]["deletionGracePeriodSeconds"] = json!(30);
                pod["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "False", "reason": "NodeNotReady"}]);
                sim.seed(pod);
            }
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => cluster::stranded_legacy_pod(kube, ns).await,
        }
    }

    /// A node of the scenario's own (on the real control plane, played by the fake kubelet,
    /// and removed by `finish`); its name should start with the namespace.
    pub async fn add_node(&self, node: NodeSpec) {
        match &self.backend {
            Backend::Sim(sim) => sim.add_node(node),
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, ns } => cluster::played_node(kube, ns, node.to_json()).await,
        }
    }

    /// What a cloud's node controller does to a node that went away: delete the Node. Its
    /// pods go with it: at once on the simulator, after the pod GC's 40 s quarantine on the
    /// real control plane.
    pub async fn remove_node(&self, name: &str) {
        match &self.backend {
            Backend::Sim(sim) => sim.remove_node(name),
            #[cfg(feature = "real-cluster")]
            Backend::Real { kube, .. } => cluster::remove_node(kube, name).await,
        }
    }

    /// Leaves nothing behind on the shared real control plane: the namespace, the RBAC
    /// scenario's grants, the nodes it added, a dead node.
    pub async fn finish(self) {
        #[cfg(feature = "real-cluster")]
        if let Backend::Real { kube, ns } = &self.backend {
            cluster::revoke_and_delete(kube, ns, RBAC_USER).await;
            cluster::revoke_and_delete(kube, ns, CLUSTER_WIDE_USER).await;
            cluster::remove_played_nodes(kube, ns).await;
            cluster::remove_dead_node(kube, ns).await;
        }
    }

    /// `verb path` of the requests `f` makes in the namespace.
    pub async fn requests_of<T>(
        &self,
        f: impl std::future::Future<Output = T>,
    ) -> (T, Vec<String>) {
        match &self.backend {
            Backend::Sim(sim) => {
                let (out, records) = requests_of(sim, f).await;
                let lines = records
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.path))
                    .collect();
                (out, lines)
            }
            #[cfg(feature = "real-cluster")]
            Backend::Real { ns, .. } => {
                let audit = cluster::audit();
                let from = audit.mark();
                let out = f.await;
                (out, audit.since(from, ns).await)
            }
        }
    }
}

/// Scenario 1: an empty namespace: namespace, ReplicaSet and Service are created; `resolve` gives
/// host:port once the pod is Ready; then ensure and resolve cost 2 requests each.
pub async fn an_empty_namespace_gets_a_replicaset_and_a_service(cluster: &Cluster) {
    let config = cluster.config("hostname: jump.example.com");
    let report = cluster.ensure(&config).await.unwrap();
    assert_eq!(report.applied.len(), 3, "{report}");
    assert!(report.policy_checked);
    let rs = cluster.get("replicasets", NAME).await.expect("replicaset");
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/instance": NAME})
    );
    let svc = cluster.service().await;
    assert_eq!(
        svc["spec"]["selector"],
        json!({"app.kubernetes.io/instance": NAME})
    );
    assert_eq!(svc["spec"]["type"], "NodePort");

    // Before the kubelet has run the pod: not ready, a clear error. Only the simulator can
    // hold its kubelet back; a real one may have run the pod already.
    if cluster.is_sim() {
        let err = cluster.resolve(&config).await.unwrap_err();
        assert!(matches!(err, HostError::NotReady(_)), "{err}");
    }

    cluster.settle().await;
    let pods = cluster.active_pods().await;
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0]["status"]["qosClass"], "Guaranteed");
    let (proxy, requests) = cluster
        .requests_of(async { cluster.resolve(&config).await.unwrap() })
        .await;
    assert_eq!(proxy.proxy.hostname, "jump.example.com");
    assert_eq!(i64::from(proxy.proxy.port), node_port(&svc));
    assert_eq!(proxy.proxy.username, "root");
    assert!(!proxy.proxy.bare);
    assert_eq!(requests.len(), 2, "resolve: {requests:#?}");

    let (report, requests) = cluster.requests_of(cluster.ensure(&config)).await;
    let report = report.unwrap();
    assert!(report.applied.is_empty(), "{report}");
    assert!(!report.policy_checked, "nothing to write, nothing to check");
    assert_eq!(requests.len(), 2, "steady-state ensure: {requests:#?}");
}

/// Scenario 2: a running bare pod with the current labels (a release after #3891): the ReplicaSet
/// adopts it, no second pod is started, the Service is kept.
pub async fn a_running_bare_pod_with_current_labels_is_adopted(cluster: &Cluster) {
    cluster.namespace().await;
    let bare = cluster.seed_bare_pod("Running", true).await;
    let svc = cluster.seed_service(30060, true).await;
    let config = cluster.config("hostname: h");
    let report = cluster.ensure(&config).await.unwrap();
    assert!(
        report.findings.contains(&Finding::BarePodAdoptable {
            pod: NAME.into(),
            adopted: false
        }),
        "{report}"
    );
    cluster.settle().await;
    let pods = cluster.active_pods().await;
    assert_eq!(pods.len(), 1, "no second pod: {pods:#?}");
    assert_eq!(pods[0]["metadata"]["name"], NAME);
    assert_eq!(uid(&pods[0]), uid(&bare), "the same pod, adopted");
    let owner = &pods[0]["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "ReplicaSet");
    assert_eq!(owner["controller"], true);
    assert_eq!(
        uid(&cluster.service().await),
        uid(&svc),
        "the Service is kept"
    );
    let proxy = cluster.resolve(&config).await.unwrap().proxy;
    assert_eq!((proxy.pod.as_str(), proxy.port), (NAME, 30060));
}

/// Scenario 3: a finished bare pod (Evicted, or Succeeded): deleted; the ReplicaSet's pod takes over.
pub async fn a_finished_bare_pod_is_deleted(cluster: &Cluster, phase: &str, port: i32) {
    cluster.namespace().await;
    let legacy = cluster.seed_bare_pod(phase, true).await;
    cluster.seed_service(port, true).await;
    let config = cluster.config("hostname: h");
    let report = cluster.ensure(&config).await.unwrap();
    assert!(
        report.applied.iter().any(|a| a
            .action
            .to_string()
            .starts_with(&format!("delete pod {NAME}"))),
        "{report}"
    );
    cluster.settle().await;
    let gone = cluster.get("pods", NAME).await;
    assert!(
        gone.is_none_or(|p| uid(&p) != uid(&legacy)),
        "the finished pod is deleted"
    );
    let proxy = cluster.resolve(&config).await.unwrap().proxy;
    assert!(proxy.pod.starts_with(&format!("{NAME}-")), "{proxy:?}");
    assert_eq!(proxy.port, port);
}

/// Scenario 4: a running pre-#3891 pod with its old-selector Service on NodePort N: left alone, not
/// adopted; `resolve` falls back to it; once it is evicted, `ensure` deletes it and recreates
/// the Service with the current selector on N.
pub async fn a_pre_3891_pod_is_left_alone_then_its_service_recreated(cluster: &Cluster) {
    cluster.namespace().await;
    let legacy = cluster.seed_bare_pod("Running", false).await;
    let old_svc = cluster.seed_service(30063, false).await;
    let config = cluster.config("hostname: h");

    let report = cluster.ensure(&config).await.unwrap();
    assert_eq!(report.applied.len(), 1, "only the ReplicaSet: {report}");
    assert!(report.findings.contains(&Finding::LegacyServiceKept {
        service: SVC.into(),
        node_port: Some(30063)
    }));
    cluster.settle().await;
    let pod = cluster.get("pods", NAME).await.expect("left alone");
    assert_eq!(uid(&pod), uid(&legacy));
    assert!(
        pod["metadata"]["ownerReferences"].is_null(),
        "a pre-#3891 pod is not adopted"
    );
    assert_eq!(uid(&cluster.service().await), uid(&old_svc));
    let proxy = cluster.resolve(&config).await.unwrap().proxy;
    assert!(
        proxy.bare,
        "the Service still routes to the legacy pod: {proxy:?}"
    );
    assert_eq!((proxy.pod.as_str(), proxy.port), (NAME, 30063));

    // A second ensure changes nothing while the legacy pod runs.
    let report = cluster.ensure(&config).await.unwrap();
    assert!(report.applied.is_empty(), "{report}");

    cluster.evict(NAME).await;
    let report = cluster.ensure(&config).await.unwrap();
    let actions: Vec<String> = report
        .applied
        .iter()
        .map(|a| a.action.to_string())
        .collect();
    assert_eq!(actions.len(), 3, "{report}");
    assert!(
        actions[0].starts_with(&format!("delete pod {NAME}")),
        "{report}"
    );
    assert!(
        actions[1].starts_with(&format!("delete service {SVC}")),
        "{report}"
    );
    assert!(
        actions[2].contains("on NodePort 30063 (kept: running jobs use it)"),
        "{report}"
    );
    let svc = cluster.service().await;
    assert_ne!(uid(&svc), uid(&old_svc), "recreated");
    assert_eq!(
        svc["spec"]["selector"],
        json!({"app.kubernetes.io/instance": NAME})
    );
    assert_eq!(node_port(&svc), 30063, "the same NodePort");
    let proxy = cluster.resolve(&config).await.unwrap().proxy;
    assert_eq!(proxy.port, 30063);
    assert!(!proxy.bare);
}

/// Scenario 5: a finished pre-#3891 pod: `resolve` fails at once with a clear error, in 3 requests.
pub async fn a_finished_pre_3891_pod_makes_resolve_fail_at_once(cluster: &Cluster) {
    cluster.namespace().await;
    cluster.seed_bare_pod("Failed", false).await;
    cluster.seed_service(30064, false).await;
    let config = cluster.config("hostname: h");
    let (result, requests) = cluster.requests_of(cluster.resolve(&config)).await;
    let err = result.unwrap_err();
    let text = err.to_string();
    assert_eq!(err.exit_code(), 4);
    assert!(text.contains("has finished (Failed, Evicted)"), "{text}");
    assert!(
        text.contains("never replaced") && text.contains("jumppod ensure"),
        "{text}"
    );
    assert_eq!(
        requests.len(),
        3,
        "pods, service, then the legacy pod: {requests:#?}"
    );
}

/// Scenario 6: the ReplicaSet's pod evicted: replaced; `resolve` picks the ready one; the NodePort is
/// unchanged; the evicted pod stays Failed and `ensure` leaves it (it did not name it).
pub async fn an_evicted_replicaset_pod_is_replaced_on_the_same_node_port(cluster: &Cluster) {
    let config = cluster.config("hostname: h");
    cluster.ensure(&config).await.unwrap();
    cluster.settle().await;
    let before = cluster.resolve(&config).await.unwrap().proxy;
    cluster.evict(&before.pod).await;
    cluster.settle().await;
    let after = cluster.resolve(&config).await.unwrap().proxy;
    assert_ne!(after.pod, before.pod, "a replacement");
    assert_eq!(after.port, before.port);
    assert_eq!(cluster.active_pods().await.len(), 1);
    let report = cluster.ensure(&config).await.unwrap();
    assert!(report.applied.is_empty(), "{report}");
}

/// A label and taint that keep a scenario's pods on the nodes it added, and other tests'
/// pods off them.
const POOL: &str = "jumppod.test/pool";

/// The configuration lines that put the jump pod on the nodes of `pool`.
fn on_pool(pool: &str) -> String {
    format!(
        "node_selector: {{{POOL}: {pool}}}\ntolerations: [{{key: {POOL}, operator: Equal, value: {pool}, effect: NoSchedule}}]"
    )
}

/// Scenario 6b: a node selector and tolerations place the pod on the scenario's own two
/// nodes, and `resolve` without `hostname` gives its node's ExternalIP. The node goes away:
/// the pod is replaced on the other node (on the real control plane once the pod GC has
/// removed the orphaned pod, after its 40 s quarantine) and the NodePort is unchanged.
pub async fn the_replicasets_pod_is_replaced_after_its_node_is_removed(cluster: Cluster) {
    let pool = cluster.ns().to_owned();
    for (n, ip) in [("a", "203.0.113.11"), ("b", "203.0.113.12")] {
        let node = NodeSpec::new(&format!("{pool}-{n}"))
            .ips(ip, "10.0.0.1")
            .label(POOL, &pool)
            .taint(POOL, &pool, "NoSchedule");
        cluster.add_node(node).await;
    }
    let config = cluster.config(&on_pool(&pool));
    cluster.ensure(&config).await.expect("ensure");
    cluster.settle().await;
    let before = cluster.resolve(&config).await.expect("resolve").proxy;
    let pod = cluster.get("pods", &before.pod).await.expect("the pod");
    let node = pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let ip = |node: &str| {
        if node.ends_with("-a") {
            "203.0.113.11"
        } else {
            "203.0.113.12"
        }
    };
    assert!(node.starts_with(&pool), "on a node of the pool: {node}");
    assert_eq!(before.hostname, ip(&node), "its node's ExternalIP");

    cluster.remove_node(&node).await;
    let after = cluster
        .until_within(
            "the replacement pod, once the orphan is collected",
            Duration::from_secs(150),
            || async {
                let proxy = cluster.resolve(&config).await.ok()?.proxy;
                (proxy.pod != before.pod).then_some(proxy)
            },
        )
        .await;
    let other = if node.ends_with("-a") { "-b" } else { "-a" };
    assert_eq!(after.hostname, ip(other), "on the other node");
    assert_eq!(after.port, before.port, "the same NodePort");
    assert_eq!(cluster.active_pods().await.len(), 1);
    cluster.finish().await;
}

/// Scenario 7d: `gpu_tolerations`, as dstack sets it on clusters whose every node is tainted:
/// on a GPU node tainted as the NVIDIA device plugin's docs advise (the only node the
/// scenario's node selector allows), a pod without the tolerations is unschedulable; with
/// them it runs there, and status shows them.
pub async fn gpu_tolerations_let_the_jump_pod_run_on_tainted_gpu_nodes(cluster: Cluster) {
    let pool = cluster.ns().to_owned();
    let gpu = NodeSpec::new(&format!("{pool}-gpu"))
        .ips("203.0.113.21", "10.0.0.21")
        .label(POOL, &pool)
        .taint("nvidia.com/gpu", "", "NoSchedule");
    cluster.add_node(gpu).await;
    let selector = format!("hostname: h\nnode_selector: {{{POOL}: {pool}}}");
    let plain = cluster.config(&selector);
    cluster.ensure(&plain).await.expect("ensure");
    let unschedulable = |f: &Finding| matches!(f, Finding::Unschedulable { .. });
    cluster
        .until_ensure_finds(
            &plain,
            "without the tolerations no node takes the pod",
            unschedulable,
        )
        .await;

    let tolerant = config_for(
        cluster.ns(),
        "tolerant",
        &format!("{selector}\ngpu_tolerations: true"),
    );
    cluster.ensure(&tolerant).await.expect("ensure");
    cluster.settle().await;
    cluster.resolve(&tolerant).await.expect("resolve");
    let status = jumppod_host::status::status(&cluster.kube().await, &tolerant)
        .await
        .expect("status");
    let text = status.to_string();
    assert!(
        text.contains(
            "tolerations: nvidia.com/gpu Exists NoSchedule, amd.com/gpu Exists NoSchedule"
        ),
        "{text}"
    );
    cluster.finish().await;
}

/// Scenario 7: a jump pod no node can hold: ensure and resolve say so with the scheduler's message.
pub async fn an_unschedulable_jump_pod_is_reported_with_the_schedulers_message(cluster: &Cluster) {
    // Three nodes of 4 cpus on both backends.
    let config = cluster.config("hostname: h\ncpu: '64'\nmemory: 1Gi");
    cluster.ensure(&config).await.unwrap();
    cluster.settle().await;
    let report = cluster.ensure(&config).await.unwrap();
    let Some(Finding::Unschedulable {
        reason, message, ..
    }) = report
        .findings
        .iter()
        .find(|f| matches!(f, Finding::Unschedulable { .. }))
    else {
        panic!("no unschedulable finding: {report}")
    };
    assert_eq!(reason, "Unschedulable");
    assert!(
        message.contains("0/3 nodes are available") && message.contains("Insufficient cpu"),
        "{message}"
    );
    let err = cluster.resolve(&config).await.unwrap_err();
    assert_eq!(err.exit_code(), 4);
    assert!(err.to_string().contains("Insufficient cpu"), "{err}");
}

/// Scenario 7b: the ReplicaSet controller cannot create the pod (a LimitRange caps cpu below
/// the jump pod's): ensure, resolve and status report the ReplicaFailure condition's message
/// (FailedCreate, the LimitRanger's words) instead of "up to date" and "run jumppod ensure".
pub async fn pods_the_replicaset_cannot_create_are_reported(cluster: &Cluster) {
    cluster.namespace().await;
    cluster.cap_container_cpu("100m").await;
    let config = cluster.config("hostname: h");
    cluster.ensure(&config).await.expect("the first ensure");
    let refused = |f: &Finding| matches!(f, Finding::PodsRefused { .. });
    cluster
        .until_ensure_finds(&config, "the ReplicaSet's ReplicaFailure", refused)
        .await;
    reported_by_every_command(
        &cluster.kube().await,
        &config,
        refused,
        &[
            "cannot create its pod (FailedCreate)",
            "is forbidden: maximum cpu usage per Container is 100m, but limit is 500m",
        ],
    )
    .await;
}

/// Scenario 7c: the kubelet cannot pull an image whose registry does not resolve (a host under
/// `.invalid`): ensure, resolve and status report the container's ImagePullBackOff and the
/// runtime's message, not just "Pending".
pub async fn an_image_the_kubelet_cannot_pull_is_reported_with_its_message(cluster: &Cluster) {
    let config = cluster.config("hostname: h\nimage: registry.invalid/sshd:1");
    cluster.ensure(&config).await.expect("the first ensure");
    let waiting = |f: &Finding| matches!(f, Finding::ContainerWaiting { .. });
    cluster
        .until_ensure_finds(&config, "the kubelet's ImagePullBackOff", waiting)
        .await;
    reported_by_every_command(
        &cluster.kube().await,
        &config,
        waiting,
        &[
            "is waiting: ImagePullBackOff",
            "lookup registry.invalid: no such host",
        ],
    )
    .await;
}

/// Scenario 7e: a pre-#3891 pod left terminating and not Ready on a node that stopped
/// answering (it may stay so for hours) does not pin the old Service: ensure replaces it with
/// the current selector on the same NodePort, and leaves the pod itself alone.
pub async fn a_pre_3891_pod_stranded_on_a_dead_node_does_not_pin_the_old_service(cluster: Cluster) {
    cluster.namespace().await;
    cluster.seed_stranded_legacy_pod().await;
    cluster.seed_service(30024, false).await;
    let report = cluster.ensure(&cluster.config("")).await.expect("ensure");
    assert!(
        report
            .findings
            .contains(&Finding::LegacyPodStranded { pod: NAME.into() }),
        "{report}"
    );
    let svc = cluster.service().await;
    assert_eq!(node_port(&svc), 30024, "the same NodePort");
    assert_eq!(
        svc["spec"]["selector"],
        json!({"app.kubernetes.io/instance": NAME}),
        "the current selector"
    );
    let pod = cluster
        .get("pods", NAME)
        .await
        .expect("the stranded pod is left alone");
    assert!(pod["metadata"]["deletionTimestamp"].is_string());
    cluster.finish().await;
}

/// Scenario 12: a configuration below the floor is rejected by the policy before any write,
/// naming the field, the value and the floor.
pub async fn a_config_below_the_floor_is_rejected_by_the_policy_before_any_write(
    cluster: &Cluster,
) {
    let (result, requests) = cluster
        .requests_of(cluster.ensure(&cluster.config("cpu: 50m")))
        .await;
    let err = result.unwrap_err();
    assert_eq!(err.exit_code(), 3);
    let text = err.to_string();
    assert!(
        text.contains("cpu") && text.contains("50m") && text.contains("100m"),
        "{text}"
    );
    assert!(text.contains("nothing was written"), "{text}");
    let writes: Vec<&String> = requests.iter().filter(|r| is_write(r)).collect();
    assert_eq!(writes, Vec::<&String>::new());
    assert!(!cluster.namespace_exists().await);
}

/// Drift: a ReplicaSet with older resources is reported with kubectl commands, not rewritten;
/// the steady state still costs 2 reads.
pub async fn a_replicaset_with_older_resources_is_reported_not_rewritten(cluster: &Cluster) {
    cluster
        .ensure(&cluster.config("cpu: 250m"))
        .await
        .expect("the first ensure");
    cluster.settle().await;
    let (report, requests) = cluster
        .requests_of(cluster.ensure(&cluster.config("")))
        .await;
    let report = report.expect("ensure");
    assert!(requests.len() <= 2, "{requests:#?}");
    assert!(!requests.iter().any(|r| is_write(r)), "{requests:#?}");
    let text = report.to_string();
    assert!(
        text.contains("resources.requests.cpu: found 250m, configured 500m"),
        "{text}"
    );
    let command = format!(
        "kubectl -n {} set resources replicaset {NAME}",
        cluster.ns()
    );
    assert!(text.contains(&command), "{text}");
}

/// Scenario 11e: nothing deleted by mistake. A finished bare pod replaced under the same name
/// between observe and apply survives: the delete carries the uid it was decided on, and the
/// refusal (the real registry's 409 `the UID in the precondition ... does not match`) is taken
/// for "replaced meanwhile" at once, not retried.
pub async fn a_pod_replaced_between_observe_and_apply_is_left_alone(cluster: &Cluster) {
    use jumppod_host::action::Action;
    use jumppod_host::apply::{Outcome, apply};
    use jumppod_host::manifest::Desired;
    use jumppod_host::{observe, plan};
    cluster.namespace().await;
    cluster.seed_bare_pod("Failed", true).await;
    let config = cluster.config("");
    let kube = cluster.kube().await;
    let observed = observe::for_ensure(&kube, &config).await.expect("observe");
    let planned = plan::plan(&config, &Desired::from_config(&config), &observed);
    let deletes_the_pod = |a: &Action| matches!(a, Action::DeletePod { .. });
    assert!(
        planned.actions.iter().any(deletes_the_pod),
        "{:?}",
        planned.actions
    );
    // Meanwhile an older dstack recreates its pod under the same name.
    cluster.delete("pods", NAME).await;
    let replacement = cluster.seed_bare_pod("Running", true).await;
    let (applied, requests) = cluster
        .requests_of(apply(&kube, cluster.ns(), &planned.actions))
        .await;
    let applied = applied.expect("apply");
    let delete = applied
        .iter()
        .find(|a| deletes_the_pod(&a.action))
        .expect("the delete was tried");
    assert_eq!(delete.outcome, Outcome::ReplacedMeanwhile);
    let pod_deletes = requests
        .iter()
        .filter(|r| r.to_lowercase().starts_with("delete ") && r.contains("/pods/"))
        .count();
    assert_eq!(
        pod_deletes, 1,
        "a refused precondition is not retried: {requests:#?}"
    );
    let pod = cluster
        .get("pods", NAME)
        .await
        .expect("the new pod survives");
    assert_eq!(pod["metadata"]["uid"], replacement["metadata"]["uid"]);
}

/// Scenario 8a: 50 concurrent `ensure` calls: one ReplicaSet, one Service, one pod, no error.
pub async fn fifty_concurrent_ensures_make_one_of_each(cluster: &Cluster) {
    let config = cluster.config("");
    let gate = gate();
    let kube = cluster.kube().await;
    let calls = (0..50).map(|_| jumppod_host::ensure(&kube, &config, &gate));
    let (results, requests) = cluster.requests_of(futures::future::join_all(calls)).await;
    for r in &results {
        assert!(r.is_ok(), "{:?}", r.as_ref().err().map(ToString::to_string));
    }
    assert_eq!(cluster.list("replicasets").await.len(), 1);
    assert_eq!(cluster.list("services").await.len(), 1);
    cluster.settle().await;
    assert_eq!(cluster.active_pods().await.len(), 1);
    if let Some(sim) = cluster.as_sim() {
        let created = sim.count(|r| r.method == "POST" && r.status == 201);
        assert_eq!(
            created, 3,
            "namespace, replicaset, service created once each"
        );
    }
    assert!(
        requests.len() >= 100,
        "at least 2 reads per call: {}",
        requests.len()
    );
}

/// Scenario 8b: two hosts racing through the upgrade path: one Service on the old NodePort, no error.
pub async fn two_hosts_racing_through_the_upgrade_keep_one_service_on_the_old_port(
    cluster: &Cluster,
) {
    cluster.namespace().await;
    cluster.seed_bare_pod("Failed", false).await;
    cluster.seed_service(30065, false).await;
    let config = cluster.config("");
    let (a, b) = (cluster.kube().await, cluster.kube().await);
    let (gate_a, gate_b) = (gate(), gate());
    let (ra, rb) = tokio::join!(
        jumppod_host::ensure(&a, &config, &gate_a),
        jumppod_host::ensure(&b, &config, &gate_b)
    );
    ra.unwrap();
    rb.unwrap();
    let services = cluster.list("services").await;
    assert_eq!(services.len(), 1);
    assert_eq!(node_port(&services[0]), 30065);
    assert_eq!(
        services[0]["spec"]["selector"],
        json!({"app.kubernetes.io/instance": NAME})
    );
    assert_eq!(cluster.list("replicasets").await.len(), 1);
}

/// The service registry allocates NodePorts before storage finds a name taken (found on the
/// real control plane by 8b, then taught to the simulator): a Service created again on the
/// NodePort its namesake holds is refused for the port (422), on a free port for the name
/// (409, the port released again). `apply` takes the 422 of its twin for "already existed".
pub async fn a_service_created_again_is_refused_for_its_port_before_its_name(cluster: &Cluster) {
    use jumppod_host::action::Action;
    use jumppod_host::apply::{Outcome, apply};
    use jumppod_host::manifest;
    use k8s_openapi::api::core::v1::Service;
    use kube::Api;
    use kube::api::PostParams;

    cluster.namespace().await;
    cluster.seed_service(30066, true).await;
    let config = cluster.config("");
    let kube = cluster.kube().await;
    let api: Api<Service> = Api::namespaced(kube.client.clone(), cluster.ns());
    let again = manifest::service(&config, Some(30066));
    let status = |e: kube::Error| match e {
        kube::Error::Api(s) => (s.code, s.reason, s.message),
        other => panic!("not an API error: {other}"),
    };
    let (code, reason, message) = status(
        api.create(&PostParams::default(), &again)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
    assert!(
        message.contains("provided port is already allocated"),
        "{message}"
    );

    let elsewhere = manifest::service(&config, Some(30067));
    let (code, reason, message) = status(
        api.create(&PostParams::default(), &elsewhere)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"), "{message}");
    let mut other = manifest::service(&config, Some(30067));
    other.metadata.name = Some("another-service".into());
    api.create(&PostParams::default(), &other)
        .await
        .expect("the port of the refused create is free again");

    let applied = apply(
        &kube,
        cluster.ns(),
        &[Action::CreateService {
            service: Box::new(again),
            keeps_port: Some(30066),
        }],
    )
    .await
    .unwrap();
    assert_eq!(applied[0].outcome, Outcome::AlreadyExisted);
}

/// Scenario 9: an older dstack server still running jobs after the upgrade, as it really
/// behaves: its `run_job` reads the jump pod by exact name, never finds the ReplicaSet's pod,
/// and on every job deletes the Service, creates it again (on a NodePort the cluster allocates
/// unless its `proxy_jump.port` is set) and creates a bare pod `<name>`, then looks for that pod
/// by name and fails. The policy's mutation gives the bare pod the current labels, so the
/// ReplicaSet controller adopts it and deletes it as surplus (it keeps its older, ready pod);
/// `ensure` reports the fight and, for a pre-#3891 server, puts the current selector back on
/// the recreated Service's NodePort.
pub async fn an_older_server_in_the_loop_recreates_the_service_and_fails_each_job(
    cluster: &Cluster,
    release: Release,
    port: Option<i32>,
) {
    let config = cluster.config(&match port {
        Some(p) => format!("hostname: h\nport: {p}"),
        None => "hostname: h".to_owned(),
    });
    cluster.ensure(&config).await.expect("ensure");
    cluster.settle().await;
    let first_pod = cluster.resolve(&config).await.expect("resolve").proxy.pod;
    if !cluster.is_sim() {
        // The ReplicaSet controller ranks two ready pods by the base-2 logarithm of how long
        // each has been ready, at the seconds of their timestamps (LogarithmicScaleDown): a
        // pod ready for 1 s and one ready for 1.5 s are a coin toss (by uid), so it may keep
        // the older server's pod. Let the ReplicaSet's pod be ready twice as long as the
        // older server's can be when the controller compares them, as on a cluster where the
        // jump pod has run for more than a few seconds.
        tokio::time::sleep(Duration::from_secs(6)).await;
    }
    let old = OldServer {
        namespace: cluster.ns().into(),
        release,
        port,
        as_the_policy_mutates: !cluster.mutates_pods(),
    };
    let kube = cluster.kube().await;
    let mut ports = vec![node_port(&cluster.service().await) as i32];
    for job in 0..3 {
        let started = std::time::Instant::now();
        let done = old_server_job(&kube, &old, || cluster.until_gone("pods", NAME)).await;
        println!(
            "old server job {job}: the surplus pod gone after {:?}",
            started.elapsed()
        );
        assert!(!done.untouched, "job {job}: {done:?}");
        assert!(done.service_deleted, "job {job}: {done:?}");
        assert!(
            matches!(done.pod_created, Some(Ok(_))),
            "job {job}: {done:?}"
        );
        assert!(
            done.final_read.is_none(),
            "job {job}: the bare pod was deleted as surplus: {done:?}"
        );
        assert!(!done.found_running(), "so the older server's job fails");
        let recreated_on = done
            .service_recreated
            .clone()
            .unwrap()
            .expect("the Service recreated");
        match port {
            Some(p) => assert_eq!(
                recreated_on, p,
                "a fixed proxy_jump.port keeps the NodePort"
            ),
            None => assert!(DYNAMIC_NODE_PORTS.contains(&recreated_on), "{recreated_on}"),
        }
        // The churn of one job: the old server's pod, created and deleted; the ReplicaSet
        // kept its ready pod and created none (a replacement would have another name).
        let active = cluster.active_pods().await;
        assert_eq!(active.len(), 1, "{active:#?}");
        assert_eq!(active[0]["metadata"]["name"], first_pod.as_str());

        let report = cluster.ensure(&config).await.expect("ensure");
        let fight = report
            .findings
            .iter()
            .find(|f| matches!(f, Finding::OlderServerFight { .. }))
            .unwrap_or_else(|| panic!("{report}"));
        if let Some(p) = port {
            let advice = format!("keep proxy_jump.port: {p} on every server");
            assert!(fight.to_string().contains(&advice), "{fight}");
        }
        let svc = cluster.service().await;
        assert_eq!(
            svc["spec"]["selector"],
            json!({"app.kubernetes.io/instance": NAME}),
            "ensure leaves the current selector: {report}"
        );
        let kept = format!("on NodePort {recreated_on} (kept");
        let rewritten = report
            .applied
            .iter()
            .any(|a| a.action.to_string().contains(&kept));
        assert_eq!(rewritten, release == Release::Pre3891, "{report}");
        assert_eq!(
            node_port(&svc) as i32,
            recreated_on,
            "on the NodePort the old server's Service got"
        );
        cluster.settle().await;
        let proxy = cluster.resolve(&config).await.expect("resolve").proxy;
        assert_eq!(
            (proxy.pod.as_str(), proxy.port),
            (first_pod.as_str(), recreated_on)
        );
        ports.push(recreated_on);
    }
    let distinct: std::collections::BTreeSet<i32> = ports.iter().copied().collect();
    match port {
        Some(_) => assert_eq!(distinct.len(), 1, "{ports:?}"),
        // Each job allocates a new NodePort: running jobs lose their proxy each time.
        None => assert!(distinct.len() > 1, "{ports:?}"),
    }
}

/// The NodePorts the allocator hands out when none is asked for: since
/// ServiceNodePortStaticSubrange (GA in 1.29) it picks at random above the static band kept
/// for ports asked for by number, `min(max(16, size/32), 128)` = 86 ports of 30000-32767.
pub const DYNAMIC_NODE_PORTS: std::ops::RangeInclusive<i32> = 30086..=32767;

/// Scenario 9b: without the policy a pre-#3891 server's bare pod keeps its old labels: the
/// ReplicaSet controller neither adopts nor deletes it, so it runs beside the ReplicaSet's pod
/// (two pods), its Service routes to it, and the server's next jobs find both by name and touch
/// nothing. `ensure` keeps the old Service while that pod runs and reports the fight; once the
/// pod is gone the Service gets the current selector on the same NodePort.
pub async fn without_the_policy_a_pre_3891_servers_pod_runs_beside_the_replicasets(
    cluster: &Cluster,
) {
    assert!(!cluster.mutates_pods(), "a backend without the policy");
    let config = cluster.config("hostname: h");
    cluster.ensure(&config).await.expect("ensure");
    cluster.settle().await;
    let old = OldServer {
        namespace: cluster.ns().into(),
        release: Release::Pre3891,
        port: None,
        as_the_policy_mutates: false,
    };
    let kube = cluster.kube().await;
    let first = old_server_job(&kube, &old, || async {
        cluster.settle().await;
        // Give the real ReplicaSet controller time to act, if it would.
        if !cluster.is_sim() {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
    .await;
    assert!(first.found_running(), "its pod runs beside: {first:?}");
    let bare = first.final_read.clone().unwrap();
    assert_eq!(
        jumppod_host::objects::controller_of(&bare),
        None,
        "not adopted"
    );
    let port = first.node_port_after().unwrap();
    assert_ne!(Some(port), first.node_port_before);
    assert_eq!(cluster.active_pods().await.len(), 2);
    for _ in 0..2 {
        let again = old_server_job(&kube, &old, || cluster.settle()).await;
        assert!(again.untouched && again.found_running(), "{again:?}");
    }
    let report = cluster.ensure(&config).await.expect("ensure");
    assert!(report.applied.is_empty(), "{report}");
    assert!(
        report
            .findings
            .iter()
            .any(|f| matches!(f, Finding::LegacyPodRunning { .. })),
        "{report}"
    );
    let fight = report
        .findings
        .iter()
        .find(|f| matches!(f, Finding::OlderServerFight { .. }))
        .unwrap_or_else(|| panic!("{report}"));
    let text = fight.to_string();
    assert!(
        report.to_string().contains(&format!("warning: {text}")),
        "ensure prints it as a warning: {report}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert!(
        json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "olderServerFight" && f["nodePort"] == port),
        "ensure -o json: {json:#}"
    );
    assert!(text.contains("with the pre-#3891 selector"), "{text}");
    assert!(
        text.contains("a bare pod dstack-main-ssh-jump-pod (pre-#3891 labels)"),
        "{text}"
    );
    assert!(
        report.findings.contains(&Finding::LegacyServiceKept {
            service: SVC.into(),
            node_port: Some(port)
        }),
        "{report}"
    );
    let status = jumppod_host::status::status(&kube, &config)
        .await
        .expect("status");
    assert_eq!(status.pods.len(), 2, "{status}");
    assert!(
        status
            .to_string()
            .contains("finding: an older dstack server is running jobs"),
        "{status}"
    );
    let json = serde_json::to_value(&status).unwrap();
    assert!(
        json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "olderServerFight"),
        "{json:#}"
    );

    // The old server is stopped and its pod goes: the Service is repaired on the same port.
    cluster.delete("pods", NAME).await;
    let report = cluster.ensure(&config).await.expect("ensure");
    cluster.settle().await;
    let svc = cluster.service().await;
    assert_eq!(
        svc["spec"]["selector"],
        json!({"app.kubernetes.io/instance": NAME}),
        "{report}"
    );
    assert_eq!(node_port(&svc) as i32, port);
    let proxy = cluster.resolve(&config).await.expect("resolve").proxy;
    assert_eq!(proxy.port, port);
    assert_eq!(cluster.active_pods().await.len(), 1);
}

/// Scenario 10's flow, every verb of the printed rules in it: a first ensure of project
/// `fresh` (get replicasets, services, namespaces, pods; list pods; create replicasets,
/// services), the upgrade of project `main` (delete pods, delete services), a user's key added,
/// another added, one removed (get, create and patch secrets), and `resolve` without a hostname
/// (get nodes; list them where the pod's node has no ExternalIP).
pub async fn rbac_flow(cluster: &Cluster, kube: &Kube) -> Result<(), HostError> {
    let fresh = config_for(cluster.ns(), "fresh", SMALL);
    jumppod_host::ensure(kube, &fresh, &gate()).await?;
    jumppod_host::ensure(kube, &cluster.config(SMALL), &gate()).await?;
    keys_flow(kube, &fresh).await?;
    cluster.settle().await;
    let proxy = resolve::resolve(kube, &fresh).await?.proxy;
    assert_eq!(proxy.hostname, cluster.external_ip());
    Ok(())
}

/// Scenario 10: the flow works with exactly the printed rules, and `status` too; the old
/// Service is replaced on its NodePort.
pub async fn the_printed_rules_are_enough(cluster: &Cluster) {
    cluster.namespace().await;
    cluster.seed_bare_pod("Failed", false).await;
    cluster.seed_service(30068, false).await;
    let user = cluster.granted(RULES, &[]).await;
    rbac_flow(cluster, &user).await.unwrap();
    assert_eq!(node_port(&cluster.service().await), 30068);
    jumppod_host::status::status(&user, &cluster.config(SMALL))
        .await
        .unwrap();
}

/// Scenario 10 without any RBAC object: the first request is forbidden (exit 5), and the
/// error says what to grant. On the simulator RBAC must be on.
pub async fn without_rbac_objects_the_first_request_is_forbidden_and_says_what_to_grant(
    cluster: &Cluster,
) {
    cluster.namespace().await;
    cluster.seed_bare_pod("Failed", false).await;
    cluster.seed_service(30069, false).await;
    let nobody = kube_at(&cluster.nobody_kubeconfig()).await;
    let err = rbac_flow(cluster, &nobody).await.unwrap_err();
    assert_eq!(err.exit_code(), 5, "{err}");
    let way_out = format!("jumppod rbac --namespace {}", cluster.ns());
    assert!(err.to_string().contains(&way_out), "{err}");
}

/// Scenario 10: a RoleBinding cannot exist in a namespace that does not exist, so `namespaces
/// create` is needed when the namespaced rules are granted cluster-wide (a ClusterRoleBinding):
/// with it `ensure` makes the namespace; without it the error names the verb and nothing is
/// made. Each case needs a fresh backend (the cases, one after the other: the real control
/// plane has one user for cluster-wide rules).
pub async fn namespaces_create_is_needed_for_a_namespace_that_does_not_exist(
    cluster: Cluster,
    with_create: bool,
) {
    let rules = if with_create {
        RULES.to_vec()
    } else {
        without("create", "namespaces")
    };
    let cluster_wide: Vec<Rule> = rules
        .iter()
        .map(|r| Rule {
            cluster: true,
            ..*r
        })
        .collect();
    let refused: &[(&str, &str, &str)] = if with_create {
        &[]
    } else {
        &[("", "namespaces", "create")]
    };
    let kube = cluster.granted_cluster_wide(&cluster_wide, refused).await;
    let result = jumppod_host::ensure(&kube, &cluster.config(SMALL), &gate()).await;
    if with_create {
        result.expect("ensure with the printed rules, cluster-wide");
        assert!(cluster.namespace_exists().await);
    } else {
        let err = result.unwrap_err();
        assert!(
            err.to_string().contains("`create` verb on `namespaces`"),
            "{err}"
        );
        assert!(!cluster.namespace_exists().await);
    }
    cluster.finish().await;
}

/// The policy's floors, so that many namespaces of pods fit the real control plane's nodes.
const SMALL: &str = "cpu: 100m\nmemory: 32Mi";

/// Scenario 10: with the printed rules less any one verb, the flow fails (exit 5) with an
/// error naming the verb and the resource, in the API server's words. `case(i)` makes a
/// fresh backend for the i-th verb; `skip`: verbs the backend's flow never uses. Returns how
/// many verbs were checked.
pub async fn removing_any_one_verb_fails_naming_it<F, Fut>(
    mut case: F,
    skip: &[(&str, &str)],
) -> usize
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Cluster>,
{
    let mut checked = 0;
    let verbs = RULES
        .iter()
        .flat_map(|r| r.verbs.iter().map(move |v| (r, *v)));
    for (i, (rule, verb)) in verbs.enumerate() {
        // Needs the namespaced rules granted cluster-wide: its own test.
        if (rule.resource, verb) == ("namespaces", "create")
            || skip.contains(&(rule.resource, verb))
        {
            continue;
        }
        let cluster = case(i).await;
        cluster.namespace().await;
        cluster.seed_bare_pod("Failed", false).await;
        cluster.seed_service(30040 + i as i32, false).await;
        let user = cluster
            .granted(
                &without(verb, rule.resource),
                &[(rule.group, rule.resource, verb)],
            )
            .await;
        let err = rbac_flow(&cluster, &user)
            .await
            .expect_err(&format!("{verb} {} is needed", rule.resource));
        let text = err.to_string();
        assert_eq!(err.exit_code(), 5, "{text}");
        assert!(
            text.contains(&format!("`{verb}` verb on `{}`", rule.resource)),
            "{verb} {}: {text}",
            rule.resource
        );
        assert!(
            text.contains(&format!("cannot {verb} resource \"{}\"", rule.resource)),
            "{text}"
        );
        cluster.finish().await;
        checked += 1;
    }
    checked
}

/// The `jumppod` binary with `args`, RUST_LOG unset.
pub async fn jumppod(args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_jumppod"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .await
        .expect("run jumppod")
}

/// A process's exit, stdout and stderr, for assertion messages.
pub fn text(out: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The CLI's main flow through the real binary: `ensure` from a configuration file (dstack's
/// `proxy_jump`), `resolve -o json` and a steady `ensure -o json` in 2 requests each, and
/// `status` reading the pod Guaranteed with nothing left to do.
pub async fn the_binary_ensures_resolves_and_reports(cluster: &Cluster) {
    let kc = cluster.kubeconfig();
    let kc = kc.to_str().unwrap();
    let dir = std::env::temp_dir().join(format!(
        "jumppod-cli-{}-{}",
        cluster.ns(),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("jumppod.yaml");
    std::fs::write(
        &file,
        format!(
            "namespace: {}\nproject: main\nproxy_jump: {{hostname: jump.example.com}}\nssh_public_key: {KEY}\n",
            cluster.ns()
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let run = |command: &'static str, json: bool| {
        let mut args = vec![command, "--kubeconfig", kc, "--config", file];
        if json {
            args.extend(["-o", "json"]);
        }
        async move { jumppod(&args).await }
    };

    let out = run("ensure", false).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("create replicaset dstack-main-ssh-jump-pod"),
        "{}",
        text(&out)
    );
    // Only the simulator can hold its kubelet back long enough to see "not ready".
    if cluster.is_sim() {
        let out = run("resolve", false).await;
        assert_eq!(out.status.code(), Some(4), "not ready yet: {}", text(&out));
    }

    cluster.settle().await;
    let (out, requests) = cluster.requests_of(run("resolve", true)).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let proxy = &serde_json::from_slice::<Value>(&out.stdout).unwrap()["proxy"];
    assert_eq!(proxy["hostname"], "jump.example.com");
    assert_eq!(proxy["username"], "root");
    assert_eq!(
        proxy["port"].as_i64().unwrap(),
        node_port(&cluster.service().await)
    );
    assert_eq!(requests.len(), 2, "{requests:#?}");

    let (out, requests) = cluster.requests_of(run("ensure", true)).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["applied"],
        json!([])
    );
    assert_eq!(requests.len(), 2, "{requests:#?}");

    let out = run("status", false).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("QoS Guaranteed"), "{}", text(&out));
    assert!(
        stdout.contains("ensure would change nothing"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a `verb path` line of [`Cluster::requests_of`] changes (the simulator logs HTTP
/// methods, the audit log verbs).
pub fn is_write(line: &str) -> bool {
    let verb = line.split(' ').next().unwrap_or_default();
    !matches!(verb, "GET" | "get" | "list" | "watch")
}

/// The CLI's exit codes through the binary: 2 for configuration (naming the field and the
/// value) and usage, 3 when the policy rejects what ensure would write (nothing written), 4
/// when nothing is provisioned, 5 when forbidden (with the way out). On the simulator RBAC
/// must be on.
pub async fn exit_codes_say_what_went_wrong(cluster: &Cluster) {
    let kc = cluster.kubeconfig();
    let ns = cluster.ns();
    let target = |kc: &std::path::Path| -> Vec<String> {
        let args = ["--kubeconfig", kc.to_str().unwrap(), "-n", ns, "-p", "main"];
        let key = ["--ssh-public-key", KEY];
        args.iter().chain(&key).map(|s| s.to_string()).collect()
    };
    let run = |command: &'static str, target: Vec<String>, extra: &'static [&'static str]| async move {
        let mut args = vec![command];
        args.extend(target.iter().map(String::as_str));
        args.extend(extra);
        jumppod(&args).await
    };

    let out = run("ensure", target(&kc), &["--cpu", "lots"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid `cpu` \"lots\""), "{}", text(&out));

    let (out, requests) = cluster
        .requests_of(run("ensure", target(&kc), &["--cpu", "50m"]))
        .await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("50m"),
        "{}",
        text(&out)
    );
    let writes: Vec<&String> = requests.iter().filter(|r| is_write(r)).collect();
    assert_eq!(writes, Vec::<&String>::new(), "nothing written");

    let out = run("resolve", target(&kc), &[]).await;
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));

    let out = run(
        "ensure",
        target(&cluster.nobody_kubeconfig()),
        &["-o", "json"],
    )
    .await;
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    let json: Value = serde_json::from_slice(&out.stdout).expect("-o json");
    assert_eq!(json["error"]["kind"], "api", "{json}");
    let way_out = format!("jumppod rbac --namespace {ns}");
    let message = json["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&way_out), "{json}");

    let out = jumppod(&["ensure", "--port", "x"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// `jumppod keys` as dstack or an operator calls it: a key as an argument, from stdin or a
/// file; the list with the fingerprints `ssh-keygen -l` prints; removal by key; bad input
/// named with exit code 2, nothing sent to the API and a private key never echoed.
pub async fn keys_are_added_listed_and_removed_through_the_binary(cluster: &Cluster) {
    cluster.namespace().await;
    let kc = cluster.kubeconfig();
    let ns = cluster.ns();
    let target = ["--kubeconfig", kc.to_str().unwrap(), "-n", ns, "-p", "main"];
    let with = |args: &[&str]| -> Vec<String> {
        args.iter().chain(&target).map(|s| s.to_string()).collect()
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        jumppod(&args).await
    };
    let json_of = |out: &std::process::Output| -> Value {
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
    };

    let out = run(with(&["keys", "add", ALICE, "--name", "alice"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let added = format!("key alice in secret {ns}/dstack-main-ssh-jump-pod-authorized-keys: added");
    assert!(stdout.contains(&added), "{}", text(&out));
    assert!(stdout.contains("about 70 seconds"), "{}", text(&out));

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jumppod"))
        .args(with(&["keys", "add", "-"]))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run jumppod");
    use tokio::io::AsyncWriteExt as _;
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{BOB}\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    let out = run(with(&["keys", "list", "-o", "json"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let list = json_of(&out);
    let entries = list["entries"].as_array().expect("entries");
    let names: Vec<&str> = entries.iter().filter_map(|e| e["name"].as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names.contains(&"alice") && names.iter().any(|n| n.starts_with("key-")),
        "{names:?}"
    );
    let alice = entries.iter().find(|e| e["name"] == "alice").unwrap();
    // What `ssh-keygen -lf` (OpenSSH 9.2) prints for ALICE.
    assert_eq!(
        alice["fingerprint"],
        "SHA256:pNpnj+bt0Ij47gSKdxSbHEbm2WLXU4wkQdw5c8pbOM4"
    );

    let out = run(with(&["keys", "remove", ALICE])).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("key alice in secret"), "{}", text(&out));

    let dir = std::env::temp_dir().join(format!("jumppod-keys-{ns}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let private = dir.join("id_ed25519");
    std::fs::write(&private, "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n").unwrap();
    let (_, requests) = cluster
        .requests_of(async {
            for (args, says) in [
                (
                    vec!["keys", "add", "--key-file", private.to_str().unwrap()],
                    "is a private key",
                ),
                (
                    vec!["keys", "add", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5"],
                    "invalid `key`",
                ),
                (
                    vec!["keys", "add", ALICE, "--name", "a/b"],
                    "invalid `--name` \"a/b\"",
                ),
            ] {
                let out = run(with(&args)).await;
                assert_eq!(out.status.code(), Some(2), "{}", text(&out));
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(stderr.contains(says), "{}", text(&out));
                assert!(
                    !stderr.contains("b3BlbnNzaC1rZXktdjEAAAAA"),
                    "a private key is never echoed"
                );
            }
        })
        .await;
    assert_eq!(requests, Vec::<String>::new(), "bad input reaches no API");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Secret `jumppod keys` writes for project `main`.
const SECRET: &str = "dstack-main-ssh-jump-pod-authorized-keys";

/// The entry names of the keys' Secret.
async fn key_entries(cluster: &Cluster) -> Vec<String> {
    cluster
        .get("secrets", SECRET)
        .await
        .and_then(|s| s["data"].as_object().map(|d| d.keys().cloned().collect()))
        .unwrap_or_default()
}

/// Users' SSH keys outlive the pod (issue 9 §1): a key added through `jumppod keys` is in the
/// Secret that the replacement of an evicted pod mounts (optional, so that the pod starts
/// before any key exists); a removed key is gone from it; removing it twice is no error.
/// What sshd does with the mounted Secret is proven under a real sshd (`sshd.rs`).
pub async fn a_key_added_is_mounted_by_the_replacement_pod_and_a_removed_key_is_gone(
    cluster: &Cluster,
) {
    use jumppod_host::keys::{self, Change, Outcome};
    use jumppod_host::manifest::{KEYS_MOUNT, keys_secret_name};
    let config = cluster.config("hostname: h");
    cluster.ensure(&config).await.expect("ensure");
    cluster.settle().await;
    let kube = cluster.kube().await;
    let before = cluster.resolve(&config).await.expect("resolve").proxy.pod;
    let added = keys::change(&kube, &config, &Change::add(ALICE, Some("alice")).unwrap())
        .await
        .expect("add a key");
    assert_eq!(
        (added.outcome, added.secret.as_str()),
        (Outcome::Added, SECRET)
    );
    assert_eq!(keys_secret_name(&config.name), SECRET);

    cluster.evict(&before).await;
    let after = cluster
        .until("a replacement pod", || async {
            let proxy = cluster.resolve(&config).await.ok()?.proxy;
            (proxy.pod != before).then_some(proxy.pod)
        })
        .await;
    let pod = cluster.get("pods", &after).await.expect("the replacement");
    let volume = pod["spec"]["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["secret"].is_object()))
        .unwrap_or_else(|| panic!("no Secret volume in {pod:#}"));
    assert_eq!(volume["secret"]["secretName"], SECRET);
    assert_eq!(
        volume["secret"]["optional"], true,
        "the pod starts before any key exists"
    );
    let mounted = pod["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .is_some_and(|m| {
            m.iter()
                .any(|m| m["name"] == volume["name"] && m["mountPath"] == KEYS_MOUNT)
        });
    assert!(mounted, "{pod:#}");
    let list = keys::list(&kube, &config).await.expect("list the keys");
    assert_eq!(list.entries.len(), 1);
    assert_eq!(
        list.entries[0].line,
        format!("command=\"/bin/false\" {ALICE}"),
        "{:?}",
        list.entries
    );

    let removed = keys::change(&kube, &config, &Change::remove(ALICE).unwrap())
        .await
        .expect("remove the key");
    assert_eq!(
        (removed.outcome, removed.entry.as_str()),
        (Outcome::Removed, "alice")
    );
    assert_eq!(key_entries(cluster).await, Vec::<String>::new());
    let again = keys::change(&kube, &config, &Change::remove("alice").unwrap())
        .await
        .expect("remove it again");
    assert_eq!(
        again.outcome,
        Outcome::NotPresent,
        "removing twice is not an error"
    );
}

/// The same key added again costs one read of the Secret and no write.
pub async fn the_same_key_again_costs_one_read_and_no_write(cluster: &Cluster) {
    use jumppod_host::keys::{self, Change, Outcome};
    cluster.namespace().await;
    let config = cluster.config("");
    let kube = cluster.kube().await;
    let alice = Change::add(ALICE, Some("alice")).unwrap();
    keys::change(&kube, &config, &alice)
        .await
        .expect("add a key");
    let (again, requests) = cluster
        .requests_of(keys::change(&kube, &config, &alice))
        .await;
    assert_eq!(again.expect("add it again").outcome, Outcome::Unchanged);
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert!(!is_write(&requests[0]), "{requests:#?}");
    let secret = format!("/api/v1/namespaces/{}/secrets/{SECRET}", cluster.ns());
    assert!(requests[0].ends_with(&secret), "{requests:#?}");
}

/// Eight users added at once, by eight hosts: each write carries the resourceVersion it was
/// decided on, a lost race (409 on the create or the patch) is decided again, nobody's key is
/// lost.
pub async fn keys_added_concurrently_are_all_kept(cluster: &Cluster) {
    use jumppod_host::keys::{self, Change, Outcome};
    cluster.namespace().await;
    let config = cluster.config("");
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let kube = cluster.kube().await;
        let (config, barrier) = (config.clone(), barrier.clone());
        let key = if i % 2 == 0 { ALICE } else { BOB };
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let change = Change::add(key, Some(&format!("user-{i}"))).unwrap();
            keys::change(&kube, &config, &change).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().expect("add a key").outcome, Outcome::Added);
    }
    if let Some(sim) = cluster.as_sim() {
        let lost = sim.requests().iter().filter(|r| r.status == 409).count();
        println!("races lost and decided again: {lost}");
    }
    let mut names = key_entries(cluster).await;
    names.sort();
    let all: Vec<String> = (0..8).map(|i| format!("user-{i}")).collect();
    assert_eq!(names, all);
}
