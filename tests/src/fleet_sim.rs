//! A deterministic, network-free fleet simulation: the gateway's real routing brain
//! ([`brain::decide`] / [`brain::commit`], one shared [`FleetFacts`], each replica's
//! [`ReplicaLedger`]s and [`ReplicaBlocks`] shadow index) driving `N` real simulator
//! schedulers ([`inferrail_sim::engine::Scheduler`], vLLM V1 with prefix caching) on one
//! virtual clock. Same seed and workload, same result: no threads, no sockets, no wall clock.
//!
//! # Timeline (mirrors `sim/src/server/core.rs` with a virtual clock)
//! Time is virtual seconds; the fleet facts' clock is the same time in microseconds. Each
//! replica has at most one step in flight. A step planned at `t` ([`Scheduler::step`]) ends at
//! `t + duration`; its tokens and finished requests are delivered at that end, and a busy engine
//! plans its next step at exactly that end. An idle engine plans a step as soon as a request
//! arrives. The loop repeatedly takes the earliest event time `t` and, at `t`:
//! 1. delivers every step that ends at `t` (first token: TTFT and [`Admission::first_byte`];
//!    finished: the admission dropped and the engine's own cached-token count);
//! 2. routes every request arriving at `t`: candidates built by the gateway's own builder
//!    ([`offer::candidate`], [`offer::annotate`]) from in-flight and queued prefill in
//!    the ledger, a fresh engine report from the scheduler's gauges, and predicted cache
//!    from [`ReplicaBlocks::matched_prefix`] through [`PromptFacts::cached_tokens`]),
//!    [`brain::decide`], [`brain::commit`], an admission in the ledger, the prompt recorded on the
//!    winner's shadow index (as `predict::Predictor::record`), and the request added to the
//!    winner's scheduler (stamped `t`, so a busy engine takes it at its next step, as the server
//!    stamps arrivals with the latest step start);
//! 3. plans a step at `t` on every replica with no step in flight and work to do.
//!
//! As in the real simulator, a step's effects on the scheduler (admissions, KV blocks, frees)
//! happen when it is planned, so an engine report read during a step shows its state after the
//! step, which is what the simulator's metrics page shows too.
//!
//! Workloads are lists of [`Arrival`]s built by the seeded generators in [`workload`].

use inferrail_config::PolicyKind;
use inferrail_dataplane::predict::PromptFacts;
use inferrail_routing::fleet::secs_to_micros;
use inferrail_routing::offer::{self, EngineReading, LoadReading};
use inferrail_routing::rendezvous::rendezvous;
use inferrail_routing::{brain, policies, BrainParams, Candidate, FleetFacts, Guard, Rng};
use inferrail_routing::{RouteInput, RoutingPolicy, Steering, Term};
use inferrail_shards::index::ReplicaBlocks;
use inferrail_shards::prefix_hash::{block_hashes, HashSalt};
use inferrail_sim::engine::{LatencyModel, Request, Scheduler, SchedulerConfig, StepOutput};
use inferrail_sync::{Admission, ReplicaLedger};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The model name the router's block hashes are salted with.
pub const SIM_MODEL: &str = "sim-llama";

/// A tiny seeded xorshift64* generator for workloads (no external crates).
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator for `seed` (any seed, 0 included).
    pub fn new(seed: u64) -> XorShift {
        let mut x = XorShift(seed ^ 0x9E37_79B9_7F4A_7C15 | 1);
        x.next_u64();
        x
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi.saturating_sub(lo) as u64 + 1)) as usize
    }

    /// An exponential variate with rate `rate` (mean `1 / rate`).
    pub fn exp(&mut self, rate: f64) -> f64 {
        -(1.0 - self.unit()).ln() / rate
    }
}

/// One request of a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    /// Arrival time, virtual seconds.
    pub at: f64,
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Output tokens at most.
    pub max_tokens: usize,
    /// The conversation's hash, if the request names one.
    pub session: Option<u64>,
}

