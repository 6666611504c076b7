//! The scripted engine: an OpenAI-compatible endpoint that answers like vLLM 0.32 in shape (not yet
//! byte for byte) and can be told to misbehave, for the gateway's integration tests, the
//! `inferrail demo` command and zero-latency overhead benchmarks.
//!
//! - [`types`]: behaviors, options, counters and recorded requests.
//! - `engine`: the handle and the engine thread (runtime, control task, acceptor).
//! - `conn`: one connection's plumbing (reader task, inbox, cancelable writes, request framing).
//! - `exchange`: the handler task (routing, behaviors, counters, records).
//! - `respond`: response bytes; `framing`: is a raw response well framed; `clock`: dates and ids.
//! - `shared`: state shared between the engine thread and the handle.

mod conn;
mod engine;
mod exchange;
mod framing;
mod respond;
mod shared;
pub mod types;

pub use engine::ScriptedEngine;
pub use types::{Behavior, EngineOptions, EngineStats, ReceivedRequest};
