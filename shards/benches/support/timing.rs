//! What every plain-`main` benchmark here shares (included with `#[path]` by the benches of
//! shards and control): deterministic inputs and the p50/p99 report.

use std::time::Duration;

/// xorshift64*: deterministic inputs without a dependency.
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// `n` token ids below 150,000.
    pub fn tokens(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| (self.next() % 150_000) as u32).collect()
    }
}

/// p50 and p99 of samples, in nanoseconds.
pub fn percentiles(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort_unstable();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_nanos() as f64
    };
    (at(0.50), at(0.99))
}

/// Prints one line: `name`, p50 and p99 in microseconds, the sample count.
pub fn report(name: &str, samples: &mut [Duration]) {
    let (p50, p99) = percentiles(samples);
    println!(
        "{name:<58} p50 {:>10.3} us   p99 {:>10.3} us   (n={})",
        p50 / 1000.0,
        p99 / 1000.0,
        samples.len()
    );
}
