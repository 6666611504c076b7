//! Tokenization, block hashing and the approximate KV index.
//!
//! This crate owns tokenization exactly as vLLM does it (tokenizers, chat templates, vLLM's
//! message preparation, a segment cache), the simulator's builtin tokenizer, vLLM-exact sha256
//! block hashes (`block_hash`), the router's own XXH3-128 block hash chains (`prefix_hash`), the
//! approximate KV index shards (`index`) and the tokenizer pool (`pool`), each running on threads
//! of its own behind bounded queues. It must never block a data core: a request that
//! would wait too long for a tokenization is routed without a cache prediction instead.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(missing_docs)]

pub mod block_hash;
pub mod builtin;
pub mod fx;
pub mod index;
pub mod pool;
pub mod prefix_hash;
pub mod pyfmt;
pub mod tokenize;
