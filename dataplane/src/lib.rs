//! The per-core data plane: everything a pinned data core does for a client request.
//!
//! This crate owns the listener and HTTP/1.1 handling on each core, request routing through the
//! `inferrail-routing` brain (which it feeds candidates and a clock), upstream keep-alive pools, proxying with retries and
//! breakers, client-disconnect propagation, and the per-core metrics recorders. Each core works
//! only on state it owns (`Rc`/`Cell`) plus immutable [`snapshot::Snapshot`]s the control thread
//! hands over through a lock-free mailbox. It must never take a lock or write memory another core
//! writes on the request path, and never block a core on another thread.
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

pub mod client_conn;
pub mod core_state;
pub mod core_stats;
pub mod cores;
pub mod doorbell;
pub mod errors;
pub mod exchange;
pub mod fleet;
pub mod http;
pub mod metrics;
pub mod observe;
pub mod offers;
pub mod pool;
pub mod predict;
mod prediction;
pub mod proxy;
pub mod refusal;
mod relay;
pub mod reports;
pub mod request;
pub mod shutdown;
pub mod snapshot;
// recv(MSG_PEEK), sendmsg(MSG_DONTWAIT) and shutdown(2) on raw fds (SAFETY comments inside).
#[allow(unsafe_code)]
mod sockets;
mod upstream;

pub use cores::{driver_name, start_cores, CoreOptions, CoreSet, StartError};
pub use shutdown::ShutdownSignal;
pub use snapshot::Snapshot;
