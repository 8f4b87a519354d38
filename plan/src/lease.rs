//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics
//! (`k8s.io/client-go/tools/leaderelection`): a candidate takes the Lease when it is free,
//! released, or unchanged for its `leaseDurationSeconds` as measured by the candidate's own
//! clock (never by comparing clocks with the holder); the leader renews every retry period
//! and gives up leading when it could not renew for the renew deadline, which is shorter than
//! the lease duration, so it stops writing before anyone else may start. Every write carries
//! the resourceVersion it was decided on: of two candidates, one wins and one gets 409.
//!
//! [`step`] decides; the host's `controller::lease::Elector` reads and writes the Lease.

use crate::error::ConfigError;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;

/// Timing of the election (client-go's defaults: 15 s, 10 s, 2 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// client-go's `JitterFactor`: the renew deadline must exceed this many retry periods, and a
/// candidate waits between one and 1 + this many retry periods between looks.
pub const JITTER_FACTOR: f64 = 1.2;

impl Timing {
    /// client-go (`NewLeaderElector`) refuses the same combinations: the leader must stop
    /// writing before the lease expires, and must get more than one jittered retry within its
    /// renew deadline. The error names the flag at fault.
    pub fn problem(&self) -> Option<ConfigError> {
        let refuse = |field: &str, problem: String| {
            Some(ConfigError {
                field: field.into(),
                value: String::new(),
                problem,
            })
        };
        for (flag, value) in [
            ("--lease-duration", self.lease_duration),
            ("--renew-deadline", self.renew_deadline),
            ("--retry-period", self.retry_period),
        ] {
            if value.is_zero() {
                return refuse(flag, format!("{flag} must be greater than zero"));
            }
        }
        if self.renew_deadline >= self.lease_duration {
            return refuse(
                "--renew-deadline",
                format!(
                    "--renew-deadline ({:?}) must be shorter than --lease-duration ({:?}): the leader must stop writing before another replica may take the lease",
                    self.renew_deadline, self.lease_duration
                ),
            );
        }
        let jittered = self.retry_period.mul_f64(JITTER_FACTOR);
        if self.renew_deadline <= jittered {
            return refuse(
                "--retry-period",
                format!(
                    "--retry-period ({:?}) x {JITTER_FACTOR} = {jittered:?} must be shorter than --renew-deadline ({:?}), as client-go requires: a leader must get a jittered retry in before its deadline",
                    self.retry_period, self.renew_deadline
                ),
            );
        }
        None
    }

    /// How long a candidate waits before looking at the Lease again: the retry period plus up to
    /// [`JITTER_FACTOR`] of it (client-go's `wait.JitterUntil`), so that replicas started
    /// together do not ask in lockstep. `unit` is a random number in [0, 1).
    pub fn acquire_wait(&self, unit: f64) -> Duration {
        self.retry_period
            .mul_f64(1.0 + JITTER_FACTOR * unit.clamp(0.0, 1.0))
    }
}

/// What the candidate or the leader does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// No Lease: create it, holding it.
    Create,
    /// It holds the Lease: renew it.
    Renew,
    /// Free, released or expired: take it.
    TakeOver { from: Option<String> },
    /// Someone else holds it; look again after the retry period.
    Wait { holder: String },
}

