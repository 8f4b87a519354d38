//! The Helm chart (charts/jumppod) against the binary it deploys: what `helm template` renders
//! is compared, as parsed objects, with what `jumppod rbac --controller` and `jumppod
//! webhook-configuration --service` print, so the chart and the binary cannot drift apart; its
//! pods are Guaranteed and locked down; `helm lint` passes and values.schema.json refuses a bad
//! value naming it. With the feature `real-cluster`, the real API server's server-side dry run
//! accepts what it renders, an install, upgrade and uninstall keep the webhook's CA and leave
//! nothing behind, and (chart/operations.rs, chart/certificates.rs) operators' operations
//! (disable, rename, rollback, uninstall, `helm template | kubectl apply`, upgrades, the
//! certificate's renewal and rotation) refuse no jump pod and leave no configuration behind.
//!
//! helm comes from `JUMPPOD_HELM` (the Makefile builds it into target/tools/helm from its Go
//! module and exports the path).

use rstest::rstest;
use serde::Deserialize as _;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The release's namespace in the renders; the binary is asked for the same.
const NS: &str = "dstack-system";

fn helm() -> Command {
    let helm = std::env::var_os("JUMPPOD_HELM").expect(
        "JUMPPOD_HELM is not set: these tests run helm, which `make target/tools/helm` builds \
         from its Go module (make exports JUMPPOD_HELM); or point it at a helm 3 binary",
    );
    let mut cmd = Command::new(helm);
    // helm's own caches and settings in the test's directory, not the user's.
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm");
    cmd.env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    cmd
}

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/jumppod")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A YAML stream's documents as JSON values (empty documents left out).
fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{e}:\n{yaml}")))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// `helm template jumppod CHART --namespace NS ARGS...`: the manifests, or helm's error.
fn template_text(namespace: &str, args: &[&str]) -> Result<String, String> {
    let out = helm()
        .args(["template", "jumppod"])
        .arg(chart())
        .args(["--namespace", namespace])
        .args(args)
        .output()
        .expect("helm runs");
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(text(&out.stderr))
    }
}

/// The objects `helm template` renders, or helm's error.
fn template_in(namespace: &str, args: &[&str]) -> Result<Vec<Value>, String> {
    template_text(namespace, args).map(|yaml| documents(&yaml))
}

fn template(args: &[&str]) -> Vec<Value> {
    template_in(NS, args).unwrap_or_else(|e| panic!("helm template {args:?}: {e}"))
}

fn run_jumppod(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_jumppod"))
        .args(args)
        .output()
        .expect("jumppod runs")
}

/// What the binary prints with `-o json`: a List's items, or the one object.
fn jumppod(args: &[&str]) -> Vec<Value> {
    let out = run_jumppod(&[args, &["-o", "json"]].concat());
    assert!(
        out.status.success(),
        "jumppod {args:?}: {}",
        text(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    match printed["kind"].as_str() {
        Some("List") => printed["items"].as_array().unwrap().clone(),
        _ => vec![printed],
    }
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    match of_kind(objects, kind)[..] {
        [object] => object,
        ref found => panic!("{} objects of kind {kind}, not one", found.len()),
    }
}

/// The webhook configuration of `kind`: exactly one object of its kind, a plain object of the
/// release (no hook: what `helm template` renders has no Helm to run one), which Argo CD
/// creates after the webhook is healthy (sync wave 1, the rest in 0) and prunes before it.
fn configuration<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let config = one(objects, kind);
    let annotations = &config["metadata"]["annotations"];
    assert_eq!(annotations.get("helm.sh/hook"), None, "{kind}");
    assert_eq!(annotations["argocd.argoproj.io/sync-wave"], "1", "{kind}");
    config
}

/// The Secret whose name ends with `suffix` (`-tls`: the serving pair, `-ca`: the CA).
fn secret<'a>(objects: &'a [Value], suffix: &str) -> &'a Value {
    of_kind(objects, "Secret")
        .into_iter()
        .find(|s| s["metadata"]["name"].as_str().unwrap().ends_with(suffix))
        .unwrap_or_else(|| panic!("no Secret named *{suffix}"))
}

/// The Deployment whose pods are of this component (`controller`, `webhook`).
fn deployment<'a>(objects: &'a [Value], component: &str) -> &'a Value {
    of_kind(objects, "Deployment")
        .into_iter()
        .find(|d| d["metadata"]["labels"]["app.kubernetes.io/component"] == component)
        .unwrap_or_else(|| panic!("no Deployment of the {component}"))
}

/// What each binding grants: (binding kind, binding namespace, the rules of the role it names),
/// sorted; every subject must be the one ServiceAccount among the objects.
fn grants(objects: &[Value]) -> Vec<(String, Value, Value)> {
    let account = one(objects, "ServiceAccount");
    let subject = json!([{
        "kind": "ServiceAccount",
        "name": account["metadata"]["name"],
        "namespace": account["metadata"]["namespace"],
    }]);
    let mut grants: Vec<_> = objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
        .map(|binding| {
            assert_eq!(binding["subjects"], subject, "{binding}");
            let role_ref = &binding["roleRef"];
            let role = objects
                .iter()
                .find(|o| {
                    o["kind"] == role_ref["kind"]
                        && o["metadata"]["name"] == role_ref["name"]
                        && o["metadata"]["namespace"] == binding["metadata"]["namespace"]
                })
                .unwrap_or_else(|| panic!("{binding}: its role is not among the objects"));
            (
                binding["kind"].as_str().unwrap().to_owned(),
                binding["metadata"]["namespace"].clone(),
                role["rules"].clone(),
            )
        })
        .collect();
    grants.sort_by_key(|(kind, ns, _)| (kind.clone(), ns.to_string()));
    grants
}

fn kinds(objects: &[Value]) -> Vec<String> {
    let mut kinds: Vec<_> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_owned())
        .collect();
    kinds.sort();
    kinds
}

/// Which namespaces the controller watches, in the tests' cases.
#[derive(Clone, Copy, Debug)]
enum Watching {
    Its,
    Every,
    /// dstack and dstack-staging.
    Some,
    /// The release's and dstack.
    ItsAndAnother,
}

/// The chart rendered for that, and what `jumppod rbac --controller` prints for the same.
fn chart_and_printed(watching: Watching) -> (Vec<Value>, Vec<Value>) {
    let (values, flags): (&[&str], &[&str]) = match watching {
        Watching::Its => (&[], &[]),
        Watching::Every => (&["--set", "watchAllNamespaces=true"], &["--all-namespaces"]),
        Watching::Some => (
            &[
                "--set",
                "controller.watchNamespaces={dstack,dstack-staging}",
            ],
            &[
                "--watch-namespace",
                "dstack",
                "--watch-namespace",
                "dstack-staging",
            ],
        ),
        Watching::ItsAndAnother => (
            &["--set", "controller.watchNamespaces={dstack-system,dstack}"],
            &[
                "--watch-namespace",
                "dstack-system",
                "--watch-namespace",
                "dstack",
            ],
        ),
    };
    let chart = template(values);
    let args = [
        &[
            "rbac",
            "--controller",
            "--namespace",
            NS,
            "--lease-name",
            "jumppod",
        ][..],
        flags,
    ]
    .concat();
    (chart, jumppod(&args))
}

