//! The control plane's own metric families (config reloads, replica health and engine reports,
//! scrapes, ejections, policy shares, shadow agreement, dropped records), rendered as Prometheus
//! text from a plain view so the page can be tested byte for byte.

use crate::fleet::kv_events::ParityRow;
use inferrail_dataplane::core_stats::{DECISION_BUCKETS, ESTIMATE_BUCKETS, TOKENIZE_BUCKETS};
use inferrail_dataplane::metrics::label_value as label;
use std::fmt::Write as _;

/// One replica's control-plane facts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplicaRow {
    /// Replica id.
    pub id: String,
    /// In rotation.
    pub routable: bool,
    /// Passing health checks.
    pub probe_healthy: bool,
    /// Ejected now.
    pub ejected: bool,
    /// Times ejected.
    pub ejections: u64,
    /// Scrapes: ok, unreadable, failed.
    pub scrapes: [u64; 3],
    /// Engine report: running, waiting, KV usage, prefix queries, prefix hits, age in seconds.
    pub engine: Option<EngineRow>,
}

/// An engine's latest report.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineRow {
    /// Requests running.
    pub running: f64,
    /// Requests waiting.
    pub waiting: f64,
    /// KV cache usage (0..=1).
    pub kv_cache_usage: f64,
    /// Prefix cache queries (engine counter).
    pub prefix_cache_queries: f64,
    /// Prefix cache hits (engine counter).
    pub prefix_cache_hits: f64,
    /// Age of the report in seconds.
    pub age_seconds: f64,
}

/// One shadow comparison counter.
#[derive(Debug, Clone, PartialEq)]
pub struct ShadowRow {
    /// Model.
    pub model: String,
    /// Shadow policy.
    pub policy: String,
    /// Same replica as the real decision.
    pub agree: u64,
    /// A different replica.
    pub disagree: u64,
}

/// One replica's shadow in the KV index.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IndexRow {
    /// Replica id.
    pub id: String,
    /// Blocks held.
    pub entries: u64,
    /// Estimated bytes.
    pub bytes: u64,
    /// Capacity in blocks.
    pub capacity: u64,
    /// Times cleared (engine restarts).
    pub resets: u64,
    /// Which view answers its lookups: `approximate`, `exact` or `unsynced`.
    pub mode: &'static str,
    /// Engine blocks held in its KV event mirror.
    pub mirror_blocks: u64,
    /// Its KV event streams, summed over data-parallel ranks, when it has `kv_events`.
    pub events: Option<EventRow>,
    /// Speculative entries (routed in exact mode, before the events confirm them): inserted,
    /// confirmed, expired, taken back, dropped by the size bound.
    pub speculative: [u64; 5],
}

/// One replica's KV event streams, summed over its data-parallel ranks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventRow {
    /// Streams followed (one per rank).
    pub streams: u64,
    /// Of them, subscribed now.
    pub connected: u64,
    /// Batches applied.
    pub batches: u64,
    /// Events in them.
    pub events: u64,
    /// Sequence gaps seen.
    pub gaps: u64,
    /// Replays asked for.
    pub replays: u64,
    /// Replays that failed.
    pub replay_failures: u64,
    /// Publisher restarts seen.
    pub restarts: u64,
    /// Returns to synced.
    pub resyncs: u64,
    /// Payloads that did not decode.
    pub decode_errors: u64,
    /// Stored runs the mirror refused because their parent was unknown.
    pub orphans: u64,
    /// The largest last-batch lag over the ranks, seconds.
    pub lag_seconds: f64,
}

/// Tokenization and prediction counters, summed over the data cores.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PredictionView {
    /// Requests by prediction result label.
    pub results: Vec<(&'static str, u64)>,
    /// Tokenize-time buckets (`TOKENIZE_BUCKETS`, then +Inf) and the sum in microseconds.
    pub tokenize: (Vec<u64>, u64),
    /// Prompt tokens of routed requests.
    pub prompt_tokens: u64,
    /// Cached tokens predicted on the replicas they went to.
    pub cached_tokens: u64,
    /// Segment cache lookups per model: (model, hits, misses).
    pub cache: Vec<(String, u64, u64)>,
    /// The index, per replica.
    pub index: Vec<IndexRow>,
    /// The hash-parity check, per model with followed KV events.
    pub parity: Vec<ParityRow>,
}

