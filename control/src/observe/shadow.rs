//! The shadow worker: re-runs sampled routing decisions with the configured shadow policies,
//! counts how often each agrees with the real one, and optionally logs every decision so
//! [`crate::observe::replay`] can check it reproduces.
//!
//! The decision logic is the pure [`ShadowEngine`] (no I/O, no clock); the thread around it only
//! receives jobs, keeps the counts and writes the log.

pub use crate::observe::inputs::ShadowInputs;
use crate::observe::jsonl::{self, LineWriter, Worker};
use crossbeam_channel::Receiver;
use inferrail_config::PolicyKind;
use inferrail_dataplane::observe::ShadowJob;
use inferrail_dataplane::predict::PromptFacts;
use inferrail_routing::split::stable_hash64;
use inferrail_routing::{brain, policies, Candidate, FleetFacts, Rng};
use inferrail_routing::{RouteInput, RoutingPolicy};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Salt of the request-id hash that seeds a shadow decision (see [`decision_rng`]).
pub const SHADOW_SALT: u64 = 0x5348_4144_4f57_0001;

/// The random numbers of one shadow decision: seeded from `seed ^ hash(request_id)`, so the
/// same seed and request id always give the same sequence, in the worker and in a replay.
pub fn decision_rng(seed: u64, request_id: &str) -> Rng {
    Rng::new(seed ^ stable_hash64(SHADOW_SALT, request_id.as_bytes()))
}

/// The shadow policies' state and decisions, driven by events in log order.
///
/// Guarantees: a policy object lives per (model name, policy) across decisions, so stateful
/// policies such as round_robin keep their turn; it is rebuilt only when a generation newer than
/// every one seen before no longer has that pair. Feeding the same calls in the same order gives
/// the same picks (the replay relies on it). Shadow decisions see no conversations and no
/// prefix demand (their fleet facts stay empty), so a log line holds all they read.
pub struct ShadowEngine {
    fleet: FleetFacts,
    seed: u64,
    policies: HashMap<(String, PolicyKind), Box<dyn RoutingPolicy>>,
    seen: HashSet<u64>,
    newest: Option<u64>,
}

impl ShadowEngine {
    /// An engine with no policy state, seeding decisions from `seed`.
    pub fn new(seed: u64) -> ShadowEngine {
        ShadowEngine {
            fleet: FleetFacts::new(Duration::from_secs(1)),
            seed,
            policies: HashMap::new(),
            seen: HashSet::new(),
            newest: None,
        }
    }

    /// The seed decisions are drawn from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Whether `generation` has been entered.
    pub fn has_seen(&self, generation: u64) -> bool {
        self.seen.contains(&generation)
    }

    /// Records that a decision from `generation` arrived. The first time a generation newer than
    /// all before it is entered, policy state is dropped for every (model, policy) pair for which
    /// `present` is false. Returns true the first time `generation` is seen, false after.
    pub fn enter_generation(
        &mut self,
        generation: u64,
        present: impl Fn(&str, PolicyKind) -> bool,
    ) -> bool {
        if !self.seen.insert(generation) {
            return false;
        }
        if self.newest.is_none_or(|n| generation > n) {
            self.newest = Some(generation);
            self.policies
                .retain(|(model, kind), _| present(model, *kind));
        }
        true
    }

    /// What policy `kind` decides for `model` among `candidates` for request `request_id`: an
    /// index into `candidates`, or `None` when there are none.
    pub fn pick(
        &mut self,
        model: &str,
        kind: PolicyKind,
        request_id: &str,
        inputs: &ShadowInputs,
        candidates: &[Candidate],
    ) -> Option<usize> {
        if candidates.is_empty() {
            return None;
        }
        let policy = self
            .policies
            .entry((model.to_string(), kind))
            .or_insert_with(|| policies::build(kind));
        let input = RouteInput {
            prompt: inputs.prompt.as_ref().map(PromptFacts::view),
            approx_tokens: inputs.approx_tokens,
            session: None,
            params: &inputs.params,
            fleet: &self.fleet,
            now_micros: 0,
        };
        let mut rng = decision_rng(self.seed, request_id);
        let d = brain::decide(policy.as_mut(), &input, candidates, &mut rng);
        Some(d.winner)
    }
}

/// Agreement counts of one shadow policy.
#[derive(Debug, Default, Clone, Copy)]
struct Agreement {
    decisions: u64,
    agree: u64,
}

