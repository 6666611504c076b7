//! Tests of the routing brain: the worked example, guards, sessions, hot prefixes, prefix_hash
//! and determinism. Bounded load held across cores, which needs the data plane's fleet-wide
//! counters, is tested in dataplane/tests/bounded_load_across_cores.rs.

use super::*;
use crate::candidate::EngineView;
use crate::decision::Guard;
use crate::fleet::FleetFacts;
use crate::input::{BrainParams, PromptView};
use crate::policies;
use crate::rendezvous::fold;
use inferrail_config::PolicyKind;
use inferrail_sync::BlockHash;
use proptest::prelude::{any, prop, prop_assert, prop_assert_eq, proptest, Strategy};
use std::sync::OnceLock;
use std::time::Duration;

fn fleet() -> &'static FleetFacts {
    static FLEET: OnceLock<FleetFacts> = OnceLock::new();
    FLEET.get_or_init(|| FleetFacts::new(Duration::from_secs(10)))
}

fn cand(replica: usize, in_flight: u32, cached: u32, queued: f64) -> Candidate {
    Candidate {
        replica,
        key: replica as u64 + 1,
        in_flight,
        cached_tokens: Some(cached),
        queued_prefill_secs: queued,
        ..Candidate::default()
    }
}

fn hashes(n: usize, salt: u128) -> Vec<BlockHash> {
    (0..n)
        .map(|i| BlockHash(salt * 1_000_003 + i as u128))
        .collect()
}

fn input<'a>(
    prompt: Option<PromptView<'a>>,
    params: &'a BrainParams,
    fleet: &'a FleetFacts,
) -> RouteInput<'a> {
    RouteInput {
        prompt,
        approx_tokens: 0,
        session: None,
        params,
        fleet,
        now_micros: 0,
    }
}

fn run(kind: PolicyKind, input: &RouteInput<'_>, c: &[Candidate], seed: u64) -> Decision {
    let mut p = policies::build(kind);
    decide(p.as_mut(), input, c, &mut Rng::new(seed))
}

/// The worked example: a replica holding a 4,000-token system prompt behind a 2 s queue loses
/// to an idle cold replica, and wins once the cold one is busier than that.
#[test]
fn a_cached_replica_behind_a_long_queue_loses_then_wins() {
    let params = BrainParams::default();
    let h = hashes(262, 1);
    let prompt = PromptView {
        tokens: 4200,
        hashes: &h,
        block_size: 16,
    };
    let i = input(Some(prompt), &params, fleet());
    // A: 4,000 tokens cached, 2 s of prefill queued. B: cold and idle.
    let c = [cand(0, 3, 4000, 2.0), cand(1, 0, 0, 0.0)];
    let d = run(PolicyKind::CostModel, &i, &c, 1);
    assert_eq!(d.winner, 1, "{d:?}");
    assert_eq!(d.decided_by, Term::Queue);
    // P on the cold replica: a*4200 + b*4200*2100 + d.
    let cold = 1e-4 * 4200.0 + 3.3e-9 * 4200.0 * 2100.0 + 0.005;
    assert!((d.rows[1].estimate.prefill - cold).abs() < 1e-9);
    // Now the cold replica has 3 s queued: the cached one wins on the prefill it saves.
    let c = [cand(0, 3, 4000, 2.0), cand(1, 2, 0, 3.0)];
    let d = run(PolicyKind::CostModel, &i, &c, 1);
    assert_eq!(d.winner, 0, "{d:?}");
    assert_eq!(d.decided_by, Term::Queue);
    let c = [cand(0, 3, 4000, 0.5), cand(1, 2, 0, 0.5)];
    let d = run(PolicyKind::CostModel, &i, &c, 1);
    assert_eq!((d.winner, d.decided_by), (0, Term::Prefill));
}

