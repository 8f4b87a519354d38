//! Policy settings and the resource contract they configure.
//!
//! ```json
//! {"cpu": {"minimum": "100m", "default": "500m"},
//!  "memory": {"minimum": "32Mi", "default": "1Gi"},
//!  "ephemeralStorage": {"minimumRequest": "64Mi"},
//!  "mutate": true,
//!  "kit": true,
//!  "sessionDrainSeconds": 300}
//! ```
//! Every key is optional. The floors (100m, 32Mi, 64Mi) are the contract itself: settings may
//! raise them, never lower them.

use crate::quantity::Quantity;
use serde::{Deserialize, Serialize};
use std::fmt;

pub const CPU_FLOOR: &str = "100m";
pub const CPU_DEFAULT: &str = "500m";
pub const MEMORY_FLOOR: &str = "32Mi";
pub const MEMORY_DEFAULT: &str = "1Gi";
pub const EPHEMERAL_STORAGE_FLOOR: &str = "64Mi";

/// How long, by default, the SSH sessions of a terminating jump pod may go on after its
/// handover. dstack's server reconnects its runner tunnels through the replacement at once, so
/// they need none of it; a user's `dstack attach` lasts hours, so no period saves it. What the
/// period is for is the copy or command in flight, minutes at most; and every drain of the
/// pod's node waits for it (the cluster autoscaler gives a pod at most 600 s).
pub const SESSION_DRAIN_DEFAULT: u32 = 300;
/// The longest session drain accepted.
pub const SESSION_DRAIN_MAX: u32 = 3600;

/// Why a session drain cannot be, or None: the one rule of the policy's `sessionDrainSeconds`
/// and the host's `session_drain_seconds`.
pub fn session_drain_problem(seconds: u32) -> Option<String> {
    (seconds > SESSION_DRAIN_MAX).then(|| {
        format!(
            "{seconds} is above the maximum {SESSION_DRAIN_MAX} (an hour): every drain of the pod's node waits for it"
        )
    })
}

/// The settings document, as written by the operator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<ComputeSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<ComputeSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<EphemeralStorageSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutate: Option<bool>,
    /// Add the kit to jump pods that run dstack's own command (`crate::kit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kit: Option<bool>,
    /// How long the kit lets SSH sessions go on after the handover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_drain_seconds: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComputeSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EphemeralStorageSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_request: Option<String>,
}

/// A quantity with the text it was written as: messages and mutations reuse the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Amount {
    pub text: String,
    pub value: Quantity,
}

impl Amount {
    fn parse(key: &str, text: &str) -> Result<Amount, SettingsError> {
        let value = Quantity::parse(text).map_err(|e| SettingsError {
            key: key.to_owned(),
            message: format!("{text:?} is not a quantity: {e}"),
        })?;
        Ok(Amount {
            text: text.to_owned(),
            value,
        })
    }

