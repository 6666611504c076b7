//! Differential tests of [`FastBpe`] against the HF library on the real tokenizer fixtures
//! (every family of shards/fixtures/tokenizers.lock under `target/fixtures/tokenizers/`, skipped
//! with a note when absent unless `INFERRAIL_REQUIRE_FIXTURES` is set, then a failure) and the
//! committed tiny-llama tokenizer.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, MatchKind};
use proptest::prelude::*;
use serde_json::{json, Value};
use tokenizers::Tokenizer;

use super::FastBpe;
use crate::tokenize::{load_with_cache, locked_families, real_fixture, Kind};

/// One tokenizer: the library's, the fast one, and the added-token cut.
struct Fixture {
    name: String,
    dir: PathBuf,
    hf: Tokenizer,
    fast: FastBpe,
    cut: AhoCorasick,
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("read tokenizer.json");
    serde_json::from_str(&text).expect("tokenizer.json is JSON")
}

fn load_fixture(name: &str, dir: &Path) -> Fixture {
    let path = dir.join("tokenizer.json");
    let json = read_json(&path);
    let hf = Tokenizer::from_file(&path).expect("HF loads the fixture");
    let fast = FastBpe::from_tokenizer_json(&json).expect("fixture is in the fast family");
    let mut added: Vec<String> = hf
        .get_added_tokens_decoder()
        .values()
        .map(|t| t.content.clone())
        .collect();
    added.sort();
    let cut = AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(&added)
        .expect("automaton");
    Fixture {
        name: name.to_owned(),
        dir: dir.to_owned(),
        hf,
        fast,
        cut,
    }
}

fn tiny_llama_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tiny-llama")
}

/// Every fixture present (the tiny-llama one always), loaded once per test process.
fn fixtures() -> &'static [Fixture] {
    static ALL: OnceLock<Vec<Fixture>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut all = vec![load_fixture("tiny-llama", &tiny_llama_dir())];
        for name in locked_families().expect("shards/fixtures/tokenizers.lock readable") {
            match real_fixture(&name) {
                Ok(Some(dir)) => all.push(load_fixture(&name, &dir)),
                Ok(None) => println!("note: skipping {name}: tokenizer fixture not fetched"),
                Err(missing) => panic!("{missing}"),
            }
        }
        all
    })
}

fn hf_ids(hf: &Tokenizer, text: &str) -> Vec<u32> {
    hf.encode_fast(text, false)
        .expect("HF encodes")
        .get_ids()
        .to_vec()
}

/// The text between added tokens, as the encoder cuts it.
fn segments<'a>(f: &Fixture, text: &'a str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut at = 0;
    for m in f.cut.find_iter(text) {
        out.push(&text[at..m.start()]);
        at = m.end();
    }
    out.push(&text[at..]);
    out.retain(|s| !s.is_empty());
    out
}

/// Fast and HF ids of every segment of `text` agree, or the first one that does not.
fn check(f: &Fixture, text: &str) -> Result<(), String> {
    for seg in segments(f, text) {
        let fast = f.fast.encode(seg).unwrap_or_default();
        let hf = hf_ids(&f.hf, seg);
        if fast != hf {
            return Err(format!(
                "{}: segment {seg:?}\n fast {fast:?}\n   hf {hf:?}",
                f.name
            ));
        }
    }
    Ok(())
}

fn check_all(text: &str) -> Result<(), String> {
    fixtures().iter().try_for_each(|f| check(f, text))
}

