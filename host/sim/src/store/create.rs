//! POST: the full create path (defaulting, admission, generated names, validation,
//! allocation, initial status).
use super::State;
use super::services::node_ports;
use crate::admission;
use crate::errors::{ApiError, FieldError};
use crate::meta::{meta_mut, meta_str, now_rfc3339};
use crate::request::Ctx;
use crate::resources::ResDef;
use crate::validate;
use rand::Rng;
use serde_json::{Value, json};
use std::time::Instant;

const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// `names.MaxGeneratedNameLength`: 63 minus the 5 random characters.
const MAX_GENERATED_PREFIX: usize = 58;

impl State {
    /// POST: the full create path.
    pub fn create(
        &mut self,
        res: &'static ResDef,
        ns: Option<&str>,
        mut obj: Value,
        ctx: &mut Ctx,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        obj["kind"] = json!(res.kind);
        obj["apiVersion"] = json!(res.api_version());
        let meta = meta_mut(&mut obj);
        if res.namespaced {
            let ns = ns.unwrap_or("default");
            match meta.get("namespace").and_then(Value::as_str) {
                Some(n) if !n.is_empty() && n != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    meta.insert("namespace".into(), json!(ns));
                }
            }
        } else {
            meta.remove("namespace");
        }
        for f in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            meta.remove(f);
        }
        self.namespace_check(res, ns)?;
        self.default_obj(res, &mut obj);
        admission::admit(
            self.admission.as_deref(),
            res,
            "CREATE",
            &mut obj,
            None,
            ctx,
        )?;
        let meta = meta_mut(&mut obj);
        if meta
            .get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            let Some(prefix) = meta
                .get("generateName")
                .and_then(Value::as_str)
                .map(String::from)
            else {
                let e = FieldError::required("metadata.name", "name or generateName is required");
                return Err(ApiError::invalid(res, "", &[e]));
            };
            // The API server's name generator keeps at most 58 characters of the prefix, so a
            // generated name has at most 63 (k8s.io/apiserver pkg/storage/names).
            let prefix: String = prefix.chars().take(MAX_GENERATED_PREFIX).collect();
            let mut rng = rand::rng();
            let name = loop {
                let suffix: String = (0..5)
                    .map(|_| NAME_CHARS[rng.random_range(0..NAME_CHARS.len())] as char)
                    .collect();
                let cand = format!("{prefix}{suffix}");
                if self
                    .get(res.resource, ns.filter(|_| res.namespaced), &cand)
                    .is_none()
                {
                    break cand;
                }
            };
            meta_mut(&mut obj).insert("name".into(), json!(name));
        }
        let name = meta_str(&obj, "name").to_string();
        let errs = self.validate(res, &obj);
        if !errs.is_empty() {
            return Err(ApiError::invalid(res, &name, &errs));
        }
        let key_ns = Self::key_ns(res, ns);
        if res.resource == "pods" {
            self.limit_ranges_admit(key_ns, &name, &obj)?;
        }
        let exists = self.get(res.resource, Some(key_ns), &name).is_some();
        // The service registry allocates NodePorts in its BeginCreate hook, before storage
        // finds the name taken (k8s.io/kubernetes pkg/registry/core/service/storage): a
        // Service created again on the NodePort the existing one holds is refused with 422
        // "provided port is already allocated", not 409 AlreadyExists. The real control plane
        // showed it (two hosts racing through the upgrade).
        if res.resource == "services" && !ctx.dry_run {
            let errs = self.allocate_service(&mut obj, None);
            if !errs.is_empty() {
                return Err(ApiError::invalid(res, &name, &errs));
            }
            if exists {
                for p in node_ports(&obj) {
                    self.node_ports.remove(&p);
                }
                return Err(ApiError::already_exists(res, &name));
            }
        }
        if exists {
            return Err(ApiError::already_exists(res, &name));
        }
        if ctx.dry_run {
            return Ok(obj);
        }
        let meta = meta_mut(&mut obj);
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        match res.resource {
            "replicasets" => {
                meta.insert("generation".into(), json!(1));
                obj["status"] = json!({"replicas": 0});
            }
            "pods" => {
                let qos = validate::qos_class(&obj["spec"]);
                obj["status"] = json!({"phase": "Pending", "qosClass": qos});
                if obj
                    .pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .is_some()
                {
                    let uid = meta_str(&obj, "uid").to_string();
                    self.kubelet_due.push((
                        Instant::now() + self.kubelet_delay,
                        key_ns.into(),
                        name.clone(),
                        uid,
                    ));
                    self.used_cache = None;
                } else {
                    self.sched_queue.push((key_ns.to_string(), name.clone()));
                }
            }
            "namespaces" => {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                obj["status"] = json!({"phase": "Active"});
                meta_mut(&mut obj)
                    .entry("labels")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .map(|l| l.insert("kubernetes.io/metadata.name".into(), json!(name)));
            }
            "services" => {
                obj["status"] = json!({"loadBalancer": {}});
            }
            _ => {}
        }
        Ok(self.put_raw(res, obj))
    }
}