/// Counts for one model.
#[derive(Debug, Default)]
struct ModelStats {
    decisions: u64,
    by_policy: BTreeMap<PolicyKind, u64>,
    shadow: BTreeMap<PolicyKind, Agreement>,
}

/// Everything [`ShadowHandle::report`] shows.
#[derive(Debug, Default)]
struct Stats {
    decisions: u64,
    skipped: u64,
    models: BTreeMap<String, ModelStats>,
    log_error: Option<String>,
}

/// The running shadow worker.
pub struct ShadowHandle {
    stats: Arc<Mutex<Stats>>,
    worker: Worker,
}

impl ShadowHandle {
    /// Decisions, per model: decisions per real policy and, per shadow policy, decisions,
    /// agreements (same replica as the real pick) and their rate. Data-core drop counts are not
    /// known here; the caller adds them.
    pub fn report(&self) -> Value {
        let stats = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
        let mut models = Map::new();
        for (name, m) in &stats.models {
            let by_policy: Map<String, Value> = m
                .by_policy
                .iter()
                .map(|(k, n)| (k.as_str().to_string(), json!(n)))
                .collect();
            let shadow: Map<String, Value> = m
                .shadow
                .iter()
                .map(|(k, a)| {
                    let rate = if a.decisions == 0 {
                        Value::Null
                    } else {
                        json!(a.agree as f64 / a.decisions as f64)
                    };
                    (
                        k.as_str().to_string(),
                        json!({"decisions": a.decisions, "agree": a.agree, "agreement_rate": rate}),
                    )
                })
                .collect();
            models.insert(
                name.clone(),
                json!({"decisions": m.decisions, "policies": by_policy, "shadow": shadow}),
            );
        }
        json!({
            "decisions": stats.decisions,
            "skipped": stats.skipped,
            "log_error": stats.log_error,
            "models": models,
        })
    }

    /// Stops the worker after the jobs already queued, flushes the log and returns its first
    /// I/O error, if any.
    pub fn stop(self) -> io::Result<()> {
        self.worker.stop()
    }
}

/// Starts the shadow worker on its own thread. It handles every [`ShadowJob`] from `rx` (see
/// [`ShadowEngine`] for how picks are made), and when `log` is set appends JSON lines to it: a
/// `start` line, a `config` line the first time each generation is seen, and a `shadow` line per
/// job; flushed within 100 ms and at stop. It ends when every sender is dropped or on
/// [`ShadowHandle::stop`]. Fails only if the log cannot be opened or the thread not started.
pub fn spawn_shadow(
    rx: Receiver<ShadowJob>,
    seed: u64,
    log: Option<PathBuf>,
) -> io::Result<ShadowHandle> {
    let mut writer = log.as_deref().map(LineWriter::open).transpose()?;
    if let Some(w) = writer.as_mut() {
        w.write(&json!({"type": "start", "seed": seed}), Instant::now());
    }
    let stats = Arc::new(Mutex::new(Stats::default()));
    let shared = Arc::clone(&stats);
    let worker = jsonl::spawn_worker("inferrail-shadow", rx, writer, move || {
        let mut engine = ShadowEngine::new(seed);
        move |job: ShadowJob, w: Option<&mut LineWriter>| handle_job(&mut engine, &shared, &job, w)
    })?;
    Ok(ShadowHandle { stats, worker })
}

/// Why a job cannot be evaluated (its indices do not fit its snapshot, or nothing to pick from).
fn job_is_usable(job: &ShadowJob) -> bool {
    let snap = &job.snapshot;
    job.model < snap.models.len()
        && job.chosen < snap.replicas.len()
        && !job.candidates.is_empty()
        && job
            .candidates
            .iter()
            .all(|c| c.replica < snap.replicas.len())
}

