//! Telling the running jump pods that the users' keys Secret changed, so that they merge the
//! change within seconds instead of within the kubelet's periodic sync.
//!
//! The kubelet rewrites a mounted Secret only when it syncs the pod: every `syncFrequency` (1
//! minute by default, plus jitter) or when the pod object changes. A change of the pod's
//! annotations counts (kubelet `config.podsDifferSemantically`), and every sync remounts the
//! pod's Secret volumes (`volumeManager.WaitForAttachAndMount` reprocesses the pod). So once
//! the Secret is written, its writer sets [`DIGEST_ANNOTATION`] on each running pod that mounts
//! it to a digest of what it now holds ([`refreshes`]).
//!
//! The kubelet reads the Secret from its own watch, which may lag the pod's change by a moment:
//! a pod synced before the watch brings the change gets it at its next periodic sync, as
//! without this.

use crate::objects::{annotation, is_active, name_of};
use k8s_openapi::api::core::v1::{Pod, Secret};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The pod annotation holding the digest of the users' keys the pod was last told of.
pub const DIGEST_ANNOTATION: &str = "jumppod.io/authorized-keys-digest";

/// 16 hex digits of the SHA-256 of the Secret's entries, names and values, in name order: equal
/// for equal keys, whatever the Secret's resourceVersion.
pub fn digest(secret: &Secret) -> String {
    let mut hash = Sha256::new();
    for (name, value) in secret.data.iter().flatten() {
        for part in [name.as_bytes(), &value.0] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
    }
    hash.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One pod to tell: its name and the JSON merge patch that tells it.
#[derive(Clone, Debug, PartialEq)]
pub struct Refresh {
    pub pod: String,
    pub patch: Value,
}

/// The pods of `pods` to tell of `secret` as it is now: those that mount it (a Secret volume,
/// or a projected one with it as a source), are neither finished nor being deleted (the kubelet
/// mounts nothing for a terminating pod), and do not carry its digest yet. Pure.
pub fn refreshes(secret: &Secret, pods: &[Pod]) -> Vec<Refresh> {
    let name = name_of(&secret.metadata);
    let digest = digest(secret);
    pods.iter()
        .filter(|p| is_active(p) && mounts(p, name))
        .filter(|p| annotation(&p.metadata, DIGEST_ANNOTATION) != Some(&digest))
        .map(|p| Refresh {
            pod: name_of(&p.metadata).to_owned(),
            patch: json!({"metadata": {"annotations": {DIGEST_ANNOTATION: digest}}}),
        })
        .collect()
}

/// Whether `pod` mounts the Secret `secret`.
fn mounts(pod: &Pod, secret: &str) -> bool {
    let mut volumes = pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
    volumes.any(|v| {
        v.secret
            .as_ref()
            .is_some_and(|s| s.secret_name.as_deref() == Some(secret))
            || v.projected.iter().any(|p| {
                p.sources
                    .iter()
                    .flatten()
                    .any(|s| s.secret.as_ref().is_some_and(|s| s.name == secret))
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use rstest::rstest;
    use std::collections::BTreeMap;

    const SECRET: &str = "dstack-main-ssh-jump-pod-authorized-keys";

    fn secret(entries: &[(&str, &str)]) -> Secret {
        let mut s: Secret = serde_json::from_value(json!({
            "metadata": {"name": SECRET, "namespace": "dstack", "resourceVersion": "7"},
        }))
        .unwrap();
        s.data = Some(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect::<BTreeMap<_, _>>(),
        );
        s
    }

    /// A pod named `name` in phase `phase` with the one volume `volume`; `metadata`: its other
    /// metadata fields.
    fn pod(name: &str, volume: Value, phase: &str, mut metadata: Value) -> Pod {
        metadata["name"] = json!(name);
        metadata["namespace"] = json!("dstack");
        serde_json::from_value(json!({
            "metadata": metadata,
            "spec": {"containers": [{"name": "sshd", "image": "sshd"}], "volumes": [volume]},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    fn mounted() -> Value {
        json!({"name": "authorized-keys", "secret": {"secretName": SECRET, "optional": true}})
    }

    fn told(pods: &[Pod]) -> Vec<String> {
        let s = secret(&[("alice", "command=\"/bin/false\" ssh-ed25519 AAAA alice\n")]);
        refreshes(&s, pods).into_iter().map(|r| r.pod).collect()
    }

    #[test]
    fn the_digest_follows_the_entries_not_the_resource_version() {
        let a = secret(&[("alice", "A"), ("bob", "B")]);
        let mut same = a.clone();
        same.metadata.resource_version = Some("8".into());
        assert_eq!(digest(&a), digest(&same));
        assert_ne!(digest(&a), digest(&secret(&[("alice", "A")])));
        // Where one entry ends and the next starts is part of what is hashed.
        assert_ne!(
            digest(&secret(&[("a", "bc")])),
            digest(&secret(&[("ab", "c")]))
        );
        assert_eq!(digest(&a).len(), 16);
    }

    #[rstest]
    #[case::a_running_pod_that_mounts_the_secret_is_told(mounted(), "Running", json!({}), true)]
    #[case::a_pending_pod_is_told_too(mounted(), "Pending", json!({}), true)]
    #[case::a_projected_volume_counts_as_mounting_it(
        json!({"name": "k", "projected": {"sources": [{"secret": {"name": SECRET}}]}}),
        "Running",
        json!({}),
        true
    )]
    #[case::a_pod_that_mounts_another_secret_is_left_alone(
        json!({"name": "k", "secret": {"secretName": "other"}}),
        "Running",
        json!({}),
        false
    )]
    #[case::a_terminating_pod_is_left_alone_as_the_kubelet_mounts_nothing_for_it(
        mounted(),
        "Running",
        json!({"deletionTimestamp": "2026-12-05T09:00:00Z"}),
        false
    )]
    #[case::a_finished_pod_is_left_alone(mounted(), "Failed", json!({}), false)]
    fn which_pods_are_told(
        #[case] volume: Value,
        #[case] phase: &str,
        #[case] metadata: Value,
        #[case] expected: bool,
    ) {
        let found = told(&[pod("dstack-main-ssh-jump-pod", volume, phase, metadata)]);
        assert_eq!(!found.is_empty(), expected, "{found:?}");
    }

    #[test]
    fn a_pod_that_already_carries_the_digest_is_not_told_again() {
        let s = secret(&[("alice", "command=\"/bin/false\" ssh-ed25519 AAAA alice\n")]);
        let fresh = pod("fresh", mounted(), "Running", json!({}));
        let current = pod(
            "current",
            mounted(),
            "Running",
            json!({"annotations": {DIGEST_ANNOTATION: digest(&s)}}),
        );
        let stale = pod(
            "stale",
            mounted(),
            "Running",
            json!({"annotations": {DIGEST_ANNOTATION: "0000000000000000"}}),
        );
        let found = refreshes(&s, &[fresh, current, stale]);
        assert_eq!(
            found,
            ["fresh", "stale"]
                .map(|pod| Refresh {
                    pod: pod.into(),
                    patch: json!({"metadata": {"annotations": {DIGEST_ANNOTATION: digest(&s)}}}),
                })
                .to_vec()
        );
    }
}
