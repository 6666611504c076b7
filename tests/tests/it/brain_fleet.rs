//! The routing brain against a simulated fleet in virtual time (`inferrail_tests::fleet_sim`):
//! the real `brain::decide` / `brain::commit`, fleet facts and shadow indexes driving real
//! simulator schedulers, no network. Deterministic: fixed seeds for workloads and routing.
//! Each test prints its table (`--nocapture`): policy, requests, hit rate (engine truth),
//! predicted rate, p50/p99 TTFT, busiest share, most in flight on one replica (maxif),
//! bounded-load violations, cache breaks (winner predicted to hold less than the best
//! candidate), preemptions, shares per replica.

use inferrail_config::PolicyKind;
use inferrail_dataplane::predict::PromptFacts;
use inferrail_routing::fleet::secs_to_micros;
use inferrail_routing::rendezvous::fold;
use inferrail_routing::{brain, policies, BrainParams, Candidate, EngineView, FleetFacts};
use inferrail_routing::{PromptView, Rng, RouteInput};
use inferrail_shards::index::ReplicaBlocks;
use inferrail_shards::prefix_hash::{block_hashes, HashSalt};
use inferrail_sync::{Admission, ReplicaLedger};
use inferrail_tests::fleet_sim::{
    workload, Arrival, FleetSim, Report, SimOptions, XorShift, SIM_MODEL,
};
use std::time::Duration;

/// Routing seed of every simulation.
const ROUTING_SEED: u64 = 7;
const REPLICAS: usize = 4;

/// Default engines with a KV pool of `blocks` blocks (and a context that fits in it).
fn engines(blocks: usize) -> SimOptions {
    let mut o = SimOptions::default();
    o.scheduler.num_gpu_blocks = blocks;
    o.scheduler.max_model_len = Some((blocks - 1).min(2048) * o.scheduler.block_size);
    o
}

fn simulate(policy: PolicyKind, w: &[Arrival], options: SimOptions) -> Report {
    FleetSim::with_options(
        REPLICAS,
        policy,
        BrainParams::default(),
        ROUTING_SEED,
        options,
    )
    .run(w)
}

// ---- 1. W1: shared system prompts under KV pressure ----------------------------------------
//
// 12 system prompts of 2k-8k tokens (about 60k tokens together), each request one of them plus
// a unique 50-500-token question, 8 output tokens, Poisson at 3 req/s (about 45% of what four
// replicas can prefill with no cache at all). Each replica's KV pool is 1,536 blocks (24.6k
// tokens, about 0.4 of the system prompts): a cache-aware split (a quarter each) fits, while a
// round-robin replica that sees every system prompt thrashes.

const W1_BLOCKS: usize = 1536;

fn w1() -> Vec<Arrival> {
    workload::w1(1, 600, 3.0, 12, 8)
}

fn w1_case(policy: PolicyKind) -> Report {
    let r = simulate(policy, &w1(), engines(W1_BLOCKS));
    Report::print_table(&format!("W1 / {}", policy.as_str()), &[&r]);
    r
}

#[test]
fn w1_round_robin_keeps_under_40_percent_cached() {
    let r = w1_case(PolicyKind::RoundRobin);
    assert!(
        r.hit_rate() < 0.40,
        "round_robin hit rate {:.3}",
        r.hit_rate()
    );
}

#[test]
fn w1_prefix_hash_keeps_80_percent_cached() {
    let r = w1_case(PolicyKind::PrefixHash);
    assert!(
        r.hit_rate() >= 0.80,
        "prefix_hash hit rate {:.3}",
        r.hit_rate()
    );
}

#[test]
fn w1_cost_model_keeps_80_percent_cached() {
    let r = w1_case(PolicyKind::CostModel);
    assert!(
        r.hit_rate() >= 0.80,
        "cost_model hit rate {:.3}",
        r.hit_rate()
    );
    assert_eq!(r.bound_violations(), 0, "bounded load");
}

/// kv_aware keeps 85.9% with the default weights (cache 1.0, load 0.75). With a load weight of
/// 1 it kept 76.9%: the load term jumps from 0 to 1 as soon as the owner has one request in
/// flight, which outweighs any cached fraction (always below 1), so an idle cold replica won.
#[test]
fn w1_kv_aware_keeps_80_percent_cached() {
    let r = w1_case(PolicyKind::KvAware);
    assert!(
        r.hit_rate() >= 0.80,
        "kv_aware hit rate {:.3}; {} decisions left the predicted owner, {} forced by a guard",
        r.hit_rate(),
        r.cache_breaks(),
        r.guard_breaks()
    );
    assert_eq!(r.bound_violations(), 0, "bounded load");
}

