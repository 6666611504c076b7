//! [`SessionTable`]: the replica each conversation last went to, shared by every data core.
//!
//! A direct-mapped table of atomic words: a session's hash picks one slot, and the slot holds
//! the hash's high 32 bits (a tag) next to a 32-bit replica key. Reads and writes are single
//! atomic loads and stores, so no core ever waits for another. Two sessions that share a slot
//! evict each other (the tag tells them apart, so a read never returns the other session's
//! replica); affinity is a hint, and losing one costs one cache-blind decision.

use crate::AtomicU64;
use std::sync::atomic::Ordering;

/// A fixed-size session → replica key table (see the module docs).
#[derive(Debug)]
pub struct SessionTable {
    slots: Box<[AtomicU64]>,
    mask: usize,
}

fn tag(hash: u64) -> u64 {
    // Never zero, so an empty slot (0) matches no session.
    (hash >> 32) | 1
}

impl SessionTable {
    /// A table of `slots` entries, rounded up to a power of two (at least 2).
    pub fn new(slots: usize) -> SessionTable {
        let n = slots.max(2).next_power_of_two();
        SessionTable {
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
            mask: n - 1,
        }
    }

    fn slot(&self, hash: u64) -> &AtomicU64 {
        &self.slots[(hash as usize) & self.mask]
    }

    /// The replica key last stored for the session `hash`, if its slot still holds it.
    pub fn get(&self, hash: u64) -> Option<u32> {
        let word = self.slot(hash).load(Ordering::Acquire);
        (word >> 32 == tag(hash)).then_some(word as u32)
    }

    /// Stores `replica_key` for the session `hash` (replacing whatever shared its slot).
    pub fn set(&self, hash: u64, replica_key: u32) {
        self.slot(hash).store(
            (tag(hash) << 32) | u64::from(replica_key),
            Ordering::Release,
        );
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn stores_and_never_confuses_sessions() {
        let t = SessionTable::new(4);
        assert_eq!(t.get(7), None);
        t.set(7, 3);
        assert_eq!(t.get(7), Some(3));
        // Same slot (low bits), different tag: evicts, and 7 no longer reads as 3.
        let other = 7 | (0xdead_u64 << 32);
        t.set(other, 9);
        assert_eq!(t.get(other), Some(9));
        assert_eq!(t.get(7), None);
    }
}
