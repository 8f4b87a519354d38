//! The Kubernetes client as the host uses it: built the usual way (`--kubeconfig`,
//! `KUBECONFIG`, `~/.kube/config`, in-cluster; `--context`), every call retried on transient
//! errors (429 honouring Retry-After, header or Status, 5xx, timeouts, dropped connections) with backoff within
//! one deadline, permanent errors explained.

use crate::error::HostError;
use http_body_util::BodyExt as _;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How to reach the cluster.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// Per-request read timeout: a stalled request is abandoned and retried.
    pub request_timeout: Duration,
    /// A client for watches: a watch is silent while nothing changes, so its read timeout is
    /// the one kube-rs uses for them (295 s, beyond the 290 s a watch request asks the server
    /// for), not `request_timeout`.
    pub watch: bool,
}

/// Read timeout of a watch client.
pub const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(295);

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            kubeconfig: None,
            context: None,
            request_timeout: Duration::from_secs(10),
            watch: false,
        }
    }
}

/// Builds a client; also returns the namespace of the kubeconfig's context.
pub async fn client(options: &ClientOptions) -> Result<(Client, String), HostError> {
    let kc_options = KubeConfigOptions {
        context: options.context.clone(),
        ..KubeConfigOptions::default()
    };
    let kubeconfig_error = |what: String| {
        move |source| match source {
            // A context the kubeconfig lacks is the operator's to fix: a usage error (exit 2).
            kube::config::KubeconfigError::LoadContext(name)
                if options.context.as_ref() == Some(&name) =>
            {
                HostError::Config(jumppod_plan::config::ConfigError {
                    field: "--context".into(),
                    value: name,
                    problem: format!("{what}: it has no such context"),
                })
            }
            source => HostError::Client { what, source },
        }
    };
    let mut config = match (&options.kubeconfig, &options.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path).map_err(kubeconfig_error(format!(
                "cannot read the kubeconfig {}",
                path.display()
            )))?;
            kube::Config::from_custom_kubeconfig(kc, &kc_options)
                .await
                .map_err(kubeconfig_error(format!(
                    "cannot use the kubeconfig {}",
                    path.display()
                )))?
        }
        (None, Some(context)) => {
            kube::Config::from_kubeconfig(&kc_options)
                .await
                .map_err(kubeconfig_error(format!(
                    "cannot use the context {context} of the kubeconfig"
                )))?
        }
        (None, None) => kube::Config::infer().await?,
    };
    // Our own retry loop, bounded by the command's deadline, replaces kube's.
    config.default_retry = false;
    config.read_timeout = Some(if options.watch {
        WATCH_READ_TIMEOUT
    } else {
        options.request_timeout
    });
    config.connect_timeout = Some(options.request_timeout);
    let namespace = config.default_namespace.clone();
    let client = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&tower::util::MapResponseLayer::new(retry_after_as_status))
        .build();
    Ok((client, namespace))
}

/// API Priority and Fairness (and the max-inflight filter) answer 429 with a plain-text body
/// and a `Retry-After` header, which the kube client does not pass on: such an answer is
/// turned into the `Status` the apiserver's own 429s carry, with `retryAfterSeconds`, so the
/// retry waits as long as the server asked. A JSON answer (already a `Status`) is left as is.
fn retry_after_as_status(
    response: http::Response<Box<kube::client::DynBody>>,
) -> http::Response<Box<kube::client::DynBody>> {
    let retry_after = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok());
    let is_json = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let (429, Some(seconds), false) = (response.status().as_u16(), retry_after, is_json) else {
        return response;
    };
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Too many requests, please try again later.", "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": seconds}, "code": 429,
    });
    let (mut parts, _) = response.into_parts();
    parts.headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    http::Response::from_parts(parts, body(status.to_string()))
}

/// A response body of the client stack's type, holding `text`.
fn body(text: String) -> Box<kube::client::DynBody> {
    let full = http_body_util::Full::new(bytes::Bytes::from(text))
        .map_err(|never| -> tower::BoxError { match never {} });
    Box::new(full)
}

/// A client and the deadline of the current command.
#[derive(Clone)]
pub struct Kube {
    pub client: Client,
    pub deadline: Instant,
    /// First backoff; doubles up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

impl Kube {
    pub fn new(client: Client, timeout: Duration) -> Kube {
        Kube {
            client,
            deadline: Instant::now() + timeout,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(3),
        }
    }

