//! Request bodies through the tokenizer path (JSON parse, vLLM's message preparation, the
//! builtin chat format, encoding): never panics, chat or completions.
#![no_main]
use inferrail_shards::tokenize::{Endpoint, ModelTokenizer};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    static TOK: OnceLock<ModelTokenizer> = OnceLock::new();
    let tok = TOK.get_or_init(|| ModelTokenizer::builtin(100_000));
    let kwargs = serde_json::Map::new();
    let _ = tok.prompt_ids(Endpoint::Chat, data, &kwargs);
    let _ = tok.prompt_ids(Endpoint::Completion, data, &kwargs);
});
