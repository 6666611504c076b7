//! Seeded, deterministic request workloads: what each request sends, not when.
//!
//! A workload is a list of [`Request`]s: the JSON body for `/v1/chat/completions`, an optional
//! session id (sent as [`SESSION_HEADER`]), the request's place in its conversation and the
//! think time before it. The same workload, size, seed and [`Options`] always give the same
//! bytes. Prompt text is made of [`text::WORDS`], one builtin-tokenizer token per word, so the
//! token counts below are exact (before the chat template adds its own tokens).
//!
//! The families (see `bench/README.md` for the rationale):
//!
//! | name | family | what is shared |
//! |---|---|---|
//! | `w1` | [`SharedPrompts`] | a few 2k–8k-token system prompts, each request a 50–500-token question |
//! | `w2` | [`Chat`], [`sharegpt`] | each conversation's history, resent every turn after 10–20 s |
//! | `w3` | [`Agent`] | tool definitions + system prompt; each step resends the growing context |
//! | `w4` | [`Rag`] | a system prompt; k = 3 Zipf-picked documents of 2,000 |
//! | `w5` | [`FewShot`] | a fixed set of k-shot examples |
//! | `w6` | [`Unique`] | nothing: the control |
//! | `w8` | W1 bodies | W1, arriving in Gamma bursts over a diurnal ramp ([`Workload::arrivals`]) |
//! | `mix` | W1 + W6 | half of the requests each, interleaved by the seed |
//! | `hot` | W1, Zipf 1.1 | W1 whose system prompts are picked with Zipf exponent 1.1 |
//!
//! Multi-turn workloads (W2, W3) list their requests conversation by conversation; within a
//! conversation, turn `k + 1` is meant to be sent once the answer to turn `k` is in and its
//! `think_time` has passed, while each conversation's first turn follows the arrival schedule.

use std::time::Duration;

use serde_json::{json, Value};

use crate::arrivals::ArrivalKind;
use crate::schedule::SplitMix64;

mod agent;
mod chat;
mod few_shot;
mod rag;
mod shared_prompts;
pub mod sharegpt;
pub mod text;
mod unique;

#[cfg(test)]
mod tests;

pub use agent::{Agent, ToolStyle};
pub use chat::Chat;
pub use few_shot::FewShot;
pub use rag::Rag;
pub use shared_prompts::SharedPrompts;
pub use unique::Unique;

/// The header that names a request's conversation.
pub const SESSION_HEADER: &str = "x-session-id";

/// The path of the chat completions endpoint every workload posts to.
pub const CHAT_PATH: &str = "/v1/chat/completions";

/// What every body carries besides its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The `model` field.
    pub model: String,
    /// The `max_tokens` field.
    pub max_tokens: u32,
    /// The `stream` field.
    pub stream: bool,
}

impl Default for Options {
    /// `sim-llama`, 8 tokens, not streaming (as `perf/policy-compare`).
    fn default() -> Options {
        Options {
            model: "sim-llama".to_string(),
            max_tokens: 8,
            stream: false,
        }
    }
}

/// Where a request sits in a multi-turn conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The conversation, counted from 0 in list order.
    pub conversation: usize,
    /// The turn within it, from 0.
    pub turn: usize,
}

/// One request of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The endpoint path ([`CHAT_PATH`]).
    pub path: &'static str,
    /// The JSON body.
    pub body: Vec<u8>,
    /// The [`SESSION_HEADER`] value, for requests that belong to a conversation.
    pub session_id: Option<String>,
    /// The conversation and turn, for multi-turn workloads.
    pub position: Option<Position>,
    /// How long the user (or the agent's tool) takes before this request once the previous
    /// turn's answer is in; zero for single requests and first turns.
    pub think_time: Duration,
}

impl Request {
    /// A single chat request: no session, no position, no think time.
    pub(crate) fn single(options: &Options, messages: Vec<Value>) -> Request {
        Request {
            path: CHAT_PATH,
            body: chat_body(options, messages, None),
            session_id: None,
            position: None,
            think_time: Duration::ZERO,
        }
    }
}

/// A chat completions body: `model`, `messages`, `max_tokens`, `stream`, and `tools` if given.
pub(crate) fn chat_body(options: &Options, messages: Vec<Value>, tools: Option<&Value>) -> Vec<u8> {
    let mut body = json!({
        "model": options.model,
        "messages": messages,
        "max_tokens": options.max_tokens,
        "stream": options.stream,
    });
    if let (Some(tools), Some(map)) = (tools, body.as_object_mut()) {
        map.insert("tools".to_string(), tools.clone());
    }
    body.to_string().into_bytes()
}

