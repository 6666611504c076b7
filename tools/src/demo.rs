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
    /// A request to the gateway's admin port (or one the demo needs to go on) failed.
    #[error("request through the gateway failed: {0}")]
    Request(std::io::Error),
    /// The demo ran to the end, but some of what it showed did not happen: clients got a
    /// non-2xx answer or a transport error, or an error request got another status than the
    /// one the demo expects, or the crashed engine was never ejected.
    #[error("{} of {} checks failed: {}", .failures.len(), .checked, .failures.join("; "))]
    Failed {
        /// How many outcomes the demo checked.
        checked: usize,
        /// What went wrong, one line each.
        failures: Vec<String>,
    },
}

/// What the demo's clients saw, checked against what the demo says will happen: every request
/// through the gateway that should succeed (a 2xx), every error request (its exact status), and
/// the demo's other claims. Pure: fed outcomes, never does I/O.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    checked: usize,
    failures: Vec<String>,
}

impl Tally {
    /// Records a request that should succeed: a failure unless `outcome` is a 2xx status.
    /// `outcome` is the status, or the transport error that left no status.
    pub fn success(&mut self, what: &str, outcome: Result<u16, String>) {
        self.checked += 1;
        match outcome {
            Ok(status) if (200..300).contains(&status) => {}
            Ok(status) => self.failures.push(format!("{what}: got {status}")),
            Err(e) => self.failures.push(format!("{what}: transport error: {e}")),
        }
    }

    /// Records a request that should get exactly the status `want`.
    pub fn status(&mut self, what: &str, outcome: Result<u16, String>, want: u16) {
        self.checked += 1;
        match outcome {
            Ok(status) if status == want => {}
            Ok(status) => self
                .failures
                .push(format!("{what}: expected {want}, got {status}")),
            Err(e) => self.failures.push(format!("{what}: transport error: {e}")),
        }
    }

    /// Records a claim of the demo: a failure (`failure` says what did not happen) unless `held`.
    pub fn claim(&mut self, held: bool, failure: impl FnOnce() -> String) {
        self.checked += 1;
        if !held {
            self.failures.push(failure());
        }
    }

    /// How many failures were recorded so far (to count those of one part of the demo).
    pub fn failed(&self) -> usize {
        self.failures.len()
    }

    /// How many outcomes were recorded so far.
    pub fn checked(&self) -> usize {
        self.checked
    }

    /// `Ok` when nothing failed, else every failure.
    pub fn verdict(self) -> Result<usize, DemoError> {
        if self.failures.is_empty() {
            Ok(self.checked)
        } else {
            Err(DemoError::Failed {
                checked: self.checked,
                failures: self.failures,
            })
        }
    }
}

