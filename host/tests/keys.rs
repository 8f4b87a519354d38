//! Users' SSH keys outlive the pod (issue 9 §1): `jumppod keys` writes the Secret the
//! ReplicaSet's template mounts, so a replacement pod mounts the same keys. The bodies are in
//! common/both.rs, run here against the simulator and in `real_cluster.rs` against the real
//! control plane; what sshd does with the mounted Secret is proven under a real sshd in
//! `sshd.rs`.

mod common;

use common::both::{self, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_added_is_mounted_by_the_replacement_pod_and_a_removed_key_is_gone() {
    both::a_key_added_is_mounted_by_the_replacement_pod_and_a_removed_key_is_gone(
        &Cluster::sim().await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_again_costs_one_read_and_no_write() {
    both::the_same_key_again_costs_one_read_and_no_write(&Cluster::sim().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_added_concurrently_are_all_kept() {
    both::keys_added_concurrently_are_all_kept(&Cluster::sim().await).await;
}
