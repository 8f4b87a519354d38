//! The host's configuration: what dstack's Kubernetes backend knows about a project's jump pod
//! (its `proxy_jump` block plus the project and namespace), from flags and a YAML/JSON file.
//!
//! ```yaml
//! namespace: dstack
//! project: main
//! proxy_jump:            # or `hostname:` / `port:` at the top level
//!   hostname: 203.0.113.10
//!   port: 32000
//! cpu: 500m
//! memory: 1Gi
//! image: testcontainers/sshd:1.3.0@sha256:...
//! ssh_public_key: ssh-ed25519 AAAA... dstack-main
//! node_selector: {kubernetes.io/os: linux}
//! tolerations: [{key: dedicated, operator: Equal, value: jump, effect: NoSchedule}]
//! gpu_tolerations: true  # tolerate nvidia.com/gpu and amd.com/gpu taints, as dstack does
//! policy_settings: {cpu: {minimum: 100m}}
//! session_drain_seconds: 300  # how long open SSH sessions outlive a replaced pod's listener
//! ```
//! Flags override the file. Every value is validated; an error names the field and the value.

pub use crate::error::ConfigError;
use crate::error::err;
use crate::public_key::PublicKey;
use jumppod::quantity::Quantity;
use jumppod::schema;
use jumppod::settings::{CPU_DEFAULT, Contract, MEMORY_DEFAULT, Settings, session_drain_problem};
use k8s_openapi::api::core::v1::Toleration;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The taints GPU nodes carry (the NVIDIA and AMD device plugins' convention), which
/// `gpu_tolerations` tolerates.
pub const GPU_TAINTS: [&str; 2] = ["nvidia.com/gpu", "amd.com/gpu"];

/// The session drain's default and bound, one definition with the policy's
/// `sessionDrainSeconds` (the kit's).
pub use jumppod::settings::{SESSION_DRAIN_DEFAULT, SESSION_DRAIN_MAX};

/// dstack's `proxy_jump` block.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyJump {
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub port: Option<i32>,
}

/// Everything optional, as written in a file or given as flags, before validation.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub port: Option<i32>,
    #[serde(default)]
    pub proxy_jump: Option<ProxyJump>,
    #[serde(default)]
    pub cpu: Option<String>,
    #[serde(default)]
    pub memory: Option<String>,
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub ssh_public_key: Option<String>,
    #[serde(default)]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub tolerations: Option<Vec<Toleration>>,
    /// Tolerate the GPU vendors' taints (`nvidia.com/gpu`, `amd.com/gpu`, `Exists`,
    /// NoSchedule): dstack turns this on when every node of the cluster carries a hard taint,
    /// so that the jump pod can run on a GPU-only cluster.
    #[serde(default)]
    pub gpu_tolerations: Option<bool>,
    /// The policy settings the cluster's Kubewarden runs the policy with.
    #[serde(default)]
    pub policy_settings: Option<Value>,
    /// How long the SSH sessions open through a terminating jump pod may go on once its
    /// listener has closed ([`SESSION_DRAIN_DEFAULT`]).
    #[serde(default)]
    pub session_drain_seconds: Option<u32>,
}

impl RawConfig {
    pub fn from_text(text: &str) -> Result<RawConfig, ConfigError> {
        if text.trim().is_empty() {
            return Ok(RawConfig::default());
        }
        serde_yaml::from_str(text).map_err(|e| {
            let location = e
                .location()
                .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
                .unwrap_or_default();
            err("config file", "", format!("{e}{location}"))
        })
    }

    /// `other`'s values win where set (flags over file).
    pub fn overridden_by(self, other: RawConfig) -> RawConfig {
        RawConfig {
            namespace: other.namespace.or(self.namespace),
            project: other.project.or(self.project),
            hostname: other.hostname.or(self.hostname),
            port: other.port.or(self.port),
            proxy_jump: other.proxy_jump.or(self.proxy_jump),
            cpu: other.cpu.or(self.cpu),
            memory: other.memory.or(self.memory),
            image: other.image.or(self.image),
            ssh_public_key: other.ssh_public_key.or(self.ssh_public_key),
            node_selector: other.node_selector.or(self.node_selector),
            tolerations: other.tolerations.or(self.tolerations),
            gpu_tolerations: other.gpu_tolerations.or(self.gpu_tolerations),
            policy_settings: other.policy_settings.or(self.policy_settings),
            session_drain_seconds: other.session_drain_seconds.or(self.session_drain_seconds),
        }
    }

