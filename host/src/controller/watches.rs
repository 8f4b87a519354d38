//! The three watches (ReplicaSets and pods carrying `app.kubernetes.io/name`, Services) of
//! each watched namespace, or of every namespace, and the caches they fill; each change names
//! the projects it concerns. Beside them, when RBAC allows it, a watch of the nodes: a node
//! that starts or stops going away (cordoned, tainted for removal) names the projects with a
//! pod on it. Each watch says when it lists ([`Synced`]): no decision is made from the caches
//! while one does.

use super::synced::{Synced, Watch};
use futures::{Stream, StreamExt, TryStreamExt};
use jumppod_plan::controller::{self as decisions, ProjectKey};
use jumppod_plan::nodes;
use jumppod_plan::planner::Observed;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// Objects per page of a watch's initial list.
const LIST_PAGE: u32 = 100;

/// The caches, and the stream of the projects each change concerns: one set of watches per
/// namespace of `namespaces`, or one for every namespace (None).
pub(super) fn start(
    client: &Client,
    namespaces: Option<&[String]>,
    watch_nodes: bool,
    silent_after: Option<std::time::Duration>,
) -> (
    Caches,
    impl Stream<Item = Result<Vec<Trigger>, watcher::Error>> + Send + Unpin + use<>,
) {
    let scopes: Vec<Option<&str>> = match namespaces {
        Some(list) => list.iter().map(|ns| Some(ns.as_str())).collect(),
        None => vec![None],
    };
    let mut watches: Vec<Watch> = scopes
        .iter()
        .flat_map(|ns| KINDS.map(|kind| watch_of(kind, *ns)))
        .collect();
    if watch_nodes {
        watches.push(watch_of(NODES, None));
    }
    if silent_after.is_some() {
        watches.push(watch_of(super::leases::WATCH, None));
    }
    let mut caches = Caches {
        scopes: Vec::new(),
        nodes: None,
        known: NodeWatch::default(),
        silence: None,
        synced: Synced::new(watches),
    };
    let mut streams = Vec::new();
    for ns in scopes {
        let (scope, stream) = start_scope(client, ns, &caches.synced);
        caches.scopes.push(scope);
        streams.push(stream);
    }
    if watch_nodes {
        let (nodes, stream) = start_nodes(client, caches.synced.clone(), caches.known.clone());
        caches.nodes = Some(nodes);
        streams.push(stream);
    }
    if let Some(after) = silent_after {
        let (silence, stream) = super::leases::start(client, after, caches.synced.clone());
        caches.silence = Some(silence);
        streams.push(
            stream
                .map_ok(|nodes| nodes.into_iter().map(Trigger::Node).collect())
                .boxed(),
        );
    }
    (caches, futures::stream::select_all(streams))
}

/// The kinds watched in each namespace, as their watches are named.
const KINDS: [&str; 3] = ["replicasets", "services", "pods"];
const NODES: &str = "nodes";

/// A watch of `kind` in `namespace` (None: in every namespace, or nodes), for [`Synced`].
fn watch_of(kind: &'static str, namespace: Option<&str>) -> Watch {
    Watch {
        kind,
        namespace: namespace.map(str::to_owned),
    }
}

/// Whether the controller may watch nodes (a ClusterRole `jumppod rbac --controller` prints):
/// without it, nothing is surged.
pub(super) async fn may_watch_nodes(client: &Client) -> bool {
    super::access::may_list(
        Api::<Node>::all(client.clone()),
        "nodes",
        "a jump pod on a cordoned node is not replaced before it goes; grant the ClusterRole \
         `jumppod rbac --controller` prints",
    )
    .await
}

