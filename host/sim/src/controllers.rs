//! The controllers: garbage collector, ReplicaSet controller, scheduler and kubelet.
//! Each pass runs under the state lock; passes repeat until nothing changes.

use crate::Inner;
use crate::quantity;
use crate::resources::{self, ResDef};
use crate::selector::LabelSelector;
use crate::store::{Ctx, DeleteOpts, State, meta_str, now_rfc3339};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

const RS_CONTROLLER: &str = "system:serviceaccount:kube-system:replicaset-controller";
/// `settle` waits for due kubelet/termination work only within this horizon.
const SETTLE_HORIZON: Duration = Duration::from_secs(5);

fn pods_def() -> &'static ResDef {
    resources::by_name("pods").unwrap()
}

/// Background loop: a pass whenever something changed or work falls due.
pub async fn run_background(inner: Arc<Inner>, mut shutdown: watch::Receiver<bool>) {
    loop {
        run_until_quiet(&inner);
        let next = next_due(&inner.state(), None);
        let sleep = async {
            match next {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = inner.notify.notified() => {}
            _ = sleep => {}
            _ = shutdown.changed() => return,
        }
    }
}

fn next_due(st: &State, horizon: Option<Instant>) -> Option<Instant> {
    st.kubelet_due
        .iter()
        .map(|d| d.0)
        .chain(st.deletion_due.iter().map(|d| d.0))
        .filter(|d| horizon.is_none_or(|h| *d <= h))
        .min()
}

/// Runs passes until one changes nothing; returns when more work falls due soon.
pub fn run_until_quiet(inner: &Inner) -> Option<Instant> {
    let mut st = inner.state();
    for _ in 0..1000 {
        let before = st.rv;
        pass(&mut st, inner.pod_gc);
        if st.rv == before {
            break;
        }
    }
    next_due(&st, Some(Instant::now() + SETTLE_HORIZON))
}

fn pass(st: &mut State, pod_gc: bool) {
    finish_terminations(st);
    if st.gc_needed {
        st.gc_needed = false;
        garbage_collect(st);
    }
    if pod_gc {
        gc_failed(st);
    }
    replicasets(st);
    schedule(st);
    kubelet(st);
}

fn finish_terminations(st: &mut State) {
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

/// Deletes objects all of whose owners are gone.
fn garbage_collect(st: &mut State) {
    let uids: HashSet<String> = resources::RESOURCES
        .iter()
        .flat_map(|r| st.iter(r.resource, None))
        .map(|o| meta_str(o, "uid").to_string())
        .collect();
    let mut doomed = Vec::new();
    for r in resources::RESOURCES {
        for o in st.iter(r.resource, None) {
            let Some(refs) = o
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
            else {
                continue;
            };
            let live = refs.iter().any(|x| {
                x.get("uid")
                    .and_then(Value::as_str)
                    .is_some_and(|u| uids.contains(u))
            });
            if !refs.is_empty() && !live {
                doomed.push((
                    r,
                    meta_str(o, "namespace").to_string(),
                    meta_str(o, "name").to_string(),
                ));
            }
        }
    }
    for (r, ns, name) in doomed {
        let opts = DeleteOpts {
            propagation: Some("Background".into()),
            ..DeleteOpts::default()
        };
        let _ = st.delete(
            r,
            Some(&ns),
            &name,
            &opts,
            &mut Ctx::user("system:serviceaccount:kube-system:generic-garbage-collector"),
        );
    }
}

/// Removes every Failed pod.
pub fn gc_failed(st: &mut State) {
    let failed: Vec<(String, String)> = st
        .iter("pods", None)
        .filter(|p| phase(p) == "Failed")
        .map(|p| {
            (
                meta_str(p, "namespace").to_string(),
                meta_str(p, "name").to_string(),
            )
        })
        .collect();
    for (ns, name) in failed {
        st.remove(pods_def(), &ns, &name);
    }
}

fn phase(p: &Value) -> &str {
    p.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn is_active(p: &Value) -> bool {
    !matches!(phase(p), "Failed" | "Succeeded") && meta_str(p, "deletionTimestamp").is_empty()
}

fn condition_true(p: &Value, ty: &str) -> bool {
    p.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == ty && c["status"] == "True"))
}

fn controller_uid(p: &Value) -> Option<&str> {
    p.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?
        .get("uid")?
        .as_str()
}

fn replicasets(st: &mut State) {
    for ns in std::mem::take(&mut st.dirty_ns) {
        let rss: Vec<Value> = st.iter("replicasets", Some(&ns)).cloned().collect();
        for rs in rss {
            replicaset(st, &rs);
        }
    }
}

fn replicaset(st: &mut State, rs: &Value) {
    let ns = meta_str(rs, "namespace").to_string();
    let rs_name = meta_str(rs, "name").to_string();
    let uid = meta_str(rs, "uid").to_string();
    let Some(sel) = rs
        .pointer("/spec/selector")
        .and_then(LabelSelector::from_object)
    else {
        return;
    };
    if sel.is_empty() || !meta_str(rs, "deletionTimestamp").is_empty() {
        return;
    }
    let want = rs
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(0) as usize;
    let pods = pods_def();
    let mut owned: Vec<Value> = Vec::new();
    let mut adopt = Vec::new();
    let mut release = Vec::new();
    for p in st.iter("pods", Some(&ns)) {
        let labels = p.pointer("/metadata/labels").and_then(Value::as_object);
        match controller_uid(p) {
            Some(u) if u == uid => {
                if sel.matches(labels) {
                    owned.push(p.clone());
                } else {
                    release.push(p.clone());
                }
            }
            Some(_) => {}
            None => {
                if is_active(p) && sel.matches(labels) {
                    adopt.push(p.clone());
                }
            }
        }
    }
    for mut p in release {
        if let Some(refs) = p
            .pointer_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(&uid));
        }
        st.put_raw(pods, p);
    }
    let owner_ref = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name, "uid": uid,
        "controller": true, "blockOwnerDeletion": true});
    for mut p in adopt {
        let meta = p["metadata"].as_object_mut().unwrap();
        let refs = meta.entry("ownerReferences").or_insert_with(|| json!([]));
        if let Some(a) = refs.as_array_mut() {
            a.push(owner_ref.clone());
        }
        owned.push(st.put_raw(pods, p));
    }
    let mut active: Vec<Value> = owned.iter().filter(|p| is_active(p)).cloned().collect();
    if active.len() < want {
        for _ in active.len()..want {
            let mut pod = json!({
                "metadata": rs.pointer("/spec/template/metadata").cloned().unwrap_or(json!({})),
                "spec": rs.pointer("/spec/template/spec").cloned().unwrap_or(json!({})),
            });
            let meta = pod["metadata"].as_object_mut().unwrap();
            meta.remove("name");
            meta.insert("generateName".into(), json!(format!("{rs_name}-")));
            meta.insert("ownerReferences".into(), json!([owner_ref]));
            match st.create(pods, Some(&ns), pod, &mut Ctx::user(RS_CONTROLLER)) {
                Ok(p) => active.push(p),
                Err(_) => break,
            }
        }
    } else if active.len() > want {
        // Delete the least useful first: unassigned, pending, not ready, newest.
        let rank = |p: &Value| {
            (
                p.pointer("/spec/nodeName").is_some(),
                match phase(p) {
                    "Pending" => 0,
                    "Unknown" => 1,
                    _ => 2,
                },
                condition_true(p, "Ready"),
                std::cmp::Reverse(meta_str(p, "creationTimestamp").to_string()),
            )
        };
        active.sort_by_key(rank);
        let surplus: Vec<Value> = active.drain(..active.len() - want).collect();
        for p in surplus {
            let _ = st.delete(
                pods,
                Some(&ns),
                meta_str(&p, "name"),
                &DeleteOpts::default(),
                &mut Ctx::user(RS_CONTROLLER),
            );
        }
    }
    // Status from what is there now.
    let tlabels = rs
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object);
    let tsel =
        LabelSelector::from_object(&json!({"matchLabels": tlabels.cloned().unwrap_or_default()}))
            .unwrap_or_default();
    let current: Vec<&Value> = st
        .iter("pods", Some(&ns))
        .filter(|p| controller_uid(p) == Some(uid.as_str()) && is_active(p))
        .collect();
    let ready = current
        .iter()
        .filter(|p| condition_true(p, "Ready"))
        .count();
    let labeled = current
        .iter()
        .filter(|p| tsel.matches(p.pointer("/metadata/labels").and_then(Value::as_object)))
        .count();
    let status = json!({
        "replicas": current.len(), "fullyLabeledReplicas": labeled, "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": rs.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
    });
    let Some(mut latest) = st.get("replicasets", Some(&ns), &rs_name).cloned() else {
        return;
    };
    if latest.get("status") != Some(&status) {
        latest["status"] = status;
        st.put_raw(resources::by_name("replicasets").unwrap(), latest);
    }
}