// ---- 2. Shared and unique prompts near saturation ------------------------------------------

#[test]
fn mixed_traffic_near_saturation_cost_model_has_lower_p99_ttft_than_kv_aware() {
    // Half W1-style (8 system prompts), half unique 500-3,000-token prompts, 26 req/s over
    // four default engines: p50 TTFT already several times the idle one, p99 above a second.
    let w = workload::merge(
        workload::shared_prefix(2, 500, 13.0, 8, (2000, 8000), (50, 500), &[], 8),
        workload::unique(102, 500, 13.0, (500, 3000), 8),
    );
    let kv = simulate(PolicyKind::KvAware, &w, SimOptions::default());
    let cost = simulate(PolicyKind::CostModel, &w, SimOptions::default());
    Report::print_table("shared + unique near saturation", &[&kv, &cost]);
    assert!(
        cost.ttft(0.99) < kv.ttft(0.99),
        "p99 TTFT cost_model {:.3} s, kv_aware {:.3} s",
        cost.ttft(0.99),
        kv.ttft(0.99)
    );
    assert_eq!(kv.bound_violations() + cost.bound_violations(), 0);
}

// ---- 3. Zipf over system prompts -----------------------------------------------------------

#[test]
fn zipf_traffic_cost_model_gives_no_replica_more_than_30_percent() {
    // 12 system prompts with Zipf(1) popularity: the most popular alone is 32% of requests.
    // 20 req/s over four default engines.
    let w = workload::shared_prefix(
        3,
        800,
        20.0,
        12,
        (2000, 8000),
        (50, 500),
        &workload::zipf_weights(12, 1.0),
        8,
    );
    let hash = simulate(PolicyKind::PrefixHash, &w, SimOptions::default());
    let kv = simulate(PolicyKind::KvAware, &w, SimOptions::default());
    let cost = simulate(PolicyKind::CostModel, &w, SimOptions::default());
    Report::print_table("Zipf(1) over 12 system prompts", &[&hash, &kv, &cost]);
    // The workload is skewed enough to overload one replica when routed by prefix alone.
    assert!(
        hash.busiest_share() > 0.30,
        "prefix_hash {:.3}",
        hash.busiest_share()
    );
    // cost_model spreads the skew by queue: no replica above 30%. kv_aware only caps in-flight
    // (the bounded-load guard), so its share is printed, not held to 30% (30.5% with the default
    // weights: it keeps the 32% prompt on its owner while the guard allows).
    assert!(
        cost.busiest_share() <= 0.30,
        "cost_model: busiest replica got {:.1}% of requests",
        cost.busiest_share() * 100.0
    );
    for r in [&kv, &cost] {
        assert_eq!(r.bound_violations(), 0);
    }
}

// ---- 4. One hot system prompt at a high rate -----------------------------------------------

/// Requests arriving before this are the warm-up (cold caches, demand window filling).
const HOT_WARMUP_SECS: f64 = 5.0;

#[test]
fn hot_prompt_prefix_hash_p99_past_20_s_cost_model_under_half_a_second() {
    // One 4,000-token system prompt, unique 300-900-token questions, 20 req/s: more than one
    // engine can prefill (about 13 req/s), well within four.
    let w = workload::shared_prefix(4, 1200, 20.0, 1, (4000, 4000), (300, 900), &[], 8);
    let hash = simulate(PolicyKind::PrefixHash, &w, SimOptions::default());
    let cost = simulate(PolicyKind::CostModel, &w, SimOptions::default());
    let steady = [hash.after(HOT_WARMUP_SECS), cost.after(HOT_WARMUP_SECS)];
    Report::print_table("hot prompt, every request", &[&hash, &cost]);
    Report::print_table(
        &format!("hot prompt, arrivals after {HOT_WARMUP_SECS} s"),
        &[&steady[0], &steady[1]],
    );
    assert!(
        hash.ttft(0.99) > 20.0,
        "prefix_hash p99 {:.3}",
        hash.ttft(0.99)
    );
    // Every request counts, warm-up included (0.344 s with this seed; the first ~1.6 s, while
    // the prompt is computed on a second and third replica, is the tail).
    assert!(
        cost.ttft(0.99) < 0.5,
        "cost_model p99 {:.3} s (after warm-up: {:.3} s)",
        cost.ttft(0.99),
        steady[1].ttft(0.99)
    );
    assert_eq!(cost.bound_violations(), 0);
}