/// Seeded workload generators.
pub mod workload {
    use super::{Arrival, XorShift};

    /// `n` random token ids (an unshared sequence, with overwhelming probability).
    pub fn tokens(rng: &mut XorShift, n: usize) -> Vec<u32> {
        (0..n)
            .map(|_| 100 + (rng.next_u64() % 30_000) as u32)
            .collect()
    }

    /// `count` Poisson arrival times at `rate` per second, from 0.
    pub fn poisson(rng: &mut XorShift, count: usize, rate: f64) -> Vec<f64> {
        let mut t = 0.0;
        (0..count)
            .map(|_| {
                t += rng.exp(rate);
                t
            })
            .collect()
    }

    /// Shared-prefix traffic: `systems` system prompts of `system_len` tokens (uniform in the
    /// range), request `i` picks system prompt `k` with probability proportional to
    /// `weights[k]` (uniform when empty) and appends a unique question of `question_len`
    /// tokens. Poisson arrivals at `rate`.
    #[allow(clippy::too_many_arguments)]
    pub fn shared_prefix(
        seed: u64,
        count: usize,
        rate: f64,
        systems: usize,
        system_len: (usize, usize),
        question_len: (usize, usize),
        weights: &[f64],
        max_tokens: usize,
    ) -> Vec<Arrival> {
        let mut rng = XorShift::new(seed);
        let prompts: Vec<Vec<u32>> = (0..systems)
            .map(|_| {
                let n = rng.range(system_len.0, system_len.1);
                tokens(&mut rng, n)
            })
            .collect();
        let weights: Vec<f64> = if weights.is_empty() {
            vec![1.0; systems]
        } else {
            weights.to_vec()
        };
        let total: f64 = weights.iter().sum();
        poisson(&mut rng, count, rate)
            .into_iter()
            .map(|at| {
                let mut x = rng.unit() * total;
                let mut k = 0;
                while k + 1 < systems && x >= weights[k] {
                    x -= weights[k];
                    k += 1;
                }
                let mut prompt = prompts[k].clone();
                let q = rng.range(question_len.0, question_len.1);
                prompt.extend(tokens(&mut rng, q));
                Arrival {
                    at,
                    prompt,
                    max_tokens,
                    session: None,
                }
            })
            .collect()
    }

    /// W1 from the spec: a handful of 2k-8k-token system prompts shared by every user, each
    /// request one of them (uniformly) plus a unique 50-500-token question.
    pub fn w1(
        seed: u64,
        count: usize,
        rate: f64,
        systems: usize,
        max_tokens: usize,
    ) -> Vec<Arrival> {
        shared_prefix(
            seed,
            count,
            rate,
            systems,
            (2000, 8000),
            (50, 500),
            &[],
            max_tokens,
        )
    }

    /// Zipf(`s`) popularity over `systems` system prompts (rank `k` has weight `1 / k^s`).
    pub fn zipf_weights(systems: usize, s: f64) -> Vec<f64> {
        (1..=systems).map(|k| 1.0 / (k as f64).powf(s)).collect()
    }

    /// Nothing shared: every prompt is `len` random tokens.
    pub fn unique(
        seed: u64,
        count: usize,
        rate: f64,
        len: (usize, usize),
        max_tokens: usize,
    ) -> Vec<Arrival> {
        let mut rng = XorShift::new(seed);
        poisson(&mut rng, count, rate)
            .into_iter()
            .map(|at| {
                let n = rng.range(len.0, len.1);
                Arrival {
                    at,
                    prompt: tokens(&mut rng, n),
                    max_tokens,
                    session: None,
                }
            })
            .collect()
    }

    /// Both workloads interleaved by arrival time.
    pub fn merge(a: Vec<Arrival>, b: Vec<Arrival>) -> Vec<Arrival> {
        let mut all: Vec<Arrival> = a.into_iter().chain(b).collect();
        all.sort_by(|x, y| x.at.total_cmp(&y.at));
        all
    }
}

