//! Fidelity tests of the API server's verbs, errors, validation and allocation.

use jumppod_sim::testing::*;
use jumppod_sim::{Sim, SimConfig};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;

fn pod(name: &str, labels: serde_json::Value) -> Pod {
    typed(json!({"metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}))
}

/// A simulator whose controllers run only when asked (the test owns its timing), and its pods
/// in `default`.
async fn quiet_pods() -> (Sim, Api<Pod>) {
    let sim = Sim::start(SimConfig {
        background_controllers: false,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let pods = Api::namespaced(client(&sim).await, "default");
    (sim, pods)
}

fn rs(
    name: &str,
    selector: serde_json::Value,
    labels: serde_json::Value,
    restart: &str,
) -> ReplicaSet {
    typed(
        json!({"metadata": {"name": name}, "spec": {"replicas": 1, "selector": {"matchLabels": selector},
        "template": {"metadata": {"labels": labels},
            "spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "busybox:1.36"}]}}}}),
    )
}

// Create fills uid, resourceVersion and creationTimestamp; get, replace and delete round-trip.
#[tokio::test(flavor = "multi_thread")]
async fn crud_round_trip() {
    // The test owns its timing: with background controllers a kubelet write could land
    // between the get and the replace and turn the replace into a 409.
    let (_sim, pods) = quiet_pods().await;
    let created = pods
        .create(&PostParams::default(), &pod("a", json!({"app": "x"})))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let rv1: u64 = created
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    let mut got = pods.get("a").await.unwrap();
    got.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("b".into(), "c".into());
    let replaced = pods
        .replace("a", &PostParams::default(), &got)
        .await
        .unwrap();
    let rv2: u64 = replaced.metadata.resource_version.unwrap().parse().unwrap();
    assert!(rv2 > rv1);
    let list = pods.list(&ListParams::default()).await.unwrap();
    assert!(list.metadata.resource_version.is_some());
    assert_eq!(list.items.len(), 1);
    let deleted = pods.delete("a", &DeleteParams::default()).await.unwrap();
    let gone = deleted.left().expect("delete answers with the object");
    assert!(gone.metadata.deletion_timestamp.is_some());
    assert_eq!(status(pods.get("a").await).code, 404);
}

// A missing object is a 404 Status with reason NotFound and details naming the resource.
#[tokio::test(flavor = "multi_thread")]
async fn not_found_status_shape() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let (code, body) = raw(
        &sim,
        "admin",
        "GET",
        "/api/v1/namespaces/default/pods/x",
        None,
    );
    assert_eq!(code, 404);
    assert_eq!(
        body,
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found",
            "reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404})
    );
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    let s = status(pods.get("x").await);
    assert_eq!((s.reason.as_str(), s.code), ("NotFound", 404));
}

// Creating a second object with the same name is 409 AlreadyExists, naming the group.
#[tokio::test(flavor = "multi_thread")]
async fn already_exists_names_group() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let api: Api<ReplicaSet> = Api::namespaced(client(&sim).await, "default");
    let r = rs("x", json!({"app": "x"}), json!({"app": "x"}), "Always");
    api.create(&PostParams::default(), &r).await.unwrap();
    let s = status(api.create(&PostParams::default(), &r).await);
    assert_eq!(s.reason, "AlreadyExists");
    assert_eq!(s.code, 409);
    assert_eq!(s.message, "replicasets.apps \"x\" already exists");
    let (code, body) = raw(
        &sim,
        "admin",
        "POST",
        "/apis/apps/v1/namespaces/default/replicasets",
        Some(&json!(r)),
    );
    assert_eq!(code, 409);
    assert_eq!(
        body["details"],
        json!({"name": "x", "group": "apps", "kind": "replicasets"})
    );
}

// A replace carrying a stale resourceVersion is 409 Conflict with the API server's wording.
#[tokio::test(flavor = "multi_thread")]
async fn stale_replace_conflicts() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    let p = pods
        .create(&PostParams::default(), &pod("x", json!({})))
        .await
        .unwrap();
    pods.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"v": "1"}}})),
    )
    .await
    .unwrap();
    let s = status(pods.replace("x", &PostParams::default(), &p).await);
    assert_eq!(s.reason, "Conflict");
    assert_eq!(
        s.message,
        "Operation cannot be fulfilled on pods \"x\": the object has been modified; please apply your changes to the latest version and try again"
    );
}

