//! The benchmark does not grade its own homework (issue 15): the gateway's cost model is measured
//! with `inferrail calibrate` against the simulators' own setup (once per setup, shared by every
//! run), scaled for the sensitivity runs, and the simulators and the gateway tokenize with a real
//! tokenizer (the pinned Qwen3 one, `make fixtures`) instead of `builtin:sim`.
//!
//! The fleet test starts real fleets from the built binaries (`cargo build --workspace --bins`).

mod common;

use std::path::PathBuf;

use inferrail_bench::harness::calibration::Calibrations;
use inferrail_bench::harness::exec::ExecOptions;
use inferrail_bench::harness::fleet::{gateway_yaml, FleetConfig, MODEL};
use inferrail_bench::harness::peers::PeerPaths;
use inferrail_bench::harness::spec::{build_spec, spec_hash, Settings};
use inferrail_bench::harness::{execute, expand, parse_sweep, HarnessError};
use inferrail_config::CostModelParams;

use common::fleet::{bin_dir, scratch};

/// The pinned Qwen3 tokenizer directory (shards/fixtures/fetch.sh puts it there).
fn qwen3() -> PathBuf {
    let root = std::env::var_os("INFERRAIL_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/fixtures"));
    let dir = root.join("tokenizers/qwen3");
    assert!(
        dir.join("tokenizer.json").is_file(),
        "{} is missing: run `make fixtures` (bash shards/fixtures/fetch.sh)",
        dir.display()
    );
    dir
}