fn resource_requests(pod: &Value) -> BTreeMap<String, i128> {
    let mut out = BTreeMap::new();
    for (k, amount) in container_requests(pod, "containers") {
        *out.entry(k).or_insert(0) += amount;
    }
    // Init containers run one at a time: the pod needs the max of them and the sum above.
    for (k, amount) in container_requests(pod, "initContainers") {
        let e = out.entry(k).or_insert(0);
        *e = (*e).max(amount);
    }
    out
}

/// Every `(resource, amount)` request of the containers in `spec.<list>`.
fn container_requests<'a>(pod: &'a Value, list: &str) -> impl Iterator<Item = (String, i128)> + 'a {
    pod["spec"]
        .get(list)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.pointer("/resources/requests").and_then(Value::as_object))
        .flatten()
        .map(|(k, v)| (k.clone(), quantity::amount(k, v).unwrap_or(0)))
}

fn tolerates(pod: &Value, taint: &Value) -> bool {
    let tk = taint.get("key").and_then(Value::as_str).unwrap_or("");
    let tv = taint.get("value").and_then(Value::as_str).unwrap_or("");
    let te = taint.get("effect").and_then(Value::as_str).unwrap_or("");
    pod.pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|t| {
            let key = t.get("key").and_then(Value::as_str).unwrap_or("");
            let op = t.get("operator").and_then(Value::as_str).unwrap_or("Equal");
            let eff = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (eff.is_empty() || eff == te)
                && match op {
                    "Exists" => key.is_empty() || key == tk,
                    _ => key == tk && t.get("value").and_then(Value::as_str).unwrap_or("") == tv,
                }
        })
}