// Creating in a namespace that does not exist is 404 `namespaces "ns" not found`.
#[tokio::test(flavor = "multi_thread")]
async fn missing_namespace_is_not_found() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "ghost");
    let s = status(
        pods.create(&PostParams::default(), &pod("x", json!({})))
            .await,
    );
    assert_eq!(
        (s.reason.as_str(), s.message.as_str()),
        ("NotFound", "namespaces \"ghost\" not found")
    );
}

// Object names must be DNS-1123 subdomains (422 Invalid).
#[tokio::test(flavor = "multi_thread")]
async fn bad_name_is_invalid() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    let s = status(
        pods.create(&PostParams::default(), &pod("Bad_Name", json!({})))
            .await,
    );
    assert_eq!((s.reason.as_str(), s.code), ("Invalid", 422));
    assert!(s.message.starts_with("Pod \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"));
}

// generateName appends five characters from bcdfghjklmnpqrstvwxz2456789.
#[tokio::test(flavor = "multi_thread")]
async fn generate_name() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    let mut p = pod("", json!({}));
    p.metadata.name = None;
    p.metadata.generate_name = Some("job-".into());
    let a = pods
        .create(&PostParams::default(), &p)
        .await
        .unwrap()
        .metadata
        .name
        .unwrap();
    let b = pods
        .create(&PostParams::default(), &p)
        .await
        .unwrap()
        .metadata
        .name
        .unwrap();
    assert_ne!(a, b);
    for n in [a, b] {
        let suffix = n.strip_prefix("job-").unwrap();
        assert_eq!(suffix.len(), 5);
        assert!(
            suffix
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
            "{n}"
        );
    }
}

// Label selectors: =, ==, !=, in, notin, exists, !exists, and comma as AND; field selectors.
#[tokio::test(flavor = "multi_thread")]
async fn label_and_field_selectors() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    for (n, l) in [
        ("a", json!({"app": "web", "tier": "front"})),
        ("b", json!({"app": "web", "tier": "back"})),
        ("c", json!({"app": "db"})),
        ("d", json!({})),
    ] {
        pods.create(&PostParams::default(), &pod(n, l))
            .await
            .unwrap();
    }
    let names = |sel: &'static str, field: bool| {
        let pods = pods.clone();
        async move {
            let lp = if field {
                ListParams::default().fields(sel)
            } else {
                ListParams::default().labels(sel)
            };
            let mut v: Vec<String> = pods
                .list(&lp)
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|p| p.metadata.name.unwrap())
                .collect();
            v.sort();
            v.join(",")
        }
    };
    assert_eq!(names("app=web", false).await, "a,b");
    assert_eq!(names("app==web", false).await, "a,b");
    assert_eq!(names("app!=web", false).await, "c,d");
    assert_eq!(names("app in (db, web)", false).await, "a,b,c");
    assert_eq!(names("app notin (web)", false).await, "c,d");
    assert_eq!(names("tier", false).await, "a,b");
    assert_eq!(names("!tier", false).await, "c,d");
    assert_eq!(names("app=web,tier!=front", false).await, "b");
    assert_eq!(names("metadata.name=c", true).await, "c");
    assert_eq!(
        names("metadata.namespace=default,metadata.name!=a", true).await,
        "b,c,d"
    );
    let all: Api<Pod> = Api::all(client(&sim).await);
    assert_eq!(
        all.list(&ListParams::default().labels("app=db"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
}

fn svc(name: &str, node_port: Option<i64>) -> Service {
    let mut port = json!({"port": 22});
    if let Some(np) = node_port {
        port["nodePort"] = json!(np);
    }
    typed(
        json!({"metadata": {"name": name}, "spec": {"type": "NodePort", "selector": {"app": name}, "ports": [port]}}),
    )
}

// NodePorts: range 30000-32767, unique cluster-wide, allocated when absent, released on delete.
#[tokio::test(flavor = "multi_thread")]
async fn node_ports() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let c = client(&sim).await;
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");
    let s = status(
        svcs.create(&PostParams::default(), &svc("low", Some(29999)))
            .await,
    );
    assert_eq!(s.reason, "Invalid");
    assert_eq!(
        s.message,
        "Service \"low\" is invalid: spec.ports[0].nodePort: Invalid value: 29999: provided port is not in the valid range. The range of valid ports is 30000-32767"
    );
    let a = svcs
        .create(&PostParams::default(), &svc("a", Some(30022)))
        .await
        .unwrap();
    assert!(
        a.spec
            .as_ref()
            .unwrap()
            .cluster_ip
            .as_deref()
            .is_some_and(|ip| ip.starts_with("10.96."))
    );
    namespace(&sim, "other");
    let other: Api<Service> = Api::namespaced(c, "other");
    let s = status(
        other
            .create(&PostParams::default(), &svc("b", Some(30022)))
            .await,
    );
    assert_eq!(
        s.message,
        "Service \"b\" is invalid: spec.ports[0].nodePort: Invalid value: 30022: provided port is already allocated"
    );
    let auto = other
        .create(&PostParams::default(), &svc("auto", None))
        .await
        .unwrap();
    let np = auto.spec.unwrap().ports.unwrap()[0].node_port.unwrap();
    assert!((30000..=32767).contains(&np) && np != 30022);
    svcs.delete("a", &DeleteParams::default()).await.unwrap();
    other
        .create(&PostParams::default(), &svc("b", Some(30022)))
        .await
        .unwrap();
}

// Allocated NodePorts come from above the static band (30000-30085), as the real allocator
// hands them out since ServiceNodePortStaticSubrange (pinned on the real control plane by
// host/tests/real_cluster.rs): a uniform pick over the whole range would put one of 200 below
// 30086 with probability 99.8 %.
#[tokio::test(flavor = "multi_thread")]
async fn allocated_node_ports_avoid_the_static_band() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let svcs: Api<Service> = Api::namespaced(client(&sim).await, "default");
    for i in 0..200 {
        let s = svcs
            .create(&PostParams::default(), &svc(&format!("s{i}"), None))
            .await
            .unwrap();
        let np = s.spec.unwrap().ports.unwrap()[0].node_port.unwrap();
        assert!((30086..=32767).contains(&np), "{np}");
    }
}

