//! The destruction budget: how fast the controller may take serving pods away because of their
//! node (a pod deleted or force-deleted off a lost node, a retiring pod scaled off or deleted),
//! across every project. A token bucket, as the node-lifecycle controller's
//! `--node-eviction-rate` bounds its evictions: a bug or a wrong view of the nodes then takes a
//! handful of jump pods, not all of them at once. A write the budget defers is decided again
//! later, on what is the case then.

use std::sync::Mutex;
use std::time::Instant;

/// A token bucket of `burst` tokens refilled at `rate` per second.
pub(super) struct Budget {
    rate: f64,
    burst: u32,
    state: Mutex<(f64, Instant)>,
}

impl Budget {
    /// Full at `now`.
    pub(super) fn new(rate: f64, burst: u32, now: Instant) -> Budget {
        let burst = burst.max(1);
        Budget {
            rate: rate.max(0.0),
            burst,
            state: Mutex::new((f64::from(burst), now)),
        }
    }

    /// Takes one token at `now` if there is one.
    pub(super) fn take(&self, now: Instant) -> bool {
        // Two numbers: a panic elsewhere cannot leave them half written.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, at) = &mut *state;
        let refill = now.saturating_duration_since(*at).as_secs_f64() * self.rate;
        *tokens = (*tokens + refill).min(f64::from(self.burst));
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Tokens per second.
    pub(super) fn rate(&self) -> f64 {
        self.rate
    }

    /// Tokens at most.
    pub(super) fn burst(&self) -> u32 {
        self.burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_goes_at_once_and_then_one_per_refill() {
        let t0 = Instant::now();
        let budget = Budget::new(0.2, 3, t0);
        let taken: Vec<bool> = (0..4).map(|_| budget.take(t0)).collect();
        assert_eq!(taken, [true, true, true, false]);
        assert!(!budget.take(t0 + Duration::from_secs(4)));
        assert!(budget.take(t0 + Duration::from_secs(5)));
        assert!(!budget.take(t0 + Duration::from_secs(5)));
        // A long quiet spell fills it to its burst, no more.
        let later = t0 + Duration::from_secs(3600);
        let taken: Vec<bool> = (0..4).map(|_| budget.take(later)).collect();
        assert_eq!(taken, [true, true, true, false]);
    }

    #[test]
    fn a_rate_of_zero_allows_the_burst_only() {
        let t0 = Instant::now();
        let budget = Budget::new(0.0, 1, t0);
        assert!(budget.take(t0));
        assert!(!budget.take(t0 + Duration::from_secs(86_400)));
    }
}
