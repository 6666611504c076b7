//! W1: a few long system prompts shared by every user, each request adding a unique question.

use std::ops::RangeInclusive;

use super::text::{self, sub_seed, Zipf};
use super::{message, Options, Request};
use crate::schedule::SplitMix64;

/// W1's shape: `prompts` system prompts whose sizes are evenly spaced over `prompt_tokens`
/// (2,000, 4,000, 6,000, 8,000 tokens by default, as `perf/policy-compare`), each request one of
/// them plus a question of `question_tokens` tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedPrompts {
    /// Number of system prompts (at least one is used).
    pub prompts: usize,
    /// Size of the shortest and the longest system prompt, in tokens.
    pub prompt_tokens: RangeInclusive<usize>,
    /// Question size range, in tokens (uniform).
    pub question_tokens: RangeInclusive<usize>,
    /// `None`: each request picks its system prompt uniformly; `Some(s)`: prompt `i` (from 0)
    /// with probability proportional to `1 / (i + 1)^s` (the `hot` workload uses 1.1).
    pub zipf: Option<f64>,
}

impl Default for SharedPrompts {
    fn default() -> SharedPrompts {
        SharedPrompts {
            prompts: 4,
            prompt_tokens: 2000..=8000,
            question_tokens: 50..=500,
            zipf: None,
        }
    }
}

impl SharedPrompts {
    /// The system prompts of a run seeded with `seed`, shortest first.
    pub fn system_prompts(&self, seed: u64) -> Vec<String> {
        let mut rng = SplitMix64::new(sub_seed(seed, 0x5359));
        let count = self.prompts.max(1);
        let (lo, hi) = (*self.prompt_tokens.start(), *self.prompt_tokens.end());
        (0..count)
            .map(|i| {
                let size = match count {
                    1 => lo,
                    _ => lo + hi.saturating_sub(lo) * i / (count - 1),
                };
                text::words(&mut rng, size)
            })
            .collect()
    }

    /// Which system prompt each of `n` requests uses (an index into [`Self::system_prompts`]).
    pub fn picks(&self, n: usize, seed: u64) -> Vec<usize> {
        let zipf = Zipf::new(self.prompts.max(1), self.zipf.unwrap_or(0.0));
        let mut rng = SplitMix64::new(sub_seed(seed, 0x5049));
        (0..n).map(|_| zipf.sample(&mut rng)).collect()
    }

    /// `n` requests drawn from `seed`: request `i` is system prompt `picks(n, seed)[i]` plus
    /// its own question.
    pub fn requests(&self, n: usize, seed: u64, options: &Options) -> Vec<Request> {
        let systems = self.system_prompts(seed);
        let mut rng = SplitMix64::new(sub_seed(seed, 0x5155));
        self.picks(n, seed)
            .into_iter()
            .map(|pick| {
                let size = rng.between(*self.question_tokens.start(), *self.question_tokens.end());
                let question = text::words(&mut rng, size);
                Request::single(
                    options,
                    vec![
                        message("system", systems[pick].as_str()),
                        message("user", question),
                    ],
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::tests::{body, contents};
    use crate::workload::text::count_tokens;
    use crate::workload::Workload;

    #[test]
    fn system_prompts_and_questions_have_their_sizes() {
        let w = SharedPrompts::default();
        let systems = w.system_prompts(1);
        let sizes: Vec<usize> = systems.iter().map(|s| count_tokens(s)).collect();
        assert_eq!(sizes, [2000, 4000, 6000, 8000]);
        let mut seen = [0usize; 4];
        for r in w.requests(1000, 1, &Options::default()) {
            let c = contents(&body(&r));
            assert_eq!(c.len(), 2);
            assert_eq!(c[0].0, "system");
            assert_eq!(c[1].0, "user");
            let i = systems
                .iter()
                .position(|s| *s == c[0].1)
                .expect("a shared prompt");
            seen[i] += 1;
            let q = count_tokens(&c[1].1);
            assert!((50..=500).contains(&q), "question {q}");
            assert!(r.session_id.is_none() && r.position.is_none());
        }
        // Uniform pick: each of the four near 250.
        assert!(seen.iter().all(|c| (190..310).contains(c)), "{seen:?}");
    }

    #[test]
    fn hot_top_prompt_share_is_the_zipf_expectation() {
        let hot = SharedPrompts {
            zipf: Some(1.1),
            ..SharedPrompts::default()
        };
        let n = 100_000;
        let top = hot.picks(n, 3).iter().filter(|p| **p == 0).count();
        // 1 / (1 + 2^-1.1 + 3^-1.1 + 4^-1.1) = 0.504; the standard error is 0.0016.
        let want = 1.0 / (1..=4).map(|r| (r as f64).powf(-1.1)).sum::<f64>();
        let share = top as f64 / n as f64;
        assert!((share - want).abs() < 0.01, "share {share}, want {want}");
        // The bodies of `hot` use those picks.
        let systems = hot.system_prompts(3);
        let picks = hot.picks(300, 3);
        for (r, p) in Workload::Hot
            .requests(300, 3, &Options::default())
            .iter()
            .zip(picks)
        {
            assert_eq!(contents(&body(r))[0].1, systems[p]);
        }
    }

    #[test]
    fn one_prompt_is_the_shortest() {
        let w = SharedPrompts {
            prompts: 1,
            ..SharedPrompts::default()
        };
        let systems = w.system_prompts(1);
        assert_eq!(systems.len(), 1);
        assert_eq!(count_tokens(&systems[0]), 2000);
    }
}
