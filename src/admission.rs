//! The verdict on one admission request: which objects are judged, and how.
//!
//! Every pod in the policy's scope passes through here, so the object is first read for its
//! metadata alone; only a jump pod (or a jump-pod ReplicaSet) is parsed in full.

use crate::mutate::{self, Mutation};
use crate::rules::{self, Violation};
use crate::schema::{self, Schema};
use crate::settings::{Contract, Settings};
use crate::view::{self, PodView, Text};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The parts of an AdmissionRequest the verdict depends on.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// `request.kind.group` and `request.kind.kind`.
    pub group: &'a str,
    pub kind: &'a str,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'a str,
    /// `request.name`, used when the object has no name yet.
    pub name: Option<&'a str>,
    pub object: Option<&'a RawValue>,
    pub old_object: Option<&'a RawValue>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Accept {
        warnings: Vec<String>,
    },
    /// Accept the object as changed here.
    Mutate {
        object: Value,
        warnings: Vec<String>,
    },
    Reject {
        message: String,
        code: Option<u16>,
    },
}

impl Outcome {
    pub(crate) fn accept() -> Outcome {
        Outcome::Accept {
            warnings: Vec::new(),
        }
    }

    fn reject(message: String) -> Outcome {
        Outcome::Reject {
            message,
            code: None,
        }
    }

    fn bad_request(message: String) -> Outcome {
        Outcome::Reject {
            message,
            code: Some(400),
        }
    }
}

#[derive(Deserialize)]
struct Labels<'a> {
    #[serde(borrow, rename = "app.kubernetes.io/name")]
    app: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    /// A pod a controller creates has no name yet at admission, only this prefix.
    #[serde(borrow)]
    generate_name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    labels: Option<Labels<'a>>,
}

impl Meta<'_> {
    fn app(&self) -> Option<&str> {
        self.labels.as_ref()?.app.as_deref()
    }
}

#[derive(Deserialize)]
struct PodHead<'a> {
    #[serde(borrow)]
    metadata: Option<Meta<'a>>,
}

#[derive(Deserialize)]
struct TemplateHead<'a> {
    #[serde(borrow)]
    metadata: Option<Meta<'a>>,
}

#[derive(Deserialize)]
struct ReplicaSetSpecHead<'a> {
    #[serde(borrow)]
    template: Option<TemplateHead<'a>>,
}

#[derive(Deserialize)]
struct ReplicaSetHead<'a> {
    #[serde(borrow)]
    metadata: Option<Meta<'a>>,
    #[serde(borrow)]
    spec: Option<ReplicaSetSpecHead<'a>>,
}

/// What the policy judges: a pod or a ReplicaSet being created or updated. Every other
/// request is accepted as it is. The full read, the one-pass read and the byte scan
/// (`crate::ordinary`) all ask here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    Pod,
    ReplicaSet,
    Other,
}

pub(crate) fn scope(operation: &str, group: &str, kind: &str) -> Scope {
    if !matches!(operation, "CREATE" | "UPDATE") {
        return Scope::Other;
    }
    match (group, kind) {
        ("", "Pod") => Scope::Pod,
        ("apps", "ReplicaSet") => Scope::ReplicaSet,
        _ => Scope::Other,
    }
}

/// The name a pod is judged by: its own, else the request's (an empty name is none).
pub(crate) fn judged_name<'a>(own: Option<&'a str>, request: Option<&'a str>) -> Option<&'a str> {
    own.filter(|n| !n.is_empty())
        .or(request.filter(|n| !n.is_empty()))
}

/// Judges one request. `settings` is read only when a jump pod is found.
pub fn review(request: &Request<'_>, settings: Option<&RawValue>) -> Outcome {
    let Some(object) = request.object else {
        return Outcome::accept();
    };
    let judged = match scope(request.operation, request.group, request.kind) {
        Scope::Pod => classify_pod(object, request.name),
        Scope::ReplicaSet => classify_replica_set(object),
        Scope::Other => return Outcome::accept(),
    };
    let (schema, name) = match judged {
        Ok(Some(found)) => found,
        Ok(None) => return Outcome::accept(),
        Err(message) => return Outcome::bad_request(message),
    };
    let contract = match contract(settings) {
        Ok(contract) => contract,
        Err(outcome) => return outcome,
    };
    let update = request.operation == "UPDATE";
    match request.kind {
        "Pod" => review_pod(
            object,
            request.old_object.filter(|_| update),
            schema,
            &name,
            &contract,
        ),
        _ => review_replica_set(
            object,
            request.old_object.filter(|_| update),
            &name,
            &contract,
        ),
    }
}

