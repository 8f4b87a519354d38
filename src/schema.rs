//! Names, labels and selectors of dstack's jump pod: the one place that defines them.
//!
//! dstack's PR #3891 moved the jump pod's labels from `app.kubernetes.io/name=<pod name>` alone
//! to the current set (`app.kubernetes.io/name=dstack-ssh-proxy`, the instance, managed-by and
//! project labels), which jumppod's ReplicaSet also gives its pods. Clusters run both schemas
//! side by side, so both are described here.

use std::collections::BTreeMap;

pub const NAME_LABEL: &str = "app.kubernetes.io/name";
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const PROJECT_LABEL: &str = "k8s.dstack.ai/project";

/// `app.kubernetes.io/name` of every current jump pod.
pub const APP_NAME: &str = "dstack-ssh-proxy";
pub const MANAGED_BY: &str = "dstack";
pub const JUMP_POD_SUFFIX: &str = "-ssh-jump-pod";
/// Releases before the prefix named the pod `<project>-ssh-jump-pod`.
pub const NAME_PREFIX: &str = "dstack-";
pub const SSH_PORT: i32 = 22;
pub const DEFAULT_IMAGE: &str = "testcontainers/sshd:1.3.0@sha256:c50c0f59554dcdb2d9e5e705112144428ae9d04ac0af6322b365a18e24213a6a";

/// Which label schema a jump pod (or a pod template) follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Schema {
    /// `app.kubernetes.io/name=dstack-ssh-proxy` (dstack #3891 and later).
    #[serde(rename = "current")]
    Current,
    /// `app.kubernetes.io/name=<its own name>`, the name ending in `-ssh-jump-pod`.
    #[serde(rename = "pre-#3891")]
    Legacy,
}

impl Schema {
    /// How dstack's changelog names the schema.
    pub fn as_str(self) -> &'static str {
        match self {
            Schema::Current => "current",
            Schema::Legacy => "pre-#3891",
        }
    }

    /// The schema of a project's pod, from its labels: current when it carries the instance
    /// label of `jump_pod_name`, legacy when only `app.kubernetes.io/name` names it; None for
    /// a pod of neither (not this project's jump pod).
    pub fn of_labels(labels: &BTreeMap<String, String>, jump_pod_name: &str) -> Option<Schema> {
        let is = |key: &str| labels.get(key).is_some_and(|v| v == jump_pod_name);
        if is(INSTANCE_LABEL) {
            Some(Schema::Current)
        } else if is(NAME_LABEL) {
            Some(Schema::Legacy)
        } else {
            None
        }
    }

    /// The schema a Service's (or a ReplicaSet's) selector selects: exactly
    /// [`current_selector`] or [`legacy_selector`]; None for any other selector.
    pub fn of_selector(selector: &BTreeMap<String, String>, jump_pod_name: &str) -> Option<Schema> {
        if *selector == current_selector(jump_pod_name) {
            Some(Schema::Current)
        } else if *selector == legacy_selector(jump_pod_name) {
            Some(Schema::Legacy)
        } else {
            None
        }
    }
}

/// Decides from metadata alone whether an object is a jump pod, and of which schema:
/// `app` is its `app.kubernetes.io/name` label, `name` the pod's own name (for a template:
/// the template's, else its owner's).
pub fn classify(app: Option<&str>, name: Option<&str>) -> Option<Schema> {
    let app = app?;
    if app == APP_NAME {
        Some(Schema::Current)
    } else if Some(app) == name && app.ends_with(JUMP_POD_SUFFIX) {
        Some(Schema::Legacy)
    } else {
        None
    }
}

