//! `jumppod webhook` as a process: the real binary over real HTTPS, with the test pair in
//! tests/tls (ca.crt signed tls.crt for 127.0.0.1 and localhost; other.key is a key of no
//! certificate; made with openssl, valid for 100 years, the CA's key thrown away). What a
//! cluster sees of it: the module's answer to a review, the probes, a 404 for what it does not
//! serve, the deadline ending a policy that never answers, and the configurations it refuses
//! before it serves anything.
//!
//! Every wait is bounded and names what it waited for: a webhook that hangs fails its test.

use base64::Engine as _;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio_rustls::rustls;

/// Long enough for a debug build to compile policy.wasm on a busy machine; only a hang takes it.
const START: Duration = Duration::from_secs(180);
/// One request and its answer; the spinning policy's deadline is 2 ticks of a second.
const ANSWER: Duration = Duration::from_secs(60);

fn tls(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tls")
        .join(name)
}

/// A module built by the Makefile: $VAR, else its place in the workspace's target directory.
fn module(var: &str, file: &str, make: &str) -> String {
    let path = std::env::var(var).unwrap_or_else(|_| {
        format!(
            "{}/../target/wasm32-wasip1/release/{file}",
            env!("CARGO_MANIFEST_DIR")
        )
    });
    assert!(
        std::path::Path::new(&path).is_file(),
        "{path} is missing: `make {make}` builds it"
    );
    path
}

fn policy_wasm() -> String {
    module("JUMPPOD_POLICY_WASM", "jumppod_policy.wasm", "policy")
}

/// tests/fixtures/spin: `validate` never returns, its settings are valid.
fn spin_wasm() -> String {
    module("JUMPPOD_SPIN_WASM", "jumppod_spin.wasm", "spin")
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../policy/test_data/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn command(args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_jumppod"));
    command
        .arg("webhook")
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("JUMPPOD_POLICY_WASM")
        .kill_on_drop(true);
    command
}

/// A running `jumppod webhook`; killed when dropped.
struct Webhook {
    _child: tokio::process::Child,
    addr: String,
}

impl Webhook {
    /// Started on a free port of 127.0.0.1 with the test pair; returns once it says where it
    /// serves.
    async fn start(policy: &str) -> Webhook {
        let (cert, key) = (tls("tls.crt"), tls("tls.key"));
        let mut child = command(&["--listen", "127.0.0.1:0", "--policy", policy])
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .stdout(Stdio::piped())
            .spawn()
            .expect("run jumppod webhook");
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        tokio::time::timeout(START, stdout.read_line(&mut line))
            .await
            .unwrap_or_else(|_| panic!("the webhook did not say where it serves within {START:?}"))
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("serving AdmissionReviews on https://")
            .and_then(|rest| rest.strip_suffix("/mutate"))
            .unwrap_or_else(|| panic!("the webhook did not start: {line:?}"))
            .to_owned();
        Webhook {
            _child: child,
            addr,
        }
    }

    /// One HTTPS request, trusting only tests/tls/ca.crt for 127.0.0.1: the status code and
    /// the body.
    async fn request(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let exchange = async {
            let mut roots = rustls::RootCertStore::empty();
            let ca = std::fs::read(tls("ca.crt")).unwrap();
            for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&ca) {
                roots.add(cert.unwrap()).unwrap();
            }
            let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
            let tcp = tokio::net::TcpStream::connect(&self.addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .expect("a TLS session with the certificate tests/tls/ca.crt signed");
            let request = format!(
                "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                self.addr,
                body.len()
            );
            tls.write_all(request.as_bytes()).await.unwrap();
            let mut answer = String::new();
            tls.read_to_string(&mut answer).await.unwrap();
            answer
        };
        let answer = tokio::time::timeout(ANSWER, exchange)
            .await
            .unwrap_or_else(|_| panic!("no answer to {method} {path} within {ANSWER:?}"));
        let (head, body) = answer
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status code in {head:?}"));
        (status, body.to_owned())
    }

    async fn review(&self, body: &str) -> Value {
        let (status, answer) = self.request("POST", "/mutate", body).await;
        assert_eq!(status, 200, "{answer}");
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
    }
}

/// The legacy bare pod of policy/test_data, sent by the API server as an AdmissionReview:
/// the module's answer comes back under its uid, with the JSONPatch that gives the pod the
/// current labels and the default resources (as kwctl run answers it, policy/e2e.bats).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_is_answered_with_the_modules_patch() {
    let webhook = Webhook::start(&policy_wasm()).await;
    let mut review = webhook
        .review(&fixture("admission_review_legacy_bare_pod_create.json"))
        .await;
    let patch = review["response"]
        .as_object_mut()
        .unwrap()
        .remove("patch")
        .expect("a patch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(patch.as_str().expect("the patch is a string"))
        .expect("the patch is base64");
    let patch: Value = serde_json::from_slice(&patch).expect("the patch is JSON");
    assert_eq!(
        review,
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {
                "uid": "9c2f5e8b-1a4d-4c7f-b0e3-6a9d2f5c8b41",
                "allowed": true,
                "patchType": "JSONPatch",
            }
        })
    );
    assert_eq!(
        patch,
        json!([
            {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1instance", "value": "dstack-main-ssh-jump-pod"},
            {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1managed-by", "value": "dstack"},
            {"op": "add", "path": "/metadata/labels/k8s.dstack.ai~1project", "value": "main"},
            {"op": "add", "path": "/spec/containers/0/resources/limits", "value": {"cpu": "500m", "memory": "1Gi"}},
            {"op": "add", "path": "/spec/containers/0/resources/requests",
             "value": {"cpu": "500m", "ephemeral-storage": "64Mi", "memory": "1Gi"}},
        ])
    );
}

/// The probes answer without the policy: with a policy that never returns, they still do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_readyz_answer_ok_without_calling_the_policy() {
    let webhook = Webhook::start(&spin_wasm()).await;
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            webhook.request("GET", path, "").await,
            (200, "ok\n".to_owned()),
            "{path}"
        );
    }
}