/// Offloaded tokens are cached (not recomputed) but priced by their load time: a replica with
/// the prompt on the CPU beats a cold one while loading is cheaper than the prefill it saves,
/// loses to one holding it on the GPU at equal load, and loses to the cold one once loading
/// costs more than that prefill.
#[test]
fn offloaded_tokens_are_priced_by_their_load_time() {
    use crate::offer::{self, HeldTokens};
    let params = BrainParams::default();
    let h = hashes(262, 9);
    let prompt = PromptView {
        tokens: 4200,
        hashes: &h,
        block_size: 16,
    };
    let i = input(Some(prompt), &params, fleet());
    let on_cpu = HeldTokens {
        gpu: 0,
        cpu: 4000,
        storage: 0,
        room: None,
    };
    let candidates = |cost: &inferrail_config::CostModelParams, held: [Option<HeldTokens>; 2]| {
        let mut c: Vec<Candidate> = (0..2)
            .map(|r| {
                let load = offer::LoadReading::default();
                offer::candidate(r, r as u64 + 1, load, None, Duration::ZERO)
            })
            .collect();
        offer::annotate(&mut c, cost, |r| held[r]);
        c
    };
    // On the CPU against cold: 4,000 tokens load in 4000 * 5e-6 = 0.02 s, their prefill
    // would take ~0.43 s.
    let c = candidates(&params.cost, [Some(on_cpu), Some(HeldTokens::default())]);
    let d = run(PolicyKind::CostModel, &i, &c, 1);
    assert_eq!((d.winner, d.decided_by), (0, Term::Prefill), "{d:?}");
    let cpu = d.rows[0];
    assert_eq!(
        cpu.cached_tokens, 4000,
        "offloaded tokens are not recomputed"
    );
    assert!((cpu.estimate.tier - 4000.0 * params.cost.cpu_load_token_secs).abs() < 1e-12);
    assert!((cpu.estimate.prefill - params.cost.prefill_secs(200, 4000)).abs() < 1e-12);
    assert!((cpu.work_secs - params.cost.prefill_secs(200, 4000)).abs() < 1e-12);
    assert_eq!(d.rows[1].estimate.tier, 0.0);
    // On the CPU against the same tokens on the GPU: only the tier term differs.
    let c = candidates(&params.cost, [Some(on_cpu), Some(HeldTokens::on_gpu(4000))]);
    let d = run(PolicyKind::CostModel, &i, &c, 1);
    assert_eq!((d.winner, d.decided_by), (1, Term::Tier), "{d:?}");
    assert_eq!(d.rows[0].estimate.prefill, d.rows[1].estimate.prefill);
    // Loading slower than recomputing: storage at 2e-4 s a token (0.8 s) loses to cold.
    let slow = inferrail_config::CostModelParams {
        storage_load_token_secs: 2e-4,
        ..params.cost
    };
    let in_storage = HeldTokens {
        gpu: 0,
        cpu: 0,
        storage: 4000,
        room: None,
    };
    let c = candidates(&slow, [Some(in_storage), Some(HeldTokens::default())]);
    let d = run(PolicyKind::CostModel, &i, &c, 1);
    assert_eq!((d.winner, d.decided_by), (1, Term::Tier), "{d:?}");
}

#[test]
fn kv_pressure_sets_long_prompts_aside_unless_every_replica_is_full() {
    let params = BrainParams {
        kappa: 0.92,
        ..BrainParams::default()
    };
    let h = hashes(62, 2);
    let prompt = PromptView {
        tokens: 1000,
        hashes: &h,
        block_size: 16,
    };
    let i = input(Some(prompt), &params, fleet());
    let full = |mut c: Candidate, usage: f64| {
        c.engine = Some(EngineView {
            kv_cache_usage: usage,
            ..EngineView::default()
        });
        c
    };
    // The full replica holds the whole prompt but would compute little there: passes.
    let c = [
        full(cand(0, 0, 992, 0.0), 0.99),
        full(cand(1, 0, 0, 0.0), 0.1),
    ];
    let (rows, _) = price(&i, &c);
    assert_eq!(rows[0].set_aside, None);
    // Little of it cached: 1000 - 100 tokens to compute > 256 on a 99% full cache.
    let c = [
        full(cand(0, 0, 100, 0.0), 0.99),
        full(cand(1, 0, 0, 0.0), 0.1),
    ];
    let (rows, _) = price(&i, &c);
    assert_eq!(rows[0].set_aside, Some(Guard::KvPressure));
    assert_eq!(run(PolicyKind::KvAware, &i, &c, 3).winner, 1);
    // Every replica full: the guard stands down.
    let c = [
        full(cand(0, 0, 100, 0.0), 0.99),
        full(cand(1, 0, 0, 0.0), 0.95),
    ];
    let (rows, _) = price(&i, &c);
    assert!(rows.iter().all(|r| r.set_aside.is_none()));
}

