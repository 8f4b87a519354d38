//! The scenarios that run on both backends from one body (issue 8 §2): the simulator
//! (`scenarios.rs`, `rbac.rs`, `keys.rs`, `cli.rs`) and the real control plane
//! (`real_cluster.rs`, feature `real-cluster`). [`Cluster`] is what a scenario may do to
//! either: seed what older releases left, add nodes of its own, wait for the controllers and
//! the kubelet to act, read objects, count requests (the simulator's request log; the API
//! server's audit log). The bodies are in the submodules, by subject. Where the two backends
//! disagree, Kubernetes is right.

use super::*;
use jumppod_host::rbac::{RULES, Rule};
use jumppod_host::resolve;
use jumppod_plan::action::Finding;
use jumppod_sim::NodeSpec;

mod cli;
mod ensure;
mod keys;
mod placement;
mod rbac;
mod upgrade;

// Each test binary calls some of the scenarios (`common` is compiled into every one).
#[allow(unused_imports)]
pub use cli::*;
#[allow(unused_imports)]
pub use ensure::*;
#[allow(unused_imports)]
pub use keys::*;
#[allow(unused_imports)]
pub use placement::*;
#[allow(unused_imports)]
pub use rbac::*;
#[allow(unused_imports)]
pub use upgrade::*;

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

/// A backend and the namespace a scenario works in; when dropped, it prints how long the
/// scenario took (`--nocapture` shows it; the test harness names the thread after the test)
/// and, on the real control plane, removes what the scenario left there, panic or not.
pub struct Cluster {
    backend: Backend,
    started: std::time::Instant,
    /// Pods pass through the policy's admission on their way in.
    mutates_pods: bool,
}

enum Backend {
    /// Controllers and the kubelet act only in `settle()`.
    Sim(Sim),
    /// Shared by every real-cluster test: each works in a namespace of its own, as a user of
    /// its own ([`cluster::UserKind::Tester`]), whose requests the audit log counts.
    #[cfg(feature = "real-cluster")]
    Real {
        /// The harness's client (`admin`): seeds, reads, waits. Its requests are not counted.
        admin: Kube,
        /// The client of the scenario's user, for the code under test.
        client: kube::Client,
        user: String,
        ns: String,
        /// The users the scenario granted rules to, or handed out as granted nothing.
        grantees: std::sync::Mutex<Vec<String>>,
    },
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
        #[cfg(feature = "real-cluster")]
        if let Backend::Real { ns, grantees, .. } = &self.backend {
            let users = std::mem::take(&mut *grantees.lock().unwrap_or_else(|e| e.into_inner()));
            cluster::clean_up_after(ns, users);
        }
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

    /// The simulator without the policy's admission (as [`Cluster::real`] has none).
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

    /// Whether pods pass through the policy's admission on their way in.
    pub fn mutates_pods(&self) -> bool {
        self.mutates_pods
    }

    /// The real control plane, in namespace `ns` (created by the scenario, or by `ensure`),
    /// without the policy's webhook.
    #[cfg(feature = "real-cluster")]
    pub async fn real(ns: impl Into<String>) -> Cluster {
        let user = cluster::fresh_user(cluster::UserKind::Tester);
        let kube = kube_as(&cluster::kubeconfig_of(&user)).await;
        Cluster {
            started: std::time::Instant::now(),
            mutates_pods: false,
            backend: Backend::Real {
                admin: cluster::admin().await,
                client: kube.client,
                user,
                ns: ns.into(),
                grantees: Default::default(),
            },
        }
    }