    /// Runs `f` until it succeeds, fails permanently, or the deadline would pass.
    pub async fn retry<T, Fut>(
        &self,
        op: &Op<'_>,
        mut f: impl FnMut() -> Fut,
    ) -> Result<T, kube::Error>
    where
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut delay = self.backoff;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let err = match f().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let Some(wait) = transient(op, &err, delay) else {
                return Err(err);
            };
            let now = Instant::now();
            if now + wait >= self.deadline {
                tracing::warn!(op = %op, attempt, error = %err, "giving up: the deadline would pass");
                return Err(err);
            }
            tracing::info!(op = %op, attempt, retry_in = ?wait, error = %err, "transient error, retrying");
            tokio::time::sleep(wait).await;
            delay = (delay * 2).min(self.max_backoff);
        }
    }
}

/// How long to wait before retrying, or None when the error is permanent. A 409 Conflict on
/// a create, or on a delete whose precondition held, is a lost race of the API server's
/// optimistic locking: retried (the create then succeeds or finds the object).
pub fn transient(op: &Op<'_>, err: &kube::Error, backoff: Duration) -> Option<Duration> {
    let jitter = Duration::from_nanos(u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
            % 50_000_000,
    ));
    match err {
        kube::Error::Api(status) => match status.code {
            429 => {
                let after = status
                    .details
                    .as_ref()
                    .map(|d| d.retry_after_seconds)
                    .filter(|s| *s > 0);
                Some(after.map_or(backoff, |s| Duration::from_secs(u64::from(s))) + jitter)
            }
            500 | 502 | 503 | 504 => Some(backoff + jitter),
            409 if status.reason != "AlreadyExists"
                && (op.verb == "create"
                    || (op.verb == "delete" && !is_precondition_status(status))) =>
            {
                Some(backoff + jitter)
            }
            _ => None,
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            Some(backoff + jitter)
        }
        _ => None,
    }
}

/// One API operation, for messages and RBAC hints.
#[derive(Clone, Copy, Debug)]
pub struct Op<'a> {
    pub verb: &'static str,
    pub resource: &'static str,
    /// API group ("" for core).
    pub group: &'static str,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

impl<'a> Op<'a> {
    /// An operation on `resource`; its API group follows from the resource.
    pub fn new(
        verb: &'static str,
        resource: &'static str,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    ) -> Op<'a> {
        let group = match resource {
            "replicasets" => "apps",
            _ => "",
        };
        Op {
            verb,
            resource,
            group,
            namespace,
            name,
        }
    }
}

impl std::fmt::Display for Op<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if let Some(name) = self.name {
            write!(f, " {name}")?;
        }
        if let Some(ns) = self.namespace {
            write!(f, " in namespace {ns}")?;
        }
        Ok(())
    }
}

/// Explains an error that ended an operation.
pub fn explain(op: &Op<'_>, err: kube::Error) -> HostError {
    match &err {
        kube::Error::Api(status) if status.code == 429 || status.code >= 500 => HostError::GaveUp {
            op: op.to_string(),
            what: "the API server kept failing",
            detail: format!("{} {}: {}", status.code, status.reason, status.message),
            advice: "try again later or raise --timeout",
            source: Box::new(err),
        },
        kube::Error::Api(status) => HostError::Api {
            op: op.to_string(),
            code: status.code,
            reason: status.reason.clone(),
            message: status.message.clone(),
            hint: hint(op, status.code, &status.message),
            source: Box::new(err),
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            HostError::GaveUp {
                op: op.to_string(),
                what: "the API server did not answer in time or dropped the connection",
                detail: err.to_string(),
                advice: "check the cluster's address and health, or raise --timeout",
                source: Box::new(err),
            }
        }
        _ => HostError::Kube(err),
    }
}

/// What to do about a permanent error of `op`, from its code and the server's message.
fn hint(op: &Op<'_>, code: u16, message: &str) -> Option<String> {
    let namespace = op.namespace.unwrap_or("NAMESPACE");
    match code {
        401 => Some("the credentials of the kubeconfig are not accepted; refresh them".to_owned()),
        403 if is_rbac_refusal(message) => {
            let group = if op.group.is_empty() {
                "the core API group".to_owned()
            } else {
                format!("API group {}", op.group)
            };
            Some(format!(
                "jumppod needs the `{}` verb on `{}` ({group}){}: the rules printed by `jumppod rbac --namespace {namespace}` grant exactly what it uses",
                op.verb,
                op.resource,
                op.namespace
                    .map(|ns| format!(" in namespace {ns}"))
                    .unwrap_or_default(),
            ))
        }
        // The NamespaceLifecycle admission plugin refuses new objects while a namespace is
        // deleted.
        403 if message.contains("because it is being terminated") => Some(format!(
            "namespace {namespace} is being deleted: wait until `kubectl get namespace {namespace}` no longer finds it (`kubectl get all -n {namespace}` shows what holds it), create it again, then run jumppod again"
        )),
        403 if message.contains("quota") => Some(format!(
            "a ResourceQuota of namespace {namespace} refuses it: `kubectl describe resourcequota -n {namespace}` shows its limits and use"
        )),
        // Any other refusal (an admission webhook, Pod Security): the server's message says it.
        _ => None,
    }
}

