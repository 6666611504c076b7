//! [`DemandSketch`]: a decaying count-min sketch of prefill demand per root prefix, shared by
//! every data core.
//!
//! Hot prefix replication asks, for a prompt's root prefix, how much prefill the fleet spent on it
//! lately. Counting per key exactly would need a map every core writes; a count-min sketch needs a
//! fixed array of atomic counters: an add increments one counter per row, an estimate takes the
//! smallest of the key's counters, so it never undercounts (other keys can only add to a counter).
//!
//! Decay: the window is cut into `BUCKETS` (4) sub-windows, each with its own counters. Every
//! counter carries the number of the sub-window it counts (a 16-bit tag in its high bits, the
//! amount in the low 48): an add to a counter still tagged with an older sub-window replaces it
//! (tag and amount in one compare-and-swap), so buckets reset themselves lazily, counter by
//! counter, and no add can race a reset. Estimates sum the counters whose tag lies within the
//! window. A tag aliases after 65,536 sub-windows untouched, which can only over-count.
//!
//! Time is the caller's microseconds since its own epoch, so fleet simulations run it in virtual
//! time.

use crate::AtomicU64;
use std::sync::atomic::Ordering;

/// Sub-windows per window.
pub const BUCKETS: usize = 4;
const ROWS: usize = 4;
const SEEDS: [u64; ROWS] = [
    0x9e37_79b9_7f4a_7c15,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
    0xd6e8_feb8_6659_fd93,
];

const TAG_SHIFT: u32 = 48;
const AMOUNT_MASK: u64 = (1 << TAG_SHIFT) - 1;

/// A windowed count-min sketch of amounts per 64-bit key (see the module docs).
pub struct DemandSketch {
    /// `BUCKETS` buckets of `ROWS * columns` tagged counters.
    counters: Box<[AtomicU64]>,
    columns: usize,
    sub_window_micros: u64,
}

impl std::fmt::Debug for DemandSketch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemandSketch")
            .field("columns", &self.columns)
            .field("sub_window_micros", &self.sub_window_micros)
            .finish_non_exhaustive()
    }
}

fn column(key: u64, row: usize, columns: usize) -> usize {
    let mut h = (key ^ SEEDS[row]).wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    (h as usize) % columns
}

fn tag(epoch: u64) -> u64 {
    epoch & 0xffff
}

impl DemandSketch {
    /// A sketch over a window of `window_micros` (at least 4 µs, one per sub-window) with `columns`
    /// counters per row (at least 1).
    pub fn new(window_micros: u64, columns: usize) -> DemandSketch {
        let columns = columns.max(1);
        DemandSketch {
            // Amount 0 under any tag reads as nothing.
            counters: (0..BUCKETS * ROWS * columns)
                .map(|_| AtomicU64::new(0))
                .collect(),
            columns,
            sub_window_micros: (window_micros / BUCKETS as u64).max(1),
        }
    }

    /// The window's length in microseconds.
    pub fn window_micros(&self) -> u64 {
        self.sub_window_micros * BUCKETS as u64
    }

    fn counter(&self, epoch: u64, row: usize, key: u64) -> &AtomicU64 {
        let bucket = (epoch % BUCKETS as u64) as usize;
        &self.counters[(bucket * ROWS + row) * self.columns + column(key, row, self.columns)]
    }

    /// Adds `amount` to `key` at `now_micros`.
    pub fn add(&self, key: u64, amount: u64, now_micros: u64) {
        let e = now_micros / self.sub_window_micros;
        for row in 0..ROWS {
            let c = self.counter(e, row, key);
            let mut cur = c.load(Ordering::Acquire);
            loop {
                let held = if cur >> TAG_SHIFT == tag(e) {
                    cur & AMOUNT_MASK
                } else {
                    0
                };
                let next = (tag(e) << TAG_SHIFT) | held.saturating_add(amount).min(AMOUNT_MASK);
                match c.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => break,
                    Err(seen) => cur = seen,
                }
            }
        }
    }

    /// The amount added to `key` within the window ending at `now_micros` (the current
    /// sub-window and the `BUCKETS - 1` before it): never less than the true sum.
    pub fn estimate(&self, key: u64, now_micros: u64) -> u64 {
        let e = now_micros / self.sub_window_micros;
        (0..ROWS)
            .map(|row| {
                (0..BUCKETS as u64)
                    .filter(|back| *back <= e)
                    .map(|back| {
                        let word = self.counter(e - back, row, key).load(Ordering::Acquire);
                        if word >> TAG_SHIFT == tag(e - back) {
                            word & AMOUNT_MASK
                        } else {
                            0
                        }
                    })
                    .sum::<u64>()
            })
            .min()
            .unwrap_or(0)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn counts_within_the_window_and_forgets_after() {
        let s = DemandSketch::new(4_000, 64);
        s.add(1, 10, 0);
        s.add(1, 5, 1_500);
        assert_eq!(s.estimate(1, 2_000), 15);
        assert_eq!(s.estimate(1, 4_500), 5, "the first sub-window expired");
        assert_eq!(s.estimate(1, 9_000), 0);
        assert_eq!(s.estimate(2, 2_000), 0);
    }

    /// Against an exact per-key windowed sum: never under, on many random sequences of adds
    /// (a seeded xorshift instead of proptest keeps this crate free of dependencies).
    #[test]
    fn never_underestimates() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _case in 0..200 {
            let columns = 1 + next(16) as usize;
            let s = DemandSketch::new(4_000, columns);
            let mut now = 0u64;
            let mut log: Vec<(u64, u64, u64)> = Vec::new();
            for _ in 0..1 + next(200) {
                let (key, amount) = (next(40), 1 + next(1000));
                now += next(500);
                s.add(key, amount, now);
                log.push((key, amount, now));
                // The exact amount within the sub-windows the sketch still holds.
                let e = now / 1_000;
                let mut exact: HashMap<u64, u64> = HashMap::new();
                for &(k, a, t) in &log {
                    if e - t / 1_000 < BUCKETS as u64 {
                        *exact.entry(k).or_default() += a;
                    }
                }
                for (k, v) in exact {
                    assert!(
                        s.estimate(k, now) >= v,
                        "key {k}: {} < {v}",
                        s.estimate(k, now)
                    );
                }
            }
        }
    }
}
