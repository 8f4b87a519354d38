//! The kubelet: reports bound pods Running and Ready after the configured delay, finishes
//! graceful terminations, and reports phases and evictions on demand.

use super::pod_state::{phase, set_condition};
use super::pods_def;
use crate::meta::{meta_str, now_rfc3339};
use crate::store::State;
use serde_json::{Value, json};
use std::time::Instant;

pub(super) fn finish_terminations(st: &mut State) {
    let now = Instant::now();
    let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut st.deletion_due)
        .into_iter()
        .partition(|d| d.0 <= now);
    st.deletion_due = later;
    for (_, ns, name, uid) in due {
        if st
            .get("pods", Some(&ns), &name)
            .is_some_and(|p| meta_str(p, "uid") == uid)
        {
            st.remove(pods_def(), &ns, &name);
        }
    }
}

pub(super) fn kubelet(st: &mut State) {
    let now = Instant::now();
    let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut st.kubelet_due)
        .into_iter()
        .partition(|d| d.0 <= now);
    st.kubelet_due = later;
    for (_, ns, name, uid) in due {
        let Some(pod) = st.get("pods", Some(&ns), &name).cloned() else {
            continue;
        };
        if meta_str(&pod, "uid") != uid || phase(&pod) != "Pending" {
            continue;
        }
        let node = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let Some(node_obj) = st.get("nodes", None, &node) else {
            continue;
        };
        let host_ip = node_obj
            .pointer("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|x| x["type"] == "InternalIP"))
            .and_then(|x| x["address"].as_str())
            .unwrap_or("10.0.0.1")
            .to_string();
        st.next_pod_ip += 1;
        let n = st.next_pod_ip;
        let pod_ip = format!("10.244.{}.{}", n / 250, n % 250 + 1);
        let pod = match unpullable_image(&pod) {
            Some(image) => pull_backed_off(pod, &host_ip, &image),
            None => running(pod, &host_ip, &pod_ip),
        };
        st.put_raw(pods_def(), pod);
    }
}

/// The first container image of `pod` whose registry cannot be reached: a host under
/// `.invalid` (RFC 2606), whose name lookup fails everywhere, as a test's way to make the
/// kubelet fail to pull on demand.
fn unpullable_image(pod: &Value) -> Option<String> {
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array)?;
    containers
        .iter()
        .filter_map(|c| c["image"].as_str())
        .find(|image| registry_host(image).is_some_and(|h| h.ends_with(".invalid")))
        .map(str::to_owned)
}

/// The registry host of an image reference (`host[:port]/path`), if it names one.
fn registry_host(image: &str) -> Option<&str> {
    let (first, _) = image.split_once('/')?;
    let host = first.split(':').next().unwrap_or(first);
    (host.contains('.') || host == "localhost").then_some(host)
}

/// What the kubelet reports while it backs off pulling `image`: the pod stays Pending, the
/// container waits with ImagePullBackOff and the runtime's error, the pod is not Ready.
fn pull_backed_off(mut pod: Value, host_ip: &str, image: &str) -> Value {
    let now = now_rfc3339();
    let host = registry_host(image).unwrap_or(image);
    let message = format!(
        "Back-off pulling image \"{image}\": ErrImagePull: failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": dial tcp: lookup {host}: no such host"
    );
    let names: Vec<String> = container_names(&pod);
    let unready = format!("containers with unready status: [{}]", names.join(" "));
    set_condition(
        &mut pod,
        "PodReadyToStartContainers",
        "True",
        None,
        None,
        &now,
    );
    set_condition(&mut pod, "Initialized", "True", None, None, &now);
    for ty in ["ContainersReady", "Ready"] {
        set_condition(
            &mut pod,
            ty,
            "False",
            Some("ContainersNotReady"),
            Some(&unready),
            &now,
        );
    }
    let waiting = json!({"waiting": {"reason": "ImagePullBackOff", "message": message}});
    let mut cs = container_statuses(&pod, waiting, false);
    // A container that never started has no container and no image yet.
    for c in &mut cs {
        c["imageID"] = json!("");
        if let Some(c) = c.as_object_mut() {
            c.remove("containerID");
        }
    }
    let status = pod["status"].as_object_mut().unwrap();
    status.insert("phase".into(), json!("Pending"));
    status.insert("hostIP".into(), json!(host_ip));
    status.insert("hostIPs".into(), json!([{"ip": host_ip}]));
    status.insert("startTime".into(), json!(now));
    status.insert("containerStatuses".into(), Value::Array(cs));
    pod
}