/// The CEL expression of an admission webhook's `matchConditions` (GA in Kubernetes 1.30) that
/// holds exactly for what [`classify`] calls a jump pod, as the policy classifies it: a Pod by
/// its own labels and name (the request's name for a pod named by `generateName`), a
/// ReplicaSet by its template's labels and name (else its own name), whatever its own labels.
/// Every other object is admitted by the API server without calling the webhook. Each field
/// is tested with `has` before it is read, the request's name too (absent for a pod named by
/// `generateName`): an expression that errors under `failurePolicy: Fail` refuses the object.
pub fn match_condition() -> String {
    let pod = classified(
        "object.metadata",
        "(has(object.metadata.name) && object.metadata.name != '' ? object.metadata.name : \
         has(request.name) ? request.name : '')",
    );
    let template = classified(
        "object.spec.template.metadata",
        "(has(object.spec.template.metadata.name) ? object.spec.template.metadata.name : \
         has(object.metadata.name) ? object.metadata.name : '')",
    );
    format!(
        "request.kind.kind == 'Pod' ? {pod} : request.kind.kind == 'ReplicaSet' && \
         has(object.spec) && has(object.spec.template) && has(object.spec.template.metadata) && {template}"
    )
}

/// [`classify`] in CEL, for the metadata at `meta` and the name `name`.
fn classified(meta: &str, name: &str) -> String {
    let app = format!("{meta}.labels['{NAME_LABEL}']");
    format!(
        "(has({meta}.labels) && '{NAME_LABEL}' in {meta}.labels && ({app} == '{APP_NAME}' || \
         ({app}.endsWith('{JUMP_POD_SUFFIX}') && {app} == {name})))"
    )
}

/// `dstack-<project>-ssh-jump-pod`.
pub fn jump_pod_name(project: &str) -> String {
    format!("{NAME_PREFIX}{project}{JUMP_POD_SUFFIX}")
}

/// The project a jump pod's name stands for: `dstack-<project>-ssh-jump-pod`, or
/// `<project>-ssh-jump-pod` from releases before the prefix.
pub fn project_of(jump_pod_name: &str) -> Option<&str> {
    let stem = jump_pod_name.strip_suffix(JUMP_POD_SUFFIX)?;
    let project = stem.strip_prefix(NAME_PREFIX).unwrap_or(stem);
    (!project.is_empty()).then_some(project)
}

pub fn container_name(jump_pod_name: &str) -> String {
    format!("{jump_pod_name}-container")
}

pub fn service_name(jump_pod_name: &str) -> String {
    format!("{jump_pod_name}-service")
}

/// The labels every current jump pod carries (and the ReplicaSet template sets).
pub fn current_labels(jump_pod_name: &str, project: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_owned(), APP_NAME.to_owned()),
        (INSTANCE_LABEL.to_owned(), jump_pod_name.to_owned()),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (PROJECT_LABEL.to_owned(), project.to_owned()),
    ])
}

/// Selector of the ReplicaSet and of the current Service.
pub fn current_selector(jump_pod_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(INSTANCE_LABEL.to_owned(), jump_pod_name.to_owned())])
}

/// Selector of a pre-#3891 Service.
pub fn legacy_selector(jump_pod_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(NAME_LABEL.to_owned(), jump_pod_name.to_owned())])
}

