//! POST /admin/explain/v1/chat/completions (and /v1/completions): what a model's policy would do
//! with a client request now, without routing it or changing any state.
//!
//! The request is tokenized and looked up in the index on the control thread, every replica
//! serving the model is offered the way a data core offers it ([`offers`]), and the decision goes
//! through the same [`brain::decide`] the cores call; nothing is committed (no session, no prefix
//! demand, no queued prefill). `?policy=NAME` explains any policy instead of the model's own
//! (for a split model, the arm the request's conversation falls in).

use crate::admin::api::model_of;
use crate::admin::response::AdminResponse;
use crate::controller::Controller;
use inferrail_config::PolicyKind;
use inferrail_dataplane::offers::offers;
use inferrail_dataplane::predict::PromptFacts;
use inferrail_routing::split::{named_conversation, session_hash};
use inferrail_routing::{brain, offer, policies, Candidate, Decision, Rng, RouteInput};
use inferrail_shards::tokenize::Endpoint;
use inferrail_wire::json_field::find_top_level_string;
use inferrail_wire::{ErrorKind, RequestHead};
use serde_json::{json, Value};
use std::time::Instant;

/// The `policy` query parameter, if any.
fn policy_param(head: &RequestHead) -> Result<Option<PolicyKind>, AdminResponse> {
    let target = head.target();
    let Some(q) = target.iter().position(|b| *b == b'?') else {
        return Ok(None);
    };
    for pair in target[q + 1..].split(|b| *b == b'&') {
        if let Some(v) = pair.strip_prefix(b"policy=") {
            let name = String::from_utf8_lossy(v);
            return PolicyKind::from_name(&name).map(Some).ok_or_else(|| {
                let all: Vec<&str> = PolicyKind::ALL.iter().map(|p| p.as_str()).collect();
                AdminResponse::error(
                    ErrorKind::BadRequest,
                    &format!(
                        "unknown policy `{name}`; expected one of: {}",
                        all.join(", ")
                    ),
                )
            });
        }
    }
    Ok(None)
}

/// The explanation of `body` (see the module docs).
pub fn explain(
    ctl: &Controller,
    head: &RequestHead,
    endpoint: Endpoint,
    body: &[u8],
) -> AdminResponse {
    let snap = ctl.current().clone();
    let model = match model_of(&snap, body) {
        Ok(m) => m,
        Err(refusal) => return refusal,
    };
    let entry = &snap.models[model];
    let user = find_top_level_string(body, "user");
    let named = named_conversation(head.header("x-session-id"), user.as_deref());
    let kind = match policy_param(head) {
        Ok(Some(k)) => k,
        Ok(None) => {
            let arm = entry
                .split
                .as_ref()
                .map_or(0, |arms| arms.choose(named.unwrap_or(b"")));
            entry
                .arms
                .get(arm)
                .map_or(PolicyKind::LeastRequest, |a| a.policy)
        }
        Err(refusal) => return refusal,
    };
    let now = Instant::now();
    let fleet = &ctl.observers.fleet;
    let fleet_now = ctl.observers.fleet_clock.micros(now);
    let offered: Vec<_> = offers(&snap, model, fleet_now).collect();
    let mut candidates: Vec<Candidate> = offered
        .iter()
        .filter_map(|(_, o)| o.as_ref().ok().copied())
        .collect();
    let predictor = ctl.observers.predictor.as_ref();
    let facts: Result<PromptFacts, &str> = predictor
        .ok_or("no_tokenizer")
        .and_then(|p| p.prompt_now(&entry.name, endpoint, body));
    let mut prediction = facts.as_ref().map(|_| "predicted").unwrap_or_else(|e| e);
    if let (Ok(f), Some(p)) = (&facts, predictor) {
        let keys: Vec<u64> = candidates.iter().map(|c| c.key).collect();
        match p.held_blocks_now(f, &keys) {
            Some(held) => {
                let mut cached = vec![None; snap.replicas.len()];
                for (c, blocks) in candidates.iter().zip(held) {
                    if let Some(slot) = cached.get_mut(c.replica) {
                        *slot = Some(f.held_tokens(blocks));
                    }
                }
                offer::annotate(&mut candidates, &entry.brain.cost, |r| {
                    cached.get(r).copied().flatten()
                });
            }
            None => prediction = "index_busy",
        }
    }
    let input = RouteInput {
        prompt: facts.as_ref().ok().map(PromptFacts::view),
        approx_tokens: u32::try_from(body.len() / 4).unwrap_or(u32::MAX),
        session: named
            .filter(|_| entry.brain.session_affinity)
            .map(session_hash),
        params: &entry.brain,
        fleet,
        now_micros: fleet_now,
    };
    let decision = (!candidates.is_empty()).then(|| {
        let mut p = policies::build(kind);
        brain::decide(p.as_mut(), &input, &candidates, &mut Rng::new(0))
    });
    let answer = render(
        &snap,
        kind,
        &input,
        prediction,
        &offered,
        &candidates,
        decision.as_ref(),
    );
    AdminResponse::json(200, &answer)
}

