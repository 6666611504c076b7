//! The control plane and the `inferrail` binary: wires the crates together.
//!
//! This crate owns the control thread (snapshot publication, the admin listener with merged
//! `/metrics`), turning a validated config into a running [`gateway::Gateway`], signal handling,
//! and the `serve`/`check`/`replay-shadow` commands (`demo` and `calibrate` live in inferrail-tools).
//! It must never put work on a data core's request path: everything here runs on the control
//! thread or the caller's thread, and talks to cores only through snapshots and counters.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

pub mod admin;
pub mod control_thread;
pub mod controller;
pub mod fleet;
pub mod gateway;
pub mod live_config;
pub mod observe;
pub mod prediction;

pub use gateway::{ConfigSource, Gateway, GatewayError, GatewayOptions};
