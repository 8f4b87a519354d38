//! What a jump pod is missing at creation, and how to fill it in.
//!
//! The plan is computed from the borrowed view of the pod (the resources and labels) or from
//! the typed pod (those and the [kit](crate::kit)), and applied to the pod's JSON value:
//! rewriting the object through typed structs would drop fields this crate's Kubernetes
//! version does not know, and the JSONPatch the policy-server derives would then remove them.

use crate::json::{self, Json};
use crate::kit::{self, Kit, object_at};
use crate::rules::{Resource, Side};
use crate::schema::{self, Schema};
use crate::settings::Contract;
use crate::view::{Amounts, ContainerView, List, Pairs, PodView, QuantityText, SpecView, Text};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value};
use std::borrow::Cow;

/// A value to write where nothing was set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fill {
    Resource {
        init: bool,
        index: usize,
        container: String,
        resource: Resource,
        side: Side,
        value: String,
    },
    Label {
        key: &'static str,
        value: String,
    },
}

/// Everything a pod lacks, plus what could not be filled in and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mutation {
    /// What the contract requires: with mutation off, a pod lacking it is rejected.
    pub fills: Vec<Fill>,
    /// What the kit adds: never required (with mutation or the kit off, none is planned).
    /// Planned from the typed pod only, and written only into a `Value`.
    pub kit: Option<Kit>,
    pub warnings: Vec<String>,
}

impl Mutation {
    pub fn is_empty(&self) -> bool {
        self.fills.is_empty() && self.kit.is_none()
    }

    /// One item per missing value, as the rejection when mutation is switched off lists them
    /// (`crate::verdict` renders each).
    pub fn describe_missing(&self) -> String {
        self.fills
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Writes the fills into a pod's JSON (a `Value`, or the borrowed [`Json`] a mutation
    /// returns), creating the maps on the way; and the kit, into a `Value` (a mutation with a
    /// kit is written into nothing else).
    pub fn apply<'a, D: Document<'a>>(&'a self, pod: &mut D) {
        self.apply_fills(pod);
        if let (Some(kit), Some(pod)) = (&self.kit, pod.value_mut()) {
            kit.apply(pod);
        }
    }

    /// Writes the mutation into a typed pod: what a host does to a pod it creates itself (a
    /// copy of dstack's jump pod). Through the pod's JSON, as the policy writes it.
    pub fn apply_to_pod(&self, pod: &mut Pod) -> Result<(), serde_json::Error> {
        if self.is_empty() {
            return Ok(());
        }
        let mut value = serde_json::to_value(&*pod)?;
        self.apply(&mut value);
        *pod = serde_json::from_value(value)?;
        Ok(())
    }

    fn apply_fills<'a, D: Document<'a>>(&'a self, pod: &mut D) {
        for fill in &self.fills {
            match fill {
                Fill::Resource {
                    init,
                    index,
                    resource,
                    side,
                    value,
                    ..
                } => {
                    let list = if *init {
                        "initContainers"
                    } else {
                        "containers"
                    };
                    let Some(container) = pod
                        .member_mut("spec")
                        .and_then(|spec| spec.member_mut(list))
                        .and_then(|list| list.element_mut(*index))
                        .and_then(D::as_map_mut)
                    else {
                        continue;
                    };
                    let map = D::map_at(D::map_at(container, "resources"), side.field());
                    D::set(map, resource.key(), value);
                }
                Fill::Label { key, value } => {
                    let Some(root) = pod.as_map_mut() else {
                        continue;
                    };
                    let labels = D::map_at(D::map_at(root, "metadata"), "labels");
                    D::set(labels, key, value);
                }
            }
        }
    }
}

/// A JSON document [`Mutation::apply`] writes into: one walk for a `Value` and for a borrowed
/// [`Json`], so the two cannot differ. `'a`: what the document may borrow (the fills' values).
pub trait Document<'a>: Sized {
    type Map;
    /// An object's member (None for any other value).
    fn member_mut(&mut self, key: &str) -> Option<&mut Self>;
    /// An array's element (None for any other value).
    fn element_mut(&mut self, index: usize) -> Option<&mut Self>;
    fn as_map_mut(&mut self) -> Option<&mut Self::Map>;
    /// The object at `key`, replacing an absent or non-object value with `{}`.
    fn map_at<'m>(map: &'m mut Self::Map, key: &'static str) -> &'m mut Self::Map;
    /// Sets `key` to the string `value`.
    fn set(map: &mut Self::Map, key: &'static str, value: &'a str);
    /// The document as a `Value`, the one document the kit is written into.
    fn value_mut(&mut self) -> Option<&mut Value> {
        None
    }
}