/// `call`'s outcome as the tally reads it: the status, or the transport error's text.
fn outcome(r: &Result<crate::client::Response, std::io::Error>) -> Result<u16, String> {
    r.as_ref().map(|r| r.status).map_err(ToString::to_string)
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
/// Every request through the gateway is checked (a 2xx where the demo expects success, the exact
/// status where it sends an error on purpose), and so are its claims (the crashed engine is
/// ejected): `Ok` only when all held, else [`DemoError::Failed`] naming each that did not, after
/// the demo ran to its end and said so.
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
    let mut tally = Tally::default();
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
         `llama`: once a prompt is cached somewhere, its requests go there, and the gateway \
         predicts what the engine has cached:"
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
    let mut exact = 0;
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
        );
        tally.success(&format!("chat request {i}"), outcome(&r));
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                println!("   request {i:>2}: transport error: {e}");
                continue;
            }
        };
        let usage: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
        let predicted = r.header("x-inferrail-cached-tokens").unwrap_or("?");
        let engine = &usage["usage"]["prompt_tokens_details"]["cached_tokens"];
        if engine.as_u64().map(|n| n.to_string()).as_deref() == Some(predicted) {
            exact += 1;
        }
        println!(
            "   request {i:>2} (prompt {}): {} from {:<9} in {:>4} ms  {} tokens, {} predicted cached, {} cached by the engine",
            ["A", "B", "C"][i % 3],
            r.status,
            r.header("x-inferrail-replica").unwrap_or("?"),
            t.elapsed().as_millis(),
            usage["usage"]["prompt_tokens"],
            predicted,
            engine
        );
    }
    println!("   the prediction equals the engine's own count on {exact} of {requests} requests");

    println!("\n2. A streaming request, relayed chunk by chunk as the engine produces them:");
    let stream_body =
        br#"{"messages":[{"role":"user","content":"Stream please"}],"stream":true,"max_tokens":6}"#;
    let t = Instant::now();
    let streamed = Connection::open(addr, Duration::from_secs(10)).and_then(|mut conn| {
        conn.send("POST", "/v1/chat/completions", &[], Some(stream_body))?;
        conn.read_response_with("POST", |piece| {
            for line in String::from_utf8_lossy(piece)
                .lines()
                .filter(|l| !l.is_empty())
            {
                let shown: String = line.chars().take(90).collect();
                println!("   +{:>4} ms  {shown}", t.elapsed().as_millis());
            }
        })
    });
    tally.success("streaming request", outcome(&streamed));
    match &streamed {
        Ok(r) => println!(
            "   {} (model was missing: the gateway inserted it; served by {})",
            r.status,
            r.header("x-inferrail-replica").unwrap_or("?")
        ),
        Err(e) => println!("   transport error: {e}"),
    }

    // A prompt of its own per request: nothing cached anywhere, so idle replicas tie and the
    // choice among them is random.
    let hello = |i: usize| {
        format!(
            r#"{{"model":"llama","messages":[{{"role":"user","content":"Hello number {i}!"}}],"max_tokens":6}}"#
        )
    };
    println!("\n3. engine-1 crashes (stopped); requests routed to it retry on the others:");
    engines[1].stop();
    let (failed_before, checked_before) = (tally.failed(), tally.checked());
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
        );
        tally.success(&format!("request {i} after the crash"), outcome(&r));
        let now = retries(&gateway)?;
        let retried = if now != before {
            "  (engine-1 refused it; retried)"
        } else {
            ""
        };
        match r {
            Ok(r) => println!(
                "   request {i}: {} from {}{retried}",
                r.status,
                r.header("x-inferrail-replica").unwrap_or("?")
            ),
            Err(e) => println!("   request {i}: transport error: {e}{retried}"),
        }
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
        let r = call(
            addr,
            "POST",
            "/v1/chat/completions",
            &[],
            Some(hello(100 + sent).as_bytes()),
        );
        tally.success(
            &format!("request {} after the crash", 100 + sent),
            outcome(&r),
        );
        sent += 1;
        state = ejected(&gateway)?;
    }
    let (failed, checked) = (
        tally.failed() - failed_before,
        tally.checked() - checked_before,
    );
    let clients = if failed == 0 {
        format!("none of the {checked} clients since the crash saw an error")
    } else {
        format!("{failed} of the {checked} clients since the crash saw an error")
    };
    match &state {
        Some(r) => println!(
            "   after {} more requests engine-1 is ejected (GET /admin/replicas: routable {}, \
             back in {} ms, ejected {} ms after its first failed request); {clients}",
            sent, r["routable"], r["ejected_for_ms"], r["last_ejection"]["after_first_failure_ms"]
        ),
        None => println!("   after {sent} more requests engine-1 is still not ejected; {clients}"),
    }
    tally.claim(state.is_some(), || {
        format!("engine-1 not ejected after {sent} requests")
    });

    println!("\n4. Errors in the OpenAI shape:");
    let r = call(
        addr,
        "POST",
        "/v1/chat/completions",
        &[],
        Some(br#"{"model":"gpt-9"}"#),
    );
    tally.status("unknown model", outcome(&r), 404);
    match r {
        Ok(r) => println!("   unknown model -> {} {}", r.status, r.text()),
        Err(e) => println!("   unknown model -> transport error: {e}"),
    }
    let r = call(addr, "GET", "/v1/chat/completions", &[], None);
    tally.status("GET on a POST route", outcome(&r), 405);
    match r {
        Ok(r) => println!(
            "   GET on a POST route -> {} (allow: {})",
            r.status,
            r.header("allow").unwrap_or("?")
        ),
        Err(e) => println!("   GET on a POST route -> transport error: {e}"),
    }

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
    let checked = tally.verdict().inspect_err(|e| {
        if let DemoError::Failed { checked, failures } = e {
            println!(
                "\nFAILED: {} of {checked} checks did not hold:",
                failures.len()
            );
            for f in failures {
                println!("   {f}");
            }
        }
    })?;
    println!(
        "\nDone: all {checked} checks held (every request meant to succeed got a 2xx, each error \
         request its status, engine-1 was ejected)."
    );
    println!("Run `inferrail serve --config config/examples/local-3-replicas.yaml` to use your own engines.");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_2xx_counts_as_success() {
        let mut t = Tally::default();
        t.success("a", Ok(200));
        t.success("b", Ok(204));
        assert_eq!((t.checked(), t.failed()), (2, 0));
        t.success("c", Ok(503));
        t.success("d", Ok(302));
        t.success("e", Err("connection reset".into()));
        assert_eq!((t.checked(), t.failed()), (5, 3));
        match t.verdict() {
            Err(DemoError::Failed { checked, failures }) => {
                assert_eq!(checked, 5);
                assert_eq!(
                    failures,
                    [
                        "c: got 503",
                        "d: got 302",
                        "e: transport error: connection reset"
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_error_request_must_get_exactly_its_status() {
        let mut t = Tally::default();
        t.status("unknown model", Ok(404), 404);
        assert_eq!(t.clone().verdict().ok(), Some(1));
        t.status("wrong method", Ok(200), 405);
        t.status("gone", Err("refused".into()), 405);
        let Err(e) = t.verdict() else {
            panic!("a 200 where 405 is expected fails")
        };
        assert_eq!(
            e.to_string(),
            "2 of 3 checks failed: wrong method: expected 405, got 200; gone: transport error: refused"
        );
    }

    #[test]
    fn a_claim_that_did_not_hold_fails_the_verdict() {
        let mut t = Tally::default();
        t.claim(true, || unreachable!("only called when the claim fails"));
        assert_eq!(t.clone().verdict().ok(), Some(1));
        t.claim(false, || "engine-1 not ejected".into());
        assert!(matches!(
            t.verdict(),
            Err(DemoError::Failed { checked: 2, .. })
        ));
    }
}
