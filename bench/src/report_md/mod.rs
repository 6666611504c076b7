//! `inferrail-bench report DIR [--out REPORT.md]`: a Markdown report with SVG charts built from
//! a directory of result files alone, byte for byte the same from the same files (inputs read
//! in name order, every map a `BTreeMap`, fixed number formatting, no timestamps).
//!
//! [`load`] reads the files, [`aggregate`] folds repetitions into medians (with [`bootstrap`]
//! intervals on the p99s), [`verdicts`] judges the targets, [`matrix`] compares cost_model with
//! every policy at every point (goodput shares with [`wilson`] intervals), [`charts`] draws the SVGs and [`markdown`] writes the text.

pub mod aggregate;
pub mod bootstrap;
pub mod charts;
pub mod load;
pub mod markdown;
pub mod matrix;
mod num;
pub mod verdicts;
pub mod wilson;

use std::path::{Path, PathBuf};

use crate::args::{invalid, ArgsError};

/// Usage of `inferrail-bench report`.
pub const REPORT_USAGE: &str = "\
usage: inferrail-bench report DIR [--out REPORT.md] [--goodput per-second|share]

Reads every *.json result file directly in DIR and writes a Markdown report (default
DIR/report.md) with SVG charts in charts/ next to it. The same files always give the same bytes.

--goodput  how the matrix of cost_model against every policy judges goodput (the rule each
           sweep registered before it ran): per-second (default; perf/results/sweep-fair):
           below when cost_model's req/s is below at all; share (perf/results/sweep-fair2):
           the share of sent requests that met the SLO, below when the 95% Wilson intervals
           separate.
";

/// Why a report could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The directory could not be listed.
    #[error("reading directory {}: {source}", dir.display())]
    ReadDir {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The directory holds no `*.json` file.
    #[error("no *.json result files in {}", dir.display())]
    Empty {
        /// The directory.
        dir: PathBuf,
    },
    /// A file could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not a result file.
    #[error("{}: not a result file: {reason}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong (one line).
        reason: String,
    },
    /// A chart could not be drawn.
    #[error("drawing chart {chart:?}: {reason}")]
    Chart {
        /// The chart's title.
        chart: String,
        /// The cause.
        reason: String,
    },
    /// An output could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// The arguments of `report`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportArgs {
    /// Directory of result files.
    pub dir: PathBuf,
    /// Where the Markdown goes (`None`: `DIR/report.md`).
    pub out: Option<PathBuf>,
    /// How the matrix judges goodput.
    pub goodput: matrix::GoodputRule,
}

/// Parses `DIR [--out REPORT.md] [--goodput per-second|share]` (the words after `report`).
pub fn parse_report_args(args: impl IntoIterator<Item = String>) -> Result<ReportArgs, ArgsError> {
    let mut dir = None;
    let mut out = None;
    let mut goodput = matrix::GoodputRule::default();
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "-h" | "--help" => return Err(ArgsError::Help),
            "--out" => {
                let v = args
                    .next()
                    .ok_or_else(|| ArgsError::MissingValue(a.clone()))?;
                out = Some(PathBuf::from(v));
            }
            "--goodput" => {
                let v = args
                    .next()
                    .ok_or_else(|| ArgsError::MissingValue(a.clone()))?;
                goodput = matrix::GoodputRule::parse(&v)
                    .ok_or_else(|| invalid("--goodput", "must be per-second or share"))?;
            }
            s if s.starts_with('-') => return Err(ArgsError::UnknownFlag(a)),
            _ if dir.is_some() => return Err(invalid("DIR", "given twice")),
            _ => dir = Some(PathBuf::from(a)),
        }
    }
    Ok(ReportArgs {
        dir: dir.ok_or(ArgsError::Required("DIR"))?,
        out,
        goodput,
    })
}

/// A built report, not yet written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    /// The Markdown.
    pub markdown: String,
    /// The charts, in the order the Markdown references them.
    pub charts: Vec<charts::Chart>,
    /// The verdicts, as in the Markdown.
    pub verdicts: Vec<(String, verdicts::Outcome)>,
}

/// The directory, relative to the Markdown file, the charts go into.
pub const CHART_DIR: &str = "charts";

/// Builds the report from the result files in `dir`, the matrix's goodput judged by `goodput`
/// (nothing is written).
pub fn build(dir: &Path, goodput: matrix::GoodputRule) -> Result<Built, ReportError> {
    let files = load::load_dir(dir)?;
    let table = aggregate::aggregate(&files);
    let verdicts = verdicts::verdicts(&table);
    let mut per_workload = Vec::new();
    for w in table.workloads.keys() {
        per_workload.push((w.clone(), charts::workload_charts(&table, w)?));
    }
    let markdown = markdown::render(
        &table,
        files.len(),
        &verdicts,
        &per_workload,
        CHART_DIR,
        goodput,
    );
    Ok(Built {
        markdown,
        charts: per_workload.into_iter().flat_map(|(_, c)| c).collect(),
        verdicts: verdicts
            .into_iter()
            .map(|v| (v.target, v.outcome))
            .collect(),
    })
}

/// Builds the report from `args.dir` and writes it: the Markdown to `args.out` (default
/// `DIR/report.md`), the charts to `charts/` beside it. Returns the Markdown's path.
pub fn write_report(args: &ReportArgs) -> Result<PathBuf, ReportError> {
    let built = build(&args.dir, args.goodput)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.dir.join("report.md"));
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let chart_dir = parent.join(CHART_DIR);
    let werr = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReportError::Write { path, source }
    };
    std::fs::create_dir_all(&chart_dir).map_err(werr(&chart_dir))?;
    for c in &built.charts {
        let p = chart_dir.join(&c.file);
        std::fs::write(&p, &c.svg).map_err(werr(&p))?;
    }
    std::fs::write(&out, &built.markdown).map_err(werr(&out))?;
    Ok(out)
}
