//! The Kubernetes client as the host uses it: built the usual way (`--kubeconfig`,
//! `KUBECONFIG`, `~/.kube/config`, in-cluster; `--context`), every call retried on transient
//! errors (429 honouring Retry-After, 5xx, timeouts, dropped connections) with backoff within
//! one deadline, permanent errors explained.

use crate::error::HostError;
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
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            kubeconfig: None,
            context: None,
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// Builds a client; also returns the namespace of the kubeconfig's context.
pub async fn client(options: &ClientOptions) -> anyhow::Result<(Client, String)> {
    let kc_options = KubeConfigOptions {
        context: options.context.clone(),
        ..KubeConfigOptions::default()
    };
    let mut config = match (&options.kubeconfig, &options.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| {
                anyhow::anyhow!("cannot read the kubeconfig {}: {e}", path.display())
            })?;
            kube::Config::from_custom_kubeconfig(kc, &kc_options).await?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&kc_options).await?,
        (None, None) => kube::Config::infer().await.map_err(|e| {
            anyhow::anyhow!(
                "no Kubernetes configuration found ({e}): set KUBECONFIG, pass --kubeconfig, or run in a pod"
            )
        })?,
    };
    // Our own retry loop, bounded by the command's deadline, replaces kube's.
    config.default_retry = false;
    config.read_timeout = Some(options.request_timeout);
    config.connect_timeout = Some(options.request_timeout);
    let namespace = config.default_namespace.clone();
    Ok((Client::try_from(config)?, namespace))
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
                tracing::warn!("{op}: giving up after {attempt} attempts: {err}");
                return Err(err);
            }
            tracing::info!(
                "{op}: transient error (attempt {attempt}), retrying in {wait:?}: {err}"
            );
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
                    || (op.verb == "delete" && !status.message.contains("Precondition"))) =>
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
    match err {
        kube::Error::Api(status) => {
            let group = if op.group.is_empty() {
                "the core API group".to_owned()
            } else {
                format!("API group {}", op.group)
            };
            let hint = match status.code {
                401 => {
                    "the credentials of the kubeconfig are not accepted; refresh them".to_owned()
                }
                403 => format!(
                    "jumppod needs the `{}` verb on `{}` ({group}){}: the rules printed by `jumppod rbac --namespace {}` grant exactly what it uses",
                    op.verb,
                    op.resource,
                    op.namespace
                        .map(|ns| format!(" in namespace {ns}"))
                        .unwrap_or_default(),
                    op.namespace.unwrap_or("NAMESPACE"),
                ),
                429 | 500..=599 => {
                    return HostError::GaveUp(format!(
                        "cannot {op}: the API server kept failing ({} {}) until the deadline: {}; try again later or raise --timeout",
                        status.code, status.reason, status.message
                    ));
                }
                _ => String::new(),
            };
            let message = if hint.is_empty() {
                format!("cannot {op}: {} ({})", status.message, status.reason)
            } else {
                format!(
                    "cannot {op}: {} ({})\n  {hint}",
                    status.message, status.reason
                )
            };
            HostError::Api {
                message,
                code: status.code,
                reason: status.reason.clone(),
            }
        }
        e @ (kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_)) => {
            HostError::GaveUp(format!(
                "cannot {op}: the API server did not answer in time or dropped the connection until the deadline ({e}); check the cluster's address and health, or raise --timeout"
            ))
        }
        e => HostError::Other(anyhow::anyhow!("cannot {op}: {e}")),
    }
}

pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 404)
}

pub fn is_already_exists(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

/// 409 Conflict of a delete precondition (uid) that did not hold.
pub fn is_precondition_failed(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409 && s.reason != "AlreadyExists" && s.message.contains("Precondition"))
}
