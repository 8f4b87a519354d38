//! The rules of the jump-pod contract with the values a settings document gives them, and
//! each setting's default and floor, for a form and a listing.

use jumppod::settings::{
    CPU_DEFAULT, CPU_FLOOR, Contract, EPHEMERAL_STORAGE_FLOOR, MEMORY_DEFAULT, MEMORY_FLOOR,
    Settings, SettingsError,
};
use serde::Serialize;
use serde_json::Value;

/// One rule, or one value filled in at creation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    pub id: &'static str,
    /// The settings key that configures it, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setting: Option<&'static str>,
    /// The value in force with these settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The value when the setting is absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<&'static str>,
    /// The lowest value settings may give it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<String>,
    pub applies_to: &'static str,
    pub text: String,
}

/// The contract a settings document configures.
pub fn contract(settings: &Value) -> Result<Contract, SettingsError> {
    let bytes = serde_json::to_vec(settings).unwrap_or_default();
    Settings::from_json(&bytes).and_then(|s| s.contract())
}

pub fn rules(contract: &Contract) -> Vec<Rule> {
    let c = contract;
    let filled = if c.mutate {
        "filled in"
    } else {
        "required (mutation is off: a missing value is rejected, not filled in)"
    };
    vec![
        Rule {
            id: "guaranteed",
            setting: None,
            value: None,
            default: None,
            floor: None,
            applies_to: "containers and init containers",
            text: "cpu and memory requests equal their limits (Guaranteed QoS); a request that \
                   is absent while its limit is set counts as equal, because the API server \
                   defaults it to the limit"
                .to_owned(),
        },
        Rule {
            id: "cpu-minimum",
            setting: Some("cpu.minimum"),
            value: Some(c.cpu.minimum.text.clone()),
            default: Some(CPU_FLOOR),
            floor: Some(CPU_FLOOR.to_owned()),
            applies_to: "containers",
            text: format!("cpu request and limit at least {}", c.cpu.minimum),
        },
        Rule {
            id: "memory-minimum",
            setting: Some("memory.minimum"),
            value: Some(c.memory.minimum.text.clone()),
            default: Some(MEMORY_FLOOR),
            floor: Some(MEMORY_FLOOR.to_owned()),
            applies_to: "containers",
            text: format!("memory request and limit at least {}", c.memory.minimum),
        },
        Rule {
            id: "ephemeral-storage-request",
            setting: Some("ephemeralStorage.minimumRequest"),
            value: Some(c.ephemeral_storage_request.text.clone()),
            default: Some(EPHEMERAL_STORAGE_FLOOR),
            floor: Some(EPHEMERAL_STORAGE_FLOOR.to_owned()),
            applies_to: "containers",
            text: format!(
                "an ephemeral-storage request of at least {} (under disk pressure the kubelet \
                 evicts pods that use more than they requested first)",
                c.ephemeral_storage_request
            ),
        },
        Rule {
            id: "no-ephemeral-storage-limit",
            setting: None,
            value: None,
            default: None,
            floor: None,
            applies_to: "containers",
            text: "no ephemeral-storage limit (the kubelet evicts a pod that exceeds it)"
                .to_owned(),
        },
        Rule {
            id: "cpu-default",
            setting: Some("cpu.default"),
            value: Some(c.cpu.default.text.clone()),
            default: Some(CPU_DEFAULT),
            floor: Some(c.cpu.minimum.text.clone()),
            applies_to: "jump pods at CREATE",
            text: format!(
                "cpu request and limit {filled} as {} when neither is set",
                c.cpu.default
            ),
        },
        Rule {
            id: "memory-default",
            setting: Some("memory.default"),
            value: Some(c.memory.default.text.clone()),
            default: Some(MEMORY_DEFAULT),
            floor: Some(c.memory.minimum.text.clone()),
            applies_to: "jump pods at CREATE",
            text: format!(
                "memory request and limit {filled} as {} when neither is set",
                c.memory.default
            ),
        },
        Rule {
            id: "mutate",
            setting: Some("mutate"),
            value: Some(c.mutate.to_string()),
            default: Some("true"),
            floor: None,
            applies_to: "jump pods at CREATE",
            text: if c.mutate {
                "missing values and the labels of a bare legacy pod are filled in; values that \
                 are set are never rewritten; ReplicaSets are only validated"
                    .to_owned()
            } else {
                "nothing is filled in: a jump pod missing a value is rejected, naming it".to_owned()
            },
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_rules_show_the_values_the_settings_give_them() {
        let contract = contract(&json!({"cpu": {"minimum": "250m", "default": "1"}})).unwrap();
        let rules = rules(&contract);
        let cpu = rules.iter().find(|r| r.id == "cpu-minimum").unwrap();
        assert_eq!(cpu.value.as_deref(), Some("250m"));
        assert_eq!(cpu.floor.as_deref(), Some("100m"));
        let default = rules.iter().find(|r| r.id == "cpu-default").unwrap();
        assert_eq!(default.value.as_deref(), Some("1"));
        assert_eq!(default.floor.as_deref(), Some("250m"));
    }

    #[test]
    fn no_settings_give_the_defaults() {
        let rules = rules(&contract(&Value::Null).unwrap());
        let memory = rules.iter().find(|r| r.id == "memory-default").unwrap();
        assert_eq!(memory.value.as_deref(), Some("1Gi"));
    }
}