    /// Validates; `default_namespace` is the kubeconfig context's namespace.
    pub fn validate(self, default_namespace: &str) -> Result<Config, ConfigError> {
        let namespace = self
            .namespace
            .unwrap_or_else(|| default_namespace.to_owned());
        if let Some(problem) = dns_label_problem(&namespace) {
            return Err(err("namespace", &namespace, problem));
        }
        let project = self.project.ok_or_else(|| {
            err(
                "project",
                "",
                "is required (the dstack project whose jump pod this is)",
            )
        })?;
        let name = schema::jump_pod_name(&project);
        // The container name `<name>-container` is the longest name derived from the project
        // and a DNS-1123 label (63 characters): the API server refuses a longer one with 422.
        // The Service name and the jump pod name (a label value) are shorter.
        let container = schema::container_name(&name);
        if project.is_empty()
            || !project
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            || project.starts_with('-')
            || project.ends_with('-')
        {
            return Err(err(
                "project",
                &project,
                "must consist of lower case alphanumerics and '-', starting and ending with an alphanumeric",
            ));
        }
        if container.len() > 63 {
            return Err(err(
                "project",
                &project,
                format!(
                    "is too long: the container name {container:?} would have {} characters, at most 63 are allowed (a project name of at most {} characters)",
                    container.len(),
                    63 - (container.len() - project.len())
                ),
            ));
        }

        let (hostname, port) = match self.proxy_jump {
            Some(pj) => {
                if self.hostname.is_some() || self.port.is_some() {
                    return Err(err(
                        "proxy_jump",
                        "",
                        "give hostname and port either in `proxy_jump` or at the top level, not both",
                    ));
                }
                (pj.hostname, pj.port)
            }
            None => (self.hostname, self.port),
        };
        let hostname = hostname.map(|h| h.trim().to_owned());
        if let Some(h) = &hostname
            && (h.is_empty() || h.contains(char::is_whitespace) || h.contains('/'))
        {
            return Err(err(
                "hostname",
                h,
                "must be a host name or an IP address (no spaces, no scheme, no path)",
            ));
        }
        if let Some(p) = port
            && !(1..=65535).contains(&p)
        {
            return Err(err(
                "port",
                p,
                "must be a NodePort (by default 30000-32767)",
            ));
        }

        let cpu = quantity("cpu", self.cpu, CPU_DEFAULT)?;
        let memory = quantity("memory", self.memory, MEMORY_DEFAULT)?;
        let image = self
            .image
            .unwrap_or_else(|| schema::DEFAULT_IMAGE.to_owned());
        if image.trim().is_empty() || image.contains(char::is_whitespace) {
            return Err(err("image", &image, "must be an image reference"));
        }
        let ssh_public_key = match self.ssh_public_key {
            Some(key) => Some(ssh_key(key)?),
            None => None,
        };
        let node_selector = self.node_selector.unwrap_or_default();
        for (k, v) in &node_selector {
            if k.is_empty() {
                return Err(err("node_selector", k, "a key must not be empty"));
            }
            if let Some(problem) = schema::label_value_problem(v) {
                return Err(err(&format!("node_selector.{k}"), v, problem));
            }
        }
        let mut tolerations = self.tolerations.unwrap_or_default();
        for (i, t) in tolerations.iter().enumerate() {
            let op = t.operator.as_deref().unwrap_or("Equal");
            if !matches!(op, "Equal" | "Exists") {
                return Err(err(
                    &format!("tolerations[{i}].operator"),
                    op,
                    "must be Equal or Exists",
                ));
            }
            if let Some(effect) = t.effect.as_deref()
                && !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute")
            {
                return Err(err(
                    &format!("tolerations[{i}].effect"),
                    effect,
                    "must be NoSchedule, PreferNoSchedule or NoExecute",
                ));
            }
        }
        if self.gpu_tolerations == Some(true) {
            for key in GPU_TAINTS {
                if !tolerations.iter().any(|t| t.key.as_deref() == Some(key)) {
                    tolerations.push(Toleration {
                        key: Some(key.to_owned()),
                        operator: Some("Exists".to_owned()),
                        effect: Some("NoSchedule".to_owned()),
                        ..Toleration::default()
                    });
                }
            }
        }
        let policy_settings = self
            .policy_settings
            .unwrap_or(Value::Object(Default::default()));
        let settings = Settings::from_json(policy_settings.to_string().as_bytes())
            .map_err(|e| err("policy_settings", &policy_settings, e.to_string()))?;
        let contract = settings
            .contract()
            .map_err(|e| err("policy_settings", &policy_settings, e.to_string()))?;

        let session_drain_seconds = self.session_drain_seconds.unwrap_or(SESSION_DRAIN_DEFAULT);
        if let Some(problem) = session_drain_problem(session_drain_seconds) {
            return Err(err("session_drain_seconds", session_drain_seconds, problem));
        }

        Ok(Config {
            namespace,
            project,
            name,
            hostname,
            port,
            cpu,
            memory,
            image,
            ssh_public_key,
            node_selector,
            tolerations,
            policy_settings,
            contract,
            session_drain_seconds,
        })
    }
}

