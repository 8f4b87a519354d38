//! The jump pod's start script under a real OpenSSH sshd: the users' keys of the Secret reach
//! sshd, a removed key stops working in the running pod, a replacement pod has the keys from
//! its start, and a key restricted as dstack restricts it can jump but not open a shell.
//!
//! The container is played by mount and network namespaces of the test's own (`unshare`):
//! `/etc/ssh` (with an empty sshd_config: OpenSSH's defaults), `/root` and `/run` are fresh
//! tmpfs (mode 755/700, as in an image: sshd's StrictModes checks them), and the Secret volume is a directory laid out as the kubelet's
//! atomic writer lays it out (`..data` -> `..<timestamp>/`, one symlink per key), bound at
//! `manifest::KEYS_MOUNT`. An image's baked-in host keys can be laid into `/etc/ssh` first, as
//! the public jump-pod image ships them. The script is `manifest::SSHD_SCRIPT` unchanged. Needs root,
//! `unshare`/`nsenter` (util-linux) and OpenSSH (`make sshd` installs Debian's).

mod sshd_support;

use jumppod_plan::manifest::{
    AUTHORIZED_KEYS_ENV, HANDOVER_SECONDS, KEYS_MERGE_SECONDS, KEYS_MOUNT, SSHD_SCRIPT,
};
use jumppod_plan::public_key::PublicKey;
use sshd_support::*;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The namespaces' setup, then the start script as the container runs it.
const CONTAINER: &str = r#"set -e
mount --make-rprivate /
ip link set lo up
mount -t tmpfs -o mode=755 tmpfs /etc/ssh
: > /etc/ssh/sshd_config
if [ -n "$IMAGE_HOST_KEYS" ]; then cp -p "$IMAGE_HOST_KEYS"/ssh_host_* /etc/ssh/; fi
mkdir -p "$KEYS_MOUNT"
mount --bind "$SECRET_DIR" "$KEYS_MOUNT"
mount -t tmpfs -o mode=700 tmpfs /root
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -m 755 /run/sshd
exec /bin/sh -c "$JUMPPOD_SCRIPT"
"#;

/// One "pod": the script in namespaces of its own; killed with its process group on drop.
struct Pod {
    child: Child,
    log: PathBuf,
}

impl Pod {
    fn start(secret: &Path, project_key: &str, log: PathBuf) -> Pod {
        Pod::from_image(secret, project_key, log, None)
    }

    /// `image_host_keys`: a directory of `ssh_host_*` files the image has in `/etc/ssh`.
    fn from_image(
        secret: &Path,
        project_key: &str,
        log: PathBuf,
        image_host_keys: Option<&Path>,
    ) -> Pod {
        Pod::spawn(
            &["--mount", "--net"],
            &SSHD_SCRIPT,
            secret,
            project_key,
            log,
            image_host_keys,
        )
    }

    /// A pod that can be stopped as the kubelet stops one: in a PID namespace of its own too,
    /// the script its PID 1 (and its scan of `/proc` sees the pod's processes only), `script`
    /// in place of the start script.
    fn stoppable(secret: &Path, project_key: &str, log: PathBuf, script: &str) -> Pod {
        let args = ["--mount", "--net", "--pid", "--fork", "--mount-proc"];
        Pod::spawn(&args, script, secret, project_key, log, None)
    }

    fn spawn(
        namespaces: &[&str],
        script: &str,
        secret: &Path,
        project_key: &str,
        log: PathBuf,
        image_host_keys: Option<&Path>,
    ) -> Pod {
        let stderr = std::fs::File::create(&log).unwrap();
        let child = Command::new("unshare")
            .args(namespaces)
            .args(["/bin/sh", "-c", CONTAINER])
            .env("IMAGE_HOST_KEYS", image_host_keys.unwrap_or(Path::new("")))
            .env("SECRET_DIR", secret)
            .env("KEYS_MOUNT", KEYS_MOUNT)
            .env("JUMPPOD_SCRIPT", script)
            .env(AUTHORIZED_KEYS_ENV, project_key)
            .stdout(Stdio::null())
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .expect("unshare");
        Pod { child, log }
    }

    /// A command run in the pod's network namespace.
    fn in_net(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .args(["--target", &self.child.id().to_string(), "--net", program])
            .stdin(Stdio::null());
        command
    }

