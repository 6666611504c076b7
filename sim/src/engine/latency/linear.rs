//! The linear latency model (`--latency-model linear`): the router's own prefill formula.
//!
//! - **Prefill.** Computing `u` uncached prompt tokens over `c` cached ones costs
//!   `P(u, c) = a*u + b*u*(c + u/2) + d` (the shape of the router's `routing.cost_model`):
//!   `a` per token (the weights' FLOPs), `b` per (new token, context token) pair (attention;
//!   the `u/2` is the causal triangle), `d` once per prompt.
//! - **Chunks.** Tokens `[s, s + k)` of a sequence (positions counted from the start of the
//!   sequence, cached tokens included) cost `a*k + b*k*(s + k/2)`, plus `d` for the first chunk
//!   of a prefill. The pair term telescopes: `k*(s + k/2) = ((s+k)^2 - s^2) / 2`, so any chunking
//!   of the uncached tokens `[c, c + u)` sums to `a*u + b*((c+u)^2 - c^2)/2 + d = P(u, c)`.
//! - **Decode.** A decode batch of `n > 0` sequences costs
//!   `decode_token_secs + decode_seq_secs * (n - 1)`; an empty batch costs nothing.
//! - **Step.** A step costs its prefill chunks plus its decode batch (no interference).
//!
//! [`LinearLatency::default`] approximates Llama-3.1-8B (bf16) on one 24 GB GPU:
//! - `a = 1e-4 s/token` (about 10k prompt tokens/s, ~16 GFLOP per token),
//! - `b = 3.3e-9 s/pair` (attention: a 32k-token context adds ~0.1 ms per new token),
//! - `d = 5 ms` (launch, sampling and scheduling overhead per prefill),
//! - `decode_token_secs = 18 ms` (one pass streaming ~16 GB of weights at ~900 GB/s),
//! - `decode_seq_secs = 0.15 ms` per extra sequence (batch 32 ≈ 22.7 ms, batch 64 ≈ 27.5 ms),
//!
//! equal to `routing.cost_model`'s defaults for the prefill terms. Because `inferrail
//! calibrate` fits exactly this formula, its tests select this model; the simulator's default
//! is the stepped model ([`super::SteppedLatency`]), whose shape the router does not share.

/// The linear model's coefficients, in seconds (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearLatency {
    /// `a`: seconds per computed prompt token.
    pub prefill_token_secs: f64,
    /// `b`: seconds per (computed token, earlier token) pair.
    pub prefill_pair_secs: f64,
    /// `d`: seconds paid once per prefill (with its first chunk).
    pub prefill_fixed_secs: f64,
    /// Seconds of a decode step with one sequence.
    pub decode_token_secs: f64,
    /// Extra seconds per additional sequence in a decode batch.
    pub decode_seq_secs: f64,
}

impl Default for LinearLatency {
    fn default() -> Self {
        LinearLatency {
            prefill_token_secs: 1e-4,
            prefill_pair_secs: 3.3e-9,
            prefill_fixed_secs: 5e-3,
            decode_token_secs: 18e-3,
            decode_seq_secs: 0.15e-3,
        }
    }
}

impl LinearLatency {
    /// Every cost zero.
    pub fn zero() -> Self {
        LinearLatency {
            prefill_token_secs: 0.0,
            prefill_pair_secs: 0.0,
            prefill_fixed_secs: 0.0,
            decode_token_secs: 0.0,
            decode_seq_secs: 0.0,
        }
    }

    /// Every coefficient multiplied by `factor` (see [`super::LatencyModel::scaled`]).
    pub fn scaled(&self, factor: f64) -> Self {
        LinearLatency {
            prefill_token_secs: self.prefill_token_secs * factor,
            prefill_pair_secs: self.prefill_pair_secs * factor,
            prefill_fixed_secs: self.prefill_fixed_secs * factor,
            decode_token_secs: self.decode_token_secs * factor,
            decode_seq_secs: self.decode_seq_secs * factor,
        }
    }

    /// `P(u, c)`: an idle prefill of `uncached` tokens after `cached` ones, in one go
    /// (0 when `uncached` is 0).
    pub fn prefill_secs(&self, uncached: usize, cached: usize) -> f64 {
        if uncached == 0 {
            return 0.0;
        }
        self.chunk_secs(cached, uncached, true)
    }

    /// A prefill chunk: tokens `[start, start + len)` of a sequence (positions from its first
    /// token, cached tokens included), plus the fixed cost when `first` (the prefill's first
    /// chunk). 0 when `len` is 0 and not `first`.
    pub fn chunk_secs(&self, start: usize, len: usize, first: bool) -> f64 {
        let k = len as f64;
        let s = start as f64;
        let fixed = if first { self.prefill_fixed_secs } else { 0.0 };
        self.prefill_token_secs * k + self.prefill_pair_secs * k * (s + k / 2.0) + fixed
    }

    /// A decode batch of `n` sequences (0 when `n` is 0).
    pub fn decode_secs(&self, n: usize) -> f64 {
        if n == 0 {
            return 0.0;
        }
        self.decode_token_secs + self.decode_seq_secs * (n - 1) as f64
    }

    /// A step: its prefill chunks (`(start, len, first)` as in [`LinearLatency::chunk_secs`])
    /// plus a decode batch of `num_decode` sequences.
    pub fn step_secs(
        &self,
        chunks: impl IntoIterator<Item = (usize, usize, bool)>,
        num_decode: usize,
    ) -> f64 {
        let prefill: f64 = chunks
            .into_iter()
            .map(|(s, k, first)| self.chunk_secs(s, k, first))
            .sum();
        prefill + self.decode_secs(num_decode)
    }
}
