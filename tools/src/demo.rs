//! `inferrail demo`: a gateway in front of three in-process engines, exercised end to end.

use crate::client::{call, Connection};
use inferrail_control::gateway::Gateway;
use inferrail_sim::server::{SimOptions, SimServer};
use std::time::{Duration, Instant};

/// Why the demo stopped early.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// An engine could not start.
    #[error("cannot start a demo engine: {0}")]
    Engine(std::io::Error),
    /// The generated config did not validate (a bug).
    #[error("demo config: {0}")]
    Config(#[from] inferrail_config::ConfigError),
    /// The gateway did not start.
    #[error(transparent)]
    Gateway(#[from] inferrail_control::GatewayError),
    /// A request through the gateway failed.
    #[error("request through the gateway failed: {0}")]
    Request(std::io::Error),
}

const MODEL: &str = "sim-llama";

/// The demo gateway config for engines at `urls`.
pub fn demo_config(urls: &[String]) -> String {
    let mut yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  shutdown_timeout: 2s\n\
         models:\n  - name: {MODEL}\n    aliases: [llama]\n    policy: cost_model\n    tokenizer: builtin:sim\n    block_size: 16\n\
         retry:\n  max_attempts: 3\n  backoff: 10ms\nreplicas:\n"
    );
    for (i, url) in urls.iter().enumerate() {
        yaml.push_str(&format!(
            "  - id: engine-{i}\n    url: {url}\n    models: [{MODEL}]\n"
        ));
    }
    yaml
}

