//! inferrail-sim: the CPU engine that behaves like vLLM, as a library and the `inferrail-sim`
//! binary.
//!
//! It owns everything an engine does from the outside: vLLM's HTTP API and bytes ([`openai`]),
//! its scheduler, KV blocks and prefix cache ([`engine`]), its Prometheus page ([`prom`]), and
//! later KV events. These pure pieces are not yet served over HTTP; today's server is the
//! scripted engine ([`ScriptedEngine`]) that the gateway's tests, `inferrail demo` and the
//! overhead benchmarks run against.
//!
//! It must never depend on the gateway crates (dataplane, control): the gateway is tested
//! against this engine, so the engine cannot share the gateway's code or its bugs.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

pub mod engine;
pub mod openai;
pub mod prom;
pub mod scripted;

pub use scripted::{Behavior, EngineOptions, EngineStats, ReceivedRequest, ScriptedEngine};
