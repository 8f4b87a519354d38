//! The chart on real nodes (`make real-node-scenarios`, after tests/real_node.rs), as operators
//! get it: `make publish`'s script pushes jumppod's image and the chart to the control plane's
//! registry on loopback; `helm install oci://...` installs the chart from it, and the real nodes'
//! containerd pulls the image by digest, as pods whose only credentials are the chart's
//! ServiceAccount. They reach
//! the API server as any in-cluster client does, through the `kubernetes` Service. What only
//! this file proves: the image runs under the chart's security context, the chart's RBAC is
//! enough for the controller, its Lease elects one of two replicas, the API server calls the
//! in-cluster webhook through its Service, and an uninstall leaves nothing that blocks pods.
#![cfg(feature = "real-node")]

mod real_node_support;

use jumppod::schema;
use jumppod_host::Gate;
use jumppod_host::api::Kube;
use jumppod_plan::config::RawConfig;
use jumppod_testkit::admissions::{creating, dry_run, legacy_pod, mutated, no_refusal};
use jumppod_testkit::cluster::{admin, admin_kubeconfig, cluster_dir};
use jumppod_testkit::wait_for_up_to as wait_for;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::rbac::v1::Role;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The real nodes' label and taint (controlplane/realnode.go): the chart's pods are placed there
/// by its own values, as an operator would. Not on the node that evicts for memory 2 GiB below
/// what was free when it started (its own taint): a build on the machine would press it.
const REAL_NODE: &str = "jumppod.test/real-node";

/// What `make publish`'s script pushed to the control plane's registry (`--registry`): the
/// image's repository and digest, the chart's `oci://` reference and version, read from the
/// file it writes (the Makefile exports its path).
struct Published {
    repository: String,
    digest: String,
    chart: String,
    version: String,
}

fn published() -> Published {
    let path = std::env::var("JUMPPOD_PUBLISHED")
        .expect("JUMPPOD_PUBLISHED is not set: make real-node-scenarios publishes and sets it");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e} (make real-node-scenarios publishes first)"));
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{path}: no {key}"))
            .to_owned()
    };
    let published = Published {
        repository: field("IMAGE_REPOSITORY"),
        digest: field("IMAGE_DIGEST"),
        chart: field("CHART"),
        version: field("CHART_VERSION"),
    };
    let registry = std::env::var("JUMPPOD_REGISTRY")
        .expect("JUMPPOD_REGISTRY is not set: run inside jumppod-controlplane run --registry");
    assert!(
        published.chart.starts_with(&format!("oci://{registry}/")),
        "{} was not pushed to this control plane's registry {registry}",
        published.chart
    );
    published
}

/// The image reference the chart's pods run: the published repository, by digest.
fn image() -> String {
    let published = published();
    format!("{}@{}", published.repository, published.digest)
}