/// A request whose object was read, within the payload, as the head of a pod.
#[derive(Clone, Debug)]
pub struct ViewRequest<'v, 'a> {
    pub group: &'v str,
    pub kind: &'v str,
    pub operation: &'v str,
    pub name: Option<&'v str>,
    pub object: Option<view::PodHead<'a>>,
}

/// Judges a request from the views alone, in one pass over the payload: what every ordinary
/// pod takes, and a created jump pod, whose spec is then read from the same payload.
/// `raw_object` finds the object's JSON in the payload, which only a mutation needs (the pod
/// is returned whole). None where [`review`] must decide (updates, ReplicaSets, an object
/// nesting too deep for the typed parse, anything the view cannot read). `payload` is the
/// whole JSON the views were read from. The answer is exactly what [`review`] answers for
/// the same request.
pub fn review_view<'a>(
    request: ViewRequest<'_, 'a>,
    settings: Option<&RawValue>,
    payload: &[u8],
    raw_object: impl FnOnce() -> Option<&'a RawValue>,
) -> Option<Outcome> {
    let Some(head) = request.object else {
        return Some(Outcome::accept());
    };
    match scope(request.operation, request.group, request.kind) {
        Scope::Pod => {}
        Scope::ReplicaSet => return None,
        Scope::Other => return Some(Outcome::accept()),
    }
    let name = judged_name(head.name(), request.name);
    let app = head
        .labels()
        .and_then(|l| l.get(schema::NAME_LABEL))
        .map(Text::as_str);
    let Some(schema) = schema::classify(app, name) else {
        return Some(Outcome::accept());
    };
    if request.operation != "CREATE"
        || !head.is_a_pod()
        || !view::nests_less_than(payload, view::NESTING_LIMIT)
    {
        return None;
    }
    let shown = shown_name(
        name,
        head.metadata
            .as_ref()
            .and_then(|m| m.generate_name.as_ref())
            .map(Text::as_str),
    );
    let contract = match contract(settings) {
        Ok(contract) => contract,
        Err(outcome) => return Some(outcome),
    };
    let what = format!("jump pod {shown:?}");
    let pod = head.read_spec()?;
    match create_pod(&pod, schema, &what, &contract) {
        Created::Decided(outcome) => Some(outcome),
        Created::Mutate(mutation) => mutate_pod(raw_object()?, &pod, mutation, &what, &contract),
    }
}

fn contract(settings: Option<&RawValue>) -> Result<Contract, Outcome> {
    Settings::from_json(settings.map_or(b"null", |s| s.get().as_bytes()))
        .and_then(|s| s.contract())
        .map_err(|e| Outcome::bad_request(e.to_string()))
}

fn classify_pod(
    object: &RawValue,
    request_name: Option<&str>,
) -> Result<Option<(Schema, String)>, String> {
    let head: PodHead = serde_json::from_slice(object.get().as_bytes())
        .map_err(|e| format!("cannot read the pod's metadata: {e}"))?;
    let meta = head.metadata.as_ref();
    let name = judged_name(meta.and_then(|m| m.name.as_deref()), request_name);
    let Some(schema) = schema::classify(meta.and_then(Meta::app), name) else {
        return Ok(None);
    };
    let shown = shown_name(name, meta.and_then(|m| m.generate_name.as_deref()));
    Ok(Some((schema, shown)))
}

/// Messages name the pod; a generated one by its prefix.
fn shown_name(name: Option<&str>, generate_name: Option<&str>) -> String {
    match (name, generate_name) {
        (Some(name), _) => name.to_owned(),
        (None, Some(prefix)) => format!("{prefix}<generated>"),
        (None, None) => String::new(),
    }
}

fn classify_replica_set(object: &RawValue) -> Result<Option<(Schema, String)>, String> {
    let head: ReplicaSetHead = serde_json::from_slice(object.get().as_bytes())
        .map_err(|e| format!("cannot read the ReplicaSet's metadata: {e}"))?;
    let own_name = head.metadata.as_ref().and_then(|m| m.name.as_deref());
    let template = head
        .spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref());
    let name = template.and_then(|m| m.name.as_deref()).or(own_name);
    Ok(schema::classify(template.and_then(Meta::app), name)
        .map(|schema| (schema, own_name.unwrap_or_default().to_owned())))
}

/// Parses JSON into a typed object, naming the field that does not fit.
fn typed<T: DeserializeOwned>(value: &Value, what: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        format!("cannot read {what}: {path}: {}", e.inner())
    })
}