/// Per-replica engine settings of a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOptions {
    /// Every replica's scheduler (its KV pool also sizes the shadow index).
    pub scheduler: SchedulerConfig,
    /// Every replica's step costs. The default is the linear model, the formula the gateway's
    /// default cost model prices: these simulations test the brain's decisions under correct
    /// pricing; the benchmark sweeps run the stepped model against a calibrated gateway.
    pub latency: LatencyModel,
    /// The hot-prefix demand window of the fleet facts.
    pub hot_window: Duration,
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions {
            scheduler: SchedulerConfig::default(),
            latency: LatencyModel::linear(),
            hot_window: inferrail_config::Routing::default().hot_prefix.window,
        }
    }
}

/// One replica: its engine, the gateway's shadow of its cache and its fleet counters.
struct SimReplica {
    key: u64,
    sched: Scheduler,
    blocks: ReplicaBlocks,
    /// Its one load ledger, as the gateway keeps it.
    ledger: Arc<ReplicaLedger>,
    /// Each request's admission in the ledger, by request id, until it finishes.
    admitted: HashMap<u64, Admission<Arc<ReplicaLedger>>>,
    /// The step in flight (planned, not delivered yet).
    step: Option<StepOutput>,
    routed: usize,
    max_in_flight: u32,
}

/// What one routed request did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestResult {
    /// Arrival, virtual seconds.
    pub arrival: f64,
    /// The replica it was routed to (index).
    pub replica: usize,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Tokens the gateway predicted cached on the winner.
    pub predicted_cached: u32,
    /// Prompt tokens the engine found in its prefix cache (engine truth, as
    /// `usage.prompt_tokens_details.cached_tokens`).
    pub cached_tokens: usize,
    /// Time to first token (first-token step end minus arrival).
    pub ttft: f64,
    /// When it finished.
    pub finished_at: f64,
}

/// Bounded load as seen at one decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecisionCheck {
    /// The request decided (index in the workload).
    pub request: usize,
    /// In flight on the winner before this request.
    pub winner_in_flight: u32,
    /// In flight summed over the candidates before this request.
    pub total_in_flight: u64,
    /// Candidates.
    pub candidates: usize,
    /// The guard that set the winner aside, per the decision's rows.
    pub winner_set_aside: Option<Guard>,
    /// Why the winner won.
    pub steering: Steering,
    /// What separated the winner from the runner-up.
    pub decided_by: Term,
    /// Tokens predicted cached on the winner.
    pub winner_cached: u32,
    /// The most tokens predicted cached on any candidate.
    pub best_cached: u32,
    /// A guard set aside every candidate predicted to hold `best_cached` tokens.
    pub best_set_aside: bool,
}

impl DecisionCheck {
    /// `ceil((1 + epsilon) * (total + 1) / n)`, computed here independently of the brain.
    pub fn bound(&self, epsilon: f64) -> u64 {
        ((1.0 + epsilon) * (self.total_in_flight as f64 + 1.0) / self.candidates as f64).ceil()
            as u64
    }

    /// The most the winner may hold after this request: the larger of [`DecisionCheck::bound`]
    /// and `floor` (`routing.bounded_load_floor`).
    pub fn limit(&self, epsilon: f64, floor: u64) -> u64 {
        self.bound(epsilon).max(floor)
    }

    /// Whether the winner holds at most the limit after this request (written as the spec
    /// states it: `in_flight + 1 <= max(bound, floor)`).
    #[allow(clippy::int_plus_one)]
    pub fn within_bound(&self, epsilon: f64, floor: u64) -> bool {
        u64::from(self.winner_in_flight) + 1 <= self.limit(epsilon, floor)
    }
}

/// One replica's totals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplicaResult {
    /// Requests routed to it.
    pub routed: usize,
    /// Most requests in flight to it at once (after a routing).
    pub max_in_flight: u32,
    /// Preemptions in its engine.
    pub preemptions: u64,
}

