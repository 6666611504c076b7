//! `run` against the scripted engine (`inferrail_sim::ScriptedEngine`), whose timing is known:
//! 16 content chunks 20 ms apart, the first 20 ms after the request. Timing bounds are generous
//! (the machine is shared) and read medians where they can.

use std::time::Duration;

use inferrail_bench::{parse_run_args, run_workload, RunConfig, RunReport};
use inferrail_sim::{Behavior, EngineOptions, ScriptedEngine};

/// Tokens per response and the pause before each.
const CHUNKS: usize = 16;
const INTERVAL: Duration = Duration::from_millis(20);

fn engine() -> ScriptedEngine {
    ScriptedEngine::start(EngineOptions {
        behavior: Behavior::Stream {
            chunks: CHUNKS,
            interval: INTERVAL,
        },
        record: false,
        ..EngineOptions::new("sim-llama")
    })
    .expect("engine starts")
}

fn config(engine: &ScriptedEngine, flags: &str) -> RunConfig {
    let mut args = vec!["--url".to_string(), engine.url()];
    args.extend(flags.split_whitespace().map(String::from));
    parse_run_args(args).unwrap().config
}

fn ms(us: u64) -> f64 {
    us as f64 / 1e3
}

fn within(what: &str, got_us: u64, want_ms: f64, tol_ms: f64) {
    let got = ms(got_us);
    assert!(
        (got - want_ms).abs() <= tol_ms,
        "{what}: {got:.2} ms, want {want_ms} ± {tol_ms} ms"
    );
}

#[test]
fn known_timing_gives_ttft_itl_tpot() {
    let engine = engine();
    let cfg = config(
        &engine,
        "--workload w6 --rate 8 --duration 2s --warmup 250ms --seed 3 --max-tokens 16 \
         --timeout 10s",
    );
    let r: RunReport = run_workload(&cfg).unwrap();
    eprintln!("{r}");
    assert!(
        r.sent >= 5,
        "a Poisson schedule at 8/s over 2 s: {}",
        r.sent
    );
    assert_eq!(r.completed, r.sent);
    assert_eq!(r.errors.total, 0);
    assert!(r.warmup.sent <= 10);
    // Usage tokens, not chunk counts, give TPOT; the engine reports all 16.
    assert_eq!(r.usage.responses, r.completed);
    assert_eq!(r.usage.completion_tokens, r.completed * CHUNKS as u64);
    assert!(r.usage.prompt_tokens > 0);
    assert_eq!(r.itl_us.count, r.completed * (CHUNKS as u64 - 1));
    within("ttft p50", r.ttft_us.p50, 20.0, 8.0);
    within("itl p50", r.itl_us.p50, 20.0, 8.0);
    within("tpot p50", r.tpot_us.p50, 20.0, 8.0);
    within("e2e p50", r.e2e_us.p50, 320.0, 40.0);
    assert!(r.send_lag_us.p50 < 10_000, "idle target: small lag");
    // Every request meets the default SLO (TTFT 2 s, TPOT 100 ms) ...
    assert_eq!(r.goodput.requests, r.completed);
    // ... and none meets a TPOT bound below the engine's 20 ms.
    let mut strict = cfg.clone();
    strict.slo.tpot = Duration::from_millis(5);
    strict.duration = Duration::from_millis(500);
    let r = run_workload(&strict).unwrap();
    assert_eq!(r.goodput.requests, 0, "{r}");
    assert_eq!(
        r.replicas.unknown, r.completed,
        "no gateway, no replica header"
    );
    assert!(r.prediction.is_none());
}

