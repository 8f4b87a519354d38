//! Leader election on a `coordination.k8s.io/v1` Lease, client-go's way: the planning crate's
//! [`jumppod_plan::lease::step`] decides, the [`Elector`] reads and writes the Lease, every
//! write carrying the resourceVersion it was decided on (of two candidates, one gets 409).

use crate::api::{Op, explain, is_already_exists, is_conflict, is_not_found};
use crate::error::HostError;
use jumppod_plan::lease::{Step, Timing, released, step, written};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use std::time::{Duration, Instant};

/// The outcome of one look at the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Look {
    Leading,
    Following { holder: String },
}

/// One replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timing: Timing,
    /// The record last seen (its resourceVersion) and when this replica saw it change.
    seen: Option<(String, Instant)>,
    /// The Lease as last read or written, with its resourceVersion.
    lease: Option<Lease>,
}

impl Elector {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
    ) -> Elector {
        Elector {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timing,
            seen: None,
            lease: None,
        }
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    fn op(&self, verb: &'static str) -> Op<'_> {
        Op::new(verb, "leases", Some(&self.namespace), Some(&self.name))
    }

    /// Reads the Lease and, when `step` says so, writes it: one GET, and one write when it
    /// takes over. The leader renews without reading: its last write's resourceVersion is
    /// the precondition, and a 409 (someone else wrote) sends it back to reading. So a
    /// standby costs one request per retry period, and so does the leader.
    pub async fn look(&mut self) -> Result<Look, HostError> {
        if let Some(held) = self.held() {
            match self.write(Some(held), &Step::Renew).await {
                Err(e) if is_conflict(&e) => self.lease = None,
                result => return self.written(&Step::Renew, result),
            }
        }
        let current = match self.api.get(&self.name).await {
            Ok(lease) => Some(lease),
            Err(e) if is_not_found(&e) => None,
            Err(e) => return Err(explain(&self.op("get"), e)),
        };
        let now = Instant::now();
        let version = current
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone())
            .unwrap_or_default();
        let unchanged_for = match &self.seen {
            Some((v, since)) if *v == version => now.duration_since(*since),
            _ => {
                self.seen = Some((version, now));
                Duration::ZERO
            }
        };
        let spec = current.as_ref().and_then(|l| l.spec.as_ref());
        let step = step(spec, &self.identity, unchanged_for);
        if let Step::Wait { holder } = &step {
            self.lease = current;
            return Ok(Look::Following {
                holder: holder.clone(),
            });
        }
        let result = self.write(current, &step).await;
        self.written(&step, result)
    }

    /// The Lease as this replica last wrote it, while it holds it.
    fn held(&self) -> Option<Lease> {
        let lease = self.lease.as_ref()?;
        let holder = lease.spec.as_ref()?.holder_identity.as_deref()?;
        (holder == self.identity).then(|| lease.clone())
    }

    /// Writes `step` over `current` (None: creates the Lease).
    async fn write(&self, current: Option<Lease>, step: &Step) -> Result<Lease, kube::Error> {
        let spec = current.as_ref().and_then(|l| l.spec.as_ref());
        let spec = written(spec, step, &self.identity, &self.timing, Timestamp::now());
        match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(self.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                lease.spec = Some(spec);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        }
    }

    fn written(
        &mut self,
        step: &Step,
        result: Result<Lease, kube::Error>,
    ) -> Result<Look, HostError> {
        match result {
            Ok(lease) => {
                if let Step::TakeOver { from } = step {
                    tracing::info!(lease = %self.name, identity = %self.identity, from = from.as_deref().unwrap_or("nobody"), "took the lease");
                }
                self.seen = lease
                    .metadata
                    .resource_version
                    .clone()
                    .map(|v| (v, Instant::now()));
                self.lease = Some(lease);
                Ok(Look::Leading)
            }
            Err(e) if is_conflict(&e) || is_already_exists(&e) => {
                // Another replica wrote first; its record is the one to watch now.
                self.seen = None;
                self.lease = None;
                Ok(Look::Following {
                    holder: "another replica (it won the race)".to_owned(),
                })
            }
            Err(e) => {
                let verb = if matches!(step, Step::Create) {
                    "create"
                } else {
                    "update"
                };
                Err(explain(&self.op(verb), e))
            }
        }
    }

    /// Gives the Lease up (graceful shutdown): one write, only when it still holds it.
    pub async fn release(&mut self) -> Result<(), HostError> {
        let Some(mut lease) = self.lease.take() else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_ref() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        lease.spec = Some(released(spec, Timestamp::now()));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                tracing::info!(lease = %self.name, identity = %self.identity, "released the lease");
                Ok(())
            }
            // Someone else has it already: nothing to release.
            Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(()),
            Err(e) => Err(explain(&self.op("update"), e)),
        }
    }
}
