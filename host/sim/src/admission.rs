//! The admission hook: the webhook interface tests plug in, and the call the API server makes
//! to it (an AdmissionReview request; a denial or a JSON Patch back).

use crate::errors::{ApiError, for_code};
use crate::meta::meta_str;
use crate::request::Ctx;
use crate::resources::ResDef;
use serde_json::{Value, json};

/// The answer of an [`Admission`] hook (the `response` of an AdmissionReview).
#[derive(Debug, Clone, Default)]
pub struct AdmissionVerdict {
    pub allowed: bool,
    pub message: Option<String>,
    /// HTTP code for a denial (400 when absent).
    pub code: Option<u16>,
    pub warnings: Vec<String>,
    /// An RFC 6902 JSON Patch (a JSON array) applied to the object when allowed.
    pub patch: Option<Value>,
}

impl AdmissionVerdict {
    pub fn allow() -> Self {
        Self {
            allowed: true,
            ..Self::default()
        }
    }
    pub fn deny(message: &str) -> Self {
        Self {
            allowed: false,
            message: Some(message.into()),
            ..Self::default()
        }
    }
    pub fn with_patch(mut self, patch: Value) -> Self {
        self.patch = Some(patch);
        self
    }
}

/// A mutating + validating admission webhook, called in-process for CREATE and UPDATE of
/// pods and replicasets (after defaulting, before validation).
pub trait Admission: Send + Sync {
    /// The webhook name quoted in denials.
    fn name(&self) -> &str {
        "jumppod.sim.local"
    }
    /// Reviews a Kubernetes `AdmissionRequest` JSON.
    fn review(&self, request: &Value) -> AdmissionVerdict;
}

/// Calls the hook for a CREATE or UPDATE of pods and replicasets (after defaulting, before
/// validation), as the API server calls a mutating webhook: a denial becomes the webhook's
/// error, an allowed answer's patch is applied to `obj`.
pub fn admit(
    hook: Option<&dyn Admission>,
    res: &ResDef,
    op: &str,
    obj: &mut Value,
    old: Option<&Value>,
    ctx: &mut Ctx,
) -> Result<(), ApiError> {
    let Some(adm) = hook else {
        return Ok(());
    };
    if !matches!(res.resource, "pods" | "replicasets") {
        return Ok(());
    }
    let kind = json!({"group": res.group, "version": res.version, "kind": res.kind});
    let resource = json!({"group": res.group, "version": res.version, "resource": res.resource});
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