/// Runs the demo, printing what happens to stdout. `requests` plain requests are sent first.
pub fn run(requests: usize) -> Result<(), DemoError> {
    let mut engines = Vec::new();
    for seed in 0..3 {
        let opts = SimOptions {
            enable_prompt_tokens_details: true,
            seed,
            ..SimOptions::new(MODEL)
        };
        engines.push(SimServer::start(opts).map_err(DemoError::Engine)?);
    }
    let urls: Vec<String> = engines.iter().map(SimServer::url).collect();
    let source = inferrail_control::ConfigSource::from_yaml(&demo_config(&urls))?;
    let gateway = Gateway::start(source)?;
    let addr = gateway.listen_addr;
    println!("Inferrail demo");
    println!(
        "  gateway  http://{addr}  ({} data cores, {} driver), admin http://{}",
        gateway.core_count,
        inferrail_dataplane::driver_name(),
        gateway.admin_addr
    );
    for (i, u) in urls.iter().enumerate() {
        println!("  engine-{i} {u}  (inferrail-sim: vLLM V1 scheduler, prefix cache, 8B-class latency model)");
    }

    println!(
        "\n1. {requests} chats over three shared system prompts, policy cost_model, model named by alias \
         `llama`: once a prompt is cached somewhere, its requests go there (the gateway predicts \
         the engine's cache exactly):"
    );
    let systems = [
        "You are a careful code reviewer.",
        "You are a travel planner.",
        "You answer in haiku.",
    ]
    .map(|s| {
        format!(
            "{s} {}",
            "Keep every answer short, precise and kind to the reader. ".repeat(8)
        )
    });
    for i in 0..requests {
        let body = serde_json::json!({"model": "llama", "max_tokens": 6, "messages": [
            {"role": "system", "content": systems[i % systems.len()]},
            {"role": "user", "content": format!("Question number {i}, please.")}]})
        .to_string();
        let t = Instant::now();
        let r = call(
            addr,
            "POST",
            "/v1/chat/completions",
            &[],
            Some(body.as_bytes()),
        )
        .map_err(DemoError::Request)?;
        let usage: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
        println!(
            "   request {i:>2} (prompt {}): {} from {:<9} in {:>4} ms  {} tokens, {} predicted cached, {} cached by the engine",
            ["A", "B", "C"][i % 3],
            r.status,
            r.header("x-inferrail-replica").unwrap_or("?"),
            t.elapsed().as_millis(),
            usage["usage"]["prompt_tokens"],
            r.header("x-inferrail-cached-tokens").unwrap_or("?"),
            usage["usage"]["prompt_tokens_details"]["cached_tokens"]
        );
    }

    println!("\n2. A streaming request, relayed chunk by chunk as the engine produces them:");
    let stream_body =
        br#"{"messages":[{"role":"user","content":"Stream please"}],"stream":true,"max_tokens":6}"#;
    let mut conn = Connection::open(addr, Duration::from_secs(10)).map_err(DemoError::Request)?;
    conn.send("POST", "/v1/chat/completions", &[], Some(stream_body))
        .map_err(DemoError::Request)?;
    let t = Instant::now();
    let r = conn
        .read_response_with("POST", |piece| {
            for line in String::from_utf8_lossy(piece)
                .lines()
                .filter(|l| !l.is_empty())
            {
                let shown: String = line.chars().take(90).collect();
                println!("   +{:>4} ms  {shown}", t.elapsed().as_millis());
            }
        })
        .map_err(DemoError::Request)?;
    println!(
        "   (model was missing: the gateway inserted it; served by {})",
        r.header("x-inferrail-replica").unwrap_or("?")
    );

    // A prompt of its own per request: nothing cached anywhere, so idle replicas tie and the
    // choice among them is random.
    let hello = |i: usize| {
        format!(
            r#"{{"model":"llama","messages":[{{"role":"user","content":"Hello number {i}!"}}],"max_tokens":6}}"#
        )
    };
    println!("\n3. engine-1 crashes (stopped); requests routed to it retry on the others:");
    engines[1].stop();
    let retries = |gw: &Gateway| -> Result<String, DemoError> {
        let m = call(gw.admin_addr, "GET", "/metrics", &[], None).map_err(DemoError::Request)?;
        Ok(m.text()
            .lines()
            .find(|l| l.starts_with("inferrail_retries_total"))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or("0")
            .to_string())
    };
    let before = retries(&gateway)?;
    // The policy picks at random among idle replicas: send until one request hit the dead engine.
    for i in 0..12 {
        let r = call(
            addr,
            "POST",
            "/v1/chat/completions",
            &[],
            Some(hello(i).as_bytes()),
        )
        .map_err(DemoError::Request)?;
        let now = retries(&gateway)?;
        println!(
            "   request {i}: {} from {}{}",
            r.status,
            r.header("x-inferrail-replica").unwrap_or("?"),
            if now != before {
                "  (engine-1 refused it; retried)"
            } else {
                ""
            }
        );
        if now != before {
            break;
        }
    }
    // Failed requests eject it: keep sending (bounded) until the control plane takes it out.
    let ejected = |gw: &Gateway| -> Result<Option<serde_json::Value>, DemoError> {
        let r =
            call(gw.admin_addr, "GET", "/admin/replicas", &[], None).map_err(DemoError::Request)?;
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
        Ok(v["replicas"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["id"] == "engine-1"))
            .filter(|r| r["ejected"] == true)
            .cloned())
    };
    let mut sent = 0;
    let mut state = ejected(&gateway)?;
    while state.is_none() && sent < 200 {
        call(
            addr,
            "POST",
            "/v1/chat/completions",
            &[],
            Some(hello(100 + sent).as_bytes()),
        )
        .map_err(DemoError::Request)?;
        sent += 1;
        state = ejected(&gateway)?;
    }
    if let Some(r) = state {
        println!(
            "   after {} more requests engine-1 is ejected (GET /admin/replicas: routable {}, \
             back in {} ms, ejected {} ms after its first failed request); no client saw an error",
            sent, r["routable"], r["ejected_for_ms"], r["last_ejection"]["after_first_failure_ms"]
        );
    }

    println!("\n4. Errors in the OpenAI shape:");
    let r = call(
        addr,
        "POST",
        "/v1/chat/completions",
        &[],
        Some(br#"{"model":"gpt-9"}"#),
    )
    .map_err(DemoError::Request)?;
    println!("   unknown model -> {} {}", r.status, r.text());
    let r = call(addr, "GET", "/v1/chat/completions", &[], None).map_err(DemoError::Request)?;
    println!(
        "   GET on a POST route -> {} (allow: {})",
        r.status,
        r.header("allow").unwrap_or("?")
    );

    println!("\n5. From the admin port's /metrics:");
    let m = call(gateway.admin_addr, "GET", "/metrics", &[], None).map_err(DemoError::Request)?;
    for line in m.text().lines().filter(|l| {
        l.starts_with("inferrail_requests_total")
            || l.starts_with("inferrail_retries_total")
            || (l.starts_with("inferrail_errors_total") && !l.ends_with(" 0"))
    }) {
        println!("   {line}");
    }

    gateway.shutdown();
    gateway.wait();
    for mut e in engines {
        e.stop();
    }
    println!("\nDone. Run `inferrail serve --config config/examples/local-3-replicas.yaml` to use your own engines.");
    Ok(())
}
