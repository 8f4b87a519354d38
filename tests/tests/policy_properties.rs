//! Property tests over generated jump pods: containers and init containers with random
//! subsets of cpu, memory and ephemeral-storage requests and limits, drawn from a pool of
//! quantities whose exact values are known here. Natively through the core (many cases):
//! the verdict agrees with an independent model of the contract, the mutation only adds and
//! its output passes the rules, an update that keeps the resources is never rejected.
//! Through the Wasm (few cases): the module answers exactly what the native policy answers.

mod policy_support;

use jumppod::admission::{Outcome, Request, review};
use jumppod_review::ValidationResponse;
use proptest::prelude::*;
use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value, json};

/// A quantity's text and its exact value in nano-units (None: it does not parse).
type Q = (&'static str, Option<i128>);

const NANO: i128 = 1;
const MILLI: i128 = 1_000_000;
const UNIT: i128 = 1_000_000_000;
const MI: i128 = 1024 * 1024 * UNIT;

const CPU: &[Q] = &[
    ("500m", Some(500 * MILLI)),
    ("0.5", Some(500 * MILLI)),
    ("1", Some(UNIT)),
    ("1e0", Some(UNIT)),
    ("1000m", Some(UNIT)),
    ("100m", Some(100 * MILLI)),
    ("0.1", Some(100 * MILLI)),
    (".1", Some(100 * MILLI)),
    ("100000000n", Some(100 * MILLI)),
    ("99999999n", Some(99_999_999 * NANO)),
    ("99m", Some(99 * MILLI)),
    ("50m", Some(50 * MILLI)),
    ("2", Some(2 * UNIT)),
    ("-1", Some(-UNIT)),
    ("+", Some(0)),
    ("half", None),
    ("1Ki5", None),
    ("NaN", None),
];

const MEMORY: &[Q] = &[
    ("1Gi", Some(1024 * MI)),
    ("1024Mi", Some(1024 * MI)),
    ("1073741824", Some(1024 * MI)),
    ("32Mi", Some(32 * MI)),
    ("33554432", Some(32 * MI)),
    ("31Mi", Some(31 * MI)),
    ("33554431", Some(32 * MI - UNIT)),
    ("512Mi", Some(512 * MI)),
    ("0.5Gi", Some(512 * MI)),
    ("1G", Some(1_000_000_000 * UNIT)),
    ("1e9", Some(1_000_000_000 * UNIT)),
    ("0x10", None),
    ("1 Mi", None),
];

const EPHEMERAL: &[Q] = &[
    ("64Mi", Some(64 * MI)),
    ("67108864", Some(64 * MI)),
    ("63Mi", Some(63 * MI)),
    ("128Mi", Some(128 * MI)),
    ("1Gi", Some(1024 * MI)),
    ("lots", None),
];

const MINIMUMS: [i128; 3] = [100 * MILLI, 32 * MI, 64 * MI];
const KEYS: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

#[derive(Clone, Debug)]
struct Side {
    request: Option<Q>,
    limit: Option<Q>,
}

#[derive(Clone, Debug)]
struct Container {
    /// cpu, memory, ephemeral-storage
    sides: [Side; 3],
    /// How an empty resources stanza is written: absent, `{}` or empty maps.
    shape: u8,
}

#[derive(Clone, Debug)]
struct Pod {
    legacy: bool,
    controlled: bool,
    containers: Vec<Container>,
    init: Vec<Container>,
}

fn side(pool: &'static [Q]) -> impl Strategy<Value = Side> {
    let q = prop::sample::select(pool);
    (
        prop::option::weighted(0.6, q.clone()),
        prop::option::weighted(0.6, q),
    )
        .prop_map(|(request, limit)| Side { request, limit })
}

/// Mostly the shapes that occur (equal pairs, a request alone), sometimes anything.
fn side_biased(pool: &'static [Q]) -> impl Strategy<Value = Side> {
    let q = prop::sample::select(pool);
    prop_oneof![
        2 => side(pool),
        2 => q.clone().prop_map(|q| Side { request: Some(q), limit: Some(q) }),
        1 => q.prop_map(|q| Side { request: Some(q), limit: None }),
        1 => Just(Side { request: None, limit: None }),
    ]
}

fn container() -> impl Strategy<Value = Container> {
    (
        side_biased(CPU),
        side_biased(MEMORY),
        side_biased(EPHEMERAL),
        0u8..3,
    )
        .prop_map(|(cpu, memory, ephemeral, shape)| Container {
            sides: [cpu, memory, ephemeral],
            shape,
        })
}

fn pod() -> impl Strategy<Value = Pod> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(container(), 1..4),
        prop::collection::vec(container(), 0..3),
    )
        .prop_map(|(legacy, controlled, containers, init)| Pod {
            legacy,
            controlled,
            containers,
            init,
        })
}

