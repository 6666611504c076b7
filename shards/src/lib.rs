//! Tokenization, block hashing and (later) the approximate KV index.
//!
//! This crate owns vLLM-exact block hashing and the simulator's builtin tokenizer; it will also
//! own chat templates, real tokenizers, the KV index shards and the tokenizer pool, each running
//! on threads of its own behind bounded queues. It must never block a data core: a request that
//! would wait too long for a tokenization is routed without a cache prediction instead.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

pub mod block_hash;
pub mod builtin;
pub mod index;
pub mod prefix_hash;
pub mod tokenize;
