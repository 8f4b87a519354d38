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
    child: tokio::process::Child,
    addr: String,
    log: Log,
}

/// The webhook's stderr (its log, jumppod's own lines at debug), line by line: read on in a
/// task, so the webhook never blocks on a full pipe.
struct Log {
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Log {
    fn of(child: &mut tokio::process::Child) -> Log {
        let stderr = child.stderr.take().expect("stderr piped");
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut stderr = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = stderr.next_line().await {
                let _ = tx.send(line);
            }
        });
        Log {
            lines,
            seen: Vec::new(),
        }
    }

    /// Every line to the end of stderr (bounded), all seen ones included.
    async fn rest(&mut self) -> String {
        tokio::time::timeout(ANSWER, async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line);
            }
        })
        .await
        .unwrap_or_else(|_| panic!("stderr did not end within {ANSWER:?}"));
        self.seen.join("\n")
    }

    /// The first line from now on that contains `text` (bounded).
    async fn wait_for(&mut self, text: &str) -> String {
        let found = tokio::time::timeout(ANSWER, async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line.clone());
                if line.contains(text) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(line)) => line,
            Ok(None) => panic!("stderr ended without {text:?}:\n{}", self.seen.join("\n")),
            Err(_) => panic!(
                "no {text:?} on stderr within {ANSWER:?}:\n{}",
                self.seen.join("\n")
            ),
        }
    }
}

/// How a test starts the webhook: the module, the serving pair, more flags.
struct Start<'a> {
    policy: &'a str,
    cert: PathBuf,
    key: PathBuf,
    args: &'a [&'a str],
}

impl<'a> Start<'a> {
    fn new(policy: &'a str) -> Start<'a> {
        Start {
            policy,
            cert: tls("tls.crt"),
            key: tls("tls.key"),
            args: &[],
        }
    }

    fn spawn(&self) -> (tokio::process::Child, Log) {
        let mut child = command(&["--listen", "127.0.0.1:0", "--policy", self.policy])
            .args(self.args)
            .arg("--tls-cert")
            .arg(&self.cert)
            .arg("--tls-key")
            .arg(&self.key)
            .env("RUST_LOG", "warn,jumppod_host=debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run jumppod webhook");
        let log = Log::of(&mut child);
        (child, log)
    }

    /// Returns once the webhook says it serves (the module compiled, the settings accepted).
    async fn start(self) -> Webhook {
        let (mut child, log) = self.spawn();
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
        Webhook { child, addr, log }
    }
}

/// A client trusting only tests/tls/ca.crt and rotated-ca.crt, for 127.0.0.1.
fn client() -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for ca in ["ca.crt", "rotated-ca.crt"] {
        let ca = std::fs::read(tls(ca)).unwrap();
        for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&ca) {
            roots.add(cert.unwrap()).unwrap();
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

type Session = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A TLS session with the webhook at `addr`, and the certificate it served (DER).
async fn connect(addr: &str) -> (Session, Vec<u8>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let session = tokio::time::timeout(ANSWER, client().connect(name, tcp))
        .await
        .unwrap_or_else(|_| panic!("no TLS handshake within {ANSWER:?}"))
        .expect("a TLS session with a certificate tests/tls's CAs signed");
    let served = session
        .get_ref()
        .1
        .peer_certificates()
        .expect("a certificate")[0]
        .to_vec();
    (session, served)
}

/// The first certificate of a PEM file (DER).
fn certificate(path: &std::path::Path) -> Vec<u8> {
    let pem = std::fs::read(path).unwrap();
    rustls::pki_types::pem::PemObject::pem_slice_iter(&pem)
        .next()
        .map(|cert: Result<rustls::pki_types::CertificateDer, _>| cert.unwrap().to_vec())
        .expect("a certificate")
}

/// One request on an open session, kept alive: the status code and the body (read by its
/// Content-Length).
async fn ask(session: &mut Session, method: &str, path: &str, body: &str) -> (u16, String) {
    let (status, _, body) = ask_with_head(session, method, path, body).await;
    (status, body)
}

/// [`ask`], with the answer's head (status line and headers) too.
async fn ask_with_head(
    session: &mut Session,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String, String) {
    let exchange = async {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        session.write_all(request.as_bytes()).await.unwrap();
        // tokio-rustls's write may leave the last records in rustls's buffer when the socket
        // is full; only a flush sends them. Without it a large body's tail waited there while
        // this side waited for the answer (a hang under load).
        session.flush().await.unwrap();
        let mut answer = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            let n = session.read(&mut buffer).await.unwrap();
            assert!(n > 0, "the connection closed mid-answer");
            answer.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&answer);
            if let Some((head, rest)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(str::to_owned)
                    })
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or_else(|| panic!("no Content-Length in {head:?}"));
                if rest.len() >= length {
                    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap();
                    return (status, head.to_owned(), rest[..length].to_owned());
                }
            }
        }
    };
    tokio::time::timeout(ANSWER, exchange)
        .await
        .unwrap_or_else(|_| panic!("no answer to {method} {path} within {ANSWER:?}"))
}