/// The outcome of one simulation.
#[derive(Debug, Clone)]
pub struct Report {
    /// The policy routed with.
    pub policy: PolicyKind,
    /// The bounded-load slack used.
    pub epsilon: f64,
    /// The bounded-load floor used.
    pub bounded_load_floor: u64,
    /// Every request, in workload order.
    pub requests: Vec<RequestResult>,
    /// Every replica, in order.
    pub replicas: Vec<ReplicaResult>,
    /// Every decision, in routing order.
    pub decisions: Vec<DecisionCheck>,
    /// When the last request finished.
    pub end: f64,
}

impl Report {
    /// The same report restricted to requests arriving at or after `t` (steady state after a
    /// warm-up); replicas' routed counts and decisions are restricted the same way.
    pub fn after(&self, t: f64) -> Report {
        let mut replicas = self.replicas.clone();
        for (i, r) in replicas.iter_mut().enumerate() {
            r.routed = self
                .requests
                .iter()
                .filter(|q| q.arrival >= t && q.replica == i)
                .count();
        }
        let decisions = self
            .decisions
            .iter()
            .filter(|d| self.requests[d.request].arrival >= t)
            .copied()
            .collect();
        Report {
            policy: self.policy,
            epsilon: self.epsilon,
            bounded_load_floor: self.bounded_load_floor,
            requests: self
                .requests
                .iter()
                .filter(|q| q.arrival >= t)
                .copied()
                .collect(),
            replicas,
            decisions,
            end: self.end,
        }
    }

    /// Cached prompt tokens (engine truth) over prompt tokens.
    pub fn hit_rate(&self) -> f64 {
        let prompt: usize = self.requests.iter().map(|r| r.prompt_tokens).sum();
        let cached: usize = self.requests.iter().map(|r| r.cached_tokens).sum();
        cached as f64 / prompt.max(1) as f64
    }

    /// Predicted cached tokens over prompt tokens.
    pub fn predicted_rate(&self) -> f64 {
        let prompt: usize = self.requests.iter().map(|r| r.prompt_tokens).sum();
        let cached: u64 = self
            .requests
            .iter()
            .map(|r| u64::from(r.predicted_cached))
            .sum();
        cached as f64 / prompt.max(1) as f64
    }

    /// The `q` quantile of TTFT (nearest rank), seconds.
    pub fn ttft(&self, q: f64) -> f64 {
        let mut t: Vec<f64> = self.requests.iter().map(|r| r.ttft).collect();
        if t.is_empty() {
            return 0.0;
        }
        t.sort_by(f64::total_cmp);
        let rank = ((q * t.len() as f64).ceil() as usize).clamp(1, t.len());
        t[rank - 1]
    }

    /// Share of requests each replica got.
    pub fn shares(&self) -> Vec<f64> {
        let n = self.requests.len().max(1) as f64;
        self.replicas.iter().map(|r| r.routed as f64 / n).collect()
    }

    /// The largest share of requests one replica got.
    pub fn busiest_share(&self) -> f64 {
        self.shares().into_iter().fold(0.0, f64::max)
    }

    /// Decisions whose winner went past the bounded-load limit (the bound, or the floor when
    /// that is higher).
    pub fn bound_violations(&self) -> usize {
        self.decisions
            .iter()
            .filter(|d| !d.within_bound(self.epsilon, self.bounded_load_floor))
            .count()
    }

    /// Decisions that left the most predicted cache for a candidate with less.
    pub fn cache_breaks(&self) -> usize {
        self.decisions
            .iter()
            .filter(|d| d.winner_cached < d.best_cached)
            .count()
    }

    /// Cache breaks forced by a guard (every best-cached candidate was set aside).
    pub fn guard_breaks(&self) -> usize {
        self.decisions
            .iter()
            .filter(|d| d.winner_cached < d.best_cached && d.best_set_aside)
            .count()
    }

    /// Decisions steered by `s`.
    pub fn steered(&self, s: Steering) -> usize {
        self.decisions.iter().filter(|d| d.steering == s).count()
    }

