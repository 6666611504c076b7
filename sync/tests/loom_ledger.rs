//! Loom models of the replica ledger: run with
//! `RUSTFLAGS="--cfg loom" cargo test -p inferrail-sync --release --test loom_ledger`.
#![cfg(loom)]

use inferrail_sync::{LedgerReading, ReplicaLedger};
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;

/// One core's request: admit against `cap`; while admitted, check the independent count of
/// holders and the ledger's own count never pass the cap; get the head and the first byte; finish.
fn request(ledger: &ReplicaLedger, holders: &AtomicU32, cap: u32, tokens: u32) -> bool {
    let Some(mut a) = ledger.try_admit(cap, tokens, 64) else {
        return false;
    };
    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
    assert!(now <= cap, "{now} admitted against cap {cap}");
    assert!(ledger.in_flight() <= cap);
    let r = ledger.reading();
    assert!(r.awaiting_head <= r.in_flight);
    // Its own unserved prefill is counted until its first byte, whatever the others do.
    assert!(r.unserved_prefill_micros >= 64);
    a.head_received();
    a.first_byte();
    holders.fetch_sub(1, Ordering::SeqCst);
    true
}

/// Two threads race for cap 1 while each holds its slot through head and first byte: never two
/// at once, at least one is served, and every count is back to zero after both.
#[test]
fn two_threads_against_cap_one() {
    loom::model(|| {
        let ledger = Arc::new(ReplicaLedger::new());
        let holders = Arc::new(AtomicU32::new(0));
        let other = {
            let (ledger, holders) = (ledger.clone(), holders.clone());
            thread::spawn(move || request(&ledger, &holders, 1, 5))
        };
        let mine = request(&ledger, &holders, 1, 7);
        let theirs = other.join().unwrap();
        assert!(mine || theirs, "an idle replica refused both");
        assert_eq!(ledger.reading(), LedgerReading::default());
    });
}

/// Three threads race for cap 2: never three at once, at least two are served, all counts
/// return to zero.
#[test]
fn three_threads_against_cap_two() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let ledger = Arc::new(ReplicaLedger::new());
        let holders = Arc::new(AtomicU32::new(0));
        let others: Vec<_> = (0..2u32)
            .map(|t| {
                let (ledger, holders) = (ledger.clone(), holders.clone());
                thread::spawn(move || request(&ledger, &holders, 2, t))
            })
            .collect();
        let mut served = u32::from(request(&ledger, &holders, 2, 9));
        for t in others {
            served += u32::from(t.join().unwrap());
        }
        assert!(served >= 2, "only {served} served against cap 2");
        assert_eq!(ledger.reading(), LedgerReading::default());
    });
}

/// A queued request promoted to an admission races a fresh admit for the last slot and another
/// request for the last queue place: neither cap is passed, and every count returns to zero.
#[test]
fn a_promoted_ticket_races_a_fresh_admit() {
    loom::model(|| {
        let ledger = Arc::new(ReplicaLedger::new());
        let ticket = ledger.try_enqueue(1).expect("empty queue");
        let other = {
            let ledger = ledger.clone();
            thread::spawn(move || {
                let queued = ledger.try_enqueue(1);
                assert!(ledger.queued() <= 1);
                let admitted = ledger.try_admit(1, 3, 0);
                assert!(ledger.in_flight() <= 1);
                (queued.is_some(), admitted.is_some())
            })
        };
        let result = ticket.try_admit(1, 4, 0);
        assert!(ledger.in_flight() <= 1);
        assert!(ledger.queued() <= 1);
        let promoted = result.is_ok();
        drop(result);
        let (_, admitted) = other.join().unwrap();
        assert!(promoted || admitted, "one of the two gets the idle slot");
        assert_eq!(ledger.reading(), LedgerReading::default());
    });
}
