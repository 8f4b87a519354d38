//! Kubernetes `Status` errors and field errors, with the API server's wording.

use crate::resources::ResDef;
use serde_json::{Value, json};

/// An API failure, rendered as a `Status` object.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    pub retry_after: Option<u64>,
}

fn details(res: &ResDef, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": res.resource});
    if !res.group.is_empty() {
        d["group"] = json!(res.group);
    }
    d
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    pub fn not_found(res: &ResDef, name: &str) -> Self {
        Self {
            details: Some(details(res, name)),
            ..Self::new(
                404,
                "NotFound",
                format!("{} \"{}\" not found", res.qualified(), name),
            )
        }
    }

    pub fn already_exists(res: &ResDef, name: &str) -> Self {
        Self {
            details: Some(details(res, name)),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} \"{}\" already exists", res.qualified(), name),
            )
        }
    }

    pub fn conflict(res: &ResDef, name: &str) -> Self {
        Self {
            details: Some(details(res, name)),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{}\": the object has been modified; \
                     please apply your changes to the latest version and try again",
                    res.qualified(),
                    name
                ),
            )
        }
    }

    /// A delete precondition (uid or resourceVersion) that no longer holds: `NewConflict` with
    /// the object's kind (and group) as the resource, as `rest.BeforeDelete` builds it.
    pub fn precondition_failed(res: &ResDef, name: &str, cause: &str) -> Self {
        let mut d = json!({"name": name, "kind": res.kind});
        if !res.group.is_empty() {
            d["group"] = json!(res.group);
        }
        Self {
            details: Some(d),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{}\": {}",
                    res.qualified_kind(),
                    name,
                    cause
                ),
            )
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn invalid(res: &ResDef, name: &str, errs: &[FieldError]) -> Self {
        let body: Vec<String> = errs.iter().map(FieldError::to_string).collect();
        let joined = if body.len() == 1 {
            body[0].clone()
        } else {
            format!("[{}]", body.join(", "))
        };
        let mut d = json!({"name": name, "kind": res.kind,
            "causes": errs.iter().map(|e| json!({"reason": e.kind.reason(), "message": e.body(), "field": e.field})).collect::<Vec<_>>()});
        if !res.group.is_empty() {
            d["group"] = json!(res.group);
        }
        Self {
            details: Some(d),
            ..Self::new(
                422,
                "Invalid",
                format!(
                    "{} \"{}\" is invalid: {}",
                    res.qualified_kind(),
                    name,
                    joined
                ),
            )
        }
    }

    /// The `Status` JSON body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code});
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        if let Some(ra) = self.retry_after {
            let d = s
                .as_object_mut()
                .unwrap()
                .entry("details")
                .or_insert_with(|| json!({}));
            d["retryAfterSeconds"] = json!(ra);
        }
        s
    }
}

/// The standard `Status` for an injected or generic failure code.
pub fn for_code(code: u16) -> ApiError {
    match code {
        400 => ApiError::bad_request("the server rejected our request for an unknown reason"),
        401 => ApiError::new(401, "Unauthorized", "Unauthorized"),
        403 => ApiError::new(
            403,
            "Forbidden",
            "forbidden: the request was refused (injected fault)",
        ),
        404 => ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
        405 => ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
        409 => ApiError::new(
            409,
            "Conflict",
            "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
        ),
        410 => ApiError::new(410, "Expired", "too old resource version"),
        422 => ApiError::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        ),
        429 => ApiError::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        ),
        500 => ApiError::new(
            500,
            "InternalError",
            "Internal error occurred: injected fault",
        ),
        503 => ApiError::new(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        504 => ApiError::new(
            504,
            "Timeout",
            "the server was unable to return a response in the time allotted",
        ),
        c => ApiError::new(
            c,
            "Unknown",
            format!("the server responded with the status code {c}"),
        ),
    }
}

/// The kind of a field error (`field.ErrorType`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ErrKind {
    Invalid,
    Required,
    NotSupported,
    Forbidden,
}

impl ErrKind {
    fn reason(self) -> &'static str {
        match self {
            ErrKind::Invalid => "FieldValueInvalid",
            ErrKind::Required => "FieldValueRequired",
            ErrKind::NotSupported => "FieldValueNotSupported",
            ErrKind::Forbidden => "FieldValueForbidden",
        }
    }
    fn text(self) -> &'static str {
        match self {
            ErrKind::Invalid => "Invalid value",
            ErrKind::Required => "Required value",
            ErrKind::NotSupported => "Unsupported value",
            ErrKind::Forbidden => "Forbidden",
        }
    }
}

/// One validation failure (`field.Error`).
#[derive(Debug, Clone)]
pub struct FieldError {
    pub kind: ErrKind,
    pub field: String,
    /// The value as Go's `%#v`/`%q` would print it; empty for kinds that print none.
    pub value: String,
    pub detail: String,
}

impl FieldError {
    pub fn invalid(
        field: impl Into<String>,
        value: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind: ErrKind::Invalid,
            field: field.into(),
            value: value.into(),
            detail: detail.into(),
        }
    }
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind: ErrKind::Required,
            field: field.into(),
            value: String::new(),
            detail: detail.into(),
        }
    }
    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
        Self {
            kind: ErrKind::NotSupported,
            field: field.into(),
            value: quote(value),
            detail: format!("supported values: {}", list.join(", ")),
        }
    }

    /// The part after `field: `.
    pub fn body(&self) -> String {
        let mut s = self.kind.text().to_string();
        if matches!(self.kind, ErrKind::Invalid | ErrKind::NotSupported) {
            s.push_str(": ");
            s.push_str(&self.value);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// Go's `%q` for a string.
pub fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Go's `%#v` for a `map[string]string` (keys sorted).
pub fn go_map(m: Option<&serde_json::Map<String, Value>>) -> String {
    let mut pairs: Vec<(String, String)> = m
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    pairs.sort();
    let body: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}:{}", quote(k), quote(v)))
        .collect();
    format!("map[string]string{{{}}}", body.join(", "))
}