/// Whether a 403 is RBAC's: the authorizer's `User "u" cannot <verb> resource "r" ...` (or
/// `... cannot <verb> path "/p"`). Quotas, namespace lifecycle and admission webhooks answer
/// 403 too, with their own words.
fn is_rbac_refusal(message: &str) -> bool {
    message.contains(" cannot ")
        && (message.contains(" resource \"") || message.contains(" path \""))
}

pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 404)
}

pub fn is_already_exists(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

/// 409 Conflict: a write carried a resourceVersion that is no longer current.
pub fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict")
}

/// 409 Conflict of a delete precondition (uid) that did not hold. The registry refuses it
/// before storage with `Operation cannot be fulfilled on pods "x": the UID in the precondition
/// (...) does not match the UID in record (...)`, the storage layer with `Precondition failed:
/// ...`: matched by code and reason and a case-insensitive "precondition", never by exact text.
pub fn is_precondition_failed(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if is_precondition_status(s))
}

fn is_precondition_status(s: &kube::core::Status) -> bool {
    s.code == 409
        && s.reason == "Conflict"
        && s.message.to_ascii_lowercase().contains("precondition")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn answer(
        content_type: &str,
        retry_after: Option<&str>,
        body: &str,
    ) -> http::Response<Box<kube::client::DynBody>> {
        let mut builder = http::Response::builder()
            .status(429)
            .header(http::header::CONTENT_TYPE, content_type);
        if let Some(seconds) = retry_after {
            builder = builder.header(http::header::RETRY_AFTER, seconds);
        }
        builder.body(super::body(body.to_owned())).unwrap()
    }

    async fn body_of(response: http::Response<Box<kube::client::DynBody>>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_plain_text_429_becomes_a_status_with_the_retry_after() {
        let text = "Too many requests, please try again later.\n";
        let status: kube::core::Status = serde_json::from_str(
            &body_of(retry_after_as_status(answer(
                "text/plain; charset=utf-8",
                Some("7"),
                text,
            )))
            .await,
        )
        .unwrap();
        assert_eq!(status.code, 429);
        assert_eq!(status.details.map(|d| d.retry_after_seconds), Some(7));
    }

    #[rstest]
    #[case::a_status_already(
        "application/json",
        Some("3"),
        r#"{"kind":"Status","code":429,"message":"storage is (re)initializing"}"#
    )]
    #[case::no_retry_after("text/plain", None, "Too many requests")]
    #[case::an_http_date(
        "text/plain",
        Some("Wed, 21 Oct 2026 07:28:00 GMT"),
        "Too many requests"
    )]
    #[tokio::test]
    async fn other_answers_are_left_as_they_are(
        #[case] content_type: &str,
        #[case] retry_after: Option<&str>,
        #[case] body: &str,
    ) {
        let response = retry_after_as_status(answer(content_type, retry_after, body));
        assert_eq!(body_of(response).await, body);
    }

    #[rstest]
    #[case::rbac_names_the_verb_and_the_rules(
        r#"replicasets.apps is forbidden: User "dstack" cannot create resource "replicasets" in API group "apps" in the namespace "dstack""#,
        Some("`jumppod rbac --namespace dstack`")
    )]
    #[case::a_quota_points_at_the_quota(
        r#"replicasets.apps "x" is forbidden: exceeded quota: q, requested: count/replicasets.apps=1, used: count/replicasets.apps=1, limited: count/replicasets.apps=1"#,
        Some("kubectl describe resourcequota -n dstack")
    )]
    #[case::a_namespace_being_deleted_says_to_wait(
        "unable to create new content in namespace dstack because it is being terminated",
        Some("namespace dstack is being deleted")
    )]
    #[case::a_webhook_speaks_for_itself(
        r#"admission webhook "validate.example.com" denied the request: no"#,
        None
    )]
    fn a_403_is_explained_by_what_the_server_says(
        #[case] message: &str,
        #[case] expected: Option<&str>,
    ) {
        let op = Op::new("create", "replicasets", Some("dstack"), None);
        let hint = hint(&op, 403, message);
        match expected {
            Some(text) => assert!(
                hint.as_deref().is_some_and(|h| h.contains(text)),
                "{hint:?}"
            ),
            None => assert_eq!(hint, None),
        }
        // Only RBAC's refusal sends the operator to the RBAC rules.
        assert_eq!(
            hint.as_deref().is_some_and(|h| h.contains("jumppod rbac")),
            message.contains("cannot create resource"),
            "{hint:?}"
        );
    }
}