/// Runs helm (built by the Makefile from its Go module) against the control plane; fails with
/// helm's own words.
fn helm(args: &[&str]) -> String {
    let helm = std::env::var_os("JUMPPOD_HELM")
        .expect("JUMPPOD_HELM is not set: the Makefile builds helm and exports its path");
    let out = Command::new(&helm)
        .args(args)
        .env("KUBECONFIG", admin_kubeconfig())
        .output()
        .expect("run helm");
    assert!(
        out.status.success(),
        "helm {}: {}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A release of the chart in a namespace of its own, uninstalled (and the namespace removed)
/// when dropped if the test did not do it.
struct Release {
    name: &'static str,
    ns: &'static str,
    values: PathBuf,
    installed: bool,
}

impl Release {
    /// `helm install --wait` of the chart from the registry, as an operator installs it: the
    /// published image by digest, pulled by the real nodes; `extra` is merged over that.
    fn install(name: &'static str, ns: &'static str, extra: Value) -> Release {
        let published = published();
        let placement = json!({
            "nodeSelector": {REAL_NODE: "true"},
            "tolerations": [
                {"key": REAL_NODE, "operator": "Exists", "effect": "NoSchedule"},
            ],
        });
        let mut values = json!({
            "image": {"repository": published.repository, "digest": published.digest},
            "controller": placement.clone(),
            "webhook": placement,
        });
        // The three tests' releases share one node's cpu (the other evicts for memory), a
        // rollout's surge replica included: a fifth of a core compiles the module in about
        // 17 s instead of 7.
        merge(
            &mut values,
            json!({"webhook": {"resources": {"cpu": "200m", "memory": "128Mi"}}}),
        );
        merge(&mut values, extra);
        let path = cluster_dir().join(format!("{name}-values.json"));
        std::fs::write(&path, values.to_string()).expect("write the values");
        let start = Instant::now();
        helm(&[
            "install",
            name,
            &published.chart,
            "--version",
            &published.version,
            "--plain-http",
            "--namespace",
            ns,
            "--create-namespace",
            "--values",
            path.to_str().unwrap(),
            "--wait",
            "--timeout",
            "180s",
        ]);
        eprintln!(
            "helm install {name}: {:.1} s",
            start.elapsed().as_secs_f64()
        );
        Release {
            name,
            ns,
            values: path,
            installed: true,
        }
    }

    /// `helm upgrade --wait` with the install's values and `set` over them.
    fn upgrade(&self, set: &[&str]) {
        let published = published();
        let mut args = vec![
            "upgrade",
            self.name,
            &published.chart,
            "--version",
            &published.version,
            "--plain-http",
            "--namespace",
            self.ns,
            "--values",
            self.values.to_str().unwrap(),
            "--wait",
            "--timeout",
            "180s",
        ];
        for s in set {
            args.extend(["--set", s]);
        }
        helm(&args);
    }

    fn uninstall(&mut self) {
        helm(&["uninstall", self.name, "--namespace", self.ns, "--wait"]);
        self.installed = false;
    }

    /// The release's pods of one component, by the chart's labels.
    async fn pods(&self, client: &Client, component: &str) -> Vec<Pod> {
        let selector = format!(
            "app.kubernetes.io/instance={},app.kubernetes.io/component={component}",
            self.name
        );
        Api::<Pod>::namespaced(client.clone(), self.ns)
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("list the release's pods")
            .items
    }

    /// The names of [`Release::pods`].
    async fn pod_names(&self, client: &Client, component: &str) -> Vec<String> {
        self.pods(client, component)
            .await
            .iter()
            .map(name)
            .collect()
    }

    /// What each of the component's containers logged, for a failure's message.
    async fn logs(&self, client: &Client, component: &str) -> String {
        let mut out = String::new();
        for pod in self.pods(client, component).await {
            out.push_str(&format!("--- {}\n{}\n", name(&pod), container_log(&pod)));
        }
        out
    }
}

/// What the pod's container wrote, read where its real kubelet keeps it.
fn container_log(pod: &Pod) -> String {
    real_node_support::container_log(pod, "jumppod").unwrap_or_else(|why| why)
}

impl Drop for Release {
    fn drop(&mut self) {
        if self.installed {
            let _ = Command::new(std::env::var_os("JUMPPOD_HELM").unwrap_or_default())
                .args(["uninstall", self.name, "--namespace", self.ns])
                .env("KUBECONFIG", admin_kubeconfig())
                .output();
        }
    }
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// The holder of the release's Lease (named after the chart's full name), once someone holds
/// it.
async fn holder(client: &Client, release: &Release) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), release.ns)
        .get_opt(&format!("{}-jumppod", release.name))
        .await
        .ok()??;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// A syntactically valid project key: these pods are never reached by SSH.
const PROJECT_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgdGVzdCBrZXk6IHByb2plY3QgbWFpbi4u main@dstack";

/// A project in the middle of dstack's upgrade: the bare pod and Service of a pre-#3891 release
/// (the legacy selector, on `node_port`), then `ensure` of the new release, whose ReplicaSet's
/// pod is ready while the Service is kept for the jobs that use it. Both pods run on the fake
/// kubelet (node-1 and where the scheduler puts them): only the controller is under test here.
/// Returns the old Service's uid.
async fn upgrading_project(client: &Client, ns: &str, project: &str, node_port: i32) -> String {
    let name = schema::jump_pod_name(project);
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let bare: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": schema::legacy_selector(&name)},
        "spec": {"nodeName": "node-1", "restartPolicy": "Never",
                 "containers": [{"name": schema::container_name(&name), "image": schema::DEFAULT_IMAGE}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &bare)
        .await
        .expect("create the pre-#3891 pod");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": schema::service_name(&name)},
        "spec": {"type": "NodePort", "selector": schema::legacy_selector(&name),
                 "ports": [{"port": 22, "targetPort": 22, "nodePort": node_port}]}
    }))
    .unwrap();
    let old = Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create the pre-#3891 Service");
    let config = RawConfig::from_text(&format!(
        "namespace: {ns}\nproject: {project}\nssh_public_key: {PROJECT_KEY}\nhostname: 127.0.0.1\n"
    ))
    .unwrap()
    .validate("default")
    .unwrap();
    let kube = Kube::new(client.clone(), Duration::from_secs(30));
    jumppod_host::ensure(&kube, &config, &Gate::native())
        .await
        .expect("ensure");
    let replicasets = Api::<ReplicaSet>::namespaced(client.clone(), ns);
    wait_for(
        "the ReplicaSet's pod to be ready",
        Duration::from_secs(60),
        || async {
            let rs = replicasets.get_opt(&name).await.ok()??;
            (rs.status?.ready_replicas == Some(1)).then_some(())
        },
    )
    .await;
    old.metadata.uid.unwrap()
}