    /// The titles (command lines) of the pod's sshd processes, as its own `/proc` shows them.
    fn sshd_titles(&self) -> Vec<String> {
        let init = self.init();
        let out = run(Command::new("nsenter")
            .args(["--target", &init, "--pid", "--mount", "sh", "-c"])
            .arg("for d in /proc/[0-9]*; do tr '\\0' ' ' < $d/cmdline 2>/dev/null; echo; done"));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::trim)
            .filter(|t| t.starts_with("sshd"))
            .map(str::to_owned)
            .collect()
    }

    /// The host's pid of the pod's PID 1: `unshare --fork`'s child.
    fn init(&self) -> String {
        let unshare = self.child.id();
        let children =
            std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).unwrap();
        children
            .split_whitespace()
            .next()
            .expect("unshare's child")
            .to_owned()
    }

    /// SIGTERM to the pod's PID 1 (the start script), as the kubelet stops a container:
    /// `unshare --fork`'s child.
    fn stop(&self) {
        run(Command::new("kill").args(["-TERM", &self.init()]));
    }

    /// `ssh root@127.0.0.1 true` with `key`, from inside the pod's network namespace; the
    /// exit code (0: a shell ran `true`, 1: the forced /bin/false ran, 255: refused) and
    /// stderr. `via`: reach it through `ssh -W` with that key, as `ssh -J` does.
    fn ssh(&self, key: &Path, via: Option<&Path>) -> (i32, String) {
        ssh_in(self.child.id(), key, via)
    }

    /// The ed25519 host key sshd serves, as `ssh-keyscan` reads it (the base64 blob).
    fn host_key(&self) -> String {
        let out = run(Command::new("nsenter")
            .args(["--target", &self.child.id().to_string(), "--net"])
            .args(["ssh-keyscan", "-T", "5", "-t", "ed25519", "127.0.0.1"]));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // `127.0.0.1 ssh-ed25519 AAAA...`
        text.lines()
            .find_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
            .unwrap_or_else(|| panic!("ssh-keyscan printed no key: {text:?}"))
    }

    /// Polls `ssh` with `key` until its exit code is `code`; returns how long it took.
    fn until(&self, key: &Path, code: i32, within: Duration) -> Duration {
        ssh_until(self.child.id(), key, code, within, &self.log)
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        // The merge loop outlives sshd's exec in the same process group.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// Issue 21 §11: the public jump-pod image ships host keys made when it was built, and
/// `ssh-keygen -A` only makes the missing ones, so without removing them every jump pod of
/// every cluster would serve the same, public host key. Each pod must make its own, as dstack's
/// script does (`rm -rf /etc/ssh/ssh_host_*` first).
#[test]
fn every_pod_serves_a_host_key_of_its_own_not_the_images() {
    let dir = test_dir("host-keys");
    let image = dir.join("image");
    let baked = image.join("etc/ssh");
    std::fs::create_dir_all(&baked).unwrap();
    // What Debian's openssh-server leaves in an image: `ssh-keygen -A` at build time.
    run(Command::new("ssh-keygen").arg("-A").arg("-f").arg(&image));
    let baked_key = std::fs::read_to_string(baked.join("ssh_host_ed25519_key.pub")).unwrap();
    let baked_key = baked_key.split_whitespace().nth(1).unwrap().to_owned();
    let (project, project_pub) = keypair(&dir, "project");
    let secret = SecretVolume::new(dir.join("secret"));

    let mut served = Vec::new();
    for n in 1..=2 {
        let pod = Pod::from_image(
            &secret.dir,
            &project_pub,
            dir.join(format!("pod-{n}.log")),
            Some(&baked),
        );
        pod.until(&project, 0, Duration::from_secs(30));
        let key = pod.host_key();
        assert_ne!(
            key, baked_key,
            "pod {n} serves the image's baked-in host key"
        );
        served.push(key);
    }
    assert_ne!(
        served[0], served[1],
        "two pods of one project share a host key"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_replaced_pod_keeps_the_users_keys_and_a_removed_key_stops_working_in_the_running_pod() {
    let dir = test_dir("users-keys");
    let (project, project_pub) = keypair(&dir, "project");
    let (alice, alice_pub) = keypair(&dir, "alice");
    let (bob, bob_pub) = keypair(&dir, "bob");
    let (carol, carol_pub) = keypair(&dir, "carol");
    // Each entry as `jumppod keys add` writes it.
    let line = |public: &str| format!("{}\n", PublicKey::parse("key", public).unwrap().user_line());
    let mut secret = SecretVolume::new(dir.join("secret"));
    secret.publish(&[("alice", line(&alice_pub))]);

    let pod = Pod::start(&secret.dir, &project_pub, dir.join("pod-1.log"));
    // sshd is up once the project key opens a shell.
    pod.until(&project, 0, Duration::from_secs(30));
    let (code, stderr) = pod.ssh(&alice, None);
    assert_eq!(code, 1, "a user's key runs only /bin/false: {stderr}");
    let (code, stderr) = pod.ssh(&project, Some(&alice));
    assert_eq!(
        code, 0,
        "a user's key jumps (ssh -W) to the next host: {stderr}"
    );

    // What dstack does per job: append the user's key over SSH. It works beside the Secret's.
    let append = format!(
        "echo '{}' >> /root/.ssh/authorized_keys",
        line(&carol_pub).trim()
    );
    let out = ssh_command(pod.child.id(), &project, None, &append)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        pod.ssh(&carol, None).0,
        1,
        "a key dstack appended over SSH works"
    );

    // alice removed, bob added: the kubelet updates the volume; the merge loop follows.
    secret.publish(&[("bob", line(&bob_pub))]);
    let bound = Duration::from_secs(u64::from(KEYS_MERGE_SECONDS) * 3);
    let removed_after = pod.until(&alice, 255, bound);
    let added_after = pod.until(&bob, 1, bound);
    println!(
        "after the volume changed: alice refused in {removed_after:?}, bob accepted in {added_after:?}"
    );
    let (_, stderr) = pod.ssh(&alice, None);
    assert!(stderr.contains("Permission denied (publickey)"), "{stderr}");
    assert_eq!(
        pod.ssh(&carol, None).0,
        1,
        "the merge leaves root's own authorized_keys alone"
    );
    drop(pod);

    // The replacement pod: the Secret's keys from its start, the appended ones gone.
    let pod = Pod::start(&secret.dir, &project_pub, dir.join("pod-2.log"));
    pod.until(&project, 0, Duration::from_secs(30));
    assert_eq!(
        pod.ssh(&bob, None).0,
        1,
        "the replacement has the Secret's key at once"
    );
    assert_eq!(pod.ssh(&alice, None).0, 255, "a removed key stays removed");
    assert_eq!(
        pod.ssh(&carol, None).0,
        255,
        "a key only appended over SSH dies with its pod"
    );
    drop(pod);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stopped pod waits for its authenticated sessions and for nothing else: a connection that
/// never logs in (a scanner on a public NodePort: its banner sent, then silence) would
/// otherwise hold it for sshd's LoginGraceTime (120 s), and every drain of its node with it.
/// The handover is shortened to 1 s here (the real 20 s: `real_node.rs`). One session runs a
/// command for 6 s; the pod must end after it, and within 3 s of it.
#[test]
fn a_stopped_pod_waits_for_its_sessions_and_not_for_a_connection_that_never_logs_in() {
    let dir = test_dir("sessions");
    let (project, project_pub) = keypair(&dir, "project");
    let secret = SecretVolume::new(dir.join("secret"));
    let handover = format!("sleep {HANDOVER_SECONDS} ");
    assert!(SSHD_SCRIPT.contains(&handover), "{}", *SSHD_SCRIPT);
    let script = SSHD_SCRIPT.replace(&handover, "sleep 1 ");
    let mut pod = Pod::stoppable(&secret.dir, &project_pub, dir.join("pod.log"), &script);
    pod.until(&project, 0, Duration::from_secs(30));

    let scanner = pod
        .in_net("bash")
        .args([
            "-c",
            "exec 3<>/dev/tcp/127.0.0.1/22; printf 'SSH-2.0-scanner\\r\\n' >&3; sleep 120",
        ])
        .spawn()
        .expect("bash");
    let _scanner = Killed(scanner);
    let options = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR";
    let mut session = pod
        .in_net("ssh")
        .args(options.split(' '))
        .arg("-i")
        .arg(&project)
        .args(["root@127.0.0.1", "sleep 6"])
        .spawn()
        .expect("ssh");
    // Both connections are in: the session's process, and the scanner's, before
    // authentication (OpenSSH 9.2 titles them `sshd: root@notty` and `sshd: [net]`).
    let titles = wait_until(Duration::from_secs(20), || {
        let titles = pod.sshd_titles();
        let session = titles.iter().any(|t| t.contains("root@"));
        let scanner = titles.iter().any(|t| t.contains("[net]"));
        (session && scanner).then_some(titles)
    });
    println!("sshd's processes before the stop: {titles:?}");
    pod.stop();
    let stopped = Instant::now();
    let session_status = session.wait().unwrap();
    let session_ended = Instant::now();
    assert!(
        session_status.success(),
        "the session ran its command to the end: {session_status}"
    );
    let exited = loop {
        if let Some(status) = pod.child.try_wait().unwrap() {
            break (Instant::now(), status);
        }
        assert!(
            session_ended.elapsed() < Duration::from_secs(15),
            "the pod still runs {:?} after its only session ended; its log:\n{}",
            session_ended.elapsed(),
            std::fs::read_to_string(&pod.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = std::fs::read_to_string(&pod.log).unwrap_or_default();
    println!(
        "stopped: the session ended {:?} later, the pod {:?} after the session ({})",
        session_ended - stopped,
        exited.0 - session_ended,
        exited.1
    );
    assert!(
        exited.0 - session_ended <= Duration::from_secs(3),
        "the pod ended {:?} after its session; log:\n{log}",
        exited.0 - session_ended
    );
    assert!(exited.1.success(), "{}: {log}", exited.1);
    for line in [
        "jumppod: terminating: accepting for 20 s more, then sessions only",
        "jumppod: terminating: no session left",
    ] {
        assert!(log.contains(line), "{line:?} in the pod's log:\n{log}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `check` every 100 ms until it gives Some, at most `limit`.
fn wait_until<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(start.elapsed() < limit, "nothing after {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
