//! A cross-thread wake-up for one data core: the control thread rings it after publishing a
//! snapshot, and the core's snapshot task adopts the snapshot at once instead of at its next
//! request, so requests waiting on a replica that left rotation hear of it within a wake-up.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

/// Rung by one thread, awaited by one task. The lock is taken once per wait and once per ring,
/// never on a request path.
#[derive(Debug, Default)]
pub struct Doorbell {
    rung: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Doorbell {
    /// A doorbell that has not been rung.
    pub fn new() -> Doorbell {
        Doorbell::default()
    }

    /// Rings: the waiting task (if any) wakes; a ring while nobody waits is kept for the next wait.
    pub fn ring(&self) {
        self.rung.store(true, Ordering::Release);
        let waker = match self.waker.lock() {
            Ok(mut w) => w.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(w) = waker {
            w.wake();
        }
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
        {
            let mut slot = match self.bell.waker.lock() {
                Ok(w) => w,
                Err(poisoned) => poisoned.into_inner(),
            };
            *slot = Some(cx.waker().clone());
        }
        // A ring between the first check and the registration must not be lost.
        if self.bell.rung.swap(false, Ordering::AcqRel) {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_ring_from_another_thread_wakes_the_task() {
        let bell = Arc::new(Doorbell::new());
        let ringer = bell.clone();
        let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .unwrap();
        let rings = rt.block_on(async move {
            let t = std::thread::spawn(move || {
                for _ in 0..3 {
                    std::thread::sleep(Duration::from_millis(20));
                    ringer.ring();
                }
            });
            let mut rings = 0;
            while rings < 3 {
                monoio::select! {
                    _ = bell.rung() => rings += 1,
                    _ = monoio::time::sleep(Duration::from_secs(10)) => break,
                }
            }
            t.join().unwrap();
            rings
        });
        assert_eq!(rings, 3);
    }

    #[test]
    fn a_ring_before_the_wait_is_kept() {
        let bell = Doorbell::new();
        bell.ring();
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut f = std::pin::pin!(bell.rung());
        assert!(f.as_mut().poll(&mut cx).is_ready());
        let mut g = std::pin::pin!(bell.rung());
        assert!(g.as_mut().poll(&mut cx).is_pending());
    }
}
