//! Cache predictions against what the engines really cached: the gateway in front of three
//! simulators under eviction pressure predicts, for every request, exactly the cached tokens the
//! simulator reports in `usage.prompt_tokens_details.cached_tokens`.

use inferrail_sim::server::{SimOptions, SimServer};
use inferrail_tests::*;
use serde_json::{json, Value};

/// Tokens per KV block on the simulators and in the gateway's config.
const BLOCK: usize = 16;
/// Each simulator's KV cache: 48 blocks of 16 tokens (one is vLLM's null block), far less than
/// the prompts below need together.
const KV_BLOCKS: usize = 48;

/// Three simulators behind a gateway; `inline_max_bytes` as in `tokenizer.inline_max_bytes`.
fn fleet(inline_max_bytes: usize) -> (Vec<SimServer>, TestGateway) {
    let sims: Vec<SimServer> = (0..3)
        .map(|seed| {
            SimServer::start(SimOptions {
                enable_prompt_tokens_details: true,
                zero_latency: true,
                num_gpu_blocks_override: Some(KV_BLOCKS),
                max_model_len: 736,
                block_size: BLOCK,
                seed,
                ..SimOptions::new(MODEL)
            })
            .expect("simulator starts")
        })
        .collect();
    let mut yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 2\n\
         models:\n  - name: {MODEL}\n    policy: p2c\n    tokenizer: builtin:sim\n    block_size: {BLOCK}\n\
         routing:\n  seed: 11\ntokenizer:\n  max_wait: 2s\n  inline_max_bytes: {inline_max_bytes}\nreplicas:\n"
    );
    for (i, s) in sims.iter().enumerate() {
        yaml.push_str(&format!(
            "  - id: sim-{i}\n    url: {}\n    models: [{MODEL}]\n    kv_capacity_blocks: {KV_BLOCKS}\n",
            s.url()
        ));
    }
    let gw = TestGateway::start(&yaml);
    (sims, gw)
}

/// A small seeded generator (the test must be deterministic).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const WORDS: [&str; 24] = [
    "cache", "router", "engine", "token", "prefix", "block", "latency", "queue", "replica",
    "prompt", "tensor", "batch", "stream", "shard", "index", "memory", "kernel", "request",
    "policy", "vector", "sampling", "decode", "prefill", "context",
];

fn sentence(rng: &mut Lcg, words: usize) -> String {
    (0..words)
        .map(|_| WORDS[rng.below(WORDS.len())])
        .collect::<Vec<_>>()
        .join(" ")
}

/// The prompt token count the gateway computes for `body` (POST /admin/tokenize).
fn prompt_tokens(gw: &TestGateway, endpoint: &str, body: &Value) -> usize {
    let (status, v) = gw.admin(
        "POST",
        &format!("/admin/tokenize{endpoint}"),
        Some(&body.to_string()),
    );
    assert_eq!(status, 200, "{v}");
    v["count"].as_u64().expect("count") as usize
}

/// The usage object of a response (streamed responses carry it in their last data event).
fn usage(text: &str, streamed: bool) -> Value {
    if !streamed {
        let v: Value = serde_json::from_str(text).expect("JSON body");
        return v["usage"].clone();
    }
    text.lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|v| v["usage"].is_object())
        .map(|v| v["usage"].clone())
        .expect("a usage event")
}

#[test]
fn predicted_cached_tokens_equal_what_the_simulators_cached() {
    predictions_match_the_engines(0, 330);
}

/// The same workload with every body tokenized on the data cores instead of the pool.
#[test]
fn inline_tokenization_predicts_exactly_too() {
    predictions_match_the_engines(1 << 20, 330);
}

