//! The request rate of one API key on this replica: a token bucket held with the cached key
//! (`cache::CachedKey`), refilled at the key's rate up to one second's worth, and spent by every
//! request the key authenticates and by every decision beyond a request's first (a batch of 100
//! spends 100).
//!
//! The bucket is one atomic word, updated without a lock: the generic cell rate algorithm keeps
//! only the time at which the bucket is full again (`full_at`); taking `n` tokens moves it `n`
//! intervals later. Written here rather than taken from a crate (`governor`) because the state
//! must live inside the cached key, carried over when the key is read again, and cost one
//! compare-and-swap per request: a limiter of its own per key would bring its own clock and
//! more state per key.
//!
//! A request larger than the whole bucket (a batch of 100 under a rate of 10) is admitted when
//! the bucket is full and leaves it in debt, so a batch never starves and the rate still holds
//! over time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// One key's bucket.
#[derive(Debug)]
pub struct KeyRate {
    /// Nanoseconds (since the replica's [`epoch`]) at which the bucket is full again.
    full_at: AtomicU64,
    /// Nanoseconds per token: one second over the rate.
    interval: u64,
    /// Nanoseconds the bucket holds: one second's worth of tokens.
    depth: u64,
}

impl KeyRate {
    /// A full bucket of `per_second` tokens, refilled at `per_second`; `None` for 0 (no limit).
    pub fn new(per_second: u64) -> Option<Self> {
        (per_second > 0).then(|| {
            let interval = (NANOS_PER_SEC / per_second).max(1);
            Self {
                full_at: AtomicU64::new(0),
                interval,
                depth: interval.saturating_mul(per_second),
            }
        })
    }

    /// Takes `n` tokens now, or answers the seconds until they could be taken (at least 1).
    pub fn take(&self, n: u64) -> Result<(), u64> {
        self.take_at(n, now_nanos())
    }

    fn take_at(&self, n: u64, now: u64) -> Result<(), u64> {
        let cost = self.interval.saturating_mul(n);
        // More than the bucket holds needs a full bucket.
        let need = cost.min(self.depth);
        let mut full_at = self.full_at.load(Ordering::Relaxed);
        loop {
            let from = full_at.max(now);
            let owed = from - now;
            if owed.saturating_add(need) > self.depth {
                let wait = owed.saturating_add(need) - self.depth;
                return Err(wait.div_ceil(NANOS_PER_SEC).max(1));
            }
            match self.full_at.compare_exchange_weak(
                full_at,
                from.saturating_add(cost),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(moved) => full_at = moved,
            }
        }
    }
}

/// Nanoseconds since the replica's first rate check (monotonic).
fn now_nanos() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = NANOS_PER_SEC;

    #[test]
    fn a_second_s_worth_then_the_rate() {
        let rate = KeyRate::new(10).unwrap();
        let t = 5 * SEC;
        for _ in 0..10 {
            assert_eq!(rate.take_at(1, t), Ok(()));
        }
        assert_eq!(rate.take_at(1, t), Err(1));
        // A tenth of a second gives one token back.
        assert_eq!(rate.take_at(1, t + SEC / 10), Ok(()));
        assert_eq!(rate.take_at(1, t + SEC / 10), Err(1));
        // A full second later the bucket is full again, and never fuller.
        assert_eq!(rate.take_at(10, t + 10 * SEC), Ok(()));
        assert_eq!(rate.take_at(1, t + 10 * SEC), Err(1));
    }

    #[test]
    fn a_batch_counts_each_decision_and_a_large_one_leaves_a_debt() {
        let rate = KeyRate::new(10).unwrap();
        let t = SEC;
        assert_eq!(rate.take_at(4, t), Ok(()));
        // Six left: seven do not fit.
        assert_eq!(rate.take_at(7, t), Err(1));
        assert_eq!(rate.take_at(6, t), Ok(()));
        // A batch of 100 under a rate of 10 waits for a full bucket, then owes 9 seconds.
        assert_eq!(rate.take_at(100, t), Err(1));
        assert_eq!(rate.take_at(100, t + SEC), Ok(()));
        assert_eq!(rate.take_at(1, t + SEC), Err(10));
        assert_eq!(rate.take_at(1, t + 10 * SEC), Err(1));
        assert_eq!(rate.take_at(1, t + 11 * SEC), Ok(()));
    }

    #[test]
    fn zero_is_no_limit() {
        assert!(KeyRate::new(0).is_none());
        assert!(KeyRate::new(1_000_000_000_000).is_some_and(|r| r.take_at(1, 0).is_ok()));
    }
}
