//! The host against a real Kubernetes control plane: kube-apiserver, kube-controller-manager
//! (ReplicaSet, garbage collector, ...) and kube-scheduler 1.36, built from Kubernetes' Go
//! modules, with fake nodes (`controlplane/`). `make test` starts it once and runs this file
//! inside `jumppod-controlplane run`, which sets `JUMPPOD_CLUSTER_DIR`; each test works in a
//! namespace of its own, the code under test as a user of its own, whose requests are counted
//! from the apiserver's audit log.
//!
//! Where the simulator and this file disagree, Kubernetes is right: these tests pin what the
//! real API server and controllers do (the uid-precondition wording, name lengths, the
//! scheduler's message, adoption by the real ReplicaSet controller, RBAC).

use jumppod::schema;
use jumppod_host::api::Kube;
use jumppod_host::{EnsureReport, Gate, HostError, resolve};
use jumppod_plan::action::Finding;
use jumppod_plan::config::{Config, RawConfig};
use jumppod_plan::manifest::Desired;
use jumppod_testkit::both::{Cluster, rbac, upgrade};
use jumppod_testkit::cluster::{
    CleanUp, Sidecar, Webhook, admin, admin_kubeconfig, namespace, typed, wait_for,
    webhook_configuration_name,
};
use jumppod_testkit::{Release, config_for};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use jumppod_testkit::{KEY, NAME};

jumppod_testkit::cli_scenarios!(real);
jumppod_testkit::ensure_scenarios!(real);
jumppod_testkit::keys_scenarios!(real);
jumppod_testkit::placement_scenarios!(real);
jumppod_testkit::rbac_scenarios!(real);
jumppod_testkit::upgrade_scenarios!(real);

async fn ensure(kube: &Kube, config: &Config) -> Result<EnsureReport, HostError> {
    jumppod_host::ensure(kube, config, &Gate::native()).await
}

async fn resolves(kube: &Kube, config: &Config) -> resolve::ResolveReport {
    wait_for("the jump pod to be ready", || async {
        resolve::resolve(kube, config).await.ok()
    })
    .await
}

/// Scenario 3 (host/testkit/src/both/upgrade.rs), with the real ReplicaSet controller taking over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_bare_pod_is_deleted_and_the_replicasets_pod_takes_over() {
    let evicted = async {
        upgrade::a_finished_bare_pod_is_deleted(
            &Cluster::real("rc-finished").await,
            "Failed",
            30061,
        )
        .await
    };
    let succeeded = async {
        upgrade::a_finished_bare_pod_is_deleted(
            &Cluster::real("rc-succeeded").await,
            "Succeeded",
            30062,
        )
        .await
    };
    tokio::join!(evicted, succeeded);
}

/// Scenario 10 (host/testkit/src/both/rbac.rs): the printed RBAC rules less any one verb, each
/// in a namespace of its own, one after another (the cluster-wide rules of one case must not
/// grant the next): the flow fails naming the verb. `list nodes` is never used here: every fake node has an
/// ExternalIP, so `resolve` without `hostname` reads the pod's node only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_any_one_verb_fails_naming_the_verb_and_the_resource() {
    let checked = rbac::removing_any_one_verb_fails_naming_it(
        |i| Cluster::real(format!("rc-rbac-{i}")),
        &[("nodes", "list")],
    )
    .await;
    assert_eq!(
        checked, 14,
        "every verb but `namespaces create` and `nodes list`"
    );
}

/// `dstack-<project>-ssh-jump-pod-container` must be a DNS-1123 label: a project of 33
/// characters is accepted by the real API server, one of 34 is a configuration error naming
/// the limit, before any request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_project_name_is_accepted_and_one_more_character_is_a_config_error() {
    let kube = admin().await;
    let ns = "rc-long";
    let project = "p".repeat(33);
    let config = config_for(ns, &project, "hostname: h");
    ensure(&kube, &config)
        .await
        .expect("a 63-character container name is valid");
    resolves(&kube, &config).await;

    let past = RawConfig::from_text(&format!(
        "namespace: {ns}\nproject: {}\nssh_public_key: {KEY}",
        "p".repeat(34)
    ))
    .unwrap()
    .validate("default")
    .unwrap_err();
    assert_eq!(past.field, "project");
    assert!(past.problem.contains("at most 63"), "{past}");
}

