//! The stepped latency model (`--latency-model stepped`, the default): one engine step as one
//! batched forward pass, in a shape the router's cost model does not share.
//!
//! A step schedules prefill chunks (chunk `i`: tokens `[s_i, s_i + k_i)` of its sequence,
//! positions counted from the sequence's first token, cached tokens included) and `N` decode
//! sequences. With `K = Σ k_i` prefill tokens, a non-empty step costs
//!
//! ```text
//! step = F + max(W, a * (K + N)) + Σ_i attn(s_i, k_i) + s_dec * N
//! attn(s, k) = t * Σ_{p = s}^{s+k-1} ceil((p + 1) / T)
//! ```
//!
//! and an empty step (`K = 0`, `N = 0`) costs nothing.
//!
//! - **Fixed per-step cost `F`**: scheduling, input preparation, kernel launches and sampling,
//!   paid by every non-empty step (a prefill chunked over three steps pays it three times; a
//!   decode step pays it too), not once per prompt.
//! - **Dense pass `max(W, a*(K+N))`**: the weight GEMMs are shared by every token of the step.
//!   Below about `W/a` tokens the step is bound by streaming the weights once (`W`); above, by
//!   compute (`a` per token, prefill and decode tokens alike).
//! - **Batch interference.** That shared pass couples the batch: every decode sequence in a
//!   compute-bound step adds `a + s_dec` to the prefill chunks' step (prefill slows with the
//!   decode count), and prefill tokens beyond the memory-bound floor stretch the step its
//!   decode sequences wait on (decode slows with the step's prefill tokens). A short prompt
//!   joining a decode batch rides the weight pass nearly free.
//! - **Tiled attention.** The token at position `p` reads the keys and values of positions
//!   `0..=p` in whole tiles of `T` tokens, as a paged/flash attention kernel does, at `t` per
//!   (new token, tile). The cost per token is a step function of its position: equal within a
//!   tile, `t` more past each tile boundary.
//! - **Decode sequences** cost `s_dec` each (their KV reads and sampling) on top of the pass.
//!
//! **Invariant (chunking).** The attention and per-token terms are sums over positions, so they
//! do not depend on how a prefill is chunked. Only the per-step terms do: a prefill of `u`
//! tokens split into `m` chunks, each run in its own step with nothing else, costs between
//! `(m - 1) * F` and `(m - 1) * (F + W)` more than the same prefill in one step, and exactly
//! `(m - 1) * F` more when every chunk has at least `W / a` tokens.
//!
//! # Defaults ([`SteppedLatency::default`]): Llama-3.1-8B (bf16) on one 24 GB-class GPU
//! The simulator's other defaults (the KV pool) describe that GPU, with about 900 GB/s of
//! memory bandwidth and about 160 TFLOP/s of achieved bf16 compute. Each number below says
//! where it comes from; none is taken from the router's cost model.
//! - `W = 16 ms`: chosen so that a batch-1 decode step (`F + W + s_dec` = 18.15 ms) keeps the
//!   simulator's documented ~18 ms, one read of the ~16 GB of weights at the full ~900 GB/s.
//!   Published check: on an A100 40GB (1.55 TB/s) vLLM 0.23 decodes Llama-3.1-8B-Instruct bf16
//!   at about 75 tokens/s at concurrency 1 (13.3 ms a step, "roughly 77% of the
//!   memory-bandwidth ceiling"; johnmusgrave.com, "vLLM throughput-latency sweep on NVIDIA
//!   A100"); scaled by bandwidth to ~900 GB/s that is ~23 ms, so 18 ms is the optimistic end.
//! - `F = 2 ms`: the same A100 measurement leaves ~3 ms per step beyond the weight read
//!   (13.3 ms against 16 GB / 1.55 TB/s = 10.3 ms); 2 ms of it is charged to the step as
//!   fixed overhead, the rest is left to the per-sequence and attention terms.
//! - `a = 1e-4 s/token`: ~16 GFLOP per token (2 FLOPs per parameter) at ~160 TFLOP/s, about
//!   10k prompt tokens/s. Published check: SGLang's `bench_latency` on Llama-3-8B bf16, batch 1,
//!   prefills 128 tokens in 11.9 ms (10.7k tokens/s) on an 80 GB datacenter GPU (gist
//!   jerryzh168/caa3f3a87f403091b238f85f7b22c20e); there 128 tokens cost ~1.3 decode steps,
//!   here `max(W, 128 a) = W` makes them cost one: the floor sits near that size.
//! - `T = 128 tokens`: an assumed KV tile, the order of a flash-attention kernel's KV block
//!   (not measured).
//! - `t = 4.3e-7 s` per (new token, tile): attention does `4 * layers * d_model` FLOPs per
//!   (query, key) pair (`QK^T` and `PV`, 2 FLOPs per multiply-add): `4 * 32 * 4096 ≈ 524k`,
//!   times 128 keys a tile, at ~156 TFLOP/s; a 32k-token context adds ~0.11 ms per new token.
//! - `s_dec = 0.15 ms` per decode sequence: reading ~1k tokens of KV at 128 KiB per token
//!   (~130 MB) at ~900 GB/s, plus sampling. Batch 1 costs 18.15 ms, batch 64 27.6 ms (the
//!   documented ~18 ms and ~27 ms). Published check: NVIDIA NIM's Llama-3.1-8B-Instruct table
//!   (docs.nvidia.com/nim/benchmarking/llm, version 1.8.0) grows the inter-token latency from
//!   4.63 ms at concurrency 1 to 5.91 ms at 50 on a faster GPU, ~0.5% of the batch-1 step per
//!   sequence; `s_dec` is ~0.8% of it, the slower end.
//!
//! The vLLM project's nightly latency test (32 tokens in, 128 out, batch 8: 833 ms, ~6.4 ms a
//! step on an H200; buildkite.com/vllm/performance-benchmark) is a faster GPU class and was
//! not used for the magnitudes.

