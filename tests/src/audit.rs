//! Request counts on the real control plane, from kube-apiserver's audit log (JSON lines):
//! what the simulator's request log is to the simulator. Shared by the real-cluster tests and
//! the demo.
//!
//! Each request is counted once, by its `RequestReceived` event: the control plane's log
//! backend writes in blocking mode, so that line is in the file before the request is handled,
//! let alone answered. A client that holds its answers finds every one of its requests in the
//! log already: counting needs no wait and cannot miss a late line. Requests are told apart by
//! user, so a test counts every request of its own user, cluster-scoped ones included, and
//! none of another test's.

use serde_json::Value;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::PathBuf;

/// The audit log of a control plane started by `jumppod-controlplane run`.
pub struct Audit {
    path: PathBuf,
}

impl Audit {
    pub fn new(path: PathBuf) -> Audit {
        Audit { path }
    }

    /// Where the log ends now: requests received after it are counted by [`Audit::by_user`].
    pub fn mark(&self) -> u64 {
        std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0)
    }

    /// The `RequestReceived` events after `from`, one per request. A line cut at `from`, or
    /// still being written at the end, is no whole event and is skipped: the first was received
    /// before the mark, the second after this read.
    fn received(&self, from: u64) -> Vec<Value> {
        self.events(from, "RequestReceived")
    }

    /// The events of `stage` after `from`.
    fn events(&self, from: u64, stage: &str) -> Vec<Value> {
        let mut text = Vec::new();
        if let Ok(mut file) = std::fs::File::open(&self.path) {
            file.seek(SeekFrom::Start(from))
                .and_then(|_| file.read_to_end(&mut text))
                .unwrap_or_else(|e| panic!("read the audit log {}: {e}", self.path.display()));
        }
        String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["stage"] == stage)
            .collect()
    }

    fn line(e: &Value) -> String {
        format!(
            "{} {}",
            e["verb"].as_str().unwrap_or(""),
            e["requestURI"].as_str().unwrap_or("")
        )
    }

    /// `verb requestURI` of the admin user's requests in namespace `ns`, or on it, after
    /// `from`: what a test made as `admin` there, other namespaces' and cluster-wide requests
    /// left out.
    pub fn read(&self, from: u64, ns: &str) -> Vec<String> {
        self.received(from)
            .iter()
            .filter(|e| e["user"]["username"] == "admin")
            .filter(|e| {
                e["objectRef"]["namespace"] == ns
                    || (e["objectRef"]["resource"] == "namespaces" && e["objectRef"]["name"] == ns)
            })
            .map(Audit::line)
            .collect()
    }

    /// The status code and `verb requestURI` of each request `user` made after `from` that has
    /// been answered (its `ResponseComplete` event, written once the answer is: unlike
    /// [`Audit::by_user`], a caller must wait for it), in the order they were answered.
    pub fn answered_by_user(&self, from: u64, user: &str) -> Vec<(u16, String)> {
        self.events(from, "ResponseComplete")
            .iter()
            .filter(|e| e["user"]["username"] == user)
            .map(|e| {
                let code = e["responseStatus"]["code"].as_u64().unwrap_or(0);
                (u16::try_from(code).unwrap_or(0), Audit::line(e))
            })
            .collect()
    }

    /// `verb requestURI` of every request `user` made after `from`, in every namespace and
    /// cluster-wide, in the order the API server received them.
    pub fn by_user(&self, from: u64, user: &str) -> Vec<String> {
        self.received(from)
            .iter()
            .filter(|e| e["user"]["username"] == user)
            .map(Audit::line)
            .collect()
    }
}
