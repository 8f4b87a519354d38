//! The Events the controller writes (events.k8s.io/v1), a series per regarding object, type,
//! reason and message.
//!
//! Not kube-runtime's `Recorder`: its series key (`EventKey` in kube-runtime 4.2, as in
//! client-go's `tools/events`) leaves the message out, so a second Event of the same reason
//! about the same object within the series window was sent as a PATCH of the first Event's
//! series, which keeps the first message: an `Unschedulable` whose cause changed from cpu to a
//! taint still read "Insufficient cpu". Here the message is part of the key, as in client-go's
//! core/v1 recorder (`EventCorrelator`, `getEventKey`: source, object, type, reason, message):
//! a changed message is an Event of its own, the same message again counts in its series.
//! The decision ([`Series::occur`]) is pure and takes the clock as an argument.

use jumppod_plan::controller::{Note, Severity};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a series stays open after its last occurrence: kube-runtime's and client-go's
/// 6 minutes. Later, the same message is a new Event.
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// What makes two occurrences the same Event.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// api version, kind, namespace, name, uid of the regarding object.
    pub regarding: [Option<String>; 5],
    pub severity: Severity,
    pub reason: &'static str,
    pub message: String,
}

impl Key {
    pub fn new(regarding: &ObjectReference, note: &Note) -> Key {
        Key {
            regarding: [
                regarding.api_version.clone(),
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
            ],
            severity: note.severity,
            reason: note.reason,
            message: note.message.clone(),
        }
    }
}

/// What to write for one occurrence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// A new Event.
    Create,
    /// The `count`th occurrence of the Event `name`'s series.
    Patch { name: String, count: i32 },
}

struct Open {
    name: String,
    count: i32,
    last: Instant,
}

/// The open series, by key.
#[derive(Default)]
pub struct Series(HashMap<Key, Open>);

impl Series {
    /// What to write for an occurrence of `key` at `now`; forgets the series closed by then.
    pub fn occur(&mut self, key: &Key, now: Instant) -> Write {
        self.0
            .retain(|_, open| now.saturating_duration_since(open.last) < SERIES_WINDOW);
        match self.0.get(key) {
            Some(open) => Write::Patch {
                name: open.name.clone(),
                count: open.count + 1,
            },
            None => Write::Create,
        }
    }

    /// The Event `name` was created for `key` at `now`.
    pub fn created(&mut self, key: Key, name: String, now: Instant) {
        self.0.insert(
            key,
            Open {
                name,
                count: 1,
                last: now,
            },
        );
    }