/// Whether an answer's head says the server closes the connection after it.
fn closes(head: &str) -> bool {
    head.to_ascii_lowercase().contains("connection: close")
}

/// The session ends (end of stream, nothing more sent) within [`ANSWER`].
async fn closed(session: &mut Session) {
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(ANSWER, session.read_to_end(&mut rest)).await;
    assert!(
        matches!(ended, Ok(Ok(0))),
        "the connection stays open after an answer that closes it: {ended:?}"
    );
}

/// A new connection to `addr` is refused: nothing listens there any more.
async fn refused(addr: &str, when: &str) {
    let refused = tokio::net::TcpStream::connect(addr).await;
    assert_eq!(
        refused.as_ref().err().map(std::io::Error::kind),
        Some(std::io::ErrorKind::ConnectionRefused),
        "a connection {when}: {refused:?}"
    );
}

/// One HTTPS request on a connection of its own (`Connection: close`): the status code and
/// the body.
async fn request(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let exchange = async {
        let (mut tls, _) = connect(addr).await;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tls.write_all(request.as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
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

impl Webhook {
    /// Started on a free port of 127.0.0.1 with the test pair; returns once it says where it
    /// serves.
    async fn start(policy: &str) -> Webhook {
        Start::new(policy).start().await
    }

    async fn request(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        request(&self.addr, method, path, body).await
    }

    /// SIGTERM, as the kubelet stops a container.
    fn terminate(&self) {
        let pid = self.child.id().expect("running").to_string();
        let kill = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(kill.success());
    }

    async fn review(&self, body: &str) -> Value {
        let (status, answer) = self.request("POST", "/mutate", body).await;
        assert_eq!(status, 200, "{answer}");
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
    }

    /// [`Webhook::review`], but a review unanswered within three quarters of [`ANSWER`] (before
    /// the request's own limit) fails with what the webhook logged meanwhile: its debug lines
    /// say how far the review got.
    async fn review_or_log(&mut self, body: &str) -> Value {
        let limit = ANSWER * 3 / 4;
        match tokio::time::timeout(limit, self.review(body)).await {
            Ok(answer) => answer,
            Err(_) => {
                let mut logged = Vec::new();
                while let Ok(line) = self.log.lines.try_recv() {
                    logged.push(line);
                }
                panic!(
                    "no answer within {limit:?}; the webhook logged:\n{}\n{}",
                    self.log.seen.join("\n"),
                    logged.join("\n")
                );
            }
        }
    }
}

/// The legacy bare pod of policy/test_data, sent by the API server as an AdmissionReview:
/// the module's answer comes back under its uid, with the JSONPatch that gives the pod the
/// current labels and the default resources (as kwctl run answers it, policy/e2e.bats), and
/// the webhook's mark of what its mutating pass admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_is_answered_with_the_modules_patch() {
    // The kit off: the patch is the labels and resources alone (policy_wasm checks the kit's).
    let policy = policy_wasm();
    let webhook = Start {
        args: &["--settings", r#"{"kit": false}"#],
        ..Start::new(&policy)
    }
    .start()
    .await;
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
            {"op": "add", "path": "/metadata/annotations", "value": {"jumppod.dstack.ai/mutated": "true"}},
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

/// `/metrics` gives the seconds the served certificate has left (tests/tls/tls.crt expires on
/// 2126-11-07T18:23:48Z, `openssl x509 -noout -enddate`), while the module compiles too; the
/// log names the date.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_give_the_seconds_the_certificate_has_left_and_the_log_its_date() {
    const NOT_AFTER: i64 = 4_949_749_428; // 2126-11-07T18:23:48Z
    let mut webhook = Webhook::start(&spin_wasm()).await;
    let now = || {
        i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
        )
        .unwrap()
    };
    let before = now();
    let (status, body) = webhook.request("GET", "/metrics", "").await;
    let after = now();
    assert_eq!(status, 200, "{body}");
    let value: i64 = body
        .lines()
        .find_map(|l| l.strip_prefix("jumppod_webhook_certificate_expiry_seconds "))
        .unwrap_or_else(|| panic!("no gauge in:\n{body}"))
        .parse()
        .unwrap();
    assert!(
        (NOT_AFTER - after..=NOT_AFTER - before).contains(&value),
        "{value} s left, between {} and {}",
        NOT_AFTER - after,
        NOT_AFTER - before
    );
    assert!(
        body.contains("# TYPE jumppod_webhook_certificate_expiry_seconds gauge"),
        "{body}"
    );
    let logged = webhook.log.wait_for("serving certificate valid").await;
    assert!(logged.contains("2126-11-07T18:23:48Z"), "{logged}");
}

/// A certificate whose renewal is due (here long expired: tests/tls/expired.crt, valid on
/// 2020-01-01 only) is a warning at start, naming its date and what renews it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_due_for_renewal_is_a_warning_at_start() {
    let (mut child, mut log) = Start {
        cert: tls("expired.crt"),
        key: tls("expired.key"),
        ..Start::new(&spin_wasm())
    }
    .spawn();
    let warned = log
        .wait_for("the serving certificate expires soon or has expired")
        .await;
    assert!(warned.contains("WARN"), "{warned}");
    assert!(warned.contains("2020-01-02T00:00:00Z"), "{warned}");
    assert!(warned.contains("helm upgrade"), "{warned}");
    let _ = child.kill().await;
}

/// What the webhook does not serve is a 404 saying where reviews go, and no policy call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_path_or_method_gets_404_naming_post_mutate_and_validate() {
    let webhook = Webhook::start(&spin_wasm()).await;
    for (method, path) in [
        ("POST", "/metrics"),
        ("POST", "/review"),
        ("GET", "/mutate"),
        ("GET", "/validate"),
    ] {
        let (status, body) = webhook.request(method, path, "{}").await;
        assert_eq!(status, 404, "{method} {path}: {body}");
        assert_eq!(
            body,
            format!(
                "jumppod webhook: no {path} here; AdmissionReviews go to POST /mutate or /validate\n"
            ),
            "{method} {path}"
        );
    }
}