/// A validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub namespace: String,
    pub project: String,
    /// `dstack-<project>-ssh-jump-pod`: the ReplicaSet's name and the legacy pod's.
    pub name: String,
    pub hostname: Option<String>,
    pub port: Option<i32>,
    pub cpu: String,
    pub memory: String,
    pub image: String,
    pub ssh_public_key: Option<String>,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    pub policy_settings: Value,
    /// The contract the policy settings configure (the ephemeral-storage request comes from it).
    pub contract: Contract,
    /// How long open sessions outlive the listener of a terminating pod.
    pub session_drain_seconds: u32,
}

impl Config {
    /// A configuration with the defaults, for tests and the demo.
    pub fn for_project(namespace: &str, project: &str) -> Config {
        RawConfig {
            namespace: Some(namespace.to_owned()),
            project: Some(project.to_owned()),
            ..RawConfig::default()
        }
        .validate("default")
        .expect("a valid namespace and project")
    }
}

fn quantity(field: &str, text: Option<String>, default: &str) -> Result<String, ConfigError> {
    let text = text.unwrap_or_else(|| default.to_owned());
    match Quantity::parse(&text) {
        Ok(q) if q.is_negative() || q.is_zero() => Err(err(field, &text, "must be positive")),
        Ok(_) => Ok(text),
        Err(e) => Err(err(
            field,
            &text,
            format!("is not a Kubernetes quantity: {e}"),
        )),
    }
}

fn ssh_key(text: String) -> Result<String, ConfigError> {
    let key = text.trim().to_owned();
    if key.is_empty() {
        return Err(err("ssh_public_key", "", "must not be empty"));
    }
    for line in key.lines().map(str::trim).filter(|l| !l.is_empty()) {
        PublicKey::parse("ssh_public_key", line)?;
    }
    Ok(key)
}

/// Why a string is not a DNS-1123 label (a namespace name), or None.
pub fn dns_label_problem(value: &str) -> Option<&'static str> {
    let b = value.as_bytes();
    if b.is_empty() || b.len() > 63 {
        return Some("must be 1 to 63 characters");
    }
    let ok = b
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric();
    (!ok).then_some(
        "must consist of lower case alphanumerics or '-', and start and end with an alphanumeric",
    )
}

/// Parses `key[=value]:Effect` (kubectl's taint syntax) into a toleration.
pub fn parse_toleration(text: &str) -> Result<Toleration, ConfigError> {
    let (kv, effect) = match text.rsplit_once(':') {
        Some((kv, effect)) => (kv, Some(effect.to_owned())),
        None => (text, None),
    };
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_owned())),
        None => (kv, None),
    };
    if key.is_empty() {
        return Err(err(
            "--toleration",
            text,
            "expected key[=value][:Effect], e.g. dedicated=jump:NoSchedule",
        ));
    }
    Ok(Toleration {
        key: Some(key.to_owned()),
        operator: Some(if value.is_some() { "Equal" } else { "Exists" }.to_owned()),
        value,
        effect,
        toleration_seconds: None,
    })
}

