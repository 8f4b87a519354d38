//! The command line: its types, and how flags and the configuration file combine (flags win).

use crate::error::HostError;
use crate::rbac;
use clap::{Args, Parser, Subcommand, ValueEnum};
use jumppod_plan::config::{self, RawConfig};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const ABOUT: &str = "Keeps dstack's SSH jump pod alive: a ReplicaSet of one Guaranteed pod and a NodePort Service, checked by the jumppod admission policy";

const LONG_ABOUT: &str = "\
Keeps dstack's SSH jump pod alive: a ReplicaSet of one Guaranteed pod and a NodePort Service per
project, created the way dstack's Kubernetes backend does, checked before any write by the same
policy the cluster's Kubewarden runs (its own code, built in natively; or the module itself with
--policy FILE). It upgrades clusters of older dstack releases without
breaking running SSH sessions: a running bare jump pod is left alone (adopted when it carries the
current labels), a finished one is deleted, and a Service with the pre-#3891 selector is recreated
with the current selector on the same NodePort once its pod is gone.

The cluster is reached the usual way: --kubeconfig, else KUBECONFIG, else ~/.kube/config, else the
in-cluster service account; --context picks a context. Configuration comes from --config FILE
(YAML or JSON: namespace, project, hostname, port or proxy_jump{hostname,port}, cpu, memory, image,
ssh_public_key, node_selector, tolerations, gpu_tolerations, policy_settings,
session_drain_seconds) and flags, flags winning. Users' keys (`jumppod keys`) live in a Secret the pod mounts, so a replaced pod keeps them.";

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  error (unexpected, or transient API errors that outlasted --timeout)
  2  usage or configuration error (the message names the field and value)
  3  the policy rejects the ReplicaSet the configuration describes; nothing was written
  4  no ready jump pod (pending, unschedulable, a finished legacy pod, nothing provisioned)
  5  permanent API error (403 Forbidden: see `jumppod rbac`; 422 Invalid, e.g. a NodePort taken)";

#[derive(Parser)]
#[command(name = "jumppod", version, about = ABOUT, long_about = LONG_ABOUT, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args)]
pub struct Global {
    /// Path of the kubeconfig (default: KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Output::Human)]
    pub output: Output,
    /// Deadline of the whole command; transient API errors are retried until then.
    #[arg(long, global = true, default_value = "60s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Per-request timeout: a request stalled longer is abandoned and retried.
    #[arg(long, global = true, default_value = "10s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// More logs on stderr (-v: retries and decisions, -vv: debug). RUST_LOG also works.
    #[arg(long, short = 'v', global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Human,
    Json,
}

