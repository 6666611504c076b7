//! `inferrail calibrate` against simulators with non-default latency parameters: the fitted
//! prefill cost model recovers them within 1%, through the library (an in-process simulator)
//! and through the binaries (`inferrail-sim --latency-model linear --prefill-*-secs`); errors
//! are one line, exit 1. Calibration fits the router's linear formula, so every simulator here
//! runs the linear latency model (the simulator's default, the stepped model, has another
//! shape on purpose).

use inferrail_sim::engine::{LatencyModel, LinearLatency};
use inferrail_sim::server::{SimOptions, SimServer};
use inferrail_tests::*;
use inferrail_tools::calibrate::{self, CalibrateOptions};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// A simulator running the linear latency model with these prefill coefficients (decode terms
/// at their defaults).
fn sim(a: f64, b: f64, d: f64) -> SimServer {
    SimServer::start(SimOptions {
        latency: LatencyModel::Linear(LinearLatency {
            prefill_token_secs: a,
            prefill_pair_secs: b,
            prefill_fixed_secs: d,
            ..LinearLatency::default()
        }),
        ..SimOptions::new("calib")
    })
    .expect("simulator starts")
}

fn assert_within_1pct(what: &str, got: f64, want: f64) {
    let err = (got - want).abs() / want;
    assert!(
        err < 0.01,
        "{what}: fitted {got:e}, simulated {want:e} ({:.2}% off)",
        err * 100.0
    );
}

#[test]
fn calibrate_recovers_non_default_simulator_parameters() {
    // d is large enough that scheduling jitter on a busy 2-core machine (tens of microseconds
    // per request) stays well under 1% of it.
    let (a, b, d) = (2e-4, 1e-8, 0.02);
    let sim = sim(a, b, d);
    let started = Instant::now();
    // Prompts of at most 2048 tokens: 24 probes' simulated prefills (prefixes included) sum to
    // about 5 s.
    let report = calibrate::run(&CalibrateOptions {
        url: sim.url(),
        max_tokens_total: Some(2048),
        seed: 42,
        ..CalibrateOptions::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    eprint!("{}", report.summary());
    assert_eq!(report.rows.len(), calibrate::DEFAULT_PROBES);
    assert_eq!(report.block_size, 16, "read from vllm:cache_config_info");
    // Nothing was evicted: every probe's prefix was a cache hit in full.
    assert!(report.rows.iter().all(|r| r.cached == r.probe.cached));
    assert_within_1pct("a", report.prefill_token_secs, a);
    assert_within_1pct("b", report.prefill_pair_secs, b);
    assert_within_1pct("d", report.prefill_fixed_secs, d);
    assert!(report.worst_relative_error < 0.10, "{}", report.summary());
    assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
}

/// The real `inferrail-sim` binary (built beside `inferrail`) with non-default latency flags,
/// on an ephemeral port; returns the child and its URL.
fn sim_binary(flags: &[&str]) -> (Child, String) {
    let bin = inferrail_bin().with_file_name("inferrail-sim");
    let mut child = Command::new(&bin)
        .args(["--port", "0", "--served-model-name", "calib"])
        .args(flags)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("banner");
    // "inferrail-sim listening on http://127.0.0.1:PORT (model ...)"
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    (child, url)
}

#[test]
fn calibrate_binary_recovers_the_sim_binary_flags_and_writes_a_model_fragment() {
    let (a, b, d) = (1.5e-4, 5e-9, 0.02);
    let (mut sim, url) = sim_binary(&[
        "--latency-model",
        "linear",
        "--prefill-token-secs",
        "1.5e-4",
        "--prefill-pair-secs=5e-9",
        "--prefill-fixed-secs",
        "0.02",
    ]);
    let dir = std::env::temp_dir().join(format!("inferrail-calibrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let out_file = dir.join("cost.yaml");
    let out = Command::new(inferrail_bin())
        .args(["calibrate", "--url", &url, "--model", "calib"])
        .args(["--probes", "16", "--max-tokens-total", "4096", "--out"])
        .arg(&out_file)
        .output()
        .expect("inferrail runs");
    let _ = sim.kill();
    let _ = sim.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "the fragment goes to --out");
    let fragment = std::fs::read_to_string(&out_file).expect("fragment written");
    eprint!("{stderr}{fragment}");
    let yaml = format!("{fragment}replicas: [{{id: r, url: '{url}', models: [calib]}}]\n");
    let config = inferrail_config::parse_str(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let cm = config.models[0].cost_model.expect("models[0].cost_model");
    assert_within_1pct("a", cm.prefill_token_secs, a);
    assert_within_1pct("b", cm.prefill_pair_secs, b);
    assert_within_1pct("d", cm.prefill_fixed_secs, d);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn calibrate_errors_are_one_line_with_exit_code_1() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let sim = sim(1e-4, 3.3e-9, 5e-3);
    for (args, needle) in [
        (vec!["--url", url.as_str()], "unreachable"),
        (
            vec!["--url", &sim.url(), "--model", "nope"],
            "does not serve model \"nope\"",
        ),
        (
            vec!["--url", &sim.url(), "--max-tokens-total", "40000"],
            "max_model_len",
        ),
    ] {
        let out = Command::new(inferrail_bin())
            .arg("calibrate")
            .args(&args)
            .output()
            .expect("inferrail runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle) && stderr.contains("http://127.0.0.1:"),
            "{args:?}: {stderr}"
        );
    }
    let out = Command::new(inferrail_bin())
        .args(["calibrate", "--probes", "8"])
        .output()
        .expect("inferrail runs");
    assert_eq!(out.status.code(), Some(2), "a usage error");
}
