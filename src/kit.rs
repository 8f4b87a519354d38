//! The kit: what a jump pod running dstack's own command gets at creation so that it ends as
//! jumppod's own pod ends, and serves the users' keys of the Secret `<instance>-authorized-keys`.
//!
//! dstack's jump pod runs `/bin/sh -c "... && /usr/sbin/sshd -D -e -p 22 ..."`: PID 1 is `sh`,
//! which ignores SIGTERM, so a deleted pod waits out its grace period and is then SIGKILLed,
//! every session with it; and its replacement starts with the project key alone. The kit adds,
//! to the container that serves SSH and without touching its command:
//! - a `preStop` hook ([`pre_stop_script`]): the listener stays open for [`HANDOVER_SECONDS`]
//!   (a terminating pod that still passes its readiness probe stays a serving endpoint, which
//!   kube-proxy uses while the Service has no ready one: KEP-1669), then the readiness probe
//!   fails ([`DRAINING_FILE`]), the authenticated SSH connections ([`SESSIONS`]: shells and
//!   jumps) are waited for up to the session drain, and the `sshd -D` listener is stopped:
//!   dstack's `sh` waits on it as the last command of its `&&` chain, so the container ends
//!   then instead of at the grace period's end. Each step is logged to PID 1's stdout, which
//!   `kubectl logs` shows (the kubelet records a hook's own output only when it fails);
//! - a readiness probe ([`readiness_script`]): sshd listens on port 22 and the pod is not
//!   draining (kubelets 1.35 and 1.36.3 run no exec probe once a pod terminates, a regression
//!   fixed upstream: there the pod keeps its Ready through the drain);
//! - `terminationGracePeriodSeconds` of at least the handover plus the session drain;
//! - the Secret `<instance>-authorized-keys` (optional) mounted read-only at [`KEYS_MOUNT`],
//!   and a `postStart` hook ([`post_start_script`]) that merges its keys into root's
//!   `authorized_keys` every [`KEYS_MERGE_SECONDS`], marked with [`KEY_MARK`].
//!
//! Each only where the pod has none; a value set is never rewritten (the grace period is only
//! raised). The scripts are POSIX sh and read `/proc` with `sh`, `cat` and `grep` only (Debian's
//! dash and coreutils, busybox's ash and applets).

use crate::schema;
use crate::settings::Contract;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use serde_json::{Map, Value, json};

/// How long a terminating jump pod still accepts new connections: a replacement's start on the
/// real nodes took 1.3-15.5 s, and kube-proxy applies an endpoints' change within a second or
/// two. jumppod's own start script hands over as long.
pub const HANDOVER_SECONDS: u32 = 20;
/// How often the running pod merges the mounted Secret's keys again, in seconds.
pub const KEYS_MERGE_SECONDS: u32 = 10;
/// The pod's volume of the authorized-keys Secret.
pub const KEYS_VOLUME: &str = "authorized-keys";
/// Where the pod mounts the project's authorized-keys Secret (read-only, one file per key).
pub const KEYS_MOUNT: &str = "/etc/ssh/jumppod/keys";
/// Ends every line the kit's merge writes into root's `authorized_keys`: sshd takes what
/// follows the key as its comment, and the merge removes only lines that end so.
pub const KEY_MARK: &str = "# added by jumppod";
/// Present once the handover is over: the readiness probe fails from then on.
pub const DRAINING_FILE: &str = "/tmp/jumppod-draining";
/// How often the kubelet runs the kit's readiness probe.
pub const READINESS_PERIOD_SECONDS: i32 = 2;
/// A line of jumppod's own start script (`jumppod-plan`'s `manifest::SSHD_SCRIPT`), which hands
/// over and drains by itself: a container whose command or arguments hold it gets no kit.
pub const OWN_SCRIPT_MARK: &str = "trap 'terminating=1' TERM";

/// The Secret holding the users' keys of a jump pod, `<instance>-authorized-keys`.
pub fn keys_secret_name(instance: &str) -> String {
    format!("{instance}-authorized-keys")
}