/// The chart's controller has exactly the RBAC `jumppod rbac --controller` prints: the same
/// kinds of objects, and each binding grants the controller's ServiceAccount the same rules in
/// the same namespace (a ClusterRole with `-A`, a Role in each namespace of
/// `controller.watchNamespaces`, the Lease's Role in the release's namespace).
#[rstest]
#[case::for_its_namespace(Watching::Its)]
#[case::for_every_namespace(Watching::Every)]
#[case::for_some_namespaces(Watching::Some)]
#[case::for_its_namespace_and_another(Watching::ItsAndAnother)]
fn the_charts_rbac_is_what_rbac_controller_prints(#[case] watching: Watching) {
    let (chart, printed) = chart_and_printed(watching);
    let rbac = |objects: &[Value]| -> Vec<Value> {
        objects
            .iter()
            .filter(|o| {
                !["Deployment", "ConfigMap", "PodDisruptionBudget"]
                    .contains(&o["kind"].as_str().unwrap())
            })
            .cloned()
            .collect()
    };
    assert_eq!(kinds(&rbac(&chart)), kinds(&rbac(&printed)));
    assert_eq!(grants(&chart), grants(&printed));
}

/// The chart's controller Deployment runs what the binary's does: the same arguments, the
/// Lease's POD_NAME and POD_NAMESPACE from the downward API, the named metrics port and the
/// probes on it, the same resources, replicas and grace period, and at least its security
/// contexts, as the chart's ServiceAccount.
#[rstest]
#[case::for_its_namespace(Watching::Its)]
#[case::for_every_namespace(Watching::Every)]
#[case::for_some_namespaces(Watching::Some)]
fn the_charts_controller_runs_what_rbac_controller_prints(#[case] watching: Watching) {
    let (chart, printed) = chart_and_printed(watching);
    let ours = deployment(&chart, "controller");
    let theirs = one(&printed, "Deployment");
    assert_eq!(ours["spec"]["replicas"], theirs["spec"]["replicas"]);
    let (pod, their_pod) = (
        &ours["spec"]["template"]["spec"],
        &theirs["spec"]["template"]["spec"],
    );
    assert_eq!(
        pod["serviceAccountName"],
        one(&chart, "ServiceAccount")["metadata"]["name"]
    );
    assert_eq!(
        pod["terminationGracePeriodSeconds"],
        their_pod["terminationGracePeriodSeconds"]
    );
    contains(&pod["securityContext"], &their_pod["securityContext"]);
    let (container, their_container) = (&pod["containers"][0], &their_pod["containers"][0]);
    for field in [
        "args",
        "env",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
    ] {
        assert_eq!(container[field], their_container[field], "{field}");
    }
    contains(
        &container["securityContext"],
        &their_container["securityContext"],
    );
    assert_eq!(
        container["image"],
        format!("ghcr.io/jumppod/jumppod:{}", env!("CARGO_PKG_VERSION")),
        "the chart's default image is the binary's version"
    );
}

/// Every field of `expected` is in `actual`, equal (objects compared field by field).
fn contains(actual: &Value, expected: &Value) {
    match expected {
        Value::Object(fields) => {
            for (key, value) in fields {
                contains(&actual[key], value);
            }
        }
        _ => assert_eq!(actual, expected),
    }
}

/// The webhook's configurations are what `jumppod webhook-configuration --service` prints for
/// the chart's Service and CA: rules, selectors, paths, failure policy, every field of both.
#[rstest]
#[case::by_default(&[], &[])]
#[case::for_some_namespaces_only(
    &["--set", "webhook.onlyNamespaces={dstack,dstack-staging}"],
    &["--only-namespace", "dstack", "--only-namespace", "dstack-staging"]
)]
#[case::admitting_unchecked_when_the_call_fails(
    &["--set", "webhook.failurePolicy=Ignore"],
    &["--failure-policy", "Ignore"]
)]
#[case::behind_another_service_port(&["--set", "webhook.service.port=8443"], &[])]
fn the_webhook_configurations_are_what_webhook_configuration_prints(
    #[case] values: &[&str],
    #[case] flags: &[&str],
) {
    let chart = template(&[&["--set", "webhook.enabled=true"], values].concat());
    let secret = secret(&chart, "-tls");
    let ca = base64_decode(&secret["data"]["ca.crt"]);
    let ca_file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "chart-ca-{}.crt",
        std::thread::current()
            .name()
            .unwrap_or("test")
            .replace("::", "-")
    ));
    std::fs::write(&ca_file, ca).unwrap();
    let service = one(&chart, "Service");
    let target = format!(
        "{NS}/{}:{}",
        service["metadata"]["name"].as_str().unwrap(),
        service["spec"]["ports"][0]["port"]
    );
    let printed = jumppod(
        &[
            &["webhook-configuration", "--service", &target, "--ca-bundle"],
            &[ca_file.to_str().unwrap()][..],
            flags,
        ]
        .concat(),
    );
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        assert_eq!(
            configuration(&chart, kind)["webhooks"],
            one(&printed, kind)["webhooks"],
            "{kind}"
        );
    }
    serves_the_secret_behind_the_service(&chart, secret["metadata"]["name"].as_str().unwrap());
}

/// The webhook's pods mount that Secret, and its Service sends to them on their https port.
fn serves_the_secret_behind_the_service(chart: &[Value], secret: &str) {
    let webhook = deployment(chart, "webhook");
    let pod = &webhook["spec"]["template"];
    assert_eq!(pod["spec"]["volumes"][0]["secret"]["secretName"], secret);
    let service = one(chart, "Service");
    contains(&pod["metadata"]["labels"], &service["spec"]["selector"]);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "https");
    assert_eq!(pod["spec"]["containers"][0]["ports"][0]["name"], "https");
}

fn base64_decode(value: &Value) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(value.as_str().expect("a base64 string"))
        .unwrap()
}