/// Scenario 10 (host/testkit/src/both/rbac.rs): the printed RBAC rules, bound to a plain user
/// of the control plane, are enough for the whole flow and `status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_rbac_rules_are_enough() {
    let cluster = Cluster::real("rc-rbac").await;
    rbac::the_printed_rules_are_enough(&cluster).await;
    cluster.finish().await;
}

/// A ReplicaSet of a jumppod before `keys` is drift; the printed strategic patch, run with
/// kubectl against the real API server, brings the template to what ensure would create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_keys_patch_applied_by_kubectl_ends_the_drift() {
    let admin = admin().await;
    let ns = "rc-keys-drift";
    namespace(&admin, ns).await;
    let config = config_for(ns, "main", "");
    let old = jumppod_plan::objects::without_keys(Desired::from_config(&config).replicaset);
    Api::<ReplicaSet>::namespaced(admin.client.clone(), ns)
        .create(&PostParams::default(), &old)
        .await
        .unwrap();
    let report = ensure(&admin, &config).await.unwrap();
    let Some(Finding::Drift { commands, .. }) = report
        .findings
        .iter()
        .find(|f| matches!(f, Finding::Drift { .. }))
    else {
        panic!("no drift: {report}")
    };
    let patch = commands
        .iter()
        .find(|c| c.contains("--type strategic"))
        .unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(patch.replacen("kubectl", "kubectl --kubeconfig \"$KUBECONFIG_PATH\"", 1))
        .env("KUBECONFIG_PATH", admin_kubeconfig())
        .output()
        .expect("kubectl (make kubectl installs it)");
    assert!(
        out.status.success(),
        "{patch}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = ensure(&admin, &config).await.unwrap();
    assert!(
        !report
            .findings
            .iter()
            .any(|f| matches!(f, Finding::Drift { .. })),
        "{report}"
    );
}

/// A namespace being deleted refuses new objects with 403 (the NamespaceLifecycle admission
/// plugin), in words other than RBAC's: `ensure` shows the server's message and says to wait
/// for the namespace to go, not to grant RBAC rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_being_deleted_is_reported_as_such_not_as_missing_rbac() {
    let admin = admin().await;
    let ns = "rc-terminating";
    namespace(&admin, ns).await;
    // A finalizer no controller removes keeps the namespace terminating.
    let maps: Api<ConfigMap> = Api::namespaced(admin.client.clone(), ns);
    let hold = json!({"metadata": {"name": "hold", "finalizers": ["jumppod.test/hold"]}});
    maps.create(&PostParams::default(), &typed(hold))
        .await
        .expect("create the ConfigMap holding the namespace");
    let namespaces: Api<Namespace> = Api::all(admin.client.clone());
    namespaces
        .delete(ns, &DeleteParams::default())
        .await
        .expect("delete the namespace");
    let config = config_for(ns, "main", "");
    // The admission plugin reads namespaces from its informer: it refuses once it has seen
    // the deletion.
    let err = wait_for("the namespace's deletion to reach admission", || async {
        match ensure(&admin, &config).await {
            Err(e) if e.to_string().contains("being terminated") => Some(e),
            _ => None,
        }
    })
    .await;
    let text = err.to_string();
    assert_eq!(err.exit_code(), 5, "{text}");
    assert!(
        text.contains("namespace rc-terminating is being deleted"),
        "{text}"
    );
    assert!(!text.contains("jumppod rbac"), "{text}");
    let release = json!({"metadata": {"finalizers": null}});
    maps.patch("hold", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .expect("release the namespace");
}