/// The stepped model's coefficients (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SteppedLatency {
    /// `F`: seconds paid by every non-empty step.
    pub step_fixed_secs: f64,
    /// `W`: seconds of the memory-bound weight pass, the dense floor of a step.
    pub weights_secs: f64,
    /// `a`: dense compute seconds per token of the step (prefill or decode).
    pub token_secs: f64,
    /// `T`: tokens per attention tile (0 is taken as 1).
    pub tile_tokens: usize,
    /// `t`: seconds per (new prefill token, context tile) pair.
    pub tile_secs: f64,
    /// `s_dec`: seconds per decode sequence in the step.
    pub decode_seq_secs: f64,
}

impl Default for SteppedLatency {
    fn default() -> Self {
        SteppedLatency {
            step_fixed_secs: 2e-3,
            weights_secs: 16e-3,
            token_secs: 1e-4,
            tile_tokens: 128,
            tile_secs: 4.3e-7,
            decode_seq_secs: 0.15e-3,
        }
    }
}

impl SteppedLatency {
    /// Every cost zero (the tile size kept).
    pub fn zero() -> Self {
        SteppedLatency {
            step_fixed_secs: 0.0,
            weights_secs: 0.0,
            token_secs: 0.0,
            tile_secs: 0.0,
            decode_seq_secs: 0.0,
            ..SteppedLatency::default()
        }
    }

    /// Every seconds coefficient multiplied by `factor` (see
    /// [`super::LatencyModel::scaled`]); the tile size is a token count and stays.
    pub fn scaled(&self, factor: f64) -> Self {
        SteppedLatency {
            step_fixed_secs: self.step_fixed_secs * factor,
            weights_secs: self.weights_secs * factor,
            token_secs: self.token_secs * factor,
            tile_tokens: self.tile_tokens,
            tile_secs: self.tile_secs * factor,
            decode_seq_secs: self.decode_seq_secs * factor,
        }
    }

    /// The attention term of a chunk, tokens `[start, start + len)`: `t` per (token, tile).
    pub fn attention_secs(&self, start: usize, len: usize) -> f64 {
        let tiles =
            tiles_through(start + len, self.tile_tokens) - tiles_through(start, self.tile_tokens);
        self.tile_secs * tiles as f64
    }

    /// A step: its prefill chunks (`(start, len, first)`; `first` does not matter here, the
    /// fixed cost is per step) and `num_decode` decode sequences (0 when both are empty).
    pub fn step_secs(
        &self,
        chunks: impl IntoIterator<Item = (usize, usize, bool)>,
        num_decode: usize,
    ) -> f64 {
        let mut tokens = 0usize;
        let mut attention = 0.0;
        for (start, len, _first) in chunks {
            tokens += len;
            attention += self.attention_secs(start, len);
        }
        if tokens == 0 && num_decode == 0 {
            return 0.0;
        }
        let dense = self
            .weights_secs
            .max(self.token_secs * (tokens + num_decode) as f64);
        self.step_fixed_secs + dense + attention + self.decode_seq_secs * num_decode as f64
    }
}

/// `Σ_{q=1}^{n} ceil(q / tile)`: the tiles read by the tokens at positions `0..n`, each reading
/// the tiles through its own position. With `n = m*tile + r`: `tile*m(m+1)/2 + (m+1)*r`.
fn tiles_through(n: usize, tile: usize) -> u128 {
    let tile = tile.max(1) as u128;
    let n = n as u128;
    let (m, r) = (n / tile, n % tile);
    tile * m * (m + 1) / 2 + (m + 1) * r
}

#[cfg(test)]
mod tests {
    use super::tiles_through;

    #[test]
    fn tiles_through_counts_whole_tiles_per_token() {
        for tile in [1usize, 3, 16, 128] {
            let mut brute = 0u128;
            for n in 0..600usize {
                assert_eq!(tiles_through(n, tile), brute, "n={n} tile={tile}");
                brute += (n + 1).div_ceil(tile) as u128;
            }
        }
        assert_eq!(tiles_through(10, 0), tiles_through(10, 1));
    }
}