    /// The real control plane with the policy as its admission webhook for namespace `ns`,
    /// which it creates: the real binary `jumppod webhook`, which the API server calls.
    #[cfg(feature = "real-cluster")]
    pub async fn real_with_the_policy(ns: impl Into<String>) -> Cluster {
        let mut cluster = Cluster::real(ns).await;
        cluster.mutates_pods = true;
        if let Backend::Real { admin, ns, .. } = &cluster.backend {
            cluster::namespace(admin, ns).await;
            cluster::policy_webhook_for(admin, ns).await;
        }
        cluster
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

    /// A client of the scenario's user, as a command makes one (the production timeout; its
    /// deadline starts now).
    pub async fn kube(&self) -> Kube {
        match &self.backend {
            Backend::Sim(sim) => kube_as(sim.kubeconfig_path()).await,
            #[cfg(feature = "real-cluster")]
            Backend::Real { client, .. } => Kube::new(client.clone(), Duration::from_secs(30)),
        }
    }

    /// A user of the real control plane for this scenario alone, cleaned up after it.
    #[cfg(feature = "real-cluster")]
    fn grantee(&self) -> String {
        let user = cluster::fresh_user(cluster::UserKind::Plain);
        if let Backend::Real { grantees, .. } = &self.backend {
            grantees.lock().unwrap().push(user.clone());
        }
        user
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
            Backend::Real {
                admin: kube, ns, ..
            } => cluster::namespace(kube, ns).await,
        }
    }