/// The pod's grace period: the handover, then the session drain.
pub fn grace_period_seconds(session_drain_seconds: u32) -> i64 {
    i64::from(HANDOVER_SECONDS) + i64::from(session_drain_seconds)
}

/// `grep` pattern of sshd listening on the SSH port in `/proc/net/tcp{,6}`: the local address's
/// port in hex, any remote address on port 0, state 0A (LISTEN).
fn listening_pattern() -> String {
    format!(":{:04X} [0-9A-F]*:0000 0A ", schema::SSH_PORT)
}

/// Writes a line to PID 1's stdout (the container's log), or nowhere.
const LOG: &str = r#"log() { echo "jumppod: $*" 2>/dev/null >>/proc/1/fd/1 || :; }"#;

/// The readiness probe: sshd listens on port 22 and the pod is not draining.
pub fn readiness_script() -> String {
    format!(
        "[ ! -e {DRAINING_FILE} ] && cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q '{}'",
        listening_pattern()
    )
}

/// The shell function `sessions`: prints how many authenticated SSH connections the processes
/// under `${1:-/proc}` hold, each one counted once, whether it has a session channel (a shell, a
/// command) or none (a jump: `ssh -J`, `-W`, `-N -L`). The kit's `preStop` hook and the start
/// script of `ensure`'s pods both wait on it.
///
/// It reads process titles, as OpenSSH sets them (`setproctitle`): the process of an
/// authenticated connection is titled with the user's name once authenticated (session.c
/// `do_authenticated`: `sshd: root`, which a jump keeps), and `user@ttys` while it has sessions
/// (`session_proctitle`: `sshd: root@notty`, `sshd: root@pts/0`). Every other sshd process
/// carries a second word or a bracket: the listener (`sshd: /usr/sbin/sshd -D ... [listener] 0
/// of 10-100 startups`), a connection before authentication (`[accepted]`, `[net]`, OpenSSH
/// 10's `sshd-auth: [session-auth]`) and a connection's privileged monitor (`sshd: alice
/// [priv]`, whose child `sshd: alice` is counted; Debian's 9.2 runs none for root). From
/// OpenSSH 9.8 the per-connection processes are `sshd-session` (the same titles after
/// `sshd-session: `). A listener that never renamed itself (`/usr/sbin/sshd -D ...`) does not
/// start with `sshd`. The title is the command line up to its first NUL (Linux pads the rest
/// with NULs), which dash's and busybox's `read` leave out: no `ps`, and no `grep` on binary
/// data. A connection that never authenticates (a scanner on a public NodePort, a login in
/// progress) is not counted.
pub const SESSIONS: &str = r#"sessions() {
  n=0
  for d in ${1:-/proc}/[0-9]*; do
    read -r c 2>/dev/null <"$d/comm" || continue
    case $c in sshd*) ;; *) continue ;; esac
    t=
    IFS= read -r t 2>/dev/null <"$d/cmdline" || :
    case $t in
      sshd*': '*' '* | sshd*': '*'['*) ;;
      sshd*': '?*) n=$((n + 1)) ;;
    esac
  done
  echo "$n"
}"#;