#[derive(Subcommand)]
pub enum Command {
    /// Create what is missing (namespace, ReplicaSet, Service), clean up after older releases,
    /// report drift and unschedulable pods. Idempotent; 2 API requests when all is in place.
    Ensure {
        #[command(flatten)]
        target: Target,
        /// Judge the ReplicaSet with this policy module, run as policy-server runs it (default:
        /// the policy's own code, built into jumppod natively).
        #[arg(long, value_name = "PATH")]
        policy: Option<PathBuf>,
    },
    /// Print the SSH proxy of the project's jobs: user@hostname:NodePort of a ready jump pod.
    /// 2 API requests when `hostname` is configured.
    Resolve {
        #[command(flatten)]
        target: Target,
    },
    /// Show what exists: legacy objects, QoS classes, selectors, NodePort, drift,
    /// unschedulable reasons, and what `ensure` would do.
    Status {
        #[command(flatten)]
        target: Target,
    },
    /// Add, remove or list users' SSH keys. They are kept in the Secret
    /// <name>-authorized-keys, which the jump pod mounts: a replacement pod has them from its
    /// start, a running pod within about 10 seconds (a change annotates the running pods that
    /// mount the Secret, so that their kubelet remounts it at once; the pod merges it every 10
    /// seconds). Each is restricted as dstack restricts a job's user: command="/bin/false", so
    /// it can jump (ssh -J) but not open a shell.
    Keys {
        #[command(subcommand)]
        action: KeysAction,
    },
    /// Print the ServiceAccount, Role, RoleBinding, ClusterRole and ClusterRoleBinding with
    /// exactly the verbs jumppod uses; with --controller, those of `jumppod run` and its
    /// Deployment.
    Rbac {
        /// Namespace of the jump pods (and of the ServiceAccount).
        #[arg(long, short = 'n')]
        namespace: String,
        /// ServiceAccount to bind.
        #[arg(long, default_value = rbac::SERVICE_ACCOUNT)]
        service_account: String,
        /// The manifests of `jumppod run` instead: ServiceAccount, the rules it uses (list and
        /// watch, Events, its Lease), and a Deployment of two replicas, one leading.
        #[arg(long)]
        controller: bool,
        /// With --controller: the controller watches every namespace (cluster-wide rules); its
        /// own objects stay in --namespace.
        #[arg(long, short = 'A', requires = "controller")]
        all_namespaces: bool,
        /// With --controller: the controller watches these namespaces (repeatable; a Role in
        /// each) instead of --namespace; its own objects and its Lease stay in --namespace.
        #[arg(
            long = "watch-namespace",
            value_name = "NAMESPACE",
            requires = "controller",
            conflicts_with = "all_namespaces"
        )]
        watch_namespaces: Vec<String>,
        /// With --controller: the image of the Deployment (one with the jumppod binary).
        #[arg(long, requires = "controller", default_value = rbac::CONTROLLER_IMAGE)]
        image: String,
        /// With --controller: the Lease the replicas elect their leader with (`jumppod run
        /// --lease-name`), the one Lease the Role lets them read and update. Controllers of
        /// two installations in one namespace need two names.
        #[arg(long, requires = "controller", default_value = rbac::LEASE_NAME)]
        lease_name: String,
    },
    /// Run as a controller: watch the jump pods of every project (their ReplicaSets, pods and
    /// Services) and keep them right between dstack's calls, with `ensure`'s decisions: the
    /// pre-#3891 Service recreated on the same NodePort once its pod is gone, finished bare pods
    /// deleted, and what is wrong reported as Kubernetes Events (Unschedulable, FailedCreate,
    /// drift, a NodePort changed, an older dstack server at work) and Prometheus metrics. It
    /// never creates a ReplicaSet: dstack decides which projects exist and holds their keys.
    /// Only the holder of a Lease writes (leader election); SIGTERM or Ctrl-C releases it.
    Run(Box<RunArgs>),
    #[cfg(feature = "wasm")]
    /// Evaluate AdmissionRequest or AdmissionReview files with the policy module, run as
    /// policy-server runs it (a fresh instance per request), and print the AdmissionResponse,
    /// as `kwctl run` does. Several files: one compact AdmissionResponse per line, in order,
    /// the module compiled once.
    Eval {
        /// AdmissionRequest or AdmissionReview (JSON or YAML); several are evaluated in turn.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        #[command(flatten)]
        module: Module,
    },
    #[cfg(feature = "wasm")]
    /// Serve the policy module as a Kubernetes mutating admission webhook (AdmissionReview v1
    /// over HTTPS at POST /mutate, JSONPatch; GET /healthz, GET /readyz), run as policy-server
    /// runs it: compiled once, a fresh instance per request, a 2-second evaluation deadline, the
    /// settings checked at start (/readyz answers 503 until then). For clusters without
    /// Kubewarden; `jumppod webhook-configuration` prints what registers it.
    Webhook {
        /// Address to listen on (port 0: a free one, printed once ready).
        #[arg(long, default_value = "0.0.0.0:8443")]
        listen: std::net::SocketAddr,
        /// Serving certificate chain (PEM); its SANs must name the address the API server uses.
        #[arg(long, value_name = "FILE")]
        tls_cert: PathBuf,
        /// The certificate's private key (PEM: PKCS#8, SEC1 or RSA). Both files are read again
        /// on the first TLS handshake after either changes (a pair that does not load is
        /// logged, the previous one kept).
        #[arg(long, value_name = "FILE")]
        tls_key: PathBuf,
        /// On SIGTERM or Ctrl-C: how long the reviews in flight may take to finish before the
        /// process exits. The default is the API server's default webhook timeout
        /// (timeoutSeconds: 10, what `webhook-configuration` prints): past it the API server
        /// has given up on the review; and below the pod's default 30 s grace period.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        shutdown_grace: Duration,
        /// On SIGTERM or Ctrl-C, before the listener closes: how long it goes on accepting and
        /// answering, with /readyz answering 503 and every answer closing its connection. In a
        /// pod behind a Service, a few seconds: the time its removal from the endpoints takes
        /// to reach kube-proxy, during which the API server still sends it reviews (on new
        /// connections and on kept-alive ones). Add it to --shutdown-grace when choosing the
        /// pod's terminationGracePeriodSeconds.
        #[arg(long, default_value = "0s", value_parser = parse_duration_or_zero)]
        drain_delay: Duration,
        #[command(flatten)]
        module: Module,
    },
    #[cfg(feature = "wasm")]
    /// Print the webhook configurations that send jump pods and jump-pod ReplicaSets (CREATE,
    /// UPDATE: the rules of the policy's metadata.yml; matchConditions that select what the
    /// policy calls a jump pod), outside kube-system and the webhook's namespace, to
    /// `jumppod webhook`: a
    /// MutatingWebhookConfiguration (/mutate) and a ValidatingWebhookConfiguration
    /// (/validate, the verdict on the object after every mutating webhook), as a YAML stream
    /// (-o json: a List) for `kubectl apply -f -`.
    WebhookConfiguration {
        /// The webhook's base URL, https://HOST[:PORT], for a webhook outside the cluster
        /// (each configuration appends its path; a trailing /mutate is accepted).
        #[arg(long, conflicts_with = "service", required_unless_present = "service")]
        url: Option<String>,
        /// The webhook's Service in the cluster, NAMESPACE/NAME[:PORT] (port 443 by default).
        #[arg(long, value_name = "NAMESPACE/NAME[:PORT]")]
        service: Option<String>,
        /// The CA that signed the webhook's serving certificate (PEM).
        #[arg(long, value_name = "FILE")]
        ca_bundle: PathBuf,
        /// What the API server does when the call fails (the webhook unreachable, a timeout,
        /// an error status): Fail refuses the object, Ignore admits it unchecked. A policy
        /// that traps or reaches its deadline is not a failed call: the webhook answers
        /// allowed: false (code 500), which the API server enforces under Ignore too.
        #[arg(long, default_value = "Fail", value_parser = ["Fail", "Ignore"])]
        failure_policy: String,
        /// Only these namespaces' pods and ReplicaSets (repeatable; default: every namespace
        /// but kube-system and the webhook's).
        #[arg(long = "only-namespace", value_name = "NAMESPACE")]
        namespaces: Vec<String>,
        /// The webhook's own namespace, never sent (its pods must start while it is down);
        /// default: the --service's namespace.
        #[arg(long, value_name = "NAMESPACE")]
        webhook_namespace: Option<String>,
        /// Which configurations to print.
        #[arg(long, default_value = "both", value_parser = ["both", "mutating", "validating"])]
        kind: String,
    },
    /// Print a completion script for a shell, e.g. `jumppod completions bash >
    /// /etc/bash_completion.d/jumppod`, or `source <(jumppod completions zsh)` in ~/.zshrc.
    Completions {
        /// The shell the script is for.
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the manual page jumppod(1) as roff (`jumppod man | man -l -`); with --out-dir,
    /// write one page per command into that directory instead (jumppod.1, jumppod-ensure.1,
    /// jumppod-keys-add.1, ...), for a package's share/man/man1.
    Man {
        /// Directory to write every command's page into (it must exist).
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Print the Markdown reference of every command and flag, which is committed as
    /// docs/reference/cli.md (a test compares the two). Hidden: a maintainer's command; readers
    /// have the page, --help and `jumppod man`.
    #[command(hide = true)]
    HelpMarkdown,
}

/// `jumppod run`.
#[derive(Args, Clone)]
pub struct RunArgs {
    /// YAML or JSON file: the cpu, memory, image, node_selector, tolerations, gpu_tolerations,
    /// session_drain_seconds and policy_settings the ReplicaSets should have (drift from them is
    /// reported), and the namespace to watch. Per-project values (project, port, hostname,
    /// proxy_jump, ssh_public_key) are refused: every project is watched, and each Service keeps
    /// its NodePort.
    #[arg(long, short = 'f', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Namespace to watch; repeat it to watch several (default: the file's, else the
    /// kubeconfig context's).
    #[arg(
        long = "namespace",
        short = 'n',
        value_name = "NAMESPACE",
        conflicts_with = "all_namespaces"
    )]
    pub namespaces: Vec<String>,
    /// Watch every namespace.
    #[arg(long, short = 'A')]
    pub all_namespaces: bool,
    /// Address of /metrics, /healthz and /readyz (port 0: a free one, printed at start).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: std::net::SocketAddr,
    /// Elect a leader on a Lease, so that of several replicas only one writes.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the Lease (the printed RBAC, `jumppod rbac --controller`, and the chart grant
    /// get and update on this name only).
    #[arg(long, default_value = crate::rbac::LEASE_NAME)]
    pub lease_name: String,
    /// Namespace of the Lease (default: POD_NAMESPACE, else the first watched namespace, else
    /// the kubeconfig context's).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// This replica's name in the Lease (default: POD_NAME, else host name and process id).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// How long a Lease not renewed keeps other replicas waiting (client-go's default).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// How long the leader keeps writing without renewing; shorter than --lease-duration.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub renew_deadline: Duration,
    /// How often the leader renews the Lease; a standby looks every 1 to 2.2 of these (client-go's
    /// jitter). 1.2 x it must be shorter than --renew-deadline.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,
    /// Projects reconciled at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Deadline of one project's writes, retries of transient errors included.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub reconcile_timeout: Duration,
    /// A node whose kubelet has not renewed the node's Lease (namespace kube-node-lease) for
    /// this long is silent: its jump pods get a replacement started beside them (a standby, a
    /// surge), Ready by the time the node-lifecycle controller finds the node lost (50 s by
    /// default), when the pods there go. Silence alone deletes nothing. Kubelets renew every
    /// 10 s. 0s: start replacements only once the node-lifecycle controller finds the node lost.
    #[arg(long, default_value = "20s", value_parser = parse_duration_or_zero)]
    pub silent_node_after: Duration,
    /// How many writes per second, across every project, may take a pod that may serve away
    /// because of its node (a pod deleted off a lost node, a retiring pod scaled off). Writes
    /// beyond it wait and are decided again. A bug or a wrong view of the nodes then takes a
    /// few jump pods, not all of them.
    #[arg(long, default_value_t = 0.2, value_parser = parse_rate)]
    pub node_deletion_rate: f64,
    /// How many such writes may go at once before --node-deletion-rate paces them: a drained
    /// node's jump pods go together.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub node_deletion_burst: u32,
}