fn handle_job(
    engine: &mut ShadowEngine,
    stats: &Mutex<Stats>,
    job: &ShadowJob,
    mut writer: Option<&mut LineWriter>,
) {
    let snap = &job.snapshot;
    if !job_is_usable(job) {
        stats.lock().unwrap_or_else(PoisonError::into_inner).skipped += 1;
        return;
    }
    let model = snap.models[job.model].name.as_str();
    let first = engine.enter_generation(snap.generation, |name, kind| {
        job.shadow.contains(&kind) && snap.models.iter().any(|m| m.name == name)
    });
    let now = Instant::now();
    if let (true, Some(w)) = (first, writer.as_deref_mut()) {
        w.write(&config_line(job, engine.seed()), now);
    }
    let inputs = ShadowInputs {
        prompt: job.prompt.clone(),
        approx_tokens: job.approx_tokens,
        params: snap.models[job.model].brain.clone(),
    };
    let mut picks: Vec<(PolicyKind, Option<usize>)> = Vec::with_capacity(job.shadow.len());
    for kind in job.shadow.iter() {
        if picks.iter().any(|(k, _)| k == kind) {
            continue;
        }
        let pick = engine
            .pick(model, *kind, &job.request_id, &inputs, &job.candidates)
            .map(|i| job.candidates[i].replica);
        picks.push((*kind, pick));
    }
    {
        let mut s = stats.lock().unwrap_or_else(PoisonError::into_inner);
        s.decisions += 1;
        let m = s.models.entry(model.to_string()).or_default();
        m.decisions += 1;
        *m.by_policy.entry(job.policy).or_default() += 1;
        for (kind, pick) in &picks {
            let a = m.shadow.entry(*kind).or_default();
            a.decisions += 1;
            a.agree += u64::from(*pick == Some(job.chosen));
        }
        if s.log_error.is_none() {
            s.log_error = writer.as_deref().and_then(LineWriter::error_text);
        }
    }
    if let Some(w) = writer {
        w.write(&shadow_line(job, model, &inputs, &picks), now);
    }
}

/// The `config` line: generation, seed, and each model's policy and shadow list.
fn config_line(job: &ShadowJob, seed: u64) -> Value {
    let shadow: Vec<&str> = job.shadow.iter().map(PolicyKind::as_str).collect();
    let models: Vec<Value> = job
        .snapshot
        .models
        .iter()
        .map(|m| json!({"name": m.name, "policy": m.policy().as_str(), "shadow": shadow}))
        .collect();
    json!({
        "type": "config",
        "generation": job.snapshot.generation,
        "seed": seed,
        "models": models,
    })
}