    /// The table header matching [`Report::row`].
    pub fn header() -> String {
        format!(
            "{:<12} {:>6} {:>7} {:>7} {:>8} {:>8} {:>8} {:>6} {:>6} {:>6} {:>8}  {}",
            "policy",
            "reqs",
            "hit",
            "pred",
            "p50_s",
            "p99_s",
            "busiest",
            "maxif",
            "viol",
            "breaks",
            "preempt",
            "shares"
        )
    }

    /// One table row: policy, requests, hit rate (engine truth), predicted rate, p50/p99 TTFT,
    /// busiest share, most in flight on one replica, bounded-load violations, cache breaks (winner predicted to hold less than
    /// the best candidate), preemptions, shares.
    pub fn row(&self) -> String {
        let shares: Vec<String> = self
            .shares()
            .iter()
            .map(|s| format!("{:.0}%", s * 100.0))
            .collect();
        format!(
            "{:<12} {:>6} {:>6.1}% {:>6.1}% {:>8.3} {:>8.3} {:>7.1}% {:>6} {:>6} {:>6} {:>8}  [{}]",
            self.policy.as_str(),
            self.requests.len(),
            self.hit_rate() * 100.0,
            self.predicted_rate() * 100.0,
            self.ttft(0.5),
            self.ttft(0.99),
            self.busiest_share() * 100.0,
            self.replicas
                .iter()
                .map(|r| r.max_in_flight)
                .max()
                .unwrap_or(0),
            self.bound_violations(),
            self.cache_breaks(),
            self.replicas.iter().map(|r| r.preemptions).sum::<u64>(),
            shares.join(" ")
        )
    }

    /// Prints `title` and a table of `reports` on stderr (visible with `--nocapture`).
    pub fn print_table(title: &str, reports: &[&Report]) {
        let mut s = format!("\n== {title}\n{}\n", Report::header());
        for r in reports {
            s.push_str(&r.row());
            s.push('\n');
        }
        eprint!("{s}");
    }
}

/// Per-request bookkeeping while a simulation runs.
#[derive(Debug, Clone, Copy, Default)]
struct Track {
    arrival: f64,
    replica: usize,
    prompt_tokens: usize,
    predicted: u32,
    first_token: Option<f64>,
    cached: Option<usize>,
    finished_at: Option<f64>,
}

/// A fleet of simulated engines behind the real routing brain (see the module docs).
pub struct FleetSim {
    kind: PolicyKind,
    policy: Box<dyn RoutingPolicy>,
    params: BrainParams,
    rng: Rng,
    fleet: FleetFacts,
    salt: HashSalt,
    block_size: usize,
    replicas: Vec<SimReplica>,
    decisions: Vec<DecisionCheck>,
    tracks: Vec<Track>,
}

/// Virtual seconds as fleet-clock microseconds.
fn micros(t: f64) -> u64 {
    (t * 1e6).round().max(0.0) as u64
}

impl FleetSim {
    /// `replicas` engines with the default scheduler and the linear latency model (see [`SimOptions`]).
    pub fn new(replicas: usize, policy: PolicyKind, params: BrainParams, seed: u64) -> FleetSim {
        FleetSim::with_options(replicas, policy, params, seed, SimOptions::default())
    }

    /// `replicas` engines with `options`.
    pub fn with_options(
        replicas: usize,
        policy: PolicyKind,
        params: BrainParams,
        seed: u64,
        options: SimOptions,
    ) -> FleetSim {
        assert!(replicas > 0, "a fleet needs a replica");
        let block_size = options.scheduler.block_size;
        let replicas = (0..replicas)
            .map(|i| {
                let sched = Scheduler::new(options.scheduler.clone(), options.latency)
                    .expect("valid scheduler config");
                let capacity = sched.pool().num_usable_blocks();
                SimReplica {
                    // Stable, distinct, well spread registry keys.
                    key: rendezvous(0x5eed_0000 + i as u64, 0x1f1e),
                    sched,
                    blocks: ReplicaBlocks::new(capacity),
                    ledger: Arc::new(ReplicaLedger::new()),
                    admitted: HashMap::new(),
                    step: None,
                    routed: 0,
                    max_in_flight: 0,
                }
            })
            .collect();
        FleetSim {
            kind: policy,
            policy: policies::build(policy),
            params,
            rng: Rng::new(seed),
            fleet: FleetFacts::new(options.hot_window),
            salt: HashSalt::new(SIM_MODEL, None, None),
            block_size,
            replicas,
            decisions: Vec::new(),
            tracks: Vec::new(),
        }
    }