/// `unchanged_for`: how long this replica has seen the Lease's record unchanged.
pub fn step(lease: Option<&LeaseSpec>, me: &str, unchanged_for: Duration) -> Step {
    let Some(spec) = lease else {
        return Step::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder == me {
        return Step::Renew;
    }
    if holder.is_empty() {
        return Step::TakeOver { from: None };
    }
    let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
    if unchanged_for >= duration {
        Step::TakeOver {
            from: Some(holder.to_owned()),
        }
    } else {
        Step::Wait {
            holder: holder.to_owned(),
        }
    }
}

/// The Lease's spec after `step` by `me` at `now`.
pub fn written(
    before: Option<&LeaseSpec>,
    step: &Step,
    me: &str,
    timing: &Timing,
    now: Timestamp,
) -> LeaseSpec {
    let now = Some(MicroTime(now));
    let seconds = Some(timing.lease_duration.as_secs().max(1) as i32);
    match step {
        Step::Renew => LeaseSpec {
            renew_time: now,
            lease_duration_seconds: seconds,
            ..before.cloned().unwrap_or_default()
        },
        Step::Create | Step::TakeOver { .. } => LeaseSpec {
            holder_identity: Some(me.to_owned()),
            acquire_time: now.clone(),
            renew_time: now,
            lease_duration_seconds: seconds,
            lease_transitions: Some(match (step, before) {
                (Step::TakeOver { .. }, Some(b)) => b.lease_transitions.unwrap_or(0) + 1,
                _ => 0,
            }),
            ..LeaseSpec::default()
        },
        Step::Wait { .. } => before.cloned().unwrap_or_default(),
    }
}

/// client-go's release: no holder, a one-second lease, so that a standby takes over at its
/// next look instead of waiting out the lease.
pub fn released(before: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        renew_time: Some(MicroTime(now)),
        acquire_time: Some(MicroTime(now)),
        ..before.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn held_by(holder: &str, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: (!holder.is_empty()).then(|| holder.to_owned()),
            lease_duration_seconds: Some(seconds),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    #[rstest]
    #[case::no_lease_is_created(None, 0, Step::Create)]
    #[case::its_own_lease_is_renewed(Some(held_by("me", 15)), 0, Step::Renew)]
    #[case::a_lease_held_and_renewed_by_another_is_waited_on(
        Some(held_by("other", 15)), 14, Step::Wait { holder: "other".into() })]
    #[case::a_lease_unchanged_for_its_duration_is_taken_over(
        Some(held_by("other", 15)), 15, Step::TakeOver { from: Some("other".into()) })]
    #[case::a_released_lease_is_taken_at_once(
        Some(held_by("", 1)), 0, Step::TakeOver { from: None })]
    fn steps(#[case] lease: Option<LeaseSpec>, #[case] unchanged: u64, #[case] expected: Step) {
        assert_eq!(
            step(lease.as_ref(), "me", Duration::from_secs(unchanged)),
            expected
        );
    }

    #[test]
    fn a_takeover_counts_a_transition_and_a_renewal_keeps_the_acquire_time() {
        let timing = Timing::default();
        let before = held_by("other", 15);
        let taken = written(
            Some(&before),
            &Step::TakeOver {
                from: Some("other".into()),
            },
            "me",
            &timing,
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(taken.holder_identity.as_deref(), Some("me"));
        assert_eq!(taken.lease_transitions, Some(4));
        let later = Timestamp::from_second(60).unwrap();
        let renewed = written(Some(&taken), &Step::Renew, "me", &timing, later);
        assert_eq!(renewed.acquire_time, taken.acquire_time);
        assert_eq!(renewed.renew_time, Some(MicroTime(later)));
        assert_eq!(renewed.lease_transitions, Some(4));
    }

    #[test]
    fn a_released_lease_has_no_holder_and_a_one_second_duration() {
        let spec = released(&held_by("me", 15), Timestamp::UNIX_EPOCH);
        assert_eq!(spec.holder_identity, None);
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(
            step(Some(&spec), "other", Duration::ZERO),
            Step::TakeOver { from: None }
        );
    }

    #[test]
    fn a_candidate_waits_between_one_and_2_2_retry_periods() {
        let timing = Timing::default();
        assert_eq!(timing.acquire_wait(0.0), Duration::from_secs(2));
        assert_eq!(timing.acquire_wait(0.5), Duration::from_millis(3200));
        assert_eq!(timing.acquire_wait(1.0), Duration::from_millis(4400));
        assert_eq!(timing.acquire_wait(7.0), Duration::from_millis(4400));
    }

    #[rstest]
    #[case::client_gos_defaults_are_valid(15, 10, 2, None)]
    #[case::a_renew_deadline_as_long_as_the_lease_is_refused(10, 10, 2, Some("--renew-deadline"))]
    #[case::a_retry_period_as_long_as_the_renew_deadline_is_refused(
        15,
        10,
        10,
        Some("--retry-period")
    )]
    #[case::a_renew_deadline_within_one_jittered_retry_is_refused(
        15,
        12,
        10,
        Some("--retry-period")
    )]
    #[case::a_renew_deadline_just_past_one_jittered_retry_is_valid(15, 13, 10, None)]
    #[case::a_zero_lease_duration_is_refused(0, 10, 2, Some("--lease-duration"))]
    #[case::a_zero_retry_period_is_refused(15, 10, 0, Some("--retry-period"))]
    fn timing_is_checked(
        #[case] lease: u64,
        #[case] renew: u64,
        #[case] retry: u64,
        #[case] names: Option<&str>,
    ) {
        let timing = Timing {
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
        };
        match (timing.problem(), names) {
            (None, None) => {}
            (Some(p), Some(flag)) => assert!(p.problem.starts_with(flag), "{p}"),
            (p, n) => panic!("problem {p:?}, expected one naming {n:?}"),
        }
    }
}
