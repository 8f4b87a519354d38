//! The jump-pod contract, checked container by container.
//!
//! 1. cpu and memory requests equal their limits (Guaranteed QoS). A request that is absent
//!    while its limit is set counts as equal: the API server defaults it to the limit before
//!    admission. Init containers too: Guaranteed QoS asks it of every container.
//! 2. cpu and memory at least the configured minimums (regular containers).
//! 3. an ephemeral-storage request of at least the minimum and no ephemeral-storage limit:
//!    under disk pressure the kubelet evicts pods over their request first, and a limit
//!    evicts the pod outright once exceeded (regular containers).

use crate::quantity::{Quantity, QuantityError};
use crate::settings::{Amount, Contract};
use crate::view::{Amounts, ContainerView, List, SpecView};
use k8s_openapi::api::core::v1::PodSpec;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Cpu,
    Memory,
    EphemeralStorage,
}

impl Resource {
    pub fn key(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
        }
    }
}

/// Request or limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Request,
    Limit,
}

impl Side {
    pub fn field(self) -> &'static str {
        match self {
            Side::Request => "requests",
            Side::Limit => "limits",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    Unparsable {
        resource: Resource,
        side: Side,
        value: String,
        error: QuantityError,
    },
    /// Neither request nor limit: the container is not Guaranteed.
    Unset {
        resource: Resource,
    },
    /// A request without a limit: Burstable.
    NoLimit {
        resource: Resource,
        request: String,
    },
    NotEqual {
        resource: Resource,
        request: String,
        limit: String,
    },
    BelowMinimum {
        resource: Resource,
        side: Side,
        value: String,
        minimum: String,
    },
    /// No ephemeral-storage request: the kubelet evicts such a pod first under disk pressure.
    NoRequest {
        resource: Resource,
        minimum: String,
    },
    EphemeralLimitSet {
        limit: String,
    },
}

/// One broken rule in one container (`crate::verdict` renders it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub container: String,
    pub init: bool,
    pub problem: Problem,
}

impl Problem {
    /// The resource whose rule is broken.
    pub fn resource(&self) -> Resource {
        match self {
            Problem::Unparsable { resource, .. }
            | Problem::Unset { resource }
            | Problem::NoLimit { resource, .. }
            | Problem::NotEqual { resource, .. }
            | Problem::BelowMinimum { resource, .. }
            | Problem::NoRequest { resource, .. } => *resource,
            Problem::EphemeralLimitSet { .. } => Resource::EphemeralStorage,
        }
    }
}

/// Every violation of the contract in a pod spec, regular containers first.
pub fn check(spec: &PodSpec, contract: &Contract) -> Vec<Violation> {
    check_view(&SpecView::of_spec(spec), contract)
}

/// [`check`] over the borrowed view of a spec.
pub fn check_view(spec: &SpecView<'_>, contract: &Contract) -> Vec<Violation> {
    let mut violations = Vec::new();
    for (list, _, container) in spec.all() {
        check_container(
            container,
            list == List::InitContainers,
            contract,
            &mut violations,
        );
    }
    violations
}

fn check_container(
    container: &ContainerView<'_>,
    init: bool,
    contract: &Contract,
    out: &mut Vec<Violation>,
) {
    let (requests, limits) = (container.requests(), container.limits());
    let mut push = |problem| {
        out.push(Violation {
            container: container.name().to_owned(),
            init,
            problem,
        })
    };
    for (resource, minimum) in [
        (Resource::Cpu, &contract.cpu.minimum),
        (Resource::Memory, &contract.memory.minimum),
    ] {
        let request = read(requests, resource, Side::Request, &mut push);
        let limit = read(limits, resource, Side::Limit, &mut push);
        let (request, limit) = match (request, limit) {
            (Read::Bad, _) | (_, Read::Bad) => continue,
            (Read::Absent, Read::Absent) => {
                push(Problem::Unset { resource });
                continue;
            }
            (Read::Set(text, value), Read::Absent) => {
                push(Problem::NoLimit {
                    resource,
                    request: text.to_owned(),
                });
                ((text, value), None)
            }
            // API defaulting has made the request equal to the limit.
            (Read::Absent, Read::Set(text, value)) => ((text, value), None),
            (Read::Set(rt, rv), Read::Set(lt, lv)) => {
                if rv != lv {
                    push(Problem::NotEqual {
                        resource,
                        request: rt.to_owned(),
                        limit: lt.to_owned(),
                    });
                }
                ((rt, rv), Some((lt, lv)))
            }
        };
        if init {
            continue;
        }
        below_minimum(resource, Side::Request, request, minimum, &mut push);
        if let Some(limit) = limit.filter(|(_, lv)| *lv != request.1) {
            below_minimum(resource, Side::Limit, limit, minimum, &mut push);
        }
    }
    if init {
        return;
    }
    let resource = Resource::EphemeralStorage;
    let minimum = &contract.ephemeral_storage_request;
    let request = read(requests, resource, Side::Request, &mut push);
    let limit = read(limits, resource, Side::Limit, &mut push);
    if let Read::Set(text, _) = limit {
        push(Problem::EphemeralLimitSet {
            limit: text.to_owned(),
        });
    }
    match (request, limit) {
        (Read::Set(text, value), _) => {
            below_minimum(resource, Side::Request, (text, value), minimum, &mut push)
        }
        // The limit is already reported; the defaulted request adds nothing.
        (Read::Absent, Read::Set(..)) | (Read::Bad, _) | (_, Read::Bad) => {}
        (Read::Absent, Read::Absent) => push(Problem::NoRequest {
            resource,
            minimum: minimum.text.clone(),
        }),
    }
}