    /// The bare pod an older release left, in `phase` (Running, Failed as evicted, Succeeded).
    pub async fn seed_bare_pod(&self, phase: &str, current: bool) -> Value {
        match &self.backend {
            Backend::Sim(sim) => seed_bare_pod(sim, phase, current),
            #[cfg(feature = "real-cluster")]
            Backend::Real {
                admin: kube, ns, ..
            } => {
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
            Backend::Real {
                admin: kube, ns, ..
            } => {
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
            Backend::Real {
                admin: kube, ns, ..
            } => cluster::settled(kube, ns).await,
        }
    }

    pub async fn get(&self, resource: &str, name: &str) -> Option<Value> {
        match &self.backend {
            Backend::Sim(sim) => sim.get(resource, Some(NS), name),
            #[cfg(feature = "real-cluster")]
            Backend::Real {
                admin: kube, ns, ..
            } => cluster::get(kube, ns, resource, name).await,
        }
    }

    pub async fn service(&self) -> Value {
        self.get("services", SVC).await.expect("the Service exists")
    }

    pub async fn list(&self, resource: &str) -> Vec<Value> {
        match &self.backend {
            Backend::Sim(sim) => sim.list(resource, Some(NS)),
            #[cfg(feature = "real-cluster")]
            Backend::Real {
                admin: kube, ns, ..
            } => cluster::list(kube, ns, resource).await,
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
            Backend::Real {
                admin: kube, ns, ..
            } => cluster::evict(kube, ns, name).await,
        }
    }

    /// A client of a user granted the Role, RoleBinding, ClusterRole and ClusterRoleBinding
    /// `jumppod rbac` prints for `rules` (on the simulator the printed ServiceAccount; on the
    /// real control plane a plain user of this call alone, once the authorizer has the rules
    /// and lacks `refused`).
    pub async fn granted(&self, rules: &[Rule], refused: &[(&str, &str, &str)]) -> Kube {
        match &self.backend {
            Backend::Sim(sim) => {
                // The simulator's authorizer reads the objects as they are written.
                let _ = refused;
                for o in jumppod_host::rbac::objects_with(rules, NS, "jumppod") {
                    sim.seed(o);
                }
                kube_as(&sim.kubeconfig_for(SA_USER)).await
            }
            #[cfg(feature = "real-cluster")]
            Backend::Real { admin, ns, .. } => {
                let user = self.grantee();
                cluster::grant(admin, rules, ns, &user).await;
                cluster::authorized(admin, rules, refused, ns, &user).await;
                kube_as(&cluster::kubeconfig_of(&user)).await
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
                for o in cluster_wide_objects(rules, NS, "jumppod") {
                    sim.seed(o);
                }
                kube_as(&sim.kubeconfig_for(SA_USER)).await
            }
            #[cfg(feature = "real-cluster")]
            Backend::Real { admin, ns, .. } => {
                let user = self.grantee();
                cluster::grant_cluster_wide(admin, rules, ns, &user).await;
                cluster::authorized(admin, rules, refused, ns, &user).await;
                kube_as(&cluster::kubeconfig_of(&user)).await
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

    /// The kubeconfig of a user nobody granted anything (on the simulator, RBAC must be on;
    /// on the real control plane a plain user of this call alone).
    pub fn nobody_kubeconfig(&self) -> std::path::PathBuf {
        match &self.backend {
            Backend::Sim(sim) => sim.kubeconfig_for("nobody"),
            #[cfg(feature = "real-cluster")]
            Backend::Real { .. } => cluster::kubeconfig_of(&self.grantee()),
        }
    }

    /// The kubeconfig of the scenario's user, whose requests [`Cluster::requests_of`] counts
    /// (the simulator's admin; on the real control plane a user in system:masters).
    pub fn kubeconfig(&self) -> std::path::PathBuf {
        match &self.backend {
            Backend::Sim(sim) => sim.kubeconfig_path().to_owned(),
            #[cfg(feature = "real-cluster")]
            Backend::Real { user, .. } => cluster::kubeconfig_of(user),
        }
    }

    /// Whether the scenario's namespace exists.
    pub async fn namespace_exists(&self) -> bool {
        match &self.backend {
            Backend::Sim(sim) => sim.get("namespaces", None, NS).is_some(),
            #[cfg(feature = "real-cluster")]
            Backend::Real {
                admin: kube, ns, ..
            } => {
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

    /// Until the ReplicaSet controller has acted on every pod created so far (on the
    /// simulator, whose controllers act only in `settle()`, that is any time after it).
    pub async fn replicaset_controller_caught_up(&self) {
        match &self.backend {
            Backend::Sim(_) => {}
            #[cfg(feature = "real-cluster")]
            Backend::Real { admin, ns, .. } => {
                let labels = jumppod::schema::current_labels(NAME, "main");
                cluster::replicaset_controller_caught_up(admin, ns, labels).await
            }
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

    /// Until `ensure` finds what `is` picks, then [`reported_by_every_command`] with `words`.
    pub async fn found_and_reported_by_every_command(
        &self,
        config: &Config,
        what: &str,
        is: fn(&Finding) -> bool,
        words: &[&str],
    ) {
        self.until_ensure_finds(config, what, is).await;
        reported_by_every_command(&self.kube().await, config, is, words).await;
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
            Backend::Real {
                admin: kube, ns, ..
            } => cluster::delete(kube, ns, resource, name).await,
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
            Backend::Real {
                admin: kube, ns, ..
            } => cluster::limit_range(kube, ns, range).await,
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
            Backend::Real {
                admin: kube, ns, ..
            } => cluster::stranded_legacy_pod(kube, ns).await,
        }
    }

    /// A node of the scenario's own (on the real control plane, played by the fake kubelet,
    /// and removed by `finish`); its name should start with the namespace.
    pub async fn add_node(&self, node: NodeSpec) {
        match &self.backend {
            Backend::Sim(sim) => sim.add_node(node),
            #[cfg(feature = "real-cluster")]
            Backend::Real {
                admin: kube, ns, ..
            } => cluster::played_node(kube, ns, node.to_json()).await,
        }
    }

    /// What a cloud's node controller does to a node that went away: delete the Node. Its
    /// pods go with it: at once on the simulator, after the pod GC's 40 s quarantine on the
    /// real control plane.
    pub async fn remove_node(&self, name: &str) {
        match &self.backend {
            Backend::Sim(sim) => sim.remove_node(name),
            #[cfg(feature = "real-cluster")]
            Backend::Real { admin: kube, .. } => cluster::remove_node(kube, name).await,
        }
    }

    /// The end of a scenario that must leave nothing behind on the shared real control plane
    /// before the next starts (the namespace, the grants, the nodes it added): what dropping
    /// it does, panic or not.
    pub async fn finish(self) {
        drop(self);
    }

    /// `verb path` of every request made as the scenario's user while `f` runs: on the
    /// simulator every request it logs (the harness reads it in process); on the real control
    /// plane every request of the user in the audit log, cluster-scoped ones included, each
    /// logged before it was handled, so none is missed and none waited for.
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
            Backend::Real { user, .. } => {
                let audit = cluster::audit();
                let from = audit.mark();
                let out = f.await;
                (out, audit.by_user(from, user))
            }
        }
    }
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

/// A process's stdout as JSON, or a failure showing what it printed.
pub fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

/// What a `verb path` line of [`Cluster::requests_of`] changes (the simulator logs HTTP
/// methods, the audit log verbs).
pub fn is_write(line: &str) -> bool {
    let verb = line.split(' ').next().unwrap_or_default();
    !matches!(verb, "GET" | "get" | "list" | "watch")
}
