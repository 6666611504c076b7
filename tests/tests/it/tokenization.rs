//! Tokenization through the products' own paths: the simulator with `--tokenizer` counts a real
//! vLLM's prompt tokens; the gateway's admin API answers tokenize and index queries; a model
//! whose tokenizer does not load still routes.

use inferrail_sim::server::{SimOptions, SimServer};
use inferrail_tests::*;
use serde_json::Value;

fn tiny_llama() -> String {
    format!(
        "{}/../shards/fixtures/tiny-llama",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn the_simulator_with_a_tokenizer_counts_what_a_real_vllm_counted() {
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}/prompts.json", tiny_llama()))
            .expect("the tiny model's prompts.json (from the shared vLLM captures)"),
    )
    .expect("JSON");
    let sim = SimServer::start(SimOptions {
        tokenizer: Some(tiny_llama()),
        zero_latency: true,
        served_model_name: vec!["tiny-llama".into()],
        ..SimOptions::new("tiny-llama")
    })
    .expect("simulator with the tiny tokenizer");
    let mut checked = 0;
    for r in fixture["requests"].as_array().expect("requests") {
        let Some(want) = r["prompt_token_ids"].as_array().map(Vec::len) else {
            continue;
        };
        let path = r["path"].as_str().expect("path");
        let mut body: Value =
            serde_json::from_str(r["request_body_exact"].as_str().expect("body text"))
                .expect("JSON body");
        // Whatever model name the capture used, ask the simulator's.
        body["model"] = Value::from("tiny-llama");
        if let Value::Object(o) = &mut body {
            // Fields that change the output, not the prompt (the simulator refuses some).
            for k in [
                "stream",
                "stream_options",
                "logprobs",
                "top_logprobs",
                "prompt_logprobs",
                "echo",
                "n",
                "best_of",
            ] {
                o.remove(k);
            }
        }
        let resp = inferrail_tools::client::call(
            sim.addr(),
            "POST",
            path,
            &[("content-type", "application/json")],
            Some(body.to_string().as_bytes()),
        )
        .expect("response");
        if resp.status == 400 && resp.text().contains("does not support") {
            continue;
        }
        assert_eq!(resp.status, 200, "{}: {}", r["tag"], resp.text());
        let v: Value = serde_json::from_slice(&resp.body).expect("JSON");
        assert_eq!(
            v["usage"]["prompt_tokens"].as_u64(),
            Some(want as u64),
            "{}: prompt tokens",
            r["tag"]
        );
        checked += 1;
    }
    assert!(checked >= 20, "{checked} requests checked");
}

#[test]
fn admin_tokenize_and_index_answer_without_routing() {
    let e = engines(2, EngineBehavior::Instant);
    let yaml = config_yaml(&e, "round_robin", "", "").replace(
        "    policy: round_robin\n",
        &format!(
            "    policy: round_robin\n    tokenizer: {}\n    block_size: 4\n",
            tiny_llama()
        ),
    );
    let gw = TestGateway::start(&yaml);
    let body = format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"hello there, how are the blocks today?"}}]}}"#
    );
    let (status, v) = gw.admin("POST", "/admin/tokenize/v1/chat/completions", Some(&body));
    assert_eq!(status, 200, "{v}");
    let count = v["count"].as_u64().unwrap();
    assert_eq!(v["tokens"].as_array().unwrap().len() as u64, count);
    assert_eq!(
        v["block_hashes"].as_array().unwrap().len() as u64,
        count / 4
    );
    assert_eq!(
        e.iter().map(|x| x.stats().requests).sum::<u64>(),
        0,
        "nothing was routed"
    );

    // Routed: the response names the prompt length, and the index holds its blocks.
    let r = post_chat(gw.addr, body.as_bytes());
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-inferrail-prompt-tokens"),
        Some(count.to_string().as_str())
    );
    assert_eq!(r.header("x-inferrail-cached-tokens"), Some("0"));
    let (_, idx) = gw.admin("GET", "/admin/index", None);
    assert_eq!(idx["enabled"], true);
    assert!(
        wait_until(std::time::Duration::from_secs(5), || {
            let (_, idx) = gw.admin("GET", "/admin/index", None);
            idx["entries"].as_u64() == Some(count / 4)
        }),
        "{idx}"
    );
    // The same prompt again on the same replica would be predicted cached: ask round robin's
    // other replica first, then the first again.
    let r2 = post_chat(gw.addr, body.as_bytes());
    let r3 = post_chat(gw.addr, body.as_bytes());
    let cached: Vec<Option<&str>> = [&r2, &r3]
        .iter()
        .map(|r| r.header("x-inferrail-cached-tokens"))
        .collect();
    let expect = ((count - 1) / 4 * 4).to_string();
    assert!(
        cached.contains(&Some(expect.as_str())),
        "{cached:?}, want {expect}"
    );

    let (status, _) = gw.admin(
        "POST",
        "/admin/tokenize/v1/completions",
        Some(r#"{"model":"nope","prompt":"x"}"#),
    );
    assert_eq!(status, 404);
    let (status, v) = gw.admin(
        "POST",
        "/admin/tokenize/v1/chat/completions",
        Some("{not json"),
    );
    assert_eq!(status, 400, "{v}");
}

#[test]
fn a_model_whose_tokenizer_does_not_load_routes_without_predictions() {
    let e = engines(1, EngineBehavior::Instant);
    let yaml = config_yaml(&e, "round_robin", "", "").replace(
        "    policy: round_robin\n",
        "    policy: round_robin\n    tokenizer: /nonexistent/tokenizer-dir\n",
    );
    let gw = TestGateway::start(&yaml);
    let r = post_chat(gw.addr, &chat(MODEL, false));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-inferrail-prompt-tokens"), None);
    let text = gw.metrics();
    assert_eq!(
        metric(&text, "inferrail_prompts_total{result=\"no_tokenizer\"}"),
        Some(1.0),
        "{text}"
    );
}