impl Document<'_> for Value {
    type Map = Map<String, Value>;

    fn member_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.get_mut(key)
    }

    fn element_mut(&mut self, index: usize) -> Option<&mut Value> {
        self.get_mut(index)
    }

    fn as_map_mut(&mut self) -> Option<&mut Self::Map> {
        self.as_object_mut()
    }

    fn map_at<'m>(map: &'m mut Self::Map, key: &'static str) -> &'m mut Self::Map {
        object_at(map, key)
    }

    fn set(map: &mut Self::Map, key: &'static str, value: &str) {
        map.insert(key.to_owned(), Value::String(value.to_owned()));
    }

    fn value_mut(&mut self) -> Option<&mut Value> {
        Some(self)
    }
}

impl<'a> Document<'a> for Json<'a> {
    type Map = json::Members<'a>;

    fn member_mut(&mut self, key: &str) -> Option<&mut Json<'a>> {
        Json::member_mut(self, key)
    }

    fn element_mut(&mut self, index: usize) -> Option<&mut Json<'a>> {
        Json::element_mut(self, index)
    }

    fn as_map_mut(&mut self) -> Option<&mut Self::Map> {
        self.as_object_mut()
    }

    fn map_at<'m>(map: &'m mut Self::Map, key: &'static str) -> &'m mut Self::Map {
        json::object_at(map, key)
    }

    fn set(map: &mut Self::Map, key: &'static str, value: &'a str) {
        json::insert(map, key, Json::String(Cow::Borrowed(value)));
    }
}

impl Mutation {
    /// Adds the resource fills to the view of the spec they were planned from, as [`apply`]
    /// adds them to its JSON: the mutated pod is judged without reading it again.
    ///
    /// [`apply`]: Mutation::apply
    pub fn apply_to_view(&self, spec: &mut SpecView<'_>) {
        for fill in &self.fills {
            let Fill::Resource {
                init,
                index,
                resource,
                side,
                value,
                ..
            } = fill
            else {
                continue;
            };
            let list = if *init {
                &mut spec.init_containers
            } else {
                &mut spec.containers
            };
            let Some(container) = list.as_mut().and_then(|l| l.get_mut(*index)) else {
                continue;
            };
            let resources = container.resources.get_or_insert_with(Default::default);
            let map = match side {
                Side::Request => &mut resources.requests,
                Side::Limit => &mut resources.limits,
            };
            map.get_or_insert_with(|| Pairs(Vec::new())).0.push((
                Text(Cow::Borrowed(resource.key())),
                QuantityText(Cow::Owned(value.clone())),
            ));
        }
    }
}

/// What a jump pod of the given schema needs at creation, the kit among it. Values already set
/// are never rewritten (the kit only raises the grace period): if they break a rule, the rules
/// reject them.
pub fn plan(pod: &Pod, schema: Schema, contract: &Contract) -> Mutation {
    let mut mutation = plan_view(&PodView::of_pod(pod), schema, contract);
    mutation.kit = kit::plan(pod, contract);
    mutation
}

