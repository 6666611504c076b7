//! A lock-free slot for one task's waker: a registering task and any number of waking threads
//! never block each other (the algorithm of `futures`' AtomicWaker, written here so that the loom
//! model covers it).

use crate::{AtomicUsize, UnsafeCell};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::task::Waker;

/// Nobody is registering or waking.
const WAITING: usize = 0;
/// A task is storing its waker.
const REGISTERING: usize = 0b01;
/// A thread is taking the waker to wake it.
const WAKING: usize = 0b10;

/// Holds the waker of the one task that waits; [`AtomicWaker::wake`] wakes it from any thread.
///
/// Guarantees: a wake that happens after a `register` returns wakes that waker (or the one a
/// later `register` stored); a wake racing a `register` wakes the registering task at once.
/// Neither side blocks or spins on the other.
pub struct AtomicWaker {
    state: AtomicUsize,
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: the waker cell is only touched by the thread that moved `state` from WAITING to
// REGISTERING (register) or set WAKING while it was WAITING (take), so at most one thread
// accesses it at a time; Waker is Send + Sync.
unsafe impl Send for AtomicWaker {}
// SAFETY: see above.
unsafe impl Sync for AtomicWaker {}

impl Default for AtomicWaker {
    fn default() -> Self {
        AtomicWaker::new()
    }
}

impl std::fmt::Debug for AtomicWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AtomicWaker")
    }
}

impl AtomicWaker {
    /// An empty slot.
    pub fn new() -> AtomicWaker {
        AtomicWaker {
            state: AtomicUsize::new(WAITING),
            waker: UnsafeCell::new(None),
        }
    }

    /// Stores `waker` as the one to wake. If a wake races this call, `waker` is woken at once.
    pub fn register(&self, waker: &Waker) {
        match self
            .state
            .compare_exchange(WAITING, REGISTERING, Acquire, Acquire)
            .unwrap_or_else(|actual| actual)
        {
            WAITING => {
                // SAFETY: this thread moved the state to REGISTERING: it alone owns the cell.
                let previous = self.waker.with_mut(|slot| unsafe {
                    match &mut *slot {
                        Some(old) if old.will_wake(waker) => None,
                        _ => (*slot).replace(waker.clone()),
                    }
                });
                match self
                    .state
                    .compare_exchange(REGISTERING, WAITING, AcqRel, Acquire)
                {
                    Ok(_) => drop(previous),
                    Err(_) => {
                        // A wake came while registering (state is REGISTERING | WAKING): the
                        // waker it could not take is taken and woken here.
                        // SAFETY: the waking thread saw REGISTERING and left the cell alone.
                        let now = self.waker.with_mut(|slot| unsafe { (*slot).take() });
                        self.state.swap(WAITING, AcqRel);
                        drop(previous);
                        if let Some(w) = now {
                            w.wake();
                        }
                    }
                }
            }
            WAKING => {
                // A wake is taking the previous waker right now: make sure this task runs again.
                waker.wake_by_ref();
            }
            _ => {
                // Another registration is in progress: only one task may use a slot, so this is
                // a concurrent register of the same task; nothing to do.
            }
        }
    }

    /// Wakes the registered task, if any (and forgets its waker).
    pub fn wake(&self) {
        if let Some(w) = self.take() {
            w.wake();
        }
    }

    /// Takes the registered waker, if any.
    pub fn take(&self) -> Option<Waker> {
        match self.state.fetch_or(WAKING, AcqRel) {
            WAITING => {
                // SAFETY: this thread set WAKING while nobody registered: it alone owns the cell.
                let w = self.waker.with_mut(|slot| unsafe { (*slot).take() });
                self.state.fetch_and(!WAKING, Release);
                w
            }
            _ => None,
        }
    }
}
