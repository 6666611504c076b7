//! End-to-end runs of the generator against a tiny in-test HTTP server. No timing thresholds:
//! only counts, which the schedule fixes in advance.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::TestServer;
use inferrail_bench::{run, Arrivals, LoadError, Schedule};

/// Measured and warmup arrivals the schedule holds for a config.
fn expected(
    kind: Arrivals,
    rate: f64,
    warmup: Duration,
    duration: Duration,
    seed: u64,
) -> (u64, u64) {
    let all: Vec<Duration> = Schedule::new(kind, rate, warmup + duration, seed).collect();
    let measured = all.iter().filter(|o| **o >= warmup).count() as u64;
    (measured, all.len() as u64 - measured)
}

#[test]
fn uniform_run_completes_every_request() {
    let server = TestServer::start();
    let cfg = server.config(
        "/ok",
        "--rate 200 --duration 500ms --warmup 100ms --arrivals uniform --connections 2 --body {\"model\":\"m\"}",
    );
    let report = run(&cfg).unwrap();
    assert_eq!(report.sent, 100, "0.5 s at 200/s, evenly spaced");
    assert_eq!(report.completed, 100);
    assert_eq!(report.errors.total(), 0);
    assert_eq!(report.warmup.sent, 20);
    assert_eq!(report.warmup.completed, 20);
    assert_eq!(server.requests.load(Ordering::SeqCst), 120);
    assert!(report.latency_us.p50 > 0);
    assert!(report.latency_us.p50 <= report.latency_us.p99);
    assert!(report.connections_opened >= 2);
}

#[test]
fn poisson_run_over_chunked_responses() {
    let server = TestServer::start();
    let cfg = server.config(
        "/chunked",
        "--rate 300 --duration 400ms --warmup 100ms --seed 5",
    );
    let (measured, warm) = expected(
        Arrivals::Poisson,
        300.0,
        Duration::from_millis(100),
        Duration::from_millis(400),
        5,
    );
    let report = run(&cfg).unwrap();
    assert_eq!(report.sent, measured);
    assert_eq!(report.completed, measured);
    assert_eq!(report.errors.total(), 0);
    assert_eq!(report.warmup.sent, warm);
    assert_eq!(server.requests.load(Ordering::SeqCst), measured + warm);
}

#[test]
fn non_2xx_status_is_an_error() {
    let server = TestServer::start();
    let cfg = server.config(
        "/fail",
        "--rate 200 --duration 250ms --warmup 0 --arrivals uniform",
    );
    let report = run(&cfg).unwrap();
    assert_eq!(report.sent, 50);
    assert_eq!(report.completed, 0);
    assert_eq!(report.errors.status, 50);
    assert_eq!(report.errors.total(), 50);
    assert_eq!(report.latency_us.max, 0, "errors carry no latency");
}

#[test]
fn closed_connections_are_replaced() {
    let server = TestServer::start();
    let cfg = server.config(
        "/close",
        "--rate 200 --duration 200ms --warmup 0 --arrivals uniform --connections 1",
    );
    let report = run(&cfg).unwrap();
    assert_eq!(report.completed, 40);
    assert_eq!(report.errors.total(), 0);
    assert!(
        report.connections_opened >= 40,
        "one connection per request when the server closes"
    );
}

#[test]
fn capped_pool_waits_instead_of_opening() {
    let server = TestServer::start();
    let cfg = server.config(
        "/hang",
        "--rate 100 --duration 100ms --warmup 0 --arrivals uniform --connections 1 \
         --max-connections 1 --timeout 300ms",
    );
    let report = run(&cfg).unwrap();
    assert_eq!(report.sent, 10);
    assert_eq!(report.completed, 0);
    assert_eq!(report.errors.timeout, 10);
    // The one connection hangs until 300 ms; every later arrival (all within 100 ms) waits.
    assert_eq!(report.connection_waits, 9);
    // Each timeout closes its connection and hands the slot to the next waiter.
    assert!(report.connections_opened <= 10);
}

#[test]
fn refused_target_fails_the_run() {
    // Bind then drop a listener: its port is (almost certainly) closed now.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let args = [
        "--url".to_string(),
        format!("http://{addr}/"),
        "--rate".into(),
        "10".into(),
    ];
    let cfg = inferrail_bench::parse_load_args(args).unwrap().config;
    assert!(matches!(run(&cfg), Err(LoadError::Connect(_))));
}

#[test]
fn broken_responses_are_protocol_errors_with_their_cause() {
    let server = TestServer::start();
    let cfg = server.config(
        "/garbage",
        "--rate 100 --duration 200ms --warmup 0 --arrivals uniform --connections 1",
    );
    let report = run(&cfg).unwrap();
    assert_eq!(report.sent, 20);
    assert_eq!(report.errors.protocol, 20);
    assert_eq!(report.completed, 0);
    assert_eq!(
        report.error_samples.len(),
        5,
        "only the first few causes are kept"
    );
    assert!(report.error_samples[0].contains("bad response head"));
    assert!(report.to_string().contains("error       bad response head"));
}

#[test]
fn connections_idle_too_long_are_replaced_not_reused() {
    let server = TestServer::start();
    // 10 req/s evenly: every connection idles about 100 ms between requests, past --max-idle.
    let cfg = server.config(
        "/ok",
        "--rate 10 --duration 500ms --warmup 0 --arrivals uniform --connections 1 --max-idle 20ms",
    );
    let report = run(&cfg).unwrap();
    assert_eq!(report.completed, 5);
    assert_eq!(report.errors.total(), 0);
    // The first request comes right after the pool opened; each later one finds its stale.
    assert_eq!(report.connections_expired, 4);
    assert_eq!(
        report.connections_opened, 5,
        "the initial one plus one per later request"
    );

    let cfg = server.config(
        "/ok",
        "--rate 10 --duration 500ms --warmup 0 --arrivals uniform --connections 1",
    );
    let report = run(&cfg).unwrap();
    assert_eq!(report.connections_expired, 0);
    assert_eq!(report.connections_opened, 1);
}
