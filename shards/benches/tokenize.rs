//! Benchmarks of tokenization (`cargo bench -p inferrail-shards --bench tokenize`).
//!
//! An 8,000-token chat (a long shared system prompt and a short question) with a real tokenizer
//! from the fixtures (`make fixtures`; Qwen3, else the builtin tokenizer with a note):
//! - cold: the segment cache off, every request encoded from scratch;
//! - system prompt cached: the cache warmed by one earlier request with the same system prompt,
//!   each timed request asking a new question;
//! - tokens per second per thread, from the cold median.
//!
//! Plain `Instant` timing over many repetitions; medians and p99. Compare within one run.

use inferrail_shards::tokenize::{fixtures_dir, load_with_cache, Endpoint, ModelTokenizer};
use std::time::{Duration, Instant};

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}

fn body(system: &str, question: &str) -> Vec<u8> {
    serde_json::json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
        ],
    })
    .to_string()
    .into_bytes()
}

fn load(cache_tokens: u64) -> (ModelTokenizer, String) {
    let dir = fixtures_dir().join("tokenizers").join("qwen3");
    if dir.join("tokenizer.json").is_file() {
        if let Ok(t) = load_with_cache(&dir.to_string_lossy(), None, cache_tokens) {
            return (t, "qwen3".into());
        }
    }
    println!(
        "note: no Qwen3 fixture at {} (run `make fixtures`); using builtin:sim",
        dir.display()
    );
    match load_with_cache("builtin:sim", None, cache_tokens) {
        Ok(t) => (t, "builtin:sim".into()),
        Err(e) => panic!("builtin tokenizer: {e}"),
    }
}

fn main() {
    let kwargs = serde_json::Map::new();
    let (cold_tok, name) = load(0);
    // A system prompt of varied text, grown until the chat is about 8,000 tokens.
    let words = [
        "router",
        "cache",
        "prefill",
        "token",
        "latency",
        "replica",
        "engine",
        "的",
        "数据",
        "🚀",
        "naïve",
        "fiancée",
        "queue",
        "shard",
        "índice",
        "блок",
        "sequence",
        "attention",
    ];
    let mut system = String::new();
    let mut i = 0usize;
    loop {
        system.push_str(words[i % words.len()]);
        system.push(if i % 13 == 12 { '\n' } else { ' ' });
        i += 1;
        if i.is_multiple_of(200) {
            let n = cold_tok
                .prompt_ids(Endpoint::Chat, &body(&system, "What is it?"), &kwargs)
                .map_or(0, |ids| ids.len());
            if n >= 7950 {
                break;
            }
        }
    }
    let question = |k: usize| {
        format!(
            "Question {k}: how does the {} behave under load?",
            words[k % words.len()]
        )
    };
    let tokens = cold_tok
        .prompt_ids(Endpoint::Chat, &body(&system, &question(0)), &kwargs)
        .map_or(0, |ids| ids.len());

    let reps = 60;
    let mut cold: Vec<Duration> = (0..reps)
        .map(|k| {
            let b = body(&system, &question(k));
            let t = Instant::now();
            let ids = cold_tok.prompt_ids(Endpoint::Chat, &b, &kwargs);
            let d = t.elapsed();
            assert!(ids.is_ok());
            d
        })
        .collect();

    let (warm_tok, _) = load(1_000_000);
    let _ = warm_tok.prompt_ids(Endpoint::Chat, &body(&system, "warm-up question"), &kwargs);
    let mut warm: Vec<Duration> = (0..reps * 10)
        .map(|k| {
            let b = body(&system, &question(k + 1000));
            let t = Instant::now();
            let ids = warm_tok.prompt_ids(Endpoint::Chat, &b, &kwargs);
            let d = t.elapsed();
            assert!(ids.is_ok());
            d
        })
        .collect();
    // Same ids either way.
    assert_eq!(
        cold_tok
            .prompt_ids(Endpoint::Chat, &body(&system, "check"), &kwargs)
            .ok(),
        warm_tok
            .prompt_ids(Endpoint::Chat, &body(&system, "check"), &kwargs)
            .ok()
    );

    // Where the cached case spends its time: rendering the chat template (parse, vLLM's message
    // preparation, the template) before any encoding.
    let mut render: Vec<Duration> = (0..reps * 5)
        .map(|k| {
            let b = body(&system, &question(k + 5000));
            let t = Instant::now();
            let r = warm_tok.render_chat(&b, &kwargs);
            let d = t.elapsed();
            assert!(r.is_ok());
            d
        })
        .collect();
    let render_p50 = percentile(&mut render, 0.5);

    let cold_p50 = percentile(&mut cold, 0.5);
    let cold_p99 = percentile(&mut cold, 0.99);
    let warm_p50 = percentile(&mut warm, 0.5);
    let warm_p99 = percentile(&mut warm, 0.99);
    println!("tokenizer {name}: chat of {tokens} tokens");
    println!("  cold (no cache):          p50 {cold_p50:?}  p99 {cold_p99:?}");
    println!("  system prompt cached:     p50 {warm_p50:?}  p99 {warm_p99:?}");
    println!("  of which template render: p50 {render_p50:?}");
    println!(
        "  cold throughput:          {:.2} M tokens/s per thread",
        tokens as f64 / cold_p50.as_secs_f64() / 1e6
    );
    let stats = warm_tok.cache_stats();
    println!(
        "  segment cache: {} hits, {} misses, {} tokens held",
        stats.hits, stats.misses, stats.tokens
    );
}
