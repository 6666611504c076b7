//! [`PrefillQueue`]: one replica's unserved prefill as every data core sees it, in one atomic word.
//!
//! The gateway keeps each replica's prefill queue itself: a routed request adds its estimated
//! prefill, and takes it away again at its first response byte (or when it ends without one). What
//! remains is the estimated prefill the engine has not yet delivered, however long it has had
//! (ADR 025: a drain in real time claimed the engine works at the model's speed; this sum does not
//! pretend to know). Requests from every core change it, so both facts — how many requests still
//! await their first byte, and their estimated prefill summed — live in one `AtomicU64` updated by
//! compare-and-swap: a request's arrival and another's first byte can never interleave into a lost
//! update, and the sum resets to zero exactly when the count it saw drop to zero was really the
//! last one (which also clears any rounding a saturated field left behind).
//!
//! Layout: the high [`AWAIT_BITS`] bits count requests awaiting their first byte (saturating at
//! the field's maximum), the low bits hold the summed prefill in microseconds (saturating at
//! 2^44 µs, about 203 days). No operation reads a clock.

use crate::AtomicU64;
use std::sync::atomic::Ordering;

/// Bits of the awaiting-first-byte count.
pub const AWAIT_BITS: u32 = 20;
const SUM_BITS: u32 = 64 - AWAIT_BITS;
const SUM_MAX: u64 = (1 << SUM_BITS) - 1;
const AWAIT_MAX: u64 = (1 << AWAIT_BITS) - 1;

fn pack(awaiting: u64, sum_micros: u64) -> u64 {
    (awaiting.min(AWAIT_MAX) << SUM_BITS) | sum_micros.min(SUM_MAX)
}

fn unpack(word: u64) -> (u64, u64) {
    (word >> SUM_BITS, word & SUM_MAX)
}

/// A replica's unserved prefill and the requests awaiting their first byte (see the module docs).
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
            let (awaiting, sum) = unpack(cur);
            let (a, s) = f(awaiting, sum);
            match self.word.compare_exchange_weak(
                cur,
                pack(a, s),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }

    /// A request was routed here with `prefill_micros` of estimated prefill: it awaits its first
    /// byte, and its prefill is unserved until then.
    pub fn add(&self, prefill_micros: u64) {
        self.update(|awaiting, sum| {
            (
                awaiting.saturating_add(1),
                sum.saturating_add(prefill_micros),
            )
        });
    }

    /// A request routed here with `prefill_micros` had its first byte (or ended without one): its
    /// prefill is served. When it was the last one awaiting, the queue is empty.
    pub fn first_byte(&self, prefill_micros: u64) {
        self.update(|awaiting, sum| {
            let left = awaiting.saturating_sub(1);
            (
                left,
                if left == 0 {
                    0
                } else {
                    sum.saturating_sub(prefill_micros)
                },
            )
        });
    }

    /// Microseconds of estimated prefill of the requests still awaiting their first byte (0 when
    /// none awaits).
    pub fn unserved_micros(&self) -> u64 {
        unpack(self.word.load(Ordering::Acquire)).1
    }

    /// Requests awaiting their first byte and their estimated prefill (µs), from one load, so
    /// the two always agree (no request is in one and not the other).
    pub fn read(&self) -> (u64, u64) {
        unpack(self.word.load(Ordering::Acquire))
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
    fn sums_what_awaits_and_resets_when_all_answered() {
        let q = PrefillQueue::new();
        assert_eq!(q.unserved_micros(), 0);
        q.add(640_000);
        q.add(320_000);
        assert_eq!(q.unserved_micros(), 960_000);
        assert_eq!(q.awaiting(), 2);
        q.first_byte(640_000);
        assert_eq!(q.unserved_micros(), 320_000, "the other one still awaits");
        q.first_byte(320_000);
        assert_eq!(q.unserved_micros(), 0, "every request answered: empty");
        assert_eq!(q.awaiting(), 0);
    }

    #[test]
    fn counts_never_underflow_and_saturation_heals_when_empty() {
        let q = PrefillQueue::new();
        q.first_byte(5);
        assert_eq!((q.awaiting(), q.unserved_micros()), (0, 0));
        q.add(u64::MAX);
        q.add(7);
        assert_eq!(q.unserved_micros(), SUM_MAX, "the sum saturates");
        q.first_byte(7);
        q.first_byte(u64::MAX);
        assert_eq!((q.awaiting(), q.unserved_micros()), (0, 0));
        q.add(9);
        assert_eq!(q.unserved_micros(), 9);
    }
}
