//! The policy's settings, as Kubewarden validates them: once when policy-server starts
//! (`validate_settings`), and each request carries them again. The rules of each key live in
//! the core crate (`jumppod::settings`); this is the SDK's side of them.

use jumppod::settings::{Contract, Settings, SettingsError};
use kubewarden_policy_sdk::settings::{SettingsValidationResponse, Validatable};

/// Settings that parsed; [`Validatable`] checks the values (floors, defaults above minimums).
pub struct PolicySettings(pub Settings);

impl PolicySettings {
    /// Parses the settings JSON; an error names the key path.
    pub fn from_json(payload: &[u8]) -> Result<PolicySettings, SettingsError> {
        Settings::from_json(payload).map(PolicySettings)
    }

    /// The contract these settings describe.
    pub fn contract(&self) -> Result<Contract, SettingsError> {
        self.0.contract()
    }
}

impl Validatable for PolicySettings {
    fn validate(&self) -> Result<(), String> {
        self.contract().map(drop).map_err(|e| e.to_string())
    }
}

/// The `validate_settings` answer for any payload: a parse error is an invalid answer with the
/// key named, never a guest error (the SDK's generic helper would fail the call instead).
pub fn check(payload: &[u8]) -> SettingsValidationResponse {
    let verdict = PolicySettings::from_json(payload)
        .map_err(|e| e.to_string())
        .and_then(|s| s.validate());
    match verdict {
        Ok(()) => SettingsValidationResponse {
            valid: true,
            message: None,
        },
        Err(message) => SettingsValidationResponse {
            valid: false,
            message: Some(message),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn verdict(json: &str) -> (bool, Option<String>) {
        let answer = check(json.as_bytes());
        (answer.valid, answer.message)
    }

    #[rstest]
    #[case::no_settings_at_all_take_every_default("{}")]
    #[case::raised_minimums_and_defaults_are_valid(
        r#"{"cpu": {"minimum": "250m", "default": "1"}, "memory": {"minimum": "64Mi", "default": "2Gi"}}"#
    )]
    #[case::quantities_may_be_written_any_way_kubernetes_reads_them(
        r#"{"cpu": {"minimum": "0.1"}, "ephemeralStorage": {"minimumRequest": "67108864"}}"#
    )]
    #[case::mutation_may_be_turned_off(r#"{"mutate": false}"#)]
    fn accepts(#[case] json: &str) {
        assert_eq!(verdict(json), (true, None));
    }

    #[rstest]
    #[case::a_minimum_below_its_floor_names_the_key_and_the_floor(
        r#"{"cpu": {"minimum": "50m"}}"#,
        "invalid setting `cpu.minimum`: 50m is below the floor 100m"
    )]
    #[case::a_default_below_its_minimum_names_both(
        r#"{"memory": {"minimum": "64Mi", "default": "32Mi"}}"#,
        "memory.default"
    )]
    #[case::an_unknown_key_is_named(r#"{"cpus": {}}"#, "cpus")]
    #[case::a_value_that_is_not_a_quantity_is_named(
        r#"{"ephemeralStorage": {"minimumRequest": "lots"}}"#,
        "ephemeralStorage.minimumRequest"
    )]
    #[case::not_json_at_all_is_an_answer_not_a_trap("{", "")]
    fn refuses_naming_the_key(#[case] json: &str, #[case] named: &str) {
        let (valid, message) = verdict(json);
        assert!(!valid);
        let message = message.expect("a refusal says why");
        assert!(message.contains(named), "{message}");
    }

    #[test]
    fn the_sdk_trait_agrees_with_the_answer() {
        let settings = PolicySettings::from_json(br#"{"cpu": {"minimum": "50m"}}"#).unwrap();
        assert_eq!(
            settings.validate(),
            Err("invalid setting `cpu.minimum`: 50m is below the floor 100m: settings may raise the contract's floors, never lower them".to_owned())
        );
    }
}