fn container_names(pod: &Value) -> Vec<String> {
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect()
}

fn container_statuses(pod: &Value, state: Value, ready: bool) -> Vec<Value> {
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let image = c.get("image").cloned().unwrap_or(json!(""));
            json!({"name": c["name"], "image": image, "imageID": format!("{}@sha256:0", image.as_str().unwrap_or("")),
                "containerID": format!("containerd://{}", uuid::Uuid::new_v4().simple()),
                "ready": ready, "started": ready, "restartCount": 0, "state": state})
        })
        .collect()
}

fn running(mut pod: Value, host_ip: &str, pod_ip: &str) -> Value {
    let now = now_rfc3339();
    for ty in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodScheduled",
    ] {
        set_condition(&mut pod, ty, "True", None, None, &now);
    }
    let cs = container_statuses(&pod, json!({"running": {"startedAt": now}}), true);
    let status = pod["status"].as_object_mut().unwrap();
    status.insert("phase".into(), json!("Running"));
    status.insert("hostIP".into(), json!(host_ip));
    status.insert("hostIPs".into(), json!([{"ip": host_ip}]));
    status.insert("podIP".into(), json!(pod_ip));
    status.insert("podIPs".into(), json!([{"ip": pod_ip}]));
    status.insert("startTime".into(), json!(now));
    status.insert("containerStatuses".into(), Value::Array(cs));
    pod
}

/// The pod with the given phase, as the kubelet would report it.
pub fn with_phase(mut pod: Value, phase: &str) -> Value {
    let now = now_rfc3339();
    if !pod.get("status").is_some_and(Value::is_object) {
        pod["status"] = json!({});
    }
    pod["status"]["phase"] = json!(phase);
    if matches!(phase, "Succeeded" | "Failed") {
        let (code, reason) = if phase == "Succeeded" {
            (0, "Completed")
        } else {
            (1, "Error")
        };
        let state = json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": now, "finishedAt": now}});
        let cs = container_statuses(&pod, state, false);
        pod["status"]["containerStatuses"] = Value::Array(cs);
        let reason = if phase == "Succeeded" {
            "PodCompleted"
        } else {
            "PodFailed"
        };
        set_condition(&mut pod, "Ready", "False", Some(reason), None, &now);
        set_condition(
            &mut pod,
            "ContainersReady",
            "False",
            Some(reason),
            None,
            &now,
        );
    } else if phase == "Running" {
        let host_ip = pod
            .pointer("/status/hostIP")
            .and_then(Value::as_str)
            .unwrap_or("10.0.0.1")
            .to_string();
        let pod_ip = pod
            .pointer("/status/podIP")
            .and_then(Value::as_str)
            .unwrap_or("10.244.250.1")
            .to_string();
        pod = running(pod, &host_ip, &pod_ip);
    }
    pod
}

/// The pod as the kubelet leaves it after evicting it for memory pressure.
pub fn evicted(pod: Value) -> Value {
    let container = pod
        .pointer("/spec/containers/0/name")
        .and_then(Value::as_str)
        .unwrap_or("main")
        .to_string();
    let mut pod = with_phase(pod, "Failed");
    let now = now_rfc3339();
    pod["status"]["reason"] = json!("Evicted");
    pod["status"]["message"] = json!(format!(
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
         Container {container} was using 900Mi, request is 0, has larger consumption of memory. "
    ));
    set_condition(
        &mut pod,
        "DisruptionTarget",
        "True",
        Some("TerminationByKubelet"),
        Some("The node was low on resource: memory."),
        &now,
    );
    for cs in pod
        .pointer_mut("/status/containerStatuses")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        cs["state"] = json!({"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown", "startedAt": now, "finishedAt": now}});
    }
    pod
}
