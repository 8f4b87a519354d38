//! `make demo`: the story, as the newcomer sees it.

use std::process::Command;

/// The story's steps as the newcomer reads them, on either backend.
fn tells_the_story(mut demo: Command) {
    let out = demo.env_remove("RUST_LOG").output().expect("run the demo");
    let story = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{story}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for step in [
        "rejected",
        "mutated by this JSONPatch",
        "falls back to the bare pod",
        "bare pod of an older release",
        "delete pod dstack-main-ssh-jump-pod",
        "on NodePort 30022 (kept: running jobs use it)",
        "NodePort before the upgrade 30022, now 30022",
        "API requests: 2",
    ] {
        assert!(story.contains(step), "{step:?} missing from:\n{story}");
    }
}

#[test]
fn the_demo_tells_the_upgrade_story() {
    let mut demo = Command::new(env!("CARGO_BIN_EXE_demo"));
    demo.env_remove("JUMPPOD_CLUSTER_DIR");
    tells_the_story(demo);
}

/// `make demo-real`: the same story from the same code against the real control plane that
/// `make test` started (JUMPPOD_CLUSTER_DIR), request counts from its audit log.
#[cfg(feature = "real-cluster")]
#[test]
fn the_demo_tells_the_same_story_on_the_real_control_plane() {
    assert!(
        std::env::var_os("JUMPPOD_CLUSTER_DIR").is_some(),
        "run inside `jumppod-controlplane run` (make test does)"
    );
    tells_the_story(Command::new(env!("CARGO_BIN_EXE_demo")));
}
