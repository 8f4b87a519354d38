//! `GET /metrics` of `jumppod webhook`, in the Prometheus text format: how long the serving
//! certificate has left, so that an alert fires before the API server starts refusing calls.

use super::expiry;
use super::reload::Reloading;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub struct Metrics {
    registry: Registry,
    expiry: Gauge,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("jumppod_webhook");
        let expiry = Gauge::default();
        registry.register(
            "certificate_expiry_seconds",
            "Seconds until the served certificate chain expires (its earliest notAfter; negative once expired)",
            expiry.clone(),
        );
        Metrics { registry, expiry }
    }

    /// The metrics now: the gauge read from the chain served at this moment (0, as if it had
    /// expired, for a chain whose validity cannot be read).
    pub fn render(&self, pair: &Reloading) -> String {
        let left = pair.validity().map_or(0, |v| v.seconds_left(expiry::now()));
        self.expiry.set(left);
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
