//! DELETE: preconditions, graceful pod termination, finalizers, and propagation to
//! dependents (Background, Foreground, Orphan).
use super::State;
use crate::errors::ApiError;
use crate::meta::{meta_mut, meta_str, rfc3339};
use crate::request::Ctx;
use crate::resources::{self, ResDef};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Instant;

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
        let key_ns = Self::key_ns(res, ns);
        let Some(mut obj) = self.get(res.resource, Some(key_ns), name).cloned() else {
            return Err(ApiError::not_found(res, name));
        };
        // The registry checks the preconditions in `rest.BeforeDelete`, before storage, and
        // names the object by its kind there (k8s.io/apiserver pkg/registry/rest/delete.go).
        if let Some(uid) = &opts.uid
            && uid != meta_str(&obj, "uid")
        {
            return Err(ApiError::precondition_failed(
                res,
                name,
                &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({}). \
                     The object might have been deleted and then recreated",
                    meta_str(&obj, "uid")
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && rv != meta_str(&obj, "resourceVersion")
        {
            return Err(ApiError::precondition_failed(
                res,
                name,
                &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the \
                     ResourceVersion in record ({}). The object might have been modified",
                    meta_str(&obj, "resourceVersion")
                ),
            ));
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
}
