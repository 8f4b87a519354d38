//! The objects `ensure` wants to exist, built from the configuration and the core schema.

use crate::config::Config;
use jumppod::schema;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, Namespace, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SecretVolumeSource, Service, ServicePort, ServiceSpec, TCPSocketAction,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// The environment variable carrying the project's authorized keys into the container.
pub const AUTHORIZED_KEYS_ENV: &str = "DSTACK_AUTHORIZED_KEYS";

/// The Secret's volume, its mount and merge period, and the handover: one definition with the
/// kit the policy adds to dstack's own jump pods (`jumppod::kit`).
pub use jumppod::kit::{
    HANDOVER_SECONDS, KEYS_MERGE_SECONDS, KEYS_MOUNT, KEYS_VOLUME, keys_secret_name,
};

/// The file the start script merges the Secret's keys into, which sshd reads beside root's own
/// `~/.ssh/authorized_keys`.
pub const KEYS_FILE: &str = "/etc/ssh/jumppod/authorized_keys";

/// What the container runs, as dstack starts its jump pod: fresh host keys (the image's are
/// removed first, because `ssh-keygen -A` only makes missing ones and a public image ships
/// keys made when it was built: every jump pod would serve that public key), the project's keys
/// as root's authorized keys, sshd in the foreground with key logins only (keyboard-interactive
/// off too: with PAM it would ask for a password), local forwarding only (what a jump host
/// needs) and errors only in its log.
///
/// The users' keys come from the Secret mounted at [`KEYS_MOUNT`], so that a replacement pod
/// has them from its start. They are copied into [`KEYS_FILE`] rather than read in place:
/// sshd's StrictModes refuses a file reached through the kubelet's `..data` symlinks unless
/// every directory on the way is root's and not group-writable, which the copy guarantees.
/// The kubelet refreshes a mounted Secret on its periodic sync; the loop merges again every
/// [`KEYS_MERGE_SECONDS`], replacing the file atomically (`mv`), so a removed key stops working
/// in the running pod too. Keys appended to `~/.ssh/authorized_keys` over SSH (what dstack
/// does per job) keep working until the pod is replaced.
///
/// The end of the pod (deleted, evicted, drained, rolled): the kubelet sends SIGTERM to the
/// container's PID 1, this shell, and SIGKILLs what is left once the pod's grace period is
/// over. sshd does not run as PID 1 for that: its listener, told to stop, exits alone and
/// leaves every session (a process of its own) running, but the container ends with PID 1 and
/// takes them all. So the shell traps the signal and:
/// 1. keeps the listener open for [`HANDOVER_SECONDS`] (the handover). A terminating pod that
///    still passes its readiness probe stays a *serving* endpoint, which kube-proxy uses only
///    while the Service has no ready one (KEP-1669): so a connection is accepted here while the
///    replacement starts, and while the endpoints' change reaches every node's kube-proxy;
/// 2. stops the listener (new connections go to the replacement; the probe fails);
/// 3. waits for the authenticated connections to end, shells and jumps alike, checked each
///    second and counted as the kit's `preStop` hook counts them ([`jumppod::kit::SESSIONS`]);
///    the kubelet ends those still open when the grace period, the handover plus the
///    configured session drain, runs out. A connection that never authenticates (a scanner on
///    a public NodePort) does not hold the pod for sshd's LoginGraceTime (120 s); it ends with
///    the container.
///
/// If sshd exits on its own, the container exits with its status and the kubelet restarts it.
pub static SSHD_SCRIPT: LazyLock<String> =
    LazyLock::new(|| [SSHD_SCRIPT_START, jumppod::kit::SESSIONS, SSHD_SCRIPT_END].concat());

