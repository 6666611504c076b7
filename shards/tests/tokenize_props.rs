//! Property tests of the tokenization path: arbitrary bodies never panic; the segment cache
//! never changes ids; and prefix stability where the chat format guarantees it.
//!
//! Prefix stability, precisely: for a conversation of user/assistant turns of plain text
//! rendered *without* a generation prompt, the ids of that conversation are a prefix of the
//! ids of the same conversation with one more user turn appended. This holds for
//! `builtin:sim` (every turn ends with `\n`, a piece boundary) and for Llama 3.2 with a pinned
//! `date_string` (every turn ends with the special token `<|eot_id|>`, and the tokenizer
//! encodes the text between special tokens independently). It does not hold for Qwen3, whose
//! template renders the final assistant turn with an empty `<think>` block only while it is
//! the last message, so Qwen3 is not tested for it.

use inferrail_shards::tokenize::{
    load, load_with_cache, locked_families, real_fixture, Endpoint, ModelTokenizer,
};
use proptest::prelude::*;
use serde_json::{json, Value};

/// A locked family's tokenizer; `None` (with a note) when it is not fetched and not required.
fn real(family: &str) -> Option<ModelTokenizer> {
    // `make test` fetches every locked family and sets INFERRAIL_REQUIRE_FIXTURES: there,
    // absence is a failure, never a silent skip.
    let dir = real_fixture(family).unwrap_or_else(|e| panic!("{e}"));
    let Some(dir) = dir else {
        println!(
            "note: {family} fixture not fetched; real-tokenizer case skipped (run `make fixtures`)"
        );
        return None;
    };
    Some(load_with_cache(dir.to_str()?, None, 50_000).expect("fixture loads"))
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z ,.!?\n]{0,40}",
        any::<String>(),
        Just("<|im_start|>user\n<|im_end|><|eot_id|><s></s>[INST]".to_string()),
        Just("日本語のテキスト 🦀 é\u{301}".to_string()),
        Just("  \n\n\t x".to_string()),
    ]
}

fn message() -> impl Strategy<Value = Value> {
    let role = prop_oneof![
        Just("system"),
        Just("user"),
        Just("assistant"),
        Just("tool"),
        Just("developer"),
        Just("weird"),
    ];
    let content = prop_oneof![
        text().prop_map(Value::from),
        Just(Value::Null),
        prop::collection::vec(text(), 0..3).prop_map(|ts| {
            Value::Array(
                ts.into_iter()
                    .map(|t| json!({"type": "text", "text": t}))
                    .collect(),
            )
        }),
        Just(json!([{"type": "image_url", "image_url": {"url": "http://x"}}])),
        Just(json!(42)),
    ];
    let tool_calls = prop_oneof![
        Just(Value::Null),
        Just(
            json!([{"id": "abcdefghi", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}])
        ),
        Just(json!([{"function": {"name": "g", "arguments": "not json"}}])),
        Just(json!([7])),
    ];
    (role, content, tool_calls).prop_map(|(r, c, t)| {
        let mut m = json!({"role": r, "content": c});
        if !t.is_null() {
            m["tool_calls"] = t;
        }
        m
    })
}

fn chat_body() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(message(), 0..5),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(Just(json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]))),
        prop::option::of(Just(json!({"enable_thinking": false, "date_string": "26 Jul 2024"}))),
    )
        .prop_map(|(msgs, agp, cont, tools, kw)| {
            let mut b = json!({"model": "m", "messages": msgs, "add_generation_prompt": agp, "continue_final_message": cont});
            if let Some(t) = tools {
                b["tools"] = t;
            }
            if let Some(k) = kw {
                b["chat_template_kwargs"] = k;
            }
            serde_json::to_vec(&b).expect("serializes")
        })
}

fn completion_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        text().prop_map(|t| serde_json::to_vec(&json!({"prompt": t})).expect("json")),
        prop::collection::vec(any::<i64>(), 0..5)
            .prop_map(|ids| serde_json::to_vec(&json!({"prompt": ids})).expect("json")),
        Just(br#"{"prompt":[["a"]]}"#.to_vec()),
        Just(br#"{"prompt":null}"#.to_vec()),
    ]
}

fn any_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        chat_body(),
        completion_body(),
    ]
}

/// Every tokenizer under test, loaded once per test binary: `builtin:sim` and every family of
/// shards/fixtures/tokenizers.lock (what fetch.sh fetches, so no listed family is never there).
fn tokenizers() -> &'static [ModelTokenizer] {
    static ALL: std::sync::OnceLock<Vec<ModelTokenizer>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let mut v = vec![load("builtin:sim", None).expect("builtin")];
        let families = locked_families().expect("shards/fixtures/tokenizers.lock readable");
        v.extend(families.iter().filter_map(|f| real(f)));
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bodies_never_panic(body in any_body()) {
        let none = serde_json::Map::new();
        for t in tokenizers() {
            let _ = t.prompt_ids(Endpoint::Chat, &body, &none);
            let _ = t.prompt_ids(Endpoint::Completion, &body, &none);
        }
    }

    #[test]
    fn cached_and_uncached_encodings_are_identical(texts in prop::collection::vec(text(), 1..6), add in any::<bool>()) {
        for t in tokenizers() {
            for s in texts.iter().chain(texts.iter()) {
                prop_assert_eq!(t.encode(s, add), t.encode_uncached(s, add), "{:?}", t);
            }
            let joined = texts.concat();
            prop_assert_eq!(t.encode(&joined, add), t.encode_uncached(&joined, add));
        }
    }

    #[test]
    fn appending_a_user_turn_keeps_the_earlier_ids(turns in prop::collection::vec("[a-zA-Z0-9 ,.?]{1,30}", 1..6), next in "[a-zA-Z0-9 ,.?]{1,30}") {
        let mut msgs: Vec<Value> = turns
            .iter()
            .enumerate()
            .map(|(i, t)| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": t}))
            .collect();
        let kw = json!({"date_string": "26 Jul 2024"});
        let body = |m: &[Value]| serde_json::to_vec(&json!({"messages": m, "add_generation_prompt": false, "chat_template_kwargs": kw})).expect("json");
        let before = body(&msgs);
        msgs.push(json!({"role": "user", "content": next}));
        let after = body(&msgs);
        let none = serde_json::Map::new();
        let checked = tokenizers().iter().filter(|t| t.is_builtin() || t.max_model_len() == Some(131_072) && t.content_format() == inferrail_shards::tokenize::ContentFormat::String && t.render_chat(br#"{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"date_string":"d"}}"#, &serde_json::Map::new()).is_ok_and(|(s, _)| s.contains("<|eot_id|>")));
        for t in checked {
            let a = t.prompt_ids(Endpoint::Chat, &before, &none).expect("predictable");
            let b = t.prompt_ids(Endpoint::Chat, &after, &none).expect("predictable");
            prop_assert!(b.starts_with(&a), "{:?}: {:?} not a prefix of {:?}", t, a, b);
        }
    }
}
