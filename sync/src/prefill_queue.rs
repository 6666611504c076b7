//! [`PrefillQueue`]: one replica's queued prefill as every data core sees it, in one atomic word.
//!
//! The gateway keeps each replica's prefill queue itself: a routed request adds its estimated
//! prefill, the queue drains in real time, and it counts as empty once every request routed there
//! has had its first byte. Requests from every core change it, so both facts — how many requests
//! still await their first byte, and when the queued prefill will have drained — live in one
//! `AtomicU64` updated by compare-and-swap: a request's arrival and another's first byte can never
//! interleave into a lost update (the reset to empty only happens when the count it saw drop to
//! zero was really the last one).
//!
//! Layout: the high [`AWAIT_BITS`] bits count requests awaiting their first byte (saturating at
//! the field's maximum), the low bits hold the drain time in ticks of [`TICK_MICROS`] µs since the
//! caller's epoch (35 years of range). Callers pass `now` in microseconds since that same epoch,
//! which makes the queue usable in virtual time (fleet simulations) as well as real time.

use crate::AtomicU64;
use std::sync::atomic::Ordering;

/// Bits of the awaiting-first-byte count.
pub const AWAIT_BITS: u32 = 20;
/// Microseconds per drain-time tick.
pub const TICK_MICROS: u64 = 64;
const TIME_BITS: u32 = 64 - AWAIT_BITS;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;
const AWAIT_MAX: u64 = (1 << AWAIT_BITS) - 1;

fn pack(awaiting: u64, until_ticks: u64) -> u64 {
    (awaiting.min(AWAIT_MAX) << TIME_BITS) | (until_ticks & TIME_MASK)
}

fn unpack(word: u64) -> (u64, u64) {
    (word >> TIME_BITS, word & TIME_MASK)
}

fn ticks(micros: u64) -> u64 {
    (micros / TICK_MICROS).min(TIME_MASK)
}

/// A replica's queued prefill and the requests awaiting their first byte (see the module docs).
#[derive(Debug)]
pub struct PrefillQueue {
    word: AtomicU64,
}

impl Default for PrefillQueue {
    fn default() -> Self {
        PrefillQueue::new()
    }
}

impl PrefillQueue {
    /// An empty queue.
    pub fn new() -> PrefillQueue {
        PrefillQueue {
            word: AtomicU64::new(0),
        }
    }

    fn update(&self, f: impl Fn(u64, u64) -> (u64, u64)) {
        let mut cur = self.word.load(Ordering::Acquire);
        loop {
            let (awaiting, until) = unpack(cur);
            let (a, u) = f(awaiting, until);
            match self.word.compare_exchange_weak(
                cur,
                pack(a, u),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }

    /// A request was routed here at `now_micros` with `prefill_micros` of estimated prefill: it
    /// awaits its first byte, and the queue drains that much later than it otherwise would.
    pub fn add(&self, now_micros: u64, prefill_micros: u64) {
        let now = ticks(now_micros);
        let extra = prefill_micros.div_ceil(TICK_MICROS);
        self.update(|awaiting, until| {
            (
                awaiting.saturating_add(1),
                until.max(now).saturating_add(extra).min(TIME_MASK),
            )
        });
    }

    /// A request routed here had its first byte (or ended without one) at `now_micros`. When it
    /// was the last one awaiting, the queue is empty from now on.
    pub fn first_byte(&self, now_micros: u64) {
        let now = ticks(now_micros);
        self.update(|awaiting, until| {
            let left = awaiting.saturating_sub(1);
            (left, if left == 0 { now.min(until) } else { until })
        });
    }

    /// Microseconds of prefill still queued at `now_micros` (0 when drained or empty).
    pub fn queued_micros(&self, now_micros: u64) -> u64 {
        let (awaiting, until) = unpack(self.word.load(Ordering::Acquire));
        if awaiting == 0 {
            return 0;
        }
        until.saturating_sub(ticks(now_micros)) * TICK_MICROS
    }

    /// Requests awaiting their first byte.
    pub fn awaiting(&self) -> u64 {
        unpack(self.word.load(Ordering::Acquire)).0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn adds_drain_in_time_and_reset_when_all_answered() {
        let q = PrefillQueue::new();
        assert_eq!(q.queued_micros(0), 0);
        q.add(1_000, 640_000);
        q.add(1_000, 640_000);
        // Two back to back: 1.28 s queued at t = 1 ms, 0.28 s left at t = 1.001 s.
        assert_eq!(q.queued_micros(1_000), 1_280_000);
        assert_eq!(q.queued_micros(1_001_000), 1_280_000 - 1_000_000);
        assert_eq!(q.awaiting(), 2);
        q.first_byte(10_000);
        assert!(
            q.queued_micros(10_000) > 0,
            "one still awaits its first byte"
        );
        q.first_byte(20_000);
        assert_eq!(q.queued_micros(20_000), 0, "every request answered: empty");
        assert_eq!(q.awaiting(), 0);
        // A request routed to an idle replica starts its prefill now, not after stale time.
        q.add(5_000_000, 64_000);
        assert_eq!(q.queued_micros(5_000_000), 64_000);
    }

    #[test]
    fn counts_never_underflow() {
        let q = PrefillQueue::new();
        q.first_byte(5);
        assert_eq!(q.awaiting(), 0);
        q.add(0, 0);
        assert_eq!(q.awaiting(), 1);
    }
}
