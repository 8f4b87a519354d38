//! Faults injected on demand: a status answered instead of (or after) the request, a stall,
//! a hang, a dropped connection.

use std::time::Duration;

/// What an injected fault does to a matching request.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultAction {
    /// Answer with this code and a proper `Status` body, with the code's generic message or
    /// the one given (what a quota or an admission plugin says); the request does not happen.
    Status { code: u16, message: Option<String> },
    /// Answer 429 as API Priority and Fairness and the max-inflight filter do: a plain-text
    /// body `Too many requests, please try again later.` and a `Retry-After` header in seconds,
    /// no `Status` object. The request does not happen.
    TooManyRequests { retry_after: u64 },
    /// Process the request (it happens), then answer with this code anyway.
    StatusAfter { code: u16 },
    /// Wait this long, then process the request normally.
    Stall(Duration),
    /// Never answer (until the simulator shuts down).
    Hang,
    /// Close the connection without any response; the request does not happen.
    Drop,
}

/// A fault for the next `times` requests matching `method` and `path_contains`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// HTTP method (`GET`, `POST`, ...); `None` matches any.
    pub method: Option<String>,
    /// Substring of the request path; `None` matches any.
    pub path_contains: Option<String>,
    pub times: usize,
    pub action: FaultAction,
}

impl Fault {
    fn new(method: &str, path: &str, times: usize, action: FaultAction) -> Self {
        Self {
            method: (!method.is_empty()).then(|| method.to_ascii_uppercase()),
            path_contains: (!path.is_empty()).then(|| path.to_string()),
            times,
            action,
        }
    }
    /// Answer `code` with its `Status`; 429 is answered as a real API server sends it (plain
    /// text, `Retry-After: 1`, see [`Fault::too_many_requests`]). Empty method/path match
    /// anything.
    pub fn status(method: &str, path: &str, code: u16, times: usize) -> Self {
        if code == 429 {
            return Self::too_many_requests(method, path, 1, times);
        }
        Self::new(
            method,
            path,
            times,
            FaultAction::Status {
                code,
                message: None,
            },
        )
    }
    /// Answer `code` with the server's own `message`: a 403 from a ResourceQuota or from a
    /// namespace being deleted reads differently from RBAC's.
    pub fn refusal(method: &str, path: &str, code: u16, message: &str, times: usize) -> Self {
        Self::new(
            method,
            path,
            times,
            FaultAction::Status {
                code,
                message: Some(message.to_owned()),
            },
        )
    }
    /// Answer 429 with `Retry-After: <retry_after>` and a plain-text body, as API Priority and
    /// Fairness (and the older max-inflight filter) reject a request before it is processed.
    pub fn too_many_requests(method: &str, path: &str, retry_after: u64, times: usize) -> Self {
        Self::new(
            method,
            path,
            times,
            FaultAction::TooManyRequests { retry_after },
        )
    }
    /// Apply the request, then answer `code`.
    pub fn status_after(method: &str, path: &str, code: u16, times: usize) -> Self {
        Self::new(method, path, times, FaultAction::StatusAfter { code })
    }
    pub fn stall(method: &str, path: &str, delay: Duration, times: usize) -> Self {
        Self::new(method, path, times, FaultAction::Stall(delay))
    }
    pub fn hang(method: &str, path: &str, times: usize) -> Self {
        Self::new(method, path, times, FaultAction::Hang)
    }
    pub fn drop_connection(method: &str, path: &str, times: usize) -> Self {
        Self::new(method, path, times, FaultAction::Drop)
    }

    pub(crate) fn matches(&self, method: &str, path: &str) -> bool {
        self.times > 0
            && self
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| path.contains(p))
    }
}
