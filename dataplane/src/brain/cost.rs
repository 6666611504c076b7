//! The cost model: a candidate's estimated time to first token, `W + P(u, c) + X`.

/// Coefficients of the cost model (from `routing.cost_model` or the model's own).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostParams {
    /// `a`: seconds per computed prompt token.
    pub token_secs: f64,
    /// `b`: seconds per (computed token, context token) pair.
    pub pair_secs: f64,
    /// `d`: fixed seconds per prefill.
    pub fixed_secs: f64,
    /// Queue delay per request the replica is running (decode steps share the batch).
    pub decode_interference_secs: f64,
}

impl From<&inferrail_config::CostModelParams> for CostParams {
    fn from(p: &inferrail_config::CostModelParams) -> CostParams {
        CostParams {
            token_secs: p.prefill_token_secs,
            pair_secs: p.prefill_pair_secs,
            fixed_secs: p.prefill_fixed_secs,
            decode_interference_secs: p.decode_interference_secs,
        }
    }
}

impl Default for CostParams {
    fn default() -> CostParams {
        CostParams::from(&inferrail_config::CostModelParams::default())
    }
}

impl CostParams {
    /// `P(u, c) = a*u + b*u*(c + u/2) + d`: prefill of `u` computed tokens after `c` cached.
    /// Never negative; grows with `u` and with `c`.
    pub fn prefill_secs(&self, u: u32, c: u32) -> f64 {
        let (u, c) = (f64::from(u), f64::from(c));
        self.token_secs * u + self.pair_secs * u * (c + u / 2.0) + self.fixed_secs
    }
}

/// A candidate's estimated time to first token, by term (seconds).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Estimate {
    /// `W`: prefill already queued there plus decode interference.
    pub queue: f64,
    /// `P(u, c)`: this prompt's own prefill there.
    pub prefill: f64,
    /// `X`: loading its cached tokens from slower tiers (0 until tiers are tracked).
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
    use super::*;

    #[test]
    fn prefill_matches_the_formula_and_the_simulator_defaults() {
        let p = CostParams::default();
        // 1,000 uncached tokens after 500 cached: 0.1 + 3.3e-9 * 1000 * 1000 + 0.005.
        let want = 1e-4 * 1000.0 + 3.3e-9 * 1000.0 * (500.0 + 500.0) + 0.005;
        assert!((p.prefill_secs(1000, 500) - want).abs() < 1e-12);
        assert_eq!(p.prefill_secs(0, 0), p.fixed_secs);
    }
}
