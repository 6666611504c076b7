//! `streams` runs against the in-test server: counts only, no timing thresholds.

mod common;

use std::sync::atomic::Ordering;

use common::TestServer;
use inferrail_bench::{parse_streams_args, run_streams, StreamsConfig, StreamsError};

fn config(server: &TestServer, path: &str, flags: &str) -> StreamsConfig {
    let mut args = vec![
        "--url".to_string(),
        format!("http://{}{path}", server.addr),
        "--body".to_string(),
        r#"{"model":"m","stream":true}"#.to_string(),
    ];
    args.extend(flags.split_whitespace().map(String::from));
    parse_streams_args(args).unwrap().config
}

#[test]
fn every_stream_completes() {
    let server = TestServer::start();
    let cfg = config(&server, "/sse", "--streams 50 --connect-concurrency 8");
    let report = run_streams(&cfg).unwrap();
    assert_eq!(report.streams, 50);
    assert_eq!(report.connections, 50);
    assert_eq!(report.completed, 50);
    assert_eq!(report.errors.total(), 0);
    assert_eq!(report.with_usage, 50);
    assert_eq!(report.with_finish, 50);
    assert_eq!(report.events, 50 * 5, "role, two tokens, usage, [DONE]");
    assert_eq!(server.requests.load(Ordering::SeqCst), 50);
    assert!(report.peak_concurrent_streams >= 1);
    assert!(report.ttft_us.p50 <= report.duration_us.p50);
    assert!(report.wall_s > 0.0);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["errors"]["incomplete"], 0);
    assert!(report.to_string().contains("completed   50"));
}

#[test]
fn streams_without_done_and_error_statuses_are_errors() {
    let server = TestServer::start();
    let report = run_streams(&config(&server, "/sse-cut", "--streams 5")).unwrap();
    assert_eq!(report.completed, 0);
    assert_eq!(report.errors.incomplete, 5);

    let report = run_streams(&config(&server, "/fail", "--streams 4")).unwrap();
    assert_eq!(report.completed, 0);
    assert_eq!(report.errors.status, 4);

    let report = run_streams(&config(&server, "/hang", "--streams 2 --timeout 200ms")).unwrap();
    assert_eq!(report.errors.timeout, 2);
}

#[test]
fn no_target_is_a_run_error() {
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let args = [
        "--url".to_string(),
        format!("http://127.0.0.1:{port}/"),
        "--streams".into(),
        "3".into(),
        "--body".into(),
        "{}".into(),
    ];
    let cfg = parse_streams_args(args).unwrap().config;
    assert!(matches!(
        run_streams(&cfg),
        Err(StreamsError::NoConnection(_))
    ));
}
