//! Per-core routing statistics the control thread reads: single-writer atomics, one set per core.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One core's routing statistics. Written only by its core (load and store, no locked
/// instruction); read by the control thread with relaxed loads.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CoreStats {
    report_age_max_micros: AtomicU64,
    decisions_with_report: AtomicU64,
    decisions_without_report: AtomicU64,
}

impl CoreStats {
    /// Fresh statistics.
    pub fn new() -> CoreStats {
        CoreStats::default()
    }

    /// Records one routing decision: the age of the oldest engine report among its candidates,
    /// or `None` when no candidate had a fresh report.
    pub fn decision(&self, oldest_report: Option<Duration>) {
        match oldest_report {
            Some(age) => {
                let micros = age.as_micros().min(u128::from(u64::MAX)) as u64;
                if micros > self.report_age_max_micros.load(Ordering::Relaxed) {
                    self.report_age_max_micros.store(micros, Ordering::Relaxed);
                }
                bump(&self.decisions_with_report);
            }
            None => bump(&self.decisions_without_report),
        }
    }

    /// The oldest engine report any decision on this core used.
    pub fn report_age_max(&self) -> Duration {
        Duration::from_micros(self.report_age_max_micros.load(Ordering::Relaxed))
    }

    /// Decisions (with a fresh report on some candidate, without any).
    pub fn decisions(&self) -> (u64, u64) {
        (
            self.decisions_with_report.load(Ordering::Relaxed),
            self.decisions_without_report.load(Ordering::Relaxed),
        )
    }
}

fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_oldest_age_and_counts() {
        let s = CoreStats::new();
        s.decision(Some(Duration::from_millis(30)));
        s.decision(Some(Duration::from_millis(90)));
        s.decision(Some(Duration::from_millis(10)));
        s.decision(None);
        assert_eq!(s.report_age_max(), Duration::from_millis(90));
        assert_eq!(s.decisions(), (3, 1));
    }
}

/// Prediction results, as the `result` label: `predicted`, or why a request was routed without a
/// cache prediction (`parity_off`: the engines' KV events disagree with the gateway's tokens for
/// the model; the tokenizer's own reasons included). Unknown labels count as `unsupported`.
pub const RESULT_LABELS: [&str; 16] = [
    "predicted",
    "parity_off",
    "no_tokenizer",
    "queue_full",
    "timeout",
    "index_busy",
    "invalid_json",
    "not_an_object",
    "non_text_content",
    "template_in_request",
    "batch_prompt",
    "template_error",
    "invalid_request",
    "template_kwargs",
    "no_chat_template",
    "unsupported",
];

/// Upper bounds (seconds) of the tokenize-time histogram; `+Inf` is implicit.
pub const TOKENIZE_BUCKETS: [f64; 12] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
];

/// One core's prediction counters: single writer (its core), read by the control thread.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct PredictionStats {
    results: [AtomicU64; 15],
    tokenize_buckets: [AtomicU64; 13],
    tokenize_micros: AtomicU64,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
}

impl PredictionStats {
    /// Counts one request's outcome by its label (see [`RESULT_LABELS`]).
    pub fn result(&self, label: &str) {
        let i = RESULT_LABELS
            .iter()
            .position(|l| *l == label)
            .unwrap_or(RESULT_LABELS.len() - 1);
        bump(&self.results[i]);
    }

    /// Records a tokenization (queue wait included) that finished.
    pub fn tokenize_time(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let b = TOKENIZE_BUCKETS
            .iter()
            .position(|le| secs <= *le)
            .unwrap_or(TOKENIZE_BUCKETS.len());
        bump(&self.tokenize_buckets[b]);
        let micros = d.as_micros().min(u128::from(u64::MAX)) as u64;
        let c = &self.tokenize_micros;
        c.store(
            c.load(Ordering::Relaxed).wrapping_add(micros),
            Ordering::Relaxed,
        );
    }

    /// Adds a routed request's prompt tokens and the cached tokens predicted on its replica.
    pub fn tokens(&self, prompt: u64, cached: u64) {
        for (c, n) in [(&self.prompt_tokens, prompt), (&self.cached_tokens, cached)] {
            c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        }
    }

    /// Counts by result, in [`RESULT_LABELS`] order.
    pub fn results(&self) -> [u64; 15] {
        std::array::from_fn(|i| self.results[i].load(Ordering::Relaxed))
    }

