//! The session count that the kit's preStop hook and `ensure`'s start script both wait on
//! (`jumppod::kit::SESSIONS`), run by Debian's dash and by busybox's ash over process tables
//! taken from real sshd runs (`sessions/`): each file holds the `comm` and the raw `cmdline`
//! (Linux pads a title with NULs) of every sshd process while one kind of connection was open,
//! the listener included. Taken from Debian 12's OpenSSH 9.2p1, sshd run as root on 127.0.0.1
//! with the options dstack's jump pod gives it, the connections made with OpenSSH's own client:
//! a shell (`ssh host cmd`, `ssh -tt`), a jump (`ssh -W`), a forward with no session (`ssh -N
//! -L`), a scanner (a TCP connection that sends nothing), a login in progress (a client's
//! banner and no more), and a non-root user's shell and jump (whose monitor is titled
//! `[priv]`); and from OpenSSH 9.9p1 (built from its release tag: `sshd-session` per
//! connection), the same connections. Needs busybox (`make sshd` installs it).

use jumppod::kit::SESSIONS;
use rstest::rstest;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Deserialize)]
struct Process {
    pid: u32,
    comm: String,
    cmdline: String,
}

fn table(name: &str) -> Vec<Process> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sessions")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// A directory laid out as `/proc` for these processes: `<pid>/comm` (with the kernel's
/// newline) and `<pid>/cmdline` (the bytes as read; the capture kept them as code points
/// 0-255), and one process that is not sshd at all.
fn proc_dir(name: &str, processes: &[Process]) -> PathBuf {
    let root = std::env::temp_dir().join(format!("jumppod-sessions-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let write = |pid: u32, comm: &str, cmdline: &[u8]| {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        std::fs::write(dir.join("cmdline"), cmdline).unwrap();
    };
    for p in processes {
        let bytes: Vec<u8> = p.cmdline.chars().map(|c| c as u32 as u8).collect();
        write(p.pid, &p.comm, &bytes);
    }
    write(
        1,
        "sh",
        b"/bin/sh\0-c\0mkdir -p ~/.ssh && /usr/sbin/sshd -D -e -p 22\0",
    );
    root
}

/// What `sessions` prints for the table under `shell` (`sh -c`, or busybox's).
fn count(shell: &[&str], root: &Path) -> u32 {
    let script = format!("{SESSIONS}\nsessions {}", root.display());
    let out = Command::new(shell[0])
        .args(&shell[1..])
        .args(["-c", &script])
        .output()
        .unwrap_or_else(|e| panic!("{shell:?}: {e}"));
    assert!(out.status.success(), "{shell:?}: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{shell:?} printed {text:?}"))
}

const SHELLS: [&[&str]; 2] = [&["/bin/sh"], &["busybox", "sh"]];

#[rstest]
#[case::the_listener_alone_is_no_connection("debian-9.2p1-listener", 0)]
#[case::a_shell_is_one("debian-9.2p1-shell", 1)]
#[case::a_shell_with_a_terminal_is_one("debian-9.2p1-shell-tty", 1)]
#[case::a_jump_is_one("debian-9.2p1-jump", 1)]
#[case::a_forward_without_a_session_is_one("debian-9.2p1-forward", 1)]
#[case::a_scanner_is_none("debian-9.2p1-scanner", 0)]
#[case::a_login_in_progress_is_none("debian-9.2p1-login-in-progress", 0)]
#[case::a_users_shell_is_one_not_two("debian-9.2p1-user-shell", 1)]
#[case::a_users_jump_is_one_not_two("debian-9.2p1-user-jump", 1)]
#[case::the_listener_alone_is_no_connection_from_9_8_on("openssh-9.9p1-listener", 0)]
#[case::a_shell_is_one_from_9_8_on("openssh-9.9p1-shell", 1)]
#[case::a_shell_with_a_terminal_is_one_from_9_8_on("openssh-9.9p1-shell-tty", 1)]
#[case::a_jump_is_one_from_9_8_on("openssh-9.9p1-jump", 1)]
#[case::a_forward_without_a_session_is_one_from_9_8_on("openssh-9.9p1-forward", 1)]
#[case::a_scanner_is_none_from_9_8_on("openssh-9.9p1-scanner", 0)]
#[case::a_login_in_progress_is_none_from_9_8_on("openssh-9.9p1-login-in-progress", 0)]
#[case::a_users_shell_is_one_not_two_from_9_8_on("openssh-9.9p1-user-shell", 1)]
#[case::a_users_jump_is_one_not_two_from_9_8_on("openssh-9.9p1-user-jump", 1)]
fn the_authenticated_connections_of_a_process_table_are_counted(
    #[case] name: &str,
    #[case] expected: u32,
) {
    let root = proc_dir(name, &table(name));
    for shell in SHELLS {
        assert_eq!(count(shell, &root), expected, "{name} under {shell:?}");
    }
    let _ = std::fs::remove_dir_all(root);
}

#[test]
fn every_connection_at_once_is_counted_once() {
    let names = [
        ("shell", 1),
        ("shell-tty", 1),
        ("jump", 1),
        ("forward", 1),
        ("scanner", 0),
        ("login-in-progress", 0),
        ("user-shell", 1),
        ("user-jump", 1),
    ];
    let names: Vec<(String, u32)> = ["debian-9.2p1", "openssh-9.9p1"]
        .iter()
        .flat_map(|v| names.map(|(name, n)| (format!("{v}-{name}"), n)))
        .collect();
    // One listener, and every table's connections beside it, renumbered.
    let mut all = table("debian-9.2p1-listener");
    for (name, _) in &names {
        for mut p in table(name) {
            if !p.cmdline.contains("[listener]") {
                p.pid = 10_000 + all.len() as u32;
                all.push(p);
            }
        }
    }
    let expected: u32 = names.iter().map(|(_, n)| n).sum();
    let root = proc_dir("all", &all);
    for shell in SHELLS {
        assert_eq!(count(shell, &root), expected, "under {shell:?}");
    }
    let _ = std::fs::remove_dir_all(root);
}