fn schedule(st: &mut State) {
    let wants =
        |p: &Value| p.pointer("/spec/nodeName").is_none() && phase(p) == "Pending" && is_active(p);
    let queue = std::mem::take(&mut st.sched_queue);
    let pending: Vec<Value> = if std::mem::take(&mut st.capacity_changed) {
        st.iter("pods", None)
            .filter(|p| wants(p))
            .cloned()
            .collect()
    } else {
        queue
            .iter()
            .filter_map(|(ns, n)| st.get("pods", Some(ns), n))
            .filter(|p| wants(p))
            .cloned()
            .collect()
    };
    if pending.is_empty() {
        return;
    }
    let nodes: Vec<Value> = st.iter("nodes", None).cloned().collect();
    let mut used = st.used_cache.take().unwrap_or_else(|| used_per_node(st));
    schedule_pods(st, pending, &nodes, &mut used);
    if !st.capacity_changed && st.used_cache.is_none() {
        st.used_cache = Some(used);
    }
}

/// Requests in use per node (plus a `pods` count), over non-terminated pods.
fn used_per_node(st: &State) -> BTreeMap<String, BTreeMap<String, i128>> {
    let mut used: BTreeMap<String, BTreeMap<String, i128>> = BTreeMap::new();
    for p in st.iter("pods", None) {
        if let Some(n) = p.pointer("/spec/nodeName").and_then(Value::as_str)
            && !matches!(phase(p), "Failed" | "Succeeded")
        {
            let u = used.entry(n.to_string()).or_default();
            for (k, v) in resource_requests(p) {
                *u.entry(k).or_insert(0) += v;
            }
            *u.entry("pods".into()).or_insert(0) += 1;
        }
    }
    used
}

