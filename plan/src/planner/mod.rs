//! The planner: observed objects in, actions and findings out. Pure: no I/O, no clock.
//!
//! Decisions (issue 4, `ensure`):
//! 1. a missing namespace is created;
//! 2. a missing ReplicaSet is created; an existing one whose template differs from the
//!    configuration is reported with the kubectl commands that apply the configuration (never
//!    rewritten: jumppod never changes a template);
//! 3. the bare pod named `<name>` (older releases made the jump pod a bare pod) is left alone
//!    while it runs (with the current labels the ReplicaSet adopts it; one with the legacy
//!    labels stays until it is gone) and deleted once it has finished, uid as a precondition;
//! 4. a missing Service is created (NodePort `port` if configured); a Service with the legacy
//!    selector (dstack before #3891) is kept while a legacy pod is active, then deleted (uid
//!    precondition) and recreated with the current selector and the same NodePort;
//! 5. pods the scheduler cannot place are reported with its reason and message;
//! 6. an older dstack server still running jobs (a Service or a bare pod `<name>` that appeared
//!    after the ReplicaSet and is not jumppod's) is reported with what to do.

mod drift;
#[cfg(test)]
pub(crate) mod fixtures;

pub use drift::drift;

use crate::action::{Action, Finding};
use crate::config::Config;
use crate::findings::{containers_waiting, pods_refused, unschedulable};
use crate::manifest::Desired;
use crate::objects::{
    CREATED_BY, CREATED_BY_ANNOTATION, FOUND_POD_ANNOTATION, FOUND_SERVICE_ANNOTATION, annotation,
    controller_of, is_finished, name_of, node_port, phase_of, phase_text, ready_condition,
    replicaset_selector, schema_of, selector_text, service_schema, service_selector,
};
use jumppod::schema::{self, Schema};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

/// What `observe` read. `looked_further` says whether the bare pod and the pods were read
/// (they are only read when the ReplicaSet or the Service is missing or not as expected).
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// `None`: not read (the ReplicaSet was found, so the namespace exists).
    pub namespace_exists: Option<bool>,
    pub replicaset: Option<ReplicaSet>,
    pub service: Option<Service>,
    pub looked_further: bool,
    /// The pod named `<name>` (bare jump pods of older releases had the ReplicaSet's name).
    pub bare_pod: Option<Pod>,
    /// Pods labelled `app.kubernetes.io/instance=<name>`.
    pub pods: Vec<Pod>,
    /// The nodes of those pods that are going away, and why ([`crate::surge::leaving`]): read
    /// by the controller only, which watches nodes.
    pub leaving_nodes: BTreeMap<String, String>,
    /// The nodes whose kubelet has not renewed their Lease for a while, and why (controller).
    pub silent_nodes: BTreeMap<String, String>,
    /// The nodes whose kubelet reports them not Ready (Ready False), and why (controller).
    pub not_ready_nodes: BTreeMap<String, String>,
    /// The nodes the cluster found lost (Ready Unknown, tainted unreachable or out-of-service,
    /// or their Node gone), and why (controller).
    pub lost_nodes: BTreeMap<String, String>,
    /// Why the controller's view of the nodes is not to be acted on, if it is not: most of them
    /// look silent or lost at once (controller). The maps above are then empty, but `leaving`.
    pub disruption: Option<String>,
    /// Why nothing is known of the nodes, if it is not: their watch fails (controller). No
    /// map above is filled, and nothing is surged.
    pub nodes_unknown: Option<String>,
    /// The project's dstack job pods (controller): the keys they were granted.
    pub job_pods: Vec<Pod>,
    /// The bare jump pod as the controller last saw it whole ([`crate::keeper::template`]).
    pub remembered_pod: Option<Pod>,
    /// The API's answer when it last refused the bare jump pod's creation under its name for a
    /// quota, until a creation goes through (controller).
    pub quota_refused: Option<String>,
}

/// The planner's answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub findings: Vec<Finding>,
}