/// Routing-brain counters, summed over the data cores.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BrainView {
    /// Estimated-TTFT buckets of the chosen replicas (`ESTIMATE_BUCKETS`, then +Inf) and the
    /// sum in microseconds.
    pub estimate: (Vec<u64>, u64),
    /// Candidates set aside, by guard label.
    pub guards: Vec<(&'static str, u64)>,
    /// Decisions by steering reason.
    pub steering: Vec<(&'static str, u64)>,
    /// Decision time per policy: (policy, buckets (`DECISION_BUCKETS`, then +Inf), sum in ns).
    pub decisions: Vec<(&'static str, Vec<u64>, u64)>,
}

/// Everything the control families show.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ControlView {
    /// Config generation in effect.
    pub config_generation: u64,
    /// Reloads by result label.
    pub reloads: Vec<(&'static str, u64)>,
    /// Snapshots published.
    pub publishes: u64,
    /// Ejections refused by `max_ejection_percent`.
    pub ejections_refused: u64,
    /// Replicas in registry order.
    pub replicas: Vec<ReplicaRow>,
    /// (model, policy, share in percent) of every split arm.
    pub policy_shares: Vec<(String, String, u32)>,
    /// Shadow agreement.
    pub shadow: Vec<ShadowRow>,
    /// Shadow jobs dropped because the worker fell behind.
    pub shadow_dropped: u64,
    /// Decision log records dropped.
    pub decision_log_dropped: u64,
    /// Request reports from the cores dropped (full queue).
    pub reports_dropped: u64,
    /// The oldest engine report a routing decision used, in seconds.
    pub report_age_max_seconds: f64,
    /// Tokenization, predictions and the index.
    pub prediction: PredictionView,
    /// The routing brain's counters.
    pub brain: BrainView,
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn per_replica(
    out: &mut String,
    name: &str,
    replicas: &[ReplicaRow],
    value: impl Fn(&ReplicaRow) -> Option<f64>,
) {
    for r in replicas {
        if let Some(v) = value(r) {
            out.push_str(name);
            out.push_str("{replica=\"");
            label(out, &r.id);
            let _ = writeln!(out, "\"}} {v}");
        }
    }
}

/// Renders the control families.
pub fn render(view: &ControlView) -> String {
    let mut out = String::with_capacity(4096);
    family(
        &mut out,
        "inferrail_config_generation",
        "gauge",
        "Generation of the config in effect.",
    );
    let _ = writeln!(
        out,
        "inferrail_config_generation {}",
        view.config_generation
    );
    family(
        &mut out,
        "inferrail_config_reloads_total",
        "counter",
        "Config reloads and patches, by result.",
    );
    for (result, n) in &view.reloads {
        let _ = writeln!(
            out,
            "inferrail_config_reloads_total{{result=\"{result}\"}} {n}"
        );
    }
    family(
        &mut out,
        "inferrail_snapshots_published_total",
        "counter",
        "Routing snapshots published to the data cores.",
    );
    let _ = writeln!(
        out,
        "inferrail_snapshots_published_total {}",
        view.publishes
    );

    let r = &view.replicas;
    let flag = |b: bool| Some(if b { 1.0 } else { 0.0 });
    family(
        &mut out,
        "inferrail_replica_routable",
        "gauge",
        "1 when the replica is in rotation (healthy and not ejected).",
    );
    per_replica(&mut out, "inferrail_replica_routable", r, |x| {
        flag(x.routable)
    });
    family(
        &mut out,
        "inferrail_replica_healthy",
        "gauge",
        "1 when the replica passes its health checks.",
    );
    per_replica(&mut out, "inferrail_replica_healthy", r, |x| {
        flag(x.probe_healthy)
    });
    family(
        &mut out,
        "inferrail_replica_ejected",
        "gauge",
        "1 while the replica is ejected for failed requests.",
    );
    per_replica(&mut out, "inferrail_replica_ejected", r, |x| {
        flag(x.ejected)
    });
    family(
        &mut out,
        "inferrail_ejections_total",
        "counter",
        "Ejections for consecutive failed requests, by replica.",
    );
    per_replica(&mut out, "inferrail_ejections_total", r, |x| {
        Some(x.ejections as f64)
    });
    family(
        &mut out,
        "inferrail_ejections_refused_total",
        "counter",
        "Ejections not made because max_ejection_percent was reached.",
    );
    let _ = writeln!(
        out,
        "inferrail_ejections_refused_total {}",
        view.ejections_refused
    );

    family(
        &mut out,
        "inferrail_scrapes_total",
        "counter",
        "Engine /metrics scrapes, by replica and result.",
    );
    for x in r {
        for (i, result) in ["ok", "unreadable", "failed"].iter().enumerate() {
            out.push_str("inferrail_scrapes_total{replica=\"");
            label(&mut out, &x.id);
            let _ = writeln!(out, "\",result=\"{result}\"}} {}", x.scrapes[i]);
        }
    }
    type EngineField = fn(&EngineRow) -> f64;
    let engine_families: [(&str, &str, EngineField); 6] = [
        (
            "inferrail_engine_running",
            "Requests the engine reports running.",
            |e| e.running,
        ),
        (
            "inferrail_engine_waiting",
            "Requests the engine reports waiting.",
            |e| e.waiting,
        ),
        (
            "inferrail_engine_kv_cache_usage",
            "KV cache usage the engine reports (0..1).",
            |e| e.kv_cache_usage,
        ),
        (
            "inferrail_engine_prefix_cache_queries",
            "Prefix cache queries the engine reports (its counter).",
            |e| e.prefix_cache_queries,
        ),
        (
            "inferrail_engine_prefix_cache_hits",
            "Prefix cache hits the engine reports (its counter).",
            |e| e.prefix_cache_hits,
        ),
        (
            "inferrail_engine_report_age_seconds",
            "Age of the engine's latest readable report.",
            |e| e.age_seconds,
        ),
    ];
    for (name, help, field) in engine_families {
        family(&mut out, name, "gauge", help);
        per_replica(&mut out, name, r, |x| x.engine.as_ref().map(field));
    }
    family(
        &mut out,
        "inferrail_routing_report_age_max_seconds",
        "gauge",
        "Oldest engine report any routing decision used.",
    );
    let _ = writeln!(
        out,
        "inferrail_routing_report_age_max_seconds {}",
        view.report_age_max_seconds
    );

    family(
        &mut out,
        "inferrail_model_policy_share",
        "gauge",
        "Configured share of each model's requests per policy, in percent.",
    );
    for (model, policy, share) in &view.policy_shares {
        out.push_str("inferrail_model_policy_share{model=\"");
        label(&mut out, model);
        let _ = writeln!(out, "\",policy=\"{policy}\"}} {share}");
    }
    family(
        &mut out,
        "inferrail_shadow_decisions_total",
        "counter",
        "Shadow policy decisions, by model, policy and agreement with the real decision.",
    );
    for s in &view.shadow {
        for (agreement, n) in [("agree", s.agree), ("disagree", s.disagree)] {
            out.push_str("inferrail_shadow_decisions_total{model=\"");
            label(&mut out, &s.model);
            let _ = writeln!(
                out,
                "\",policy=\"{}\",agreement=\"{agreement}\"}} {n}",
                s.policy
            );
        }
    }
    family(
        &mut out,
        "inferrail_shadow_dropped_total",
        "counter",
        "Requests left out of shadow evaluation because the worker fell behind.",
    );
    let _ = writeln!(
        out,
        "inferrail_shadow_dropped_total {}",
        view.shadow_dropped
    );
    family(
        &mut out,
        "inferrail_decision_log_dropped_total",
        "counter",
        "Decision log records dropped because the writer fell behind.",
    );
    let _ = writeln!(
        out,
        "inferrail_decision_log_dropped_total {}",
        view.decision_log_dropped
    );
    family(
        &mut out,
        "inferrail_replica_reports_dropped_total",
        "counter",
        "Request results the cores could not queue for the control thread.",
    );
    let _ = writeln!(
        out,
        "inferrail_replica_reports_dropped_total {}",
        view.reports_dropped
    );
    render_prediction(&mut out, &view.prediction);
    render_brain(&mut out, &view.brain);
    out
}

/// Writes the buckets, sum and count of one histogram series (`labels` is empty or a
/// `key="value"` list without braces).
fn histogram_series(
    out: &mut String,
    name: &str,
    labels: &str,
    bounds: &[f64],
    buckets: &[u64],
    sum_secs: f64,
) {
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cumulative = 0u64;
    for (i, le) in bounds.iter().enumerate() {
        cumulative += buckets.get(i).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
        );
    }
    cumulative += buckets.get(bounds.len()).copied().unwrap_or(0);
    let _ = writeln!(
        out,
        "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}"
    );
    let braces = |s: &str| {
        if s.is_empty() {
            String::new()
        } else {
            format!("{{{s}}}")
        }
    };
    let _ = writeln!(out, "{name}_sum{} {sum_secs}", braces(labels));
    let _ = writeln!(out, "{name}_count{} {cumulative}", braces(labels));
}

/// A counter family with one series per `(value, count)` of one label.
fn labelled_counter(out: &mut String, name: &str, help: &str, label: &str, rows: &[(&str, u64)]) {
    family(out, name, "counter", help);
    for (value, n) in rows {
        let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {n}");
    }
}

fn render_brain(out: &mut String, b: &BrainView) {
    family(
        out,
        "inferrail_routing_estimated_ttft_seconds",
        "histogram",
        "The cost model's estimated time to first token of the replica each request went to.",
    );
    histogram_series(
        out,
        "inferrail_routing_estimated_ttft_seconds",
        "",
        &ESTIMATE_BUCKETS,
        &b.estimate.0,
        b.estimate.1 as f64 / 1e6,
    );
    labelled_counter(
        out,
        "inferrail_routing_guard_set_aside_total",
        "Candidates a load guard set aside (bounded_load, kv_pressure).",
        "guard",
        &b.guards,
    );
    labelled_counter(
        out,
        "inferrail_routing_steering_total",
        "Routing decisions by what steered them (policy, session, hot_prefix, no_prefix, no_prediction).",
        "reason",
        &b.steering,
    );
    family(
        out,
        "inferrail_routing_decision_seconds",
        "histogram",
        "Time to price the candidates and decide, per policy.",
    );
    for (policy, buckets, nanos) in &b.decisions {
        histogram_series(
            out,
            "inferrail_routing_decision_seconds",
            &format!("policy=\"{policy}\""),
            &DECISION_BUCKETS,
            buckets,
            *nanos as f64 / 1e9,
        );
    }
}

fn render_prediction(out: &mut String, p: &PredictionView) {
    labelled_counter(
        out,
        "inferrail_prompts_total",
        "Completion requests by cache prediction result (predicted, or why not).",
        "result",
        &p.results,
    );
    family(
        out,
        "inferrail_tokenize_seconds",
        "histogram",
        "Time to tokenize and hash a prompt on the tokenizer pool, queueing included.",
    );
    let (buckets, micros) = &p.tokenize;
    histogram_series(
        out,
        "inferrail_tokenize_seconds",
        "",
        &TOKENIZE_BUCKETS,
        buckets,
        *micros as f64 / 1e6,
    );
    family(
        out,
        "inferrail_prompt_tokens_total",
        "counter",
        "Prompt tokens of routed requests that were tokenized.",
    );
    let _ = writeln!(out, "inferrail_prompt_tokens_total {}", p.prompt_tokens);
    family(
        out,
        "inferrail_predicted_cached_tokens_total",
        "counter",
        "Prompt tokens predicted to be cached on the replica each request went to.",
    );
    let _ = writeln!(
        out,
        "inferrail_predicted_cached_tokens_total {}",
        p.cached_tokens
    );
    family(
        out,
        "inferrail_tokenizer_cache_lookups_total",
        "counter",
        "Tokenization segment cache lookups, by model and result.",
    );
    for (model, hits, misses) in &p.cache {
        for (result, n) in [("hit", hits), ("miss", misses)] {
            out.push_str("inferrail_tokenizer_cache_lookups_total{model=\"");
            label(out, model);
            let _ = writeln!(out, "\",result=\"{result}\"}} {n}");
        }
    }
    type IndexField = fn(&IndexRow) -> u64;
    let index_families: [(&str, &str, &str, IndexField); 4] = [
        (
            "inferrail_index_entries",
            "gauge",
            "Blocks the index predicts the replica holds.",
            |r| r.entries,
        ),
        (
            "inferrail_index_bytes",
            "gauge",
            "Estimated memory of the replica's index shadow.",
            |r| r.bytes,
        ),
        (
            "inferrail_index_capacity_blocks",
            "gauge",
            "The replica's KV capacity in blocks as the index sizes it.",
            |r| r.capacity,
        ),
        (
            "inferrail_index_resets_total",
            "counter",
            "Times the replica's index shadow was cleared (engine restarts).",
            |r| r.resets,
        ),
    ];
    for (name, kind, help, field) in index_families {
        family(out, name, kind, help);
        for r in &p.index {
            out.push_str(name);
            out.push_str("{replica=\"");
            label(out, &r.id);
            let _ = writeln!(out, "\"}} {}", field(r));
        }
    }
    family(
        out,
        "inferrail_index_mode",
        "gauge",
        "1 for the view answering the replica's lookups: exact (its KV events), unsynced (events \
         missing: routing records) or approximate (no events: routing records).",
    );
    for r in &p.index {
        for mode in ["approximate", "exact", "unsynced"] {
            out.push_str("inferrail_index_mode{replica=\"");
            label(out, &r.id);
            let _ = writeln!(out, "\",mode=\"{mode}\"}} {}", u8::from(r.mode == mode));
        }
    }
    family(
        out,
        "inferrail_index_mirror_blocks",
        "gauge",
        "Engine blocks held in the replica's KV event mirror.",
    );
    for r in &p.index {
        out.push_str("inferrail_index_mirror_blocks{replica=\"");
        label(out, &r.id);
        let _ = writeln!(out, "\"}} {}", r.mirror_blocks);
    }
    family(
        out,
        "inferrail_index_speculative_total",
        "counter",
        "Routed prompts held as cached until the engine's events confirm them, by outcome: \
         inserted, confirmed (the engine stored them), expired (it did not), taken_back, dropped \
         (pushed out by the size bound).",
    );
    for r in p.index.iter().filter(|r| r.events.is_some()) {
        for (result, n) in ["inserted", "confirmed", "expired", "taken_back", "dropped"]
            .iter()
            .zip(r.speculative)
        {
            out.push_str("inferrail_index_speculative_total{replica=\"");
            label(out, &r.id);
            let _ = writeln!(out, "\",result=\"{result}\"}} {n}");
        }
    }
    event_families(out, &p.index);
    family(
        out,
        "inferrail_index_parity_total",
        "counter",
        "Prompts routed with KV events followed, by whether the engines stored them under the \
         gateway's own block hashes (match) or never did (mismatch: its tokens differ).",
    );
    for r in &p.parity {
        for (result, n) in [("match", r.matches), ("mismatch", r.mismatches)] {
            out.push_str("inferrail_index_parity_total{model=\"");
            label(out, &r.model);
            let _ = writeln!(out, "\",result=\"{result}\"}} {n}");
        }
    }
    family(
        out,
        "inferrail_index_parity_predictions",
        "gauge",
        "1 while the model's cache predictions are used, 0 while parity is off.",
    );
    for r in &p.parity {
        out.push_str("inferrail_index_parity_predictions{model=\"");
        label(out, &r.model);
        let _ = writeln!(out, "\"}} {}", u8::from(r.predictions_on));
    }
}

/// The KV event stream families, for replicas with `kv_events`.
fn event_families(out: &mut String, rows: &[IndexRow]) {
    type EventField = fn(&EventRow) -> String;
    let families: [(&str, &str, &str, EventField); 12] = [
        (
            "inferrail_kv_events_streams",
            "gauge",
            "KV event streams followed (one per data-parallel rank).",
            |e| e.streams.to_string(),
        ),
        (
            "inferrail_kv_events_connected",
            "gauge",
            "KV event streams subscribed now.",
            |e| e.connected.to_string(),
        ),
        (
            "inferrail_kv_events_batches_total",
            "counter",
            "KV event batches applied to the mirror.",
            |e| e.batches.to_string(),
        ),
        (
            "inferrail_kv_events_events_total",
            "counter",
            "KV events in the applied batches.",
            |e| e.events.to_string(),
        ),
        (
            "inferrail_kv_events_gaps_total",
            "counter",
            "Sequence gaps seen on the live stream.",
            |e| e.gaps.to_string(),
        ),
        (
            "inferrail_kv_events_replays_total",
            "counter",
            "Replays asked of the engine's replay endpoint.",
            |e| e.replays.to_string(),
        ),
        (
            "inferrail_kv_events_replay_failures_total",
            "counter",
            "Replays that failed (the mirror was unsynced).",
            |e| e.replay_failures.to_string(),
        ),
        (
            "inferrail_kv_events_restarts_total",
            "counter",
            "Publisher restarts seen (sequence back to 0): the mirror was cleared.",
            |e| e.restarts.to_string(),
        ),
        (
            "inferrail_kv_events_resyncs_total",
            "counter",
            "Times the mirror became trustworthy again after it was not.",
            |e| e.resyncs.to_string(),
        ),
        (
            "inferrail_kv_events_decode_errors_total",
            "counter",
            "Event payloads that did not decode (each unsyncs the mirror).",
            |e| e.decode_errors.to_string(),
        ),
        (
            "inferrail_kv_events_orphans_total",
            "counter",
            "Stored runs refused because their parent block was not in the mirror.",
            |e| e.orphans.to_string(),
        ),
        (
            "inferrail_kv_events_lag_seconds",
            "gauge",
            "Engine timestamp to applied, of the last batch (the largest over ranks).",
            |e| format!("{:.6}", e.lag_seconds),
        ),
    ];
    for (name, kind, help, field) in families {
        family(out, name, kind, help);
        for r in rows {
            let Some(e) = &r.events else { continue };
            out.push_str(name);
            out.push_str("{replica=\"");
            label(out, &r.id);
            let _ = writeln!(out, "\"}} {}", field(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page for a fixed state, compared byte for byte with the committed golden file.
    /// Regenerate with `INFERRAIL_BLESS=1 cargo test -p inferrail-control control_metrics`.
    #[test]
    fn control_metrics_page_matches_golden() {
        let view = ControlView {
            config_generation: 3,
            reloads: vec![("applied", 2), ("restart_required", 1)],
            publishes: 41,
            ejections_refused: 1,
            replicas: vec![
                ReplicaRow {
                    id: "engine-0".into(),
                    routable: true,
                    probe_healthy: true,
                    ejected: false,
                    ejections: 0,
                    scrapes: [10, 0, 0],
                    engine: Some(EngineRow {
                        running: 3.0,
                        waiting: 1.0,
                        kv_cache_usage: 0.25,
                        prefix_cache_queries: 1000.0,
                        prefix_cache_hits: 400.0,
                        age_seconds: 0.05,
                    }),
                },
                ReplicaRow {
                    id: "dns-g-10.0.0.2-8000".into(),
                    routable: false,
                    probe_healthy: true,
                    ejected: true,
                    ejections: 2,
                    scrapes: [3, 1, 6],
                    engine: None,
                },
            ],
            policy_shares: vec![
                ("m".into(), "p2c".into(), 75),
                ("m".into(), "round_robin".into(), 25),
            ],
            shadow: vec![ShadowRow {
                model: "m".into(),
                policy: "random".into(),
                agree: 7,
                disagree: 3,
            }],
            shadow_dropped: 4,
            decision_log_dropped: 0,
            reports_dropped: 0,
            report_age_max_seconds: 0.101,
            prediction: PredictionView {
                results: vec![("predicted", 90), ("timeout", 2)],
                tokenize: (vec![0, 3, 50, 30, 7, 2, 0, 0, 0, 0, 0, 0, 0], 12_345),
                prompt_tokens: 45_000,
                cached_tokens: 30_016,
                cache: vec![("m".into(), 170, 22)],
                parity: vec![ParityRow {
                    model: "m".into(),
                    matches: 37,
                    mismatches: 2,
                    predictions_on: true,
                }],
                index: vec![IndexRow {
                    id: "engine-0".into(),
                    entries: 2048,
                    bytes: 133_120,
                    capacity: 16384,
                    resets: 1,
                    mode: "exact",
                    mirror_blocks: 2040,
                    events: Some(EventRow {
                        streams: 1,
                        connected: 1,
                        batches: 300,
                        events: 900,
                        gaps: 1,
                        replays: 2,
                        replay_failures: 0,
                        restarts: 1,
                        resyncs: 1,
                        decode_errors: 0,
                        orphans: 0,
                        lag_seconds: 0.000_85,
                    }),
                    speculative: [40, 37, 2, 1, 0],
                }],
            },
            brain: BrainView {
                estimate: (vec![0, 4, 20, 30, 10, 3, 1, 0, 0, 0, 0, 0, 2], 4_250_000),
                guards: vec![("bounded_load", 12), ("kv_pressure", 1)],
                steering: vec![
                    ("policy", 60),
                    ("session", 7),
                    ("hot_prefix", 3),
                    ("no_prefix", 0),
                    ("no_prediction", 0),
                ],
                decisions: vec![(
                    "cost_model",
                    vec![0, 10, 40, 15, 5, 0, 0, 0, 0, 0, 0],
                    420_000,
                )],
            },
        };
        let text = render(&view);
        let golden = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/control_metrics.txt");
        if std::env::var_os("INFERRAIL_BLESS").is_some() {
            std::fs::write(golden, &text).unwrap();
        }
        let want = std::fs::read_to_string(golden).unwrap();
        assert_eq!(text, want, "the metrics page changed; bless it if intended");
    }
}