    fn floor(text: &str) -> Amount {
        Amount {
            text: text.to_owned(),
            value: Quantity::parse(text).expect("floors are valid quantities"),
        }
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Minimum and default of cpu or memory: request == limit, at least `minimum`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compute {
    pub minimum: Amount,
    pub default: Amount,
}

/// The validated contract every jump-pod container must meet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contract {
    pub cpu: Compute,
    pub memory: Compute,
    /// Minimum ephemeral-storage request, also the value a mutation fills in.
    pub ephemeral_storage_request: Amount,
    /// Fill in what is missing (true) or reject it (false).
    pub mutate: bool,
    /// Add the kit at creation (with `mutate` only).
    pub kit: bool,
    /// The kit's session drain, in seconds.
    pub session_drain_seconds: u32,
}

impl Contract {
    /// Whether a created jump pod gets the kit: never with mutation off, which adds nothing.
    pub fn adds_kit(&self) -> bool {
        self.mutate && self.kit
    }
}

/// An invalid setting, named by its key path (`cpu.minimum`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError {
    pub key: String,
    pub message: String,
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "invalid settings: {}", self.message)
        } else {
            write!(f, "invalid setting `{}`: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for SettingsError {}

impl Settings {
    /// Reads a settings document; `null` and `{}` give the defaults.
    pub fn from_json(bytes: &[u8]) -> Result<Settings, SettingsError> {
        // Most documents (`{}` among them) read directly; the slower read below is the one
        // that names the key of a bad one. An array is left to it: it must be refused.
        if bytes.trim_ascii_start().starts_with(b"{")
            && let Ok(settings) = serde_json::from_slice(bytes)
        {
            return Ok(settings);
        }
        let whole = |message: String| SettingsError {
            key: String::new(),
            message,
        };
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| whole(e.to_string()))?;
        if value.is_null() {
            return Ok(Settings::default());
        }
        if !value.is_object() {
            return Err(whole(format!(
                "settings must be a JSON object, not {value}"
            )));
        }
        serde_path_to_error::deserialize(&value).map_err(|e| SettingsError {
            key: e.path().to_string(),
            message: e.inner().to_string(),
        })
    }

    /// Checks every key and builds the contract.
    pub fn contract(&self) -> Result<Contract, SettingsError> {
        let ephemeral = self
            .ephemeral_storage
            .as_ref()
            .and_then(|e| e.minimum_request.as_deref());
        Ok(Contract {
            cpu: compute("cpu", self.cpu.as_ref(), CPU_FLOOR, CPU_DEFAULT)?,
            memory: compute("memory", self.memory.as_ref(), MEMORY_FLOOR, MEMORY_DEFAULT)?,
            ephemeral_storage_request: at_least_floor(
                "ephemeralStorage.minimumRequest",
                ephemeral,
                EPHEMERAL_STORAGE_FLOOR,
            )?,
            mutate: self.mutate.unwrap_or(true),
            kit: self.kit.unwrap_or(true),
            session_drain_seconds: session_drain(self.session_drain_seconds)?,
        })
    }
}

fn session_drain(seconds: Option<u32>) -> Result<u32, SettingsError> {
    let seconds = seconds.unwrap_or(SESSION_DRAIN_DEFAULT);
    match session_drain_problem(seconds) {
        None => Ok(seconds),
        Some(message) => Err(SettingsError {
            key: "sessionDrainSeconds".to_owned(),
            message,
        }),
    }
}

impl Default for Contract {
    fn default() -> Self {
        Settings::default()
            .contract()
            .expect("the default settings are valid")
    }
}

fn at_least_floor(key: &str, text: Option<&str>, floor: &str) -> Result<Amount, SettingsError> {
    let floor = Amount::floor(floor);
    let Some(text) = text else {
        return Ok(floor);
    };
    let amount = Amount::parse(key, text)?;
    if amount.value < floor.value {
        return Err(SettingsError {
            key: key.to_owned(),
            message: format!(
                "{text} is below the floor {floor}: settings may raise the contract's floors, never lower them"
            ),
        });
    }
    Ok(amount)
}

fn compute(
    key: &str,
    settings: Option<&ComputeSettings>,
    floor: &str,
    default: &str,
) -> Result<Compute, SettingsError> {
    let minimum_key = format!("{key}.minimum");
    let minimum = at_least_floor(
        &minimum_key,
        settings.and_then(|s| s.minimum.as_deref()),
        floor,
    )?;
    let default_key = format!("{key}.default");
    let default = match settings.and_then(|s| s.default.as_deref()) {
        Some(text) => Amount::parse(&default_key, text)?,
        None => Amount::floor(default),
    };
    if default.value < minimum.value {
        return Err(SettingsError {
            key: default_key,
            message: format!("{default} is below {minimum_key} ({minimum})"),
        });
    }
    Ok(Compute { minimum, default })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn contract(json: &str) -> Result<Contract, SettingsError> {
        Settings::from_json(json.as_bytes())?.contract()
    }

    #[rstest]
    #[case::empty_object("{}")]
    #[case::null("null")]
    #[case::floors_written_out(
        r#"{"cpu":{"minimum":"100m","default":"500m"},"memory":{"minimum":"32Mi","default":"1Gi"},"ephemeralStorage":{"minimumRequest":"64Mi"},"mutate":true,"kit":true,"sessionDrainSeconds":300}"#
    )]
    fn defaults_are_the_contract(#[case] json: &str) {
        let c = contract(json).unwrap();
        assert_eq!(c, Contract::default());
        assert_eq!(c.cpu.minimum.text, "100m");
        assert_eq!(c.cpu.default.text, "500m");
        assert_eq!(c.memory.minimum.text, "32Mi");
        assert_eq!(c.memory.default.text, "1Gi");
        assert_eq!(c.ephemeral_storage_request.text, "64Mi");
        assert!(c.mutate);
        assert!(c.kit && c.adds_kit());
        assert_eq!(c.session_drain_seconds, 300);
    }

    #[rstest]
    #[case::the_kit_switched_off(r#"{"kit":false}"#, false, 300)]
    #[case::no_kit_without_mutation(r#"{"mutate":false}"#, false, 300)]
    #[case::a_shorter_session_drain(r#"{"sessionDrainSeconds":5}"#, true, 5)]
    #[case::no_session_drain_at_all(r#"{"sessionDrainSeconds":0}"#, true, 0)]
    #[case::the_longest_session_drain(r#"{"sessionDrainSeconds":3600}"#, true, 3600)]
    fn the_kit_and_its_session_drain_come_from_the_settings(
        #[case] json: &str,
        #[case] adds_kit: bool,
        #[case] drain: u32,
    ) {
        let c = contract(json).unwrap();
        assert_eq!(c.adds_kit(), adds_kit);
        assert_eq!(c.session_drain_seconds, drain);
    }

    #[test]
    fn raised_minimums_and_defaults_are_kept() {
        let c = contract(
            r#"{"cpu":{"minimum":"0.25","default":"1"},"memory":{"default":"2Gi"},"ephemeralStorage":{"minimumRequest":"1Gi"},"mutate":false}"#,
        )
        .unwrap();
        assert_eq!(c.cpu.minimum.text, "0.25");
        assert_eq!(c.cpu.default.text, "1");
        assert_eq!(c.memory.default.text, "2Gi");
        assert_eq!(c.ephemeral_storage_request.text, "1Gi");
        assert!(!c.mutate);
    }

    #[rstest]
    #[case::unknown_top_level_key(r#"{"cpus":{}}"#, "cpus", "unknown field `cpus`")]
    #[case::unknown_nested_key(
        r#"{"cpu":{"maximum":"1"}}"#,
        "cpu.maximum",
        "unknown field `maximum`"
    )]
    #[case::unparsable_minimum(
        r#"{"cpu":{"minimum":"lots"}}"#,
        "cpu.minimum",
        "\"lots\" is not a quantity"
    )]
    #[case::unparsable_default(
        r#"{"memory":{"default":"1 Gi"}}"#,
        "memory.default",
        "\"1 Gi\" is not a quantity"
    )]
    #[case::cpu_minimum_below_floor(
        r#"{"cpu":{"minimum":"50m"}}"#,
        "cpu.minimum",
        "below the floor 100m"
    )]
    #[case::memory_minimum_below_floor(
        r#"{"memory":{"minimum":"16Mi"}}"#,
        "memory.minimum",
        "below the floor 32Mi"
    )]
    #[case::ephemeral_below_floor(
        r#"{"ephemeralStorage":{"minimumRequest":"10Mi"}}"#,
        "ephemeralStorage.minimumRequest",
        "below the floor 64Mi"
    )]
    #[case::default_below_minimum(
        r#"{"cpu":{"minimum":"1","default":"500m"}}"#,
        "cpu.default",
        "below cpu.minimum (1)"
    )]
    #[case::default_below_floor(
        r#"{"memory":{"default":"16Mi"}}"#,
        "memory.default",
        "below memory.minimum (32Mi)"
    )]
    #[case::mutate_not_a_boolean(r#"{"mutate":"yes"}"#, "mutate", "invalid type")]
    #[case::kit_not_a_boolean(r#"{"kit":1}"#, "kit", "invalid type")]
    #[case::session_drain_above_an_hour(
        r#"{"sessionDrainSeconds":3601}"#,
        "sessionDrainSeconds",
        "3601 is above the maximum 3600"
    )]
    #[case::session_drain_negative(
        r#"{"sessionDrainSeconds":-1}"#,
        "sessionDrainSeconds",
        "invalid value"
    )]
    #[case::session_drain_as_text(
        r#"{"sessionDrainSeconds":"300"}"#,
        "sessionDrainSeconds",
        "invalid type"
    )]
    #[case::quantity_as_number(r#"{"cpu":{"minimum":1}}"#, "cpu.minimum", "invalid type")]
    #[case::not_an_object("[1]", "", "must be a JSON object")]
    #[case::trailing_garbage("{} x", "", "trailing characters")]
    fn invalid_settings_name_the_key(#[case] json: &str, #[case] key: &str, #[case] message: &str) {
        let err = contract(json).unwrap_err();
        assert_eq!(err.key, key, "{err}");
        assert!(err.message.contains(message), "{err}");
        if !key.is_empty() {
            assert!(err.to_string().contains(&format!("`{key}`")), "{err}");
        }
    }

    #[test]
    fn settings_round_trip_through_json() {
        let settings = Settings {
            cpu: Some(ComputeSettings {
                minimum: Some("200m".into()),
                default: None,
            }),
            mutate: Some(false),
            ..Settings::default()
        };
        let json = serde_json::to_vec(&settings).unwrap();
        assert_eq!(Settings::from_json(&json).unwrap(), settings);
    }
}