/// The policy module and its settings, as policy-server takes them.
#[derive(Args)]
pub struct Module {
    /// Policy settings as JSON, or @FILE (the format of Kubewarden's policy settings).
    #[arg(long, default_value = "{}")]
    pub settings: String,
    /// The policy module to run (`make policy` writes policy.wasm).
    #[arg(
        long,
        value_name = "PATH",
        env = "JUMPPOD_POLICY_WASM",
        default_value = "policy.wasm"
    )]
    pub policy: PathBuf,
}

#[derive(Subcommand)]
pub enum KeysAction {
    /// Authorize a user's public key (idempotent: the same key under the same name writes
    /// nothing).
    Add {
        #[command(flatten)]
        project: Project,
        /// The public key (`ssh-ed25519 AAAA... comment`), or - to read it from stdin.
        #[arg(value_name = "KEY", required_unless_present = "key_file")]
        key: Option<String>,
        /// Read the public key from a file (the .pub file).
        #[arg(long, value_name = "FILE", conflicts_with = "key")]
        key_file: Option<PathBuf>,
        /// Name of the key's entry in the Secret (default: key- and 16 hex digits of its
        /// fingerprint); another key under the same name replaces it.
        #[arg(long)]
        name: Option<String>,
    },
    /// Remove a key, by its entry name or the key itself (idempotent: an absent key is
    /// reported, not an error).
    Remove {
        #[command(flatten)]
        project: Project,
        /// The entry name (see `jumppod keys list`) or the public key.
        #[arg(value_name = "NAME|KEY")]
        key: String,
    },
    /// List the keys: entry name, fingerprint (as `ssh-keygen -l` prints it), comment.
    List {
        #[command(flatten)]
        project: Project,
    },
}