/// The `preStop` hook: the handover, the readiness probe failed, the authenticated SSH
/// connections ([`SESSIONS`]: shells and jumps) waited for (at most `session_drain_seconds`),
/// then the `sshd -D` listener stopped. The listener is the `sshd` whose command line holds
/// `-D` (`sshd: /usr/sbin/sshd -D ... [listener] ...` once it has renamed itself).
pub fn pre_stop_script(session_drain_seconds: u32) -> String {
    format!(
        r#"{LOG}
{SESSIONS}
listeners() {{
  for d in /proc/[0-9]*; do
    read -r c 2>/dev/null <"$d/comm" || continue
    [ "$c" = sshd ] && grep -q -e -D "$d/cmdline" 2>/dev/null && echo "${{d#/proc/}}"
  done
}}
log "stopping: sshd accepts new connections for {HANDOVER_SECONDS} s more (the handover)"
sleep {HANDOVER_SECONDS}
: >{DRAINING_FILE}
n=$(sessions)
log "handover over: the readiness probe fails from now on; waiting for $n authenticated SSH connection(s) (shells and jumps), at most {session_drain_seconds} s"
waited=0
while [ "$n" -gt 0 ] && [ "$waited" -lt {session_drain_seconds} ]; do
  sleep 1
  waited=$((waited + 1))
  n=$(sessions)
done
if [ "$n" -gt 0 ]; then
  log "session drain over after $waited s with $n connection(s) open"
else
  log "no authenticated SSH connection left after $waited s"
fi
pids=$(listeners)
if [ -z "$pids" ]; then
  log "no sshd -D listener found"
  exit 0
fi
log "stopping the sshd listener (pid $pids): the container ends with it"
# Once this hook has returned: the container ends with the listener, and an exec still running
# in it then is killed, which the kubelet reports as a failed hook (FailedPreStopHook).
(sleep 1; kill -TERM $pids) </dev/null >/dev/null 2>&1 &
"#
    )
}