/// The policy as a real admission webhook (issue 8 §4): the real apiserver sends it pods and
/// ReplicaSets of one namespace. A bare pre-#3891 pod is mutated on its way in (current
/// labels, Guaranteed) and adopted by the ReplicaSet ensure creates; the pods of an
/// undersized ReplicaSet made before the webhook are refused, which the real controller
/// reports as FailedCreate and ensure as the policy's message; a body that is not an
/// AdmissionReview gets one back saying so; with the webhook gone, a pod without
/// `app.kubernetes.io/name` is still created (matchConditions send only jump pods: the
/// deadlock Kubernetes' "Avoiding deadlocks in self-hosted webhooks" warns of), failurePolicy Fail refuses a jump
/// pod and Ignore admits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_as_a_real_admission_webhook() {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    let admin = admin().await;
    let ns = "rc-webhook";
    let _cleanup = CleanUp(ns.into());
    namespace(&admin, ns).await;
    let name = webhook_configuration_name(ns);
    let pods: Api<Pod> = Api::namespaced(admin.client.clone(), ns);
    let replicasets: Api<ReplicaSet> = Api::namespaced(admin.client.clone(), ns);
    // Before the webhook: an undersized jump-pod ReplicaSet of project `small`, scaled to 0.
    let small = config_for(ns, "small", "");
    let mut undersized = Desired::from_config(&config_for(ns, "small", "cpu: 50m")).replicaset;
    undersized.spec.as_mut().unwrap().replicas = Some(0);
    replicasets
        .create(&PostParams::default(), &undersized)
        .await
        .unwrap();

    let webhook = Webhook::start();
    let (status, body) = webhook.post("{not an admission review").await;
    assert!(status.contains("200"), "{status}");
    let review: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(review["response"]["allowed"], false);
    assert!(
        review["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("not JSON")
    );

    let configs: Api<MutatingWebhookConfiguration> = Api::all(admin.client.clone());
    configs
        .create(&PostParams::default(), &{
            let mut config = webhook.configuration("Fail", ns);
            config["metadata"]["name"] = json!(name);
            typed(config)
        })
        .await
        .unwrap();
    let legacy: Pod = typed(json!({
        "metadata": {"name": NAME, "labels": schema::legacy_selector(NAME)},
        "spec": {"containers": [{"name": schema::container_name(NAME), "image": schema::DEFAULT_IMAGE}]}
    }));
    // The API server's webhook informer takes a moment: dry runs until the pod comes back mutated.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for("the webhook to mutate a dry-run pod", || async {
        pods.create(&dry, &legacy).await.ok().filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(schema::INSTANCE_LABEL))
        })
    })
    .await;
    let mutated = pods.create(&PostParams::default(), &legacy).await.unwrap();
    assert_eq!(
        mutated.status.and_then(|s| s.qos_class).as_deref(),
        Some("Guaranteed"),
        "the bare pre-#3891 pod got the default resources on its way in"
    );
    let config = config_for(ns, "main", "hostname: h");
    ensure(&admin, &config).await.unwrap();
    wait_for("the ReplicaSet to adopt the mutated pod", || async {
        pods.get(NAME).await.ok().filter(|p| {
            jumppod_plan::objects::controller_of(p)
                .is_some_and(|(kind, name)| kind == "ReplicaSet" && name == NAME)
        })
    })
    .await;

    // Scaling is an update that leaves the template alone: accepted; the pods are refused.
    replicasets
        .patch(
            &small.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    let report = wait_for("ensure to report the refused pods", || async {
        ensure(&admin, &small).await.ok().filter(|r| {
            r.findings
                .iter()
                .any(|f| matches!(f, Finding::PodsRefused { .. }))
        })
    })
    .await;
    let Some(Finding::PodsRefused {
        reason, message, ..
    }) = report
        .findings
        .iter()
        .find(|f| matches!(f, Finding::PodsRefused { .. }))
    else {
        unreachable!()
    };
    assert_eq!(reason, "FailedCreate");
    assert!(
        message.contains("admission webhook \"jump-pods.jumppod.dstack.ai\" denied the request")
            && message.contains("cpu request 50m is below the minimum 100m"),
        "{message}"
    );

    // failurePolicy, once: the webhook gone, Fail still lets a pod without the label in (the
    // API server does not call the webhook for it), refuses a jump pod; Ignore admits it.
    drop(webhook);
    let plain: Pod = typed(json!({
        "metadata": {"generateName": "plain-"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }));
    pods.create(&PostParams::default(), &plain)
        .await
        .expect("a pod without app.kubernetes.io/name is created with the webhook down");
    let jump: Pod = typed(json!({
        "metadata": {"generateName": "dstack-other-ssh-jump-pod-",
                     "labels": schema::current_labels("dstack-other-ssh-jump-pod", "other")},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }));
    let err = pods.create(&dry, &jump).await.unwrap_err().to_string();
    assert!(err.contains("failed calling webhook"), "{err}");
    let mut registered = configs.get(&name).await.unwrap();
    registered.webhooks.as_mut().unwrap()[0].failure_policy = Some("Ignore".into());
    configs
        .replace(&name, &PostParams::default(), &registered)
        .await
        .unwrap();
    wait_for("failurePolicy Ignore to admit the jump pod", || async {
        pods.create(&dry, &jump).await.ok()
    })
    .await;
}

/// Only what the policy calls a jump pod reaches the webhook (`matchConditions`): with the
/// webhook gone under `failurePolicy: Fail`, the real API server refuses exactly the pods and
/// ReplicaSets that `schema::classify` calls jump pods (its CEL and the policy agree on every
/// label set of the table) and admits every other one without a call: an ordinary workload
/// labelled `app.kubernetes.io/name` among them, as most Helm-installed workloads are. A
/// ReplicaSet is judged by its template's labels, not its own: one labelled only on its
/// template reaches the webhook, one labelled only on itself does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_what_the_policy_calls_a_jump_pod_reaches_the_webhook() {
    let admin = admin().await;
    let ns = "rc-match";
    let _cleanup = CleanUp(ns.into());
    namespace(&admin, ns).await;
    let webhook = Webhook::start();
    let configs = webhook.configurations("Fail", ns);
    drop(webhook); // every call fails from here on
    register(&admin, ns, &configs).await;
    let pods: Api<Pod> = Api::namespaced(admin.client.clone(), ns);
    let replicasets: Api<ReplicaSet> = Api::namespaced(admin.client.clone(), ns);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let failed_call = |e: kube::Error| {
        let text = e.to_string();
        text.contains("failed calling webhook").then_some(text)
    };
    // The API server's webhook informer takes a moment: until a jump pod is refused.
    wait_for("the configurations to refuse a jump pod", || async {
        pods.create(&dry, &jump_pod("main", &[]))
            .await
            .err()
            .and_then(failed_call)
    })
    .await;

    let legacy = schema::jump_pod_name("old");
    // The app.kubernetes.io/name label (None: no labels at all) and the object's name (None:
    // named by generateName).
    let table: [(Option<&str>, Option<&str>); 9] = [
        (Some(schema::APP_NAME), None),
        (Some(schema::APP_NAME), Some("any-name")),
        (Some(&legacy), Some(&legacy)),
        (Some(&legacy), Some("another-name")),
        (Some(&legacy), None),
        (Some("web"), Some("web")),
        (Some("web"), None),
        (Some("Dstack-SSH-Proxy"), None),
        (None, None),
    ];
    for (at, (app, name)) in table.into_iter().enumerate() {
        let jump = schema::classify(app, name).is_some();
        let mut labels = json!({"row": at.to_string()});
        if let Some(app) = app {
            labels[schema::NAME_LABEL] = json!(app);
        }
        let mut meta = match name {
            Some(name) => json!({"name": name}),
            None => json!({"generateName": "row-"}),
        };
        let spec = json!({"containers": [{"name": "c", "image": "busybox"}]});

        meta["labels"] = labels.clone();
        let pod: Pod = typed(json!({"metadata": meta.clone(), "spec": spec}));
        let created = pods.create(&dry, &pod).await;
        assert_eq!(
            created.is_err(),
            jump,
            "pod {app:?} named {name:?}: {:?}",
            created.map_err(|e| e.to_string()).err()
        );
        if let Err(e) = created {
            assert!(
                failed_call(e).is_some(),
                "pod {app:?} {name:?}: refused as unreachable"
            );
        }

        // A ReplicaSet: its template labelled, itself labelled as the opposite of a jump pod
        // (a jump pod's labels on an ordinary template, none on a jump pod's template).
        meta["labels"] = if jump {
            json!({"row": at.to_string()})
        } else {
            json!({"row": at.to_string(), (schema::NAME_LABEL): schema::APP_NAME})
        };
        let rs: ReplicaSet = typed(json!({
            "metadata": meta,
            "spec": {"replicas": 0, "selector": {"matchLabels": {"row": at.to_string()}},
                     "template": {"metadata": {"labels": labels}, "spec": spec}}
        }));
        let created = replicasets.create(&dry, &rs).await;
        assert_eq!(
            created.is_err(),
            jump,
            "ReplicaSet of template {app:?} named {name:?}: {:?}",
            created.map_err(|e| e.to_string()).err()
        );
    }
}