// ---- 5. Bounded load holds for every decision ----------------------------------------------

#[test]
#[allow(clippy::int_plus_one)] // `in_flight + 1 <= bound`, as the spec writes it
fn bounded_load_holds_for_every_kv_aware_and_cost_model_decision() {
    let salt = HashSalt::new(SIM_MODEL, None, None);
    let block = 16usize;
    let mut decisions = 0usize;
    // prefix_hash ignores the guards: the same checks must catch it (the test has teeth).
    let mut hash_violations = 0usize;
    // The strict guard (floor 1) and the default floor (8): the limit is max(bound, floor).
    for floor in [1u64, 8] {
        let params = BrainParams {
            bounded_load_floor: floor,
            ..BrainParams::default()
        };
        for kind in [
            PolicyKind::KvAware,
            PolicyKind::CostModel,
            PolicyKind::PrefixHash,
        ] {
            for seed in 0..60u64 {
                let mut rng = XorShift::new(seed);
                let n = rng.range(1, 8);
                let fleet = FleetFacts::new(Duration::from_secs(10));
                let replicas: Vec<ReplicaLedger> = (0..n).map(|_| ReplicaLedger::new()).collect();
                // Each replica's admissions, oldest first (a departure finishes the oldest).
                let mut admitted: Vec<Vec<Admission<&ReplicaLedger>>> =
                    (0..n).map(|_| Vec::new()).collect();
                let mut shadows: Vec<ReplicaBlocks> = (0..n)
                    .map(|_| ReplicaBlocks::new(rng.range(50, 600)))
                    .collect();
                let systems: Vec<Vec<u32>> = (0..3)
                    .map(|_| {
                        let len = rng.range(16, 1500);
                        workload::tokens(&mut rng, len)
                    })
                    .collect();
                let mut p = policies::build(kind);
                let mut route_rng = Rng::new(seed);
                let mut now = 0u64;
                for _ in 0..300 {
                    now += rng.range(0, 20_000) as u64;
                    // Departures: about one event in three, from a random busy replica.
                    if rng.range(0, 2) == 0 {
                        let busy: Vec<usize> =
                            (0..n).filter(|&i| replicas[i].in_flight() > 0).collect();
                        if !busy.is_empty() {
                            let i = busy[rng.range(0, busy.len() - 1)];
                            let mut a = admitted[i].remove(0);
                            a.first_byte();
                            drop(a);
                        }
                        continue;
                    }
                    let mut prompt = systems[rng.range(0, systems.len() - 1)].clone();
                    let q = rng.range(0, 400);
                    prompt.extend(workload::tokens(&mut rng, q));
                    let facts = PromptFacts {
                        tokens: prompt.len() as u32,
                        hashes: block_hashes(&salt, &prompt, block).into(),
                        block_size: block as u32,
                    };
                    let candidates: Vec<Candidate> = (0..n)
                        .map(|i| Candidate {
                            replica: i,
                            key: 1000 + i as u64,
                            in_flight: replicas[i].in_flight(),
                            engine: Some(EngineView {
                                running: rng.range(0, 30) as f64,
                                waiting: rng.range(0, 5) as f64,
                                kv_cache_usage: rng.unit(),
                                age_micros: 0,
                                own_in_flight: 0,
                            }),
                            cached_tokens: Some(
                                facts.cached_tokens(shadows[i].matched_prefix(&facts.hashes)),
                            ),
                            queued_prefill_secs: replicas[i].reading().unserved_prefill_micros
                                as f64
                                / 1e6,
                            ..Candidate::default()
                        })
                        .collect();
                    let input = RouteInput {
                        prompt: Some(facts.view()),
                        approx_tokens: facts.tokens,
                        session: None,
                        params: &params,
                        fleet: &fleet,
                        now_micros: now,
                    };
                    let d = brain::decide(p.as_mut(), &input, &candidates, &mut route_rng);
                    let w = d.winner;
                    let total: u64 = candidates.iter().map(|c| u64::from(c.in_flight)).sum();
                    let bound =
                        ((1.0 + params.epsilon) * (total as f64 + 1.0) / n as f64).ceil() as u64;
                    let bound = bound.max(floor);
                    if kind == PolicyKind::PrefixHash {
                        if u64::from(candidates[w].in_flight) + 1 > bound {
                            hash_violations += 1;
                        }
                    } else {
                        decisions += 1;
                    }
                    let prefill = brain::commit(&input, &candidates, &d);
                    let a = replicas[w]
                        .try_admit(u32::MAX, 0, secs_to_micros(prefill))
                        .expect("no cap: always admitted");
                    admitted[w].push(a);
                    let partial = !facts.tokens.is_multiple_of(facts.block_size);
                    shadows[w].record_prompt(&facts.hashes, partial);
                    if kind == PolicyKind::PrefixHash {
                        continue;
                    }
                    assert_eq!(
                        d.winner_row().set_aside,
                        None,
                        "{} seed {seed}: the winner was set aside",
                        kind.as_str()
                    );
                    assert!(
                        u64::from(candidates[w].in_flight) + 1 <= bound,
                        "{} seed {seed} floor {floor}: winner holds {} + 1 > limit {bound} \
                     (in flight {:?})",
                        kind.as_str(),
                        candidates[w].in_flight,
                        candidates.iter().map(|c| c.in_flight).collect::<Vec<_>>()
                    );
                }
            }
        }
    }
    eprintln!(
        "\n== bounded load: {decisions} kv_aware/cost_model decisions within the limit \
         (floors 1 and 8); \
         prefix_hash went past it {hash_violations} times"
    );
    assert!(decisions > 10_000, "{decisions}");
    assert!(hash_violations > 0, "the check never fires");
}