    /// Runs `workload` (any order; routed by arrival time, ties in list order) until every
    /// request has finished.
    pub fn run(mut self, workload: &[Arrival]) -> Report {
        let mut order: Vec<usize> = (0..workload.len()).collect();
        order.sort_by(|&a, &b| workload[a].at.total_cmp(&workload[b].at));
        self.tracks = vec![Track::default(); workload.len()];
        let mut next = 0;
        let mut now = 0.0_f64;
        loop {
            let arrival = order.get(next).map(|&i| workload[i].at.max(now));
            let step_end = self
                .replicas
                .iter()
                .filter_map(|r| r.step.as_ref().map(|s| s.end))
                .min_by(f64::total_cmp);
            now = match (arrival, step_end) {
                (None, None) => break,
                (Some(a), None) => a,
                (None, Some(e)) => e,
                (Some(a), Some(e)) => a.min(e),
            };
            for i in 0..self.replicas.len() {
                if self.replicas[i].step.as_ref().is_some_and(|s| s.end <= now) {
                    let out = self.replicas[i].step.take().expect("a step in flight");
                    self.deliver(i, out);
                }
            }
            while let Some(&i) = order.get(next) {
                if workload[i].at > now {
                    break;
                }
                self.route(i, &workload[i], now);
                next += 1;
            }
            for (i, r) in self.replicas.iter_mut().enumerate() {
                if r.step.is_none() && (r.sched.has_work() || r.sched.next_arrival().is_some()) {
                    let out = r.sched.step(now);
                    assert!(
                        !out.is_idle(),
                        "replica {i} has work but can schedule nothing at {now}"
                    );
                    r.step = Some(out);
                }
            }
        }
        let requests: Vec<RequestResult> = self
            .tracks
            .iter()
            .map(|t| RequestResult {
                arrival: t.arrival,
                replica: t.replica,
                prompt_tokens: t.prompt_tokens,
                predicted_cached: t.predicted,
                cached_tokens: t.cached.expect("every request finished"),
                ttft: t.first_token.expect("every request had a first token") - t.arrival,
                finished_at: t.finished_at.unwrap_or(now),
            })
            .collect();
        Report {
            policy: self.kind,
            epsilon: self.params.epsilon,
            bounded_load_floor: self.params.bounded_load_floor,
            requests,
            replicas: self
                .replicas
                .iter()
                .map(|r| ReplicaResult {
                    routed: r.routed,
                    max_in_flight: r.max_in_flight,
                    preemptions: r.sched.stats().num_preemptions,
                })
                .collect(),
            decisions: self.decisions,
            end: now,
        }
    }

