//! [`ReplicaLedger`]: one replica's load, counted once for the whole gateway.
//!
//! Every data core admits requests to a replica through the same ledger, and routing, the
//! breakers, metrics and the admin API all read it, so there is exactly one count of each fact:
//!
//! - **requests in flight** (admitted and not yet finished), never above the `max_concurrency`
//!   the admitting caller passes, exactly, whatever the cores race;
//! - **requests waiting for their response head** (a subset of those in flight);
//! - **prompt tokens in flight** (the tokenized prompts of the requests in flight);
//! - **unserved prefill**: the requests awaiting their first response byte and their estimated
//!   prefill, summed (what the engine has not yet delivered, however long it has had; a
//!   [`PrefillQueue`]);
//! - **requests queued at the gateway** waiting for a free slot on this replica while it is full,
//!   never above the `max_pending` the caller passes.
//!
//! Counts are released by RAII: an [`Admission`] gives back its slot, its head wait, its first
//! byte wait and its prompt tokens exactly once each (when they happen, or when it is dropped), a
//! [`QueueTicket`] gives back its queue place when dropped or turned into an admission.
//!
//! # Memory the cores share, and what it costs
//!
//! The ledger is four `u64` words on one 128-byte aligned block ([`CachePadded`]: two 64-byte
//! lines, so no other data, and no other replica's ledger, shares its line or the prefetched
//! pair). Every word is written by every core that sends the replica a request:
//!
//! | word | holds | written by |
//! |---|---|---|
//! | `load` | in flight (low 32 bits), waiting for a head (high 32 bits) | admit (CAS loop), head, finish (one `fetch_sub` each) |
//! | `prompt_tokens` | prompt tokens in flight | admit and finish, only for tokenized requests (one `fetch_add` / `fetch_sub`) |
//! | `prefill` | awaiting first byte and their estimated prefill (µs), summed ([`PrefillQueue`]) | admit, first byte (one CAS loop each) |
//! | `queued` | requests queued at the gateway | enqueue (CAS loop), dequeue (one `fetch_sub`) |
//!
//! So a request costs, on that one shared line: admit = one successful CAS on `load` + one CAS on
//! `prefill` (+ one `fetch_add` on `prompt_tokens` when
//! tokenized); head = one `fetch_sub`; first byte = one CAS; finish = one
//! `fetch_sub` on `load` (+ one on `prompt_tokens`). The RMWs of one
//! event hit the same line back to back, so each event moves the line to the acting core at most
//! once (one cache-to-cache transfer, ~50–100 ns across cores, a few ns when it is already there).
//! A CAS only retries when another core changed the same word in between. No operation waits for
//! another thread, allocates or reads a clock.
//! Queue places cost nothing unless the replica is full.
//!
//! Each word is exact on its own; a [`LedgerReading`] reads each once, so its fields may be from
//! slightly different instants (in flight and waiting for a head share a word, so
//! `awaiting_head <= in_flight` always holds in a reading).

use crate::{AtomicU64, CachePadded, PrefillQueue};
use std::ops::Deref;
use std::sync::atomic::Ordering;

/// One unit of the in-flight field of the `load` word.
const IN_FLIGHT_ONE: u64 = 1;
/// One unit of the waiting-for-head field of the `load` word.
const HEAD_ONE: u64 = 1 << 32;
const IN_FLIGHT_MASK: u64 = HEAD_ONE - 1;

#[derive(Debug, Default)]
struct Words {
    load: AtomicU64,
    prompt_tokens: AtomicU64,
    prefill: PrefillQueue,
    queued: AtomicU64,
}

/// One replica's load as every core sees it (see the module docs). `Send + Sync`; share it by
/// `Arc` (or any owner that derefs to it) between all cores.
#[derive(Debug, Default)]
pub struct ReplicaLedger {
    words: CachePadded<Words>,
}

