//! Builders of the objects the planner's tests observe.

use crate::config::{Config, RawConfig};
use crate::manifest::Desired;
use crate::planner::{Observed, Plan, plan};
use jumppod::schema;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub const NAME: &str = "dstack-main-ssh-jump-pod";
pub const SVC: &str = "dstack-main-ssh-jump-pod-service";

pub fn config() -> Config {
    Config::for_project("dstack", "main")
}

pub fn config_with(yaml: &str) -> Config {
    RawConfig::from_text(&format!("namespace: dstack\nproject: main\n{yaml}"))
        .unwrap()
        .validate("default")
        .unwrap()
}

pub fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

pub fn rs_from(config: &Config, ready: i32) -> ReplicaSet {
    let mut rs = Desired::from_config(config).replicaset;
    rs.metadata.uid = Some("rs-uid".into());
    rs.status = Some(typed(json!({"replicas": 1, "readyReplicas": ready})));
    rs
}

pub fn rs(ready: i32) -> ReplicaSet {
    rs_from(&config(), ready)
}

pub fn svc(selector: BTreeMap<String, String>, port: i32) -> Service {
    typed(json!({
        "metadata": {"name": SVC, "namespace": "dstack", "uid": "svc-uid"},
        "spec": {"type": "NodePort", "selector": selector,
                 "ports": [{"port": 22, "targetPort": 22, "nodePort": port}]}
    }))
}

pub fn current_svc(port: i32) -> Service {
    svc(schema::current_selector(NAME), port)
}

pub fn legacy_svc(port: i32) -> Service {
    svc(schema::legacy_selector(NAME), port)
}

/// A bare pod named like the ReplicaSet; `current`: with the current labels, else only the
/// legacy name label.
pub fn bare_pod(phase: &str, current: bool) -> Pod {
    let labels = if current {
        schema::current_labels(NAME, "main")
    } else {
        schema::legacy_selector(NAME)
    };
    typed(json!({
        "metadata": {"name": NAME, "namespace": "dstack", "uid": "bare-uid", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "sshd"}]},
        "status": {"phase": phase}
    }))
}

/// The pod being deleted; `ready`: its Ready condition (False once the node-lifecycle
/// controller has seen its node stop answering).
pub fn terminating(mut pod: Pod, ready: bool) -> Pod {
    pod.metadata.deletion_timestamp = Some(typed(json!("2026-11-30T10:00:00Z")));
    let status = if ready { "True" } else { "False" };
    pod.status = Some(typed(json!({"phase": "Running",
        "conditions": [{"type": "Ready", "status": status}]})));
    pod
}

pub fn owned(mut pod: Pod, kind: &str, owner: &str) -> Pod {
    pod.metadata.owner_references = Some(vec![typed(json!({
        "apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": "o", "controller": true
    }))]);
    pod
}

pub fn pending_unschedulable(name: &str) -> Pod {
    typed(json!({
        "metadata": {"name": name, "namespace": "dstack", "uid": "p",
                     "labels": schema::current_labels(NAME, "main")},
        "spec": {"containers": [{"name": "c", "image": "sshd"}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}]}
    }))
}

/// A ReplicaSet whose controller cannot create its pod (what a LimitRange answers).
pub fn refused_rs() -> ReplicaSet {
    let mut rs = rs(0);
    rs.status = Some(typed(json!({"replicas": 0, "conditions": [{
        "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
        "message": "pods \"dstack-main-ssh-jump-pod-x7k2q\" is forbidden: maximum cpu usage per Container is 100m, but limit is 500m"}]})));
    rs
}

/// A scheduled pod whose container waits for `reason`.
pub fn waiting(name: &str, reason: &str, message: &str) -> Pod {
    typed(json!({
        "metadata": {"name": name, "namespace": "dstack", "uid": "p",
                     "labels": schema::current_labels(NAME, "main")},
        "spec": {"containers": [{"name": "sshd", "image": "sshd"}], "nodeName": "node-1"},
        "status": {"phase": "Pending", "containerStatuses": [{"name": "sshd", "image": "sshd",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": reason, "message": message}}}]}
    }))
}

pub fn steady() -> Observed {
    Observed {
        namespace_exists: None,
        replicaset: Some(rs(1)),
        service: Some(current_svc(31022)),
        ..Observed::default()
    }
}

pub fn run(observed: &Observed) -> Plan {
    let c = config();
    plan(&c, &Desired::from_config(&c), observed)
}

/// A ReplicaSet `ensure` created when the Service `service_uid` and the bare pod `pod_uid`
/// existed (empty: none).
pub fn recorded_rs(service_uid: &str, pod_uid: &str) -> ReplicaSet {
    let mut rs = rs(1);
    rs.metadata.creation_timestamp = Some(typed(json!("2026-11-30T10:00:00Z")));
    rs.metadata.annotations = Some(BTreeMap::from([
        (
            crate::objects::FOUND_SERVICE_ANNOTATION.to_owned(),
            service_uid.to_owned(),
        ),
        (
            crate::objects::FOUND_POD_ANNOTATION.to_owned(),
            pod_uid.to_owned(),
        ),
    ]));
    rs
}

/// The Service as `ensure` creates it: with jumppod's annotation.
pub fn ours(mut svc: Service) -> Service {
    svc.metadata.annotations = Some(BTreeMap::from([(
        crate::objects::CREATED_BY_ANNOTATION.to_owned(),
        crate::objects::CREATED_BY.to_owned(),
    )]));
    svc
}