/// Which project's jump pod.
#[derive(Args, Clone, Default)]
pub struct Project {
    /// YAML or JSON configuration file; flags override it.
    #[arg(long, short = 'f', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Namespace of the jump pod (default: the file's, else the kubeconfig context's).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// dstack project: the jump pod is dstack-<project>-ssh-jump-pod.
    #[arg(long, short = 'p')]
    pub project: Option<String>,
}

/// Which jump pod, and how it should look.
#[derive(Args, Clone, Default)]
pub struct Target {
    #[command(flatten)]
    pub project: Project,
    /// Address jobs reach the NodePort at (dstack's proxy_jump.hostname); default: the
    /// ExternalIP of the pod's node, else of another node, one that is not cordoned or tainted
    /// for removal first.
    #[arg(long)]
    pub hostname: Option<String>,
    /// NodePort of the Service (dstack's proxy_jump.port); default: allocated by the cluster.
    #[arg(long)]
    pub port: Option<i32>,
    /// CPU of the jump pod, request == limit [default: 500m].
    #[arg(long)]
    pub cpu: Option<String>,
    /// Memory of the jump pod, request == limit [default: 1Gi].
    #[arg(long)]
    pub memory: Option<String>,
    /// sshd image [default: dstack's].
    #[arg(long)]
    pub image: Option<String>,
    /// The project's SSH public key(s), authorized for root.
    #[arg(long, value_name = "KEY")]
    pub ssh_public_key: Option<String>,
    /// Read the SSH public key(s) from a file.
    #[arg(long, value_name = "FILE", conflicts_with = "ssh_public_key")]
    pub ssh_public_key_file: Option<PathBuf>,
    /// Node selector, key=value; repeatable.
    #[arg(long, value_name = "KEY=VALUE")]
    pub node_selector: Vec<String>,
    /// Toleration, key[=value][:Effect] (kubectl's taint syntax); repeatable.
    #[arg(long, value_name = "TOLERATION")]
    pub toleration: Vec<String>,
    /// Tolerate the GPU vendors' taints (nvidia.com/gpu, amd.com/gpu: Exists, NoSchedule), as
    /// dstack does when every node of the cluster carries a hard taint.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub gpu_tolerations: Option<bool>,
    /// Settings of the cluster's jumppod policy, as JSON (or @FILE).
    #[arg(long, value_name = "JSON")]
    pub policy_settings: Option<String>,
    /// How long SSH sessions open through a replaced jump pod go on after it stops accepting
    /// new ones (then the kubelet ends the pod), in seconds [default: 300].
    #[arg(long, value_name = "SECONDS")]
    pub session_drain_seconds: Option<u32>,
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, unit) = match t.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 30s, 500ms or 2m"))?;
    let seconds = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m, h)")),
    };
    if !seconds.is_finite() || seconds <= 0.0 {
        return Err(format!("{text:?} must be positive"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// [`parse_duration`], where 0 (`0`, `0s`) means none.
pub fn parse_duration_or_zero(text: &str) -> Result<Duration, String> {
    match text.trim().trim_end_matches(['s', 'm', 'h']).parse::<f64>() {
        Ok(0.0) => Ok(Duration::ZERO),
        _ => parse_duration(text),
    }
}

/// A rate per second: a finite number, 0 or more (0: the burst, then nothing).
pub fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 0.0 => Ok(r),
        _ => Err(format!(
            "{text:?} is not a rate: give writes per second, 0 or more (e.g. 0.2)"
        )),
    }
}

/// Reads a configuration file, YAML or JSON (JSON is YAML); the planning crate parses it.
pub fn config_file(path: &Path) -> Result<RawConfig, config::ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| config::ConfigError {
        field: "--config".into(),
        value: path.display().to_string(),
        problem: format!("cannot read it: {e}"),
    })?;
    RawConfig::from_text(&text).map_err(|mut e| {
        e.field = format!("{} in {}", e.field, path.display());
        e
    })
}

