//! Scenario 10, RBAC: the host works with exactly the rules `jumppod rbac` prints, against the
//! simulator with RBAC enforced; removing any one verb fails with an error naming the verb and
//! resource.

mod common;

use common::both::{self, Cluster, SA_USER};
use common::*;
use jumppod_host::rbac::{self, RULES, Rule};
use jumppod_sim::Sim;
use serde_json::{Value, json};

async fn rbac_sim() -> Sim {
    Sim::start(both::rbac_sim_config()).await.unwrap()
}

fn grant(sim: &Sim, objects: Vec<Value>) {
    for o in objects {
        sim.seed(o);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_rules_are_enough() {
    both::the_printed_rules_are_enough(&Cluster::sim_with_rbac().await).await;
    // And the printed YAML is what `objects` gives.
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&rbac::yaml(NS, "jumppod"))
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(docs[1..], rbac::objects(NS, "jumppod")[..]);
}

/// Without any RBAC object (common/both.rs, on both backends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_rbac_objects_the_first_request_is_forbidden_and_says_what_to_grant() {
    both::without_rbac_objects_the_first_request_is_forbidden_and_says_what_to_grant(
        &Cluster::sim_with_rbac().await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_any_one_verb_fails_naming_the_verb_and_the_resource() {
    let checked =
        both::removing_any_one_verb_fails_naming_it(|_| Cluster::sim_with_rbac(), &[]).await;
    assert_eq!(
        checked, 14,
        "every verb but `namespaces create` (tested below)"
    );
}

/// A RoleBinding cannot exist in a namespace that does not exist, so `namespaces create` is
/// needed when the namespaced rules are granted cluster-wide (a ClusterRoleBinding).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_create_is_needed_for_a_namespace_that_does_not_exist() {
    for with_create in [true, false] {
        let sim = rbac_sim().await;
        let rules: Vec<Rule> = if with_create {
            RULES.to_vec()
        } else {
            without("create", "namespaces")
        };
        let cluster_wide: Vec<Rule> = rules
            .iter()
            .map(|r| Rule {
                cluster: true,
                ..*r
            })
            .collect();
        let mut objects = rbac::objects_with(&cluster_wide, NS, "jumppod");
        objects.retain(|o| o["kind"] == "ClusterRole" || o["kind"] == "ClusterRoleBinding");
        grant(&sim, objects);
        let kube = kube_at(&sim.kubeconfig_for(SA_USER)).await;
        let result =
            jumppod_host::ensure(&kube, &config_for("brand-new", "main", ""), &gate()).await;
        if with_create {
            result.unwrap();
            assert!(sim.get("namespaces", None, "brand-new").is_some());
        } else {
            let err = result.unwrap_err();
            assert!(
                err.to_string().contains("`create` verb on `namespaces`"),
                "{err}"
            );
        }
    }
    let _ = json!({});
}