/// What the webhook does not serve is a 404 saying where reviews go, and no policy call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_path_or_method_gets_404_naming_post_mutate() {
    let webhook = Webhook::start(&spin_wasm()).await;
    for (method, path) in [
        ("GET", "/metrics"),
        ("POST", "/validate"),
        ("GET", "/mutate"),
    ] {
        let (status, body) = webhook.request(method, path, "{}").await;
        assert_eq!(status, 404, "{method} {path}: {body}");
        assert_eq!(
            body,
            format!("jumppod webhook: no {path} here; AdmissionReviews go to POST /mutate\n"),
            "{method} {path}"
        );
    }
}

/// A policy that never returns is ended by the epoch deadline: the review is refused with
/// code 500 saying the policy failed, as policy-server refuses it, and the webhook serves on
/// (a second review gets the same answer, the probe still answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_past_its_deadline_is_refused_with_500_and_the_webhook_serves_on() {
    let webhook = Webhook::start(&spin_wasm()).await;
    let body = fixture("admission_review_legacy_bare_pod_create.json");
    for attempt in ["first", "second"] {
        let review = webhook.review(&body).await;
        let response = &review["response"];
        let message = response["status"]["message"].as_str().unwrap_or_default();
        assert_eq!(
            response["uid"], "9c2f5e8b-1a4d-4c7f-b0e3-6a9d2f5c8b41",
            "{attempt}: {review}"
        );
        assert_eq!(response["allowed"], false, "{attempt}: {review}");
        assert_eq!(response["status"]["code"], 500, "{attempt}: {review}");
        assert!(
            message.starts_with("jumppod webhook: the policy failed: ")
                && message.contains("interrupt"),
            "{attempt}: the deadline's trap, named: {message}"
        );
        assert!(response.get("patch").is_none(), "{attempt}: {review}");
    }
    assert_eq!(webhook.request("GET", "/healthz", "").await.0, 200);
}