/// Decides what `ensure` writes.
pub fn plan(config: &Config, desired: &Desired, observed: &Observed) -> Plan {
    let mut out = Plan::default();
    let name = config.name.as_str();

    if observed.namespace_exists == Some(false) {
        out.actions
            .push(Action::CreateNamespace(Box::new(desired.namespace.clone())));
    }

    match &observed.replicaset {
        None => out
            .actions
            .push(Action::CreateReplicaSet(Box::new(recording_what_exists(
                desired, observed,
            )))),
        Some(rs) => {
            let selector = replicaset_selector(rs);
            if Schema::of_selector(&selector, name) != Some(Schema::Current) {
                out.findings.push(Finding::ForeignReplicaSet {
                    replicaset: name.to_owned(),
                    selector: selector_text(&selector),
                });
            } else if !crate::manifest::is_dstacks_own(rs)
                && let Some(drift) = drift::drift(config, desired, rs)
            {
                out.findings.push(drift);
            }
            out.findings.extend(pods_refused(rs));
        }
    }

    // The bare pod of older releases.
    let mut legacy_pod_active = false;
    if let Some(pod) = &observed.bare_pod {
        let pod_name = name_of(&pod.metadata);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let owner = controller_of(pod);
        let foreign_owner =
            owner.is_some_and(|(kind, owner)| kind != "ReplicaSet" || owner != name);
        if foreign_owner {
            // Not ours and not bare: someone else's controller manages it.
        } else if is_finished(pod) {
            out.actions.push(Action::DeletePod {
                name: pod_name.to_owned(),
                uid,
                why: format!(
                    "the jump pod of an older release has finished ({}); it is never replaced",
                    phase_text(pod)
                ),
            });
        } else if schema_of(pod, name) == Some(Schema::Current) {
            out.findings.push(Finding::BarePodAdoptable {
                pod: pod_name.to_owned(),
                adopted: owner.is_some(),
            });
        } else if pod.metadata.deletion_timestamp.is_some() && !ready_condition(pod) {
            // Terminating and not Ready: the node does not answer (the node-lifecycle controller
            // marks its pods not Ready), so the pod may stay terminating for hours. The
            // endpoints controller already took it out of the Service: it serves nobody and
            // must not pin the old Service.
            out.findings.push(Finding::LegacyPodStranded {
                pod: pod_name.to_owned(),
            });
        } else {
            legacy_pod_active = true;
            out.findings.push(Finding::LegacyPodRunning {
                pod: pod_name.to_owned(),
                phase: if pod.metadata.deletion_timestamp.is_some() {
                    "terminating".to_owned()
                } else {
                    phase_of(pod).to_owned()
                },
            });
        }
    }

    let service_name = schema::service_name(name);
    match &observed.service {
        None => out.actions.push(Action::CreateService {
            service: Box::new(desired.service.clone()),
            keeps_port: None,
        }),
        Some(svc) => {
            let spec = svc.spec.clone().unwrap_or_default();
            let selector = service_selector(svc);
            let port = node_port(svc);
            let selects = Schema::of_selector(&selector, name);
            if selects == Some(Schema::Current) {
                if spec.type_.as_deref() != Some("NodePort") {
                    out.findings.push(Finding::ForeignService {
                        service: service_name.clone(),
                        problem: format!(
                            "is of type {}, not NodePort",
                            spec.type_.as_deref().unwrap_or("ClusterIP")
                        ),
                    });
                } else if let Some(configured) = config.port
                    && port != Some(configured)
                {
                    out.findings.push(Finding::PortDiffers {
                        service: service_name.clone(),
                        configured,
                        actual: port,
                    });
                }
            } else if selects == Some(Schema::Legacy) {
                if legacy_pod_active || !observed.looked_further {
                    out.findings.push(Finding::LegacyServiceKept {
                        service: service_name.clone(),
                        node_port: port,
                    });
                } else {
                    let keep = port.or(config.port);
                    if let (Some(configured), Some(actual)) = (config.port, port)
                        && configured != actual
                    {
                        out.findings.push(Finding::PortDiffers {
                            service: service_name.clone(),
                            configured,
                            actual: Some(actual),
                        });
                    }
                    out.actions.push(Action::DeleteService {
                        name: service_name.clone(),
                        uid: svc.metadata.uid.clone().unwrap_or_default(),
                        why: "it selects the pre-#3891 label and that pod is gone".to_owned(),
                    });
                    out.actions.push(Action::CreateService {
                        service: Box::new(desired.service_on(keep)),
                        keeps_port: port,
                    });
                }
            } else {
                out.findings.push(Finding::ForeignService {
                    service: service_name.clone(),
                    problem: format!("selects {}", selector_text(&selector)),
                });
            }
        }
    }

    out.findings.extend(older_server_fight(config, observed));

    let mut seen = std::collections::BTreeSet::new();
    for pod in observed.pods.iter().chain(observed.bare_pod.iter()) {
        if !seen.insert(name_of(&pod.metadata).to_owned()) {
            continue;
        }
        out.findings.extend(unschedulable(pod));
        out.findings.extend(containers_waiting(pod));
    }
    out
}