// A ReplicaSet whose selector does not match its template labels is 422 Invalid.
#[tokio::test(flavor = "multi_thread")]
async fn replicaset_selector_mismatch() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let api: Api<ReplicaSet> = Api::namespaced(client(&sim).await, "default");
    let s = status(
        api.create(
            &PostParams::default(),
            &rs(
                "x",
                json!({"app": "x"}),
                json!({"app": "y", "b": "c"}),
                "Always",
            ),
        )
        .await,
    );
    assert_eq!((s.reason.as_str(), s.code), ("Invalid", 422));
    assert_eq!(
        s.message,
        "ReplicaSet.apps \"x\" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"y\", \"b\":\"c\"}: `selector` does not match template `labels`"
    );
    let (_, body) = raw(
        &sim,
        "admin",
        "POST",
        "/apis/apps/v1/namespaces/default/replicasets",
        Some(&json!(rs(
            "x",
            json!({"app": "x"}),
            json!({"app": "y"}),
            "Always"
        ))),
    );
    assert_eq!(
        body["details"]["causes"][0]["field"],
        "spec.template.metadata.labels"
    );
    assert_eq!(body["details"]["causes"][0]["reason"], "FieldValueInvalid");
}

// A ReplicaSet's pod template must use restartPolicy Always.
#[tokio::test(flavor = "multi_thread")]
async fn replicaset_restart_policy() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let api: Api<ReplicaSet> = Api::namespaced(client(&sim).await, "default");
    let s = status(
        api.create(
            &PostParams::default(),
            &rs("x", json!({"app": "x"}), json!({"app": "x"}), "Never"),
        )
        .await,
    );
    assert_eq!(
        s.message,
        "ReplicaSet.apps \"x\" is invalid: spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""
    );
}

