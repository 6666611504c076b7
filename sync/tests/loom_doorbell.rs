//! Loom model of the doorbell: run with
//! `RUSTFLAGS="--cfg loom" cargo test -p inferrail-sync --release --test loom_doorbell`.
#![cfg(loom)]

use inferrail_sync::Doorbell;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Wake, Waker};

/// A waker that records that it was woken.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_ring_racing_a_wait_is_never_lost() {
    loom::model(|| {
        let bell = Arc::new(Doorbell::new());
        let flag = std::sync::Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let ringer = {
            let bell = bell.clone();
            thread::spawn(move || bell.ring())
        };
        let mut cx = Context::from_waker(&waker);
        let mut wait = pin!(bell.rung());
        let first = wait.as_mut().poll(&mut cx);
        ringer.join().unwrap();
        if first == Poll::Pending {
            // The ring came after the wait registered: it must have woken the waiter, and the
            // woken wait completes.
            assert!(flag.0.load(Ordering::SeqCst), "lost wake-up");
            assert_eq!(wait.as_mut().poll(&mut cx), Poll::Ready(()));
        }
        // Either way the ring was consumed exactly once.
        let mut again = pin!(bell.rung());
        assert_eq!(again.as_mut().poll(&mut cx), Poll::Pending);
    });
}

#[test]
fn rings_while_nobody_waits_complete_the_next_wait() {
    loom::model(|| {
        let bell = Arc::new(Doorbell::new());
        let ringers: Vec<_> = (0..2)
            .map(|_| {
                let bell = bell.clone();
                thread::spawn(move || bell.ring())
            })
            .collect();
        for r in ringers {
            r.join().unwrap();
        }
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut wait = pin!(bell.rung());
        assert_eq!(wait.as_mut().poll(&mut cx), Poll::Ready(()));
    });
}