/// The ReplicaSet to create, annotated with the uids of the Service and the bare pod that
/// exist now: they are the upgrade's, not signs of an older server fighting it later.
fn recording_what_exists(desired: &Desired, observed: &Observed) -> ReplicaSet {
    let uid = |meta: Option<&ObjectMeta>| meta.and_then(|m| m.uid.clone()).unwrap_or_default();
    let mut rs = desired.replicaset.clone();
    rs.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .extend([
            (
                FOUND_SERVICE_ANNOTATION.to_owned(),
                uid(observed.service.as_ref().map(|s| &s.metadata)),
            ),
            (
                FOUND_POD_ANNOTATION.to_owned(),
                uid(observed.bare_pod.as_ref().map(|p| &p.metadata)),
            ),
        ]);
    rs
}

/// An older dstack server running jobs of this project after the upgrade: each job of it
/// recreates the Service (without jumppod's annotation) and creates a bare pod named `<name>`.
/// Decided only for a ReplicaSet that recorded what existed at its creation; one created by an
/// earlier jumppod cannot tell the upgrade's objects from the fight's.
fn older_server_fight(config: &Config, observed: &Observed) -> Option<Finding> {
    let rs = observed.replicaset.as_ref()?;
    let found_service = annotation(&rs.metadata, FOUND_SERVICE_ANNOTATION)?;
    let found_pod = annotation(&rs.metadata, FOUND_POD_ANNOTATION).unwrap_or_default();
    let since = rs
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| format!(" (created {})", t.0))
        .unwrap_or_default();
    let mut signs = Vec::new();
    if let Some(svc) = &observed.service {
        let uid = svc.metadata.uid.as_deref().unwrap_or_default();
        let ours = annotation(&svc.metadata, CREATED_BY_ANNOTATION) == Some(CREATED_BY);
        if !ours && uid != found_service {
            let schema = match service_schema(svc, &config.name) {
                Some(Schema::Legacy) => ", with the pre-#3891 selector",
                _ => "",
            };
            signs.push(format!(
                "service {} was recreated by someone else after the ReplicaSet{since}{schema}",
                name_of(&svc.metadata)
            ));
        }
    }
    if let Some(pod) = &observed.bare_pod
        && pod.metadata.uid.as_deref().unwrap_or_default() != found_pod
    {
        signs.push(format!(
            "a bare pod {} ({} labels) appeared after the ReplicaSet{since}",
            name_of(&pod.metadata),
            schema_of(pod, &config.name).map_or("foreign", Schema::as_str)
        ));
    }
    (!signs.is_empty()).then(|| Finding::OlderServerFight {
        namespace: config.namespace.clone(),
        service: schema::service_name(&config.name),
        pod: config.name.clone(),
        node_port: observed.service.as_ref().and_then(node_port),
        configured_port: config.port,
        signs,
    })
}