/// The `shadow` line: the decision's inputs and each shadow policy's pick by replica id.
fn shadow_line(
    job: &ShadowJob,
    model: &str,
    inputs: &ShadowInputs,
    picks: &[(PolicyKind, Option<usize>)],
) -> Value {
    let snap = &job.snapshot;
    let id = |replica: usize| snap.replicas.get(replica).map(|r| r.id());
    let candidates: Vec<Value> = job
        .candidates
        .iter()
        .map(|c| jsonl::candidate_json(c, snap))
        .collect();
    let picks: Map<String, Value> = picks
        .iter()
        .map(|(k, p)| (k.as_str().to_string(), json!(p.and_then(id))))
        .collect();
    json!({
        "type": "shadow",
        "generation": snap.generation,
        "request_id": job.request_id,
        "model": model,
        "policy": job.policy.as_str(),
        "chosen": id(job.chosen),
        "candidates": candidates,
        "inputs": jsonl::inputs_json(inputs),
        "picks": picks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::jsonl::test_support::{snapshot, temp_path};
    use inferrail_dataplane::Snapshot;

    use crate::observe::jsonl::test_support::cand;

    fn job(snap: &Arc<Snapshot>, shadow: &[PolicyKind], id: &str, chosen: usize) -> ShadowJob {
        ShadowJob {
            snapshot: Arc::clone(snap),
            model: 0,
            shadow: shadow.into(),
            policy: PolicyKind::LeastRequest,
            request_id: id.to_string(),
            chosen,
            candidates: vec![cand(0, 3, 0), cand(1, 0, 0), cand(2, 5, 1)],
            prompt: None,
            approx_tokens: 0,
        }
    }

    #[test]
    fn engine_keeps_round_robin_state_until_pair_disappears() {
        let c = vec![cand(0, 0, 0), cand(1, 0, 0), cand(2, 0, 0)];
        let mut e = ShadowEngine::new(1);
        let rr = PolicyKind::RoundRobin;
        assert!(e.enter_generation(1, |_, _| true));
        let picks: Vec<_> = (0..4)
            .map(|_| e.pick("m", rr, "r", &ShadowInputs::default(), &c))
            .collect();
        assert_eq!(picks, vec![Some(0), Some(1), Some(2), Some(0)]);
        // A newer generation that still has (m, rr): state kept.
        assert!(e.enter_generation(2, |m, k| m == "m" && k == rr));
        assert!(!e.enter_generation(2, |_, _| false));
        assert_eq!(e.pick("m", rr, "r", &ShadowInputs::default(), &c), Some(1));
        // An older generation seen late prunes nothing.
        assert!(e.enter_generation(0, |_, _| false));
        assert_eq!(e.pick("m", rr, "r", &ShadowInputs::default(), &c), Some(2));
        // A newer generation without it: rebuilt, starts over.
        assert!(e.enter_generation(3, |_, _| false));
        assert_eq!(e.pick("m", rr, "r", &ShadowInputs::default(), &c), Some(0));
        assert!(e
            .pick(
                "m",
                PolicyKind::CostModel,
                "r",
                &ShadowInputs::default(),
                &c
            )
            .is_some());
        assert_eq!(e.pick("m", rr, "r", &ShadowInputs::default(), &[]), None);
    }

    #[test]
    fn engine_is_deterministic_per_request_id() {
        let c: Vec<_> = (0..8).map(|i| cand(i, 0, 0)).collect();
        let mut a = ShadowEngine::new(42);
        let mut b = ShadowEngine::new(42);
        for i in 0..50 {
            let id = format!("req-{i}");
            assert_eq!(
                a.pick("m", PolicyKind::Random, &id, &ShadowInputs::default(), &c),
                b.pick("m", PolicyKind::Random, &id, &ShadowInputs::default(), &c)
            );
        }
        let spread: HashSet<_> = (0..50)
            .filter_map(|i| {
                a.pick(
                    "m",
                    PolicyKind::Random,
                    &format!("x{i}"),
                    &ShadowInputs::default(),
                    &c,
                )
            })
            .collect();
        assert!(spread.len() > 3, "{spread:?}");
    }

    #[test]
    fn worker_counts_agreement_and_logs() {
        let path = temp_path("shadow-worker");
        let (tx, rx) = crossbeam_channel::bounded(64);
        let h = spawn_shadow(rx, 9, Some(path.clone())).unwrap();
        let snap = Arc::new(snapshot(7));
        let shadow = [PolicyKind::LeastRequest, PolicyKind::RoundRobin];
        for i in 0..6 {
            tx.send(job(&snap, &shadow, &format!("q{i}"), 1)).unwrap();
        }
        let mut bad = job(&snap, &shadow, "bad", 1);
        bad.candidates.clear();
        tx.send(bad).unwrap();
        drop(tx);
        // Wait for the thread to drain (it ends once the sender is gone).
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while h.report()["skipped"] != 1 && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let r = h.report();
        h.stop().unwrap();
        assert_eq!(r["decisions"], 6);
        assert_eq!(r["skipped"], 1);
        let m = &r["models"]["m0"];
        assert_eq!(m["policies"]["least_request"], 6);
        // least_request always picks replica 1 (the idle one) = chosen.
        assert_eq!(m["shadow"]["least_request"]["agree"], 6);
        assert_eq!(m["shadow"]["least_request"]["agreement_rate"], 1.0);
        // round_robin picks 0,1,2,0,1,2: agrees twice.
        assert_eq!(m["shadow"]["round_robin"]["agree"], 2);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 8);
        assert_eq!(lines[0]["type"], "start");
        assert_eq!(lines[1]["type"], "config");
        assert_eq!(lines[1]["generation"], 7);
        assert_eq!(lines[1]["models"][0]["shadow"][1], "round_robin");
        assert_eq!(lines[2]["type"], "shadow");
        assert_eq!(lines[2]["chosen"], "r1");
        assert_eq!(lines[2]["picks"]["round_robin"], "r0");
        assert_eq!(lines[2]["candidates"][2]["in_flight"], 5);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn stop_flushes_without_dropping_senders() {
        let path = temp_path("shadow-stop");
        let (tx, rx) = crossbeam_channel::bounded(8);
        let h = spawn_shadow(rx, 1, Some(path.clone())).unwrap();
        let snap = Arc::new(snapshot(1));
        tx.send(job(&snap, &[PolicyKind::P2c], "a", 0)).unwrap();
        h.stop().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        drop(tx);
        let _ = std::fs::remove_file(&path);
    }
}