/// [`SSHD_SCRIPT`] up to the session count, which is the kit's ([`jumppod::kit::SESSIONS`]).
const SSHD_SCRIPT_START: &str = r#"set -e
terminating=
trap 'terminating=1' TERM
rm -f /etc/ssh/ssh_host_*
ssh-keygen -A
mkdir -p /root/.ssh /etc/ssh/jumppod
chmod 700 /root/.ssh
printf '%s\n' "$DSTACK_AUTHORIZED_KEYS" > /root/.ssh/authorized_keys
chmod 600 /root/.ssh/authorized_keys
merge() {
  for f in /etc/ssh/jumppod/keys/*; do
    if [ -f "$f" ]; then cat "$f"; echo; fi
  done > /etc/ssh/jumppod/authorized_keys.new
  chmod 644 /etc/ssh/jumppod/authorized_keys.new
  mv -f /etc/ssh/jumppod/authorized_keys.new /etc/ssh/jumppod/authorized_keys
}
merge
(set +e; while sleep 10; do merge; done) &
/usr/sbin/sshd -D -e -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no -o AllowTcpForwarding=local -o LogLevel=ERROR -o "AuthorizedKeysFile=.ssh/authorized_keys /etc/ssh/jumppod/authorized_keys" &
listener=$!
status=0
while [ -z "$terminating" ]; do
  wait "$listener" && status=0 || status=$?
  if [ -z "$terminating" ]; then exit "$status"; fi
done
echo "jumppod: terminating: accepting for 20 s more, then sessions only" >&2
sleep 20 || true
kill -TERM "$listener" 2>/dev/null || true
wait "$listener" || true
"#;

/// [`SSHD_SCRIPT`] after the session count.
const SSHD_SCRIPT_END: &str = r#"
while [ "$(sessions)" -gt 0 ]; do sleep 1; done
echo "jumppod: terminating: no session left" >&2
"#;

/// The pod's grace period: the handover, then the configured session drain.
pub fn grace_period_seconds(config: &Config) -> i64 {
    jumppod::kit::grace_period_seconds(config.session_drain_seconds)
}

/// Whether a ReplicaSet is dstack's own (its ReplicaSet change), not `ensure`'s: its container
/// runs dstack's command, which dstack writes as `command: ["/bin/sh"]` and `args: ["-c",
/// "<steps joined by ' && '>"]` (`_create_jump_pod_service_if_not_exists`), where `ensure`
/// puts its start script into `command`. Its template is dstack's to decide: no drift is
/// reported against it; it is surged like any jump-pod ReplicaSet.
pub fn is_dstacks_own(rs: &ReplicaSet) -> bool {
    crate::objects::template_spec(rs)
        .and_then(|spec| spec.containers.first())
        .is_some_and(|c| {
            c.command.as_deref() == Some(&["/bin/sh".to_owned()][..])
                && c.args.as_ref().and_then(|a| a.first()).map(String::as_str) == Some("-c")
        })
}

/// The three objects of one project's jump pod, built once from the configuration: the planner
/// compares what it observes with these, and the executor writes them.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub namespace: Namespace,
    pub replicaset: ReplicaSet,
    pub service: Service,
}

impl Desired {
    pub fn from_config(config: &Config) -> Desired {
        Desired {
            namespace: namespace(config),
            replicaset: replicaset(config),
            service: service(config, config.port),
        }
    }

    /// The pod the ReplicaSet's template describes.
    pub fn pod_spec(&self) -> &PodSpec {
        self.replicaset
            .spec
            .as_ref()
            .and_then(|spec| spec.template.as_ref())
            .and_then(|template| template.spec.as_ref())
            .expect("Desired::from_config builds the template's pod")
    }

    /// The Service on another NodePort (`None`: one the API server allocates), as when the
    /// Service of an older release is replaced and its port kept.
    pub fn service_on(&self, node_port: Option<i32>) -> Service {
        let mut service = self.service.clone();
        for port in service
            .spec
            .iter_mut()
            .flat_map(|spec| spec.ports.iter_mut().flatten())
        {
            port.node_port = node_port;
        }
        service
    }
}

fn namespace(config: &Config) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(config.namespace.clone()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// The container's resources: Guaranteed cpu and memory, the ephemeral-storage request of the
/// contract and no ephemeral-storage limit.
fn resources(config: &Config) -> ResourceRequirements {
    let compute = BTreeMap::from([
        ("cpu".to_owned(), Q(config.cpu.clone())),
        ("memory".to_owned(), Q(config.memory.clone())),
    ]);
    let mut requests = compute.clone();
    requests.insert(
        "ephemeral-storage".to_owned(),
        Q(config.contract.ephemeral_storage_request.text.clone()),
    );
    ResourceRequirements {
        requests: Some(requests),
        limits: Some(compute),
        ..ResourceRequirements::default()
    }
}

fn pod_spec(config: &Config) -> PodSpec {
    let name = &config.name;
    PodSpec {
        containers: vec![Container {
            name: schema::container_name(name),
            image: Some(config.image.clone()),
            command: Some(vec!["/bin/sh".into(), "-c".into(), SSHD_SCRIPT.clone()]),
            env: Some(vec![EnvVar {
                name: AUTHORIZED_KEYS_ENV.into(),
                value: config.ssh_public_key.clone(),
                value_from: None,
            }]),
            ports: Some(vec![ContainerPort {
                container_port: schema::SSH_PORT,
                name: Some("ssh".into()),
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            }]),
            readiness_probe: Some(Probe {
                tcp_socket: Some(TCPSocketAction {
                    port: IntOrString::Int(schema::SSH_PORT),
                    host: None,
                }),
                // A replacement is an endpoint within 2 s of sshd listening: the handover of
                // the pod it replaces is bounded ([`HANDOVER_SECONDS`]).
                period_seconds: Some(2),
                ..Probe::default()
            }),
            resources: Some(resources(config)),
            volume_mounts: Some(vec![VolumeMount {
                name: KEYS_VOLUME.into(),
                mount_path: KEYS_MOUNT.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            }]),
            ..Container::default()
        }],
        // Optional: the pod starts before any user key exists; the kubelet mounts the Secret
        // once `jumppod keys add` creates it.
        volumes: Some(vec![Volume {
            name: KEYS_VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(keys_secret_name(name)),
                optional: Some(true),
                default_mode: Some(0o444),
                items: None,
            }),
            ..Volume::default()
        }]),
        restart_policy: Some("Always".into()),
        termination_grace_period_seconds: Some(grace_period_seconds(config)),
        node_selector: (!config.node_selector.is_empty()).then(|| config.node_selector.clone()),
        tolerations: (!config.tolerations.is_empty()).then(|| config.tolerations.clone()),
        ..PodSpec::default()
    }
}

fn replicaset(config: &Config) -> ReplicaSet {
    let name = &config.name;
    let labels = schema::current_labels(name, &config.project);
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(config.namespace.clone()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(1),
            min_ready_seconds: None,
            selector: LabelSelector {
                match_labels: Some(schema::current_selector(name)),
                match_expressions: None,
            },
            template: Some(PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec(config)),
            }),
        }),
        status: None,
    }
}

/// The NodePort Service with the current selector, on `node_port` if given.
fn service(config: &Config, node_port: Option<i32>) -> Service {
    let name = &config.name;
    Service {
        metadata: ObjectMeta {
            name: Some(schema::service_name(name)),
            namespace: Some(config.namespace.clone()),
            labels: Some(schema::current_labels(name, &config.project)),
            annotations: Some(BTreeMap::from([(
                crate::objects::CREATED_BY_ANNOTATION.to_owned(),
                crate::objects::CREATED_BY.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("NodePort".into()),
            selector: Some(schema::current_selector(name)),
            ports: Some(vec![ServicePort {
                name: Some("ssh".into()),
                port: schema::SSH_PORT,
                target_port: Some(IntOrString::Int(schema::SSH_PORT)),
                node_port,
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jumppod::settings::Contract;

    #[test]
    fn the_replicaset_meets_the_contract_with_the_core_rules() {
        let config = Config::for_project("ns", "main");
        let rs = replicaset(&config);
        let spec = rs.spec.unwrap().template.unwrap().spec.unwrap();
        assert_eq!(jumppod::rules::check(&spec, &Contract::default()), vec![]);
    }

    #[test]
    fn the_sshd_script_is_valid_shell_and_starts_sshd_as_dstack_does() {
        let spec = pod_spec(&Config::for_project("dstack", "main"));
        let command = spec.containers[0].command.clone().unwrap();
        assert_eq!(command[..2], ["/bin/sh", "-c"]);
        // `sh -n` parses without running: a quoting mistake fails here, not in the pod.
        let parsed = std::process::Command::new("/bin/sh")
            .args(["-n", "-c", &command[2]])
            .status()
            .expect("/bin/sh");
        assert!(parsed.success(), "{}", command[2]);
        let script = &command[2];
        let removed = script.find("rm -f /etc/ssh/ssh_host_*\n");
        let made = script.find("ssh-keygen -A");
        assert!(
            removed.is_some() && removed < made,
            "the image's host keys are removed before ssh-keygen -A: {script}"
        );
        assert!(
            script.contains(&format!("sleep {HANDOVER_SECONDS} ")),
            "the handover is HANDOVER_SECONDS long: {script}"
        );
        assert!(
            !script.contains("exec /usr/sbin/sshd"),
            "sshd is not PID 1: the shell must outlive its listener for the sessions"
        );
        assert_eq!(spec.termination_grace_period_seconds, Some(20 + 300));
        for part in [
            "trap 'terminating=1' TERM",
            "kill -TERM \"$listener\"",
            "ssh-keygen -A",
            "PasswordAuthentication=no",
            "AllowTcpForwarding=local",
            "LogLevel=ERROR",
        ] {
            assert!(command[2].contains(part), "{part} in {}", command[2]);
        }
    }

    #[test]
    fn the_pod_ensure_makes_gets_no_kit_from_the_policy() {
        assert!(SSHD_SCRIPT.contains(jumppod::kit::OWN_SCRIPT_MARK));
        // One session count for the kit and the start script.
        assert!(SSHD_SCRIPT.contains(jumppod::kit::SESSIONS));
        assert!(jumppod::kit::pre_stop_script(300).contains(jumppod::kit::SESSIONS));
        assert!(SSHD_SCRIPT.contains(&format!("{KEYS_MOUNT}/*")));
        let rs = replicaset(&Config::for_project("ns", "main"));
        let template = rs.spec.unwrap().template.unwrap();
        let pod = k8s_openapi::api::core::v1::Pod {
            metadata: template.metadata.unwrap(),
            spec: template.spec,
            status: None,
        };
        let mutation = jumppod::mutate::plan(&pod, schema::Schema::Current, &Contract::default());
        assert!(mutation.is_empty(), "{mutation:?}");
    }

    #[test]
    fn the_service_on_another_port_differs_from_the_desired_one_in_its_port_alone() {
        let desired = Desired::from_config(&Config::for_project("ns", "main"));
        let moved = desired.service_on(Some(30123));
        let mut back = moved.clone();
        back.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].node_port = desired
            .service
            .spec
            .as_ref()
            .unwrap()
            .ports
            .as_ref()
            .unwrap()[0]
            .node_port;
        assert_eq!(back, desired.service);
        assert_eq!(moved.spec.unwrap().ports.unwrap()[0].node_port, Some(30123));
    }

    #[test]
    fn the_selector_matches_the_template_labels() {
        let rs = replicaset(&Config::for_project("ns", "main"));
        let spec = rs.spec.unwrap();
        let labels = spec.template.unwrap().metadata.unwrap().labels.unwrap();
        let selector = spec.selector.match_labels.unwrap();
        // Exactly the instance label: an empty selector would match every pod.
        assert_eq!(
            selector,
            BTreeMap::from([(
                "app.kubernetes.io/instance".to_string(),
                "dstack-main-ssh-jump-pod".to_string()
            )])
        );
        for (k, v) in &selector {
            assert_eq!(labels.get(k), Some(v), "template label {k}");
        }
    }

    #[test]
    fn the_service_selects_on_the_instance_label_and_keeps_the_port() {
        let config = Config::for_project("ns", "main");
        let svc = service(&config, Some(31022));
        let spec = svc.spec.unwrap();
        assert_eq!(
            spec.selector.unwrap(),
            BTreeMap::from([(
                "app.kubernetes.io/instance".to_string(),
                "dstack-main-ssh-jump-pod".to_string()
            )])
        );
        assert_eq!(spec.ports.unwrap()[0].node_port, Some(31022));
        assert_eq!(
            svc.metadata.name.as_deref(),
            Some("dstack-main-ssh-jump-pod-service")
        );
    }
}
