//! Service addresses: clusterIP assignment and NodePorts, unique cluster-wide in
//! 30000-32767, released when the Service goes.
use super::State;
use crate::errors::{ErrKind, FieldError};
use rand::Rng;
use serde_json::{Value, json};
use std::collections::BTreeSet;

const NODE_PORT_MIN: i64 = 30000;
const NODE_PORT_MAX: i64 = 32767;
/// The start of the band the allocator picks from first. Since ServiceNodePortStaticSubrange
/// (GA in 1.29) the range's lower part, `min(max(16, size/32), 128)` ports (86 of 30000-32767),
/// is left to Services that ask for a port by number, and allocation picks at random above it;
/// only when that band is full does it pick from below.
const NODE_PORT_DYNAMIC_MIN: i64 = NODE_PORT_MIN + static_band(NODE_PORT_MAX - NODE_PORT_MIN + 1);

const _: () = assert!(NODE_PORT_DYNAMIC_MIN == 30086);

const fn static_band(size: i64) -> i64 {
    if size < 16 {
        0
    } else if size / 32 < 16 {
        16
    } else if size / 32 > 128 {
        128
    } else {
        size / 32
    }
}

impl State {
    /// Checks and assigns the Service's clusterIP and nodePorts. `old` ports stay theirs.
    pub(super) fn allocate_service(
        &mut self,
        svc: &mut Value,
        old: Option<&Value>,
    ) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let old_ports: Vec<i64> = old.map(node_ports).unwrap_or_default();
        let ty = svc
            .pointer("/spec/type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_string();
        let wants_node_port = ty == "NodePort" || ty == "LoadBalancer";
        let mut taken_here = BTreeSet::new();
        let ports = svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut new_ports = Vec::new();
        for (i, mut p) in ports.into_iter().enumerate() {
            let field = format!("spec.ports[{i}].nodePort");
            match p.get("nodePort").and_then(Value::as_i64) {
                Some(np) if np != 0 => {
                    if !wants_node_port {
                        errs.push(FieldError {
                            kind: ErrKind::Forbidden,
                            field,
                            value: String::new(),
                            detail: "may not be used when `type` is 'ClusterIP'".into(),
                        });
                    } else if !(NODE_PORT_MIN..=NODE_PORT_MAX).contains(&np) {
                        errs.push(FieldError::invalid(
                            field,
                            np.to_string(),
                            format!(
                                "provided port is not in the valid range. The range of valid ports is {NODE_PORT_MIN}-{NODE_PORT_MAX}"
                            ),
                        ));
                    } else if (self.node_ports.contains(&np) && !old_ports.contains(&np))
                        || !taken_here.insert(np)
                    {
                        errs.push(FieldError::invalid(
                            field,
                            np.to_string(),
                            "provided port is already allocated",
                        ));
                    }
                }
                _ if wants_node_port => {
                    let port = p.get("port").and_then(Value::as_i64);
                    let reuse = old.and_then(|o| {
                        o.pointer("/spec/ports")?
                            .as_array()?
                            .iter()
                            .find(|op| op.get("port").and_then(Value::as_i64) == port)?
                            .get("nodePort")?
                            .as_i64()
                    });
                    let np = match reuse.filter(|r| !taken_here.contains(r)) {
                        Some(r) => r,
                        None => match self.next_node_port(&taken_here) {
                            Some(np) => np,
                            None => {
                                errs.push(FieldError::invalid(field, "0", "range is full"));
                                continue;
                            }
                        },
                    };
                    taken_here.insert(np);
                    p["nodePort"] = json!(np);
                }
                _ => {}
            }
            new_ports.push(p);
        }
        if errs.is_empty() {
            if !new_ports.is_empty() {
                svc["spec"]["ports"] = Value::Array(new_ports);
            }
            for p in old_ports {
                self.node_ports.remove(&p);
            }
            self.node_ports.extend(taken_here);
            let ip = svc
                .pointer("/spec/clusterIP")
                .and_then(Value::as_str)
                .unwrap_or("");
            if ip.is_empty() {
                let ip = match old
                    .and_then(|o| o.pointer("/spec/clusterIP"))
                    .and_then(Value::as_str)
                {
                    Some(ip) if !ip.is_empty() => ip.to_string(),
                    _ => {
                        let n = self.next_cluster_ip;
                        self.next_cluster_ip += 1;
                        format!("10.96.{}.{}", n / 250, n % 250 + 1)
                    }
                };
                svc["spec"]["clusterIP"] = json!(ip);
                svc["spec"]["clusterIPs"] = json!([ip]);
            }
        }
        errs
    }
}

impl State {
    /// A free NodePort at random, from the dynamic band first, as the real allocator picks.
    fn next_node_port(&self, taken_here: &BTreeSet<i64>) -> Option<i64> {
        let taken = |c: &i64| self.node_ports.contains(c) || taken_here.contains(c);
        let mut rng = rand::rng();
        for band in [
            NODE_PORT_DYNAMIC_MIN..=NODE_PORT_MAX,
            NODE_PORT_MIN..=NODE_PORT_DYNAMIC_MIN - 1,
        ] {
            // Random tries, then a walk once the band is nearly full.
            for _ in 0..64 {
                let c = rng.random_range(band.clone());
                if !taken(&c) {
                    return Some(c);
                }
            }
            let free: Vec<i64> = band.filter(|c| !taken(c)).collect();
            if !free.is_empty() {
                return Some(free[rng.random_range(0..free.len())]);
            }
        }
        None
    }
}

/// The nodePorts a Service holds.
pub fn node_ports(svc: &Value) -> Vec<i64> {
    svc.pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
        .filter(|p| *p != 0)
        .collect()
}
