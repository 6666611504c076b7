//! The public API over the builtin tokenizer (always available) and a tiny in-memory HF
//! tokenizer.

use super::*;
use crate::builtin::{BuiltinTokenizer, BOS_ID};

fn none() -> serde_json::Map<String, Value> {
    serde_json::Map::new()
}

#[test]
fn builtin_chat_matches_the_simulator_format() {
    let t = load("builtin:sim", None).expect("builtin");
    let body = br#"{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":null}]}"#;
    let ids = t.prompt_ids(Endpoint::Chat, body, &none()).expect("ids");
    let text = "system: Be brief.\nuser: a\nb\nassistant: \nassistant: ";
    assert_eq!(ids, BuiltinTokenizer::new().encode_with_special(text, true));
    let cont = br#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure"}],"add_generation_prompt":false,"continue_final_message":true}"#;
    let ids = t.prompt_ids(Endpoint::Chat, cont, &none()).expect("ids");
    assert_eq!(
        ids,
        BuiltinTokenizer::new().encode_with_special("user: hi\nassistant: Sure", true)
    );
}

#[test]
fn completions_rules() {
    let t = load("builtin:sim", None).expect("builtin");
    let tok = BuiltinTokenizer::new();
    let p = |b: &str| t.prompt_ids(Endpoint::Completion, b.as_bytes(), &none());
    assert_eq!(
        p(r#"{"prompt":"hello world"}"#),
        Ok(tok.encode_with_special("hello world", true))
    );
    assert_eq!(
        p(r#"{"prompt":"hello","add_special_tokens":false}"#),
        Ok(tok.encode("hello"))
    );
    assert_eq!(p(r#"{"prompt":[5,6,7]}"#), Ok(vec![5, 6, 7]));
    assert_eq!(p(r#"{"prompt":[[5,6]]}"#), Ok(vec![5, 6]));
    assert_eq!(
        p(r#"{"prompt":["x"]}"#),
        Ok(tok.encode_with_special("x", true))
    );
    assert_eq!(p(r#"{"prompt":"x"}"#).map(|ids| ids[0]), Ok(BOS_ID));
    assert_eq!(
        p(r#"{"prompt":["a","b"]}"#),
        Err(Unpredictable::BatchPrompt)
    );
    assert_eq!(
        p(r#"{"prompt":[[1],[2]]}"#),
        Err(Unpredictable::BatchPrompt)
    );
    assert_eq!(
        p(r#"{"prompt":"a","suffix":"b"}"#).map_err(|e| e.label()),
        Err("unsupported")
    );
    assert_eq!(
        p(r#"{"prompt":[-1]}"#).map_err(|e| e.label()),
        Err("invalid_request")
    );
    assert_eq!(p("{"), Err(Unpredictable::InvalidJson));
    assert_eq!(p("3"), Err(Unpredictable::NotAnObject));
}

#[test]
fn builtin_cache_hits_on_repeated_turns_and_ids_do_not_change() {
    let t = load_with_cache("builtin:sim", None, 10_000).expect("builtin");
    let body = br#"{"messages":[{"role":"system","content":"You are a helpful assistant with a long system prompt."},{"role":"user","content":"one"}]}"#;
    let a = t.prompt_ids(Endpoint::Chat, body, &none()).expect("ids");
    let misses = t.cache_stats().misses;
    let b = t.prompt_ids(Endpoint::Chat, body, &none()).expect("ids");
    assert_eq!(a, b);
    let st = t.cache_stats();
    assert_eq!(st.misses, misses, "second time all lines hit");
    assert!(st.hits >= 2);
}

#[test]
fn load_errors_are_typed() {
    let missing = std::env::temp_dir().join("inferrail-no-such-tokenizer-dir");
    match load(missing.to_str().expect("utf8"), None) {
        Err(LoadError::MissingTokenizer(p)) => assert_eq!(p, missing),
        other => panic!("{other:?}"),
    }
    let cache = std::env::temp_dir().join("inferrail-empty-hub");
    assert!(matches!(
        resolve_in_cache(&cache, "org/none", None),
        Err(LoadError::NotInHubCache { .. })
    ));
}

/// A word-level tokenizer with two added tokens and a BOS template, written to a temp dir.
fn tiny_dir(config: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "inferrail-tiny-tok-{}-{}",
        std::process::id(),
        config.len()
    ));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let tok = r#"{
      "version": "1.0",
      "truncation": null, "padding": null,
      "added_tokens": [
        {"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
        {"id": 1, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
      ],
      "normalizer": null,
      "pre_tokenizer": {"type": "Whitespace"},
      "post_processor": null,
      "decoder": null,
      "model": {"type": "WordLevel", "vocab": {"<s>": 0, "<|end|>": 1, "[UNK]": 2, "hello": 3, "world": 4, "user": 5, ":": 6, "assistant": 7}, "unk_token": "[UNK]"}
    }"#;
    std::fs::write(dir.join("tokenizer.json"), tok).expect("write");
    std::fs::write(dir.join("tokenizer_config.json"), config).expect("write");
    dir
}

#[test]
fn hf_tokenizer_with_template_and_bos_rules() {
    let cfg = r#"{"bos_token": {"content": "<s>", "__type": "AddedToken"}, "eos_token": "<|end|>", "add_bos_token": true,
      "model_max_length": 4096,
      "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"}"#;
    let dir = tiny_dir(cfg);
    let t = load(dir.to_str().expect("utf8"), None).expect("load");
    assert_eq!(t.max_model_len(), Some(4096));
    // add_bos_token: completions get BOS; chat does not get a second one.
    assert_eq!(t.encode("hello world", true), vec![0, 3, 4]);
    assert_eq!(t.encode("hello<|end|>world", false), vec![3, 1, 4]);
    let ids = t
        .prompt_ids(
            Endpoint::Chat,
            br#"{"messages":[{"role":"user","content":"hello"}]}"#,
            &none(),
        )
        .expect("ids");
    assert_eq!(ids, vec![0, 5, 6, 3, 1, 7, 6]);
    // Inline (this thread's own cache, cold then warm) gives the same ids.
    for _ in 0..2 {
        let inline = t.prompt_ids_inline(
            Endpoint::Chat,
            br#"{"messages":[{"role":"user","content":"hello"}]}"#,
            &none(),
        );
        assert_eq!(inline.expect("ids"), ids);
    }
    let ids = t
        .prompt_ids(
            Endpoint::Chat,
            br#"{"messages":[{"role":"user","content":"hello"}],"add_special_tokens":true}"#,
            &none(),
        )
        .expect("ids");
    assert_eq!(ids, vec![0, 0, 5, 6, 3, 1, 7, 6]);
    // A template given in config overrides the tokenizer's.
    let t2 = load(
        dir.to_str().expect("utf8"),
        Some("{% for m in messages %}{{ m.content }}{% endfor %}"),
    )
    .expect("load");
    let ids = t2
        .prompt_ids(
            Endpoint::Chat,
            br#"{"messages":[{"role":"user","content":"world"}]}"#,
            &none(),
        )
        .expect("ids");
    assert_eq!(ids, vec![4]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_template_means_no_chat_prediction() {
    let dir = tiny_dir(r#"{"add_bos_token": false}"#);
    let t = load(dir.to_str().expect("utf8"), None).expect("load");
    assert!(!t.has_chat_template());
    assert_eq!(t.encode("hello", true), vec![3]);
    assert_eq!(
        t.prompt_ids(
            Endpoint::Chat,
            br#"{"messages":[{"role":"user","content":"x"}]}"#,
            &none()
        ),
        Err(Unpredictable::NoChatTemplate)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A data core tokenizing inline needs none of the shared cache's locks: with every shard mutex
/// held by another thread, inline tokenization (cold and then warm in its own cache) completes
/// with the same ids as the shared path. The wait is bounded, so a lock taken would fail the
/// test instead of hanging it.
#[test]
fn inline_tokenization_takes_no_shared_lock() {
    use std::sync::mpsc;
    use std::time::Duration;
    let t = std::sync::Arc::new(load("builtin:sim", None).expect("builtin"));
    let chat = br#"{"messages":[{"role":"system","content":"Be brief.\nAlways."},{"role":"user","content":"hi"}]}"#;
    let completion = br#"{"prompt":"one\ntwo\nthree"}"#;
    let want = (
        t.prompt_ids(Endpoint::Chat, chat, &none()).expect("ids"),
        t.prompt_ids(Endpoint::Completion, completion, &none())
            .expect("ids"),
    );
    let (locked_tx, locked_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let holder = {
        let t = t.clone();
        std::thread::spawn(move || {
            let guards = t.cache.lock_all();
            locked_tx.send(()).expect("test waits");
            let _ = release_rx.recv();
            drop(guards);
        })
    };
    locked_rx.recv().expect("holder locked every shard");
    let (done_tx, done_rx) = mpsc::channel();
    {
        let t = t.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            for _ in 0..2 {
                got.push((
                    t.prompt_ids_inline(Endpoint::Chat, chat, &none()),
                    t.prompt_ids_inline(Endpoint::Completion, completion, &none()),
                ));
            }
            let _ = done_tx.send(got);
        });
    }
    let got = done_rx.recv_timeout(Duration::from_secs(60));
    release_tx.send(()).expect("holder waits");
    holder.join().expect("holder");
    let got = got.expect("inline tokenization waited on a shared-cache lock");
    for (c, p) in got {
        assert_eq!(c.expect("chat ids"), want.0);
        assert_eq!(p.expect("completion ids"), want.1);
    }
}

#[test]
fn a_chat_template_for_the_builtin_tokenizer_is_refused_not_ignored() {
    let Err(err) = load("builtin:sim", Some("{{ messages }}")) else {
        panic!("a chat template for builtin:sim must be refused");
    };
    assert!(matches!(err, LoadError::BuiltinTemplate), "{err}");
    assert!(err.to_string().contains("fixed chat format"), "{err}");
}
