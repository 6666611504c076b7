//! The control plane and the `inferrail` binary: wires the crates together.
//!
//! This crate owns the control thread (snapshot publication, the admin listener with merged
//! `/metrics`), turning a validated config into a running [`gateway::Gateway`], signal handling,
//! the `serve`/`check`/`demo` commands, and a small blocking HTTP client the demo and tests use.
//! It must never put work on a data core's request path: everything here runs on the control
//! thread or the caller's thread, and talks to cores only through snapshots and counters.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

pub mod admin;
pub mod admin_api;
pub mod calibrate;
pub mod client;
pub mod control_metrics;
pub mod control_thread;
pub mod controller;
pub mod decision_log;
pub mod demo;
pub mod discovery;
pub mod engine_load;
pub mod explain;
pub mod fleet_health;
pub mod gateway;
mod jsonl;
pub mod live_config;
pub mod nnls;
pub mod prediction;
pub mod probe;
pub mod registry;
pub mod replay;
pub mod replica_worker;
pub mod scrape;
pub mod shadow;

pub use gateway::{ConfigSource, Gateway, GatewayError, GatewayOptions};
