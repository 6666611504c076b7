//! `inferrail-bench report`: reproducible output, verdicts, aggregation and errors, on the
//! fixtures in `bench/testdata/report/` (W1 at 2, 6, 10 req/s with round_robin, least_request,
//! cost_model and peer:llm-d, two repetitions; W6 at 2 and 6 req/s, one) and variants of them.

use std::path::{Path, PathBuf};

use inferrail_bench::report_md::verdicts::Outcome;
use inferrail_bench::report_md::{
    aggregate, build, load, parse_report_args, write_report, ReportArgs, ReportError,
};
use serde_json::Value;

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
    build(dir).expect("report builds").verdicts
}

#[test]
fn rebuilt_twice_is_byte_identical() {
    let a = scratch("twice-a");
    let b = scratch("twice-b");
    for out in [&a, &b] {
        write_report(&ReportArgs {
            dir: fixtures(),
            out: Some(out.join("REPORT.md")),
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
    let again = build(&copy).expect("copy builds");
    assert_eq!(again, build(&fixtures()).expect("builds"));
    assert!(!text.contains("NaN") && !text.contains(" inf"), "{text}");
}

#[test]
fn report_contents_on_fixtures() {
    let built = build(&fixtures()).expect("builds");
    let md = &built.markdown;
    for want in [
        "## Verdicts",
        "- W1 @ 6 req/s: cost_model p99 TTFT 0.59 s, 79% below round_robin",
        "### W1 @ 10 req/s",
        "### W6 @ 2 req/s",
        "## Peers",
        "| W1 | 6 | peer:llm-d | 0.83 | 4.96 | 79% | 76% | 37% |",
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
    let md = build(&dir).expect("builds").markdown;
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
    let md = build(&dir).expect("builds").markdown;
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
    let md = build(&dir).expect("builds").markdown;
    assert!(
        md.contains("| round_robin | 3 | 0.10 | 2.00 (1.00–5.00) | 18.0 | 1.50 (1.00–2.00) |"),
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
    let e = build(&dir).expect_err("broken file");
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
    let msg = build(&dir).expect_err("missing field").to_string();
    assert!(
        msg.contains("no-ttft.json") && msg.contains("ttft_us") && !msg.contains('\n'),
        "{msg}"
    );
}

#[test]
fn empty_directory_is_an_error() {
    let dir = scratch("empty");
    std::fs::write(dir.join("notes.txt"), "not a result").expect("w");
    let e = build(&dir).expect_err("empty");
    assert!(matches!(e, ReportError::Empty { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with("no *.json result files in "),
        "{e}"
    );
    let missing = build(&dir.join("nope")).expect_err("missing dir");
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
            out: Some("r.md".into())
        }
    );
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
    let md = build(&dir).expect("builds").markdown;
    assert!(
        md.contains("- peer:llm-d: `llm-d-router 9.9 --policy prefix`"),
        "{md}"
    );
    // The engines' share replaces the header-based one (37% in the fixtures) where present.
    assert!(
        md.contains("| W1 | 6 | peer:llm-d | 0.83 | 4.96 | 79% | 76% | 90% |"),
        "{md}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