fn schedule_pods(
    st: &mut State,
    pending: Vec<Value>,
    nodes: &[Value],
    used: &mut BTreeMap<String, BTreeMap<String, i128>>,
) {
    let pods = pods_def();
    for mut pod in pending {
        let req = resource_requests(&pod);
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut chosen: Option<(String, i128)> = None;
        for node in nodes {
            let name = meta_str(node, "name").to_string();
            let mut why: Vec<String> = Vec::new();
            if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
                why.push("node(s) were unschedulable".into());
            }
            if why.is_empty() {
                for t in node
                    .pointer("/spec/taints")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let eff = t.get("effect").and_then(Value::as_str).unwrap_or("");
                    if (eff == "NoSchedule" || eff == "NoExecute") && !tolerates(&pod, t) {
                        why.push(format!(
                            "node(s) had untolerated taint {{{}: {}}}",
                            t.get("key").and_then(Value::as_str).unwrap_or(""),
                            t.get("value").and_then(Value::as_str).unwrap_or("")
                        ));
                        break;
                    }
                }
            }
            if why.is_empty() {
                let labels = node.pointer("/metadata/labels").and_then(Value::as_object);
                let ok = pod
                    .pointer("/spec/nodeSelector")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
                if !ok {
                    why.push("node(s) didn't match Pod's node affinity/selector".into());
                }
            }
            if why.is_empty() {
                let alloc = node
                    .pointer("/status/allocatable")
                    .and_then(Value::as_object);
                let u = used.get(&name);
                let free = |r: &str| {
                    let total = alloc
                        .and_then(|a| a.get(r))
                        .and_then(|v| quantity::amount(r, v));
                    total.map(|t| t - u.and_then(|u| u.get(r)).copied().unwrap_or(0))
                };
                if free("pods").is_some_and(|f| f < 1) {
                    why.push("Too many pods".into());
                }
                for (r, amount) in &req {
                    if *amount > 0 && free(r).unwrap_or(0) < *amount {
                        why.push(format!("Insufficient {r}"));
                    }
                }
            }
            if why.is_empty() {
                // Prefer the node with the most free cpu (a crude LeastAllocated).
                let alloc_cpu = node
                    .pointer("/status/allocatable/cpu")
                    .and_then(|v| quantity::amount("cpu", v))
                    .unwrap_or(0);
                let free_cpu = alloc_cpu
                    - used
                        .get(&name)
                        .and_then(|u| u.get("cpu"))
                        .copied()
                        .unwrap_or(0);
                if chosen.as_ref().is_none_or(|(_, f)| free_cpu > *f) {
                    chosen = Some((name, free_cpu));
                }
            } else {
                for w in why {
                    *reasons.entry(w).or_insert(0) += 1;
                }
            }
        }
        let now = now_rfc3339();
        if let Some((node, _)) = chosen {
            let u = used.entry(node.clone()).or_default();
            for (k, v) in &req {
                *u.entry(k.clone()).or_insert(0) += v;
            }
            *u.entry("pods".into()).or_insert(0) += 1;
            pod["spec"]["nodeName"] = json!(node);
            set_condition(&mut pod, "PodScheduled", "True", None, None, &now);
            let pod = st.put_raw(pods, pod);
            let delay = st.kubelet_delay;
            st.kubelet_due.push((
                Instant::now() + delay,
                meta_str(&pod, "namespace").into(),
                meta_str(&pod, "name").into(),
                meta_str(&pod, "uid").into(),
            ));
        } else {
            let n = nodes.len();
            let msg = if n == 0 {
                "no nodes available to schedule pods".to_string()
            } else {
                let mut parts: Vec<String> =
                    reasons.iter().map(|(r, c)| format!("{c} {r}")).collect();
                parts.sort();
                format!(
                    "0/{n} nodes are available: {}. preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling.",
                    parts.join(", ")
                )
            };
            let before = pod.clone();
            set_condition(
                &mut pod,
                "PodScheduled",
                "False",
                Some("Unschedulable"),
                Some(&msg),
                &now,
            );
            if pod != before {
                st.put_raw(pods, pod);
            }
        }
    }
}

/// Sets a pod condition, keeping `lastTransitionTime` when the status does not change.
/// A no-op when the condition already reads the same.
fn set_condition(
    pod: &mut Value,
    ty: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
    now: &str,
) {
    if !pod.get("status").is_some_and(Value::is_object) {
        pod["status"] = json!({});
    }
    let conds = pod["status"]
        .as_object_mut()
        .unwrap()
        .entry("conditions")
        .or_insert_with(|| json!([]));
    let Some(conds) = conds.as_array_mut() else {
        return;
    };
    let mut c =
        json!({"type": ty, "status": status, "lastProbeTime": null, "lastTransitionTime": now});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    match conds.iter_mut().find(|x| x["type"] == ty) {
        Some(old) => {
            if old["status"] == status
                && old.get("reason") == c.get("reason")
                && old.get("message") == c.get("message")
            {
                return;
            }
            if old["status"] == status {
                c["lastTransitionTime"] = old["lastTransitionTime"].clone();
            }
            *old = c;
        }
        None => conds.push(c),
    }
}

fn kubelet(st: &mut State) {
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
        let pod = running(pod, &host_ip, &pod_ip);
        st.put_raw(pods_def(), pod);
    }
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
