//! `jumppod keys`: reads the Secret of users' keys, lets the planning crate decide the one write
//! ([`jumppod_plan::keys::decide`]) and makes it, deciding again on a lost race; then tells the
//! running pods that mount it ([`jumppod_plan::refresh`]).

use crate::api::{Kube, Op, explain, is_already_exists, is_conflict};
use crate::apply::{ActionOutcome, merge_patch};
use crate::error::HostError;
use crate::observe::get_opt;
use jumppod_plan::config::Config;
use jumppod_plan::keys::{Change, ChangeReport, KeyList, PROPAGATION, Write, decide, entries};
use jumppod_plan::manifest::keys_secret_name;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

/// Reads the Secret, decides, writes; a lost race (409) is decided again on a fresh read. Then
/// tells the running pods that mount it ([`refresh`]); one that cannot be told is an error that
/// says the change is written.
#[tracing::instrument(name = "keys", skip_all, fields(namespace = %config.namespace, secret = tracing::field::Empty))]
pub async fn change(
    kube: &Kube,
    config: &Config,
    change: &Change,
) -> Result<ChangeReport, HostError> {
    let ns = config.namespace.as_str();
    let name = keys_secret_name(&config.name);
    tracing::Span::current().record("secret", name.as_str());
    let ((outcome, entry), now) = write(kube, ns, &name, |found| {
        let (write, outcome, entry) = decide(config, found, change);
        (write, (outcome, entry))
    })
    .await?;
    tracing::info!(entry, ?outcome, "authorized keys changed");
    let mut report = ChangeReport {
        namespace: ns.to_owned(),
        secret: name,
        entry,
        outcome,
        told: Vec::new(),
        propagation: PROPAGATION,
    };
    // Only a write has something to tell: the same key again costs one read.
    if let Some(secret) = &now {
        report.told = refresh(kube, ns, &config.name, secret)
            .await
            .map_err(|source| HostError::Untold {
                written: report.headline(),
                source: Box::new(source),
            })?;
    }
    Ok(report)
}

/// Makes the keys of the project's live jobs (`granted`) the controller's entries of the
/// Secret, the others untouched ([`jumppod_plan::grants::decide`]), and when it wrote, tells the
/// running ones of `pods` (the project's pods, from the controller's cache: no list). Whether it
/// wrote.
pub async fn grant(
    kube: &Kube,
    key: &jumppod_plan::controller::ProjectKey,
    granted: &std::collections::BTreeMap<String, String>,
    pods: &[Pod],
) -> Result<bool, HostError> {
    let name = keys_secret_name(&key.name);
    let (wrote, now) = write(kube, &key.namespace, &name, |found| {
        let write =
            jumppod_plan::grants::decide(&key.namespace, &key.name, key.project(), found, granted);
        let wrote = !matches!(write, Write::None);
        (write, wrote)
    })
    .await?;
    if let Some(secret) = &now {
        // A pod not told is logged by `tell`, and gets the keys at its kubelet's sync.
        let _told = tell(kube, &key.namespace, secret, pods).await;
    }
    Ok(wrote)
}

/// Tells the running jump pods of `instance` that mount `secret` of what it holds now
/// ([`jumppod_plan::refresh`]), so that their kubelets remount it at once. The pods told; the
/// first error once every pod was tried. Each failure is logged here.
pub async fn refresh(
    kube: &Kube,
    ns: &str,
    instance: &str,
    secret: &Secret,
) -> Result<Vec<String>, HostError> {
    let pods = crate::observe::pods_of(kube, ns, instance)
        .await
        .inspect_err(|e| tracing::warn!(error = %e, "the running pods are not told of the users' keys: they get them at the kubelet's sync"))?;
    tell(kube, ns, secret, &pods).await
}

/// [`refresh`] for the pods of `pods`, as already read.
async fn tell(
    kube: &Kube,
    ns: &str,
    secret: &Secret,
    pods: &[Pod],
) -> Result<Vec<String>, HostError> {
    let api: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let (mut told, mut failed) = (Vec::new(), None);
    for refresh in jumppod_plan::refresh::refreshes(secret, pods) {
        let op = Op::new("patch", "pods", Some(ns), Some(&refresh.pod));
        match merge_patch(kube, &api, &refresh.patch, op).await {
            Ok(ActionOutcome::Done) => {
                tracing::info!(pod = refresh.pod, "told to remount the users' keys");
                told.push(refresh.pod);
            }
            // Gone since the list: nothing left to tell (the patch carries no resourceVersion,
            // so it is never stale).
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(pod = refresh.pod, error = %e, "not told of the users' keys: it gets them at the kubelet's sync");
                failed.get_or_insert(e);
            }
        }
    }
    failed.map_or(Ok(told), Err)
}

/// Reads the Secret `name`, lets `decide` choose the one write, makes it; another writer's
/// create or change since the read (409) is decided again on a fresh read, within the deadline.
/// Also the Secret as written (None: nothing was written).
async fn write<T>(
    kube: &Kube,
    ns: &str,
    name: &str,
    decide: impl Fn(Option<&Secret>) -> (Write, T),
) -> Result<(T, Option<Secret>), HostError> {
    let api: Api<Secret> = Api::namespaced(kube.client.clone(), ns);
    let (post, patch_params) = (PostParams::default(), PatchParams::default());
    loop {
        let found = get_opt(kube, &api, Op::new("get", "secrets", Some(ns), Some(name))).await?;
        let (write, decided) = decide(found.as_ref());
        let result = match &write {
            Write::None => Ok(None),
            Write::Create(secret) => {
                let op = Op::new("create", "secrets", Some(ns), Some(name));
                kube.retry(&op, || api.create(&post, secret))
                    .await
                    .map(Some)
                    .map_err(|e| (op.verb, e))
            }
            Write::Patch(patch) => {
                let patch = Patch::Merge(patch);
                let op = Op::new("patch", "secrets", Some(ns), Some(name));
                kube.retry(&op, || api.patch(name, &patch_params, &patch))
                    .await
                    .map(Some)
                    .map_err(|e| (op.verb, e))
            }
        };
        match result {
            Ok(now) => return Ok((decided, now)),
            // Another writer created the Secret or changed it since the read: decide again.
            Err((_, e)) if is_already_exists(&e) || is_conflict(&e) => {
                tracing::info!(error = %e, "the Secret changed meanwhile, reading it again");
                if std::time::Instant::now() >= kube.deadline {
                    return Err(explain(
                        &Op::new("patch", "secrets", Some(ns), Some(name)),
                        e,
                    ));
                }
            }
            Err((verb, e)) => {
                return Err(explain(&Op::new(verb, "secrets", Some(ns), Some(name)), e));
            }
        }
    }
}

pub async fn list(kube: &Kube, config: &Config) -> Result<KeyList, HostError> {
    let ns = config.namespace.as_str();
    let name = keys_secret_name(&config.name);
    let api: Api<Secret> = Api::namespaced(kube.client.clone(), ns);
    let found = get_opt(kube, &api, Op::new("get", "secrets", Some(ns), Some(&name))).await?;
    Ok(KeyList {
        namespace: ns.to_owned(),
        secret: name,
        exists: found.is_some(),
        entries: entries(found.as_ref()),
    })
}