/// Whether `observe` must read further than the ReplicaSet and the Service: something is
/// missing, or the Service still has the pre-#3891 selector, or the ReplicaSet lacks a ready
/// replica (then the pods tell why).
pub fn needs_a_closer_look(
    config: &Config,
    rs: Option<&ReplicaSet>,
    svc: Option<&Service>,
) -> bool {
    let Some(rs) = rs else { return true };
    let Some(svc) = svc else { return true };
    if service_schema(svc, &config.name) != Some(Schema::Current) {
        return true;
    }
    let wanted = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let ready = rs
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    ready < wanted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::fixtures::*;
    use rstest::rstest;

    fn kinds(plan: &Plan) -> Vec<String> {
        plan.actions
            .iter()
            .map(|a| match a {
                Action::CreateNamespace(_) => "create namespace".to_owned(),
                Action::CreateReplicaSet(_) => "create replicaset".to_owned(),
                Action::DeletePod { name, .. } => format!("delete pod {name}"),
                Action::DeleteService { name, .. } => format!("delete service {name}"),
                Action::CreateService { service, .. } => {
                    format!("create service on {:?}", node_port(service))
                }
                other => other.to_string(),
            })
            .collect()
    }

    #[rstest]
    #[case::an_empty_namespace_gets_the_namespace_the_replicaset_and_the_service(
        Observed { namespace_exists: Some(false), looked_further: true, ..Observed::default() },
        &["create namespace", "create replicaset", "create service on None"])]
    #[case::an_existing_namespace_is_not_created_again(
        Observed { namespace_exists: Some(true), looked_further: true, ..Observed::default() },
        &["create replicaset", "create service on None"])]
    #[case::the_steady_state_writes_nothing(steady(), &[])]
    #[case::a_missing_service_is_created(
        Observed { service: None, looked_further: true, ..steady() }, &["create service on None"])]
    #[case::a_missing_replicaset_is_created_and_the_service_kept(
        Observed { replicaset: None, namespace_exists: Some(true), looked_further: true, ..steady() },
        &["create replicaset"])]
    #[case::a_running_bare_pod_with_current_labels_is_left_to_be_adopted(
        Observed { replicaset: None, namespace_exists: Some(true), looked_further: true,
                   bare_pod: Some(bare_pod("Running", true)), ..steady() },
        &["create replicaset"])]
    #[case::a_failed_bare_pod_is_deleted(
        Observed { looked_further: true, bare_pod: Some(bare_pod("Failed", true)), ..steady() },
        &["delete pod dstack-main-ssh-jump-pod"])]
    #[case::a_succeeded_bare_pod_is_deleted(
        Observed { looked_further: true, bare_pod: Some(bare_pod("Succeeded", true)), ..steady() },
        &["delete pod dstack-main-ssh-jump-pod"])]
    #[case::a_finished_adopted_pod_is_deleted_too(
        Observed { looked_further: true,
                   bare_pod: Some(owned(bare_pod("Failed", true), "ReplicaSet", NAME)), ..steady() },
        &["delete pod dstack-main-ssh-jump-pod"])]
    #[case::a_finished_pod_of_another_controller_is_never_deleted(
        Observed { looked_further: true,
                   bare_pod: Some(owned(bare_pod("Failed", true), "Job", "other")), ..steady() },
        &[])]
    #[case::a_running_pre_3891_pod_keeps_its_old_service(
        Observed { looked_further: true, service: Some(legacy_svc(30555)),
                   bare_pod: Some(bare_pod("Running", false)), ..steady() },
        &[])]
    #[case::a_pending_pre_3891_pod_keeps_its_old_service(
        Observed { looked_further: true, service: Some(legacy_svc(30555)),
                   bare_pod: Some(bare_pod("Pending", false)), ..steady() },
        &[])]
    #[case::once_the_pre_3891_pod_is_gone_the_service_is_recreated_on_the_same_port(
        Observed { looked_further: true, service: Some(legacy_svc(30555)), bare_pod: None, ..steady() },
        &["delete service dstack-main-ssh-jump-pod-service", "create service on Some(30555)"])]
    #[case::a_finished_pre_3891_pod_is_deleted_and_the_service_recreated_on_the_same_port(
        Observed { looked_further: true, service: Some(legacy_svc(30555)),
                   bare_pod: Some(bare_pod("Failed", false)), ..steady() },
        &["delete pod dstack-main-ssh-jump-pod", "delete service dstack-main-ssh-jump-pod-service",
          "create service on Some(30555)"])]
    #[case::a_pre_3891_pod_terminating_on_a_dead_node_no_longer_pins_its_service(
        Observed { looked_further: true, service: Some(legacy_svc(30555)),
                   bare_pod: Some(terminating(bare_pod("Running", false), false)), ..steady() },
        &["delete service dstack-main-ssh-jump-pod-service", "create service on Some(30555)"])]
    #[case::a_pre_3891_pod_terminating_gracefully_and_still_ready_keeps_its_service(
        Observed { looked_further: true, service: Some(legacy_svc(30555)),
                   bare_pod: Some(terminating(bare_pod("Running", false), true)), ..steady() },
        &[])]
    #[case::an_old_service_is_never_replaced_without_a_look_at_the_bare_pod(
        Observed { looked_further: false, service: Some(legacy_svc(30555)), ..steady() }, &[])]
    #[case::a_service_with_a_foreign_selector_is_left_alone(
        Observed { service: Some(svc(BTreeMap::from([("app".into(), "x".into())]), 30001)),
                   looked_further: true, ..steady() }, &[])]
    fn decides(#[case] observed: Observed, #[case] expected: &[&str]) {
        assert_eq!(kinds(&run(&observed)), expected);
    }

    #[test]
    fn deletes_carry_the_uid_they_were_decided_on() {
        let plan = run(&Observed {
            looked_further: true,
            service: Some(legacy_svc(30555)),
            bare_pod: Some(bare_pod("Failed", false)),
            ..steady()
        });
        let uids: Vec<&str> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::DeletePod { uid, .. } | Action::DeleteService { uid, .. } => {
                    Some(uid.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(uids, ["bare-uid", "svc-uid"]);
    }

    #[test]
    fn the_kept_port_wins_over_a_different_configured_port_and_is_reported() {
        let c = config_with("port: 31000");
        let observed = Observed {
            looked_further: true,
            service: Some(legacy_svc(30555)),
            ..steady()
        };
        let plan = plan(&c, &Desired::from_config(&c), &observed);
        assert!(plan.actions.iter().any(|a| matches!(a,
            Action::CreateService { service, keeps_port: Some(30555) } if node_port(service) == Some(30555))));
        assert!(plan.findings.contains(&Finding::PortDiffers {
            service: SVC.into(),
            configured: 31000,
            actual: Some(30555)
        }));
    }

    #[test]
    fn a_new_service_takes_the_configured_port() {
        let c = config_with("port: 31000");
        let observed = Observed {
            service: None,
            looked_further: true,
            ..steady()
        };
        let plan = plan(&c, &Desired::from_config(&c), &observed);
        assert!(matches!(&plan.actions[0],
            Action::CreateService { service, keeps_port: None } if node_port(service) == Some(31000)));
    }

    #[rstest]
    #[case::a_running_pre_3891_pod_is_reported_as_left_alone(
        Observed { looked_further: true, service: Some(legacy_svc(30555)),
                   bare_pod: Some(bare_pod("Running", false)), ..steady() },
        Finding::LegacyPodRunning { pod: NAME.into(), phase: "Running".into() })]
    #[case::the_kept_old_service_is_reported_with_its_port(
        Observed { looked_further: true, service: Some(legacy_svc(30555)),
                   bare_pod: Some(bare_pod("Running", false)), ..steady() },
        Finding::LegacyServiceKept { service: SVC.into(), node_port: Some(30555) })]
    #[case::a_pre_3891_pod_terminating_on_a_dead_node_is_reported_as_gone(
        Observed { looked_further: true, service: Some(legacy_svc(30555)),
                   bare_pod: Some(terminating(bare_pod("Running", false), false)), ..steady() },
        Finding::LegacyPodStranded { pod: NAME.into() })]
    #[case::a_bare_pod_with_current_labels_is_reported_as_adoptable(
        Observed { looked_further: true, bare_pod: Some(bare_pod("Running", true)), ..steady() },
        Finding::BarePodAdoptable { pod: NAME.into(), adopted: false })]
    #[case::an_adopted_pod_is_reported_as_adopted(
        Observed { looked_further: true,
                   bare_pod: Some(owned(bare_pod("Running", true), "ReplicaSet", NAME)), ..steady() },
        Finding::BarePodAdoptable { pod: NAME.into(), adopted: true })]
    #[case::an_unschedulable_pod_is_reported_with_the_schedulers_message(
        Observed { looked_further: true, replicaset: Some(rs(0)),
                   pods: vec![pending_unschedulable("dstack-main-ssh-jump-pod-x7k2q")], ..steady() },
        Finding::Unschedulable { pod: "dstack-main-ssh-jump-pod-x7k2q".into(), reason: "Unschedulable".into(),
                                 message: "0/3 nodes are available: 3 Insufficient cpu.".into() })]
    #[case::a_configured_port_other_than_the_services_is_reported(
        Observed { service: Some(current_svc(30001)), ..steady() },
        Finding::PortDiffers { service: SVC.into(), configured: 31000, actual: Some(30001) })]
    #[case::pods_the_replicaset_cannot_create_are_reported_with_the_apis_message(
        Observed { replicaset: Some(refused_rs()), looked_further: true, ..steady() },
        Finding::PodsRefused { replicaset: NAME.into(), reason: "FailedCreate".into(),
            message: "pods \"dstack-main-ssh-jump-pod-x7k2q\" is forbidden: maximum cpu usage per Container is 100m, but limit is 500m".into() })]
    #[case::an_image_that_cannot_be_pulled_is_reported_with_the_kubelets_message(
        Observed { looked_further: true, replicaset: Some(rs(0)),
                   pods: vec![waiting("dstack-main-ssh-jump-pod-x7k2q", "ImagePullBackOff",
                                      "Back-off pulling image \"sshd\"")], ..steady() },
        Finding::ContainerWaiting { pod: "dstack-main-ssh-jump-pod-x7k2q".into(), container: "sshd".into(),
            reason: "ImagePullBackOff".into(), message: "Back-off pulling image \"sshd\"".into() })]
    fn reports(#[case] observed: Observed, #[case] expected: Finding) {
        let c = if matches!(expected, Finding::PortDiffers { .. }) {
            config_with("port: 31000")
        } else {
            config()
        };
        let plan = plan(&c, &Desired::from_config(&c), &observed);
        assert!(
            plan.findings.contains(&expected),
            "{:#?} not in {:#?}",
            expected,
            plan.findings
        );
    }

    fn fight(plan: &Plan) -> Option<&Finding> {
        plan.findings
            .iter()
            .find(|f| matches!(f, Finding::OlderServerFight { .. }))
    }

    fn signs(plan: &Plan) -> Vec<String> {
        match fight(plan) {
            Some(Finding::OlderServerFight { signs, .. }) => signs.clone(),
            _ => Vec::new(),
        }
    }

    #[rstest]
    #[case::a_service_recreated_by_someone_else_after_the_replicaset_is_an_older_servers_job(
        Observed { replicaset: Some(recorded_rs("svc-before", "")), service: Some(current_svc(31999)), ..steady() },
        &["service dstack-main-ssh-jump-pod-service was recreated by someone else after the ReplicaSet (created 2026-11-30T10:00:00Z)"])]
    #[case::a_recreated_service_with_the_pre_3891_selector_says_so(
        Observed { replicaset: Some(recorded_rs("svc-before", "")), service: Some(legacy_svc(31999)),
                   looked_further: true, ..steady() },
        &["service dstack-main-ssh-jump-pod-service was recreated by someone else after the ReplicaSet (created 2026-11-30T10:00:00Z), with the pre-#3891 selector"])]
    #[case::a_bare_pod_appearing_after_the_replicaset_is_an_older_servers_job(
        Observed { replicaset: Some(recorded_rs("", "")), service: Some(ours(current_svc(31022))),
                   looked_further: true, bare_pod: Some(bare_pod("Running", false)), ..steady() },
        &["a bare pod dstack-main-ssh-jump-pod (pre-#3891 labels) appeared after the ReplicaSet (created 2026-11-30T10:00:00Z)"])]
    #[case::both_signs_are_named(
        Observed { replicaset: Some(recorded_rs("", "")), service: Some(current_svc(31022)),
                   looked_further: true, bare_pod: Some(owned(bare_pod("Running", true), "ReplicaSet", NAME)), ..steady() },
        &["service dstack-main-ssh-jump-pod-service was recreated by someone else after the ReplicaSet (created 2026-11-30T10:00:00Z)",
          "a bare pod dstack-main-ssh-jump-pod (current labels) appeared after the ReplicaSet (created 2026-11-30T10:00:00Z)"])]
    #[case::the_service_the_replicaset_found_at_its_creation_is_the_upgrades_not_a_fight(
        Observed { replicaset: Some(recorded_rs("svc-uid", "")), service: Some(current_svc(31022)), ..steady() }, &[])]
    #[case::the_bare_pod_the_replicaset_found_at_its_creation_is_the_upgrades_not_a_fight(
        Observed { replicaset: Some(recorded_rs("svc-uid", "bare-uid")), service: Some(legacy_svc(31022)),
                   looked_further: true, bare_pod: Some(bare_pod("Running", false)), ..steady() }, &[])]
    #[case::a_service_jumppod_created_is_not_a_fight(
        Observed { replicaset: Some(recorded_rs("", "")), service: Some(ours(current_svc(31022))), ..steady() }, &[])]
    #[case::a_replicaset_that_recorded_nothing_cannot_tell_and_says_nothing(
        Observed { service: Some(current_svc(31999)), looked_further: true,
                   bare_pod: Some(bare_pod("Running", false)), ..steady() }, &[])]
    fn recognises_an_older_server_fighting_the_replicaset(
        #[case] observed: Observed,
        #[case] expected: &[&str],
    ) {
        assert_eq!(signs(&run(&observed)), expected);
    }

    #[test]
    fn a_replicaset_records_the_service_and_the_bare_pod_that_exist_at_its_creation() {
        let plan = run(&Observed {
            replicaset: None,
            namespace_exists: Some(true),
            looked_further: true,
            service: Some(legacy_svc(30555)),
            bare_pod: Some(bare_pod("Running", false)),
            ..steady()
        });
        let Action::CreateReplicaSet(rs) = &plan.actions[0] else {
            panic!("{:?}", plan.actions)
        };
        let found = |key| annotation(&rs.metadata, key).map(str::to_owned);
        assert_eq!(found(FOUND_SERVICE_ANNOTATION).as_deref(), Some("svc-uid"));
        assert_eq!(found(FOUND_POD_ANNOTATION).as_deref(), Some("bare-uid"));
        let fresh = run(&Observed {
            replicaset: None,
            service: None,
            namespace_exists: Some(true),
            looked_further: true,
            ..steady()
        });
        let Action::CreateReplicaSet(rs) = &fresh.actions[0] else {
            panic!("{:?}", fresh.actions)
        };
        assert_eq!(annotation(&rs.metadata, FOUND_SERVICE_ANNOTATION), Some(""));
        let Action::CreateService { service, .. } = &fresh.actions[1] else {
            panic!("{:?}", fresh.actions)
        };
        assert_eq!(
            annotation(&service.metadata, CREATED_BY_ANNOTATION),
            Some(CREATED_BY),
            "the Service jumppod creates is marked as its own"
        );
    }

    #[rstest]
    #[case::without_a_port_it_asks_for_one(None, "meanwhile set proxy_jump.port")]
    #[case::with_a_port_it_asks_to_keep_it_everywhere(
        Some(32000),
        "meanwhile keep proxy_jump.port: 32000 on every server"
    )]
    fn the_fight_says_what_it_means_and_what_to_do(
        #[case] port: Option<i32>,
        #[case] advice: &str,
    ) {
        let c = match port {
            Some(p) => config_with(&format!("port: {p}")),
            None => config(),
        };
        let observed = Observed {
            replicaset: Some(recorded_rs("svc-before", "")),
            service: Some(current_svc(port.unwrap_or(31999))),
            ..steady()
        };
        let plan = plan(&c, &Desired::from_config(&c), &observed);
        let finding = fight(&plan).expect("a fight");
        assert!(finding.is_warning());
        let text = finding.to_string();
        for part in [
            "an older dstack server is running jobs of this project",
            "each of its jobs deletes and recreates service dstack-main-ssh-jump-pod-service (the NodePort may change, now ",
            "then fails",
            "Upgrade every dstack server of this project to a release that uses jumppod, or stop the old one",
            advice,
            "kubectl -n dstack annotate service dstack-main-ssh-jump-pod-service jumppod.dstack.ai/created-by=jumppod",
        ] {
            assert!(text.contains(part), "{part:?} not in {text}");
        }
        assert_eq!(
            serde_json::to_value(finding).unwrap()["kind"],
            "olderServerFight"
        );
    }

    #[test]
    fn a_recreated_pre_3891_service_is_replaced_on_its_port_once_no_pre_3891_pod_is_active() {
        let plan = run(&Observed {
            replicaset: Some(recorded_rs("svc-before", "")),
            service: Some(legacy_svc(31999)),
            looked_further: true,
            ..steady()
        });
        assert_eq!(
            kinds(&plan),
            [
                "delete service dstack-main-ssh-jump-pod-service",
                "create service on Some(31999)"
            ]
        );
        assert!(fight(&plan).is_some());
    }

    #[test]
    fn a_container_that_is_still_being_created_is_not_a_finding() {
        let observed = Observed {
            looked_further: true,
            replicaset: Some(rs(0)),
            pods: vec![waiting("p", "ContainerCreating", "")],
            ..steady()
        };
        let plan = run(&observed);
        assert!(plan.findings.is_empty(), "{:#?}", plan.findings);
    }

    #[rstest]
    #[case::a_missing_replicaset_needs_a_closer_look(None, Some(current_svc(1)), true)]
    #[case::a_missing_service_needs_a_closer_look(Some(rs(1)), None, true)]
    #[case::an_old_selector_service_needs_a_closer_look(Some(rs(1)), Some(legacy_svc(1)), true)]
    #[case::a_replicaset_without_a_ready_pod_needs_a_closer_look(
        Some(rs(0)),
        Some(current_svc(1)),
        true
    )]
    #[case::a_ready_replicaset_and_a_current_service_are_enough(
        Some(rs(1)),
        Some(current_svc(1)),
        false
    )]
    fn looks_further_only_when_something_is_off(
        #[case] rs: Option<ReplicaSet>,
        #[case] svc: Option<Service>,
        #[case] expected: bool,
    ) {
        assert_eq!(
            needs_a_closer_look(&config(), rs.as_ref(), svc.as_ref()),
            expected
        );
    }

    #[test]
    fn actions_describe_themselves_for_the_operator() {
        let plan = run(&Observed {
            looked_further: true,
            service: Some(legacy_svc(30555)),
            ..steady()
        });
        let text: Vec<String> = plan.actions.iter().map(ToString::to_string).collect();
        assert_eq!(
            text[1],
            "create service dstack-main-ssh-jump-pod-service on NodePort 30555 (kept: running jobs use it)"
        );
    }
}
