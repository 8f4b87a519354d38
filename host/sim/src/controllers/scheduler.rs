//! The scheduler: binds pending pods to nodes by requests against allocatable, pod count,
//! nodeSelector and taints, or marks them Unschedulable with the scheduler's message.

use super::pod_state::{is_active, phase, set_condition};
use super::pods_def;
use crate::meta::{meta_str, now_rfc3339};
use crate::quantity;
use crate::store::State;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Instant;

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

pub(super) fn schedule(st: &mut State) {
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

pub(super) fn schedule_pods(
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
