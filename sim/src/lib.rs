//! inferrail-sim: the CPU engine that behaves like vLLM, as a library and the `inferrail-sim`
//! binary.
//!
//! It owns everything an engine does from the outside: vLLM's HTTP API and bytes ([`openai`]),
//! its scheduler, KV blocks and prefix cache ([`engine`]), its Prometheus page ([`prom`]), and
//! its KV events ([`kv_events`]: vLLM's msgpack batches and a ZMTP PUB socket), and the server
//! that runs them all on a virtual timeline ([`server::SimServer`], the `inferrail-sim` binary).
//! Beside the completion routes it serves vLLM's scale-out render routes
//! (`--enable-scale-out`) and, with `VLLM_SERVER_DEV_MODE=1`, `/server_info` (see
//! [`server`]).
//! The scripted engine ([`ScriptedEngine`]) is the fault-injecting stand-in the gateway's tests
//! and `inferrail demo` use.
//!
//! It must never depend on the gateway crates (dataplane, control): the gateway is tested
//! against this engine, so the engine cannot share the gateway's code or its bugs.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

mod clock;
mod conn_state;
pub mod engine;
pub mod kv_events;
pub mod openai;
pub mod prom;
pub mod scripted;
pub mod server;

pub use scripted::{Behavior, EngineOptions, EngineStats, ReceivedRequest, ScriptedEngine};