/// The watch of every node, slimmed to what says it is going away; a change of that names the
/// node, whose projects are found in the pod caches.
fn start_nodes(
    client: &Client,
    synced: Synced,
    known: NodeWatch,
) -> (
    Store<Node>,
    futures::stream::BoxStream<'static, Result<Vec<Trigger>, watcher::Error>>,
) {
    let (nodes, writer) = reflector::store();
    let config = watcher::Config::default().page_size(LIST_PAGE);
    let events = watcher(Api::<Node>::all(client.clone()), config)
        .default_backoff()
        .map_ok(|event| event.modify(slim_node));
    // A node's status changes every few minutes: only a change of whether it is going away,
    // not Ready or lost makes a reconcile.
    let mut seen: HashMap<String, Judged> = HashMap::new();
    // An error (RBAC withdrawn, the API server away) leaves the cache as it was: stale until
    // the watch answers again.
    let (health, gate) = (known.clone(), synced.clone());
    let events = events.inspect(move |r| {
        let failing = r.as_ref().err().map(|e| e.to_string());
        if failing.is_some() {
            // Nothing is done for a node meanwhile (`nodes_unknown`), so nothing waits on it: a
            // ClusterRole withdrawn must not hold up the keeper and the keys.
            gate.listed(&watch_of(NODES, None));
        }
        health.lock().failing = failing;
    });
    let stream = reflector::reflector(writer, events).map_ok(move |event| match event {
        watcher::Event::Apply(node) => {
            let name = node.metadata.name.clone().unwrap_or_default();
            known.lock().deleted.remove(&name);
            let now = judged(&node);
            match seen.insert(name.clone(), now.clone()) {
                Some(before) if before == now => Vec::new(),
                _ => vec![Trigger::Node(name)],
            }
        }
        watcher::Event::Delete(node) => {
            let name = node.metadata.name.clone().unwrap_or_default();
            seen.remove(&name);
            known.lock().deleted.insert(name.clone());
            vec![Trigger::Node(name)]
        }
        watcher::Event::InitApply(node) => {
            let name = node.metadata.name.clone().unwrap_or_default();
            known.lock().deleted.remove(&name);
            seen.insert(name, judged(&node));
            Vec::new()
        }
        watcher::Event::InitDone => {
            synced.listed(&watch_of(NODES, None));
            vec![Trigger::All]
        }
        watcher::Event::Init => {
            synced.listing(&watch_of(NODES, None));
            Vec::new()
        }
    });
    (nodes, stream.boxed())
}

/// What the nodes watch knows beside its cache: the nodes it saw deleted, until they come back
/// (only a deletion seen counts: a node missing from the cache may be one whose first event is
/// still on its way), and why it is failing, if it is.
#[derive(Clone, Default)]
pub(super) struct NodeWatch(Arc<Mutex<NodeWatchState>>);

#[derive(Default)]
pub(super) struct NodeWatchState {
    deleted: BTreeSet<String>,
    failing: Option<String>,
}

impl NodeWatch {
    fn lock(&self) -> std::sync::MutexGuard<'_, NodeWatchState> {
        // A set of names and a message: a panic elsewhere cannot leave them half written.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What is known against a node: whether it is leaving, not Ready or lost, and why.
type Judged = (Option<String>, Option<String>, Option<String>);

fn judged(node: &Node) -> Judged {
    (
        jumppod_plan::surge::leaving(node),
        nodes::not_ready(node),
        nodes::lost(node),
    )
}

/// Of a node, what [`jumppod_plan::surge::leaving`] and [`jumppod_plan::nodes`] read: its
/// name, `unschedulable`, taints and Ready condition.
fn slim_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    node.metadata.annotations = None;
    node.metadata.labels = None;
    node.status = node
        .status
        .take()
        .map(|status| k8s_openapi::api::core::v1::NodeStatus {
            conditions: status
                .conditions
                .map(|c| c.into_iter().filter(|c| c.type_ == "Ready").collect()),
            ..Default::default()
        });
    node.spec = node
        .spec
        .take()
        .map(|spec| k8s_openapi::api::core::v1::NodeSpec {
            unschedulable: spec.unschedulable,
            taints: spec.taints,
            ..Default::default()
        });
}

/// The three watches of one namespace (or of every one).
fn start_scope(
    client: &Client,
    ns: Option<&str>,
    synced: &Synced,
) -> (
    Scope,
    futures::stream::BoxStream<'static, Result<Vec<Trigger>, watcher::Error>>,
) {
    let (replicasets, rs_writer) = reflector::store();
    let (services, svc_writer) = reflector::store();
    let (pods, pod_writer) = reflector::store();
    // Pages of 100, not kube-rs' 500: a page is held whole, before the objects are slimmed
    // for the cache, and it sets a fresh controller's peak memory.
    let unfiltered = watcher::Config::default().page_size(LIST_PAGE);
    let labelled = unfiltered.clone().labels(decisions::WATCH_SELECTOR);
    let listing = |kind| Listing {
        synced: synced.clone(),
        watch: watch_of(kind, ns),
    };
    let streams = futures::stream::select_all([
        watch(
            api::<ReplicaSet>(client, ns),
            labelled.clone(),
            rs_writer,
            listing(KINDS[0]),
            |rs| ProjectKey::of_replicaset(rs).is_some(),
            decisions::slim_replicaset,
            |rs| ProjectKey::of_replicaset(rs).into_iter().collect(),
        )
        .boxed(),
        watch(
            api::<Service>(client, ns),
            unfiltered,
            svc_writer,
            listing(KINDS[1]),
            |s| ProjectKey::of_service(s).is_some(),
            decisions::slim_service,
            |s| ProjectKey::of_service(s).into_iter().collect(),
        )
        .boxed(),
        watch(
            api::<Pod>(client, ns),
            labelled,
            pod_writer,
            listing(KINDS[2]),
            |p| !ProjectKey::of_pod(p).is_empty(),
            decisions::slim_pod,
            ProjectKey::of_pod,
        )
        .boxed(),
    ]);
    let scope = Scope {
        namespace: ns.map(str::to_owned),
        replicasets,
        services,
        pods,
    };
    (scope, streams.boxed())
}

