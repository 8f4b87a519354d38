//! `jumppod keys`: reads the Secret of users' keys, lets the planning crate decide the one write
//! ([`jumppod_plan::keys::decide`]) and makes it, deciding again on a lost race.

use crate::api::{Kube, Op, explain, is_already_exists, is_conflict};
use crate::error::HostError;
use crate::observe::get_opt;
use jumppod_plan::config::Config;
use jumppod_plan::keys::{Change, ChangeReport, KeyList, PROPAGATION, Write, decide, entries};
use jumppod_plan::manifest::keys_secret_name;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

/// Reads the Secret, decides, writes; a lost race (409) is decided again on a fresh read.
#[tracing::instrument(name = "keys", skip_all, fields(namespace = %config.namespace, secret = tracing::field::Empty))]
pub async fn change(
    kube: &Kube,
    config: &Config,
    change: &Change,
) -> Result<ChangeReport, HostError> {
    let ns = config.namespace.as_str();
    let name = keys_secret_name(&config.name);
    tracing::Span::current().record("secret", name.as_str());
    let (outcome, entry) = write(kube, ns, &name, |found| {
        let (write, outcome, entry) = decide(config, found, change);
        (write, (outcome, entry))
    })
    .await?;
    tracing::info!(entry, ?outcome, "authorized keys changed");
    Ok(ChangeReport {
        namespace: ns.to_owned(),
        secret: name,
        entry,
        outcome,
        propagation: PROPAGATION,
    })
}

/// Makes the keys of the project's live jobs (`granted`) the controller's entries of the
/// Secret, the others untouched ([`jumppod_plan::grants::decide`]). Whether it wrote.
pub async fn grant(
    kube: &Kube,
    key: &jumppod_plan::controller::ProjectKey,
    granted: &std::collections::BTreeMap<String, String>,
) -> Result<bool, HostError> {
    let name = keys_secret_name(&key.name);
    write(kube, &key.namespace, &name, |found| {
        let write =
            jumppod_plan::grants::decide(&key.namespace, &key.name, key.project(), found, granted);
        let wrote = !matches!(write, Write::None);
        (write, wrote)
    })
    .await
}

/// Reads the Secret `name`, lets `decide` choose the one write, makes it; another writer's
/// create or change since the read (409) is decided again on a fresh read, within the deadline.
async fn write<T>(
    kube: &Kube,
    ns: &str,
    name: &str,
    decide: impl Fn(Option<&Secret>) -> (Write, T),
) -> Result<T, HostError> {
    let api: Api<Secret> = Api::namespaced(kube.client.clone(), ns);
    let (post, patch_params) = (PostParams::default(), PatchParams::default());
    loop {
        let found = get_opt(kube, &api, Op::new("get", "secrets", Some(ns), Some(name))).await?;
        let (write, decided) = decide(found.as_ref());
        let result = match &write {
            Write::None => Ok(()),
            Write::Create(secret) => {
                let op = Op::new("create", "secrets", Some(ns), Some(name));
                kube.retry(&op, || api.create(&post, secret))
                    .await
                    .map(drop)
                    .map_err(|e| (op.verb, e))
            }
            Write::Patch(patch) => {
                let patch = Patch::Merge(patch);
                let op = Op::new("patch", "secrets", Some(ns), Some(name));
                kube.retry(&op, || api.patch(name, &patch_params, &patch))
                    .await
                    .map(drop)
                    .map_err(|e| (op.verb, e))
            }
        };
        match result {
            Ok(()) => return Ok(decided),
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
