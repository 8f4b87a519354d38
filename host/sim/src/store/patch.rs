//! PATCH: JSON patch, merge patch, strategic merge patch (plain merge semantics) and apply
//! patch (a merge that creates when absent).
use super::State;
use crate::errors::ApiError;
use crate::meta::meta_mut;
use crate::request::Ctx;
use crate::resources::ResDef;
use serde_json::{Value, json};

impl State {
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
        let key_ns = Self::key_ns(res, ns);
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
}
