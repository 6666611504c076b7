//! [`ReplicaLedger`] on real threads (the caps hold exactly, and are never refused early) and
//! against a naive model (a property test of one thread's operations).
#![cfg(not(loom))]

use inferrail_sync::{Admission, LedgerReading, QueueTicket, ReplicaLedger};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

const THREADS: usize = 8;

/// Eight threads admit thousands of times against small caps, doing a little work while
/// admitted: the number admitted at once, counted by an independent counter, never passes the
/// cap, nor does the ledger's own count; and every count is back to zero at the end.
#[test]
fn many_threads_never_exceed_the_cap() {
    for cap in [1u32, 2, 3] {
        let ledger = Arc::new(ReplicaLedger::new());
        let holders = Arc::new(AtomicU32::new(0));
        let most = Arc::new(AtomicU32::new(0));
        let admitted = Arc::new(AtomicU32::new(0));
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (ledger, holders, most, admitted) = (
                    ledger.clone(),
                    holders.clone(),
                    most.clone(),
                    admitted.clone(),
                );
                thread::spawn(move || {
                    for i in 0..5_000u64 {
                        let Some(mut a) = ledger.try_admit(cap, (t as u32) + 1, 64) else {
                            std::hint::spin_loop();
                            continue;
                        };
                        let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        assert!(ledger.in_flight() <= cap);
                        admitted.fetch_add(1, Ordering::Relaxed);
                        if i % 2 == 0 {
                            a.head_received();
                        }
                        if i % 3 == 0 {
                            a.first_byte();
                        }
                        for _ in 0..(i % 7) {
                            std::hint::spin_loop();
                        }
                        holders.fetch_sub(1, Ordering::SeqCst);
                        drop(a);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker");
        }
        let most = most.load(Ordering::SeqCst);
        assert!(most <= cap, "cap {cap}: {most} admitted at once");
        assert!(admitted.load(Ordering::Relaxed) > 0);
        assert_eq!(ledger.reading(), LedgerReading::default());
    }
}

/// Rounds of eight threads racing for `cap` free slots, each holding what it got until all have
/// tried: exactly `min(cap, 8)` win every round — the cap is never undershot by a race either.
#[test]
fn racing_threads_fill_the_cap_exactly() {
    for cap in [1u32, 2, 5] {
        let ledger = Arc::new(ReplicaLedger::new());
        let barrier = Arc::new(Barrier::new(THREADS));
        let wins = Arc::new(AtomicU32::new(0));
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (ledger, barrier, wins) = (ledger.clone(), barrier.clone(), wins.clone());
                thread::spawn(move || {
                    let mut per_round = Vec::new();
                    for _ in 0..300 {
                        barrier.wait();
                        let got = ledger.try_admit(cap, 1, 0);
                        if got.is_some() {
                            wins.fetch_add(1, Ordering::SeqCst);
                        }
                        barrier.wait();
                        per_round.push(wins.load(Ordering::SeqCst));
                        barrier.wait();
                        drop(got);
                        barrier.wait();
                        wins.store(0, Ordering::SeqCst);
                        barrier.wait();
                    }
                    per_round
                })
            })
            .collect();
        for w in workers {
            let rounds = w.join().expect("worker");
            assert!(
                rounds.iter().all(|&n| n == cap.min(THREADS as u32)),
                "cap {cap}: {rounds:?}"
            );
        }
        assert_eq!(ledger.reading(), LedgerReading::default());
    }
}

