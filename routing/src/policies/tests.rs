//! Tests of the load-based baselines and of [`super::build`].

use super::*;
use crate::candidate::{Candidate, EngineView};
use crate::decision::Row;
use crate::fleet::FleetFacts;
use crate::input::{BrainParams, RouteInput};
use crate::rng::Rng;
use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest};
use std::sync::OnceLock;
use std::time::Duration;

/// Asks `p` without a prompt (load-based policies read only the candidates).
fn choose(p: &mut dyn RoutingPolicy, c: &[Candidate], rng: &mut Rng) -> usize {
    static FLEET: OnceLock<FleetFacts> = OnceLock::new();
    let fleet = FLEET.get_or_init(|| FleetFacts::new(Duration::from_secs(10)));
    let params = BrainParams::default();
    let input = RouteInput {
        prompt: None,
        approx_tokens: 0,
        session: None,
        params: &params,
        fleet,
        now_micros: 0,
    };
    let mut rows = vec![Row::default(); c.len()];
    p.pick(&input, c, &mut rows, rng).index
}

fn cands(loads: &[u32]) -> Vec<Candidate> {
    loads
        .iter()
        .enumerate()
        .map(|(i, l)| Candidate {
            replica: i,
            in_flight: *l,
            ..Candidate::default()
        })
        .collect()
}

#[test]
fn round_robin_cycles_and_skips_missing() {
    let mut rr = RoundRobin::default();
    let mut rng = Rng::new(1);
    let c = cands(&[0, 0, 0]);
    let picks: Vec<usize> = (0..6)
        .map(|_| c[choose(&mut rr, &c, &mut rng)].replica)
        .collect();
    assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
    // Replica 1 has no room: its turns go to the next replica, the others keep theirs.
    let c2 = vec![c[0], c[2]];
    let picks: Vec<usize> = (0..3)
        .map(|_| c2[choose(&mut rr, &c2, &mut rng)].replica)
        .collect();
    assert_eq!(picks, vec![0, 2, 2]);
}

#[test]
fn least_request_prefers_idle_and_spreads_ties() {
    let mut lr = LeastRequest;
    let mut rng = Rng::new(7);
    assert_eq!(choose(&mut lr, &cands(&[3, 1, 2]), &mut rng), 1);
    let mut seen = [0; 3];
    for _ in 0..300 {
        seen[choose(&mut lr, &cands(&[1, 1, 5]), &mut rng)] += 1;
    }
    assert!(seen[0] > 100 && seen[1] > 100 && seen[2] == 0, "{seen:?}");
}

#[test]
fn p2c_never_picks_the_most_loaded_of_two() {
    let mut p = PowerOfTwo;
    let mut rng = Rng::new(3);
    for _ in 0..200 {
        assert_eq!(choose(&mut p, &cands(&[9, 0]), &mut rng), 1);
    }
}

#[test]
fn every_policy_has_its_object() {
    for kind in PolicyKind::ALL {
        assert_eq!(build(kind).kind(), kind);
    }
}

#[test]
fn a_fresh_engine_report_showing_more_load_counts() {
    let mut c = cands(&[2, 3]);
    // The engine ran 9 when 2 of them were this gateway's: 7 are others'.
    c[0].engine = Some(EngineView {
        running: 8.0,
        waiting: 1.0,
        own_in_flight: 2,
        ..EngineView::default()
    });
    assert_eq!(c[0].load(), 9);
    assert_eq!(c[1].load(), 3);
    let mut rng = Rng::new(1);
    assert_eq!(choose(&mut LeastRequest, &c, &mut rng), 1);
}

proptest! {
    #[test]
    fn every_policy_returns_an_index_in_range(
        loads in proptest::collection::vec(0u32..50, 1..12),
        seed in any::<u64>(),
        which in 0usize..4,
    ) {
        let kinds = [PolicyKind::RoundRobin, PolicyKind::Random, PolicyKind::LeastRequest, PolicyKind::P2c];
        let mut p = build(kinds[which]);
        let mut rng = Rng::new(seed);
        let c = cands(&loads);
        for _ in 0..20 {
            let i = choose(p.as_mut(), &c, &mut rng);
            prop_assert!(i < c.len());
        }
        // least_request agrees with a naive minimum.
        let mut lr = LeastRequest;
        let i = choose(&mut lr, &c, &mut rng);
        prop_assert_eq!(c[i].in_flight, *loads.iter().min().unwrap());
    }
}
