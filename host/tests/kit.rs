//! The kit (`jumppod::kit`) under a real OpenSSH sshd: dstack 0.22.5's jump-pod command, as
//! `_get_jump_pod_commands` joins it, runs as PID 1 of pid, mount and network namespaces of the
//! test's own (`unshare --pid --fork --mount-proc`), and the kit's hooks and probe run inside
//! them as the kubelet's exec runs them (`nsenter`, its output read to the end as the CRI's
//! ExecSync reads it). Once with Debian's dash as `/bin/sh`, once with busybox's ash and
//! applets (an alpine image's `/bin/sh`, which execs the `&&` chain's last command: sshd is
//! PID 1 there). The container's filesystem is played as in `sshd.rs`; `/tmp` is its own.
//! Needs root, util-linux, OpenSSH and busybox (`make sshd` installs them).

mod sshd_support;

use jumppod::kit::{
    HANDOVER_SECONDS, KEY_MARK, KEYS_MERGE_SECONDS, KEYS_MOUNT, post_start_script, pre_stop_script,
    readiness_script,
};
use jumppod_plan::public_key::PublicKey;
use rstest::rstest;
use sshd_support::*;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The namespaces' setup, then dstack's command as the container runs it.
const CONTAINER: &str = r#"set -e
mount --make-rprivate /
ip link set lo up
mount -t tmpfs -o mode=755 tmpfs /etc/ssh
: > /etc/ssh/sshd_config
mkdir -p "$KEYS_MOUNT"
mount --bind "$SECRET_DIR" "$KEYS_MOUNT"
mount -t tmpfs -o mode=700 tmpfs /root
mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
mkdir -m 755 /run/sshd
exec $IMAGE_SH -c "$DSTACK_COMMAND"
"#;

/// dstack 0.22.5's jump-pod command for one project key: `_get_jump_pod_commands` joined by
/// ` && ` (the key single-quoted, as `shlex.quote` quotes it).
fn dstack_command(project_key: &str) -> String {
    [
        "mkdir -p ~/.ssh".to_owned(),
        "chmod 700 ~/.ssh".to_owned(),
        format!("echo '{project_key}' > ~/.ssh/authorized_keys"),
        "chmod 600 ~/.ssh/authorized_keys".to_owned(),
        "rm -rf /etc/ssh/ssh_host_*".to_owned(),
        "ssh-keygen -A > /dev/null".to_owned(),
        "/usr/sbin/sshd -D -e -p 22 -o LogLevel=ERROR -o PasswordAuthentication=no -o AllowTcpForwarding=local".to_owned(),
    ]
    .join(" && ")
}

/// The image's `/bin/sh` and the tools on its PATH.
#[derive(Clone, Copy, Debug)]
enum Image {
    /// Debian's: dash, coreutils, grep.
    Debian,
    /// An alpine-style one: busybox's ash and applets first on the PATH.
    Busybox,
}

impl Image {
    fn sh(self) -> &'static str {
        match self {
            Image::Debian => "/bin/sh",
            Image::Busybox => "busybox sh",
        }
    }

    /// The PATH of the container and of every exec in it: for busybox, a directory of its
    /// applets (what the scripts and dstack's command call) in front.
    fn path(self, dir: &Path) -> String {
        let system = "/usr/sbin:/usr/bin:/sbin:/bin";
        match self {
            Image::Debian => system.to_owned(),
            Image::Busybox => {
                need("busybox");
                let applets = dir.join("busybox");
                std::fs::create_dir_all(&applets).unwrap();
                let busybox = String::from_utf8(
                    run(Command::new("sh").args(["-c", "command -v busybox"])).stdout,
                )
                .unwrap();
                for applet in [
                    "sh", "cat", "grep", "sleep", "mv", "rm", "chmod", "mkdir", "echo", "kill",
                ] {
                    let link = applets.join(applet);
                    if std::fs::symlink_metadata(&link).is_err() {
                        std::os::unix::fs::symlink(busybox.trim(), &link).unwrap();
                    }
                }
                format!("{}:{system}", applets.display())
            }
        }
    }
}

/// One jump pod: dstack's command as PID 1 of its namespaces; everything in them is killed
/// with it on drop.
struct DstackPod {
    child: Child,
    /// PID 1 of the pod's pid namespace, as the host numbers it.
    pid1: u32,
    log: PathBuf,
    image: Image,
    path: String,
}

