//! The lock-free pieces that connect the control thread to the data cores.
//!
//! This crate owns [`Mailbox`]: a latest-wins slot through which the control thread hands each core
//! a new immutable snapshot, and the core takes it between requests with one atomic load on the
//! fast path; and [`Doorbell`], the cross-thread wake-up that makes a waiting task look at once. It is kept tiny and dependency-free so its loom model (`RUSTFLAGS="--cfg loom"`)
//! builds in seconds. It must never block, spin on another thread, or allocate on the take path.
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

mod doorbell;
mod mailbox;
mod padded;

pub use doorbell::{Doorbell, Rung};
pub use mailbox::Mailbox;
pub use padded::CachePadded;

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicPtr},
    Arc, Mutex,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{AtomicBool, AtomicPtr},
    Arc, Mutex,
};
