//! `compare` and `sweep` (issue 7, fair comparisons): spec expansion and hashing, resume, fresh
//! fleets with identical schedules, and run-to-run agreement on fresh fleets.
//!
//! All but the first test start real fleets from the built binaries (`cargo build --workspace
//! --bins`; found through INFERRAIL_BIN_DIR, else target/debug). Fleet tests take a lock so they
//! do not load the machine at the same time under `cargo test` (the agreement test measures
//! latency).

mod common;

use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

use inferrail_bench::harness::exec::{ExecOptions, RunResult};
use inferrail_bench::harness::peers::PeerPaths;
use inferrail_bench::harness::spec::{build_spec, Settings};
use inferrail_bench::harness::{
    compare, execute, expand, parse_compare_args, parse_sweep, parse_sweep_args, spec_hash, sweep,
    HarnessError,
};

use common::fleet::{bin_dir, scratch};

const SUITE: &str = "harness";

static FLEETS: Mutex<()> = Mutex::new(());

fn fleet_lock() -> std::sync::MutexGuard<'static, ()> {
    FLEETS.lock().unwrap_or_else(|p| p.into_inner())
}

fn args(line: &str) -> impl Iterator<Item = String> + '_ {
    line.split_whitespace().map(String::from)
}

fn read_result(path: &Path) -> RunResult {
    serde_json::from_slice(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()))
}

fn mtime(path: &Path) -> SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

const SWEEP: &str = r#"
policies = ["round_robin", "prefix_hash", "cost_model"]
reps = 2

[settings]
duration = "2s"
warmup = "500ms"
sim_args = ["--zero-latency"]

[[points]]
workload = "w1"
rates = [1, 2.5]

[[points]]
name = "small"
workload = "W6"
rates = [4]
overrides = { duration = "1s", replicas = 2 }
"#;

