//! Property tests over generated jump pods and their impostors: containers and init
//! containers with random subsets of cpu, memory and ephemeral-storage requests and limits,
//! drawn from pools of quantities whose exact values are known here; names and labels of
//! jump pods of both schemas and of pods that only look like one; what the kit reads (which
//! container serves SSH, a preStop hook of its own, jumppod's own start script, a grace
//! period); settings that raise the floors, change the defaults, switch mutation or the kit
//! off, set the session drain or are invalid; updates that resize.
//! Natively through the core (many cases): the verdict agrees with an independent model of
//! the contract under those settings, the mutation only adds what the model says (the grace
//! period only raised) and its output passes the rules, an update is judged exactly when it
//! changes the resources, a ReplicaSet's template is judged by what its pods will be.
//! Through the Wasm (few cases): the module answers exactly what the native policy answers.

#[path = "../../policy/tests/api_server/mod.rs"]
mod api_server;
mod policy_support;

use jumppod::admission::{Object, Request};
use jumppod::{Verdict, Warning};
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

/// Who a pod says it is: its name and `app.kubernetes.io/name` label, and whether the
/// contract makes it a jump pod (of which schema), written out here case by case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Identity {
    /// The current labels, named by its ReplicaSet.
    Current,
    /// The current labels and no name yet, only the ReplicaSet's prefix.
    CurrentGenerated,
    /// A bare pre-#3891 pod: its label is its own name.
    Legacy,
    /// The same, from releases before the `dstack-` prefix.
    LegacyUnprefixed,
    /// Impostors. A legacy label naming another pod.
    LabelOfAnotherPod,
    /// A legacy label naming the ReplicaSet, on a pod the ReplicaSet named.
    LegacyLabelOnAReplicaSetPod,
    /// Its label is its own name, which lacks the suffix.
    NameWithoutSuffix,
    /// Its label is its own name, the suffix in capitals.
    SuffixInCapitals,
    /// The current labels but a name label that differs by a character or a case.
    NearMiss(&'static str),
    /// The current labels without `app.kubernetes.io/name`.
    NoNameLabel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Schema {
    Current,
    Legacy,
}

const NAME: &str = "dstack-main-ssh-jump-pod";

impl Identity {
    fn all() -> Vec<Identity> {
        let mut all = vec![
            Identity::Current,
            Identity::CurrentGenerated,
            Identity::Legacy,
            Identity::LegacyUnprefixed,
            Identity::LabelOfAnotherPod,
            Identity::LegacyLabelOnAReplicaSetPod,
            Identity::NameWithoutSuffix,
            Identity::SuffixInCapitals,
            Identity::NoNameLabel,
        ];
        for app in [
            "Dstack-ssh-proxy",
            "dstack-ssh-proxy-v2",
            "dstack-ssh-prox",
            "dstack-ssh-proxy ",
        ] {
            all.push(Identity::NearMiss(app));
        }
        all
    }

    /// The pod's name (None: only `generateName`) and its name label (None: absent).
    fn name_and_app(self) -> (Option<&'static str>, Option<&'static str>) {
        match self {
            Identity::Current => (
                Some("dstack-main-ssh-jump-pod-x7k2q"),
                Some("dstack-ssh-proxy"),
            ),
            Identity::NoNameLabel => (Some("dstack-main-ssh-jump-pod-x7k2q"), None),
            Identity::CurrentGenerated => (None, Some("dstack-ssh-proxy")),
            Identity::Legacy => (Some(NAME), Some(NAME)),
            Identity::LegacyUnprefixed => (Some("main-ssh-jump-pod"), Some("main-ssh-jump-pod")),
            Identity::LabelOfAnotherPod => (Some("web-7f9c"), Some(NAME)),
            Identity::LegacyLabelOnAReplicaSetPod => {
                (Some("dstack-main-ssh-jump-pod-x7k2q"), Some(NAME))
            }
            Identity::NameWithoutSuffix => (Some("dstack-main"), Some("dstack-main")),
            Identity::SuffixInCapitals => (
                Some("dstack-main-ssh-jump-POD"),
                Some("dstack-main-ssh-jump-POD"),
            ),
            Identity::NearMiss(app) => (Some("dstack-main-ssh-jump-pod-x7k2q"), Some(app)),
        }
    }

    /// Whether the contract judges the pod, and by which schema.
    fn schema(self) -> Option<Schema> {
        match self {
            Identity::Current | Identity::CurrentGenerated => Some(Schema::Current),
            Identity::Legacy | Identity::LegacyUnprefixed => Some(Schema::Legacy),
            _ => None,
        }
    }

    /// Whether a ReplicaSet named [`NAME`] with this pod as its template is judged: by the
    /// template's name label, against the ReplicaSet's own name (templates have none).
    fn judges_a_template(self) -> bool {
        match self {
            Identity::Current
            | Identity::CurrentGenerated
            | Identity::Legacy
            | Identity::LabelOfAnotherPod
            | Identity::LegacyLabelOnAReplicaSetPod => true,
            Identity::LegacyUnprefixed
            | Identity::NameWithoutSuffix
            | Identity::SuffixInCapitals
            | Identity::NearMiss(_)
            | Identity::NoNameLabel => false,
        }
    }

    /// How the policy names the pod in a message.
    fn shown(self) -> String {
        match self.name_and_app().0 {
            Some(name) => name.to_owned(),
            None => format!("{NAME}-<generated>"),
        }
    }
}

#[derive(Clone, Debug)]
struct Pod {
    identity: Identity,
    controlled: bool,
    containers: Vec<Container>,
    init: Vec<Container>,
    /// The container exposing port 22, if any (taken modulo the containers).
    ssh_port: Option<usize>,
    /// The first container has a preStop hook of its own.
    pre_stop: bool,
    /// The first container runs jumppod's own start script.
    own_script: bool,
    /// `terminationGracePeriodSeconds` (None: absent; the typed pod reads the default 30).
    grace: Option<i64>,
}

impl Pod {
    /// The container that serves SSH: the one exposing port 22, else the only one.
    fn jump_container(&self) -> Option<usize> {
        match self.ssh_port {
            Some(i) => Some(i % self.containers.len()),
            None => (self.containers.len() == 1).then_some(0),
        }
    }
}

/// Settings as written: each key's text and value (None: not written).
#[derive(Clone, Debug, Default)]
struct Settings {
    cpu_minimum: Option<Q>,
    cpu_default: Option<Q>,
    memory_minimum: Option<Q>,
    memory_default: Option<Q>,
    ephemeral_minimum: Option<Q>,
    mutate: Option<bool>,
    kit: Option<bool>,
    /// The session drain written, and whether it is valid (at most an hour).
    session_drain: Option<(u32, bool)>,
}

// Settings' pools: values the contract allows, and values below its floors or unparsable.
const CPU_MINIMUMS: &[Q] = &[
    ("100m", Some(100 * MILLI)),
    ("0.2", Some(200 * MILLI)),
    ("250m", Some(250 * MILLI)),
    ("1", Some(UNIT)),
];
const CPU_DEFAULTS: &[Q] = &[
    ("500m", Some(500 * MILLI)),
    ("1", Some(UNIT)),
    ("0.25", Some(250 * MILLI)),
    ("2", Some(2 * UNIT)),
    ("100m", Some(100 * MILLI)),
];
const MEMORY_MINIMUMS: &[Q] = &[
    ("32Mi", Some(32 * MI)),
    ("64Mi", Some(64 * MI)),
    ("128Mi", Some(128 * MI)),
    ("1Gi", Some(1024 * MI)),
];
const MEMORY_DEFAULTS: &[Q] = &[
    ("1Gi", Some(1024 * MI)),
    ("64Mi", Some(64 * MI)),
    ("2Gi", Some(2048 * MI)),
    ("512Mi", Some(512 * MI)),
    ("33554432", Some(32 * MI)),
];
const EPHEMERAL_MINIMUMS: &[Q] = &[
    ("64Mi", Some(64 * MI)),
    ("128Mi", Some(128 * MI)),
    ("1Gi", Some(1024 * MI)),
];
/// Below a floor (which, the model decides: 16Mi is a lot of cpu), or no quantity at all.
const INVALID: &[Q] = &[
    ("50m", Some(50 * MILLI)),
    ("16Mi", Some(16 * MI)),
    ("10Mi", Some(10 * MI)),
    ("lots", None),
    ("1e400x", None),
];

impl Settings {
    fn json(&self) -> Value {
        let mut settings = Map::new();
        let mut put = |section: &str, key: &str, q: Option<Q>| {
            if let Some((text, _)) = q {
                let entry = settings.entry(section).or_insert_with(|| json!({}));
                entry[key] = json!(text);
            }
        };
        put("cpu", "minimum", self.cpu_minimum);
        put("cpu", "default", self.cpu_default);
        put("memory", "minimum", self.memory_minimum);
        put("memory", "default", self.memory_default);
        put("ephemeralStorage", "minimumRequest", self.ephemeral_minimum);
        if let Some(mutate) = self.mutate {
            settings.insert("mutate".into(), json!(mutate));
        }
        if let Some(kit) = self.kit {
            settings.insert("kit".into(), json!(kit));
        }
        if let Some((seconds, _)) = self.session_drain {
            settings.insert("sessionDrainSeconds".into(), json!(seconds));
        }
        Value::Object(settings)
    }
}

/// The contract the settings make, modelled from the policy's README: floors 100m, 32Mi,
/// 64Mi that settings may raise, defaults 500m and 1Gi that may not fall below the minimum.
#[derive(Clone, Debug)]
struct Contract {
    /// cpu, memory, ephemeral storage
    minimums: [i128; 3],
    /// What a mutation fills in: cpu, memory, the ephemeral-storage request.
    defaults: [&'static str; 3],
    mutate: bool,
    /// Whether a created jump pod gets the kit (mutation on and the kit on).
    kit: bool,
    session_drain: u32,
}

/// The contract, or the settings key that is invalid (the first, in the documented order).
fn contract(settings: &Settings) -> Result<Contract, &'static str> {
    let minimum = |key, q: Option<Q>, floor: i128| match q {
        None => Ok(floor),
        Some((_, Some(value))) if value >= floor => Ok(value),
        Some(_) => Err(key),
    };
    let default = |key, q: Option<Q>, fallback: Q, minimum: i128| match q.unwrap_or(fallback) {
        (text, Some(value)) if value >= minimum => Ok(text),
        _ => Err(key),
    };
    let cpu = minimum("cpu.minimum", settings.cpu_minimum, 100 * MILLI)?;
    let cpu_default = default(
        "cpu.default",
        settings.cpu_default,
        ("500m", Some(500 * MILLI)),
        cpu,
    )?;
    let memory = minimum("memory.minimum", settings.memory_minimum, 32 * MI)?;
    let memory_default = default(
        "memory.default",
        settings.memory_default,
        ("1Gi", Some(1024 * MI)),
        memory,
    )?;
    let ephemeral = minimum(
        "ephemeralStorage.minimumRequest",
        settings.ephemeral_minimum,
        64 * MI,
    )?;
    let ephemeral_text = settings.ephemeral_minimum.map_or("64Mi", |(text, _)| text);
    let session_drain = match settings.session_drain {
        None => 300,
        Some((seconds, true)) => seconds,
        Some((_, false)) => return Err("sessionDrainSeconds"),
    };
    let mutate = settings.mutate.unwrap_or(true);
    Ok(Contract {
        minimums: [cpu, memory, ephemeral],
        defaults: [cpu_default, memory_default, ephemeral_text],
        mutate,
        kit: mutate && settings.kit.unwrap_or(true),
        session_drain,
    })
}

/// Session drains, and whether each is valid: at most an hour.
const SESSION_DRAINS: &[(u32, bool)] = &[
    (0, true),
    (5, true),
    (60, true),
    (300, true),
    (3600, true),
    (3601, false),
    (u32::MAX, false),
];

fn settings() -> impl Strategy<Value = Settings> {
    // Each key written a third of the time, rarely invalid (a default below its minimum
    // also makes the settings invalid).
    let key = |pool: &'static [Q]| {
        prop::option::weighted(
            0.35,
            prop_oneof![
                8 => prop::sample::select(pool),
                1 => prop::sample::select(INVALID),
            ],
        )
    };
    (
        key(CPU_MINIMUMS),
        key(CPU_DEFAULTS),
        key(MEMORY_MINIMUMS),
        key(MEMORY_DEFAULTS),
        key(EPHEMERAL_MINIMUMS),
        prop::option::of(any::<bool>()),
        prop::option::of(any::<bool>()),
        prop::option::weighted(0.35, prop::sample::select(SESSION_DRAINS)),
    )
        .prop_map(
            |(
                cpu_minimum,
                cpu_default,
                memory_minimum,
                memory_default,
                ephemeral_minimum,
                mutate,
                kit,
                session_drain,
            )| {
                Settings {
                    cpu_minimum,
                    cpu_default,
                    memory_minimum,
                    memory_default,
                    ephemeral_minimum,
                    mutate,
                    kit,
                    session_drain,
                }
            },
        )
}

