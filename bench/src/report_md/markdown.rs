//! The Markdown text of the report: verdicts, headlines, per-workload charts and tables, peers.

use std::fmt::Write as _;

use super::aggregate::{rate_of, Agg, PolicyPoint, RateKey, Table};
use super::bootstrap::{Interval, Separation, LEVEL, RESAMPLES, SEED};
use super::charts::Chart;
use super::num::{fixed, pct, rate, secs};
use super::verdicts::{Verdict, CACHE_AWARE, PEER_PREFIX, PEER_RULE, ROUND_ROBIN};

/// `median (min–max)` when repetitions differ, else the median alone.
fn cell(a: &Agg, f: impl Fn(f64) -> String) -> String {
    if a.n > 1 && a.min != a.max {
        format!("{} ({}–{})", f(a.median), f(a.min), f(a.max))
    } else {
        f(a.median)
    }
}

/// An interval as `lo–hi` with `decimals` decimals, `n/a` without one.
fn ci_cell(ci: Option<Interval>, decimals: usize) -> String {
    ci.map_or_else(
        || "n/a".to_string(),
        |i| format!("{}–{}", fixed(i.lo, decimals), fixed(i.hi, decimals)),
    )
}

/// What two p99 intervals say about a difference, for a headline.
fn ci_words(a: Option<Interval>, b: Option<Interval>) -> &'static str {
    match (a, b) {
        (Some(a), Some(b)) if a.separation(b) == Separation::Overlap => {
            "95% intervals overlap: no difference called"
        }
        (Some(_), Some(_)) => "95% intervals separate",
        _ => "no intervals",
    }
}

fn esc(s: &str) -> String {
    s.replace('|', "\\|")
}

fn upper(workload: &str) -> String {
    workload.to_uppercase()
}

/// The one-line headline of a point: the cache-aware policy's p99 TTFT against round_robin
/// (or, without it, the first other policy in name order), and whether their 95 % intervals
/// separate (only then is the difference a difference).
pub fn headline(t: &Table, workload: &str, r: RateKey) -> Option<String> {
    let pols = t.workloads.get(workload)?.get(&r)?;
    let head = format!("{} @ {} req/s", upper(workload), rate(rate_of(r)));
    let Some(cm) = pols.get(CACHE_AWARE) else {
        let (name, best) = pols
            .iter()
            .min_by(|a, b| a.1.ttft_p99_s.median.total_cmp(&b.1.ttft_p99_s.median))?;
        return Some(format!(
            "{head}: best p99 TTFT {name} {}",
            secs(best.ttft_p99_s.median)
        ));
    };
    let cm99 = cm.ttft_p99_s.median;
    let base = pols
        .get_key_value(ROUND_ROBIN)
        .or_else(|| pols.iter().find(|(n, _)| n.as_str() != CACHE_AWARE));
    let Some((bname, b)) = base else {
        return Some(format!("{head}: {CACHE_AWARE} p99 TTFT {}", secs(cm99)));
    };
    let b99 = b.ttft_p99_s.median;
    if b99 <= 0.0 {
        return Some(format!(
            "{head}: {CACHE_AWARE} p99 TTFT {}, {bname} {}",
            secs(cm99),
            secs(b99)
        ));
    }
    let d = cm99 / b99 - 1.0;
    let dir = if d <= 0.0 { "below" } else { "above" };
    Some(format!(
        "{head}: {CACHE_AWARE} p99 TTFT {}, {} {dir} {bname} ({})",
        secs(cm99),
        pct(d.abs()),
        ci_words(cm.ttft_p99_ci_s, b.ttft_p99_ci_s)
    ))
}

fn point_table(out: &mut String, pols: &std::collections::BTreeMap<String, PolicyPoint>) {
    out.push_str(
        "| policy | reps | TTFT p50 (s) | TTFT p99 (s) | TTFT p99 95% CI (s) | TPOT p50 (ms) \
         | TPOT p99 (ms) | TPOT p99 95% CI (ms) | goodput (req/s) | hit rate (engine) \
         | hit rate (usage) | busiest share | errors |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let f2 = |x: f64| fixed(x, 2);
    let f1 = |x: f64| fixed(x, 1);
    let f0 = |x: f64| fixed(x, 0);
    for (name, p) in pols {
        let engine = p
            .engine_hit_rate
            .as_ref()
            .map_or_else(|| "N/A".to_string(), |a| cell(a, pct));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            esc(name),
            p.reps.len(),
            cell(&p.ttft_p50_s, f2),
            cell(&p.ttft_p99_s, f2),
            ci_cell(p.ttft_p99_ci_s, 2),
            cell(&p.tpot_p50_ms, f1),
            cell(&p.tpot_p99_ms, f1),
            ci_cell(p.tpot_p99_ci_ms, 1),
            cell(&p.goodput, f2),
            engine,
            cell(&p.usage_hit_rate, pct),
            cell(&p.busiest_share, pct),
            cell(&p.errors, f0),
        );
    }
}