/// Registers `configs` (jumppod's, named for `ns`, so that [`CleanUp`] removes them).
async fn register(admin: &Kube, ns: &str, configs: &[Value]) {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    for config in configs {
        let mut config = config.clone();
        config["metadata"]["name"] = json!(webhook_configuration_name(ns));
        let created = match config["kind"].as_str() {
            Some("MutatingWebhookConfiguration") => {
                Api::<MutatingWebhookConfiguration>::all(admin.client.clone())
                    .create(&PostParams::default(), &typed(config))
                    .await
                    .map(drop)
            }
            _ => Api::<ValidatingWebhookConfiguration>::all(admin.client.clone())
                .create(&PostParams::default(), &typed(config))
                .await
                .map(drop),
        };
        created.expect("register the webhook configuration");
    }
}

/// The serving certificate renewed in place while jump pods are created, one every 200 ms,
/// through the real API server: with the new leaf signed by the CA of the caBundle (what
/// cert-manager's renewal under the chart's CA Issuer, or the chart's generated CA, gives),
/// none is refused, and the API server's next connection verifies the new leaf (the webhook
/// closes the connections made with the old one after their answer). A leaf of another CA in
/// its place is refused at once: the caBundle is what must not change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_renewed_under_the_same_ca_refuses_no_jump_pod_and_one_of_another_ca_is_refused() {
    let admin = admin().await;
    let ns = "rc-renewal";
    let _cleanup = CleanUp(ns.into());
    namespace(&admin, ns).await;
    let tls = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tls");
    let dir = jumppod_testkit::cluster::cluster_dir().join("renewal");
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    // As the kubelet updates a Secret volume: each file written aside, then renamed over.
    let put = |from: &str, to: &std::path::Path| {
        let aside = to.with_extension("new");
        std::fs::copy(tls.join(from), &aside).unwrap();
        std::fs::rename(&aside, to).unwrap();
    };
    put("renewal-1.crt", &cert);
    put("renewal-1.key", &key);
    let module = std::env::var("JUMPPOD_POLICY_WASM").expect("JUMPPOD_POLICY_WASM");
    let (c, k) = (cert.clone(), key.clone());
    let webhook = tokio::task::spawn_blocking(move || Webhook::start_serving(&module, &c, &k))
        .await
        .unwrap();
    let configs = webhook.configurations_trusting("Fail", ns, &tls.join("renewal-ca.crt"));
    register(&admin, ns, &configs).await;
    let pods: Api<Pod> = Api::namespaced(admin.client.clone(), ns);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    // Mutated: the webhook was called (the jump pod has no resources of its own).
    let mutated = |pod: &Pod| {
        pod.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .is_some()
    };
    wait_for(
        "the configurations to send jump pods to the webhook",
        || async {
            let pod = pods.create(&dry, &jump_pod("main", &[])).await.ok()?;
            mutated(&pod).then_some(())
        },
    )
    .await;

    const PODS: usize = 40;
    let mut refused = Vec::new();
    // The client's pace, one jump pod every 200 ms, as in the chart's rollout test.
    let mut pace = tokio::time::interval(std::time::Duration::from_millis(200));
    for i in 0..PODS {
        pace.tick().await;
        if i == PODS / 4 {
            put("renewal-2.crt", &cert);
            put("renewal-2.key", &key);
        }
        match pods.create(&dry, &jump_pod("main", &[])).await {
            Ok(pod) => assert!(mutated(&pod), "pod {i} was admitted unmutated"),
            Err(e) => refused.push(format!("pod {i}: {e}")),
        }
    }
    eprintln!(
        "renewal under the same CA: {} of {PODS} jump pods refused",
        refused.len()
    );
    assert!(refused.is_empty(), "{refused:#?}");
    assert_eq!(
        served_certificate(&webhook.addr, &tls.join("renewal-ca.crt")).await,
        first_certificate(&tls.join("renewal-2.crt")),
        "the webhook serves the renewed leaf"
    );

    // A leaf of another CA: the API server's next connection does not verify it.
    put("rotated.crt", &cert);
    put("rotated.key", &key);
    let refusal = wait_for("a jump pod refused for the leaf of another CA", || async {
        pods.create(&dry, &jump_pod("main", &[]))
            .await
            .err()
            .map(|e| e.to_string())
            .filter(|e| e.contains("failed calling webhook"))
    })
    .await;
    eprintln!("with a leaf of another CA: {refusal}");
}

