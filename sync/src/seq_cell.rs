//! [`SeqCell`]: a latest-wins record of a few words that one thread replaces and any thread reads
//! whole, without a lock, an allocation or a wait.
//!
//! The control thread writes each replica's engine reading here after every scrape and the data
//! cores read it at decision time, so a scrape needs no snapshot publication and wakes no core.
//!
//! It is a sequence lock built only from atomics (no `unsafe`): the sequence word is odd while a
//! write is under way; a reader takes the sequence, the words, then the sequence again, and keeps
//! what it read only when both sequence reads agree and are even. A reader never waits for the
//! writer: after [`READ_TRIES`] torn reads in a row it returns `None`, as for a cell never
//! written. A write is a handful of relaxed stores, so a reader meets one in progress only if
//! it is preempted inside that window.
//!
//! Writers are meant to be one thread. A second writer racing the first loses (its write is
//! dropped and `write` says so) instead of tearing the record.

use crate::AtomicU64;
use std::sync::atomic::Ordering;

#[cfg(loom)]
use loom::sync::atomic::fence;
#[cfg(not(loom))]
use std::sync::atomic::fence;

/// How many times [`SeqCell::read`] retries a read a write overlapped before giving up.
pub const READ_TRIES: usize = 4;

/// A record of `N` words, replaced whole by [`SeqCell::write`] and read whole by
/// [`SeqCell::read`]: a read returns exactly the words of one write, never a mix of two.
#[derive(Debug)]
pub struct SeqCell<const N: usize> {
    /// Even: stable; odd: a write is under way. 0: never written.
    seq: AtomicU64,
    words: [AtomicU64; N],
}

impl<const N: usize> Default for SeqCell<N> {
    fn default() -> Self {
        SeqCell::new()
    }
}

impl<const N: usize> SeqCell<N> {
    /// An empty cell: [`SeqCell::read`] returns `None` until the first write.
    pub fn new() -> SeqCell<N> {
        SeqCell {
            seq: AtomicU64::new(0),
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Replaces the record with `words`. Returns false, and changes nothing, only when another
    /// writer's write was under way at the same moment.
    pub fn write(&self, words: [u64; N]) -> bool {
        let start = self.seq.load(Ordering::Relaxed);
        // Acquire: a write that follows another one (on any thread) is ordered after its words.
        if start & 1 == 1
            || self
                .seq
                .compare_exchange(start, start + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        // The odd sequence is visible before any of the words that follow.
        fence(Ordering::Release);
        for (slot, word) in self.words.iter().zip(words) {
            slot.store(word, Ordering::Relaxed);
        }
        self.seq.store(start + 2, Ordering::Release);
        true
    }

    /// The words of the latest complete write, or `None` when there was none yet or a write
    /// overlapped each of [`READ_TRIES`] reads.
    pub fn read(&self) -> Option<[u64; N]> {
        for _ in 0..READ_TRIES {
            let before = self.seq.load(Ordering::Acquire);
            if before == 0 {
                return None;
            }
            if before & 1 == 1 {
                continue;
            }
            let words = std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed));
            // The words are read before the second sequence read.
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                return Some(words);
            }
        }
        None
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn an_empty_cell_reads_none_and_a_write_reads_back() {
        let cell = SeqCell::<3>::new();
        assert_eq!(cell.read(), None);
        assert!(cell.write([1, 2, 3]));
        assert_eq!(cell.read(), Some([1, 2, 3]));
        assert!(cell.write([0, 0, 0]));
        assert_eq!(
            cell.read(),
            Some([0, 0, 0]),
            "a written zero record is not empty"
        );
    }

    /// Readers on other threads never see a record mixing two writes while one thread writes
    /// records whose words are all equal.
    #[test]
    fn readers_never_see_a_torn_record() {
        let cell = Arc::new(SeqCell::<5>::new());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (cell, stop) = (cell.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if let Some(w) = cell.read() {
                            assert!(w.iter().all(|&x| x == w[0]), "torn record {w:?}");
                            assert!(w[0] >= seen, "went back from {seen} to {}", w[0]);
                            seen = w[0];
                        }
                    }
                    seen
                })
            })
            .collect();
        for k in 1..=200_000u64 {
            assert!(cell.write([k; 5]));
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() <= 200_000);
        }
        assert_eq!(cell.read(), Some([200_000; 5]));
    }
}