/// The old pod finishes; waits for the controller to have recreated `project`'s Service with
/// the current selector on the same NodePort. On a timeout, the controllers' logs say why.
async fn finished_and_repaired(
    release: &Release,
    client: &Client,
    project: &str,
    old_uid: &str,
    node_port: i32,
) {
    let ns = release.ns;
    let name = schema::jump_pod_name(project);
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete the pre-#3891 pod");
    let services = Api::<Service>::namespaced(client.clone(), ns);
    let start = Instant::now();
    let svc = loop {
        let svc = services
            .get_opt(&schema::service_name(&name))
            .await
            .ok()
            .flatten();
        if let Some(svc) = svc.filter(|s| s.metadata.uid.as_deref() != Some(old_uid)) {
            break svc;
        }
        if start.elapsed() > Duration::from_secs(90) {
            panic!(
                "the controller did not recreate {project}'s Service in 90 s; its logs:\n{}",
                release.logs(client, "controller").await
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let spec = svc.spec.unwrap();
    assert_eq!(spec.selector, Some(schema::current_selector(&name)));
    assert_eq!(spec.ports.unwrap()[0].node_port, Some(node_port));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_two_controllers_from_the_published_image_one_leading_and_its_rbac_is_enough_to_repair_and_to_take_over()
 {
    let client = admin().await.client;
    let release = Release::install("jp", "chart-controller", json!({}));
    let ns = release.ns;

    // Both replicas run the local image on real nodes, Ready: /readyz answered their probe.
    let pods = release.pods(&client, "controller").await;
    assert_eq!(
        pods.len(),
        2,
        "{:?}",
        pods.iter().map(name).collect::<Vec<_>>()
    );
    let image = image();
    for pod in &pods {
        assert!(is_ready(pod), "{} is not Ready", name(pod));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.containers[0].image.as_ref(), Some(&image));
        // Pulled from the registry: containerd names the image it runs by the registry's
        // repository and digest (an imported one would carry its own name).
        let status = &pod
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0];
        assert_eq!(status.image_id, image, "{}", name(pod));
        let node = spec.node_name.clone().unwrap_or_default();
        assert!(node.starts_with("real-node-"), "{} on {node}", name(pod));
        assert_eq!(
            pod.status.as_ref().unwrap().qos_class.as_deref(),
            Some("Guaranteed")
        );
    }
    // Exactly one leads: the Lease names one of them.
    let names: Vec<String> = pods.iter().map(name).collect();
    let leader = wait_for(
        "a replica to take the Lease",
        Duration::from_secs(60),
        || holder(&client, &release),
    )
    .await;
    assert!(
        names.contains(&leader),
        "{leader} holds the Lease, not one of {names:?}"
    );

    // With nothing but the chart's ServiceAccount, the leader repairs a pre-#3891 Service.
    let uid = upgrading_project(&client, ns, "first", 30241).await;
    finished_and_repaired(&release, &client, "first", &uid, 30241).await;

    // The leader is deleted: another replica takes the Lease and repairs the next one.
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete(&leader, &DeleteParams::default())
        .await
        .expect("delete the leader");
    let next = wait_for(
        "another replica to take the Lease",
        Duration::from_secs(90),
        || async { holder(&client, &release).await.filter(|h| h != &leader) },
    )
    .await;
    eprintln!("the Lease went from {leader} to {next}");
    let uid = upgrading_project(&client, ns, "second", 30242).await;
    finished_and_repaired(&release, &client, "second", &uid, 30242).await;

    // A verb taken from the chart's Role (create on services): the repair fails, and the
    // leader's log names the verb and the resource; `helm upgrade` puts the rule back and the
    // repair goes through.
    let roles = Api::<Role>::namespaced(client.clone(), ns);
    let role_name = format!("{}-jumppod-controller", release.name);
    let mut role = roles.get(&role_name).await.expect("the chart's Role");
    for rule in role.rules.iter_mut().flatten() {
        if rule.resources.as_deref() == Some(&["services".to_owned()][..]) {
            rule.verbs.retain(|v| v != "create");
        }
    }
    roles
        .replace(&role_name, &PostParams::default(), &role)
        .await
        .expect("take create on services from the Role");
    let uid = upgrading_project(&client, ns, "third", 30243).await;
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    pods.delete(&schema::jump_pod_name("third"), &DeleteParams::default())
        .await
        .expect("delete the pre-#3891 pod");
    let leader = pods.get(&next).await.expect("the leader's pod");
    let start = Instant::now();
    let said = loop {
        let log = container_log(&leader);
        if let Some(line) = log
            .lines()
            .find(|l| l.contains("cannot create resource") && l.contains("services"))
        {
            break line.to_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "the leader did not say in 90 s that it cannot create the Service; its log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!("without the verb, the leader said: {said}");
    release.upgrade(&[]);
    let services = Api::<Service>::namespaced(client.clone(), ns);
    let name = schema::jump_pod_name("third");
    let svc = wait_for(
        "the repair once helm upgrade restored the Role",
        Duration::from_secs(90),
        || async {
            let svc = services
                .get_opt(&schema::service_name(&name))
                .await
                .ok()??;
            (svc.metadata.uid.as_deref() != Some(uid.as_str())).then_some(svc)
        },
    )
    .await;
    assert_eq!(
        svc.spec.unwrap().selector,
        Some(schema::current_selector(&name))
    );

    let mut release = release;
    release.uninstall();
    Api::<Namespace>::all(client)
        .delete(ns, &DeleteParams::default())
        .await
        .expect("delete the namespace");
}

/// An ordinary pod labelled `app.kubernetes.io/name`, as most Helm-installed workloads are:
/// never sent to the webhook.
fn ordinary_pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "ordinary", "labels": {"app.kubernetes.io/name": "ordinary"}},
        "spec": {"containers": [{"name": "main", "image": "example.com/ordinary:1"}]}
    }))
    .unwrap()
}