/// The generated serving certificate is signed by the CA the configurations carry, for the
/// names the API server uses to reach the Service (`<svc>.<ns>.svc`) and its long form, and
/// its key is the certificate's, as the webhook loads them (rustls, as `jumppod webhook`).
#[test]
fn the_generated_certificate_serves_the_services_names() {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use std::sync::Arc;
    use tokio_rustls::rustls;

    let chart = template(&["--set", "webhook.enabled=true"]);
    let serving = secret(&chart, "-tls");
    assert_eq!(serving["type"], "kubernetes.io/tls");
    let pem = |key: &str| base64_decode(&serving["data"][key]);
    let chain: Vec<_> = CertificateDer::pem_slice_iter(&pem("tls.crt"))
        .collect::<Result<_, _>>()
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = PrivateKeyDer::from_pem_slice(&pem("tls.key")).expect("a PEM key rustls reads");
    rustls::sign::CertifiedKey::from_der(chain.clone(), key, &provider)
        .expect("the key is the certificate's");

    let webhook_ca = base64_decode(
        &configuration(&chart, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["caBundle"],
    );
    assert_eq!(webhook_ca, pem("ca.crt"), "the caBundle is the Secret's CA");
    // The CA's key is kept in a Secret of its own, which the webhook does not mount.
    let ca = secret(&chart, "-ca");
    assert_eq!(base64_decode(&ca["data"]["tls.crt"]), pem("ca.crt"));
    let mounted = &deployment(&chart, "webhook")["spec"]["template"]["spec"]["volumes"];
    assert!(
        !mounted
            .to_string()
            .contains(ca["metadata"]["name"].as_str().unwrap()),
        "{mounted}"
    );
    let service = one(&chart, "Service")["metadata"]["name"].as_str().unwrap();
    for name in [
        format!("{service}.{NS}.svc"),
        format!("{service}.{NS}.svc.cluster.local"),
    ] {
        verify(&pem("tls.crt"), &pem("ca.crt"), &name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    verify(
        &pem("tls.crt"),
        &pem("ca.crt"),
        &format!("{service}.other.svc"),
    )
    .expect_err("a name it was not made for");
}

/// Whether the serving chain `chain` (PEM) is valid for `name` under the CA `ca` (PEM), as the
/// API server checks it (webpki, through rustls).
fn verify(chain: &[u8], ca: &[u8], name: &str) -> Result<(), String> {
    use rustls::client::danger::ServerCertVerifier as _;
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use std::sync::Arc;
    use tokio_rustls::rustls;
    let chain: Vec<_> = CertificateDer::pem_slice_iter(chain)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca) {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap();
    verifier
        .verify_server_cert(
            &chain[0],
            &chain[1..],
            &ServerName::try_from(name.to_owned()).unwrap(),
            &[],
            UnixTime::now(),
        )
        .map(drop)
        .map_err(|e| e.to_string())
}

/// With cert-manager, the chart asks it for the serving certificate (no commonName: its names
/// are in dnsNames) and lets its CA injector fill in the caBundle: the configurations are the
/// binary's but for the caBundle. Without an issuer of the operator's, a CA of the chart's own
/// (a self-signed Issuer signs a CA Certificate, whose CA Issuer signs the serving one) is
/// what is injected, so a renewal of the serving certificate never changes the caBundle.
#[rstest]
#[case::from_a_ca_of_its_own(&[], None)]
#[case::from_the_operators_issuer(
    &["--set", "webhook.certManager.issuerRef.kind=ClusterIssuer", "--set", "webhook.certManager.issuerRef.name=corp-ca"],
    Some(json!({"kind": "ClusterIssuer", "name": "corp-ca"}))
)]
fn cert_manager_issues_the_certificate_and_injects_its_ca(
    #[case] values: &[&str],
    #[case] issuer: Option<Value>,
) {
    let chart = template(
        &[
            &[
                "--set",
                "webhook.enabled=true",
                "--set",
                "webhook.certManager.enabled=true",
            ],
            values,
        ]
        .concat(),
    );
    assert!(
        of_kind(&chart, "Secret").is_empty(),
        "cert-manager writes them"
    );
    let webhook = deployment(&chart, "webhook");
    let mounted = webhook["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"].clone();
    let certificates = of_kind(&chart, "Certificate");
    let serving = certificates
        .iter()
        .find(|c| c["spec"]["secretName"] == mounted)
        .expect("the Certificate of the mounted Secret");
    let service = one(&chart, "Service")["metadata"]["name"].as_str().unwrap();
    assert_eq!(
        serving["spec"]["dnsNames"],
        json!([
            format!("{service}.{NS}.svc"),
            format!("{service}.{NS}.svc.cluster.local")
        ])
    );
    assert_eq!(serving["spec"].get("commonName"), None);
    let injected_from = match issuer {
        Some(issuer) => {
            assert!(of_kind(&chart, "Issuer").is_empty());
            assert_eq!(certificates.len(), 1);
            assert_eq!(serving["spec"]["issuerRef"], issuer);
            format!("{NS}/{}", serving["metadata"]["name"].as_str().unwrap())
        }
        None => {
            let issuers = of_kind(&chart, "Issuer");
            let by_name = |name: &Value| {
                *issuers
                    .iter()
                    .find(|i| i["metadata"]["name"] == *name)
                    .unwrap_or_else(|| panic!("no Issuer {name}"))
            };
            // The serving certificate's issuer signs with the CA's Secret...
            let ca_issuer = by_name(&serving["spec"]["issuerRef"]["name"]);
            assert_eq!(serving["spec"]["issuerRef"]["kind"], "Issuer");
            let ca = certificates
                .iter()
                .find(|c| c["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"])
                .expect("the CA's Certificate");
            // ...which a self-signed Issuer made, a CA whose key outlives its renewals.
            assert_eq!(ca["spec"]["isCA"], true);
            assert_eq!(ca["spec"]["privateKey"]["rotationPolicy"], "Never");
            assert!(ca["spec"]["commonName"].as_str().unwrap().len() <= 64);
            let root = by_name(&ca["spec"]["issuerRef"]["name"]);
            assert_eq!(root["spec"], json!({"selfSigned": {}}));
            assert_eq!(issuers.len(), 2);
            format!("{NS}/{}", ca["metadata"]["name"].as_str().unwrap())
        }
    };
    let ca_file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls/ca.crt");
    let printed = jumppod(&[
        "webhook-configuration",
        "--service",
        &format!("{NS}/{service}"),
        "--ca-bundle",
        ca_file.to_str().unwrap(),
    ]);
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let ours = configuration(&chart, kind);
        assert_eq!(
            ours["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            injected_from.as_str()
        );
        let mut theirs = one(&printed, kind)["webhooks"].clone();
        theirs[0]["clientConfig"]
            .as_object_mut()
            .unwrap()
            .remove("caBundle");
        assert_eq!(ours["webhooks"], theirs, "{kind}");
    }
    serves_the_secret_behind_the_service(&chart, mounted.as_str().unwrap());
}

/// An operator's own Secret: nothing generated, its CA in the configurations.
#[test]
fn an_existing_secret_is_served_with_the_ca_given() {
    let ca =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls/ca.crt"))
            .unwrap();
    let chart = template(&[
        "--set",
        "webhook.enabled=true",
        "--set",
        "webhook.tls.existingSecret=corp-webhook-tls",
        "--set",
        &format!("webhook.tls.caBundle={ca}"),
    ]);
    assert!(of_kind(&chart, "Secret").is_empty());
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let bundle = &configuration(&chart, kind)["webhooks"][0]["clientConfig"]["caBundle"];
        assert_eq!(text(&base64_decode(bundle)), ca, "{kind}");
    }
    serves_the_secret_behind_the_service(&chart, "corp-webhook-tls");
}

