//! Scenario 10, RBAC: the host works with exactly the rules `jumppod rbac` prints; removing
//! any one verb fails with an error naming the verb and resource. The scenarios are in
//! host/testkit/src/both/rbac.rs, run here against the simulator with RBAC enforced and in
//! `real_cluster.rs` against the real control plane.

use jumppod_host::rbac;
use jumppod_testkit::NS;
use jumppod_testkit::both::{Cluster, rbac as scenario};
use serde_json::Value;

jumppod_testkit::rbac_scenarios!(sim);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_rules_are_enough() {
    scenario::the_printed_rules_are_enough(&Cluster::sim_with_rbac().await).await;
    // And the printed YAML is what `objects` gives.
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&rbac::yaml(NS, "jumppod"))
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(docs[1..], rbac::objects(NS, "jumppod")[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_any_one_verb_fails_naming_the_verb_and_the_resource() {
    let checked =
        scenario::removing_any_one_verb_fails_naming_it(|_| Cluster::sim_with_rbac(), &[]).await;
    assert_eq!(
        checked, 15,
        "every verb but `namespaces create` (tested below)"
    );
}

/// `namespaces create` for a namespace that does not exist (host/testkit/src/both/rbac.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_create_is_needed_for_a_namespace_that_does_not_exist() {
    for with_create in [false, true] {
        scenario::namespaces_create_is_needed_for_a_namespace_that_does_not_exist(
            Cluster::sim_with_rbac().await,
            with_create,
        )
        .await;
    }
}