// Label values longer than 63 characters, or with bad characters, are 422 Invalid.
#[tokio::test(flavor = "multi_thread")]
async fn label_values_validated() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    let long = "a".repeat(64);
    let s = status(
        pods.create(&PostParams::default(), &pod("x", json!({"k": long})))
            .await,
    );
    assert_eq!(
        s.message,
        format!(
            "Pod \"x\" is invalid: metadata.labels: Invalid value: \"{long}\": must be no more than 63 characters"
        )
    );
    let s = status(
        pods.create(&PostParams::default(), &pod("x", json!({"k": "-bad"})))
            .await,
    );
    assert_eq!(
        s.message,
        "Pod \"x\" is invalid: metadata.labels: Invalid value: \"-bad\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
    );
}

// Merge, strategic merge, JSON patch and apply patch all change the stored object.
#[tokio::test(flavor = "multi_thread")]
async fn patch_kinds() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    pods.create(&PostParams::default(), &pod("x", json!({"a": "1"})))
        .await
        .unwrap();
    let pp = PatchParams::default();
    pods.patch(
        "x",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"b": "2"}}})),
    )
    .await
    .unwrap();
    pods.patch(
        "x",
        &pp,
        &Patch::Strategic(json!({"metadata": {"labels": {"a": null}}})),
    )
    .await
    .unwrap();
    let jp = json!([{"op": "add", "path": "/metadata/labels/c", "value": "3"}]);
    let (code, _) = raw_with(
        &sim,
        "admin",
        "PATCH",
        "/api/v1/namespaces/default/pods/x",
        "application/json-patch+json",
        Some(&jp),
    );
    assert_eq!(code, 200);
    let p = pods.get("x").await.unwrap();
    assert_eq!(
        p.metadata.labels.unwrap(),
        [("b".to_string(), "2".to_string()), ("c".into(), "3".into())].into()
    );
    let apply = PatchParams::apply("test");
    let created = pods
        .patch(
            "y",
            &apply,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "y"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("y"));
    let s = status(
        pods.patch(
            "x",
            &pp,
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}})),
        )
        .await,
    );
    assert_eq!(s.reason, "Conflict");
}

// API defaulting sets requests from limits, and the QoS class follows the Kubernetes rules.
#[tokio::test(flavor = "multi_thread")]
async fn defaulting_and_qos() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    let mk = |name: &str, resources: serde_json::Value| -> Pod {
        typed(
            json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]}}),
        )
    };
    let g = pods
        .create(
            &PostParams::default(),
            &mk("g", json!({"limits": {"cpu": "500m", "memory": "128Mi"}})),
        )
        .await
        .unwrap();
    let req = g.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap()
        .requests
        .unwrap();
    assert_eq!(req["cpu"].0, "500m");
    assert_eq!(req["memory"].0, "128Mi");
    assert_eq!(g.status.unwrap().qos_class.as_deref(), Some("Guaranteed"));
    let b = pods
        .create(
            &PostParams::default(),
            &mk("b", json!({"requests": {"cpu": "100m"}})),
        )
        .await
        .unwrap();
    assert_eq!(b.status.unwrap().qos_class.as_deref(), Some("Burstable"));
    let e = pods
        .create(&PostParams::default(), &mk("e", json!({})))
        .await
        .unwrap();
    assert_eq!(e.status.unwrap().qos_class.as_deref(), Some("BestEffort"));
}

// Watch is not served: a clear 405 Status instead of a hanging stream.
#[tokio::test(flavor = "multi_thread")]
async fn watch_is_refused() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let (code, body) = raw(
        &sim,
        "admin",
        "GET",
        "/api/v1/namespaces/default/pods?watch=1",
        None,
    );
    assert_eq!(code, 405);
    assert_eq!(body["reason"], "MethodNotAllowed");
}

