//! The object store and the API verbs over it: create, update, patch, delete, with
//! defaulting, admission, validation and allocation on the way.

use crate::errors::{ApiError, FieldError, for_code};
use crate::resources::{self, ResDef};
use crate::{Admission, validate};
use rand::Rng;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Objects of one resource type keyed by (namespace, name); cluster-scoped use "".
pub type Coll = BTreeMap<(String, String), Value>;

const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const NODE_PORT_MIN: i64 = 30000;
const NODE_PORT_MAX: i64 = 32767;

/// Who makes a request and what to report back besides the object.
#[derive(Debug, Default, Clone)]
pub struct Ctx {
    pub user: String,
    pub dry_run: bool,
    pub warnings: Vec<String>,
}

impl Ctx {
    pub fn user(user: &str) -> Self {
        Self {
            user: user.to_string(),
            ..Self::default()
        }
    }
}

/// The whole simulated cluster state.
pub struct State {
    colls: BTreeMap<&'static str, Coll>,
    pub rv: u64,
    node_ports: BTreeSet<i64>,
    next_cluster_ip: u32,
    pub next_pod_ip: u32,
    /// Pods bound to a node, waiting for the kubelet: (due, namespace, name, uid).
    pub kubelet_due: Vec<(Instant, String, String, String)>,
    /// Pods terminating, to be removed when due: (due, namespace, name, uid).
    pub deletion_due: Vec<(Instant, String, String, String)>,
    /// Set when an owner might have gone, so the garbage collector looks.
    pub gc_needed: bool,
    /// Namespaces whose pods or ReplicaSets changed since the ReplicaSet controller looked.
    pub dirty_ns: BTreeSet<String>,
    /// Pods created since the scheduler last looked: (namespace, name).
    pub sched_queue: Vec<(String, String)>,
    /// Set when capacity may have been freed or added: the scheduler retries every pending pod.
    pub capacity_changed: bool,
    /// Requests in use per node, kept by the scheduler; `None` when it must be recomputed.
    pub used_cache: Option<BTreeMap<String, BTreeMap<String, i128>>>,
    pub admission: Option<Arc<dyn Admission>>,
    pub pod_termination: Duration,
    pub kubelet_delay: Duration,
}

pub fn now_rfc3339() -> String {
    rfc3339(chrono::Utc::now())
}

pub fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"].as_object_mut().unwrap()
}

