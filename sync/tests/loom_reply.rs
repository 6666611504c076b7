//! Loom model of the one-shot reply (mailbox + doorbell on the lock-free waker): run with
//! `RUSTFLAGS="--cfg loom" cargo test -p inferrail-sync --release --test loom_reply`.
#![cfg(loom)]

use inferrail_sync::reply_channel;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Wake, Waker};

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn the_answer_always_arrives_and_wakes_the_waiter() {
    loom::model(|| {
        let (tx, rx) = reply_channel::<usize>();
        let flag = std::sync::Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let worker = thread::spawn(move || tx.send(42));
        let mut cx = Context::from_waker(&waker);
        let mut rx = pin!(rx);
        let first = rx.as_mut().poll(&mut cx);
        worker.join().unwrap();
        match first {
            Poll::Ready(v) => assert_eq!(v.as_deref(), Some(&42)),
            Poll::Pending => {
                assert!(flag.0.load(Ordering::SeqCst), "lost wake-up");
                match rx.as_mut().poll(&mut cx) {
                    Poll::Ready(v) => assert_eq!(v.as_deref(), Some(&42)),
                    Poll::Pending => panic!("woken but not ready"),
                }
            }
        }
    });
}

#[test]
fn a_dropped_sender_completes_the_reply_empty() {
    loom::model(|| {
        let (tx, rx) = reply_channel::<usize>();
        let flag = std::sync::Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let worker = thread::spawn(move || drop(tx));
        let mut cx = Context::from_waker(&waker);
        let mut rx = pin!(rx);
        let first = rx.as_mut().poll(&mut cx);
        worker.join().unwrap();
        let result = match first {
            Poll::Ready(v) => v,
            Poll::Pending => {
                assert!(flag.0.load(Ordering::SeqCst), "lost wake-up");
                match rx.as_mut().poll(&mut cx) {
                    Poll::Ready(v) => v,
                    Poll::Pending => panic!("woken but not ready"),
                }
            }
        };
        assert!(result.is_none());
    });
}