/// The certificate a TLS server at `addr` serves (DER), verified against `ca`.
async fn served_certificate(addr: &str, ca: &std::path::Path) -> Vec<u8> {
    let tls = jumppod_testkit::cluster::tls_session(addr, ca).await;
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// The first certificate of a PEM file (DER).
fn first_certificate(path: &std::path::Path) -> Vec<u8> {
    use tokio_rustls::rustls::pki_types::{CertificateDer, pem::PemObject as _};
    CertificateDer::pem_file_iter(path)
        .unwrap()
        .next()
        .expect("a certificate")
        .unwrap()
        .to_vec()
}

/// A jump pod of project `project`, current labels and `extra`, no resources: what jumppod's
/// mutation makes Guaranteed.
fn jump_pod(project: &str, extra: &[(&str, &str)]) -> Pod {
    let name = schema::jump_pod_name(project);
    let mut labels = schema::current_labels(&name, project);
    labels.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    typed(json!({
        "metadata": {"generateName": format!("{name}-"), "labels": labels},
        "spec": {"containers": [{"name": "sshd", "image": schema::DEFAULT_IMAGE}]}
    }))
}

/// Validating after all mutations (issue 21 §2): the API server calls mutating webhooks in
/// the order of their configurations' names, so the test's sidecar injector, registered after
/// jumppod's, adds a container without resources to a jump pod jumppod already made
/// Guaranteed; the validating pass, which runs after every mutation, refuses it with the
/// policy's message. A jump pod without the sidecar and a bare pre-#3891 pod, as jumppod's
/// mutation leaves them, pass it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jump_pod_a_later_mutating_webhook_breaks_is_refused_by_the_validating_pass() {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    let admin = admin().await;
    let ns = "rc-webhook-validate";
    let _cleanup = CleanUp(ns.into());
    namespace(&admin, ns).await;
    let pods: Api<Pod> = Api::namespaced(admin.client.clone(), ns);
    let webhook = tokio::task::spawn_blocking(Webhook::start).await.unwrap();
    let sidecar = Sidecar::start().await;
    register(&admin, ns, &webhook.configurations("Fail", ns)).await;
    Api::<MutatingWebhookConfiguration>::all(admin.client.clone())
        .create(&PostParams::default(), &sidecar.configuration(ns))
        .await
        .expect("register the sidecar injector");

    let broken = jump_pod("side", &[Sidecar::LABEL]);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    // The API server reads webhook configurations through informers: dry runs until all
    // three are called.
    wait_for(
        "the validating pass to refuse a dry-run jump pod with the sidecar",
        || async {
            pods.create(&dry, &broken)
                .await
                .err()
                .filter(|e| e.to_string().contains("jumppod validating pass"))
        },
    )
    .await;
    let refused = pods
        .create(&PostParams::default(), &broken)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("admission webhook \"jump-pods.jumppod.dstack.ai\" denied the request: jumppod validating pass")
            && refused.contains("container \"sidecar\": resources.requests.cpu is missing (would be set to 500m)"),
        "{refused}"
    );

    let admitted = pods
        .create(&PostParams::default(), &jump_pod("side", &[]))
        .await
        .expect("a jump pod as jumppod's mutation leaves it passes the validating pass");
    assert_eq!(
        admitted.status.and_then(|s| s.qos_class).as_deref(),
        Some("Guaranteed")
    );
    let legacy: Pod = typed(json!({
        "metadata": {"name": NAME, "labels": schema::legacy_selector(NAME)},
        "spec": {"containers": [{"name": schema::container_name(NAME), "image": schema::DEFAULT_IMAGE}]}
    }));
    let legacy = pods
        .create(&PostParams::default(), &legacy)
        .await
        .expect("a bare pre-#3891 pod, mutated, passes the validating pass");
    assert!(
        legacy
            .metadata
            .labels
            .is_some_and(|l| l.contains_key(schema::INSTANCE_LABEL)),
        "mutated before the validating pass"
    );
    // Neither of jumppod's webhooks is called for a pod without app.kubernetes.io/name.
    let plain: Pod = typed(json!({
        "metadata": {"generateName": "plain-", "labels": {Sidecar::LABEL.0: Sidecar::LABEL.1}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }));
    let plain = pods.create(&PostParams::default(), &plain).await.unwrap();
    assert_eq!(
        plain.spec.unwrap().containers.len(),
        2,
        "the sidecar was added"
    );
}

