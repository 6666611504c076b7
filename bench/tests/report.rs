//! `inferrail-bench report`: reproducible output, verdicts, aggregation and errors, on the
//! fixtures in `bench/testdata/report/` (W1 at 2, 6, 10 req/s with round_robin, least_request,
//! cost_model and peer:llm-d, two repetitions; W6 at 2 and 6 req/s, one) and variants of them.

use std::path::{Path, PathBuf};

use inferrail_bench::report_md::matrix::GoodputRule;
use inferrail_bench::report_md::verdicts::Outcome;
use inferrail_bench::report_md::{
    aggregate, load, parse_report_args, write_report, Built, ReportArgs, ReportError,
};
use serde_json::Value;

/// The report as perf/results/sweep-fair judged goodput (the default rule).
fn build_per_second(dir: &Path) -> Result<Built, ReportError> {
    inferrail_bench::report_md::build(dir, GoodputRule::PerSecond)
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/report")
}

/// A fresh, empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("report-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

fn fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures())
        .expect("fixtures")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

fn read_fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(fixtures().join(name)).expect("fixture");
    serde_json::from_str(&text).expect("fixture json")
}

fn write(dir: &Path, name: &str, v: &Value) {
    std::fs::write(
        dir.join(name),
        serde_json::to_string_pretty(v).expect("json"),
    )
    .expect("write");
}

/// Copies the fixtures into `dir` (in reverse name order), letting `edit` change each first.
fn copy_fixtures(dir: &Path, edit: impl Fn(&str, &mut Value)) {
    for name in fixture_names().iter().rev() {
        let mut v = read_fixture(name);
        edit(name, &mut v);
        write(dir, name, &v);
    }
}

fn outcomes(dir: &Path) -> Vec<(String, Outcome)> {
    build_per_second(dir).expect("report builds").verdicts
}

#[test]
fn rebuilt_twice_is_byte_identical() {
    let a = scratch("twice-a");
    let b = scratch("twice-b");
    for out in [&a, &b] {
        write_report(&ReportArgs {
            dir: fixtures(),
            out: Some(out.join("REPORT.md")),
            goodput: GoodputRule::default(),
        })
        .expect("report written");
    }
    let md_a = std::fs::read(a.join("REPORT.md")).expect("md");
    assert_eq!(md_a, std::fs::read(b.join("REPORT.md")).expect("md"));
    let text = String::from_utf8(md_a).expect("utf-8");
    let mut svgs: Vec<_> = std::fs::read_dir(a.join("charts"))
        .expect("charts")
        .map(|e| e.expect("entry").file_name())
        .collect();
    svgs.sort();
    assert_eq!(svgs.len(), 8, "four charts per workload");
    for f in &svgs {
        let name = f.to_string_lossy();
        assert!(
            text.contains(&format!("](charts/{name})")),
            "{name} referenced"
        );
        let sa = std::fs::read(a.join("charts").join(f)).expect("svg");
        let sb = std::fs::read(b.join("charts").join(f)).expect("svg");
        assert!(sa.starts_with(b"<svg"), "{name}");
        assert_eq!(sa, sb, "{name} differs between builds");
    }
    // The same files written in another order, to another directory: the same bytes.
    let copy = scratch("twice-copy");
    copy_fixtures(&copy, |_, _| {});
    let again = build_per_second(&copy).expect("copy builds");
    assert_eq!(again, build_per_second(&fixtures()).expect("builds"));
    assert!(!text.contains("NaN") && !text.contains(" inf"), "{text}");
}

#[test]
fn report_contents_on_fixtures() {
    let built = build_per_second(&fixtures()).expect("builds");
    let md = &built.markdown;
    for want in [
        "## Verdicts",
        "- W1 @ 6 req/s: cost_model p99 TTFT 0.59 s, 79% below round_robin (no intervals)",
        "### W1 @ 10 req/s",
        "### W6 @ 2 req/s",
        "## Peers",
        "| W1 | 6 | peer:llm-d | 0.83 | n/a | 4.96 | 79% | 76% | 37% |",
        "**Peer rule.** cost_model is no worse than a peer when its W1 p99 TTFT is at or below",
        "**Intervals.** A p99's 95% CI is a percentile bootstrap (2000 resamples, 95% level",
        "![W1 p99 TTFT (s) against offered load](charts/w1-p99-ttft.svg)",
    ] {
        assert!(md.contains(want), "missing {want:?} in\n{md}");
    }
    assert!(md.ends_with("|\n"), "one final newline");
}