#[test]
fn a_conversation_goes_back_to_its_replica_while_the_guards_allow() {
    let facts = FleetFacts::new(Duration::from_secs(10));
    let params = BrainParams {
        session_affinity: true,
        ..BrainParams::default()
    };
    let mut i = input(None, &params, &facts);
    i.session = Some(42);
    let c = [cand(0, 0, 0, 0.0), cand(1, 1, 0, 0.0), cand(2, 1, 0, 0.0)];
    let first = run(PolicyKind::CostModel, &i, &c, 5);
    assert_eq!(first.winner, 0, "idle replica first");
    commit(&i, &c, &first);
    // Replica 0 is now the busiest of the three, but the conversation sticks to it.
    let c = [cand(0, 1, 0, 0.5), cand(1, 0, 0, 0.0), cand(2, 0, 0, 0.0)];
    let d = run(PolicyKind::CostModel, &i, &c, 5);
    assert_eq!((d.winner, d.steering), (0, Steering::Session));
    // Overloaded beyond the bounded-load limit: it moves.
    let c = [cand(0, 9, 0, 0.5), cand(1, 0, 0, 0.0), cand(2, 0, 0, 0.0)];
    let d = run(PolicyKind::CostModel, &i, &c, 5);
    assert_ne!(d.winner, 0);
    assert_eq!(d.rows[0].set_aside, Some(Guard::BoundedLoad));
    // prefix_hash ignores sessions.
    let d = run(PolicyKind::PrefixHash, &i, &c, 5);
    assert_ne!(d.steering, Steering::Session);
}

#[test]
fn a_hot_root_prefix_gets_owners_priced_as_holding_it() {
    let facts = FleetFacts::new(Duration::from_secs(10));
    let params = BrainParams::default(); // hot_blocks 8, utilization 0.7
    let h = hashes(125, 3);
    let prompt = PromptView {
        tokens: 2000,
        hashes: &h,
        block_size: 16,
    };
    let i = input(Some(prompt), &params, &facts);
    let root = fold(h[7]);
    // 15 s of prefill demand within the 10 s window: 1.5 replicas' worth, so ceil(1.5/0.7) = 3.
    facts.demand.add(root, 15_000_000, 0);
    let c: Vec<Candidate> = (0..4).map(|r| cand(r, 0, 0, 0.0)).collect();
    let (rows, hot) = price(&i, &c);
    let hot = hot.expect("the prompt has a root");
    assert!((hot.demand - 1.5).abs() < 1e-9, "{hot:?}");
    assert_eq!(hot.owners, 3);
    let owners: Vec<&Row> = rows.iter().filter(|r| r.hot_owner).collect();
    assert_eq!(owners.len(), 3);
    for r in owners {
        assert_eq!(r.priced_cached, 128, "the 8-block root is priced as cached");
        assert_eq!(r.cached_tokens, 0, "nothing is really cached yet");
    }
    let d = run(PolicyKind::CostModel, &i, &c, 9);
    assert!(d.rows[d.winner].hot_owner);
    assert_eq!(d.steering, Steering::HotPrefix);
    // A cold root gets no owners.
    let cold = hashes(125, 4);
    let i = input(
        Some(PromptView {
            tokens: 2000,
            hashes: &cold,
            block_size: 16,
        }),
        &params,
        &facts,
    );
    assert_eq!(price(&i, &c).1.map(|h| h.owners), Some(0));
}

