//! The kit the policy gives dstack's own jump pod at its creation: its handover, its session
//! drain and the users' keys, on dstack 0.22.5's own pod.

use super::*;

/// dstack 0.22.5's own jump pod, created by its own code: the webhook gives it the kit and
/// Guaranteed resources without touching dstack's command; it becomes Ready by the kit's probe,
/// and dstack's `_check_and_configure_jump_pod_service` gets through it, appending a user's key
/// over SSH, which then jumps (and runs nothing else) through the NodePort.
#[tokio::test]
async fn dstacks_own_jump_pod_gets_the_kit_runs_guaranteed_and_dstack_configures_it() {
    let scenario = Scenario::start("dstack-kit").await;
    let (pod, port) = scenario.ready_jump_pod().await;
    let spec = pod.spec.as_ref().unwrap();
    let container = &spec.containers[0];
    assert_eq!(
        container.command.as_deref(),
        Some(&["/bin/sh".to_owned()][..]),
        "dstack's command is its own"
    );
    let pre_stop = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(|h| h.exec.as_ref())
        .and_then(|e| e.command.clone());
    assert_eq!(
        pre_stop,
        Some(vec!["/bin/sh".into(), "-c".into(), pre_stop_script(300)])
    );
    assert!(container.readiness_probe.is_some());
    assert_eq!(spec.termination_grace_period_seconds, Some(320));
    let secret = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "authorized-keys")
        .and_then(|v| v.secret.as_ref())
        .and_then(|s| s.secret_name.clone());
    assert_eq!(
        secret.as_deref(),
        Some("dstack-main-ssh-jump-pod-authorized-keys")
    );
    let qos = pod.status.as_ref().and_then(|s| s.qos_class.clone());
    assert_eq!(qos.as_deref(), Some("Guaranteed"));

    let alice = scenario.user("alice");
    let proxy = scenario
        .dstack
        .configure(&scenario.project, &[&alice])
        .await;
    assert_eq!(proxy["hostname"], "127.0.0.1");
    assert_eq!(proxy["port"], port, "{proxy}");
    let name = scenario.project.jump_pod();
    assert!(
        jump_only(&alice, &scenario.project.key, port, &name).await,
        "the key dstack appended jumps, jump-only"
    );
    let log = jump_pod_log(&pod);
    assert!(log.contains("jumppod: keys: sshd listens;"), "{log}");
    eprintln!("dstack's jump pod, with the kit, configured by dstack: {proxy}");
}

/// The users' keys of the Secret `<name>-authorized-keys` (written by `jumppod keys`) reach
/// dstack's own pod: a key there before the pod starts is accepted jump-only at once, one added
/// later arrives within the kubelet's sync and the merge's period, one removed goes; the key
/// dstack appended over SSH, and the project's, stay.
#[tokio::test]
async fn the_secrets_keys_reach_dstacks_own_jump_pod_and_leave_it_while_dstacks_stay() {
    let scenario = Scenario::start("dstack-keys").await;
    let (alice, bob, carol) = (
        scenario.user("alice"),
        scenario.user("bob"),
        scenario.user("carol"),
    );
    let project = &scenario.project.key;
    let name = scenario.project.jump_pod();
    let key_file = |key: &Path| public_file(key);
    scenario.keys(&["add", "--key-file", &key_file(&alice), "--name", "alice"]);

    let (_, port) = scenario.ready_jump_pod().await;
    let ready_at = Instant::now();
    wait_for_up_to(
        "alice's key, in the Secret before the pod started, to jump",
        Duration::from_secs(30),
        || async { jump_only(&alice, project, port, &name).await.then_some(()) },
    )
    .await;
    let alice_after = ready_at.elapsed();

    scenario
        .dstack
        .grant(&scenario.project, port, &[&carol])
        .await;
    assert!(jump_only(&carol, project, port, &name).await);

    let added = Instant::now();
    scenario.keys(&["add", "--key-file", &key_file(&bob), "--name", "bob"]);
    wait_for_up_to(
        "bob's key, added to the Secret, to jump",
        KEY_PROPAGATION,
        || async { jump_only(&bob, project, port, &name).await.then_some(()) },
    )
    .await;
    let bob_after = added.elapsed();

    let removed = Instant::now();
    scenario.keys(&["remove", "alice"]);
    wait_for_up_to(
        "alice's key, removed from the Secret, to be refused",
        KEY_PROPAGATION,
        || async {
            jump(&alice, project, port)
                .await
                .err()
                .filter(|e| e.contains("Permission denied"))
        },
    )
    .await;
    let alice_gone = removed.elapsed();
    assert!(
        jump_only(&carol, project, port, &name).await,
        "the key dstack appended survives the merge"
    );
    assert_eq!(ssh(project, port, "hostname").await.as_deref(), Ok(&*name));
    eprintln!(
        "keys on dstack's pod: a key of the Secret jumped {alice_after:?} after the pod was Ready; \
         one added jumped after {bob_after:?}; one removed was refused after {alice_gone:?}"
    );
}