/// A policy that never returns is ended by the epoch deadline: the review is refused with
/// code 500 saying the policy failed, as policy-server refuses it, and the webhook serves on
/// (a second review gets the same answer, the probe still answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_past_its_deadline_is_refused_with_500_and_the_webhook_serves_on() {
    let mut webhook = Webhook::start(&spin_wasm()).await;
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
        // The operator sees it at the default level (warn), naming the review.
        let logged = webhook
            .log
            .wait_for("the policy failed; the review is refused")
            .await;
        assert!(
            logged.contains("WARN") && logged.contains("9c2f5e8b-1a4d-4c7f-b0e3-6a9d2f5c8b41"),
            "{logged}"
        );
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

/// A directory of this test's own under the system's temporary directory, emptied.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jumppod-webhook-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `to` replaced by a copy of `from` at once (a new file renamed over it), as cert-manager's
/// and the kubelet's writes replace a Secret's files.
fn replace(from: &std::path::Path, to: &std::path::Path) {
    let next = to.with_extension("next");
    std::fs::copy(from, &next).unwrap();
    std::fs::rename(&next, to).unwrap();
}

const LEGACY_UID: &str = "9c2f5e8b-1a4d-4c7f-b0e3-6a9d2f5c8b41";

/// The body limit is controller-runtime's 7 MiB (an object and an oldObject of up to 3 MiB
/// each, and the review around them): a review just under it gets the module's answer; one
/// byte past it is refused with code 400 under the uid read from its front, since an answer
/// without the uid makes the API server count the call as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_7_mib_is_reviewed_and_a_longer_one_refused_under_its_uid() {
    const LIMIT: usize = 7 * 1024 * 1024;
    let mut webhook = Webhook::start(&policy_wasm()).await;
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
    let answer = webhook.review_or_log(&body).await;
    let response = &answer["response"];
    assert_eq!(response["uid"], LEGACY_UID, "{}", response["status"]);
    assert_eq!(response["allowed"], true, "{}", response["status"]);
    assert!(response.get("patch").is_some(), "the module's patch");

    let front = r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"past-the-limit","object":{"metadata":{"annotations":{"padding":""#;
    let body = format!("{front}{}", "x".repeat(LIMIT + 1 - front.len()));
    let answer = webhook.review_or_log(&body).await;
    let response = &answer["response"];
    assert_eq!(response["uid"], "past-the-limit", "{response}");
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 400, "{response}");
    assert_eq!(
        response["status"]["message"],
        "jumppod webhook: cannot read the body: it is longer than 7340032 bytes (7 MiB)"
    );
}

/// The serving pair replaced in place (as cert-manager rotates it) is served from the next
/// handshake on, without a restart; a connection opened before gets its next answer and is
/// closed after it, so that the client verifies the new certificate. A pair that does not load
/// on the way (a certificate half written, a key of another certificate) keeps the previous one
/// served, with a warning naming the flag, the file and the problem. The files are compared on
/// every handshake, so the handshake right after a change already sees it: no polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_serving_pair_is_served_from_the_next_handshake_and_older_connections_close_after_their_answer()
 {
    let dir = scratch("rotation");
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::copy(tls("tls.crt"), &cert).unwrap();
    std::fs::copy(tls("tls.key"), &key).unwrap();
    let mut webhook = Start {
        cert: cert.clone(),
        key: key.clone(),
        ..Start::new(&spin_wasm())
    }
    .start()
    .await;
    let (a, b) = (
        certificate(&tls("tls.crt")),
        certificate(&tls("rotated.crt")),
    );
    let (mut before, served) = connect(&webhook.addr).await;
    assert_eq!(served, a, "the pair it started with");
    assert_eq!(
        ask(&mut before, "GET", "/healthz", "").await,
        (200, "ok\n".to_owned())
    );

    // A writer not done yet: half of the new certificate.
    let rotated = std::fs::read(tls("rotated.crt")).unwrap();
    std::fs::write(&cert, &rotated[..rotated.len() / 2]).unwrap();
    assert_eq!(
        connect(&webhook.addr).await.1,
        a,
        "a half-written certificate"
    );
    let warning = webhook.log.wait_for("does not load").await;
    assert!(
        warning.contains("flag=--tls-cert")
            && warning.contains(&format!("file={}", cert.display()))
            && warning.contains("problem="),
        "{warning}"
    );

    // The new certificate, the old key.
    replace(&tls("rotated.crt"), &cert);
    assert_eq!(
        connect(&webhook.addr).await.1,
        a,
        "a key of another certificate"
    );
    let warning = webhook.log.wait_for("does not load").await;
    assert!(
        warning.contains("flag=--tls-key")
            && warning.contains(&format!("file={}", key.display()))
            && warning.contains("does not fit the certificate"),
        "{warning}"
    );

    replace(&tls("rotated.key"), &key);
    let (mut after, served) = connect(&webhook.addr).await;
    assert_eq!(served, b, "the rotated pair, from the next handshake on");
    webhook.log.wait_for("serving certificate reloaded").await;
    let (status, head, _) = ask_with_head(&mut after, "GET", "/healthz", "").await;
    assert_eq!(status, 200);
    assert!(
        !closes(&head),
        "a connection made with the current pair is kept alive: {head}"
    );
    // The connection made with the old pair gets its answer, and is closed after it: the
    // client's next connection verifies the new certificate.
    let (status, head, _) = ask_with_head(&mut before, "GET", "/healthz", "").await;
    assert_eq!(status, 200);
    assert!(
        closes(&head),
        "the connection opened before the rotation is closed after its answer: {head}"
    );
    assert_eq!(
        before.get_ref().1.peer_certificates().unwrap()[0].to_vec(),
        a
    );
    closed(&mut before).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// SIGTERM while a review is in flight (the spinning module holds it until its 2 s deadline):
/// the listener closes at once (a new connection is refused), the review still gets its
/// AdmissionReview, and the process exits 0 once it is answered. The log shows the order:
/// shutting down, then the review answered, then every connection finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_review_in_flight_finish_refuses_new_connections_and_exits_0() {
    let mut webhook = Webhook::start(&spin_wasm()).await;
    let addr = webhook.addr.clone();
    let in_flight = tokio::spawn(async move {
        request(
            &addr,
            "POST",
            "/mutate",
            &fixture("admission_review_legacy_bare_pod_create.json"),
        )
        .await
    });
    webhook.log.wait_for("review started").await;
    webhook.terminate();
    webhook.log.wait_for("shutting down").await;
    refused(&webhook.addr, "after SIGTERM").await;
    let (status, answer) = tokio::time::timeout(ANSWER, in_flight)
        .await
        .unwrap_or_else(|_| panic!("the review in flight got no answer within {ANSWER:?}"))
        .unwrap();
    assert_eq!(status, 200, "{answer}");
    let review: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(review["response"]["uid"], LEGACY_UID, "{review}");
    assert_eq!(
        review["response"]["status"]["code"], 500,
        "the spin's deadline: {review}"
    );
    let exit = tokio::time::timeout(ANSWER, webhook.child.wait())
        .await
        .unwrap_or_else(|_| panic!("the webhook did not exit within {ANSWER:?} of SIGTERM"))
        .unwrap();
    webhook.log.wait_for("every connection finished").await;
    assert_eq!(exit.code(), Some(0), "{}", webhook.log.seen.join("\n"));
    let at = |text: &str| {
        webhook
            .log
            .seen
            .iter()
            .position(|l| l.contains(text))
            .unwrap_or_else(|| panic!("no {text:?} in the log"))
    };
    assert!(
        at("review started") < at("shutting down")
            && at("shutting down") < at(&format!("reviewed uid=\"{LEGACY_UID}\"")),
        "the review was answered after SIGTERM:\n{}",
        webhook.log.seen.join("\n")
    );
}

/// SIGTERM with `--drain-delay`: for the delay the webhook still accepts and answers (a
/// review on a connection kept alive from before, a new connection's /readyz), but /readyz
/// answers 503 and every answer closes its connection, so the client's next request opens a
/// new one, where a Service would by then send it. Only then does the listener close, and it
/// exits 0. Without the delay (the test above) the listener closes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_drain_delay_answers_on_closing_each_connection_then_stops_listening() {
    let mut webhook = Start {
        args: &["--drain-delay", "3s"],
        ..Start::new(&policy_wasm())
    }
    .start()
    .await;
    let (mut kept, _) = connect(&webhook.addr).await;
    let (status, head, _) = ask_with_head(&mut kept, "GET", "/readyz", "").await;
    assert_eq!(status, 200);
    assert!(!closes(&head), "{head}");

    webhook.terminate();
    webhook.log.wait_for("draining").await;

    // The kept-alive connection: its next review is answered, and closes it.
    let review = fixture("admission_review_legacy_bare_pod_create.json");
    let (status, head, body) = ask_with_head(&mut kept, "POST", "/mutate", &review).await;
    assert_eq!(status, 200, "{body}");
    assert!(closes(&head), "{head}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["response"]["uid"], LEGACY_UID, "{answer}");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    closed(&mut kept).await;

    // A new connection is still accepted: not ready, and closed after the answer.
    let (mut late, _) = connect(&webhook.addr).await;
    let (status, head, body) = ask_with_head(&mut late, "GET", "/readyz", "").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("shutting down"), "{body}");
    assert!(closes(&head), "{head}");

    // The drain over: the listener is closed, and the process exits 0.
    webhook.log.wait_for("shutting down").await;
    refused(&webhook.addr, "after the drain").await;
    let exit = tokio::time::timeout(ANSWER, webhook.child.wait())
        .await
        .unwrap_or_else(|_| panic!("the webhook did not exit within {ANSWER:?} of the drain"))
        .unwrap();
    assert_eq!(exit.code(), Some(0), "{}", webhook.log.seen.join("\n"));
}