/// The `postStart` hook: starts the merge of the mounted Secret's keys in the background (its
/// standard streams closed: the CRI's exec returns only once they are) and returns.
///
/// Once sshd listens (dstack's command has then written the project key to root's
/// `authorized_keys`), every [`KEYS_MERGE_SECONDS`]: each line of the Secret whose key blob is
/// not in the file yet is appended to it, ending with [`KEY_MARK`]; a marked line whose key is
/// no longer in the Secret is removed. dstack appends its jobs' keys to the same file over SSH
/// (`get_add_authorized_keys_script`, which skips a blob already there), so the file is
/// appended to, and rewritten (atomically, by `mv`) only to remove, and only if it did not change
/// while the new one was written. Lines not marked (the project key, dstack's) are never
/// touched. The kubelet refreshes a mounted Secret on its periodic sync.
pub fn post_start_script() -> String {
    format!(
        r#"(
keys=~root/.ssh/authorized_keys
mark='{KEY_MARK}'
nl='
'
{LOG}
listening() {{ cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q '{listening}'; }}
blob_of() {{
  blob=
  prev=
  set -f
  for w in $1; do
    case $prev in ssh-* | ecdsa-* | sk-*) case $w in AAAA*) blob=$w; break ;; esac ;; esac
    prev=$w
  done
  set +f
}}
merge() {{
  [ -f "$keys" ] || return 0
  wanted=$(for f in {KEYS_MOUNT}/*; do if [ -f "$f" ]; then cat "$f"; echo; fi; done)
  added=0
  while IFS= read -r line; do
    blob_of "$line"
    [ -n "$blob" ] || continue
    grep -qF -e "$blob" "$keys" && continue
    c=$(cat "$keys"; echo .)
    case ${{c%.}} in '' | *"$nl") ;; *) echo >>"$keys" ;; esac
    printf '%s %s\n' "$line" "$mark" >>"$keys"
    added=$((added + 1))
  done <<EOF
$wanted
EOF
  current=$(cat "$keys")
  stale=0
  while IFS= read -r line; do
    case $line in *"$mark")
      blob_of "$line"
      [ -n "$blob" ] && ! printf '%s\n' "$wanted" | grep -qF -e "$blob" && stale=$((stale + 1)) ;;
    esac
  done <<EOF
$current
EOF
  if [ "$stale" -gt 0 ]; then
    : >"$keys.jumppod"
    while IFS= read -r line; do
      case $line in *"$mark")
        blob_of "$line"
        [ -n "$blob" ] && ! printf '%s\n' "$wanted" | grep -qF -e "$blob" && continue ;;
      esac
      printf '%s\n' "$line" >>"$keys.jumppod"
    done <<EOF
$current
EOF
    if [ "$(cat "$keys")" = "$current" ] && chmod 600 "$keys.jumppod" && mv -f "$keys.jumppod" "$keys"; then
      :
    else
      rm -f "$keys.jumppod"
      stale=0
    fi
  fi
  if [ "$added" -gt 0 ] || [ "$stale" -gt 0 ]; then
    log "keys: $added added to and $stale removed from $keys (the Secret mounted at {KEYS_MOUNT})"
  fi
}}
until listening; do sleep 1; done
log "keys: sshd listens; the keys of the Secret mounted at {KEYS_MOUNT} are merged into $keys every {KEYS_MERGE_SECONDS} s"
while :; do
  merge
  sleep {KEYS_MERGE_SECONDS}
done
) </dev/null >/dev/null 2>&1 &
"#,
        listening = listening_pattern(),
    )
}

/// One thing the kit adds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// `lifecycle.preStop` of the jump container.
    PreStop,
    /// `lifecycle.postStart` of the jump container: the keys' merge.
    PostStart,
    /// `readinessProbe` of the jump container.
    ReadinessProbe,
    /// `terminationGracePeriodSeconds`, raised to this.
    GracePeriod { seconds: i64 },
    /// The volume [`KEYS_VOLUME`] of this Secret.
    KeysVolume { secret: String },
    /// The jump container's read-only mount of [`KEYS_VOLUME`] at [`KEYS_MOUNT`].
    KeysMount,
}

/// What the kit adds to one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kit {
    /// The jump container: its index in `spec.containers`, and its name.
    pub container: usize,
    pub container_name: String,
    pub session_drain_seconds: u32,
    pub parts: Vec<Part>,
}

/// The container that serves SSH: the one exposing port 22, else the only one.
pub fn jump_container(spec: &PodSpec) -> Option<usize> {
    let serves = |c: &Container| {
        c.ports
            .iter()
            .flatten()
            .any(|p| p.container_port == schema::SSH_PORT)
    };
    match spec.containers.iter().position(serves) {
        Some(index) => Some(index),
        None => (spec.containers.len() == 1).then_some(0),
    }
}

/// Whether a container runs jumppod's own start script.
fn runs_own_script(container: &Container) -> bool {
    container
        .command
        .iter()
        .chain(container.args.iter())
        .flatten()
        .any(|word| word.contains(OWN_SCRIPT_MARK))
}

/// What the kit adds to a created jump pod under `contract`, or None: the kit is off (or
/// mutation is), no container serves SSH, it has a `preStop` hook (the kit, or a handover of
/// its own) or it runs jumppod's own start script.
pub fn plan(pod: &Pod, contract: &Contract) -> Option<Kit> {
    if !contract.adds_kit() {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let index = jump_container(spec)?;
    let container = &spec.containers[index];
    let lifecycle = container.lifecycle.as_ref();
    if lifecycle.is_some_and(|l| l.pre_stop.is_some()) || runs_own_script(container) {
        return None;
    }
    let drain = contract.session_drain_seconds;
    let mut parts = vec![Part::PreStop];
    if container.readiness_probe.is_none() {
        parts.push(Part::ReadinessProbe);
    }
    let grace = grace_period_seconds(drain);
    // The API server defaults the field to 30 before admission; a pod copied by a host may
    // still lack it.
    if spec.termination_grace_period_seconds.unwrap_or(30) < grace {
        parts.push(Part::GracePeriod { seconds: grace });
    }
    let has_volume = spec.volumes.iter().flatten().any(|v| v.name == KEYS_VOLUME);
    let secret = instance(pod).map(keys_secret_name);
    if !has_volume && let Some(secret) = secret.filter(|s| dns_subdomain(s)) {
        parts.push(Part::KeysVolume { secret });
    }
    let volume = has_volume || parts.iter().any(|p| matches!(p, Part::KeysVolume { .. }));
    let mounts = container.volume_mounts.iter().flatten();
    let mounted = mounts.clone().any(|m| m.mount_path == KEYS_MOUNT);
    let mounts_volume = mounts.clone().any(|m| m.name == KEYS_VOLUME);
    if volume && !mounted && !mounts_volume {
        parts.push(Part::KeysMount);
    }
    // The merge reads the mount: without it there is nothing to merge.
    let keys_mounted = mounted || parts.contains(&Part::KeysMount);
    if keys_mounted && lifecycle.is_none_or(|l| l.post_start.is_none()) {
        parts.push(Part::PostStart);
    }
    Some(Kit {
        container: index,
        container_name: container.name.clone(),
        session_drain_seconds: drain,
        parts,
    })
}

/// The instance the pod serves: its `app.kubernetes.io/instance` label, else its own name.
fn instance(pod: &Pod) -> Option<&str> {
    let meta = &pod.metadata;
    meta.labels
        .as_ref()
        .and_then(|l| l.get(schema::INSTANCE_LABEL))
        .or(meta.name.as_ref())
        .map(String::as_str)
        .filter(|name| !name.is_empty())
}

/// Whether `name` can name a Secret (a DNS subdomain, RFC 1123): the API server refuses a pod
/// whose volume names one that cannot.
fn dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                && bytes[0] != b'-'
                && bytes[bytes.len() - 1] != b'-'
        })
}

/// `/bin/sh -c <script>`, as an exec action.
fn exec(script: String) -> Value {
    json!({"exec": {"command": ["/bin/sh", "-c", script]}})
}

impl Kit {
    /// Writes the kit into a pod's JSON, creating the objects and lists on the way.
    pub fn apply(&self, pod: &mut Value) {
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        for part in &self.parts {
            match part {
                Part::GracePeriod { seconds } => {
                    spec.insert("terminationGracePeriodSeconds".into(), json!(seconds));
                }
                Part::KeysVolume { secret } => push(
                    spec,
                    "volumes",
                    json!({"name": KEYS_VOLUME, "secret": {
                        "secretName": secret, "optional": true, "defaultMode": 0o444}}),
                ),
                _ => {}
            }
        }
        let Some(container) = spec
            .get_mut("containers")
            .and_then(|list| list.get_mut(self.container))
            .and_then(Value::as_object_mut)
        else {
            return;
        };
        for part in &self.parts {
            match part {
                Part::PreStop => {
                    object_at(container, "lifecycle").insert(
                        "preStop".into(),
                        exec(pre_stop_script(self.session_drain_seconds)),
                    );
                }
                Part::PostStart => {
                    object_at(container, "lifecycle")
                        .insert("postStart".into(), exec(post_start_script()));
                }
                Part::ReadinessProbe => {
                    let mut probe = exec(readiness_script());
                    probe["periodSeconds"] = json!(READINESS_PERIOD_SECONDS);
                    // Fails at once when the pod drains; a slow exec on a loaded node is not
                    // a failure.
                    probe["failureThreshold"] = json!(1);
                    probe["timeoutSeconds"] = json!(5);
                    container.insert("readinessProbe".into(), probe);
                }
                Part::KeysMount => push(
                    container,
                    "volumeMounts",
                    json!({"name": KEYS_VOLUME, "mountPath": KEYS_MOUNT, "readOnly": true}),
                ),
                Part::GracePeriod { .. } | Part::KeysVolume { .. } => {}
            }
        }
    }
}

/// The object at `key`, replacing an absent or non-object value with `{}`.
pub(crate) fn object_at<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
) -> &'a mut Map<String, Value> {
    let slot = parent
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut().expect("just made an object")
}

/// Appends `item` to the list at `key`, replacing an absent or non-list value with `[]`.
fn push(parent: &mut Map<String, Value>, key: &str, item: Value) {
    let slot = parent
        .entry(key.to_owned())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    if let Value::Array(items) = slot {
        items.push(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;
    use rstest::rstest;

    /// dstack 0.22.5's bare jump pod as the API server hands it to admission (the grace period
    /// defaulted), with what `case` changes.
    fn dstack_pod(change: impl FnOnce(&mut Value)) -> Pod {
        let mut pod = json!({
            "metadata": {"name": "dstack-main-ssh-jump-pod", "labels": {
                "app.kubernetes.io/name": "dstack-ssh-proxy",
                "app.kubernetes.io/instance": "dstack-main-ssh-jump-pod",
                "app.kubernetes.io/managed-by": "dstack", "k8s.dstack.ai/project": "main"}},
            "spec": {"terminationGracePeriodSeconds": 30, "containers": [{
                "name": "dstack-main-ssh-jump-pod-container", "image": "sshd",
                "command": ["/bin/sh"],
                "args": ["-c", "mkdir -p ~/.ssh && /usr/sbin/sshd -D -e -p 22"],
                "ports": [{"containerPort": 22}]}]}});
        change(&mut pod);
        serde_json::from_value(pod).unwrap()
    }

    fn contract(settings: &str) -> Contract {
        Settings::from_json(settings.as_bytes())
            .unwrap()
            .contract()
            .unwrap()
    }

    fn parts(pod: &Pod, settings: &str) -> Option<Vec<Part>> {
        plan(pod, &contract(settings)).map(|kit| kit.parts)
    }

    fn every_part(grace: i64) -> Vec<Part> {
        vec![
            Part::PreStop,
            Part::ReadinessProbe,
            Part::GracePeriod { seconds: grace },
            Part::KeysVolume {
                secret: "dstack-main-ssh-jump-pod-authorized-keys".into(),
            },
            Part::KeysMount,
            Part::PostStart,
        ]
    }

    #[rstest]
    #[case::dstacks_bare_pod_gets_every_part(dstack_pod(|_| {}), "{}", Some(every_part(320)))]
    #[case::the_grace_period_is_the_handover_and_the_configured_drain(
        dstack_pod(|_| {}), r#"{"sessionDrainSeconds": 60}"#, Some(every_part(80)))]
    #[case::a_short_drain_never_lowers_the_grace_period(
        dstack_pod(|_| {}), r#"{"sessionDrainSeconds": 5}"#,
        Some(vec![Part::PreStop, Part::ReadinessProbe,
                  Part::KeysVolume { secret: "dstack-main-ssh-jump-pod-authorized-keys".into() },
                  Part::KeysMount, Part::PostStart]))]
    #[case::a_pod_a_host_copied_without_a_grace_period_gets_one(
        dstack_pod(|p| p["spec"]["terminationGracePeriodSeconds"] = Value::Null), "{}", Some(every_part(320)))]
    #[case::a_longer_grace_period_is_kept(
        dstack_pod(|p| p["spec"]["terminationGracePeriodSeconds"] = json!(600)), "{}",
        Some(vec![Part::PreStop, Part::ReadinessProbe,
                  Part::KeysVolume { secret: "dstack-main-ssh-jump-pod-authorized-keys".into() },
                  Part::KeysMount, Part::PostStart]))]
    #[case::a_pod_with_a_pre_stop_hook_gets_nothing(
        dstack_pod(|p| p["spec"]["containers"][0]["lifecycle"] = json!({"preStop": {"exec": {"command": ["true"]}}})),
        "{}", None)]
    #[case::a_pod_running_jumppods_own_script_gets_nothing(
        dstack_pod(|p| p["spec"]["containers"][0]["args"][1] = json!(format!("set -e\n{OWN_SCRIPT_MARK}\nsshd -D"))),
        "{}", None)]
    #[case::with_the_kit_off_nothing(dstack_pod(|_| {}), r#"{"kit": false}"#, None)]
    #[case::with_mutation_off_nothing(dstack_pod(|_| {}), r#"{"mutate": false}"#, None)]
    #[case::a_readiness_probe_and_a_post_start_hook_of_its_own_are_kept(
        dstack_pod(|p| {
            p["spec"]["containers"][0]["readinessProbe"] = json!({"tcpSocket": {"port": 22}});
            p["spec"]["containers"][0]["lifecycle"] = json!({"postStart": {"exec": {"command": ["true"]}}});
        }),
        "{}",
        Some(vec![Part::PreStop, Part::GracePeriod { seconds: 320 },
                  Part::KeysVolume { secret: "dstack-main-ssh-jump-pod-authorized-keys".into() },
                  Part::KeysMount]))]
    #[case::the_keys_volume_already_mounted_is_kept(
        dstack_pod(|p| {
            p["spec"]["volumes"] = json!([{"name": KEYS_VOLUME, "secret": {"secretName": "mine"}}]);
            p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": KEYS_VOLUME, "mountPath": KEYS_MOUNT}]);
        }),
        "{}", Some(vec![Part::PreStop, Part::ReadinessProbe, Part::GracePeriod { seconds: 320 }, Part::PostStart]))]
    #[case::another_volume_at_the_keys_path_gets_no_second_mount(
        dstack_pod(|p| p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "mine", "mountPath": KEYS_MOUNT}])),
        "{}",
        Some(vec![Part::PreStop, Part::ReadinessProbe, Part::GracePeriod { seconds: 320 },
                  Part::KeysVolume { secret: "dstack-main-ssh-jump-pod-authorized-keys".into() },
                  Part::PostStart]))]
    #[case::an_instance_that_cannot_name_a_secret_gets_no_keys(
        dstack_pod(|p| p["metadata"]["labels"]["app.kubernetes.io/instance"] = json!("Main_Pod")),
        "{}", Some(vec![Part::PreStop, Part::ReadinessProbe, Part::GracePeriod { seconds: 320 }]))]
    #[case::without_an_instance_label_the_pod_names_the_secret(
        dstack_pod(|p| { p["metadata"]["labels"] = json!({"app.kubernetes.io/name": "p-ssh-jump-pod"}); p["metadata"]["name"] = json!("p-ssh-jump-pod"); }),
        "{}",
        Some(vec![Part::PreStop, Part::ReadinessProbe, Part::GracePeriod { seconds: 320 },
                  Part::KeysVolume { secret: "p-ssh-jump-pod-authorized-keys".into() },
                  Part::KeysMount, Part::PostStart]))]
    fn the_kit_adds_only_what_the_pod_lacks(
        #[case] pod: Pod,
        #[case] settings: &str,
        #[case] expected: Option<Vec<Part>>,
    ) {
        assert_eq!(parts(&pod, settings), expected);
    }

    #[rstest]
    #[case::the_container_exposing_port_22_among_several(
        json!([{"name": "side"}, {"name": "sshd", "ports": [{"containerPort": 22}]}]), Some(1))]
    #[case::the_only_container_whatever_its_ports(json!([{"name": "sshd"}]), Some(0))]
    #[case::none_among_several_without_port_22(
        json!([{"name": "a", "ports": [{"containerPort": 2222}]}, {"name": "b"}]), None)]
    fn the_jump_container_serves_ssh(#[case] containers: Value, #[case] expected: Option<usize>) {
        let spec: PodSpec = serde_json::from_value(json!({"containers": containers})).unwrap();
        assert_eq!(jump_container(&spec), expected);
    }

    #[test]
    fn the_kit_written_into_json_is_the_pod_the_typed_parse_reads() {
        let pod = dstack_pod(|_| {});
        let kit = plan(&pod, &contract("{}")).unwrap();
        let mut value = serde_json::to_value(&pod).unwrap();
        kit.apply(&mut value);
        let written: Pod = serde_json::from_value(value).unwrap();
        let spec = written.spec.as_ref().unwrap();
        assert_eq!(spec.termination_grace_period_seconds, Some(320));
        let volume = &spec.volumes.as_ref().unwrap()[0];
        assert_eq!(volume.name, "authorized-keys");
        let secret = volume.secret.as_ref().unwrap();
        assert_eq!(
            secret.secret_name.as_deref(),
            Some("dstack-main-ssh-jump-pod-authorized-keys")
        );
        assert_eq!(secret.optional, Some(true));
        let container = &spec.containers[0];
        let mount = &container.volume_mounts.as_ref().unwrap()[0];
        assert_eq!(
            (
                mount.name.as_str(),
                mount.mount_path.as_str(),
                mount.read_only
            ),
            ("authorized-keys", "/etc/ssh/jumppod/keys", Some(true))
        );
        let command = |handler: Option<&k8s_openapi::api::core::v1::LifecycleHandler>| {
            handler
                .and_then(|h| h.exec.as_ref())
                .and_then(|e| e.command.clone())
        };
        let lifecycle = container.lifecycle.as_ref().unwrap();
        assert_eq!(
            command(lifecycle.pre_stop.as_ref()),
            Some(vec!["/bin/sh".into(), "-c".into(), pre_stop_script(300)])
        );
        assert_eq!(
            command(lifecycle.post_start.as_ref()),
            Some(vec!["/bin/sh".into(), "-c".into(), post_start_script()])
        );
        let probe = container.readiness_probe.as_ref().unwrap();
        assert_eq!(probe.period_seconds, Some(2));
        assert_eq!(
            probe.exec.as_ref().and_then(|e| e.command.clone()),
            Some(vec!["/bin/sh".into(), "-c".into(), readiness_script()])
        );
        // The command is dstack's, untouched; and the kit is not added twice.
        assert_eq!(
            container.args,
            pod.spec.as_ref().unwrap().containers[0].args
        );
        assert_eq!(plan(&written, &contract("{}")), None);
    }

    #[test]
    fn the_scripts_say_what_the_constants_say() {
        let pre_stop = pre_stop_script(300);
        assert!(pre_stop.contains("\nsleep 20\n"), "{pre_stop}");
        assert!(
            pre_stop.contains(&format!(": >{DRAINING_FILE}\n")),
            "{pre_stop}"
        );
        assert!(pre_stop.contains(r#"[ "$waited" -lt 300 ]"#), "{pre_stop}");
        assert!(pre_stop.contains(">>/proc/1/fd/1"), "{pre_stop}");
        assert_eq!(
            readiness_script(),
            "[ ! -e /tmp/jumppod-draining ] && cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q ':0016 [0-9A-F]*:0000 0A '"
        );
        let post_start = post_start_script();
        assert!(
            post_start.contains("mark='# added by jumppod'"),
            "{post_start}"
        );
        assert!(
            post_start.contains("/etc/ssh/jumppod/keys/*"),
            "{post_start}"
        );
        assert!(post_start.contains("sleep 10\n"), "{post_start}");
        assert!(
            post_start.ends_with(") </dev/null >/dev/null 2>&1 &\n"),
            "the merge runs in the background, its streams closed: {post_start}"
        );
    }

    /// The scripts parse in every shell found here: Debian's dash (`/bin/sh`) and bash, and
    /// busybox's ash (alpine's `/bin/sh`) where it is installed.
    #[test]
    fn the_scripts_are_valid_posix_shell() {
        let shells: Vec<Vec<&str>> = [
            vec!["/bin/sh"],
            vec!["bash", "--posix"],
            vec!["busybox", "sh"],
        ]
        .into_iter()
        .filter(|shell| {
            std::process::Command::new(shell[0])
                .args(&shell[1..])
                .args(["-c", "true"])
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
        assert!(!shells.is_empty(), "no shell found");
        for shell in &shells {
            for script in [
                pre_stop_script(300),
                post_start_script(),
                readiness_script(),
            ] {
                let parsed = std::process::Command::new(shell[0])
                    .args(&shell[1..])
                    .args(["-n", "-c", &script])
                    .status()
                    .expect("the shell runs");
                assert!(parsed.success(), "{shell:?} -n: {script}");
            }
        }
    }
}