const NAME: &str = "dstack-main-ssh-jump-pod";

fn container_json(name: String, c: &Container) -> Value {
    let mut requests = Map::new();
    let mut limits = Map::new();
    for (key, side) in KEYS.iter().zip(&c.sides) {
        if let Some((text, _)) = side.request {
            requests.insert((*key).into(), json!(text));
        }
        if let Some((text, _)) = side.limit {
            limits.insert((*key).into(), json!(text));
        }
    }
    let mut container = json!({"name": name, "image": "testcontainers/sshd:1.3.0", "ports": [{"containerPort": 22, "protocol": "TCP"}]});
    match (requests.is_empty() && limits.is_empty(), c.shape) {
        (true, 0) => {}
        (true, 1) => container["resources"] = json!({}),
        _ => {
            let mut resources = Map::new();
            if !requests.is_empty() || c.shape == 2 {
                resources.insert("requests".into(), Value::Object(requests));
            }
            if !limits.is_empty() || c.shape == 2 {
                resources.insert("limits".into(), Value::Object(limits));
            }
            container["resources"] = Value::Object(resources);
        }
    }
    container
}

fn pod_json(pod: &Pod) -> Value {
    let (name, labels) = if pod.legacy {
        (NAME.to_owned(), json!({"app.kubernetes.io/name": NAME}))
    } else {
        (
            format!("{NAME}-x7k2q"),
            json!({"app.kubernetes.io/name": "dstack-ssh-proxy", "app.kubernetes.io/instance": NAME,
                   "app.kubernetes.io/managed-by": "dstack", "k8s.dstack.ai/project": "main"}),
        )
    };
    let mut metadata = json!({"name": name, "namespace": "dstack", "labels": labels,
                              "managedFields": [{"manager": "test", "operation": "Update", "apiVersion": "v1"}]});
    if pod.controlled {
        metadata["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": NAME,
            "uid": "8c1e4b7a-2d9f-4e3b-a6c5-0f7d1b3e9a52", "controller": true, "blockOwnerDeletion": true}]);
    }
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| container_json(format!("sshd-{i}"), c))
        .collect();
    let mut spec = json!({"containers": containers, "restartPolicy": "Always"});
    if !pod.init.is_empty() {
        let init: Vec<Value> = pod
            .init
            .iter()
            .enumerate()
            .map(|(i, c)| container_json(format!("init-{i}"), c))
            .collect();
        spec["initContainers"] = json!(init);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec,
           "status": {"phase": "Pending", "qosClass": "BestEffort"}})
}

/// The contract, modelled independently of the core.
#[derive(Debug, PartialEq)]
enum Expected {
    Accept,
    Mutate,
    Reject,
}

struct Model {
    /// Every rule holds once the missing values are filled in.
    fillable: bool,
    /// Some resource value is missing (a mutation fills it in).
    resource_fill: bool,
}

fn model(pod: &Pod) -> Model {
    let mut fillable = true;
    let mut resource_fill = false;
    let all = pod
        .containers
        .iter()
        .map(|c| (c, false))
        .chain(pod.init.iter().map(|c| (c, true)));
    for (container, init) in all {
        for (i, side) in container.sides.iter().enumerate() {
            let minimum = MINIMUMS[i];
            let at_least = |v: i128| init || v >= minimum;
            if i == 2 {
                if init {
                    continue; // ephemeral storage is not asked of init containers
                }
                match (side.request, side.limit) {
                    (_, Some(_)) => fillable = false,
                    (Some((_, value)), None) => fillable &= value.is_some_and(at_least),
                    (None, None) => resource_fill = true,
                }
                continue;
            }
            match (side.request, side.limit) {
                (None, None) => resource_fill = true,
                (Some((_, request)), None) => {
                    resource_fill = true;
                    fillable &= request.is_some_and(at_least);
                }
                (None, Some((_, limit))) => fillable &= limit.is_some_and(at_least),
                (Some((_, request)), Some((_, limit))) => {
                    fillable &=
                        matches!((request, limit), (Some(r), Some(l)) if r == l && at_least(r));
                }
            }
        }
    }
    Model {
        fillable,
        resource_fill,
    }
}

