//! Tokenization and the approximate KV index (nothing here is used yet).
//!
//! This crate will own chat templates, tokenizers (including the simulator's builtin one),
//! block hashing, the KV index shards and the tokenizer pool, each running on threads of its own
//! behind bounded queues. It must never block a data core: a request that would wait too long for
//! a tokenization is routed without a cache prediction instead.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]
