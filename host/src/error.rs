//! Errors of the host, each with its exit code. Messages are built here, where they are shown;
//! each variant keeps its cause.

use jumppod_plan::config::ConfigError;

/// Exit codes of the `jumppod` binary.
pub mod exit {
    pub const OK: i32 = 0;
    /// An unexpected error, or transient API errors that outlasted the deadline.
    pub const ERROR: i32 = 1;
    /// Bad flags or configuration.
    pub const USAGE: i32 = 2;
    /// The policy rejects what jumppod would create; nothing was written.
    pub const POLICY_REJECTED: i32 = 3;
    /// No ready jump pod (pending, unschedulable, or a finished bare pod).
    pub const NOT_READY: i32 = 4;
    /// A permanent API error (403 Forbidden, 422 Invalid, ...).
    pub const API: i32 = 5;
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(
        "the jumppod policy rejects the ReplicaSet this configuration describes, so nothing was written:\n  {message}"
    )]
    PolicyRejected { message: String },
    /// The policy could not be run (a module that does not load, a trap).
    #[error("cannot run the jumppod policy")]
    Policy(#[from] jumppod_review::Error),
    /// The policy module given with `--policy` cannot be loaded.
    #[cfg(feature = "wasm")]
    #[error("cannot load the policy module")]
    PolicyModule(#[from] jumppod_wasm::LoadError),
    #[error("{0}")]
    NotReady(String),
    /// A permanent API error; `hint` says what to do about it.
    #[error("cannot {op}: {message} ({reason}){}", hint.as_deref().map(|h| format!("\n  {h}")).unwrap_or_default())]
    Api {
        op: String,
        code: u16,
        reason: String,
        message: String,
        hint: Option<String>,
        #[source]
        source: Box<kube::Error>,
    },
    /// The NodePort a Service must be created on belongs to another Service.
    #[error(
        "cannot create service {service} on NodePort {port}: {}.\n  {message}\n  Find the Service holding it with `kubectl get services -A -o wide | grep {port}` and free the port, then run `jumppod ensure` again; or set `port` to a free NodePort (running jobs then need their ssh_proxy updated).",
        if *kept {
            "the NodePort the old Service had, which running jobs use as their SSH proxy port, was taken by another Service in the meantime"
        } else {
            "the configured NodePort is used by another Service"
        }
    )]
    NodePortTaken {
        service: String,
        port: i32,
        /// The port was kept from the Service being replaced (else it was configured).
        kept: bool,
        message: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// Transient errors until the deadline.
    #[error("cannot {op}: {what} until the deadline ({detail}); {advice}")]
    GaveUp {
        op: String,
        what: &'static str,
        detail: String,
        advice: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
    /// No client could be built from the kubeconfig or the pod's service account.
    #[error("{what}")]
    Client {
        what: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot reach the cluster")]
    Kube(#[from] kube::Error),
    #[error(
        "cannot infer the Kubernetes configuration: set KUBECONFIG, pass --kubeconfig, or run in a pod"
    )]
    NoConfig(#[from] kube::config::InferConfigError),
    /// Writes that would take serving pods away because of their node, deferred: the
    /// destruction budget is spent. Decided again after a backoff.
    #[error(
        "{deferred} write(s) for a node deferred: the destruction budget (--node-deletion-rate {rate}/s, --node-deletion-burst {burst}) is spent; decided again shortly"
    )]
    BudgetSpent {
        deferred: usize,
        rate: f64,
        burst: u32,
    },
    /// `jumppod run`'s controller stopped (a panic in it; it does not stop otherwise).
    #[error("the controller stopped: {0}")]
    Controller(String),
    #[error("cannot encode {what}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A change of the users' keys was written, but a running pod that mounts them could not
    /// be told to remount them ([`crate::keys::refresh`]).
    #[error(
        "{written}; but the running jump pods were not all told to remount the Secret (they get it at the kubelet's sync, within {}): {source}",
        jumppod_plan::keys::PROPAGATION_UNTOLD
    )]
    Untold {
        written: String,
        #[source]
        source: Box<HostError>,
    },
    /// Output that could not be written (stdout closed, a directory that does not exist).
    #[error("cannot write {what}")]
    Write {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl HostError {
    pub fn exit_code(&self) -> i32 {
        match self {
            HostError::Config(_) => exit::USAGE,
            HostError::PolicyRejected { .. } => exit::POLICY_REJECTED,
            HostError::NotReady(_) => exit::NOT_READY,
            HostError::Api { .. } | HostError::NodePortTaken { .. } => exit::API,
            HostError::Untold { source, .. } => source.exit_code(),
            #[cfg(feature = "wasm")]
            HostError::PolicyModule(_) => exit::USAGE,
            HostError::Policy(_)
            | HostError::GaveUp { .. }
            | HostError::Client { .. }
            | HostError::Kube(_)
            | HostError::NoConfig(_)
            | HostError::Controller(_)
            | HostError::BudgetSpent { .. }
            | HostError::Encode { .. }
            | HostError::Write { .. } => exit::ERROR,
        }
    }

    /// A short machine-readable kind for `--output json`.
    pub fn kind(&self) -> &'static str {
        match self {
            HostError::Config(_) => "config",
            HostError::PolicyRejected { .. } => "policyRejected",
            HostError::Policy(_) => "policy",
            #[cfg(feature = "wasm")]
            HostError::PolicyModule(_) => "policyModule",
            HostError::NotReady(_) => "notReady",
            HostError::Api { .. } => "api",
            HostError::NodePortTaken { .. } => "nodePortTaken",
            HostError::GaveUp { .. } => "gaveUp",
            HostError::Client { .. } | HostError::Kube(_) | HostError::NoConfig(_) => "client",
            HostError::Controller(_) => "controller",
            HostError::BudgetSpent { .. } => "budgetSpent",
            HostError::Untold { source, .. } => source.kind(),
            HostError::Encode { .. } | HostError::Write { .. } => "error",
        }
    }

    /// The message and, where it does not already say it, the chain of causes.
    pub fn report(&self) -> String {
        let mut text = self.to_string();
        let carries_its_cause = matches!(
            self,
            HostError::Config(_)
                | HostError::PolicyRejected { .. }
                | HostError::NotReady(_)
                | HostError::Api { .. }
                | HostError::NodePortTaken { .. }
                | HostError::GaveUp { .. }
                | HostError::Untold { .. }
        );
        if !carries_its_cause {
            let mut cause = std::error::Error::source(self);
            while let Some(c) = cause {
                text.push_str(&format!(": {c}"));
                cause = c.source();
            }
        }
        text
    }
}