#[test]
fn a_held_hot_root_spreads_only_when_its_holders_queue_outlasts_computing_it() {
    let facts = FleetFacts::new(Duration::from_secs(10));
    let params = BrainParams::default(); // hot_blocks 8, utilization 0.7
    let h = hashes(125, 6);
    let prompt = PromptView {
        tokens: 2000,
        hashes: &h,
        block_size: 16,
    };
    let i = input(Some(prompt), &params, &facts);
    // 1.5 replicas' worth of demand: three owners on demand alone.
    facts.demand.add(fold(h[7]), 15_000_000, 0);
    let cost = &params.cost;
    let saved = cost.prefill_secs(2000, 0) - cost.prefill_secs(2000 - 128, 128);
    assert!(saved > 0.0);
    let holder = 2;
    let with_holder_queue = |queued: f64| -> Vec<Candidate> {
        (0..4)
            .map(|r| {
                if r == holder {
                    cand(r, 0, 128, queued)
                } else {
                    cand(r, 0, 0, 0.0)
                }
            })
            .collect()
    };
    // The holder is idle: the demand alone gives owners, but nobody else is priced as holding.
    let idle = with_holder_queue(0.0);
    let (rows, hot) = price(&i, &idle);
    let hot = hot.expect("the prompt has a root");
    assert_eq!(hot.owners, 3);
    assert!(!hot.spreading, "{hot:?}");
    assert!(rows
        .iter()
        .all(|r| !r.hot_owner && r.priced_cached == r.cached_tokens));
    let d = run(PolicyKind::CostModel, &i, &idle, 9);
    assert_eq!(d.winner, holder, "the idle holder is the cheapest");
    assert_ne!(d.steering, Steering::HotPrefix);
    // Just under the root's compute time queued on the holder: still no spreading.
    let (_, hot) = price(&i, &with_holder_queue(saved * 0.9));
    assert!(!hot.expect("hot").spreading);
    // Longer than computing the root: the owners that do not hold it are priced as holding it.
    let busy = with_holder_queue(saved * 1.5);
    let (rows, hot) = price(&i, &busy);
    assert!(hot.expect("hot").spreading);
    let credited: Vec<usize> = (0..4)
        .filter(|&r| rows[r].hot_owner && rows[r].priced_cached > rows[r].cached_tokens)
        .collect();
    assert!(
        !credited.is_empty() && !credited.contains(&holder),
        "{credited:?}"
    );
    let d = run(PolicyKind::CostModel, &i, &busy, 9);
    assert!(
        credited.contains(&d.winner),
        "the queue sends it to a hot owner: {d:?}"
    );
    assert_eq!(d.steering, Steering::HotPrefix);
    // Two holders, one of them idle: the shortest holder queue decides, so no spreading.
    let mut two = busy.clone();
    two[0] = cand(0, 0, 128, 0.0);
    assert!(!price(&i, &two).1.expect("hot").spreading);
}

#[test]
fn prefix_hash_follows_the_first_blocks_whatever_the_load() {
    let params = BrainParams::default(); // 8 blocks
    let mut a = hashes(20, 5);
    let b = a.clone();
    a[15] = BlockHash(7); // differs after the hashed prefix
    let view = |h: &'static [BlockHash]| PromptView {
        tokens: 330,
        hashes: h,
        block_size: 16,
    };
    let (a, b): (&'static [BlockHash], &'static [BlockHash]) = (
        Box::leak(a.into_boxed_slice()),
        Box::leak(b.into_boxed_slice()),
    );
    let idle: Vec<Candidate> = (0..5).map(|r| cand(r, 0, 0, 0.0)).collect();
    let first = run(
        PolicyKind::PrefixHash,
        &input(Some(view(a)), &params, fleet()),
        &idle,
        1,
    );
    let mut busy = idle.clone();
    busy[first.winner].in_flight = 500;
    let second = run(
        PolicyKind::PrefixHash,
        &input(Some(view(b)), &params, fleet()),
        &busy,
        2,
    );
    assert_eq!(first.winner, second.winner);
    assert_eq!(second.decided_by, Term::Hash);
    // No full block: power of two choices.
    let none = run(
        PolicyKind::PrefixHash,
        &input(
            Some(PromptView {
                tokens: 9,
                hashes: &[],
                block_size: 16,
            }),
            &params,
            fleet(),
        ),
        &busy,
        3,
    );
    assert_eq!(none.steering, Steering::NoPrefix);
}