    /// Routes workload request `index` at `now` (see the module docs, step 2).
    fn route(&mut self, index: usize, a: &Arrival, now: f64) {
        let now_us = micros(now);
        let hashes = block_hashes(&self.salt, &a.prompt, self.block_size);
        let facts = PromptFacts {
            tokens: a.prompt.len().min(u32::MAX as usize) as u32,
            hashes: hashes.into(),
            block_size: self.block_size as u32,
        };
        let mut candidates: Vec<Candidate> = self
            .replicas
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let s = r.sched.stats();
                let reading = r.ledger.reading();
                let load = LoadReading {
                    in_flight: reading.in_flight,
                    pending: reading.awaiting_head,
                    prompt_tokens: reading.prompt_tokens,
                    queued_prefill_secs: reading.unserved_prefill_micros as f64 / 1e6,
                };
                // Read at this very instant of virtual time: age 0, always fresh, with the
                // gateway's own in flight at that instant (one gateway: nobody else's).
                let engine = EngineReading {
                    running: s.num_running as f64,
                    waiting: (s.num_waiting + s.num_pending) as f64,
                    kv_cache_usage: s.kv_cache_usage,
                    age: Duration::ZERO,
                    own_in_flight: reading.in_flight,
                };
                offer::candidate(i, r.key, load, Some(engine), Duration::ZERO)
            })
            .collect();
        let replicas = &self.replicas;
        offer::annotate(&mut candidates, &self.params.cost, |i| {
            let held = replicas.get(i)?.blocks.matched_prefix(&facts.hashes);
            Some(offer::HeldTokens::on_gpu(facts.cached_tokens(held)))
        });
        let input = RouteInput {
            prompt: Some(facts.view()),
            approx_tokens: facts.tokens,
            session: a.session,
            params: &self.params,
            fleet: &self.fleet,
            now_micros: now_us,
        };
        let decision = brain::decide(self.policy.as_mut(), &input, &candidates, &mut self.rng);
        let prefill = brain::commit(&input, &candidates, &decision);
        let w = decision.winner;
        let best_cached = candidates
            .iter()
            .map(|c| c.cached_tokens.unwrap_or(0))
            .max()
            .unwrap_or(0);
        self.decisions.push(DecisionCheck {
            request: index,
            winner_in_flight: candidates[w].in_flight,
            total_in_flight: candidates.iter().map(|c| u64::from(c.in_flight)).sum(),
            candidates: candidates.len(),
            winner_set_aside: decision.winner_row().set_aside,
            steering: decision.steering,
            decided_by: decision.decided_by,
            winner_cached: candidates[w].cached_tokens.unwrap_or(0),
            best_cached,
            best_set_aside: candidates
                .iter()
                .zip(&decision.rows)
                .filter(|(c, _)| c.cached_tokens.unwrap_or(0) == best_cached)
                .all(|(_, r)| r.set_aside.is_some()),
        });
        let r = &mut self.replicas[w];
        let id = index as u64 + 1;
        let admission = ReplicaLedger::try_admit_owned(
            r.ledger.clone(),
            u32::MAX,
            facts.tokens,
            secs_to_micros(prefill),
        )
        .expect("the simulated fleet has no caps");
        r.admitted.insert(id, admission);
        r.routed += 1;
        r.max_in_flight = r.max_in_flight.max(r.ledger.in_flight());
        let partial = facts.block_size > 0 && !facts.tokens.is_multiple_of(facts.block_size);
        if !facts.hashes.is_empty() || partial {
            r.blocks.record_prompt(&facts.hashes, partial);
        }
        let mut req = Request::new(id, a.prompt.clone(), a.max_tokens, now);
        req.seed = id;
        r.sched
            .add_request(req)
            .expect("the engine accepts the request");
        self.tracks[index] = Track {
            arrival: a.at,
            replica: w,
            prompt_tokens: a.prompt.len(),
            predicted: candidates[w].cached_tokens.unwrap_or(0),
            ..Track::default()
        };
    }

    /// Delivers replica `i`'s step at its end (see the module docs, step 1).
    fn deliver(&mut self, i: usize, out: StepOutput) {
        let end = out.end;
        let r = &mut self.replicas[i];
        for t in &out.tokens {
            if t.index == 0 {
                let track = &mut self.tracks[(t.id - 1) as usize];
                track.first_token = Some(end);
                if let Some(a) = r.admitted.get_mut(&t.id) {
                    a.head_received();
                    a.first_byte();
                }
            }
        }
        for f in &out.finished {
            let track = &mut self.tracks[(f.id - 1) as usize];
            track.cached = Some(f.cached_tokens);
            track.finished_at = Some(f.finished_at);
            r.admitted.remove(&f.id);
        }
    }
}