#[test]
fn verdicts_pass_on_fixtures() {
    let v = outcomes(&fixtures());
    assert_eq!(v.len(), 5, "{v:?}");
    for (target, outcome) in &v {
        assert_eq!(*outcome, Outcome::Pass, "{target}");
    }
}

#[test]
fn verdicts_fail_when_cost_model_is_worse() {
    let dir = scratch("fail");
    copy_fixtures(&dir, |name, v| {
        if !name.contains("-cost_model-") {
            return;
        }
        let r = &mut v["report"];
        let p99 = r["ttft_us"]["p99"].as_u64().expect("p99");
        // W1: p99 TTFT only 25% below round_robin; W6: 30% over the best cache-blind policy.
        let scale = if name.starts_with("w1") { 3.5 } else { 1.3 };
        r["ttft_us"]["p99"] = Value::from((p99 as f64 * scale) as u64);
        r["goodput"]["requests_per_s"] = Value::from(4.0); // +5% over least_request at 6
        v["engines"]["hit_rate"] = Value::from(0.55);
    });
    let v = outcomes(&dir);
    for (target, outcome) in &v {
        assert_eq!(*outcome, Outcome::Fail, "{target}");
    }
    let md = build_per_second(&dir).expect("builds").markdown;
    assert!(md.contains("| **FAIL** | at 6 req/s: 55% |"), "{md}");
    assert!(
        md.contains("cost_model 4.00 req/s vs least_request 3.79 req/s: +6%"),
        "{md}"
    );
}

#[test]
fn verdicts_not_applicable_without_the_results() {
    let dir = scratch("na");
    for name in fixture_names().iter().filter(|n| n.starts_with("w6")) {
        let mut v = read_fixture(name);
        v.as_object_mut().expect("object").remove("engines");
        write(&dir, name, &v);
    }
    let v = outcomes(&dir);
    let got: Vec<Outcome> = v.iter().map(|(_, o)| *o).collect();
    assert_eq!(
        got,
        [
            Outcome::NotApplicable,
            Outcome::NotApplicable,
            Outcome::NotApplicable,
            Outcome::Pass,
            Outcome::NotApplicable
        ],
        "{v:?}"
    );
    let md = build_per_second(&dir).expect("builds").markdown;
    assert!(
        md.contains("| N/A |"),
        "engine hit rate without counters: {md}"
    );
}

#[test]
fn repetitions_fold_into_median_with_range() {
    let dir = scratch("median");
    let base = read_fixture("w6-r2-round_robin-rep1.json");
    for (rep, p99_ms, goodput) in [(1, 1000, 1.5), (2, 5000, 1.0), (3, 2000, 2.0)] {
        let mut v = base.clone();
        v["spec"]["rep"] = Value::from(rep);
        v["report"]["ttft_us"]["p99"] = Value::from(p99_ms * 1000);
        v["report"]["goodput"]["requests_per_s"] = Value::from(goodput);
        write(&dir, &format!("rep{rep}.json"), &v);
    }
    let files = load::load_dir(&dir).expect("loads");
    let t = aggregate::aggregate(&files);
    let p = t.get("w6", 2000, "round_robin").expect("point");
    assert_eq!(p.reps, [1, 2, 3]);
    assert_eq!(
        (p.ttft_p99_s.median, p.ttft_p99_s.min, p.ttft_p99_s.max),
        (2.0, 1.0, 5.0)
    );
    assert_eq!(p.goodput.median, 1.5);
    assert_eq!(p.ttft_p50_s.min, p.ttft_p50_s.max, "identical reps");
    let md = build_per_second(&dir).expect("builds").markdown;
    assert!(
        md.contains(
            "| round_robin | 3 | 0.10 | 2.00 (1.00–5.00) | n/a | 18.0 | 45.0 | n/a \
             | 1.50 (1.00–2.00) |"
        ),
        "{md}"
    );
}