/// The validating configuration judges only what the mutating one admitted (its mark): alone
/// in the cluster (the moment one of the two is created, updated or deleted before the other,
/// as Helm and GitOps tools do), it admits a bare pre-#3891 pod, which the mutation would have
/// labelled and sized, instead of refusing it; a marked jump pod it does judge, and refuses
/// for what is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_validating_configuration_alone_refuses_nothing_the_mutating_one_would_fix() {
    let admin = admin().await;
    let ns = "rc-webhook-alone";
    let _cleanup = CleanUp(ns.into());
    namespace(&admin, ns).await;
    let pods: Api<Pod> = Api::namespaced(admin.client.clone(), ns);
    let webhook = tokio::task::spawn_blocking(Webhook::start).await.unwrap();
    let [_, validating] = webhook.configurations("Fail", ns);
    register(&admin, ns, &[validating]).await;
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut marked = jump_pod("alone", &[]);
    // The mark jumppod's mutating pass puts on what it admits.
    marked.metadata.annotations =
        Some([("jumppod.dstack.ai/mutated".to_owned(), "true".to_owned())].into());
    // The API server reads configurations through an informer: until the marked pod, which
    // has no resources, is refused by the validating pass.
    wait_for(
        "the validating pass to refuse a marked jump pod",
        || async {
            pods.create(&dry, &marked)
                .await
                .err()
                .filter(|e| e.to_string().contains("jumppod validating pass"))
        },
    )
    .await;
    let legacy: Pod = typed(json!({
        "metadata": {"name": NAME, "labels": schema::legacy_selector(NAME)},
        "spec": {"containers": [{"name": schema::container_name(NAME), "image": schema::DEFAULT_IMAGE}]}
    }));
    let admitted = pods
        .create(&dry, &legacy)
        .await
        .expect("a bare pre-#3891 pod is not judged by the validating pass alone");
    assert!(
        !admitted
            .metadata
            .labels
            .is_some_and(|l| l.contains_key(schema::INSTANCE_LABEL)),
        "admitted as it was: no mutating webhook"
    );
}