fn candidates() -> impl Strategy<Value = Vec<Candidate>> {
    proptest::collection::vec(
        (0u32..40, 0u32..3000, 0u32..4000, any::<bool>(), 0f64..1.0),
        1..10,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (load, cached, queued_ms, report, usage))| Candidate {
                engine: report.then_some(EngineView {
                    running: f64::from(load),
                    kv_cache_usage: usage,
                    own_in_flight: load,
                    ..EngineView::default()
                }),
                ..cand(i, load, cached, f64::from(queued_ms) / 1000.0)
            })
            .collect()
    })
}

const BRAINS: [PolicyKind; 3] = [
    PolicyKind::PrefixHash,
    PolicyKind::KvAware,
    PolicyKind::CostModel,
];

/// The limit is the larger of the bound and the floor, on hand-computed cases.
#[test]
fn the_bounded_load_limit_is_the_larger_of_bound_and_floor() {
    let loads = |l: &[u32]| -> Vec<Candidate> {
        l.iter()
            .enumerate()
            .map(|(i, &x)| cand(i, x, 0, 0.0))
            .collect()
    };
    // 3 replicas, 2 in flight, epsilon 1: ceil(2 * 3 / 3) = 2.
    let low = loads(&[2, 0, 0]);
    assert_eq!(guards::bound(1.0, &low), 2);
    assert_eq!(guards::limit(1.0, 1, &low), 2);
    assert_eq!(guards::limit(1.0, 8, &low), 8);
    // 30 in flight: ceil(2 * 31 / 3) = ceil(20.67) = 21, above the floor.
    let high = loads(&[10, 10, 10]);
    assert_eq!(guards::bound(1.0, &high), 21);
    assert_eq!(guards::limit(1.0, 8, &high), 21);
    assert_eq!(guards::limit(1.0, 21, &high), 21);
    assert_eq!(guards::limit(1.0, 22, &high), 22);
    // epsilon 0.25, 2 replicas, 5 in flight: ceil(1.25 * 6 / 2) = ceil(3.75) = 4.
    let two = loads(&[5, 0]);
    assert_eq!(guards::bound(0.25, &two), 4);
    assert_eq!(guards::limit(0.25, 4, &two), 4);
    assert_eq!(guards::limit(0.25, 5, &two), 5);
    // A floor of 0 is no floor.
    assert_eq!(guards::limit(0.25, 0, &two), 4);
}

/// At low load the floor keeps a warm replica: with 3 replicas and 2 requests in flight on the
/// one holding the prompt, the plain bound (2) sets it aside, the default floor (8) does not.
#[test]
fn the_floor_keeps_a_warm_replica_at_low_load() {
    let h = hashes(250, 21);
    let prompt = PromptView {
        tokens: 4000,
        hashes: &h,
        block_size: 16,
    };
    let c = [
        cand(0, 2, 3984, 0.0),
        cand(1, 0, 0, 0.0),
        cand(2, 0, 0, 0.0),
    ];
    let strict = BrainParams {
        bounded_load_floor: 1,
        ..BrainParams::default()
    };
    let (rows, _) = price(&input(Some(prompt), &strict, fleet()), &c);
    assert_eq!(rows[0].set_aside, Some(Guard::BoundedLoad));
    let floored = BrainParams::default();
    assert_eq!(floored.bounded_load_floor, 8);
    let i = input(Some(prompt), &floored, fleet());
    let (rows, _) = price(&i, &c);
    assert!(rows.iter().all(|r| r.set_aside.is_none()), "{rows:?}");
    // The warm replica wins on the prefill it saves; the cost model prices its queue.
    assert_eq!(run(PolicyKind::CostModel, &i, &c, 1).winner, 0);
    // Past the floor the guard binds again: 8 in flight would make 9 > max(ceil(2*11/3), 8) = 8.
    let c = [
        cand(0, 8, 3984, 0.0),
        cand(1, 1, 0, 0.0),
        cand(2, 1, 0, 0.0),
    ];
    let (rows, _) = price(&i, &c);
    assert_eq!(rows[0].set_aside, Some(Guard::BoundedLoad));
    assert_ne!(run(PolicyKind::CostModel, &i, &c, 1).winner, 0);
}