/// Every pod the chart runs is Guaranteed (each container's requests equal its limits, cpu and
/// memory both set) and runs as the image's non-root user, read-only, without privilege
/// escalation or capabilities, under seccomp's RuntimeDefault; no user or group is forced (the
/// image's numeric user lets the kubelet check runAsNonRoot, and OpenShift's restricted-v2
/// refuses a runAsUser outside the range it assigns).
#[rstest]
#[case::with_the_defaults(&[])]
#[case::with_other_sizes(&[
    "--set", "controller.resources.cpu=1", "--set", "controller.resources.memory=1Gi",
    "--set", "webhook.resources.cpu=250m", "--set", "webhook.resources.memory=256Mi",
])]
fn every_pod_is_guaranteed_and_locked_down(#[case] values: &[&str]) {
    let chart = template(&[&["--set", "webhook.enabled=true"], values].concat());
    let deployments = of_kind(&chart, "Deployment");
    assert_eq!(deployments.len(), 2);
    for deployment in deployments {
        let name = &deployment["metadata"]["name"];
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(
            pod["securityContext"],
            json!({
                "runAsNonRoot": true,
                "seccompProfile": {"type": "RuntimeDefault"},
            }),
            "{name}"
        );
        let text = deployment.to_string();
        assert!(
            !text.contains("runAsUser") && !text.contains("runAsGroup"),
            "{name}: a forced user or group"
        );
        for container in pod["containers"].as_array().unwrap() {
            let resources = &container["resources"];
            assert_eq!(resources["requests"], resources["limits"], "{name}");
            for resource in ["cpu", "memory"] {
                assert!(
                    resources["requests"][resource].is_string(),
                    "{name}: {resource}"
                );
            }
            assert_eq!(
                container["securityContext"],
                json!({
                    "readOnlyRootFilesystem": true,
                    "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]},
                }),
                "{name}"
            );
        }
    }
}

/// The webhook's resources leave room above the start-up peak the README measured (73 MiB
/// while the module compiles): a limit below it would end every start in an OOM kill.
#[test]
fn the_webhooks_memory_is_above_its_start_up_peak() {
    let chart = template(&["--set", "webhook.enabled=true"]);
    let limit = &deployment(&chart, "webhook")["spec"]["template"]["spec"]["containers"][0]["resources"]
        ["limits"]["memory"];
    let mib: u64 = limit
        .as_str()
        .and_then(|m| m.strip_suffix("Mi"))
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("{limit}: expected a value in Mi"));
    assert!(mib >= 73 * 3 / 2, "{mib}Mi: under 1.5 x the 73 MiB peak");
}