enum Read<'a> {
    Absent,
    Bad,
    Set(&'a str, Quantity),
}

fn read<'a>(
    map: Option<&'a Amounts<'_>>,
    resource: Resource,
    side: Side,
    push: &mut impl FnMut(Problem),
) -> Read<'a> {
    let Some(text) = map.and_then(|m| m.get(resource.key())) else {
        return Read::Absent;
    };
    match Quantity::parse(&text.0) {
        Ok(value) => Read::Set(&text.0, value),
        Err(error) => {
            push(Problem::Unparsable {
                resource,
                side,
                value: text.0.to_string(),
                error,
            });
            Read::Bad
        }
    }
}

fn below_minimum(
    resource: Resource,
    side: Side,
    (text, value): (&str, Quantity),
    minimum: &Amount,
    push: &mut impl FnMut(Problem),
) {
    if value < minimum.value {
        push(Problem::BelowMinimum {
            resource,
            side,
            value: text.to_owned(),
            minimum: minimum.text.clone(),
        });
    }
}

/// The resources of every container by name, to tell whether an update changes them.
pub fn resources_by_container(
    spec: &PodSpec,
) -> Vec<(
    &str,
    bool,
    Option<&k8s_openapi::api::core::v1::ResourceRequirements>,
)> {
    let mut all: Vec<_> = spec
        .containers
        .iter()
        .map(|c| (c.name.as_str(), false, c.resources.as_ref()))
        .chain(
            spec.init_containers
                .iter()
                .flatten()
                .map(|c| (c.name.as_str(), true, c.resources.as_ref())),
        )
        .collect();
    all.sort_by(|a, b| (a.1, a.0).cmp(&(b.1, b.0)));
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as QuantityText;
    use std::collections::BTreeMap;

    type Map = BTreeMap<String, QuantityText>;
    use rstest::rstest;

    fn map(pairs: &[(&str, &str)]) -> Option<Map> {
        (!pairs.is_empty()).then(|| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), QuantityText(v.to_string())))
                .collect()
        })
    }

    fn container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: map(requests),
                limits: map(limits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const GOOD_REQUESTS: &[(&str, &str)] = &[
        ("cpu", "500m"),
        ("memory", "1Gi"),
        ("ephemeral-storage", "64Mi"),
    ];
    const GOOD_LIMITS: &[(&str, &str)] = &[("cpu", "500m"), ("memory", "1Gi")];

    fn problems(containers: Vec<Container>, init: Vec<Container>) -> Vec<Problem> {
        let spec = PodSpec {
            containers,
            init_containers: (!init.is_empty()).then_some(init),
            ..Default::default()
        };
        check(&spec, &Contract::default())
            .into_iter()
            .map(|v| v.problem)
            .collect()
    }

    #[test]
    fn a_guaranteed_container_at_the_defaults_passes() {
        assert_eq!(
            problems(vec![container("c", GOOD_REQUESTS, GOOD_LIMITS)], vec![]),
            vec![]
        );
    }

    #[rstest]
    #[case::equal_values_written_differently(&[("cpu", "0.1"), ("memory", "32Mi"), ("ephemeral-storage", "64Mi")], &[("cpu", "100m"), ("memory", "33554432")])]
    #[case::limits_only_with_a_request_for_storage(&[("ephemeral-storage", "1Gi")], &[("cpu", "1"), ("memory", "2Gi")])]
    #[case::exactly_at_the_floors(&[("cpu", "100m"), ("memory", "32Mi"), ("ephemeral-storage", "64Mi")], &[("cpu", "100m"), ("memory", "32Mi")])]
    fn conforming_containers_pass(
        #[case] requests: &[(&str, &str)],
        #[case] limits: &[(&str, &str)],
    ) {
        assert_eq!(
            problems(vec![container("c", requests, limits)], vec![]),
            vec![]
        );
    }

    #[rstest]
    #[case::a_bare_container_breaks_every_rule(&[], &[], vec![
        Problem::Unset { resource: Resource::Cpu },
        Problem::Unset { resource: Resource::Memory },
        Problem::NoRequest { resource: Resource::EphemeralStorage, minimum: "64Mi".into() },
    ])]
    #[case::a_request_without_limit_is_burstable(&[("cpu", "500m"), ("memory", "1Gi"), ("ephemeral-storage", "64Mi")], &[("memory", "1Gi")], vec![
        Problem::NoLimit { resource: Resource::Cpu, request: "500m".into() },
    ])]
    #[case::a_request_below_its_limit_is_burstable(&[("cpu", "250m"), ("memory", "1Gi"), ("ephemeral-storage", "64Mi")], GOOD_LIMITS, vec![
        Problem::NotEqual { resource: Resource::Cpu, request: "250m".into(), limit: "500m".into() },
    ])]
    #[case::cpu_below_the_minimum(&[("cpu", "50m"), ("memory", "1Gi"), ("ephemeral-storage", "64Mi")], &[("cpu", "50m"), ("memory", "1Gi")], vec![
        Problem::BelowMinimum { resource: Resource::Cpu, side: Side::Request, value: "50m".into(), minimum: "100m".into() },
    ])]
    #[case::memory_below_the_minimum_in_decimal_units(&[("cpu", "1"), ("memory", "32M"), ("ephemeral-storage", "64Mi")], &[("cpu", "1"), ("memory", "32M")], vec![
        Problem::BelowMinimum { resource: Resource::Memory, side: Side::Request, value: "32M".into(), minimum: "32Mi".into() },
    ])]
    #[case::an_ephemeral_storage_limit_is_refused(GOOD_REQUESTS, &[("cpu", "500m"), ("memory", "1Gi"), ("ephemeral-storage", "1Gi")], vec![
        Problem::EphemeralLimitSet { limit: "1Gi".into() },
    ])]
    #[case::a_small_ephemeral_storage_request_is_refused(&[("cpu", "500m"), ("memory", "1Gi"), ("ephemeral-storage", "10Mi")], GOOD_LIMITS, vec![
        Problem::BelowMinimum { resource: Resource::EphemeralStorage, side: Side::Request, value: "10Mi".into(), minimum: "64Mi".into() },
    ])]
    #[case::an_unparsable_quantity_is_named(&[("cpu", "lots"), ("memory", "1Gi"), ("ephemeral-storage", "64Mi")], GOOD_LIMITS, vec![
        Problem::Unparsable { resource: Resource::Cpu, side: Side::Request, value: "lots".into(), error: QuantityError::Format },
    ])]
    #[case::a_negative_quantity_is_below_the_minimum(&[("cpu", "-1"), ("memory", "1Gi"), ("ephemeral-storage", "64Mi")], &[("cpu", "-1"), ("memory", "1Gi")], vec![
        Problem::BelowMinimum { resource: Resource::Cpu, side: Side::Request, value: "-1".into(), minimum: "100m".into() },
    ])]
    fn broken_rules_are_reported(
        #[case] requests: &[(&str, &str)],
        #[case] limits: &[(&str, &str)],
        #[case] expected: Vec<Problem>,
    ) {
        assert_eq!(
            problems(vec![container("c", requests, limits)], vec![]),
            expected
        );
    }

    #[test]
    fn init_containers_need_guaranteed_resources_but_no_minimums() {
        let init_ok = container(
            "init-ok",
            &[("cpu", "10m"), ("memory", "8Mi")],
            &[("cpu", "10m"), ("memory", "8Mi")],
        );
        let init_bare = container("init-bare", &[], &[]);
        let violations = check(
            &PodSpec {
                containers: vec![container("c", GOOD_REQUESTS, GOOD_LIMITS)],
                init_containers: Some(vec![init_ok, init_bare]),
                ..Default::default()
            },
            &Contract::default(),
        );
        assert_eq!(violations.len(), 2, "{violations:?}");
        assert!(
            violations
                .iter()
                .all(|v| v.init && v.container == "init-bare")
        );
    }

    #[test]
    fn every_violation_of_every_container_is_in_the_message() {
        let spec = PodSpec {
            containers: vec![
                container(
                    "sshd",
                    &[("cpu", "50m")],
                    &[("cpu", "50m"), ("memory", "1Gi")],
                ),
                container("sidecar", GOOD_REQUESTS, &[("cpu", "1"), ("memory", "1Gi")]),
            ],
            ..Default::default()
        };
        let message = check(&spec, &Contract::default())
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        assert_eq!(
            message,
            "container \"sshd\": cpu request 50m is below the minimum 100m; \
             container \"sshd\": ephemeral-storage request is missing (at least 64Mi is required); \
             container \"sidecar\": cpu request 500m is not equal to its limit 1 \
             (Guaranteed QoS needs request == limit)"
        );
    }
}
