//! Offline tools around the gateway: `calibrate` (measure an engine's prefill time and fit the
//! cost model, [`calibrate`] and [`nnls`]), the `demo` (a gateway in front of three simulators,
//! [`demo`]), `kv-events` (print what an engine's KV event stream carries, read with the
//! gateway's own subscriber, [`kv_watch`]) and the small blocking HTTP client they and the integration tests use ([`client`]).
//!
//! Nothing here is needed by the serving binary at run time: `inferrail` never links this crate
//! (nor the simulator it pulls in); its `demo` and `calibrate` commands start the
//! `inferrail-tools` binary. This crate must never be a dependency of config, routing, dataplane
//! or control.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

pub mod calibrate;
pub mod client;
pub mod demo;
pub mod kv_watch;
pub mod nnls;
