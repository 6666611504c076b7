//! What a request's routing reads and leaves behind besides the choice itself: its cache
//! prediction (tokenize, look up, record on the chosen replica, take back on failure) and the
//! observers of each decision (statistics, shadow policies, the decision log).

use crate::core_state::{CoreContext, CoreView};
use crate::observe::{DecisionRecord, ShadowJob};
use crate::predict::{Budget, Predictor, PromptFacts};
use crate::request::ProxyRequest;
use inferrail_routing::offer::{self, HeldTokens};
use inferrail_routing::{BrainParams, Candidate, CostModelParams, FleetFacts, RouteInput};
use inferrail_shards::index::RecordTicket;
use std::time::{Duration, Instant};

/// A request's cache prediction: its prompt facts and, indexed by the view's snapshot replica
/// index (empty without a prediction), the tokens each replica is predicted to hold, by tier.
pub(crate) struct Prediction {
    /// The prompt's tokens and block hashes, when it was tokenized.
    pub(crate) facts: Option<PromptFacts>,
    cached: Vec<Option<HeldTokens>>,
}

impl Prediction {
    /// Tokenizes (on the pool) and looks up (on the index shards) within `tokenizer.max_wait`;
    /// counts the result.
    pub(crate) async fn make(ctx: &CoreContext, view: &CoreView, req: &ProxyRequest) -> Prediction {
        let Some(predictor) = &ctx.predictor else {
            ctx.prediction_stats.result("no_tokenizer");
            return Prediction::none();
        };
        // Boxed: the waits on the pool and the shards hold timers, which would make every
        // request's future large and 128-byte aligned even when nothing is predicted.
        Box::pin(Self::predicted(ctx, predictor, view, req)).await
    }

    /// No prompt facts and no cached tokens.
    fn none() -> Prediction {
        Prediction {
            facts: None,
            cached: Vec::new(),
        }
    }

    /// [`Prediction::make`] with a predictor.
    async fn predicted(
        ctx: &CoreContext,
        predictor: &Predictor,
        view: &CoreView,
        req: &ProxyRequest,
    ) -> Prediction {
        let none = Prediction::none();
        let stats = &ctx.prediction_stats;
        let model = &view.snap.models[req.model];
        let budget = Budget::new(view.snap.settings.prediction, Instant::now());
        let prompted = predictor
            .prompt(&model.name, req.endpoint, &req.body, &budget)
            .await;
        let (facts, took) = (prompted.facts, prompted.took);
        if took > Duration::ZERO {
            stats.tokenize_time(took);
        }
        let facts = match facts {
            Ok(f) => f,
            Err(label) => {
                stats.result(label);
                return none;
            }
        };
        // The engines' events disagree with our tokens for this model: still recorded (so the
        // check can see parity come back), but routed without predictions.
        if !prompted.trusted {
            stats.result("parity_off");
            return Prediction {
                facts: Some(facts),
                cached: Vec::new(),
            };
        }
        let keys: Vec<u64> = model
            .replicas
            .iter()
            .map(|&i| view.snap.replicas[i].spec.key)
            .collect();
        let held = match predictor.held_blocks(&facts, &keys, &budget).await {
            Ok(held) => held,
            Err(label) => {
                stats.result(label);
                return Prediction {
                    facts: Some(facts),
                    cached: Vec::new(),
                };
            }
        };
        stats.result("predicted");
        let mut cached = vec![None; view.snap.replicas.len()];
        for (&i, blocks) in model.replicas.iter().zip(held) {
            cached[i] = Some(facts.held_tokens(blocks));
        }
        Prediction {
            facts: Some(facts),
            cached,
        }
    }

    /// The tokens `replica` is predicted not to recompute (every tier), if predicted.
    pub(crate) fn cached_on(&self, replica: usize) -> Option<u32> {
        self.held_on(replica).map(|h| h.cached())
    }

    fn held_on(&self, replica: usize) -> Option<HeldTokens> {
        self.cached.get(replica).copied().flatten()
    }

