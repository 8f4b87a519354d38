//! The verdict on one admission request: which objects are judged, and how.
//!
//! Every pod in the policy's scope passes through [`judge`], the one path from a request to
//! its verdict. The object comes read one of two ways: as raw JSON (the full read), or as the
//! borrowed head of a pod within the payload (the one-pass read: metadata read, spec kept raw).
//! Either way scope, classification and the settings are decided here once; only a jump pod
//! (or a jump-pod ReplicaSet) is read further, and where the head cannot be judged exactly as
//! the typed parse would judge it, the full read decides. So does it for a jump pod created
//! with the kit on: the kit is planned from the typed pod (`crate::kit`).

use crate::json::Json;
use crate::mutate::{self, Mutation};
use crate::outlined::Outlined;
use crate::rules::{self, Violation};
use crate::schema::{self, Schema};
use crate::settings::{Contract, Settings};
use crate::splice::{Checked, Span};
use crate::verdict::{Mutated, Rejection, Verdict, Warning};
use crate::view::{self, PodHead, PodView, SpecView, Text};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The parts of an AdmissionRequest the verdict depends on.
pub struct Request<'r, 'a> {
    /// `request.kind.group` and `request.kind.kind`.
    pub group: &'r str,
    pub kind: &'r str,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'r str,
    /// `request.name`, used when the object has no name yet.
    pub name: Option<&'r str>,
    pub object: Option<Object<'r, 'a>>,
}

/// How the request's object was read.
pub enum Object<'r, 'a> {
    /// The object's JSON and the old object's (the full read): every request is judged from
    /// them.
    Raw {
        object: &'a RawValue,
        old: Option<&'a RawValue>,
    },
    /// A pod's head, read within the payload (the one-pass read).
    Head {
        pod: PodHead<'a>,
        /// The whole payload the head was read from.
        payload: &'a [u8],
        /// Finds the object's JSON in the payload: only a mutation needs it (it returns the
        /// pod whole).
        raw_object: &'r dyn Fn() -> Option<PodText<'a>>,
        /// The verdict of the full read, where the head cannot be judged exactly as the typed
        /// parse would judge it (updates, ReplicaSets, deep nesting, what the view cannot read).
        full: &'r dyn Fn() -> Verdict,
    },
}

/// A created pod's JSON, which a mutation returns with the fills.
pub enum PodText<'a> {
    /// Found in a checked payload.
    Checked(Span<'a>),
    /// Any other JSON.
    Raw(&'a RawValue),
}

/// A pod's or a pod template's metadata, as far as classification reads it. More lenient than
/// the view's (any number of labels, duplicates of other labels): the full read names only
/// what k8s-openapi would refuse.
#[derive(Deserialize)]
struct WithMetadata<'a> {
    #[serde(borrow)]
    metadata: Option<Metadata<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metadata<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    /// A pod a controller creates has no name yet at admission, only this prefix.
    #[serde(borrow)]
    generate_name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    labels: Option<Labels<'a>>,
}

#[derive(Deserialize)]
struct Labels<'a> {
    #[serde(borrow, rename = "app.kubernetes.io/name")]
    app: Option<Cow<'a, str>>,
}

impl Metadata<'_> {
    fn app(&self) -> Option<&str> {
        self.labels.as_ref()?.app.as_deref()
    }
}

#[derive(Deserialize)]
struct ReplicaSetMetadata<'a> {
    #[serde(borrow)]
    metadata: Option<Metadata<'a>>,
    #[serde(borrow)]
    spec: Option<TemplateOf<'a>>,
}

#[derive(Deserialize)]
struct TemplateOf<'a> {
    #[serde(borrow)]
    template: Option<WithMetadata<'a>>,
}

/// What the policy judges: a pod or a ReplicaSet being created or updated. Every other
/// request is accepted as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    Pod,
    ReplicaSet,
    Other,
}