fn side(pool: &'static [Q]) -> impl Strategy<Value = Side> {
    let q = prop::sample::select(pool);
    (
        prop::option::weighted(0.6, q.clone()),
        prop::option::weighted(0.6, q),
    )
        .prop_map(|(request, limit)| Side { request, limit })
}

/// Mostly the shapes that occur (equal pairs, a request alone), sometimes anything: enough
/// pods meet every rule for raised minimums to decide their verdict.
fn side_biased(pool: &'static [Q]) -> impl Strategy<Value = Side> {
    let q = prop::sample::select(pool);
    prop_oneof![
        1 => side(pool),
        3 => q.clone().prop_map(|q| Side { request: Some(q), limit: Some(q) }),
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

fn identity() -> impl Strategy<Value = Identity> {
    // Jump pods two times in three, impostors the third.
    let all = Identity::all();
    let jump: Vec<Identity> = all
        .iter()
        .copied()
        .filter(|i| i.schema().is_some())
        .collect();
    let impostors: Vec<Identity> = all.into_iter().filter(|i| i.schema().is_none()).collect();
    prop_oneof![
        2 => prop::sample::select(jump),
        1 => prop::sample::select(impostors),
    ]
}

fn pod() -> impl Strategy<Value = Pod> {
    (
        identity(),
        any::<bool>(),
        prop::collection::vec(container(), 1..4),
        prop::collection::vec(container(), 0..3),
        prop::option::weighted(0.8, 0usize..3),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.1),
        prop::option::of(prop::sample::select(&[1i64, 30, 80, 320, 600][..])),
    )
        .prop_map(
            |(identity, controlled, containers, init, ssh_port, pre_stop, own_script, grace)| Pod {
                identity,
                controlled,
                containers,
                init,
                ssh_port,
                pre_stop,
                own_script,
                grace,
            },
        )
}

/// A pod and the same pod resized: some containers' resources drawn again (sometimes the
/// same), and sometimes another label.
fn resized() -> impl Strategy<Value = (Pod, Pod)> {
    pod().prop_flat_map(|pod| {
        let (n, m) = (pod.containers.len(), pod.init.len());
        (
            Just(pod),
            prop::collection::vec(prop::option::weighted(0.4, container()), n),
            prop::collection::vec(prop::option::weighted(0.2, container()), m),
        )
            .prop_map(|(old, containers, init)| {
                let mut new = old.clone();
                for (c, draw) in new.containers.iter_mut().zip(containers) {
                    *c = draw.unwrap_or_else(|| c.clone());
                }
                for (c, draw) in new.init.iter_mut().zip(init) {
                    *c = draw.unwrap_or_else(|| c.clone());
                }
                (old, new)
            })
    })
}

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
    let (name, app) = pod.identity.name_and_app();
    let mut labels = match pod.identity.schema() {
        Some(Schema::Legacy) => json!({}),
        _ => json!({"app.kubernetes.io/instance": NAME, "app.kubernetes.io/managed-by": "dstack",
                    "k8s.dstack.ai/project": "main"}),
    };
    if let Some(app) = app {
        labels["app.kubernetes.io/name"] = json!(app);
    }
    let mut metadata = json!({"namespace": "dstack", "labels": labels,
                              "managedFields": [{"manager": "test", "operation": "Update", "apiVersion": "v1"}]});
    match name {
        Some(name) => metadata["name"] = json!(name),
        None => metadata["generateName"] = json!(format!("{NAME}-")),
    }
    if pod.controlled {
        metadata["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": NAME,
            "uid": "8c1e4b7a-2d9f-4e3b-a6c5-0f7d1b3e9a52", "controller": true, "blockOwnerDeletion": true}]);
    }
    let jump = pod.ssh_port.map(|i| i % pod.containers.len());
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut container = container_json(format!("sshd-{i}"), c);
            if Some(i) != jump {
                container.as_object_mut().unwrap().remove("ports");
            }
            if i == 0 {
                container["command"] = json!(["/bin/sh", "-c"]);
                let script = if pod.own_script {
                    format!("set -e\n{}\nsshd -D", jumppod::kit::OWN_SCRIPT_MARK)
                } else {
                    "mkdir -p ~/.ssh && /usr/sbin/sshd -D -e -p 22".to_owned()
                };
                container["args"] = json!([script]);
                if pod.pre_stop {
                    container["lifecycle"] =
                        json!({"preStop": {"exec": {"command": ["sleep", "5"]}}});
                }
            }
            container
        })
        .collect();
    let mut spec = json!({"containers": containers, "restartPolicy": "Always"});
    if let Some(grace) = pod.grace {
        spec["terminationGracePeriodSeconds"] = json!(grace);
    }
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

