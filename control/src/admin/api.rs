//! The admin API's answers, built from the controller: replicas, config (GET, PATCH, reload),
//! shadow agreement, and the merged metrics page.

use crate::admin::metrics::{
    self, BrainView, ControlView, EngineRow, EventRow, IndexRow, PredictionView, ReplicaRow,
    ShadowRow,
};
use crate::admin::response::AdminResponse;
use crate::controller::{Controller, ScrapeState};
use crate::fleet::health::ReplicaHealth;
use crate::live_config::Refusal;
use inferrail_config::{PolicyKind, RoutingReach};
use inferrail_dataplane::core_stats::{
    DECISION_BUCKETS, ESTIMATE_BUCKETS, RESULT_LABELS, TOKENIZE_BUCKETS,
};
use inferrail_dataplane::Snapshot;
use inferrail_routing::{Guard, Steering};
use inferrail_shards::prefix_hash::{block_hashes, HashSalt};
use inferrail_shards::tokenize::Endpoint;
use inferrail_wire::json_field::find_top_level_string;
use inferrail_wire::ErrorKind;
use inferrail_wire::{find_model, ModelField};
use serde_json::{json, Value};
use std::time::Instant;

fn millis(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// When a replica's current ejection ends, if it is ejected at `now`.
fn ejected_until(health: Option<ReplicaHealth>, now: Instant) -> Option<Instant> {
    health.and_then(|h| h.ejected_until).filter(|u| *u > now)
}

/// GET /admin/replicas: every registry member with its health, ejection, load and engine report.
pub fn replicas(ctl: &Controller, now: Instant) -> Value {
    let snap = ctl.current();
    let rows: Vec<Value> = snap
        .replicas
        .iter()
        .map(|r| {
            let key = r.spec.key;
            let health = ctl.book.health.status(key, now);
            let facts = ctl.facts(key).cloned().unwrap_or_default();
            let load = ctl.load_now(&r.spec.id);
            let engine = facts.report.map(|rep| {
                json!({
                    "engine": rep.load.engine.as_str(),
                    "running": rep.load.running,
                    "waiting": rep.load.waiting,
                    "kv_cache_usage": rep.load.kv_cache_usage,
                    "prefix_cache_queries": rep.load.prefix_cache_queries,
                    "prefix_cache_hits": rep.load.prefix_cache_hits,
                    "preemptions": rep.load.preemptions,
                    "kv_capacity_blocks": rep.load.kv_capacity_blocks,
                    "age_ms": millis(now.saturating_duration_since(rep.received)),
                })
            });
            let scrape = match &facts.scrape {
                ScrapeState::Never => json!({"result": "never"}),
                ScrapeState::Ok => json!({"result": "ok"}),
                ScrapeState::Unreadable(why) => json!({"result": "unreadable", "reason": why}),
                ScrapeState::Failed(why) => json!({"result": "failed", "reason": why}),
            };
            json!({
                "id": r.spec.id,
                "key": key,
                "address": r.spec.addr.to_string(),
                "authority": r.spec.authority,
                "source": ctl.source(key).map(|s| s.label()),
                "models": r.spec.models,
                "routable": ctl.book.health.routable(key, now),
                "healthy": health.map(|h| h.probe_healthy),
                "consecutive_probe_failures": health.map(|h| h.consecutive_probe_failures),
                "consecutive_request_failures": health.map(|h| h.consecutive_request_failures),
                "ejected": ejected_until(health, now).is_some(),
                "ejected_for_ms": ejected_until(health, now).map(|u| millis(u - now)),
                "ejections": facts.ejections,
                "last_ejection": facts.last_ejection.map(|(first, trip)| json!({
                    "after_first_failure_ms": millis(first),
                    "after_tripping_failure_ms": millis(trip),
                })),
                "in_flight": load.in_flight,
                "pending": load.awaiting_head,
                "queued": load.queued,
                "prompt_tokens_in_flight": load.prompt_tokens,
                "max_concurrency": r.spec.max_concurrency,
                "max_pending": r.spec.max_pending,
                "engine": engine,
                "scrape": scrape,
                "scrapes": {"ok": facts.scrapes[0], "unreadable": facts.scrapes[1], "failed": facts.scrapes[2]},
            })
        })
        .collect();
    json!({
        "snapshot_generation": snap.generation,
        "config_generation": snap.config_generation,
        "replicas": rows,
    })
}

/// GET /admin/config: the config document in effect and its generation.
pub fn config(ctl: &Controller) -> Value {
    let (count, p50, p99) = ctl.apply_times.summary();
    json!({
        "generation": ctl.store.generation(),
        "config": ctl.store.document(),
        "apply_time_ms": {"count": count, "p50": millis(p50), "p99": millis(p99)},
    })
}

fn refusal_response(ctl: &mut Controller, refusal: &Refusal) -> AdminResponse {
    let (label, kind) = match refusal {
        Refusal::Invalid(_) => ("invalid", ErrorKind::BadRequest),
        Refusal::RestartRequired(_) => ("restart_required", ErrorKind::BadRequest),
        Refusal::Io(_) | Refusal::NoFile => ("error", ErrorKind::BadRequest),
    };
    ctl.count_reload(label);
    eprintln!("inferrail: {refusal}");
    AdminResponse::error(kind, &refusal.to_string())
}

/// PATCH /admin/config: a JSON merge patch on the document in effect, applied whole or refused.
pub fn patch_config(ctl: &mut Controller, body: &[u8], started: Instant) -> AdminResponse {
    let patch: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return AdminResponse::error(
                ErrorKind::BadRequest,
                &format!("the body must be a JSON merge patch: {e}"),
            )
        }
    };
    let before = ctl.store.config().clone();
    match ctl.apply_patch(&patch, started) {
        Ok(generation) => {
            let mut answer = json!({"generation": generation});
            add_reach(&mut answer, &before.routing_reach(ctl.store.config()));
            AdminResponse::json(200, &answer)
        }
        Err(refusal) => refusal_response(ctl, &refusal),
    }
}