/// Plans what a created jump pod needs and writes it into the typed pod: what a host applies
/// to a pod it creates from a copy of dstack's (whose own creation the policy mutated, or
/// not). Returns what was added; the pod is unchanged where it cannot be written.
pub fn fill_pod(
    pod: &mut Pod,
    schema: Schema,
    contract: &Contract,
) -> Result<Mutation, serde_json::Error> {
    let mutation = plan(pod, schema, contract);
    mutation.apply_to_pod(pod)?;
    Ok(mutation)
}

/// [`plan`] over the borrowed view of a pod, without the kit (the view does not read what the
/// kit needs: the ports, hooks, probes, volumes and command).
pub fn plan_view(pod: &PodView<'_>, schema: Schema, contract: &Contract) -> Mutation {
    let mut mutation = Mutation::default();
    if let Some(spec) = &pod.spec {
        for (list, index, container) in spec.all() {
            let init = list == List::InitContainers;
            fill_resources(container, init, index, contract, &mut mutation.fills);
        }
    }
    if schema == Schema::Legacy && !pod.is_controlled() {
        fill_labels(pod, &mut mutation);
    }
    mutation
}

fn fill_resources(
    container: &ContainerView<'_>,
    init: bool,
    index: usize,
    contract: &Contract,
    fills: &mut Vec<Fill>,
) {
    let (requests, limits) = (container.requests(), container.limits());
    let get = |map: Option<&Amounts<'_>>, resource: Resource| {
        map.and_then(|m| m.get(resource.key()))
            .map(|q| q.0.to_string())
    };
    let mut fill = |resource, side, value: String| {
        fills.push(Fill::Resource {
            init,
            index,
            container: container.name().to_owned(),
            resource,
            side,
            value,
        })
    };
    for (resource, default) in [
        (Resource::Cpu, &contract.cpu.default),
        (Resource::Memory, &contract.memory.default),
    ] {
        match (get(requests, resource), get(limits, resource)) {
            (None, None) => {
                fill(resource, Side::Request, default.text.clone());
                fill(resource, Side::Limit, default.text.clone());
            }
            (Some(request), None) => fill(resource, Side::Limit, request),
            // A limit alone: the API server has already defaulted the request to it.
            (_, Some(_)) => {}
        }
    }
    let storage = Resource::EphemeralStorage;
    if !init && get(requests, storage).is_none() && get(limits, storage).is_none() {
        fill(
            storage,
            Side::Request,
            contract.ephemeral_storage_request.text.clone(),
        );
    }
}