fn predictions_match_the_engines(inline_max_bytes: usize, requests: usize) {
    let (_sims, gw) = fleet(inline_max_bytes);
    let mut rng = Lcg(0x5eed);
    let systems: Vec<String> = (0..6)
        .map(|_| {
            let n = 15 + rng.below(35);
            sentence(&mut rng, n)
        })
        .collect();
    let mut conversations: Vec<Vec<Value>> = vec![Vec::new(); 8];
    let mut conn = connect(gw.addr);
    let mut checked = 0;
    let mut hits = 0;
    let mut mismatches = Vec::new();
    for i in 0..requests {
        let streamed = i % 2 == 1;
        let kind = rng.below(3);
        let (endpoint, mut body) = match kind {
            0 => {
                // A shared system prompt and a fresh question.
                let system = &systems[rng.below(systems.len())];
                let n = 3 + rng.below(12);
                let question = sentence(&mut rng, n);
                (
                    "/v1/chat/completions",
                    json!({"model": MODEL, "messages": [
                        {"role": "system", "content": system},
                        {"role": "user", "content": question}]}),
                )
            }
            1 => {
                // A conversation resent with its history, one more turn each time.
                let c = rng.below(conversations.len());
                let too_long = !conversations[c].is_empty()
                    && prompt_tokens(
                        &gw,
                        "/v1/chat/completions",
                        &json!({"model": MODEL, "messages": conversations[c]}),
                    ) > 450;
                if conversations[c].is_empty() || too_long {
                    conversations[c] =
                        vec![json!({"role": "system", "content": systems[c % systems.len()]})];
                }
                let n = 3 + rng.below(10);
                conversations[c].push(json!({"role": "user", "content": sentence(&mut rng, n)}));
                let body = json!({"model": MODEL, "messages": conversations[c]});
                conversations[c]
                    .push(json!({"role": "assistant", "content": sentence(&mut rng, 4)}));
                ("/v1/chat/completions", body)
            }
            _ => {
                // Completions over a shared prefix.
                let system = &systems[rng.below(systems.len())];
                let n = 2 + rng.below(10);
                let prompt = format!("{system} {}", sentence(&mut rng, n));
                ("/v1/completions", json!({"model": MODEL, "prompt": prompt}))
            }
        };
        body["max_tokens"] = json!(1);
        if streamed {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        // A prompt of whole blocks makes vLLM recompute its last block into a second copy, which
        // the index does not model: keep every prompt off a block boundary.
        let mut tries = 0;
        while prompt_tokens(&gw, endpoint, &body).is_multiple_of(BLOCK) && tries < 8 {
            tries += 1;
            match endpoint {
                "/v1/completions" => {
                    let p = format!("{} x", body["prompt"].as_str().unwrap_or(""));
                    body["prompt"] = json!(p);
                }
                _ => {
                    let msgs = body["messages"].as_array_mut().expect("messages");
                    let last = msgs.last_mut().expect("a message");
                    let c = format!("{} x", last["content"].as_str().unwrap_or(""));
                    last["content"] = json!(c);
                }
            }
        }
        let r = conn
            .call("POST", endpoint, &[], Some(body.to_string().as_bytes()))
            .expect("response");
        assert_eq!(r.status, 200, "{}", r.text());
        let u = usage(&r.text(), streamed);
        let real = u["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0);
        let predicted: u64 = r
            .header("x-inferrail-cached-tokens")
            .and_then(|v| v.parse().ok())
            .expect("a cached-tokens prediction on every request");
        let prompt: u64 = r
            .header("x-inferrail-prompt-tokens")
            .and_then(|v| v.parse().ok())
            .expect("prompt tokens");
        assert_eq!(
            Some(prompt),
            u["prompt_tokens"].as_u64(),
            "request {i}: prompt tokens"
        );
        checked += 1;
        if real > 0 {
            hits += 1;
        }
        if predicted != real {
            mismatches.push(format!(
                "request {i} ({endpoint}, streamed {streamed}, {prompt} tokens, replica {}): predicted {predicted}, engine cached {real}",
                r.header("x-inferrail-replica").unwrap_or("?")
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {checked} predictions wrong:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(10)].join("\n")
    );
    assert!(
        hits > checked / 4,
        "the workload shares prefixes: {hits} of {checked} hit"
    );
    // Eviction pressure: the three caches together hold far fewer tokens than were sent.
    let text = gw.metrics();
    let sent = metric(&text, "inferrail_prompt_tokens_total").unwrap_or(0.0);
    assert!(
        sent > (3 * KV_BLOCKS * BLOCK * (requests / 33)) as f64,
        "{sent} prompt tokens"
    );
    assert_eq!(
        metric(&text, "inferrail_prompts_total{result=\"predicted\"}"),
        Some(checked as f64)
    );
}
