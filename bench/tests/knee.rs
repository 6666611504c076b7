//! `inferrail-bench knee` end to end (issue 15): the real command, as a process, against fresh
//! fleets of cheap simulators (W6, tiny sample counts, one-second windows). The outcomes are
//! made certain without timing thresholds: zero-latency engines meet a 2 s SLO at every rate
//! probed (the search grows to the cap), and no run meets a 1 µs TTFT bound (it shrinks to the
//! floor).
//!
//! Needs the built binaries (`cargo build --workspace --bins`; found through INFERRAIL_BIN_DIR,
//! else target/debug).

mod common;

use std::path::Path;
use std::process::Command;

use inferrail_bench::harness::exec::RunResult;
use inferrail_bench::report_md::bootstrap::quantile;
use serde_json::Value;

use common::fleet::{bin_dir, scratch};

const SUITE: &str = "knee";

/// Runs `inferrail-bench knee SPEC ARGS --out OUT --bin-dir BINS`; returns its stdout and the
/// parsed `knee.json`.
fn knee(dir: &Path, spec: &str, line: &str) -> (String, Value) {
    let file = dir.join("spec.toml");
    std::fs::write(&file, spec).unwrap();
    let out = dir.join("out");
    let output = Command::new(env!("CARGO_BIN_EXE_inferrail-bench"))
        .arg("knee")
        .arg(&file)
        .args(line.split_whitespace())
        .arg("--out")
        .arg(&out)
        .arg("--bin-dir")
        .arg(bin_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "knee failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = serde_json::from_slice(&std::fs::read(out.join("knee.json")).unwrap()).unwrap();
    (stdout, summary)
}

fn read_result(path: &Path) -> RunResult {
    serde_json::from_slice(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()))
}

fn rates(front: &Value) -> Vec<f64> {
    front["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["rate"].as_f64().unwrap())
        .collect()
}

#[test]
fn zero_latency_fronts_grow_to_the_cap_and_every_probe_is_a_result_file() {
    let dir = scratch(SUITE, "grow");
    let spec = r#"
policies = ["p2c"]
[settings]
duration = "1s"
warmup = "0s"
replicas = 2
max_tokens = 4
sim_args = ["--zero-latency"]
[[points]]
workload = "w6"
rates = [1]
"#;
    let (stdout, summary) = knee(
        &dir,
        spec,
        "--workload w6 --front round_robin --front least_request --low 8 --high 16 --cap 32 \
         --min-samples 10 --tolerance 0.5",
    );
    let out = dir.join("out");
    assert_eq!(summary["workload"], "w6");
    assert_eq!(summary["min_samples"], 10);
    assert!(summary["rules"].as_str().unwrap().contains("95 %"));
    let fronts = summary["fronts"].as_array().unwrap();
    let names: Vec<&str> = fronts
        .iter()
        .map(|f| f["front"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["round_robin", "least_request"],
        "--front, not the spec's policies"
    );
    for front in fronts {
        assert_eq!(
            rates(front),
            [8.0, 16.0, 32.0],
            "low, high, doubled to the cap"
        );
        assert_eq!(front["knee"], 32.0);
        assert_eq!(front["capped"], true);
        assert!(front["lowest_failed"].is_null());
        let notes = front["notes"].to_string();
        assert!(
            notes.contains("doubled to 32") && notes.contains("cap"),
            "{notes}"
        );
        for probe in front["probes"].as_array().unwrap() {
            assert_eq!(probe["met"], true, "{probe}");
            let rate = probe["rate"].as_f64().unwrap();
            // The window is max(duration, min_samples / rate).
            assert_eq!(
                probe["duration_s"].as_f64().unwrap(),
                (10.0 / rate).max(1.0)
            );
            let result = read_result(&out.join(probe["file"].as_str().unwrap()));
            assert_eq!(result.spec.policy, front["front"].as_str().unwrap());
            assert_eq!(result.spec.rate, rate);
            assert_eq!(
                result.spec.duration_s,
                probe["duration_s"].as_f64().unwrap()
            );
            assert_eq!(result.report["sent"], probe["sent"]);
            assert_eq!(result.report["errors"]["total"], 0);
        }
    }
    assert_eq!(fronts[0]["ratio_to_first"], 1.0);
    assert_eq!(fronts[1]["ratio_to_first"], 1.0);
    assert!(
        stdout.contains("least_request / round_robin: capacity ratio 1.00"),
        "{stdout}"
    );
    assert!(out.join("knee.md").is_file());
    // `report` reads the probes' files (and skips knee.json).
    let built = inferrail_bench::report_md::build(&out, Default::default()).unwrap();
    drop(built);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unmeetable_slo_shrinks_to_the_floor_in_model_seconds() {
    let dir = scratch(SUITE, "shrink");
    let spec = r#"
policies = ["round_robin"]
[settings]
duration = "1s"
warmup = "0s"
replicas = 1
max_tokens = 4
[[points]]
workload = "w6"
rates = [1]
"#;
    let (stdout, summary) = knee(
        &dir,
        spec,
        "--workload w6 --low 20 --high 40 --floor 10 --min-samples 10 --slo-ttft 1us \
         --time-scale 0.05",
    );
    let out = dir.join("out");
    assert_eq!(summary["time_scale"], 0.05);
    let front = &summary["fronts"][0];
    assert_eq!(
        front["front"], "round_robin",
        "the spec's policies when no --front"
    );
    assert_eq!(rates(front), [20.0, 10.0], "low, then halved to the floor");
    assert!(front["knee"].is_null(), "no knee: nothing met");
    assert_eq!(front["lowest_failed"], 10.0);
    assert!(front["notes"].to_string().contains("floor"), "{front}");
    assert!(stdout.contains("| round_robin | none | 10 |"), "{stdout}");
    for probe in front["probes"].as_array().unwrap() {
        assert_eq!(probe["met"], false);
        assert!(probe["failed"].to_string().contains("TTFT"), "{probe}");
        let result = read_result(&out.join(probe["file"].as_str().unwrap()));
        assert_eq!(result.spec.time_scale, Some(0.05));
        let args = result.spec.engine_args();
        assert_eq!(args[args.len() - 2..], ["--time-scale", "0.05"]);
        // The p99 judged is the measured one divided by the time scale.
        let samples: Vec<u64> = result.report["samples"]["ttft_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        let measured = quantile(&samples, 0.99).unwrap() as f64 / 1e6;
        let judged = probe["p99_ttft_s"].as_f64().unwrap();
        assert!(
            (judged - measured / 0.05).abs() < 1e-9,
            "{judged} vs {measured}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