proptest! {
    /// The guard's arithmetic with no floor (floor 1, the strict guard), checked independently:
    /// every candidate set aside for load would exceed ceil((1 + eps) * (total + 1) / n), the
    /// least loaded never is, and the load-aware policies never choose one set aside.
    #[test]
    fn bounded_load_holds_and_someone_always_qualifies(
        c in candidates(), eps in 0.01f64..3.0, tokens in 1u32..5000, seed in any::<u64>(),
    ) {
        let params = BrainParams { epsilon: eps, bounded_load_floor: 1, ..BrainParams::default() };
        let h = hashes((tokens / 16) as usize, 9);
        let i = input(Some(PromptView { tokens, hashes: &h, block_size: 16 }), &params, fleet());
        let total: u64 = c.iter().map(|x| u64::from(x.in_flight)).sum();
        let limit = ((1.0 + eps) * (total as f64 + 1.0) / c.len() as f64).ceil() as u64;
        let (rows, _) = price(&i, &c);
        let least = c.iter().map(|x| x.in_flight).min().unwrap_or(0);
        for (x, r) in c.iter().zip(&rows) {
            let over = u64::from(x.in_flight) + 1 > limit;
            prop_assert_eq!(r.set_aside == Some(Guard::BoundedLoad), over);
            if x.in_flight == least {
                prop_assert!(r.set_aside != Some(Guard::BoundedLoad));
            }
        }
        for kind in [PolicyKind::KvAware, PolicyKind::CostModel] {
            let d = run(kind, &i, &c, seed);
            prop_assert!(d.rows[d.winner].set_aside.is_none());
            prop_assert!(u64::from(c[d.winner].in_flight) < limit);
        }
    }

    /// With a floor, against a naive reference: a candidate is set aside for load exactly when
    /// it would exceed both the bound and the floor, so nothing below the floor ever is, and no
    /// pick of a load-aware policy exceeds max(bound, floor).
    #[test]
    fn bounded_load_with_a_floor_matches_a_naive_reference(
        c in candidates(), eps in 0.01f64..3.0, floor in 1u64..48, tokens in 1u32..5000,
        seed in any::<u64>(),
    ) {
        let params = BrainParams {
            epsilon: eps,
            bounded_load_floor: floor,
            ..BrainParams::default()
        };
        let h = hashes((tokens / 16) as usize, 23);
        let i = input(Some(PromptView { tokens, hashes: &h, block_size: 16 }), &params, fleet());
        // Naive reference: the bound by its definition, then the larger of it and the floor.
        let mut total = 0u64;
        for x in &c {
            total += u64::from(x.in_flight);
        }
        let bound = ((1.0 + eps) * (total as f64 + 1.0) / c.len() as f64).ceil() as u64;
        let limit = if bound > floor { bound } else { floor };
        prop_assert_eq!(guards::limit(eps, floor, &c), limit);
        let (rows, _) = price(&i, &c);
        for (x, r) in c.iter().zip(&rows) {
            let after = u64::from(x.in_flight) + 1;
            let refused = after > bound && after > floor;
            prop_assert_eq!(r.set_aside == Some(Guard::BoundedLoad), refused);
            if after <= floor {
                prop_assert!(r.set_aside != Some(Guard::BoundedLoad));
            }
        }
        for kind in [PolicyKind::KvAware, PolicyKind::CostModel] {
            let d = run(kind, &i, &c, seed);
            prop_assert!(d.rows[d.winner].set_aside.is_none());
            prop_assert!(u64::from(c[d.winner].in_flight) < limit);
        }
    }

    /// More predicted cache never makes a candidate's estimate worse.
    #[test]
    fn more_cache_never_costs_more(
        c in candidates(), which in any::<prop::sample::Index>(), more in 1u32..2000,
        tokens in 1u32..6000,
    ) {
        let params = BrainParams::default();
        let h = hashes((tokens / 16) as usize, 11);
        let i = input(Some(PromptView { tokens, hashes: &h, block_size: 16 }), &params, fleet());
        let k = which.index(c.len());
        let (before, _) = price(&i, &c);
        let mut c2 = c.clone();
        c2[k].cached_tokens = c2[k].cached_tokens.map(|x| x.saturating_add(more));
        let (after, _) = price(&i, &c2);
        prop_assert!(after[k].estimate.total() <= before[k].estimate.total() + 1e-12);
        prop_assert!(after[k].work_secs <= before[k].work_secs + 1e-12);
    }

    /// A decision is a pure function of its inputs and random state: two independently built
    /// copies of the same state (candidates, prompt, session, fleet facts with the same history,
    /// policy object and RNG seed) decide the same, rows included, and commit the same. (That
    /// explain and routing offer the same state is the data plane's `explain_agreement` test.)
    #[test]
    fn independently_built_copies_of_one_state_decide_the_same(
        c in candidates(), seed in any::<u64>(), which in 0usize..3, tokens in 1u32..3000,
        session in proptest::option::of(any::<u64>()), history in 0u64..30_000_000,
        now in 0u64..20_000_000,
    ) {
        let copy = || {
            let facts = FleetFacts::new(Duration::from_secs(10));
            let h = hashes((tokens / 16) as usize, 13);
            if let Some(&root) = h.get(7) {
                facts.demand.add(fold(root), history, 0);
            }
            if let Some(s) = session {
                facts.sessions.set(s, c[seed as usize % c.len()].key as u32);
            }
            (facts, h, c.clone(), policies::build(BRAINS[which]), Rng::new(seed))
        };
        let (fa, ha, ca, mut pa, mut ra) = copy();
        let (fb, hb, cb, mut pb, mut rb) = copy();
        let params = BrainParams { session_affinity: true, ..BrainParams::default() };
        let mut ia = input(
            Some(PromptView { tokens, hashes: &ha, block_size: 16 }), &params, &fa,
        );
        ia.session = session;
        ia.now_micros = now;
        let mut ib = input(
            Some(PromptView { tokens, hashes: &hb, block_size: 16 }), &params, &fb,
        );
        ib.session = session;
        ib.now_micros = now;
        let a = decide(pa.as_mut(), &ia, &ca, &mut ra);
        let b = decide(pb.as_mut(), &ib, &cb, &mut rb);
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(commit(&ia, &ca, &a), commit(&ib, &cb, &b));
        // The copies stay identical: the next decision agrees too (RNG and policy state moved
        // alike), even when one side reuses a vector still holding other rows (the data plane's
        // kept rows).
        let mut stale = b.rows.clone();
        stale.extend(b.rows.iter().map(|r| Row { score: -1.0, hot_owner: true, ..*r }));
        prop_assert_eq!(
            decide(pa.as_mut(), &ia, &ca, &mut ra),
            decide_reusing(pb.as_mut(), &ib, &cb, &mut rb, stale)
        );
        if let Some(s) = session {
            prop_assert_eq!(fa.sessions.get(s), fb.sessions.get(s));
        }
    }
}

