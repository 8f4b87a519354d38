//! Shared by the tests that run a jump pod's scripts under a real OpenSSH sshd in namespaces of
//! their own (`sshd.rs`: jumppod's start script; `kit.rs`: dstack's command with the kit): the
//! programs they need, key pairs, the Secret volume as the kubelet writes it, and the OpenSSH
//! client run inside a pod's network namespace.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of this module"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub fn need(program: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{program} is not installed: these tests run a real sshd (`make sshd` installs Debian's openssh-server)"
    );
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A key pair made by ssh-keygen: (private key path, public key line).
pub fn keypair(dir: &Path, name: &str) -> (PathBuf, String) {
    let path = dir.join(name);
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C"])
        .arg(format!("{name}@test"))
        .arg("-f")
        .arg(&path));
    let public = std::fs::read_to_string(path.with_extension("pub")).unwrap();
    (path, public.trim().to_owned())
}

/// The mounted Secret, written as the kubelet's atomic writer writes it
/// (`pkg/volume/util/atomic_writer.go`): a new timestamped directory, `..data` switched to it
/// by a rename, the new top-level symlinks, then the old ones and the old directory removed.
pub struct SecretVolume {
    pub dir: PathBuf,
    generation: u32,
}

impl SecretVolume {
    pub fn new(dir: PathBuf) -> SecretVolume {
        std::fs::create_dir_all(&dir).unwrap();
        SecretVolume { dir, generation: 0 }
    }

    pub fn publish(&mut self, entries: &[(&str, String)]) {
        use std::os::unix::fs::symlink;
        self.generation += 1;
        let ts = format!("..2026_12_01_00_00_00.{}", self.generation);
        std::fs::create_dir(self.dir.join(&ts)).unwrap();
        for (name, value) in entries {
            std::fs::write(self.dir.join(&ts).join(name), value).unwrap();
        }
        let tmp = self.dir.join("..data_tmp");
        symlink(&ts, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        for (name, _) in entries {
            let link = self.dir.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                symlink(format!("..data/{name}"), &link).unwrap();
            }
        }
        for entry in std::fs::read_dir(&self.dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if !name.starts_with("..") && !entries.iter().any(|(n, _)| *n == name) {
                std::fs::remove_file(self.dir.join(&name)).unwrap();
            }
            if name.starts_with("..2026") && name != ts {
                std::fs::remove_dir_all(self.dir.join(&name)).unwrap();
            }
        }
    }
}

/// A fresh directory of the test's own, after checking the programs the pods need.
pub fn test_dir(test: &str) -> PathBuf {
    for program in [
        "unshare",
        "nsenter",
        "ip",
        "ssh",
        "ssh-keygen",
        "ssh-keyscan",
        "/usr/sbin/sshd",
    ] {
        need(program);
    }
    let dir = std::env::temp_dir().join(format!("jumppod-sshd-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const SSH_OPTIONS: &str = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o ConnectTimeout=5 -o LogLevel=ERROR";

/// `ssh` with the tests' options and `key`, from inside the network namespace of process
/// `pid`; the caller adds where to and what.
pub fn ssh_from(pid: u32, key: &Path) -> Command {
    let mut ssh = Command::new("nsenter");
    ssh.args(["--target", &pid.to_string(), "--net", "ssh"])
        .args(SSH_OPTIONS.split(' '))
        .arg("-i")
        .arg(key);
    ssh
}

/// `ssh root@127.0.0.1 <command>` with `key`, from inside the network namespace of process
/// `pid`. `via`: reach it through `ssh -W` with that key, as `ssh -J` does.
pub fn ssh_command(pid: u32, key: &Path, via: Option<&Path>, command: &str) -> Command {
    let mut ssh = ssh_from(pid, key);
    if let Some(jump) = via {
        ssh.arg("-o").arg(format!(
            "ProxyCommand=ssh {SSH_OPTIONS} -i {} -W %h:%p root@127.0.0.1",
            jump.display()
        ));
    }
    ssh.args(["root@127.0.0.1", command]);
    ssh
}

/// `ssh root@127.0.0.1 true` with `key` ([`ssh_command`]); the exit code (0: a shell ran
/// `true`, 1: the forced /bin/false ran, 255: refused) and stderr.
pub fn ssh_in(pid: u32, key: &Path, via: Option<&Path>) -> (i32, String) {
    let out = ssh_command(pid, key, via, "true")
        .output()
        .expect("nsenter");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Polls [`ssh_in`] with `key` until its exit code is `code`; returns how long it took. A
/// failure shows the pod's log.
pub fn ssh_until(pid: u32, key: &Path, code: i32, within: Duration, log: &Path) -> Duration {
    let start = Instant::now();
    loop {
        let (got, stderr) = ssh_in(pid, key, None);
        if got == code {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "ssh with {} still exits {got}, not {code}, after {within:?}: {stderr}\nthe pod's log:\n{}",
            key.display(),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}
