//! `make demo`: the story, as the newcomer sees it.

use std::process::Command;

#[test]
fn the_demo_tells_the_upgrade_story() {
    let out = Command::new(env!("CARGO_BIN_EXE_demo"))
        .env_remove("RUST_LOG")
        .output()
        .expect("run the demo");
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