/// The eviction term: a cold prompt goes where the pool has room rather than to a full replica
/// holding one more block of it; it costs nothing with room, scales with the replica's reuse,
/// and still loses to a large enough cache hit.
#[test]
fn cost_model_prices_the_eviction_a_placement_causes() {
    use crate::candidate::PoolRoom;
    let params = BrainParams::default();
    let h = hashes(81, 21);
    // 1,300 tokens: 81 full blocks and a partial one.
    let prompt = PromptView {
        tokens: 1300,
        hashes: &h,
        block_size: 16,
    };
    let i = input(Some(prompt), &params, fleet());
    let room = |free_blocks, reuse| Some(PoolRoom { free_blocks, reuse });
    // A holds the prompt's first block (a shared chat-template opening) but is full; B is cold
    // with room for the whole prompt.
    let a = Candidate {
        room: room(0, 0.9),
        ..cand(0, 0, 16, 0.0)
    };
    let b = Candidate {
        room: room(600, 0.9),
        ..cand(1, 0, 0, 0.0)
    };
    let d = run(PolicyKind::CostModel, &i, &[a, b], 1);
    assert_eq!((d.winner, d.decided_by), (1, Term::Evict), "{d:?}");
    // A evicts its 81 new blocks (80 full not held, plus the partial one): 81 * 16 tokens of
    // recompute at a = 1e-4 s, times its reuse 0.9. B evicts nothing.
    assert_eq!((d.rows[0].evict_blocks, d.rows[1].evict_blocks), (81, 0));
    let want = 81.0 * 16.0 * 1e-4 * 0.9;
    assert!((d.rows[0].evict_secs - want).abs() < 1e-12, "{d:?}");
    assert_eq!(d.rows[1].evict_secs, 0.0);
    // The estimate (the request's own time to first token) leaves the eviction out.
    assert!(d.rows[0].estimate.total() < d.rows[1].estimate.total());
    // A cache that nobody reuses costs nothing to evict: the header block decides again.
    let a_unused = Candidate {
        room: room(0, 0.0),
        ..a
    };
    let d = run(PolicyKind::CostModel, &i, &[a_unused, b], 1);
    assert_eq!((d.winner, d.decided_by), (0, Term::Prefill), "{d:?}");
    // Partial room: only the blocks past the free ones are evicted.
    let a_some = Candidate {
        room: room(70, 0.9),
        ..a
    };
    let d = run(PolicyKind::CostModel, &i, &[a_some, b], 1);
    assert_eq!(d.rows[0].evict_blocks, 11, "{d:?}");
    // A full replica holding most of the prompt still wins: the prefill it saves is worth
    // more than the few blocks it evicts.
    let a_warm = Candidate {
        room: room(0, 0.9),
        ..cand(0, 0, 1280, 0.0)
    };
    let d = run(PolicyKind::CostModel, &i, &[a_warm, b], 1);
    assert_eq!((d.winner, d.decided_by), (0, Term::Prefill), "{d:?}");
    assert_eq!(d.rows[0].evict_blocks, 2, "{d:?}");
    // Without a pool room (no prediction, or an old log line) there is no eviction term.
    let d = run(
        PolicyKind::CostModel,
        &i,
        &[cand(0, 0, 16, 0.0), cand(1, 0, 0, 0.0)],
        1,
    );
    assert_eq!((d.rows[0].evict_secs, d.rows[1].evict_secs), (0.0, 0.0));
    assert_eq!(d.winner, 0);
}

