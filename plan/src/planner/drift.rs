//! Template drift: the ReplicaSet's template compared with the configuration, and the kubectl
//! commands that apply the configuration. jumppod never rewrites a template itself (the CLI's
//! Role has no update on replicasets): applying it means replacing the pod, which ends its SSH
//! sessions after their drain, so the moment is the operator's call.

use crate::action::{Difference, Finding};
use crate::config::Config;
use crate::manifest::{self, AUTHORIZED_KEYS_ENV, Desired};
use crate::objects::{selector_text, template_spec};
use jumppod::quantity::Quantity;
use jumppod::schema;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Container, PodSpec};

/// The ReplicaSet's template compared with the desired one.
pub fn drift(config: &Config, desired: &Desired, rs: &ReplicaSet) -> Option<Finding> {
    let name = config.name.as_str();
    let container_name = schema::container_name(name);
    let wanted = desired.pod_spec();
    let wanted_c = &wanted.containers[0];
    let found_spec: PodSpec = template_spec(rs).cloned().unwrap_or_default();
    let mut differences = Vec::new();
    let mut commands = Vec::new();
    let ns = &config.namespace;
    let Some(found_c) = found_spec
        .containers
        .iter()
        .find(|c| c.name == container_name)
    else {
        differences.push(Difference {
            field: "container".into(),
            found: found_spec
                .containers
                .iter()
                .map(|c| c.name.clone())
                .collect::<Vec<_>>()
                .join(","),
            wanted: container_name.clone(),
        });
        commands.push(format!(
            "kubectl -n {ns} delete replicaset {name}   # then run `jumppod ensure` (open SSH sessions through this pod drop)"
        ));
        return Some(Finding::Drift {
            replicaset: name.to_owned(),
            differences,
            commands,
        });
    };

    let mut resources_differ = false;
    for (side, key) in [
        ("requests", "cpu"),
        ("limits", "cpu"),
        ("requests", "memory"),
        ("limits", "memory"),
        ("requests", "ephemeral-storage"),
        ("limits", "ephemeral-storage"),
    ] {
        let found = resource(found_c, side, key);
        let want = resource(wanted_c, side, key);
        if !same_quantity(found.as_deref(), want.as_deref()) {
            resources_differ = true;
            differences.push(Difference {
                field: format!("resources.{side}.{key}"),
                found: found.unwrap_or_else(|| "unset".into()),
                wanted: want.unwrap_or_else(|| "unset".into()),
            });
        }
    }
    if resources_differ {
        let mut cmd = format!(
            "kubectl -n {ns} set resources replicaset {name} -c {container_name} --requests=cpu={},memory={},ephemeral-storage={} --limits=cpu={},memory={}",
            config.cpu,
            config.memory,
            config.contract.ephemeral_storage_request,
            config.cpu,
            config.memory
        );
        if resource(found_c, "limits", "ephemeral-storage").is_some() {
            cmd.push_str(&format!(
                "\n    kubectl -n {ns} patch replicaset {name} --type json -p '[{{\"op\":\"remove\",\"path\":\"/spec/template/spec/containers/0/resources/limits/ephemeral-storage\"}}]'"
            ));
        }
        commands.push(cmd);
    }
    if found_c.image != wanted_c.image {
        differences.push(Difference {
            field: "image".into(),
            found: found_c.image.clone().unwrap_or_else(|| "unset".into()),
            wanted: config.image.clone(),
        });
        commands.push(format!(
            "kubectl -n {ns} set image replicaset/{name} {container_name}={}",
            config.image
        ));
    }
    if config.ssh_public_key.is_some() && env_value(found_c) != env_value(wanted_c) {
        differences.push(Difference {
            field: format!("env.{AUTHORIZED_KEYS_ENV}"),
            found: env_value(found_c).unwrap_or_else(|| "unset".into()),
            wanted: env_value(wanted_c).unwrap_or_default(),
        });
        commands.push(format!(
            "kubectl -n {ns} set env replicaset/{name} -c {container_name} {AUTHORIZED_KEYS_ENV}='{}'",
            env_value(wanted_c).unwrap_or_default()
        ));
    }
    if let Some(found) = keys_problem(&found_spec, found_c, wanted, wanted_c) {
        differences.push(Difference {
            field: "authorized keys".into(),
            found,
            wanted: format!(
                "Secret {} mounted at {} and merged by the start script",
                manifest::keys_secret_name(name),
                manifest::KEYS_MOUNT
            ),
        });
        let patch = serde_json::json!({"spec": {"template": {"spec": {
            "volumes": wanted.volumes,
            "containers": [{
                "name": container_name,
                "command": wanted_c.command,
                "volumeMounts": wanted_c.volume_mounts,
                "readinessProbe": wanted_c.readiness_probe,
            }],
        }}}});
        commands.push(format!(
            "kubectl -n {ns} patch replicaset {name} --type strategic -p {}",
            shell_quote(&patch.to_string())
        ));
    }
    if found_spec.termination_grace_period_seconds != wanted.termination_grace_period_seconds {
        let wanted_grace = wanted.termination_grace_period_seconds.unwrap_or_default();
        differences.push(Difference {
            field: "terminationGracePeriodSeconds".into(),
            // The API server defaults an unset grace period to 30.
            found: found_spec
                .termination_grace_period_seconds
                .unwrap_or(30)
                .to_string(),
            wanted: wanted_grace.to_string(),
        });
        let patch = serde_json::json!({"spec": {"template": {"spec": {
            "terminationGracePeriodSeconds": wanted_grace,
        }}}});
        commands.push(format!(
            "kubectl -n {ns} patch replicaset {name} --type merge -p '{patch}'"
        ));
    }
    let found_sel = found_spec.node_selector.clone().unwrap_or_default();
    let found_tol = found_spec.tolerations.clone().unwrap_or_default();
    let sel_differs = found_sel != config.node_selector;
    let tol_differs = found_tol != config.tolerations;
    if sel_differs {
        differences.push(Difference {
            field: "nodeSelector".into(),
            found: selector_text(&found_sel),
            wanted: selector_text(&config.node_selector),
        });
    }
    if tol_differs {
        differences.push(Difference {
            field: "tolerations".into(),
            found: serde_json::to_string(&found_tol).unwrap_or_default(),
            wanted: serde_json::to_string(&config.tolerations).unwrap_or_default(),
        });
    }
    if sel_differs || tol_differs {
        let patch = serde_json::json!({"spec": {"template": {"spec": {
            "nodeSelector": if config.node_selector.is_empty() { serde_json::Value::Null } else { serde_json::json!(config.node_selector) },
            "tolerations": if config.tolerations.is_empty() { serde_json::Value::Null } else { serde_json::json!(config.tolerations) },
        }}}});
        commands.push(format!(
            "kubectl -n {ns} patch replicaset {name} --type merge -p '{patch}'"
        ));
    }
    if differences.is_empty() {
        return None;
    }
    commands.push(format!(
        "kubectl -n {ns} delete pod -l {}={name}   # the ReplicaSet recreates the pod from the new template; {}",
        schema::INSTANCE_LABEL,
        old_pod_ending(&found_spec, found_c, wanted_c)
    ));
    Some(Finding::Drift {
        replicaset: name.to_owned(),
        differences,
        commands,
    })
}

