//! Golden parity with a real vLLM 0.32: every request in `shards/goldens/*.jsonl` must get the
//! very prompt ids vLLM computed, and every prompt in `shared/fixtures/vllm/prompts.json`
//! (the tiny model whose tokenizer is committed at `shards/fixtures/tiny-llama/`) too.
//! Tokenizer fixtures come from `${INFERRAIL_FIXTURES:-<repo>/target/fixtures}/tokenizers/`;
//! a family whose fixture is absent fails the test when `INFERRAIL_REQUIRE_FIXTURES` is set (as
//! `make test` does after fetching them) and is skipped with a note otherwise. Every golden file
//! names a family of shards/fixtures/tokenizers.lock, so none can be skipped because nothing
//! ever fetches its tokenizer.

use std::path::{Path, PathBuf};

use inferrail_shards::tokenize::{
    load, locked_families, real_fixture, Endpoint, ModelTokenizer, J,
};
use serde_json::Value;

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn endpoint(path: &str) -> Option<Endpoint> {
    match path {
        "/v1/chat/completions" => Some(Endpoint::Chat),
        "/v1/completions" => Some(Endpoint::Completion),
        _ => None,
    }
}

struct Outcome {
    checked: usize,
    mismatches: Vec<String>,
    refused_but_predicted: usize,
}

/// Checks golden lines. Bodies are re-serialized from an order-preserving parse (`raw`, one
/// per line), because object key order reaches the template (`tojson`).
fn check_lines(
    tok: &ModelTokenizer,
    family: &str,
    lines: &[Value],
    raw: &[Vec<u8>],
    out: &mut Outcome,
) {
    let none = serde_json::Map::new();
    for (i, line) in lines.iter().enumerate() {
        let case = line
            .get("case")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{family}#{i}"));
        let Some(ep) = line
            .get("endpoint")
            .and_then(Value::as_str)
            .and_then(endpoint)
        else {
            out.mismatches.push(format!("{case}: unknown endpoint"));
            continue;
        };
        let got = tok.prompt_ids(ep, &raw[i], &none);
        if line.get("error").is_some() {
            if got.is_ok() {
                out.refused_but_predicted += 1;
            }
            continue;
        }
        let want: Vec<u32> = line["prompt_token_ids"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_u64)
                    .map(|v| v as u32)
                    .collect()
            })
            .unwrap_or_default();
        out.checked += 1;
        match got {
            Ok(ids) if ids == want => {}
            Ok(ids) => {
                let at = ids
                    .iter()
                    .zip(&want)
                    .position(|(a, b)| a != b)
                    .unwrap_or(ids.len().min(want.len()));
                out.mismatches.push(format!(
                    "{case}: first difference at {at}: got {:?} want {:?} (lens {} / {})",
                    &ids[at..ids.len().min(at + 8)],
                    &want[at..want.len().min(at + 8)],
                    ids.len(),
                    want.len()
                ));
            }
            Err(e) => out
                .mismatches
                .push(format!("{case}: unpredictable ({e}) but vLLM answered")),
        }
    }
}

/// The lines of a golden file, and each line's `body` as JSON bytes in document key order.
fn read_jsonl(path: &Path) -> (Vec<Value>, Vec<Vec<u8>>) {
    let text = std::fs::read_to_string(path).expect("golden file readable");
    let mut lines = Vec::new();
    let mut raw = Vec::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        lines.push(serde_json::from_str(l).expect("golden line is JSON"));
        let j = J::parse(l.as_bytes()).expect("golden line is JSON");
        raw.push(
            j.get("body")
                .map(J::to_json)
                .unwrap_or_default()
                .into_bytes(),
        );
    }
    (lines, raw)
}

#[test]
fn every_golden_matches_vllm() {
    let dir = manifest().join("goldens");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "jsonl"));
    files.sort();
    assert!(
        !files.is_empty(),
        "no golden files in {} (they are committed)",
        dir.display()
    );
    let locked = locked_families().expect("shards/fixtures/tokenizers.lock readable");
    let mut out = Outcome {
        checked: 0,
        mismatches: Vec::new(),
        refused_but_predicted: 0,
    };
    for file in files {
        let (lines, raw) = read_jsonl(&file);
        let family = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        assert!(
            locked.contains(&family),
            "{} has no tokenizer in shards/fixtures/tokenizers.lock (locked: {locked:?}), so \
             fetch.sh never fetches it and it could never be checked",
            file.display()
        );
        let tok_dir = match real_fixture(&family) {
            Ok(Some(dir)) => dir,
            Ok(None) => {
                println!(
                    "note: skipping {family}: tokenizer fixture not fetched (run `make fixtures`)"
                );
                continue;
            }
            Err(missing) => panic!("{missing}"),
        };
        let tok = load(tok_dir.to_str().expect("utf-8 path"), None).expect("fixture loads");
        let (checked, bad) = (out.checked, out.mismatches.len());
        check_lines(&tok, &family, &lines, &raw, &mut out);
        println!(
            "{family}: {} checked, {} mismatched",
            out.checked - checked,
            out.mismatches.len() - bad
        );
    }
    println!(
        "goldens: {} checked, {} mismatched, {} refused by vLLM but predicted here",
        out.checked,
        out.mismatches.len(),
        out.refused_but_predicted
    );
    assert!(
        out.mismatches.is_empty(),
        "{} of {} goldens differ:\n{}",
        out.mismatches.len(),
        out.checked,
        out.mismatches
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn every_tiny_model_prompt_matches_vllm() {
    let tiny = manifest().join("fixtures").join("tiny-llama");
    // The request bodies and ids of shared/fixtures/vllm/prompts.json, copied into the repo.
    let prompts = tiny.join("prompts.json");
    // Both are committed: their absence is a broken checkout, never a skip.
    assert!(
        tiny.join("tokenizer.json").is_file() && prompts.is_file(),
        "tiny-llama tokenizer at {} or {} missing",
        tiny.display(),
        prompts.display()
    );
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&prompts).expect("readable")).expect("JSON");
    let tok = load(tiny.to_str().expect("utf-8 path"), None).expect("tiny tokenizer loads");
    let requests = doc["requests"].as_array().expect("requests");
    let raw: Vec<Vec<u8>> = requests
        .iter()
        .map(|r| {
            r["request_body_exact"]
                .as_str()
                .unwrap_or("")
                .as_bytes()
                .to_vec()
        })
        .collect();
    let lines: Vec<Value> = requests
        .iter()
        .map(|r| {
            let ep = if r["kind"] == "chat" {
                "/v1/chat/completions"
            } else {
                "/v1/completions"
            };
            serde_json::json!({
                "case": r.get("tag").cloned().unwrap_or(Value::Null),
                "endpoint": ep,
                "prompt_token_ids": r["prompt_token_ids"],
            })
        })
        .collect();
    let mut out = Outcome {
        checked: 0,
        mismatches: Vec::new(),
        refused_but_predicted: 0,
    };
    check_lines(&tok, "tiny-llama", &lines, &raw, &mut out);
    println!("prompts.json: {} checked", out.checked);
    assert!(out.checked > 0);
    assert!(out.mismatches.is_empty(), "{}", out.mismatches.join("\n"));
}
