//! Loom models of the fleet-wide routing facts: run with
//! `RUSTFLAGS="--cfg loom" cargo test -p inferrail-sync --release --test loom_fleet`.
#![cfg(loom)]

use inferrail_sync::{PrefillQueue, SessionTable};
use loom::sync::Arc;
use loom::thread;

/// Two cores route one request each while a third request (routed before) gets its first byte:
/// whatever the interleaving, both new requests are counted and their prefill is not lost to the
/// "last one answered, queue empty" reset, and the answered one's prefill leaves exactly.
#[test]
fn concurrent_routes_and_first_bytes_lose_nothing() {
    loom::model(|| {
        let q = Arc::new(PrefillQueue::new());
        q.add(64_000);
        let a = {
            let q = q.clone();
            thread::spawn(move || q.add(128_000))
        };
        let b = {
            let q = q.clone();
            thread::spawn(move || q.first_byte(64_000))
        };
        q.add(64_000);
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(q.awaiting(), 2);
        // Exactly the two live requests' prefill is unserved (the answered one is gone).
        assert_eq!(q.unserved_micros(), 128_000 + 64_000);
    });
}

/// Every answered request leaves the queue empty, in any order.
#[test]
fn the_last_first_byte_always_empties_the_queue() {
    loom::model(|| {
        let q = Arc::new(PrefillQueue::new());
        q.add(64_000);
        q.add(64_000);
        let a = {
            let q = q.clone();
            thread::spawn(move || q.first_byte(64_000))
        };
        q.first_byte(64_000);
        a.join().unwrap();
        assert_eq!(q.awaiting(), 0);
        assert_eq!(q.unserved_micros(), 0);
    });
}

/// A reader never sees another session's replica, whatever the writers interleave.
#[test]
fn session_reads_are_never_torn_or_confused() {
    loom::model(|| {
        let t = Arc::new(SessionTable::new(2));
        let s1 = 0x0000_0001_0000_0000u64;
        let s2 = 0x0000_0002_0000_0000u64; // same slot, other tag
        let w = {
            let t = t.clone();
            thread::spawn(move || t.set(s2, 22))
        };
        t.set(s1, 11);
        let seen = t.get(s1);
        w.join().unwrap();
        assert!(matches!(seen, None | Some(11)), "{seen:?}");
        assert!(matches!(t.get(s2), None | Some(22)));
    });
}

/// Two cores adding to the same key within one sub-window (one of them first claiming the
/// expired bucket) never lose an amount.
#[test]
fn sketch_adds_within_a_sub_window_are_all_counted() {
    loom::model(|| {
        let s = Arc::new(inferrail_sync::DemandSketch::new(4_000, 1));
        let a = {
            let s = s.clone();
            thread::spawn(move || s.add(5, 3, 100))
        };
        s.add(5, 4, 100);
        a.join().unwrap();
        assert!(s.estimate(5, 100) >= 7, "{}", s.estimate(5, 100));
    });
}