/// What a deleted pod of this template does with its SSH sessions: a pod started by the current
/// script hands over, then keeps its sessions until its grace period ends; one started by an
/// older script (sshd as PID 1) drops them at once.
fn old_pod_ending(found: &PodSpec, found_c: &Container, wanted_c: &Container) -> String {
    if found_c.command != wanted_c.command {
        return "SSH sessions through the old pod drop".into();
    }
    // The API server defaults an unset grace period to 30.
    let grace = found.termination_grace_period_seconds.unwrap_or(30);
    let handover = i64::from(manifest::HANDOVER_SECONDS);
    format!(
        "the old pod accepts for {handover} s more, and SSH sessions through it last at most {} s after that",
        (grace - handover).max(0)
    )
}

/// What keeps the users' keys from reaching the pod, or None: the Secret's volume, its mount or
/// the start script that merges it (a template of a jumppod before `keys`).
fn keys_problem(
    found: &PodSpec,
    found_c: &Container,
    wanted: &PodSpec,
    wanted_c: &Container,
) -> Option<String> {
    let volume = |spec: &PodSpec| {
        spec.volumes
            .iter()
            .flatten()
            .find(|v| v.name == manifest::KEYS_VOLUME)
            .cloned()
    };
    let mount = |c: &Container| {
        c.volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == manifest::KEYS_VOLUME)
            .map(|m| m.mount_path.clone())
    };
    if volume(found).map(|v| v.secret) != volume(wanted).map(|v| v.secret) {
        Some("the Secret is not mounted".into())
    } else if mount(found_c) != mount(wanted_c) {
        Some(format!(
            "mounted at {}",
            mount(found_c).unwrap_or_else(|| "no path".into())
        ))
    } else if found_c.command != wanted_c.command {
        Some("an older start script (without the key merge or the session drain)".into())
    } else {
        None
    }
}

