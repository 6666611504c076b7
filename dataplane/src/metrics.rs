//! Per-core metrics recorders and their merge into Prometheus text.
//!
//! Each core owns one [`CoreRecorder`] and is its only writer: it bumps counters with a relaxed
//! load and store (no read-modify-write, no lock, no shared cache line: the counters sit in
//! 128-byte aligned lines of their own allocation). The control thread reads all recorders with
//! relaxed loads and sums them when `/metrics` is scraped.

use inferrail_config::PolicyKind;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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
    /// The replica left rotation while the request waited for its response head.
    ReplicaLeftRotation,
    /// No replica of the model is in rotation (every one unhealthy or ejected, or none at all).
    NoReplicaInRotation,
    /// Two engines closed the connection after reading the request: refused, not retried.
    PoisonRequest,
}

impl ErrorReason {
    const ALL: [ErrorReason; 16] = [
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
        ErrorReason::ReplicaLeftRotation,
        ErrorReason::NoReplicaInRotation,
        ErrorReason::PoisonRequest,
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
            ErrorReason::ReplicaLeftRotation => "replica_left_rotation",
            ErrorReason::NoReplicaInRotation => "no_replica_in_rotation",
            ErrorReason::PoisonRequest => "poison_request",
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
        let total = errors + ErrorReason::ALL.len();
        Offsets {
            models,
            replicas,
            requests,
            ttft,
            duration,
            decisions,
            retries,
            errors,
            total,
        }
    }
}

/// One core's counters. Written only by that core; read by the control thread.
pub struct CoreRecorder {
    off: Offsets,
    lines: Box<[Line]>,
}

impl std::fmt::Debug for CoreRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreRecorder")
            .field("models", &self.off.models)
            .field("replicas", &self.off.replicas)
            .finish_non_exhaustive()
    }
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

    /// Whether this recorder was laid out for `layout`'s label counts.
    fn fits(&self, layout: &MetricsLayout) -> bool {
        self.off.models == layout.models.len() && self.off.replicas == layout.replicas.len()
    }
}

/// Appends `v` escaped as a Prometheus label value (backslash, quote and newline escaped).
pub fn label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Values keyed by one label: named values plus the `(none)` row.
#[derive(Debug, Clone, Default)]
struct ByLabel<T> {
    named: BTreeMap<String, T>,
    none: T,
}

impl<T: Default> ByLabel<T> {
    fn entry(&mut self, name: Option<&str>) -> &mut T {
        match name {
            None => &mut self.none,
            Some(n) => self.named.entry(n.to_owned()).or_default(),
        }
    }

    fn get(&self, name: Option<&str>) -> Option<&T> {
        match name {
            None => Some(&self.none),
            Some(n) => self.named.get(n),
        }
    }
}

fn add_all<const N: usize>(into: &mut [u64; N], from: &[u64; N]) {
    for (a, b) in into.iter_mut().zip(from) {
        *a = a.wrapping_add(*b);
    }
}

/// Counter and histogram totals keyed by label values, so recorders of different layouts add up.
#[derive(Debug, Clone, Default)]
struct Totals {
    /// model -> replica -> per-outcome counts.
    requests: ByLabel<ByLabel<[u64; Outcome::ALL.len()]>>,
    /// model -> histogram slots.
    ttft: ByLabel<[u64; HIST_SLOTS]>,
    /// model -> histogram slots.
    duration: ByLabel<[u64; HIST_SLOTS]>,
    /// model -> per-policy counts.
    decisions: BTreeMap<String, [u64; PolicyKind::ALL.len()]>,
    /// model -> retries.
    retries: BTreeMap<String, u64>,
    /// per-reason counts.
    errors: [u64; ErrorReason::ALL.len()],
}

/// Each replica's `(in_flight, pending)` by replica id, read from its one load ledger by the
/// caller (the data cores keep no gauges of their own: ADR 016).
pub type ReplicaGauges = BTreeMap<String, (i64, i64)>;