/// What a reconcile is run on.
pub(super) enum Trigger {
    Project(ProjectKey),
    /// A watch (re)listed: every project the caches know.
    All,
    /// A failing project's backoff is over.
    Retry(ProjectKey),
    /// A node started or stopped going away: the projects with a pod on it.
    Node(String),
}

/// The caches the watches fill, one set per watched namespace (or one for every namespace).
#[derive(Clone)]
pub(super) struct Caches {
    scopes: Vec<Scope>,
    /// Every node, when RBAC allows watching them.
    nodes: Option<Store<Node>>,
    /// What that watch knows beside its cache.
    known: NodeWatch,
    /// Which nodes stopped renewing their Lease, when RBAC allows watching them.
    silence: Option<std::sync::Arc<super::leases::Silence>>,
    /// Whether each of them holds a whole list.
    pub(super) synced: Synced,
}

/// The caches of one namespace (None: of every namespace).
#[derive(Clone)]
struct Scope {
    namespace: Option<String>,
    replicasets: Store<ReplicaSet>,
    services: Store<Service>,
    pods: Store<Pod>,
}

impl Caches {
    /// Once every watch has listed (and none lists again).
    pub(super) async fn wait_until_ready(&self) {
        self.synced.wait().await;
    }

    /// The projects with a pod on `node`.
    pub(super) fn on_node(&self, node: &str) -> BTreeSet<ProjectKey> {
        let mut keys = BTreeSet::new();
        for scope in &self.scopes {
            for pod in scope.pods.state() {
                let on = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
                if on == Some(node) {
                    keys.extend(ProjectKey::of_pod(&pod));
                }
            }
        }
        keys
    }

    /// How many ReplicaSets, Services and pods are cached.
    pub(super) fn sizes(&self) -> (usize, usize, usize) {
        self.scopes.iter().fold((0, 0, 0), |(r, s, p), scope| {
            (
                r + scope.replicasets.len(),
                s + scope.services.len(),
                p + scope.pods.len(),
            )
        })
    }

    /// What the caches hold of `key`'s project, with what the controller remembers of its bare
    /// jump pod (`remembered`): that pod's node counts among the project's nodes when the pod is
    /// gone, so a pod made again stays off it while it is in trouble.
    pub(super) fn observed(&self, key: &ProjectKey, remembered: Option<&Pod>) -> Observed {
        let scope = self
            .scopes
            .iter()
            .find(|s| s.namespace.as_deref().is_none_or(|ns| ns == key.namespace));
        let rs = scope
            .and_then(|s| {
                s.replicasets
                    .get(&ObjectRef::new(&key.name).within(&key.namespace))
            })
            .map(|rs| rs.as_ref().clone());
        let svc = scope
            .and_then(|s| {
                s.services.get(
                    &ObjectRef::new(&jumppod::schema::service_name(&key.name))
                        .within(&key.namespace),
                )
            })
            .map(|s| s.as_ref().clone());
        // `decisions::observed` picks the project's pods (by name and instance label) itself.
        let pods = scope
            .map(|s| {
                s.pods
                    .state_filter(|p| p.metadata.namespace.as_deref() == Some(&key.namespace))
            })
            .unwrap_or_default();
        let mut observed = decisions::observed(key, rs, svc, pods.iter().map(|p| p.as_ref()));
        let mut ours: Vec<&Pod> = observed.pods.iter().collect();
        ours.extend(observed.bare_pod.as_ref());
        ours.extend(remembered);
        let names: BTreeSet<&str> = ours.iter().filter_map(|p| node_of(p)).collect();
        let silent = self
            .silence
            .as_ref()
            .map(|s| s.silent())
            .unwrap_or_default();
        if let Some(e) = self.known.lock().failing.clone() {
            // Nothing is known of the nodes now: nothing is done for them.
            observed.nodes_unknown = Some(format!("the watch of the nodes fails ({e})"));
            observed.remembered_pod = remembered.cloned();
            return observed;
        }
        // A cordon or an autoscaler's taint is someone's decision, whatever else is going on.
        observed.leaving_nodes = self.nodes_where(&names, jumppod_plan::surge::leaving);
        if let Some(why) = self.disruption(&silent) {
            // The view is in doubt: nothing is done on silence, not Ready or lost, as
            // Kubernetes alone would.
            observed.disruption = Some(why);
        } else {
            observed.not_ready_nodes = self.nodes_where(&names, nodes::not_ready);
            observed.lost_nodes = self.nodes_where(&names, nodes::lost);
            observed.lost_nodes.extend(self.gone(&names));
            observed.silent_nodes = silent
                .into_iter()
                .filter(|(n, _)| names.contains(n.as_str()))
                .collect();
        }
        observed.remembered_pod = remembered.cloned();
        observed
    }