fn scope(operation: &str, group: &str, kind: &str) -> Scope {
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
fn judged_name<'a>(own: Option<&'a str>, request: Option<&'a str>) -> Option<&'a str> {
    own.filter(|n| !n.is_empty())
        .or(request.filter(|n| !n.is_empty()))
}

/// A jump pod's (or jump-pod ReplicaSet's) schema and how messages name it.
struct Judged {
    schema: Schema,
    subject: String,
}

/// Judges one request. `settings` are read only when a jump pod is found.
pub fn judge(request: Request<'_, '_>, settings: Option<&RawValue>) -> Verdict {
    let Some(object) = request.object else {
        return Verdict::accept();
    };
    let scope = scope(request.operation, request.group, request.kind);
    let judged = match (scope, &object) {
        (Scope::Other, _) => return Verdict::accept(),
        (Scope::Pod, Object::Raw { object, .. }) => classify_pod(object, request.name),
        (Scope::ReplicaSet, Object::Raw { object, .. }) => classify_replica_set(object),
        (Scope::Pod, Object::Head { pod, .. }) => Ok(classify_head(pod, request.name)),
        (Scope::ReplicaSet, Object::Head { full, .. }) => return full(),
    };
    let judged = match judged {
        Ok(Some(judged)) => judged,
        Ok(None) => return Verdict::accept(),
        Err(message) => return Verdict::unreadable(message),
    };
    let update = request.operation == "UPDATE";
    // The view judges a created pod exactly as the typed parse would; all else is the typed
    // parse's.
    if let Object::Head {
        pod, payload, full, ..
    } = &object
        && (update || !pod.is_a_pod() || !view::nests_less_than(payload, view::NESTING_LIMIT))
    {
        return full();
    }
    let contract = match contract(settings) {
        Ok(contract) => contract,
        Err(verdict) => return verdict,
    };
    // The kit is planned from the typed pod (the view does not read what it needs).
    if let Object::Head { full, .. } = &object
        && contract.adds_kit()
    {
        return full();
    }
    match object {
        Object::Raw { object, old } => {
            let old = old.filter(|_| update);
            match scope {
                Scope::Pod => review_pod(object, old, judged, &contract),
                _ => review_replica_set(object, old, &judged.subject, &contract),
            }
        }
        Object::Head {
            pod,
            raw_object,
            full,
            ..
        } => {
            let Some(pod) = pod.read_spec() else {
                return full();
            };
            match create_pod(&pod, judged.schema, &judged.subject, &contract) {
                Created::Decided(verdict) => verdict,
                Created::Mutate(mutation) => raw_object()
                    .and_then(|text| mutate_pod(text, &pod, mutation, &judged.subject, &contract))
                    .unwrap_or_else(full),
            }
        }
    }
}

fn contract(settings: Option<&RawValue>) -> Result<Contract, Verdict> {
    Settings::from_json(settings.map_or(b"null", |s| s.get().as_bytes()))
        .and_then(|s| s.contract())
        .map_err(|e| Verdict::unreadable(e.to_string()))
}

/// A pod is a jump pod by its `app.kubernetes.io/name` label and its name.
fn jump_pod(app: Option<&str>, name: Option<&str>, generate_name: Option<&str>) -> Option<Judged> {
    let schema = schema::classify(app, name)?;
    Some(Judged {
        schema,
        subject: format!("jump pod {:?}", shown_name(name, generate_name)),
    })
}

fn classify_head(head: &PodHead<'_>, request_name: Option<&str>) -> Option<Judged> {
    let app = head
        .labels()
        .and_then(|l| l.get(schema::NAME_LABEL))
        .map(Text::as_str);
    let generate_name = head
        .metadata
        .as_ref()
        .and_then(|m| m.generate_name.as_ref())
        .map(Text::as_str);
    jump_pod(app, judged_name(head.name(), request_name), generate_name)
}

fn classify_pod(object: &RawValue, request_name: Option<&str>) -> Result<Option<Judged>, String> {
    let head: WithMetadata = serde_json::from_slice(object.get().as_bytes())
        .map_err(|e| format!("cannot read the pod's metadata: {e}"))?;
    let meta = head.metadata.as_ref();
    Ok(jump_pod(
        meta.and_then(Metadata::app),
        judged_name(meta.and_then(|m| m.name.as_deref()), request_name),
        meta.and_then(|m| m.generate_name.as_deref()),
    ))
}

/// Messages name the pod; a generated one by its prefix.
fn shown_name(name: Option<&str>, generate_name: Option<&str>) -> String {
    match (name, generate_name) {
        (Some(name), _) => name.to_owned(),
        (None, Some(prefix)) => format!("{prefix}<generated>"),
        (None, None) => String::new(),
    }
}

fn classify_replica_set(object: &RawValue) -> Result<Option<Judged>, String> {
    let head: ReplicaSetMetadata = serde_json::from_slice(object.get().as_bytes())
        .map_err(|e| format!("cannot read the ReplicaSet's metadata: {e}"))?;
    let own_name = head.metadata.as_ref().and_then(|m| m.name.as_deref());
    let template = head
        .spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref());
    let name = template.and_then(|m| m.name.as_deref()).or(own_name);
    Ok(
        schema::classify(template.and_then(Metadata::app), name).map(|schema| Judged {
            schema,
            subject: format!(
                "the pod template of jump-pod ReplicaSet {:?}",
                own_name.unwrap_or_default()
            ),
        }),
    )
}