/// Parses `key=value`.
pub fn parse_label(text: &str) -> Result<(String, String), ConfigError> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(err("--node-selector", text, "expected key=value")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn raw(yaml: &str) -> RawConfig {
        RawConfig::from_text(yaml).unwrap()
    }

    #[test]
    fn the_defaults_are_dstacks() {
        let c = raw("project: main").validate("default").unwrap();
        assert_eq!(c.namespace, "default");
        assert_eq!(c.name, "dstack-main-ssh-jump-pod");
        assert_eq!(c.cpu, "500m");
        assert_eq!(c.memory, "1Gi");
        assert_eq!(c.image, schema::DEFAULT_IMAGE);
        assert_eq!(c.contract.ephemeral_storage_request.text, "64Mi");
    }

    #[test]
    fn a_full_file_is_read_with_the_proxy_jump_block() {
        let c = raw(r#"
namespace: dstack
project: main
proxy_jump: {hostname: 203.0.113.10, port: 32000}
cpu: "1"
memory: 512Mi
ssh_public_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgdGVzdCBrZXk6IHByb2plY3QgbWFpbi4u main
node_selector: {pool: jump}
tolerations: [{key: dedicated, operator: Equal, value: jump, effect: NoSchedule}]
policy_settings: {cpu: {minimum: 200m}}
"#)
        .validate("default")
        .unwrap();
        assert_eq!(c.hostname.as_deref(), Some("203.0.113.10"));
        assert_eq!(c.port, Some(32000));
        assert_eq!(c.tolerations[0].value.as_deref(), Some("jump"));
        assert_eq!(c.contract.cpu.minimum.text, "200m");
    }

    #[test]
    fn gpu_tolerations_add_the_vendors_taints_once() {
        let c = raw("project: a\ngpu_tolerations: true\ntolerations: [{key: nvidia.com/gpu, operator: Exists}]")
            .validate("ns")
            .unwrap();
        let keys: Vec<_> = c.tolerations.iter().map(|t| t.key.as_deref()).collect();
        assert_eq!(keys, [Some("nvidia.com/gpu"), Some("amd.com/gpu")]);
        // The configured toleration is kept as written (it tolerates every effect).
        assert_eq!(c.tolerations[0].effect, None);
        assert_eq!(c.tolerations[1].operator.as_deref(), Some("Exists"));
        assert_eq!(c.tolerations[1].effect.as_deref(), Some("NoSchedule"));
        let off = raw("project: a\ngpu_tolerations: false")
            .validate("ns")
            .unwrap();
        assert!(off.tolerations.is_empty());
    }

    #[test]
    fn flags_override_the_file() {
        let merged = raw("project: a\ncpu: 1").overridden_by(RawConfig {
            cpu: Some("2".into()),
            ..RawConfig::default()
        });
        let c = merged.validate("ns").unwrap();
        assert_eq!((c.project.as_str(), c.cpu.as_str()), ("a", "2"));
    }

    #[rstest]
    #[case::a_missing_project_is_named("namespace: x", "project", "")]
    #[case::an_upper_case_namespace_is_named(
        "project: p\nnamespace: Dstack",
        "namespace",
        "Dstack"
    )]
    #[case::an_unparsable_cpu_is_named("project: p\ncpu: 1 core", "cpu", "1 core")]
    #[case::a_zero_memory_is_named("project: p\nmemory: '0'", "memory", "0")]
    #[case::a_port_out_of_range_is_named("project: p\nport: 70000", "port", "70000")]
    #[case::a_project_with_underscores_is_named("project: my_proj", "project", "my_proj")]
    #[case::a_project_too_long_for_the_container_name_is_named(
        "project: abcdefghijabcdefghijabcdefghijabcd",
        "project",
        "abcdefghijabcdefghijabcdefghijabcd"
    )]
    #[case::a_key_that_is_not_a_public_key_is_named(
        "project: p\nssh_public_key: hello",
        "ssh_public_key",
        "hello"
    )]
    #[case::a_bad_toleration_operator_is_named(
        "project: p\ntolerations: [{key: a, operator: In}]",
        "tolerations[0].operator",
        "In"
    )]
    #[case::policy_settings_below_the_floor_are_named(
        "project: p\npolicy_settings: {cpu: {minimum: 50m}}",
        "policy_settings",
        ""
    )]
    #[case::hostname_twice_is_refused(
        "project: p\nhostname: a\nproxy_jump: {hostname: b}",
        "proxy_jump",
        ""
    )]
    fn invalid_values_are_named(#[case] yaml: &str, #[case] field: &str, #[case] value: &str) {
        let e = raw(yaml).validate("default").unwrap_err();
        assert_eq!(e.field, field, "{e}");
        if !value.is_empty() {
            assert_eq!(e.value, value, "{e}");
            assert!(e.to_string().contains(value), "{e}");
        }
    }

    /// `dstack-<project>-ssh-jump-pod-container` is a DNS-1123 label: at most 63 characters,
    /// so a project of 33 characters is the longest a real API server accepts.
    #[test]
    fn the_longest_project_is_33_characters_and_the_error_names_the_limit() {
        let at_limit = "a".repeat(33);
        let c = raw(&format!("project: {at_limit}"))
            .validate("default")
            .unwrap();
        assert_eq!(schema::container_name(&c.name).len(), 63);
        let past = "a".repeat(34);
        let e = raw(&format!("project: {past}"))
            .validate("default")
            .unwrap_err();
        assert_eq!(e.field, "project");
        assert!(
            e.problem
                .contains("would have 64 characters, at most 63 are allowed (a project name of at most 33 characters)"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_key_is_refused_with_its_name() {
        let e = RawConfig::from_text("project: p\nportt: 3").unwrap_err();
        assert!(e.problem.contains("portt"), "{e}");
    }

    #[rstest]
    #[case::key_value_effect(
        "dedicated=jump:NoSchedule",
        Some("jump"),
        "Equal",
        Some("NoSchedule")
    )]
    #[case::key_effect_means_exists("gpu:NoSchedule", None, "Exists", Some("NoSchedule"))]
    #[case::key_alone_tolerates_every_effect("gpu", None, "Exists", None)]
    fn tolerations_parse_like_kubectl_taints(
        #[case] text: &str,
        #[case] value: Option<&str>,
        #[case] operator: &str,
        #[case] effect: Option<&str>,
    ) {
        let t = parse_toleration(text).unwrap();
        assert_eq!(t.value.as_deref(), value);
        assert_eq!(t.operator.as_deref(), Some(operator));
        assert_eq!(t.effect.as_deref(), effect);
    }
}
