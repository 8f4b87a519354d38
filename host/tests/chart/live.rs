//! What the chart's tests on the real control plane share: kubectl, a release driven by helm as
//! a user of its own (so that the audit log tells its requests apart), serving pairs made by
//! helm's own certificate functions, and `jumppod webhook` (the real binary) serving where the
//! API server calls the chart's Service.
//!
//! The plain control plane runs no pod (its fake nodes only report them running) and has no
//! kube-proxy, so nothing answers on a Service's cluster IP. The webhook therefore runs on
//! 127.0.0.1, and the chart's webhook Service is rendered as an ExternalName Service for
//! 127.0.0.1 (a post-renderer, for helm; the same edit for `helm template`): the API server
//! resolves an ExternalName Service to that host and the configuration's port (k8s.io/apiserver
//! `ResolveCluster`), and verifies the certificate against the caBundle for
//! `<service>.<namespace>.svc` as it does in any cluster. The rest, the chart's objects, its
//! hooks, helm and the API server's admission, is the real thing.

use super::{chart, helm, text};
use jumppod_testkit::cluster::{UserKind, Webhook, admin_kubeconfig, fresh_user, kubeconfig_of};
use serde::Deserialize as _;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// `kubectl ARGS` as the control plane's admin, `stdin` written to it.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write as _;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(admin_kubeconfig())
        // kubectl waits for the API without a limit otherwise.
        .args(["--request-timeout", "60s"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl (make kubectl installs it)");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// `kubectl ARGS`, which must succeed: its stdout.
pub fn kubectl_ok(args: &[&str], stdin: Option<&str>) -> String {
    let out = kubectl(args, stdin);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// An object as JSON, None when there is none.
pub fn get(args: &[&str]) -> Option<Value> {
    let out = kubectl(&[&["get", "-o", "json"], args].concat(), None);
    if out.status.success() {
        return Some(serde_json::from_slice(&out.stdout).unwrap());
    }
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("NotFound"),
        "kubectl get {args:?}: {stderr}"
    );
    None
}

pub fn namespace(name: &str) {
    let out = kubectl(&["create", "namespace", name], None);
    assert!(
        out.status.success() || text(&out.stderr).contains("AlreadyExists"),
        "{}",
        text(&out.stderr)
    );
}

/// A serving pair (PEM) and the CA that signed it.
#[derive(Clone, Debug)]
pub struct Pair {
    pub ca: String,
    pub crt: String,
    pub key: String,
}

/// A certificate for `names`, valid `days` days from now (0: it expires as it is made), made
/// by helm's own `genSignedCert`, signed by `ca` (PEM certificate and key) or by a new CA
/// (`genCA`): the functions the chart makes its own with.
pub fn pair(names: &[&str], days: u32, ca: Option<(&str, &str)>) -> Pair {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chart-test-pairs");
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: pairs\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("templates/pair.yaml"),
        r#"{{- $ca := dict }}
{{- if .Values.ca.crt }}
{{- $ca = buildCustomCert (.Values.ca.crt | b64enc) (.Values.ca.key | b64enc) }}
{{- else }}
{{- $ca = genCA "jumppod-test-ca" 3650 }}
{{- end }}
{{- $leaf := genSignedCert "" nil .Values.names (int .Values.days) $ca }}
{{- dict "ca" $ca.Cert "crt" $leaf.Cert "key" $leaf.Key | toJson }}
"#,
    )
    .unwrap();
    let (ca_crt, ca_key) = ca.unwrap_or_default();
    let values = json!({"names": names, "days": days, "ca": {"crt": ca_crt, "key": ca_key}});
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let made = MADE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let values_file = dir.join(format!("values-{made}.json"));
    std::fs::write(&values_file, values.to_string()).unwrap();
    let out = helm()
        .args(["template", "pairs"])
        .arg(&dir)
        .arg("--values")
        .arg(&values_file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rendered = text(&out.stdout);
    let json = rendered
        .lines()
        .find(|l| l.starts_with('{'))
        .expect("the pair");
    let pair: Value = serde_json::from_str(json).unwrap();
    let field = |k: &str| pair[k].as_str().unwrap().to_owned();
    Pair {
        ca: field("ca"),
        crt: field("crt"),
        key: field("key"),
    }
}

/// The namespaces of the releases whose webhook is [`served`]: its certificate names every
/// Service of each (`*.<namespace>.svc`).
pub const SERVED_NAMESPACES: &[&str] = &[
    "chart-disable",
    "chart-rename",
    "chart-name",
    "chart-rollback",
    "chart-uninstall",
    "chart-upgrade",
    "chart-gitops",
];

/// `jumppod webhook`, started once for the test process, serving a pair for the Services of
/// [`SERVED_NAMESPACES`] on 127.0.0.1 (the API server reaches it through [`reachable`]), and
/// the pair, which those releases give the chart as theirs (`webhook.tls.existingSecret`).
pub fn served() -> &'static (Webhook, Pair) {
    static SERVED: OnceLock<(Webhook, Pair)> = OnceLock::new();
    SERVED.get_or_init(|| {
        let names: Vec<String> = SERVED_NAMESPACES
            .iter()
            .map(|ns| format!("*.{ns}.svc"))
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let pair = pair(&names, 3650, None);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chart-served");
        let (cert, key) = write_pair(&dir, &pair);
        (Webhook::start_serving(&policy_module(), &cert, &key), pair)
    })
}

/// The policy module the webhook serves (the Makefile builds it and exports its path).
pub fn policy_module() -> String {
    std::env::var("JUMPPOD_POLICY_WASM")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../policy.wasm").into())
}

/// Writes the pair's certificate and key into `dir` as the kubelet updates a Secret volume
/// (each file written aside, then renamed over): the webhook reads them again on its next
/// handshake. Their paths.
pub fn write_pair(dir: &Path, pair: &Pair) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    for (path, content) in [(&cert, &pair.crt), (&key, &pair.key)] {
        let aside = path.with_extension("new");
        std::fs::write(&aside, content).unwrap();
        std::fs::rename(&aside, path).unwrap();
    }
    (cert, key)
}