/// POST /admin/reload: re-reads the config file now.
pub fn reload(ctl: &mut Controller, started: Instant) -> AdminResponse {
    let before = ctl.store.config().clone();
    match ctl.reload_file(started) {
        Ok((generation, changed)) => {
            let mut answer = json!({"generation": generation, "changed": changed});
            add_reach(&mut answer, &before.routing_reach(ctl.store.config()));
            AdminResponse::json(200, &answer)
        }
        Err(refusal) => refusal_response(ctl, &refusal),
    }
}

/// Adds to an applied change's answer `routing` (each changed routing setting: `path`, the
/// models it `affects`, the settings it is `shadowed_by`) and `warnings` (one line per change
/// that reaches no model).
fn add_reach(answer: &mut Value, reach: &[RoutingReach]) {
    answer["routing"] = reach
        .iter()
        .map(|r| json!({"path": r.path, "affects": r.affects, "shadowed_by": r.shadowed_by}))
        .collect();
    answer["warnings"] = reach.iter().filter_map(RoutingReach::warning).collect();
}

/// GET /admin/shadow: agreement of the shadow policies with the real decisions.
pub fn shadow(ctl: &Controller) -> Value {
    let mut report = ctl.observers.shadow_report();
    if let Value::Object(map) = &mut report {
        map.insert("dropped".into(), json!(ctl.observers.shadow_dropped()));
    }
    report
}

