//! The lock-free pieces that connect the control thread to the data cores.
//!
//! This crate owns [`Mailbox`]: a latest-wins slot through which the control thread hands each core
//! a new immutable snapshot, and the core takes it between requests with one atomic load on the
//! fast path; [`Doorbell`], the cross-thread wake-up that makes a waiting task look at once (on a
//! lock-free [`AtomicWaker`]); [`Reply`], a one-shot answer from a worker thread to a core; and the fleet-wide routing facts every
//! core shares: [`ReplicaLedger`] (a replica's load, counted once for every core, with the
//! breaker caps held exactly), [`PrefillQueue`] (a replica's queued prefill), [`SessionTable`] (where each
//! conversation last went), [`DemandSketch`] (recent prefill demand per root prefix) and [`SeqCell`] (each engine's latest reading, written
//! by the control thread after a scrape), and the [`BlockHash`] those facts and the KV index
//! are keyed by. It is kept tiny and dependency-free so its loom model (`RUSTFLAGS="--cfg loom"`)
//! builds in seconds. It must never block, spin on another thread, or allocate on the take path.
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

#[allow(unsafe_code)] // the waker slot's cell accesses (SAFETY comments inside; loom_doorbell)
mod atomic_waker;
mod block_hash;
mod demand_sketch;
mod doorbell;
#[allow(unsafe_code)]
// QueueTicket::try_admit moves its owner out of a ManuallyDrop (SAFETY comment inside)
mod ledger;
#[allow(unsafe_code)] // Arc raw-pointer handoff (SAFETY comments inside; loom_mailbox)
mod mailbox;
mod padded;
mod prefill_queue;
mod reply;
mod seq_cell;
mod session_table;

pub use atomic_waker::AtomicWaker;
pub use block_hash::BlockHash;
pub use demand_sketch::DemandSketch;
pub use doorbell::{Doorbell, Rung};
pub use ledger::{Admission, LedgerReading, QueueTicket, ReplicaLedger};
pub use mailbox::Mailbox;
pub use padded::CachePadded;
pub use prefill_queue::PrefillQueue;
pub use reply::{reply_channel, Reply, ReplySender};
pub use seq_cell::{SeqCell, READ_TRIES};
pub use session_table::SessionTable;

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;
#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize},
    Arc,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize},
    Arc,
};

/// `std::cell::UnsafeCell` with loom's `with_mut` access, so the same code runs under loom.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> UnsafeCell<T> {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