impl DstackPod {
    fn start(dir: &Path, secret: &Path, project_key: &str, image: Image) -> DstackPod {
        let log = dir.join("pod.log");
        let out = std::fs::File::create(&log).unwrap();
        let path = image.path(dir);
        let child = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "--mount", "--net"])
            .args(["/bin/sh", "-c", CONTAINER])
            .env("PATH", &path)
            .env("HOME", "/root")
            .env("IMAGE_SH", image.sh())
            .env("SECRET_DIR", secret)
            .env("KEYS_MOUNT", KEYS_MOUNT)
            .env("DSTACK_COMMAND", dstack_command(project_key))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0)
            .spawn()
            .expect("unshare");
        let children = format!("/proc/{0}/task/{0}/children", child.id());
        let start = Instant::now();
        let pid1 = loop {
            let found = std::fs::read_to_string(&children).unwrap_or_default();
            if let Some(pid) = found.split_whitespace().next() {
                break pid.parse().unwrap();
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "unshare started no PID 1"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        DstackPod {
            child,
            pid1,
            log,
            image,
            path,
        }
    }

    /// `<image's sh> -c script` inside the pod, as the kubelet's exec runs a hook or a probe.
    fn exec(&self, script: &str) -> Command {
        let mut exec = Command::new("nsenter");
        exec.args(["--target", &self.pid1.to_string(), "-m", "-p", "-n", "--"])
            .env("PATH", &self.path)
            .env("HOME", "/root");
        match self.image {
            Image::Debian => exec.arg("/bin/sh"),
            Image::Busybox => exec.args(["busybox", "sh"]),
        };
        exec.args(["-c", script]);
        exec
    }

    /// The postStart hook, its output read to the end: it must return, with its loop running.
    fn post_start(&self) -> Duration {
        let start = Instant::now();
        let mut exec = self.exec(&post_start_script());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(exec.output());
        });
        let out = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the postStart hook returns and closes its output (ExecSync would hang)")
            .expect("nsenter");
        assert!(out.status.success(), "postStart: {out:?}");
        start.elapsed()
    }

    /// The readiness probe passes.
    fn ready(&self) -> bool {
        self.exec(&readiness_script())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The container's output (`kubectl logs`).
    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// root's authorized_keys in the pod.
    fn authorized_keys(&self) -> String {
        let out = run(Command::new("nsenter")
            .args(["--target", &self.pid1.to_string(), "-m", "--"])
            .args(["cat", "/root/.ssh/authorized_keys"]));
        String::from_utf8(out.stdout).unwrap()
    }

    fn ended(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }
}

