//! Scenario 10: exactly the rules `jumppod rbac` prints, and each verb removed.

use super::*;

/// Scenario 10's flow, every verb of the printed rules in it: a first ensure of project
/// `fresh` (get replicasets, services, namespaces, pods; list pods; create replicasets,
/// services), the upgrade of project `main` (delete pods, delete services), a user's key added,
/// another added, one removed (get, create and patch secrets), and `resolve` without a hostname
/// (get nodes; list them where the pod's node has no ExternalIP).
pub async fn rbac_flow(cluster: &Cluster, kube: &Kube) -> Result<(), HostError> {
    let fresh = config_for(cluster.ns(), "fresh", SMALL);
    jumppod_host::ensure(kube, &fresh, &gate()).await?;
    jumppod_host::ensure(kube, &cluster.config(SMALL), &gate()).await?;
    // After the ReplicaSet's pods exist: a change of the keys tells them (pods patch).
    cluster.settle().await;
    keys_flow(kube, &fresh).await?;
    let proxy = resolve::resolve(kube, &fresh).await?.proxy;
    assert_eq!(proxy.hostname, cluster.external_ip());
    Ok(())
}

/// Scenario 10: the flow works with exactly the printed rules, and `status` too; the old
/// Service is replaced on its NodePort.
pub async fn the_printed_rules_are_enough(cluster: &Cluster) {
    cluster.namespace().await;
    cluster.seed_bare_pod("Failed", false).await;
    cluster.seed_service(30068, false).await;
    let user = cluster.granted(RULES, &[]).await;
    rbac_flow(cluster, &user).await.unwrap();
    assert_eq!(node_port(&cluster.service().await), 30068);
    jumppod_host::status::status(&user, &cluster.config(SMALL))
        .await
        .unwrap();
}

/// Scenario 10 without any RBAC object: the first request is forbidden (exit 5), and the
/// error says what to grant. On the simulator RBAC must be on.
pub async fn without_rbac_objects_the_first_request_is_forbidden_and_says_what_to_grant(
    cluster: &Cluster,
) {
    cluster.namespace().await;
    cluster.seed_bare_pod("Failed", false).await;
    cluster.seed_service(30069, false).await;
    let nobody = kube_as(&cluster.nobody_kubeconfig()).await;
    let err = rbac_flow(cluster, &nobody).await.unwrap_err();
    assert_eq!(err.exit_code(), 5, "{err}");
    let way_out = format!("jumppod rbac --namespace {}", cluster.ns());
    assert!(err.to_string().contains(&way_out), "{err}");
}

/// Scenario 10: a RoleBinding cannot exist in a namespace that does not exist, so `namespaces
/// create` is needed when the namespaced rules are granted cluster-wide (a ClusterRoleBinding):
/// with it `ensure` makes the namespace; without it the error names the verb and nothing is
/// made. Each case needs a fresh backend (on the real control plane, a namespace and a user of
/// its own).
pub async fn namespaces_create_is_needed_for_a_namespace_that_does_not_exist(
    cluster: Cluster,
    with_create: bool,
) {
    let rules = if with_create {
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
    let refused: &[(&str, &str, &str)] = if with_create {
        &[]
    } else {
        &[("", "namespaces", "create")]
    };
    let kube = cluster.granted_cluster_wide(&cluster_wide, refused).await;
    let result = jumppod_host::ensure(&kube, &cluster.config(SMALL), &gate()).await;
    if with_create {
        result.expect("ensure with the printed rules, cluster-wide");
        assert!(cluster.namespace_exists().await);
    } else {
        let err = result.unwrap_err();
        assert!(
            err.to_string().contains("`create` verb on `namespaces`"),
            "{err}"
        );
        assert!(!cluster.namespace_exists().await);
    }
    cluster.finish().await;
}

/// The policy's floors, so that many namespaces of pods fit the real control plane's nodes.
const SMALL: &str = "cpu: 100m\nmemory: 32Mi";

/// Scenario 10: with the printed rules less any one verb, the flow fails (exit 5) with an
/// error naming the verb and the resource, in the API server's words. `case(i)` makes a
/// fresh backend for the i-th verb; `skip`: verbs the backend's flow never uses. Returns how
/// many verbs were checked.
pub async fn removing_any_one_verb_fails_naming_it<F, Fut>(
    mut case: F,
    skip: &[(&str, &str)],
) -> usize
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Cluster>,
{
    let mut checked = 0;
    let verbs = RULES
        .iter()
        .flat_map(|r| r.verbs.iter().map(move |v| (r, *v)));
    for (i, (rule, verb)) in verbs.enumerate() {
        // Needs the namespaced rules granted cluster-wide: its own test.
        if (rule.resource, verb) == ("namespaces", "create")
            || skip.contains(&(rule.resource, verb))
        {
            continue;
        }
        let cluster = case(i).await;
        cluster.namespace().await;
        cluster.seed_bare_pod("Failed", false).await;
        cluster.seed_service(30040 + i as i32, false).await;
        let user = cluster
            .granted(
                &without(verb, rule.resource),
                &[(rule.group, rule.resource, verb)],
            )
            .await;
        let err = rbac_flow(&cluster, &user)
            .await
            .expect_err(&format!("{verb} {} is needed", rule.resource));
        let text = err.to_string();
        assert_eq!(err.exit_code(), 5, "{text}");
        assert!(
            text.contains(&format!("`{verb}` verb on `{}`", rule.resource)),
            "{verb} {}: {text}",
            rule.resource
        );
        assert!(
            text.contains(&format!("cannot {verb} resource \"{}\"", rule.resource)),
            "{text}"
        );
        cluster.finish().await;
        checked += 1;
    }
    checked
}

/// This file's scenarios on one backend (`both_tests!`): `rbac_scenarios!(sim)` in `rbac.rs`,
/// `rbac_scenarios!(real)` in `real_cluster.rs`. The other scenarios of this file take more
/// than a cluster (the cases to check, what else to assert), so each binary calls them itself.
#[macro_export]
macro_rules! rbac_scenarios {
    ($on:ident) => {
        $crate::both_tests! { $on, rbac;
            without_rbac_objects_the_first_request_is_forbidden_and_says_what_to_grant:
                sim without_rbac_objects_the_first_request_is_forbidden_and_says_what_to_grant
                    = sim_with_rbac(),
                /// As a user granted nothing.
                real without_rbac_objects_the_first_request_is_forbidden_and_says_what_to_grant
                    = real("rc-rbac-none");
        }
    };
}