async fn create_namespace(client: &Client, ns: &str) {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create the namespace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_cluster_webhook_is_called_through_its_service_and_an_uninstall_leaves_nothing_that_blocks_pods()
 {
    let client = admin().await.client;
    // The webhook covers one namespace of this test only, so that scaling it to zero blocks
    // nothing of the other tests.
    let (covered, free) = ("chart-covered", "chart-free");
    create_namespace(&client, covered).await;
    create_namespace(&client, free).await;
    let mut release = Release::install(
        "jph",
        "chart-webhook",
        json!({"controller": {"replicas": 1}, "webhook": {"enabled": true, "onlyNamespaces": [covered]}}),
    );
    let ns = release.ns;

    // The API server calls the webhook through its Service: the legacy pod comes back mutated
    // to the labelled schema, Guaranteed with the defaults.
    let mutated = dry_run(&client, covered, &legacy_pod())
        .await
        .expect("the legacy pod is admitted, mutated");
    let name = schema::jump_pod_name("main");
    let labels = mutated.metadata.labels.clone().unwrap_or_default();
    for (k, v) in schema::current_selector(&name) {
        assert_eq!(labels.get(&k), Some(&v), "{labels:?}");
    }
    let resources = mutated.spec.as_ref().unwrap().containers[0]
        .resources
        .clone()
        .expect("resources filled");
    let (requests, limits) = (resources.requests.unwrap(), resources.limits.unwrap());
    assert_eq!(requests.get("cpu").map(|q| q.0.as_str()), Some("500m"));
    assert_eq!(requests.get("memory").map(|q| q.0.as_str()), Some("1Gi"));
    assert_eq!(limits.get("cpu"), requests.get("cpu"));
    assert_eq!(limits.get("memory"), requests.get("memory"));

    // The webhook scaled to zero: in the namespace it covers, its failure policy (Fail) refuses
    // jump pods, and admits every other pod without a call (matchConditions); a namespace it
    // does not cover admits jump pods too.
    let webhook = format!("{}-jumppod-webhook", release.name);
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    let webhook = match deployments.get_opt(&webhook).await.unwrap() {
        Some(_) => webhook,
        None => {
            let list = deployments.list(&ListParams::default()).await.unwrap();
            list.items
                .into_iter()
                .filter_map(|d| d.metadata.name)
                .find(|n| n.ends_with("webhook"))
                .expect("the webhook's Deployment")
        }
    };
    deployments
        .patch(
            &webhook,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("scale the webhook to zero");
    wait_for(
        "the webhook's pods to be gone",
        Duration::from_secs(60),
        || async {
            release
                .pods(&client, "webhook")
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    // Until kube-proxy drops the last pod from the Service, the API server's call can hang on
    // it past the client's 10 s: that is not yet the refusal asked for, so it is tried again.
    wait_for(
        "the covered namespace to refuse jump pods while the webhook is down",
        Duration::from_secs(90),
        || async {
            dry_run(&client, covered, &legacy_pod())
                .await
                .err()
                .filter(|e| e.to_string().contains("failed calling webhook"))
        },
    )
    .await;
    dry_run(&client, covered, &ordinary_pod()).await.expect(
        "an ordinary pod labelled app.kubernetes.io/name is admitted while the webhook is down: \
         only jump pods are sent to it",
    );
    dry_run(&client, free, &legacy_pod())
        .await
        .expect("a namespace the webhook does not cover admits jump pods while it is down");

    // An upgrade to a changed value: the configurations now ignore a failed call.
    release.upgrade(&["webhook.failurePolicy=Ignore"]);
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let selector = format!("app.kubernetes.io/instance={}", release.name);
    let configurations = mutating
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items;
    assert_eq!(configurations.len(), 1);
    for hook in configurations[0].webhooks.as_deref().unwrap_or_default() {
        assert_eq!(hook.failure_policy.as_deref(), Some("Ignore"));
    }

    // Uninstalled: no configuration of the release is left, and the covered namespace admits
    // pods again with the webhook gone.
    release.uninstall();
    assert!(
        mutating
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // The API server drops a deleted configuration when its informer hears of it.
    wait_for(
        "no webhook left to block jump pods in the covered namespace",
        Duration::from_secs(30),
        || async { dry_run(&client, covered, &legacy_pod()).await.ok() },
    )
    .await;
    for n in [covered, free, ns] {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(n, &DeleteParams::default())
            .await;
    }
}

/// Jump pods created one every 200 ms, under failurePolicy Fail, through the three moments an
/// operator's chart operations put the webhook in: `helm install --wait` (the configurations
/// are created only once the webhook is ready), a `helm upgrade` that restarts both replicas
/// (a new one ready before an old one stops; the old one drains), and `helm uninstall` (the
/// configurations deleted before the webhook): none is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_jump_pod_is_refused_through_an_install_a_rollout_and_an_uninstall() {
    let client = admin().await.client;
    let covered = "chart-rollout-covered";
    create_namespace(&client, covered).await;

    let creating_pods = creating(client.clone(), covered);
    let mut release = tokio::task::spawn_blocking(move || {
        Release::install(
            "jpr",
            "chart-rollout",
            json!({"controller": {"replicas": 1},
                   "webhook": {"enabled": true, "onlyNamespaces": [covered]}}),
        )
    })
    .await
    .unwrap();
    let install = no_refusal("helm install --wait", creating_pods).await;
    // The API server calls a new configuration once its informer hears of it.
    wait_for(
        "the installed webhook to mutate the legacy pod",
        Duration::from_secs(30),
        || async {
            let pod = dry_run(&client, covered, &legacy_pod()).await.ok()?;
            mutated(&pod).then_some(())
        },
    )
    .await;
    assert!(
        install.mutated + install.unchecked > 0,
        "the client created jump pods during the install: {install:?}"
    );

    let before = release.pod_names(&client, "webhook").await;
    assert_eq!(before.len(), 2, "{before:?}");
    let creating_pods = creating(client.clone(), covered);
    release = tokio::task::spawn_blocking(move || {
        release.upgrade(&["webhook.podAnnotations.rolled=yes"]);
        release
    })
    .await
    .unwrap();
    // Until both old replicas have drained and are gone.
    wait_for(
        "the old webhook replicas to be gone",
        Duration::from_secs(90),
        || async {
            let now = release.pod_names(&client, "webhook").await;
            (now.len() == 2 && now.iter().all(|p| !before.contains(p))).then_some(())
        },
    )
    .await;
    let rollout = no_refusal("helm upgrade restarting the webhook", creating_pods).await;
    assert!(rollout.mutated > 0, "{rollout:?}");

    let creating_pods = creating(client.clone(), covered);
    let ns = release.ns;
    tokio::task::spawn_blocking(move || release.uninstall())
        .await
        .unwrap();
    wait_for(
        "the webhook's pods to be gone",
        Duration::from_secs(90),
        || async {
            Api::<Pod>::namespaced(client.clone(), ns)
                .list(&ListParams::default().labels("app.kubernetes.io/instance=jpr"))
                .await
                .ok()
                .filter(|l| l.items.is_empty())
                .map(drop)
        },
    )
    .await;
    no_refusal("helm uninstall", creating_pods).await;
    for n in [covered, ns] {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(n, &DeleteParams::default())
            .await;
    }
}