// Deleting a namespace deletes what it contains and answers with the namespace Terminating.
#[tokio::test(flavor = "multi_thread")]
async fn namespace_delete_cascades() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let c = client(&sim).await;
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.create(
        &PostParams::default(),
        &typed(json!({"metadata": {"name": "team"}})),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(c, "team");
    pods.create(&PostParams::default(), &pod("x", json!({})))
        .await
        .unwrap();
    let ns = nss
        .delete("team", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    assert!(sim.list("pods", Some("team")).is_empty());
}

// The in-process accessors see what the API stored; seed keeps status and reserves NodePorts.
#[tokio::test(flavor = "multi_thread")]
async fn seed_and_accessors() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let seeded = sim.seed(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "default"},
        "spec": {"type": "NodePort", "ports": [{"port": 22, "nodePort": 31000}]}, "status": {"loadBalancer": {"x": 1}}}));
    assert!(seeded["metadata"]["uid"].is_string());
    assert_eq!(
        sim.get("services", Some("default"), "s").unwrap()["status"]["loadBalancer"]["x"],
        1
    );
    assert_eq!(sim.list("nodes", None).len(), 3);
    let svcs: Api<Service> = Api::namespaced(client(&sim).await, "default");
    let s = status(
        svcs.create(&PostParams::default(), &svc("t", Some(31000)))
            .await,
    );
    assert!(s.message.ends_with("provided port is already allocated"));
}

// An object with finalizers is only marked for deletion; removing the last finalizer lets it go.
#[tokio::test(flavor = "multi_thread")]
async fn finalizers_hold_deletion() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    let mut p = pod("held", json!({}));
    p.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    pods.create(&PostParams::default(), &p).await.unwrap();
    pods.delete("held", &DeleteParams::default()).await.unwrap();
    assert!(
        pods.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    pods.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(status(pods.get("held").await).code, 404);
}

fn with_container_name(mut v: serde_json::Value, pointer: &str, name: &str) -> serde_json::Value {
    *v.pointer_mut(pointer).expect("container name field") = json!(name);
    v
}

// Container names are DNS-1123 labels (ValidateDNS1123Label): 64 characters is 422 Invalid with
// the field path and `must be no more than 63 characters`, for a Pod and for a ReplicaSet's
// template alike; 63 is accepted.
#[tokio::test(flavor = "multi_thread")]
async fn container_names_are_at_most_63_characters() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let long = "c".repeat(64);
    let pod_json = json!(pod("x", json!({})));
    let (code, body) = raw(
        &sim,
        "admin",
        "POST",
        "/api/v1/namespaces/default/pods",
        Some(&with_container_name(
            pod_json.clone(),
            "/spec/containers/0/name",
            &long,
        )),
    );
    assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(
        body["message"],
        format!(
            "Pod \"x\" is invalid: spec.containers[0].name: Invalid value: \"{long}\": must be no more than 63 characters"
        )
    );
    assert_eq!(
        body["details"]["causes"],
        json!([{"reason": "FieldValueInvalid", "field": "spec.containers[0].name",
            "message": format!("Invalid value: \"{long}\": must be no more than 63 characters")}])
    );
    let rs_json = json!(rs("x", json!({"app": "x"}), json!({"app": "x"}), "Always"));
    let (code, body) = raw(
        &sim,
        "admin",
        "POST",
        "/apis/apps/v1/namespaces/default/replicasets",
        Some(&with_container_name(
            rs_json.clone(),
            "/spec/template/spec/containers/0/name",
            &long,
        )),
    );
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        format!(
            "ReplicaSet.apps \"x\" is invalid: spec.template.spec.containers[0].name: Invalid value: \"{long}\": must be no more than 63 characters"
        )
    );
    assert_eq!(
        body["details"]["causes"][0]["field"],
        "spec.template.spec.containers[0].name"
    );
    let ok = "c".repeat(63);
    let (code, body) = raw(
        &sim,
        "admin",
        "POST",
        "/apis/apps/v1/namespaces/default/replicasets",
        Some(&with_container_name(
            rs_json,
            "/spec/template/spec/containers/0/name",
            &ok,
        )),
    );
    assert_eq!(code, 201, "{body}");
}