fn parse<T: DeserializeOwned>(raw: &RawValue, what: &str) -> Result<(Value, T), String> {
    let value: Value = serde_json::from_slice(raw.get().as_bytes())
        .map_err(|e| format!("cannot read {what}: {e}"))?;
    let object = typed(&value, what)?;
    Ok((value, object))
}

fn review_pod(
    object: &RawValue,
    old: Option<&RawValue>,
    schema: Schema,
    name: &str,
    contract: &Contract,
) -> Outcome {
    let what = format!("jump pod {name:?}");
    if old.is_none()
        && let Some(view) = PodView::read(object.get())
    {
        return match create_pod(&view, schema, &what, contract) {
            Created::Decided(outcome) => outcome,
            Created::Mutate(mutation) => mutate_pod(object, &view, mutation, &what, contract)
                .unwrap_or_else(|| review_pod_typed(object, None, schema, &what, contract)),
        };
    }
    review_pod_typed(object, old, schema, &what, contract)
}

/// What a created jump pod's view decides, or the mutation it needs.
enum Created {
    Decided(Outcome),
    Mutate(Mutation),
}

fn create_pod(view: &PodView<'_>, schema: Schema, what: &str, contract: &Contract) -> Created {
    let mutation = mutate::plan_view(view, schema, contract);
    if mutation.is_empty() {
        let violations = view
            .spec
            .as_ref()
            .map(|spec| rules::check_view(spec, contract))
            .unwrap_or_default();
        return Created::Decided(verdict(&violations, what, mutation.warnings));
    }
    if !contract.mutate {
        return Created::Decided(Outcome::reject(format!(
            "{what} is missing what the jump-pod contract requires (mutation is off): {}",
            mutation.describe_missing()
        )));
    }
    Created::Mutate(mutation)
}

/// Applies a mutation to the pod's JSON and judges the result (the view with the same values
/// added); None where the JSON must be read by the typed parse.
fn mutate_pod(
    object: &RawValue,
    view: &PodView<'_>,
    mutation: Mutation,
    what: &str,
    contract: &Contract,
) -> Option<Outcome> {
    let mut value: Value = serde_json::from_slice(object.get().as_bytes()).ok()?;
    mutation.apply(&mut value);
    let mut spec = view.spec.clone().unwrap_or_default();
    mutation.apply_to_view(&mut spec);
    Some(
        match verdict(&rules::check_view(&spec, contract), what, Vec::new()) {
            Outcome::Accept { .. } => Outcome::Mutate {
                object: value,
                warnings: mutation.warnings,
            },
            rejection => rejection,
        },
    )
}

/// The typed parse of the whole pod: updates, and what the view leaves to it (it names
/// a field of the wrong type).
fn review_pod_typed(
    object: &RawValue,
    old: Option<&RawValue>,
    schema: Schema,
    what: &str,
    contract: &Contract,
) -> Outcome {
    let (mut value, pod) = match parse::<Pod>(object, what) {
        Ok(parsed) => parsed,
        Err(message) => return Outcome::bad_request(message),
    };
    let no_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&no_spec);
    if let Some(old) = old {
        return match parse::<Pod>(old, &format!("the old {what}")) {
            Ok((_, old_pod)) => {
                judge_update(spec, &old_pod.spec.unwrap_or_default(), what, contract)
            }
            Err(message) => Outcome::bad_request(message),
        };
    }
    let mutation = mutate::plan(&pod, schema, contract);
    if mutation.is_empty() {
        return verdict(&rules::check(spec, contract), what, mutation.warnings);
    }
    if !contract.mutate {
        return Outcome::reject(format!(
            "{what} is missing what the jump-pod contract requires (mutation is off): {}",
            mutation.describe_missing()
        ));
    }
    mutation.apply(&mut value);
    let mutated: Pod = match typed(&value, what) {
        Ok(pod) => pod,
        Err(message) => return Outcome::bad_request(message),
    };
    match verdict(
        &rules::check(&mutated.spec.unwrap_or_default(), contract),
        what,
        Vec::new(),
    ) {
        Outcome::Accept { .. } => Outcome::Mutate {
            object: value,
            warnings: mutation.warnings,
        },
        rejection => rejection,
    }
}

fn review_replica_set(
    object: &RawValue,
    old: Option<&RawValue>,
    name: &str,
    contract: &Contract,
) -> Outcome {
    let what = format!("the pod template of jump-pod ReplicaSet {name:?}");
    let template_spec = |rs: ReplicaSet| {
        rs.spec
            .and_then(|s| s.template)
            .and_then(|t| t.spec)
            .unwrap_or_default()
    };
    let spec = match parse::<ReplicaSet>(object, &what) {
        Ok((_, rs)) => template_spec(rs),
        Err(message) => return Outcome::bad_request(message),
    };
    match old.map(|old| parse::<ReplicaSet>(old, &format!("the old {what}"))) {
        Some(Ok((_, old_rs))) => judge_update(&spec, &template_spec(old_rs), &what, contract),
        Some(Err(message)) => Outcome::bad_request(message),
        None => verdict(&rules::check(&spec, contract), &what, Vec::new()),
    }
}