/// `text` as one single-quoted shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

fn resource(c: &Container, side: &str, key: &str) -> Option<String> {
    let r = c.resources.as_ref()?;
    let map = if side == "requests" {
        r.requests.as_ref()
    } else {
        r.limits.as_ref()
    }?;
    map.get(key).map(|q| q.0.clone())
}

fn same_quantity(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => match (Quantity::parse(a), Quantity::parse(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => a == b,
        },
        _ => false,
    }
}

fn env_value(c: &Container) -> Option<String> {
    c.env
        .as_ref()?
        .iter()
        .find(|e| e.name == AUTHORIZED_KEYS_ENV)
        .and_then(|e| e.value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::without_keys;
    use crate::planner::fixtures::*;
    use crate::planner::{Observed, Plan, plan};
    use rstest::rstest;
    use std::collections::BTreeMap;

    #[rstest]
    #[case::older_resources_are_drift_with_a_set_resources_command(
        "cpu: 250m",
        "resources.requests.cpu",
        "set resources replicaset dstack-main-ssh-jump-pod"
    )]
    #[case::another_image_is_drift_with_a_set_image_command(
        "image: sshd:2",
        "image",
        "set image replicaset/dstack-main-ssh-jump-pod"
    )]
    #[case::a_template_without_the_keys_secret_is_drift_with_a_strategic_patch(
        "cpu: 500m",
        "authorized keys",
        "patch replicaset dstack-main-ssh-jump-pod --type strategic"
    )]
    #[case::another_node_selector_is_drift_with_a_patch_command(
        "node_selector: {pool: jump}",
        "nodeSelector",
        "patch replicaset dstack-main-ssh-jump-pod --type merge"
    )]
    fn drift_is_reported_with_the_commands_to_apply_it(
        #[case] yaml: &str,
        #[case] field: &str,
        #[case] command: &str,
    ) {
        let c = config_with(yaml);
        let mut observed = steady(); // built from the default configuration
        if field == "authorized keys" {
            observed.replicaset = Some(without_keys(rs(1)));
        }
        let plan = plan(&c, &Desired::from_config(&c), &observed);
        assert!(plan.actions.is_empty(), "drift is never rewritten");
        let Some(Finding::Drift {
            differences,
            commands,
            ..
        }) = plan.findings.first()
        else {
            panic!("no drift in {:?}", plan.findings)
        };
        assert!(
            differences.iter().any(|d| d.field == field),
            "{differences:?}"
        );
        assert!(commands.iter().any(|c| c.contains(command)), "{commands:?}");
        assert!(
            commands
                .last()
                .unwrap()
                .contains("delete pod -l app.kubernetes.io/instance=")
        );
    }

    /// The delete command says what happens to the old pod's SSH sessions: the template's pods
    /// hand over and keep them for their session drain, unless their start script is older.
    #[rstest]
    #[case::a_current_script_keeps_the_sessions_for_its_drain(
        "cpu: 250m",
        false,
        "the old pod accepts for 20 s more, and SSH sessions through it last at most 300 s after that"
    )]
    #[case::a_shorter_drain_is_the_templates_own(
        "session_drain_seconds: 60",
        false,
        "the old pod accepts for 20 s more, and SSH sessions through it last at most 300 s after that"
    )]
    #[case::an_older_script_drops_the_sessions(
        "cpu: 250m",
        true,
        "SSH sessions through the old pod drop"
    )]
    fn the_delete_command_says_what_the_old_pods_sessions_do(
        #[case] yaml: &str,
        #[case] older_script: bool,
        #[case] ending: &str,
    ) {
        let c = config_with(yaml);
        let mut found = rs(1);
        if older_script {
            let template = found.spec.as_mut().unwrap().template.as_mut().unwrap();
            let spec = template.spec.as_mut().unwrap();
            spec.containers[0].command =
                Some(vec!["/bin/sh".into(), "-c".into(), "exec sshd -D".into()]);
        }
        let plan = plan(
            &c,
            &Desired::from_config(&c),
            &Observed {
                replicaset: Some(found),
                ..steady()
            },
        );
        let Some(Finding::Drift { commands, .. }) = plan.findings.first() else {
            panic!("{:?}", plan.findings)
        };
        let delete = commands.last().unwrap();
        assert!(delete.contains("delete pod -l"), "{delete}");
        assert!(delete.ends_with(ending), "{delete}");
    }

    #[test]
    fn the_keys_patch_is_one_shell_word_that_kubectl_gets_whole() {
        let c = config();
        let plan = plan(
            &c,
            &Desired::from_config(&c),
            &Observed {
                replicaset: Some(without_keys(rs(1))),
                ..steady()
            },
        );
        let Some(Finding::Drift { commands, .. }) = plan.findings.first() else {
            panic!("{:?}", plan.findings)
        };
        let command = commands
            .iter()
            .find(|c| c.contains("--type strategic"))
            .unwrap();
        // The shell hands kubectl the patch as one argument: have sh print that argument back.
        let (_, word) = command.split_once(" -p ").unwrap();
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &format!("printf '%s' {word}")])
            .output()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let desired = Desired::from_config(&c);
        let wanted = desired.pod_spec();
        assert_eq!(
            json["spec"]["template"]["spec"]["containers"][0]["command"],
            serde_json::json!(wanted.containers[0].command)
        );
    }

    /// The desired objects are built once, by `Desired::from_config`: the planner compares the
    /// observed template with the one it is handed, not with one rebuilt from the configuration.
    #[test]
    fn drift_is_judged_against_the_desired_template_the_planner_is_given() {
        let c = config();
        let mut desired = Desired::from_config(&c);
        let spec = desired.replicaset.spec.as_mut().unwrap();
        let pod = spec.template.as_mut().unwrap().spec.as_mut().unwrap();
        let memory = pod.containers[0].resources.as_mut().unwrap();
        for side in [&mut memory.requests, &mut memory.limits] {
            side.as_mut().unwrap().insert(
                "memory".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("2Gi".into()),
            );
        }
        let plan = plan(&c, &desired, &steady());
        let Some(Finding::Drift { differences, .. }) = plan.findings.first() else {
            panic!("no drift in {:?}", plan.findings)
        };
        assert!(
            differences
                .iter()
                .any(|d| d.field.contains("memory") && d.wanted == "2Gi"),
            "{differences:?}"
        );
    }

    #[test]
    fn equal_quantities_written_differently_are_not_drift() {
        let c = config_with("cpu: '0.5'\nmemory: 1024Mi");
        let observed = steady();
        assert_eq!(
            plan(&c, &Desired::from_config(&c), &observed),
            Plan::default()
        );
    }

    #[test]
    fn a_replicaset_with_a_foreign_selector_is_reported_not_diffed() {
        let mut foreign = rs(1);
        foreign.spec.as_mut().unwrap().selector.match_labels =
            Some(BTreeMap::from([("app".into(), "x".into())]));
        let plan = run(&Observed {
            replicaset: Some(foreign),
            ..steady()
        });
        assert!(matches!(
            plan.findings[..],
            [Finding::ForeignReplicaSet { .. }]
        ));
    }
}