/// Every counter of a [`ReplicaLedger`], each read once (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerReading {
    /// Requests admitted and not yet finished.
    pub in_flight: u32,
    /// Requests in flight still waiting for their response head (never above `in_flight`).
    pub awaiting_head: u32,
    /// Prompt tokens of the requests in flight.
    pub prompt_tokens: u64,
    /// Requests in flight still awaiting their first response byte (saturates at
    /// 2^20 - 1, [`PrefillQueue`]'s field).
    pub awaiting_first_byte: u64,
    /// The estimated prefill of the requests in flight still awaiting their first byte, summed,
    /// in microseconds (it does not drain with time: it is what the engine has not delivered).
    pub unserved_prefill_micros: u64,
    /// Requests queued at the gateway waiting for a slot on this replica.
    pub queued: u32,
}

impl ReplicaLedger {
    /// An idle ledger: every count zero.
    pub fn new() -> ReplicaLedger {
        ReplicaLedger::default()
    }

    /// Admits one request if fewer than `max_concurrency` are in flight (0 admits none), counting
    /// it in flight, waiting for its head, awaiting its first byte with `prefill_micros` of
    /// estimated prefill unserved, and holding `prompt_tokens`.
    ///
    /// Guarantee: the in-flight count never exceeds `max_concurrency`, exactly, whatever other
    /// threads do at the same time (a compare-and-swap on the in-flight word: a refused request
    /// never touches it, so no reader ever sees an overshoot). A request is refused only when
    /// `max_concurrency` requests really were in flight at the moment of the attempt. A cap lowered
    /// below the current count refuses until enough requests finish.
    pub fn try_admit(
        &self,
        max_concurrency: u32,
        prompt_tokens: u32,
        prefill_micros: u64,
    ) -> Option<Admission<&ReplicaLedger>> {
        Self::try_admit_owned(self, max_concurrency, prompt_tokens, prefill_micros)
    }

    /// [`try_admit`](Self::try_admit) through any owner of the ledger (an `Arc`, or a handle of
    /// the caller's that derefs to it), which the admission keeps until it is dropped.
    pub fn try_admit_owned<L: Deref<Target = ReplicaLedger>>(
        ledger: L,
        max_concurrency: u32,
        prompt_tokens: u32,
        prefill_micros: u64,
    ) -> Option<Admission<L>> {
        if !ledger.take_slot(max_concurrency) {
            return None;
        }
        Some(Admission::counted(ledger, prompt_tokens, prefill_micros))
    }

    /// The CAS loop on the `load` word: in flight + 1 and waiting for a head + 1, only while in
    /// flight is below `max`.
    fn take_slot(&self, max: u32) -> bool {
        let load = &self.words.load;
        let mut cur = load.load(Ordering::Acquire);
        loop {
            if cur & IN_FLIGHT_MASK >= u64::from(max) {
                return false;
            }
            match load.compare_exchange_weak(
                cur,
                cur + IN_FLIGHT_ONE + HEAD_ONE,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(seen) => cur = seen,
            }
        }
    }

    /// Takes a place in the gateway's queue for this replica if fewer than `max_pending`
    /// requests are queued (0 queues none: a full replica refuses at once).
    ///
    /// Guarantee: the queued count never exceeds `max_pending`, exactly, under any race (a
    /// compare-and-swap; a refused request never touches the count).
    pub fn try_enqueue(&self, max_pending: u32) -> Option<QueueTicket<&ReplicaLedger>> {
        Self::try_enqueue_owned(self, max_pending)
    }

    /// [`try_enqueue`](Self::try_enqueue) through any owner of the ledger, which the ticket keeps.
    pub fn try_enqueue_owned<L: Deref<Target = ReplicaLedger>>(
        ledger: L,
        max_pending: u32,
    ) -> Option<QueueTicket<L>> {
        let queued = &ledger.words.queued;
        let mut cur = queued.load(Ordering::Acquire);
        loop {
            if cur >= u64::from(max_pending) {
                return None;
            }
            match queued.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(QueueTicket { ledger }),
                Err(seen) => cur = seen,
            }
        }
    }

    /// Requests in flight now (one load; a hint for routing — only [`try_admit`](Self::try_admit)
    /// decides whether one more fits).
    pub fn in_flight(&self) -> u32 {
        (self.words.load.load(Ordering::Acquire) & IN_FLIGHT_MASK) as u32
    }

    /// Requests queued at the gateway for this replica now (one load).
    pub fn queued(&self) -> u32 {
        self.words.queued.load(Ordering::Acquire) as u32
    }

    /// Every counter, each read once.
    pub fn reading(&self) -> LedgerReading {
        let w = &self.words;
        let load = w.load.load(Ordering::Acquire);
        let (awaiting_first_byte, unserved_prefill_micros) = w.prefill.read();
        LedgerReading {
            in_flight: (load & IN_FLIGHT_MASK) as u32,
            awaiting_head: (load >> 32) as u32,
            prompt_tokens: w.prompt_tokens.load(Ordering::Acquire),
            awaiting_first_byte,
            unserved_prefill_micros,
            queued: w.queued.load(Ordering::Acquire) as u32,
        }
    }
}