impl Drop for DstackPod {
    fn drop(&mut self) {
        // The kernel ends every process of a pid namespace with its PID 1.
        let _ = Command::new("kill")
            .args(["-KILL", &self.pid1.to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

/// An entry of the Secret, as `jumppod keys add` writes it (jump-only).
fn entry(public: &str) -> String {
    format!("{}\n", PublicKey::parse("key", public).unwrap().user_line())
}

fn blob(public: &str) -> &str {
    public.split_whitespace().nth(1).unwrap()
}

#[rstest]
#[case::under_debians_dash(Image::Debian)]
#[case::under_busybox(Image::Busybox)]
fn the_secrets_keys_reach_dstacks_pod_jump_only_and_leave_it_with_the_secret(#[case] image: Image) {
    let dir = test_dir(&format!("kit-keys-{image:?}"));
    let (project, project_pub) = keypair(&dir, "project");
    let (alice, alice_pub) = keypair(&dir, "alice");
    let (bob, bob_pub) = keypair(&dir, "bob");
    let (carol, carol_pub) = keypair(&dir, "carol");
    let mut secret = SecretVolume::new(dir.join("secret"));
    secret.publish(&[("alice", entry(&alice_pub))]);

    let pod = DstackPod::start(&dir, &secret.dir, &project_pub, image);
    ssh_until(pod.pid1, &project, 0, Duration::from_secs(30), &pod.log);
    let returned = pod.post_start();
    let period = Duration::from_secs(u64::from(KEYS_MERGE_SECONDS));
    // The merge starts once sshd listens, at once.
    let alice_after = ssh_until(pod.pid1, &alice, 1, period, &pod.log);
    assert_eq!(
        ssh_in(pod.pid1, &project, Some(&alice)).0,
        0,
        "the Secret's key jumps (ssh -W)"
    );

    // What dstack does per job: a key appended over SSH.
    let append = format!(
        "echo '{}' >> /root/.ssh/authorized_keys",
        entry(&carol_pub).trim()
    );
    run(&mut ssh_command(pod.pid1, &project, None, &append));
    assert_eq!(ssh_in(pod.pid1, &carol, None).0, 1);

    // alice removed from the Secret, bob and carol (whom dstack already added) put in.
    secret.publish(&[("bob", entry(&bob_pub)), ("carol", entry(&carol_pub))]);
    let bob_after = ssh_until(pod.pid1, &bob, 1, period * 3, &pod.log);
    let alice_gone = ssh_until(pod.pid1, &alice, 255, period * 3, &pod.log);
    // carol out of the Secret again, dave in: once dave is accepted, the merge has read this
    // Secret, and dstack's own line for carol must have stayed.
    let (dave, dave_pub) = keypair(&dir, "dave");
    secret.publish(&[("bob", entry(&bob_pub)), ("dave", entry(&dave_pub))]);
    ssh_until(pod.pid1, &dave, 1, period * 3, &pod.log);
    assert_eq!(
        ssh_in(pod.pid1, &carol, None).0,
        1,
        "a key dstack appended survives the merge"
    );
    assert_eq!(ssh_in(pod.pid1, &project, None).0, 0);
    println!(
        "{image:?}: postStart returned in {returned:?}; alice accepted {alice_after:?} after sshd answered; \
         bob accepted {bob_after:?} and alice refused {alice_gone:?} after the Secret changed"
    );

    let file = pod.authorized_keys();
    let lines: Vec<&str> = file.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        lines[0], project_pub,
        "dstack's project key stays first: {file}"
    );
    for public in [&project_pub, &bob_pub, &carol_pub] {
        let count = lines.iter().filter(|l| l.contains(blob(public))).count();
        assert_eq!(count, 1, "one line per key: {file}");
    }
    assert!(!file.contains(blob(&alice_pub)), "{file}");
    let carol_line = lines.iter().find(|l| l.contains(blob(&carol_pub))).unwrap();
    assert!(
        !carol_line.ends_with(KEY_MARK),
        "dstack's line is its own: {file}"
    );
    let bob_line = lines.iter().find(|l| l.contains(blob(&bob_pub))).unwrap();
    assert_eq!(*bob_line, format!("{} {KEY_MARK}", entry(&bob_pub).trim()));
    let logs = pod.logs();
    assert!(logs.contains("jumppod: keys: sshd listens;"), "{logs}");
    assert!(
        logs.contains("jumppod: keys: 1 added to and 1 removed from /root/.ssh/authorized_keys"),
        "{logs}"
    );
    drop(pod);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An SSH session that stays open until its standard input is closed.
struct Session(Child);

impl Session {
    fn open(pod: &DstackPod, key: &Path) -> Session {
        let mut child = ssh_command(pod.pid1, key, None, "read -r line")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ssh");
        let start = Instant::now();
        // Authenticated once the pod counts it: OpenSSH renames the process `sshd: root@notty`.
        while sessions(pod).unwrap_or(0) == 0 {
            assert!(child.try_wait().unwrap().is_none(), "the session ended");
            assert!(start.elapsed() < Duration::from_secs(20), "no session");
            std::thread::sleep(Duration::from_millis(100));
        }
        Session(child)
    }

    fn open_still(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }

    /// Closes its input: the remote `read` ends, and the session with it.
    fn close(mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// A jump held through the pod, as dstack's users hold one (`ssh -W`, which `-J` and a
/// ProxyCommand run): a connection with a forwarded channel and no session channel, titled
/// `sshd: root` by OpenSSH, to a TCP service beside the pod (busybox's `nc -l` in the pod's
/// network namespace, the job pod it reaches), open until it is closed.
struct Jump {
    client: Child,
    target: Child,
}

impl Jump {
    const TARGET_PORT: &str = "2200";

    /// `held`: the authenticated connections the test holds open beside it. Not the count
    /// read before: the last probe's connection may still be counted then, and gone after.
    fn open(pod: &DstackPod, key: &Path, held: u32) -> Jump {
        need("busybox");
        let target = Command::new("nsenter")
            .args(["--target", &pod.pid1.to_string(), "--net", "--"])
            .args(["busybox", "nc", "-l", "-p", Self::TARGET_PORT])
            // Held open: nc ends its connection once its input ends.
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("busybox nc");
        let client = || {
            ssh_from(pod.pid1, key)
                .args(["-W", &format!("127.0.0.1:{}", Self::TARGET_PORT)])
                .arg("root@127.0.0.1")
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("ssh")
        };
        let start = Instant::now();
        let mut jump = Jump {
            client: client(),
            target,
        };
        // Authenticated and forwarding once the pod counts it beside the held ones, the client
        // still running; a client that ended (the target not listening yet) is started again.
        while !(jump.open_still() && sessions(pod).unwrap_or(0) > held) {
            if !jump.open_still() {
                jump.client = client();
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the pod never counted the jump as a connection"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        jump
    }

    fn open_still(&mut self) -> bool {
        self.client.try_wait().unwrap().is_none()
    }

    /// Ends the client, as an IDE that quits does.
    fn close(mut self) {
        let _ = self.client.kill();
        let _ = self.client.wait();
        let _ = self.target.kill();
        let _ = self.target.wait();
    }
}

/// The authenticated connections as the preStop hook counts them.
fn sessions(pod: &DstackPod) -> Option<u32> {
    let script = pre_stop_script(0);
    let counter = &script[..script.find("listeners()").unwrap()];
    let out = pod.exec(&format!("{counter}\nsessions")).output().ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// A TCP connection to sshd that never authenticates (a scanner, a client stuck before its
/// key): `bash`'s /dev/tcp from inside the pod's network namespace.
fn unauthenticated(pod: &DstackPod) -> Child {
    Command::new("nsenter")
        .args(["--target", &pod.pid1.to_string(), "--net", "--"])
        .args(["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/22; sleep 600"])
        .stdin(Stdio::null())
        .spawn()
        .expect("bash")
}

/// Waits (bounded) until the hook's counter reads `n` connections.
fn counts_down_to(pod: &DstackPod, n: u32) {
    let start = Instant::now();
    while sessions(pod) != Some(n) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the hook counts {:?} connections, not the {n} open:\n{}",
            sessions(pod),
            pod.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How many connections the preStop hook said it waits for, once it has said it.
fn waited_for(logs: &str) -> Option<u32> {
    let (_, rest) = logs.split_once("; waiting for ")?;
    rest.split_once(" authenticated SSH connection(s)")?
        .0
        .parse()
        .ok()
}

/// Runs the preStop hook in the background, as the kubelet does once the pod is deleted.
fn stop(pod: &DstackPod, session_drain: u32, dir: &Path) -> (Child, Instant) {
    let out = std::fs::File::create(dir.join("pre-stop.out")).unwrap();
    let hook = pod
        .exec(&pre_stop_script(session_drain))
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("nsenter");
    (hook, Instant::now())
}

/// Waits (bounded) until the pod's PID 1 has ended; when it did, after `since`.
fn ended_within(pod: &mut DstackPod, since: Instant, limit: Duration) -> Duration {
    while !pod.ended() {
        assert!(
            since.elapsed() < limit,
            "the pod still runs {limit:?} after its preStop started:\n{}",
            pod.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    since.elapsed()
}

#[rstest]
#[case::under_debians_dash(Image::Debian)]
#[case::under_busybox(Image::Busybox)]
fn a_stopped_pod_accepts_through_the_handover_then_ends_with_its_last_shell_or_jump(
    #[case] image: Image,
) {
    let dir = test_dir(&format!("kit-stop-{image:?}"));
    let (project, project_pub) = keypair(&dir, "project");
    let secret = SecretVolume::new(dir.join("secret"));
    let mut pod = DstackPod::start(&dir, &secret.dir, &project_pub, image);
    ssh_until(pod.pid1, &project, 0, Duration::from_secs(30), &pod.log);
    assert!(pod.ready());
    let mut session = Session::open(&pod, &project);
    let mut jump = Jump::open(&pod, &project, 1);
    let mut stuck = unauthenticated(&pod);

    let (mut hook, stopped) = stop(&pod, 300, &dir);
    let handover = Duration::from_secs(u64::from(HANDOVER_SECONDS));
    // New connections are accepted and the probe passes until the handover is over.
    let (mut accepted, mut refused) = (0, 0);
    let not_ready = loop {
        let ready = pod.ready();
        let at = stopped.elapsed();
        if !ready {
            break at;
        }
        match ssh_in(pod.pid1, &project, None).0 {
            0 => accepted += 1,
            _ => refused += 1,
        }
        assert!(at < handover * 2, "the probe still passes after {at:?}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(refused, 0, "{accepted} accepted during the handover");
    assert!(
        not_ready >= handover - Duration::from_secs(1),
        "the probe failed {not_ready:?} after the stop, before the handover's end"
    );
    // The session and the jump hold the pod (the connection that never logged in does not):
    // the hook counted them and waits; the listener is still open for them. The hook's count
    // may also hold the last probe's session, if it was still open when the handover ended:
    // the count the hook goes on polling is the one that must come down to ours alone.
    let start = Instant::now();
    let counted = loop {
        if let Some(n) = waited_for(&pod.logs()) {
            break n;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the hook never said it waits for the session:\n{}",
            pod.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        (2..=3).contains(&counted),
        "the hook waits for {counted} connection(s), not the session and the jump:\n{}",
        pod.logs()
    );
    counts_down_to(&pod, 2);
    assert!(session.open_still(), "the session was cut:\n{}", pod.logs());
    assert!(jump.open_still(), "the jump was cut:\n{}", pod.logs());
    assert!(!pod.ended(), "the pod ended with a session open");
    // The shell goes first: the jump alone still holds the pod. The hook polls each second and
    // stops the listener a second after it counts none, so a hook that missed the jump ends the
    // pod within two: what must hold is that nothing happens, which no event shows, so it is
    // checked through three of the hook's polls.
    session.close();
    counts_down_to(&pod, 1);
    let polls = Instant::now();
    while polls.elapsed() < Duration::from_secs(3) {
        assert!(
            jump.open_still() && !pod.ended(),
            "the jump was cut once the shell had closed:\n{}",
            pod.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let closed = Instant::now();
    jump.close();
    let after_close = ended_within(&mut pod, stopped, handover + Duration::from_secs(60));
    let gone = closed.elapsed();
    assert!(hook.wait().unwrap().success(), "the preStop hook failed");
    let _ = stuck.kill();
    let _ = stuck.wait();
    println!(
        "{image:?}: {accepted} connections accepted during the handover, 0 refused; the probe failed \
         {not_ready:?} after the stop, the hook then counting {counted} connection(s); the pod ended {gone:?} after its jump closed, the last connection ({after_close:?} after the stop)"
    );
    let logs = pod.logs();
    for step in [
        format!("jumppod: stopping: sshd accepts new connections for {HANDOVER_SECONDS} s more"),
        format!(
            "jumppod: handover over: the readiness probe fails from now on; waiting for {counted} authenticated SSH connection(s) (shells and jumps), at most 300 s"
        ),
        "jumppod: no authenticated SSH connection left after".into(),
        "jumppod: stopping the sshd listener (pid ".into(),
    ] {
        assert!(logs.contains(&step), "{step:?} not logged:\n{logs}");
    }
    drop(pod);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_session_open_past_the_session_drain_ends_with_the_pod() {
    let dir = test_dir("kit-drain");
    let (project, project_pub) = keypair(&dir, "project");
    let secret = SecretVolume::new(dir.join("secret"));
    let mut pod = DstackPod::start(&dir, &secret.dir, &project_pub, Image::Debian);
    ssh_until(pod.pid1, &project, 0, Duration::from_secs(30), &pod.log);
    let mut session = Session::open(&pod, &project);
    let drain = 3;
    let (mut hook, stopped) = stop(&pod, drain, &dir);
    let ended = ended_within(
        &mut pod,
        stopped,
        Duration::from_secs(u64::from(HANDOVER_SECONDS + drain) + 60),
    );
    assert!(hook.wait().unwrap().success());
    let start = Instant::now();
    while session.open_still() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the session outlived its pod"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        ended >= Duration::from_secs(u64::from(HANDOVER_SECONDS + drain)),
        "the pod ended {ended:?} after the stop, before the handover and the drain were over"
    );
    println!(
        "the pod ended {ended:?} after the stop (handover {HANDOVER_SECONDS} s, drain {drain} s)"
    );
    let logs = pod.logs();
    assert!(
        logs.contains("jumppod: session drain over after 3 s with 1 connection(s) open"),
        "{logs}"
    );
    drop(pod);
    let _ = std::fs::remove_dir_all(&dir);
}
