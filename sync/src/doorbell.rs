//! A cross-thread wake-up for one waiting task: the control thread rings a core's doorbell after
//! publishing a snapshot (the core adopts it at once instead of at its next request), and the
//! cores ring the control thread's after queueing a request report. No ring is ever lost: a ring
//! that comes while nobody waits completes the next wait at once.

use crate::atomic_waker::AtomicWaker;
use crate::AtomicBool;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

/// Rung by any thread, awaited by one task. Lock-free on both sides.
#[derive(Debug)]
pub struct Doorbell {
    rung: AtomicBool,
    waker: AtomicWaker,
}

impl Default for Doorbell {
    fn default() -> Self {
        Doorbell::new()
    }
}

impl Doorbell {
    /// A doorbell that has not been rung.
    pub fn new() -> Doorbell {
        Doorbell {
            rung: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        }
    }

    /// Rings: the waiting task (if any) wakes; a ring while nobody waits is kept for the next wait.
    pub fn ring(&self) {
        // A read-modify-write, like the waiter's swaps, so the ring and the waits are ordered on
        // one modification chain (with a plain store the loom model finds a lost ring).
        self.rung.swap(true, Ordering::AcqRel);
        self.waker.wake();
    }

    /// Completes at the next ring (at once if one came since the last wait ended).
    pub fn rung(&self) -> Rung<'_> {
        Rung { bell: self }
    }
}

/// Future of [`Doorbell::rung`].
pub struct Rung<'a> {
    bell: &'a Doorbell,
}

impl Future for Rung<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.bell.rung.swap(false, Ordering::AcqRel) {
            return Poll::Ready(());
        }
        self.bell.waker.register(cx.waker());
        // A ring between the first check and the registration must not be lost.
        if self.bell.rung.swap(false, Ordering::AcqRel) {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}