/// One admitted request's hold on a [`ReplicaLedger`] (see [`ReplicaLedger::try_admit`]).
///
/// Guarantee: each count it took is given back exactly once — the head wait by
/// [`head_received`](Self::head_received), the first-byte wait by
/// [`first_byte`](Self::first_byte), and whatever is still held (the slot, the prompt tokens,
/// and any wait not yet ended) when it is dropped.
#[derive(Debug)]
#[must_use = "dropping an admission finishes the request at once"]
pub struct Admission<L: Deref<Target = ReplicaLedger>> {
    ledger: L,
    prompt_tokens: u32,
    awaiting_head: bool,
    awaiting_first_byte: bool,
    prefill_micros: u64,
}

impl<L: Deref<Target = ReplicaLedger>> Admission<L> {
    /// The rest of an admission once its slot is taken: prefill and prompt tokens.
    fn counted(ledger: L, prompt_tokens: u32, prefill_micros: u64) -> Self {
        let w = &ledger.words;
        if prompt_tokens > 0 {
            w.prompt_tokens
                .fetch_add(u64::from(prompt_tokens), Ordering::AcqRel);
        }
        w.prefill.add(prefill_micros);
        Admission {
            ledger,
            prompt_tokens,
            awaiting_head: true,
            awaiting_first_byte: true,
            prefill_micros,
        }
    }

    /// The response head arrived: the request no longer waits for it. Only the first call counts.
    pub fn head_received(&mut self) {
        if std::mem::take(&mut self.awaiting_head) {
            self.ledger.words.load.fetch_sub(HEAD_ONE, Ordering::AcqRel);
        }
    }

    /// The first response byte arrived: the request's prefill leaves the replica's unserved
    /// prefill (which empties when it was the last one awaiting). Only the first call counts.
    pub fn first_byte(&mut self) {
        if std::mem::take(&mut self.awaiting_first_byte) {
            self.ledger.words.prefill.first_byte(self.prefill_micros);
        }
    }

    /// Whether the request still waits for its response head.
    pub fn awaiting_head(&self) -> bool {
        self.awaiting_head
    }

    /// Whether the request still awaits its first response byte.
    pub fn awaiting_first_byte(&self) -> bool {
        self.awaiting_first_byte
    }

    /// The prompt tokens this admission holds.
    pub fn prompt_tokens(&self) -> u32 {
        self.prompt_tokens
    }

    /// The ledger this admission is counted in.
    pub fn ledger(&self) -> &ReplicaLedger {
        &self.ledger
    }
}

impl<L: Deref<Target = ReplicaLedger>> Drop for Admission<L> {
    /// Finishes the request: ends a first-byte wait still open (its prefill leaves the unserved
    /// sum), gives back the prompt tokens, then the slot and a head wait still open in one
    /// `fetch_sub`.
    fn drop(&mut self) {
        self.first_byte();
        let w = &self.ledger.words;
        if self.prompt_tokens > 0 {
            w.prompt_tokens
                .fetch_sub(u64::from(self.prompt_tokens), Ordering::AcqRel);
        }
        let head = if std::mem::take(&mut self.awaiting_head) {
            HEAD_ONE
        } else {
            0
        };
        w.load.fetch_sub(IN_FLIGHT_ONE + head, Ordering::AcqRel);
    }
}

/// One request's place in the gateway's queue for a full replica (see
/// [`ReplicaLedger::try_enqueue`]). Guarantee: the place is given back exactly once, when the
/// ticket is dropped or turned into an admission.
#[derive(Debug)]
#[must_use = "dropping a ticket leaves the queue at once"]
pub struct QueueTicket<L: Deref<Target = ReplicaLedger>> {
    ledger: L,
}

