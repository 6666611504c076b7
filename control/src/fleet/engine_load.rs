//! Parsing an inference engine's Prometheus `/metrics` page into an [`EngineLoad`] report.
//!
//! This is the pure parser only: the caller fetches the page (and caps its size); [`parse`]
//! reads the bytes in one linear pass, allocates only for the few series it keeps, and never
//! panics, whatever the bytes are.
//!
//! # Engines and families
//!
//! The engine is recognized by metric prefix: any `vllm:` sample makes the page a vLLM page,
//! otherwise any `sglang:` sample makes it an SGLang page, otherwise it is
//! [`EngineLoadError::UnknownEngine`].
//!
//! | field                  | vLLM (0.32)                                | SGLang                                   |
//! |------------------------|--------------------------------------------|------------------------------------------|
//! | `running`              | `vllm:num_requests_running`                | `sglang:num_running_reqs`                |
//! | `waiting`              | `vllm:num_requests_waiting`                | `sglang:num_queue_reqs`                  |
//! | `kv_cache_usage`       | `vllm:kv_cache_usage_perc`                 | `sglang:token_usage`                     |
//! | `prefix_cache_queries` | `vllm:prefix_cache_queries_total`          | `sglang:prompt_tokens_total`             |
//! | `prefix_cache_hits`    | `vllm:prefix_cache_hits_total`             | `sglang:cached_tokens_total`             |
//! | `preemptions`          | `vllm:num_preemptions_total`               | `sglang:num_retracted_requests_total` (optional, 0 if absent) |
//! | `kv_capacity_blocks`   | `vllm:cache_config_info{num_gpu_blocks}`   | `sglang:max_total_num_tokens` (optional) |
//!
//! Every family without "optional" is required: a page that lacks one (or whose samples of it
//! are all non-finite) is [`EngineLoadError::Unreadable`] naming the missing families, never an
//! idle engine. SGLang's `num_retracted_requests_total` counter only exists in recent releases,
//! so it is not required. SGLang's KV pool is allocated per token (page size 1 by default), so
//! its capacity is reported in tokens, i.e. blocks of one token. SGLang's `cache_hit_rate` gauge
//! is a windowed ratio, not a counter, so the prefix figures come from the token counters.
//!
//! # Aggregation
//!
//! Data-parallel ranks (vLLM's `engine` label, SGLang's `dp_rank`/`tp_rank`/`pp_rank`/...) each
//! export their own series of a family; counts and counters are summed over them. KV usage is a
//! per-rank fraction, so it is averaged: weighted by each rank's capacity when every usage series
//! can be matched by its rank labels to a positive capacity, else a plain mean over the series.
//! The result is clamped to `0..=1`. Series that carry a `priority` label (SGLang's per-priority
//! breakdowns) are skipped so that requests are not counted twice. Non-finite samples (`NaN`,
//! `±Inf`) are ignored; negative samples count as 0.
//!
//! # Syntax accepted
//!
//! Prometheus text format 0.0.4 and OpenMetrics text: `#` lines (`HELP`, `TYPE`, `EOF`) are
//! skipped, label values may contain escaped quotes, backslashes, commas and braces, values may
//! be `NaN`/`+Inf`/`-Inf`/exponent floats, a trailing timestamp is allowed, and lines may end in
//! CRLF. A malformed line is skipped on its own; it never fails the page.

use std::fmt;

/// Which engine produced the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// vLLM (`vllm:` metrics).
    Vllm,
    /// SGLang (`sglang:` metrics).
    Sglang,
}

impl EngineKind {
    /// `vllm` or `sglang`.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vllm",
            EngineKind::Sglang => "sglang",
        }
    }
}

/// An engine's self-reported load, summed over its data-parallel ranks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineLoad {
    /// The engine that produced the page.
    pub engine: EngineKind,
    /// Requests currently running (in the batch).
    pub running: f64,
    /// Requests queued, not yet scheduled.
    pub waiting: f64,
    /// Fraction of the KV cache in use, `0..=1` (capacity-weighted mean over ranks).
    pub kv_cache_usage: f64,
    /// Prefix-cache queries (tokens looked up), a monotonic counter.
    pub prefix_cache_queries: f64,
    /// Prefix-cache hits (tokens found cached), a monotonic counter.
    pub prefix_cache_hits: f64,
    /// Preemptions (SGLang: retractions), a monotonic counter.
    pub preemptions: f64,
    /// KV cache capacity in blocks, summed over ranks, when the page states it.
    pub kv_capacity_blocks: Option<u64>,
}