/// The control-plane view for the metrics page.
pub fn control_view(ctl: &Controller, now: Instant) -> ControlView {
    let snap = ctl.current();
    let replicas = snap
        .replicas
        .iter()
        .map(|r| {
            let key = r.spec.key;
            let health = ctl.book.health.status(key, now);
            let facts = ctl.facts(key).cloned().unwrap_or_default();
            ReplicaRow {
                id: r.spec.id.clone(),
                routable: ctl.book.health.routable(key, now),
                probe_healthy: health.is_some_and(|h| h.probe_healthy),
                ejected: ejected_until(health, now).is_some(),
                ejections: facts.ejections,
                scrapes: facts.scrapes,
                engine: facts.report.map(|rep| EngineRow {
                    running: rep.load.running,
                    waiting: rep.load.waiting,
                    kv_cache_usage: rep.load.kv_cache_usage,
                    prefix_cache_queries: rep.load.prefix_cache_queries,
                    prefix_cache_hits: rep.load.prefix_cache_hits,
                    age_seconds: now.saturating_duration_since(rep.received).as_secs_f64(),
                }),
            }
        })
        .collect();
    let policy_shares = snap
        .models
        .iter()
        .flat_map(|m| {
            m.arms
                .iter()
                .map(|a| (m.name.clone(), a.policy.as_str().to_string(), a.weight))
        })
        .collect();
    let shadow = shadow_rows(&ctl.observers.shadow_report());
    ControlView {
        config_generation: ctl.store.generation(),
        reloads: ctl.counters.reloads.iter().map(|(k, v)| (*k, *v)).collect(),
        publishes: ctl.counters.publishes,
        ejections_refused: ctl.book.ejections_refused,
        replicas,
        policy_shares,
        shadow,
        shadow_dropped: ctl.observers.shadow_dropped(),
        decision_log_dropped: ctl.observers.decision_log_dropped(),
        reports_dropped: ctl.observers.reports_dropped(),
        report_age_max_seconds: ctl.observers.report_age_max().as_secs_f64(),
        prediction: prediction_view(ctl),
        brain: brain_view(ctl),
    }
}