/// `controller.config` becomes `jumppod run -f`'s file (a ConfigMap, mounted read-only, its
/// checksum on the pods so a change rolls them), which the binary accepts; empty, there is no
/// file at all.
#[test]
fn the_controllers_configuration_file_is_the_value_and_the_binary_accepts_it() {
    let config = json!({
        "cpu": "1",
        "memory": "2Gi",
        "image": "registry.example/sshd:1",
        "node_selector": {"pool": "jump"},
        "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 20}],
        "gpu_tolerations": true,
        // What the ReplicaSets' drift is judged against: settable, so that the controller
        // judges with the value `ensure --session-drain-seconds` writes.
        "session_drain_seconds": 30,
    });
    let settings = json!({"cpu": {"minimum": "250m"}});
    let chart = template(&[
        "--set-json",
        &format!("controller.config={config}"),
        "--set-json",
        &format!("policySettings={settings}"),
    ]);
    let file = one(&chart, "ConfigMap")["data"]["config.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut with_settings = config.clone();
    with_settings["policy_settings"] = settings;
    assert_eq!(documents(&file), vec![with_settings]);
    let pod = &deployment(&chart, "controller")["spec"]["template"];
    assert!(pod["metadata"]["annotations"]["checksum/config"].is_string());
    let container = &pod["spec"]["containers"][0];
    let args: Vec<_> = container["args"].as_array().unwrap().iter().collect();
    let at = args
        .iter()
        .position(|a| *a == "--config")
        .expect("--config");
    let path = Path::new(args[at + 1].as_str().unwrap());
    assert_eq!(
        container["volumeMounts"],
        json!([{"name": "config", "mountPath": path.parent().unwrap(), "readOnly": true}])
    );
    assert_eq!(
        pod["spec"]["volumes"],
        json!([{"name": "config", "configMap": {"name": one(&chart, "ConfigMap")["metadata"]["name"]}}])
    );
    assert_eq!(path.file_name().unwrap(), "config.yaml");

    // The binary checks the file before it connects: with no kubeconfig to read, an accepted
    // file fails on the kubeconfig (exit 1), a refused one on its field (exit 2).
    let written = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chart-controller-config.yaml");
    std::fs::write(&written, &file).unwrap();
    let out = run_jumppod(&[
        "run",
        "--namespace",
        NS,
        "--config",
        written.to_str().unwrap(),
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cannot read the kubeconfig"),
        "{}",
        text(&out.stderr)
    );

    let plain = template(&[]);
    assert!(of_kind(&plain, "ConfigMap").is_empty());
    let container = &deployment(&plain, "controller")["spec"]["template"]["spec"]["containers"][0];
    assert!(
        !container["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--config"))
    );
    assert!(container["volumeMounts"].is_null());
}

/// One value, `policySettings`, is the webhook's `--settings` and the controller's
/// `policy_settings`: the policy judges admissions and the controller judges drift with the
/// same settings (two values could differ, and the controller report drift the webhook
/// admits). The values that held them apart before are refused, naming the one to set.
#[test]
fn one_value_gives_the_webhook_and_the_controller_the_same_policy_settings() {
    let settings = json!({"cpu": {"minimum": "250m", "default": "500m"}, "mutate": false});
    let chart = template(&[
        "--set",
        "webhook.enabled=true",
        "--set-json",
        &format!("policySettings={settings}"),
    ]);
    let args = deployment(&chart, "webhook")["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .clone();
    let at = args.iter().position(|a| a == "--settings").unwrap();
    let given: Value = serde_json::from_str(args[at + 1].as_str().unwrap()).unwrap();
    assert_eq!(given, settings);
    let file = one(&chart, "ConfigMap")["data"]["config.yaml"]
        .as_str()
        .unwrap();
    assert_eq!(documents(file)[0]["policy_settings"], settings);
}

/// Each release elects its controller's leader on a Lease of its own, named after it (its
/// full name): two releases in one namespace do not share one. The Role grants that Lease
/// only, and `jumppod run` is told its name.
#[test]
fn each_release_elects_on_a_lease_of_its_own() {
    let leases: Vec<(Value, Value)> = ["first", "second"]
        .into_iter()
        .map(|release| {
            let out = helm()
                .args(["template", release])
                .arg(chart())
                .args(["--namespace", NS])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", text(&out.stderr));
            let chart = documents(&text(&out.stdout));
            let role = of_kind(&chart, "Role")
                .into_iter()
                .find(|r| r["metadata"]["namespace"] == NS)
                .unwrap()
                .clone();
            let granted = role["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find_map(|r| r.get("resourceNames"))
                .cloned()
                .unwrap();
            let args = deployment(&chart, "controller")["spec"]["template"]["spec"]["containers"]
                [0]["args"]
                .clone();
            let at = args
                .as_array()
                .unwrap()
                .iter()
                .position(|a| a == "--lease-name")
                .expect("--lease-name");
            assert_eq!(granted, json!([args[at + 1]]), "{release}");
            (granted, args[at + 1].clone())
        })
        .collect();
    assert_eq!(leases[0].1, json!("first-jumppod"));
    assert_eq!(leases[1].1, json!("second-jumppod"));
}

/// As a subchart, the chart gets its parent's `global` values: the schema accepts them.
#[test]
fn the_chart_takes_a_parents_global_values() {
    let chart = template(&[
        "--set",
        "global.imageRegistry=registry.example",
        "--set",
        "global.x.y=1",
    ]);
    assert_eq!(of_kind(&chart, "Deployment").len(), 1);
}

/// What `helm template` renders (what Argo CD applies, and `helm template | kubectl apply`)
/// is plain manifests: one object per kind and name, no hook (Helm's hooks, which order the
/// webhook configurations for helm itself, are rendered only when helm reaches the cluster).
#[rstest]
#[case::with_the_webhook(&["--set", "webhook.enabled=true"])]
#[case::with_cert_manager(&["--set", "webhook.enabled=true", "--set", "webhook.certManager.enabled=true"])]
#[case::without_the_webhook(&[])]
fn helm_template_renders_each_object_once_and_no_hook(#[case] values: &[&str]) {
    let yaml = template_text(NS, values).unwrap();
    assert!(!yaml.contains("helm.sh/hook"), "{yaml}");
    let mut names: Vec<(Value, Value)> = documents(&yaml)
        .iter()
        .map(|o| (o["kind"].clone(), o["metadata"]["name"].clone()))
        .collect();
    let all = names.len();
    names.sort_by_key(|n| n.0.to_string() + &n.1.to_string());
    names.dedup();
    assert_eq!(names.len(), all, "{names:?}");
}

/// The generated CA and serving certificate carry their dates where the chart reads them at
/// the next upgrade (it cannot parse a certificate): made now, valid `webhook.tls.validityDays`.
#[test]
fn the_generated_certificates_record_their_dates() {
    let chart = template(&[
        "--set",
        "webhook.enabled=true",
        "--set",
        "webhook.tls.validityDays=90",
    ]);
    for suffix in ["-ca", "-tls"] {
        let annotations = &secret(&chart, suffix)["metadata"]["annotations"];
        let date = |key: &str| {
            let written = annotations[key]
                .as_str()
                .unwrap_or_else(|| panic!("{suffix}: {key}"));
            let out = Command::new("date")
                .args(["-u", "-d", written, "+%s"])
                .output()
                .unwrap();
            text(&out.stdout).trim().parse::<i64>().unwrap()
        };
        let (before, after) = (
            date("jumppod.dstack.ai/not-before"),
            date("jumppod.dstack.ai/not-after"),
        );
        assert_eq!(after - before, 90 * 86_400, "{suffix}");
    }
}

/// The docs' `helm upgrade` commands take `--reset-then-reuse-values` (the chart's new
/// defaults, then the values the release was given), never `--reuse-values`, which keeps the
/// old version's defaults too and so misses a value the chart adds.
#[test]
fn the_docs_upgrade_with_reset_then_reuse_values() {
    let mut upgrades = 0;
    for file in ["charts/jumppod/README.md", "docs/install.md", "README.md"] {
        let doc =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file))
                .unwrap();
        for line in doc.lines().filter(|l| l.starts_with("helm upgrade ")) {
            upgrades += 1;
            assert!(
                line.contains(" --reset-then-reuse-values") && !line.contains(" --reuse-values"),
                "{file}: {line}"
            );
        }
    }
    assert!(upgrades >= 2, "the upgrade commands");
}

/// The chart's README has a row for every value of values.yaml (a row may cover an object, as
/// `podSecurityContext`), and no row for a value that does not exist.
#[test]
fn the_charts_readme_lists_every_value() {
    fn paths(value: &Value, prefix: &str, out: &mut Vec<String>) {
        match value.as_object() {
            Some(fields) if !fields.is_empty() => {
                for (key, value) in fields {
                    let path = format!("{prefix}{key}");
                    out.push(path.clone());
                    paths(value, &format!("{path}."), out);
                }
            }
            _ => {}
        }
    }
    let read = |file: &str| std::fs::read_to_string(chart().join(file)).unwrap();
    let values = documents(&read("values.yaml")).remove(0);
    let mut all = Vec::new();
    paths(&values, "", &mut all);
    let is_leaf = |path: &&String| !all.iter().any(|p| p.starts_with(&format!("{path}.")));
    let readme = read("README.md");
    let rows: Vec<&str> = readme
        .lines()
        .filter_map(|line| line.strip_prefix("| `")?.split('`').next())
        .collect();
    for row in &rows {
        assert!(
            all.iter().any(|p| p == row),
            "README row {row}: no such value"
        );
    }
    for leaf in all.iter().filter(is_leaf) {
        let covered = rows
            .iter()
            .filter(|row| *leaf == **row || leaf.starts_with(&format!("{row}.")))
            .count();
        assert_eq!(covered, 1, "{leaf}: rows of the README's table");
    }
}

/// `helm lint --strict` passes with the defaults and with every optional part on.
#[rstest]
#[case::with_the_defaults(&[])]
#[case::watching_every_namespace(&["--set", "watchAllNamespaces=true"])]
#[case::with_the_webhook(&["--set", "webhook.enabled=true"])]
#[case::with_the_webhook_from_cert_manager(&["--set", "webhook.enabled=true", "--set", "webhook.certManager.enabled=true"])]
#[case::with_a_configuration_file(&["--set", "controller.config.cpu=1"])]
fn helm_lint_passes(#[case] values: &[&str]) {
    let out = helm()
        .args(["lint", "--strict"])
        .arg(chart())
        .args(values)
        .output()
        .expect("helm runs");
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// A bad value is refused before anything is rendered, by values.schema.json or the
/// templates, with an error naming the field.
#[rstest]
#[case::a_count_that_is_not_a_number(
    &["--set-string", "controller.replicas=two"],
    "at '/controller/replicas': got string, want integer"
)]
#[case::an_unknown_key(
    &["--set", "controller.replicaz=2"],
    "at '/controller': additional properties 'replicaz' not allowed"
)]
#[case::a_failure_policy_kubernetes_does_not_know(
    &["--set", "webhook.failurePolicy=Maybe"],
    "at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'"
)]
#[case::a_per_project_value_in_the_controllers_file(
    &["--set", "controller.config.port=32000"],
    "at '/controller/config': additional properties 'port' not allowed"
)]
#[case::a_memory_that_is_not_a_quantity(
    &["--set", "webhook.resources.memory=lots"],
    "at '/webhook/resources/memory'"
)]
#[case::a_namespace_the_webhook_never_judges(
    &["--set", "webhook.enabled=true", "--set", "webhook.onlyNamespaces={dstack,kube-system}"],
    "invalid webhook.onlyNamespaces \"kube-system\": is never sent to the webhook"
)]
#[case::its_own_namespace(
    &["--set", "webhook.enabled=true", "--set", "webhook.onlyNamespaces={dstack-system}"],
    "invalid webhook.onlyNamespaces \"dstack-system\""
)]
#[case::two_sources_of_the_certificate(
    &["--set", "webhook.enabled=true", "--set", "webhook.certManager.enabled=true", "--set", "webhook.tls.existingSecret=mine"],
    "webhook.certManager.enabled and webhook.tls.existingSecret: choose one"
)]
#[case::an_existing_secret_without_its_ca(
    &["--set", "webhook.enabled=true", "--set", "webhook.tls.existingSecret=mine"],
    "webhook.tls.caBundle is empty and the Secret dstack-system/mine (webhook.tls.existingSecret) has no ca.crt"
)]
#[case::every_namespace_and_a_list(
    &["--set", "watchAllNamespaces=true", "--set", "controller.watchNamespaces={dstack}"],
    "watchAllNamespaces and controller.watchNamespaces: choose one"
)]
#[case::a_watched_namespace_that_is_no_name(
    &["--set", "controller.watchNamespaces={Dstack}"],
    "at '/controller/watchNamespaces/0'"
)]
#[case::no_webhook_replica_under_fail(
    &["--set", "webhook.replicas=0"],
    "at '/webhook/replicas': minimum: got 0, want 1"
)]
#[case::a_ca_bundle_that_is_not_pem(
    &["--set", "webhook.tls.caBundle=LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"],
    "at '/webhook/tls/caBundle'"
)]
#[case::a_drain_longer_than_a_minute(
    &["--set", "webhook.drainSeconds=600"],
    "at '/webhook/drainSeconds'"
)]
#[case::the_webhooks_own_policy_settings(
    &["--set", "webhook.enabled=true", "--set", "webhook.policySettings.mutate=false"],
    "webhook.policySettings: set policySettings instead"
)]
#[case::the_controllers_own_policy_settings(
    &["--set", "controller.config.policy_settings.mutate=false"],
    "controller.config.policy_settings: set policySettings instead"
)]
#[case::a_session_drain_past_the_binarys_limit(
    &["--set", "controller.config.session_drain_seconds=3601"],
    "at '/controller/config/session_drain_seconds'"
)]
#[case::certificates_shorter_than_a_month(
    &["--set", "webhook.tls.validityDays=7"],
    "at '/webhook/tls/validityDays': minimum: got 7, want 30"
)]
fn a_bad_value_is_refused_naming_it(#[case] values: &[&str], #[case] error: &str) {
    let refused = template_in(NS, values).expect_err("refused");
    assert!(refused.contains(error), "{refused}");
}