fn sum(recorders: &[&CoreRecorder], i: usize) -> u64 {
    recorders
        .iter()
        .fold(0u64, |acc, r| acc.wrapping_add(r.read(i)))
}

/// The recorders laid out for `layout`; others cannot be read by its offsets and are skipped.
fn fitting<'a>(
    layout: &MetricsLayout,
    recorders: &'a [Arc<CoreRecorder>],
) -> Vec<&'a CoreRecorder> {
    recorders
        .iter()
        .map(|r| &**r)
        .filter(|r| r.fits(layout))
        .collect()
}

impl Totals {
    /// Adds every counter and histogram of `recorders` (laid out for `layout`) by label value.
    fn add(&mut self, layout: &MetricsLayout, recorders: &[Arc<CoreRecorder>]) {
        let recs = fitting(layout, recorders);
        if recs.is_empty() {
            return;
        }
        let off = Offsets::new(layout.models.len(), layout.replicas.len());
        let model = |m: usize| layout.models.get(m).map(String::as_str);
        let replica = |r: usize| layout.replicas.get(r).map(String::as_str);

        for m in 0..=off.models {
            for r in 0..=off.replicas {
                let base = off.requests + (m * (off.replicas + 1) + r) * Outcome::ALL.len();
                let counts: [u64; Outcome::ALL.len()] =
                    std::array::from_fn(|o| sum(&recs, base + o));
                if counts.iter().all(|v| *v == 0) {
                    continue;
                }
                let row = self.requests.entry(model(m)).entry(replica(r));
                add_all(row, &counts);
            }
        }

        for (family, base) in [
            (&mut self.ttft, off.ttft),
            (&mut self.duration, off.duration),
        ] {
            for m in 0..=off.models {
                let start = base + m * HIST_SLOTS;
                let slots: [u64; HIST_SLOTS] = std::array::from_fn(|i| sum(&recs, start + i));
                if slots.iter().all(|v| *v == 0) {
                    continue;
                }
                add_all(family.entry(model(m)), &slots);
            }
        }

        for (m, name) in layout.models.iter().enumerate() {
            let base = off.decisions + m * PolicyKind::ALL.len();
            let counts: [u64; PolicyKind::ALL.len()] =
                std::array::from_fn(|p| sum(&recs, base + p));
            if counts.iter().any(|v| *v != 0) {
                add_all(self.decisions.entry(name.clone()).or_default(), &counts);
            }
            let retries = sum(&recs, off.retries + m);
            if retries != 0 {
                let total = self.retries.entry(name.clone()).or_default();
                *total = total.wrapping_add(retries);
            }
        }

        let errors: [u64; ErrorReason::ALL.len()] =
            std::array::from_fn(|i| sum(&recs, off.errors + i));
        add_all(&mut self.errors, &errors);
    }

    /// Drops every series whose model or replica is not in `layout` (the `(none)` rows stay).
    fn prune(&mut self, layout: &MetricsLayout) {
        let models: BTreeSet<&str> = layout.models.iter().map(String::as_str).collect();
        let replicas: BTreeSet<&str> = layout.replicas.iter().map(String::as_str).collect();
        self.requests
            .named
            .retain(|m, _| models.contains(m.as_str()));
        for row in std::iter::once(&mut self.requests.none).chain(self.requests.named.values_mut())
        {
            row.named.retain(|r, _| replicas.contains(r.as_str()));
        }
        self.ttft.named.retain(|m, _| models.contains(m.as_str()));
        self.duration
            .named
            .retain(|m, _| models.contains(m.as_str()));
        self.decisions.retain(|m, _| models.contains(m.as_str()));
        self.retries.retain(|m, _| models.contains(m.as_str()));
    }
}