fn render(
    snap: &inferrail_dataplane::Snapshot,
    kind: PolicyKind,
    input: &RouteInput<'_>,
    prediction: &str,
    offered: &[(
        usize,
        Result<Candidate, inferrail_dataplane::offers::NotOffered>,
    )],
    candidates: &[Candidate],
    decision: Option<&Decision>,
) -> Value {
    let id = |i: usize| snap.replicas.get(i).map_or("", |r| r.id());
    let replicas: Vec<Value> = offered
        .iter()
        .map(|(i, offer)| {
            let pos = candidates.iter().position(|c| c.replica == *i);
            let row = pos.and_then(|p| Some((candidates[p], decision?.rows[p])));
            match (offer, row) {
                (Ok(_), Some((c, r))) => json!({
                    "id": id(*i),
                    "offered": true,
                    "in_flight": c.in_flight,
                    "pending": c.pending,
                    "queued_prefill_secs": c.queued_prefill_secs,
                    "engine": c.engine.map(|e| json!({
                        "running": e.running, "waiting": e.waiting,
                        "kv_cache_usage": e.kv_cache_usage, "age_micros": e.age_micros,
                    })),
                    "cached_tokens": c.cached_tokens,
                    "pool": c.room.map(|room| json!({
                        "free_blocks": room.free_blocks, "reuse": room.reuse,
                    })),
                    "priced_cached_tokens": r.priced_cached,
                    "hot_owner": r.hot_owner,
                    "set_aside": r.set_aside.map(|g| g.as_str()),
                    "estimate": {
                        "queue_secs": r.estimate.queue,
                        "prefill_secs": r.estimate.prefill,
                        "tier_secs": r.estimate.tier,
                        "total_secs": r.estimate.total(),
                        "evict_blocks": r.evict_blocks,
                        "evict_secs": r.evict_secs,
                        "spill_secs": r.spill_secs,
                    },
                    "score": r.score,
                }),
                (Ok(_), None) => json!({"id": id(*i), "offered": true}),
                (Err(why), _) => json!({"id": id(*i), "offered": false, "why": why.as_str()}),
            }
        })
        .collect();
    let prompt = input
        .prompt
        .map(|p| json!({"tokens": p.tokens, "blocks": p.hashes.len(), "block_size": p.block_size}));
    json!({
        "policy": kind.as_str(),
        "prediction": prediction,
        "prompt": prompt,
        "approx_tokens": input.approx_tokens,
        "bounded_load_limit": brain::guards::limit(
            input.params.epsilon,
            input.params.bounded_load_floor,
            candidates,
        ),
        "replicas": replicas,
        "winner": decision.map(|d| id(candidates[d.winner].replica)),
        "steering": decision.map(|d| d.steering.as_str()),
        "decided_by": decision.map(|d| d.decided_by.as_str()),
        "hot_prefix": decision.and_then(|d| d.hot).map(|h| json!({
            "demand": h.demand, "owners": h.owners, "spreading": h.spreading,
        })),
    })
}