/// matchConditions (GA in Kubernetes 1.30) are what keep every object but jump pods away from
/// the webhook: the chart asks for 1.30 (Chart.yaml's kubeVersion) and always renders them,
/// with the expression `jumppod webhook-configuration` prints and no objectSelector.
#[rstest]
#[case::kubernetes_1_29("1.29.0", false)]
#[case::kubernetes_1_30("1.30.0", true)]
#[case::kubernetes_1_36("1.36.0", true)]
fn the_chart_needs_kubernetes_1_30_for_match_conditions(
    #[case] kubernetes: &str,
    #[case] renders: bool,
) {
    let rendered = template_in(
        NS,
        &[
            "--set",
            "webhook.enabled=true",
            "--kube-version",
            kubernetes,
        ],
    );
    if !renders {
        let refused = rendered.expect_err("refused below 1.30");
        assert!(
            refused.contains("chart requires kubeVersion: >=1.30.0-0"),
            "{refused}"
        );
        return;
    }
    let chart = rendered.expect("rendered");
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let webhook = &configuration(&chart, kind)["webhooks"][0];
        assert!(webhook.get("matchConditions").is_some(), "{kind}");
        assert_eq!(webhook.get("objectSelector"), None, "{kind}");
    }
}

/// The PodDisruptionBudget of a component's pods (`controller`, `webhook`), if any: it keeps
/// one running (minAvailable 1) and never holds a drain for a replica that is not ready.
fn budget<'a>(chart: &'a [Value], component: &str) -> Option<&'a Value> {
    let pdb = of_kind(chart, "PodDisruptionBudget")
        .into_iter()
        .find(|p| p["metadata"]["labels"]["app.kubernetes.io/component"] == component)?;
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    assert_eq!(
        pdb["spec"]["selector"],
        deployment(chart, component)["spec"]["selector"],
        "the budget counts the {component}'s pods"
    );
    Some(pdb)
}

/// A component's replicas spread over nodes, without ever blocking scheduling.
fn spread_over_nodes(chart: &[Value], component: &str) {
    let pod = &deployment(chart, component)["spec"]["template"];
    let spread = &pod["spec"]["topologySpreadConstraints"][0];
    assert_eq!(spread["whenUnsatisfiable"], "ScheduleAnyway", "{component}");
    assert_eq!(
        spread["topologyKey"], "kubernetes.io/hostname",
        "{component}"
    );
    contains(
        &pod["metadata"]["labels"],
        &spread["labelSelector"]["matchLabels"],
    );
}

/// What keeps the webhook answering through rollouts and drains: a new replica ready before
/// an old one stops (maxUnavailable 0), a stopping one draining before it closes its listener
/// (and the grace period above drain and shutdown), replicas spread over nodes without
/// blocking scheduling, and a PodDisruptionBudget that keeps one serving, which an unhealthy
/// replica never holds up; with one replica, no budget (it would block every drain). On the
/// node's network a surge replica may find no node with its port free, and the rollout would
/// never end: there an old replica stops first (maxSurge 0, maxUnavailable 1).
#[rstest]
#[case::with_two_replicas(&[], true, (0, 1))]
#[case::with_one_replica(&["--set", "webhook.replicas=1"], false, (0, 1))]
#[case::with_a_longer_drain(&["--set", "webhook.drainSeconds=20"], true, (0, 1))]
#[case::on_the_nodes_network(&["--set", "webhook.hostNetwork=true"], true, (1, 0))]
fn the_webhook_keeps_a_replica_serving_through_rollouts_and_drains(
    #[case] values: &[&str],
    #[case] with_budget: bool,
    #[case] (unavailable, surge): (u32, u32),
) {
    let chart = template(&[&["--set", "webhook.enabled=true"], values].concat());
    let webhook = deployment(&chart, "webhook");
    assert_eq!(
        webhook["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": unavailable, "maxSurge": surge}})
    );
    let pod = &webhook["spec"]["template"];
    let args = pod["spec"]["containers"][0]["args"].as_array().unwrap();
    let at = args
        .iter()
        .position(|a| a == "--drain-delay")
        .expect("--drain-delay");
    let drain: u64 = args[at + 1]
        .as_str()
        .and_then(|d| d.strip_suffix('s'))
        .and_then(|d| d.parse().ok())
        .unwrap();
    let grace = pod["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap();
    assert!(drain >= 1, "a drain of {drain} s");
    assert!(
        grace >= drain + 10,
        "grace {grace} s: below the drain ({drain} s) and the 10 s shutdown grace"
    );
    spread_over_nodes(&chart, "webhook");
    assert_eq!(budget(&chart, "webhook").is_some(), with_budget);
}

/// The controller must act during drains (it replaces a jump pod before its node goes): its
/// replicas spread over nodes, and with more than one a PodDisruptionBudget keeps one running;
/// with one, no budget (it would block every drain).
#[rstest]
#[case::with_two_replicas(&[], true)]
#[case::with_three(&["--set", "controller.replicas=3"], true)]
#[case::with_one(&["--set", "controller.replicas=1"], false)]
fn the_controller_keeps_a_replica_through_drains(
    #[case] values: &[&str],
    #[case] with_budget: bool,
) {
    let chart = template(values);
    spread_over_nodes(&chart, "controller");
    assert_eq!(budget(&chart, "controller").is_some(), with_budget);
}

