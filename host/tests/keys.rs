//! Users' SSH keys outlive the pod (issue 9 §1): `jumppod keys` writes the Secret the
//! ReplicaSet's template mounts, so a replacement pod mounts the same keys. The scenarios are
//! declared in host/testkit/src/both/keys.rs, run here against the simulator and in
//! `real_cluster.rs` against the real control plane; what sshd does with the mounted Secret is
//! proven under a real sshd in `sshd.rs`.

jumppod_testkit::keys_scenarios!(sim);