/// `--failure-policy Ignore` (issue 21 §6) applies when the call fails, not when the policy
/// does: a module that spins until its 2 s epoch deadline gets an answer of allowed: false
/// (code 500, as policy-server answers), which the API server enforces under Ignore too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_ignore_a_policy_past_its_deadline_still_refuses_a_jump_pod() {
    let admin = admin().await;
    let ns = "rc-webhook-deadline";
    let _cleanup = CleanUp(ns.into());
    namespace(&admin, ns).await;
    let pods: Api<Pod> = Api::namespaced(admin.client.clone(), ns);
    let spin = std::env::var("JUMPPOD_SPIN_WASM")
        .expect("JUMPPOD_SPIN_WASM: the spinning module `make spin` builds");
    let webhook = tokio::task::spawn_blocking(move || Webhook::start_with(&spin))
        .await
        .unwrap();
    register(&admin, ns, &[webhook.configuration("Ignore", ns)]).await;
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let refused = wait_for("the webhook to refuse a dry-run jump pod", || async {
        pods.create(&dry, &jump_pod("spin", &[]))
            .await
            .err()
            .map(|e| e.to_string())
    })
    .await;
    assert!(
        refused.contains("admission webhook \"jump-pods.jumppod.dstack.ai\" denied the request: jumppod webhook: the policy failed")
            && refused.contains("interrupt"),
        "the deadline's trap, enforced under Ignore: {refused}"
    );
}

/// 10, `namespaces create` for a namespace that does not exist (host/testkit/src/both/rbac.rs),
/// each case as a user of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_create_is_needed_for_a_namespace_that_does_not_exist() {
    for with_create in [false, true] {
        let ns = format!("rc-brand-new-{with_create}");
        rbac::namespaces_create_is_needed_for_a_namespace_that_does_not_exist(
            Cluster::real(ns).await,
            with_create,
        )
        .await;
    }
}