#[test]
fn malformed_file_is_a_one_line_error_naming_it() {
    let dir = scratch("malformed");
    write(
        &dir,
        "a-good.json",
        &read_fixture("w6-r2-cost_model-rep1.json"),
    );
    std::fs::write(
        dir.join("b-broken.json"),
        "{\"spec\": {\"workload\": \"w1\",",
    )
    .expect("w");
    let e = build_per_second(&dir).expect_err("broken file");
    assert!(matches!(e, ReportError::Parse { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("b-broken.json") && !msg.contains('\n'),
        "{msg}"
    );

    let dir = scratch("missing-field");
    let mut v = read_fixture("w6-r2-cost_model-rep1.json");
    v["report"]
        .as_object_mut()
        .expect("object")
        .remove("ttft_us");
    write(&dir, "no-ttft.json", &v);
    let msg = build_per_second(&dir)
        .expect_err("missing field")
        .to_string();
    assert!(
        msg.contains("no-ttft.json") && msg.contains("ttft_us") && !msg.contains('\n'),
        "{msg}"
    );
}

#[test]
fn empty_directory_is_an_error() {
    let dir = scratch("empty");
    std::fs::write(dir.join("notes.txt"), "not a result").expect("w");
    let e = build_per_second(&dir).expect_err("empty");
    assert!(matches!(e, ReportError::Empty { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with("no *.json result files in "),
        "{e}"
    );
    let missing = build_per_second(&dir.join("nope")).expect_err("missing dir");
    assert!(
        matches!(missing, ReportError::ReadDir { .. }),
        "{missing:?}"
    );
}

#[test]
fn arguments_and_cli() {
    let a = parse_report_args(["d".into(), "--out".into(), "r.md".into()]).expect("args");
    assert_eq!(
        a,
        ReportArgs {
            dir: "d".into(),
            out: Some("r.md".into()),
            goodput: GoodputRule::PerSecond,
        }
    );
    let share = parse_report_args(["d".into(), "--goodput".into(), "share".into()]).expect("args");
    assert_eq!(share.goodput, GoodputRule::Share);
    assert!(parse_report_args(["d".into(), "--goodput".into(), "rate".into()]).is_err());
    assert!(parse_report_args(["d".into(), "--goodput".into()]).is_err());
    assert!(parse_report_args(Vec::<String>::new()).is_err());
    assert!(parse_report_args(["d".into(), "--bogus".into()]).is_err());

    let dir = scratch("cli");
    copy_fixtures(&dir, |_, _| {});
    let bin = env!("CARGO_BIN_EXE_inferrail-bench");
    let ok = std::process::Command::new(bin)
        .arg("report")
        .arg(&dir)
        .output()
        .expect("runs");
    assert!(ok.status.success(), "{ok:?}");
    assert!(dir.join("report.md").is_file());
    assert!(dir.join("charts/w1-goodput.svg").is_file());
    let empty = scratch("cli-empty");
    let bad = std::process::Command::new(bin)
        .arg("report")
        .arg(&empty)
        .output()
        .expect("runs");
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no *.json result files"));
}

#[test]
fn peers_are_named_by_their_front_and_engine_counts_give_the_busiest_share() {
    let dir = scratch("fronts");
    copy_fixtures(&dir, |name, v| {
        if name.contains("peer_llm-d") {
            v["front"] = serde_json::json!("llm-d-router 9.9 --policy prefix");
        }
        if name == "w1-r6-peer_llm-d-rep1.json" || name == "w1-r6-peer_llm-d-rep2.json" {
            v["engines"]["busiest_share"] = serde_json::json!(0.9);
        }
    });
    let md = build_per_second(&dir).expect("builds").markdown;
    assert!(
        md.contains("- peer:llm-d: `llm-d-router 9.9 --policy prefix`"),
        "{md}"
    );
    // The engines' share replaces the header-based one (37% in the fixtures) where present.
    assert!(
        md.contains("| W1 | 6 | peer:llm-d | 0.83 | n/a | 4.96 | 79% | 76% | 90% |"),
        "{md}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `n` TTFT samples in µs, evenly spaced so that their nearest-rank p99 is `p99_us` (the
/// `⌈0.99·n⌉`-th is `p99_us`), given unsorted (the report must not rely on the order).
fn spaced_samples(n: u64, p99_us: u64) -> Value {
    let rank = (99 * n).div_ceil(100);
    let step = p99_us as f64 / rank as f64;
    let mut v: Vec<u64> = (1..=n).map(|i| (i as f64 * step).round() as u64).collect();
    v.reverse();
    Value::from(v)
}

/// Copies the fixtures, giving W1 at 6 req/s (the median rate) per-request TTFT samples: 360
/// per repetition, p99 `cm_p99_us` for cost_model and `peer_p99_us` for peer:llm-d.
fn with_w1_r6_samples(name: &str, cm_p99_us: u64, peer_p99_us: u64) -> PathBuf {
    let dir = scratch(name);
    copy_fixtures(&dir, |file, v| {
        let p99 = match file {
            f if f.starts_with("w1-r6-cost_model-") => cm_p99_us,
            f if f.starts_with("w1-r6-peer_llm-d-") => peer_p99_us,
            _ => return,
        };
        v["report"]["samples"] = serde_json::json!({
            "ttft_us": spaced_samples(360, p99),
            "tpot_us": spaced_samples(360, 40_000),
        });
    });
    dir
}

fn peer_verdict(dir: &Path) -> (Outcome, String) {
    let built = build_per_second(dir).expect("builds");
    let (target, outcome) = built.verdicts.last().expect("verdicts").clone();
    assert!(target.starts_with("W1 against peer:llm-d"), "{target}");
    let line = built
        .markdown
        .lines()
        .find(|l| l.contains("W1 against peer:llm-d"))
        .expect("verdict row")
        .to_string();
    (outcome, line)
}

#[test]
fn old_result_files_without_samples_load_with_no_interval() {
    // The fixtures predate `report.samples`, as do the committed sweeps' files.
    let fixture = read_fixture("w1-r6-cost_model-rep1.json");
    assert!(fixture["report"].get("samples").is_none(), "an old file");
    let files = load::load_dir(&fixtures()).expect("old files load");
    assert!(files.iter().all(|f| f.file.report.samples.is_none()));
    let t = aggregate::aggregate(&files);
    let p = t.get("w1", 6000, "cost_model").expect("point");
    assert_eq!((p.ttft_p99_ci_s, p.tpot_p99_ci_ms), (None, None));
    assert_eq!(
        p.ttft_p99_s.median,
        (570_000.0 + 604_200.0) / 2.0 / 1e6,
        "histogram p99"
    );
    // `"samples": null` and a file with samples in one repetition only: still no interval.
    let dir = scratch("half-samples");
    copy_fixtures(&dir, |file, v| match file {
        "w1-r6-cost_model-rep1.json" => {
            v["report"]["samples"] = serde_json::json!({"ttft_us": [1, 2, 3]});
        }
        "w1-r6-cost_model-rep2.json" => v["report"]["samples"] = Value::Null,
        _ => {}
    });
    let t = aggregate::aggregate(&load::load_dir(&dir).expect("loads"));
    let p = t.get("w1", 6000, "cost_model").expect("point");
    assert_eq!(p.ttft_p99_ci_s, None, "one repetition without samples");
    assert_eq!(p.tpot_p99_ci_ms, None, "no TPOT samples at all");
}

#[test]
fn samples_give_intervals_in_the_tables() {
    let dir = with_w1_r6_samples("ci-tables", 500_000, 800_000);
    let t = aggregate::aggregate(&load::load_dir(&dir).expect("loads"));
    let cm = t.get("w1", 6000, "cost_model").expect("point");
    let ci = cm.ttft_p99_ci_s.expect("interval");
    assert_eq!(cm.ttft_p99_s.median, 0.5, "the exact p99 of the samples");
    assert!(ci.lo < 0.5 && 0.5 <= ci.hi && ci.hi < 0.52, "{ci:?}");
    let tpot = cm.tpot_p99_ci_ms.expect("tpot interval");
    assert!(tpot.lo < 40.0 && 40.0 <= tpot.hi, "{tpot:?}");
    let md = build_per_second(&dir).expect("builds").markdown;
    let row = |policy: &str| {
        md.lines()
            .find(|l| l.starts_with(&format!("| W1 | 6 | {policy} |")))
            .expect("peer row")
            .to_string()
    };
    assert!(
        row("cost_model").starts_with("| W1 | 6 | cost_model | 0.50 | 0.49–0.50 |"),
        "{md}"
    );
    assert!(
        row("peer:llm-d").starts_with("| W1 | 6 | peer:llm-d | 0.80 | 0.79–0.80 |"),
        "{md}"
    );
    assert!(
        md.contains(
            "| 0.50 | 0.49–0.50 | 24.7 (24.0–25.4) | 40.0 | 39.6–40.2 | 5.44 (5.28–5.60) |"
        ),
        "{md}"
    );
}

#[test]
fn peer_verdict_separated_below_passes() {
    let (outcome, line) = peer_verdict(&with_w1_r6_samples("peer-below", 500_000, 800_000));
    assert_eq!(outcome, Outcome::Pass, "{line}");
    assert!(line.contains(": not above;"), "{line}");
}

#[test]
fn peer_verdict_overlapping_passes_without_a_tolerance() {
    // cost_model's p99 1.25% above the peer's: the intervals (about 2% wide) overlap.
    let (outcome, line) = peer_verdict(&with_w1_r6_samples("peer-overlap", 810_000, 800_000));
    assert_eq!(outcome, Outcome::Pass, "{line}");
    assert!(
        line.contains("above, intervals overlap (no difference)"),
        "{line}"
    );
}

#[test]
fn peer_verdict_separated_above_fails() {
    // 4% above: within the 5% the old rule allowed, yet the intervals (about 2% wide) separate.
    let (outcome, line) = peer_verdict(&with_w1_r6_samples("peer-above", 832_000, 800_000));
    assert_eq!(outcome, Outcome::Fail, "{line}");
    assert!(line.contains("above, intervals separate (worse)"), "{line}");
}

#[test]
fn peer_verdict_above_without_intervals_is_not_applicable() {
    let dir = scratch("peer-blind");
    copy_fixtures(&dir, |file, v| {
        if file.starts_with("w1-r6-cost_model-") {
            v["report"]["ttft_us"]["p99"] = Value::from(900_000);
        }
    });
    let (outcome, line) = peer_verdict(&dir);
    assert_eq!(outcome, Outcome::NotApplicable, "{line}");
    assert!(line.contains("above, no interval to judge by"), "{line}");
}

#[test]
fn peer_goodput_below_fails_however_small() {
    let dir = scratch("peer-goodput");
    copy_fixtures(&dir, |file, v| {
        if file.starts_with("w1-r6-cost_model-") {
            // Median 4.95 against the peer's 4.9555: 0.1% below (the old rule allowed 5%).
            v["report"]["goodput"]["requests_per_s"] = Value::from(4.95);
        }
    });
    let (outcome, line) = peer_verdict(&dir);
    assert_eq!(outcome, Outcome::Fail, "{line}");
    assert!(line.contains("goodput 4.95 vs 4.96 req/s: below"), "{line}");
}

#[test]
fn time_scaled_runs_read_in_model_time() {
    // Each fixture rewritten as if measured at time scale 0.5 (engines twice as fast, the
    // rate twice the model rate, latencies halved, goodput per wall second doubled): the
    // report reads them back as the unscaled fixtures, whether the scale is the spec's
    // `time_scale` or a `--time-scale` in `sim_args` (files written before the setting).
    let dir = scratch("time-scaled");
    copy_fixtures(&dir, |name, v| {
        let half = |x: &Value| Value::from((x.as_f64().unwrap() * 0.5).round() as u64);
        if name.starts_with("w1-") {
            v["spec"]["time_scale"] = Value::from(0.5);
        } else {
            v["spec"]["sim_args"] = serde_json::json!(["--time-scale", "0.5"]);
        }
        let rate = v["spec"]["rate"].as_f64().unwrap();
        v["spec"]["rate"] = Value::from(rate * 2.0);
        let goodput = v["report"]["goodput"]["requests_per_s"].as_f64().unwrap();
        v["report"]["goodput"]["requests_per_s"] = Value::from(goodput * 2.0);
        for dist in ["ttft_us", "tpot_us"] {
            for q in ["p50", "p99"] {
                let scaled = half(&v["report"][dist][q]);
                v["report"][dist][q] = scaled;
            }
        }
    });
    let plain = aggregate::aggregate(&load::load_dir(&fixtures()).expect("fixtures load"));
    let scaled = aggregate::aggregate(&load::load_dir(&dir).expect("scaled files load"));
    assert_eq!(
        plain.workloads.keys().collect::<Vec<_>>(),
        scaled.workloads.keys().collect::<Vec<_>>()
    );
    let mut compared = 0;
    for (workload, rates) in &plain.workloads {
        for (rate, policies) in rates {
            for (policy, p) in policies {
                let s = scaled
                    .get(workload, *rate, policy)
                    .unwrap_or_else(|| panic!("{workload} {rate} {policy}: not at the model rate"));
                let close = |a: f64, b: f64, tol: f64| (a - b).abs() <= tol;
                assert!(close(p.ttft_p99_s.median, s.ttft_p99_s.median, 2e-6));
                assert!(close(p.ttft_p50_s.median, s.ttft_p50_s.median, 2e-6));
                assert!(close(p.goodput.median, s.goodput.median, 1e-9));
                compared += 1;
            }
        }
    }
    assert!(compared >= 10, "{compared} points compared");
    // A time scale that is not a positive number is a one-line error naming the file.
    let bad = scratch("time-scaled-bad");
    copy_fixtures(&bad, |name, v| {
        if name == "w6-r2-cost_model-rep1.json" {
            v["spec"]["time_scale"] = Value::from(-1.0);
        }
    });
    let e = load::load_dir(&bad).unwrap_err().to_string();
    assert!(
        e.contains("w6-r2-cost_model-rep1.json") && e.contains("time scale"),
        "{e}"
    );
}

/// The matrix row of cost_model against `other` at W1 6 req/s.
fn matrix_row(md: &str, other: &str) -> String {
    md.lines()
        .find(|l| l.starts_with(&format!("| W1 | 6 | vs {other} | ")))
        .unwrap_or_else(|| panic!("no matrix row against {other} in\n{md}"))
        .to_string()
}

#[test]
fn matrix_compares_cost_model_with_every_policy_at_every_point() {
    let md = build_per_second(&with_w1_r6_samples("matrix-ahead", 500_000, 800_000))
        .expect("builds")
        .markdown;
    assert!(
        md.contains("## cost_model against every policy at every point"),
        "{md}"
    );
    let row = matrix_row(&md, "peer:llm-d");
    assert!(
        row.contains("| 0.500 [0.494–0.503] | 0.800 [0.791–0.804] | ahead |"),
        "{row}"
    );
    // Policies without samples have no interval: cost_model's p99 is below theirs.
    let rr = matrix_row(&md, "round_robin");
    assert!(rr.contains("| not above (no interval) |"), "{rr}");
    // Every policy but cost_model at every (workload, rate) with cost_model gets a row.
    let t = aggregate::aggregate(&load::load_dir(&fixtures()).expect("loads"));
    let want: usize = t
        .workloads
        .values()
        .flat_map(|rates| rates.values())
        .filter(|pols| pols.contains_key("cost_model"))
        .map(|pols| pols.len() - 1)
        .sum();
    let counted = format!("{want} comparisons: ");
    assert!(md.contains(&counted), "want {counted:?} in\n{md}");
}

#[test]
fn matrix_calls_behind_only_when_the_intervals_separate() {
    let md = build_per_second(&with_w1_r6_samples("matrix-tie", 810_000, 800_000))
        .expect("builds")
        .markdown;
    let row = matrix_row(&md, "peer:llm-d");
    assert!(
        row.contains("| tie |") && row.ends_with("| pass |"),
        "{row}"
    );
    let md = build_per_second(&with_w1_r6_samples("matrix-behind", 832_000, 800_000))
        .expect("builds")
        .markdown;
    let row = matrix_row(&md, "peer:llm-d");
    assert!(
        row.contains("| behind |") && row.ends_with("| **fail** |"),
        "{row}"
    );
}

/// W1 at 6 req/s with samples (cost_model ahead on p99), cost_model's and the peer's goodput
/// set to `cm` and `peer` (met of 360 sent, and req/s) in every repetition.
fn with_w1_r6_goodput(name: &str, cm: (u64, f64), peer: (u64, f64)) -> PathBuf {
    let dir = with_w1_r6_samples(name, 500_000, 800_000);
    for entry in std::fs::read_dir(&dir).expect("scratch") {
        let path = entry.expect("entry").path();
        let file = path
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default()
            .to_string();
        let (met, per_s) = match &file {
            f if f.starts_with("w1-r6-cost_model-") => cm,
            f if f.starts_with("w1-r6-peer_llm-d-") => peer,
            _ => continue,
        };
        let mut v: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
        assert_eq!(v["report"]["sent"], 360);
        v["report"]["goodput"]["requests"] = Value::from(met);
        v["report"]["goodput"]["fraction"] = Value::from(met as f64 / 360.0);
        v["report"]["goodput"]["requests_per_s"] = Value::from(per_s);
        std::fs::write(&path, serde_json::to_vec(&v).expect("json")).expect("write");
    }
    dir
}

#[test]
fn the_share_rule_judges_goodput_by_wilson_intervals_and_the_old_rule_still_reproduces() {
    let share = |dir: &Path| {
        inferrail_bench::report_md::build(dir, GoodputRule::Share)
            .expect("builds")
            .markdown
    };
    // A few requests apart at a share near 1, a little fewer per second: the old rule fails
    // it, the share rule passes it (the two repetitions pool to 700 of 720 and 704 of 720).
    let close = with_w1_r6_goodput("share-close", (350, 5.5), (352, 5.6));
    let old = matrix_row(
        &build_per_second(&close).expect("builds").markdown,
        "peer:llm-d",
    );
    assert!(old.contains("| 5.50 / 5.60 (below) | **fail** |"), "{old}");
    let md = share(&close);
    assert!(md.contains("Wilson score interval"), "the rule is stated");
    let row = matrix_row(&md, "peer:llm-d");
    assert!(
        row.contains("| 0.972 [0.957–0.982] / 0.978 [0.964–0.986] | pass |"),
        "{row}"
    );
    // 300 of 360 against 358 of 360: the intervals separate, whatever the p99 says.
    let far = with_w1_r6_goodput("share-far", (300, 5.9), (358, 5.6));
    let row = matrix_row(&share(&far), "peer:llm-d");
    assert!(
        row.contains("| ahead |") && row.contains("(below) | **fail** |"),
        "{row}"
    );
    // Files that do not say how many met the SLO cannot be judged by shares.
    let row = matrix_row(&share(&fixtures_without_met_counts()), "peer:llm-d");
    assert!(row.contains("n/a / n/a (undecided) | undecided |"), "{row}");
}

/// The fixtures with `goodput.requests` removed from every file (as a file that predates it).
fn fixtures_without_met_counts() -> PathBuf {
    let dir = scratch("share-no-counts");
    copy_fixtures(&dir, |_, v| {
        if let Some(g) = v["report"]["goodput"].as_object_mut() {
            g.remove("requests");
        }
    });
    dir
}

#[test]
fn sensitivity_runs_are_their_own_policy_never_a_repetition() {
    let dir = scratch("sensitivity");
    copy_fixtures(&dir, |name, v| {
        if name == "w1-r6-cost_model-rep2.json" {
            v["spec"]["cost_model_scale"] = Value::from(0.5);
        }
    });
    let t = aggregate::aggregate(&load::load_dir(&dir).expect("loads"));
    let plain = t.get("w1", 6000, "cost_model").expect("the unscaled run");
    let half = t
        .get("w1", 6000, "cost_model x0.5")
        .expect("the sensitivity run");
    assert_eq!(
        (plain.reps.as_slice(), half.reps.as_slice()),
        (&[1][..], &[2][..])
    );
    let md = build_per_second(&dir).expect("builds").markdown;
    assert!(md.contains("| W1 | 6 | vs cost_model x0.5 | "), "{md}");
    // A scale that is not a positive number is a one-line error naming the file.
    let bad = scratch("sensitivity-bad");
    copy_fixtures(&bad, |name, v| {
        if name == "w1-r6-cost_model-rep2.json" {
            v["spec"]["cost_model_scale"] = Value::from(0.0);
        }
    });
    let e = load::load_dir(&bad).unwrap_err().to_string();
    assert!(
        e.contains("w1-r6-cost_model-rep2.json") && e.contains("cost_model_scale"),
        "{e}"
    );
}

#[test]
fn per_coefficient_sensitivity_runs_are_their_own_policy_too() {
    let dir = scratch("sensitivity-factors");
    copy_fixtures(&dir, |name, v| {
        if name == "w1-r6-cost_model-rep2.json" {
            v["spec"]["cost_model_factors"] = serde_json::json!({"prefill_token_secs": 2.0});
        }
    });
    let t = aggregate::aggregate(&load::load_dir(&dir).expect("loads"));
    assert!(t.get("w1", 6000, "cost_model").is_some());
    let doubled = t
        .get("w1", 6000, "cost_model prefill_token_secs x2")
        .expect("the per-coefficient run");
    assert_eq!(doubled.reps.as_slice(), &[2][..]);
    let bad = scratch("sensitivity-factors-bad");
    copy_fixtures(&bad, |name, v| {
        if name == "w1-r6-cost_model-rep2.json" {
            v["spec"]["cost_model_factors"] = serde_json::json!({"prefill_pair_secs": -1.0});
        }
    });
    let e = load::load_dir(&bad).unwrap_err().to_string();
    assert!(
        e.contains("w1-r6-cost_model-rep2.json")
            && e.contains("cost_model_factors.prefill_pair_secs"),
        "{e}"
    );
}
