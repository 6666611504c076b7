//! The simulated engine's latency model: what one scheduler step costs in (virtual) seconds.
//! Pure arithmetic, no clock.
//!
//! Two models, chosen with `--latency-model`:
//! - [`SteppedLatency`] (`stepped`, the default): a step is one batched forward pass with a
//!   fixed per-step cost, a memory-bound floor shared by the whole batch (so prefill and decode
//!   interfere), and attention priced in whole KV tiles. Its shape differs from the router's
//!   cost model on purpose: benchmarks must not score `cost_model` on a world built from it.
//! - [`LinearLatency`] (`linear`): `P(u, c) = a*u + b*u*(c + u/2) + d` per prefill plus an
//!   additive decode batch, the router's own formula; `inferrail calibrate` fits it exactly,
//!   so the calibration tests select it.
//!
//! [`LatencyModel::zero`] (`--zero-latency`) makes every step free, and
//! [`LatencyModel::scaled`] (`--time-scale`) multiplies every cost, for both models.

mod linear;
mod stepped;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use linear::LinearLatency;
pub use stepped::SteppedLatency;

/// Which latency model runs (`--latency-model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatencyKind {
    /// [`LinearLatency`].
    Linear,
    /// [`SteppedLatency`].
    Stepped,
}

impl LatencyKind {
    /// Every kind, the default first.
    pub const ALL: [LatencyKind; 2] = [LatencyKind::Stepped, LatencyKind::Linear];

    /// The flag value (`linear`, `stepped`).
    pub fn as_str(self) -> &'static str {
        match self {
            LatencyKind::Linear => "linear",
            LatencyKind::Stepped => "stepped",
        }
    }

    /// The kind named `name` (a flag value), if any.
    pub fn parse(name: &str) -> Option<LatencyKind> {
        LatencyKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// Step costs in seconds: one of the two models (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LatencyModel {
    /// The router's formula.
    Linear(LinearLatency),
    /// The default: per-step cost, batch interference, tiled attention.
    Stepped(SteppedLatency),
}

impl Default for LatencyModel {
    /// The stepped model with its defaults.
    fn default() -> Self {
        LatencyModel::Stepped(SteppedLatency::default())
    }
}

impl LatencyModel {
    /// The linear model with its defaults.
    pub fn linear() -> Self {
        LatencyModel::Linear(LinearLatency::default())
    }

    /// The model of `kind` with its defaults.
    pub fn of_kind(kind: LatencyKind) -> Self {
        match kind {
            LatencyKind::Linear => LatencyModel::linear(),
            LatencyKind::Stepped => LatencyModel::default(),
        }
    }

    /// Every cost zero (`--zero-latency`).
    pub fn zero() -> Self {
        LatencyModel::Linear(LinearLatency::zero())
    }

    /// Which model this is.
    pub fn kind(&self) -> LatencyKind {
        match self {
            LatencyModel::Linear(_) => LatencyKind::Linear,
            LatencyModel::Stepped(_) => LatencyKind::Stepped,
        }
    }

    /// Every seconds coefficient multiplied by `factor` (`--time-scale`): each step then costs
    /// exactly `factor` times what it costs under `self` (both models are sums and maxima of
    /// coefficients times token counts), so a schedule with every arrival time scaled by
    /// `factor` plays out the same steps, tokens and cache hits, `factor` times faster (up to
    /// floating-point rounding; none for powers of two). `factor` must be finite and above
    /// zero (the caller checks).
    pub fn scaled(&self, factor: f64) -> Self {
        match self {
            LatencyModel::Linear(m) => LatencyModel::Linear(m.scaled(factor)),
            LatencyModel::Stepped(m) => LatencyModel::Stepped(m.scaled(factor)),
        }
    }

    /// A step: its prefill chunks (`(start, len, first)`: tokens `[start, start + len)` of a
    /// sequence, positions from its first token, cached tokens included; `first` for the
    /// first chunk of a prefill) plus `num_decode` decode sequences.
    pub fn step_secs(
        &self,
        chunks: impl IntoIterator<Item = (usize, usize, bool)>,
        num_decode: usize,
    ) -> f64 {
        match self {
            LatencyModel::Linear(m) => m.step_secs(chunks, num_decode),
            LatencyModel::Stepped(m) => m.step_secs(chunks, num_decode),
        }
    }

    /// A step with one prefill, `uncached` tokens after `cached` ones, and nothing else
    /// (0 when `uncached` is 0).
    pub fn prefill_secs(&self, uncached: usize, cached: usize) -> f64 {
        if uncached == 0 {
            return 0.0;
        }
        self.step_secs([(cached, uncached, true)], 0)
    }

    /// A step with a decode batch of `n` sequences and nothing else (0 when `n` is 0).
    pub fn decode_secs(&self, n: usize) -> f64 {
        self.step_secs([], n)
    }
}

/// Seconds as a [`Duration`] (negative and non-finite values clamp to zero).
pub fn secs_to_duration(secs: f64) -> Duration {
    if secs.is_finite() && secs > 0.0 {
        Duration::from_secs_f64(secs)
    } else {
        Duration::ZERO
    }
}
