//! A single-slot, latest-wins handoff of `Arc<T>` from one writer to one reader.

use crate::{Arc, AtomicPtr};
use std::ptr;
use std::sync::atomic::Ordering;

/// A latest-wins mailbox holding at most one `Arc<T>` that the reader has not taken yet.
///
/// Guarantees: every published value is either taken by the reader exactly once or dropped by the
/// writer when a newer one displaces it (never both, never neither); the reader that takes a value
/// sees everything the writer did before publishing it; neither side blocks or retries.
pub struct Mailbox<T> {
    /// Null, or a pointer from `Arc::into_raw` owned by the mailbox.
    slot: AtomicPtr<T>,
}

// SAFETY: the mailbox only moves `Arc<T>` between threads; that is sound when `Arc<T>` is Send,
// i.e. when T: Send + Sync.
unsafe impl<T: Send + Sync> Send for Mailbox<T> {}
// SAFETY: all access to the slot goes through atomic swaps; see above.
unsafe impl<T: Send + Sync> Sync for Mailbox<T> {}

impl<T> Default for Mailbox<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Mailbox<T> {
    /// An empty mailbox.
    pub fn new() -> Self {
        Mailbox {
            slot: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Leaves `value` for the reader, dropping a previous value it has not taken.
    pub fn publish(&self, value: Arc<T>) {
        let new = Arc::into_raw(value) as *mut T;
        // Release: the reader's Acquire swap sees the value fully built.
        // Acquire: a displaced pointer came from an earlier publish; we now own it.
        let old = self.slot.swap(new, Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: `old` came from `Arc::into_raw` in an earlier publish and the swap removed
            // it from the slot, so this thread holds the only claim to that strong count.
            drop(unsafe { Arc::from_raw(old) });
        }
    }

    /// Takes the latest unread value, if any. Costs one atomic load when nothing is waiting.
    pub fn take(&self) -> Option<Arc<T>> {
        if self.slot.load(Ordering::Relaxed).is_null() {
            return None;
        }
        let taken = self.slot.swap(ptr::null_mut(), Ordering::AcqRel);
        if taken.is_null() {
            None
        } else {
            // SAFETY: `taken` came from `Arc::into_raw` in `publish` and the swap removed it from
            // the slot, so this thread holds the only claim to that strong count.
            Some(unsafe { Arc::from_raw(taken) })
        }
    }
}

impl<T> Drop for Mailbox<T> {
    fn drop(&mut self) {
        let left = self.slot.swap(ptr::null_mut(), Ordering::AcqRel);
        if !left.is_null() {
            // SAFETY: as in `take`; `&mut self` means no other thread can reach the slot.
            drop(unsafe { Arc::from_raw(left) });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn latest_wins_and_displaced_values_are_dropped() {
        let mb = Mailbox::new();
        assert!(mb.take().is_none());
        let a = Arc::new(1);
        let b = Arc::new(2);
        mb.publish(a.clone());
        mb.publish(b.clone());
        assert_eq!(Arc::strong_count(&a), 1, "displaced value dropped");
        assert_eq!(*mb.take().unwrap(), 2);
        assert!(mb.take().is_none());
        mb.publish(a.clone());
        drop(mb);
        assert_eq!(
            Arc::strong_count(&a),
            1,
            "unread value dropped with the mailbox"
        );
    }
}