#[test]
fn expansion_puts_policies_innermost_and_hashes_are_stable() {
    let file = parse_sweep(SWEEP, Path::new("t.toml")).unwrap();
    let specs = expand(&file).unwrap();
    let stems: Vec<String> = specs.iter().map(|s| s.stem()).collect();
    let mut want = Vec::new();
    for (prefix, rate) in [("w1", "1"), ("w1", "2.5"), ("small-w6", "4")] {
        for rep in 1..=2 {
            for policy in ["round_robin", "prefix_hash", "cost_model"] {
                want.push(format!("{prefix}-r{rate}-{policy}-rep{rep}"));
            }
        }
    }
    assert_eq!(stems, want);

    // Seeds depend on (workload, rate, rep) only: equal across policies, different otherwise.
    assert_eq!(specs[0].seed, specs[1].seed);
    assert_eq!(specs[0].seed, specs[2].seed);
    assert_ne!(specs[0].seed, specs[3].seed, "rep 2 has its own seed");
    assert_ne!(
        specs[0].seed, specs[6].seed,
        "another rate has its own seed"
    );
    assert!(specs.iter().all(|s| s.seed < 1 << 53));

    // Overrides apply to their point only.
    assert_eq!((specs[0].duration_s, specs[0].replicas), (2.0, 3));
    assert_eq!((specs[12].duration_s, specs[12].replicas), (1.0, 2));
    assert_eq!(specs[12].warmup_s, 0.5);
    assert_eq!(specs[12].sim_args, ["--zero-latency"]);

    // The hash is a pure function of the spec, pinned so that an accidental change to the
    // serialization (which would make every stored result rerun) fails here.
    let fixed = build_spec(
        None,
        "w1",
        6.0,
        "cost_model",
        1,
        &Settings::default(),
        "test",
    )
    .unwrap();
    assert_eq!(fixed.stem(), "w1-r6-cost_model-rep1");
    assert_eq!(spec_hash(&fixed), spec_hash(&fixed.clone()));
    assert_eq!(spec_hash(&fixed), "1c6ee353645ccfbf");
    let hashes: std::collections::HashSet<String> = specs.iter().map(spec_hash).collect();
    assert_eq!(hashes.len(), specs.len(), "every run has its own hash");
    let mut changed = fixed.clone();
    changed.duration_s += 1.0;
    assert_ne!(spec_hash(&changed), spec_hash(&fixed));

    // A bad key is named by its path and line.
    let bad = SWEEP.replace("overrides = { duration", "overrides = { durtion");
    let e = parse_sweep(&bad, Path::new("t.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("t.toml: points[1].overrides.durtion: unknown field"),
        "{e}"
    );
    assert!(e.contains("line 18"), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
    let bad = SWEEP.replace("reps = 2", "reps = 2\nrepz = 1");
    let e = parse_sweep(&bad, Path::new("t.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("repz"), "{e}");
    // Values are checked with the place they came from.
    let bad = SWEEP.replace("\"prefix_hash\"", "\"prefix_hsh\"");
    let e = expand(&parse_sweep(&bad, Path::new("t.toml")).unwrap()).unwrap_err();
    assert!(
        e.to_string().contains("unknown policy \"prefix_hsh\""),
        "{e}"
    );
    let bad = SWEEP
        .replace("rates = [4]", "rates = [1, 2.5]")
        .replace("name = \"small\"\n", "");
    let bad = bad.replace("workload = \"W6\"", "workload = \"w1\"");
    let e = expand(&parse_sweep(&bad, Path::new("t.toml")).unwrap()).unwrap_err();
    assert!(e.to_string().contains("two runs would write"), "{e}");
}

#[test]
fn sweep_resumes_and_reruns_only_a_changed_point() {
    let bins = bin_dir();
    let _lock = fleet_lock();
    let dir = scratch(SUITE, "resume");
    let file = dir.join("tiny.toml");
    let tiny = r#"
policies = ["round_robin"]
[settings]
duration = "1s"
warmup = "0s"
replicas = 2
max_tokens = 8
sim_args = ["--zero-latency"]
[[points]]
workload = "w6"
rates = [4]
[[points]]
workload = "w5"
rates = [4]
"#;
    std::fs::write(&file, tiny).unwrap();
    let out = dir.join("out");
    let line = format!(
        "{} --out {} --bin-dir {}",
        file.display(),
        out.display(),
        bins.display()
    );
    let parsed = parse_sweep_args(args(&line)).unwrap();

    let first = sweep(&parsed, false).unwrap();
    assert!(first.failed.is_empty(), "{:?}", first.failed);
    assert_eq!((first.ran.len(), first.skipped.len()), (2, 0));
    let w6 = out.join("w6-r4-round_robin-rep1.json");
    let w5 = out.join("w5-r4-round_robin-rep1.json");
    let (w6_time, w5_time) = (mtime(&w6), mtime(&w5));
    assert!(read_result(&w6).report["sent"].as_u64().unwrap() > 0);

    let second = sweep(&parsed, false).unwrap();
    assert_eq!((second.ran.len(), second.skipped.len()), (0, 2));
    assert!(second.failed.is_empty());
    assert_eq!(
        (mtime(&w6), mtime(&w5)),
        (w6_time, w5_time),
        "nothing rewritten"
    );

    // The second point at another rate: only it runs again.
    std::fs::write(
        &file,
        tiny.replacen(
            "rates = [4]\n[[points]]\nworkload = \"w5\"\nrates = [4]",
            "rates = [4]\n[[points]]\nworkload = \"w5\"\nrates = [3]",
            1,
        ),
    )
    .unwrap();
    let third = sweep(&parsed, false).unwrap();
    assert!(third.failed.is_empty(), "{:?}", third.failed);
    assert_eq!((third.ran.len(), third.skipped.len()), (1, 1));
    assert_eq!(third.ran[0].path, out.join("w5-r3-round_robin-rep1.json"));
    assert_eq!(mtime(&w6), w6_time);

    // A stored result with another spec hash (same file name) is run again.
    let mut stale = read_result(&w6);
    stale.spec_hash = "0000000000000000".into();
    std::fs::write(&w6, serde_json::to_vec(&stale).unwrap()).unwrap();
    let fourth = sweep(&parsed, false).unwrap();
    assert_eq!((fourth.ran.len(), fourth.skipped.len()), (1, 1));
    assert_eq!(fourth.ran[0].path, w6);
    assert_eq!(
        read_result(&w6).spec_hash,
        spec_hash(&read_result(&w6).spec)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compare_gives_every_policy_a_fresh_fleet_and_the_same_requests() {
    let bins = bin_dir();
    let _lock = fleet_lock();
    let dir = scratch(SUITE, "fresh");
    let line = format!(
        "--workload w1 --rate 5 --policies round_robin,prefix_hash --duration 2s --warmup 1s \
         --max-tokens 8 --sim-arg --zero-latency --out {} --bin-dir {}",
        dir.display(),
        bins.display()
    );
    let parsed = parse_compare_args(args(&line)).unwrap();
    let outcome = compare(&parsed, false).unwrap();
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
    assert_eq!(outcome.ran.len(), 2);
    let (a, b) = (&outcome.ran[0], &outcome.ran[1]);
    assert_eq!(a.result.spec.policy, "round_robin");
    assert_eq!(b.result.spec.policy, "prefix_hash");

    // Fresh: other processes, other ports, engines that had answered nothing before the run.
    assert!(
        a.pids.iter().all(|p| !b.pids.contains(p)),
        "{:?} {:?}",
        a.pids,
        b.pids
    );
    assert!(a.ports.iter().all(|p| !b.ports.contains(p)));
    assert_eq!((a.initial_queries, b.initial_queries), (0.0, 0.0));

    // Fair: the same requests at the same times.
    let (ra, rb) = (read_result(&a.path), read_result(&b.path));
    for (file, run) in [(&ra, &a.result), (&rb, &b.result)] {
        // What the run returned is what the file holds (floats may differ in the last digit).
        assert_eq!(file.spec, run.spec);
        assert_eq!(file.spec_hash, run.spec_hash);
        assert_eq!(
            file.engines.prefix_cache_hits,
            run.engines.prefix_cache_hits
        );
        assert_eq!(file.gateway, run.gateway);
        assert_eq!(file.report["sent"], run.report["sent"]);
    }
    assert_eq!(ra.spec.seed, rb.spec.seed);
    let sent = ra.report["sent"].as_u64().unwrap();
    assert!(sent >= 5, "sent {sent}");
    assert_eq!(ra.report["sent"], rb.report["sent"]);
    assert_eq!(ra.report["warmup"]["sent"], rb.report["warmup"]["sent"]);
    assert_eq!(ra.report["errors"]["total"], 0);
    assert_eq!(rb.report["errors"]["total"], 0);
    assert_eq!(
        ra.report["usage"]["prompt_tokens"], rb.report["usage"]["prompt_tokens"],
        "identical bodies"
    );
    for r in [&ra, &rb] {
        assert_eq!(r.spec_hash, spec_hash(&r.spec));
        assert!(r.engines.prefix_cache_queries > 0);
        assert_eq!(r.gateway.requests_by_replica.len(), 3);
        // The gateway's window counts every measured request (and perhaps warmup stragglers).
        let routed: u64 = r.gateway.requests_by_replica.values().sum();
        assert!(routed >= sent, "routed {routed} < sent {sent}");
    }
    // Round robin spreads; the prefix hash puts a system prompt on one replica: more hits.
    assert!(
        rb.engines.hit_rate.unwrap() > ra.engines.hit_rate.unwrap(),
        "prefix_hash {:?} vs round_robin {:?}",
        rb.engines.hit_rate,
        ra.engines.hit_rate
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two runs of one point on fresh fleets send the same requests and get the same cache
/// behaviour. Their TTFTs are printed, not compared: wall-clock latency on a shared machine is
/// no test assertion (it differed by 11 % between two runs of nine requests each).
#[test]
fn the_same_point_twice_on_fresh_fleets_sends_and_caches_the_same() {
    let bins = bin_dir();
    let _lock = fleet_lock();
    let dir = scratch(SUITE, "agree");
    // Default (real-time) latency model, so TTFT means something: W1 at 2 req/s, prefix_hash
    // (deterministic routing), 6 s measured after 2 s of warmup.
    let spec = build_spec(
        None,
        "w1",
        2.0,
        "prefix_hash",
        1,
        &Settings {
            duration: Some("6s".into()),
            warmup: Some("2s".into()),
            max_tokens: Some(8),
            ..Settings::default()
        },
        "test",
    )
    .unwrap();
    let mut results = Vec::new();
    for run in ["a", "b"] {
        let opts = ExecOptions {
            bin_dir: bins.clone(),
            out_dir: dir.join(run),
            jobs: 1,
            resume: false,
            verbose: false,
            peers: PeerPaths::default_for(&bins),
            calibrations: Default::default(),
        };
        let outcome = execute(std::slice::from_ref(&spec), &opts).unwrap();
        assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
        results.push(outcome.ran[0].result.clone());
    }
    let rel = |a: f64, b: f64| (a - b).abs() / a.max(b);
    let ttft: Vec<f64> = results
        .iter()
        .map(|r| r.report["ttft_us"]["mean"].as_f64().unwrap())
        .collect();
    let hit: Vec<f64> = results
        .iter()
        .map(|r| r.engines.hit_rate.unwrap())
        .collect();
    eprintln!(
        "mean TTFT {:.1} ms vs {:.1} ms ({:.2} %), engine hit rate {:.4} vs {:.4} ({:.2} %), sent {} / {}",
        ttft[0] / 1e3,
        ttft[1] / 1e3,
        100.0 * rel(ttft[0], ttft[1]),
        hit[0],
        hit[1],
        100.0 * rel(hit[0], hit[1]),
        results[0].report["sent"],
        results[1].report["sent"],
    );
    assert_eq!(results[0].report["sent"], results[1].report["sent"]);
    assert_eq!(results[0].report["errors"]["total"], 0);
    assert_eq!(results[1].report["errors"]["total"], 0);
    assert!(
        ttft.iter().all(|t| *t > 0.0),
        "both runs measured a TTFT: {ttft:?}"
    );
    assert!(rel(hit[0], hit[1]) <= 0.05, "engine hit rate {hit:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_binary_is_named() {
    let dir = scratch(SUITE, "nobin");
    let spec = build_spec(
        None,
        "w6",
        1.0,
        "round_robin",
        1,
        &Settings::default(),
        "test",
    )
    .unwrap();
    let opts = ExecOptions {
        bin_dir: dir.clone(),
        out_dir: dir.join("out"),
        jobs: 1,
        resume: true,
        verbose: false,
        peers: PeerPaths::default_for(&dir),
        calibrations: Default::default(),
    };
    let e = execute(&[spec], &opts).unwrap_err();
    assert!(matches!(e, HarnessError::MissingBinary(_)), "{e}");
    assert!(!dir.join("out").exists(), "nothing written");
    assert!(e.to_string().contains("inferrail-sim not found"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