    /// What the brain reads about this request.
    pub(crate) fn input<'a>(
        &'a self,
        req: &ProxyRequest,
        params: &'a BrainParams,
        fleet: &'a FleetFacts,
        now_micros: u64,
    ) -> RouteInput<'a> {
        RouteInput {
            prompt: self.facts.as_ref().map(PromptFacts::view),
            approx_tokens: u32::try_from(req.body.len() / 4).unwrap_or(u32::MAX),
            session: req.session,
            params,
            fleet,
            now_micros,
        }
    }

    /// Puts the predicted cached tokens on each candidate and prices their offloaded part at
    /// `cost`'s load rates ([`offer::annotate`]).
    pub(crate) fn annotate(&self, candidates: &mut [Candidate], cost: &CostModelParams) {
        offer::annotate(candidates, cost, |r| self.held_on(r));
    }

    /// The response headers' prompt and predicted cached tokens for `replica`.
    pub(crate) fn header(&self, replica: usize) -> Option<(u32, Option<u32>)> {
        self.facts
            .as_ref()
            .map(|f| (f.tokens, self.cached_on(replica)))
    }

    /// Records the prompt on the replica an attempt goes to.
    pub(crate) fn record(
        &self,
        ctx: &CoreContext,
        view: &CoreView,
        replica: usize,
    ) -> Option<RecordTicket> {
        let facts = self.facts.as_ref()?;
        let key = view.snap.replicas.get(replica)?.spec.key;
        ctx.predictor.as_ref()?.record(key, facts)
    }

    /// The attempt failed before the engine answered, or the engine refused it: it cached nothing.
    pub(crate) fn take_back(&self, ctx: &CoreContext, ticket: Option<RecordTicket>) {
        if let (Some(p), Some(t)) = (&ctx.predictor, ticket) {
            p.take_back(t);
        }
    }

    /// The request ran on `replica`: counts its prompt and predicted cached tokens.
    pub(crate) fn routed(&self, ctx: &CoreContext, replica: usize) {
        if let Some(f) = &self.facts {
            let cached = self.cached_on(replica).unwrap_or(0);
            ctx.prediction_stats
                .tokens(u64::from(f.tokens), u64::from(cached));
        }
    }
}

/// Hands a routing decision to the observers without waiting: statistics, the shadow worker
/// (first attempts only) and the decision log (sampled requests only).
pub(crate) fn observe_decision(
    ctx: &CoreContext,
    view: &CoreView,
    req: &ProxyRequest,
    attempt: u32,
    winner: usize,
    candidates: &[Candidate],
    input: &RouteInput<'_>,
) {
    let oldest = candidates
        .iter()
        .filter_map(|c| c.engine.map(|e| e.age_micros))
        .max()
        .map(Duration::from_micros);
    ctx.stats.decision(oldest);
    let snap = &view.snap;
    let policy = view.arm_policy(req.model, req.arm);
    if attempt == 1 {
        if let Some(sink) = &ctx.shadow {
            let shadow = &snap.models[req.model].shadow;
            if !shadow.is_empty() {
                sink.try_send(ShadowJob {
                    snapshot: snap.clone(),
                    model: req.model,
                    shadow: shadow.clone(),
                    policy,
                    request_id: req.request_id.clone(),
                    chosen: winner,
                    candidates: candidates.to_vec(),
                    prompt: input.prompt.map(|p| PromptFacts {
                        tokens: p.tokens,
                        hashes: p.hashes.into(),
                        block_size: p.block_size,
                    }),
                    approx_tokens: input.approx_tokens,
                });
            }
        }
    }
    if req.sampled {
        if let Some(sink) = &ctx.decisions {
            sink.try_send(DecisionRecord {
                snapshot: snap.clone(),
                model: req.model,
                policy,
                request_id: req.request_id.clone(),
                attempt,
                winner,
                candidates: candidates.to_vec(),
                prompt: snap.settings.log_prompts.then(|| req.body.to_vec()),
            });
        }
    }
}