// ---- 6. More cache never costs more --------------------------------------------------------

#[test]
fn more_predicted_cache_never_raises_a_candidates_estimate() {
    let params = BrainParams::default();
    let mut checked = 0usize;
    for seed in 0..400u64 {
        let mut rng = XorShift::new(seed);
        let fleet = FleetFacts::new(Duration::from_secs(10));
        let n = rng.range(1, 8);
        let block = 16u32;
        let tokens = rng.range(1, 20_000) as u32;
        let hashes: Vec<_> = (0..tokens / block)
            .map(|i| inferrail_routing::BlockHash(u128::from(seed) << 64 | u128::from(i)))
            .collect();
        let view = PromptView {
            tokens,
            hashes: &hashes,
            block_size: block,
        };
        let now = 1_000_000;
        // Sometimes a hot root, so hot owners are priced too.
        if rng.range(0, 1) == 0 && hashes.len() >= params.hot_blocks as usize {
            let root = fold(hashes[params.hot_blocks as usize - 1]);
            fleet.demand.add(root, rng.range(0, 40_000_000) as u64, now);
        }
        let candidates: Vec<Candidate> = (0..n)
            .map(|i| Candidate {
                replica: i,
                key: rng.next_u64(),
                in_flight: rng.range(0, 40) as u32,
                engine: (rng.range(0, 1) == 0).then(|| EngineView {
                    running: rng.range(0, 64) as f64,
                    waiting: rng.range(0, 8) as f64,
                    kv_cache_usage: rng.unit(),
                    age_micros: 0,
                    own_in_flight: 0,
                }),
                cached_tokens: Some(rng.range(0, tokens as usize) as u32),
                queued_prefill_secs: rng.unit() * 5.0,
                ..Candidate::default()
            })
            .collect();
        let input = RouteInput {
            prompt: Some(view),
            approx_tokens: tokens,
            session: None,
            params: &params,
            fleet: &fleet,
            now_micros: now,
        };
        let (rows, _) = brain::price(&input, &candidates);
        for i in 0..n {
            for _ in 0..4 {
                let mut more = candidates.clone();
                let was = more[i].cached_tokens.unwrap_or(0);
                more[i].cached_tokens = Some(rng.range(was as usize, tokens as usize) as u32);
                let (raised, _) = brain::price(&input, &more);
                assert!(
                    raised[i].estimate.total() <= rows[i].estimate.total() + 1e-12,
                    "seed {seed}: cached {was} -> {:?} raised the estimate {:?} -> {:?}",
                    more[i].cached_tokens,
                    rows[i].estimate,
                    raised[i].estimate
                );
                checked += 1;
            }
        }
    }
    eprintln!("\n== more cache never costs more: {checked} raises checked");
}
