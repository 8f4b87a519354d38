//! PUT (and the tail of PATCH): optimistic concurrency, the status subresource, immutable
//! metadata, and the last finalizer letting a deleted object go.
use super::State;
use crate::admission;
use crate::errors::{ApiError, FieldError};
use crate::meta::{meta_mut, meta_str};
use crate::request::Ctx;
use crate::resources::ResDef;
use serde_json::{Value, json};

impl State {
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
        let key_ns = Self::key_ns(res, ns);
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
            admission::admit(
                self.admission.as_deref(),
                res,
                "UPDATE",
                &mut new,
                Some(&old),
                ctx,
            )?;
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
}
