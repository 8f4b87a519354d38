//! The scenarios that run on both backends from one body (issue 8 §2): the simulator
//! (`scenarios.rs`, `rbac.rs`, `keys.rs`, `cli.rs`) and the real control plane
//! (`real_cluster.rs`, feature `real-cluster`). [`Cluster`] is what a scenario may do to
//! either: seed what older releases left, add nodes of its own, wait for the controllers and
//! the kubelet to act, read objects, count requests (the simulator's request log; the API
//! server's audit log). The bodies are in the submodules, by subject, each with the table that
//! declares its tests once for both backends ([`both_tests!`]). Where the two backends
//! disagree, Kubernetes is right.

use super::*;
use crate::backend::RealBackend;
use crate::backend::{Backend, SimBackend};
use jumppod_host::rbac::{RULES, Rule};
use jumppod_host::resolve;
use jumppod_plan::action::Finding;
use jumppod_sim::NodeSpec;

// Each subject's bodies and its table of tests (`<subject>_scenarios!`).
pub mod cli;
pub mod ensure;
pub mod keys;
pub mod placement;
pub mod rbac;
pub mod upgrade;

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

/// Declares shared scenarios once and expands them into the tests of one backend. Each subject
/// file (`both/ensure.rs`, ...) holds a table `<subject>_scenarios!`, which a test binary
/// invokes with its backend: `sim` in `scenarios.rs`, `rbac.rs`, `keys.rs` and `cli.rs`, `real`
/// in `real_cluster.rs`. A row names the body (a function of that file, given `&Cluster`),
/// then the simulator's test and the [`Cluster`] constructor it calls, then the real control
/// plane's test and its constructor; doc comments before `sim` or `real` document that test.
#[macro_export]
macro_rules! both_tests {
    ($on:ident, $subject:ident; $(
        $body:ident:
            $(#[doc = $sim_doc:literal])*
            sim $sim:ident = $sim_new:ident($($sim_arg:expr),*),
            $(#[doc = $real_doc:literal])*
            real $real:ident = $real_new:ident($($real_arg:expr),*);
    )*) => {
        $($crate::both_tests!(@$on $subject::$body
            [$($sim_doc)*] $sim = $sim_new($($sim_arg),*),
            [$($real_doc)*] $real = $real_new($($real_arg),*));)*
    };
    (@sim $subject:ident::$body:ident
        [$($doc:literal)*] $test:ident = $new:ident($($arg:expr),*),
        [$($_doc:literal)*] $_test:ident = $_new:ident($($_arg:expr),*)) => {
        $(#[doc = $doc])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let cluster = $crate::both::Cluster::$new($($arg),*).await;
            $crate::both::$subject::$body(&cluster).await;
        }
    };
    (@real $subject:ident::$body:ident
        [$($_doc:literal)*] $_test:ident = $_new:ident($($_arg:expr),*),
        [$($doc:literal)*] $test:ident = $new:ident($($arg:expr),*)) => {
        $(#[doc = $doc])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let cluster = $crate::both::Cluster::$new($($arg),*).await;
            $crate::both::$subject::$body(&cluster).await;
        }
    };
}

/// A backend ([`Backend`]: the simulator or the real control plane) and the namespace a
/// scenario works in; when dropped, it prints how long the scenario took (`--nocapture` shows
/// it; the test harness names the thread after the test), then drops the backend (the real
/// control plane's removes what the scenario left there, panic or not).
pub struct Cluster {
    backend: Box<dyn Backend>,
    started: std::time::Instant,
    /// Pods pass through the policy's admission on their way in.
    mutates_pods: bool,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        println!(
            "timing: {} on the {}: {:.2?}",
            std::thread::current().name().unwrap_or("?"),
            self.backend.name(),
            self.started.elapsed()
        );
    }
}

impl Cluster {
    fn on(backend: impl Backend + 'static, mutates_pods: bool) -> Cluster {
        Cluster {
            backend: Box::new(backend),
            started: std::time::Instant::now(),
            mutates_pods,
        }
    }

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
        let mutates_pods = config.admission.is_some();
        let sim = Sim::start(config).await.expect("simulator");
        Cluster::on(SimBackend(sim), mutates_pods)
    }

    /// The real control plane, in namespace `ns` (created by the scenario, or by `ensure`),
    /// without the policy's webhook.
    pub async fn real(ns: impl Into<String>) -> Cluster {
        Cluster::on(RealBackend::new(ns.into()).await, false)
    }

    /// The real control plane with the policy as its admission webhook for namespace `ns`,
    /// which it creates: the real binary `jumppod webhook`, which the API server calls.
    pub async fn real_with_the_policy(ns: impl Into<String>) -> Cluster {
        let backend = RealBackend::new(ns.into()).await.with_the_policy().await;
        Cluster::on(backend, true)
    }

    /// Whether pods pass through the policy's admission on their way in.
    pub fn mutates_pods(&self) -> bool {
        self.mutates_pods
    }

    pub fn ns(&self) -> &str {
        self.backend.ns()
    }

    pub fn is_sim(&self) -> bool {
        self.as_sim().is_some()
    }

    fn as_sim(&self) -> Option<&Sim> {
        self.backend.as_sim()
    }

    /// A client of the scenario's user, as a command makes one (the production timeout; its
    /// deadline starts now).
    pub async fn kube(&self) -> Kube {
        self.backend.kube().await
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
        self.backend.namespace().await
    }

    /// The bare pod an older release left, in `phase` (Running, Failed as evicted, Succeeded).
    pub async fn seed_bare_pod(&self, phase: &str, current: bool) -> Value {
        self.backend.seed_bare_pod(phase, current).await
    }

    /// The Service an older release created on `port`; `current`: with the current selector.
    pub async fn seed_service(&self, port: i32, current: bool) -> Value {
        self.backend.seed_service(port, current).await
    }

    /// Until the controllers and the kubelet have done what they will do.
    pub async fn settle(&self) {
        self.backend.settle().await
    }

    pub async fn get(&self, resource: &str, name: &str) -> Option<Value> {
        self.backend.get(resource, name).await
    }

    pub async fn service(&self) -> Value {
        self.get("services", SVC).await.expect("the Service exists")
    }

    pub async fn list(&self, resource: &str) -> Vec<Value> {
        self.backend.list(resource).await
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
        self.backend.evict(name).await
    }

    /// A client of a user granted the Role, RoleBinding, ClusterRole and ClusterRoleBinding
    /// `jumppod rbac` prints for `rules` (on the simulator the printed ServiceAccount; on the
    /// real control plane a plain user of this call alone, once the authorizer has the rules
    /// and lacks `refused`).
    pub async fn granted(&self, rules: &[Rule], refused: &[(&str, &str, &str)]) -> Kube {
        self.backend.granted(rules, refused).await
    }

    /// A client of a user granted only the ClusterRole and ClusterRoleBinding of `rules`.
    pub async fn granted_cluster_wide(
        &self,
        rules: &[Rule],
        refused: &[(&str, &str, &str)],
    ) -> Kube {
        self.backend.granted_cluster_wide(rules, refused).await
    }

    /// The address `resolve` finds without `hostname`: node-2's ExternalIP on the simulator,
    /// the fake nodes' 127.0.0.1 on the real control plane.
    pub fn external_ip(&self) -> &'static str {
        self.backend.external_ip()
    }

    /// The kubeconfig of a user nobody granted anything (on the simulator, RBAC must be on;
    /// on the real control plane a plain user of this call alone).
    pub fn nobody_kubeconfig(&self) -> std::path::PathBuf {
        self.backend.nobody_kubeconfig()
    }

    /// The kubeconfig of the scenario's user, whose requests [`Cluster::requests_of`] counts
    /// (the simulator's admin; on the real control plane a user in system:masters).
    pub fn kubeconfig(&self) -> std::path::PathBuf {
        self.backend.kubeconfig()
    }

    /// Whether the scenario's namespace exists.
    pub async fn namespace_exists(&self) -> bool {
        self.backend.namespace_exists().await
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
        if let Some(sim) = self.as_sim() {
            // The simulator does not wait.
            sim.settle().await;
            return check()
                .await
                .unwrap_or_else(|| panic!("not so once the simulator settled: {what}"));
        }
        wait_for_up_to(what, limit, check).await
    }

    /// Until the ReplicaSet controller has acted on every pod created so far (on the
    /// simulator, whose controllers act only in `settle()`, that is any time after it).
    pub async fn replicaset_controller_caught_up(&self) {
        self.backend.replicaset_controller_caught_up().await
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
        self.backend.delete(resource, name).await;
        self.until_gone(resource, name).await;
    }

    /// A LimitRange capping each container's cpu at `max`, which the LimitRanger admission
    /// plugin enforces on pods (the simulator plays it too).
    pub async fn cap_container_cpu(&self, max: &str) {
        let range = json!({"apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": "small", "namespace": self.ns()},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": max}}]}});
        self.backend.limit_range(range).await
    }

    /// A pre-#3891 pod on a node whose kubelet stopped answering, deleted: it stays
    /// terminating, not Ready. The real API server keeps a bound pod until its kubelet
    /// confirms the deletion, so there it runs on a node of its own that no kubelet plays
    /// (unschedulable, so that no other test's pod lands on it; `finish` removes it).
    pub async fn seed_stranded_legacy_pod(&self) {
        self.backend.seed_stranded_legacy_pod().await
    }

    /// A node of the scenario's own (on the real control plane, played by the fake kubelet,
    /// and removed by `finish`); its name should start with the namespace.
    pub async fn add_node(&self, node: NodeSpec) {
        self.backend.add_node(node).await
    }

    /// What a cloud's node controller does to a node that went away: delete the Node. Its
    /// pods go with it: at once on the simulator, after the pod GC's 40 s quarantine on the
    /// real control plane.
    pub async fn remove_node(&self, name: &str) {
        self.backend.remove_node(name).await
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
        let mark = self.backend.mark_requests();
        let out = f.await;
        (out, self.backend.requests_since(mark))
    }
}

/// The `jumppod` binary with `args`, RUST_LOG unset.
pub async fn jumppod(args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(crate::jumppod_bin())
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