pub fn json_arg(field: &str, text: &str) -> Result<Value, HostError> {
    let text = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| config::ConfigError {
            field: field.into(),
            value: text.into(),
            problem: format!("cannot read it: {e}"),
        })?,
        None => text.to_owned(),
    };
    serde_yaml::from_str(&text).map_err(|e| {
        HostError::Config(config::ConfigError {
            field: field.into(),
            value: text.clone(),
            problem: format!("is not JSON: {e}"),
        })
    })
}

impl Target {
    /// The configuration file overridden by the flags.
    pub fn raw(&self) -> Result<RawConfig, HostError> {
        let file = match &self.project.config {
            Some(path) => config_file(path)?,
            None => RawConfig::default(),
        };
        let ssh_public_key = match (&self.ssh_public_key, &self.ssh_public_key_file) {
            (Some(k), _) => Some(k.clone()),
            (None, Some(path)) => {
                Some(
                    std::fs::read_to_string(path).map_err(|e| config::ConfigError {
                        field: "--ssh-public-key-file".into(),
                        value: path.display().to_string(),
                        problem: format!("cannot read it: {e}"),
                    })?,
                )
            }
            (None, None) => None,
        };
        let node_selector = if self.node_selector.is_empty() {
            None
        } else {
            Some(
                self.node_selector
                    .iter()
                    .map(|s| config::parse_label(s))
                    .collect::<Result<BTreeMap<_, _>, _>>()?,
            )
        };
        let tolerations = if self.toleration.is_empty() {
            None
        } else {
            Some(
                self.toleration
                    .iter()
                    .map(|s| config::parse_toleration(s))
                    .collect::<Result<Vec<_>, _>>()?,
            )
        };
        let policy_settings = match &self.policy_settings {
            Some(text) => Some(json_arg("--policy-settings", text)?),
            None => None,
        };
        let flags = RawConfig {
            namespace: self.project.namespace.clone(),
            project: self.project.project.clone(),
            hostname: self.hostname.clone(),
            port: self.port,
            proxy_jump: None,
            cpu: self.cpu.clone(),
            memory: self.memory.clone(),
            image: self.image.clone(),
            ssh_public_key,
            node_selector,
            tolerations,
            gpu_tolerations: self.gpu_tolerations,
            policy_settings,
            session_drain_seconds: self.session_drain_seconds,
        };
        let mut merged = file.overridden_by(flags);
        // Flags for hostname/port override a file's proxy_jump block.
        if (self.hostname.is_some() || self.port.is_some())
            && let Some(pj) = merged.proxy_jump.take()
        {
            merged.hostname = merged.hostname.or(pj.hostname);
            merged.port = merged.port.or(pj.port);
        }
        Ok(merged)
    }
}