/// The queue cap holds the same way.
#[test]
fn many_threads_never_overfill_the_queue() {
    let ledger = Arc::new(ReplicaLedger::new());
    let holders = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (ledger, holders, most) = (ledger.clone(), holders.clone(), most.clone());
            thread::spawn(move || {
                for _ in 0..5_000 {
                    if let Some(t) = ledger.try_enqueue(2) {
                        let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        holders.fetch_sub(1, Ordering::SeqCst);
                        drop(t);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    assert!(most.load(Ordering::SeqCst) <= 2);
    assert_eq!(ledger.queued(), 0);
}

/// With cap 1, one request after another on an idle ledger is always admitted.
#[test]
fn sequential_admits_on_an_idle_ledger_always_succeed() {
    let ledger = ReplicaLedger::new();
    for _ in 0..10_000u64 {
        let mut a = ledger.try_admit(1, 3, 10).expect("idle replica admits");
        a.head_received();
        a.first_byte();
        assert!(ledger.try_admit(1, 0, 0).is_none(), "cap 1 holds one");
    }
    assert_eq!(ledger.reading(), LedgerReading::default());
}

/// One operation of a single thread on a ledger.
#[derive(Debug, Clone)]
enum Op {
    Admit {
        cap: u32,
        tokens: u32,
    },
    Head(usize),
    FirstByte(usize),
    Finish(usize),
    Enqueue {
        max: u32,
    },
    Leave(usize),
    Promote {
        ticket: usize,
        cap: u32,
        tokens: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..4, 0u32..50).prop_map(|(cap, tokens)| Op::Admit { cap, tokens }),
        any::<usize>().prop_map(Op::Head),
        any::<usize>().prop_map(Op::FirstByte),
        any::<usize>().prop_map(Op::Finish),
        (0u32..3).prop_map(|max| Op::Enqueue { max }),
        any::<usize>().prop_map(Op::Leave),
        (any::<usize>(), 0u32..4, 0u32..50).prop_map(|(ticket, cap, tokens)| Op::Promote {
            ticket,
            cap,
            tokens
        }),
    ]
}

/// The estimated prefill the property test gives each admission, per prompt token (µs), so
/// admissions differ in it.
const PREFILL_PER_TOKEN: u64 = 7;

/// The naive model: a list of live requests and a count of queued ones.
#[derive(Default)]
struct Model {
    /// (prompt tokens, waiting for head, awaiting first byte) of each request in flight.
    live: Vec<(u32, bool, bool)>,
    queued: u32,
}

impl Model {
    fn admit(&mut self, cap: u32, tokens: u32) -> bool {
        let ok = (self.live.len() as u32) < cap;
        if ok {
            self.live.push((tokens, true, true));
        }
        ok
    }

    fn reading(&self) -> LedgerReading {
        LedgerReading {
            in_flight: self.live.len() as u32,
            awaiting_head: self.live.iter().filter(|l| l.1).count() as u32,
            prompt_tokens: self.live.iter().map(|l| u64::from(l.0)).sum(),
            awaiting_first_byte: self.live.iter().filter(|l| l.2).count() as u64,
            unserved_prefill_micros: self
                .live
                .iter()
                .filter(|l| l.2)
                .map(|l| u64::from(l.0) * PREFILL_PER_TOKEN)
                .sum(),
            queued: self.queued,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any sequence of admits, heads, first bytes, finishes, queue entries, exits and promotions
    /// leaves the ledger's reading equal to the naive model's after every step, and all zero once
    /// every admission and ticket is dropped.
    #[test]
    fn the_ledger_matches_a_naive_model(ops in proptest::collection::vec(op(), 0..64)) {
        let ledger = ReplicaLedger::new();
        let mut model = Model::default();
        let mut live: Vec<Admission<&ReplicaLedger>> = Vec::new();
        let mut tickets: Vec<QueueTicket<&ReplicaLedger>> = Vec::new();
        for op in ops {
            match op {
                Op::Admit { cap, tokens } => {
                    let got = ledger.try_admit(cap, tokens, u64::from(tokens) * PREFILL_PER_TOKEN);
                    prop_assert_eq!(got.is_some(), model.admit(cap, tokens));
                    live.extend(got);
                }
                Op::Head(i) if !live.is_empty() => {
                    let i = i % live.len();
                    live[i].head_received();
                    model.live[i].1 = false;
                }
                Op::FirstByte(i) if !live.is_empty() => {
                    let i = i % live.len();
                    live[i].first_byte();
                    model.live[i].2 = false;
                }
                Op::Finish(i) if !live.is_empty() => {
                    let i = i % live.len();
                    drop(live.remove(i));
                    model.live.remove(i);
                }
                Op::Enqueue { max } => {
                    let got = ledger.try_enqueue(max);
                    prop_assert_eq!(got.is_some(), model.queued < max);
                    if got.is_some() {
                        model.queued += 1;
                    }
                    tickets.extend(got);
                }
                Op::Leave(i) if !tickets.is_empty() => {
                    drop(tickets.remove(i % tickets.len()));
                    model.queued -= 1;
                }
                Op::Promote { ticket, cap, tokens } if !tickets.is_empty() => {
                    let t = tickets.remove(ticket % tickets.len());
                    let admitted = model.admit(cap, tokens);
                    match t.try_admit(cap, tokens, u64::from(tokens) * PREFILL_PER_TOKEN) {
                        Ok(a) => {
                            prop_assert!(admitted);
                            model.queued -= 1;
                            live.push(a);
                        }
                        Err(t) => {
                            prop_assert!(!admitted);
                            tickets.push(t);
                        }
                    }
                }
                _ => {}
            }
            prop_assert_eq!(ledger.reading(), model.reading());
        }
        drop(live);
        drop(tickets);
        prop_assert_eq!(ledger.reading(), LedgerReading::default());
    }
}