#[test]
fn a_target_that_falls_behind_shows_send_lag() {
    let engine = engine();
    // One connection, each request ~320 ms: at 10/s (evenly) request i is scheduled at
    // 0.1·i s but can only be sent near 0.32·i s, so the last of ten lags about 2 s.
    let cfg = config(
        &engine,
        "--workload w6 --rate 10 --duration 1s --warmup 0 --arrivals gamma:0.01 \
         --max-tokens 16 --connections 1 --max-connections 1 --timeout 30s --slo-ttft 1s",
    );
    let r = run_workload(&cfg).unwrap();
    eprintln!("{r}");
    assert_eq!(r.completed, r.sent);
    assert!(r.sent >= 8, "{}", r.sent);
    assert!(r.connection_waits >= r.sent - 2);
    assert_eq!(engine.stats().max_in_flight, 1);
    let lag = r.send_lag_us.p99;
    assert!(lag >= 1_200_000, "send lag p99 {} ms", ms(lag));
    // TTFT counts from the scheduled time: it includes the lag.
    assert!(
        r.ttft_us.p99 >= lag,
        "ttft p99 {} ms < lag p99 {} ms",
        ms(r.ttft_us.p99),
        ms(lag)
    );
    assert!(r.e2e_us.max >= lag + 250_000);
    // Throughput is what the target managed (one 320 ms stream at a time), not the offered
    // 10/s: completions over the time to the last one.
    assert!(r.wall_s >= 2.8, "wall {}", r.wall_s);
    assert!(
        r.throughput.requests_per_s < 4.0,
        "{}",
        r.throughput.requests_per_s
    );
    // Queueing is not the engine being slow per token: TPOT stays near 20 ms.
    within("tpot p50", r.tpot_us.p50, 20.0, 8.0);
    // Lags of 0.22·i s: the later half of the requests miss a 1 s TTFT bound.
    assert!(
        r.goodput.requests >= 2 && r.goodput.requests <= r.completed - 3,
        "goodput {} of {}",
        r.goodput.requests,
        r.completed
    );
}

#[test]
fn command_line_writes_the_json_result() {
    let engine = engine();
    let out = std::env::temp_dir().join(format!("bench-run-{}.json", std::process::id()));
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_inferrail-bench"))
        .args([
            "run",
            "--url",
            &engine.url(),
            "--workload",
            "hot",
            "--rate",
            "5",
            "--duration",
            "600ms",
            "--warmup",
            "0",
            "--max-tokens",
            "16",
            "--timeout",
            "10s",
            "--json",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(stdout.contains("ttft ms"), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    std::fs::remove_file(&out).unwrap();
    assert_eq!(v["workload"], "hot");
    assert_eq!(v["arrivals"], "poisson");
    assert_eq!(v["completed"], v["sent"]);
    for key in ["ttft_us", "tpot_us", "itl_us", "e2e_us", "send_lag_us"] {
        assert!(v[key]["p999"].is_u64(), "{key}");
    }
    assert!(v["goodput"]["requests_per_s"].is_number());
    assert!(v["usage"]["prefix_hit_rate"].is_number());
    assert!(v["replicas"]["busiest_share"].is_number());
}

#[test]
fn multi_turn_conversations_send_later_turns_after_think_time() {
    let engine = ScriptedEngine::start(EngineOptions {
        behavior: Behavior::Stream {
            chunks: 4,
            interval: INTERVAL,
        },
        ..EngineOptions::new("sim-llama")
    })
    .expect("engine starts");
    // W3: agent steps 0.2-2 s apart, 3-10 steps per episode.
    let cfg = config(
        &engine,
        "--workload w3 --rate 2 --duration 3s --warmup 0 --seed 2 --max-tokens 4 --timeout 10s",
    );
    let first_turns =
        inferrail_bench::arrivals::arrivals(2.0, cfg.duration, cfg.arrivals, cfg.seed).len() as u64;
    let r = run_workload(&cfg).unwrap();
    eprintln!("{r}");
    assert_eq!(r.errors.total, 0);
    assert!(
        r.sent > first_turns,
        "later turns were sent: {} requests for {first_turns} conversations",
        r.sent
    );
    assert!(r.turns_skipped > 0, "episodes outlast a 3 s run");
    let received = engine.received();
    assert_eq!(received.len() as u64, r.sent);
    // Every request belongs to a session; each session's turns are spaced by at least the
    // 200 ms think time plus the previous answer (4 × 20 ms).
    let mut by_session: std::collections::BTreeMap<String, Vec<std::time::Instant>> =
        Default::default();
    for q in &received {
        let id = q
            .header("x-session-id")
            .expect("session header")
            .to_string();
        by_session.entry(id).or_default().push(q.received_at);
    }
    assert_eq!(by_session.len() as u64, first_turns);
    for times in by_session.values() {
        for w in times.windows(2) {
            assert!(
                w[1] - w[0] >= Duration::from_millis(270),
                "{:?}",
                w[1] - w[0]
            );
        }
    }
}
