//! The request log: what the simulator served, for tests that count requests.

/// One request as the simulator saw it. `status` is 0 when the connection was dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    pub query: String,
    pub status: u16,
    pub user: String,
}