fn expected(pod: &Pod) -> Expected {
    let model = model(pod);
    let label_fill = pod.legacy && !pod.controlled;
    match (model.fillable, model.resource_fill || label_fill) {
        (false, _) => Expected::Reject,
        (true, true) => Expected::Mutate,
        (true, false) => Expected::Accept,
    }
}

fn judge(operation: &str, object: &Value, old: Option<&Value>) -> Outcome {
    let object: Box<RawValue> = to_raw_value(object).unwrap();
    let old: Option<Box<RawValue>> = old.map(|o| to_raw_value(o).unwrap());
    review(
        &Request {
            group: "",
            kind: "Pod",
            operation,
            name: None,
            object: Some(&object),
            old_object: old.as_deref(),
        },
        None,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_verdict_on_a_created_jump_pod_follows_the_contract(pod in pod()) {
        let object = pod_json(&pod);
        let outcome = judge("CREATE", &object, None);
        let verdict = match &outcome {
            Outcome::Accept { .. } => Expected::Accept,
            Outcome::Mutate { .. } => Expected::Mutate,
            Outcome::Reject { .. } => Expected::Reject,
        };
        prop_assert_eq!(verdict, expected(&pod), "{:?}", outcome);
        match outcome {
            Outcome::Reject { message, code } => {
                prop_assert_eq!(code, None);
                let prefix = format!("jump pod \"{}\" does not meet the jump-pod contract: ", object["metadata"]["name"].as_str().unwrap());
                prop_assert!(message.starts_with(&prefix), "{}", message);
            }
            Outcome::Accept { warnings } => prop_assert!(warnings.is_empty()),
            Outcome::Mutate { object: mutated, warnings } => {
                prop_assert!(warnings.is_empty());
                // The mutation only adds...
                for op in json_patch::diff(&object, &mutated).0 {
                    prop_assert!(matches!(op, json_patch::PatchOperation::Add(_)), "{}", op);
                }
                // ...and what it makes needs nothing more: created again, it is accepted as is.
                let again = judge("CREATE", &mutated, None);
                prop_assert_eq!(again, Outcome::Accept { warnings: vec![] });
            }
        }
    }

    #[test]
    fn an_update_that_keeps_the_resources_is_never_rejected(pod in pod(), label in "[a-z]{1,8}") {
        let old = pod_json(&pod);
        let mut new = old.clone();
        new["metadata"]["labels"]["example.com/touched"] = json!(label);
        let outcome = judge("UPDATE", &new, Some(&old));
        let model = model(&pod);
        let Outcome::Accept { warnings } = outcome else {
            return Err(TestCaseError::fail(format!("an unchanged pod was not accepted: {outcome:?}")));
        };
        // Warned exactly when the pod as it stands breaks a rule.
        prop_assert_eq!(warnings.len(), usize::from(!model.fillable || model.resource_fill), "{:?}", warnings);
    }

    #[test]
    fn a_replicaset_template_is_judged_never_mutated(pod in pod()) {
        let template = pod_json(&pod);
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": NAME, "namespace": "dstack"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/instance": NAME}},
                     "template": {"metadata": {"labels": template["metadata"]["labels"]}, "spec": template["spec"]}}});
        let raw = to_raw_value(&rs).unwrap();
        let outcome = review(&Request { group: "apps", kind: "ReplicaSet", operation: "CREATE", name: Some(NAME), object: Some(&raw), old_object: None }, None);
        let model = model(&pod);
        let rules_hold = model.fillable && !model.resource_fill;
        match outcome {
            Outcome::Accept { warnings } => prop_assert!(rules_hold && warnings.is_empty()),
            Outcome::Reject { .. } => prop_assert!(!rules_hold),
            Outcome::Mutate { .. } => prop_assert!(false, "a ReplicaSet was mutated"),
        }
    }
}

proptest! {
    // Each case instantiates the module: a few dozen are enough to show it agrees.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_wasm_answers_exactly_what_the_native_policy_answers(pod in pod()) {
        let object = pod_json(&pod);
        let request = json!({"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE", "namespace": "dstack", "object": object});
        let payload = serde_json::to_vec(&json!({"request": request, "settings": {}})).unwrap();
        let native: ValidationResponse = serde_json::from_slice(&jumppod_policy::evaluate(&payload)).unwrap();
        let wasm = policy_support::validate_raw(&payload);
        prop_assert_eq!(&wasm, &native);
        prop_assert_eq!(wasm.accepted, expected(&pod) != Expected::Reject);
    }
}