/// 9 (host/testkit/src/both/upgrade.rs): an older dstack server runs jobs after the upgrade.
/// The API server sends its pod to the policy (`jumppod webhook`, registered for the test's
/// namespace), which mutates it; the real ReplicaSet controller adopts it and deletes it as
/// surplus.
#[rstest::rstest]
#[case::pre_3891_without_a_port("rc-fight-pre", Release::Pre3891, None)]
#[case::pre_3891_with_a_port("rc-fight-pre-port", Release::Pre3891, Some(30028))]
#[case::post_3891_without_a_port("rc-fight-post", Release::Post3891, None)]
#[case::post_3891_with_a_port("rc-fight-post-port", Release::Post3891, Some(30025))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_servers_jobs_are_undone_by_the_real_replicaset_controller(
    #[case] ns: &str,
    #[case] release: Release,
    #[case] port: Option<i32>,
) {
    upgrade::an_older_server_in_the_loop_recreates_the_service_and_fails_each_job(
        &Cluster::real_with_the_policy(ns).await,
        release,
        port,
    )
    .await;
}

/// The simulator allocates NodePorts as this allocator does (host/sim/tests/api.rs pins the
/// same band): 100 allocations, each Service deleted at once so that no port stays taken from
/// the other tests; a uniform pick over 30000-32767 would go below 30086 with probability 96 %.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_allocator_hands_out_node_ports_above_the_static_band() {
    let kube = admin().await;
    let ns = "rc-node-ports";
    namespace(&kube, ns).await;
    let services: Api<Service> = Api::namespaced(kube.client.clone(), ns);
    let body: Service = typed(json!({
        "metadata": {"name": "probe"},
        "spec": {"type": "NodePort", "ports": [{"port": 22}]}
    }));
    let mut lowest = i32::MAX;
    for _ in 0..100 {
        let svc = services
            .create(&PostParams::default(), &body)
            .await
            .unwrap();
        let port = jumppod_plan::objects::node_port(&svc).unwrap();
        services
            .delete("probe", &DeleteParams::default())
            .await
            .unwrap();
        lowest = lowest.min(port);
        assert!(upgrade::DYNAMIC_NODE_PORTS.contains(&port), "{port}");
    }
    eprintln!("lowest allocated NodePort of 100: {lowest}");
}

/// Which surplus pod the real ReplicaSet controller deletes among ready ones: the one with
/// the lower `controller.kubernetes.io/pod-deletion-cost`, before age (two pods made ready
/// together fall in one logarithmic age bucket, where the real controller breaks the tie by
/// uid, so without the cost either could go). The simulator ranks the same way
/// (host/sim/tests/controllers.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_replicaset_controller_deletes_the_lower_deletion_cost_first() {
    let kube = admin().await;
    let ns = "rc-deletion-cost";
    namespace(&kube, ns).await;
    let sets: Api<ReplicaSet> = Api::namespaced(kube.client.clone(), ns);
    let web = json!({"metadata": {"name": "web"}, "spec": {"replicas": 2,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": schema::DEFAULT_IMAGE}]}}}});
    sets.create(&PostParams::default(), &typed(web))
        .await
        .expect("create the ReplicaSet");
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let by_app = kube::api::ListParams::default().labels("app=web");
    let ready = wait_for("two ready pods", || async {
        let items = pods.list(&by_app).await.unwrap().items;
        let ready: Vec<Pod> = items
            .into_iter()
            .filter(jumppod_plan::objects::is_ready)
            .collect();
        (ready.len() == 2).then_some(ready)
    })
    .await;
    let mut names: Vec<String> = ready
        .iter()
        .map(|p| jumppod_plan::objects::name_of(&p.metadata).to_owned())
        .collect();
    names.sort();
    // The costly one is the one whose uid would lose a tie, so the cost is what decides.
    let by_uid = |n: &str| {
        ready
            .iter()
            .find(|p| jumppod_plan::objects::name_of(&p.metadata) == n)
            .and_then(|p| p.metadata.uid.clone())
            .unwrap()
    };
    let kept = names.iter().min_by_key(|n| by_uid(n)).unwrap().clone();
    let cost =
        json!({"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "100"}}});
    pods.patch(&kept, &PatchParams::default(), &Patch::Merge(&cost))
        .await
        .unwrap();
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    let left = wait_for("one active pod", || async {
        let items = pods.list(&by_app).await.unwrap().items;
        let active: Vec<String> = items
            .iter()
            .filter(|p| jumppod_plan::objects::is_active(p))
            .map(|p| jumppod_plan::objects::name_of(&p.metadata).to_owned())
            .collect();
        (active.len() == 1).then_some(active)
    })
    .await;
    assert_eq!(left, [kept]);
}