// Service names are DNS-1035 labels (63 characters at most); pods and ReplicaSets are DNS
// subdomains (253).
#[tokio::test(flavor = "multi_thread")]
async fn name_length_limits_follow_the_kind() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let svcs: Api<Service> = Api::namespaced(client(&sim).await, "default");
    let name = "s".repeat(64);
    let service: Service = typed(json!({"metadata": {"name": name},
        "spec": {"selector": {"app": "s"}, "ports": [{"port": 22}]}}));
    let s = status(svcs.create(&PostParams::default(), &service).await);
    assert_eq!(
        s.message,
        format!(
            "Service \"{name}\" is invalid: metadata.name: Invalid value: \"{name}\": must be no more than 63 characters"
        )
    );
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    pods.create(&PostParams::default(), &pod(&"p".repeat(253), json!({})))
        .await
        .unwrap();
    let name = "p".repeat(254);
    let s = status(
        pods.create(&PostParams::default(), &pod(&name, json!({})))
            .await,
    );
    assert_eq!(
        s.message,
        format!(
            "Pod \"{name}\" is invalid: metadata.name: Invalid value: \"{name}\": must be no more than 253 characters"
        )
    );
}

// The name generator keeps at most 58 characters of generateName and adds 5 (names.SimpleNameGenerator).
#[tokio::test(flavor = "multi_thread")]
async fn generated_names_are_at_most_63_characters() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    let prefix = format!("{}-", "g".repeat(69));
    let mut p = pod("", json!({}));
    p.metadata.name = None;
    p.metadata.generate_name = Some(prefix.clone());
    let created = pods.create(&PostParams::default(), &p).await.unwrap();
    let name = created.metadata.name.unwrap();
    assert_eq!(name.len(), 63);
    assert!(name.starts_with(&prefix[..58]), "{name}");
}

fn delete_if(uid: Option<String>, resource_version: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version,
        }),
        ..DeleteParams::default()
    }
}

// A DELETE whose uid precondition no longer holds is refused by the registry's BeforeDelete
// (k8s.io/apiserver pkg/registry/rest/delete.go): 409 Conflict naming the object by its kind,
// `the UID in the precondition (A) does not match the UID in record (B). The object might have
// been deleted and then recreated`, and the object stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_uid_precondition_is_a_conflict_naming_the_kind() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    let first = pods
        .create(&PostParams::default(), &pod("x", json!({})))
        .await
        .unwrap();
    pods.delete("x", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let second = pods
        .create(&PostParams::default(), &pod("x", json!({})))
        .await
        .unwrap();
    let (old, new) = (first.metadata.uid.unwrap(), second.metadata.uid.unwrap());
    let s = status(pods.delete("x", &delete_if(Some(old.clone()), None)).await);
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        format!(
            "Operation cannot be fulfilled on Pod \"x\": the UID in the precondition ({old}) does not match the UID in record ({new}). The object might have been deleted and then recreated"
        )
    );
    let d = s.details.expect("details");
    assert_eq!(
        (d.name.as_str(), d.kind.as_str(), d.group.as_str()),
        ("x", "Pod", "")
    );
    assert!(sim.get("pods", Some("default"), "x").is_some());
    pods.delete("x", &delete_if(Some(new), None)).await.unwrap();

    let rss: Api<ReplicaSet> = Api::namespaced(client(&sim).await, "default");
    rss.create(
        &PostParams::default(),
        &rs("r", json!({"app": "r"}), json!({"app": "r"}), "Always"),
    )
    .await
    .unwrap();
    let s = status(rss.delete("r", &delete_if(Some("gone".into()), None)).await);
    assert!(
        s.message
            .starts_with("Operation cannot be fulfilled on ReplicaSet.apps \"r\": the UID in the precondition (gone)"),
        "{}",
        s.message
    );
    let d = s.details.expect("details");
    assert_eq!((d.kind.as_str(), d.group.as_str()), ("ReplicaSet", "apps"));
}

// A resourceVersion precondition that no longer holds is refused the same way, with
// `... The object might have been modified`; a matching one deletes.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_resource_version_precondition_is_a_conflict() {
    let (sim, pods) = quiet_pods().await;
    let created = pods
        .create(&PostParams::default(), &pod("x", json!({})))
        .await
        .unwrap();
    let rv = created.metadata.resource_version.unwrap();
    let s = status(pods.delete("x", &delete_if(None, Some("1".into()))).await);
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        format!(
            "Operation cannot be fulfilled on Pod \"x\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({rv}). The object might have been modified"
        )
    );
    pods.delete("x", &delete_if(created.metadata.uid, Some(rv)))
        .await
        .unwrap();
    assert!(sim.get("pods", Some("default"), "x").is_none());
}