/// The image is built for linux/amd64 only: both Deployments stay on amd64 nodes by default
/// (on a mixed cluster, webhook replicas on arm64 nodes would fail and, under Fail, refuse
/// every jump pod). A key of the operator's is added to the selector; `null` removes it.
#[rstest]
#[case::by_default(&[], json!({"kubernetes.io/arch": "amd64"}))]
#[case::with_a_pool(
    &["--set", "controller.nodeSelector.pool=ops", "--set", "webhook.nodeSelector.pool=ops"],
    json!({"kubernetes.io/arch": "amd64", "pool": "ops"})
)]
#[case::without_it(
    &["--set", "controller.nodeSelector.kubernetes\\.io/arch=null", "--set", "webhook.nodeSelector.kubernetes\\.io/arch=null"],
    Value::Null
)]
fn both_deployments_run_on_the_images_architecture(
    #[case] values: &[&str],
    #[case] selector: Value,
) {
    let chart = template(&[&["--set", "webhook.enabled=true"], values].concat());
    for component in ["controller", "webhook"] {
        assert_eq!(
            deployment(&chart, component)["spec"]["template"]["spec"]["nodeSelector"],
            selector,
            "{component}"
        );
    }
}

/// Neither Deployment gets an environment variable per Service of its namespace (the chart may
/// share dstack's, one Service per project); the webhook takes the node's network only when
/// asked, and then listens on the port asked for.
#[rstest]
#[case::by_default(&[], false)]
#[case::on_the_nodes_network(
    &["--set", "webhook.hostNetwork=true", "--set", "webhook.containerPort=10250"],
    true
)]
fn the_pods_network_is_what_the_values_say(#[case] values: &[&str], #[case] host: bool) {
    let chart = template(&[&["--set", "webhook.enabled=true"], values].concat());
    for component in ["controller", "webhook"] {
        let pod = &deployment(&chart, component)["spec"]["template"]["spec"];
        assert_eq!(pod["enableServiceLinks"], false, "{component}");
    }
    let pod = &deployment(&chart, "webhook")["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"].as_bool().unwrap_or(false), host);
    if host {
        assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
        assert_eq!(pod["containers"][0]["ports"][0]["containerPort"], 10250);
        assert!(
            pod["containers"][0]["args"]
                .to_string()
                .contains("0.0.0.0:10250")
        );
    }
}

// The chart under operations on the real control plane (the modules say what each proves).
#[cfg(feature = "real-cluster")]
#[path = "chart/certificates.rs"]
mod certificates;
#[cfg(feature = "real-cluster")]
#[path = "chart/live.rs"]
mod live;
#[cfg(feature = "real-cluster")]
#[path = "chart/operations.rs"]
mod operations;

/// The chart's rendered objects pass the real API server's server-side dry run (strict field
/// validation), and an install keeps its generated CA across an upgrade and leaves nothing
/// once uninstalled.
#[cfg(feature = "real-cluster")]
mod real_cluster {
    use super::live::{kubectl, namespace};
    use super::*;
    use jumppod_testkit::cluster::admin_kubeconfig;

    fn rendered(namespace: &str, args: &[&str]) -> String {
        template_text(namespace, args).unwrap_or_else(|e| panic!("helm template {args:?}: {e}"))
    }

