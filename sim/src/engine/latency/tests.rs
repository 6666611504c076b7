//! Tests of the two latency models: the linear one is today's formula exactly; the stepped one
//! is monotone, steps at tile boundaries, couples the batch, charges every step, and its
//! chunking invariant holds.
use proptest::prelude::*;

use super::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1e-300)
}

fn near(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

fn stepped() -> SteppedLatency {
    SteppedLatency::default()
}

/// One prefill chunk alone in a step of the stepped model.
fn alone(m: &SteppedLatency, start: usize, len: usize) -> f64 {
    m.step_secs([(start, len, true)], 0)
}

// ---------------------------------------------------------------------------------------------
// Selection

#[test]
fn the_default_is_stepped_and_kinds_round_trip() {
    assert_eq!(LatencyModel::default().kind(), LatencyKind::Stepped);
    assert_eq!(LatencyModel::default(), LatencyModel::Stepped(stepped()));
    assert_eq!(LatencyModel::linear().kind(), LatencyKind::Linear);
    for k in LatencyKind::ALL {
        assert_eq!(LatencyKind::parse(k.as_str()), Some(k));
        assert_eq!(LatencyModel::of_kind(k).kind(), k);
    }
    assert_eq!(LatencyKind::parse("Linear"), None);
    assert_eq!(LatencyKind::parse(""), None);
}

#[test]
fn zero_and_empty_steps_cost_nothing() {
    let z = LatencyModel::zero();
    assert_eq!(z.prefill_secs(5000, 100), 0.0);
    assert_eq!(z.decode_secs(256), 0.0);
    let s = LatencyModel::Stepped(SteppedLatency::zero());
    assert_eq!(s.step_secs([(100, 900, true)], 40), 0.0);
    for m in [LatencyModel::linear(), LatencyModel::default()] {
        assert_eq!(m.step_secs([], 0), 0.0);
        assert_eq!(m.prefill_secs(0, 10), 0.0);
        assert_eq!(m.decode_secs(0), 0.0);
    }
    assert_eq!(secs_to_duration(0.25), Duration::from_millis(250));
    assert_eq!(secs_to_duration(-1.0), Duration::ZERO);
    assert_eq!(secs_to_duration(f64::NAN), Duration::ZERO);
}

// ---------------------------------------------------------------------------------------------
// Linear: today's formula

#[test]
fn linear_defaults_are_todays() {
    let m = LinearLatency::default();
    assert_eq!(
        (
            m.prefill_token_secs,
            m.prefill_pair_secs,
            m.prefill_fixed_secs,
            m.decode_token_secs,
            m.decode_seq_secs
        ),
        (1e-4, 3.3e-9, 5e-3, 18e-3, 0.15e-3)
    );
    assert!(close(m.decode_secs(3), 18e-3 + 2.0 * 0.15e-3));
    let p = LatencyModel::linear().prefill_secs(1000, 500);
    assert!(close(p, 1e-4 * 1000.0 + 3.3e-9 * 1000.0 * 1000.0 + 5e-3));
}

proptest! {
    /// The linear model is `Σ (a*k + b*k*(s + k/2) + [first] d) + [n > 0] (dt + ds*(n-1))`,
    /// bit for bit.
    #[test]
    fn prop_linear_is_todays_formula(
        chunks in prop::collection::vec((0usize..40_000, 0usize..4096, any::<bool>()), 0..8),
        n in 0usize..300,
        a in 0.0f64..1e-3, b in 0.0f64..1e-7, d in 0.0f64..0.05,
        dt in 0.0f64..0.05, ds in 0.0f64..1e-3,
    ) {
        let m = LinearLatency {
            prefill_token_secs: a,
            prefill_pair_secs: b,
            prefill_fixed_secs: d,
            decode_token_secs: dt,
            decode_seq_secs: ds,
        };
        let prefill: f64 = chunks
            .iter()
            .map(|&(s, k, first)| {
                let (s, k) = (s as f64, k as f64);
                a * k + b * k * (s + k / 2.0) + if first { d } else { 0.0 }
            })
            .sum();
        let decode = if n == 0 { 0.0 } else { dt + ds * (n - 1) as f64 };
        prop_assert_eq!(LatencyModel::Linear(m).step_secs(chunks.clone(), n), prefill + decode);
    }
}

// ---------------------------------------------------------------------------------------------
// Stepped

#[test]
fn stepped_defaults_match_the_documented_magnitudes() {
    let m = LatencyModel::default();
    assert!(close(m.decode_secs(1), 18.15e-3), "{}", m.decode_secs(1));
    assert!(close(m.decode_secs(64), 27.6e-3), "{}", m.decode_secs(64));
    // About 10k prompt tokens/s on a full 2,048-token chunk.
    let rate = 2048.0 / m.prefill_secs(2048, 0);
    assert!((9_000.0..11_000.0).contains(&rate), "{rate}");
    // A 32k context adds ~0.11 ms per new token.
    let per_token = m.prefill_secs(1000, 32_768) - m.prefill_secs(1000, 0);
    assert!(
        (0.09e-3..0.13e-3).contains(&(per_token / 1000.0)),
        "{per_token}"
    );
}

#[test]
fn stepped_differs_from_the_linear_shape() {
    let (s, l) = (LatencyModel::default(), LatencyModel::linear());
    // A short prompt costs a whole weight pass, not a*u + d.
    assert!(s.prefill_secs(20, 0) > 2.0 * l.prefill_secs(20, 0));
    // Chunking costs a fixed cost per step; the linear model sums to P(u, c) whatever the
    // chunking.
    let one = s.prefill_secs(4096, 0);
    let two = s.prefill_secs(2048, 0) + s.step_secs([(2048, 2048, false)], 0);
    assert!(
        near(two - one, stepped().step_fixed_secs, 1e-12),
        "{one} {two}"
    );
}

#[test]
fn the_fixed_cost_is_paid_by_every_non_empty_step() {
    let free = SteppedLatency {
        step_fixed_secs: 0.0,
        ..stepped()
    };
    let f = 7e-3;
    let paid = SteppedLatency {
        step_fixed_secs: f,
        ..free
    };
    type Chunk = (usize, usize, bool);
    let steps: [(&[Chunk], usize); 4] = [
        (&[(0, 600, true)], 0),
        (&[(600, 600, false)], 0),
        (&[], 3),
        (&[(0, 10, true), (50, 5, false)], 9),
    ];
    for (chunks, n) in steps {
        let d =
            paid.step_secs(chunks.iter().copied(), n) - free.step_secs(chunks.iter().copied(), n);
        assert!(close(d, f), "{chunks:?} {n}: {d}");
    }
    assert_eq!(paid.step_secs([], 0), 0.0);
}

#[test]
fn attention_steps_at_tile_boundaries() {
    let m = stepped();
    let t = m.tile_tokens;
    // One token at each position: equal cost within a tile, `tile_secs` more past a boundary.
    let at = |p: usize| alone(&m, p, 1);
    assert_eq!(at(0), at(t - 1));
    assert!(near(at(t) - at(t - 1), m.tile_secs, 1e-15));
    assert_eq!(at(t), at(2 * t - 1));
    assert!(near(at(2 * t) - at(2 * t - 1), m.tile_secs, 1e-15));
    // Moving a 16-token chunk 8 tokens over a boundary puts 8 of its tokens in the next tile.
    assert!(close(
        m.attention_secs(t - 8, 16) - m.attention_secs(t - 16, 16),
        8.0 * m.tile_secs
    ));
    assert_eq!(m.attention_secs(0, 0), 0.0);
    // Against the smooth linear pair term: the tiled cost is never below it per token.
    for p in [0usize, 1, 127, 128, 1000, 32_000] {
        assert!(m.attention_secs(p, 1) >= m.tile_secs * (p + 1) as f64 / t as f64);
    }
}

#[test]
fn batch_interference_raises_a_steps_cost() {
    let m = stepped();
    let chunk = [(0usize, 1024usize, true)];
    // Prefill slows with the decode sequences in its step: each adds a + s_dec when the step is
    // compute-bound.
    let mut last = m.step_secs(chunk, 0);
    for n in 1..=64 {
        let c = m.step_secs(chunk, n);
        assert!(
            near(c - last, m.token_secs + m.decode_seq_secs, 1e-12),
            "n={n}"
        );
        last = c;
    }
    // Decode slows with the prefill tokens in its step, once past the weight-pass floor.
    let decode = m.step_secs([], 16);
    let floor_tokens = (m.weights_secs / m.token_secs) as usize;
    assert!(
        m.step_secs([(0, 8, true)], 16) - decode < 1e-5,
        "a short prompt rides along"
    );
    let mut last = decode;
    for k in [floor_tokens, 512, 1024, 2048] {
        let c = m.step_secs([(0, k, true)], 16);
        assert!(c > last, "k={k}");
        last = c;
    }
    assert!(m.step_secs([(0, 2048, true)], 16) > decode + 0.15);
    // The mixed step is one pass: cheaper than the two steps apart, dearer than either.
    let (mixed, apart) = (
        m.step_secs(chunk, 32),
        m.step_secs(chunk, 0) + m.step_secs([], 32),
    );
    assert!(mixed < apart && mixed > m.step_secs(chunk, 0) && mixed > m.step_secs([], 32));
}

proptest! {
    /// More uncached tokens or more context never cost less, for both models.
    #[test]
    fn prop_monotone_in_uncached_and_context(
        u in 1usize..6000, c in 0usize..40_000, du in 1usize..300, dc in 1usize..300,
        n in 0usize..64, linear in any::<bool>(),
    ) {
        let m = if linear { LatencyModel::linear() } else { LatencyModel::default() };
        let cost = |u: usize, c: usize| m.step_secs([(c, u, true)], n);
        prop_assert!(cost(u + du, c) >= cost(u, c));
        prop_assert!(cost(u, c + dc) >= cost(u, c));
        prop_assert!(m.prefill_secs(u + du, c) > m.prefill_secs(u, c));
        prop_assert!(m.step_secs([(c, u, true)], n + 1) > cost(u, c));
    }

    /// The chunking invariant (module docs): `m` chunks in their own steps cost between
    /// `(m-1)F` and `(m-1)(F+W)` more than one step, exactly `(m-1)F` more when every chunk has
    /// at least `W/a` tokens.
    #[test]
    fn prop_chunking_changes_only_per_step_costs(
        cached in 0usize..40_000,
        chunks in prop::collection::vec(1usize..3000, 1..12),
        big in any::<bool>(),
    ) {
        let m = stepped();
        let floor = (m.weights_secs / m.token_secs).ceil() as usize;
        let chunks: Vec<usize> = if big { chunks.iter().map(|k| k + floor).collect() } else { chunks };
        let u: usize = chunks.iter().sum();
        let mut start = cached;
        let mut total = 0.0;
        for (i, &k) in chunks.iter().enumerate() {
            total += m.step_secs([(start, k, i == 0)], 0);
            start += k;
        }
        let one = alone(&m, cached, u);
        let extra = (chunks.len() - 1) as f64;
        let eps = 1e-12 * total;
        let (lo, hi) = (extra * m.step_fixed_secs, extra * (m.step_fixed_secs + m.weights_secs));
        prop_assert!(total - one >= lo - eps && total - one <= hi + eps, "{total} {one}");
        if big {
            prop_assert!(((total - one) - lo).abs() <= 1e-9 * total, "{total} {one} {lo}");
        }
    }

    /// `scaled` by a power of two multiplies every step exactly, for both models.
    #[test]
    fn prop_scaled_multiplies_every_step(
        chunks in prop::collection::vec((0usize..40_000, 0usize..4096, any::<bool>()), 0..6),
        n in 0usize..300, shift in -8i32..8, linear in any::<bool>(),
    ) {
        let m = if linear { LatencyModel::linear() } else { LatencyModel::default() };
        let f = 2f64.powi(shift);
        prop_assert_eq!(
            m.scaled(f).step_secs(chunks.clone(), n),
            m.step_secs(chunks, n) * f
        );
    }
}

#[test]
fn scaled_keeps_the_kind_and_the_tile() {
    let s = stepped().scaled(0.5);
    assert_eq!(s.tile_tokens, stepped().tile_tokens);
    assert_eq!(s.step_fixed_secs, 1e-3);
    assert_eq!(
        LatencyModel::default().scaled(0.1).kind(),
        LatencyKind::Stepped
    );
    assert_eq!(
        LatencyModel::linear().scaled(0.1).kind(),
        LatencyKind::Linear
    );
    assert_eq!(LatencyModel::default().scaled(1.0), LatencyModel::default());
}