/// Why a string cannot be a label value (Kubernetes: at most 63 characters, alphanumerics,
/// `-`, `_` and `.`, starting and ending with an alphanumeric), or None when it can.
pub fn label_value_problem(value: &str) -> Option<&'static str> {
    let bytes = value.as_bytes();
    if bytes.len() > 63 {
        return Some("must be no more than 63 characters");
    }
    let inner_ok = bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let ends_ok = bytes.first().is_none_or(u8::is_ascii_alphanumeric)
        && bytes.last().is_none_or(u8::is_ascii_alphanumeric);
    (!inner_ok || !ends_ok).then_some(
        "a label value must consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[rstest]
    #[case::current_labels_make_a_current_jump_pod(
        &[(NAME_LABEL, APP_NAME)], Some("dstack-p-ssh-jump-pod-x7k2q"), Some(Schema::Current))]
    #[case::name_label_equal_to_own_name_makes_a_legacy_jump_pod(
        &[(NAME_LABEL, "dstack-p-ssh-jump-pod")], Some("dstack-p-ssh-jump-pod"), Some(Schema::Legacy))]
    #[case::unprefixed_legacy_name_is_a_legacy_jump_pod(
        &[(NAME_LABEL, "p-ssh-jump-pod")], Some("p-ssh-jump-pod"), Some(Schema::Legacy))]
    #[case::name_label_of_another_pod_is_not_a_jump_pod(
        &[(NAME_LABEL, "dstack-p-ssh-jump-pod")], Some("impostor"), None)]
    #[case::own_name_without_the_suffix_is_not_a_jump_pod(
        &[(NAME_LABEL, "nginx")], Some("nginx"), None)]
    #[case::no_name_label_is_not_a_jump_pod(&[("app", "x")], Some("x"), None)]
    fn classifies_from_metadata(
        #[case] pairs: &[(&str, &str)],
        #[case] name: Option<&str>,
        #[case] expected: Option<Schema>,
    ) {
        let labels = labels(pairs);
        assert_eq!(
            classify(labels.get(NAME_LABEL).map(String::as_str), name),
            expected
        );
    }

    #[rstest]
    #[case::the_instance_label_is_the_current_schema(
        &[(INSTANCE_LABEL, "dstack-p-ssh-jump-pod"), (NAME_LABEL, APP_NAME)], Some(Schema::Current))]
    #[case::only_the_name_label_is_the_legacy_schema(
        &[(NAME_LABEL, "dstack-p-ssh-jump-pod")], Some(Schema::Legacy))]
    #[case::another_projects_instance_is_neither(
        &[(INSTANCE_LABEL, "dstack-q-ssh-jump-pod")], None)]
    #[case::no_labels_is_neither(&[], None)]
    fn tells_a_projects_pod_schema_from_its_labels(
        #[case] pairs: &[(&str, &str)],
        #[case] expected: Option<Schema>,
    ) {
        assert_eq!(
            Schema::of_labels(&labels(pairs), "dstack-p-ssh-jump-pod"),
            expected
        );
    }

    #[rstest]
    #[case::the_instance_selector_is_current(&[(INSTANCE_LABEL, "dstack-p-ssh-jump-pod")], Some(Schema::Current))]
    #[case::the_name_selector_is_legacy(&[(NAME_LABEL, "dstack-p-ssh-jump-pod")], Some(Schema::Legacy))]
    #[case::a_wider_selector_is_neither(
        &[(INSTANCE_LABEL, "dstack-p-ssh-jump-pod"), ("tier", "x")], None)]
    #[case::an_empty_selector_is_neither(&[], None)]
    fn tells_a_selectors_schema(#[case] pairs: &[(&str, &str)], #[case] expected: Option<Schema>) {
        assert_eq!(
            Schema::of_selector(&labels(pairs), "dstack-p-ssh-jump-pod"),
            expected
        );
    }

    #[rstest]
    #[case::prefixed("dstack-main-ssh-jump-pod", Some("main"))]
    #[case::unprefixed("main-ssh-jump-pod", Some("main"))]
    #[case::not_a_jump_pod("main", None)]
    #[case::empty_project("dstack--ssh-jump-pod", None)]
    fn finds_the_project_in_a_name(#[case] name: &str, #[case] project: Option<&str>) {
        assert_eq!(project_of(name), project);
    }

    #[test]
    fn names_follow_dstack() {
        let name = jump_pod_name("main");
        assert_eq!(name, "dstack-main-ssh-jump-pod");
        assert_eq!(service_name(&name), "dstack-main-ssh-jump-pod-service");
        assert_eq!(container_name(&name), "dstack-main-ssh-jump-pod-container");
        assert_eq!(current_labels(&name, "main").len(), 4);
    }

    #[rstest]
    #[case::ordinary("dstack-main-ssh-jump-pod", true)]
    #[case::empty("", true)]
    #[case::sixty_four_characters(&"a".repeat(64), false)]
    #[case::leading_dash("-a", false)]
    #[case::slash("a/b", false)]
    fn checks_label_values(#[case] value: &str, #[case] valid: bool) {
        assert_eq!(label_value_problem(value).is_none(), valid);
    }
}
