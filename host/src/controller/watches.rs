//! The three watches (ReplicaSets and pods carrying `app.kubernetes.io/name`, Services) of
//! each watched namespace, or of every namespace, and the caches they fill; each change names
//! the projects it concerns.

use futures::{Stream, StreamExt, TryStreamExt};
use jumppod_plan::controller::{self as decisions, ProjectKey};
use jumppod_plan::planner::Observed;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use std::collections::BTreeSet;

/// Objects per page of a watch's initial list.
const LIST_PAGE: u32 = 100;

/// The caches, and the stream of the projects each change concerns: one set of watches per
/// namespace of `namespaces`, or one for every namespace (None).
pub(super) fn start(
    client: &Client,
    namespaces: Option<&[String]>,
) -> (
    Caches,
    impl Stream<Item = Result<Vec<Trigger>, watcher::Error>> + Send + Unpin + use<>,
) {
    let scopes: Vec<Option<&str>> = match namespaces {
        Some(list) => list.iter().map(|ns| Some(ns.as_str())).collect(),
        None => vec![None],
    };
    let mut caches = Caches { scopes: Vec::new() };
    let mut streams = Vec::new();
    for ns in scopes {
        let (scope, stream) = start_scope(client, ns);
        caches.scopes.push(scope);
        streams.push(stream);
    }
    (caches, futures::stream::select_all(streams))
}

/// The three watches of one namespace (or of every one).
fn start_scope(
    client: &Client,
    ns: Option<&str>,
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
    let streams = futures::stream::select_all([
        watch(
            api::<ReplicaSet>(client, ns),
            labelled.clone(),
            rs_writer,
            |rs| ProjectKey::of_replicaset(rs).is_some(),
            decisions::slim_replicaset,
            |rs| ProjectKey::of_replicaset(rs).into_iter().collect(),
        )
        .boxed(),
        watch(
            api::<Service>(client, ns),
            unfiltered,
            svc_writer,
            |s| ProjectKey::of_service(s).is_some(),
            decisions::slim_service,
            |s| ProjectKey::of_service(s).into_iter().collect(),
        )
        .boxed(),
        watch(
            api::<Pod>(client, ns),
            labelled,
            pod_writer,
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
}

/// The caches the watches fill, one set per watched namespace (or one for every namespace).
#[derive(Clone)]
pub(super) struct Caches {
    scopes: Vec<Scope>,
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
    /// Once every watch has listed.
    pub(super) async fn wait_until_ready(&self) {
        for scope in &self.scopes {
            let _ = tokio::join!(
                scope.replicasets.wait_until_ready(),
                scope.services.wait_until_ready(),
                scope.pods.wait_until_ready()
            );
        }
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

    pub(super) fn observed(&self, key: &ProjectKey) -> Observed {
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
        decisions::observed(key, rs, svc, pods.iter().map(|p| p.as_ref()))
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

/// One watch: objects that are not a jump pod's never enter the cache (an object relabelled
/// away becomes a delete), and what the planner does not read is dropped from those that do.
fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
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
        watcher::Event::InitDone => vec![Trigger::All],
        watcher::Event::Init | watcher::Event::InitApply(_) => Vec::new(),
    })
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