    /// Tokenize-time buckets (last is +Inf) and the sum in microseconds.
    pub fn tokenize_histogram(&self) -> ([u64; 13], u64) {
        (
            std::array::from_fn(|i| self.tokenize_buckets[i].load(Ordering::Relaxed)),
            self.tokenize_micros.load(Ordering::Relaxed),
        )
    }

    /// Prompt tokens and predicted cached tokens of routed requests.
    pub fn token_totals(&self) -> (u64, u64) {
        (
            self.prompt_tokens.load(Ordering::Relaxed),
            self.cached_tokens.load(Ordering::Relaxed),
        )
    }
}

/// Upper bounds (seconds) of the estimated-TTFT histogram; `+Inf` is implicit.
pub const ESTIMATE_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Upper bounds (seconds) of the decision-time histogram; `+Inf` is implicit.
pub const DECISION_BUCKETS: [f64; 10] = [
    0.000001, 0.0000025, 0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.001, 0.01,
];

const POLICIES: usize = inferrail_config::PolicyKind::ALL.len();

/// One core's routing-brain counters: the chosen replica's estimated TTFT, candidates each
/// guard set aside, steering reasons, and decision time per policy. Single writer (its core).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct BrainStats {
    estimate_buckets: [AtomicU64; 13],
    estimate_micros: AtomicU64,
    guards: [AtomicU64; 2],
    steering: [AtomicU64; 5],
    decision_buckets: [[AtomicU64; 11]; POLICIES],
    decision_nanos: [AtomicU64; POLICIES],
}

fn bucket(bounds: &[f64], secs: f64) -> usize {
    bounds
        .iter()
        .position(|le| secs <= *le)
        .unwrap_or(bounds.len())
}

fn add(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl BrainStats {
    /// Records one decision by `policy` that took `took`.
    pub fn decision(
        &self,
        policy: inferrail_config::PolicyKind,
        took: Duration,
        d: &inferrail_routing::Decision,
    ) {
        let p = inferrail_config::PolicyKind::ALL
            .iter()
            .position(|k| *k == policy)
            .unwrap_or(0);
        bump(&self.decision_buckets[p][bucket(&DECISION_BUCKETS, took.as_secs_f64())]);
        add(
            &self.decision_nanos[p],
            took.as_nanos().min(u128::from(u64::MAX)) as u64,
        );
        let est = d.winner_row().estimate.total();
        bump(&self.estimate_buckets[bucket(&ESTIMATE_BUCKETS, est)]);
        add(
            &self.estimate_micros,
            inferrail_routing::fleet::secs_to_micros(est),
        );
        for r in &d.rows {
            if let Some(g) = r.set_aside {
                let i = inferrail_routing::Guard::ALL
                    .iter()
                    .position(|x| *x == g)
                    .unwrap_or(0);
                bump(&self.guards[i]);
            }
        }
        let s = inferrail_routing::Steering::ALL
            .iter()
            .position(|x| *x == d.steering)
            .unwrap_or(0);
        bump(&self.steering[s]);
    }

    /// Estimated-TTFT buckets (last is +Inf) and the sum in microseconds.
    pub fn estimate_histogram(&self) -> ([u64; 13], u64) {
        (
            std::array::from_fn(|i| self.estimate_buckets[i].load(Ordering::Relaxed)),
            self.estimate_micros.load(Ordering::Relaxed),
        )
    }

    /// Candidates set aside, in [`inferrail_routing::Guard::ALL`] order.
    pub fn guards(&self) -> [u64; 2] {
        std::array::from_fn(|i| self.guards[i].load(Ordering::Relaxed))
    }

    /// Decisions by steering reason, in [`inferrail_routing::Steering::ALL`] order.
    pub fn steering(&self) -> [u64; 5] {
        std::array::from_fn(|i| self.steering[i].load(Ordering::Relaxed))
    }

    /// Decision-time buckets (last is +Inf) and the sum in nanoseconds of policy `p` (index in
    /// `PolicyKind::ALL`).
    pub fn decision_histogram(&self, p: usize) -> ([u64; 11], u64) {
        let row = &self.decision_buckets[p.min(POLICIES - 1)];
        (
            std::array::from_fn(|i| row[i].load(Ordering::Relaxed)),
            self.decision_nanos[p.min(POLICIES - 1)].load(Ordering::Relaxed),
        )
    }
}
