//! The running cluster shared by the HTTP server and the controllers: the object store, the
//! queued faults, the request log, and the settings both sides read.

use crate::faults::{Fault, FaultAction};
use crate::request_log::RequestRecord;
use crate::store::State;
use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;

pub(crate) struct Cluster {
    pub state: Mutex<State>,
    pub faults: Mutex<Vec<Fault>>,
    pub log: Mutex<Vec<RequestRecord>>,
    /// Woken after every write, so the background controllers look again.
    pub notify: Notify,
    pub rbac: bool,
    pub admin_user: String,
    pub pod_gc: bool,
    pub url: String,
}

impl Cluster {
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one use of the first queued fault matching the request.
    pub fn take_fault(&self, method: &str, path: &str) -> Option<FaultAction> {
        let mut faults = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        let i = faults.iter().position(|f| f.matches(method, path))?;
        faults[i].times -= 1;
        let action = faults[i].action.clone();
        if faults[i].times == 0 {
            faults.remove(i);
        }
        Some(action)
    }

    pub fn record(&self, r: RequestRecord) {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).push(r);
    }

    pub fn faults(&self) -> MutexGuard<'_, Vec<Fault>> {
        self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn log(&self) -> MutexGuard<'_, Vec<RequestRecord>> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }
}
