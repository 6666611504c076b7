//! Peers in the same run list as the gateway (issue 7): nginx, the SGLang router and the vLLM
//! router in front of fresh simulators get the same requests at the same times, their results
//! say what was in front, requests per replica come from the engines, and the cache-aware peers
//! really route by prefix.
//!
//! Needs the binaries (`cargo build --workspace --bins`; INFERRAIL_BIN_DIR, else target/debug)
//! and the peers (`bench/peers/install.sh`: nginx and a venv at target/peers-venv). Without the
//! peers the routing test says so and stops, unless INFERRAIL_REQUIRE_PEERS=1 (as `make test`
//! sets it), which makes their absence a failure.

mod common;

use std::path::PathBuf;

use inferrail_bench::harness::exec::{ExecOptions, RunResult};
use inferrail_bench::harness::peers::{check_installed, Peer, PeerPaths};
use inferrail_bench::harness::spec::{build_spec, Settings};
use inferrail_bench::harness::{execute, HarnessError};

use common::fleet::{bin_dir, scratch};

const SUITE: &str = "peers";

const POLICIES: [&str; 4] = [
    "round_robin",
    "peer:nginx",
    "peer:sglang.cache_aware",
    "peer:vllm.cache_aware",
];

/// True when every peer is installed; false (with the reason printed) when one is missing and
/// their absence is allowed.
fn peers_installed(paths: &PeerPaths) -> bool {
    let missing: Vec<String> = POLICIES
        .iter()
        .filter_map(|p| Peer::parse(p))
        .filter_map(|peer| check_installed(&peer.unwrap(), paths).err())
        .map(|e| e.to_string())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let required = std::env::var("INFERRAIL_REQUIRE_PEERS").is_ok_and(|v| v == "1");
    assert!(!required, "peers required but missing: {missing:?}");
    eprintln!("SKIPPED (peers not installed; run bench/peers/install.sh): {missing:?}");
    false
}

#[test]
fn peers_route_the_same_requests_and_cache_aware_ones_route_by_prefix() {
    let bins = bin_dir();
    let peers = PeerPaths::default_for(&bins);
    if !peers_installed(&peers) {
        return;
    }
    // A relative result directory (tests run in the package's directory), as `sweep --out
    // perf/results/x` gives one: every peer must cope with relative work paths.
    let dir = PathBuf::from(format!("../target/peers-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let settings = Settings {
        duration: Some("4s".into()),
        warmup: Some("1s".into()),
        max_tokens: Some(4),
        sim_args: Some(vec!["--zero-latency".into()]),
        ..Settings::default()
    };
    let specs: Vec<_> = POLICIES
        .iter()
        .map(|p| build_spec(None, "w1", 8.0, p, 1, &settings, "test").unwrap())
        .collect();
    let opts = ExecOptions {
        bin_dir: bins,
        out_dir: dir.clone(),
        jobs: 1,
        resume: false,
        verbose: true,
        peers,
        calibrations: Default::default(),
    };
    let outcome = execute(&specs, &opts).unwrap();
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
    let results: Vec<&RunResult> = outcome.ran.iter().map(|d| &d.result).collect();
    let by = |policy: &str| *results.iter().find(|r| r.spec.policy == policy).unwrap();

    let sent = results[0].report["sent"].as_u64().unwrap();
    assert!(sent >= 16, "a real run: {sent}");
    for r in &results {
        let p = &r.spec.policy;
        assert_eq!(r.report["sent"], sent, "{p}: same schedule for every front");
        assert_eq!(
            r.report["errors"]["total"], 0,
            "{p}: {}",
            r.report["errors"]
        );
        let engine_total: u64 = r.engines.requests_by_replica.values().sum();
        assert_eq!(r.engines.requests_by_replica.len(), 3, "{p}");
        // The window's engine counts hold the measured requests, give or take the warmup's
        // stragglers and the last in-flight ones.
        assert!(
            engine_total.abs_diff(sent) <= sent / 4 + 2,
            "{p}: engines finished {engine_total} for {sent} sent"
        );
        assert!(r.engines.busiest_share.is_some(), "{p}");
    }
    // Who was in front is on record; only the gateway fills its own per-replica counts.
    assert_eq!(by("round_robin").front.as_deref(), Some("inferrail serve"));
    assert!(!by("round_robin").gateway.requests_by_replica.is_empty());
    let front = |p: &str| by(p).front.clone().unwrap();
    assert!(
        front("peer:nginx").starts_with("nginx 1."),
        "{}",
        front("peer:nginx")
    );
    assert!(
        front("peer:sglang.cache_aware").starts_with("sglang-router 0.3.")
            && front("peer:sglang.cache_aware").ends_with("--policy cache_aware"),
        "{}",
        front("peer:sglang.cache_aware")
    );
    assert!(
        front("peer:vllm.cache_aware").starts_with("vllm-router 0.1."),
        "{}",
        front("peer:vllm.cache_aware")
    );
    for p in &POLICIES[1..] {
        assert!(by(p).gateway.requests_by_replica.is_empty(), "{p}");
    }
    // nginx round-robins: every engine gets work. The cache-aware routers keep each system
    // prompt on one engine, so the engines' own prefix caches hit more than behind nginx.
    let nginx = by("peer:nginx");
    assert!(
        nginx.engines.requests_by_replica.values().all(|n| *n > 0),
        "{:?}",
        nginx.engines.requests_by_replica
    );
    let hit = |p: &str| by(p).engines.hit_rate.unwrap();
    for p in ["peer:sglang.cache_aware", "peer:vllm.cache_aware"] {
        assert!(
            hit(p) > hit("peer:nginx"),
            "{p} hit rate {} vs nginx {}",
            hit(p),
            hit("peer:nginx")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_peer_that_is_not_installed_fails_the_list_before_anything_runs() {
    let bins = bin_dir();
    let dir = scratch(SUITE, "missing");
    let spec = build_spec(
        None,
        "w6",
        1.0,
        "peer:sglang.cache_aware",
        1,
        &Settings::default(),
        "test",
    )
    .unwrap();
    let opts = ExecOptions {
        bin_dir: bins,
        out_dir: dir.join("out"),
        jobs: 1,
        resume: true,
        verbose: false,
        peers: PeerPaths {
            venv: dir.join("no-venv"),
        },
        calibrations: Default::default(),
    };
    let e = execute(&[spec], &opts).unwrap_err();
    assert!(matches!(e, HarnessError::Spec(_)), "{e}");
    assert!(e.to_string().contains("bench/peers/install.sh"), "{e}");
    assert!(!dir.join("out").exists(), "nothing written");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn peer_names_are_checked_where_the_sweep_names_them() {
    let e = build_spec(
        None,
        "w1",
        1.0,
        "peer:sglang.kv_aware",
        1,
        &Settings::default(),
        "points[0]",
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("points[0]: peer"), "{e}");
    let spec = build_spec(None, "w1", 1.0, "peer:nginx", 2, &Settings::default(), "t").unwrap();
    assert_eq!(spec.stem(), "w1-r1-peer_nginx-rep2");
}