/// The port the webhook listens on, for the chart's `webhook.service.port`.
pub fn port_of(webhook: &Webhook) -> u16 {
    webhook.addr.rsplit(':').next().unwrap().parse().unwrap()
}

/// What the chart renders, with its webhook Service as the plain control plane can reach it:
/// an ExternalName Service for 127.0.0.1 (the only `type: ClusterIP` the chart renders).
pub fn reachable(yaml: &str) -> String {
    const CLUSTER_IP: &str = "\n  type: ClusterIP\n";
    assert_eq!(
        yaml.matches(CLUSTER_IP).count(),
        1,
        "one Service of type ClusterIP, the webhook's:\n{yaml}"
    );
    yaml.replace(
        CLUSTER_IP,
        "\n  type: ExternalName\n  externalName: 127.0.0.1\n",
    )
}

/// The post-renderer helm runs for [`reachable`]: the same edit, by sed.
pub fn post_renderer() -> PathBuf {
    static SCRIPT: OnceLock<PathBuf> = OnceLock::new();
    SCRIPT
        .get_or_init(|| {
            use std::os::unix::fs::PermissionsExt as _;
            let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chart-reachable.sh");
            std::fs::write(
                &path,
                "#!/bin/sh\n# The webhook's Service as an ExternalName for 127.0.0.1 (host/tests/chart/live.rs).\n\
                 exec sed -e 's/^  type: ClusterIP$/  type: ExternalName\\n  externalName: 127.0.0.1/'\n",
            )
            .unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path
        })
        .clone()
}

/// A release of the chart in a namespace of its own, whose webhook judges the jump pods of
/// `covered` only (so no other test meets it), driven by helm as a tester of its own; its
/// namespaces and the release are removed when it is dropped.
pub struct Release {
    pub name: &'static str,
    pub ns: &'static str,
    pub covered: String,
    /// helm's user: the audit log names it on every request helm makes.
    pub user: String,
    values: PathBuf,
}