/// Writes the Prometheus text for the series of `layout`'s labels, in `layout` order.
fn write_text(layout: &MetricsLayout, totals: &Totals, gauges: &ReplicaGauges) -> String {
    let models: Vec<Option<&str>> = layout
        .models
        .iter()
        .map(|m| Some(m.as_str()))
        .chain(std::iter::once(None))
        .collect();
    let replicas: Vec<Option<&str>> = layout
        .replicas
        .iter()
        .map(|r| Some(r.as_str()))
        .chain(std::iter::once(None))
        .collect();
    let name_of = |l: Option<&str>| l.unwrap_or("(none)").to_owned();
    let mut out = String::with_capacity(8192);

    out.push_str("# HELP inferrail_requests_total Requests finished, by model, replica and outcome.\n# TYPE inferrail_requests_total counter\n");
    for m in &models {
        let row = totals.requests.get(*m);
        for r in &replicas {
            let counts = row.and_then(|row| row.get(*r));
            for (o, outcome) in Outcome::ALL.iter().enumerate() {
                let v = counts.map_or(0, |c| c[o]);
                if v == 0 {
                    continue;
                }
                out.push_str("inferrail_requests_total{model=\"");
                label_value(&mut out, &name_of(*m));
                out.push_str("\",replica=\"");
                label_value(&mut out, &name_of(*r));
                let _ = writeln!(out, "\",outcome=\"{}\"}} {v}", outcome.label());
            }
        }
    }

    let zero = [0u64; HIST_SLOTS];
    for (name, help, family) in [
        (
            "inferrail_ttft_seconds",
            "Time from request head to the first response body byte sent to the client.",
            &totals.ttft,
        ),
        (
            "inferrail_request_duration_seconds",
            "Time from request head to the end of the response.",
            &totals.duration,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for m in &models {
            let slots = family.get(*m).unwrap_or(&zero);
            let count = slots[LATENCY_BUCKETS.len() + 1];
            if count == 0 && m.is_none() {
                continue;
            }
            let mut model_label = String::new();
            label_value(&mut model_label, &name_of(*m));
            let mut cumulative = 0u64;
            for (b, le) in LATENCY_BUCKETS.iter().enumerate() {
                cumulative = cumulative.wrapping_add(slots[b]);
                let _ = writeln!(
                    out,
                    "{name}_bucket{{model=\"{model_label}\",le=\"{le}\"}} {cumulative}"
                );
            }
            cumulative = cumulative.wrapping_add(slots[LATENCY_BUCKETS.len()]);
            let _ = writeln!(
                out,
                "{name}_bucket{{model=\"{model_label}\",le=\"+Inf\"}} {cumulative}"
            );
            let micros = slots[LATENCY_BUCKETS.len() + 2];
            let _ = writeln!(
                out,
                "{name}_sum{{model=\"{model_label}\"}} {}",
                micros as f64 / 1e6
            );
            let _ = writeln!(out, "{name}_count{{model=\"{model_label}\"}} {count}");
        }
    }

    out.push_str("# HELP inferrail_routing_decisions_total Routing decisions, by model and policy.\n# TYPE inferrail_routing_decisions_total counter\n");
    for model in &layout.models {
        let Some(counts) = totals.decisions.get(model) else {
            continue;
        };
        for (p, policy) in PolicyKind::ALL.iter().enumerate() {
            let v = counts[p];
            if v == 0 {
                continue;
            }
            out.push_str("inferrail_routing_decisions_total{model=\"");
            label_value(&mut out, model);
            let _ = writeln!(out, "\",policy=\"{}\"}} {v}", policy.as_str());
        }
    }

    out.push_str("# HELP inferrail_retries_total Attempts after the first, by model.\n# TYPE inferrail_retries_total counter\n");
    for model in &layout.models {
        out.push_str("inferrail_retries_total{model=\"");
        label_value(&mut out, model);
        let v = totals.retries.get(model).copied().unwrap_or(0);
        let _ = writeln!(out, "\"}} {v}");
    }

    out.push_str("# HELP inferrail_errors_total Errors the gateway answered or attempts that failed, by reason.\n# TYPE inferrail_errors_total counter\n");
    for (i, reason) in ErrorReason::ALL.iter().enumerate() {
        let _ = writeln!(
            out,
            "inferrail_errors_total{{reason=\"{}\"}} {}",
            reason.label(),
            totals.errors[i]
        );
    }

    for (name, help, pick) in [
        (
            "inferrail_in_flight",
            "Requests in flight per replica (all cores).",
            (|g: &(i64, i64)| g.0) as fn(&(i64, i64)) -> i64,
        ),
        (
            "inferrail_pending",
            "Requests awaiting their response head per replica (all cores).",
            |g: &(i64, i64)| g.1,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for replica in &layout.replicas {
            let v = gauges.get(replica).map_or(0, pick);
            let _ = write!(out, "{name}{{replica=\"");
            label_value(&mut out, replica);
            let _ = writeln!(out, "\"}} {v}");
        }
    }
    out
}

/// Renders the merged Prometheus text exposition of every core's recorder, all laid out for
/// `layout` (recorders of another shape are skipped). Equivalent to a [`MetricsHistory`] holding
/// one epoch.
pub fn render(
    layout: &MetricsLayout,
    recorders: &[Arc<CoreRecorder>],
    gauges: &ReplicaGauges,
) -> String {
    let mut totals = Totals::default();
    totals.add(layout, recorders);
    write_text(layout, &totals, gauges)
}

/// One metrics layout and the recorders the data cores write while that layout is in effect.
///
/// A new epoch starts whenever the replica or model set changes; requests that started under an
/// older epoch keep writing into its recorders until they end.
#[derive(Debug)]
pub struct MetricsEpoch {
    /// The label values the recorders are laid out for.
    pub layout: MetricsLayout,
    /// One recorder per data core, indexed by core.
    pub recorders: Vec<Arc<CoreRecorder>>,
}

impl MetricsEpoch {
    /// An epoch for `layout` with one zeroed recorder per data core (`cores` of them).
    pub fn new(layout: MetricsLayout, cores: usize) -> Arc<MetricsEpoch> {
        let recorders = (0..cores)
            .map(|_| Arc::new(CoreRecorder::new(&layout)))
            .collect();
        Arc::new(MetricsEpoch { layout, recorders })
    }
}

/// Every metrics epoch still alive, merged by label values into one `/metrics` page.
///
/// Owned by the control thread. Counters never go backwards for a series that stays rendered:
/// an epoch nobody else holds any more is folded into label-keyed totals before it is dropped.
/// Series whose model or replica left the current layout are no longer rendered and their retained
/// totals are discarded, so a replica that returns later starts its series again from zero.
#[derive(Debug)]
pub struct MetricsHistory {
    /// Live epochs, oldest first; the last one is current.
    epochs: Vec<Arc<MetricsEpoch>>,
    /// Totals of folded epochs.
    retained: Totals,
}

/// Whether no one but the caller holds `epoch` or any of its recorders. `Arc::get_mut` checks
/// uniqueness with acquire ordering, so every write made before the last other holder dropped its
/// reference is visible to the reads that follow.
fn unshared(epoch: &mut Arc<MetricsEpoch>) -> bool {
    Arc::get_mut(epoch).is_some_and(|e| e.recorders.iter_mut().all(|r| Arc::get_mut(r).is_some()))
}

impl MetricsHistory {
    /// A history whose only (and current) epoch is `current`.
    pub fn new(current: Arc<MetricsEpoch>) -> MetricsHistory {
        MetricsHistory {
            epochs: vec![current],
            retained: Totals::default(),
        }
    }

    /// Makes `epoch` current. Older epochs stay alive (and rendered) until no one else holds them.
    pub fn push(&mut self, epoch: Arc<MetricsEpoch>) {
        self.epochs.push(epoch);
    }

    /// The current epoch: the one new snapshots should carry.
    pub fn current(&self) -> &Arc<MetricsEpoch> {
        // `epochs` is never empty: `new` starts it with one and nothing removes the last.
        &self.epochs[self.epochs.len() - 1]
    }

    /// How many epochs are still alive (the current one included).
    pub fn live_epochs(&self) -> usize {
        self.epochs.len()
    }

    /// Folds epochs that are no longer current and no longer held elsewhere into the retained
    /// totals, then drops retained series the current layout no longer names.
    fn fold_retired(&mut self) {
        let last = self.epochs.len() - 1;
        let epochs = std::mem::take(&mut self.epochs);
        for (i, mut epoch) in epochs.into_iter().enumerate() {
            if i != last && unshared(&mut epoch) {
                self.retained.add(&epoch.layout, &epoch.recorders);
            } else {
                self.epochs.push(epoch);
            }
        }
        let current = Arc::clone(self.current());
        self.retained.prune(&current.layout);
    }

    /// The merged Prometheus text of every epoch, by label value, for the current layout's
    /// series. Counters and histograms add up across epochs; gauges come from live epochs only.
    pub fn render(&mut self, gauges: &ReplicaGauges) -> String {
        self.fold_retired();
        let mut totals = self.retained.clone();
        for epoch in &self.epochs {
            totals.add(&epoch.layout, &epoch.recorders);
        }
        write_text(&self.current().layout, &totals, gauges)
    }
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
        a.error(ErrorReason::FleetFull);
        a.decision(0, PolicyKind::P2c);
        let gauges = ReplicaGauges::from([("r0".to_string(), (1, 0))]);
        let text = render(&l, &[a, b], &gauges);
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

    /// The value of the sample line starting with `series` (up to the space), if rendered.
    fn value(text: &str, series: &str) -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    fn gauge(text: &str, series: &str) -> Option<i64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    fn layout_of(models: &[&str], replicas: &[&str]) -> MetricsLayout {
        MetricsLayout {
            models: models.iter().map(|s| s.to_string()).collect(),
            replicas: replicas.iter().map(|s| s.to_string()).collect(),
        }
    }

    const R1_OK: &str = "inferrail_requests_total{model=\"m\",replica=\"r1\",outcome=\"success\"}";
    const R0_OK: &str = "inferrail_requests_total{model=\"m\",replica=\"r0\",outcome=\"success\"}";
    const TTFT_COUNT: &str = "inferrail_ttft_seconds_count{model=\"m\"}";

    #[test]
    fn replica_gauges_render_for_every_replica_of_the_layout() {
        let r = CoreRecorder::new(&layout());
        let gauges =
            ReplicaGauges::from([("r1".to_string(), (2, 1)), ("gone".to_string(), (5, 5))]);
        let text = render(&layout(), &[Arc::new(r)], &gauges);
        assert!(text.contains("# TYPE inferrail_pending gauge\n"), "{text}");
        assert_eq!(gauge(&text, "inferrail_in_flight{replica=\"r1\"}"), Some(2));
        assert_eq!(gauge(&text, "inferrail_pending{replica=\"r1\"}"), Some(1));
        assert_eq!(gauge(&text, "inferrail_pending{replica=\"r0\"}"), Some(0));
        assert!(!text.contains("gone"), "only the layout's replicas: {text}");
        let in_flight = text.find("inferrail_in_flight{").unwrap_or(usize::MAX);
        let pending = text.find("inferrail_pending{").unwrap_or(0);
        assert!(in_flight < pending, "pending follows in_flight");
    }

    #[test]
    fn epochs_with_overlapping_replicas_sum_by_label() {
        let e1 = MetricsEpoch::new(layout_of(&["m"], &["r0", "r1"]), 2);
        let mut history = MetricsHistory::new(Arc::clone(&e1));
        // r1 moves from slot 1 to slot 0; the model list gains a model in front.
        let e2 = MetricsEpoch::new(layout_of(&["n", "m"], &["r1", "r2"]), 2);
        history.push(Arc::clone(&e2));
        assert!(Arc::ptr_eq(history.current(), &e2));

        e1.recorders[0].request(Some(0), Some(1), Outcome::Success);
        e1.recorders[1].request(Some(0), Some(1), Outcome::Success);
        e2.recorders[1].request(Some(1), Some(0), Outcome::Success);
        e2.recorders[0].request(Some(1), Some(1), Outcome::Success);
        e1.recorders[0].ttft(Some(0), Duration::from_millis(3));
        e2.recorders[0].ttft(Some(1), Duration::from_millis(3));
        e1.recorders[0].retry(0);
        e2.recorders[1].retry(1);
        e1.recorders[0].decision(0, PolicyKind::P2c);
        e2.recorders[0].decision(1, PolicyKind::P2c);
        e1.recorders[0].error(ErrorReason::FleetFull);
        e2.recorders[1].error(ErrorReason::FleetFull);
        e1.recorders[1].request(None, None, Outcome::Rejected);
        e2.recorders[1].request(None, None, Outcome::Rejected);

        let text = history.render(&ReplicaGauges::new());
        assert_eq!(value(&text, R1_OK), Some(3), "{text}");
        assert_eq!(
            value(
                &text,
                "inferrail_requests_total{model=\"m\",replica=\"r2\",outcome=\"success\"}"
            ),
            Some(1)
        );
        assert_eq!(value(&text, TTFT_COUNT), Some(2));
        assert_eq!(
            value(
                &text,
                "inferrail_ttft_seconds_bucket{model=\"m\",le=\"0.005\"}"
            ),
            Some(2)
        );
        assert_eq!(
            value(&text, "inferrail_retries_total{model=\"m\"}"),
            Some(2)
        );
        assert_eq!(
            value(&text, "inferrail_retries_total{model=\"n\"}"),
            Some(0)
        );
        assert_eq!(
            value(
                &text,
                "inferrail_routing_decisions_total{model=\"m\",policy=\"p2c\"}"
            ),
            Some(2)
        );
        assert_eq!(
            value(&text, "inferrail_errors_total{reason=\"fleet_full\"}"),
            Some(2)
        );
        assert_eq!(
            value(
                &text,
                "inferrail_requests_total{model=\"(none)\",replica=\"(none)\",outcome=\"rejected\"}"
            ),
            Some(2)
        );
        // Each series is rendered once, in the current layout's order.
        assert_eq!(text.matches(R1_OK).count(), 1);
        let m = text
            .find("inferrail_retries_total{model=\"m\"}")
            .unwrap_or(0);
        let n = text
            .find("inferrail_retries_total{model=\"n\"}")
            .unwrap_or(usize::MAX);
        assert!(n < m, "{text}");
    }

    #[test]
    fn retired_epoch_folds_and_counters_stay_monotonic() {
        let e1 = MetricsEpoch::new(layout_of(&["m"], &["r0", "r1"]), 1);
        let mut history = MetricsHistory::new(Arc::clone(&e1));
        e1.recorders[0].request(Some(0), Some(1), Outcome::Success);
        e1.recorders[0].ttft(Some(0), Duration::from_millis(1));
        assert_eq!(
            value(&history.render(&ReplicaGauges::new()), R1_OK),
            Some(1)
        );

        let e2 = MetricsEpoch::new(layout_of(&["m"], &["r1"]), 1);
        history.push(Arc::clone(&e2));
        // A request that started under e1 still writes into it.
        e1.recorders[0].request(Some(0), Some(1), Outcome::Success);
        let text = history.render(&ReplicaGauges::new());
        assert_eq!(history.live_epochs(), 2, "e1 is still held");
        assert_eq!(value(&text, R1_OK), Some(2));

        // A core still holding one recorder (not the epoch) keeps the epoch alive too.
        let held = Arc::clone(&e1.recorders[0]);
        drop(e1);
        assert_eq!(
            value(&history.render(&ReplicaGauges::new()), R1_OK),
            Some(2)
        );
        assert_eq!(history.live_epochs(), 2);
        held.request(Some(0), Some(1), Outcome::Success);
        drop(held);

        let mut last = 0;
        for round in 0..3 {
            let text = history.render(&ReplicaGauges::new());
            assert_eq!(history.live_epochs(), 1, "e1 folded");
            let now = value(&text, R1_OK).unwrap_or(0);
            assert!(now >= last, "counter went back: {last} -> {now}");
            assert_eq!(now, 3 + round);
            assert_eq!(value(&text, TTFT_COUNT), Some(1));
            last = now;
            e2.recorders[0].request(Some(0), Some(0), Outcome::Success);
        }

        // The current epoch is never folded, even when nobody else holds it.
        drop(e2);
        assert_eq!(
            value(&history.render(&ReplicaGauges::new()), R1_OK),
            Some(6)
        );
        assert_eq!(history.live_epochs(), 1);
    }

    #[test]
    fn departed_replica_series_disappear() {
        let e1 = MetricsEpoch::new(layout_of(&["m", "old"], &["r0", "r1"]), 1);
        let mut history = MetricsHistory::new(Arc::clone(&e1));
        e1.recorders[0].request(Some(0), Some(0), Outcome::Success);
        e1.recorders[0].request(Some(1), Some(1), Outcome::Success);
        e1.recorders[0].request(Some(0), None, Outcome::Failed);
        e1.recorders[0].ttft(Some(1), Duration::from_millis(1));
        let text = history.render(&ReplicaGauges::from([("r0".to_string(), (1, 0))]));
        assert_eq!(value(&text, R0_OK), Some(1));
        assert_eq!(gauge(&text, "inferrail_in_flight{replica=\"r0\"}"), Some(1));

        history.push(MetricsEpoch::new(layout_of(&["m"], &["r1"]), 1));
        for _ in 0..2 {
            let text = history.render(&ReplicaGauges::new());
            assert!(!text.contains("replica=\"r0\""), "{text}");
            assert!(!text.contains("model=\"old\""), "{text}");
            assert_eq!(
                value(
                    &text,
                    "inferrail_requests_total{model=\"m\",replica=\"(none)\",outcome=\"failed\"}"
                ),
                Some(1),
                "requests never routed still render"
            );
            assert_eq!(gauge(&text, "inferrail_in_flight{replica=\"r1\"}"), Some(0));
        }
        drop(e1);
        let text = history.render(&ReplicaGauges::new());
        assert_eq!(history.live_epochs(), 1);
        assert!(!text.contains("replica=\"r0\""), "{text}");

        // A replica that comes back starts a fresh series.
        let e3 = MetricsEpoch::new(layout_of(&["m"], &["r1", "r0"]), 1);
        history.push(Arc::clone(&e3));
        let text = history.render(&ReplicaGauges::new());
        assert_eq!(value(&text, R0_OK), None, "{text}");
        assert_eq!(gauge(&text, "inferrail_in_flight{replica=\"r0\"}"), Some(0));
        e3.recorders[0].request(Some(0), Some(1), Outcome::Success);
        assert_eq!(
            value(&history.render(&ReplicaGauges::new()), R0_OK),
            Some(1)
        );
    }

    #[test]
    fn history_with_one_epoch_renders_like_render() {
        let e = MetricsEpoch::new(layout(), 2);
        let mut history = MetricsHistory::new(Arc::clone(&e));
        e.recorders[0].request(Some(0), Some(1), Outcome::Success);
        e.recorders[1].request(None, None, Outcome::Rejected);
        e.recorders[1].duration(Some(0), Duration::from_millis(40));
        assert_eq!(
            history.render(&ReplicaGauges::new()),
            render(&e.layout, &e.recorders, &ReplicaGauges::new())
        );
    }

    #[test]
    fn mismatched_recorders_are_skipped() {
        let small = Arc::new(CoreRecorder::new(&layout_of(&["m"], &["r0"])));
        small.request(Some(0), Some(0), Outcome::Success);
        let text = render(&layout(), &[small], &ReplicaGauges::new());
        assert!(!text.contains("inferrail_requests_total{"), "{text}");
    }
}