/// Routing-brain counters summed over the cores.
fn brain_view(ctl: &Controller) -> BrainView {
    let stats = &ctl.observers.brain_stats;
    let mut estimate = vec![0u64; ESTIMATE_BUCKETS.len() + 1];
    let mut micros = 0u64;
    let mut guards = [0u64; Guard::ALL.len()];
    let mut steering = [0u64; Steering::ALL.len()];
    let mut decisions: Vec<(&'static str, Vec<u64>, u64)> = PolicyKind::ALL
        .iter()
        .map(|p| (p.as_str(), vec![0u64; DECISION_BUCKETS.len() + 1], 0u64))
        .collect();
    for s in stats {
        let (b, m) = s.estimate_histogram();
        add_into(&mut estimate, &b);
        micros += m;
        add_into(&mut guards, &s.guards());
        add_into(&mut steering, &s.steering());
        for (p, (_, buckets, nanos)) in decisions.iter_mut().enumerate() {
            let (b, n) = s.decision_histogram(p);
            add_into(buckets, &b);
            *nanos += n;
        }
    }
    decisions.retain(|(_, b, _)| b.iter().any(|n| *n > 0));
    BrainView {
        estimate: (estimate, micros),
        guards: Guard::ALL.iter().map(|g| g.as_str()).zip(guards).collect(),
        steering: Steering::ALL
            .iter()
            .map(|s| s.as_str())
            .zip(steering)
            .collect(),
        decisions,
    }
}

fn add_into(total: &mut [u64], more: &[u64]) {
    for (t, n) in total.iter_mut().zip(more) {
        *t += n;
    }
}

/// Prediction counters summed over the cores, the tokenizers' cache counters and the index.
fn prediction_view(ctl: &Controller) -> PredictionView {
    let stats = &ctl.observers.prediction_stats;
    let mut results = [0u64; RESULT_LABELS.len()];
    let mut buckets = vec![0u64; TOKENIZE_BUCKETS.len() + 1];
    let (mut micros, mut prompt_tokens, mut cached_tokens) = (0u64, 0u64, 0u64);
    for s in stats {
        for (total, n) in results.iter_mut().zip(s.results()) {
            *total += n;
        }
        let (b, m) = s.tokenize_histogram();
        for (total, n) in buckets.iter_mut().zip(b) {
            *total += n;
        }
        micros += m;
        let (p, c) = s.token_totals();
        prompt_tokens += p;
        cached_tokens += c;
    }
    let Some(predictor) = &ctl.observers.predictor else {
        return PredictionView {
            results: RESULT_LABELS.iter().copied().zip(results).collect(),
            tokenize: (buckets, micros),
            ..PredictionView::default()
        };
    };
    let mut cache: Vec<(String, u64, u64)> = predictor
        .models()
        .map(|(name, m)| {
            let s = m.tokenizer.cache_stats();
            (name.clone(), s.hits, s.misses)
        })
        .collect();
    cache.sort();
    PredictionView {
        results: RESULT_LABELS.iter().copied().zip(results).collect(),
        tokenize: (buckets, micros),
        prompt_tokens,
        cached_tokens,
        cache,
        index: index_rows(ctl),
        parity: ctl.kv_streams.parity_rows(),
    }
}

/// The index's per-replica figures for replicas in the current snapshot.
fn index_rows(ctl: &Controller) -> Vec<IndexRow> {
    let Some(predictor) = &ctl.observers.predictor else {
        return Vec::new();
    };
    let stats = predictor.index().stats().unwrap_or_default();
    ctl.current()
        .replicas
        .iter()
        .filter_map(|r| {
            let s = stats.iter().find(|s| s.key == r.spec.key)?;
            let events = ctl.kv_streams.view(r.spec.key).map(|v| {
                let mut row = EventRow {
                    orphans: s.events.orphans,
                    ..EventRow::default()
                };
                for stream in v.streams {
                    let f = stream.stats.figures();
                    row.streams += 1;
                    row.connected += u64::from(f.connected);
                    row.batches += f.batches;
                    row.events += f.events;
                    row.gaps += f.gaps;
                    row.replays += f.replays;
                    row.replay_failures += f.replay_failures;
                    row.restarts += f.restarts;
                    row.resyncs += f.resyncs;
                    row.decode_errors += f.decode_errors;
                    row.lag_seconds = row.lag_seconds.max(f.last_lag_us as f64 / 1e6);
                }
                row
            });
            Some(IndexRow {
                id: r.spec.id.clone(),
                entries: s.entries as u64,
                bytes: s.bytes as u64,
                capacity: s.capacity as u64,
                resets: s.resets,
                mode: s.mode.as_str(),
                mirror_blocks: s.mirror_blocks as u64,
                events,
                speculative: [
                    s.speculative.inserted,
                    s.speculative.confirmed,
                    s.speculative.expired,
                    s.speculative.taken_back,
                    s.speculative.dropped,
                ],
            })
        })
        .collect()
}

/// GET /admin/index: entries, bytes per entry, and each replica's predicted blocks vs capacity.
pub fn index(ctl: &Controller) -> Value {
    let rows = index_rows(ctl);
    let entries: u64 = rows.iter().map(|r| r.entries).sum();
    let bytes: u64 = rows.iter().map(|r| r.bytes).sum();
    let per_entry = |b: u64, e: u64| {
        if e == 0 {
            Value::Null
        } else {
            json!(b as f64 / e as f64)
        }
    };
    let parity: serde_json::Map<String, Value> = ctl
        .kv_streams
        .parity_rows()
        .into_iter()
        .map(|p| {
            (
                p.model,
                json!({
                    "match": p.matches,
                    "mismatch": p.mismatches,
                    "predictions": if p.predictions_on { "on" } else { "off" },
                }),
            )
        })
        .collect();
    json!({
        "enabled": ctl.observers.predictor.is_some(),
        "parity": parity,
        "entries": entries,
        "bytes": bytes,
        "bytes_per_entry": per_entry(bytes, entries),
        "replicas": rows.iter().map(|r| json!({
            "id": r.id,
            "entries": r.entries,
            "capacity": r.capacity,
            "fill": if r.capacity == 0 { 0.0 } else { r.entries as f64 / r.capacity as f64 },
            "bytes": r.bytes,
            "bytes_per_entry": per_entry(r.bytes, r.entries),
            "resets": r.resets,
            "mode": r.mode,
            "mirror_blocks": r.mirror_blocks,
            "kv_events": kv_events_view(ctl, &r.id),
            "speculative": {
                "inserted": r.speculative[0],
                "confirmed": r.speculative[1],
                "expired": r.speculative[2],
                "taken_back": r.speculative[3],
                "dropped": r.speculative[4],
            },
        })).collect::<Vec<_>>(),
    })
}

/// A replica's KV event streams for `/admin/index`: how they were configured, each rank's
/// endpoint and figures, and why discovery has found none yet; `null` without `kv_events`.
fn kv_events_view(ctl: &Controller, id: &str) -> Value {
    let Some(key) = ctl
        .current()
        .replicas
        .iter()
        .find(|r| r.spec.id == id)
        .map(|r| r.spec.key)
    else {
        return Value::Null;
    };
    let Some(v) = ctl.kv_streams.view(key) else {
        return Value::Null;
    };
    json!({
        "configured": v.configured,
        "discovery_problem": v.discovery_problem,
        "streams": v.streams.iter().map(|s| {
            let mut figures = s.stats.figures().to_json();
            if let Some(o) = figures.as_object_mut() {
                o.insert("rank".into(), json!(s.source.rank));
                o.insert("endpoint".into(), json!(s.source.endpoint));
                o.insert("replay_endpoint".into(), json!(s.source.replay_endpoint));
            }
            figures
        }).collect::<Vec<_>>(),
    })
}

/// The snapshot index of the model a client body names (or the only model), else the OpenAI
/// error to answer.
pub fn model_of(snap: &Snapshot, body: &[u8]) -> Result<usize, AdminResponse> {
    match find_model(body) {
        Ok(ModelField::Present { name, .. }) => snap.model_index(&name).ok_or_else(|| {
            AdminResponse::error(
                ErrorKind::NotFound,
                &format!("The model `{name}` does not exist."),
            )
        }),
        Ok(ModelField::Absent { .. }) if snap.models.len() == 1 => Ok(0),
        Ok(ModelField::Absent { .. }) => Err(AdminResponse::error(
            ErrorKind::BadRequest,
            "`model` is required",
        )),
        Err(e) => Err(AdminResponse::error(ErrorKind::BadRequest, &e.to_string())),
    }
}

/// POST /admin/tokenize/v1/chat/completions (or /v1/completions): the token ids and block hashes
/// the gateway computes for a client request, as vLLM's /tokenize answers. Nothing is routed.
pub fn tokenize(ctl: &Controller, endpoint: Endpoint, body: &[u8]) -> AdminResponse {
    let snap = ctl.current();
    let model = match model_of(snap, body) {
        Ok(m) => snap.models[m].name.clone(),
        Err(refusal) => return refusal,
    };
    let Some(m) = ctl
        .observers
        .predictor
        .as_ref()
        .and_then(|p| p.model(&model))
    else {
        return AdminResponse::error(
            ErrorKind::BadRequest,
            &format!("model `{model}` has no tokenizer (set models[].tokenizer)"),
        );
    };
    match m.tokenizer.prompt_ids(endpoint, body, &m.kwargs) {
        Ok(ids) => {
            let salt = HashSalt::new(
                &model,
                None,
                find_top_level_string(body, "cache_salt").as_deref(),
            );
            let hashes: Vec<String> = block_hashes(&salt, &ids, m.block_size)
                .iter()
                .map(|h| format!("{:032x}", h.0))
                .collect();
            AdminResponse::json(
                200,
                &json!({
                    "count": ids.len(),
                    "max_model_len": m.tokenizer.max_model_len(),
                    "tokens": ids,
                    "block_size": m.block_size,
                    "block_hashes": hashes,
                }),
            )
        }
        Err(e) => AdminResponse::error(
            ErrorKind::BadRequest,
            &format!(
                "the gateway cannot tokenize this request ({}): {e}",
                e.label()
            ),
        ),
    }
}

/// Shadow counters out of the worker's JSON report.
fn shadow_rows(report: &Value) -> Vec<ShadowRow> {
    let mut rows = Vec::new();
    let Some(models) = report.get("models").and_then(Value::as_object) else {
        return rows;
    };
    for (model, m) in models {
        let Some(shadow) = m.get("shadow").and_then(Value::as_object) else {
            continue;
        };
        for (policy, s) in shadow {
            let decisions = s.get("decisions").and_then(Value::as_u64).unwrap_or(0);
            let agree = s.get("agree").and_then(Value::as_u64).unwrap_or(0);
            rows.push(ShadowRow {
                model: model.clone(),
                policy: policy.clone(),
                agree,
                disagree: decisions.saturating_sub(agree),
            });
        }
    }
    rows
}

/// The whole metrics page: the data cores' merged families, then the control plane's.
pub fn metrics_text(ctl: &mut Controller) -> String {
    let gauges = ctl.gauges();
    let mut text = ctl.history.render(&gauges);
    let view = control_view(ctl, Instant::now());
    text.push_str(&metrics::render(&view));
    text
}