    /// The series of `key` was patched to `count` at `now`.
    pub fn patched(&mut self, key: &Key, count: i32, now: Instant) {
        if let Some(open) = self.0.get_mut(key) {
            open.count = count;
            open.last = now;
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Who writes the Events.
#[derive(Clone, Debug)]
pub struct Reporter {
    pub controller: String,
    pub instance: String,
}

/// A new Event for `note` about `regarding` at `now`, named as client-go and kube-runtime
/// name theirs (`<object>.<nanoseconds, hex>`).
pub fn event(
    reporter: &Reporter,
    regarding: &ObjectReference,
    note: &Note,
    now: Timestamp,
) -> Event {
    let object = regarding.name.as_deref().unwrap_or(&reporter.controller);
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{object}.{:x}", now.as_nanosecond())),
            namespace: regarding.namespace.clone(),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some(
            match note.severity {
                Severity::Normal => "Normal",
                Severity::Warning => "Warning",
            }
            .into(),
        ),
        reason: Some(note.reason.into()),
        note: Some(note.message.clone()),
        action: Some("Reconcile".into()),
        regarding: Some(regarding.clone()),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone()),
        ..Event::default()
    }
}

/// Writes one occurrence: creates the Event or counts it in its series. A series whose Event
/// is gone (the API server's event TTL, an hour by default, or someone deleted it) starts
/// again as a new Event. Returns the Event's name and the verb used; on error, the verb that
/// failed.
pub async fn write(
    api: &Api<Event>,
    series: &std::sync::Mutex<Series>,
    reporter: &Reporter,
    regarding: &ObjectReference,
    note: &Note,
) -> Result<(String, &'static str), (&'static str, kube::Error)> {
    let key = Key::new(regarding, note);
    let lock = || series.lock().unwrap_or_else(|e| e.into_inner());
    let decided = lock().occur(&key, Instant::now());
    if let Write::Patch { name, count } = decided {
        let patch = serde_json::json!({
            "series": {"count": count, "lastObservedTime": MicroTime(Timestamp::now())}
        });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                lock().patched(&key, count, Instant::now());
                return Ok((name, "patch"));
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(("patch", e)),
        }
    }
    let created = api
        .create(
            &PostParams::default(),
            &event(reporter, regarding, note, Timestamp::now()),
        )
        .await
        .map_err(|e| ("create", e))?;
    let name = created.metadata.name.unwrap_or_default();
    lock().created(key, name.clone(), Instant::now());
    Ok((name, "create"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn rs(uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("ReplicaSet".into()),
            namespace: Some("ns".into()),
            name: Some("dstack-main-ssh-jump-pod".into()),
            uid: Some(uid.into()),
            ..ObjectReference::default()
        }
    }

    fn note(reason: &'static str, message: &str) -> Note {
        Note {
            severity: Severity::Warning,
            reason,
            message: message.into(),
        }
    }

    const CPU: &str = "0/3 nodes are available: 3 Insufficient cpu.";

    #[rstest]
    #[case::the_same_message_again_is_the_second_of_its_series(
        rs("u1"), note("Unschedulable", CPU), Duration::from_secs(10),
        Write::Patch { name: "first".into(), count: 2 }
    )]
    #[case::another_message_of_the_same_reason_is_a_new_event(
        rs("u1"),
        note("Unschedulable", "0/3 nodes are available: 3 Insufficient memory."),
        Duration::from_secs(10),
        Write::Create
    )]
    #[case::another_reason_is_a_new_event(
        rs("u1"),
        note("FailedCreate", CPU),
        Duration::from_secs(10),
        Write::Create
    )]
    #[case::another_object_of_the_same_name_is_a_new_event(
        rs("u2"),
        note("Unschedulable", CPU),
        Duration::from_secs(10),
        Write::Create
    )]
    #[case::the_same_message_after_the_series_window_is_a_new_event(
        rs("u1"),
        note("Unschedulable", CPU),
        SERIES_WINDOW,
        Write::Create
    )]
    fn an_occurrence_after_an_unschedulable_event_for_insufficient_cpu(
        #[case] regarding: ObjectReference,
        #[case] next: Note,
        #[case] after: Duration,
        #[case] expected: Write,
    ) {
        let mut series = Series::default();
        let t0 = Instant::now();
        let first = Key::new(&rs("u1"), &note("Unschedulable", CPU));
        assert_eq!(series.occur(&first, t0), Write::Create);
        series.created(first, "first".into(), t0);
        assert_eq!(
            series.occur(&Key::new(&regarding, &next), t0 + after),
            expected
        );
    }

    #[test]
    fn a_series_counts_on_and_stays_open_while_it_recurs_within_the_window() {
        let mut series = Series::default();
        let key = Key::new(&rs("u1"), &note("Unschedulable", CPU));
        let mut now = Instant::now();
        series.created(key.clone(), "first".into(), now);
        for count in 2..5 {
            // Each within the window of the one before: the series outlives its first window.
            now += SERIES_WINDOW / 2;
            assert_eq!(
                series.occur(&key, now),
                Write::Patch {
                    name: "first".into(),
                    count
                }
            );
            series.patched(&key, count, now);
        }
        // The closed series are forgotten: the cache does not grow with every message ever sent.
        let other = Key::new(&rs("u1"), &note("Unschedulable", "taint"));
        series.created(other, "second".into(), now);
        assert_eq!(series.len(), 2);
        assert_eq!(series.occur(&key, now + SERIES_WINDOW), Write::Create);
        assert!(series.is_empty());
    }

    #[test]
    fn a_new_event_carries_what_kubectl_describe_shows_and_the_api_server_requires() {
        let reporter = Reporter {
            controller: "jumppod".into(),
            instance: "a".into(),
        };
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let e = event(&reporter, &rs("u1"), &note("Unschedulable", CPU), now);
        assert_eq!(
            e.metadata.name.as_deref(),
            Some(format!("dstack-main-ssh-jump-pod.{:x}", now.as_nanosecond()).as_str())
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some("Unschedulable"));
        assert_eq!(e.note.as_deref(), Some(CPU));
        assert_eq!(e.action.as_deref(), Some("Reconcile"));
        assert_eq!(e.reporting_controller.as_deref(), Some("jumppod"));
        assert_eq!(e.reporting_instance.as_deref(), Some("a"));
        assert_eq!(e.event_time, Some(MicroTime(now)));
        assert!(e.series.is_none());
    }
}