#[test]
fn the_gateway_yaml_carries_the_cost_model_and_tokenizer_the_config_loader_reads_back() {
    let cost = CostModelParams {
        prefill_token_secs: 9.3022e-5,
        prefill_pair_secs: 4.3219e-9,
        prefill_fixed_secs: 0.010143,
        ..CostModelParams::default()
    };
    let cfg = FleetConfig {
        bin_dir: PathBuf::from("/nonexistent"),
        replicas: 2,
        policy: "cost_model".into(),
        kv_capacity_blocks: None,
        sim_args: Vec::new(),
        tokenizer: Some("/some dir/with: colon".into()),
        cost_model: Some(cost),
        bounded_load_floor: Some(3),
        routing: [
            ("kappa".to_string(), serde_json::json!(0.95)),
            ("session_affinity".to_string(), serde_json::json!(true)),
        ]
        .into_iter()
        .collect(),
        work_dir: PathBuf::from("/nonexistent"),
        peers: PeerPaths {
            venv: PathBuf::from("/nonexistent"),
        },
    };
    let yaml = gateway_yaml(&cfg, 1000, 1001, &[2000, 2001]);
    let config = inferrail_config::parse_str(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!(config.routing.cost_model, cost);
    assert_eq!(config.routing.bounded_load_floor, 3);
    assert_eq!(config.routing.kappa, 0.95);
    assert!(config.routing.session_affinity);
    let model = config.models.iter().find(|m| m.name == MODEL).unwrap();
    assert_eq!(model.tokenizer.as_deref(), Some("/some dir/with: colon"));
    // Without either, the defaults and builtin:sim, as before.
    let plain = FleetConfig {
        tokenizer: None,
        cost_model: None,
        bounded_load_floor: None,
        routing: Default::default(),
        ..cfg
    };
    let config = inferrail_config::parse_str(&gateway_yaml(&plain, 1000, 1001, &[2000])).unwrap();
    assert_eq!(config.routing.cost_model, CostModelParams::default());
    assert_eq!(
        config.routing.bounded_load_floor,
        inferrail_config::Routing::default().bounded_load_floor
    );
    assert_eq!(config.models[0].tokenizer.as_deref(), Some("builtin:sim"));
    assert_eq!(
        config.routing.kappa,
        inferrail_config::Routing::default().kappa
    );
}

#[test]
fn sweep_settings_for_the_fair_world_are_checked_and_leave_old_spec_hashes_alone() {
    let sweep =
        |text: &str| parse_sweep(text, std::path::Path::new("t.toml")).and_then(|s| expand(&s));
    let base = "policies = [\"round_robin\", \"cost_model\"]\n[[points]]\nworkload = \"w1\"\nrates = [2]\n";
    let plain = sweep(base).unwrap();
    // Scale 1 and builtin:sim are the defaults: the same specs, the same hashes.
    let same = sweep(&base.replace(
        "[[points]]",
        "[settings]\ncost_model_scale = 1.0\ntokenizer = \"builtin:sim\"\ncalibrate = false\n[[points]]",
    ))
    .unwrap();
    assert_eq!(plain, same);
    // A point of its own policies carries the sensitivity scale.
    let text = format!(
        "{base}[[points]]\nname = \"x0.5\"\nworkload = \"w1\"\nrates = [2]\npolicies = [\"cost_model\"]\n\
         overrides = {{ cost_model_scale = 0.5, calibrate = true }}\n"
    );
    let specs = sweep(&text).unwrap();
    assert_eq!(specs.len(), 3);
    assert_eq!(specs[2].stem(), "x0.5-w1-r2-cost_model-rep1");
    assert_eq!(specs[2].cost_model_scale, Some(0.5));
    assert!(specs[2].calibrate && !specs[0].calibrate);
    // A scale on a policy that does not price, or a silly scale, is refused by name.
    let bad = sweep(&base.replace(
        "[[points]]",
        "[settings]\ncost_model_scale = 2.0\n[[points]]",
    ))
    .unwrap_err();
    assert!(
        matches!(&bad, HarnessError::Spec(m) if m.contains("round_robin")),
        "{bad}"
    );
    let bad = sweep(&text.replace("0.5,", "-1.0,")).unwrap_err();
    assert!(bad.to_string().contains("cost_model_scale -1"), "{bad}");
    let bad =
        sweep(&base.replace("[[points]]", "[settings]\ncalibrate = 1\n[[points]]")).unwrap_err();
    assert!(bad.to_string().contains("calibrate"), "{bad}");
    // The bounded-load floor reaches the spec (and its hash) only when set; a peer or 0 is
    // refused by name.
    let floored = sweep(&base.replace(
        "[[points]]",
        "[settings]\nbounded_load_floor = 4\n[[points]]",
    ))
    .unwrap();
    assert!(floored.iter().all(|s| s.bounded_load_floor == Some(4)));
    assert_ne!(spec_hash(&floored[0]), spec_hash(&plain[0]));
    let bad = sweep(&base.replace(
        "[[points]]",
        "[settings]\nbounded_load_floor = 0\n[[points]]",
    ))
    .unwrap_err();
    assert!(bad.to_string().contains("bounded_load_floor 0"), "{bad}");
    let bad = sweep(&base.replace("\"round_robin\"", "\"peer:nginx\"").replace(
        "[[points]]",
        "[settings]\nbounded_load_floor = 4\n[[points]]",
    ))
    .unwrap_err();
    assert!(bad.to_string().contains("peer:nginx"), "{bad}");
    // The time scale: 1 is the default (same hashes); another scale reaches the spec and the
    // engines' flags; a silly one, or --time-scale in sim_args, is refused by name.
    let with = |line: &str| base.replace("[[points]]", &format!("[settings]\n{line}\n[[points]]"));
    assert_eq!(sweep(&with("time_scale = 1.0")).unwrap(), plain);
    let scaled = sweep(&with("time_scale = 0.25")).unwrap();
    assert!(scaled.iter().all(|s| s.time_scale == Some(0.25)));
    assert_eq!(scaled[0].engine_args(), ["--time-scale", "0.25"]);
    assert_ne!(spec_hash(&scaled[0]), spec_hash(&plain[0]));
    let bad = sweep(&with("time_scale = 0.0")).unwrap_err();
    assert!(bad.to_string().contains("time_scale 0"), "{bad}");
    let bad = sweep(&with("sim_args = [\"--time-scale\", \"0.5\"]")).unwrap_err();
    assert!(bad.to_string().contains("time_scale"), "{bad}");
    // Further routing settings: absent or empty leaves the hashes alone; a point's table merges
    // key by key over the sweep's; a peer, a key with a field of its own, or a table value is
    // refused by name.
    assert_eq!(sweep(&with("routing = {}")).unwrap(), plain);
    let text = format!(
        "{}[[points]]\nworkload = \"w1\"\nrates = [3]\noverrides = {{ routing = {{ epsilon = 0.5 }} }}\n",
        with("routing = { kappa = 1.0 }")
    );
    let routed = sweep(&text).unwrap();
    assert_eq!(routed[0].routing.len(), 1);
    assert_eq!(routed[0].routing["kappa"], serde_json::json!(1.0));
    assert_eq!(routed[2].routing.len(), 2);
    assert_eq!(routed[2].routing["epsilon"], serde_json::json!(0.5));
    assert_ne!(spec_hash(&routed[0]), spec_hash(&plain[0]));
    let peer = base.replace("\"round_robin\"", "\"peer:nginx\"");
    let bad = sweep(&peer.replace(
        "[[points]]",
        "[settings]\nrouting = { kappa = 1.0 }\n[[points]]",
    ))
    .unwrap_err();
    assert!(bad.to_string().contains("peer:nginx"), "{bad}");
    let bad = sweep(&with("routing = { seed = 3 }")).unwrap_err();
    assert!(bad.to_string().contains("routing.seed"), "{bad}");
    let bad = sweep(&with("routing = { hot_prefix = { blocks = 2 } }")).unwrap_err();
    assert!(bad.to_string().contains("routing.hot_prefix"), "{bad}");
    // Factors on single coefficients: all-1 or empty leaves the hashes alone; a factor reaches
    // the spec (only its non-1 entries) and its hash; a policy that does not price, a name that
    // is not a coefficient, or a silly factor is refused by name.
    let cm_only = base.replace("\"round_robin\", ", "");
    let plain_cm = sweep(&cm_only).unwrap();
    let with_cm =
        |line: &str| cm_only.replace("[[points]]", &format!("[settings]\n{line}\n[[points]]"));
    assert_eq!(
        sweep(&with_cm("cost_model_factors = {}")).unwrap(),
        plain_cm
    );
    assert_eq!(
        sweep(&with_cm(
            "cost_model_factors = { prefill_token_secs = 1.0 }"
        ))
        .unwrap(),
        plain_cm
    );
    let factored = sweep(&with_cm(
        "cost_model_factors = { prefill_token_secs = 0.5, prefill_fixed_secs = 1.0 }",
    ))
    .unwrap();
    let factors = factored[0].cost_model_factors.as_ref().expect("kept");
    assert_eq!(factors.len(), 1);
    assert_eq!(factors["prefill_token_secs"], 0.5);
    assert_ne!(spec_hash(&factored[0]), spec_hash(&plain_cm[0]));
    let bad = sweep(&with("cost_model_factors = { prefill_token_secs = 2.0 }")).unwrap_err();
    assert!(bad.to_string().contains("round_robin"), "{bad}");
    let bad = sweep(&with_cm("cost_model_factors = { kappa = 2.0 }")).unwrap_err();
    assert!(
        bad.to_string().contains("cost_model_factors.kappa"),
        "{bad}"
    );
    let bad = sweep(&with_cm("cost_model_factors = { prefill_pair_secs = 0.0 }")).unwrap_err();
    assert!(
        bad.to_string()
            .contains("cost_model_factors.prefill_pair_secs 0"),
        "{bad}"
    );
}

#[test]
fn calibrated_runs_share_one_measured_fit_and_engines_and_gateway_tokenize_with_qwen3() {
    let bins = bin_dir();
    let tokenizer = qwen3();
    let dir = scratch("fair_world", "calibrated");
    let settings = |tokenizer: Option<String>, calibrate, scale| Settings {
        duration: Some("3s".into()),
        warmup: Some("1s".into()),
        max_tokens: Some(4),
        replicas: Some(2),
        calibrate: Some(calibrate),
        cost_model_scale: scale,
        tokenizer,
        ..Settings::default()
    };
    let qwen = Some(tokenizer.display().to_string());
    let specs = [
        build_spec(
            None,
            "w1",
            2.0,
            "cost_model",
            1,
            &settings(qwen.clone(), true, None),
            "t",
        ),
        build_spec(
            Some("x2"),
            "w1",
            2.0,
            "cost_model",
            1,
            &settings(qwen, true, Some(2.0)),
            "t",
        ),
        build_spec(
            Some("sim"),
            "w1",
            2.0,
            "least_request",
            1,
            &settings(None, false, None),
            "t",
        ),
        build_spec(
            Some("token_half"),
            "w1",
            2.0,
            "cost_model",
            1,
            &Settings {
                cost_model_factors: Some(
                    [("prefill_token_secs".to_string(), 0.5)]
                        .into_iter()
                        .collect(),
                ),
                ..settings(Some(tokenizer.display().to_string()), true, None)
            },
            "t",
        ),
    ]
    .map(Result::unwrap);
    let calibrations = Calibrations::default();
    let opts = ExecOptions {
        bin_dir: bins.clone(),
        out_dir: dir.clone(),
        jobs: 1,
        resume: false,
        verbose: false,
        peers: PeerPaths::default_for(&bins),
        calibrations: calibrations.clone(),
    };
    let outcome = execute(&specs, &opts).unwrap();
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
    let [fit, doubled, plain, token_half] = [0, 1, 2, 3].map(|i| outcome.ran[i].result.clone());
    let measured = fit
        .gateway_cost_model
        .expect("a calibrated run records its cost model");
    // Measured on the (stepped) simulator, not the config defaults (the linear model's own).
    assert!(measured.prefill_token_secs > 0.0 && measured.prefill_fixed_secs > 0.0);
    assert_ne!(measured, CostModelParams::default());
    // One measurement for the setup: the scaled run got exactly twice the same fit.
    let twice = doubled.gateway_cost_model.unwrap();
    assert_eq!(twice.prefill_token_secs, 2.0 * measured.prefill_token_secs);
    assert_eq!(twice.prefill_fixed_secs, 2.0 * measured.prefill_fixed_secs);
    assert_eq!(
        twice.decode_interference_secs,
        2.0 * measured.decode_interference_secs
    );
    assert_eq!(plain.gateway_cost_model, None);
    // A factor on one coefficient changes that one only, on the same fit.
    let half = token_half.gateway_cost_model.unwrap();
    assert_eq!(half.prefill_token_secs, 0.5 * measured.prefill_token_secs);
    assert_eq!(
        (half.prefill_pair_secs, half.prefill_fixed_secs),
        (measured.prefill_pair_secs, measured.prefill_fixed_secs)
    );
    // Gateway and engines tokenize alike (the gateway's prompt-token header equals usage), and
    // with Qwen3, not builtin:sim: the same requests count differently. The workloads' words
    // are one token each in both vocabularies, so the counts stay close (within 5 %).
    let prompt_tokens = |r: &inferrail_bench::harness::RunResult| {
        r.report["usage"]["prompt_tokens"].as_u64().unwrap() as f64
    };
    let sent = |r: &inferrail_bench::harness::RunResult| r.report["sent"].as_u64().unwrap();
    assert_eq!(sent(&fit), sent(&plain), "same schedule, same requests");
    assert_eq!(
        fit.report["prediction"]["prompt_mean_abs_error_tokens"].as_f64(),
        Some(0.0),
        "{}",
        fit.report["prediction"]
    );
    let ratio = prompt_tokens(&fit) / prompt_tokens(&plain);
    assert!(
        ratio != 1.0 && (0.95..=1.05).contains(&ratio),
        "qwen3 {} builtin:sim {}",
        prompt_tokens(&fit),
        prompt_tokens(&plain)
    );
}

/// Issue 15: KV capacity is learned from the engines' metrics, not handed to the gateway. A
/// fleet without `kv_capacity_blocks` (as perf/results/sweep-fair2 runs) reads each pool size
/// from the simulators' `vllm:cache_config_info{num_gpu_blocks}`, and the index that prices
/// eviction (`/admin/index`) holds that pool, less vLLM's null block.
#[test]
fn a_fleet_not_told_the_pool_size_learns_it_from_the_engines_metrics() {
    use inferrail_bench::harness::fleet::{http_get, Fleet};
    let dir = scratch("fair-world", "learned-pool");
    let cfg = FleetConfig {
        bin_dir: bin_dir(),
        replicas: 2,
        policy: "cost_model".into(),
        kv_capacity_blocks: None,
        sim_args: ["--zero-latency", "--num-gpu-blocks-override", "300"]
            .into_iter()
            .chain(["--max-model-len", "4096"])
            .map(String::from)
            .collect(),
        tokenizer: None,
        cost_model: None,
        bounded_load_floor: None,
        routing: Default::default(),
        work_dir: dir.clone(),
        peers: PeerPaths {
            venv: dir.join("no-peers"),
        },
    };
    let fleet = Fleet::start(&cfg).unwrap();
    let admin = fleet.admin_port.expect("a gateway front has an admin port");
    let yaml = std::fs::read_to_string(dir.join("gateway.yaml")).unwrap();
    assert!(
        !yaml.contains("kv_capacity_blocks"),
        "told the pool size:\n{yaml}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (status, body) = http_get(admin, "/admin/index").unwrap();
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let capacities: Vec<u64> = v["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["capacity"].as_u64().unwrap_or(0))
            .collect();
        if capacities == [299, 299] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pool sizes not learned within 20 s: {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