fn peers_section(out: &mut String, t: &Table) {
    let mut rows = String::new();
    for (w, rates) in &t.workloads {
        for (r, pols) in rates {
            if !pols.keys().any(|p| p.starts_with(PEER_PREFIX)) {
                continue;
            }
            for (name, p) in pols
                .iter()
                .filter(|(n, _)| n.as_str() == CACHE_AWARE || n.starts_with(PEER_PREFIX))
            {
                let engine = p
                    .engine_hit_rate
                    .map_or_else(|| "N/A".to_string(), |a| pct(a.median));
                let _ = writeln!(
                    rows,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    upper(w),
                    rate(rate_of(*r)),
                    esc(name),
                    fixed(p.ttft_p99_s.median, 2),
                    ci_cell(p.ttft_p99_ci_s, 2),
                    fixed(p.goodput.median, 2),
                    engine,
                    pct(p.usage_hit_rate.median),
                    pct(p.busiest_share.median),
                );
            }
        }
    }
    if rows.is_empty() {
        return;
    }
    out.push_str("## Peers\n\n");
    for (policy, fronts) in t.fronts.iter().filter(|(p, _)| p.starts_with(PEER_PREFIX)) {
        let programs: Vec<String> = fronts.iter().map(|f| format!("`{}`", esc(f))).collect();
        let _ = writeln!(out, "- {}: {}", esc(policy), programs.join(", "));
    }
    if t.fronts.keys().any(|p| p.starts_with(PEER_PREFIX)) {
        out.push('\n');
    }
    out.push_str(
        "| workload | req/s | policy | TTFT p99 (s) | TTFT p99 95% CI (s) | goodput (req/s) \
         | hit rate (engine) | hit rate (usage) | busiest share |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    out.push_str(&rows);
    out.push('\n');
}

/// The whole report (the matrix's goodput judged by `goodput`). `charts` are each workload's charts, in `t.workloads` order, referenced
/// as `{chart_dir}/{file}`.
pub fn render(
    t: &Table,
    files: usize,
    verdicts: &[Verdict],
    charts: &[(String, Vec<Chart>)],
    chart_dir: &str,
    goodput: super::matrix::GoodputRule,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Inferrail benchmark report\n\n\
         Built by `inferrail-bench report` from {files} result files ({} workloads). Each \
         figure is the median over repetitions; `median (min–max)` shows the range where \
         repetitions differ. Hit rate (engine) is the engines' prefix-cache hits over queries; \
         hit rate (usage) is `cached_tokens / prompt_tokens` as clients saw it.\n",
        t.workloads.len()
    );
    let _ = writeln!(
        out,
        "**Intervals.** A p99's 95% CI is a percentile bootstrap ({RESAMPLES} resamples, \
         {}% level, seed {SEED:#x}): each resample redraws every repetition's requests from that \
         repetition alone and takes the median of the repetitions' p99s, as the figure itself \
         is taken. `n/a`: the result files keep no per-request samples (written before they \
         were kept). A comparison calls a difference only when the two intervals separate.\n",
        fixed(LEVEL * 100.0, 0)
    );

    let _ = writeln!(out, "## Verdicts\n\n**Peer rule.** {PEER_RULE}\n");
    out.push_str("| target | verdict | numbers |\n|---|---|---|\n");
    for v in verdicts {
        let _ = writeln!(
            out,
            "| {} | **{}** | {} |",
            esc(&v.target),
            v.outcome,
            esc(&v.detail)
        );
    }
    out.push('\n');
    super::matrix::section(&mut out, &super::matrix::comparisons(t, goodput), goodput);

    out.push_str("## Headlines\n\n");
    for (w, rates) in &t.workloads {
        for r in rates.keys() {
            if let Some(h) = headline(t, w, *r) {
                let _ = writeln!(out, "- {h}");
            }
        }
    }
    out.push('\n');

    for (w, rates) in &t.workloads {
        let _ = writeln!(out, "## {}\n", upper(w));
        if let Some((_, cs)) = charts.iter().find(|(cw, _)| cw == w) {
            for c in cs {
                let _ = writeln!(out, "![{}]({chart_dir}/{})\n", c.title, c.file);
            }
        }
        for (r, pols) in rates {
            let _ = writeln!(out, "### {} @ {} req/s\n", upper(w), rate(rate_of(*r)));
            point_table(&mut out, pols);
            out.push('\n');
        }
    }
    peers_section(&mut out, t);
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}
