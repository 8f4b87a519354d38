//! Request counts on the real control plane, from kube-apiserver's audit log (one JSON event
//! per line, written just after the answer): what the simulator's request log is to the
//! simulator. Shared by the real-cluster tests and the demo.

use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// The audit log of a control plane started by `jumppod-controlplane run`.
pub struct Audit {
    path: PathBuf,
}

impl Audit {
    pub fn new(path: PathBuf) -> Audit {
        Audit { path }
    }

    /// Where the log ends now: requests after it are counted by [`Audit::since`].
    pub fn mark(&self) -> u64 {
        std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0)
    }

    /// The audit events after `from`.
    fn events(&self, from: u64) -> Vec<Value> {
        let text = std::fs::read(&self.path).unwrap_or_default();
        let start = (from as usize).min(text.len());
        String::from_utf8_lossy(&text[start..])
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    }

    fn line(e: &Value) -> String {
        format!(
            "{} {}",
            e["verb"].as_str().unwrap_or(""),
            e["requestURI"].as_str().unwrap_or("")
        )
    }

    /// `verb requestURI` of the admin user's requests in namespace `ns` after `from`.
    pub fn read(&self, from: u64, ns: &str) -> Vec<String> {
        self.events(from)
            .iter()
            .filter(|e| e["user"]["username"] == "admin")
            .filter(|e| {
                e["objectRef"]["namespace"] == ns
                    || (e["objectRef"]["resource"] == "namespaces" && e["objectRef"]["name"] == ns)
            })
            .map(Audit::line)
            .collect()
    }

    /// `verb requestURI` of `user`'s requests, in every namespace, after `from`.
    pub fn by_user(&self, from: u64, user: &str) -> Vec<String> {
        self.events(from)
            .iter()
            .filter(|e| e["user"]["username"] == user)
            .map(Audit::line)
            .collect()
    }

    /// The requests since `from`, once the log has caught up (two reads 500 ms apart agree).
    pub async fn since(&self, from: u64, ns: &str) -> Vec<String> {
        let mut seen = self.read(from, ns);
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = self.read(from, ns);
            if now == seen {
                return now;
            }
            seen = now;
        }
    }
}
