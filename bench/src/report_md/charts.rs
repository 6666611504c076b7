//! The report's line charts, drawn by `plotters` into SVG strings (no fonts are read: text is
//! emitted as SVG `<text>` and sized by plotters' built-in estimate, so the same data always
//! gives the same bytes).

use plotters::prelude::*;

use super::aggregate::{rate_of, Agg, PolicyPoint, Table};
use super::ReportError;

/// Chart size in pixels.
const SIZE: (u32, u32) = (720, 420);

/// Line colours, by the policy's position in the workload's sorted policy list.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// One chart file: its name under `charts/` and its SVG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chart {
    /// File name, e.g. `w1-p99-ttft.svg`.
    pub file: String,
    /// What it shows (the Markdown image's alt text).
    pub title: String,
    /// The SVG document.
    pub svg: String,
}

/// The figures charted against offered load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// p99 TTFT, s.
    P99Ttft,
    /// Goodput, req/s.
    Goodput,
    /// Engine prefix-cache hit rate (usage hit rate where no engine counters).
    HitRate,
    /// Busiest replica's share.
    BusiestShare,
}

impl Metric {
    /// All, in report order.
    pub const ALL: [Metric; 4] = [
        Metric::P99Ttft,
        Metric::Goodput,
        Metric::HitRate,
        Metric::BusiestShare,
    ];

    fn slug(self) -> &'static str {
        match self {
            Metric::P99Ttft => "p99-ttft",
            Metric::Goodput => "goodput",
            Metric::HitRate => "hit-rate",
            Metric::BusiestShare => "busiest-share",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Metric::P99Ttft => "p99 TTFT (s)",
            Metric::Goodput => "goodput (req/s)",
            Metric::HitRate => "prefix hit rate (engine; usage if none)",
            Metric::BusiestShare => "busiest replica share",
        }
    }

    fn value(self, p: &PolicyPoint) -> f64 {
        let agg: Agg = match self {
            Metric::P99Ttft => p.ttft_p99_s,
            Metric::Goodput => p.goodput,
            Metric::HitRate => p.engine_hit_rate.unwrap_or(p.usage_hit_rate),
            Metric::BusiestShare => p.busiest_share,
        };
        agg.median
    }

    /// Fractions are drawn on 0..1.
    fn is_fraction(self) -> bool {
        matches!(self, Metric::HitRate | Metric::BusiestShare)
    }
}

/// A file-name-safe form of a workload or policy name.
pub fn slug(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The four charts of `workload`: one line per policy, a point per rate (the median over
/// repetitions).
pub fn workload_charts(t: &Table, workload: &str) -> Result<Vec<Chart>, ReportError> {
    Metric::ALL
        .iter()
        .map(|&m| {
            let title = format!(
                "{} {} against offered load",
                workload.to_uppercase(),
                m.label()
            );
            let series = series(t, workload, m);
            let svg = draw(&title, m, &series).map_err(|e| ReportError::Chart {
                chart: title.clone(),
                reason: e,
            })?;
            Ok(Chart {
                file: format!("{}-{}.svg", slug(workload), m.slug()),
                title,
                svg,
            })
        })
        .collect()
}

type Series = Vec<(String, Vec<(f64, f64)>)>;

fn series(t: &Table, workload: &str, m: Metric) -> Series {
    let Some(rates) = t.workloads.get(workload) else {
        return Vec::new();
    };
    t.policies(workload)
        .into_iter()
        .map(|p| {
            let pts = rates
                .iter()
                .filter_map(|(r, pols)| pols.get(&p).map(|pt| (rate_of(*r), m.value(pt))))
                .collect();
            (p, pts)
        })
        .collect()
}

fn draw(title: &str, m: Metric, series: &Series) -> Result<String, String> {
    let xs = series.iter().flat_map(|(_, p)| p.iter().map(|&(x, _)| x));
    let (mut x0, mut x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 - x0 < 1e-9 {
        (x0, x1) = ((x0 - 1.0).max(0.0), x1 + 1.0);
    }
    let pad = (x1 - x0) * 0.05;
    let (x0, x1) = ((x0 - pad).max(0.0), x1 + pad);
    let ymax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .fold(0.0_f64, f64::max);
    let y1 = if m.is_fraction() {
        1.05
    } else if ymax > 0.0 {
        ymax * 1.1
    } else {
        1.0
    };

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(x0..x1, 0.0..y1)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("offered load (req/s)")
            .y_desc(m.label())
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    svg.push('\n');
    Ok(svg)
}