/// A `{role, content}` message.
pub(crate) fn message(role: &str, content: impl Into<String>) -> Value {
    json!({"role": role, "content": content.into()})
}

/// A think time drawn uniformly from `[lo, hi]` at millisecond resolution.
pub(crate) fn think(rng: &mut SplitMix64, lo: Duration, hi: Duration) -> Duration {
    let lo_ms = lo.as_millis() as usize;
    let hi_ms = hi.as_millis() as usize;
    Duration::from_millis(rng.between(lo_ms, hi_ms) as u64)
}

/// The named workloads, each with its default shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Shared system prompts ([`SharedPrompts`] defaults).
    W1,
    /// Generated multi-turn chats ([`Chat`] defaults).
    W2,
    /// Agent loops over shared tools ([`Agent`] defaults).
    W3,
    /// RAG over a Zipf-weighted corpus ([`Rag`] defaults).
    W4,
    /// Few-shot evaluation ([`FewShot`] defaults).
    W5,
    /// Nothing shared: the control ([`Unique`] defaults).
    W6,
    /// W1 bodies on bursty diurnal arrivals (see [`Workload::arrivals`]).
    W8,
    /// W1 and W6, half of the requests each.
    Mix,
    /// W1 with its system prompts picked by Zipf, exponent 1.1.
    Hot,
}

impl Workload {
    /// Every named workload.
    pub const ALL: [Workload; 9] = [
        Workload::W1,
        Workload::W2,
        Workload::W3,
        Workload::W4,
        Workload::W5,
        Workload::W6,
        Workload::W8,
        Workload::Mix,
        Workload::Hot,
    ];

    /// The name used on command lines and in reports (`w1` ... `w8`, `mix`, `hot`).
    pub fn name(self) -> &'static str {
        match self {
            Workload::W1 => "w1",
            Workload::W2 => "w2",
            Workload::W3 => "w3",
            Workload::W4 => "w4",
            Workload::W5 => "w5",
            Workload::W6 => "w6",
            Workload::W8 => "w8",
            Workload::Mix => "mix",
            Workload::Hot => "hot",
        }
    }

    /// The workload called `name` (case-insensitive), if any.
    pub fn parse(name: &str) -> Option<Workload> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name().eq_ignore_ascii_case(name))
    }

    /// The arrival process the workload is meant to run with: Gamma bursts (CV 3) over a
    /// diurnal ramp (amplitude 0.5) for W8, Poisson for the others.
    pub fn arrivals(self) -> ArrivalKind {
        match self {
            Workload::W8 => ArrivalKind::GammaDiurnal {
                cv: 3.0,
                amplitude: 0.5,
            },
            _ => ArrivalKind::Poisson,
        }
    }

    /// `n` requests of this workload with its default shape, drawn from `seed`. Multi-turn
    /// workloads generate whole conversations and cut the last one short at `n` requests.
    pub fn requests(self, n: usize, seed: u64, options: &Options) -> Vec<Request> {
        match self {
            Workload::W1 | Workload::W8 => SharedPrompts::default().requests(n, seed, options),
            Workload::W2 => Chat::default().requests(n, seed, options),
            // Tools as plain text: the simulator refuses `tools` (as vLLM does without a tool
            // parser), and text reaches every engine the same way.
            Workload::W3 => Agent {
                style: ToolStyle::Inline,
                ..Agent::default()
            }
            .requests(n, seed, options),
            Workload::W4 => Rag::default().requests(n, seed, options),
            Workload::W5 => FewShot::default().requests(n, seed, options),
            Workload::W6 => Unique::default().requests(n, seed, options),
            Workload::Mix => mix(n, seed, options),
            Workload::Hot => SharedPrompts {
                zipf: Some(1.1),
                ..SharedPrompts::default()
            }
            .requests(n, seed, options),
        }
    }
}

/// W1 and W6 requests, `n / 2` of W1 (rounded down) and the rest W6, in a seeded order.
fn mix(n: usize, seed: u64, options: &Options) -> Vec<Request> {
    let shared = n / 2;
    let mut is_shared: Vec<bool> = (0..n).map(|i| i < shared).collect();
    let mut rng = SplitMix64::new(text::sub_seed(seed, 0x6d69));
    // Fisher–Yates.
    for i in (1..n).rev() {
        is_shared.swap(i, rng.below(i + 1));
    }
    let mut w1 = SharedPrompts::default()
        .requests(shared, text::sub_seed(seed, 1), options)
        .into_iter();
    let mut w6 = Unique::default()
        .requests(n - shared, text::sub_seed(seed, 6), options)
        .into_iter();
    is_shared
        .into_iter()
        .filter_map(|s| if s { w1.next() } else { w6.next() })
        .collect()
}