    /// Why the nodes in trouble are too many to act on, if they are
    /// ([`nodes::disruption`]): counted over every node, `silent` by this controller's clock
    /// or not Ready or lost by the cluster's word. None without a nodes watch.
    fn disruption(&self, silent: &BTreeMap<String, String>) -> Option<String> {
        let all = self.nodes.as_ref()?.state();
        let troubled = all
            .iter()
            .filter(|n| {
                silent.contains_key(n.metadata.name.as_deref().unwrap_or_default())
                    || nodes::lost(n).is_some()
                    || nodes::not_ready(n).is_some()
            })
            .count();
        let why = nodes::disruption(all.len(), troubled)?;
        tracing::warn!(%why, "most nodes in trouble at once: acting on none of it");
        Some(why)
    }

    /// Of `names`, the nodes whose Node the nodes watch saw deleted: their kubelet will confirm
    /// nothing, and PodGC force-deletes their pods.
    fn gone(&self, names: &BTreeSet<&str>) -> BTreeMap<String, String> {
        let known = self.known.lock();
        let deleted = &known.deleted;
        names
            .iter()
            .filter(|name| deleted.contains(**name))
            .map(|name| {
                (
                    (*name).to_owned(),
                    "is gone (its Node was deleted)".to_owned(),
                )
            })
            .collect()
    }

    /// Of `names`, the nodes for which `why` says something, and what.
    fn nodes_where(
        &self,
        names: &BTreeSet<&str>,
        why: fn(&Node) -> Option<String>,
    ) -> BTreeMap<String, String> {
        let Some(nodes) = &self.nodes else {
            return BTreeMap::new();
        };
        names
            .iter()
            .filter_map(|name| {
                let node = nodes.get(&ObjectRef::new(name))?;
                Some(((*name).to_owned(), why(&node)?))
            })
            .collect()
    }

    pub(super) fn keys(&self) -> BTreeSet<ProjectKey> {
        let mut keys = BTreeSet::new();
        for scope in &self.scopes {
            keys.extend(
                scope
                    .replicasets
                    .state()
                    .iter()
                    .filter_map(|r| ProjectKey::of_replicaset(r)),
            );
            keys.extend(
                scope
                    .services
                    .state()
                    .iter()
                    .filter_map(|s| ProjectKey::of_service(s)),
            );
            for p in scope.pods.state() {
                keys.extend(ProjectKey::of_pod(&p));
            }
        }
        keys
    }
}

/// A watch and where it says when it lists.
struct Listing {
    synced: Synced,
    watch: Watch,
}

/// One watch: objects that are not a jump pod's never enter the cache (an object relabelled
/// away becomes a delete), and what the planner does not read is dropped from those that do.
/// Its store has changed when an event reaches the stream's end (the reflector writes first).
fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    listing: Listing,
    ours: fn(&K) -> bool,
    slim: fn(&mut K),
    keys: fn(&K) -> Vec<ProjectKey>,
) -> impl Stream<Item = Result<Vec<Trigger>, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let events = watcher(api, config)
        .default_backoff()
        .try_filter_map(move |event| {
            futures::future::ready(Ok(match event {
                watcher::Event::InitApply(o) if !ours(&o) => None,
                watcher::Event::Apply(o) if !ours(&o) => Some(watcher::Event::Delete(o)),
                other => Some(other.modify(slim)),
            }))
        });
    reflector::reflector(writer, events).map_ok(move |event| match event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
            keys(&o).into_iter().map(Trigger::Project).collect()
        }
        watcher::Event::InitDone => {
            listing.synced.listed(&listing.watch);
            vec![Trigger::All]
        }
        watcher::Event::Init => {
            listing.synced.listing(&listing.watch);
            Vec::new()
        }
        watcher::Event::InitApply(_) => Vec::new(),
    })
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}