/// The spill term: with weight 0 a cold replica with a shorter queue wins; with a weight and
/// requests waiting, the prefill a cached prefix saves also counts for the queue
/// behind it, so the warm replica wins; with nothing waiting the weight changes nothing.
#[test]
fn cost_model_prices_the_queue_behind_a_prefill_when_told_to() {
    let h = hashes(62, 23);
    let prompt = PromptView {
        tokens: 1000,
        hashes: &h,
        block_size: 16,
    };
    let at_weight = |spill_weight: f64, c: &[Candidate]| {
        let params = BrainParams {
            spill_weight,
            ..BrainParams::default()
        };
        run(
            PolicyKind::CostModel,
            &input(Some(prompt), &params, fleet()),
            c,
            1,
        )
    };
    // A: 400 tokens cached, 80 ms queued; B: cold, nothing queued. Four waiting on each.
    let waiting = |mut c: Candidate| {
        c.pending = 4;
        c
    };
    let c = [waiting(cand(0, 4, 400, 0.08)), waiting(cand(1, 4, 0, 0.0))];
    let d = at_weight(0.0, &c);
    assert_eq!((d.winner, d.decided_by), (1, Term::Queue), "{d:?}");
    assert_eq!((d.rows[0].spill_secs, d.rows[1].spill_secs), (0.0, 0.0));

    let d = at_weight(0.5, &c);
    assert_eq!((d.winner, d.decided_by), (0, Term::Spill), "{d:?}");
    for r in &d.rows {
        // 0.5 * 4 waiting * the row's own prefill; the estimate leaves it out.
        assert!(
            (r.spill_secs - 2.0 * r.estimate.prefill).abs() < 1e-12,
            "{d:?}"
        );
    }
    assert!(d.rows[0].estimate.total() > d.rows[1].estimate.total());

    // Nothing waiting anywhere: no spill, and the shorter queue wins again.
    let idle = [cand(0, 0, 400, 0.08), cand(1, 0, 0, 0.0)];
    let d = at_weight(0.5, &idle);
    assert_eq!((d.winner, d.decided_by), (1, Term::Queue), "{d:?}");
    assert_eq!((d.rows[0].spill_secs, d.rows[1].spill_secs), (0.0, 0.0));
}