/// An update that leaves the resources as they were is accepted, with a warning if they
/// break the contract: existing objects must never be locked (a ReplicaSet adopts a legacy
/// BestEffort pod by updating its ownerReferences).
fn judge_update(spec: &PodSpec, old: &PodSpec, what: &str, contract: &Contract) -> Outcome {
    let violations = rules::check(spec, contract);
    if rules::resources_by_container(spec) != rules::resources_by_container(old) {
        return verdict(&violations, what, Vec::new());
    }
    let warnings = if violations.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "{what} does not meet the jump-pod contract (accepted: its resources did not change): {}",
            rules::describe(&violations)
        )]
    };
    Outcome::Accept { warnings }
}

fn verdict(violations: &[Violation], what: &str, warnings: Vec<String>) -> Outcome {
    if violations.is_empty() {
        Outcome::Accept { warnings }
    } else {
        Outcome::reject(format!(
            "{what} does not meet the jump-pod contract: {}",
            rules::describe(violations)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    fn raw(value: &Value) -> Box<RawValue> {
        RawValue::from_string(value.to_string()).unwrap()
    }

    fn run(
        kind: (&str, &str),
        operation: &str,
        object: &Value,
        old: Option<&Value>,
        settings: &Value,
    ) -> Outcome {
        let (object, old, settings) = (raw(object), old.map(raw), raw(settings));
        review(
            &Request {
                group: kind.0,
                kind: kind.1,
                operation,
                name: None,
                object: Some(&object),
                old_object: old.as_deref(),
            },
            Some(&settings),
        )
    }

    const POD: (&str, &str) = ("", "Pod");
    const RS: (&str, &str) = ("apps", "ReplicaSet");

    fn guaranteed() -> Value {
        json!({"requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "64Mi"},
               "limits": {"cpu": "500m", "memory": "1Gi"}})
    }

    fn jump_pod(resources: Value) -> Value {
        json!({"metadata": {"name": "dstack-main-ssh-jump-pod-abcde",
                            "labels": schema::current_labels("dstack-main-ssh-jump-pod", "main")},
               "spec": {"containers": [{"name": "sshd", "resources": resources}]}})
    }

    fn legacy_pod() -> Value {
        json!({"metadata": {"name": "dstack-main-ssh-jump-pod",
                            "labels": {"app.kubernetes.io/name": "dstack-main-ssh-jump-pod"}},
               "spec": {"containers": [{"name": "sshd"}]}})
    }

    fn replica_set(resources: Value) -> Value {
        json!({"metadata": {"name": "dstack-main-ssh-jump-pod"},
               "spec": {"template": {"metadata": {"labels": {"app.kubernetes.io/name": "dstack-ssh-proxy"}},
                                     "spec": {"containers": [{"name": "sshd", "resources": resources}]}}}})
    }

    fn is_accept(outcome: &Outcome) -> bool {
        matches!(outcome, Outcome::Accept { warnings } if warnings.is_empty())
    }

    #[test]
    fn a_pod_that_is_not_a_jump_pod_is_accepted_without_reading_its_spec() {
        let pod = json!({"metadata": {"name": "web", "labels": {"app.kubernetes.io/name": "web"}},
                         "spec": "not a pod spec"});
        assert!(is_accept(&run(POD, "CREATE", &pod, None, &json!({}))));
    }

    #[rstest]
    #[case::delete("DELETE")]
    #[case::connect("CONNECT")]
    fn operations_other_than_create_and_update_are_accepted(#[case] operation: &str) {
        assert!(is_accept(&run(
            POD,
            operation,
            &jump_pod(json!({})),
            None,
            &json!({})
        )));
    }

    #[test]
    fn a_conforming_jump_pod_is_accepted_as_is() {
        assert!(is_accept(&run(
            POD,
            "CREATE",
            &jump_pod(guaranteed()),
            None,
            &json!({})
        )));
    }

    #[test]
    fn a_bare_legacy_pod_is_mutated_into_a_conforming_one() {
        let Outcome::Mutate { object, warnings } =
            run(POD, "CREATE", &legacy_pod(), None, &json!({}))
        else {
            panic!("expected a mutation");
        };
        assert!(warnings.is_empty());
        assert_eq!(
            object["metadata"]["labels"]["k8s.dstack.ai/project"],
            "main"
        );
        assert_eq!(object["spec"]["containers"][0]["resources"], guaranteed());
    }

    #[test]
    fn with_mutation_off_a_bare_legacy_pod_is_rejected_naming_what_is_missing() {
        let Outcome::Reject { message, .. } = run(
            POD,
            "CREATE",
            &legacy_pod(),
            None,
            &json!({"mutate": false}),
        ) else {
            panic!("expected a rejection");
        };
        assert!(message.contains("mutation is off"), "{message}");
        assert!(
            message.contains("resources.limits.memory is missing (would be set to 1Gi)"),
            "{message}"
        );
    }

    #[test]
    fn an_explicit_value_below_the_minimum_is_rejected_even_when_other_values_are_filled() {
        let outcome = run(
            POD,
            "CREATE",
            &jump_pod(json!({"requests": {"cpu": "50m"}})),
            None,
            &json!({}),
        );
        let Outcome::Reject {
            message,
            code: None,
        } = outcome
        else {
            panic!("expected a rejection, got {outcome:?}");
        };
        assert!(
            message.contains("cpu request 50m is below the minimum 100m"),
            "{message}"
        );
    }

    #[test]
    fn an_update_that_keeps_broken_resources_is_accepted_with_a_warning() {
        let old = legacy_pod();
        let mut new = old.clone();
        new["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": "dstack-main-ssh-jump-pod", "uid": "u", "controller": true}]);
        let Outcome::Accept { warnings } = run(POD, "UPDATE", &new, Some(&old), &json!({})) else {
            panic!("expected acceptance");
        };
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("accepted: its resources did not change"),
            "{warnings:?}"
        );
    }

    #[test]
    fn an_update_that_changes_resources_is_judged() {
        let old = jump_pod(guaranteed());
        // Only the cpu limit moves away from the request: the rejection names exactly that.
        let new = jump_pod(json!({
            "requests": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "64Mi"},
            "limits": {"cpu": "2", "memory": "1Gi"}}));
        let Outcome::Reject { message, .. } = run(POD, "UPDATE", &new, Some(&old), &json!({}))
        else {
            panic!("expected a rejection");
        };
        assert_eq!(
            message,
            "jump pod \"dstack-main-ssh-jump-pod-abcde\" does not meet the jump-pod contract: \
             container \"sshd\": cpu request 1 is not equal to its limit 2 \
             (Guaranteed QoS needs request == limit)"
        );
    }

    #[test]
    fn a_replica_set_is_judged_by_its_template_and_never_mutated() {
        assert!(is_accept(&run(
            RS,
            "CREATE",
            &replica_set(guaranteed()),
            None,
            &json!({})
        )));
        let Outcome::Reject { message, .. } =
            run(RS, "CREATE", &replica_set(json!({})), None, &json!({}))
        else {
            panic!("expected a rejection");
        };
        assert!(
            message.starts_with(
                "the pod template of jump-pod ReplicaSet \"dstack-main-ssh-jump-pod\""
            ),
            "{message}"
        );
    }

    #[test]
    fn settings_are_read_only_for_jump_pods_and_invalid_ones_reject() {
        let bad = json!({"cpu": {"minimum": "1m"}});
        let ordinary = json!({"metadata": {"name": "web"}});
        assert!(is_accept(&run(POD, "CREATE", &ordinary, None, &bad)));
        let outcome = run(POD, "CREATE", &jump_pod(guaranteed()), None, &bad);
        assert!(
            matches!(outcome, Outcome::Reject { code: Some(400), ref message } if message.contains("cpu.minimum")),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_pod_a_controller_is_creating_is_named_by_its_generate_name() {
        let mut pod = jump_pod(json!({}));
        pod["metadata"]["name"] = Value::Null;
        pod["metadata"]["generateName"] = json!("dstack-main-ssh-jump-pod-");
        let Outcome::Reject { message, .. } =
            run(POD, "CREATE", &pod, None, &json!({"mutate": false}))
        else {
            panic!("expected a rejection");
        };
        assert!(
            message.starts_with("jump pod \"dstack-main-ssh-jump-pod-<generated>\""),
            "{message}"
        );
    }

    #[test]
    fn a_spec_of_the_wrong_type_is_rejected_naming_the_field() {
        let mut pod = jump_pod(guaranteed());
        pod["spec"]["containers"] = json!("sshd");
        let Outcome::Reject {
            message,
            code: Some(400),
        } = run(POD, "CREATE", &pod, None, &json!({}))
        else {
            panic!("expected a bad request");
        };
        assert!(message.contains("spec.containers"), "{message}");
    }
}
