//! The cost model: a candidate's estimated time to first token, `W + P(u, c) + X`. Its
//! coefficients and `P(u, c)` are [`inferrail_config::CostModelParams`] (one type for the
//! config, the brain and `inferrail calibrate`).

/// A candidate's estimated time to first token, by term (seconds).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Estimate {
    /// `W`: prefill already queued there plus decode interference.
    pub queue: f64,
    /// `P(u, c)`: this prompt's own prefill there.
    pub prefill: f64,
    /// `X`: loading its offloaded cached tokens back from the CPU and storage tiers.
    pub tier: f64,
}

impl Estimate {
    /// `W + P + X`.
    pub fn total(&self) -> f64 {
        self.queue + self.prefill + self.tier
    }
}

#[cfg(test)]
mod tests {
    use inferrail_config::CostModelParams;

    #[test]
    fn prefill_matches_the_formula_and_the_simulator_defaults() {
        let p = CostModelParams::default();
        // 1,000 uncached tokens after 500 cached: 0.1 + 3.3e-9 * 1000 * 1000 + 0.005.
        let want = 1e-4 * 1000.0 + 3.3e-9 * 1000.0 * (500.0 + 500.0) + 0.005;
        assert!((p.prefill_secs(1000, 500) - want).abs() < 1e-12);
        assert_eq!(p.prefill_secs(0, 0), p.prefill_fixed_secs);
    }
}