/// The fields of a delete request that the simulator honours.
#[derive(Debug, Default, Clone)]
pub struct DeleteOpts {
    pub propagation: Option<String>,
    pub grace: Option<i64>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl DeleteOpts {
    /// Reads `DeleteOptions` from a JSON body and/or query parameters.
    pub fn parse(body: &Value, query: &BTreeMap<String, String>) -> Self {
        let s = |k: &str| {
            body.get(k)
                .and_then(Value::as_str)
                .map(String::from)
                .or_else(|| query.get(k).cloned())
        };
        Self {
            propagation: s("propagationPolicy"),
            grace: body
                .get("gracePeriodSeconds")
                .and_then(Value::as_i64)
                .or_else(|| query.get("gracePeriodSeconds").and_then(|g| g.parse().ok())),
            uid: body
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(String::from),
            resource_version: body
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(String::from),
        }
    }
}

impl State {
    pub fn new(
        admission: Option<Arc<dyn Admission>>,
        kubelet_delay: Duration,
        pod_termination: Duration,
    ) -> Self {
        let mut s = Self {
            colls: BTreeMap::new(),
            rv: 1000,
            node_ports: BTreeSet::new(),
            next_cluster_ip: 1,
            next_pod_ip: 0,
            kubelet_due: Vec::new(),
            deletion_due: Vec::new(),
            gc_needed: false,
            dirty_ns: BTreeSet::new(),
            sched_queue: Vec::new(),
            capacity_changed: false,
            used_cache: None,
            admission,
            pod_termination,
            kubelet_delay,
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let ns_def = resources::by_name("namespaces").unwrap();
            s.create(
                ns_def,
                None,
                json!({"metadata": {"name": ns}}),
                &mut Ctx::user("system:apiserver"),
            )
            .ok();
        }
        s.create(
            resources::by_name("services").unwrap(),
            Some("default"),
            json!({"metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
                   "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 6443}]}}),
            &mut Ctx::user("system:apiserver"),
        )
        .ok();
        s
    }

    pub fn coll_mut(&mut self, res: &'static ResDef) -> &mut Coll {
        self.colls.entry(res.resource).or_default()
    }

    fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    pub fn get(&self, resource: &str, ns: Option<&str>, name: &str) -> Option<&Value> {
        self.colls
            .get(resource)?
            .get(&(ns.unwrap_or("").to_string(), name.to_string()))
    }

    /// Objects of a resource, in one namespace or all.
    pub fn iter<'a>(
        &'a self,
        resource: &str,
        ns: Option<&'a str>,
    ) -> Box<dyn Iterator<Item = &'a Value> + 'a> {
        let Some(c) = self.colls.get(resource) else {
            return Box::new(std::iter::empty());
        };
        match ns {
            Some(ns) => Box::new(
                c.range((ns.to_string(), String::new())..)
                    .take_while(move |((n, _), _)| n == ns)
                    .map(|(_, v)| v),
            ),
            None => Box::new(c.values()),
        }
    }

    /// Stores an object as-is, bumping its resourceVersion.
    pub fn put_raw(&mut self, res: &'static ResDef, mut obj: Value) -> Value {
        let rv = self.next_rv();
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv));
        let key = (
            meta_str(&obj, "namespace").to_string(),
            meta_str(&obj, "name").to_string(),
        );
        if matches!(res.resource, "pods" | "replicasets") {
            self.dirty_ns.insert(key.0.clone());
        }
        let terminal = matches!(
            obj.pointer("/status/phase").and_then(Value::as_str),
            Some("Failed" | "Succeeded")
        );
        if res.resource == "nodes" || (res.resource == "pods" && terminal) {
            self.capacity_changed = true;
            self.used_cache = None;
        }
        self.coll_mut(res).insert(key, obj.clone());
        obj
    }

    /// Removes an object at once, releasing what it held.
    pub fn remove(&mut self, res: &'static ResDef, ns: &str, name: &str) -> Option<Value> {
        let old = self
            .coll_mut(res)
            .remove(&(ns.to_string(), name.to_string()))?;
        self.rv += 1;
        self.gc_needed = true;
        if matches!(res.resource, "pods" | "replicasets") {
            self.dirty_ns.insert(ns.to_string());
        }
        if matches!(res.resource, "pods" | "nodes") {
            self.capacity_changed = true;
            self.used_cache = None;
        }
        if res.resource == "services" {
            for p in node_ports(&old) {
                self.node_ports.remove(&p);
            }
        }
        if res.resource == "namespaces" {
            let namespaced: Vec<&'static ResDef> = resources::RESOURCES
                .iter()
                .filter(|r| r.namespaced)
                .collect();
            for r in namespaced {
                let names: Vec<String> = self
                    .iter(r.resource, Some(name))
                    .map(|o| meta_str(o, "name").to_string())
                    .collect();
                for n in names {
                    self.remove(r, name, &n);
                }
            }
        }
        Some(old)
    }

    fn namespace_check(&self, res: &ResDef, ns: Option<&str>) -> Result<(), ApiError> {
        if res.namespaced {
            let ns = ns.unwrap_or("");
            if self.get("namespaces", None, ns).is_none() {
                return Err(ApiError::not_found(
                    resources::by_name("namespaces").unwrap(),
                    ns,
                ));
            }
        }
        Ok(())
    }

