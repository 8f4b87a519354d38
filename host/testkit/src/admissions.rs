//! A client creating jump pods through the real API server while an operator's operation
//! runs (a chart's install, upgrade, uninstall; a certificate's rotation), and what it saw:
//! how many the webhook mutated, how many were admitted without it, every refusal.

use jumppod::schema;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use std::time::Duration;

/// What a client creating jump pods saw: how many the webhook mutated, how many were admitted
/// without it (no configuration at that moment), and every refusal.
#[derive(Debug, Default)]
pub struct Tally {
    pub mutated: usize,
    pub unchecked: usize,
    pub refused: Vec<String>,
}

impl Tally {
    pub fn total(&self) -> usize {
        self.mutated + self.unchecked + self.refused.len()
    }
}

/// A bare pod of an older dstack release (project `main`): the legacy label, no resources,
/// which jumppod's mutation labels and sizes.
pub fn legacy_pod() -> Pod {
    let name = schema::jump_pod_name("main");
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": schema::legacy_selector(&name)},
        "spec": {"containers": [{"name": schema::container_name(&name), "image": schema::DEFAULT_IMAGE}]}
    }))
    .unwrap()
}

/// Whether the webhook mutated [`legacy_pod`]: it carries the current selector's labels.
pub fn mutated(pod: &Pod) -> bool {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    schema::current_selector(&schema::jump_pod_name("main"))
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
}

/// Creates `pod` in `ns` as a server-side dry run: every admission webhook is called, nothing
/// is stored or run.
pub async fn dry_run(client: &Client, ns: &str, pod: &Pod) -> Result<Pod, kube::Error> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            pod,
        )
        .await
}

/// A client of [`creating`]: stop it with [`no_refusal`] or [`Creating::stop`].
pub struct Creating {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Tally>,
}

impl Creating {
    /// Stops the client; what it saw.
    pub async fn stop(self) -> Tally {
        let _ = self.stop.send(());
        self.task.await.expect("the client")
    }
}

/// A client creating [`legacy_pod`] in `ns` (a dry run) every 200 ms, until stopped.
pub fn creating(client: Client, ns: &str) -> Creating {
    let ns = ns.to_owned();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let mut tally = Tally::default();
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                _ = tick.tick() => {}
            }
            match dry_run(&client, &ns, &legacy_pod()).await {
                Ok(pod) if mutated(&pod) => tally.mutated += 1,
                Ok(_) => tally.unchecked += 1,
                Err(e) => tally.refused.push(e.to_string()),
            }
        }
        tally
    });
    Creating { stop, task }
}

/// Stops a client of [`creating`], prints what it saw during `phase` and checks that no jump
/// pod was refused.
pub async fn no_refusal(phase: &str, client: Creating) -> Tally {
    let tally = client.stop().await;
    eprintln!(
        "{phase}: {} of {} jump pods refused ({} mutated by the webhook, {} admitted without it)",
        tally.refused.len(),
        tally.total(),
        tally.mutated,
        tally.unchecked
    );
    assert!(
        tally.refused.is_empty(),
        "{phase}: {} of {} refused: {:#?}",
        tally.refused.len(),
        tally.total(),
        tally.refused
    );
    tally
}
