//! The verdict on one request, as data: the violations a rejection found (container, rule,
//! values), the values it would have filled in, and what an acceptance warns about. Every
//! message and warning the policy gives is rendered here from that data, and nowhere else:
//! the Kubewarden module, the host, the webhook and the JavaScript build show the same text,
//! and the browser reads the same data instead of the text.

use crate::mutate::Fill;
use crate::rules::{Problem, Side, Violation};
use serde::Serialize;
use serde_json::Value;
use std::fmt;

/// What the policy answers for one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Accept {
        warnings: Vec<Warning>,
    },
    /// Accept the object as changed here.
    Mutate {
        object: Mutated,
        warnings: Vec<Warning>,
    },
    Reject(Rejection),
}

impl Verdict {
    pub fn accept() -> Verdict {
        Verdict::Accept {
            warnings: Vec::new(),
        }
    }

    pub(crate) fn unreadable(message: String) -> Verdict {
        Verdict::Reject(Rejection::Unreadable { message })
    }
}

/// A mutated object as the answer carries it: its compact JSON text, so the module writes it
/// into its answer as it is. Written as serde_json writes a `Value`, or (spliced into the
/// request's own text) in the request's key order and escapes: the same value either way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mutated(String);

impl Mutated {
    /// Writes a document: a `Value`, or a [`Json`](crate::json::Json) written as one.
    pub fn write<T: Serialize + ?Sized>(object: &T) -> Result<Mutated, serde_json::Error> {
        serde_json::to_string(object).map(Mutated)
    }

    /// Takes text [`crate::splice`] wrote into checked compact JSON.
    pub(crate) fn spliced(text: String) -> Mutated {
        Mutated(text)
    }

    /// The JSON text.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// The object read into a `Value`.
    pub fn value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.0)
    }
}

/// Why an object is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// The object (`subject`, e.g. `jump pod "p"`) breaks the contract.
    Broken {
        subject: String,
        violations: Vec<Violation>,
    },
    /// Mutation is off and the object lacks what the contract requires.
    Missing { subject: String, fills: Vec<Fill> },
    /// The request, its object or the settings cannot be read: a bad request (HTTP 400).
    Unreadable { message: String },
}

impl Rejection {
    /// The HTTP status the AdmissionResponse carries: 400 for what cannot be read, none for a
    /// broken contract (the API server reports 403).
    pub fn code(&self) -> Option<u16> {
        match self {
            Rejection::Unreadable { .. } => Some(400),
            Rejection::Broken { .. } | Rejection::Missing { .. } => None,
        }
    }

    /// The rejection's message.
    pub fn message(&self) -> String {
        self.to_string()
    }
}

/// What an accepted request is warned about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warning {
    /// An update that left resources breaking the contract as they were: accepted, since
    /// existing objects must never be locked.
    Unchanged {
        subject: String,
        violations: Vec<Violation>,
    },
    /// A label the mutation could not fill in, and why.
    LabelNotSet(String),
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Broken {
                subject,
                violations,
            } => {
                write!(f, "{subject} does not meet the jump-pod contract: ")?;
                joined(f, violations)
            }
            Rejection::Missing { subject, fills } => {
                write!(
                    f,
                    "{subject} is missing what the jump-pod contract requires (mutation is off): "
                )?;
                joined(f, fills)
            }
            Rejection::Unreadable { message } => f.write_str(message),
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Unchanged {
                subject,
                violations,
            } => {
                write!(
                    f,
                    "{subject} does not meet the jump-pod contract (accepted: its resources did not change): "
                )?;
                joined(f, violations)
            }
            Warning::LabelNotSet(text) => f.write_str(text),
        }
    }
}

/// Items of a message, `; ` between them.
fn joined<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: &[T]) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str("; ")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

fn container(init: bool) -> &'static str {
    if init { "init container" } else { "container" }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?}: {}",
            container(self.init),
            self.container,
            self.problem
        )
    }
}

/// The rule a container breaks, without the container.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unparsable {
                resource,
                side,
                value,
                error,
            } => write!(
                f,
                "resources.{}.{} {value:?} is not a valid quantity ({error})",
                side.field(),
                resource.key()
            ),
            Problem::Unset { resource } => write!(
                f,
                "{} has no request and no limit (Guaranteed QoS needs both, equal)",
                resource.key()
            ),
            Problem::NoLimit { resource, request } => write!(
                f,
                "{} request {request} has no limit (Guaranteed QoS needs limit == request)",
                resource.key()
            ),
            Problem::NotEqual {
                resource,
                request,
                limit,
            } => write!(
                f,
                "{} request {request} is not equal to its limit {limit} (Guaranteed QoS needs request == limit)",
                resource.key()
            ),
            Problem::BelowMinimum {
                resource,
                side,
                value,
                minimum,
            } => {
                let side = match side {
                    Side::Request => "request",
                    Side::Limit => "limit",
                };
                write!(
                    f,
                    "{} {side} {value} is below the minimum {minimum}",
                    resource.key()
                )
            }
            Problem::NoRequest { resource, minimum } => write!(
                f,
                "{} request is missing (at least {minimum} is required)",
                resource.key()
            ),
            Problem::EphemeralLimitSet { limit } => write!(
                f,
                "ephemeral-storage limit {limit} must not be set (the kubelet evicts a pod that exceeds it; set only a request)"
            ),
        }
    }
}

impl fmt::Display for Fill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fill::Resource {
                init,
                container: name,
                ..
            } => write!(f, "{} {name:?}: {}", container(*init), self.missing()),
            Fill::Label { .. } => write!(f, "{}", self.missing()),
        }
    }
}

impl Fill {
    /// What is missing and what it would be set to, without the container.
    pub fn missing(&self) -> String {
        match self {
            Fill::Resource {
                resource,
                side,
                value,
                ..
            } => format!(
                "resources.{}.{} is missing (would be set to {value})",
                side.field(),
                resource.key()
            ),
            Fill::Label { key, value } => {
                format!("label {key} is missing (would be set to {value:?})")
            }
        }
    }
}
