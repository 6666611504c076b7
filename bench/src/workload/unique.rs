//! W6, the control: nothing shared. Every prompt is one user message of fresh random words, so
//! two prompts diverge from their first tokens (only the chat template's own opening is common).

use std::collections::HashSet;
use std::ops::RangeInclusive;

use super::text::{self, sub_seed};
use super::{message, Options, Request};
use crate::schedule::SplitMix64;

/// Tokens at the start of a prompt that no other prompt of the same run repeats.
pub(crate) const UNIQUE_PREFIX: usize = 64;

/// W6's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Unique {
    /// Prompt size, in tokens (uniform; at least 64 is used).
    pub prompt_tokens: RangeInclusive<usize>,
}

impl Default for Unique {
    /// 200–2,000-token prompts.
    fn default() -> Unique {
        Unique {
            prompt_tokens: 200..=2000,
        }
    }
}

impl Unique {
    /// `n` requests drawn from `seed`. The first 64 tokens of every prompt differ from those of
    /// every other prompt of the list (a repeat, vanishingly unlikely, is drawn again).
    pub fn requests(&self, n: usize, seed: u64, options: &Options) -> Vec<Request> {
        let mut rng = SplitMix64::new(sub_seed(seed, 0x5736));
        let mut starts = HashSet::with_capacity(n);
        (0..n)
            .map(|_| {
                let head = loop {
                    let head = text::words(&mut rng, UNIQUE_PREFIX);
                    if starts.insert(head.clone()) {
                        break head;
                    }
                };
                let lo = *self.prompt_tokens.start();
                let size = rng
                    .between(lo, *self.prompt_tokens.end())
                    .max(UNIQUE_PREFIX);
                let prompt = head + &text::words(&mut rng, size - UNIQUE_PREFIX);
                Request::single(options, vec![message("user", prompt)])
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::tests::{body, contents};
    use crate::workload::text::count_tokens;

    #[test]
    fn no_two_prompts_share_their_first_64_tokens() {
        let reqs = Unique::default().requests(3000, 6, &Options::default());
        let mut heads = HashSet::new();
        let mut firsts = HashSet::new();
        for r in &reqs {
            let c = contents(&body(r));
            assert_eq!(c.len(), 1);
            assert_eq!(c[0].0, "user");
            assert!((200..=2000).contains(&count_tokens(&c[0].1)));
            let words: Vec<&str> = c[0].1.split_whitespace().collect();
            assert!(heads.insert(words[..UNIQUE_PREFIX].join(" ")));
            firsts.insert(words[..4].join(" "));
        }
        // Divergence starts at the very first tokens, not just by token 64.
        assert!(
            firsts.len() > 2900,
            "{} distinct 4-token starts",
            firsts.len()
        );
    }
}