/// Why a page gave no [`EngineLoad`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineLoadError {
    /// The engine was recognized but these required families were absent (or had no finite
    /// sample).
    Unreadable {
        /// Full metric names of the missing families, in table order.
        missing: Vec<&'static str>,
    },
    /// No `vllm:` or `sglang:` sample on the page.
    UnknownEngine,
}

impl fmt::Display for EngineLoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineLoadError::Unreadable { missing } => {
                write!(f, "metrics page unreadable: missing {}", missing.join(", "))
            }
            EngineLoadError::UnknownEngine => f.write_str("metrics page names no known engine"),
        }
    }
}

impl std::error::Error for EngineLoadError {}

// Field slots, shared by both engines.
const RUNNING: usize = 0;
const WAITING: usize = 1;
const USAGE: usize = 2;
const QUERIES: usize = 3;
const HITS: usize = 4;
const PREEMPT: usize = 5;
const CAPACITY: usize = 6;
const SLOTS: usize = 7;

struct Spec {
    /// Family names by slot.
    names: [&'static str; SLOTS],
    /// Whether the slot's family must be present.
    required: [bool; SLOTS],
}

const VLLM: Spec = Spec {
    names: [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
        "vllm:cache_config_info",
    ],
    required: [true, true, true, true, true, true, false],
};

const SGLANG: Spec = Spec {
    names: [
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:prompt_tokens_total",
        "sglang:cached_tokens_total",
        "sglang:num_retracted_requests_total",
        "sglang:max_total_num_tokens",
    ],
    required: [true, true, true, true, true, false, false],
};

/// Labels that identify a rank; their values, in this order, key a series to its rank.
const RANK_LABELS: [&[u8]; 5] = [
    b"engine",
    b"dp_rank",
    b"tp_rank",
    b"pp_rank",
    b"moe_ep_rank",
];

/// Accumulated samples of one engine's families.
#[derive(Default)]
struct Acc {
    /// Whether any sample with the engine's prefix was seen.
    seen: bool,
    /// Finite-sample count per slot.
    count: [usize; SLOTS],
    /// Sum per slot (usage and capacity handled separately).
    sum: [f64; SLOTS],
    /// Usage samples: (rank key, value).
    usage: Vec<(Vec<u8>, f64)>,
    /// Capacity samples: (rank key, blocks); `None` when a capacity series was unparseable.
    capacity: Vec<(Vec<u8>, Option<u64>)>,
}

/// Parses an engine's `/metrics` page. Linear in the page length; never panics.
pub fn parse(page: &[u8]) -> Result<EngineLoad, EngineLoadError> {
    let mut vllm = Acc::default();
    let mut sglang = Acc::default();
    // The name of the last line skipped as unread, with the byte that ended it: a histogram's
    // bucket lines follow one another under one name, and a line that starts with the same
    // name and end byte has that name, so it is skipped on one comparison.
    let mut skipped: &[u8] = &[];
    for raw in lines(page) {
        let line = trim_start(raw.strip_suffix(b"\r").unwrap_or(raw));
        if !skipped.is_empty() && line.starts_with(skipped) {
            continue;
        }
        let (spec, acc, engine) = match line.first() {
            Some(b'v') if line.starts_with(b"vllm:") => (&VLLM, &mut vllm, EngineKind::Vllm),
            Some(b's') if line.starts_with(b"sglang:") => {
                (&SGLANG, &mut sglang, EngineKind::Sglang)
            }
            // `#` lines, blank lines and other exporters' families.
            _ => continue,
        };
        // Most of a page is histogram buckets of families not read here: once the engine is
        // known, such a line is skipped on its name alone, without parsing its labels or value.
        let name = metric_name(line);
        let slot = spec.names.iter().position(|n| n.as_bytes() == name);
        if slot.is_none() && acc.seen {
            // The name and the `{`, space or tab after it (a line of the bare name is not kept).
            skipped = line.get(..name.len() + 1).unwrap_or_default();
            continue;
        }
        let Some(sample) = parse_line(line) else {
            continue;
        };
        acc.seen = true;
        let Some(slot) = slot else {
            continue;
        };
        add_sample(acc, engine, slot, &sample);
    }
    if vllm.seen {
        finish(EngineKind::Vllm, &VLLM, vllm)
    } else if sglang.seen {
        finish(EngineKind::Sglang, &SGLANG, sglang)
    } else {
        Err(EngineLoadError::UnknownEngine)
    }
}

/// The sum of every finite sample named exactly `name` (e.g.
/// `vllm:time_to_first_token_seconds_sum`) over all its series, read with the same line syntax
/// as [`parse`]; `None` when the page has no finite sample of it. For families [`parse`] does
/// not report (histogram sums and counts).
pub fn sample_sum(page: &[u8], name: &str) -> Option<f64> {
    samples(page, name)
        .filter_map(|s| s.value.filter(|v| v.is_finite()))
        .fold(None, |acc, v| Some(acc.unwrap_or(0.0) + v))
}

/// The value of label `label` on the first sample named `name` that has it, as written
/// (escapes kept), e.g. `block_size` of `vllm:cache_config_info`.
pub fn label_value(page: &[u8], name: &str, label: &str) -> Option<String> {
    samples(page, name)
        .find_map(|s| s.label(label.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The well-formed sample lines named `name`.
fn samples<'a>(page: &'a [u8], name: &'a str) -> impl Iterator<Item = Sample<'a>> + 'a {
    lines(page)
        .map(|raw| trim_start(raw.strip_suffix(b"\r").unwrap_or(raw)))
        .filter(move |line| line.starts_with(name.as_bytes()))
        .filter_map(parse_line)
        .filter(move |s| s.name == name.as_bytes())
}

fn add_sample(acc: &mut Acc, engine: EngineKind, slot: usize, sample: &Sample<'_>) {
    if sample.labels.iter().any(|(k, _)| contains(k, b"priority")) {
        return;
    }
    if slot == CAPACITY {
        let blocks = match engine {
            // An info metric: the capacity is a label, the value is always 1.
            EngineKind::Vllm => sample
                .label(b"num_gpu_blocks")
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse::<u64>().ok()),
            EngineKind::Sglang => match sample.value {
                Some(v) if (0.0..1.8e19).contains(&v) => Some(v as u64),
                _ => None,
            },
        };
        acc.count[slot] += 1;
        acc.capacity.push((sample.rank_key(), blocks));
        return;
    }
    let Some(v) = sample.value.filter(|v| v.is_finite()) else {
        return;
    };
    let v = v.max(0.0);
    acc.count[slot] += 1;
    if slot == USAGE {
        acc.usage.push((sample.rank_key(), v));
    } else {
        acc.sum[slot] += v;
    }
}

fn finish(engine: EngineKind, spec: &Spec, acc: Acc) -> Result<EngineLoad, EngineLoadError> {
    let missing: Vec<&'static str> = (0..SLOTS)
        .filter(|&s| spec.required[s] && acc.count[s] == 0)
        .map(|s| spec.names[s])
        .collect();
    if !missing.is_empty() {
        return Err(EngineLoadError::Unreadable { missing });
    }
    let kv_capacity_blocks = if acc.capacity.is_empty() {
        None
    } else {
        acc.capacity
            .iter()
            .try_fold(0u64, |total, (_, b)| b.and_then(|b| total.checked_add(b)))
    };
    Ok(EngineLoad {
        engine,
        running: acc.sum[RUNNING],
        waiting: acc.sum[WAITING],
        kv_cache_usage: mean_usage(&acc.usage, &acc.capacity),
        prefix_cache_queries: acc.sum[QUERIES],
        prefix_cache_hits: acc.sum[HITS],
        preemptions: acc.sum[PREEMPT],
        kv_capacity_blocks,
    })
}

/// Capacity-weighted mean when every usage series matches a positive capacity by rank key,
/// else the plain mean. Clamped to `0..=1`. Quadratic only in the number of ranks, which the
/// page can inflate; beyond 64 usage series the plain mean is used to stay linear.
fn mean_usage(usage: &[(Vec<u8>, f64)], capacity: &[(Vec<u8>, Option<u64>)]) -> f64 {
    if usage.is_empty() {
        return 0.0;
    }
    let weighted = if usage.len() <= 64 && capacity.len() <= 64 {
        let mut num = 0.0;
        let mut den = 0.0;
        let mut ok = true;
        for (key, u) in usage {
            match capacity.iter().find(|(k, _)| k == key) {
                Some((_, Some(c))) if *c > 0 => {
                    num += u * *c as f64;
                    den += *c as f64;
                }
                _ => {
                    ok = false;
                    break;
                }
            }
        }
        (ok && den > 0.0).then(|| num / den)
    } else {
        None
    };
    let mean =
        weighted.unwrap_or_else(|| usage.iter().map(|(_, u)| u).sum::<f64>() / usage.len() as f64);
    if mean.is_finite() {
        mean.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// One sample line, borrowed from the page. Label values stay escaped.
struct Sample<'a> {
    name: &'a [u8],
    labels: Vec<(&'a [u8], &'a [u8])>,
    /// `None` when the value token is not a number.
    value: Option<f64>,
}

impl<'a> Sample<'a> {
    fn label(&self, key: &[u8]) -> Option<&'a [u8]> {
        self.labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn rank_key(&self) -> Vec<u8> {
        let mut key = Vec::new();
        for name in RANK_LABELS {
            key.extend_from_slice(self.label(name).unwrap_or(b""));
            key.push(0);
        }
        key
    }
}

/// The metric name a sample line starts with: up to its labels or its value.
fn metric_name(line: &[u8]) -> &[u8] {
    let end = memchr::memchr3(b'{', b' ', b'\t', line).unwrap_or(line.len());
    &line[..end]
}

/// The page's lines, without their `\n` (a final line without one included).
fn lines(page: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(page);
    std::iter::from_fn(move || {
        let page = rest?;
        match memchr::memchr(b'\n', page) {
            Some(at) => {
                rest = Some(&page[at + 1..]);
                Some(&page[..at])
            }
            None => {
                rest = None;
                Some(page)
            }
        }
    })
}

/// Parses `name{k="v",...} value [timestamp]`. `None` on any malformation.
fn parse_line(line: &[u8]) -> Option<Sample<'_>> {
    let name = metric_name(line);
    let name_end = name.len();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if rest.first() == Some(&b'{') {
        rest = &rest[1..];
        loop {
            rest = trim_start(rest);
            match rest.first() {
                Some(b'}') => {
                    rest = &rest[1..];
                    break;
                }
                Some(b',') => {
                    rest = &rest[1..];
                    continue;
                }
                Some(_) => {}
                None => return None,
            }
            let eq = rest
                .iter()
                .position(|&b| b == b'=' || b == b'}' || b == b',')?;
            if rest[eq] != b'=' {
                return None;
            }
            let key = trim_end(&rest[..eq]);
            rest = trim_start(&rest[eq + 1..]);
            if rest.first() != Some(&b'"') {
                return None;
            }
            rest = &rest[1..];
            let close = closing_quote(rest)?;
            labels.push((key, &rest[..close]));
            rest = &rest[close + 1..];
        }
    }
    let rest = trim_start(rest);
    let value_end = rest
        .iter()
        .position(|&b| b == b' ' || b == b'\t')
        .unwrap_or(rest.len());
    let token = &rest[..value_end];
    if token.is_empty() {
        return None;
    }
    // The timestamp, if any, is ignored.
    let value = std::str::from_utf8(token)
        .ok()
        .and_then(|t| t.parse::<f64>().ok());
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// Index of the unescaped `"` closing a label value.
fn closing_quote(s: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

fn trim_start(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| **b == b' ' || **b == b'\t').count();
    &s[n..]
}

fn trim_end(s: &[u8]) -> &[u8] {
    let n = s
        .iter()
        .rev()
        .take_while(|b| **b == b' ' || **b == b'\t')
        .count();
    &s[..s.len() - n]
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: [(&str, &str); 4] = [
        (
            "00_metrics_before",
            include_str!("../../tests/fixtures/engine_load/00_metrics_before.body"),
        ),
        (
            "57_metrics_after_evictions",
            include_str!("../../tests/fixtures/engine_load/57_metrics_after_evictions.body"),
        ),
        (
            "60_metrics_after",
            include_str!("../../tests/fixtures/engine_load/60_metrics_after.body"),
        ),
        (
            "61_metrics_after_openmetrics",
            include_str!("../../tests/fixtures/engine_load/61_metrics_after_openmetrics.body"),
        ),
    ];

    #[test]
    fn engine_load_vllm_fixtures() {
        // Values as printed on each page (single engine "0", num_gpu_blocks="128").
        let expect = [
            (0.0, 0.0),
            (6720.0, 832.0),
            (6937.0, 832.0),
            (6937.0, 832.0),
        ];
        for ((name, page), (queries, hits)) in FIXTURES.iter().zip(expect) {
            let load = parse(page.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                load,
                EngineLoad {
                    engine: EngineKind::Vllm,
                    running: 0.0,
                    waiting: 0.0,
                    kv_cache_usage: 0.0,
                    prefix_cache_queries: queries,
                    prefix_cache_hits: hits,
                    preemptions: 0.0,
                    kv_capacity_blocks: Some(128),
                },
                "{name}"
            );
            // The same page with CRLF line ends parses the same.
            let crlf = page.replace('\n', "\r\n");
            assert_eq!(parse(crlf.as_bytes()), Ok(load), "{name} crlf");
        }
    }

    const TWO_RANKS: &str = "\
# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
# TYPE vllm:num_requests_running gauge\n\
vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n\
vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 5.0\n\
vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 1.0 1700000000000\n\
vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 2e0\n\
vllm:num_requests_waiting_by_reason{engine=\"0\",model_name=\"m\",reason=\"capacity\"} 9.0\n\
vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n\
vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 1.0\n\
vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 1.5e3\n\
vllm:prefix_cache_queries_total{engine=\"1\",model_name=\"m\"} 500.0\n\
vllm:prefix_cache_queries_created{engine=\"0\",model_name=\"m\"} 1.79e+09\n\
vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 100.0\n\
vllm:prefix_cache_hits_total{engine=\"1\",model_name=\"m\"} NaN\n\
vllm:prefix_cache_hits_total{engine=\"1\",model_name=\"m\"} 50.0\n\
vllm:num_preemptions_total{engine=\"0\",model_name=\"m\"} 1.0\n\
vllm:num_preemptions_total{engine=\"1\",model_name=\"m\"} +Inf\n\
vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"300\",odd=\"a\\\"b,c}\"} 1.0\n\
vllm:cache_config_info{block_size=\"16\",engine=\"1\",num_gpu_blocks=\"100\"} 1.0\n";

    #[test]
    fn engine_load_vllm_two_ranks_summed() {
        let load = parse(TWO_RANKS.as_bytes()).unwrap();
        assert_eq!(load.engine, EngineKind::Vllm);
        assert_eq!(load.running, 8.0);
        assert_eq!(load.waiting, 3.0);
        // Capacity-weighted: (0.5 * 300 + 1.0 * 100) / 400.
        assert!(
            (load.kv_cache_usage - 0.625).abs() < 1e-12,
            "{}",
            load.kv_cache_usage
        );
        assert_eq!(load.prefix_cache_queries, 2000.0);
        assert_eq!(load.prefix_cache_hits, 150.0);
        assert_eq!(load.preemptions, 1.0);
        assert_eq!(load.kv_capacity_blocks, Some(400));
    }

    #[test]
    fn engine_load_usage_plain_mean_without_capacity() {
        let page: String = TWO_RANKS
            .lines()
            .filter(|l| !l.starts_with("vllm:cache_config_info"))
            .map(|l| format!("{l}\n"))
            .collect();
        let load = parse(page.as_bytes()).unwrap();
        assert!((load.kv_cache_usage - 0.75).abs() < 1e-12);
        assert_eq!(load.kv_capacity_blocks, None);
    }

    const SGLANG_PAGE: &str = "\
# HELP sglang:num_running_reqs The number of running requests.\r\n\
# TYPE sglang:num_running_reqs gauge\r\n\
sglang:num_running_reqs{dp_rank=\"0\",engine_type=\"unified\",model_name=\"m\",tp_rank=\"0\"} 4.0\r\n\
sglang:num_running_reqs{dp_rank=\"1\",engine_type=\"unified\",model_name=\"m\",tp_rank=\"0\"} 6.0\r\n\
sglang:num_running_reqs{dp_rank=\"0\",engine_type=\"unified\",model_name=\"m\",priority=\"1\",tp_rank=\"0\"} 4.0\r\n\
sglang:num_running_reqs{dp_rank=\"1\",engine_type=\"unified\",model_name=\"m\",priority=\"1\",tp_rank=\"0\"} 6.0\r\n\
sglang:num_queue_reqs{dp_rank=\"0\",engine_type=\"unified\",model_name=\"m\",tp_rank=\"0\"} 2.0\r\n\
sglang:num_queue_reqs{dp_rank=\"1\",engine_type=\"unified\",model_name=\"m\",tp_rank=\"0\"} 0.0\r\n\
sglang:num_queue_reqs{dp_rank=\"0\",engine_type=\"unified\",model_name=\"m\",priority=\"0\",tp_rank=\"0\"} 2.0\r\n\
sglang:token_usage{dp_rank=\"0\",engine_type=\"unified\",model_name=\"m\",tp_rank=\"0\"} 0.2\r\n\
sglang:token_usage{dp_rank=\"1\",engine_type=\"unified\",model_name=\"m\",tp_rank=\"0\"} 0.6\r\n\
sglang:cache_hit_rate{dp_rank=\"0\",engine_type=\"unified\",model_name=\"m\",tp_rank=\"0\"} 0.4\r\n\
sglang:max_total_num_tokens{dp_rank=\"0\",engine_type=\"unified\",model_name=\"m\",tp_rank=\"0\"} 30000.0\r\n\
sglang:max_total_num_tokens{dp_rank=\"1\",engine_type=\"unified\",model_name=\"m\",tp_rank=\"0\"} 10000.0\r\n\
# TYPE sglang:prompt_tokens_total counter\r\n\
sglang:prompt_tokens_total{model_name=\"m\"} 8.128902e+06\r\n\
sglang:cached_tokens_total{model_name=\"m\"} 1.0e+06\r\n\
sglang:num_retracted_requests_total{dp_rank=\"0\",engine_type=\"unified\",model_name=\"m\",tp_rank=\"0\"} 3\r\n\
sglang:num_retracted_requests_total{dp_rank=\"1\",engine_type=\"unified\",model_name=\"m\",tp_rank=\"0\"} 4\r\n";

    #[test]
    fn engine_load_sglang_priority_breakdown_skipped() {
        let load = parse(SGLANG_PAGE.as_bytes()).unwrap();
        assert_eq!(load.engine, EngineKind::Sglang);
        assert_eq!(load.running, 10.0);
        assert_eq!(load.waiting, 2.0);
        // (0.2 * 30000 + 0.6 * 10000) / 40000.
        assert!(
            (load.kv_cache_usage - 0.3).abs() < 1e-12,
            "{}",
            load.kv_cache_usage
        );
        assert_eq!(load.prefix_cache_queries, 8_128_902.0);
        assert_eq!(load.prefix_cache_hits, 1_000_000.0);
        assert_eq!(load.preemptions, 7.0);
        assert_eq!(load.kv_capacity_blocks, Some(40_000));
    }

    #[test]
    fn engine_load_missing_family_is_unreadable() {
        let page: String = TWO_RANKS
            .lines()
            .filter(|l| {
                !l.starts_with("vllm:kv_cache_usage_perc")
                    && !l.starts_with("vllm:num_preemptions_total")
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            parse(page.as_bytes()),
            Err(EngineLoadError::Unreadable {
                missing: vec!["vllm:kv_cache_usage_perc", "vllm:num_preemptions_total"],
            })
        );
        // Only HELP/TYPE lines for a family do not make it present; a family whose only
        // sample is NaN is missing too.
        let page = "# TYPE vllm:num_requests_running gauge\n\
                    vllm:num_requests_waiting 0\n\
                    vllm:kv_cache_usage_perc NaN\n";
        let Err(EngineLoadError::Unreadable { missing }) = parse(page.as_bytes()) else {
            panic!("expected unreadable");
        };
        assert_eq!(
            missing,
            vec![
                "vllm:num_requests_running",
                "vllm:kv_cache_usage_perc",
                "vllm:prefix_cache_queries_total",
                "vllm:prefix_cache_hits_total",
                "vllm:num_preemptions_total",
            ]
        );
        let sg = "sglang:num_running_reqs 1\n";
        let Err(EngineLoadError::Unreadable { missing }) = parse(sg.as_bytes()) else {
            panic!("expected unreadable");
        };
        assert_eq!(missing.len(), 4);
        assert!(!missing.contains(&"sglang:num_retracted_requests_total"));
    }

    #[test]
    fn engine_load_sample_sum_and_label_value() {
        let page = TWO_RANKS.as_bytes();
        assert_eq!(sample_sum(page, "vllm:num_requests_running"), Some(8.0));
        // NaN samples are skipped; a prefix of another name is not a match.
        assert_eq!(
            sample_sum(page, "vllm:prefix_cache_hits_total"),
            Some(150.0)
        );
        assert_eq!(sample_sum(page, "vllm:num_requests_waiting_by"), None);
        assert_eq!(sample_sum(page, "vllm:nope"), None);
        assert_eq!(
            label_value(page, "vllm:cache_config_info", "block_size").as_deref(),
            Some("16")
        );
        assert_eq!(label_value(page, "vllm:cache_config_info", "nope"), None);
        let fixture = FIXTURES[2].1.as_bytes();
        assert_eq!(
            sample_sum(fixture, "vllm:time_to_first_token_seconds_count").map(|c| c > 0.0),
            Some(true)
        );
    }

    #[test]
    fn engine_load_unknown_engine() {
        assert_eq!(parse(b""), Err(EngineLoadError::UnknownEngine));
        assert_eq!(
            parse(b"# HELP vllm:x y\nprocess_cpu_seconds_total 1.0\n"),
            Err(EngineLoadError::UnknownEngine)
        );
    }

    #[test]
    fn engine_load_syntax_edge_cases() {
        assert_eq!(
            parse_line(br#"a{k="x\"y,z}",  j = "\\" ,} -Inf 123"#).map(|s| (s.labels, s.value)),
            Some((
                vec![(&b"k"[..], &br#"x\"y,z}"#[..]), (&b"j"[..], &br"\\"[..])],
                Some(f64::NEG_INFINITY)
            ))
        );
        assert_eq!(parse_line(b"a 1.5E-3").and_then(|s| s.value), Some(1.5e-3));
        assert!(parse_line(b"a{k=\"unterminated} 1").is_none());
        assert!(parse_line(b"a{k} 1").is_none());
        assert!(parse_line(b"a{k=\"v\"}").is_none());
        assert_eq!(parse_line(b"a{} bogus").map(|s| s.value), Some(None));
    }

    /// A tiny deterministic xorshift, standing in for proptest.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    /// Pages made by mutating the seed pages at random: bytes changed, inserted, removed,
    /// truncated and chunks copied elsewhere.
    fn mutated_pages(rng: &mut Rng, count: usize) -> Vec<Vec<u8>> {
        const ALPHABET: &[u8] = b"{}\",=\\ \t\r\n#:_.eE+-0123456789NaInfvllmsg\xff\x00";
        let seeds = [
            TWO_RANKS.as_bytes(),
            SGLANG_PAGE.as_bytes(),
            FIXTURES[1].1.as_bytes(),
        ];
        let mut pages = Vec::with_capacity(count);
        for round in 0..count {
            let mut page = seeds[round % seeds.len()].to_vec();
            for _ in 0..1 + rng.below(16) {
                let at = rng.below(page.len());
                match rng.below(5) {
                    0 => page[at] = ALPHABET[rng.below(ALPHABET.len())],
                    1 => page.insert(at, ALPHABET[rng.below(ALPHABET.len())]),
                    2 => {
                        page.remove(at.min(page.len().saturating_sub(1)));
                    }
                    3 => page.truncate(at),
                    _ => {
                        let end = (at + rng.below(64)).min(page.len());
                        let chunk = page[at..end].to_vec();
                        let to = rng.below(page.len());
                        page.splice(to..to, chunk);
                    }
                }
                if page.is_empty() {
                    page.push(b'{');
                }
            }
            pages.push(page);
        }
        pages
    }

    /// The parser without the skip by name: every line with an engine prefix is parsed whole.
    fn parse_every_line(page: &[u8]) -> Result<EngineLoad, EngineLoadError> {
        let mut vllm = Acc::default();
        let mut sglang = Acc::default();
        for raw in page.split(|&b| b == b'\n') {
            let line = trim_start(raw.strip_suffix(b"\r").unwrap_or(raw));
            let (spec, acc, engine) = if line.starts_with(b"vllm:") {
                (&VLLM, &mut vllm, EngineKind::Vllm)
            } else if line.starts_with(b"sglang:") {
                (&SGLANG, &mut sglang, EngineKind::Sglang)
            } else {
                continue;
            };
            let Some(sample) = parse_line(line) else {
                continue;
            };
            acc.seen = true;
            if let Some(slot) = spec.names.iter().position(|n| n.as_bytes() == sample.name) {
                add_sample(acc, engine, slot, &sample);
            }
        }
        if vllm.seen {
            finish(EngineKind::Vllm, &VLLM, vllm)
        } else if sglang.seen {
            finish(EngineKind::Sglang, &SGLANG, sglang)
        } else {
            Err(EngineLoadError::UnknownEngine)
        }
    }

    /// Skipping the lines of unread families by name gives what parsing every line gives, on
    /// the fixtures and on mutated pages (NaN compared as equal to NaN).
    #[test]
    fn skipping_unread_families_matches_parsing_every_line() {
        let same = |a: &Result<EngineLoad, EngineLoadError>,
                    b: &Result<EngineLoad, EngineLoadError>| {
            format!("{a:?}") == format!("{b:?}")
        };
        for (name, page) in FIXTURES {
            let (fast, slow) = (parse(page.as_bytes()), parse_every_line(page.as_bytes()));
            assert!(same(&fast, &slow), "{name}: {fast:?} != {slow:?}");
        }
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let mut parsed = 0;
        for (round, page) in mutated_pages(&mut rng, 3000).iter().enumerate() {
            let (fast, slow) = (parse(page), parse_every_line(page));
            assert!(same(&fast, &slow), "round {round}: {fast:?} != {slow:?}");
            parsed += usize::from(fast.is_ok());
        }
        assert!(parsed > 1000, "only {parsed} of 3000 mutated pages parsed");
    }

    #[test]
    fn engine_load_garbage_never_panics() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for (round, page) in mutated_pages(&mut rng, 3000).iter().enumerate() {
            if let Ok(load) = parse(page) {
                assert!((0.0..=1.0).contains(&load.kv_cache_usage), "round {round}");
                assert!(load.running >= 0.0 && load.waiting >= 0.0, "round {round}");
            }
        }
        // Pure random bytes, and pathological single-line pages.
        for _ in 0..500 {
            let len = rng.below(512);
            let page: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let _ = parse(&page);
        }
        let _ = parse(&[b'\\'; 10_000]);
        let _ = parse(format!("vllm:a{{{}", "k=\"\\".repeat(10_000)).as_bytes());
        let _ = parse(format!("vllm:a{{{}}} 1", "k=\"v\",".repeat(10_000)).as_bytes());
    }
}
