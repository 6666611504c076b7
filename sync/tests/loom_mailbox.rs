//! Loom model of the snapshot mailbox: run with
//! `RUSTFLAGS="--cfg loom" cargo test -p inferrail-sync --release --test loom_mailbox`.
#![cfg(loom)]

use inferrail_sync::Mailbox;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

/// A snapshot whose contents are written before publication; the reader must see them whole.
struct Snap {
    generation: usize,
    payload: AtomicUsize,
}

#[test]
fn reader_sees_whole_snapshots_in_order_and_nothing_leaks() {
    loom::model(|| {
        let mb = Arc::new(Mailbox::<Snap>::new());
        let writer = {
            let mb = mb.clone();
            thread::spawn(move || {
                for generation in 1..=2 {
                    let snap = Snap {
                        generation,
                        payload: AtomicUsize::new(0),
                    };
                    // Written with Relaxed: only the mailbox's ordering makes it visible.
                    snap.payload.store(generation * 10, Ordering::Relaxed);
                    mb.publish(Arc::new(snap));
                }
            })
        };
        let mut last_seen = 0;
        for _ in 0..3 {
            if let Some(s) = mb.take() {
                assert!(s.generation > last_seen, "generations never go back");
                assert_eq!(s.payload.load(Ordering::Relaxed), s.generation * 10);
                last_seen = s.generation;
            }
        }
        writer.join().unwrap();
        if let Some(s) = mb.take() {
            assert!(s.generation > last_seen);
            last_seen = s.generation;
        }
        // Whatever the interleaving, the latest snapshot is eventually delivered.
        assert_eq!(last_seen, 2);
        // loom reports any Arc that is never dropped (a leak) or dropped twice.
    });
}

#[test]
fn concurrent_drop_of_mailbox_frees_unread_value() {
    loom::model(|| {
        let mb = Arc::new(Mailbox::<usize>::new());
        let writer = {
            let mb = mb.clone();
            thread::spawn(move || mb.publish(Arc::new(7)))
        };
        let got = mb.take();
        writer.join().unwrap();
        if let Some(v) = got {
            assert_eq!(*v, 7);
        }
        drop(mb);
    });
}