    /// What `helm template` renders, applied with `kubectl apply --dry-run=server`: the API
    /// server's defaulting, validation (strict: an unknown field fails) and admission, nothing
    /// stored.
    #[rstest]
    #[case::with_the_defaults("chart-dry-default", &[])]
    #[case::watching_every_namespace("chart-dry-all", &["--set", "watchAllNamespaces=true"])]
    #[case::with_the_webhook("chart-dry-webhook", &["--set", "webhook.enabled=true"])]
    #[case::with_a_configuration_file_and_every_option(
        "chart-dry-options",
        &["--set", "webhook.enabled=true", "--set", "watchAllNamespaces=true",
          "--set", "controller.config.cpu=1", "--set", "webhook.onlyNamespaces={dstack}",
          "--set", "imagePullSecrets[0].name=regcred",
          "--set", "controller.priorityClassName=system-cluster-critical"]
    )]
    fn the_rendered_chart_passes_the_api_servers_dry_run(
        #[case] ns: &str,
        #[case] values: &[&str],
    ) {
        namespace(ns);
        let yaml = rendered(ns, values);
        let out = kubectl(
            &[
                "apply",
                "--server-side",
                "--field-manager",
                "jumppod-chart-tests",
                "--dry-run=server",
                "--validate=strict",
                "-f",
                "-",
            ],
            Some(&yaml),
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{}{stdout}", text(&out.stderr));
        let applied = stdout
            .lines()
            .filter(|l| l.ends_with("serverside-applied (server dry run)"))
            .count();
        assert_eq!(applied, documents(&yaml).len(), "{stdout}");
    }

    /// A release's objects, uninstalled when the test ends, passed or failed (nothing in
    /// `drop` may panic: a panic while a failed test unwinds aborts the whole binary).
    struct Release {
        name: &'static str,
        namespace: &'static str,
        kubeconfig: PathBuf,
    }

    impl Drop for Release {
        fn drop(&mut self) {
            let uninstall = ["uninstall", self.name, "--namespace", self.namespace];
            if let Ok(out) = helm()
                .args(uninstall)
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .output()
            {
                eprintln!("helm uninstall: {}{}", text(&out.stdout), text(&out.stderr));
            }
        }
    }

    fn install(verb: &str, release: &Release, values: &[&str]) {
        let out = helm()
            .args([verb, release.name])
            .arg(chart())
            .args(["--namespace", release.namespace, "--kubeconfig"])
            .arg(&release.kubeconfig)
            .args(values)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "helm {verb}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }

    fn get(args: &[&str]) -> Result<Value, String> {
        let out = kubectl(&[&["get", "-o", "json"], args].concat(), None);
        if out.status.success() {
            Ok(serde_json::from_slice(&out.stdout).unwrap())
        } else {
            Err(text(&out.stderr))
        }
    }

    /// What `helm install` prints after installing (NOTES.txt): the image it installed and how
    /// many replicas of each part (a client-side dry run: helm asks the cluster its version).
    #[test]
    fn the_install_notes_name_the_image_and_count_the_replicas() {
        let out = helm()
            .args(["install", "notes", "--dry-run=client", "--namespace", NS])
            .arg(chart())
            .arg("--kubeconfig")
            .arg(admin_kubeconfig())
            .args([
                "--set",
                "webhook.enabled=true",
                "--set",
                "controller.replicas=3",
                "--set",
                "image.tag=9.9.9",
            ])
            .output()
            .expect("helm runs");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let notes = stdout.split("NOTES:").nth(1).expect("NOTES");
        for expected in [
            "from the image ghcr.io/jumppod/jumppod:9.9.9",
            "the controller: 3 replicas (one leads)",
            "admission webhook: 2 replicas, failurePolicy Fail",
            "It judges jump pods and jump-pod ReplicaSets",
        ] {
            assert!(notes.contains(expected), "{expected:?} not in:\n{notes}");
        }
    }

    /// NOTES.txt's commands name the release's own Lease and look for Events where the
    /// controller reports them, in the jump pods' namespaces (not the release's, unless it
    /// watches it); with the webhook, the serving certificate's dates.
    #[rstest]
    #[case::its_namespace(&[], &["kubectl -n dstack-system get events --field-selector"])]
    #[case::some_namespaces(
        &["--set", "controller.watchNamespaces={dstack,dstack-staging}"],
        &["kubectl -n dstack get events --field-selector", "kubectl -n dstack-staging get events --field-selector"]
    )]
    #[case::every_namespace(
        &["--set", "watchAllNamespaces=true"],
        &["kubectl get events -A --field-selector"]
    )]
    fn the_install_notes_look_for_events_in_the_jump_pods_namespaces(
        #[case] values: &[&str],
        #[case] expected: &[&str],
    ) {
        let out = helm()
            .args([
                "install",
                "notes-events",
                "--dry-run=client",
                "--namespace",
                NS,
            ])
            .arg(chart())
            .arg("--kubeconfig")
            .arg(admin_kubeconfig())
            .args(["--set", "webhook.enabled=true"])
            .args(values)
            .output()
            .expect("helm runs");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let notes = stdout.split("NOTES:").nth(1).expect("NOTES");
        let events: Vec<&str> = notes
            .lines()
            .map(str::trim)
            .filter(|l| l.contains("get events"))
            .collect();
        assert_eq!(events.len(), expected.len(), "{notes}");
        for line in expected {
            assert!(notes.contains(line), "{line:?} not in:\n{notes}");
        }
        assert!(
            notes.contains(&format!("kubectl -n {NS} get lease notes-events-jumppod")),
            "{notes}"
        );
        assert!(
            notes.contains("Generated by the chart: it expires on "),
            "{notes}"
        );
    }

    /// `helm install` generates the webhook's CA; `helm upgrade` to a changed value finds both
    /// Secrets (`lookup`) and keeps them, so neither the caBundle nor the served pair changes;
    /// the serving Secret deleted (a renewal), the next upgrade signs a new pair with the same
    /// CA, so the caBundle still does not change; `helm uninstall` removes the configurations
    /// (its pre-delete hook) and leaves no RBAC. The webhook is scoped to a namespace nothing
    /// else uses, so the other tests of this control plane never meet it, and both Deployments
    /// have no replica (the webhook's failure policy Ignore, which allows none): no pod takes
    /// room on the fake nodes the other tests schedule on.
    #[test]
    fn an_upgrade_keeps_the_webhooks_ca_a_renewal_too_and_an_uninstall_leaves_nothing() {
        let release = Release {
            name: "chart-life",
            namespace: "chart-life",
            kubeconfig: admin_kubeconfig(),
        };
        let values = [
            "--create-namespace",
            "--set",
            "webhook.enabled=true",
            "--set",
            "watchAllNamespaces=true",
            "--set",
            "webhook.onlyNamespaces={chart-life-nobody}",
            "--set",
            "controller.replicas=0",
            "--set",
            "webhook.replicas=0",
            "--set",
            "webhook.failurePolicy=Ignore",
        ];
        install("install", &release, &values);
        // The chart's full name: the release's, then the chart's.
        let fullname = format!("{}-jumppod", release.name);
        let configuration = format!("{fullname}-{}", release.namespace);
        let serving = format!("{fullname}-webhook-tls");
        let ca = format!("{fullname}-webhook-ca");
        let read = || {
            let secret = |name: &str| get(&["secret", "-n", release.namespace, name]).unwrap();
            let bundles: Vec<Value> = [
                "mutatingwebhookconfiguration",
                "validatingwebhookconfiguration",
            ]
            .iter()
            .map(|kind| {
                get(&[kind, &configuration]).unwrap()["webhooks"][0]["clientConfig"]["caBundle"]
                    .clone()
            })
            .collect();
            (
                secret(&serving)["data"].clone(),
                secret(&ca)["data"]["tls.crt"].clone(),
                bundles,
            )
        };
        let (data, ca_crt, bundles) = read();
        assert_eq!(data["ca.crt"], ca_crt);
        assert_eq!(bundles, vec![ca_crt.clone(), ca_crt.clone()]);

        let selector = |kind: &str| {
            get(&[kind, &configuration]).unwrap()["webhooks"][0]["namespaceSelector"].to_string()
        };
        let upgraded = [
            &values[1..],
            &[
                "--set",
                "webhook.onlyNamespaces={chart-life-nobody,chart-life-other}",
            ],
        ]
        .concat();
        install("upgrade", &release, &upgraded);
        for kind in [
            "mutatingwebhookconfiguration",
            "validatingwebhookconfiguration",
        ] {
            assert!(
                selector(kind).contains("chart-life-other"),
                "the upgrade took the changed value: {}",
                selector(kind)
            );
        }
        assert_eq!(
            read(),
            (data.clone(), ca_crt.clone(), bundles.clone()),
            "the upgrade kept the Secrets and the caBundle"
        );

        // A renewal: the serving Secret deleted, then an upgrade.
        let out = kubectl(
            &["delete", "secret", "-n", release.namespace, &serving],
            None,
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        install("upgrade", &release, &upgraded);
        let (renewed, ca_after, bundles_after) = read();
        assert_ne!(renewed["tls.crt"], data["tls.crt"], "a new serving pair");
        assert_eq!(
            (ca_after, bundles_after),
            (ca_crt.clone(), bundles),
            "the renewal kept the CA and the caBundle"
        );
        let service = format!("{fullname}-webhook.{}.svc", release.namespace);
        verify(
            &base64_decode(&renewed["tls.crt"]),
            &base64_decode(&ca_crt),
            &service,
        )
        .expect("the renewed pair is signed by the kept CA");

        let controller = format!("{fullname}-controller");
        let out = helm()
            .args([
                "uninstall",
                release.name,
                "--namespace",
                release.namespace,
                "--kubeconfig",
            ])
            .arg(admin_kubeconfig())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        for object in [
            vec!["mutatingwebhookconfiguration", configuration.as_str()],
            vec!["validatingwebhookconfiguration", configuration.as_str()],
            vec![
                "clusterrole",
                &format!("{controller}-{}", release.namespace),
            ],
            vec![
                "clusterrolebinding",
                &format!("{controller}-{}", release.namespace),
            ],
        ] {
            let left = get(&object);
            assert!(
                left.as_ref().is_err_and(|e| e.contains("NotFound")),
                "{object:?} left after the uninstall: {left:?}"
            );
        }
        // Kinds helm deletes itself (the pods go with their ReplicaSets, by the garbage
        // collector, later).
        let left = get(&[
            "deployment,service,secret,configmap,serviceaccount,role,rolebinding,poddisruptionbudget",
            "-n",
            release.namespace,
            "-l",
            "app.kubernetes.io/instance=chart-life",
        ])
        .unwrap();
        assert_eq!(left["items"], json!([]), "left in the namespace");
    }
}