    fn admit(
        &self,
        res: &ResDef,
        op: &str,
        obj: &mut Value,
        old: Option<&Value>,
        ctx: &mut Ctx,
    ) -> Result<(), ApiError> {
        let Some(adm) = self.admission.as_ref() else {
            return Ok(());
        };
        if !matches!(res.resource, "pods" | "replicasets") {
            return Ok(());
        }
        let kind = json!({"group": res.group, "version": res.version, "kind": res.kind});
        let resource =
            json!({"group": res.group, "version": res.version, "resource": res.resource});
        let opts_kind = if op == "CREATE" {
            "CreateOptions"
        } else {
            "UpdateOptions"
        };
        let req = json!({
            "uid": uuid::Uuid::new_v4().to_string(),
            "kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
            "name": meta_str(obj, "name"), "namespace": meta_str(obj, "namespace"),
            "operation": op,
            "userInfo": {"username": ctx.user, "groups": ["system:authenticated"]},
            "object": obj, "oldObject": old.cloned().unwrap_or(Value::Null),
            "dryRun": ctx.dry_run,
            "options": {"kind": opts_kind, "apiVersion": "meta.k8s.io/v1"},
        });
        let verdict = adm.review(&req);
        ctx.warnings.extend(verdict.warnings.iter().cloned());
        if !verdict.allowed {
            let code = verdict.code.unwrap_or(400);
            let mut e = for_code(code);
            e.message = format!(
                "admission webhook \"{}\" denied the request: {}",
                adm.name(),
                verdict.message.as_deref().unwrap_or("")
            );
            return Err(e);
        }
        if let Some(p) = verdict.patch {
            let patch: json_patch::Patch = serde_json::from_value(p).map_err(|e| {
                ApiError::new(
                    500,
                    "InternalError",
                    format!("Internal error occurred: invalid admission patch: {e}"),
                )
            })?;
            json_patch::patch(obj, &patch).map_err(|e| {
                ApiError::new(
                    500,
                    "InternalError",
                    format!("Internal error occurred: admission patch failed: {e}"),
                )
            })?;
        }
        Ok(())
    }