impl Release {
    /// The namespaces made; nothing installed yet.
    pub fn new(name: &'static str, ns: &'static str) -> Release {
        let covered = format!("{ns}-pods");
        namespace(ns);
        namespace(&covered);
        Release {
            name,
            ns,
            covered,
            user: fresh_user(UserKind::Tester),
            values: Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chart-{ns}-values.json")),
        }
    }

    /// The values of a release whose webhook is [`served`]: the pair in a Secret of the
    /// namespace (`webhook.tls.existingSecret`, with its CA as `webhook.tls.caBundle`: what an
    /// operator gives under GitOps), the Service's port the served webhook's, failurePolicy
    /// Fail, nothing running (the plain control plane runs no pod).
    pub fn served_values(&self) -> Value {
        let (webhook, pair) = served();
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "served-tls", "namespace": self.ns},
            "stringData": {"tls.crt": pair.crt, "tls.key": pair.key, "ca.crt": pair.ca},
        });
        kubectl_ok(&["apply", "-f", "-"], Some(&secret.to_string()));
        json!({
            "controller": {"replicas": 0},
            "webhook": {
                "enabled": true,
                "replicas": 1,
                "failurePolicy": "Fail",
                "onlyNamespaces": [self.covered],
                "service": {"port": port_of(webhook)},
                "tls": {"existingSecret": "served-tls", "caBundle": pair.ca},
            },
        })
    }

    /// `helm VERB RELEASE ...` (install, upgrade, rollback, uninstall) as the release's user,
    /// in its namespace.
    pub fn helm(&self, args: &[&str]) -> Output {
        helm()
            .args(args)
            .args(["--namespace", self.ns, "--kubeconfig"])
            .arg(kubeconfig_of(&self.user))
            .output()
            .unwrap()
    }

    /// [`Release::helm`], which must succeed.
    pub fn helm_ok(&self, args: &[&str]) -> String {
        let out = self.helm(args);
        assert!(
            out.status.success(),
            "helm {args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// `helm install` or `helm upgrade` of the chart with `values`, through the post-renderer.
    pub fn apply(&self, verb: &str, values: &Value) -> String {
        std::fs::write(&self.values, values.to_string()).unwrap();
        let chart = chart();
        let renderer = post_renderer();
        self.helm_ok(&[
            verb,
            self.name,
            chart.to_str().unwrap(),
            "--values",
            self.values.to_str().unwrap(),
            "--post-renderer",
            renderer.to_str().unwrap(),
        ])
    }

    /// The release's webhook configurations in the cluster (by its label and its namespace in
    /// their names): (kind, name, uid, the object).
    pub fn configurations(&self) -> Vec<(String, String, String, Value)> {
        let list = get(&[
            "mutatingwebhookconfigurations,validatingwebhookconfigurations",
            "-l",
            &format!("app.kubernetes.io/instance={}", self.name),
        ])
        .unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            // Cluster-scoped, named after the release's namespace: another namespace's release
            // of the same name has others.
            .filter(|o| {
                o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(&format!("-{}", self.ns)))
            })
            .map(|o| {
                let field = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (
                    field(&o["kind"]),
                    field(&o["metadata"]["name"]),
                    field(&o["metadata"]["uid"]),
                    o.clone(),
                )
            })
            .collect()
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        // Nothing here may panic: a panic while a failed test unwinds aborts the binary.
        let _ = self.helm(&["uninstall", self.name]);
        for ns in [self.ns, self.covered.as_str()] {
            let _ = kubectl(&["delete", "namespace", ns, "--wait=false"], None);
        }
    }
}

/// `helm template` of the chart as `release` in `ns` with `values`: the objects as text.
pub fn rendered(release: &str, ns: &str, values: &Value) -> String {
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chart-{ns}-template.json"));
    std::fs::write(&file, values.to_string()).unwrap();
    let out = helm()
        .args(["template", release])
        .arg(chart())
        .args(["--namespace", ns, "--values"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The (kind, name) of every document of a YAML stream, in order.
pub fn names(yaml: &str) -> Vec<(String, String)> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|doc| !doc.is_null())
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or_default().to_owned(),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}
