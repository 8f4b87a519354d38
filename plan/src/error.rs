//! The one error of the pure half: an invalid value, named by its field (a flag, a key of the
//! configuration file, an argument), so every message says which input to fix.

use std::fmt;

/// An invalid value, named by its field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub field: String,
    pub value: String,
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "invalid `{}`: {}", self.field, self.problem)
        } else {
            write!(
                f,
                "invalid `{}` {:?}: {}",
                self.field, self.value, self.problem
            )
        }
    }
}

impl std::error::Error for ConfigError {}

pub(crate) fn err(
    field: &str,
    value: impl fmt::Display,
    problem: impl Into<String>,
) -> ConfigError {
    ConfigError {
        field: field.to_owned(),
        value: value.to_string(),
        problem: problem.into(),
    }
}
