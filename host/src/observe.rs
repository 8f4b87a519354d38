//! Reads what exists, with as few requests as possible.
//!
//! `ensure` first reads the ReplicaSet and the Service (2 requests, concurrently). Only when
//! one is missing, the Service still has the pre-#3891 selector, or the ReplicaSet has no ready
//! replica does it read further: the namespace (when the ReplicaSet is missing), the bare pod
//! by name and the pods by instance label (concurrently).

use crate::api::{Kube, Op, explain, is_not_found};
use crate::error::HostError;
use jumppod::schema;
use jumppod_plan::config::Config;
use jumppod_plan::planner::{Observed, needs_a_closer_look};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use kube::Api;
use kube::api::ListParams;
use serde::de::DeserializeOwned;

/// GET that answers None on 404.
pub async fn get_opt<K>(kube: &Kube, api: &Api<K>, op: Op<'_>) -> Result<Option<K>, HostError>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let name = op.name.unwrap_or_default();
    match kube.retry(&op, || api.get(name)).await {
        Ok(obj) => Ok(Some(obj)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(explain(&op, e)),
    }
}

pub async fn replicaset(kube: &Kube, config: &Config) -> Result<Option<ReplicaSet>, HostError> {
    let api: Api<ReplicaSet> = Api::namespaced(kube.client.clone(), &config.namespace);
    get_opt(
        kube,
        &api,
        Op::new(
            "get",
            "replicasets",
            Some(&config.namespace),
            Some(&config.name),
        ),
    )
    .await
}

pub async fn service(kube: &Kube, config: &Config) -> Result<Option<Service>, HostError> {
    let api: Api<Service> = Api::namespaced(kube.client.clone(), &config.namespace);
    let name = schema::service_name(&config.name);
    get_opt(
        kube,
        &api,
        Op::new("get", "services", Some(&config.namespace), Some(&name)),
    )
    .await
}

pub async fn namespace_exists(kube: &Kube, config: &Config) -> Result<bool, HostError> {
    let api: Api<Namespace> = Api::all(kube.client.clone());
    Ok(get_opt(
        kube,
        &api,
        Op::new("get", "namespaces", None, Some(&config.namespace)),
    )
    .await?
    .is_some())
}

pub async fn bare_pod(kube: &Kube, config: &Config) -> Result<Option<Pod>, HostError> {
    let api: Api<Pod> = Api::namespaced(kube.client.clone(), &config.namespace);
    get_opt(
        kube,
        &api,
        Op::new("get", "pods", Some(&config.namespace), Some(&config.name)),
    )
    .await
}

/// Pods labelled `app.kubernetes.io/instance=<name>`.
pub async fn pods(kube: &Kube, config: &Config) -> Result<Vec<Pod>, HostError> {
    pods_of(kube, &config.namespace, &config.name).await
}

/// Pods labelled `app.kubernetes.io/instance=<instance>` in `ns`.
pub async fn pods_of(kube: &Kube, ns: &str, instance: &str) -> Result<Vec<Pod>, HostError> {
    let api: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let params = ListParams::default().labels(&format!("{}={instance}", schema::INSTANCE_LABEL));
    let op = Op::new("list", "pods", Some(ns), None);
    match kube.retry(&op, || api.list(&params)).await {
        Ok(list) => Ok(list.items),
        // A namespace that does not exist has no pods.
        Err(e) if is_not_found(&e) => Ok(Vec::new()),
        Err(e) => Err(explain(&op, e)),
    }
}

pub async fn node(kube: &Kube, name: &str) -> Result<Option<Node>, HostError> {
    let api: Api<Node> = Api::all(kube.client.clone());
    get_opt(kube, &api, Op::new("get", "nodes", None, Some(name))).await
}

pub async fn nodes(kube: &Kube) -> Result<Vec<Node>, HostError> {
    let api: Api<Node> = Api::all(kube.client.clone());
    let op = Op::new("list", "nodes", None, None);
    let params = ListParams::default();
    kube.retry(&op, || api.list(&params))
        .await
        .map(|l| l.items)
        .map_err(|e| explain(&op, e))
}

/// What `ensure` needs: 2 requests in the steady state.
pub async fn for_ensure(kube: &Kube, config: &Config) -> Result<Observed, HostError> {
    let (rs, svc) = tokio::try_join!(replicaset(kube, config), service(kube, config))?;
    if !needs_a_closer_look(config, rs.as_ref(), svc.as_ref()) {
        return Ok(Observed {
            namespace_exists: None,
            replicaset: rs,
            service: svc,
            ..Observed::default()
        });
    }
    further(kube, config, rs, svc).await
}

async fn further(
    kube: &Kube,
    config: &Config,
    rs: Option<ReplicaSet>,
    svc: Option<Service>,
) -> Result<Observed, HostError> {
    let look_for_namespace = rs.is_none() && svc.is_none();
    let namespace = async {
        if look_for_namespace {
            namespace_exists(kube, config).await.map(Some)
        } else {
            Ok(None)
        }
    };
    let (namespace_exists, bare_pod, pods) =
        tokio::try_join!(namespace, bare_pod(kube, config), pods(kube, config))?;
    Ok(Observed {
        namespace_exists,
        replicaset: rs,
        service: svc,
        looked_further: true,
        bare_pod,
        pods,
        ..Observed::default()
    })
}

/// Everything, for `status`.
pub async fn everything(kube: &Kube, config: &Config) -> Result<Observed, HostError> {
    let (rs, svc) = tokio::try_join!(replicaset(kube, config), service(kube, config))?;
    // The namespace is read when neither exists; otherwise it evidently exists.
    further(kube, config, rs, svc).await
}