/// The verdict, modelled independently of the core.
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

impl Model {
    /// Every rule holds as the pod stands.
    fn rules_hold(&self) -> bool {
        self.fillable && !self.resource_fill
    }
}

fn model(pod: &Pod, contract: &Contract) -> Model {
    let mut fillable = true;
    let mut resource_fill = false;
    let all = pod
        .containers
        .iter()
        .map(|c| (c, false))
        .chain(pod.init.iter().map(|c| (c, true)));
    for (container, init) in all {
        for (i, side) in container.sides.iter().enumerate() {
            let minimum = contract.minimums[i];
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

/// A bare pre-#3891 pod gets the current labels.
fn label_fill(pod: &Pod) -> bool {
    pod.identity.schema() == Some(Schema::Legacy) && !pod.controlled
}

/// Whether the pod gets the kit: a jump pod created with mutation and the kit on, a container
/// serving SSH, no preStop hook of its own and not jumppod's own start script on it.
fn kit_added(pod: &Pod, contract: &Contract) -> bool {
    let jump = pod.jump_container();
    let own_hooks = jump == Some(0) && (pod.pre_stop || pod.own_script);
    contract.kit && pod.identity.schema().is_some() && jump.is_some() && !own_hooks
}

fn expected(pod: &Pod, contract: &Contract) -> Expected {
    let model = model(pod, contract);
    let fill = model.resource_fill || label_fill(pod) || kit_added(pod, contract);
    match (model.fillable, fill) {
        (_, true) if !contract.mutate => Expected::Reject,
        (false, _) => Expected::Reject,
        (true, true) => Expected::Mutate,
        (true, false) => Expected::Accept,
    }
}

/// Each resource's request and limit once a mutation has filled a container in.
fn filled(c: &Container, init: bool, contract: &Contract) -> [(Option<String>, Option<String>); 3] {
    std::array::from_fn(|i| {
        let side = &c.sides[i];
        let (request, limit) = (
            side.request.map(|q| q.0.to_owned()),
            side.limit.map(|q| q.0.to_owned()),
        );
        let default = Some(contract.defaults[i].to_owned());
        match (i, request, limit) {
            (2, None, None) if !init => (default, None),
            (2, request, limit) => (request, limit),
            (_, None, None) => (default.clone(), default),
            (_, Some(request), None) => (Some(request.clone()), Some(request)),
            (_, request, limit) => (request, limit),
        }
    })
}

/// Whether an update changes the resources of some container: their JSON differs.
fn resources_change(old: &Value, new: &Value) -> bool {
    ["containers", "initContainers"].iter().any(|list| {
        let resources = |pod: &Value| -> Vec<Value> {
            pod["spec"][list]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["resources"].clone())
                .collect()
        };
        resources(old) != resources(new)
    })
}

fn judge(operation: &str, object: &Value, old: Option<&Value>, settings: &Settings) -> Answer {
    let object: Box<RawValue> = to_raw_value(object).unwrap();
    let old: Option<Box<RawValue>> = old.map(|o| to_raw_value(o).unwrap());
    let settings = to_raw_value(&settings.json()).unwrap();
    review(
        Request {
            group: "",
            kind: "Pod",
            operation,
            name: None,
            object: Some(Object::Raw {
                object: &object,
                old: old.as_deref(),
            }),
        },
        Some(&settings),
    )
}

/// The verdict as these properties read it: messages and warnings as the policy words them.
#[derive(Debug, PartialEq)]
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

fn review(request: Request<'_, '_>, settings: Option<&RawValue>) -> Answer {
    let text = |w: Vec<Warning>| w.iter().map(ToString::to_string).collect();
    match jumppod::judge(request, settings) {
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

/// Invalid settings reject a jump pod as a bad request naming the key.
fn rejected_for_settings(outcome: &Answer, key: &str) -> Result<(), TestCaseError> {
    let Answer::Reject { message, code } = outcome else {
        return Err(TestCaseError::fail(format!(
            "invalid `{key}` should reject a jump pod: {outcome:?}"
        )));
    };
    prop_assert_eq!(*code, Some(400));
    prop_assert!(
        message.contains(&format!("invalid setting `{key}`")),
        "{}",
        message
    );
    Ok(())
}

fn accepted_untouched(outcome: &Answer) -> Result<(), TestCaseError> {
    prop_assert_eq!(outcome, &Answer::Accept { warnings: vec![] });
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// Sent compact, as serde_json writes it, a mutated pod is its own text with the fills
    /// spliced in (`jumppod::splice`); sent with whitespace, it is read whole and written
    /// again. The answers are the same bytes, also for a pod that carries serde_json's private
    /// raw-value token as a key written with an escape (`\u0024serde_json::...`).
    #[test]
    fn a_spliced_mutation_answers_what_a_whole_read_answers(pod in pod(), settings in settings(), token in any::<bool>()) {
        let mut object = pod_json(&pod);
        if token {
            object["metadata"]["annotations"] = json!({"$serde_json::private::RawValue": "[1]"});
        }
        let request = json!({"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE", "namespace": "dstack", "object": object});
        let payload = json!({"request": request, "settings": settings.json()});
        let escaped = |text: Vec<u8>| {
            String::from_utf8(text).unwrap().replace("\"$serde_json::", "\"\\u0024serde_json::").into_bytes()
        };
        let compact = jumppod_policy::evaluate(&escaped(serde_json::to_vec(&payload).unwrap()));
        let pretty = jumppod_policy::evaluate(&escaped(serde_json::to_vec_pretty(&payload).unwrap()));
        prop_assert_eq!(String::from_utf8_lossy(&compact), String::from_utf8_lossy(&pretty));
    }

    /// Sent as the API server writes it (keys out of serde_json's order, `&` and the like
    /// escaped), a mutated pod is its own text with the fills spliced in; sent with whitespace,
    /// it is read whole. The answers hold the same value and make the same JSONPatch.
    #[test]
    fn a_mutation_of_the_api_server_s_text_answers_the_value_of_a_whole_read(pod in pod(), settings in settings()) {
        let request = json!({"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE", "namespace": "dstack", "object": pod_json(&pod)});
        let go = format!(r#"{{"request":{},"settings":{}}}"#, api_server::written(&request), settings.json());
        let pretty = serde_json::to_vec_pretty(&json!({"request": request, "settings": settings.json()})).unwrap();
        let answer: ValidationResponse = serde_json::from_slice(&jumppod_policy::evaluate(go.as_bytes())).unwrap();
        let whole: ValidationResponse = serde_json::from_slice(&jumppod_policy::evaluate(&pretty)).unwrap();
        prop_assert_eq!(serde_json::to_value(&answer).unwrap(), serde_json::to_value(&whole).unwrap());
        prop_assert_eq!(
            jumppod_review::admission_response(&request, &answer),
            jumppod_review::admission_response(&request, &whole)
        );
    }

    #[test]
    fn the_verdict_on_a_created_pod_follows_the_contract(pod in pod(), settings in settings()) {
        let object = pod_json(&pod);
        let outcome = judge("CREATE", &object, None, &settings);
        if pod.identity.schema().is_none() {
            return accepted_untouched(&outcome);
        }
        let contract = match contract(&settings) {
            Ok(contract) => contract,
            Err(key) => return rejected_for_settings(&outcome, key),
        };
        let verdict = match &outcome {
            Answer::Accept { .. } => Expected::Accept,
            Answer::Mutate { .. } => Expected::Mutate,
            Answer::Reject { .. } => Expected::Reject,
        };
        prop_assert_eq!(verdict, expected(&pod, &contract), "{:?}", outcome);
        let shown = pod.identity.shown();
        match outcome {
            Answer::Reject { message, code } => {
                prop_assert_eq!(code, None);
                let model = model(&pod, &contract);
                let prefix = if !contract.mutate && (model.resource_fill || label_fill(&pod)) {
                    format!("jump pod {shown:?} is missing what the jump-pod contract requires (mutation is off): ")
                } else {
                    format!("jump pod {shown:?} does not meet the jump-pod contract: ")
                };
                prop_assert!(message.starts_with(&prefix), "{}", message);
            }
            Answer::Accept { warnings } => prop_assert!(warnings.is_empty()),
            Answer::Mutate { object: mutated, warnings } => {
                prop_assert!(warnings.is_empty());
                // The mutation only adds (the grace period it raises is the one value replaced)...
                for op in json_patch::diff(&object, &mutated).0 {
                    let raised = matches!(&op, json_patch::PatchOperation::Replace(r)
                        if r.path == "/spec/terminationGracePeriodSeconds");
                    prop_assert!(matches!(op, json_patch::PatchOperation::Add(_)) || raised, "{}", op);
                }
                // ...what the model says: the settings' defaults, a limit equal to its request...
                let lists = [("containers", &pod.containers, false), ("initContainers", &pod.init, true)];
                for (list, containers, init) in lists {
                    for (index, c) in containers.iter().enumerate() {
                        let resources = &mutated["spec"][list][index]["resources"];
                        for (key, (request, limit)) in KEYS.iter().zip(filled(c, init, &contract)) {
                            prop_assert_eq!(resources["requests"][key].as_str(), request.as_deref(), "{} {} {}", list, index, key);
                            prop_assert_eq!(resources["limits"][key].as_str(), limit.as_deref(), "{} {} {}", list, index, key);
                        }
                    }
                }
                // ...the current labels on a bare legacy pod, its name label kept...
                let (name, app) = pod.identity.name_and_app();
                let labels = &mutated["metadata"]["labels"];
                prop_assert_eq!(labels["app.kubernetes.io/name"].as_str(), app);
                if label_fill(&pod) {
                    prop_assert_eq!(labels["app.kubernetes.io/instance"].as_str(), name);
                    prop_assert_eq!(labels["app.kubernetes.io/managed-by"].as_str(), Some("dstack"));
                    prop_assert_eq!(labels["k8s.dstack.ai/project"].as_str(), Some("main"));
                } else {
                    prop_assert_eq!(labels, &object["metadata"]["labels"]);
                }
                // ...the kit where the model says, on the container that serves SSH...
                let kit = kit_added(&pod, &contract);
                let grace = 20 + i64::from(contract.session_drain);
                let wanted_grace = match pod.grace {
                    Some(g) if kit && g < grace => Some(grace),
                    None if kit && 30 < grace => Some(grace),
                    other => other,
                };
                prop_assert_eq!(mutated["spec"]["terminationGracePeriodSeconds"].as_i64(), wanted_grace);
                for (index, _) in pod.containers.iter().enumerate() {
                    let container = &mutated["spec"]["containers"][index];
                    let with_kit = kit && Some(index) == pod.jump_container();
                    let pre_stop = container["lifecycle"]["preStop"]["exec"]["command"][2].as_str();
                    let script = jumppod::kit::pre_stop_script(contract.session_drain);
                    prop_assert_eq!(pre_stop == Some(script.as_str()), with_kit, "container {}", index);
                    prop_assert_eq!(container["readinessProbe"].is_object(), with_kit, "container {}", index);
                    let mounts = container["volumeMounts"].as_array().map_or(0, Vec::len);
                    prop_assert_eq!(mounts, usize::from(with_kit), "container {}", index);
                }
                let secret = mutated["spec"]["volumes"][0]["secret"]["secretName"].as_str();
                let instance = name.filter(|_| pod.identity.schema() == Some(Schema::Legacy)).unwrap_or(NAME);
                let wanted_secret = kit.then(|| format!("{instance}-authorized-keys"));
                prop_assert_eq!(secret, wanted_secret.as_deref());
                // ...and what it makes needs nothing more: created again, it is accepted as is.
                let again = judge("CREATE", &mutated, None, &settings);
                prop_assert_eq!(again, Answer::Accept { warnings: vec![] });
            }
        }
    }

    #[test]
    fn an_update_is_judged_exactly_when_it_changes_the_resources(
        (old, new) in resized(),
        settings in settings(),
        label in "[a-z]{1,8}",
    ) {
        let old_json = pod_json(&old);
        let mut new_json = pod_json(&new);
        new_json["metadata"]["labels"]["example.com/touched"] = json!(label);
        let outcome = judge("UPDATE", &new_json, Some(&old_json), &settings);
        if new.identity.schema().is_none() {
            return accepted_untouched(&outcome);
        }
        let contract = match contract(&settings) {
            Ok(contract) => contract,
            Err(key) => return rejected_for_settings(&outcome, key),
        };
        let rules_hold = model(&new, &contract).rules_hold();
        if resources_change(&old_json, &new_json) {
            // A resize is judged like a creation, with nothing filled in.
            match outcome {
                Answer::Accept { warnings } => prop_assert!(rules_hold && warnings.is_empty(), "{:?}", warnings),
                Answer::Reject { message, code } => {
                    prop_assert!(!rules_hold);
                    prop_assert_eq!(code, None);
                    prop_assert!(message.contains("does not meet the jump-pod contract: "), "{}", message);
                }
                Answer::Mutate { .. } => prop_assert!(false, "an update was mutated"),
            }
        } else {
            // Unchanged resources are never rejected: warned exactly when they break a rule.
            let Answer::Accept { warnings } = outcome else {
                return Err(TestCaseError::fail(format!("an update that keeps the resources was not accepted: {outcome:?}")));
            };
            prop_assert_eq!(warnings.len(), usize::from(!rules_hold), "{:?}", warnings);
        }
    }

    #[test]
    fn a_replicaset_template_is_judged_by_the_pods_it_makes_never_mutated(pod in pod(), settings in settings()) {
        let template = pod_json(&pod);
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": NAME, "namespace": "dstack"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/instance": NAME}},
                     "template": {"metadata": {"labels": template["metadata"]["labels"]}, "spec": template["spec"]}}});
        let raw = to_raw_value(&rs).unwrap();
        let raw_settings = to_raw_value(&settings.json()).unwrap();
        let outcome = review(Request { group: "apps", kind: "ReplicaSet", operation: "CREATE", name: Some(NAME), object: Some(Object::Raw { object: &raw, old: None }) }, Some(&raw_settings));
        if !pod.identity.judges_a_template() {
            return accepted_untouched(&outcome);
        }
        let contract = match contract(&settings) {
            Ok(contract) => contract,
            Err(key) => return rejected_for_settings(&outcome, key),
        };
        // Its pods are mutated at their creation: with mutation on, only what they would still
        // break counts.
        let model = model(&pod, &contract);
        let holds = if contract.mutate { model.fillable } else { model.rules_hold() };
        match outcome {
            Answer::Accept { warnings } => prop_assert!(holds && warnings.is_empty()),
            Answer::Reject { code, .. } => prop_assert!(!holds && code.is_none()),
            Answer::Mutate { .. } => prop_assert!(false, "a ReplicaSet was mutated"),
        }
    }
}

proptest! {
    // Each case instantiates the module: a few dozen are enough to show it agrees.
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn the_wasm_answers_exactly_what_the_native_policy_answers(pod in pod(), settings in settings()) {
        let object = pod_json(&pod);
        let request = json!({"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE", "namespace": "dstack", "object": object});
        let payload = serde_json::to_vec(&json!({"request": request, "settings": settings.json()})).unwrap();
        let native: ValidationResponse = serde_json::from_slice(&jumppod_policy::evaluate(&payload)).unwrap();
        let wasm = policy_support::validate_raw(&payload);
        prop_assert_eq!(&wasm, &native);
        let accepted = match (pod.identity.schema(), contract(&settings)) {
            (None, _) => true,
            (Some(_), Err(_)) => false,
            (Some(_), Ok(contract)) => expected(&pod, &contract) != Expected::Reject,
        };
        prop_assert_eq!(wasm.accepted, accepted);
    }
}
