//! Wakes the control thread's tick loop before the deadline it sleeps until, when an event moved
//! the next deadline earlier (an ejection started). Single-threaded: the loop and the ringers
//! all run on the control thread's runtime.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::task::{Poll, Waker};

/// A one-reader wake-up flag; a ring before the wait is not lost.
#[derive(Default)]
pub struct TickBell {
    rung: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl TickBell {
    /// Marks the bell rung and wakes the waiter, if one waits.
    pub fn ring(&self) {
        self.rung.set(true);
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
    }

    /// Completes once the bell was rung since the last completed wait, clearing it.
    pub async fn rung(&self) {
        poll_fn(|cx| {
            if self.rung.replace(false) {
                return Poll::Ready(());
            }
            *self.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;
    use std::time::Duration;

    fn runtime() -> monoio::Runtime<monoio::time::TimeDriver<monoio::LegacyDriver>> {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
    }

    #[test]
    fn a_ring_before_the_wait_is_kept_and_cleared_by_it() {
        runtime().block_on(async {
            let bell = TickBell::default();
            bell.ring();
            bell.rung().await;
            let again = monoio::select! {
                _ = bell.rung() => true,
                _ = monoio::time::sleep(Duration::from_millis(20)) => false,
            };
            assert!(!again, "one ring completes one wait");
        });
    }

    #[test]
    fn a_ring_wakes_a_waiting_task() {
        runtime().block_on(async {
            let bell = Rc::new(TickBell::default());
            let ringer = bell.clone();
            monoio::spawn(async move {
                monoio::time::sleep(Duration::from_millis(5)).await;
                ringer.ring();
            });
            let woke = monoio::select! {
                _ = bell.rung() => true,
                _ = monoio::time::sleep(Duration::from_secs(5)) => false,
            };
            assert!(woke);
        });
    }
}