/// Parses JSON into a typed object, naming the field that does not fit. Each struct is parsed
/// in a function of its own ([`Outlined`]): the module compiles in a fraction of the memory.
fn typed<T: DeserializeOwned>(value: &Value, what: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(Outlined(value)).map_err(|e| {
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
    judged: Judged,
    contract: &Contract,
) -> Verdict {
    let Judged { schema, subject } = judged;
    if old.is_none()
        && !contract.adds_kit()
        && let Some(view) = PodView::read(object.get())
    {
        return match create_pod(&view, schema, &subject, contract) {
            Created::Decided(verdict) => verdict,
            Created::Mutate(mutation) => {
                mutate_pod(PodText::Raw(object), &view, mutation, &subject, contract)
                    .unwrap_or_else(|| review_pod_typed(object, None, schema, &subject, contract))
            }
        };
    }
    review_pod_typed(object, old, schema, &subject, contract)
}

/// What a created jump pod's view decides, or the mutation it needs.
enum Created {
    Decided(Verdict),
    Mutate(Mutation),
}

fn create_pod(view: &PodView<'_>, schema: Schema, subject: &str, contract: &Contract) -> Created {
    let mutation = mutate::plan_view(view, schema, contract);
    if mutation.is_empty() {
        let violations = view
            .spec
            .as_ref()
            .map(|spec| rules::check_view(spec, contract))
            .unwrap_or_default();
        return Created::Decided(verdict(violations, subject, mutation.warnings));
    }
    if !contract.mutate {
        return Created::Decided(missing(mutation, subject));
    }
    Created::Mutate(mutation)
}

fn missing(mutation: Mutation, subject: &str) -> Verdict {
    Verdict::Reject(Rejection::Missing {
        subject: subject.to_owned(),
        fills: mutation.fills,
    })
}

/// Judges the pod with the fills added to its view and, if that accepts it, writes the fills
/// into its JSON; None where the JSON must be read by the typed parse.
fn mutate_pod(
    object: PodText<'_>,
    view: &PodView<'_>,
    mutation: Mutation,
    subject: &str,
    contract: &Contract,
) -> Option<Verdict> {
    // The kit is written into a `Value` only: the typed parse writes it.
    if mutation.kit.is_some() {
        return None;
    }
    // Read before judging, as the typed parse would refuse what cannot be read.
    let pod = PodJson::read(object)?;
    let mut spec = view.spec.clone().unwrap_or_default();
    mutation.apply_to_view(&mut spec);
    Some(mutated(
        |mutation| pod.write(mutation),
        mutation,
        rules::check_view(&spec, contract),
        subject,
    ))
}

/// A pod's JSON, read to be written back with the fills, each way the value a `Value` would
/// write: its own text with the fills spliced in (checked compact text, the usual case; byte for
/// byte a `Value`'s where the text is serde_json's), read whole but borrowed, or (a document a
/// `Value` reads in a way of its own) into a `Value`.
enum PodJson<'a> {
    Spliced(Span<'a>),
    Borrowed(Json<'a>),
    Value(Value),
}

impl<'a> PodJson<'a> {
    fn read(object: PodText<'a>) -> Option<PodJson<'a>> {
        match object {
            PodText::Checked(span) => Some(PodJson::Spliced(span)),
            PodText::Raw(raw) => Checked::of(raw.get())
                .map(|checked| PodJson::Spliced(checked.whole()))
                .or_else(|| PodJson::whole(raw.get())),
        }
    }

    fn whole(text: &'a str) -> Option<PodJson<'a>> {
        // From bytes, as the policy reads its payload: one instance of serde_json's reader.
        let bytes = text.as_bytes();
        match serde_json::from_slice(bytes) {
            Ok(json) => Some(PodJson::Borrowed(json)),
            Err(_) => serde_json::from_slice(bytes).ok().map(PodJson::Value),
        }
    }

    fn write(self, mutation: &Mutation) -> Result<Mutated, serde_json::Error> {
        match self {
            PodJson::Spliced(span) => match span.fill(mutation) {
                Some(text) => Ok(Mutated::spliced(text)),
                // Checked text that did not open (not seen): read into a `Value` instead.
                None => PodJson::Value(serde_json::from_str(span.text())?).write(mutation),
            },
            PodJson::Borrowed(json) => {
                // As long as the fills it borrows.
                let mut json: Json<'_> = json;
                mutation.apply(&mut json);
                Mutated::write(&json)
            }
            PodJson::Value(mut value) => {
                mutation.apply(&mut value);
                Mutated::write(&value)
            }
        }
    }
}

/// The verdict on a mutated pod: its violations after the fills, else the pod as changed
/// (written only then).
fn mutated(
    write: impl FnOnce(&Mutation) -> Result<Mutated, serde_json::Error>,
    mutation: Mutation,
    violations: Vec<Violation>,
    subject: &str,
) -> Verdict {
    match verdict(violations, subject, Vec::new()) {
        Verdict::Accept { .. } => match write(&mutation) {
            Ok(object) => Verdict::Mutate {
                object,
                warnings: label_warnings(mutation.warnings),
            },
            // serde_json writes any document it read.
            Err(e) => Verdict::unreadable(format!("cannot write the mutated {subject}: {e}")),
        },
        rejection => rejection,
    }
}

/// The typed parse of the whole pod: updates, and what the view leaves to it (it names
/// a field of the wrong type).
fn review_pod_typed(
    object: &RawValue,
    old: Option<&RawValue>,
    schema: Schema,
    subject: &str,
    contract: &Contract,
) -> Verdict {
    let (mut value, pod) = match parse::<Pod>(object, subject) {
        Ok(parsed) => parsed,
        Err(message) => return Verdict::unreadable(message),
    };
    let no_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&no_spec);
    if let Some(old) = old {
        return match parse::<Pod>(old, &format!("the old {subject}")) {
            Ok((_, old_pod)) => judge_update(
                rules::check(spec, contract),
                spec,
                &old_pod.spec.unwrap_or_default(),
                subject,
            ),
            Err(message) => Verdict::unreadable(message),
        };
    }
    let mutation = mutate::plan(&pod, schema, contract);
    if mutation.is_empty() {
        return verdict(rules::check(spec, contract), subject, mutation.warnings);
    }
    if !contract.mutate {
        return missing(mutation, subject);
    }
    mutation.apply(&mut value);
    let changed: Pod = match typed(&value, subject) {
        Ok(pod) => pod,
        Err(message) => return Verdict::unreadable(message),
    };
    let violations = rules::check(&changed.spec.unwrap_or_default(), contract);
    mutated(|_| Mutated::write(&value), mutation, violations, subject)
}

fn review_replica_set(
    object: &RawValue,
    old: Option<&RawValue>,
    subject: &str,
    contract: &Contract,
) -> Verdict {
    let template_spec = |rs: ReplicaSet| {
        rs.spec
            .and_then(|s| s.template)
            .and_then(|t| t.spec)
            .unwrap_or_default()
    };
    let spec = match parse::<ReplicaSet>(object, subject) {
        Ok((_, rs)) => template_spec(rs),
        Err(message) => return Verdict::unreadable(message),
    };
    let violations = template_violations(&spec, contract);
    match old.map(|old| parse::<ReplicaSet>(old, &format!("the old {subject}"))) {
        Some(Ok((_, old_rs))) => judge_update(violations, &spec, &template_spec(old_rs), subject),
        Some(Err(message)) => Verdict::unreadable(message),
        None => verdict(violations, subject, Vec::new()),
    }
}

/// What a template breaks in the pods it makes. Templates are never mutated, but with mutation
/// on each pod is, at its creation: a value missing from the template is filled in then, and
/// only what the pods still break counts. With mutation off, the template as it stands.
fn template_violations(spec: &PodSpec, contract: &Contract) -> Vec<Violation> {
    let mut template = SpecView::of_spec(spec);
    if contract.mutate {
        let pod = PodView {
            spec: Some(view::Object(template.clone())),
            ..PodView::default()
        };
        // The current schema: the fills of a template's pods are their resources alone.
        mutate::plan_view(&pod, Schema::Current, contract).apply_to_view(&mut template);
    }
    rules::check_view(&template, contract)
}

/// An update that leaves the resources as they were is accepted, with a warning if they
/// break the contract (`violations`, of the object as updated): existing objects must never be
/// locked (a ReplicaSet adopts a legacy BestEffort pod by updating its ownerReferences).
fn judge_update(
    violations: Vec<Violation>,
    spec: &PodSpec,
    old: &PodSpec,
    subject: &str,
) -> Verdict {
    if rules::resources_by_container(spec) != rules::resources_by_container(old) {
        return verdict(violations, subject, Vec::new());
    }
    let warnings = if violations.is_empty() {
        Vec::new()
    } else {
        vec![Warning::Unchanged {
            subject: subject.to_owned(),
            violations,
        }]
    };
    Verdict::Accept { warnings }
}

fn verdict(violations: Vec<Violation>, subject: &str, warnings: Vec<String>) -> Verdict {
    if violations.is_empty() {
        Verdict::Accept {
            warnings: label_warnings(warnings),
        }
    } else {
        Verdict::Reject(Rejection::Broken {
            subject: subject.to_owned(),
            violations,
        })
    }
}

/// The mutation's notes on labels it could not fill in.
fn label_warnings(warnings: Vec<String>) -> Vec<Warning> {
    warnings.into_iter().map(Warning::LabelNotSet).collect()
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
    ) -> Answer {
        let (object, old, settings) = (raw(object), old.map(raw), raw(settings));
        let verdict = judge(
            Request {
                group: kind.0,
                kind: kind.1,
                operation,
                name: None,
                object: Some(Object::Raw {
                    object: &object,
                    old: old.as_deref(),
                }),
            },
            Some(&settings),
        );
        Answer::of(verdict)
    }

    /// The verdict as the tests read it: messages and warnings as the policy words them.
    #[derive(Debug)]
    enum Answer {
        Accept {
            warnings: Vec<String>,
        },
        Mutate {
            object: Value,
            warnings: Vec<String>,
        },
        Reject {
            message: String,
            code: Option<u16>,
        },
    }

    impl Answer {
        fn of(verdict: Verdict) -> Answer {
            let text = |w: Vec<Warning>| w.iter().map(ToString::to_string).collect();
            match verdict {
                Verdict::Accept { warnings } => Answer::Accept {
                    warnings: text(warnings),
                },
                Verdict::Mutate { object, warnings } => Answer::Mutate {
                    object: object.value().expect("the mutated object reads back"),
                    warnings: text(warnings),
                },
                Verdict::Reject(rejection) => Answer::Reject {
                    message: rejection.message(),
                    code: rejection.code(),
                },
            }
        }
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

    fn is_accept(outcome: &Answer) -> bool {
        matches!(outcome, Answer::Accept { warnings } if warnings.is_empty())
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

    #[rstest]
    #[case::with_the_kit_off(json!({"kit": false}))]
    #[case::with_mutation_off(json!({"mutate": false}))]
    fn a_conforming_jump_pod_is_accepted_as_is(#[case] settings: Value) {
        assert!(is_accept(&run(
            POD,
            "CREATE",
            &jump_pod(guaranteed()),
            None,
            &settings
        )));
    }

    #[test]
    fn a_conforming_jump_pod_gets_the_kit_and_nothing_else() {
        let pod = jump_pod(guaranteed());
        let Answer::Mutate { object, warnings } = run(POD, "CREATE", &pod, None, &json!({})) else {
            panic!("expected a mutation");
        };
        assert!(warnings.is_empty());
        let container = &object["spec"]["containers"][0];
        assert_eq!(container["resources"], guaranteed());
        assert_eq!(
            container["lifecycle"]["preStop"]["exec"]["command"][2],
            crate::kit::pre_stop_script(300)
        );
        assert_eq!(object["spec"]["terminationGracePeriodSeconds"], 320);
        assert_eq!(
            object["spec"]["volumes"][0]["secret"]["secretName"],
            "dstack-main-ssh-jump-pod-authorized-keys"
        );
        // Created again as it came out, it needs nothing more.
        assert!(is_accept(&run(POD, "CREATE", &object, None, &json!({}))));
    }

    #[test]
    fn a_jump_pod_that_breaks_a_rule_is_rejected_with_the_kit_on() {
        let outcome = run(
            POD,
            "CREATE",
            &jump_pod(json!({"requests": {"cpu": "50m"}})),
            None,
            &json!({"sessionDrainSeconds": 5}),
        );
        assert!(
            matches!(&outcome, Answer::Reject { message, code: None } if message.contains("cpu request 50m is below the minimum 100m")),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_bare_legacy_pod_is_mutated_into_a_conforming_one() {
        let Answer::Mutate { object, warnings } =
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
        let Answer::Reject { message, .. } = run(
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
        let Answer::Reject {
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
        let Answer::Accept { warnings } = run(POD, "UPDATE", &new, Some(&old), &json!({})) else {
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
        let Answer::Reject { message, .. } = run(POD, "UPDATE", &new, Some(&old), &json!({}))
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

    #[rstest]
    #[case::a_guaranteed_template_is_accepted(guaranteed(), json!({}), None)]
    #[case::a_template_without_resources_is_accepted_as_its_pods_get_them(json!({}), json!({}), None)]
    #[case::a_request_without_its_limit_is_accepted_as_its_pods_get_the_limit(
        json!({"requests": {"cpu": "250m"}}), json!({}), None)]
    #[case::a_value_set_but_wrong_is_rejected_though_the_rest_would_be_filled_in(
        json!({"requests": {"cpu": "50m"}}), json!({}),
        Some("container \"sshd\": cpu request 50m is below the minimum 100m"))]
    #[case::a_template_without_resources_is_rejected_with_mutation_off(
        json!({}), json!({"mutate": false}),
        Some("container \"sshd\": cpu has no request and no limit"))]
    fn a_replica_set_is_judged_by_the_pods_it_makes_and_never_mutated(
        #[case] resources: Value,
        #[case] settings: Value,
        #[case] rejected_for: Option<&str>,
    ) {
        let outcome = run(RS, "CREATE", &replica_set(resources), None, &settings);
        match rejected_for {
            None => assert!(is_accept(&outcome), "{outcome:?}"),
            Some(problem) => {
                let Answer::Reject { message, .. } = outcome else {
                    panic!("expected a rejection, got {outcome:?}");
                };
                assert!(
                    message.starts_with(
                        "the pod template of jump-pod ReplicaSet \"dstack-main-ssh-jump-pod\" does not meet the jump-pod contract: "
                    ),
                    "{message}"
                );
                assert!(message.contains(problem), "{message}");
            }
        }
    }

    #[rstest]
    #[case::with_mutation_on_nothing_to_warn_of(json!({}), 0)]
    #[case::with_mutation_off_a_warning(json!({"mutate": false}), 1)]
    fn scaling_a_replica_set_whose_template_lacks_resources_is_accepted(
        #[case] settings: Value,
        #[case] warnings: usize,
    ) {
        let old = replica_set(json!({}));
        let mut new = old.clone();
        new["spec"]["replicas"] = json!(0);
        let Answer::Accept { warnings: found } = run(RS, "UPDATE", &new, Some(&old), &settings)
        else {
            panic!("expected acceptance");
        };
        assert_eq!(found.len(), warnings, "{found:?}");
    }

    #[test]
    fn settings_are_read_only_for_jump_pods_and_invalid_ones_reject() {
        let bad = json!({"cpu": {"minimum": "1m"}});
        let ordinary = json!({"metadata": {"name": "web"}});
        assert!(is_accept(&run(POD, "CREATE", &ordinary, None, &bad)));
        let outcome = run(POD, "CREATE", &jump_pod(guaranteed()), None, &bad);
        assert!(
            matches!(outcome, Answer::Reject { code: Some(400), ref message } if message.contains("cpu.minimum")),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_pod_a_controller_is_creating_is_named_by_its_generate_name() {
        let mut pod = jump_pod(json!({}));
        pod["metadata"]["name"] = Value::Null;
        pod["metadata"]["generateName"] = json!("dstack-main-ssh-jump-pod-");
        let Answer::Reject { message, .. } =
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
        let Answer::Reject {
            message,
            code: Some(400),
        } = run(POD, "CREATE", &pod, None, &json!({}))
        else {
            panic!("expected a bad request");
        };
        assert!(message.contains("spec.containers"), "{message}");
    }
}