    fn default_obj(&mut self, res: &ResDef, obj: &mut Value) {
        match res.resource {
            "pods" => {
                if let Some(spec) = obj.get_mut("spec") {
                    validate::default_pod_spec(spec);
                }
            }
            "replicasets" => {
                if obj.pointer("/spec/replicas").is_none()
                    && obj.get("spec").is_some_and(Value::is_object)
                {
                    obj["spec"]["replicas"] = json!(1);
                }
                if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
                    validate::default_pod_spec(spec);
                }
            }
            "services" => {
                if !obj.get("spec").is_some_and(Value::is_object) {
                    obj["spec"] = json!({});
                }
                let spec = obj["spec"].as_object_mut().unwrap();
                spec.entry("type").or_insert(json!("ClusterIP"));
                spec.entry("sessionAffinity").or_insert(json!("None"));
                for p in spec
                    .get_mut("ports")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    if let Some(p) = p.as_object_mut() {
                        p.entry("protocol").or_insert(json!("TCP"));
                        if let Some(port) = p.get("port").cloned() {
                            p.entry("targetPort").or_insert(port);
                        }
                    }
                }
            }
            _ => {}
        }
    }

    fn validate(&self, res: &ResDef, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let name = meta_str(obj, "name");
        let style = match res.resource {
            "namespaces" => "label",
            "services" => "dns1035",
            _ => "subdomain",
        };
        validate::name(name, style, &mut errs);
        validate::labels(
            obj.pointer("/metadata/labels").and_then(Value::as_object),
            "metadata.labels",
            &mut errs,
        );
        match res.resource {
            "pods" => match obj.get("spec") {
                Some(spec) => validate::pod_spec(spec, "spec", &mut errs),
                None => errs.push(FieldError::required("spec.containers", "")),
            },
            "replicasets" => validate::replicaset(obj, &mut errs),
            _ => {}
        }
        errs
    }

    /// Checks and assigns the Service's clusterIP and nodePorts. `old` ports stay theirs.
    fn allocate_service(&mut self, svc: &mut Value, old: Option<&Value>) -> Vec<FieldError> {
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
                            kind: crate::errors::ErrKind::Forbidden,
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
                        None => {
                            let free = (NODE_PORT_MAX - NODE_PORT_MIN + 1) as usize
                                - self.node_ports.len()
                                - taken_here.len();
                            if free == 0 {
                                errs.push(FieldError::invalid(field, "0", "range is full"));
                                continue;
                            }
                            let mut rng = rand::rng();
                            loop {
                                let c = rng.random_range(NODE_PORT_MIN..=NODE_PORT_MAX);
                                if !self.node_ports.contains(&c) && !taken_here.contains(&c) {
                                    break c;
                                }
                            }
                        }
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
        self.admit(res, "CREATE", &mut obj, None, ctx)?;
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
        let key_ns = if res.namespaced {
            ns.unwrap_or("default")
        } else {
            ""
        };
        if self.get(res.resource, Some(key_ns), &name).is_some() {
            return Err(ApiError::already_exists(res, &name));
        }
        if ctx.dry_run {
            return Ok(obj);
        }
        if res.resource == "services" {
            let errs = self.allocate_service(&mut obj, None);
            if !errs.is_empty() {
                return Err(ApiError::invalid(res, &name, &errs));
            }
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

    /// PUT (and the tail of PATCH): replaces the object or its status.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &mut self,
        res: &'static ResDef,
        ns: Option<&str>,
        name: &str,
        sub: Option<&str>,
        mut new: Value,
        require_rv: bool,
        ctx: &mut Ctx,
    ) -> Result<Value, ApiError> {
        let key_ns = if res.namespaced {
            ns.unwrap_or("default")
        } else {
            ""
        };
        let Some(old) = self.get(res.resource, Some(key_ns), name).cloned() else {
            return Err(ApiError::not_found(res, name));
        };
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        let body_name = meta_str(&new, "name");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let rv = meta_str(&new, "resourceVersion").to_string();
        if rv.is_empty() && require_rv {
            let e = FieldError::invalid(
                "metadata.resourceVersion",
                "0x0",
                "must be specified for an update",
            );
            return Err(ApiError::invalid(res, name, &[e]));
        }
        if !rv.is_empty() && rv != meta_str(&old, "resourceVersion") {
            return Err(ApiError::conflict(res, name));
        }
        if sub == Some("status") {
            let mut merged = old.clone();
            merged["status"] = new.get("status").cloned().unwrap_or(Value::Null);
            new = merged;
        } else if let Some(sub) = sub {
            return Err(ApiError::new(
                404,
                "NotFound",
                format!("the server could not find the requested resource ({sub})"),
            ));
        } else if res.has_status() {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    new.as_object_mut().unwrap().remove("status");
                }
            }
        }
        new["kind"] = json!(res.kind);
        new["apiVersion"] = json!(res.api_version());
        {
            let om = old
                .get("metadata")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let meta = meta_mut(&mut new);
            meta.insert("name".into(), json!(name));
            for f in [
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match om.get(f) {
                    Some(v) => meta.insert(f.into(), v.clone()),
                    None => meta.remove(f),
                };
            }
        }
        if sub.is_none() {
            self.default_obj(res, &mut new);
            self.admit(res, "UPDATE", &mut new, Some(&old), ctx)?;
            let errs = self.validate(res, &new);
            if !errs.is_empty() {
                return Err(ApiError::invalid(res, name, &errs));
            }
        }
        let mut cmp_old = old.clone();
        meta_mut(&mut cmp_old).remove("resourceVersion");
        meta_mut(&mut new).remove("resourceVersion");
        if cmp_old == new || ctx.dry_run {
            let mut out = new;
            meta_mut(&mut out).insert(
                "resourceVersion".into(),
                old["metadata"]["resourceVersion"].clone(),
            );
            return Ok(out);
        }
        if res.resource == "services" && sub.is_none() {
            let errs = self.allocate_service(&mut new, Some(&old));
            if !errs.is_empty() {
                return Err(ApiError::invalid(res, name, &errs));
            }
        }
        if res.resource == "replicasets" && sub.is_none() && old.get("spec") != new.get("spec") {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        let finalizers_empty = new
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        let had_finalizers = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        // The last finalizer going lets a deleted object go (a terminating pod without
        // finalizers waits for its termination instead).
        if finalizers_empty
            && !meta_str(&new, "deletionTimestamp").is_empty()
            && (res.resource != "pods" || had_finalizers)
        {
            self.remove(res, key_ns, name);
            return Ok(new);
        }
        Ok(self.put_raw(res, new))
    }

    /// PATCH with one of the four patch content types.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        res: &'static ResDef,
        ns: Option<&str>,
        name: &str,
        sub: Option<&str>,
        content_type: &str,
        body: &[u8],
        ctx: &mut Ctx,
    ) -> Result<Value, ApiError> {
        let ct = content_type.split(';').next().unwrap_or("").trim();
        let unsupported = || {
            ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: \
                     application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml \
                     (got {ct:?})"
                ),
            )
        };
        let key_ns = if res.namespaced {
            ns.unwrap_or("default")
        } else {
            ""
        };
        let existing = self.get(res.resource, Some(key_ns), name).cloned();
        let patch: Value = serde_json::from_slice(body).map_err(|e| match ct {
            "application/apply-patch+yaml" => unsupported(),
            _ => ApiError::bad_request(format!("error decoding patch: {e}")),
        })?;
        let Some(mut obj) = existing else {
            if ct == "application/apply-patch+yaml" && sub.is_none() {
                let mut obj = patch;
                meta_mut(&mut obj).insert("name".into(), json!(name));
                return self.create(res, ns, obj, ctx);
            }
            return Err(ApiError::not_found(res, name));
        };
        match ct {
            "application/json-patch+json" => {
                let p: json_patch::Patch = serde_json::from_value(patch)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
                json_patch::patch(&mut obj, &p).map_err(|e| {
                    ApiError::new(
                        422,
                        "Invalid",
                        format!(
                            "the server rejected our request due to an error in our request: {e}"
                        ),
                    )
                })?;
            }
            "application/merge-patch+json"
            | "application/strategic-merge-patch+json"
            | "application/apply-patch+yaml" => {
                json_patch::merge(&mut obj, &patch);
            }
            _ => return Err(unsupported()),
        }
        self.update(res, ns, name, sub, obj, false, ctx)
    }

    /// DELETE of one object. Pods terminate (deletionTimestamp) and go after the configured
    /// termination delay; everything else goes at once. Returns the object as last seen.
    pub fn delete(
        &mut self,
        res: &'static ResDef,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOpts,
        ctx: &mut Ctx,
    ) -> Result<Value, ApiError> {
        let key_ns = if res.namespaced {
            ns.unwrap_or("default")
        } else {
            ""
        };
        let Some(mut obj) = self.get(res.resource, Some(key_ns), name).cloned() else {
            return Err(ApiError::not_found(res, name));
        };
        if let Some(uid) = &opts.uid
            && uid != meta_str(&obj, "uid")
        {
            let mut e = ApiError::conflict(res, name);
            e.message = format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta_str(&obj, "uid")
            );
            return Err(e);
        }
        if let Some(rv) = &opts.resource_version
            && rv != meta_str(&obj, "resourceVersion")
        {
            let mut e = ApiError::conflict(res, name);
            e.message = format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta_str(&obj, "resourceVersion")
            );
            return Err(e);
        }
        if ctx.dry_run {
            return Ok(obj);
        }
        let now = chrono::Utc::now();
        if res.resource == "pods" {
            let grace = opts
                .grace
                .or_else(|| {
                    obj.pointer("/spec/terminationGracePeriodSeconds")
                        .and_then(Value::as_i64)
                })
                .unwrap_or(30)
                .max(0);
            if !meta_str(&obj, "deletionTimestamp").is_empty() && opts.grace != Some(0) {
                return Ok(obj);
            }
            let meta = meta_mut(&mut obj);
            meta.insert(
                "deletionTimestamp".into(),
                json!(rfc3339(now + chrono::Duration::seconds(grace))),
            );
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            let bound = obj
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some();
            let phase = obj
                .pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or("");
            let terminal = phase == "Succeeded" || phase == "Failed";
            let has_finalizers = obj
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|f| !f.is_empty());
            if !has_finalizers
                && (grace == 0 || !bound || terminal || self.pod_termination.is_zero())
            {
                self.remove(res, key_ns, name);
                return Ok(obj);
            }
            let obj = self.put_raw(res, obj);
            if !has_finalizers {
                let uid = meta_str(&obj, "uid").to_string();
                self.deletion_due.push((
                    Instant::now() + self.pod_termination,
                    key_ns.into(),
                    name.into(),
                    uid,
                ));
            }
            return Ok(obj);
        }
        meta_mut(&mut obj).insert("deletionTimestamp".into(), json!(rfc3339(now)));
        if obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty())
        {
            return Ok(self.put_raw(res, obj));
        }
        let uid = meta_str(&obj, "uid").to_string();
        match opts.propagation.as_deref() {
            Some("Orphan") => self.orphan_dependents(&uid),
            Some("Foreground") => self.delete_dependents(&uid),
            _ => {}
        }
        self.remove(res, key_ns, name);
        if res.resource == "namespaces" {
            obj["status"]["phase"] = json!("Terminating");
        }
        Ok(obj)
    }

    fn dependents(&self, uid: &str) -> Vec<(&'static ResDef, String, String)> {
        let mut out = Vec::new();
        for r in resources::RESOURCES {
            for o in self.iter(r.resource, None) {
                let owned = o
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|refs| {
                        refs.iter()
                            .any(|x| x.get("uid").and_then(Value::as_str) == Some(uid))
                    });
                if owned {
                    out.push((
                        r,
                        meta_str(o, "namespace").to_string(),
                        meta_str(o, "name").to_string(),
                    ));
                }
            }
        }
        out
    }

    fn orphan_dependents(&mut self, uid: &str) {
        for (r, ns, name) in self.dependents(uid) {
            let mut o = self.get(r.resource, Some(&ns), &name).cloned().unwrap();
            if let Some(refs) = o
                .pointer_mut("/metadata/ownerReferences")
                .and_then(Value::as_array_mut)
            {
                refs.retain(|x| x.get("uid").and_then(Value::as_str) != Some(uid));
                if refs.is_empty() {
                    meta_mut(&mut o).remove("ownerReferences");
                }
            }
            self.put_raw(r, o);
        }
    }

    fn delete_dependents(&mut self, uid: &str) {
        for (r, ns, name) in self.dependents(uid) {
            if let Some(o) = self.remove(r, &ns, &name) {
                let child = meta_str(&o, "uid").to_string();
                self.delete_dependents(&child);
            }
        }
    }

    /// Inserts an object as given (kind and apiVersion pick the collection), filling the
    /// system metadata it lacks and keeping its status.
    pub fn seed(&mut self, mut obj: Value) -> Result<Value, String> {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let res = resources::by_kind(api_version, kind)
            .ok_or_else(|| format!("unknown kind {api_version}/{kind}"))?;
        let meta = meta_mut(&mut obj);
        if res.namespaced {
            meta.entry("namespace").or_insert(json!("default"));
        }
        meta.entry("uid")
            .or_insert_with(|| json!(uuid::Uuid::new_v4().to_string()));
        meta.entry("creationTimestamp")
            .or_insert_with(|| json!(now_rfc3339()));
        if res.resource == "services" {
            self.node_ports.extend(node_ports(&obj));
        }
        if res.resource == "replicasets" {
            meta_mut(&mut obj).entry("generation").or_insert(json!(1));
        }
        if res.resource == "pods" && obj.pointer("/status/phase").is_none() {
            let qos = obj
                .get("spec")
                .map(validate::qos_class)
                .unwrap_or("BestEffort");
            obj["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        if res.resource == "pods" {
            let key = (
                meta_str(&obj, "namespace").into(),
                meta_str(&obj, "name").into(),
            );
            self.sched_queue.push(key);
            self.used_cache = None;
        }
        if res.resource == "pods"
            && obj.pointer("/spec/nodeName").is_some()
            && obj.pointer("/status/phase").and_then(Value::as_str) == Some("Pending")
        {
            self.kubelet_due.push((
                Instant::now() + self.kubelet_delay,
                meta_str(&obj, "namespace").into(),
                meta_str(&obj, "name").into(),
                meta_str(&obj, "uid").into(),
            ));
        }
        Ok(self.put_raw(res, obj))
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