/// Deleted with no session open: new connections through the NodePort are accepted until the
/// handover is over; the readiness probe fails then; the pod logs each step and is gone a few
/// seconds later (without the kit dstack's `sh`, which ignores SIGTERM, waits out the 30 s
/// grace period, accepting all along).
#[tokio::test]
async fn a_deleted_dstack_jump_pod_hands_over_then_ends_without_waiting_out_its_grace() {
    let scenario = Scenario::start("dstack-handover").await;
    let (_, port) = scenario.ready_jump_pod().await;
    let key = &scenario.project.key;
    let name = scenario.project.jump_pod();
    let probes = Probes::start(key, port);
    probes.answering(&name).await;

    let (deleted, ending) =
        delete_and_watch(&scenario.pods(), &name, Duration::from_secs(120)).await;
    let outcomes = probes.stopped().await;
    let after = |made: &Instant| made.saturating_duration_since(deleted);
    let last_accepted = outcomes
        .iter()
        .filter(|(made, o)| *made >= deleted && o.is_ok())
        .map(|(made, _)| after(made))
        .max()
        .expect("a connection accepted after the deletion");
    let refused_early: Vec<_> = outcomes
        .iter()
        .filter(|(made, o)| {
            *made >= deleted && o.is_err() && after(made) + Duration::from_secs(3) < handover()
        })
        .collect();
    let accepted = outcomes
        .iter()
        .filter(|(made, o)| *made >= deleted && o.is_ok())
        .count();
    eprintln!(
        "dstack's pod deleted with no session: {accepted} new connections accepted, the last made \
         {last_accepted:?} after the deletion; Ready False after {:?}; gone after {:?}",
        ending.not_ready, ending.gone
    );
    assert!(
        refused_early.is_empty(),
        "refused during the handover: {refused_early:?}"
    );
    let window = |at: Duration| {
        at + Duration::from_secs(3) >= handover() && at <= handover() + Duration::from_secs(3)
    };
    assert!(
        window(last_accepted),
        "the last connection accepted {last_accepted:?} after the deletion, not at the handover's end"
    );
    // No longer an endpoint at the handover's end: Ready False, or already gone (the listener
    // stops a second after the preStop hook returns, and the kubelet may remove the pod before
    // the watch sees a status with Ready False).
    let not_serving = ending.not_ready.unwrap_or(ending.gone);
    assert!(
        window(not_serving),
        "Ready turned False {:?} and the pod was gone {:?} after the deletion, not at the handover's end",
        ending.not_ready,
        ending.gone
    );
    assert!(
        ending.gone < Duration::from_secs(30),
        "the pod was gone only {:?} after its deletion: no earlier than a pod without the kit",
        ending.gone
    );
    logged_each_step(&ending.log, None);
}

/// Deleted with a session open: the session goes on past the handover (and past the 30 s
/// grace period a pod without the kit has), and the pod ends when the session closes. Whether
/// the pod is Ready meanwhile is the kubelet's to report: kubelet 1.36.3 (these nodes') runs no
/// exec probe once a pod terminates (each fails "context canceled" and is thrown away), so it
/// keeps the Ready the pod had; it is printed, not asserted.
#[tokio::test]
async fn a_deleted_dstack_jump_pod_keeps_an_open_session_and_ends_when_it_closes() {
    let scenario = Scenario::start("dstack-session").await;
    let (_, port) = scenario.ready_jump_pod().await;
    let name = scenario.project.jump_pod();
    let mut session = Session::open(&scenario.project.key, "127.0.0.1", port);
    session.still_open_after(0, "once opened").await;

    let pods = scenario.pods();
    pods.delete(&name, &DeleteParams::default())
        .await
        .expect("delete the jump pod");
    let deleted = Instant::now();
    let kept_until = Duration::from_secs(40);
    while deleted.elapsed() < kept_until {
        let seen = session.lines();
        session
            .still_open_after(seen, "while its pod was terminating")
            .await;
    }
    let pod = pods.get(&name).await.expect("the pod is still there");
    let ready = condition(&pod, "Ready");
    session.close().await;
    // Far below what is left of the session drain (280 s): it ends with its last session.
    let ending = watch_end(&pods, &name, Instant::now(), Duration::from_secs(30)).await;
    eprintln!(
        "dstack's pod deleted with a session open: the session lasted {kept_until:?} and more \
         (Ready {ready:?} then); the pod was gone {:?} after it closed",
        ending.gone
    );
    logged_each_step(&ending.log, Some(1));
}