/// A FIFO as the module: the webhook listens first and blocks reading the module until the
/// test writes it, so "not ready yet" lasts exactly as long as the test wants.
fn fifo(dir: &std::path::Path) -> PathBuf {
    let fifo = dir.join("policy.wasm");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo {}", fifo.display());
    fifo
}

/// The address in the webhook's "listening" log line (`addr=...`).
async fn listening(log: &mut Log) -> String {
    let line = log.wait_for("listening").await;
    line.split("addr=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no addr= in {line:?}"))
        .to_owned()
}

/// Bound before the module is compiled: /healthz answers at once, /readyz answers 503 saying
/// why, and a review is refused with code 503 under its uid, until the module is compiled and
/// its settings accepted; then the webhook says it serves and /readyz answers ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_and_reviews_refused_until_the_module_is_compiled() {
    let dir = scratch("not-ready");
    let module = fifo(&dir);
    let policy = module.display().to_string();
    let (mut child, mut log) = Start::new(&policy).spawn();
    let addr = listening(&mut log).await;
    assert_eq!(
        request(&addr, "GET", "/healthz", "").await,
        (200, "ok\n".to_owned())
    );
    let not_ready =
        "jumppod webhook: not ready: the policy module is being compiled and its settings checked";
    assert_eq!(
        request(&addr, "GET", "/readyz", "").await,
        (503, format!("{not_ready}\n"))
    );
    let (status, answer) = request(
        &addr,
        "POST",
        "/mutate",
        &fixture("admission_review_legacy_bare_pod_create.json"),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let review: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(
        review["response"],
        json!({"uid": LEGACY_UID, "allowed": false, "status": {"code": 503, "message": not_ready}})
    );

    let wasm = std::fs::read(spin_wasm()).unwrap();
    tokio::task::spawn_blocking(move || std::fs::write(module, wasm))
        .await
        .unwrap()
        .unwrap();
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    tokio::time::timeout(START, stdout.read_line(&mut line))
        .await
        .unwrap_or_else(|_| panic!("not ready within {START:?} of the module written"))
        .unwrap();
    assert_eq!(
        line,
        format!("serving AdmissionReviews on https://{addr}/mutate\n")
    );
    assert_eq!(
        request(&addr, "GET", "/readyz", "").await,
        (200, "ok\n".to_owned())
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A module that does not compile, read after the listener is bound: the process still exits
/// 2 with the error it gives at start, and never says it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_does_not_compile_after_listening_exits_2() {
    let dir = scratch("bad-module");
    let module = fifo(&dir);
    let policy = module.display().to_string();
    let (child, mut log) = Start::new(&policy).spawn();
    listening(&mut log).await;
    tokio::task::spawn_blocking(move || std::fs::write(module, b"not a wasm module"))
        .await
        .unwrap()
        .unwrap();
    let out = tokio::time::timeout(START, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the webhook did not stop within {START:?}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("serving"), "{stdout}");
    let stderr = log.rest().await;
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.lines().any(|l| l.starts_with("error: ")),
        "the error it gives at start: {stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