impl<L: Deref<Target = ReplicaLedger>> QueueTicket<L> {
    /// Tries to admit the queued request (as [`ReplicaLedger::try_admit`]): on success it leaves
    /// the queue, after it is counted in flight (a reader may see it in both counts for an
    /// instant, never in neither); on refusal the ticket comes back, still queued.
    pub fn try_admit(
        self,
        max_concurrency: u32,
        prompt_tokens: u32,
        prefill_micros: u64,
    ) -> Result<Admission<L>, QueueTicket<L>> {
        if !self.ledger.take_slot(max_concurrency) {
            return Err(self);
        }
        self.ledger.words.queued.fetch_sub(1, Ordering::AcqRel);
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped or used again, so the ledger handle is moved out of it
        // exactly once (its queue place was given back just above, by hand, in place of `drop`).
        let ledger = unsafe { std::ptr::read(&this.ledger) };
        Ok(Admission::counted(ledger, prompt_tokens, prefill_micros))
    }

    /// The ledger this ticket is queued in.
    pub fn ledger(&self) -> &ReplicaLedger {
        &self.ledger
    }
}

impl<L: Deref<Target = ReplicaLedger>> Drop for QueueTicket<L> {
    /// Leaves the queue.
    fn drop(&mut self) {
        self.ledger.words.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_each_fact_once_and_releases_on_drop() {
        let l = ReplicaLedger::new();
        let mut a = l.try_admit(2, 100, 640).expect("room");
        let b = l.try_admit(2, 0, 640).expect("room");
        assert!(l.try_admit(2, 5, 0).is_none(), "cap 2 is full");
        let r = l.reading();
        assert_eq!(
            (
                r.in_flight,
                r.awaiting_head,
                r.prompt_tokens,
                r.awaiting_first_byte
            ),
            (2, 2, 100, 2)
        );
        assert_eq!(r.unserved_prefill_micros, 1_280);
        a.head_received();
        a.head_received();
        assert_eq!(l.reading().awaiting_head, 1, "only the first call counts");
        a.first_byte();
        a.first_byte();
        assert_eq!(l.reading().awaiting_first_byte, 1);
        assert_eq!(
            l.reading().unserved_prefill_micros,
            640,
            "only the first call counts"
        );
        drop(b);
        let r = l.reading();
        assert_eq!((r.in_flight, r.awaiting_head, r.prompt_tokens), (1, 0, 100));
        assert_eq!(r.awaiting_first_byte, 0);
        assert_eq!(
            r.unserved_prefill_micros, 0,
            "a finish without a first byte gives it back"
        );
        drop(a);
        assert_eq!(l.reading(), LedgerReading::default());
    }

    #[test]
    fn zero_caps_refuse_at_once() {
        let l = ReplicaLedger::new();
        assert!(l.try_admit(0, 0, 0).is_none());
        assert!(l.try_enqueue(0).is_none());
        assert_eq!(l.reading(), LedgerReading::default());
    }

    #[test]
    fn a_ticket_becomes_an_admission_or_stays_queued() {
        let l = Arc::new(ReplicaLedger::new());
        let held = ReplicaLedger::try_admit_owned(l.clone(), 1, 0, 0).expect("idle");
        let t = ReplicaLedger::try_enqueue_owned(l.clone(), 1).expect("queue has room");
        assert!(l.try_enqueue(1).is_none(), "max_pending 1 is full");
        let t = t.try_admit(1, 7, 0).expect_err("replica still full");
        assert_eq!(l.queued(), 1);
        drop(held);
        let a = t.try_admit(1, 7, 0).expect("a slot freed");
        let r = l.reading();
        assert_eq!((r.queued, r.in_flight, r.prompt_tokens), (0, 1, 7));
        drop(a);
        assert_eq!(l.reading(), LedgerReading::default());
        assert_eq!(Arc::strong_count(&l), 1, "every handle given back");
    }

    #[test]
    fn one_ledger_fills_two_lines_alone() {
        assert_eq!(std::mem::size_of::<ReplicaLedger>(), 128);
        assert_eq!(std::mem::align_of::<ReplicaLedger>(), 128);
    }
}