/// Brings a bare pre-#3891 pod into the labelled schema so a ReplicaSet can adopt it. Its
/// `app.kubernetes.io/name` stays: a pre-#3891 Service still selects on it.
fn fill_labels(pod: &PodView<'_>, mutation: &mut Mutation) {
    let name = pod.name().unwrap_or_default();
    let labels = pod.labels();
    let wanted = [
        (schema::INSTANCE_LABEL, Some(name)),
        (schema::MANAGED_BY_LABEL, Some(schema::MANAGED_BY)),
        (schema::PROJECT_LABEL, schema::project_of(name)),
    ];
    for (key, value) in wanted {
        if labels.is_some_and(|l| l.contains_key(key)) {
            continue;
        }
        let Some(value) = value else {
            mutation.warnings.push(format!(
                "label {key} not set: no project can be read from the pod name {name:?}"
            ));
            continue;
        };
        match schema::label_value_problem(value) {
            None => mutation.fills.push(Fill::Label {
                key,
                value: value.to_owned(),
            }),
            Some(problem) => mutation.warnings.push(format!(
                "label {key} not set: {value:?} is not a valid label value ({problem})"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules;
    use serde_json::json;

    fn legacy_pod(name: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": name}},
            "spec": {"containers": [{"name": format!("{name}-container"), "image": "sshd"}]}
        })
    }

    fn typed(value: &Value) -> Pod {
        serde_json::from_value(value.clone()).unwrap()
    }

    #[test]
    fn a_bare_legacy_pod_gets_labels_and_guaranteed_resources() {
        let mut pod = legacy_pod("dstack-main-ssh-jump-pod");
        let mutation = plan(&typed(&pod), Schema::Legacy, &Contract::default());
        mutation.apply(&mut pod);
        assert_eq!(
            pod["metadata"]["labels"],
            json!({
                "app.kubernetes.io/name": "dstack-main-ssh-jump-pod",
                "app.kubernetes.io/instance": "dstack-main-ssh-jump-pod",
                "app.kubernetes.io/managed-by": "dstack",
                "k8s.dstack.ai/project": "main",
            })
        );
        assert_eq!(
            pod["spec"]["containers"][0]["resources"],
            json!({
                "requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "64Mi"},
                "limits": {"cpu": "500m", "memory": "1Gi"},
            })
        );
        assert!(mutation.warnings.is_empty());
        let spec = typed(&pod).spec.unwrap();
        assert_eq!(rules::check(&spec, &Contract::default()), vec![]);
    }

    #[test]
    fn the_view_with_the_fills_is_the_view_of_the_mutated_json() {
        let mut pod = legacy_pod("dstack-main-ssh-jump-pod");
        pod["spec"]["containers"][0]["resources"] =
            json!({"requests": {"cpu": "250m"}, "limits": null});
        pod["spec"]["initContainers"] = json!([{"name": "init"}]);
        let text = pod.to_string();
        let view = PodView::read(&text).unwrap();
        let mutation = plan_view(&view, Schema::Legacy, &Contract::default());
        let mut spec = view.spec.clone().unwrap();
        mutation.apply_to_view(&mut spec);
        mutation.apply(&mut pod);
        let mutated = pod.to_string();
        let expected = PodView::read(&mutated).unwrap().spec.unwrap();
        let sorted = |spec: &SpecView| -> Vec<(String, Vec<(String, String)>)> {
            spec.all()
                .map(|(_, _, c)| {
                    let mut pairs: Vec<_> = [("requests", c.requests()), ("limits", c.limits())]
                        .into_iter()
                        .flat_map(|(side, map)| {
                            map.into_iter().flat_map(|m| m.0.iter()).map(move |(k, v)| {
                                (format!("{side}.{}", k.as_str()), v.0.to_string())
                            })
                        })
                        .collect();
                    pairs.sort();
                    (c.name().to_owned(), pairs)
                })
                .collect()
        };
        assert_eq!(sorted(&spec), sorted(&expected));
    }

    #[test]
    fn a_request_alone_gets_an_equal_limit_and_explicit_values_stay() {
        let mut pod = legacy_pod("p-ssh-jump-pod");
        pod["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "0.25", "ephemeral-storage": "1Gi"}, "limits": {"memory": "2Gi"}});
        let mutation = plan(&typed(&pod), Schema::Current, &Contract::default());
        mutation.apply(&mut pod);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"],
            json!({"requests": {"cpu": "0.25", "ephemeral-storage": "1Gi"}, "limits": {"cpu": "0.25", "memory": "2Gi"}})
        );
    }

    #[test]
    fn a_controlled_legacy_pod_keeps_its_labels() {
        let mut pod = legacy_pod("dstack-main-ssh-jump-pod");
        pod["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "u", "controller": true
        }]);
        let mutation = plan(&typed(&pod), Schema::Legacy, &Contract::default());
        // The resources are still filled (five fills), the labels are not: a controlled pod
        // keeps exactly the labels it came with.
        assert_eq!(mutation.fills.len(), 5, "{:?}", mutation.fills);
        assert!(
            mutation
                .fills
                .iter()
                .all(|f| matches!(f, Fill::Resource { .. }))
        );
        mutation.apply(&mut pod);
        assert_eq!(
            pod["metadata"]["labels"],
            json!({"app.kubernetes.io/name": "dstack-main-ssh-jump-pod"})
        );
        assert_eq!(
            pod["spec"]["containers"][0]["resources"],
            json!({
                "requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "64Mi"},
                "limits": {"cpu": "500m", "memory": "1Gi"},
            })
        );
    }

    #[test]
    fn a_label_value_kubernetes_would_reject_is_left_out_with_a_warning() {
        let name = format!("dstack-{}-ssh-jump-pod", "p".repeat(60));
        let pod = legacy_pod(&name);
        let mutation = plan(&typed(&pod), Schema::Legacy, &Contract::default());
        let labels: Vec<_> = mutation
            .fills
            .iter()
            .filter_map(|f| match f {
                Fill::Label { key, .. } => Some(*key),
                _ => None,
            })
            .collect();
        assert_eq!(
            labels,
            vec![schema::MANAGED_BY_LABEL, schema::PROJECT_LABEL]
        );
        assert_eq!(mutation.warnings.len(), 1);
        assert!(mutation.warnings[0].contains(schema::INSTANCE_LABEL));
        assert!(mutation.warnings[0].contains("63 characters"));
    }

    fn conforming_pod() -> Value {
        let mut pod = legacy_pod("dstack-main-ssh-jump-pod");
        pod["metadata"]["labels"] =
            json!(schema::current_labels("dstack-main-ssh-jump-pod", "main"));
        pod["spec"]["containers"][0]["resources"] = json!({
            "requests": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "64Mi"},
            "limits": {"cpu": "1", "memory": "1Gi"}});
        pod
    }

    #[test]
    fn a_conforming_pod_needs_nothing_but_the_kit() {
        let mutation = plan(
            &typed(&conforming_pod()),
            Schema::Current,
            &Contract::default(),
        );
        assert_eq!(mutation.fills, vec![]);
        assert!(mutation.kit.is_some());
        let no_kit = Contract {
            kit: false,
            ..Contract::default()
        };
        assert_eq!(
            plan(&typed(&conforming_pod()), Schema::Current, &no_kit),
            Mutation::default()
        );
    }

    #[test]
    fn a_host_fills_in_a_typed_pod_once() {
        let mut pod = typed(&legacy_pod("dstack-main-ssh-jump-pod"));
        let contract = Contract::default();
        let mutation = fill_pod(&mut pod, Schema::Legacy, &contract).unwrap();
        assert_eq!(mutation.fills.len(), 8, "{:?}", mutation.fills);
        assert!(mutation.kit.is_some());
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(rules::check(spec, &contract), vec![]);
        assert!(
            spec.containers[0]
                .lifecycle
                .as_ref()
                .unwrap()
                .pre_stop
                .is_some()
        );
        assert_eq!(spec.termination_grace_period_seconds, Some(320));
        assert_eq!(
            pod.metadata.labels.as_ref().unwrap()[schema::INSTANCE_LABEL],
            "dstack-main-ssh-jump-pod"
        );
        // What it wrote is the pod the policy would have written.
        let mut value = legacy_pod("dstack-main-ssh-jump-pod");
        plan(&typed(&value), Schema::Legacy, &contract).apply(&mut value);
        assert_eq!(serde_json::to_value(&pod).unwrap(), value);
        // Filled in once: a second time adds nothing.
        let again = fill_pod(&mut pod, Schema::Legacy, &contract).unwrap();
        assert!(again.is_empty(), "{again:?}");
    }

    #[test]
    fn missing_values_are_described_for_a_strict_rejection() {
        let pod = legacy_pod("dstack-main-ssh-jump-pod");
        let text = plan(&typed(&pod), Schema::Legacy, &Contract::default()).describe_missing();
        assert!(text.contains("container \"dstack-main-ssh-jump-pod-container\": resources.requests.cpu is missing (would be set to 500m)"), "{text}");
        assert!(
            text.contains("label app.kubernetes.io/instance is missing"),
            "{text}"
        );
    }
}