fn fragment() -> impl Strategy<Value = String> {
    let pick = |xs: &'static [&'static str]| prop::sample::select(xs).prop_map(str::to_owned);
    prop_oneof![
        6 => "[a-z]{1,10}",
        3 => "[A-Za-z]{1,3}[A-Z][a-z]{0,6}",
        4 => "[ \t\n\r]{1,6}",
        1 => "[ ]{1,40}",
        3 => "[0-9]{1,9}",
        3 => pick(&["!", ".", ",", "?", "...", "--", "()", "{}", "]", ">", "/", "\\", "@#$%", "&&", "\"", ":", ";", "=>", "*", "_", "|", "~", "`"]),
        3 => pick(&["'s", "'LL", "'t", "'re", "'VE", "'m", "'D", "’s", "'", "''", "n't"]),
        2 => "[\u{4e00}-\u{4e40}]{1,5}",
        2 => pick(&["🚀", "🫠", "👍🏽", "👨‍👩‍👧", "❤️", "🙂"]),
        2 => pick(&["e\u{301}", "a\u{308}", "n\u{303}", "\u{301}", "Å", "A\u{30a}", "\u{1100}\u{1161}", "é", "ñ", "\u{fb01}"]),
        2 => "[а-яА-Я]{1,8}",
        1 => pick(&["\u{a0}", "\u{3000}", "\u{200b}", "\u{feff}", "\u{85}", "\u{2028}"]),
        1 => "\\PC{1,4}",
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        20 => prop::collection::vec(fragment(), 0..24).prop_map(|v| v.concat()),
        1 => (fragment(), fragment()).prop_map(|(a, b)| format!("{a}{}{b}", " ".repeat(2000))),
        1 => (fragment(), fragment()).prop_map(|(a, b)| format!("{a}{}{b}", "a".repeat(5000))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn fast_bpe_matches_hf_on_random_text(t in text()) {
        if let Err(e) = check_all(&t) {
            prop_assert!(false, "{}", e);
        }
    }
}

#[test]
fn fast_bpe_matches_hf_on_hostile_and_edge_cases() {
    let long_mix: String = (0..400)
        .map(|i| ["ab", " ", "é", "的", "1"][i % 5])
        .collect();
    let cases = [
        String::new(),
        " ".into(),
        "\n".into(),
        " ".repeat(2000),
        "a".repeat(5000),
        "\n".repeat(300) + "x",
        "e\u{301}te\u{301} caf\u{65}\u{301}".into(),
        "HELLO'LL it's WE'VE don't I'M".into(),
        "   leading and trailing   \t\n".into(),
        "1234567890 12 3.14159 1,000,000".into(),
        "Привет, мир! 你好，世界！ こんにちは 🚀🚀🚀".into(),
        "CamelCaseWord HTTPServer iPhone XMLHttpRequest".into(),
        "ab".repeat(3000),
        "🫠".repeat(500),
        long_mix,
    ];
    for case in &cases {
        if let Err(e) = check_all(case) {
            panic!("{e}");
        }
    }
}

/// Every golden request rendered by its model's template: fast and HF agree on every
/// segment, and the model's encoder (which uses the fast path) equals HF on the whole text.
#[test]
fn fast_bpe_matches_hf_on_rendered_goldens() {
    let goldens = Path::new(env!("CARGO_MANIFEST_DIR")).join("goldens");
    let kwargs = serde_json::Map::new();
    for f in fixtures().iter().filter(|f| f.name != "tiny-llama") {
        let path = goldens.join(format!("{}.jsonl", f.name));
        let Ok(lines) = std::fs::read_to_string(&path) else {
            println!("note: no goldens at {}", path.display());
            continue;
        };
        let model = load_with_cache(f.dir.to_str().expect("utf-8 path"), None, 0).expect("load");
        match &model.kind {
            Kind::Hf(enc) => assert!(enc.uses_fast_bpe(), "{} not on the fast path", f.name),
            Kind::Builtin => panic!("{} loaded as builtin", f.name),
        }
        let mut rendered = 0;
        for line in lines.lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).expect("golden line is JSON");
            let body = v.get("body").map(Value::to_string).unwrap_or_default();
            let Ok((text, _)) = model.render_chat(body.as_bytes(), &kwargs) else {
                continue;
            };
            rendered += 1;
            if let Err(e) = check(f, &text) {
                panic!("{}: {e}", v["case"]);
            }
            assert_eq!(
                model.encode(&text, false),
                hf_ids(&f.hf, &text),
                "{}",
                v["case"]
            );
        }
        assert!(rendered > 0, "{}: no golden rendered", f.name);
        println!("{}: {rendered} rendered goldens agree", f.name);
    }
}

/// The differential check can fail: an encoder with most merges dropped is caught.
#[test]
fn differential_check_catches_a_broken_encoder() {
    let mut json = read_json(&tiny_llama_dir().join("tokenizer.json"));
    let merges = json["model"]["merges"].as_array_mut().expect("merges list");
    merges.truncate(merges.len() / 10);
    let broken = FastBpe::from_tokenizer_json(&json).expect("still in the family");
    let mut f = load_fixture("tiny-llama", &tiny_llama_dir());
    f.fast = broken;
    assert!(check(&f, "hello world, the router routes requests").is_err());
}

fn byte_level_bpe(pre_tokenizer: Value, model_extra: Value) -> Value {
    // A vocab with every byte-level character, so only the tested field decides.
    let chars = super::byte_chars();
    let vocab: serde_json::Map<String, Value> = chars
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), json!(i)))
        .collect();
    let mut model = json!({"type": "BPE", "dropout": null, "unk_token": null,
        "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
        "byte_fallback": false, "vocab": vocab, "merges": []});
    if let (Some(m), Some(extra)) = (model.as_object_mut(), model_extra.as_object()) {
        m.extend(extra.clone());
    }
    json!({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": pre_tokenizer, "post_processor": null,
        "decoder": null, "model": model})
}

#[test]
fn from_tokenizer_json_accepts_only_the_supported_family() {
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false,
        "trim_offsets": true, "use_regex": true});
    assert!(FastBpe::from_tokenizer_json(&byte_level_bpe(byte_level.clone(), json!({}))).is_some());
    let tiny = read_json(&tiny_llama_dir().join("tokenizer.json"));
    assert!(FastBpe::from_tokenizer_json(&tiny).is_some());

    let metaspace = json!({"type": "Metaspace", "replacement": "▁",
        "prepend_scheme": "first", "split": false});
    let prefix_space = json!({"type": "ByteLevel", "add_prefix_space": true,
        "trim_offsets": true, "use_regex": true});
    let merged_split = json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "MergedWithPrevious",
         "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]});
    let unsupported = [
        byte_level_bpe(metaspace, json!({})),
        byte_level_bpe(prefix_space, json!({})),
        byte_level_bpe(merged_split, json!({})),
        byte_level_bpe(byte_level.clone(), json!({"dropout": 0.1})),
        byte_level_bpe(byte_level.clone(), json!({"byte_fallback": true})),
        byte_level_bpe(
            byte_level.clone(),
            json!({"continuing_subword_prefix": "##"}),
        ),
        byte_level_bpe(byte_level.clone(), json!({"vocab": {"a": 0, "b": 1}})),
        byte_level_bpe(byte_level.clone(), json!({"type": "WordPiece"})),
    ];
    for (i, j) in unsupported.iter().enumerate() {
        assert!(
            FastBpe::from_tokenizer_json(j).is_none(),
            "case {i} accepted"
        );
    }
    let mut lowercase = byte_level_bpe(byte_level.clone(), json!({}));
    lowercase["normalizer"] = json!({"type": "Lowercase"});
    assert!(FastBpe::from_tokenizer_json(&lowercase).is_none());
    let mut truncated = byte_level_bpe(byte_level, json!({}));
    truncated["truncation"] = json!({"max_length": 8, "strategy": "LongestFirst",
        "stride": 0, "direction": "Right"});
    assert!(FastBpe::from_tokenizer_json(&truncated).is_none());
}
