//! The LimitRanger admission plugin's validation of pods against a namespace's LimitRanges,
//! for the `max` of type Container (k8s.io/kubernetes plugin/pkg/admission/limitranger,
//! `PodValidateLimitFunc`, `maxConstraint`): the first LimitRange a container exceeds refuses
//! the pod with 403, naming every excess it found. Kubernetes prints quantities in their
//! canonical form; the simulator prints them as written (the same for `500m` or `1Gi`).
use super::State;
use crate::errors::ApiError;
use crate::quantity::amount;
use serde_json::Value;

impl State {
    /// After validation, as the API server runs validating admission: `pod` has its name.
    pub(super) fn limit_ranges_admit(
        &self,
        ns: &str,
        name: &str,
        pod: &Value,
    ) -> Result<(), ApiError> {
        for range in self.iter("limitranges", Some(ns)) {
            let errors = excesses(range, pod);
            if !errors.is_empty() {
                // utilerrors.NewAggregate: one error as it is, several in brackets.
                let why = match errors.as_slice() {
                    [one] => one.clone(),
                    many => format!("[{}]", many.join(", ")),
                };
                return Err(ApiError::new(
                    403,
                    "Forbidden",
                    format!("pods \"{name}\" is forbidden: {why}"),
                ));
            }
        }
        Ok(())
    }
}

/// What the pod's containers, then its init containers, ask beyond each `max`.
fn excesses(range: &Value, pod: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let items = range["spec"]["limits"].as_array().into_iter().flatten();
    for item in items.filter(|i| i["type"] == "Container") {
        let Some(max) = item["max"].as_object() else {
            continue;
        };
        for list in ["containers", "initContainers"] {
            for c in pod["spec"][list].as_array().into_iter().flatten() {
                for (resource, enforced) in max {
                    errors.extend(max_constraint(resource, enforced, &c["resources"]));
                }
            }
        }
    }
    errors
}

/// `maxConstraint`: a container must give a limit, and neither it nor the request may
/// exceed the maximum.
fn max_constraint(resource: &str, enforced: &Value, resources: &Value) -> Option<String> {
    let max = enforced.as_str().unwrap_or_default();
    let over = |v: &Value| amount(resource, v) > amount(resource, enforced);
    let printed = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    let limit = &resources["limits"][resource];
    let request = &resources["requests"][resource];
    if limit.is_null() {
        Some(format!(
            "maximum {resource} usage per Container is {max}.  No limit is specified"
        ))
    } else if over(limit) {
        Some(format!(
            "maximum {resource} usage per Container is {max}, but limit is {}",
            printed(limit)
        ))
    } else if !request.is_null() && over(request) {
        Some(format!(
            "maximum {resource} usage per Container is {max}, but request is {}",
            printed(request)
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(resources: Value) -> Value {
        json!({"spec": {"containers": [{"name": "c", "resources": resources}]}})
    }

    fn range(max: Value) -> Value {
        json!({"spec": {"limits": [{"type": "Container", "max": max}]}})
    }

    #[test]
    fn a_limit_above_the_maximum_is_named_with_both_values() {
        let p = pod(json!({"limits": {"cpu": "500m"}, "requests": {"cpu": "500m"}}));
        assert_eq!(
            excesses(&range(json!({"cpu": "100m"})), &p),
            ["maximum cpu usage per Container is 100m, but limit is 500m"]
        );
    }

    #[test]
    fn a_missing_limit_is_refused_and_a_request_above_the_maximum_too() {
        let p = pod(json!({"requests": {"memory": "1Gi"}}));
        assert_eq!(
            excesses(&range(json!({"memory": "512Mi"})), &p),
            ["maximum memory usage per Container is 512Mi.  No limit is specified"]
        );
        let p = pod(json!({"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}));
        assert_eq!(
            excesses(&range(json!({"cpu": "1500m"})), &p),
            ["maximum cpu usage per Container is 1500m, but request is 2"]
        );
    }

    #[test]
    fn within_the_maximum_or_of_another_type_nothing_is_found() {
        let p = pod(json!({"limits": {"cpu": "100m"}}));
        assert!(excesses(&range(json!({"cpu": "0.1"})), &p).is_empty());
        let pod_type = json!({"spec": {"limits": [{"type": "Pod", "max": {"cpu": "1m"}}]}});
        assert!(excesses(&pod_type, &p).is_empty());
    }
}