/// A start that must fail: the exit code and stderr, once the process ended (bounded).
async fn refused_start(args: &[&str], cert: PathBuf, key: PathBuf) -> (Option<i32>, String) {
    let child = command(&[&["--listen", "127.0.0.1:0"], args].concat())
        .arg("--tls-cert")
        .arg(cert)
        .arg("--tls-key")
        .arg(key)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run jumppod webhook");
    let out = tokio::time::timeout(START, child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!("the webhook did not stop within {START:?}: it should refuse to start")
        })
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("serving"),
        "it must refuse before it serves: {stdout}"
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A serving pair that is no pair, or no certificate at all: exit 2 before serving, naming the
/// flag, the file and what is wrong with it.
#[rstest::rstest]
#[case::a_key_of_another_certificate(
    "tls.crt",
    "other.key",
    "invalid `--tls-key` \"{key}\": does not fit the certificate"
)]
#[case::a_key_where_the_certificate_goes(
    "tls.key",
    "tls.key",
    "invalid `--tls-cert` \"{cert}\": holds no certificate"
)]
#[case::no_certificate_file(
    "missing.crt",
    "tls.key",
    "invalid `--tls-cert` \"{cert}\": cannot read a PEM certificate"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_serving_pair_stops_it_at_start(
    #[case] cert: &str,
    #[case] key: &str,
    #[case] says: &str,
) {
    let (cert, key) = (tls(cert), tls(key));
    let says = says
        .replace("{cert}", &cert.display().to_string())
        .replace("{key}", &key.display().to_string());
    let (code, stderr) = refused_start(&["--policy", &spin_wasm()], cert, key).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&says), "{says}\nnot in:\n{stderr}");
}

/// Settings the module refuses stop it at start, with the module's own message (what kwctl
/// says of them): exit 2, nothing served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_settings_stop_it_at_start() {
    let (code, stderr) = refused_start(
        &[
            "--policy",
            &policy_wasm(),
            "--settings",
            r#"{"cpu": {"minimum": "50m"}}"#,
        ],
        tls("tls.crt"),
        tls("tls.key"),
    )
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "invalid `--settings` \"{\\\"cpu\\\":{\\\"minimum\\\":\\\"50m\\\"}}\": Provided settings are not valid: invalid setting `cpu.minimum`: 50m is below the floor 100m"
        ),
        "{stderr}"
    );
}

const LEGACY_UID: &str = "9c2f5e8b-1a4d-4c7f-b0e3-6a9d2f5c8b41";

/// The body limit is controller-runtime's 7 MiB (an object and an oldObject of up to 3 MiB
/// each, and the review around them): a review just under it gets the module's answer; one
/// byte past it is refused with code 400 under the uid read from its front, since an answer
/// without the uid makes the API server count the call as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_7_mib_is_reviewed_and_a_longer_one_refused_under_its_uid() {
    const LIMIT: usize = 7 * 1024 * 1024;
    let webhook = Webhook::start(&policy_wasm()).await;
    let mut review: Value =
        serde_json::from_str(&fixture("admission_review_legacy_bare_pod_create.json")).unwrap();
    let size = review.to_string().len();
    review["request"]["object"]["metadata"]["annotations"] =
        json!({"padding": "x".repeat(LIMIT - size - 64)});
    let body = review.to_string();
    assert!(
        body.len() > 6 * 1024 * 1024 && body.len() <= LIMIT,
        "{}",
        body.len()
    );
    let answer = webhook.review(&body).await;
    let response = &answer["response"];
    assert_eq!(response["uid"], LEGACY_UID, "{}", response["status"]);
    assert_eq!(response["allowed"], true, "{}", response["status"]);
    assert!(response.get("patch").is_some(), "the module's patch");

    let front = r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"past-the-limit","object":{"metadata":{"annotations":{"padding":""#;
    let body = format!("{front}{}", "x".repeat(LIMIT + 1 - front.len()));
    let answer = webhook.review(&body).await;
    let response = &answer["response"];
    assert_eq!(response["uid"], "past-the-limit", "{response}");
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 400, "{response}");
    assert_eq!(
        response["status"]["message"],
        "jumppod webhook: cannot read the body: it is longer than 7340032 bytes (7 MiB)"
    );
}
