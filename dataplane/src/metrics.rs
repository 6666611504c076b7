//! Per-core metrics recorders and their merge into Prometheus text.
//!
//! Each core owns one [`CoreRecorder`] and is its only writer: it bumps counters with a relaxed
//! load and store (no read-modify-write, no lock, no shared cache line: the counters sit in
//! 128-byte aligned lines of their own allocation). The control thread reads all recorders with
//! relaxed loads and sums them when `/metrics` is scraped.

use inferrail_config::PolicyKind;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How a request ended, as the `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The engine answered 1xx-3xx.
    Success,
    /// The engine answered 4xx.
    EngineClientError,
    /// The engine answered 5xx.
    EngineServerError,
    /// The gateway refused the request itself (bad request, unknown model, full fleet, ...).
    Rejected,
    /// Every attempt failed (connect, engine closed, timeout).
    Failed,
    /// The client went away before the response ended.
    ClientClosed,
}

impl Outcome {
    const ALL: [Outcome; 6] = [
        Outcome::Success,
        Outcome::EngineClientError,
        Outcome::EngineServerError,
        Outcome::Rejected,
        Outcome::Failed,
        Outcome::ClientClosed,
    ];

    fn label(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::EngineClientError => "engine_4xx",
            Outcome::EngineServerError => "engine_5xx",
            Outcome::Rejected => "rejected",
            Outcome::Failed => "failed",
            Outcome::ClientClosed => "client_closed",
        }
    }

    /// The outcome for an engine status code.
    pub fn for_status(status: u16) -> Outcome {
        match status {
            400..=499 => Outcome::EngineClientError,
            500..=599 => Outcome::EngineServerError,
            _ => Outcome::Success,
        }
    }
}

/// Why the gateway answered an error itself or an attempt failed, as the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorReason {
    /// Malformed head, body or JSON.
    BadRequest,
    /// The named model is not served.
    UnknownModel,
    /// No such route.
    NotFound,
    /// Wrong method for the route.
    MethodNotAllowed,
    /// Body larger than the limit.
    BodyTooLarge,
    /// Body did not arrive in time.
    BodyTimeout,
    /// Every replica of the model is at its breaker caps.
    FleetFull,
    /// TCP connect to the engine failed or timed out.
    ConnectFailed,
    /// The engine closed the connection before a complete response head.
    EngineClosed,
    /// The engine answered 502, 503 or 504 (retryable).
    EngineUnavailable,
    /// The engine did not answer in time.
    UpstreamTimeout,
    /// The engine sent bytes that are not HTTP.
    UpstreamProtocol,
    /// The client disconnected before the response ended.
    ClientDisconnected,
}

impl ErrorReason {
    const ALL: [ErrorReason; 13] = [
        ErrorReason::BadRequest,
        ErrorReason::UnknownModel,
        ErrorReason::NotFound,
        ErrorReason::MethodNotAllowed,
        ErrorReason::BodyTooLarge,
        ErrorReason::BodyTimeout,
        ErrorReason::FleetFull,
        ErrorReason::ConnectFailed,
        ErrorReason::EngineClosed,
        ErrorReason::EngineUnavailable,
        ErrorReason::UpstreamTimeout,
        ErrorReason::UpstreamProtocol,
        ErrorReason::ClientDisconnected,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            ErrorReason::BadRequest => "bad_request",
            ErrorReason::UnknownModel => "unknown_model",
            ErrorReason::NotFound => "not_found",
            ErrorReason::MethodNotAllowed => "method_not_allowed",
            ErrorReason::BodyTooLarge => "body_too_large",
            ErrorReason::BodyTimeout => "body_timeout",
            ErrorReason::FleetFull => "fleet_full",
            ErrorReason::ConnectFailed => "connect_failed",
            ErrorReason::EngineClosed => "engine_closed",
            ErrorReason::EngineUnavailable => "engine_unavailable",
            ErrorReason::UpstreamTimeout => "upstream_timeout",
            ErrorReason::UpstreamProtocol => "upstream_protocol",
            ErrorReason::ClientDisconnected => "client_disconnected",
        }
    }
}

/// Upper bounds (seconds) of the latency histogram buckets; `+Inf` is implicit.
pub const LATENCY_BUCKETS: [f64; 20] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Slots per histogram: the buckets, +Inf, the count and the sum in microseconds.
const HIST_SLOTS: usize = LATENCY_BUCKETS.len() + 3;

/// Label values the recorders are laid out for (model and replica names, in snapshot order).
#[derive(Debug, Clone)]
pub struct MetricsLayout {
    /// Model names; requests for unknown models are recorded under `(none)`.
    pub models: Vec<String>,
    /// Replica ids; requests never routed are recorded under `(none)`.
    pub replicas: Vec<String>,
}

#[repr(align(128))]
struct Line([AtomicU64; 16]);

/// Offsets of each family in the flat counter array.
#[derive(Debug, Clone, Copy)]
struct Offsets {
    models: usize,
    replicas: usize,
    requests: usize,
    ttft: usize,
    duration: usize,
    decisions: usize,
    retries: usize,
    errors: usize,
    in_flight: usize,
    total: usize,
}

impl Offsets {
    fn new(models: usize, replicas: usize) -> Offsets {
        let m = models + 1;
        let r = replicas + 1;
        let requests = 0;
        let ttft = requests + m * r * Outcome::ALL.len();
        let duration = ttft + m * HIST_SLOTS;
        let decisions = duration + m * HIST_SLOTS;
        let retries = decisions + m * PolicyKind::ALL.len();
        let errors = retries + m;
        let in_flight = errors + ErrorReason::ALL.len();
        let total = in_flight + replicas;
        Offsets {
            models,
            replicas,
            requests,
            ttft,
            duration,
            decisions,
            retries,
            errors,
            in_flight,
            total,
        }
    }
}

/// One core's counters. Written only by that core; read by the control thread.
pub struct CoreRecorder {
    off: Offsets,
    lines: Box<[Line]>,
}

impl CoreRecorder {
    /// A zeroed recorder for `layout`.
    pub fn new(layout: &MetricsLayout) -> CoreRecorder {
        let off = Offsets::new(layout.models.len(), layout.replicas.len());
        let lines = (0..off.total.div_ceil(16))
            .map(|_| Line(std::array::from_fn(|_| AtomicU64::new(0))))
            .collect();
        CoreRecorder { off, lines }
    }

    fn slot(&self, i: usize) -> &AtomicU64 {
        &self.lines[i / 16].0[i % 16]
    }

    /// Single-writer increment: a relaxed load and store, no locked instruction.
    fn add(&self, i: usize, n: u64) {
        let c = self.slot(i);
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    fn read(&self, i: usize) -> u64 {
        self.slot(i).load(Ordering::Relaxed)
    }

    fn model_row(&self, model: Option<usize>) -> usize {
        model
            .filter(|m| *m < self.off.models)
            .unwrap_or(self.off.models)
    }

    /// Counts a finished request.
    pub fn request(&self, model: Option<usize>, replica: Option<usize>, outcome: Outcome) {
        let m = self.model_row(model);
        let r = replica
            .filter(|r| *r < self.off.replicas)
            .unwrap_or(self.off.replicas);
        let o = Outcome::ALL.iter().position(|x| *x == outcome).unwrap_or(0);
        let idx = ((m * (self.off.replicas + 1)) + r) * Outcome::ALL.len() + o;
        self.add(self.off.requests + idx, 1);
    }

    fn observe(&self, base: usize, model: Option<usize>, value: Duration) {
        let start = base + self.model_row(model) * HIST_SLOTS;
        let secs = value.as_secs_f64();
        let bucket = LATENCY_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.add(start + bucket, 1);
        self.add(start + LATENCY_BUCKETS.len() + 1, 1);
        self.add(start + LATENCY_BUCKETS.len() + 2, value.as_micros() as u64);
    }

    /// Records a time to first byte of the response body.
    pub fn ttft(&self, model: Option<usize>, value: Duration) {
        self.observe(self.off.ttft, model, value);
    }

    /// Records a whole request's duration.
    pub fn duration(&self, model: Option<usize>, value: Duration) {
        self.observe(self.off.duration, model, value);
    }

    /// Counts one routing decision made by `policy`.
    pub fn decision(&self, model: usize, policy: PolicyKind) {
        let p = PolicyKind::ALL
            .iter()
            .position(|x| *x == policy)
            .unwrap_or(0);
        let idx = self.model_row(Some(model)) * PolicyKind::ALL.len() + p;
        self.add(self.off.decisions + idx, 1);
    }

    /// Counts one retry (an attempt after the first).
    pub fn retry(&self, model: usize) {
        self.add(self.off.retries + self.model_row(Some(model)), 1);
    }

    /// Counts one error.
    pub fn error(&self, reason: ErrorReason) {
        let i = ErrorReason::ALL
            .iter()
            .position(|x| *x == reason)
            .unwrap_or(0);
        self.add(self.off.errors + i, 1);
    }

    /// Moves this core's in-flight gauge for `replica` by `delta` (+1 or -1).
    pub fn in_flight(&self, replica: usize, delta: i64) {
        if replica < self.off.replicas {
            self.add(self.off.in_flight + replica, delta as u64);
        }
    }
}

fn label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn sum(recorders: &[std::sync::Arc<CoreRecorder>], i: usize) -> u64 {
    recorders
        .iter()
        .fold(0u64, |acc, r| acc.wrapping_add(r.read(i)))
}

/// Renders the merged Prometheus text exposition of every core's recorder.
pub fn render(layout: &MetricsLayout, recorders: &[std::sync::Arc<CoreRecorder>]) -> String {
    let off = Offsets::new(layout.models.len(), layout.replicas.len());
    let none = String::from("(none)");
    let model_name = |m: usize| layout.models.get(m).unwrap_or(&none);
    let replica_name = |r: usize| layout.replicas.get(r).unwrap_or(&none);
    let mut out = String::with_capacity(8192);

    out.push_str("# HELP inferrail_requests_total Requests finished, by model, replica and outcome.\n# TYPE inferrail_requests_total counter\n");
    for m in 0..=off.models {
        for r in 0..=off.replicas {
            for (o, outcome) in Outcome::ALL.iter().enumerate() {
                let idx = ((m * (off.replicas + 1)) + r) * Outcome::ALL.len() + o;
                let v = sum(recorders, off.requests + idx);
                if v == 0 {
                    continue;
                }
                out.push_str("inferrail_requests_total{model=\"");
                label_value(&mut out, model_name(m));
                out.push_str("\",replica=\"");
                label_value(&mut out, replica_name(r));
                let _ = writeln!(out, "\",outcome=\"{}\"}} {v}", outcome.label());
            }
        }
    }

    for (name, help, base) in [
        (
            "inferrail_ttft_seconds",
            "Time from request head to the first response body byte sent to the client.",
            off.ttft,
        ),
        (
            "inferrail_request_duration_seconds",
            "Time from request head to the end of the response.",
            off.duration,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for m in 0..=off.models {
            let start = base + m * HIST_SLOTS;
            let count = sum(recorders, start + LATENCY_BUCKETS.len() + 1);
            if count == 0 && m == off.models {
                continue;
            }
            let mut model_label = String::new();
            label_value(&mut model_label, model_name(m));
            let mut cumulative = 0u64;
            for (b, le) in LATENCY_BUCKETS.iter().enumerate() {
                cumulative += sum(recorders, start + b);
                let _ = writeln!(
                    out,
                    "{name}_bucket{{model=\"{model_label}\",le=\"{le}\"}} {cumulative}"
                );
            }
            cumulative += sum(recorders, start + LATENCY_BUCKETS.len());
            let _ = writeln!(
                out,
                "{name}_bucket{{model=\"{model_label}\",le=\"+Inf\"}} {cumulative}"
            );
            let micros = sum(recorders, start + LATENCY_BUCKETS.len() + 2);
            let _ = writeln!(
                out,
                "{name}_sum{{model=\"{model_label}\"}} {}",
                micros as f64 / 1e6
            );
            let _ = writeln!(out, "{name}_count{{model=\"{model_label}\"}} {count}");
        }
    }

    out.push_str("# HELP inferrail_routing_decisions_total Routing decisions, by model and policy.\n# TYPE inferrail_routing_decisions_total counter\n");
    for m in 0..off.models {
        for (p, policy) in PolicyKind::ALL.iter().enumerate() {
            let v = sum(recorders, off.decisions + m * PolicyKind::ALL.len() + p);
            if v == 0 {
                continue;
            }
            out.push_str("inferrail_routing_decisions_total{model=\"");
            label_value(&mut out, model_name(m));
            let _ = writeln!(out, "\",policy=\"{}\"}} {v}", policy.as_str());
        }
    }

    out.push_str("# HELP inferrail_retries_total Attempts after the first, by model.\n# TYPE inferrail_retries_total counter\n");
    for m in 0..off.models {
        out.push_str("inferrail_retries_total{model=\"");
        label_value(&mut out, model_name(m));
        let _ = writeln!(out, "\"}} {}", sum(recorders, off.retries + m));
    }

    out.push_str("# HELP inferrail_errors_total Errors the gateway answered or attempts that failed, by reason.\n# TYPE inferrail_errors_total counter\n");
    for (i, reason) in ErrorReason::ALL.iter().enumerate() {
        let _ = writeln!(
            out,
            "inferrail_errors_total{{reason=\"{}\"}} {}",
            reason.label(),
            sum(recorders, off.errors + i)
        );
    }

    out.push_str("# HELP inferrail_in_flight Requests in flight per replica (all cores).\n# TYPE inferrail_in_flight gauge\n");
    for r in 0..off.replicas {
        let v = sum(recorders, off.in_flight + r) as i64;
        out.push_str("inferrail_in_flight{replica=\"");
        label_value(&mut out, replica_name(r));
        let _ = writeln!(out, "\"}} {v}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn layout() -> MetricsLayout {
        MetricsLayout {
            models: vec!["m".into()],
            replicas: vec!["r0".into(), "r1".into()],
        }
    }

    #[test]
    fn merges_cores() {
        let l = layout();
        let a = Arc::new(CoreRecorder::new(&l));
        let b = Arc::new(CoreRecorder::new(&l));
        a.request(Some(0), Some(1), Outcome::Success);
        b.request(Some(0), Some(1), Outcome::Success);
        b.request(None, None, Outcome::Rejected);
        a.ttft(Some(0), Duration::from_millis(3));
        b.ttft(Some(0), Duration::from_secs(1000));
        a.in_flight(0, 1);
        b.in_flight(0, 1);
        a.in_flight(0, -1);
        a.error(ErrorReason::FleetFull);
        a.decision(0, PolicyKind::P2c);
        let text = render(&l, &[a, b]);
        assert!(
            text.contains(
                "inferrail_requests_total{model=\"m\",replica=\"r1\",outcome=\"success\"} 2\n"
            ),
            "{text}"
        );
        assert!(text.contains("inferrail_requests_total{model=\"(none)\",replica=\"(none)\",outcome=\"rejected\"} 1\n"));
        assert!(text.contains("inferrail_ttft_seconds_bucket{model=\"m\",le=\"0.005\"} 1\n"));
        assert!(text.contains("inferrail_ttft_seconds_bucket{model=\"m\",le=\"+Inf\"} 2\n"));
        assert!(text.contains("inferrail_ttft_seconds_count{model=\"m\"} 2\n"));
        assert!(text.contains("inferrail_in_flight{replica=\"r0\"} 1\n"));
        assert!(text.contains("inferrail_in_flight{replica=\"r1\"} 0\n"));
        assert!(text.contains("inferrail_errors_total{reason=\"fleet_full\"} 1\n"));
        assert!(text.contains("inferrail_routing_decisions_total{model=\"m\",policy=\"p2c\"} 1\n"));
    }

    #[test]
    fn lines_are_cache_aligned() {
        let r = CoreRecorder::new(&layout());
        assert_eq!(r.lines.as_ptr() as usize % 128, 0);
        assert_eq!(std::mem::size_of::<Line>(), 128);
    }
}
